//! Kueue's queues and priorities, read where the hub serves them: WorkloadPriorityClasses for
//! a TrainJob's Kueue priority, and with `--kueue labels` (Kueue not running on the hub) its
//! LocalQueues, ClusterQueues and ResourceFlavors as the queues Stowage schedules with. Kueue's
//! CRDs may be installed on a running hub: while a kind is missing, the hub is asked again.

use std::time::Duration;

use api::kueue::{ClusterQueue, LocalQueue, ResourceFlavor, WorkloadPriorityClass};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use kube_shell::watch::{self, Watches};
use tokio::time::Instant;

use super::{list, watch};
use crate::decide::{KueueMode, Observed};

/// How often a hub without Kueue's CRDs is asked again whether it serves them now.
const GROW_EVERY: Duration = Duration::from_secs(10);
/// How long a cache started later is waited for before a cycle reads it.
const GROW_WAIT: Duration = Duration::from_secs(10);

pub(super) struct Kueue {
    priority_classes: Option<Store<WorkloadPriorityClass>>,
    /// Kueue's queues, with `--kueue labels` only.
    queues: Option<Queues>,
    /// When the hub was last asked what it serves.
    looked: Instant,
}

struct Queues {
    local: Store<LocalQueue>,
    cluster: Store<ClusterQueue>,
    flavors: Store<ResourceFlavor>,
}

impl Queues {
    fn watch(hub: &Client, watches: &mut Watches) -> Self {
        Queues { local: watch(hub, watches), cluster: watch(hub, watches), flavors: watch(hub, watches) }
    }

    async fn ready(&self) {
        let _ = tokio::join!(
            self.local.wait_until_ready(),
            self.cluster.wait_until_ready(),
            self.flavors.wait_until_ready()
        );
    }
}

impl Kueue {
    pub(super) fn watch(hub: &Client, watches: &mut Watches, served: Served, mode: KueueMode) -> Self {
        Kueue {
            priority_classes: served.workload_priority_classes.then(|| watch(hub, watches)),
            queues: (served.kueue_queues && mode == KueueMode::Labels).then(|| Queues::watch(hub, watches)),
            looked: Instant::now(),
        }
    }

    pub(super) async fn ready(&self) {
        if let Some(s) = &self.priority_classes {
            let _ = s.wait_until_ready().await;
        }
        if let Some(q) = &self.queues {
            q.ready().await;
        }
    }

    /// Whether a kind this mode reads is not watched yet: the hub did not serve it at start.
    fn missing(&self, mode: KueueMode) -> bool {
        self.priority_classes.is_none() || (mode == KueueMode::Labels && self.queues.is_none())
    }

    /// Starts the caches of the kinds the hub serves now but did not before (an admin installed
    /// Kueue's CRDs on a running hub), each waited for a while to fill; asks at most every
    /// [`GROW_EVERY`], and only while one is missing.
    pub(super) async fn grow(&mut self, hub: &Client, watches: &mut Watches, mode: KueueMode) {
        if !self.missing(mode) || self.looked.elapsed() < GROW_EVERY {
            return;
        }
        self.looked = Instant::now();
        let served = Served::find(hub).await;
        let mut grown = false;
        if self.priority_classes.is_none() && served.workload_priority_classes {
            let store: Store<WorkloadPriorityClass> = watch(hub, watches);
            let _ = tokio::time::timeout(GROW_WAIT, store.wait_until_ready()).await;
            self.priority_classes = Some(store);
            grown = true;
        }
        if self.queues.is_none() && served.kueue_queues && mode == KueueMode::Labels {
            let q = Queues::watch(hub, watches);
            let _ = tokio::time::timeout(GROW_WAIT, q.ready()).await;
            self.queues = Some(q);
            grown = true;
        }
        if grown {
            tracing::info!(?served, "the hub serves Kueue's kinds now: watching them");
        }
    }

    pub(super) fn snapshot(&self, o: &mut Observed) {
        o.workload_priority_classes = self.priority_classes.as_ref().map(watch::snapshot).unwrap_or_default();
        if let Some(q) = &self.queues {
            o.local_queues = watch::snapshot(&q.local);
            o.cluster_queues = watch::snapshot(&q.cluster);
            o.resource_flavors = watch::snapshot(&q.flavors);
        }
    }

    /// What the hub serves, whatever the mode: `stowage explain` reads Kueue's queues too.
    pub(super) async fn list(hub: &Client, served: Served, o: &mut Observed) -> Result<(), kube::Error> {
        if served.workload_priority_classes {
            o.workload_priority_classes = list(hub).await?;
        }
        if served.kueue_queues {
            o.local_queues = list(hub).await?;
            o.cluster_queues = list(hub).await?;
            o.resource_flavors = list(hub).await?;
        }
        Ok(())
    }
}

/// Which of Kueue's optional kinds the hub serves (looked up at start, and again while some are
/// not: [`Kueue::grow`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Served {
    workload_priority_classes: bool,
    /// LocalQueue, ClusterQueue and ResourceFlavor.
    kueue_queues: bool,
    pub(super) workloads: bool,
}

impl Served {
    /// From the hub's discovery of Kueue's group alone: a hub without it answers with its group
    /// list, not one 404 per kind (a dispatcher asks again every [`GROW_EVERY`] while a kind is
    /// missing).
    pub(super) async fn find(hub: &Client) -> Self {
        let group = LocalQueue::group(&()).into_owned();
        let found = kube::Discovery::new(hub.clone()).filter(&[group.as_str()]).run().await;
        let serves = |gvk: kube::api::GroupVersionKind| found.as_ref().is_ok_and(|d| d.resolve_gvk(&gvk).is_some());
        Served {
            workload_priority_classes: serves(gvk::<WorkloadPriorityClass>()),
            kueue_queues: serves(gvk::<LocalQueue>())
                && serves(gvk::<ClusterQueue>())
                && serves(gvk::<ResourceFlavor>()),
            workloads: serves(gvk::<api::kueue::Workload>()),
        }
    }
}

fn gvk<K: Resource<DynamicType = ()>>() -> kube::api::GroupVersionKind {
    kube::api::GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&()))
}
