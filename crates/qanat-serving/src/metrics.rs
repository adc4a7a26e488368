//! Prometheus metrics of serving, per deployment (or model served by name) and
//! version: requests by outcome, latency and queue time histograms, and the sizes of
//! the batches each version ran. Registered into the server's registry
//! ([`ServingMetrics::register`]) and rendered at `/metrics` with the rest.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Who answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    pub project: String,
    /// The OIP name asked for: a deployment, or a registered model.
    pub deployment: String,
    pub version: String,
    /// `answer` or `shadow`.
    pub role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub project: String,
    pub deployment: String,
    pub version: String,
    pub role: String,
    /// `ok`, or the error kind (`invalid`, `exhausted`, `unavailable`, …).
    pub outcome: String,
}

/// Which served version ran a batch.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    pub project: String,
    pub model: String,
    pub version: String,
}

/// A version loaded in this process: what runs it and where.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoadedLabels {
    pub project: String,
    pub model: String,
    pub version: String,
    /// As `deploy status` says it (`onnx on onnxruntime (cuda:0)`, `qanat trees (…)`).
    pub runtime: String,
    /// `cpu` or `cuda:<n>`.
    pub device: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds() -> Histogram {
    // 50 µs .. ~0.8 s
    Histogram::new(exponential_buckets(0.000_05, 2.0, 15))
}

fn rows() -> Histogram {
    // 1 .. 4,096 rows
    Histogram::new(exponential_buckets(1.0, 2.0, 13))
}

/// Serving's metric families (cheap to clone: each is shared).
#[derive(Clone)]
pub struct ServingMetrics {
    pub requests: Family<OutcomeLabels, Counter>,
    pub latency: Histograms<VersionLabels>,
    pub queue: Histograms<VersionLabels>,
    pub batch_rows: Histograms<BatchLabels>,
    pub loaded: Family<LoadedLabels, Gauge>,
}

impl Default for ServingMetrics {
    fn default() -> Self {
        ServingMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(seconds),
            queue: Family::new_with_constructor(seconds),
            batch_rows: Family::new_with_constructor(rows),
            loaded: Family::default(),
        }
    }
}

impl std::fmt::Debug for ServingMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServingMetrics")
    }
}

impl ServingMetrics {
    /// Adds the families to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "qanat_serving_requests",
            "Inference requests by deployment, version, role (answer or shadow) and outcome",
            self.requests.clone(),
        );
        registry.register(
            "qanat_serving_request_duration_seconds",
            "Time from a request reaching serving to its answer, by deployment and version",
            self.latency.clone(),
        );
        registry.register(
            "qanat_serving_queue_duration_seconds",
            "Time a request waited in the batcher's queue, by deployment and version",
            self.queue.clone(),
        );
        registry.register(
            "qanat_serving_batch_rows",
            "Rows in each batch a served version ran",
            self.batch_rows.clone(),
        );
        registry.register(
            "qanat_serving_version_loaded",
            "Versions loaded in this process (1), with the runtime that serves each and the device it runs on",
            self.loaded.clone(),
        );
    }
}
