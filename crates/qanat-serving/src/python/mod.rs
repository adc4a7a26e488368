//! The Python runtime: any MLflow model with a `python_function` flavor (a custom
//! `pyfunc` class, scikit-learn, PyTorch, anything `mlflow.pyfunc.load_model` loads)
//! served by a pool of Python worker processes, fed by the version's dynamic batcher.
//!
//! - **Environment.** Each model runs in a virtual environment built from its own
//!   `requirements.txt` ([`env`]), once per distinct set, from the configured package
//!   index, wheels only.
//! - **Isolation.** A model's code is untrusted: workers start through the server's
//!   [`Spawner`] — the job sandbox (no network, the server's data, keys and home
//!   hidden, a uid of their own or a user namespace, Landlock). Where no sandbox can be
//!   built the runtime refuses, unless an admin opted out of the sandbox for jobs.
//! - **Channel.** A batch goes to a worker as an Arrow IPC stream on its stdin (one
//!   `FixedSizeList<Float64>` column, the rows, and one of strings for the text
//!   columns; its metadata says how the model takes them: a DataFrame of the
//!   signature's named columns and types, or one array of the signature's dtype and
//!   shape), and comes back as Arrow columns, float64 or strings (text answers).
//! - **Failure.** A worker that ends, goes over its memory limit or does not answer
//!   within `serving.python.predict_timeout_secs` is killed (with its sandbox) and its
//!   batch answered with an error that says so; the next batch starts a new one.
//!
//! Numbers travel as the batcher's `f64` rows (as for every runtime; a value reaches
//! the model as the request gave it, an `INT64` beyond 2⁵³ rounded). String columns
//! of a DataFrame signature travel beside them; a request to a model with text in or
//! out goes to a worker as it is, not stacked by the batcher, admitted (or refused
//! 429) before it waits, and waiting no longer than its timeout for a worker.

pub mod env;
mod worker;

use env::READY;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use arrow_array::{Array, Float64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use qanat_model::package::MlModelFile;
use serde_json::Value;

use crate::oip::{ResponseOutput, TensorMetadata};
use crate::{Error, Result};

/// The worker's own program, written beside the environments.
const WORKER: &str = include_str!("worker.py");

/// Starts worker processes isolated: the server's sandbox for untrusted code.
pub trait Spawner: Send + Sync + std::fmt::Debug {
    /// How workers are isolated (`deploy status` says it), or why they cannot be
    /// (the runtime then refuses).
    fn isolation(&self) -> std::result::Result<String, String>;
    /// The command that starts `program args`, able to read `read_only` besides the
    /// system's files, with a private `/tmp` of `tmp_mb` MiB; and whether its first
    /// stdin line is a barrier its launcher consumes.
    fn command(
        &self,
        program: &Path,
        args: &[String],
        read_only: &[PathBuf],
        tmp_mb: u64,
    ) -> (std::process::Command, bool);
    /// Places worker `pid` (started, before its barrier) under a memory limit of
    /// `memory_mb` MiB, held until the returned limit is dropped; or why it cannot be.
    fn confine(&self, pid: u32, memory_mb: u64) -> std::result::Result<Box<dyn Limit>, String>;
    /// How a worker's memory limit is enforced, in words (`deploy status` says it).
    fn memory_enforcement(&self) -> String;
}

pub use worker::Limit;

/// How the Python runtime runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The interpreter environments are made from.
    pub interpreter: PathBuf,
    /// Where environments are built and kept (by the hash of their requirements).
    pub envs_dir: PathBuf,
    /// Where model files are written for workers to read.
    pub models_dir: PathBuf,
    /// The package index pip installs from (its own default when `None`).
    pub index_url: Option<String>,
    /// Worker processes per served version.
    pub workers: usize,
    pub predict_timeout: Duration,
    pub load_timeout: Duration,
    pub build_timeout: Duration,
    /// A worker's private `/tmp` (MiB).
    pub tmp_mb: u64,
    /// A worker's memory limit (MiB), its `/tmp` included.
    pub memory_mb: u64,
    /// The most bytes of model files written for workers.
    pub max_model_bytes: u64,
    /// Serve here even the models a native reader serves.
    pub only: bool,
    pub spawner: Arc<dyn Spawner>,
}

/// The runtime: its settings and the environments it built.
#[derive(Debug)]
pub struct Runtime {
    pub settings: Settings,
    envs: env::Envs,
}

impl Runtime {
    pub fn new(settings: Settings) -> Self {
        Runtime {
            settings,
            envs: env::Envs::default(),
        }
    }

    /// Whether the files of the version `key` names are written already.
    pub fn has_model(&self, key: &str) -> bool {
        model_dir(&self.settings, key).join(READY).is_file()
    }
}

/// Where the files of the version `key` names are written.
fn model_dir(s: &Settings, key: &str) -> PathBuf {
    s.models_dir.join(hash_hex(key.as_bytes(), 16))
}

