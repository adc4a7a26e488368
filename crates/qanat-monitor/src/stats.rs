//! Drift statistics between a reference sample and a current one.
//!
//! Each function takes the two samples (or their category counts, or their bin shares)
//! and computes the statistic exactly, as SciPy defines it, so a user can check a
//! verdict with the tool they know:
//!
//! | here | SciPy |
//! |---|---|
//! | [`ks_two_sample`] | `scipy.stats.ks_2samp(a, b)` (two-sided; `method="exact"` up to [`KS_EXACT_MAX`] rows) |
//! | [`chi_squared`] | `scipy.stats.chisquare(f_obs, f_exp)` |
//! | [`wasserstein`] | `scipy.stats.wasserstein_distance(u, v)` |
//! | [`jensen_shannon`] | `scipy.spatial.distance.jensenshannon(p, q)` (natural log) |
//! | [`psi`] | no SciPy twin: `Σ (c − r) · ln(c / r)` over bin shares, empty bins filled ([`fill_empty_shares`]) |
//!
//! Samples hold finite values only: nulls and NaNs are counted apart (a null-rate jump
//! is a data-quality finding, not a shift of the distribution). An empty sample gives
//! `None`: there is nothing to compare, which is not the same as no drift.

use std::cmp::Ordering;

/// A test's statistic and its p-value: the probability, were both samples drawn from
/// one distribution, of a statistic at least this large.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TestResult {
    pub statistic: f64,
    pub p_value: f64,
}

/// Up to this many rows in the larger sample, [`ks_two_sample`]'s p-value is exact
/// (SciPy's `method="auto"` makes the same choice); above, it is Kolmogorov's limit.
pub const KS_EXACT_MAX: usize = 10_000;

/// The two-sample Kolmogorov–Smirnov test, two-sided: the largest distance between the
/// two empirical distribution functions, and its p-value.
///
/// ```
/// use qanat_monitor::stats::ks_two_sample;
/// let r = ks_two_sample(&[1.0, 2.0, 3.0, 4.0], &[3.5, 4.5, 5.5, 6.5]).unwrap();
/// assert_eq!(r.statistic, 0.75);
/// ```
pub fn ks_two_sample(reference: &[f64], current: &[f64]) -> Option<TestResult> {
    if reference.is_empty() || current.is_empty() {
        return None;
    }
    // `+ 0.0` makes −0 equal to 0, as comparisons (and SciPy) take them.
    let mut a: Vec<f64> = reference.iter().map(|x| x + 0.0).collect();
    let mut b: Vec<f64> = current.iter().map(|x| x + 0.0).collect();
    a.sort_unstable_by(f64::total_cmp);
    b.sort_unstable_by(f64::total_cmp);
    Some(ks_sorted(&a, &b))
}

/// [`ks_two_sample`] on samples already sorted ascending.
pub fn ks_sorted(a: &[f64], b: &[f64]) -> TestResult {
    let (m, n) = (a.len(), b.len());
    // At every value, F_a − F_b = (i·n − j·m) / (m·n) with i, j the counts at or below
    // it: the statistic is an integer over m·n, which the p-value's lattice walk
    // compares exactly, ties included.
    let d = ks_distance(a, b);
    ks_result(m, n, d)
}

/// The KS test for a distance `d` between the distribution functions of samples of
/// `m` and `n` values, found some other way (from histograms, say).
pub fn ks_p_for(m: usize, n: usize, d: f64) -> TestResult {
    if m == 0 || n == 0 {
        return TestResult {
            statistic: d,
            p_value: 1.0,
        };
    }
    let scaled = (d.clamp(0.0, 1.0) * m as f64 * n as f64).round() as u128;
    ks_result(m, n, scaled)
}

/// The statistic D = d/(m·n) and its p-value: exact up to [`KS_EXACT_MAX`] rows.
fn ks_result(m: usize, n: usize, d: u128) -> TestResult {
    let statistic = d as f64 / (m as f64 * n as f64);
    let p_value = if m.max(n) <= KS_EXACT_MAX {
        ks_exact_p(m, n, d)
    } else {
        let en = (m as f64 * n as f64) / (m as f64 + n as f64);
        kolmogorov_sf(en.sqrt() * statistic)
    };
    TestResult { statistic, p_value }
}

