//! `qanat monitor`: `compare` two tables on this machine, and the monitors that
//! watch deployments on a server (set, ls, status, report, alerts, labels, delete).

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use qanat_model::profile::TableProfile;
use qanat_monitor::drift::{Choice, ColumnDrift, DatasetDrift, Method};
use qanat_monitor::report;
use qanat_monitor::spec::{MonitorSpec, Window};
use qanat_monitor::table::{self, TableFile};
use qanat_monitor::wire::{Alert, Check, Label, Monitor, MonitorStatus, VersionCheck};

use super::Ctx;
use crate::cli::{Format, MonitorCmd};
use crate::output::{self, columns};

/// The monitors on a server.
pub async fn run(ctx: &Ctx, project: &str, cmd: MonitorCmd) -> Result<()> {
    let c = &ctx.client;
    match cmd {
        MonitorCmd::Compare { .. } | MonitorCmd::Profile { .. } => compare(ctx.format, cmd),
        MonitorCmd::Set {
            deployment,
            file,
            window_rows,
            window_seconds,
            min_rows,
        } => {
            let mut spec = match &file {
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    serde_yaml_ng::from_str::<MonitorSpec>(&text)
                        .with_context(|| format!("{} is not a monitor spec", path.display()))?
                }
                None => {
                    if window_rows.is_none() && window_seconds.is_none() {
                        bail!("--window-rows N or --window-seconds N (or -f monitor.yaml): how the inference log is cut into windows");
                    }
                    serde_json::from_value(serde_json::json!({"window": {"rows": 1}}))?
                }
            };
            if window_rows.is_some() || window_seconds.is_some() {
                spec.window = Window {
                    rows: window_rows,
                    seconds: window_seconds,
                };
            }
            if let Some(n) = min_rows {
                spec.min_rows = n;
            }
            let m = c.put_monitor(project, &deployment, &spec).await?;
            if ctx.format == Format::Json {
                return output::json(&m);
            }
            println!(
                "monitoring {deployment}: a window {}, tested from {} rows, {} alert rule(s); the first window starts {}",
                m.spec.window.describe(),
                m.spec.min_rows,
                m.spec.alerts.len(),
                m.next_window
            );
            Ok(())
        }
        MonitorCmd::Ls => output::list(ctx.format, &c.monitors(project).await?.monitors),
        MonitorCmd::Status { deployment } => {
            let s = c.monitor_status(project, &deployment).await?;
            print_status(ctx.format, &s)
        }
        MonitorCmd::Report {
            deployment,
            check,
            html,
        } => {
            let k = c.monitor_check(project, &deployment, check).await?;
            if let Some(path) = &html {
                let page = c
                    .monitor_report(project, &deployment, Some(k.check))
                    .await?;
                std::fs::write(path, &page)
                    .with_context(|| format!("writing the report to {}", path.display()))?;
            }
            if ctx.format == Format::Json {
                return output::json(&k);
            }
            print_check(&k);
            if let Some(path) = &html {
                println!("report: {}", path.display());
            }
            Ok(())
        }
        MonitorCmd::Alerts { deployment, limit } => output::list(
            ctx.format,
            &c.monitor_alerts(project, &deployment, limit).await?.alerts,
        ),
        MonitorCmd::Labels { deployment, file } => {
            let labels = read_labels(&file)?;
            let n = labels.len();
            let stored = c.post_labels(project, &deployment, labels).await?;
            if ctx.format == Format::Json {
                return output::json(&stored);
            }
            println!(
                "{n} labels posted to {deployment}: {} new, {} replacing earlier ones",
                stored.stored, stored.replaced
            );
            Ok(())
        }
        MonitorCmd::Delete { deployment } => {
            c.delete_monitor(project, &deployment).await?;
            println!("deleted the monitor of {deployment}");
            Ok(())
        }
    }
}

/// Labels from a CSV file (`id,value`) or JSON (`[{"id": …, "value": …}]`).
fn read_labels(path: &std::path::Path) -> Result<Vec<Label>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if text.trim_start().starts_with('[') {
        return serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a JSON list of {{\"id\": ..., \"value\": ...}}",
                path.display()
            )
        });
    }
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    if header.trim() != "id,value" {
        bail!(
            "{}: the first line is '{header}'; a labels CSV starts with the header id,value",
            path.display()
        );
    }
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let Some((id, value)) = l.split_once(',') else {
                bail!("{} line {}: give id,value", path.display(), i + 2);
            };
            let value = value.trim();
            // A number stays a number; anything else is a class name.
            let value = value
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .map_or_else(|| serde_json::json!(value), |x| serde_json::json!(x));
            Ok(Label {
                id: id.trim().to_string(),
                value,
            })
        })
        .collect()
}

