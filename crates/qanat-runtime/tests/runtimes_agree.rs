//! The three runtimes on the same models: the native kernels, tract and onnxruntime give
//! the same outputs for the trainer's ONNX export (f32) and for the int8 model's ONNX
//! graph; corrupt and unsupported ONNX files are refused with the reason.
//!
//! onnxruntime needs its library: `QANAT_TEST_ONNXRUNTIME_LIB` names it (.ci/run
//! installs PyPI's `onnxruntime` and sets it); without it, on a developer's machine,
//! the onnxruntime half is skipped with a note.

use std::path::Path;

use qanat_model::Table;
use qanat_runtime::onnx::onnxruntime::{self, OrtModel};
use qanat_runtime::onnx::tract::TractModel;
use qanat_runtime::onnx::OnnxGraph;
use qanat_runtime::package::NativeModel;
use qanat_runtime::{Runtime, INT8_TOLERANCE};
use qanat_train::Trained;
use serde_json::json;

mod common;

/// 400 rows: two numeric columns with gaps, a text column with gaps and an unseen-at-
/// training value risk, and a 3-class label depending on all three.
fn mixed(dir: &Path) -> Table {
    let mut csv = String::from("x1,x2,colour,label\n");
    let mut s = 17u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    for i in 0..400 {
        let (x1, x2) = (next() * 4.0 - 2.0, next() * 10.0 - 3.0);
        let colour = ["red", "green", "blue", ""][i % 4];
        let score = x1 + 0.3 * x2 + [1.0, -1.0, 0.0, 0.5][i % 4];
        let label = if score < 0.0 {
            "low"
        } else if score < 1.5 {
            "mid"
        } else {
            "high"
        };
        let cell = |v: f64, gap: bool| {
            if gap {
                String::new()
            } else {
                format!("{v:.5}")
            }
        };
        csv.push_str(&format!(
            "{},{},{colour},{label}\n",
            cell(x1, i % 11 == 0),
            cell(x2, i % 13 == 0)
        ));
    }
    let path = dir.join("mixed.csv");
    std::fs::write(&path, csv).expect("write");
    Table::read_file(&path).expect("table")
}

fn train(table: &Table, hidden: &[usize]) -> (Trained, NativeModel, Vec<u8>) {
    let (t, native) = common::trained(
        table,
        json!({"target": "label", "model": "mlp", "hidden": hidden, "epochs": 30, "seed": 3}),
    );
    let onnx = qanat_train::onnx::onnx(&t.fitted.model, &t.prep).expect("onnx");
    (t, native, onnx)
}

fn ort(bytes: &[u8]) -> Option<OrtModel> {
    let lib = qanat_store::testing::service_var("QANAT_TEST_ONNXRUNTIME_LIB")?;
    onnxruntime::configure(Path::new(&lib));
    Some(OrtModel::load(bytes, 1).expect("onnxruntime loads the model"))
}

/// The largest difference, as a share of 1 + |reference|.
fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f32::max)
}

#[test]
fn native_tract_and_onnxruntime_agree_on_the_trainers_onnx_export() {
    let dir = tempfile::tempdir().expect("tmp");
    let table = mixed(dir.path());
    let (_, native, onnx) = train(&table, &[32, 16]);
    let want = native.predict(&table).expect("native");
    let tract = TractModel::load(&onnx).expect("tract loads the export");
    assert_eq!((tract.name(), tract.outputs()), ("tract", 3));
    let got = tract.predict(&table).expect("tract runs");
    eprintln!("tract vs native: {:.2e}", worst(&got, &want));
    assert!(worst(&got, &want) <= 1e-4);
    if let Some(ort) = ort(&onnx) {
        let got = ort.predict(&table).expect("onnxruntime runs");
        eprintln!("onnxruntime vs native: {:.2e}", worst(&got, &want));
        assert!(worst(&got, &want) <= 1e-4);
    }
}

