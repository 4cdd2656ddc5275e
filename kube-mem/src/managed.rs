//! `metadata.managedFields`: who owns which fields, kept as kube-apiserver's field manager
//! keeps it (k8s.io/apimachinery/pkg/util/managedfields and structured-merge-diff's Updater).
//!
//! An entry is one manager's fields for one operation (`Apply` or `Update`) through one
//! subresource. Server-side apply by M replaces M's Apply entry with the fields of its
//! configuration, refuses (409) to change a field another manager owns unless forced, and removes
//! the fields M applied before and no longer applies when nobody else owns them. Every other
//! write is an `Update`: the fields it changed become its manager's and leave everyone else's.

use serde_json::{Map, Value};

use super::fields::{FieldSet, PathElement, path_string};
use super::status::ApiError;
use super::typed::{self, Ty, TypedError};

/// Update entries beyond this many are merged, oldest first, into `ancient-changes`.
pub const MAX_UPDATE_MANAGERS: usize = 10;
/// The longest field manager name accepted.
pub const MAX_MANAGER_BYTES: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether this entry is the one `w` writes: an applier is one entry whatever version it
    /// applies through, an updater one per version.
    fn is(&self, w: &Writer<'_>, op: Operation) -> bool {
        self.manager == w.manager
            && self.operation == op
            && self.subresource == w.subresource
            && (op == Operation::Apply || self.api_version == w.api_version)
    }

    /// How conflicts name the manager: `"kueue" with subresource "status" using v1`.
    fn display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    fn to_json(&self) -> Value {
        // Built as a map, the fields' tree moved in: `json!` would write a `Value` it is given
        // over again, through serde, and this runs for every entry of every write.
        let mut e = Map::new();
        e.insert("manager".into(), self.manager.clone().into());
        e.insert("operation".into(), self.operation.as_str().into());
        e.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(t) = &self.time {
            e.insert("time".into(), t.clone().into());
        }
        e.insert("fieldsType".into(), "FieldsV1".into());
        e.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            e.insert("subresource".into(), self.subresource.clone().into());
        }
        Value::Object(e)
    }

    fn from_json(v: &Value) -> Option<Entry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        let operation = match s("operation")? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        let api_version = s("apiVersion").filter(|a| !a.is_empty())?.to_string();
        if s("fieldsType")? != "FieldsV1" {
            return None;
        }
        let fields = match v.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::default(),
            Some(f) => FieldSet::from_fields_v1(f).ok()?,
        };
        Some(Entry {
            manager: s("manager").unwrap_or("").to_string(),
            operation,
            api_version,
            time: s("time").map(str::to_string),
            subresource: s("subresource").unwrap_or("").to_string(),
            fields,
        })
    }
}

/// Who writes, as managedFields records it.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    pub manager: &'a str,
    /// `""` for the main resource, `"status"` for the status subresource.
    pub subresource: &'a str,
    pub api_version: &'a str,
}

/// The entries of an object's `metadata.managedFields`; `None` when they do not decode (the
/// real server then starts over from none).
pub fn decode(list: Option<&Value>) -> Option<Vec<Entry>> {
    let mut out: Vec<Entry> = Vec::new();
    for v in list.and_then(Value::as_array).into_iter().flatten() {
        let e = Entry::from_json(v)?;
        // One entry per identity; a later one wins, as in the real server's map.
        out.retain(|o| !same_identity(o, &e));
        out.push(e);
    }
    Some(out)
}

fn same_identity(a: &Entry, b: &Entry) -> bool {
    a.manager == b.manager
        && a.operation == b.operation
        && a.subresource == b.subresource
        && (a.operation == Operation::Apply || a.api_version == b.api_version)
}

/// The entries as `metadata.managedFields`, in the real server's order (operation, time,
/// manager, apiVersion, subresource).
pub fn encode(mut entries: Vec<Entry>) -> Value {
    let seconds = |e: &Entry| e.time.as_deref().and_then(super::time::parse_rfc3339).unwrap_or(0);
    entries.sort_by(|a, b| {
        (a.operation, seconds(a), &a.manager, &a.api_version, &a.subresource).cmp(&(
            b.operation,
            seconds(b),
            &b.manager,
            &b.api_version,
            &b.subresource,
        ))
    });
    Value::Array(entries.iter().map(Entry::to_json).collect())
}

