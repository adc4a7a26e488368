//! The local executor: this server's cores, memory and GPUs, handed to jobs, and the
//! processes of one attempt started as a gang and watched until they end.
//!
//! Each rank runs in its own session and process group (so a signal reaches all it
//! started), pinned to the cores it was given (`sched_setaffinity`: a 1-core job
//! cannot take 4), with an environment built from scratch (the server's own, which may
//! hold its master key, never leaks in). Memory (and a CPU quota) is enforced by the
//! kernel through a cgroup per rank where the cgroup tree is writable ([`crate::cgroup`]);
//! elsewhere by sampling each group's resident memory and killing the gang when a rank
//! is over its limit. Either way the reason says so, and `jobs show` says which.
//!
//! Gang invariant: the attempt ends as soon as any rank fails, and then every other
//! rank is stopped (SIGTERM, a grace period, SIGKILL): a lost worker never leaves its
//! peers waiting on a collective forever.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;

use crate::cgroup::{Cgroups, RankGroup};
use crate::procfs::{self, Signal};
use crate::spec::Resources;
use crate::{wire, Settings};

/// How limits are enforced without cgroups (shown in `jobs show`).
pub(crate) const FALLBACK_ENFORCEMENT: &str =
    "memory: resident memory sampled per rank, killed over the limit (no writable cgroup tree); cpu: cores pinned (sched_setaffinity)";

/// How local ranks are isolated here: found once, when the scheduler starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// Ranks run in the sandbox ([`crate::sandbox`]): as a uid of their own when the
    /// server is root (`root`), else in a user namespace.
    /// `landlock` says what Landlock the kernel enforces (read once, at the probe).
    Sandboxed {
        root: bool,
        uid_base: u32,
        landlock: &'static str,
    },
    /// An admin opted out (`jobs.sandbox.enabled = false`).
    Unsandboxed,
    /// The sandbox cannot be built here: local jobs are refused, saying why.
    Unavailable(String),
}

impl Isolation {
    pub(crate) fn describe(&self) -> String {
        match self {
            Isolation::Sandboxed {
                root: true,
                uid_base,
                landlock,
            } => format!(
                "sandbox: a uid of its own (from {uid_base}), mount/pid/ipc namespaces, no capabilities, no_new_privs, {landlock}"
            ),
            Isolation::Sandboxed {
                root: false,
                landlock,
                ..
            } => format!(
                "sandbox: a user namespace (no capabilities), mount/pid/ipc namespaces, no_new_privs, {landlock}"
            ),
            Isolation::Unsandboxed => "unsandboxed (jobs.sandbox.enabled = false): ranks run as the server's user and can read its files".into(),
            Isolation::Unavailable(why) => format!("no sandbox: {why}"),
        }
    }
}

/// Orders sent to a running attempt.
#[derive(Debug, Clone)]
pub(crate) enum Control {
    Cancel { by: String },
    Preempt { by: String },
}

/// The cores and GPUs an attempt holds.
#[derive(Debug, Clone)]
pub(crate) struct Allocation {
    pub total: Resources,
    pub per_rank: Resources,
    pub rank_cores: Vec<Vec<usize>>,
    pub rank_gpus: Vec<Vec<u32>>,
    /// The uid (and gid) the attempt's ranks run as, when the server is root.
    pub uid: Option<u32>,
}

impl Allocation {
    /// No cores or GPUs of this server: what a job placed by another executor
    /// (Slurm, Kubernetes) is prepared with.
    pub(crate) fn elsewhere(job: &crate::rows::JobRow) -> Allocation {
        Allocation {
            total: job.total(),
            per_rank: job.per_rank,
            rank_cores: vec![Vec::new(); job.ranks as usize],
            rank_gpus: vec![Vec::new(); job.ranks as usize],
            uid: None,
        }
    }

