//! The CLI commands. Local ones (`init`, `server`, `config`, `certs`) work on the data
//! directory; the rest are clients of a running server.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use futures::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::client::{self, key_path, seg, Client, Credentials};
use crate::config::Config;
use crate::output;
use crate::{server, Cli, Command, Format};

#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Print the effective configuration (file + environment + defaults), secrets redacted.
    Show,
}

#[derive(Subcommand)]
pub enum ProjectsCmd {
    /// Create a project (global admins).
    Create {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
        /// Allowed regions, comma-separated (default: the default location's region).
        #[arg(long, value_delimiter = ',')]
        regions: Option<Vec<String>>,
    },
    /// List the projects you can see.
    Ls,
    /// Show one project.
    Show { name: String },
    /// Replace a project's allowed regions (project admins).
    SetRegions {
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        regions: Vec<String>,
    },
    /// List a project's members.
    Members { name: String },
    /// Give a user a role in a project: viewer, editor, maintainer or admin.
    Grant {
        project: String,
        user: String,
        role: String,
    },
    /// Remove a user from a project.
    Revoke { project: String, user: String },
}

#[derive(Subcommand)]
pub enum UsersCmd {
    /// Create a user or a service account (global admins).
    Create {
        name: String,
        /// A service account (for pipelines and jobs) instead of a person.
        #[arg(long)]
        service: bool,
        /// Make them a global administrator.
        #[arg(long)]
        admin: bool,
    },
    /// List users.
    Ls,
    /// Disable a user: their tokens stop working at once.
    Disable { name: String },
    /// Re-enable a disabled user.
    Enable { name: String },
    /// Grant or remove global admin rights.
    SetAdmin {
        name: String,
        #[arg(action = clap::ArgAction::Set)]
        admin: bool,
    },
}

#[derive(Subcommand)]
pub enum TokensCmd {
    /// Create a token; the secret is printed once.
    Create {
        /// A label, e.g. laptop or ci.
        #[arg(long, default_value = "cli")]
        name: String,
        /// Whose token (global admins only; default: you).
        #[arg(long)]
        user: Option<String>,
        /// Lifetime, e.g. 12h, 30d (default: no expiry).
        #[arg(long)]
        expires_in: Option<humantime::Duration>,
    },
    /// List tokens (yours; global admins: anyone's).
    Ls {
        #[arg(long)]
        user: Option<String>,
    },
    /// Revoke a token by id.
    Revoke { id: String },
}

#[derive(Subcommand)]
pub enum ObjectsCmd {
    /// Upload a file (streamed, encrypted at rest).
    Put {
        project: String,
        key: String,
        file: PathBuf,
        /// Storage location (default: the server's default).
        #[arg(long)]
        location: Option<String>,
    },
    /// Download an object to a file (or stdout with `-`).
    Get {
        project: String,
        key: String,
        #[arg(default_value = "-")]
        out: PathBuf,
        #[arg(long)]
        location: Option<String>,
    },
    /// List a project's objects.
    Ls {
        project: String,
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long)]
        location: Option<String>,
    },
    /// Delete an object.
    Rm {
        project: String,
        key: String,
        #[arg(long)]
        location: Option<String>,
    },
    /// List storage locations and their regions.
    Locations,
}

#[derive(Subcommand)]
pub enum AuditCmd {
    /// Show the newest entries (and keep following with --follow).
    Tail {
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: i64,
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        actor: Option<String>,
        #[arg(long)]
        action: Option<String>,
        #[arg(long)]
        project: Option<String>,
        /// success, denied or failure.
        #[arg(long)]
        outcome: Option<String>,
        /// RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
    },
    /// Recompute the hash chain; exits non-zero if any entry was changed, deleted or moved.
    Verify,
}

#[derive(Subcommand)]
pub enum KeysCmd {
    /// Rotate the master key (re-wraps data keys; objects are not rewritten).
    Rotate,
    /// Show master key ids and their source.
    Status,
}

