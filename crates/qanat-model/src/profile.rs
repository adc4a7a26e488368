//! Column profiles: what a column looked like, in a form whose size does not grow with
//! its rows and that merges (two windows' profiles add up to the profile of both).
//!
//! A numeric column keeps its count, nulls, range, mean and variance (Welford, merged
//! with Chan's formula), a histogram on bins fixed in advance, and — while small
//! enough — its exact values and its distinct values. A categorical column keeps
//! counts per category, up to a limit past which the rest are counted together.
//!
//! The histogram's bins come from the reference: [`Bins::spanning`] its range in
//! [`BINS`] equal widths. A current window is profiled on the reference's bins, so the
//! two line up bin for bin; values outside the reference's range go to two tails that
//! keep their count and sum, which is all the Wasserstein distance needs of them.
//!
//! A [`TableProfile`] holds every column's; [`reference_of`] profiles a table held in
//! memory, as the trainer does for the reference profile it stores with a model.

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Exact values kept per numeric column; past this only the histogram answers.
pub const EXACT_VALUES: usize = 10_000;
/// Distinct values tracked per numeric column (a column with few is compared as
/// categories, as Evidently does).
pub const DISTINCT_MAX: usize = 32;
/// Histogram bins over the reference's range.
pub const BINS: usize = 4096;
/// Categories counted by name per categorical column; the rest are counted together.
pub const CATEGORIES_MAX: usize = 10_000;

/// Equal-width bins over `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bins {
    pub lo: f64,
    pub hi: f64,
    pub count: usize,
}

impl Bins {
    /// [`BINS`] bins over `[lo, hi]` (one bin when the two are equal).
    pub fn spanning(lo: f64, hi: f64) -> Bins {
        Bins {
            lo,
            hi,
            count: if hi > lo { BINS } else { 1 },
        }
    }

    /// Bins per unit of value (what `of` multiplies by).
    fn per_unit(&self) -> f64 {
        if self.hi > self.lo {
            self.count as f64 / (self.hi - self.lo)
        } else {
            0.0
        }
    }

    /// The bin of `x`, or `Err(false)` below the range and `Err(true)` above;
    /// `per_unit` is [`Bins::per_unit`], computed once by a caller with many values.
    fn of(&self, x: f64, per_unit: f64) -> Result<usize, bool> {
        if x < self.lo {
            return Err(false);
        }
        if x > self.hi {
            return Err(true);
        }
        let i = ((x - self.lo) * per_unit) as usize;
        Ok(i.min(self.count - 1))
    }

    /// The left edge of bin `i`.
    pub fn edge(&self, i: usize) -> f64 {
        if i >= self.count {
            self.hi
        } else {
            self.lo + (self.hi - self.lo) * i as f64 / self.count as f64
        }
    }
}

/// Values outside the bins: how many, and their sum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    pub count: u64,
    pub sum: f64,
}

/// A numeric column's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumericProfile {
    /// Non-null values.
    pub count: u64,
    /// Nulls and NaNs.
    pub nulls: u64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Σ (x − mean)², for the variance.
    m2: f64,
    pub bins: Bins,
    pub counts: Vec<u64>,
    pub below: Tail,
    pub above: Tail,
    /// Every value, while there are at most [`EXACT_VALUES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<f64>>,
    /// Each distinct value and its count, while there are at most [`DISTINCT_MAX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct: Option<Vec<(f64, u64)>>,
}

/// Independent accumulators: sums and extremes over a slice kept in this many
/// lanes, so that no single chain of additions sets the pace (the compiler makes
/// them vector operations).
const LANES: usize = 8;

/// The sum, minimum and maximum of `xs`, in [`LANES`] lanes.
fn sum_min_max(xs: &[f64]) -> (f64, f64, f64) {
    let mut sum = [0.0; LANES];
    let mut min = [f64::INFINITY; LANES];
    let mut max = [f64::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            sum[i] += c[i];
            min[i] = if c[i] < min[i] { c[i] } else { min[i] };
            max[i] = if c[i] > max[i] { c[i] } else { max[i] };
        }
    }
    for (i, &x) in rest.iter().enumerate() {
        sum[i] += x;
        min[i] = min[i].min(x);
        max[i] = max[i].max(x);
    }
    (
        sum.iter().sum(),
        min.iter().copied().fold(f64::INFINITY, f64::min),
        max.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// The sum of squared deviations of `xs` from `mean`, in [`LANES`] lanes.
fn squared_deviations(xs: &[f64], mean: f64) -> f64 {
    let mut acc = [0.0; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            let d = c[i] - mean;
            acc[i] += d * d;
        }
    }
    for (i, &x) in rest.iter().enumerate() {
        acc[i] += (x - mean) * (x - mean);
    }
    acc.iter().sum()
}

