//! Conformance with Kubeflow Trainer v2.3.0's own unit tests (kubeflow/trainer@v2.3.0, commit
//! 658725bd). Each test is named after the upstream case it transcribes and cites the file; the
//! objects are built as upstream's wrappers (`pkg/util/testing/wrapper.go`) build them, and the
//! rendered JobSet is compared as upstream compares it (`cmp.Diff` with env, volumes, volume
//! mounts and tolerations sorted; absent and empty lists differ).
//!
//! Upstream's unit tests build runtimes in memory; a real API server stores them with the
//! runtime CRD's defaults. The renderer applies the JobSet-level ones (`replicas: 1`,
//! `groupName: default`), which the upstream expectations carry anyway. Upstream's `NewObjects`
//! also creates the runtime snapshot ConfigMap through its client (not among `wantObjs`); it is
//! left out of the comparisons here. `NewObjects` and `EnforceMLPolicy` do not run the webhook,
//! `render` does: where an upstream case uses what the webhook refuses (a manager like
//! `manager-1` that is not a domain-prefixed path, multi-node torchtune on a 1B model), the
//! transcription uses a name the webhook admits (`example.com/manager-1`, the 70B runtime),
//! which changes nothing the case checks.

use api::trainer::{Runtime, TrainJob};
use serde_json::{Value, json};
use trainer_render::{Capabilities, Denial, ErrorType, Input, Object, Rule, SshKeyPair, admit, render};

const NS: &str = "default";
const UID: &str = "uid";
const RUNTIME_DEFAULT_MOUNT_DATASET: &str = "/workspace/dataset";
const RUNTIME_DEFAULT_MOUNT_MODEL: &str = "/workspace/model";
const COMPLETION_INDEX: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

// ---------------------------------------------------------------------------------------------
// Upstream's wrappers, on JSON.

/// The replicated jobs of `MakeTrainingRuntimeWrapper` and `MakeJobSetWrapper`.
fn wrapper_spec() -> Value {
    let job = |name: &str, ancestor: &str, mounts: Value| {
        json!({
            "name": name,
            "groupName": "default",
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}},
                "spec": {"template": {"spec": {
                    "containers": [{"name": if name == "node" { "node" } else { name }, "volumeMounts": mounts}],
                    "volumes": [{"name": "initializer", "persistentVolumeClaim": {"claimName": "initializer"}}]
                }}}
            }
        })
    };
    let mount = |path: &str| json!({"name": "initializer", "mountPath": path});
    json!({"replicatedJobs": [
        job("dataset-initializer", "dataset-initializer", json!([mount(RUNTIME_DEFAULT_MOUNT_DATASET)])),
        job("model-initializer", "model-initializer", json!([mount(RUNTIME_DEFAULT_MOUNT_MODEL)])),
        job("node", "trainer", json!([mount(RUNTIME_DEFAULT_MOUNT_DATASET), mount(RUNTIME_DEFAULT_MOUNT_MODEL)])),
    ]})
}

fn job<'a>(spec: &'a mut Value, name: &str) -> &'a mut Value {
    spec["replicatedJobs"]
        .as_array_mut()
        .and_then(|jobs| jobs.iter_mut().find(|j| j["name"] == name))
        .unwrap_or_else(|| panic!("no replicated job {name}"))
}

fn pod<'a>(spec: &'a mut Value, name: &str) -> &'a mut Value {
    &mut job(spec, name)["template"]["spec"]["template"]["spec"]
}

fn strs(items: &[&str]) -> Value {
    json!(items)
}

/// `Container(rJob, container, image, command, args, requests)`: set on the container of that
/// name, or append one.
fn container(spec: &mut Value, rjob: &str, name: &str, image: &str, command: &[&str], args: &[&str], requests: Value) {
    let p = pod(spec, rjob);
    let containers = p["containers"].as_array_mut().expect("containers");
    let idx = match containers.iter().position(|c| c["name"] == name) {
        Some(i) => i,
        None => {
            containers.push(json!({"name": name}));
            containers.len() - 1
        }
    };
    let c = containers[idx].as_object_mut().expect("container");
    for (k, v) in [("image", json!(image)), ("command", strs(command)), ("args", strs(args))] {
        if v == json!("") || v == json!([]) {
            c.remove(k);
        } else {
            c.insert(k.into(), v);
        }
    }
    if requests.as_object().is_some_and(|m| !m.is_empty()) {
        c.insert("resources".into(), json!({"requests": requests}));
    } else {
        c.remove("resources");
    }
}

fn container_mut<'a>(spec: &'a mut Value, rjob: &str, name: &str) -> &'a mut Value {
    pod(spec, rjob)["containers"]
        .as_array_mut()
        .and_then(|cs| cs.iter_mut().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no container {name} in {rjob}"))
}

/// `Env(rJob, container, envs...)`: appended.
fn env(spec: &mut Value, rjob: &str, name: &str, envs: Value) {
    let c = container_mut(spec, rjob, name);
    let list = c.as_object_mut().expect("container").entry("env").or_insert_with(|| json!([]));
    list.as_array_mut().expect("env").extend(envs.as_array().expect("envs").iter().cloned());
}

/// `InitContainer(rJob, name, image, envs...)`: the only init container.
fn init_container(spec: &mut Value, rjob: &str, name: &str, image: &str, envs: Value) {
    let mut c = json!({"name": name, "image": image});
    if envs.as_array().is_some_and(|e| !e.is_empty()) {
        c["env"] = envs;
    }
    pod(spec, rjob)["initContainers"] = json!([c]);
}

fn replicas(spec: &mut Value, n: i64, jobs: &[&str]) {
    for j in jobs {
        if spec["replicatedJobs"].as_array().is_some_and(|a| a.iter().any(|x| x["name"] == *j)) {
            job(spec, j)["replicas"] = json!(n);
        }
    }
}

fn parallelism_completions(spec: &mut Value, n: i64, jobs: &[&str]) {
    for j in jobs {
        if spec["replicatedJobs"].as_array().is_some_and(|a| a.iter().any(|x| x["name"] == *j)) {
            job(spec, j)["template"]["spec"]["parallelism"] = json!(n);
            job(spec, j)["template"]["spec"]["completions"] = json!(n);
        }
    }
}

/// `NumNodes(n)` of `JobSetWrapper`: parallelism and completions of job `node`.
fn num_nodes(spec: &mut Value, n: i64) {
    parallelism_completions(spec, n, &["node"]);
}

fn depends_on_initializers(spec: &mut Value) {
    job(spec, "node")["dependsOn"] = json!([
        {"name": "dataset-initializer", "status": "Complete"},
        {"name": "model-initializer", "status": "Complete"}
    ]);
}

/// `LauncherReplica()`: a `launcher` job before `node`, without an ancestor label.
fn launcher_replica(spec: &mut Value) {
    let jobs = spec["replicatedJobs"].as_array_mut().expect("jobs");
    let at = jobs.iter().position(|j| j["name"] == "node").expect("node");
    jobs.insert(
        at,
        json!({"name": "launcher", "groupName": "default", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "command": ["mpirun"], "args": ["echo.sh"]}]
        }}}}}),
    );
}

fn pod_label_all(spec: &mut Value, key: &str, value: &str) {
    for j in spec["replicatedJobs"].as_array_mut().expect("jobs") {
        j["template"]["spec"]["template"]["metadata"]["labels"][key] = json!(value);
    }
}

fn torch_env(nnodes: &str, nproc: &str, master: Option<&str>) -> Value {
    let mut e = vec![
        json!({"name": "PET_NNODES", "value": nnodes}),
        json!({"name": "PET_NPROC_PER_NODE", "value": nproc}),
        json!({"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}}),
    ];
    if let Some(m) = master {
        e.push(json!({"name": "PET_MASTER_ADDR", "value": m}));
        e.push(json!({"name": "PET_MASTER_PORT", "value": "29500"}));
    }
    Value::Array(e)
}

fn trainer_port(spec: &mut Value) {
    container_mut(spec, "node", "node")["ports"] = json!([{"containerPort": 29500}]);
}

fn ml_policy(num_nodes: Option<i64>, source: Value) -> Value {
    let mut p = source;
    if let Some(n) = num_nodes {
        p["numNodes"] = json!(n);
    }
    p
}

fn cpu(n: &str) -> Value {
    json!({"cpu": n})
}

// ---------------------------------------------------------------------------------------------
// Objects and rendering.

fn training_runtime(name: &str, spec: Value) -> Runtime {
    let v = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": NS}, "spec": spec
    });
    Runtime::Namespaced(serde_json::from_value(v).expect("TrainingRuntime"))
}

fn cluster_runtime(name: &str, spec: Value) -> Runtime {
    let v = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name}, "spec": spec
    });
    Runtime::Cluster(serde_json::from_value(v).expect("ClusterTrainingRuntime"))
}

/// `MakeTrainJobWrapper(ns, name).UID(uid).RuntimeRef(kind, runtime)` with `spec` merged in.
fn trainjob(name: &str, kind: &str, runtime: &str, spec: Value) -> TrainJob {
    let mut v = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS, "uid": UID},
        "spec": {"runtimeRef": {"name": runtime, "apiGroup": "trainer.kubeflow.org", "kind": kind}}
    });
    if let (Some(s), Some(extra)) = (v["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.iter().map(|(k, x)| (k.clone(), x.clone())));
    }
    serde_json::from_value(v).expect("TrainJob")
}

/// `MakeTrainJobTrainerWrapper().Container(image, command, args, requests)`.
fn trainer_container(image: &str, command: &[&str], args: &[&str], requests: Value) -> Value {
    let mut t = json!({"image": image, "resourcesPerNode": {"requests": requests}});
    if !command.is_empty() {
        t["command"] = strs(command);
    }
    if !args.is_empty() {
        t["args"] = strs(args);
    }
    if requests.as_object().is_some_and(|m| m.is_empty()) {
        t["resourcesPerNode"] = json!({});
    }
    t
}

fn key() -> SshKeyPair {
    SshKeyPair { private_pem: "EXIST".into(), public_openssh: "EXIST".into() }
}

fn render_objects(rt: &Runtime, tj: &TrainJob) -> Vec<Object> {
    let caps = Capabilities::default();
    let key = key();
    let input = Input {
        trainjob: tj,
        runtime: rt,
        placement: None,
        capabilities: &caps,
        ssh_key: Some(&key),
        jobset_uid: None,
    };
    render(&input).unwrap_or_else(|e| panic!("renders: {e}"))
}

