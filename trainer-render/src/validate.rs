//! What Trainer v2.3.0 rejects, with Trainer's own field paths, error types and messages, plus
//! what Stowage rejects on top; each error says which of the three answers it ([`Rule`]):
//!
//! - [`crd_rules`]: the TrainJob CRD's OpenAPI schema and CEL rules and the API server's
//!   object-metadata rules (`manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml`). The API
//!   server answers these with 422 before any webhook runs.
//! - [`resolve_runtime_ref`] and [`webhook_rules`]: Trainer's TrainJob validating webhook
//!   (`pkg/webhooks/trainjob_webhook.go` → `ValidateObjects` in `pkg/runtime/core/*.go` → each
//!   plugin's `Validate`: torch, torchtune, MPI, XGBoost, Flux, Volcano, JobSet), 403.
//! - [`stowage_rules`]: Stowage's own, for TrainJobs Trainer admits but that could not run as
//!   rendered (a JobSet or Indexed Job the API server would refuse, a quantity Kubernetes cannot
//!   account, a runtime patch field the API server would drop).
//!
//! The runtime's own shape ([`runtime_rules`]) and the Placement ([`placement_rules`]) are checked
//! only when rendering: the runtime was admitted on its own, the Placement is Stowage's.

use api::jobset::ReplicatedJob;
use api::podgroup::VOLCANO_QUEUE_ANNOTATION;
use api::trainer::{
    self, ANCESTOR_DATASET, ANCESTOR_MODEL, ANCESTOR_TRAINER, DEFAULT_MANAGED_BY, KUEUE_MULTIKUEUE_MANAGED_BY, Runtime,
    TrainJob,
};
use k8s_openapi::api::core::v1::ResourceRequirements;
use serde_json::{Value, json};

use super::field::{BadValue, ErrorType, FieldError, Path, Rule};
use super::pods::{ancestor_of, gpu_count, job_containers, node_resources, pod_spec};
use super::torchtune::{self, NProc};
use super::{Draft, Input, RenderError, Source, gojson};
use api::quantity::{BadQuantity, Milli};
use kube_conventions::names::{DNS1123_SUBDOMAIN_MESSAGE, is_dns1123_subdomain};

const MAX_RUNTIME_PATCHES: usize = 16;
/// Pods per replicated job: the rendered Jobs are Indexed, and Kubernetes rejects an Indexed Job
/// whose `parallelism` is above this.
const MAX_PODS_PER_JOB: i32 = 100_000;
/// Digits a quantity may have: beyond 20, its value is far past anything schedulable (and past
/// what milli-unit arithmetic on it stays exact for).
const MAX_QUANTITY_DIGITS: usize = 20;
const RESERVED_TORCH: [&str; 5] =
    ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"];
const RESERVED_MPI: [&str; 4] = [
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
];
const RESERVED_XGBOOST: [&str; 4] = ["DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"];
const PROTECTED_CONTAINERS: [&str; 3] = ["node", "dataset-initializer", "model-initializer"];
const FLUX_INSTALLER: &str = "flux-installer";
/// The CRD's pattern for a resource quantity.
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
const STORAGE_URI_MESSAGE: &str = "storageUri may be empty, or it must be a valid URI (scheme://...)";
const MANAGED_BY_MESSAGE: &str =
    "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set";
const IMMUTABLE: &str = "field is immutable";

/// The TrainJob fields the CRD and the API server check (422), for a caller that must tell them
/// from the webhook's (403). `[]` is any index or key.
pub const CRD_RULES: [&str; 23] = [
    "metadata.name: an RFC 1123 subdomain (API server), an RFC 1035 label of at most 63 characters (CEL on the root, reported at <nil>)",
    "spec.runtimeRef.name: at least 1, at most 253 characters",
    "spec.runtimeRef.apiGroup, spec.runtimeRef.kind: at most 253 characters",
    "spec.runtimeRef: immutable (CEL self == oldSelf)",
    "spec.initializer: immutable",
    "spec.initializer.dataset.storageUri, spec.initializer.model.storageUri: '' or scheme://... (CEL), at most 2048 characters",
    "spec.initializer.dataset.env, spec.initializer.model.env: at most 128 items",
    "spec.trainer: immutable",
    "spec.trainer.image: at most 500 characters",
    "spec.trainer.command, spec.trainer.args, spec.trainer.env: at most 128 items",
    "spec.trainer.resourcesPerNode.limits[], spec.trainer.resourcesPerNode.requests[]: the quantity pattern",
    "spec.runtimePatches: at most 16 items, unique by manager",
    "spec.runtimePatches[].manager: at least 1, at most 253 characters",
    "spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].name: required",
    "spec.runtimePatches[]...template.spec.template.spec.containers[].name, initContainers[].name: required",
    "spec.runtimePatches[]...template.spec.template.spec.serviceAccountName: immutable",
    "spec.runtimePatches[]...template.spec.template.spec.volumes: immutable",
    "spec.runtimePatches[]...template.spec.template.spec.initContainers, containers: immutable",
    "spec.runtimePatches[]...template.spec.template.spec.imagePullSecrets, securityContext: immutable",
    "spec.runtimePatches[]...template.spec.template.spec.terminationGracePeriodSeconds: immutable",
    "spec.activeDeadlineSeconds: at least 1, immutable",
    "spec.managedBy: trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue (CEL), at most 253 characters, immutable",
    "an update is checked against the old object: immutable fields compare only when both have them, unchanged values are not re-checked (CEL ratcheting)",
];

fn err(
    object: Source,
    rule: Rule,
    t: ErrorType,
    path: impl Into<String>,
    v: BadValue,
    d: impl Into<String>,
) -> FieldError {
    FieldError::new(object, rule, t, path, v, d)
}

fn crd(t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    err(Source::TrainJob, Rule::Crd, t, path, v, d)
}

fn hook(t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    err(Source::TrainJob, Rule::Webhook, t, path, v, d)
}

fn own(t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    err(Source::TrainJob, Rule::Stowage, t, path, v, d)
}

fn on_runtime(rule: Rule, t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    err(Source::Runtime, rule, t, path, v, d)
}

fn s(v: &str) -> BadValue {
    BadValue::Str(v.to_string())
}