/// Sets the object's `metadata.managedFields` (none at all when there are no entries).
pub fn store(obj: &mut Value, entries: Vec<Entry>) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), encode(entries));
    }
}

/// The object without `metadata.managedFields`, which is never compared or owned.
pub fn without_managed(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    o
}

fn path_of(fields: &[&str]) -> Vec<PathElement> {
    fields.iter().map(|f| PathElement::field(f)).collect()
}

/// Fields no manager ever owns: kube-apiserver's stripMeta set.
fn stripped() -> &'static FieldSet {
    static STRIPPED: std::sync::OnceLock<FieldSet> = std::sync::OnceLock::new();
    STRIPPED.get_or_init(stripped_fields)
}

fn stripped_fields() -> FieldSet {
    let mut s = FieldSet::default();
    for p in [
        &["apiVersion"][..],
        &["kind"],
        &["metadata"],
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["metadata", "creationTimestamp"],
        &["metadata", "selfLink"],
        &["metadata", "uid"],
        &["metadata", "clusterName"],
        &["metadata", "generation"],
        &["metadata", "managedFields"],
        &["metadata", "resourceVersion"],
    ] {
        s.insert(&path_of(p));
    }
    s
}

/// The fields a write through this part may not change (the strategies' reset fields): the
/// main resource's `status` and the status subresource's `spec`, where there is a status
/// subresource.
pub fn reset_fields(status_subresource: bool, subresource: &str) -> FieldSet {
    let mut s = FieldSet::default();
    match (status_subresource, subresource) {
        (true, "status") => s.insert(&path_of(&["spec"])),
        (true, _) => s.insert(&path_of(&["status"])),
        _ => {}
    }
    s
}

fn typing_error(what: &str, e: &TypedError) -> ApiError {
    ApiError::internal(format!("failed to {what}: {e}"))
}

/// Server-side apply of `config` (already cut to the part written, its resourceVersion checked
/// and removed) over `live` (`{}` when the object is created), by `w`: the object to write, its
/// managedFields set.
pub fn apply(
    live: &Value,
    config: &Value,
    w: &Writer<'_>,
    force: bool,
    ty: Ty<'_>,
    reset: &FieldSet,
    now: &str,
) -> Result<Value, ApiError> {
    let mut entries = decode(live.pointer("/metadata/managedFields")).unwrap_or_default();
    let live = without_managed(live);
    let merged = typed::merge(&live, config, ty).map_err(|e| typing_error("merge config", &e))?;
    let mut applied = typed::field_set(config, ty).map_err(|e| typing_error("create typed patch object", &e))?;
    applied.remove_recursive(reset);
    let last = entries.iter().position(|e| e.is(w, Operation::Apply)).map(|i| entries.remove(i));
    let new = prune(merged, &entries, &applied, last.as_ref().map(|e| &e.fields), ty);
    // Other managers lose what this write changes. With none (most applies that create), there
    // is no one to take from and the comparison, a walk of both objects whole, is skipped.
    if !entries.is_empty() {
        let cmp = typed::compare_except(&live, &new, ty, reset).map_err(|e| typing_error("compare objects", &e))?;
        take_from_others(&mut entries, &cmp.modified.union(&cmp.added), &cmp.removed, force)?;
    }
    // Equal objects compare the same, so whether anything changed is whether they differ.
    let changed = new != live;
    let mut fields = applied;
    fields.remove(stripped());
    if !fields.is_empty() {
        let time = if changed { Some(now.to_string()) } else { last.and_then(|e| e.time) };
        entries.push(Entry {
            manager: w.manager.to_string(),
            operation: Operation::Apply,
            api_version: w.api_version.to_string(),
            time,
            subresource: w.subresource.to_string(),
            fields,
        });
    }
    let mut object = new;
    store(&mut object, entries);
    Ok(object)
}

