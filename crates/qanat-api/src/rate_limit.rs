//! Per-token rate limits: a token bucket per token that carries a limit, holding one
//! second's worth of requests and refilled continuously. A request over the limit is
//! answered 429 at once (with `Retry-After`), before its project is looked up.
//!
//! A flood of refusals must not become a flood of audit writes: the first refusal of
//! a token is audited, then at most one entry per [`AUDIT_EVERY`] that counts the
//! refusals since the last one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a limited token's refusals are audited (one entry, with a count).
pub(crate) const AUDIT_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// Refusals not yet in an audit entry.
    refused: u64,
    audited: Option<Instant>,
}

/// The buckets of this server, by token id.
#[derive(Debug, Default)]
pub(crate) struct RateLimits {
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// A refused request: when to retry, and how many refusals to audit now (None: not
/// this time).
#[derive(Debug, PartialEq)]
pub(crate) struct Limited {
    pub(crate) retry_after: Duration,
    pub(crate) audit: Option<u64>,
}

impl RateLimits {
    /// Takes one request from `token`'s bucket of `per_second`.
    pub(crate) fn check(&self, token: &str, per_second: u32) -> Result<(), Limited> {
        self.check_at(token, per_second, Instant::now())
    }

    fn check_at(&self, token: &str, per_second: u32, now: Instant) -> Result<(), Limited> {
        let rate = f64::from(per_second.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(token.to_string()).or_insert(Bucket {
            tokens: rate,
            at: now,
            refused: 0,
            audited: None,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(rate);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        b.refused += 1;
        let audit = match b.audited {
            Some(t) if now.saturating_duration_since(t) < AUDIT_EVERY => None,
            _ => {
                b.audited = Some(now);
                Some(std::mem::take(&mut b.refused))
            }
        };
        Err(Limited {
            retry_after: Duration::from_secs_f64((1.0 - b.tokens) / rate),
            audit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_one_second_and_refills_at_the_rate() {
        let limits = RateLimits::default();
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(limits.check_at("t", 5, t0), Ok(()));
        }
        let first = limits.check_at("t", 5, t0).expect_err("over");
        assert_eq!(first.audit, Some(1), "the first refusal is audited");
        assert!(first.retry_after <= Duration::from_millis(200));
        // Refusals within the audit interval are counted, not audited.
        let again = limits.check_at("t", 5, t0).expect_err("over");
        assert_eq!(again.audit, None);
        // 0.2 s later one more request fits; other tokens have their own bucket.
        assert_eq!(
            limits.check_at("t", 5, t0 + Duration::from_millis(200)),
            Ok(())
        );
        assert_eq!(limits.check_at("u", 1, t0), Ok(()));
        assert!(limits.check_at("u", 1, t0).is_err());
        // After the interval the next refusal is audited with the count since.
        let later = t0 + AUDIT_EVERY + Duration::from_millis(1);
        for _ in 0..5 {
            assert_eq!(limits.check_at("t", 5, later), Ok(()));
        }
        let counted = limits.check_at("t", 5, later).expect_err("over");
        assert_eq!(counted.audit, Some(2));
    }
}
