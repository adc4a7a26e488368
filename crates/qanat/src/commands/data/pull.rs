//! `qanat data pull`: a version's files into a directory, each verified against the
//! manifest's hash before it takes its name.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use qanat_client::Client;
use qanat_core::ObjectRef;
use qanat_data::{FileEntry, VersionRef};

use crate::output::{human, progress};

/// File downloads in flight during a pull.
const IN_FLIGHT: usize = 4;

/// What a pull may do to a directory that already holds files.
pub struct Options {
    /// Write into a non-empty directory (the version's files replace same-named ones).
    pub force: bool,
    /// Remove the files the version does not have, as `rsync --delete` does.
    pub delete: bool,
}

/// What a pull wrote.
#[derive(serde::Serialize)]
pub struct Pulled {
    pub dataset: String,
    pub version: i64,
    pub files: usize,
    pub bytes: u64,
    /// Files removed by `--delete`, relative to the directory.
    pub deleted: Vec<String>,
    /// Tables whose personal-data columns came pseudonymized (no PII permission).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pseudonymized: Vec<qanat_data::wire::PseudonymizedFile>,
}

crate::output::fields!(Pulled, |x| {
    "dataset" => x.dataset.clone(),
    "version" => x.version.to_string(),
    "files" => x.files.to_string(),
    "size" => human(x.bytes),
    "deleted" => crate::output::count(x.deleted.len() as i64, "file"),
});

pub async fn pull(
    c: &Client,
    project: &str,
    reference: &ObjectRef,
    dir: &Path,
    opts: &Options,
) -> Result<Pulled> {
    let dataset = &reference.name;
    let occupied = std::fs::read_dir(dir).map(|mut d| d.next().is_some());
    if matches!(occupied, Ok(true)) && !opts.force && !opts.delete {
        bail!(
            "{} is not empty: pass --force to write the version into it (its files replace those of the same name), and --delete as well to remove the files the version does not have",
            dir.display()
        );
    }
    let v = c
        .version(project, dataset, &reference.selector_or_latest())
        .await?;
    // Files are fetched from the version the manifest came from, whatever the reference
    // (a tag, `latest`) points at by then.
    let origin = Origin {
        c,
        project,
        dataset,
        version: VersionRef::Version(v.version.version),
    };
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;
    let start = Instant::now();
    let total = v.manifest.total_size();
    let keep: std::collections::HashSet<PathBuf> = v
        .manifest
        .files
        .iter()
        .map(|f| {
            f.path_bytes()
                .map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(&b)))
        })
        .collect::<Result<_, _>>()?;
    let files = v.manifest.files.len();
    let bar = progress(total, "pulling");
    let (bar_ref, origin) = (&bar, &origin);
    let hidden: std::collections::HashSet<usize> =
        v.pseudonymized.iter().map(|p| p.index).collect();
    let hidden = &hidden;
    futures::stream::iter(v.manifest.files.into_iter().enumerate())
        .map(|(i, f)| async move {
            pull_file(origin, i, &f, hidden.contains(&i), dir, bar_ref).await
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    bar.finish_and_clear();
    let deleted = if opts.delete {
        delete_others(dir, &keep)?
    } else {
        Vec::new()
    };
    eprintln!(
        "pulled version {}: {} verified ({:.1} MB/s)",
        v.version.version,
        human(total),
        total as f64 / start.elapsed().as_secs_f64().max(1e-6) / 1e6
    );
    for p in &v.pseudonymized {
        eprintln!(
            "pseudonymized (personal data; you do not hold the project's PII permission): {} [{}]",
            p.path,
            p.columns.join(", ")
        );
    }
    Ok(Pulled {
        dataset: dataset.to_string(),
        version: v.version.version,
        files,
        bytes: total,
        deleted,
        pseudonymized: v.pseudonymized,
    })
}

/// Removes every file under `dir` whose path is not in `keep`, then the directories
/// left empty; returns the removed files' paths.
fn delete_others(dir: &Path, keep: &std::collections::HashSet<PathBuf>) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let mut dirs = Vec::new();
    for entry in walkdir::WalkDir::new(dir).min_depth(1) {
        let entry = entry.with_context(|| format!("walking {}", dir.display()))?;
        let rel = entry
            .path()
            .strip_prefix(dir)
            .context("walking")?
            .to_path_buf();
        if entry.file_type().is_dir() {
            dirs.push(entry.path().to_path_buf());
        } else if !keep.contains(&rel) {
            std::fs::remove_file(entry.path())
                .with_context(|| format!("removing {}", entry.path().display()))?;
            removed.push(rel.to_string_lossy().into_owned());
        }
    }
    // Deepest first, so a directory is empty by the time it is tried.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let _ = std::fs::remove_dir(&d);
    }
    removed.sort();
    Ok(removed)
}

/// Where a version's files come from.
struct Origin<'a> {
    c: &'a Client,
    project: &'a str,
    dataset: &'a str,
    version: VersionRef,
}

/// Downloads file `index` beside its target, checks size and BLAKE3, sets its mode and
/// renames it into place; a failure leaves nothing under the target's name. A
/// pseudonymized table (`hidden`) is checked against the BLAKE3 its download states,
/// which the server computed over the bytes it sends.
async fn pull_file(
    origin: &Origin<'_>,
    index: usize,
    f: &FileEntry,
    hidden: bool,
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
        let (mut stream, served) = origin
            .c
            .version_file_served(origin.project, origin.dataset, &origin.version, index)
            .await?;
        // Only a file the version's answer said would come pseudonymized is checked
        // against the download's own hash; every other file against the manifest.
        let expected = match (hidden, served) {
            (false, _) => None,
            (true, Some(h)) => Some(h),
            (true, None) => bail!(
                "{}: the server sent it without the BLAKE3 of its pseudonymized bytes; pull again",
                f.path
            ),
        };
        // Hashing and writing run on a blocking thread per file, fed through a short
        // queue: the runtime thread only moves bytes off the socket, and the disk
        // takes each 8 MiB block (O_DIRECT where the file system allows it) while the
        // next is still arriving, instead of everything at a final sync.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
        let staged = tmp.clone();
        let writer = tokio::task::spawn_blocking(move || -> Result<(u64, blake3::Hash)> {
            let mut out = qanat_store::DirectWriter::create(&staged)
                .with_context(|| format!("creating {}", staged.display()))?;
            let mut hasher = blake3::Hasher::new();
            while let Some(chunk) = rx.blocking_recv() {
                hasher.update(&chunk);
                out.write(&chunk)
                    .with_context(|| format!("writing {}", staged.display()))?;
            }
            let size = out
                .finish()
                .with_context(|| format!("writing {}", staged.display()))?;
            Ok((size, hasher.finalize()))
        });
        let mut received: Result<()> = Ok(());
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    received =
                        Err(anyhow::Error::from(e)
                            .context(format!("{}: download interrupted", f.path)));
                    break;
                }
            };
            bar.inc(chunk.len() as u64);
            if tx.send(chunk).await.is_err() {
                // The writer stopped on an error; it is reported below.
                break;
            }
        }
        drop(tx);
        let written = writer.await.context("the file writer stopped")?;
        received?;
        let (size, hash) = written?;
        let matches = match &expected {
            Some(h) => hash.to_hex().as_str() == h,
            None => size == f.size && hash.to_hex().as_str() == f.blake3,
        };
        if !matches {
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
