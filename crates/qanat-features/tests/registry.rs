//! The feature registry on every metadata backend: plan, apply, immutable versions,
//! metadata edits in place, removal, stale plans refused.

use qanat_features::wire::Action;
use qanat_features::RepoFiles as _;
use qanat_features::{Applier, Error, FeatureRepo, Features, ObjectKind};
use qanat_governance::Governance;
use qanat_store::testing::TestDb;

mod common;
use common::SCHEMA;

const REPO: &str = include_str!("fixtures/driver_stats_repo.yaml");

fn repo(text: &str) -> FeatureRepo {
    let mut r = FeatureRepo::default();
    r.add_yaml("repo.yaml", text).expect("parses");
    r
}

fn action(plan: &qanat_features::wire::Plan, name: &str) -> (Action, Option<i64>) {
    let c = plan
        .changes
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{name} in {plan:?}"));
    (c.action, c.to_version)
}

/// A feature store over `db` with local storage (kept while the directory lives), and
/// the projects `names`.
async fn features<const N: usize>(
    db: &TestDb,
    names: [&str; N],
) -> (Features, [qanat_governance::Project; N], tempfile::TempDir) {
    let gov = Governance::new(db.store.clone());
    let projects = qanat_governance::testing::projects(&gov, names).await;
    let (storage, dir) = qanat_store::testing::local_storage(db).await;
    let f = Features::new(
        db.store.clone(),
        storage.clone(),
        qanat_data::Datasets::new(db.store.clone(), storage),
    );
    (f, projects, dir)
}

#[tokio::test]
async fn apply_records_versions_only_when_logic_changes() {
    for db in TestDb::all(SCHEMA).await {
        let (f, [p], _dir) = features(&db, ["fs"]).await;

        let plan = f.plan(&p, &repo(REPO)).await.expect("plan");
        assert_eq!(plan.revision, 0);
        assert_eq!(action(&plan, "driver_stats"), (Action::Create, Some(1)));
        // A plan writes nothing.
        assert!(f.registry(&p).await.expect("registry").objects.is_empty());

        let applied = f
            .apply(&p, &repo(REPO), Some(0), &Applier::maintainer("alice"))
            .await
            .expect("apply");
        assert!(applied.applied);
        assert_eq!(applied.revision, 1);
        let again = f
            .apply(&p, &repo(REPO), None, &Applier::maintainer("alice"))
            .await
            .expect("re-apply");
        assert!(!again.applied && !again.has_changes(), "{again:?}");
        assert_eq!(again.revision, 1);

        // Metadata: same version, edited in place.
        let owned = REPO.replace("ttl: 1d\n", "ttl: 1d\nowner: ml-team\n");
        let plan = f
            .apply(&p, &repo(&owned), None, &Applier::maintainer("alice"))
            .await
            .expect("owner");
        assert_eq!(action(&plan, "driver_stats"), (Action::Metadata, Some(1)));
        let v = f
            .object(&p, ObjectKind::FeatureView, "driver_stats", None)
            .await
            .expect("view");
        assert_eq!(
            (v.version, v.definition["owner"].as_str()),
            (1, Some("ml-team"))
        );

        // Logic: a new version; the old one stays as it was, with current metadata.
        let longer = owned.replace("ttl: 1d", "ttl: 2d");
        let plan = f
            .apply(&p, &repo(&longer), None, &Applier::maintainer("bob"))
            .await
            .expect("ttl");
        let c = plan
            .changes
            .iter()
            .find(|c| c.name == "driver_stats")
            .expect("view");
        assert_eq!(
            (c.action, c.from_version, c.to_version),
            (Action::NewVersion, Some(1), Some(2))
        );
        assert!(
            c.details.iter().any(|d| d == "ttl: 1day → 2days"),
            "{:?}",
            c.details
        );
        assert_eq!(action(&plan, "activity"), (Action::Unchanged, Some(1)));
        let v1 = f
            .object(&p, ObjectKind::FeatureView, "driver_stats", Some(1))
            .await
            .expect("v1");
        assert_eq!(v1.definition["ttl"], "1day");
        assert_eq!(v1.definition["owner"], "ml-team");
        assert_eq!(v1.latest_version, 2);

        // A source change makes a new version of the view that reads it.
        let moved = longer.replace("driver_stats.parquet", "driver_stats_v2.parquet");
        let plan = f
            .apply(&p, &repo(&moved), None, &Applier::maintainer("bob"))
            .await
            .expect("source");
        assert_eq!(action(&plan, "stats_src"), (Action::NewVersion, Some(2)));
        assert_eq!(action(&plan, "driver_stats"), (Action::NewVersion, Some(3)));
        let v3 = f
            .object(&p, ObjectKind::FeatureView, "driver_stats", Some(3))
            .await
            .expect("v3");
        assert!(
            v3.depends_on
                .iter()
                .any(|d| d.name == "stats_src" && d.version == 2),
            "{v3:?}"
        );
        let history = f
            .history(&p, ObjectKind::FeatureView, "driver_stats")
            .await
            .expect("history");
        assert_eq!(
            history
                .versions
                .iter()
                .map(|v| v.version)
                .collect::<Vec<_>>(),
            [3, 2, 1]
        );

        // A stale plan is refused, and nothing of it is written.
        let e = f
            .apply(&p, &repo(REPO), Some(1), &Applier::maintainer("carol"))
            .await
            .expect_err("stale");
        assert!(matches!(e, Error::Conflict(_)), "{e}");
        let reg = f.registry(&p).await.expect("registry");
        assert_eq!(reg.revision, 4);
    }
}

