//! `qanat`: the Qanat binary. One process serves the platform (`qanat server`); the same
//! binary is the command-line client for it.
//!
//! - `cli/`: the clap definitions, one file per command group;
//! - `commands/`: the code that runs each command (clients of `qanat-client`, or local
//!   work on the data directory);
//! - `output.rs`: tables and JSON; `credentials.rs`: the stored login;
//! - `config.rs` and `server.rs`: configuration, and `qanat server` and `qanat serve`
//!   on the services the library's `wiring` builds (with the job kinds this binary
//!   runs as workers, `kinds`).

mod audit_sink;
mod cli;
mod commands;
mod config;
mod connections;
mod credentials;
mod output;
mod python_workers;
mod server;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of the C library's allocator: request handling allocates and frees
/// many small buffers (JSON values, bind arguments), where glibc's malloc spent ~18% of
/// a 1000-metric log-batch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A local job's rank: its sandbox is built here, before any thread starts.
    if let Some(code) = qanat_jobs::sandbox::entry(std::env::args().skip(1)) {
        return code;
    }
    // An uploaded ONNX graph's first load, in a child of the server.
    if let Some(code) = qanat_runtime::onnx::load_check::entry(std::env::args().skip(1)) {
        return code;
    }
    let cli = cli::Cli::parse();
    let json = cli.output == cli::Format::Json;
    output::set_wide(cli.output == cli::Format::Wide);
    quiet_broken_pipe();
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
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(commands::run(cli))
    }));
    match ran {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            report(&e, json);
            ExitCode::FAILURE
        }
        // The reader of stdout left (`qanat runs ls | head`): it has what it wanted.
        Err(payload) if broken_pipe(payload.as_ref()) => ExitCode::SUCCESS,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}

/// Whether a panic is `println!`'s on a closed stdout.
fn broken_pipe(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    // std's words: "failed printing to stdout: Broken pipe (os error 32)" (EPIPE).
    message.starts_with("failed printing to stdout") && message.ends_with("(os error 32)")
}

/// Rust ignores SIGPIPE, so printing to a pipe whose reader left panics; such a panic
/// ends the command quietly instead of with a panic message (`main` exits 0).
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !broken_pipe(info.payload()) {
            default(info);
        }
    }));
}

/// Prints a failed command's error on stderr: a line for people, or with `-o json` an
/// object with the server's `error_code` (`CLIENT_ERROR` for a failure on this side).
fn report(e: &anyhow::Error, json: bool) {
    if !json {
        eprintln!("error: {e:#}");
        return;
    }
    let api = e
        .chain()
        .find_map(|c| c.downcast_ref::<qanat_client::Error>());
    let (code, message) = match api {
        Some(qanat_client::Error::Api { code, message, .. }) => (code.clone(), message.clone()),
        _ => ("CLIENT_ERROR".to_string(), format!("{e:#}")),
    };
    eprintln!(
        "{}",
        serde_json::json!({ "error_code": code, "message": message })
    );
}