/// The merged object without the fields the applier applied last time and applies no more,
/// unless another manager (or the applier's new configuration) owns them: structured-merge-diff's
/// prune, which also takes along structs left owned by nobody.
fn prune(merged: Value, others: &[Entry], applied: &FieldSet, last: Option<&FieldSet>, ty: Ty<'_>) -> Value {
    let Some(last) = last.filter(|l| !l.is_empty()) else { return merged };
    let merged = &merged;
    let named = |s: &FieldSet| typed::ensure_named_members(s, ty);
    let set_of = |v: &Value| typed::field_set(v, ty).map(|s| named(&s)).unwrap_or_default();
    let last = named(last);
    let pruned = typed::remove_items(merged, &last, ty);
    // Add back what any manager owns.
    let owned = named(&others.iter().fold(applied.clone(), |acc, e| acc.union(&e.fields)));
    let merged_set = set_of(merged);
    let pruned = typed::remove_items(merged, &merged_set.difference(&set_of(&pruned).union(&owned)), ty);
    // Remove only what the applier owned last time: what nobody owns is left alone.
    typed::remove_items(merged, &merged_set.difference(&set_of(&pruned)).intersection(&last), ty)
}

/// Other managers lose the fields this write changed (a conflict, unless forced) and the ones
/// it removed; entries left empty go.
/// `changed` is what the write modified or added.
fn take_from_others(
    entries: &mut Vec<Entry>,
    changed: &FieldSet,
    removed: &FieldSet,
    force: bool,
) -> Result<(), ApiError> {
    // A forced write takes without asking who had it.
    if !force {
        let conflicts: Vec<(String, String)> = entries
            .iter()
            .flat_map(|e| {
                let who = e.display();
                e.fields.intersection(changed).paths().into_iter().map(move |p| (who.clone(), path_string(&p)))
            })
            .collect();
        if !conflicts.is_empty() {
            return Err(ApiError::apply_conflicts(conflicts));
        }
    }
    for e in entries.iter_mut() {
        e.fields.remove(changed);
        e.fields.remove(removed);
    }
    entries.retain(|e| !e.fields.is_empty());
    Ok(())
}

/// Records a write that is not an apply (create, update, patch) by `w`: the fields it changed
/// become `w`'s Update entry's and leave every other entry; fields it removed leave every
/// entry. `base` is where ownership starts from (the live object's, or what the client sent).
/// On objects this cannot walk, ownership is dropped, as the real server drops it.
pub fn update(old: &Value, new: &mut Value, base: Vec<Entry>, w: &Writer<'_>, ty: Ty<'_>, reset: &FieldSet, now: &str) {
    let entries = recorded_update(old, new, base, w, ty, reset, now);
    store(new, entries.unwrap_or_default());
}

fn recorded_update(
    old: &Value,
    new: &Value,
    mut entries: Vec<Entry>,
    w: &Writer<'_>,
    ty: Ty<'_>,
    reset: &FieldSet,
    now: &str,
) -> Option<Vec<Entry>> {
    let cmp = typed::compare_except(old, new, ty, reset).ok()?;
    let own = entries.iter().position(|e| e.is(w, Operation::Update)).map(|i| entries.remove(i));
    let changed = cmp.modified.union(&cmp.added);
    // Cannot fail: forced.
    take_from_others(&mut entries, &changed, &cmp.removed, true).ok()?;
    let mut taken = changed;
    taken.remove(stripped());
    let previous = own.map(|mut e| {
        for taken_or_gone in [&cmp.modified, &cmp.added, &cmp.removed] {
            e.fields.remove(taken_or_gone);
        }
        e
    });
    let entry = match previous {
        Some(mut e) if !taken.is_empty() => {
            e.fields.add(&taken);
            e.time = Some(now.to_string());
            Some(e)
        }
        Some(e) => Some(e),
        None if !taken.is_empty() => Some(Entry {
            manager: w.manager.to_string(),
            operation: Operation::Update,
            api_version: w.api_version.to_string(),
            time: Some(now.to_string()),
            subresource: w.subresource.to_string(),
            fields: taken,
        }),
        None => None,
    };
    entries.extend(entry.filter(|e| !e.fields.is_empty()));
    cap_updaters(&mut entries);
    Some(entries)
}

