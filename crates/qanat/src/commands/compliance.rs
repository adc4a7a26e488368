//! `qanat compliance report`: the report as a summary, JSON or an HTML page.

use anyhow::{Context, Result};
use qanat_governance::compliance::{ComplianceReport, ReportParams};

use super::Ctx;
use crate::cli::{ComplianceCmd, Format};
use crate::output;

pub async fn run(ctx: &Ctx, cmd: ComplianceCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        ComplianceCmd::Report {
            project,
            since,
            until,
            html,
        } => {
            let params = ReportParams {
                project,
                since,
                until,
                format: None,
            };
            let report = c.compliance_report(&params).await?;
            if let Some(path) = html {
                let page = c.compliance_report_html(&params).await?;
                std::fs::write(&path, page)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote the report to {}", path.display());
            }
            if format == Format::Json {
                return output::json(&report);
            }
            summary(&report);
            Ok(())
        }
    }
}

/// The report's figures, one section a paragraph.
fn summary(r: &ComplianceReport) {
    println!(
        "compliance report for {}, audit period {} to {} (generated {} by {})",
        r.project
            .as_deref()
            .map_or("the whole installation".to_string(), |p| format!(
                "project {p}"
            )),
        r.since,
        r.until,
        r.generated_at,
        r.generated_by
    );
    println!("\nwhere data lives:");
    let mut t = output::table([
        "location",
        "region",
        "project",
        "objects",
        "bytes",
        "region allowed",
    ]);
    for l in &r.locations {
        if l.projects.is_empty() {
            t.add_row(vec![
                l.name.clone(),
                l.region.clone(),
                "-".into(),
                "0".into(),
                output::human(0),
                "-".into(),
            ]);
        }
        for p in &l.projects {
            t.add_row(vec![
                l.name.clone(),
                l.region.clone(),
                p.project.clone(),
                p.objects.to_string(),
                output::human(p.bytes),
                if p.region_allowed { "yes" } else { "NO" }.to_string(),
            ]);
        }
    }
    output::print(t);
    println!("\npersonal data held:");
    let mut t = output::table([
        "project", "kind", "name", "file", "column", "found", "declared",
    ]);
    for h in &r.personal_data {
        for c in &h.columns {
            t.add_row(vec![
                h.project.clone(),
                h.kind.clone(),
                match h.version {
                    Some(v) => format!("{}@{v}", h.name),
                    None => h.name.clone(),
                },
                c.file.clone().unwrap_or_else(|| "-".into()),
                c.column.clone(),
                if c.kinds.is_empty() {
                    "-".into()
                } else {
                    c.kinds.join(", ")
                },
                if c.declared { "yes" } else { "no" }.to_string(),
            ]);
        }
    }
    output::print(t);
    for p in &r.projects {
        let readers: Vec<&str> = p.pii_readers.iter().map(|x| x.user.as_str()).collect();
        println!(
            "project {}: regions {}; inference logs kept {}; old dataset versions kept {}; personal data {}; PII permission: {}",
            p.name,
            p.allowed_regions.join(", "),
            p.inference_log_days
                .map_or_else(|| "until deleted".to_string(), |d| format!("{d} days")),
            p.dataset_version_days
                .map_or_else(|| "until deleted".to_string(), |d| format!("{d} days")),
            if p.require_pii_declared {
                "must be declared"
            } else {
                "flagged when undeclared"
            },
            if readers.is_empty() {
                "global admins only".to_string()
            } else {
                readers.join(", ")
            }
        );
    }
    println!(
        "\nresidency refusals: {}\nreads of personal data in clear and PII permission changes: {}\ngc runs: {} (deleted objects purged after {} days)\nerasures of data subjects: {}\nkey rotations: {} (active key {}, {} held)",
        r.residency_refusals.count,
        r.pii_access.count,
        r.retention.gc_runs.count,
        r.retention.deleted_days,
        r.retention.erasures.len(),
        r.keys.rotations.count,
        r.keys.active_key_id,
        r.keys.key_ids.len()
    );
    let v = &r.audit.verification;
    println!(
        "audit chain: {} ({} entries checked, head {}); checkpoint now: seq {} hash {}",
        if v.ok { "verifies" } else { "DOES NOT VERIFY" },
        v.entries_checked,
        v.head_seq,
        r.audit.checkpoint.seq,
        r.audit.checkpoint.hash
    );
    match &r.audit.last_shipped_checkpoint {
        Some(c) => println!(
            "last checkpoint shipped by the audit sinks: seq {} at {}",
            c.seq, c.time
        ),
        None => println!("no checkpoint shipped by an audit sink since the server started"),
    }
}
