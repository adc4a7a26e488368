//! Test support: a fresh metadata store per test, on SQLite always and on PostgreSQL when
//! `QANAT_TEST_POSTGRES_URL` names a server (CI sets it; a machine without PostgreSQL
//! simply runs the SQLite half). Under `CI=true` a missing service variable fails the
//! test instead (see [`service_var`]): a suite that CI means to run must not pass by
//! skipping itself.

use crate::migrations::{DomainMigrations, Schema};
use crate::{Backend, MetaStore};

/// The schema of `domains` (a test lists the domains whose tables it uses).
fn schema(domains: &[&'static DomainMigrations]) -> Schema {
    Schema::new(domains).expect("the domains' migrations do not clash")
}

/// The value of a variable that names a test service (`QANAT_TEST_POSTGRES_URL`,
/// `QANAT_TEST_S3_URL`, …): `None` when it is unset on a developer's machine, so the
/// suite that needs it is skipped with a note on stderr; a panic when it is unset and
/// `CI` is `true` (or `1`), so CI cannot go green without running the suite.
pub fn service_var(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Some(v),
        _ => {
            let ci = std::env::var("CI")
                .map(|v| v.eq_ignore_ascii_case("true") || v == "1")
                .unwrap_or(false);
            assert!(
                !ci,
                "{name} is not set but CI=true: this suite must run in CI (.ci/run sets it)"
            );
            eprintln!("{name} not set: the suite that needs it is skipped here (CI runs it)");
            None
        }
    }
}

/// A throwaway metadata store. The SQLite file (or PostgreSQL database) is removed on drop.
pub struct TestDb {
    pub store: MetaStore,
    /// The URL the store was opened with.
    pub url: String,
    _dir: Option<tempfile_dir::Dir>,
    // Declared after `store`, so the pool is dropped before the database.
    _pg: Option<ScratchPostgres>,
}

/// An empty PostgreSQL database (no migrations run), dropped on drop: for a test that
/// fills it itself, e.g. with the dump of an older release's database.
pub struct ScratchPostgres {
    /// The database's URL.
    pub url: String,
    admin_url: String,
    name: String,
}

impl ScratchPostgres {
    /// A fresh database on the server of `QANAT_TEST_POSTGRES_URL`, when it is set.
    #[qanat_macros::boxed]
    pub async fn create() -> Option<ScratchPostgres> {
        let admin_url = service_var("QANAT_TEST_POSTGRES_URL")?;
        sqlx::any::install_default_drivers();
        let name = format!("qanat_test_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::AnyPool::connect(&admin_url)
            .await
            .expect("connect to QANAT_TEST_POSTGRES_URL");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("create test database");
        admin.close().await;
        let mut url = url::Url::parse(&admin_url).expect("QANAT_TEST_POSTGRES_URL is a URL");
        url.set_path(&name);
        Some(ScratchPostgres {
            url: url.to_string(),
            admin_url,
            name,
        })
    }
}

mod tempfile_dir {
    /// A temporary directory removed on drop (kept tiny to avoid a dependency here).
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl TestDb {
    /// A fresh SQLite store in a temporary directory, with the tables of `domains`.
    #[qanat_macros::boxed]
    pub async fn sqlite(domains: &[&'static DomainMigrations]) -> TestDb {
        let dir = std::env::temp_dir().join(format!("qanat-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let url = format!("sqlite://{}/meta.db", dir.display());
        let store = MetaStore::connect(&url, &schema(domains))
            .await
            .expect("connect sqlite");
        TestDb {
            store,
            url,
            _dir: Some(tempfile_dir::Dir(dir)),
            _pg: None,
        }
    }

    /// A fresh PostgreSQL database with the tables of `domains`, when
    /// `QANAT_TEST_POSTGRES_URL` is set.
    #[qanat_macros::boxed]
    pub async fn postgres(domains: &[&'static DomainMigrations]) -> Option<TestDb> {
        let pg = ScratchPostgres::create().await?;
        let store = MetaStore::connect(&pg.url, &schema(domains))
            .await
            .expect("connect test database");
        assert_eq!(store.backend(), Backend::Postgres);
        Some(TestDb {
            store,
            url: pg.url.clone(),
            _dir: None,
            _pg: Some(pg),
        })
    }

    /// Every backend available here, with the tables of `domains`: SQLite, plus
    /// PostgreSQL when configured.
    #[qanat_macros::boxed]
    pub async fn all(domains: &[&'static DomainMigrations]) -> Vec<TestDb> {
        let mut out = vec![TestDb::sqlite(domains).await];
        out.extend(TestDb::postgres(domains).await);
        out
    }
}

impl Drop for ScratchPostgres {
    fn drop(&mut self) {
        let admin_url = std::mem::take(&mut self.admin_url);
        let name = std::mem::take(&mut self.name);
        // Drop the database from a separate thread with its own runtime: Drop cannot
        // await, and the test's runtime (blocked here) must not be needed. FORCE ends
        // the pool's connections, which live on the test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(async move {
                    if let Ok(admin) = sqlx::AnyPool::connect(&admin_url).await {
                        let _ =
                            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                                .execute(&admin)
                                .await;
                    }
                });
            }
        })
        .join();
    }
}

/// Encrypted storage with one local location, `local` in region `uae-north`, in a fresh
/// temporary directory (removed when the returned handle drops) that also holds the
/// master key.
#[qanat_macros::boxed]
pub async fn local_storage(db: &TestDb) -> (crate::ObjectStorage, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let keyring =
        crate::Keyring::load_or_create(&dir.path().join("master.key")).expect("master key");
    let loc = crate::LocationConfig::local("local", dir.path().join("objects"), "uae-north")
        .expect("local location");
    let storage = crate::ObjectStorage::open(&[loc], "local", keyring, db.store.clone())
        .await
        .expect("open storage");
    (storage, dir)
}

/// `len` bytes of deterministic noise from `seed` (xorshift): test data that does not
/// compress or deduplicate by accident.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as u8
        })
        .collect()
}