fn object(objects: &[Object], kind: &str, name: &str) -> Value {
    objects
        .iter()
        .map(Object::to_value)
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Upstream's `cmpopts.SortSlices` on env, volumes, volume mounts (by name) and tolerations
/// (by key), wherever they are.
fn normalized(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    walk(x);
                    let by = match k.as_str() {
                        "env" | "volumes" | "volumeMounts" => "name",
                        "tolerations" => "key",
                        _ => continue,
                    };
                    if let Some(a) = x.as_array_mut() {
                        a.sort_by(|p, q| p[by].as_str().cmp(&q[by].as_str()));
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

fn owner(name: &str) -> Value {
    json!([{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "uid": UID,
        "controller": true, "blockOwnerDeletion": true
    }])
}

/// The JobSet `MakeJobSetWrapper(ns, name)...ControllerReference(...)` builds, with `spec`.
fn want_jobset(name: &str, spec: Value, labels: Value, annotations: Value) -> Value {
    let mut meta = json!({"name": name, "namespace": NS, "ownerReferences": owner(name)});
    if labels.as_object().is_some_and(|m| !m.is_empty()) {
        meta["labels"] = labels;
    }
    if annotations.as_object().is_some_and(|m| !m.is_empty()) {
        meta["annotations"] = annotations;
    }
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": spec})
}

#[track_caller]
fn assert_same(case: &str, got: Value, want: Value) {
    let (got, want) = (normalized(got), normalized(want));
    assert!(
        got == want,
        "{case}: rendered object differs from Trainer's\n--- want\n{}\n--- got\n{}",
        input_limits::yaml::to_string(&want).unwrap_or_default(),
        input_limits::yaml::to_string(&got).unwrap_or_default()
    );
}

// ---------------------------------------------------------------------------------------------
// pkg/runtime/core/trainingruntime_test.go, TestTrainingRuntimeNewObjects.

/// trainingruntime_test.go: "succeeded to build PodGroup and JobSet with NumNodes from the
/// TrainJob and container from the Runtime."
#[test]
fn succeeded_to_build_podgroup_and_jobset_with_numnodes_from_the_trainjob_and_container_from_the_runtime() {
    let mut rt = wrapper_spec();
    for j in ["dataset-initializer", "model-initializer", "node"] {
        container(&mut rt, j, j, "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    }
    let runtime = training_runtime(
        "test-runtime",
        json!({
            "mlPolicy": {"numNodes": 100},
            "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
            "template": {
                "metadata": {"labels": {"conflictLabel": "overridden"}, "annotations": {"conflictAnnotation": "overridden"}},
                "spec": rt
            }
        }),
    );
    // The runtime's labels in upstream's case are on the runtime object, not its template; the
    // JobSet takes the template's and the patch's (`newRuntimeInfo`).
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({
            "suspend": true,
            "runtimePatches": [{"manager": "test.io/manager", "trainingRuntimeSpec": {"template": {"metadata": {
                "labels": {"conflictLabel": "override"}, "annotations": {"conflictAnnotation": "override"}
            }}}}],
            "trainer": {"numNodes": 30}
        }),
    );
    let objects = render_objects(&runtime, &tj);
    let mut want = wrapper_spec();
    want["suspend"] = json!(true);
    pod_label_all(&mut want, "scheduling.x-k8s.io/pod-group", "test-job");
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node", "launcher"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer", "launcher"]);
    num_nodes(&mut want, 30);
    for j in ["dataset-initializer", "model-initializer", "node"] {
        container(&mut want, j, j, "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    }
    assert_same(
        "JobSet",
        object(&objects, "JobSet", "test-job"),
        want_jobset("test-job", want, json!({"conflictLabel": "override"}), json!({"conflictAnnotation": "override"})),
    );
    assert_same(
        "PodGroup",
        object(&objects, "PodGroup", "test-job"),
        json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "test-job", "namespace": NS, "ownerReferences": owner("test-job")},
            // 32 = 30 trainer nodes + 2 initializers; 30 CPUs + 2.
            "spec": {"minMember": 32, "minResources": {"cpu": "32"}, "scheduleTimeoutSeconds": 120}
        }),
    );
}

/// trainingruntime_test.go: "succeeded to build JobSet with NumNodes from the Runtime and
/// container from the TrainJob."
#[test]
fn succeeded_to_build_jobset_with_numnodes_from_the_runtime_and_container_from_the_trainjob() {
    let mut rt = wrapper_spec();
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    env(
        &mut rt,
        "node",
        "node",
        json!([{"name": "TRAIN_JOB", "value": "original"}, {"name": "RUNTIME", "value": "test:runtime"}]),
    );
    let runtime = training_runtime("test-runtime", json!({"mlPolicy": {"numNodes": 100}, "template": {"spec": rt}}));
    let mut t = trainer_container("test:trainjob", &["trainjob"], &["trainjob"], cpu("1"));
    t["env"] =
        json!([{"name": "TRAIN_JOB", "value": "override"}, {"name": "TRAIN_JOB_CUSTOM", "value": "test:trainjob"}]);
    let tj = trainjob("test-job", "TrainingRuntime", "test-runtime", json!({"trainer": t}));
    let mut want = wrapper_spec();
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 100);
    container(&mut want, "node", "node", "test:trainjob", &["trainjob"], &["trainjob"], cpu("1"));
    env(
        &mut want,
        "node",
        "node",
        json!([
            {"name": "TRAIN_JOB", "value": "override"},
            {"name": "TRAIN_JOB_CUSTOM", "value": "test:trainjob"},
            {"name": "RUNTIME", "value": "test:runtime"}
        ]),
    );
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

fn patch(manager: &str, rjob: &str, pod_spec: Value) -> Value {
    json!({"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": rjob, "template": {"spec": {"template": {"spec": pod_spec}}}}
    ]}}}})
}

fn zone_affinity() -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["antarctica-east1", "antarctica-west1"]}]
    }]}}})
}

/// trainingruntime_test.go: "succeeded to build JobSet with TrainJob's RuntimePatches."
#[test]
fn succeeded_to_build_jobset_with_trainjobs_runtimepatches() {
    let mut rt = wrapper_spec();
    init_container(
        &mut rt,
        "dataset-initializer",
        "override-init-container",
        "test:runtime",
        json!([{"name": "INIT_ENV", "value": "original_init"}, {"name": "DATASET_PATH", "value": "runtime"}]),
    );
    init_container(
        &mut rt,
        "node",
        "override-init-container",
        "test:runtime",
        json!([{"name": "INIT_ENV", "value": "original_init"}]),
    );
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    env(&mut rt, "node", "node", json!([{"name": "TRAIN_JOB", "value": "original"}]));
    container(&mut rt, "node", "override-container", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    env(&mut rt, "node", "override-container", json!([{"name": "CONTAINER_ENV", "value": "original_container"}]));
    let runtime = training_runtime("test-runtime", json!({"mlPolicy": {"numNodes": 100}, "template": {"spec": rt}}));
    let toleration = json!([{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
    let selector = json!({"node.kubernetes.io/instance-type": "p5.48xlarge"});
    let gate = json!([{"name": "kueue.x-k8s.io/admission"}]);
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({
            "trainer": trainer_container("test:trainjob", &["trainjob"], &["trainjob"], cpu("1")),
            "runtimePatches": [
                patch("example.com/manager-1", "dataset-initializer", json!({
                    "initContainers": [{"name": "override-init-container", "env": [
                        {"name": "INIT_ENV", "value": "override_init"}, {"name": "NEW_VALUE", "value": "from_overrides"}
                    ]}],
                    "containers": [{"name": "dataset-initializer", "volumeMounts": [
                        {"name": "initializer_secret", "mountPath": "initializer_secret_mount_path"},
                        {"name": "initializer_claim", "mountPath": "initializer_claim_mount_path"}
                    ]}],
                    "affinity": zone_affinity(),
                    "nodeSelector": selector,
                    "schedulingGates": gate,
                    "tolerations": toleration,
                    "volumes": [
                        {"name": "initializer_secret", "secret": {"secretName": "initializer_secret_name"}},
                        {"name": "initializer_claim", "persistentVolumeClaim": {"claimName": "initializer_claim_name"}}
                    ]
                })),
                patch("example.com/manager-2", "node", json!({
                    "serviceAccountName": "override-sa",
                    "initContainers": [{"name": "override-init-container", "env": [{"name": "INIT_ENV", "value": "override_init"}]}],
                    "containers": [
                        {"name": "node", "volumeMounts": [
                            {"name": "node_secret", "mountPath": "node_secret_mount_path"},
                            {"name": "node_claim", "mountPath": "node_claim_mount_path"}
                        ]},
                        {"name": "override-container", "env": [{"name": "CONTAINER_ENV", "value": "override_container"}]}
                    ],
                    "affinity": zone_affinity(),
                    "imagePullSecrets": [{"name": "registry-credential"}],
                    "nodeSelector": selector,
                    "schedulingGates": gate,
                    "tolerations": toleration,
                    "terminationGracePeriodSeconds": 300,
                    "volumes": [
                        {"name": "node_secret", "secret": {"secretName": "node_secret_name"}},
                        {"name": "node_claim", "persistentVolumeClaim": {"claimName": "node_claim_name"}}
                    ]
                }))
            ]
        }),
    );
    let mut want = wrapper_spec();
    pod(&mut want, "node")["serviceAccountName"] = json!("override-sa");
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 100);
    init_container(
        &mut want,
        "dataset-initializer",
        "override-init-container",
        "test:runtime",
        json!([
            {"name": "INIT_ENV", "value": "override_init"},
            {"name": "DATASET_PATH", "value": "runtime"},
            {"name": "NEW_VALUE", "value": "from_overrides"}
        ]),
    );
    init_container(
        &mut want,
        "node",
        "override-init-container",
        "test:runtime",
        json!([{"name": "INIT_ENV", "value": "override_init"}]),
    );
    container(&mut want, "node", "node", "test:trainjob", &["trainjob"], &["trainjob"], cpu("1"));
    env(&mut want, "node", "node", json!([{"name": "TRAIN_JOB", "value": "original"}]));
    container(&mut want, "node", "override-container", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    env(&mut want, "node", "override-container", json!([{"name": "CONTAINER_ENV", "value": "override_container"}]));
    for j in ["dataset-initializer", "node"] {
        let p = pod(&mut want, j);
        p["affinity"] = zone_affinity();
        p["nodeSelector"] = selector.clone();
        p["schedulingGates"] = gate.clone();
        p["tolerations"] = toleration.clone();
    }
    pod(&mut want, "node")["imagePullSecrets"] = json!([{"name": "registry-credential"}]);
    pod(&mut want, "node")["terminationGracePeriodSeconds"] = json!(300);
    for (j, prefix) in [("dataset-initializer", "initializer"), ("node", "node")] {
        pod(&mut want, j)["volumes"].as_array_mut().expect("volumes").extend([
            json!({"name": format!("{prefix}_claim"), "persistentVolumeClaim": {"claimName": format!("{prefix}_claim_name")}}),
            json!({"name": format!("{prefix}_secret"), "secret": {"secretName": format!("{prefix}_secret_name")}}),
        ]);
        container_mut(&mut want, j, j)["volumeMounts"].as_array_mut().expect("mounts").extend([
            json!({"name": format!("{prefix}_secret"), "mountPath": format!("{prefix}_secret_mount_path")}),
            json!({"name": format!("{prefix}_claim"), "mountPath": format!("{prefix}_claim_mount_path")}),
        ]);
    }
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// The runtime of the four runtime-patch cases below: init containers in `dataset-initializer`
/// and `node`, and containers `node` and `override-container`.
fn patch_case_runtime(sidecar: &str, with_init: bool) -> (Runtime, Value) {
    let mut rt = wrapper_spec();
    if with_init {
        init_container(&mut rt, "dataset-initializer", "override-init-container", "test:runtime", json!([]));
        init_container(&mut rt, "node", "override-init-container", "test:runtime", json!([]));
    }
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    container(&mut rt, "node", sidecar, "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    let runtime =
        training_runtime("test-runtime", json!({"mlPolicy": {"numNodes": 100}, "template": {"spec": rt.clone()}}));
    let mut want = rt;
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 100);
    container(&mut want, "node", "node", "test:trainjob", &["trainjob"], &["trainjob"], cpu("1"));
    (runtime, want)
}

/// trainingruntime_test.go: "succeeded to build JobSet with nil affinity overrides from the
/// TrainJob's RuntimePatches."
#[test]
fn succeeded_to_build_jobset_with_nil_affinity_overrides_from_the_trainjobs_runtimepatches() {
    let (runtime, want) = patch_case_runtime("override-container", true);
    // Go's nil Affinity is omitted from the patch: an empty pod spec patch.
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({
            "trainer": trainer_container("test:trainjob", &["trainjob"], &["trainjob"], cpu("1")),
            "runtimePatches": [patch("example.com/manager-1", "dataset-initializer", json!({})), patch("example.com/manager-2", "node", json!({}))]
        }),
    );
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// trainingruntime_test.go: "succeeded to build JobSet with securityContext overrides from the
/// TrainJob's RuntimePatches."
#[test]
fn succeeded_to_build_jobset_with_securitycontext_overrides_from_the_trainjobs_runtimepatches() {
    let (runtime, mut want) = patch_case_runtime("sidecar", false);
    let pod_sc = json!({"fsGroup": 2000, "runAsUser": 1000, "runAsGroup": 3000, "runAsNonRoot": true});
    let c_sc = json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true});
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({
            "trainer": trainer_container("test:trainjob", &["trainjob"], &["trainjob"], cpu("1")),
            "runtimePatches": [patch("example.com/security-manager", "node", json!({
                "securityContext": pod_sc, "containers": [{"name": "sidecar", "securityContext": c_sc}]
            }))]
        }),
    );
    pod(&mut want, "node")["securityContext"] = pod_sc;
    container_mut(&mut want, "node", "sidecar")["securityContext"] = c_sc;
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// trainingruntime_test.go: "succeeded to build JobSet with labels and annotations overrides
/// from the TrainJob's RuntimePatches."
#[test]
fn succeeded_to_build_jobset_with_labels_and_annotations_overrides_from_the_trainjobs_runtimepatches() {
    let (runtime, mut want) = patch_case_runtime("override-container", true);
    let meta_patch = |manager: &str, rjob: &str, n: &str| {
        json!({"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
            "name": rjob,
            "template": {
                "metadata": {"labels": {format!("job-k{n}"): format!("job-v{n}")}},
                "spec": {"template": {"metadata": {
                    "labels": {format!("k{n}"): format!("v{n}")}, "annotations": {format!("a{n}"): format!("v{n}")}
                }}}
            }
        }]}}}})
    };
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({
            "trainer": trainer_container("test:trainjob", &["trainjob"], &["trainjob"], cpu("1")),
            "runtimePatches": [meta_patch("example.com/manager-1", "dataset-initializer", "1"), meta_patch("example.com/manager-2", "node", "2")]
        }),
    );
    for (j, n) in [("dataset-initializer", "1"), ("node", "2")] {
        job(&mut want, j)["template"]["metadata"]["labels"][format!("job-k{n}")] = json!(format!("job-v{n}"));
        let m = &mut job(&mut want, j)["template"]["spec"]["template"]["metadata"];
        m["labels"][format!("k{n}")] = json!(format!("v{n}"));
        m["annotations"][format!("a{n}")] = json!(format!("v{n}"));
    }
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

