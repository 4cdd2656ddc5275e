//! `pods/{name}/log` through kube-rs' own log calls, as kubectl and the Kubeflow SDK read it:
//! from the in-process kubelet's logs (tail, since, timestamps, limit, follow until the pod
//! ends), refused as the API server refuses, and proxied to the kubelet endpoint a Node names.
//! And TokenReview, by which a proxy authenticates its callers.

use std::time::Duration;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, LogParams, PostParams};
use kube::{Client, Config};
use kube_mem::logs::LogKey;
use kube_mem::store::{Part, WriteOptions};
use kube_mem::{ApiServer, Requester, UserInfo};
use serde_json::json;

async fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client")
}

fn pod(name: &str, node: Option<&str>, phase: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "node", "image": "pytorch"}]},
        "status": {"phase": phase},
    }))
    .expect("pod")
}

async fn create_pod(server: &ApiServer, p: Pod) {
    let pods: Api<Pod> = Api::default_namespaced(client(server).await);
    let name = p.metadata.name.clone().expect("name");
    let status = serde_json::to_value(&p).expect("json");
    pods.create(&PostParams::default(), &p).await.expect("create");
    set_status(server, &name, status).await;
}

async fn set_status(server: &ApiServer, name: &str, pod: serde_json::Value) {
    let mut store = server.store().lock().expect("store");
    let rt = store.lookup("", "v1", "pods").cloned().expect("pods");
    let mut current = store.get(&rt, Some("default"), name).expect("pod");
    current["status"] = pod["status"].clone();
    store
        .update(Requester::InProcess, &rt, Some("default"), name, current, Part::Status, &WriteOptions::default())
        .expect("status");
}

fn write(server: &ApiServer, pod: &str, at_secs: i64, text: &str) {
    let key = LogKey { namespace: "default".into(), pod: pod.into(), container: "node".into() };
    server.store().lock().expect("store").logs.write(key, i128::from(at_secs) * 1_000_000_000, text);
}

#[tokio::test]
async fn a_pods_log_is_read_as_kubectl_reads_it_and_refused_as_the_api_server_refuses() {
    let server = ApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(client(&server).await);
    create_pod(&server, pod("p", Some("n1"), "Running")).await;
    let now = kube_mem::time::unix_seconds();
    write(&server, "p", now - 100, "old line\n");
    write(&server, "p", now - 5, "rank 0 of 2\nepoch 1\nepoch 2\n");

    assert_eq!(pods.logs("p", &LogParams::default()).await.expect("all"), "old line\nrank 0 of 2\nepoch 1\nepoch 2\n");
    let tail = LogParams { tail_lines: Some(2), ..Default::default() };
    assert_eq!(pods.logs("p", &tail).await.expect("tail"), "epoch 1\nepoch 2\n");
    let since = LogParams { since_seconds: Some(30), container: Some("node".into()), ..Default::default() };
    assert_eq!(pods.logs("p", &since).await.expect("since"), "rank 0 of 2\nepoch 1\nepoch 2\n");
    let limited = LogParams { limit_bytes: Some(5), ..Default::default() };
    assert_eq!(pods.logs("p", &limited).await.expect("limit"), "old l");
    let stamped = LogParams { timestamps: true, tail_lines: Some(1), ..Default::default() };
    let line = pods.logs("p", &stamped).await.expect("timestamps");
    assert!(line.ends_with("Z epoch 2\n") && line.starts_with("20"), "{line}");

    let refused = |r: Result<String, kube::Error>| match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    };
    let (code, message) =
        refused(pods.logs("p", &LogParams { container: Some("x".into()), ..Default::default() }).await);
    assert_eq!((code, message.as_str()), (400, "container x is not valid for pod p"));
    let (code, _) = refused(pods.logs("p", &LogParams { tail_lines: Some(-1), ..Default::default() }).await);
    assert_eq!(code, 422);
    let (code, message) = refused(pods.logs("p", &LogParams { previous: true, ..Default::default() }).await);
    assert_eq!((code, message.as_str()), (400, "previous terminated container \"node\" in pod \"p\" not found"));
    let (code, _) = refused(pods.logs("nope", &LogParams::default()).await);
    assert_eq!(code, 404);
    create_pod(&server, pod("waiting", Some("n1"), "Pending")).await;
    let (code, message) = refused(pods.logs("waiting", &LogParams::default()).await);
    assert_eq!(
        (code, message.as_str()),
        (400, "container \"node\" in pod \"waiting\" is waiting to start: ContainerCreating")
    );
    create_pod(&server, pod("unbound", None, "Pending")).await;
    assert_eq!(pods.logs("unbound", &LogParams::default()).await.expect("no node yet"), "");

    // The pod goes, and its logs with it.
    pods.delete("p", &Default::default()).await.expect("delete");
    let key = LogKey { namespace: "default".into(), pod: "p".into(), container: "node".into() };
    assert!(server.store().lock().expect("store").logs.read(&key, 0).0.is_empty());
}

