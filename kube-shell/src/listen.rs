//! Accepting connections so that no client can end a listener or starve it: every HTTP server of
//! Stowage (the in-memory hub, `/healthz` and `/metrics`, the webhook, the log relay) accepts
//! through a [`Listener`].
//!
//! - An accept error (EMFILE when the process runs out of file descriptors, a connection reset
//!   before it was accepted) is logged, counted in [`accept_errors`] and retried after a short
//!   back-off: it never ends the accept loop, and never spins on it.
//! - At most [`Limits::connections`] are served at once; past that, new ones wait in the
//!   kernel's backlog until one closes, so idle sockets cannot use up the process's descriptors.
//! - A connection that sends no complete request head within [`Limits::header_read`] is closed,
//!   idle keep-alive connections and half-sent requests alike (kube-apiserver's own
//!   `ReadHeaderTimeout` is 32 s).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use hyper_util::rt::TokioTimer;
use prometheus_client::metrics::counter::Counter;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How much one listener holds open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// How long a client may take to send a request head, counted from when the connection is
    /// ready for one (so also how long an idle connection is kept).
    pub header_read: Duration,
}

impl Limits {
    /// An API server: watches hold connections for long, so many; heads as kube-apiserver.
    pub const API: Limits = Limits { connections: 4096, header_read: Duration::from_secs(32) };
    /// An endpoint the cluster calls (webhook, log relay).
    pub const ENDPOINT: Limits = Limits { connections: 512, header_read: Duration::from_secs(32) };
    /// `/healthz`, `/readyz` and `/metrics`: probes and a scraper.
    pub const HEALTH: Limits = Limits { connections: 64, header_read: Duration::from_secs(10) };
}

/// The longest pause after an accept error: descriptors freed by closing connections are
/// picked up within it.
const MAX_PAUSE: Duration = Duration::from_secs(1);

static ACCEPT_ERRORS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Accept errors of every listener in this process (registered as a metric by
/// [`crate::metrics::Shared`]).
pub fn accept_errors() -> Counter {
    ACCEPT_ERRORS.clone()
}

/// A TCP listener that accepts within [`Limits`].
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    limits: Limits,
    permits: Arc<Semaphore>,
}

/// An accepted connection and its place under the limit, given back when it is dropped.
#[derive(Debug)]
pub struct Accepted {
    pub stream: TcpStream,
    pub permit: OwnedSemaphorePermit,
}

impl Listener {
    pub fn new(inner: TcpListener, limits: Limits) -> Self {
        Listener { inner, limits, permits: Arc::new(Semaphore::new(limits.connections.max(1))) }
    }

    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }

    /// The next connection, once one is free under the limit. Never fails: errors are logged,
    /// counted and retried after a back-off.
    pub async fn accept(&self) -> Accepted {
        // The semaphore is never closed.
        let permit = self.permits.clone().acquire_owned().await.unwrap_or_else(|_| unreachable!("never closed"));
        let mut pause = Duration::from_millis(5);
        loop {
            match self.inner.accept().await {
                Ok((stream, _)) => return Accepted { stream, permit },
                Err(error) => {
                    ACCEPT_ERRORS.inc();
                    tracing::warn!(%error, addr = ?self.inner.local_addr().ok(), retry_in = ?pause, "accepting a connection failed");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
    }

    /// An HTTP/1 connection builder with this listener's head timeout.
    pub fn http1(&self) -> hyper::server::conn::http1::Builder {
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new()).header_read_timeout(self.limits.header_read);
        b
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use hyper::Response;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn serve(listener: Listener) {
        let listener = Arc::new(listener);
        loop {
            let Accepted { stream, permit } = listener.accept().await;
            let http = listener.http1();
            tokio::spawn(async move {
                let svc = service_fn(|_| async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok")))) });
                let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                drop(permit);
            });
        }
    }

    /// One GET on a fresh connection; `None` when nothing answers within `wait`.
    async fn get(addr: std::net::SocketAddr, wait: Duration) -> Option<String> {
        let exchange = async {
            let mut s = TcpStream::connect(addr).await.ok()?;
            s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.ok()?;
            let mut text = String::new();
            s.read_to_string(&mut text).await.ok()?;
            Some(text)
        };
        tokio::time::timeout(wait, exchange).await.ok().flatten()
    }

    #[tokio::test]
    async fn idle_and_half_sent_connections_past_the_limit_stall_it_only_until_the_head_timeout() {
        let limits = Limits { connections: 4, header_read: Duration::from_millis(500) };
        let listener = Listener::new(TcpListener::bind("127.0.0.1:0").await.expect("bind"), limits);
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(listener));
        assert!(get(addr, Duration::from_secs(5)).await.is_some_and(|t| t.ends_with("ok")), "serves at first");

        // Twice the limit: idle sockets, and sockets that send half a request head and stop.
        let mut held = Vec::new();
        for i in 0..8 {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            if i % 2 == 0 {
                s.write_all(b"GET / HTTP/1.1\r\nhost:").await.expect("half a head");
            }
            held.push(s);
        }
        // All four places are taken: a request now waits.
        assert_eq!(get(addr, Duration::from_millis(100)).await, None, "the limit holds new connections back");
        // The held ones are closed after the head timeout, so the listener serves again although
        // the clients never closed them.
        let answered = get(addr, Duration::from_secs(5)).await;
        assert!(answered.is_some_and(|t| t.ends_with("ok")), "serving again after the head timeout");
        let mut closed = 0;
        for s in &mut held {
            let mut buf = [0u8; 64];
            if matches!(tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await, Ok(Ok(_) | Err(_))) {
                closed += 1;
            }
        }
        assert_eq!(closed, 8, "every held connection was closed by the server");
        drop(held);
        assert!(get(addr, Duration::from_secs(5)).await.is_some(), "and keeps serving");
    }
}
