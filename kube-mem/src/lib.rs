//! An in-memory Kubernetes API server over HTTP on loopback, for tests and the playground
//! (clients in its own process reach it without a socket: [`local`]).
//! It follows the API conventions the controllers rely on: discovery, CRDs registered from
//! their YAML, get/list/watch with resourceVersions, bookmarks and 410 Gone, create, update
//! with optimistic concurrency, merge / JSON / strategic-merge patches and server-side apply
//! with field ownership (managedFields, conflicts, removal), the status subresource, finalizers
//! and deletionTimestamp, ownerReference garbage collection, and CRD schema validation with the
//! field named; RBAC when asked ([`rbac`]). Fault hooks let tests stop and restart it,
//! partition it, slow it and make it fail. docs/testing.md has the list of what it does not do.
//!
//! Layered as kube-apiserver is: `http` the handler (authentication, authorization, each verb's
//! request), [`admission`] the chain over a read-only [`view::ReadView`], [`store`] the write
//! path (one door per verb, strategies, the CRD registry, what a delete takes along) and
//! [`storage`] what etcd is (objects, resourceVersions, the watch history).

pub mod admission;
pub mod auth;
pub mod cel;
pub mod fields;
mod gc;
mod http;
pub mod local;
pub mod logs;
pub mod managed;
mod namespaces;
pub mod patch;
pub mod policy;
pub mod protobuf;
pub mod rbac;
pub mod resources;
pub mod schema;
pub mod selectors;
pub mod status;
pub mod storage;
pub mod store;
pub mod table;
pub mod time;
pub mod typed;
pub mod view;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use kube_shell::listen::{Accepted, Limits, Listener};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use auth::{Authenticator, Requester, UnknownTokens, UserInfo};
pub use status::ApiError;
pub use store::Store;

/// Faults a test can inject; each applies to requests from then on.
#[derive(Debug, Default)]
pub struct Faults {
    partitioned: AtomicBool,
    latency_ms: AtomicU64,
    fail_next: AtomicU32,
    fail_code: AtomicU32,
    /// Wakes open connections so a partition cuts them too, not only new ones.
    cut: tokio::sync::Notify,
    /// Clients (by bearer token) cut off from this server while others still reach it.
    cut_clients: Mutex<BTreeSet<String>>,
    /// Every request, when recording is on: what RBAC would be asked.
    audit: Mutex<Option<Vec<Access>>>,
}

/// One request as an RBAC authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// The bearer token the client sent; empty when none.
    pub user: String,
    /// Who the token authenticates as (see [`auth`]).
    pub username: String,
    /// get, list, watch, create, update, patch, delete or deletecollection.
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Faults {
    /// Refuse connections (close them on accept) and end open watches.
    pub fn partition(&self, on: bool) {
        self.partitioned.store(on, Ordering::SeqCst);
        if on {
            self.cut.notify_waiters();
        }
    }

    pub fn is_partitioned(&self) -> bool {
        self.partitioned.load(Ordering::SeqCst)
    }

    /// Cut one client (by the bearer token its kubeconfig carries) off: its requests fail as
    /// unreachable and its open watches end, while other clients carry on — a network partition
    /// between one agent and the hub.
    pub fn partition_client(&self, token: &str, on: bool) {
        let mut cut = self.cut_clients.lock().unwrap_or_else(|e| e.into_inner());
        if on {
            cut.insert(token.to_string());
        } else {
            cut.remove(token);
        }
    }

    pub(crate) fn is_client_cut(&self, token: &str) -> bool {
        self.cut_clients.lock().unwrap_or_else(|e| e.into_inner()).contains(token)
    }

    /// Starts recording every request (see [`Faults::accesses`]).
    pub fn record_accesses(&self) {
        *self.audit.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    }

    /// The requests recorded since [`Faults::record_accesses`], deduplicated and sorted.
    pub fn accesses(&self) -> Vec<Access> {
        let mut all = self.requests();
        all.sort();
        all.dedup();
        all
    }

    /// Every request recorded since [`Faults::record_accesses`], in the order served: what the
    /// burst example counts per TrainJob.
    pub fn requests(&self) -> Vec<Access> {
        self.audit.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
    }

    pub(crate) fn record(&self, access: impl FnOnce() -> Access) {
        if let Some(log) = self.audit.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            log.push(access());
        }
    }

    pub fn set_latency(&self, d: Duration) {
        self.latency_ms.store(d.as_millis() as u64, Ordering::SeqCst);
    }

    pub(crate) fn latency(&self) -> Option<Duration> {
        Some(self.latency_ms.load(Ordering::SeqCst)).filter(|&ms| ms > 0).map(Duration::from_millis)
    }

    /// The next `n` requests fail with `code` (500 or 429).
    pub fn fail_next(&self, n: u32, code: u16) {
        self.fail_code.store(u32::from(code), Ordering::SeqCst);
        self.fail_next.store(n, Ordering::SeqCst);
    }

    pub(crate) fn take_failure(&self) -> Option<u16> {
        self.fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| self.fail_code.load(Ordering::SeqCst) as u16)
    }
}