    pub(crate) fn describe(&self) -> String {
        self.rank_cores
            .iter()
            .zip(&self.rank_gpus)
            .enumerate()
            .map(|(r, (c, g))| {
                let cores = c
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                if g.is_empty() {
                    format!("rank {r}: cores {cores}")
                } else {
                    let gpus = g
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(",");
                    format!("rank {r}: cores {cores}, gpus {gpus}")
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[derive(Debug)]
struct State {
    free: Resources,
    /// Thousandths of a core handed out, per core.
    core_load: HashMap<usize, u64>,
    /// GPU index -> the job holding it.
    gpu_holder: HashMap<u32, Option<String>>,
    /// Running attempts and how to reach them.
    running: HashMap<String, Running>,
    /// The uids running attempts hold (from the sandbox's range).
    uids: std::collections::BTreeSet<u32>,
}

#[derive(Debug)]
struct Running {
    control: mpsc::UnboundedSender<Control>,
    stopping: bool,
}

#[derive(Debug)]
pub(crate) struct LocalExecutor {
    cores: Vec<usize>,
    capacity: Resources,
    gpus: Vec<wire::Gpu>,
    nvml: crate::gpu::Gpus,
    /// Found when the scheduler starts ([`LocalExecutor::start`]).
    cgroups: std::sync::OnceLock<Cgroups>,
    /// Found when the scheduler starts ([`LocalExecutor::probe_sandbox`]).
    isolation: std::sync::OnceLock<Isolation>,
    /// The uids a root server hands to attempts (`jobs.sandbox.uid_base`, `uid_count`).
    uid_range: std::ops::Range<u32>,
    state: Mutex<State>,
}

impl LocalExecutor {
    pub(crate) fn new(settings: &Settings) -> Self {
        let cores = procfs::usable_cores();
        let cpu_millis = settings
            .cpus
            .map_or(cores.len() as u64 * 1000, |c| (c * 1000.0) as u64);
        let memory_mb = settings
            .memory_mb
            .unwrap_or(procfs::total_memory_mb() * 9 / 10);
        let (nvml, gpus) = if settings.discover_gpus {
            crate::gpu::Gpus::discover()
        } else {
            (crate::gpu::Gpus::none(), Vec::new())
        };
        let capacity = Resources {
            cpu_millis,
            memory_mb,
            gpus: gpus.len() as u32,
        };
        LocalExecutor {
            state: Mutex::new(State {
                free: capacity,
                core_load: cores.iter().map(|c| (*c, 0)).collect(),
                gpu_holder: gpus.iter().map(|g| (g.index, None)).collect(),
                running: HashMap::new(),
                uids: Default::default(),
            }),
            cores,
            capacity,
            gpus,
            nvml,
            cgroups: std::sync::OnceLock::new(),
            isolation: std::sync::OnceLock::new(),
            uid_range: settings.sandbox.uid_base
                ..settings
                    .sandbox
                    .uid_base
                    // The last two: the probe's and serving workers' (sandbox::worker_plan).
                    .saturating_add(settings.sandbox.uid_count.saturating_sub(2)),
        }
    }

    /// Finds the cgroup tree ranks are limited by and sweeps what a previous run of
    /// this server left in it. Called once, by the scheduler, before it starts a job.
    pub(crate) fn start(&self, settings: &Settings) {
        let c = Cgroups::detect(settings.cgroups, &crate::cgroup::key_of(&settings.work_dir));
        match c.off_reason() {
            Some(why) => {
                tracing::info!(%why, "no kernel-enforced limits for local jobs: memory is sampled instead")
            }
            None => tracing::info!(enforcement = %c.enforcement(), "local jobs run in cgroups"),
        }
        let _ = self.cgroups.set(c);
    }

    /// The cgroups ranks are placed in (off until [`LocalExecutor::start`]).
    pub(crate) fn cgroups(&self) -> &Cgroups {
        static OFF: std::sync::OnceLock<Cgroups> = std::sync::OnceLock::new();
        self.cgroups.get().unwrap_or_else(|| {
            OFF.get_or_init(|| Cgroups::Off("the scheduler is not running".into()))
        })
    }

    /// Builds a sandbox once, around `/bin/sh -c 'exit 0'`, to learn whether ranks can
    /// run in one here (and as what). Called once, by the scheduler, before it starts a
    /// job.
    pub(crate) async fn probe_sandbox(&self, settings: &Settings) {
        let found = crate::sandbox::probe(settings).await;
        match &found {
            Isolation::Sandboxed { .. } => {
                tracing::info!(isolation = %found.describe(), "local jobs run sandboxed")
            }
            Isolation::Unsandboxed => {
                tracing::warn!("local jobs run unsandboxed: jobs.sandbox.enabled = false")
            }
            Isolation::Unavailable(why) => {
                tracing::warn!(%why, "local jobs are refused: no sandbox can be built here")
            }
        }
        let _ = self.isolation.set(found);
    }

    /// How ranks are isolated (unknown until the scheduler has probed).
    pub(crate) fn isolation(&self) -> Option<&Isolation> {
        self.isolation.get()
    }

    /// How ranks are isolated and limits enforced here (shown in `jobs show` and
    /// `qanat gpus`).
    pub(crate) fn enforcement(&self) -> String {
        match self.isolation() {
            Some(i) => format!("{}; {}", i.describe(), self.cgroups().enforcement()),
            None => self.cgroups().enforcement(),
        }
    }

    /// The UUID `CUDA_VISIBLE_DEVICES` names GPU `index` by.
    pub(crate) fn gpu_uuid(&self, index: u32) -> String {
        self.gpus
            .iter()
            .find(|g| g.index == index)
            .map_or_else(|| index.to_string(), |g| g.uuid.clone())
    }

    pub(crate) fn gpu_sample(&self, uuid: &str) -> Option<crate::gpu::GpuSample> {
        self.nvml.sample(uuid)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn capacity(&self) -> Resources {
        self.capacity
    }

    pub(crate) fn free(&self) -> Resources {
        self.lock().free
    }

    pub(crate) fn gpus(&self) -> &[wire::Gpu] {
        &self.gpus
    }

    pub(crate) fn info(&self, settings: &Settings) -> wire::ExecutorInfo {
        let st = self.lock();
        wire::ExecutorInfo {
            name: "local".into(),
            region: settings.region.clone(),
            capacity: self.capacity,
            free: st.free,
            gpus: self
                .gpus
                .iter()
                .map(|g| wire::Gpu {
                    job_id: st.gpu_holder.get(&g.index).cloned().flatten(),
                    ..g.clone()
                })
                .collect(),
            enforcement: self.enforcement(),
        }
    }

    /// Takes resources for `ranks` ranks of `per_rank` each, all or nothing.
    pub(crate) fn allocate(
        &self,
        job_id: &str,
        per_rank: Resources,
        ranks: u32,
        gpu_model: Option<&str>,
    ) -> Option<Allocation> {
        let total = per_rank.times(ranks);
        let mut st = self.lock();
        if !total.fits(st.free) {
            return None;
        }
        let mut free_gpus: Vec<u32> = self
            .gpus
            .iter()
            .filter(|g| st.gpu_holder.get(&g.index).is_some_and(Option::is_none))
            .filter(|g| gpu_model.is_none_or(|m| g.name.contains(m)))
            .map(|g| g.index)
            .collect();
        if free_gpus.len() < total.gpus as usize {
            return None;
        }
        // A root server runs each attempt as a uid no other running attempt has.
        let uid = match self.isolation() {
            Some(Isolation::Sandboxed { root: true, .. }) => {
                let uid = self.uid_range.clone().find(|u| !st.uids.contains(u))?;
                st.uids.insert(uid);
                Some(uid)
            }
            _ => None,
        };
        free_gpus.sort_unstable();
        let mut rank_gpus = Vec::new();
        let mut rank_cores = Vec::new();
        // Cores: each rank gets ceil(cpus) of the least loaded cores.
        let want = per_rank.cpu_millis.div_ceil(1000).max(1) as usize;
        for _ in 0..ranks {
            let mut by_load: Vec<usize> = self.cores.clone();
            by_load.sort_by_key(|c| (st.core_load.get(c).copied().unwrap_or(0), *c));
            let cores: Vec<usize> = by_load.into_iter().take(want).collect();
            let share = per_rank.cpu_millis / cores.len().max(1) as u64;
            for c in &cores {
                *st.core_load.entry(*c).or_default() += share;
            }
            rank_cores.push(cores);
            let g: Vec<u32> = free_gpus.drain(..per_rank.gpus as usize).collect();
            for i in &g {
                st.gpu_holder.insert(*i, Some(job_id.to_string()));
            }
            rank_gpus.push(g);
        }
        st.free = st.free.minus(total);
        Some(Allocation {
            total,
            per_rank,
            rank_cores,
            rank_gpus,
            uid,
        })
    }

    pub(crate) fn release(&self, a: &Allocation) {
        let mut st = self.lock();
        st.free = st.free.plus(a.total);
        let share_of = |n: usize| a.per_rank.cpu_millis / n.max(1) as u64;
        for cores in &a.rank_cores {
            let share = share_of(cores.len());
            for c in cores {
                if let Some(l) = st.core_load.get_mut(c) {
                    *l = l.saturating_sub(share);
                }
            }
        }
        for g in a.rank_gpus.iter().flatten() {
            st.gpu_holder.insert(*g, None);
        }
        if let Some(u) = a.uid {
            st.uids.remove(&u);
        }
    }

    /// Registers a running attempt; its orders arrive on the returned receiver.
    pub(crate) fn register(&self, job_id: &str) -> mpsc::UnboundedReceiver<Control> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().running.insert(
            job_id.to_string(),
            Running {
                control: tx,
                stopping: false,
            },
        );
        rx
    }

    /// Forgets an ended attempt's controls. Only the attempt's own end does: its
    /// receiver is dropped by then. A second start of the same job that lost the
    /// claim (a scheduler pass that read the job as queued before the first claim
    /// committed) ends with the running attempt's receiver still open, and must not
    /// take its controls away: a cancel would then reach nobody.
    pub(crate) fn unregister(&self, job_id: &str) {
        let mut st = self.lock();
        if st
            .running
            .get(job_id)
            .is_some_and(|r| r.control.is_closed())
        {
            st.running.remove(job_id);
        }
    }

    /// Sends an order to a running attempt; false when it does not run here.
    pub(crate) fn order(&self, job_id: &str, c: Control) -> bool {
        let mut st = self.lock();
        match st.running.get_mut(job_id) {
            Some(r) => {
                r.stopping = true;
                r.control.send(c).is_ok()
            }
            None => false,
        }
    }

    /// Whether an attempt here is being stopped.
    pub(crate) fn stopping(&self, job_id: &str) -> bool {
        self.lock().running.get(job_id).is_some_and(|r| r.stopping)
    }
}

/// One rank, ready to start.
#[derive(Debug)]
pub(crate) struct RankLaunch {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub log: PathBuf,
    pub cores: Vec<usize>,
    /// The sandbox it runs in (None only when an admin opted out).
    pub sandbox: Option<crate::sandbox::Plan>,
}

/// A started rank.
#[derive(Debug)]
pub(crate) struct Started {
    pub rank: u32,
    pub pid: i32,
    pub start_ticks: u64,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub(crate) enum Ending {
    Succeeded,
    Failed {
        exit_code: Option<i32>,
        reason: String,
    },
    Cancelled {
        by: String,
    },
    Preempted {
        by: String,
    },
}

/// The processes of a started attempt.
pub(crate) struct Gang {
    children: Vec<(u32, i32, tokio::process::Child)>,
    /// Each rank's cgroup (empty without cgroups), by rank.
    groups: Vec<RankGroup>,
}

impl Gang {
    /// The ranks' cgroups, taken out (to remove them when the gang is given up).
    pub(crate) fn take_groups(&mut self) -> Vec<RankGroup> {
        std::mem::take(&mut self.groups)
    }

    /// Opens the barrier: every rank becomes its program, together. Call once the
    /// ranks are recorded.
    pub(crate) async fn release(&mut self) {
        use tokio::io::AsyncWriteExt;
        for (_, _, child) in &mut self.children {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(b"go\n").await;
                let _ = stdin.flush().await;
            }
        }
    }
}

/// The limits every rank of a gang gets, and the cgroups that enforce them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    pub cgroups: &'a Cgroups,
    /// Names the ranks' cgroups (`<job>-a<attempt>`).
    pub name: &'a str,
    pub memory_mb: u64,
    pub cpu_millis: u64,
}

/// Starts every rank, or none: if one cannot start, those already started are killed.
/// Each rank is in its cgroup before it passes the barrier.
pub(crate) fn spawn_gang(
    ranks: Vec<RankLaunch>,
    limits: Limits<'_>,
) -> Result<(Gang, Vec<Started>), String> {
    let mut children = Vec::new();
    let mut groups = Vec::new();
    let mut started = Vec::new();
    let undo = |children: &[(u32, i32, tokio::process::Child)], groups: &[RankGroup]| {
        for (_, pid, _) in children {
            procfs::signal_group(*pid, Signal::KILL);
        }
        for g in groups {
            g.kill();
        }
    };
    for (rank, r) in ranks.into_iter().enumerate() {
        let rank = rank as u32;
        match spawn_rank(&r) {
            Ok(child) => {
                let pid = child.id().map_or(0, |p| p as i32);
                started.push(Started {
                    rank,
                    pid,
                    start_ticks: procfs::start_ticks(pid).unwrap_or(0),
                });
                children.push((rank, pid, child));
                if limits.cgroups.active() {
                    let placed = limits
                        .cgroups
                        .create(
                            &format!("{}-r{rank}", limits.name),
                            limits.memory_mb,
                            limits.cpu_millis,
                        )
                        .and_then(|g| {
                            let added = g.add(pid as u32);
                            groups.push(g);
                            added
                        });
                    if let Err(e) = placed {
                        undo(&children, &groups);
                        return Err(format!(
                            "rank {rank} could not be placed in its cgroup: {e}"
                        ));
                    }
                }
            }
            Err(e) => {
                undo(&children, &groups);
                return Err(format!("rank {rank} could not start '{}': {e}", r.program));
            }
        }
    }
    Ok((Gang { children, groups }, started))
}

/// Removes the cgroups of a gang that never ran (or has ended).
pub(crate) async fn remove_groups(groups: Vec<RankGroup>) {
    for g in groups {
        g.kill();
        g.remove().await;
    }
}

/// The barrier each rank passes before it becomes its program.
const GATE: &str = "read -r _ || exit 97; exec \"$@\" </dev/null";

fn spawn_rank(r: &RankLaunch) -> std::io::Result<tokio::process::Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&r.log)?;
    // A rank may reopen its own log (`> /dev/stdout`); it still cannot replace it.
    if let Some(crate::sandbox::Plan {
        identity: crate::sandbox::Identity::User { uid, gid },
        ..
    }) = &r.sandbox
    {
        rustix::fs::fchown(
            &log,
            Some(rustix::fs::Uid::from_raw(*uid)),
            Some(rustix::fs::Gid::from_raw(*gid)),
        )?;
    }
    // Each rank waits at a barrier — a line on its stdin — until every rank of the
    // gang is started and recorded, then becomes the program (same pid). A server that
    // dies before opening the barrier closes the pipe instead: the ranks exit without
    // running, so nothing it started can run beside the retry.
    let mut cmd = match &r.sandbox {
        // The launcher is the rank's warden: it waits at the barrier itself, then
        // builds the sandbox and starts the program inside ([`crate::sandbox`]).
        Some(plan) => {
            let mut c = tokio::process::Command::new(&plan.launcher);
            c.arg(crate::sandbox::RANK_ENTRY)
                .arg(plan.to_arg())
                .current_dir("/");
            c
        }
        None => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c")
                .arg(GATE)
                .arg("qanat-rank")
                .arg(&r.program)
                .args(&r.args)
                .current_dir(&r.cwd);
            c
        }
    };
    // A sandboxed rank's warden and init start with privileges: the job's variables
    // that the loader acts on reach only its program (through the plan).
    let env = r
        .env
        .iter()
        .filter(|(k, _)| r.sandbox.is_none() || !crate::sandbox::loader_variable(k));
    cmd.env_clear()
        .envs(env.map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a signal to the group reaches all it starts.
        .process_group(0)
        .kill_on_drop(false);
    // The child inherits the spawning thread's affinity: its cores are pinned before
    // it runs a single instruction of its own.
    let child = procfs::with_affinity(&r.cores, || cmd.spawn())?;
    if let Some(pid) = child.id() {
        // Under memory pressure the kernel should kill a job, not the server.
        let _ = std::fs::write(format!("/proc/{pid}/oom_score_adj"), "1000");
    }
    Ok(child)
}

fn describe_exit(rank: u32, st: &ExitStatus) -> (Option<i32>, String) {
    match (st.code(), st.signal()) {
        (Some(c), _) => (Some(c), format!("rank {rank} exited with code {c}")),
        (None, Some(s)) => (
            Some(128 + s),
            format!("rank {rank} was killed by signal {s} ({})", signal_name(s)),
        ),
        _ => (None, format!("rank {rank} ended without a status")),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        9 => "SIGKILL",
        15 => "SIGTERM",
        11 => "SIGSEGV",
        6 => "SIGABRT",
        2 => "SIGINT",
        7 => "SIGBUS",
        _ => "signal",
    }
}

type Wait = std::pin::Pin<
    Box<dyn std::future::Future<Output = (u32, i32, std::io::Result<ExitStatus>)> + Send>,
>;

impl Gang {
    /// Watches the attempt until it ends: all ranks done, one failed, over memory, out of
    /// time, or ordered to stop.
    pub(crate) async fn supervise(
        mut self,
        control: mpsc::UnboundedReceiver<Control>,
        memory_mb: u64,
        timeout: Option<Duration>,
        grace: Duration,
        every: Duration,
    ) -> Ending {
        let groups = std::mem::take(&mut self.groups);
        let ending = self
            .watch(&groups, control, memory_mb, timeout, grace, every)
            .await;
        remove_groups(groups).await;
        ending
    }

    async fn watch(
        self,
        groups: &[RankGroup],
        mut control: mpsc::UnboundedReceiver<Control>,
        memory_mb: u64,
        timeout: Option<Duration>,
        grace: Duration,
        every: Duration,
    ) -> Ending {
        let over_memory = |rank: u32| {
            Ending::Failed {
                exit_code: Some(128 + 9),
                reason: format!(
                    "rank {rank} went over its limit of {memory_mb} MiB of memory and was killed by the kernel (its cgroup); ask for more with resources.memory"
                ),
            }
        };
        let oom_rank = || {
            groups
                .iter()
                .enumerate()
                .find(|(_, g)| g.oom_kills() > 0)
                .map(|(r, _)| r as u32)
        };
        let kill_groups = || {
            for g in groups {
                g.kill();
            }
        };
        let mut live: HashMap<u32, i32> = self.children.iter().map(|(r, p, _)| (*r, *p)).collect();
        let mut waits: FuturesUnordered<Wait> = self
            .children
            .into_iter()
            .map(|(rank, pid, mut child)| -> Wait {
                Box::pin(async move { (rank, pid, child.wait().await) })
            })
            .collect();
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                Some((rank, pid, status)) = waits.next() => {
                    live.remove(&rank);
                    // Whatever the rank left behind in its group goes with it.
                    procfs::signal_group(pid, Signal::KILL);
                    if let Some(g) = groups.get(rank as usize) {
                        g.kill();
                    }
                    let ok = status.as_ref().is_ok_and(|s| s.success());
                    if ok {
                        if live.is_empty() {
                            return Ending::Succeeded;
                        }
                        continue;
                    }
                    let (exit_code, reason) = match &status {
                        Ok(s) => describe_exit(rank, s),
                        Err(e) => (None, format!("rank {rank} could not be waited for: {e}")),
                    };
                    if let Some(r) = oom_rank() {
                        stop(&live, &mut waits, grace).await;
                        kill_groups();
                        return over_memory(r);
                    }
                    let reason = if live.is_empty() {
                        reason
                    } else {
                        format!("{reason}; the other ranks were stopped (a gang fails together)")
                    };
                    stop(&live, &mut waits, grace).await;
                    kill_groups();
                    return Ending::Failed { exit_code, reason };
                }
                () = sleep_until(deadline) => {
                    stop(&live, &mut waits, grace).await;
                    kill_groups();
                    let t = timeout.unwrap_or_default();
                    return Ending::Failed {
                        exit_code: None,
                        reason: format!("timed out after {} (the job's timeout)", humantime::format_duration(t)),
                    };
                }
                Some(c) = control.recv() => {
                    stop(&live, &mut waits, grace).await;
                    kill_groups();
                    return match c {
                        Control::Cancel { by } => Ending::Cancelled { by },
                        Control::Preempt { by } => Ending::Preempted { by },
                    };
                }
                _ = tick.tick() => {
                    if !groups.is_empty() {
                        // The kernel holds the limit; a process it killed for memory
                        // (a rank, or a worker a rank started) fails the gang.
                        if let Some(r) = oom_rank() {
                            for pid in live.values() {
                                procfs::signal_group(*pid, Signal::KILL);
                            }
                            kill_groups();
                            while waits.next().await.is_some() {}
                            return over_memory(r);
                        }
                        continue;
                    }
                    let pgids: Vec<i32> = live.values().copied().collect();
                    let usage = procfs::group_usage(&pgids);
                    if let Some((rank, used)) = live
                        .iter()
                        .filter_map(|(r, p)| usage.get(p).map(|u| (*r, u.rss_mb)))
                        .find(|(_, m)| *m > memory_mb)
                    {
                        for pid in live.values() {
                            procfs::signal_group(*pid, Signal::KILL);
                        }
                        while waits.next().await.is_some() {}
                        return Ending::Failed {
                            exit_code: Some(128 + 9),
                            reason: format!(
                                "rank {rank} used {used} MiB of memory, over its limit of {memory_mb} MiB, and was killed; ask for more with resources.memory"
                            ),
                        };
                    }
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// SIGTERM to every live rank, up to `grace` for them to end, then SIGKILL.
async fn stop(live: &HashMap<u32, i32>, waits: &mut FuturesUnordered<Wait>, grace: Duration) {
    for pid in live.values() {
        procfs::signal_group(*pid, Signal::TERM);
    }
    let drained =
        tokio::time::timeout(grace, async { while waits.next().await.is_some() {} }).await;
    if drained.is_err() {
        for pid in live.values() {
            procfs::signal_group(*pid, Signal::KILL);
        }
        while waits.next().await.is_some() {}
    }
    for pid in live.values() {
        procfs::signal_group(*pid, Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_that_lost_the_claim_leaves_the_running_attempt_its_controls() {
        let mut settings = Settings::new(std::env::temp_dir(), "http://127.0.0.1:1", "local");
        settings.discover_gpus = false;
        let local = LocalExecutor::new(&settings);
        let mut running = local.register("job-1");
        // The losing start ends: the attempt that runs must still get its cancel.
        local.unregister("job-1");
        assert!(local.order("job-1", Control::Cancel { by: "admin".into() }));
        assert!(matches!(running.try_recv(), Ok(Control::Cancel { .. })));
        assert!(local.stopping("job-1"));
        // Its own end (the receiver gone) forgets it.
        drop(running);
        local.unregister("job-1");
        assert!(!local.stopping("job-1"));
        assert!(!local.order("job-1", Control::Cancel { by: "admin".into() }));
    }
}
