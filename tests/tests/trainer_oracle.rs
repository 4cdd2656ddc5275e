//! Kubeflow Trainer's own controller as the oracle of rendering: on a member of the testbed
//! brought up with `--trainer` (real kube-apiserver, JobSet's controller and webhooks, Trainer
//! v2.3.0's controller and webhooks, all built from their Go modules), Trainer renders each
//! upstream example and each upstream runtime; Stowage renders the same TrainJob (as the API
//! server stored it) against the same runtime; its objects are created with a server-side dry run
//! in a second namespace, so both pass the same defaulting (JobSet's webhook, the CRDs'
//! defaults), and are compared field by field with what Trainer made.
//!
//! `#[ignore]`d in the in-memory suite; `scripts/test-real` runs it:
//!
//! ```sh
//! scripts/testbed up --dir /tmp/tb --trainer && STOWAGE_TESTBED_DIR=/tmp/tb \
//!   cargo test --workspace --test trainer_oracle -- --ignored --nocapture
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use stowage_tests::e2e::{client, eventually};
use trainer_render::{Capabilities, Input, SshKeyPair};

/// Where Stowage deliberately differs from Trainer: (kind, field path, why). Everything else that
/// differs fails the test; docs/rendering.md lists the same.
const DELIBERATE: &[(&str, &str, &str)] = &[];

/// The kinds Trainer makes for a TrainJob (all owned by it).
fn kinds() -> Vec<ApiResource> {
    [
        ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
        ("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"),
        ("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"),
        ("", "v1", "ConfigMap", "configmaps"),
        ("", "v1", "Secret", "secrets"),
    ]
    .into_iter()
    .map(|(g, v, k, p)| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), p))
    .collect()
}

fn resource_of(api_version: &str, kind: &str) -> ApiResource {
    kinds()
        .into_iter()
        .find(|r| r.api_version == api_version && r.kind == kind)
        .unwrap_or_else(|| panic!("Stowage rendered a {kind} of {api_version}, which the oracle does not read"))
}

/// One case: the runtimes it needs and its TrainJob.
struct Case {
    name: String,
    runtimes: Vec<Value>,
    trainjob: Value,
}

impl Case {
    /// Trainer v2.3.0 runs its ML plugins in Go map order (`framework.go` ranges over the plugin
    /// registry): for XGBoost, PlainML (the TrainJob's env) and XGBoost's plugin (`DMLC_*`) come
    /// in either order from one start of the controller to the next. Env is compared as a set
    /// there; Stowage's order is pinned by trainer-render's tests.
    fn env_order_is_random(&self) -> bool {
        self.runtimes.iter().any(|r| !r["spec"]["mlPolicy"]["xgboost"].is_null())
    }
}

/// Env lists sorted by name, wherever they are.
fn env_sorted(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    walk(x);
                    if k == "env"
                        && let Some(a) = x.as_array_mut()
                    {
                        a.sort_by(|p, q| p["name"].as_str().cmp(&q["name"].as_str()));
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    input_limits::yaml::documents::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(yaml_files(&p));
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
    out
}

/// Trainer's examples (`examples/yaml` of the module the testbed built), each upstream runtime
/// with a bare TrainJob, and each with a TrainJob that sets what users set most (nodes, GPUs,
/// command, env, a runtime patch's node selector).
fn cases(trainer_module: &Path, upstream: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for file in yaml_files(&trainer_module.join("examples/yaml")) {
        let docs = documents(&file);
        let (runtimes, rest): (Vec<_>, Vec<_>) =
            docs.into_iter().partition(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("TrainingRuntime")));
        for trainjob in rest.into_iter().filter(|d| d["kind"] == "TrainJob") {
            let name = format!("example {}", file.file_name().unwrap_or_default().to_string_lossy());
            cases.push(Case { name, runtimes: runtimes.clone(), trainjob });
        }
    }
    for file in yaml_files(&upstream.join("trainer/runtimes")) {
        for runtime in documents(&file) {
            let rt = runtime["metadata"]["name"].as_str().unwrap_or_default().to_string();
            // A TrainJob's name is an RFC 1035 label: torchtune's runtimes have dots.
            let job = rt.replace('.', "-");
            let reference = json!({"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": rt});
            let bare = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": format!("{job}-bare")}, "spec": {"runtimeRef": reference}});
            let busy = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": format!("{job}-set"), "labels": {"team": "oracle"}, "annotations": {"note": "set"}},
                "spec": {"runtimeRef": reference, "trainer": {
                    "numNodes": 2,
                    "command": ["python3", "train.py"], "args": ["--epochs", "1"],
                    "env": [{"name": "ORACLE", "value": "1"}],
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2, "cpu": "4", "memory": "16Gi"}}},
                  "labels": {"tier": "train"},
                  "runtimePatches": [{"manager": "stowage.dev/oracle", "trainingRuntimeSpec": {"template": {"spec": {
                      "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                          "nodeSelector": {"gpu": "h100"}}}}}}]}}}}]}});
            // Suspended, processes per node, both initializers: Trainer refuses what its runtime
            // cannot take (no initializer job, a policy without processes per node), and so must
            // Stowage.
            let more = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": format!("{job}-more")},
                "spec": {"runtimeRef": reference, "suspend": true,
                  "trainer": {"numNodes": 3, "numProcPerNode": 2},
                  "initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca", "env": [{"name": "SPLIT", "value": "train"}]},
                                  "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct", "secretRef": {"name": "hf-token"}}}}});
            for trainjob in [bare, busy, more] {
                let name = format!("runtime {} ({})", rt, trainjob["metadata"]["name"].as_str().unwrap_or_default());
                cases.push(Case { name, runtimes: vec![runtime.clone()], trainjob });
            }
        }
    }
    cases
}

