//! The resource types the server serves: built-in kinds the controllers use, and kinds
//! registered from CRDs. Also the discovery documents derived from them.

use std::collections::BTreeMap;

use std::sync::Arc;

use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    pub short_names: Vec<String>,
    /// openAPIV3Schema for CRD kinds; built-ins are typed by their clients and not validated.
    /// Shared: a resource type is cloned on every request, its schema must not be.
    pub schema: Option<Arc<Value>>,
    /// A CRD version's `additionalPrinterColumns` (Age when it has none); empty for built-ins,
    /// which print their own columns (see `table`).
    pub printer_columns: Vec<PrinterColumn>,
    /// A CRD version's `selectableFields` (dotted, no leading dot): what a field selector may
    /// name besides `metadata.name` and `metadata.namespace`. Empty for built-ins.
    pub selectable_fields: Vec<String>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// How errors name it: `configmaps`, `trainjobs.trainer.kubeflow.org`.
    pub fn display_name(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    /// Its kind as the API server names it in a refusal: `ConfigMap`, `Widget.example.com`.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() { self.kind.clone() } else { format!("{}.{}", self.kind, self.group) }
    }

    /// The key a resource is stored and routed under.
    pub fn key(&self) -> ResourceKey {
        ResourceKey { group: self.group.clone(), version: self.version.clone(), plural: self.plural.clone() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    pub group: String,
    pub version: String,
    pub plural: String,
}

fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    status: bool,
    short: &[&str],
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_ascii_lowercase(),
        namespaced,
        status_subresource: status,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        schema: None,
        printer_columns: Vec::new(),
        selectable_fields: Vec::new(),
    }
}

