//! The in-memory hub's write path, without HTTP: what one TrainJob costs the hub's single
//! thread in a burst (issue #39). Each iteration is the writes one TrainJob brings, as the
//! playground's burst counted them, made as their writers make them: the user's create
//! (Trainer's admission, the CRD's schema and CEL rules, managed fields), the dispatcher's
//! Placement and TrainJob status, its Event, the agent's Placement status writes and its pod
//! copy (the status-writers ValidatingAdmissionPolicy judges the Placement and pod writes).
//! `per write` divides by the writes of an iteration. `one_trainjob_without_policy` is the same
//! on a hub without the policy: the difference is what the policy costs the hub.
//!
//! A second group, `client_decode`, times what a client pays to decode those objects, whole or
//! lean (`kube_shell::lean`). A third, `member_apply`, times a member's API server creating a
//! TrainJob's JobSet by server-side apply, as the agent makes it (Trainer's own render of the
//! burst's TrainJob on the torch runtime).
//!
//! `cargo bench -p playground --bench hub_writes`
//!
//! On the binaries' allocator (mimalloc, as `stowage` and the burst example have). On the
//! system's, which the bench had until 2026-12-05, allocation weighed more than it does in
//! the product (`one_trainjob` 590-615 µs there, 524-529 µs here, the same code), and with it
//! the policy's share of the write path (docs/performance.md, "2026-12-05 (evening)").

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use kube_mem::store::{Part, WriteOptions};
use kube_mem::{Requester, Store, UserInfo};
use playground::credentials;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MEMBER: &str = "east";
/// Writes in one iteration of [`one_trainjob`].
const WRITES: u32 = 9;
/// Iterations on one store before a fresh one (outside the timing): the store's size stays
/// near a burst's, and memory bounded.
const PER_STORE: u64 = 2_000;

fn yaml_docs(text: &str) -> Vec<Value> {
    input_limits::yaml::documents(text).unwrap_or_else(|e| unreachable!("bundled YAML: {e}"))
}

/// A store set up as the playground's hub: Trainer's and Stowage's CRDs, the status-writers
/// policy, Trainer's admission, a runtime, the default Queue.
/// Whether [`hub`] binds the status-writers policy.
#[derive(Clone, Copy)]
enum Policy {
    Bound,
    Absent,
}

fn hub() -> Store {
    hub_with(Policy::Bound)
}

fn hub_with(policy: Policy) -> Store {
    let mut s = Store::new();
    s.add_validator(Arc::new(playground::admission::TrainJobAdmission::default()));
    let opts = WriteOptions::default();
    let crd_rt = s.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions").cloned().expect("CRDs");
    let crds = upstream::TRAINER_CRDS
        .iter()
        .flat_map(|f| yaml_docs(f.text))
        .chain(api::stowage::crds().into_iter().flat_map(|(_, y)| yaml_docs(&y)));
    for crd in crds {
        s.create(Requester::InProcess, &crd_rt, None, crd, &opts).expect("CRD");
    }
    let policy_docs = match policy {
        Policy::Bound => yaml_docs(credentials::STATUS_WRITERS_POLICY),
        Policy::Absent => Vec::new(),
    };
    for doc in policy_docs {
        let plural = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => "validatingadmissionpolicies",
            _ => "validatingadmissionpolicybindings",
        };
        let rt = s.lookup("admissionregistration.k8s.io", "v1", plural).cloned().expect("VAP kinds");
        s.create(Requester::InProcess, &rt, None, doc, &opts).expect("policy");
    }
    let runtimes = s.lookup("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes").cloned().expect("runtimes");
    for f in upstream::RUNTIMES.iter().filter(|f| f.path.contains("torch")) {
        for doc in yaml_docs(f.text) {
            s.create(Requester::InProcess, &runtimes, None, doc, &opts).expect("runtime");
        }
    }
    let queues = s.lookup("stowage.dev", "v1alpha1", "queues").cloned().expect("queues");
    s.create(Requester::InProcess, &queues, None, json!({"metadata": {"name": "default"}, "spec": {}}), &opts)
        .expect("queue");
    s
}

