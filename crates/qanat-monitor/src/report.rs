//! The drift report as one self-contained HTML file: the verdict, a table of every
//! column's statistic, and per column its reference and current distributions drawn
//! side by side as SVG. No scripts, no fonts, no links: it opens anywhere, offline,
//! and can be archived beside the JSON.

use std::fmt::Write;

use crate::drift::{ColumnDrift, DatasetDrift};
use crate::profile::TableProfile;
use crate::profile::{CategoricalProfile, ColumnProfile, NumericProfile};

/// Bars per numeric chart (the profile's fine bins grouped), besides the tails.
const BARS: usize = 64;
/// Categories per categorical chart, the most frequent in the reference first; the
/// rest are one bar.
const TOP_CATEGORIES: usize = 20;
const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 150.0;
const REFERENCE_COLOR: &str = "#3b6fb6";
const CURRENT_COLOR: &str = "#e0782f";

/// What the report says about where the data came from.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub title: String,
    pub reference: String,
    pub current: String,
    /// When the check ran, as the reader should see it (RFC 3339).
    pub generated_at: String,
}

/// Text safe inside HTML elements and attributes.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A statistic as the report and the CLI print it: 4 decimals, or scientific
/// notation for the very small and very large, ∞ for infinity.
pub fn number(x: f64) -> String {
    if x.is_infinite() {
        "∞".into()
    } else if x != 0.0 && (x.abs() < 1e-3 || x.abs() >= 1e6) {
        format!("{x:.3e}")
    } else {
        format!("{x:.4}")
    }
}

/// The report for `drift`, with the charts drawn from the two profiles.
pub fn html(
    drift: &DatasetDrift,
    reference: &TableProfile,
    current: &TableProfile,
    cx: &Context,
) -> String {
    let mut columns: Vec<&ColumnDrift> = drift.by_column.iter().collect();
    // Drifted columns first, then those without a verdict, then the rest; by name within.
    columns.sort_by_key(|c| (!c.drifted, c.statistic.is_some(), c.column.clone()));
    let mut out = String::new();
    let verdict = if drift.drifted {
        "Dataset drift detected"
    } else {
        "No dataset drift"
    };
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{title}</title><style>{STYLE}</style></head><body>\n\
<h1>{title}</h1>\n<p class=\"verdict {class}\">{verdict}: {drifted} of {columns} columns drifted \
({share:.0}%; the dataset drifts at {threshold:.0}%).</p>\n\
<p class=\"meta\">Reference: {reference} ({rrows} rows). Current: {current} ({crows} rows). \
Checked {at}.</p>\n",
        title = escape(&cx.title),
        class = if drift.drifted { "drift" } else { "ok" },
        drifted = drift.drifted_columns,
        columns = drift.columns,
        share = drift.share * 100.0,
        threshold = drift.threshold * 100.0,
        reference = escape(&cx.reference),
        current = escape(&cx.current),
        rrows = reference.rows,
        crows = current.rows,
        at = escape(&cx.generated_at),
    );
    out.push_str(
        "<table><thead><tr><th>column</th><th>type</th><th>method</th><th>statistic</th>\
<th>threshold</th><th>drift</th><th>nulls (reference → current)</th><th>notes</th></tr></thead><tbody>\n",
    );
    for c in &columns {
        let _ = writeln!(
            out,
            "<tr class=\"{class}\"><td><a href=\"#c-{id}\">{name}</a></td><td>{kind}</td><td>{method}</td>\
<td>{stat}</td><td>{threshold}</td><td>{verdict}</td><td>{rn:.1}% → {cn:.1}%</td><td>{notes}</td></tr>",
            class = if c.drifted { "drift" } else { "" },
            id = anchor(&c.column),
            name = escape(&c.column),
            kind = c.kind,
            method = c.method,
            stat = c.statistic.map_or("–".into(), number),
            threshold = number(c.threshold),
            verdict = if c.drifted {
                "drift"
            } else if c.statistic.is_none() {
                "–"
            } else {
                "no"
            },
            rn = c.quality.reference_null_rate * 100.0,
            cn = c.quality.current_null_rate * 100.0,
            notes = escape(&c.findings()),
        );
    }
    out.push_str("</tbody></table>\n");
    let _ = writeln!(
        out,
        "<p class=\"legend\"><span style=\"background:{REFERENCE_COLOR}\"></span> reference \
<span style=\"background:{CURRENT_COLOR}\"></span> current (share of each side's rows)</p>"
    );
    let find = |t: &TableProfile, name: &str| {
        t.columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
    };
    for c in &columns {
        let _ = writeln!(
            out,
            "<section id=\"c-{id}\"><h2>{name} <small>{method}: {stat}{drift}</small></h2>",
            id = anchor(&c.column),
            name = escape(&c.column),
            method = c.method,
            stat = c.statistic.map_or("no statistic".into(), number),
            drift = if c.drifted { " — drift" } else { "" },
        );
        match (find(reference, &c.column), find(current, &c.column)) {
            (Some(ColumnProfile::Numeric(r)), Some(ColumnProfile::Numeric(cur))) => {
                out.push_str(&numeric_chart(&r, &cur));
            }
            (Some(ColumnProfile::Categorical(r)), Some(ColumnProfile::Categorical(cur))) => {
                out.push_str(&categorical_chart(&r, &cur));
            }
            _ => {}
        }
        let n = c.findings();
        if !n.is_empty() {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(&n));
        }
        out.push_str("</section>\n");
    }
    out.push_str("</body></html>\n");
    out
}

