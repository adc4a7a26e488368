//! Dynamic batching, with Triton's knobs.
//!
//! Requests for one served version wait in a bounded queue (one FIFO per priority
//! level). A sized pool of worker threads — off the async runtime — takes whole batches
//! from it and runs each as one matrix. How a batch is formed, in this order:
//!
//! 1. requests are taken highest priority first, oldest first, while their rows fit in
//!    `max_batch_size` (a request larger than that runs alone);
//! 2. when those fill the batch, it goes at once;
//! 3. otherwise, when some prefix of them adds up to a preferred batch size, the largest
//!    such prefix goes at once (a preferred size is honoured, not merely allowed);
//! 4. otherwise the batch waits for more requests until its oldest request has waited
//!    `max_queue_delay_us`, then goes as it is.
//!
//! A request that finds the queue empty and a worker's share free, for an engine that
//! computes without waiting on anything ([`Engine::inline`]) and has answered one row
//! in under [`INLINE_NS`], runs at once on the thread that asked: there was nothing to
//! batch it with, and the hand-off to a worker thread and back (two thread switches)
//! would cost more than the model. It counts against `instances` like a worker's batch.
//!
//! A full queue refuses a request at once ([`crate::Error::Busy`]: 429,
//! `RESOURCE_EXHAUSTED`); a request still queued at its timeout is answered with
//! [`crate::Error::TimedOut`] and never runs. Memory is bounded by the queue size
//! times the rows a request may carry.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

pub use qanat_types::serving::{BatchStats, Batching, MAX_BATCH_LIMIT, MAX_QUEUE_LIMIT};

use crate::{Error, Result};

/// The worker threads a version's batches run on: its `instances`, or one per core.
fn workers(config: &Batching) -> usize {
    if config.instances > 0 {
        config.instances
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// What runs a batch: `rows` rows of `inputs()` values in (`f64`, as requests gave
/// them: a runtime that computes in `f32` converts), `rows` rows of `outputs()`
/// values out.
pub trait Engine: Send + Sync + 'static {
    /// Per-worker buffers, reused from batch to batch.
    type Scratch: Default + Send;
    fn inputs(&self) -> usize;
    fn outputs(&self) -> usize;
    fn run(&self, x: &[f64], rows: usize, scratch: &mut Self::Scratch) -> Result<Vec<f32>>;
    /// Whether a quick batch may run on the asking (async runtime's) thread: the engine
    /// only computes, never waiting on I/O, a device or another process.
    fn inline(&self) -> bool {
        false
    }
}

/// The most a request run on the asking thread may be expected to take: its rows times
/// the engine's recent one-row time.
pub const INLINE_NS: u64 = 100_000;

/// A one-row time not measured yet.
const UNMEASURED: u64 = u64::MAX;

/// What a request waits for: its rows' outputs, and how long it queued.
pub type Reply = Result<(Vec<f32>, Duration)>;

struct Item {
    x: Vec<f64>,
    rows: usize,
    enqueued: Instant,
    deadline: Option<Instant>,
    reply: oneshot::Sender<Reply>,
}

#[derive(Default)]
struct Queue {
    /// One FIFO per priority level, highest first.
    levels: Vec<VecDeque<Item>>,
    waiting: usize,
    /// Batches running now, on workers or inline: at most `Shared::workers`.
    busy: usize,
    closed: bool,
}

/// Called with the rows of each batch run (a metric).
pub type Observer = Box<dyn Fn(usize) + Send + Sync>;

struct Shared<E: Engine> {
    engine: E,
    observe: Option<Observer>,
    config: Batching,
    workers: usize,
    queue: Mutex<Queue>,
    wake: Condvar,
    stats: Mutex<BatchStats>,
    /// The engine's recent time for one row (ns, a moving average), or `UNMEASURED`.
    one_row_ns: AtomicU64,
    /// Buffers of the batches run inline, reused.
    scratches: Mutex<Vec<E::Scratch>>,
}

impl<E: Engine> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A worker never panics while holding the lock (engines run outside it), so a
        // poisoned lock still holds a consistent queue.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stats(&self) -> MutexGuard<'_, BatchStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one batch on `scratch`: a panic is an error; the one-row time is kept.
    fn compute(&self, x: &[f64], rows: usize, scratch: &mut E::Scratch) -> Result<Vec<f32>> {
        let started = Instant::now();
        let outcome =
            std::panic::catch_unwind(AssertUnwindSafe(|| self.engine.run(x, rows, scratch)))
                .unwrap_or_else(|_| Err(Error::Internal("the model panicked on a batch".into())));
        let k = self.engine.outputs();
        let outcome = outcome.and_then(|y| {
            if y.len() == rows * k {
                Ok(y)
            } else {
                Err(Error::Internal(format!(
                    "the model gave {} values for {rows} rows of {k}",
                    y.len()
                )))
            }
        });
        if rows == 1 && outcome.is_ok() {
            let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
            let old = self.one_row_ns.load(Ordering::Relaxed);
            let new = if old == UNMEASURED {
                took
            } else {
                (old.saturating_mul(7) / 8).saturating_add(took / 8)
            };
            self.one_row_ns
                .store(new.min(UNMEASURED - 1), Ordering::Relaxed);
        }
        *self.stats().batch_sizes.entry(rows).or_default() += 1;
        if let Some(observe) = &self.observe {
            observe(rows);
        }
        outcome
    }

    /// Whether `rows` rows may run on the asking thread (before the queue is looked at).
    fn quick(&self, rows: usize) -> bool {
        let one = self.one_row_ns.load(Ordering::Relaxed);
        self.config.max_queue_delay_us == 0
            && rows <= self.config.max_batch_size
            && one != UNMEASURED
            && one.saturating_mul(rows as u64) <= INLINE_NS
            && self.engine.inline()
    }
}

