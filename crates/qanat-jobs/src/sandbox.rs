//! The sandbox every local rank runs in: a job's code is untrusted, and must not reach
//! the server's keys, files or process.
//!
//! A rank is not started by the server directly. The server starts its own binary
//! (the *launcher*, `qanat`) with [`RANK_ENTRY`] and a [`Plan`]; that process (the
//! *warden*, the pid the server records, places in a cgroup and signals) waits at the
//! gang's barrier, then:
//!
//! 1. unshares a mount, a pid and an IPC namespace — and, when the server is not root, a
//!    user namespace that maps the server's uid to root inside, with every capability
//!    dropped before the job's code runs;
//! 2. covers the server's data directory, the jobs' directory and the server user's
//!    home with empty read-only tmpfs mounts, gives the rank a private `/tmp` and
//!    `/dev/shm`, and binds back only what the rank may use: its own `work`,
//!    `checkpoints` and `home` (writable), its `inputs` and the admin's extra paths
//!    (read-only), the admin's writable paths;
//! 3. starts itself again with [`INIT_ENTRY`] as the first process of the new pid
//!    namespace (the *init*): it mounts a `/proc` that shows only the rank's own
//!    processes, switches to the rank's identity (a dedicated uid from the configured
//!    range when the server is root), empties the capability bounding set, sets
//!    `no_new_privs`, applies a Landlock ruleset (writes only where the rank may write;
//!    no signals or abstract sockets out of the sandbox), and starts the program.
//!
//! Invariants: the server's pid does not exist inside (so it cannot be signalled or
//! traced); no process of the rank outlives its init (the kernel kills a pid
//! namespace's processes when its first process ends, so a `setsid` child cannot
//! escape); a SIGKILL to the warden's process group ends the init through its parent
//! death signal. The warden blocks SIGTERM so the program gets its grace period (the
//! init unblocks it again for the program), and exits the way the program did.
//!
//! Where none of this is possible (no root and no user namespaces), [`probe`] says why
//! and local jobs are refused, unless an admin opts out (`jobs.sandbox.enabled =
//! false`), which `jobs show` and `qanat gpus` then report as `unsandboxed`.

use std::io::BufRead;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

/// The launcher's argument that starts a rank's warden.
pub const RANK_ENTRY: &str = "__sandbox-rank";
/// The launcher's argument that starts a rank's init (started by the warden).
pub const INIT_ENTRY: &str = "__sandbox-init";

/// Exit code of a warden whose barrier closed before it opened (the server died).
const BARRIER_CLOSED: u8 = 97;
/// Exit code when the sandbox could not be set up.
const SETUP_FAILED: u8 = 125;
/// Exit code when the program could not be started in the sandbox.
const NOT_STARTED: u8 = 127;

/// Who the rank is inside its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Identity {
    /// The server is root: the rank runs as this unprivileged uid and gid.
    User { uid: u32, gid: u32 },
    /// The server is not root: a user namespace maps the server's uid (and gid) to
    /// root inside, with no capabilities left once the program runs.
    Namespace { outer_uid: u32, outer_gid: u32 },
}

/// A path bound into the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exposed {
    pub path: PathBuf,
    pub writable: bool,
}

/// Everything a warden needs to build one rank's sandbox and start its program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub identity: Identity,
    /// Covered with an empty read-only tmpfs.
    pub hide: Vec<PathBuf>,
    /// Given a fresh writable tmpfs of `private_mb` MiB (`/tmp`, `/dev/shm`).
    pub private: Vec<PathBuf>,
    pub private_mb: u64,
    /// Bound back in after hiding, at the same paths.
    pub expose: Vec<Exposed>,
    /// The launcher's own path: a program at this path is started as the init's own
    /// executable (the path itself may not be reachable inside).
    pub launcher: PathBuf,
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// The job's variables the dynamic loader or the C library would act on
    /// ([`loader_variable`]): kept out of the warden's and the init's environment
    /// (they start as root) and given to the program alone.
    #[serde(default)]
    pub loader_env: Vec<(String, String)>,
    /// The program reads the warden's stdin after the barrier line (a serving
    /// worker's requests); else its stdin is empty.
    #[serde(default)]
    pub keep_stdin: bool,
    /// A network namespace of its own, with nothing in it: no address outside the
    /// sandbox can be reached (a serving worker needs none).
    #[serde(default)]
    pub no_network: bool,
}

