//! The Kubernetes executor, through the binary, against a fake API server built on the
//! `k8s-openapi` types (no cluster runs here). The fake checks every object Qanat sends
//! as the API server's validation would (names, labels, quantities, restart policy,
//! indexed completion, the Secret and Service a Job refers to) and answers 422 for what
//! a real one would refuse; it then replays realistic status sequences for each Job:
//! pending → running → complete; running → one pod failed → Failed
//! (BackoffLimitExceeded); running until deleted. What is not exercised: real
//! scheduling, image pulls, pod networking between ranks, the kubelet's enforcement.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use common::Qanat;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Secret, Service};
use serde_json::{json, Value};
use tokio::sync::broadcast;

#[derive(Default)]
struct Cluster {
    rv: u64,
    secrets: HashMap<String, Secret>,
    services: HashMap<String, Service>,
    jobs: HashMap<String, Job>,
    /// Every Job manifest accepted, as sent.
    created: Vec<Value>,
    /// Every refusal, with the reason (the test asserts there is none).
    refused: Vec<String>,
    deleted: Vec<String>,
    history: Vec<(u64, String)>,
    /// (rank, exit code) of each Job's pods once they ended.
    pods: HashMap<String, Vec<(u32, Option<i32>)>>,
}

type Shared = (Arc<Mutex<Cluster>>, broadcast::Sender<(u64, String)>);

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

