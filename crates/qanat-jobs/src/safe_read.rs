//! Reading what a job left behind as a careful stranger: a job's directory is written
//! by untrusted code, so its outputs are opened beneath the directory they were
//! declared in (`openat2` with `RESOLVE_BENEATH`: no `..` or symbolic link leads out,
//! no magic link is followed), never through a link at the last step, never blocking on
//! a FIFO, regular files only, and within a byte budget.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Most files one attempt's outputs may hold.
pub(crate) const MAX_OUTPUT_FILES: usize = 100_000;

/// A regular file found among a job's outputs, open, with its size when opened.
#[derive(Debug)]
pub(crate) struct Found {
    /// Relative to the directory the outputs were declared in, `/`-separated.
    pub rel: String,
    pub file: std::fs::File,
    pub len: u64,
}

fn flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

fn beneath(dir: &OwnedFd, rel: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::openat2(
        dir,
        rel,
        flags(),
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )?)
}

fn kind(fd: &OwnedFd) -> std::io::Result<(rustix::fs::FileType, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((
        rustix::fs::FileType::from_raw_mode(st.st_mode),
        st.st_size.max(0) as u64,
    ))
}

/// Opens `root` itself, refusing a symbolic link in its place.
pub(crate) fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Why an output could not be collected; the message is shown as the job's reason.
#[derive(Debug)]
pub(crate) enum OutputError {
    Missing { out: String, why: String },
    TooLarge { limit: u64 },
    TooMany,
    Io(String),
}

impl std::fmt::Display for OutputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputError::Missing { out, why } => write!(
                f,
                "declared output '{out}' was not produced inside the job's working directory ({why}); outputs must be regular files or directories there, not links out of it"
            ),
            OutputError::TooLarge { limit } => write!(
                f,
                "the declared outputs hold more than {limit} bytes (jobs.max_output_bytes); log large files from the job with the MLflow client instead"
            ),
            OutputError::TooMany => write!(
                f,
                "the declared outputs hold more than {MAX_OUTPUT_FILES} files; archive them into fewer"
            ),
            OutputError::Io(e) => write!(f, "reading the outputs failed: {e}"),
        }
    }
}

/// Every regular file under the declared `outputs` of `root` (files, or directories
/// walked without following links), within `limit` bytes in all. A declared output
/// that is missing, a link, or not a file or directory is an error; links and special
/// files met while walking a directory are skipped.
pub(crate) fn collect_outputs(
    root: &Path,
    outputs: &[String],
    limit: u64,
) -> Result<Vec<Found>, OutputError> {
    let root_fd = open_root(root).map_err(|e| OutputError::Missing {
        out: ".".into(),
        why: format!("{}: {e}", root.display()),
    })?;
    let mut found = Vec::new();
    let mut total = 0u64;
    let mut add = |rel: String, fd: OwnedFd, len: u64, found: &mut Vec<Found>| {
        total = total.saturating_add(len);
        if total > limit {
            return Err(OutputError::TooLarge { limit });
        }
        if found.len() >= MAX_OUTPUT_FILES {
            return Err(OutputError::TooMany);
        }
        found.push(Found {
            rel,
            file: std::fs::File::from(fd),
            len,
        });
        Ok(())
    };
    for out in outputs {
        let missing = |why: String| OutputError::Missing {
            out: out.clone(),
            why,
        };
        let fd = beneath(&root_fd, Path::new(out)).map_err(|e| missing(e.to_string()))?;
        let (t, len) = kind(&fd).map_err(|e| missing(e.to_string()))?;
        let base = normalized(out);
        if t.is_file() {
            add(base, fd, len, &mut found)?;
        } else if t.is_dir() {
            let mut stack: Vec<(String, OwnedFd)> = vec![(base, fd)];
            while let Some((prefix, dir)) = stack.pop() {
                let entries =
                    rustix::fs::Dir::read_from(&dir).map_err(|e| OutputError::Io(e.to_string()))?;
                for entry in entries {
                    let entry = entry.map_err(|e| OutputError::Io(e.to_string()))?;
                    let name = entry.file_name().to_bytes();
                    if name == b"." || name == b".." {
                        continue;
                    }
                    let name = String::from_utf8_lossy(name).into_owned();
                    // A link (ELOOP under NOFOLLOW) or anything gone meanwhile: skipped.
                    let Ok(child) = beneath(&dir, Path::new(&name)) else {
                        continue;
                    };
                    let Ok((t, len)) = kind(&child) else { continue };
                    let rel = if prefix.is_empty() {
                        name
                    } else {
                        format!("{prefix}/{name}")
                    };
                    if t.is_dir() {
                        stack.push((rel, child));
                    } else if t.is_file() {
                        add(rel, child, len, &mut found)?;
                    }
                }
            }
        } else {
            return Err(missing("it is not a regular file or a directory".into()));
        }
    }
    Ok(found)
}

/// `a/./b/` as `a/b`; `.` as the empty prefix.
fn normalized(out: &str) -> String {
    PathBuf::from(out)
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Opens a log the server wrote for a rank without following a link in its place (the
/// job never has write access to it, but a log is read as carefully as any output).
pub(crate) async fn open_log(path: &Path) -> std::io::Result<(tokio::fs::File, u64)> {
    let mut o = tokio::fs::OpenOptions::new();
    o.read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32);
    let f = o.open(path).await?;
    let meta = f.metadata().await?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok((f, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_never_lead_out_of_their_directory() {
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("secret"), "key").expect("write");
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        std::fs::create_dir_all(r.join("model/sub")).expect("mkdir");
        std::fs::write(r.join("model/weights"), "w").expect("write");
        std::fs::write(r.join("model/sub/more"), "m").expect("write");
        std::fs::write(r.join("report.txt"), "r").expect("write");
        let secret = outside.path().join("secret");
        std::os::unix::fs::symlink(&secret, r.join("model/leak")).expect("link");
        std::os::unix::fs::symlink(&secret, r.join("link.txt")).expect("link");
        std::os::unix::fs::symlink(outside.path(), r.join("dirlink")).expect("link");

        let mut rels: Vec<String> =
            collect_outputs(r, &["model".into(), "report.txt".into()], 1 << 20)
                .expect("collected")
                .into_iter()
                .map(|f| f.rel)
                .collect();
        rels.sort();
        assert_eq!(rels, ["model/sub/more", "model/weights", "report.txt"]);
        for bad in [
            "link.txt",
            "dirlink",
            "dirlink/secret",
            "../x",
            "/etc/passwd",
            "nothing",
        ] {
            let e = collect_outputs(r, &[bad.into()], 1 << 20).expect_err(bad);
            assert!(matches!(e, OutputError::Missing { .. }), "{bad}: {e}");
        }
        let e = collect_outputs(r, &["model".into()], 1).expect_err("over the budget");
        assert!(e.to_string().contains("jobs.max_output_bytes"), "{e}");
    }
}