/// Whether the dynamic loader or the C library acts on variable `name` before a
/// program's `main` (glibc's list for secure-execution mode, and mimalloc's options):
/// a job's value of one must never reach a process that starts with privileges.
pub fn loader_variable(name: &str) -> bool {
    name.starts_with("LD_")
        || name.starts_with("MALLOC_")
        || name.starts_with("MIMALLOC_")
        || matches!(
            name,
            "GCONV_PATH"
                | "GETCONF_DIR"
                | "GLIBC_TUNABLES"
                | "HOSTALIASES"
                | "LOCALDOMAIN"
                | "LOCPATH"
                | "NIS_PATH"
                | "NLSPATH"
                | "RESOLV_HOST_CONF"
                | "RES_OPTIONS"
                | "TZDIR"
        )
}

impl Plan {
    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    fn from_arg(arg: Option<String>) -> Result<Plan, String> {
        let arg = arg.ok_or("the sandbox plan is missing")?;
        serde_json::from_str(&arg).map_err(|e| format!("the sandbox plan is not valid: {e}"))
    }
}

/// The entry points of the launcher: call first thing in `main`, before any thread
/// starts (namespaces can only be entered by a single-threaded process). None when
/// `args` (the process's arguments after the program) start no sandbox stage.
pub fn entry(mut args: impl Iterator<Item = String>) -> Option<ExitCode> {
    let first = args.next()?;
    let code = match first.as_str() {
        RANK_ENTRY => warden(Plan::from_arg(args.next())),
        INIT_ENTRY => init(Plan::from_arg(args.next())),
        _ => return None,
    };
    Some(ExitCode::from(code))
}

fn fail(stage: &str, e: impl std::fmt::Display) -> u8 {
    eprintln!("qanat sandbox: {stage}: {e}");
    SETUP_FAILED
}

/// The warden: the barrier, the namespaces and the mounts, then the init, waited for.
fn warden(plan: Result<Plan, String>) -> u8 {
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return fail("starting", e),
    };
    // The gang's barrier: a line from the server once every rank is placed.
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(n) if n > 0 => {}
        _ => return BARRIER_CLOSED,
    }
    // The server's umask (077) would make the room made for exposed paths unreadable
    // to the rank's uid; the program gets the server's back (its files stay private).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    // SIGTERM (and its kin) are for the program: the warden stays until it ends.
    let stop = stop_signals();
    if let Err(e) =
        nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&stop), None)
    {
        return fail("blocking signals", e);
    }
    if let Err(e) = enter_namespaces(&plan) {
        return fail("entering namespaces", e);
    }
    if let Err(e) = build_view(&plan) {
        return fail("building the file system view", e);
    }
    let mut init = std::process::Command::new("/proc/self/exe");
    init.arg(INIT_ENTRY)
        .arg(plan.to_arg())
        .stdin(stdin_of(&plan));
    let status = match init.status() {
        Ok(s) => s,
        Err(e) => return fail("starting the rank's init", e),
    };
    ended_as(status, &stop)
}

/// The program's stdin: the warden's own (past the barrier line) when the plan keeps
/// it, else empty.
fn stdin_of(plan: &Plan) -> std::process::Stdio {
    if plan.keep_stdin {
        std::process::Stdio::inherit()
    } else {
        std::process::Stdio::null()
    }
}

fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(s);
    }
    set
}

/// Ends the warden the way the init ended: its code, or its signal raised again (the
/// init, the first process of its namespace, reports a signal as 128 + number).
fn ended_as(status: std::process::ExitStatus, stop: &nix::sys::signal::SigSet) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    let signal = status.signal().or_else(|| {
        status
            .code()
            .filter(|c| (129..160).contains(c))
            .map(|c| c - 128)
    });
    if let Some(s) = signal.and_then(|s| nix::sys::signal::Signal::try_from(s).ok()) {
        let _ = nix::sys::signal::sigprocmask(
            nix::sys::signal::SigmaskHow::SIG_UNBLOCK,
            Some(stop),
            None,
        );
        let _ = nix::sys::signal::raise(s);
        return 128u8.saturating_add(s as u8);
    }
    status
        .code()
        .map_or(SETUP_FAILED, |c| c.clamp(0, 255) as u8)
}

