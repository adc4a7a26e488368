//! Drift between a reference profile and a current one, column by column, and whether
//! the dataset as a whole drifted.
//!
//! Each column gets a method by its type and the reference's size, as Evidently
//! chooses (so its users read the same verdicts), unless the caller names one:
//!
//! | column | reference ≤ 1,000 rows | reference > 1,000 rows |
//! |---|---|---|
//! | numeric, > 5 distinct values | KS (p < 0.05) | Wasserstein / reference std (≥ 0.1) |
//! | numeric, ≤ 5 distinct values | chi-squared, or z with ≤ 2 (p < 0.05) | Jensen–Shannon (≥ 0.1) |
//! | categorical | chi-squared, or z with ≤ 2 categories on both sides (p < 0.05) | Jensen–Shannon (≥ 0.1) |
//!
//! The dataset drifted when the share of drifted columns reaches 0.5.
//!
//! Where both sides kept their exact values (up to [`EXACT_VALUES`]) KS and
//! Wasserstein are exact; past that they come from the histograms on the reference's
//! bins: KS's distance at the bin edges, Wasserstein with each bin's values spread
//! evenly across it, and the values outside the reference's range exactly (their
//! count and sum suffice). `exact` says which.
//!
//! [`EXACT_VALUES`]: crate::profile::EXACT_VALUES

pub use qanat_types::monitor::drift::*;

use std::collections::BTreeMap;

use crate::profile::{CategoricalProfile, ColumnProfile, NumericProfile};
use crate::stats::{self, TestResult};

/// Every column's verdict and the dataset's. `columns` pairs each column's name with
/// its reference and current profiles (the current one on the reference's bins).
pub fn dataset(
    columns: &[(String, ColumnProfile, ColumnProfile)],
    choices: &BTreeMap<String, Choice>,
) -> DatasetDrift {
    let by_column: Vec<ColumnDrift> = columns
        .iter()
        .map(|(name, r, c)| column(name, r, c, choices.get(name).copied().unwrap_or_default()))
        .collect();
    let compared = by_column.iter().filter(|c| c.statistic.is_some()).count();
    let drifted = by_column.iter().filter(|c| c.drifted).count();
    let share = if compared == 0 {
        0.0
    } else {
        drifted as f64 / compared as f64
    };
    DatasetDrift {
        columns: compared,
        drifted_columns: drifted,
        share,
        threshold: DATASET_SHARE,
        drifted: compared > 0 && share >= DATASET_SHARE,
        by_column,
    }
}

/// The verdict on a column the current data lacks: no statistic, no drift, and a
/// note saying so (a missing feature is a data-quality finding).
pub fn missing(name: &str, reference: &ColumnProfile, current_rows: u64) -> ColumnDrift {
    let (kind, method) = match reference {
        ColumnProfile::Numeric(_) => ("numeric", Method::Ks),
        ColumnProfile::Categorical(_) => ("categorical", Method::ChiSquared),
    };
    ColumnDrift {
        column: name.to_string(),
        kind: kind.into(),
        method,
        statistic: None,
        test_statistic: None,
        threshold: method.default_threshold(),
        drifted: false,
        exact: false,
        reference_rows: reference.rows(),
        current_rows,
        quality: Quality {
            reference_null_rate: reference.null_rate(),
            current_null_rate: 1.0,
            ..Quality::default()
        },
        note: Some(format!("column '{name}' is missing from the current data")),
    }
}

