//! `qanat data`: push directories and files as dataset versions, pull them back.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use futures::{StreamExt, TryStreamExt};
use qanat_data::chunking::{self, Chunk};
use qanat_data::{pack, ChunkId, ChunkRef, FileEntry, Manifest};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::client::{seg, Client};
use crate::output;
use crate::Format;

/// Chunks asked about and uploaded together, as one pack (see `qanat_data::pack`).
const BATCH: usize = 32;
/// A batch closes at this many bytes even with fewer chunks.
const BATCH_BYTES: usize = 16 << 20;
/// Packs in flight during a push.
const PACKS_IN_FLIGHT: usize = 3;
/// File downloads in flight during a pull.
const IN_FLIGHT: usize = 4;

#[derive(Subcommand)]
pub enum DataCmd {
    /// Create a dataset.
    Create {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
        /// public, internal, confidential or restricted.
        #[arg(long, default_value = "internal")]
        classification: String,
        /// Narrow the project's allowed regions for this dataset (comma-separated).
        #[arg(long, value_delimiter = ',')]
        regions: Option<Vec<String>>,
        /// Storage location for its chunks (default: the server's default).
        #[arg(long)]
        location: Option<String>,
        /// key=value labels.
        #[arg(long = "tag", value_parser = parse_kv)]
        tags: Vec<(String, String)>,
        /// A JSON file declaring the columns every CSV/Parquet file must have:
        /// {"columns": [{"name": "id", "type": "Int64", "nullable": false, "pii": false}]}
        #[arg(long, value_name = "JSON")]
        schema: Option<PathBuf>,
    },
    /// List the project's datasets.
    Ls,
    /// Push files and directories as a new immutable version.
    Push {
        dataset: String,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(short, long, default_value = "")]
        message: String,
        /// Tag the new version.
        #[arg(long)]
        tag: Option<String>,
        /// Record what this version was derived from (repeatable), e.g. dataset:raw@3.
        #[arg(long = "derived-from")]
        derived_from: Vec<String>,
    },
    /// Restore a version (DATASET@VERSION|TAG, default latest) into a directory.
    Pull { reference: String, dir: PathBuf },
    /// Versions of a dataset, newest first.
    Log { dataset: String },
    /// A dataset, or one version's files (DATASET@VERSION).
    Show { reference: String },
    /// Copy a version into another dataset (e.g. in another storage location):
    /// SRC@VERSION DST.
    Copy {
        reference: String,
        to: String,
        #[arg(short, long, default_value = "")]
        message: String,
    },
    /// What changed between two versions: DATASET FROM TO.
    Diff {
        dataset: String,
        from: String,
        to: String,
    },
    /// Tag a version: DATASET@VERSION TAG.
    Tag { reference: String, tag: String },
    /// Delete chunks no version of the project references (maintainers).
    Gc {
        /// Keep chunks a push used this recently.
        #[arg(long, default_value = "1h")]
        grace: humantime::Duration,
    },
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{s}': use key=value"))
}

fn split_ref(r: &str) -> (&str, &str) {
    r.split_once('@').unwrap_or((r, "latest"))
}

