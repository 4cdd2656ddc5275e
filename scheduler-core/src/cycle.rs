//! One scheduling cycle: take a snapshot and the pending gangs, return one decision per gang.
//! Greedy, in queue order; every gang is tried on scratch capacity and committed whole or
//! rolled back. With the batch optimiser on, a second pass realises its plan for the head of
//! the queue and the better of the two passes is returned (`batch`). Same snapshot and config,
//! same decisions: only ordered containers, explicit tie-breaks, no clock.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::batch::{self, Batch, BatchReport, Plan};
use crate::capacity::{Capacity, PodShape};
use crate::fair::FairOrder;
use crate::fleet::{ClusterId, DomainId, FlavorId, Fleet};
use crate::gang::{ClusterFilter, Gang};
use crate::place::{Ask, Fill, Placer, PodSetPlacement, View};
use crate::preempt::{Preemption, Running};
use crate::queue::{QueueId, QueueingStrategy, Queues, QuotaKey, QuotaUsage, charges, quota_charges};
use crate::reason::{Reason, Shortfall};
use crate::topology::{Level, TopologyConstraint};

/// How a gang picks among the clusters where it fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterChoice {
    /// Try every candidate; best locality, then least left over in the span (best fit), then
    /// the admin's cost weight, then most free GPUs (balance).
    #[default]
    Scored,
    /// The cluster with the most free GPUs of the flavor, first that fits.
    MostFree,
    /// Clusters in fleet order, first that fits (MultiKueue: the first worker to admit wins).
    InOrder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Config {
    pub choice: ClusterChoice,
    pub fill: Fill,
    /// Overrides every queue's own strategy (the baselines use this).
    pub strategy: Option<QueueingStrategy>,
    /// How long a multi-pod set with a topology preference holds out for it; `None`: never
    /// (a preference is met when it can be, at once).
    pub patience: Option<Patience>,
    /// Admit across queues by weighted dominant-resource share (see `fair`); otherwise in one
    /// global order of priority and submit time.
    pub fair_sharing: bool,
    /// Reserve capacity for the first gang that cannot start, where it will start soonest (from
    /// the snapshot's `releases`); later gangs use that capacity only if they end before.
    pub reservations: bool,
    /// Evict running gangs for pending ones as their queues' policies allow (see `preempt`);
    /// `None`: never.
    pub preemption: Option<Preemption>,
    /// Assign the gangs at the head of the queue jointly with an ILP, and keep its answer when
    /// it beats the greedy one (see `batch`); `None`: greedy only.
    pub batch: Option<Batch>,
}

impl Config {
    /// Stowage's own policy, as the dispatcher runs it and the simulator measures it.
    pub fn stowage() -> Self {
        Config {
            choice: ClusterChoice::Scored,
            fill: Fill::Locality,
            strategy: None,
            patience: Some(Patience::DEFAULT),
            fair_sharing: false,
            reservations: true,
            preemption: Some(Preemption::DEFAULT),
            batch: None,
        }
    }
}

/// Locality patience, as Slurm's `--switches=N@max-time`: a pod set of several pods that
/// prefers a level is held to it (as if it were required) for `exact_ms` after its gang was
/// submitted, then to the next wider level until `wider_ms`, then placed wherever it fits. A
/// pod set that could not fit the held level even on an empty fleet is never held. Spreading a
/// gang costs it for its whole run (docs/simulator.md, topology cost); waiting costs once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    pub exact_ms: u64,
    pub wider_ms: u64,
}

impl Patience {
    /// Stowage's default: a week at the preferred level, then a second week at the next wider.
    /// Chosen on the shared Philly subset (docs/policy.md has the sweep): shorter holds barely
    /// move locality there, because under that load a rack frees up only after days.
    pub const DEFAULT: Patience = Patience { exact_ms: 7 * 86_400_000, wider_ms: 14 * 86_400_000 };

    /// The constraint a pod set is held to after waiting `waited_ms`, when it differs from its own.
    pub fn hold(&self, constraint: TopologyConstraint, pods: u32, waited_ms: u64) -> Option<TopologyConstraint> {
        let TopologyConstraint::Preferred(level) = constraint else { return None };
        if pods < 2 {
            return None;
        }
        if waited_ms < self.exact_ms {
            return Some(TopologyConstraint::Required(level));
        }
        let wider = Level::ALL.iter().rev().copied().find(|l| *l < level)?;
        (waited_ms < self.wider_ms).then_some(TopologyConstraint::Required(wider))
    }
}

/// Where an admitted gang goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub cluster: ClusterId,
    /// One per pod set, in the gang's order.
    pub pod_sets: Vec<PodSetPlacement>,
}

impl Admission {
    /// The narrowest domain holding every pod of the gang.
    pub fn span(&self, fleet: &Fleet) -> Option<DomainId> {
        fleet.common_ancestor(self.pod_sets.iter().flat_map(|p| p.hosts.iter().map(|h| h.0)))
    }

