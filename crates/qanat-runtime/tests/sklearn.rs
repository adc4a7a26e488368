//! scikit-learn models trained and pickled by the real scikit-learn
//! (fixtures/sklearn/make.py), read as data and predicted here: equal to the
//! library's own `predict_proba`/`predict` on the same rows, missing values included.

use std::path::{Path, PathBuf};

use qanat_runtime::sklearn::SkModel;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sklearn")
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("a fixture as make.py writes it")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("a fixture as make.py writes it")
                .iter()
                .map(|x| x.as_f64().unwrap_or(f64::NAN))
                .collect()
        })
        .collect()
}

fn cases() -> Vec<(String, Value, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir())
        .expect("the fixtures")
        .filter_map(|e| {
            let p = e.expect("a fixture").path();
            (p.extension()? == "json").then_some(p)
        })
        .map(|p| {
            let doc: Value = serde_json::from_slice(&std::fs::read(&p).expect("a fixture"))
                .expect("a fixture as make.py writes it");
            let model = std::fs::read(p.with_extension("pkl")).expect("its pickle");
            let name = p
                .file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, doc, model)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn predictions_equal_scikit_learn_s_own() {
    let cases = cases();
    assert!(cases.len() >= 17, "{} fixtures", cases.len());
    for (name, doc, bytes) in cases {
        let kind = doc["kind"].as_str().expect("a kind");
        let read = SkModel::read(&bytes);
        if kind == "refused" {
            let why = read.expect_err("refused");
            assert!(why.contains("not read natively"), "{name}: {why}");
            continue;
        }
        let model = read.unwrap_or_else(|e| panic!("{name}: {e}"));
        let rows = matrix(&doc["rows"]);
        let x: Vec<f32> = rows.iter().flatten().map(|v| *v as f32).collect();
        let got = model.predict(&x, rows.len()).expect("predicts");
        let expected = matrix(&doc["expected"]);
        let k = expected[0].len();
        assert_eq!(model.outputs(), k, "{name}");
        assert_eq!(got.len(), rows.len() * k, "{name}");
        for (r, (want, have)) in expected.iter().zip(got.chunks(k)).enumerate() {
            for (w, h) in want.iter().zip(have) {
                let tol = 1e-6 * w.abs().max(1.0);
                assert!(
                    (w - f64::from(*h)).abs() <= tol,
                    "{name} row {r}: scikit-learn {want:?}, Qanat {have:?}"
                );
            }
        }
        if kind == "proba" {
            let classes = doc["classes"].as_array().expect("classes");
            assert_eq!(model.classes.as_ref(), Some(classes), "{name}");
            // The label is the class of the largest probability, as predict gives it.
            for (label, p) in doc["labels"]
                .as_array()
                .expect("labels")
                .iter()
                .zip(got.chunks(k))
            {
                let best = (0..k).fold(0, |b, i| if p[i] > p[b] { i } else { b });
                assert_eq!(&classes[best], label, "{name}");
            }
        }
        println!("{name}: {} ({} rows equal)", model.describe, rows.len());
    }
}

#[test]
fn hostile_pickles_are_data_never_code() {
    // os.system('…') as a pickle would call it: read as a symbol, refused as no
    // estimator, and nothing runs.
    let evil = b"\x80\x04\x95 \x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x05touch\x94\x85\x94R\x94.";
    let why = SkModel::read(evil).expect_err("refused");
    assert!(why.contains("posix.system"), "{why}");
    // A real model whose class is swapped for another module's: refused by name.
    let (_, _, bytes) = cases()
        .into_iter()
        .find(|c| c.0 == "logistic_binary")
        .expect("the fixture");
    let at = bytes
        .windows(b"sklearn.linear_model".len())
        .position(|w| w == b"sklearn.linear_model")
        .expect("the module name");
    let mut swapped = bytes.clone();
    swapped[at..at + 7].copy_from_slice(b"sklearX");
    assert!(SkModel::read(&swapped)
        .expect_err("refused")
        .contains("not a scikit-learn estimator"));
    // Every truncation of a real pickle is refused or read, never a panic.
    for cut in 0..bytes.len() {
        let _ = SkModel::read(&bytes[..cut]);
    }
    // So is every single flipped byte.
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        if let Ok(m) = SkModel::read(&b) {
            let _ = m.predict(&vec![0.5; m.features() * 3], 3);
        }
    }
}