impl NumericProfile {
    /// An empty profile on `bins`.
    pub fn new(bins: Bins) -> NumericProfile {
        NumericProfile {
            count: 0,
            nulls: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            mean: 0.0,
            m2: 0.0,
            bins,
            counts: vec![0; bins.count],
            below: Tail::default(),
            above: Tail::default(),
            values: Some(Vec::new()),
            distinct: Some(Vec::new()),
        }
    }

    /// The profile of `values` (None for a null) on bins spanning their own range:
    /// a reference.
    pub fn reference(values: &[Option<f64>]) -> NumericProfile {
        let xs: Vec<f64> = values.iter().map(|x| x.unwrap_or(f64::NAN)).collect();
        NumericProfile::reference_slice(&xs)
    }

    /// The profile of numbers held in memory (NaN missing) on bins spanning their own
    /// range: a reference.
    pub fn reference_slice(xs: &[f64]) -> NumericProfile {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for x in xs.iter().filter(|x| x.is_finite()) {
            lo = lo.min(*x);
            hi = hi.max(*x);
        }
        let bins = if lo <= hi {
            Bins::spanning(lo, hi)
        } else {
            Bins::spanning(0.0, 0.0)
        };
        let mut p = NumericProfile::new(bins);
        p.add_slice(xs);
        p
    }

    /// Counts one value; `None`, NaN and infinities are nulls.
    pub fn add(&mut self, x: Option<f64>) {
        let Some(x) = x.filter(|x| x.is_finite()) else {
            self.nulls += 1;
            return;
        };
        // `+ 0.0`: −0 and 0 are one value.
        let x = x + 0.0;
        self.count += 1;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
        self.bin(x, self.bins.per_unit());
        if let Some(v) = &mut self.values {
            if v.len() < EXACT_VALUES {
                v.push(x);
            } else {
                self.values = None;
            }
        }
        if let Some(d) = &mut self.distinct {
            match d.binary_search_by(|(v, _)| v.total_cmp(&x)) {
                Ok(i) => d[i].1 += 1,
                Err(i) if d.len() < DISTINCT_MAX => d.insert(i, (x, 1)),
                Err(_) => self.distinct = None,
            }
        }
    }

    /// Counts finite `x` in its bin, or in the tail below or above the bins.
    fn bin(&mut self, x: f64, per_unit: f64) {
        match self.bins.of(x, per_unit) {
            Ok(i) => self.counts[i] += 1,
            Err(false) => {
                self.below.count += 1;
                self.below.sum += x;
            }
            Err(true) => {
                self.above.count += 1;
                self.above.sum += x;
            }
        }
    }

    /// Counts many values at once (the fast path for a column of a batch); NaNs and
    /// infinities are nulls.
    pub fn add_slice(&mut self, xs: &[f64]) {
        if xs.is_empty() {
            return;
        }
        // The slice's own moments (two passes over data in cache), merged in as
        // another profile's would be. A NaN or an infinity makes the sum not finite
        // (so does a sum past f64's range): then each value is looked at alone.
        let (sum, min, max) = sum_min_max(xs);
        if !sum.is_finite() {
            for x in xs {
                self.add(Some(*x));
            }
            return;
        }
        let n = xs.len() as f64;
        let mean = sum / n;
        let m2 = squared_deviations(xs, mean);
        let total = self.count + xs.len() as u64;
        let delta = mean - self.mean;
        self.m2 += m2 + delta * delta * self.count as f64 * n / total as f64;
        self.mean += delta * n / total as f64;
        self.count = total;
        self.min = self.min.min(min + 0.0);
        self.max = self.max.max(max + 0.0);
        let per_unit = self.bins.per_unit();
        for &x in xs {
            self.bin(x, per_unit);
        }
        if let Some(v) = &mut self.values {
            if v.len() + xs.len() <= EXACT_VALUES {
                v.extend(xs.iter().map(|x| x + 0.0));
            } else {
                self.values = None;
            }
        }
        if let Some(d) = &mut self.distinct {
            for &x in xs {
                let x = x + 0.0;
                match d.binary_search_by(|(v, _)| v.total_cmp(&x)) {
                    Ok(i) => d[i].1 += 1,
                    Err(i) if d.len() < DISTINCT_MAX => d.insert(i, (x, 1)),
                    Err(_) => {
                        self.distinct = None;
                        break;
                    }
                }
            }
        }
    }

