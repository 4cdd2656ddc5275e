//! Kueue's queues with no Kueue on the hub (`--kueue labels`): a TrainJob's
//! `kueue.x-k8s.io/queue-name` names a LocalQueue, and its ClusterQueue's quotas (per
//! ResourceFlavor, in the units Kubernetes writes them), namespace selector and cohort are
//! what it is scheduled under; missing ones are said in Kueue's words.

use api::kueue::{ClusterQueue, LocalQueue, ResourceFlavor};
use api::stowage::{DomainCapacity, MemberCluster, MemberClusterSpec, MemberClusterStatus, Queue, TopologyLevel};
use api::trainer::{ClusterTrainingRuntime, TrainJob};
use dispatcher::decide::{Observed, Plan, Settings, decide};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use scheduler_core::Config;
use serde_json::json;

fn now() -> Time {
    Time("2026-11-25T10:00:00Z".parse::<Timestamp>().expect("time"))
}

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    input_limits::yaml::from_str(text).expect("yaml")
}

/// One member: a rack of eight free 8-GPU h100 nodes with 64 CPUs each.
fn member() -> MemberCluster {
    let mut m = MemberCluster::new("east", MemberClusterSpec::default());
    m.status = Some(MemberClusterStatus {
        heartbeat_time: Some(now().0.to_string()),
        topology_levels: vec![TopologyLevel { level: "rack".into(), node_label: "rack".into() }],
        domains: vec![DomainCapacity {
            path: vec!["r0".into()],
            flavor: "nvidia-h100-80gb".into(),
            class: Default::default(),
            nodes: 8,
            gpus_per_node: 8,
            allocatable_gpus: 64,
            free_gpus: 64,
            free_histogram: vec![0, 0, 0, 0, 0, 0, 0, 0, 8],
            cpu_milli_per_node: Some(64_000),
            memory_mib_per_node: Some(512 * 1024),
        }],
        ..MemberClusterStatus::default()
    });
    m
}

/// A TrainJob in `ns` of two 8-GPU, 32-CPU nodes whose Kueue label names `queue`.
fn trainjob(name: &str, ns: &str, queue: &str) -> TrainJob {
    serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-11-25T09:00:00Z", "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8", "cpu": "32"}, "limits": {"nvidia.com/gpu": "8"}}}}}))
    .expect("trainjob")
}

/// Kueue's objects as an admin writes them: LocalQueue `team-a/lq` → ClusterQueue `cq` with 16
/// GPUs of flavor `h100` (a ResourceFlavor whose nodes are H100s), for namespaces labelled
/// `team: a`.
fn observed(trainjobs: Vec<TrainJob>) -> Observed {
    let runtime: ClusterTrainingRuntime = yaml(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/upstream/trainer/runtimes/torch_distributed.yaml"
        ))
        .expect("runtime"),
    );
    let namespace: Namespace = yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {team: a}}\n");
    Observed {
        trainjobs,
        cluster_runtimes: vec![runtime],
        members: vec![member()],
        namespaces: vec![namespace],
        local_queues: vec![yaml::<LocalQueue>(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq, namespace: team-a}\nspec: {clusterQueue: cq}\n",
        )],
        cluster_queues: vec![yaml::<ClusterQueue>(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n  \
             namespaceSelector: {matchLabels: {team: a}}\n  cohortName: research\n  resourceGroups:\n  \
             - coveredResources: [nvidia.com/gpu, cpu, pods]\n    flavors:\n    - name: h100\n      resources:\n      \
             - {name: nvidia.com/gpu, nominalQuota: 16}\n      - {name: cpu, nominalQuota: \"64\"}\n      - {name: pods, nominalQuota: 100}\n",
        )],
        resource_flavors: vec![yaml::<ResourceFlavor>(
            "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: h100}\nspec:\n  \
             nodeLabels: {nvidia.com/gpu.product: nvidia-h100-80gb}\n",
        )],
        ..Observed::default()
    }
}

fn cycle(o: &Observed) -> Plan {
    decide(o, &Config::stowage(), &Settings::default(), now())
}

