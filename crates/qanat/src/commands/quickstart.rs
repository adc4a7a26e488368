//! `qanat quickstart`: the server, started in this process, and the whole lifecycle run
//! against it through the API, as any client would: the breast cancer table shipped in
//! this binary is pushed as datasets, becomes features, a training set, a model, an
//! int8 version, a deployment with a monitor; its traffic drifts half-way, and the
//! monitor's alert retrains, canaries and promotes a new version. Each step is checked:
//! a step that does not happen within its time fails the command (CI runs it).
//!
//! The files it writes (the feature repo, the monitor's spec, the data it pushed, the
//! drift report) are kept under `<home>/quickstart/<project>/` for the user to read.

use qanat_features::RepoFiles as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use qanat_client::Client;
use qanat_core::Selector;
use qanat_features::definitions::FeatureRepo;
use qanat_features::wire::{MaterializeRequest, TrainingSetRequest};
use qanat_jobs::wire::Job;
use qanat_jobs::JobSpec;
use qanat_monitor::spec::MonitorSpec;
use qanat_monitor::wire::{Alert, Check, Label};
use qanat_serving::DeploymentSpec;
use serde_json::json;

use crate::config::Config;

/// The table: 569 patients, 30 cell measurements each, and the diagnosis.
const TABLE: &str = include_str!("../../../../examples/data/breast_cancer.csv");
const TARGET: &str = "diagnosis";
/// The deployment (and the monitor's name for it).
const DEPLOYMENT: &str = "diagnosis";
/// The registered model.
const MODEL: &str = "cancer";
/// Patients per inference request.
const BATCH: usize = 10;
/// What every measurement of the new device reads, as a multiple of the old one's.
const RECALIBRATION: f64 = 1.8;

const MONITOR: &str = "\
# Checks of the deployment's traffic, 100 logged rows at a time, against what its
# model was trained on (docs/monitoring.md).
window: {rows: 100}
min_rows: 50
alerts:
  - name: drift
    metric: drift_share
    above: 0.3
    windows: 2
    actions: [notify, retrain, canary]
canary: {weight: 30, windows: 1, min_labels: 10, margin: 0.05}
";

/// The quickstart's data directory unless `--home` names another.
pub const DEFAULT_HOME: &str = ".qanat-quickstart";
/// The file that marks a data directory as a quickstart's (and holds its admin token,
/// to know the CLI login it made).
const MARKER: &str = "quickstart.json";

