//! What a user submits: a job spec (JSON on the wire, YAML in `job.yaml`), and its
//! parsed, checked form. Common fields are here; the fields of a kind (a command's
//! `command` and `working_dir`, …) stay in `params` for the kind to parse.

use std::time::Duration;

use serde_json::Value;

pub use qanat_types::jobs::{
    JobSpec, ResourceRequest, Resources, MAX_RANKS, MAX_RETRIES, PRIORITY_RANGE,
};

use crate::{Error, Result};

/// A spec, checked: what the scheduler stores and works from.
#[derive(Debug, Clone)]
pub struct Checked {
    pub spec: JobSpec,
    pub resources: Resources,
    pub gpu_model: Option<String>,
    pub ranks: u32,
    pub priority: i64,
    pub preemptible: bool,
    pub timeout: Option<Duration>,
    pub max_retries: u32,
    pub executor: String,
    pub inputs: Vec<qanat_core::ObjectRef>,
}

/// Parses `512MiB`, `4GiB`, `2G`, `1000M`, `1.5GiB` or a number of bytes into MiB
/// (rounded up).
pub fn parse_memory(v: &Value) -> Result<u64> {
    let bad = || {
        Error::invalid(format!(
            "resources.memory = {v}: give a size like 512MiB, 4GiB or 2G"
        ))
    };
    let bytes: f64 = match v {
        Value::Number(n) => n.as_f64().ok_or_else(bad)?,
        Value::String(s) => {
            let s = s.trim();
            let split = s
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(s.len());
            let (num, unit) = s.split_at(split);
            let n: f64 = num.parse().map_err(|_| bad())?;
            let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
                "" | "b" => 1.0,
                "k" | "kb" => 1e3,
                "ki" | "kib" => 1024.0,
                "m" | "mb" => 1e6,
                "mi" | "mib" => 1024.0 * 1024.0,
                "g" | "gb" => 1e9,
                "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
                "t" | "tb" => 1e12,
                "ti" | "tib" => 1024f64.powi(4),
                _ => return Err(bad()),
            };
            n * mult
        }
        _ => return Err(bad()),
    };
    if !bytes.is_finite() || bytes <= 0.0 {
        return Err(bad());
    }
    Ok((bytes / (1024.0 * 1024.0)).ceil() as u64)
}

