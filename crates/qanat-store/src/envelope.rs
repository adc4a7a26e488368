//! The on-disk format of an encrypted object.
//!
//! ```text
//! header (28 bytes) = "QNAT" | version=1 | flags=0 | 0 0 | chunk_size u32 LE | key_ref [16]
//! body              = chunk_0 | chunk_1 | … | chunk_n      (chunk = AES-256-GCM(pt) ‖ tag)
//! ```
//!
//! Every chunk but the last carries exactly `chunk_size` plaintext bytes; the last carries
//! 0..=chunk_size. The nonce of chunk `i` is `i` (u64 BE) ‖ 0 0 0 ‖ last-flag, and every
//! chunk authenticates the header as associated data. So a chunk that is altered, moved,
//! dropped, or a stream cut at a chunk boundary (its new last chunk was sealed as not
//! last) fails to open; a header pointing at another key fails too. Data keys are fresh
//! per object, so the counter nonce never repeats under one key.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use crate::keyring::DataKey;

pub(crate) const HEADER_LEN: usize = 28;
pub(crate) const TAG_LEN: usize = 16;
const MAGIC: &[u8; 4] = b"QNAT";
const VERSION: u8 = 1;
/// Plaintext bytes per chunk written by this version.
pub(crate) const CHUNK_SIZE: u32 = 1 << 20;
const MIN_CHUNK: u32 = 1 << 10;
const MAX_CHUNK: u32 = 1 << 24;

#[derive(Clone, Copy)]
pub(crate) struct Header {
    pub(crate) chunk_size: u32,
    pub(crate) key_ref: [u8; 16],
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(MAGIC);
        h[4] = VERSION;
        h[8..12].copy_from_slice(&self.chunk_size.to_le_bytes());
        h[12..28].copy_from_slice(&self.key_ref);
        h
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < HEADER_LEN {
            return Err("object is shorter than its header".into());
        }
        if &bytes[..4] != MAGIC {
            return Err("not a Qanat encrypted object (bad magic)".into());
        }
        if bytes[4] != VERSION {
            return Err(format!("unsupported object format version {}", bytes[4]));
        }
        // Flags and reserved bytes are zero in this version. Checking them keeps
        // `encode(decode(h)) == h`, so the header the chunks authenticate is the one read.
        if bytes[5..8] != [0, 0, 0] {
            return Err("unknown header flags".into());
        }
        let mut cs = [0u8; 4];
        cs.copy_from_slice(&bytes[8..12]);
        let chunk_size = u32::from_le_bytes(cs);
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk_size) {
            return Err(format!("implausible chunk size {chunk_size}"));
        }
        let mut key_ref = [0u8; 16];
        key_ref.copy_from_slice(&bytes[12..28]);
        Ok(Header {
            chunk_size,
            key_ref,
        })
    }

    /// Size of one full sealed chunk.
    pub(crate) fn sealed_chunk_len(&self) -> usize {
        self.chunk_size as usize + TAG_LEN
    }
}

/// The plaintext length of an object from its stored length, without reading it.
pub(crate) fn plaintext_len(stored: u64, chunk_size: u32) -> Option<u64> {
    let body = stored.checked_sub(HEADER_LEN as u64)?;
    let sealed = chunk_size as u64 + TAG_LEN as u64;
    let chunks = body.div_ceil(sealed).max(1);
    body.checked_sub(chunks * TAG_LEN as u64)
}

fn nonce(index: u64, last: bool) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&index.to_be_bytes());
    n[11] = u8::from(last);
    n
}

/// Seals (writer side) or opens (reader side) the chunks of one object in order.
/// AES-256-GCM is ring's (assembly AES-NI/CLMUL with aggregated GHASH): the output is
/// the standard `ciphertext ‖ tag`, the same bytes any AES-GCM implementation makes.
pub(crate) struct ChunkCipher {
    key: LessSafeKey,
    header: [u8; HEADER_LEN],
    index: u64,
}

impl ChunkCipher {
    pub(crate) fn new(key: &DataKey, header: &Header) -> Result<Self, String> {
        let unbound =
            UnboundKey::new(&AES_256_GCM, &key.0).map_err(|_| "bad data key".to_string())?;
        Ok(ChunkCipher {
            key: LessSafeKey::new(unbound),
            header: header.encode(),
            index: 0,
        })
    }

    pub(crate) fn seal(&mut self, plaintext: &[u8], last: bool) -> Result<Vec<u8>, String> {
        let mut buf = Vec::with_capacity(plaintext.len() + TAG_LEN);
        self.seal_into(plaintext, last, &mut buf)?;
        Ok(buf)
    }