pub fn builtins() -> Vec<ResourceType> {
    vec![
        builtin("", "v1", "Namespace", "namespaces", false, true, &["ns"]),
        builtin("", "v1", "Node", "nodes", false, true, &["no"]),
        builtin("", "v1", "Pod", "pods", true, true, &["po"]),
        builtin("", "v1", "ConfigMap", "configmaps", true, false, &["cm"]),
        builtin("", "v1", "Secret", "secrets", true, false, &[]),
        builtin("", "v1", "Event", "events", true, false, &["ev"]),
        builtin("", "v1", "ServiceAccount", "serviceaccounts", true, false, &["sa"]),
        builtin("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, true, &["pvc"]),
        builtin("coordination.k8s.io", "v1", "Lease", "leases", true, false, &[]),
        // Create only, answered and never stored (see `http::token_review`).
        builtin("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", false, false, &[]),
        builtin("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", false, false, &["pc"]),
        builtin("batch", "v1", "Job", "jobs", true, true, &[]),
        // Read by the authorizer when the server runs RBAC (`rbac`).
        builtin("rbac.authorization.k8s.io", "v1", "Role", "roles", true, false, &[]),
        builtin("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true, false, &[]),
        builtin("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false, false, &[]),
        builtin("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false, false, &[]),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            false,
            true,
            &[],
        ),
        builtin(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            false,
            false,
            &[],
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
            &["crd", "crds"],
        ),
    ]
}

#[derive(Debug, thiserror::Error)]
#[error("CRD {name}: {problem}")]
pub struct CrdError {
    pub name: String,
    pub problem: String,
}

/// The resource types one CRD object defines: one per served version.
pub fn from_crd(crd: &Value) -> Result<Vec<ResourceType>, CrdError> {
    let name = crd.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let err = |problem: &str| CrdError { name: name.clone(), problem: problem.into() };
    let spec = crd.get("spec").ok_or_else(|| err("has no spec"))?;
    let group = spec.get("group").and_then(Value::as_str).ok_or_else(|| err("spec.group is required"))?;
    let names = spec.get("names").ok_or_else(|| err("spec.names is required"))?;
    let s = |k: &str| names.get(k).and_then(Value::as_str).map(str::to_string);
    let kind = s("kind").ok_or_else(|| err("spec.names.kind is required"))?;
    let plural = s("plural").ok_or_else(|| err("spec.names.plural is required"))?;
    if name != format!("{plural}.{group}") {
        return Err(err(&format!("metadata.name must be {plural}.{group}")));
    }
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err(err("spec.scope must be Namespaced or Cluster")),
    };
    let versions = spec.get("versions").and_then(Value::as_array).ok_or_else(|| err("spec.versions is required"))?;
    let short_names: Vec<String> = names
        .get("shortNames")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let types: Vec<ResourceType> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .map(|v| ResourceType {
            group: group.into(),
            version: v.get("name").and_then(Value::as_str).unwrap_or("").into(),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: s("singular").unwrap_or_else(|| kind.to_ascii_lowercase()),
            namespaced,
            status_subresource: v.pointer("/subresources/status").is_some(),
            short_names: short_names.clone(),
            schema: v.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
            printer_columns: PrinterColumn::of_crd_version(v),
            selectable_fields: v
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                .map(|p| p.trim_start_matches('.').to_string())
                .collect(),
        })
        .collect();
    // Compile the validators now: done lazily, the first write of a kind (a JobSet's schema
    // takes about a second) stalled every request behind the store's lock.
    for schema in types.iter().filter_map(|t| t.schema.as_ref()) {
        super::schema::warm(schema);
    }
    Ok(types)
}

/// `/api` and `/apis` and the per-group-version resource lists.
#[derive(Debug)]
pub struct Discovery<'a>(pub &'a BTreeMap<ResourceKey, ResourceType>);

impl Discovery<'_> {
    pub fn core_versions(&self) -> Value {
        json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
    }

    fn groups(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut g: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for r in self.0.values().filter(|r| !r.group.is_empty()) {
            let versions = g.entry(&r.group).or_default();
            if !versions.contains(&r.version.as_str()) {
                versions.push(&r.version);
            }
        }
        g
    }

    fn group_doc(name: &str, versions: &[&str]) -> Value {
        let vs: Vec<Value> =
            versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
        json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
    }

    pub fn group_list(&self) -> Value {
        let groups: Vec<Value> = self.groups().iter().map(|(n, v)| Self::group_doc(n, v)).collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    pub fn group(&self, name: &str) -> Option<Value> {
        let groups = self.groups();
        let versions = groups.get(name)?;
        let mut doc = Self::group_doc(name, versions);
        doc["kind"] = "APIGroup".into();
        doc["apiVersion"] = "v1".into();
        Some(doc)
    }

    /// `/openapi/v3`: one entry per group-version, as kubectl's field-validation check reads it.
    pub fn openapi_v3_root(&self) -> Value {
        let mut paths = serde_json::Map::new();
        let mut gvs: Vec<(String, String)> = self.0.values().map(|r| (r.group.clone(), r.version.clone())).collect();
        gvs.sort();
        gvs.dedup();
        for (g, v) in gvs {
            let p = if g.is_empty() { format!("api/{v}") } else { format!("apis/{g}/{v}") };
            paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=0")}));
        }
        json!({"paths": paths})
    }

    /// One group-version's OpenAPI v3 document: each resource's paths, with the operations'
    /// group-version-kind and the `fieldValidation` parameter (server-side field validation is
    /// supported) and the CRD schema where there is one.
    pub fn openapi_v3(&self, group: &str, version: &str) -> Option<Value> {
        let mut paths = serde_json::Map::new();
        let mut schemas = serde_json::Map::new();
        for r in self.0.values().filter(|r| r.group == group && r.version == version) {
            let prefix = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
            let scope = if r.namespaced { "/namespaces/{namespace}" } else { "" };
            let gvk = json!({"group": group, "version": version, "kind": r.kind});
            let params = json!([{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                                {"name": "dryRun", "in": "query", "schema": {"type": "string"}}]);
            let op = json!({"x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {"200": {"description": "OK"}}});
            paths.insert(format!("{prefix}{scope}/{}", r.plural), json!({"post": op, "get": op}));
            paths.insert(
                format!("{prefix}{scope}/{}/{{name}}", r.plural),
                json!({"get": op, "put": op, "patch": op, "delete": op}),
            );
            let schema_name =
                format!("{}.{version}.{}", if group.is_empty() { "io.k8s.api.core" } else { group }, r.kind);
            let mut schema = r
                .schema
                .as_deref()
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
            schema["x-kubernetes-group-version-kind"] = json!([gvk]);
            schemas.insert(schema_name, schema);
        }
        (!paths.is_empty()).then(|| {
            json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0"},
                                           "paths": paths, "components": {"schemas": schemas}})
        })
    }

    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let mut resources = Vec::new();
        for r in self.0.values().filter(|r| r.group == group && r.version == version) {
            let verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
            resources.push(json!({
                "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                "verbs": verbs, "shortNames": r.short_names,
            }));
            if r.status_subresource {
                resources.push(
                    json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                                      "kind": r.kind, "verbs": ["get", "patch", "update"]}),
                );
            }
        }
        if resources.is_empty() {
            return None;
        }
        let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
    }
}

/// One printer column of a CRD version (`additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub kind: CellKind,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellKind {
    String,
    Integer,
    Number,
    Boolean,
    Date,
}

impl CellKind {
    fn parse(s: &str) -> CellKind {
        match s {
            "integer" => CellKind::Integer,
            "number" => CellKind::Number,
            "boolean" => CellKind::Boolean,
            "date" => CellKind::Date,
            _ => CellKind::String,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CellKind::String => "string",
            CellKind::Integer => "integer",
            CellKind::Number => "number",
            CellKind::Boolean => "boolean",
            CellKind::Date => "date",
        }
    }
}

impl PrinterColumn {
    /// The columns of one CRD version; a CRD without any gets Age, as the real server does.
    pub fn of_crd_version(version: &Value) -> Vec<PrinterColumn> {
        let columns: Vec<PrinterColumn> = version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                Some(PrinterColumn {
                    name: c.get("name")?.as_str()?.to_string(),
                    kind: CellKind::parse(&s("type")),
                    format: s("format"),
                    description: s("description"),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    json_path: c.get("jsonPath")?.as_str()?.to_string(),
                })
            })
            .collect();
        if columns.is_empty() {
            return vec![PrinterColumn {
                name: "Age".into(),
                kind: CellKind::Date,
                format: String::new(),
                description:
                    "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
                priority: 0,
                json_path: ".metadata.creationTimestamp".into(),
            }];
        }
        columns
    }
}