/// The queue and workers of one served version. Cloning shares them; when the last
/// clone is dropped the workers finish what is queued and stop.
pub struct Batcher<E: Engine> {
    handle: Arc<Handle<E>>,
}

impl<E: Engine> Clone for Batcher<E> {
    fn clone(&self) -> Self {
        Batcher {
            handle: self.handle.clone(),
        }
    }
}

struct Handle<E: Engine> {
    shared: Arc<Shared<E>>,
}

impl<E: Engine> Drop for Handle<E> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_all();
    }
}

impl<E: Engine> std::fmt::Debug for Batcher<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("config", &self.handle.shared.config)
            .finish_non_exhaustive()
    }
}

impl<E: Engine> Batcher<E> {
    /// Starts the workers of `engine` with `config` (checked).
    pub fn start(engine: E, config: Batching) -> Result<Self> {
        Self::start_observed(engine, config, None)
    }

    /// [`Batcher::start`], telling `observe` the rows of each batch.
    pub fn start_observed(engine: E, config: Batching, observe: Option<Observer>) -> Result<Self> {
        config.check().map_err(Error::Invalid)?;
        let levels = config.priority_levels as usize;
        let workers = workers(&config);
        let shared = Arc::new(Shared {
            engine,
            observe,
            config,
            workers,
            queue: Mutex::new(Queue {
                levels: (0..levels).map(|_| VecDeque::new()).collect(),
                ..Queue::default()
            }),
            wake: Condvar::new(),
            stats: Mutex::default(),
            one_row_ns: AtomicU64::new(UNMEASURED),
            scratches: Mutex::default(),
        });
        for i in 0..workers {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("qanat-infer-{i}"))
                .spawn(move || work(&shared))
                .map_err(|e| Error::Internal(format!("cannot start an inference worker: {e}")))?;
        }
        Ok(Batcher {
            handle: Arc::new(Handle { shared }),
        })
    }

    pub fn config(&self) -> &Batching {
        &self.handle.shared.config
    }

    pub fn engine(&self) -> &E {
        &self.handle.shared.engine
    }

    /// Queues `rows` rows of `x` at `priority` (1 highest; `None`: the default), to
    /// wait at most `timeout` (`None`: the default). Refused at once when the queue is
    /// full; the receiver gets the outputs, or why there are none.
    pub fn submit(
        &self,
        x: Vec<f64>,
        rows: usize,
        priority: Option<u32>,
        timeout: Option<Duration>,
    ) -> Result<oneshot::Receiver<Reply>> {
        let shared = &self.handle.shared;
        let config = &shared.config;
        let inputs = shared.engine.inputs();
        if x.len() != rows * inputs {
            return Err(Error::Invalid(format!(
                "{} values are not {rows} rows of {inputs}",
                x.len()
            )));
        }
        let level = priority.unwrap_or(config.default_priority);
        if level == 0 || level > config.priority_levels {
            return Err(Error::Invalid(format!(
                "priority {level}: this model has priority levels 1 (highest) to {}",
                config.priority_levels
            )));
        }
        // A request may shorten the default timeout, not extend it (as Triton's
        // allow_timeout_override).
        let default = (config.default_timeout_us > 0)
            .then(|| Duration::from_micros(config.default_timeout_us));
        let timeout = match (timeout, default) {
            (Some(t), Some(d)) => Some(t.min(d)),
            (t, d) => t.or(d),
        };
        let now = Instant::now();
        let (tx, rx) = oneshot::channel();
        {
            let mut q = shared.lock();
            if q.waiting >= config.max_queue_size {
                drop(q);
                shared.stats().rejected += 1;
                return Err(Error::Busy(format!(
                    "the model's queue is full ({} requests waiting): retry later",
                    config.max_queue_size
                )));
            }
            q.levels[level as usize - 1].push_back(Item {
                x,
                rows,
                enqueued: now,
                deadline: timeout.map(|t| now + t),
                reply: tx,
            });
            q.waiting += 1;
        }
        shared.wake.notify_one();
        Ok(rx)
    }

    /// Queues and waits: [`Batcher::submit`] then the reply; or, when nothing is queued
    /// and the engine is quick, runs at once on this thread (see the module's notes).
    #[qanat_macros::boxed]
    pub async fn infer(
        &self,
        x: Vec<f64>,
        rows: usize,
        priority: Option<u32>,
        timeout: Option<Duration>,
    ) -> Reply {
        if let Some(reply) = self.inline(&x, rows, priority) {
            return reply;
        }
        self.submit(x, rows, priority, timeout)?
            .await
            .map_err(|_| Error::Internal("the inference worker stopped".into()))?
    }

    /// Runs `rows` rows of `x` on this thread when that is allowed now; `None` when the
    /// request must queue (or is invalid: [`Batcher::submit`] says why).
    fn inline(&self, x: &[f64], rows: usize, priority: Option<u32>) -> Option<Reply> {
        let shared = &self.handle.shared;
        let config = &shared.config;
        let level = priority.unwrap_or(config.default_priority);
        if !shared.quick(rows)
            || rows == 0
            || x.len() != rows * shared.engine.inputs()
            || level == 0
            || level > config.priority_levels
        {
            return None;
        }
        {
            let mut q = shared.lock();
            if q.closed || q.waiting > 0 || q.busy >= shared.workers {
                return None;
            }
            q.busy += 1;
        }
        let mut scratch = shared
            .scratches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        let outcome = shared.compute(x, rows, &mut scratch);
        shared
            .scratches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(scratch);
        let more = {
            let mut q = shared.lock();
            q.busy -= 1;
            q.waiting > 0
        };
        if more {
            shared.wake.notify_one();
        }
        Some(match outcome {
            Ok(y) => Ok((y, Duration::ZERO)),
            Err(e) => Err(failed(&e)),
        })
    }

    pub fn stats(&self) -> BatchStats {
        let shared = &self.handle.shared;
        let waiting = shared.lock().waiting;
        let mut s = shared.stats().clone();
        s.waiting = waiting;
        s
    }
}

