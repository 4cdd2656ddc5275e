//! The server's input limits against callers that push them: a watch timeout of u64::MAX
//! seconds, YAML bodies that are alias bombs or 100,000 levels deep, and a history of large
//! legal updates. Each used to panic the handler, take the process's memory or grow without
//! bound; each is now refused or bounded, and the server goes on answering.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchParams};
use kube::{Client, Config, ResourceExt};
use kube_mem::ApiServer;

async fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client")
}

fn cm(name: &str, data: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"k": data}})).expect("cm")
}

/// `curl ARGS`, its stdout and exit code.
async fn curl(args: &[&str]) -> (String, Option<i32>) {
    let out = tokio::process::Command::new("curl").args(args).output().await.expect("curl runs");
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code())
}

/// POSTs `body` as YAML (through curl's stdin: it is too long for an argument).
async fn post_yaml(url: &str, body: &str) -> serde_json::Value {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("curl")
        .args(["-s", "-X", "POST", "-H", "Content-Type: application/yaml", "--data-binary", "@-", url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(body.as_bytes()).await.expect("write");
    drop(stdin);
    let out = child.wait_with_output().await.expect("output");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A watch asking for 18446744073709551615 seconds is given the longest watch there is
/// (MAX_WATCH_TIMEOUT_S): it stays open and delivers events. It used to overflow the deadline
/// and panic the watch's task, ending the stream at once.
#[tokio::test]
async fn a_huge_watch_timeout_is_clamped_and_the_watch_works() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    let url =
        format!("{}/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=18446744073709551615", server.url());
    let watch = tokio::spawn(async move { curl(&["-s", "-i", "--max-time", "3", &url]).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    cms.create(&PostParams::default(), &cm("seen", "x")).await.expect("create");
    let (out, code) = watch.await.expect("curl");
    assert!(out.to_ascii_lowercase().starts_with("http/1.1 200"), "{out}");
    assert!(out.contains("\"ADDED\"") && out.contains("\"seen\""), "the watch delivered the event: {out}");
    assert_eq!(code, Some(28), "curl gave up at its own --max-time, the server kept the watch open: {out}");
    assert_eq!(input_limits::watch_timeout(Some("18446744073709551615")).as_secs(), input_limits::MAX_WATCH_TIMEOUT_S);
    assert!(cms.get("seen").await.is_ok(), "the server answers on");
}

/// YAML request bodies are read within the YAML budget: an alias bomb and 100,000 levels of
/// nesting are 400s in well under a second (the bomb used to abort the whole process), and a
/// plain YAML body is still created.
#[tokio::test]
async fn hostile_yaml_bodies_are_400s_and_plain_yaml_works() {
    let server = ApiServer::start().await.expect("server");
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let mut laughs =
        String::from("metadata: {name: bomb}\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        laughs.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", ")));
    }
    let deep = format!("metadata: {{name: deep}}\ndata: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    for body in [laughs, deep] {
        let started = Instant::now();
        let status = post_yaml(&url, &body).await;
        assert_eq!(status["code"].as_u64(), Some(400), "{status}");
        assert!(status["message"].as_str().is_some_and(|m| m.contains("over the YAML budget")), "{status}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
    let plain = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {yes: 'on', n: '8'}\n";
    let created = post_yaml(&url, plain).await;
    assert_eq!(created["data"], serde_json::json!({"yes": "on", "n": "8"}), "{created}");
}

/// The watch history is bounded by bytes as well as by count: large legal updates compact the
/// oldest events (600 updates of 2.8 MB used to grow the server by 3.2 GB), a watch resuming
/// from before them gets 410 Gone and relists, a watch from now goes on.
#[tokio::test]
async fn the_watch_history_is_bounded_by_bytes() {
    let server = ApiServer::start().await.expect("server");
    let limit = 1024 * 1024;
    server.store().lock().expect("lock").storage.set_history_limit_bytes(limit);
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    let before = cms.list(&ListParams::default()).await.expect("list").metadata.resource_version.expect("rv");
    let mut latest = cms.create(&PostParams::default(), &cm("big", "")).await.expect("create");
    for i in 0..12 {
        latest.data = Some([("k".to_string(), format!("{i}{}", "x".repeat(300 * 1024)))].into());
        latest = cms.replace("big", &PostParams::default(), &latest).await.expect("replace");
    }
    let kept = server.store().lock().expect("lock").storage.history_bytes();
    assert!(kept <= limit, "the history holds {kept} bytes, more than its {limit}");
    assert!(kept > 300 * 1024, "the newest events are kept: {kept}");
    let code = match cms.watch(&WatchParams::default().timeout(1), &before).await {
        Err(kube::Error::Api(s)) => Some(s.code),
        Err(e) => panic!("{e:?}"),
        Ok(stream) => match std::pin::pin!(stream).try_next().await {
            Err(kube::Error::Api(s)) => Some(s.code),
            Ok(Some(kube::api::WatchEvent::Error(s))) => Some(s.code),
            other => panic!("{other:?}"),
        },
    };
    assert_eq!(code, Some(410), "a watch from before the compacted events is told to relist");
    let rv = latest.resource_version().expect("rv");
    let stream = cms.watch(&WatchParams::default().timeout(5), &rv).await.expect("watch from now");
    latest.data = Some([("k".to_string(), "small".to_string())].into());
    cms.replace("big", &PostParams::default(), &latest).await.expect("replace");
    let mut stream = std::pin::pin!(stream);
    // A bookmark may come first on a busy machine (the server sends them as kube-apiserver does).
    let ev = loop {
        match stream.try_next().await.expect("event").expect("one") {
            kube::api::WatchEvent::Bookmark(_) => continue,
            ev => break ev,
        }
    };
    assert!(matches!(ev, kube::api::WatchEvent::Modified(ref c) if c.name_any() == "big"), "{ev:?}");
}

/// An update or patch whose `metadata` is not an object (found by the `hub` fuzz target,
/// fuzz/crashes/hub/) is a 400 naming it. It used to panic with the store's lock held, after
/// which every request to the server answered 500 "store poisoned".
#[tokio::test]
async fn an_update_whose_metadata_is_not_an_object_is_a_400_and_the_server_goes_on() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    cms.create(&PostParams::default(), &cm("target", "x")).await.expect("create");
    let url = format!("{}/api/v1/namespaces/default/configmaps/target", server.url());
    for (method, content_type, body) in [
        ("PUT", "application/json", r#"{"metadata":"x"}"#),
        ("PATCH", "application/merge-patch+json", r#"{"metadata":1}"#),
        ("PATCH", "application/json-patch+json", r#"[{"op":"replace","path":"/metadata","value":"x"}]"#),
    ] {
        let (out, _) =
            curl(&["-s", "-X", method, "-H", &format!("Content-Type: {content_type}"), "--data", body, &url]).await;
        assert!(out.contains("metadata must be an object"), "{method} {content_type}: {out}");
    }
    assert_eq!(cms.get("target").await.expect("the server still answers").data.expect("data")["k"], "x");
}
