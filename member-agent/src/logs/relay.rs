//! The hub side: `stowage relay`. Two faces, each its own listener: the kubelet's
//! `containerLogs` API, which the hub's API server calls for pods on a member's virtual Node,
//! and the tunnel, which the members' agents call. A log request waits for its member's agent
//! to take it and answer; the answer streams back chunk by chunk, as fast as its reader reads.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::stowage::CLUSTER_LABEL;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use kube_shell::serve::{Body, Handler};
use tokio::sync::{mpsc, oneshot};

use super::{LOG_OPTIONS, LogRequest, MAX_CHUNK_BYTES, REQUESTS_PATH, RESPONSES_PATH, decode_query, is_name};
use crate::mirror;

/// How long a log request waits for its member's agent to answer before the reader gets 502.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an agent's long poll is held open when no request comes.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(25);
/// Log requests waiting for one member's agent, or streaming from it, at most.
pub const MAX_STREAMS_PER_MEMBER: usize = 64;
/// Of those, at most this many for one namespace: the hub's API server calls the relay as
/// itself, so the reader's identity is not known here, but its namespace is, and one tenant's
/// followers (`kubectl logs -f` times 64) must not leave every other namespace a 503.
pub const MAX_STREAMS_PER_NAMESPACE: usize = MAX_STREAMS_PER_MEMBER / 4;
/// How long a TokenReview's answer is trusted.
const REVIEW_TTL: Duration = Duration::from_secs(60);
/// Tokens remembered at most (past it the memory starts again).
const MAX_REVIEWS: usize = 1024;

/// The username prefix of agents on the hub (manifests/hub-member-access): the agent of member
/// X is `{prefix}X`, the rule the hub's status-writers policy also uses.
pub const AGENT_PREFIX: &str = "system:serviceaccount:stowage-system:stowage-agent-";

/// A log on its way: who may answer it, and where its answer goes.
struct Stream {
    cluster: String,
    namespace: String,
    status: Option<oneshot::Sender<StatusCode>>,
    chunks: mpsc::Sender<Bytes>,
}

/// One member's queue of requests, taken by its agent's long polls one at a time.
struct Queue {
    tx: mpsc::Sender<LogRequest>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<LogRequest>>>,
}

/// The relay's state: hub access (pods, TokenReviews), queues and streams.
pub struct Relay {
    hub: Client,
    agent_prefix: String,
    next_id: AtomicU64,
    queues: Mutex<BTreeMap<String, Queue>>,
    streams: Mutex<BTreeMap<u64, Stream>>,
    reviews: Mutex<BTreeMap<String, (Option<String>, Instant)>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("agent_prefix", &self.agent_prefix).finish_non_exhaustive()
    }
}

/// Whether one more log of `namespace` on `cluster` may be read, given the (cluster, namespace)
/// of those open: the member's limit, then the namespace's share of it.
fn room(open: &[(&str, &str)], cluster: &str, namespace: &str) -> Result<(), String> {
    let on_member = open.iter().filter(|(c, _)| *c == cluster).count();
    let in_namespace = open.iter().filter(|(c, n)| *c == cluster && *n == namespace).count();
    if on_member >= MAX_STREAMS_PER_MEMBER {
        return Err(format!("member {cluster}: {MAX_STREAMS_PER_MEMBER} logs are read already"));
    }
    if in_namespace >= MAX_STREAMS_PER_NAMESPACE {
        return Err(format!(
            "namespace {namespace}: {MAX_STREAMS_PER_NAMESPACE} logs on member {cluster} are read already"
        ));
    }
    Ok(())
}

fn text(code: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("text/plain"));
    r
}

impl Relay {
    pub fn new(hub: Client, agent_prefix: impl Into<String>) -> Arc<Relay> {
        Arc::new(Relay {
            hub,
            agent_prefix: agent_prefix.into(),
            next_id: AtomicU64::new(1),
            queues: Mutex::default(),
            streams: Mutex::default(),
            reviews: Mutex::default(),
        })
    }

    /// The kubelet face: `GET /containerLogs/{namespace}/{pod}/{container}`.
    pub fn kubelet_handler(self: &Arc<Self>) -> Handler {
        let relay = self.clone();
        Arc::new(move |req| {
            let relay = relay.clone();
            Box::pin(async move { relay.container_logs(req).await.unwrap_or_else(|e| e) })
        })
    }

    /// The tunnel face, for agents.
    pub fn tunnel_handler(self: &Arc<Self>) -> Handler {
        let relay = self.clone();
        Arc::new(move |req| {
            let relay = relay.clone();
            Box::pin(async move { relay.tunnel(req).await.unwrap_or_else(|e| e) })
        })
    }

