//! The trainer on the tables shipped in examples/data: it learns them, and a seed
//! makes a run repeatable bit for bit.

use std::path::PathBuf;

use qanat_model::{Table, TrainConfig};
use qanat_train::train_table;
use serde_json::json;

fn example(name: &str) -> Table {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data")
        .join(name);
    Table::read_file(&p).expect("example table")
}

#[test]
fn logistic_regression_and_an_mlp_learn_the_breast_cancer_data() {
    let t = example("breast_cancer.csv");
    assert_eq!(t.rows(), 569);
    // A majority-class guess scores 0.63.
    for (model, at_least) in [("logistic", 0.96), ("mlp", 0.94)] {
        let c = TrainConfig::from_value(json!({
            "target": "diagnosis", "model": model, "epochs": 60, "batch_size": 32, "seed": 7,
        }))
        .expect("config");
        let mut epochs = 0;
        let r = train_table(&t, &c, None, |_| {
            epochs += 1;
            Ok(())
        })
        .expect("trained");
        let best = &r.fitted.history[r.fitted.best_epoch as usize];
        let acc = best.get("val_accuracy").expect("val_accuracy");
        eprintln!(
            "{model}: best epoch {} of {}: {:?}",
            r.fitted.best_epoch, r.fitted.epochs_run, best.values
        );
        assert!(acc >= at_least, "{model}: validation accuracy {acc}");
        assert!(
            best.get("val_auc").expect("auc") > 0.97,
            "{model}: {best:?}"
        );
        assert_eq!(epochs as u32, r.fitted.epochs_run);
        // 20% of each class held out: 42 of 212 malignant, 71 of 357 benign.
        assert_eq!((r.train_rows.len(), r.valid_rows.len()), (456, 113));
    }
}

#[test]
fn a_regression_mlp_learns_the_diabetes_data() {
    let t = example("diabetes.csv");
    let c = TrainConfig::from_value(json!({
        "target": "progression", "model": "linear", "epochs": 200, "learning_rate": 0.05,
    }))
    .expect("config");
    let r = train_table(&t, &c, None, |_| Ok(())).expect("trained");
    let best = &r.fitted.history[r.fitted.best_epoch as usize];
    // The target's standard deviation is about 77: a linear model explains about half.
    let rmse = best.get("val_rmse").expect("rmse");
    eprintln!(
        "linear: best epoch {}: {:?}",
        r.fitted.best_epoch, best.values
    );
    assert!(rmse < 58.0, "validation RMSE {rmse}");
}

#[test]
fn a_seed_makes_a_cpu_run_bit_reproducible() {
    let t = example("breast_cancer.csv");
    let c = TrainConfig::from_value(json!({"target": "diagnosis", "epochs": 5, "seed": 3}))
        .expect("config");
    let run = || {
        let mut losses = Vec::new();
        train_table(&t, &c, None, |e| {
            losses.push(e.metrics.get("train_loss").expect("loss").to_bits());
            Ok(())
        })
        .expect("trained");
        losses
    };
    // Two fits at once in the process (as tests and a sweep's trials run) must not take
    // each other's draws: each gives what a fit alone gives.
    let (a, b) = std::thread::scope(|s| {
        let other = s.spawn(run);
        let b = run();
        (other.join().expect("the other fit"), b)
    });
    let alone = run();
    assert_eq!(a, alone);
    assert_eq!(b, alone);
}

/// The weights of a trained model as bytes (safetensors), to compare bit for bit.
fn weights(r: &qanat_train::Trained) -> Vec<u8> {
    qanat_train::export::safetensors(&r.fitted.model).expect("weights")
}

#[test]
fn a_fit_resumed_from_any_epoch_ends_with_the_bits_of_an_uninterrupted_one() {
    let t = example("breast_cancer.csv");
    // Early stopping on (patience 3) and a schedule: both have state to carry over.
    let c = TrainConfig::from_value(json!({
        "target": "diagnosis", "model": "mlp", "hidden": [16], "epochs": 12, "seed": 5,
        "patience": 3, "schedule": {"kind": "cosine"}, "learning_rate": 0.05,
    }))
    .expect("config");
    let mut checkpoints = Vec::new();
    let whole = train_table(&t, &c, None, |e| {
        checkpoints.push(e.checkpoint()?);
        Ok(())
    })
    .expect("trained");
    assert!(checkpoints.len() >= 3, "{}", checkpoints.len());
    for (i, ckpt) in checkpoints.iter().enumerate() {
        let mut seen = Vec::new();
        let resumed = train_table(&t, &c, Some(ckpt), |e| {
            seen.push(e.metrics.epoch);
            Ok(())
        })
        .expect("resumed");
        assert_eq!(
            seen,
            ((i as u32 + 1)..whole.fitted.epochs_run).collect::<Vec<_>>()
        );
        assert_eq!(
            weights(&resumed),
            weights(&whole),
            "resumed after epoch {i}"
        );
        assert_eq!(resumed.fitted.best_epoch, whole.fitted.best_epoch);
        assert_eq!(resumed.fitted.history, whole.fitted.history);
    }
    // Another seed's checkpoint, or a damaged one, is refused with what is wrong.
    let other = TrainConfig {
        seed: 6,
        ..c.clone()
    };
    let e = train_table(&t, &other, Some(&checkpoints[0]), |_| Ok(())).expect_err("other");
    assert!(e.to_string().contains("another config"), "{e}");
    let mut bad = checkpoints[0].clone();
    let n = bad.len();
    bad[n - 3] ^= 1;
    let e = train_table(&t, &c, Some(&bad), |_| Ok(())).expect_err("damaged");
    assert!(e.to_string().contains("damaged"), "{e}");
    let e = train_table(&t, &c, Some(&bad[..40]), |_| Ok(())).expect_err("short");
    assert!(e.to_string().contains("checkpoint"), "{e}");
}