/// What a worker does next with the queue as it is.
enum Plan {
    /// Take this many requests, in queue order.
    Take(usize),
    /// Nothing is due: sleep until then, or until a request arrives.
    Wait(Instant),
}

fn plan(q: &Queue, config: &Batching, now: Instant) -> Plan {
    let mut rows = 0;
    let mut count = 0;
    let mut preferred = None;
    let mut full = false;
    let mut oldest: Option<Instant> = None;
    for item in q.levels.iter().flatten() {
        oldest = Some(oldest.map_or(item.enqueued, |o| o.min(item.enqueued)));
        if count == 0 && item.rows >= config.max_batch_size {
            count = 1;
            full = true;
            break;
        }
        if rows + item.rows > config.max_batch_size {
            full = true;
            break;
        }
        rows += item.rows;
        count += 1;
        if config.preferred_batch_sizes.contains(&rows) {
            preferred = Some(count);
        }
        if rows == config.max_batch_size {
            full = true;
            break;
        }
    }
    if full {
        return Plan::Take(count);
    }
    if let Some(n) = preferred {
        return Plan::Take(n);
    }
    let due = oldest.unwrap_or(now) + Duration::from_micros(config.max_queue_delay_us);
    if due <= now {
        Plan::Take(count)
    } else {
        Plan::Wait(due)
    }
}

