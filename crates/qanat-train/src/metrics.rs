//! The metrics logged per epoch, computed from the model's raw outputs: for
//! classification accuracy, F1 (of the second class for two classes, macro-averaged
//! over classes otherwise) and ROC AUC (two classes); for regression RMSE and MAE in
//! the target's own units. Each the way scikit-learn's function of the same name
//! computes it.

use std::collections::BTreeMap;

use qanat_model::prep::Target;

/// Accuracy: the share of rows whose predicted class is the true one (`truth` -1 is a
/// class the model never saw: always wrong).
pub fn accuracy(pred: &[usize], truth: &[i64]) -> f64 {
    if pred.is_empty() {
        return 0.0;
    }
    let right = pred
        .iter()
        .zip(truth)
        .filter(|(p, t)| **t >= 0 && **p as i64 == **t)
        .count();
    right as f64 / pred.len() as f64
}

/// F1 of class `k`: 2·TP / (2·TP + FP + FN); 0 when the class is never predicted nor
/// present.
pub fn f1_of(pred: &[usize], truth: &[i64], k: usize) -> f64 {
    let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
    for (p, t) in pred.iter().zip(truth) {
        let is_p = *p == k;
        let is_t = *t == k as i64;
        match (is_p, is_t) {
            (true, true) => tp += 1,
            (true, false) => fp += 1,
            (false, true) => fn_ += 1,
            _ => {}
        }
    }
    let d = 2 * tp + fp + fn_;
    if d == 0 {
        0.0
    } else {
        2.0 * tp as f64 / d as f64
    }
}

/// F1 of the positive (second) class for two classes, the unweighted mean over classes
/// otherwise.
pub fn f1(pred: &[usize], truth: &[i64], classes: usize) -> f64 {
    if classes == 2 {
        f1_of(pred, truth, 1)
    } else {
        (0..classes).map(|k| f1_of(pred, truth, k)).sum::<f64>() / classes as f64
    }
}

/// ROC AUC of scores for the positive class: the probability that a random positive
/// scores above a random negative (ties count half). `None` when one side is empty.
pub fn auc(scores: &[f64], positive: &[bool]) -> Option<f64> {
    let mut by: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    // Total order over floats through their bits (scores are finite).
    let key = |s: f64| {
        let b = s.to_bits();
        if s.is_sign_negative() {
            !b
        } else {
            b | (1 << 63)
        }
    };
    for (s, p) in scores.iter().zip(positive) {
        let e = by.entry(key(*s)).or_default();
        if *p {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    let pos: usize = positive.iter().filter(|p| **p).count();
    let neg = positive.len() - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    // Walk scores upwards: each positive beats the negatives below it.
    let mut negs_below = 0usize;
    let mut wins = 0f64;
    for (p, n) in by.values() {
        wins += *p as f64 * (negs_below as f64 + 0.5 * *n as f64);
        negs_below += n;
    }
    Some(wins / (pos as f64 * neg as f64))
}

/// Root mean squared error.
pub fn rmse(pred: &[f64], truth: &[f64]) -> f64 {
    if pred.is_empty() {
        return 0.0;
    }
    (pred
        .iter()
        .zip(truth)
        .map(|(p, t)| (p - t) * (p - t))
        .sum::<f64>()
        / pred.len() as f64)
        .sqrt()
}

/// Mean absolute error.
pub fn mae(pred: &[f64], truth: &[f64]) -> f64 {
    if pred.is_empty() {
        return 0.0;
    }
    pred.iter()
        .zip(truth)
        .map(|(p, t)| (p - t).abs())
        .sum::<f64>()
        / pred.len() as f64
}

/// The task's metrics of raw model outputs (`rows × outputs`, as the trainer defines
/// them) against the encoded target `y` (class indexes, -1 for a class the model never
/// saw; or the standardized target), names prefixed with `prefix`: accuracy, F1 and
/// (two classes) AUC, or RMSE and MAE in the target's units.
pub fn of_outputs(target: &Target, out: &[f32], y: &[f32], prefix: &str) -> Vec<(String, f64)> {
    let k = target.outputs();
    let mut m = Vec::new();
    match target {
        Target::Classification { classes, .. } => {
            let truth: Vec<i64> = y.iter().map(|v| *v as i64).collect();
            let pred: Vec<usize> = if k == 1 {
                out.iter().map(|z| usize::from(*z > 0.0)).collect()
            } else {
                out.chunks(k)
                    .map(|r| {
                        r.iter()
                            .enumerate()
                            .fold(
                                (0, f32::NEG_INFINITY),
                                |b, (i, v)| if *v > b.1 { (i, *v) } else { b },
                            )
                            .0
                    })
                    .collect()
            };
            m.push((format!("{prefix}accuracy"), accuracy(&pred, &truth)));
            m.push((format!("{prefix}f1"), f1(&pred, &truth, classes.len())));
            if k == 1 {
                let scores: Vec<f64> = out.iter().map(|z| f64::from(*z)).collect();
                let pos: Vec<bool> = truth.iter().map(|t| *t == 1).collect();
                if let Some(a) = auc(&scores, &pos) {
                    m.push((format!("{prefix}auc"), a));
                }
            }
        }
        Target::Regression { mean, std, .. } => {
            let pred: Vec<f64> = out.iter().map(|p| f64::from(*p) * std + mean).collect();
            let truth: Vec<f64> = y.iter().map(|y| f64::from(*y) * std + mean).collect();
            m.push((format!("{prefix}rmse"), rmse(&pred, &truth)));
            m.push((format!("{prefix}mae"), mae(&pred, &truth)));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_metrics_match_their_definitions() {
        let pred = [1, 1, 0, 0, 1];
        let truth = [1, 0, 0, 1, 1];
        assert_eq!(accuracy(&pred, &truth), 0.6);
        // TP 2, FP 1, FN 1.
        assert!((f1(&pred, &truth, 2) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(accuracy(&[0], &[-1]), 0.0);
        // Perfect ranking, reversed ranking, ties.
        assert_eq!(
            auc(&[0.1, 0.2, 0.8, 0.9], &[false, false, true, true]),
            Some(1.0)
        );
        assert_eq!(
            auc(&[0.9, 0.8, 0.2, 0.1], &[false, false, true, true]),
            Some(0.0)
        );
        assert_eq!(auc(&[0.5, 0.5], &[false, true]), Some(0.5));
        // scikit-learn: roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
        assert_eq!(
            auc(&[0.1, 0.4, 0.35, 0.8], &[false, false, true, true]),
            Some(0.75)
        );
        assert_eq!(auc(&[0.1], &[true]), None);
        assert!((f1(&[0, 1, 2], &[0, 1, 1], 3) - (1.0 + 2.0 / 3.0 + 0.0) / 3.0).abs() < 1e-12);
    }

    #[test]
    fn regression_metrics() {
        assert_eq!(rmse(&[1.0, 3.0], &[1.0, 1.0]), 2f64.sqrt());
        assert_eq!(mae(&[1.0, 3.0], &[1.0, 1.0]), 1.0);
    }
}
