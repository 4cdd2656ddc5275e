//! Rejects what Trainer's CRD validation rules and webhooks reject, before anything is built,
//! with the field path named: the TrainJob's, the runtime's or the Placement's.

use api::trainer::{
    self, ANCESTOR_DATASET, ANCESTOR_MODEL, ANCESTOR_TRAINER, DEFAULT_MANAGED_BY, KUEUE_MULTIKUEUE_MANAGED_BY,
};
use k8s_openapi::api::core::v1::ResourceRequirements;

use super::quantity::Milli;
use super::steps::{ancestor_of, job_containers};
use super::{Draft, Input, RenderError, Source};

const MAX_RUNTIME_PATCHES: usize = 16;
const RESERVED_TORCH: [&str; 5] =
    ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"];
const RESERVED_MPI: [&str; 4] = [
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
];
const PROTECTED_CONTAINERS: [&str; 3] = ["node", "dataset-initializer", "model-initializer"];

fn tj(path: impl Into<String>, problem: impl Into<String>) -> RenderError {
    RenderError::new(Source::TrainJob, path, problem)
}

fn rt(path: impl Into<String>, problem: impl Into<String>) -> RenderError {
    RenderError::new(Source::Runtime, path, problem)
}

/// RFC 1035 label: what a TrainJob name must be (CRD CEL rule), at most 63 characters.
pub(crate) fn rfc1035(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

pub(crate) fn check(input: &Input<'_>, _draft: &mut Draft) -> Result<(), RenderError> {
    let job = input.trainjob;
    let spec = &job.spec;
    let name = job.metadata.name.as_deref().unwrap_or("");
    if !rfc1035(name) {
        return Err(tj(
            "metadata.name",
            "must be an RFC 1035 label (lower-case letters, digits and '-', starting with a letter) of at most 63 characters",
        ));
    }
    check_runtime_ref(input)?;
    if let Some(m) = &spec.managed_by
        && m != DEFAULT_MANAGED_BY
        && m != KUEUE_MULTIKUEUE_MANAGED_BY
    {
        return Err(tj("spec.managedBy", format!("must be {DEFAULT_MANAGED_BY} or {KUEUE_MULTIKUEUE_MANAGED_BY}")));
    }
    if spec.active_deadline_seconds.is_some_and(|d| d < 1) {
        return Err(tj("spec.activeDeadlineSeconds", "must be at least 1"));
    }
    let runtime = input.runtime.spec();
    let jobs = &runtime.template.spec.replicated_jobs;
    check_runtime(input)?;
    if let Some(t) = &spec.trainer {
        if t.num_nodes.is_some_and(|n| n < 1) {
            return Err(tj("spec.trainer.numNodes", "must be at least 1"));
        }
        if t.num_proc_per_node.is_some_and(|n| n < 1) {
            return Err(tj("spec.trainer.numProcPerNode", "must be at least 1"));
        }
        if !jobs.iter().any(|j| ancestor_of(j) == Some(ANCESTOR_TRAINER)) {
            return Err(tj(
                "spec.trainer",
                format!(
                    "runtime {} has no replicated job labelled {}={ANCESTOR_TRAINER} to apply it to",
                    runtime_name(input),
                    trainer::ANCESTOR_LABEL
                ),
            ));
        }
        if let Some(r) = &t.resources_per_node {
            check_resources(r, "spec.trainer.resourcesPerNode", Source::TrainJob)?;
        }
        let policy = runtime.ml_policy.as_ref();
        for (i, e) in t.env.iter().enumerate() {
            let reserved = (policy.is_some_and(|p| p.torch.is_some()) && RESERVED_TORCH.contains(&e.name.as_str()))
                || (policy.is_some_and(|p| p.mpi.is_some()) && RESERVED_MPI.contains(&e.name.as_str()))
                || (policy.is_some_and(|p| p.xgboost.is_some()) && e.name.starts_with("DMLC_"));
            if reserved {
                return Err(tj(
                    format!("spec.trainer.env[{i}].name"),
                    format!("{} is set by the runtime's ML policy and cannot be overridden", e.name),
                ));
            }
        }
    }
    if let Some(init) = &spec.initializer {
        for (section, ancestor, source) in
            [("dataset", ANCESTOR_DATASET, &init.dataset), ("model", ANCESTOR_MODEL, &init.model)]
        {
            let Some(source) = source else { continue };
            let path = format!("spec.initializer.{section}");
            if let Some(uri) = &source.storage_uri
                && !uri.is_empty()
                && !storage_uri(uri)
            {
                return Err(tj(
                    format!("{path}.storageUri"),
                    "must be a URI with a scheme, like hf://org/name or s3://bucket/key",
                ));
            }
            let has = jobs.iter().any(|j| {
                j.name == ancestor
                    && job_containers(j).any(|c| {
                        c.name == ancestor && c.volume_mounts.iter().flatten().any(|m| m.name == "initializer")
                    })
            });
            if !has {
                return Err(tj(
                    path,
                    format!(
                        "runtime {} has no replicated job {ancestor} with a container {ancestor} mounting volume \"initializer\"",
                        runtime_name(input)
                    ),
                ));
            }
        }
    }
    check_patches(input)?;
    if let Some(p) = input.placement {
        for (i, ps) in p.spec.pod_sets.iter().enumerate() {
            if !jobs.iter().any(|j| j.name == ps.name) {
                return Err(RenderError::new(
                    Source::Placement,
                    format!("spec.podSets[{i}].name"),
                    format!("runtime has no replicated job {:?}", ps.name),
                ));
            }
        }
        if p.spec.epoch < 0 {
            return Err(RenderError::new(Source::Placement, "spec.epoch", "must not be negative"));
        }
    }
    Ok(())
}

fn runtime_name(input: &Input<'_>) -> String {
    input.runtime.metadata().name.clone().unwrap_or_default()
}

fn storage_uri(uri: &str) -> bool {
    let Some((scheme, rest)) = uri.split_once("://") else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
        && !rest.is_empty()
}

fn check_runtime_ref(input: &Input<'_>) -> Result<(), RenderError> {
    let r = &input.trainjob.spec.runtime_ref;
    if r.name.is_empty() {
        return Err(tj("spec.runtimeRef.name", "must not be empty"));
    }
    if r.api_group_or_default() != trainer::GROUP {
        return Err(tj("spec.runtimeRef.apiGroup", format!("must be {}", trainer::GROUP)));
    }
    let kind = r.kind_or_default();
    if kind != "TrainingRuntime" && kind != "ClusterTrainingRuntime" {
        return Err(tj(
            "spec.runtimeRef.kind",
            format!(
                "unsupported runtime: {kind}.{} (expected TrainingRuntime or ClusterTrainingRuntime)",
                trainer::GROUP
            ),
        ));
    }
    if kind != input.runtime.kind() {
        return Err(tj(
            "spec.runtimeRef.kind",
            format!("is {kind} but the runtime given is a {}", input.runtime.kind()),
        ));
    }
    if r.name != runtime_name(input) {
        return Err(tj(
            "spec.runtimeRef.name",
            format!("is {:?} but the runtime given is {:?}", r.name, runtime_name(input)),
        ));
    }
    Ok(())
}

fn check_resources(r: &ResourceRequirements, path: &str, source: Source) -> Result<(), RenderError> {
    for (part, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (res, q) in map.iter().flatten() {
            if let Err(e) = Milli::parse(&q.0) {
                return Err(RenderError::new(source, format!("{path}.{part}.{res}"), e.to_string()));
            }
        }
    }
    Ok(())
}

/// What Trainer's runtime webhook checks, plus quantities that must parse.
fn check_runtime(input: &Input<'_>) -> Result<(), RenderError> {
    let spec = input.runtime.spec();
    let jobs = &spec.template.spec.replicated_jobs;
    if jobs.is_empty() {
        return Err(rt("spec.template.spec.replicatedJobs", "must list at least one replicated job"));
    }
    for (i, j) in jobs.iter().enumerate() {
        let at = |f: &str| format!("spec.template.spec.replicatedJobs[{i}].{f}");
        if jobs[..i].iter().any(|o| o.name == j.name) {
            return Err(rt(at("name"), format!("{:?} is used twice", j.name)));
        }
        if let Some(a) = ancestor_of(j) {
            let container = match a {
                ANCESTOR_TRAINER => "node",
                ANCESTOR_DATASET | ANCESTOR_MODEL => a,
                other => {
                    return Err(rt(
                        at("template.metadata.labels"),
                        format!("unknown {} {other:?}", trainer::ANCESTOR_LABEL),
                    ));
                }
            };
            if j.replicas.is_some_and(|r| r != 1) {
                return Err(rt(
                    at("replicas"),
                    format!("must be 1 for a job labelled {}={a}", trainer::ANCESTOR_LABEL),
                ));
            }
            if !job_containers(j).any(|c| c.name == container) {
                return Err(rt(
                    at("template.spec.template.spec.containers"),
                    format!("must have a container named {container}"),
                ));
            }
        }
        for (k, c) in job_containers(j).enumerate() {
            if let Some(r) = &c.resources {
                check_resources(
                    r,
                    &at(&format!("template.spec.template.spec.containers[{k}].resources")),
                    Source::Runtime,
                )?;
            }
        }
    }
    if let Some(mpi) = spec.ml_policy.as_ref().and_then(|p| p.mpi.as_ref()) {
        let nodes = input
            .trainjob
            .spec
            .trainer
            .as_ref()
            .and_then(|t| t.num_nodes)
            .or(spec.ml_policy.as_ref().and_then(|p| p.num_nodes))
            .unwrap_or(1);
        if mpi.run_launcher_as_node == Some(true)
            && nodes >= 2
            && !(jobs.iter().any(|j| j.name == "launcher") && jobs.iter().any(|j| j.name == "node"))
        {
            return Err(rt(
                "spec.template.spec.replicatedJobs",
                "an MPI runtime with runLauncherAsNode and 2 or more nodes needs both a launcher and a node job",
            ));
        }
        if mpi.mpi_implementation.as_deref().is_some_and(|m| !m.is_empty() && m != "OpenMPI") {
            return Err(rt("spec.mlPolicy.mpi.mpiImplementation", "only OpenMPI is implemented"));
        }
    }
    Ok(())
}

/// `runtimePatches`: at most 16, managers are domain-prefixed paths, patched jobs and
/// containers exist in the runtime, and no env goes into the protected containers.
fn check_patches(input: &Input<'_>) -> Result<(), RenderError> {
    let patches = &input.trainjob.spec.runtime_patches;
    if patches.len() > MAX_RUNTIME_PATCHES {
        return Err(tj("spec.runtimePatches", format!("must have at most {MAX_RUNTIME_PATCHES} items")));
    }
    let jobs = &input.runtime.spec().template.spec.replicated_jobs;
    for (i, p) in patches.iter().enumerate() {
        let at = |f: &str| format!("spec.runtimePatches[{i}].{f}");
        if !domain_prefixed(&p.manager) {
            return Err(tj(at("manager"), "must be a domain-prefixed path, like example.com/my-controller"));
        }
        if patches[..i].iter().any(|o| o.manager == p.manager) {
            return Err(tj(at("manager"), format!("{:?} appears twice", p.manager)));
        }
        let Some(body) = &p.training_runtime_spec else { continue };
        let rjobs = body.pointer("/template/spec/replicatedJobs").and_then(|v| v.as_array());
        for (k, rj) in rjobs.into_iter().flatten().enumerate() {
            let jat = format!("spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{k}]");
            let name = rj.get("name").and_then(|n| n.as_str()).unwrap_or("");
            let Some(job) = jobs.iter().find(|j| j.name == name) else {
                return Err(tj(format!("{jat}.name"), format!("runtime has no replicated job {name:?}")));
            };
            let pod = rj.pointer("/template/spec/template/spec");
            for field in ["containers", "initContainers"] {
                for (c, container) in
                    pod.and_then(|p| p.get(field)).and_then(|v| v.as_array()).into_iter().flatten().enumerate()
                {
                    let cname = container.get("name").and_then(|n| n.as_str()).unwrap_or("");
                    let cat = format!("{jat}.template.spec.template.spec.{field}[{c}]");
                    if !job_containers(job).any(|x| x.name == cname) {
                        return Err(tj(
                            format!("{cat}.name"),
                            format!("replicated job {name} has no container {cname:?}"),
                        ));
                    }
                    if container.get("env").is_some() && PROTECTED_CONTAINERS.contains(&cname) {
                        return Err(tj(
                            format!("{cat}.env"),
                            format!(
                                "env cannot be patched into container {cname}: use spec.trainer.env or spec.initializer"
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn domain_prefixed(manager: &str) -> bool {
    let Some((domain, path)) = manager.split_once('/') else { return false };
    domain.contains('.')
        && domain
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        && !path.is_empty()
}