fn metric(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), report::number)
}

columns!(Monitor, |m| {
    "deployment" => m.deployment.clone(),
    "window" => m.spec.window.describe(),
    "min rows" => m.spec.min_rows.to_string(),
    "alerts" => output::joined(&m.spec.alerts.iter().map(|a| a.name.clone()).collect::<Vec<_>>()),
    "checks" => m.checks.to_string(),
    "next window" => m.next_window.clone(),
});

/// `3: drift 0.40, predictions drifted, accuracy 0.91 (120 labels)`.
fn version_line(v: &VersionCheck) -> String {
    let mut parts = vec![format!("v{} {} rows {}", v.version, v.rows, v.status)];
    if let Some(d) = &v.drift {
        parts.push(format!(
            "drift {}/{} columns ({:.0}%)",
            d.drifted_columns,
            d.columns,
            d.share * 100.0
        ));
    }
    match v.prediction_drift() {
        Some(true) => parts.push("predictions drifted".into()),
        Some(false) => parts.push("predictions steady".into()),
        None => {}
    }
    let q = &v.quality;
    if q.labelled > 0 {
        let mut m = Vec::new();
        if q.accuracy.is_some() {
            m.push(format!("accuracy {}", metric(q.accuracy)));
        }
        if q.auc.is_some() {
            m.push(format!("auc {}", metric(q.auc)));
        }
        if q.rmse.is_some() {
            m.push(format!("rmse {}", metric(q.rmse)));
        }
        parts.push(format!("{} ({} labelled)", m.join(", "), q.labelled));
    }
    if let Some(n) = &v.note {
        parts.push(n.clone());
    }
    parts.join(", ")
}

columns!(Check, |k| {
    "check" => k.check.to_string(),
    "window" => format!("{} → {}", k.window_start, k.window_end),
    "rows" => k.rows.to_string(),
    "status" => k.status.to_string(),
    "versions" => if k.versions.is_empty() {
        "no traffic: not enough data".into()
    } else {
        k.versions.iter().map(version_line).collect::<Vec<_>>().join("\n")
    },
});

columns!(Alert, |a| {
    "alert" => a.alert.to_string(),
    "rule" => a.rule.clone(),
    "condition" => a.condition.clone(),
    "value" => report::number(a.value),
    "version" => a.version.clone(),
    "check" => a.check.to_string(),
    "state" => a.state.clone(),
    "actions" => a.actions.iter().map(|o| format!("{} {}: {}", o.action, o.outcome, o.message)).collect::<Vec<_>>().join("\n"),
});

fn print_status(format: Format, s: &MonitorStatus) -> Result<()> {
    if format == Format::Json {
        return output::json(s);
    }
    let m = &s.monitor;
    println!(
        "monitor of {}: a window {}, tested from {} rows; {} windows checked, the next starts {}",
        m.deployment,
        m.spec.window.describe(),
        m.spec.min_rows,
        m.checks,
        m.next_window
    );
    if s.checks.is_empty() {
        println!("no window has closed yet");
    } else {
        output::list(format, &s.checks)?;
    }
    if !s.alerts.is_empty() {
        output::list(format, &s.alerts)?;
    }
    let l = &s.labels;
    println!(
        "labels: {} posted, {} matched, {} waiting for their window, {} match no logged request{}",
        l.posted,
        l.matched,
        l.pending,
        l.unmatched,
        if l.unmatched_examples.is_empty() {
            String::new()
        } else {
            format!(" (e.g. {})", output::joined(&l.unmatched_examples))
        }
    );
    Ok(())
}

fn print_check(k: &Check) {
    println!(
        "check {} of {}: {} → {}, {} rows, {}",
        k.check, k.deployment, k.window_start, k.window_end, k.rows, k.status
    );
    if k.versions.is_empty() {
        println!("no traffic in this window: not enough data to test");
    }
    for v in &k.versions {
        println!("version {}", version_line(v));
        if let Some(d) = &v.drift {
            let mut t = output::table(<ColumnDrift as output::Row>::HEADERS);
            for c in d.by_column.iter().chain(&v.predictions) {
                t.add_row(output::Row::cells(c));
            }
            output::print(t);
        }
    }
}

