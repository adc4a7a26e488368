//! `qanat keys`: master key status and rotation (global admins).

use anyhow::Result;
use qanat_store::wire::{KeyStatus, RotationView};

use super::Ctx;
use crate::cli::KeysCmd;
use crate::output::{self, Record};

pub async fn run(ctx: &Ctx, cmd: KeysCmd) -> Result<()> {
    match cmd {
        KeysCmd::Rotate => output::record(ctx.format, &ctx.client.rotate_keys().await?),
        KeysCmd::Status => output::record(ctx.format, &ctx.client.keys().await?),
    }
}

impl Record for KeyStatus {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("active key", self.active_key_id.clone()),
            ("keys", output::joined(&self.key_ids)),
            ("source", self.source.clone()),
        ]
    }
}

impl Record for RotationView {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("new key", self.new_key_id.clone()),
            ("retired keys", output::joined(&self.retired_key_ids)),
            ("re-wrapped data keys", self.rewrapped_data_keys.to_string()),
        ]
    }
}
