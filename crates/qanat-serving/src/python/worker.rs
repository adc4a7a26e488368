//! One worker process: started through the server's [`Spawner`](super::Spawner) (the
//! job sandbox), fed frames on its stdin, answering frames on its stdout, its stderr
//! kept as a bounded tail. A worker that does not answer in time is killed with its
//! process group (the sandbox's pid namespace goes with it).

use std::io::{Read, Write};
use std::process::{Child, ChildStdin};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most bytes of a worker's stderr kept (its end).
const TAIL: usize = 8 << 10;
/// The largest answer a worker may send.
const MAX_FRAME: usize = 1 << 30;

/// What a worker answered.
pub enum Frame {
    Ok(Vec<u8>),
    Failed(String),
}

/// Why a call got no answer.
#[derive(Debug)]
pub enum Lost {
    /// The worker ended (its status, when known).
    Ended(String),
    /// The worker did not answer within the time.
    TimedOut(Duration),
    /// The worker went over its memory limit (why, in words).
    Memory(String),
}

/// A worker's memory limit, for as long as it lives.
pub trait Limit: Send + std::fmt::Debug {
    /// Why the worker must stop for memory (the kernel killed it at its limit, or its
    /// sampled use is over it), if it must.
    fn over_limit(&self) -> Option<String>;
}

/// Places a started worker (by pid, before it passes its barrier) under its limit.
pub type Confine<'a> = &'a dyn Fn(u32) -> Result<Option<Box<dyn Limit>>, String>;

/// How often a waiting call looks at a limited worker's memory.
const MEMORY_CHECK: Duration = Duration::from_millis(200);

pub struct Worker {
    child: Child,
    /// Killed and reaped: its pid may belong to another process now.
    gone: bool,
    stdin: Option<ChildStdin>,
    answers: mpsc::Receiver<std::io::Result<Frame>>,
    tail: Arc<Mutex<Vec<u8>>>,
    /// Its stderr reached its end (all it wrote is in `tail`).
    said_all: Arc<std::sync::atomic::AtomicBool>,
    /// Its memory limit (dropped after the worker is killed).
    limit: Option<Box<dyn Limit>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.child.id())
            .finish()
    }
}

fn read_frame(r: &mut impl Read) -> std::io::Result<Frame> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other("an answer over 1 GiB"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(match head[0] {
        0 => Frame::Ok(body),
        _ => Frame::Failed(String::from_utf8_lossy(&body).into_owned()),
    })
}