#[test]
fn the_int8_graph_runs_on_tract_and_onnxruntime_within_the_stated_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let table = mixed(dir.path());
    let (_, f32_model, _) = train(&table, &[64, 32]);
    let int8 = f32_model.quantize_dynamic().expect("int8");
    let onnx = int8.to_onnx().expect("int8 graph");
    let ops: Vec<String> = OnnxGraph::read(&onnx)
        .expect("reads")
        .proto
        .graph
        .expect("graph")
        .node
        .iter()
        .map(|n| n.op_type.clone())
        .collect();
    assert!(ops.iter().any(|o| o == "MatMulInteger"), "{ops:?}");

    let f32_out = f32_model.predict(&table).expect("f32");
    let scale = f32_out.iter().fold(0f32, |m, v| m.max(v.abs()));
    let within = |name: &str, got: &[f32]| {
        let d = got
            .iter()
            .zip(&f32_out)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!("{name} int8 vs f32: {d:.4} of {scale:.3}");
        assert!(
            d <= INT8_TOLERANCE * scale,
            "{name}: {d} > {INT8_TOLERANCE} × {scale}"
        );
    };
    within("native", &int8.predict(&table).expect("native int8"));
    let tract = TractModel::load(&onnx).expect("tract loads the int8 graph");
    let t = tract.predict(&table).expect("tract int8");
    within("tract", &t);
    if let Some(ort) = ort(&onnx) {
        let o = ort.predict(&table).expect("onnxruntime int8");
        within("onnxruntime", &o);
        // The same quantization arithmetic: the two agree far more closely.
        eprintln!("tract vs onnxruntime int8: {:.2e}", worst(&t, &o));
        assert!(worst(&t, &o) <= 1e-3);
    }
}

#[test]
fn corrupt_and_unsupported_onnx_files_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tmp");
    let table = mixed(dir.path());
    let (_, _, onnx) = train(&table, &[8]);
    let err = |r: qanat_runtime::Result<TractModel>| r.expect_err("refused").to_string();

    let e = err(TractModel::load(b"definitely not a protobuf \xff\xff\xff"));
    assert!(e.contains("not an ONNX model"), "{e}");
    let e = err(TractModel::load(&onnx[..onnx.len() / 2]));
    assert!(e.contains("not an ONNX model"), "{e}");
    let e = err(TractModel::load(&[]));
    assert!(
        e.contains("no graph") || e.contains("not an ONNX model"),
        "{e}"
    );

    // An operator no runtime here knows.
    let mut g = OnnxGraph::read(&onnx).expect("reads");
    let graph = g.proto.graph.as_mut().expect("graph");
    let relu = graph
        .node
        .iter_mut()
        .find(|n| n.op_type == "Relu")
        .expect("a Relu");
    relu.op_type = "NoSuchOperator".into();
    let e = err(TractModel::load(&g.to_bytes()));
    assert!(
        e.contains("tract cannot") && e.contains("NoSuchOperator"),
        "{e}"
    );
    if let Some(lib) = qanat_store::testing::service_var("QANAT_TEST_ONNXRUNTIME_LIB") {
        onnxruntime::configure(Path::new(&lib));
        let e = OrtModel::load(&g.to_bytes(), 1)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("NoSuchOperator"), "{e}");
    }

    // A table without a column the model takes.
    let tract = TractModel::load(&onnx).expect("loads");
    let other = Table::read_file(&{
        let p = dir.path().join("other.csv");
        std::fs::write(&p, "x1,colour\n1.0,red\n").expect("write");
        p
    })
    .expect("table");
    let e = tract.predict(&other).expect_err("refused").to_string();
    assert!(e.contains("'x2'"), "{e}");
}

