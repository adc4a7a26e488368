//! The encrypted storage layer, end to end over a real metadata store and real backends:
//! a local directory always, an S3-compatible server when `QANAT_TEST_S3_URL` is set.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use qanat_store::testing::TestDb;
use qanat_store::{Error, Keyring, LocationConfig, ObjectKey, ObjectStorage};

struct Fixture {
    storage: ObjectStorage,
    dir: tempfile::TempDir,
    _db: TestDb,
}

async fn local_fixture(db: TestDb) -> Fixture {
    let (storage, dir) = qanat_store::testing::local_storage(&db).await;
    Fixture {
        storage,
        dir,
        _db: db,
    }
}

fn key(s: &str) -> ObjectKey {
    s.parse().expect("valid key")
}

/// Deterministic, incompressible-looking test data.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    qanat_store::testing::noise(len, seed.wrapping_mul(6364136223846793005))
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test]
async fn objects_round_trip_at_every_size_boundary() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let f = local_fixture(db).await;
        let mib = 1 << 20;
        // Around 1 MiB (a sealed chunk) and around 4 and 8 MiB (the local reader's
        // blocks of four sealed chunks, each decrypted where it was read into).
        for (i, len) in [
            0,
            1,
            1000,
            mib - 1,
            mib,
            mib + 1,
            2 * mib,
            3 * mib + 12345,
            4 * mib - 1,
            4 * mib,
            4 * mib + 1,
            8 * mib,
            8 * mib + 7,
            12 * mib - 1,
        ]
        .into_iter()
        .enumerate()
        {
            let data = pattern(len, i as u64);
            let k = key(&format!("sizes/{len}.bin"));
            let written = f
                .storage
                .put_reader("local", &k, &data[..])
                .await
                .expect("put");
            assert_eq!(written, len as u64);
            let back = f.storage.get_bytes("local", &k).await.expect("get");
            assert_eq!(back.len(), len, "length for {len}");
            assert!(back[..] == data[..], "content for {len}");
            assert_eq!(
                f.storage.head("local", &k).await.expect("head").size,
                len as u64
            );
        }
    }
}

#[tokio::test]
async fn plaintext_never_reaches_the_disk() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let f = local_fixture(db).await;
        let secret = b"TOP-SECRET-CUSTOMER-RECORD-0123456789".repeat(100_000);
        f.storage
            .put_bytes(
                "local",
                &key("pii/customers.csv"),
                Bytes::from(secret.clone()),
            )
            .await
            .expect("put");
        let needle = &secret[..37];
        let files = files_under(f.dir.path());
        assert!(!files.is_empty());
        for path in files {
            let bytes = std::fs::read(&path).expect("read");
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "plaintext found in {}",
                path.display()
            );
        }
    }
}

#[tokio::test]
async fn a_flipped_byte_fails_the_read() {
    let f = local_fixture(TestDb::sqlite(&[&qanat_governance::MIGRATIONS]).await).await;
    let data = pattern(3 << 20, 9);
    let k = key("tamper/me.bin");
    f.storage
        .put_reader("local", &k, &data[..])
        .await
        .expect("put");
    let path = f.storage.local_path("local", &k).expect("local file");
    let original = std::fs::read(&path).expect("read");
    for offset in [5usize, 40, (2 << 20) + 77, original.len() - 1] {
        let mut bytes = original.clone();
        bytes[offset] ^= 0x01;
        std::fs::write(&path, &bytes).expect("write");
        let Err(err) = f.storage.get_bytes("local", &k).await else {
            panic!("a flipped byte at {offset} was not detected");
        };
        assert!(
            matches!(err, Error::Integrity { .. } | Error::Keys(_)),
            "offset {offset}: {err}"
        );
    }
    // Truncation at a chunk boundary is caught too.
    std::fs::write(&path, &original[..28 + (1 << 20) + 16]).expect("write");
    let Err(err) = f.storage.get_bytes("local", &k).await else {
        panic!("truncation was not detected");
    };
    assert!(matches!(err, Error::Integrity { .. }), "{err}");
    std::fs::write(&path, &original).expect("restore");
    assert!(f.storage.get_bytes("local", &k).await.expect("intact")[..] == data[..]);
}

