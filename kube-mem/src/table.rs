//! Server-side printing: the `meta.k8s.io` Table kubectl asks for (`Accept: application/json;
//! as=Table;v=v1;g=meta.k8s.io`), so `kubectl get` shows a CRD's `additionalPrinterColumns` and
//! the usual columns of the built-in kinds, as kube-apiserver's table convertors do.

use serde_json::{Map, Value, json};

use super::resources::{CellKind, PrinterColumn, ResourceType};
use super::time::{parse_rfc3339, unix_seconds};

/// The Table versions kubectl asks for, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableVersion {
    V1,
    V1beta1,
}

impl TableVersion {
    fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// What each row carries beside its cells (`?includeObject=`; the server's default is Metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(q: Option<&str>) -> Include {
        match q {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// The Table the `Accept` header asks for, if it asks for one before plain JSON.
pub fn requested(accept: &str) -> Option<TableVersion> {
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
        if !(base == "application/json" || base == "*/*") {
            continue;
        }
        match (param("as"), param("g"), param("v")) {
            (Some("Table"), Some("meta.k8s.io"), Some("v1")) => return Some(TableVersion::V1),
            (Some("Table"), Some("meta.k8s.io"), Some("v1beta1")) => return Some(TableVersion::V1beta1),
            (Some(_), _, _) => continue,
            // Plain JSON is acceptable before any Table: answer the object itself.
            (None, _, _) => return None,
        }
    }
    None
}

/// A built-in column: name, cell type and priority (1: shown with `-o wide` only).
type Def = (&'static str, CellKind, i64);

use CellKind::{Date as D, Integer as I, String as S};

/// The columns kube-apiserver prints for the built-in kinds served here (pkg/printers/internalversion).
fn builtin_columns(rt: &ResourceType) -> &'static [Def] {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => &[
            ("Ready", S, 0),
            ("Status", S, 0),
            ("Restarts", S, 0),
            ("Age", S, 0),
            ("IP", S, 1),
            ("Node", S, 1),
            ("Nominated Node", S, 1),
            ("Readiness Gates", S, 1),
        ],
        ("", "Node") => &[
            ("Status", S, 0),
            ("Roles", S, 0),
            ("Age", S, 0),
            ("Version", S, 0),
            ("Internal-IP", S, 1),
            ("External-IP", S, 1),
            ("OS-Image", S, 1),
            ("Kernel-Version", S, 1),
            ("Container-Runtime", S, 1),
        ],
        ("", "Namespace") => &[("Status", S, 0), ("Age", S, 0)],
        ("", "ConfigMap") => &[("Data", I, 0), ("Age", S, 0)],
        ("", "Secret") => &[("Type", S, 0), ("Data", I, 0), ("Age", S, 0)],
        ("", "ServiceAccount") => &[("Secrets", I, 0), ("Age", S, 0)],
        ("", "PersistentVolumeClaim") => &[
            ("Status", S, 0),
            ("Volume", S, 0),
            ("Capacity", S, 0),
            ("Access Modes", S, 0),
            ("StorageClass", S, 0),
            ("VolumeAttributesClass", S, 0),
            ("Age", S, 0),
            ("VolumeMode", S, 1),
        ],
        ("", "Event") => &[
            ("Last Seen", S, 0),
            ("Type", S, 0),
            ("Reason", S, 0),
            ("Object", S, 0),
            ("Subobject", S, 1),
            ("Source", S, 1),
            ("Message", S, 0),
            ("First Seen", S, 1),
            ("Count", I, 1),
            ("Name", S, 1),
        ],
        ("batch", "Job") => &[("Status", S, 0), ("Completions", S, 0), ("Duration", S, 0), ("Age", S, 0)],
        ("coordination.k8s.io", "Lease") => &[("Holder", S, 0), ("Age", S, 0)],
        _ => &[("Created At", D, 0)],
    }
}