    pub fn host_count(&self) -> usize {
        let mut hosts: Vec<DomainId> = self.pod_sets.iter().flat_map(|p| p.hosts.iter().map(|h| h.0)).collect();
        hosts.sort_unstable();
        hosts.dedup();
        hosts.len()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Admit(Admission),
    /// Admitted in place of `victims` (gang ids, from the snapshot's `running`), which must be
    /// evicted first; the cycle's capacity and usage already count them gone.
    Preempt {
        admission: Admission,
        victims: Vec<String>,
    },
    Pending(Reason),
}

impl Decision {
    /// Where the gang goes, when it goes anywhere now.
    pub fn admission(&self) -> Option<&Admission> {
        match self {
            Decision::Admit(a) | Decision::Preempt { admission: a, .. } => Some(a),
            Decision::Pending(_) => None,
        }
    }
}

/// What a cycle sees: the fleet and queues, and the capacity and quota usage left by what is
/// already running. The cycle consumes and returns them, updated by what it admits.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    pub fleet: &'a Fleet,
    pub queues: &'a Queues,
    pub capacity: Capacity,
    pub usage: QuotaUsage,
    /// The cycle's time, on the clock of the gangs' `submitted_ms` (an input: the core reads
    /// no clock).
    pub now_ms: u64,
    /// What running gangs will give back and when they are expected to: reservations are
    /// planned on it. Empty: no reservations.
    pub releases: Vec<Release>,
    /// The running gangs preemption may choose victims among. Empty: no preemption.
    pub running: Vec<Running<'a>>,
}

impl<'a> Snapshot<'a> {
    /// The fleet with nothing running, at time 0.
    pub fn idle(fleet: &'a Fleet, queues: &'a Queues) -> Self {
        Snapshot {
            fleet,
            queues,
            capacity: Capacity::empty(fleet),
            usage: QuotaUsage::default(),
            now_ms: 0,
            releases: Vec::new(),
            running: Vec::new(),
        }
    }
}

/// Capacity a running gang gives back when it ends, at its expected end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The running gang's id.
    pub gang: String,
    pub end_ms: u64,
    /// (host, pods, shape of each pod).
    pub hosts: Vec<(DomainId, u32, PodShape)>,
}

impl Release {
    pub fn of(gang: &Gang, admission: &Admission, end_ms: u64) -> Self {
        let hosts = gang
            .pod_sets
            .iter()
            .zip(&admission.pod_sets)
            .flat_map(|(ps, p)| p.hosts.iter().map(move |&(h, n)| (h, n, ps.shape)))
            .collect();
        Release { gang: gang.id.clone(), end_ms, hosts }
    }
}

/// Capacity set aside this cycle for one gang expected to start at `start_ms`.
#[derive(Debug)]
struct Reservation {
    gang: String,
    cluster: ClusterId,
    start_ms: u64,
    /// What it will need on each host, and how much of that is free now and held.
    want: Vec<(DomainId, u32, PodShape)>,
    held: Vec<(DomainId, u32, PodShape)>,
}

#[derive(Debug, Clone)]
pub struct Cycle {
    /// One per pending gang, in the order they were given.
    pub decisions: Vec<Decision>,
    pub capacity: Capacity,
    pub usage: QuotaUsage,
    pub stats: CycleStats,
    /// What the batch optimiser did this cycle, when it ran.
    pub batch: Option<BatchReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CycleStats {
    pub admitted: u32,
    pub pending: u32,
    /// Gang-on-cluster placement attempts.
    pub attempts: u64,
    /// Gangs answered from the cycle's memo of shapes that fit nowhere.
    pub memo_hits: u64,
}

/// The order gangs are considered in: priority, then submit time, then id.
pub fn queue_order(pending: &[Gang]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..pending.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&pending[a], &pending[b]);
        (Reverse(x.priority), x.submitted_ms, &x.id).cmp(&(Reverse(y.priority), y.submitted_ms, &y.id))
    });
    order
}

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
    let (plan, mut report) = match plan {
        Ok(planned) => planned,
        Err(report) => return Cycle { batch: Some(report), ..first },
    };
    let second = greedy(snapshot, pending, config, Some(&plan));
    if !plan.honoured(&second.decisions) {
        report.rejected = Some("realised, the plan dropped a gang greedy admitted or overtook the reserved one".into());
        return Cycle { batch: Some(report), ..first };
    }
    let values = [&first, &second].map(|c| batch::value(run.fleet, pending, &held, &c.decisions));
    // Ties keep the greedy answer: it is the one users can predict.
    report.kept_ilp = values[1] > values[0] + batch::EPSILON;
    (report.greedy_value, report.realised_value) = (values[0], values[1]);
    let kept = if report.kept_ilp { second } else { first };
    Cycle { batch: Some(report), ..kept }
}

