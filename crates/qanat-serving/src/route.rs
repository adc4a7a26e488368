//! Routing: what answers a request for an OIP model name.
//!
//! A name is a deployment of the project or, when there is none by that name, a
//! registered model (its newest version). Its [`Route`] holds one arm per target, each
//! with the version loaded and its batcher started, checked healthy by a probe before
//! it gets traffic. Routes are built once and swapped whole: a request holds the
//! `Arc` of the route it started with, so a change (a promotion, a rollback, an alias
//! moved) drops no request in flight, and the old version's queue drains before its
//! workers stop. Servers rebuild a route when its deployment's revision, a followed
//! alias or a model's newest version changes: at once after a change made through
//! this process, and within the refresh period otherwise (`qanat serve` replicas).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use qanat_governance::Project;
use qanat_model::prep::Target as Kind;
use qanat_runtime::native::Scratch;
use serde::{Deserialize, Serialize};

use crate::batch::{Batcher, Batching, Engine};
use crate::deploy::{Deployment, DeploymentSpec, Routing, Target};
use crate::metrics::{BatchLabels, OutcomeLabels, ServingMetrics, VersionLabels};
use crate::oip::{self, InferRequest, InferResponse, ModelMetadata};
pub use qanat_types::serving::{ArmStatus, DeploymentStatus, ShadowStats};

use crate::{Caller, Error, Loaded, Result, Serving};

/// A loaded version as a batch engine.
pub struct Native(pub Arc<Loaded>);

impl Engine for Native {
    type Scratch = Scratch;
    fn inputs(&self) -> usize {
        self.0.model.row_width()
    }
    fn outputs(&self) -> usize {
        self.0.model.outputs()
    }
    fn run(&self, x: &[f64], rows: usize, scratch: &mut Scratch) -> Result<Vec<f32>> {
        self.0.model.forward(x, rows, scratch)
    }
    fn inline(&self) -> bool {
        self.0.model.computes_only()
    }
}

/// A version ready for traffic.
#[derive(Clone)]
pub struct Served {
    pub loaded: Arc<Loaded>,
    pub batcher: Batcher<Native>,
}

/// One target of a route.
pub struct Arm {
    pub target: Target,
    /// The version the target resolved to (`None` when its alias did not resolve).
    pub version: Option<String>,
    /// Ready, or why it gets no traffic.
    pub served: std::result::Result<Served, String>,
    requests: AtomicU64,
    failures: AtomicU64,
    shadow: Mutex<ShadowStats>,
}

impl Arm {
    fn healthy(&self) -> bool {
        self.served.is_ok()
    }
}

/// What decides whether a route is stale: the deployment's revision and the version
/// each target resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    revision: Option<i64>,
    versions: Vec<Option<String>>,
}

/// What answers one OIP model name.
pub struct Route {
    pub project: Project,
    /// The OIP model name (a deployment, or a registered model).
    pub name: String,
    /// The registered model.
    pub model: String,
    /// The deployment behind it, when there is one.
    pub deployment: Option<Deployment>,
    /// A route for one named version (`/versions/{v}`): fixed, never refreshed.
    pinned: bool,
    routing: Routing,
    log: crate::log::LogSpec,
    /// The feature service requests are enriched from, if any.
    enrich: Option<Arc<crate::enrich::Enrichment>>,
    arms: Vec<Arc<Arm>>,
    shadows: Vec<Arc<Arm>>,
    fingerprint: Fingerprint,
}