#[tokio::test]
async fn objects_stay_readable_after_key_rotation() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let f = local_fixture(db).await;
        let mut written = BTreeMap::new();
        for i in 0..20 {
            let data = pattern(1000 + i * 5000, i as u64);
            let k = key(&format!("rot/{i}"));
            f.storage
                .put_reader("local", &k, &data[..])
                .await
                .expect("put");
            written.insert(k, data);
        }
        let key_file = f.dir.path().join("master.key");
        let before_file = std::fs::read(&key_file).expect("read key file");
        let old_id = f.storage.keyring().active_key_id();
        let object_bytes_before: Vec<Vec<u8>> = written
            .keys()
            .map(|k| std::fs::read(f.storage.local_path("local", k).expect("path")).expect("read"))
            .collect();

        let report = f
            .storage
            .keyring()
            .rotate(&f.storage_meta())
            .await
            .expect("rotate");
        // The twenty objects' keys, and the key that names objects on the backend.
        assert_eq!(report.rewrapped_data_keys, 21);
        assert_eq!(report.retired_key_ids, vec![old_id.clone()]);
        assert_ne!(report.new_key_id, old_id);
        assert_ne!(std::fs::read(&key_file).expect("read"), before_file);

        // The objects themselves were not rewritten...
        let object_bytes_after: Vec<Vec<u8>> = written
            .keys()
            .map(|k| std::fs::read(f.storage.local_path("local", k).expect("path")).expect("read"))
            .collect();
        assert_eq!(object_bytes_before, object_bytes_after);
        // ...and read back through a keyring loaded fresh from the rotated file.
        let reloaded = Keyring::load(&key_file).expect("reload");
        assert_eq!(reloaded.key_ids(), vec![report.new_key_id.clone()]);
        for (k, data) in &written {
            let back = f
                .storage
                .get_bytes("local", k)
                .await
                .expect("get after rotate");
            assert!(back[..] == data[..]);
        }
    }
}

#[tokio::test]
async fn a_failed_upload_leaves_no_object() {
    let f = local_fixture(TestDb::sqlite(&[&qanat_governance::MIGRATIONS]).await).await;
    // A source that yields 3 MiB and then fails.
    let good = futures::stream::iter(
        (0..3).map(|i| Ok::<_, std::io::Error>(Bytes::from(pattern(1 << 20, i)))),
    );
    let bad = futures::stream::iter([Err(std::io::Error::other("client went away"))]);
    let reader = tokio_util::io::StreamReader::new(good.chain(bad));
    let k = key("partial/upload.bin");
    let err = f
        .storage
        .put_reader("local", &k, reader)
        .await
        .expect_err("fails");
    assert!(matches!(err, Error::Source(_)), "{err}");
    assert!(matches!(
        f.storage.get_bytes("local", &k).await,
        Err(Error::NotFound { .. })
    ));
    let leftovers = files_under(&f.dir.path().join("objects"));
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

#[tokio::test]
async fn listing_and_deleting() {
    let f = local_fixture(TestDb::sqlite(&[&qanat_governance::MIGRATIONS]).await).await;
    for name in ["a/1", "a/2", "b/1", "c/a b#%é.txt"] {
        f.storage
            .put_bytes("local", &key(name), Bytes::from_static(b"xyz"))
            .await
            .expect("put");
    }
    let listed = f
        .storage
        .list("local", Some(&key("a")))
        .await
        .expect("list");
    let names: Vec<_> = listed.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(names, vec!["a/1", "a/2"]);
    assert!(listed.iter().all(|o| o.size == 3));
    f.storage
        .delete("local", &key("a/1"))
        .await
        .expect("delete");
    assert!(matches!(
        f.storage.delete("local", &key("a/1")).await,
        Err(Error::NotFound { .. })
    ));
    let all = f.storage.list("local", None).await.expect("list");
    assert_eq!(all.len(), 3);
    assert!(
        all.iter().any(|o| o.key == "c/a b#%é.txt"),
        "keys list as named: {all:?}"
    );
}

#[tokio::test]
async fn any_valid_key_is_stored_and_the_backend_names_reveal_none() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let f = local_fixture(db).await;
        // A 300-byte segment (over any file system's name limit), a key that is both an
        // object and a prefix of others, and a name that is personal data.
        let long = format!("x/{}", "y".repeat(300));
        let names = [
            "a",
            "a/b",
            "a/b/c",
            long.as_str(),
            "patients/Fatima Al Mansoori.csv",
        ];
        for (i, name) in names.iter().enumerate() {
            f.storage
                .put_bytes(
                    "local",
                    &key(name),
                    Bytes::from(vec![b'0' + i as u8; i + 1]),
                )
                .await
                .unwrap_or_else(|e| panic!("put {name}: {e}"));
        }
        for (i, name) in names.iter().enumerate() {
            let got = f.storage.get_bytes("local", &key(name)).await.expect("get");
            assert_eq!(got.len(), i + 1, "{name}");
            assert_eq!(
                f.storage
                    .head("local", &key(name))
                    .await
                    .expect("head")
                    .size,
                i as u64 + 1
            );
        }
        let under_a: Vec<String> = f
            .storage
            .list("local", Some(&key("a")))
            .await
            .expect("list")
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(under_a, ["a/b", "a/b/c"]);
        // On disk: only derived names, none longer than 62 bytes, no key in any path.
        for path in files_under(&f.dir.path().join("objects")) {
            let rel = path
                .strip_prefix(f.dir.path().join("objects"))
                .expect("under")
                .to_string_lossy()
                .into_owned();
            assert!(rel.starts_with("k1/"), "{rel}");
            assert!(rel.split('/').all(|seg| seg.len() <= 62), "{rel}");
            for name in ["patients", "Fatima", "yyyy"] {
                assert!(!rel.contains(name), "{rel} reveals {name}");
            }
        }
        // Deleting `a` leaves `a/b`.
        f.storage
            .delete("local", &key("a"))
            .await
            .expect("delete a");
        assert!(f.storage.get_bytes("local", &key("a/b")).await.is_ok());
        assert!(matches!(
            f.storage.head("local", &key("a")).await,
            Err(Error::NotFound { .. })
        ));
    }
}