/// The Table of `objects` (a list, or one object for a get).
pub fn table(rt: &ResourceType, objects: &[Value], version: TableVersion, include: Include, meta: Value) -> Value {
    let now = unix_seconds();
    let name_def = json!({"name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. Cannot be updated."});
    let mut defs = vec![name_def];
    let crd = !rt.printer_columns.is_empty();
    if crd {
        defs.extend(rt.printer_columns.iter().map(|c| {
            json!({"name": c.name, "type": c.kind.as_str(), "format": c.format, "description": c.description,
                   "priority": c.priority})
        }));
    } else {
        defs.extend(builtin_columns(rt).iter().map(|(name, kind, priority)| {
            json!({"name": name, "type": kind.as_str(), "format": "", "description": "", "priority": priority})
        }));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let name = o.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
            let mut cells = vec![name];
            if crd {
                cells.extend(rt.printer_columns.iter().map(|c| crd_cell(c, o, now)));
            } else {
                cells.extend(builtin_cells(rt, o, now));
            }
            let mut row = json!({"cells": cells});
            match include {
                Include::None => {}
                Include::Metadata => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": version.api_version(),
                                            "metadata": o.get("metadata").cloned().unwrap_or(json!({}))});
                }
                Include::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": version.api_version(), "metadata": meta, "columnDefinitions": defs,
           "rows": rows})
}

fn crd_cell(c: &PrinterColumn, obj: &Value, now: i64) -> Value {
    let found = json_path(obj, &c.json_path);
    match found.as_slice() {
        [] => Value::Null,
        [one] => match c.kind {
            CellKind::Date => one.as_str().map_or(Value::Null, |t| age(t, now).into()),
            _ => (*one).clone(),
        },
        many => many.iter().map(|v| plain(v)).collect::<Vec<_>>().join(", ").into(),
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The subset of kubectl's JSONPath that printer columns use: `.field`, `[n]`, `[a:b]` (negative
/// ends too), `[*]` and `[?(@.key=="value")]` (`==` or `!=`, either quote).
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut current = vec![obj];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let (field, after) = r.split_at(end);
            if !field.is_empty() {
                current = current.into_iter().filter_map(|v| v.get(field)).collect();
            }
            rest = after;
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(close) = bracket_end(r) else { return Vec::new() };
            let (inner, after) = (&r[..close], &r[close + 1..]);
            current = current.into_iter().flat_map(|v| subscript(v, inner)).collect();
            rest = after;
        } else {
            return Vec::new();
        }
    }
    current
}

/// The `]` closing a subscript, skipping quoted text (a filter's value may hold `]`).
fn bracket_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, ']') => return Some(i),
            _ => {}
        }
    }
    None
}

fn subscript<'a>(v: &'a Value, inner: &str) -> Vec<&'a Value> {
    let Some(items) = v.as_array() else { return Vec::new() };
    let len = items.len() as i64;
    let index = |s: &str, default: i64| -> Option<i64> {
        let s = s.trim();
        if s.is_empty() {
            return Some(default);
        }
        let n: i64 = s.parse().ok()?;
        Some(if n < 0 { (len + n).max(0) } else { n.min(len) })
    };
    if inner == "*" {
        return items.iter().collect();
    }
    if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        return items.iter().filter(|item| filter_matches(item, filter)).collect();
    }
    if let Some((a, b)) = inner.split_once(':') {
        let (Some(a), Some(b)) = (index(a, 0), index(b, len)) else { return Vec::new() };
        return items.iter().skip(a as usize).take((b - a).max(0) as usize).collect();
    }
    match inner.trim().parse::<i64>() {
        Ok(n) => {
            let i = if n < 0 { len + n } else { n };
            usize::try_from(i).ok().and_then(|i| items.get(i)).into_iter().collect()
        }
        Err(_) => Vec::new(),
    }
}

fn filter_matches(item: &Value, filter: &str) -> bool {
    let (lhs, rhs, equal) = match (filter.split_once("!="), filter.split_once("==")) {
        (Some((l, r)), _) => (l, r, false),
        (None, Some((l, r))) => (l, r, true),
        (None, None) => return false,
    };
    let Some(lhs) = lhs.trim().strip_prefix('@') else { return false };
    let rhs = rhs.trim();
    let wanted = rhs
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| rhs.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')));
    let found = json_path(item, lhs);
    let is = match (found.first(), wanted) {
        (Some(Value::String(s)), Some(w)) => s == w,
        (Some(v), None) => serde_json::from_str::<Value>(rhs).is_ok_and(|r| &r == *v),
        _ => false,
    };
    is == equal
}

