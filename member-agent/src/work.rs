//! The pool of realisations in flight.

use std::collections::BTreeSet;
use std::sync::Arc;

use api::stowage::{Placement, PlacementPhase, PlacementStatus};
use kube::{Client, ResourceExt};

use crate::caches::Caches;
use crate::config::{AgentConfig, CONCURRENT_APPLIES};
use crate::error::Error;
use crate::realise::{ensure_namespace, realise};
use crate::report::{claim, write_status};
use crate::step::Wake;

/// Placements being realised, at most `CONCURRENT_APPLIES` at once: each is rendered, applied
/// and reported Applied on its own, as soon as the agent sees it, so a burst's first placements
/// need not wait for its last, nor for a round.
#[derive(Debug)]
pub(crate) struct Work {
    pub(crate) running: tokio::task::JoinSet<(Arc<Placement>, Result<(), Error>)>,
    pub(crate) permits: Arc<tokio::sync::Semaphore>,
    /// Member namespaces known to exist: a burst into one namespace checks it once, not once
    /// per placement. Forgotten when an apply fails.
    pub(crate) namespaces: Arc<tokio::sync::Mutex<BTreeSet<String>>>,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            running: tokio::task::JoinSet::new(),
            permits: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_APPLIES)),
            namespaces: Arc::default(),
        }
    }
}

impl Work {
    pub(crate) fn add(&mut self, placements: Vec<Arc<Placement>>, ctx: (&Client, &Client, &AgentConfig, &Caches)) {
        for p in placements {
            let (hub, member, cfg, caches) = (ctx.0.clone(), ctx.1.clone(), ctx.2.clone(), ctx.3.clone());
            let (permits, namespaces) = (self.permits.clone(), self.namespaces.clone());
            self.running.spawn(async move {
                // The semaphore is never closed, so this always waits for a permit.
                let permit = permits.acquire_owned().await.ok();
                let ns = p.namespace().unwrap_or_default();
                let result = async {
                    {
                        // Held while the namespace is made, so a burst into a new one makes it once.
                        let mut known = namespaces.lock().await;
                        if !known.contains(&ns) {
                            ensure_namespace(&member, &ns).await?;
                            known.insert(ns.clone());
                        }
                    }
                    claim(&hub, &cfg.cluster, &p).await?;
                    realise(&hub, &member, &cfg, &caches, &p).await?;
                    // The member's part is done: the next placement may start while the hub hears.
                    drop(permit);
                    let status = PlacementStatus {
                        phase: PlacementPhase::Applied,
                        observed_epoch: p.spec.epoch,
                        ..Default::default()
                    };
                    write_status(&hub, &ns, &p.name_any(), &status).await
                }
                .await;
                if result.is_err() {
                    namespaces.lock().await.clear();
                }
                (p, result)
            });
        }
    }

    /// The next realisation to end, as the wake it is.
    pub(crate) async fn next(&mut self) -> Option<Wake> {
        loop {
            match self.running.join_next().await? {
                Ok((p, result)) => {
                    let key = (p.spec.train_job_uid.clone(), p.spec.epoch);
                    return Some(Wake::Realised { key, placement: p.name_any(), result });
                }
                // Cancelled is how `abandon` stops them; only a panic is news.
                Err(error) if error.is_panic() => tracing::error!(%error, "a realisation task panicked"),
                Err(_) => {}
            }
        }
    }

    /// Drops everything queued and running: the hub is lost and nothing new may start.
    pub(crate) fn abandon(&mut self) {
        self.running.abort_all();
    }
}