fn enter_namespaces(plan: &Plan) -> Result<(), String> {
    use nix::sched::CloneFlags;
    let mut base = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC;
    if plan.no_network {
        base |= CloneFlags::CLONE_NEWNET;
    }
    match plan.identity {
        Identity::User { .. } => nix::sched::unshare(base).map_err(|e| e.to_string()),
        Identity::Namespace {
            outer_uid,
            outer_gid,
        } => {
            nix::sched::unshare(base | CloneFlags::CLONE_NEWUSER).map_err(|e| {
                format!("{e} (user namespaces are needed when the server is not root)")
            })?;
            let write = |file: &str, text: String| {
                std::fs::write(format!("/proc/self/{file}"), text)
                    .map_err(|e| format!("writing /proc/self/{file}: {e}"))
            };
            write("setgroups", "deny".into())?;
            write("uid_map", format!("0 {outer_uid} 1"))?;
            write("gid_map", format!("0 {outer_gid} 1"))
        }
    }
}

/// The rank's view of the file system (in its own mount namespace): hidden paths
/// covered, private ones fresh, exposed ones bound back.
fn build_view(plan: &Plan) -> Result<(), String> {
    use rustix::mount::{
        mount, mount_bind, mount_change, mount_remount, MountFlags, MountPropagationFlags,
    };
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| format!("making mounts private: {e}"))?;
    // What is exposed is opened before anything is covered: the bind's source is
    // the descriptor, not a path that no longer leads there.
    let mut exposed: Vec<(&Exposed, OwnedFd, bool)> = Vec::new();
    for e in &plan.expose {
        match rustix::fs::open(
            &e.path,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(fd) => {
                let dir = rustix::fs::fstat(&fd)
                    .map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_dir())
                    .unwrap_or(false);
                exposed.push((e, fd, dir));
            }
            Err(err) => eprintln!(
                "qanat sandbox: {} is not there ({err}); the job runs without it",
                e.path.display()
            ),
        }
    }
    let flags = MountFlags::NOSUID | MountFlags::NODEV;
    for p in &plan.private {
        if p.is_dir() {
            let data =
                std::ffi::CString::new(format!("mode=1777,size={}m", plan.private_mb.max(1)))
                    .map_err(|e| e.to_string())?;
            mount("tmpfs", p, "tmpfs", flags, data.as_c_str())
                .map_err(|e| format!("a private {}: {e}", p.display()))?;
        }
    }
    let mut hidden: Vec<&PathBuf> = plan.hide.iter().collect();
    hidden.sort_by_key(|p| p.components().count());
    for p in &hidden {
        cover(p, flags)?;
    }
    for (e, fd, dir) in &exposed {
        let target = &e.path;
        if *dir {
            std::fs::create_dir_all(target)
                .map_err(|err| format!("making room for {}: {err}", target.display()))?;
        } else if !target.exists() {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|err| format!("making room for {}: {err}", target.display()))?;
            }
            std::fs::write(target, b"")
                .map_err(|err| format!("making room for {}: {err}", target.display()))?;
        }
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount_bind(&source, target)
            .map_err(|err| format!("binding {}: {err}", target.display()))?;
        let mut f = flags | MountFlags::BIND | kept_flags(target);
        if !e.writable {
            f |= MountFlags::RDONLY;
        }
        mount_remount(target, f, c"")
            .map_err(|err| format!("limiting {}: {err}", target.display()))?;
    }
    // A bind is not recursive: a hidden path inside an exposed one (an admin's path
    // above the data directory) is covered again, inside the bind.
    for p in &hidden {
        if plan
            .expose
            .iter()
            .any(|e| p.starts_with(&e.path) && **p != e.path)
        {
            cover(p, flags)?;
        }
    }
    // The hidden covers are made read-only last: the exposed paths needed room in them.
    for p in &plan.hide {
        if p.is_dir() {
            let _ = mount_remount(p, flags | MountFlags::RDONLY, c"");
        }
    }
    Ok(())
}

/// Covers `p`: a directory with an empty tmpfs, a file with `/dev/null`. A path that
/// is not there (or is already inside a cover) needs nothing.
fn cover(p: &Path, flags: rustix::mount::MountFlags) -> Result<(), String> {
    use rustix::mount::{mount, mount_bind};
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return Ok(());
    };
    if meta.is_dir() {
        mount("qanat-hidden", p, "tmpfs", flags, c"mode=0755,size=1m")
            .map_err(|e| format!("hiding {}: {e}", p.display()))
    } else {
        mount_bind("/dev/null", p).map_err(|e| format!("hiding {}: {e}", p.display()))
    }
}