/// max |i·n − j·m| over the distinct values of the two sorted samples.
fn ks_distance(a: &[f64], b: &[f64]) -> u128 {
    let (m, n) = (a.len(), b.len());
    let (mut i, mut j) = (0usize, 0usize);
    let mut d: u128 = 0;
    while i < m || j < n {
        let x = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) => {
                if x.total_cmp(&y) == Ordering::Greater {
                    y
                } else {
                    x
                }
            }
            (Some(&x), None) => x,
            (None, Some(&y)) => y,
            (None, None) => break,
        };
        while i < m && a[i].total_cmp(&x) != Ordering::Greater {
            i += 1;
        }
        while j < n && b[j].total_cmp(&x) != Ordering::Greater {
            j += 1;
        }
        let gap = (i as i128 * n as i128 - j as i128 * m as i128).unsigned_abs();
        d = d.max(gap);
    }
    d
}

/// P(D·m·n ≥ d) when both samples come from one continuous distribution.
///
/// Under that hypothesis every interleaving of the two sorted samples is equally
/// likely: a uniformly random monotone path on the (m+1)×(n+1) lattice, one step per
/// value. The walk below carries the probability of having stayed strictly inside the
/// band |i·n − j·m| < d; from (i, j) the next value comes from `a` with probability
/// (m − i)/(m − i + n − j). Every quantity stays in [0, 1], so nothing overflows at
/// any size, in O(m·n) time and O(n) memory.
fn ks_exact_p(m: usize, n: usize, d: u128) -> f64 {
    if d == 0 {
        return 1.0;
    }
    let inside =
        |i: usize, j: usize| (i as i128 * n as i128 - j as i128 * m as i128).unsigned_abs() < d;
    let mut row = vec![0.0f64; n + 1];
    let mut below = vec![0.0f64; n + 1];
    row[0] = 1.0;
    let mut stayed = 0.0;
    for i in 0..=m {
        let mut from_left = 0.0;
        for j in 0..=n {
            let here = row[j] + from_left;
            let p = if inside(i, j) { here } else { 0.0 };
            let left = (m - i + n - j) as f64;
            if left == 0.0 {
                stayed = p;
                break;
            }
            below[j] = p * (m - i) as f64 / left;
            from_left = p * (n - j) as f64 / left;
        }
        std::mem::swap(&mut row, &mut below);
        below.fill(0.0);
    }
    (1.0 - stayed).clamp(0.0, 1.0)
}

