//! The write path, as kube-apiserver's generic registry is: one door per verb taking who asks
//! ([`Requester`]), each running the [`admission`] chain and the kind's strategy (names,
//! generation, the status subresource, finalizers, managedFields) before [`Storage`] keeps the
//! result; the CRD registry (the types served); what a delete takes along ([`gc`],
//! [`namespaces`], a pod's logs).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::admission::{self, Review, Validator};
use super::auth::{Requester, UserInfo};
use super::gc;
use super::managed::{self, Writer};
use super::namespaces;
use super::policy::{self, Attributes, Operation};
use super::resources::{self, ResourceKey, ResourceType};
use super::schema;
use super::status::ApiError;
use super::storage::Storage;
use super::time::now_rfc3339;
use super::typed::Ty;
use super::view::{Bucket, ReadView, Stored, View, meta_str, present, store_key, with_status, without_status};

/// kube-apiserver's generic registry for every kind: the one door per verb, each running the
/// admission chain and the kind's strategy (names, generation, status, finalizers) before the
/// [`Storage`] keeps the result; the CRD registry; what a delete takes along.
#[derive(Debug)]
pub struct Store {
    pub types: BTreeMap<ResourceKey, ResourceType>,
    /// The objects, their resourceVersions and the watch history.
    pub storage: Storage,
    /// Validating admission, in the order added.
    validators: Vec<Arc<dyn Validator>>,
    /// What the pods' containers wrote (the in-process kubelet's), forgotten with the pod.
    pub logs: super::logs::ContainerLogs,
}

/// Whether the kind keeps `metadata.generation`, as kube-apiserver v1.37's strategies do (read on
/// the testbed): every custom resource, and of the built-ins those whose spec a controller
/// follows. A ConfigMap, Secret, Service, Namespace, Node or Lease has none.
fn has_generation(rt: &ResourceType) -> bool {
    const BUILT_IN: &[(&str, &str)] = &[
        ("", "pods"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("policy", "poddisruptionbudgets"),
        ("scheduling.k8s.io", "priorityclasses"),
        ("networking.k8s.io", "ingresses"),
        ("networking.k8s.io", "networkpolicies"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
        ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
        ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"),
    ];
    rt.schema.is_some() || BUILT_IN.iter().any(|(g, p)| rt.group == *g && rt.plural == *p)
}

/// Whether everything but metadata and status is equal: a change there bumps
/// `metadata.generation`. Compared in place; objects are large and writes many.
fn same_spec(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return a == b };
    let spec = |k: &String| k != "metadata" && k != "status";
    a.keys().filter(|k| spec(k)).count() == b.keys().filter(|k| spec(k)).count()
        && a.iter().filter(|(k, _)| spec(k)).all(|(k, v)| b.get(k) == Some(v))
}

/// What a write does to a resource with a status subresource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource: status changes are ignored.
    Main,
    /// `/status`: only status changes are kept.
    Status,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    pub strict: bool,
    pub dry_run: bool,
}

/// A server-side apply request's manager and whether it takes fields from others by force.
#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions<'a> {
    pub manager: &'a str,
    pub force: bool,
}

/// Takes `metadata.managedFields` out of an object.
fn take_managed(obj: &mut Value) -> Option<Value> {
    obj.get_mut("metadata").and_then(Value::as_object_mut).and_then(|m| m.remove("managedFields"))
}

/// How a write's field ownership lands in `metadata.managedFields`.
#[derive(Debug, Clone, Copy)]
enum Record<'a> {
    /// As the object carries it (in-process controllers' writes are not tracked).
    Keep,
    /// An `Update` by this manager.
    Update(&'a str),
    /// Computed by server-side apply already, carried by the object.
    Applied,
}

impl Record<'_> {
    /// How `who`'s create or update is recorded: a client through the API as an Update by its
    /// field manager; the server's own writes, and a user's given their managedFields, as the
    /// object carries them.
    fn of(who: Requester<'_>) -> Record<'_> {
        match who {
            Requester::Manager(_, manager) => Record::Update(manager),
            Requester::InProcess | Requester::User(_) => Record::Keep,
        }
    }
}

