//! `qanat data push`: files and directories become a new immutable version.
//!
//! A blocking thread cuts every file into content-defined chunks; batches of chunks go
//! to the server as packs, each preceded by the question which of them it lacks (so a
//! re-run, or an append, uploads only new chunks); a few packs are in flight at once.
//! The manifest is committed last: a push that dies part-way leaves no version.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::StreamExt;
use qanat_client::Client;
use qanat_core::ObjectRef;
use qanat_data::chunking::{self, Chunk};
use qanat_data::wire::CommitVersion;
use qanat_data::{ChunkId, ChunkRef, DatasetVersion, FileEntry, Manifest};

use crate::output::{count, human, progress};

/// Chunks asked about and uploaded together, as one pack (see `qanat_data::pack`).
const BATCH: usize = 32;
/// A batch closes at this many bytes even with fewer chunks.
const BATCH_BYTES: usize = 16 << 20;
/// Packs in flight during a push.
const PACKS_IN_FLIGHT: usize = 3;
/// Tries of a pack that a concurrent gc holds (503), with doubling waits from 50 ms.
const PACK_TRIES: u32 = 8;

/// A file to push: its path inside the version, where it is, its mode.
struct Source {
    rel: Vec<u8>,
    abs: PathBuf,
    mode: u32,
}

/// What the chunking thread hands over: a batch of chunks, or a finished file.
enum Piece {
    Chunks(Vec<(ChunkId, Bytes)>),
    File(FileEntry),
}

/// How a push is recorded.
pub struct Options<'a> {
    pub message: &'a str,
    pub derived_from: &'a [ObjectRef],
    /// Whether paths with no file make an empty version rather than an error.
    pub allow_empty: bool,
}

