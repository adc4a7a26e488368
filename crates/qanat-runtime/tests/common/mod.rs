//! What the runtime suites share: a model the trainer fits on an example table, as the
//! native runtime loads it.

#![allow(dead_code)]

use std::path::PathBuf;

use qanat_model::{Table, TrainConfig};
use qanat_runtime::package::NativeModel;
use qanat_train::{train_table, Trained};

/// `examples/data/{file}` read as a table.
pub fn example(file: &str) -> Table {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data")
        .join(file);
    Table::read_file(&p).expect("table")
}

/// The trainer's run of `config` on `table`, and its model on the native runtime (from
/// the `spec.json` and `weights.safetensors` it writes).
pub fn trained(table: &Table, config: serde_json::Value) -> (Trained, NativeModel) {
    let c = TrainConfig::from_value(config).expect("config");
    let t = train_table(table, &c, None, |_| Ok(())).expect("trained");
    let m = &t.fitted.model;
    let native = NativeModel::from_bytes(
        &serde_json::to_vec(&qanat_train::export::spec(m, &t.prep)).expect("spec"),
        &qanat_train::export::safetensors(m).expect("weights"),
    )
    .expect("native");
    (t, native)
}
