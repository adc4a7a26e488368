//! Audit checkpoints: the head of the chain (sequence number and hash), MAC'd with a key
//! derived from the master key and written outside the database (to the audit sinks).
//! The chain alone cannot show that its newest entries were deleted and the head
//! rewritten; a checkpoint kept elsewhere can: [`Governance::verify_checkpoints`] finds
//! every entry a checkpoint vouches for, with the hash it had.

use qanat_store::Keyring;
use sqlx::Row;

use crate::{AuditCheckpoint, CheckpointVerification};
use crate::{Governance, Result};

const PURPOSE: &str = "audit-checkpoint";

fn message(seq: i64, hash: &str, time: &str) -> Vec<u8> {
    format!("qanat-audit-checkpoint\n{seq}\n{hash}\n{time}").into_bytes()
}

impl Governance {
    /// A signed checkpoint of the chain's current head.
    #[qanat_macros::boxed]
    pub async fn audit_checkpoint(&self, keys: &Keyring) -> Result<AuditCheckpoint> {
        let head = sqlx::query("SELECT seq, hash FROM audit_head WHERE id = 1")
            .fetch_one(self.meta.reader())
            .await?;
        let (seq, hash): (i64, String) = (head.try_get("seq")?, head.try_get("hash")?);
        let time = qanat_store::format_micros(qanat_store::now_micros());
        let (key_id, mac) = keys.mac(PURPOSE, &message(seq, &hash, &time));
        Ok(AuditCheckpoint {
            seq,
            hash,
            time,
            key_id,
            mac,
        })
    }

    /// Checks each checkpoint's MAC, then that the chain still holds the entry it
    /// vouches for with the same hash: a log truncated or rewritten below any
    /// checkpoint is reported.
    #[qanat_macros::boxed]
    pub async fn verify_checkpoints(
        &self,
        keys: &Keyring,
        checkpoints: &[AuditCheckpoint],
    ) -> Result<CheckpointVerification> {
        let head: i64 = sqlx::query("SELECT seq FROM audit_head WHERE id = 1")
            .fetch_one(self.meta.reader())
            .await?
            .try_get("seq")?;
        let mut problems = Vec::new();
        for cp in checkpoints {
            let n = cp.seq;
            match keys.verify_mac(&cp.key_id, PURPOSE, &message(n, &cp.hash, &cp.time), &cp.mac) {
                Some(true) => {}
                Some(false) => {
                    problems.push(format!("checkpoint at entry {n} ({}) does not carry this installation's MAC: it was forged or altered", cp.time));
                    continue;
                }
                None => problems.push(format!(
                    "checkpoint at entry {n} was signed with master key {}, which is no longer in the keyring; its MAC is not checked",
                    cp.key_id
                )),
            }
            if n == 0 {
                continue;
            }
            if n > head {
                problems.push(format!("truncated: the chain ends at entry {head}, but a checkpoint of {} vouches for entry {n}", cp.time));
                continue;
            }
            let row = sqlx::query("SELECT hash FROM audit_log WHERE seq = $1")
                .bind(n)
                .fetch_optional(self.meta.reader())
                .await?;
            match row {
                None => problems.push(format!(
                    "entry {n}, vouched for by the checkpoint of {}, is missing",
                    cp.time
                )),
                Some(r) if r.try_get::<String, _>("hash")? != cp.hash => problems.push(format!(
                    "entry {n} differs from the checkpoint of {}: the chain was rewritten from there",
                    cp.time
                )),
                Some(_) => {}
            }
        }
        Ok(CheckpointVerification {
            ok: problems.is_empty(),
            checkpoints_checked: checkpoints.len(),
            head_seq: head,
            problems,
        })
    }
}