/// An element id for a column name: its bytes in hex, so any name is a valid id.
fn anchor(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Bars of two distributions over the same labels, each side's shares. Every bar is
/// labelled when `every_label` (categories), else the first and last (bins).
fn bars(labels: &[String], reference: &[f64], current: &[f64], every_label: bool) -> String {
    let n = labels.len().max(1);
    let top = reference
        .iter()
        .chain(current)
        .copied()
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let slot = WIDTH / n as f64;
    let bar = (slot / 2.0 - 0.5).max(0.5);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {h}\" width=\"{WIDTH}\" height=\"{h}\" role=\"img\">\
<line x1=\"0\" y1=\"{HEIGHT}\" x2=\"{WIDTH}\" y2=\"{HEIGHT}\" stroke=\"#999\"/>",
        h = HEIGHT + 18.0
    );
    for (i, label) in labels.iter().enumerate() {
        let x = slot * i as f64;
        for (k, (share, color)) in [(reference[i], REFERENCE_COLOR), (current[i], CURRENT_COLOR)]
            .into_iter()
            .enumerate()
        {
            let h = HEIGHT * share / top;
            let _ = write!(
                svg,
                "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{bar:.2}\" height=\"{h:.2}\" fill=\"{color}\">\
<title>{label}: {pct:.2}%</title></rect>",
                x = x + k as f64 * (bar + 0.5),
                y = HEIGHT - h,
                label = escape(label),
                pct = share * 100.0,
            );
        }
    }
    if every_label {
        for (i, label) in labels.iter().enumerate() {
            let short: String = label.chars().take(12).collect();
            let _ = write!(
                svg,
                "<text x=\"{x:.2}\" y=\"{y}\" font-size=\"11\" text-anchor=\"middle\">{t}</text>",
                x = slot * (i as f64 + 0.5),
                y = HEIGHT + 14.0,
                t = escape(&short),
            );
        }
    } else if let (Some(first), Some(last)) = (labels.first(), labels.last()) {
        // The first and last labels under the axis.
        let _ = write!(
            svg,
            "<text x=\"0\" y=\"{y}\" font-size=\"11\">{a}</text>\
<text x=\"{WIDTH}\" y=\"{y}\" font-size=\"11\" text-anchor=\"end\">{b}</text>",
            y = HEIGHT + 14.0,
            a = escape(first),
            b = escape(last),
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn shares(counts: &[u64]) -> Vec<f64> {
    let total = counts.iter().sum::<u64>().max(1) as f64;
    counts.iter().map(|&c| c as f64 / total).collect()
}

fn numeric_chart(r: &NumericProfile, c: &NumericProfile) -> String {
    if r.bins != c.bins || r.counts.is_empty() {
        return String::new();
    }
    let per = r.counts.len().div_ceil(BARS);
    let mut labels = Vec::new();
    let (mut rc, mut cc) = (Vec::new(), Vec::new());
    if r.below.count + c.below.count > 0 {
        labels.push(format!("below {}", number(r.bins.lo)));
        rc.push(r.below.count);
        cc.push(c.below.count);
    }
    for start in (0..r.counts.len()).step_by(per) {
        let end = (start + per).min(r.counts.len());
        labels.push(format!(
            "{} to {}",
            number(r.bins.edge(start)),
            number(r.bins.edge(end))
        ));
        rc.push(r.counts[start..end].iter().sum());
        cc.push(c.counts[start..end].iter().sum());
    }
    if r.above.count + c.above.count > 0 {
        labels.push(format!("above {}", number(r.bins.hi)));
        rc.push(r.above.count);
        cc.push(c.above.count);
    }
    bars(&labels, &shares(&rc), &shares(&cc), false)
}

fn categorical_chart(r: &CategoricalProfile, c: &CategoricalProfile) -> String {
    // The reference's most frequent first; categories it never had after, by their
    // current count.
    let mut names: Vec<(&String, u64, u64)> = r
        .categories
        .iter()
        .map(|(k, v)| (k, *v, c.categories.get(k).copied().unwrap_or(0)))
        .chain(
            c.categories
                .iter()
                .filter(|(k, _)| !r.categories.contains_key(*k))
                .map(|(k, v)| (k, 0, *v)),
        )
        .collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then_with(|| a.0.cmp(b.0)));
    let shown: Vec<&String> = names
        .iter()
        .take(TOP_CATEGORIES)
        .map(|(k, _, _)| *k)
        .collect();
    let mut labels: Vec<String> = shown.iter().map(|k| (*k).clone()).collect();
    let mut rc: Vec<u64> = shown
        .iter()
        .map(|k| r.categories.get(*k).copied().unwrap_or(0))
        .collect();
    let mut cc: Vec<u64> = shown
        .iter()
        .map(|k| c.categories.get(*k).copied().unwrap_or(0))
        .collect();
    let rest_r = r.count - rc.iter().sum::<u64>();
    let rest_c = c.count - cc.iter().sum::<u64>();
    if rest_r + rest_c > 0 {
        labels.push("(others)".into());
        rc.push(rest_r);
        cc.push(rest_c);
    }
    bars(&labels, &shares(&rc), &shares(&cc), true)
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}\
h1{font-size:1.5em}h2{font-size:1.1em;margin-top:2em}h2 small{font-weight:normal;color:#555}\
.verdict{font-size:1.15em;padding:.5em .8em;border-radius:4px}.verdict.drift{background:#fde2e1}\
.verdict.ok{background:#e3f4e1}.meta,.note{color:#555}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #ddd;font-size:.9em}\
tr.drift td{background:#fff3f2}.legend span{display:inline-block;width:.9em;height:.9em;\
margin:0 .3em 0 1em;vertical-align:middle}svg{display:block;margin:.5em 0}";

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::profile::NumericProfile;

    #[test]
    fn the_report_is_one_self_contained_page_with_a_chart_per_column() {
        let values: Vec<Option<f64>> = (0..2000).map(|i| Some(f64::from(i % 100))).collect();
        let r = NumericProfile::reference(&values);
        let mut c = NumericProfile::new(r.bins);
        for i in 0..2000 {
            c.add(Some(f64::from(i % 100) + 30.0));
        }
        let mut rk = CategoricalProfile::default();
        let mut ck = CategoricalProfile::default();
        for i in 0..2000 {
            rk.add(Some(["a", "b"][i % 2]));
            ck.add(Some(["a", "<b>"][i % 2]));
        }
        let reference = TableProfile::of(
            2000,
            vec![
                ("x".into(), ColumnProfile::Numeric(r.clone())),
                ("k".into(), ColumnProfile::Categorical(rk.clone())),
            ],
        );
        let current = TableProfile::of(
            2000,
            vec![
                ("x".into(), ColumnProfile::Numeric(c.clone())),
                ("k".into(), ColumnProfile::Categorical(ck.clone())),
            ],
        );
        let drift = crate::table::compare(&reference, &current, &BTreeMap::new());
        let page = html(
            &drift,
            &reference,
            &current,
            &Context {
                title: "Drift <check>".into(),
                reference: "train.csv".into(),
                current: "today.csv".into(),
                generated_at: "2026-11-26T12:00:00Z".into(),
            },
        );
        assert!(page.starts_with("<!doctype html>"));
        assert!(page.contains("Dataset drift detected"));
        assert_eq!(page.matches("<svg").count(), 2);
        // Names are escaped, and nothing is fetched from elsewhere.
        assert!(page.contains("Drift &lt;check&gt;") && page.contains("&lt;b&gt;"));
        assert!(!page.contains("<b>") && !page.contains("<script") && !page.contains("http"));
    }
}
