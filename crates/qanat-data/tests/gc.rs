//! gc never deletes a chunk a committed version references, whatever pushes run
//! beside it; and once pushes stop, it removes everything unreferenced.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use proptest::prelude::*;
use qanat_data::{ChunkId, ChunkRef, Dataset, Datasets, Error, FileEntry, Manifest, NewDataset};
use qanat_governance::{testing, Governance, Project};
use qanat_store::testing::TestDb;

#[derive(Debug, Clone)]
enum Op {
    /// Push a version made of these pool entries.
    Push(Vec<usize>),
    /// Upload these chunks and never commit (an abandoned push).
    Abandon(Vec<usize>),
    Gc,
}

fn pool(i: usize) -> Vec<u8> {
    format!("pool entry {i} ").repeat(50 + i * 7).into_bytes()
}

fn op() -> impl Strategy<Value = Op> {
    let subset = proptest::collection::vec(0usize..8, 1..4);
    prop_oneof![
        3 => subset.clone().prop_map(Op::Push),
        1 => subset.prop_map(Op::Abandon),
        2 => Just(Op::Gc),
    ]
}

struct World {
    datasets: Datasets,
    project: Project,
    _db: TestDb,
    _dir: tempfile::TempDir,
}

async fn world() -> World {
    let db = TestDb::sqlite(&[&qanat_governance::MIGRATIONS, &qanat_data::MIGRATIONS]).await;
    let (storage, dir) = qanat_store::testing::local_storage(&db).await;
    let [project] = testing::projects(&Governance::new(db.store.clone()), ["p"]).await;
    let datasets = Datasets::new(db.store.clone(), storage);
    World {
        datasets,
        project,
        _db: db,
        _dir: dir,
    }
}

async fn dataset(w: &World) -> Dataset {
    w.datasets.get(&w.project, "d").await.expect("dataset")
}

async fn upload(w: &World, picks: &[usize]) -> Vec<FileEntry> {
    let ds = dataset(w).await;
    let mut files = Vec::new();
    for &i in picks.iter().collect::<HashSet<_>>() {
        let data = pool(i);
        let id = ChunkId::of(&data);
        loop {
            match w
                .datasets
                .put_chunk(&w.project, &ds, id, Bytes::from(data.clone()))
                .await
            {
                Ok(_) => break,
                Err(Error::Busy(_)) => tokio::time::sleep(Duration::from_millis(1)).await,
                Err(e) => panic!("upload: {e}"),
            }
        }
        files.push(FileEntry::new(
            format!("f{i}").as_bytes(),
            data.len() as u64,
            0o644,
            blake3::hash(&data).to_hex().to_string(),
            vec![ChunkRef {
                id,
                size: data.len() as u64,
            }],
        ));
    }
    files
}

async fn push(w: &World, picks: &[usize]) {
    for _ in 0..20 {
        let files = upload(w, picks).await;
        let ds = dataset(w).await;
        match w
            .datasets
            .commit(&w.project, &ds, Manifest { files }, "", "admin", &[])
            .await
        {
            Ok(_) => return,
            // A concurrent gc took a chunk between upload and commit: push again.
            Err(Error::MissingChunks { .. }) => continue,
            Err(e) => panic!("commit: {e}"),
        }
    }
    panic!("push never committed");
}

async fn check_every_version_readable(w: &World) {
    let ds = dataset(w).await;
    for v in w.datasets.versions(&ds).await.expect("versions") {
        let m = w.datasets.manifest(&ds, &v).await.expect("manifest");
        for f in m.files {
            let parts: Vec<Bytes> = w
                .datasets
                .file_stream(&ds, f.clone())
                .try_collect()
                .await
                .unwrap_or_else(|e| panic!("version {} file {}: {e}", v.version, f.path));
            assert_eq!(parts.concat().len() as u64, f.size);
        }
    }
}

