//! Field sets, as server-side apply tracks ownership with them (structured-merge-diff's
//! `fieldpath.Set`), and their wire form, the `fieldsV1` of a `managedFields` entry.
//!
//! A set is a tree: at each level, the path elements that are members of the set and the
//! elements under which further members lie. An element can be both (a list item that is owned
//! and has owned fields): `fieldsV1` writes that as `".": {}` among its children. Elements are
//! `f:<field>`, `k:<keys as compact JSON, sorted>` for an item of an associative list,
//! `v:<JSON>` for an item of a set-list and `i:<index>` (never produced here, read for
//! completeness).
//!
//! Sets are only ever built from request bodies (JSON and YAML parse at most
//! [`input_limits::yaml::MAX_DEPTH`] deep) or parsed from `fieldsV1` with [`MAX_DEPTH`] checked,
//! so the recursive operations below are bounded by [`MAX_DEPTH`].

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use kube_conventions::gojson;
use serde_json::{Map, Value};

/// How deep a set (or an object walked into one) may go: above any body the server accepts.
pub const MAX_DEPTH: usize = 256;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FieldsError {
    #[error("fieldsV1 must be a JSON object")]
    NotAnObject,
    #[error("parsing key as path element {0:?}: {1}")]
    BadElement(String, String),
    #[error("nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
}

/// One step of a path: a field, a list item by its keys or by its value, or an index.
#[derive(Debug, Clone)]
pub enum PathElement {
    Field(String),
    /// Key fields and values, sorted by field name.
    Key(Vec<(String, Value)>),
    Value(Value),
    Index(i64),
}

impl PathElement {
    pub fn field(name: &str) -> Self {
        PathElement::Field(name.to_string())
    }

