//! What changed between two versions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use qanat_core::Refusal;

use super::{FileEntry, FileProfile, Manifest};

/// A file as a diff shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileSummary {
    pub path: String,
    pub size: u64,
}

/// A file present in both versions with different content or mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ManifestDiff {
    pub added: Vec<FileSummary>,
    pub removed: Vec<FileSummary>,
    pub changed: Vec<FileChange>,
    pub unchanged: u64,
}

/// How a column's profile moved between versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ColumnDelta {
    pub name: String,
    pub null_fraction_before: f64,
    pub null_fraction_after: f64,
    pub mean_before: Option<f64>,
    pub mean_after: Option<f64>,
    pub distinct_before: u64,
    pub distinct_after: u64,
}

/// Schema, row-count and profile changes of one tabular file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TableDelta {
    pub path: String,
    pub rows_before: u64,
    pub rows_after: u64,
    pub columns_added: Vec<String>,
    pub columns_removed: Vec<String>,
    /// `name: OldType -> NewType`.
    pub type_changes: Vec<String>,
    pub columns: Vec<ColumnDelta>,
}

/// Compares the profiles of tabular files present (and profiled) in both versions.
pub fn table_deltas(old: &[FileProfile], new: &[FileProfile]) -> Vec<TableDelta> {
    let mut out = Vec::new();
    for n in new {
        let (Some(np), Some(op)) = (
            n.profile.as_ref(),
            old.iter()
                .find(|o| o.path == n.path)
                .and_then(|o| o.profile.as_ref()),
        ) else {
            continue;
        };
        let mut d = TableDelta {
            path: n.path.clone(),
            rows_before: op.rows,
            rows_after: np.rows,
            columns_added: vec![],
            columns_removed: vec![],
            type_changes: vec![],
            columns: vec![],
        };
        for c in &np.columns {
            match op.columns.iter().find(|o| o.name == c.name) {
                None => d.columns_added.push(c.name.clone()),
                Some(o) => {
                    if o.data_type != c.data_type {
                        d.type_changes
                            .push(format!("{}: {} -> {}", c.name, o.data_type, c.data_type));
                    }
                    d.columns.push(ColumnDelta {
                        name: c.name.clone(),
                        null_fraction_before: o.null_fraction,
                        null_fraction_after: c.null_fraction,
                        mean_before: o.mean,
                        mean_after: c.mean,
                        distinct_before: o.distinct_estimate,
                        distinct_after: c.distinct_estimate,
                    });
                }
            }
        }
        for o in &op.columns {
            if !np.columns.iter().any(|c| c.name == o.name) {
                d.columns_removed.push(o.name.clone());
            }
        }
        out.push(d);
    }
    out
}

fn by_path(m: &Manifest) -> Result<BTreeMap<Vec<u8>, &FileEntry>, Refusal> {
    m.files.iter().map(|f| Ok((f.path_bytes()?, f))).collect()
}

/// Compares `old` with `new` by path.
pub fn diff(old: &Manifest, new: &Manifest) -> Result<ManifestDiff, Refusal> {
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
    use crate::data::{ChunkId, ChunkRef};

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