#[tokio::test]
async fn objects_in_the_earlier_layout_are_adopted_on_open() {
    let db = TestDb::sqlite(&[&qanat_governance::MIGRATIONS]).await;
    let f = local_fixture(db).await;
    let data = pattern((1 << 20) + 3, 4);
    for name in ["old/one.bin", "old/two.bin"] {
        f.storage
            .put_bytes("local", &key(name), Bytes::from(data.clone()))
            .await
            .expect("put");
    }
    // Put the objects back where the earlier layout kept them (the key as the path),
    // and forget that the location was moved: as a database from before the change.
    let root = f.dir.path().join("objects");
    for name in ["old/one.bin", "old/two.bin"] {
        let from = f.storage.local_path("local", &key(name)).expect("path");
        let to = root.join(name);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::rename(from, to).expect("move back");
    }
    let meta = f.storage_meta();
    for sql in [
        "DELETE FROM stored_objects",
        "DELETE FROM storage_settings WHERE name LIKE 'layout:%'",
    ] {
        sqlx::query(sql).execute(meta.writer()).await.expect(sql);
    }
    let keyring = f.storage.keyring().clone();
    let loc = LocationConfig::local("local", &root, "uae-north").expect("loc");
    let reopened = ObjectStorage::open(&[loc], "local", keyring, meta)
        .await
        .expect("reopen");
    let listed: Vec<String> = reopened
        .list("local", None)
        .await
        .expect("list")
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(listed, ["old/one.bin", "old/two.bin"]);
    for name in ["old/one.bin", "old/two.bin"] {
        assert!(reopened.get_bytes("local", &key(name)).await.expect("get")[..] == data[..]);
        assert!(!root.join(name).exists(), "{name} left at its old path");
    }
}

