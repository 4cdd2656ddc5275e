//! The in-memory API server behaves like Kubernetes on every point the controllers rely on,
//! as seen through kube-rs: discovery of CRDs registered over the API, optimistic concurrency,
//! the status subresource, finalizers, garbage collection, schema rejection naming the field,
//! selectors and paging, watches with bookmarks and relist after 410, and the fault hooks.

use std::time::Duration;

use api::trainer::TrainJob;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Config, ResourceExt};
use kube_mem::ApiServer;
use serde_json::json;

const TRAINJOB_CRD: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/trainer.kubeflow.org_trainjobs.yaml");

async fn client(server: &ApiServer) -> Client {
    let config = Config::new(server.url().parse().expect("url"));
    Client::try_from(config).expect("client")
}

async fn with_trainjob_crd(server: &ApiServer) -> Client {
    let c = client(server).await;
    let crd: CustomResourceDefinition =
        input_limits::yaml::from_str(&std::fs::read_to_string(TRAINJOB_CRD).expect("crd")).expect("yaml");
    Api::<CustomResourceDefinition>::all(c.clone()).create(&PostParams::default(), &crd).await.expect("crd created");
    c
}

fn trainjob(name: &str, nodes: i64) -> TrainJob {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": nodes}}
    }))
    .expect("trainjob")
}

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})).expect("cm")
}

