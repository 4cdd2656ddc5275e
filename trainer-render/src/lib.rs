//! Render a TrainJob and its runtime into the objects Kubeflow Trainer v2.3.0 would create —
//! JobSet, PodGroup, MPI hostfile ConfigMap and SSH Secret — and, given a Placement, pin them to
//! the placed domains for the member's gang scheduler. Pure: no client, no clock, no randomness
//! (the MPI SSH key is an input; [`sshkey`] makes one, outside `render`). Each step is a plain
//! function over a [`Draft`], run in a fixed order: first the steps that shape the pods (all the
//! hub needs to size a gang: [`pod_sets`]), then those only a member needs; docs/rendering.md
//! says what each does and where Stowage deliberately differs from Trainer.
//!
//! No client, no clock, no Kubernetes API access: the agent applies what this returns, the hub
//! schedules what [`pod_sets`] returns, `stowage render` prints it, and the hub's admission
//! webhook answers with [`admit`], which runs the checks `render` starts with and says what the
//! API server (422) or Trainer's webhook (403) would say, word for word.

mod admission;
mod field;
mod gojson;
pub mod manifest;
mod pods;
pub mod sshkey;
mod steps;
mod torchtune;
mod validate;

pub use admission::{Denial, TRAINJOB_GROUP_KIND, WEBHOOK_NAME, admit};
pub use field::{BadValue, ErrorType, FieldError, Rule, aggregate};
pub use validate::{CRD_RULES, crd_rules};

use std::collections::BTreeMap;

use api::jobset::{JobSet, JobSetSpec};
use api::podgroup::{PodGroup, kai, native, volcano};
use api::stowage::Placement;
use api::trainer::{Runtime, TrainJob};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

/// The gang scheduler the rendered PodGroup is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GangScheduler {
    /// Whatever the runtime's `podGroupPolicy` asks for (coscheduling, Volcano, or none), as Trainer.
    #[default]
    FromRuntime,
    Coscheduling,
    Volcano,
    Kai,
    /// Kubernetes' own PodGroup (`scheduling.k8s.io/v1beta1`): the member's kube-scheduler
    /// gangs the pods (1.37+, `GenericWorkload` gate). Trainer has no such policy: only an agent
    /// told so renders it.
    Native,
    None,
}

/// How a placed pod set is pinned to its domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopologyMode {
    /// Node affinity on the domain's topology label.
    #[default]
    Affinity,
    /// Kueue TAS pod-set annotations (the member runs Kueue) at the chosen level, with a node
    /// selector on that level's label holding Stowage's chosen domain (the annotation asks for
    /// *some* domain and Kueue's TAS filters nodes by selector), plus the same node affinity.
    Kueue,
}

/// What the member offers, as the agent detected it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    pub gang_scheduler: GangScheduler,
    pub topology_mode: TopologyMode,
    /// Volcano HyperNode tier per canonical level (`rack` → 1 by default).
    pub volcano_tiers: BTreeMap<String, i32>,
    /// KAI Topology object name, for KAI topology constraints.
    pub kai_topology: Option<String>,
    /// With [`TopologyMode::Kueue`]: the member's LocalQueue, whose label the JobSet carries so
    /// that the member's Kueue admits it.
    pub kueue_local_queue: Option<String>,
}

/// The MPI SSH key pair Trainer generates; the caller makes it (render stays deterministic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshKeyPair {
    /// PEM, `EC PRIVATE KEY`.
    pub private_pem: String,
    /// OpenSSH authorized_keys line.
    pub public_openssh: String,
}

#[derive(Debug, Clone)]
pub struct Input<'a> {
    pub trainjob: &'a TrainJob,
    pub runtime: &'a Runtime,
    pub placement: Option<&'a Placement>,
    pub capabilities: &'a Capabilities,
    pub ssh_key: Option<&'a SshKeyPair>,
    /// The JobSet's UID once it exists: KAI names its PodGroup after it.
    pub jobset_uid: Option<&'a str>,
}

