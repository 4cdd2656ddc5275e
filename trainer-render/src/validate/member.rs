//! What a member's API server (Kubernetes v1.33, with JobSet's webhook) refuses in what is
//! rendered, named at the field of the input it comes from: metadata, labels, env names, the
//! names JobSet derives, quantities past what Kubernetes accounts.

use api::quantity::{BadQuantity, Milli};
use api::trainer::{ANCESTOR_TRAINER, Runtime, TrainJob};
use k8s_openapi::api::core::v1::ResourceRequirements;
use kube_conventions::names;
use serde_json::Value;

use crate::Source;
use crate::field::{BadValue, ErrorType, FieldError, Rule};
use crate::pods::ancestor_of;

use super::crd::quantity_syntax;
use super::{own, s};

/// Digits a quantity may have: beyond 20, its value is far past anything schedulable (and past
/// what milli-unit arithmetic on it stays exact for).
const MAX_QUANTITY_DIGITS: usize = 20;

/// The longest DNS-1035 label, which JobSet's webhook holds its Jobs' and pods' names to.
const MAX_DNS_LABEL: usize = names::DNS1123_LABEL_MAX;
/// `validation.IsRelaxedEnvVarName`: Kubernetes v1.33 relaxes env names by default
/// (`RelaxedEnvironmentVariableValidation`, beta since v1.32, GA in v1.34).
const ENV_NAME_MESSAGE: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";
const INTEGER_MESSAGE: &str = "must be an integer";

/// The TrainJob's own metadata (the API server checks it on the hub and on the member alike),
/// the env names it gives containers, and the Job and pod names JobSet derives from its name.
pub(super) fn member_rules(job: &TrainJob, runtime: &Runtime, errs: &mut Vec<FieldError>) {
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
pub(super) fn label(
    object: Source,
    rule: Rule,
    path: &str,
    key: &str,
    value: Option<&str>,
    errs: &mut Vec<FieldError>,
) {
    for problem in names::qualified_name(key) {
        errs.push(FieldError::new(object, rule, ErrorType::Invalid, path, s(key), problem));
    }
    let Some(v) = value else { return };
    for problem in names::label_value(v) {
        errs.push(FieldError::new(object, rule, ErrorType::Invalid, path, s(v), problem));
    }
}

/// Env names as a v1.33 API server takes them: not empty, printable ASCII but `=`.
pub(super) fn env_names(
    env: &[k8s_openapi::api::core::v1::EnvVar],
    path: &str,
    object: Source,
    errs: &mut Vec<FieldError>,
) {
    for (i, e) in env.iter().enumerate() {
        let at = format!("{path}[{i}].name");
        if e.name.is_empty() {
            errs.push(FieldError::new(object, Rule::Stowage, ErrorType::Required, at, BadValue::Omit, ""));
        } else if !e.name.bytes().all(|c| (b' '..=b'~').contains(&c) && c != b'=') {
            errs.push(FieldError::new(object, Rule::Stowage, ErrorType::Invalid, at, s(&e.name), ENV_NAME_MESSAGE));
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
pub(super) fn patch_labels(body: &Value, at: &str, errs: &mut Vec<FieldError>) {
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
pub(super) fn quantity_ranges(r: &ResourceRequirements, path: &str, object: Source, errs: &mut Vec<FieldError>) {
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
            errs.push(FieldError::new(
                object,
                Rule::Stowage,
                ErrorType::Invalid,
                format!("{path}.{part}.{res}"),
                s(&q.0),
                problem,
            ));
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
