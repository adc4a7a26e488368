//! GPUs, through NVML loaded at run time (`libnvidia-ml.so`): a machine without NVML —
//! no driver, a CPU box — simply has no GPUs; nothing here fails or panics for lack of
//! one. GPUs are addressed by UUID (what `CUDA_VISIBLE_DEVICES` accepts). A GPU in MIG
//! mode is replaced by its MIG instances, each scheduled as a GPU of its own (a job
//! asking for `gpu_model: 1g.10gb` gets one). The instances are listed by the driver's
//! `nvidia-smi -L` (the safe `nvml-wrapper` API does not enumerate them); NVML then
//! reads each instance's memory by its UUID.

use nvml_wrapper::Nvml;

use crate::wire;

/// A MIG instance, as `nvidia-smi -L` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MigInstance {
    /// The profile, e.g. `1g.10gb`.
    pub profile: String,
    pub uuid: String,
    /// From the profile's name (NVML's reading replaces it when it answers).
    pub memory_mb: u64,
}

/// The MIG instances of GPU `gpu_uuid`, from the driver's `nvidia-smi -L`; none when it
/// cannot be run.
fn mig_instances_of(gpu_uuid: &str) -> Vec<MigInstance> {
    match std::process::Command::new("nvidia-smi").arg("-L").output() {
        Ok(o) if o.status.success() => parse_smi_list(&String::from_utf8_lossy(&o.stdout))
            .into_iter()
            .find(|(g, _)| g == gpu_uuid)
            .map(|(_, m)| m)
            .unwrap_or_default(),
        Ok(o) => {
            tracing::warn!(status = %o.status, "nvidia-smi -L failed: the MIG GPU is handed out whole");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "nvidia-smi could not be run: the MIG GPU is handed out whole");
            Vec::new()
        }
    }
}

/// Each GPU's UUID and its MIG instances, from `nvidia-smi -L` output:
///
/// ```text
/// GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5b…)
///   MIG 1g.5gb      Device  0: (UUID: MIG-c6d4…)
/// ```
pub(crate) fn parse_smi_list(text: &str) -> Vec<(String, Vec<MigInstance>)> {
    let uuid_in = |l: &str| -> Option<String> {
        let start = l.find("(UUID: ")? + "(UUID: ".len();
        let end = l[start..].find(')')? + start;
        Some(l[start..end].trim().to_string())
    };
    let mut out: Vec<(String, Vec<MigInstance>)> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("GPU ") {
            if let Some(u) = uuid_in(t) {
                out.push((u, Vec::new()));
            }
        } else if let Some(rest) = t.strip_prefix("MIG ") {
            let (Some(profile), Some(uuid), Some((_, list))) =
                (rest.split_whitespace().next(), uuid_in(t), out.last_mut())
            else {
                continue;
            };
            // `3g.20gb` -> 20 GiB; `1g.10gb+me` -> 10 GiB.
            let memory_mb = profile
                .split('.')
                .nth(1)
                .and_then(|m| m.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<u64>().ok())
                .map_or(0, |gb| gb * 1024);
            list.push(MigInstance {
                profile: profile.to_string(),
                uuid,
                memory_mb,
            });
        }
    }
    out
}

/// One sample of a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GpuSample {
    pub utilization_pct: f64,
    pub memory_used_mb: f64,
    pub memory_total_mb: f64,
    pub power_watts: Option<f64>,
}

/// The NVML handle, if NVML could be loaded.
pub(crate) struct Gpus {
    nvml: Option<Nvml>,
}

impl std::fmt::Debug for Gpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpus")
            .field("nvml", &self.nvml.is_some())
            .finish()
    }
}

impl Gpus {
    /// Loads NVML and lists the schedulable GPUs (MIG instances in place of a GPU in
    /// MIG mode). No NVML: no GPUs.
    pub(crate) fn discover() -> (Gpus, Vec<wire::Gpu>) {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                // Said once per process, however many executors look.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::info!(reason = %e, "NVML is not available: no GPUs on this node");
                });
                return (Gpus { nvml: None }, Vec::new());
            }
        };
        let mut out = Vec::new();
        let count = nvml.device_count().unwrap_or(0);
        for i in 0..count {
            let Ok(dev) = nvml.device_by_index(i) else {
                continue;
            };
            let name = dev.name().unwrap_or_else(|_| "unknown GPU".into());
            let uuid = dev.uuid().unwrap_or_default();
            let memory_mb = dev.memory_info().map_or(0, |m| m.total / (1024 * 1024));
            // NVML_DEVICE_MIG_ENABLE is 1.
            let mig = dev.mig_mode().is_ok_and(|m| m.current == 1);
            let instances = if mig {
                mig_instances_of(&uuid)
            } else {
                Vec::new()
            };
            if instances.is_empty() {
                out.push(wire::Gpu {
                    index: i,
                    name,
                    uuid,
                    memory_mb,
                    mig,
                    parent_uuid: None,
                    job_id: None,
                });
                continue;
            }
            for m in instances {
                let memory_mb = nvml
                    .device_by_uuid(m.uuid.as_str())
                    .and_then(|d| d.memory_info())
                    .map_or(m.memory_mb, |mem| mem.total / (1024 * 1024));
                out.push(wire::Gpu {
                    index: 0,
                    name: format!("{name} MIG {}", m.profile),
                    uuid: m.uuid,
                    memory_mb,
                    mig: true,
                    parent_uuid: Some(uuid.clone()),
                    job_id: None,
                });
            }
        }
        for (n, g) in out.iter_mut().enumerate() {
            g.index = n as u32;
        }
        tracing::info!(gpus = out.len(), "NVML found GPUs");
        (Gpus { nvml: Some(nvml) }, out)
    }

    /// No NVML, no GPUs (tests, CPU nodes).
    pub(crate) fn none() -> Gpus {
        Gpus { nvml: None }
    }

    /// A sample of the GPU (or MIG instance) with `uuid`.
    pub(crate) fn sample(&self, uuid: &str) -> Option<GpuSample> {
        let nvml = self.nvml.as_ref()?;
        let dev = nvml.device_by_uuid(uuid).ok()?;
        let mem = dev.memory_info().ok()?;
        // A MIG instance reports no utilization of its own through this call; its
        // memory use is still real.
        let util = dev.utilization_rates().map_or(0.0, |u| f64::from(u.gpu));
        Some(GpuSample {
            utilization_pct: util,
            memory_used_mb: mem.used as f64 / (1024.0 * 1024.0),
            memory_total_mb: mem.total as f64 / (1024.0 * 1024.0),
            power_watts: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_instances_are_read_from_nvidia_smi() {
        let text = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n  MIG 3g.20gb     Device  0: (UUID: MIG-bbbb)\n  MIG 1g.5gb+me   Device  1: (UUID: MIG-cccc)\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-dddd)\n";
        let list = parse_smi_list(text);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].0, "GPU-aaaa");
        assert_eq!(
            list[0].1,
            vec![
                MigInstance {
                    profile: "3g.20gb".into(),
                    uuid: "MIG-bbbb".into(),
                    memory_mb: 20 * 1024
                },
                MigInstance {
                    profile: "1g.5gb+me".into(),
                    uuid: "MIG-cccc".into(),
                    memory_mb: 5 * 1024
                },
            ]
        );
        assert!(list[1].1.is_empty());
        assert!(parse_smi_list("No devices were found").is_empty());
    }
}
