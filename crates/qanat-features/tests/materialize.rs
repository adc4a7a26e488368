//! Materialization cut short resumes where it got to: a run stopped part-way leaves the
//! view's checkpoint after its last written chunk, and running it again without a start
//! writes only what was left, ending with every entity's newest row online.

use qanat_features::RepoFiles as _;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Float64Array, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use qanat_features::online::OnlineStore;
use qanat_features::wire::{MaterializeRequest, OnlineRequest, RunState};
use qanat_features::{Applier, FeatureRepo, Features};
use qanat_governance::Governance;
use qanat_store::testing::TestDb;

mod common;
use common::SCHEMA;

const REPO: &str = include_str!("fixtures/speed_repo.yaml");

const DRIVERS: i64 = 2_000;
/// 2026-01-01T00:00:00Z in microseconds.
const T0: i64 = 1_767_225_600_000_000;

/// Three rows per driver, out of time order; the newest has speed = the driver's id.
fn source() -> Vec<u8> {
    let (mut ids, mut ts, mut speed) = (Vec::new(), Vec::new(), Vec::new());
    for round in [1_i64, 2, 0] {
        for d in 0..DRIVERS {
            ids.push(d);
            // Drivers' newest rows spread over time, so chunks cover different times.
            ts.push(T0 + d * 1_000_000 + round * 10_000_000_000);
            speed.push(if round == 2 { d as f64 } else { -1.0 });
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("driver_id", DataType::Int64, false),
        Field::new(
            "event_timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("speed", DataType::Float64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
            Arc::new(Float64Array::from(speed)),
        ],
    )
    .expect("batch");
    let mut out = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    out
}

#[tokio::test]
async fn a_materialization_cut_short_resumes_where_it_got_to() {
    let db = TestDb::sqlite(SCHEMA).await;
    let gov = Governance::new(db.store.clone());
    let [p] = qanat_governance::testing::projects(&gov, ["fs"]).await;
    let (storage, dir) = qanat_store::testing::local_storage(&db).await;
    let key = format!("projects/{}/files/stats.parquet", p.id)
        .parse()
        .expect("key");
    storage
        .put_bytes(storage.default_location(), &key, source().into())
        .await
        .expect("put the source");
    let online = OnlineStore::open(&format!(
        "redb://{}",
        dir.path().join("online.redb").display()
    ))
    .await
    .expect("online store");
    let f = Features::new(
        db.store.clone(),
        storage.clone(),
        qanat_data::Datasets::new(db.store.clone(), storage),
    )
    .with_online(online)
    .with_materialize_chunks(10, 40);
    let mut repo = FeatureRepo::default();
    repo.add_yaml("repo.yaml", REPO).expect("repo");
    f.apply(&p, &repo, None, &Applier::maintainer("ann"))
        .await
        .expect("apply");

    // The first run, stopped once some chunks are written.
    let end = "2027-01-01T00:00:00Z".to_string();
    let first = MaterializeRequest {
        start: Some("2025-01-01T00:00:00Z".into()),
        end: Some(end.clone()),
        run_id: Some("first".into()),
        ..Default::default()
    };
    let task = {
        let (f, p) = (f.clone(), p.clone());
        tokio::spawn(async move { f.materialize(&p, &first, "ann").await })
    };
    loop {
        let run = f.materialization(&p, "first").ok();
        if run.as_ref().is_some_and(|r| r.views[0].written >= 100) {
            break;
        }
        assert!(
            !task.is_finished(),
            "the run ended before it could be stopped"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    task.abort();
    let _ = task.await;
    let stopped = f.materialization(&p, "first").expect("run");
    assert_eq!(stopped.state, RunState::Failed, "{stopped:?}");
    let written_first = stopped.views[0].written;
    assert!(
        written_first >= 100 && written_first < DRIVERS as u64,
        "{stopped:?}"
    );
    let until = f.freshness(&p).await.expect("freshness")[0]
        .materialized_until
        .clone()
        .expect("a checkpoint");
    assert!(until.as_str() < end.as_str(), "{until}");

    // Run again without a start: only what was left is read and written.
    let again = MaterializeRequest {
        end: Some(end.clone()),
        run_id: Some("again".into()),
        ..Default::default()
    };
    let done = f.materialize(&p, &again, "ann").await.expect("resume");
    assert!(
        done[0].rows_in_window < 3 * DRIVERS as u64,
        "the resumed run reread the whole window: {done:?}"
    );
    // What the first run wrote is not written again — give or take the chunk it was
    // stopped in (its checkpoint may have committed after the progress was last read;
    // chunks of 10, 20, then 40 entities).
    assert!(
        done[0].written < DRIVERS as u64 && done[0].written + written_first + 40 >= DRIVERS as u64,
        "{done:?} after {written_first}"
    );
    assert_eq!(
        f.freshness(&p).await.expect("freshness")[0]
            .materialized_until
            .as_deref(),
        Some("2027-01-01T00:00:00Z")
    );

    // Every driver's newest row is online.
    let ids: Vec<serde_json::Value> = (0..DRIVERS).map(|d| d.into()).collect();
    let req: OnlineRequest = serde_json::from_value(serde_json::json!({
        "features": ["stats:speed"],
        "entities": {"driver_id": ids},
    }))
    .expect("request");
    let got = f.online_features(&p, &req, true).await.expect("read");
    let speeds = &got.results[1].values;
    for d in 0..DRIVERS {
        assert_eq!(
            speeds[d as usize],
            serde_json::json!(d as f64),
            "driver {d}"
        );
    }
}
