//! Time as stored: microseconds since the Unix epoch, UTC.

/// Microseconds since the Unix epoch (UTC), the unit every timestamp is stored in.
pub type Micros = i64;

/// The current time in microseconds since the Unix epoch.
pub fn now_micros() -> Micros {
    chrono::Utc::now().timestamp_micros()
}

/// Formats stored microseconds as RFC 3339 (UTC, microsecond precision).
pub fn format_micros(micros: Micros) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}