/// What is compared of an object: no server bookkeeping, no status, no namespace.
fn comparable(mut v: Value) -> Value {
    if let Some(meta) = v["metadata"].as_object_mut() {
        for key in ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "namespace"] {
            meta.remove(key);
        }
    }
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    // The runtime snapshot: Trainer writes the runtime as its cache holds it (uid,
    // resourceVersion, managedFields and all); Trainer reads back its kind, group, name and spec,
    // which are compared.
    let snapshot =
        v["kind"] == "ConfigMap" && v["metadata"]["name"].as_str().is_some_and(|n| n.ends_with("-runtime-snapshot"));
    if snapshot && let Some(text) = v["data"]["runtime"].as_str() {
        // Go writes a zero struct as `{}` (`metadata: {}`, `resources: {}`); read back, `{}` and
        // absent are the same struct.
        let runtime = without_empty_objects(input_limits::yaml::from_str(text).unwrap_or_default());
        v["data"]["runtime"] = json!({
            "apiVersion": runtime["apiVersion"], "kind": runtime["kind"],
            "name": runtime["metadata"]["name"], "spec": runtime["spec"],
        });
    }
    // The MPI key pair is random on both sides: its keys are compared, not its bytes.
    if v["kind"] == "Secret"
        && let Some(data) = v["data"].as_object_mut()
    {
        data.values_mut().for_each(|value| *value = "<key>".into());
    }
    v
}

fn without_empty_objects(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, x)| (k, without_empty_objects(x)))
                .filter(|(_, x)| !x.as_object().is_some_and(serde_json::Map::is_empty))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_empty_objects).collect()),
        other => other,
    }
}

/// Every field path where `a` and `b` differ, with both values.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<(String, String, String)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (p, q) = (x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null));
                differences(&format!("{path}.{k}"), p, q, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a != b => out.push((path.to_string(), short(a), short(b))),
        _ => {}
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 160 { format!("{}…", &s[..s.floor_char_boundary(160)]) } else { s }
}

fn deliberate(kind: &str, path: &str) -> Option<&'static str> {
    DELIBERATE.iter().find(|(k, p, _)| *k == kind && path.starts_with(p)).map(|(_, _, why)| *why)
}

async fn apply(client: &Client, namespace: &str, object: &Value) -> Result<(), kube::Error> {
    let (group_version, kind) =
        (object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default());
    let (group, version) = group_version.split_once('/').unwrap_or(("", group_version));
    let plural = format!("{}s", kind.to_lowercase());
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    let api: Api<DynamicObject> = if kind == "ClusterTrainingRuntime" {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), namespace, &ar)
    };
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(name, &PatchParams::apply("stowage-oracle").force(), &Patch::Apply(object)).await.map(|_| ())
}

/// The objects Trainer owns for TrainJob `name`, by (apiVersion, kind, name).
async fn trainers_objects(client: &Client, namespace: &str, name: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for ar in kinds() {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
        let Ok(list) = api.list(&ListParams::default()).await else { continue };
        for o in list.items {
            let owned = o.metadata.owner_references.iter().flatten().any(|r| r.kind == "TrainJob" && r.name == name);
            if owned {
                let mut v = serde_json::to_value(&o).unwrap_or_default();
                v["apiVersion"] = ar.api_version.clone().into();
                v["kind"] = ar.kind.clone().into();
                out.push(v);
            }
        }
    }
    out
}

