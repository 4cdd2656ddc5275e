//! Kubeflow Trainer v2.3.0: TrainJob, TrainingRuntime, ClusterTrainingRuntime
//! (`trainer.kubeflow.org/v1alpha1`), as `pkg/apis/trainer/v1alpha1` defines them.

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use crate::Extra;
use crate::jobset::JobSetSpec;

pub const GROUP: &str = "trainer.kubeflow.org";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";

/// Label on a runtime's replicated-job template naming the TrainJob section that overrides it.
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
pub const ANCESTOR_TRAINER: &str = "trainer";
pub const ANCESTOR_DATASET: &str = "dataset-initializer";
pub const ANCESTOR_MODEL: &str = "model-initializer";
pub const FRAMEWORK_LABEL: &str = "trainer.kubeflow.org/framework";
pub const DEFAULT_MANAGED_BY: &str = "trainer.kubeflow.org/trainjob-controller";
pub const KUEUE_MULTIKUEUE_MANAGED_BY: &str = "kueue.x-k8s.io/multikueue";

/// The condition types a hub TrainJob carries. Trainer v2.3 sets only `Suspended`, `Complete`
/// and `Failed`; `Pending` and `Preempted` are Stowage's own (why it waits; that it was evicted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainJobCondition {
    Suspended,
    Complete,
    Failed,
    Pending,
    Preempted,
}

impl TrainJobCondition {
    pub const fn as_str(self) -> &'static str {
        match self {
            TrainJobCondition::Suspended => "Suspended",
            TrainJobCondition::Complete => "Complete",
            TrainJobCondition::Failed => "Failed",
            TrainJobCondition::Pending => "Pending",
            TrainJobCondition::Preempted => "Preempted",
        }
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainJob",
    namespaced,
    status = "TrainJobStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    pub runtime_ref: RuntimeRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initializer: Option<Initializer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<Trainer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_patches: Vec<RuntimePatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    pub name: String,
    /// CRD default `trainer.kubeflow.org`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// CRD default `ClusterTrainingRuntime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl RuntimeRef {
    pub fn kind_or_default(&self) -> &str {
        self.kind.as_deref().unwrap_or("ClusterTrainingRuntime")
    }

    pub fn api_group_or_default(&self) -> &str {
        self.api_group.as_deref().unwrap_or(GROUP)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Initializer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<InitializerSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<InitializerSource>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct InitializerSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LocalObjectReference {
    #[serde(default)]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Trainer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_per_node: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One manager's patch of the runtime (v2.2+). The patch body stays JSON: it is applied as a
/// strategic merge patch and validated against the runtime by the renderer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePatch {
    pub manager: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_runtime_spec: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs_status: Vec<JobStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Counts of child Jobs of one replicated job, copied from the JobSet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
pub struct JobStatus {
    pub name: String,
    pub ready: i32,
    pub succeeded: i32,
    pub failed: i32,
    pub active: i32,
    pub suspended: i32,
}

/// The spec shared by TrainingRuntime and ClusterTrainingRuntime.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntimeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_policy: Option<MlPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_policy: Option<PodGroupPolicy>,
    pub template: JobSetTemplateSpec,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "trainer.kubeflow.org", version = "v1alpha1", kind = "TrainingRuntime", namespaced, schema = "disabled")]
pub struct TrainingRuntimeSpecNamespaced {
    #[serde(flatten)]
    pub inner: TrainingRuntimeSpec,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(group = "trainer.kubeflow.org", version = "v1alpha1", kind = "ClusterTrainingRuntime", schema = "disabled")]
pub struct TrainingRuntimeSpecCluster {
    #[serde(flatten)]
    pub inner: TrainingRuntimeSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobSetTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default)]
    pub spec: JobSetSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MlPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jax: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xgboost: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TorchPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_injection: Option<EnvInjection>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct EnvInjection {
    #[serde(default)]
    pub targets: Vec<EnvInjectionTarget>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EnvInjectionTarget {
    pub job_name: String,
    #[serde(default)]
    pub container_names: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MpiPolicy {
    /// CRD default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
    /// CRD default `OpenMPI` (the only one implemented).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_implementation: Option<String>,
    /// CRD default `/root/.ssh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_mount_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_launcher_as_node: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct PodGroupPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coscheduling: Option<CoschedulingPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volcano: Option<VolcanoPolicy>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPolicy {
    /// CRD default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopology>,
}

/// Volcano's network-topology constraint (HyperNode tiers).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopology {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_tier_allowed: Option<i32>,
}

/// A TrainingRuntime or a ClusterTrainingRuntime: the renderer treats them alike.
#[derive(Clone, Debug)]
pub enum Runtime {
    Namespaced(TrainingRuntime),
    Cluster(ClusterTrainingRuntime),
}

impl Runtime {
    pub fn kind(&self) -> &'static str {
        match self {
            Runtime::Namespaced(_) => "TrainingRuntime",
            Runtime::Cluster(_) => "ClusterTrainingRuntime",
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Runtime::Namespaced(r) => &r.metadata,
            Runtime::Cluster(r) => &r.metadata,
        }
    }

    pub fn spec(&self) -> &TrainingRuntimeSpec {
        match self {
            Runtime::Namespaced(r) => &r.spec.inner,
            Runtime::Cluster(r) => &r.spec.inner,
        }
    }
}
