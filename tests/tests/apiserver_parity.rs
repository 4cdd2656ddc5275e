//! kube-mem against the real kube-apiserver: the same requests, the same answers. Each case
//! below makes requests a client of Stowage's hub makes (creates that collide, stale updates,
//! invalid names and custom objects against a CRD's schema and CEL rules, status subresource
//! writes, server-side apply and its conflicts, managedFields, watches, finalizers, dry runs,
//! selectors) and keeps what a client sees of the answers: status codes, reasons, messages,
//! defaulted fields, managers, watch event types. Uids, times and resource versions are left out.
//!
//! What the real kube-apiserver v1.37 answered is committed in `tests/parity/apiserver.json`. The
//! in-memory suite runs the cases on kube-mem and compares with it; `scripts/test-real` runs them
//! on the testbed's hub (`STOWAGE_TESTBED_DIR`) and compares the same file, so the file stays
//! what the real server says. `STOWAGE_PARITY_RECORD=1` on the testbed writes it again.

use std::path::PathBuf;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::{Client, Config, ResourceExt};
use serde_json::{Value, json};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/parity/apiserver.json");

/// A CRD with what clients meet in Stowage's and Trainer's: a structural schema with required
/// fields, bounds, an enum, defaults, a CEL rule, and the status subresource.
fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.parity.stowage.dev"},
        "spec": {"group": "parity.stowage.dev", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["size"],
                                 "x-kubernetes-validations": [{"rule": "self.size >= self.minSize",
                                                               "message": "size must be at least minSize"}],
                                 "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                    "minSize": {"type": "integer", "default": 1},
                                    "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                                    "tags": {"type": "array", "maxItems": 2, "minItems": 1,
                                             "items": {"type": "string", "x-kubernetes-validations": [
                                                 {"rule": "self != 'x'", "message": "no tag x"}]}},
                                    "label": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$",
                                              "x-kubernetes-validations": [{"rule": "self != 'bad'"}]},
                                    "weight": {"type": "integer", "x-kubernetes-validations": [
                                        {"rule": "self % 2 == 0", "message": "weight must be even"}]},
                                    "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1},
                                    "owners": {"type": "object", "maxProperties": 1,
                                               "additionalProperties": {"type": "string"}}}},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}}))
    .expect("the CRD")
}

fn widgets(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("parity.stowage.dev", "v1", "Widget"), "widgets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "parity.stowage.dev/v1", "kind": "Widget",
                                  "metadata": {"name": name}, "spec": spec}))
    .expect("a widget")
}

/// What a client sees of a refusal: code, reason, message, and the causes' fields.
fn refusal(e: kube::Error, ns: &str) -> Value {
    match e {
        kube::Error::Api(s) => json!({"code": s.code, "reason": s.reason, "message": s.message.replace(ns, "NS")}),
        other => json!({"not an API error": other.to_string()}),
    }
}

fn outcome<T: k8s_openapi::serde::Serialize>(
    r: Result<T, kube::Error>,
    ns: &str,
    keep: impl Fn(Value) -> Value,
) -> Value {
    match r {
        Ok(v) => keep(serde_json::to_value(v).expect("json")),
        Err(e) => refusal(e, ns),
    }
}

/// managedFields as (manager, operation, subresource), in order.
fn managers(obj: &Value) -> Value {
    let entries = obj.pointer("/metadata/managedFields").and_then(Value::as_array).cloned().unwrap_or_default();
    entries
        .iter()
        .map(|e| {
            json!([e["manager"], e["operation"], e.get("subresource").cloned().unwrap_or(Value::Null), e["fieldsV1"]])
        })
        .collect()
}

/// An object as the cases compare it: spec, status, data, generation, labels, finalizers.
fn shape(obj: Value) -> Value {
    let m = &obj["metadata"];
    json!({"generation": m["generation"], "labels": m["labels"], "finalizers": m["finalizers"],
           "deleting": m.get("deletionTimestamp").is_some_and(|t| !t.is_null()),
           "spec": obj["spec"], "status": obj["status"], "data": obj["data"]})
}

