//! Preemption, with Kueue's semantics where users expect them: each queue says whom its gangs
//! may evict (`withinClusterQueue`, `reclaimWithinCohort`, `borrowWithinCohort`), and the cycle
//! preempts only for a gang that fits no cluster as things stand. It then evicts on exactly one
//! cluster, inside one domain at the gang's required level, the set of victims that loses the
//! fewest GPU-hours of work, and no victim the gang could do without. Where the gang outranks
//! none of the gangs it may evict (reclaiming quota, or an equal-priority eviction), it evicts
//! only if that throws away no more GPU-time than the gang would go without (its GPUs × its
//! wait) by waiting for room as running gangs end: a reclaim that destroys a day of a
//! borrower's work to save a gang ten minutes waits instead (`Reason::ReclaimDeferred`).
//! With `Victims::Kueue` (the simulator's Kueue dispatchers) it chooses as Kueue does instead:
//! Kueue's candidate order over the whole fleet, no weighing of the work lost.

use std::cell::OnceCell;
use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::config::{Config, Preemption, Victims};
use crate::decision::Admission;
use crate::fleet::{ClusterId, DomainId, Fleet};
use crate::gang::Gang;
use crate::queue::{
    BorrowWithinCohort, QueueId, QueuePreemption, Queues, ReclaimWithinCohort, WithinQueue, quota_charges,
};
use crate::reason::Reason;
use crate::reserve::{Releases, earliest_by_count};
use crate::run::Run;
use crate::snapshot::Running;
use crate::topology::TopologyConstraint;

/// How a victim may be evicted, when it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    SameQueue,
    /// From another queue of the cohort that is borrowing: allowed only while the preemptor stays
    /// within its nominal quota, or by `borrowWithinCohort` for victims of priority at most this.
    Reclaim {
        borrowing_up_to: Option<i32>,
    },
}

/// A victim set on one cluster: (GPU-ms lost, or under Kueue's order how far into it the set
/// reaches; victims; cluster; scope), lower is better.
type Choice = (u64, usize, ClusterId, DomainId, Vec<usize>);

/// Domains, each with the running gangs that touch it in [`Seen::by_cost`] order.
type Scopes = Vec<(DomainId, Vec<usize>)>;

/// The running gangs a cycle may evict, with what every victim search asks of each found once
/// a cycle: every gang short of room weighs every running gang, and finding each one's queue
/// by name, sorting them and finding the domains each touches, per search, was most of a
/// quota'd replay's time. Found when the cycle's first search needs it: most cycles search
/// for no victims at all, and paying for it every cycle made a replay without preemption a
/// quarter slower.
pub(crate) struct Evictable<'r, 'a> {
    running: &'r [Running<'a>],
    now_ms: u64,
    /// The lowest priority among them, a gang being evicted counting as the lowest of all.
    lowest: i32,
    seen: OnceCell<Seen>,
}

/// What [`Evictable`] finds for the cycle's victim searches.
struct Seen {
    /// Each running gang's queue, `None` for a queue the cycle does not know.
    queue: Vec<Option<QueueId>>,
    /// Those that may be evicted at all this cycle (being evicted, or run the minimum time),
    /// cheapest first: least work lost, then lowest priority, then the most recently started.
    /// Nothing in the order depends on the preemptor, so each search keeps those it may evict.
    by_cost: Vec<usize>,
    /// Per cluster and depth, `by_cost` on that cluster grouped by the domains at that depth
    /// each touches (a victim set frees one), found when a search first needs it.
    scopes: Vec<Vec<OnceCell<Scopes>>>,
}

