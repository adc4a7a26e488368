//! A 1 GiB object streams through the encrypted storage layer in bounded memory.
//! (Alone in its own test binary so the process's peak RSS measures only this.)

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::StreamExt;
use qanat_store::testing::TestDb;
use qanat_store::ObjectKey;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};

const TOTAL: u64 = 1 << 30;

/// Generates `TOTAL` bytes without holding them: a 64 KiB block stamped with its offset.
struct Generator {
    produced: u64,
    block: Vec<u8>,
    hasher: Sha256,
}

impl AsyncRead for Generator {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.produced >= TOTAL {
            return Poll::Ready(Ok(()));
        }
        let n = (TOTAL - this.produced)
            .min(this.block.len() as u64)
            .min(buf.remaining() as u64) as usize;
        this.block[..8].copy_from_slice(&this.produced.to_le_bytes());
        buf.put_slice(&this.block[..n]);
        this.hasher.update(&this.block[..n]);
        this.produced += n as u64;
        Poll::Ready(Ok(()))
    }
}

fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gib_object_round_trips_in_bounded_memory() {
    let db = TestDb::sqlite(&[&qanat_governance::MIGRATIONS]).await;
    let (storage, _dir) = qanat_store::testing::local_storage(&db).await;
    let key: ObjectKey = "big/one-gib.bin".parse().expect("key");

    let mut block = vec![0u8; 64 << 10];
    for (i, b) in block.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2654435761) >> 7) as u8;
    }
    let mut gen = Generator {
        produced: 0,
        block,
        hasher: Sha256::new(),
    };
    let written = storage
        .put_reader("local", &key, &mut gen)
        .await
        .expect("put");
    assert_eq!(written, TOTAL);
    let want = gen.hasher.finalize();

    let mut stream = storage.get("local", &key).await.expect("get");
    let mut hasher = Sha256::new();
    let mut read = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("verified chunk");
        read += chunk.len() as u64;
        hasher.update(&chunk);
    }
    assert_eq!(read, TOTAL);
    assert_eq!(hasher.finalize(), want, "1 GiB decrypts back byte for byte");

    let peak = peak_rss_mib();
    eprintln!("peak RSS while writing and reading 1 GiB: {peak:?} MiB");
    if let Some(peak) = peak {
        assert!(peak < 256, "peak RSS {peak} MiB: memory is not bounded");
    }
}