struct Kinds {
    trainjobs: kube_mem::resources::ResourceType,
    placements: kube_mem::resources::ResourceType,
    events: kube_mem::resources::ResourceType,
    pods: kube_mem::resources::ResourceType,
}

fn kinds(s: &Store) -> Kinds {
    let rt = |g: &str, v: &str, p: &str| s.lookup(g, v, p).cloned().unwrap_or_else(|| unreachable!("{p}"));
    Kinds {
        trainjobs: rt("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
        placements: rt("stowage.dev", "v1alpha1", "placements"),
        events: rt("", "v1", "events"),
        pods: rt("", "v1", "pods"),
    }
}

/// The writes one TrainJob brings the hub, from its creation to its pods running.
fn one_trainjob(s: &mut Store, k: &Kinds, i: u64) {
    let user = UserInfo::new("alice", &["system:authenticated"]);
    let dispatcher = UserInfo::service_account("stowage-system", "stowage-dispatcher");
    let agent = UserInfo::service_account("stowage-system", &format!("stowage-agent-{MEMBER}"));
    let opts = WriteOptions::default();
    let ns = Some("default");
    let name = format!("burst-{i:06}");
    let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "annotations": {"stowage.dev/simulated-duration-seconds": "3600"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}}});
    let tj = s.create(Requester::Manager(&user, "kubectl-create"), &k.trainjobs, ns, tj, &opts).expect("TrainJob");
    let uid = tj["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let owner = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true}]);
    let placement = json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": name, "ownerReferences": owner},
        "spec": {"trainJobUid": uid, "cluster": MEMBER, "epoch": 1, "queue": "default",
                 "podSets": [{"name": "node", "count": 1, "flavor": "h100",
                              "domain": {"level": "block", "nodeLabel": "stowage.dev/block", "value": "b0"}}],
                 "ranking": [{"cluster": MEMBER, "score": 1.0}]}});
    s.create(Requester::Manager(&dispatcher, "stowage-dispatcher"), &k.placements, ns, placement, &opts)
        .expect("Placement");
    let status = json!({"status": {"conditions": [{"type": "Created", "status": "True", "reason": "Placed",
        "message": "placed on east", "lastTransitionTime": "2026-11-28T00:00:00Z"}]}});
    s.update(
        Requester::Manager(&dispatcher, "stowage-dispatcher"),
        &k.trainjobs,
        ns,
        &name,
        merged(s, &k.trainjobs, &name, &status),
        Part::Status,
        &opts,
    )
    .expect("TrainJob status");
    let event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{name}.placed")},
        "involvedObject": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "namespace": "default", "uid": uid},
        "reason": "Placed", "message": "placed on east, block b0, epoch 1", "type": "Normal", "count": 1,
        "source": {"component": "stowage-dispatcher"}});
    s.create(Requester::Manager(&dispatcher, "stowage-dispatcher"), &k.events, ns, event, &opts).expect("Event");
    // The agent's claim, then what its rounds report from the JobSet: Applied with its counts,
    // then Running (a burst counts 2.3-2.7 of these per TrainJob: a slow round sees Running at once).
    for (phase, ready) in [("Pending", 0), ("Applied", 0), ("Running", 1)] {
        let jobs = json!([{"name": "node", "active": 1, "ready": ready, "succeeded": 0, "failed": 0, "suspended": 0}]);
        let status = match phase {
            "Pending" => json!({"status": {"phase": phase, "observedEpoch": 1, "message": "being made on east"}}),
            _ => json!({"status": {"phase": phase, "observedEpoch": 1, "message": null, "jobsStatus": jobs}}),
        };
        s.update(
            Requester::Manager(&agent, "stowage-agent"),
            &k.placements,
            ns,
            &name,
            merged(s, &k.placements, &name, &status),
            Part::Status,
            &opts,
        )
        .expect("Placement status");
    }
    let pod = format!("{name}-node-0-0");
    let copy = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "labels": {"stowage.dev/cluster": MEMBER, "jobset.sigs.k8s.io/jobset-name": name},
                     "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "uid": uid}]},
        "spec": {"nodeName": format!("stowage-{MEMBER}"),
                 "containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "command": ["torchrun", "train.py"],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                 "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "stowage", "effect": "NoSchedule"}]}});
    s.create(Requester::Manager(&agent, "stowage-agent"), &k.pods, ns, copy, &opts).expect("pod copy");
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "node", "ready": true, "restartCount": 0, "image": "pytorch", "imageID": "",
                               "state": {"running": {"startedAt": "2026-11-28T00:00:01Z"}}}]}});
    s.update(
        Requester::Manager(&agent, "stowage-agent"),
        &k.pods,
        ns,
        &pod,
        merged(s, &k.pods, &pod, &status),
        Part::Status,
        &opts,
    )
    .expect("pod status");
}

