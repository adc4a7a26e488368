//! Audit sinks: every audit entry, shortly after it commits, shipped outside the
//! database — to an append-only file (`{"entry": …}` JSON lines), to syslog (RFC 5424,
//! over UDP, TCP or a local socket) and to an HTTP webhook (a JSON array per batch) —
//! with a signed checkpoint `{"checkpoint": …}` every `checkpoint_every` entries or
//! `checkpoint_secs` seconds. `qanat audit verify --checkpoint FILE` checks the chain
//! against the checkpoints, which catches a truncated log that the chain alone cannot.
//! While a required sink cannot be written, writes through the API are refused (fail
//! closed), as Vault does with its audit devices.
//!
//! Delivery is at least once: the file sink resumes after the last entry it holds; the
//! others keep the last sequence number they delivered in a cursor file, so after a
//! crash an entry may be sent twice (receivers deduplicate by `seq`), never skipped.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use qanat_governance::wire::AuditFilter;
use qanat_governance::Governance;
use qanat_store::Keyring;
use serde_json::{json, Value};

/// How often a sink looks for new entries.
const POLL: Duration = Duration::from_millis(200);
/// Entries read and delivered at a time.
const BATCH: i64 = 1000;

/// Where a syslog sink sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogAddr {
    Udp(String),
    Tcp(String),
    Unix(PathBuf),
}

impl FromStr for SyslogAddr {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let hint = "use udp://host:514, tcp://host:601 or unix:///dev/log";
        if let Some(a) = s.strip_prefix("udp://") {
            check_host_port(a, hint)?;
            Ok(SyslogAddr::Udp(a.to_string()))
        } else if let Some(a) = s.strip_prefix("tcp://") {
            check_host_port(a, hint)?;
            Ok(SyslogAddr::Tcp(a.to_string()))
        } else if let Some(p) = s.strip_prefix("unix://") {
            if !p.starts_with('/') {
                bail!("audit.syslog = '{s}': a socket path must be absolute; {hint}");
            }
            Ok(SyslogAddr::Unix(PathBuf::from(p)))
        } else {
            bail!("audit.syslog = '{s}': {hint}")
        }
    }
}

fn check_host_port(a: &str, hint: &str) -> Result<()> {
    match a.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => bail!("audit.syslog: '{a}' is not host:port; {hint}"),
    }
}

/// Where a sink delivers.
#[derive(Debug, Clone)]
pub enum Target {
    File(PathBuf),
    Syslog(SyslogAddr),
    /// Batches are POSTed as a JSON array; `token` goes in `Authorization: Bearer`.
    Webhook {
        url: String,
        token: Option<String>,
    },
}

impl Target {
    fn name(&self) -> String {
        match self {
            Target::File(p) => format!("file {}", p.display()),
            Target::Syslog(a) => format!("syslog {a:?}"),
            // Scheme, host and path only: a query string may carry a secret.
            Target::Webhook { url, .. } => format!(
                "webhook {}",
                url.split(['?', '#']).next().unwrap_or_default()
            ),
        }
    }
}

/// One sink and how it checkpoints.
pub struct Sink {
    pub target: Target,
    pub checkpoint_every: u64,
    pub checkpoint_secs: u64,
    pub required: bool,
    /// Where a syslog or webhook sink keeps the last sequence number it delivered.
    pub cursor_file: PathBuf,
}

/// Whether every required sink keeps up: each sink's flag, and the one the API reads.
pub struct Health {
    each: Mutex<Vec<bool>>,
    all: Arc<AtomicBool>,
    /// The last checkpoint a sink shipped (the compliance report shows it).
    last: Arc<Mutex<Option<qanat_governance::AuditCheckpoint>>>,
}

impl Health {
    /// One flag per sink; `all` is what the API checks before a write. A required
    /// sink starts not ok: writes are refused until it has caught up once.
    pub fn new(
        required: &[bool],
        all: Arc<AtomicBool>,
        last: Arc<Mutex<Option<qanat_governance::AuditCheckpoint>>>,
    ) -> Arc<Self> {
        let each: Vec<bool> = required.iter().map(|r| !r).collect();
        all.store(each.iter().all(|b| *b), Ordering::Release);
        Arc::new(Health {
            each: Mutex::new(each),
            all,
            last,
        })
    }

    /// Records a checkpoint a sink delivered.
    fn shipped(&self, cp: &qanat_governance::AuditCheckpoint) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref().is_none_or(|l| l.seq <= cp.seq) {
            *last = Some(cp.clone());
        }
    }

    /// Records sink `i`'s state; returns its previous one.
    fn set(&self, i: usize, ok: bool) -> bool {
        let mut each = self.each.lock().unwrap_or_else(|p| p.into_inner());
        let was = each[i];
        each[i] = ok;
        self.all.store(each.iter().all(|b| *b), Ordering::Release);
        was
    }
}

