//! Errors as Kubernetes `Status` objects with the HTTP code and reason a real API server uses.

use serde_json::{Value, json};

/// Why each cause of an error is one (a byte: errors are returned everywhere and stay small).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseReason {
    FieldValueInvalid,
    /// Server-side apply: another manager owns the field.
    FieldManagerConflict,
}

impl CauseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CauseReason::FieldValueInvalid => "FieldValueInvalid",
            CauseReason::FieldManagerConflict => "FieldManagerConflict",
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Field causes for `Invalid`.
    pub causes: Vec<(String, String)>,
    /// The causes' `reason`.
    pub cause_reason: CauseReason,
    pub details: Option<(String, String)>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            causes: Vec::new(),
            cause_reason: CauseReason::FieldValueInvalid,
            details: None,
        }
    }

    pub fn not_found(kind: &str, name: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("{kind} \"{name}\" not found"));
        e.details = Some((kind.to_string(), name.to_string()));
        e
    }

    pub fn already_exists(kind: &str, name: &str) -> Self {
        let mut e = Self::new(409, "AlreadyExists", format!("{kind} \"{name}\" already exists"));
        e.details = Some((kind.to_string(), name.to_string()));
        e
    }

    pub fn conflict(kind: &str, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {kind} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
        e.details = Some((kind.to_string(), name.to_string()));
        e
    }

    /// Server-side apply refused: fields other managers own would change. `conflicts` are
    /// (manager as kube-apiserver prints it, field path); the message is kube-apiserver's.
    pub fn apply_conflicts(mut conflicts: Vec<(String, String)>) -> Self {
        conflicts.sort_by(|a, b| a.0.cmp(&b.0));
        let message = match conflicts.as_slice() {
            [(manager, field)] => format!("Apply failed with 1 conflict: conflict with {manager}: {field}"),
            _ => {
                let mut lines: Vec<String> = Vec::new();
                for (i, (manager, field)) in conflicts.iter().enumerate() {
                    if i == 0 || conflicts[i - 1].0 != *manager {
                        lines.push(format!("conflicts with {manager}:"));
                    }
                    lines.push(format!("- {field}"));
                }
                format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
            }
        };
        let mut e = Self::new(409, "Conflict", message);
        e.causes = conflicts.into_iter().map(|(manager, field)| (field, format!("conflict with {manager}"))).collect();
        e.cause_reason = CauseReason::FieldManagerConflict;
        e
    }

    /// An admission step's refusal, its words as they are: `403 Forbidden` for a webhook's
    /// denial, `422 Invalid` (with field causes) for a CRD validation rule's.
    pub fn denied(code: u16, reason: &'static str, message: String, causes: Vec<(String, String)>) -> Self {
        let mut e = Self::new(code, reason, message);
        e.causes = causes;
        e
    }

    pub fn invalid(kind: &str, name: &str, causes: Vec<(String, String)>) -> Self {
        let summary: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        // Go's aggregate error: one as it is, several in brackets.
        let summary = match summary.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut e = Self::new(422, "Invalid", format!("{kind} \"{name}\" is invalid: {summary}"));
        e.causes = causes;
        e.details = Some((kind.to_string(), name.to_string()));
        e
    }

    /// A request whose credentials the server does not accept.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// A refusal with a reason a ValidatingAdmissionPolicy's validation names, and its code.
    pub fn with_reason(reason: &str, message: String) -> Self {
        let (code, reason) = match reason {
            "Unauthorized" => (401, "Unauthorized"),
            "Forbidden" => (403, "Forbidden"),
            "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
            _ => (422, "Invalid"),
        };
        Self::new(code, reason, message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("the request body is larger than {limit} bytes"))
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn too_many_requests() -> Self {
        Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        )
    }

    pub fn to_status(&self) -> Value {
        let mut details = json!({});
        if let Some((kind, name)) = &self.details {
            details["kind"] = kind.clone().into();
            details["name"] = name.clone().into();
        }
        if !self.causes.is_empty() {
            details["causes"] = self
                .causes
                .iter()
                .map(|(f, m)| json!({"reason": self.cause_reason.as_str(), "field": f, "message": m}))
                .collect();
        }
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
               "reason": self.reason, "details": details, "code": self.code})
    }
}