/// The flags of the mount `path` is on that a remount must keep (in a user namespace
/// the kernel refuses to drop flags the parent namespace set).
fn kept_flags(path: &Path) -> rustix::mount::MountFlags {
    use rustix::fs::StatVfsMountFlags as S;
    use rustix::mount::MountFlags as M;
    let Ok(st) = rustix::fs::statvfs(path) else {
        return M::empty();
    };
    let mut f = M::empty();
    for (has, keep) in [
        (S::NOEXEC, M::NOEXEC),
        (S::NOATIME, M::NOATIME),
        (S::NODIRATIME, M::NODIRATIME),
        (S::RDONLY, M::RDONLY),
    ] {
        if st.f_flag.contains(has) {
            f |= keep;
        }
    }
    f
}

/// The init: the first process of the rank's pid namespace.
fn init(plan: Result<Plan, String>) -> u8 {
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return fail("starting", e),
    };
    use rustix::mount::{mount, MountFlags};
    if let Err(e) = mount(
        "proc",
        "/proc",
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        c"",
    ) {
        return fail("mounting the rank's /proc", e);
    }
    // POSIX message queues of the rank's own IPC namespace, not the host's.
    if Path::new("/dev/mqueue").is_dir() {
        let _ = mount(
            "mqueue",
            "/dev/mqueue",
            "mqueue",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"",
        );
    }
    if let Err(e) = drop_privileges(plan.identity) {
        return fail("dropping privileges", e);
    }
    // A working directory inside the job's own is made here, as the rank: whatever
    // the job left in its directory can only lead where the rank may go anyway.
    if !plan.cwd.is_dir() {
        if let Err(e) = std::fs::create_dir_all(&plan.cwd) {
            eprintln!(
                "qanat sandbox: making the working directory {}: {e}",
                plan.cwd.display()
            );
            return NOT_STARTED;
        }
    }
    if let Err(e) = landlock(&plan) {
        return fail("applying the Landlock ruleset", e);
    }
    // The warden gone (killed with its group) takes the namespace with it. Armed
    // last: a change of credentials clears it.
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    {
        return fail("arming the parent death signal", e);
    }
    let launcher = std::fs::canonicalize(&plan.launcher).ok();
    let program = Path::new(&plan.program);
    let own = program.is_absolute()
        && launcher.is_some()
        && std::fs::canonicalize(program).ok() == launcher;
    let mut cmd = if own || Path::new(&plan.program) == plan.launcher {
        let mut c = std::process::Command::new("/proc/self/exe");
        std::os::unix::process::CommandExt::arg0(&mut c, &plan.program);
        c
    } else {
        std::process::Command::new(&plan.program)
    };
    // The warden blocked the stop signals for itself, and a signal mask is inherited
    // through fork and exec: unblocked here, so the program gets SIGTERM and its grace
    // period to stop (without this, it never saw one, and every cancel or preemption
    // waited the whole grace before SIGKILL). This process, the first of its pid
    // namespace, still ends only with the program: the kernel does not deliver a
    // signal it has no handler for.
    if let Err(e) = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_UNBLOCK,
        Some(&stop_signals()),
        None,
    ) {
        return fail("unblocking the stop signals", e);
    }
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    cmd.args(&plan.args)
        .envs(plan.loader_env.iter().map(|(k, v)| (k, v)))
        .current_dir(&plan.cwd)
        .stdin(stdin_of(&plan));
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("qanat sandbox: could not start '{}': {e}", plan.program);
            return NOT_STARTED;
        }
    };
    reap_until(child.id() as i32)
}

/// Waits for every process that ends (orphans are re-parented to the init) until the
/// program does, then reports how it ended.
fn reap_until(main: i32) -> u8 {
    use nix::sys::wait::{waitpid, WaitStatus};
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid.as_raw() == main => {
                return code.clamp(0, 255) as u8
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid.as_raw() == main => {
                return 128u8.saturating_add(sig as u8)
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return SETUP_FAILED,
        }
    }
}

