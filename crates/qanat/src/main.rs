//! `qanat`: the Qanat binary. One process serves the platform (`qanat server`); the same
//! binary is the command-line client for it.

mod cli;
mod client;
mod commands;
mod config;
mod output;
mod server;

use std::process::ExitCode;

use clap::Parser;

use cli::Cli;

/// mimalloc instead of the C library's allocator: request handling allocates and frees
/// many small buffers (JSON values, bind arguments), where glibc's malloc spent ~18% of
/// a 1000-metric log-batch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