fn key(v: &Value) -> (String, String, String) {
    let s = |x: &Value| x.as_str().unwrap_or_default().to_string();
    (s(&v["apiVersion"]), s(&v["kind"]), s(&v["metadata"]["name"]))
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a testbed with Trainer's controller: scripts/testbed up --trainer (scripts/test-real)"]
async fn stowage_renders_what_trainers_own_controller_renders() {
    let dir = PathBuf::from(std::env::var("STOWAGE_TESTBED_DIR").expect("STOWAGE_TESTBED_DIR"));
    let trainer_module = std::fs::read_to_string(dir.join("trainer.dir"))
        .map(|s| PathBuf::from(s.trim()))
        .expect("trainer.dir: the testbed was brought up without --trainer");
    let upstream = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/upstream");
    let members = std::fs::read_to_string(dir.join("members.txt")).expect("members.txt");
    let member = members.lines().next().expect("a member");
    let client = client(&dir.join("members").join(format!("{member}.kubeconfig"))).await;

    let run = format!("oracle-{:x}", std::process::id() & 0xffff);
    let (theirs, ours) = (run.clone(), format!("{run}-stowage"));
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for ns in [&theirs, &ours] {
        let namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("a namespace");
        namespaces.create(&PostParams::default(), &namespace).await.expect("namespace");
    }

    let cases = cases(&trainer_module, &upstream);
    let (mut identical, mut refused_alike, mut report, mut failures) = (0, 0, Vec::new(), Vec::new());
    let key_pair = SshKeyPair { private_pem: "oracle".into(), public_openssh: "oracle".into() };
    for case in &cases {
        for rt in &case.runtimes {
            apply(&client, &theirs, rt).await.unwrap_or_else(|e| panic!("{}: its runtime: {e}", case.name));
        }
        let name = case.trainjob["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let trainjobs: Api<TrainJob> = Api::namespaced(client.clone(), &theirs);
        let sent: TrainJob = serde_json::from_value(case.trainjob.clone()).expect("a TrainJob");
        let stored = match create_once_trainer_sees_the_runtime(&trainjobs, &sent).await {
            Ok(t) => t,
            Err(kube::Error::Api(refusal)) => {
                // Trainer refused it at admission: Stowage's admission must refuse it too.
                let ours = our_admission(&client, &theirs, &sent).await;
                match ours {
                    // In Trainer's words: the server prefixes the webhook's or the CRD's message.
                    Err(words) if !refusal.message.ends_with(&words) => failures.push(format!(
                        "{}: refused by both, in other words\n  trainer: {}\n  stowage: {words}",
                        case.name, refusal.message
                    )),
                    Err(words) => {
                        refused_alike += 1;
                        report.push(format!(
                            "{}: refused by both\n  trainer: {}\n  stowage: {words}",
                            case.name, refusal.message
                        ));
                    }
                    Ok(()) => failures
                        .push(format!("{}: Trainer refused it ({}), Stowage admits it", case.name, refusal.message)),
                }
                continue;
            }
            Err(e) => panic!("{}: {e}", case.name),
        };
        let runtime = runtime_of(&client, &theirs, &stored).await;
        let theirs_objects = eventually(&format!("{}: Trainer's JobSet", case.name), || async {
            let objects = trainers_objects(&client, &theirs, &name).await;
            objects.iter().any(|o| o["kind"] == "JobSet").then_some(objects)
        })
        .await;
        if let Err(denial) = trainer_render::admit(&stored, Some(&runtime), None) {
            failures.push(format!("{}: Trainer rendered it, Stowage's admission refuses it: {denial}", case.name));
            continue;
        }
        let caps = Capabilities::default();
        let input = Input {
            trainjob: &stored,
            runtime: &runtime,
            placement: None,
            capabilities: &caps,
            ssh_key: Some(&key_pair),
            jobset_uid: None,
        };
        let rendered = match trainer_render::render(&input) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{}: Trainer rendered it, Stowage does not: {e}", case.name));
                continue;
            }
        };
        let mut diffs = Vec::new();
        let mut matched = BTreeSet::new();
        for object in &rendered {
            let mut v = object.to_value();
            v["metadata"]["namespace"] = ours.clone().into();
            let (api_version, kind, object_name) = key(&v);
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ours, &resource_of(&api_version, &kind));
            let dry = PostParams { dry_run: true, ..Default::default() };
            // The owner (the TrainJob) lives in Trainer's namespace: a webhook that looks a
            // JobSet's owner up (Kueue's, on a MultiKueue worker) would not find it in ours. The
            // dry run goes without it; it is compared as rendered.
            let mut body = v.clone();
            let owners = body["metadata"].as_object_mut().and_then(|m| m.remove("ownerReferences"));
            let body: DynamicObject = serde_json::from_value(body).expect("an object");
            let stored_ours = match api.create(&dry, &body).await {
                Ok(o) => {
                    let mut s = serde_json::to_value(&o).unwrap_or_default();
                    s["apiVersion"] = api_version.clone().into();
                    s["kind"] = kind.clone().into();
                    if let Some(owners) = &owners {
                        s["metadata"]["ownerReferences"] = owners.clone();
                    }
                    s
                }
                Err(e) => {
                    diffs.push(format!("{kind} {object_name}: the API server refuses Stowage's: {e}"));
                    continue;
                }
            };
            let Some(trainers) = theirs_objects.iter().find(|o| key(o) == key(&v)) else {
                match deliberate(&kind, "<object>") {
                    Some(why) => report.push(format!("{}: {kind} {object_name} only Stowage makes: {why}", case.name)),
                    None => diffs.push(format!("{kind} {object_name}: Stowage makes it, Trainer does not")),
                }
                continue;
            };
            matched.insert(key(trainers));
            let (mut theirs_now, mut ours_now) = (comparable(trainers.clone()), comparable(stored_ours));
            if case.env_order_is_random() {
                (theirs_now, ours_now) = (env_sorted(theirs_now), env_sorted(ours_now));
            }
            let mut found = Vec::new();
            differences("", &theirs_now, &ours_now, &mut found);
            for (path, t, s) in found {
                match deliberate(&kind, &path) {
                    Some(why) => report.push(format!("{}: {kind}{path} differs on purpose: {why}", case.name)),
                    None => diffs.push(format!("{kind} {object_name}{path}: Trainer {t}, Stowage {s}")),
                }
            }
        }
        for o in theirs_objects.iter().filter(|o| !matched.contains(&key(o))) {
            let (_, kind, object_name) = key(o);
            diffs.push(format!("{kind} {object_name}: Trainer makes it, Stowage does not"));
        }
        if diffs.is_empty() {
            identical += 1;
        } else {
            failures.push(format!("{}:\n  {}", case.name, diffs.join("\n  ")));
        }
    }
    println!(
        "trainer oracle: {} cases: {identical} rendered identically, {refused_alike} refused by both, {} differ",
        cases.len(),
        failures.len()
    );
    for line in &report {
        println!("{line}");
    }
    assert!(failures.is_empty(), "Stowage differs from Trainer's controller:\n{}", failures.join("\n"));
}