#[test]
fn static_int8_is_calibrated_on_data_and_runs_on_every_runtime() {
    use qanat_runtime::optimize::{optimize, Method, Settings};
    let dir = tempfile::tempdir().expect("tmp");
    let table = mixed(dir.path());
    let (t, f32_model, _) = train(&table, &[64, 32]);
    let prep = &f32_model.spec().preprocessing;
    let x = prep
        .encode_features(&table, &t.train_rows)
        .expect("encoded");
    let stat = f32_model
        .with_mlp(
            f32_model
                .mlp()
                .quantize_static(&x, t.train_rows.len())
                .expect("calibrated"),
        )
        .expect("model");
    assert!(stat.mlp().layers()[0].input_amax().is_some());
    // Written and read back, the calibration stays.
    let back = NativeModel::from_bytes(
        &serde_json::to_vec(stat.spec()).expect("spec"),
        &stat.mlp().to_safetensors().expect("weights"),
    )
    .expect("reads");
    assert_eq!(back.mlp(), stat.mlp());

    let f32_out = f32_model.predict(&table).expect("f32");
    let scale = f32_out.iter().fold(0f32, |m, v| m.max(v.abs()));
    let native = stat.predict(&table).expect("static");
    let d = native
        .iter()
        .zip(&f32_out)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!("static int8 vs f32: {d:.4} of {scale:.3}");
    assert!(d <= INT8_TOLERANCE * scale, "{d}");

    let onnx = stat.to_onnx().expect("graph");
    let g = OnnxGraph::read(&onnx).expect("reads");
    let ops: Vec<&str> = g
        .proto
        .graph
        .as_ref()
        .expect("graph")
        .node
        .iter()
        .map(|n| n.op_type.as_str())
        .collect();
    assert!(
        ops.contains(&"QuantizeLinear") && !ops.contains(&"DynamicQuantizeLinear"),
        "{ops:?}"
    );
    let tract = TractModel::load(&onnx)
        .expect("tract")
        .predict(&table)
        .expect("runs");
    // The same fixed scales: only rounding ties and the -128 end can differ.
    eprintln!(
        "tract static vs native static: {:.2e}",
        worst(&tract, &native)
    );
    assert!(worst(&tract, &native) <= 1e-3, "{}", worst(&tract, &native));
    if let Some(ort) = ort(&onnx) {
        let o = ort.predict(&table).expect("onnxruntime static");
        eprintln!(
            "onnxruntime static vs tract static: {:.2e}",
            worst(&o, &tract)
        );
        assert!(worst(&o, &tract) <= 1e-3);
    }

    // Through the gate: calibrated on the input's training share, measured on its
    // holdout; calibration data without the model's columns is refused by name.
    let rows: Vec<usize> = (0..table.rows()).collect();
    let settings = Settings {
        seconds: 0.01,
        ..Settings::default()
    };
    let (_, report) =
        optimize(&f32_model, Method::Int8Static, &table, &rows, &settings).expect("gated");
    assert!(report.passed, "{}", report.verdict);
    let p = dir.path().join("other.csv");
    std::fs::write(
        &p,
        "x1,colour,label\n".to_string() + &"1.0,red,low\n".repeat(40),
    )
    .expect("w");
    let other = Table::read_file(&p).expect("table");
    let rows: Vec<usize> = (0..other.rows()).collect();
    let e = optimize(&f32_model, Method::Int8Static, &other, &rows, &settings)
        .expect_err("wrong schema")
        .to_string();
    assert!(e.contains("'x2'"), "{e}");
}

#[test]
fn served_tensors_agree_on_tract_and_onnxruntime_and_a_gpu_needs_its_cuda_provider() {
    use qanat_runtime::onnx::build::{batched, model, node, pb};
    use qanat_runtime::onnx::onnxruntime::{Device, OrtTensorModel};
    use qanat_runtime::onnx::tract::TensorModel;
    let onnx = model(pb::GraphProto {
        node: vec![node("Sigmoid", &["x"], "y")],
        input: vec![batched("x", 4)],
        output: vec![batched("y", 4)],
        ..pb::GraphProto::default()
    });
    let x: Vec<f32> = (0..12).map(|i| i as f32 / 3.0 - 2.0).collect();
    let want: Vec<f32> = x.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    let tract = TensorModel::load(&onnx).expect("tract loads it");
    assert_eq!(
        (tract.layout().row_width(), tract.layout().outputs()),
        (4, 4)
    );
    let got = tract.run(&x, 3).expect("tract runs");
    assert!(
        worst(&got, &want) <= 1e-6,
        "tract: {:.2e}",
        worst(&got, &want)
    );
    let Some(lib) = qanat_store::testing::service_var("QANAT_TEST_ONNXRUNTIME_LIB") else {
        return;
    };
    onnxruntime::configure(Path::new(&lib));
    let cpu = OrtTensorModel::load(&onnx, Device::Cpu).expect("onnxruntime loads it");
    assert_eq!(cpu.device().to_string(), "cpu");
    let got = cpu.run(&x, 3).expect("onnxruntime runs");
    assert!(
        worst(&got, &want) <= 1e-6,
        "onnxruntime: {:.2e}",
        worst(&got, &want)
    );
    // On CUDA: with the GPU build and a GPU, the same answers; with PyPI's CPU build
    // (what CI installs), refused, saying why, not run on the CPU instead.
    match OrtTensorModel::load(&onnx, Device::Cuda(0)) {
        Ok(gpu) => {
            assert_eq!(gpu.device().to_string(), "cuda:0");
            let got = gpu.run(&x, 3).expect("runs on the GPU");
            assert!(
                worst(&got, &want) <= 1e-5,
                "cuda: {:.2e}",
                worst(&got, &want)
            );
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("CUDA execution provider"), "{e}");
        }
    }
}