impl Seen {
    /// The domains at `depth` of `cluster` that running gangs there touch, each with those
    /// gangs in `by_cost` order.
    fn scopes(&self, running: &[Running<'_>], fleet: &Fleet, cluster: ClusterId, depth: u8) -> &Scopes {
        self.scopes[cluster.idx()][usize::from(depth)].get_or_init(|| {
            let mut scopes: BTreeMap<DomainId, Vec<usize>> = BTreeMap::new();
            for &i in self.by_cost.iter().filter(|&&i| running[i].admission.cluster == cluster) {
                let mut touched: Vec<DomainId> = running[i]
                    .admission
                    .pod_sets
                    .iter()
                    .flat_map(|p| p.hosts.iter().map(|&(h, _)| fleet.ancestor_at(h, depth)))
                    .collect();
                touched.sort_unstable();
                touched.dedup();
                for d in touched {
                    scopes.entry(d).or_default().push(i);
                }
            }
            scopes.into_iter().collect()
        })
    }
}

impl<'r, 'a> Evictable<'r, 'a> {
    pub(crate) fn new(running: &'r [Running<'a>], now_ms: u64) -> Self {
        Evictable {
            running,
            now_ms,
            lowest: running
                .iter()
                .map(|r| if r.evicting { i32::MIN } else { r.gang.priority })
                .min()
                .unwrap_or(i32::MAX),
            seen: OnceCell::new(),
        }
    }

    /// What the cycle's victim searches read, found by the first of them.
    fn seen(&self, run: &Run<'_>, knobs: Preemption) -> &Seen {
        self.seen.get_or_init(|| {
            let (running, now_ms) = (self.running, self.now_ms);
            let mut by_cost: Vec<(u64, i32, Reverse<u64>, usize)> = running
                .iter()
                .enumerate()
                .filter(|(_, r)| r.evicting || now_ms.saturating_sub(r.started_ms) >= knobs.min_runtime_ms)
                .map(|(i, r)| (r.loss(now_ms, knobs.prefer_checkpointed), r.gang.priority, Reverse(r.started_ms), i))
                .collect();
            by_cost.sort_unstable();
            Seen {
                queue: running.iter().map(|r| run.queues.id(&r.gang.queue)).collect(),
                by_cost: by_cost.into_iter().map(|v| v.3).collect(),
                scopes: run
                    .fleet
                    .clusters()
                    .iter()
                    .map(|cl| (0..=cl.host_depth()).map(|_| OnceCell::new()).collect())
                    .collect(),
            }
        })
    }

    /// Whether `gang` may evict anything at all, settled without looking at each running gang:
    /// not when nothing runs, nor when its queue's policy only evicts lower priorities and
    /// nothing running is of lower priority (the common case).
    pub(crate) fn might_be_evicted_by(&self, run: &Run<'_>, gang: &Gang) -> bool {
        !self.running.is_empty()
            && run
                .queues
                .id(&gang.queue)
                .is_some_and(|q| may_evict_any(run.config, run.queues, q, gang.priority, self.lowest))
    }
}

/// Whether a gang of `priority` in `queue` may evict anything at all: what
/// [`Evictable::might_be_evicted_by`] asks, and what a caller that hands a cycle only some of
/// its gangs (the simulator's cut cycles) asks of those it leaves out.
pub fn may_evict_any(config: &Config, queues: &Queues, queue: QueueId, priority: i32, lowest_running: i32) -> bool {
    config.preemption.is_some() && !(lower_only(queues.spec(queue).preemption) && lowest_running >= priority)
}

/// Whether every queue's policy evicts only lower priorities: then, under a config that
/// preempts, [`may_evict_any`] is `priority > lowest_running` whatever the queue, and a caller
/// can tell that no gang it hands a cycle may evict anything from their priorities alone.
pub fn lower_priorities_only(queues: &Queues) -> bool {
    queues.specs().iter().all(|q| lower_only(q.preemption))
}

/// Whether a queue of this policy evicts only gangs of lower priority than the preemptor's.
fn lower_only(policy: QueuePreemption) -> bool {
    !matches!(policy.within_queue, WithinQueue::LowerOrNewerEqualPriority)
        && policy.reclaim_within_cohort != ReclaimWithinCohort::Any
}

/// What [`preempt`] did.
#[derive(Debug)]
pub(crate) enum Preempted {
    /// Evicted these (indices into `running`) and admitted the gang in their place.
    Evicted(Admission, Vec<usize>),
    /// Found victims but judged waiting cheaper; the reason says why.
    Deferred(Reason),
    /// No victims would let it start.
    Not,
}

