//! `qanat data pull`: download a version's files, verifying each.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use qanat_client::DatasetApi;
use qanat_data::FileEntry;
use reqwest::Method;
use tokio::io::AsyncWriteExt;

use crate::client::Client;

use super::{human, progress};

/// File downloads in flight during a pull.
const IN_FLIGHT: usize = 4;

pub(super) async fn pull(
    c: &Client,
    api: &DatasetApi<'_>,
    version: &str,
    dir: &Path,
) -> Result<()> {
    let v = api.version(version).await?;
    let manifest = v.manifest;
    let n = v.version.version;
    let ds = api.path();
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
