//! What Stowage refuses although Trainer admits it: a queue charge moved while running, counts
//! an Indexed Job or a PodGroup cannot take, quantities Kubernetes cannot account.

use api::trainer::{self, ANCESTOR_TRAINER, Runtime, TrainJob};

use crate::Source;
use crate::field::{BadValue, ErrorType, FieldError};
use crate::pods::ancestor_of;

use super::member::{member_rules, patch_labels, quantity_ranges};
use super::patch_shape::{PATCH_SPEC, check_shape};
use super::{MAX_PODS_PER_JOB, own};

/// The queue labels a TrainJob is charged by (Stowage's, then Kueue's), as Kueue guards its own:
/// fixed while the job is not suspended, so a running job cannot move its quota charge to
/// another queue, or to none (Kueue's `validateUpdateForQueueName`). Suspend, relabel, resume.
pub(crate) fn queue_moves(job: &TrainJob, old: Option<&TrainJob>) -> Vec<FieldError> {
    let Some(old) = old else { return Vec::new() };
    if job.spec.suspend == Some(true) {
        return Vec::new();
    }
    let label = |tj: &TrainJob, key: &str| tj.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned();
    [api::stowage::QUEUE_LABEL, api::kueue::QUEUE_NAME_LABEL]
        .into_iter()
        .filter(|key| label(job, key) != label(old, key))
        .map(|key| {
            own(
                ErrorType::Invalid,
                format!("metadata.labels[{key}]"),
                label(job, key).map_or(BadValue::Omit, BadValue::Str),
                "field is immutable while the TrainJob is not suspended (it would move its quota charge); suspend it, change the queue, then resume it",
            )
        })
        .collect()
}

/// What Stowage rejects although Trainer admits it: counts an Indexed Job or a PodGroup cannot
/// take, a `spec.trainer` the runtime has no job for, quantities Kubernetes cannot account, and
/// runtime patches the API server would silently change (fields the CRD does not declare, nulls).
pub(crate) fn stowage_rules(job: &TrainJob, runtime: &Runtime) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rspec = runtime.spec();
    if let Some(t) = &job.spec.trainer {
        if let Some(n) = t.num_nodes {
            if n < 1 {
                errs.push(own(
                    ErrorType::Invalid,
                    "spec.trainer.numNodes",
                    BadValue::Int(n.into()),
                    "must be at least 1",
                ));
            } else if n > MAX_PODS_PER_JOB {
                errs.push(own(
                    ErrorType::Invalid,
                    "spec.trainer.numNodes",
                    BadValue::Int(n.into()),
                    format!("must be at most {MAX_PODS_PER_JOB}, the most pods Kubernetes allows an Indexed Job"),
                ));
            }
        }
        let flux = rspec.ml_policy.as_ref().is_some_and(|p| p.flux.is_some());
        if let Some(n) = t.num_proc_per_node
            && n < 1
            && !flux
        {
            errs.push(own(
                ErrorType::Invalid,
                "spec.trainer.numProcPerNode",
                BadValue::Int(n.into()),
                "must be at least 1",
            ));
        }
        if !rspec.template.spec.replicated_jobs.iter().any(|j| ancestor_of(j) == Some(ANCESTOR_TRAINER)) {
            errs.push(own(
                ErrorType::Forbidden,
                "spec.trainer",
                BadValue::Omit,
                format!(
                    "runtime {} has no replicated job labelled {}={ANCESTOR_TRAINER} to apply it to",
                    runtime.metadata().name.as_deref().unwrap_or_default(),
                    trainer::ANCESTOR_LABEL
                ),
            ));
        }
        if let Some(r) = &t.resources_per_node {
            quantity_ranges(r, "spec.trainer.resourcesPerNode", Source::TrainJob, &mut errs);
        }
    }
    for (i, p) in job.spec.runtime_patches.iter().enumerate() {
        let at = format!("spec.runtimePatches[{i}]");
        for k in p.extra.keys() {
            errs.push(own(
                ErrorType::Forbidden,
                format!("{at}.{k}"),
                BadValue::Omit,
                "not a field of a runtime patch (manager, time, trainingRuntimeSpec)",
            ));
        }
        if let Some(body) = &p.training_runtime_spec {
            check_shape(body, PATCH_SPEC, &format!("{at}.trainingRuntimeSpec"), &mut errs);
            patch_labels(body, &format!("{at}.trainingRuntimeSpec"), &mut errs);
        }
    }
    member_rules(job, runtime, &mut errs);
    errs
}
