//! Stowage's own API, group `stowage.dev`, version `v1alpha1`.
//!
//! Why this group: a DNS name the project owns (Kubernetes reserves `*.k8s.io` and
//! `*.kubernetes.io` for API-reviewed groups, and `x-k8s.io` for kubernetes-sigs), short in
//! `kubectl get memberclusters.stowage.dev`, and apart from every upstream group we read, so RBAC
//! can grant exactly our kinds. CRDs are generated from these types into `manifests/crds/`
//! (`cargo run -p api --bin crdgen`); a test fails when the files drift.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "stowage.dev";
pub const VERSION: &str = "v1alpha1";
/// Label on a TrainJob naming its Queue; a TrainJob without it goes to the default Queue.
pub const QUEUE_LABEL: &str = "stowage.dev/queue";
/// Fencing labels on everything the agent creates for a TrainJob.
pub const TRAINJOB_UID_LABEL: &str = "stowage.dev/trainjob-uid";
pub const EPOCH_LABEL: &str = "stowage.dev/placement-epoch";
/// On a Placement: the member it is for, so each agent watches only its own.
pub const CLUSTER_LABEL: &str = "stowage.dev/cluster";
/// The node label naming a node's GPU product (set by NVIDIA's GPU feature discovery).
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

/// Annotations a user (or the training code) puts on a TrainJob; docs/playground.md has the table.
/// Where the trainer's pod set must or would like to sit (`required:rack`, `preferred:block`, `none`).
pub const TOPOLOGY_ANNOTATION: &str = "stowage.dev/topology";
/// Its priority (an integer; higher first).
pub const PRIORITY_ANNOTATION: &str = "stowage.dev/priority";
/// How long it runs once started, in seconds: lets it backfill and gives others an ETA.
pub const RUNTIME_ANNOTATION: &str = "stowage.dev/expected-runtime-seconds";
/// The GPU products it may use, `|`-separated.
pub const FLAVOR_ANNOTATION: &str = "stowage.dev/gpu-flavor";
/// When it last wrote a checkpoint (RFC 3339): preemption counts its lost work from there.
pub const CHECKPOINT_ANNOTATION: &str = "stowage.dev/last-checkpoint";

/// One placement of one TrainJob: its UID and the placement epoch. Everything an agent makes
/// carries both (as [`TRAINJOB_UID_LABEL`] and [`EPOCH_LABEL`]), and members report the
/// placements they count as `<uid>/<epoch>` strings; this is the one place that reads and
/// writes that form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlacementKey {
    pub uid: String,
    pub epoch: i64,
}

impl PlacementKey {
    /// The key of what a Placement places: its TrainJob's UID at its epoch.
    pub fn of(p: &Placement) -> PlacementKey {
        PlacementKey { uid: p.spec.train_job_uid.clone(), epoch: p.spec.epoch }
    }

    /// The key of the objects labelled with it, if they carry both labels.
    pub fn of_labels(labels: &std::collections::BTreeMap<String, String>) -> Option<PlacementKey> {
        let uid = labels.get(TRAINJOB_UID_LABEL)?.clone();
        let epoch = labels.get(EPOCH_LABEL)?.parse().ok()?;
        Some(PlacementKey { uid, epoch })
    }
}

impl std::fmt::Display for PlacementKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.uid, self.epoch)
    }
}

/// A string that is not `<uid>/<epoch>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not <TrainJob UID>/<epoch>")]
pub struct BadPlacementKey(pub String);

impl std::str::FromStr for PlacementKey {
    type Err = BadPlacementKey;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPlacementKey(s.to_string());
        let (uid, epoch) = s.rsplit_once('/').ok_or_else(bad)?;
        if uid.is_empty() {
            return Err(bad());
        }
        Ok(PlacementKey { uid: uid.to_string(), epoch: epoch.parse().map_err(|_| bad())? })
    }
}

