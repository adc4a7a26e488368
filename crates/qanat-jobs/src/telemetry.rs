//! System metrics of a running attempt, logged to its run under MLflow's system-metric
//! names, as `mlflow.enable_system_metrics_logging()` would, but measured by Qanat for
//! the job's own processes and GPUs rather than for the whole machine:
//!
//! | metric | value |
//! |---|---|
//! | `system/cpu_utilization_percentage` | the job's CPU time over the cores it was given |
//! | `system/system_memory_usage_megabytes` | the resident memory of all its processes |
//! | `system/system_memory_usage_percentage` | … of the memory it asked for |
//! | `system/gpu_<i>_utilization_percentage` | GPU `i` of the job (its `CUDA_VISIBLE_DEVICES` order) |
//! | `system/gpu_<i>_memory_usage_megabytes`, `…_percentage` | its memory in use |
//! | `system/gpu_<i>_power_usage_watts` | its power draw |
//! | `qanat/idle_gpus` | GPUs under 10% utilization for longer than `jobs.idle_gpu_secs` |
//!
//! A GPU idle that long is also flagged on the job (`idle_gpus`, shown by `jobs show`).

use std::collections::HashMap;
use std::time::Duration;

use qanat_tracking::{Batch, Metric, MetricValue};
use tokio::sync::watch;

use crate::gpu::GpuSample;
use crate::{procfs, Jobs};

/// Utilization under which an allocated GPU counts as idle.
const IDLE_BELOW_PCT: f64 = 10.0;

/// What the sampler watches.
pub(crate) struct Watched {
    pub job_id: String,
    pub project_id: qanat_core::ProjectId,
    pub run_id: String,
    pub groups: Vec<i32>,
    /// The job's GPUs, by UUID, in `CUDA_VISIBLE_DEVICES` order.
    pub gpus: Vec<String>,
    pub cores: usize,
    pub memory_limit_mb: u64,
}

fn metric(key: String, value: f64, step: i64) -> Metric {
    Metric {
        key,
        value: MetricValue(value),
        timestamp: crate::now() / 1000,
        step,
        model_id: None,
        dataset_name: None,
        dataset_digest: None,
        run_id: None,
    }
}

/// Which GPUs have been idle for `after`, given when each went under the threshold.
pub(crate) fn idle_gpus(
    low_since: &mut HashMap<usize, tokio::time::Instant>,
    samples: &[(usize, GpuSample)],
    now: tokio::time::Instant,
    after: Duration,
) -> Vec<usize> {
    let mut idle = Vec::new();
    for (i, s) in samples {
        if s.utilization_pct < IDLE_BELOW_PCT {
            let since = *low_since.entry(*i).or_insert(now);
            if now.duration_since(since) >= after {
                idle.push(*i);
            }
        } else {
            low_since.remove(i);
        }
    }
    idle
}