fn selector_patch(manager: &str, pod_spec: Value) -> Value {
    patch(manager, "node", pod_spec)
}

/// trainingruntime_test.go: "succeeded to build JobSet with TrainJob's RuntimePatches containing
/// duplicate patches for same job" — no mlPolicy, no trainer section: node keeps one pod.
#[test]
fn succeeded_to_build_jobset_with_trainjobs_runtimepatches_containing_duplicate_patches_for_same_job() {
    let mut rt = wrapper_spec();
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    let runtime = training_runtime("test-runtime", json!({"template": {"spec": rt}}));
    let selector = json!({"node.kubernetes.io/instance-type": "p5.48xlarge"});
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({"runtimePatches": [
            selector_patch("example.com/manager-1", json!({"nodeSelector": selector})),
            selector_patch("example.com/manager-1-dup", json!({"serviceAccountName": "test-sa"}))
        ]}),
    );
    let mut want = wrapper_spec();
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    container(&mut want, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    pod(&mut want, "node")["nodeSelector"] = selector;
    pod(&mut want, "node")["serviceAccountName"] = json!("test-sa");
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// trainingruntime_test.go: "succeeded to build JobSet with TrainJob's RuntimePatches targeting
/// the same job with different values" — the later patch wins.
#[test]
fn succeeded_to_build_jobset_with_trainjobs_runtimepatches_targeting_the_same_job_with_different_values() {
    let mut rt = wrapper_spec();
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    let runtime = training_runtime("test-runtime", json!({"template": {"spec": rt}}));
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({"runtimePatches": [
            selector_patch("example.com/manager-1", json!({"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}})),
            selector_patch("example.com/manager-2", json!({"nodeSelector": {"node.kubernetes.io/instance-type": "p5en.48xlarge"}}))
        ]}),
    );
    let mut want = wrapper_spec();
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    container(&mut want, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    pod(&mut want, "node")["nodeSelector"] = json!({"node.kubernetes.io/instance-type": "p5en.48xlarge"});
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// trainingruntime_test.go: "succeeded to build JobSet with dataset and model initializer from
/// the TrainJob." (the model job's container is named `dataset-initializer` in upstream's case,
/// so only the wrapper's `model-initializer` container takes the model section).
#[test]
fn succeeded_to_build_jobset_with_dataset_and_model_initializer_from_the_trainjob() {
    let mut rt = wrapper_spec();
    container(
        &mut rt,
        "dataset-initializer",
        "dataset-initializer",
        "test:runtime",
        &["runtime"],
        &["runtime"],
        cpu("1"),
    );
    container(
        &mut rt,
        "model-initializer",
        "dataset-initializer",
        "test:runtime",
        &["runtime"],
        &["runtime"],
        cpu("1"),
    );
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    let runtime =
        training_runtime("test-runtime", json!({"mlPolicy": {"numNodes": 100}, "template": {"spec": rt.clone()}}));
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({
            "initializer": {
                "dataset": {"storageUri": "hf://trainjob-dataset", "env": [{"name": "TRAIN_JOB", "value": "test:trainjob:dataset"}], "secretRef": {"name": "trainjob-secret-dataset"}},
                "model": {"storageUri": "hf://trainjob-model", "env": [{"name": "TRAIN_JOB", "value": "test:trainjob:model"}], "secretRef": {"name": "trainjob-secret-model"}}
            },
            "trainer": {}
        }),
    );
    let mut want = rt;
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 100);
    for (j, what) in [("dataset-initializer", "dataset"), ("model-initializer", "model")] {
        env(
            &mut want,
            j,
            j,
            json!([
                {"name": "STORAGE_URI", "value": format!("hf://trainjob-{what}")},
                {"name": "TRAIN_JOB", "value": format!("test:trainjob:{what}")}
            ]),
        );
        container_mut(&mut want, j, j)["envFrom"] = json!([{"secretRef": {"name": format!("trainjob-secret-{what}")}}]);
    }
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

fn torch_policy(num_nodes: i64) -> Value {
    ml_policy(Some(num_nodes), json!({"torch": {}}))
}

/// trainingruntime_test.go: "succeeded to build JobSet with Torch values from the TrainJob"
#[test]
fn succeeded_to_build_jobset_with_torch_values_from_the_trainjob() {
    let mut rt = wrapper_spec();
    depends_on_initializers(&mut rt);
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    let runtime =
        training_runtime("test-runtime", json!({"mlPolicy": torch_policy(100), "template": {"spec": rt.clone()}}));
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({"trainer": {"numNodes": 30, "numProcPerNode": 3}}),
    );
    let mut want = rt;
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 30);
    trainer_port(&mut want);
    env(&mut want, "node", "node", torch_env("30", "3", Some("test-job-node-0-0.test-job")));
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// trainingruntime_test.go: "succeeded to build JobSet with Torch values from the Runtime and envs."
#[test]
fn succeeded_to_build_jobset_with_torch_values_from_the_runtime_and_envs() {
    let mut rt = wrapper_spec();
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    env(
        &mut rt,
        "node",
        "node",
        json!([{"name": "TRAIN_JOB", "value": "original"}, {"name": "RUNTIME", "value": "test:runtime"}]),
    );
    let runtime = training_runtime("test-runtime", json!({"mlPolicy": torch_policy(100), "template": {"spec": rt}}));
    let mut t = trainer_container("test:trainjob", &["trainjob"], &["trainjob"], cpu("1"));
    t["env"] =
        json!([{"name": "TRAIN_JOB", "value": "override"}, {"name": "TRAIN_JOB_CUSTOM", "value": "test:trainjob"}]);
    let tj = trainjob("test-job", "TrainingRuntime", "test-runtime", json!({"trainer": t}));
    let mut want = wrapper_spec();
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 100);
    container(&mut want, "node", "node", "test:trainjob", &["trainjob"], &["trainjob"], cpu("1"));
    trainer_port(&mut want);
    let mut e = vec![
        json!({"name": "TRAIN_JOB", "value": "override"}),
        json!({"name": "TRAIN_JOB_CUSTOM", "value": "test:trainjob"}),
    ];
    e.extend(torch_env("100", "1", Some("test-job-node-0-0.test-job")).as_array().cloned().unwrap_or_default());
    e.push(json!({"name": "RUNTIME", "value": "test:runtime"}));
    env(&mut want, "node", "node", Value::Array(e));
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

const TUNE_RUNTIME_COMMAND: [&str; 12] = [
    "tune",
    "run",
    "--rdzv_endpoint=localhost:29500",
    "full_finetune_distributed",
    "--config",
    "llama3_2/1B_full",
    "dataset=torchtune.datasets.instruct_dataset",
    "dataset.source=parquet",
    "dataset.data_dir=/workspace/dataset/data",
    "output_dir=/workspace/output",
    "tokenizer.path=/workspace/model/original/tokenizer.model",
    "checkpointer.checkpoint_dir=/workspace/model",
];

/// A torchtune case of trainingruntime_test.go: the runtime `name` with its `node` command, a
/// TrainJob `tune run` with `args`, `requests`, `numNodes` and `numProcPerNode`; the rendered
/// command and `PET_NPROC_PER_NODE` checked against upstream's.
#[allow(clippy::too_many_arguments)]
fn torchtune_case(
    runtime_name: &str,
    policy_nodes: i64,
    runtime_command: &[&str],
    args: &[&str],
    requests: Value,
    nodes: i64,
    nproc: Option<i64>,
    want_command: &[&str],
    want_nproc: &str,
) {
    let mut rt = wrapper_spec();
    depends_on_initializers(&mut rt);
    container(&mut rt, "node", "node", "test:runtime", runtime_command, &["runtime"], cpu("1"));
    let runtime = training_runtime(
        runtime_name,
        json!({"mlPolicy": torch_policy(policy_nodes), "template": {"spec": rt.clone()}}),
    );
    let mut t = trainer_container("test:trainjob", &["tune", "run"], args, requests.clone());
    t["numNodes"] = json!(nodes);
    if let Some(n) = nproc {
        t["numProcPerNode"] = json!(n);
    }
    let tj = trainjob("test-job", "TrainingRuntime", runtime_name, json!({"trainer": t}));
    let mut want = rt;
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, nodes);
    container(&mut want, "node", "node", "test:trainjob", want_command, args, requests);
    trainer_port(&mut want);
    env(&mut want, "node", "node", torch_env(&nodes.to_string(), want_nproc, None));
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// trainingruntime_test.go: "succeeded to build JobSet with TorchTune values from the TrainJob"
#[test]
fn succeeded_to_build_jobset_with_torchtune_values_from_the_trainjob() {
    torchtune_case(
        "torchtune-llama3.3-70b",
        100,
        &[
            "tune",
            "run",
            "full_finetune_distributed",
            "--config",
            "llama3_3/70B_full_multinode",
            "output_dir=/workspace/model/llama3_3/70B",
            "tokenizer.path=/workspace/model/original/tokenizer.model",
            "checkpointer.checkpoint_dir=/workspace/model",
        ],
        &["dtype=fp16", "batch_size=32", "epochs=10", "loss=torchtune.modules.loss.CEWithChunkedOutputLoss"],
        cpu("1"),
        30,
        Some(3),
        &[
            "tune",
            "run",
            "--rdzv_endpoint=test-job-node-0-0.test-job:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_3/70B_full_multinode",
            "output_dir=/workspace/model/llama3_3/70B",
            "tokenizer.path=/workspace/model/original/tokenizer.model",
            "checkpointer.checkpoint_dir=/workspace/model",
        ],
        "3",
    );
}

fn tune_res(gpu: &str) -> Value {
    json!({"cpu": "1", "example.com/gpu": gpu})
}

const TUNE_OVERRIDES: [&str; 3] = [
    "output_dir=/workspace/output",
    "tokenizer.path=/workspace/model/original/tokenizer.model",
    "checkpointer.checkpoint_dir=/workspace/model",
];

fn tune_command<'a>(prefix: &[&'a str]) -> Vec<&'a str> {
    let mut c: Vec<&str> = vec!["tune", "run"];
    c.extend(prefix);
    c.extend(TUNE_OVERRIDES);
    c
}