fn pending(plan: &Plan, name: &str) -> Option<(String, String)> {
    let s = plan.statuses.iter().find(|s| s.name == name)?;
    let c = s.conditions.iter().find(|c| c.type_ == "Pending" && c.status == "True")?;
    Some((c.reason.clone(), c.message.clone()))
}

#[test]
fn a_trainjob_naming_a_local_queue_uses_its_cluster_queues_quota() {
    let plan = cycle(&observed(vec![trainjob("a1", "team-a", "lq"), trainjob("a2", "team-a", "lq")]));
    // 16 GPUs and 64 CPUs of quota: the first (16 GPUs, 64 CPUs) fits, the second waits for it.
    let placed: Vec<&str> =
        plan.placements.iter().filter(|p| p.spec.cluster.is_some()).map(|p| p.name.as_str()).collect();
    assert_eq!(placed, vec!["a1"], "{plan:#?}");
    let (reason, message) = pending(&plan, "a2").expect("a2 waits");
    assert_eq!(reason, "QuotaExceeded", "{message}");
    assert!(message.contains("cq"), "{message}");
    assert_eq!(plan.placements[0].effect.placed.as_ref().map(|p| p.queue.as_str()), Some("cq"));
}

#[test]
fn missing_kueue_queues_and_namespaces_the_cluster_queue_does_not_select_are_said_in_kueues_words() {
    let mut o = observed(vec![trainjob("nolq", "team-a", "nope"), trainjob("other", "team-b", "lq")]);
    o.local_queues.push(yaml(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lost, namespace: team-a}\nspec: {clusterQueue: gone}\n",
    ));
    o.trainjobs.push(trainjob("nocq", "team-a", "lost"));
    let plan = cycle(&o);
    assert_eq!(pending(&plan, "nolq"), Some(("UnknownQueue".into(), "LocalQueue nope doesn't exist".into())));
    assert_eq!(pending(&plan, "nocq"), Some(("UnknownQueue".into(), "ClusterQueue gone doesn't exist".into())));
    // The LocalQueue is per namespace: team-b has none called lq.
    assert_eq!(pending(&plan, "other"), Some(("UnknownQueue".into(), "LocalQueue lq doesn't exist".into())));

    // Kueue's nil selector selects no namespace: a ClusterQueue without one admits nobody.
    let mut o = observed(vec![trainjob("a1", "team-a", "lq")]);
    o.cluster_queues[0].spec.namespace_selector = None;
    let plan = cycle(&o);
    let (reason, message) = pending(&plan, "a1").expect("waits");
    assert_eq!(reason, "NamespaceNotAllowed", "{message}");
}

#[test]
fn a_queue_of_the_label_s_name_wins_over_a_local_queue_and_quotas_are_read_in_kubernetes_units() {
    // A Stowage Queue `lq`: 16 GPUs and 64 CPUs (not 64 milli-CPUs), 1Ti of memory.
    let queue: Queue = yaml(
        "apiVersion: stowage.dev/v1alpha1\nkind: Queue\nmetadata: {name: lq}\nspec:\n  quotas:\n  \
         - {flavor: nvidia-h100-80gb, resource: nvidia.com/gpu, nominalQuota: '16'}\n  \
         - {flavor: nvidia-h100-80gb, resource: cpu, nominalQuota: '64'}\n  \
         - {flavor: nvidia-h100-80gb, resource: memory, nominalQuota: 1Ti}\n",
    );
    let mut o = observed(vec![trainjob("a1", "team-a", "lq")]);
    o.queues = vec![queue];
    let plan = cycle(&o);
    let placed = plan.placements.iter().find(|p| p.name == "a1").and_then(|p| p.effect.placed.as_ref());
    assert_eq!(placed.map(|p| p.queue.as_str()), Some("lq"), "{plan:#?}");
}

#[test]
fn a_cluster_queue_that_cannot_be_read_is_inactive_naming_its_field() {
    let mut o = observed(vec![trainjob("a1", "team-a", "lq")]);
    o.cluster_queues[0].spec.resource_groups[0].flavors[0].resources[0].nominal_quota = json!("lots");
    let plan = cycle(&o);
    let (reason, message) = pending(&plan, "a1").expect("waits");
    assert_eq!(reason, "QueueInactive", "{message}");
    assert!(message.contains("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"), "{message}");
}
