//! Opening the installation (`qanat init`) and serving the API (`qanat server`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use qanat::wiring;
use qanat_api::ApiLimits;
use qanat_governance::{AuditOutcome, AuditRecord, Governance, NewToken};
use qanat_store::{Keyring, MetaStore, ObjectStorage};

use crate::config::Config;

/// The opened installation: metadata store and storage layer.
pub struct Installation {
    pub meta: MetaStore,
    pub storage: ObjectStorage,
}

fn keyring(cfg: &Config, create: bool) -> Result<Keyring> {
    if let Ok(k) = std::env::var("QANAT_MASTER_KEY") {
        if !k.is_empty() {
            return Ok(Keyring::from_base64(&k)?);
        }
    }
    let path = cfg.master_key_file();
    if create {
        Ok(Keyring::load_or_create(&path)?)
    } else if path.exists() {
        Ok(Keyring::load(&path)?)
    } else {
        bail!(
            "no master key at {}; run `qanat init` first (or set QANAT_MASTER_KEY)",
            path.display()
        )
    }
}

fn create_home(cfg: &Config) -> Result<()> {
    std::fs::create_dir_all(&cfg.home)
        .with_context(|| format!("creating data directory {}", cfg.home.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cfg.home, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", cfg.home.display()))?;
    }
    Ok(())
}

/// Tightens what an older release (or another umask) left readable by others: the data
/// directory and the storage roots in it 0700, the SQLite database and its journal
/// files 0600. Files created from now on are private by the umask.
fn restrict_existing(cfg: &Config) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let restrict = |path: &std::path::Path, mode: u32| -> Result<()> {
        match std::fs::metadata(path) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                    .with_context(|| format!("restricting {}", path.display()))
            }
            _ => Ok(()),
        }
    };
    restrict(&cfg.home, 0o700)?;
    if let Some(db) = cfg.metadata_url().strip_prefix("sqlite://") {
        let db = db.split('?').next().unwrap_or(db);
        for suffix in ["", "-wal", "-shm"] {
            restrict(std::path::Path::new(&format!("{db}{suffix}")), 0o600)?;
        }
    }
    for loc in &cfg.storage.locations {
        let root = std::path::Path::new(loc.url.strip_prefix("file://").unwrap_or(&loc.url));
        if root.starts_with(&cfg.home) {
            restrict(root, 0o700)?;
        }
    }
    Ok(())
}

/// Opens (creating when `create`) the data directory, master key, metadata store and
/// storage locations.
pub async fn open(cfg: &Config, create: bool) -> Result<Installation> {
    // What the server writes is its own: files 0600, directories 0700 (the database,
    // its journal, stored objects), whatever the umask it was started with.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    if create {
        create_home(cfg)?;
    }
    restrict_existing(cfg)?;
    let keys = keyring(cfg, create)?;
    let schema = wiring::schema().context("the domains' migrations")?;
    let meta = MetaStore::connect(cfg.metadata_url(), &schema)
        .await
        .with_context(|| {
            format!(
                "opening metadata store {}",
                qanat_store::redact_url(cfg.metadata_url())
            )
        })?;
    let storage = ObjectStorage::open(
        &cfg.storage.locations,
        &cfg.storage.default_location,
        keys,
        meta.clone(),
    )
    .await
    .context("opening storage locations")?;
    Ok(Installation { meta, storage })
}

/// Creates the bootstrap admin on a fresh installation, and the project the root-mounted
/// MLflow API works in (`tracking.default_project`), so that an MLflow client pointed at
/// the server's root works from the start. `None` if the installation exists.
pub async fn bootstrap(cfg: &Config, inst: &Installation) -> Result<Option<NewToken>> {
    let gov = Governance::new(inst.meta.clone());
    let Some(token) = gov.bootstrap_admin(&cfg.security.bootstrap_admin).await? else {
        return Ok(None);
    };
    // The admin and its token exist now and the token is shown only once: a project that
    // cannot be created (say, a bad name in the config) is reported, not fatal.
    // Printed, not logged: `qanat init` runs without a log subscriber, and this is shown
    // beside the token, like the rest of the bootstrap announcement.
    if let Err(e) = create_tracking_project(cfg, inst, &gov, &token).await {
        eprintln!(
            "warning: the default tracking project '{}' was not created ({e:#}); \
             create it with `qanat projects create`",
            cfg.tracking.default_project
        );
    }
    Ok(Some(token))
}