#[tokio::test]
async fn s3_compatible_backend_round_trips() {
    let (Some(url), Some(endpoint)) = (
        qanat_store::testing::service_var("QANAT_TEST_S3_URL"),
        qanat_store::testing::service_var("QANAT_TEST_S3_ENDPOINT"),
    ) else {
        return;
    };
    let db = TestDb::sqlite(&[&qanat_governance::MIGRATIONS]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let keyring = Keyring::load_or_create(&dir.path().join("master.key")).expect("keyring");
    let options: BTreeMap<String, String> = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_region", "us-east-1"),
        ("aws_access_key_id", "test"),
        ("aws_secret_access_key", "test"),
        ("aws_allow_http", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let loc = LocationConfig {
        name: "s3".into(),
        url: format!("{url}/run-{}", std::process::id()),
        region: "uae-north".parse().expect("region"),
        options,
    };
    let storage = ObjectStorage::open(&[loc], "s3", keyring, db.store.clone())
        .await
        .expect("open s3");
    storage.check().await.expect("s3 reachable");
    for (i, len) in [0usize, 10, (1 << 20) + 5, 20 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, 100 + i as u64);
        let k = key(&format!("s3/{len}"));
        storage
            .put_reader("s3", &k, &data[..])
            .await
            .expect("put s3");
        let got: Vec<Bytes> = storage
            .get("s3", &k)
            .await
            .expect("get s3")
            .try_collect()
            .await
            .expect("stream");
        assert!(got.concat() == data, "s3 round trip {len}");
    }
    let report = storage.keyring().rotate(&db.store).await.expect("rotate");
    // Four objects' keys and the key that names objects.
    assert_eq!(report.rewrapped_data_keys, 5);
    assert_eq!(
        storage
            .get_bytes("s3", &key("s3/10"))
            .await
            .expect("after rotate")
            .len(),
        10
    );
}

impl Fixture {
    fn storage_meta(&self) -> qanat_store::MetaStore {
        self._db.store.clone()
    }
}

/// Secrets kept in rows (webhook secrets) open only for the purpose they were sealed
/// for, never show in the sealed text, and are gone once their data key is forgotten.
#[tokio::test]
async fn a_sealed_secret_opens_only_for_its_purpose_and_not_after_it_is_forgotten() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let (storage, _dir) = qanat_store::testing::local_storage(&db).await;
        let (keyring, meta) = (storage.keyring(), &db.store);
        let sealed = keyring
            .seal(meta, "webhook-secret", b"s3cret")
            .await
            .expect("sealed");
        assert!(!sealed.contains("s3cret"));
        let opened = keyring
            .open(meta, "webhook-secret", &sealed)
            .await
            .expect("opens");
        assert_eq!(opened, b"s3cret");
        assert!(keyring.open(meta, "other", &sealed).await.is_err());
        keyring.forget(meta, &sealed).await.expect("forgotten");
        assert!(keyring.open(meta, "webhook-secret", &sealed).await.is_err());
    }
}

/// A crash after an object is replaced but before the index records its new size
/// leaves the index a version behind: a read still declares (and gives) the length of
/// the bytes actually stored — a download is never cut to the old length.
#[tokio::test]
async fn a_read_declares_the_stored_objects_length_even_when_the_index_is_behind() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let f = local_fixture(db).await;
        let k = key("state/sweep.json");
        let (old, new) = (pattern(100, 1), pattern(2500, 2));
        for data in [&old, &new] {
            f.storage
                .put_bytes("local", &k, Bytes::from(data.clone()))
                .await
                .expect("put");
        }
        // As if the server died between writing the new object and indexing it.
        sqlx::query("UPDATE stored_objects SET size = 100 WHERE object_key = $1")
            .bind(k.as_str())
            .execute(f.storage_meta().writer())
            .await
            .expect("stale index");
        assert_eq!(f.storage.head("local", &k).await.expect("head").size, 100);
        let (size, stream) = f.storage.get_sized("local", &k).await.expect("get");
        assert_eq!(size, 2500);
        let got: Vec<Bytes> = stream.try_collect().await.expect("read");
        assert_eq!(got.concat(), new);
    }
}

#[tokio::test]
async fn a_shredded_object_stays_unreadable_even_where_a_copy_of_its_bytes_survives() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let f = local_fixture(db).await;
        let data = pattern((1 << 20) + 99, 21);
        let k = key("projects/p/chunks/ab/erase-me");
        let keep = key("projects/p/chunks/ab/keep-me");
        f.storage
            .put_bytes("local", &k, Bytes::from(data.clone()))
            .await
            .expect("put");
        f.storage
            .put_bytes("local", &keep, Bytes::from(data.clone()))
            .await
            .expect("put");
        // A backup of the stored bytes, taken before the erasure.
        let path = f.storage.local_path("local", &k).expect("local file");
        let backup = std::fs::read(&path).expect("read");
        assert!(f.storage.shred("local", &k).await.expect("shred"));
        assert!(!path.exists(), "the ciphertext is deleted too");
        assert!(matches!(
            f.storage.head("local", &k).await,
            Err(Error::NotFound { .. })
        ));
        // The backup put back: without its data key it does not open.
        std::fs::write(&path, &backup).expect("restore the backup");
        let Err(err) = f.storage.get_bytes("local", &k).await else {
            panic!("a shredded object was read back from a copy of its bytes");
        };
        assert!(
            matches!(&err, Error::Keys(m) if m.contains("is not in the metadata store")),
            "{err}"
        );
        // Shredding again is a no-op that says nothing was there; the neighbour, with
        // the same plaintext, is untouched.
        std::fs::remove_file(&path).expect("remove");
        assert!(!f.storage.shred("local", &k).await.expect("again"));
        assert_eq!(
            f.storage.get_bytes("local", &keep).await.expect("kept")[..],
            data[..]
        );
    }
}