/// The stored object with `patch` merged in, as the API server's merge patch of the status
/// makes the object it then updates (`kube_mem::view::patch_target`).
fn merged(s: &Store, rt: &kube_mem::resources::ResourceType, name: &str, patch: &Value) -> Value {
    let stored = s.view().peek(rt, Some("default"), name).expect("stored");
    let mut obj = kube_mem::view::patch_target(rt, stored, true);
    kube_mem::patch::merge_patch(&mut obj, patch);
    obj
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("hub_writes");
    g.measurement_time(Duration::from_secs(8));
    for (name, policy) in [("one_trainjob", Policy::Bound), ("one_trainjob_without_policy", Policy::Absent)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut store = hub_with(policy);
                let k = kinds(&store);
                let mut spent = Duration::ZERO;
                for i in 0..iters {
                    if i > 0 && i % PER_STORE == 0 {
                        store = hub_with(policy);
                    }
                    let t = Instant::now();
                    one_trainjob(black_box(&mut store), &k, i);
                    spent += t.elapsed();
                }
                spent
            });
        });
    }
    g.finish();
    let mut store = hub();
    let k = kinds(&store);
    let t = Instant::now();
    for i in 0..500 {
        one_trainjob(&mut store, &k, i);
    }
    let each = t.elapsed() / 500;
    println!(
        "hub_writes: {WRITES} writes per TrainJob, {:.1} µs per write over a 500 burst",
        each.as_secs_f64() * 1e6 / f64::from(WRITES)
    );
}

/// What a client pays to decode the objects one TrainJob leaves on the hub (its TrainJob, its
/// Placement, a pod copy, as the hub serves them, managedFields and all): whole, as kube's
/// `Api<K>` decodes them; lean, as the controllers' caches and write answers do
/// (`kube_shell::lean::Lean`, without managedFields); and unread, as a write answer nobody reads
/// (`lean::Unread`, checked as JSON).
fn client_decode(c: &mut Criterion) {
    use api::stowage::Placement;
    use api::trainer::TrainJob;
    use k8s_openapi::api::core::v1::Pod;
    use kube_shell::lean::{Lean, Unread};
    let mut store = hub();
    let k = kinds(&store);
    one_trainjob(&mut store, &k, 0);
    let served = |rt: &kube_mem::resources::ResourceType, name: &str| {
        let object = store.get(rt, Some("default"), name).expect("stored");
        serde_json::to_vec(&object).expect("JSON")
    };
    let (tj, placement, pod) = (
        served(&k.trainjobs, "burst-000000"),
        served(&k.placements, "burst-000000"),
        served(&k.pods, "burst-000000-node-0-0"),
    );
    // What the timings compare: the whole decode keeps the entries, the lean one does not.
    let whole: TrainJob = serde_json::from_slice(&tj).expect("TrainJob");
    let lean: Lean<TrainJob> = serde_json::from_slice(&tj).expect("TrainJob");
    assert!(whole.metadata.managed_fields.is_some() && lean.0.metadata.managed_fields.is_none());
    let mut g = c.benchmark_group("client_decode");
    g.bench_function("whole", |b| {
        b.iter(|| {
            black_box(serde_json::from_slice::<TrainJob>(black_box(&tj)).ok());
            black_box(serde_json::from_slice::<Placement>(black_box(&placement)).ok());
            black_box(serde_json::from_slice::<Pod>(black_box(&pod)).ok());
        })
    });
    g.bench_function("lean", |b| {
        b.iter(|| {
            black_box(serde_json::from_slice::<Lean<TrainJob>>(black_box(&tj)).ok());
            black_box(serde_json::from_slice::<Lean<Placement>>(black_box(&placement)).ok());
            black_box(serde_json::from_slice::<Lean<Pod>>(black_box(&pod)).ok());
        })
    });
    g.bench_function("unread", |b| {
        b.iter(|| {
            black_box(serde_json::from_slice::<Unread<TrainJob>>(black_box(&tj)).ok());
            black_box(serde_json::from_slice::<Unread<Placement>>(black_box(&placement)).ok());
            black_box(serde_json::from_slice::<Unread<Pod>>(black_box(&pod)).ok());
        })
    });
    g.finish();
    println!(
        "client_decode: {} bytes (TrainJob {}, Placement {}, pod copy {})",
        tj.len() + placement.len() + pod.len(),
        tj.len(),
        placement.len(),
        pod.len()
    );
}

