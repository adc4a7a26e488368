//! The native runtime on models the trainer produced from the tables in examples/data:
//! it reproduces the trainer's outputs, and int8 keeps the accuracy.

use std::path::{Path, PathBuf};

use qanat_model::package::Precision;
use qanat_model::{Table, TrainConfig};
use qanat_runtime::evaluate::quality;
use qanat_runtime::package::{ModelPackage, NativeModel};
use qanat_runtime::{Runtime, RuntimeKind};
use qanat_train::{train_table, Trained};
use serde_json::json;

fn example(name: &str) -> Table {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data")
        .join(name);
    Table::read_file(&p).expect("example table")
}

/// An example table, the trainer's run on it, the package that run wrote as the train
/// job does (weights + spec) in `dir`, and that package on the native runtime.
struct Trial {
    table: Table,
    t: Trained,
    dir: tempfile::TempDir,
    m: NativeModel,
}

/// The config of an MLP on `target` with `hidden` layers, trained `epochs` from `seed`.
fn mlp(target: &str, hidden: &[usize], epochs: u32, seed: u64) -> serde_json::Value {
    json!({"target": target, "model": "mlp", "hidden": hidden, "epochs": epochs, "seed": seed})
}

fn train(file: &str, config: serde_json::Value) -> Trial {
    let table = example(file);
    let dir = tempfile::tempdir().expect("tmp");
    let c = TrainConfig::from_value(config).expect("config");
    let t = train_table(&table, &c, None, |_| Ok(())).expect("trained");
    let model = &t.fitted.model;
    std::fs::write(
        dir.path().join("weights.safetensors"),
        qanat_train::export::safetensors(model).expect("weights"),
    )
    .expect("write weights");
    std::fs::write(
        dir.path().join("spec.json"),
        serde_json::to_vec(&qanat_train::export::spec(model, &t.prep)).expect("spec"),
    )
    .expect("write spec");
    let m = native(dir.path());
    Trial { table, t, dir, m }
}

/// The package in `dir` on the native runtime.
fn native(dir: &Path) -> NativeModel {
    ModelPackage::open(dir)
        .expect("package")
        .native()
        .expect("native")
}

fn trainer_outputs(t: &Trained, table: &Table, rows: &[usize]) -> Vec<f32> {
    let enc = t.prep.encode(table, rows, &[]).expect("encode");
    qanat_train::fit::outputs(&t.fitted.model, &enc, &Default::default()).expect("outputs")
}

#[test]
fn native_f32_reproduces_the_trainers_outputs_and_int8_keeps_the_accuracy() {
    let Trial { table, t, dir, .. } =
        train("breast_cancer.csv", mlp("diagnosis", &[64, 32], 40, 5));
    let package = ModelPackage::open(dir.path()).expect("package");
    let f32_model = package.native().expect("native");
    assert_eq!(f32_model.spec().precision(), Precision::F32);

    let all: Vec<usize> = (0..table.rows()).collect();
    let want = trainer_outputs(&t, &table, &all);
    let got = f32_model.predict(&table).expect("predict");
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
    }

    let int8 = f32_model.quantize_dynamic().expect("quantized");
    let q32 = quality(&f32_model, &t.prep, &table, &t.valid_rows).expect("f32 quality");
    let q8 = quality(&int8, &t.prep, &table, &t.valid_rows).expect("int8 quality");
    eprintln!("holdout accuracy: f32 {} int8 {}", q32.value, q8.value);
    assert_eq!(q32.metric, "accuracy");
    assert!(q32.value >= 0.9, "{q32:?}");
    assert!(q8.value >= q32.value - 0.01, "{q8:?} vs {q32:?}");

    // Written and read back, the int8 package is the same model, a quarter the size.
    let out = tempfile::tempdir().expect("tmp");
    let written = ModelPackage::write(out.path(), &int8).expect("written");
    assert_eq!(written.spec().precision(), Precision::Int8);
    let back = written.native().expect("reads");
    assert_eq!(
        back.predict(&table).expect("predict"),
        int8.predict(&table).expect("predict")
    );
    assert!(int8.mlp().weight_bytes() * 3 < f32_model.mlp().weight_bytes());
}

#[test]
fn int8_regression_error_stays_within_one_percent() {
    let Trial { table, t, m, .. } = train("diabetes.csv", mlp("progression", &[32], 60, 2));
    let q32 = quality(&m, &t.prep, &table, &t.valid_rows).expect("f32");
    let q8 = quality(
        &m.quantize_dynamic().expect("int8"),
        &t.prep,
        &table,
        &t.valid_rows,
    )
    .expect("int8");
    eprintln!("holdout rmse: f32 {} int8 {}", q32.value, q8.value);
    assert_eq!(q32.metric, "rmse");
    assert!(q8.value <= q32.value * 1.01, "{q8:?} vs {q32:?}");
}