/// How the model takes its rows.
#[derive(Debug, Clone, PartialEq)]
pub enum Take {
    /// A DataFrame: the signature's columns, each `(name, numpy dtype, OIP datatype)`.
    Columns(Vec<(String, String, String)>),
    /// One array of `dtype` shaped `[-1, dims…]`.
    Tensor { dtype: String, shape: Vec<i64> },
}

/// What the model answers: each output's name, datatype, shape after the rows, and
/// how many values a row it takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub name: String,
    pub datatype: String,
    pub dims: Vec<i64>,
}

impl Output {
    fn width(&self) -> usize {
        self.dims.iter().map(|d| *d as usize).product()
    }
}

/// What serving a model in Python takes, read from its `MLmodel`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub loader: String,
    pub take: Take,
    pub outputs: Vec<Output>,
}

impl Plan {
    pub fn row_width(&self) -> usize {
        match &self.take {
            Take::Columns(c) => c.len(),
            Take::Tensor { shape, .. } => shape[1..].iter().map(|d| *d as usize).product(),
        }
    }

    pub fn out_width(&self) -> usize {
        self.outputs.iter().map(Output::width).sum()
    }

    /// How many of its columns are text.
    pub fn text_width(&self) -> usize {
        match &self.take {
            Take::Columns(c) => c.iter().filter(|c| c.2 == "BYTES").count(),
            Take::Tensor { .. } => 0,
        }
    }

    /// How many values of an answer's row are text.
    pub fn text_out_width(&self) -> usize {
        self.outputs
            .iter()
            .filter(|o| o.datatype == "BYTES")
            .map(Output::width)
            .sum()
    }
}

/// numpy's dtype and OIP's datatype of an MLflow column type or a tensor's dtype;
/// `None` for what is not a number.
fn numeric(t: &str) -> Option<(&'static str, &'static str)> {
    Some(match t {
        "double" | "float64" => ("float64", "FP64"),
        "float" | "float32" => ("float32", "FP32"),
        "float16" => ("float16", "FP16"),
        "long" | "int64" => ("int64", "INT64"),
        "integer" | "int32" => ("int32", "INT32"),
        "int16" => ("int16", "INT16"),
        "int8" => ("int8", "INT8"),
        "uint8" => ("uint8", "UINT8"),
        "uint16" => ("uint16", "UINT16"),
        "uint32" => ("uint32", "UINT32"),
        "uint64" => ("uint64", "UINT64"),
        "boolean" | "bool" => ("bool", "BOOL"),
        _ => return None,
    })
}

