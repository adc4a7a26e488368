//! `qanat audit`: read and follow the log, verify its hash chain (global admins).

use std::time::Duration;

use anyhow::{bail, Context, Result};
use qanat_governance::wire::AuditFilter;
use qanat_governance::{AuditCheckpoint, AuditEntry};

use super::Ctx;
use crate::cli::{AuditCmd, Format};
use crate::output;

pub async fn run(ctx: &Ctx, cmd: AuditCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        AuditCmd::Tail {
            lines,
            follow,
            actor,
            action,
            project,
            outcome,
            since,
        } => {
            let mut filter = AuditFilter {
                actor,
                action,
                project,
                outcome,
                since,
                limit: Some(lines.clamp(1, 1000)),
                ..AuditFilter::default()
            };
            let entries = c.audit(&filter).await?;
            output::list(format, &entries)?;
            if !follow {
                return Ok(());
            }
            filter.after_seq = Some(entries.last().map_or(0, |e| e.seq));
            filter.limit = Some(1000);
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let more = c.audit(&filter).await?;
                if let Some(last) = more.last() {
                    filter.after_seq = Some(last.seq);
                    output::list(format, &more)?;
                }
            }
        }
        AuditCmd::Verify {
            checkpoint: Some(file),
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let checkpoints: Vec<AuditCheckpoint> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter_map(|v| serde_json::from_value(v["checkpoint"].clone()).ok())
                .collect();
            if checkpoints.is_empty() {
                bail!("{} holds no checkpoint", file.display());
            }
            let v = c.verify_checkpoints(&checkpoints).await?;
            if format == Format::Json {
                output::json(&v)?;
            } else if v.ok {
                println!(
                    "audit log consistent with {} checkpoint(s); head at entry {}",
                    v.checkpoints_checked, v.head_seq
                );
            } else {
                println!("AUDIT LOG DOES NOT MATCH ITS CHECKPOINTS:");
                for p in &v.problems {
                    println!("  {p}");
                }
            }
            if !v.ok {
                bail!("the audit log was truncated or rewritten");
            }
            Ok(())
        }
        AuditCmd::Verify { checkpoint: None } => {
            let v = c.verify_audit().await?;
            if format == Format::Json {
                output::json(&v)?;
            } else if v.ok {
                println!("audit chain intact: {} entries verified", v.entries_checked);
            } else {
                println!("AUDIT CHAIN BROKEN:");
                for p in &v.problems {
                    println!("  entry {}: {} — {}", p.seq, p.kind, p.message);
                }
            }
            if !v.ok {
                bail!("the audit log has been tampered with");
            }
            Ok(())
        }
    }
}

output::columns!(AuditEntry, |x| {
    "seq" => x.seq.to_string(),
    "time" => x.time.clone(),
    "actor" => x.actor.clone(),
    "action" => x.action.clone(),
    "outcome" => x.outcome.clone(),
    "resource" => x.resource.clone(),
    "detail" => x.detail.clone(),
});