#[derive(Subcommand)]
pub enum CertsCmd {
    /// Write a self-signed certificate and key for localhost (development only).
    Dev {
        /// Directory to write to (default: <home>/tls).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Extra host names or IPs to include.
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
}

pub async fn run(cli: Cli) -> Result<()> {
    let fmt = cli.output;
    let client = || Client::from_env(cli.server.as_deref(), None, None);
    match cli.command {
        Command::Init => init(cli.config.as_deref(), fmt).await,
        Command::Server => {
            let cfg = Config::load(cli.config.as_deref())?;
            init_tracing(&cfg)?;
            server::serve(cfg).await
        }
        Command::Config {
            cmd: ConfigCmd::Show,
        } => {
            let cfg = Config::load(cli.config.as_deref())?;
            if fmt == Format::Json {
                let v: Value = toml::from_str(&cfg.redacted_toml()?)?;
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", cfg.redacted_toml()?);
            }
            Ok(())
        }
        Command::Login { token, ca_cert } => {
            let c = Client::from_env(cli.server.as_deref(), Some(&token), ca_cert.as_deref())?;
            let me: Value = c.get("/api/v1/whoami").await?;
            let path = client::save_credentials(&Credentials {
                server: c.base().to_string(),
                token,
                ca_cert: ca_cert.map(|p| std::fs::canonicalize(&p).unwrap_or(p)),
            })?;
            eprintln!(
                "logged in to {} as {}; credentials saved to {}",
                c.base(),
                me["name"].as_str().unwrap_or("?"),
                path.display()
            );
            Ok(())
        }
        Command::Logout => {
            let path = client::credentials_path();
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
            eprintln!("logged out");
            Ok(())
        }
        Command::Whoami => {
            let me: Value = client()?.get("/api/v1/whoami").await?;
            output::object(fmt, &me);
            Ok(())
        }
        Command::Projects { cmd } => projects(&client()?, fmt, cmd).await,
        Command::Users { cmd } => users(&client()?, fmt, cmd).await,
        Command::Tokens { cmd } => tokens(&client()?, fmt, cmd).await,
        Command::Objects { cmd } => objects(&client()?, fmt, cmd).await,
        Command::Lineage {
            project,
            reference,
            depth,
        } => crate::data_cmd::lineage(&client()?, fmt, &project, &reference, depth).await,
        Command::Runs { project, cmd } => {
            crate::tracking_cmd::runs(&client()?, fmt, &project, cmd).await
        }
        Command::Models { project, cmd } => {
            crate::tracking_cmd::models(&client()?, fmt, &project, cmd).await
        }
        Command::Data { project, cmd } => {
            crate::data_cmd::run(&client()?, fmt, &project, cmd).await
        }
        Command::Audit { cmd } => audit(&client()?, fmt, cmd).await,
        Command::Keys { cmd } => keys(&client()?, fmt, cmd).await,
        Command::Certs {
            cmd: CertsCmd::Dev { out, hosts },
        } => {
            let cfg = Config::load(cli.config.as_deref())?;
            certs_dev(&cfg, out, hosts)
        }
    }
}

fn init_tracing(cfg: &Config) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cfg.log.level))
        .with_context(|| format!("log.level = '{}' is not a valid filter", cfg.log.level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if cfg.log.format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    result.map_err(|e| anyhow::anyhow!("starting the logger: {e}"))
}

fn server_url(cfg: &Config) -> String {
    let scheme = if cfg.tls_enabled() { "https" } else { "http" };
    let bind = &cfg.server.bind;
    let host = bind
        .replace("0.0.0.0:", "127.0.0.1:")
        .replace("[::]:", "[::1]:");
    format!("{scheme}://{host}")
}

/// Prints the bootstrap token (once, on stderr) and stores it for the local CLI if no
/// credentials exist yet.
pub fn announce_bootstrap(cfg: &Config, token: &qanat_governance::NewToken) -> Result<()> {
    eprintln!();
    eprintln!("  Qanat initialised in {}", cfg.home.display());
    eprintln!(
        "  Bootstrap admin '{}' — API token (shown once, store it now):",
        token.info.user
    );
    eprintln!();
    eprintln!("      {}", token.token);
    eprintln!();
    if client::load_credentials()?.is_none() && !cfg.server.bind.ends_with(":0") {
        let path = client::save_credentials(&Credentials {
            server: server_url(cfg),
            token: token.token.clone(),
            ca_cert: cfg.server.tls_cert.clone(),
        })?;
        eprintln!(
            "  The CLI on this machine is logged in (credentials in {}).",
            path.display()
        );
    } else {
        eprintln!("  Log the CLI in with: qanat login --token <token>");
    }
    eprintln!();
    Ok(())
}

async fn init(config: Option<&std::path::Path>, fmt: Format) -> Result<()> {
    let cfg = Config::load(config)?;
    let inst = server::open(&cfg, true).await?;
    let token = server::bootstrap(&cfg, &inst).await?;
    inst.meta.close().await;
    match token {
        Some(t) => {
            if fmt == Format::Json {
                println!(
                    "{}",
                    json!({"home": cfg.home, "admin": t.info.user, "token": t.token})
                );
            } else {
                announce_bootstrap(&cfg, &t)?;
            }
            Ok(())
        }
        None => bail!(
            "{} is already initialised (the bootstrap token was shown when it was created); \
             create a new token with `qanat tokens create`",
            cfg.home.display()
        ),
    }
}

async fn projects(c: &Client, fmt: Format, cmd: ProjectsCmd) -> Result<()> {
    let cols = [
        ("name", "name"),
        ("regions", "allowed_regions"),
        ("description", "description"),
        ("created", "created_at"),
    ];
    match cmd {
        ProjectsCmd::Create {
            name,
            description,
            regions,
        } => {
            let mut body = json!({"name": name, "description": description});
            if let Some(r) = regions {
                body["allowed_regions"] = json!(r);
            }
            let p: Value = c
                .json(c.request(Method::POST, "/api/v1/projects").json(&body))
                .await?;
            output::object(fmt, &p);
        }
        ProjectsCmd::Ls => {
            let ps: Value = c.get("/api/v1/projects").await?;
            output::list(fmt, &ps, &cols);
        }
        ProjectsCmd::Show { name } => {
            let p: Value = c.get(&format!("/api/v1/projects/{}", seg(&name))).await?;
            output::object(fmt, &p);
        }
        ProjectsCmd::SetRegions { name, regions } => {
            let p: Value = c
                .json(
                    c.request(Method::PATCH, &format!("/api/v1/projects/{}", seg(&name)))
                        .json(&json!({"allowed_regions": regions})),
                )
                .await?;
            output::object(fmt, &p);
        }
        ProjectsCmd::Members { name } => {
            let ms: Value = c
                .get(&format!("/api/v1/projects/{}/members", seg(&name)))
                .await?;
            output::list(
                fmt,
                &ms,
                &[("user", "user"), ("role", "role"), ("since", "created_at")],
            );
        }
        ProjectsCmd::Grant {
            project,
            user,
            role,
        } => {
            let m: Value = c
                .json(
                    c.request(
                        Method::PUT,
                        &format!("/api/v1/projects/{}/members/{}", seg(&project), seg(&user)),
                    )
                    .json(&json!({"role": role})),
                )
                .await?;
            output::object(fmt, &m);
        }
        ProjectsCmd::Revoke { project, user } => {
            c.send(c.request(
                Method::DELETE,
                &format!("/api/v1/projects/{}/members/{}", seg(&project), seg(&user)),
            ))
            .await?;
            eprintln!("removed {user} from {project}");
        }
    }
    Ok(())
}

async fn users(c: &Client, fmt: Format, cmd: UsersCmd) -> Result<()> {
    let patch = |name: &str, body: Value| {
        c.request(Method::PATCH, &format!("/api/v1/users/{}", seg(name)))
            .json(&body)
    };
    let u: Value = match cmd {
        UsersCmd::Create {
            name,
            service,
            admin,
        } => {
            let kind = if service { "service" } else { "user" };
            c.json(
                c.request(Method::POST, "/api/v1/users")
                    .json(&json!({"name": name, "kind": kind, "admin": admin})),
            )
            .await?
        }
        UsersCmd::Ls => {
            let us: Value = c.get("/api/v1/users").await?;
            output::list(
                fmt,
                &us,
                &[
                    ("name", "name"),
                    ("kind", "kind"),
                    ("admin", "is_admin"),
                    ("disabled", "disabled"),
                    ("created", "created_at"),
                ],
            );
            return Ok(());
        }
        UsersCmd::Disable { name } => c.json(patch(&name, json!({"disabled": true}))).await?,
        UsersCmd::Enable { name } => c.json(patch(&name, json!({"disabled": false}))).await?,
        UsersCmd::SetAdmin { name, admin } => c.json(patch(&name, json!({"admin": admin}))).await?,
    };
    output::object(fmt, &u);
    Ok(())
}

async fn tokens(c: &Client, fmt: Format, cmd: TokensCmd) -> Result<()> {
    match cmd {
        TokensCmd::Create {
            name,
            user,
            expires_in,
        } => {
            let mut body = json!({"name": name});
            if let Some(u) = user {
                body["user"] = json!(u);
            }
            if let Some(d) = expires_in {
                body["expires_in_seconds"] = json!(Duration::from(d).as_secs());
            }
            let t: Value = c
                .json(c.request(Method::POST, "/api/v1/tokens").json(&body))
                .await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                eprintln!(
                    "token {} for {} (shown once, store it now):",
                    t["id"].as_str().unwrap_or("?"),
                    t["user"].as_str().unwrap_or("?")
                );
                println!("{}", t["token"].as_str().unwrap_or(""));
            }
        }
        TokensCmd::Ls { user } => {
            let path = match user {
                Some(u) => format!("/api/v1/tokens?user={}", seg(&u)),
                None => "/api/v1/tokens".into(),
            };
            let ts: Value = c.get(&path).await?;
            output::list(
                fmt,
                &ts,
                &[
                    ("id", "id"),
                    ("user", "user"),
                    ("name", "name"),
                    ("created", "created_at"),
                    ("expires", "expires_at"),
                    ("revoked", "revoked_at"),
                    ("last used", "last_used_at"),
                ],
            );
        }
        TokensCmd::Revoke { id } => {
            let t: Value = c
                .json(c.request(Method::DELETE, &format!("/api/v1/tokens/{}", seg(&id))))
                .await?;
            output::object(fmt, &t);
        }
    }
    Ok(())
}