/// One greedy pass; with a `plan`, its pins are admitted when the pass reaches the plan's window.
fn greedy<'a>(snapshot: Snapshot<'a>, pending: &'a [Gang], config: &'a Config, mut plan: Option<&Plan>) -> Cycle {
    let Snapshot { fleet, queues, capacity, usage, now_ms, releases, running } = snapshot;
    // Each gang as it is held this cycle: preferences its patience still holds it to become
    // requirements (see `Patience`).
    let held: Vec<Cow<'_, Gang>> = pending.iter().map(|g| held(config, g, now_ms)).collect();
    let mut run = Run::new(fleet, queues, config, capacity, usage);
    let mut decisions: Vec<Option<Decision>> = vec![None; pending.len()];
    // The optimiser's assignments take their room when the cycle reaches its window: gangs
    // ahead of the window (higher priority) are served first, exactly as without it.
    let mut blocked: BTreeMap<QueueId, &str> = BTreeMap::new();
    let mut order = FairOrder::new(pending, queues, fleet, config.fair_sharing);
    let mut reservation: Option<Reservation> = None;
    // A gang being evicted is fair game for anyone, as if of the lowest priority.
    let lowest_running =
        running.iter().map(|r| if r.evicting { i32::MIN } else { r.gang.priority }).min().unwrap_or(i32::MAX);
    while let Some(i) = order.next(pending, queues, &run.usage) {
        if let Some(p) = plan.filter(|p| p.window.contains(&i)) {
            plan = None;
            for &(j, cluster, domain, written) in &p.pins {
                let gang = if written { &pending[j] } else { &*held[j] };
                if let Some(admission) = run.pinned(gang, cluster, domain) {
                    run.stats.admitted += 1;
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
            _ => match run.patient_gang(gang, &held[i]) {
                Ok(admission) => Decision::Admit(admission),
                Err(reason) => {
                    // Preempt only for a gang that fits nowhere as written: one merely holding
                    // out for locality while it could run spread out waits instead. It preempts
                    // for its held form, so its victims free the domain it holds out for.
                    let may = run.config.preemption.is_some()
                        && !running.is_empty()
                        && match &reason {
                            r if r.may_preempt() => true,
                            Reason::HoldingForLocality { .. } => !run.fits_anywhere(gang),
                            _ => false,
                        };
                    let preempted = if may { run.preempt(&held[i], &running, lowest_running, now_ms) } else { None };
                    match preempted {
                        Some((admission, victims)) => {
                            let victims = victims.iter().map(|&v| running[v].gang.id.clone()).collect();
                            Decision::Preempt { admission, victims }
                        }
                        None => run.no_room(gang, &held[i], reason, now_ms, &releases, &mut reservation),
                    }
                }
            },
        };
        match &decision {
            Decision::Admit(_) | Decision::Preempt { .. } => run.stats.admitted += 1,
            Decision::Pending(reason) => {
                run.stats.pending += 1;
                if let (Some(q), true) = (queue, strict && !reason.is_permanent()) {
                    // The first gang a strict queue could not admit blocks the rest.
                    blocked.entry(q).or_insert(&gang.id);
                }
            }
        }
        decisions[i] = Some(decision);
    }
    if let Some(r) = &reservation {
        // The held capacity is not used by anything admitted: the cycle returns it.
        run.unhold(r);
    }
    let decisions = decisions.into_iter().flatten().collect();
    Cycle { decisions, capacity: run.cap, usage: run.usage, stats: run.stats, batch: None }
}

pub(crate) fn held<'g>(config: &Config, gang: &'g Gang, now_ms: u64) -> Cow<'g, Gang> {
    let Some(patience) = config.patience else { return Cow::Borrowed(gang) };
    let waited = now_ms.saturating_sub(gang.submitted_ms);
    if gang.pod_sets.iter().all(|ps| patience.hold(ps.topology, ps.pods, waited).is_none()) {
        return Cow::Borrowed(gang);
    }
    let mut g = gang.clone();
    for ps in &mut g.pod_sets {
        if let Some(c) = patience.hold(ps.topology, ps.pods, waited) {
            ps.topology = c;
        }
    }
    Cow::Owned(g)
}

/// A pod set resolved against the fleet and its queue: the flavors it may take, in order.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) flavors: Vec<Option<FlavorId>>,
}

/// Memo key: a pod set shape that fit in no candidate cluster this cycle. Capacity only
/// shrinks during a cycle, so the same shape with as many pods or more cannot fit either.
/// The flavors it could use are compared in the entry, so a lookup allocates nothing.
type MemoKey<'g> = (&'g ClusterFilter, PodShape, TopologyConstraint, Option<(u32, Level)>);

#[derive(Debug, Clone)]
struct MemoEntry {
    flavors: Vec<Option<FlavorId>>,
    min_pods: u32,
    /// What the fleet offers this shape now, and when empty (which does not depend on pods).
    now: Shortfall,
    empty: Shortfall,
}