async fn create_tracking_project(
    cfg: &Config,
    inst: &Installation,
    gov: &Governance,
    token: &NewToken,
) -> Result<()> {
    let admin = gov.authenticate(&token.token).await?;
    let name = &cfg.tracking.default_project;
    let region = inst
        .storage
        .location(inst.storage.default_location())?
        .region
        .to_string();
    gov.create_project(
        name,
        "MLflow clients pointed at the server's root log here",
        &[region],
        &admin,
    )
    .await?;
    gov.append_audit(&AuditRecord {
        request_id: String::new(),
        actor: admin.name.clone(),
        action: "project.create".into(),
        resource: format!("/api/v1/projects/{name}"),
        project: Some(name.clone()),
        outcome: AuditOutcome::Success,
        detail: "created with the installation, for the root MLflow API".into(),
    })
    .await?;
    Ok(())
}

fn load_tls(cfg: &Config) -> Result<Option<Arc<rustls::ServerConfig>>> {
    let (Some(cert), Some(key)) = (&cfg.server.tls_cert, &cfg.server.tls_key) else {
        return Ok(None);
    };
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(
        std::fs::File::open(cert).with_context(|| format!("opening {}", cert.display()))?,
    ))
    .collect::<Result<Vec<_>, _>>()
    .with_context(|| format!("reading certificates from {}", cert.display()))?;
    if certs.is_empty() {
        bail!("{} holds no PEM certificate", cert.display());
    }
    let key = rustls_pemfile::private_key(&mut std::io::BufReader::new(
        std::fs::File::open(key).with_context(|| format!("opening {}", key.display()))?,
    ))
    .with_context(|| format!("reading private key from {}", key.display()))?
    .with_context(|| format!("{} holds no PEM private key", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the TLS certificate and key do not form a valid pair")?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(tls)))
}

/// Runs the API server until SIGINT/SIGTERM, then finishes in-flight requests.
pub async fn serve(cfg: Config) -> Result<()> {
    start(cfg).await?.run().await
}

/// A server that has opened its installation, bound its address and started its
/// background work (scheduler, deliveries, serving, monitors): [`Running::run`] serves
/// requests until SIGINT/SIGTERM.
pub struct Running {
    cfg: Config,
    inst: Installation,
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: axum::Router,
    /// The URL this server answers at (the port the listener really got).
    pub url: String,
    /// The bootstrap admin's token, on the start that created the installation.
    pub bootstrap: Option<NewToken>,
}

impl Running {
    pub async fn run(self) -> Result<()> {
        listen(&self.cfg, self.listener, self.tls, self.app, "server").await?;
        self.inst.meta.close().await;
        tracing::info!("qanat server stopped");
        Ok(())
    }
}

/// Everything `qanat server` does before it serves.
pub async fn start(cfg: Config) -> Result<Running> {
    // Settings a user can get wrong are checked before the data directory is created
    // or touched: a typo in --bind must not leave a freshly initialised home behind.
    let tls = load_tls(&cfg)?;
    let addr: SocketAddr = cfg.server.bind.parse().with_context(|| {
        format!(
            "server.bind = '{}' is not an address like 127.0.0.1:8080",
            cfg.server.bind
        )
    })?;
    // Sinks that cannot work are refused before anything is initialized.
    let sinks = cfg.audit_sinks()?;
    // The port is taken before the data directory is touched: a port in use stops
    // here, before a bootstrap token is made and printed.
    let (listener, local) = bind(addr, tls.is_some())?;
    let inst = open(&cfg, true).await?;
    let token = bootstrap(&cfg, &inst).await?;
    if let Some(token) = &token {
        crate::commands::init::announce_bootstrap(&cfg, token)?;
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let host = if local.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        local.ip().to_string()
    };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let url = format!("{scheme}://{host}:{}", local.port());

    let mut jobs = cfg.jobs_settings()?;
    if cfg.jobs.server_url.is_none() {
        // The port the listener really got (bind may have asked for port 0).
        jobs.server_url = url.clone();
    }
    let exe = std::env::current_exe().context("finding this binary (train jobs run it)")?;
    let online_url = cfg.online_store_url();
    let online = qanat_features::online::OnlineStore::open(&online_url)
        .await
        .with_context(|| {
            format!(
                "opening the online feature store {}",
                qanat_store::redact_url(&online_url)
            )
        })?;
    let python = crate::python_workers::settings(&cfg, &jobs).await?;
    let settings = wiring::Settings {
        jobs,
        python,
        kinds: qanat::kinds::all(exe.clone()),
        slurm: cfg.slurm_settings()?,
        kubernetes: cfg.kubernetes_settings()?,
        online: Some(online),
        // Uploaded graphs are first loaded by a child of this binary, under a budget.
        load_check: Some(exe),
        ..settings(&cfg)?
    };
    let state = wiring::build(inst.meta.clone(), inst.storage.clone(), settings).await?;
    // Stream sources consume their NATS subjects for as long as the server runs.
    tokio::spawn(
        state
            .features
            .clone()
            .run_streams(cfg.feature_streams_url()),
    );
    if !sinks.is_empty() {
        let required: Vec<bool> = sinks.iter().map(|s| s.required).collect();
        let health = crate::audit_sink::Health::new(
            &required,
            state.http.audit_sinks_ok.clone(),
            state.http.last_checkpoint.clone(),
        );
        for (i, sink) in sinks.into_iter().enumerate() {
            let keys = state.storage.keyring().clone();
            sink.start(i, state.gov.clone(), keys, health.clone()).await;
        }
    }
    // Deliveries queued before a restart are sent now; new ones as they come.
    qanat_events::Dispatcher::spawn(state.events.clone());
    // Jobs this server ran before a crash are recovered first, then the queue runs.
    qanat_jobs::Scheduler::spawn(state.jobs.clone());
    // The inference log's writer; deployments changed elsewhere (another server,
    // `qanat serve` replicas) and moved aliases reach this server's routes within a
    // second.
    state.serving.start(Duration::from_secs(1));
    // Monitors cut their deployments' inference logs into windows, check them and
    // run their alert rules.
    state.monitor.spawn(Duration::from_secs(1));
    let app = qanat_api::router(state);
    Ok(Running {
        cfg,
        inst,
        listener,
        tls,
        app,
        url,
        bootstrap: token,
    })
}

/// `qanat serve`: the inference data plane alone, on an installation `qanat server`
/// (or `qanat init`) created. No jobs, webhooks or feature streams run here.
pub async fn serve_data_plane(cfg: Config) -> Result<()> {
    let tls = load_tls(&cfg)?;
    let addr: SocketAddr = cfg.server.bind.parse().with_context(|| {
        format!(
            "server.bind = '{}' is not an address like 127.0.0.1:8081",
            cfg.server.bind
        )
    })?;
    let inst = open(&cfg, false)
        .await
        .context("qanat serve runs on an installation: run `qanat init` or `qanat server` first")?;
    let (listener, _) = bind(addr, tls.is_some())?;
    // Feature enrichment reads the online store here too. An embedded store is one
    // process's file: while `qanat server` holds it, replicas need a shared one
    // (features.online_store = redis://...), and serve the rest meanwhile.
    let online_url = cfg.online_store_url();
    let online = match qanat_features::online::OnlineStore::open(&online_url).await {
        Ok(online) => Some(online),
        Err(e) => {
            tracing::warn!(
                store = %qanat_store::redact_url(&online_url),
                error = %e,
                "the online feature store cannot be opened: deployments that read features answer 503 here (replicas share a Redis online store)"
            );
            None
        }
    };
    // No scheduler, webhooks or executors run here: the jobs and events services are
    // built with the installation's settings and never started.
    let base = settings(&cfg)?;
    let python = crate::python_workers::settings(&cfg, &base.jobs).await?;
    let settings = wiring::Settings {
        online,
        load_check: std::env::current_exe().ok(),
        python,
        ..base
    };
    let state = wiring::build(inst.meta.clone(), inst.storage.clone(), settings).await?;
    state.serving.start(Duration::from_secs(1));
    let app = qanat_api::data_plane_router(state);
    listen(&cfg, listener, tls, app, "serve").await?;
    inst.meta.close().await;
    tracing::info!("qanat serve stopped");
    Ok(())
}

/// Binds the listener, warning when plain HTTP leaves the machine.
fn bind(addr: SocketAddr, tls: bool) -> Result<(std::net::TcpListener, SocketAddr)> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "port {} is in use (another server?): choose another with --port PORT",
            addr.port()
        ),
        _ => anyhow::Error::new(e).context(format!("binding {addr}")),
    })?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    if !tls && !local.ip().is_loopback() {
        tracing::warn!(
            address = %local,
            "serving plain HTTP on a non-loopback address: tokens and data cross the network unencrypted; configure server.tls_cert and server.tls_key"
        );
    }
    Ok((listener, local))
}

