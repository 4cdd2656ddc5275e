//! The runtime's own shape and the Placement, checked only when rendering: the runtime was
//! admitted on its own, the Placement is Stowage's.

use api::trainer::{ANCESTOR_DATASET, ANCESTOR_MODEL, ANCESTOR_TRAINER, Runtime, TrainJob};
use serde_json::{Value, json};

use crate::field::{BadValue, ErrorType, FieldError, Rule};
use crate::pods::{ancestor_of, pod_spec};
use crate::{Input, Source, gojson};

use super::crd::quantity_patterns;
use super::member::{env_names, label, quantity_ranges};
use super::{MAX_PODS_PER_JOB, s};

fn on_runtime(rule: Rule, t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    FieldError::new(Source::Runtime, rule, t, path, v, d)
}

/// What the runtime CRD and webhook reject, and what Stowage cannot render from a runtime:
/// ancestor jobs with one replica and the right container, unique job names, one ML policy,
/// env injection never into `node`, OpenMPI, quantities, and counts a Job and a PodGroup take.
pub(crate) fn runtime_rules(runtime: &Runtime) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = runtime.spec();
    let jobs = &spec.template.spec.replicated_jobs;
    if jobs.is_empty() {
        errs.push(on_runtime(
            Rule::Stowage,
            ErrorType::Required,
            "spec.template.spec.replicatedJobs",
            BadValue::Omit,
            "a runtime needs at least one replicated job",
        ));
    }
    for (i, j) in jobs.iter().enumerate() {
        let at = |f: &str| format!("spec.template.spec.replicatedJobs[{i}]{f}");
        if jobs[..i].iter().any(|o| o.name == j.name) {
            errs.push(on_runtime(
                Rule::Crd,
                ErrorType::Duplicate,
                at(""),
                BadValue::Json(gojson::to_string(&json!({"name": j.name}), gojson::Ty::Any)),
                "",
            ));
        }
        if let Some(a @ (ANCESTOR_TRAINER | ANCESTOR_DATASET | ANCESTOR_MODEL)) = ancestor_of(j) {
            let container = if a == ANCESTOR_TRAINER { "node" } else { a };
            let replicas = j.replicas.unwrap_or(1);
            if replicas != 1 {
                errs.push(on_runtime(
                    Rule::Webhook,
                    ErrorType::Invalid,
                    at(".replicas"),
                    BadValue::Int(replicas.into()),
                    "always must be 1",
                ));
            }
            let pod = pod_spec(j);
            if !pod.into_iter().flat_map(|p| &p.containers).any(|c| c.name == container) {
                let containers =
                    pod.map(|p| serde_json::to_value(&p.containers).unwrap_or_default()).unwrap_or(Value::Null);
                errs.push(on_runtime(
                    Rule::Webhook,
                    ErrorType::Invalid,
                    at(".template.spec.template.spec.containers"),
                    BadValue::Json(gojson::to_string(&containers, gojson::Ty::Any)),
                    format!("must contain the required container for the ancestor: {a}"),
                ));
            }
        }
        if j.replicas.is_some_and(|r| r < 0) {
            errs.push(on_runtime(
                Rule::Stowage,
                ErrorType::Invalid,
                at(".replicas"),
                BadValue::Int(j.replicas.unwrap_or(0).into()),
                "must not be negative",
            ));
        }
        if let Some(p) = j.template.spec.as_ref().and_then(|s| s.parallelism)
            && !(0..=MAX_PODS_PER_JOB).contains(&p)
        {
            errs.push(on_runtime(
                Rule::Stowage,
                ErrorType::Invalid,
                at(".template.spec.parallelism"),
                BadValue::Int(p.into()),
                format!("must be between 0 and {MAX_PODS_PER_JOB}, the most pods Kubernetes allows an Indexed Job"),
            ));
        }
        let pod = pod_spec(j);
        let lists = [
            ("containers", pod.map(|p| p.containers.as_slice()).unwrap_or(&[])),
            ("initContainers", pod.and_then(|p| p.init_containers.as_deref()).unwrap_or(&[])),
        ];
        for (field, containers) in lists {
            for (k, c) in containers.iter().enumerate() {
                if let Some(r) = &c.resources {
                    let path = at(&format!(".template.spec.template.spec.{field}[{k}].resources"));
                    quantity_patterns(r, &path, &mut |e| errs.push(e), Source::Runtime);
                    quantity_ranges(r, &path, Source::Runtime, &mut errs);
                }
                let path = at(&format!(".template.spec.template.spec.{field}[{k}].env"));
                env_names(c.env.as_deref().unwrap_or_default(), &path, Source::Runtime, &mut errs);
            }
        }
        let labelled = [
            (at(".template.metadata.labels"), j.template.metadata.as_ref()),
            (
                at(".template.spec.template.metadata.labels"),
                j.template.spec.as_ref().and_then(|s| s.template.metadata.as_ref()),
            ),
        ];
        for (path, meta) in labelled {
            for (k, v) in meta.and_then(|m| m.labels.as_ref()).into_iter().flatten() {
                label(Source::Runtime, Rule::Stowage, &path, k, Some(v), &mut errs);
            }
        }
    }
    if let Some(policy) = &spec.ml_policy {
        let set = [
            policy.torch.is_some(),
            policy.mpi.is_some(),
            policy.jax.is_some(),
            policy.xgboost.is_some(),
            policy.flux.is_some(),
        ];
        if set.iter().filter(|x| **x).count() > 1 {
            errs.push(on_runtime(
                Rule::Crd,
                ErrorType::Invalid,
                "spec.mlPolicy",
                BadValue::Omit,
                "Only one of the policy can be configured",
            ));
        }
        if let Some(n) = policy.num_nodes
            && !(1..=MAX_PODS_PER_JOB).contains(&n)
        {
            errs.push(on_runtime(
                Rule::Stowage,
                ErrorType::Invalid,
                "spec.mlPolicy.numNodes",
                BadValue::Int(n.into()),
                format!("must be between 1 and {MAX_PODS_PER_JOB}"),
            ));
        }
        for (t, target) in policy.torch.iter().flat_map(|t| &t.env_injection).flat_map(|e| &e.targets).enumerate() {
            if target.container_names.iter().any(|c| c == "node") {
                errs.push(on_runtime(
                    Rule::Crd,
                    ErrorType::Invalid,
                    format!("spec.mlPolicy.torch.envInjection.targets[{t}].containerNames"),
                    BadValue::Omit,
                    "containerNames must not include the main node container because PET_* envs are always injected into it",
                ));
            }
        }
        if let Some(m) = policy.mpi.as_ref().and_then(|m| m.mpi_implementation.as_deref()) {
            if m.is_empty() {
                errs.push(on_runtime(
                    Rule::Stowage,
                    ErrorType::Invalid,
                    "spec.mlPolicy.mpi.mpiImplementation",
                    s(m),
                    "only OpenMPI is implemented (Trainer fails to render an empty one)",
                ));
            } else if m != "OpenMPI" {
                errs.push(on_runtime(
                    Rule::Crd,
                    ErrorType::NotSupported,
                    "spec.mlPolicy.mpi.mpiImplementation",
                    s(m),
                    "supported values: \"OpenMPI\", \"\"",
                ));
            }
        }
    }
    errs
}

