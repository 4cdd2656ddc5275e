//! The agent side: long-polls the relay for its member's next log request, reads the log from
//! its member's API server, and posts it back in chunks for as long as the relay takes them.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Request, StatusCode};
use kube::Client;
use kube::client::Body;

use super::{LOG_OPTIONS, LogRequest, MAX_CHUNK_BYTES, REQUESTS_PATH, RESPONSES_PATH, encode_query, is_name};
use kube_shell::backoff::Backoff;

/// A followed log that says nothing this long is asked whether its reader is still there (an
/// empty chunk, which the relay answers 410 once the reader left).
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// Serves the relay's log requests for this member until dropped. `relay` is a client whose
/// base URL is the relay's tunnel and whose credentials are the agent's hub token.
pub async fn run(relay: Client, member: Client, cluster: String) {
    let mut backoff = Backoff::default();
    loop {
        match next_request(&relay).await {
            Ok(Some(request)) => {
                backoff.succeed();
                let span =
                    tracing::info_span!("log", %cluster, pod = %format!("{}/{}", request.namespace, request.pod));
                tokio::spawn(tracing::Instrument::instrument(serve(relay.clone(), member.clone(), request), span));
            }
            Ok(None) => backoff.succeed(),
            Err(e) => {
                let wait = backoff.fail();
                tracing::warn!(%cluster, error = %kube_shell::error_chain(&e), ?wait, "the log relay did not answer");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The relay's long poll: a request, or none within its timeout.
async fn next_request(relay: &Client) -> Result<Option<LogRequest>, kube::Error> {
    let req = Request::get(REQUESTS_PATH).body(Body::empty()).map_err(kube::Error::HttpError)?;
    let resp = relay.send(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect_bytes().await?;
    match status {
        StatusCode::NO_CONTENT => Ok(None),
        StatusCode::OK => serde_json::from_slice(&body).map(Some).map_err(kube::Error::SerdeError),
        _ => Err(kube::Error::Api(
            kube::core::Status::failure(&String::from_utf8_lossy(&body), "RelayRefused")
                .with_code(status.as_u16())
                .boxed(),
        )),
    }
}

/// Posts one chunk; whether the relay wants more.
async fn post(relay: &Client, id: u64, status: StatusCode, chunk: Bytes, end: bool) -> bool {
    let path = format!("{RESPONSES_PATH}/{id}?status={}&end={end}", status.as_u16());
    let Ok(req) = Request::post(path).body(Body::from(chunk)) else { return false };
    matches!(relay.send(req).await, Ok(r) if r.status() == StatusCode::OK) && !end
}

/// Reads one log on the member and passes it on.
async fn serve(relay: Client, member: Client, request: LogRequest) {
    let LogRequest { id, namespace, pod, container, options } = request;
    if ![&namespace, &pod, &container].iter().all(|s| is_name(s)) {
        post(&relay, id, StatusCode::BAD_REQUEST, Bytes::from("not a namespace, pod and container"), true).await;
        return;
    }
    let mut query = vec![("container".to_string(), container)];
    query.extend(options.into_iter().filter(|(k, _)| LOG_OPTIONS.contains(&k.as_str())));
    let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/log?{}", encode_query(&query));
    let Ok(req) = Request::get(path).body(Body::empty()) else { return };
    let resp = match member.send(req).await {
        Ok(r) => r,
        Err(e) => {
            let message = format!("reading the log on the member: {}", kube_shell::error_chain(&e));
            post(&relay, id, StatusCode::BAD_GATEWAY, Bytes::from(message), true).await;
            return;
        }
    };
    let status = resp.status();
    let mut body = resp.into_body();
    loop {
        let chunk = match tokio::time::timeout(KEEPALIVE, body.frame()).await {
            Err(_) => Bytes::new(),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
            Ok(Some(Err(_)) | None) => {
                post(&relay, id, status, Bytes::new(), true).await;
                return;
            }
        };
        let mut rest = chunk;
        loop {
            let part = rest.split_to(rest.len().min(MAX_CHUNK_BYTES));
            if !post(&relay, id, status, part, false).await {
                return;
            }
            if rest.is_empty() {
                break;
            }
        }
    }
}
