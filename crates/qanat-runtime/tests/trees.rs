//! Tree ensembles trained by the real XGBoost and LightGBM (fixtures/trees/make.py),
//! read from their own files and predicted here: equal to the libraries' predictions
//! on the same rows, missing values and zeros included.

use std::path::{Path, PathBuf};

use qanat_runtime::trees::{lightgbm, xgboost, Forest};
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trees")
}

struct Case {
    name: String,
    doc: Value,
}

fn cases() -> Vec<Case> {
    let mut out: Vec<Case> = std::fs::read_dir(dir())
        .expect("a fixture as make.py writes it")
        .filter_map(|e| {
            let p = e.expect("a fixture as make.py writes it").path();
            (p.extension()? == "json" && !p.to_str()?.contains(".model.")).then_some(p)
        })
        .filter_map(|p| {
            let doc: Value =
                serde_json::from_slice(&std::fs::read(&p).expect("a fixture as make.py writes it"))
                    .ok()?;
            doc.get("kind")?;
            Some(Case {
                name: p
                    .file_stem()
                    .expect("a fixture as make.py writes it")
                    .to_string_lossy()
                    .into_owned(),
                doc,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
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

fn forest(case: &Case) -> Forest {
    let file = dir().join(
        case.doc["model"]
            .as_str()
            .expect("a fixture as make.py writes it"),
    );
    let bytes = std::fs::read(&file).expect("a fixture as make.py writes it");
    match case.doc["kind"]
        .as_str()
        .expect("a fixture as make.py writes it")
    {
        "xgboost" => {
            xgboost::read(&bytes)
                .expect("a fixture as make.py writes it")
                .forest
        }
        "xgboost-sklearn" => {
            let mut m = xgboost::read(&bytes).expect("a fixture as make.py writes it");
            assert_eq!(
                m.best_iteration,
                case.doc["best_iteration"].as_u64().map(|b| b as usize)
            );
            assert_eq!(m.estimator_type.as_deref(), Some("classifier"));
            m.to_best_iteration();
            m.forest
        }
        "lightgbm" => {
            lightgbm::read(std::str::from_utf8(&bytes).expect("a fixture as make.py writes it"))
                .expect("a fixture as make.py writes it")
                .forest
        }
        other => panic!("kind {other}"),
    }
}

/// Equal to within 1e-6, relative above 1.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn predictions_equal_the_libraries_own() {
    let cases = cases();
    assert!(cases.len() >= 20, "{} fixtures", cases.len());
    for case in &cases {
        let f = forest(case);
        let rows = matrix(&case.doc["rows"]);
        let x: Vec<f32> = rows.iter().flatten().map(|v| *v as f32).collect();
        let n = rows.len();
        let margins = f.margins(&x, n).expect("a fixture as make.py writes it");
        let want = matrix(&case.doc["margin"]);
        // LightGBM's raw scores of a random forest are its trees' sum; its predictions
        // (and these margins) their mean.
        let divisor = if case.name == "lgb_rf" {
            f.trees() as f64
        } else {
            1.0
        };
        let want: Vec<f64> = want.into_iter().flatten().map(|m| m / divisor).collect();
        assert_eq!(margins.len(), want.len(), "{}", case.name);
        for (i, (a, b)) in margins.iter().zip(&want).enumerate() {
            assert!(close(*a, *b), "{} margin {i}: {a} vs {b}", case.name);
        }
        let got = f.predict(&x, n).expect("a fixture as make.py writes it");
        let want: Vec<f64> = matrix(&case.doc["predict"]).into_iter().flatten().collect();
        assert_eq!(got.len(), want.len(), "{}", case.name);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                close(f64::from(*a), *b),
                "{} prediction {i}: {a} vs {b}",
                case.name
            );
        }
    }
}

#[test]
fn truncated_and_damaged_files_are_refused_not_panicked_on() {
    for case in cases() {
        let file = dir().join(
            case.doc["model"]
                .as_str()
                .expect("a fixture as make.py writes it"),
        );
        let bytes = std::fs::read(&file).expect("a fixture as make.py writes it");
        let lightgbm = case.doc["kind"] == "lightgbm";
        for cut in [1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
            let part = &bytes[..cut];
            if lightgbm {
                let _ = lightgbm::read(&String::from_utf8_lossy(part));
            } else {
                assert!(xgboost::read(part).is_err(), "{} cut at {cut}", case.name);
            }
        }
        // Every byte flipped in turn, on a sample of positions: an error or a forest,
        // never a panic.
        for at in (0..bytes.len()).step_by(bytes.len() / 97 + 1) {
            let mut b = bytes.clone();
            b[at] ^= 0x5a;
            if lightgbm {
                let _ = lightgbm::read(&String::from_utf8_lossy(&b));
            } else {
                let _ = xgboost::read(&b);
            }
        }
    }
}