/// trainingruntime_test.go: "succeeded to build Jobset with TorchTune values from the TrainJob (LoRA)"
#[test]
fn succeeded_to_build_jobset_with_torchtune_values_from_the_trainjob_lora() {
    let args = [
        "dataset.data_dir=/workspace/dataset/data",
        "model.apply_lora_to_mlp=True",
        "model.lora_attn_modules=[q_proj,k_proj,v_proj,output_proj]",
        "dataset=torchtune.datasets.instruct_dataset",
        "dataset.source=parquet",
    ];
    let want = tune_command(&[
        "--rdzv_endpoint=test-job-node-0-0.test-job:29500",
        "lora_finetune_distributed",
        "--config",
        "llama3_2/1B_lora",
    ]);
    torchtune_case("torchtune-llama3.2-1b", 1, &TUNE_RUNTIME_COMMAND, &args, tune_res("2"), 1, None, &want, "auto");
}

/// trainingruntime_test.go: "succeeded to build Jobset with TorchTune values from the TrainJob (QLoRA)"
#[test]
fn succeeded_to_build_jobset_with_torchtune_values_from_the_trainjob_qlora() {
    let args = [
        "dataset.data_dir=/workspace/dataset/data",
        "model.apply_lora_to_mlp=True",
        "model.lora_attn_modules=[q_proj,k_proj,v_proj,output_proj]",
        "model.quantize_base=True",
        "dataset=torchtune.datasets.instruct_dataset",
        "dataset.source=parquet",
    ];
    let want = tune_command(&["lora_finetune_single_device", "--config", "llama3_2/1B_qlora_single_device"]);
    torchtune_case("torchtune-llama3.2-1b", 1, &TUNE_RUNTIME_COMMAND, &args, tune_res("1"), 1, None, &want, "auto");
}

/// trainingruntime_test.go: "succeeded to build Jobset with TorchTune values from the TrainJob (DoRA)"
#[test]
fn succeeded_to_build_jobset_with_torchtune_values_from_the_trainjob_dora() {
    let args = [
        "dataset.data_dir=/workspace/dataset/data",
        "model.apply_lora_to_mlp=True",
        "model.lora_attn_modules=[q_proj,k_proj,v_proj,output_proj]",
        "model.quantize_base=True",
        "model.use_dora=True",
        "dataset=torchtune.datasets.instruct_dataset",
        "dataset.source=parquet",
    ];
    let want = tune_command(&[
        "--rdzv_endpoint=test-job-node-0-0.test-job:29500",
        "lora_finetune_distributed",
        "--config",
        "llama3_2/1B_lora",
    ]);
    torchtune_case("torchtune-llama3.2-1b", 1, &TUNE_RUNTIME_COMMAND, &args, tune_res("2"), 1, None, &want, "auto");
}

fn ssh_volume(job: &str) -> Value {
    json!({"name": "mpi-ssh-auth", "secret": {
        "secretName": format!("{job}-mpi-ssh-auth"), "defaultMode": 256,
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa", "mode": 416},
            {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 420},
            {"key": "ssh-publickey", "path": "authorized_keys", "mode": 420}
        ]
    }})
}

fn hostfile_volume(job: &str) -> Value {
    json!({"name": "mpi-hostfile", "configMap": {
        "name": format!("{job}-mpi-hostfile"), "items": [{"key": "hostfile", "path": "hostfile", "mode": 292}]
    }})
}

/// trainingruntime_test.go: "succeeded to build JobSet with OpenMPI values from the TrainJob"
#[test]
fn succeeded_to_build_jobset_with_openmpi_values_from_the_trainjob() {
    let mut rt = wrapper_spec();
    launcher_replica(&mut rt);
    replicas(&mut rt, 1, &["launcher"]);
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    let policy = ml_policy(
        Some(1),
        json!({"mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": false}}),
    );
    let runtime = training_runtime("test-runtime", json!({"mlPolicy": policy, "template": {"spec": rt.clone()}}));
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({"trainer": {"numNodes": 2, "numProcPerNode": 8}}),
    );
    let objects = render_objects(&runtime, &tj);
    let mut want = rt;
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node", "launcher"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer", "launcher"]);
    num_nodes(&mut want, 2);
    pod(&mut want, "launcher")["volumes"] = json!([ssh_volume("test-job"), hostfile_volume("test-job")]);
    pod(&mut want, "node")["volumes"].as_array_mut().expect("volumes").push(ssh_volume("test-job"));
    container_mut(&mut want, "launcher", "node")["volumeMounts"] =
        json!([{"name": "mpi-ssh-auth", "mountPath": "/root/.ssh"}, {"name": "mpi-hostfile", "mountPath": "/etc/mpi"}]);
    container_mut(&mut want, "node", "node")["volumeMounts"]
        .as_array_mut()
        .expect("mounts")
        .push(json!({"name": "mpi-ssh-auth", "mountPath": "/root/.ssh"}));
    container_mut(&mut want, "launcher", "node")["env"] = json!([
        {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "OMPI_MCA_orte_set_default_slots", "value": "8"},
        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"}
    ]);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
    assert_same(
        "hostfile ConfigMap",
        object(&objects, "ConfigMap", "test-job-mpi-hostfile"),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "test-job-mpi-hostfile", "namespace": NS, "ownerReferences": owner("test-job")},
            "data": {"hostfile": "test-job-node-0-0.test-job slots=8\ntest-job-node-0-1.test-job slots=8\n"}
        }),
    );
    let secret = object(&objects, "Secret", "test-job-mpi-ssh-auth");
    assert_eq!(secret["type"], "kubernetes.io/ssh-auth");
    assert_eq!(secret["immutable"], true);
    assert_eq!(secret["metadata"]["ownerReferences"], owner("test-job"));
}

/// trainingruntime_test.go: "merged resourcesPerNode keeps runtime resources when trainjob sets
/// gpu only"
#[test]
fn merged_resourcespernode_keeps_runtime_resources_when_trainjob_sets_gpu_only() {
    let mut rt = wrapper_spec();
    container(&mut rt, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    let runtime = training_runtime("test-runtime", json!({"mlPolicy": {"numNodes": 1}, "template": {"spec": rt}}));
    let tj = trainjob(
        "test-job",
        "TrainingRuntime",
        "test-runtime",
        json!({"trainer": {"numNodes": 1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}}}}),
    );
    let mut want = wrapper_spec();
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 1);
    container(&mut want, "node", "node", "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    container_mut(&mut want, "node", "node")["resources"]["limits"] = json!({"nvidia.com/gpu": "4"});
    let objects = render_objects(&runtime, &tj);
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
}

/// trainingruntime_test.go: "missing trainingRuntime resource" — at admission, the webhook's
/// `ValidateObjects` names it (pkg/runtime/core/trainingruntime.go).
#[test]
fn missing_trainingruntime_resource() {
    let tj = trainjob("test-job-3", "TrainingRuntime", "test-runtime-3", json!({"trainer": {}}));
    let denial = admit(&tj, None, None).expect_err("denied");
    assert_eq!(denial.code(), 403);
    assert_eq!(
        denial.to_string(),
        r#"spec.runtimeRef: Invalid value: {"name":"test-runtime-3","apiGroup":"trainer.kubeflow.org","kind":"TrainingRuntime"}: TrainingRuntime.trainer.kubeflow.org "test-runtime-3" not found: specified trainingRuntime must be created before the TrainJob is created"#
    );
}

// ---------------------------------------------------------------------------------------------
// pkg/runtime/core/clustertrainingruntime_test.go, TestClusterTrainingRuntimeNewObjects.

/// clustertrainingruntime_test.go: "succeeded to build PodGroup and JobSet with NumNodes from
/// the Runtime and container from the Trainer." Stowage's PodGroup counts only the jobs that
/// wait on none (docs/rendering.md): minMember 2 where Trainer has 102; minResources is
/// Trainer's.
#[test]
fn succeeded_to_build_podgroup_and_jobset_with_numnodes_from_the_runtime_and_container_from_the_trainer() {
    let mut rt = wrapper_spec();
    depends_on_initializers(&mut rt);
    for j in ["dataset-initializer", "model-initializer", "node"] {
        container(&mut rt, j, j, "test:runtime", &["runtime"], &["runtime"], cpu("1"));
    }
    let runtime = cluster_runtime(
        "test-runtime",
        json!({
            "mlPolicy": {"numNodes": 100},
            "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
            "template": {"spec": rt.clone()}
        }),
    );
    let tj = trainjob(
        "test-job",
        "ClusterTrainingRuntime",
        "test-runtime",
        json!({"suspend": true, "trainer": trainer_container("test:trainjob", &["trainjob"], &["trainjob"], cpu("1"))}),
    );
    let objects = render_objects(&runtime, &tj);
    let mut want = rt;
    want["suspend"] = json!(true);
    pod_label_all(&mut want, "scheduling.x-k8s.io/pod-group", "test-job");
    replicas(&mut want, 1, &["dataset-initializer", "model-initializer", "node"]);
    parallelism_completions(&mut want, 1, &["dataset-initializer", "model-initializer"]);
    num_nodes(&mut want, 100);
    container(&mut want, "node", "node", "test:trainjob", &["trainjob"], &["trainjob"], cpu("1"));
    assert_same("JobSet", object(&objects, "JobSet", "test-job"), want_jobset("test-job", want, json!({}), json!({})));
    let pg = object(&objects, "PodGroup", "test-job");
    assert_eq!(pg["spec"]["minResources"], json!({"cpu": "102"}));
    assert_eq!(pg["spec"]["scheduleTimeoutSeconds"], 120);
    assert_eq!(pg["spec"]["minMember"], 2, "Stowage: the node job waits on the initializers");
}

