//! `qanat data push`: chunk files, upload the chunks the server lacks, commit.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use qanat_client::DatasetApi;
use qanat_data::chunking::{self, Chunk};
use qanat_data::wire::CommitVersion;
use qanat_data::DatasetVersion;
use qanat_data::{pack, ChunkId, ChunkRef, FileEntry, Manifest};
use reqwest::Method;

use crate::client::Client;

use super::{human, progress};

/// Chunks asked about and uploaded together, as one pack (see `qanat_data::pack`).
const BATCH: usize = 32;
/// A batch closes at this many bytes even with fewer chunks.
const BATCH_BYTES: usize = 16 << 20;
/// Packs in flight during a push.
const PACKS_IN_FLIGHT: usize = 3;

/// A file to push: its path inside the version, where it is, its mode.
struct Source {
    rel: Vec<u8>,
    abs: PathBuf,
    mode: u32,
}

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

/// A chunk ready to send: its id and bytes (cheap to clone for a retry).
struct Ready {
    id: ChunkId,
    data: bytes::Bytes,
}

enum Piece {
    Chunks(Vec<Ready>),
    File(FileEntry),
}

/// Cuts every file on a blocking thread; sends batches of chunks (at most [`BATCH`]
/// chunks or [`BATCH_BYTES`]) and finished entries.
fn chunk_files(sources: Vec<Source>, tx: tokio::sync::mpsc::Sender<Result<Piece>>) {
    let mut batch: Vec<Ready> = Vec::with_capacity(BATCH);
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
                batch.push(Ready { id, data });
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

pub(super) async fn push(
    c: &Client,
    api: &DatasetApi<'_>,
    paths: &[PathBuf],
    message: &str,
    derived_from: &[String],
) -> Result<DatasetVersion> {
    // Fail fast on an unknown dataset or a missing path, before reading anything.
    api.get().await?;
    let _ds = api.path();
    let sources = collect(paths)?;
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
                in_flight.push(send_batch(c, api, batch));
            }
        }
    }
    while let Some(r) = in_flight.next().await {
        done(r?);
    }
    worker.await.context("the chunking thread failed")?;
    bar.finish_and_clear();
    let v = api
        .commit(&CommitVersion {
            manifest: Manifest { files },
            message: message.to_string(),
            derived_from: derived_from.to_vec(),
        })
        .await?;
    let secs = start.elapsed().as_secs_f64().max(1e-6);
    eprintln!(
        "pushed version {}: {} in {} files, {} new ({:.1} MB/s)",
        v.version,
        human(seen),
        v.file_count,
        human(uploaded),
        seen as f64 / secs / 1e6
    );
    Ok(v)
}

/// Asks which chunks of a batch the server lacks and uploads those as one pack.
/// Returns the batch's bytes and the bytes uploaded.
async fn send_batch(c: &Client, api: &DatasetApi<'_>, batch: Vec<Ready>) -> Result<(u64, u64)> {
    let batch_bytes: u64 = batch.iter().map(|r| r.data.len() as u64).sum();
    let ids: Vec<ChunkId> = batch.iter().map(|r| r.id).collect();
    let missing = api.missing_chunks(&ids).await?;
    let todo: Vec<Ready> = batch
        .into_iter()
        .filter(|r| missing.contains(&r.id))
        .collect();
    if todo.is_empty() {
        return Ok((batch_bytes, 0));
    }
    let new_bytes = todo.iter().map(|r| r.data.len() as u64).sum();
    upload_pack(c, api.path(), &todo).await?;
    Ok((batch_bytes, new_bytes))
}

/// Uploads chunks as one pack (frames of id, length, bytes; no copy of the bytes),
/// retrying while a concurrent gc still holds one of them (503).
async fn upload_pack(c: &Client, ds: &str, chunks: &[Ready]) -> Result<()> {
    let frames: Vec<bytes::Bytes> = chunks
        .iter()
        .flat_map(|r| {
            [
                bytes::Bytes::copy_from_slice(&pack::frame_header(&r.id, r.data.len())),
                r.data.clone(),
            ]
        })
        .collect();
    let len: usize = frames.iter().map(bytes::Bytes::len).sum();
    let mut delay = std::time::Duration::from_millis(50);
    for attempt in 0..8 {
        let body = futures::stream::iter(frames.clone().into_iter().map(Ok::<_, std::io::Error>));
        let resp = c
            .request(Method::POST, &format!("{ds}/chunks"))
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .header(reqwest::header::CONTENT_LENGTH, len)
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await
            .with_context(|| format!("could not reach the Qanat server at {}", c.base()))?;
        if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE && attempt < 7 {
            tokio::time::sleep(delay).await;
            delay *= 2;
            continue;
        }
        return qanat_client::check(resp)
            .await
            .map(|_| ())
            .map_err(Into::into);
    }
    bail!("a chunk of this push stayed unavailable; retry the push")
}
