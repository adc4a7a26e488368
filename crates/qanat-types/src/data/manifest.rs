//! A version's manifest: the file tree as chunk lists.

use std::collections::HashSet;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use qanat_core::Refusal;

use super::{ChunkId, MAX_CHUNK};

const MAX_PATH: usize = 4096;

/// One chunk of a file, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkRef {
    #[schema(value_type = String)]
    pub id: ChunkId,
    pub size: u64,
}

/// One file of a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// `/`-separated relative path (a lossy rendering when `path_b64` is present).
    pub path: String,
    /// The exact path bytes, base64, when the name is not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_b64: Option<String>,
    pub size: u64,
    /// Unix permission bits.
    pub mode: u32,
    /// BLAKE3 of the whole file, hex.
    pub blake3: String,
    pub chunks: Vec<ChunkRef>,
}

impl FileEntry {
    /// The exact path bytes.
    pub fn path_bytes(&self) -> Result<Vec<u8>, Refusal> {
        match &self.path_b64 {
            None => Ok(self.path.as_bytes().to_vec()),
            Some(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| Refusal::invalid("path_b64", e.to_string())),
        }
    }

    /// An entry for `path_bytes`, choosing the representation.
    pub fn new(
        path_bytes: &[u8],
        size: u64,
        mode: u32,
        blake3: String,
        chunks: Vec<ChunkRef>,
    ) -> Self {
        let (path, path_b64) = match std::str::from_utf8(path_bytes) {
            Ok(s) => (s.to_string(), None),
            Err(_) => (
                String::from_utf8_lossy(path_bytes).into_owned(),
                Some(base64::engine::general_purpose::STANDARD.encode(path_bytes)),
            ),
        };
        FileEntry {
            path,
            path_b64,
            size,
            mode,
            blake3,
            chunks,
        }
    }
}

/// The file tree of a version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub files: Vec<FileEntry>,
}

fn validate_path(p: &[u8]) -> std::result::Result<(), String> {
    if p.is_empty() {
        return Err("empty path".into());
    }
    if p.len() > MAX_PATH {
        return Err(format!("path longer than {MAX_PATH} bytes"));
    }
    if p[0] == b'/' {
        return Err("absolute path".into());
    }
    if p.contains(&0) {
        return Err("NUL byte in path".into());
    }
    if p.iter().any(|b| *b < 0x20 || *b == 0x7f) {
        return Err("control character in path".into());
    }
    if p.contains(&b'\\') {
        return Err("backslash in path (separate directories with '/')".into());
    }
    for seg in p.split(|b| *b == b'/') {
        if seg.is_empty() || seg == b"." || seg == b".." {
            return Err("empty, '.' or '..' path segment".into());
        }
    }
    Ok(())
}

impl Manifest {
    /// Checks what a client sent: safe, unique paths; chunk sizes that add up; chunks
    /// no larger than the chunker makes. Sorts the files into canonical order.
    pub fn normalize(&mut self) -> Result<(), Refusal> {
        let mut seen = HashSet::new();
        let mut keyed = Vec::with_capacity(self.files.len());
        for f in self.files.drain(..) {
            let bytes = f.path_bytes()?;
            validate_path(&bytes)
                .map_err(|why| Refusal::invalid("manifest", format!("file '{}': {why}", f.path)))?;
            if !seen.insert(bytes.clone()) {
                return Err(Refusal::invalid(
                    "manifest",
                    format!("file '{}' appears twice", f.path),
                ));
            }
            let sum: u64 = f.chunks.iter().map(|c| c.size).sum();
            if sum != f.size {
                return Err(Refusal::invalid(
                    "manifest",
                    format!(
                        "file '{}': chunks add up to {sum} bytes, size says {}",
                        f.path, f.size
                    ),
                ));
            }
            if f.chunks
                .iter()
                .any(|c| c.size == 0 || c.size > MAX_CHUNK as u64)
            {
                return Err(Refusal::invalid(
                    "manifest",
                    format!("file '{}': chunk sizes must be 1..={MAX_CHUNK}", f.path),
                ));
            }
            if f.mode > 0o777 {
                return Err(Refusal::invalid(
                    "manifest",
                    format!(
                        "file '{}': mode {:o} is beyond 0o777 (permission bits only)",
                        f.path, f.mode
                    ),
                ));
            }
            if blake3::Hash::from_hex(&f.blake3).is_err() {
                return Err(Refusal::invalid(
                    "manifest",
                    format!("file '{}': blake3 is not 64 hex characters", f.path),
                ));
            }
            keyed.push((bytes, f));
        }
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        self.files = keyed.into_iter().map(|(_, f)| f).collect();
        Ok(())
    }

    /// The canonical bytes (files in path order, serde's field order).
    pub fn canonical(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The manifest's content address: BLAKE3 of its canonical bytes, hex.
    pub fn id(&self) -> String {
        blake3::hash(&self.canonical()).to_hex().to_string()
    }

    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Every distinct chunk with its size.
    pub fn distinct_chunks(&self) -> Vec<ChunkRef> {
        let mut seen = HashSet::new();
        self.files
            .iter()
            .flat_map(|f| f.chunks.iter())
            .filter(|c| seen.insert(c.id))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &[u8]) -> FileEntry {
        FileEntry::new(
            path,
            0,
            0o644,
            blake3::hash(b"").to_hex().to_string(),
            vec![],
        )
    }

    #[test]
    fn canonical_order_makes_ids_stable() {
        let mut a = Manifest {
            files: vec![entry(b"b"), entry(b"a/x")],
        };
        let mut b = Manifest {
            files: vec![entry(b"a/x"), entry(b"b")],
        };
        a.normalize().expect("valid");
        b.normalize().expect("valid");
        assert_eq!(a.id(), b.id());
    }

    #[test]
    fn unsafe_paths_are_refused() {
        for bad in [&b"/etc/passwd"[..], b"a/../b", b"..", b"a//b", b"", b"a\0b"] {
            let mut m = Manifest {
                files: vec![entry(bad)],
            };
            assert!(m.normalize().is_err(), "{bad:?}");
        }
        let mut dup = Manifest {
            files: vec![entry(b"x"), entry(b"x")],
        };
        assert!(dup.normalize().is_err());
    }

    #[test]
    fn non_utf8_names_survive() {
        let raw = b"caf\xe9.csv";
        let e = entry(raw);
        assert!(e.path_b64.is_some());
        assert_eq!(e.path_bytes().expect("bytes"), raw);
        let json = serde_json::to_string(&e).expect("json");
        let back: FileEntry = serde_json::from_str(&json).expect("parse");
        assert_eq!(back.path_bytes().expect("bytes"), raw);
    }

    #[test]
    fn sizes_must_add_up() {
        let mut e = entry(b"f");
        e.size = 10;
        e.chunks = vec![ChunkRef {
            id: ChunkId::of(b"x"),
            size: 9,
        }];
        assert!(Manifest { files: vec![e] }.normalize().is_err());
    }
}
