//! Clients in the server's own process, without a socket: each request goes to the server's
//! thread as a task and its answer comes back as a stream, so a burst on the playground does
//! not spend a sixth of its CPU on loopback TCP and HTTP/1 framing (issue #39). The handler,
//! authentication, admission and the fault hooks are the same as over a connection; kubectl,
//! the SDK and everything outside the process still connect over HTTP.
//!
//! A client names its server by address, as a kubeconfig does: a server stopped and started
//! again on the same port (`Stopped::restart`) is reached again by the clients made before,
//! and a stopped one refuses them, as a closed port does.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, SizeHint};
use hyper::header::{AUTHORIZATION, HeaderValue};
use hyper::{Request, Response};

use super::Shared;
use super::http::{self, Body};

/// Why an in-process request got no answer: what a client over TCP sees as a connection error.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("connection refused: no API server on {addr}")]
    Refused { addr: SocketAddr },
    /// The server dropped the request unanswered: its client is cut off
    /// (`Faults::partition_client`), or a partition began while it was served.
    #[error("connection closed before the answer: the client is cut off from {addr}")]
    Dropped { addr: SocketAddr },
    #[error("connection closed: the API server on {addr} stopped")]
    Stopped { addr: SocketAddr },
    /// A partition cut the answer off while it was being read (a watch's stream, most often).
    #[error("connection reset: {addr} is partitioned")]
    Cut { addr: SocketAddr },
    #[error("the request's body could not be read")]
    Body(#[source] kube::Error),
    #[error("the bearer token is not a valid header value")]
    Token(#[source] hyper::header::InvalidHeaderValue),
}

/// A server's thread and state, as registered under its address.
#[derive(Clone)]
struct Endpoint {
    /// Tells a server's registration from its successor's on the same port.
    generation: u64,
    runtime: tokio::runtime::Handle,
    shared: Arc<Shared>,
}

fn servers() -> &'static Mutex<BTreeMap<SocketAddr, Endpoint>> {
    static SERVERS: OnceLock<Mutex<BTreeMap<SocketAddr, Endpoint>>> = OnceLock::new();
    SERVERS.get_or_init(Mutex::default)
}

/// Makes the server on `addr` reachable in-process; returns what [`unregister`] takes.
pub(crate) fn register(addr: SocketAddr, runtime: tokio::runtime::Handle, shared: Arc<Shared>) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let generation = NEXT.fetch_add(1, Ordering::Relaxed);
    servers().lock().unwrap_or_else(|e| e.into_inner()).insert(addr, Endpoint { generation, runtime, shared });
    generation
}

/// The server registered as `generation` on `addr` stopped; a successor's registration stays.
pub(crate) fn unregister(addr: SocketAddr, generation: u64) {
    let mut servers = servers().lock().unwrap_or_else(|e| e.into_inner());
    if servers.get(&addr).is_some_and(|e| e.generation == generation) {
        servers.remove(&addr);
    }
}

/// Whether an API server of this process serves `addr`.
pub fn serves(addr: SocketAddr) -> bool {
    servers().lock().unwrap_or_else(|e| e.into_inner()).contains_key(&addr)
}

/// A kube client of the in-process server on `addr` sending `token`, with kube's own retry of
/// 429 and 503 answers (as a client made from a kubeconfig has) and `default` its namespace.
pub fn client(addr: SocketAddr, token: &str) -> Result<kube::Client, LocalError> {
    client_in(addr, token, "default")
}

fn client_in(addr: SocketAddr, token: &str, namespace: &str) -> Result<kube::Client, LocalError> {
    let token = HeaderValue::from_str(&format!("Bearer {token}")).map_err(LocalError::Token)?;
    let transport =
        tower::ServiceExt::map_err(Transport { addr, token }, |e: LocalError| -> tower::BoxError { Box::new(e) });
    let service = tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()))
        .service(transport);
    Ok(kube::Client::new(service, namespace))
}

