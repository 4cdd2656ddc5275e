//! The shape of a `runtimePatches[]` entry as the TrainJob CRD declares it: a field it does not
//! declare, or a null, is dropped by the API server before Trainer sees it, so Stowage refuses
//! it rather than render what Trainer would not.

use serde_json::Value;

use crate::field::{BadValue, ErrorType, FieldError};

use super::own;

/// The fields of a `runtimePatches[]` entry, as the TrainJob CRD declares them. The API server
/// drops any other field (and any null), so Trainer never sees it: applying it would render
/// something Trainer does not.
#[derive(Debug, Clone, Copy)]
pub(super) enum Shape {
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
pub(super) const PATCH_SPEC: Shape = Shape::Object(&[(
    "template",
    Shape::Object(&[
        ("metadata", PATCH_META),
        ("spec", Shape::Object(&[("replicatedJobs", Shape::List(&PATCH_REPLICATED_JOB))])),
    ]),
)]);

const NULL_DROPPED: &str = "null is dropped by the API server, so it would not remove anything";

/// `v` has `shape`; the first field that does not is reported.
pub(super) fn check_shape(v: &Value, shape: Shape, path: &str, errs: &mut Vec<FieldError>) -> bool {
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