/// Root: the rank's uid and gid. A user namespace: root inside, with nothing a root
/// would have. Either way an empty bounding set, `no_new_privs`, and exec grants no
/// capabilities.
fn drop_privileges(identity: Identity) -> Result<(), String> {
    use rustix::thread::{
        clear_ambient_capability_set, remove_capability_from_bounding_set,
        set_capabilities_secure_bits, CapabilitiesSecureBits, CapabilitySet,
    };
    for cap in CapabilitySet::all().iter() {
        // Capabilities this kernel does not know are refused: nothing to drop.
        let _ = remove_capability_from_bounding_set(cap);
    }
    set_capabilities_secure_bits(
        CapabilitiesSecureBits::NO_ROOT
            | CapabilitiesSecureBits::NO_ROOT_LOCKED
            | CapabilitiesSecureBits::NO_SETUID_FIXUP_LOCKED
            | CapabilitiesSecureBits::KEEP_CAPS_LOCKED,
    )
    .map_err(|e| format!("securebits: {e}"))?;
    let _ = clear_ambient_capability_set();
    if let Identity::User { uid, gid } = identity {
        let gid = nix::unistd::Gid::from_raw(gid);
        let uid = nix::unistd::Uid::from_raw(uid);
        nix::unistd::setgroups(&[gid]).map_err(|e| format!("setgroups: {e}"))?;
        nix::unistd::setresgid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
        nix::unistd::setresuid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
    }
    rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(|e| format!("clearing capabilities: {e}"))?;
    rustix::thread::set_no_new_privs(true).map_err(|e| format!("no_new_privs: {e}"))
}

/// Reads and runs anywhere it can see; writes only where it may; no signal or
/// abstract socket reaches a process outside the sandbox. Best effort on kernels with
/// an older Landlock (or none: the namespaces and the identity still hold).
fn landlock(plan: &Plan) -> Result<(), String> {
    use landlock::{
        path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
    };
    let abi = ABI::V6;
    let mut writable: Vec<PathBuf> = plan
        .expose
        .iter()
        .filter(|e| e.writable)
        .map(|e| e.path.clone())
        .collect();
    writable.extend(plan.private.iter().cloned());
    writable.push(PathBuf::from("/dev"));
    writable.retain(|p| p.exists());
    // `> /dev/stdout` reopens the rank's log, a file the sandbox cannot name: it may
    // write there through the descriptors it was given.
    let (out, err) = (std::io::stdout(), std::io::stderr());
    let logs = [out.as_fd(), err.as_fd()]
        .into_iter()
        .filter(|fd| {
            rustix::fs::fstat(fd)
                .is_ok_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_file())
        })
        .map(|fd| {
            Ok::<_, landlock::RulesetError>(landlock::PathBeneath::new(
                fd,
                AccessFs::WriteFile | AccessFs::Truncate,
            ))
        });
    Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.scope(Scope::from_all(abi)))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi))))
        .and_then(|r| r.add_rules(path_beneath_rules(&writable, AccessFs::from_all(abi))))
        .and_then(|r| r.add_rules(logs))
        .and_then(|r| r.restrict_self())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

// ---- The server's side: what a rank's plan holds, and whether a sandbox can be built.

/// The directories of one attempt a rank's plan exposes.
#[derive(Debug, Clone)]
pub(crate) struct JobDirs {
    pub work: PathBuf,
    pub checkpoints: PathBuf,
    pub inputs: PathBuf,
    pub home: PathBuf,
}

/// The plan of one rank: the server's data, the jobs' directory and its user's home
/// hidden; the rank's own directories, the CA certificate and the admin's paths bound
/// back; a private `/tmp` and `/dev/shm` as large as the rank's memory.
pub(crate) fn plan_for(
    settings: &crate::Settings,
    identity: Identity,
    dirs: &JobDirs,
    memory_mb: u64,
    program: String,
    args: Vec<String>,
    cwd: PathBuf,
) -> Plan {
    let s = &settings.sandbox;
    let mut hide = s.hide.clone();
    hide.push(settings.work_dir.clone());
    let rw = |p: &PathBuf| Exposed {
        path: p.clone(),
        writable: true,
    };
    let ro = |p: &PathBuf| Exposed {
        path: p.clone(),
        writable: false,
    };
    let mut expose = vec![
        rw(&dirs.work),
        rw(&dirs.checkpoints),
        rw(&dirs.home),
        ro(&dirs.inputs),
    ];
    expose.extend(s.paths.iter().map(ro));
    expose.extend(s.writable_paths.iter().map(rw));
    Plan {
        identity,
        hide,
        private: vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")],
        private_mb: memory_mb.max(16),
        expose,
        launcher: s.launcher.clone(),
        program,
        args,
        cwd,
        loader_env: Vec::new(),
        keep_stdin: false,
        no_network: false,
    }
}

