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
}

pub struct Worker {
    child: Child,
    /// Killed and reaped: its pid may belong to another process now.
    gone: bool,
    stdin: Option<ChildStdin>,
    answers: mpsc::Receiver<std::io::Result<Frame>>,
    tail: Arc<Mutex<Vec<u8>>>,
    /// Its stderr reached its end (all it wrote is in `tail`).
    said_all: Arc<std::sync::atomic::AtomicBool>,
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
    /// Starts `cmd` (stdin, stdout and stderr piped here), passes the barrier when it
    /// has one, and waits up to `load` for its first frame: ready, or why not.
    pub fn start(
        mut cmd: std::process::Command,
        barrier: bool,
        load: Duration,
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

    fn wait(&mut self, limit: Duration) -> Result<Frame, Lost> {
        match self.answers.recv_timeout(limit) {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
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
        // Its group is its own (process_group(0)): the pid is the group's id, and is
        // not reused before the wait below reaps it.
        if let Some(pid) = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .filter(|p| !p.is_init())
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

    #[test]
    fn answers_and_refusals_come_back_as_frames() {
        let (mut w, about) = Worker::start(
            sh("head -c 5 >/dev/null; printf '\\001\\003\\000\\000\\000bad'; sleep 600"),
            false,
            LOAD,
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
            Worker::start(sh("head -c 5 >/dev/null; exit 3"), false, LOAD).expect("ready");
        match w.call(b"x", LOAD) {
            Err(Lost::Ended(status)) => assert!(status.contains('3'), "{status}"),
            _ => panic!("an exit is a lost worker"),
        }
        let (mut w, _) = Worker::start(sh("sleep 600"), false, LOAD).expect("ready");
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
        let why = Worker::start(never, false, LOAD).expect_err("not ready");
        assert!(why.contains("ModuleNotFoundError: torch"), "{why}");
    }
}