#[tokio::test]
async fn crds_registered_over_the_api_are_discovered_and_served() {
    let server = ApiServer::start().await.expect("server");
    let c = with_trainjob_crd(&server).await;
    let discovery = kube::discovery::Discovery::new(c.clone()).run().await.expect("discovery");
    assert!(discovery.groups().any(|g| g.name() == "trainer.kubeflow.org"));
    let tjs: Api<TrainJob> = Api::namespaced(c, "default");
    let created = tjs.create(&PostParams::default(), &trainjob("a", 2)).await.expect("create");
    assert!(created.uid().is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    // The CRD's defaults are applied, as the real server does.
    assert_eq!(created.spec.runtime_ref.kind.as_deref(), Some("ClusterTrainingRuntime"));
    assert_eq!(tjs.get("a").await.expect("get").spec.trainer.and_then(|t| t.num_nodes), Some(2));
}

#[tokio::test]
async fn a_stale_resource_version_is_a_409_conflict() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    let first = cms.create(&PostParams::default(), &cm("c", json!({}))).await.expect("create");
    let mut a = first.clone();
    a.data = Some([("k".to_string(), "a".to_string())].into());
    cms.replace("c", &PostParams::default(), &a).await.expect("first writer wins");
    let mut b = first;
    b.data = Some([("k".to_string(), "b".to_string())].into());
    let err = cms.replace("c", &PostParams::default(), &b).await.expect_err("stale");
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"), "{err:?}");
    let dup = cms.create(&PostParams::default(), &cm("c", json!({}))).await.expect_err("exists");
    assert!(matches!(dup, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"));
}

#[tokio::test]
async fn spec_and_status_are_written_separately() {
    let server = ApiServer::start().await.expect("server");
    let tjs: Api<TrainJob> = Api::default_namespaced(with_trainjob_crd(&server).await);
    tjs.create(&PostParams::default(), &trainjob("s", 1)).await.expect("create");
    let status = json!({"status": {"conditions": [{"type": "Complete", "status": "True", "reason": "Done", "message": "ok",
                                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
                        "spec": {"trainer": {"numNodes": 9}}});
    let after = tjs.patch_status("s", &PatchParams::default(), &Patch::Merge(&status)).await.expect("status patch");
    assert_eq!(after.spec.trainer.as_ref().and_then(|t| t.num_nodes), Some(1), "spec untouched by /status");
    assert_eq!(after.status.as_ref().map(|s| s.conditions.len()), Some(1));
    assert_eq!(after.metadata.generation, Some(1), "a status write does not bump generation");
    let spec = json!({"spec": {"suspend": true}, "status": {"conditions": []}});
    let after = tjs.patch("s", &PatchParams::default(), &Patch::Merge(&spec)).await.expect("spec patch");
    assert_eq!(after.status.map(|s| s.conditions.len()), Some(1), "status untouched by the main resource");
    assert_eq!(after.metadata.generation, Some(2));
}

/// A status patch is applied to the status and metadata alone (the server copies the rest of
/// the stored object, as kube-apiserver's status strategies do): what it says of anything else
/// is ignored, its resourceVersion is still a precondition, and a JSON patch still sees, and
/// may test, the whole object.
#[tokio::test]
async fn a_status_patch_keeps_only_the_status_and_still_checks_the_rest() {
    let server = ApiServer::start().await.expect("server");
    let tjs: Api<TrainJob> = Api::default_namespaced(with_trainjob_crd(&server).await);
    let created = tjs.create(&PostParams::default(), &trainjob("p", 3)).await.expect("create");
    let condition = |t: &str| {
        json!({"type": t, "status": "True", "reason": "R", "message": "m",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let status = json!({"metadata": {"labels": {"ignored": "yes"}}, "spec": {"suspend": true},
                        "status": {"conditions": [condition("Created")]}});
    let after = tjs.patch_status("p", &PatchParams::default(), &Patch::Merge(&status)).await.expect("status patch");
    assert_eq!(after.spec.trainer.as_ref().and_then(|t| t.num_nodes), Some(3));
    assert_ne!(after.spec.suspend, Some(true), "the spec is the stored one");
    assert!(after.labels().get("ignored").is_none(), "metadata other than managedFields is the stored one");
    assert_eq!(after.status.as_ref().map(|s| s.conditions[0].type_.as_str()), Some("Created"));
    assert!(
        after.managed_fields().iter().any(|m| m.subresource.as_deref() == Some("status")),
        "the status write is recorded under its subresource"
    );
    // The stale resourceVersion of the object as created: a conflict, nothing written.
    let stale = json!({"metadata": {"resourceVersion": created.resource_version()},
                       "status": {"conditions": [condition("Failed")]}});
    let err = tjs.patch_status("p", &PatchParams::default(), &Patch::Merge(&stale)).await.expect_err("stale");
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409), "{err:?}");
    // A JSON patch tests the spec it does not write, and fails when the test does.
    let tested = |nodes: i64| {
        Patch::<()>::Json(
            serde_json::from_value(json!([
                {"op": "test", "path": "/spec/trainer/numNodes", "value": nodes},
                {"op": "replace", "path": "/status/conditions/0/type", "value": "Complete"}
            ]))
            .expect("json patch"),
        )
    };
    tjs.patch_status("p", &PatchParams::default(), &tested(4)).await.expect_err("the test fails on the spec");
    let after = tjs.patch_status("p", &PatchParams::default(), &tested(3)).await.expect("the test holds");
    assert_eq!(after.status.as_ref().map(|s| s.conditions[0].type_.as_str()), Some("Complete"));
    // A status emptied by merge patch is refused by the CRD's schema (status needs a property),
    // and the status stays; a status removed by merge patch is removed.
    let empty = Patch::Merge(json!({"status": {"conditions": null}}));
    let err = tjs.patch_status("p", &PatchParams::default(), &empty).await.expect_err("empty");
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 422), "{err:?}");
    let cleared =
        tjs.patch_status("p", &PatchParams::default(), &Patch::Merge(json!({"status": null}))).await.expect("clear");
    assert!(cleared.status.is_none());
    assert_eq!(tjs.get("p").await.expect("get").spec.trainer.and_then(|t| t.num_nodes), Some(3));
}

#[tokio::test]
async fn finalizers_hold_deletion_and_owners_take_their_dependents_along() {
    let server = ApiServer::start().await.expect("server");
    let c = with_trainjob_crd(&server).await;
    let tjs: Api<TrainJob> = Api::default_namespaced(c.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(c);
    let mut tj = trainjob("f", 1);
    tj.metadata.finalizers = Some(vec!["stowage.dev/cleanup".into()]);
    let tj = tjs.create(&PostParams::default(), &tj).await.expect("create");
    let mut owned = cm("owned", json!({}));
    owned.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "trainer.kubeflow.org/v1alpha1".into(),
        kind: "TrainJob".into(),
        name: "f".into(),
        uid: tj.uid().expect("uid"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    cms.create(&PostParams::default(), &owned).await.expect("dependent");
    tjs.delete("f", &DeleteParams::default()).await.expect("delete accepted");
    let held = tjs.get("f").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(cms.get("owned").await.is_ok(), "dependents stay while the owner is finalizing");
    tjs.patch("f", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("unfinalize");
    assert!(tjs.get_opt("f").await.expect("get").is_none(), "gone once finalizers are empty");
    assert!(cms.get_opt("owned").await.expect("get").is_none(), "garbage-collected");
}

#[tokio::test]
async fn schema_violations_are_422_naming_the_field() {
    let server = ApiServer::start().await.expect("server");
    let c = with_trainjob_crd(&server).await;
    let raw: Api<kube::api::DynamicObject> = Api::default_namespaced_with(
        c,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
            "trainjobs",
        ),
    );
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "bad"},
        "spec": {"runtimeRef": {"name": "x"}, "trainer": {"numNodes": "two"}}
    }))
    .expect("object");
    let err = raw.create(&PostParams::default(), &bad).await.expect_err("rejected");
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("spec.trainer.numNodes"), "{}", s.message);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn selectors_and_paging() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    for i in 0..5 {
        let tier = if i % 2 == 0 { "gpu" } else { "cpu" };
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), json!({"tier": tier}))).await.expect("create");
    }
    let gpu = cms.list(&ListParams::default().labels("tier=gpu")).await.expect("list");
    assert_eq!(gpu.items.len(), 3);
    let named = cms.list(&ListParams::default().fields("metadata.name=c1")).await.expect("list");
    assert_eq!(named.items.len(), 1);
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(2);
    loop {
        let page = cms.list(&params).await.expect("page");
        names.extend(page.items.iter().map(|c| c.name_any()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
}

#[tokio::test]
async fn a_reflector_relists_after_410_and_sees_everything() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    cms.create(&PostParams::default(), &cm("before", json!({}))).await.expect("create");
    let (reader, writer) = reflector::store();
    let stream =
        reflector(writer, watcher(cms.clone(), watcher::Config { bookmarks: true, ..watcher::Config::default() }))
            .applied_objects();
    let task = tokio::spawn(async move {
        let mut s = std::pin::pin!(stream);
        // The 410 comes out of the stream as an error; polling on is what makes it relist.
        while s.next().await.is_some() {}
    });
    reader.wait_until_ready().await.expect("ready");
    let sees = |want: &'static [&'static str]| {
        let reader = reader.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let mut names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
                names.sort();
                if names == want {
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "reflector has {names:?}, not {want:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // An object seen through the watch: it is open, so the expiry below reaches it as a 410.
    cms.create(&PostParams::default(), &cm("during", json!({}))).await.expect("create");
    sees(&["before", "during"]).await;
    // Expire every watch: history is gone, so the open watch gets 410 and must relist.
    server.store().lock().expect("lock").storage.expire_watches();
    cms.create(&PostParams::default(), &cm("after", json!({}))).await.expect("create");
    sees(&["after", "before", "during"]).await;
    task.abort();
}

#[tokio::test]
async fn watches_deliver_bookmarks_and_events_in_order() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    let list = cms.list(&ListParams::default()).await.expect("list");
    let rv = list.metadata.resource_version.expect("rv");
    let wp = kube::api::WatchParams { bookmarks: true, ..kube::api::WatchParams::default() }.timeout(5);
    let mut stream = cms.watch(&wp, &rv).await.expect("watch").boxed();
    cms.create(&PostParams::default(), &cm("w", json!({}))).await.expect("create");
    cms.delete("w", &DeleteParams::default()).await.expect("delete");
    let mut seen = Vec::new();
    while let Some(ev) = stream.try_next().await.expect("event") {
        match ev {
            kube::api::WatchEvent::Added(o) => seen.push(format!("added {}", o.name_any())),
            kube::api::WatchEvent::Deleted(o) => seen.push(format!("deleted {}", o.name_any())),
            kube::api::WatchEvent::Bookmark(_) => seen.push("bookmark".into()),
            _ => {}
        }
        if seen.iter().any(|s| s == "bookmark") && seen.iter().any(|s| s.starts_with("deleted")) {
            break;
        }
    }
    let events: Vec<&String> = seen.iter().filter(|s| *s != "bookmark").collect();
    assert_eq!(events, ["added w", "deleted w"]);
}

/// The hooks act alike on a client over TCP and on one in the server's process
/// (`ApiServer::client_as`, `kube_mem::local`).
#[tokio::test]
async fn fault_hooks_fail_partition_and_restart() {
    for in_process in [false, true] {
        fault_hooks_on(in_process).await;
    }
}

async fn fault_hooks_on(in_process: bool) {
    let server = ApiServer::start().await.expect("server");
    let c = if in_process { server.client_as("someone") } else { server.tcp_client_as("someone") }.expect("client");
    let cms: Api<ConfigMap> = Api::default_namespaced(c);
    cms.create(&PostParams::default(), &cm("kept", json!({}))).await.expect("create");
    server.faults().fail_next(2, 500);
    for _ in 0..2 {
        let e = cms.get("kept").await.expect_err("injected");
        assert!(matches!(e, kube::Error::Api(ref s) if s.code == 500), "{e:?}");
    }
    assert!(cms.get("kept").await.is_ok(), "then it answers again");
    server.faults().fail_next(1, 429);
    let raw = tokio::process::Command::new("curl")
        .args(["-s", "-i", &format!("{}/api/v1/namespaces/default/configmaps/kept", server.url())])
        .output()
        .await
        .expect("curl");
    let raw = String::from_utf8_lossy(&raw.stdout).to_ascii_lowercase();
    assert!(raw.starts_with("http/1.1 429") && raw.contains("retry-after: 1"), "{raw}");
    server.faults().fail_next(1, 429);
    assert!(cms.get("kept").await.is_ok(), "kube-rs waits out a 429 and retries");
    server.faults().partition(true);
    assert!(cms.get("kept").await.is_err(), "partitioned");
    server.faults().partition(false);
    assert!(cms.get("kept").await.is_ok());
    // A client that goes away mid-request takes the request along, as a closed connection does.
    server.faults().set_latency(Duration::from_millis(500));
    let gone = tokio::spawn({
        let cms = cms.clone();
        async move { cms.create(&PostParams::default(), &cm("never", json!({}))).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    gone.abort();
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.faults().set_latency(Duration::ZERO);
    assert!(cms.get_opt("never").await.expect("get").is_none(), "a request its client left was not carried out");
    let stopped = server.stop().await;
    assert!(cms.get("kept").await.is_err(), "stopped");
    let server = stopped.clone().restart(true).await.expect("restart");
    assert!(cms.get("kept").await.is_ok(), "state kept across a restart");
    let stopped = server.stop().await;
    let _server = stopped.restart(false).await.expect("restart empty");
    assert!(cms.get_opt("kept").await.expect("get").is_none(), "state lost when asked to");
}

/// An in-process client sees what one over a connection sees: a partition ends its watch and
/// drops the request it was waiting on, a client cut off alone is refused while others are
/// served, and the server's own checks (a bad token's 401) answer as over HTTP.
#[tokio::test]
async fn an_in_process_client_is_cut_off_as_a_connection_is() {
    let server = ApiServer::start().await.expect("server");
    let a: Api<ConfigMap> = Api::default_namespaced(server.client_as("agent-a").expect("client"));
    let b: Api<ConfigMap> = Api::default_namespaced(server.client_as("agent-b").expect("client"));
    a.create(&PostParams::default(), &cm("one", json!({}))).await.expect("create");

    let mut watch = a.watch(&kube::api::WatchParams::default(), "0").await.expect("watch").boxed();
    assert!(matches!(watch.try_next().await, Ok(Some(_))), "the watch delivers the ConfigMap");
    server.faults().partition(true);
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match watch.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "a partition ends an open watch");
    assert!(b.get("one").await.is_err(), "a partitioned server refuses requests");
    server.faults().partition(false);

    // A request the server sits on (30 s of latency) is dropped when a partition begins, as
    // its connection would be, not answered once the latency is over.
    server.faults().set_latency(Duration::from_secs(30));
    let slow = tokio::spawn({
        let a = a.clone();
        async move { a.get("one").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.faults().partition(true);
    let dropped = tokio::time::timeout(Duration::from_secs(20), slow).await.expect("dropped at the partition");
    assert!(dropped.expect("task").is_err(), "the request got no answer");
    server.faults().partition(false);
    server.faults().set_latency(Duration::ZERO);

    server.faults().partition_client("agent-a", true);
    assert!(a.get("one").await.is_err(), "the cut-off client is refused");
    assert!(b.get("one").await.is_ok(), "another client is served");
    server.faults().partition_client("agent-a", false);
    assert!(a.get("one").await.is_ok(), "and the first again once reconnected");

    // A kubeconfig naming this server makes an in-process client with its context's namespace;
    // one naming TLS or a port no server of this process has, none.
    let mut config = Config::new(server.url().parse().expect("url"));
    config.default_namespace = "team-a".into();
    config.auth_info.token = Some("agent-a".to_string().into());
    let local = kube_mem::local::client_for(&config).expect("this process's server").expect("client");
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "team-a"}})).expect("namespace");
    Api::all(local.clone()).create(&PostParams::default(), &ns).await.expect("namespace created");
    let made = Api::<ConfigMap>::default_namespaced(local).create(&PostParams::default(), &cm("two", json!({}))).await;
    assert_eq!(made.expect("created").namespace().as_deref(), Some("team-a"));
    let elsewhere = |url: &str| {
        let mut c = config.clone();
        c.cluster_url = url.parse().expect("url");
        kube_mem::local::client_for(&c).is_none()
    };
    assert!(elsewhere(&server.url().replace("http://", "https://")), "TLS: not in-process");
    assert!(elsewhere("http://127.0.0.1:1"), "another port: not in-process");

    server.set_unknown_tokens(kube_mem::UnknownTokens::Refuse);
    let e = a.get("one").await.expect_err("an unknown token is refused");
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 401), "{e:?}");
}