#[test]
fn packages_that_cannot_be_run_are_refused_with_a_reason() {
    let Trial { table, dir, m, .. } = train(
        "breast_cancer.csv",
        json!({"target": "diagnosis", "model": "logistic", "epochs": 2}),
    );
    let spec = std::fs::read(dir.path().join("spec.json")).expect("spec");
    let weights = std::fs::read(dir.path().join("weights.safetensors")).expect("weights");

    let case = |name: &str, files: &[(&str, &[u8])], want: &str| {
        let d = tempfile::tempdir().expect("tmp");
        for (f, b) in files {
            std::fs::write(d.path().join(f), b).expect("write");
        }
        let err = ModelPackage::open(d.path())
            .and_then(|p| p.native())
            .map(|_: NativeModel| ())
            .expect_err(name);
        assert!(err.to_string().contains(want), "{name}: {err}");
    };
    case(
        "no signature",
        &[("weights.safetensors", &weights)],
        "has no spec.json",
    );
    case(
        "a signature that is not JSON",
        &[("spec.json", b"{"), ("weights.safetensors", &weights)],
        "not a model signature",
    );
    case(
        "corrupt weights",
        &[
            ("spec.json", &spec),
            ("weights.safetensors", &weights[..40]),
        ],
        "cannot be read",
    );
    let mut wide: serde_json::Value = serde_json::from_slice(&spec).expect("json");
    wide["layers"] = json!([31, 1]);
    case(
        "weights that do not fit the signature",
        &[
            ("spec.json", &serde_json::to_vec(&wide).expect("json")),
            ("weights.safetensors", &weights),
        ],
        "says [31, 1]",
    );
    // A table without a feature column the model needs.
    let mut short = table.clone();
    short.columns.retain(|c| c.name != "radius_mean");
    let err = m.predict(&short).expect_err("missing column");
    assert!(err.to_string().contains("radius_mean"), "{err}");
}

#[test]
fn the_gate_passes_a_result_within_the_budget_and_refuses_one_over_it() {
    use qanat_runtime::optimize::{optimize, Budget, Method, Settings};
    let Trial { table, t, m, .. } = train("breast_cancer.csv", mlp("diagnosis", &[32], 20, 3));
    // Four runs of the gate on int8: quick timings, a budget and a runtime each.
    let quick = Settings {
        seconds: 0.01,
        ..Settings::default()
    };
    let gate = |rows: &[usize], settings: Settings| {
        optimize(&m, Method::Int8Dynamic, &table, rows, &settings)
    };
    let (q, report) = gate(&t.valid_rows, quick).expect("optimized");
    assert_eq!(q.mlp().precision(), Precision::Int8);
    assert!(report.passed, "{}", report.verdict);
    assert!(report.verdict.starts_with("passed"), "{}", report.verdict);
    assert!(report.size_ratio() < 0.5, "{report:?}");
    assert_eq!(report.holdout_rows, t.valid_rows.len());
    // A budget that demands a gain of 50 points cannot be met: refused, with why.
    let strict = Budget {
        accuracy_points: -50.0,
        ..Budget::default()
    };
    let (_, refused) = gate(
        &t.valid_rows,
        Settings {
            budget: strict,
            ..quick
        },
    )
    .expect("ran");
    assert!(!refused.passed);
    assert!(
        refused.verdict.starts_with("refused") && refused.verdict.contains("exceeds the budget"),
        "{}",
        refused.verdict
    );
    // No holdout rows: a clear error, not a report.
    let err = gate(&[], quick).expect_err("empty holdout");
    assert!(err.to_string().contains("holdout has no rows"), "{err}");

    // Measured on tract, from the two models' ONNX graphs: the same verdict, the
    // ONNX sizes and the runtime in the report.
    let (_, on_tract) = gate(
        &t.valid_rows,
        Settings {
            runtime: RuntimeKind::Tract,
            ..quick
        },
    )
    .expect("measured on tract");
    assert!(on_tract.passed, "{}", on_tract.verdict);
    assert_eq!(on_tract.optimized.runtime, RuntimeKind::Tract);
    assert!(on_tract.optimized.size_bytes < on_tract.original.size_bytes);
    assert!(
        (on_tract.original.quality.value - report.original.quality.value).abs() < 1e-9,
        "{on_tract:?}"
    );
}
