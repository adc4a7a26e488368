//! `qanat config show`.

use anyhow::Result;

use crate::cli::{ConfigCmd, Format};
use crate::config::Config;
use crate::output;

pub fn run(cfg: &Config, format: Format, cmd: ConfigCmd) -> Result<()> {
    match cmd {
        ConfigCmd::Show => {
            let text = cfg.redacted_toml()?;
            if format == Format::Json {
                // The redacted TOML, not the config itself: JSON shows what the TOML shows.
                let shown: toml::Value = toml::from_str(&text)?;
                output::json(&shown)
            } else {
                print!("{text}");
                Ok(())
            }
        }
    }
}