/// The in-process client a kubeconfig's `config` describes: its server one of this process's,
/// over plain HTTP, with a bearer token; its context's namespace the default. `None` otherwise
/// (TLS, another process, other credentials): the caller connects as usual.
pub fn client_for(config: &kube::Config) -> Option<Result<kube::Client, LocalError>> {
    use secrecy::ExposeSecret;
    let url = &config.cluster_url;
    if url.scheme_str() != Some("http") {
        return None;
    }
    let addr: SocketAddr = url.authority()?.as_str().parse().ok()?;
    let token = config.auth_info.token.as_ref()?;
    serves(addr).then(|| client_in(addr, token.expose_secret(), &config.default_namespace))
}

/// The transport: a request as a task on the server's thread.
#[derive(Clone)]
struct Transport {
    addr: SocketAddr,
    token: HeaderValue,
}

impl tower::Service<Request<kube::client::Body>> for Transport {
    type Response = Response<Answer>;
    type Error = LocalError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Answer>, LocalError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), LocalError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let (addr, token) = (self.addr, self.token.clone());
        Box::pin(async move {
            let endpoint = servers().lock().unwrap_or_else(|e| e.into_inner()).get(&addr).cloned();
            // A partitioned server closes new connections on accept.
            let Some(Endpoint { runtime, shared, .. }) = endpoint.filter(|e| !e.shared.faults.is_partitioned()) else {
                return Err(LocalError::Refused { addr });
            };
            // kube's body is not Sync, the handler's is (it holds the request across awaits):
            // read whole, as the server reads every body before acting on it.
            let (mut parts, body) = req.into_parts();
            let bytes = body.collect().await.map_err(LocalError::Body)?.to_bytes();
            parts.headers.insert(AUTHORIZATION, token);
            let req = Request::from_parts(parts, Full::new(bytes).map_err(|never| match never {}).boxed());
            let task = runtime.spawn(http::handle(shared.clone(), req));
            // A client that goes away (its task aborted, its future dropped) takes its request
            // along, as a closed connection does: the server drops what it was doing for it.
            let _gone = AbortOnDrop(task.abort_handle());
            // A partition cuts the request's connection, with the same effect.
            let answer = tokio::select! {
                biased;
                () = cut(shared.clone()) => return Err(LocalError::Dropped { addr }),
                answer = task => answer,
            };
            match answer {
                Ok(Some(response)) => Ok(response.map(|body| Answer { body, cut: Some(Box::pin(cut(shared))), addr })),
                Ok(None) => Err(LocalError::Dropped { addr }),
                Err(_) => Err(LocalError::Stopped { addr }),
            }
        })
    }
}

/// Aborts a request's task when its client's future is dropped (a no-op once it finished).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Ready once the server is partitioned: at once if it already is, else at the partition.
async fn cut(shared: Arc<Shared>) {
    let notified = shared.faults.cut.notified();
    tokio::pin!(notified);
    // Registered before the check, so a partition between the two is not missed.
    notified.as_mut().enable();
    if shared.faults.is_partitioned() {
        return;
    }
    notified.await;
}

/// An answer's body, which a partition cuts off (a watch's stream ends with an error, as a
/// reset connection's does, and the watcher starts again).
pub struct Answer {
    body: Body,
    /// `None` once the cut was reported: the stream then ends.
    cut: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer").field("addr", &self.addr).field("cut", &self.cut.is_none()).finish_non_exhaustive()
    }
}

impl hyper::body::Body for Answer {
    type Data = Bytes;
    type Error = LocalError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, LocalError>>> {
        let this = &mut *self;
        let Some(cut) = this.cut.as_mut() else { return Poll::Ready(None) };
        if cut.as_mut().poll(cx).is_ready() {
            this.cut = None;
            return Poll::Ready(Some(Err(LocalError::Cut { addr: this.addr })));
        }
        Pin::new(&mut this.body).poll_frame(cx).map_err(|never| match never {})
    }

    fn is_end_stream(&self) -> bool {
        self.cut.is_none() || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
