//! Checkpoints: the whole state of a fit after an epoch — weights, Adam's moments and
//! step, the best epoch's weights, early stopping's counters and the metrics so far —
//! as one byte string a fit resumes from.
//!
//! Nothing random is stored: the batch order of the epochs run is replayed from the
//! seed, so a resumed CPU fit ends with the bits an uninterrupted one ends with.
//! Weights and moments are kept at full precision (burn's named MessagePack records);
//! floats of the metrics as their bits. A fingerprint of the config and the encoded
//! data refuses a checkpoint of another fit, and a checksum a damaged one.
//!
//! Layout: `QNTCKPT1`, the header's length (u32 LE) and JSON, then the model, optimizer
//! and best-model records, each as a length (u64 LE) and bytes.

use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use burn::tensor::backend::AutodiffBackend;
use qanat_model::config::TrainConfig;
use qanat_model::prep::{Encoded, Preprocessing};
use serde::{Deserialize, Serialize};

use crate::fit::EpochMetrics;
use crate::mixed::LossScale;
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"QNTCKPT1";

/// Where a fit stands: the epoch to run next and early stopping's state.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub next_epoch: u32,
    pub since_best: u32,
    pub best_epoch: Option<u32>,
    /// The best validation loss (meaningful once `best_epoch` is set).
    pub best_loss: f64,
    pub history: Vec<EpochMetrics>,
    /// fp16's loss scale after the last epoch ([`crate::mixed`]).
    pub loss_scale: Option<LossScale>,
}

#[derive(Serialize, Deserialize)]
struct SavedEpoch {
    epoch: u32,
    learning_rate: u64,
    values: Vec<(String, u64)>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    fingerprint: String,
    next_epoch: u32,
    since_best: u32,
    best_epoch: Option<u32>,
    best_loss: u64,
    history: Vec<SavedEpoch>,
    /// fp16's loss scale (its bits) and run of good steps.
    #[serde(default)]
    loss_scale: Option<(u32, u32)>,
    /// FNV-1a of everything after the header.
    checksum: String,
}

