//! `qanat objects`: a project's encrypted object area, streamed both ways.

use std::path::Path;

use anyhow::{Context, Result};
use futures::StreamExt;
use qanat_client::{Body, ByteStream};
use qanat_types::store::wire::{LocationParam, LocationView, ObjectListParams, ObjectView};
use tokio::io::AsyncWriteExt;
use tokio_util::io::ReaderStream;

use super::Ctx;
use crate::cli::ObjectsCmd;
use crate::output;

pub async fn run(ctx: &Ctx, cmd: ObjectsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        ObjectsCmd::Put {
            project,
            key,
            file,
            location,
        } => {
            let f = tokio::fs::File::open(&file)
                .await
                .with_context(|| format!("opening {}", file.display()))?;
            let len = f.metadata().await?.len();
            // 1 MiB reads: the default 4 KiB buffer costs a syscall per page.
            let body = Body::wrap_stream(ReaderStream::with_capacity(f, 1 << 20));
            let at = LocationParam { location };
            let view = c.put_object(&project, &key, &at, len, body).await?;
            output::record(format, &view)
        }
        ObjectsCmd::Get {
            project,
            key,
            out,
            location,
        } => {
            let bytes = c
                .get_object(&project, &key, &LocationParam { location })
                .await?;
            if out.as_os_str() == "-" {
                to_stdout(bytes).await
            } else {
                to_file(bytes, &out).await
            }
        }
        ObjectsCmd::Ls {
            project,
            prefix,
            location,
        } => {
            let params = ObjectListParams { location, prefix };
            output::list(format, &c.objects(&project, &params).await?)
        }
        ObjectsCmd::Rm {
            project,
            key,
            location,
        } => {
            c.delete_object(&project, &key, &LocationParam { location })
                .await?;
            eprintln!("deleted {key}");
            Ok(())
        }
        ObjectsCmd::Locations => output::list(format, &c.locations().await?),
    }
}

pub(crate) async fn to_stdout(mut bytes: ByteStream) -> Result<()> {
    let mut stdout = tokio::io::stdout();
    while let Some(chunk) = bytes.next().await {
        stdout
            .write_all(&chunk.context("download interrupted")?)
            .await?;
    }
    stdout.flush().await?;
    Ok(())
}

/// Writes beside the target and renames, so a failed download leaves no partial file
/// under the requested name.
pub(crate) async fn to_file(mut bytes: ByteStream, out: &Path) -> Result<()> {
    let tmp = out.with_extension("qanat-partial");
    let mut f = tokio::fs::File::create(&tmp)
        .await
        .with_context(|| format!("creating {}", tmp.display()))?;
    let result: Result<()> = async {
        while let Some(chunk) = bytes.next().await {
            f.write_all(&chunk.context("download interrupted")?).await?;
        }
        f.sync_all().await?;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(e);
    }
    tokio::fs::rename(&tmp, out)
        .await
        .with_context(|| format!("moving into {}", out.display()))
}

output::columns!(ObjectView, |x| {
    "key" => x.key.clone(),
    "size" => x.size.to_string(),
    "location" => x.location.clone(),
    "region" => x.region.clone(),
    "modified" => output::opt(x.last_modified.as_ref()),
});

output::fields!(ObjectView = Row);

output::columns!(LocationView, |x| {
    "name" => x.name.clone(),
    "region" => x.region.clone(),
    "kind" => x.kind.clone(),
    "default" => x.default.to_string(),
});
