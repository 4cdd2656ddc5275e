//! Field errors as Kubernetes prints them (`k8s.io/apimachinery` v0.36.2,
//! `pkg/util/validation/field/errors.go`): a path, an error type, the offending value and a
//! detail, displayed as `Error()` displays them — `spec.trainer.numNodes: Invalid value: 0:
//! must be at least 1` — and a list of them as `ErrorList.ToAggregate().Error()` prints it.
//! The text is made here and nowhere else.

use std::fmt;

use crate::Source;

/// `field.ErrorType`, printed as `ErrorType.String()` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
    TypeInvalid,
}

impl ErrorType {
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
        }
    }
}

/// The `BadValue` of a field error, as `ErrorBody` prints it: integers and booleans with `%v`,
/// strings with `%q`, anything else as Go's `encoding/json` writes it, or nothing at all
/// (`field.OmitValueType`, which CEL rules on objects and lists use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    Omit,
    Int(i64),
    Bool(bool),
    Str(String),
    /// Already Go-encoded JSON text (as `encoding/json` writes the Go value).
    Json(String),
}

/// Who answers a rejection: the API server from the CRD (OpenAPI schema, CEL rules and object
/// metadata rules, HTTP 422 `Invalid`), Trainer's validating webhook (HTTP 403 `Forbidden`), or
/// Stowage's own admission (403 too), for inputs Trainer accepts but cannot run as rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The TrainJob (or runtime) CRD and the API server's object-metadata validation.
    Crd,
    /// Trainer v2.3.0's `validator.trainjob.trainer.kubeflow.org` webhook (its plugins' `Validate`),
    /// or for a runtime, its `validator.(cluster)trainingruntime.trainer.kubeflow.org` webhook.
    Webhook,
    /// Stowage's own: Trainer admits it, but it fails later (the JobSet, the Indexed Job or the
    /// PodGroup would be invalid) or Stowage cannot render it faithfully.
    Stowage,
}

/// One field error: which object, which rule, and Kubernetes' own parts of `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub object: Source,
    pub rule: Rule,
    pub error_type: ErrorType,
    /// The path as `field.Path.String()` prints it (`<nil>` for a CEL rule on the object root).
    pub field: String,
    pub value: BadValue,
    pub detail: String,
}

impl FieldError {
    pub(crate) fn new(
        object: Source,
        rule: Rule,
        error_type: ErrorType,
        field: impl Into<String>,
        value: BadValue,
        detail: impl Into<String>,
    ) -> Self {
        FieldError { object, rule, error_type, field: field.into(), value, detail: detail.into() }
    }

    /// `field.Error.ErrorBody()`: the message without the path.
    pub fn body(&self) -> String {
        let t = self.error_type.as_str();
        let mut s = match self.error_type {
            ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong | ErrorType::Internal => t.to_string(),
            _ => match &self.value {
                BadValue::Omit => t.to_string(),
                BadValue::Int(i) => format!("{t}: {i}"),
                BadValue::Bool(b) => format!("{t}: {b}"),
                BadValue::Str(v) => format!("{t}: {}", go_quote(v)),
                BadValue::Json(j) => format!("{t}: {j}"),
            },
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    /// `field.Error.Error()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `ErrorList.ToAggregate().Error()`: duplicates dropped, one error as itself, several as
/// `[a, b]`.
pub fn aggregate(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.swap_remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// Go's `strconv.Quote`, for the printable-ASCII-and-Unicode cases Kubernetes values hold.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || c == '\u{a0}' || c == '\u{ad}' => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A path built the way `field.Path` builds one: `.child`, `[key]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Path(String);

impl Path {
    pub(crate) fn new(root: &str) -> Self {
        Path(root.to_string())
    }

    pub(crate) fn child(&self, name: &str) -> Self {
        Path(format!("{}.{name}", self.0))
    }

    pub(crate) fn key(&self, k: &str) -> Self {
        Path(format!("{}[{k}]", self.0))
    }
}

impl From<Path> for String {
    fn from(p: Path) -> String {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(t: ErrorType, v: BadValue, d: &str) -> FieldError {
        FieldError::new(Source::TrainJob, Rule::Webhook, t, "spec.x", v, d)
    }

    #[test]
    fn bodies_print_as_apimachinery_prints_them() {
        assert_eq!(e(ErrorType::Invalid, BadValue::Int(0), "bad").to_string(), "spec.x: Invalid value: 0: bad");
        assert_eq!(
            e(ErrorType::Invalid, BadValue::Str("a\"b".into()), "").to_string(),
            "spec.x: Invalid value: \"a\\\"b\""
        );
        assert_eq!(e(ErrorType::Invalid, BadValue::Omit, "immutable").to_string(), "spec.x: Invalid value: immutable");
        assert_eq!(e(ErrorType::Required, BadValue::Str("x".into()), "").to_string(), "spec.x: Required value");
        assert_eq!(e(ErrorType::Forbidden, BadValue::Omit, "no").to_string(), "spec.x: Forbidden: no");
        assert_eq!(
            e(ErrorType::TooMany, BadValue::Int(17), "must have at most 16 items").to_string(),
            "spec.x: Too many: 17: must have at most 16 items"
        );
    }

    #[test]
    fn aggregates_print_one_bare_and_several_bracketed_without_duplicates() {
        let a = e(ErrorType::Forbidden, BadValue::Omit, "a");
        let b = e(ErrorType::Forbidden, BadValue::Omit, "b");
        assert_eq!(aggregate(std::slice::from_ref(&a)), "spec.x: Forbidden: a");
        assert_eq!(aggregate(&[a.clone(), b.clone(), a.clone()]), "[spec.x: Forbidden: a, spec.x: Forbidden: b]");
        assert_eq!(aggregate(&[a.clone(), a]), "spec.x: Forbidden: a");
    }
}
