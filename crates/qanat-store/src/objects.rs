//! Named storage locations and the encrypted object API over them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::stream::{BoxStream, Stream, StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::envelope::{self, ChunkCipher, Header, CHUNK_SIZE, HEADER_LEN};
use crate::{localfs, now_micros, Error, Keyring, MetaStore, Result};
use sqlx::Row;

/// Multipart part size: S3 wants ≥ 5 MiB parts; 8 MiB keeps memory small.
const PART_SIZE: usize = 8 << 20;
/// Parts in flight at once while streaming an upload.
const PARTS_IN_FLIGHT: usize = 4;
/// In-memory data up to this size is sealed whole and written with one request.
const IN_MEMORY_PUT: usize = 16 << 20;

/// A data-residency region such as `uae-north`: lowercase letters, digits and dashes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Region(String);

impl Region {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Region {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let ok = !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-');
        if ok {
            Ok(Region(s.to_string()))
        } else {
            Err(Error::invalid(
                "region",
                format!("'{s}': use lowercase letters, digits and dashes, e.g. uae-north"),
            ))
        }
    }
}

impl TryFrom<String> for Region {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Region> for String {
    fn from(r: Region) -> String {
        r.0
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A validated object key: `/`-separated segments, no empty, `.` or `..` segment, no
/// leading slash, no backslash or control characters, at most 1024 bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey(String);

impl ObjectKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key `self/child` (child is validated too).
    pub fn join(&self, child: &str) -> Result<ObjectKey> {
        format!("{}/{}", self.0, child).parse()
    }
}

impl FromStr for ObjectKey {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::invalid("object key", format!("'{s}': {why}"));
        if s.is_empty() {
            return Err(bad("is empty"));
        }
        if s.len() > 1024 {
            return Err(bad("is longer than 1024 bytes"));
        }
        if s.starts_with('/') {
            return Err(bad("must be relative (no leading '/')"));
        }
        if s.chars().any(|c| c.is_control() || c == '\\') {
            return Err(bad("contains a control character or a backslash"));
        }
        for seg in s.split('/') {
            match seg {
                "" => return Err(bad("has an empty segment ('//' or a trailing '/')")),
                "." | ".." => return Err(bad("has a '.' or '..' segment")),
                _ => {}
            }
        }
        Ok(ObjectKey(s.to_string()))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How to open one storage location (from `[[storage.locations]]` in `qanat.toml`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LocationConfig {
    pub name: String,
    /// `file:///abs/dir`, a plain directory path, or `s3://bucket/prefix`.
    pub url: String,
    pub region: Region,
    /// Backend options passed to `object_store` (for S3: `aws_endpoint`, `aws_region`,
    /// `aws_access_key_id`, `aws_secret_access_key`, `aws_allow_http`, …).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

impl LocationConfig {
    /// A local-directory location.
    pub fn local(name: &str, dir: impl Into<PathBuf>, region: &str) -> Result<Self> {
        Ok(LocationConfig {
            name: name.to_string(),
            url: dir.into().display().to_string(),
            region: region.parse()?,
            options: BTreeMap::new(),
        })
    }
}

/// What callers may know about a location (no credentials).
#[derive(Debug, Clone, Serialize)]
pub struct LocationInfo {
    pub name: String,
    pub region: Region,
    pub kind: &'static str,
}

struct Location {
    info: LocationInfo,
    store: Arc<dyn ObjectStore>,
    /// The same store when it is a local directory: whole objects are written to it
    /// durably by [`localfs`] instead.
    local: Option<Arc<LocalFileSystem>>,
}

/// Metadata of a stored object.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectInfo {
    pub key: String,
    /// Plaintext size in bytes.
    pub size: u64,
    /// Bytes on the backend (header and authentication tags included).
    pub stored_size: u64,
    pub last_modified: chrono::DateTime<chrono::Utc>,
}

/// A stream of verified plaintext.
pub type PlainStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

/// The encrypted object storage layer over every configured location.
#[derive(Clone)]
pub struct ObjectStorage {
    locations: Arc<BTreeMap<String, Location>>,
    default_location: String,
    keyring: Keyring,
    meta: MetaStore,
    /// Names objects on their backend: see [`ObjectStorage::backend_name`].
    namer: ring::hmac::Key,
}

impl fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStorage")
            .field("locations", &self.locations.keys().collect::<Vec<_>>())
            .field("default_location", &self.default_location)
            .finish_non_exhaustive()
    }
}

fn open_location(cfg: &LocationConfig) -> Result<Location> {
    let bad = |why: String| Error::invalid("storage location", format!("'{}': {why}", cfg.name));
    let (store, kind, local): (Arc<dyn ObjectStore>, &'static str, _) =
        if cfg.url.starts_with("s3://") || cfg.url.starts_with("s3a://") {
            let url = url::Url::parse(&cfg.url).map_err(|e| bad(format!("bad URL: {e}")))?;
            let (store, prefix) = object_store::parse_url_opts(&url, cfg.options.clone())
                .map_err(|e| bad(e.to_string()))?;
            let store: Arc<dyn ObjectStore> = if prefix.as_ref().is_empty() {
                Arc::from(store)
            } else {
                Arc::new(PrefixStore::new(store, prefix))
            };
            (store, "s3", None)
        } else {
            let dir = match cfg.url.strip_prefix("file://") {
                Some(rest) => PathBuf::from(rest),
                None if cfg.url.contains("://") => {
                    return Err(bad(format!(
                        "unsupported URL scheme in '{}'; use file:// or s3://",
                        cfg.url
                    )))
                }
                None => PathBuf::from(&cfg.url),
            };
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let store =
                Arc::new(LocalFileSystem::new_with_prefix(&dir).map_err(|e| bad(e.to_string()))?);
            (store.clone() as Arc<dyn ObjectStore>, "local", Some(store))
        };
    Ok(Location {
        info: LocationInfo {
            name: cfg.name.clone(),
            region: cfg.region.clone(),
            kind,
        },
        store,
        local,
    })
}

/// Reads until `buf` holds `want` bytes or the source ends.
async fn fill<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>, want: usize) -> Result<()> {
    buf.clear();
    while buf.len() < want {
        let mut limited = (&mut *reader).take((want - buf.len()) as u64);
        let n = limited.read_to_end(buf).await.map_err(Error::Source)?;
        if n == 0 {
            break;
        }
    }
    Ok(())
}

impl ObjectStorage {
    /// Opens every configured location. `default_location` must be one of them.
    #[qanat_macros::boxed]
    pub async fn open(
        configs: &[LocationConfig],
        default_location: &str,
        keyring: Keyring,
        meta: MetaStore,
    ) -> Result<Self> {
        let mut locations = BTreeMap::new();
        for cfg in configs {
            if locations.contains_key(&cfg.name) {
                return Err(Error::invalid(
                    "storage location",
                    format!("'{}' is configured twice", cfg.name),
                ));
            }
            locations.insert(cfg.name.clone(), open_location(cfg)?);
        }
        if !locations.contains_key(default_location) {
            return Err(Error::UnknownLocation(default_location.to_string()));
        }
        let namer = naming_key(&keyring, &meta).await?;
        let storage = ObjectStorage {
            locations: Arc::new(locations),
            default_location: default_location.to_string(),
            keyring,
            meta,
            namer,
        };
        for name in storage.locations.keys() {
            storage.adopt_legacy_layout(name).await?;
        }
        Ok(storage)
    }

