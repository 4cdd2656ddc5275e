//! The PATCH flavours: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge
//! patch (merge keys as Kubernetes declares them for the fields controllers use). Server-side
//! apply merges by these keys too, for built-in kinds (see [`crate::typed`]).

use serde_json::Value;

use super::status::ApiError;

/// Strategic merge patch, as kube-apiserver applies one (the one implementation, with its merge
/// keys, is `kube_conventions::patch`).
pub use kube_conventions::patch::strategic_merge;

pub fn merge_patch(target: &mut Value, patch: &Value) {
    // RFC 7386: an object patch applies to an object, starting from an empty one if need be,
    // so its nulls delete rather than land.
    if patch.is_object() && !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn pointer_parts(path: &str) -> Result<Vec<String>, ApiError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path.strip_prefix('/').ok_or_else(|| ApiError::bad_request(format!("invalid JSON pointer {path:?}")))?;
    Ok(rest.split('/').map(|p| p.replace("~1", "/").replace("~0", "~")).collect())
}

fn parent<'a>(doc: &'a mut Value, parts: &[String]) -> Result<&'a mut Value, ApiError> {
    let mut cur = doc;
    for p in parts {
        cur = match cur {
            Value::Object(m) => m.get_mut(p),
            Value::Array(a) => p.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| ApiError::invalid("", "", vec![(p.clone(), "path does not exist".into())]))?;
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), ApiError> {
    let parts = pointer_parts(path)?;
    let Some((last, init)) = parts.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent(doc, init)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse().map_err(|_| ApiError::bad_request(format!("bad index in {path}")))?
            };
            if i > a.len() {
                return Err(ApiError::bad_request(format!("index out of range in {path}")));
            }
            a.insert(i, value);
        }
        _ => return Err(ApiError::bad_request(format!("cannot add at {path}"))),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, ApiError> {
    let parts = pointer_parts(path)?;
    let Some((last, init)) = parts.split_last() else { return Err(ApiError::bad_request("cannot remove the root")) };
    let missing = || ApiError::invalid("", "", vec![(path.to_string(), "path does not exist".into())]);
    match parent(doc, init)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            (i < a.len()).then(|| a.remove(i)).ok_or_else(missing)
        }
        _ => Err(missing()),
    }
}

pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), ApiError> {
    let ops = ops.as_array().ok_or_else(|| ApiError::bad_request("a JSON patch must be an array of operations"))?;
    for op in ops {
        let path = op.get("path").and_then(Value::as_str).unwrap_or("");
        let value = || {
            op.get("value").cloned().ok_or_else(|| ApiError::bad_request(format!("operation on {path} needs a value")))
        };
        match op.get("op").and_then(Value::as_str) {
            Some("add") => add(doc, path, value()?)?,
            Some("remove") => {
                remove(doc, path)?;
            }
            Some("replace") => {
                remove(doc, path)?;
                add(doc, path, value()?)?;
            }
            Some("test") => {
                let parts = pointer_parts(path)?;
                if parent(doc, &parts)? != &value()? {
                    return Err(ApiError::invalid("", "", vec![(path.to_string(), "test operation failed".into())]));
                }
            }
            Some(m @ ("move" | "copy")) => {
                let from = op.get("from").and_then(Value::as_str).unwrap_or("");
                let v = if m == "move" { remove(doc, from)? } else { parent(doc, &pointer_parts(from)?)?.clone() };
                add(doc, path, v)?;
            }
            other => return Err(ApiError::bad_request(format!("unknown JSON patch operation {other:?}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_and_json_patches_follow_their_rfcs() {
        let mut d = json!({"a": {"b": 1, "c": [1, 2]}, "x": 1});
        merge_patch(&mut d, &json!({"a": {"b": null, "c": [3]}, "y": 2}));
        assert_eq!(d, json!({"a": {"c": [3]}, "x": 1, "y": 2}));
        let mut fresh = json!({});
        merge_patch(&mut fresh, &json!({"new": {"kept": 1, "dropped": null}}));
        assert_eq!(fresh, json!({"new": {"kept": 1}}), "nulls in a new object are not stored");
        json_patch(
            &mut d,
            &json!([{"op": "add", "path": "/a/c/-", "value": 4}, {"op": "replace", "path": "/x", "value": 9},
                                   {"op": "remove", "path": "/y"}, {"op": "test", "path": "/x", "value": 9}]),
        )
        .expect("applies");
        assert_eq!(d, json!({"a": {"c": [3, 4]}, "x": 9}));
        assert!(json_patch(&mut d, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }
}
