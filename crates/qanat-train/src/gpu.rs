//! Finding the GPU to train on (builds with the `cuda` feature). CUDA is loaded at run
//! time (burn's `cuda` backend opens the driver library on first use), so one binary
//! runs on machines with and without GPUs: with `device: auto` the trainer uses a GPU
//! only when the job was given one (the scheduler sets `CUDA_VISIBLE_DEVICES` to the
//! GPUs it allocated), the NVIDIA driver is loaded, and a first tensor operation on it
//! succeeds; otherwise it trains on the CPU and says why in the job's log.

use burn::backend::cuda::CudaDevice;
use burn::backend::Cuda;
use burn::tensor::Tensor;
use qanat_model::config::{Device, TrainConfig};

use crate::{Error, Result};

/// The CUDA device to train on, or `None` for the CPU.
pub fn cuda_device(config: &TrainConfig) -> Result<Option<CudaDevice>> {
    let required = match config.device {
        Device::Cpu => return Ok(None),
        Device::Auto => false,
        Device::Cuda => true,
    };
    let unavailable = |why: &str| {
        if required {
            Err(Error::invalid(format!(
                "device = cuda, but {why}: give the job a GPU (resources: {{gpus: 1}}) on a machine with the NVIDIA driver, or use device: auto"
            )))
        } else {
            println!("training on the CPU: {why}");
            Ok(None)
        }
    };
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    if visible.as_deref().is_some_and(|v| v.trim().is_empty()) {
        return unavailable("the job has no GPU (CUDA_VISIBLE_DEVICES is empty)");
    }
    if !std::path::Path::new("/proc/driver/nvidia/version").exists() {
        return unavailable("no NVIDIA driver is loaded on this machine");
    }
    let device = CudaDevice::default();
    // The first operation loads libcuda and compiles a kernel; a missing or broken
    // installation panics inside the backend, which is caught here.
    let probe = std::panic::catch_unwind(|| {
        let t = Tensor::<Cuda, 1>::from_floats([1.0, 2.0], &CudaDevice::default());
        t.sum().into_scalar()
    });
    match probe {
        Ok(v) if (v - 3.0).abs() < 1e-6 => {
            println!("training on the GPU (CUDA device 0)");
            Ok(Some(device))
        }
        Ok(v) => unavailable(&format!("the GPU computed 1 + 2 = {v}")),
        Err(_) => unavailable("CUDA could not be initialized (see the message above)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn auto_uses_a_gpu_only_when_one_answers_and_cuda_insists() {
        let config = |device: &str| {
            TrainConfig::from_value(json!({"target": "y", "device": device})).expect("config")
        };
        assert!(cuda_device(&config("cpu")).expect("cpu").is_none());
        if std::path::Path::new("/proc/driver/nvidia/version").exists() {
            // A GPU machine: auto and cuda both find it.
            assert!(cuda_device(&config("auto")).expect("auto").is_some());
        } else {
            assert!(cuda_device(&config("auto")).expect("auto").is_none());
            let e = cuda_device(&config("cuda")).expect_err("no GPU");
            assert!(e.to_string().contains("give the job a GPU"), "{e}");
        }
    }
}