/// clustertrainingruntime_test.go: "missing trainingRuntime resource" (a ClusterTrainingRuntime),
/// and pkg/webhooks/trainjob_webhook_test.go TestValidateCreate "unsupported runtime": the path
/// is Trainer's own spelling `spec.RuntimeRef`.
#[test]
fn missing_clustertrainingruntime_resource_and_unsupported_runtime() {
    let tj = trainjob("valid-job-name", "ClusterTrainingRuntime", "unsupported-runtime", json!({}));
    let denial = admit(&tj, None, None).expect_err("denied");
    let errors = denial.errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].error_type, errors[0].field.as_str(), errors[0].rule),
        (ErrorType::Invalid, "spec.RuntimeRef", Rule::Webhook)
    );
    assert_eq!(
        denial.message(),
        r#"admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: spec.RuntimeRef: Invalid value: {"name":"unsupported-runtime","apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}: ClusterTrainingRuntime.trainer.kubeflow.org "unsupported-runtime" not found: specified clusterTrainingRuntime must be created before the TrainJob is created"#
    );
}

/// pkg/webhooks/trainjob_webhook_test.go TestValidateCreate: "valid trainjob name compliant with
/// RFC 1035" and "deprecated runtime referenced" (a warning, not a denial).
#[test]
fn valid_trainjob_name_compliant_with_rfc_1035() {
    let runtime = cluster_runtime("test-runtime", json!({"template": {"spec": wrapper_spec()}}));
    let tj = trainjob("valid-job-name", "ClusterTrainingRuntime", "test-runtime", json!({}));
    assert_eq!(admit(&tj, Some(&runtime), None), Ok(()));
    let mut deprecated = serde_json::to_value(match &runtime {
        Runtime::Cluster(c) => c,
        Runtime::Namespaced(_) => unreachable!(),
    })
    .expect("json");
    deprecated["metadata"]["labels"] = json!({"trainer.kubeflow.org/support": "deprecated"});
    let deprecated = Runtime::Cluster(serde_json::from_value(deprecated).expect("runtime"));
    assert_eq!(admit(&tj, Some(&deprecated), None), Ok(()), "deprecated runtime referenced");
}

/// An unknown runtime kind is refused before any lookup with a plain error
/// (pkg/webhooks/trainjob_webhook.go `ValidateCreate`).
#[test]
fn unknown_runtime_kind_is_an_unsupported_runtime() {
    let tj = trainjob("job", "PyTorchJob", "x", json!({}));
    let denial = admit(&tj, None, None).expect_err("denied");
    assert_eq!(denial, Denial::UnsupportedRuntime { key: "PyTorchJob.trainer.kubeflow.org".into() });
    assert_eq!(
        denial.message(),
        r#"admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: unsupported runtime: PyTorchJob.trainer.kubeflow.org"#
    );
}

// ---------------------------------------------------------------------------------------------
// pkg/runtime/framework/plugins/plainml/plainml_test.go, TestPlainML.

/// plainml_test.go: "trainJob trainer numNodes are respected rather than runtimeInfo" — a policy
/// without a framework; and without any mlPolicy PlainML applies numNodes too (its guard only
/// skips torch, MPI and JAX policies).
#[test]
fn trainjob_trainer_numnodes_are_respected_rather_than_runtimeinfo() {
    for policy in [Some(json!({})), None] {
        let mut rt = wrapper_spec();
        num_nodes(&mut rt, 100);
        let mut spec = json!({"template": {"spec": rt}});
        if let Some(p) = &policy {
            spec["mlPolicy"] = p.clone();
        }
        let runtime = training_runtime("test-runtime", spec);
        let tj = trainjob("test", "TrainingRuntime", "test-runtime", json!({"trainer": {"numNodes": 200}}));
        let js = object(&render_objects(&runtime, &tj), "JobSet", "test");
        let node = &js["spec"]["replicatedJobs"][2];
        assert_eq!(
            (node["name"].as_str(), &node["template"]["spec"]["parallelism"]),
            (Some("node"), &json!(200)),
            "{policy:?}"
        );
        assert_eq!(node["template"]["spec"]["completions"], 200);
        assert!(node["template"]["spec"]["template"]["spec"]["containers"][0].get("env").is_none(), "no env: []");
    }
}

/// plainml_test.go: "trainJob trainer env are respected rather than runtimeInfo"
#[test]
fn trainjob_trainer_env_are_respected_rather_than_runtimeinfo() {
    let mut rt = wrapper_spec();
    env(&mut rt, "node", "node", json!([{"name": "CONFLICT", "value": "FROM_TRAINER"}]));
    let runtime = training_runtime("test-runtime", json!({"mlPolicy": {}, "template": {"spec": rt}}));
    let tj = trainjob(
        "test",
        "TrainingRuntime",
        "test-runtime",
        json!({"trainer": {"numNodes": 1, "env": [{"name": "CONFLICT", "value": "FROM_TRAINER"}]}}),
    );
    let js = object(&render_objects(&runtime, &tj), "JobSet", "test");
    let node = &js["spec"]["replicatedJobs"][2]["template"]["spec"];
    assert_eq!(node["parallelism"], 1);
    assert_eq!(
        node["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "CONFLICT", "value": "FROM_TRAINER"}])
    );
}

// ---------------------------------------------------------------------------------------------
// pkg/runtime/framework/plugins/torch/torch_test.go, TestTorchEnforceMLPolicy.

/// The env of container `node` of a one-job torch runtime for a TrainJob.
fn torch_node(trainer: Value, name: &str) -> Value {
    torch_node_of("torch", trainer, name)
}

fn torch_node_of(runtime_name: &str, trainer: Value, name: &str) -> Value {
    let spec = json!({"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}
    }}]});
    let runtime = training_runtime(runtime_name, json!({"mlPolicy": {"torch": {}}, "template": {"spec": spec}}));
    let tj = trainjob(name, "TrainingRuntime", runtime_name, json!({"trainer": trainer}));
    object(&render_objects(&runtime, &tj), "JobSet", name)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        ["spec"]["containers"][0]
        .clone()
}

/// torch_test.go, every `nproc_per_node` case of TestTorchEnforceMLPolicy and
/// "trainJob numNodes is respected rather than mlPolicy one", "multi-node multi-GPU training
/// with complete info": PET_NNODES and PET_NPROC_PER_NODE from the TrainJob's resources.
#[test]
fn torch_enforce_ml_policy_nproc_per_node() {
    let cases: [(&str, Value, &str, &str); 14] = [
        ("trainJob numNodes is respected rather than mlPolicy one", json!({"numNodes": 2}), "2", "1"),
        ("nproc_per_node=auto with CPU limit", trainer_container("test:image", &[], &[], cpu("4")), "1", "4"),
        ("nproc_per_node=auto with no CPU resources", json!({"image": "test:image", "resourcesPerNode": {}}), "1", "1"),
        ("nproc_per_node=auto with low CPU limit", trainer_container("test:image", &[], &[], cpu("2")), "1", "2"),
        (
            "nproc_per_node=auto with CPU request but no limit",
            trainer_container("test:image", &[], &[], cpu("3")),
            "1",
            "3",
        ),
        (
            "nproc_per_node=auto with millicore CPU limit",
            trainer_container("test:image", &[], &[], cpu("2.5")),
            "1",
            "3",
        ),
        (
            "nproc_per_node=auto with fractional CPU limit",
            trainer_container("test:image", &[], &[], cpu("0.7")),
            "1",
            "1",
        ),
        (
            "nproc_per_node=auto with GPU request should remain auto",
            trainer_container("test:image", &[], &[], json!({"example.com/gpu": "2"})),
            "1",
            "auto",
        ),
        (
            "explicitly set nproc_per_node should be preserved",
            {
                let mut t = trainer_container("test:image", &[], &[], cpu("8"));
                t["numProcPerNode"] = json!(3);
                t
            },
            "1",
            "3",
        ),
        (
            "nproc_per_node=auto with millicore CPU limit in m format",
            trainer_container("test:image", &[], &[], cpu("2500m")),
            "1",
            "3",
        ),
        ("nproc_per_node=cpu with CPU limit", trainer_container("test:image", &[], &[], cpu("4")), "1", "4"),
        (
            "nproc_per_node=auto resolves to GPU count when GPU resources present",
            trainer_container("test:image", &[], &[], json!({"cpu": "6", "example.com/gpu": "2"})),
            "1",
            "auto",
        ),
        ("nproc_per_node=cpu with fractional CPU", trainer_container("test:image", &[], &[], cpu("3.7")), "1", "4"),
        (
            "multi-node multi-GPU training with complete info",
            {
                let mut t = trainer_container(
                    "pytorch/pytorch:2.0.0-cuda11.7-cudnn8-runtime",
                    &[],
                    &[],
                    json!({"cpu": "8", "memory": "16Gi", "example.com/gpu": "4"}),
                );
                t["numNodes"] = json!(4);
                t
            },
            "4",
            "auto",
        ),
    ];
    for (name, trainer, nnodes, nproc) in cases {
        let c = torch_node(trainer, "test-job");
        let env = c["env"].as_array().cloned().unwrap_or_default();
        let get = |n: &str| env.iter().find(|e| e["name"] == n).map(|e| e["value"].clone());
        assert_eq!(get("PET_NNODES"), Some(json!(nnodes)), "{name}");
        assert_eq!(get("PET_NPROC_PER_NODE"), Some(json!(nproc)), "{name}");
        assert_eq!(get("PET_MASTER_ADDR"), Some(json!("test-job-node-0-0.test-job")), "{name}");
        assert_eq!(c["ports"], json!([{"containerPort": 29500}]), "{name}");
    }
}

/// torch_test.go: "multi-devices full fine-tuning with torchtune", "single-device full
/// fine-tuning with torchtune", "multi-nodes full fine-tuning with torchtune": the PET env
/// without the master address and port.
#[test]
fn torch_enforce_ml_policy_torchtune() {
    let res = |gpu: &str| json!({"cpu": "8", "memory": "16Gi", "example.com/gpu": gpu});
    let cases = [
        ("multi-devices full fine-tuning with torchtune", "torchtune-llama3.2-1b", 1, None, res("4"), "1", "auto"),
        ("single-device full fine-tuning with torchtune", "torchtune-llama3.2-1b", 1, Some(1), res("1"), "1", "1"),
        ("multi-nodes full fine-tuning with torchtune", "torchtune-llama3.3-70b", 2, Some(8), res("8"), "2", "8"),
    ];
    for (name, runtime, nodes, nproc, requests, nnodes, want_nproc) in cases {
        let mut t = trainer_container(
            "ghcr.io/kubeflow/trainer/torchtune-trainer",
            &["tune", "run"],
            &["dtype=fp16"],
            requests,
        );
        t["numNodes"] = json!(nodes);
        if let Some(n) = nproc {
            t["numProcPerNode"] = json!(n);
        }
        let env = torch_node_of(runtime, t, "torchtune-job")["env"].clone();
        assert_eq!(env, torch_env(nnodes, want_nproc, None), "{name}");
    }
}