    /// A keyed item's element; the keys are sorted, as Kubernetes writes them.
    pub fn key(mut fields: Vec<(String, Value)>) -> Self {
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        PathElement::Key(fields)
    }

    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The element as a `fieldsV1` key: `f:name`, `k:{"type":"Ready"}`, `v:"a"`, `i:0`.
    pub fn to_key(&self) -> String {
        let mut out = String::new();
        match self {
            PathElement::Field(n) => {
                out.push_str("f:");
                out.push_str(n);
            }
            PathElement::Key(fields) => {
                out.push_str("k:{");
                for (i, (name, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    gojson::write_string(&mut out, name, false);
                    out.push(':');
                    gojson::write_json(&mut out, v, MAX_DEPTH);
                }
                out.push('}');
            }
            PathElement::Value(v) => {
                out.push_str("v:");
                gojson::write_json(&mut out, v, MAX_DEPTH);
            }
            PathElement::Index(i) => {
                let _ = write!(out, "i:{i}");
            }
        }
        out
    }

    /// Parses a `fieldsV1` key; `None` for an element type this server does not know (skipped,
    /// as the real server skips them).
    pub fn from_key(key: &str) -> Result<Option<Self>, FieldsError> {
        let bad = |why: &str| FieldsError::BadElement(key.to_string(), why.to_string());
        let (kind, rest) = match (key.get(..1), key.get(1..2), key.get(2..)) {
            (Some(k), Some(":"), Some(rest)) => (k, rest),
            _ => return Err(bad("missing colon")),
        };
        Ok(Some(match kind {
            "f" => PathElement::Field(rest.to_string()),
            "v" => PathElement::Value(serde_json::from_str(rest).map_err(|e| bad(&e.to_string()))?),
            "k" => {
                let Value::Object(m) = serde_json::from_str(rest).map_err(|e| bad(&e.to_string()))? else {
                    return Err(bad("keys must be a JSON object"));
                };
                PathElement::key(m.into_iter().collect())
            }
            "i" => PathElement::Index(rest.parse().map_err(|_| bad("not an index"))?),
            _ => return Ok(None),
        }))
    }
}

impl std::fmt::Display for PathElement {
    /// As the API server prints paths in conflicts: `.spec`, `[type="Ready"]`, `[="a"]`, `[0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathElement::Field(n) => write!(f, ".{n}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={}", go_value_string(v))).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", go_value_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PathElement {
    /// structured-merge-diff's order: fields, then keys, then values, then indices.
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => compare_fields(a, b),
            (PathElement::Value(a), PathElement::Value(b)) => compare_json(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

fn compare_fields(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let c = x.0.cmp(&y.0).then_with(|| compare_json(&x.1, &y.1));
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// A total order on JSON values, structured-merge-diff's: numbers (compared as numbers), then
/// strings, booleans, lists, maps and null. Values nested past [`MAX_DEPTH`] compare equal
/// there (no body is that deep; a stored object grown so by patches must not overflow the stack).
pub fn compare_json(a: &Value, b: &Value) -> Ordering {
    compare_json_in(a, b, 0)
}

fn compare_json_in(a: &Value, b: &Value, depth: usize) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    if depth > MAX_DEPTH {
        return Ordering::Equal;
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => x.as_f64().unwrap_or(0.0).total_cmp(&y.as_f64().unwrap_or(0.0)),
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y)
            .map(|(p, q)| compare_json_in(p, q, depth + 1))
            .find(|c| c.is_ne())
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        (Value::Object(x), Value::Object(y)) => {
            // Keys in lexical order; serde_json's maps are sorted already.
            for (p, q) in x.iter().zip(y) {
                let c = p.0.cmp(q.0).then_with(|| compare_json_in(p.1, q.1, depth + 1));
                if c.is_ne() {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Whether two values are equal as the API server compares them (an integer equals the same
/// float: YAML `1.0` and a stored `1` are one value). Past [`MAX_DEPTH`], unequal.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    json_eq_in(a, b, 0)
}

fn json_eq_in(a: &Value, b: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => compare_json(a, b).is_eq(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq_in(p, q, depth + 1))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq_in(v, w, depth + 1)))
        }
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Null, Value::Null) => true,
        _ => false,
    }
}

/// Go's `value.ToString`, as conflict paths print key values: strings quoted. Key values are
/// scalars in practice; nesting past [`MAX_DEPTH`] prints as `…`.
fn go_value_string(v: &Value) -> String {
    go_value_string_in(v, 0)
}

fn go_value_string_in(v: &Value, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "…".into();
    }
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => {
            format!("[{}]", items.iter().map(|i| go_value_string_in(i, depth + 1)).collect::<Vec<_>>().join(","))
        }
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k}={}", go_value_string_in(v, depth + 1))).collect(),
        other => other.to_string(),
    }
}

/// A path from the object's root.
pub type Path = [PathElement];

