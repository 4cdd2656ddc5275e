//! Objects walked as structured-merge-diff walks them for server-side apply: the field set a
//! value makes, what changed between two values, an applied configuration merged into a live
//! object, and fields removed by a set.
//!
//! How a value merges depends on its type. CRD kinds carry a schema: `x-kubernetes-list-type`
//! `map` (items merged by their `x-kubernetes-list-map-keys`), `set` (by value) or `atomic` (the
//! default for an unannotated CRD list); `x-kubernetes-map-type: atomic` objects are replaced
//! whole; `additionalProperties` objects are maps whose entries are owned one by one. Built-in
//! kinds have no schema here: lists with a strategic-merge key ([`crate::patch`]) are
//! associative on it, other lists atomic. `metadata` is ObjectMeta for every kind: granular
//! labels and annotations, finalizers a set, ownerReferences keyed by uid.
//!
//! Every walk is depth-checked against [`MAX_DEPTH`]; bodies are bounded below it anyway.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};

use kube_conventions::patch::merge_key;

use super::fields::{FieldSet, MAX_DEPTH, PathElement, json_eq, path_string};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TypedError {
    #[error(
        "{path}: associative list with keys has an element that omits key field {key:?} (and doesn't have default value)"
    )]
    MissingKey { path: String, key: String },
    #[error("{0}: associative list with keys may not have non-map elements")]
    NonMapItem(String),
    #[error("{0}: duplicate entries for key")]
    Duplicate(String),
    #[error("nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
}

/// What a place in an object is, for merging and ownership.
#[derive(Debug, Clone, Copy)]
pub enum Ty<'s> {
    /// The object itself: `metadata` is ObjectMeta, the rest as the schema (or built-in) says.
    Root(Option<&'s Value>),
    /// A node of a CRD's openAPIV3Schema.
    Schema(&'s Value),
    /// A built-in kind's value; lists here are keyed by this strategic-merge key, if any.
    Builtin(Option<&'static str>),
    Meta,
    /// A list of scalars merged by value (finalizers).
    Set,
    /// No schema (`x-kubernetes-preserve-unknown-fields`, labels): maps granular, lists atomic.
    Deduced,
}

/// How a value at a place merges.
#[derive(Debug, Clone, PartialEq)]
enum Shape<'s> {
    /// Scalars, atomic lists and maps: replaced whole, owned as one field.
    Leaf,
    Map,
    /// An associative list: key fields and their schema defaults.
    Keyed(Vec<(&'s str, Option<&'s Value>)>),
    Set,
}

impl<'s> Ty<'s> {
    fn shape(self, v: &Value) -> Shape<'s> {
        match v {
            Value::Object(_) if self.atomic_map() => Shape::Leaf,
            Value::Object(_) => Shape::Map,
            Value::Array(_) => self.list_shape(),
            _ => Shape::Leaf,
        }
    }

    fn atomic_map(self) -> bool {
        matches!(self, Ty::Schema(s) if s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"))
    }

    fn list_shape(self) -> Shape<'s> {
        match self {
            Ty::Schema(s) => match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => {
                    let keys: Vec<(&'s str, Option<&'s Value>)> = s
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(|k| (k, s.pointer("/items/properties").and_then(|p| p.get(k)?.get("default"))))
                        .collect();
                    if keys.is_empty() { Shape::Leaf } else { Shape::Keyed(keys) }
                }
                Some("set") => Shape::Set,
                _ => Shape::Leaf,
            },
            Ty::Builtin(Some(key)) => Shape::Keyed(vec![(key, None)]),
            Ty::Set => Shape::Set,
            _ => Shape::Leaf,
        }
    }

    /// The type of field `k` of a map here, and whether it is a named (struct) field: a named
    /// field is owned through its leaves, a map entry is owned itself.
    pub fn field(self, k: &str) -> (Ty<'s>, bool) {
        match self {
            Ty::Root(_) if k == "metadata" => (Ty::Meta, true),
            Ty::Root(Some(s)) => Ty::Schema(s).field(k),
            Ty::Root(None) | Ty::Builtin(_) => (Ty::Builtin(merge_key(k)), true),
            Ty::Schema(s) => {
                if let Some(p) = s.get("properties").and_then(|p| p.get(k)) {
                    return (Ty::Schema(p), true);
                }
                match s.get("additionalProperties") {
                    Some(a @ Value::Object(_)) => (Ty::Schema(a), false),
                    _ => (Ty::Deduced, false),
                }
            }
            Ty::Meta => {
                let t = match k {
                    "labels" | "annotations" => Ty::Deduced,
                    "finalizers" => Ty::Set,
                    "ownerReferences" => Ty::Builtin(Some("uid")),
                    _ => Ty::Builtin(None),
                };
                (t, true)
            }
            Ty::Set | Ty::Deduced => (Ty::Deduced, false),
        }
    }

    /// The type of a list's items.
    pub fn item(self) -> Ty<'s> {
        match self {
            Ty::Schema(s) => s.get("items").filter(|i| i.is_object()).map_or(Ty::Deduced, Ty::Schema),
            Ty::Builtin(_) => Ty::Builtin(None),
            _ => Ty::Deduced,
        }
    }
}

