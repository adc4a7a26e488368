//! Metrics in the Prometheus/OpenMetrics text format: request counts by route, method
//! and status, a latency histogram by route and method, and the feature store's
//! freshness and stream consumers (read from the domain at each scrape).

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::AppState;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViewLabels {
    project: String,
    feature_view: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    project: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MonitorLabels {
    project: String,
    deployment: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QualityLabels {
    project: String,
    deployment: String,
    version: String,
    metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CountLabels {
    project: String,
    deployment: String,
    /// A check's status or an alert's state.
    state: String,
}

type FloatGauges<L> = Family<L, Gauge<f64, std::sync::atomic::AtomicU64>>;

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~16 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The server's metric registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily,
    freshness_lag: FloatGauges<ViewLabels>,
    stream_pending: Family<StreamLabels, Gauge>,
    stream_ingested: Family<StreamLabels, Gauge>,
    stream_rejected: Family<StreamLabels, Gauge>,
    drift_share: FloatGauges<MonitorLabels>,
    prediction_drift: Family<MonitorLabels, Gauge>,
    live_quality: FloatGauges<QualityLabels>,
    monitor_checks: Family<CountLabels, Gauge>,
    monitor_alerts: Family<CountLabels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        registry.register(
            "qanat_http_requests",
            "HTTP requests by route, method and status",
            requests.clone(),
        );
        registry.register(
            "qanat_http_request_duration_seconds",
            "HTTP request latency by route and method",
            latency.clone(),
        );
        let freshness_lag = FloatGauges::<ViewLabels>::default();
        registry.register(
            "qanat_feature_freshness_lag_seconds",
            "Now minus the newest event time written to the online store, per feature view",
            freshness_lag.clone(),
        );
        let stream_pending = Family::<StreamLabels, Gauge>::default();
        registry.register(
            "qanat_feature_stream_pending_messages",
            "Messages on a stream source's subject not yet consumed (consumer lag)",
            stream_pending.clone(),
        );
        let stream_ingested = Family::<StreamLabels, Gauge>::default();
        registry.register(
            "qanat_feature_stream_ingested_rows",
            "Rows a stream source's consumer wrote since the server started",
            stream_ingested.clone(),
        );
        let stream_rejected = Family::<StreamLabels, Gauge>::default();
        registry.register(
            "qanat_feature_stream_rejected_rows",
            "Rows a stream source's consumer refused since the server started",
            stream_rejected.clone(),
        );
        let drift_share = FloatGauges::<MonitorLabels>::default();
        registry.register(
            "qanat_monitor_drift_share",
            "The share of a version's inputs that drifted in its deployment's newest checked window",
            drift_share.clone(),
        );
        let prediction_drift = Family::<MonitorLabels, Gauge>::default();
        registry.register(
            "qanat_monitor_prediction_drift",
            "1 when a version's outputs drifted in the newest checked window, else 0",
            prediction_drift.clone(),
        );
        let live_quality = FloatGauges::<QualityLabels>::default();
        registry.register(
            "qanat_monitor_live_quality",
            "Live accuracy, auc or rmse of a version from the labels matched in the newest checked window",
            live_quality.clone(),
        );
        let monitor_checks = Family::<CountLabels, Gauge>::default();
        registry.register(
            "qanat_monitor_checks",
            "Windows checked per deployment, by status",
            monitor_checks.clone(),
        );
        let monitor_alerts = Family::<CountLabels, Gauge>::default();
        registry.register(
            "qanat_monitor_alerts",
            "Alerts raised per deployment, by state",
            monitor_alerts.clone(),
        );
        Metrics {
            drift_share,
            prediction_drift,
            live_quality,
            monitor_checks,
            monitor_alerts,
            registry,
            requests,
            latency,
            freshness_lag,
            stream_pending,
            stream_ingested,
            stream_rejected,
        }
    }
}

impl Metrics {
    /// The server's metrics with serving's families registered beside them.
    pub fn with_serving(serving: &qanat_serving::Serving) -> Self {
        let mut m = Metrics::default();
        serving.metrics().register(&mut m.registry);
        m
    }

    /// Sets the monitors' gauges from what the store holds (every server shows the
    /// same: the checks are in the shared metadata store).
    pub(crate) async fn observe_monitors(&self, monitor: &qanat_monitor::Monitors) {
        let snap = match monitor.snapshot().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: reading the monitors failed");
                return;
            }
        };
        self.drift_share.clear();
        self.prediction_drift.clear();
        self.live_quality.clear();
        self.monitor_checks.clear();
        self.monitor_alerts.clear();
        for (project, check) in &snap.latest {
            for v in &check.versions {
                let labels = MonitorLabels {
                    project: project.clone(),
                    deployment: check.deployment.clone(),
                    version: v.version.clone(),
                };
                if let Some(d) = &v.drift {
                    self.drift_share.get_or_create(&labels).set(d.share);
                }
                if let Some(p) = v.prediction_drift() {
                    self.prediction_drift
                        .get_or_create(&labels)
                        .set(i64::from(p));
                }
                let q = &v.quality;
                for (metric, value) in [("accuracy", q.accuracy), ("auc", q.auc), ("rmse", q.rmse)]
                {
                    if let Some(x) = value {
                        self.live_quality
                            .get_or_create(&QualityLabels {
                                project: project.clone(),
                                deployment: check.deployment.clone(),
                                version: v.version.clone(),
                                metric: metric.into(),
                            })
                            .set(x);
                    }
                }
            }
        }
        for (family, rows) in [
            (&self.monitor_checks, &snap.checks),
            (&self.monitor_alerts, &snap.alerts),
        ] {
            for (project, deployment, state, n) in rows {
                family
                    .get_or_create(&CountLabels {
                        project: project.clone(),
                        deployment: deployment.clone(),
                        state: state.clone(),
                    })
                    .set(*n);
            }
        }
    }

    /// Sets the feature store's gauges from its current state.
    pub(crate) async fn observe_features(&self, features: &qanat_features::Features) {
        match features.freshness_all().await {
            Ok(views) => {
                self.freshness_lag.clear();
                for (project, f) in views {
                    if let Some(lag) = f.lag_seconds {
                        self.freshness_lag
                            .get_or_create(&ViewLabels {
                                project,
                                feature_view: f.feature_view,
                            })
                            .set(lag);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "metrics: reading feature freshness failed"),
        }
        for family in [
            &self.stream_pending,
            &self.stream_ingested,
            &self.stream_rejected,
        ] {
            family.clear();
        }
        for (_, s) in features.all_streams() {
            if s.project.is_empty() {
                continue; // not connected yet: nothing measured
            }
            let labels = StreamLabels {
                project: s.project.clone(),
                source: s.source.clone(),
            };
            let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.stream_pending
                .get_or_create(&labels)
                .set(gauge(s.pending));
            self.stream_ingested
                .get_or_create(&labels)
                .set(gauge(s.ingested));
            self.stream_rejected
                .get_or_create(&labels)
                .set(gauge(s.rejected));
        }
    }

    /// Renders every metric as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// `text` (OpenMetrics) with every label but `le` and `quantile` dropped, and the
/// series that then coincide summed: what an anonymous scrape may see. Comment lines
/// are kept; the order of first appearance is kept.
pub(crate) fn without_labels(text: &str) -> String {
    let mut out = String::new();
    // (series, sum) in order, flushed at each comment line so families stay whole.
    let mut pending: Vec<(String, f64)> = Vec::new();
    let flush = |pending: &mut Vec<(String, f64)>, out: &mut String| {
        for (series, v) in pending.drain(..) {
            out.push_str(&format!("{series} {v}\n"));
        }
    };
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            flush(&mut pending, &mut out);
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some((s, v)) => (s.trim_end(), v),
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, kept) = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels.trim_end_matches('}');
                let kept: Vec<&str> = split_labels(labels)
                    .into_iter()
                    .filter(|l| l.starts_with("le=") || l.starts_with("quantile="))
                    .collect();
                (name, kept)
            }
            None => (series, Vec::new()),
        };
        let key = if kept.is_empty() {
            name.to_string()
        } else {
            format!("{name}{{{}}}", kept.join(","))
        };
        match pending.iter_mut().find(|(k, _)| *k == key) {
            Some((_, sum)) => *sum += value,
            None => pending.push((key, value)),
        }
    }
    flush(&mut pending, &mut out);
    out
}

