//! Time as stored: microseconds since the Unix epoch, UTC.

/// Microseconds since the Unix epoch (UTC), the unit every timestamp is stored in.
pub type Micros = i64;

/// The current time in microseconds since the Unix epoch.
pub fn now_micros() -> Micros {
    chrono::Utc::now().timestamp_micros()
}

/// Parses an RFC 3339 time (any offset) into microseconds since the epoch; the error
/// says what a valid time looks like.
pub fn parse_micros(s: &str) -> Result<Micros, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_micros())
        .map_err(|e| format!("'{s}' is not an RFC 3339 time, e.g. 2026-01-31T12:00:00Z ({e})"))
}

/// Formats stored microseconds as RFC 3339 (UTC, microsecond precision).
pub fn format_micros(micros: Micros) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}
