//! Pruning on a model the trainer produced (breast cancer): magnitude pruning reaches
//! its target sparsity and keeps it through fine-tuning; structured pruning shrinks the
//! hidden layers; both keep the holdout accuracy close to the original's.

mod common;

use qanat_model::Table;
use qanat_runtime::evaluate::quality;
use qanat_runtime::onnx::tract::TractModel;
use qanat_runtime::package::NativeModel;
use qanat_runtime::prune::{self, FineTune};
use qanat_runtime::Runtime;
use qanat_train::Trained;
use serde_json::json;

fn trained() -> (Table, Trained, NativeModel) {
    let table = common::example("breast_cancer.csv");
    let (t, native) = common::trained(
        &table,
        json!({"target": "diagnosis", "model": "mlp", "hidden": [64, 32], "epochs": 30, "seed": 8}),
    );
    (table, t, native)
}

#[test]
fn magnitude_pruning_reaches_and_keeps_its_sparsity_and_the_accuracy() {
    let (table, t, model) = trained();
    let before = quality(&model, &t.prep, &table, &t.valid_rows)
        .expect("q")
        .value;
    let (pruned, masks) = prune::magnitude(model.mlp(), 0.7).expect("pruned");
    let s = prune::sparsity(&pruned);
    assert!((s - 0.7).abs() < 0.01, "sparsity {s}");
    // Fine-tuned on the training rows, with the first validation half choosing the
    // epoch and the second measuring.
    let (valid, holdout) = t.valid_rows.split_at(t.valid_rows.len() / 2);
    let tuned = prune::fine_tuned(
        &model,
        &pruned,
        Some(masks),
        &table,
        &t.train_rows,
        valid,
        FineTune::default(),
    )
    .expect("fine-tuned");
    let after_s = prune::sparsity(tuned.mlp());
    assert!(
        after_s >= 0.69,
        "fine-tuning let pruned weights back: {after_s}"
    );
    let q0 = quality(&model, &t.prep, &table, holdout).expect("q").value;
    let q1 = quality(&tuned, &t.prep, &table, holdout).expect("q").value;
    eprintln!("accuracy: trained {before:.4}; on the held-out half {q0:.4} → pruned 70% {q1:.4}");
    assert!(q1 >= q0 - 0.03, "{q1} vs {q0}");
}

#[test]
fn structured_pruning_shrinks_the_layers_and_runs_everywhere() {
    let (table, t, model) = trained();
    let smaller = prune::structured(model.mlp(), 0.5).expect("pruned");
    let widths: Vec<usize> = smaller.layers().iter().map(|l| l.outputs()).collect();
    assert_eq!(widths, vec![32, 16, 1]);
    let (valid, holdout) = t.valid_rows.split_at(t.valid_rows.len() / 2);
    let tuned = prune::fine_tuned(
        &model,
        &smaller,
        None,
        &table,
        &t.train_rows,
        valid,
        FineTune::default(),
    )
    .expect("fine-tuned");
    assert_eq!(tuned.spec().layers, vec![30, 32, 16, 1]);
    assert!(tuned.mlp().weight_bytes() * 2 < model.mlp().weight_bytes());
    let q0 = quality(&model, &t.prep, &table, holdout).expect("q").value;
    let q1 = quality(&tuned, &t.prep, &table, holdout).expect("q").value;
    eprintln!("accuracy on the held-out half: {q0:.4} → half the units {q1:.4}");
    assert!(q1 >= q0 - 0.03, "{q1} vs {q0}");
    // Its ONNX graph runs on tract with the same outputs.
    let tract = TractModel::load(&tuned.to_onnx().expect("onnx")).expect("tract");
    let (a, b) = (
        tuned.predict(&table).expect("native"),
        tract.predict(&table).expect("tract"),
    );
    let worst = a
        .iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(worst < 1e-4, "{worst}");
}

#[test]
fn bad_pruning_requests_are_refused_with_what_to_fix() {
    let (_, _, model) = trained();
    for bad in [0.0, 1.0, -0.2, f64::NAN] {
        let e = prune::magnitude(model.mlp(), bad)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("above 0 and below 1"), "{e}");
    }
    let int8 = model.quantize_dynamic().expect("int8");
    let e = prune::structured(int8.mlp(), 0.5)
        .expect_err("int8")
        .to_string();
    assert!(e.contains("f32 model"), "{e}");
}
