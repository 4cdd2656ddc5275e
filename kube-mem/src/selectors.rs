//! Label selectors (`a=b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`) and field selectors
//! (`metadata.name=x`, `spec.nodeName!=y`, any dotted path to a scalar) as list and watch take them.

use serde_json::Value;

use super::resources::ResourceType;
use super::status::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    labels: Vec<Req>,
    fields: Vec<Req>,
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|t| !t.is_empty()).collect()
}

fn parse_term(t: &str, what: &str) -> Result<Req, ApiError> {
    let bad = || ApiError::bad_request(format!("unable to parse requirement {t:?} in {what}"));
    // A label term with no operator, or a set with no parenthesis, in kube-apiserver's words.
    let words: Vec<&str> = t.split_whitespace().collect();
    if what == "labelSelector" && !t.contains('=') && words.len() >= 2 {
        let found = |w: &str, expected: &str| {
            ApiError::bad_request(format!("unable to parse requirement: found '{w}'{expected}"))
        };
        match words[1] {
            "in" | "notin" => {
                let next = words.get(2).copied().unwrap_or("");
                if !next.starts_with('(') {
                    return Err(found(next, " expected: '('"));
                }
            }
            w => return Err(found(w, ", expected: in, notin, =, ==, !=, gt, lt")),
        }
    }
    let set = |rest: &str| -> Result<Vec<String>, ApiError> {
        let inner = rest.trim().strip_prefix('(').and_then(|r| r.strip_suffix(')')).ok_or_else(bad)?;
        Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
    };
    if let Some((k, v)) = t.split_once("!=") {
        return Ok(Req::Ne(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
        return Ok(Req::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, rest)) = t.split_once(" notin ") {
        return Ok(Req::NotIn(k.trim().into(), set(rest)?));
    }
    if let Some((k, rest)) = t.split_once(" in ") {
        return Ok(Req::In(k.trim().into(), set(rest)?));
    }
    if let Some(k) = t.strip_prefix('!') {
        return Ok(Req::NotExists(k.trim().into()));
    }
    if t.contains(char::is_whitespace) {
        return Err(bad());
    }
    Ok(Req::Exists(t.into()))
}

impl Selector {
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, ApiError> {
        let parse = |s: Option<&str>, what| -> Result<Vec<Req>, ApiError> {
            s.map(split_terms).unwrap_or_default().into_iter().map(|t| parse_term(t, what)).collect()
        };
        Ok(Selector { labels: parse(labels, "labelSelector")?, fields: parse(fields, "fieldSelector")? })
    }

    /// Refuses a field selector the kind does not support, as kube-apiserver does: each kind
    /// answers for a few fields (a custom resource for `metadata.name`, `metadata.namespace` and
    /// its CRD's `selectableFields`), not for any path.
    pub fn check_fields(&self, rt: &ResourceType) -> Result<(), ApiError> {
        const META: [&str; 2] = ["metadata.name", "metadata.namespace"];
        let own: &[&str] = match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "pods") => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ],
            ("", "events") => &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            ("", "nodes") => &["spec.unschedulable"],
            ("", "namespaces") => &["status.phase"],
            ("", "secrets") => &["type"],
            ("", "replicationcontrollers") => &["status.replicas"],
            ("apps", "replicasets") => &["status.replicas"],
            ("batch", "jobs") => &["status.successful"],
            ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
            _ => &[],
        };
        // Kinds with fields of their own (and custom resources) say "field label not
        // supported"; the others list the two they take.
        let listed = own.is_empty() && rt.schema.is_none();
        for r in &self.fields {
            let k = r.key();
            let known = META.contains(&k) || own.contains(&k) || rt.selectable_fields.iter().any(|f| f == k);
            if !known {
                return Err(ApiError::bad_request(if listed {
                    format!("{k:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
                } else {
                    format!("field label not supported: {k}")
                }));
            }
        }
        Ok(())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let label = |k: &str| {
            obj.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str).map(str::to_string)
        };
        let field = |k: &str| {
            let ptr = format!("/{}", k.replace('.', "/"));
            obj.pointer(&ptr).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        self.labels.iter().all(|r| test(r, &label)) && self.fields.iter().all(|r| test(r, &field))
    }
}

impl Req {
    fn key(&self) -> &str {
        match self {
            Req::Eq(k, _) | Req::Ne(k, _) | Req::In(k, _) | Req::NotIn(k, _) | Req::Exists(k) | Req::NotExists(k) => k,
        }
    }
}

fn test(r: &Req, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match r {
        Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
        Req::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
        Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
        Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
        Req::Exists(k) => get(k).is_some(),
        Req::NotExists(k) => get(k).is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_and_field_selectors_match_like_kubernetes() {
        let obj = json!({"metadata": {"name": "p", "labels": {"app": "x", "tier": "gpu"}}, "spec": {"nodeName": "n1"}});
        let m = |l: Option<&str>, f: Option<&str>| Selector::parse(l, f).expect("parses").matches(&obj);
        assert!(m(Some("app=x"), None));
        assert!(m(Some("app==x,tier in (gpu, cpu)"), None));
        assert!(!m(Some("app!=x"), None));
        assert!(m(Some("!missing,app"), None));
        assert!(m(Some("tier notin (cpu)"), Some("spec.nodeName=n1,metadata.name=p")));
        assert!(!m(None, Some("spec.nodeName!=n1")));
        assert!(Selector::parse(Some("a in x"), None).is_err());
    }
}