/// torch_test.go: "envInjection with init container" and "envInjection with torchtune command"
/// (on the 70B runtime: the webhook refuses two nodes for the 1B model upstream's case names):
/// injection targets get the PET env with the master address and port, whatever the command.
#[test]
fn torch_enforce_ml_policy_env_injection() {
    let spec = json!({"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {
            "initContainers": [{"name": "preflight-check"}],
            "containers": [{"name": "node"}]
        }}}
    }}]});
    let policy =
        json!({"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["preflight-check"]}]}}});
    let runtime = training_runtime("torchtune-llama3.3-70b", json!({"mlPolicy": policy, "template": {"spec": spec}}));
    let tune = {
        let mut t = trainer_container(
            "ghcr.io/kubeflow/trainer/torchtune-trainer",
            &["tune", "run"],
            &["dtype=fp16"],
            json!({"cpu": "8", "example.com/gpu": "4"}),
        );
        t["numNodes"] = json!(2);
        t
    };
    let cases = [
        ("envInjection with init container", json!({"numNodes": 2}), "1", true),
        ("envInjection with torchtune command", tune, "auto", false),
    ];
    for (name, t, nproc, main_has_master) in cases {
        let tj = trainjob("test-job", "TrainingRuntime", "torchtune-llama3.3-70b", json!({"trainer": t}));
        let js = object(&render_objects(&runtime, &tj), "JobSet", "test-job");
        let pod = &js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
        let master = Some("test-job-node-0-0.test-job");
        assert_eq!(pod["initContainers"][0]["env"], torch_env("2", nproc, master), "{name}");
        assert_eq!(pod["containers"][0]["env"], torch_env("2", nproc, master.filter(|_| main_has_master)), "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Validation: each plugin's `Validate` through the admission webhook.

fn denied(tj: &TrainJob, rt: &Runtime, old: Option<&TrainJob>) -> Vec<String> {
    match admit(tj, Some(rt), old) {
        Ok(()) => Vec::new(),
        Err(d) => {
            assert_eq!(d.code(), 403, "{d}");
            d.errors().iter().map(ToString::to_string).collect()
        }
    }
}

fn torchtune_runtime(name: &str) -> Runtime {
    let mut rt = wrapper_spec();
    container(
        &mut rt,
        "node",
        "node",
        "ghcr.io/kubeflow/trainer/torchtune-trainer",
        &TUNE_RUNTIME_COMMAND,
        &[],
        json!({}),
    );
    cluster_runtime(name, json!({"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": rt}}))
}

fn tune_job(runtime: &str, nodes: i64, args: &[&str], requests: Value) -> TrainJob {
    let mut t = trainer_container("ghcr.io/kubeflow/trainer/torchtune-trainer", &["tune", "run"], args, requests);
    t["numNodes"] = json!(nodes);
    trainjob("test", "ClusterTrainingRuntime", runtime, json!({"trainer": t}))
}

/// torch_test.go TestTorchValidate: "envInjection target container does not exist"
#[test]
fn torch_validate_envinjection_target_container_does_not_exist() {
    let spec = json!({"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}
    }}]});
    let policy =
        json!({"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["missing-container"]}]}}});
    let rt = cluster_runtime("torch", json!({"mlPolicy": policy, "template": {"spec": spec}}));
    let tj = trainjob("test", "ClusterTrainingRuntime", "torch", json!({}));
    assert_eq!(
        denied(&tj, &rt, Some(&tj)),
        [
            r#"spec.runtimeRef: Invalid value: {"jobName":"node","containerNames":["missing-container"]}: envInjection target podSet "node" container "missing-container" not found in runtime template"#
        ]
    );
}

/// torch_test.go TestTorchValidate: "valid environment variable present" and "reserved
/// environment variable present"
#[test]
fn torch_validate_reserved_environment_variable_present() {
    let rt = torchtune_runtime("torch-distributed");
    let env = |extra: &str| json!({"trainer": {"env": [{"name": "test", "value": "value"}, {"name": extra, "value": "value"}]}});
    let ok = trainjob("test", "ClusterTrainingRuntime", "torch-distributed", env("test2"));
    assert!(denied(&ok, &rt, None).is_empty(), "valid environment variable present");
    let bad = trainjob("test", "ClusterTrainingRuntime", "torch-distributed", env("PET_NPROC_PER_NODE"));
    assert_eq!(
        denied(&bad, &rt, None),
        [
            r#"spec.trainer.env: Invalid value: [{"name":"test","value":"value"},{"name":"PET_NPROC_PER_NODE","value":"value"}]: must not have reserved envs, invalid envs configured: [PET_NPROC_PER_NODE]"#
        ]
    );
}

/// torch_test.go TestTorchValidate, the torchtune cases: "unsupported pretrained model",
/// "multi-node mode is only enabled for Llama-3.3-70b", "qlora is not supported for qwen in
/// torchtune", "muti-devices qlora is not supported for llama3.2-1b in torchtune", "lora is not
/// supported for multi-node training in torchtune", "lora is supported for single-node training
/// in torchtune", "immutable runtime config must not be set in trainer args", "multiple
/// immutable runtime configs must not be set in trainer args".
#[test]
fn torch_validate_torchtune() {
    let lora = "model.lora_attn_modules=[q_proj, v_proj, output_proj]";
    let qlora = ["model.lora_attn_modules=[q_proj, v_proj, output_proj]", "model.quantize_base=True"];
    type Case<'a> = (&'a str, &'a str, i64, Vec<&'a str>, Value, Vec<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        (
            "unsupported pretrained model",
            "torchtune-llama3.1-70b",
            1,
            vec![],
            json!({}),
            vec![
                r#"spec.runtimeRef.name: Invalid value: "torchtune-llama3.1-70b": must have a supported pretrained model, invalid model configured: llama3_1/70B"#,
            ],
        ),
        (
            "multi-node mode is only enabled for Llama-3.3-70b",
            "torchtune-llama3.2-3b",
            2,
            vec![],
            json!({}),
            vec!["spec.trainer.numNodes: Invalid value: 2: must be 1 for llama3_2/3B model"],
        ),
        (
            "qlora is not supported for qwen in torchtune",
            "torchtune-qwen2.5-1.5b",
            1,
            qlora.to_vec(),
            json!({}),
            vec![
                r#"spec.runtimeRef.name: Invalid value: "torchtune-qwen2.5-1.5b": QLoRA is not supported for qwen2_5/1.5B model"#,
            ],
        ),
        (
            "muti-devices qlora is not supported for llama3.2-1b in torchtune",
            "torchtune-llama3.2-1b",
            1,
            qlora.to_vec(),
            json!({"example.com/gpu": "2"}),
            vec![
                r#"spec.trainer.numProcPerNode: Invalid value: "auto": must be auto or 1 for llama3_2/1B model when using QLoRA"#,
                r#"spec.trainer.resourcesPerNode: Invalid value: {"requests":{"example.com/gpu":"2"}}: must have gpu resource with value 1 for llama3_2/1B model when using QLoRA"#,
            ],
        ),
        (
            "lora is not supported for multi-node training in torchtune",
            "torchtune-llama3.3-70b",
            2,
            vec![lora],
            json!({}),
            vec![
                "spec.trainer.numNodes: Invalid value: 2: LoRA fine-tuning is not supported for multi-node training in TorchTune",
            ],
        ),
        (
            "lora is supported for single-node training in torchtune",
            "torchtune-llama3.3-70b",
            1,
            vec![lora],
            json!({}),
            vec![],
        ),
        (
            "immutable runtime config must not be set in trainer args",
            "torchtune-llama3.2-1b",
            1,
            vec!["output_dir=/custom/output"],
            json!({}),
            vec![
                r#"spec.trainer.args[0]: Invalid value: "output_dir=/custom/output": must not set immutable config "output_dir" in trainer args; it is managed by the runtime"#,
            ],
        ),
        (
            "multiple immutable runtime configs must not be set in trainer args",
            "torchtune-llama3.2-1b",
            1,
            vec!["output_dir=/custom/output", "tokenizer.path=/custom/tokenizer.model", "epochs=1"],
            json!({}),
            vec![
                r#"spec.trainer.args[0]: Invalid value: "output_dir=/custom/output": must not set immutable config "output_dir" in trainer args; it is managed by the runtime"#,
                r#"spec.trainer.args[1]: Invalid value: "tokenizer.path=/custom/tokenizer.model": must not set immutable config "tokenizer.path" in trainer args; it is managed by the runtime"#,
            ],
        ),
    ];
    for (name, runtime, nodes, args, requests, want) in cases {
        let rt = torchtune_runtime(runtime);
        let tj = tune_job(runtime, nodes, &args, requests);
        assert_eq!(denied(&tj, &rt, None), want, "{name}");
    }
}

fn mpi_runtime(launcher: bool, node: bool, launcher_as_node: bool) -> Runtime {
    let j = |name: &str, ancestor: bool| {
        let mut v =
            json!({"name": name, "template": {"spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}});
        if ancestor {
            v["template"]["metadata"] = json!({"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}});
        }
        v
    };
    let mut jobs = Vec::new();
    if launcher {
        jobs.push(j("launcher", true));
    }
    if node {
        jobs.push(j("node", !launcher));
    }
    if jobs.is_empty() {
        jobs.push(j("trainer", true));
    }
    let policy = json!({"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": launcher_as_node}});
    cluster_runtime("mpi", json!({"mlPolicy": policy, "template": {"spec": {"replicatedJobs": jobs}}}))
}

/// mpi_test.go TestValidate: "runtime does not have Launcher but TrainJob has only 1 numNodes",
/// "runtime does not have Launcher even though MPI with runLauncherAsNode has 2 numNodes",
/// "runtime does not have Node even though ...", "runtime does not have Launcher and Node even
/// though ...", "trainer has reserved MPI env OMPI_MCA_orte_default_hostfile", "trainer has
/// multiple reserved MPI envs", "trainer has non-reserved env is valid".
#[test]
fn mpi_validate() {
    const NUM_NODES: &str = "spec.trainer.numNodes: Invalid value: 2: must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node";
    let job = |t: Value| trainjob("test", "ClusterTrainingRuntime", "mpi", json!({"trainer": t}));
    let cases: Vec<(&str, Runtime, Value, Vec<&str>)> = vec![
        (
            "runtime does not have Launcher but TrainJob has only 1 numNodes",
            mpi_runtime(false, true, true),
            json!({"numNodes": 1}),
            vec![],
        ),
        (
            "runtime does not have Launcher even though MPI with runLauncherAsNode has 2 numNodes",
            mpi_runtime(false, true, true),
            json!({"numNodes": 2}),
            vec![NUM_NODES],
        ),
        (
            "runtime does not have Node even though MPI with runLauncherAsNode has 2 numNodes",
            mpi_runtime(true, false, true),
            json!({"numNodes": 2}),
            vec![NUM_NODES],
        ),
        (
            "runtime does not have Launcher and Node even though MPI with runLauncherAsNode has 2 numNodes",
            mpi_runtime(false, false, true),
            json!({"numNodes": 2}),
            vec![NUM_NODES],
        ),
        (
            "trainer has reserved MPI env OMPI_MCA_orte_default_hostfile",
            mpi_runtime(true, true, false),
            json!({"env": [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/custom/hostfile"}]}),
            vec![
                r#"spec.trainer.env: Invalid value: [{"name":"OMPI_MCA_orte_default_hostfile","value":"/custom/hostfile"}]: must not have reserved envs, invalid envs configured: [OMPI_MCA_orte_default_hostfile]"#,
            ],
        ),
        (
            "trainer has multiple reserved MPI envs",
            mpi_runtime(true, true, false),
            json!({"env": [
                {"name": "OMPI_MCA_plm_rsh_args", "value": "-o Foo"},
                {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "false"},
                {"name": "OMPI_MCA_orte_set_default_slots", "value": "4"}
            ]}),
            vec![
                r#"spec.trainer.env: Invalid value: [{"name":"OMPI_MCA_plm_rsh_args","value":"-o Foo"},{"name":"OMPI_MCA_orte_keep_fqdn_hostnames","value":"false"},{"name":"OMPI_MCA_orte_set_default_slots","value":"4"}]: must not have reserved envs, invalid envs configured: [OMPI_MCA_orte_keep_fqdn_hostnames OMPI_MCA_orte_set_default_slots OMPI_MCA_plm_rsh_args]"#,
            ],
        ),
        (
            "trainer has non-reserved env is valid",
            mpi_runtime(true, true, false),
            json!({"env": [{"name": "MY_CUSTOM_ENV", "value": "value"}]}),
            vec![],
        ),
    ];
    for (name, rt, t, want) in cases {
        assert_eq!(denied(&job(t), &rt, None), want, "{name}");
    }
}

/// mpi_test.go TestMPI: "trainJob numNodes is respected rather than mlPolicy one", "trainJob
/// numProcPerNode is respected rather than mlPolicy one", "numProcPerNode is set to number of
/// GPUs in TrainJob", "runLauncherAsNode is true": counts and slots in the rendered hostfile.
#[test]
fn mpi_enforce_ml_policy() {
    let cases: Vec<(&str, bool, Value, i64, &str)> = vec![
        ("trainJob numNodes is respected rather than mlPolicy one", false, json!({"numNodes": 2}), 2, "slots=1"),
        (
            "trainJob numProcPerNode is respected rather than mlPolicy one",
            false,
            json!({"numNodes": 1, "numProcPerNode": 2}),
            1,
            "slots=2",
        ),
        (
            "numProcPerNode is set to number of GPUs in TrainJob",
            false,
            json!({"numNodes": 1, "image": "test:trainjob", "command": ["trainjob"], "args": ["trainjob"], "resourcesPerNode": {"requests": {"custom.com/gpu": "5"}}}),
            1,
            "slots=5",
        ),
        ("runLauncherAsNode is true", true, json!({"numNodes": 10}), 9, "slots=1"),
    ];
    for (name, launcher_as_node, t, node_pods, slots) in cases {
        let rt = mpi_runtime(true, true, launcher_as_node);
        let tj = trainjob("trainjob", "ClusterTrainingRuntime", "mpi", json!({"trainer": t}));
        let objects = render_objects(&rt, &tj);
        let js = object(&objects, "JobSet", "trainjob");
        assert_eq!(js["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"], node_pods, "{name}");
        let hostfile = object(&objects, "ConfigMap", "trainjob-mpi-hostfile")["data"]["hostfile"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut want: Vec<String> = Vec::new();
        if launcher_as_node {
            want.push(format!("trainjob-launcher-0-0.trainjob {slots}"));
        }
        want.extend((0..node_pods).map(|p| format!("trainjob-node-0-{p}.trainjob {slots}")));
        assert_eq!(hostfile.lines().collect::<Vec<_>>(), want, "{name}");
        let launcher_env =
            &js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"];
        let slot_env =
            launcher_env.as_array().and_then(|e| e.iter().find(|x| x["name"] == "OMPI_MCA_orte_set_default_slots"));
        assert_eq!(slot_env.map(|e| e["value"].clone()), Some(json!(slots.trim_start_matches("slots="))), "{name}");
    }
}

fn xgboost_runtime(policy_nodes: i64, resources: Option<Value>) -> Runtime {
    let mut c = json!({"name": "node"});
    if let Some(r) = resources {
        c["resources"] = r;
    }
    let spec = json!({"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {"containers": [c]}}}
    }}]});
    cluster_runtime(
        "xgboost",
        json!({"mlPolicy": {"numNodes": policy_nodes, "xgboost": {}}, "template": {"spec": spec}}),
    )
}

/// xgboost_test.go TestXGBoostValidate: "no error when env does not contain reserved names",
/// "error when using reserved DMLC_TRACKER_URI env", "error when using reserved DMLC_NUM_WORKER
/// env", "multiple errors when using multiple reserved envs".
#[test]
fn xgboost_validate() {
    let rt = xgboost_runtime(1, None);
    let job = |env: Value| trainjob("test", "ClusterTrainingRuntime", "xgboost", json!({"trainer": {"env": env}}));
    assert!(denied(&job(json!([{"name": "CUSTOM_VAR", "value": "x"}])), &rt, None).is_empty());
    assert_eq!(
        denied(&job(json!([{"name": "DMLC_TRACKER_URI", "value": "custom"}])), &rt, None),
        ["spec.trainer.env[0]: Forbidden: DMLC_TRACKER_URI is reserved for the XGBoost runtime"]
    );
    assert_eq!(
        denied(&job(json!([{"name": "DMLC_NUM_WORKER", "value": "4"}])), &rt, None),
        ["spec.trainer.env[0]: Forbidden: DMLC_NUM_WORKER is reserved for the XGBoost runtime"]
    );
    let all = json!([
        {"name": "DMLC_TRACKER_URI", "value": "a"}, {"name": "DMLC_TRACKER_PORT", "value": "b"},
        {"name": "DMLC_TASK_ID", "value": "c"}, {"name": "DMLC_NUM_WORKER", "value": "d"}
    ]);
    let denial = admit(&job(all), Some(&rt), None).expect_err("denied");
    assert_eq!(
        denial.to_string(),
        "[spec.trainer.env[0]: Forbidden: DMLC_TRACKER_URI is reserved for the XGBoost runtime, spec.trainer.env[1]: Forbidden: DMLC_TRACKER_PORT is reserved for the XGBoost runtime, spec.trainer.env[2]: Forbidden: DMLC_TASK_ID is reserved for the XGBoost runtime, spec.trainer.env[3]: Forbidden: DMLC_NUM_WORKER is reserved for the XGBoost runtime]"
    );
}

/// xgboost_test.go TestXGBoostEnforceMLPolicy: "no env injection when trainJob.Spec.Trainer is
/// nil", "single node XGBoost training (CPU)", "multi-node XGBoost training (CPU)", "XGBoost
/// training with GPU resources", "trainJob numNodes is respected", "resources not set - defaults
/// to 1 worker per node", "resources set in Runtime only", "resources set in TrainJob only",
/// "resources set in both Runtime and TrainJob": DMLC_NUM_WORKER = nodes × GPUs (or 1), the GPUs
/// from the TrainJob's resources if set, else the runtime's.
#[test]
fn xgboost_enforce_ml_policy() {
    let gpus = |n: &str| json!({"requests": {"example.com/gpu": n}});
    type Case<'a> = (&'a str, i64, Option<Value>, Option<Value>, Option<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        ("no env injection when trainJob.Spec.Trainer is nil", 1, None, None, None),
        ("single node XGBoost training (CPU)", 1, None, Some(json!({"numNodes": 1})), Some("1")),
        ("multi-node XGBoost training (CPU)", 2, None, Some(json!({"numNodes": 4})), Some("4")),
        (
            "XGBoost training with GPU resources",
            1,
            None,
            Some(
                json!({"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "8", "memory": "32Gi", "example.com/gpu": "4"}}}),
            ),
            Some("8"),
        ),
        ("trainJob numNodes is respected", 1, None, Some(json!({"numNodes": 3})), Some("3")),
        ("resources not set - defaults to 1 worker per node", 2, None, Some(json!({"numNodes": 2})), Some("2")),
        ("resources set in Runtime only", 1, Some(gpus("2")), Some(json!({"numNodes": 3})), Some("6")),
        (
            "resources set in TrainJob only",
            1,
            None,
            Some(json!({"numNodes": 2, "resourcesPerNode": gpus("4")})),
            Some("8"),
        ),
        (
            "resources set in both Runtime and TrainJob",
            1,
            Some(gpus("1")),
            Some(json!({"numNodes": 2, "resourcesPerNode": gpus("3")})),
            Some("6"),
        ),
    ];
    for (name, policy_nodes, runtime_res, trainer, workers) in cases {
        let rt = xgboost_runtime(policy_nodes, runtime_res);
        let mut spec = json!({});
        if let Some(t) = trainer {
            spec["trainer"] = t;
        }
        let tj = trainjob("test-job", "ClusterTrainingRuntime", "xgboost", spec);
        let js = object(&render_objects(&rt, &tj), "JobSet", "test-job");
        let c = &js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0];
        match workers {
            None => assert!(c.get("env").is_none() && c.get("ports").is_none(), "{name}: {c}"),
            Some(w) => {
                assert_eq!(
                    c["env"],
                    json!([
                        {"name": "DMLC_TRACKER_URI", "value": "test-job-node-0-0.test-job"},
                        {"name": "DMLC_TRACKER_PORT", "value": "29500"},
                        {"name": "DMLC_TASK_ID", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
                        {"name": "DMLC_NUM_WORKER", "value": w}
                    ]),
                    "{name}"
                );
                assert_eq!(c["ports"], json!([{"containerPort": 29500}]), "{name}");
            }
        }
    }
}

/// jax_test.go TestJAXEnforceMLPolicy: "single node JAX training", "multi-node JAX training",
/// "trainJob numNodes is respected".
#[test]
fn jax_enforce_ml_policy() {
    let spec = json!({"replicatedJobs": [{"name": "node", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
        "spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}
    }}]});
    for (name, policy_nodes, nodes, want) in [
        ("single node JAX training", 1, Some(1), "1"),
        ("multi-node JAX training", 2, Some(4), "4"),
        ("trainJob numNodes is respected", 1, Some(3), "3"),
    ] {
        let rt = cluster_runtime(
            "jax",
            json!({"mlPolicy": {"numNodes": policy_nodes, "jax": {}}, "template": {"spec": spec.clone()}}),
        );
        let mut t = json!({});
        if let Some(n) = nodes {
            t["numNodes"] = json!(n);
        }
        let tj = trainjob("test-job", "ClusterTrainingRuntime", "jax", json!({"trainer": t}));
        let js = object(&render_objects(&rt, &tj), "JobSet", "test-job");
        let job = &js["spec"]["replicatedJobs"][0]["template"]["spec"];
        assert_eq!(job["parallelism"], json!(want.parse::<i64>().unwrap_or_default()), "{name}");
        assert_eq!(
            job["template"]["spec"]["containers"][0]["env"],
            json!([
                {"name": "JAX_NUM_PROCESSES", "value": want},
                {"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
                {"name": "JAX_COORDINATOR_ADDRESS", "value": "test-job-node-0-0.test-job:29500"}
            ]),
            "{name}"
        );
    }
}

/// jobset_test.go TestValidate, the initializer cases: "must have dataset initializer job when
/// trainJob is configured with input datasetConfig", "must have container with name - dataset
/// initializer in the dataset initializer job", "must have model initializer job when ...",
/// "must have container with name - model initializer in the model initializer job", "must have
/// volumeMount with name - initializer in the dataset initializer container", "... model
/// initializer container", "valid dataset and model initializers together pass".
#[test]
fn jobset_validate_initializers() {
    const REF: &str =
        r#"Invalid value: {"name":"rt","apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}"#;
    let job = |section: &str| trainjob("test", "ClusterTrainingRuntime", "rt", json!({"initializer": {section: {}}}));
    let rt_with = |edit: &dyn Fn(&mut Value)| {
        let mut spec = wrapper_spec();
        edit(&mut spec);
        cluster_runtime("rt", json!({"template": {"spec": spec}}))
    };
    let drop_job = |name: &'static str| {
        move |s: &mut Value| s["replicatedJobs"].as_array_mut().expect("jobs").retain(|j| j["name"] != name)
    };
    let rename_container =
        |name: &'static str| move |s: &mut Value| container_mut(s, name, name)["name"] = json!("random");
    let drop_mount = |name: &'static str| {
        move |s: &mut Value| {
            container_mut(s, name, name).as_object_mut().expect("c").remove("volumeMounts");
        }
    };
    for (section, name, config) in
        [("dataset", "dataset-initializer", "datasetConfig"), ("model", "model-initializer", "modelConfig")]
    {
        assert_eq!(
            denied(&job(section), &rt_with(&drop_job(name)), None),
            [format!("spec.runtimeRef: {REF}: must have {name} job when trainJob is configured with input {config}")]
        );
        assert_eq!(
            denied(&job(section), &rt_with(&rename_container(name)), None),
            [format!("spec.runtimeRef: {REF}: must have container with name - {name} in the {name} job")]
        );
        assert_eq!(
            denied(&job(section), &rt_with(&drop_mount(name)), None),
            [format!(
                "spec.runtimeRef: {REF}: must have volumeMount with name - initializer in container {name} of the {name} job"
            )]
        );
    }
    let both = trainjob("test", "ClusterTrainingRuntime", "rt", json!({"initializer": {"dataset": {}, "model": {}}}));
    assert!(denied(&both, &rt_with(&|_| {}), None).is_empty(), "valid dataset and model initializers together pass");
}

/// jobset_test.go TestValidate: "runtimePatches contain invalid replicated job", "... invalid
/// initContainer", "... invalid container", "runtimePatches contain envs for reserved container",
/// "allow runtimePatches when creating a new trainJob".
#[test]
fn jobset_validate_runtime_patches() {
    let rt = cluster_runtime("rt", json!({"template": {"spec": wrapper_spec()}}));
    let job = |patches: Value| trainjob("test", "ClusterTrainingRuntime", "rt", json!({"runtimePatches": patches}));
    let invalid = |patches: &Value, detail: &str| {
        format!("spec.runtimePatches: Invalid value: {}: {detail}", serde_json::to_string(patches).unwrap_or_default())
    };
    let p = json!([{"manager": "trainer.kubeflow.org/test", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "invalid"}]}}}}]);
    assert_eq!(
        denied(&job(p.clone()), &rt, None),
        [invalid(&p, "must not have replicated job that doesn't exist in the runtime job template")]
    );
    let p = json!([{"manager": "trainer.kubeflow.org/test", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"initContainers": [{"name": "invalid"}]}}}}}
    ]}}}}]);
    assert_eq!(
        denied(&job(p.clone()), &rt, None),
        [invalid(&p, "must not have initContainer that doesn't exist in the runtime job node")]
    );
    let p = json!([{"manager": "trainer.kubeflow.org/test", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "invalid"}]}}}}}
    ]}}}}]);
    assert_eq!(
        denied(&job(p.clone()), &rt, None),
        [invalid(&p, "must not have container that doesn't exist in the runtime job node")]
    );
    let p = json!([{"manager": "trainer.kubeflow.org/test", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "env": [{"name": "TEST", "value": "x"}]}]}}}}}
    ]}}}}]);
    // Go's order: a ContainerPatch's name before its env (serde_json would sort them).
    assert_eq!(
        denied(&job(p), &rt, None),
        [
            r#"spec.runtimePatches: Invalid value: [{"manager":"trainer.kubeflow.org/test","trainingRuntimeSpec":{"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","env":[{"name":"TEST","value":"x"}]}]}}}}}]}}}}]: must not have envs for the dataset-initializer, model-initializer, node containers"#
        ]
    );
    let p = json!([{"manager": "trainer.kubeflow.org/test", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"k": "v"}}}}}}
    ]}}}}]);
    assert!(denied(&job(p), &rt, None).is_empty(), "allow runtimePatches when creating a new trainJob");
}