impl MemoEntry {
    fn reason(&self, ps: &crate::gang::PodSet) -> Reason {
        let named = |s: &Shortfall| Shortfall { pod_set: ps.name.clone(), pods: ps.pods, ..s.clone() };
        if ps.pods > self.empty.largest {
            Reason::NeverFits(named(&self.empty))
        } else {
            Reason::NoDomain(named(&self.now))
        }
    }
}

pub(crate) struct Run<'a> {
    // 'a: the fleet, queues and pending gangs of this cycle.
    pub(crate) fleet: &'a Fleet,
    pub(crate) queues: &'a Queues,
    pub(crate) config: &'a Config,
    pub(crate) cap: Capacity,
    pub(crate) usage: QuotaUsage,
    /// Ids of running gangs evicted this cycle.
    pub(crate) evicted: BTreeSet<&'a str>,
    memo: BTreeMap<MemoKey<'a>, Vec<MemoEntry>>,
    stats: CycleStats,
}

/// A cluster's rank for a gang; lower is better.
type Score = (u32, Reverse<u8>, u64, u32, Reverse<u64>, ClusterId);

impl<'a> Run<'a> {
    pub(crate) fn new(
        fleet: &'a Fleet,
        queues: &'a Queues,
        config: &'a Config,
        cap: Capacity,
        usage: QuotaUsage,
    ) -> Self {
        Run {
            fleet,
            queues,
            config,
            cap,
            usage,
            evicted: BTreeSet::new(),
            memo: BTreeMap::new(),
            stats: CycleStats::default(),
        }
    }

    /// The gang as its patience holds it (`held`), or as written when the held form could
    /// never fit; a held gang that does not fit now waits for its locality, and says so.
    fn patient_gang(&mut self, gang: &'a Gang, held: &'a Gang) -> Result<Admission, Reason> {
        if std::ptr::eq(gang, held) {
            return self.gang(gang);
        }
        match self.gang(held) {
            Err(Reason::NeverFits(_)) => self.gang(gang),
            Err(Reason::NoDomain(shortfall)) => {
                let written = gang.pod_sets.iter().find(|p| p.name == shortfall.pod_set).map(|p| p.topology);
                match (written, shortfall.level) {
                    (Some(TopologyConstraint::Preferred(preferred)), Some(held)) => {
                        Err(Reason::HoldingForLocality { preferred, held, shortfall })
                    }
                    _ => Err(Reason::NoDomain(shortfall)),
                }
            }
            other => other,
        }
    }

    /// A gang that does not fit now: it backfills in front of the reservation if it may, or
    /// stays pending, with a reservation of its own when it is the first that cannot start.
    fn no_room(
        &mut self,
        gang: &'a Gang,
        held: &'a Gang,
        reason: Reason,
        now_ms: u64,
        releases: &[Release],
        reservation: &mut Option<Reservation>,
    ) -> Decision {
        if let Some(admission) = self.backfill(gang, held, now_ms, reservation.as_mut()) {
            return Decision::Admit(admission);
        }
        let capacity_bound = matches!(reason, Reason::NoDomain(_) | Reason::HoldingForLocality { .. });
        if !(self.config.reservations && reservation.is_none() && capacity_bound) {
            return Decision::Pending(reason);
        }
        match self.reserve(held, releases) {
            Some(r) => {
                let reason = Reason::Reserved {
                    cluster: self.fleet.cluster(r.cluster).name.clone(),
                    in_s: r.start_ms.saturating_sub(now_ms) / 1000,
                    now: Box::new(reason),
                };
                *reservation = Some(r);
                Decision::Pending(reason)
            }
            None => Decision::Pending(reason),
        }
    }

    /// The gang placed on `cluster` as things stand, its quota checked; what it takes stays
    /// taken (uncommitted) on success and is rolled back on failure.
    pub(crate) fn fit(&mut self, cluster: ClusterId, gang: &Gang) -> Option<Admission> {
        self.fit_within(cluster, gang, None)
    }

    /// The gang admitted inside `domain` of `cluster`, where the batch optimiser put it.
    fn pinned(&mut self, gang: &Gang, cluster: ClusterId, domain: DomainId) -> Option<Admission> {
        let admission = self.fit_within(cluster, gang, Some(domain))?;
        self.commit(gang, &admission);
        Some(admission)
    }

    fn fit_within(&mut self, cluster: ClusterId, gang: &Gang, within: Option<DomainId>) -> Option<Admission> {
        let queue = self.queues.id(&gang.queue)?;
        let resolved: Vec<Resolved> =
            gang.pod_sets.iter().map(|ps| self.resolve(queue, ps)).collect::<Result<_, _>>().ok()?;
        let cp = self.cap.checkpoint();
        match self.try_cluster(cluster, gang, &resolved, within) {
            Ok(admission) if self.check_quota(queue, gang, &admission).is_ok() => Some(admission),
            _ => {
                self.cap.rollback(self.fleet, cp);
                None
            }
        }
    }