/// The first error, as the renderer reports one.
fn first(errors: Vec<FieldError>) -> Result<(), RenderError> {
    match errors.into_iter().next() {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Go's `%v` of a `[]string`.
fn go_list(items: &[&str]) -> String {
    format!("[{}]", items.join(" "))
}

/// The TrainJob's `runtimeRef` after the CRD defaults, as Go prints it.
fn runtime_ref_value(job: &TrainJob) -> BadValue {
    let r = &job.spec.runtime_ref;
    let v = json!({"name": r.name, "apiGroup": r.api_group_or_default(), "kind": r.kind_or_default()});
    BadValue::Json(gojson::to_string(&v, gojson::RUNTIME_REF))
}

fn json_value(v: impl serde::Serialize, ty: gojson::Ty) -> BadValue {
    BadValue::Json(gojson::to_string(&serde_json::to_value(v).unwrap_or_default(), ty))
}

// ---------------------------------------------------------------------------------------------
// Render steps.

/// Render step, before the runtime patches are applied: the CRD's rules, the runtime reference,
/// Stowage's own TrainJob checks, the runtime's shape and the Placement.
pub(crate) fn check(input: &Input<'_>, _draft: &mut Draft) -> Result<(), RenderError> {
    let job = input.trainjob;
    first(crd_rules(job, None))?;
    match resolve_runtime_ref(job, Some(input.runtime)) {
        Ok(()) => {}
        Err(RefProblem::Unsupported(key)) => {
            return Err(RenderError::new(Source::TrainJob, "spec.runtimeRef", format!("unsupported runtime: {key}")));
        }
        Err(RefProblem::NotFound(e)) => return Err(e.into()),
    }
    first(runtime_rules(input.runtime))?;
    first(stowage_rules(job, input.runtime))?;
    let mut gang = Vec::new();
    gang_size(input.runtime, job, &mut gang);
    first(gang)?;
    first(placement_rules(input))
}

/// Render step, once the runtime patches are applied: the webhook's plugin checks, which Trainer
/// runs against the patched template.
pub(crate) fn check_patched(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    first(webhook_rules(input.trainjob, input.runtime, draft, None))
}

// ---------------------------------------------------------------------------------------------
// The CRD and the API server (422).

/// `metadata.name` on create: the API server's DNS-1123 subdomain rule, then the CRD's two CEL
/// rules on the object root (whose path prints as `<nil>`).
fn object_name(job: &TrainJob, errs: &mut Vec<FieldError>) {
    let name = job.metadata.name.as_deref().unwrap_or("");
    if name.is_empty() {
        if job.metadata.generate_name.as_deref().unwrap_or("").is_empty() {
            errs.push(crd(ErrorType::Required, "metadata.name", BadValue::Omit, "name or generateName is required"));
        }
        return;
    }
    if name.len() > 253 {
        errs.push(crd(ErrorType::Invalid, "metadata.name", s(name), "must be no more than 253 characters"));
    }
    if !is_dns1123_subdomain(name) {
        errs.push(crd(ErrorType::Invalid, "metadata.name", s(name), DNS1123_SUBDOMAIN_MESSAGE));
    }
    if !rfc1035_pattern(name) {
        errs.push(crd(
            ErrorType::Invalid,
            "<nil>",
            BadValue::Omit,
            "metadata.name must match RFC 1035 DNS label format",
        ));
    }
    if name.chars().count() > 63 {
        errs.push(crd(ErrorType::Invalid, "<nil>", BadValue::Omit, "metadata.name must be no more than 63 characters"));
    }
}

/// `^[a-z]([-a-z0-9]*[a-z0-9])?$`.
fn rfc1035_pattern(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

fn min_length(path: &str, v: &str, min: usize, errs: &mut Vec<FieldError>) {
    if v.chars().count() < min {
        errs.push(crd(ErrorType::Invalid, path, s(v), format!("{path} in body should be at least {min} chars long")));
    }
}

fn max_length(path: &str, v: &str, max: usize, errs: &mut Vec<FieldError>) {
    if v.chars().count() > max {
        errs.push(crd(ErrorType::TooLong, path, BadValue::Omit, format!("may not be more than {max} bytes")));
    }
}

fn max_items(path: &str, n: usize, max: usize, errs: &mut Vec<FieldError>) {
    if n > max {
        let items = if max == 1 { "item" } else { "items" };
        errs.push(crd(
            ErrorType::TooMany,
            path,
            BadValue::Int(i64::try_from(n).unwrap_or(i64::MAX)),
            format!("must have at most {max} {items}"),
        ));
    }
}

/// What the TrainJob CRD and the API server reject (422). With `old`, the update rules: immutable
/// fields (compared only when both objects have them) and CEL ratcheting (an unchanged value is
/// not checked again).
pub fn crd_rules(job: &TrainJob, old: Option<&TrainJob>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &job.spec;
    if old.is_none() {
        object_name(job, &mut errs);
    }
    let r = &spec.runtime_ref;
    min_length("spec.runtimeRef.name", &r.name, 1, &mut errs);
    max_length("spec.runtimeRef.name", &r.name, 253, &mut errs);
    for (field, v) in [("apiGroup", &r.api_group), ("kind", &r.kind)] {
        if let Some(v) = v {
            max_length(&format!("spec.runtimeRef.{field}"), v, 253, &mut errs);
        }
    }
    if let Some(init) = &spec.initializer {
        let old_init = old.and_then(|o| o.spec.initializer.as_ref());
        for (section, source, old_source) in [
            ("dataset", &init.dataset, old_init.and_then(|i| i.dataset.as_ref())),
            ("model", &init.model, old_init.and_then(|i| i.model.as_ref())),
        ] {
            let Some(source) = source else { continue };
            let at = format!("spec.initializer.{section}");
            if let Some(uri) = &source.storage_uri {
                max_length(&format!("{at}.storageUri"), uri, 2048, &mut errs);
                let unchanged = old_source.is_some_and(|o| o.storage_uri.as_ref() == Some(uri));
                if !uri.is_empty() && !storage_uri(uri) && !unchanged {
                    errs.push(crd(ErrorType::Invalid, format!("{at}.storageUri"), s(uri), STORAGE_URI_MESSAGE));
                }
            }
            max_items(&format!("{at}.env"), source.env.len(), 128, &mut errs);
        }
    }
    if let Some(t) = &spec.trainer {
        if let Some(image) = &t.image {
            max_length("spec.trainer.image", image, 500, &mut errs);
        }
        max_items("spec.trainer.command", t.command.as_ref().map_or(0, Vec::len), 128, &mut errs);
        max_items("spec.trainer.args", t.args.as_ref().map_or(0, Vec::len), 128, &mut errs);
        max_items("spec.trainer.env", t.env.len(), 128, &mut errs);
        if let Some(res) = &t.resources_per_node {
            quantity_patterns(res, "spec.trainer.resourcesPerNode", &mut |e| errs.push(e), Source::TrainJob);
        }
    }
    let patches = &spec.runtime_patches;
    max_items("spec.runtimePatches", patches.len(), MAX_RUNTIME_PATCHES, &mut errs);
    for (i, p) in patches.iter().enumerate() {
        let at = format!("spec.runtimePatches[{i}]");
        min_length(&format!("{at}.manager"), &p.manager, 1, &mut errs);
        max_length(&format!("{at}.manager"), &p.manager, 253, &mut errs);
        if patches[..i].iter().any(|o| o.manager == p.manager) {
            errs.push(crd(
                ErrorType::Duplicate,
                at,
                BadValue::Json(gojson::to_string(&json!({"manager": p.manager}), gojson::Ty::Any)),
                "",
            ));
        }
        patch_names(p.training_runtime_spec.as_ref(), i, &mut errs);
    }
    if let Some(d) = spec.active_deadline_seconds
        && d < 1
    {
        errs.push(crd(
            ErrorType::Invalid,
            "spec.activeDeadlineSeconds",
            BadValue::Int(d),
            "spec.activeDeadlineSeconds in body should be greater than or equal to 1",
        ));
    }
    if let Some(m) = &spec.managed_by {
        max_length("spec.managedBy", m, 253, &mut errs);
        let unchanged = old.is_some_and(|o| o.spec.managed_by.as_deref().unwrap_or(DEFAULT_MANAGED_BY) == m);
        if m != DEFAULT_MANAGED_BY && m != KUEUE_MULTIKUEUE_MANAGED_BY && !unchanged {
            errs.push(crd(ErrorType::Invalid, "spec.managedBy", s(m), MANAGED_BY_MESSAGE));
        }
    }
    if let Some(old) = old {
        immutable_fields(job, old, &mut errs);
    }
    errs
}

/// The list-map keys a runtime patch must carry: replicated job names, container names.
fn patch_names(body: Option<&Value>, i: usize, errs: &mut Vec<FieldError>) {
    let jobs = body.and_then(|b| b.pointer("/template/spec/replicatedJobs")).and_then(Value::as_array);
    for (k, rj) in jobs.into_iter().flatten().enumerate() {
        let jat = format!("spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{k}]");
        if rj.is_object() && rj.get("name").is_none() {
            errs.push(crd(ErrorType::Required, format!("{jat}.name"), BadValue::Omit, ""));
        }
        let pod = rj.pointer("/template/spec/template/spec");
        for field in ["initContainers", "containers"] {
            let list = pod.and_then(|p| p.get(field)).and_then(Value::as_array);
            for (c, container) in list.into_iter().flatten().enumerate() {
                if container.is_object() && container.get("name").is_none() {
                    errs.push(crd(
                        ErrorType::Required,
                        format!("{jat}.template.spec.template.spec.{field}[{c}].name"),
                        BadValue::Omit,
                        "",
                    ));
                }
            }
        }
    }
}

/// CEL `self == oldSelf` on the immutable fields: evaluated only where both objects have the
/// field (runtime patches and their replicated jobs correlate by their list-map keys).
fn immutable_fields(job: &TrainJob, old: &TrainJob, errs: &mut Vec<FieldError>) {
    let (new_s, old_s) = (&job.spec, &old.spec);
    let defaulted = |r: &trainer::RuntimeRef| {
        (r.name.clone(), r.api_group_or_default().to_string(), r.kind_or_default().to_string())
    };
    if defaulted(&new_s.runtime_ref) != defaulted(&old_s.runtime_ref) {
        errs.push(crd(ErrorType::Invalid, "spec.runtimeRef", BadValue::Omit, IMMUTABLE));
    }
    if let (Some(a), Some(b)) = (&new_s.initializer, &old_s.initializer)
        && a != b
    {
        errs.push(crd(ErrorType::Invalid, "spec.initializer", BadValue::Omit, IMMUTABLE));
    }
    if let (Some(a), Some(b)) = (&new_s.trainer, &old_s.trainer)
        && a != b
    {
        errs.push(crd(ErrorType::Invalid, "spec.trainer", BadValue::Omit, IMMUTABLE));
    }
    if let (Some(a), Some(b)) = (new_s.active_deadline_seconds, old_s.active_deadline_seconds)
        && a != b
    {
        errs.push(crd(ErrorType::Invalid, "spec.activeDeadlineSeconds", BadValue::Int(a), IMMUTABLE));
    }
    let managed_by = |s: &trainer::TrainJobSpec| s.managed_by.clone().unwrap_or_else(|| DEFAULT_MANAGED_BY.into());
    if managed_by(new_s) != managed_by(old_s) {
        errs.push(crd(ErrorType::Invalid, "spec.managedBy", s(&managed_by(new_s)), IMMUTABLE));
    }
    for (i, p) in new_s.runtime_patches.iter().enumerate() {
        let Some(o) = old_s.runtime_patches.iter().find(|o| o.manager == p.manager) else { continue };
        let jobs = |p: &trainer::RuntimePatch| {
            p.training_runtime_spec
                .as_ref()
                .and_then(|b| b.pointer("/template/spec/replicatedJobs"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let old_jobs = jobs(o);
        for (k, rj) in jobs(p).iter().enumerate() {
            let Some(old_rj) = old_jobs.iter().find(|x| x.get("name").is_some() && x.get("name") == rj.get("name"))
            else {
                continue;
            };
            let (Some(pod), Some(old_pod)) =
                (rj.pointer("/template/spec/template/spec"), old_rj.pointer("/template/spec/template/spec"))
            else {
                continue;
            };
            for field in [
                "serviceAccountName",
                "volumes",
                "initContainers",
                "containers",
                "imagePullSecrets",
                "securityContext",
                "terminationGracePeriodSeconds",
            ] {
                let (Some(a), Some(b)) = (pod.get(field), old_pod.get(field)) else { continue };
                if a != b {
                    let value = match a {
                        Value::String(v) => s(v),
                        Value::Number(n) => n.as_i64().map_or(BadValue::Omit, BadValue::Int),
                        _ => BadValue::Omit,
                    };
                    errs.push(crd(
                        ErrorType::Invalid,
                        format!(
                            "spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{k}].template.spec.template.spec.{field}"
                        ),
                        value,
                        IMMUTABLE,
                    ));
                }
            }
        }
    }
}

/// `self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')` without the empty case.
fn storage_uri(uri: &str) -> bool {
    let Some((scheme, rest)) = uri.split_once("://") else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
        && !rest.is_empty()
        && !rest.contains('\n')
}

/// The quantity pattern, for every limit and request: the CRD's (422) for a TrainJob, the
/// runtime CRD's for a runtime.
fn quantity_patterns(r: &ResourceRequirements, path: &str, push: &mut impl FnMut(FieldError), object: Source) {
    for (part, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (res, q) in map.iter().flatten() {
            if !quantity_syntax(&q.0) {
                let at = format!("{path}.{part}.{res}");
                let detail = format!("{at} in body should match '{QUANTITY_PATTERN}'");
                push(err(object, Rule::Crd, ErrorType::Invalid, at, s(&q.0), detail));
            }
        }
    }
}

/// The quantity pattern above, by hand.
fn quantity_syntax(q: &str) -> bool {
    let unsigned = q.strip_prefix(['+', '-']).unwrap_or(q);
    // `[0-9]+(\.[0-9]*)?|\.[0-9]+`
    let decimal = |n: &str| {
        let (int, frac) = n.split_once('.').unwrap_or((n, ""));
        let digits = |x: &str| x.bytes().all(|c| c.is_ascii_digit());
        digits(int) && digits(frac) && (!int.is_empty() || !frac.is_empty())
    };
    let split = unsigned.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(split);
    let exponent = |e: &str| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit() || c == b'.') && decimal(e)
    };
    decimal(number)
        && (matches!(
            suffix,
            "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E"
        ) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent))
}

// ---------------------------------------------------------------------------------------------
// The webhook (403).

/// Why the webhook cannot find the runtime a TrainJob names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RefProblem {
    /// `runtimeRef`'s group and kind name no runtime implementation: `unsupported runtime: <key>`.
    Unsupported(String),
    /// The runtime does not exist (or the one given is another).
    NotFound(FieldError),
}

/// `ValidateCreate`/`ValidateUpdate` and `ValidateObjects`: the runtime implementation for the
/// reference's group and kind, then the runtime itself — `runtime` is the one the caller found
/// for it (`None`: not found). A runtime that is not the one referenced counts as not found.
pub(crate) fn resolve_runtime_ref(job: &TrainJob, runtime: Option<&Runtime>) -> Result<(), RefProblem> {
    let r = &job.spec.runtime_ref;
    let (group, kind) = (r.api_group_or_default(), r.kind_or_default());
    let key = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    let cluster = format!("ClusterTrainingRuntime.{}", trainer::GROUP);
    let namespaced = format!("TrainingRuntime.{}", trainer::GROUP);
    if key != cluster && key != namespaced {
        return Err(RefProblem::Unsupported(key));
    }
    let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
    let found = runtime.is_some_and(|rt| {
        rt.kind() == kind
            && rt.metadata().name.as_deref() == Some(r.name.as_str())
            && match rt {
                Runtime::Namespaced(n) => n.metadata.namespace.as_deref().is_none_or(|ns| ns == namespace),
                Runtime::Cluster(_) => true,
            }
    });
    if found {
        return Ok(());
    }
    // The cached client's NotFound names the kind as its resource; ClusterTrainingRuntime's
    // path is spelled `spec.RuntimeRef` in Trainer (pkg/runtime/core/clustertrainingruntime.go).
    let (path, what) = if key == cluster {
        ("spec.RuntimeRef", "clusterTrainingRuntime")
    } else {
        ("spec.runtimeRef", "trainingRuntime")
    };
    Err(RefProblem::NotFound(hook(
        ErrorType::Invalid,
        path,
        runtime_ref_value(job),
        format!("{key} {:?} not found: specified {what} must be created before the TrainJob is created", r.name),
    )))
}

/// The webhook plugins' `Validate`, against the runtime with the TrainJob's patches applied
/// (`draft`, as `newRuntimeInfo` builds it), in a fixed order: the ML policy's plugin, Volcano,
/// JobSet (Trainer runs them in Go map order). Volcano's PriorityClass lookup needs the cluster
/// and is not made; the JobSet plugin's "no replicated job still active" check on a patch change
/// is the caller's, who knows the JobSet.
pub(crate) fn webhook_rules(
    job: &TrainJob,
    runtime: &Runtime,
    draft: &Draft,
    old: Option<&TrainJob>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rspec = runtime.spec();
    let jobs = &draft.spec.replicated_jobs;
    if let Some(policy) = &rspec.ml_policy {
        if let Some(torch) = &policy.torch {
            torch_rules(job, draft, torch, &mut errs);
        }
        if let Some(mpi) = &policy.mpi {
            mpi_rules(job, jobs, mpi, &mut errs);
        }
        if policy.xgboost.is_some()
            && let Some(t) = &job.spec.trainer
        {
            for (i, e) in t.env.iter().enumerate() {
                if RESERVED_XGBOOST.contains(&e.name.as_str()) {
                    errs.push(hook(
                        ErrorType::Forbidden,
                        format!("spec.trainer.env[{i}]"),
                        BadValue::Omit,
                        format!("{} is reserved for the XGBoost runtime", e.name),
                    ));
                }
            }
        }
        if let Some(flux) = &policy.flux {
            let runtime_nproc = flux.get("numProcPerNode").and_then(Value::as_i64).unwrap_or(1);
            let nproc = job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node).map_or(runtime_nproc, i64::from);
            if nproc < 1 {
                errs.push(hook(
                    ErrorType::Invalid,
                    "spec.trainer.numProcPerNode",
                    BadValue::Int(nproc),
                    "must be greater than or equal to 1 for Flux TrainJob",
                ));
            }
            for j in jobs.iter().filter(|j| j.name == "node") {
                for c in pod_spec(j).into_iter().flat_map(|p| p.init_containers.iter().flatten()) {
                    if c.name == FLUX_INSTALLER {
                        errs.push(hook(
                            ErrorType::Invalid,
                            "spec.trainer.initContainers",
                            s(&c.name),
                            "InitContainer 'flux-installer' is reserved",
                        ));
                    }
                }
            }
        }
    }
    if rspec.pod_group_policy.as_ref().is_some_and(|p| p.volcano.is_some())
        && draft.annotations.get(VOLCANO_QUEUE_ANNOTATION).is_some_and(String::is_empty)
    {
        errs.push(hook(
            ErrorType::Invalid,
            Path::new("spec").child("annotations").key(VOLCANO_QUEUE_ANNOTATION),
            s(""),
            "Volcano queue name must not be empty",
        ));
    }
    jobset_rules(job, runtime, jobs, old, &mut errs);
    errs
}

fn reserved_env_error(job: &TrainJob, reserved: &[&str], errs: &mut Vec<FieldError>) {
    let Some(t) = &job.spec.trainer else { return };
    let mut found: Vec<&str> = t.env.iter().map(|e| e.name.as_str()).filter(|n| reserved.contains(n)).collect();
    found.sort_unstable();
    found.dedup();
    if !found.is_empty() {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.env",
            json_value(&t.env, gojson::ENV_VARS),
            format!("must not have reserved envs, invalid envs configured: {}", go_list(&found)),
        ));
    }
}

