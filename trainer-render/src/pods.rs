//! A runtime's ReplicatedJobs read and written as Trainer's plugins reach into them: which
//! ancestor a job is, its pod's spec, metadata and containers, and the resources and GPUs of
//! one training node. Shared by rendering (`steps`), the torchtune path and validation.

use std::collections::BTreeMap;

use api::jobset::ReplicatedJob;
use api::quantity::Milli;
use api::trainer::{ANCESTOR_LABEL, ANCESTOR_TRAINER, TrainJob};
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The `trainer.kubeflow.org/trainjob-ancestor-step` a job carries.
pub(crate) fn ancestor_of(j: &ReplicatedJob) -> Option<&str> {
    j.template.metadata.as_ref()?.labels.as_ref()?.get(ANCESTOR_LABEL).map(String::as_str)
}

pub(crate) fn pod_spec(j: &ReplicatedJob) -> Option<&PodSpec> {
    j.template.spec.as_ref()?.template.spec.as_ref()
}

pub(crate) fn pod_spec_mut(j: &mut ReplicatedJob) -> &mut PodSpec {
    j.template.spec.get_or_insert_with(Default::default).template.spec.get_or_insert_with(Default::default)
}

pub(crate) fn pod_meta_mut(j: &mut ReplicatedJob) -> &mut ObjectMeta {
    j.template.spec.get_or_insert_with(Default::default).template.metadata.get_or_insert_with(Default::default)
}

/// A job's containers, then its init containers.
pub(crate) fn job_containers(j: &ReplicatedJob) -> impl Iterator<Item = &Container> {
    pod_spec(j).into_iter().flat_map(|p| p.containers.iter().chain(p.init_containers.iter().flatten()))
}

pub(crate) fn container_mut<'a>(j: &'a mut ReplicatedJob, name: &str) -> Option<&'a mut Container> {
    pod_spec_mut(j).containers.iter_mut().find(|c| c.name == name)
}

/// Resources per node as the ML plugins read them: the TrainJob's `resourcesPerNode` if set,
/// else the runtime's `node` container of the first job named `node` or labelled trainer that
/// has resources (`ExtractResourcePerNodeFromRuntime`).
pub(crate) fn node_resources(job: &TrainJob, jobs: &[ReplicatedJob]) -> Option<ResourceRequirements> {
    if let Some(r) = job.spec.trainer.as_ref().and_then(|t| t.resources_per_node.as_ref()) {
        return Some(r.clone());
    }
    jobs.iter()
        .filter(|j| j.name == "node" || ancestor_of(j) == Some(ANCESTOR_TRAINER))
        .filter_map(pod_spec)
        .flat_map(|p| &p.containers)
        .find(|c| c.name == "node" && c.resources.is_some())
        .and_then(|c| c.resources.clone())
}

/// `GetNumGPUPerNode`: the first resource whose name contains "gpu", from requests, else limits.
pub(crate) fn gpu_count(r: Option<&ResourceRequirements>) -> i64 {
    let gpu = |m: Option<&BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.iter().find(|(k, _)| k.to_ascii_lowercase().contains("gpu")))
            .and_then(|(_, q)| Milli::parse(&q.0).ok())
            .map_or(0, |v| i64::try_from(v.ceil_units()).unwrap_or(i64::MAX))
    };
    let requests = gpu(r.and_then(|r| r.requests.as_ref()));
    let limits = gpu(r.and_then(|r| r.limits.as_ref()));
    if requests == 0 && limits > 0 { limits } else { requests }
}
