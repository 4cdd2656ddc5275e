//! The hub as a cycle reads it, grouped by who defines each kind: [`trainer`] (TrainJobs and
//! their runtimes), [`stowage`] (members, Placements, Queues and what the Queues read), [`kueue`]
//! (Kueue's queues and priorities, where the hub serves them), [`multikueue`] (what its external
//! dispatcher reads, `--kueue multikueue`), and the dispatcher's own [`memory`] of writes the
//! caches have not caught up with. Each group watches its kinds, waits for them, and fills its
//! part of the [`Observed`] snapshot, or lists them once for `stowage explain`.

mod kueue;
mod memory;
mod multikueue;
mod stowage;
mod trainer;

use std::fmt::Debug;

use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource};
use kube_shell::watch::Watches;
use serde::de::DeserializeOwned;

pub(super) use memory::Written;

use crate::decide::{KueueMode, Observed};

/// A cache of every object of one kind on the hub, waking the cycle on a change.
fn watch<K>(hub: &Client, watches: &mut Watches) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watches.watch(Api::all(hub.clone()), watcher::Config::default())
}

/// Every object of one kind on the hub, listed now.
async fn list<K>(hub: &Client) -> Result<Vec<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    Ok(Api::<K>::all(hub.clone()).list(&Default::default()).await?.items)
}

/// The caches of every group this mode reads.
pub(super) struct View {
    trainer: trainer::Trainer,
    stowage: stowage::Stowage,
    kueue: kueue::Kueue,
    multikueue: Option<multikueue::MultiKueue>,
}

impl View {
    pub(super) async fn watch(hub: &Client, watches: &mut Watches, mode: KueueMode) -> Self {
        let served = kueue::Served::find(hub).await;
        View {
            kueue: kueue::Kueue::watch(hub, watches, served, mode),
            multikueue: (mode == KueueMode::MultiKueue).then(|| multikueue::MultiKueue::watch(hub, watches)),
            trainer: trainer::Trainer::watch(hub, watches),
            stowage: stowage::Stowage::watch(hub, watches),
        }
    }

    /// Until every cache has listed its kind once.
    pub(super) async fn ready(&self) {
        let multikueue = async {
            if let Some(m) = &self.multikueue {
                m.ready().await;
            }
        };
        tokio::join!(self.trainer.ready(), self.stowage.ready(), self.kueue.ready(), multikueue);
    }

    /// Starts watching Kueue's kinds the hub has come to serve since (see [`kueue::Kueue::grow`]).
    pub(super) async fn grow(&mut self, hub: &Client, watches: &mut Watches, mode: KueueMode) {
        self.kueue.grow(hub, watches, mode).await;
    }

    /// What the caches hold now. The memory is the caller's to lay over it ([`Written::overlay`]).
    pub(super) fn snapshot(&self) -> Observed {
        let mut o = Observed::default();
        self.trainer.snapshot(&mut o);
        self.stowage.snapshot(&mut o);
        self.kueue.snapshot(&mut o);
        if let Some(m) = &self.multikueue {
            m.snapshot(&mut o);
        }
        o
    }
}

/// One look at the hub, listed now rather than cached: what `stowage explain` reasons from.
pub async fn observe_once(hub: &Client) -> Result<Observed, kube::Error> {
    let mut o = Observed::default();
    let served = kueue::Served::find(hub).await;
    kueue::Kueue::list(hub, served, &mut o).await?;
    // Kueue's Workloads say where a TrainJob Kueue queues stands (explain reads them).
    multikueue::MultiKueue::list(hub, served, &mut o).await?;
    trainer::Trainer::list(hub, &mut o).await?;
    stowage::Stowage::list(hub, &mut o).await?;
    Ok(o)
}
