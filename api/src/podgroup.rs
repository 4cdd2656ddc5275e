//! The three gang-scheduler PodGroups a member may run: scheduler-plugins coscheduling
//! (`scheduling.x-k8s.io/v1alpha1`), Volcano (`scheduling.volcano.sh/v1beta1`) and KAI
//! (`scheduling.run.ai/v2alpha2`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::Extra;
use crate::trainer::NetworkTopology;

/// Pod label tying a pod to its coscheduling PodGroup.
pub const COSCHEDULING_POD_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// Pod annotation tying a pod to its Volcano PodGroup.
pub const VOLCANO_POD_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// JobSet annotation naming the Volcano queue.
pub const VOLCANO_QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
/// Pod annotation tying a pod to its KAI PodGroup.
pub const KAI_POD_ANNOTATION: &str = "pod-group-name";
pub const KAI_QUEUE_LABEL: &str = "kai.scheduler/queue";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "scheduling.x-k8s.io", version = "v1alpha1", kind = "PodGroup", namespaced, schema = "disabled")]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPodGroupSpec {
    pub min_member: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
    #[serde(flatten)]
    pub extra: Extra,
}

pub mod volcano {
    //! Volcano's PodGroup, in its own module so its Rust name can be `PodGroup` too.
    use super::*;

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
    #[kube(group = "scheduling.volcano.sh", version = "v1beta1", kind = "PodGroup", namespaced, schema = "disabled")]
    #[serde(rename_all = "camelCase")]
    pub struct PodGroupSpec {
        pub min_member: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub min_resources: Option<BTreeMap<String, Quantity>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub queue: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority_class_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub network_topology: Option<NetworkTopology>,
        #[serde(flatten)]
        pub extra: Extra,
    }
}

pub mod kai {
    //! KAI Scheduler's PodGroup, as its podgrouper makes one for a JobSet.
    use super::*;

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
    #[kube(group = "scheduling.run.ai", version = "v2alpha2", kind = "PodGroup", namespaced, schema = "disabled")]
    #[serde(rename_all = "camelCase")]
    pub struct PodGroupSpec {
        pub min_member: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub queue: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority_class_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub preemptibility: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub topology_constraint: Option<TopologyConstraint>,
        #[serde(flatten)]
        pub extra: Extra,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct TopologyConstraint {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub topology: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub required_topology_level: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub preferred_topology_level: Option<String>,
    }
}