/// A member's store as the playground's members set it up: the JobSet and PodGroup CRDs.
fn member() -> Store {
    let mut s = Store::new();
    let crd_rt = s.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions").cloned().expect("CRDs");
    for crd in upstream::MEMBER_CRDS.iter().flat_map(|f| yaml_docs(f.text)) {
        s.create(Requester::InProcess, &crd_rt, None, crd, &WriteOptions::default()).expect("CRD");
    }
    s
}

/// The JobSet the agent applies for the burst's TrainJob: Trainer's render on the torch runtime.
fn rendered_jobset() -> Value {
    use api::trainer::Runtime;
    use trainer_render::{Capabilities, Input, Object};
    let runtime = upstream::RUNTIMES
        .iter()
        .filter(|f| f.path.contains("torch"))
        .flat_map(|f| yaml_docs(f.text))
        .find(|d| d["metadata"]["name"] == "torch-distributed")
        .expect("the torch-distributed runtime");
    let runtime = Runtime::Cluster(serde_json::from_value(runtime).expect("a ClusterTrainingRuntime"));
    let tj = serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "burst-000000", "namespace": "default", "uid": "7f9c1a54-aaaa-bbbb-cccc-ddddeeeeffff"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}}}))
    .expect("a TrainJob");
    let input = Input {
        trainjob: &tj,
        runtime: &runtime,
        placement: None,
        capabilities: &Capabilities::default(),
        ssh_key: None,
        jobset_uid: None,
    };
    let objects = trainer_render::render(&input).expect("rendered");
    let js = objects.into_iter().find_map(|o| match o {
        Object::JobSet(js) => Some(js),
        _ => None,
    });
    let mut js = serde_json::to_value(js.expect("a JobSet")).expect("JSON");
    js["apiVersion"] = "jobset.x-k8s.io/v1alpha2".into();
    js["kind"] = "JobSet".into();
    js
}

fn member_apply(c: &mut Criterion) {
    use kube_mem::store::ApplyOptions;
    let jobset = rendered_jobset();
    let agent = ApplyOptions { manager: "stowage-agent", force: true };
    let mut g = c.benchmark_group("member_apply");
    g.bench_function("jobset_create", |b| {
        b.iter_custom(|iters| {
            let mut store = member();
            let rt = store.lookup("jobset.x-k8s.io", "v1alpha2", "jobsets").cloned().expect("JobSets");
            let mut spent = Duration::ZERO;
            for i in 0..iters {
                if i > 0 && i % PER_STORE == 0 {
                    store = member();
                }
                let name = format!("burst-{i:06}");
                let mut js = jobset.clone();
                js["metadata"]["name"] = name.clone().into();
                let t = Instant::now();
                let who = Requester::InProcess;
                let made =
                    store.apply(who, &rt, Some("default"), &name, js, Part::Main, &WriteOptions::default(), &agent);
                black_box(made.expect("applied"));
                spent += t.elapsed();
            }
            spent
        });
    });
    g.finish();
}

criterion_group!(benches, bench, client_decode, member_apply);
criterion_main!(benches);