/// Evicts the victims that let `gang` start, if some cluster has them and evicting them is
/// worth it (module docs), and admits it in their place; `now` is why the gang cannot start as
/// things stand. Gangs already chosen as victims this cycle are not chosen again.
pub(crate) fn preempt<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    evictable: &Evictable<'_, 'a>,
    releases: &Releases<'_>,
    now: &Reason,
    now_ms: u64,
) -> Preempted {
    let (Some(knobs), Some(queue)) = (run.config.preemption, run.queues.id(&gang.queue)) else {
        return Preempted::Not;
    };
    if !evictable.might_be_evicted_by(run, gang) {
        return Preempted::Not;
    }
    let running = evictable.running;
    let seen = evictable.seen(run, knobs);
    // Every running gang is looked at for every gang short of room: the cheap checks first,
    // the look-up in the set evicted this cycle (a search by name) last. Whether another
    // queue of the cohort is borrowing is found once per queue, when a victim of it is met.
    let mut lending: Vec<Option<bool>> = vec![None; run.queues.specs().len()];
    let mut via: Vec<Option<Via>> = vec![None; running.len()];
    let mut victims: Vec<usize> = Vec::new();
    for &i in &seen.by_cost {
        let r = &running[i];
        let grounds =
            if r.evicting { Some(Via::SameQueue) } else { may_evict(run, queue, gang, r, seen.queue[i], &mut lending) };
        if let Some(grounds) = grounds.filter(|_| !run.txn.is_evicted(r.gang.id.as_str())) {
            via[i] = Some(grounds);
            victims.push(i);
        }
    }
    if victims.is_empty() {
        return Preempted::Not;
    }
    let kueue = knobs.victims == Victims::Kueue;
    // Each candidate's place in Kueue's order (being evicted, other queues' before the gang's
    // own, lower priority, the most recently started), which Kueue takes them in.
    let mut rank = Vec::new();
    if kueue {
        victims.sort_unstable_by_key(|&i| {
            let r = &running[i];
            (!r.evicting, seen.queue[i] == Some(queue), r.gang.priority, Reverse(r.started_ms), i)
        });
        rank = vec![usize::MAX; running.len()];
        for (k, &i) in victims.iter().enumerate() {
            rank[i] = k;
        }
    }
    // Outranking none of them, the gang may throw away at most the GPU-time it would go
    // without by waiting for room (`None`: no limit, or no room expected as gangs end).
    // The wait is counted by GPUs alone, a lower bound found without trying placements (this
    // runs for every gang short of room, every cycle): in doubt, the running work is spared.
    // Where enough GPUs are free already but scattered, the count says "now" and the gang
    // waits for room as gangs end (and for the cycle's reservation) rather than evict: trying
    // the placements instead made a quota'd replay many times slower.
    let budget = if !kueue && victims.iter().all(|&i| running[i].gang.priority >= gang.priority) {
        earliest_by_count(run, gang, releases, now_ms).map(|start_ms| {
            let wait_ms = start_ms.saturating_sub(now_ms);
            (wait_ms, gang.total_gpus().saturating_mul(wait_ms))
        })
    } else {
        None
    };
    let mut over_budget = false;
    let mut best: Option<Choice> = None;
    let mut candidates = Vec::new();
    for c in run.fleet.cluster_ids() {
        let cl = run.fleet.cluster(c);
        if cl.cordoned || !gang.clusters.allows(&cl.name, &cl.labels) {
            continue;
        }
        // Scopes: the domains at the widest level a pod set requires (the whole cluster when
        // none does); a victim set is searched inside each, so it frees one domain.
        let depth = gang
            .pod_sets
            .iter()
            .filter_map(|ps| match ps.topology {
                TopologyConstraint::Required(l) => Some(cl.depth_for(l)),
                _ => None,
            })
            .min()
            .unwrap_or(0);
        for (scope, touching) in seen.scopes(running, run.fleet, c, depth) {
            candidates.clear();
            candidates.extend(touching.iter().copied().filter(|&i| via[i].is_some()));
            if candidates.is_empty() {
                continue;
            }
            if kueue {
                candidates.sort_unstable_by_key(|&i| rank[i]);
            }
            let loss = |i: usize| running[i].loss(now_ms, knobs.prefer_checkpointed);
            let limit = budget.map(|(_, owed)| owed);
            let (set, reach) = match victim_set(run, gang, c, *scope, &candidates, running, &via, &loss, limit) {
                Found::Set { set, reach } => (set, reach),
                Found::OverBudget => {
                    over_budget = true;
                    continue;
                }
                Found::None => continue,
            };
            // Kueue weighs no work lost: it takes candidates in its order until the gang fits
            // anywhere, so the set reached by the shortest run of that order wins.
            let cost: u64 = if kueue { rank[reach] as u64 } else { set.iter().map(|&i| loss(i)).sum() };
            let choice = (cost, set.len(), c, *scope, set);
            if best.as_ref().is_none_or(|b| (choice.0, choice.1, choice.2, choice.3) < (b.0, b.1, b.2, b.3)) {
                best = Some(choice);
            }
        }
    }
    let Some((_, _, cluster, _, set)) = best else {
        return match budget {
            Some((wait_ms, owed)) if over_budget => Preempted::Deferred(Reason::ReclaimDeferred {
                owed_gpu_s: owed / 1000,
                wait_s: wait_ms / 1000,
                now: Box::new(now.clone()),
            }),
            _ => Preempted::Not,
        };
    };
    let sp = run.txn.checkpoint();
    for &i in &set {
        run.txn.evict(&running[i]);
    }
    let admission = run.fit(cluster, gang);
    debug_assert!(admission.is_some(), "the victim set was found to free room");
    match admission {
        Some(a) => {
            run.commit(gang, &a);
            Preempted::Evicted(a, set)
        }
        None => {
            // Cannot happen (the same trial passed); undo rather than evict for nothing.
            run.txn.rollback(sp);
            Preempted::Not
        }
    }
}