/// The path element of a list item: its keys, or its value.
fn item_pe(shape: &Shape<'_>, item: &Value, path: &[PathElement]) -> Result<PathElement, TypedError> {
    let Shape::Keyed(keys) = shape else { return Ok(PathElement::Value(item.clone())) };
    let obj = item.as_object().ok_or_else(|| TypedError::NonMapItem(path_string(path)))?;
    let mut fields = Vec::with_capacity(keys.len());
    for (k, default) in keys {
        let v = obj
            .get(*k)
            .filter(|v| !v.is_null())
            .or(*default)
            .ok_or_else(|| TypedError::MissingKey { path: path_string(path), key: k.to_string() })?;
        fields.push((k.to_string(), v.clone()));
    }
    Ok(PathElement::key(fields))
}

fn check_depth(path: &[PathElement]) -> Result<(), TypedError> {
    if path.len() > MAX_DEPTH { Err(TypedError::TooDeep) } else { Ok(()) }
}

/// The fields a value sets: what an applier of it owns.
pub fn field_set(v: &Value, ty: Ty<'_>) -> Result<FieldSet, TypedError> {
    let mut set = FieldSet::default();
    set_of(v, ty, &mut Vec::new(), &mut set)?;
    Ok(set)
}

fn set_of(v: &Value, ty: Ty<'_>, path: &mut Vec<PathElement>, set: &mut FieldSet) -> Result<(), TypedError> {
    check_depth(path)?;
    match (ty.shape(v), v) {
        (Shape::Map, Value::Object(m)) => {
            for (k, child) in m {
                let (cty, named) = ty.field(k);
                path.push(PathElement::field(k));
                set_of(child, cty, path, set)?;
                // A map's entry is owned itself; a struct's field only through what it holds,
                // unless it holds nothing.
                if child.is_null() || child.as_object().is_some_and(Map::is_empty) || !named {
                    set.insert(path);
                }
                path.pop();
            }
        }
        (shape @ (Shape::Keyed(_) | Shape::Set), Value::Array(items)) => {
            let pes = items.iter().map(|i| item_pe(&shape, i, path)).collect::<Result<Vec<_>, _>>()?;
            let mut seen = BTreeMap::<&PathElement, usize>::new();
            pes.iter().for_each(|pe| *seen.entry(pe).or_default() += 1);
            for (item, pe) in items.iter().zip(&pes) {
                path.push(pe.clone());
                // Duplicated items are owned as one, not item by item.
                if seen.get(pe).is_none_or(|n| *n < 2) {
                    set_of(item, ty.item(), path, set)?;
                }
                set.insert(path);
                path.pop();
            }
        }
        _ => set.insert(path),
    }
    Ok(())
}