fn builtin_cells(rt: &ResourceType, o: &Value, now: i64) -> Vec<Value> {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
    let created = age_of(o.pointer("/metadata/creationTimestamp"), now);
    let count = |p: &str| o.pointer(p).and_then(Value::as_object).map_or(0, Map::len) as i64;
    let or_none = |v: &str| if v.is_empty() { "<none>".to_string() } else { v.to_string() };
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => {
            let statuses = o.pointer("/status/containerStatuses").and_then(Value::as_array);
            let total = o.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
            let ready = statuses.into_iter().flatten().filter(|c| c["ready"] == true).count();
            let restarts: i64 = statuses.into_iter().flatten().filter_map(|c| c["restartCount"].as_i64()).sum();
            let gates = o.pointer("/spec/readinessGates").and_then(Value::as_array).map_or(0, Vec::len);
            vec![
                format!("{ready}/{total}").into(),
                pod_status(o).into(),
                restarts.into(),
                created.into(),
                or_none(s("/status/podIP")).into(),
                or_none(s("/spec/nodeName")).into(),
                or_none(s("/status/nominatedNodeName")).into(),
                if gates == 0 { "<none>".into() } else { format!("0/{gates}").into() },
            ]
        }
        ("", "Node") => {
            let conditions = o.pointer("/status/conditions").and_then(Value::as_array);
            let ready = conditions.into_iter().flatten().find(|c| c["type"] == "Ready");
            let mut status = match ready.and_then(|c| c["status"].as_str()) {
                Some("True") => "Ready".to_string(),
                Some(_) => "NotReady".to_string(),
                None => "Unknown".to_string(),
            };
            if o.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<&str> = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
                .collect();
            let address = |t: &str| {
                o.pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|a| a["type"] == t)
                    .and_then(|a| a["address"].as_str())
                    .unwrap_or("<none>")
                    .to_string()
            };
            vec![
                status.into(),
                or_none(&roles.join(",")).into(),
                created.into(),
                s("/status/nodeInfo/kubeletVersion").into(),
                address("InternalIP").into(),
                address("ExternalIP").into(),
                or_none(s("/status/nodeInfo/osImage")).into(),
                or_none(s("/status/nodeInfo/kernelVersion")).into(),
                or_none(s("/status/nodeInfo/containerRuntimeVersion")).into(),
            ]
        }
        ("", "Namespace") => {
            let phase = s("/status/phase");
            vec![(if phase.is_empty() { "Active" } else { phase }).into(), created.into()]
        }
        ("", "ConfigMap") => vec![(count("/data") + count("/binaryData")).into(), created.into()],
        ("", "Secret") => vec![s("/type").into(), count("/data").into(), created.into()],
        ("", "ServiceAccount") => {
            vec![(o.pointer("/secrets").and_then(Value::as_array).map_or(0, Vec::len) as i64).into(), created.into()]
        }
        ("", "PersistentVolumeClaim") => {
            let modes: Vec<String> = o
                .pointer("/spec/accessModes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(access_mode)
                .collect();
            vec![
                or_none(s("/status/phase")).into(),
                s("/spec/volumeName").into(),
                s("/status/capacity/storage").into(),
                modes.join(",").into(),
                or_none(s("/spec/storageClassName")).into(),
                or_none(s("/spec/volumeAttributesClassName")).into(),
                created.into(),
                (if s("/spec/volumeMode").is_empty() { "Filesystem" } else { s("/spec/volumeMode") }).into(),
            ]
        }
        ("", "Event") => {
            let first = ["/firstTimestamp", "/eventTime", "/metadata/creationTimestamp"]
                .iter()
                .find_map(|p| o.pointer(p).filter(|v| v.is_string()));
            let last = ["/lastTimestamp", "/series/lastObservedTime", "/eventTime", "/metadata/creationTimestamp"]
                .iter()
                .find_map(|p| o.pointer(p).filter(|v| v.is_string()));
            let source = [s("/source/component"), s("/reportingComponent")]
                .into_iter()
                .find(|c| !c.is_empty())
                .unwrap_or("")
                .to_string();
            let host = s("/source/host");
            vec![
                age_of(last, now).into(),
                s("/type").into(),
                s("/reason").into(),
                format!("{}/{}", s("/involvedObject/kind").to_ascii_lowercase(), s("/involvedObject/name")).into(),
                s("/involvedObject/fieldPath").into(),
                (if host.is_empty() { source } else { format!("{source}, {host}") }).into(),
                s("/message").into(),
                age_of(first, now).into(),
                o.pointer("/count").and_then(Value::as_i64).unwrap_or(1).into(),
                s("/metadata/name").into(),
            ]
        }
        ("batch", "Job") => {
            let succeeded = o.pointer("/status/succeeded").and_then(Value::as_i64).unwrap_or(0);
            let completions = o.pointer("/spec/completions").and_then(Value::as_i64);
            let conditions = o.pointer("/status/conditions").and_then(Value::as_array);
            let is = |t: &str| conditions.into_iter().flatten().any(|c| c["type"] == t && c["status"] == "True");
            let status = if is("Complete") {
                "Complete"
            } else if is("Failed") {
                "Failed"
            } else if is("Suspended") {
                "Suspended"
            } else {
                "Running"
            };
            let start = o.pointer("/status/startTime").and_then(Value::as_str).and_then(parse_rfc3339);
            let end = o.pointer("/status/completionTime").and_then(Value::as_str).and_then(parse_rfc3339);
            let duration = start.map_or(String::new(), |s| human_duration(end.unwrap_or(now) - s));
            vec![
                status.into(),
                completions.map_or(format!("{succeeded}/1 of 1"), |c| format!("{succeeded}/{c}")).into(),
                duration.into(),
                created.into(),
            ]
        }
        ("coordination.k8s.io", "Lease") => vec![or_none(s("/spec/holderIdentity")).into(), created.into()],
        _ => vec![o.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null)],
    }
}