/// Kolmogorov's limiting distribution: P(K > x) = 2 Σ (−1)^(k−1) e^(−2k²x²).
fn kolmogorov_sf(x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if x < 1.0 {
        // The alternating series converges slowly here; Jacobi's dual form is fast:
        // P(K ≤ x) = √(2π)/x Σ e^(−(2k−1)²π²/(8x²)).
        let mut cdf = 0.0;
        for k in 1..=20 {
            let t = (2 * k - 1) as f64;
            cdf += (-(t * t) * std::f64::consts::PI.powi(2) / (8.0 * x * x)).exp();
        }
        cdf *= (2.0 * std::f64::consts::PI).sqrt() / x;
        return (1.0 - cdf).clamp(0.0, 1.0);
    }
    let mut sum = 0.0;
    for k in 1..=100 {
        let kf = k as f64;
        let term = (-2.0 * kf * kf * x * x).exp();
        sum += if k % 2 == 1 { term } else { -term };
        if term < 1e-300 {
            break;
        }
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

/// Pearson's chi-squared test of observed counts against expected ones (same length,
/// same categories in the same order): `Σ (o − e)² / e` on k − 1 degrees of freedom.
///
/// A category expected never but observed makes the statistic infinite and the
/// p-value 0, as SciPy answers. `None` when there are fewer than two categories.
pub fn chi_squared(observed: &[f64], expected: &[f64]) -> Option<TestResult> {
    if observed.len() != expected.len() || observed.len() < 2 {
        return None;
    }
    let mut statistic = 0.0;
    for (&o, &e) in observed.iter().zip(expected) {
        let gap = o - e;
        statistic += if e == 0.0 {
            if gap == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            gap * gap / e
        };
    }
    let dof = (observed.len() - 1) as f64;
    let p_value = if statistic.is_infinite() {
        0.0
    } else {
        upper_regularized_gamma(dof / 2.0, statistic / 2.0)
    };
    Some(TestResult { statistic, p_value })
}

/// The chi-squared test of a current sample's category counts against the reference's
/// frequencies, as Evidently runs it: each category's expected count is its reference
/// count scaled to the current sample's size. Both slices are counts per category, in
/// the same order, over the union of the categories seen in either sample.
pub fn chi_squared_counts(reference: &[u64], current: &[u64]) -> Option<TestResult> {
    let (nr, nc) = (
        reference.iter().sum::<u64>() as f64,
        current.iter().sum::<u64>() as f64,
    );
    if nr == 0.0 || nc == 0.0 {
        return None;
    }
    let scale = nc / nr;
    let expected: Vec<f64> = reference.iter().map(|&r| r as f64 * scale).collect();
    let observed: Vec<f64> = current.iter().map(|&c| c as f64).collect();
    chi_squared(&observed, &expected)
}

/// The two-proportion z-test, two-sided, for a binary column: `hits` of `n` rows in
/// each sample fall in one category. The statistic is (p_r − p_c) / √(P(1−P)(1/n_r +
/// 1/n_c)) with P the pooled share; the p-value is P(|Z| ≥ |z|) = erfc(|z|/√2).
/// Equal proportions in both (including a category present in every row of both)
/// give z = 0 and p = 1.
pub fn proportions_z(ref_hits: u64, ref_n: u64, cur_hits: u64, cur_n: u64) -> Option<TestResult> {
    if ref_n == 0 || cur_n == 0 || ref_hits > ref_n || cur_hits > cur_n {
        return None;
    }
    let (p1, p2) = (
        ref_hits as f64 / ref_n as f64,
        cur_hits as f64 / cur_n as f64,
    );
    let pooled = (ref_hits + cur_hits) as f64 / (ref_n + cur_n) as f64;
    let spread = (pooled * (1.0 - pooled) * (1.0 / ref_n as f64 + 1.0 / cur_n as f64)).sqrt();
    if spread == 0.0 || p1 == p2 {
        return Some(TestResult {
            statistic: 0.0,
            p_value: 1.0,
        });
    }
    let z = (p1 - p2) / spread;
    Some(TestResult {
        statistic: z,
        p_value: normal_two_sided(z),
    })
}

/// P(|Z| ≥ |z|) for a standard normal Z: erfc(|z|/√2) = Q(½, z²/2).
pub(crate) fn normal_two_sided(z: f64) -> f64 {
    upper_regularized_gamma(0.5, z * z / 2.0)
}

/// The first Wasserstein distance (earth mover's) between two samples:
/// ∫ |F_u(x) − F_v(x)| dx.
pub fn wasserstein(u: &[f64], v: &[f64]) -> Option<f64> {
    if u.is_empty() || v.is_empty() {
        return None;
    }
    let mut a = u.to_vec();
    let mut b = v.to_vec();
    a.sort_unstable_by(f64::total_cmp);
    b.sort_unstable_by(f64::total_cmp);
    Some(wasserstein_sorted(&a, &b))
}

/// [`wasserstein`] on samples already sorted ascending.
pub fn wasserstein_sorted(a: &[f64], b: &[f64]) -> f64 {
    let (m, n) = (a.len() as f64, b.len() as f64);
    // Walk the merged values; between two consecutive ones both distribution
    // functions are flat, so the area is |F_a − F_b| times the gap.
    let (mut i, mut j) = (0usize, 0usize);
    let mut total = 0.0;
    let mut previous: Option<f64> = None;
    while i < a.len() || j < b.len() {
        let x = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) => x.min(y),
            (Some(&x), None) => x,
            (None, Some(&y)) => y,
            (None, None) => break,
        };
        if let Some(p) = previous {
            let gap = (i as f64 / m - j as f64 / n).abs();
            total += gap * (x - p);
        }
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        previous = Some(x);
    }
    total
}