/// What changed between two values: added, modified (leaves only) and removed paths. Added and
/// removed name every level of a new or removed subtree.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    pub fn is_same(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }
}

/// What changed from `old` to `new`, `metadata.managedFields` left out.
pub fn compare(old: &Value, new: &Value, ty: Ty<'_>) -> Result<Comparison, TypedError> {
    compare_except(old, new, ty, &FieldSet::default())
}

/// [`compare`] with the fields of `except` and everything under them left out (each set's
/// `recursive_difference` with `except`), without walking them: a status write's comparison
/// skips the spec (its reset field) rather than comparing the whole spec to itself. `except`
/// names fields reached from the root through maps alone, as reset fields are: members under a
/// list's items are not looked for.
pub fn compare_except(old: &Value, new: &Value, ty: Ty<'_>, except: &FieldSet) -> Result<Comparison, TypedError> {
    let mut c = Comparison::default();
    compare_in(Some(old), Some(new), ty, Some(except), &mut Vec::new(), &mut c)?;
    Ok(c)
}

/// The shape two values of one place merge by: a value that changed kind is a leaf.
fn pair_shape<'s>(l: Option<&Value>, r: Option<&Value>, ty: Ty<'s>) -> Shape<'s> {
    fn kind(v: &Value) -> u8 {
        match v {
            Value::Object(_) => 0,
            Value::Array(_) => 1,
            _ => 2,
        }
    }
    match (l, r) {
        (Some(a), Some(b)) if kind(a) != kind(b) => Shape::Leaf,
        (Some(v), _) | (None, Some(v)) => ty.shape(v),
        (None, None) => Shape::Leaf,
    }
}

fn empty_map(v: Option<&Value>) -> bool {
    v.and_then(Value::as_object).is_none_or(Map::is_empty)
}

fn empty_list(v: Option<&Value>) -> bool {
    v.and_then(Value::as_array).is_none_or(Vec::is_empty)
}

fn compare_in(
    l: Option<&Value>,
    r: Option<&Value>,
    ty: Ty<'_>,
    except: Option<&FieldSet>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
) -> Result<(), TypedError> {
    check_depth(path)?;
    let leaf = match pair_shape(l, r, ty) {
        // Empty and absent maps and lists compare as leaves, keeping `{}` apart from absent.
        Shape::Map if !(empty_map(l) && empty_map(r)) => {
            let (lm, rm) = (l.and_then(Value::as_object), r.and_then(Value::as_object));
            let keys: BTreeSet<&String> = lm.into_iter().chain(rm).flat_map(Map::keys).collect();
            // metadata.managedFields is never compared (nor owned): skipped here rather than
            // both objects copied without it on every write.
            let in_metadata = path.len() == 1 && path[0] == PathElement::field("metadata");
            for k in keys.into_iter().filter(|k| !(in_metadata && *k == "managedFields")) {
                let pe = PathElement::field(k);
                if except.is_some_and(|e| e.has_member(&pe)) {
                    continue;
                }
                let under = except.and_then(|e| e.child(&pe));
                path.push(pe);
                compare_in(lm.and_then(|m| m.get(k)), rm.and_then(|m| m.get(k)), ty.field(k).0, under, path, c)?;
                path.pop();
            }
            false
        }
        shape @ (Shape::Keyed(_) | Shape::Set) if !(empty_list(l) && empty_list(r)) => {
            compare_items(&shape, l, r, ty, path, c)?;
            false
        }
        _ => {
            compare_leaf(l, r, path, c);
            true
        }
    };
    if !leaf {
        match (l, r) {
            (None, _) => c.added.insert(path),
            (_, None) => c.removed.insert(path),
            _ => {}
        }
    }
    Ok(())
}

fn compare_leaf(l: Option<&Value>, r: Option<&Value>, path: &[PathElement], c: &mut Comparison) {
    match (l, r) {
        (None, _) => c.added.insert(path),
        (_, None) => c.removed.insert(path),
        (Some(a), Some(b)) if !json_eq(a, b) => c.modified.insert(path),
        _ => {}
    }
}

