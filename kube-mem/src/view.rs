//! What admission and authorization read of the stored objects: a read-only view. The store
//! gives one; the policies and the RBAC authorizer take it, not the store, so they see the
//! objects as they stand and cannot write (kube-apiserver's admission reads through informers'
//! listers in the same way).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::resources::{ResourceKey, ResourceType};
use crate::status::ApiError;

/// The types served and the objects stored, read-only.
pub trait View {
    /// The type served at `group`/`version`/`plural`, if any.
    fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType>;
    /// Every stored object of `rt`, as stored, in key order.
    fn objects<'a>(&'a self, rt: &'a ResourceType) -> impl Iterator<Item = &'a Value> + 'a;
    /// One stored object, as stored.
    fn peek(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<&Value>;
}

/// A stored object, shared with the events that wrote it, and its JSON as the store wrote it
/// once for its event: what a write's answer, a read of it in its stored version and the next
/// event's `previous` send instead of writing the object again.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) object: Arc<Value>,
    pub(crate) json: bytes::Bytes,
}

impl std::ops::Deref for Stored {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.object
    }
}

/// One kind's objects by (namespace, name).
pub(crate) type Bucket = BTreeMap<(String, String), Stored>;

/// Every kind's objects, by (group, plural): an object is stored once, whichever version a
/// client uses.
pub(crate) type Objects = BTreeMap<(String, String), Bucket>;

/// Where a kind's objects are kept: by group and plural, whichever version a client uses.
pub(crate) fn store_key(rt: &ResourceType) -> (String, String) {
    (rt.group.clone(), rt.plural.clone())
}

/// The types served and the objects stored as admission (and an in-process controller) reads
/// them: borrowed from the store for one request, never written through.
#[derive(Debug, Clone, Copy)]
pub struct ReadView<'a> {
    types: &'a BTreeMap<ResourceKey, ResourceType>,
    objects: &'a Objects,
}

impl<'a> ReadView<'a> {
    pub(crate) fn new(types: &'a BTreeMap<ResourceKey, ResourceType>, objects: &'a Objects) -> Self {
        ReadView { types, objects }
    }

    /// The type served at `group`/`version`/`plural`, if any.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&'a ResourceType> {
        self.types.get(&ResourceKey { group: group.into(), version: version.into(), plural: plural.into() })
    }

    pub(crate) fn bucket(&self, rt: &ResourceType) -> Option<&'a Bucket> {
        self.objects.get(&store_key(rt))
    }

    /// The stored objects of one kind, borrowed, in (namespace, name) order.
    pub fn objects(&self, rt: &ResourceType) -> impl Iterator<Item = &'a Value> + use<'a> {
        self.bucket(rt).into_iter().flat_map(|b| b.values()).map(|o| &**o)
    }

    /// One stored object, borrowed, as stored (in its storage version).
    pub fn peek(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<&'a Value> {
        self.bucket(rt)?.get(&(ns.unwrap_or("").to_string(), name.to_string())).map(|o| &**o)
    }

    /// Every stored object, with its (group, plural) and (namespace, name), in that order.
    pub(crate) fn all(
        &self,
    ) -> impl Iterator<Item = (&'a (String, String), &'a (String, String), &'a Value)> + use<'a> {
        self.objects.iter().flat_map(|(store, bucket)| bucket.iter().map(move |(key, obj)| (store, key, &**obj)))
    }

    /// Every stored object's (group, plural) and (namespace, name).
    pub(crate) fn keys(&self) -> impl Iterator<Item = (&'a (String, String), &'a (String, String))> + use<'a> {
        self.all().map(|(store, key, _)| (store, key))
    }

    /// Whether an object is stored under (group, plural) and (namespace, name).
    pub(crate) fn contains(&self, store: &(String, String), key: &(String, String)) -> bool {
        self.objects.get(store).is_some_and(|b| b.contains_key(key))
    }

    /// One stored object with its JSON.
    pub(crate) fn stored(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<&'a Stored> {
        self.bucket(rt)?.get(&(ns.unwrap_or("").to_string(), name.to_string()))
    }

    /// One object as a client of `rt`'s version sees it.
    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.peek(rt, ns, name).map(|o| present(rt, o)).ok_or_else(|| ApiError::not_found(&rt.display_name(), name))
    }
}