/// The torch plugin: env injection targets that exist, no torchrun env in the TrainJob, and
/// torchtune's checks for a bare `tune run`.
fn torch_rules(job: &TrainJob, draft: &Draft, torch: &trainer::TorchPolicy, errs: &mut Vec<FieldError>) {
    for target in torch.env_injection.iter().flat_map(|e| &e.targets) {
        for name in &target.container_names {
            let exists = draft
                .spec
                .replicated_jobs
                .iter()
                .find(|j| j.name == target.job_name)
                .is_some_and(|j| job_containers(j).any(|c| &c.name == name));
            if !exists {
                errs.push(hook(
                    ErrorType::Invalid,
                    "spec.runtimeRef",
                    json_value(target, gojson::ENV_INJECTION_TARGET),
                    format!(
                        "envInjection target podSet {} container {} not found in runtime template",
                        super::field::go_quote(&target.job_name),
                        super::field::go_quote(name)
                    ),
                ));
            }
        }
    }
    reserved_env_error(job, &RESERVED_TORCH, errs);
    if let Some(t) = &job.spec.trainer
        && torchtune::is_entrypoint(t.command.as_deref())
    {
        torchtune_rules(job, t, draft, errs);
    }
}

/// `validateTorchTune`.
fn torchtune_rules(job: &TrainJob, t: &trainer::Trainer, draft: &Draft, errs: &mut Vec<FieldError>) {
    let ref_name = &job.spec.runtime_ref.name;
    let model = torchtune::model_from_runtime_ref(ref_name);
    if !torchtune::SUPPORTED_MODELS.contains(&model.as_str()) {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.runtimeRef.name",
            s(ref_name),
            format!("must have a supported pretrained model, invalid model configured: {model}"),
        ));
    }
    let num_nodes = i64::from(t.num_nodes.unwrap_or(1));
    if num_nodes > 1 && model != torchtune::MODEL_LLAMA3_3_70B {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.numNodes",
            BadValue::Int(num_nodes),
            format!("must be 1 for {model} model"),
        ));
    }
    let nproc = t.num_proc_per_node.map_or(NProc::Auto, |n| NProc::Int(i64::from(n)));
    let gpus = gpu_count(node_resources(job, &draft.spec.replicated_jobs).as_ref());
    let args = t.args.as_deref().unwrap_or(&[]);
    let (_, config) = torchtune::recipe_and_config(num_nodes, nproc, gpus, args, ref_name);
    if config.contains(torchtune::SUFFIX_QLORA_DISTRIBUTED) {
        if model == torchtune::MODEL_QWEN2_5_1_5B {
            errs.push(hook(
                ErrorType::Invalid,
                "spec.runtimeRef.name",
                s(ref_name),
                format!("QLoRA is not supported for {model} model"),
            ));
        }
        if !config.contains(torchtune::SUFFIX_QLORA_SINGLE_DEVICE)
            && (model == torchtune::MODEL_LLAMA3_2_1B || model == torchtune::MODEL_LLAMA3_2_3B)
        {
            let nproc_value = match nproc {
                NProc::Int(n) => BadValue::Int(n),
                NProc::Auto => s("auto"),
            };
            errs.push(hook(
                ErrorType::Invalid,
                "spec.trainer.numProcPerNode",
                nproc_value,
                format!("must be auto or 1 for {model} model when using QLoRA"),
            ));
            let resources = match &t.resources_per_node {
                Some(r) => json_value(r, gojson::RESOURCES),
                None => BadValue::Json("null".into()),
            };
            errs.push(hook(
                ErrorType::Invalid,
                "spec.trainer.resourcesPerNode",
                resources,
                format!("must have gpu resource with value 1 for {model} model when using QLoRA"),
            ));
        }
    }
    if num_nodes > 1 && torchtune::is_lora_or_qlora(args) {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.numNodes",
            BadValue::Int(num_nodes),
            "LoRA fine-tuning is not supported for multi-node training in TorchTune",
        ));
    }
    for (i, arg) in args.iter().enumerate() {
        let key = arg.split('=').next().unwrap_or_default();
        if torchtune::IMMUTABLE_CONFIGS.contains(&key) {
            errs.push(hook(
                ErrorType::Invalid,
                format!("spec.trainer.args[{i}]"),
                s(arg),
                format!(
                    "must not set immutable config {} in trainer args; it is managed by the runtime",
                    super::field::go_quote(key)
                ),
            ));
        }
    }
}

