//! What etcd is to kube-apiserver: the objects, one global, monotonically increasing
//! resourceVersion, and the event history watches replay from. It knows nothing of admission,
//! strategies or types beyond where each kind is kept; [`crate::store::Store`] writes through it.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::view::{Objects, Stored, store_key};

/// The most bytes an object may take as JSON: what etcd takes through kube-apiserver.
pub const MAX_OBJECT_BYTES: usize = input_limits::MAX_OBJECT_BYTES;

/// How many events watches can resume from; older resourceVersions get 410 Gone.
pub const HISTORY: usize = input_limits::WATCH_HISTORY_EVENTS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    /// Group and plural: objects are stored once, whichever version a client uses.
    pub store: (String, String),
    pub kind: EventType,
    /// Shared with the store (and with the event after it, as its `previous`): an object is
    /// not copied per write, per event or per watch.
    pub object: Arc<Value>,
    /// The object as compact JSON, written once: every watch of its version sends these bytes
    /// instead of writing the object again.
    pub json: bytes::Bytes,
    /// For MODIFIED, the object before: a selector-filtered watch turns a change into ADDED or
    /// DELETED when the object starts or stops matching, as the real server does.
    pub previous: Option<Arc<Value>>,
}

/// An event as the history keeps it: as JSON, not as the object. A parsed object costs about
/// fourteen times its JSON (each JSON object a B-tree node of its own), and the history is
/// the only holder of every version but the latest: kept as trees, they grew a burst of 500's
/// servers by about 100 MB, and the bound, counted in JSON bytes, bounded a fourteenth of what
/// it held. Everything kept is JSON and counted. A watch resuming from it parses what it
/// replays.
#[derive(Debug)]
struct Kept {
    rv: u64,
    store: (String, String),
    kind: EventType,
    json: bytes::Bytes,
    previous: Option<bytes::Bytes>,
    /// The object's namespace, name and labels as JSON (`{"metadata": {...}}`), for readers
    /// that only ask whose events they were ([`Storage::since_meta`]): a few hundred bytes to
    /// parse instead of the object.
    meta: bytes::Bytes,
}

impl Kept {
    /// What it costs the history, as JSON bytes (its bound).
    fn bytes(&self) -> usize {
        self.json.len() + self.previous.as_ref().map_or(0, bytes::Bytes::len) + self.meta.len()
    }

    /// The event again, parsed from its JSON; `None` only if the JSON the store wrote did not
    /// parse back, which serde_json does not do.
    fn event(&self) -> Option<Event> {
        let parse = |b: &bytes::Bytes| serde_json::from_slice::<Value>(b).ok().map(Arc::new);
        let previous = match &self.previous {
            Some(p) => Some(parse(p)?),
            None => None,
        };
        Some(Event {
            rv: self.rv,
            store: self.store.clone(),
            kind: self.kind,
            object: parse(&self.json)?,
            json: self.json.clone(),
            previous,
        })
    }
}

