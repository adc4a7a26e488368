//! `qanat objects`: a project's encrypted object area.

use anyhow::{Context, Result};
use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::cli::objects::ObjectsCmd;
use crate::cli::Format;
use crate::client::{key_path, seg, Client};
use crate::output;

/// `/api/v1/projects/{project}/objects/{key}[?location=…]`, each part encoded.
fn object_path(project: &str, key: &str, location: &Option<String>) -> String {
    let path = format!(
        "/api/v1/projects/{}/objects/{}",
        seg(project),
        key_path(key)
    );
    match location {
        Some(l) => format!("{path}?location={}", seg(l)),
        None => path,
    }
}

pub(super) async fn objects(c: &Client, fmt: Format, cmd: ObjectsCmd) -> Result<()> {
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
            let body = reqwest::Body::wrap_stream(tokio_util_stream(f));
            let path = object_path(&project, &key, &location);
            let v: Value = c
                .json(
                    c.request(Method::PUT, &path)
                        .header(reqwest::header::CONTENT_LENGTH, len)
                        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                        .body(body),
                )
                .await?;
            output::object(fmt, &v);
        }
        ObjectsCmd::Get {
            project,
            key,
            out,
            location,
        } => {
            let path = object_path(&project, &key, &location);
            let resp = c.send(c.request(Method::GET, &path)).await?;
            let mut stream = resp.bytes_stream();
            if out.as_os_str() == "-" {
                let mut stdout = tokio::io::stdout();
                while let Some(chunk) = stream.next().await {
                    stdout
                        .write_all(&chunk.context("download interrupted")?)
                        .await?;
                }
                stdout.flush().await?;
            } else {
                // Write beside the target and rename, so a failed download leaves no
                // partial file under the requested name.
                let tmp = out.with_extension("qanat-partial");
                let mut f = tokio::fs::File::create(&tmp)
                    .await
                    .with_context(|| format!("creating {}", tmp.display()))?;
                let result: Result<()> = async {
                    while let Some(chunk) = stream.next().await {
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
                tokio::fs::rename(&tmp, &out).await?;
            }
        }
        ObjectsCmd::Ls {
            project,
            prefix,
            location,
        } => {
            let mut path = format!("/api/v1/projects/{}/objects", seg(&project));
            let mut q = vec![];
            if let Some(p) = prefix {
                q.push(format!("prefix={}", seg(&p)));
            }
            if let Some(l) = location {
                q.push(format!("location={}", seg(&l)));
            }
            if !q.is_empty() {
                path = format!("{path}?{}", q.join("&"));
            }
            let os: Value = c.get(&path).await?;
            output::list(
                fmt,
                &os,
                &[
                    ("key", "key"),
                    ("size", "size"),
                    ("location", "location"),
                    ("region", "region"),
                    ("modified", "last_modified"),
                ],
            );
        }
        ObjectsCmd::Rm {
            project,
            key,
            location,
        } => {
            let path = object_path(&project, &key, &location);
            c.send(c.request(Method::DELETE, &path)).await?;
            eprintln!("deleted {key}");
        }
        ObjectsCmd::Locations => {
            let ls: Value = c.get("/api/v1/storage/locations").await?;
            output::list(
                fmt,
                &ls,
                &[
                    ("name", "name"),
                    ("region", "region"),
                    ("kind", "kind"),
                    ("default", "default"),
                ],
            );
        }
    }
    Ok(())
}

fn tokio_util_stream(
    f: tokio::fs::File,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures::stream::unfold(f, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 20];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    })
}