/// The Jensen–Shannon distance between two distributions given as weights over the
/// same bins (normalized here): √((KL(p‖m) + KL(q‖m)) / 2) with m their mean, in nats.
/// 0 for equal distributions, at most √ln 2.
pub fn jensen_shannon(p: &[f64], q: &[f64]) -> Option<f64> {
    if p.len() != q.len() || p.is_empty() {
        return None;
    }
    let (sp, sq) = (p.iter().sum::<f64>(), q.iter().sum::<f64>());
    if sp <= 0.0 || sq <= 0.0 {
        return None;
    }
    let mut divergence = 0.0;
    for (&x, &y) in p.iter().zip(q) {
        let (x, y) = (x / sp, y / sq);
        let mid = (x + y) / 2.0;
        divergence += relative_entropy(x, mid) + relative_entropy(y, mid);
    }
    Some((divergence / 2.0).max(0.0).sqrt())
}

/// x·ln(x/y), 0 where x is 0.
fn relative_entropy(x: f64, y: f64) -> f64 {
    if x > 0.0 && y > 0.0 {
        x * (x / y).ln()
    } else if x == 0.0 && y >= 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// The Population Stability Index between the reference's bin shares and the current
/// sample's (same bins, each summing to 1): `Σ (c − r) · ln(c / r)`. Shares must have
/// no zeros: pass them through [`fill_empty_shares`] first.
pub fn psi(reference: &[f64], current: &[f64]) -> Option<f64> {
    if reference.len() != current.len() || reference.is_empty() {
        return None;
    }
    Some(
        reference
            .iter()
            .zip(current)
            .map(|(&r, &c)| (c - r) * (c / r).ln())
            .sum(),
    )
}

/// Shares with their zeros replaced, so that PSI's logarithm is defined: by 0.0001, or,
/// when the smallest share present is already below that, by it divided by a million
/// (the rule Evidently applies). All-zero shares stay as they are.
pub fn fill_empty_shares(shares: &mut [f64]) {
    let smallest = shares
        .iter()
        .copied()
        .filter(|&s| s > 0.0)
        .fold(f64::INFINITY, f64::min);
    if !smallest.is_finite() {
        return;
    }
    let fill = if smallest <= 1e-4 {
        smallest / 1e6
    } else {
        1e-4
    };
    for s in shares.iter_mut().filter(|s| **s == 0.0) {
        *s = fill;
    }
}

/// ln Γ(x) for x > 0, by Lanczos' approximation (g = 7, nine terms), with relative
/// error near 1e-15.
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).abs().ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = C[0];
    for (k, c) in C.iter().enumerate().skip(1) {
        sum += c / (x + k as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// Q(a, x) = Γ(a, x) / Γ(a): the chi-squared survival function is Q(k/2, χ²/2). A
/// power series below x = a + 1, a continued fraction (modified Lentz) above, each
/// where it converges fast.
fn upper_regularized_gamma(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let mut term = 1.0 / a;
        let mut sum = term;
        let mut ap = a;
        for _ in 0..100_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-17 {
                break;
            }
        }
        (1.0 - sum * front).clamp(0.0, 1.0)
    } else {
        const TINY: f64 = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..100_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let step = d * c;
            h *= step;
            if (step - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (front * h).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// The exact KS p-value by brute force: every way to interleave the two samples,
    /// each equally likely, and the share whose statistic reaches the observed one.
    fn ks_p_by_enumeration(m: usize, n: usize, d: u128) -> f64 {
        let total = m + n;
        let (mut reach, mut all) = (0u64, 0u64);
        for mask in 0u32..(1 << total) {
            if mask.count_ones() as usize != m {
                continue;
            }
            all += 1;
            let (mut i, mut j, mut worst) = (0i128, 0i128, 0u128);
            for bit in 0..total {
                if mask & (1 << bit) != 0 {
                    i += 1;
                } else {
                    j += 1;
                }
                worst = worst.max((i * n as i128 - j * m as i128).unsigned_abs());
            }
            if worst >= d {
                reach += 1;
            }
        }
        reach as f64 / all as f64
    }

    proptest! {
        #[test]
        fn the_exact_ks_p_value_equals_counting_every_interleaving(
            a in prop::collection::vec(-50i32..50, 1..8),
            b in prop::collection::vec(-50i32..50, 1..8),
        ) {
            let a: Vec<f64> = a.into_iter().map(f64::from).collect();
            let b: Vec<f64> = b.into_iter().map(f64::from).collect();
            let r = ks_two_sample(&a, &b).expect("two samples give a result");
            let (m, n) = (a.len(), b.len());
            let d = (r.statistic * (m * n) as f64).round() as u128;
            let want = ks_p_by_enumeration(m, n, d);
            prop_assert!(close(r.p_value, want, 1e-12), "{} vs {want}", r.p_value);
        }

        #[test]
        fn wasserstein_is_the_area_between_the_quantile_functions(
            a in prop::collection::vec(-1e3f64..1e3, 1..40),
            b in prop::collection::vec(-1e3f64..1e3, 1..40),
        ) {
            // The same area, integrated over probability instead of over values: with
            // both samples expanded to m·n equal quantile steps.
            let mut sa = a.clone();
            let mut sb = b.clone();
            sa.sort_by(f64::total_cmp);
            sb.sort_by(f64::total_cmp);
            let (m, n) = (sa.len(), sb.len());
            let mut area = 0.0;
            for k in 0..m * n {
                area += (sa[k / n] - sb[k / m]).abs();
            }
            area /= (m * n) as f64;
            let got = wasserstein(&a, &b).expect("two samples give a result");
            prop_assert!(close(got, area, 1e-9 * (1.0 + area)), "{got} vs {area}");
        }
    }

    /// Values SciPy 1.17.1 gives for the same inputs (the full comparison on random
    /// data is `tests/compat/drift_stats.py`).
    #[test]
    fn small_cases_agree_with_scipy() {
        let r = ks_two_sample(&[1.0, 2.0, 3.0, 4.0], &[3.5, 4.5, 5.5, 6.5])
            .expect("two samples give a result");
        assert!(
            close(r.p_value, 0.228_571_428_571_428_62, 1e-12),
            "{}",
            r.p_value
        );
        let a: Vec<f64> = (0..7).map(f64::from).collect();
        let r = ks_two_sample(&a, &[2.5, 3.5, 9.0, 10.0, 11.0]).expect("two samples give a result");
        assert!(
            close(r.statistic, 0.6, 1e-15) && close(r.p_value, 0.166_666_666_666_666_63, 1e-12)
        );
        let a: Vec<f64> = (0..300).map(|i| f64::from(i % 100)).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 30.0).collect();
        let r = ks_two_sample(&a, &b).expect("two samples give a result");
        assert!(
            close(r.p_value, 2.588_151_142_277_377_5e-12, 1e-15),
            "{}",
            r.p_value
        );
        let r = chi_squared(&[10.0, 20.0, 35.0], &[15.0, 20.0, 30.0])
            .expect("two samples give a result");
        assert!(close(r.statistic, 2.5, 1e-15) && close(r.p_value, 0.286_504_796_860_190_1, 1e-12));
        let js =
            jensen_shannon(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]).expect("two samples give a result");
        assert!(close(js, 0.295_310_047_172_049_34, 1e-12), "{js}");
    }

    #[test]
    fn the_proportions_z_test_is_the_normal_tail() {
        // z = 1.959964 is the two-sided 5% point.
        assert!(close(normal_two_sided(1.959_963_984_540_054), 0.05, 1e-12));
        // 30 of 100 against 45 of 100: z = −2.19089..., p = 0.028459...
        let r = proportions_z(30, 100, 45, 100).expect("two samples give a result");
        let pooled: f64 = 0.375;
        let z = (0.30 - 0.45) / (pooled * (1.0 - pooled) * 0.02).sqrt();
        assert!(close(r.statistic, z, 1e-12));
        assert!(
            close(r.p_value, 0.028_459_736_916_310_55, 1e-12),
            "{}",
            r.p_value
        );
        let same = proportions_z(100, 100, 7, 7).expect("two samples give a result");
        assert_eq!((same.statistic, same.p_value), (0.0, 1.0));
        assert!(proportions_z(1, 0, 1, 2).is_none());
    }

    #[test]
    fn identical_samples_do_not_drift() {
        let a: Vec<f64> = (0..500).map(|i| f64::from(i) * 0.37).collect();
        let ks = ks_two_sample(&a, &a).expect("two samples give a result");
        assert_eq!(ks.statistic, 0.0);
        assert_eq!(ks.p_value, 1.0);
        assert_eq!(wasserstein(&a, &a), Some(0.0));
        assert_eq!(
            jensen_shannon(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]),
            Some(0.0)
        );
        assert_eq!(psi(&[0.2, 0.8], &[0.2, 0.8]), Some(0.0));
        let chi =
            chi_squared_counts(&[10, 20, 30], &[20, 40, 60]).expect("two samples give a result");
        assert_eq!((chi.statistic, chi.p_value), (0.0, 1.0));
    }

    #[test]
    fn a_shifted_sample_drifts() {
        let a: Vec<f64> = (0..300).map(|i| f64::from(i % 100)).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 30.0).collect();
        let ks = ks_two_sample(&a, &b).expect("two samples give a result");
        assert!(close(ks.statistic, 0.3, 1e-12), "{}", ks.statistic);
        assert!(ks.p_value < 1e-10, "{}", ks.p_value);
        assert!(close(
            wasserstein(&a, &b).expect("two samples give a result"),
            30.0,
            1e-9
        ));
    }

    #[test]
    fn the_large_sample_ks_uses_kolmogorov_s_limit() {
        let a: Vec<f64> = (0..20_000).map(f64::from).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 200.0).collect();
        let ks = ks_two_sample(&a, &b).expect("two samples give a result");
        assert!(close(ks.statistic, 0.01, 1e-9));
        // √(10⁴)·0.01 = 1: Q(1) = 0.26999967...
        assert!(
            close(ks.p_value, 0.269_999_671_677_347_2, 1e-9),
            "{}",
            ks.p_value
        );
    }

    #[test]
    fn chi_squared_p_values_are_the_distribution_s_tail() {
        // χ² = 3.84146 on one degree of freedom is the 95th percentile.
        let r = chi_squared(&[0.0, 0.0], &[0.0, 0.0]).expect("two samples give a result");
        assert_eq!(r.p_value, 1.0);
        assert!(close(
            upper_regularized_gamma(0.5, 3.841_458_820_694_124 / 2.0),
            0.05,
            1e-12
        ));
        // Two degrees of freedom: Q(1, x/2) = e^(−x/2).
        for x in [0.1, 1.0, 5.0, 40.0] {
            assert!(close(
                upper_regularized_gamma(1.0, x / 2.0),
                (-x / 2.0f64).exp(),
                1e-14
            ));
        }
        // A category expected never but seen: infinitely unlikely.
        let r = chi_squared(&[1.0, 9.0], &[0.0, 10.0]).expect("two samples give a result");
        assert_eq!((r.statistic, r.p_value), (f64::INFINITY, 0.0));
    }

    #[test]
    fn ln_gamma_matches_factorials() {
        let mut fact = 1.0f64;
        for n in 1..30 {
            assert!(
                close(ln_gamma(f64::from(n)), fact.ln(), 1e-12 * (1.0 + fact.ln())),
                "{n}"
            );
            fact *= f64::from(n);
        }
        assert!(close(
            ln_gamma(0.5),
            std::f64::consts::PI.sqrt().ln(),
            1e-14
        ));
    }

    #[test]
    fn empty_samples_give_no_result_rather_than_no_drift() {
        assert!(ks_two_sample(&[], &[1.0]).is_none());
        assert!(wasserstein(&[1.0], &[]).is_none());
        assert!(jensen_shannon(&[0.0, 0.0], &[1.0, 1.0]).is_none());
        assert!(chi_squared_counts(&[0, 0], &[1, 2]).is_none());
        assert!(chi_squared(&[1.0], &[1.0]).is_none());
    }

    #[test]
    fn empty_bins_are_filled_as_evidently_fills_them() {
        let mut s = [0.5, 0.5, 0.0];
        fill_empty_shares(&mut s);
        assert_eq!(s, [0.5, 0.5, 1e-4]);
        let mut s = [0.99995, 0.00005, 0.0];
        fill_empty_shares(&mut s);
        assert_eq!(s[2], 0.00005 / 1e6);
        let r = [0.25, 0.25, 0.5];
        let c = [0.5, 0.25, 0.25];
        let want = 0.25 * 2.0f64.ln() + (-0.25) * 0.5f64.ln();
        assert!(close(
            psi(&r, &c).expect("two samples give a result"),
            want,
            1e-15
        ));
    }
}