/// jobset_test.go TestValidate: "allow updates to trainJob with no changes to runtimePatches",
/// "forbid changes to runtimePatches when trainJob is not suspended", "allow changes to
/// runtimePatches when trainJob is suspended and jobSet does not exist", "allow atomic update:
/// modify runtimePatches and unsuspend trainJob in a single request", "allow atomic update:
/// modify runtimePatches and suspend trainJob in a single request".
#[test]
fn jobset_validate_runtime_patches_on_update() {
    let rt = cluster_runtime("rt", json!({"template": {"spec": wrapper_spec()}}));
    let job = |suspend: bool, selector: &str| {
        trainjob(
            "test",
            "ClusterTrainingRuntime",
            "rt",
            json!({"suspend": suspend, "runtimePatches": [patch("trainer.kubeflow.org/test", "node", json!({"nodeSelector": {"k": selector}}))]}),
        )
    };
    const FORBIDDEN: &str = "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before or after the update";
    let cases = [
        ("allow updates to trainJob with no changes to runtimePatches", job(false, "a"), job(false, "a"), vec![]),
        (
            "forbid changes to runtimePatches when trainJob is not suspended",
            job(false, "a"),
            job(false, "b"),
            vec![FORBIDDEN],
        ),
        (
            "allow changes to runtimePatches when trainJob is suspended and jobSet does not exist",
            job(true, "a"),
            job(true, "b"),
            vec![],
        ),
        (
            "allow atomic update: modify runtimePatches and unsuspend trainJob in a single request",
            job(true, "a"),
            job(false, "b"),
            vec![],
        ),
        (
            "allow atomic update: modify runtimePatches and suspend trainJob in a single request",
            job(false, "a"),
            job(true, "b"),
            vec![],
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(denied(&new, &rt, Some(&old)), want, "{name}");
    }
}

/// volcano_test.go TestValidate: "queue annotation is empty".
#[test]
fn volcano_validate_queue_annotation_is_empty() {
    let rt = cluster_runtime(
        "rt",
        json!({
            "podGroupPolicy": {"volcano": {}},
            "template": {"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": ""}}, "spec": wrapper_spec()}
        }),
    );
    let tj = trainjob("test", "ClusterTrainingRuntime", "rt", json!({}));
    assert_eq!(
        denied(&tj, &rt, None),
        [
            r#"spec.annotations[scheduling.volcano.sh/queue-name]: Invalid value: "": Volcano queue name must not be empty"#
        ]
    );
}