/// A member cluster as the hub sees it. Cluster-scoped; the name is the cluster's.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "stowage.dev",
    version = "v1alpha1",
    kind = "MemberCluster",
    status = "MemberClusterStatus",
    shortname = "mc",
    printcolumn = r#"{"name":"Scheduler","type":"string","jsonPath":".status.gangScheduler"}"#,
    printcolumn = r#"{"name":"Heartbeat","type":"date","jsonPath":".status.heartbeatTime"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterSpec {
    /// Labels gangs' cluster selectors match (region, tier, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// A cordoned member keeps what runs there but gets nothing new.
    #[serde(default)]
    pub cordoned: bool,
    /// Admin cost: among equally good placements, the cheaper member wins.
    #[serde(default)]
    pub cost_weight: u32,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GangScheduler {
    /// scheduler-plugins coscheduling (`scheduling.x-k8s.io` PodGroup).
    Coscheduling,
    Volcano,
    Kai,
    /// Kubernetes' own workload-aware scheduling (`scheduling.k8s.io/v1beta1` PodGroup, 1.37+).
    Native,
    #[default]
    None,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    #[serde(default)]
    pub gang_scheduler: GangScheduler,
    /// Whether Kueue with Topology Aware Scheduling runs there.
    #[serde(default)]
    pub kueue: bool,
    /// Topology levels, widest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_levels: Vec<TopologyLevel>,
    /// Capacity and free GPUs per domain and flavor, summarised (hosts only where needed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<DomainCapacity>,
    /// Placements (`<TrainJob UID>/<epoch>`) whose pods are bound and so already counted in
    /// `domains`; the dispatcher counts every other unfinished placement here as assumed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counted: Vec<String>,
    /// Placements `domains` counts besides those in `counted`, left out of it for its size: the
    /// agent lists the first in key order (by UID, then epoch), so these are all after its last.
    #[serde(default)]
    pub counted_left_out: u32,
    /// Where the pods of each counted placement are bound, node by node: what evicting it would
    /// free, exactly (the dispatcher's preemption reads it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound: Vec<BoundPlacement>,
    /// Whether the hub can read this member's pod logs: through the log relay, or why not
    /// (the agent runs without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The nodes one placement's pods are bound to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoundPlacement {
    /// `<TrainJob UID>/<epoch>`, as in `counted`.
    pub placement: String,
    pub nodes: Vec<BoundNode>,
}

/// One node holding pods of a placement, described as `domains` summarises it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoundNode {
    /// The node's name: pods of several placements on one node are matched by it.
    pub node: String,
    /// Label values of its domains above hosts, widest first (a `domains[].path`).
    pub path: Vec<String>,
    pub flavor: String,
    pub gpus_per_node: u32,
    /// Its labels and taints that matter for scheduling (as in its `domains[]` entry).
    #[serde(default, flatten)]
    pub class: NodeClassReport,
    /// GPUs free on it now (as counted in its domain's histogram).
    pub free_gpus: u32,
    /// Pods of each pod set (replicated job) of the placement on it.
    pub pods: Vec<PodSetCount>,
}

/// A group of nodes' labels and taints that matter for scheduling: the label keys its agent is
/// told to report (`--node-labels`, and the well-known ones), and every `NoSchedule` or
/// `NoExecute` taint. The hub places a gang only where its pods' node selector, required node
/// affinity and tolerations admit them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReport {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<NodeTaint>,
}

/// A node taint as Kubernetes writes it (`value` empty when it has none).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTaint {
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSetCount {
    pub pod_set: String,
    pub pods: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// Canonical level: zone, block, rack, nvlink or host.
    pub level: String,
    pub node_label: String,
}

/// A group of like GPU nodes in one narrowest domain (same flavor, GPUs per node, labels and
/// taints that matter): how many, and how many GPUs they have free.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainCapacity {
    /// Label values from the widest level down to this domain's.
    pub path: Vec<String>,
    pub flavor: String,
    /// The labels and taints these nodes share that matter for scheduling: nodes of one domain
    /// and flavor that differ in them are reported as separate entries.
    #[serde(default, flatten)]
    pub class: NodeClassReport,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub allocatable_gpus: u64,
    pub free_gpus: u64,
    /// Free-GPU histogram: entry k counts nodes with k GPUs free.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free_histogram: Vec<u32>,
    /// Allocatable CPU (millicores) and memory (MiB) of the smallest node here: the hub checks
    /// per-pod CPU and memory against these; GPUs are what it accounts for exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_milli_per_node: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib_per_node: Option<u64>,
}

/// A queue with Kueue ClusterQueue semantics. Cluster-scoped.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "stowage.dev",
    version = "v1alpha1",
    kind = "Queue",
    status = "QueueStatus",
    printcolumn = r#"{"name":"Cohort","type":"string","jsonPath":".spec.cohort"}"#,
    printcolumn = r#"{"name":"Active","type":"string","jsonPath":".status.conditions[?(@.type==\"Active\")].status"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pending"}"#,
    printcolumn = r#"{"name":"Admitted","type":"integer","jsonPath":".status.admitted"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Fair-share weight within the cohort.
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default)]
    pub queueing_strategy: QueueingStrategy,
    /// Quota per GPU flavor and resource. None at all: unlimited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<QueueQuota>,
    /// Namespaces whose TrainJobs may use this queue; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Whom its TrainJobs may evict, as Kueue's ClusterQueue `preemption`; absent: nobody.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<QueuePreemption>,
    /// Whether its TrainJobs may set their own priority with the `stowage.dev/priority`
    /// annotation. Off by default: priority then comes only from PriorityClasses an admin made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_priority_annotation: bool,
}

