//! Charts drawn on the server as SVG: line charts (metric curves, drift over time,
//! latency) and bar charts (histograms, two distributions side by side). Every
//! label goes through the template's escaping; a chart carries a text title for
//! screen readers, and its legend is HTML beside it.

use maud::{html, Markup};

/// Line colours, told apart by people with the common colour-vision deficiencies
/// (Okabe and Ito's palette), darkened for contrast on white.
const COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#8a6d00", "#56b4e9", "#000000", "#7f3c8d",
];

const W: f64 = 520.0;
const H: f64 = 260.0;
const LEFT: f64 = 62.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 40.0;

/// One line of a chart.
pub(crate) struct Series {
    pub(crate) name: String,
    /// (x, y) by x; non-finite values are left out.
    pub(crate) points: Vec<(f64, f64)>,
}

/// The colour of the `i`th series.
pub(crate) fn colour(i: usize) -> &'static str {
    COLOURS[i % COLOURS.len()]
}

/// About five round values covering [lo, hi].
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| (hi - lo) / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 12 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return None;
    }
    if lo == hi {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.05 };
        return Some((lo - pad, hi + pad));
    }
    Some((lo, hi))
}

/// A line chart of `series` against x, with axes and their labels; `None` when no
/// series has a finite point.
pub(crate) fn lines(title: &str, x_label: &str, series: &[Series]) -> Option<Markup> {
    let (x0, x1) = bounds(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)))?;
    let (y0, y1) = bounds(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)))?;
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let sy = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);
    let label = super::layout::num;
    Some(html! {
        svg viewBox={"0 0 " (W) " " (H)} width=(W) height=(H) role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            rect x=(LEFT) y=(TOP) width=(W - LEFT - RIGHT) height=(H - TOP - BOTTOM) fill="#ffffff" stroke="#d4d9df" {}
            @for t in ticks(y0, y1) {
                line x1=(LEFT) x2=(W - RIGHT) y1=(sy(t)) y2=(sy(t)) stroke="#eceff2" {}
                text x=(LEFT - 6.0) y=(sy(t) + 4.0) text-anchor="end" font-size="11" fill="#4d5660" { (label(t)) }
            }
            @for t in ticks(x0, x1) {
                text x=(sx(t)) y=(H - BOTTOM + 16.0) text-anchor="middle" font-size="11" fill="#4d5660" { (label(t)) }
            }
            text x=((LEFT + W - RIGHT) / 2.0) y=(H - 6.0) text-anchor="middle" font-size="12" fill="#1b1f24" { (x_label) }
            @for (i, s) in series.iter().enumerate() {
                @let pts: Vec<String> = s.points.iter().filter(|(x, y)| x.is_finite() && y.is_finite()).map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y))).collect();
                @if pts.len() == 1 {
                    @let (cx, cy) = pts[0].split_once(',').unwrap_or(("0", "0"));
                    circle cx=(cx) cy=(cy) r="3" fill=(colour(i)) { title { (s.name) } }
                } @else {
                    polyline points=(pts.join(" ")) fill="none" stroke=(colour(i)) stroke-width="1.6" { title { (s.name) } }
                }
            }
        }
    })
}

/// The legend of a chart's series, as a list.
pub(crate) fn legend(names: &[&str]) -> Markup {
    html! {
        ul.legend aria-label="Legend" {
            @for (i, n) in names.iter().enumerate() {
                li {
                    svg width="14" height="10" aria-hidden="true" { rect width="14" height="10" fill=(colour(i)) {} }
                    " " (n)
                }
            }
        }
    }
}

/// A bar chart of `groups` (each a name and one value per label), bars of a label
/// side by side: a histogram, or two distributions compared.
pub(crate) fn bars(title: &str, labels: &[String], groups: &[(&str, &[f64])]) -> Option<Markup> {
    if labels.is_empty() || groups.is_empty() {
        return None;
    }
    let top = groups
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top } else { 1.0 };
    let slot = (W - LEFT - RIGHT) / labels.len() as f64;
    let bar = (slot * 0.8) / groups.len() as f64;
    let sy = |y: f64| H - BOTTOM - y / top * (H - TOP - BOTTOM);
    // At most about 12 labels under the axis.
    let every = labels.len().div_ceil(12).max(1);
    Some(html! {
        svg viewBox={"0 0 " (W) " " (H)} width=(W) height=(H) role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            line x1=(LEFT) x2=(W - RIGHT) y1=(H - BOTTOM) y2=(H - BOTTOM) stroke="#8a939d" {}
            @for t in ticks(0.0, top) {
                line x1=(LEFT) x2=(W - RIGHT) y1=(sy(t)) y2=(sy(t)) stroke="#eceff2" {}
                text x=(LEFT - 6.0) y=(sy(t) + 4.0) text-anchor="end" font-size="11" fill="#4d5660" { (super::layout::num(t)) }
            }
            @for (g, (name, values)) in groups.iter().enumerate() {
                @for (i, v) in values.iter().enumerate().filter(|(_, v)| v.is_finite() && **v > 0.0) {
                    rect x=(format!("{:.1}", LEFT + slot * i as f64 + slot * 0.1 + bar * g as f64)) y=(format!("{:.1}", sy(*v)))
                        width=(format!("{:.1}", bar.max(0.5))) height=(format!("{:.1}", (H - BOTTOM - sy(*v)).max(0.5))) fill=(colour(g)) {
                        title { (name) " " (labels.get(i).map(String::as_str).unwrap_or("")) ": " (super::layout::num(*v)) }
                    }
                }
            }
            @for (i, l) in labels.iter().enumerate().filter(|(i, _)| i % every == 0) {
                @let short: String = l.chars().take(10).collect();
                text x=(format!("{:.1}", LEFT + slot * (i as f64 + 0.5))) y=(H - BOTTOM + 14.0) text-anchor="middle" font-size="10" fill="#4d5660" { (short) }
            }
        }
    })
}