/// The CRD's rules come back from the API server as 422, before the webhook: CEL on the root
/// (`<nil>`), an immutable field, `managedBy`'s values.
#[test]
fn crd_rules_are_the_api_servers_422() {
    let rt = cluster_runtime("rt", json!({"template": {"spec": wrapper_spec()}}));
    let tj = trainjob("1job", "ClusterTrainingRuntime", "rt", json!({"managedBy": "example.com/mine"}));
    let denial = admit(&tj, Some(&rt), None).expect_err("denied");
    assert_eq!((denial.code(), denial.reason()), (422, "Invalid"));
    assert!(denial.errors().iter().all(|e| e.rule == Rule::Crd));
    assert_eq!(
        denial.message(),
        r#"TrainJob.trainer.kubeflow.org "1job" is invalid: [<nil>: Invalid value: metadata.name must match RFC 1035 DNS label format, spec.managedBy: Invalid value: "example.com/mine": ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set]"#
    );
    let old = trainjob("job", "ClusterTrainingRuntime", "rt", json!({"trainer": {"numNodes": 1}}));
    let new = trainjob("job", "ClusterTrainingRuntime", "rt", json!({"trainer": {"numNodes": 2}}));
    assert_eq!(
        admit(&new, Some(&rt), Some(&old)).expect_err("denied").to_string(),
        "spec.trainer: Invalid value: field is immutable"
    );
    let added = trainjob("job", "ClusterTrainingRuntime", "rt", json!({}));
    assert_eq!(admit(&old, Some(&rt), Some(&added)), Ok(()), "a field the old object lacks may be set");
}

// ---------------------------------------------------------------------------------------------
// Stowage's own update rule, after Kueue's `validateUpdateForQueueName`
// (pkg/controller/jobframework/validation.go): the queue is fixed unless the job is suspended.

#[test]
fn a_queue_label_change_is_refused_unless_the_trainjob_is_suspended() {
    let runtime = cluster_runtime("test-runtime", json!({"template": {"spec": wrapper_spec()}}));
    let labelled = |queue: Option<&str>, key: &str, suspend: bool| {
        let mut tj = trainjob("job", "ClusterTrainingRuntime", "test-runtime", json!({"suspend": suspend}));
        tj.metadata.labels = queue.map(|q| [(key.to_string(), q.to_string())].into());
        tj
    };
    for key in ["stowage.dev/queue", "kueue.x-k8s.io/queue-name"] {
        let old = labelled(Some("team-a"), key, false);
        // Moved to another queue, or to none, while it may be running: its charge would move.
        for new in [Some("team-b"), None] {
            let errors = denied(&labelled(new, key, false), &runtime, Some(&old));
            assert_eq!(errors.len(), 1, "{key} -> {new:?}: {errors:?}");
            assert!(errors[0].starts_with(&format!("metadata.labels[{key}]: ")), "{}", errors[0]);
            assert!(errors[0].contains("field is immutable while the TrainJob is not suspended"), "{}", errors[0]);
        }
        // Suspended (or being suspended by this very update), it may move; unchanged, nothing to say.
        assert_eq!(denied(&labelled(Some("team-b"), key, true), &runtime, Some(&old)), Vec::<String>::new());
        assert_eq!(denied(&labelled(Some("team-a"), key, false), &runtime, Some(&old)), Vec::<String>::new());
        // A create has no old object to compare with.
        assert_eq!(denied(&labelled(Some("team-b"), key, false), &runtime, None), Vec::<String>::new());
    }
}
