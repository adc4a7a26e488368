//! Chunk packs: several chunks uploaded in one request body.
//!
//! A pack is a sequence of frames, each the chunk's 32-byte BLAKE3 id, its length as a
//! big-endian u32, then its bytes. The server checks every frame (bounds, hash) before
//! it stores anything.

use bytes::Bytes;

use qanat_core::Refusal;

use super::{ChunkId, MAX_CHUNK};

/// The most chunks one pack may carry.
pub const MAX_PACK_CHUNKS: usize = 64;
/// The largest pack body: [`MAX_PACK_CHUNKS`] frame headers plus 64 MiB of chunk bytes.
pub const MAX_PACK_BYTES: usize = (64 << 20) + MAX_PACK_CHUNKS * FRAME_HEADER;
/// Bytes before each chunk: its id and its length.
pub const FRAME_HEADER: usize = 36;

/// The header of one frame (the chunk's bytes follow it).
pub fn frame_header(id: &ChunkId, len: usize) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    h[..32].copy_from_slice(&id.0);
    h[32..].copy_from_slice(&(len as u32).to_be_bytes());
    h
}

/// Splits a pack into its chunks (slices of `body`, no copies). Hashes are checked
/// where the chunks are stored.
pub fn parse(body: Bytes) -> Result<Vec<(ChunkId, Bytes)>, Refusal> {
    let bad = |why: String| Refusal::invalid("chunk pack", why);
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        if out.len() == MAX_PACK_CHUNKS {
            return Err(bad(format!(
                "a pack carries at most {MAX_PACK_CHUNKS} chunks"
            )));
        }
        let Some(header) = body.get(at..at + FRAME_HEADER) else {
            return Err(bad(format!(
                "frame {} at byte {at} is cut short (a frame starts with a 32-byte id and a 4-byte length)",
                out.len()
            )));
        };
        let mut id = [0u8; 32];
        id.copy_from_slice(&header[..32]);
        let len = u32::from_be_bytes([header[32], header[33], header[34], header[35]]) as usize;
        if len == 0 || len > MAX_CHUNK as usize {
            return Err(bad(format!(
                "frame {} says {len} bytes; a chunk is 1..={MAX_CHUNK} bytes",
                out.len()
            )));
        }
        let start = at + FRAME_HEADER;
        if body.len() - start < len {
            return Err(bad(format!(
                "frame {} says {len} bytes but only {} follow",
                out.len(),
                body.len() - start
            )));
        }
        out.push((ChunkId(id), body.slice(start..start + len)));
        at = start + len;
    }
    if out.is_empty() {
        return Err(bad("the pack is empty".to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(chunks: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for c in chunks {
            b.extend_from_slice(&frame_header(&ChunkId::of(c), c.len()));
            b.extend_from_slice(c);
        }
        b
    }

    #[test]
    fn round_trips() {
        let body = pack(&[b"one", b"second chunk", b"3"]);
        let got = parse(Bytes::from(body)).expect("parse");
        assert_eq!(got.len(), 3);
        assert_eq!(&got[1].1[..], b"second chunk");
        assert_eq!(got[1].0, ChunkId::of(b"second chunk"));
    }

    #[test]
    fn refuses_broken_packs() {
        let good = pack(&[b"abc", b"defg"]);
        for cut in [1, 20, 38, good.len() - 1] {
            let err = parse(Bytes::copy_from_slice(&good[..cut])).expect_err("cut");
            assert!(err.to_string().contains("frame"), "{err}");
        }
        assert!(parse(Bytes::new()).is_err());
        let mut zero = pack(&[b"x"]);
        zero[32..36].copy_from_slice(&0u32.to_be_bytes());
        assert!(parse(Bytes::from(zero)).is_err());
        let mut huge = pack(&[b"x"]);
        huge[32..36].copy_from_slice(&(MAX_CHUNK + 1).to_be_bytes());
        assert!(parse(Bytes::from(huge)).is_err());
        let many: Vec<&[u8]> = vec![b"x"; MAX_PACK_CHUNKS + 1];
        assert!(parse(Bytes::from(pack(&many))).is_err());
    }
}
