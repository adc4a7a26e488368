//! Distillation on a model the trainer produced (breast cancer, hidden [64, 32]): a
//! student with one hidden layer of 8 reaches the fidelity the report states, from a
//! native teacher through the gate, and from the same teacher's ONNX graph on tract.

mod common;

use qanat_model::Table;
use qanat_runtime::distill::{self, fidelity};
use qanat_runtime::evaluate::labelled_rows;
use qanat_runtime::onnx::tract::TractModel;
use qanat_runtime::optimize::{optimize, split, Method, Settings};
use qanat_runtime::package::NativeModel;
use qanat_runtime::prune::FineTune;
use serde_json::json;

fn teacher() -> (Table, NativeModel) {
    let table = common::example("breast_cancer.csv");
    let (_, native) = common::trained(
        &table,
        json!({"target": "diagnosis", "model": "mlp", "hidden": [64, 32], "epochs": 30, "seed": 6}),
    );
    (table, native)
}

#[test]
fn a_small_student_reaches_its_reported_fidelity() {
    let (table, teacher) = teacher();
    let rows = labelled_rows(&table, &teacher.spec().preprocessing).expect("rows");
    let method = Method::Distill {
        hidden: vec![8],
        temperature: distill::TEMPERATURE,
        alpha: distill::ALPHA,
    };
    let settings = Settings {
        seconds: 0.01,
        tune: FineTune {
            epochs: 30,
            ..FineTune::default()
        },
        ..Settings::default()
    };
    let (student, report) = optimize(&teacher, method, &table, &rows, &settings).expect("ran");
    assert_eq!(student.spec().layers, vec![30, 8, 1]);
    eprintln!(
        "student fidelity {:.4}; accuracy teacher {:.4} student {:.4}",
        report.fidelity, report.original.quality.value, report.optimized.quality.value
    );
    assert!(report.fidelity >= 0.93, "{report:?}");
    // The stated fidelity is what the two models do on the holdout.
    let (holdout, _, _) = split(&rows, settings.tune.seed).expect("split");
    let again = fidelity(
        &teacher,
        &student,
        &teacher.spec().preprocessing.target,
        &table,
        &holdout,
    )
    .expect("fidelity");
    assert!(
        (again - report.fidelity).abs() < 1e-12,
        "{again} vs {}",
        report.fidelity
    );
    assert!(student.mlp().weight_bytes() * 10 < teacher.mlp().weight_bytes());
}

#[test]
fn an_onnx_teacher_on_tract_teaches_as_well() {
    let (table, teacher) = teacher();
    let rows = labelled_rows(&table, &teacher.spec().preprocessing).expect("rows");
    let (holdout, train, valid) = split(&rows, 0).expect("split");
    let onnx = TractModel::load(&teacher.to_onnx().expect("onnx")).expect("tract");
    let student = distill::distill(
        &onnx,
        &teacher.spec().preprocessing,
        &[8],
        distill::TEMPERATURE,
        distill::ALPHA,
        &table,
        &train,
        &valid,
        FineTune {
            epochs: 30,
            ..FineTune::default()
        },
    )
    .expect("distilled");
    let f = fidelity(
        &onnx,
        &student,
        &teacher.spec().preprocessing.target,
        &table,
        &holdout,
    )
    .expect("fidelity");
    eprintln!("fidelity to the ONNX teacher {f:.4}");
    assert!(f >= 0.93, "{f}");
    assert_eq!(
        fidelity(
            &teacher,
            &teacher,
            &teacher.spec().preprocessing.target,
            &table,
            &holdout
        )
        .expect("self"),
        1.0
    );
    let e = distill::distill(
        &onnx,
        &teacher.spec().preprocessing,
        &[],
        2.0,
        0.5,
        &table,
        &train,
        &valid,
        FineTune::default(),
    )
    .expect_err("no hidden layers");
    assert!(e.to_string().contains("hidden layer widths"), "{e}");
}