impl View for ReadView<'_> {
    fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        ReadView::lookup(self, group, version, plural)
    }

    fn objects<'b>(&'b self, rt: &'b ResourceType) -> impl Iterator<Item = &'b Value> + 'b {
        ReadView::objects(self, rt)
    }

    fn peek(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<&Value> {
        ReadView::peek(self, rt, ns, name)
    }
}

/// A string field of an object's metadata.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str)
}

/// The object without its status, copied: what a status write keeps of the stored object.
/// Without `metadata.managedFields` unless `managed`: a write that records its own does not copy
/// the stored ones to replace them.
pub(crate) fn without_status(obj: &Value, managed: bool) -> Value {
    match obj.as_object() {
        Some(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| *k != "status")
                .map(|(k, v)| (k.clone(), if k == "metadata" { metadata(v, managed) } else { v.clone() }))
                .collect(),
        ),
        None => obj.clone(),
    }
}

/// The stored object's apiVersion, kind and metadata with `status`: what a status write of a
/// CRD kind is admitted on (`admission::mutate_status` adds the rest). `managed` as for
/// [`without_status`].
pub(crate) fn with_status(stored: &Value, status: Option<Value>, managed: bool) -> Value {
    let mut o: serde_json::Map<String, Value> = ["apiVersion", "kind", "metadata"]
        .into_iter()
        .filter_map(|k| {
            stored.get(k).map(|v| (k.to_string(), if k == "metadata" { metadata(v, managed) } else { v.clone() }))
        })
        .collect();
    if let Some(s) = status {
        o.insert("status".into(), s);
    }
    Value::Object(o)
}

/// A copy of an object's metadata, with its managedFields or without.
fn metadata(meta: &Value, managed: bool) -> Value {
    match meta.as_object() {
        Some(m) if !managed => Value::Object(
            m.iter().filter(|(k, _)| *k != "managedFields").map(|(k, v)| (k.clone(), v.clone())).collect(),
        ),
        _ => meta.clone(),
    }
}

/// What a merge patch (JSON or strategic) is applied to: the object as a client of `rt`'s
/// version sees it, without `metadata.managedFields`, and of the status subresource
/// (`status_only`) only its metadata and status. A status write keeps nothing else of what it is
/// sent (it takes the rest from the stored object), so the spec is not copied to be patched and
/// thrown away. Both patches replace the entry list whole (ObjectMeta gives it no merge key),
/// so a write reads the entries a patch names, or, naming none, the stored ones, which a copy
/// here would only stand for.
pub fn patch_target(rt: &ResourceType, obj: &Value, status_only: bool) -> Value {
    let mut o = serde_json::Map::new();
    for (k, v) in obj.as_object().into_iter().flatten() {
        let copy = match k.as_str() {
            "apiVersion" | "kind" => continue,
            "metadata" => metadata(v, false),
            "status" => v.clone(),
            _ if status_only => continue,
            _ => v.clone(),
        };
        o.insert(k.clone(), copy);
    }
    o.insert("apiVersion".into(), rt.api_version().into());
    o.insert("kind".into(), rt.kind.clone().into());
    Value::Object(o)
}

/// Whether `obj` is stored as a client of `rt`'s version sees it ([`present`] would not change it).
pub(crate) fn in_version(rt: &ResourceType, obj: &Value) -> bool {
    obj.get("apiVersion").and_then(Value::as_str) == Some(rt.api_version().as_str())
        && obj.get("kind").and_then(Value::as_str) == Some(rt.kind.as_str())
}

/// The object as a client of `rt`'s version sees it.
pub(crate) fn present(rt: &ResourceType, obj: &Value) -> Value {
    let mut o = obj.clone();
    o["apiVersion"] = rt.api_version().into();
    o["kind"] = rt.kind.clone().into();
    o
}