/// A histogram whose bins have the given `edges` (ascending, one more than `masses`)
/// and share of the values `masses`: each bar's area is its share, so bins of unequal
/// width (between quantiles) read true.
pub(crate) fn density(title: &str, edges: &[f64], masses: &[f64]) -> Option<Markup> {
    if edges.len() != masses.len() + 1
        || edges.windows(2).any(|w| {
            w[0].partial_cmp(&w[1])
                .is_none_or(|o| o == std::cmp::Ordering::Greater)
        })
    {
        return None;
    }
    let (x0, x1) = (edges[0], edges[edges.len() - 1]);
    if !(x0.is_finite() && x1.is_finite()) || x1 <= x0 {
        return None;
    }
    let heights: Vec<f64> = edges
        .windows(2)
        .zip(masses)
        .map(|(w, m)| if w[1] > w[0] { m / (w[1] - w[0]) } else { 0.0 })
        .collect();
    let top = heights.iter().copied().fold(0.0f64, f64::max);
    if top <= 0.0 {
        return None;
    }
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let sy = |y: f64| H - BOTTOM - y / top * (H - TOP - BOTTOM);
    Some(html! {
        svg viewBox={"0 0 " (W) " " (H)} width=(W) height=(H) role="img" aria-label=(title) xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            line x1=(LEFT) x2=(W - RIGHT) y1=(H - BOTTOM) y2=(H - BOTTOM) stroke="#8a939d" {}
            @for (w, (h, m)) in edges.windows(2).zip(heights.iter().zip(masses)) {
                @if *h > 0.0 {
                    rect x=(format!("{:.1}", sx(w[0]))) y=(format!("{:.1}", sy(*h))) width=(format!("{:.1}", (sx(w[1]) - sx(w[0])).max(0.8)))
                        height=(format!("{:.1}", H - BOTTOM - sy(*h))) fill=(colour(0)) stroke="#ffffff" stroke-width="0.5" {
                        title { (super::layout::num(w[0])) " to " (super::layout::num(w[1])) ": " (super::layout::num(m * 100.0)) "% of values" }
                    }
                }
            }
            @for t in ticks(x0, x1) {
                text x=(format!("{:.1}", sx(t))) y=(H - BOTTOM + 16.0) text-anchor="middle" font-size="11" fill="#4d5660" { (super::layout::num(t)) }
            }
            text x=(LEFT - 6.0) y=(TOP + 10.0) text-anchor="end" font-size="11" fill="#4d5660" { "density" }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            ticks(0.0, 1.0),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        let t = ticks(3.0, 97.0);
        assert!(t.len() >= 4 && t.len() <= 12, "{t:?}");
        assert!(t.iter().all(|v| (3.0..=97.0).contains(v)));
    }

    #[test]
    fn a_chart_escapes_its_labels_and_skips_what_is_not_finite() {
        let s = Series {
            name: "<script>".into(),
            points: vec![(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0)],
        };
        let svg = lines("loss & <b>", "step", &[s])
            .expect("a chart")
            .into_string();
        assert!(!svg.contains("<script>") && !svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(lines(
            "none",
            "step",
            &[Series {
                name: "x".into(),
                points: vec![(0.0, f64::NAN)]
            }]
        )
        .is_none());
    }

    #[test]
    fn bars_draw_each_group_beside_the_other() {
        let labels: Vec<String> = (0..4).map(|i| i.to_string()).collect();
        let a = [1.0, 2.0, 0.0, 4.0];
        let b = [2.0, 2.0, 2.0, 2.0];
        let svg = bars("h", &labels, &[("reference", &a), ("current", &b)])
            .expect("chart")
            .into_string();
        // Zero-height bars are not drawn.
        assert_eq!(svg.matches("<rect").count(), 3 + 4);
    }
}