    fn queue(&self, cluster: &str) -> (mpsc::Sender<LogRequest>, Arc<tokio::sync::Mutex<mpsc::Receiver<LogRequest>>>) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let q = queues.entry(cluster.to_string()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(MAX_STREAMS_PER_MEMBER);
            Queue { tx, rx: Arc::new(tokio::sync::Mutex::new(rx)) }
        });
        (q.tx.clone(), q.rx.clone())
    }

    #[tracing::instrument(name = "container_logs", skip_all, fields(path = %req.uri().path()))]
    async fn container_logs(&self, req: Request<Incoming>) -> Result<Response<Body>, Response<Body>> {
        let path = req.uri().path().to_string();
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let ["containerLogs", namespace, pod, container] = parts.as_slice() else {
            return Err(text(StatusCode::NOT_FOUND, format!("{path}: not found")));
        };
        if ![namespace, pod, container].iter().all(|s| is_name(s)) {
            return Err(text(StatusCode::BAD_REQUEST, format!("{path}: not a namespace, pod and container")));
        }
        let copy = Api::<Pod>::namespaced(self.hub.clone(), namespace).get_opt(pod).await.map_err(|e| {
            text(StatusCode::SERVICE_UNAVAILABLE, format!("reading pod {namespace}/{pod} on the hub: {e}"))
        })?;
        let cluster = copy
            .as_ref()
            .and_then(|p| {
                let cluster = p.metadata.labels.as_ref()?.get(CLUSTER_LABEL)?;
                let on = p.spec.as_ref()?.node_name.as_deref()?;
                (on == mirror::node_name(cluster)).then(|| cluster.clone())
            })
            .ok_or_else(|| {
                text(StatusCode::NOT_FOUND, format!("pod {namespace}/{pod} is not a member's pod on this hub"))
            })?;
        let options: Vec<(String, String)> = decode_query(req.uri().query().unwrap_or(""))
            .into_iter()
            .filter(|(k, _)| LOG_OPTIONS.contains(&k.as_str()))
            .collect();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (status_tx, status_rx) = oneshot::channel();
        let (chunks_tx, mut chunks_rx) = mpsc::channel::<Bytes>(8);
        let request = LogRequest {
            id,
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
            options,
        };
        let (queue, _) = self.queue(&cluster);
        let admitted = {
            let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            // Dead streams go first: readers that left while their follow was idle.
            streams.retain(|_, s| !s.chunks.is_closed());
            let open: Vec<(&str, &str)> =
                streams.values().map(|s| (s.cluster.as_str(), s.namespace.as_str())).collect();
            room(&open, &cluster, namespace).map(|()| {
                let stream = Stream {
                    cluster: cluster.clone(),
                    namespace: namespace.to_string(),
                    status: Some(status_tx),
                    chunks: chunks_tx,
                };
                streams.insert(id, stream);
            })
        };
        let admitted = admitted
            .and_then(|()| queue.try_send(request).map_err(|_| format!("member {cluster}: its agent's queue is full")));
        if let Err(why) = admitted {
            self.forget(id);
            return Err(text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}; try again later")));
        }
        let status = match tokio::time::timeout(ANSWER_TIMEOUT, status_rx).await {
            Ok(Ok(status)) => status,
            _ => {
                self.forget(id);
                return Err(text(
                    StatusCode::BAD_GATEWAY,
                    format!("the agent of member {cluster} did not answer within {}s", ANSWER_TIMEOUT.as_secs()),
                ));
            }
        };
        tracing::debug!(%cluster, id, %status, "streaming a member's log");
        let stream = futures::stream::poll_fn(move |cx| {
            chunks_rx.poll_recv(cx).map(|b| b.map(|b| Ok::<_, Infallible>(Frame::data(b))))
        });
        let mut r = Response::new(StreamBody::new(stream).boxed());
        *r.status_mut() = status;
        r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("text/plain"));
        Ok(r)
    }

    fn forget(&self, id: u64) {
        self.streams.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// The member whose agent holds `token`, by a TokenReview on the hub (remembered a minute).
    async fn member_of(&self, token: &str) -> Result<String, Response<Body>> {
        let unauthorized = || text(StatusCode::UNAUTHORIZED, "a hub token of a member's agent is required");
        if token.is_empty() {
            return Err(unauthorized());
        }
        let cached = self.reviews.lock().unwrap_or_else(|e| e.into_inner()).get(token).cloned();
        let member = match cached {
            Some((member, at)) if at.elapsed() < REVIEW_TTL => member,
            _ => {
                let review = TokenReview {
                    spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
                    ..Default::default()
                };
                let answer =
                    Api::<TokenReview>::all(self.hub.clone()).create(&PostParams::default(), &review).await.map_err(
                        |e| text(StatusCode::SERVICE_UNAVAILABLE, format!("reviewing the token on the hub: {e}")),
                    )?;
                let status = answer.status.unwrap_or_default();
                let member = status
                    .user
                    .and_then(|u| u.username)
                    .filter(|_| status.authenticated == Some(true))
                    .and_then(|u| u.strip_prefix(&self.agent_prefix).map(str::to_string))
                    .filter(|m| is_name(m));
                let mut reviews = self.reviews.lock().unwrap_or_else(|e| e.into_inner());
                if reviews.len() >= MAX_REVIEWS {
                    reviews.clear();
                }
                reviews.insert(token.to_string(), (member.clone(), Instant::now()));
                member
            }
        };
        member.ok_or_else(unauthorized)
    }

    #[tracing::instrument(name = "tunnel", skip_all, fields(path = %req.uri().path()))]
    async fn tunnel(&self, req: Request<Incoming>) -> Result<Response<Body>, Response<Body>> {
        let token = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("")
            .to_string();
        let member = self.member_of(&token).await?;
        let path = req.uri().path().to_string();
        if path == REQUESTS_PATH && req.method() == hyper::Method::GET {
            let (_, rx) = self.queue(&member);
            let mut rx = rx.lock().await;
            let next = tokio::time::timeout(POLL_TIMEOUT, rx.recv()).await;
            return match next {
                Ok(Some(request)) => {
                    let body = serde_json::to_vec(&request).unwrap_or_default();
                    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
                    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
                    Ok(r)
                }
                _ => Ok(text(StatusCode::NO_CONTENT, "")),
            };
        }
        let Some(id) = path
            .strip_prefix(RESPONSES_PATH)
            .and_then(|p| p.strip_prefix('/'))
            .and_then(|id| id.parse::<u64>().ok())
            .filter(|_| req.method() == hyper::Method::POST)
        else {
            return Err(text(StatusCode::NOT_FOUND, format!("{path}: not found")));
        };
        let q: BTreeMap<String, String> = decode_query(req.uri().query().unwrap_or("")).into_iter().collect();
        let end = q.get("end").is_some_and(|e| e == "true");
        let status = q.get("status").and_then(|s| s.parse::<u16>().ok()).and_then(|s| StatusCode::from_u16(s).ok());
        let (first, chunks) = {
            let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            match streams.get_mut(&id) {
                Some(s) if s.cluster == member => (s.status.take(), s.chunks.clone()),
                _ => return Err(text(StatusCode::NOT_FOUND, format!("no log request {id} for member {member}"))),
            }
        };
        if chunks.is_closed() {
            self.forget(id);
            return Err(text(StatusCode::GONE, "the reader has gone"));
        }
        if let Some(first) = first {
            let _ = first.send(status.unwrap_or(StatusCode::OK));
        }
        let chunk = match Limited::new(req.into_body(), MAX_CHUNK_BYTES).collect().await {
            Ok(c) => c.to_bytes(),
            Err(_) => {
                self.forget(id);
                return Err(text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("a chunk holds at most {MAX_CHUNK_BYTES} bytes"),
                ));
            }
        };
        if !chunk.is_empty() && chunks.send(chunk).await.is_err() {
            self.forget(id);
            return Err(text(StatusCode::GONE, "the reader has gone"));
        }
        if end {
            self.forget(id);
        }
        Ok(text(StatusCode::OK, ""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_namespace_takes_at_most_its_share_of_a_members_streams() {
        let noisy = vec![("east", "team-a"); MAX_STREAMS_PER_NAMESPACE];
        let refused = room(&noisy, "east", "team-a").expect_err("past its share");
        assert!(refused.starts_with("namespace team-a:"), "{refused}");
        // Another namespace on the same member, and the same namespace on another member, read on.
        assert_eq!(room(&noisy, "east", "team-b"), Ok(()));
        assert_eq!(room(&noisy, "west", "team-a"), Ok(()));
        // The member's own limit holds whatever the namespaces.
        let full: Vec<(&str, &str)> =
            (0..MAX_STREAMS_PER_MEMBER).map(|i| ("east", if i % 2 == 0 { "a" } else { "b" })).collect();
        assert!(room(&full, "east", "c").expect_err("member full").starts_with("member east:"));
    }
}
