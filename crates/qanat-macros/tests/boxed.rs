//! `#[boxed]` keeps an async fn's meaning: results, `?` and `return`, arguments moved
//! into the future and dropped when it ends, borrowed outputs, `Send` or not.

use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use qanat_macros::boxed;

/// Polls to completion; `Yield` makes each future suspend at least once.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

struct Yield(bool);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

fn suspend() -> Yield {
    Yield(false)
}

struct Store {
    name: String,
    factor: u64,
}

#[derive(Debug, PartialEq)]
struct Wide(String);

impl From<std::num::ParseIntError> for Wide {
    fn from(e: std::num::ParseIntError) -> Self {
        Wide(e.to_string())
    }
}

impl Store {
    #[boxed]
    async fn scaled(&self, text: &str, extra: u64) -> Result<u64, Wide> {
        suspend().await;
        let n: u64 = text.parse()?;
        if n == 0 {
            return Err(Wide("zero".into()));
        }
        Ok(n * self.factor + extra)
    }

    #[boxed]
    async fn name(&self) -> &str {
        suspend().await;
        &self.name
    }

    #[boxed]
    async fn rename(&mut self, to: std::borrow::Cow<'_, str>) {
        suspend().await;
        self.name = to.into_owned();
    }

    #[boxed]
    async fn into_name(mut self, suffix: &str) -> String {
        suspend().await;
        self.name.push_str(suffix);
        self.name
    }
}

#[boxed]
async fn patterns((a, b): (u64, u64), mut v: Vec<u64>, _: u64) -> Vec<u64> {
    suspend().await;
    v.push(a + b);
    v
}

#[boxed]
async fn depth(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    suspend().await;
    1 + depth(n - 1).await
}

struct Guard(Arc<AtomicBool>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[boxed]
async fn hold(_guard: Guard, n: u64) -> u64 {
    suspend().await;
    n
}

#[boxed(?Send)]
async fn local(shared: Rc<u64>) -> u64 {
    suspend().await;
    *shared + 1
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[test]
fn methods_keep_results_errors_and_early_returns() {
    let store = Store {
        name: "runs".into(),
        factor: 3,
    };
    assert_eq!(block_on(store.scaled("7", 1)), Ok(22));
    assert_eq!(block_on(store.scaled("0", 1)), Err(Wide("zero".into())));
    let err = block_on(store.scaled("x", 1)).expect_err("not a number");
    assert!(err.0.contains("invalid digit"), "{err:?}");
    assert_eq!(block_on(store.name()), "runs");
}

#[test]
fn mutable_and_owned_receivers() {
    let mut store = Store {
        name: "a".into(),
        factor: 1,
    };
    let to = String::from("b");
    block_on(store.rename(to.as_str().into()));
    assert_eq!(store.name, "b");
    assert_eq!(block_on(store.into_name("!")), "b!");
}

#[test]
fn patterns_mutable_arguments_and_recursion() {
    assert_eq!(block_on(patterns((2, 3), vec![1], 9)), vec![1, 5]);
    assert_eq!(block_on(depth(5)), 5);
}

#[test]
fn arguments_live_until_the_future_ends() {
    let dropped = Arc::new(AtomicBool::new(false));
    let future = hold(Guard(dropped.clone()), 4);
    assert!(!dropped.load(Ordering::SeqCst), "dropped at the call");
    let future = assert_send(future);
    assert_eq!(block_on(future), 4);
    assert!(dropped.load(Ordering::SeqCst), "not dropped at the end");
}

#[test]
fn not_send_when_asked() {
    assert_eq!(block_on(local(Rc::new(1))), 2);
}
