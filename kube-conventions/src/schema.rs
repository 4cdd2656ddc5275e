//! Which fields of an object a structural schema (a CRD's `openAPIV3Schema`) declares, as the
//! API server decides what to prune or, under strict field validation, to refuse: a field is
//! declared by its parent's `properties`, or by an `additionalProperties` schema, or
//! `additionalProperties: true`; `x-kubernetes-preserve-unknown-fields: true` declares the whole
//! subtree. At the root, `apiVersion`, `kind` and `metadata` are the server's own (ObjectMeta is
//! checked apart). Written once for kube-mem (which prunes) and trainer-render (which refuses).

use std::fmt;

use serde_json::Value;

/// One step of a path into an object: a map's key or a list's index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A field the schema does not declare: where it is, and the declared sibling it may be a
/// misspelling of (within two edits, case ignored).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Undeclared {
    pub path: Vec<Step>,
    pub nearest: Option<String>,
}

/// The path as Kubernetes' field errors write it: `spec.trainer.numNode`, `spec.items[0].x`.
impl fmt::Display for Undeclared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.path.iter().enumerate() {
            match step {
                Step::Key(k) if i == 0 => f.write_str(k)?,
                Step::Key(k) => write!(f, ".{k}")?,
                Step::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Every field of `value` that `schema` does not declare, in the object's order; an undeclared
/// field's own children are not looked at.
pub fn undeclared(schema: &Value, value: &Value) -> Vec<Undeclared> {
    let mut found = Vec::new();
    walk(schema, value, &mut Vec::new(), true, &mut found);
    found
}

/// Removes the field at `path` (as [`undeclared`] gives it); what was there, if anything.
pub fn remove(value: &mut Value, path: &[Step]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut at = value;
    for step in parents {
        at = match step {
            Step::Key(k) => at.get_mut(k.as_str())?,
            Step::Index(n) => at.get_mut(*n)?,
        };
    }
    match last {
        Step::Key(k) => at.as_object_mut()?.remove(k),
        Step::Index(n) => {
            let items = at.as_array_mut()?;
            (*n < items.len()).then(|| items.remove(*n))
        }
    }
}

/// A step borrowed from the object while walking: a path is only copied for a field found.
#[derive(Clone, Copy)]
enum At<'a> {
    Key(&'a str),
    Index(usize),
}

fn walk<'a>(schema: &Value, value: &'a Value, path: &mut Vec<At<'a>>, root: bool, found: &mut Vec<Undeclared>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, v) in map {
                if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                path.push(At::Key(k));
                match (props.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) => walk(s, v, path, false, found),
                    (None, Some(s)) if s.is_object() => walk(s, v, path, false, found),
                    (None, Some(Value::Bool(true))) => {}
                    _ => found.push(Undeclared {
                        path: owned(path),
                        nearest: nearest(k, props.into_iter().flat_map(|p| p.keys().map(String::as_str))),
                    }),
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    path.push(At::Index(i));
                    walk(s, v, path, false, found);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

fn owned(path: &[At<'_>]) -> Vec<Step> {
    path.iter()
        .map(|s| match *s {
            At::Key(k) => Step::Key(k.to_string()),
            At::Index(n) => Step::Index(n),
        })
        .collect()
}

/// The name among `names` closest to `key` within two edits (case ignored), if any.
pub fn nearest<'a>(key: &str, names: impl Iterator<Item = &'a str>) -> Option<String> {
    names
        .map(|n| (edit_distance(&key.to_ascii_lowercase(), &n.to_ascii_lowercase()), n))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n.to_string())
}

/// Levenshtein distance, on bytes (field names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut diagonal = row[0];
        row[0] = i;
        for j in 1..=b.len() {
            let above = row[j];
            row[j] = (above + 1).min(row[j - 1] + 1).min(diagonal + usize::from(a[i - 1] != b[j - 1]));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "numNodes": {"type": "integer"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "additionalProperties": true},
                "opaque": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }},
        }})
    }

    #[test]
    fn finds_what_no_rule_declares_with_its_path_and_a_near_name() {
        let v = json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"anything": 1},
            "spec": {
                "numNode": 3,
                "items": [{"name": "a"}, {"name": "b", "extra": {"deep": 1}}],
                "labels": {"any": "x"},
                "free": {"any": {"thing": 1}},
                "opaque": {"any": [1, 2]},
            },
            "status": {},
        });
        let found = undeclared(&schema(), &v);
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["spec.items[1].extra", "spec.numNode", "status"]);
        assert_eq!(found[1].nearest.as_deref(), Some("numNodes"));
        assert_eq!(found[0].nearest, None, "nothing within two edits of `extra`");
    }

    #[test]
    fn removing_what_was_found_leaves_only_the_declared() {
        let mut v = json!({"spec": {"numNode": 3, "numNodes": 2, "items": [{"name": "a", "x": 1}]}, "status": 1});
        for u in undeclared(&schema(), &v) {
            assert!(remove(&mut v, &u.path).is_some(), "{u}");
        }
        assert_eq!(v, json!({"spec": {"numNodes": 2, "items": [{"name": "a"}]}}));
        assert!(undeclared(&schema(), &v).is_empty());
        assert_eq!(remove(&mut v, &[Step::Key("spec".into()), Step::Key("gone".into())]), None);
        assert_eq!(remove(&mut v, &[]), None);
    }

    #[test]
    fn a_mistyped_value_is_not_a_field_to_prune() {
        // A string where an object belongs is the schema check's to refuse, not the pruner's.
        let found = undeclared(&schema(), &json!({"spec": "text", "status": null}));
        assert_eq!(found.iter().map(ToString::to_string).collect::<Vec<_>>(), ["status"]);
    }
}