/// Runs every case on `client` in a namespace of its own, and says what each saw.
async fn cases(client: &Client) -> Vec<(&'static str, Value)> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let ns = format!("parity-{:x}", (std::process::id() ^ nanos) & 0xfffff);
    let ns_api: Api<Namespace> = Api::all(client.clone());
    ns_api
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"))
        .await
        .expect("the namespace");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("parity-admin").force();
    crds.patch("widgets.parity.stowage.dev", &pp, &Patch::Apply(widget_crd())).await.expect("the CRD");
    // Established, and served: a real API server takes a moment.
    let w = widgets(client, &ns);
    for _ in 0..100 {
        if w.list(&ListParams::default()).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut out: Vec<(&'static str, Value)> = Vec::new();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = |name: &str, data: Value| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("cm")
    };
    let post = PostParams { field_manager: Some("parity-create".into()), ..PostParams::default() };

    // Core kinds: create twice, get what is missing, update at a stale version, an invalid name.
    let first = cms.create(&post, &cm("one", json!({"a": "1"}))).await.expect("created");
    out.push(("configmap created", shape(serde_json::to_value(&first).expect("json"))));
    out.push(("configmap managers after create", managers(&serde_json::to_value(&first).expect("json"))));
    out.push(("configmap created twice", outcome(cms.create(&post, &cm("one", json!({}))).await, &ns, shape)));
    out.push(("configmap missing", outcome(cms.get("nope").await, &ns, shape)));
    out.push((
        "configmap missing deleted",
        outcome(cms.delete("nope", &DeleteParams::default()).await.map(|_| ()), &ns, |v| v),
    ));
    let mut stale = first.clone();
    cms.replace("one", &post, &{
        let mut c = first.clone();
        c.data = Some([("a".to_string(), "2".to_string())].into());
        c
    })
    .await
    .expect("updated");
    stale.data = Some([("a".to_string(), "3".to_string())].into());
    out.push(("configmap updated at a stale version", outcome(cms.replace("one", &post, &stale).await, &ns, shape)));
    out.push(("configmap invalid name", outcome(cms.create(&post, &cm("Bad_Name", json!({}))).await, &ns, shape)));
    out.push((
        "configmap merge patch of a missing one",
        outcome(
            cms.patch("nope", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "1"}}))).await,
            &ns,
            shape,
        ),
    ));

    // A custom object against its schema: defaults, each kind of refusal.
    let made = w.create(&post, &widget("ok", json!({"size": 3}))).await.map(|o| serde_json::to_value(o).expect("json"));
    out.push(("widget created with defaults", outcome(made, &ns, shape)));
    for (case, spec) in [
        ("widget without its required field", json!({"mode": "fast"})),
        ("widget above its maximum", json!({"size": 11})),
        ("widget outside its enum", json!({"size": 2, "mode": "slow"})),
        ("widget of the wrong type", json!({"size": "two"})),
        ("widget with too many items", json!({"size": 2, "tags": ["a", "b", "c"]})),
        ("widget failing its CEL rule", json!({"size": 2, "minSize": 5})),
        ("widget with an unknown field", json!({"size": 2, "colour": "red"})),
        ("widget below its minimum", json!({"size": 0})),
        ("widget with too few items", json!({"size": 2, "tags": []})),
        ("widget with too short a string", json!({"size": 2, "label": "a"})),
        ("widget with too long a string", json!({"size": 2, "label": "abcdef"})),
        ("widget not matching its pattern", json!({"size": 2, "label": "ab1"})),
        ("widget at an exclusive maximum", json!({"size": 2, "ratio": 1})),
        ("widget with too many properties", json!({"size": 2, "owners": {"a": "x", "b": "y"}})),
        ("widget with a float for an integer", json!({"size": 2.5})),
        ("widget with two errors", json!({"size": 11, "mode": "slow"})),
        ("widget failing a rule on a string", json!({"size": 2, "label": "bad"})),
        ("widget failing a rule on a list item", json!({"size": 2, "tags": ["a", "x"]})),
        ("widget failing a rule on a number", json!({"size": 2, "weight": 3})),
        ("widget with an error and a failing rule", json!({"size": 11, "minSize": 12})),
    ] {
        let r = w.create(&post, &widget(&case.replace(' ', "-").to_lowercase().replace(['\''], ""), spec)).await;
        out.push((case, outcome(r.map(|o| serde_json::to_value(o).expect("json")), &ns, shape)));
    }

    // The status subresource: a status write keeps the spec and the generation; a spec write
    // keeps the status and raises the generation.
    let status = w
        .patch_status(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 9}, "status": {"phase": "Running"}})),
        )
        .await;
    out.push(("widget status written with a spec", outcome(status, &ns, shape)));
    let spec = w
        .patch("ok", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}, "status": {"phase": "Gone"}})))
        .await;
    out.push(("widget spec written with a status", outcome(spec, &ns, shape)));

    // Server-side apply: owners, a conflict naming the other manager, force.
    let applied = w
        .patch("ok", &PatchParams::apply("parity-apply"), &Patch::Apply(widget("ok", json!({"size": 5}))))
        .await
        .map(|o| serde_json::to_value(o).expect("json"));
    out.push((
        "widget applied",
        outcome(applied, &ns, |v| json!({"shape": shape(v.clone()), "managers": managers(&v)})),
    ));
    let other =
        w.patch("ok", &PatchParams::apply("parity-other"), &Patch::Apply(widget("ok", json!({"size": 6})))).await;
    out.push(("widget applied by another manager", outcome(other, &ns, shape)));
    let forced = w
        .patch("ok", &PatchParams::apply("parity-other").force(), &Patch::Apply(widget("ok", json!({"size": 6}))))
        .await
        .map(|o| serde_json::to_value(o).expect("json"));
    out.push((
        "widget applied with force",
        outcome(forced, &ns, |v| json!({"shape": shape(v.clone()), "managers": managers(&v)})),
    ));
    let missing_apply = w
        .patch(
            "applied-new",
            &PatchParams::apply("parity-apply"),
            &Patch::Apply(widget("applied-new", json!({"size": 2}))),
        )
        .await
        .map(|o| serde_json::to_value(o).expect("json"));
    out.push((
        "widget made by apply",
        outcome(missing_apply, &ns, |v| json!({"shape": shape(v.clone()), "managers": managers(&v)})),
    ));

    // Dry run: answered as if made, nothing kept.
    let dry = PostParams { dry_run: true, ..post.clone() };
    let r = cms.create(&dry, &cm("dry", json!({"a": "1"}))).await;
    out.push(("configmap dry-run created", outcome(r, &ns, shape)));
    out.push(("configmap dry-run kept", outcome(cms.get("dry").await, &ns, shape)));

    // Finalizers: deleting marks, removing the last finalizer deletes.
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["parity.stowage.dev/hold".into()]);
    cms.create(&post, &held).await.expect("held made");
    let deleted = cms
        .delete("held", &DeleteParams::default())
        .await
        .map(|e| e.map_left(|c| shape(serde_json::to_value(c).expect("json"))).left());
    out.push(("configmap with a finalizer deleted", outcome(deleted, &ns, |v| v)));
    out.push(("configmap with a finalizer after delete", outcome(cms.get("held").await, &ns, shape)));
    let released =
        cms.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await;
    out.push(("configmap finalizer removed", outcome(released.map(|_| ()), &ns, |v| v)));
    out.push(("configmap after its finalizer", outcome(cms.get("held").await, &ns, shape)));

    // Selectors.
    let mut labelled = cm("labelled", json!({}));
    labelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    cms.create(&post, &labelled).await.expect("labelled made");
    let names = |l: kube::core::ObjectList<ConfigMap>| json!(l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>());
    out.push((
        "list by label",
        outcome(cms.list(&ListParams::default().labels("team=a")).await.map(names), &ns, |v| v),
    ));
    out.push((
        "list by set-based label",
        outcome(cms.list(&ListParams::default().labels("team in (b,c)")).await.map(names), &ns, |v| v),
    ));
    out.push((
        "list by name field",
        outcome(cms.list(&ListParams::default().fields("metadata.name=one")).await.map(names), &ns, |v| v),
    ));
    out.push((
        "list by an unsupported field",
        outcome(cms.list(&ListParams::default().fields("data.a=1")).await.map(names), &ns, |v| v),
    ));
    out.push((
        "list by a bad label selector",
        outcome(cms.list(&ListParams::default().labels("team in a")).await.map(names), &ns, |v| v),
    ));

    // A watch from a list's version sees what follows, in order.
    let list = cms.list(&ListParams::default()).await.expect("list");
    let version = list.metadata.resource_version.clone().unwrap_or_default();
    let stream = cms.watch(&WatchParams::default().timeout(10), &version).await.expect("watch");
    cms.create(&post, &cm("watched", json!({"a": "1"}))).await.expect("watched made");
    cms.patch("watched", &PatchParams::default(), &Patch::Merge(json!({"data": {"a": "2"}}))).await.expect("patched");
    cms.delete("watched", &DeleteParams::default()).await.expect("deleted");
    let seen: Vec<Value> = stream
        .take(3)
        .map_ok(|e| match e {
            WatchEvent::Added(c) => json!(["ADDED", c.name_any(), c.data]),
            WatchEvent::Modified(c) => json!(["MODIFIED", c.name_any(), c.data]),
            WatchEvent::Deleted(c) => json!(["DELETED", c.name_any(), c.data]),
            WatchEvent::Bookmark(_) => json!(["BOOKMARK"]),
            WatchEvent::Error(e) => json!(["ERROR", e.code, e.reason]),
        })
        .try_collect()
        .await
        .unwrap_or_else(|e| vec![json!(["stream error", e.to_string()])]);
    out.push(("watch from a list's version", json!(seen)));

    out.extend(policy_variables(client, &ns).await);

    let _ = ns_api.delete(&ns, &DeleteParams::default()).await;
    out
}

