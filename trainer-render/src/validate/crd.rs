//! What the TrainJob CRD and the API server refuse (422): the schema's patterns, lengths and
//! counts, its CEL rules (immutable fields with ratcheting) and the object-metadata rules.

use api::trainer::{self, DEFAULT_MANAGED_BY, KUEUE_MULTIKUEUE_MANAGED_BY, TrainJob};
use k8s_openapi::api::core::v1::ResourceRequirements;
use kube_conventions::names::{DNS1123_SUBDOMAIN_MESSAGE, is_dns1123_subdomain};
use serde_json::{Value, json};

use crate::field::{BadValue, ErrorType, FieldError, Rule};
use crate::{Source, gojson};

use super::s;

const IMMUTABLE: &str = "field is immutable";
const MANAGED_BY_MESSAGE: &str =
    "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set";
const MAX_RUNTIME_PATCHES: usize = 16;
/// The CRD's pattern for a resource quantity.
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
const STORAGE_URI_MESSAGE: &str = "storageUri may be empty, or it must be a valid URI (scheme://...)";
fn crd(t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    FieldError::new(Source::TrainJob, Rule::Crd, t, path, v, d)
}

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
pub(super) fn quantity_patterns(
    r: &ResourceRequirements,
    path: &str,
    push: &mut impl FnMut(FieldError),
    object: Source,
) {
    for (part, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (res, q) in map.iter().flatten() {
            if !quantity_syntax(&q.0) {
                let at = format!("{path}.{part}.{res}");
                let detail = format!("{at} in body should match '{QUANTITY_PATTERN}'");
                push(FieldError::new(object, Rule::Crd, ErrorType::Invalid, at, s(&q.0), detail));
            }
        }
    }
}

/// The quantity pattern above, by hand.
pub(super) fn quantity_syntax(q: &str) -> bool {
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
}
