//! One scheduling cycle: take a snapshot and the pending gangs, return one decision per gang.
//! Greedy, in queue order (`order`), into each queue until `Config::depth` of its gangs are left
//! waiting (the rest wait, `BeyondDepth`); every gang is tried on the cycle's transaction (`txn`)
//! and committed whole or rolled back (`run`); a gang that fits nowhere may preempt
//! (`preempt`), backfill in front of the cycle's reservations or take one (`reserve`). With
//! the batch optimiser on, a second pass realises its plan for the head of the queue and the
//! better of the two passes is returned (`batch`). Same snapshot and config, same decisions:
//! only ordered containers, explicit tie-breaks, no clock.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::batch::{self, BatchReport, Pin};
use crate::capacity::Capacity;
use crate::config::{Config, Victims};
use crate::decision::{CycleStats, Decision};
use crate::gang::Gang;
use crate::locality;
use crate::order::FairOrder;
use crate::preempt::{self, Preempted};
use crate::queue::{QueueId, QueueingStrategy, QuotaUsage};
use crate::reason::Reason;
use crate::reserve::{self, Releases, Reservation};
use crate::run::{Run, held};
use crate::snapshot::{Reserved, Snapshot};

#[derive(Debug, Clone)]
pub struct Cycle {
    /// One per pending gang, in the order they were given.
    pub decisions: Vec<Decision>,
    pub capacity: Capacity,
    pub usage: QuotaUsage,
    pub stats: CycleStats,
    /// What the batch optimiser did this cycle, when it ran.
    pub batch: Option<BatchReport>,
    /// The reservations it made, in the order made, to hand the next cycle
    /// (`Snapshot::reserved`).
    pub reserved: Vec<Reserved>,
}

/// How many orders of its pins a plan is realised in before it is given up (`cycle`).
const REALISE_ATTEMPTS: usize = 24;

/// Runs one cycle. See the module docs.
pub fn cycle<'a>(snapshot: Snapshot<'a>, pending: &'a [Gang], config: &'a Config) -> Cycle {
    let Some(settings) = config.batch else {
        return greedy(snapshot, pending, config, None);
    };
    let held: Vec<Cow<'_, Gang>> = pending.iter().map(|g| held(config, g, snapshot.now_ms)).collect();
    let first = greedy(snapshot.clone(), pending, config, None);
    // Most cycles have nothing waiting for room: they stop here, before any copy is made.
    let Some(window) = batch::window(snapshot.queues, config, pending, &first.decisions, settings.window) else {
        return first;
    };
    let s = &snapshot;
    let run = Run::new(s.fleet, s.queues, config, s.capacity.clone(), s.usage.clone());
    let Some(plan) = batch::plan(&run, window, pending, &held, &first.decisions, &settings, snapshot.now_ms) else {
        return first;
    };
    let greedy_value = batch::value(&run, pending, &held, &first.decisions);
    let (mut plan, mut report) = match plan {
        Ok(planned) => planned,
        Err(mut report) => {
            (report.greedy_value, report.realised_value) = (greedy_value, greedy_value);
            return Cycle { batch: Some(report), ..first };
        }
    };
    // A pin can fail where the model saw room (it is a relaxation: it counts room per pod
    // size, not which host each pod takes), so the plan is realised again with the pins that
    // failed moved to the front, the way a squeaky wheel gets the grease, until every pin
    // holds: a few greedy passes, each far cheaper than the solve. Of the realisations that
    // keep the plan's promises, the most valuable is kept.
    let mut pins = std::mem::take(&mut plan.pins);
    let mut best: Option<(f64, Cycle)> = None;
    for _ in 0..REALISE_ATTEMPTS {
        let second = greedy(snapshot.clone(), pending, config, Some((&plan.window, &pins)));
        let admitted = |p: &Pin| second.decisions[p.gang()].admission().is_some();
        let (mut failed, placed): (Vec<Pin>, Vec<Pin>) = pins.into_iter().partition(|p| !admitted(p));
        let done = failed.is_empty();
        if plan.honoured(&second.decisions) {
            let value = batch::value(&run, pending, &held, &second.decisions);
            if best.as_ref().is_none_or(|(v, _)| value > *v + batch::EPSILON) {
                best = Some((value, second));
            }
        }
        if done {
            break;
        }
        failed.extend(placed);
        pins = failed;
    }
    let Some((realised_value, second)) = best else {
        report.rejected = Some(batch::Rejected::Realised);
        (report.greedy_value, report.realised_value) = (greedy_value, greedy_value);
        return Cycle { batch: Some(report), ..first };
    };
    // Ties keep the greedy answer: it is the one users can predict.
    report.kept_ilp = realised_value > greedy_value + batch::EPSILON;
    (report.greedy_value, report.realised_value) = (greedy_value, realised_value);
    let kept = if report.kept_ilp { second } else { first };
    Cycle { batch: Some(report), ..kept }
}

