//! Admission, as kube-apiserver's chain runs it on a create or update, over a read-only view of
//! the objects: `mutate` (ObjectMeta's empty fields dropped; defaults, pruning and the schema
//! for a custom resource; the built-in kinds' defaults otherwise), then — once the write path
//! has recorded managedFields — `validate`: the CRD's CEL rules, a CustomResourceDefinition's
//! own checks, the validating steps added ([`Validator`]: webhooks), and the
//! ValidatingAdmissionPolicies ([`policy`]). A delete meets the policies alone.

use std::sync::Arc;

use kube_conventions::names;
use serde_json::{Value, json};

use crate::policy::{self, Attributes};
use crate::resources::{self, ResourceType};
use crate::schema;
use crate::status::ApiError;
use crate::view::{ReadView, meta_str};

/// A validating admission step, as a ValidatingWebhookConfiguration (or a validating admission
/// policy) is on a real API server: asked about every create and update of the kinds it
/// applies to (status writes only where it [reviews status](Validator::reviews_status)), after
/// defaulting and schema validation, with the objects as they stand ([`ReadView`]) so it can look up
/// what the object refers to. Its error is the answer the client gets, status code, reason and message
/// as they are.
pub trait Validator: Send + Sync + std::fmt::Debug {
    fn applies_to(&self, rt: &ResourceType) -> bool;
    /// Whether it also reviews writes to the status subresource (a webhook whose rules name
    /// `<resource>/status`, as Kueue's Workload webhook does).
    fn reviews_status(&self) -> bool {
        false
    }
    fn validate(&self, view: &ReadView<'_>, review: &Review<'_>) -> Result<(), ApiError>;
}

/// One write under review.
#[derive(Debug)]
pub struct Review<'a> {
    pub rt: &'a ResourceType,
    pub namespace: Option<&'a str>,
    pub object: &'a Value,
    /// The object it replaces, on update.
    pub old: Option<&'a Value>,
}

/// The defaults kube-apiserver gives the built-in kinds served here that clients leave out
/// (k8s.io/kubernetes/pkg/apis/core/v1/defaults.go).
fn builtin_defaults(rt: &ResourceType, obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    let empty = |v: &Value| v.as_object().is_some_and(serde_json::Map::is_empty) || v.is_null();
    match (rt.group.as_str(), rt.kind.as_str()) {
        // Go's `omitempty` drops an empty map: `data: {}` is stored as no data.
        ("", "ConfigMap") => {
            o.retain(|k, v| !(matches!(k.as_str(), "data" | "binaryData") && empty(v)));
        }
        ("", "Secret") => {
            o.retain(|k, v| !(matches!(k.as_str(), "data" | "stringData") && empty(v)));
            o.entry("type").or_insert_with(|| "Opaque".into());
        }
        ("", "Namespace") => {
            let status = o.entry("status").or_insert_with(|| json!({}));
            if let Some(s) = status.as_object_mut() {
                s.entry("phase").or_insert_with(|| "Active".into());
            }
        }
        _ => {}
    }
}

/// Defaults, prunes (or rejects, when strict) unknown fields and validates a CRD object
/// against its schema. A violation that keeps the validation rules from running refuses
/// the write here; the others are returned, to be reported with the rules' failures
/// ([`validate`]), as kube-apiserver reports them.
pub(crate) fn mutate(rt: &ResourceType, obj: &mut Value, strict: bool) -> Result<Vec<(String, String)>, ApiError> {
    mutate_part(rt, obj, strict, None)
}

/// The fields a status write takes from the stored object unchanged: all but these.
const STATUS_WRITE_FIELDS: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];

/// Whether a status write of `rt` may be mutated by [`mutate_status`]: a CRD kind whose schema
/// counts no properties at its root (with `minProperties` or `maxProperties`, the fields left
/// out would count).
pub(crate) fn mutates_status_alone(rt: &ResourceType) -> bool {
    rt.schema.as_deref().is_some_and(|s| s.get("minProperties").is_none() && s.get("maxProperties").is_none())
}

/// [`mutate`] for a status write of a kind [`mutates_status_alone`] allows: `obj` holds the
/// metadata and the new status, and gets the stored object's other fields (`stored`) once
/// defaulted, pruned and validated. Those fields are the stored object's, unchanged, so they
/// are neither defaulted nor pruned again nor validated: Kubernetes' validation ratcheting
/// (GA in 1.33) reports no error of a value equal to the old one, and walking them (a JobSet's
/// pod templates, a TrainJob's spec) was most of a status write's admission. Only a root
/// `required` field the write kept is taken as present.
pub(crate) fn mutate_status(
    rt: &ResourceType,
    obj: &mut Value,
    strict: bool,
    stored: &Value,
) -> Result<Vec<(String, String)>, ApiError> {
    let kept = |k: &str| !STATUS_WRITE_FIELDS.contains(&k);
    let causes = mutate_part(rt, obj, strict, Some(&|field: &str| kept(field) && stored.get(field).is_some()))?;
    if let (Some(o), Some(stored)) = (obj.as_object_mut(), stored.as_object()) {
        o.extend(stored.iter().filter(|(k, _)| kept(k)).map(|(k, v)| (k.clone(), v.clone())));
    }
    Ok(causes)
}

