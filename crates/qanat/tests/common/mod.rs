//! Runs the real `qanat` binary against a temporary data directory.

#![allow(dead_code)]

pub mod cases;
pub mod jobs;
pub mod registry;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_qanat");

/// A data directory plus a running server.
pub struct Qanat {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub admin_token: String,
    pub child: Option<Child>,
    pub extra_env: Vec<(String, String)>,
    /// Directories the server's configuration points into.
    pub keep: Vec<tempfile::TempDir>,
    /// The unprivileged uid the server runs as (`setpriv`), when the test runs as root
    /// and asked for one; None: the test's own user.
    pub as_uid: Option<u32>,
}

/// The uid an unprivileged server runs as in [`Qanat::start_unprivileged`].
pub const NOBODY: u32 = 65534;

pub fn base_cmd(dir: &Path, extra_env: &[(String, String)]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("QANAT_HOME", dir.join("home"))
        .env("QANAT_CREDENTIALS", dir.join("credentials.json"))
        .env("QANAT_SERVER_BIND", "127.0.0.1:0")
        .env("QANAT_LOG_LEVEL", "warn")
        // Jobs write what a test reads back in `shared` (their sandbox hides the rest).
        .env("QANAT_JOBS_SANDBOX_WRITABLE_PATHS", dir.join("shared"))
        .current_dir(dir);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `cmd` to completion: (success, stdout, stderr).
pub fn outcome(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().expect("run qanat");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` to completion and returns its output, panicking with its stderr when it
/// fails.
pub fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("run qanat");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Qanat {
    /// `qanat init` in a fresh directory, then `qanat server`.
    pub fn start() -> Qanat {
        Self::start_with(vec![])
    }

    /// A server whose default location `local` (uae-north) is joined by local
    /// locations `(name, region)`: a project may only allow regions that have one.
    pub fn start_with_locations(extra: &[(&str, &str)]) -> Qanat {
        Self::start_with_locations_env(extra, Vec::new())
    }

    /// [`Self::start_with_locations`] with more environment for the server.
    pub fn start_with_locations_env(
        extra: &[(&str, &str)],
        mut env: Vec<(String, String)>,
    ) -> Qanat {
        let cfg = tempfile::tempdir().expect("tempdir");
        let mut toml = String::from("[storage]\ndefault_location = \"local\"\n");
        let all = [("local", "uae-north")]
            .into_iter()
            .chain(extra.iter().copied());
        for (name, region) in all {
            toml.push_str(&format!(
                "\n[[storage.locations]]\nname = \"{name}\"\nurl = \"{}\"\nregion = \"{region}\"\n",
                cfg.path().join(name).display()
            ));
        }
        let path = cfg.path().join("qanat.toml");
        std::fs::write(&path, toml).expect("config");
        env.push(("QANAT_CONFIG".into(), path.display().to_string()));
        let mut q = Self::start_with(env);
        q.keep.push(cfg);
        q
    }

    pub fn start_with(extra_env: Vec<(String, String)>) -> Qanat {
        Self::start_as(extra_env, None)
    }

    /// When the test runs as root: `init` and the server as the unprivileged uid
    /// [`NOBODY`] (its data directory given to it, the binary copied where it can run
    /// it). Otherwise as the test's own user, which is unprivileged already.
    pub fn start_unprivileged(extra_env: Vec<(String, String)>) -> Qanat {
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
            })
            .unwrap_or(false);
        Self::start_as(extra_env, root.then_some(NOBODY))
    }

    fn start_as(extra_env: Vec<(String, String)>, as_uid: Option<u32>) -> Qanat {
        let dir = tempfile::tempdir().expect("tempdir");
        shared_dir(dir.path());
        if let Some(uid) = as_uid {
            let bin = dir.path().join("bin");
            std::fs::create_dir_all(&bin).expect("bin dir");
            std::fs::copy(BIN, bin.join("qanat")).expect("copy the binary");
            chown_tree(dir.path(), uid);
        }
        let mut init = server_cmd(dir.path(), &extra_env, as_uid);
        let out = run_ok(init.args(["init", "--output", "json"]));
        let v: Value = serde_json::from_slice(&out.stdout).expect("init prints JSON");
        let admin_token = v["token"].as_str().expect("token").to_string();
        let mut q = Qanat {
            dir,
            url: String::new(),
            admin_token,
            child: None,
            extra_env,
            keep: Vec::new(),
            as_uid,
        };
        q.spawn_server();
        q
    }

    /// The directory jobs may write and tests read (`jobs.sandbox.writable_paths`).
    pub fn shared(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    /// A server on an existing data directory: `home` is copied into a fresh temporary
    /// directory (the original is left as it is) and served with `admin_token`, plus
    /// `extra_env` (e.g. `QANAT_METADATA_URL`).
    pub fn open_copy_of(home: &Path, admin_token: &str, extra_env: Vec<(String, String)>) -> Qanat {
        let dir = tempfile::tempdir().expect("tempdir");
        shared_dir(dir.path());
        copy_dir(home, &dir.path().join("home"));
        // git does not keep a key file's 0600, which the server insists on; an operator
        // restoring a backup sets it back the same way.
        let key = dir.path().join("home/master.key");
        if key.exists() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 600 master.key");
        }
        let mut q = Qanat {
            dir,
            url: String::new(),
            admin_token: admin_token.to_string(),
            child: None,
            extra_env,
            keep: Vec::new(),
            as_uid: None,
        };
        q.spawn_server();
        q
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The server log's warnings and errors (the last `n`), for a failing check's
    /// message: the log goes with the temporary directory.
    pub fn log_trouble(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Starts (or restarts) the server and waits for its "listening" line.
    pub fn spawn_server(&mut self) {
        // The server's log goes to <dir>/server.log (appended across restarts).
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("server log");
        let mut child = server_cmd(self.dir.path(), &self.extra_env, self.as_uid)
            .arg("server")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn qanat server");
        let stdout = child.stdout.take().expect("stdout");
        // Held before waiting, so that a server that never says it listens is killed
        // on drop.
        self.child = Some(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("qanat server listening on ") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        self.url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => url,
            // Exited (a refused migration, a bad key file…) or hung: show why.
            Err(e) => panic!(
                "server did not start ({e}); its log:\n{}",
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
            ),
        };
    }

    /// SIGKILL: no shutdown hooks, no flushing.
    pub fn kill_hard(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("kill -9");
            let _ = c.wait();
        }
    }

    /// Runs a CLI command against this server; returns (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        self.cli_as(&self.admin_token, args)
    }

    /// Runs `line` (arguments split at white space) as the admin; it must succeed.
    /// Its stdout.
    pub fn cli_ok(&self, line: &str) -> String {
        let args: Vec<&str> = line.split_whitespace().collect();
        let (ok, out, err) = self.cli(&args);
        assert!(ok, "qanat {line}\n{out}\n{err}");
        out
    }

    /// Runs a CLI command as the holder of `token`.
    pub fn cli_as(&self, token: &str, args: &[&str]) -> (bool, String, String) {
        outcome(
            base_cmd(self.dir.path(), &self.extra_env)
                .env("QANAT_SERVER_URL", &self.url)
                .env("QANAT_TOKEN", token)
                .args(args),
        )
    }

    /// Sends a JSON request as the admin; (status, JSON body).
    pub fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.http().send(&self.admin_token, method, path, body)
    }

    /// A request as the admin, to add a body or headers to.
    pub fn request(&self, method: &str, path: &str) -> reqwest::blocking::RequestBuilder {
        self.http().raw(&self.admin_token, method, path)
    }

    /// A client of the server; it trusts the `QANAT_CA_CERT` the server was started
    /// with, as the CLI does.
    pub fn http(&self) -> Http {
        let mut b = reqwest::blocking::Client::builder();
        if let Some((_, ca)) = self.extra_env.iter().find(|(k, _)| k == "QANAT_CA_CERT") {
            let pem = std::fs::read(ca).expect("read the CA certificate");
            b = b.add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("PEM"));
        }
        Http {
            client: b.build().expect("HTTP client"),
            url: self.url.clone(),
        }
    }

    /// Creates a user with `role` in `project` and returns their token.
    pub fn user_with_role(&self, name: &str, project: &str, role: &str) -> String {
        let h = self.http();
        let (s, _) = h.send(
            &self.admin_token,
            "POST",
            "/api/v1/users",
            Some(serde_json::json!({"name": name})),
        );
        assert_eq!(s, 201, "create user {name}");
        let (s, _) = h.send(
            &self.admin_token,
            "PUT",
            &format!("/api/v1/projects/{project}/members/{name}"),
            Some(serde_json::json!({"role": role})),
        );
        assert_eq!(s, 200, "grant {role}");
        let (s, t) = h.send(
            &self.admin_token,
            "POST",
            "/api/v1/tokens",
            Some(serde_json::json!({"name": "test", "user": name})),
        );
        assert_eq!(s, 201);
        t["token"].as_str().expect("token").to_string()
    }

    pub fn create_project(&self, name: &str, regions: &[&str]) {
        let (s, body) = self.http().send(
            &self.admin_token,
            "POST",
            "/api/v1/projects",
            Some(serde_json::json!({"name": name, "allowed_regions": regions})),
        );
        assert_eq!(s, 201, "create project: {body}");
    }
}

impl Drop for Qanat {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

pub struct Http {
    pub client: reqwest::blocking::Client,
    pub url: String,
}

impl Http {
    /// Sends a JSON request with a bearer token ("" for none); returns (status, JSON body).
    pub fn send(&self, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self.client.request(method, format!("{}{}", self.url, path));
        if !token.is_empty() {
            rb = rb.bearer_auth(token);
        }
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb.send().expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub fn raw(&self, token: &str, method: &str, path: &str) -> reqwest::blocking::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let rb = self.client.request(method, format!("{}{}", self.url, path));
        if token.is_empty() {
            rb
        } else {
            rb.bearer_auth(token)
        }
    }
}

/// `base_cmd`, run as `uid` through `setpriv` (with the copy of the binary that uid
/// can run) when one is given.
pub fn server_cmd(dir: &Path, extra_env: &[(String, String)], as_uid: Option<u32>) -> Command {
    let base = base_cmd(dir, extra_env);
    let Some(uid) = as_uid else { return base };
    let mut cmd = Command::new("setpriv");
    cmd.args([
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--clear-groups".into(),
        "--inh-caps=-all".into(),
        "--bounding-set=-all".into(),
    ])
    .arg(dir.join("bin/qanat"))
    .env_clear()
    .envs(
        base.get_envs()
            .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
    )
    .current_dir(dir);
    cmd
}

/// `<dir>/shared`, which any job's uid may write.
fn shared_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).expect("shared dir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
}

/// Gives `dir` and everything in it to `uid`.
pub fn chown_tree(dir: &Path, uid: u32) {
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid)).expect("chown");
    if dir.is_dir() && !dir.is_symlink() {
        for e in std::fs::read_dir(dir).expect("read dir").flatten() {
            chown_tree(&e.path(), uid);
        }
    }
}

/// Copies a directory tree (files and directories only).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// Every file below `dir` (none when it does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A browser's client: no redirects followed, cookies sent by hand.
pub fn browser() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

pub fn set_cookie(resp: &reqwest::blocking::Response, name: &str) -> Option<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(str::to_string)
}

pub fn csrf_of(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..at + 64].to_string()
}

/// Logs in to the UI with `token`; the session cookie (`qanat_session=…`).
pub fn ui_login(q: &Qanat, token: &str) -> String {
    let b = browser();
    let form = b.get(format!("{}/ui/login", q.url)).send().expect("form");
    let login_cookie = set_cookie(&form, "qanat_login").expect("login cookie");
    let pair = login_cookie
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    let csrf = csrf_of(&form.text().unwrap_or_default());
    let resp = b
        .post(format!("{}/ui/login", q.url))
        .header("cookie", pair)
        .form(&[("token", token), ("csrf", csrf.as_str()), ("next", "/ui/")])
        .send()
        .expect("login");
    assert_eq!(resp.status(), 303, "{:?}", resp.text());
    let session = set_cookie(&resp, "qanat_session").expect("session cookie");
    session.split(';').next().unwrap_or_default().to_string()
}