#[tokio::test]
async fn bad_bodies_get_status_errors_and_leave_the_store_intact() {
    let server = ApiServer::start().await.expect("server");
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let post = |body: Vec<u8>, ct: &'static str| {
        let url = url.clone();
        async move {
            let out = tokio::process::Command::new("curl")
                .args(["-s", "-X", "POST", "-H", &format!("Content-Type: {ct}"), "--data-binary", "@-", &url])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn();
            let mut child = out.expect("curl runs");
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(&body).await.expect("write");
            drop(stdin);
            let out = child.wait_with_output().await.expect("output");
            serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("a Status")
        }
    };
    let s = post(b"{not json".to_vec(), "application/json").await;
    assert_eq!((s["kind"].as_str(), s["code"].as_u64()), (Some("Status"), Some(400)));
    let s = post(b"{}".to_vec(), "application/xml").await;
    assert_eq!(s["code"].as_u64(), Some(415));
    let big = format!("{{\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"k\":\"{}\"}}}}", "x".repeat(4 * 1024 * 1024));
    let s = post(big.into_bytes(), "application/json").await;
    assert_eq!(s["code"].as_u64(), Some(413));
    let s = post(b"{\"metadata\":{\"name\":\"Bad_Name\"}}".to_vec(), "application/json").await;
    assert_eq!(s["code"].as_u64(), Some(422));
    let cms: Api<ConfigMap> = Api::default_namespaced(client(&server).await);
    assert!(cms.list(&ListParams::default()).await.expect("list").items.is_empty(), "nothing stored");
}