/// [`mutate`], on an object whose root fields for which `elsewhere` holds are left out: their
/// root `required` violations are not violations.
fn mutate_part(
    rt: &ResourceType,
    obj: &mut Value,
    strict: bool,
    elsewhere: Option<&dyn Fn(&str) -> bool>,
) -> Result<Vec<(String, String)>, ApiError> {
    // Every kind's metadata is Go's ObjectMeta: empty labels, annotations, finalizers and
    // owner references are not kept (`omitempty`).
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, v| {
            let omitted = matches!(k.as_str(), "labels" | "annotations" | "finalizers" | "ownerReferences");
            !(omitted
                && (v.is_null()
                    || v.as_object().is_some_and(|o| o.is_empty())
                    || v.as_array().is_some_and(|a| a.is_empty())))
        });
    }
    let Some(schema) = &rt.schema else {
        builtin_defaults(rt, obj);
        return Ok(Vec::new());
    };
    let name = meta_str(obj, "name").unwrap_or("").to_string();
    schema::whole_numbers(obj);
    schema::apply_defaults(schema, obj);
    let unknown = schema::prune(schema, obj);
    if strict && !unknown.is_empty() {
        let causes = unknown.into_iter().map(|f| (f, "field not declared in schema".to_string())).collect();
        return Err(ApiError::invalid(&rt.group_kind(), &name, causes));
    }
    let mut violations = schema::validate(schema, obj);
    if let Some(elsewhere) = elsewhere {
        violations.retain(|v| !(v.message == schema::REQUIRED && elsewhere(&v.field)));
    }
    let blocked = violations.iter().any(|v| v.blocks_rules);
    let mut causes: Vec<(String, String)> = violations.into_iter().map(|v| (v.field, v.message)).collect();
    if blocked {
        if schema::has_rules(schema) {
            let (field, message) = schema::RULES_NOT_CHECKED;
            causes.push((field.into(), message.into()));
        }
        return Err(ApiError::invalid(&rt.group_kind(), &name, causes));
    }
    Ok(causes)
}

/// The CRD's `x-kubernetes-validations` on a write (with the object it replaces, on
/// update): 422 naming each field whose rule fails, after the schema's own violations
/// [`mutate`] left for here.
fn check_rules(
    rt: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
    name: &str,
    mut violations: Vec<(String, String)>,
) -> Result<(), ApiError> {
    if let Some(schema) = &rt.schema {
        violations.extend(schema::validation_rules(schema, obj, old));
    }
    if violations.is_empty() { Ok(()) } else { Err(ApiError::invalid(&rt.group_kind(), name, violations)) }
}

/// The types a CustomResourceDefinition defines, checked as kube-apiserver validates one
/// (its CEL rules compile, its versions and names make types) before admission, so a dry run
/// refuses what a real write would; none for any other object.
fn crd_types(rt: &ResourceType, crd: &Value) -> Result<Vec<ResourceType>, ApiError> {
    if rt.group != "apiextensions.k8s.io" {
        return Ok(Vec::new());
    }
    let name = meta_str(crd, "name").unwrap_or("").to_string();
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    let mut broken = Vec::new();
    for (i, v) in versions.into_iter().flatten().enumerate() {
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            broken.extend(schema::rule_compile_errors(schema, &format!("spec.validation.openAPIV3Schema[{i}]")));
        }
    }
    if !broken.is_empty() {
        return Err(ApiError::invalid("customresourcedefinitions.apiextensions.k8s.io", &name, broken));
    }
    resources::from_crd(crd).map_err(|e| {
        ApiError::invalid("customresourcedefinitions.apiextensions.k8s.io", &e.name, vec![("spec".into(), e.problem)])
    })
}

/// The validating half of the chain, in kube-apiserver's order: the CRD's rules (with the
/// schema violations [`mutate`] left for here), a CRD's own checks, each [`Validator`] that
/// applies (of a status write, only those that review status), then the policies. The types a
/// CustomResourceDefinition defines, for the write path to serve once it is stored.
pub(crate) fn validate(
    view: ReadView<'_>,
    validators: &[Arc<dyn Validator>],
    review: &Review<'_>,
    violations: Vec<(String, String)>,
    attributes: &Attributes<'_>,
) -> Result<Vec<ResourceType>, ApiError> {
    check_rules(review.rt, review.object, review.old, attributes.name, violations)?;
    let defines = crd_types(review.rt, review.object)?;
    let status = attributes.subresource == Some("status");
    validators
        .iter()
        .filter(|v| v.applies_to(review.rt) && (!status || v.reviews_status()))
        .try_for_each(|v| v.validate(&view, review))?;
    policy::admit(&view, attributes)?;
    Ok(defines)
}

/// What is wrong with `name` for an object of `rt`, in kube-apiserver's words. RBAC's kinds take
/// any path segment (`system:discovery`), as upstream's `ValidateRBACName`; the rest an RFC 1123
/// subdomain.
pub(crate) fn name_error(rt: &ResourceType, name: &str) -> Option<&'static str> {
    if rt.group == crate::rbac::GROUP {
        return match name {
            "." => Some("may not be '.'"),
            ".." => Some("may not be '..'"),
            _ if name.contains('/') => Some("may not contain '/'"),
            _ if name.contains('%') => Some("may not contain '%'"),
            _ => None,
        };
    }
    (!valid_name(name)).then_some(names::DNS1123_SUBDOMAIN_MESSAGE)
}

/// RFC 1123 subdomain: what most object names must be.
fn valid_name(name: &str) -> bool {
    name.len() <= names::DNS1123_SUBDOMAIN_MAX && names::is_dns1123_subdomain(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_label_by_label_as_kube_apiserver_checks_them() {
        let types = resources::builtins();
        let cm = types.iter().find(|t| t.plural == "configmaps").expect("configmaps");
        assert_eq!(name_error(cm, "a.b-c"), None);
        // Each dot-separated label starts and ends alphanumeric: the first and last byte alone
        // are not enough.
        for bad in ["a..b", "a.-b", "a-.b", &"a".repeat(254)] {
            assert_eq!(name_error(cm, bad), Some(names::DNS1123_SUBDOMAIN_MESSAGE), "{bad}");
        }
    }
}