/// One column's verdict.
pub fn column(
    name: &str,
    reference: &ColumnProfile,
    current: &ColumnProfile,
    choice: Choice,
) -> ColumnDrift {
    let quality = quality(reference, current);
    let (kind, method, outcome) = match (reference, current) {
        (ColumnProfile::Numeric(r), ColumnProfile::Numeric(c)) => {
            let method = choice.method.unwrap_or_else(|| default_numeric(r, c));
            ("numeric", method, numeric(r, c, method))
        }
        (ColumnProfile::Categorical(r), ColumnProfile::Categorical(c)) => {
            let method = choice.method.unwrap_or_else(|| default_categorical(r, c));
            ("categorical", method, categorical(r, c, method))
        }
        (r, _) => {
            let kind = if matches!(r, ColumnProfile::Numeric(_)) {
                "numeric"
            } else {
                "categorical"
            };
            (
                kind,
                choice.method.unwrap_or(Method::ChiSquared),
                Err(format!(
                    "column '{name}' is {kind} in the reference but not in the current data"
                )),
            )
        }
    };
    let threshold = choice.threshold.unwrap_or(method.default_threshold());
    let mut out = ColumnDrift {
        column: name.to_string(),
        kind: kind.into(),
        method,
        statistic: None,
        test_statistic: None,
        threshold,
        drifted: false,
        exact: false,
        reference_rows: reference.rows(),
        current_rows: current.rows(),
        quality,
        note: None,
    };
    match outcome {
        Ok(o) => {
            out.statistic = Some(o.value);
            out.test_statistic = o.test_statistic;
            out.exact = o.exact;
            out.drifted = if method.is_test() {
                o.value < threshold
            } else {
                o.value >= threshold
            };
        }
        Err(note) => out.note = Some(note),
    }
    out
}

struct Outcome {
    value: f64,
    test_statistic: Option<f64>,
    exact: bool,
}

impl Outcome {
    fn test(t: TestResult, exact: bool) -> Outcome {
        Outcome {
            value: t.p_value,
            test_statistic: Some(t.statistic),
            exact,
        }
    }

    fn distance(value: f64, exact: bool) -> Outcome {
        Outcome {
            value,
            test_statistic: None,
            exact,
        }
    }
}

fn default_numeric(r: &NumericProfile, c: &NumericProfile) -> Method {
    if r.count <= SMALL_REFERENCE {
        match r.distinct.as_ref().map(Vec::len) {
            Some(n) if n <= 2 => Method::Z,
            Some(n) if n <= FEW_VALUES => Method::ChiSquared,
            _ => Method::Ks,
        }
    } else {
        match union_counts(r, c) {
            Some((keys, _, _)) if keys.len() <= FEW_VALUES => Method::JensenShannon,
            _ => Method::Wasserstein,
        }
    }
}

fn default_categorical(r: &CategoricalProfile, c: &CategoricalProfile) -> Method {
    if r.count <= SMALL_REFERENCE {
        // The z-test compares two categories: with a third in the current data (one
        // the reference never had), chi-squared.
        let union = r.categories.len()
            + c.categories
                .keys()
                .filter(|k| !r.categories.contains_key(*k))
                .count()
            + usize::from(r.other + c.other > 0);
        if union <= 2 {
            Method::Z
        } else {
            Method::ChiSquared
        }
    } else {
        Method::JensenShannon
    }
}

fn not_enough(r: u64, c: u64) -> Result<(), String> {
    match (r, c) {
        (0, _) => Err("not enough data: the reference has no values in this column".into()),
        (_, 0) => Err("not enough data: the current data has no values in this column".into()),
        _ => Ok(()),
    }
}

fn numeric(r: &NumericProfile, c: &NumericProfile, method: Method) -> Result<Outcome, String> {
    not_enough(r.count, c.count)?;
    if r.bins != c.bins {
        return Err("the current profile was not made on the reference's bins".into());
    }
    let exact = match (&r.values, &c.values) {
        (Some(a), Some(b)) => {
            let mut a = a.clone();
            let mut b = b.clone();
            a.sort_unstable_by(f64::total_cmp);
            b.sort_unstable_by(f64::total_cmp);
            Some((a, b))
        }
        _ => None,
    };
    match method {
        Method::Ks => Ok(match exact {
            Some((a, b)) => Outcome::test(stats::ks_sorted(&a, &b), true),
            None => Outcome::test(ks_from_histograms(r, c), false),
        }),
        Method::Wasserstein => {
            let (w, is_exact) = match exact {
                Some((a, b)) => (stats::wasserstein_sorted(&a, &b), true),
                None => (wasserstein_from_histograms(r, c), false),
            };
            // Evidently's normalization, with its floor for a constant reference.
            Ok(Outcome::distance(w / r.std().max(0.001), is_exact))
        }
        Method::ChiSquared | Method::Z | Method::JensenShannon | Method::Psi => {
            let (keys, rc, cc) = match union_counts(r, c) {
                Some(u) => u,
                None => coarse_bins(r, c),
            };
            shares_outcome(method, &keys, &rc, &cc)
        }
    }
}