#[tokio::test]
async fn immutable_fields_cannot_change() {
    let server = ApiServer::start().await.expect("server");
    let tjs: Api<TrainJob> = Api::default_namespaced(with_trainjob_crd(&server).await);
    tjs.create(&PostParams::default(), &trainjob("i", 1)).await.expect("create");
    let err = tjs
        .patch("i", &PatchParams::default(), &Patch::Merge(json!({"spec": {"runtimeRef": {"name": "other"}}})))
        .await
        .expect_err("runtimeRef is immutable");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("spec.runtimeRef")),
        "{err:?}"
    );
    // Mutable fields still change.
    tjs.patch("i", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}}))).await.expect("suspend");
}

/// A CRD of widgets with a status subresource: `spec.size` at most `max`, `status.phase` one of
/// two words.
fn widget_crd(max: i64) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"], "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "maximum": max}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string", "enum": ["Ready", "Failed"]},
                        "count": {"type": "integer", "default": 0}}}}}}}]}
    }))
    .expect("crd")
}

/// A status write is checked on what it changes: its status against the schema, while the spec
/// it keeps, unchanged, is not checked again (Kubernetes' validation ratcheting): a widget whose
/// spec a tightened schema no longer allows still has its status written, and not its spec.
#[tokio::test]
async fn a_status_write_checks_the_status_and_ratchets_the_unchanged_spec() {
    let server = ApiServer::start().await.expect("server");
    let c = client(&server).await;
    let crds = Api::<CustomResourceDefinition>::all(c.clone());
    crds.create(&PostParams::default(), &widget_crd(10)).await.expect("crd");
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<kube::api::DynamicObject> = Api::default_namespaced_with(c, &ar);
    let widget = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 8}}))
    .expect("widget");
    widgets.create(&PostParams::default(), &widget).await.expect("fits the first schema");
    let mut tightened = widget_crd(5);
    tightened.metadata.resource_version = crds.get("widgets.example.com").await.expect("crd").metadata.resource_version;
    crds.replace("widgets.example.com", &PostParams::default(), &tightened).await.expect("tightened");
    let refused = |e: kube::Error| match e {
        kube::Error::Api(s) if s.code == 422 => s.message,
        other => panic!("{other:?}"),
    };
    let status = |phase: &str| Patch::Merge(json!({"status": {"phase": phase}}));
    let written = widgets.patch_status("w", &PatchParams::default(), &status("Ready")).await.expect("ratcheted");
    assert_eq!(written.data["spec"], json!({"size": 8}), "the spec is the stored one");
    assert_eq!(written.data["status"], json!({"phase": "Ready", "count": 0}), "the status defaulted");
    let bad = widgets.patch_status("w", &PatchParams::default(), &status("Lost")).await.expect_err("not an enum value");
    let message = refused(bad);
    assert!(message.contains("status.phase") && !message.contains("spec"), "{message}");
    let spec = Patch::Merge(json!({"spec": {"size": 9}}));
    let message = refused(widgets.patch("w", &PatchParams::default(), &spec).await.expect_err("changed spec"));
    assert!(message.contains("spec.size"), "{message}");
    assert_eq!(widgets.get("w").await.expect("get").data["status"]["phase"], "Ready");
}