/// A spec's type: a column's `type`, or a tensor's dtype (and its shape).
fn spec_of(spec: &Value) -> (String, Option<Vec<i64>>) {
    let t = spec.get("type").and_then(Value::as_str).unwrap_or_default();
    if t == "tensor" {
        let ts = spec.get("tensor-spec");
        let dtype = ts
            .and_then(|s| s.get("dtype"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let shape = ts
            .and_then(|s| s.get("shape"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_i64).collect());
        (dtype.to_string(), shape)
    } else {
        (t.to_string(), None)
    }
}

const LOG_AGAIN: &str = "log it again with a signature (`signature=infer_signature(X, model.predict(X))`, or an `input_example`)";

/// What serving `mlmodel` in Python takes, or why it cannot be served there; `None`
/// when it has no `python_function` flavor.
pub fn plan(mlmodel: &MlModelFile) -> std::result::Result<Option<Plan>, String> {
    let Some(flavor) = mlmodel.flavors.get("python_function") else {
        return Ok(None);
    };
    let loader = flavor
        .get("loader_module")
        .and_then(Value::as_str)
        .unwrap_or("mlflow.pyfunc.model")
        .to_string();
    let Some(inputs) = mlmodel.inputs.as_ref().filter(|i| !i.is_empty()) else {
        return Err(format!(
            "its MLmodel has no input signature, so the rows a request carries cannot be checked; {LOG_AGAIN}"
        ));
    };
    let Some(outputs) = mlmodel.outputs.as_ref().filter(|o| !o.is_empty()) else {
        return Err(format!(
            "its MLmodel has no output signature, so the answer's outputs are not known; {LOG_AGAIN}"
        ));
    };
    let not_number = |side: &str, what: &str, t: &str| {
        format!(
            "its {side} {what} is of type '{t}': the Python runtime carries numbers and strings only (binary and arrays of objects are not served yet)"
        )
    };
    let dims_of = |shape: &[i64], side: &str| -> std::result::Result<Vec<i64>, String> {
        match shape.split_first() {
            Some((-1, rest)) if rest.iter().all(|d| *d > 0) => Ok(rest.to_vec()),
            _ => Err(format!(
                "its {side} tensor has shape {shape:?}: served tensors are [-1, fixed sizes…], one row a request row"
            )),
        }
    };
    let take = match inputs.as_slice() {
        [one] if one.get("type").and_then(Value::as_str) == Some("tensor") => {
            let (dtype, shape) = spec_of(one);
            let (np, _) = numeric(&dtype).ok_or_else(|| not_number("input", "tensor", &dtype))?;
            let dims = dims_of(&shape.unwrap_or_default(), "input")?;
            let mut shape = vec![-1];
            shape.extend(dims);
            Take::Tensor {
                dtype: np.into(),
                shape,
            }
        }
        specs => {
            let mut cols = Vec::new();
            for s in specs {
                let name = s.get("name").and_then(Value::as_str).ok_or_else(|| {
                    "its input signature has several unnamed inputs: name its columns (a DataFrame) or give it one tensor".to_string()
                })?;
                let (t, shape) = spec_of(s);
                if shape.is_some() {
                    return Err(
                        "its input signature has several named tensors, which the Python runtime does not serve yet".into(),
                    );
                }
                let (np, oip) = match t.as_str() {
                    // Strings travel beside the rows (see `encode`).
                    "string" => ("str", "BYTES"),
                    t => numeric(t)
                        .ok_or_else(|| not_number("input", &format!("column '{name}'"), t))?,
                };
                cols.push((name.to_string(), np.to_string(), oip.to_string()));
            }
            Take::Columns(cols)
        }
    };
    let mut outs = Vec::new();
    for (i, s) in outputs.iter().enumerate() {
        let (t, shape) = spec_of(s);
        let name = s
            .get("name")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| {
                if outputs.len() == 1 {
                    "predict".into()
                } else {
                    format!("output-{i}")
                }
            });
        let oip = match t.as_str() {
            // Text answers come back as strings (see `decode`).
            "string" | "str" | "object" => "BYTES",
            t => {
                numeric(t)
                    .ok_or_else(|| not_number("output", &format!("'{name}'"), t))?
                    .1
            }
        };
        let dims = match shape {
            Some(shape) => dims_of(&shape, "output")?,
            None => Vec::new(),
        };
        outs.push(Output {
            name,
            datatype: oip.into(),
            dims,
        });
    }
    let plan = Plan {
        loader,
        take,
        outputs: outs,
    };
    if plan.row_width() == 0 || plan.out_width() == 0 {
        return Err("its signature gives rows of no values".into());
    }
    Ok(Some(plan))
}

/// The model's inputs as OIP metadata: a `[-1, 1]` tensor a column, or the one tensor.
pub fn inputs(plan: &Plan) -> Vec<TensorMetadata> {
    match &plan.take {
        Take::Columns(cols) => cols
            .iter()
            .map(|(name, _, oip)| TensorMetadata {
                name: name.clone(),
                datatype: oip.clone(),
                shape: vec![-1, 1],
            })
            .collect(),
        Take::Tensor { dtype, shape } => vec![TensorMetadata {
            name: "input-0".into(),
            datatype: numeric(dtype).map_or("FP32", |n| n.1).into(),
            shape: shape.clone(),
        }],
    }
}

pub fn outputs(plan: &Plan) -> Vec<TensorMetadata> {
    plan.outputs
        .iter()
        .map(|o| TensorMetadata {
            name: o.name.clone(),
            datatype: o.datatype.clone(),
            shape: std::iter::once(-1).chain(o.dims.iter().copied()).collect(),
        })
        .collect()
}

/// The response tensors of `n` rows whose model gave `raw` (rows of the outputs'
/// values, in order; a text output's places hold NaN) and `text` (rows of the text
/// outputs' values).
pub fn respond(plan: &Plan, n: usize, raw: &[f32], text: &[String]) -> Vec<ResponseOutput> {
    let k = plan.out_width().max(1);
    let tk = plan.text_out_width().max(1);
    let (mut at, mut text_at) = (0, 0);
    plan.outputs
        .iter()
        .map(|o| {
            let w = o.width();
            let data: Vec<Value> = if o.datatype == "BYTES" {
                let d = text
                    .chunks(tk)
                    .flat_map(|row| row[text_at..text_at + w].iter())
                    .map(|s| Value::from(s.as_str()))
                    .collect();
                text_at += w;
                d
            } else {
                raw.chunks(k)
                    .flat_map(|row| row[at..at + w].iter())
                    .map(|v| crate::flavors::typed(*v, &o.datatype))
                    .collect()
            };
            at += w;
            ResponseOutput {
                name: o.name.clone(),
                shape: std::iter::once(n)
                    .chain(o.dims.iter().map(|d| *d as usize))
                    .collect(),
                datatype: o.datatype.clone(),
                parameters: None,
                data: Value::Array(data),
            }
        })
        .collect()
}

/// A model served in Python: its plan and its workers.
pub struct PythonModel {
    pub plan: Plan,
    /// `deploy status`'s line: the loader, the workers, their isolation.
    pub describe: String,
    pool: Pool,
    what: String,
}

impl std::fmt::Debug for PythonModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonModel")
            .field("plan", &self.plan)
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

struct Pool {
    state: Mutex<PoolState>,
    freed: Condvar,
    size: usize,
    start: Box<dyn Fn() -> std::result::Result<worker::Worker, String> + Send + Sync>,
    predict: Duration,
    /// Requests waiting for a worker or running.
    waiting: std::sync::atomic::AtomicUsize,
}

/// Requests that may wait for a version's workers, per worker (besides the one each
/// runs).
const MAX_WAITING_PER_WORKER: usize = 8;

/// One request counted among those waiting or running, for as long as it lives.
struct Waiting<'a>(usize, &'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        Waiting(
            count.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1,
            count,
        )
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.1.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[derive(Default)]
struct PoolState {
    idle: Vec<worker::Worker>,
    /// Workers alive (idle or busy).
    live: usize,
}

impl Pool {
    /// An idle worker, a new one (while fewer than `size` live), or, waiting up to
    /// `wait` for one to be given back, `Ok(None)`.
    fn take(&self, wait: Duration) -> std::result::Result<Option<worker::Worker>, String> {
        let deadline = std::time::Instant::now() + wait;
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(w) = st.idle.pop() {
                return Ok(Some(w));
            }
            if st.live < self.size {
                st.live += 1;
                drop(st);
                return (self.start)().map(Some).inspect_err(|_| {
                    self.lost();
                });
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            st = self
                .freed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn give_back(&self, w: worker::Worker) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .idle
            .push(w);
        self.freed.notify_one();
    }

    fn lost(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.live = st.live.saturating_sub(1);
        drop(st);
        self.freed.notify_one();
    }
}

impl PythonModel {
    fn busy(&self, waiting: usize) -> Error {
        Error::Busy(format!(
            "{} has {waiting} requests running or waiting for its Python workers; try again shortly",
            self.what
        ))
    }

    /// Refuses at once (429) when as many requests as the workers take are running
    /// or waiting: checked before a request takes a thread to wait on.
    pub fn admit(&self) -> Result<()> {
        let n = self.pool.waiting.load(std::sync::atomic::Ordering::Acquire);
        if n >= self.pool.size * (1 + MAX_WAITING_PER_WORKER) {
            return Err(self.busy(n));
        }
        Ok(())
    }

    /// Runs `rows` rows of `x` (and of `text`, its text columns', row-major) on a
    /// worker (blocking).
    /// Its answer: `rows` rows of the outputs' values (a text output's places NaN),
    /// and the text outputs' values, row-major.
    ///
    /// A request waits up to `wait` (default: the predict timeout) for a free worker.
    pub fn predict(
        &self,
        x: &[f64],
        text: &[Option<String>],
        rows: usize,
        wait: Option<Duration>,
    ) -> Result<(Vec<f32>, Vec<String>)> {
        // What the batcher's bounded queue does for rows of numbers, for requests
        // with text (which come here one by one): too many waiting is refused at once.
        let waiting = Waiting::enter(&self.pool.waiting);
        if waiting.0 > self.pool.size * (1 + MAX_WAITING_PER_WORKER) {
            return Err(self.busy(waiting.0 - 1));
        }
        let request = encode(&self.plan, x, text, rows)
            .map_err(|e| Error::Internal(format!("encoding a batch: {e}")))?;
        let wait = wait.unwrap_or(self.pool.predict);
        let mut w = match self.pool.take(wait) {
            Ok(Some(w)) => w,
            Ok(None) => {
                return Err(Error::TimedOut(format!(
                    "no Python worker of {} was free within {} ms; the request did not run",
                    self.what,
                    wait.as_millis()
                )))
            }
            Err(e) => {
                // The detail (paths, the sandbox's words) is the operator's.
                tracing::warn!(model = %self.what, error = %e, "a Python serving worker could not start");
                return Err(Error::Unavailable(format!(
                    "{} could not start a Python worker; the server's log says why",
                    self.what
                )));
            }
        };
        match w.call(&request, self.pool.predict) {
            Ok(worker::Frame::Ok(bytes)) => {
                self.pool.give_back(w);
                decode(&bytes, rows, &self.plan.outputs)
                    .map_err(|e| Error::Internal(format!("{}: {e}", self.what)))
            }
            Ok(worker::Frame::Failed(why)) => {
                self.pool.give_back(w);
                Err(Error::Invalid(format!("{} raised: {why}", self.what)))
            }
            Err(lost) => {
                let tail = w.tail();
                w.kill();
                drop(w);
                self.pool.lost();
                let why = match lost {
                    worker::Lost::TimedOut(t) => format!(
                        "did not answer within {} s (serving.python.predict_timeout_secs) and was killed",
                        t.as_secs()
                    ),
                    worker::Lost::Ended(status) => format!("ended while predicting ({status})"),
                    worker::Lost::Memory(why) => {
                        format!("{why} (serving.python.memory)")
                    }
                };
                let said = &tail[tail.floor_char_boundary(tail.len().saturating_sub(2000))..];
                tracing::warn!(model = %self.what, %why, stderr = %said, "a Python serving worker was lost");
                Err(Error::Unavailable(format!(
                    "the Python worker serving {} {why}; this batch is not answered, a new worker takes the next",
                    self.what
                )))
            }
        }
    }
}

/// The rows as an Arrow IPC stream: one `FixedSizeList<Float64>` column (the values
/// as requests gave them), and how the model takes them in the schema's metadata.
fn encode(
    plan: &Plan,
    x: &[f64],
    text: &[Option<String>],
    rows: usize,
) -> std::result::Result<Vec<u8>, String> {
    let w = plan.row_width();
    let tw = plan.text_width();
    if text.len() != rows * tw {
        return Err(format!(
            "{} strings are not {rows} rows of {tw} text columns",
            text.len()
        ));
    }
    let item = Arc::new(Field::new("item", DataType::Float64, false));
    let values = Float64Array::from(x.to_vec());
    let list = arrow_array::FixedSizeListArray::try_new(item, w as i32, Arc::new(values), None)
        .map_err(|e| e.to_string())?;
    if list.len() != rows {
        return Err(format!("{} values are not {rows} rows of {w}", x.len()));
    }
    let mut meta = std::collections::HashMap::new();
    let text_out: Vec<bool> = plan
        .outputs
        .iter()
        .flat_map(|o| std::iter::repeat_n(o.datatype == "BYTES", o.width()))
        .collect();
    meta.insert(
        "qanat.text_out".to_string(),
        serde_json::to_string(&text_out).unwrap_or_default(),
    );
    match &plan.take {
        Take::Columns(cols) => {
            meta.insert("qanat.mode".to_string(), "columns".to_string());
            let names: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
            let types: Vec<&str> = cols.iter().map(|c| c.1.as_str()).collect();
            meta.insert(
                "qanat.names".into(),
                serde_json::to_string(&names).unwrap_or_default(),
            );
            meta.insert(
                "qanat.types".into(),
                serde_json::to_string(&types).unwrap_or_default(),
            );
        }
        Take::Tensor { dtype, shape } => {
            meta.insert("qanat.mode".to_string(), "tensor".to_string());
            meta.insert("qanat.dtype".into(), dtype.clone());
            meta.insert(
                "qanat.shape".into(),
                serde_json::to_string(shape).unwrap_or_default(),
            );
        }
    }
    let mut fields = vec![Field::new("x", list.data_type().clone(), false)];
    let mut columns: Vec<arrow_array::ArrayRef> = vec![Arc::new(list)];
    if tw > 0 {
        // The text columns' strings, a second column: `tw` a row, in column order.
        // Nullable: a missing string reaches the model as None.
        let item = Arc::new(Field::new("item", DataType::Utf8, true));
        let values: arrow_array::StringArray = text.iter().map(Option::as_deref).collect();
        let list =
            arrow_array::FixedSizeListArray::try_new(item, tw as i32, Arc::new(values), None)
                .map_err(|e| e.to_string())?;
        fields.push(Field::new("text", list.data_type().clone(), false));
        columns.push(Arc::new(list));
    }
    let schema = Arc::new(Schema::new(fields).with_metadata(meta));
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    {
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema)
            .map_err(|e| e.to_string())?;
        writer.write(&batch).map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// A worker's answer (a column a value of a row: float64, or strings for a text
/// output) as `rows` rows of the outputs' values (NaN in a text output's places) and
/// the text outputs' values, row-major.
fn decode(
    bytes: &[u8],
    rows: usize,
    outputs: &[Output],
) -> std::result::Result<(Vec<f32>, Vec<String>), String> {
    enum Col {
        Num(Vec<f64>),
        Text(Vec<String>),
    }
    let k: usize = outputs.iter().map(Output::width).sum();
    // Whether each of the answer's columns is text, from the outputs' widths.
    let is_text: Vec<bool> = outputs
        .iter()
        .flat_map(|o| std::iter::repeat_n(o.datatype == "BYTES", o.width()))
        .collect();
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| format!("its answer is not an Arrow stream: {e}"))?;
    let mut columns: Vec<Col> = Vec::new();
    let mut got = 0;
    for batch in reader {
        let batch = batch.map_err(|e| format!("its answer is not an Arrow stream: {e}"))?;
        if columns.is_empty() {
            if batch.num_columns() != k {
                return Err(format!(
                    "the model gave rows of {} values; its signature says {k} values a row",
                    batch.num_columns()
                ));
            }
            columns = is_text
                .iter()
                .map(|t| {
                    if *t {
                        Col::Text(Vec::with_capacity(rows))
                    } else {
                        Col::Num(Vec::with_capacity(rows))
                    }
                })
                .collect();
        }
        if batch.num_columns() != columns.len() {
            return Err("its answer's batches disagree".into());
        }
        for (col, into) in batch.columns().iter().zip(columns.iter_mut()) {
            match into {
                Col::Num(v) => v.extend(
                    col.as_any()
                        .downcast_ref::<Float64Array>()
                        .ok_or("a numeric output's column is not float64")?
                        .values()
                        .iter(),
                ),
                Col::Text(v) => v.extend(
                    col.as_any()
                        .downcast_ref::<arrow_array::StringArray>()
                        .ok_or("a text output's column is not strings")?
                        .iter()
                        .map(|s| s.unwrap_or_default().to_string()),
                ),
            }
        }
        got += batch.num_rows();
    }
    if got != rows {
        return Err(format!(
            "the model gave {got} rows for {rows} rows; its signature says {k} values a row"
        ));
    }
    let text_k = is_text.iter().filter(|t| **t).count();
    let mut raw = Vec::with_capacity(rows * k);
    let mut text = Vec::with_capacity(rows * text_k);
    for r in 0..rows {
        for c in &mut columns {
            match c {
                Col::Num(v) => raw.push(v[r] as f32),
                Col::Text(v) => {
                    raw.push(f32::NAN);
                    text.push(std::mem::take(&mut v[r]));
                }
            }
        }
    }
    Ok((raw, text))
}

/// A file of a model, relative to its root.
pub type ModelFile = (String, bytes::Bytes);

impl Runtime {
    /// Writes the model's files where workers read them, builds (or finds) its
    /// environment, and starts its first worker: the model loaded, or why not.
    pub async fn load(
        &self,
        what: String,
        key: &str,
        plan: Plan,
        files: Vec<ModelFile>,
    ) -> std::result::Result<PythonModel, String> {
        let s = &self.settings;
        let isolation = s.spawner.isolation()?;
        let model_dir = write_model(s, key, &files).await?;
        let reqs = match tokio::fs::read(model_dir.join("requirements.txt")).await {
            Ok(b) => env::requirements(&String::from_utf8_lossy(&b))?,
            Err(_) => match tokio::fs::read(model_dir.join("conda.yaml")).await {
                Ok(b) => env::requirements_of(
                    &env::conda_pip_requirements(&String::from_utf8_lossy(&b))?,
                    "its conda.yaml's pip section",
                )?,
                Err(_) => env::requirements("")?,
            },
        };
        let env = self.envs.get(s, &reqs).await?;
        let script = s.envs_dir.join(format!(
            "qanat_worker_{}.py",
            hash_hex(WORKER.as_bytes(), 6)
        ));
        if !script.is_file() {
            write_readable(&script, WORKER.as_bytes())
                .await
                .map_err(|e| format!("writing the worker program: {e}"))?;
        }
        let mut read_only = env.read_only.clone();
        read_only.push(model_dir.clone());
        read_only.push(script.clone());
        let spawner = s.spawner.clone();
        let (tmp_mb, load, memory_mb) = (s.tmp_mb, s.load_timeout, s.memory_mb);
        let python = env.python.clone();
        let args = vec![
            "-I".to_string(),
            "-B".to_string(),
            script.to_string_lossy().into_owned(),
            model_dir.to_string_lossy().into_owned(),
        ];
        let start = move || {
            let (mut cmd, barrier) = spawner.command(&python, &args, &read_only, tmp_mb);
            cmd.env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("HOME", "/tmp")
                .env("TMPDIR", "/tmp")
                .env("OMP_NUM_THREADS", "1")
                .env("OPENBLAS_NUM_THREADS", "1")
                .env("MKL_NUM_THREADS", "1")
                .env("MLFLOW_TRACKING_URI", "file:///tmp/mlruns");
            let confine = |pid: u32| spawner.confine(pid, memory_mb).map(Some);
            worker::Worker::start(cmd, barrier, load, &confine).map(|(w, _)| w)
        };
        // The first worker proves the model loads; it waits in the pool.
        let first = {
            let start = start.clone();
            tokio::task::spawn_blocking(start)
                .await
                .map_err(|e| format!("starting a Python worker stopped: {e}"))??
        };
        let pool = Pool {
            state: Mutex::new(PoolState {
                idle: vec![first],
                live: 1,
            }),
            freed: Condvar::new(),
            size: s.workers.max(1),
            start: Box::new(start),
            predict: s.predict_timeout,
            waiting: std::sync::atomic::AtomicUsize::new(0),
        };
        let loader = plan.loader.clone();
        Ok(PythonModel {
            describe: format!(
                "python ({loader}, up to {} workers of {} MiB ({}), env {}, {isolation})",
                s.workers.max(1),
                s.memory_mb,
                s.spawner.memory_enforcement(),
                env.hash
            ),
            plan,
            pool,
            what,
        })
    }
}

/// The first `n` bytes of `bytes`' SHA-256, in hex.
fn hash_hex(bytes: &[u8], n: usize) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)[..n]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A name for a temporary file or directory no other writer of this process uses.
fn unique(path: &Path, what: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{what}-{}-{n}", std::process::id()))
}

/// Writes `bytes` to `path` readable by a worker's uid (the server's umask is 077).
async fn write_readable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await?;
        let _ = tokio::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).await;
    }
    let tmp = unique(path, "tmp");
    tokio::fs::write(&tmp, bytes).await?;
    tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).await?;
    tokio::fs::rename(&tmp, path).await
}