/// An object as compact JSON.
fn to_json(v: &Value) -> bytes::Bytes {
    // Writing a Value into a Vec cannot fail.
    bytes::Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// `{"metadata": {namespace, name, labels}}` of an object: who it is, for [`Kept::meta`].
fn meta_of(object: &Value) -> Value {
    let metadata = &object["metadata"];
    let kept: serde_json::Map<String, Value> = ["namespace", "name", "labels"]
        .into_iter()
        .filter_map(|k| metadata.get(k).map(|v| (k.to_string(), v.clone())))
        .collect();
    serde_json::json!({ "metadata": kept })
}

impl Event {
    /// An object of a list a watch starts from, sent as ADDED: not in the history, and written
    /// as JSON by the watch that lists it (its version may not be the stored one).
    pub fn listed(object: Value) -> Self {
        Event {
            rv: 0,
            store: (String::new(), String::new()),
            kind: EventType::Added,
            object: Arc::new(object),
            json: bytes::Bytes::new(),
            previous: None,
        }
    }
}

/// Signals to watches: an event, or "the history was compacted, end now".
#[derive(Debug, Clone)]
pub enum Signal {
    /// Shared: every watch on the server receives every event and most skip it.
    Event(Arc<Event>),
    Expire,
}

#[derive(Debug)]
pub struct Storage {
    objects: Objects,
    rv: u64,
    history: VecDeque<Kept>,
    /// The bytes of the events in `history`, and the most it may hold: past it the oldest go,
    /// as past [`HISTORY`] events (a few large updates must not grow the server without bound).
    history_bytes: usize,
    history_limit_bytes: usize,
    /// Watches from a resourceVersion below this get 410 Gone.
    pub oldest_rv: u64,
    uid_seed: u64,
    uid_counter: u64,
    pub tx: broadcast::Sender<Signal>,
}

impl Storage {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(65_536);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        Storage {
            objects: Objects::new(),
            rv: 1,
            history: VecDeque::new(),
            history_bytes: 0,
            history_limit_bytes: input_limits::WATCH_HISTORY_BYTES,
            oldest_rv: 1,
            uid_seed: seed & 0xffff_ffff,
            uid_counter: 0,
            tx,
        }
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub(crate) fn objects(&self) -> &Objects {
        &self.objects
    }

    /// A name for `metadata.generateName`'s prefix.
    pub(crate) fn generated_name(&self, prefix: &str) -> String {
        format!("{prefix}{:05x}", (self.uid_counter + 1) * 2654435761 % 0xfffff)
    }

    pub(crate) fn next_uid(&mut self) -> String {
        self.uid_counter += 1;
        format!(
            "{:08x}-{:04x}-4{:03x}-8000-{:012x}",
            self.uid_seed,
            self.uid_counter >> 48 & 0xffff,
            0,
            self.uid_counter
        )
    }

    /// Keeps `obj` at `key` under the next resourceVersion (written into it), as ADDED or, over
    /// an object already there, MODIFIED: the stored object, shared with its event. Refused,
    /// with nothing changed, over [`MAX_OBJECT_BYTES`], as etcd refuses it.
    pub(crate) fn put(
        &mut self,
        rt: &ResourceType,
        key: (String, String),
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        obj["metadata"]["resourceVersion"] = (self.rv + 1).to_string().into();
        let json = to_json(&obj);
        if json.len() > MAX_OBJECT_BYTES {
            // kube-apiserver passes etcd's words on, as a 500.
            return Err(ApiError::internal("etcdserver: request is too large"));
        }
        self.rv += 1;
        let stored = Stored { json, object: Arc::new(obj) };
        let previous = self.objects.entry(store_key(rt)).or_default().insert(key, stored.clone());
        let kind = if previous.is_some() { EventType::Modified } else { EventType::Added };
        let object = stored.object.clone();
        self.emit(rt, kind, stored, previous);
        Ok(object)
    }

    /// Removes the object at `key` under the next resourceVersion, as DELETED.
    pub(crate) fn take(&mut self, rt: &ResourceType, key: &(String, String)) -> Option<Arc<Value>> {
        let mut obj = Arc::unwrap_or_clone(self.objects.get_mut(&store_key(rt))?.remove(key)?.object);
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = self.rv.to_string().into();
        let gone = Stored { json: to_json(&obj), object: Arc::new(obj) };
        let object = gone.object.clone();
        self.emit(rt, EventType::Deleted, gone, None);
        Some(object)
    }

    /// Forgets every object of a kind no longer served (its CRD deleted), without events.
    pub(crate) fn drop_kind(&mut self, rt: &ResourceType) {
        self.objects.remove(&store_key(rt));
    }

    /// The most bytes (as JSON) the watch history keeps (`input_limits::WATCH_HISTORY_BYTES`
    /// unless set): past it the oldest events are compacted, as past [`HISTORY`] events.
    pub fn set_history_limit_bytes(&mut self, bytes: usize) {
        self.history_limit_bytes = bytes;
        self.compact_history();
    }

    /// The bytes (as JSON) of the events watches can resume from.
    pub fn history_bytes(&self) -> usize {
        self.history_bytes
    }

    /// `previous`, the object this one replaced, was written as JSON when it was stored: the
    /// history keeps those bytes, shared, rather than the object written again.
    fn emit(&mut self, rt: &ResourceType, kind: EventType, stored: Stored, previous: Option<Stored>) {
        let Stored { object, json } = stored;
        let (previous, previous_json) = previous.map(|p| (p.object, p.json)).unzip();
        let kept = Kept {
            rv: self.rv,
            store: store_key(rt),
            kind,
            json: json.clone(),
            previous: previous_json,
            meta: to_json(&meta_of(&object)),
        };
        self.history_bytes += kept.bytes();
        self.history.push_back(kept);
        self.compact_history();
        // Watches open now get the objects themselves, shared with the store: dropped once
        // every watch has taken its copy of the signal.
        let event = Arc::new(Event { rv: self.rv, store: store_key(rt), kind, object, json, previous });
        let _ = self.tx.send(Signal::Event(event));
    }

    /// Drops the oldest events until the history is within both its count and its bytes; a
    /// watch resuming from before them gets 410 Gone.
    fn compact_history(&mut self) {
        while self.history.len() > HISTORY || self.history_bytes > self.history_limit_bytes {
            let Some(e) = self.history.pop_front() else { break };
            self.history_bytes -= e.bytes();
            self.oldest_rv = e.rv + 1;
        }
    }

    /// Forgets all history: every watch resuming from an older resourceVersion gets 410 Gone,
    /// and open watches end (the fault hook "expire watches").
    pub fn expire_watches(&mut self) {
        self.history.clear();
        self.history_bytes = 0;
        self.rv += 1;
        self.oldest_rv = self.rv;
        let _ = self.tx.send(Signal::Expire);
    }

    /// Events of one store after `rv`, parsed from the history, or 410 when they are no longer
    /// kept.
    pub fn since(&self, rt: &ResourceType, rv: u64) -> Result<Vec<Arc<Event>>, ApiError> {
        Ok(self.kept_after(rt, rv)?.filter_map(Kept::event).map(Arc::new).collect())
    }

    /// Whose events of one store came after `rv`: each one's `{"metadata": {namespace, name,
    /// labels}}`, in order, without parsing the objects; or 410 when they are no longer kept.
    pub fn since_meta(&self, rt: &ResourceType, rv: u64) -> Result<impl Iterator<Item = Value>, ApiError> {
        Ok(self.kept_after(rt, rv)?.filter_map(|e| serde_json::from_slice(&e.meta).ok()))
    }

    fn kept_after(&self, rt: &ResourceType, rv: u64) -> Result<impl Iterator<Item = &Kept>, ApiError> {
        if rv + 1 < self.oldest_rv {
            return Err(ApiError::gone(format!("too old resource version: {rv} ({})", self.oldest_rv)));
        }
        let key = store_key(rt);
        // The history is in resourceVersion order: what is after `rv` is found by halving, not
        // by reading every kept event (the playground's members ask 20 times a second).
        let after = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.range(after..).filter(move |e| e.store == key))
    }
}

