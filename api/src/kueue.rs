//! The Kueue fields Stowage uses: the Workload's pod sets and the MultiKueue external-dispatcher
//! status fields (kueue v0.19.2, `kueue.x-k8s.io/v1beta2`), and the TAS pod-set annotations.

use kube::CustomResource;
use serde::{Deserialize, Serialize};

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_cluster_names: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