/// Answers every queued request whose deadline has passed; the earliest deadline left.
fn expire<E: Engine>(shared: &Shared<E>, q: &mut Queue, now: Instant) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    let mut expired = 0;
    for level in &mut q.levels {
        if level.iter().all(|i| i.deadline.is_none()) {
            continue;
        }
        let mut kept = VecDeque::with_capacity(level.len());
        for item in level.drain(..) {
            match item.deadline {
                Some(d) if d <= now => {
                    expired += 1;
                    let waited = now - item.enqueued;
                    let _ = item.reply.send(Err(Error::TimedOut(format!(
                        "the request waited {} µs in the queue, past its timeout",
                        waited.as_micros()
                    ))));
                }
                d => {
                    if let Some(d) = d {
                        next = Some(next.map_or(d, |n| n.min(d)));
                    }
                    kept.push_back(item);
                }
            }
        }
        *level = kept;
    }
    if expired > 0 {
        q.waiting -= expired;
        shared.stats().timed_out += expired as u64;
    }
    next
}

fn work<E: Engine>(shared: &Shared<E>) {
    let mut scratch = E::Scratch::default();
    let mut q = shared.lock();
    loop {
        let now = Instant::now();
        let deadline = expire(shared, &mut q, now);
        // Nothing to take, or every share taken by batches run inline (the last to end
        // wakes one): sleep until a request, a share or the next deadline.
        if q.waiting == 0 || q.busy >= shared.workers {
            if q.waiting == 0 && q.closed {
                return;
            }
            q = match deadline {
                Some(d) => {
                    shared
                        .wake
                        .wait_timeout(q, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => shared.wake.wait(q).unwrap_or_else(|p| p.into_inner()),
            };
            continue;
        }
        match plan(&q, &shared.config, now) {
            Plan::Wait(until) => {
                let until = deadline.map_or(until, |d| d.min(until));
                q = shared
                    .wake
                    .wait_timeout(q, until.saturating_duration_since(now))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            Plan::Take(n) => {
                let mut batch = Vec::with_capacity(n);
                for level in &mut q.levels {
                    while batch.len() < n {
                        match level.pop_front() {
                            Some(item) => batch.push(item),
                            None => break,
                        }
                    }
                }
                q.waiting -= batch.len();
                q.busy += 1;
                let more = q.waiting > 0;
                drop(q);
                if more {
                    shared.wake.notify_one();
                }
                run(shared, batch, &mut scratch);
                q = shared.lock();
            }
        }
    }
}

fn run<E: Engine>(shared: &Shared<E>, batch: Vec<Item>, scratch: &mut E::Scratch) {
    let started = Instant::now();
    let rows: usize = batch.iter().map(|i| i.rows).sum();
    let engine = &shared.engine;
    let outcome = if let [one] = &batch[..] {
        shared.compute(&one.x, rows, scratch)
    } else {
        let mut x = Vec::with_capacity(rows * engine.inputs());
        for item in &batch {
            x.extend_from_slice(&item.x);
        }
        shared.compute(&x, rows, scratch)
    };
    // The share is free before anyone hears back: a caller answered here may ask
    // again at once and find it free.
    shared.lock().busy -= 1;
    let k = engine.outputs();
    match outcome {
        Ok(y) => {
            let mut at = 0;
            for item in batch {
                let n = item.rows * k;
                let _ = item
                    .reply
                    .send(Ok((y[at..at + n].to_vec(), started - item.enqueued)));
                at += n;
            }
        }
        Err(e) => {
            for item in batch {
                let _ = item.reply.send(Err(failed(&e)));
            }
        }
    }
}

/// What a request is told when its batch failed with `e`.
fn failed(e: &Error) -> Error {
    let message = e.to_string();
    match qanat_core::DomainError::kind(e) {
        qanat_core::ErrorKind::Invalid => Error::Invalid(message),
        // A runtime's worker lost (the Python runtime's): said, retried.
        qanat_core::ErrorKind::Unavailable => Error::Unavailable(message),
        _ => Error::Internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    type Gate = Arc<(Mutex<bool>, Condvar)>;

    /// Doubles each value; records batch sizes; can be held closed to build a backlog.
    struct Doubler {
        gate: Gate,
        busy: Arc<AtomicBool>,
        /// Offers the inline path.
        inline: bool,
        /// How long each batch takes.
        takes: Duration,
        /// The thread each batch ran on.
        threads: Arc<Mutex<Vec<String>>>,
    }

    impl Engine for Doubler {
        type Scratch = ();
        fn inputs(&self) -> usize {
            2
        }
        fn outputs(&self) -> usize {
            2
        }
        fn inline(&self) -> bool {
            self.inline
        }
        fn run(&self, x: &[f64], _rows: usize, _: &mut ()) -> Result<Vec<f32>> {
            let me = std::thread::current();
            self.threads
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(me.name().unwrap_or("").to_string());
            std::thread::sleep(self.takes);
            self.busy.store(true, Ordering::SeqCst);
            let (open, cv) = &*self.gate;
            let mut g = open.lock().unwrap_or_else(|p| p.into_inner());
            while !*g {
                g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            if x.first() == Some(&-1.0) {
                return Err(Error::Invalid("negative one".into()));
            }
            Ok(x.iter().map(|v| (v * 2.0) as f32).collect())
        }
    }

    fn doubler(open: bool) -> (Doubler, Gate, Arc<AtomicBool>) {
        let gate = Arc::new((Mutex::new(open), Condvar::new()));
        let busy = Arc::new(AtomicBool::new(false));
        (
            Doubler {
                gate: gate.clone(),
                busy: busy.clone(),
                inline: false,
                takes: Duration::ZERO,
                threads: Arc::default(),
            },
            gate,
            busy,
        )
    }

    fn open(gate: &(Mutex<bool>, Condvar)) {
        *gate.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        gate.1.notify_all();
    }

    fn one_worker(config: Batching) -> Batching {
        Batching {
            instances: 1,
            ..config
        }
    }

    /// Occupies the one worker with a full batch, so later requests queue up.
    async fn hold(b: &Batcher<Doubler>, busy: &AtomicBool) -> oneshot::Receiver<Reply> {
        let rows = b.config().max_batch_size;
        let first = b
            .submit(vec![0.0; 2 * rows], rows, None, None)
            .expect("queued");
        // Sleeps rather than spins: on a busy machine the worker needs the core.
        for _ in 0..30_000 {
            if busy.load(Ordering::SeqCst) {
                return first;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the worker never took the first batch");
    }

    #[tokio::test]
    async fn answers_each_request_with_its_own_rows() {
        let (engine, _, _) = doubler(true);
        let b = Batcher::start(engine, Batching::default()).expect("start");
        let (y, _) = b
            .infer(vec![1.0, 2.0, 3.0, 4.0], 2, None, None)
            .await
            .expect("ok");
        assert_eq!(y, vec![2.0, 4.0, 6.0, 8.0]);
        let wrong = b.submit(vec![1.0; 3], 2, None, None).expect_err("3 values");
        assert!(wrong.to_string().contains("not 2 rows of 2"), "{wrong}");
        let err = b
            .infer(vec![-1.0, 0.0], 1, None, None)
            .await
            .expect_err("engine error");
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }

    #[tokio::test]
    async fn a_backlog_forms_the_largest_preferred_batch_and_splits_answers() {
        let (engine, gate, busy) = doubler(false);
        let config = one_worker(Batching {
            max_batch_size: 8,
            preferred_batch_sizes: vec![4],
            max_queue_delay_us: 5_000_000,
            ..Batching::default()
        });
        let b = Batcher::start(engine, config).expect("start");
        let first = hold(&b, &busy).await;
        // Six one-row requests wait: a batch of 4 (preferred) must go, not 6.
        let waiting: Vec<_> = (0..6)
            .map(|i| {
                b.submit(vec![i as f64, 0.5], 1, None, None)
                    .expect("queued")
            })
            .collect();
        open(&gate);
        first.await.expect("reply").expect("ok");
        let mut answers = Vec::new();
        for (i, rx) in waiting.into_iter().take(4).enumerate() {
            let (y, _) = rx.await.expect("reply").expect("ok");
            assert_eq!(y, vec![2.0 * i as f32, 1.0]);
            answers.push(y);
        }
        let stats = b.stats();
        assert_eq!(stats.batch_sizes.get(&4), Some(&1), "{stats:?}");
        assert!(!stats.batch_sizes.contains_key(&6), "{stats:?}");
        // The remaining two wait for the delay (5 s) or more requests: two more make 4.
        assert_eq!(stats.waiting, 2);
        let more: Vec<_> = (0..2)
            .map(|_| b.submit(vec![1.0, 1.0], 1, None, None).expect("queued"))
            .collect();
        for rx in more {
            rx.await.expect("reply").expect("ok");
        }
        assert_eq!(b.stats().batch_sizes.get(&4), Some(&2));
    }

    #[tokio::test]
    async fn the_queue_delay_sends_a_partial_batch() {
        let (engine, _, _) = doubler(true);
        let config = one_worker(Batching {
            max_batch_size: 8,
            max_queue_delay_us: 20_000,
            ..Batching::default()
        });
        let b = Batcher::start(engine, config).expect("start");
        let rx: Vec<_> = (0..3)
            .map(|_| b.submit(vec![1.0, 1.0], 1, None, None).expect("queued"))
            .collect();
        for r in rx {
            r.await.expect("reply").expect("ok");
        }
        // Nothing preferred and never full: the three went together after the delay.
        assert_eq!(b.stats().batch_sizes.get(&3), Some(&1), "{:?}", b.stats());
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_timeouts_expire() {
        let (engine, gate, busy) = doubler(false);
        let config = one_worker(Batching {
            max_queue_size: 2,
            ..Batching::default()
        });
        let b = Batcher::start(engine, config).expect("start");
        let first = hold(&b, &busy).await;
        let timed = b
            .submit(vec![1.0, 1.0], 1, None, Some(Duration::from_millis(1)))
            .expect("queued");
        let kept = b.submit(vec![1.0, 1.0], 1, None, None).expect("queued");
        let refused = b.submit(vec![1.0, 1.0], 1, None, None).expect_err("full");
        assert!(matches!(refused, Error::Busy(_)), "{refused}");
        assert_eq!(
            qanat_core::DomainError::kind(&refused),
            qanat_core::ErrorKind::Exhausted
        );
        std::thread::sleep(Duration::from_millis(5));
        open(&gate);
        first.await.expect("reply").expect("ok");
        let late = timed.await.expect("reply").expect_err("timed out");
        assert!(matches!(late, Error::TimedOut(_)), "{late}");
        kept.await.expect("reply").expect("ok");
        let s = b.stats();
        assert_eq!((s.rejected, s.timed_out, s.waiting), (1, 1, 0));
    }

    #[tokio::test]
    async fn a_request_may_shorten_the_default_timeout_not_extend_it() {
        let (engine, gate, busy) = doubler(false);
        // A default long enough for the first request to reach the worker on a busy
        // machine (it bounds the first's wait in the queue too), short against 60 s.
        let config = one_worker(Batching {
            default_timeout_us: 500_000,
            ..Batching::default()
        });
        let b = Batcher::start(engine, config).expect("start");
        let first = hold(&b, &busy).await;
        let longer = b
            .submit(vec![1.0, 1.0], 1, None, Some(Duration::from_secs(60)))
            .expect("queued");
        std::thread::sleep(Duration::from_millis(700));
        open(&gate);
        first.await.expect("reply").expect("ok");
        let late = longer
            .await
            .expect("reply")
            .expect_err("the default bounds it");
        assert!(matches!(late, Error::TimedOut(_)), "{late}");
    }

    #[tokio::test]
    async fn higher_priority_goes_first() {
        let (engine, gate, busy) = doubler(false);
        let config = one_worker(Batching {
            max_batch_size: 1,
            priority_levels: 2,
            default_priority: 2,
            ..Batching::default()
        });
        let b = Batcher::start(engine, config).expect("start");
        let first = hold(&b, &busy).await;
        let low = b.submit(vec![1.0, 1.0], 1, None, None).expect("queued");
        let high = b.submit(vec![2.0, 2.0], 1, Some(1), None).expect("queued");
        let bad = b
            .submit(vec![2.0, 2.0], 1, Some(3), None)
            .expect_err("no level 3");
        assert!(bad.to_string().contains("1 (highest) to 2"), "{bad}");
        open(&gate);
        first.await.expect("reply").expect("ok");
        let (_, high_wait) = high.await.expect("reply").expect("ok");
        let (_, low_wait) = low.await.expect("reply").expect("ok");
        assert!(high_wait <= low_wait, "{high_wait:?} vs {low_wait:?}");
    }

    /// Where each of `n` one-row requests, one after another, ran: a worker or here.
    async fn places(b: &Batcher<Doubler>, n: usize) -> Vec<bool> {
        let threads = b.engine().threads.clone();
        for i in 0..n {
            let (y, _) = b
                .infer(vec![i as f64, 1.0], 1, None, None)
                .await
                .expect("ok");
            assert_eq!(y, vec![2.0 * i as f32, 2.0]);
        }
        let names = threads.lock().unwrap_or_else(|p| p.into_inner()).clone();
        names.iter().map(|t| t.starts_with("qanat-infer")).collect()
    }

    #[tokio::test]
    async fn a_quick_engine_runs_a_lone_request_on_the_asking_thread() {
        let (mut engine, _, _) = doubler(true);
        engine.inline = true;
        let b = Batcher::start(engine, Batching::default()).expect("start");
        // The first is measured on a worker; then they run here (all of them but on a
        // machine so busy that a run of nothing took 100 µs, which the average forgets).
        let ran = places(&b, 50).await;
        assert!(ran[0], "{ran:?}");
        assert!(ran.iter().any(|worker| !worker), "{ran:?}");
        assert_eq!(b.stats().batch_sizes.get(&1), Some(&50));
        // An invalid request is still refused with the queue's reason.
        let wrong = b
            .infer(vec![1.0; 3], 1, None, None)
            .await
            .expect_err("3 values");
        assert!(wrong.to_string().contains("not 1 rows of 2"), "{wrong}");
        let err = b
            .infer(vec![-1.0, 0.0], 1, None, None)
            .await
            .expect_err("engine error");
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }

    #[tokio::test]
    async fn slow_engines_queue_delays_and_engines_that_wait_never_run_inline() {
        // Slower than INLINE_NS a row.
        let (mut slow, _, _) = doubler(true);
        slow.inline = true;
        slow.takes = Duration::from_nanos(4 * INLINE_NS);
        let b = Batcher::start(slow, Batching::default()).expect("start");
        assert_eq!(places(&b, 3).await, vec![true; 3]);
        // A queue delay asks for batching: requests wait for company.
        let (mut delayed, _, _) = doubler(true);
        delayed.inline = true;
        let config = Batching {
            max_queue_delay_us: 1,
            ..Batching::default()
        };
        let b = Batcher::start(delayed, config).expect("start");
        assert_eq!(places(&b, 3).await, vec![true; 3]);
        // An engine that does not offer it (the Python runtime).
        let (waits, _, _) = doubler(true);
        let b = Batcher::start(waits, Batching::default()).expect("start");
        assert_eq!(places(&b, 3).await, vec![true; 3]);
    }

    #[tokio::test]
    async fn inline_batches_count_against_the_instances() {
        let (mut engine, gate, busy) = doubler(true);
        engine.inline = true;
        let b = Batcher::start(engine, one_worker(Batching::default())).expect("start");
        let ran = places(&b, 50).await;
        assert!(ran.iter().any(|worker| !worker), "{ran:?}");
        // The one instance busy on a worker: the next request queues behind it.
        *gate.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
        busy.store(false, Ordering::SeqCst);
        let first = hold(&b, &busy).await;
        let threads = b.engine().threads.clone();
        let asker = tokio::spawn({
            let b = b.clone();
            async move { b.infer(vec![3.0, 1.0], 1, None, None).await }
        });
        for _ in 0..30_000 {
            if b.stats().waiting == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(b.stats().waiting, 1, "it queued instead of running beside");
        open(&gate);
        first.await.expect("reply").expect("ok");
        let (y, _) = asker.await.expect("task").expect("ok");
        assert_eq!(y, vec![6.0, 2.0]);
        let names = threads.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(
            names[50..].iter().all(|t| t.starts_with("qanat-infer")),
            "{names:?}"
        );
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let cases = [
            Batching {
                max_batch_size: 0,
                ..Batching::default()
            },
            Batching {
                preferred_batch_sizes: vec![128],
                ..Batching::default()
            },
            Batching {
                default_priority: 2,
                ..Batching::default()
            },
            Batching {
                max_queue_size: 0,
                ..Batching::default()
            },
        ];
        for c in cases {
            assert!(c.check().is_err(), "{c:?}");
        }
        Batching::default().check().expect("defaults work");
    }
}