#[derive(Debug)]
pub struct Shared {
    pub store: Mutex<Store>,
    pub faults: Faults,
    /// Tokens and the users they authenticate as.
    pub auth: Mutex<Authenticator>,
    /// Who may do what: everyone everything, or RBAC.
    pub authorization: Mutex<rbac::Authorization>,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            store: Mutex::new(Store::new()),
            faults: Faults::default(),
            auth: Mutex::default(),
            authorization: Mutex::default(),
        }
    }
}

/// A running server. Dropping it stops it.
pub struct ApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: ServerThread,
}

/// The server's own thread and runtime, as if it were its own process: a request or a
/// simulated controller holding the store's lock blocks this thread only, never the runtime of
/// the controllers under test (whose two workers a blocked lock would otherwise stall).
struct ServerThread {
    runtime: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Stops the runtime (every connection and watch ends with it) and waits for the thread.
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").field("addr", &self.addr).finish()
    }
}

/// A stopped server: its port and, unless dropped, its state.
#[derive(Clone)]
pub struct Stopped {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stopped").field("addr", &self.addr).finish()
    }
}

impl ApiServer {
    /// Starts a server on a free loopback port.
    pub async fn start() -> std::io::Result<ApiServer> {
        Self::serve("127.0.0.1:0".parse().map_err(std::io::Error::other)?, Arc::new(Shared::new())).await
    }

