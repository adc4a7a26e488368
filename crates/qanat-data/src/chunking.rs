//! Content-defined chunking (FastCDC 2020) and BLAKE3 chunk ids.

use std::io::Read;

use bytes::Bytes;

pub use qanat_types::data::{ChunkId, AVG_CHUNK, MAX_CHUNK, MIN_CHUNK};

/// One cut of a file.
pub struct Chunk {
    pub id: ChunkId,
    /// A view into the reader's buffer (no copy).
    pub data: Bytes,
}

/// Bytes read from the source at a time. Chunks are views into this buffer; only the
/// tail after the last certain cut is copied into the next one.
const READ_BUF: usize = 16 << 20;

/// Cuts `reader` into content-defined chunks and names them. Memory is bounded: one
/// 16 MiB buffer, plus earlier buffers only while their chunks are still held.
///
/// The cuts are exactly those of FastCDC 2020 over the whole stream: a cut is taken
/// only where at least [`MAX_CHUNK`] bytes follow the chunk's start (or the stream has
/// ended), so it cannot depend on where a read stopped.
pub fn chunks<R: Read>(reader: R) -> Chunks<R> {
    Chunks {
        reader,
        buf: Bytes::new(),
        pos: 0,
        eof: false,
    }
}

/// The iterator [`chunks`] returns.
pub struct Chunks<R> {
    reader: R,
    buf: Bytes,
    pos: usize,
    eof: bool,
}

impl<R: Read> Chunks<R> {
    /// Moves the uncut tail into a fresh buffer and reads until it is full or the
    /// source ends.
    fn refill(&mut self) -> std::io::Result<()> {
        let mut next = Vec::with_capacity(READ_BUF);
        next.extend_from_slice(&self.buf[self.pos..]);
        while next.len() < READ_BUF {
            let want = (READ_BUF - next.len()) as u64;
            match (&mut self.reader).take(want).read_to_end(&mut next) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.buf = Bytes::from(next);
        self.pos = 0;
        Ok(())
    }
}

impl<R: Read> Iterator for Chunks<R> {
    type Item = std::io::Result<Chunk>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let remaining = self.buf.len() - self.pos;
            if remaining >= MAX_CHUNK as usize || (self.eof && remaining > 0) {
                let cdc = fastcdc::v2020::FastCDC::new(&self.buf, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK);
                let (_, end) = cdc.cut(self.pos, remaining);
                let data = self.buf.slice(self.pos..end);
                self.pos = end;
                return Some(Ok(Chunk {
                    id: ChunkId::of(&data),
                    data,
                }));
            }
            if self.eof {
                return None;
            }
            if let Err(e) = self.refill() {
                // Stop after an error: nothing more can be read reliably.
                self.eof = true;
                self.buf = Bytes::new();
                self.pos = 0;
                return Some(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qanat_store::testing::noise as data;

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

    /// The buffered cutter makes exactly the cuts of fastcdc's own streaming cutter,
    /// whatever sizes the reads return (so stored chunks stay shared across versions).
    #[test]
    fn cuts_match_fastcdc_streaming_whatever_the_reads() {
        struct Dribble<'a>(&'a [u8], usize);
        impl Read for Dribble<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = out.len().min(self.0.len()).min(self.1);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                self.1 = self.1 * 7 % 1_000_003 + 1;
                Ok(n)
            }
        }
        let d = data(40 << 20, 11);
        let reference: Vec<(usize, usize)> =
            fastcdc::v2020::StreamCDC::new(&d[..], MIN_CHUNK, AVG_CHUNK, MAX_CHUNK)
                .map(|c| c.expect("cdc"))
                .map(|c| (c.offset as usize, c.length))
                .collect();
        let mut at = 0;
        let ours: Vec<(usize, usize)> = chunks(Dribble(&d, 4099))
            .map(|c| {
                let c = c.expect("chunk");
                let r = (at, c.data.len());
                assert_eq!(&d[at..at + c.data.len()], &c.data[..]);
                at += c.data.len();
                r
            })
            .collect();
        assert_eq!(ours, reference);
    }

    #[test]
    fn a_read_error_is_reported_once() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let mut it = chunks(Broken);
        assert!(it.next().expect("an item").is_err());
        assert!(it.next().is_none());
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