/// A list's items by path element, in order of first appearance, duplicates kept together.
type Items<'v> = (Vec<PathElement>, BTreeMap<PathElement, Vec<&'v Value>>);

fn index_items<'v>(shape: &Shape<'_>, list: Option<&'v Value>, path: &[PathElement]) -> Result<Items<'v>, TypedError> {
    let mut order = Vec::new();
    let mut by_pe: BTreeMap<PathElement, Vec<&'v Value>> = BTreeMap::new();
    for item in list.and_then(Value::as_array).into_iter().flatten() {
        let pe = item_pe(shape, item, path)?;
        let entry = by_pe.entry(pe.clone()).or_default();
        if entry.is_empty() {
            order.push(pe);
        }
        entry.push(item);
    }
    Ok((order, by_pe))
}

fn compare_items(
    shape: &Shape<'_>,
    l: Option<&Value>,
    r: Option<&Value>,
    ty: Ty<'_>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
) -> Result<(), TypedError> {
    let (l_order, l_items) = index_items(shape, l, path)?;
    let (r_order, r_items) = index_items(shape, r, path)?;
    let all: Vec<PathElement> =
        l_order.into_iter().chain(r_order.into_iter().filter(|pe| !l_items.contains_key(pe))).collect();
    for pe in all {
        let ls = l_items.get(&pe).map_or(&[][..], Vec::as_slice);
        let rs = r_items.get(&pe).map_or(&[][..], Vec::as_slice);
        path.push(pe);
        match (ls.len(), rs.len()) {
            (0 | 1, 0 | 1) => compare_in(ls.first().copied(), rs.first().copied(), ty.item(), None, path, c)?,
            // Duplicates on both sides compare as one atomic value.
            (_, 2..) if ls.len() >= 2 => {
                if ls.len() != rs.len() || ls.iter().zip(rs).any(|(a, b)| !json_eq(a, b)) {
                    c.modified.insert(path);
                }
            }
            (2.., _) => {
                if let Some(r0) = rs.first() {
                    compare_in(None, Some(r0), ty.item(), None, path, c)?;
                }
                c.removed.insert(path);
            }
            _ => {
                if let Some(l0) = ls.first() {
                    compare_in(Some(l0), None, ty.item(), None, path, c)?;
                }
                c.added.insert(path);
            }
        }
        path.pop();
    }
    Ok(())
}

/// The applied configuration `config` merged into `live`: maps key by key, associative lists
/// item by item (by keys or by value), leaves and atomic values replaced. A `null` in the
/// configuration removes the field, as it ends up on the real server.
pub fn merge(live: &Value, config: &Value, ty: Ty<'_>) -> Result<Value, TypedError> {
    Ok(merge_in(Some(live), Some(config), ty, &mut Vec::new())?.unwrap_or_else(|| Value::Object(Map::new())))
}

fn keep_config(l: Option<&Value>, r: Option<&Value>) -> Option<Value> {
    match r {
        Some(Value::Null) => None,
        Some(v) => Some(v.clone()),
        None => l.cloned(),
    }
}

fn merge_in(
    l: Option<&Value>,
    r: Option<&Value>,
    ty: Ty<'_>,
    path: &mut Vec<PathElement>,
) -> Result<Option<Value>, TypedError> {
    check_depth(path)?;
    // What the configuration does not name stays as it is.
    if r.is_none() {
        return Ok(l.cloned());
    }
    Ok(match pair_shape(l, r, ty) {
        Shape::Map if !(empty_map(l) && empty_map(r)) => {
            let (lm, rm) = (l.and_then(Value::as_object), r.and_then(Value::as_object));
            let keys: BTreeSet<&String> = lm.into_iter().chain(rm).flat_map(Map::keys).collect();
            let mut out = Map::new();
            for k in keys {
                path.push(PathElement::field(k));
                if let Some(v) = merge_in(lm.and_then(|m| m.get(k)), rm.and_then(|m| m.get(k)), ty.field(k).0, path)? {
                    out.insert(k.clone(), v);
                }
                path.pop();
            }
            Some(Value::Object(out))
        }
        shape @ (Shape::Keyed(_) | Shape::Set) if !(empty_list(l) && empty_list(r)) => {
            Some(Value::Array(merge_items(&shape, l, r, ty, path)?))
        }
        _ => keep_config(l, r),
    })
}