/// Creates the TrainJob. Trainer's webhook looks its runtime up in the controller's cache, which
/// a runtime applied a moment ago may not have reached: "not found" is tried again for a while.
async fn create_once_trainer_sees_the_runtime(
    trainjobs: &Api<TrainJob>,
    sent: &TrainJob,
) -> Result<TrainJob, kube::Error> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match trainjobs.create(&PostParams::default(), sent).await {
            Err(kube::Error::Api(e))
                if e.message.contains("must be created before the TrainJob")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// The runtime the stored TrainJob names, as the API server holds it.
async fn runtime_of(client: &Client, namespace: &str, trainjob: &TrainJob) -> Runtime {
    let reference = &trainjob.spec.runtime_ref;
    if reference.kind.as_deref() == Some("TrainingRuntime") {
        let api: Api<TrainingRuntime> = Api::namespaced(client.clone(), namespace);
        Runtime::Namespaced(api.get(&reference.name).await.expect("the TrainingRuntime"))
    } else {
        let api: Api<ClusterTrainingRuntime> = Api::all(client.clone());
        Runtime::Cluster(api.get(&reference.name).await.expect("the ClusterTrainingRuntime"))
    }
}

/// Stowage's admission of a TrainJob Trainer refused: the CRD's rules as the server applied them
/// (a server-side dry run), then Trainer's webhook rules as Stowage reimplements them.
async fn our_admission(client: &Client, namespace: &str, trainjob: &TrainJob) -> Result<(), String> {
    let mut defaulted = trainjob.clone();
    defaulted.metadata.namespace = Some(namespace.to_string());
    let runtime = match trainjob.spec.runtime_ref.kind.as_deref() {
        Some("TrainingRuntime") => Api::<TrainingRuntime>::namespaced(client.clone(), namespace)
            .get_opt(&trainjob.spec.runtime_ref.name)
            .await
            .ok()
            .flatten()
            .map(Runtime::Namespaced),
        _ => Api::<ClusterTrainingRuntime>::all(client.clone())
            .get_opt(&trainjob.spec.runtime_ref.name)
            .await
            .ok()
            .flatten()
            .map(Runtime::Cluster),
    };
    match trainer_render::admit(&defaulted, runtime.as_ref(), None) {
        Err(denial) => Err(denial.to_string()),
        Ok(()) => Ok(()),
    }
}
