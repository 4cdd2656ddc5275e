//! What etcd is to kube-apiserver: the objects, one global, monotonically increasing
//! resourceVersion, and the event history watches replay from. It knows nothing of admission,
//! strategies or types beyond where each kind is kept; [`crate::store::Store`] writes through it.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::view::{Objects, store_key};

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
    /// The object and the previous one as JSON, in bytes: what the event costs the history.
    pub bytes: usize,
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
            bytes: 0,
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

/// The length of `v` as compact JSON, counted without writing it anywhere.
fn json_bytes(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

#[derive(Debug)]
pub struct Storage {
    objects: Objects,
    rv: u64,
    history: VecDeque<Arc<Event>>,
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
    /// an object already there, MODIFIED: the stored object, shared with its event.
    pub(crate) fn put(&mut self, rt: &ResourceType, key: (String, String), mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = self.rv.to_string().into();
        let stored = Arc::new(obj);
        let previous = self.objects.entry(store_key(rt)).or_default().insert(key, stored.clone());
        let kind = if previous.is_some() { EventType::Modified } else { EventType::Added };
        self.emit(rt, kind, stored.clone(), previous);
        stored
    }

    /// Removes the object at `key` under the next resourceVersion, as DELETED.
    pub(crate) fn take(&mut self, rt: &ResourceType, key: &(String, String)) -> Option<Arc<Value>> {
        let mut obj = Arc::unwrap_or_clone(self.objects.get_mut(&store_key(rt))?.remove(key)?);
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = self.rv.to_string().into();
        let obj = Arc::new(obj);
        self.emit(rt, EventType::Deleted, obj.clone(), None);
        Some(obj)
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

    fn emit(&mut self, rt: &ResourceType, kind: EventType, object: Arc<Value>, previous: Option<Arc<Value>>) {
        // Writing a Value into a Vec cannot fail.
        let json = bytes::Bytes::from(serde_json::to_vec(&*object).unwrap_or_default());
        let bytes = json.len() + previous.as_deref().map_or(0, json_bytes);
        let event = Arc::new(Event { rv: self.rv, store: store_key(rt), kind, object, json, previous, bytes });
        self.history.push_back(event.clone());
        self.history_bytes += bytes;
        self.compact_history();
        let _ = self.tx.send(Signal::Event(event));
    }

    /// Drops the oldest events until the history is within both its count and its bytes; a
    /// watch resuming from before them gets 410 Gone.
    fn compact_history(&mut self) {
        while self.history.len() > HISTORY || self.history_bytes > self.history_limit_bytes {
            let Some(e) = self.history.pop_front() else { break };
            self.history_bytes -= e.bytes;
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

    /// Events of one store after `rv`, or 410 when they are no longer kept.
    pub fn since(&self, rt: &ResourceType, rv: u64) -> Result<Vec<Arc<Event>>, ApiError> {
        if rv + 1 < self.oldest_rv {
            return Err(ApiError::gone(format!("too old resource version: {rv} ({})", self.oldest_rv)));
        }
        let key = store_key(rt);
        // The history is in resourceVersion order: what is after `rv` is found by halving, not
        // by reading every kept event (the playground's members ask 20 times a second).
        let after = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.range(after..).filter(|e| e.store == key).cloned().collect())
    }
}

impl Default for Storage {
    fn default() -> Self {
        Self::new()
    }
}
