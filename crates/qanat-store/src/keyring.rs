//! Master keys and the data keys they wrap (envelope encryption).
//!
//! Every object gets a fresh 256-bit data key. The data key is wrapped (AES-256-GCM) by
//! the active master key and stored in the `data_keys` table under a random 128-bit
//! `key_ref`; the object's header names the `key_ref`. Rotation therefore rewrites one
//! small row per object and never the object itself.
//!
//! Invariant kept by [`Keyring::rotate`]: every wrapped data key can be unwrapped by a
//! key in the ring at every moment. The new key is added and persisted before anything
//! is re-wrapped under it, and an old key leaves the ring only after no row names it.
//! A rotation interrupted at any point is finished by running it again.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::Row;

use crate::{now_micros, Error, MetaStore, Result};

const WRAP_AAD: &[u8] = b"qanat-data-key-v1:";
const ROTATE_BATCH: i64 = 500;

/// A 256-bit data key, in memory only.
#[derive(Clone)]
pub(crate) struct DataKey(pub(crate) [u8; 32]);

/// Where the master keys come from.
#[derive(Debug, Clone)]
pub enum KeyringSource {
    /// A JSON key file (created 0600); rotation rewrites it atomically.
    File(PathBuf),
    /// The `QANAT_MASTER_KEY` environment variable (one base64 key); cannot be rotated
    /// from inside Qanat.
    Env,
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    version: u32,
    active: String,
    keys: Vec<KeyFileEntry>,
}

#[derive(Serialize, Deserialize)]
struct KeyFileEntry {
    id: String,
    key: String,
    created_at: String,
}

struct Ring {
    active: String,
    keys: BTreeMap<String, ([u8; 32], String)>,
}

/// The master keys: one active key that wraps new data keys, plus any keys still needed
/// to unwrap older ones while a rotation is in progress.
#[derive(Clone)]
pub struct Keyring {
    ring: Arc<RwLock<Ring>>,
    source: KeyringSource,
    rotation: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active_key_id())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// What a rotation did.
#[derive(Debug, Clone, Serialize)]
pub struct RotationReport {
    pub new_key_id: String,
    pub retired_key_ids: Vec<String>,
    pub rewrapped_data_keys: u64,
}

fn key_id(key: &[u8; 32]) -> String {
    // The id names the key without revealing it: a truncated hash of a domain-separated
    // input, so it is not the hash anyone would compute of the raw key.
    let mut h = Sha256::new();
    h.update(b"qanat-master-key-id:");
    h.update(key);
    hex::encode(&h.finalize()[..8])
}

/// An HMAC-SHA256 key for `purpose`: the HMAC of the purpose under the master key, so
/// a MAC key is never the master key itself.
fn derived_key(master: &[u8; 32], purpose: &str) -> ring::hmac::Key {
    use ring::hmac;
    let derived = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, master),
        format!("qanat-derived-key:{purpose}").as_bytes(),
    );
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

fn random_key() -> [u8; 32] {
    let mut k = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut k);
    k
}