/// Answers are the object as the client's version sees it, whichever way they are written: a
/// read and a write's answer in the stored version are the JSON the store wrote once (the same
/// bytes each time), one in another served version carries that version, and a dry run's
/// answer is what the write would have made, not what is stored.
#[tokio::test]
async fn answers_carry_the_clients_version_and_a_dry_run_answers_what_it_would_write() {
    let server = ApiServer::start().await.expect("server");
    let c = client(&server).await;
    let mut crd = serde_json::to_value(widget_crd(100)).expect("crd");
    let mut v2 = crd["spec"]["versions"][0].clone();
    v2["name"] = "v2".into();
    v2["storage"] = false.into();
    crd["spec"]["versions"].as_array_mut().expect("versions").push(v2);
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("crd");
    Api::<CustomResourceDefinition>::all(c.clone()).create(&PostParams::default(), &crd).await.expect("crd created");
    let path = |v: &str, name: &str| format!("/apis/example.com/{v}/namespaces/default/widgets{name}");
    let send = |method: &str, uri: String, content_type: &str, body: serde_json::Value| {
        let request = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .body(if body.is_null() { Vec::new() } else { body.to_string().into_bytes() })
            .expect("request");
        let c = c.clone();
        async move { c.request_text(request).await.expect("answered") }
    };
    let as_json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("json");
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}});
    let created = send("POST", path("v1", ""), "application/json", widget).await;
    let read = send("GET", path("v1", "/w"), "", serde_json::Value::Null).await;
    assert_eq!(created, read, "a write's answer and a read of it are the same JSON");
    assert_eq!(as_json(&read)["apiVersion"], "example.com/v1");
    let in_v2 = as_json(&send("GET", path("v2", "/w"), "", serde_json::Value::Null).await);
    assert_eq!((in_v2["apiVersion"].as_str(), in_v2["spec"]["size"].as_i64()), (Some("example.com/v2"), Some(1)));

    let grow = json!({"spec": {"size": 7}});
    let merge = "application/merge-patch+json";
    let dry = as_json(&send("PATCH", path("v2", "/w?dryRun=All"), merge, grow.clone()).await);
    assert_eq!((dry["apiVersion"].as_str(), dry["spec"]["size"].as_i64()), (Some("example.com/v2"), Some(7)));
    assert_eq!(as_json(&send("GET", path("v1", "/w"), "", serde_json::Value::Null).await)["spec"]["size"], 1);
    let dry_v1 = as_json(&send("PATCH", path("v1", "/w?dryRun=All"), merge, grow.clone()).await);
    assert_eq!(dry_v1["spec"]["size"], 7, "a dry run answers what it would write, not what is stored");

    let patched = send("PATCH", path("v2", "/w"), merge, grow).await;
    assert_eq!(
        (as_json(&patched)["apiVersion"].as_str(), as_json(&patched)["spec"]["size"].as_i64()),
        (Some("example.com/v2"), Some(7))
    );
    let patched_v1 = send("PATCH", path("v1", "/w"), merge, json!({"spec": {"size": 8}})).await;
    assert_eq!(patched_v1, send("GET", path("v1", "/w"), "", serde_json::Value::Null).await);
    assert_eq!(as_json(&patched_v1)["spec"]["size"], 8);

    // Lists: each item in the list's version, whichever version it was stored in, and pages.
    let other =
        json!({"apiVersion": "example.com/v2", "kind": "Widget", "metadata": {"name": "x"}, "spec": {"size": 2}});
    send("POST", path("v2", ""), "application/json", other).await;
    for v in ["v1", "v2"] {
        let list = as_json(&send("GET", path(v, ""), "", serde_json::Value::Null).await);
        assert_eq!(list["kind"], "WidgetList");
        let items: Vec<_> = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| (i["apiVersion"].clone(), i["spec"]["size"].clone()))
            .collect();
        let version = json!(format!("example.com/{v}"));
        assert_eq!(items, [(version.clone(), json!(8)), (version, json!(2))], "{v}");
    }
    let page = as_json(&send("GET", path("v2", "?limit=1"), "", serde_json::Value::Null).await);
    assert_eq!(
        (page["items"].as_array().map(Vec::len), page["metadata"]["continue"].as_str()),
        (Some(1), Some("default/w"))
    );
    let none = as_json(
        &send("GET", "/apis/example.com/v1/namespaces/elsewhere/widgets".into(), "", serde_json::Value::Null).await,
    );
    assert_eq!(none["items"], json!([]));
}