pub async fn run(c: &Client, fmt: Format, project: &str, cmd: DataCmd) -> Result<()> {
    let base = format!("/api/v1/projects/{}/datasets", seg(project));
    match cmd {
        DataCmd::Create {
            name,
            description,
            classification,
            regions,
            location,
            tags,
            schema,
        } => {
            let mut body = json!({
                "name": name, "description": description, "classification": classification,
                "tags": tags.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
            });
            if let Some(r) = regions {
                body["allowed_regions"] = json!(r);
            }
            if let Some(l) = location {
                body["location"] = json!(l);
            }
            if let Some(path) = schema {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading schema {}", path.display()))?;
                body["schema"] = serde_json::from_str(&text)
                    .with_context(|| format!("{} is not JSON", path.display()))?;
            }
            let d: Value = c.json(c.request(Method::POST, &base).json(&body)).await?;
            output::object(fmt, &d);
        }
        DataCmd::Ls => {
            let ds: Value = c.get(&base).await?;
            output::list(
                fmt,
                &ds,
                &[
                    ("name", "name"),
                    ("latest", "latest_version"),
                    ("classification", "classification"),
                    ("location", "location"),
                    ("owner", "owner"),
                    ("description", "description"),
                ],
            );
        }
        DataCmd::Push {
            dataset,
            paths,
            message,
            tag,
            derived_from,
        } => {
            let v = push(
                c,
                &format!("{base}/{}", seg(&dataset)),
                &paths,
                &message,
                &derived_from,
            )
            .await?;
            if let Some(t) = tag {
                c.send(
                    c.request(
                        Method::PUT,
                        &format!("{base}/{}/tags/{}", seg(&dataset), seg(&t)),
                    )
                    .json(&json!({"version": v["version"].to_string()})),
                )
                .await?;
            }
            output::object(fmt, &v);
        }
        DataCmd::Pull { reference, dir } => {
            let (dataset, version) = split_ref(&reference);
            pull(c, &format!("{base}/{}", seg(dataset)), version, &dir).await?;
        }
        DataCmd::Log { dataset } => {
            let vs: Value = c.get(&format!("{base}/{}/versions", seg(&dataset))).await?;
            output::list(
                fmt,
                &vs,
                &[
                    ("version", "version"),
                    ("tags", "tags"),
                    ("files", "file_count"),
                    ("size", "total_size"),
                    ("new bytes", "new_bytes"),
                    ("parent", "parent"),
                    ("author", "author"),
                    ("time", "created_at"),
                    ("message", "message"),
                ],
            );
        }
        DataCmd::Show { reference } => {
            let (dataset, version) = match reference.split_once('@') {
                Some((d, v)) => (d, Some(v)),
                None => (reference.as_str(), None),
            };
            match version {
                None => {
                    let d: Value = c.get(&format!("{base}/{}", seg(dataset))).await?;
                    output::object(fmt, &d);
                }
                Some(v) => {
                    let v: Value = c
                        .get(&format!("{base}/{}/versions/{}", seg(dataset), seg(v)))
                        .await?;
                    if fmt == Format::Json {
                        println!("{}", serde_json::to_string_pretty(&v)?);
                    } else {
                        println!(
                            "version {} of {} ({} files, {} bytes): {}",
                            v["version"],
                            dataset,
                            v["file_count"],
                            v["total_size"],
                            v["message"].as_str().unwrap_or("")
                        );
                        for p in v["profiles"]
                            .as_array()
                            .map(Vec::as_slice)
                            .unwrap_or_default()
                        {
                            match p["profile"].as_object() {
                                Some(prof) => {
                                    println!(
                                        "{} ({}, {} rows):",
                                        p["path"].as_str().unwrap_or(""),
                                        prof["format"].as_str().unwrap_or(""),
                                        prof["rows"]
                                    );
                                    output::list(
                                        fmt,
                                        &prof["columns"],
                                        &[
                                            ("column", "name"),
                                            ("type", "data_type"),
                                            ("nulls", "null_fraction"),
                                            ("min", "min"),
                                            ("max", "max"),
                                            ("mean", "mean"),
                                            ("std", "std"),
                                            ("distinct", "distinct_estimate"),
                                        ],
                                    );
                                }
                                None => println!(
                                    "{}: not profiled ({})",
                                    p["path"].as_str().unwrap_or(""),
                                    p["error"].as_str().unwrap_or("")
                                ),
                            }
                        }
                        output::list(
                            fmt,
                            &v["manifest"]["files"],
                            &[("path", "path"), ("size", "size"), ("blake3", "blake3")],
                        );
                    }
                }
            }
        }
        DataCmd::Diff { dataset, from, to } => {
            let d: Value = c
                .get(&format!(
                    "{base}/{}/diff?from={}&to={}",
                    seg(&dataset),
                    seg(&from),
                    seg(&to)
                ))
                .await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                println!("{dataset}: version {} -> {}", d["from"], d["to"]);
                for f in d["added"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    println!(
                        "  + {} ({})",
                        f["path"].as_str().unwrap_or(""),
                        human(f["size"].as_u64().unwrap_or(0))
                    );
                }
                for f in d["removed"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    println!(
                        "  - {} ({})",
                        f["path"].as_str().unwrap_or(""),
                        human(f["size"].as_u64().unwrap_or(0))
                    );
                }
                for f in d["changed"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    let what = match (f["content_changed"].as_bool(), f["mode_changed"].as_bool()) {
                        (Some(true), Some(true)) => "content and mode",
                        (Some(true), _) => "content",
                        _ => "mode",
                    };
                    println!(
                        "  ~ {} ({} -> {}, {} new, {what})",
                        f["path"].as_str().unwrap_or(""),
                        human(f["old_size"].as_u64().unwrap_or(0)),
                        human(f["new_size"].as_u64().unwrap_or(0)),
                        human(f["new_chunk_bytes"].as_u64().unwrap_or(0))
                    );
                }
                println!("  {} unchanged", d["unchanged"]);
            }
        }
        DataCmd::Copy {
            reference,
            to,
            message,
        } => {
            let (dataset, version) = split_ref(&reference);
            let v: Value = c
                .json(
                    c.request(Method::POST, &format!("{base}/{}/copy", seg(dataset)))
                        .json(&json!({"to": to, "version": version, "message": message})),
                )
                .await?;
            output::object(fmt, &v);
        }
        DataCmd::Gc { grace } => {
            let r: Value = c
                .json(
                    c.request(
                        Method::POST,
                        &format!("/api/v1/projects/{}/gc", seg(project)),
                    )
                    .json(&json!({"grace_seconds": std::time::Duration::from(grace).as_secs()})),
                )
                .await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "gc: {} versions scanned, {} chunks referenced, {} chunks deleted, {} freed",
                    r["versions_scanned"],
                    r["chunks_referenced"],
                    r["chunks_deleted"],
                    human(r["bytes_freed"].as_u64().unwrap_or(0))
                );
            }
        }
        DataCmd::Tag { reference, tag } => {
            let (dataset, version) = split_ref(&reference);
            let v: Value = c
                .json(
                    c.request(
                        Method::PUT,
                        &format!("{base}/{}/tags/{}", seg(dataset), seg(&tag)),
                    )
                    .json(&json!({"version": version})),
                )
                .await?;
            output::object(fmt, &v);
        }
    }
    Ok(())
}

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

