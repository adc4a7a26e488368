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

/// The regular files of a job's declared outputs: their paths beneath the working
/// directory, held open as a directory, each opened when it is read (one at a time: a
/// job with many files costs the server one descriptor more, not one per file).
#[derive(Debug)]
pub(crate) struct Outputs {
    dir: OwnedFd,
    /// `/`-separated, relative to the working directory, with their sizes.
    pub files: Vec<(String, u64)>,
    owner: Option<u32>,
}

impl Outputs {
    /// Opens output `rel` (one of [`Outputs::files`]) beneath the working directory.
    pub(crate) fn open(&self, rel: &str) -> std::io::Result<(std::fs::File, u64)> {
        let fd = beneath(&self.dir, Path::new(rel))?;
        let (t, len, uid) = kind(&fd)?;
        if !t.is_file() || self.owner.is_some_and(|o| o != uid) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{rel} changed since it was listed"),
            ));
        }
        Ok((std::fs::File::from(fd), len))
    }
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

fn kind(fd: &OwnedFd) -> std::io::Result<(rustix::fs::FileType, u64, u32)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((
        rustix::fs::FileType::from_raw_mode(st.st_mode),
        st.st_size.max(0) as u64,
        st.st_uid,
    ))
}

/// Opens `base` itself (refusing a symbolic link in its place), then `rel` beneath it
/// with no symbolic link anywhere on the way: the working directory a job names is
/// found where it says, not where a link it left leads.
pub(crate) fn open_dir(base: &Path, rel: &Path) -> std::io::Result<OwnedFd> {
    let base = rustix::fs::open(
        base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if rel.as_os_str().is_empty() {
        return Ok(base);
    }
    Ok(rustix::fs::openat2(
        &base,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
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
                "the declared outputs hold more than {MAX_OUTPUT_FILES} files and directories; archive them into fewer"
            ),
            OutputError::Io(e) => write!(f, "reading the outputs failed: {e}"),
        }
    }
}

/// Every regular file under the declared `outputs` of the working directory `rel`
/// beneath `base` (files, or directories walked without following links), within
/// `limit` bytes in all. With `owner`, only files that uid owns count (what the job
/// itself wrote, not a link to another's file). A declared output that is missing, a
/// link, or not a file or directory is an error; links, special files and files of
/// another owner met while walking a directory are skipped.
pub(crate) fn collect_outputs(
    base: &Path,
    rel: &Path,
    outputs: &[String],
    limit: u64,
    owner: Option<u32>,
) -> Result<Outputs, OutputError> {
    let dir = open_dir(base, rel).map_err(|e| OutputError::Missing {
        out: ".".into(),
        why: format!("{}: {e}", base.join(rel).display()),
    })?;
    let mut files = Vec::new();
    let mut total = 0u64;
    let mut seen = 0usize;
    let count = |seen: &mut usize| {
        *seen += 1;
        if *seen > MAX_OUTPUT_FILES {
            Err(OutputError::TooMany)
        } else {
            Ok(())
        }
    };
    let mut add = |rel: String, len: u64, files: &mut Vec<(String, u64)>| {
        total = total.saturating_add(len);
        if total > limit {
            return Err(OutputError::TooLarge { limit });
        }
        files.push((rel, len));
        Ok(())
    };
    let owned = |uid: u32| owner.is_none_or(|o| o == uid);
    for out in outputs {
        let missing = |why: String| OutputError::Missing {
            out: out.clone(),
            why,
        };
        let fd = beneath(&dir, Path::new(out)).map_err(|e| missing(e.to_string()))?;
        let (t, len, uid) = kind(&fd).map_err(|e| missing(e.to_string()))?;
        let top = normalized(out);
        if t.is_file() && owned(uid) {
            count(&mut seen)?;
            add(top, len, &mut files)?;
        } else if t.is_dir() {
            drop(fd);
            // Directories by path, each opened (beneath the working directory) when
            // its turn comes: one descriptor at a time.
            let mut stack = vec![top];
            while let Some(prefix) = stack.pop() {
                count(&mut seen)?;
                let Ok(d) = beneath(
                    &dir,
                    Path::new(if prefix.is_empty() { "." } else { &prefix }),
                ) else {
                    continue;
                };
                let entries =
                    rustix::fs::Dir::read_from(&d).map_err(|e| OutputError::Io(e.to_string()))?;
                for entry in entries {
                    let entry = entry.map_err(|e| OutputError::Io(e.to_string()))?;
                    let name = entry.file_name().to_bytes();
                    if name == b"." || name == b".." {
                        continue;
                    }
                    let name = String::from_utf8_lossy(name).into_owned();
                    // A link (ELOOP under NOFOLLOW) or anything gone meanwhile: skipped.
                    let Ok(child) = beneath(&d, Path::new(&name)) else {
                        continue;
                    };
                    let Ok((t, len, uid)) = kind(&child) else {
                        continue;
                    };
                    let rel = if prefix.is_empty() {
                        name
                    } else {
                        format!("{prefix}/{name}")
                    };
                    if t.is_dir() {
                        stack.push(rel);
                    } else if t.is_file() && owned(uid) {
                        count(&mut seen)?;
                        add(rel, len, &mut files)?;
                    }
                }
            }
        } else if t.is_file() {
            return Err(missing("it belongs to another user".into()));
        } else {
            return Err(missing("it is not a regular file or a directory".into()));
        }
    }
    Ok(Outputs { dir, files, owner })
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

    fn rels(o: &Outputs) -> Vec<String> {
        let mut r: Vec<String> = o.files.iter().map(|(p, _)| p.clone()).collect();
        r.sort();
        r
    }

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
        let here = Path::new("");

        let out = collect_outputs(
            r,
            here,
            &["model".into(), "report.txt".into()],
            1 << 20,
            None,
        )
        .expect("collected");
        assert_eq!(
            rels(&out),
            ["model/sub/more", "model/weights", "report.txt"]
        );
        let (mut f, len) = out.open("model/weights").expect("open");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut f, &mut text).expect("read");
        assert_eq!((text.as_str(), len), ("w", 1));
        for bad in [
            "link.txt",
            "dirlink",
            "dirlink/secret",
            "../x",
            "/etc/passwd",
            "nothing",
        ] {
            let e = collect_outputs(r, here, &[bad.into()], 1 << 20, None).expect_err(bad);
            assert!(matches!(e, OutputError::Missing { .. }), "{bad}: {e}");
        }
        let e = collect_outputs(r, here, &["model".into()], 1, None).expect_err("over the budget");
        assert!(e.to_string().contains("jobs.max_output_bytes"), "{e}");
        // A working directory the job made a link (`x`, `x/`, `x/sub`) is not followed.
        for wd in ["dirlink", "dirlink/", "model/../dirlink"] {
            let e =
                collect_outputs(r, Path::new(wd), &["secret".into()], 1 << 20, None).expect_err(wd);
            assert!(matches!(e, OutputError::Missing { .. }), "{wd}: {e}");
        }
        // Only the owner's files count when an owner is named.
        let me = rustix::process::geteuid().as_raw();
        let e = collect_outputs(r, here, &["report.txt".into()], 1 << 20, Some(me + 1))
            .expect_err("another owner's");
        assert!(e.to_string().contains("belongs to another user"), "{e}");
        let none =
            collect_outputs(r, here, &["model".into()], 1 << 20, Some(me + 1)).expect("walked");
        assert!(none.files.is_empty());
    }
}