/// Past [`MAX_UPDATE_MANAGERS`] Update entries, the oldest are merged into one
/// `ancient-changes` entry per apiVersion, as the real server bounds managedFields.
fn cap_updaters(entries: &mut Vec<Entry>) {
    let seconds = |e: &Entry| e.time.as_deref().and_then(super::time::parse_rfc3339).unwrap_or(0);
    let mut updaters: Vec<usize> = (0..entries.len()).filter(|i| entries[*i].operation == Operation::Update).collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|a, b| {
        let (a, b) = (&entries[*a], &entries[*b]);
        (seconds(a), &a.manager, &a.api_version).cmp(&(seconds(b), &b.manager, &b.api_version))
    });
    let excess = updaters.len() - MAX_UPDATE_MANAGERS + 1;
    let doomed: Vec<usize> = updaters.into_iter().take(excess).collect();
    let mut buckets: Vec<Entry> = Vec::new();
    for i in &doomed {
        let e = &entries[*i];
        match buckets.iter_mut().find(|b| b.api_version == e.api_version) {
            Some(b) => {
                b.fields.add(&e.fields);
                b.time = e.time.clone();
            }
            None => buckets.push(Entry { manager: "ancient-changes".into(), subresource: String::new(), ..e.clone() }),
        }
    }
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        !doomed.contains(&(i - 1))
    });
    for b in buckets {
        match entries.iter_mut().find(|e| same_identity(e, &b)) {
            Some(e) => e.fields.add(&b.fields),
            None => entries.push(b),
        }
    }
}

/// Where an Update's ownership starts: managedFields the client sent on the main resource
/// replace the live ones (`[{}]` clears them); none, or ones that do not decode, keep the live
/// ones. A subresource write never sets them.
pub fn update_base(live: Option<&Value>, sent: Option<&Value>, subresource: &str) -> Vec<Entry> {
    let live_entries = || decode(live.and_then(|l| l.pointer("/metadata/managedFields"))).unwrap_or_default();
    if !subresource.is_empty() {
        return live_entries();
    }
    let sent = sent.filter(|s| s.as_array().is_some_and(|l| !l.is_empty()));
    match sent {
        Some(s) if s.as_array().is_some_and(|l| l.len() == 1 && l[0].as_object().is_some_and(Map::is_empty)) => {
            Vec::new()
        }
        Some(s) => match decode(Some(s)) {
            Some(entries) if !entries.is_empty() => entries,
            _ => live_entries(),
        },
        None => live_entries(),
    }
}

/// The manager of a write that is not an apply: the `fieldManager` parameter, else the
/// User-Agent up to its first `/` (printable characters, at most 128 bytes), as kube-apiserver
/// names it.
pub fn manager_of(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let prefix = user_agent.unwrap_or("").split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_MANAGER_BYTES {
            break;
        }
        out.push(c);
    }
    // No user agent either: kube-apiserver v1.37 records "unknown" (seen on the testbed).
    if out.is_empty() { "unknown".into() } else { out }
}

