//! The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`), as
//! Triton's and KServe's gRPC clients call it: the six core methods, on the same port
//! as REST (HTTP/2, h2c or TLS).
//!
//! Each method is a route of the route table (`POST /inference.GRPCInferenceService/…`)
//! with its policy, so gRPC calls pass the one authorization point, its audit of
//! refusals, the request id, metrics and limits like every REST call; a refusal
//! reaches a gRPC client as its HTTP status (401 → UNAUTHENTICATED, 403 →
//! PERMISSION_DENIED). The messages are compiled from `proto/inference.proto` at build
//! time by protox (pure Rust: no `protoc` to install). Requests become the same
//! [`InferRequest`] REST builds, so a gRPC answer equals the REST one.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use qanat_core::{DomainError, ErrorKind};
use qanat_governance::Role::Viewer;
use qanat_serving::oip::{self, InferRequest, InferResponse, RequestInput, RequestOutput};
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
    ModelReadyRequest, ModelReadyResponse, ServerLiveRequest, ServerLiveResponse,
    ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse,
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
        ErrorKind::NotFound => Code::NotFound,
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

/// Typed contents as JSON values of `datatype`.
fn contents(name: &str, datatype: &str, c: Option<InferTensorContents>) -> Result<Value, Status> {
    let c = c.unwrap_or_default();
    let v: Vec<Value> = match datatype {
        "BOOL" => c.bool_contents.into_iter().map(Value::from).collect(),
        "INT8" | "INT16" | "INT32" => c.int_contents.into_iter().map(Value::from).collect(),
        "INT64" => c.int64_contents.into_iter().map(Value::from).collect(),
        "UINT8" | "UINT16" | "UINT32" => c.uint_contents.into_iter().map(Value::from).collect(),
        "UINT64" => c.uint64_contents.into_iter().map(Value::from).collect(),
        "FP32" => c
            .fp32_contents
            .into_iter()
            .map(|x| Value::from(f64::from(x)))
            .collect(),
        "FP64" => c.fp64_contents.into_iter().map(Value::from).collect(),
        "BYTES" => c
            .bytes_contents
            .into_iter()
            .map(|b| Value::from(String::from_utf8_lossy(&b).into_owned()))
            .collect(),
        other => {
            return Err(Status::invalid_argument(format!(
                "input '{name}' has datatype {other}: send FP16 and BF16 as raw_input_contents"
            )))
        }
    };
    Ok(Value::Array(v))
}

/// A gRPC request as the [`InferRequest`] REST builds.
fn request(r: ModelInferRequest) -> Result<InferRequest, Status> {
    let raw = r.raw_input_contents;
    if !raw.is_empty() && raw.len() != r.inputs.len() {
        return Err(Status::invalid_argument(format!(
            "{} raw_input_contents for {} inputs: give one per input, or none",
            raw.len(),
            r.inputs.len()
        )));
    }
    let mut inputs = Vec::with_capacity(r.inputs.len());
    for (i, t) in r.inputs.into_iter().enumerate() {
        let data = match raw.get(i) {
            Some(bytes) => oip::raw_values(&t.name, &t.datatype, bytes).map_err(status)?,
            None => contents(&t.name, &t.datatype, t.contents)?,
        };
        inputs.push(RequestInput {
            parameters: parameters(&t.parameters),
            name: t.name,
            shape: t.shape,
            datatype: t.datatype,
            data,
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
        let request_id = req
            .metadata()
            .get(crate::REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let routing_key = req
            .metadata()
            .get("x-routing-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let r = req.into_inner();
        let (name, v) = (r.model_name.clone(), r.model_version.clone());
        let infer = request(r)?;
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
    let methods: [(&str, Policy); 6] = [
        ("ServerLive", Policy::public("serving.live")),
        ("ServerReady", Policy::public("serving.ready")),
        ("ServerMetadata", Policy::public("serving.server")),
        ("ModelReady", read("serving.model.read")),
        ("ModelMetadata", read("serving.model.read")),
        ("ModelInfer", read("serving.infer").query()),
    ];
    methods
        .into_iter()
        .fold(Fragment::default(), |f, (m, policy)| {
            f.foreign(
                Method::POST,
                &format!("{SERVICE}/{m}"),
                policy,
                Transfer::Bounded,
                call,
            )
        })
}