impl Worker {
    /// Starts `cmd` (stdin, stdout and stderr piped here), places it under its limit,
    /// passes the barrier when it has one, and waits up to `load` for its first
    /// frame: ready, or why not.
    pub fn start(
        mut cmd: std::process::Command,
        barrier: bool,
        load: Duration,
        confine: Confine<'_>,
    ) -> Result<(Worker, String), String> {
        use std::os::unix::process::CommandExt;
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting a Python worker: {e}"))?;
        // Under memory pressure the kernel should kill a worker, not the server.
        let _ = std::fs::write(format!("/proc/{}/oom_score_adj", child.id()), "1000");
        let limit = match confine(child.id()) {
            Ok(l) => l,
            Err(why) => {
                kill_group(&mut child);
                return Err(format!("the Python worker could not be limited: {why}"));
            }
        };
        let mut stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let tail: Arc<Mutex<Vec<u8>>> = Arc::default();
        let said_all: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        if let Some(mut err) = stderr {
            let tail = tail.clone();
            let said_all = said_all.clone();
            let _ = std::thread::Builder::new()
                .name("qanat-py-stderr".into())
                .spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = err.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                        t.extend_from_slice(&buf[..n]);
                        if t.len() > TAIL {
                            let cut = t.len() - TAIL;
                            t.drain(..cut);
                        }
                    }
                    said_all.store(true, std::sync::atomic::Ordering::Release);
                });
        }
        let (tx, answers) = mpsc::channel();
        if let Some(mut out) = stdout {
            let _ = std::thread::Builder::new()
                .name("qanat-py-stdout".into())
                .spawn(move || loop {
                    let frame = read_frame(&mut out);
                    let end = frame.is_err();
                    if tx.send(frame).is_err() || end {
                        break;
                    }
                });
        }
        if barrier {
            if let Some(s) = stdin.as_mut() {
                let _ = s.write_all(b"go\n").and_then(|_| s.flush());
            }
        }
        let mut w = Worker {
            child,
            gone: false,
            stdin,
            answers,
            tail,
            said_all,
            limit,
        };
        match w.wait(load) {
            Ok(Frame::Ok(about)) => Ok((w, String::from_utf8_lossy(&about).into_owned())),
            Ok(Frame::Failed(why)) => {
                w.kill();
                Err(why)
            }
            Err(lost) => {
                w.kill();
                // What it said before it ended explains why: read to its end.
                for _ in 0..100 {
                    if w.said_all.load(std::sync::atomic::Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                let said = w.tail();
                Err(match lost {
                    Lost::Memory(why) => format!("the Python worker {why} while loading the model"),
                    Lost::TimedOut(t) => format!(
                        "the model did not load within {} s (serving.python.load_timeout_secs)",
                        t.as_secs()
                    ),
                    Lost::Ended(status) => format!(
                        "the Python worker ended before it was ready ({status}){}",
                        if said.is_empty() {
                            String::new()
                        } else {
                            format!(":\n{said}")
                        }
                    ),
                })
            }
        }
    }

    /// Waits up to `limit` for a frame; a limited worker's memory is looked at while
    /// it waits, and when it ends.
    fn wait(&mut self, limit: Duration) -> Result<Frame, Lost> {
        let started = std::time::Instant::now();
        let got = loop {
            let left = limit.saturating_sub(started.elapsed());
            let slice = if self.limit.is_some() {
                left.min(MEMORY_CHECK)
            } else {
                left
            };
            match self.answers.recv_timeout(slice) {
                Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() && slice < left => {
                    if let Some(why) = self.limit.as_ref().and_then(|l| l.over_limit()) {
                        return Err(Lost::Memory(why));
                    }
                }
                other => break other,
            }
        };
        match got {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Some(why) = self.limit.as_ref().and_then(|l| l.over_limit()) {
                    return Err(Lost::Memory(why));
                }
                // Its stdout closed: it ended, or is ending.
                let status = (0..50)
                    .find_map(|_| match self.child.try_wait() {
                        Ok(Some(s)) => Some(s.to_string()),
                        Ok(None) => {
                            std::thread::sleep(Duration::from_millis(10));
                            None
                        }
                        Err(_) => Some("status unknown".into()),
                    })
                    .unwrap_or_else(|| "its output closed".into());
                Err(Lost::Ended(status))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Lost::TimedOut(limit)),
        }
    }

    /// Sends one request and waits up to `limit` for its answer. After `Err` the
    /// worker is no use: kill it.
    pub fn call(&mut self, request: &[u8], limit: Duration) -> Result<Frame, Lost> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(Lost::Ended("its input is closed".into()));
        };
        let len =
            u32::try_from(request.len()).map_err(|_| Lost::Ended("a request over 4 GiB".into()))?;
        // A worker that stopped reading fills the pipe: writes are bounded by the
        // same limit, from a thread of their own.
        let (done_tx, done_rx) = mpsc::channel();
        let mut pipe = match stdin.try_clone_pipe() {
            Some(p) => p,
            None => return Err(Lost::Ended("its input could not be written".into())),
        };
        let mut payload = Vec::with_capacity(request.len() + 4);
        payload.extend_from_slice(&len.to_le_bytes());
        payload.extend_from_slice(request);
        let _ = std::thread::Builder::new()
            .name("qanat-py-stdin".into())
            .spawn(move || {
                let r = pipe.write_all(&payload).and_then(|_| pipe.flush());
                let _ = done_tx.send(r);
            });
        let started = std::time::Instant::now();
        match done_rx.recv_timeout(limit) {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(self
                    .wait(Duration::from_millis(0))
                    .err()
                    .unwrap_or(Lost::Ended("it stopped reading".into())))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(Lost::TimedOut(limit)),
        }
        self.wait(limit.saturating_sub(started.elapsed()))
    }

    /// The end of what it wrote to stderr.
    pub fn tail(&self) -> String {
        let t = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&t).trim().to_string()
    }

    /// Kills its process group (a sandbox's warden, whose namespace goes with it) and
    /// reaps it.
    pub fn kill(&mut self) {
        self.stdin = None;
        if self.gone {
            return;
        }
        self.gone = true;
        kill_group(&mut self.child);
    }
}