pub async fn run(mut cfg: Config, exit: bool) -> Result<()> {
    // A port in use is said before anything is made or removed.
    let mut port_free = false;
    if let Ok(addr) = cfg.server.bind.parse::<std::net::SocketAddr>() {
        match std::net::TcpListener::bind(addr) {
            Ok(_) => port_free = addr.port() != 0,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => bail!(
                "port {} is in use (another server, or a quickstart still running?): run this one on another with --port PORT",
                addr.port()
            ),
            Err(_) => {}
        }
    }
    let earlier_token = fresh_home(&cfg.home)?;
    // Marked before anything else is written: a run that stops part-way (a port in
    // use) leaves a directory the next run knows as its own.
    std::fs::create_dir_all(&cfg.home)
        .and_then(|()| std::fs::write(cfg.home.join(MARKER), b"{}"))
        .with_context(|| format!("creating {}", cfg.home.display()))?;
    // A CLI login an earlier quickstart made points at a server that is gone: the new
    // one replaces it.
    if let Some(old) = &earlier_token {
        crate::credentials::forget(|_, login| &login.token == old).ok();
    }
    // The server's own log stays quiet (warnings only) unless RUST_LOG asks: what
    // happens is printed step by step.
    if std::env::var_os("RUST_LOG").is_none() {
        cfg.log.level = "warn".into();
    }
    super::server::init_tracing(&cfg)?;
    let address = super::init::server_url(&cfg);
    // Nothing listens at the address, so a login stored for it belongs to a server that
    // is gone (an earlier quickstart's in another directory, a stopped server): the CLI
    // is logged in to this run's server instead, as the steps it prints assume.
    if port_free {
        let key = crate::credentials::server_key(&address);
        crate::credentials::forget(|s, _| s == key).ok();
    }
    let had_login = matches!(crate::credentials::load_credentials(), Ok(Some(c)) if c.login(&address).is_some());
    let server = match crate::server::start(cfg.clone()).await {
        Ok(s) => s,
        Err(e) => {
            // A login the failed start stored points at a server that never ran.
            if !had_login {
                let key = crate::credentials::server_key(&address);
                crate::credentials::forget(|s, _| s == key).ok();
            }
            return Err(e);
        }
    };
    let url = server.url.clone();
    let token = server
        .bootstrap
        .as_ref()
        .map(|t| t.token.clone())
        .ok_or_else(|| {
            anyhow!(
                "{} was initialised meanwhile by another process",
                cfg.home.display()
            )
        })?;
    std::fs::write(
        cfg.home.join(MARKER),
        serde_json::to_vec(&json!({ "server": url, "token": token }))?,
    )?;
    let mut builder = Client::builder(url.clone())
        .token(token.clone())
        .user_agent(concat!("qanat-quickstart/", env!("CARGO_PKG_VERSION")));
    if let (Some(cert), true) = (&cfg.server.tls_cert, cfg.tls_enabled()) {
        let pem = std::fs::read(cert).with_context(|| format!("reading {}", cert.display()))?;
        builder = builder.ca_certificate_pem(pem);
    }
    let project = cfg.tracking.default_project.clone();
    let q = Quickstart {
        client: builder.build()?,
        url: url.clone(),
        project: project.clone(),
        dir: cfg.home.join("quickstart"),
        step: 0,
    };
    let mut serving = tokio::spawn(server.run());
    let done = tokio::select! {
        r = q.lifecycle() => r,
        r = &mut serving => {
            r.context("the server stopped")??;
            bail!("the server stopped before the quickstart finished");
        }
    };
    done?;
    if exit {
        // The server stops with this process: a CLI login to it would point at nothing.
        crate::credentials::forget(|_, login| login.token == token).ok();
        println!("\nDone (--exit: the server stops, and the CLI's login to it is removed).");
        return Ok(());
    }
    println!(
        "\nThe server keeps running at {url} (Ctrl-C stops it). In another terminal:\n  \
         qanat monitor -p {project} status {DEPLOYMENT}\n  \
         qanat deploy -p {project} status {DEPLOYMENT}\n  \
         qanat audit tail --actor service:monitor"
    );
    serving.await.context("the server stopped")?
}

/// Makes sure `home` is new: absent, empty, or an earlier quickstart's (removed; its
/// token is returned). Any other data directory is refused, untouched.
fn fresh_home(home: &Path) -> Result<Option<String>> {
    let Ok(mut entries) = std::fs::read_dir(home) else {
        return Ok(None);
    };
    if entries.next().is_none() {
        return Ok(None);
    }
    let Ok(marker) = std::fs::read(home.join(MARKER)) else {
        bail!(
            "{} holds data the quickstart did not make: it runs on a new data directory (--home DIR)",
            home.display()
        );
    };
    let token = serde_json::from_slice::<serde_json::Value>(&marker)
        .ok()
        .and_then(|v| v["token"].as_str().map(str::to_string));
    std::fs::remove_dir_all(home)
        .with_context(|| format!("removing the earlier quickstart's {}", home.display()))?;
    println!("Removed the earlier quickstart's {}", home.display());
    Ok(token)
}

/// The table, parsed: feature names and, per patient, measurements and diagnosis.
struct Table {
    features: Vec<String>,
    rows: Vec<(Vec<f64>, String)>,
}

fn table() -> Result<Table> {
    let mut lines = TABLE.lines();
    let header: Vec<&str> = lines
        .next()
        .context("the table has no header")?
        .split(',')
        .collect();
    let target = header
        .iter()
        .position(|h| *h == TARGET)
        .context("the table has no diagnosis")?;
    let features = header
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != target)
        .map(|(_, h)| h.to_string())
        .collect();
    let mut rows = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let cells: Vec<&str> = line.split(',').collect();
        let mut x = Vec::new();
        for (i, c) in cells.iter().enumerate() {
            if i != target {
                x.push(
                    c.parse::<f64>()
                        .with_context(|| format!("'{c}' in the table"))?,
                );
            }
        }
        rows.push((x, cells[target].to_string()));
    }
    Ok(Table { features, rows })
}