    /// Whether the gang, as written, fits some cluster it may use as things stand.
    fn fits_anywhere(&mut self, gang: &Gang) -> bool {
        for c in self.fleet.cluster_ids() {
            let cl = self.fleet.cluster(c);
            if cl.cordoned || !gang.clusters.allows(&cl.name, &cl.labels) {
                continue;
            }
            let cp = self.cap.checkpoint();
            if self.fit(c, gang).is_some() {
                self.cap.rollback(self.fleet, cp);
                return true;
            }
        }
        false
    }

    /// Where and when `gang` would start, from what running gangs release in order of their
    /// expected ends: the first release after which it fits. Holds what of that placement is
    /// free now, so later gangs cannot take it unless they end before (`backfill`).
    fn reserve(&mut self, gang: &'a Gang, releases: &[Release]) -> Option<Reservation> {
        if releases.is_empty() {
            return None;
        }
        // A gang evicted this cycle has given its capacity back already.
        let mut order: Vec<&Release> = releases.iter().filter(|r| !self.evicted.contains(r.gang.as_str())).collect();
        order.sort_by_key(|r| r.end_ms);
        // The memo holds what fits nowhere *now*; more fits on future capacity.
        let (saved_usage, saved_memo, stats) = (self.usage.clone(), std::mem::take(&mut self.memo), self.stats);
        // Where the gang goes once the first `k` releases happened. Fitting only gets easier as
        // k grows, so the first k that fits is found by bisection: a few placements per cycle,
        // not one per running gang.
        let fits_after = |this: &mut Self, k: usize| -> Option<Admission> {
            let mut future = this.cap.clone();
            for r in &order[..k] {
                for &(h, n, shape) in &r.hosts {
                    future.give_back(this.fleet, h, n, shape);
                }
            }
            future.commit();
            std::mem::swap(&mut this.cap, &mut future);
            this.memo.clear();
            let placed = this.gang(gang).ok();
            std::mem::swap(&mut this.cap, &mut future);
            (this.usage, this.stats) = (saved_usage.clone(), stats);
            placed
        };
        let n = order.len();
        let found = fits_after(self, n).and_then(|_| {
            let (mut lo, mut hi) = (1, n);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if fits_after(self, mid).is_some() { hi = mid } else { lo = mid + 1 }
            }
            Some((fits_after(self, lo)?, order[lo - 1].end_ms))
        });
        self.memo = saved_memo;
        let (admission, start_ms) = found?;
        let want: Vec<(DomainId, u32, PodShape)> = Release::of(gang, &admission, start_ms).hosts;
        let mut r = Reservation { gang: gang.id.clone(), cluster: admission.cluster, start_ms, want, held: Vec::new() };
        self.hold(&mut r);
        Some(r)
    }

    /// Takes what the reservation wants and is free now.
    fn hold(&mut self, r: &mut Reservation) {
        r.held.clear();
        for &(h, n, shape) in &r.want {
            let free = self.cap.node_free(h).pods(&shape).min(n);
            if free > 0 {
                self.cap.take(self.fleet, h, free, shape);
                r.held.push((h, free, shape));
            }
        }
        self.cap.commit();
    }

    fn unhold(&mut self, r: &Reservation) {
        for &(h, n, shape) in &r.held {
            self.cap.give_back(self.fleet, h, n, shape);
        }
        self.cap.commit();
    }

    /// A gang that did not fit beside the reservation may use its capacity if it states a run
    /// time that ends before the reservation starts; the reservation then holds what is left.
    fn backfill(
        &mut self,
        gang: &'a Gang,
        held: &'a Gang,
        now_ms: u64,
        reservation: Option<&mut Reservation>,
    ) -> Option<Admission> {
        let r = reservation?;
        let ends = now_ms.saturating_add(gang.runtime_ms?);
        if ends > r.start_ms || r.gang == gang.id {
            return None;
        }
        self.unhold(r);
        // The memo's "fits nowhere" was learnt with the hold in place; without it more fits.
        self.memo.clear();
        let admitted = self.patient_gang(gang, held).ok();
        self.hold(r);
        admitted
    }

    fn gang(&mut self, gang: &'a Gang) -> Result<Admission, Reason> {
        gang.validate().map_err(Reason::Invalid)?;
        let queue = self.queues.id(&gang.queue).ok_or_else(|| Reason::UnknownQueue { queue: gang.queue.clone() })?;
        let resolved: Vec<Resolved> =
            gang.pod_sets.iter().map(|ps| self.resolve(queue, ps)).collect::<Result<_, _>>()?;
        let candidates = self.candidates(gang, &resolved)?;
        for (ps, r) in gang.pod_sets.iter().zip(&resolved) {
            let hit = self
                .memo
                .get(&memo_key(gang, ps))
                .and_then(|entries| entries.iter().find(|e| e.flavors == r.flavors && ps.pods >= e.min_pods));
            if let Some(e) = hit {
                self.stats.memo_hits += 1;
                return Err(e.reason(ps));
            }
        }
        let order = self.cluster_order(gang, &candidates, &resolved);
        let mut failed_pod_set = 0usize;
        let mut quota_reason = None;
        for c in order {
            self.stats.attempts += 1;
            let cp = self.cap.checkpoint();
            match self.try_cluster(c, gang, &resolved, None) {
                Ok(admission) => match self.check_quota(queue, gang, &admission) {
                    Ok(()) => {
                        self.commit(gang, &admission);
                        return Ok(admission);
                    }
                    Err(reason) => {
                        self.cap.rollback(self.fleet, cp);
                        quota_reason.get_or_insert(reason);
                    }
                },
                Err(failed) => {
                    self.cap.rollback(self.fleet, cp);
                    failed_pod_set = failed_pod_set.max(failed);
                }
            }
        }
        if let Some(reason) = quota_reason {
            return Err(reason);
        }
        // Name the first pod set that fits no span on its own; if each would fit alone but not
        // all together, the one that failed last.
        let empty = self.fleet.allocatable();
        let failed = (0..gang.pod_sets.len())
            .find(|&i| self.largest(&self.cap, &candidates, &gang.pod_sets[i], &resolved[i]).0 < gang.pod_sets[i].pods)
            .unwrap_or(failed_pod_set);
        let (ps, r) = (&gang.pod_sets[failed], &resolved[failed]);
        let entry = MemoEntry {
            flavors: r.flavors.clone(),
            min_pods: ps.pods,
            now: self.shortfall(&self.cap, &candidates, ps, r),
            empty: self.shortfall(empty, &candidates, ps, r),
        };
        let reason = entry.reason(ps);
        if failed == 0 {
            // Pod set 0 was tried on untouched capacity: its failure says something about the
            // shape alone, so later gangs of the same shape, as large or larger, skip the search.
            let entries = self.memo.entry(memo_key(gang, ps)).or_default();
            match entries.iter_mut().find(|e| e.flavors == r.flavors) {
                Some(e) if ps.pods < e.min_pods => *e = entry,
                Some(_) => {}
                None => entries.push(entry),
            }
        }
        Err(reason)
    }

    pub(crate) fn commit(&mut self, gang: &Gang, admission: &Admission) {
        self.usage.charge(self.queues, gang, admission.flavors(self.fleet));
        self.cap.commit();
    }

    /// The flavors a pod set may use: those it accepts, the queue has quota for and the fleet
    /// has, with room in the queue's quota right now.
    pub(crate) fn resolve(&self, queue: QueueId, ps: &crate::gang::PodSet) -> Result<Resolved, Reason> {
        if ps.shape.gpus == 0 {
            return Ok(Resolved { flavors: vec![None] });
        }
        if self.queues.is_unlimited(queue) {
            // No quota to check: every flavor the pod set accepts that the fleet has.
            let flavors: Vec<Option<FlavorId>> = if ps.flavors.is_empty() {
                (0..self.fleet.flavor_names().len()).map(|i| Some(FlavorId(i as u16))).collect()
            } else {
                ps.flavors.iter().filter_map(|n| self.fleet.flavor(n)).map(Some).collect()
            };
            if flavors.is_empty() {
                return Err(Reason::NoFlavor { pod_set: ps.name.clone(), flavors: ps.flavors.clone() });
            }
            return Ok(Resolved { flavors });
        }
        let names: Vec<&str> = if !ps.flavors.is_empty() {
            ps.flavors.iter().map(String::as_str).filter(|f| self.queues.covers_flavor(queue, f)).collect()
        } else if self.queues.is_unlimited(queue) {
            self.fleet.flavor_names().iter().map(String::as_str).collect()
        } else {
            self.queues.quota_flavors(queue).collect()
        };
        let queue_name = &self.queues.spec(queue).name;
        if names.is_empty() {
            return Err(Reason::NoQuotaForFlavor {
                queue: queue_name.clone(),
                pod_set: ps.name.clone(),
                flavors: ps.flavors.clone(),
            });
        }
        let in_fleet: Vec<(&str, FlavorId)> =
            names.iter().filter_map(|n| self.fleet.flavor(n).map(|f| (*n, f))).collect();
        if in_fleet.is_empty() {
            return Err(Reason::NoFlavor {
                pod_set: ps.name.clone(),
                flavors: names.iter().map(|s| s.to_string()).collect(),
            });
        }
        let mut first_shortage = None;
        let mut flavors = Vec::new();
        for (name, id) in in_fleet {
            match charges(name, ps.pods, &ps.shape)
                .find_map(|(key, need)| self.short_of(queue, &key, need).map(|avail| (key, need, avail)))
            {
                None => flavors.push(Some(id)),
                Some(((flavor, resource), requested, available)) => {
                    first_shortage.get_or_insert(Reason::QuotaExceeded {
                        queue: queue_name.clone(),
                        flavor,
                        resource,
                        requested,
                        available,
                    });
                }
            }
        }
        match first_shortage {
            Some(reason) if flavors.is_empty() => Err(reason),
            _ => Ok(Resolved { flavors }),
        }
    }

    /// `Some(available)` when `need` more of `key` does not fit the queue's quota.
    fn short_of(&self, queue: QueueId, key: &QuotaKey, need: u64) -> Option<u64> {
        self.queues.headroom(&self.usage, queue, key).filter(|&room| room < need)
    }

    fn check_quota(&self, queue: QueueId, gang: &Gang, admission: &Admission) -> Result<(), Reason> {
        for ((flavor, resource), requested) in gang_charges(self.fleet, self.queues, gang, admission) {
            let key = (flavor, resource);
            if let Some(available) = self.short_of(queue, &key, requested) {
                return Err(Reason::QuotaExceeded {
                    queue: gang.queue.clone(),
                    flavor: key.0,
                    resource,
                    requested,
                    available,
                });
            }
        }
        Ok(())
    }

    fn candidates(&self, gang: &Gang, resolved: &[Resolved]) -> Result<Vec<ClusterId>, Reason> {
        let has_flavors = |c: ClusterId| {
            resolved.iter().all(|r| r.flavors.iter().any(|f| f.is_none_or(|f| self.fleet.cluster(c).has_flavor(f))))
        };
        let with_flavor: Vec<ClusterId> = self.fleet.cluster_ids().filter(|&c| has_flavors(c)).collect();
        if with_flavor.is_empty() {
            // Name the first pod set that no cluster can serve.
            let (ps, r) = gang
                .pod_sets
                .iter()
                .zip(resolved)
                .find(|(_, r)| {
                    !self
                        .fleet
                        .cluster_ids()
                        .any(|c| r.flavors.iter().any(|f| f.is_none_or(|f| self.fleet.cluster(c).has_flavor(f))))
                })
                .unwrap_or((&gang.pod_sets[0], &resolved[0]));
            let flavors = r.flavors.iter().flatten().map(|f| self.fleet.flavor_name(*f).to_string()).collect();
            return Err(Reason::NoFlavor { pod_set: ps.name.clone(), flavors });
        }
        let allowed: Vec<ClusterId> = with_flavor
            .into_iter()
            .filter(|&c| {
                let cl = self.fleet.cluster(c);
                !cl.cordoned && gang.clusters.allows(&cl.name, &cl.labels)
            })
            .collect();
        if allowed.is_empty() {
            return Err(Reason::NoClusterMatches { pod_set: gang.pod_sets[0].name.clone() });
        }
        Ok(allowed)
    }

    /// The clusters to try, in order. `Scored` ranks each cluster by where the gang's pod sets
    /// would go there (found without placing anything) and drops clusters where one cannot go.
    fn cluster_order(&self, gang: &Gang, candidates: &[ClusterId], resolved: &[Resolved]) -> Vec<ClusterId> {
        if self.config.choice == ClusterChoice::Scored {
            let mut scored: Vec<Score> = candidates.iter().filter_map(|&c| self.estimate(c, gang, resolved)).collect();
            scored.sort_unstable();
            return scored.into_iter().map(|s| s.5).collect();
        }
        let mut order = candidates.to_vec();
        if self.config.choice == ClusterChoice::MostFree {
            let free = |c: ClusterId| -> u64 {
                let root = self.fleet.cluster(c).root;
                resolved
                    .iter()
                    .flat_map(|r| r.flavors.iter().flatten())
                    .map(|&f| self.cap.free_gpus(self.fleet, root, f))
                    .sum()
            };
            order.sort_by_key(|&c| (Reverse(free(c)), c));
        }
        order
    }

    /// Places every pod set in `cluster`; on failure, the index of the pod set that failed.
    fn try_cluster(
        &mut self,
        cluster: ClusterId,
        gang: &Gang,
        resolved: &[Resolved],
        within: Option<DomainId>,
    ) -> Result<Admission, usize> {
        let mut placements = Vec::with_capacity(gang.pod_sets.len());
        for (i, (ps, r)) in gang.pod_sets.iter().zip(resolved).enumerate() {
            let placed =
                r.flavors.iter().filter(|f| f.is_none_or(|f| self.fleet.cluster(cluster).has_flavor(f))).find_map(
                    |&flavor| {
                        let ask = Ask { within, ..ask(self.fleet, cluster, ps, flavor) };
                        Placer { fleet: self.fleet, cap: &mut self.cap, fill: self.config.fill }.place(cluster, &ask)
                    },
                );
            placements.push(placed.ok_or(i)?);
        }
        Ok(Admission { cluster, pod_sets: placements })
    }

    /// How good `cluster` would be for the gang, from the span each pod set would take on the
    /// current capacity: preferences missed, then locality (the narrowest common domain), then
    /// what is left over in the spans (best fit), then the admin's cost weight, then balance.
    /// `None` when some pod set has no span there.
    fn estimate(&self, cluster: ClusterId, gang: &Gang, resolved: &[Resolved]) -> Option<Score> {
        let fleet = self.fleet;
        let view = View { fleet, cap: &self.cap, fill: self.config.fill };
        let c = fleet.cluster(cluster);
        let (mut missed, mut leftover) = (0u32, 0u64);
        let mut spans = Vec::with_capacity(gang.pod_sets.len());
        for (ps, r) in gang.pod_sets.iter().zip(resolved) {
            let (span, ask) = r.flavors.iter().filter(|f| f.is_none_or(|f| c.has_flavor(f))).find_map(|&f| {
                let ask = ask(fleet, cluster, ps, f);
                view.narrowest_span(cluster, &ask).map(|s| (s, ask))
            })?;
            leftover += view.leftover(span, &ask);
            if let TopologyConstraint::Preferred(level) = ps.topology
                && fleet.level_of(span).is_none_or(|l| l < level)
            {
                missed += 1;
            }
            spans.push(span);
        }
        let locality = fleet.common_ancestor(spans).and_then(|d| fleet.level_of(d)).map_or(0, |l| l as u8 + 1);
        let free: u64 = c.flavors.iter().map(|&f| self.cap.free_gpus(fleet, c.root, f)).sum();
        Some((missed, Reverse(locality), leftover, c.cost_weight, Reverse(free), cluster))
    }

    /// The most pods of the pod set one allowed span could take on `cap`: (pods, where, flavor).
    fn largest(
        &self,
        cap: &Capacity,
        candidates: &[ClusterId],
        ps: &crate::gang::PodSet,
        r: &Resolved,
    ) -> (u32, ClusterId, Option<FlavorId>) {
        let view = View { fleet: self.fleet, cap, fill: self.config.fill };
        let mut best: Option<(u32, ClusterId, Option<FlavorId>)> = None;
        for &c in candidates {
            for &flavor in r.flavors.iter().filter(|f| f.is_none_or(|f| self.fleet.cluster(c).has_flavor(f))) {
                let largest = view.largest(c, &ask(self.fleet, c, ps, flavor));
                if best.is_none_or(|(b, _, _)| largest > b) {
                    best = Some((largest, c, flavor));
                }
            }
        }
        best.unwrap_or((0, candidates[0], None))
    }

    /// The largest number of the pod set's pods that one allowed span in any candidate
    /// cluster could take on `cap`.
    fn shortfall(&self, cap: &Capacity, candidates: &[ClusterId], ps: &crate::gang::PodSet, r: &Resolved) -> Shortfall {
        let (largest, cluster, flavor) = self.largest(cap, candidates, ps, r);
        let level = match ps.topology {
            TopologyConstraint::Required(l) => Some(l),
            _ => None,
        };
        Shortfall {
            pod_set: ps.name.clone(),
            level,
            pods: ps.pods,
            gpus_per_pod: ps.shape.gpus,
            flavor: flavor.map(|f| self.fleet.flavor_name(f).to_string()),
            largest,
            cluster: self.fleet.cluster(cluster).name.clone(),
        }
    }
}