/// A decoded checkpoint.
pub struct Restored<M, O, B> {
    pub progress: Progress,
    pub model: M,
    pub optim: O,
    pub best: Option<B>,
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// What a checkpoint must match to be resumed from: the config, the preprocessing and
/// the encoded rows (a checkpoint of another job or of changed data is refused).
pub fn fingerprint(
    config: &TrainConfig,
    prep: &Preprocessing,
    train: &Encoded,
    valid: &Encoded,
) -> String {
    let mut h = FNV_START;
    fnv(
        &mut h,
        serde_json::to_string(config).unwrap_or_default().as_bytes(),
    );
    fnv(
        &mut h,
        serde_json::to_string(prep).unwrap_or_default().as_bytes(),
    );
    for data in [train, valid] {
        for v in data.x.iter().chain(&data.y).chain(&data.weight) {
            fnv(&mut h, &v.to_bits().to_le_bytes());
        }
    }
    format!("{h:016x}")
}

fn recorder() -> NamedMpkBytesRecorder<FullPrecisionSettings> {
    NamedMpkBytesRecorder::default()
}

/// Encodes the state after an epoch.
pub fn encode<B, M, O, I>(
    fingerprint: &str,
    progress: &Progress,
    model: M,
    optim: O,
    best: Option<I>,
) -> Result<Vec<u8>>
where
    B: AutodiffBackend,
    M: Record<B>,
    O: Record<B>,
    I: Record<B::InnerBackend>,
{
    let fail =
        |e: burn::record::RecorderError| Error::internal(format!("writing a checkpoint: {e}"));
    let mut body = Vec::new();
    let parts = [
        Recorder::<B>::record(&recorder(), model, ()).map_err(fail)?,
        Recorder::<B>::record(&recorder(), optim, ()).map_err(fail)?,
        match best {
            Some(b) => Recorder::<B::InnerBackend>::record(&recorder(), b, ()).map_err(fail)?,
            None => Vec::new(),
        },
    ];
    for p in &parts {
        body.extend_from_slice(&(p.len() as u64).to_le_bytes());
        body.extend_from_slice(p);
    }
    let mut sum = FNV_START;
    fnv(&mut sum, &body);
    let header = Header {
        fingerprint: fingerprint.to_string(),
        next_epoch: progress.next_epoch,
        since_best: progress.since_best,
        best_epoch: progress.best_epoch,
        best_loss: progress.best_loss.to_bits(),
        history: progress
            .history
            .iter()
            .map(|m| SavedEpoch {
                epoch: m.epoch,
                learning_rate: m.learning_rate.to_bits(),
                values: m
                    .values
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_bits()))
                    .collect(),
            })
            .collect(),
        loss_scale: progress
            .loss_scale
            .map(|s| (s.scale.to_bits(), s.good_steps)),
        checksum: format!("{sum:016x}"),
    };
    let header = serde_json::to_vec(&header)
        .map_err(|e| Error::internal(format!("writing a checkpoint: {e}")))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&body);
    Ok(out)
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if bytes.len() < n {
        return Err(Error::checkpoint("the checkpoint is cut short"));
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

/// Decodes a checkpoint written by [`encode`] for the fit with `fingerprint`.
pub fn decode<B, M, O, I>(
    bytes: &[u8],
    fingerprint: &str,
    device: &B::Device,
) -> Result<Restored<M, O, I>>
where
    B: AutodiffBackend,
    M: Record<B>,
    O: Record<B>,
    I: Record<B::InnerBackend>,
{
    let mut rest = bytes;
    if take(&mut rest, MAGIC.len())? != MAGIC {
        return Err(Error::checkpoint("not a Qanat trainer checkpoint"));
    }
    let mut len = [0u8; 4];
    len.copy_from_slice(take(&mut rest, 4)?);
    let header: Header = serde_json::from_slice(take(&mut rest, u32::from_le_bytes(len) as usize)?)
        .map_err(|e| Error::checkpoint(format!("the checkpoint's header: {e}")))?;
    if header.fingerprint != fingerprint {
        return Err(Error::checkpoint(
            "the checkpoint is of another config or other data",
        ));
    }
    let mut sum = FNV_START;
    fnv(&mut sum, rest);
    if format!("{sum:016x}") != header.checksum {
        return Err(Error::checkpoint("the checkpoint is damaged (checksum)"));
    }
    let mut part = || -> Result<Vec<u8>> {
        let mut n = [0u8; 8];
        n.copy_from_slice(take(&mut rest, 8)?);
        let n = usize::try_from(u64::from_le_bytes(n))
            .map_err(|_| Error::checkpoint("the checkpoint is damaged (length)"))?;
        Ok(take(&mut rest, n)?.to_vec())
    };
    let (m, o, b) = (part()?, part()?, part()?);
    let fail =
        |e: burn::record::RecorderError| Error::checkpoint(format!("reading a checkpoint: {e}"));
    let model = Recorder::<B>::load(&recorder(), m, device).map_err(fail)?;
    let optim = Recorder::<B>::load(&recorder(), o, device).map_err(fail)?;
    let best = if b.is_empty() {
        None
    } else {
        Some(Recorder::<B::InnerBackend>::load(&recorder(), b, device).map_err(fail)?)
    };
    let progress = Progress {
        next_epoch: header.next_epoch,
        since_best: header.since_best,
        best_epoch: header.best_epoch,
        best_loss: f64::from_bits(header.best_loss),
        history: header
            .history
            .into_iter()
            .map(|e| EpochMetrics {
                epoch: e.epoch,
                learning_rate: f64::from_bits(e.learning_rate),
                values: e
                    .values
                    .into_iter()
                    .map(|(k, v)| (k, f64::from_bits(v)))
                    .collect(),
            })
            .collect(),
        loss_scale: header.loss_scale.map(|(bits, good_steps)| LossScale {
            scale: f32::from_bits(bits),
            good_steps,
        }),
    };
    Ok(Restored {
        progress,
        model,
        optim,
        best,
    })
}
