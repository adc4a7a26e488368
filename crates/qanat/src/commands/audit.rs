//! `qanat audit`: read and verify the audit chain.

use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::Value;

use crate::cli::audit::AuditCmd;
use crate::cli::Format;
use crate::client::{seg, Client};
use crate::output;

pub(super) async fn audit(c: &Client, fmt: Format, cmd: AuditCmd) -> Result<()> {
    let cols = [
        ("seq", "seq"),
        ("time", "time"),
        ("actor", "actor"),
        ("action", "action"),
        ("outcome", "outcome"),
        ("resource", "resource"),
        ("detail", "detail"),
    ];
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
            let mut filters = vec![format!("limit={}", lines.clamp(1, 1000))];
            for (k, v) in [
                ("actor", actor),
                ("action", action),
                ("project", project),
                ("outcome", outcome),
                ("since", since),
            ] {
                if let Some(v) = v {
                    filters.push(format!("{k}={}", seg(&v)));
                }
            }
            let entries: Value = c
                .get(&format!("/api/v1/audit?{}", filters.join("&")))
                .await?;
            output::list(fmt, &entries, &cols);
            if !follow {
                return Ok(());
            }
            let mut last = entries
                .as_array()
                .and_then(|a| a.last())
                .and_then(|e| e["seq"].as_i64())
                .unwrap_or(0);
            filters[0] = "limit=1000".into();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let more: Value = c
                    .get(&format!(
                        "/api/v1/audit?{}&after_seq={last}",
                        filters.join("&")
                    ))
                    .await?;
                if let Some(a) = more.as_array().filter(|a| !a.is_empty()) {
                    last = a.last().and_then(|e| e["seq"].as_i64()).unwrap_or(last);
                    output::list(fmt, &more, &cols);
                }
            }
        }
        AuditCmd::Verify => {
            let v = c.verify_audit().await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&v)?);
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
        }
    }
    Ok(())
}
