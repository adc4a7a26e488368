//! The OpenAPI 3 document of the native API, generated from the handlers' annotations.

use std::sync::OnceLock;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
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

/// The document as JSON text (built once): the paths and schemas come from the route
/// table, where each handler's `#[utoipa::path]` is also what routes it.
pub fn openapi_json() -> String {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let (paths, schemas) = crate::route_table(&crate::ApiLimits::default()).documentation();
        let mut doc = ApiDoc::openapi();
        doc.paths = paths;
        if let Some(components) = doc.components.as_mut() {
            components.schemas.extend(schemas);
        }
        doc.to_pretty_json().unwrap_or_else(|_| "{}".into())
    })
    .clone()
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
        let doc: serde_json::Value = serde_json::from_str(&openapi_json()).expect("json");
        let paths = doc["paths"].as_object().expect("paths");
        let table = crate::route_table(&crate::ApiLimits::default());
        let mut routed = 0;
        for (method, path, _) in table.policies() {
            // The MLflow API is MLflow's, documented in docs/tracking.md; the gRPC
            // service is the protocol's (proto/inference.proto, docs/serving.md).
            if is_mlflow(path) || path.starts_with("/inference.GRPCInferenceService/") {
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
}