/// Pushes `paths` as a new version of `dataset` and returns it.
pub async fn push(
    c: &Client,
    project: &str,
    dataset: &str,
    paths: &[PathBuf],
    opts: &Options<'_>,
) -> Result<DatasetVersion> {
    // Fail fast, before reading anything: an unknown dataset, a caller who may not
    // write to it (asking which of no chunks are missing needs the writer's role), a
    // missing path, nothing to push.
    c.dataset(project, dataset).await?;
    c.missing_chunks(project, dataset, &[]).await?;
    let sources = collect(paths)?;
    if sources.is_empty() && !opts.allow_empty {
        bail!(
            "{} holds no file; pass --allow-empty to record an empty version",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let total: u64 = sources
        .iter()
        .map(|s| std::fs::metadata(&s.abs).map(|m| m.len()).unwrap_or(0))
        .sum();
    let start = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let worker = tokio::task::spawn_blocking(move || chunk_files(sources, tx));
    let mut files = Vec::new();
    let (mut uploaded, mut seen) = (0u64, 0u64);
    let bar = progress(total, "pushing");
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut done = |(batch_bytes, new_bytes): (u64, u64)| {
        seen += batch_bytes;
        uploaded += new_bytes;
        bar.set_position(seen);
        bar.set_message(format!("({} new)", human(uploaded)));
    };
    while let Some(piece) = rx.recv().await {
        match piece? {
            Piece::File(f) => files.push(f),
            Piece::Chunks(batch) => {
                while in_flight.len() >= PACKS_IN_FLIGHT {
                    if let Some(r) = in_flight.next().await {
                        done(r?);
                    }
                }
                in_flight.push(send_batch(c, project, dataset, batch));
            }
        }
    }
    while let Some(r) = in_flight.next().await {
        done(r?);
    }
    worker.await.context("the chunking thread failed")?;
    bar.finish_and_clear();
    let commit = CommitVersion {
        manifest: Manifest { files },
        message: opts.message.to_string(),
        derived_from: opts.derived_from.iter().map(ToString::to_string).collect(),
    };
    let v = c.commit_version(project, dataset, &commit).await?;
    let secs = start.elapsed().as_secs_f64().max(1e-6);
    eprintln!(
        "pushed version {}: {} in {}, {} new ({:.1} MB/s)",
        v.version,
        human(seen),
        count(v.file_count, "file"),
        human(uploaded),
        seen as f64 / secs / 1e6
    );
    Ok(v)
}

/// Every file under `paths` (a file stands for itself, named by its file name), sorted
/// by path; two inputs with the same path inside the version are an error.
fn collect(paths: &[PathBuf]) -> Result<Vec<Source>> {
    use std::os::unix::fs::PermissionsExt;
    let mut out: Vec<Source> = Vec::new();
    for root in paths {
        let meta = std::fs::metadata(root)
            .with_context(|| format!("{}: cannot read it", root.display()))?;
        if meta.is_file() {
            let name = root
                .file_name()
                .with_context(|| format!("{}: no file name", root.display()))?;
            out.push(Source {
                rel: name.as_bytes().to_vec(),
                abs: root.clone(),
                mode: meta.permissions().mode() & 0o777,
            });
            continue;
        }
        for entry in walkdir::WalkDir::new(root)
            .follow_links(true)
            .sort_by_file_name()
        {
            let entry = entry.map_err(|e| match e.loop_ancestor() {
                Some(a) => anyhow::anyhow!(
                    "symlink loop: {} points back to {}",
                    e.path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    a.display()
                ),
                None => anyhow::anyhow!("{e}"),
            })?;
            if !entry.file_type().is_file() {
                continue;
            }
            let rel = entry
                .path()
                .strip_prefix(root)
                .context("walking the directory")?;
            let m = entry
                .metadata()
                .with_context(|| format!("{}: cannot read it", entry.path().display()))?;
            out.push(Source {
                rel: rel.as_os_str().as_bytes().to_vec(),
                abs: entry.path().to_path_buf(),
                mode: m.permissions().mode() & 0o777,
            });
        }
    }
    // Refused here, before any byte is sent, rather than at the commit.
    if let Some(bad) = out
        .iter()
        .find(|s| s.rel.iter().any(|b| *b < 0x20 || *b == 0x7f || *b == b'\\'))
    {
        bail!(
            "{}: a dataset path may not hold a backslash or a control character; rename the file",
            bad.abs.display()
        );
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    for pair in out.windows(2) {
        if pair[0].rel == pair[1].rel {
            bail!(
                "two inputs map to the same path '{}'",
                String::from_utf8_lossy(&pair[0].rel)
            );
        }
    }
    Ok(out)
}

/// Cuts every file on a blocking thread; sends batches of chunks (at most [`BATCH`]
/// chunks or [`BATCH_BYTES`]) and finished entries.
fn chunk_files(sources: Vec<Source>, tx: tokio::sync::mpsc::Sender<Result<Piece>>) {
    let mut batch: Vec<(ChunkId, Bytes)> = Vec::with_capacity(BATCH);
    let mut batch_bytes = 0usize;
    for src in sources {
        let result: Result<FileEntry> = (|| {
            let f = std::fs::File::open(&src.abs)
                .with_context(|| format!("{}: cannot open it", src.abs.display()))?;
            let mut whole = blake3::Hasher::new();
            let mut refs = Vec::new();
            let mut size = 0u64;
            for chunk in chunking::chunks(f) {
                let Chunk { id, data } =
                    chunk.with_context(|| format!("{}: read failed", src.abs.display()))?;
                whole.update(&data);
                size += data.len() as u64;
                refs.push(ChunkRef {
                    id,
                    size: data.len() as u64,
                });
                batch_bytes += data.len();
                batch.push((id, data));
                if batch.len() == BATCH || batch_bytes >= BATCH_BYTES {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    batch_bytes = 0;
                    if tx.blocking_send(Ok(Piece::Chunks(full))).is_err() {
                        bail!("push cancelled");
                    }
                }
            }
            Ok(FileEntry::new(
                &src.rel,
                size,
                src.mode,
                whole.finalize().to_hex().to_string(),
                refs,
            ))
        })();
        // Batches span files, so many small files still travel in few packs; the
        // commit waits for every pack anyway.
        let stop = result.is_err();
        if tx.blocking_send(result.map(Piece::File)).is_err() || stop {
            return;
        }
    }
    if !batch.is_empty() {
        let _ = tx.blocking_send(Ok(Piece::Chunks(batch)));
    }
}

/// Asks which chunks of a batch the server lacks and uploads those as one pack.
/// Returns the batch's bytes and the bytes uploaded.
async fn send_batch(
    c: &Client,
    project: &str,
    dataset: &str,
    batch: Vec<(ChunkId, Bytes)>,
) -> Result<(u64, u64)> {
    let batch_bytes: u64 = batch.iter().map(|(_, data)| data.len() as u64).sum();
    let ids: Vec<ChunkId> = batch.iter().map(|(id, _)| *id).collect();
    let missing = c.missing_chunks(project, dataset, &ids).await?;
    let todo: Vec<(ChunkId, Bytes)> = batch
        .into_iter()
        .filter(|(id, _)| missing.contains(id))
        .collect();
    if todo.is_empty() {
        return Ok((batch_bytes, 0));
    }
    let new_bytes = todo.iter().map(|(_, data)| data.len() as u64).sum();
    let mut delay = Duration::from_millis(50);
    for attempt in 1..=PACK_TRIES {
        match c.put_pack(project, dataset, &todo).await {
            // A concurrent gc holds one of these chunks until it finishes.
            Err(e) if e.status() == Some(503) && attempt < PACK_TRIES => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) if e.status() == Some(503) => {
                return Err(e).context("a chunk of this push stayed unavailable; retry the push")
            }
            Err(e) => return Err(e.into()),
            Ok(_) => return Ok((batch_bytes, new_bytes)),
        }
    }
    bail!("a chunk of this push stayed unavailable; retry the push")
}