/// A ValidatingAdmissionPolicy's variables are evaluated when read: one that fails and is not
/// read admits, one read fails the expression reading it, `||` absorbs that failure, a chain
/// of variables resolves. Each case is a dry-run create of a ConfigMap its policy matches by
/// name, in `ns` alone; what is kept is admitted or the code and whether the message names
/// the failing expression (the evaluators' own words for a missing key differ).
async fn policy_variables(client: &Client, ns: &str) -> Vec<(&'static str, Value)> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let cases = [
        ("policy variable failing, not read", "unread", "object.data.size() > 0"),
        ("policy variable failing, read", "read", "variables.broken"),
        ("policy variable failing, absorbed by ||", "absorbed", "variables.broken || true"),
        ("policy variables read in a chain", "chain", "variables.third == 'v-v-v'"),
    ];
    let name = |case: &str| format!("{ns}-{case}");
    for (_, case, validation) in cases {
        let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name(case)},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "matchConditions": [{"name": "this-case", "expression":
                    format!("request.namespace == '{ns}' && object.metadata.name == '{case}'")}],
                "variables": [
                    {"name": "broken", "expression": "object.data.missing == 'x'"},
                    {"name": "first", "expression": "object.data.k"},
                    {"name": "second", "expression": "variables.first + '-' + variables.first"},
                    {"name": "third", "expression": "variables.second + '-' + variables.first"}],
                "validations": [{"expression": validation}]}});
        let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name(case)}, "spec": {"policyName": name(case), "validationActions": ["Deny"]}});
        policies
            .create(&PostParams::default(), &serde_json::from_value(policy).expect("policy"))
            .await
            .expect("policy");
        bindings
            .create(&PostParams::default(), &serde_json::from_value(binding).expect("binding"))
            .await
            .expect("binding");
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let cm = |case: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": case}, "data": {"k": "v"}})).expect("cm")
    };
    // A real API server takes a moment to enforce a new policy: until the one that must deny does.
    for _ in 0..100 {
        if cms.create(&dry_run, &cm("read")).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut out = Vec::new();
    for (label, case, validation) in cases {
        let seen = match cms.create(&dry_run, &cm(case)).await {
            Ok(_) => json!("admitted"),
            Err(kube::Error::Api(s)) => json!({"code": s.code,
                "names the expression": s.message.contains(&format!("expression '{validation}' resulted in error"))}),
            Err(other) => json!({"not an API error": other.to_string()}),
        };
        out.push((label, seen));
    }
    for (_, case, _) in cases {
        let _ = bindings.delete(&name(case), &DeleteParams::default()).await;
        let _ = policies.delete(&name(case), &DeleteParams::default()).await;
    }
    out
}