/// kube-apiserver's check of the `fieldManager` parameter.
pub fn check_manager(field_manager: &str) -> Result<(), ApiError> {
    let problem = if field_manager.len() > MAX_MANAGER_BYTES {
        format!("Too long: may not be more than {MAX_MANAGER_BYTES} bytes")
    } else if field_manager.chars().any(char::is_control) {
        format!("Invalid value: {field_manager:?}: must only contain printable characters")
    } else {
        return Ok(());
    };
    Err(ApiError::invalid("PatchOptions.meta.k8s.io", "", vec![("fieldManager".into(), problem)]))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn writer<'a>(manager: &'a str, subresource: &'a str) -> Writer<'a> {
        Writer { manager, subresource, api_version: "v1" }
    }

    fn owners(obj: &Value) -> Vec<(String, String)> {
        decode(obj.pointer("/metadata/managedFields"))
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.manager, e.fields.to_fields_v1_string()))
            .collect()
    }

    const T: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn apply_owns_conflicts_forces_and_removes() {
        let ty = Ty::Root(None);
        let none = FieldSet::default();
        let cm =
            |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});
        let a =
            apply(&json!({}), &cm(json!({"x": "1", "y": "1"})), &writer("a", ""), false, ty, &none, T).expect("create");
        assert_eq!(owners(&a), vec![("a".into(), r#"{"f:data":{"f:x":{},"f:y":{}}}"#.into())]);
        // Made now (nobody else managed it: nothing taken, no comparison).
        let made = decode(a.pointer("/metadata/managedFields")).unwrap_or_default();
        assert_eq!(made[0].time.as_deref(), Some(T));
        // Applied again unchanged, by its only manager: its time kept.
        let again =
            apply(&a, &cm(json!({"x": "1", "y": "1"})), &writer("a", ""), false, ty, &none, "2030-01-01T00:00:00Z")
                .expect("again");
        assert_eq!(again, a);
        // Another manager: the same value is shared, a different one conflicts.
        let b = apply(&a, &cm(json!({"x": "1"})), &writer("b", ""), false, ty, &none, T).expect("shared");
        assert_eq!(b["data"], a["data"]);
        let err = apply(&b, &cm(json!({"y": "2"})), &writer("b", ""), false, ty, &none, T).expect_err("conflict");
        assert_eq!(err.code, 409);
        assert_eq!(err.message, r#"Apply failed with 1 conflict: conflict with "a": .data.y"#);
        let forced = apply(&b, &cm(json!({"x": "1", "y": "2"})), &writer("b", ""), true, ty, &none, T).expect("forced");
        assert_eq!(
            owners(&forced),
            vec![
                ("a".into(), r#"{"f:data":{"f:x":{}}}"#.into()),
                ("b".into(), r#"{"f:data":{"f:x":{},"f:y":{}}}"#.into())
            ]
        );
        // b stops applying x (a still owns it: kept) and y (only b owned it: removed).
        let dropped = apply(&forced, &cm(json!({"z": "1"})), &writer("b", ""), false, ty, &none, T).expect("apply");
        assert_eq!(dropped["data"], json!({"x": "1", "z": "1"}));
    }

    #[test]
    fn updates_take_what_they_change() {
        let ty = Ty::Root(None);
        let none = FieldSet::default();
        let old = json!({"metadata": {"name": "c", "managedFields": [
            {"manager": "a", "operation": "Apply", "apiVersion": "v1", "time": T, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:x": {}, "f:y": {}}}}]}, "data": {"x": "1", "y": "1"}});
        let mut new = json!({"metadata": {"name": "c"}, "data": {"x": "2", "z": "1"}});
        let base = update_base(Some(&old), None, "");
        update(&old, &mut new, base, &writer("kubectl-edit", ""), ty, &none, T);
        assert_eq!(owners(&new), vec![("kubectl-edit".into(), r#"{"f:data":{"f:x":{},"f:z":{}}}"#.into())]);
        // Nothing changed: nothing recorded, the time kept.
        let mut same = new.clone();
        update(
            &new,
            &mut same,
            update_base(Some(&new), None, ""),
            &writer("other", ""),
            ty,
            &none,
            "2030-01-01T00:00:00Z",
        );
        assert_eq!(same, new);
    }

    #[test]
    fn update_managers_are_capped() {
        let mut entries: Vec<Entry> = (0..12)
            .map(|i| Entry {
                manager: format!("m{i:02}"),
                operation: Operation::Update,
                api_version: "v1".into(),
                time: Some(format!("2026-01-01T00:00:{i:02}Z")),
                subresource: String::new(),
                fields: {
                    let mut s = FieldSet::default();
                    s.insert(&[PathElement::field(&format!("f{i}"))]);
                    s
                },
            })
            .collect();
        cap_updaters(&mut entries);
        assert_eq!(entries.len(), MAX_UPDATE_MANAGERS);
        let ancient = entries.iter().find(|e| e.manager == "ancient-changes").expect("bucket");
        assert_eq!(ancient.fields.to_fields_v1_string(), r#"{"f:f0":{},"f:f1":{},"f:f2":{}}"#);
    }

    #[test]
    fn managers_are_named_as_kube_apiserver_names_them() {
        assert_eq!(manager_of(Some("m"), Some("kubectl/v1.33")), "m");
        assert_eq!(manager_of(None, Some("kubectl/v1.33.0 (linux/amd64) kubernetes/abc")), "kubectl");
        assert_eq!(manager_of(Some(""), None), "unknown");
        assert_eq!(manager_of(None, Some(&"x".repeat(300))).len(), MAX_MANAGER_BYTES);
        assert!(check_manager(&"x".repeat(129)).is_err() && check_manager("ok").is_ok());
        assert!(
            decode(Some(
                &json!([{"manager": "m", "operation": "Bogus", "apiVersion": "v1", "fieldsType": "FieldsV1"}])
            ))
            .is_none()
        );
        assert_eq!(update_base(None, Some(&json!([{}])), ""), Vec::new());
    }
}