fn categorical(
    r: &CategoricalProfile,
    c: &CategoricalProfile,
    method: Method,
) -> Result<Outcome, String> {
    not_enough(r.count, c.count)?;
    let mut keys: Vec<String> = r.categories.keys().cloned().collect();
    for k in c.categories.keys() {
        if !r.categories.contains_key(k) {
            keys.push(k.clone());
        }
    }
    keys.sort();
    let mut rc: Vec<u64> = keys
        .iter()
        .map(|k| r.categories.get(k).copied().unwrap_or(0))
        .collect();
    let mut cc: Vec<u64> = keys
        .iter()
        .map(|k| c.categories.get(k).copied().unwrap_or(0))
        .collect();
    if r.other > 0 || c.other > 0 {
        keys.push("(other)".into());
        rc.push(r.other);
        cc.push(c.other);
    }
    match method {
        Method::Ks | Method::Wasserstein => Err(format!(
            "{method} compares numbers; this column is categorical (use chisquare, z, jensenshannon or psi)"
        )),
        _ => shares_outcome(method, &keys, &rc, &cc),
    }
}

/// Chi-squared, z, Jensen–Shannon or PSI over counts per key.
fn shares_outcome(
    method: Method,
    keys: &[String],
    rc: &[u64],
    cc: &[u64],
) -> Result<Outcome, String> {
    let (nr, nc) = (rc.iter().sum::<u64>(), cc.iter().sum::<u64>());
    match method {
        Method::ChiSquared => stats::chi_squared_counts(rc, cc)
            .map(|t| Outcome::test(t, true))
            .ok_or_else(|| "not enough data: chi-squared needs two categories".into()),
        Method::Z => {
            // The first key the reference has: for two categories either gives the
            // same p-value.
            let i = rc.iter().position(|&n| n > 0).unwrap_or(0);
            if keys.len() > 2 {
                return Err(format!(
                    "the z-test compares two categories; this column has {} (use chisquare)",
                    keys.len()
                ));
            }
            stats::proportions_z(rc[i], nr, cc[i], nc)
                .map(|t| Outcome::test(t, true))
                .ok_or_else(|| "not enough data".into())
        }
        Method::JensenShannon => {
            let p: Vec<f64> = rc.iter().map(|&n| n as f64).collect();
            let q: Vec<f64> = cc.iter().map(|&n| n as f64).collect();
            stats::jensen_shannon(&p, &q)
                .map(|d| Outcome::distance(d, true))
                .ok_or_else(|| "not enough data".into())
        }
        Method::Psi => {
            let mut p: Vec<f64> = rc.iter().map(|&n| n as f64 / nr as f64).collect();
            let mut q: Vec<f64> = cc.iter().map(|&n| n as f64 / nc as f64).collect();
            stats::fill_empty_shares(&mut p);
            stats::fill_empty_shares(&mut q);
            stats::psi(&p, &q)
                .map(|d| Outcome::distance(d, true))
                .ok_or_else(|| "not enough data".into())
        }
        Method::Ks | Method::Wasserstein => Err(format!("{method} needs numbers")),
    }
}

