//! The first load of an uploaded ONNX graph, in a child process of its own: a graph is
//! untrusted until a runtime has loaded it, and a load can allocate what the graph
//! declares or spin for as long as the graph is long. The server starts its own binary
//! with [`ENTRY`] and the graph on stdin; the child limits itself (address space, CPU
//! seconds, no core dumps, `no_new_privs`, and a Landlock ruleset that opens no file),
//! loads the graph as serving will, and exits 0, or 2 with the runtime's refusal on
//! stderr. A child killed by its limits, or past the server's wall-clock budget, is a
//! graph that is not served; the server itself never allocated for it.

use std::io::Read;
use std::process::ExitCode;

/// The launcher's argument that runs a load check.
pub const ENTRY: &str = "__onnx-load-check";
/// Address space the child may map (the runtime's threads and allocator included).
pub const MEMORY_BYTES: u64 = 8 << 30;
/// CPU seconds the child may use.
pub const CPU_SECS: u64 = 120;
/// Exit code of a graph the runtime refused (its reason on stderr).
pub const REFUSED: u8 = 2;

/// Runs a load check when the process's arguments (after the program) ask for one;
/// call first thing in `main`.
pub fn entry(mut args: impl Iterator<Item = String>) -> Option<ExitCode> {
    if args.next()? != ENTRY {
        return None;
    }
    Some(ExitCode::from(run()))
}

fn limit(resource: rustix::process::Resource, value: u64) {
    let _ = rustix::process::setrlimit(
        resource,
        rustix::process::Rlimit {
            current: Some(value),
            maximum: Some(value),
        },
    );
}

fn run() -> u8 {
    use rustix::process::Resource;
    limit(Resource::As, MEMORY_BYTES);
    limit(Resource::Cpu, CPU_SECS);
    limit(Resource::Core, 0);
    let _ = rustix::thread::set_no_new_privs(true);
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut bytes) {
        eprintln!("reading the graph: {e}");
        return REFUSED;
    }
    // Nothing to open from here on: the graph is all the child reads.
    {
        use landlock::{Access, AccessFs, Ruleset, RulesetAttr, ABI};
        let _ = Ruleset::default()
            .handle_access(AccessFs::from_all(ABI::V5))
            .and_then(|r| r.create())
            .and_then(|r| r.restrict_self());
    }
    match super::tract::TensorModel::load(&bytes) {
        Ok(_) => 0,
        Err(e) => {
            eprint!("{e}");
            REFUSED
        }
    }
}
