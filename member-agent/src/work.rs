//! The pool of realisations in flight.

use std::collections::BTreeSet;
use std::sync::Arc;

use api::stowage::{Placement, PlacementPhase, PlacementStatus};
use kube::{Client, ResourceExt};

use crate::caches::{Caches, Key};
use crate::config::{AgentConfig, CONCURRENT_APPLIES};
use crate::error::Error;
use crate::realise::{ensure_namespace, read, realise};
use crate::report::{claim, write_status};
use crate::step::Wake;

/// The status of a placement whose objects' names are taken on the member: Unschedulable here,
/// saying which object and what to do.
pub(crate) fn name_taken(p: &Placement, taken: &Error) -> PlacementStatus {
    PlacementStatus {
        phase: PlacementPhase::Unschedulable,
        observed_epoch: p.spec.epoch,
        message: Some(format!(
            "NameTaken: {taken}; rename the TrainJob or remove that object (Stowage never changes or deletes what it did not make)"
        )),
        ..Default::default()
    }
}

/// Placements being realised, at most `CONCURRENT_APPLIES` at once: each is claimed, rendered
/// and applied on its own, as soon as the agent sees it, so a burst's first placements
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
                    // The claim and the reads are independent round trips to the hub: made at
                    // once, a realisation waits for one of them before it touches the member,
                    // not for both in turn (in a burst the hub's queue is the longest wait).
                    // What was read is used only once the claim stands.
                    let (claimed, inputs) = tokio::join!(claim(&hub, &cfg.cluster, &p), read(&hub, &caches, &p));
                    claimed?;
                    let realised = realise(&member, &cfg, &p, &inputs?).await;
                    // The member's part is done: the next placement may start.
                    drop(permit);
                    // Made: the claim stands until the next round reports what the JobSet
                    // says (Applied with its counts, or already Running). An Applied written
                    // here as well was a third Placement status write per TrainJob, a tenth
                    // of the hub's writes in a burst (issue #39), always overwritten moments
                    // later by the round's counts.
                    if let Err(taken @ Error::NameTaken { .. }) = &realised {
                        // Someone else's object holds a name the gang needs: it cannot run here
                        // as it is, and the dispatcher tells the user which object and moves it.
                        write_status(&hub, &ns, &p.name_any(), &name_taken(&p, taken)).await?;
                    }
                    realised
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
                    let key = Key::of(&p);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::placement;

    #[test]
    fn a_taken_name_is_reported_unschedulable_naming_the_object() {
        let p = placement("u1", "east", None);
        let taken = Error::NameTaken { kind: "JobSet", namespace: "team".into(), name: "train".into() };
        let s = name_taken(&p, &taken);
        assert_eq!((s.phase, s.observed_epoch), (PlacementPhase::Unschedulable, 1));
        let message = s.message.unwrap_or_default();
        assert!(message.starts_with("NameTaken: JobSet team/train already exists on the member"), "{message}");
    }
}