impl Keyring {
    /// Loads the key file at `path`, or creates it (mode 0600) with one fresh key.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        if path.exists() {
            return Self::load(path);
        }
        let key = random_key();
        let id = key_id(&key);
        let mut keys = BTreeMap::new();
        keys.insert(id.clone(), (key, chrono::Utc::now().to_rfc3339()));
        let ring = Ring { active: id, keys };
        write_key_file(path, &ring)?;
        Ok(Self::from_ring(
            ring,
            KeyringSource::File(path.to_path_buf()),
        ))
    }

    /// Loads an existing key file.
    pub fn load(path: &Path) -> Result<Self> {
        check_permissions(path)?;
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let file: KeyFile = serde_json::from_str(&text)
            .map_err(|e| Error::Keys(format!("{} is not a Qanat key file: {e}", path.display())))?;
        let mut keys = BTreeMap::new();
        for entry in file.keys {
            let key = decode_key(&entry.key)
                .map_err(|e| Error::Keys(format!("{}: key {}: {e}", path.display(), entry.id)))?;
            if key_id(&key) != entry.id {
                return Err(Error::Keys(format!(
                    "{}: key {} does not match its id; the file is damaged",
                    path.display(),
                    entry.id
                )));
            }
            keys.insert(entry.id, (key, entry.created_at));
        }
        if !keys.contains_key(&file.active) {
            return Err(Error::Keys(format!(
                "{}: the active key {} is not in the file",
                path.display(),
                file.active
            )));
        }
        Ok(Self::from_ring(
            Ring {
                active: file.active,
                keys,
            },
            KeyringSource::File(path.to_path_buf()),
        ))
    }

    /// A keyring of one key given as base64 (the `QANAT_MASTER_KEY` variable).
    pub fn from_base64(encoded: &str) -> Result<Self> {
        let key = decode_key(encoded).map_err(|e| Error::Keys(format!("QANAT_MASTER_KEY: {e}")))?;
        let id = key_id(&key);
        let mut keys = BTreeMap::new();
        keys.insert(id.clone(), (key, String::new()));
        Ok(Self::from_ring(
            Ring { active: id, keys },
            KeyringSource::Env,
        ))
    }

    /// A fresh random key, base64-encoded, for use as `QANAT_MASTER_KEY`.
    pub fn generate_base64() -> String {
        base64::engine::general_purpose::STANDARD.encode(random_key())
    }

    fn from_ring(ring: Ring, source: KeyringSource) -> Self {
        Keyring {
            ring: Arc::new(RwLock::new(ring)),
            source,
            rotation: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// The id of the key that wraps new data keys.
    pub fn active_key_id(&self) -> String {
        self.read().active.clone()
    }

    /// The ids of every key in the ring.
    pub fn key_ids(&self) -> Vec<String> {
        self.read().keys.keys().cloned().collect()
    }

    /// A MAC of `data` for `purpose` under a key derived from the active master key:
    /// `(key id, hex MAC)`. Whoever lacks the master key cannot forge one.
    pub fn mac(&self, purpose: &str, data: &[u8]) -> (String, String) {
        let held = self.read();
        let key = held.keys.get(&held.active).map(|k| k.0).unwrap_or_default();
        let mac = ring::hmac::sign(&derived_key(&key, purpose), data);
        (held.active.clone(), hex::encode(mac.as_ref()))
    }

    /// Whether `mac` is [`Keyring::mac`]'s for `data` under master key `key_id`; `None`
    /// when the ring no longer holds that key (it was rotated out).
    pub fn verify_mac(&self, key_id: &str, purpose: &str, data: &[u8], mac: &str) -> Option<bool> {
        let key = self.read().keys.get(key_id)?.0;
        let given = hex::decode(mac).unwrap_or_default();
        Some(ring::hmac::verify(&derived_key(&key, purpose), data, &given).is_ok())
    }

    /// Where the keys come from.
    pub fn source(&self) -> &KeyringSource {
        &self.source
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Ring> {
        // A poisoned lock only means a panic elsewhere while holding it; the ring itself
        // is replaced whole, so its contents are still consistent.
        self.ring.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Ring> {
        self.ring.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a data key, wraps it under the active master key and records it.
    pub(crate) async fn new_data_key(&self, meta: &MetaStore) -> Result<([u8; 16], DataKey)> {
        let mut keys = self.new_data_keys(meta, 1).await?;
        Ok(keys.remove(0))
    }

    /// Creates `n` data keys and records them in one transaction (one durable commit
    /// however many objects are about to be written).
    pub(crate) async fn new_data_keys(
        &self,
        meta: &MetaStore,
        n: usize,
    ) -> Result<Vec<([u8; 16], DataKey)>> {
        let mut rows = Vec::with_capacity(n);
        let master_id = {
            let ring = self.read();
            let (master, _) = &ring.keys[&ring.active];
            for _ in 0..n {
                let dek = random_key();
                let mut key_ref = [0u8; 16];
                rand::rngs::OsRng.fill_bytes(&mut key_ref);
                let wrapped = wrap(master, &key_ref, &dek)?;
                rows.push((key_ref, DataKey(dek), wrapped));
            }
            ring.active.clone()
        };
        let now = now_micros();
        let mut tx = meta.writer().begin().await?;
        for (key_ref, _, wrapped) in &rows {
            sqlx::query(
                "INSERT INTO data_keys (key_ref, master_key_id, wrapped, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(hex::encode(key_ref))
            .bind(&master_id)
            .bind(wrapped.clone())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(rows.into_iter().map(|(r, k, _)| (r, k)).collect())
    }

    /// Looks up and unwraps the data key named by `key_ref`.
    pub(crate) async fn data_key(&self, meta: &MetaStore, key_ref: &[u8; 16]) -> Result<DataKey> {
        let row = sqlx::query("SELECT master_key_id, wrapped FROM data_keys WHERE key_ref = $1")
            .bind(hex::encode(key_ref))
            .fetch_optional(meta.reader())
            .await?
            .ok_or_else(|| {
                Error::Keys(format!(
                    "data key {} is not in the metadata store (the object's key was deleted, or the object belongs to another Qanat installation)",
                    hex::encode(key_ref)
                ))
            })?;
        let master_id: String = row.try_get("master_key_id")?;
        let wrapped: Vec<u8> = row.try_get("wrapped")?;
        let ring = self.read();
        let (master, _) = ring.keys.get(&master_id).ok_or_else(|| {
            Error::Keys(format!(
                "data key {} is wrapped by master key {master_id}, which is not in the keyring",
                hex::encode(key_ref)
            ))
        })?;
        Ok(DataKey(unwrap(master, key_ref, &wrapped)?))
    }

    /// Deletes the record of a data key (the object it protected becomes unreadable).
    pub(crate) async fn forget_data_key(&self, meta: &MetaStore, key_ref: &[u8; 16]) -> Result<()> {
        sqlx::query("DELETE FROM data_keys WHERE key_ref = $1")
            .bind(hex::encode(key_ref))
            .execute(meta.writer())
            .await?;
        Ok(())
    }

    /// Adds a new master key, re-wraps every data key under it, and drops the old keys.
    /// Objects are not read or rewritten.
    #[qanat_macros::boxed]
    pub async fn rotate(&self, meta: &MetaStore) -> Result<RotationReport> {
        let path = match &self.source {
            KeyringSource::File(p) => p.clone(),
            KeyringSource::Env => {
                return Err(Error::Keys(
                    "the master key comes from QANAT_MASTER_KEY; rotate it by re-deploying with a key file (security.master_key_file) instead".into(),
                ))
            }
        };
        let _one_at_a_time = self.rotation.lock().await;

        // 1. Add the new key and make it active; persist before any row depends on it.
        let new_key = random_key();
        let new_id = key_id(&new_key);
        {
            let mut ring = self.write();
            ring.keys
                .insert(new_id.clone(), (new_key, chrono::Utc::now().to_rfc3339()));
            ring.active = new_id.clone();
            write_key_file(&path, &ring)?;
        }

        // 2. Re-wrap every data key still under an older key, in batches.
        let mut rewrapped = 0u64;
        loop {
            let rows = sqlx::query(
                "SELECT key_ref, master_key_id, wrapped FROM data_keys WHERE master_key_id <> $1 ORDER BY key_ref LIMIT $2",
            )
            .bind(&new_id)
            .bind(ROTATE_BATCH)
            .fetch_all(meta.writer())
            .await?;
            if rows.is_empty() {
                break;
            }
            let mut updates = Vec::with_capacity(rows.len());
            {
                let ring = self.read();
                for row in &rows {
                    let key_ref_hex: String = row.try_get("key_ref")?;
                    let old_id: String = row.try_get("master_key_id")?;
                    let wrapped: Vec<u8> = row.try_get("wrapped")?;
                    let key_ref = parse_key_ref(&key_ref_hex)?;
                    let (old, _) = ring.keys.get(&old_id).ok_or_else(|| {
                        Error::Keys(format!(
                            "data key {key_ref_hex} is wrapped by master key {old_id}, which is not in the keyring; rotation cannot continue"
                        ))
                    })?;
                    let dek = unwrap(old, &key_ref, &wrapped)?;
                    updates.push((key_ref_hex, old_id, wrap(&new_key, &key_ref, &dek)?));
                }
            }
            let mut tx = meta.writer().begin().await?;
            for (key_ref_hex, old_id, wrapped) in updates {
                sqlx::query(
                    "UPDATE data_keys SET master_key_id = $1, wrapped = $2 WHERE key_ref = $3 AND master_key_id = $4",
                )
                .bind(&new_id)
                .bind(wrapped)
                .bind(key_ref_hex)
                .bind(old_id)
                .execute(&mut *tx)
                .await?;
                rewrapped += 1;
            }
            tx.commit().await?;
        }

        // 3. Nothing names the old keys any more: drop them from the ring.
        let retired = {
            let mut ring = self.write();
            let retired: Vec<String> = ring
                .keys
                .keys()
                .filter(|id| **id != new_id)
                .cloned()
                .collect();
            ring.keys.retain(|id, _| *id == new_id);
            write_key_file(&path, &ring)?;
            retired
        };
        tracing::info!(new_key_id = %new_id, rewrapped, "master key rotated");
        Ok(RotationReport {
            new_key_id: new_id,
            retired_key_ids: retired,
            rewrapped_data_keys: rewrapped,
        })
    }
}

fn decode_key(encoded: &str) -> std::result::Result<[u8; 32], String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| format!("not valid base64 ({e})"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("a master key is 32 bytes, this one is {}", b.len()))
}

pub(crate) fn parse_key_ref(hex_ref: &str) -> Result<[u8; 16]> {
    let bytes = hex::decode(hex_ref).map_err(|e| Error::Keys(format!("bad key_ref: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| Error::Keys("bad key_ref length".into()))
}

fn master_cipher(master: &[u8; 32]) -> Result<LessSafeKey> {
    UnboundKey::new(&AES_256_GCM, master)
        .map(LessSafeKey::new)
        .map_err(|_| Error::Keys("bad master key".into()))
}

fn wrap(master: &[u8; 32], key_ref: &[u8; 16], dek: &[u8; 32]) -> Result<Vec<u8>> {
    let mut nonce = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let aad = [WRAP_AAD, key_ref].concat();
    let mut buf = dek.to_vec();
    master_cipher(master)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aad[..]),
            &mut buf,
        )
        .map_err(|_| Error::Keys("wrapping a data key failed".into()))?;
    Ok([nonce.as_slice(), &buf].concat())
}

fn unwrap(master: &[u8; 32], key_ref: &[u8; 16], wrapped: &[u8]) -> Result<[u8; 32]> {
    if wrapped.len() != 12 + 32 + 16 {
        return Err(Error::Keys(
            "a wrapped data key has the wrong length".into(),
        ));
    }
    let mut nonce = [0u8; 12];
    nonce.copy_from_slice(&wrapped[..12]);
    let aad = [WRAP_AAD, key_ref].concat();
    let mut buf = wrapped[12..].to_vec();
    let pt = master_cipher(master)?
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(&aad[..]),
            &mut buf,
        )
        .map_err(|_| {
            Error::Keys(format!(
                "data key {} failed to unwrap: wrong master key or altered key record",
                hex::encode(key_ref)
            ))
        })?;
    pt.try_into()
        .map_err(|_| Error::Keys("an unwrapped data key has the wrong length".into()))
}

fn write_key_file(path: &Path, ring: &Ring) -> Result<()> {
    let file = KeyFile {
        version: 1,
        active: ring.active.clone(),
        keys: ring
            .keys
            .iter()
            .map(|(id, (key, created_at))| KeyFileEntry {
                id: id.clone(),
                key: base64::engine::general_purpose::STANDARD.encode(key),
                created_at: created_at.clone(),
            })
            .collect(),
    };
    let text = serde_json::to_vec_pretty(&file).map_err(|e| Error::Keys(e.to_string()))?;
    write_secret_file(path, &text)
}

/// Writes `bytes` to `path` atomically (temp file, fsync, rename) with mode 0600.
pub fn write_secret_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("secret"),
        std::process::id()
    ));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn check_permissions(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(Error::Keys(format!(
                "{} is readable by other users (mode {mode:o}); run `chmod 600 {}`",
                path.display(),
                path.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_round_trips_and_binds_key_ref() {
        let master = random_key();
        let dek = random_key();
        let r1 = [1u8; 16];
        let r2 = [2u8; 16];
        let w = wrap(&master, &r1, &dek).expect("wrap");
        assert_eq!(unwrap(&master, &r1, &w).expect("unwrap"), dek);
        assert!(
            unwrap(&master, &r2, &w).is_err(),
            "a wrapped key moved to another ref must fail"
        );
        assert!(unwrap(&random_key(), &r1, &w).is_err());
    }

    #[test]
    fn key_file_is_private_and_reloads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("master.key");
        let ring = Keyring::load_or_create(&path).expect("create");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let again = Keyring::load(&path).expect("load");
        assert_eq!(ring.active_key_id(), again.active_key_id());
    }

    #[test]
    fn refuses_world_readable_key_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("master.key");
        Keyring::load_or_create(&path).expect("create");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
            let err = Keyring::load(&path).expect_err("must refuse");
            assert!(err.to_string().contains("chmod 600"), "{err}");
        }
    }
}