    /// Where `key` lives on its backend: `k1/<2 hex>/<62 hex>`, the HMAC-SHA256 of the
    /// key under a secret data key of this installation. Keys are user data (they can
    /// name people), so the backend's listing reveals none of them; and any valid key
    /// fits (no file-name length limit, and `a` and `a/b` can both be objects).
    pub fn backend_name(&self, key: &ObjectKey) -> String {
        let tag = ring::hmac::sign(&self.namer, key.as_str().as_bytes());
        let h = hex::encode(tag.as_ref());
        format!("{LAYOUT_DIR}/{}/{}", &h[..2], &h[2..])
    }

    /// The file that holds `key` when `location` is a local directory (for operators
    /// and tests; the API never shows it).
    pub fn local_path(&self, location: &str, key: &ObjectKey) -> Option<PathBuf> {
        let loc = self.loc(location).ok()?;
        loc.local
            .as_ref()?
            .path_to_filesystem(&self.store_path(key))
            .ok()
    }

    fn store_path(&self, key: &ObjectKey) -> StorePath {
        StorePath::from(self.backend_name(key))
    }

    /// Records objects just written (after their bytes are durable, so the index never
    /// names an object that is not there).
    async fn record(&self, location: &str, written: &[(&ObjectKey, u64)]) -> Result<()> {
        let now = now_micros();
        let mut tx = self.meta.writer().begin().await?;
        for (key, size) in written {
            sqlx::query(
                "INSERT INTO stored_objects (location, object_key, size, stored_size, modified_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (location, object_key) DO UPDATE SET \
                 size = excluded.size, stored_size = excluded.stored_size, modified_at = excluded.modified_at",
            )
            .bind(location)
            .bind(key.as_str())
            .bind(*size as i64)
            .bind(sealed_len(*size) as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Moves the objects of a location written under the earlier layout (the key as the
    /// path) to their derived names and indexes them, once per location. Re-running an
    /// interrupted move finishes it: objects already moved are recognised by their names.
    async fn adopt_legacy_layout(&self, location: &str) -> Result<()> {
        let marker = format!("layout:{location}");
        if setting(&self.meta, &marker).await?.as_deref() == Some(LAYOUT_DIR) {
            return Ok(());
        }
        let loc = self.loc(location)?;
        let indexed: std::collections::HashSet<StorePath> =
            sqlx::query("SELECT object_key FROM stored_objects WHERE location = $1")
                .bind(location)
                .fetch_all(self.meta.reader())
                .await?
                .iter()
                .filter_map(|r| r.try_get::<String, _>("object_key").ok()?.parse().ok())
                .map(|k: ObjectKey| self.store_path(&k))
                .collect();
        let found: Vec<object_store::ObjectMeta> = loc.store.list(None).try_collect().await?;
        let mut moved = 0u64;
        for m in found {
            if indexed.contains(&m.location) {
                continue;
            }
            let Ok(key) = decoded_key(&m.location).parse::<ObjectKey>() else {
                tracing::warn!(
                    location,
                    "left an object whose name is not a valid key where it is"
                );
                continue;
            };
            let to = self.store_path(&key);
            loc.store.rename(&m.location, &to).await?;
            let size = envelope::plaintext_len(m.size, CHUNK_SIZE).unwrap_or(0);
            self.record(location, &[(&key, size)]).await?;
            moved += 1;
        }
        if let Some(local) = &loc.local {
            // The new names are durable before the move is marked done.
            let root = local.path_to_filesystem(&StorePath::from(LAYOUT_DIR)).ok();
            if let Some(root) = root.filter(|r| r.is_dir()) {
                let mut dirs = vec![root.clone()];
                for e in std::fs::read_dir(&root).map_err(|e| Error::io(&root, e))? {
                    dirs.push(e.map_err(|e| Error::io(&root, e))?.path());
                }
                sync_dirs(dirs).await?;
            }
        }
        if moved > 0 {
            tracing::info!(location, moved, "moved objects to the keyed layout");
        }
        sqlx::query(
            "INSERT INTO storage_settings (name, value) VALUES ($1, $2) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        )
        .bind(&marker)
        .bind(LAYOUT_DIR)
        .execute(self.meta.writer())
        .await?;
        Ok(())
    }

    /// The location used when a request names none.
    pub fn default_location(&self) -> &str {
        &self.default_location
    }

    /// Every location with its region.
    pub fn locations(&self) -> Vec<LocationInfo> {
        self.locations.values().map(|l| l.info.clone()).collect()
    }

    /// One location's name, region and kind.
    pub fn location(&self, name: &str) -> Result<LocationInfo> {
        Ok(self.loc(name)?.info.clone())
    }

    /// The keyring (for rotation).
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    fn loc(&self, name: &str) -> Result<&Location> {
        self.locations
            .get(name)
            .ok_or_else(|| Error::UnknownLocation(name.to_string()))
    }

    /// Starts writing an object: a fresh data key and the cipher for its chunks.
    async fn begin<'a>(&'a self, location: &str, key: &'a ObjectKey) -> Result<NewObject<'a>> {
        let loc = self.loc(location)?;
        let (key_ref, dek) = self.keyring.new_data_key(&self.meta).await?;
        let header = Header {
            chunk_size: CHUNK_SIZE,
            key_ref,
        };
        let cipher = ChunkCipher::new(&dek, &header).map_err(Error::Keys)?;
        Ok(NewObject {
            loc,
            key,
            header,
            cipher,
        })
    }

    /// Drops the data key of an object that was never written.
    async fn abandon(&self, obj: &NewObject<'_>) {
        self.forget(&obj.header.key_ref).await;
    }

    async fn forget(&self, key_ref: &[u8; 16]) {
        let _ = self.keyring.forget_data_key(&self.meta, key_ref).await;
    }

    /// Seals `data` whole and writes it with one request (atomic on every backend).
    /// In a local directory the object is durable on return except for its name:
    /// the directory to sync is returned (see [`localfs`]).
    async fn put_whole(&self, obj: NewObject<'_>, data: Bytes) -> Result<Option<PathBuf>> {
        let chunk = CHUNK_SIZE as usize;
        let pieces = data.len().div_ceil(chunk).max(1);
        let sealed_len = HEADER_LEN + data.len() + pieces * envelope::TAG_LEN;
        let key_ref = obj.header.key_ref;
        let NewObject {
            loc,
            key,
            header,
            mut cipher,
        } = obj;
        let name = key.to_string();
        let path = self.store_path(key);
        let mut seal_all = move |out: &mut Vec<u8>| -> Result<()> {
            out.extend_from_slice(&header.encode());
            for i in 0..pieces {
                let part = &data[(i * chunk).min(data.len())..((i + 1) * chunk).min(data.len())];
                cipher
                    .seal_into(part, i + 1 == pieces, out)
                    .map_err(|reason| Error::Integrity {
                        key: name.clone(),
                        reason,
                    })?;
            }
            Ok(())
        };
        let written = match &loc.local {
            Some(local) => {
                let path = local.path_to_filesystem(&path);
                tokio::task::spawn_blocking(move || {
                    let path = path?;
                    let mut body = localfs::AlignedBuf::with_capacity(sealed_len);
                    seal_all(body.vec())?;
                    localfs::write_whole(&path, body).map_err(|e| Error::io(&path, e))?;
                    Ok(path.parent().map(Path::to_path_buf))
                })
                .await
                .map_err(|e| Error::io(key.as_str(), std::io::Error::other(e.to_string())))
                .and_then(|r| r)
            }
            None => {
                let mut body = Vec::with_capacity(sealed_len);
                match seal_all(&mut body) {
                    Ok(()) => loc
                        .store
                        .put(&path, PutPayload::from(body))
                        .await
                        .map(|_| None)
                        .map_err(Error::from),
                    Err(e) => Err(e),
                }
            }
        };
        if written.is_err() {
            self.forget(&key_ref).await;
        }
        written
    }

    /// Stores `data` at `key`, replacing any object there. Data already in memory is
    /// sealed in one pass and written with one request; anything larger than
    /// [`IN_MEMORY_PUT`] streams like [`Self::put_reader`].
    #[qanat_macros::boxed]
    pub async fn put_bytes(&self, location: &str, key: &ObjectKey, data: Bytes) -> Result<u64> {
        if data.len() > IN_MEMORY_PUT {
            return self.put_reader(location, key, &data[..]).await;
        }
        let obj = self.begin(location, key).await?;
        let len = data.len() as u64;
        let dir = self.put_whole(obj, data).await?;
        sync_dirs(dir.into_iter().collect()).await?;
        self.record(location, &[(key, len)]).await?;
        Ok(len)
    }

    /// Stores several in-memory objects (each at most 16 MiB) in one go: their data keys
    /// are recorded in one transaction and the objects are written concurrently. Returns
    /// the plaintext bytes written. Each object is atomic on its own; if one fails, those
    /// already written stay complete and readable, and the keys of the rest are dropped.
    #[qanat_macros::boxed]
    pub async fn put_many(&self, location: &str, items: &[(ObjectKey, Bytes)]) -> Result<u64> {
        let loc = self.loc(location)?;
        if let Some((key, _)) = items.iter().find(|(_, d)| d.len() > IN_MEMORY_PUT) {
            return Err(Error::invalid(
                "object",
                format!("'{key}' is over {IN_MEMORY_PUT} bytes; use put_reader"),
            ));
        }
        let keys = self.keyring.new_data_keys(&self.meta, items.len()).await?;
        let mut objects = Vec::with_capacity(items.len());
        for ((key, data), (key_ref, dek)) in items.iter().zip(keys) {
            let header = Header {
                chunk_size: CHUNK_SIZE,
                key_ref,
            };
            let cipher = ChunkCipher::new(&dek, &header).map_err(Error::Keys)?;
            objects.push((
                NewObject {
                    loc,
                    key,
                    header,
                    cipher,
                },
                data,
            ));
        }
        // Futures built eagerly (not in a stream closure) keep the caller's future Send.
        let writes: Vec<_> = objects
            .into_iter()
            .map(|(obj, data)| self.put_whole(obj, data.clone()))
            .collect();
        let written: Vec<Result<Option<PathBuf>>> = futures::stream::iter(writes)
            .buffer_unordered(PARTS_IN_FLIGHT)
            .collect()
            .await;
        let dirs = written
            .into_iter()
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect::<std::collections::BTreeSet<_>>();
        sync_dirs(dirs.into_iter().collect()).await?;
        let written: Vec<(&ObjectKey, u64)> =
            items.iter().map(|(k, d)| (k, d.len() as u64)).collect();
        self.record(location, &written).await?;
        Ok(written.iter().map(|(_, n)| n).sum())
    }

    /// Streams `reader` into an encrypted object at `key` and returns the plaintext size.
    /// Memory stays bounded (two chunks plus the parts in flight) whatever the size.
    /// The object appears only when complete: a failed upload leaves nothing behind.
    pub async fn put_reader<R: AsyncRead + Unpin + Send>(
        &self,
        location: &str,
        key: &ObjectKey,
        reader: R,
    ) -> Result<u64> {
        let total = self.stream_in(location, key, reader).await?;
        self.record(location, &[(key, total)]).await?;
        Ok(total)
    }

    async fn stream_in<R: AsyncRead + Unpin + Send>(
        &self,
        location: &str,
        key: &ObjectKey,
        mut reader: R,
    ) -> Result<u64> {
        let mut obj = self.begin(location, key).await?;
        let chunk = CHUNK_SIZE as usize;
        let path = self.store_path(key);

        let mut current = Vec::with_capacity(chunk);
        let mut next = Vec::with_capacity(chunk);
        if let Err(e) = fill(&mut reader, &mut current, chunk).await {
            self.abandon(&obj).await;
            return Err(e);
        }
        if current.len() < chunk {
            // Small object: one request.
            let len = current.len() as u64;
            let dir = self.put_whole(obj, Bytes::from(current)).await?;
            sync_dirs(dir.into_iter().collect()).await?;
            return Ok(len);
        }

        let upload = match obj.loc.store.put_multipart(&path).await {
            Ok(u) => u,
            Err(e) => {
                self.abandon(&obj).await;
                return Err(e.into());
            }
        };
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        writer.write(&obj.header.encode());
        let mut total = 0u64;
        let result: Result<()> = async {
            loop {
                fill(&mut reader, &mut next, chunk).await?;
                let last = next.is_empty();
                writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                writer.write(&obj.seal(&current, last)?);
                total += current.len() as u64;
                if last {
                    return Ok(());
                }
                std::mem::swap(&mut current, &mut next);
                if current.len() < chunk {
                    // The source ended inside this chunk: it is the last one.
                    writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                    writer.write(&obj.seal(&current, true)?);
                    total += current.len() as u64;
                    return Ok(());
                }
            }
        }
        .await;
        match result {
            Ok(()) => match writer.finish().await {
                Ok(_) => Ok(total),
                Err(e) => {
                    self.abandon(&obj).await;
                    Err(e.into())
                }
            },
            Err(e) => {
                let _ = writer.abort().await;
                self.abandon(&obj).await;
                Err(e)
            }
        }
    }

    fn not_found(&self, location: &str, key: &ObjectKey, e: object_store::Error) -> Error {
        match e {
            object_store::Error::NotFound { .. } => Error::NotFound {
                location: location.to_string(),
                key: key.to_string(),
            },
            other => other.into(),
        }
    }

    /// Opens `key` for reading: a stream of plaintext, each chunk verified before it is
    /// yielded. Tampering surfaces as [`Error::Integrity`] at the altered chunk.
    #[qanat_macros::boxed]
    pub async fn get(&self, location: &str, key: &ObjectKey) -> Result<PlainStream> {
        Ok(self.get_sized(location, key).await?.1)
    }

    /// [`Self::get`] with the plaintext length of the object being read, derived from
    /// the stored object itself (not from the index, which a crash between writing an
    /// object and indexing it can leave one version behind): what a download declares
    /// as its length.
    #[qanat_macros::boxed]
    pub async fn get_sized(&self, location: &str, key: &ObjectKey) -> Result<(u64, PlainStream)> {
        let loc = self.loc(location)?;
        let (stored, mut inner) = match &loc.local {
            // A local file is read on a blocking thread in blocks of a few sealed
            // chunks (the object store's local reader hands over 8 KiB at a time, one
            // thread hand-off each: most of a large read's time).
            Some(local) => {
                let path = local
                    .path_to_filesystem(&self.store_path(key))
                    .map_err(|e| self.not_found(location, key, e))?;
                read_local(path)
                    .await
                    .map_err(|e| self.not_found(location, key, e))?
            }
            None => {
                let got = loc
                    .store
                    .get(&self.store_path(key))
                    .await
                    .map_err(|e| self.not_found(location, key, e))?;
                let stored = got.meta.size;
                let inner: BoxStream<'static, object_store::Result<Bytes>> = got.into_stream();
                (stored, inner)
            }
        };
        let integrity = |reason: String| Error::Integrity {
            key: key.to_string(),
            reason,
        };
        let mut buf = BytesMut::new();
        while buf.len() < HEADER_LEN {
            match inner.next().await {
                // The first block becomes the buffer itself (a local block is not
                // copied; the decrypting stream takes it on from there).
                Some(b) if buf.is_empty() => buf = BytesMut::from(b?),
                Some(b) => buf.extend_from_slice(&b?),
                None => return Err(integrity("object is shorter than its header".into())),
            }
        }
        let header = Header::decode(&buf[..HEADER_LEN]).map_err(integrity)?;
        let size = envelope::plaintext_len(stored, header.chunk_size)
            .ok_or_else(|| integrity(format!("a stored length of {stored} bytes is impossible")))?;
        let _ = buf.split_to(HEADER_LEN);
        let dek = self.keyring.data_key(&self.meta, &header.key_ref).await?;
        let state = ReadState {
            inner,
            buf,
            cipher: ChunkCipher::new(&dek, &header).map_err(Error::Keys)?,
            sealed_len: header.sealed_chunk_len(),
            finished: false,
            key: key.to_string(),
        };
        Ok((
            size,
            Box::pin(futures::stream::try_unfold(state, read_next)),
        ))
    }

    /// Reads a whole object into memory (for small objects).
    #[qanat_macros::boxed]
    pub async fn get_bytes(&self, location: &str, key: &ObjectKey) -> Result<Bytes> {
        let parts: Vec<Bytes> = self.get(location, key).await?.try_collect().await?;
        Ok(parts.concat().into())
    }

    /// Size and time of an object, without reading its body.
    #[qanat_macros::boxed]
    pub async fn head(&self, location: &str, key: &ObjectKey) -> Result<ObjectInfo> {
        self.loc(location)?;
        let row = sqlx::query(
            "SELECT object_key, size, stored_size, modified_at FROM stored_objects \
             WHERE location = $1 AND object_key = $2",
        )
        .bind(location)
        .bind(key.as_str())
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::NotFound {
            location: location.to_string(),
            key: key.to_string(),
        })?;
        indexed_info(&row)
    }

    /// Deletes the object and its data key.
    #[qanat_macros::boxed]
    pub async fn delete(&self, location: &str, key: &ObjectKey) -> Result<()> {
        let loc = self.loc(location)?;
        let path = self.store_path(key);
        let header = self.stored_header(location, key).await?;
        // Out of the index first: a crash half-way leaves an unlisted object behind,
        // never a listed one that is gone.
        let unlisted =
            sqlx::query("DELETE FROM stored_objects WHERE location = $1 AND object_key = $2")
                .bind(location)
                .bind(key.as_str())
                .execute(self.meta.writer())
                .await?
                .rows_affected();
        if header.is_none() && unlisted == 0 {
            return Err(Error::NotFound {
                location: location.to_string(),
                key: key.to_string(),
            });
        }
        match loc.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(h) = header {
            self.keyring.forget_data_key(&self.meta, &h.key_ref).await?;
        }
        Ok(())
    }

    /// The header of the object stored at `key` (which names its data key), if there
    /// is one that reads as a header.
    async fn stored_header(&self, location: &str, key: &ObjectKey) -> Result<Option<Header>> {
        let loc = self.loc(location)?;
        match loc
            .store
            .get_range(&self.store_path(key), 0..HEADER_LEN as u64)
            .await
        {
            Ok(head) => Ok(Header::decode(&head).ok()),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the object at `key` with `data`, then destroys the data key of the
    /// object it replaced: the old bytes, wherever a copy of them survives, no longer
    /// open (a plain overwrite leaves the old key behind). Returns the bytes written.
    #[qanat_macros::boxed]
    pub async fn replace(&self, location: &str, key: &ObjectKey, data: Bytes) -> Result<u64> {
        let old = self.stored_header(location, key).await?;
        let written = self.put_bytes(location, key, data).await?;
        if let Some(h) = old {
            self.keyring.forget_data_key(&self.meta, &h.key_ref).await?;
        }
        Ok(written)
    }

    /// Destroys an object for good (crypto-shredding): its data key is deleted first,
    /// so the ciphertext is unreadable from that moment wherever a copy of it survives
    /// (a bucket's replica or backup), then it leaves the index and the store. Returns
    /// whether there was an object. A failure after the key went leaves only
    /// unreadable bytes behind; calling it again finishes the job.
    #[qanat_macros::boxed]
    pub async fn shred(&self, location: &str, key: &ObjectKey) -> Result<bool> {
        let loc = self.loc(location)?;
        let path = self.store_path(key);
        let header = self.stored_header(location, key).await?;
        if let Some(h) = &header {
            self.keyring.forget_data_key(&self.meta, &h.key_ref).await?;
        }
        let unlisted =
            sqlx::query("DELETE FROM stored_objects WHERE location = $1 AND object_key = $2")
                .bind(location)
                .bind(key.as_str())
                .execute(self.meta.writer())
                .await?
                .rows_affected();
        match loc.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(header.is_some() || unlisted > 0)
    }

    /// Lists objects under `prefix` (every object when `None`), sorted by key. A prefix
    /// is whole segments: `a` lists `a/b` and `a/c/d`, not `a` itself nor `ab`.
    #[qanat_macros::boxed]
    pub async fn list(
        &self,
        location: &str,
        prefix: Option<&ObjectKey>,
    ) -> Result<Vec<ObjectInfo>> {
        self.loc(location)?;
        let select = "SELECT object_key, size, stored_size, modified_at FROM stored_objects WHERE location = $1";
        let rows = match prefix {
            // Keys under `p/` sort between `p/` and `p0` ('0' follows '/'), bytewise.
            Some(p) => {
                let sql =
                    format!("{select} AND object_key > $2 AND object_key < $3 ORDER BY object_key");
                sqlx::query(&sql)
                    .bind(location)
                    .bind(format!("{p}/"))
                    .bind(format!("{p}0"))
                    .fetch_all(self.meta.reader())
                    .await?
            }
            None => {
                let sql = format!("{select} ORDER BY object_key");
                sqlx::query(&sql)
                    .bind(location)
                    .fetch_all(self.meta.reader())
                    .await?
            }
        };
        let mut out = rows.iter().map(indexed_info).collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// How many objects are stored in `location` under `prefix` (whole segments, as
    /// [`Self::list`]; everything when `None`), their plaintext bytes and their bytes
    /// as stored: (objects, bytes, stored bytes).
    #[qanat_macros::boxed]
    pub async fn usage(&self, location: &str, prefix: Option<&str>) -> Result<(u64, u64, u64)> {
        self.loc(location)?;
        let select = "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(size), 0) AS BIGINT) AS bytes, \
             CAST(COALESCE(SUM(stored_size), 0) AS BIGINT) AS stored FROM stored_objects WHERE location = $1";
        let row = match prefix {
            Some(p) => {
                let sql = format!("{select} AND object_key > $2 AND object_key < $3");
                sqlx::query(&sql)
                    .bind(location)
                    .bind(format!("{p}/"))
                    .bind(format!("{p}0"))
                    .fetch_one(self.meta.reader())
                    .await?
            }
            None => {
                sqlx::query(select)
                    .bind(location)
                    .fetch_one(self.meta.reader())
                    .await?
            }
        };
        let get =
            |c: &str| -> Result<u64> { Ok(u64::try_from(row.try_get::<i64, _>(c)?).unwrap_or(0)) };
        Ok((get("n")?, get("bytes")?, get("stored")?))
    }

    /// Checks that every location answers (used by `/readyz`).
    #[qanat_macros::boxed]
    pub async fn check(&self) -> Result<()> {
        for loc in self.locations.values() {
            loc.store.list_with_delimiter(None).await?;
        }
        Ok(())
    }
}

/// The key as the caller named it: object_store percent-encodes characters such as `#`,
/// `%` and non-ASCII letters inside path segments.
fn decoded_key(path: &StorePath) -> String {
    path.parts()
        .map(|p| {
            percent_encoding::percent_decode_str(p.as_ref())
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn indexed_info(row: &sqlx::any::AnyRow) -> Result<ObjectInfo> {
    let modified: i64 = row.try_get("modified_at")?;
    Ok(ObjectInfo {
        key: row.try_get("object_key")?,
        size: row.try_get::<i64, _>("size")? as u64,
        stored_size: row.try_get::<i64, _>("stored_size")? as u64,
        last_modified: chrono::DateTime::from_timestamp_micros(modified).unwrap_or_default(),
    })
}

/// Bytes on the backend of an object of `plain` bytes: the header, and one tag per
/// chunk (an empty object has one, empty, chunk).
fn sealed_len(plain: u64) -> u64 {
    let pieces = plain.div_ceil(u64::from(CHUNK_SIZE)).max(1);
    HEADER_LEN as u64 + plain + pieces * envelope::TAG_LEN as u64
}

/// The top directory of the keyed layout (its version).
const LAYOUT_DIR: &str = "k1";

async fn setting(meta: &MetaStore, name: &str) -> Result<Option<String>> {
    Ok(
        sqlx::query("SELECT value FROM storage_settings WHERE name = $1")
            .bind(name)
            .fetch_optional(meta.writer())
            .await?
            .map(|r| r.try_get::<String, _>("value"))
            .transpose()?,
    )
}

/// The secret that names objects: a data key like any other (wrapped by the master key,
/// so rotation re-wraps it and never changes a name), created on first use.
async fn naming_key(keyring: &Keyring, meta: &MetaStore) -> Result<ring::hmac::Key> {
    const NAME: &str = "object_name_key";
    let key_ref = match setting(meta, NAME).await? {
        Some(r) => r,
        None => {
            let (fresh, _) = keyring.new_data_key(meta).await?;
            sqlx::query(
                "INSERT INTO storage_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            )
            .bind(NAME)
            .bind(hex::encode(fresh))
            .execute(meta.writer())
            .await?;
            let chosen = setting(meta, NAME)
                .await?
                .ok_or_else(|| Error::Keys("the object naming key was not recorded".into()))?;
            if chosen != hex::encode(fresh) {
                // Another process created it first.
                keyring.forget_data_key(meta, &fresh).await?;
            }
            chosen
        }
    };
    let key_ref: [u8; 16] = hex::decode(&key_ref)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            Error::Keys(format!(
                "the object naming key ref '{key_ref}' is not 16 hex bytes"
            ))
        })?;
    let key = keyring.data_key(meta, &key_ref).await?;
    Ok(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key.0))
}

/// An object being written.
/// Makes the names of objects just written into local directories durable.
async fn sync_dirs(dirs: Vec<PathBuf>) -> Result<()> {
    if dirs.is_empty() {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || {
        localfs::sync_dirs(dirs.iter().map(PathBuf::as_path))
            .map_err(|e| Error::io(dirs.first().cloned().unwrap_or_default(), e))
    })
    .await
    .map_err(|e| Error::io("", std::io::Error::other(e.to_string())))?
}

struct NewObject<'a> {
    loc: &'a Location,
    key: &'a ObjectKey,
    header: Header,
    cipher: ChunkCipher,
}

impl NewObject<'_> {
    fn seal(&mut self, plaintext: &[u8], last: bool) -> Result<Vec<u8>> {
        self.cipher
            .seal(plaintext, last)
            .map_err(|reason| Error::Integrity {
                key: self.key.to_string(),
                reason,
            })
    }
}

struct ReadState {
    inner: BoxStream<'static, object_store::Result<Bytes>>,
    buf: BytesMut,
    cipher: ChunkCipher,
    sealed_len: usize,
    finished: bool,
    key: String,
}

impl ReadState {
    /// Opens one sealed chunk where it lies; a failure names the object (and an empty
    /// last chunk says the object was cut short).
    fn open(&mut self, sealed: BytesMut, last: bool) -> Result<Bytes> {
        let empty = sealed.is_empty();
        self.cipher
            .open_owned(sealed, last)
            .map_err(|reason| Error::Integrity {
                key: self.key.clone(),
                reason: if last && empty {
                    "the final chunk is missing (object truncated)".into()
                } else {
                    reason
                },
            })
    }
}

/// One step of the decrypting stream. A full sealed chunk followed by at least one more
/// byte cannot be the last chunk; whatever remains when the source ends is the last.
async fn read_next(mut st: ReadState) -> Result<Option<(Bytes, ReadState)>> {
    if st.finished {
        return Ok(None);
    }
    loop {
        if st.buf.len() > st.sealed_len {
            // Decrypted where it was read into: no copy.
            let sealed = st.buf.split_to(st.sealed_len);
            let pt = st.open(sealed, false)?;
            return Ok(Some((pt, st)));
        }
        match st.inner.next().await {
            Some(b) => {
                let b = b?;
                if b.is_empty() {
                    continue;
                }
                if st.buf.len() == st.sealed_len {
                    // A whole sealed chunk is held and more follows: it is not the
                    // last, and the new block becomes the buffer.
                    let sealed = std::mem::replace(&mut st.buf, BytesMut::from(b));
                    let pt = st.open(sealed, false)?;
                    return Ok(Some((pt, st)));
                }
                if st.buf.is_empty() {
                    // A block read while nothing is held becomes the buffer itself
                    // (the local reader's blocks are its own, and start at a sealed
                    // chunk's boundary: no copy).
                    st.buf = BytesMut::from(b);
                } else {
                    st.buf.extend_from_slice(&b);
                }
            }
            None => {
                let sealed = st.buf.split();
                let pt = st.open(sealed, true)?;
                st.finished = true;
                return Ok(Some((pt, st)));
            }
        }
    }
}

/// Bytes read from a local file per block: four sealed chunks (the first block also
/// holds the header, so every block after it starts at a sealed chunk).
const LOCAL_READ_BLOCK: usize = 4 * (CHUNK_SIZE as usize + envelope::TAG_LEN);

/// A local file's length and its bytes as a stream, read by a blocking thread in
/// [`LOCAL_READ_BLOCK`]s, at most two blocks ahead of the reader.
async fn read_local(
    path: PathBuf,
) -> object_store::Result<(u64, BoxStream<'static, object_store::Result<Bytes>>)> {
    let io_err = |path: &Path, e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::NotFound {
            object_store::Error::NotFound {
                path: path.display().to_string(),
                source: Box::new(e),
            }
        } else {
            object_store::Error::Generic {
                store: "local",
                source: Box::new(e),
            }
        }
    };
    let opened = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            let f = std::fs::File::open(&path)?;
            let len = f.metadata()?.len();
            Ok::<_, std::io::Error>((f, len))
        })
        .await
        .map_err(|e| object_store::Error::Generic {
            store: "local",
            source: Box::new(e),
        })?
    };
    let (mut file, len) = opened.map_err(|e| io_err(&path, e))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<object_store::Result<Bytes>>(2);
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut left = len;
        let mut first = true;
        while left > 0 {
            // Sized to what is left: a small object takes a small buffer.
            let block_len = if first {
                HEADER_LEN + LOCAL_READ_BLOCK
            } else {
                LOCAL_READ_BLOCK
            };
            first = false;
            let want = usize::try_from(left).map_or(block_len, |l| l.min(block_len));
            // Read into fresh capacity (nothing zeroed first), up to `want` bytes.
            let mut block = Vec::with_capacity(want);
            let read = (&mut file).take(want as u64).read_to_end(&mut block);
            if let Err(e) = read {
                let _ = tx.blocking_send(Err(io_err(&path, e)));
                return;
            }
            let filled = block.len();
            if filled == 0 {
                return; // shorter than its length said: the reader reports a cut object
            }
            left = left.saturating_sub(filled as u64);
            if tx.blocking_send(Ok(Bytes::from(block))).is_err() {
                return; // the reader has gone
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok((len, Box::pin(stream)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_refuse_traversal() {
        for bad in [
            "", "/abs", "a/../b", "..", "a//b", "a/", "./a", "a\\b", "a\nb",
        ] {
            assert!(bad.parse::<ObjectKey>().is_err(), "{bad:?} must be refused");
        }
        for good in ["a", "a/b/c.txt", "x..y", "dir/.hidden", "ünïcode/名前"] {
            assert!(
                good.parse::<ObjectKey>().is_ok(),
                "{good:?} must be accepted"
            );
        }
    }

    #[test]
    fn regions_are_validated() {
        assert!("uae-north".parse::<Region>().is_ok());
        for bad in ["", "UAE", "uae north", "-x", "x-"] {
            assert!(bad.parse::<Region>().is_err(), "{bad:?}");
        }
    }
}
