//! GPUs, through NVML loaded at run time (`libnvidia-ml.so`): a machine without NVML —
//! no driver, a CPU box — simply has no GPUs; nothing here fails or panics for lack of
//! one. GPUs are addressed by UUID (what `CUDA_VISIBLE_DEVICES` accepts). A GPU in MIG
//! mode is reported as such and handed out whole: enumerating its MIG instances needs
//! NVML calls the `nvml-wrapper` crate does not wrap yet.

use nvml_wrapper::Nvml;

use crate::wire;

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
                tracing::info!(reason = %e, "NVML is not available: no GPUs on this node");
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
            out.push(wire::Gpu {
                index: i,
                name,
                uuid,
                memory_mb,
                mig,
                job_id: None,
            });
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