impl Part {
    /// The subresource managedFields entries name: `""` for the main resource.
    fn subresource(self) -> &'static str {
        match self {
            Part::Main => "",
            Part::Status => "status",
        }
    }
}

impl Store {
    /// Adds a validating admission step for every later write.
    pub fn add_validator(&mut self, v: Arc<dyn Validator>) {
        self.validators.push(v);
    }

    pub fn new() -> Self {
        let mut s =
            Store { types: BTreeMap::new(), storage: Storage::new(), logs: Default::default(), validators: Vec::new() };
        for rt in resources::builtins() {
            s.types.insert(rt.key(), rt);
        }
        // kube-apiserver's system namespaces (its bootstrap controller makes them at start).
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let _ = s.create(
                Requester::InProcess,
                &s.types_by_plural("", "v1", "namespaces"),
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                &WriteOptions { strict: false, dry_run: false },
            );
        }
        s
    }

    fn types_by_plural(&self, group: &str, version: &str, plural: &str) -> ResourceType {
        self.types
            .get(&ResourceKey { group: group.into(), version: version.into(), plural: plural.into() })
            .cloned()
            .unwrap_or_else(|| resources::builtins().remove(0))
    }

    pub fn resource_version(&self) -> u64 {
        self.storage.resource_version()
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types.get(&ResourceKey { group: group.into(), version: version.into(), plural: plural.into() })
    }

    /// The types and objects as they stand, read-only: what admission reads.
    pub fn view(&self) -> ReadView<'_> {
        ReadView::new(&self.types, self.storage.objects())
    }

    fn bucket(&self, rt: &ResourceType) -> Option<&Bucket> {
        self.view().bucket(rt)
    }

    /// The stored objects of one kind, borrowed, in (namespace, name) order: in-process
    /// controllers scan with this instead of copying every object each pass.
    pub fn objects(&self, rt: &ResourceType) -> impl Iterator<Item = &Value> {
        self.view().objects(rt)
    }

    /// One stored object, borrowed, as stored (in its storage version).
    pub fn peek(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.view().peek(rt, ns, name)
    }

    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.view().get(rt, ns, name)
    }

    /// Items in (namespace, name) order from after `continue_after`, at most `limit`.
    pub fn list(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        keep: &dyn Fn(&Value) -> bool,
        limit: Option<usize>,
        continue_after: Option<(String, String)>,
    ) -> (Vec<Value>, Option<(String, String)>) {
        let (items, next) = self.list_stored(rt, ns, keep, limit, continue_after);
        (items.into_iter().map(|o| present(rt, o)).collect(), next)
    }

    /// [`Store::list`]'s items as stored, with their JSON, borrowed.
    pub(crate) fn list_stored(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        keep: &dyn Fn(&Value) -> bool,
        limit: Option<usize>,
        continue_after: Option<(String, String)>,
    ) -> (Vec<&Stored>, Option<(String, String)>) {
        let mut items = Vec::new();
        let mut next = None;
        for ((ons, name), obj) in self.bucket(rt).into_iter().flatten() {
            if ns.is_some_and(|n| n != ons) || continue_after.as_ref().is_some_and(|c| (ons, name) <= (&c.0, &c.1)) {
                continue;
            }
            if !keep(obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                next = items.last().map(|o: &&Stored| {
                    (meta_str(o, "namespace").unwrap_or("").to_string(), meta_str(o, "name").unwrap_or("").to_string())
                });
                break;
            }
            items.push(obj);
        }
        (items, next)
    }

    /// Creates on behalf of `who`, whom admission (ValidatingAdmissionPolicies) sees: the
    /// object's managedFields kept as they come, or recorded as an Update by a client's field
    /// manager, as a create through the API is.
    pub fn create(
        &mut self,
        who: Requester<'_>,
        rt: &ResourceType,
        ns: Option<&str>,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        self.create_recorded(who.user(), rt, ns, obj, opts, Record::of(who))
    }

    fn create_recorded(
        &mut self,
        user: &UserInfo,
        rt: &ResourceType,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
        record: Record<'_>,
    ) -> Result<Arc<Value>, ApiError> {
        namespaces::check(self.view(), rt, ns)?;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        let meta = obj.as_object_mut().and_then(|o| {
            o.entry("metadata").or_insert_with(|| json!({}));
            o.get_mut("metadata")?.as_object_mut()
        });
        let Some(meta) = meta else { return Err(ApiError::bad_request("metadata must be an object")) };
        let name = match meta.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) => self.storage.generated_name(prefix),
                None => {
                    return Err(ApiError::invalid(
                        &rt.plural,
                        "",
                        vec![("metadata.name".into(), "name or generateName is required".into())],
                    ));
                }
            },
        };
        if let Some(why) = admission::name_error(rt, &name) {
            let message = format!("Invalid value: {name:?}: {why}");
            return Err(ApiError::invalid(&rt.group_kind(), &name, vec![("metadata.name".into(), message)]));
        }
        let key = (ns.unwrap_or("").to_string(), name.clone());
        if self.bucket(rt).is_some_and(|b| b.contains_key(&key)) {
            return Err(ApiError::already_exists(&rt.display_name(), &name));
        }
        let violations = admission::mutate(rt, &mut obj, opts.strict)?;
        if let Record::Update(manager) = record {
            let base = managed::update_base(None, obj.pointer("/metadata/managedFields"), "");
            let writer = Writer { manager, subresource: "", api_version: &rt.api_version() };
            let reset = managed::reset_fields(rt.status_subresource, "");
            managed::update(
                &json!({}),
                &mut obj,
                base,
                &writer,
                Ty::Root(rt.schema.as_deref()),
                &reset,
                &now_rfc3339(),
            );
        }
        let defines = admission::validate(
            self.view(),
            &self.validators,
            &Review { rt, namespace: ns, object: &obj, old: None },
            violations,
            &Attributes {
                user,
                operation: Operation::Create,
                rt,
                subresource: None,
                namespace: ns,
                name: &name,
                object: Some(&obj),
                old: None,
                dry_run: opts.dry_run,
            },
        )?;
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        self.types.extend(defines.into_iter().map(|t| (t.key(), t)));
        let uid = self.storage.next_uid();
        let m = &mut obj["metadata"];
        m["name"] = name.clone().into();
        if let Some(n) = ns {
            m["namespace"] = n.into();
        }
        m["uid"] = uid.into();
        m["creationTimestamp"] = now_rfc3339().into();
        if has_generation(rt) {
            m["generation"] = 1.into();
        }
        if let Some(o) = m.as_object_mut() {
            o.remove("generateName");
        }
        if rt.plural == "namespaces" {
            obj["status"] = json!({"phase": "Active"});
        }
        obj["apiVersion"] = rt.api_version().into();
        obj["kind"] = rt.kind.clone().into();
        self.storage.put(rt, key, obj)
    }

    /// Replaces an object (PUT, or the result of a patch) on behalf of `who` (see
    /// [`Store::create`]). The object's resourceVersion, if any, must be current (optimistic
    /// concurrency).
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        who: Requester<'_>,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        part: Part,
        opts: &WriteOptions,
    ) -> Result<Arc<Value>, ApiError> {
        self.update_recorded(who.user(), rt, ns, name, obj, part, opts, Record::of(who))
    }

    #[allow(clippy::too_many_arguments)]
    fn update_recorded(
        &mut self,
        user: &UserInfo,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        mut obj: Value,
        part: Part,
        opts: &WriteOptions,
        record: Record<'_>,
    ) -> Result<Arc<Value>, ApiError> {
        let key = (ns.unwrap_or("").to_string(), name.to_string());
        let display = rt.display_name();
        // The stored object is read borrowed: objects are large, and most writes are status
        // updates that copy it once anyway.
        let Some(old) = self.bucket(rt).and_then(|b| b.get(&key)).map(|o| &**o) else {
            return Err(ApiError::not_found(&display, name));
        };
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        // The server writes its own fields into it below: anything but an object (or nothing)
        // is refused here, as on create, not found by a panic with the lock held.
        if obj.get("metadata").is_some_and(|m| !m.is_object()) {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
        if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|rv| !rv.is_empty())
            && Some(rv) != meta_str(old, "resourceVersion")
        {
            return Err(ApiError::conflict(&display, name));
        }
        if meta_str(&obj, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&obj, "name").unwrap_or("")
            )));
        }
        // What the client sent (or apply computed), taken before a status write starts from
        // the old object. Recorded writes write managedFields anew ([`Self::record`]), so the
        // object goes on without them and the stored ones are not copied into it only to be
        // replaced (an Update of a subresource reads none sent: `managed::update_base`).
        let recorded = !matches!(record, Record::Keep);
        let sent_managed = if recorded { take_managed(&mut obj) } else { None };
        // A status write of a CRD kind is admitted on its metadata and status alone, and
        // given the rest of the stored object after ([`admission::mutate_status`]).
        let status_alone = rt.status_subresource && part == Part::Status && admission::mutates_status_alone(rt);
        // Status and spec are written separately where a status subresource exists.
        if status_alone {
            obj = with_status(old, obj.as_object_mut().and_then(|o| o.remove("status")), !recorded);
        } else if rt.status_subresource {
            match part {
                Part::Main => match old.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        if let Some(o) = obj.as_object_mut() {
                            o.remove("status");
                        }
                    }
                },
                Part::Status => {
                    // Everything but the status from the stored object, as kube-apiserver's
                    // status strategies copy it: the old status is not copied only to be
                    // replaced (it is most of a pod's or a Placement's bytes).
                    let status = obj.as_object_mut().and_then(|o| o.remove("status"));
                    obj = without_status(old, !recorded);
                    if let (Some(s), Some(o)) = (status, obj.as_object_mut()) {
                        o.insert("status".into(), s);
                    }
                }
            }
        }
        // The server owns these metadata fields.
        for f in ["uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace", "name"] {
            match old["metadata"].get(f) {
                Some(v) => obj["metadata"][f] = v.clone(),
                None => {
                    if let Some(m) = obj["metadata"].as_object_mut() {
                        m.remove(f);
                    }
                }
            }
        }
        let violations = if status_alone {
            admission::mutate_status(rt, &mut obj, opts.strict, old)?
        } else {
            admission::mutate(rt, &mut obj, opts.strict)?
        };
        Self::record(rt, old, &mut obj, part, sent_managed, record);
        let defines = admission::validate(
            self.view(),
            &self.validators,
            &Review { rt, namespace: ns, object: &obj, old: Some(old) },
            violations,
            &Attributes {
                user,
                operation: Operation::Update,
                rt,
                subresource: (part == Part::Status).then_some("status"),
                namespace: ns,
                name,
                object: Some(&obj),
                old: Some(old),
                dry_run: opts.dry_run,
            },
        )?;
        if opts.dry_run {
            return Ok(Arc::new(obj));
        }
        if obj == *old {
            return Ok(Arc::new(present(rt, old)));
        }
        if has_generation(rt) && !same_spec(&obj, old) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
            obj["metadata"]["generation"] = (g + 1).into();
        }
        self.types.extend(defines.into_iter().map(|t| (t.key(), t)));
        obj["apiVersion"] = rt.api_version().into();
        obj["kind"] = rt.kind.clone().into();
        let finalizing = obj["metadata"].get("deletionTimestamp").is_some()
            && obj["metadata"].get("finalizers").and_then(Value::as_array).is_none_or(|f| f.is_empty());
        let stored = self.storage.put(rt, key.clone(), obj)?;
        if finalizing {
            self.remove(rt, &key);
        }
        // Shared with the store and the watch history: the caller mostly only reads it (the
        // HTTP handler writes it out), and a copy here was a twentieth of a burst's CPU.
        Ok(stored)
    }

    /// Writes the object's managedFields for an update, as `record` says.
    fn record(rt: &ResourceType, old: &Value, obj: &mut Value, part: Part, sent: Option<Value>, record: Record<'_>) {
        match record {
            Record::Keep => {}
            Record::Applied => match (sent, obj.get_mut("metadata").and_then(Value::as_object_mut)) {
                (Some(list), Some(meta)) => {
                    meta.insert("managedFields".into(), list);
                }
                (None, Some(meta)) => {
                    meta.remove("managedFields");
                }
                _ => {}
            },
            Record::Update(manager) => {
                let sub = part.subresource();
                let base = managed::update_base(Some(old), sent.as_ref(), sub);
                let writer = Writer { manager, subresource: sub, api_version: &rt.api_version() };
                let reset = managed::reset_fields(rt.status_subresource, sub);
                managed::update(old, obj, base, &writer, Ty::Root(rt.schema.as_deref()), &reset, &now_rfc3339());
            }
        }
    }

    /// Server-side apply of `config` by `apply.manager` to the object or its status: see
    /// [`managed`]. The configuration's `metadata.resourceVersion`, if any, is a precondition.
    /// Creates the object when there is none (the boolean says so). Its managedFields are what
    /// the apply computes, whoever asks.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        who: Requester<'_>,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        config: Value,
        part: Part,
        opts: &WriteOptions,
        apply: &ApplyOptions<'_>,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let key = (ns.unwrap_or("").to_string(), name.to_string());
        let live = self.bucket(rt).and_then(|b| b.get(&key)).map(|o| present(rt, o));
        if live.is_none() && part == Part::Status {
            return Err(ApiError::not_found(&rt.display_name(), name));
        }
        let config = applied_config(rt, ns, name, config, part, live.as_ref(), opts)?;
        let sub = part.subresource();
        let api_version = rt.api_version();
        let writer = Writer { manager: apply.manager, subresource: sub, api_version: &api_version };
        let reset = managed::reset_fields(rt.status_subresource, sub);
        let ty = Ty::Root(rt.schema.as_deref());
        let base = live.clone().unwrap_or_else(|| json!({}));
        let applied = managed::apply(&base, &config, &writer, apply.force, ty, &reset, &now_rfc3339())?;
        match live {
            None => Ok((self.create_recorded(who.user(), rt, ns, applied, opts, Record::Applied)?, true)),
            Some(_) => {
                Ok((self.update_recorded(who.user(), rt, ns, name, applied, part, opts, Record::Applied)?, false))
            }
        }
    }

    /// Deletes on behalf of `who` (see [`Store::create`]): with finalizers, marks the object
    /// (deletionTimestamp) and waits for them to be removed; without, removes it and
    /// garbage-collects its dependents.
    pub fn delete(
        &mut self,
        who: Requester<'_>,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let key = (ns.unwrap_or("").to_string(), name.to_string());
        let display = rt.display_name();
        let mut obj = self
            .bucket(rt)
            .and_then(|b| b.get(&key))
            .map(|o| Value::clone(o))
            .ok_or_else(|| ApiError::not_found(&display, name))?;
        policy::admit(
            &self.view(),
            &Attributes {
                user: who.user(),
                operation: Operation::Delete,
                rt,
                subresource: None,
                namespace: ns,
                name,
                object: None,
                old: Some(&obj),
                dry_run,
            },
        )?;
        if dry_run {
            return Ok(obj);
        }
        let has_finalizers = obj["metadata"].get("finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if obj["metadata"].get("deletionTimestamp").is_none() {
                obj["metadata"]["deletionTimestamp"] = now_rfc3339().into();
                obj["metadata"]["deletionGracePeriodSeconds"] = 0.into();
                return Ok(Arc::unwrap_or_clone(self.storage.put(rt, key, obj)?));
            }
            return Ok(obj);
        }
        Ok(self.remove(rt, &key).unwrap_or(obj))
    }

    fn remove(&mut self, rt: &ResourceType, key: &(String, String)) -> Option<Value> {
        let obj = self.storage.take(rt, key)?;
        if rt.plural == "namespaces" {
            // Everything in it goes with it, finalizers and admission aside.
            for (store, key) in namespaces::contents(self.view(), &key.1) {
                if let Some(rt) = self.type_of(&store) {
                    self.remove(&rt, &key);
                }
            }
        }
        if rt.plural == "customresourcedefinitions" {
            self.unregister_crd(&obj);
        }
        if rt.group.is_empty() && rt.plural == "pods" {
            self.logs.forget_pod(&key.0, &key.1);
        }
        // Background propagation: dependents whose owner is gone are deleted (their own
        // finalizers respected), recursively.
        if let Some(uid) = meta_str(&obj, "uid") {
            for (store, (ns, name)) in gc::dependents(self.view(), uid) {
                if let Some(rt) = self.type_of(&store) {
                    let ns = Some(ns.as_str()).filter(|n| !n.is_empty());
                    let _ = self.delete(Requester::InProcess, &rt, ns, &name, false);
                }
            }
        }
        Some(Arc::unwrap_or_clone(obj))
    }

    /// The type whose objects are stored under `store` (group, plural).
    fn type_of(&self, store: &(String, String)) -> Option<ResourceType> {
        self.types.values().find(|t| store_key(t) == *store).cloned()
    }

    fn unregister_crd(&mut self, crd: &Value) {
        if let Ok(types) = resources::from_crd(crd) {
            for t in types {
                self.types.remove(&t.key());
                self.storage.drop_kind(&t);
            }
        }
    }
}

