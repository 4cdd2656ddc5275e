//! Server-side apply tracks field ownership as kube-apiserver does, seen through kube-rs: an
//! applier owns what it applies and loses what it stops applying (removed from the object when
//! nobody else owns it), conflicts name the other manager and the field, `force` takes the
//! field over, the applied resourceVersion is a precondition, and every other write is an Update
//! by its manager. The Kueue case is the one the MultiKueue dispatcher depends on: Kueue applies
//! a Workload's whole status as `kueue-admission`, and whoever writes `nominatedClusterNames`
//! must apply it as `kueue-admission` with the whole status, or it lingers (or the reservation
//! goes).

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use kube_mem::ApiServer;
use serde_json::{Value, json};

const WORKLOAD_CRD: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/kueue/kueue.x-k8s.io_workloads.yaml");

fn client_with_agent(server: &ApiServer, user_agent: Option<&'static str>) -> Client {
    let mut config = Config::new(server.url().parse().expect("url"));
    if let Some(ua) = user_agent {
        config.headers.push((hyper::header::USER_AGENT, hyper::header::HeaderValue::from_static(ua)));
    }
    Client::try_from(config).expect("client")
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("not an API error: {other:?}"),
    }
}

/// `metadata.managedFields` as (manager, operation, subresource, fieldsV1).
fn owners(obj: &Value) -> Vec<(String, String, String, Value)> {
    let entries = obj.pointer("/metadata/managedFields").and_then(Value::as_array).cloned().unwrap_or_default();
    entries
        .iter()
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            (s("manager"), s("operation"), s("subresource"), e["fieldsV1"].clone())
        })
        .collect()
}

fn owner<'a>(obj: &'a [(String, String, String, Value)], manager: &str) -> Option<&'a Value> {
    obj.iter().find(|(m, ..)| m == manager).map(|(.., f)| f)
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
}

async fn apply(cms: &Api<ConfigMap>, manager: &str, force: bool, obj: Value) -> Result<Value, kube::Error> {
    let mut pp = PatchParams::apply(manager);
    pp.force = force;
    let got = cms.patch("c", &pp, &Patch::Apply(&obj)).await?;
    Ok(serde_json::to_value(got).expect("json"))
}

#[tokio::test]
async fn conflicts_name_the_owner_and_force_takes_the_field_over() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client_with_agent(&server, None));
    let created = apply(&cms, "a", false, cm(json!({"x": "1", "y": "1"}))).await.expect("apply creates");
    assert_eq!(owner(&owners(&created), "a"), Some(&json!({"f:data": {"f:x": {}, "f:y": {}}})));
    // The same configuration again changes nothing: no write, no new resourceVersion.
    let again = apply(&cms, "a", false, cm(json!({"x": "1", "y": "1"}))).await.expect("re-apply");
    assert_eq!(again["metadata"], created["metadata"]);

    // The same value: shared ownership, no conflict.
    let shared = apply(&cms, "b", false, cm(json!({"x": "1"}))).await.expect("same value");
    let o = owners(&shared);
    assert_eq!(owner(&o, "a"), Some(&json!({"f:data": {"f:x": {}, "f:y": {}}})));
    assert_eq!(owner(&o, "b"), Some(&json!({"f:data": {"f:x": {}}})));

    // A different value of a field another manager owns: 409, naming both.
    let err = api_error(apply(&cms, "b", false, cm(json!({"x": "1", "y": "2"}))).await.expect_err("conflict"));
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(err.message, r#"Apply failed with 1 conflict: conflict with "a": .data.y"#);
    let causes = err.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(
        (causes[0].reason.as_str(), causes[0].field.as_str(), causes[0].message.as_str()),
        ("FieldManagerConflict", ".data.y", r#"conflict with "a""#)
    );
    assert_eq!(cms.get("c").await.expect("get").data.and_then(|d| d.get("y").cloned()).as_deref(), Some("1"));

    // Forced: the value lands and the field moves to b.
    let forced = apply(&cms, "b", true, cm(json!({"x": "1", "y": "2"}))).await.expect("forced");
    assert_eq!(forced["data"]["y"], "2");
    let o = owners(&forced);
    assert_eq!(owner(&o, "a"), Some(&json!({"f:data": {"f:x": {}}})));
    assert_eq!(owner(&o, "b"), Some(&json!({"f:data": {"f:x": {}, "f:y": {}}})));

    // b stops applying x and y: x stays (a owns it), y goes (nobody else does).
    let dropped = apply(&cms, "b", false, cm(json!({"z": "1"}))).await.expect("apply");
    assert_eq!(dropped["data"], json!({"x": "1", "z": "1"}));
    let o = owners(&dropped);
    assert_eq!(owner(&o, "b"), Some(&json!({"f:data": {"f:z": {}}})));
    // a's last field taken by force leaves a's entry empty: it goes.
    let taken = apply(&cms, "b", true, cm(json!({"x": "9", "z": "1"}))).await.expect("forced");
    assert_eq!(owner(&owners(&taken), "a"), None, "{taken}");
}

#[tokio::test]
async fn an_applied_resource_version_is_a_precondition() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(client_with_agent(&server, None));
    let first = apply(&cms, "a", false, cm(json!({"x": "1"}))).await.expect("create");
    let rv = first["metadata"]["resourceVersion"].as_str().expect("rv").to_string();
    cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"other": "1"}}))).await.expect("merge");
    let mut stale = cm(json!({"x": "2"}));
    stale["metadata"]["resourceVersion"] = rv.into();
    let err = api_error(apply(&cms, "a", false, stale).await.expect_err("stale"));
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(err.message.contains("the object has been modified"), "{}", err.message);
    let current = cms.get("c").await.expect("get");
    let mut fresh = cm(json!({"x": "2"}));
    fresh["metadata"]["resourceVersion"] = current.metadata.resource_version.clone().expect("rv").into();
    let applied = apply(&cms, "a", false, fresh).await.expect("current version");
    assert_eq!(applied["data"]["x"], "2");
    assert_ne!(applied["metadata"]["resourceVersion"], json!(current.metadata.resource_version));
}

