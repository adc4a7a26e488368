//! The `onnxruntime` runtime: Microsoft's ONNX Runtime through the `ort` crate, loaded
//! at run time from a `libonnxruntime.so` (1.20 or newer) — the one the PyPI
//! `onnxruntime` wheel ships does. Nothing is linked or downloaded at build time: with
//! no library the runtime is unavailable, with a message that says how to configure
//! one, and the process goes on.
//!
//! Where the library is looked for, first found wins: the path given to [`configure`],
//! `QANAT_RUNTIME_ONNXRUNTIME_LIB` (a path), ort's own `ORT_DYLIB_PATH`, `LD_LIBRARY_PATH` and the system library
//! folders, then the `onnxruntime` package of the active Python virtual environment
//! (`VIRTUAL_ENV`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::session::Session;
use ort::value::{DynValue, Tensor};
use qanat_model::Table;

use super::{inputs, Column, Feed, Input, OnnxGraph};
use crate::{Error, Result, Runtime};

/// The variable that names the library.
pub const LIB_VAR: &str = "QANAT_RUNTIME_ONNXRUNTIME_LIB";

static CONFIGURED: OnceLock<PathBuf> = OnceLock::new();

/// Names the library to use, before the first model is loaded (a process loads one
/// library once; later calls change nothing).
pub fn configure(path: &Path) {
    let _ = CONFIGURED.set(path.to_path_buf());
}

fn candidates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = CONFIGURED.get().cloned().into_iter().collect();
    for var in [LIB_VAR, "ORT_DYLIB_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            out.push(PathBuf::from(v));
        }
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    dirs.extend(
        [
            "/usr/local/lib",
            "/usr/lib",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
        ]
        .map(PathBuf::from),
    );
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        let lib = Path::new(&venv).join("lib");
        for py in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
            dirs.push(py.path().join("site-packages/onnxruntime/capi"));
        }
    }
    for d in dirs {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n == "libonnxruntime.so" || n.starts_with("libonnxruntime.so.")
                })
            })
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// The library this process uses: found and loaded once; the reason when there is none
/// or it cannot be used.
pub fn library() -> Result<&'static Path> {
    static LOADED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| load(&candidates()))
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(|e| Error::Unavailable(e.clone()))
}

/// Loads the first of `candidates` that is a file.
fn load(candidates: &[PathBuf]) -> std::result::Result<PathBuf, String> {
    let Some(path) = candidates.iter().find(|p| p.is_file()) else {
        return Err(format!(
            "the onnxruntime runtime is unavailable: no libonnxruntime.so was found; set \
             {LIB_VAR} to one (`pip install onnxruntime` ships it under \
             site-packages/onnxruntime/capi/), or use the tract runtime"
        ));
    };
    let shown = path.display().to_string();
    // ort panics when the library cannot be loaded or is older than the API it speaks;
    // that must not take the process down.
    let loaded = std::panic::catch_unwind(|| ort::init_from(&shown).with_name("qanat").commit());
    match loaded {
        Ok(Ok(_)) => Ok(path.clone()),
        Ok(Err(e)) => Err(format!("onnxruntime at {shown} failed to start: {e}")),
        Err(panic) => Err(format!(
            "onnxruntime at {shown} cannot be used (ONNX Runtime 1.20 or newer is needed): {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("the library failed to load")
        )),
    }
}

/// An ONNX model in an onnxruntime session.
pub struct OrtModel {
    graph: OnnxGraph,
    feed: Feed,
    session: Session,
    width: usize,
}

impl std::fmt::Debug for OrtModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtModel")
            .field("inputs", &self.graph.inputs)
            .field("result", self.graph.result())
            .finish()
    }
}

impl OrtModel {
    /// Loads the model in `bytes` for table inputs (see [`super`]) into a session that
    /// uses `threads` threads for one call (0: onnxruntime's default).
    pub fn load(bytes: &[u8], threads: usize) -> Result<OrtModel> {
        OrtModel::load_fed(bytes, None, threads)
    }

    /// [`load`](Self::load) for a model whose one matrix input is filled with the
    /// named `features` (see [`OnnxGraph::feed`]).
    pub fn load_fed(bytes: &[u8], features: Option<&[String]>, threads: usize) -> Result<OrtModel> {
        library()?;
        let graph = OnnxGraph::read(bytes)?;
        let feed = graph.feed(features)?;
        let width = graph.result().width().unwrap_or(1);
        let mut builder = Session::builder().map_err(|e| Error::internal(e.to_string()))?;
        if threads > 0 {
            builder = builder
                .with_intra_threads(threads)
                .and_then(|b| b.with_inter_threads(1))
                .map_err(|e| Error::internal(e.to_string()))?;
        }
        let session = builder
            .commit_from_memory(bytes)
            .map_err(|e| Error::invalid(format!("onnxruntime cannot load this ONNX model: {e}")))?;
        Ok(OrtModel {
            graph,
            feed,
            session,
            width,
        })
    }

    pub fn graph(&self) -> &OnnxGraph {
        &self.graph
    }
}

/// Where an onnxruntime session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// A CUDA device, by index.
    Cuda(i32),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// Whether this machine has an NVIDIA GPU its driver exposes (looked at without
/// loading anything).
pub fn gpu_present() -> bool {
    std::fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
        || Path::new("/dev/nvidia0").exists()
}