fn label_ok(k: &str, v: &str) -> bool {
    let name = k.rsplit('/').next().unwrap_or("");
    let ok = |s: &str| {
        s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    !name.is_empty() && ok(name) && ok(v)
}

fn quantity_ok(q: &str) -> bool {
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (n, s) = q.split_at(split);
    !n.is_empty()
        && n.parse::<f64>().is_ok()
        && ["", "m", "Ki", "Mi", "Gi", "Ti", "k", "M", "G"].contains(&s)
}

/// What the API server's validation (and admission of references) would refuse.
fn validate(job: &Job, c: &Cluster) -> Result<(), String> {
    let name = job
        .metadata
        .name
        .as_deref()
        .ok_or("metadata.name: Required value")?;
    if !dns_label(name) {
        return Err(format!(
            "metadata.name: Invalid value: {name:?}: a DNS-1035 label"
        ));
    }
    for (k, v) in job.metadata.labels.iter().flatten() {
        if !label_ok(k, v) {
            return Err(format!("metadata.labels: Invalid value: {k}={v}"));
        }
    }
    let spec = job.spec.as_ref().ok_or("spec: Required value")?;
    let completions = spec.completions.unwrap_or(1);
    if completions > 1
        && (spec.completion_mode.as_deref() != Some("Indexed")
            || spec.parallelism != Some(completions))
    {
        return Err("spec: a multi-rank job must be Indexed with parallelism = completions".into());
    }
    let pod = spec
        .template
        .spec
        .as_ref()
        .ok_or("spec.template.spec: Required value")?;
    match pod.restart_policy.as_deref() {
        Some("Never") | Some("OnFailure") => {}
        other => {
            return Err(format!(
                "spec.template.spec.restartPolicy: Unsupported value: {other:?}"
            ))
        }
    }
    if pod.containers.is_empty() {
        return Err("spec.template.spec.containers: Required value".into());
    }
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    for (k, v) in &pod_labels {
        if !label_ok(k, v) {
            return Err(format!(
                "spec.template.metadata.labels: Invalid value: {k}={v}"
            ));
        }
    }
    if let Some(sub) = &pod.subdomain {
        let svc = c
            .services
            .get(sub)
            .ok_or(format!("subdomain {sub}: no such Service"))?;
        let s = svc.spec.as_ref().ok_or("service without spec")?;
        if s.cluster_ip.as_deref() != Some("None") {
            return Err("the subdomain's Service must be headless".into());
        }
        for (k, v) in s.selector.iter().flatten() {
            if pod_labels.get(k) != Some(v) {
                return Err(format!(
                    "the Service selects {k}={v}, which the pods do not carry"
                ));
            }
        }
    }
    if !pod
        .node_selector
        .as_ref()
        .is_some_and(|n| n.contains_key("topology.kubernetes.io/region"))
    {
        return Err("expected a region node selector".into());
    }
    for ct in &pod.containers {
        if !dns_label(&ct.name) || ct.image.as_deref().unwrap_or("").is_empty() {
            return Err("containers[0]: name and image are required".into());
        }
        for e in ct.env.iter().flatten() {
            if e.name.is_empty() || e.name.contains('=') {
                return Err(format!("env {}: invalid name", e.name));
            }
        }
        for s in ct.env_from.iter().flatten() {
            let n = &s
                .secret_ref
                .as_ref()
                .ok_or("envFrom without secretRef")?
                .name;
            if !c.secrets.contains_key(n) {
                return Err(format!("envFrom: secret {n} not found"));
            }
        }
        let r = ct.resources.as_ref().ok_or("resources: required here")?;
        for q in r.limits.iter().flatten().chain(r.requests.iter().flatten()) {
            if !quantity_ok(&q.1 .0) {
                return Err(format!(
                    "resources {}: quantities must match the regular expression",
                    q.0
                ));
            }
        }
    }
    Ok(())
}

fn publish(c: &mut Cluster, tx: &broadcast::Sender<(u64, String)>, kind: &str, job: &mut Job) {
    c.rv += 1;
    job.metadata.resource_version = Some(c.rv.to_string());
    let line = json!({"type": kind, "object": job}).to_string();
    c.history.push((c.rv, line.clone()));
    let _ = tx.send((c.rv, line));
}

fn set_status(shared: &Shared, name: &str, status: Value, pods: Option<Vec<(u32, Option<i32>)>>) {
    let (c, tx) = shared;
    let mut c = c.lock().expect("lock");
    let Some(mut job) = c.jobs.get(name).cloned() else {
        return;
    };
    job.status = serde_json::from_value(status).ok();
    if let Some(p) = pods {
        c.pods.insert(name.to_string(), p);
    }
    publish(&mut c, tx, "MODIFIED", &mut job);
    c.jobs.insert(name.to_string(), job);
}

async fn create_job(State(shared): State<Shared>, Json(body): Json<Value>) -> Response {
    let parsed: Result<Job, _> = serde_json::from_value(body.clone());
    let (c, tx) = &shared;
    let mut job = {
        let mut c = c.lock().expect("lock");
        let job = match parsed {
            Ok(j) => j,
            Err(e) => {
                c.refused
                    .push(format!("does not parse as batch/v1 Job: {e}"));
                return (StatusCode::BAD_REQUEST, e.to_string()).into_response();
            }
        };
        if let Err(why) = validate(&job, &c) {
            c.refused.push(why.clone());
            return (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({"kind": "Status", "status": "Failure", "reason": "Invalid", "message": why, "code": 422}))).into_response();
        }
        c.created.push(body);
        job
    };
    let name = job.metadata.name.clone().unwrap_or_default();
    let ranks = job.spec.as_ref().and_then(|s| s.completions).unwrap_or(1) as u32;
    let args = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers[0].args.clone().unwrap_or_default().join(" "))
        .unwrap_or_default();
    {
        let mut c = c.lock().expect("lock");
        publish(&mut c, tx, "ADDED", &mut job);
        c.jobs.insert(name.clone(), job.clone());
    }
    let sh = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        set_status(
            &sh,
            &name,
            json!({"active": ranks, "ready": ranks, "startTime": "2026-11-23T00:00:00Z"}),
            None,
        );
        if args.contains("sleep 120") {
            return; // runs until deleted
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        if args.contains("exit 3") {
            let pods = (0..ranks)
                .map(|r| (r, Some(if r == 1 { 3 } else { 143 })))
                .collect();
            set_status(
                &sh,
                &name,
                json!({"active": ranks - 1, "failed": 1}),
                Some(pods),
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            set_status(
                &sh,
                &name,
                json!({"failed": ranks, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}),
                None,
            );
        } else {
            let pods = (0..ranks).map(|r| (r, Some(0))).collect();
            set_status(
                &sh,
                &name,
                json!({"succeeded": ranks, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"}]}),
                Some(pods),
            );
        }
    });
    (StatusCode::CREATED, Json(json!({}))).into_response()
}

async fn list_or_watch(
    State((c, tx)): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !q.contains_key("watch") {
        let c = c.lock().expect("lock");
        let items: Vec<&Job> = c.jobs.values().collect();
        return Json(json!({"kind": "JobList", "metadata": {"resourceVersion": c.rv.to_string()}, "items": items})).into_response();
    }
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // Subscribed before the backlog is read: nothing falls between the two.
    let rx = tx.subscribe();
    let backlog: Vec<(u64, String)> = c
        .lock()
        .expect("lock")
        .history
        .iter()
        .filter(|(rv, _)| *rv > since)
        .cloned()
        .collect();
    Response::new(axum::body::Body::from_stream(watch_stream(
        backlog, since, rx,
    )))
}

/// The backlog after `since`, then live events, one JSON line each.
fn watch_stream(
    backlog: Vec<(u64, String)>,
    since: u64,
    rx: broadcast::Receiver<(u64, String)>,
) -> impl futures::Stream<Item = Result<String, std::io::Error>> {
    let last = backlog.last().map_or(since, |b| b.0);
    let head = futures::stream::iter(backlog.into_iter().map(|(_, l)| Ok(format!("{l}\n"))));
    let tail = futures::stream::unfold((rx, last), |(mut rx, last)| async move {
        loop {
            match rx.recv().await {
                Ok((rv, l)) if rv > last => return Some((Ok(format!("{l}\n")), (rx, rv))),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    });
    futures::StreamExt::chain(head, tail)
}

async fn get_job(
    State((c, _)): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match c.lock().expect("lock").jobs.get(&name) {
        Some(j) => Json(j.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"kind": "Status", "code": 404})),
        )
            .into_response(),
    }
}