/// The gang's pod count must fit a PodGroup's `minMember` (an int32). Each job's count is at most
/// the largest of numNodes and its parallelism (both bounded above), so only `replicas` can
/// overflow it.
pub(super) fn gang_size(runtime: &Runtime, job: &TrainJob, errs: &mut Vec<FieldError>) {
    let spec = runtime.spec();
    let nodes =
        [job.spec.trainer.as_ref().and_then(|t| t.num_nodes), spec.ml_policy.as_ref().and_then(|p| p.num_nodes)];
    let mut total = 0i64;
    for (i, j) in spec.template.spec.replicated_jobs.iter().enumerate() {
        let parallelism = j.template.spec.as_ref().and_then(|s| s.parallelism);
        let count = nodes.into_iter().chain([parallelism]).flatten().max().unwrap_or(1).max(1);
        let replicas = if ancestor_of(j).is_some() { 1 } else { j.replicas.unwrap_or(1) };
        total += i64::from(replicas) * i64::from(count);
        if total > i64::from(i32::MAX) {
            errs.push(on_runtime(
                Rule::Stowage,
                ErrorType::Invalid,
                format!("spec.template.spec.replicatedJobs[{i}].replicas"),
                BadValue::Int(replicas.into()),
                format!("makes the gang more than {} pods, the most a PodGroup's minMember holds", i32::MAX),
            ));
            return;
        }
    }
}

/// The Placement names only pod sets the runtime has, with a fencing epoch that is not negative.
pub(crate) fn placement_rules(input: &Input<'_>) -> Vec<FieldError> {
    let Some(p) = input.placement else { return Vec::new() };
    let mut errs = Vec::new();
    let jobs = &input.runtime.spec().template.spec.replicated_jobs;
    for (i, ps) in p.spec.pod_sets.iter().enumerate() {
        if !jobs.iter().any(|j| j.name == ps.name) {
            errs.push(FieldError::new(
                Source::Placement,
                Rule::Stowage,
                ErrorType::NotFound,
                format!("spec.podSets[{i}].name"),
                s(&ps.name),
                "the runtime has no replicated job of this name",
            ));
        }
    }
    if p.spec.epoch < 0 {
        errs.push(FieldError::new(
            Source::Placement,
            Rule::Stowage,
            ErrorType::Invalid,
            "spec.epoch",
            BadValue::Int(p.spec.epoch),
            "must not be negative",
        ));
    }
    errs
}
