//! The OpenAPI 3 document of the native API, generated from the handlers' annotations.

use std::sync::OnceLock;

use qanat_jobs::Kinds;
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = doc.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Qanat API", description = "The native API of Qanat, a self-hosted ML platform. Every route except the probes needs 'Authorization: Bearer <token>'."),
    components(schemas(crate::ErrorBody)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

/// The document as JSON text: the paths and schemas come from the route table (built
/// once), where each handler's `#[utoipa::path]` is also what routes it; a job's fields
/// from the server's job `kinds` (see [`with_job_kinds`]).
pub fn openapi_json(kinds: &Kinds) -> String {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    let mut doc = DOC
        .get_or_init(|| {
            let (paths, schemas) = crate::route_table(&crate::ApiLimits::default()).documentation();
            let mut doc = ApiDoc::openapi();
            doc.paths = paths;
            if let Some(components) = doc.components.as_mut() {
                components.schemas.extend(schemas);
            }
            doc
        })
        .clone();
    with_job_kinds(&mut doc, kinds);
    doc.to_pretty_json().unwrap_or_else(|_| "{}".into())
}

/// Publishes each kind's fields: the schema of the type the kind reads them into
/// (`TrainFields`, `CommandFields`, …, with what they refer to), and `JobSpec` as its
/// common fields together with exactly one kind's (`kind` says which; `command` when
/// absent).
fn with_job_kinds(doc: &mut utoipa::openapi::OpenApi, kinds: &Kinds) {
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let mut one_of = OneOfBuilder::new();
    for kind in kinds.iter() {
        let fields = kind.fields();
        let mut word = ObjectBuilder::new()
            .property(
                "kind",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some([kind.name()])),
            )
            .title(Some(format!("kind: {}", kind.name())));
        if kind.name() != "command" {
            word = word.required("kind");
        }
        one_of = one_of.item(
            AllOfBuilder::new()
                .item(word)
                .item(Ref::from_schema_name(fields.name.as_str())),
        );
        components.schemas.extend(fields.schemas);
    }
    if let Some(common) = components.schemas.remove("JobSpec") {
        // `JobSpec` derives as its common fields and a free-form object for the
        // flattened kind's fields; the kinds' schemas stand for the latter.
        let parts = match common {
            RefOr::T(Schema::AllOf(all)) => all.items,
            other => vec![other],
        };
        let mut spec = AllOfBuilder::new();
        for part in parts {
            let free_form = matches!(&part, RefOr::T(Schema::Object(o)) if o.properties.is_empty());
            if !free_form {
                spec = spec.item(part);
            }
        }
        let spec = spec.item(one_of).description(Some(
            "A job: the common fields, and the fields of its kind (`kind`, `command` by default).",
        ));
        components
            .schemas
            .insert("JobSpec".into(), RefOr::T(Schema::AllOf(spec.build())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_mlflow(path: &str) -> bool {
        path.starts_with("/api/2.0/")
            || path.starts_with("/api/3.0/")
            || path.starts_with("/ajax-api/")
            || path.starts_with("/mlflow/")
            || path == "/health"
            || path == "/version"
            || path == "/get-artifact"
            || path == "/model-versions/get-artifact"
    }

    /// Every route in the table is documented (wildcards appear as `{key}`), and the
    /// document documents nothing that is not routed.
    #[test]
    fn openapi_documents_every_route() {
        let doc: serde_json::Value =
            serde_json::from_str(&openapi_json(&Kinds::standard())).expect("json");
        let paths = doc["paths"].as_object().expect("paths");
        let table = crate::route_table(&crate::ApiLimits::default());
        let mut routed = 0;
        for (method, path, policy) in table.policies() {
            // Pages of the web UI are HTML for browsers, not API (docs/ui.md).
            if policy.ui {
                continue;
            }
            // The MLflow API is MLflow's, documented in docs/tracking.md; the gRPC
            // service is the protocol's (proto/inference.proto, docs/serving.md); the
            // Open Inference Protocol's routes are documented once, at `/v2…`, and
            // `/oip/{project}` repeats them for any project (docs/serving.md).
            if is_mlflow(path)
                || path.starts_with("/inference.GRPCInferenceService/")
                || path.starts_with("/oip/")
            {
                continue;
            }
            routed += 1;
            let doc_path = path.replace("{*", "{");
            let ops = paths
                .get(&doc_path)
                .unwrap_or_else(|| panic!("{doc_path} is routed but not documented"));
            assert!(
                ops.get(method.as_str().to_lowercase()).is_some(),
                "{method} {doc_path} is routed but not documented"
            );
        }
        let documented: usize = paths
            .values()
            .map(|v| v.as_object().map_or(0, |o| o.len()))
            .sum();
        assert_eq!(
            documented, routed,
            "documented operations that are not routed"
        );
    }

    /// A job's fields are published per kind: `JobSpec` is its common fields and one
    /// kind's, and each kind's fields type is a schema of its own.
    #[test]
    fn job_kinds_publish_their_fields() {
        let doc: serde_json::Value =
            serde_json::from_str(&openapi_json(&Kinds::standard())).expect("json");
        let schemas = &doc["components"]["schemas"];
        let spec = &schemas["JobSpec"]["allOf"];
        assert!(spec[0]["properties"]["resources"].is_object(), "{spec}");
        let kinds = spec[1]["oneOf"].as_array().expect("one of the kinds");
        assert_eq!(kinds.len(), 1, "{kinds:?}");
        assert_eq!(
            kinds[0]["allOf"][0]["properties"]["kind"]["enum"][0],
            "command"
        );
        assert_eq!(
            kinds[0]["allOf"][1]["$ref"],
            "#/components/schemas/CommandFields"
        );
        let command = &schemas["CommandFields"];
        assert!(command["properties"]["command"].is_object(), "{command}");
        assert_eq!(command["required"][0], "command", "{command}");
    }
}
