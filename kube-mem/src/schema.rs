//! What a real API server does with a custom resource's body and its CRD's openAPIV3Schema:
//! apply defaults, drop (or, with `fieldValidation=Strict`, reject) fields the schema does not
//! declare, and reject values that break the schema with the field named.

use std::sync::Arc;

use serde_json::Value;

/// `/spec/podSets/0/name` → `spec.podSets[0].name`.
fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for part in pointer.split('/').filter(|p| !p.is_empty()) {
        if part.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&part.replace("~1", "/").replace("~0", "~"));
        }
    }
    out
}

/// Fills in `default`s of absent properties, recursively through present objects and arrays.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else { return };
            for (k, s) in props {
                if !map.contains_key(k)
                    && let Some(d) = s.get("default")
                {
                    map.insert(k.clone(), d.clone());
                }
                if let Some(v) = map.get_mut(k) {
                    apply_defaults(s, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                items.iter_mut().for_each(|v| apply_defaults(s, v));
            }
        }
        _ => {}
    }
}

/// Removes fields the schema does not declare; returns their paths. `metadata`, `apiVersion`
/// and `kind` at the top are the server's own business.
pub fn prune(schema: &Value, value: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    prune_in(schema, value, "", true, &mut removed);
    removed
}

fn prune_in(schema: &Value, value: &mut Value, path: &str, top: bool, removed: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                if top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let sub = props.and_then(|p| p.get(&k)).or(additional.filter(|a| a.is_object()));
                match (sub, additional) {
                    (Some(s), _) => {
                        if let Some(v) = map.get_mut(&k) {
                            prune_in(s, v, &at, false, removed);
                        }
                    }
                    (None, Some(Value::Bool(true))) => {}
                    _ => {
                        map.remove(&k);
                        removed.push(at);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter_mut().enumerate() {
                    prune_in(s, v, &format!("{path}[{i}]"), false, removed);
                }
            }
        }
        _ => {}
    }
}

/// The one CEL rule evaluated: transition rules of exactly `self == oldSelf` (immutability, the
/// commonest rule in the upstream CRDs). Returns (field, message) for each field that changed.
pub fn immutable_changes(schema: &Value, new: &Value, old: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    immutable_in(schema, new, old, "", &mut out);
    out
}

fn immutable_in(schema: &Value, new: &Value, old: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let rules = schema.get("x-kubernetes-validations").and_then(Value::as_array);
    for r in rules.into_iter().flatten() {
        if r.get("rule").and_then(Value::as_str).map(str::trim) == Some("self == oldSelf") && new != old {
            let message = r.get("message").and_then(Value::as_str).unwrap_or("Value is immutable");
            out.push((path.to_string(), message.to_string()));
            return;
        }
    }
    let (Some(props), Some(n), Some(o)) =
        (schema.get("properties").and_then(Value::as_object), new.as_object(), old.as_object())
    else {
        return;
    };
    for (k, sub) in props {
        if let (Some(nv), Some(ov)) = (n.get(k), o.get(k)) {
            let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            immutable_in(sub, nv, ov, &at, out);
        }
    }
}

/// The schema's validator, compiled once per distinct schema: compiling a CRD's schema costs
/// far more than validating an object against it.
fn compiled(schema: &Arc<Value>) -> Option<Arc<jsonschema::Validator>> {
    type Cache = std::sync::Mutex<Vec<(Arc<Value>, Arc<jsonschema::Validator>)>>;
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    // The same shared schema first: comparing whole schemas on every write showed in profiles.
    let mut entries = cache.lock().ok()?;
    if let Some((_, v)) = entries.iter().find(|(s, _)| Arc::ptr_eq(s, schema)) {
        return Some(v.clone());
    }
    // An equal schema read again (a CRD re-applied) shares the validator.
    let v = match entries.iter().find(|(s, _)| s == schema) {
        Some((_, v)) => v.clone(),
        None => Arc::new(jsonschema::validator_for(schema).ok()?),
    };
    entries.push((schema.clone(), v.clone()));
    Some(v)
}

/// Compiles the schema's validator ahead of the first object that needs it.
pub fn warm(schema: &Arc<Value>) {
    let _ = compiled(schema);
}

/// Schema violations as (field, message), the field as Kubernetes names it.
pub fn validate(schema: &Arc<Value>, value: &Value) -> Vec<(String, String)> {
    let Some(validator) = compiled(schema) else {
        return vec![(String::new(), "the CRD's schema does not compile".into())];
    };
    let mut causes: Vec<(String, String)> =
        validator.iter_errors(value).map(|e| (field_path(&e.instance_path.to_string()), e.to_string())).collect();
    causes.sort();
    causes.dedup();
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1},
                "mode": {"type": "string", "default": "fast"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    }

    #[test]
    fn defaults_prune_and_validate_like_an_api_server() {
        let mut v = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
                           "spec": {"size": 0, "items": [{"name": "n", "extra": 1}], "free": {"any": 1}, "typo": true}});
        apply_defaults(&schema(), &mut v);
        assert_eq!(v["spec"]["mode"], "fast");
        assert_eq!(prune(&schema(), &mut v), vec!["spec.items[0].extra".to_string(), "spec.typo".to_string()]);
        assert_eq!(v["spec"]["free"]["any"], 1);
        let causes = validate(&Arc::new(schema()), &v);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].0, "spec.size");
    }

    #[test]
    fn self_equals_old_self_makes_a_field_immutable() {
        let schema = json!({"properties": {"spec": {"properties": {
            "ref": {"type": "object", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "ref is immutable"}]},
            "free": {"type": "string"}}}}});
        let old = json!({"spec": {"ref": {"name": "a"}, "free": "x"}});
        assert!(immutable_changes(&schema, &json!({"spec": {"ref": {"name": "a"}, "free": "y"}}), &old).is_empty());
        assert_eq!(
            immutable_changes(&schema, &json!({"spec": {"ref": {"name": "b"}}}), &old),
            vec![("spec.ref".to_string(), "ref is immutable".to_string())]
        );
    }
}
