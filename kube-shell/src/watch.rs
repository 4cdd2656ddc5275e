//! Watch-driven controllers: one reflector per kind keeps a local cache current, and every change
//! wakes the controller, which then reads the caches instead of listing. Shared by the agent and
//! the dispatcher.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::lean::{self, Lean};

/// The caches of one controller and what wakes it. Dropping it stops the watches.
#[derive(Debug, Default)]
pub struct Watches {
    tasks: JoinSet<()>,
    wake: Arc<Notify>,
}

impl Watches {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts watching `api` (relisting with back-off when a watch breaks) into a cache; every
    /// change wakes the controller. The cache keeps no managedFields: no controller reads
    /// them, and they are not even decoded ([`crate::lean`]).
    pub fn watch<K>(&mut self, api: Api<K>, config: watcher::Config) -> Store<K>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.start(api, config, whole::<K>, Some(self.wake.clone()))
    }

    /// A cache that does not wake the controller and keeps of each object only what `strip`
    /// leaves (and never its managedFields): for kinds read at the controller's own pace that
    /// change far more often than it acts on them (a member's Pods, for the capacity report).
    pub fn cache<K>(&mut self, api: Api<K>, config: watcher::Config, strip: fn(&mut K)) -> Store<K>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.start(api, config, strip, None)
    }

    fn start<K>(
        &mut self,
        api: Api<K>,
        config: watcher::Config,
        strip: fn(&mut K),
        wake: Option<Arc<Notify>>,
    ) -> Store<K>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let (reader, writer) = reflector::store();
        let kind = K::kind(&K::DynamicType::default()).into_owned();
        self.tasks.spawn(async move {
            let objects = watcher(lean::api(api), config).map_ok(move |e| unwrap(e).modify(strip));
            let events = reflector::reflector(writer, objects).default_backoff();
            events
                .for_each(|e| {
                    match e {
                        Ok(_) => {
                            if let Some(wake) = &wake {
                                wake.notify_one();
                            }
                        }
                        Err(error) => tracing::debug!(%kind, %error, "watch interrupted; retrying"),
                    }
                    futures::future::ready(())
                })
                .await;
        });
        reader
    }

    /// Resolves on the next change to any watched kind (or at once if one came since last time).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Wakes the controller as a change would.
    pub fn poke(&self) {
        self.wake.notify_one();
    }
}

/// Keeps the whole object (but its managedFields, which no cache decodes): the `strip` of a
/// [`Watches::cache`] that wants everything.
pub fn whole<K>(_object: &mut K) {}

/// A watch event of [`Lean`] objects as one of the objects themselves.
fn unwrap<K>(event: watcher::Event<Lean<K>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(Lean(o)) => watcher::Event::Apply(o),
        watcher::Event::Delete(Lean(o)) => watcher::Event::Delete(o),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(Lean(o)) => watcher::Event::InitApply(o),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Waits until every cache has its first full list.
pub async fn ready<K>(stores: &[&Store<K>])
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    for s in stores {
        let _ = s.wait_until_ready().await;
    }
}

/// The cached objects, shared, in a stable order (namespace, name) so decisions never depend on
/// the order events arrived in.
pub fn sorted<K>(store: &Store<K>) -> Vec<Arc<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let mut v = store.state();
    v.sort_by(|a, b| by_name(a.as_ref(), b.as_ref()));
    v
}

/// The order [`sorted`] gives: namespace, then name.
pub fn by_name<K: kube::Resource>(a: &K, b: &K) -> std::cmp::Ordering {
    (a.meta().namespace.as_deref(), a.meta().name.as_deref())
        .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
}

/// [`sorted`], owned.
pub fn snapshot<K>(store: &Store<K>) -> Vec<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    sorted(store).iter().map(|o| K::clone(o)).collect()
}
