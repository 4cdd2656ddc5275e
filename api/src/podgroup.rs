//! The four gang-scheduler PodGroups a member may run: scheduler-plugins coscheduling
//! (`scheduling.x-k8s.io/v1alpha1`), Volcano (`scheduling.volcano.sh/v1beta1`), KAI
//! (`scheduling.run.ai/v2alpha2`) and Kubernetes' own (`scheduling.k8s.io/v1beta1`, 1.37+).

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
/// Pod label naming the pod's native PodGroup. Kubernetes ties a pod to it by
/// `spec.schedulingGroup.podGroupName`, a 1.36+ field the pod types here predate, so rendering
/// writes the label and [`native::scheduling_group`] turns it into the field in the JSON applied.
pub const NATIVE_POD_LABEL: &str = "stowage.dev/pod-group";

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

pub mod native {
    //! Kubernetes' own PodGroup (KEP-4671, workload-aware scheduling): the `GangScheduling`
    //! plugin of kube-scheduler holds a group's pods until `minCount` of them can be placed at
    //! once, and binds none otherwise. Needs the `GenericWorkload` gate (beta, off by default in
    //! 1.37) and `scheduling.k8s.io/v1beta1` served.
    use super::*;

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
    #[kube(group = "scheduling.k8s.io", version = "v1beta1", kind = "PodGroup", namespaced, schema = "disabled")]
    #[serde(rename_all = "camelCase")]
    pub struct PodGroupSpec {
        pub scheduling_policy: SchedulingPolicy,
        #[serde(flatten)]
        pub extra: Extra,
    }

    /// Exactly one of `basic` and `gang`.
    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct SchedulingPolicy {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gang: Option<Gang>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub basic: Option<serde_json::Value>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct Gang {
        pub min_count: i32,
    }

    /// Writes `spec.schedulingGroup.podGroupName` into each pod template of a JobSet's JSON whose
    /// labels carry [`NATIVE_POD_LABEL`](super::NATIVE_POD_LABEL).
    pub fn scheduling_group(jobset: &mut serde_json::Value) {
        let Some(jobs) = jobset.pointer_mut("/spec/replicatedJobs").and_then(|j| j.as_array_mut()) else { return };
        for job in jobs {
            let Some(pod) = job.pointer_mut("/template/spec/template") else { continue };
            let Some(group) = pod.pointer("/metadata/labels").and_then(|l| l.get(super::NATIVE_POD_LABEL)).cloned()
            else {
                continue;
            };
            if let Some(spec) = pod.get_mut("spec").and_then(|s| s.as_object_mut()) {
                spec.insert("schedulingGroup".into(), serde_json::json!({"podGroupName": group}));
            }
        }
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