impl Default for Storage {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmaps() -> ResourceType {
        crate::resources::builtins().into_iter().find(|r| r.plural == "configmaps").unwrap_or_else(|| unreachable!())
    }

    fn cm(data: &str) -> Value {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "c", "namespace": "ns", "labels": {"app": "a"}, "managedFields": [{"manager": "m"}]},
                           "data": {"k": data}})
    }

    #[test]
    fn the_history_keeps_json_not_objects_and_replays_every_version_with_the_one_before() {
        let (rt, mut storage) = (configmaps(), Storage::new());
        let key = ("ns".to_string(), "c".to_string());
        let start = storage.resource_version();
        let first = Arc::downgrade(&storage.put(&rt, key.clone(), cm("one")).expect("stored"));
        storage.put(&rt, key.clone(), cm("two")).expect("stored");
        // No watch holds the signal and the store holds the second version: nothing keeps the
        // first version's object alive, though its event is still replayable.
        assert!(first.upgrade().is_none(), "the history must not hold the objects it replays");
        let events = storage.since(&rt, start).unwrap_or_default();
        let data: Vec<_> = events.iter().map(|e| e.object["data"]["k"].as_str()).collect();
        assert_eq!(data, [Some("one"), Some("two")]);
        assert_eq!((events[0].kind, events[1].kind), (EventType::Added, EventType::Modified));
        assert_eq!(events[1].previous.as_ref().map(|p| p["data"]["k"].clone()), Some("one".into()));
        assert_eq!(events[1].json, serde_json::to_vec(&*events[1].object).unwrap_or_default());
        // Who they were, without the objects: namespace, name, labels, and nothing more.
        let metas: Vec<Value> = storage.since_meta(&rt, start + 1).map(Iterator::collect).unwrap_or_default();
        let meta = serde_json::json!({"metadata": {"name": "c", "namespace": "ns", "labels": {"app": "a"}}});
        assert_eq!(metas, std::slice::from_ref(&meta));
        // The bound counts all the history holds: each event's JSON, its previous one's, and
        // who it was.
        let (one, two) = (events[0].json.len(), events[1].json.len());
        let meta = serde_json::to_vec(&meta).unwrap_or_default().len();
        assert_eq!(storage.history_bytes(), one + meta + two + one + meta);
    }

    /// etcd refuses a request over its limit, and kube-apiserver passes that on: the object
    /// stays as it was, and no resourceVersion is spent on it.
    #[test]
    fn an_object_larger_than_etcd_takes_is_refused_and_changes_nothing() {
        let (rt, mut storage) = (configmaps(), Storage::new());
        let key = ("ns".to_string(), "c".to_string());
        storage.put(&rt, key.clone(), cm("small")).expect("stored");
        let rv = storage.resource_version();
        let fits = MAX_OBJECT_BYTES - 1_000;
        storage.put(&rt, key.clone(), cm(&"x".repeat(fits))).expect("under the limit");
        let e = storage.put(&rt, key.clone(), cm(&"x".repeat(MAX_OBJECT_BYTES))).expect_err("over it");
        assert_eq!((e.code, e.message.as_str()), (500, "etcdserver: request is too large"));
        assert_eq!(storage.resource_version(), rv + 1);
        let events = storage.since(&rt, rv).unwrap_or_default();
        assert_eq!(events.len(), 1, "only the write that fitted");
        assert_eq!(events[0].object["data"]["k"].as_str().map(str::len), Some(fits));
    }

    #[test]
    fn a_history_past_its_bytes_forgets_the_oldest_and_a_resume_from_before_them_is_gone() {
        let (rt, mut storage) = (configmaps(), Storage::new());
        let start = storage.resource_version();
        for i in 0..20 {
            storage.put(&rt, ("ns".into(), format!("c{i}")), cm(&"x".repeat(1000))).expect("stored");
        }
        storage.set_history_limit_bytes(5_000);
        assert!(storage.history_bytes() <= 5_000);
        assert!(matches!(storage.since(&rt, start), Err(e) if e.code == 410));
        assert!(storage.since_meta(&rt, start).is_err());
        let kept = storage.since(&rt, storage.oldest_rv - 1).unwrap_or_default();
        assert!(!kept.is_empty() && kept.len() < 20, "{} kept", kept.len());
    }
}