    /// The population standard deviation (NumPy's `std`), 0 with fewer than two values.
    pub fn std(&self) -> f64 {
        if self.count < 2 {
            0.0
        } else {
            (self.m2 / self.count as f64).sqrt()
        }
    }

    /// Adds `other` (profiled on the same bins) to this profile.
    pub fn merge(&mut self, other: &NumericProfile) -> Result<(), String> {
        if self.bins != other.bins {
            return Err("the two profiles were made on different bins".into());
        }
        let n = self.count + other.count;
        if other.count > 0 {
            let delta = other.mean - self.mean;
            let (a, b) = (self.count as f64, other.count as f64);
            self.m2 += other.m2 + delta * delta * a * b / n as f64;
            self.mean += delta * b / n as f64;
        }
        self.count = n;
        self.nulls += other.nulls;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        for (t, o) in [
            (&mut self.below, other.below),
            (&mut self.above, other.above),
        ] {
            t.count += o.count;
            t.sum += o.sum;
        }
        self.values = match (self.values.take(), &other.values) {
            (Some(mut a), Some(b)) if a.len() + b.len() <= EXACT_VALUES => {
                a.extend_from_slice(b);
                Some(a)
            }
            _ => None,
        };
        self.distinct = match (self.distinct.take(), &other.distinct) {
            (Some(a), Some(b)) => {
                let mut all: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
                for (v, c) in a.into_iter().chain(b.iter().copied()) {
                    all.entry(ordered(v)).or_insert((v, 0)).1 += c;
                }
                (all.len() <= DISTINCT_MAX).then(|| all.into_values().collect())
            }
            _ => None,
        };
        Ok(())
    }

    /// The share of values at or below each bin's right edge, the tails included:
    /// `shares[i]` for `i` in `0..bins.count`.
    pub fn cdf_at_edges(&self) -> Vec<f64> {
        let n = self.count.max(1) as f64;
        let mut seen = self.below.count;
        self.counts
            .iter()
            .map(|c| {
                seen += c;
                seen as f64 / n
            })
            .collect()
    }
}

/// Orders f64 bit patterns as the numbers order (a map key for distinct values).
fn ordered(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// A categorical column's profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoricalProfile {
    /// Non-null values.
    pub count: u64,
    pub nulls: u64,
    /// Rows per category, for the first [`CATEGORIES_MAX`] categories seen.
    pub categories: BTreeMap<String, u64>,
    /// Rows of the categories past that limit.
    pub other: u64,
}

impl CategoricalProfile {
    pub fn add(&mut self, x: Option<&str>) {
        let Some(x) = x else {
            self.nulls += 1;
            return;
        };
        self.count += 1;
        if let Some(c) = self.categories.get_mut(x) {
            *c += 1;
        } else if self.categories.len() < CATEGORIES_MAX {
            self.categories.insert(x.to_string(), 1);
        } else {
            self.other += 1;
        }
    }

    pub fn merge(&mut self, other: &CategoricalProfile) {
        self.count += other.count;
        self.nulls += other.nulls;
        self.other += other.other;
        for (k, v) in &other.categories {
            if let Some(c) = self.categories.get_mut(k) {
                *c += v;
            } else if self.categories.len() < CATEGORIES_MAX {
                self.categories.insert(k.clone(), *v);
            } else {
                self.other += v;
            }
        }
    }
}

/// One column's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ColumnProfile {
    Numeric(NumericProfile),
    Categorical(CategoricalProfile),
}

impl ColumnProfile {
    /// Rows counted, nulls included.
    pub fn rows(&self) -> u64 {
        match self {
            ColumnProfile::Numeric(p) => p.count + p.nulls,
            ColumnProfile::Categorical(p) => p.count + p.nulls,
        }
    }

    /// The share of rows that were null.
    pub fn null_rate(&self) -> f64 {
        let (nulls, rows) = match self {
            ColumnProfile::Numeric(p) => (p.nulls, p.count + p.nulls),
            ColumnProfile::Categorical(p) => (p.nulls, p.count + p.nulls),
        };
        if rows == 0 {
            0.0
        } else {
            nulls as f64 / rows as f64
        }
    }
}

