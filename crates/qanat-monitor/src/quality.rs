//! Live quality: a model's answers scored against the ground truth posted later for
//! the same requests — accuracy and ROC AUC for classifiers, RMSE for regressors.

pub use qanat_types::monitor::quality::LiveQuality;

use serde_json::Value;

/// One labelled row: what the model answered and what was true.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The predicted class (`label` output), if the model gives one.
    pub label: Option<String>,
    /// The positive class's probability (`probability` output, binary models).
    pub probability: Option<f64>,
    /// The predicted value (`prediction` output, regressors).
    pub prediction: Option<f64>,
    pub truth: Value,
}

/// A label value as a class name: text as is, whole numbers without a fraction
/// (`1`, not `1.0`), booleans as `true`/`false`.
pub fn class_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
            _ => n.to_string(),
        }),
        _ => None,
    }
}

fn number_of(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
    .filter(|x: &f64| x.is_finite())
}

/// Scores `rows`: accuracy where the model predicts a class, AUC where it also gives
/// a binary probability and both classes occur among the labels, RMSE where it
/// predicts a number.
pub fn score(rows: &[Scored]) -> LiveQuality {
    let mut q = LiveQuality {
        labelled: rows.len() as u64,
        ..LiveQuality::default()
    };
    let classified: Vec<(&str, String)> = rows
        .iter()
        .filter_map(|r| Some((r.label.as_deref()?, class_of(&r.truth)?)))
        .collect();
    if !classified.is_empty() {
        let right = classified.iter().filter(|(p, t)| p == t).count();
        q.accuracy = Some(right as f64 / classified.len() as f64);
    }
    q.auc = auc(rows);
    let errors: Vec<f64> = rows
        .iter()
        .filter_map(|r| Some(r.prediction? - number_of(&r.truth)?))
        .collect();
    if !errors.is_empty() {
        let mse = errors.iter().map(|e| e * e).sum::<f64>() / errors.len() as f64;
        q.rmse = Some(mse.sqrt());
    }
    q
}

/// ROC AUC of the binary probability. The positive class is the one the model names
/// when its probability is at least 0.5 (its second class); the other class seen
/// among the labels is the negative one.
fn auc(rows: &[Scored]) -> Option<f64> {
    let with_p: Vec<(&Scored, f64)> = rows
        .iter()
        .filter_map(|r| Some((r, r.probability.filter(|p| p.is_finite())?)))
        .collect();
    let positive = with_p
        .iter()
        .find(|(r, p)| *p >= 0.5 && r.label.is_some())
        .and_then(|(r, _)| r.label.clone())
        .or_else(|| {
            // Every answer said "negative": the positive class is the label that
            // differs from what the model named.
            let negative = with_p.iter().find_map(|(r, _)| r.label.clone())?;
            with_p
                .iter()
                .filter_map(|(r, _)| class_of(&r.truth))
                .find(|c| *c != negative)
        })?;
    let mut scored: Vec<(f64, bool)> = with_p
        .iter()
        .filter_map(|(r, p)| Some((*p, class_of(&r.truth)? == positive)))
        .collect();
    let pos = scored.iter().filter(|(_, y)| *y).count();
    let neg = scored.len() - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    // Mann–Whitney U: the share of (positive, negative) pairs ranked right, ties half.
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < scored.len() {
        let mut j = i;
        while j < scored.len() && scored[j].0 == scored[i].0 {
            j += 1;
        }
        // Ranks i+1..=j share their mean.
        let mean_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum += mean_rank * scored[i..j].iter().filter(|(_, y)| *y).count() as f64;
        i = j;
    }
    let (pos, neg) = (pos as f64, neg as f64);
    Some((rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(label: &str, p: f64, truth: Value) -> Scored {
        Scored {
            label: Some(label.into()),
            probability: Some(p),
            prediction: None,
            truth,
        }
    }

    /// AUC by its definition: every (positive, negative) pair, ties counted half.
    fn auc_by_pairs(ps: &[(f64, bool)]) -> f64 {
        let (mut good, mut pairs) = (0.0, 0.0);
        for (a, ya) in ps {
            for (b, yb) in ps {
                if *ya && !*yb {
                    pairs += 1.0;
                    good += if a > b {
                        1.0
                    } else if a == b {
                        0.5
                    } else {
                        0.0
                    };
                }
            }
        }
        good / pairs
    }

    #[test]
    fn accuracy_and_auc_score_a_binary_classifier() {
        let rows = vec![
            row("M", 0.9, json!("M")),
            row("M", 0.7, json!("B")),
            row("B", 0.2, json!("B")),
            row("B", 0.4, json!("M")),
            row("B", 0.4, json!("B")),
        ];
        let q = score(&rows);
        assert_eq!(q.labelled, 5);
        assert_eq!(q.accuracy, Some(3.0 / 5.0));
        let ps: Vec<(f64, bool)> = rows
            .iter()
            .map(|r| (r.probability.expect("p"), r.truth == json!("M")))
            .collect();
        let want = auc_by_pairs(&ps);
        assert!(
            (q.auc.expect("auc") - want).abs() < 1e-12,
            "{q:?} vs {want}"
        );
        assert_eq!(q.rmse, None);
    }

    #[test]
    fn numeric_labels_match_class_names_and_regressors_get_rmse() {
        let rows = vec![row("1", 0.8, json!(1)), row("0", 0.1, json!(1.0))];
        assert_eq!(score(&rows).accuracy, Some(0.5));
        let reg: Vec<Scored> = [(1.0, 2.0), (3.0, 3.0)]
            .iter()
            .map(|(p, t)| Scored {
                label: None,
                probability: None,
                prediction: Some(*p),
                truth: json!(t),
            })
            .collect();
        let q = score(&reg);
        assert!((q.rmse.expect("rmse") - (0.5f64).sqrt()).abs() < 1e-12);
        assert_eq!(q.accuracy, None);
        // One class only among the labels: no AUC, never a wrong one.
        assert_eq!(score(&[row("M", 0.9, json!("M"))]).auc, None);
    }
}
