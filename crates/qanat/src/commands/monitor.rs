//! `qanat monitor compare`: drift between two tables, profiled on this machine.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use qanat_monitor::drift::{Choice, ColumnDrift, DatasetDrift, Method};
use qanat_monitor::report;
use qanat_monitor::table::{self, TableFile, TableProfile};

use crate::cli::{Format, MonitorCmd};
use crate::output;

pub fn run(format: Format, cmd: MonitorCmd) -> Result<()> {
    match cmd {
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