async fn push(
    c: &Client,
    ds: &str,
    paths: &[PathBuf],
    message: &str,
    derived_from: &[String],
) -> Result<Value> {
    // Fail fast on an unknown dataset or a missing path, before reading anything.
    let _: Value = c.get(ds).await?;
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
                in_flight.push(send_batch(c, ds, batch));
            }
        }
    }
    while let Some(r) = in_flight.next().await {
        done(r?);
    }
    worker.await.context("the chunking thread failed")?;
    bar.finish_and_clear();
    let v: Value = c
        .json(
            c.request(Method::POST, &format!("{ds}/versions"))
                .json(&json!({"manifest": Manifest { files }, "message": message, "derived_from": derived_from})),
        )
        .await?;
    let secs = start.elapsed().as_secs_f64().max(1e-6);
    eprintln!(
        "pushed version {}: {} in {} files, {} new ({:.1} MB/s)",
        v["version"],
        human(seen),
        v["file_count"],
        human(uploaded),
        seen as f64 / secs / 1e6
    );
    Ok(v)
}

/// Asks which chunks of a batch the server lacks and uploads those as one pack.
/// Returns the batch's bytes and the bytes uploaded.
async fn send_batch(c: &Client, ds: &str, batch: Vec<Ready>) -> Result<(u64, u64)> {
    let batch_bytes: u64 = batch.iter().map(|r| r.data.len() as u64).sum();
    let ids: Vec<String> = batch.iter().map(|r| r.id.to_hex()).collect();
    let missing: Value = c
        .json(
            c.request(Method::POST, &format!("{ds}/chunks/missing"))
                .json(&json!({"ids": ids})),
        )
        .await?;
    let missing: Vec<ChunkId> = serde_json::from_value(missing["missing"].clone())?;
    let todo: Vec<Ready> = batch
        .into_iter()
        .filter(|r| missing.contains(&r.id))
        .collect();
    if todo.is_empty() {
        return Ok((batch_bytes, 0));
    }
    let new_bytes = todo.iter().map(|r| r.data.len() as u64).sum();
    upload_pack(c, ds, &todo).await?;
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
        return c.check(resp).await.map(|_| ());
    }
    bail!("a chunk of this push stayed unavailable; retry the push")
}