#[tokio::test]
async fn other_writes_are_updates_by_their_manager() {
    let server = ApiServer::start().await.expect("server");
    let cms: Api<ConfigMap> =
        Api::default_namespaced(client_with_agent(&server, Some("stowage-dispatcher/v0.1 (linux)")));
    let pp = PostParams { field_manager: Some("creator".into()), ..PostParams::default() };
    let created = cms.create(&pp, &serde_json::from_value(cm(json!({"x": "1"}))).expect("cm")).await.expect("create");
    let created = serde_json::to_value(created).expect("json");
    assert_eq!(
        owners(&created),
        vec![("creator".into(), "Update".into(), String::new(), json!({"f:data": {".": {}, "f:x": {}}}))],
        "a create owns everything it set"
    );
    // A replace (PUT) by another manager takes what it changes.
    let mut edited: ConfigMap = serde_json::from_value(created).expect("cm");
    edited.data = Some([("x".to_string(), "2".to_string()), ("y".to_string(), "1".to_string())].into());
    let pp = PostParams { field_manager: Some("editor".into()), ..PostParams::default() };
    let replaced = serde_json::to_value(cms.replace("c", &pp, &edited).await.expect("replace")).expect("json");
    let o = owners(&replaced);
    // The creator keeps the map itself, now without entries: a leaf.
    assert_eq!(owner(&o, "creator"), Some(&json!({"f:data": {}})));
    assert_eq!(owner(&o, "editor"), Some(&json!({"f:data": {"f:x": {}, "f:y": {}}})));
    // A merge patch without fieldManager is recorded under the User-Agent's name.
    let patched = cms.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"y": "2", "x": null}}))).await;
    let patched = serde_json::to_value(patched.expect("merge patch")).expect("json");
    let o = owners(&patched);
    assert_eq!(owner(&o, "stowage-dispatcher"), Some(&json!({"f:data": {"f:y": {}}})));
    assert_eq!(owner(&o, "editor"), None, "x removed and y taken: nothing left to editor");
    // An apply that changes an updater's field conflicts with it, named with its apiVersion.
    let err = api_error(apply(&cms, "applier", false, cm(json!({"y": "3"}))).await.expect_err("conflict"));
    assert_eq!(err.message, r#"Apply failed with 1 conflict: conflict with "stowage-dispatcher" using v1: .data.y"#);
    let forced = apply(&cms, "applier", true, cm(json!({"y": "3"}))).await.expect("forced");
    let o = owners(&forced);
    assert_eq!(owner(&o, "applier"), Some(&json!({"f:data": {"f:y": {}}})));
    assert_eq!(owner(&o, "stowage-dispatcher"), None);
    // A patch that names managedFields is read with them: one empty entry strips them all, as
    // the Server-Side Apply documentation says ("Clearing managedFields").
    let reset = json!({"metadata": {"managedFields": [{}]}});
    let stripped = cms.patch("c", &PatchParams::default(), &Patch::Merge(reset)).await.expect("reset");
    assert_eq!(owners(&serde_json::to_value(stripped).expect("json")), Vec::new());
}

/// The Workload CRD as shipped by Kueue, and a Workload `w` admitted nowhere yet.
async fn workloads(server: &ApiServer) -> Api<DynamicObject> {
    let c = client_with_agent(server, None);
    let crd: CustomResourceDefinition =
        input_limits::yaml::from_str(&std::fs::read_to_string(WORKLOAD_CRD).expect("crd")).expect("yaml");
    Api::<CustomResourceDefinition>::all(c.clone()).create(&PostParams::default(), &crd).await.expect("crd created");
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "Workload"), "workloads");
    let api = Api::default_namespaced_with(c, &ar);
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1,
                 "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]}}))
    .expect("workload");
    api.create(&PostParams { field_manager: Some("kueue".into()), ..PostParams::default() }, &w)
        .await
        .expect("created");
    api
}

fn reservation() -> Value {
    json!({
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                        "message": "Quota reserved in ClusterQueue cq", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"cpu": "default"}}]}
    })
}