/// `.status.conditions[type="Ready"].status`, as conflicts name fields.
pub fn path_string(path: &Path) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of field paths (see the module's documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    /// Never holds an empty set.
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds `path` (not its parents). The empty path, the whole object, is not tracked.
    pub fn insert(&mut self, path: &Path) {
        let Some((last, init)) = path.split_last() else { return };
        let mut node = self;
        for pe in init {
            node = node.children.entry(pe.clone()).or_default();
        }
        node.members.insert(last.clone());
    }

    pub fn has(&self, path: &Path) -> bool {
        let Some((last, init)) = path.split_last() else { return false };
        let mut node = self;
        for pe in init {
            match node.children.get(pe) {
                Some(c) => node = c,
                None => return false,
            }
        }
        node.members.contains(last)
    }

    pub fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// The paths under `pe`, without it.
    pub fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    pub fn members(&self) -> impl Iterator<Item = &PathElement> {
        self.members.iter()
    }

    pub fn children(&self) -> impl Iterator<Item = (&PathElement, &FieldSet)> {
        self.children.iter()
    }

    pub(crate) fn add_member(&mut self, pe: PathElement) {
        self.members.insert(pe);
    }

    pub(crate) fn set_child(&mut self, pe: PathElement, set: FieldSet) {
        if set.is_empty() {
            self.children.remove(&pe);
        } else {
            self.children.insert(pe, set);
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_in(other);
        out
    }

    fn union_in(&mut self, other: &FieldSet) {
        self.members.extend(other.members.iter().cloned());
        for (pe, set) in &other.children {
            self.children.entry(pe.clone()).or_default().union_in(set);
        }
    }

    /// The paths in both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out =
            FieldSet { members: self.members.intersection(&other.members).cloned().collect(), ..Default::default() };
        for (pe, set) in &self.children {
            if let Some(o) = other.children.get(pe) {
                out.set_child(pe.clone(), set.intersection(o));
            }
        }
        out
    }

    /// Adds `other`'s paths to `self`, in place (as [`FieldSet::union`]).
    pub fn add(&mut self, other: &FieldSet) {
        self.union_in(other);
    }

    /// Removes `other`'s paths from `self`, in place (as [`FieldSet::difference`]): only the
    /// levels both have are visited. A write takes its few changed fields from every other
    /// manager's entry, and a difference copied each entry whole to remove nothing from most.
    pub fn remove(&mut self, other: &FieldSet) {
        self.remove_in(other, false);
    }

    /// The paths of `self` not in `other`; a member of `other` does not take the paths under it
    /// along (see [`FieldSet::recursive_difference`] for that).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.remove(other);
        out
    }

    /// [`FieldSet::recursive_difference`] in place: what `other` does not touch is neither
    /// walked nor copied.
    pub fn remove_recursive(&mut self, other: &FieldSet) {
        self.remove_in(other, true);
    }

    /// The paths of `self` not in `other`, a member of `other` removing everything under it.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.remove_recursive(other);
        out
    }

    /// Both removals: `recursive` says whether a member of `other` also takes the paths under it.
    fn remove_in(&mut self, other: &FieldSet, recursive: bool) {
        for pe in &other.members {
            self.members.remove(pe);
            if recursive {
                self.children.remove(pe);
            }
        }
        for (pe, o) in &other.children {
            if let Some(child) = self.children.get_mut(pe) {
                child.remove_in(o, recursive);
                if child.is_empty() {
                    self.children.remove(pe);
                }
            }
        }
    }

    /// Every member path, members of a level before the levels under it, in order.
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.paths_in(&mut Vec::new(), &mut out);
        out
    }

    fn paths_in(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for pe in &self.members {
            prefix.push(pe.clone());
            out.push(prefix.clone());
            prefix.pop();
        }
        for (pe, set) in &self.children {
            prefix.push(pe.clone());
            set.paths_in(prefix, out);
            prefix.pop();
        }
    }

    /// The set as `fieldsV1`.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_level(false))
    }

    fn fields_v1_level(&self, member: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if member {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        for pe in self.members.iter().filter(|pe| !self.children.contains_key(pe)) {
            out.insert(pe.to_key(), Value::Object(Map::new()));
        }
        for (pe, set) in &self.children {
            out.insert(pe.to_key(), Value::Object(set.fields_v1_level(self.members.contains(pe))));
        }
        out
    }

    /// The set as `fieldsV1` text, byte for byte as kube-apiserver writes it (elements in
    /// structured-merge-diff's order, `.` first).
    pub fn to_fields_v1_string(&self) -> String {
        let mut out = String::new();
        self.write_level(&mut out, false);
        out
    }

    fn write_level(&self, out: &mut String, member: bool) {
        out.push('{');
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !std::mem::take(&mut first) {
                out.push(',');
            }
        };
        if member {
            sep(out);
            out.push_str("\".\":{}");
        }
        // Members and children merged in element order, as one sorted walk.
        let mut elements: Vec<&PathElement> = self.members.iter().chain(self.children.keys()).collect();
        elements.sort();
        elements.dedup();
        for pe in elements {
            sep(out);
            gojson::write_string(out, &pe.to_key(), false);
            out.push(':');
            match self.children.get(pe) {
                Some(set) => set.write_level(out, self.members.contains(pe)),
                None => out.push_str("{}"),
            }
        }
        out.push('}');
    }

    /// Reads `fieldsV1`. Unknown element types are skipped, as the real server skips them.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, FieldsError> {
        let Value::Object(m) = v else { return Err(FieldsError::NotAnObject) };
        Ok(Self::read_level(m, 0)?.0)
    }

    /// The set under one level, and whether the level is itself a member.
    fn read_level(m: &Map<String, Value>, depth: usize) -> Result<(FieldSet, bool), FieldsError> {
        if depth > MAX_DEPTH {
            return Err(FieldsError::TooDeep);
        }
        let mut set = FieldSet::default();
        let mut member = false;
        for (key, sub) in m {
            if key == "." {
                member = true;
                continue;
            }
            let Some(pe) = PathElement::from_key(key)? else { continue };
            let Value::Object(sub) = sub else { return Err(FieldsError::NotAnObject) };
            let (children, is_member) = Self::read_level(sub, depth + 1)?;
            if is_member {
                set.members.insert(pe.clone());
            }
            set.set_child(pe, children);
        }
        // A level with nothing under it is a leaf: a member.
        let member = member || set.is_empty();
        Ok((set, member))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(n: &str) -> PathElement {
        PathElement::field(n)
    }

    fn k(key: &str, v: &str) -> PathElement {
        PathElement::key(vec![(key.into(), json!(v))])
    }

    /// managedFields as kube-apiserver wrote them for a Workload's status (a keyed list, its
    /// item owned with fields of its own, a nested struct and a leaf list).
    const KUEUE: &str = r#"{"f:status":{".":{},"f:admission":{".":{},"f:clusterQueue":{},"f:podSetAssignments":{}},"f:conditions":{".":{},"k:{\"type\":\"QuotaReserved\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:nominatedClusterNames":{}}}"#;

    /// In place, `remove` and `add` leave what `difference` and `union` return, including a
    /// level emptied by the removal (dropped, as a set never holds an empty child).
    #[test]
    fn removing_and_adding_in_place_match_difference_and_union() {
        let set = |json: &str| FieldSet::from_fields_v1(&serde_json::from_str(json).expect("json")).expect("parses");
        let kueue = set(KUEUE);
        let others = [
            r#"{"f:status":{"f:admission":{"f:clusterQueue":{}}}}"#,
            r#"{"f:status":{".":{},"f:conditions":{"k:{\"type\":\"QuotaReserved\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}}}}"#,
            r#"{"f:spec":{"f:x":{}},"f:status":{"f:nominatedClusterNames":{}}}"#,
            KUEUE,
            "{}",
        ];
        for other in others.map(set) {
            let mut removed = kueue.clone();
            removed.remove(&other);
            assert_eq!(removed, kueue.difference(&other), "{}", other.to_fields_v1_string());
            let mut added = removed.clone();
            added.add(&other);
            assert_eq!(added, removed.union(&other), "{}", other.to_fields_v1_string());
        }
        let mut all_gone = kueue.clone();
        all_gone.remove(&kueue);
        assert!(all_gone.is_empty() && all_gone == FieldSet::default());
    }

    #[test]
    fn fields_v1_round_trips_byte_for_byte() {
        let v: Value = serde_json::from_str(KUEUE).expect("json");
        let set = FieldSet::from_fields_v1(&v).expect("parses");
        assert_eq!(set.to_fields_v1_string(), KUEUE);
        assert_eq!(set.to_fields_v1(), v);
        let cond = [f("status"), f("conditions"), k("type", "QuotaReserved")];
        assert!(set.has(&cond), "the item is a member");
        assert!(set.has(&[f("status"), f("conditions"), k("type", "QuotaReserved"), f("reason")]));
        assert!(set.has(&[f("status")]) && !set.has(&[f("spec")]));
    }

    #[test]
    fn keys_values_and_indices_are_written_as_kubernetes_writes_them() {
        let mut set = FieldSet::default();
        set.insert(&[
            f("spec"),
            f("ports"),
            PathElement::key(vec![("protocol".into(), json!("TCP")), ("containerPort".into(), json!(80))]),
        ]);
        set.insert(&[f("metadata"), f("finalizers"), PathElement::Value(json!("a<b"))]);
        set.insert(&[f("x"), PathElement::Index(2)]);
        let text = set.to_fields_v1_string();
        assert_eq!(
            text,
            r#"{"f:metadata":{"f:finalizers":{"v:\"a\\u003cb\"":{}}},"f:spec":{"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{}}},"f:x":{"i:2":{}}}"#
        );
        let back = FieldSet::from_fields_v1(&serde_json::from_str(&text).expect("json")).expect("parses");
        assert_eq!(back, set);
        assert_eq!(
            path_string(&[f("spec"), f("ports"), PathElement::key(vec![("containerPort".into(), json!(80))])]),
            ".spec.ports[containerPort=80]"
        );
        assert_eq!(
            path_string(&[f("status"), f("conditions"), k("type", "Ready")]),
            r#".status.conditions[type="Ready"]"#
        );
        assert_eq!(path_string(&[f("f"), PathElement::Value(json!("a"))]), r#".f[="a"]"#);
    }

    #[test]
    fn bad_fields_v1_is_an_error_and_unknown_elements_are_skipped() {
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"k:notjson": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"nocolon": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        let set = FieldSet::from_fields_v1(&json!({"x:future": {}, "f:a": {}})).expect("parses");
        assert_eq!(set.paths(), vec![vec![f("a")]]);
        // Deeper than any body: refused, not a stack overflow.
        let mut deep = json!({});
        for _ in 0..MAX_DEPTH + 5 {
            deep = json!({ "f:a": deep });
        }
        assert_eq!(FieldSet::from_fields_v1(&deep), Err(FieldsError::TooDeep));
    }

    #[test]
    fn set_operations_follow_structured_merge_diff() {
        let mut a = FieldSet::default();
        a.insert(&[f("spec"), f("x")]);
        a.insert(&[f("spec"), f("y")]);
        a.insert(&[f("status")]);
        let mut b = FieldSet::default();
        b.insert(&[f("spec"), f("y")]);
        b.insert(&[f("spec"), f("z")]);
        let mut only_x = FieldSet::default();
        only_x.insert(&[f("spec"), f("x")]);
        only_x.insert(&[f("status")]);
        assert_eq!(a.difference(&b), only_x);
        let mut y = FieldSet::default();
        y.insert(&[f("spec"), f("y")]);
        assert_eq!(a.intersection(&b), y);
        let u = a.union(&b);
        assert!(u.has(&[f("spec"), f("z")]) && u.has(&[f("status")]) && u.has(&[f("spec"), f("x")]));
        // A member takes the paths under it along only in a recursive difference.
        let mut spec = FieldSet::default();
        spec.insert(&[f("spec")]);
        assert_eq!(a.difference(&spec), a);
        let mut status = FieldSet::default();
        status.insert(&[f("status")]);
        assert_eq!(a.recursive_difference(&spec), status);
        let mut in_place = a.clone();
        in_place.remove_recursive(&spec);
        assert_eq!(in_place, status);
        assert!(a.difference(&a).is_empty() && a.difference(&a).to_fields_v1() == json!({}));
        assert_eq!(
            u.paths().iter().map(|p| path_string(p)).collect::<Vec<_>>(),
            vec![".status", ".spec.x", ".spec.y", ".spec.z"]
        );
    }

    #[test]
    fn elements_order_as_structured_merge_diff_orders_them() {
        let mut els = [
            PathElement::Index(0),
            PathElement::Value(json!("b")),
            PathElement::Value(json!(2)),
            PathElement::Value(json!(10)),
            k("name", "b"),
            k("name", "a"),
            f("z"),
            f("a"),
        ];
        els.sort();
        let keys: Vec<String> = els.iter().map(PathElement::to_key).collect();
        assert_eq!(
            keys,
            vec!["f:a", "f:z", r#"k:{"name":"a"}"#, r#"k:{"name":"b"}"#, "v:2", "v:10", r#"v:"b""#, "i:0"]
        );
        assert!(json_eq(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!json_eq(&json!({"a": 1}), &json!({"a": "1"})));
    }
}