/// A stable 64-bit FNV-1a hash: the same key lands on the same target across
/// processes and releases.
fn fnv1a(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The arm (index among `arms`: label, weight) that `key` lands on, by weighted
/// rendezvous hashing: each arm scores the key as `-ln(u) / weight` with `u` uniform
/// from a hash of (arm, key), and the lowest score wins. Each arm gets its weight's
/// share of keys, and when an arm leaves (unhealthy, removed) only its keys move; the
/// others keep their side.
fn sticky(key: &str, arms: impl Iterator<Item = (String, u32)>) -> Option<usize> {
    arms.enumerate()
        .filter(|(_, (_, w))| *w > 0)
        .map(|(i, (label, w))| {
            let h = fnv1a(&format!("{label}\u{0}{key}"));
            // Mix the FNV bits (its low bits are weak) into a uniform in (0, 1].
            let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
            (i, -u.ln() / f64::from(w))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

impl Route {
    /// The arm a request goes to: by weight among the healthy ones, by the key's hash
    /// when routing is sticky and a key is given.
    fn pick(&self, key: Option<&str>) -> Result<&Arc<Arm>> {
        let total: u64 = self
            .arms
            .iter()
            .filter(|a| a.healthy())
            .map(|a| u64::from(a.target.weight))
            .sum();
        if total == 0 {
            let why: Vec<String> = self
                .arms
                .iter()
                .filter_map(|a| {
                    a.served
                        .as_ref()
                        .err()
                        .map(|e| format!("{}: {e}", a.target.label()))
                })
                .collect();
            return Err(Error::Unavailable(format!(
                "'{}' has no healthy version to answer ({})",
                self.name,
                why.join("; ")
            )));
        }
        if let (Routing::Sticky, Some(k)) = (self.routing, key) {
            let healthy = self.arms.iter().filter(|a| a.healthy());
            return sticky(k, healthy.map(|a| (a.target.label(), a.target.weight)))
                .and_then(|i| self.arms.iter().filter(|a| a.healthy()).nth(i))
                .ok_or_else(|| Error::Internal("no arm took the key".into()));
        }
        let mut point = rand::random::<u64>() % total;
        for arm in self.arms.iter().filter(|a| a.healthy()) {
            let w = u64::from(arm.target.weight);
            if point < w {
                return Ok(arm);
            }
            point -= w;
        }
        Err(Error::Internal("weights did not cover the pick".into()))
    }

    /// The first healthy answering arm (metadata is the primary's).
    fn primary(&self) -> Result<&Served> {
        self.arms
            .iter()
            .find_map(|a| a.served.as_ref().ok())
            .ok_or_else(|| Error::Unavailable(format!("'{}' has no healthy version", self.name)))
    }
}

/// The routes this process has built, by (project id, name, pinned version).
#[derive(Clone, Default)]
pub(crate) struct Routes {
    map: Arc<RwLock<HashMap<RouteKey, Arc<Route>>>>,
    /// Builds run one at a time (they are rare and may load models).
    building: Arc<tokio::sync::Mutex<()>>,
}

type RouteKey = (String, String, Option<String>);

impl Routes {
    fn get(&self, key: &RouteKey) -> Option<Arc<Route>> {
        self.map.read().ok()?.get(key).cloned()
    }

    fn put(&self, key: RouteKey, route: Arc<Route>) {
        if let Ok(mut m) = self.map.write() {
            m.insert(key, route);
        }
    }

    fn remove(&self, key: &RouteKey) {
        if let Ok(mut m) = self.map.write() {
            m.remove(key);
        }
    }

    /// Removes every route of `name` (pinned versions too); how many there were.
    fn remove_all(&self, project_id: &str, name: &str) -> usize {
        let Ok(mut m) = self.map.write() else {
            return 0;
        };
        let before = m.len();
        m.retain(|(p, n, _), _| !(p == project_id && n == name));
        before - m.len()
    }

    fn all(&self) -> Vec<(RouteKey, Arc<Route>)> {
        self.map
            .read()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }
}

/// One model of Triton's repository index: a deployment or a registered model, and
/// whether this server has it loaded.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RepositoryEntry {
    pub name: String,
    /// The version answering first, once loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `READY` or `UNAVAILABLE` (not loaded here, or no healthy version).
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A request's `priority` and `timeout` (microseconds) parameters.
fn queue_parameters(req: &InferRequest) -> Result<(Option<u32>, Option<Duration>)> {
    let Some(p) = &req.parameters else {
        return Ok((None, None));
    };
    let number = |name: &str| -> Result<Option<u64>> {
        match p.get(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                Error::Invalid(format!(
                    "parameter '{name}' is {v}: it is a whole number ≥ 0"
                ))
            }),
        }
    };
    let priority = match number("priority")? {
        None | Some(0) => None,
        Some(n) => Some(
            u32::try_from(n)
                .map_err(|_| Error::Invalid(format!("parameter 'priority' is {n}: too large")))?,
        ),
    };
    let timeout = number("timeout")?
        .filter(|&t| t > 0)
        .map(Duration::from_micros);
    Ok((priority, timeout))
}

impl Serving {
    /// The route for `name` (or its version `version`), built on first use.
    async fn route(
        &self,
        project: &Project,
        name: &str,
        version: Option<&str>,
    ) -> Result<Arc<Route>> {
        let key: RouteKey = (
            project.id.to_string(),
            name.to_string(),
            version.map(str::to_string),
        );
        if let Some(r) = self.routes.get(&key) {
            return Ok(r);
        }
        let _one = self.routes.building.lock().await;
        if let Some(r) = self.routes.get(&key) {
            return Ok(r);
        }
        let route = Arc::new(self.build(project, name, version, None).await?);
        self.routes.put(key, route.clone());
        Ok(route)
    }

    /// Rebuilds the route of `name` now if this server has one (after a change made
    /// here), so the change holds when the call that made it returns.
    #[qanat_macros::boxed]
    pub async fn refresh(&self, project: &Project, name: &str) -> Result<()> {
        let key: RouteKey = (project.id.to_string(), name.to_string(), None);
        let _one = self.routes.building.lock().await;
        let old = self.routes.get(&key);
        match self.build(project, name, None, old.as_deref()).await {
            Ok(r) => self.routes.put(key, Arc::new(r)),
            Err(e) if qanat_core::DomainError::kind(&e) == qanat_core::ErrorKind::NotFound => {
                self.routes.remove(&key)
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Checks every route against the registry and the deployments every `every`,
    /// rebuilding the stale ones (what makes `qanat serve` replicas follow changes).
    pub fn spawn_refresh(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                me.refresh_stale().await;
            }
        })
    }

    async fn refresh_stale(&self) {
        for (key, route) in self.routes.all() {
            if route.pinned {
                continue;
            }
            let stale = match self.fingerprint(&route).await {
                Ok(fp) => fp != route.fingerprint,
                Err(_) => true,
            };
            if !stale {
                continue;
            }
            if let Err(e) = self.refresh(&route.project, &key.1).await {
                tracing::warn!(model = %key.1, error = %e, "serving: a route could not be rebuilt; the old one keeps answering");
            }
        }
    }

    /// What the route would be built from now.
    async fn fingerprint(&self, route: &Route) -> Result<Fingerprint> {
        let project = &route.project;
        match &route.deployment {
            Some(d) => {
                let revision = self.deployments.revision(project, &route.name).await?;
                if revision != Some(d.revision) {
                    return Ok(Fingerprint {
                        revision,
                        versions: Vec::new(),
                    });
                }
                let mut versions = Vec::new();
                for t in &d.spec.targets {
                    versions.push(self.resolve(project, &d.spec.model, t).await.ok());
                }
                Ok(Fingerprint { revision, versions })
            }
            None => {
                if self
                    .deployments
                    .revision(project, &route.name)
                    .await?
                    .is_some()
                {
                    return Ok(Fingerprint {
                        revision: Some(0),
                        versions: Vec::new(),
                    });
                }
                let newest = self
                    .versions(project, &route.model)
                    .await?
                    .into_iter()
                    .next();
                Ok(Fingerprint {
                    revision: None,
                    versions: vec![newest],
                })
            }
        }
    }

    async fn resolve(&self, project: &Project, model: &str, t: &Target) -> Result<String> {
        match (&t.version, &t.alias) {
            (Some(v), _) => Ok(v.clone()),
            (_, Some(a)) => Ok(self
                .tracking
                .version_by_alias(project, model, a)
                .await
                .map_err(|e| {
                    let it = qanat_core::ObjectRef::at(qanat_core::Kind::Model, model, a);
                    crate::not_found(&it.to_string(), e)
                })?
                .version),
            _ => Err(Error::Invalid("a target is a version or an alias".into())),
        }
    }

    async fn build(
        &self,
        project: &Project,
        name: &str,
        version: Option<&str>,
        old: Option<&Route>,
    ) -> Result<Route> {
        let deployment = self.deployments.find(project, name).await?;
        let (model, spec, pinned) = match (&deployment, version) {
            (Some(d), None) => (d.spec.model.clone(), d.spec.clone(), false),
            (Some(d), Some(v)) => (
                d.spec.model.clone(),
                DeploymentSpec {
                    targets: vec![Target::version(v, 100)],
                    ..d.spec.clone()
                },
                true,
            ),
            (None, v) => {
                let v = match v {
                    Some(v) => v.to_string(),
                    None => self
                        .versions(project, name)
                        .await?
                        .into_iter()
                        .next()
                        .ok_or_else(|| {
                            Error::NotFound(format!("model '{name}' has no versions"))
                        })?,
                };
                (
                    name.to_string(),
                    DeploymentSpec {
                        model: name.to_string(),
                        targets: vec![Target::version(v, 100)],
                        routing: Routing::Weighted,
                        batching: Batching::default(),
                        log: Default::default(),
                        features: None,
                    },
                    version.is_some(),
                )
            }
        };
        let mut arms = Vec::new();
        let mut shadows = Vec::new();
        let mut versions = Vec::new();
        for t in &spec.targets {
            let resolved = self.resolve(project, &model, t).await;
            versions.push(resolved.as_ref().ok().cloned());
            let arm = match resolved {
                Err(e) => fresh_arm(t, None, Err(e.to_string())),
                Ok(v) => match reuse(old, t, &v, &spec.batching) {
                    Some(Reused::Arm(a)) => a,
                    Some(Reused::Served(s)) => fresh_arm(t, Some(v), Ok(s)),
                    None => {
                        let served = match self.serve(project, &model, &v, &spec.batching).await {
                            // A registered model without a deployment, or a named version,
                            // has one arm: why it cannot be served is the caller's answer.
                            Err(e) if deployment.is_none() || pinned => return Err(e),
                            s => s.map_err(|e| e.to_string()),
                        };
                        fresh_arm(t, Some(v), served)
                    }
                },
            };
            if t.shadow {
                shadows.push(arm);
            } else {
                arms.push(arm);
            }
        }
        Ok(Route {
            project: project.clone(),
            name: name.to_string(),
            model,
            routing: spec.routing,
            log: spec.log.clone(),
            enrich: spec.features.clone().map(Arc::new),
            fingerprint: Fingerprint {
                revision: deployment.as_ref().map(|d| d.revision),
                versions,
            },
            deployment: if pinned { None } else { deployment },
            pinned,
            arms,
            shadows,
        })
    }

    /// Loads `version`, probes it with one row, and starts its batcher.
    async fn serve(
        &self,
        project: &Project,
        model: &str,
        version: &str,
        batching: &Batching,
    ) -> Result<Served> {
        let loaded = self.loaded(project, model, version).await?;
        let rows = self
            .metrics
            .batch_rows
            .get_or_create(&BatchLabels {
                project: project.name.clone(),
                model: model.to_string(),
                version: version.to_string(),
            })
            .clone();
        let observe: crate::batch::Observer = Box::new(move |n| rows.observe(n as f64));
        let batcher =
            Batcher::start_observed(Native(loaded.clone()), batching.clone(), Some(observe))?;
        // A model with text columns has no row that is sure to be valid (a category
        // it never saw may raise), and text answers are not numbers to check: its
        // first worker proved it loads.
        let probe = vec![0f64; loaded.model.row_width()];
        let y = if loaded.model.has_text() {
            Vec::new()
        } else {
            batcher.infer(probe, 1, None, None).await?.0
        };
        if y.iter().any(|v| !v.is_finite()) {
            return Err(Error::Unavailable(format!(
                "{} failed its health probe: its outputs are not finite",
                qanat_core::ObjectRef::at(qanat_core::Kind::Model, model, version)
            )));
        }
        Ok(Served { loaded, batcher })
    }

    /// Answers `request` for `name` (a deployment or a registered model) or its
    /// version `version`, and logs it (a sample, when the deployment says so).
    #[qanat_macros::boxed]
    pub async fn infer(
        &self,
        project: &Project,
        name: &str,
        version: Option<&str>,
        request: InferRequest,
        caller: Caller<'_>,
    ) -> Result<InferResponse> {
        let started = std::time::Instant::now();
        let route = self.route(project, name, version).await?;
        let param_key = request
            .parameters
            .as_ref()
            .and_then(|p| p.get("routing_key"))
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let arm = route
            .pick(caller.routing_key.or(param_key.as_deref()))?
            .clone();
        let served = arm
            .served
            .as_ref()
            .map_err(|e| Error::Unavailable(e.clone()))?;
        let (priority, timeout) = queue_parameters(&request)?;
        let (request, fetched) = match &route.enrich {
            None => (request, None),
            Some(spec) => {
                let features = self.features.as_ref().ok_or_else(|| {
                    Error::Unavailable(format!(
                        "deployment '{}' reads features from service '{}', but this server has no feature store",
                        route.name, spec.service
                    ))
                })?;
                let fetched = crate::enrich::fetch(
                    features.as_ref(),
                    project,
                    spec,
                    &route.name,
                    &served.loaded,
                    request,
                )
                .await?;
                let request = fetched.for_model(&served.loaded, spec, &route.name)?;
                (request, Some(Arc::new(fetched)))
            }
        };
        let log = self
            .log
            .get()
            .filter(|_| route.log.sample >= 1.0 || rand::random::<f64>() < route.log.sample);
        let context = log.map(|log| LogContext {
            log: log.clone(),
            project_id: project.id.to_string(),
            deployment: route.name.clone(),
            model: route.model.clone(),
            actor: caller.actor.to_string(),
            request_id: caller.request_id.to_string(),
            pii: match &fetched {
                // Features the store marks PII are pseudonymized like declared ones.
                Some(f) => route.log.pii.iter().chain(f.pii()).cloned().collect(),
                None => route.log.pii.clone(),
            },
            keys: fetched.clone(),
            mac_purpose: crate::log_pii_purpose(&project.id),
            keyring: self.storage.keyring().clone(),
        });
        // The logged inputs are written now, from the request itself, so that it need
        // not be copied to outlive the model's run; shadows still take a copy.
        let logged = context.as_ref().map(|ctx| ctx.inputs(&request));
        let copy = (!route.shadows.is_empty()).then(|| Arc::new(request.clone()));
        arm.requests.fetch_add(1, Ordering::Relaxed);
        let labels = VersionLabels {
            project: project.name.clone(),
            deployment: route.name.clone(),
            version: served.loaded.version.clone(),
            role: "answer".into(),
        };
        let (rows, raw, text, id, wanted, queued) =
            match run(served, request, priority, timeout).await {
                Ok(a) => a,
                Err(e) => {
                    arm.failures.fetch_add(1, Ordering::Relaxed);
                    count(&self.metrics, &labels, Some(&e));
                    return Err(e);
                }
            };
        count(&self.metrics, &labels, None);
        self.metrics
            .latency
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .queue
            .get_or_create(&labels)
            .observe(queued.as_secs_f64());
        let raw = Arc::new(raw);
        if let Some(copy) = &copy {
            for shadow in &route.shadows {
                let labels = VersionLabels {
                    role: "shadow".into(),
                    version: shadow.version.clone().unwrap_or_default(),
                    ..labels.clone()
                };
                let input = match (&fetched, &route.enrich) {
                    (Some(f), Some(spec)) => ShadowInput::Enriched(f.clone(), spec.clone()),
                    _ => ShadowInput::Plain(copy.clone()),
                };
                tokio::spawn(shadow_run(
                    shadow.clone(),
                    input,
                    raw.clone(),
                    context.clone(),
                    (self.metrics.clone(), labels),
                ));
            }
        }
        // Every output is logged; the caller gets those it asked for.
        let mut response = oip::respond(&served.loaded, &route.name, rows, (&raw, &text), id, None);
        if let (Some(ctx), Some(inputs)) = (&context, logged) {
            ctx.record_inputs(inputs, &response, "answer", rows, started.elapsed(), queued);
        }
        if let Some(w) = wanted {
            response.outputs.retain(|o| w.contains(&o.name));
        }
        Ok(response)
    }

    /// A model's (or a deployment's) metadata; its inputs and outputs are those of
    /// the version that answers first.
    #[qanat_macros::boxed]
    pub async fn metadata(
        &self,
        project: &Project,
        name: &str,
        version: Option<&str>,
    ) -> Result<ModelMetadata> {
        let route = self.route(project, name, version).await?;
        let primary = route.primary()?;
        let versions = match (version, &route.deployment) {
            (Some(v), _) => vec![v.to_string()],
            (None, Some(_)) => {
                let mut vs: Vec<String> = Vec::new();
                for a in route.arms.iter().filter(|a| a.healthy()) {
                    if let Some(v) = &a.version {
                        if !vs.contains(v) {
                            vs.push(v.clone());
                        }
                    }
                }
                vs
            }
            (None, None) => self.versions(project, &route.model).await?,
        };
        // An enriched deployment takes its feature service's entity keys; the model's
        // own inputs are read from the online store (a request may still send one to
        // override it). Without a feature store here, the model's inputs are listed.
        let inputs = match (&route.enrich, self.features.as_ref()) {
            (Some(spec), Some(features)) => {
                crate::enrich::key_inputs(features.as_ref(), project, spec).await?
            }
            _ => primary.loaded.inputs.clone(),
        };
        Ok(ModelMetadata {
            name: name.to_string(),
            versions,
            platform: primary.loaded.model.platform().into(),
            inputs,
            outputs: primary.loaded.outputs.clone(),
        })
    }

    /// Ready when some version of `name` can answer.
    #[qanat_macros::boxed]
    pub async fn ready(&self, project: &Project, name: &str, version: Option<&str>) -> Result<()> {
        self.route(project, name, version)
            .await?
            .primary()
            .map(|_| ())
    }

    /// Triton's repository index: the project's deployments, then its registered
    /// models without a deployment of the same name, each with its state here.
    #[qanat_macros::boxed]
    pub async fn repository_index(
        &self,
        project: &Project,
        ready_only: bool,
    ) -> Result<Vec<RepositoryEntry>> {
        let mut names: Vec<String> = self
            .deployments
            .list(project)
            .await?
            .into_iter()
            .map(|d| d.name)
            .collect();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .tracking
                .search_registered_models(project, None, &[], Some(1000), token.as_deref())
                .await?;
            for m in page.items {
                if !names.contains(&m.name) {
                    names.push(m.name);
                }
            }
            match page.next_page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        let mut out = Vec::new();
        for name in names {
            let key: RouteKey = (project.id.to_string(), name.clone(), None);
            let entry = match self.routes.get(&key) {
                None => RepositoryEntry {
                    name,
                    version: None,
                    state: "UNAVAILABLE".into(),
                    reason: "unloaded".into(),
                },
                Some(r) => match r.primary() {
                    Ok(s) => RepositoryEntry {
                        name,
                        version: Some(s.loaded.version.clone()),
                        state: "READY".into(),
                        reason: String::new(),
                    },
                    Err(e) => RepositoryEntry {
                        name,
                        version: None,
                        state: "UNAVAILABLE".into(),
                        reason: e.to_string(),
                    },
                },
            };
            if !ready_only || entry.state == "READY" {
                out.push(entry);
            }
        }
        Ok(out)
    }

    /// Loads `name` (a deployment or a registered model) on this server now: its
    /// versions are loaded, probed and ready before this returns.
    #[qanat_macros::boxed]
    pub async fn load(&self, project: &Project, name: &str) -> Result<()> {
        self.refresh(project, name).await?;
        let key: RouteKey = (project.id.to_string(), name.to_string(), None);
        match self.routes.get(&key) {
            Some(r) => r.primary().map(|_| ()),
            None => Err(Error::NotFound(format!(
                "'{name}' is neither a deployment nor a registered model of {}",
                project.name
            ))),
        }
    }

    /// Unloads `name` from this server: its routes go (requests in flight finish on
    /// the route they hold); the next request loads it again.
    #[qanat_macros::boxed]
    pub async fn unload(&self, project: &Project, name: &str) -> Result<()> {
        let _one = self.routes.building.lock().await;
        let gone = self.routes.remove_all(project.id.as_str(), name);
        if gone == 0 {
            return Err(Error::NotFound(format!(
                "'{name}' is not loaded on this server"
            )));
        }
        Ok(())
    }

    /// Deployment `name` and how this server serves it.
    #[qanat_macros::boxed]
    pub async fn status(&self, project: &Project, name: &str) -> Result<DeploymentStatus> {
        let deployment = self.deployments.get(project, name).await?;
        let route = self.route(project, name, None).await?;
        let targets = route
            .arms
            .iter()
            .enumerate()
            .map(|(i, a)| (if i == 0 { "primary" } else { "canary" }, a))
            .chain(route.shadows.iter().map(|a| ("shadow", a)))
            .map(|(role, a)| ArmStatus {
                target: a.target.label(),
                role: role.into(),
                weight: a.target.weight,
                version: a.version.clone(),
                healthy: a.healthy(),
                reason: a.served.as_ref().err().cloned(),
                runtime: a.served.as_ref().ok().map(|s| s.loaded.model.runtime()),
                requests: a.requests.load(Ordering::Relaxed),
                failures: a.failures.load(Ordering::Relaxed),
                batching: a.served.as_ref().ok().map(|s| s.batcher.stats()),
                shadow: a
                    .target
                    .shadow
                    .then(|| a.shadow.lock().map(|s| s.clone()).unwrap_or_default()),
            })
            .collect();
        Ok(DeploymentStatus {
            // What this server runs may trail the store for a refresh period.
            deployment: route.deployment.clone().unwrap_or(deployment),
            targets,
        })
    }
}

/// Rows, their values, the text outputs' values (a Python model's), the request's
/// id, the outputs asked for, the time queued.
type Answer = (
    usize,
    Vec<f32>,
    Vec<String>,
    Option<String>,
    Option<Vec<String>>,
    Duration,
);

/// What a logged record needs besides the request and its answer.
#[derive(Clone)]
struct LogContext {
    log: crate::log::InferenceLog,
    project_id: String,
    deployment: String,
    model: String,
    actor: String,
    request_id: String,
    pii: Vec<String>,
    /// The entity keys of an enriched request, logged beside the model's inputs.
    keys: Option<Arc<crate::enrich::Fetched>>,
    mac_purpose: String,
    keyring: qanat_store::Keyring,
}

impl LogContext {
    fn record(
        &self,
        request: &InferRequest,
        response: &InferResponse,
        role: &str,
        rows: usize,
        latency: Duration,
        queued: Duration,
    ) {
        let inputs = self.inputs(request);
        self.record_inputs(inputs, response, role, rows, latency, queued);
    }

    /// `request`'s inputs (and an enriched request's entity keys) as the log keeps
    /// them, personal data hidden, with the kinds found.
    fn inputs(&self, request: &InferRequest) -> (String, BTreeMap<String, Vec<String>>) {
        let mac = |v: &[u8]| self.keyring.mac(&self.mac_purpose, v).1;
        crate::log::inputs_json_found(
            request
                .inputs
                .iter()
                .chain(self.keys.iter().flat_map(|f| f.keys.iter())),
            &self.pii,
            &mac,
        )
    }

    /// Logs an answer whose request's inputs [`LogContext::inputs`] wrote.
    fn record_inputs(
        &self,
        (inputs, pii_found): (String, BTreeMap<String, Vec<String>>),
        response: &InferResponse,
        role: &str,
        rows: usize,
        latency: Duration,
        queued: Duration,
    ) {
        let record = crate::log::LogRecord {
            time: qanat_store::now_micros(),
            request_id: self.request_id.clone(),
            inference_id: response.id.clone(),
            actor: self.actor.clone(),
            deployment: self.deployment.clone(),
            model: self.model.clone(),
            version: response.model_version.clone(),
            role: role.to_string(),
            rows: u32::try_from(rows).unwrap_or(u32::MAX),
            latency_us: u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
            queue_us: u64::try_from(queued.as_micros()).unwrap_or(u64::MAX),
            inputs,
            outputs: crate::log::outputs_json(response),
            pii_found,
        };
        self.log.record(&self.project_id, record);
    }
}

/// Prepares `request` for `served` (off the async runtime when it is large), queues
/// it and waits for its rows' outputs.
async fn run(
    served: &Served,
    request: InferRequest,
    priority: Option<u32>,
    timeout: Option<Duration>,
) -> Result<Answer> {
    let loaded = served.loaded.clone();
    let large = request
        .inputs
        .first()
        .and_then(|i| i.shape.first())
        .is_some_and(|&n| n > 256);
    let p = if large {
        tokio::task::spawn_blocking(move || oip::prepare(&loaded, request))
            .await
            .map_err(|e| Error::Internal(format!("inference stopped: {e}")))??
    } else {
        oip::prepare(&loaded, request)?
    };
    let (raw, text, queued) = if p.rows == 0 {
        (Vec::new(), Vec::new(), Duration::ZERO)
    } else if served.loaded.model.has_text() {
        // Text (a Python model's columns or answers) does not stack in the batcher's
        // f64 rows: the request goes to a worker of its own pool as it is.
        // Admitted (or 429) before it takes a blocking thread to wait on; it waits
        // for a worker no longer than its timeout.
        if let crate::Model::Python(m) = &served.loaded.model {
            m.admit()?;
        }
        let loaded = served.loaded.clone();
        let (x, text, rows) = (p.x, p.text, p.rows);
        let (raw, text) = tokio::task::spawn_blocking(move || {
            let mut scratch = qanat_runtime::native::Scratch::default();
            loaded
                .model
                .forward_text(&x, &text, rows, timeout, &mut scratch)
        })
        .await
        .map_err(|e| Error::Internal(format!("inference stopped: {e}")))??;
        (raw, text, Duration::ZERO)
    } else {
        let (raw, queued) = served.batcher.infer(p.x, p.rows, priority, timeout).await?;
        (raw, Vec::new(), queued)
    };
    Ok((p.rows, raw, text, p.id, p.wanted, queued))
}

/// Runs a copy of a request on a shadow, compares its outputs with `answer`'s and
/// logs them.
/// What a shadow runs: a copy of the request, or (with enrichment) the features
/// read for the answer, taken as its own model's inputs.
enum ShadowInput {
    Plain(Arc<InferRequest>),
    Enriched(Arc<crate::enrich::Fetched>, Arc<crate::enrich::Enrichment>),
}

async fn shadow_run(
    arm: Arc<Arm>,
    input: ShadowInput,
    answer: Arc<Vec<f32>>,
    log: Option<LogContext>,
    (metrics, labels): (ServingMetrics, VersionLabels),
) {
    let Ok(served) = arm.served.as_ref() else {
        return;
    };
    let started = std::time::Instant::now();
    arm.requests.fetch_add(1, Ordering::Relaxed);
    let request = match input {
        ShadowInput::Plain(r) => Ok(r),
        ShadowInput::Enriched(f, spec) => f
            .for_model(&served.loaded, &spec, &labels.deployment)
            .map(Arc::new),
    };
    let got = match &request {
        Ok(r) => run(served, (**r).clone(), None, None).await,
        Err(e) => Err(Error::Invalid(e.to_string())),
    };
    count(&metrics, &labels, got.as_ref().err());
    if got.is_ok() {
        metrics
            .latency
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
    if let (Ok((rows, raw, text, id, _, queued)), Some(ctx), Ok(request)) = (&got, &log, &request) {
        let response = oip::respond(
            &served.loaded,
            &ctx.deployment,
            *rows,
            (raw, text),
            id.clone(),
            None,
        );
        ctx.record(
            request,
            &response,
            "shadow",
            *rows,
            started.elapsed(),
            *queued,
        );
    }
    let mut stats = arm.shadow.lock().unwrap_or_else(|p| p.into_inner());
    let Ok((rows, raw, ..)) = got else {
        stats.dropped += 1;
        arm.failures.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if raw.len() != answer.len() || rows == 0 {
        stats.dropped += 1;
        return;
    }
    let k = raw.len() / rows;
    let diff: f64 = raw
        .iter()
        .zip(answer.iter())
        // A text output's places (NaN) are not numbers to compare.
        .map(|(a, b)| {
            if a.is_nan() || b.is_nan() {
                0.0
            } else {
                f64::from((a - b).abs())
            }
        })
        .sum::<f64>()
        / raw.len() as f64;
    // Labels compared where outputs are a classifier's: logits (native), or
    // probabilities (a tree classifier).
    let cut = match &served.loaded.model {
        crate::Model::Native(m)
            if matches!(m.spec().preprocessing.target, Kind::Classification { .. }) =>
        {
            Some(0.0)
        }
        crate::Model::Trees(m) if matches!(m.answer, crate::flavors::Answer::Classifier { .. }) => {
            Some(0.5)
        }
        _ => None,
    };
    if let Some(cut) = cut {
        let label = |z: &[f32]| {
            if k == 1 {
                usize::from(z[0] > cut)
            } else {
                qanat_runtime::evaluate::argmax(z)
            }
        };
        stats.agreed += raw
            .chunks(k)
            .zip(answer.chunks(k))
            .filter(|(a, b)| label(a) == label(b))
            .count() as u64;
    }
    let before = stats.rows as f64;
    stats.rows += rows as u64;
    stats.mean_abs_diff = (stats.mean_abs_diff * before + diff * rows as f64) / stats.rows as f64;
    stats.compared += 1;
}

/// Counts a request by its outcome.
fn count(metrics: &ServingMetrics, labels: &VersionLabels, error: Option<&Error>) {
    let outcome = match error {
        None => "ok".to_string(),
        Some(e) => format!("{:?}", qanat_core::DomainError::kind(e)).to_lowercase(),
    };
    metrics
        .requests
        .get_or_create(&OutcomeLabels {
            project: labels.project.clone(),
            deployment: labels.deployment.clone(),
            version: labels.version.clone(),
            role: labels.role.clone(),
            outcome,
        })
        .inc();
}

fn fresh_arm(
    target: &Target,
    version: Option<String>,
    served: std::result::Result<Served, String>,
) -> Arc<Arm> {
    Arc::new(Arm {
        target: target.clone(),
        version,
        served,
        requests: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        shadow: Mutex::default(),
    })
}

enum Reused {
    /// The same target, version and batching: the arm as it is (its counts go on).
    Arm(Arc<Arm>),
    /// The same version and batching under another target: its loaded model and queue.
    Served(Served),
}

fn reuse(old: Option<&Route>, t: &Target, version: &str, batching: &Batching) -> Option<Reused> {
    let old = old?;
    let same = |a: &&Arc<Arm>| {
        a.version.as_deref() == Some(version)
            && a.served
                .as_ref()
                .is_ok_and(|s| s.batcher.config() == batching)
    };
    let all = || old.arms.iter().chain(old.shadows.iter());
    if let Some(a) = all().filter(same).find(|a| a.target == *t) {
        return Some(Reused::Arm(a.clone()));
    }
    all()
        .find(same)
        .and_then(|a| a.served.as_ref().ok().cloned())
        .map(Reused::Served)
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn sticky_keys_split_by_weight_and_only_a_leaving_arm_s_keys_move() {
        let arms = |labels: &[(&str, u32)]| -> Vec<(String, u32)> {
            labels.iter().map(|(l, w)| (l.to_string(), *w)).collect()
        };
        let three = arms(&[("1", 50), ("2", 30), ("3", 20)]);
        let keys: Vec<String> = (0..20_000).map(|i| format!("user-{i}")).collect();
        let pick = |a: &[(String, u32)], k: &str| super::sticky(k, a.iter().cloned());
        let mut counts = [0usize; 3];
        for k in &keys {
            counts[pick(&three, k).expect("an arm")] += 1;
        }
        for (got, want) in counts.iter().zip([0.5, 0.3, 0.2]) {
            let share = *got as f64 / keys.len() as f64;
            assert!((share - want).abs() < 0.02, "{counts:?}");
        }
        // Arm "2" leaves: its keys move, every other key stays where it was.
        let two = arms(&[("1", 50), ("3", 20)]);
        for k in &keys {
            let before = &three[pick(&three, k).expect("an arm")].0;
            let after = &two[pick(&two, k).expect("an arm")].0;
            if before != "2" {
                assert_eq!(before, after, "{k}");
            }
        }
        assert_eq!(pick(&arms(&[("1", 0)]), "k"), None);
    }

    #[test]
    fn the_sticky_hash_is_stable() {
        // Pinned: changing it would move every A/B key to another arm.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