/// The model's files under `models_dir`, written once per version (versions are
/// immutable): made beside, then renamed into place.
async fn write_model(
    s: &Settings,
    key: &str,
    files: &[ModelFile],
) -> std::result::Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = model_dir(s, key);
    if dir.join(READY).is_file() {
        return Ok(dir);
    }
    let tmp = unique(&dir, "writing");
    let outcome = async {
        for (rel, bytes) in files {
            if rel.is_empty()
                || rel.starts_with('/')
                || rel
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
            {
                return Err(format!("its file '{rel}' is not a path inside the model"));
            }
            let path = tmp.join(rel);
            let mut d = path.parent();
            while let Some(p) = d.filter(|p| p.starts_with(&tmp)) {
                tokio::fs::create_dir_all(p)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = tokio::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).await;
                d = p.parent();
            }
            tokio::fs::write(&path, bytes)
                .await
                .map_err(|e| e.to_string())?;
            tokio::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                .await
                .map_err(|e| e.to_string())?;
        }
        tokio::fs::write(tmp.join(READY), b"")
            .await
            .map_err(|e| e.to_string())?;
        let _ =
            tokio::fs::set_permissions(&s.models_dir, std::fs::Permissions::from_mode(0o755)).await;
        tokio::fs::rename(&tmp, &dir)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    if let Err(e) = outcome {
        let _ = tokio::fs::remove_dir_all(&tmp).await;
        return Err(format!("writing its files for the Python runtime: {e}"));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlmodel(yaml: &str) -> MlModelFile {
        MlModelFile::parse(yaml.as_bytes()).expect("valid")
    }

    #[test]
    fn columns_and_tensors_are_planned_from_the_signature() {
        let m = mlmodel(
            "flavors:\n  python_function: {loader_module: mlflow.sklearn}\nsignature:\n  inputs: '[{\"type\": \"double\", \"name\": \"a\"}, {\"type\": \"long\", \"name\": \"b\"}]'\n  outputs: '[{\"type\": \"tensor\", \"tensor-spec\": {\"dtype\": \"int64\", \"shape\": [-1]}}]'\n",
        );
        let p = plan(&m).expect("servable").expect("pyfunc");
        assert_eq!(p.loader, "mlflow.sklearn");
        assert_eq!(p.row_width(), 2);
        assert_eq!(p.out_width(), 1);
        assert_eq!(outputs(&p)[0].name, "predict");
        assert_eq!(outputs(&p)[0].datatype, "INT64");
        let t = mlmodel(
            "flavors:\n  python_function: {loader_module: mlflow.pytorch}\nsignature:\n  inputs: '[{\"type\": \"tensor\", \"tensor-spec\": {\"dtype\": \"float32\", \"shape\": [-1, 2, 3]}}]'\n  outputs: '[{\"type\": \"tensor\", \"tensor-spec\": {\"dtype\": \"float32\", \"shape\": [-1, 4]}}]'\n",
        );
        let p = plan(&t).expect("servable").expect("pyfunc");
        assert_eq!(p.row_width(), 6);
        assert_eq!(inputs(&p)[0].shape, vec![-1, 2, 3]);
        assert_eq!(p.out_width(), 4);
        let raw: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let r = respond(&p, 2, &raw, &[]);
        assert_eq!(r[0].shape, vec![2, 4]);
    }

    #[test]
    fn what_cannot_be_carried_is_refused_with_the_reason() {
        let none = mlmodel("flavors:\n  python_function: {loader_module: x}\n");
        assert!(plan(&none).expect_err("no signature").contains("signature"));
        let binary = mlmodel(
            "flavors:\n  python_function: {}\nsignature:\n  inputs: '[{\"type\": \"binary\", \"name\": \"photo\"}]'\n  outputs: '[{\"type\": \"double\"}]'\n",
        );
        assert!(plan(&binary).expect_err("binary").contains("'photo'"));
        let text_out = mlmodel(
            "flavors:\n  python_function: {}\nsignature:\n  inputs: '[{\"type\": \"double\", \"name\": \"x\"}]'\n  outputs: '[{\"type\": \"string\"}]'\n",
        );
        let p = plan(&text_out).expect("text answers").expect("pyfunc");
        assert_eq!((p.out_width(), p.text_out_width()), (1, 1));
        assert_eq!(outputs(&p)[0].datatype, "BYTES");
        let ragged = mlmodel(
            "flavors:\n  python_function: {}\nsignature:\n  inputs: '[{\"type\": \"tensor\", \"tensor-spec\": {\"dtype\": \"float32\", \"shape\": [-1, -1]}}]'\n  outputs: '[{\"type\": \"double\"}]'\n",
        );
        assert!(plan(&ragged).expect_err("ragged").contains("[-1, fixed"));
        assert_eq!(
            plan(&mlmodel("flavors:\n  sklearn: {}\n")).expect("no pyfunc"),
            None
        );
    }

    #[test]
    fn string_columns_are_planned_and_cross_beside_the_rows() {
        let m = mlmodel(
            "flavors:\n  python_function: {loader_module: mlflow.sklearn}\nsignature:\n  inputs: '[{\"type\": \"string\", \"name\": \"city\"}, {\"type\": \"double\", \"name\": \"rooms\"}]'\n  outputs: '[{\"type\": \"tensor\", \"tensor-spec\": {\"dtype\": \"int64\", \"shape\": [-1]}}]'\n",
        );
        let p = plan(&m).expect("servable").expect("pyfunc");
        assert_eq!((p.row_width(), p.text_width()), (2, 1));
        assert_eq!(inputs(&p)[0].datatype, "BYTES");
        assert_eq!(inputs(&p)[1].datatype, "FP64");
        let text = vec![Some("Dubai".to_string()), None];
        let bytes = encode(&p, &[f64::NAN, 1.0, f64::NAN, 3.0], &text, 2).expect("encoded");
        let batches: Vec<RecordBatch> =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
                .expect("a stream")
                .map(|b| b.expect("batch"))
                .collect();
        let strings = batches[0]
            .column(1)
            .as_any()
            .downcast_ref::<arrow_array::FixedSizeListArray>()
            .expect("a list")
            .values()
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .expect("strings")
            .iter()
            .map(|s| s.map(str::to_string))
            .collect::<Vec<_>>();
        // A missing string stays missing.
        assert_eq!(strings, text);
        // Rows without their strings are refused, not sent.
        assert!(encode(&p, &[f64::NAN, 1.0], &[], 1)
            .expect_err("no strings")
            .contains("text columns"));
    }

    #[test]
    fn batches_cross_as_arrow_and_answers_come_back_as_rows() {
        let p = Plan {
            loader: "x".into(),
            take: Take::Columns(vec![
                ("a".into(), "float64".into(), "FP64".into()),
                ("b".into(), "float64".into(), "FP64".into()),
            ]),
            outputs: vec![Output {
                name: "y".into(),
                datatype: "FP64".into(),
                dims: vec![],
            }],
        };
        let bytes = encode(&p, &[1.0, 2.0, 3.0, 4.0], &[], 2).expect("encoded");
        let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
            .expect("a stream");
        assert_eq!(
            reader
                .schema()
                .metadata()
                .get("qanat.names")
                .map(String::as_str),
            Some("[\"a\",\"b\"]")
        );
        let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
        assert_eq!(batches[0].num_rows(), 2);
        // An answer: two rows of a float64 column and a string column.
        let schema = Arc::new(Schema::new(vec![
            Field::new("0", DataType::Float64, false),
            Field::new("1", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Float64Array::from(vec![1.0, 2.0])),
                Arc::new(arrow_array::StringArray::from(vec!["sold", "unsold"])),
            ],
        )
        .expect("batch");
        let mut out = Vec::new();
        {
            let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).expect("w");
            w.write(&batch).expect("write");
            w.finish().expect("finish");
        }
        let output = |name: &str, datatype: &str| Output {
            name: name.into(),
            datatype: datatype.into(),
            dims: vec![],
        };
        let outs = [output("score", "FP64"), output("label", "BYTES")];
        let (raw, text) = decode(&out, 2, &outs).expect("rows");
        assert_eq!(raw[0], 1.0);
        assert!(raw[1].is_nan());
        assert_eq!(raw[2], 2.0);
        assert_eq!(text, vec!["sold", "unsold"]);
        let p = Plan {
            loader: "x".into(),
            take: Take::Tensor {
                dtype: "float64".into(),
                shape: vec![-1, 1],
            },
            outputs: outs.to_vec(),
        };
        let r = respond(&p, 2, &raw, &text);
        assert_eq!(r[0].data, serde_json::json!([1.0, 2.0]));
        assert_eq!(r[1].data, serde_json::json!(["sold", "unsold"]));
        assert_eq!(r[1].datatype, "BYTES");
        assert!(decode(&out, 3, &outs)
            .expect_err("short")
            .contains("2 rows"));
        assert!(decode(&out, 2, &outs[..1])
            .expect_err("wide")
            .contains("1 values a row"));
        // A string where a number was promised is refused, not guessed.
        let swapped = [output("label", "BYTES"), output("score", "FP64")];
        assert!(decode(&out, 2, &swapped).is_err());
    }
}
