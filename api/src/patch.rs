//! Kubernetes strategic merge patch on JSON, for the fields a TrainJob's `runtimePatches` may
//! touch: lists of named things merge by their key, maps merge, `null` deletes, anything else
//! replaces (tolerations among them, as upstream).

use serde_json::{Map, Value};

/// The merge key of a list field, by the field's name (Kubernetes' `patchMergeKey`).
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "replicatedJobs" | "containers" | "initContainers" | "env" | "volumes" | "imagePullSecrets" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

pub fn merge(target: &mut Value, patch: &Value) {
    merge_in(target, patch, None);
}

fn merge_in(target: &mut Value, patch: &Value, field: Option<&str>) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => merge_maps(t, p),
        (Value::Array(t), Value::Array(p)) if field.and_then(merge_key).is_some() => {
            let key = field.and_then(merge_key).unwrap_or("name");
            for item in p {
                let id = item.get(key);
                match t.iter_mut().find(|x| id.is_some() && x.get(key) == id) {
                    Some(existing) => merge_in(existing, item, None),
                    None => t.push(item.clone()),
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn merge_maps(t: &mut Map<String, Value>, p: &Map<String, Value>) {
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match t.get_mut(k) {
            Some(existing) if existing.is_object() || existing.is_array() => merge_in(existing, v, Some(k)),
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn named_lists_merge_by_key_and_others_replace() {
        let mut t = json!({"replicatedJobs": [
            {"name": "a", "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "node", "image": "x", "env": [{"name": "A", "value": "1"}]}],
                "tolerations": [{"key": "old"}]}}}}},
            {"name": "b"}]});
        let p = json!({"replicatedJobs": [
            {"name": "a", "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "node", "env": [{"name": "B", "value": "2"}]}],
                "tolerations": [{"key": "new"}], "nodeSelector": {"k": "v"}}}}}}]});
        merge(&mut t, &p);
        let spec = &t["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["image"], "x");
        assert_eq!(spec["containers"][0]["env"], json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]));
        assert_eq!(spec["tolerations"], json!([{"key": "new"}]));
        assert_eq!(spec["nodeSelector"], json!({"k": "v"}));
        assert_eq!(t["replicatedJobs"][1]["name"], "b", "order kept");
    }

    #[test]
    fn null_deletes() {
        let mut t = json!({"a": {"b": 1, "c": 2}});
        merge(&mut t, &json!({"a": {"b": null}}));
        assert_eq!(t, json!({"a": {"c": 2}}));
    }
}