/// The request limits the configuration sets.
/// The services' settings from the configuration: the standard job kinds, no remote
/// executor, no online store and no load check (`qanat server` adds its own).
fn settings(cfg: &Config) -> Result<wiring::Settings> {
    Ok(wiring::Settings {
        http: qanat_api::Http {
            limits: ApiLimits {
                max_request_bytes: cfg.server.max_request_bytes,
                request_timeout: Duration::from_secs(cfg.server.request_timeout_secs),
                body_read_timeout: Duration::from_secs(cfg.server.body_read_timeout_secs),
                metrics_anonymous: cfg.server.metrics_anonymous,
            },
            mlflow_project: cfg.tracking.default_project.clone(),
            retention: Duration::from_secs(cfg.retention.deleted_days.saturating_mul(86_400)),
            secure_cookies: cfg.server.tls_cert.is_some(),
            ..qanat_api::Http::default()
        },
        oidc: cfg.oidc()?,
        events: cfg.events.settings(),
        runs: qanat_tracking::RunLimits {
            max_params: cfg.tracking.max_params_per_run,
            max_tags: cfg.tracking.max_tags_per_run,
        },
        jobs: cfg.jobs_settings()?,
        kinds: qanat_jobs::Kinds::standard(),
        slurm: None,
        kubernetes: None,
        online: None,
        online_region: cfg.online_region()?,
        join_memory: Some(cfg.join_memory_bytes()?),
        onnx_device: cfg
            .serving
            .onnx_device
            .parse()
            .map_err(|e| anyhow::anyhow!("serving.onnx_device = {e}"))?,
        load_check: None,
        python: None,
    })
}