async fn create_secret(State((c, _)): State<Shared>, Json(s): Json<Secret>) -> Response {
    let name = s.metadata.name.clone().unwrap_or_default();
    c.lock().expect("lock").secrets.insert(name, s);
    (StatusCode::CREATED, Json(json!({}))).into_response()
}

async fn create_service(State((c, _)): State<Shared>, Json(s): Json<Service>) -> Response {
    let name = s.metadata.name.clone().unwrap_or_default();
    c.lock().expect("lock").services.insert(name, s);
    (StatusCode::CREATED, Json(json!({}))).into_response()
}

async fn delete_job(
    State((c, tx)): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    let mut c = c.lock().expect("lock");
    c.deleted.push(format!("job/{name}"));
    if let Some(mut j) = c.jobs.remove(&name) {
        publish(&mut c, &tx, "DELETED", &mut j);
    }
    Json(json!({})).into_response()
}

async fn delete_other(
    State((c, _)): State<Shared>,
    Path((_, kind, name)): Path<(String, String, String)>,
) -> Response {
    let mut c = c.lock().expect("lock");
    c.deleted.push(format!("{kind}/{name}"));
    match kind.as_str() {
        "secrets" => {
            c.secrets.remove(&name);
        }
        "services" => {
            c.services.remove(&name);
        }
        _ => {}
    }
    Json(json!({})).into_response()
}

async fn pods(State((c, _)): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let sel = q.get("labelSelector").cloned().unwrap_or_default();
    let name = sel.rsplit('=').next().unwrap_or("").to_string();
    let c = c.lock().expect("lock");
    let items: Vec<Value> = c.pods.get(&name).into_iter().flatten().map(|(rank, code)| json!({
        "metadata": {"name": format!("{name}-{rank}-x"), "annotations": {"batch.kubernetes.io/job-completion-index": rank.to_string()}},
        "status": {"containerStatuses": [{"name": "rank", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code.unwrap_or(0)}}}]}
    })).collect();
    Json(json!({"kind": "PodList", "metadata": {}, "items": items})).into_response()
}

async fn pod_log(Path((_, pod)): Path<(String, String)>) -> String {
    format!("hello from pod {pod}\n")
}

async fn nodes() -> Json<Value> {
    Json(
        json!({"kind": "NodeList", "metadata": {}, "items": [{"metadata": {"name": "n1", "labels": {"topology.kubernetes.io/region": "uae-north"}},
        "status": {"allocatable": {"cpu": "7800m", "memory": "32Gi", "nvidia.com/gpu": "4"}}}]}),
    )
}

fn fake_api_server() -> (String, Arc<Mutex<Cluster>>) {
    let cluster = Arc::new(Mutex::new(Cluster::default()));
    let (tx, _) = broadcast::channel(1024);
    let shared: Shared = (cluster.clone(), tx);
    let app = Router::new()
        .route(
            "/apis/batch/v1/namespaces/{ns}/jobs",
            get(list_or_watch).post(create_job),
        )
        .route(
            "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
            delete(delete_job).get(get_job),
        )
        .route(
            "/api/v1/namespaces/{ns}/secrets",
            axum::routing::post(create_secret),
        )
        .route(
            "/api/v1/namespaces/{ns}/services",
            axum::routing::post(create_service),
        )
        .route(
            "/api/v1/namespaces/{ns}/{kind}/{name}",
            delete(delete_other),
        )
        .route("/api/v1/namespaces/{ns}/pods", get(pods))
        .route("/api/v1/namespaces/{ns}/pods/{pod}/log", get(pod_log))
        .route("/api/v1/nodes", get(nodes))
        .with_state(shared);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).expect("listener");
            axum::serve(l, app).await.expect("serve");
        });
    });
    (format!("http://{addr}"), cluster)
}

