//! Monitoring: whether live traffic still looks like what a model was trained on.
//!
//! [`stats`] holds the drift statistics Evidently, Alibi Detect and whylogs use —
//! Kolmogorov–Smirnov, chi-squared, Population Stability Index, Jensen–Shannon and
//! Wasserstein distances — each computed exactly on two samples, with the p-values of
//! the tests that have one. They are checked against SciPy in
//! `tests/compat/drift_stats.py`.

pub mod stats;
