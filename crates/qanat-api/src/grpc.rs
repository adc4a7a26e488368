//! The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`), as
//! Triton's and KServe's gRPC clients call it: the six core methods, Triton's
//! streaming `ModelStreamInfer` and its model-repository extension, on the same port
//! as REST (HTTP/2, h2c or TLS).
//!
//! Each method is a route of the route table (`POST /inference.GRPCInferenceService/…`)
//! with its policy, so gRPC calls pass the one authorization point, its audit of
//! refusals, the request id, metrics and limits like every REST call; a refusal
//! reaches a gRPC client as its HTTP status (401 → UNAUTHENTICATED, 403 →
//! PERMISSION_DENIED). The messages are compiled from `proto/inference.proto` at build
//! time by protox (pure Rust: no `protoc` to install). Requests become the same
//! [`InferRequest`] REST builds, so a gRPC answer equals the REST one. The service's
//! paths name no project: a call is for the default project unless its metadata has a
//! `qanat-project` entry, which the authorization point reads as REST's header.

use std::pin::Pin;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use qanat_core::{DomainError, ErrorKind};
use qanat_governance::Role::{Editor, Viewer};
use qanat_governance::{AuditOutcome, AuditRecord, Principal};
use qanat_serving::oip::{self, InferRequest, InferResponse, RequestInput, RequestOutput};
use qanat_serving::tensor::Raw;
use serde_json::{Map, Value};
use tonic::{Code, Status};
use tower::ServiceExt;

use crate::authz::{Policy, ProjectScope};
use crate::route_table::{Fragment, Transfer};
use crate::AppState;

#[allow(clippy::all, unreachable_pub, missing_docs)]
pub(crate) mod proto {
    tonic::include_proto!("inference");
}

use proto::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use proto::infer_parameter::ParameterChoice;
use proto::{
    model_infer_response, model_metadata_response, InferParameter, InferTensorContents,
    ModelInferRequest, ModelInferResponse, ModelMetadataRequest, ModelMetadataResponse,
    ModelReadyRequest, ModelReadyResponse, ModelStreamInferResponse, RepositoryIndexRequest,
    RepositoryIndexResponse, RepositoryModelLoadRequest, RepositoryModelLoadResponse,
    RepositoryModelUnloadRequest, RepositoryModelUnloadResponse, ServerLiveRequest,
    ServerLiveResponse, ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest,
    ServerReadyResponse,
};

/// The service, answering for the state's serving domain.
struct Inference {
    state: AppState,
}

/// A domain error as a gRPC status: caller mistakes keep their message; an internal
/// fault is logged and answered generically.
fn status(e: qanat_serving::Error) -> Status {
    let message = e.to_string();
    let code = match e.kind() {
        ErrorKind::Invalid => Code::InvalidArgument,
        ErrorKind::NotFound | ErrorKind::Gone => Code::NotFound,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::Conflict => Code::Aborted,
        ErrorKind::Unauthenticated => Code::Unauthenticated,
        ErrorKind::Forbidden => Code::PermissionDenied,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Exhausted => Code::ResourceExhausted,
        ErrorKind::Integrity | ErrorKind::Internal => {
            tracing::error!(error = %message, "gRPC inference failed");
            return Status::internal("internal error (see the server log)");
        }
    };
    Status::new(code, message)
}

/// The project and caller the authorization point resolved for this call.
fn scope<T>(req: &tonic::Request<T>) -> Result<(ProjectScope, String), Status> {
    let scope = req
        .extensions()
        .get::<ProjectScope>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("authentication required"))?;
    let actor = req
        .extensions()
        .get::<qanat_governance::Principal>()
        .map(|p| p.name.clone())
        .unwrap_or_else(|| "anonymous".into());
    Ok((scope, actor))
}