/// `qanat monitor compare` and `profile`: tables profiled on this machine.
pub fn compare(format: Format, cmd: MonitorCmd) -> Result<()> {
    match cmd {
        MonitorCmd::Profile { table: path, to } => {
            let file = TableFile::new(&path);
            let profile = table::reference(&file).context("profiling the table")?;
            let tmp = to.with_extension("json.part");
            std::fs::write(&tmp, serde_json::to_vec(&profile)?)
                .and_then(|()| std::fs::rename(&tmp, &to))
                .with_context(|| format!("writing {}", to.display()))?;
            if format == Format::Json {
                println!(
                    "{}",
                    serde_json::json!({"profile": to, "rows": profile.rows, "columns": profile.columns.len()})
                );
            } else {
                println!(
                    "{}: {} rows, {} columns profiled",
                    to.display(),
                    profile.rows,
                    profile.columns.len()
                );
            }
            Ok(())
        }
        MonitorCmd::Compare {
            reference,
            current,
            methods,
            thresholds,
            columns,
            html,
        } => {
            let choices = choices(&methods, &thresholds)?;
            let reference_file = TableFile::new(&reference);
            let current_file = TableFile::new(&current);
            // A reference is a table, or a profile saved as JSON (a trained model's
            // model/reference_profile.json).
            let mut r = if reference
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"))
            {
                let bytes = std::fs::read(&reference)
                    .with_context(|| format!("reading {}", reference.display()))?;
                serde_json::from_slice::<TableProfile>(&bytes).with_context(|| {
                    format!(
                        "{} is not a reference profile (a trained model's model/reference_profile.json)",
                        reference.display()
                    )
                })?
            } else {
                table::reference(&reference_file).context("profiling the reference")?
            };
            if let Some(only) = &columns {
                let unknown: Vec<&String> = only
                    .iter()
                    .filter(|c| !r.columns.iter().any(|(n, _)| n == *c))
                    .collect();
                if !unknown.is_empty() {
                    anyhow::bail!(
                        "--columns names {} that the reference does not have (it has {})",
                        output::joined(&unknown),
                        names(&r)
                    );
                }
                r.columns.retain(|(n, _)| only.contains(n));
            }
            for name in choices.keys() {
                if !r.columns.iter().any(|(n, _)| n == name) {
                    anyhow::bail!(
                        "--method/--threshold name column '{name}', which is not compared (the reference's columns: {})",
                        names(&r)
                    );
                }
            }
            let c = table::current(&current_file, &r).context("profiling the current data")?;
            let drift = table::compare(&r, &c, &choices);
            if let Some(path) = &html {
                let cx = report::Context {
                    title: format!(
                        "Drift of {} from {}",
                        current.display(),
                        reference.display()
                    ),
                    reference: reference.display().to_string(),
                    current: current.display().to_string(),
                    generated_at: chrono::Utc::now()
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                };
                std::fs::write(path, report::html(&drift, &r, &c, &cx))
                    .with_context(|| format!("writing the report to {}", path.display()))?;
            }
            print(format, &drift, r.rows, c.rows)
        }
        _ => bail!("only compare and profile run without a server"),
    }
}

fn names(t: &TableProfile) -> String {
    t.columns
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--method` and `--threshold` as one choice per column.
fn choices(
    methods: &[(String, String)],
    thresholds: &[(String, String)],
) -> Result<BTreeMap<String, Choice>> {
    let mut out: BTreeMap<String, Choice> = BTreeMap::new();
    for (column, m) in methods {
        let method: Method = m
            .parse()
            .map_err(|e| anyhow::anyhow!("--method {column}={m}: {e}"))?;
        out.entry(column.clone()).or_default().method = Some(method);
    }
    for (column, t) in thresholds {
        let x: f64 = t
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| {
                anyhow::anyhow!("--threshold {column}={t}: a threshold is a number from 0")
            })?;
        out.entry(column.clone()).or_default().threshold = Some(x);
    }
    Ok(out)
}

fn number(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), report::number)
}

output::columns!(ColumnDrift, |c| {
    "column" => c.column.clone(),
    "type" => c.kind.clone(),
    "method" => c.method.to_string(),
    "statistic" => number(c.statistic),
    "threshold" => number(Some(c.threshold)),
    "drift" => if c.drifted { "DRIFT".into() } else if c.statistic.is_none() { "-".into() } else { "no".into() },
    "nulls (ref → cur)" => format!(
        "{:.1}% → {:.1}%",
        c.quality.reference_null_rate * 100.0,
        c.quality.current_null_rate * 100.0
    ),
    "note" => c.findings(),
});

fn print(
    format: Format,
    drift: &DatasetDrift,
    reference_rows: u64,
    current_rows: u64,
) -> Result<()> {
    if format == Format::Json {
        return output::json(drift);
    }
    output::list(format, &drift.by_column)?;
    println!(
        "{} of {} columns drifted ({:.0}%; the dataset drifts at {:.0}%): {}. Reference {reference_rows} rows, current {current_rows}.",
        drift.drifted_columns,
        drift.columns,
        drift.share * 100.0,
        drift.threshold * 100.0,
        if drift.drifted { "DATASET DRIFT" } else { "no dataset drift" }
    );
    Ok(())
}