fn run(ops: Vec<Op>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let w = world().await;
        w.datasets
            .create(
                &w.project,
                serde_json::from_value::<NewDataset>(serde_json::json!({"name": "d"}))
                    .expect("new"),
                "admin",
            )
            .await
            .expect("create");
        // Two lanes run at once: pushes (and abandoned uploads) and gcs with no grace.
        let (writes, gcs): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(|o| !matches!(o, Op::Gc));
        let lane_a = async {
            for op in &writes {
                match op {
                    Op::Push(p) => push(&w, p).await,
                    Op::Abandon(p) => {
                        upload(&w, p).await;
                    }
                    Op::Gc => {}
                }
                tokio::task::yield_now().await;
            }
        };
        let lane_b = async {
            for _ in &gcs {
                w.datasets
                    .gc(&w.project, Duration::ZERO, Duration::from_secs(30 * 86_400))
                    .await
                    .expect("gc");
                tokio::task::yield_now().await;
            }
        };
        tokio::join!(lane_a, lane_b);
        check_every_version_readable(&w).await;

        // Quiet now: one more gc leaves exactly the referenced chunks.
        let report = w
            .datasets
            .gc(&w.project, Duration::ZERO, Duration::from_secs(30 * 86_400))
            .await
            .expect("gc");
        check_every_version_readable(&w).await;
        let ds = dataset(&w).await;
        let mut referenced = HashSet::new();
        for v in w.datasets.versions(&ds).await.expect("versions") {
            for c in w
                .datasets
                .manifest(&ds, &v)
                .await
                .expect("manifest")
                .distinct_chunks()
            {
                referenced.insert(c.id);
            }
        }
        let all: Vec<ChunkId> = (0..8).map(|i| ChunkId::of(&pool(i))).collect();
        let missing: HashSet<ChunkId> = w
            .datasets
            .missing_chunks(&ds, &all)
            .await
            .expect("missing")
            .into_iter()
            .collect();
        for id in all {
            assert_eq!(
                !missing.contains(&id),
                referenced.contains(&id),
                "chunk {id}: stored iff referenced ({report:?})"
            );
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn gc_never_deletes_a_referenced_chunk(ops in proptest::collection::vec(op(), 1..14)) {
        run(ops);
    }
}

/// A project's retention of dataset versions: gc removes the versions pushed before
/// the cut-off, except each dataset's latest and its tagged ones, frees the chunks only
/// they held, and a read of a removed version says why.
#[tokio::test]
async fn versions_past_retention_go_but_the_latest_and_the_tagged_stay() {
    let mut w = world().await;
    w.datasets
        .create(
            &w.project,
            serde_json::from_value::<NewDataset>(serde_json::json!({"name": "d"})).expect("new"),
            "admin",
        )
        .await
        .expect("create");
    for picks in [[0usize, 1], [0, 2], [0, 3], [0, 4]] {
        push(&w, &picks).await;
    }
    let ds = dataset(&w).await;
    w.datasets.tag(&ds, "golden", 2).await.expect("tag");
    // Versions 1 to 3 were pushed ten days ago; the latest (4) too.
    let ten_days_ago = qanat_store::now_micros() - 10 * 86_400_000_000;
    sqlx::query("UPDATE dataset_versions SET created_at = $1")
        .bind(ten_days_ago)
        .execute(w._db.store.writer())
        .await
        .expect("age the versions");
    let gc = |w: &World| {
        let (datasets, project) = (w.datasets.clone(), w.project.clone());
        async move {
            datasets
                .gc(&project, Duration::ZERO, Duration::from_secs(30 * 86_400))
                .await
                .expect("gc")
        }
    };
    // No retention set: nothing goes.
    assert_eq!(gc(&w).await.dataset_versions_expired, 0);
    // Eleven days: still nothing; seven days: versions 1 and 3.
    w.project.dataset_version_days = Some(11);
    assert_eq!(gc(&w).await.dataset_versions_expired, 0);
    w.project.dataset_version_days = Some(7);
    let report = gc(&w).await;
    assert_eq!(report.dataset_versions_expired, 2, "{report:?}");
    let left: Vec<i64> = w
        .datasets
        .versions(&ds)
        .await
        .expect("versions")
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(left, vec![4, 2], "the latest and the tagged stay");
    // The chunks only versions 1 and 3 held are freed; the shared one stays.
    let missing = w
        .datasets
        .missing_chunks(&ds, &[0, 1, 2, 3, 4].map(|i| ChunkId::of(&pool(i))))
        .await
        .expect("missing");
    assert_eq!(
        missing,
        vec![ChunkId::of(&pool(1)), ChunkId::of(&pool(3))],
        "{report:?}"
    );
    check_every_version_readable(&w).await;
    let err = w
        .datasets
        .resolve(&ds, &qanat_data::VersionRef::Version(1))
        .await
        .expect_err("expired");
    assert!(matches!(err, Error::Expired { days: 7, .. }), "{err}");
    assert!(err.to_string().contains("retention"), "{err}");
    assert_eq!(
        qanat_core::DomainError::kind(&err),
        qanat_core::ErrorKind::Gone
    );
    // A version number never pushed is still plainly not found.
    let err = w
        .datasets
        .resolve(&ds, &qanat_data::VersionRef::Version(9))
        .await
        .expect_err("never pushed");
    assert_eq!(
        qanat_core::DomainError::kind(&err),
        qanat_core::ErrorKind::NotFound
    );
}
