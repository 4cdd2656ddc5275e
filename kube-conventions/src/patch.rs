//! Strategic merge patch on JSON, as kube-apiserver applies one to a built-in kind and Trainer
//! applies a TrainJob's `runtimePatches` to its runtime's JobSet spec: maps merge, `null`
//! deletes, lists with a merge key merge item by item, other lists and scalars replace, and
//! `$patch: replace` / `$patch: delete` replace or delete a map or a keyed list's item.

use serde_json::Value;

/// The `patchMergeKey` of a list field, by the field's name: the lists kube-apiserver merges item
/// by item under a strategic merge patch, as `k8s.io/api`'s types declare them (their
/// `+patchMergeKey` tags; `every_merge_key_of_the_core_types_is_here` holds this table to the
/// vendored `core/v1` protos), and JobSet's `replicatedJobs`, which Trainer's `runtimePatches`
/// merge by name. Lists not named here are replaced whole, as upstream does for lists without a
/// merge key (tolerations, args). One name, one key: `ports` keys containers' ports by
/// `containerPort`, the pod field patches reach; a Service's ports (by `port`) are not patched
/// strategically anywhere in Stowage.
pub fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims"
        | "resourceClaimStatuses"
        | "allocatedResourcesStatus"
        | "secrets"
        | "replicatedJobs" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "ports" => Some("containerPort"),
        "conditions" | "addresses" => Some("type"),
        "ownerReferences" => Some("uid"),
        "hostAliases" | "podIPs" | "hostIPs" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        _ => None,
    }
}

/// Strategic merge patch: as merge patch, but lists with a merge key merge item by item, and
/// `$patch: replace` / `$patch: delete` in a map replace or delete it.
pub fn strategic_merge(doc: &mut Value, patch: &Value) {
    strategic_in(doc, patch, None);
}

fn strategic_in(doc: &mut Value, patch: &Value, field: Option<&str>) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            match p.get("$patch").and_then(Value::as_str) {
                Some("replace") => {
                    *d = p.iter().filter(|(k, _)| *k != "$patch").map(|(k, v)| (k.clone(), v.clone())).collect();
                    return;
                }
                Some("delete") => {
                    d.clear();
                    return;
                }
                _ => {}
            }
            for (k, v) in p {
                if v.is_null() {
                    d.remove(k);
                    continue;
                }
                match d.get_mut(k) {
                    Some(existing) if existing.is_object() || existing.is_array() => strategic_in(existing, v, Some(k)),
                    _ => {
                        let mut fresh = if v.is_object() { Value::Object(Default::default()) } else { Value::Null };
                        strategic_in(&mut fresh, v, Some(k));
                        d.insert(k.clone(), fresh);
                    }
                }
            }
        }
        (Value::Array(d), Value::Array(p)) if field.and_then(merge_key).is_some() => {
            let key = field.and_then(merge_key).unwrap_or("name");
            for item in p {
                let id = item.get(key);
                let found = d.iter().position(|x| id.is_some() && x.get(key) == id);
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (found, delete) {
                    (Some(i), true) => {
                        d.remove(i);
                    }
                    (Some(i), false) => strategic_in(&mut d[i], item, None),
                    (None, true) => {}
                    (None, false) => d.push(item.clone()),
                }
            }
        }
        (d, p) => *d = p.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_merges_keyed_lists_and_follows_directives() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]}, {"name": "b"}],
            "tolerations": [{"key": "t1"}],
            "nodeSelector": {"old": "1", "keep": "1"}}});
        strategic_merge(
            &mut pod,
            &json!({"spec": {
                "containers": [{"name": "a", "env": [{"name": "J", "value": "2"}]},
                               {"name": "b", "$patch": "delete"}, {"name": "c", "image": "y"}],
                "tolerations": [{"key": "t2"}],
                "nodeSelector": {"$patch": "replace", "new": "1"}}}),
        );
        assert_eq!(
            pod,
            json!({"spec": {
                "containers": [{"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}, {"name": "J", "value": "2"}]},
                               {"name": "c", "image": "y"}],
                "tolerations": [{"key": "t2"}],
                "nodeSelector": {"new": "1"}}}),
            "keyed lists merge, unkeyed ones replace, directives apply"
        );
    }

    #[test]
    fn scheduling_gates_merge_by_name() {
        // A runtime's gate and one a `runtimePatches` entry adds: both stay, as upstream merges.
        let mut spec = json!({"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]});
        strategic_merge(&mut spec, &json!({"schedulingGates": [{"name": "example.com/wait"}]}));
        assert_eq!(
            spec,
            json!({"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}, {"name": "example.com/wait"}]})
        );
    }

    /// `k8s.io/api`'s `core/v1` protos (vendored in kube-mem for its protobuf codec) tag every
    /// strategically merged list with its key: each must be in the table with that key.
    #[test]
    fn every_merge_key_of_the_core_types_is_here() {
        let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../kube-mem/proto/api/core/v1/generated.proto");
        let text = std::fs::read_to_string(proto).expect("kube-mem's vendored core/v1 protos");
        let mut tagged = Vec::new();
        let mut key: Option<&str> = None;
        for line in text.lines().map(str::trim) {
            if let Some(k) = line.strip_prefix("// +patchMergeKey=") {
                key = Some(k);
            } else if let (Some(k), Some(field)) = (key, line.strip_prefix("repeated ")) {
                // `repeated Type name = N;`
                let name = field.split_whitespace().nth(1).expect("a field name");
                tagged.push((name.to_string(), k.to_string()));
                key = None;
            } else if !line.starts_with("//") && !line.is_empty() {
                key = None;
            }
        }
        assert!(tagged.len() > 25, "read the tags: {tagged:?}");
        // A Service's ports share the name with a container's (the one patches reach).
        let wrong: Vec<_> =
            tagged.iter().filter(|(f, k)| merge_key(f) != Some(k.as_str()) && !(f == "ports" && k == "port")).collect();
        assert!(wrong.is_empty(), "merge keys missing or different: {wrong:?}");
    }
}