/// The answer with the causes of a several-cause refusal in sorted order: kube-apiserver lists
/// two schema violations in either order from one run to the next (its validator walks a Go
/// map), kube-mem by field.
fn in_any_order(v: &Value) -> Value {
    let mut v = v.clone();
    let Some(message) = v.get("message").and_then(Value::as_str) else { return v };
    let Some((head, rest)) = message.split_once("is invalid: [") else { return v };
    let Some(list) = rest.strip_suffix(']') else { return v };
    // A cause starts with its field and ": "; a comma inside one (its supported values) does not.
    let starts_cause = |piece: &str| {
        piece.split_once(": ").is_some_and(|(field, _)| {
            field == "<nil>" || field.chars().all(|c| c.is_ascii_alphanumeric() || "._[]/-".contains(c))
        })
    };
    let mut causes: Vec<String> = Vec::new();
    for piece in list.split(", ") {
        match causes.last_mut() {
            Some(last) if !starts_cause(piece) => {
                last.push_str(", ");
                last.push_str(piece);
            }
            _ => causes.push(piece.to_string()),
        }
    }
    causes.sort();
    v["message"] = format!("{head}is invalid: [{}]", causes.join(", ")).into();
    v
}

async fn client_for_run() -> (Client, Option<kube_mem::ApiServer>) {
    match std::env::var("STOWAGE_TESTBED_DIR") {
        Ok(dir) => (stowage_tests::e2e::client(&PathBuf::from(dir).join("hub.kubeconfig")).await, None),
        Err(_) => {
            let server = kube_mem::ApiServer::start().await.expect("kube-mem");
            let client = Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client");
            (client, Some(server))
        }
    }
}

/// The cases on kube-mem (or, with `STOWAGE_TESTBED_DIR`, on the testbed's real hub) answer as
/// the real kube-apiserver answered them.
#[tokio::test]
async fn kube_mem_answers_as_the_real_kube_apiserver() {
    let (client, _server) = client_for_run().await;
    let seen = cases(&client).await;
    let seen_json: Value =
        seen.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<serde_json::Map<_, _>>().into();
    if std::env::var_os("STOWAGE_PARITY_RECORD").is_some() {
        assert!(_server.is_none(), "record from the real API server: STOWAGE_TESTBED_DIR");
        std::fs::write(GOLDEN, serde_json::to_string_pretty(&seen_json).expect("json") + "\n").expect("written");
        return;
    }
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(GOLDEN).expect("the golden file")).expect("json");
    let differ: Vec<String> = seen
        .iter()
        .filter(|(k, v)| golden.get(*k).map(in_any_order) != Some(in_any_order(v)))
        .map(|(k, v)| format!("{k}:\n  real: {}\n  here: {v}", golden.get(*k).unwrap_or(&Value::Null)))
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} cases differ from the real kube-apiserver:\n{}",
        differ.len(),
        seen.len(),
        differ.join("\n")
    );
}