/// Whether the library this process loaded offers CUDA (the `onnxruntime-gpu` build,
/// with its `libonnxruntime_providers_cuda.so` beside it); why not otherwise.
pub fn cuda_available() -> Result<()> {
    use ort::execution_providers::{CUDAExecutionProvider, ExecutionProvider};
    let lib = library()?;
    match CUDAExecutionProvider::default().is_available() {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::Unavailable(format!(
            "onnxruntime at {} has no CUDA execution provider (the `onnxruntime-gpu` \
             package's library has one)",
            lib.display()
        ))),
        Err(e) => Err(Error::Unavailable(format!(
            "onnxruntime at {} cannot list its execution providers: {e}",
            lib.display()
        ))),
    }
}

/// An ONNX model as a tensor server sees it ([`super::TensorLayout`]), in an
/// onnxruntime session on a [`Device`].
pub struct OrtTensorModel {
    graph: OnnxGraph,
    layout: super::TensorLayout,
    session: Session,
    device: Device,
}

impl std::fmt::Debug for OrtTensorModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtTensorModel")
            .field("inputs", &self.graph.inputs)
            .field("device", &self.device)
            .finish()
    }
}

impl OrtTensorModel {
    /// Loads the model in `bytes` into a session on `device`: on a CUDA device, the
    /// CUDA execution provider must register (no silent fall back to the CPU), and
    /// nodes it lacks run on onnxruntime's CPU provider.
    pub fn load(bytes: &[u8], device: Device) -> Result<OrtTensorModel> {
        use ort::execution_providers::CUDAExecutionProvider;
        library()?;
        let graph = OnnxGraph::read(bytes)?;
        let layout = super::TensorLayout::of(&graph)?;
        let mut builder = Session::builder().map_err(|e| Error::internal(e.to_string()))?;
        if let Device::Cuda(id) = device {
            cuda_available()?;
            builder = builder
                .with_execution_providers([CUDAExecutionProvider::default()
                    .with_device_id(id)
                    .build()
                    .error_on_failure()])
                .map_err(|e| {
                    Error::Unavailable(format!(
                        "onnxruntime's CUDA execution provider did not start on {device}: {e}"
                    ))
                })?;
        }
        let session = builder
            .commit_from_memory(bytes)
            .map_err(|e| match device {
                // On a GPU the session's creation picks the device and takes its memory:
                // a wrong ordinal, a driver mismatch or a full GPU is the server's fault,
                // not the model's (tract, in the load check, read the graph already).
                Device::Cuda(_) => Error::Unavailable(format!(
                    "onnxruntime could not load the model on {device}: {e}"
                )),
                Device::Cpu => {
                    Error::invalid(format!("onnxruntime cannot load this ONNX model: {e}"))
                }
            })?;
        Ok(OrtTensorModel {
            graph,
            layout,
            session,
            device,
        })
    }

    pub fn graph(&self) -> &OnnxGraph {
        &self.graph
    }

    pub fn layout(&self) -> &super::TensorLayout {
        &self.layout
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// The result for `rows` rows of `x` (`rows × row_width`, row-major).
    pub fn run(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let inputs = self.layout.split(x, rows)?;
        run_session(&self.session, &self.graph, inputs).map_err(|e| match self.device {
            // The inputs were checked against the graph: what fails on a GPU (its
            // memory, its driver) is the server's, not the caller's.
            Device::Cuda(_) => Error::Unavailable(format!("running on {}: {e}", self.device)),
            Device::Cpu => e,
        })
    }
}

/// Runs `session` on the graph's inputs, filled: its result, as `f32`.
fn run_session(session: &Session, graph: &OnnxGraph, inputs: Vec<Input>) -> Result<Vec<f32>> {
    let mut fed: Vec<(String, DynValue)> = Vec::with_capacity(graph.inputs.len());
    for (port, input) in graph.inputs.iter().zip(inputs) {
        fed.push((port.name.clone(), value(input)?));
    }
    let out = session
        .run(fed)
        .map_err(|e| Error::invalid(format!("onnxruntime failed to run the model: {e}")))?;
    let name = &graph.result().name;
    let (_, v) = out[name.as_str()]
        .try_extract_raw_tensor::<f32>()
        .map_err(|e| Error::internal(format!("reading output '{name}': {e}")))?;
    Ok(v.to_vec())
}

fn value(input: Input) -> Result<DynValue> {
    let Input { values, shape } = input;
    let dims: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
    let v = match values {
        Column::F32(v) => Tensor::from_array((dims, v)).map(Tensor::into_dyn),
        Column::F64(v) => Tensor::from_array((dims, v)).map(Tensor::into_dyn),
        Column::I64(v) => Tensor::from_array((dims, v)).map(Tensor::into_dyn),
        Column::Str(v) => Tensor::from_string_array((dims, v)).map(Tensor::into_dyn),
    };
    v.map_err(|e| Error::internal(format!("building an input {shape:?}: {e}")))
}

impl Runtime for OrtModel {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn outputs(&self) -> usize {
        self.width
    }

    fn predict(&self, table: &Table) -> Result<Vec<f32>> {
        run_session(
            &self.session,
            &self.graph,
            inputs(&self.graph, &self.feed, table)?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_library_is_a_clear_refusal_not_a_crash() {
        let e = load(&[PathBuf::from("/nonexistent/libonnxruntime.so")]).expect_err("none");
        assert!(
            e.contains("no libonnxruntime.so was found") && e.contains(LIB_VAR),
            "{e}"
        );
    }
}