/// Whether a gang of `queue` may evict `victim`, of queue `theirs`, and on what grounds;
/// `lending` holds, per queue, whether it may be reclaimed from (of the gang's cohort and
/// borrowing), as far as found so far.
fn may_evict(
    run: &Run<'_>,
    queue: QueueId,
    gang: &Gang,
    victim: &Running<'_>,
    theirs: Option<QueueId>,
    lending: &mut [Option<bool>],
) -> Option<Via> {
    let policy = run.queues.spec(queue).preemption;
    let (p, v) = (gang.priority, victim.gang.priority);
    let theirs = theirs?;
    if theirs == queue {
        let allowed = match policy.within_queue {
            WithinQueue::Never => false,
            WithinQueue::LowerPriority => v < p,
            WithinQueue::LowerOrNewerEqualPriority => v < p || (v == p && victim.gang.submitted_ms > gang.submitted_ms),
        };
        return allowed.then_some(Via::SameQueue);
    }
    let reclaimable = *lending[theirs.idx()].get_or_insert_with(|| {
        let cohort = run.queues.spec(queue).cohort.as_ref();
        cohort.is_some()
            && run.queues.spec(theirs).cohort.as_ref() == cohort
            && run.queues.borrowing(run.usage(), theirs)
    });
    if !reclaimable {
        return None;
    }
    let allowed = match policy.reclaim_within_cohort {
        ReclaimWithinCohort::Never => false,
        ReclaimWithinCohort::LowerPriority => v < p,
        ReclaimWithinCohort::Any => true,
    };
    let borrowing_up_to = match policy.borrow_within_cohort {
        BorrowWithinCohort::LowerPriority { max_priority_threshold } if v < p => {
            Some(max_priority_threshold.map_or(p - 1, |t| t.min(p - 1)))
        }
        _ => None,
    };
    allowed.then_some(Via::Reclaim { borrowing_up_to: borrowing_up_to.filter(|&t| v <= t) })
}

