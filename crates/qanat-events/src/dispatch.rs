//! The dispatcher: claims due deliveries from the outbox, sends them (signed HTTP
//! POSTs to webhooks, JetStream publishes to NATS), and records each attempt.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tokio::sync::Semaphore;

use crate::outbox::{Due, Outcome};
use crate::signature::{sign, DELIVERY_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use crate::webhooks::check_url;
use crate::{now_ms, Error, Events, Result, Settings};

/// Deliveries in flight at once.
const CONCURRENCY: usize = 8;
/// How often the outbox is looked at when nothing wakes the dispatcher (retries
/// come due, and other servers may queue deliveries).
const POLL: Duration = Duration::from_millis(500);

/// Whether an address is one the public internet routes to: not in IANA's
/// special-purpose registries (IPv4 and IPv6) unless the registry says it is globally
/// reachable, and, for IPv6 forms that carry an IPv4 address (mapped, compatible,
/// translated, 6to4, NAT64, Teredo), never a way around the IPv4 rules.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 192 && b == 88 && c == 99)
                || (a == 198 && (18..20).contains(&b))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            let in_prefix = |prefix: &[u16], bits: u32| {
                let mut left = bits;
                for (i, p) in prefix.iter().enumerate() {
                    let take = left.min(16);
                    if take == 0 {
                        break;
                    }
                    let mask = if take == 16 {
                        0xffff
                    } else {
                        !(0xffff >> take)
                    };
                    if s[i] & mask != p & mask {
                        return false;
                    }
                    left -= take;
                }
                true
            };
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // ::/96 IPv4-compatible (deprecated), and ::ffff:0:0:0/96 translated.
                || in_prefix(&[0, 0, 0, 0, 0, 0], 96)
                || in_prefix(&[0, 0, 0, 0, 0xffff, 0], 96)
                // 64:ff9b::/96 NAT64, 64:ff9b:1::/48 local-use NAT64.
                || in_prefix(&[0x64, 0xff9b], 32)
                // 100::/64 discard-only.
                || in_prefix(&[0x100, 0, 0, 0], 64)
                // 2001::/23 IETF protocol assignments (Teredo, benchmarking, ORCHID).
                || in_prefix(&[0x2001, 0], 23)
                // 2001:db8::/32 and 3fff::/20 documentation.
                || in_prefix(&[0x2001, 0x0db8], 32)
                || in_prefix(&[0x3fff], 20)
                // 2002::/16 6to4 (carries any IPv4 address).
                || in_prefix(&[0x2002], 16)
                // 5f00::/16 segment routing SIDs.
                || in_prefix(&[0x5f00], 16)
                // fc00::/7 unique local, fe80::/10 link-local, fec0::/10 site-local.
                || in_prefix(&[0xfc00], 7)
                || in_prefix(&[0xfe80], 10)
                || in_prefix(&[0xfec0], 10))
        }
    }
}

/// Resolves webhook hosts and keeps only public addresses (unless private networks
/// are allowed): the check happens on the answer the connection will use.
struct PublicOnly {
    allow_private: bool,
}

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| allow_private || is_public(a.ip()))
                .collect();
            if kept.is_empty() {
                let shown = all.first().map(|a| a.ip().to_string()).unwrap_or_default();
                return Err(format!(
                    "webhook host '{host}' resolves to a non-public address ({shown}); set events.allow_private_networks to allow it"
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// The client every delivery uses: no redirects (a redirect could lead anywhere),
/// the configured timeout, and the address policy in its resolver.
pub(crate) fn http_client(settings: &Settings) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
        .user_agent(concat!("qanat-webhooks/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(PublicOnly {
            allow_private: settings.allow_private_networks,
        }))
        .build()
        .map_err(|e| Error::invalid(format!("webhook HTTP client: {e}")))
}

/// Why an attempt went wrong, in words for the delivery history.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The URL is not allowed (scheme, or an address literal that is not public).
    Refused(String),
    /// The network: timeouts, refused connections, DNS.
    Network(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Refused(s) | SendError::Network(s) => f.write_str(s),
        }
    }
}

/// One signed POST of `body` to `url`: `(status, response text)`.
pub(crate) async fn post(
    events: &Events,
    url: &str,
    delivery_id: &str,
    body: &str,
    secret: Option<&[u8]>,
) -> std::result::Result<(u16, String), SendError> {
    let settings = &events.settings;
    let parsed =
        check_url(url, &settings.allowed_schemes).map_err(|e| SendError::Refused(e.to_string()))?;
    // An address written in the URL never goes through the resolver.
    let literal = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        _ => None,
    };
    if let Some(ip) = literal.filter(|ip| !settings.allow_private_networks && !is_public(*ip)) {
        return Err(SendError::Refused(format!(
            "webhook address {ip} is not public; set events.allow_private_networks to allow it"
        )));
    }
    let timestamp = (now_ms() / 1000).to_string();
    let mut req = events
        .http
        .post(parsed)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(DELIVERY_ID_HEADER, delivery_id)
        .header(TIMESTAMP_HEADER, &timestamp);
    if let Some(secret) = secret {
        req = req.header(
            SIGNATURE_HEADER,
            sign(secret, delivery_id, &timestamp, body),
        );
    }
    let resp = req
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| SendError::Network(describe(&e)))?;
    let status = resp.status().as_u16();
    // Keep a bounded piece of the answer for the history.
    let text = resp.text().await.unwrap_or_default();
    let text: String = text.chars().take(2048).collect();
    Ok((status, text))
}