impl View for Store {
    fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        Store::lookup(self, group, version, plural)
    }

    fn objects<'a>(&'a self, rt: &'a ResourceType) -> impl Iterator<Item = &'a Value> + 'a {
        Store::objects(self, rt)
    }

    fn peek(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Option<&Value> {
        Store::peek(self, rt, ns, name)
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

/// An apply request's configuration made ready to merge: checked (an object, no managedFields,
/// this resource's apiVersion, the resourceVersion precondition), named as the URL names it, cut
/// to the part written (only `status` through the status subresource; no `status` through the
/// main resource where a status subresource exists) and, unless validation is strict (which
/// refuses them later, naming them), without the fields the schema does not declare.
fn applied_config(
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    mut config: Value,
    part: Part,
    live: Option<&Value>,
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let Some(obj) = config.as_object_mut() else { return Err(ApiError::bad_request("the body must be a JSON object")) };
    let api_version = rt.api_version();
    match obj.get("apiVersion") {
        None => {
            obj.insert("apiVersion".into(), api_version.into());
        }
        Some(v) if v.as_str() == Some(api_version.as_str()) => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "Incorrect version specified in apply patch. Specified patch version: {}, expected: {api_version}",
                v.as_str().unwrap_or("")
            )));
        }
    }
    obj.insert("kind".into(), rt.kind.clone().into());
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else { return Err(ApiError::bad_request("metadata must be an object")) };
    if meta.get("managedFields").is_some_and(|m| !m.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    meta.remove("managedFields");
    if let Some(rv) = meta.remove("resourceVersion").filter(|rv| rv.as_str().is_some_and(|s| !s.is_empty())) {
        let current = live.and_then(|l| meta_str(l, "resourceVersion"));
        if rv.as_str() != current {
            return Err(ApiError::conflict(&rt.display_name(), name));
        }
    }
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {
            meta.insert("name".into(), name.into());
        }
    }
    if let Some(n) = ns {
        meta.entry("namespace").or_insert_with(|| n.into());
    }
    if rt.status_subresource {
        match part {
            Part::Status => {
                let identity: serde_json::Map<String, Value> = meta
                    .iter()
                    .filter(|(k, _)| matches!(k.as_str(), "name" | "namespace"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                obj.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "status"));
                obj.insert("metadata".into(), Value::Object(identity));
            }
            // A create keeps the status it is given, as kube-mem's creates do.
            Part::Main if live.is_some() => {
                obj.remove("status");
            }
            Part::Main => {}
        }
    }
    if let Some(schema) = rt.schema.as_deref().filter(|_| !opts.strict) {
        schema::prune(schema, &mut config);
    }
    Ok(config)
}