fn memo_key<'g>(gang: &'g Gang, ps: &crate::gang::PodSet) -> MemoKey<'g> {
    (&gang.clusters, ps.shape, ps.topology, ps.slice.map(|s| (s.size, s.level)))
}

pub(crate) fn ask(fleet: &Fleet, cluster: ClusterId, ps: &crate::gang::PodSet, flavor: Option<FlavorId>) -> Ask {
    let c = fleet.cluster(cluster);
    let widest_depth = match ps.topology {
        TopologyConstraint::Required(level) => c.depth_for(level),
        _ => 0,
    };
    Ask {
        flavor,
        shape: ps.shape,
        pods: ps.pods,
        widest_depth,
        slice: ps.slice.map(|s| (s.size, c.depth_for(s.level))),
        within: None,
    }
}

impl Admission {
    /// The GPU flavor name each pod set was given, in the gang's order.
    pub fn flavors<'f>(&'f self, fleet: &'f Fleet) -> impl Iterator<Item = Option<&'f str>> {
        self.pod_sets.iter().map(|p| p.flavor.map(|f| fleet.flavor_name(f)))
    }
}

/// What an admitted gang charges its queue's quota, per quota key (`queue::quota_charges`).
pub fn gang_charges(fleet: &Fleet, queues: &Queues, gang: &Gang, admission: &Admission) -> BTreeMap<QuotaKey, u64> {
    quota_charges(queues, gang, admission.flavors(fleet))
}

/// Returns what a finished or evicted gang held: capacity and quota.
pub fn release(
    fleet: &Fleet,
    queues: &Queues,
    cap: &mut Capacity,
    usage: &mut QuotaUsage,
    gang: &Gang,
    admission: &Admission,
) {
    for (ps, p) in gang.pod_sets.iter().zip(&admission.pod_sets) {
        for &(host, pods) in &p.hosts {
            cap.give_back(fleet, host, pods, ps.shape);
        }
    }
    usage.discharge(queues, gang, admission.flavors(fleet));
}