/// The plan of a serving worker (a model's own code, as untrusted as a job's): the
/// server's data, the jobs' directory and its user's home hidden; `read_only` bound
/// back; no network; a private `/tmp` and `/dev/shm` of `tmp_mb` MiB; its stdin kept
/// (its requests) after the barrier line. It runs as the uid the server keeps for
/// workers (`uid_base + uid_count - 2`) when the server is root.
pub fn worker_plan(
    settings: &crate::Settings,
    read_only: &[PathBuf],
    tmp_mb: u64,
    program: String,
    args: Vec<String>,
) -> Plan {
    let s = &settings.sandbox;
    let mut hide = s.hide.clone();
    hide.push(settings.work_dir.clone());
    let root = rustix::process::geteuid().is_root();
    let uid = s.uid_base.saturating_add(s.uid_count.saturating_sub(2));
    Plan {
        identity: identity(root.then_some(uid)),
        hide,
        private: vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")],
        private_mb: tmp_mb.max(16),
        expose: read_only
            .iter()
            .map(|p| Exposed {
                path: p.clone(),
                writable: false,
            })
            .collect(),
        launcher: s.launcher.clone(),
        program,
        args,
        cwd: PathBuf::from("/tmp"),
        loader_env: Vec::new(),
        keep_stdin: true,
        no_network: true,
    }
}

/// Who ranks are: `uid` (and the same gid) for a root server, else the server's own
/// uid mapped to root in a user namespace.
pub(crate) fn identity(uid: Option<u32>) -> Identity {
    match uid {
        Some(id) => Identity::User { uid: id, gid: id },
        None => Identity::Namespace {
            outer_uid: rustix::process::geteuid().as_raw(),
            outer_gid: rustix::process::getegid().as_raw(),
        },
    }
}

/// Gives `dirs` (and all they hold, links themselves rather than their targets) to
/// `uid`: a root server's ranks write their own directories and nothing else.
pub(crate) fn hand_over(dirs: &[&Path], uid: u32) -> std::io::Result<()> {
    fn walk(p: &Path, uid: u32) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(p)?;
        // A file with another link may be someone else's file linked in: not given.
        if meta.is_file() && meta.nlink() > 1 {
            return Ok(());
        }
        std::os::unix::fs::lchown(p, Some(uid), Some(uid))?;
        if meta.is_dir() {
            for e in std::fs::read_dir(p)? {
                walk(&e?.path(), uid)?;
            }
        }
        Ok(())
    }
    for d in dirs {
        walk(d, uid)?;
    }
    Ok(())
}

/// Whether untrusted code other than a job's (a serving worker) can be sandboxed here:
/// how (`Ok`, said in a few words), or why not (`Err`). An admin's opt-out for jobs
/// (`jobs.sandbox.enabled = false`) holds for it too.
pub async fn check(settings: &crate::Settings) -> Result<String, String> {
    use crate::local::Isolation;
    match probe(settings).await {
        Isolation::Sandboxed { root, .. } => Ok(if root {
            "sandboxed: a uid of its own, no network".into()
        } else {
            "sandboxed: a user namespace, no network".into()
        }),
        Isolation::Unsandboxed => Ok("unsandboxed: jobs.sandbox.enabled = false".into()),
        Isolation::Unavailable(why) => Err(format!("no sandbox can be built here: {why}")),
    }
}

