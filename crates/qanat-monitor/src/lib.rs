//! Monitoring: whether live traffic still looks like what a model was trained on.
//!
//! [`stats`] holds the drift statistics Evidently, Alibi Detect and whylogs use —
//! Kolmogorov–Smirnov, chi-squared, Population Stability Index, Jensen–Shannon and
//! Wasserstein distances — each computed exactly on two samples, with the p-values of
//! the tests that have one. They are checked against SciPy in
//! `tests/compat/drift_stats.py`.

//! [`profile`] keeps what a column looked like in memory that does not grow with its
//! rows, and merges; [`drift`] compares a current profile with a reference, column by
//! column with the method Evidently would choose, and the dataset as a whole; [`table`]
//! profiles CSV and Parquet files (or Arrow batches) and compares two of them;
//! [`report`] writes the result as one self-contained HTML page.

pub mod drift;
pub mod profile;
pub mod report;
pub mod stats;
pub mod table;
