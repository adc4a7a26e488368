//! A chunk's name, the BLAKE3 hash of its plaintext, and the chunk sizes.

use std::fmt;
use std::str::FromStr;

use qanat_core::Refusal;

/// Smallest chunk FastCDC cuts (except a file's last).
pub const MIN_CHUNK: u32 = 256 << 10;

/// Target average chunk size.
pub const AVG_CHUNK: u32 = 1 << 20;

/// Largest chunk; the server refuses bigger uploads.
pub const MAX_CHUNK: u32 = 4 << 20;

/// A chunk's name: the BLAKE3 hash of its plaintext.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId(pub [u8; 32]);

impl ChunkId {
    /// The id of `data`.
    pub fn of(data: &[u8]) -> ChunkId {
        ChunkId(*blake3::hash(data).as_bytes())
    }

    pub fn to_hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({})", &self.to_hex()[..12])
    }
}

impl FromStr for ChunkId {
    type Err = Refusal;
    fn from_str(s: &str) -> Result<Self, Refusal> {
        blake3::Hash::from_hex(s)
            .map(|h| ChunkId(*h.as_bytes()))
            .map_err(|_| Refusal::invalid("chunk id", format!("'{s}' is not 64 hex characters")))
    }
}

impl serde::Serialize for ChunkId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for ChunkId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
