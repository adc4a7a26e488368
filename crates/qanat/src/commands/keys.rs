//! `qanat keys`: master key status and rotation (global admins).

use anyhow::Result;
use qanat_types::store::wire::{KeyStatus, RotationView};

use super::Ctx;
use crate::cli::KeysCmd;
use crate::output;

pub async fn run(ctx: &Ctx, cmd: KeysCmd) -> Result<()> {
    match cmd {
        KeysCmd::Rotate => output::record(ctx.format, &ctx.client.rotate_keys().await?),
        KeysCmd::Status => output::record(ctx.format, &ctx.client.keys().await?),
    }
}

output::fields!(KeyStatus, |x| {
    "active key" => x.active_key_id.clone(),
    "keys" => output::joined(&x.key_ids),
    "source" => x.source.clone(),
});

output::fields!(RotationView, |x| {
    "new key" => x.new_key_id.clone(),
    "retired keys" => output::joined(&x.retired_key_ids),
    "re-wrapped data keys" => x.rewrapped_data_keys.to_string(),
});