#[tokio::test]
async fn a_followed_log_streams_new_lines_and_ends_with_the_pod() {
    let server = ApiServer::start().await.expect("server");
    let pods: Api<Pod> = Api::default_namespaced(client(&server).await);
    create_pod(&server, pod("p", Some("n1"), "Running")).await;
    write(&server, "p", 1, "first\n");
    let follow = LogParams { follow: true, ..Default::default() };
    let mut lines = pods.log_stream("p", &follow).await.expect("follow").lines();
    assert_eq!(lines.try_next().await.expect("read").as_deref(), Some("first"));
    write(&server, "p", 2, "second\n");
    let next = tokio::time::timeout(Duration::from_secs(5), lines.try_next()).await.expect("streamed in time");
    assert_eq!(next.expect("read").as_deref(), Some("second"));
    write(&server, "p", 3, "exit 0\n");
    set_status(&server, "p", json!({"status": {"phase": "Succeeded"}})).await;
    let rest: Vec<String> =
        tokio::time::timeout(Duration::from_secs(5), lines.try_collect()).await.expect("ends").expect("read");
    assert_eq!(rest, ["exit 0"], "the last lines, then the end of the stream");
}

/// The kubelet endpoint a Node names: the request goes there, path and query as the real API
/// server sends them, the kubelet's status and body back as they are.
#[tokio::test]
async fn a_pod_on_a_node_with_a_kubelet_endpoint_is_read_from_that_kubelet() {
    use http_body_util::Full;
    use hyper::body::Bytes;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    let uri = req.uri().to_string();
                    let code = if uri.contains("/missing/") { 404 } else { 200 };
                    let mut r = hyper::Response::new(Full::new(Bytes::from(format!("kubelet saw {uri}\n"))));
                    *r.status_mut() = hyper::StatusCode::from_u16(code).expect("code");
                    Ok::<_, std::convert::Infallible>(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    let server = ApiServer::start().await.expect("server");
    let c = client(&server).await;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "virtual"}})).expect("node");
    Api::<Node>::all(c.clone()).create(&PostParams::default(), &node).await.expect("node");
    {
        let mut store = server.store().lock().expect("store");
        let rt = store.lookup("", "v1", "nodes").cloned().expect("nodes");
        let mut n = store.get(&rt, None, "virtual").expect("node");
        n["status"] = json!({"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                             "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}});
        store
            .update(Requester::InProcess, &rt, None, "virtual", n, Part::Status, &WriteOptions::default())
            .expect("status");
    }
    create_pod(&server, pod("p", Some("virtual"), "Running")).await;
    create_pod(&server, pod("missing", Some("virtual"), "Running")).await;
    let pods: Api<Pod> = Api::default_namespaced(c);
    let got = pods.logs("p", &LogParams { tail_lines: Some(3), ..Default::default() }).await.expect("proxied");
    assert_eq!(got, "kubelet saw /containerLogs/default/p/node?&tailLines=3\n");
    assert!(matches!(pods.logs("missing", &LogParams::default()).await, Err(kube::Error::Api(s)) if s.code == 404));
    // A kubelet that is not there: 500 naming the address, as the real server's dial error.
    {
        let mut store = server.store().lock().expect("store");
        let rt = store.lookup("", "v1", "nodes").cloned().expect("nodes");
        let mut n = store.get(&rt, None, "virtual").expect("node");
        n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] = json!(1);
        store
            .update(Requester::InProcess, &rt, None, "virtual", n, Part::Status, &WriteOptions::default())
            .expect("status");
    }
    match pods.logs("p", &LogParams::default()).await {
        Err(kube::Error::Api(s)) => assert!(s.code == 500 && s.message.contains("127.0.0.1:1"), "{s:?}"),
        other => panic!("expected 500, got {other:?}"),
    }
}

#[tokio::test]
async fn a_token_review_says_whose_token_it_is_and_refuses_an_unknown_one() {
    let server = ApiServer::start().await.expect("server");
    server.add_user("agent-token", UserInfo::service_account("stowage-system", "stowage-agent-west"));
    let reviews: Api<TokenReview> = Api::all(client(&server).await);
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec { token: Some(token.into()), ..Default::default() },
        ..Default::default()
    };
    let known = reviews.create(&PostParams::default(), &review("agent-token")).await.expect("review");
    let status = known.status.expect("status");
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(
        status.user.and_then(|u| u.username).as_deref(),
        Some("system:serviceaccount:stowage-system:stowage-agent-west")
    );
    let unknown = reviews.create(&PostParams::default(), &review("forged")).await.expect("review");
    assert_eq!(unknown.status.and_then(|s| s.authenticated), Some(false));
    assert!(reviews.create(&PostParams::default(), &review("")).await.is_err(), "a review without a token is invalid");
}