/// The distinct values of both sides and their counts, when both kept them.
fn union_counts(
    r: &NumericProfile,
    c: &NumericProfile,
) -> Option<(Vec<String>, Vec<u64>, Vec<u64>)> {
    let (rd, cd) = (r.distinct.as_ref()?, c.distinct.as_ref()?);
    let mut values: Vec<f64> = rd.iter().chain(cd).map(|(v, _)| *v).collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    let count = |d: &[(f64, u64)], v: f64| d.iter().find(|(x, _)| *x == v).map_or(0, |(_, n)| *n);
    Some((
        values.iter().map(|v| v.to_string()).collect(),
        values.iter().map(|&v| count(rd, v)).collect(),
        values.iter().map(|&v| count(cd, v)).collect(),
    ))
}

/// The fine bins regrouped into Sturges' number of equal bins over the reference's
/// range (⌈log₂ n⌉ + 1 for both sides' n values), with the two tails as bins of
/// their own when either side has values there.
fn coarse_bins(r: &NumericProfile, c: &NumericProfile) -> (Vec<String>, Vec<u64>, Vec<u64>) {
    let n = (r.count + c.count).max(1) as f64;
    let groups = ((n.log2().ceil() as usize) + 1).clamp(1, r.bins.count);
    let per = r.bins.count.div_ceil(groups);
    let mut keys = Vec::new();
    let (mut rc, mut cc) = (Vec::new(), Vec::new());
    if r.below.count + c.below.count > 0 {
        keys.push(format!("< {}", r.bins.lo));
        rc.push(r.below.count);
        cc.push(c.below.count);
    }
    for start in (0..r.bins.count).step_by(per) {
        let end = (start + per).min(r.bins.count);
        keys.push(format!("[{}, {})", r.bins.edge(start), r.bins.edge(end)));
        rc.push(r.counts[start..end].iter().sum());
        cc.push(c.counts[start..end].iter().sum());
    }
    if r.above.count + c.above.count > 0 {
        keys.push(format!("> {}", r.bins.hi));
        rc.push(r.above.count);
        cc.push(c.above.count);
    }
    (keys, rc, cc)
}

/// KS from the histograms: the largest gap between the two distribution functions at
/// the bin edges (at most the true one), with the p-value for that gap.
fn ks_from_histograms(r: &NumericProfile, c: &NumericProfile) -> TestResult {
    let (fr, fc) = (r.cdf_at_edges(), c.cdf_at_edges());
    let below = |p: &NumericProfile| p.below.count as f64 / p.count.max(1) as f64;
    let mut d = (below(r) - below(c)).abs();
    for (a, b) in fr.iter().zip(&fc) {
        d = d.max((a - b).abs());
    }
    stats::ks_p_for(r.count as usize, c.count as usize, d)
}

/// Wasserstein from the histograms. Inside the reference's range each bin's values
/// are taken as spread evenly across it, so both distribution functions are linear
/// within a bin and |F_r − F_c| integrates exactly there; outside it, a tail's
/// integral needs only its count and sum.
fn wasserstein_from_histograms(r: &NumericProfile, c: &NumericProfile) -> f64 {
    let (nr, nc) = (r.count.max(1) as f64, c.count.max(1) as f64);
    let (lo, hi) = (r.bins.lo, r.bins.hi);
    // Below lo: ∫ F(x) dx over (−∞, lo) is Σ (lo − x)/n over the values below.
    let left = |p: &NumericProfile, n: f64| (p.below.count as f64 * lo - p.below.sum) / n;
    let right = |p: &NumericProfile, n: f64| (p.above.sum - p.above.count as f64 * hi) / n;
    let mut total = (left(r, nr) - left(c, nc)).abs() + (right(r, nr) - right(c, nc)).abs();
    let width = if r.bins.count > 0 {
        (hi - lo) / r.bins.count as f64
    } else {
        0.0
    };
    let (mut a0, mut b0) = (r.below.count as f64 / nr, c.below.count as f64 / nc);
    for (ra, ca) in r.counts.iter().zip(&c.counts) {
        let (a1, b1) = (a0 + *ra as f64 / nr, b0 + *ca as f64 / nc);
        total += width * linear_abs_area(a0 - b0, a1 - b1);
        a0 = a1;
        b0 = b1;
    }
    total
}