/// A reqwest error with its causes (the top level alone says "error sending request").
fn describe(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Sends the outbox's deliveries until the runtime stops.
pub struct Dispatcher;

impl Dispatcher {
    /// Starts the dispatcher on the current runtime.
    pub fn spawn(events: Events) -> tokio::task::JoinHandle<()> {
        tokio::spawn(run(events))
    }
}

async fn run(events: Events) {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let nats = events
        .settings
        .nats
        .clone()
        .map(crate::nats::Publisher::new);
    let lease_ms = (events.settings.timeout.as_millis() as i64) * 2 + 10_000;
    let outbox = events.outbox();
    loop {
        let free = permits.available_permits();
        let claimed = if free > 0 {
            match events.claim_due(free, lease_ms).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "event outbox: claiming deliveries failed");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        for due in claimed {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let events = events.clone();
            let nats = nats.clone();
            tokio::spawn(async move {
                let started = now_ms();
                let outcome = attempt(&events, nats.as_ref(), &due).await;
                if let Err(e) = events.finish_attempt(&due, started, outcome).await {
                    tracing::warn!(error = %e, delivery = %due.id, "event outbox: recording an attempt failed");
                }
                drop(permit);
            });
        }
        tokio::select! {
            _ = outbox.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

async fn attempt(events: &Events, nats: Option<&crate::nats::Publisher>, due: &Due) -> Outcome {
    match (due.target.as_str(), &due.webhook_id) {
        ("webhook", Some(hook)) => deliver_webhook(events, hook, due).await,
        ("nats", _) => match nats {
            Some(p) => match events.project_name(&due.project_id).await {
                Ok(project) => p.publish(&project, &due.event, &due.body).await,
                Err(e) => Outcome::Fail(None, e.to_string()),
            },
            None => Outcome::Fail(None, "NATS is not configured on this server".into()),
        },
        _ => Outcome::Fail(None, format!("unknown delivery target '{}'", due.target)),
    }
}

async fn deliver_webhook(events: &Events, hook: &str, due: &Due) -> Outcome {
    let row = sqlx::query("SELECT url, status, deleted_at FROM webhooks WHERE webhook_id = $1")
        .bind(hook)
        .fetch_optional(events.meta.reader())
        .await;
    let (url, status, deleted): (String, String, Option<i64>) = match row {
        Ok(Some(r)) => {
            use sqlx::Row;
            match (
                r.try_get("url"),
                r.try_get("status"),
                r.try_get("deleted_at"),
            ) {
                (Ok(u), Ok(s), Ok(d)) => (u, s, d),
                _ => return Outcome::Retry(None, "reading the webhook failed".into()),
            }
        }
        Ok(None) => return Outcome::Fail(None, "the webhook no longer exists".into()),
        Err(e) => return Outcome::Retry(None, format!("reading the webhook failed: {e}")),
    };
    if deleted.is_some() {
        return Outcome::Fail(None, "the webhook was deleted".into());
    }
    if status != "ACTIVE" {
        return Outcome::Fail(None, "the webhook is disabled".into());
    }
    let secret = match events.secret_of(hook).await {
        Ok(s) => s,
        Err(e) => return Outcome::Retry(None, format!("opening the webhook secret failed: {e}")),
    };
    match post(events, &url, &due.id, &due.body, secret.as_deref()).await {
        Ok((code, _)) if (200..300).contains(&code) => Outcome::Delivered(Some(i64::from(code))),
        Ok((code, _)) if matches!(code, 408 | 429) || code >= 500 => Outcome::Retry(
            Some(i64::from(code)),
            format!("the receiver answered {code}"),
        ),
        Ok((code, _)) => Outcome::Fail(
            Some(i64::from(code)),
            format!("the receiver answered {code}"),
        ),
        Err(SendError::Refused(e)) => Outcome::Fail(None, e),
        Err(SendError::Network(e)) => Outcome::Retry(None, e),
    }
}

#[cfg(test)]
mod tests {
    use super::is_public;

    #[test]
    fn internal_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            // IPv4-compatible, translated, 6to4 and NAT64 forms of internal addresses.
            "::127.0.0.1",
            "::10.0.0.1",
            "::ffff:0:127.0.0.1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "fec0::1",
            "100::1",
            "2001::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "ff02::1",
            "192.88.99.1",
        ] {
            assert!(!is_public(ip.parse().expect("ip")), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "2606:2800:220:1:248:1893:25c8:1946",
            "2a00:1450:4001:80b::200e",
            "2001:4860:4860::8888",
            "8.8.8.8",
        ] {
            assert!(is_public(ip.parse().expect("ip")), "{ip}");
        }
    }
}
