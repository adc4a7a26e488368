//! The audit file sink: every audit entry, shortly after it commits, appended as a JSON
//! line `{"entry": …}` to an append-only file outside the database, with a signed
//! checkpoint `{"checkpoint": …}` every `checkpoint_every` entries or `checkpoint_secs`
//! seconds. `qanat audit verify --checkpoint FILE` checks the chain against it, which
//! catches a truncated log that the chain alone cannot. While a required sink cannot be
//! written, writes through the API are refused (fail closed).

use std::io::{Read, Seek, Write};
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