/// Serves `app` on `listener` (TLS when configured) until SIGINT/SIGTERM, then
/// finishes in-flight requests within the grace period.
async fn listen(
    cfg: &Config,
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: axum::Router,
    what: &str,
) -> Result<()> {
    let local = listener.local_addr()?;
    let handle = axum_server::Handle::new();
    let grace = Duration::from_secs(cfg.server.shutdown_grace_secs);
    tokio::spawn({
        let handle = handle.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing in-flight requests");
            handle.graceful_shutdown(Some(grace));
        }
    });

    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(address = %local, tls = tls.is_some(), what, "qanat started");
    // A line on stdout that scripts (and the tests) wait for.
    println!("qanat {what} listening on {scheme}://{local}");
    let service = app.into_make_service();
    let fd_limit = crate::connections::raise_fd_limit();
    let cap = crate::connections::effective_cap(cfg.server.max_connections, fd_limit);
    tracing::info!(
        max_connections = cap,
        fd_limit = fd_limit.unwrap_or(0),
        "connection limits"
    );
    let guard = crate::connections::Guard::new(
        axum_server::accept::DefaultAcceptor,
        cap,
        cfg.server.max_connections_per_client,
        Duration::from_secs(cfg.server.idle_timeout_secs),
    );
    let header_timeout = Duration::from_secs(cfg.server.header_read_timeout_secs);
    match tls {
        Some(tls) => {
            let config = axum_server::tls_rustls::RustlsConfig::from_config(tls);
            let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(config)
                .handshake_timeout(header_timeout)
                .acceptor(guard);
            let mut server = axum_server::from_tcp(listener).acceptor(acceptor);
            http_timeouts(server.http_builder(), header_timeout);
            server.handle(handle).serve(service).await?
        }
        None => {
            let mut server = axum_server::from_tcp(listener).acceptor(guard);
            http_timeouts(server.http_builder(), header_timeout);
            server.handle(handle).serve(service).await?
        }
    }
    Ok(())
}

/// Headers must arrive within `header` (HTTP/1: also the wait for a kept-alive
/// connection's next request); HTTP/2 connections are pinged and closed when the peer
/// stops answering.
fn http_timeouts(
    builder: &mut hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    header: Duration,
) {
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(header)
        .keep_alive_timeout(header);
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
