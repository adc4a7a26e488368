//! Hostile jobs, through the binary: an editor's job tries each attack on the server's
//! keys, files, process and limits, and on other jobs; each is refused or contained,
//! the server keeps answering, nothing it holds changes, and nothing is left running.
//! The same attacks run against a root server (each rank gets a uid of its own) and
//! an unprivileged one (each rank gets a user namespace).
//!
//! A job prints `ESCAPED` only when an attack worked; its log must never hold it.

mod common;

use std::time::Duration;

use common::Qanat;
use serde_json::{json, Value};

struct Attack {
    name: &'static str,
    spec: Value,
    /// The state the job must end in.
    state: &'static str,
    /// Words its reason must hold.
    reason: &'static str,
}

fn attack(name: &'static str, command: String) -> Attack {
    Attack {
        name,
        spec: json!({"name": name, "command": command}),
        state: "succeeded",
        reason: "",
    }
}

fn server(unprivileged: bool) -> Qanat {
    let env = vec![
        ("QANAT_JOBS_CPUS".into(), "2".into()),
        ("QANAT_JOBS_KILL_GRACE_SECS".into(), "2".into()),
    ];
    if unprivileged {
        Qanat::start_unprivileged(env)
    } else {
        Qanat::start_with(env)
    }
}

fn submit(q: &Qanat, token: &str, spec: &Value) -> (u16, Value) {
    let mut spec = spec.clone();
    spec["resources"] = json!({"cpus": 0.1, "memory": "256MiB"});
    q.http()
        .send(token, "POST", "/api/v1/projects/default/jobs", Some(spec))
}

/// Every process on this machine whose environment names job `jid`.
fn processes_of(jid: &str) -> Vec<String> {
    common::jobs::processes_with_env(&[format!("QANAT_JOB_ID={jid}")])
}