/// The MPI plugin: a runtime running the launcher as a node needs both jobs for 2+ nodes; no
/// OpenMPI env in the TrainJob.
fn mpi_rules(job: &TrainJob, jobs: &[ReplicatedJob], mpi: &trainer::MpiPolicy, errs: &mut Vec<FieldError>) {
    if let Some(t) = &job.spec.trainer
        && t.num_nodes.unwrap_or(1) >= 2
        && mpi.run_launcher_as_node == Some(true)
        && !(jobs.iter().any(|j| j.name == "launcher") && jobs.iter().any(|j| j.name == "node"))
    {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.numNodes",
            BadValue::Int(i64::from(t.num_nodes.unwrap_or(1))),
            "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
        ));
    }
    reserved_env_error(job, &RESERVED_MPI, errs);
}

/// The JobSet plugin: initializer jobs, containers and volume mounts for the sections the TrainJob
/// has; runtime patches changed only while suspended; managers that are domain-prefixed paths;
/// patched jobs and containers that exist in the runtime; no env for the containers the TrainJob
/// sections own.
fn jobset_rules(
    job: &TrainJob,
    runtime: &Runtime,
    jobs: &[ReplicatedJob],
    old: Option<&TrainJob>,
    errs: &mut Vec<FieldError>,
) {
    if let Some(init) = &job.spec.initializer {
        for (name, config, present) in [
            (ANCESTOR_DATASET, "datasetConfig", init.dataset.is_some()),
            (ANCESTOR_MODEL, "modelConfig", init.model.is_some()),
        ] {
            if !present {
                continue;
            }
            let named: Vec<&ReplicatedJob> = jobs.iter().filter(|j| j.name == name).collect();
            let detail = if named.is_empty() {
                Some(format!("must have {name} job when trainJob is configured with input {config}"))
            } else if !named.last().is_some_and(|j| job_containers(j).any(|c| c.name == name)) {
                Some(format!("must have container with name - {name} in the {name} job"))
            } else if !named
                .iter()
                .flat_map(|j| pod_spec(j).into_iter().flat_map(|p| &p.containers))
                .any(|c| c.name == name && c.volume_mounts.iter().flatten().any(|m| m.name == "initializer"))
            {
                Some(format!("must have volumeMount with name - initializer in container {name} of the {name} job"))
            } else {
                None
            };
            if let Some(detail) = detail {
                errs.push(hook(ErrorType::Invalid, "spec.runtimeRef", runtime_ref_value(job), detail));
            }
        }
    }
    let patches = &job.spec.runtime_patches;
    if let Some(old) = old {
        let changed = serde_json::to_value(&old.spec.runtime_patches).ok() != serde_json::to_value(patches).ok();
        let suspended = |j: &TrainJob| j.spec.suspend == Some(true);
        if changed && !suspended(old) && !suspended(job) {
            errs.push(hook(
                ErrorType::Forbidden,
                "spec.runtimePatches",
                BadValue::Omit,
                "RuntimePatches can only be modified when the TrainJob is suspended before or after the update",
            ));
        }
    }
    let patches_value = || json_value(patches, gojson::RUNTIME_PATCHES);
    // Trainer looks patched jobs and containers up in the patched template, where a patch's own
    // job or container is found; its unit tests (and Stowage) hold them to the runtime's.
    let runtime_jobs = &runtime.spec().template.spec.replicated_jobs;
    for p in patches {
        errs.extend(domain_prefixed_path("spec.runtimePatches.manager", &p.manager));
        let rjobs = p.training_runtime_spec.as_ref().and_then(|b| b.pointer("/template/spec/replicatedJobs"));
        for rj in rjobs.and_then(Value::as_array).into_iter().flatten() {
            let name = rj.get("name").and_then(Value::as_str).unwrap_or_default();
            let Some(rt_job) = runtime_jobs.iter().find(|j| j.name == name) else {
                errs.push(hook(
                    ErrorType::Invalid,
                    "spec.runtimePatches",
                    patches_value(),
                    "must not have replicated job that doesn't exist in the runtime job template",
                ));
                continue;
            };
            let pod = rj.pointer("/template/spec/template/spec");
            for (field, what) in [("initContainers", "initContainer"), ("containers", "container")] {
                for c in pod.and_then(|p| p.get(field)).and_then(Value::as_array).into_iter().flatten() {
                    let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
                    if !job_containers(rt_job).any(|x| x.name == cname) {
                        errs.push(hook(
                            ErrorType::Invalid,
                            "spec.runtimePatches",
                            patches_value(),
                            format!("must not have {what} that doesn't exist in the runtime job {name}"),
                        ));
                    } else if field == "containers"
                        && c.get("env").and_then(Value::as_array).is_some_and(|e| !e.is_empty())
                        && PROTECTED_CONTAINERS.contains(&cname)
                    {
                        errs.push(hook(
                            ErrorType::Invalid,
                            "spec.runtimePatches",
                            patches_value(),
                            "must not have envs for the dataset-initializer, model-initializer, node containers",
                        ));
                    }
                }
            }
        }
    }
}

