//! The audit file sink: every audit entry, shortly after it commits, appended as a JSON
//! line `{"entry": …}` to an append-only file outside the database, with a signed
//! checkpoint `{"checkpoint": …}` every `checkpoint_every` entries or `checkpoint_secs`
//! seconds. `qanat audit verify --checkpoint FILE` checks the chain against it, which
//! catches a truncated log that the chain alone cannot. While a required sink cannot be
//! written, writes through the API are refused (fail closed).

use std::io::{BufRead, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use qanat_governance::wire::AuditFilter;
use qanat_governance::Governance;
use qanat_store::Keyring;

/// How often the sink looks for new entries.
const POLL: Duration = Duration::from_millis(200);

pub struct FileSink {
    pub path: PathBuf,
    pub checkpoint_every: u64,
    pub checkpoint_secs: u64,
    pub required: bool,
}

/// The sequence number of the last entry or checkpoint in `path` (0 for a new file):
/// where shipping resumes after a restart.
fn resume_from(path: &Path) -> Result<i64> {
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(0);
    };
    let mut last = 0;
    for line in std::io::BufReader::new(file).lines() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if let Some(seq) = v["entry"]["seq"].as_i64() {
            last = seq;
        }
    }
    Ok(last)
}

/// Where shipping stands between rounds.
struct Progress {
    cursor: Option<i64>,
    since_checkpoint: u64,
    last_checkpoint: Instant,
}

impl FileSink {
    /// Ships what is there now (before the server takes requests: a required sink that
    /// cannot be written keeps writes refused from the first one), then keeps shipping
    /// in the background; `ok` says whether the sink is keeping up.
    pub async fn start(self, gov: Governance, keys: Keyring, ok: Arc<AtomicBool>) {
        let mut progress = Progress {
            cursor: None,
            since_checkpoint: 0,
            last_checkpoint: Instant::now(),
        };
        self.round(&gov, &keys, &ok, &mut progress).await;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL).await;
                self.round(&gov, &keys, &ok, &mut progress).await;
            }
        });
    }

    async fn round(&self, gov: &Governance, keys: &Keyring, ok: &AtomicBool, p: &mut Progress) {
        let shipped = self
            .ship(
                gov,
                keys,
                &mut p.cursor,
                &mut p.since_checkpoint,
                &mut p.last_checkpoint,
            )
            .await;
        match shipped {
            Ok(()) => {
                if !ok.swap(true, Ordering::AcqRel) {
                    tracing::warn!(path = %self.path.display(), "audit sink writable; writes accepted");
                }
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %format!("{e:#}"), "audit sink cannot be written");
                if self.required {
                    ok.store(false, Ordering::Release);
                }
                p.cursor = None;
            }
        }
    }

    async fn ship(
        &self,
        gov: &Governance,
        keys: &Keyring,
        cursor: &mut Option<i64>,
        since_checkpoint: &mut u64,
        last_checkpoint: &mut Instant,
    ) -> Result<()> {
        let from = match *cursor {
            Some(c) => c,
            None => resume_from(&self.path)?,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening audit sink {}", self.path.display()))?;
        file.seek(std::io::SeekFrom::End(0))?;
        let mut at = from;
        loop {
            let entries = gov
                .query_audit(&AuditFilter {
                    after_seq: Some(at),
                    limit: Some(1000),
                    ..AuditFilter::default()
                })
                .await?;
            if entries.is_empty() {
                break;
            }
            let mut buf = Vec::new();
            for e in &entries {
                serde_json::to_writer(&mut buf, &serde_json::json!({ "entry": e }))?;
                buf.push(b'\n');
            }
            file.write_all(&buf)?;
            at = entries.last().map_or(at, |e| e.seq);
            *since_checkpoint += entries.len() as u64;
        }
        let due = *since_checkpoint >= self.checkpoint_every
            || (*since_checkpoint > 0
                && last_checkpoint.elapsed() >= Duration::from_secs(self.checkpoint_secs));
        if due {
            let cp = gov.audit_checkpoint(keys).await?;
            serde_json::to_writer(&mut file, &serde_json::json!({ "checkpoint": cp }))?;
            file.write_all(b"\n")?;
            *since_checkpoint = 0;
            *last_checkpoint = Instant::now();
        }
        file.sync_data()
            .with_context(|| format!("syncing audit sink {}", self.path.display()))?;
        *cursor = Some(at);
        Ok(())
    }
}
