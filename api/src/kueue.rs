//! The Kueue fields Stowage uses: the Workload's pod sets and the MultiKueue external-dispatcher
//! status fields (kueue v0.19.2, `kueue.x-k8s.io/v1beta2`), and the TAS pod-set annotations.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::Extra;

pub const PODSET_REQUIRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-required-topology";
pub const PODSET_PREFERRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-preferred-topology";
pub const PODSET_UNCONSTRAINED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-unconstrained-topology";
pub const PODSET_SLICE_REQUIRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-slice-required-topology";
pub const PODSET_SLICE_SIZE: &str = "kueue.x-k8s.io/podset-slice-size";
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue writes Workload status as this field manager; an external dispatcher must too.
pub const ADMISSION_FIELD_MANAGER: &str = "kueue-admission";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "Workload",
    namespaced,
    status = "WorkloadStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    #[serde(default)]
    pub pod_sets: Vec<WorkloadPodSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPodSet {
    pub name: String,
    pub count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_request: Option<serde_json::Value>,
    /// The pod template, kept as JSON: Stowage reads only requests and node selectors from it.
    #[serde(default)]
    pub template: serde_json::Value,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<AdmissionCheckState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_cluster_names: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Workload condition types Stowage reads (`apis/kueue/v1beta2/workload_types.go`).
pub const QUOTA_RESERVED: &str = "QuotaReserved";
pub const ADMITTED: &str = "Admitted";
pub const EVICTED: &str = "Evicted";
pub const FINISHED: &str = "Finished";

/// The conditions Kueue writes as [`ADMISSION_FIELD_MANAGER`], with the rest of its admission
/// status (`pkg/workload/workload.go`, `admissionManagedConditions`, v0.19): the set an
/// external dispatcher applies back unchanged.
pub const ADMISSION_MANAGED_CONDITIONS: [&str; 7] =
    [QUOTA_RESERVED, EVICTED, ADMITTED, "Preempted", "Requeued", "DeactivationTarget", FINISHED];

/// The status fields besides conditions, admission checks and the cluster fields that Kueue
/// applies whole as [`ADMISSION_FIELD_MANAGER`] (of `schedulingStats`, only its evictions).
pub const ADMISSION_MANAGED_FIELDS: [&str; 4] =
    ["admission", "requeueState", "resourceRequests", "accumulatedPastExecutionTimeSeconds"];

/// One admission check's state on a Workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckState {
    pub name: String,
    /// `Pending`, `Ready`, `Retry` or `Rejected`.
    #[serde(default)]
    pub state: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.controllerName` of MultiKueue's AdmissionChecks.
pub const MULTIKUEUE_CONTROLLER: &str = "kueue.x-k8s.io/multikueue";
/// On a MultiKueueCluster: the MemberCluster it is, when the names differ.
pub const MEMBER_CLUSTER_ANNOTATION: &str = "stowage.dev/member-cluster";

/// Kueue's AdmissionCheck (cluster-scoped): which controller decides it, with what parameters.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "kueue.x-k8s.io", version = "v1beta2", kind = "AdmissionCheck", schema = "disabled")]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckSpec {
    #[serde(default)]
    pub controller_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<ParametersReference>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ParametersReference {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

/// MultiKueue's worker-cluster list (cluster-scoped): names of MultiKueueCluster objects.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "kueue.x-k8s.io", version = "v1beta2", kind = "MultiKueueConfig", schema = "disabled")]
#[serde(rename_all = "camelCase")]
pub struct MultiKueueConfigSpec {
    #[serde(default)]
    pub clusters: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One MultiKueue worker cluster (cluster-scoped): how Kueue reaches it. Stowage reads its
/// name, [`MEMBER_CLUSTER_ANNOTATION`] and whether Kueue reaches it (its `Active` condition).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "MultiKueueCluster",
    schema = "disabled",
    status = "MultiKueueClusterStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct MultiKueueClusterSpec {
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct MultiKueueClusterStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A MultiKueueCluster's condition: Kueue's client for the worker is connected.
pub const ACTIVE: &str = "Active";

/// The label naming a TrainJob's WorkloadPriorityClass, as Kueue reads it.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";

/// Kueue's WorkloadPriorityClass (`kueue.x-k8s.io/v1beta2`, cluster-scoped): a priority an admin
/// names for workloads, apart from pods' PriorityClasses. Its fields are top-level, as
/// PriorityClass's are, so it is written out rather than derived.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPriorityClass {
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    pub value: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl kube::Resource for WorkloadPriorityClass {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "WorkloadPriorityClass".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "kueue.x-k8s.io".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1beta2".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "workloadpriorityclasses".into()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.metadata
    }
}

/// Kueue's LocalQueue (namespaced): the name a TrainJob's queue label gives, pointing at a
/// ClusterQueue.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "kueue.x-k8s.io", version = "v1beta2", kind = "LocalQueue", namespaced, schema = "disabled")]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    #[serde(default)]
    pub cluster_queue: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Kueue's ClusterQueue (cluster-scoped): quotas per resource flavor, cohort, fair-sharing
/// weight, preemption and which namespaces may use it. Quantities are kept as written
/// (integers or strings).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "kueue.x-k8s.io", version = "v1beta2", kind = "ClusterQueue", schema = "disabled")]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queueing_strategy: Option<String>,
    #[serde(default)]
    pub resource_groups: Vec<ResourceGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// The same fields as Stowage's Queue `spec.preemption`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<crate::stowage::QueuePreemption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    #[serde(default)]
    pub covered_resources: Vec<String>,
    #[serde(default)]
    pub flavors: Vec<FlavorQuotas>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    /// A ResourceFlavor's name.
    pub name: String,
    #[serde(default)]
    pub resources: Vec<ResourceQuota>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    pub name: String,
    #[serde(default)]
    pub nominal_quota: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FairSharing {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<serde_json::Value>,
}

/// Kueue's ResourceFlavor (cluster-scoped): the node labels that make a flavor. Its
/// `nvidia.com/gpu.product` label, where it has one, is the GPU flavor Stowage knows it by.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "kueue.x-k8s.io", version = "v1beta2", kind = "ResourceFlavor", schema = "disabled")]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(flatten)]
    pub extra: Extra,
}