/// `/api/v1/projects/{project}/objects/{key}[?location=…]`, each part encoded.
fn object_path(project: &str, key: &str, location: &Option<String>) -> String {
    let path = format!(
        "/api/v1/projects/{}/objects/{}",
        seg(project),
        key_path(key)
    );
    match location {
        Some(l) => format!("{path}?location={}", seg(l)),
        None => path,
    }
}

async fn objects(c: &Client, fmt: Format, cmd: ObjectsCmd) -> Result<()> {
    match cmd {
        ObjectsCmd::Put {
            project,
            key,
            file,
            location,
        } => {
            let f = tokio::fs::File::open(&file)
                .await
                .with_context(|| format!("opening {}", file.display()))?;
            let len = f.metadata().await?.len();
            let body = reqwest::Body::wrap_stream(tokio_util_stream(f));
            let path = object_path(&project, &key, &location);
            let v: Value = c
                .json(
                    c.request(Method::PUT, &path)
                        .header(reqwest::header::CONTENT_LENGTH, len)
                        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                        .body(body),
                )
                .await?;
            output::object(fmt, &v);
        }
        ObjectsCmd::Get {
            project,
            key,
            out,
            location,
        } => {
            let path = object_path(&project, &key, &location);
            let resp = c.send(c.request(Method::GET, &path)).await?;
            let mut stream = resp.bytes_stream();
            if out.as_os_str() == "-" {
                let mut stdout = tokio::io::stdout();
                while let Some(chunk) = stream.next().await {
                    stdout
                        .write_all(&chunk.context("download interrupted")?)
                        .await?;
                }
                stdout.flush().await?;
            } else {
                // Write beside the target and rename, so a failed download leaves no
                // partial file under the requested name.
                let tmp = out.with_extension("qanat-partial");
                let mut f = tokio::fs::File::create(&tmp)
                    .await
                    .with_context(|| format!("creating {}", tmp.display()))?;
                let result: Result<()> = async {
                    while let Some(chunk) = stream.next().await {
                        f.write_all(&chunk.context("download interrupted")?).await?;
                    }
                    f.sync_all().await?;
                    Ok(())
                }
                .await;
                if let Err(e) = result {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(e);
                }
                tokio::fs::rename(&tmp, &out).await?;
            }
        }
        ObjectsCmd::Ls {
            project,
            prefix,
            location,
        } => {
            let mut path = format!("/api/v1/projects/{}/objects", seg(&project));
            let mut q = vec![];
            if let Some(p) = prefix {
                q.push(format!("prefix={}", seg(&p)));
            }
            if let Some(l) = location {
                q.push(format!("location={}", seg(&l)));
            }
            if !q.is_empty() {
                path = format!("{path}?{}", q.join("&"));
            }
            let os: Value = c.get(&path).await?;
            output::list(
                fmt,
                &os,
                &[
                    ("key", "key"),
                    ("size", "size"),
                    ("location", "location"),
                    ("region", "region"),
                    ("modified", "last_modified"),
                ],
            );
        }
        ObjectsCmd::Rm {
            project,
            key,
            location,
        } => {
            let path = object_path(&project, &key, &location);
            c.send(c.request(Method::DELETE, &path)).await?;
            eprintln!("deleted {key}");
        }
        ObjectsCmd::Locations => {
            let ls: Value = c.get("/api/v1/storage/locations").await?;
            output::list(
                fmt,
                &ls,
                &[
                    ("name", "name"),
                    ("region", "region"),
                    ("kind", "kind"),
                    ("default", "default"),
                ],
            );
        }
    }
    Ok(())
}