/// `a="x",b="y,z"` split at the commas outside quotes.
fn split_labels(labels: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            '\\' if quoted => escaped = !escaped,
            '"' if !escaped => quoted = !quoted,
            ',' if !quoted => {
                out.push(labels[start..i].trim());
                start = i + 1;
            }
            _ => escaped = false,
        }
        if c != '\\' {
            escaped = false;
        }
    }
    if start < labels.len() {
        out.push(labels[start..].trim());
    }
    out.into_iter().filter(|l| !l.is_empty()).collect()
}

/// Middleware recording each request. Routes are labelled by their template
/// (`/api/v1/projects/{project}`), never the raw path, so label sets stay bounded.
pub(crate) async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = req.method().to_string();
    let start = Instant::now();
    let resp = next.run(req).await;
    let elapsed = start.elapsed().as_secs_f64();
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            method: method.clone(),
            route: route.clone(),
            status: resp.status().as_u16(),
        })
        .inc();
    state
        .metrics
        .latency
        .get_or_create(&RouteLabels { method, route })
        .observe(elapsed);
    resp
}

#[cfg(test)]
mod label_tests {
    use super::*;

    #[test]
    fn an_anonymous_view_sums_series_over_their_labels() {
        let text = "# TYPE req counter\n\
                    req_total{route=\"/a\",project=\"x,y\"} 2\n\
                    req_total{route=\"/b\",project=\"z\"} 3\n\
                    # TYPE lat histogram\n\
                    lat_bucket{route=\"/a\",le=\"0.1\"} 1\n\
                    lat_bucket{route=\"/b\",le=\"0.1\"} 4\n\
                    lat_bucket{route=\"/b\",le=\"+Inf\"} 5\n\
                    up 1\n\
                    # EOF\n";
        assert_eq!(
            without_labels(text),
            "# TYPE req counter\nreq_total 5\n# TYPE lat histogram\nlat_bucket{le=\"0.1\"} 5\nlat_bucket{le=\"+Inf\"} 5\nup 1\n# EOF\n"
        );
    }
}
