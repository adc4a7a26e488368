//! What changed between two versions.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{FileEntry, Manifest, Result};

/// A file as a diff shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FileSummary {
    pub path: String,
    pub size: u64,
}

/// A file present in both versions with different content or mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FileChange {
    pub path: String,
    pub old_size: u64,
    pub new_size: u64,
    pub content_changed: bool,
    pub mode_changed: bool,
    /// Bytes of the new file's chunks that the old file did not have.
    pub new_chunk_bytes: u64,
}

/// Files added, removed and changed from one version to another.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ManifestDiff {
    pub added: Vec<FileSummary>,
    pub removed: Vec<FileSummary>,
    pub changed: Vec<FileChange>,
    pub unchanged: u64,
}

fn by_path(m: &Manifest) -> Result<BTreeMap<Vec<u8>, &FileEntry>> {
    m.files.iter().map(|f| Ok((f.path_bytes()?, f))).collect()
}

/// Compares `old` with `new` by path.
pub fn diff(old: &Manifest, new: &Manifest) -> Result<ManifestDiff> {
    let a = by_path(old)?;
    let b = by_path(new)?;
    let mut out = ManifestDiff::default();
    for (path, f) in &a {
        if !b.contains_key(path) {
            out.removed.push(FileSummary {
                path: f.path.clone(),
                size: f.size,
            });
        }
    }
    for (path, nf) in &b {
        match a.get(path) {
            None => out.added.push(FileSummary {
                path: nf.path.clone(),
                size: nf.size,
            }),
            Some(of) => {
                let content_changed = of.blake3 != nf.blake3;
                let mode_changed = of.mode != nf.mode;
                if content_changed || mode_changed {
                    let old_chunks: std::collections::HashSet<_> =
                        of.chunks.iter().map(|c| c.id).collect();
                    out.changed.push(FileChange {
                        path: nf.path.clone(),
                        old_size: of.size,
                        new_size: nf.size,
                        content_changed,
                        mode_changed,
                        new_chunk_bytes: nf
                            .chunks
                            .iter()
                            .filter(|c| !old_chunks.contains(&c.id))
                            .map(|c| c.size)
                            .sum(),
                    });
                } else {
                    out.unchanged += 1;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChunkId, ChunkRef};

    fn file(path: &str, content: &[u8], mode: u32) -> FileEntry {
        FileEntry::new(
            path.as_bytes(),
            content.len() as u64,
            mode,
            blake3::hash(content).to_hex().to_string(),
            vec![ChunkRef {
                id: ChunkId::of(content),
                size: content.len() as u64,
            }],
        )
    }

    #[test]
    fn reports_added_removed_changed_and_unchanged() {
        let old = Manifest {
            files: vec![
                file("keep", b"k", 0o644),
                file("gone", b"g", 0o644),
                file("edit", b"v1", 0o644),
                file("chmod", b"c", 0o644),
            ],
        };
        let new = Manifest {
            files: vec![
                file("keep", b"k", 0o644),
                file("edit", b"v2!", 0o644),
                file("chmod", b"c", 0o755),
                file("new", b"n", 0o644),
            ],
        };
        let d = diff(&old, &new).expect("diff");
        assert_eq!(
            d.added,
            vec![FileSummary {
                path: "new".into(),
                size: 1
            }]
        );
        assert_eq!(
            d.removed,
            vec![FileSummary {
                path: "gone".into(),
                size: 1
            }]
        );
        assert_eq!(d.changed.len(), 2);
        let edit = d.changed.iter().find(|c| c.path == "edit").expect("edit");
        assert!(edit.content_changed && !edit.mode_changed && edit.new_chunk_bytes == 3);
        let chmod = d.changed.iter().find(|c| c.path == "chmod").expect("chmod");
        assert!(!chmod.content_changed && chmod.mode_changed);
        assert_eq!(d.unchanged, 1);
        assert_eq!(
            diff(&new, &new).expect("diff"),
            ManifestDiff {
                unchanged: 4,
                ..Default::default()
            }
        );
    }
}