    /// Appends `ciphertext ‖ tag` of `plaintext` to `out` (one copy, sealed in place).
    pub(crate) fn seal_into(
        &mut self,
        plaintext: &[u8],
        last: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let n = nonce(self.index, last);
        self.index += 1;
        let start = out.len();
        out.extend_from_slice(plaintext);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(n),
                Aad::from(&self.header[..]),
                &mut out[start..],
            )
            .map_err(|_| "encryption failed".to_string())?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn open(&mut self, sealed: &[u8], last: bool) -> Result<Vec<u8>, String> {
        let mut buf = sealed.to_vec();
        let len = self.open_in_place(&mut buf, last)?;
        buf.truncate(len);
        Ok(buf)
    }

    /// Opens a sealed chunk where it lies (no copy), returning its plaintext.
    pub(crate) fn open_owned(
        &mut self,
        mut sealed: bytes::BytesMut,
        last: bool,
    ) -> Result<bytes::Bytes, String> {
        let len = self.open_in_place(&mut sealed, last)?;
        sealed.truncate(len);
        Ok(sealed.freeze())
    }

    /// Decrypts and authenticates `sealed` in place; the plaintext's length.
    fn open_in_place(&mut self, sealed: &mut [u8], last: bool) -> Result<usize, String> {
        let index = self.index;
        let n = nonce(index, last);
        self.index += 1;
        if sealed.len() < TAG_LEN {
            return Err(format!("chunk {index} is shorter than its tag"));
        }
        Ok(self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(n),
                Aad::from(&self.header[..]),
                sealed,
            )
            .map_err(|_| format!("chunk {index} failed authentication"))?
            .len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_len_inverts_the_layout() {
        let cs = MIN_CHUNK;
        for pt in [0u64, 1, 1023, 1024, 1025, 2048, 5000] {
            let chunks = pt.div_ceil(cs as u64).max(1);
            // a plaintext that is an exact multiple still ends with a full last chunk
            let stored = HEADER_LEN as u64 + pt + chunks * TAG_LEN as u64;
            assert_eq!(plaintext_len(stored, cs), Some(pt), "pt={pt}");
        }
    }

    #[test]
    fn chunks_cannot_be_reordered_or_relabelled_last() {
        let key = DataKey([7u8; 32]);
        let header = Header {
            chunk_size: MIN_CHUNK,
            key_ref: [1; 16],
        };
        let mut w = ChunkCipher::new(&key, &header).expect("key");
        let c0 = w.seal(b"first", false).expect("seal");
        let c1 = w.seal(b"second", true).expect("seal");
        let mut r = ChunkCipher::new(&key, &header).expect("key");
        assert!(r.open(&c1, false).is_err(), "chunk 1 in position 0");
        let mut r = ChunkCipher::new(&key, &header).expect("key");
        assert!(
            r.open(&c0, true).is_err(),
            "a non-last chunk presented as last"
        );
        let mut r = ChunkCipher::new(&key, &header).expect("key");
        assert_eq!(r.open(&c0, false).expect("open"), b"first");
        assert_eq!(r.open(&c1, true).expect("open"), b"second");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
        /// Sealing then opening in order gives back the plaintext; any single flipped
        /// byte anywhere in the sealed chunks makes opening fail.
        #[test]
        fn seal_open_round_trips_and_detects_any_flip(
            sizes in proptest::collection::vec(0usize..3000, 1..5),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let key = DataKey([9u8; 32]);
            let header = Header { chunk_size: MIN_CHUNK, key_ref: [3; 16] };
            let mut w = ChunkCipher::new(&key, &header).expect("key");
            let plain: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, n)| vec![i as u8; *n]).collect();
            let sealed: Vec<Vec<u8>> = plain.iter().enumerate().map(|(i, p)| w.seal(p, i + 1 == plain.len()).expect("seal")).collect();
            let mut r = ChunkCipher::new(&key, &header).expect("key");
            for (i, s) in sealed.iter().enumerate() {
                proptest::prop_assert_eq!(&r.open(s, i + 1 == sealed.len()).expect("open"), &plain[i]);
            }
            let total: usize = sealed.iter().map(Vec::len).sum();
            let mut at = flip.index(total);
            let mut tampered = sealed.clone();
            for s in tampered.iter_mut() {
                if at < s.len() { s[at] ^= 1; break; }
                at -= s.len();
            }
            let mut r = ChunkCipher::new(&key, &header).expect("key");
            let ok = tampered.iter().enumerate().all(|(i, s)| r.open(s, i + 1 == tampered.len()).is_ok());
            proptest::prop_assert!(!ok, "a flipped byte went unnoticed");
        }
    }
}
