//! What keeps slow or idle clients from exhausting the server: a cap on open
//! connections (refused at accept, before any byte is read), an idle timeout on each
//! connection (no byte in either direction for that long closes it), and a soft
//! file-descriptor limit raised to the hard one at start-up. The header-read and
//! body-read timeouts are set on the HTTP layer (see `server.rs`).

use std::future::{Future, Ready};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use futures::future::Either;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// File descriptors kept free for the metadata store, storage and logs when the
/// connection cap is derived from the fd limit.
const FD_RESERVE: u64 = 256;

/// Raises the soft limit on open files to the hard limit and returns the limit now in
/// force (`None` where it cannot be read).
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return lim.maximum;
        }
    }
    lim.current
}

/// The connection cap actually applied: the configured one, lowered so that open
/// connections can never use up the file descriptors the server needs itself.
pub fn effective_cap(configured: usize, fd_limit: Option<u64>) -> usize {
    match fd_limit {
        Some(fds) => configured.min(fds.saturating_sub(FD_RESERVE).max(1) as usize),
        None => configured,
    }
}

/// An acceptor that admits at most `cap` connections at once and closes those idle for
/// longer than `idle`; `A` runs after it (the TLS handshake, or nothing).
#[derive(Clone)]
pub struct Guard<A> {
    inner: A,
    slots: Arc<Semaphore>,
    idle: Duration,
}

impl<A> Guard<A> {
    pub fn new(inner: A, cap: usize, idle: Duration) -> Self {
        Guard {
            inner,
            slots: Arc::new(Semaphore::new(cap)),
            idle,
        }
    }
}

impl<A, I, S> Accept<I, S> for Guard<A>
where
    A: Accept<Guarded<I>, S>,
{
    type Stream = A::Stream;
    type Service = A::Service;
    type Future = Either<Ready<io::Result<(A::Stream, A::Service)>>, A::Future>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            // Dropping the stream closes it: a client over the cap costs nothing more.
            tracing::warn!("connection refused: the server holds its maximum of open connections (server.max_connections)");
            return Either::Left(std::future::ready(Err(io::Error::other(
                "connection cap reached",
            ))));
        };
        let guarded = Guarded {
            inner: stream,
            _permit: permit,
            idle: self.idle,
            deadline: Box::pin(tokio::time::sleep(self.idle)),
        };
        Either::Right(self.inner.accept(guarded, service))
    }
}

/// A connection holding one of the cap's slots until it closes, closed with
/// `TimedOut` when no byte has moved either way for the idle timeout.
pub struct Guarded<I> {
    inner: I,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<I> Guarded<I> {
    fn active(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// A write's outcome: bytes written count as activity; a pending write is checked
    /// against the idle timeout.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.active();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.idle_check(cx).map(Err),
        }
    }

    /// `Pending` from the inner stream, unless the connection has been idle too long.
    fn idle_check(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle for longer than server.idle_timeout_secs",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Guarded<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(r)
            }
            Poll::Pending => self.idle_check(cx).map(Err),
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Guarded<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        self.wrote(cx, r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_file_descriptors_for_the_server() {
        assert_eq!(effective_cap(10_000, Some(1024)), 768);
        assert_eq!(effective_cap(500, Some(1 << 20)), 500);
        assert_eq!(effective_cap(500, None), 500);
        assert_eq!(effective_cap(500, Some(10)), 1);
    }
}