/// ∫₀¹ |g(t)| dt for g linear from `g0` to `g1`.
fn linear_abs_area(g0: f64, g1: f64) -> f64 {
    if (g0 >= 0.0) == (g1 >= 0.0) {
        (g0 + g1).abs() / 2.0
    } else {
        // The line crosses zero at t = g0 / (g0 − g1): two triangles.
        (g0 * g0 + g1 * g1) / (2.0 * (g0.abs() + g1.abs()))
    }
}

fn quality(reference: &ColumnProfile, current: &ColumnProfile) -> Quality {
    let mut q = Quality {
        reference_null_rate: reference.null_rate(),
        current_null_rate: current.null_rate(),
        ..Quality::default()
    };
    match (reference, current) {
        (ColumnProfile::Numeric(r), ColumnProfile::Numeric(c)) if c.count > 0 && r.count > 0 => {
            // Outside [min, max] of the reference: on its bins, exactly the tails.
            let outside = if r.bins.lo == r.min && r.bins.hi == r.max {
                c.below.count + c.above.count
            } else {
                c.values
                    .as_ref()
                    .map_or(c.below.count + c.above.count, |v| {
                        v.iter().filter(|x| **x < r.min || **x > r.max).count() as u64
                    })
            };
            q.out_of_range = Some(outside as f64 / c.count as f64);
        }
        (ColumnProfile::Categorical(r), ColumnProfile::Categorical(c)) if c.count > 0 => {
            let unseen: Vec<(&String, &u64)> = c
                .categories
                .iter()
                .filter(|(k, _)| !r.categories.contains_key(*k))
                .collect();
            let rows: u64 = unseen.iter().map(|(_, n)| **n).sum();
            q.unseen_share = Some(rows as f64 / c.count as f64);
            q.unseen = unseen.iter().take(10).map(|(k, _)| (*k).clone()).collect();
        }
        _ => {}
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Bins, NumericProfile};

    fn numeric_pair(reference: &[f64], current: &[f64]) -> (ColumnProfile, ColumnProfile) {
        let r = NumericProfile::reference(&reference.iter().copied().map(Some).collect::<Vec<_>>());
        let mut c = NumericProfile::new(r.bins);
        for x in current {
            c.add(Some(*x));
        }
        (ColumnProfile::Numeric(r), ColumnProfile::Numeric(c))
    }

    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn a_small_numeric_reference_is_compared_with_ks() {
        let a: Vec<f64> = (0..500).map(|i| f64::from(i % 100)).collect();
        let shifted: Vec<f64> = a.iter().map(|x| x + 30.0).collect();
        let (r, c) = numeric_pair(&a, &shifted);
        let d = column("x", &r, &c, Choice::default());
        assert_eq!((d.method, d.exact, d.drifted), (Method::Ks, true, true));
        let (r, c) = numeric_pair(&a, &a);
        let d = column("x", &r, &c, Choice::default());
        assert_eq!((d.statistic, d.drifted), (Some(1.0), false));
    }

    #[test]
    fn a_large_numeric_reference_is_compared_with_wasserstein_and_histograms_agree_with_exact() {
        let mut seed = 7;
        let a: Vec<f64> = (0..20_000).map(|_| lcg(&mut seed) * 10.0).collect();
        let b: Vec<f64> = (0..30_000).map(|_| lcg(&mut seed) * 10.0 + 1.5).collect();
        let (r, c) = numeric_pair(&a, &b);
        let d = column("x", &r, &c, Choice::default());
        assert_eq!(
            (d.method, d.exact, d.drifted),
            (Method::Wasserstein, false, true)
        );
        let exact = stats::wasserstein(&a, &b).expect("two samples give a result");
        let ColumnProfile::Numeric(rp) = &r else {
            unreachable!()
        };
        let approx = d.statistic.expect("a statistic") * rp.std();
        // Within a bin's width: the values are spread within their bins.
        assert!(
            (approx - exact).abs() < 10.0 / 4096.0,
            "{approx} vs {exact}"
        );
        // 15% of the current values are beyond the reference's max.
        let out = d.quality.out_of_range.expect("numeric quality");
        assert!((out - 0.15).abs() < 0.02, "{out}");
        let ks = column(
            "x",
            &r,
            &c,
            Choice {
                method: Some(Method::Ks),
                threshold: None,
            },
        );
        let exact_ks = stats::ks_two_sample(&a, &b).expect("two samples give a result");
        let got = ks.test_statistic.expect("KS's D");
        assert!(
            (got - exact_ks.statistic).abs() < 2.0 / 4096.0 + 1e-3,
            "{got} vs {}",
            exact_ks.statistic
        );
    }

    #[test]
    fn categories_are_compared_with_chi_squared_then_jensen_shannon() {
        let mut r = CategoricalProfile::default();
        let mut c = CategoricalProfile::default();
        for i in 0..600 {
            r.add(Some(["a", "b", "c"][i % 3]));
            c.add(Some(["a", "a", "b", "d"][i % 4]));
        }
        let d = column(
            "x",
            &ColumnProfile::Categorical(r.clone()),
            &ColumnProfile::Categorical(c.clone()),
            Choice::default(),
        );
        assert_eq!((d.method, d.drifted), (Method::ChiSquared, true));
        assert_eq!(d.quality.unseen, vec!["d".to_string()]);
        assert_eq!(d.quality.unseen_share, Some(0.25));
        for i in 0..600 {
            r.add(Some(["a", "b", "c"][i % 3]));
        }
        let d = column(
            "x",
            &ColumnProfile::Categorical(r),
            &ColumnProfile::Categorical(c),
            Choice::default(),
        );
        assert_eq!(d.method, Method::JensenShannon);
    }

    #[test]
    fn an_empty_window_is_not_enough_data_never_a_false_alarm() {
        let (r, _) = numeric_pair(&[1.0, 2.0, 3.0], &[]);
        let ColumnProfile::Numeric(rp) = &r else {
            unreachable!()
        };
        let mut c = NumericProfile::new(rp.bins);
        c.add(None);
        let d = column("x", &r, &ColumnProfile::Numeric(c), Choice::default());
        assert!(!d.drifted && d.statistic.is_none());
        assert!(
            d.note
                .as_deref()
                .is_some_and(|n| n.contains("not enough data")),
            "{d:?}"
        );
        let all = dataset(&[("x".into(), r.clone(), r.clone())], &BTreeMap::new());
        assert!(!all.drifted && all.columns == 1);
    }

    #[test]
    fn the_dataset_drifts_when_half_its_columns_do() {
        let a: Vec<f64> = (0..300).map(f64::from).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 100.0).collect();
        let (r1, c1) = numeric_pair(&a, &b);
        let (r2, c2) = numeric_pair(&a, &a);
        let cols = vec![("moved".to_string(), r1, c1), ("still".to_string(), r2, c2)];
        let d = dataset(&cols, &BTreeMap::new());
        assert_eq!((d.columns, d.drifted_columns, d.drifted), (2, 1, true));
        let mut strict = BTreeMap::new();
        strict.insert(
            "moved".to_string(),
            Choice {
                method: Some(Method::Psi),
                threshold: Some(100.0),
            },
        );
        let d = dataset(&cols, &strict);
        assert_eq!((d.drifted_columns, d.drifted), (0, false));
    }

    #[test]
    fn linear_areas_are_exact() {
        assert!((linear_abs_area(1.0, 1.0) - 1.0).abs() < 1e-15);
        assert!((linear_abs_area(1.0, -1.0) - 0.5).abs() < 1e-15);
        assert!((linear_abs_area(-2.0, 0.0) - 1.0).abs() < 1e-15);
        let _ = Bins::spanning(0.0, 1.0);
    }
}