/// 200 patient ids (1-based) in a fixed shuffled order; parts 0, 1 and 2 are disjoint.
/// (The file is not in random order: its first rows hold more malignant cases than
/// the whole, which a monitor rightly calls drift.)
fn patients(part: usize, total: usize) -> Vec<usize> {
    // 263 and 569 are coprime: i ↦ 263·i mod 569 is a permutation.
    (part * 200..(part * 200 + 200).min(total))
        .map(|i| (i * 263) % total + 1)
        .collect()
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

struct Quickstart {
    client: Client,
    url: String,
    project: String,
    dir: PathBuf,
    step: usize,
}

impl Quickstart {
    fn step(&mut self, what: &str) {
        self.step += 1;
        println!("\n[{:>2}/14] {what}", self.step);
    }

    /// The web UI's page `path` of the project (a browser logs in with the token in
    /// the quickstart's `quickstart.json`).
    fn ui(&self, path: &str) -> String {
        format!("{}/ui/p/{}{path}", self.url, self.project)
    }

    async fn lifecycle(mut self) -> Result<()> {
        let started = Instant::now();
        let table = table()?;
        let n = table.rows.len();
        println!("Qanat quickstart: server at {}", self.url);
        println!(
            "  the web UI: {}/ui/ (log in with the admin token in {})",
            self.url,
            self.dir.with_file_name(MARKER).display()
        );

        self.step("The project");
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let p = self.client.project(&self.project).await?;
        println!(
            "  project {} (regions {}): {}",
            p.name,
            p.allowed_regions.join(", "),
            self.ui("")
        );
        println!("  the files this run writes: {}", self.dir.display());

        self.step("Datasets: the measurements and the diagnoses");
        let t0 = chrono::Utc::now() - chrono::Duration::days(60);
        let measured: Vec<(usize, String, f64)> = (1..=n).map(|p| (p, rfc3339(t0), 1.0)).collect();
        let diagnosed: Vec<(usize, String)> = (1..=n)
            .map(|p| (p, rfc3339(t0 + chrono::Duration::days(1))))
            .collect();
        for dataset in ["patients", "diagnoses"] {
            self.client
                .create_dataset(
                    &self.project,
                    &qanat_data::NewDataset {
                        name: dataset.into(),
                        ..Default::default()
                    },
                )
                .await?;
        }
        self.push_patients(&table, &measured, "measurements of 569 patients")
            .await?;
        self.push_diagnoses(&table, &diagnosed, "their diagnoses")
            .await?;

        self.step("Features: an entity, a source, a feature view, a feature service");
        let repo_dir = self.dir.join("features");
        std::fs::create_dir_all(&repo_dir)?;
        std::fs::write(repo_dir.join("cancer.yaml"), feature_repo(&table.features))?;
        let repo = FeatureRepo::read_dir(&repo_dir)?;
        let plan = self
            .client
            .apply_features(&self.project, &repo, None)
            .await?;
        println!(
            "  applied {} (registry revision {}): feature view cells@1 with {} float64 features, service cancer_features",
            repo_dir.join("cancer.yaml").display(),
            plan.revision,
            table.features.len()
        );
        println!("  {}", self.ui("/features"));

        self.step("Materialize: the newest measurements of each patient, online");
        self.materialize().await?;

        self.step("A training set: diagnoses joined with the measurements as of each diagnosis");
        let train_set = self.training_set("diagnoses@1").await?;

        self.step("Train an MLP on it (a `train` job), registered as model cancer");
        let train = self
            .run_job(json!({
                "kind": "train", "name": "train-cancer", "experiment": "quickstart",
                "inputs": [train_set], "target": TARGET,
                "exclude": ["patient_id", "event_timestamp"],
                "model": "mlp", "hidden": [16], "epochs": 30, "seed": 7, "register": MODEL,
            }))
            .await?;
        let trained = self.version_of(&train).await?;
        println!(
            "  registered {}  (qanat models -p {} show {MODEL})",
            model_ref(&trained),
            self.project
        );
        println!(
            "  {}",
            self.ui(&format!("/models/{MODEL}?version={trained}"))
        );

        self.step("Optimize for CPU: int8 quantization, measured on a holdout");
        let optimize = self
            .run_job(json!({
                "kind": "optimize", "name": "optimize-cancer", "experiment": "quickstart",
                "model": format!("{MODEL}@{trained}"), "inputs": [train_set],
                "quantize": "int8",
            }))
            .await?;
        let int8 = self.version_of(&optimize).await?;
        if let Some(run) = &optimize.run_id {
            let r = self.client.run(&self.project, run).await?;
            if let Some(t) = r
                .data
                .tags
                .iter()
                .find(|t| t.key == "qanat.optimize.verdict")
            {
                println!("  {}", t.value);
            }
        }
        println!(
            "  registered {}, derived from {}",
            model_ref(&int8),
            model_ref(&trained)
        );

        self.step("Deploy the int8 version; requests carry patient ids, features come from the online store");
        let spec: DeploymentSpec = serde_json::from_value(json!({
            "model": MODEL,
            "targets": [{"version": int8, "weight": 100}],
            "features": {"service": "cancer_features"},
        }))?;
        self.client
            .create_deployment(&self.project, DEPLOYMENT, &spec)
            .await?;
        println!("  {}", self.ui(&format!("/deployments/{DEPLOYMENT}")));
        println!("  POST {}/v2/models/{DEPLOYMENT}/infer", self.url);
        println!(
            "    {{\"inputs\": [{{\"name\": \"patient_id\", \"datatype\": \"INT64\", \"shape\": [1], \"data\": [17]}}]}}"
        );

        self.step("Monitor the deployment");
        std::fs::write(self.dir.join("monitor.yaml"), MONITOR)?;
        let spec: MonitorSpec = serde_yaml_ng::from_str(MONITOR)?;
        self.client
            .put_monitor(&self.project, DEPLOYMENT, &spec)
            .await?;
        println!(
            "  {}: windows of 100 rows; rule: drift_share > 0.3 in 2 consecutive windows → notify, retrain, canary",
            self.dir.join("monitor.yaml").display()
        );
        println!("  {}", self.ui(&format!("/monitors/{DEPLOYMENT}")));

        self.step("Traffic like the training data: 200 patients");
        self.traffic("calm", &patients(0, n)).await?;
        let checks = self
            .wait("two checks of calm traffic", 120, |s| {
                let done: Vec<&Check> = s
                    .checks
                    .iter()
                    .filter(|c| c.versions.iter().any(|v| v.rows > 0))
                    .collect();
                (done.len() >= 2).then(|| s.checks.clone())
            })
            .await?;
        for c in checks.iter().rev() {
            print_check(c);
        }
        if checks.iter().any(|c| c.status.to_string() == "drift") {
            bail!("calm traffic was called drift: the quickstart's data or the monitor is wrong");
        }

        self.step("The clinic's new imaging device reads every measurement 1.8× larger");
        let now = chrono::Utc::now();
        let mut measured2 = measured.clone();
        measured2.extend((1..=n).map(|p| (p, rfc3339(now), RECALIBRATION)));
        self.push_patients(
            &table,
            &measured2,
            "new device: every patient measured again",
        )
        .await?;
        let mut diagnosed2 = diagnosed.clone();
        let later = rfc3339(now + chrono::Duration::minutes(1));
        let mut relabelled: Vec<usize> = patients(1, n);
        relabelled.extend(patients(2, n));
        diagnosed2.extend(relabelled.iter().map(|&p| (p, later.clone())));
        self.push_diagnoses(
            &table,
            &diagnosed2,
            "diagnoses of patients measured on the new device",
        )
        .await?;
        let fresh = self.training_set("diagnoses@2").await?;
        println!("  (the data team refreshed the training set: {fresh})");
        self.materialize().await?;

        self.step("Traffic drifts: 200 other patients, measured on the new device");
        self.traffic("drifted", &patients(1, n)).await?;
        let mut seen = 0;
        let alert = self
            .wait("the drift alert, retraining and the canary", 900, |s| {
                let a = s.alerts.last()?;
                for o in a.actions.iter().skip(seen) {
                    println!(
                        "  alert {}: {} {} — {}",
                        a.alert, o.action, o.outcome, o.message
                    );
                }
                seen = a.actions.len();
                (a.state != "open" && a.state != "retraining").then(|| a.clone())
            })
            .await?;
        if let Some(c) = self
            .client
            .monitor_checks(&self.project, DEPLOYMENT, 10)
            .await?
            .checks
            .iter()
            .find(|c| c.check == alert.check)
        {
            print_check(c);
        }
        if alert.state != "canary" {
            bail!(
                "alert {} ended {}: {}",
                alert.alert,
                alert.state,
                last_message(&alert)
            );
        }
        let candidate = alert.candidate.clone().unwrap_or_default();
        let report = self
            .client
            .monitor_report(&self.project, DEPLOYMENT, Some(alert.check))
            .await?;
        let report_file = self.dir.join(format!("drift-report-{}.html", alert.check));
        std::fs::write(&report_file, &report)?;
        println!("  the drift report: {}", report_file.display());
        println!(
            "  {}",
            self.ui(&format!(
                "/monitors/{DEPLOYMENT}?check={}#check",
                alert.check
            ))
        );

        self.step("Ground truth: labelled traffic judges the canary");
        // The canary takes its share once its version is loaded and routed: until
        // then every request goes to the primary, and the canary would get no
        // labelled traffic to be judged on (a busy machine loads it more slowly).
        let loading = Instant::now();
        loop {
            let d = self.client.deployment(&self.project, DEPLOYMENT).await?;
            let ready = d
                .targets
                .iter()
                .any(|t| t.role == "canary" && t.healthy && t.runtime.is_some());
            if ready {
                break;
            }
            if loading.elapsed() > Duration::from_secs(180) {
                bail!("the canary of version {candidate} was not serving within 180 s (qanat deploy -p {} status {DEPLOYMENT})", self.project);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let judged = patients(0, n);
        let sent = self.traffic("judged", &judged).await?;
        let labels: Vec<Label> = sent
            .into_iter()
            .map(|(id, ids)| Label {
                id,
                value: json!(ids
                    .iter()
                    .map(|&p| table.rows[p - 1].1.clone())
                    .collect::<Vec<_>>()),
            })
            .collect();
        let stored = self
            .client
            .post_labels(&self.project, DEPLOYMENT, labels)
            .await?;
        println!(
            "  posted {} labels (POST {}/api/v1/projects/{}/deployments/{DEPLOYMENT}/labels)",
            stored.stored, self.url, self.project
        );
        let alert_no = alert.alert;
        let done = self
            .wait("the canary's verdict", 300, |s| {
                let a = s.alerts.iter().find(|a| a.alert == alert_no)?;
                for o in a.actions.iter().skip(seen) {
                    println!(
                        "  alert {}: {} {} — {}",
                        a.alert, o.action, o.outcome, o.message
                    );
                }
                seen = a.actions.len();
                (a.state != "canary").then(|| a.clone())
            })
            .await?;
        let d = self.client.deployment(&self.project, DEPLOYMENT).await?;
        let serving: Vec<String> = d
            .deployment
            .spec
            .targets
            .iter()
            .map(|t| {
                format!(
                    "version {} at {}%",
                    t.version.clone().or(t.alias.clone()).unwrap_or_default(),
                    t.weight
                )
            })
            .collect();
        if done.state != "done" || !last_message(&done).starts_with("promoted") {
            bail!(
                "the canary of version {candidate} was not promoted ({}): {}",
                done.state,
                last_message(&done)
            );
        }

        self.step("Promoted: what happened, and where to look");
        println!("  {DEPLOYMENT} serves {}", serving.join(", "));
        let reference = model_ref(&candidate);
        let graph = self
            .client
            .lineage(&self.project, &reference, Some(8))
            .await?;
        println!(
            "  where {reference} came from (qanat lineage -p {} {reference}):",
            self.project
        );
        // Who made each object, and earlier versions, are left out here.
        for e in graph
            .edges
            .iter()
            .filter(|e| e.relation != "produced_by" && e.relation != "previous_version")
        {
            println!("    {} —{}→ {}", e.child, e.relation, e.parent);
        }
        println!(
            "  drawn: {}",
            self.ui(&format!("/lineage?ref={}", model_ref(&candidate)))
        );
        println!(
            "  the monitor: qanat monitor -p {} status {DEPLOYMENT}  ·  {}",
            self.project,
            self.ui(&format!("/monitors/{DEPLOYMENT}"))
        );
        println!("  what the monitor did, audited: qanat audit tail --actor service:monitor");
        // The auditor's view of the same project: where its bytes are, under which
        // policy, and whether the audit trail is whole.
        let params = qanat_types::governance::compliance::ReportParams {
            project: Some(self.project.clone()),
            ..Default::default()
        };
        // Everything before worked: a report that fails is a warning, not a failure.
        match self.compliance(&params).await {
            Ok(()) => {}
            Err(e) => eprintln!("  warning: the compliance report could not be made: {e:#}"),
        }
        println!("  metrics: {}/metrics", self.url);
        println!("  took {:.0} s", started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Prints where the project's bytes are and whether the audit chain verifies,
    /// and writes the report's page beside the drift report.
    async fn compliance(
        &self,
        params: &qanat_types::governance::compliance::ReportParams,
    ) -> Result<()> {
        let report = self.client.compliance_report(params).await?;
        let page = self.client.compliance_report_html(params).await?;
        let report_file = self.dir.join("compliance-report.html");
        std::fs::write(&report_file, page)?;
        for l in &report.locations {
            for p in &l.projects {
                println!(
                    "  compliance: project {} keeps {} objects, {} bytes in {} ({}, region {}{})",
                    p.project,
                    p.objects,
                    p.bytes,
                    l.name,
                    l.kind,
                    l.region,
                    if p.region_allowed {
                        ", allowed"
                    } else {
                        ", NOT ALLOWED"
                    }
                );
            }
        }
        println!(
            "  compliance: the audit chain {} ({} entries); the report: {}  ·  qanat compliance report -p {}",
            if report.audit.verification.ok { "verifies" } else { "DOES NOT VERIFY" },
            report.audit.verification.entries_checked,
            report_file.display(),
            self.project
        );
        Ok(())
    }

    /// Writes `rows` (patient, event time, scale) as `patients.csv` and pushes it as
    /// the dataset's next version.
    async fn push_patients(
        &self,
        table: &Table,
        rows: &[(usize, String, f64)],
        message: &str,
    ) -> Result<()> {
        let mut csv = format!("patient_id,event_timestamp,{}\n", table.features.join(","));
        for (p, t, scale) in rows {
            let x: Vec<String> = table.rows[p - 1]
                .0
                .iter()
                .map(|v| format!("{}", v * scale))
                .collect();
            csv.push_str(&format!("{p},{t},{}\n", x.join(",")));
        }
        self.push("patients", "patients.csv", &csv, message).await
    }

    async fn push_diagnoses(
        &self,
        table: &Table,
        rows: &[(usize, String)],
        message: &str,
    ) -> Result<()> {
        let mut csv = format!("patient_id,event_timestamp,{TARGET}\n");
        for (p, t) in rows {
            csv.push_str(&format!("{p},{t},{}\n", table.rows[p - 1].1));
        }
        self.push("diagnoses", "diagnoses.csv", &csv, message).await
    }

    async fn push(&self, dataset: &str, file: &str, csv: &str, message: &str) -> Result<()> {
        let dir = self.dir.join("data").join(dataset);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(file), csv)?;
        let v = super::data::push::push(
            &self.client,
            &self.project,
            dataset,
            &[dir.join(file)],
            &super::data::push::Options {
                message,
                derived_from: &[],
                allow_empty: false,
            },
        )
        .await?;
        println!(
            "  {}  {} rows — {message}  {}",
            qanat_core::ObjectRef::dataset(dataset, v.version),
            csv.lines().count() - 1,
            self.ui(&format!("/datasets/{dataset}/versions/{}", v.version))
        );
        Ok(())
    }

    async fn materialize(&self) -> Result<()> {
        let runs = self
            .client
            .materialize(
                &self.project,
                &MaterializeRequest {
                    feature_views: vec!["cells".into()],
                    start: None,
                    end: None,
                    run_id: None,
                },
            )
            .await?;
        for m in runs {
            println!(
                "  {}@{}: {} rows in the window, {} patients written online (until {})",
                m.feature_view, m.version, m.rows_in_window, m.written, m.end
            );
        }
        println!("  {}", self.ui("/features"));
        Ok(())
    }

    async fn training_set(&self, entities: &str) -> Result<String> {
        let t = self
            .client
            .training_set(
                &self.project,
                &TrainingSetRequest {
                    entities: qanat_core::ObjectRef::unversioned(
                        qanat_core::Kind::Dataset,
                        entities,
                    )
                    .to_string(),
                    timestamp_column: "event_timestamp".into(),
                    features: Vec::new(),
                    feature_service: Some("cancer_features".into()),
                    full_feature_names: false,
                    output: qanat_core::Name::parse_as("dataset name", "cancer-train")?,
                    message: String::new(),
                },
            )
            .await?;
        println!(
            "  {}: {} rows × {} columns, point-in-time join of {} with {}",
            t.reference,
            t.rows,
            t.columns.len(),
            entities,
            t.feature_views
                .iter()
                .map(|f| format!("{}@{}", f.name, f.version))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "  {}",
            self.ui(&format!("/datasets/{}/versions/{}", t.dataset, t.version))
        );
        Ok(t.reference.to_string())
    }

    /// Submits a job and waits for it; a job that does not succeed fails the
    /// quickstart with its reason and the command that shows its log.
    async fn run_job(&self, spec: serde_json::Value) -> Result<Job> {
        let spec: JobSpec = serde_json::from_value(spec)?;
        let job = self.client.submit_job(&self.project, &spec).await?;
        println!(
            "  job {} ({}) submitted  {}",
            job.job_id,
            job.kind,
            self.ui(&format!("/jobs/{}", job.job_id))
        );
        let start = Instant::now();
        loop {
            let d = self.client.job(&self.project, &job.job_id).await?;
            if d.job.is_finished() {
                if d.job.state != "succeeded" {
                    bail!(
                        "job {} {}: {} (qanat jobs -p {} logs {})",
                        job.job_id,
                        d.job.state,
                        d.job.reason.unwrap_or_default(),
                        self.project,
                        job.job_id
                    );
                }
                println!(
                    "  job {} succeeded in {:.0} s (run {})",
                    job.job_id,
                    start.elapsed().as_secs_f64(),
                    d.job.run_id.clone().unwrap_or_default()
                );
                return Ok(d.job);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The version of the quickstart's model that `job`'s run registered.
    async fn version_of(&self, job: &Job) -> Result<String> {
        let run = job.run_id.clone().context("the job has no run")?;
        let latest = self
            .client
            .model_version(&self.project, MODEL, &Selector::Latest)
            .await?;
        if latest.run_id.as_deref() != Some(run.as_str()) {
            bail!(
                "job {} succeeded, but the newest version of {MODEL} ({}) is not its run's",
                job.job_id,
                latest.version
            );
        }
        Ok(latest.version)
    }

    /// Sends `ids` in requests of [`BATCH`] patients; returns each request's id with
    /// the patients it carried.
    async fn traffic(&self, tag: &str, ids: &[usize]) -> Result<Vec<(String, Vec<usize>)>> {
        let mut sent = Vec::new();
        let mut answered = std::collections::BTreeMap::<String, usize>::new();
        for (i, chunk) in ids.chunks(BATCH).enumerate() {
            let id = format!("{tag}-{i}");
            let body = json!({
                "id": id,
                "inputs": [{"name": "patient_id", "datatype": "INT64",
                            "shape": [chunk.len()], "data": chunk}],
            });
            let r = self.client.infer(DEPLOYMENT, &body).await?;
            *answered.entry(r.model_version).or_default() += chunk.len();
            sent.push((id, chunk.to_vec()));
        }
        let by: Vec<String> = answered
            .iter()
            .map(|(v, n)| format!("{n} by version {v}"))
            .collect();
        println!(
            "  {} requests of {BATCH} patients answered ({})",
            sent.len(),
            by.join(", ")
        );
        Ok(sent)
    }

    /// Polls the monitor until `done` gives a result, for at most `secs`.
    async fn wait<T>(
        &self,
        what: &str,
        secs: u64,
        mut done: impl FnMut(&qanat_monitor::wire::MonitorStatus) -> Option<T>,
    ) -> Result<T> {
        let start = Instant::now();
        loop {
            let s = self
                .client
                .monitor_status(&self.project, DEPLOYMENT)
                .await?;
            if let Some(t) = done(&s) {
                return Ok(t);
            }
            if start.elapsed() > Duration::from_secs(secs) {
                bail!(
                    "{what} did not come within {secs} s (qanat monitor -p {} status {DEPLOYMENT})",
                    self.project
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn print_check(c: &Check) {
    let v = c.primary();
    let drift = v
        .and_then(|v| v.drift.as_ref())
        .map(|d| {
            format!(
                "{} of {} features drifted (share {:.2})",
                d.drifted_columns, d.columns, d.share
            )
        })
        .unwrap_or_else(|| "not tested".into());
    println!(
        "  check {}: {} rows, {} — {drift}",
        c.check,
        c.rows,
        c.status.to_string().to_uppercase()
    );
}

fn last_message(a: &Alert) -> String {
    a.actions
        .last()
        .map(|o| o.message.clone())
        .unwrap_or_default()
}

/// The feature repo: patients, their measurements from the `patients` dataset, and
/// the service the model reads.
fn feature_repo(features: &[String]) -> String {
    let mut schema = String::new();
    for f in features {
        schema.push_str(&format!("  - {{name: {f}, type: float64}}\n"));
    }
    format!(
        "# The quickstart's feature repo (docs/features.md).\n\
         kind: entity\nname: patient\njoin_keys: [{{name: patient_id, type: int64}}]\n---\n\
         kind: source\nname: measurements\ntype: dataset\ndataset: patients\ntimestamp_field: event_timestamp\n---\n\
         kind: feature_view\nname: cells\nentities: [patient]\nsource: measurements\nttl: 0\n\
         description: cell nucleus measurements of a biopsy image\nschema:\n{schema}---\n\
         kind: feature_service\nname: cancer_features\nfeatures: [cells]\n"
    )
}

/// `model:cancer@N`, the quickstart's model at version `version`.
fn model_ref(version: &str) -> qanat_core::ObjectRef {
    qanat_core::ObjectRef::at(qanat_core::Kind::Model, MODEL, version)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_shipped_table_parses_and_the_patient_parts_are_disjoint() {
        let t = table().expect("table");
        assert_eq!((t.rows.len(), t.features.len()), (569, 30));
        let parts: Vec<BTreeSet<usize>> = (0..3)
            .map(|p| patients(p, 569).into_iter().collect())
            .collect();
        assert_eq!(parts[0].len() + parts[1].len() + parts[2].len(), 569);
        assert!(parts[0].is_disjoint(&parts[1]) && parts[1].is_disjoint(&parts[2]));
        assert!(parts.iter().flatten().all(|&p| (1..=569).contains(&p)));
        let repo = feature_repo(&t.features);
        let mut r = FeatureRepo::default();
        r.add_yaml("quickstart", &repo).expect("the repo parses");
        let spec: MonitorSpec = serde_yaml_ng::from_str(MONITOR).expect("monitor spec");
        assert_eq!(spec.alerts.len(), 1);
    }
}
