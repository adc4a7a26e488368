//! What keeps slow or idle clients from exhausting the server: a cap on open
//! connections and a smaller one per client (refused at accept, before any byte is
//! read), an idle timeout on each
//! connection (no byte in either direction for that long closes it), and a soft
//! file-descriptor limit raised to the hard one at start-up. The header-read and
//! body-read timeouts are set on the HTTP layer (see `server.rs`).

use std::collections::HashMap;
use std::future::{Future, Ready};
use std::io;
use std::net::IpAddr;
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

/// An acceptor that admits at most `cap` connections at once, at most `per_client`
/// of them from one client, and closes those idle for longer than `idle`; `A` runs
/// after it (the TLS handshake, or nothing).
#[derive(Clone)]
pub struct Guard<A> {
    inner: A,
    slots: Arc<Semaphore>,
    clients: Clients,
    idle: Duration,
}

impl<A> Guard<A> {
    pub fn new(inner: A, cap: usize, per_client: usize, idle: Duration) -> Self {
        Guard {
            inner,
            slots: Arc::new(Semaphore::new(cap)),
            clients: Clients {
                open: Arc::default(),
                cap: per_client,
            },
            idle,
        }
    }
}

/// A connection's peer, for the per-client cap.
pub trait Peer {
    fn peer_ip(&self) -> Option<IpAddr>;
}

impl Peer for tokio::net::TcpStream {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.peer_addr().ok().map(|a| a.ip())
    }
}

/// Open connections per client: an IPv4 address, or an IPv6 /64 (what one host is
/// usually given, so its other addresses are not other clients).
#[derive(Clone, Default)]
struct Clients {
    open: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    cap: usize,
}

fn client_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

impl Clients {
    /// A slot for `ip`'s client, or None when it holds its cap already.
    fn admit(&self, ip: IpAddr) -> Option<ClientSlot> {
        let client = client_of(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(client).or_default();
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            open: self.open.clone(),
            client,
        })
    }
}

/// One of a client's slots, given back when its connection closes.
pub struct ClientSlot {
    open: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    client: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.client);
            }
        }
    }
}

impl<A, I, S> Accept<I, S> for Guard<A>
where
    A: Accept<Guarded<I>, S>,
    I: Peer,
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
        let client = match stream.peer_ip() {
            Some(ip) => match self.clients.admit(ip) {
                Some(slot) => Some(slot),
                None => {
                    tracing::warn!(client = %client_of(ip), "connection refused: this client holds its maximum of open connections (server.max_connections_per_client)");
                    return Either::Left(std::future::ready(Err(io::Error::other(
                        "per-client connection cap reached",
                    ))));
                }
            },
            None => None,
        };
        let guarded = Guarded {
            inner: stream,
            _permit: permit,
            _client: client,
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
    _client: Option<ClientSlot>,
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
    fn a_client_is_an_ipv4_address_or_an_ipv6_slash_64() {
        let c = Clients {
            open: Arc::default(),
            cap: 2,
        };
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let a = c.admit(ip("2001:db8:1:2::1")).expect("first");
        let _b = c.admit(ip("2001:db8:1:2::ffff")).expect("second, same /64");
        assert!(
            c.admit(ip("2001:db8:1:2:3::9")).is_none(),
            "a third from the /64"
        );
        assert!(c.admit(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _v4 = c.admit(ip("10.0.0.1")).expect("v4");
        let _mapped = c.admit(ip("::ffff:10.0.0.1")).expect("the same v4, mapped");
        assert!(c.admit(ip("10.0.0.1")).is_none());
        drop(a);
        assert!(
            c.admit(ip("2001:db8:1:2::7")).is_some(),
            "a slot given back"
        );
    }

    #[test]
    fn the_cap_leaves_file_descriptors_for_the_server() {
        assert_eq!(effective_cap(10_000, Some(1024)), 768);
        assert_eq!(effective_cap(500, Some(1 << 20)), 500);
        assert_eq!(effective_cap(500, None), 500);
        assert_eq!(effective_cap(500, Some(10)), 1);
    }
}