fn workload_status(status: Value) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"}, "status": status})
}

async fn apply_status(
    api: &Api<DynamicObject>,
    manager: &str,
    force: bool,
    status: Value,
) -> Result<Value, kube::Error> {
    let mut pp = PatchParams::apply(manager);
    pp.force = force;
    let got = api.patch_status("w", &pp, &Patch::Apply(workload_status(status))).await?;
    Ok(serde_json::to_value(got).expect("json"))
}

/// Kueue's reservation applied as `kueue-admission` (force, as Kueue applies).
async fn reserved(api: &Api<DynamicObject>) -> Value {
    let w = apply_status(api, "kueue-admission", true, reservation()).await.expect("kueue applies its status");
    let o = owners(&w);
    let (_, op, sub, fields) = o.iter().find(|(m, ..)| m == "kueue-admission").expect("kueue-admission entry");
    assert_eq!((op.as_str(), sub.as_str()), ("Apply", "status"));
    assert!(fields.pointer("/f:status/f:conditions/k:{\"type\":\"QuotaReserved\"}/f:reason").is_some(), "{fields}");
    assert!(fields.pointer("/f:status/f:admission/f:clusterQueue").is_some(), "{fields}");
    w
}

#[tokio::test]
async fn kueue_admission_owns_nominated_clusters_only_when_applied_with_its_whole_status() {
    let server = ApiServer::start().await.expect("server");
    let api = workloads(&server).await;
    let live = reserved(&api).await;

    // (a) The dispatcher's way: read, apply the whole status with the list changed, as
    // kueue-admission, guarded by resourceVersion. The reservation stays.
    let mut status = live["status"].clone();
    status["nominatedClusterNames"] = json!(["a"]);
    let mut obj = workload_status(status);
    obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
    let pp = PatchParams::apply("kueue-admission");
    let nominated = api.patch_status("w", &pp, &Patch::Apply(&obj)).await.expect("nominated");
    let nominated = serde_json::to_value(nominated).expect("json");
    assert_eq!(nominated["status"]["nominatedClusterNames"], json!(["a"]));
    assert_eq!(nominated["status"]["conditions"][0]["type"], "QuotaReserved");
    assert_eq!(nominated["status"]["admission"]["clusterQueue"], "cq");
    // The same guard, now stale: refused.
    let err = api_error(api.patch_status("w", &pp, &Patch::Apply(&obj)).await.expect_err("stale"));
    assert_eq!(err.code, 409);

    // (b) Kueue later applies its status with clusterName and without the list: the list's only
    // owner stopped claiming it, so it goes.
    let mut placed = reservation();
    placed["clusterName"] = "a".into();
    let placed = apply_status(&api, "kueue-admission", true, placed).await.expect("kueue places");
    assert_eq!(placed["status"]["clusterName"], "a");
    assert!(placed["status"].get("nominatedClusterNames").is_none(), "{}", placed["status"]);
    assert_eq!(placed["status"]["conditions"][0]["type"], "QuotaReserved");
}

#[tokio::test]
async fn applying_only_the_list_as_kueue_admission_drops_the_reservation() {
    let server = ApiServer::start().await.expect("server");
    let api = workloads(&server).await;
    reserved(&api).await;
    // (c) The pitfall: kueue-admission's configuration is now just the list, so the fields it
    // applied before (conditions, admission) are no longer claimed by anyone and go.
    let w = apply_status(&api, "kueue-admission", false, json!({"nominatedClusterNames": ["b"]})).await.expect("apply");
    assert_eq!(w["status"], json!({"nominatedClusterNames": ["b"]}));
    let (.., fields) = owners(&w).into_iter().find(|(m, ..)| m == "kueue-admission").expect("entry");
    assert_eq!(fields, json!({"f:status": {"f:nominatedClusterNames": {}}}));
}

#[tokio::test]
async fn a_list_applied_by_another_manager_outlives_kueues_apply() {
    let server = ApiServer::start().await.expect("server");
    let api = workloads(&server).await;
    reserved(&api).await;
    // (d) Applied as `stowage`: kueue-admission never owned the list, so its applies leave it.
    let w = apply_status(&api, "stowage", false, json!({"nominatedClusterNames": ["a"]})).await.expect("stowage");
    assert_eq!(w["status"]["nominatedClusterNames"], json!(["a"]));
    assert_eq!(w["status"]["admission"]["clusterQueue"], "cq", "the reservation is untouched");
    let again = apply_status(&api, "kueue-admission", true, reservation()).await.expect("kueue re-applies");
    assert_eq!(again["status"]["nominatedClusterNames"], json!(["a"]), "still there");
    // When Kueue places the workload, the list it cannot remove breaks the CRD's rule: the
    // real failure mode.
    let mut placed = reservation();
    placed["clusterName"] = "a".into();
    let err = api_error(apply_status(&api, "kueue-admission", true, placed).await.expect_err("422"));
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(err.message.contains("clusterName and nominatedClusterNames are mutually exclusive"), "{}", err.message);
}