/// Kueue's ClusterQueue `preemption`, field for field.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuePreemption {
    #[serde(default)]
    pub within_cluster_queue: WithinClusterQueue,
    #[serde(default)]
    pub reclaim_within_cohort: ReclaimWithinCohort,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum WithinClusterQueue {
    #[default]
    Never,
    LowerPriority,
    LowerOrNewerEqualPriority,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ReclaimWithinCohort {
    #[default]
    Never,
    LowerPriority,
    Any,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BorrowWithinCohort {
    /// `Never` or `LowerPriority`.
    #[serde(default)]
    pub policy: BorrowPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum BorrowPolicy {
    #[default]
    Never,
    LowerPriority,
}

fn one() -> u32 {
    1
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum QueueingStrategy {
    StrictFIFO,
    #[default]
    BestEffortFIFO,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueQuota {
    pub flavor: String,
    /// `nvidia.com/gpu`, `cpu` or `memory`.
    pub resource: String,
    /// A Kubernetes quantity (`16`, `512`, `2Ti`).
    pub nominal_quota: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    #[serde(default)]
    pub pending: u32,
    #[serde(default)]
    pub admitted: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Where one TrainJob runs: written by the dispatcher, read by the member agent. Namespaced,
/// named and owned like its TrainJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "stowage.dev",
    version = "v1alpha1",
    kind = "Placement",
    namespaced,
    status = "PlacementStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"Epoch","type":"integer","jsonPath":".spec.epoch"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    pub train_job_uid: String,
    /// The member running it; absent while the TrainJob is withdrawn and waits to be placed
    /// again elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Fencing token: raised on every re-placement; an agent deletes what it made for older ones.
    pub epoch: i64,
    /// The queue it was admitted under. While placed it is charged to this queue, whatever its
    /// labels say later: a relabel can neither move its quota charge nor drop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_sets: Vec<PodSetPlacement>,
    /// Members this TrainJob stays away from for a while, after it could not run there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backoff: Vec<ClusterBackoff>,
    /// How the dispatcher ranked the members it could place this on, best first (at most
    /// [`MAX_RANKED`]): why `cluster` was chosen. It went to the first that took it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranking: Vec<ClusterRank>,
}

/// The most members a Placement's ranking lists.
pub const MAX_RANKED: usize = 10;

/// One member as the dispatcher ranked it for a TrainJob: compared in this order, each
/// deciding only when the ones before it tie.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRank {
    pub cluster: String,
    /// Topology preferences the TrainJob would miss there (fewer is better).
    #[serde(default)]
    pub missed_preferences: u32,
    /// The narrowest level holding the whole gang there (narrower is better); absent: only the
    /// cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<String>,
    /// GPUs the chosen domains would keep free (fewer is better: best fit).
    #[serde(default)]
    pub leftover_gpus: u64,
    /// The member's cost weight (lower is better).
    #[serde(default)]
    pub cost_weight: u32,
    /// GPUs free on the member (more is better: balance).
    #[serde(default)]
    pub free_gpus: u64,
}

/// A member a TrainJob was taken away from, and until when it keeps away.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterBackoff {
    pub cluster: String,
    /// MemberSilent, Unschedulable or Lost.
    pub reason: String,
    /// RFC 3339.
    pub until: String,
    /// How many times it was taken away from this member: the back-off doubles each time.
    pub attempts: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSetPlacement {
    /// The replicated job's name.
    pub name: String,
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    /// The narrowest domain holding all the pod set's pods; absent: the whole cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<DomainRef>,
    /// Whether the TrainJob required that level (else it was preferred or free).
    #[serde(default)]
    pub required: bool,
    /// Hosts chosen, with pod counts: advisory, the member's scheduler binds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostPods>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainRef {
    /// Canonical level: zone, block, rack, nvlink or host.
    pub level: String,
    /// The node label of that level in this cluster.
    pub node_label: String,
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct HostPods {
    pub host: String,
    pub pods: u32,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum PlacementPhase {
    #[default]
    Pending,
    Applied,
    Running,
    Succeeded,
    Failed,
    /// The gang did not start within its timeout on the member.
    Unschedulable,
    /// The member's JobSet disappeared before it finished (evicted or deleted there).
    Lost,
}

impl PlacementPhase {
    pub const ALL: [PlacementPhase; 7] = [
        PlacementPhase::Pending,
        PlacementPhase::Applied,
        PlacementPhase::Running,
        PlacementPhase::Succeeded,
        PlacementPhase::Failed,
        PlacementPhase::Unschedulable,
        PlacementPhase::Lost,
    ];
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    #[serde(default)]
    pub phase: PlacementPhase,
    /// The epoch this status describes.
    #[serde(default)]
    pub observed_epoch: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs_status: Vec<crate::trainer::JobStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// The gang scheduler's reason while pods are pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl PlacementStatus {
    /// A merge patch setting the whole status: each field this status leaves out is cleared
    /// (`null`), not left as an earlier epoch or a claim wrote it.
    pub fn merge_patch(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(fields) = v.as_object_mut() {
            for key in PLACEMENT_STATUS_OPTIONAL {
                fields.entry(key).or_insert(serde_json::Value::Null);
            }
        }
        serde_json::json!({"status": v})
    }
}

/// The status fields a [`PlacementStatus`] may leave out.
const PLACEMENT_STATUS_OPTIONAL: [&str; 5] = ["conditions", "jobsStatus", "startTime", "completionTime", "message"];

/// Our CRDs as YAML documents, file name first, as `manifests/crds/` holds them.
pub fn crds() -> Vec<(String, String)> {
    use kube::CustomResourceExt;
    [MemberCluster::crd(), Queue::crd(), Placement::crd()]
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let mut value = serde_json::to_value(&crd).unwrap_or_default();
            drop_unknown_formats(&mut value);
            let yaml = input_limits::yaml::to_string(&value).unwrap_or_default();
            (format!("{name}.yaml"), yaml)
        })
        .collect()
}

/// Removes the `format`s schemars writes for unsigned integers (`uint32`, `uint64`, ...): an API
/// server knows none of them and warns "unrecognized format" on every apply (seen on the real
/// testbed). Their `minimum: 0` stays, and a 32-bit one keeps its upper bound as a `maximum`.
fn drop_unknown_formats(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            let format = map.get("format").and_then(|f| f.as_str()).map(str::to_string);
            if let Some(f) = format.filter(|f| f.starts_with("uint")) {
                map.remove("format");
                let max = match f.as_str() {
                    "uint8" => Some(u64::from(u8::MAX)),
                    "uint16" => Some(u64::from(u16::MAX)),
                    "uint32" => Some(u64::from(u32::MAX)),
                    _ => None,
                };
                if let Some(max) = max {
                    map.entry("maximum").or_insert(max.into());
                }
            }
            map.values_mut().for_each(drop_unknown_formats);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_unknown_formats),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_keys_read_what_they_write_and_refuse_the_rest() {
        let k = PlacementKey { uid: "3f2c0d6e-1111".into(), epoch: 4 };
        assert_eq!(k.to_string(), "3f2c0d6e-1111/4");
        assert_eq!("3f2c0d6e-1111/4".parse::<PlacementKey>(), Ok(k.clone()));
        for bad in ["", "uid", "/4", "uid/", "uid/four", "uid/4x"] {
            assert!(bad.parse::<PlacementKey>().is_err(), "{bad:?}");
        }
        let labels = std::collections::BTreeMap::from([
            (TRAINJOB_UID_LABEL.to_string(), "3f2c0d6e-1111".to_string()),
            (EPOCH_LABEL.to_string(), "4".to_string()),
        ]);
        assert_eq!(PlacementKey::of_labels(&labels), Some(k));
    }

    #[test]
    fn a_placement_status_patch_clears_every_field_it_leaves_out() {
        // Every field set: the keys a status may leave out are exactly the listed ones.
        let full = PlacementStatus {
            phase: PlacementPhase::Running,
            observed_epoch: 2,
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "R".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }],
            jobs_status: vec![crate::trainer::JobStatus::default()],
            start_time: Some("t".into()),
            completion_time: Some("t".into()),
            message: Some("m".into()),
        };
        let always = serde_json::to_value(PlacementStatus::default()).expect("json");
        let every = serde_json::to_value(&full).expect("json");
        let mut optional: Vec<&str> = every
            .as_object()
            .expect("object")
            .keys()
            .filter(|k| !always.as_object().expect("object").contains_key(*k))
            .map(String::as_str)
            .collect();
        optional.sort_unstable();
        let mut listed = PLACEMENT_STATUS_OPTIONAL.to_vec();
        listed.sort_unstable();
        assert_eq!(optional, listed);
        let patch =
            PlacementStatus { phase: PlacementPhase::Pending, observed_epoch: 3, ..Default::default() }.merge_patch();
        assert_eq!(patch["status"]["message"], serde_json::Value::Null);
        assert_eq!(patch["status"]["jobsStatus"], serde_json::Value::Null);
        assert_eq!(patch["status"]["observedEpoch"], 3);
    }
}