fn access_mode(m: &str) -> String {
    match m {
        "ReadWriteOnce" => "RWO",
        "ReadOnlyMany" => "ROX",
        "ReadWriteMany" => "RWX",
        "ReadWriteOncePod" => "RWOP",
        other => other,
    }
    .to_string()
}

/// What kubectl shows in a pod's STATUS column (the reason of the first container not running
/// cleanly, else the pod's phase or reason; Terminating once deleted).
fn pod_status(o: &Value) -> String {
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let mut status = o
        .pointer("/status/reason")
        .or_else(|| o.pointer("/status/phase"))
        .and_then(Value::as_str)
        .unwrap_or("Pending")
        .to_string();
    let containers = o.pointer("/status/containerStatuses").and_then(Value::as_array);
    for c in containers.into_iter().flatten() {
        if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
            status = r.to_string();
        } else if let Some(t) = c.pointer("/state/terminated") {
            status = match t.get("reason").and_then(Value::as_str) {
                Some(r) => r.to_string(),
                None => format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)),
            };
        }
    }
    status
}

fn age_of(t: Option<&Value>, now: i64) -> String {
    t.and_then(Value::as_str).map_or("<unknown>".to_string(), |t| age(t, now))
}

fn age(t: &str, now: i64) -> String {
    parse_rfc3339(t).map_or("<unknown>".to_string(), |then| human_duration(now - then))
}

/// kubectl's short ages (k8s.io/apimachinery/pkg/util/duration.HumanDuration).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let d = (hours / 24) % 365;
        return if d == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{d}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_as_kubectl_sends_them() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(requested(kubectl), Some(TableVersion::V1));
        assert_eq!(requested("application/json;as=Table;v=v1beta1;g=meta.k8s.io"), Some(TableVersion::V1beta1));
        assert_eq!(requested("application/json"), None);
        assert_eq!(requested("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"), None);
        assert_eq!(requested("application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"), None);
    }

    #[test]
    fn json_path_subset_of_printer_columns() {
        let o = json!({"status": {"conditions": [
            {"type": "Created", "status": "True"}, {"type": "Complete", "status": "False"}]}});
        assert_eq!(json_path(&o, ".status.conditions[-1:].type"), vec![&json!("Complete")]);
        assert_eq!(json_path(&o, ".status.conditions[?(@.type==\"Created\")].status"), vec![&json!("True")]);
        assert_eq!(json_path(&o, ".status.conditions[?(@.type=='Complete')].status"), vec![&json!("False")]);
        assert_eq!(json_path(&o, ".status.conditions[0].type"), vec![&json!("Created")]);
        assert_eq!(json_path(&o, ".status.conditions[*].type").len(), 2);
        assert!(json_path(&o, ".status.missing[-1:].type").is_empty());
        assert!(json_path(&json!({"status": {"conditions": []}}), ".status.conditions[-1:].type").is_empty());
        assert!(json_path(&o, ".status.conditions[").is_empty());
    }

    #[test]
    fn ages_as_kubectl_prints_them() {
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(3600 * 5 + 60 * 3), "5h3m");
        assert_eq!(human_duration(86_400 * 3 + 3600), "3d1h");
    }
}