/// A byte progress bar with throughput on stderr (drawn only on a terminal).
fn progress(total: u64, verb: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template(&format!(
        "{verb} [{{bar:30}}] {{bytes}}/{{total_bytes}} {{bytes_per_sec}} {{msg}}"
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

async fn pull(c: &Client, ds: &str, version: &str, dir: &Path) -> Result<()> {
    let v: Value = c.get(&format!("{ds}/versions/{}", seg(version))).await?;
    let manifest: Manifest = serde_json::from_value(v["manifest"].clone())
        .context("the server sent a malformed manifest")?;
    let n = v["version"].as_i64().unwrap_or_default();
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;
    let start = Instant::now();
    let total = manifest.total_size();
    let bar = progress(total, "pulling");
    let bar_ref = &bar;
    futures::stream::iter(manifest.files.into_iter().enumerate())
        .map(|(i, f)| async move {
            pull_file(c, &format!("{ds}/versions/{n}/files/{i}"), &f, dir, bar_ref).await
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    bar.finish_and_clear();
    eprintln!(
        "pulled version {n}: {} verified ({:.1} MB/s)",
        human(total),
        total as f64 / start.elapsed().as_secs_f64().max(1e-6) / 1e6
    );
    Ok(())
}

async fn pull_file(
    c: &Client,
    url: &str,
    f: &FileEntry,
    dir: &Path,
    bar: &indicatif::ProgressBar,
) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let rel = f.path_bytes()?;
    if rel.is_empty()
        || rel[0] == b'/'
        || rel
            .split(|b| *b == b'/')
            .any(|s| s.is_empty() || s == b"." || s == b"..")
    {
        bail!("refusing unsafe path '{}' in the manifest", f.path);
    }
    let target = dir.join(std::ffi::OsStr::from_bytes(&rel));
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let mut tmp_name = target.as_os_str().to_owned();
    tmp_name.push(".qanat-partial");
    let tmp = PathBuf::from(tmp_name);
    let result: Result<()> = async {
        let resp = c.send(c.request(Method::GET, url)).await?;
        let mut out = tokio::fs::File::create(&tmp)
            .await
            .with_context(|| format!("creating {}", tmp.display()))?;
        let mut hasher = blake3::Hasher::new();
        let mut size = 0u64;
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.with_context(|| format!("{}: download interrupted", f.path))?;
            hasher.update(&chunk);
            size += chunk.len() as u64;
            bar.inc(chunk.len() as u64);
            out.write_all(&chunk)
                .await
                .with_context(|| format!("writing {}", tmp.display()))?;
        }
        out.sync_all().await?;
        if size != f.size || hasher.finalize().to_hex().as_str() != f.blake3 {
            bail!(
                "{}: the downloaded bytes do not match the manifest's hash",
                f.path
            );
        }
        tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(f.mode & 0o777)).await?;
        tokio::fs::rename(&tmp, &target)
            .await
            .with_context(|| format!("moving into {}", target.display()))?;
        Ok(())
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

/// `qanat lineage REF`: the upstream graph as a tree.
pub async fn lineage(
    c: &Client,
    fmt: Format,
    project: &str,
    reference: &str,
    depth: usize,
) -> Result<()> {
    let g: Value = c
        .get(&format!(
            "/api/v1/projects/{}/lineage?ref={}&depth={depth}",
            seg(project),
            seg(reference)
        ))
        .await?;
    if fmt == Format::Json {
        println!("{}", serde_json::to_string_pretty(&g)?);
        return Ok(());
    }
    let edges: Vec<(String, String, String)> = g["edges"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("child"), s("relation"), s("parent"))
        })
        .collect();
    fn walk(node: &str, edges: &[(String, String, String)], prefix: &str, seen: &mut Vec<String>) {
        let kids: Vec<_> = edges.iter().filter(|(c, _, _)| c == node).collect();
        for (i, (_, rel, parent)) in kids.iter().enumerate() {
            let last = i + 1 == kids.len();
            println!(
                "{prefix}{}{rel}: {parent}",
                if last { "└─ " } else { "├─ " }
            );
            if !seen.contains(parent) {
                seen.push(parent.clone());
                let next = format!("{prefix}{}", if last { "   " } else { "│  " });
                walk(parent, edges, &next, seen);
            }
        }
    }
    let root = g["root"].as_str().unwrap_or(reference);
    println!("{root}");
    walk(root, &edges, "", &mut vec![root.to_string()]);
    if g["truncated"].as_bool() == Some(true) {
        println!("(more above; raise --depth)");
    }
    Ok(())
}