/// Every column's profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableProfile {
    pub rows: u64,
    pub columns: Vec<(String, ColumnProfile)>,
    /// The column a model was trained to predict (not one of its inputs), when this
    /// profiles a training set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The model's outputs on the same rows (`label`, `probability`, `prediction`),
    /// when this profiles a training set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predictions: Vec<(String, ColumnProfile)>,
}

impl TableProfile {
    /// A profile of plain columns (no target, no predictions).
    pub fn of(rows: u64, columns: Vec<(String, ColumnProfile)>) -> TableProfile {
        TableProfile {
            rows,
            columns,
            target: None,
            predictions: Vec::new(),
        }
    }

    /// The reference profile of `rows` of `table`, of its numeric and text columns
    /// named in `keep` (a model's inputs and target).
    pub fn of_rows(table: &crate::Table, rows: &[usize], keep: &[&str]) -> TableProfile {
        use crate::table::Values as V;
        enum Picked {
            Numeric(Vec<f64>),
            Text(Vec<Option<String>>),
        }
        let picked: Vec<(String, Picked)> = table
            .columns
            .iter()
            .filter(|c| keep.contains(&c.name.as_str()))
            .filter_map(|c| {
                let p = match &c.values {
                    V::Numeric(v) => {
                        Picked::Numeric(rows.iter().filter_map(|&r| v.get(r).copied()).collect())
                    }
                    V::Text(v) => {
                        Picked::Text(rows.iter().filter_map(|&r| v.get(r).cloned()).collect())
                    }
                    V::Unsupported(..) => return None,
                };
                Some((c.name.clone(), p))
            })
            .collect();
        let columns: Vec<(String, Values<'_>)> = picked
            .iter()
            .map(|(name, p)| {
                let values = match p {
                    Picked::Numeric(v) => Values::Numeric(v),
                    Picked::Text(v) => Values::Text(v),
                };
                (name.clone(), values)
            })
            .collect();
        reference_of(&columns)
    }
}

/// One column of a table held in memory (a training set).
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// Numbers; NaN is missing.
    Numeric(&'a [f64]),
    /// Text; `None` is missing.
    Text(&'a [Option<String>]),
}

/// The reference profile of columns held in memory, numeric ones on bins spanning
/// their own range: what a model was trained on, for monitoring to compare with.
pub fn reference_of(columns: &[(String, Values<'_>)]) -> TableProfile {
    let rows = columns.first().map_or(0, |(_, v)| match v {
        Values::Numeric(x) => x.len(),
        Values::Text(x) => x.len(),
    }) as u64;
    let columns = columns
        .par_iter()
        .map(|(name, values)| {
            let profile = match values {
                Values::Numeric(xs) => ColumnProfile::Numeric(NumericProfile::reference_slice(xs)),
                Values::Text(xs) => {
                    let mut p = CategoricalProfile::default();
                    for x in xs.iter() {
                        p.add(x.as_deref());
                    }
                    ColumnProfile::Categorical(p)
                }
            };
            (name.clone(), profile)
        })
        .collect();
    TableProfile::of(rows, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn some(xs: &[f64]) -> Vec<Option<f64>> {
        xs.iter().copied().map(Some).collect()
    }

    #[test]
    fn a_reference_profile_counts_values_nulls_and_moments() {
        let mut xs = some(&[1.0, 2.0, 3.0, 4.0]);
        xs.push(None);
        xs.push(Some(f64::NAN));
        let p = NumericProfile::reference(&xs);
        assert_eq!((p.count, p.nulls, p.min, p.max), (4, 2, 1.0, 4.0));
        assert!((p.mean - 2.5).abs() < 1e-15);
        assert!((p.std() - 1.25f64.sqrt()).abs() < 1e-15);
        assert_eq!(p.counts.iter().sum::<u64>(), 4);
        assert_eq!((p.below.count, p.above.count), (0, 0));
        assert_eq!(p.distinct.as_ref().map(Vec::len), Some(4));
    }

    #[test]
    fn values_outside_the_reference_go_to_the_tails() {
        let r = NumericProfile::reference(&some(&[0.0, 10.0]));
        let mut c = NumericProfile::new(r.bins);
        for x in [-3.0, -1.0, 5.0, 12.0] {
            c.add(Some(x));
        }
        assert_eq!(
            c.below,
            Tail {
                count: 2,
                sum: -4.0
            }
        );
        assert_eq!(
            c.above,
            Tail {
                count: 1,
                sum: 12.0
            }
        );
    }

    proptest! {
        #[test]
        fn two_windows_merged_equal_one_window_of_both(
            a in prop::collection::vec(-100.0f64..100.0, 0..300),
            b in prop::collection::vec(-100.0f64..100.0, 0..300),
        ) {
            let bins = Bins::spanning(-50.0, 50.0);
            let mut left = NumericProfile::new(bins);
            let mut right = NumericProfile::new(bins);
            let mut both = NumericProfile::new(bins);
            for x in &a { left.add(Some(*x)); both.add(Some(*x)); }
            for x in &b { right.add(Some(*x)); both.add(Some(*x)); }
            left.merge(&right).map_err(TestCaseError::fail)?;
            prop_assert_eq!(left.count, both.count);
            prop_assert_eq!(&left.counts, &both.counts);
            prop_assert_eq!(left.below.count, both.below.count);
            prop_assert_eq!(left.above.count, both.above.count);
            prop_assert!((left.mean - both.mean).abs() < 1e-9);
            prop_assert!((left.std() - both.std()).abs() < 1e-9);
            prop_assert_eq!(left.values.map(|v| v.len()), both.values.map(|v| v.len()));
        }
    }

    proptest! {
        #[test]
        fn a_slice_counts_as_its_values_one_by_one(
            xs in prop::collection::vec(prop_oneof![-100.0f64..100.0, Just(f64::NAN), Just(-0.0)], 0..400),
        ) {
            let bins = Bins::spanning(-50.0, 50.0);
            let mut one = NumericProfile::new(bins);
            let mut all = NumericProfile::new(bins);
            for x in &xs { one.add(Some(*x)); }
            all.add_slice(&xs);
            prop_assert_eq!((one.count, one.nulls), (all.count, all.nulls));
            prop_assert_eq!(&one.counts, &all.counts);
            prop_assert_eq!(one.below.count + one.above.count, all.below.count + all.above.count);
            prop_assert!((one.mean - all.mean).abs() < 1e-9);
            prop_assert!((one.std() - all.std()).abs() < 1e-9);
            prop_assert_eq!(&one.values, &all.values);
            prop_assert_eq!(&one.distinct, &all.distinct);
        }
    }

    proptest! {
        /// The batch path (sums in lanes) counts what adding one value at a time does.
        #[test]
        fn a_slice_profiles_as_its_values_one_by_one(
            xs in prop::collection::vec(-1e6f64..1e6, 1..300),
            cut in 0usize..300,
        ) {
            let bins = NumericProfile::reference_slice(&xs).bins;
            let (mut batch, mut single) = (NumericProfile::new(bins), NumericProfile::new(bins));
            let cut = cut.min(xs.len());
            batch.add_slice(&xs[..cut]);
            batch.add_slice(&xs[cut..]);
            for x in &xs {
                single.add(Some(*x));
            }
            prop_assert_eq!((batch.count, batch.min, batch.max), (single.count, single.min, single.max));
            prop_assert_eq!(&batch.counts, &single.counts);
            prop_assert!((batch.mean - single.mean).abs() <= 1e-9 * (1.0 + single.mean.abs()));
            prop_assert!((batch.m2 - single.m2).abs() <= 1e-9 * (1.0 + single.m2.abs()));
        }
    }

    #[test]
    fn exact_values_and_distinct_values_give_way_past_their_limits() {
        let xs: Vec<Option<f64>> = (0..=EXACT_VALUES).map(|i| Some(i as f64)).collect();
        let p = NumericProfile::reference(&xs);
        assert!(p.values.is_none() && p.distinct.is_none());
        assert_eq!(p.count as usize, EXACT_VALUES + 1);
        let few: Vec<Option<f64>> = (0..1000).map(|i| Some(f64::from(i % 3))).collect();
        let p = NumericProfile::reference(&few);
        assert_eq!(p.distinct, Some(vec![(0.0, 334), (1.0, 333), (2.0, 333)]));
    }

    #[test]
    fn categories_past_the_limit_are_counted_together() {
        let mut p = CategoricalProfile::default();
        for i in 0..CATEGORIES_MAX + 5 {
            p.add(Some(&i.to_string()));
        }
        p.add(None);
        assert_eq!(
            (p.count, p.nulls, p.other),
            (CATEGORIES_MAX as u64 + 5, 1, 5)
        );
        assert_eq!(p.categories.len(), CATEGORIES_MAX);
    }
}
