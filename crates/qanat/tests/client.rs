//! The client against the real API router, served in-process over a fresh SQLite store
//! and a local storage location: each method reaches its endpoint and reads the answer
//! into the domain's type.

use bytes::Bytes;
use futures::TryStreamExt;
use qanat_client::{Client, Error};
use qanat_core::ObjectRef;
use qanat_data::wire::{CommitVersion, CopyBody, GcBody};
use qanat_data::{ChunkId, ChunkRef, FileEntry, Manifest, NewDataset, VersionRef};
use qanat_governance::wire::{AuditFilter, CreateProject, CreateUser, SetMember, TokenFilter};
use qanat_governance::{Role, UserKind};
use qanat_store::testing::TestDb;
use qanat_store::{Keyring, LocationConfig, ObjectStorage};
use qanat_tracking::wire::mlflow::SearchExperiments;
use qanat_tracking::wire::ModelListParams;
use qanat_types::store::wire::{LocationParam, ObjectListParams};

/// A served API and an admin client of it.
struct Server {
    client: Client,
    _db: TestDb,
    _dir: tempfile::TempDir,
}

async fn serve() -> Server {
    let db = TestDb::sqlite(qanat::wiring::SCHEMA).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let keyring = Keyring::from_base64(&Keyring::generate_base64()).expect("keyring");
    let storage = ObjectStorage::open(
        &[LocationConfig::local("local", dir.path(), "uae-north").expect("location")],
        "local",
        keyring,
        db.store.clone(),
    )
    .await
    .expect("storage");
    let settings = qanat::wiring::Settings::defaults(&storage);
    let state = qanat::wiring::build(db.store.clone(), storage, settings)
        .await
        .expect("services");
    let token = state
        .gov
        .bootstrap_admin("admin")
        .await
        .expect("bootstrap")
        .expect("a fresh store has no admin");
    let app = qanat_api::router(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = Client::builder(format!("http://{addr}"))
        .token(token.token)
        .build()
        .expect("client");
    Server {
        client,
        _db: db,
        _dir: dir,
    }
}

async fn project(c: &Client, name: &str) {
    c.create_project(&CreateProject {
        name: name.into(),
        description: String::new(),
        allowed_regions: Some(vec!["uae-north".into()]),
    })
    .await
    .expect("create project");
}

#[tokio::test]
async fn identity_projects_and_members_read_back_as_domain_types() {
    let s = serve().await;
    let c = &s.client;
    let me = c.whoami().await.expect("whoami");
    assert_eq!(me.principal.name, "admin");
    assert!(me.principal.is_admin);

    project(c, "fraud").await;
    let ps = c.projects().await.expect("projects");
    assert!(ps.iter().any(|p| p.name == "fraud"));
    assert_eq!(
        c.project("fraud").await.expect("project").allowed_regions,
        ["uae-north"]
    );

    let u = c
        .create_user(&CreateUser {
            name: "ci-bot".into(),
            kind: Some(UserKind::Service),
            admin: false,
        })
        .await
        .expect("create user");
    assert_eq!(u.kind, UserKind::Service);
    let m = c
        .set_member("fraud", "ci-bot", &SetMember { role: Role::Editor })
        .await
        .expect("grant");
    assert_eq!(m.role, Role::Editor);
    assert!(c
        .members("fraud")
        .await
        .expect("members")
        .iter()
        .any(|m| m.user == "ci-bot"));
    c.remove_member("fraud", "ci-bot").await.expect("revoke");

    let t = c
        .create_token(&qanat_governance::wire::CreateToken {
            name: "ci".into(),
            user: Some("ci-bot".into()),
            expires_in_seconds: Some(3600),
            scope: None,
            rate_limit: None,
        })
        .await
        .expect("token");
    assert!(t.token.starts_with("qnt_"));
    let listed = c
        .tokens(&TokenFilter {
            user: Some("ci-bot".into()),
        })
        .await
        .expect("tokens");
    assert_eq!(listed.len(), 1);
    assert!(c
        .revoke_token(&t.info.id)
        .await
        .expect("revoke")
        .revoked_at
        .is_some());

    let v = c.verify_audit().await.expect("verify");
    assert!(v.ok, "{:?}", v.problems);
    let entries = c
        .audit(&AuditFilter {
            action: Some("project.create".into()),
            ..Default::default()
        })
        .await
        .expect("audit");
    assert_eq!(entries.len(), 1);
    assert!(!c.keys().await.expect("keys").key_ids.is_empty());
    assert!(c.locations().await.expect("locations")[0].default);
}

#[tokio::test]
async fn a_refusal_carries_status_code_and_message() {
    let s = serve().await;
    project(&s.client, "p").await;
    let e = s.client.dataset("p", "nope").await.expect_err("missing");
    assert!(
        matches!(&e, Error::Api { status: 404, code, message } if code == "RESOURCE_DOES_NOT_EXIST" && message.contains("nope")),
        "{e:?}"
    );
    let anonymous = Client::builder(s.client.base()).build().expect("client");
    let e = anonymous.whoami().await.expect_err("no token");
    assert_eq!(e.status(), Some(401));
}

#[tokio::test]
async fn a_dataset_is_pushed_in_packs_and_pulled_back() {
    let s = serve().await;
    let c = &s.client;
    project(c, "d").await;
    for name in ["raw", "copy"] {
        c.create_dataset(
            "d",
            &NewDataset {
                name: name.into(),
                ..Default::default()
            },
        )
        .await
        .expect("create dataset");
    }
    let data = Bytes::from_static(b"id,amount\n1,10.5\n2,3.25\n");
    let id = ChunkId::of(&data);
    assert_eq!(
        c.missing_chunks("d", "raw", &[id]).await.expect("missing"),
        [id]
    );
    let stored = c
        .put_pack("d", "raw", &[(id, data.clone())])
        .await
        .expect("pack");
    assert_eq!(stored.new_chunks, 1);
    assert!(c
        .missing_chunks("d", "raw", &[id])
        .await
        .expect("missing")
        .is_empty());
    let manifest = Manifest {
        files: vec![FileEntry::new(
            b"tx.csv",
            data.len() as u64,
            0o644,
            id.to_hex(),
            vec![ChunkRef {
                id,
                size: data.len() as u64,
            }],
        )],
    };
    let v = c
        .commit_version(
            "d",
            "raw",
            &CommitVersion {
                manifest: manifest.clone(),
                message: "first".into(),
                derived_from: vec![],
            },
        )
        .await
        .expect("commit");
    assert_eq!((v.version, v.file_count), (1, 1));

    let latest = c
        .version("d", "raw", &VersionRef::Latest)
        .await
        .expect("version");
    assert_eq!(latest.manifest, manifest);
    assert_eq!(
        latest.profiles[0].profile.as_ref().expect("profiled").rows,
        2
    );
    let bytes: Vec<Bytes> = c
        .version_file("d", "raw", &VersionRef::Version(1), 0)
        .await
        .expect("file")
        .try_collect()
        .await
        .expect("stream");
    assert_eq!(bytes.concat(), data);

    let tagged = c
        .tag_version("d", "raw", "golden", &VersionRef::Version(1))
        .await
        .expect("tag");
    assert_eq!(tagged.tags, ["golden"]);
    assert_eq!(c.versions("d", "raw").await.expect("log").len(), 1);
    let diff = c
        .diff(
            "d",
            "raw",
            &VersionRef::Version(1),
            &"golden".parse().expect("tag"),
        )
        .await
        .expect("diff");
    assert_eq!(diff.diff.unchanged, 1);

    let copied = c
        .copy_version(
            "d",
            "raw",
            &CopyBody {
                to: "copy".into(),
                version: Some("golden".into()),
                message: String::new(),
            },
        )
        .await
        .expect("copy");
    let reference: ObjectRef = format!("dataset:copy@{}", copied.version)
        .parse()
        .expect("ref");
    let graph = c.lineage("d", &reference, None).await.expect("lineage");
    assert!(graph
        .edges
        .iter()
        .any(|e| e.relation == "derived_from" && e.parent == "dataset:raw@1"));
    let report = c
        .gc(
            "d",
            &GcBody {
                grace_seconds: Some(0),
            },
        )
        .await
        .expect("gc");
    assert_eq!(report.chunks_deleted, 0);
    let ds = c.datasets("d").await.expect("datasets");
    assert_eq!(ds.len(), 2);
    assert_eq!(
        c.dataset("d", "raw").await.expect("dataset").latest_version,
        Some(1)
    );
}

#[tokio::test]
async fn objects_stream_in_and_out() {
    let s = serve().await;
    let c = &s.client;
    project(c, "o").await;
    let at = LocationParam::default();
    let body = b"some bytes".to_vec();
    let view = c
        .put_object("o", "dir/a file.bin", &at, body.len() as u64, body.clone())
        .await
        .expect("put");
    assert_eq!((view.key.as_str(), view.size), ("dir/a file.bin", 10));
    let got: Vec<Bytes> = c
        .get_object("o", "dir/a file.bin", &at)
        .await
        .expect("get")
        .try_collect()
        .await
        .expect("stream");
    assert_eq!(got.concat(), body);
    let listed = c
        .objects(
            "o",
            &ObjectListParams {
                prefix: Some("dir".into()),
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    c.delete_object("o", "dir/a file.bin", &at)
        .await
        .expect("delete");
    let e = c.get_object("o", "dir/a file.bin", &at).await.err();
    assert_eq!(e.and_then(|e| e.status()), Some(404));
}

#[tokio::test]
async fn the_registry_and_mlflow_tracking_read_back_typed() {
    let s = serve().await;
    let c = &s.client;
    project(c, "m").await;
    assert!(c
        .models("m", &ModelListParams::default())
        .await
        .expect("models")
        .models
        .is_empty());
    let page = c
        .search_experiments("m", &SearchExperiments::default())
        .await
        .expect("experiments");
    assert!(page.experiments.iter().any(|e| e.name == "Default"));
    let default = c.experiment_by_name("m", "Default").await.expect("by name");
    assert_eq!(default.experiment_id, "0");
    let e = c.run("m", "0123456789abcdef0123456789abcdef").await.err();
    assert_eq!(e.and_then(|e| e.status()), Some(404));
}
