//! A version's file read back from its chunks, sequentially or at random offsets, for
//! code that wants `Read` or Parquet's `ChunkReader` (the tabular profiler). Each chunk
//! is decrypted and checked against its BLAKE3 id; the last one read is kept.

use std::io::Read;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use qanat_store::ObjectStorage;

use crate::store::chunk_key;
use crate::{ChunkId, FileEntry};

pub(crate) struct StoredFile {
    storage: ObjectStorage,
    location: String,
    project_id: qanat_core::ProjectId,
    /// (start offset, id, size) of each chunk.
    chunks: Vec<(u64, ChunkId, u64)>,
    size: u64,
    rt: tokio::runtime::Handle,
    last: Mutex<Option<(usize, Bytes)>>,
}

/// A cheap, shareable handle (Parquet wants `Send + Sync + 'static`).
#[derive(Clone)]
pub(crate) struct StoredFileHandle(Arc<StoredFile>);

impl StoredFileHandle {
    /// Must be used from a blocking thread (it blocks on `rt` to fetch chunks).
    pub(crate) fn new(
        storage: ObjectStorage,
        location: &str,
        project_id: &qanat_core::ProjectId,
        entry: &FileEntry,
        rt: tokio::runtime::Handle,
    ) -> Self {
        let mut offset = 0;
        let chunks = entry
            .chunks
            .iter()
            .map(|c| {
                let start = offset;
                offset += c.size;
                (start, c.id, c.size)
            })
            .collect();
        StoredFileHandle(Arc::new(StoredFile {
            storage,
            location: location.to_string(),
            project_id: project_id.clone(),
            chunks,
            size: entry.size,
            rt,
            last: Mutex::new(None),
        }))
    }

    fn chunk(&self, i: usize) -> std::io::Result<Bytes> {
        let f = &self.0;
        if let Some((j, b)) = f.last.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            if *j == i {
                return Ok(b.clone());
            }
        }
        let (_, id, size) = f.chunks[i];
        let key = chunk_key(&f.project_id, &id).map_err(std::io::Error::other)?;
        let data =
            f.rt.block_on(f.storage.get_bytes(&f.location, &key))
                .map_err(std::io::Error::other)?;
        if data.len() as u64 != size || ChunkId::of(&data) != id {
            return Err(std::io::Error::other(format!(
                "chunk {id} does not match its address"
            )));
        }
        *f.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((i, data.clone()));
        Ok(data)
    }

    /// Reads up to `buf.len()` bytes at `pos`.
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if pos >= self.0.size || buf.is_empty() {
            return Ok(0);
        }
        let i = match self
            .0
            .chunks
            .binary_search_by(|(start, _, _)| start.cmp(&pos))
        {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let data = self.chunk(i)?;
        let within = (pos - self.0.chunks[i].0) as usize;
        let n = (data.len() - within).min(buf.len());
        buf[..n].copy_from_slice(&data[within..within + n]);
        Ok(n)
    }

    /// A reader from the start.
    pub(crate) fn reader(&self) -> StoredFileReader {
        StoredFileReader {
            file: self.clone(),
            pos: 0,
        }
    }
}

pub(crate) struct StoredFileReader {
    file: StoredFileHandle,
    pos: u64,
}

impl Read for StoredFileReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(self.pos, buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl parquet::file::reader::Length for StoredFileHandle {
    fn len(&self) -> u64 {
        self.0.size
    }
}

impl parquet::file::reader::ChunkReader for StoredFileHandle {
    type T = StoredFileReader;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(StoredFileReader {
            file: self.clone(),
            pos: start,
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let mut out = vec![0u8; length];
        let mut done = 0;
        while done < length {
            let n = self
                .read_at(start + done as u64, &mut out[done..])
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))?;
            if n == 0 {
                return Err(parquet::errors::ParquetError::EOF(format!(
                    "wanted {length} bytes at {start}, file is {} bytes",
                    self.0.size
                )));
            }
            done += n;
        }
        Ok(out.into())
    }
}
