//! Times Qanat's point-in-time join on Parquet files made by scripts/bench/pit_data.py:
//! the tables are read first (not timed), then every view is joined onto the entity
//! rows as a training set is. Prints one JSON line.
//!
//! usage: pit_bench DIR   (DIR holds entities.parquet and view_*.parquet)

use std::time::Instant;

use arrow_array::RecordBatch;
use qanat_features::point_in_time::{join, ViewSide};
use qanat_features::Ttl;

fn read(path: &std::path::Path) -> RecordBatch {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .with_batch_size(1 << 20)
        .build()
        .expect("reader");
    let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
    arrow_select::concat::concat_batches(&batches[0].schema(), &batches).expect("concat")
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: pit_bench DIR"));
    let entities = read(&dir.join("entities.parquet"));
    let mut views = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("view_"))
        })
        .collect();
    names.sort();
    for p in &names {
        views.push(read(p));
    }
    let feature_rows: usize = views.iter().map(|v| v.num_rows()).sum();
    let sides: Vec<ViewSide<'_>> = views
        .iter()
        .map(|v| ViewSide {
            rows: v,
            keys: vec!["driver_id".into()],
            event_timestamp: "event_timestamp".into(),
            created_timestamp: None,
            features: v
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .filter(|n| n.starts_with('f'))
                .map(|n| (n.clone(), n))
                .collect(),
            ttl: Ttl::default(),
        })
        .collect();
    let keys = vec![vec!["driver_id".to_string()]; sides.len()];
    let start = Instant::now();
    let out = join(&entities, "event_timestamp", &keys, &sides).expect("join");
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{{\"engine\": \"qanat\", \"seconds\": {secs:.3}, \"entity_rows\": {}, \"feature_rows\": {feature_rows}, \"columns\": {}}}",
        entities.num_rows(),
        out.num_columns()
    );
}