/// The call's request id and routing key (`x-routing-key`, for sticky A/B), from its
/// metadata.
fn call_metadata<T>(req: &tonic::Request<T>) -> (String, Option<String>) {
    let text = |name: &str| {
        req.metadata()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    (
        text(crate::REQUEST_ID).unwrap_or_default(),
        text("x-routing-key"),
    )
}

/// A repository request's `repository_name`: empty, or the project the call resolved
/// to (the model repository a Qanat server answers for is a project's deployments and
/// models).
fn repository(scope: &ProjectScope, name: &str) -> Result<(), Status> {
    if name.is_empty() || name == scope.project.name {
        Ok(())
    } else {
        Err(Status::not_found(format!(
            "repository '{name}': this server's repository is project '{}'; leave repository_name empty",
            scope.project.name
        )))
    }
}

/// Load and unload take no configuration and no files: a model comes from the
/// registry. Unload's `unload_dependents` (which Triton's client always sends) is
/// accepted: a deployment has no dependent models to unload with it.
fn repository_parameters(
    p: &std::collections::HashMap<String, proto::ModelRepositoryParameter>,
    accepted: &[&str],
) -> Result<(), Status> {
    match p.keys().find(|k| !accepted.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(Status::invalid_argument(format!(
            "parameter '{k}' is not supported: models are loaded from the registry, not from a configuration or files sent with the call (register a version with `qanat models`, deploy it with `qanat deploy`)"
        ))),
    }
}

/// How many requests of one `ModelStreamInfer` stream run at once. Answers come back
/// in the order the requests came, so the client can match them without ids; the
/// requests in flight together reach the dynamic batcher together.
const STREAM_IN_FLIGHT: usize = 64;

/// What every request of one stream shares.
#[derive(Clone)]
struct StreamCall {
    state: AppState,
    scope: ProjectScope,
    actor: String,
    principal: Option<Principal>,
    request_id: String,
    routing_key: Option<String>,
}

impl StreamCall {
    /// The `n`th request of the stream (from 0): one inference, its failure answered
    /// in `error_message` while the stream goes on, as Triton does. The call itself
    /// passed the authorization point and counted once against the token's rate
    /// limit as the first request; each further request counts once more.
    async fn infer(self, n: usize, r: ModelInferRequest) -> ModelStreamInferResponse {
        let failed = |message: String| ModelStreamInferResponse {
            error_message: message,
            infer_response: None,
        };
        if n > 0 {
            if let Some(p) = &self.principal {
                if let Err(refusal) = crate::authz::rate_check(&self.state, p) {
                    if let Some(detail) = refusal.audit_detail {
                        self.audit_refusal(detail).await;
                    }
                    return failed(format!(
                        "RESOURCE_EXHAUSTED: {} (retry after {} s)",
                        refusal.err.message, refusal.retry_after_s
                    ));
                }
            }
        }
        // Each request of the stream has its own id in the inference log.
        let request_id = format!("{}/{n}", self.request_id);
        let caller = qanat_serving::Caller {
            actor: &self.actor,
            request_id: &request_id,
            routing_key: self.routing_key.as_deref(),
        };
        let (name, v) = (r.model_name.clone(), r.model_version.clone());
        let answer = match request(r, max_elements(&self.state)) {
            Ok(infer) => self
                .state
                .serving
                .infer(&self.scope.project, &name, version(&v), infer, caller)
                .await
                .map_err(status),
            Err(s) => Err(s),
        };
        match answer {
            Ok(a) => ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(response(a)),
            },
            Err(s) => failed(s.message().to_string()),
        }
    }

    /// The sampled audit entry of requests on the stream refused by the rate limit.
    /// Nothing was done for them, so an audit log that cannot be written is logged,
    /// not answered.
    async fn audit_refusal(&self, detail: String) {
        let record = AuditRecord {
            request_id: self.request_id.clone(),
            actor: self.actor.clone(),
            action: "serving.infer".into(),
            resource: format!("{SERVICE}/ModelStreamInfer"),
            project: Some(self.scope.project.name.clone()),
            outcome: AuditOutcome::Denied,
            detail: format!("429 {detail}"),
        };
        if let Err(e) = self.state.gov.append_audit(&record).await {
            tracing::error!(error = %e, "audit log append failed for a rate-limited stream request");
        }
    }
}