/// How much of the file's end is read to find where shipping resumes.
const TAIL: u64 = 256 * 1024;

/// The sequence number of the last entry in `path` (0 for a new file): where shipping
/// resumes after a restart. Only the file's tail is read; the whole file only when the
/// tail holds no complete entry line.
fn resume_from(path: &Path) -> Result<i64> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Ok(0);
    };
    let len = file.metadata()?.len();
    let last_in = |text: &str| {
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| v["entry"]["seq"].as_i64())
    };
    let start = len.saturating_sub(TAIL);
    file.seek(std::io::SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)
        .with_context(|| format!("reading {}", path.display()))?;
    if let Some(seq) = last_in(&String::from_utf8_lossy(&tail)) {
        return Ok(seq);
    }
    if start == 0 {
        return Ok(0);
    }
    let whole = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(last_in(&String::from_utf8_lossy(&whole)).unwrap_or(0))
}

/// Where shipping stands between rounds.
struct Progress {
    cursor: Option<i64>,
    since_checkpoint: u64,
    last_checkpoint: Instant,
}

/// An open connection to a sink for one round.
enum Writer {
    File(std::fs::File),
    Udp(tokio::net::UdpSocket),
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixDatagram, PathBuf),
    Webhook(reqwest::Client, String, Option<String>),
}

impl Sink {
    /// Ships what is there now (before the server takes requests: a required sink that
    /// cannot be written keeps writes refused from the first one), then keeps shipping
    /// in the background; `health` learns whether this sink (number `index`) keeps up.
    pub async fn start(self, index: usize, gov: Governance, keys: Keyring, health: Arc<Health>) {
        let mut progress = Progress {
            cursor: None,
            since_checkpoint: 0,
            last_checkpoint: Instant::now(),
        };
        self.round(index, &gov, &keys, &health, &mut progress).await;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL).await;
                self.round(index, &gov, &keys, &health, &mut progress).await;
            }
        });
    }

    async fn round(
        &self,
        index: usize,
        gov: &Governance,
        keys: &Keyring,
        health: &Health,
        p: &mut Progress,
    ) {
        match self.ship(gov, keys, health, p).await {
            Ok(()) => {
                if !health.set(index, true) {
                    tracing::warn!(sink = %self.target.name(), "audit sink writable; writes accepted");
                }
            }
            Err(e) => {
                tracing::error!(sink = %self.target.name(), error = %format!("{e:#}"), "audit sink cannot be written");
                if self.required {
                    health.set(index, false);
                }
                p.cursor = None;
            }
        }
    }

    /// The last sequence number this sink holds or delivered.
    fn resume(&self) -> Result<i64> {
        match &self.target {
            Target::File(path) => resume_from(path),
            _ => match std::fs::read_to_string(&self.cursor_file) {
                Ok(s) => s.trim().parse().with_context(|| {
                    format!(
                        "audit sink cursor {} is not a number",
                        self.cursor_file.display()
                    )
                }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
                Err(e) => Err(e).with_context(|| format!("reading {}", self.cursor_file.display())),
            },
        }
    }

    fn save_cursor(&self, seq: i64) -> Result<()> {
        if matches!(self.target, Target::File(_)) {
            return Ok(());
        }
        let tmp = self.cursor_file.with_extension("tmp");
        if let Some(dir) = self.cursor_file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&tmp, format!("{seq}\n"))?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.cursor_file)
            .with_context(|| format!("writing {}", self.cursor_file.display()))
    }

    async fn open(&self) -> Result<Writer> {
        Ok(match &self.target {
            Target::File(path) => Writer::File(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening audit sink {}", path.display()))?,
            ),
            Target::Syslog(SyslogAddr::Udp(a)) => {
                let bind = if a.starts_with('[') {
                    "[::]:0"
                } else {
                    "0.0.0.0:0"
                };
                let sock = tokio::net::UdpSocket::bind(bind).await?;
                sock.connect(a)
                    .await
                    .with_context(|| format!("syslog {a}"))?;
                Writer::Udp(sock)
            }
            Target::Syslog(SyslogAddr::Tcp(a)) => Writer::Tcp(
                tokio::net::TcpStream::connect(a)
                    .await
                    .with_context(|| format!("syslog {a}"))?,
            ),
            Target::Syslog(SyslogAddr::Unix(p)) => {
                Writer::Unix(tokio::net::UnixDatagram::unbound()?, p.clone())
            }
            Target::Webhook { url, token } => Writer::Webhook(
                reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()?,
                url.clone(),
                token.clone(),
            ),
        })
    }

    async fn ship(
        &self,
        gov: &Governance,
        keys: &Keyring,
        health: &Health,
        p: &mut Progress,
    ) -> Result<()> {
        let from = match p.cursor {
            Some(c) => c,
            None => self.resume()?,
        };
        let mut w = self.open().await?;
        let mut at = from;
        loop {
            let entries = gov
                .query_audit(&AuditFilter {
                    after_seq: Some(at),
                    limit: Some(BATCH),
                    ..AuditFilter::default()
                })
                .await?;
            let Some(last) = entries.last().map(|e| e.seq) else {
                break;
            };
            let items: Vec<Value> = entries.iter().map(|e| json!({ "entry": e })).collect();
            w.deliver(&items).await?;
            at = last;
            p.since_checkpoint += entries.len() as u64;
            self.save_cursor(at)?;
        }
        let due = p.since_checkpoint >= self.checkpoint_every
            || (p.since_checkpoint > 0
                && p.last_checkpoint.elapsed() >= Duration::from_secs(self.checkpoint_secs));
        if due {
            let cp = gov.audit_checkpoint(keys).await?;
            w.deliver(&[json!({ "checkpoint": cp })]).await?;
            health.shipped(&cp);
            p.since_checkpoint = 0;
            p.last_checkpoint = Instant::now();
        }
        w.finish().await?;
        p.cursor = Some(at);
        Ok(())
    }
}