/// `validation.IsDomainPrefixedPath`.
fn domain_prefixed_path(path: &str, v: &str) -> Vec<FieldError> {
    if v.is_empty() {
        return vec![hook(ErrorType::Required, path, BadValue::Omit, "")];
    }
    let Some((host, rest)) = v.split_once('/').filter(|(h, r)| !h.is_empty() && !r.is_empty()) else {
        return vec![hook(ErrorType::Invalid, path, s(v), "must be a domain-prefixed path (such as \"acme.io/foo\")")];
    };
    let mut errs = Vec::new();
    if host.len() > 253 {
        errs.push(hook(ErrorType::Invalid, path, s(host), "must be no more than 253 characters"));
    }
    if !is_dns1123_subdomain(host) {
        errs.push(hook(ErrorType::Invalid, path, s(host), DNS1123_SUBDOMAIN_MESSAGE));
    }
    if !rest.chars().all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c)) {
        errs.push(hook(
            ErrorType::Invalid,
            path,
            s(rest),
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// Stowage's own TrainJob checks.

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

// ---------------------------------------------------------------------------------------------
// What a member's API server (Kubernetes v1.33, with JobSet's webhook) refuses in what is
// rendered, named at the field of the input it comes from.

/// The longest DNS-1035 label, which JobSet's webhook holds its Jobs' and pods' names to.
const MAX_DNS_LABEL: usize = 63;
const QUALIFIED_NAME_MESSAGE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
/// `validation.IsRelaxedEnvVarName`: Kubernetes v1.33 relaxes env names by default
/// (`RelaxedEnvironmentVariableValidation`, beta since v1.32, GA in v1.34).
const ENV_NAME_MESSAGE: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";
const INTEGER_MESSAGE: &str = "must be an integer";

/// The TrainJob's own metadata (the API server checks it on the hub and on the member alike),
/// the env names it gives containers, and the Job and pod names JobSet derives from its name.
fn member_rules(job: &TrainJob, runtime: &Runtime, errs: &mut Vec<FieldError>) {
    let meta = &job.metadata;
    for (k, v) in meta.labels.iter().flatten() {
        label(Source::TrainJob, Rule::Crd, "metadata.labels", k, Some(v), errs);
    }
    for k in meta.annotations.iter().flatten().map(|(k, _)| k) {
        label(Source::TrainJob, Rule::Crd, "metadata.annotations", k, None, errs);
    }
    if let Some(t) = &job.spec.trainer {
        env_names(&t.env, "spec.trainer.env", Source::TrainJob, errs);
    }
    if let Some(init) = &job.spec.initializer {
        for (section, source) in [("dataset", &init.dataset), ("model", &init.model)] {
            if let Some(source) = source {
                env_names(&source.env, &format!("spec.initializer.{section}.env"), Source::TrainJob, errs);
            }
        }
    }
    generated_names(job, runtime, errs);
}

/// A label's (or, without a value, an annotation's) key and value, as
/// `ValidateLabels`/`ValidateAnnotations` check them: both reported at the map's path.
fn label(object: Source, rule: Rule, path: &str, key: &str, value: Option<&str>, errs: &mut Vec<FieldError>) {
    for problem in qualified_name(key) {
        errs.push(err(object, rule, ErrorType::Invalid, path, s(key), problem));
    }
    let Some(v) = value else { return };
    if v.len() > MAX_DNS_LABEL {
        errs.push(err(object, rule, ErrorType::Invalid, path, s(v), "must be no more than 63 characters"));
    }
    if !v.is_empty() && !label_name_part(v) {
        errs.push(err(object, rule, ErrorType::Invalid, path, s(v), LABEL_VALUE_MESSAGE));
    }
}

/// `validation.IsQualifiedName`: an optional DNS-1123 subdomain prefix and `/`, then a name
/// part of at most 63 characters.
fn qualified_name(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            problems.push("prefix part must be non-empty".to_string());
        } else {
            if p.len() > 253 {
                problems.push("prefix part must be no more than 253 characters".to_string());
            }
            if !is_dns1123_subdomain(p) {
                problems.push(format!("prefix part {DNS1123_SUBDOMAIN_MESSAGE}"));
            }
        }
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else {
        if name.len() > MAX_DNS_LABEL {
            problems.push("name part must be no more than 63 characters".to_string());
        }
        if !label_name_part(name) {
            problems.push(QUALIFIED_NAME_MESSAGE.to_string());
        }
    }
    problems
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn label_name_part(v: &str) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Env names as a v1.33 API server takes them: not empty, printable ASCII but `=`.
fn env_names(env: &[k8s_openapi::api::core::v1::EnvVar], path: &str, object: Source, errs: &mut Vec<FieldError>) {
    for (i, e) in env.iter().enumerate() {
        let at = format!("{path}[{i}].name");
        if e.name.is_empty() {
            errs.push(err(object, Rule::Stowage, ErrorType::Required, at, BadValue::Omit, ""));
        } else if !e.name.bytes().all(|c| (b' '..=b'~').contains(&c) && c != b'=') {
            errs.push(err(object, Rule::Stowage, ErrorType::Invalid, at, s(&e.name), ENV_NAME_MESSAGE));
        }
    }
}

/// JobSet names each Job `<TrainJob>-<replicatedJob>-<job index>` and each pod of an Indexed
/// Job `<job>-<pod index>-<5 random>`, and its webhook refuses a JobSet whose longest would be
/// over 63 characters: reported at `metadata.name`, the part the TrainJob's author chose.
fn generated_names(job: &TrainJob, runtime: &Runtime, errs: &mut Vec<FieldError>) {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    if name.is_empty() {
        return;
    }
    let num_nodes = job.spec.trainer.as_ref().and_then(|t| t.num_nodes);
    for j in &runtime.spec().template.spec.replicated_jobs {
        let last_job = j.replicas.unwrap_or(1).max(1) - 1;
        let job_name = format!("{name}-{}-{last_job}", j.name);
        let completions = match ancestor_of(j) {
            Some(ANCESTOR_TRAINER) => num_nodes.or_else(|| j.template.spec.as_ref().and_then(|s| s.completions)),
            _ => j.template.spec.as_ref().and_then(|s| s.completions),
        };
        let longest = match completions {
            Some(c) => format!("{job_name}-{}-abcde", c.max(1) - 1),
            None => job_name,
        };
        if longest.len() > MAX_DNS_LABEL {
            errs.push(own(
                ErrorType::Invalid,
                "metadata.name",
                s(name),
                format!(
                    "JobSet would name a {} {longest:?} ({} characters), and a member's API server allows at most {MAX_DNS_LABEL}: shorten the name by {}",
                    if completions.is_some() { "pod" } else { "Job" },
                    longest.len(),
                    longest.len() - MAX_DNS_LABEL
                ),
            ));
            return;
        }
    }
}

/// Labels a runtime patch would put on the JobSet, its Jobs or its pods.
fn patch_labels(body: &Value, at: &str, errs: &mut Vec<FieldError>) {
    let mut maps = vec![(format!("{at}.template.metadata.labels"), body.pointer("/template/metadata/labels"))];
    for (i, rj) in
        body.pointer("/template/spec/replicatedJobs").and_then(Value::as_array).into_iter().flatten().enumerate()
    {
        let rj_at = format!("{at}.template.spec.replicatedJobs[{i}].template");
        maps.push((format!("{rj_at}.metadata.labels"), rj.pointer("/template/metadata/labels")));
        maps.push((
            format!("{rj_at}.spec.template.metadata.labels"),
            rj.pointer("/template/spec/template/metadata/labels"),
        ));
    }
    for (path, map) in maps {
        for (k, v) in map.and_then(Value::as_object).into_iter().flatten() {
            if let Some(v) = v.as_str() {
                label(Source::TrainJob, Rule::Stowage, &path, k, Some(v), errs);
            }
        }
    }
}

/// `helper.IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io`, which
/// Kubernetes counts in whole units (`nvidia.com/gpu`).
fn extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// Quantities that match the pattern but that Kubernetes cannot use: negative for a container,
/// too many digits, or past the 64-bit range it accounts resources in.
fn quantity_ranges(r: &ResourceRequirements, path: &str, object: Source, errs: &mut Vec<FieldError>) {
    for (part, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (res, q) in map.iter().flatten() {
            if !quantity_syntax(&q.0) {
                continue;
            }
            let problem = match check_quantity(&q.0) {
                Err(problem) => problem.to_string(),
                Ok(milli) if extended_resource(res) && milli % 1000 != 0 => INTEGER_MESSAGE.to_string(),
                Ok(_) => continue,
            };
            errs.push(err(object, Rule::Stowage, ErrorType::Invalid, format!("{path}.{part}.{res}"), s(&q.0), problem));
        }
    }
}

/// Why a container's resource quantity is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum QuantityProblem {
    #[error(transparent)]
    Syntax(#[from] BadQuantity),
    #[error("has more than {MAX_QUANTITY_DIGITS} digits; use a suffix (Gi, T, ...)")]
    TooManyDigits,
    #[error("must not be negative")]
    Negative,
    #[error("is more than Kubernetes can account for (at most {max} units)", max = i64::MAX)]
    TooLarge,
}

/// The quantity in milli-units, when Kubernetes can account it.
fn check_quantity(q: &str) -> Result<i128, QuantityProblem> {
    let digits = q.chars().take_while(|c| !c.is_ascii_alphabetic()).filter(char::is_ascii_digit).count();
    if digits > MAX_QUANTITY_DIGITS {
        return Err(QuantityProblem::TooManyDigits);
    }
    let v = Milli::parse(q)?;
    if v.0 < 0 {
        return Err(QuantityProblem::Negative);
    }
    if v.0 > i128::from(i64::MAX) * 1000 {
        return Err(QuantityProblem::TooLarge);
    }
    Ok(v.0)
}

/// The fields of a `runtimePatches[]` entry, as the TrainJob CRD declares them. The API server
/// drops any other field (and any null), so Trainer never sees it: applying it would render
/// something Trainer does not.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// An object with only these fields.
    Object(&'static [(&'static str, Shape)]),
    /// A list of items of this shape.
    List(&'static Shape),
    Str,
    /// Anything non-null: its type is checked when the patched template is read back.
    Any,
}

const PATCH_META: Shape = Shape::Object(&[
    ("annotations", Shape::Any),
    ("finalizers", Shape::Any),
    ("labels", Shape::Any),
    ("name", Shape::Str),
    ("namespace", Shape::Str),
]);
const PATCH_CONTAINER: Shape = Shape::Object(&[
    ("env", Shape::Any),
    ("name", Shape::Str),
    ("securityContext", Shape::Any),
    ("volumeMounts", Shape::Any),
]);
const PATCH_POD_SPEC: Shape = Shape::Object(&[
    ("affinity", Shape::Any),
    ("containers", Shape::List(&PATCH_CONTAINER)),
    ("imagePullSecrets", Shape::Any),
    ("initContainers", Shape::List(&PATCH_CONTAINER)),
    ("nodeSelector", Shape::Any),
    ("schedulingGates", Shape::Any),
    ("securityContext", Shape::Any),
    ("serviceAccountName", Shape::Str),
    ("terminationGracePeriodSeconds", Shape::Any),
    ("tolerations", Shape::Any),
    ("volumes", Shape::Any),
]);
const PATCH_REPLICATED_JOB: Shape = Shape::Object(&[
    ("name", Shape::Str),
    (
        "template",
        Shape::Object(&[
            ("metadata", PATCH_META),
            (
                "spec",
                Shape::Object(&[("template", Shape::Object(&[("metadata", PATCH_META), ("spec", PATCH_POD_SPEC)]))]),
            ),
        ]),
    ),
]);
const PATCH_SPEC: Shape = Shape::Object(&[(
    "template",
    Shape::Object(&[
        ("metadata", PATCH_META),
        ("spec", Shape::Object(&[("replicatedJobs", Shape::List(&PATCH_REPLICATED_JOB))])),
    ]),
)]);

const NULL_DROPPED: &str = "null is dropped by the API server, so it would not remove anything";

/// `v` has `shape`; the first field that does not is reported.
fn check_shape(v: &Value, shape: Shape, path: &str, errs: &mut Vec<FieldError>) -> bool {
    let bad = |t: ErrorType, d: &str| own(t, path, BadValue::Omit, d);
    if v.is_null() {
        errs.push(bad(ErrorType::Forbidden, NULL_DROPPED));
        return false;
    }
    match shape {
        Shape::Object(fields) => {
            let Some(map) = v.as_object() else {
                errs.push(bad(ErrorType::Invalid, "must be an object"));
                return false;
            };
            for (k, x) in map {
                let at = format!("{path}.{k}");
                let Some((_, s)) = fields.iter().find(|(f, _)| f == k) else {
                    let allowed: Vec<&str> = fields.iter().map(|(f, _)| *f).collect();
                    errs.push(own(
                        ErrorType::Forbidden,
                        at,
                        BadValue::Omit,
                        format!("not a field a runtime patch may set here (allowed: {})", allowed.join(", ")),
                    ));
                    return false;
                };
                if !check_shape(x, *s, &at, errs) {
                    return false;
                }
            }
            true
        }
        Shape::List(item) => {
            let Some(items) = v.as_array() else {
                errs.push(bad(ErrorType::Invalid, "must be a list"));
                return false;
            };
            items.iter().enumerate().all(|(i, x)| check_shape(x, *item, &format!("{path}[{i}]"), errs))
        }
        Shape::Str if !v.is_string() => {
            errs.push(bad(ErrorType::Invalid, "must be a string"));
            false
        }
        Shape::Str => true,
        Shape::Any => no_null(v, path, errs),
    }
}

fn no_null(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> bool {
    match v {
        Value::Null => {
            errs.push(own(ErrorType::Forbidden, path, BadValue::Omit, NULL_DROPPED));
            false
        }
        Value::Object(m) => m.iter().all(|(k, x)| no_null(x, &format!("{path}.{k}"), errs)),
        Value::Array(a) => a.iter().enumerate().all(|(i, x)| no_null(x, &format!("{path}[{i}]"), errs)),
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// The runtime's own shape and the Placement (rendering only).

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
fn gang_size(runtime: &Runtime, job: &TrainJob, errs: &mut Vec<FieldError>) {
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
            errs.push(err(
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
        errs.push(err(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantity_pattern_is_the_crds() {
        for ok in ["1", "+2", "-3", "1.", ".5", "500m", "1.5Gi", "1e3", "1E-2", "2k", "1e1.5"] {
            assert!(quantity_syntax(ok), "{ok}");
        }
        for bad in ["", ".", "+", "1.2.3", " 8", "8Gi ", "64GB", "1e", "eight", "1Ki1"] {
            assert!(!quantity_syntax(bad), "{bad}");
        }
    }

    #[test]
    fn domain_prefixed_paths_as_apimachinery_checks_them() {
        assert!(domain_prefixed_path("p", "example.com/a").is_empty());
        assert!(domain_prefixed_path("p", "localhost/tuner").is_empty());
        assert_eq!(
            domain_prefixed_path("p", "my-controller")[0].to_string(),
            "p: Invalid value: \"my-controller\": must be a domain-prefixed path (such as \"acme.io/foo\")"
        );
        assert_eq!(
            domain_prefixed_path("p", "Example.com/x")[0].to_string(),
            format!("p: Invalid value: \"Example.com\": {DNS1123_SUBDOMAIN_MESSAGE}")
        );
        assert!(domain_prefixed_path("p", "example.com/a b")[0].detail.starts_with("Invalid path"));
    }
}
