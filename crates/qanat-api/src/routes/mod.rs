//! The route table: every endpoint with its authorization policy.

pub(crate) mod admin;
pub(crate) mod datasets;
pub(crate) mod mlflow;
pub(crate) mod mlflow_models;
pub(crate) mod models;
pub(crate) mod objects;
pub(crate) mod projects;
pub(crate) mod system;

use axum::extract::DefaultBodyLimit;
use axum::http::Method;
use axum::routing::{delete, get, patch, post, put, MethodRouter};
use qanat_governance::Requirement::{Authenticated, GlobalAdmin, Project, Public};
use qanat_governance::Role::{Admin, Editor, Maintainer, Viewer};

use crate::authz::{Policy, RouteTable};
use crate::{ApiLimits, AppState};

/// A version's manifest may list many files; its JSON gets a larger limit.
const MAX_MANIFEST_BYTES: usize = 256 << 20;

pub(crate) fn table(limits: &ApiLimits) -> RouteTable {
    // Non-streaming routes get the request timeout; object transfers stream for as long
    // as the bytes keep flowing.
    let timeout = limits.request_timeout;
    let t = move |m: MethodRouter<AppState>| {
        m.layer(axum::middleware::from_fn_with_state(
            timeout,
            request_timeout,
        ))
    };
    let table = mlflow_routes(RouteTable::default(), &t);
    let table = mlflow_model_routes(table, &t);
    let table = model_routes(table, &t);
    table
        .add(
            Method::GET,
            "/healthz",
            Policy::new("health", Public),
            t(get(system::healthz)),
        )
        .add(
            Method::GET,
            "/readyz",
            Policy::new("ready", Public),
            t(get(system::readyz)),
        )
        .add(
            Method::GET,
            "/metrics",
            Policy::new("metrics", Public),
            t(get(system::metrics)),
        )
        .add(
            Method::GET,
            "/api/v1/openapi.json",
            Policy::new("openapi", Public),
            t(get(system::openapi)),
        )
        .add(
            Method::GET,
            "/api/v1/whoami",
            Policy::new("whoami", Authenticated),
            t(get(system::whoami)),
        )
        .add(
            Method::GET,
            "/api/v1/storage/locations",
            Policy::new("storage.list", Authenticated),
            t(get(system::locations)),
        )
        // Projects and members.
        .add(
            Method::POST,
            "/api/v1/projects",
            Policy::new("project.create", GlobalAdmin),
            t(post(projects::create)),
        )
        .add(
            Method::GET,
            "/api/v1/projects",
            Policy::new("project.list", Authenticated),
            t(get(projects::list)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}",
            Policy::new("project.get", Project(Viewer)),
            t(get(projects::get_one)),
        )
        .add(
            Method::PATCH,
            "/api/v1/projects/{project}",
            Policy::new("project.update_policy", Project(Admin)),
            t(patch(projects::update)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/members",
            Policy::new("member.list", Project(Viewer)),
            t(get(projects::members)),
        )
        .add(
            Method::PUT,
            "/api/v1/projects/{project}/members/{user}",
            Policy::new("member.set", Project(Maintainer)),
            t(put(projects::set_member)),
        )
        .add(
            Method::DELETE,
            "/api/v1/projects/{project}/members/{user}",
            Policy::new("member.remove", Project(Maintainer)),
            t(delete(projects::remove_member)),
        )
        // Objects (the project's encrypted file area).
        .add(
            Method::GET,
            "/api/v1/projects/{project}/objects",
            Policy::new("object.list", Project(Viewer)),
            t(get(objects::list)),
        )
        .add(
            Method::PUT,
            "/api/v1/projects/{project}/objects/{*key}",
            Policy::new("object.write", Project(Editor)),
            put(objects::put_object),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/objects/{*key}",
            Policy::new("object.read", Project(Viewer)).governed_read(),
            get(objects::get_object),
        )
        .add(
            Method::DELETE,
            "/api/v1/projects/{project}/objects/{*key}",
            Policy::new("object.delete", Project(Editor)),
            t(delete(objects::delete_object)),
        )
        // Datasets.
        .add(
            Method::POST,
            "/api/v1/projects/{project}/datasets",
            Policy::new("dataset.create", Project(Editor)),
            t(post(datasets::create)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/datasets",
            Policy::new("dataset.list", Project(Viewer)).governed_read(),
            t(get(datasets::list)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/datasets/{dataset}",
            Policy::new("dataset.get", Project(Viewer)).governed_read(),
            t(get(datasets::get_one)),
        )
        .add(
            Method::POST,
            "/api/v1/projects/{project}/datasets/{dataset}/chunks/missing",
            Policy::new("dataset.push.check", Project(Editor)).staging(),
            t(post(datasets::missing)),
        )
        .add(
            Method::POST,
            "/api/v1/projects/{project}/datasets/{dataset}/chunks",
            Policy::new("dataset.push.chunks", Project(Editor)).staging(),
            t(post(datasets::put_pack)),
        )
        .add(
            Method::PUT,
            "/api/v1/projects/{project}/datasets/{dataset}/chunks/{chunk}",
            Policy::new("dataset.push.chunk", Project(Editor)).staging(),
            t(put(datasets::put_chunk)),
        )
        .add(
            Method::POST,
            "/api/v1/projects/{project}/datasets/{dataset}/versions",
            Policy::new("dataset.push", Project(Editor)),
            t(post(datasets::commit)).layer(DefaultBodyLimit::max(MAX_MANIFEST_BYTES)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/datasets/{dataset}/versions",
            Policy::new("dataset.log", Project(Viewer)).governed_read(),
            t(get(datasets::log)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/datasets/{dataset}/versions/{version}",
            Policy::new("dataset.pull", Project(Viewer)).governed_read(),
            t(get(datasets::show)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/datasets/{dataset}/versions/{version}/files/{index}",
            Policy::new("dataset.read", Project(Viewer)).governed_read(),
            get(datasets::file),
        )
        .add(
            Method::POST,
            "/api/v1/projects/{project}/datasets/{dataset}/copy",
            Policy::new("dataset.copy", Project(Editor)),
            post(datasets::copy),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/datasets/{dataset}/diff",
            Policy::new("dataset.diff", Project(Viewer)).governed_read(),
            t(get(datasets::diff)),
        )
        .add(
            Method::PUT,
            "/api/v1/projects/{project}/datasets/{dataset}/tags/{tag}",
            Policy::new("dataset.tag", Project(Editor)),
            t(put(datasets::tag)),
        )
        .add(
            Method::POST,
            "/api/v1/projects/{project}/gc",
            Policy::new("dataset.gc", Project(Maintainer)),
            post(datasets::gc),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/lineage",
            Policy::new("lineage.read", Project(Viewer)).governed_read(),
            t(get(datasets::lineage)),
        )
        // Identities and tokens.
        .add(
            Method::POST,
            "/api/v1/users",
            Policy::new("user.create", GlobalAdmin),
            t(post(admin::create_user)),
        )
        .add(
            Method::GET,
            "/api/v1/users",
            Policy::new("user.list", GlobalAdmin),
            t(get(admin::list_users)),
        )
        .add(
            Method::PATCH,
            "/api/v1/users/{user}",
            Policy::new("user.update", GlobalAdmin),
            t(patch(admin::update_user)),
        )
        .add(
            Method::POST,
            "/api/v1/tokens",
            Policy::new("token.create", Authenticated),
            t(post(admin::create_token)),
        )
        .add(
            Method::GET,
            "/api/v1/tokens",
            Policy::new("token.list", Authenticated),
            t(get(admin::list_tokens)),
        )
        .add(
            Method::DELETE,
            "/api/v1/tokens/{id}",
            Policy::new("token.revoke", Authenticated),
            t(delete(admin::revoke_token)),
        )
        // Audit and keys.
        .add(
            Method::GET,
            "/api/v1/audit",
            Policy::new("audit.read", GlobalAdmin),
            t(get(admin::audit)),
        )
        .add(
            Method::GET,
            "/api/v1/audit/verify",
            Policy::new("audit.verify", GlobalAdmin),
            t(get(admin::verify_audit)),
        )
        .add(
            Method::GET,
            "/api/v1/admin/keys",
            Policy::new("keys.status", GlobalAdmin),
            t(get(admin::keys)),
        )
        .add(
            Method::POST,
            "/api/v1/admin/keys/rotate",
            Policy::new("keys.rotate", GlobalAdmin),
            t(post(admin::rotate_keys)),
        )
}

/// Ends a request that runs past `limit` with a JSON 408 (the handler is dropped).
async fn request_timeout(
    axum::extract::State(limit): axum::extract::State<std::time::Duration>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => axum::response::IntoResponse::into_response(crate::ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            "REQUEST_TIMEOUT",
            format!(
                "the request took longer than {} s (server.request_timeout_secs); send it faster or in smaller parts",
                limit.as_secs()
            ),
        )),
    }
}

/// Registers an MLflow route at the root (default project) and under
/// `/mlflow/{project}`.
macro_rules! mlflow {
    ($table:expr, $method:expr, $path:literal, $policy:expr, $handler:expr) => {
        $table
            .add($method, $path, $policy.default_project(), $handler)
            .add(
                $method,
                concat!("/mlflow/{project}", $path),
                $policy,
                $handler,
            )
    };
}

/// The MLflow tracking API (see `mlflow.rs`): reads need viewers, writes editors.
fn mlflow_routes(
    table: RouteTable,
    t: &impl Fn(MethodRouter<AppState>) -> MethodRouter<AppState>,
) -> RouteTable {
    use mlflow as m;
    let read = |action| Policy::new(action, Project(Viewer));
    let write = |action| Policy::new(action, Project(Editor));
    let table = table
        .add(
            Method::GET,
            "/health",
            Policy::new("health", Public),
            t(get(m::health)),
        )
        .add(
            Method::GET,
            "/version",
            Policy::new("version", Public),
            t(get(m::version)),
        )
        .add(
            Method::GET,
            "/api/3.0/mlflow/server-info",
            Policy::new("mlflow.server_info", Public),
            t(get(m::server_info)),
        )
        .add(
            Method::GET,
            "/mlflow/{project}/api/3.0/mlflow/server-info",
            Policy::new("mlflow.server_info", Public),
            t(get(m::server_info)),
        );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/experiments/create",
        write("mlflow.experiment.create"),
        t(post(m::create_experiment))
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow/experiments/get",
        read("mlflow.experiment.get"),
        t(get(m::get_experiment))
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow/experiments/get-by-name",
        read("mlflow.experiment.get"),
        t(get(m::get_experiment_by_name))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/experiments/search",
        read("mlflow.experiment.search"),
        t(post(m::search_experiments_post))
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow/experiments/search",
        read("mlflow.experiment.search"),
        t(get(m::search_experiments_get))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/experiments/update",
        write("mlflow.experiment.update"),
        t(post(m::update_experiment))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/experiments/delete",
        write("mlflow.experiment.delete"),
        t(post(m::delete_experiment))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/experiments/restore",
        write("mlflow.experiment.restore"),
        t(post(m::restore_experiment))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/experiments/set-experiment-tag",
        write("mlflow.experiment.tag"),
        t(post(m::set_experiment_tag))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/experiments/delete-experiment-tag",
        write("mlflow.experiment.untag"),
        t(post(m::delete_experiment_tag))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/create",
        write("mlflow.run.create"),
        t(post(m::create_run))
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow/runs/get",
        read("mlflow.run.get"),
        t(get(m::get_run))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/update",
        write("mlflow.run.update"),
        t(post(m::update_run))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/delete",
        write("mlflow.run.delete"),
        t(post(m::delete_run))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/restore",
        write("mlflow.run.restore"),
        t(post(m::restore_run))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/log-parameter",
        write("mlflow.run.log"),
        t(post(m::log_param))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/log-metric",
        write("mlflow.run.log"),
        t(post(m::log_metric))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/log-batch",
        write("mlflow.run.log"),
        t(post(m::log_batch))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/set-tag",
        write("mlflow.run.tag"),
        t(post(m::set_tag))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/delete-tag",
        write("mlflow.run.untag"),
        t(post(m::delete_tag))
    );
    let table = mlflow!(
        table,
        Method::POST,
        "/api/2.0/mlflow/runs/search",
        read("mlflow.run.search"),
        t(post(m::search_runs))
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow/metrics/get-history",
        read("mlflow.metric.history"),
        t(get(m::metric_history))
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow/artifacts/list",
        read("mlflow.artifact.list"),
        t(get(m::list_run_artifacts))
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow-artifacts/artifacts",
        read("mlflow.artifact.list"),
        t(get(m::list_artifacts_proxy))
    );
    // Artifact bytes stream for as long as they keep flowing (no request timeout).
    let table = mlflow!(
        table,
        Method::PUT,
        "/api/2.0/mlflow-artifacts/artifacts/{*path}",
        write("mlflow.artifact.put"),
        put(m::put_artifact)
    );
    let table = mlflow!(
        table,
        Method::GET,
        "/api/2.0/mlflow-artifacts/artifacts/{*path}",
        read("mlflow.artifact.get").governed_read(),
        get(m::get_artifact)
    );
    mlflow!(
        table,
        Method::DELETE,
        "/api/2.0/mlflow-artifacts/artifacts/{*path}",
        write("mlflow.artifact.delete"),
        t(delete(m::delete_artifact))
    )
}

/// MLflow logged models, run inputs/outputs and the model registry (see
/// `mlflow_models.rs`): reads need viewers, writes editors; moving an alias or a stage
/// (what serving follows) and deleting registry entries need maintainers.
fn mlflow_model_routes(
    table: RouteTable,
    t: &impl Fn(MethodRouter<AppState>) -> MethodRouter<AppState>,
) -> RouteTable {
    use mlflow_models as m;
    let read = |action| Policy::new(action, Project(Viewer));
    let write = |action| Policy::new(action, Project(Editor));
    let release = |action| Policy::new(action, Project(Maintainer));
    let routes: Vec<(
        Method,
        &'static str,
        &'static str,
        Policy,
        MethodRouter<AppState>,
    )> = vec![
        (
            Method::POST,
            "/api/2.0/mlflow/logged-models",
            "/mlflow/{project}/api/2.0/mlflow/logged-models",
            write("mlflow.logged_model.create"),
            post(m::create_logged_model),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/logged-models/search",
            "/mlflow/{project}/api/2.0/mlflow/logged-models/search",
            read("mlflow.logged_model.search"),
            post(m::search_logged_models),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/logged-models/{model_id}",
            "/mlflow/{project}/api/2.0/mlflow/logged-models/{model_id}",
            read("mlflow.logged_model.get"),
            get(m::get_logged_model),
        ),
        (
            Method::PATCH,
            "/api/2.0/mlflow/logged-models/{model_id}",
            "/mlflow/{project}/api/2.0/mlflow/logged-models/{model_id}",
            write("mlflow.logged_model.finalize"),
            patch(m::finalize_logged_model),
        ),
        (
            Method::DELETE,
            "/api/2.0/mlflow/logged-models/{model_id}",
            "/mlflow/{project}/api/2.0/mlflow/logged-models/{model_id}",
            write("mlflow.logged_model.delete"),
            delete(m::delete_logged_model),
        ),
        (
            Method::PATCH,
            "/api/2.0/mlflow/logged-models/{model_id}/tags",
            "/mlflow/{project}/api/2.0/mlflow/logged-models/{model_id}/tags",
            write("mlflow.logged_model.tag"),
            patch(m::set_logged_model_tags),
        ),
        (
            Method::DELETE,
            "/api/2.0/mlflow/logged-models/{model_id}/tags/{tag_key}",
            "/mlflow/{project}/api/2.0/mlflow/logged-models/{model_id}/tags/{tag_key}",
            write("mlflow.logged_model.untag"),
            delete(m::delete_logged_model_tag),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/logged-models/{model_id}/params",
            "/mlflow/{project}/api/2.0/mlflow/logged-models/{model_id}/params",
            write("mlflow.logged_model.params"),
            post(m::log_logged_model_params),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/runs/outputs",
            "/mlflow/{project}/api/2.0/mlflow/runs/outputs",
            write("mlflow.run.outputs"),
            post(m::log_outputs),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/runs/log-inputs",
            "/mlflow/{project}/api/2.0/mlflow/runs/log-inputs",
            write("mlflow.run.inputs"),
            post(m::log_inputs),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/registered-models/create",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/create",
            write("mlflow.registered_model.create"),
            post(m::create_registered_model),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/registered-models/get",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/get",
            read("mlflow.registered_model.get"),
            get(m::get_registered_model),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/registered-models/search",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/search",
            read("mlflow.registered_model.search"),
            get(m::search_registered_models),
        ),
        (
            Method::PATCH,
            "/api/2.0/mlflow/registered-models/update",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/update",
            write("mlflow.registered_model.update"),
            patch(m::update_registered_model),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/registered-models/rename",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/rename",
            write("mlflow.registered_model.rename"),
            post(m::rename_registered_model),
        ),
        (
            Method::DELETE,
            "/api/2.0/mlflow/registered-models/delete",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/delete",
            release("mlflow.registered_model.delete"),
            delete(m::delete_registered_model),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/registered-models/set-tag",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/set-tag",
            write("mlflow.registered_model.tag"),
            post(m::set_registered_model_tag),
        ),
        (
            Method::DELETE,
            "/api/2.0/mlflow/registered-models/delete-tag",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/delete-tag",
            write("mlflow.registered_model.untag"),
            delete(m::delete_registered_model_tag),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/registered-models/get-latest-versions",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/get-latest-versions",
            read("mlflow.registered_model.latest"),
            post(m::latest_versions_post),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/registered-models/get-latest-versions",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/get-latest-versions",
            read("mlflow.registered_model.latest"),
            get(m::latest_versions_get),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/registered-models/alias",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/alias",
            release("mlflow.model_alias.set"),
            post(m::set_alias),
        ),
        (
            Method::DELETE,
            "/api/2.0/mlflow/registered-models/alias",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/alias",
            release("mlflow.model_alias.delete"),
            delete(m::delete_alias),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/registered-models/alias",
            "/mlflow/{project}/api/2.0/mlflow/registered-models/alias",
            read("mlflow.model_alias.get"),
            get(m::get_by_alias),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/model-versions/create",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/create",
            write("mlflow.model_version.create"),
            post(m::create_model_version),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/model-versions/get",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/get",
            read("mlflow.model_version.get"),
            get(m::get_model_version),
        ),
        (
            Method::PATCH,
            "/api/2.0/mlflow/model-versions/update",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/update",
            write("mlflow.model_version.update"),
            patch(m::update_model_version),
        ),
        (
            Method::DELETE,
            "/api/2.0/mlflow/model-versions/delete",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/delete",
            release("mlflow.model_version.delete"),
            delete(m::delete_model_version),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/model-versions/search",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/search",
            read("mlflow.model_version.search"),
            get(m::search_model_versions),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/model-versions/transition-stage",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/transition-stage",
            release("mlflow.model_version.stage"),
            post(m::transition_stage),
        ),
        (
            Method::GET,
            "/api/2.0/mlflow/model-versions/get-download-uri",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/get-download-uri",
            read("mlflow.model_version.download_uri"),
            get(m::download_uri),
        ),
        (
            Method::POST,
            "/api/2.0/mlflow/model-versions/set-tag",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/set-tag",
            write("mlflow.model_version.tag"),
            post(m::set_model_version_tag),
        ),
        (
            Method::DELETE,
            "/api/2.0/mlflow/model-versions/delete-tag",
            "/mlflow/{project}/api/2.0/mlflow/model-versions/delete-tag",
            write("mlflow.model_version.untag"),
            delete(m::delete_model_version_tag),
        ),
    ];
    routes
        .into_iter()
        .fold(table, |table, (method, root, scoped, policy, handler)| {
            // Each path twice: at the root (the default project) and under /mlflow/{project}.
            let handler = t(handler);
            table
                .add(
                    method.clone(),
                    root,
                    policy.default_project(),
                    handler.clone(),
                )
                .add(method, scoped, policy, handler)
        })
}

/// The native registry API (see `models.rs`): viewers read; moving an alias needs a
/// maintainer.
fn model_routes(
    table: RouteTable,
    t: &impl Fn(MethodRouter<AppState>) -> MethodRouter<AppState>,
) -> RouteTable {
    table
        .add(
            Method::GET,
            "/api/v1/projects/{project}/models",
            Policy::new("model.list", Project(Viewer)),
            t(get(models::list)),
        )
        .add(
            Method::GET,
            "/api/v1/projects/{project}/models/{name}",
            Policy::new("model.read", Project(Viewer)),
            t(get(models::show)),
        )
        .add(
            Method::PUT,
            "/api/v1/projects/{project}/models/{name}/aliases/{alias}",
            Policy::new("model.alias.set", Project(Maintainer)),
            t(put(models::set_alias)),
        )
        .add(
            Method::DELETE,
            "/api/v1/projects/{project}/models/{name}/aliases/{alias}",
            Policy::new("model.alias.delete", Project(Maintainer)),
            t(delete(models::delete_alias)),
        )
        .add(
            Method::POST,
            "/api/v1/projects/{project}/models/{name}/aliases/{alias}/promote",
            Policy::new("model.promote", Project(Maintainer)),
            t(post(models::promote)),
        )
        .add(
            Method::POST,
            "/api/v1/projects/{project}/models/{name}/aliases/{alias}/rollback",
            Policy::new("model.rollback", Project(Maintainer)),
            t(post(models::rollback)),
        )
}