fn contained(unprivileged: bool) {
    let q = server(unprivileged);
    let home = q.home();
    let h = home.display();
    let shared = q.shared();
    let server_pid = q.child.as_ref().map_or(0, |c| c.id());
    let key_before = std::fs::read(home.join("master.key")).expect("master.key");
    let editor = q.user_with_role("mallory", "default", "editor");

    // The job every other job tries to reach: its files, its log, its token.
    let (s, victim) = submit(
        &q,
        &editor,
        &json!({"name": "victim", "command": format!(
            "echo victim-secret > secret; echo victim-log-line; \
             while [ ! -e {}/release ]; do sleep 0.1; done", shared.display())}),
    );
    assert_eq!(s, 201, "{victim}");
    let vid = victim["job_id"].as_str().expect("id").to_string();
    q.wait_for_job("default", &vid, 30, |j| j["state"] == "running");
    let vwork = home.join("jobs").join(&vid).join("work");
    for _ in 0..100 {
        if vwork.join("secret").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = vwork.display();

    let mut attacks = vec![
        attack("read-the-master-key", format!("cat {h}/master.key && echo ESCAPED; test -e {h}/master.key && echo ESCAPED; true")),
        attack("read-the-metadata-database", format!("for f in {h}/*.db {h}/*.db-wal; do test -e \"$f\" && echo ESCAPED $f; done; true")),
        attack(
            "make-itself-admin-in-the-database",
            format!("python3 -c \"import sqlite3,glob\nfor f in glob.glob('{h}/*.db'):\n  c = sqlite3.connect(f); c.execute('UPDATE users SET is_admin = 1'); c.commit(); print('ESCAPED')\" ; true"),
        ),
        attack("read-another-jobs-files", format!("cat {v}/secret && echo ESCAPED; cat {h}/jobs/{vid}/attempt-1/rank-0.log && echo ESCAPED; true")),
        attack("read-another-jobs-token", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep QANAT_TOKEN= | grep -v \"$QANAT_TOKEN\" && echo ESCAPED; true".into()),
        attack("see-the-server-process", format!("test -e /proc/{server_pid} && echo ESCAPED; kill -0 {server_pid} 2>/dev/null && echo ESCAPED; true")),
        attack("signal-the-server", format!("kill -9 {server_pid} 2>/dev/null && echo ESCAPED; kill -9 $PPID; sleep 1; true")),
        attack("replace-its-log-by-a-link", format!("ln -sf /dev/zero {h}/jobs/$QANAT_JOB_ID/attempt-1/rank-0.log && echo ESCAPED; true")),
        attack("leave-its-cgroup", "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do (echo $$ > $f) 2>/dev/null && echo ESCAPED $f; done; true".into()),
        attack("write-the-system", "touch /usr/qanat-escape 2>/dev/null && echo ESCAPED; touch /etc/qanat-escape 2>/dev/null && echo ESCAPED; true".into()),
        attack("read-the-shadow-file", "cat /etc/shadow >/dev/null 2>&1 && echo ESCAPED; true".into()),
        attack("keep-a-capability", "grep -q 'CapEff:.*0000000000000000' /proc/self/status || echo ESCAPED caps; grep -q 'NoNewPrivs:.*1' /proc/self/status || echo ESCAPED nnp; true".into()),
        attack("uncover-the-servers-home", format!("umount {h} 2>/dev/null && echo ESCAPED; mount -t tmpfs none /mnt 2>/dev/null && echo ESCAPED; true")),
        attack("outlive-the-job", "setsid sleep 317 </dev/null >/dev/null 2>&1 & echo started".into()),
        Attack {
            name: "kill-its-parent-and-fail",
            spec: json!({"name": "kill-parent", "command": "kill -9 $PPID; sleep 0.5; exit 3"}),
            state: "failed",
            reason: "exited with code 3",
        },
        Attack {
            name: "an-output-linking-to-the-shadow-file",
            spec: json!({"name": "shadow-out", "command": "ln -s /etc/shadow stolen", "outputs": ["stolen"]}),
            state: "failed",
            reason: "was not produced inside the job's working directory",
        },
    ];
    // Where no sandbox can be built the suite says so, not silently passes.
    let (s, probe) = q.api("GET", "/api/v1/executors", None);
    assert_eq!(s, 200);
    let enforcement = probe["executors"][0]["enforcement"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(enforcement.starts_with("sandbox: "), "{enforcement}");
    if unprivileged {
        assert!(enforcement.contains("user namespace"), "{enforcement}");
    }

    let mut ids = Vec::new();
    for a in attacks.drain(..) {
        let (s, j) = submit(&q, &editor, &a.spec);
        assert_eq!(s, 201, "{}: {j}", a.name);
        ids.push((a, j["job_id"].as_str().expect("id").to_string()));
    }
    for (a, id) in &ids {
        let j = q.job_finished("default", id, 90);
        let log = q.job_log("default", id)["data"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert_eq!(j["state"], a.state, "{}: {j:#}\n{log}", a.name);
        let reason = j["reason"].as_str().unwrap_or("");
        assert!(reason.contains(a.reason), "{}: {reason}", a.name);
        assert!(!log.contains("ESCAPED"), "{} escaped:\n{log}", a.name);
        assert!(!log.contains("victim-secret"), "{}:\n{log}", a.name);
        assert_eq!(
            j["enforcement"].as_str().unwrap_or("").split(';').next(),
            enforcement.split(';').next(),
            "{}",
            a.name
        );
    }
    std::fs::write(shared.join("release"), "").expect("release the victim");
    let vj = q.job_finished("default", &vid, 30);
    assert_eq!(vj["state"], "succeeded", "{vj:#}");

    // The server answers, holds what it held, and made nobody an admin.
    let (s, _) = q.http().send("", "GET", "/healthz", None);
    assert_eq!(s, 200, "the server stopped answering");
    assert_eq!(q.child.as_ref().map_or(0, |c| c.id()), server_pid);
    assert_eq!(
        std::fs::read(home.join("master.key")).expect("key"),
        key_before
    );
    let (s, _) = q.http().send(&editor, "GET", "/api/v1/users", None);
    assert_eq!(s, 403, "the editor became an admin");
    for (a, id) in ids.iter().filter(|(a, _)| !a.spec["outputs"].is_null()) {
        let run = q.job("default", id)["run_id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let listed = q.mlflow_get("default", &format!("artifacts/list?run_id={run}"));
        assert!(
            listed["files"].as_array().is_none_or(|f| f.is_empty()),
            "{}: {listed}",
            a.name
        );
    }

    // No process of any attack is left, the setsid child included.
    for (a, id) in &ids {
        let left = processes_of(id);
        assert!(left.is_empty(), "{} left processes {left:?}", a.name);
    }
    // Working directories stay the job's own: the server's home is refused at submit.
    let (s, e) = submit(
        &q,
        &editor,
        &json!({"name": "wd", "command": ["true"], "working_dir": h.to_string(), "outputs": ["master.key"]}),
    );
    assert_eq!(s, 400, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or("")
            .contains("outside the job's own directory"),
        "{e}"
    );
    // So do outputs that climb out of it.
    let (s, e) = submit(
        &q,
        &editor,
        &json!({"name": "climb", "command": ["true"], "outputs": ["../../../master.key"]}),
    );
    assert_eq!(s, 400, "{e}");
}

#[test]
fn hostile_jobs_are_contained_on_a_root_server() {
    contained(false);
}

#[test]
fn hostile_jobs_are_contained_on_an_unprivileged_server() {
    contained(true);
}

mod graphs {
    //! ONNX graphs an attacker uploads: each declares or computes more than a server
    //! can hold.
    use qanat_runtime::onnx::build::{model, node, pb, relu_chain, value};

    /// An input of `[1, 2^40]` floats (4 TiB).
    pub fn huge_input() -> Vec<u8> {
        model(pb::GraphProto {
            node: vec![node("Relu", &["x"], "y")],
            input: vec![value("x", &[1, 1 << 40])],
            output: vec![value("y", &[1, 1 << 40])],
            ..pb::GraphProto::default()
        })
    }

    /// 100,000 `Relu`s in a chain.
    pub fn long_chain() -> Vec<u8> {
        model(pb::GraphProto {
            node: relu_chain(100_000),
            input: vec![value("x", &[1, 4])],
            output: vec![value("y", &[1, 4])],
            ..pb::GraphProto::default()
        })
    }

    /// Declares nothing large, but computes a `[2^20, 2^20]` constant (4 TiB) when a
    /// runtime folds its constants at load.
    pub fn constant_bomb() -> Vec<u8> {
        model(pb::GraphProto {
            node: vec![
                node("ConstantOfShape", &["shape"], "big"),
                node("Add", &["x", "big"], "y"),
            ],
            initializer: vec![pb::TensorProto {
                name: "shape".into(),
                dims: vec![2],
                data_type: pb::tensor_proto::DataType::Int64 as i32,
                int64_data: vec![1 << 20, 1 << 20],
                ..pb::TensorProto::default()
            }],
            input: vec![value("x", &[1, 1])],
            output: vec![value("y", &[])],
            ..pb::GraphProto::default()
        })
    }
}

#[test]
fn hostile_models_are_refused_and_the_server_keeps_answering() {
    let mut q = Qanat::start_with(vec![]);
    let editor = q.user_with_role("mallory", "default", "editor");
    for (name, graph, says) in [
        (
            "huge-input",
            graphs::huge_input(),
            "a dimension of 1099511627776",
        ),
        ("long-chain", graphs::long_chain(), "nodes"),
        ("constant-bomb", graphs::constant_bomb(), "while loading it"),
    ] {
        q.register_files(&editor, name, &[("model.onnx", graph)]);
        // Refused the same way when asked again (the second time from memory).
        for _ in 0..2 {
            let (s, v) = q
                .http()
                .send(&editor, "GET", &format!("/v2/models/{name}"), None);
            assert!((400..500).contains(&s), "{name}: {s} {v}");
            let said = v.to_string();
            assert!(
                said.contains("cannot be served") && said.contains(says),
                "{name}: {said}"
            );
            // The runtime's own words (paths, source lines) stay in the server's log.
            assert!(
                !said.contains("/root/") && !said.contains(".rs:"),
                "{name}: {said}"
            );
        }
        // Nor is it deployed.
        let (s, v) = q.http().send(
            &editor,
            "POST",
            "/api/v1/projects/default/deployments",
            Some(json!({"name": format!("{name}-web"), "spec": {"model": name, "targets": [{"version": "1", "weight": 100}]}})),
        );
        assert_eq!(s, 400, "{name}: {v}");
        assert!(v.to_string().contains("cannot be served"), "{name}: {v}");
        let (s, _) = q.http().send("", "GET", "/healthz", None);
        assert_eq!(s, 200, "the server stopped answering after {name}");
    }
    let pid = q.child.as_ref().map_or(0, |c| c.id());
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the server that was started is gone"
    );
    // Each is marked in the registry with its reason...
    let (s, v) = q.http().send(
        &editor,
        "GET",
        "/api/2.0/mlflow/model-versions/get?name=huge-input&version=1",
        None,
    );
    assert_eq!(s, 200, "{v}");
    let mark = v["model_version"]["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["key"] == "qanat.unservable")
        .map(|t| t["value"].to_string())
        .unwrap_or_default();
    assert!(mark.contains("a dimension of 1099511627776"), "{v}");
    let out = q.cli_ok("models -p default show huge-input");
    assert!(
        out.contains("version 1 is not served") && out.contains("cannot be served"),
        "{out}"
    );
    // ...which a restarted server reads instead of loading the graph again: the
    // refusal says what the mark says.
    let (s, v) = q.http().send(
        &editor,
        "POST",
        "/api/2.0/mlflow/model-versions/set-tag",
        Some(json!({"name": "huge-input", "version": "1", "key": "qanat.unservable", "value": "refused before: see the first load"})),
    );
    assert_eq!(s, 200, "{v}");
    q.kill_hard();
    q.spawn_server();
    let (s, v) = q.http().send(&editor, "GET", "/v2/models/huge-input", None);
    assert_eq!(s, 400, "{v}");
    assert!(
        v.to_string().contains("refused before: see the first load"),
        "{v}"
    );
}

#[test]
fn a_job_that_kills_an_unsandboxed_server_twice_fails_instead_of_looping() {
    // An admin's explicit opt-out: ranks run as the server's user, said everywhere.
    let mut q = Qanat::start_with(vec![("QANAT_JOBS_SANDBOX_ENABLED".into(), "false".into())]);
    let (s, executors) = q.api("GET", "/api/v1/executors", None);
    assert_eq!(s, 200);
    let enforcement = executors["executors"][0]["enforcement"]
        .as_str()
        .unwrap_or("");
    assert!(enforcement.starts_with("unsandboxed"), "{enforcement}");
    let j = q.submit_job(
        "default",
        json!({"name": "killer", "command": "sleep 2; kill -9 $PPID; sleep 30"}),
    );
    let id = j["job_id"].as_str().expect("id").to_string();
    // Each start of the job kills the server; restarted, it recovers the job.
    for round in 1..=2 {
        let child = q.child.as_mut().expect("server");
        let mut died = false;
        for _ in 0..300 {
            if child.try_wait().expect("wait").is_some() {
                died = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            died,
            "round {round}: the unsandboxed job did not kill the server"
        );
        q.child = None;
        q.spawn_server();
    }
    let j = q.job_finished("default", &id, 30);
    assert_eq!(j["state"], "failed", "{j:#}");
    let reason = j["reason"].as_str().unwrap_or("");
    assert!(reason.contains("a crash loop?"), "{reason}");
    assert!(
        j["enforcement"]
            .as_str()
            .unwrap_or("")
            .starts_with("unsandboxed"),
        "{j:#}"
    );
    // And the server stays up: the job is not started a third time.
    std::thread::sleep(Duration::from_secs(2));
    let child = q.child.as_mut().expect("server");
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the server died a third time"
    );
    let (s, _) = q.http().send("", "GET", "/healthz", None);
    assert_eq!(s, 200);
}

#[test]
fn a_jobs_loader_variables_reach_only_its_program() {
    // A preloaded library that notes the capabilities of every process it runs in.
    let Ok(_) = std::process::Command::new("gcc").arg("--version").output() else {
        eprintln!("skipped: no gcc to build the preloaded library");
        return;
    };
    for unprivileged in [false, true] {
        let q = server(unprivileged);
        let shared = q.shared();
        let notes = shared.join("preloaded");
        let src = shared.join("evil.c");
        std::fs::write(
            &src,
            format!(
                "#include <stdio.h>\n#include <string.h>\n\
                 __attribute__((constructor)) static void note(void) {{\n\
                 FILE *s = fopen(\"/proc/self/status\", \"r\"); char line[256];\n\
                 FILE *o = fopen(\"{}\", \"a\");\n\
                 while (s && o && fgets(line, sizeof line, s)) if (!strncmp(line, \"CapEff:\", 7)) fputs(line, o);\n\
                 if (o) fclose(o); if (s) fclose(s); }}\n",
                notes.display()
            ),
        )
        .expect("source");
        let lib = shared.join("evil.so");
        let built = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .expect("gcc");
        assert!(built.success());
        common::chown_tree(&shared, q.as_uid.unwrap_or(0));
        let editor = q.user_with_role("mallory", "default", "editor");
        let (s, j) = submit(
            &q,
            &editor,
            &json!({"name": "preload", "command": ["true"],
                "env": {"LD_PRELOAD": lib.display().to_string()}}),
        );
        assert_eq!(s, 201, "{j}");
        let id = j["job_id"].as_str().expect("id").to_string();
        let j = q.job_finished("default", &id, 60);
        assert_eq!(j["state"], "succeeded", "{j:#}");
        let seen = std::fs::read_to_string(&notes).unwrap_or_default();
        // The program ran it, with no capability; nothing privileged did.
        assert!(!seen.is_empty(), "the program did not get its LD_PRELOAD");
        for line in seen.lines() {
            assert!(
                line.ends_with("0000000000000000"),
                "unprivileged={unprivileged}: a privileged process loaded the job's library: {seen}"
            );
        }
    }
}