/// One greedy pass; with a `plan`, its pins are admitted when the pass reaches the plan's window.
fn greedy<'a>(
    snapshot: Snapshot<'a>,
    pending: &'a [Gang],
    config: &'a Config,
    mut plan: Option<(&BTreeSet<usize>, &[Pin])>,
) -> Cycle {
    let Snapshot { fleet, queues, capacity, usage, now_ms, releases, running, reserved: last, unhanded } = snapshot;
    // Each gang as it is held this cycle: preferences its patience still holds it to become
    // requirements (see `Patience`).
    let held: Vec<Cow<'_, Gang>> = pending.iter().map(|g| held(config, g, now_ms)).collect();
    // The wider forms a held gang may be weighed in (`locality::weigh`), built when first needed.
    let wider: Vec<OnceCell<Vec<Gang>>> = pending.iter().map(|_| OnceCell::new()).collect();
    let mut run = Run::new(fleet, queues, config, capacity, usage);
    let mut decisions: Vec<Option<Decision>> = vec![None; pending.len()];
    // The optimiser's assignments take their room when the cycle reaches its window: gangs
    // ahead of the window (higher priority) are served first, exactly as without it.
    let mut blocked: BTreeMap<QueueId, &str> = BTreeMap::new();
    let mut order = FairOrder::new(pending, queues, fleet, config);
    // The gangs a spread gang would delay are those the cycle looks at (within the depth) and
    // those the caller knew could not start, so the dispatcher, handed every pending gang, and
    // the simulator, handed the window or a cut of it, agree.
    let releases = Releases::new(&releases);
    let moment = locality::Moment {
        now_ms,
        releases: &releases,
        last: &last,
        waiting: (order.considered() as u64).saturating_add(unhanded).saturating_sub(1),
        earliest_ms: pending.iter().fold([u64::MAX; 2], |[a, b], g| {
            if g.submitted_ms < a { [g.submitted_ms, a] } else { [a, b.min(g.submitted_ms)] }
        }),
    };
    let mut reservations: Vec<Reservation> = Vec::new();
    // Kueue looks for victims only for the head of each queue a cycle (`Victims::Kueue`): the
    // queues whose head has looked.
    let kueue = config.preemption.is_some_and(|p| p.victims == Victims::Kueue);
    let mut looked: BTreeSet<QueueId> = BTreeSet::new();
    let evictable = preempt::Evictable::new(&running, now_ms);
    while let Some(i) = order.next(pending, queues, run.usage()) {
        if let Some((_, pins)) = plan.filter(|(window, _)| window.contains(&i)) {
            plan = None;
            for pin in pins {
                let (j, admitted) = match *pin {
                    Pin::Again { gang, ref admission } => (gang, run.retake(&pending[gang], admission)),
                    Pin::Within { gang, cluster, domain, written, ref greedy } => {
                        let as_placed = if written { &pending[gang] } else { &*held[gang] };
                        let pinned = run.pinned(as_placed, cluster, domain);
                        let admitted = pinned.or_else(|| {
                            // A gang greedy admitted must stay admitted: where greedy put it,
                            // else wherever it fits now.
                            let greedy = greedy.as_ref()?;
                            run.retake(&pending[gang], greedy)
                                .or_else(|| run.patient_gang(&pending[gang], &held[gang]).ok())
                        });
                        (gang, admitted)
                    }
                };
                if let Some(admission) = admitted {
                    run.txn.stats.admitted += 1;
                    decisions[j] = Some(Decision::Admit(admission));
                }
            }
        }
        if decisions[i].is_some() {
            continue;
        }
        let gang = &pending[i];
        let queue = queues.id(&gang.queue);
        let strict =
            queue.is_some_and(|q| config.strategy.unwrap_or(queues.spec(q).strategy) == QueueingStrategy::StrictFifo);
        let decision = match queue.and_then(|q| blocked.get(&q).map(|head| (q, head))) {
            Some((q, head)) if strict => Decision::Pending(Reason::WaitingBehind {
                queue: queues.spec(q).name.clone(),
                gang: (*head).to_string(),
            }),
            _ => match run.patient_gang(gang, &held[i]).or_else(|reason| match reason {
                Reason::HoldingForLocality { .. } => {
                    locality::weigh(&mut run, gang, &held[i], reason, &wider[i], &moment, &reservations)
                }
                other => Err(other),
            }) {
                Ok(admission) => Decision::Admit(admission),
                Err(reason) => {
                    // Preempt only for a gang that fits nowhere as written: one merely holding
                    // out for locality while it could run spread out waits instead. It preempts
                    // for its held form, so its victims free the domain it holds out for.
                    let looks = !kueue || queue.is_none_or(|q| looked.insert(q));
                    let may = looks
                        && evictable.might_be_evicted_by(&run, &held[i])
                        && match &reason {
                            r if r.may_preempt() => true,
                            Reason::HoldingForLocality { .. } => !run.fits_anywhere(gang),
                            _ => false,
                        };
                    let preempted = if may {
                        preempt::preempt(&mut run, &held[i], &evictable, &releases, &reason, now_ms)
                    } else {
                        Preempted::Not
                    };
                    match preempted {
                        Preempted::Evicted(admission, victims) => {
                            let victims = victims.iter().map(|&v| running[v].gang.id.clone()).collect();
                            Decision::Preempt { admission, victims }
                        }
                        other => {
                            let reason = if let Preempted::Deferred(why) = other { why } else { reason };
                            reserve::no_room(
                                &mut run,
                                gang,
                                &held[i],
                                reason,
                                now_ms,
                                &releases,
                                &last,
                                &mut reservations,
                            )
                        }
                    }
                }
            },
        };
        match &decision {
            Decision::Admit(_) | Decision::Preempt { .. } => run.txn.stats.admitted += 1,
            Decision::Pending(reason) => {
                run.txn.stats.pending += 1;
                order.left_waiting();
                if let (Some(q), true) = (queue, strict && !reason.is_permanent()) {
                    // The first gang a strict queue could not admit blocks the rest.
                    blocked.entry(q).or_insert(gang.id.as_str());
                }
            }
        }
        decisions[i] = Some(decision);
        // Between gangs no savepoint is open: what is decided stays decided.
        run.txn.commit();
    }
    // The held capacity is not used by anything admitted: the cycle returns it.
    for r in &reservations {
        reserve::unhold(&mut run, r);
    }
    // What the order left undecided is beyond the queue depth.
    let decisions = decisions
        .into_iter()
        .zip(pending)
        .map(|(d, gang)| {
            d.unwrap_or_else(|| {
                run.txn.stats.pending += 1;
                let queue = config.fair_sharing.then(|| gang.queue.clone());
                Decision::Pending(Reason::BeyondDepth { queue, depth: config.depth })
            })
        })
        .collect();
    let (capacity, usage, stats) = run.txn.finish();
    let reserved = reservations.into_iter().map(|r| Reserved { gang: r.gang, start_ms: r.start_ms }).collect();
    Cycle { decisions, capacity, usage, stats, batch: None, reserved }
}
