//! Content-defined chunking (FastCDC 2020) and BLAKE3 chunk ids.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use crate::Error;

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
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        blake3::Hash::from_hex(s)
            .map(|h| ChunkId(*h.as_bytes()))
            .map_err(|_| Error::invalid("chunk id", format!("'{s}' is not 64 hex characters")))
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

/// One cut of a file.
pub struct Chunk {
    pub id: ChunkId,
    pub data: Vec<u8>,
}

/// Cuts `reader` into content-defined chunks, reading at most one maximum-size chunk
/// ahead (memory is bounded by [`MAX_CHUNK`]).
pub fn chunks<R: Read>(reader: R) -> impl Iterator<Item = std::io::Result<Chunk>> {
    fastcdc::v2020::StreamCDC::new(reader, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK).map(|r| {
        r.map(|c| Chunk {
            id: ChunkId::of(&c.data),
            data: c.data,
        })
        .map_err(|e| match e {
            fastcdc::v2020::Error::IoError(io) => io,
            other => std::io::Error::other(other.to_string()),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn chunks_reassemble_and_respect_bounds() {
        let d = data(9 << 20, 3);
        let cs: Vec<Chunk> = chunks(&d[..]).collect::<Result<_, _>>().expect("chunk");
        assert!(cs.len() > 2);
        let joined: Vec<u8> = cs.iter().flat_map(|c| c.data.iter().copied()).collect();
        assert!(joined == d);
        for (i, c) in cs.iter().enumerate() {
            assert!(c.data.len() <= MAX_CHUNK as usize);
            if i + 1 < cs.len() {
                assert!(c.data.len() >= MIN_CHUNK as usize);
            }
            assert_eq!(c.id, ChunkId::of(&c.data));
        }
    }

    #[test]
    fn an_append_keeps_earlier_chunks() {
        let base = data(8 << 20, 5);
        let mut appended = base.clone();
        appended.extend(data(100_000, 6));
        let a: Vec<ChunkId> = chunks(&base[..]).map(|c| c.expect("c").id).collect();
        let b: Vec<ChunkId> = chunks(&appended[..]).map(|c| c.expect("c").id).collect();
        let shared = a.iter().filter(|id| b.contains(id)).count();
        assert!(
            shared + 1 >= a.len(),
            "all but the last chunk survive an append"
        );
    }

    #[test]
    fn empty_input_has_no_chunks() {
        assert_eq!(chunks(&b""[..]).count(), 0);
    }

    #[test]
    fn chunk_ids_parse_back() {
        let id = ChunkId::of(b"x");
        assert_eq!(id.to_hex().parse::<ChunkId>().expect("parse"), id);
        assert!("zz".parse::<ChunkId>().is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, ..Default::default() })]
        /// Against the obvious reference (the input itself): chunks concatenate back to
        /// the input, respect the size bounds, and their ids are the hashes of their bytes.
        #[test]
        fn chunking_is_a_lossless_bounded_partition(len in 0usize..(6 << 20), seed in proptest::prelude::any::<u64>()) {
            let d = data(len, seed);
            let cs: Vec<Chunk> = chunks(&d[..]).collect::<Result<_, _>>().expect("chunk");
            let mut joined = Vec::with_capacity(len);
            for (i, c) in cs.iter().enumerate() {
                proptest::prop_assert!(c.data.len() <= MAX_CHUNK as usize);
                proptest::prop_assert!(i + 1 == cs.len() || c.data.len() >= MIN_CHUNK as usize);
                proptest::prop_assert_eq!(c.id, ChunkId::of(&c.data));
                joined.extend_from_slice(&c.data);
            }
            proptest::prop_assert!(joined == d);
        }
    }
}