fn tokio_util_stream(
    f: tokio::fs::File,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures::stream::unfold(f, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 20];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    })
}

async fn audit(c: &Client, fmt: Format, cmd: AuditCmd) -> Result<()> {
    let cols = [
        ("seq", "seq"),
        ("time", "time"),
        ("actor", "actor"),
        ("action", "action"),
        ("outcome", "outcome"),
        ("resource", "resource"),
        ("detail", "detail"),
    ];
    match cmd {
        AuditCmd::Tail {
            lines,
            follow,
            actor,
            action,
            project,
            outcome,
            since,
        } => {
            let mut filters = vec![format!("limit={}", lines.clamp(1, 1000))];
            for (k, v) in [
                ("actor", actor),
                ("action", action),
                ("project", project),
                ("outcome", outcome),
                ("since", since),
            ] {
                if let Some(v) = v {
                    filters.push(format!("{k}={}", seg(&v)));
                }
            }
            let entries: Value = c
                .get(&format!("/api/v1/audit?{}", filters.join("&")))
                .await?;
            output::list(fmt, &entries, &cols);
            if !follow {
                return Ok(());
            }
            let mut last = entries
                .as_array()
                .and_then(|a| a.last())
                .and_then(|e| e["seq"].as_i64())
                .unwrap_or(0);
            filters[0] = "limit=1000".into();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let more: Value = c
                    .get(&format!(
                        "/api/v1/audit?{}&after_seq={last}",
                        filters.join("&")
                    ))
                    .await?;
                if let Some(a) = more.as_array().filter(|a| !a.is_empty()) {
                    last = a.last().and_then(|e| e["seq"].as_i64()).unwrap_or(last);
                    output::list(fmt, &more, &cols);
                }
            }
        }
        AuditCmd::Verify => {
            let v: Value = c.get("/api/v1/audit/verify").await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if v["ok"].as_bool() == Some(true) {
                println!(
                    "audit chain intact: {} entries verified",
                    v["entries_checked"]
                );
            } else {
                println!("AUDIT CHAIN BROKEN:");
                for p in v["problems"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    println!(
                        "  entry {}: {} — {}",
                        p["seq"],
                        p["kind"].as_str().unwrap_or(""),
                        p["message"].as_str().unwrap_or("")
                    );
                }
            }
            if v["ok"].as_bool() != Some(true) {
                bail!("the audit log has been tampered with");
            }
        }
    }
    Ok(())
}

