//! Time as stored: microseconds since the Unix epoch, UTC.

/// Microseconds since the Unix epoch (UTC), the unit every timestamp is stored in.
pub type Micros = i64;

/// The current time in microseconds since the Unix epoch.
pub fn now_micros() -> Micros {
    chrono::Utc::now().timestamp_micros()
}