/// What [`victim_set`] found.
enum Found {
    /// The victims, and the candidate whose taking let the gang fit (before any was dropped).
    Set {
        set: Vec<usize>,
        reach: usize,
    },
    /// Victims would let it start, but only past the budget of lost work.
    OverBudget,
    None,
}

/// The cheapest victims among `candidates` (cheapest first) whose eviction lets the gang
/// start on `cluster`: taken in order until it fits, then each dropped again, dearest
/// first, if the gang still fits without evicting it. With a `budget`, the search stops once
/// the victims taken would throw away more GPU-ms than it (by `loss`): a cheaper set, if the
/// drops would have found one, is given up for a search that does not grow with the victims.
#[allow(clippy::too_many_arguments)]
fn victim_set<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    cluster: ClusterId,
    scope: DomainId,
    candidates: &[usize],
    running: &[Running<'a>],
    via: &[Option<Via>],
    loss: &dyn Fn(usize) -> u64,
    budget: Option<u64>,
) -> Found {
    let need = gang.total_gpus();
    let cl = run.fleet.cluster(cluster);
    // GPUs only grow as victims are added: skip trials that cannot pass on count alone.
    let mut gpus: u64 = cl.flavors.iter().map(|&f| run.cap().free_gpus(run.fleet, scope, f)).sum();
    let mut chosen = Vec::new();
    let mut reach = None;
    let mut lost = 0u64;
    let mut over_budget = false;
    // Each candidate is evicted once, on top of those before it, and the gang tried on what
    // that leaves: one eviction per candidate, not the whole run of them again for each.
    let sp = run.txn.checkpoint();
    for &i in candidates {
        chosen.push(i);
        gpus += running[i].gang.total_gpus();
        lost = lost.saturating_add(loss(i));
        if budget.is_some_and(|b| lost > b) {
            over_budget = true;
            break;
        }
        run.txn.evict(&running[i]);
        if gpus >= need && fits_without(run, gang, cluster, &chosen, via) {
            reach = Some(i);
            break;
        }
    }
    run.txn.rollback(sp);
    if over_budget {
        return Found::OverBudget;
    }
    let Some(reach) = reach else {
        return Found::None;
    };
    for k in (0..chosen.len()).rev() {
        let mut without = chosen.clone();
        without.remove(k);
        if !without.is_empty() && trial(run, gang, cluster, &without, running, via) {
            chosen = without;
        }
    }
    Found::Set { set: chosen, reach }
}

/// Whether the gang would start on `cluster` with `victims` gone, and the grounds allow it.
fn trial<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    cluster: ClusterId,
    victims: &[usize],
    running: &[Running<'a>],
    via: &[Option<Via>],
) -> bool {
    let sp = run.txn.checkpoint();
    for &i in victims {
        run.txn.evict(&running[i]);
    }
    let ok = fits_without(run, gang, cluster, victims, via);
    run.txn.rollback(sp);
    ok
}

/// Whether the gang fits on `cluster` as things stand, `victims` already evicted, and the
/// grounds allow it: reclaiming from the cohort needs the preemptor within its nominal quota,
/// unless borrowWithinCohort covers every such victim.
fn fits_without<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    cluster: ClusterId,
    victims: &[usize],
    via: &[Option<Via>],
) -> bool {
    run.fit(cluster, gang).is_some_and(|a| {
        let reclaims = victims.iter().filter_map(|&i| via[i]).filter(|v| matches!(v, Via::Reclaim { .. }));
        let mut reclaims = reclaims.peekable();
        reclaims.peek().is_none()
            || !borrows_with(run, gang, &a)
            || reclaims.all(|v| matches!(v, Via::Reclaim { borrowing_up_to: Some(_) }))
    })
}

/// Whether admitting the gang as `admission` would take its queue past nominal quota.
fn borrows_with(run: &Run<'_>, gang: &Gang, admission: &Admission) -> bool {
    let Some(q) = run.queues.id(&gang.queue) else { return false };
    quota_charges(run.queues, gang, admission.flavors(run.fleet))
        .iter()
        .any(|(key, &amount)| run.usage().get(q, key) + amount > run.queues.nominal(q, key).unwrap_or(u64::MAX))
}