/// Kills `child`'s process group and reaps it. Its group is its own
/// (`process_group(0)`): the pid is the group's id, and is not reused before the wait
/// reaps it.
fn kill_group(child: &mut Child) {
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .filter(|p| !p.is_init())
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A second handle on a child's stdin, for a writer thread.
trait ClonePipe {
    fn try_clone_pipe(&self) -> Option<std::fs::File>;
}

impl ClonePipe for ChildStdin {
    fn try_clone_pipe(&self) -> Option<std::fs::File> {
        use std::os::fd::AsFd;
        self.as_fd()
            .try_clone_to_owned()
            .ok()
            .map(std::fs::File::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker in `sh`: says it is ready (an empty JSON object), then runs `then`.
    fn sh(then: &str) -> std::process::Command {
        let mut c = std::process::Command::new("/bin/sh");
        c.arg("-c")
            .arg(format!("printf '\\000\\002\\000\\000\\000{{}}'; {then}"));
        c
    }

    const LOAD: Duration = Duration::from_secs(20);
    const NONE: Confine<'static> = &|_| Ok(None);

    /// A limit that is crossed once `file` exists.
    #[derive(Debug)]
    struct Crossed(std::path::PathBuf);

    impl Limit for Crossed {
        fn over_limit(&self) -> Option<String> {
            self.0
                .exists()
                .then(|| "used 900 MiB of memory, over its limit of 512 MiB, and was killed".into())
        }
    }

    #[test]
    fn a_worker_over_its_memory_limit_is_lost_saying_so_and_one_that_cannot_be_limited_never_runs()
    {
        let dir = std::env::temp_dir().join(format!("qanat-worker-limit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let flag = dir.join("over");
        let _ = std::fs::remove_file(&flag);
        let pids = std::sync::Mutex::new(Vec::new());
        let confine = |pid: u32| -> Result<Option<Box<dyn Limit>>, String> {
            pids.lock().expect("pids").push(pid);
            Ok(Some(Box::new(Crossed(flag.clone()))))
        };
        // It "grows" while predicting: the flag appears, then it hangs.
        let (mut w, _) = Worker::start(
            sh(&format!(
                "head -c 5 >/dev/null; touch '{}'; sleep 600",
                flag.display()
            )),
            false,
            LOAD,
            &confine,
        )
        .expect("ready");
        let started = std::time::Instant::now();
        match w.call(b"x", Duration::from_secs(60)) {
            Err(Lost::Memory(why)) => assert!(why.contains("512 MiB"), "{why}"),
            _ => panic!("over its limit is a lost worker"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "found while it waited"
        );
        w.kill();
        assert_eq!(pids.lock().expect("pids").len(), 1);
        let refuse = |_: u32| -> Result<Option<Box<dyn Limit>>, String> { Err("no cgroup".into()) };
        let why = Worker::start(sh("sleep 600"), false, LOAD, &refuse).expect_err("not started");
        assert!(why.contains("could not be limited: no cgroup"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn answers_and_refusals_come_back_as_frames() {
        let (mut w, about) = Worker::start(
            sh("head -c 5 >/dev/null; printf '\\001\\003\\000\\000\\000bad'; sleep 600"),
            false,
            LOAD,
            NONE,
        )
        .expect("ready");
        assert_eq!(about, "{}");
        match w.call(b"x", LOAD) {
            Ok(Frame::Failed(why)) => assert_eq!(why, "bad"),
            Ok(Frame::Ok(_)) => panic!("an answer, not a refusal"),
            Err(lost) => panic!("lost: {lost:?}"),
        }
    }

    #[test]
    fn a_worker_that_exits_or_hangs_is_lost_and_one_that_cannot_load_says_why() {
        let (mut w, _) =
            Worker::start(sh("head -c 5 >/dev/null; exit 3"), false, LOAD, NONE).expect("ready");
        match w.call(b"x", LOAD) {
            Err(Lost::Ended(status)) => assert!(status.contains('3'), "{status}"),
            _ => panic!("an exit is a lost worker"),
        }
        let (mut w, _) = Worker::start(sh("sleep 600"), false, LOAD, NONE).expect("ready");
        let started = std::time::Instant::now();
        match w.call(b"x", Duration::from_millis(300)) {
            Err(Lost::TimedOut(_)) => {}
            _ => panic!("a hang is a lost worker"),
        }
        w.kill();
        assert!(started.elapsed() < Duration::from_secs(60));
        let mut never = std::process::Command::new("/bin/sh");
        never
            .arg("-c")
            .arg("echo 'ModuleNotFoundError: torch' >&2; exit 4");
        let why = Worker::start(never, false, LOAD, NONE).expect_err("not ready");
        assert!(why.contains("ModuleNotFoundError: torch"), "{why}");
    }
}