fn finished(q: &Qanat, id: &str) -> Value {
    q.job_finished("default", id, 30)
}

#[test]
fn jobs_run_as_kubernetes_jobs_against_a_validating_fake_api_server() {
    let (url, cluster) = fake_api_server();
    let mut q = Qanat::start_with(vec![
        ("QANAT_JOBS_KUBERNETES_ENABLED".into(), "true".into()),
        ("QANAT_JOBS_KUBERNETES_API_URL".into(), url),
        ("QANAT_JOBS_KUBERNETES_NAMESPACE".into(), "ml".into()),
        ("QANAT_JOBS_RETRY_BACKOFF_SECS".into(), "1".into()),
    ]);
    // Two ranks with a GPU each: an indexed Job, the token in a Secret.
    let id = q.submit(json!({
            "name": "on-k8s", "executor": "kubernetes", "ranks": 2, "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
            "resources": {"cpus": 2, "memory": "4GiB", "gpus": 1},
            "command": ["python", "train.py", "--epochs", "3"],
        }));
    let j = finished(&q, &id);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let (_, log) = q.api(
        "GET",
        &format!("/api/v1/projects/default/jobs/{id}/logs?rank=1"),
        None,
    );
    assert!(
        log["data"]
            .as_str()
            .expect("log")
            .contains("hello from pod"),
        "{log}"
    );
    {
        let c = cluster.lock().expect("lock");
        assert!(c.refused.is_empty(), "refused: {:?}", c.refused);
        let m = &c.created[0];
        let ct = &m["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(ct["resources"]["limits"]["nvidia.com/gpu"], "1");
        assert_eq!(ct["image"], "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime");
        assert_eq!(m["spec"]["completionMode"], "Indexed");
        assert!(
            !m.to_string().contains("qnt_"),
            "a token in the Job manifest"
        );
        let secret = c
            .secrets
            .values()
            .next()
            .map(|s| serde_json::to_value(s).expect("json"));
        assert!(
            secret.is_none(),
            "the Secret outlived its attempt: {secret:?}"
        );
        assert!(
            c.deleted.iter().any(|d| d.starts_with("job/")),
            "{:?}",
            c.deleted
        );
    }
    // One pod fails: the Job fails, with the rank and its exit code; retried once, whole.
    let id = q.submit(json!({
        "name": "bad", "executor": "kubernetes", "ranks": 2, "max_retries": 1, "command": "exit 3",
    }));
    let j = finished(&q, &id);
    assert_eq!(j["state"], "failed", "{j:#}");
    assert_eq!(j["attempt"], 2);
    assert!(
        j["reason"]
            .as_str()
            .expect("reason")
            .contains("rank 1 exited with code 3"),
        "{j:#}"
    );
    // A running Job outlives a server kill -9: it is watched again, not re-run; cancel
    // deletes it.
    let id = q.submit(json!({"name": "long", "executor": "kubernetes", "command": "sleep 120"}));
    let start = Instant::now();
    loop {
        let (_, j) = q.api("GET", &format!("/api/v1/projects/default/jobs/{id}"), None);
        if j["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("running on Kubernetes"))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never running: {j:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    q.kill_hard();
    q.spawn_server();
    let (s, _) = q.api(
        "POST",
        &format!("/api/v1/projects/default/jobs/{id}/cancel"),
        Some(json!({})),
    );
    assert_eq!(s, 200);
    let j = finished(&q, &id);
    assert_eq!(j["state"], "cancelled", "{j:#}");
    assert_eq!(j["attempt"], 1, "{j:#}");
    assert!(cluster
        .lock()
        .expect("lock")
        .deleted
        .iter()
        .any(|d| d == &format!("job/qanat-{id}-1")));
    // Inputs are refused for Kubernetes (not mounted yet), an image for the local executor.
    let (s, body) = q.api(
        "POST",
        "/api/v1/projects/default/jobs",
        Some(json!({"name": "x", "image": "python:3.11", "command": ["true"]})),
    );
    assert_eq!(s, 400, "{body}");
    // The trainer runs Qanat's own binary, which a pod does not have: refused at submit.
    let (s, body) = q.api(
        "POST",
        "/api/v1/projects/default/jobs",
        Some(json!({"name": "t", "kind": "train", "executor": "kubernetes", "target": "y"})),
    );
    assert_eq!(s, 400, "{body}");
    assert!(
        body.to_string().contains("cannot run on Kubernetes"),
        "{body}"
    );
    let c = cluster.lock().expect("lock");
    assert!(c.refused.is_empty(), "refused: {:?}", c.refused);
}