impl Writer {
    async fn deliver(&mut self, items: &[Value]) -> Result<()> {
        match self {
            Writer::File(f) => {
                let mut buf = Vec::new();
                for v in items {
                    serde_json::to_writer(&mut buf, v)?;
                    buf.push(b'\n');
                }
                f.write_all(&buf)?;
            }
            Writer::Udp(sock) => {
                for v in items {
                    sock.send(syslog_message(v).as_bytes()).await?;
                }
            }
            Writer::Tcp(stream) => {
                use tokio::io::AsyncWriteExt;
                let mut buf = String::new();
                for v in items {
                    // RFC 6587 octet counting: the length, a space, the message.
                    let m = syslog_message(v);
                    buf.push_str(&format!("{} {m}", m.len()));
                }
                stream.write_all(buf.as_bytes()).await?;
            }
            Writer::Unix(sock, path) => {
                for v in items {
                    sock.send_to(syslog_message(v).as_bytes(), &*path)
                        .await
                        .with_context(|| format!("syslog {}", path.display()))?;
                }
            }
            Writer::Webhook(client, url, token) => {
                let mut req = client.post(url.as_str()).json(items);
                if let Some(t) = token {
                    req = req.bearer_auth(t);
                }
                let resp = req.send().await.context("audit webhook unreachable")?;
                if !resp.status().is_success() {
                    bail!("audit webhook answered {}", resp.status());
                }
            }
        }
        Ok(())
    }

    async fn finish(self) -> Result<()> {
        match self {
            Writer::File(f) => f.sync_data().context("syncing audit sink")?,
            Writer::Tcp(mut stream) => {
                use tokio::io::AsyncWriteExt;
                stream.flush().await?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// An RFC 5424 message: facility "log audit" (13), severity informational, app `qanat`,
/// message id `audit`; the entry or checkpoint as JSON.
fn syslog_message(v: &Value) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty() && h.is_ascii() && !h.contains(' '))
        .unwrap_or_else(|| "-".into());
    let now = qanat_store::format_micros(qanat_store::now_micros());
    format!(
        "<110>1 {now} {host} qanat {} audit - {v}",
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipping_resumes_after_the_last_complete_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit.jsonl");
        assert_eq!(resume_from(&path).expect("missing file"), 0);
        // More than the tail that is read, then a checkpoint and a torn last line.
        let mut text = String::new();
        for seq in 1..=3000 {
            text.push_str(&format!(
                "{{\"entry\":{{\"seq\":{seq},\"detail\":\"{}\"}}}}\n",
                "x".repeat(100)
            ));
        }
        text.push_str("{\"checkpoint\":{\"seq\":3000}}\n{\"entry\":{\"seq\":30");
        std::fs::write(&path, &text).expect("write");
        assert_eq!(resume_from(&path).expect("resume"), 3000);
        // A tail of one long line with no entry falls back to the whole file.
        text.push_str(&format!("\n{{\"note\":\"{}\"}}\n", "y".repeat(300 * 1024)));
        std::fs::write(&path, &text).expect("write");
        assert_eq!(resume_from(&path).expect("resume"), 3000);
    }
}