/// Builds one sandbox around `/bin/sh -c 'exit 0'` to learn whether ranks can run in
/// one here, and as what.
pub(crate) async fn probe(settings: &crate::Settings) -> crate::local::Isolation {
    use crate::local::Isolation;
    let s = &settings.sandbox;
    if !s.enabled {
        return Isolation::Unsandboxed;
    }
    let root = rustix::process::geteuid().is_root();
    let hint = if root {
        "the kernel refused namespaces to a root server (a container without CAP_SYS_ADMIN?); run the server where it may create mount and pid namespaces, or opt out with jobs.sandbox.enabled = false"
    } else {
        "the server is not root and cannot create user namespaces; run it as root (ranks then get uids of their own), or allow unprivileged user namespaces (user.max_user_namespaces > 0; on Ubuntu, kernel.apparmor_restrict_unprivileged_userns = 0), or opt out with jobs.sandbox.enabled = false"
    };
    if !root {
        // A user namespace keeps the server's supplementary groups (setgroups is
        // denied in it). `no_new_privs` makes `sudo` and other set-id programs
        // harmless, but a group that opens a daemon's socket or a disk is a way out.
        let risky = risky_groups();
        if !risky.is_empty() {
            return Isolation::Unavailable(format!(
                "the server's user is in the groups {}, which a job in a user namespace would keep (they reach a container daemon or raw disks); run the server as a user outside them, or as root (ranks then get uids of their own), or opt out with jobs.sandbox.enabled = false",
                risky.join(", ")
            ));
        }
    }
    let dir = settings.work_dir.join(".sandbox-probe");
    let dirs = JobDirs {
        work: dir.join("work"),
        checkpoints: dir.join("checkpoints"),
        inputs: dir.join("inputs"),
        home: dir.join("home"),
    };
    for d in [&dirs.work, &dirs.checkpoints, &dirs.inputs, &dirs.home] {
        if let Err(e) = tokio::fs::create_dir_all(d).await {
            return Isolation::Unavailable(format!("creating {}: {e}", d.display()));
        }
    }
    let last = s.uid_base.saturating_add(s.uid_count.saturating_sub(1));
    let identity = identity(root.then_some(last));
    if let Identity::User { uid, .. } = identity {
        let owned = [&dirs.work, &dirs.checkpoints, &dirs.home, &dirs.inputs];
        let owned: Vec<&Path> = owned.iter().map(|p| p.as_path()).collect();
        if let Err(e) = hand_over(&owned, uid) {
            return Isolation::Unavailable(format!("handing {} over: {e}", dir.display()));
        }
    }
    let plan = plan_for(
        settings,
        identity,
        &dirs,
        16,
        "/bin/sh".into(),
        vec!["-c".into(), "exit 0".into()],
        dirs.work.clone(),
    );
    let outcome = async {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new(&s.launcher)
            .arg(RANK_ENTRY)
            .arg(plan.to_arg())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", s.launcher.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(b"go\n").await;
        }
        let out =
            tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
                .await
                .map_err(|_| "building a sandbox took over 30 s".to_string())?
                .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
            Err(if said.is_empty() {
                format!("{} ended with {}", s.launcher.display(), out.status)
            } else {
                said
            })
        }
    }
    .await;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    match outcome {
        Ok(()) => Isolation::Sandboxed {
            root,
            uid_base: s.uid_base,
            landlock: landlock_level(),
        },
        Err(e) => Isolation::Unavailable(format!("{e}; {hint}")),
    }
}

/// The groups this process is in (besides its own) that give what a job must not
/// have: a container or VM daemon's socket, raw disks, the shadow file.
fn risky_groups() -> Vec<String> {
    const RISKY: [&str; 8] = [
        "docker",
        "podman",
        "lxd",
        "incus-admin",
        "libvirt",
        "disk",
        "shadow",
        "root",
    ];
    let egid = rustix::process::getegid().as_raw();
    let mine: Vec<u32> = rustix::process::getgroups()
        .unwrap_or_default()
        .into_iter()
        .map(|g| g.as_raw())
        .filter(|g| *g != egid)
        .collect();
    std::fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let gid: u32 = f.nth(1)?.parse().ok()?;
            (mine.contains(&gid) && RISKY.contains(&name)).then(|| name.to_string())
        })
        .collect()
}

/// What Landlock this kernel enforces, in words for a job's `enforcement`: the ranks'
/// ruleset is applied best-effort, so this says what it amounts to here.
pub(crate) fn landlock_level() -> &'static str {
    use landlock::{Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope, ABI};
    let strict = || Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    let full = strict()
        .handle_access(AccessFs::from_all(ABI::V6))
        .and_then(|r| r.scope(Scope::from_all(ABI::V6)))
        .and_then(|r| r.create());
    if full.is_ok() {
        return "landlock (files, signals, abstract sockets)";
    }
    let files = strict()
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create());
    if files.is_ok() {
        "landlock (files only: this kernel has no signal scoping)"
    } else {
        "no landlock (this kernel has none)"
    }
}