impl Jobs {
    /// Samples until `stop` changes, logging each sample to the run.
    pub(crate) async fn sample_attempt(&self, w: Watched, mut stop: watch::Receiver<bool>) {
        let inner = &self.inner;
        let every = inner.settings.metrics_interval;
        let Ok(project) = inner.gov.project_by_id(&w.project_id).await else {
            return;
        };
        let tck = rustix::param::clock_ticks_per_second() as f64;
        let mut last_ticks: Option<(u64, tokio::time::Instant)> = None;
        let mut low_since = HashMap::new();
        let mut flagged: Vec<usize> = Vec::new();
        let mut step = 0i64;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            let now = tokio::time::Instant::now();
            let usage = procfs::group_usage(&w.groups);
            let ticks: u64 = usage.values().map(|u| u.cpu_ticks).sum();
            let rss: u64 = usage.values().map(|u| u.rss_mb).sum();
            let mut metrics = Vec::new();
            if let Some((t0, at)) = last_ticks {
                let secs = now.duration_since(at).as_secs_f64();
                if secs > 0.0 {
                    let used = ticks.saturating_sub(t0) as f64 / tck;
                    let pct = 100.0 * used / (secs * w.cores.max(1) as f64);
                    metrics.push(metric(
                        "system/cpu_utilization_percentage".into(),
                        pct,
                        step,
                    ));
                }
            }
            last_ticks = Some((ticks, now));
            metrics.push(metric(
                "system/system_memory_usage_megabytes".into(),
                rss as f64,
                step,
            ));
            if w.memory_limit_mb > 0 {
                metrics.push(metric(
                    "system/system_memory_usage_percentage".into(),
                    100.0 * rss as f64 / w.memory_limit_mb as f64,
                    step,
                ));
            }
            let samples: Vec<(usize, GpuSample)> = w
                .gpus
                .iter()
                .enumerate()
                .filter_map(|(i, uuid)| inner.local.gpu_sample(uuid).map(|s| (i, s)))
                .collect();
            for (i, s) in &samples {
                metrics.push(metric(
                    format!("system/gpu_{i}_utilization_percentage"),
                    s.utilization_pct,
                    step,
                ));
                metrics.push(metric(
                    format!("system/gpu_{i}_memory_usage_megabytes"),
                    s.memory_used_mb,
                    step,
                ));
                if s.memory_total_mb > 0.0 {
                    metrics.push(metric(
                        format!("system/gpu_{i}_memory_usage_percentage"),
                        100.0 * s.memory_used_mb / s.memory_total_mb,
                        step,
                    ));
                }
                if let Some(w) = s.power_watts {
                    metrics.push(metric(format!("system/gpu_{i}_power_usage_watts"), w, step));
                }
            }
            if !w.gpus.is_empty() {
                let idle = idle_gpus(&mut low_since, &samples, now, inner.settings.idle_gpu_after);
                metrics.push(metric("qanat/idle_gpus".into(), idle.len() as f64, step));
                if idle != flagged {
                    let text = (!idle.is_empty()).then(|| {
                        format!(
                            "GPU {} under {IDLE_BELOW_PCT}% utilization for over {}",
                            idle.iter()
                                .map(|i| i.to_string())
                                .collect::<Vec<_>>()
                                .join(", "),
                            humantime::format_duration(inner.settings.idle_gpu_after)
                        )
                    });
                    let _ = sqlx::query("UPDATE jobs SET idle_gpus = $1 WHERE job_id = $2")
                        .bind(text)
                        .bind(&w.job_id)
                        .execute(inner.meta.writer())
                        .await;
                    flagged = idle;
                }
            }
            let batch = Batch {
                metrics,
                ..Batch::default()
            };
            if let Err(e) = inner
                .tracking
                .log_batch(&project, &w.run_id, batch, None)
                .await
            {
                tracing::debug!(job = %w.job_id, error = %e, "logging system metrics failed");
            }
            step += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(util: f64) -> GpuSample {
        GpuSample {
            utilization_pct: util,
            memory_used_mb: 1.0,
            memory_total_mb: 2.0,
            power_watts: None,
        }
    }

    #[test]
    fn a_gpu_is_idle_only_after_staying_under_the_threshold_long_enough() {
        let t0 = tokio::time::Instant::now();
        let after = Duration::from_secs(60);
        let mut low = HashMap::new();
        assert!(idle_gpus(&mut low, &[(0, s(2.0)), (1, s(90.0))], t0, after).is_empty());
        let t1 = t0 + Duration::from_secs(61);
        assert_eq!(
            idle_gpus(&mut low, &[(0, s(3.0)), (1, s(95.0))], t1, after),
            [0]
        );
        // Busy again: the clock restarts.
        let t2 = t1 + Duration::from_secs(1);
        assert!(idle_gpus(&mut low, &[(0, s(50.0)), (1, s(1.0))], t2, after).is_empty());
        let t3 = t2 + Duration::from_secs(30);
        assert!(idle_gpus(&mut low, &[(0, s(1.0)), (1, s(1.0))], t3, after).is_empty());
    }
}
