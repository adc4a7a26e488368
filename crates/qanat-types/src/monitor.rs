//! Monitors as the API shows them: the spec (window, drift tests, alert rules, canary
//! policy), checks with their drift findings and live quality, alerts and labels
//! (`qanat-monitor` runs them).

pub mod drift;
pub mod quality;
pub mod spec;
pub mod wire;