/// Associative lists merged in structured-merge-diff's order: the live items keep their places,
/// the configuration's items that are shared keep the configuration's order among themselves,
/// and new items follow the configuration.
fn merge_items(
    shape: &Shape<'_>,
    l: Option<&Value>,
    r: Option<&Value>,
    ty: Ty<'_>,
    path: &mut Vec<PathElement>,
) -> Result<Vec<Value>, TypedError> {
    let l_list: &[Value] = l.and_then(Value::as_array).map_or(&[], Vec::as_slice);
    let r_list: &[Value] = r.and_then(Value::as_array).map_or(&[], Vec::as_slice);
    let r_pes = r_list.iter().map(|i| item_pe(shape, i, path)).collect::<Result<Vec<_>, _>>()?;
    let mut r_items = BTreeMap::new();
    for (pe, item) in r_pes.iter().zip(r_list) {
        if r_items.insert(pe, item).is_some() {
            path.push(pe.clone());
            return Err(TypedError::Duplicate(path_string(path)));
        }
    }
    let l_pes = l_list.iter().map(|i| item_pe(shape, i, path)).collect::<Result<Vec<_>, _>>()?;
    // A live item whose key repeats merges as nothing: the configuration's item replaces it.
    let mut l_items: BTreeMap<&PathElement, Option<&Value>> = BTreeMap::new();
    for (pe, item) in l_pes.iter().zip(l_list) {
        l_items.entry(pe).and_modify(|v| *v = None).or_insert(Some(item));
    }
    let mut shared: VecDeque<&PathElement> = r_pes.iter().filter(|pe| l_items.contains_key(pe)).collect();
    let mut next_shared = shared.pop_front();
    let mut merged_r = BTreeSet::new();
    let mut out = Vec::with_capacity(l_list.len().max(r_list.len()));
    let (mut li, mut ri) = (0, 0);
    let merge_one = |pe: &PathElement, path: &mut Vec<PathElement>| {
        path.push(pe.clone());
        let merged = merge_in(l_items.get(pe).copied().flatten(), r_items.get(pe).copied(), ty.item(), path);
        path.pop();
        merged
    };
    while li < l_pes.len() || ri < r_pes.len() {
        if li < l_pes.len() && ri < r_pes.len() {
            let pe = &l_pes[li];
            if *pe == r_pes[ri] {
                merged_r.insert(pe);
                out.extend(merge_one(pe, path)?);
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if r_items.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                // A shared item, but not the one whose turn it is.
                li += 1;
                continue;
            }
        }
        if li < l_pes.len() {
            let pe = &l_pes[li];
            if !r_items.contains_key(pe) {
                out.push(l_list[li].clone());
                li += 1;
                continue;
            } else if merged_r.contains(pe) {
                li += 1;
            }
        }
        if ri < r_pes.len() {
            let pe = &r_pes[ri];
            merged_r.insert(pe);
            out.extend(merge_one(pe, path)?);
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    Ok(out)
}

/// `v` without the fields of `set` (a member goes with everything under it). A map or list left
/// empty goes too.
pub fn remove_items(v: &Value, set: &FieldSet, ty: Ty<'_>) -> Value {
    remove_in(v, set, ty).unwrap_or_else(|| Value::Object(Map::new()))
}

fn remove_in(v: &Value, set: &FieldSet, ty: Ty<'_>) -> Option<Value> {
    match (ty.shape(v), v) {
        (Shape::Map, Value::Object(m)) if !m.is_empty() => {
            let mut out = Map::new();
            for (k, child) in m {
                let pe = PathElement::field(k);
                if set.has_member(&pe) {
                    continue;
                }
                let kept = match set.child(&pe) {
                    Some(sub) => remove_in(child, sub, ty.field(k).0),
                    None => Some(child.clone()),
                };
                if let Some(kept) = kept {
                    out.insert(k.clone(), kept);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (shape @ (Shape::Keyed(_) | Shape::Set), Value::Array(items)) if !items.is_empty() => {
            let mut out = Vec::new();
            for item in items {
                // Items of a live object always have their keys; one without is kept.
                let Ok(pe) = item_pe(&shape, item, &[]) else {
                    out.push(item.clone());
                    continue;
                };
                if set.has_member(&pe) {
                    continue;
                }
                let kept = match set.child(&pe) {
                    Some(sub) => remove_in(item, sub, ty.item()),
                    None => Some(item.clone()),
                };
                out.extend(kept);
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(v.clone()),
    }
}

/// `set` with every named (struct) field that has members under it made a member itself, so
/// that removing the set removes structs nobody owns anything in any more.
pub fn ensure_named_members(set: &FieldSet, ty: Ty<'_>) -> FieldSet {
    let mut out = FieldSet::default();
    for pe in set.members() {
        out.add_member(pe.clone());
    }
    for (pe, child) in set.children() {
        let cty = match pe {
            PathElement::Field(name) => {
                let (t, named) = ty.field(name);
                if named {
                    out.add_member(pe.clone());
                }
                t
            }
            _ => ty.item(),
        };
        out.set_child(pe.clone(), ensure_named_members(child, cty));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "x": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "sel": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
                "flavors": {"type": "object", "additionalProperties": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "properties": {
                              "port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"},
                              "name": {"type": "string"}}}}}},
            "status": {"type": "object", "properties": {
                "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                               "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}}}})
    }

    fn paths(set: &FieldSet) -> Vec<String> {
        set.paths().iter().map(|p| path_string(p)).collect()
    }

    #[test]
    fn an_applied_configuration_owns_leaves_items_and_map_entries() {
        let s = schema();
        let config = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "labels": {"app": "x"}, "finalizers": ["f"]},
            "spec": {"x": "1", "tags": ["a", "b"], "set": ["p"], "sel": {"k": "v"}, "flavors": {"cpu": {"n": 1}},
                     "ports": [{"port": 80}], "empty": {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let set = field_set(&config, Ty::Root(Some(&s))).expect("set");
        assert_eq!(
            set.to_fields_v1_string(),
            concat!(
                r#"{"f:apiVersion":{},"f:kind":{},"f:metadata":{"f:finalizers":{"v:\"f\"":{}},"f:labels":{"f:app":{}},"f:name":{}},"#,
                r#""f:spec":{"f:empty":{},"f:flavors":{"f:cpu":{".":{},"f:n":{}}},"#,
                r#""f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{}}},"f:sel":{},"f:set":{"v:\"p\"":{}},"f:tags":{},"f:x":{}},"#,
                r#""f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{},"f:type":{}}}}}"#
            ),
            "atomic lists and maps are leaves, keyed items and map entries members, a missing key takes its default"
        );
        let bad = json!({"spec": {"ports": [{"name": "no-port"}]}});
        assert!(matches!(field_set(&bad, Ty::Root(Some(&s))), Err(TypedError::MissingKey { .. })));
    }

    #[test]
    fn built_in_kinds_key_lists_by_their_strategic_merge_keys() {
        let pod = json!({"spec": {"containers": [{"name": "c", "image": "i", "args": ["a"]}], "tolerations": [{"key": "t"}]}});
        let set = field_set(&pod, Ty::Root(None)).expect("set");
        assert_eq!(
            paths(&set),
            vec![
                ".spec.tolerations",
                r#".spec.containers[name="c"]"#,
                r#".spec.containers[name="c"].args"#,
                r#".spec.containers[name="c"].image"#,
                r#".spec.containers[name="c"].name"#,
            ]
        );
    }

    #[test]
    fn comparing_except_fields_is_comparing_all_then_dropping_them() {
        let s = schema();
        let old = json!({"metadata": {"name": "a", "labels": {"app": "x", "gone": "y"}},
            "spec": {"x": "1", "tags": ["a"], "ports": [{"port": 80}], "flavors": {"cpu": {"n": 1}}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let new = json!({"metadata": {"name": "a", "labels": {"app": "z"}, "annotations": {"n": "1"}},
            "spec": {"x": "2", "tags": ["a", "b"], "ports": [{"port": 81}], "more": {"k": "v"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}});
        let set = |paths: &[&[&str]]| {
            let mut f = FieldSet::default();
            for p in paths {
                f.insert(&p.iter().map(|k| PathElement::field(k)).collect::<Vec<_>>());
            }
            f
        };
        let excepts = [
            set(&[]),
            set(&[&["spec"]]),
            set(&[&["status"]]),
            set(&[&["metadata", "labels"], &["spec", "more"], &["spec", "flavors", "cpu"]]),
            set(&[&["status", "phase"], &["spec", "tags"], &["nothing", "here"]]),
        ];
        let ty = Ty::Root(Some(&s));
        let all = compare(&old, &new, ty).expect("compare");
        for except in &excepts {
            let dropped = Comparison {
                added: all.added.recursive_difference(except),
                modified: all.modified.recursive_difference(except),
                removed: all.removed.recursive_difference(except),
            };
            let skipped = compare_except(&old, &new, ty, except).expect("compare");
            assert_eq!(skipped, dropped, "except {:?}", paths(except));
            for (whole, cut) in
                [(&all.added, &dropped.added), (&all.modified, &dropped.modified), (&all.removed, &dropped.removed)]
            {
                let mut in_place = whole.clone();
                in_place.remove_recursive(except);
                assert_eq!(&in_place, cut, "in place, except {:?}", paths(except));
            }
        }
        // There is something to leave out each time: the test compares more than empty sets.
        assert!(paths(&all.modified).iter().any(|p| p.starts_with(".spec")));
        assert!(paths(&all.added).iter().any(|p| p.starts_with(".status")));
        assert!(paths(&all.removed).iter().any(|p| p.starts_with(".metadata.labels")));
    }

    #[test]
    fn compare_names_added_modified_and_removed_fields() {
        let s = schema();
        let old = json!({"spec": {"x": "1", "tags": ["a"], "ports": [{"port": 80, "name": "http"}]},
                         "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}});
        let new = json!({"spec": {"x": "2", "tags": ["a"], "ports": [{"port": 80, "name": "web"}], "sel": {"k": "v"}},
                         "status": {"conditions": [{"type": "B", "status": "False"}]}});
        let c = compare(&old, &new, Ty::Root(Some(&s))).expect("compare");
        assert_eq!(paths(&c.added), vec![".spec.sel"]);
        assert_eq!(
            paths(&c.modified),
            vec![".spec.x", r#".spec.ports[port=80,protocol="TCP"].name"#, r#".status.conditions[type="B"].status"#]
        );
        assert_eq!(
            paths(&c.removed),
            vec![
                r#".status.conditions[type="A"]"#,
                r#".status.conditions[type="A"].status"#,
                r#".status.conditions[type="A"].type"#
            ]
        );
        let created =
            compare(&json!({}), &json!({"metadata": {"labels": {"a": "1"}}}), Ty::Root(None)).expect("compare");
        assert_eq!(
            created.added.to_fields_v1_string(),
            r#"{"f:metadata":{".":{},"f:labels":{".":{},"f:a":{}}}}"#,
            "a create owns every level it adds"
        );
        assert!(compare(&old, &old, Ty::Root(Some(&s))).expect("same").is_same());
        // managedFields are never compared: ownership of them is not a change of the object;
        // a field of that name elsewhere is an ordinary field.
        let owned = |m: Value| json!({"metadata": {"name": "a", "managedFields": m}, "spec": {"x": "1"}});
        let recorded = compare(&owned(json!([])), &owned(json!([{"manager": "m"}])), Ty::Root(Some(&s)));
        assert!(recorded.expect("compare").is_same());
        let elsewhere = compare(&json!({"spec": {}}), &json!({"spec": {"managedFields": "x"}}), Ty::Root(None));
        assert_eq!(paths(&elsewhere.expect("compare").added), vec![".spec.managedFields"]);
    }

    #[test]
    fn merge_follows_list_types_and_keeps_item_order() {
        let s = schema();
        let live = json!({"spec": {"x": "1", "tags": ["a", "b"], "set": ["p", "q"], "sel": {"a": "1"},
                                   "ports": [{"port": 1, "name": "one"}, {"port": 2}, {"port": 3}]},
                          "status": {"conditions": [{"type": "A", "status": "True"}]}});
        let config = json!({"spec": {"x": null, "tags": ["c"], "set": ["r", "p"], "sel": {"b": "2"},
                                     "ports": [{"port": 3, "name": "three"}, {"port": 4}, {"port": 1}]},
                            "status": {"conditions": [{"type": "B", "status": "False"}]}});
        let merged = merge(&live, &config, Ty::Root(Some(&s))).expect("merge");
        assert_eq!(
            merged,
            json!({"spec": {"tags": ["c"], "set": ["r", "p", "q"], "sel": {"b": "2"},
                            "ports": [{"port": 2}, {"port": 3, "name": "three"}, {"port": 4}, {"port": 1, "name": "one"}]},
                   "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}}),
            "atomic values replaced, null removes, keyed and set items merged by identity"
        );
        let dup = json!({"status": {"conditions": [{"type": "A"}, {"type": "A"}]}});
        assert!(matches!(merge(&live, &dup, Ty::Root(Some(&s))), Err(TypedError::Duplicate(_))));
    }

    #[test]
    fn removing_a_set_takes_unowned_structs_along() {
        let s = schema();
        let obj = json!({"metadata": {"name": "a"}, "spec": {"x": "1", "ports": [{"port": 1}, {"port": 2}]},
                         "status": {"conditions": [{"type": "A", "status": "True"}]}});
        let mut set = FieldSet::default();
        set.insert(&[PathElement::field("spec"), PathElement::field("x")]);
        set.insert(&[
            PathElement::field("status"),
            PathElement::field("conditions"),
            PathElement::key(vec![("type".into(), json!("A"))]),
            PathElement::field("status"),
        ]);
        let named = ensure_named_members(&set, Ty::Root(Some(&s)));
        assert!(
            named.has(&[PathElement::field("spec")])
                && named.has(&[PathElement::field("status"), PathElement::field("conditions")])
        );
        assert_eq!(remove_items(&obj, &named, Ty::Root(Some(&s))), json!({"metadata": {"name": "a"}}));
        assert_eq!(
            remove_items(&obj, &set, Ty::Root(Some(&s))),
            json!({"metadata": {"name": "a"}, "spec": {"ports": [{"port": 1}, {"port": 2}]},
                   "status": {"conditions": [{"type": "A"}]}})
        );
    }

    #[test]
    fn walks_refuse_values_deeper_than_the_limit() {
        let mut deep = json!("leaf");
        for _ in 0..MAX_DEPTH + 5 {
            deep = json!({ "a": deep });
        }
        assert_eq!(field_set(&deep, Ty::Deduced), Err(TypedError::TooDeep));
        assert_eq!(compare(&deep, &json!({}), Ty::Deduced).map(|_| ()), Err(TypedError::TooDeep));
        assert_eq!(merge(&deep, &deep, Ty::Deduced).map(|_| ()), Err(TypedError::TooDeep));
    }
}