fn version(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

fn parameter(p: &InferParameter) -> Value {
    match &p.parameter_choice {
        Some(ParameterChoice::BoolParam(b)) => Value::from(*b),
        Some(ParameterChoice::Int64Param(i)) => Value::from(*i),
        Some(ParameterChoice::StringParam(s)) => Value::from(s.clone()),
        Some(ParameterChoice::DoubleParam(d)) => Value::from(*d),
        Some(ParameterChoice::Uint64Param(u)) => Value::from(*u),
        None => Value::Null,
    }
}

fn parameters(p: &std::collections::HashMap<String, InferParameter>) -> Option<Map<String, Value>> {
    (!p.is_empty()).then(|| p.iter().map(|(k, v)| (k.clone(), parameter(v))).collect())
}

/// Typed contents as the raw little-endian bytes of `datatype`, so that serving reads
/// both kinds of gRPC tensor the same way. A value that does not fit the datatype
/// (300 in an `INT8` tensor) is refused, not wrapped.
fn contents(name: &str, datatype: &str, c: Option<InferTensorContents>) -> Result<Vec<u8>, Status> {
    fn narrow<T: TryFrom<V>, V: Copy + std::fmt::Display>(
        name: &str,
        datatype: &str,
        values: &[V],
        mut put: impl FnMut(T),
    ) -> Result<(), Status> {
        for &v in values {
            let t = T::try_from(v).map_err(|_| {
                Status::invalid_argument(format!(
                    "input '{name}' holds {v}, which is out of range for {datatype}"
                ))
            })?;
            put(t);
        }
        Ok(())
    }
    let c = c.unwrap_or_default();
    let mut raw = Vec::new();
    match datatype {
        "BOOL" => raw.extend(c.bool_contents.iter().map(|&b| u8::from(b))),
        "INT8" => narrow(name, datatype, &c.int_contents, |v: i8| {
            raw.extend_from_slice(&v.to_le_bytes())
        })?,
        "INT16" => narrow(name, datatype, &c.int_contents, |v: i16| {
            raw.extend_from_slice(&v.to_le_bytes())
        })?,
        "INT32" => c
            .int_contents
            .iter()
            .for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        "INT64" => c
            .int64_contents
            .iter()
            .for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        "UINT8" => narrow(name, datatype, &c.uint_contents, |v: u8| raw.push(v))?,
        "UINT16" => narrow(name, datatype, &c.uint_contents, |v: u16| {
            raw.extend_from_slice(&v.to_le_bytes())
        })?,
        "UINT32" => c
            .uint_contents
            .iter()
            .for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        "UINT64" => c
            .uint64_contents
            .iter()
            .for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        "FP32" => c
            .fp32_contents
            .iter()
            .for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        "FP64" => c
            .fp64_contents
            .iter()
            .for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        "BYTES" => {
            for b in &c.bytes_contents {
                let len = u32::try_from(b.len()).map_err(|_| {
                    Status::invalid_argument(format!(
                        "input '{name}' has a BYTES element over 4 GiB"
                    ))
                })?;
                raw.extend_from_slice(&len.to_le_bytes());
                raw.extend_from_slice(b);
            }
        }
        other => {
            return Err(Status::invalid_argument(format!(
                "input '{name}' has datatype {other}: send FP16 and BF16 as raw_input_contents"
            )))
        }
    }
    Ok(raw)
}

/// The most tensor elements one gRPC request may carry: as many as a REST body of
/// `server.max_request_bytes` could (two bytes a number, `1,`). Tensors stay raw bytes
/// inside serving, but a model's column takes 4 to 8 bytes an element, so a tensor of
/// single bytes is bounded as REST's would be.
fn max_elements(state: &AppState) -> usize {
    (state.http.limits.max_request_bytes / 2).max(1)
}

/// Elements `r`'s tensors hold (raw contents counted at their narrowest: one byte a
/// value, four for a `BYTES` element's length prefix).
fn elements(r: &ModelInferRequest) -> usize {
    let typed: usize = r
        .inputs
        .iter()
        .filter_map(|t| t.contents.as_ref())
        .map(|c| {
            c.bool_contents.len()
                + c.int_contents.len()
                + c.int64_contents.len()
                + c.uint_contents.len()
                + c.uint64_contents.len()
                + c.fp32_contents.len()
                + c.fp64_contents.len()
                + c.bytes_contents.len()
        })
        .sum();
    let raw: usize = r
        .inputs
        .iter()
        .zip(&r.raw_input_contents)
        .map(|(t, bytes)| {
            let width = match t.datatype.as_str() {
                "BOOL" | "UINT8" | "INT8" => 1,
                "UINT16" | "INT16" | "FP16" | "BF16" => 2,
                "UINT64" | "INT64" | "FP64" => 8,
                _ => 4,
            };
            bytes.len() / width
        })
        .sum();
    typed + raw
}

/// A gRPC request as the [`InferRequest`] REST builds.
fn request(r: ModelInferRequest, max_elements: usize) -> Result<InferRequest, Status> {
    let n = elements(&r);
    if n > max_elements {
        return Err(Status::invalid_argument(format!(
            "the request carries {n} tensor elements, over this server's limit of {max_elements} (server.max_request_bytes / 2); send fewer rows per request"
        )));
    }
    let raw = r.raw_input_contents;
    if !raw.is_empty() && raw.len() != r.inputs.len() {
        return Err(Status::invalid_argument(format!(
            "{} raw_input_contents for {} inputs: give one per input, or none",
            raw.len(),
            r.inputs.len()
        )));
    }
    let mut inputs = Vec::with_capacity(r.inputs.len());
    let mut raw = raw.into_iter();
    for t in r.inputs {
        let bytes = match raw.next() {
            Some(bytes) => bytes,
            None => contents(&t.name, &t.datatype, t.contents)?,
        };
        let tensor = Raw::new(&t.name, &t.datatype, bytes).map_err(status)?;
        inputs.push(RequestInput {
            parameters: parameters(&t.parameters),
            name: t.name,
            shape: t.shape,
            datatype: t.datatype,
            data: Value::Null,
            raw: Some(tensor),
        });
    }
    let outputs = (!r.outputs.is_empty()).then(|| {
        r.outputs
            .iter()
            .map(|o| RequestOutput {
                name: o.name.clone(),
                parameters: parameters(&o.parameters),
            })
            .collect()
    });
    Ok(InferRequest {
        id: version(&r.id).map(str::to_string),
        parameters: parameters(&r.parameters),
        inputs,
        outputs,
    })
}

/// The answer with each output's data as raw bytes, as Triton answers.
fn response(r: InferResponse) -> ModelInferResponse {
    let raw = r.outputs.iter().map(oip::raw_output).collect();
    ModelInferResponse {
        model_name: r.model_name,
        model_version: r.model_version,
        id: r.id.unwrap_or_default(),
        parameters: Default::default(),
        outputs: r
            .outputs
            .into_iter()
            .map(|o| model_infer_response::InferOutputTensor {
                name: o.name,
                datatype: o.datatype,
                shape: o.shape.into_iter().map(|d| d as i64).collect(),
                parameters: Default::default(),
                contents: None,
            })
            .collect(),
        raw_output_contents: raw,
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Inference {
    type ModelStreamInferStream =
        Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

    async fn server_live(
        &self,
        _: tonic::Request<ServerLiveRequest>,
    ) -> Result<tonic::Response<ServerLiveResponse>, Status> {
        Ok(tonic::Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: tonic::Request<ServerReadyRequest>,
    ) -> Result<tonic::Response<ServerReadyResponse>, Status> {
        Ok(tonic::Response::new(ServerReadyResponse { ready: true }))
    }

    async fn model_ready(
        &self,
        req: tonic::Request<ModelReadyRequest>,
    ) -> Result<tonic::Response<ModelReadyResponse>, Status> {
        let (scope, _) = scope(&req)?;
        let r = req.into_inner();
        let ready = match self
            .state
            .serving
            .ready(&scope.project, &r.name, version(&r.version))
            .await
        {
            Ok(()) => true,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::NotFound | ErrorKind::Unavailable | ErrorKind::Invalid
                ) =>
            {
                false
            }
            Err(e) => return Err(status(e)),
        };
        Ok(tonic::Response::new(ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: tonic::Request<ServerMetadataRequest>,
    ) -> Result<tonic::Response<ServerMetadataResponse>, Status> {
        Ok(tonic::Response::new(ServerMetadataResponse {
            name: "qanat".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: vec!["binary_tensor_data".into(), "model_repository".into()],
        }))
    }

    async fn model_metadata(
        &self,
        req: tonic::Request<ModelMetadataRequest>,
    ) -> Result<tonic::Response<ModelMetadataResponse>, Status> {
        let (scope, _) = scope(&req)?;
        let r = req.into_inner();
        let m = self
            .state
            .serving
            .metadata(&scope.project, &r.name, version(&r.version))
            .await
            .map_err(status)?;
        let tensor = |t: oip::TensorMetadata| model_metadata_response::TensorMetadata {
            name: t.name,
            datatype: t.datatype,
            shape: t.shape,
        };
        Ok(tonic::Response::new(ModelMetadataResponse {
            name: m.name,
            versions: m.versions,
            platform: m.platform,
            inputs: m.inputs.into_iter().map(tensor).collect(),
            outputs: m.outputs.into_iter().map(tensor).collect(),
        }))
    }

    async fn model_infer(
        &self,
        req: tonic::Request<ModelInferRequest>,
    ) -> Result<tonic::Response<ModelInferResponse>, Status> {
        let (scope, actor) = scope(&req)?;
        let (request_id, routing_key) = call_metadata(&req);
        let r = req.into_inner();
        let (name, v) = (r.model_name.clone(), r.model_version.clone());
        let infer = request(r, max_elements(&self.state))?;
        let caller = qanat_serving::Caller {
            actor: &actor,
            request_id: &request_id,
            routing_key: routing_key.as_deref(),
        };
        let answer = self
            .state
            .serving
            .infer(&scope.project, &name, version(&v), infer, caller)
            .await
            .map_err(status)?;
        Ok(tonic::Response::new(response(answer)))
    }

    async fn model_stream_infer(
        &self,
        req: tonic::Request<tonic::Streaming<ModelInferRequest>>,
    ) -> Result<tonic::Response<Self::ModelStreamInferStream>, Status> {
        let (scope, actor) = scope(&req)?;
        let (request_id, routing_key) = call_metadata(&req);
        let call = StreamCall {
            state: self.state.clone(),
            principal: req.extensions().get::<Principal>().cloned(),
            scope,
            actor,
            request_id,
            routing_key,
        };
        // A message that does not decode ends the stream with its status; each
        // request that decodes is answered, in order.
        let answers = req
            .into_inner()
            .enumerate()
            .map(move |(n, message)| {
                let call = call.clone();
                async move {
                    match message {
                        Ok(r) => Ok(call.infer(n, r).await),
                        Err(s) => Err(s),
                    }
                }
            })
            .buffered(STREAM_IN_FLIGHT);
        Ok(tonic::Response::new(Box::pin(answers)))
    }

    async fn repository_index(
        &self,
        req: tonic::Request<RepositoryIndexRequest>,
    ) -> Result<tonic::Response<RepositoryIndexResponse>, Status> {
        let (scope, _) = scope(&req)?;
        let r = req.into_inner();
        repository(&scope, &r.repository_name)?;
        let entries = self
            .state
            .serving
            .repository_index(&scope.project, r.ready)
            .await
            .map_err(status)?;
        Ok(tonic::Response::new(RepositoryIndexResponse {
            models: entries
                .into_iter()
                .map(|e| proto::repository_index_response::ModelIndex {
                    name: e.name,
                    version: e.version.unwrap_or_default(),
                    state: e.state,
                    reason: e.reason,
                })
                .collect(),
        }))
    }

    async fn repository_model_load(
        &self,
        req: tonic::Request<RepositoryModelLoadRequest>,
    ) -> Result<tonic::Response<RepositoryModelLoadResponse>, Status> {
        let (scope, _) = scope(&req)?;
        let r = req.into_inner();
        repository(&scope, &r.repository_name)?;
        repository_parameters(&r.parameters, &[])?;
        self.state
            .serving
            .load(&scope.project, &r.model_name)
            .await
            .map_err(status)?;
        Ok(tonic::Response::new(RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        req: tonic::Request<RepositoryModelUnloadRequest>,
    ) -> Result<tonic::Response<RepositoryModelUnloadResponse>, Status> {
        let (scope, _) = scope(&req)?;
        let r = req.into_inner();
        repository(&scope, &r.repository_name)?;
        repository_parameters(&r.parameters, &["unload_dependents"])?;
        self.state
            .serving
            .unload(&scope.project, &r.model_name)
            .await
            .map_err(status)?;
        Ok(tonic::Response::new(RepositoryModelUnloadResponse {}))
    }
}

/// Every gRPC method's route: the call goes to the generated server, which decodes
/// the frame, calls [`Inference`] and writes the answer with its trailers.
async fn call(State(state): State<AppState>, req: Request) -> Response {
    let svc = GrpcInferenceServiceServer::new(Inference { state });
    match svc.oneshot(req).await {
        Ok(resp) => resp.map(axum::body::Body::new).into_response(),
        Err(never) => match never {},
    }
}

/// The service's path prefix.
const SERVICE: &str = "/inference.GRPCInferenceService";

pub(crate) fn routes() -> Fragment {
    let read = |action| {
        Policy::in_project(action, Viewer)
            .default_project()
            .inference()
    };
    let editor = |action| Policy::in_project(action, Editor).default_project();
    let methods: [(&str, Policy, Transfer); 10] = [
        (
            "ServerLive",
            Policy::public("serving.live"),
            Transfer::Bounded,
        ),
        (
            "ServerReady",
            Policy::public("serving.ready"),
            Transfer::Bounded,
        ),
        (
            "ServerMetadata",
            Policy::public("serving.server"),
            Transfer::Bounded,
        ),
        ("ModelReady", read("serving.model.read"), Transfer::Bounded),
        (
            "ModelMetadata",
            read("serving.model.read"),
            Transfer::Bounded,
        ),
        (
            "ModelInfer",
            read("serving.infer").query(),
            Transfer::Bounded,
        ),
        // A stream stays open for as long as the client sends: no request timeout.
        (
            "ModelStreamInfer",
            read("serving.infer").query(),
            Transfer::Streaming,
        ),
        (
            "RepositoryIndex",
            Policy::in_project("serving.repository.index", Viewer)
                .default_project()
                .query(),
            Transfer::Bounded,
        ),
        (
            "RepositoryModelLoad",
            editor("serving.repository.load"),
            Transfer::Bounded,
        ),
        (
            "RepositoryModelUnload",
            editor("serving.repository.unload"),
            Transfer::Bounded,
        ),
    ];
    methods
        .into_iter()
        .fold(Fragment::default(), |f, (m, policy, transfer)| {
            f.foreign(
                Method::POST,
                &format!("{SERVICE}/{m}"),
                policy,
                transfer,
                call,
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(datatype: &str, bytes: usize) -> ModelInferRequest {
        ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![proto::model_infer_request::InferInputTensor {
                name: "x".into(),
                datatype: datatype.into(),
                shape: vec![bytes as i64],
                ..Default::default()
            }],
            raw_input_contents: vec![vec![1u8; bytes]],
            ..Default::default()
        }
    }

    #[test]
    fn a_request_over_the_element_limit_is_refused_before_it_is_decoded() {
        let e = request(raw("UINT8", 1000), 999).expect_err("over the limit");
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(
            e.message().contains("1000 tensor elements"),
            "{}",
            e.message()
        );
        assert_eq!(elements(&raw("FP32", 1000)), 250);
        let ok = request(raw("UINT8", 1000), 1000).expect("within the limit");
        assert_eq!(ok.inputs[0].element_count(), 1000);
        assert!(
            ok.inputs[0].data.is_null(),
            "kept as bytes, not JSON values"
        );
    }

    #[test]
    fn typed_contents_read_as_raw_ones_do() {
        let typed = |datatype: &str, c: InferTensorContents| ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![proto::model_infer_request::InferInputTensor {
                name: "x".into(),
                datatype: datatype.into(),
                shape: vec![2],
                contents: Some(c),
                ..Default::default()
            }],
            ..Default::default()
        };
        let values = |r: &InferRequest| -> Vec<Value> {
            r.inputs[0].elements().map(|e| e.to_json()).collect()
        };
        let r = request(
            typed(
                "INT8",
                InferTensorContents {
                    int_contents: vec![-3, 7],
                    ..Default::default()
                },
            ),
            100,
        )
        .expect("int8");
        assert_eq!(values(&r), vec![Value::from(-3), Value::from(7)]);
        let r = request(
            typed(
                "BYTES",
                InferTensorContents {
                    bytes_contents: vec![b"a".to_vec(), b"".to_vec()],
                    ..Default::default()
                },
            ),
            100,
        )
        .expect("bytes");
        assert_eq!(values(&r), vec![Value::from("a"), Value::from("")]);
        let e = request(
            typed(
                "UINT8",
                InferTensorContents {
                    uint_contents: vec![1, 300],
                    ..Default::default()
                },
            ),
            100,
        )
        .expect_err("300 is no UINT8");
        assert!(
            e.message().contains("out of range for UINT8"),
            "{}",
            e.message()
        );
        let e = request(raw("FP32", 7), 100).expect_err("7 bytes");
        assert_eq!(e.code(), Code::InvalidArgument);
    }
}