    async fn serve(addr: SocketAddr, shared: Arc<Shared>) -> std::io::Result<ApiServer> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let s = shared.clone();
        let generation = local::register(addr, handle.clone(), shared.clone());
        let thread = std::thread::Builder::new().name(format!("apiserver-{}", addr.port())).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else { return };
                // Within limits, as kube-apiserver: idle or half-sent connections are closed
                // after the head timeout, an accept error never ends the loop.
                let listener = Listener::new(listener, Limits::API);
                let mut conns = JoinSet::new();
                let accept = async {
                    loop {
                        let Accepted { stream, permit } = listener.accept().await;
                        if s.faults.is_partitioned() {
                            drop(stream);
                            continue;
                        }
                        let http = listener.http1();
                        let s = s.clone();
                        let s2 = s.clone();
                        conns.spawn(async move {
                            let svc = service_fn(move |req| {
                                let s = s.clone();
                                // A cut-off client's connection drops without an answer, as over
                                // a broken network (an error status would be retried instead).
                                async move {
                                    let req = req.map(|b: hyper::body::Incoming| {
                                        b.map_err(|e| http::BodyError(e.to_string())).boxed()
                                    });
                                    http::handle(s, req).await.ok_or(http::Partitioned)
                                }
                            });
                            let conn = http.serve_connection(TokioIo::new(stream), svc);
                            let cut = s2.faults.cut.notified();
                            tokio::select! {
                                biased;
                                _ = cut => {}
                                _ = conn => {}
                            }
                            drop(permit);
                        });
                        while conns.try_join_next().is_some() {}
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
            local::unregister(addr, generation);
            // The runtime drops here with every connection, watch and spawned task on it.
        })?;
        Ok(ApiServer { addr, shared, thread: ServerThread { runtime: handle, stop: Some(stop), thread: Some(thread) } })
    }

    /// Runs `task` on the server's own thread: for simulated controllers that work on the store
    /// under its lock, as the real ones would inside the cluster.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.thread.runtime.spawn(task)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Direct access to the objects, for assertions and for fixtures that skip HTTP.
    pub fn store(&self) -> &Mutex<Store> {
        &self.shared.store
    }

    /// A kubeconfig pointing at this server, with the token `name`: who that is depends on
    /// [`ApiServer::add_user`] (an unregistered token is anonymous, or refused: see [`auth`]).
    /// The token also identifies the client to fault hooks and the access log.
    pub fn kubeconfig(&self, name: &str) -> String {
        self.kubeconfig_as(name, name)
    }

    /// A kubeconfig pointing at this server, its context named `name`, its client sending
    /// `token`. Plain HTTP: the token travels in the clear.
    pub fn kubeconfig_as(&self, name: &str, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\ncurrent-context: {name}\nusers:\n- name: {name}\n  user: {{token: {token:?}}}\n",
            self.url()
        )
    }

    /// Requests carrying `token` authenticate as `user` from now on.
    pub fn add_user(&self, token: &str, user: UserInfo) {
        self.shared.auth.lock().unwrap_or_else(|e| e.into_inner()).add(token, user);
    }

    /// Who may do what from now on. Turning RBAC on creates the bootstrap roles clients depend
    /// on (see [`rbac::bootstrap`]) where they are missing; every other grant is a Role or
    /// ClusterRole and its binding, written to the server like any object.
    pub fn set_authorization(&self, authorization: rbac::Authorization) -> Result<(), ApiError> {
        if authorization == rbac::Authorization::Rbac {
            let mut store = self.shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
            for (plural, obj) in rbac::bootstrap() {
                let rt = store
                    .lookup(rbac::GROUP, "v1", plural)
                    .cloned()
                    .ok_or_else(|| ApiError::not_found("resource", plural))?;
                match store.create(auth::Requester::InProcess, &rt, None, obj, &store::WriteOptions::default()) {
                    Err(e) if e.code != 409 => return Err(e),
                    _ => {}
                }
            }
        }
        *self.shared.authorization.lock().unwrap_or_else(|e| e.into_inner()) = authorization;
        Ok(())
    }

    /// What a request with an unregistered token (or none) gets: anonymous (the default) or 401.
    pub fn set_unknown_tokens(&self, unknown: UnknownTokens) {
        self.shared.auth.lock().unwrap_or_else(|e| e.into_inner()).set_unknown(unknown);
    }

    /// A kube client of this server that identifies itself as `token` (see [`Faults::partition_client`]),
    /// in-process ([`local`]): no socket, the same handler and faults.
    pub fn client_as(&self, token: &str) -> Result<kube::Client, kube::Error> {
        local::client(self.addr, token).map_err(|e| kube::Error::Service(Box::new(e)))
    }

    /// [`ApiServer::client_as`] over loopback TCP and HTTP/1, as a client in another process
    /// connects: for tests of the connection itself.
    pub fn tcp_client_as(&self, token: &str) -> Result<kube::Client, kube::Error> {
        let uri = self.url().parse().map_err(|e| kube::Error::Service(Box::new(e)))?;
        let mut config = kube::Config::new(uri);
        config.auth_info.token = Some(token.to_string().into());
        kube::Client::try_from(config)
    }

    /// Stops serving: the port is released and every connection, watches included, is cut.
    pub async fn stop(self) -> Stopped {
        let ApiServer { addr, shared, thread } = self;
        thread.shutdown().await;
        Stopped { addr, shared }
    }
}

impl Stopped {
    /// Serves again on the same port, with the state it had or, if `keep_state` is false, empty.
    pub async fn restart(self, keep_state: bool) -> std::io::Result<ApiServer> {
        let shared = if keep_state { self.shared } else { Arc::new(Shared::new()) };
        // The old listener's port may take a moment to free.
        let mut last = None;
        for _ in 0..50 {
            match ApiServer::serve(self.addr, shared.clone()).await {
                Ok(s) => return Ok(s),
                Err(e) => {
                    last = Some(e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("could not rebind")))
    }
}