/// One rendered object.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Object {
    JobSet(Box<JobSet>),
    Coscheduling(PodGroup),
    Volcano(volcano::PodGroup),
    Kai(kai::PodGroup),
    Native(native::PodGroup),
    ConfigMap(ConfigMap),
    Secret(Secret),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::JobSet(_) => "JobSet",
            Object::Coscheduling(_) | Object::Volcano(_) | Object::Kai(_) | Object::Native(_) => "PodGroup",
            Object::ConfigMap(_) => "ConfigMap",
            Object::Secret(_) => "Secret",
        }
    }

    pub fn api_version(&self) -> &'static str {
        match self {
            Object::JobSet(_) => "jobset.x-k8s.io/v1alpha2",
            Object::Coscheduling(_) => "scheduling.x-k8s.io/v1alpha1",
            Object::Volcano(_) => "scheduling.volcano.sh/v1beta1",
            Object::Kai(_) => "scheduling.run.ai/v2alpha2",
            Object::Native(_) => "scheduling.k8s.io/v1beta1",
            Object::ConfigMap(_) | Object::Secret(_) => "v1",
        }
    }

    /// The object's metadata, as rendered (its name and namespace are the applied object's).
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::JobSet(o) => &o.metadata,
            Object::Coscheduling(o) => &o.metadata,
            Object::Volcano(o) => &o.metadata,
            Object::Kai(o) => &o.metadata,
            Object::Native(o) => &o.metadata,
            Object::ConfigMap(o) => &o.metadata,
            Object::Secret(o) => &o.metadata,
        }
    }

    /// The object as JSON, with `apiVersion` and `kind`, as it is applied.
    pub fn to_value(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), self.api_version().into());
            m.insert("kind".into(), self.kind().into());
        }
        if let Object::JobSet(_) = self {
            native::scheduling_group(&mut v);
        }
        v
    }
}

/// Which input an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    TrainJob,
    Runtime,
    Placement,
}

/// A rejected input: the object, the field path and what is wrong. From a field error (every
/// check's), `problem` is Kubernetes' `ErrorBody` and the whole displays as `field.Error.Error()`
/// does: `spec.trainer.numNodes: Invalid value: 0: must be at least 1`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct RenderError {
    pub object: Source,
    pub path: String,
    pub problem: String,
}

impl RenderError {
    pub(crate) fn new(source: Source, path: impl Into<String>, problem: impl Into<String>) -> Self {
        RenderError { object: source, path: path.into(), problem: problem.into() }
    }
}

impl From<FieldError> for RenderError {
    fn from(e: FieldError) -> Self {
        RenderError { object: e.object, problem: e.body(), path: e.field }
    }
}

/// The work in progress that the steps refine.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub spec: JobSetSpec,
    /// One per replicated job, in the runtime's order.
    pub pod_sets: Vec<PodSetInfo>,
    /// ConfigMaps, Secrets and PodGroups, in the order made.
    pub extra: Vec<Object>,
    /// The gang scheduler in effect after the runtime's policy and the member's capabilities.
    pub scheduler: GangScheduler,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSetInfo {
    pub name: String,
    pub count: i32,
    pub ancestor: Option<String>,
}

type Step = fn(&Input<'_>, &mut Draft) -> Result<(), RenderError>;

/// The steps that shape the pods: everything [`pod_sets`] needs. The rest add what only a
/// member needs (the MPI companions, the PodGroup, pinning, failure policy, fencing labels).
const SHAPE_STEPS: [Step; 9] = [
    validate::check,
    steps::runtime_patches,
    validate::check_patched,
    steps::resources_per_node,
    steps::counts,
    steps::trainer,
    steps::initializers,
    steps::ml_policy,
    steps::env_after_policy,
];

const MEMBER_STEPS: [Step; 5] =
    [steps::mpi_companions, steps::pod_group, steps::pinning, steps::fault_tolerance, steps::fencing];

/// Renders the objects for `input`, JobSet first.
pub fn render(input: &Input<'_>) -> Result<Vec<Object>, RenderError> {
    let mut draft = Draft::default();
    for step in SHAPE_STEPS.iter().chain(&MEMBER_STEPS) {
        step(input, &mut draft)?;
    }
    Ok(steps::finish(input, draft))
}

/// One replicated job as the hub sizes it: how many pods, and the pod they all are.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSetShape {
    pub name: String,
    /// `replicas × parallelism`.
    pub pods: u32,
    /// The `trainer.kubeflow.org/trainjob-ancestor-step` label of the job's pods.
    pub ancestor: Option<String>,
    pub pod: k8s_openapi::api::core::v1::PodSpec,
}

/// The pod sets `input` renders into, in the runtime's order, without rendering what does not
/// change a pod (no SSH key, PodGroup or pinning): what the hub schedules.
pub fn pod_sets(input: &Input<'_>) -> Result<Vec<PodSetShape>, RenderError> {
    let mut draft = Draft::default();
    for step in SHAPE_STEPS {
        step(input, &mut draft)?;
    }
    Ok(draft
        .spec
        .replicated_jobs
        .into_iter()
        .map(|rj| {
            let job = rj.template.spec.unwrap_or_default();
            let replicas = u32::try_from(rj.replicas.unwrap_or(1)).unwrap_or(0);
            let parallelism = u32::try_from(job.parallelism.unwrap_or(1)).unwrap_or(0);
            PodSetShape {
                pods: replicas.saturating_mul(parallelism),
                ancestor: rj
                    .template
                    .metadata
                    .and_then(|m| m.labels)
                    .and_then(|mut l| l.remove(api::trainer::ANCESTOR_LABEL)),
                pod: job.template.spec.unwrap_or_default(),
                name: rj.name,
            }
        })
        .collect())
}