/// Checks a spec's common fields (the kind checks its own).
pub fn check(spec: JobSpec, default_timeout: Option<Duration>) -> Result<Checked> {
    qanat_core::Name::parse_as("job name", &spec.name)
        .map_err(|e| Error::invalid(e.to_string()))?;
    let r = &spec.resources;
    let cpus = r.cpus.unwrap_or(1.0);
    if !cpus.is_finite() || cpus <= 0.0 || cpus > 4096.0 {
        return Err(Error::invalid(format!(
            "resources.cpus = {cpus}: ask for a number of cores above 0, like 1 or 0.5"
        )));
    }
    let memory_mb = match &r.memory {
        Some(v) => parse_memory(v)?,
        None => 1024,
    };
    let gpus = r.gpus.unwrap_or(0);
    if r.gpu_model.is_some() && gpus == 0 {
        return Err(Error::invalid(
            "resources.gpu_model is set but resources.gpus is 0: ask for at least one GPU",
        ));
    }
    let ranks = spec.ranks.unwrap_or(1);
    if ranks == 0 || ranks > MAX_RANKS {
        return Err(Error::invalid(format!(
            "ranks = {ranks}: a job runs 1 to {MAX_RANKS} processes"
        )));
    }
    let priority = spec.priority.unwrap_or(0);
    if !PRIORITY_RANGE.contains(&priority) {
        return Err(Error::invalid(format!(
            "priority = {priority}: use -1000 (background) to 1000 (urgent); 0 is normal"
        )));
    }
    let timeout = match &spec.timeout {
        Some(t) => {
            let d = humantime::parse_duration(t).map_err(|e| {
                Error::invalid(format!(
                    "timeout = '{t}': {e}; write a duration like 30m or 2h"
                ))
            })?;
            if d.is_zero() {
                return Err(Error::invalid("timeout must be longer than 0s"));
            }
            Some(d)
        }
        None => default_timeout,
    };
    let max_retries = spec.max_retries.unwrap_or(0);
    if max_retries > MAX_RETRIES {
        return Err(Error::invalid(format!(
            "max_retries = {max_retries}: at most {MAX_RETRIES}"
        )));
    }
    let executor = spec.executor.clone().unwrap_or_else(|| "local".into());
    let mut inputs = Vec::new();
    for r in &spec.inputs {
        if r.kind != qanat_core::Kind::Dataset {
            return Err(Error::invalid(format!(
                "inputs: '{r}' is not a dataset; inputs are dataset versions like dataset:transactions@3"
            )));
        }
        inputs.push(r.clone());
    }
    for o in &spec.outputs {
        let p = std::path::Path::new(o);
        if o.is_empty()
            || p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(Error::invalid(format!(
                "outputs: '{o}' must be a path inside the working directory (relative, no '..')"
            )));
        }
    }
    for k in spec.env.keys() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(Error::invalid(format!("env: '{k}' is not a variable name")));
        }
        if k.starts_with("QANAT_") || k.starts_with("MLFLOW_TRACKING_") || k == "MLFLOW_RUN_ID" {
            return Err(Error::invalid(format!(
                "env: {k} is set by Qanat for every job and cannot be overridden"
            )));
        }
    }
    if spec.env.values().any(|v| v.contains('\0')) {
        return Err(Error::invalid("env: a value holds a NUL character"));
    }
    if let Some(e) = &spec.experiment {
        if e.trim().is_empty() || e.len() > 500 {
            return Err(Error::invalid(
                "experiment: name an MLflow experiment (1-500 characters)",
            ));
        }
    }
    if let Some(r) = &spec.parent_run {
        if r.is_empty() || r.len() > 64 || !r.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::invalid(format!(
                "parent_run = '{r}': give the id of a run of this project"
            )));
        }
    }
    Ok(Checked {
        resources: Resources {
            cpu_millis: (cpus * 1000.0).ceil() as u64,
            memory_mb,
            gpus,
        },
        gpu_model: r.gpu_model.clone(),
        ranks,
        priority,
        preemptible: spec.preemptible.unwrap_or(true),
        timeout,
        max_retries,
        executor,
        inputs,
        spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> JobSpec {
        serde_json::from_value(v).expect("test input")
    }

    #[test]
    fn memory_sizes_parse_to_mebibytes() {
        assert_eq!(parse_memory(&json!("512MiB")).expect("test input"), 512);
        assert_eq!(parse_memory(&json!("4GiB")).expect("test input"), 4096);
        assert_eq!(parse_memory(&json!("1G")).expect("test input"), 954);
        assert_eq!(parse_memory(&json!(1048576)).expect("test input"), 1);
        assert!(parse_memory(&json!("lots")).is_err());
        assert!(parse_memory(&json!("-1G")).is_err());
    }

    #[test]
    fn defaults_are_one_cpu_one_gib_one_rank() {
        let c = check(spec(json!({"name": "t", "command": ["true"]})), None).expect("test input");
        assert_eq!(c.resources.cpu_millis, 1000);
        assert_eq!(c.resources.memory_mb, 1024);
        assert_eq!(c.ranks, 1);
        assert_eq!(c.spec.kind, "command");
        assert!(c.spec.params.contains_key("command"));
    }

    #[test]
    fn bad_fields_are_refused_with_what_to_fix() {
        for (v, needle) in [
            (json!({"name": "t", "priority": 5000}), "priority"),
            (json!({"name": "t", "timeout": "soon"}), "timeout"),
            (json!({"name": "t", "ranks": 0}), "ranks"),
            (
                json!({"name": "t", "inputs": ["model:m@1"]}),
                "not a dataset",
            ),
            (
                json!({"name": "t", "outputs": ["../x"]}),
                "inside the working",
            ),
            (
                json!({"name": "t", "env": {"QANAT_TOKEN": "x"}}),
                "cannot be overridden",
            ),
            (json!({"name": "a b"}), "job name"),
        ] {
            let e = check(spec(v), None).expect_err("refused").to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