#[tokio::test]
async fn removed_objects_keep_their_versions_and_come_back() {
    for db in TestDb::all(SCHEMA).await {
        let (f, [p, q], _dir) = features(&db, ["fs", "other"]).await;
        f.apply(&p, &repo(REPO), None, &Applier::maintainer("alice"))
            .await
            .expect("apply");

        let without = REPO.split("---").take(3).collect::<Vec<_>>().join("---");
        let plan = f
            .apply(&p, &repo(&without), None, &Applier::maintainer("alice"))
            .await
            .expect("remove");
        assert_eq!(action(&plan, "activity"), (Action::Remove, None));
        let reg = f.registry(&p).await.expect("registry");
        assert!(reg.objects.iter().all(|o| o.name != "activity"));
        let kept = f
            .object(&p, ObjectKind::FeatureService, "activity", Some(1))
            .await
            .expect("kept");
        assert!(kept.deleted_at.is_some());

        let plan = f
            .apply(&p, &repo(REPO), None, &Applier::maintainer("alice"))
            .await
            .expect("back");
        assert_eq!(action(&plan, "activity"), (Action::Create, Some(1)));
        assert_eq!(f.registry(&p).await.expect("registry").objects.len(), 4);

        // Projects do not see each other's registries.
        assert!(f.registry(&q).await.expect("other").objects.is_empty());
        let e = f
            .object(&q, ObjectKind::FeatureView, "driver_stats", None)
            .await
            .expect_err("other project");
        assert!(e.to_string().contains("driver_stats"), "{e}");
    }
}

#[tokio::test]
async fn a_repo_with_problems_is_refused_whole() {
    for db in TestDb::all(SCHEMA).await {
        let (f, [p], _dir) = features(&db, ["fs"]).await;
        let broken = REPO.replace("source: stats_src", "source: nowhere");
        let e = f
            .apply(&p, &repo(&broken), None, &Applier::maintainer("alice"))
            .await
            .expect_err("broken");
        assert!(
            e.to_string().contains("source 'nowhere' is not declared"),
            "{e}"
        );
        assert!(f.registry(&p).await.expect("registry").objects.is_empty());
    }
}