async fn keys(c: &Client, fmt: Format, cmd: KeysCmd) -> Result<()> {
    let v: Value = match cmd {
        KeysCmd::Rotate => {
            c.json(c.request(Method::POST, "/api/v1/admin/keys/rotate"))
                .await?
        }
        KeysCmd::Status => c.get("/api/v1/admin/keys").await?,
    };
    output::object(fmt, &v);
    Ok(())
}

fn certs_dev(cfg: &Config, out: Option<PathBuf>, hosts: Vec<String>) -> Result<()> {
    let dir = out.unwrap_or_else(|| cfg.home.join("tls"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    names.extend(hosts);
    let ck =
        rcgen::generate_simple_self_signed(names.clone()).context("generating the certificate")?;
    let cert_path = dir.join("dev-cert.pem");
    let key_path = dir.join("dev-key.pem");
    std::fs::write(&cert_path, ck.cert.pem())
        .with_context(|| format!("writing {}", cert_path.display()))?;
    qanat_store::write_secret_file(&key_path, ck.key_pair.serialize_pem().as_bytes())?;
    eprintln!(
        "wrote a self-signed certificate for {} (development only):",
        names.join(", ")
    );
    eprintln!("  certificate: {}", cert_path.display());
    eprintln!("  private key: {} (0600)", key_path.display());
    eprintln!("enable TLS 1.3 with, in qanat.toml:");
    eprintln!(
        "  [server]\n  tls_cert = \"{}\"\n  tls_key = \"{}\"",
        cert_path.display(),
        key_path.display()
    );
    eprintln!("and log the CLI in with: qanat login --server https://127.0.0.1:8080 --ca-cert {} --token <token>", cert_path.display());
    Ok(())
}
