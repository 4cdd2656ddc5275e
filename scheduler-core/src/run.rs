//! Placing one gang on the cycle's scratch state ([`Run`]): its pod sets resolved against the
//! fleet and its queue, candidate clusters in order, each tried whole and rolled back on
//! failure, quota checked, a typed reason when it fits nowhere. Preemption, reservations and
//! the batch optimiser build on it; the cycle drives it gang by gang.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::rc::Rc;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::capacity::{Capacity, PodShape};
use crate::config::{ClusterChoice, Config};
use crate::decision::{Admission, Rank, gang_charges};
use crate::draw;
use crate::fleet::{ClusterId, DomainId, FlavorId, Fleet};
use crate::gang::{Gang, PodSet, Slice};
use crate::memo::{self, MemoEntry};
use crate::place::{Ask, Fill, Placer, View};
use crate::queue::{QueueId, Queues, QuotaKey, QuotaUsage, charges};
use crate::reason::{Oversize, Reason, Shortfall};
use crate::topology::TopologyConstraint;
use crate::txn::Txn;

/// The gang as it may be held for locality this cycle: preferences held become requirements
/// (see `Patience`); borrowed when nothing is held. The patience bounds every hold; a gang with
/// a run time, under `Config::locality_cost`, is held only while the cycle judges waiting
/// cheaper than starting spread (`locality::weigh`), and without a patience it is held to its
/// preferred level for as long as that holds.
pub(crate) fn held<'g>(config: &Config, gang: &'g Gang, now_ms: u64) -> Cow<'g, Gang> {
    let waited = now_ms.saturating_sub(gang.submitted_ms);
    let by_cost = config.locality_cost.is_some() && gang.runtime_ms.is_some();
    let hold = |ps: &PodSet| match config.patience {
        Some(patience) => patience.hold(ps, waited),
        None if by_cost => ps.holdable().map(TopologyConstraint::Required),
        None => None,
    };
    if gang.pod_sets.iter().all(|ps| hold(ps).is_none()) {
        return Cow::Borrowed(gang);
    }
    let mut g = gang.clone();
    for ps in &mut g.pod_sets {
        if let Some(c) = hold(ps) {
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

/// A gang made ready for placement: its queue, its pod sets resolved, its candidate clusters.
#[derive(Debug)]
pub(crate) struct Prepared {
    queue: QueueId,
    resolved: Vec<Resolved>,
    candidates: Vec<ClusterId>,
}

impl Prepared {
    /// Each pod set's flavors, in the gang's order.
    pub(crate) fn resolved(&self) -> &[Resolved] {
        &self.resolved
    }

    /// The clusters it may use.
    pub(crate) fn candidates(&self) -> &[ClusterId] {
        &self.candidates
    }
}

/// Why a search admitted the gang nowhere: the last pod set that failed to fit, and the first
/// quota refusal, if any.
#[derive(Debug)]
pub(crate) struct Miss {
    failed_pod_set: usize,
    quota_reason: Option<Box<Reason>>,
}

/// One cycle's placer: the fleet, queues and policy, over the cycle's transaction.
#[derive(Debug)]
pub(crate) struct Run<'a> {
    // 'a: the fleet, queues and pending gangs of this cycle.
    pub(crate) fleet: &'a Fleet,
    pub(crate) queues: &'a Queues,
    pub(crate) config: &'a Config,
    pub(crate) txn: Txn<'a>,
    /// Where a pod set of each shape would span in each cluster as things stand, and what it
    /// would leave over there ([`Self::span`]). Ranking the clusters for a gang asks this of
    /// every cluster; between two gangs only the clusters something was placed on (or given
    /// back to) change, so the rest answer from here. A cache, not scratch state: every change
    /// to the capacity, a rollback's too, moves the cluster's stamp, so a rollback of the
    /// transaction leaves nothing here that could be read as current.
    spans: Spans,
    /// Where gangs weighed for locality would go as written ([`Self::spread`]), and the
    /// capacity's version they were found on: held gangs of one shape are weighed one after
    /// another on the same capacity (a hold takes nothing), and each would find the same room.
    spreads: Vec<(&'a Gang, u64, Admission)>,
    /// The last gang prepared ([`Self::prepare`]), at which count of the usage's changes, and
    /// what was found: the cycle prepares a gang for its held form, its written form, its
    /// backfill and its reservation one after another, with no quota charged between.
    prepared: Option<(&'a Gang, u64, Rc<Prepared>)>,
}

/// [`Run::spans`]: one row per pod-set shape and flavor, one slot per cluster, the rows end to
/// end in one vector (a cycle meets many shapes, and a vector per row was an allocation per
/// shape per cycle). A row is found by one lookup per pod set and flavor of a gang and then
/// written in place (slots live apart from the index, so ranking the clusters can write them
/// while it reads the run); the index is never iterated, so the hash order decides nothing.
#[derive(Debug)]
struct Spans {
    index: FxHashMap<SpanKey, usize>,
    slots: Vec<SpanSlot>,
    clusters: usize,
    /// Scratch for [`Run::cluster_order`]: the rows of the gang being ranked, one per pod set
    /// and flavor in order; kept between gangs only so that ranking allocates nothing.
    asked: Vec<usize>,
}

impl Spans {
    fn new(clusters: usize) -> Self {
        // Room for the shapes of a usual cycle, so that the index is not grown step by step
        // in every one.
        let index = FxHashMap::with_capacity_and_hasher(32, Default::default());
        Spans { index, slots: Vec::new(), clusters, asked: Vec::new() }
    }

    /// Where the row of `key` starts in `slots`, a fresh row (nothing looked at) the first time.
    fn row(&mut self, key: SpanKey) -> usize {
        let (slots, clusters) = (&mut self.slots, self.clusters);
        *self.index.entry(key).or_insert_with(|| {
            slots.resize(slots.len() + clusters, None);
            slots.len() - clusters
        })
    }

    fn get(&self, key: &SpanKey, cluster: ClusterId) -> SpanSlot {
        self.index.get(key).and_then(|&row| self.slots[row + cluster.idx()])
    }
}

/// What a pod set's span in a cluster depends on besides the cluster's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SpanKey {
    flavor: Option<FlavorId>,
    shape: PodShape,
    pods: u32,
    topology: TopologyConstraint,
    slice: Option<Slice>,
}

impl SpanKey {
    fn of(ps: &PodSet, flavor: Option<FlavorId>) -> Self {
        SpanKey { flavor, shape: ps.shape, pods: ps.pods, topology: ps.topology, slice: ps.slice }
    }
}

/// For one cluster: the span and leftover found (`None` inside: no span), and the cluster's
/// capacity stamp they were found on; `None`: not looked at yet.
type SpanSlot = Option<(u64, Option<(DomainId, u64)>)>;

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
            txn: Txn::new(fleet, queues, cap, usage),
            spans: Spans::new(fleet.clusters().len()),
            spreads: Vec::new(),
            prepared: None,
        }
    }

    pub(crate) fn cap(&self) -> &Capacity {
        &self.txn.cap
    }

    pub(crate) fn usage(&self) -> &QuotaUsage {
        self.txn.usage()
    }

    /// The gang as its patience holds it (`held`), or as written when the held form could
    /// never fit; a held gang that does not fit now waits for its locality, and says so.
    pub(crate) fn patient_gang(&mut self, gang: &'a Gang, held: &'a Gang) -> Result<Admission, Reason> {
        if std::ptr::eq(gang, held) {
            return self.gang(gang);
        }
        match self.gang(held) {
            Err(Reason::NeverFits(_)) => self.gang(gang),
            Err(Reason::NoDomain(shortfall)) => {
                let written = gang.pod_sets.iter().find(|p| p.name == shortfall.pod_set).map(|p| p.topology);
                match (written, shortfall.level) {
                    (Some(TopologyConstraint::Preferred(preferred)), Some(held)) => {
                        Err(Reason::HoldingForLocality { preferred, held, shortfall, cost: None })
                    }
                    _ => Err(Reason::NoDomain(shortfall)),
                }
            }
            other => other,
        }
    }

    /// The gang admitted as written ([`Self::gang`]), or on the hosts a gang of the same pod
    /// sets, clusters and queue was admitted on when the capacity was last as it is now: a
    /// search would find the same room for it.
    pub(crate) fn spread(&mut self, gang: &'a Gang) -> Result<Admission, Reason> {
        let version = self.txn.cap.version();
        let same = |g: &Gang| g.pod_sets == gang.pod_sets && g.clusters == gang.clusters && g.queue == gang.queue;
        if let Some(found) = self.spreads.iter().find(|(g, v, _)| *v == version && same(g)).map(|(_, _, a)| a.clone())
            && let Some(admission) = self.retake(gang, &found)
        {
            return Ok(admission);
        }
        let admission = self.gang(gang)?;
        self.spreads.retain(|(_, v, _)| *v == version);
        self.spreads.push((gang, version, admission.clone()));
        Ok(admission)
    }

    /// The gang placed on `cluster` as things stand, its quota checked; what it takes stays
    /// taken (uncommitted) on success and is rolled back on failure.
    pub(crate) fn fit(&mut self, cluster: ClusterId, gang: &Gang) -> Option<Admission> {
        self.fit_within(cluster, gang, None)
    }

    /// The gang admitted inside `domain` of `cluster`, where the batch optimiser put it.
    pub(crate) fn pinned(&mut self, gang: &Gang, cluster: ClusterId, domain: DomainId) -> Option<Admission> {
        let admission = self.fit_within(cluster, gang, Some(domain))?;
        self.commit(gang, &admission);
        Some(admission)
    }

    /// The gang admitted again exactly as `admission` places it (on the hosts an earlier pass
    /// of this cycle chose), if those hosts and its queue's quota still have the room.
    pub(crate) fn retake(&mut self, gang: &Gang, admission: &Admission) -> Option<Admission> {
        let queue = self.queues.id(&gang.queue)?;
        let cp = self.txn.checkpoint();
        for (ps, placement) in gang.pod_sets.iter().zip(&admission.pod_sets) {
            for &(host, pods) in &placement.hosts {
                if self.txn.cap.node_free(host).pods(&ps.shape) < pods {
                    self.txn.rollback(cp);
                    return None;
                }
                self.txn.cap.take(self.fleet, host, pods, ps.shape);
            }
        }
        if self.check_quota(queue, gang, admission).is_err() {
            self.txn.rollback(cp);
            return None;
        }
        self.commit(gang, admission);
        Some(admission.clone())
    }

    fn fit_within(&mut self, cluster: ClusterId, gang: &Gang, within: Option<DomainId>) -> Option<Admission> {
        let queue = self.queues.id(&gang.queue)?;
        let resolved: Vec<Resolved> =
            gang.pod_sets.iter().map(|ps| self.resolve(queue, ps)).collect::<Result<_, _>>().ok()?;
        let cp = self.txn.checkpoint();
        match self.try_cluster(cluster, gang, &resolved, within) {
            Ok(admission) if self.check_quota(queue, gang, &admission).is_ok() => Some(admission),
            _ => {
                self.txn.rollback(cp);
                None
            }
        }
    }

    /// Whether the gang, as written, fits some cluster it may use as things stand.
    pub(crate) fn fits_anywhere(&mut self, gang: &Gang) -> bool {
        for c in self.fleet.cluster_ids() {
            let cl = self.fleet.cluster(c);
            if cl.cordoned || !gang.clusters.allows(&cl.name, &cl.labels) {
                continue;
            }
            let cp = self.txn.checkpoint();
            if self.fit(c, gang).is_some() {
                self.txn.rollback(cp);
                return true;
            }
        }
        false
    }

    pub(crate) fn gang(&mut self, gang: &'a Gang) -> Result<Admission, Reason> {
        let prepared = self.prepare(gang)?;
        let Prepared { resolved, candidates, .. } = &*prepared;
        for (ps, r) in gang.pod_sets.iter().zip(resolved) {
            let key = memo::key(gang, ps);
            let memo = self.txn.memo(&key);
            let answering = || memo.iter().filter(|e| e.answers(ps.pods, &r.flavors));
            let (worded, empty) = match answering().find(|e| e.words_fit(ps.pods)) {
                Some(e) => (Some(e.reason(ps)), None),
                None => (None, answering().next().map(|e| e.empty.clone())),
            };
            if let Some(reason) = worded {
                self.txn.stats.memo_hits += 1;
                return Err(reason);
            }
            if let Some(empty) = empty {
                // It fits nowhere, but it is smaller than the gangs the entries word, or what
                // they name could never hold it: the words are found again, and kept, so every
                // later gang of this size is told the same.
                self.txn.stats.memo_hits += 1;
                let best = self.largest(&self.txn.cap, candidates, ps, r);
                let entry = self.entry(best, candidates, ps, r, empty);
                let reason = entry.reason(ps);
                self.txn.remember(key, entry);
                return Err(reason);
            }
        }
        let failed_pod_set = match self.search(gang, &prepared) {
            Ok(admission) => return Ok(admission),
            Err(Miss { quota_reason: Some(reason), .. }) => return Err(*reason),
            Err(Miss { failed_pod_set, .. }) => failed_pod_set,
        };
        // Name the first pod set that fits no span on its own; if each would fit alone but not
        // all together, the one that failed last.
        let cap = &self.txn.cap;
        let (failed, best) = (0..gang.pod_sets.len())
            .map(|i| (i, self.largest(cap, candidates, &gang.pod_sets[i], &resolved[i])))
            .find(|&(i, best)| best.0 < gang.pod_sets[i].pods)
            .unwrap_or_else(|| {
                (
                    failed_pod_set,
                    self.largest(cap, candidates, &gang.pod_sets[failed_pod_set], &resolved[failed_pod_set]),
                )
            });
        let (ps, r) = (&gang.pod_sets[failed], &resolved[failed]);
        let entry = self.entry(best, candidates, ps, r, None);
        let reason = entry.reason(ps);
        if failed == 0 {
            // Pod set 0 was tried on untouched capacity: its failure says something about the
            // shape alone, so later gangs of the same shape, as large or larger, or larger
            // than one span could take, skip the search.
            self.txn.remember(memo::key(gang, ps), entry);
        }
        Err(reason)
    }

    /// The gang's queue, its pod sets resolved and the clusters it may use; or why it has none.
    /// Depends on the queue's usage, not on the capacity: a search over future capacity
    /// prepares once and [`Self::search`]es as often as it likes. Found again only when the
    /// usage changed since the same gang (or a form of it held to other levels, which
    /// resolves alike) was prepared last.
    pub(crate) fn prepare(&mut self, gang: &'a Gang) -> Result<Rc<Prepared>, Reason> {
        gang.validate().map_err(Reason::Invalid)?;
        let changes = self.txn.usage_changes();
        if let Some((last, at, prepared)) = &self.prepared
            && *at == changes
            && resolves_alike(last, gang)
        {
            return Ok(Rc::clone(prepared));
        }
        let queue = self.queues.id(&gang.queue).ok_or_else(|| Reason::UnknownQueue { queue: gang.queue.clone() })?;
        let resolved: Vec<Resolved> =
            gang.pod_sets.iter().map(|ps| self.resolve(queue, ps)).collect::<Result<_, _>>()?;
        let candidates = self.candidates(gang, &resolved)?;
        let prepared = Rc::new(Prepared { queue, resolved, candidates });
        self.prepared = Some((gang, changes, Rc::clone(&prepared)));
        Ok(prepared)
    }

    /// Each candidate cluster in order, tried whole: the admission, committed, from the first
    /// that holds the gang within its queue's quota; or the last pod set that failed and the
    /// first quota refusal.
    pub(crate) fn search(&mut self, gang: &'a Gang, prepared: &Prepared) -> Result<Admission, Miss> {
        let Prepared { queue, resolved, candidates } = prepared;
        let (order, mut ranking) = self.cluster_order(gang, candidates, resolved);
        let mut failed_pod_set = 0usize;
        let mut quota_reason = None;
        for c in order {
            self.txn.stats.attempts += 1;
            let cp = self.txn.checkpoint();
            match self.try_cluster(c, gang, resolved, None) {
                Ok(mut admission) => match self.check_quota(*queue, gang, &admission) {
                    Ok(()) => {
                        self.commit(gang, &admission);
                        admission.ranking = std::mem::take(&mut ranking);
                        return Ok(admission);
                    }
                    Err(reason) => {
                        self.txn.rollback(cp);
                        quota_reason.get_or_insert_with(|| Box::new(reason));
                    }
                },
                Err(failed) => {
                    self.txn.rollback(cp);
                    failed_pod_set = failed_pod_set.max(failed);
                }
            }
        }
        Err(Miss { failed_pod_set, quota_reason })
    }

    /// The gang admitted as placed: its capacity stays taken, its quota is charged.
    pub(crate) fn commit(&mut self, gang: &Gang, admission: &Admission) {
        self.txn.charge(gang, admission);
    }

    /// The flavors a pod set may use: those it accepts, on nodes its requirement admits, that
    /// the queue has quota for and the fleet has, with room in the queue's quota right now.
    pub(crate) fn resolve(&self, queue: QueueId, ps: &PodSet) -> Result<Resolved, Reason> {
        if ps.shape.gpus == 0 {
            return Ok(Resolved { flavors: vec![None] });
        }
        let admits = |id: FlavorId| ps.nodes.admits(self.fleet.flavor_class(id));
        let no_match = || Reason::NoMatchingNodes { pod_set: ps.name.clone(), requirement: ps.nodes.to_string() };
        if self.queues.is_unlimited(queue) {
            // No quota to check: every flavor the pod set accepts that the fleet has, on nodes
            // its pods can bind to.
            let (any, flavors): (bool, Vec<Option<FlavorId>>) = if ps.flavors.is_empty() {
                let n = self.fleet.flavor_names().len();
                (n > 0, (0..n).map(|i| FlavorId(i as u16)).filter(|&id| admits(id)).map(Some).collect())
            } else {
                let named = || ps.flavors.iter().flat_map(|n| self.fleet.flavors_named(n)).copied();
                (named().next().is_some(), named().filter(|&id| admits(id)).map(Some).collect())
            };
            return match (any, flavors.is_empty()) {
                (false, _) => Err(Reason::NoFlavor { pod_set: ps.name.clone(), flavors: ps.flavors.clone() }),
                (true, true) => Err(no_match()),
                (true, false) => Ok(Resolved { flavors }),
            };
        }
        let names: Vec<&str> = if ps.flavors.is_empty() {
            self.queues.quota_flavors(queue).collect()
        } else {
            ps.flavors.iter().map(String::as_str).filter(|f| self.queues.covers_flavor(queue, f)).collect()
        };
        let queue_name = &self.queues.spec(queue).name;
        if names.is_empty() {
            return Err(Reason::NoQuotaForFlavor {
                queue: queue_name.clone(),
                pod_set: ps.name.clone(),
                flavors: ps.flavors.clone(),
            });
        }
        if names.iter().all(|n| self.fleet.flavors_named(n).is_empty()) {
            return Err(Reason::NoFlavor {
                pod_set: ps.name.clone(),
                flavors: names.iter().map(|s| s.to_string()).collect(),
            });
        }
        let mut admitted = names
            .iter()
            .flat_map(|n| self.fleet.flavors_named(n).iter().map(move |&id| (*n, id)))
            .filter(|&(_, id)| admits(id))
            .peekable();
        if admitted.peek().is_none() {
            return Err(no_match());
        }
        let mut first_shortage = None;
        let mut flavors = Vec::new();
        for (name, id) in admitted {
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
        self.queues.headroom(self.txn.usage(), queue, key).filter(|&room| room < need)
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
        let serves = |c: ClusterId, r: &Resolved| {
            r.flavors.iter().any(|f| f.is_none_or(|f| self.fleet.cluster(c).has_flavor(f)))
        };
        // The first pod set none of the clusters `among` admits can serve (its name), and the
        // flavors it accepts.
        let unserved = |among: &dyn Fn(ClusterId) -> bool| {
            let (ps, r) = gang
                .pod_sets
                .iter()
                .zip(resolved)
                .find(|(_, r)| !self.fleet.cluster_ids().filter(|&c| among(c)).any(|c| serves(c, r)))
                .unwrap_or((&gang.pod_sets[0], &resolved[0]));
            let flavors = r.flavors.iter().flatten().map(|f| self.fleet.flavor_name(*f).to_string()).collect();
            (ps.name.clone(), flavors)
        };
        let serves_all = |c: ClusterId| resolved.iter().all(|r| serves(c, r));
        let may_use = |c: ClusterId| {
            let cl = self.fleet.cluster(c);
            !cl.cordoned && gang.clusters.allows(&cl.name, &cl.labels)
        };
        // One pass for the usual answer; which of the two it missed by is asked only on a miss.
        let allowed: Vec<ClusterId> = self.fleet.cluster_ids().filter(|&c| serves_all(c) && may_use(c)).collect();
        if allowed.is_empty() && !self.fleet.cluster_ids().any(serves_all) {
            let (pod_set, flavors) = unserved(&|_| true);
            return Err(Reason::NoFlavor { pod_set, flavors });
        }
        if allowed.is_empty() {
            // Say whether it may use no cluster at all, or may use some that lack the flavor.
            let (pod_set, flavors) = unserved(&may_use);
            let usable = self.fleet.cluster_ids().filter(|&c| may_use(c));
            let allowed =
                usable.take(crate::reason::NAMED_CLUSTERS).map(|c| self.fleet.cluster(c).name.clone()).collect();
            return Err(Reason::NoClusterMatches { pod_set, allowed, flavors });
        }
        Ok(allowed)
    }

    /// The clusters to try, in order, and with `Scored` their ranks: each cluster ranked by
    /// where the gang's pod sets would go there (found without placing anything), clusters
    /// where one cannot go dropped.
    fn cluster_order(
        &mut self,
        gang: &Gang,
        candidates: &[ClusterId],
        resolved: &[Resolved],
    ) -> (Vec<ClusterId>, Vec<Rank>) {
        if self.config.choice == ClusterChoice::Scored {
            // The rows of the gang's pod sets, found once per pod set and flavor (not per
            // cluster), and the slots taken out of the run while the clusters are ranked.
            let mut rows = std::mem::take(&mut self.spans.asked);
            rows.clear();
            for (ps, r) in gang.pod_sets.iter().zip(resolved) {
                rows.extend(r.flavors.iter().map(|&f| self.spans.row(SpanKey::of(ps, f))));
            }
            let mut slots = std::mem::take(&mut self.spans.slots);
            let mut ranked = Vec::with_capacity(candidates.len());
            for &c in candidates {
                ranked.extend(self.estimate(c, gang, resolved, &rows, &mut slots));
            }
            self.spans.slots = slots;
            self.spans.asked = rows;
            ranked.sort_unstable();
            return (ranked.iter().map(|r| r.cluster).collect(), ranked);
        }
        let mut order = candidates.to_vec();
        if let ClusterChoice::Race { seed } = self.config.choice {
            race(seed, gang.id.as_str(), &mut order);
        }
        if self.config.choice == ClusterChoice::MostFree {
            let free = |c: ClusterId| -> u64 {
                let root = self.fleet.cluster(c).root;
                resolved
                    .iter()
                    .flat_map(|r| r.flavors.iter().flatten())
                    .map(|&f| self.txn.cap.free_gpus(self.fleet, root, f))
                    .sum()
            };
            order.sort_by_key(|&c| (Reverse(free(c)), c));
        }
        (order, Vec::new())
    }

    /// Places every pod set in `cluster`; on failure, the index of the pod set that failed.
    fn try_cluster(
        &mut self,
        cluster: ClusterId,
        gang: &Gang,
        resolved: &[Resolved],
        within: Option<DomainId>,
    ) -> Result<Admission, usize> {
        // Inside the domain the batch optimiser chose, pods go to the fullest hosts that take
        // them: the model counted that domain's room by pod size, and the narrowest span
        // would put two 4-GPU pods on a free host that an 8-GPU pod was counted on.
        let fill = if within.is_some() { Fill::BinPack } else { self.config.fill };
        let mut placements = Vec::with_capacity(gang.pod_sets.len());
        for (i, (ps, r)) in gang.pod_sets.iter().zip(resolved).enumerate() {
            let placed =
                r.flavors.iter().filter(|f| f.is_none_or(|f| self.fleet.cluster(cluster).has_flavor(f))).find_map(
                    |&flavor| {
                        let ask = Ask { within, ..ask(self.fleet, cluster, ps, flavor) };
                        // Where ranking the clusters found the span, when the capacity is still
                        // what it was found on (the first pod set's, usually): not searched again.
                        let span = match within {
                            None => self.known_span(cluster, ps, flavor),
                            Some(_) => None,
                        };
                        let mut placer = Placer { fleet: self.fleet, cap: &mut self.txn.cap, fill };
                        match span {
                            Some(None) => None,
                            Some(Some(span)) => placer.place_in(&ask, span),
                            None => placer.place(cluster, &ask),
                        }
                    },
                );
            placements.push(placed.ok_or(i)?);
        }
        Ok(Admission { cluster, pod_sets: placements, ranking: Vec::new() })
    }

    /// The narrowest span [`Self::span`] found for the pod set in `cluster`, if the cluster's
    /// capacity has not changed since (`Some(None)`: it found none).
    fn known_span(&self, cluster: ClusterId, ps: &PodSet, flavor: Option<FlavorId>) -> Option<Option<DomainId>> {
        if self.config.fill != Fill::Locality {
            return None;
        }
        let (at, found) = self.spans.get(&SpanKey::of(ps, flavor), cluster)?;
        (at == self.txn.cap.stamp(cluster)).then_some(found.map(|(span, _)| span))
    }

    /// How good `cluster` would be for the gang, from the span each pod set would take on the
    /// current capacity: preferences missed, then locality (the narrowest common domain), then
    /// what is left over in the spans (best fit), then the admin's cost weight, then balance.
    /// `None` when some pod set has no span there.
    fn estimate(
        &self,
        cluster: ClusterId,
        gang: &Gang,
        resolved: &[Resolved],
        rows: &[usize],
        slots: &mut [SpanSlot],
    ) -> Option<Rank> {
        let fleet = self.fleet;
        let c = fleet.cluster(cluster);
        let (mut missed, mut leftover) = (0u32, 0u64);
        // The narrowest domain holding every span so far (their common ancestor).
        let mut common: Option<DomainId> = None;
        let mut at = 0;
        for (ps, r) in gang.pod_sets.iter().zip(resolved) {
            let mine = &rows[at..at + r.flavors.len()];
            at += r.flavors.len();
            let (span, left) = r.flavors.iter().zip(mine).filter(|(f, _)| f.is_none_or(|f| c.has_flavor(f))).find_map(
                |(&f, &row)| self.span(cluster, &ask(fleet, cluster, ps, f), &mut slots[row + cluster.idx()]),
            )?;
            leftover += left;
            if let TopologyConstraint::Preferred(level) = ps.topology
                && fleet.level_of(span).is_none_or(|l| l < level)
            {
                missed += 1;
            }
            common = fleet.common_ancestor(common.into_iter().chain([span]));
        }
        let locality = common.and_then(|d| fleet.level_of(d)).map_or(0, |l| l as u8 + 1);
        let free: u64 = c.flavors.iter().map(|&f| self.txn.cap.free_gpus(fleet, c.root, f)).sum();
        Some(Rank {
            missed_preferences: missed,
            locality: Reverse(locality),
            leftover,
            cost_weight: c.cost_weight,
            free_gpus: Reverse(free),
            cluster,
        })
    }

    /// The narrowest span of `ask` in `cluster` as things stand, and what placing it there
    /// would leave over (`View::narrowest_span`, `View::leftover`): from `seen` while the
    /// cluster's capacity is as it was when that was found, else found and kept there.
    fn span(&self, cluster: ClusterId, ask: &Ask, seen: &mut SpanSlot) -> Option<(DomainId, u64)> {
        let stamp = self.txn.cap.stamp(cluster);
        if let Some((at, found)) = *seen
            && at == stamp
        {
            return found;
        }
        let view = View { fleet: self.fleet, cap: &self.txn.cap, fill: self.config.fill };
        let found = view.narrowest_span(cluster, ask).map(|s| (s, view.leftover(s, ask)));
        *seen = Some((stamp, found));
        found
    }

    /// The most pods of the pod set one allowed span could take on `cap`: (pods, where, flavor).
    fn largest(
        &self,
        cap: &Capacity,
        candidates: &[ClusterId],
        ps: &PodSet,
        r: &Resolved,
    ) -> (u32, ClusterId, Option<FlavorId>) {
        self.largest_of(cap, self.pairs(candidates, r), ps).unwrap_or((0, candidates[0], None))
    }

    /// Every (cluster, flavor) the pod set may use.
    fn pairs<'s>(
        &'s self,
        candidates: &'s [ClusterId],
        r: &'s Resolved,
    ) -> impl Iterator<Item = (ClusterId, Option<FlavorId>)> + Clone + 's {
        candidates.iter().flat_map(move |&c| {
            r.flavors
                .iter()
                .filter(move |f| f.is_none_or(|f| self.fleet.cluster(c).has_flavor(f)))
                .map(move |&f| (c, f))
        })
    }

    fn largest_of(
        &self,
        cap: &Capacity,
        pairs: impl Iterator<Item = (ClusterId, Option<FlavorId>)>,
        ps: &PodSet,
    ) -> Option<(u32, ClusterId, Option<FlavorId>)> {
        let view = View { fleet: self.fleet, cap, fill: self.config.fill };
        let mut best: Option<(u32, ClusterId, Option<FlavorId>)> = None;
        for (c, flavor) in pairs {
            let largest = view.largest(c, &ask(self.fleet, c, ps, flavor));
            if best.is_none_or(|(b, _, _)| largest > b) {
                best = Some((largest, c, flavor));
            }
        }
        best
    }

    /// The memo's entry for a pod set that fits nowhere now, given what has most room for it
    /// (`best`, [`Self::largest`]'s answer on the cycle's capacity) and what an empty fleet
    /// offers it when an entry found that already.
    fn entry(
        &self,
        best: (u32, ClusterId, Option<FlavorId>),
        candidates: &[ClusterId],
        ps: &PodSet,
        r: &Resolved,
        empty: Option<Shortfall>,
    ) -> MemoEntry {
        let (now, named_room) = self.shortfall(best, candidates, ps, r);
        let empty = empty.or_else(|| self.empty_beyond(named_room, candidates, ps, r));
        MemoEntry { flavors: r.flavors.clone(), min_pods: ps.pods, largest: best.0, now, named_room, empty }
    }

    /// The largest number of the pod set's pods that one allowed span could take now, among
    /// the clusters and flavors that could hold it all on an empty fleet when any could: a gang
    /// waits for those, and its message names what it waits for, not a flavor whose domains are
    /// too small ever to take it. The second value is how many pods the named cluster and
    /// flavor could take when empty. `best`: what has most room now.
    fn shortfall(
        &self,
        best: (u32, ClusterId, Option<FlavorId>),
        candidates: &[ClusterId],
        ps: &PodSet,
        r: &Resolved,
    ) -> (Shortfall, u32) {
        let cap = &self.txn.cap;
        let empty = View { fleet: self.fleet, cap: self.fleet.allocatable(), fill: self.config.fill };
        let room = |(c, f): (ClusterId, Option<FlavorId>)| empty.largest(c, &ask(self.fleet, c, ps, f));
        let best_room = room((best.1, best.2));
        if best_room >= ps.pods {
            // The usual case, and the cheap one: what has most room now could hold it all.
            // Counted by whether one of its pods fits a host of the flavor (the histogram's
            // width), not by trying each whole: this is every pending gang's path.
            let pod_fits = |(c, f): (ClusterId, Option<FlavorId>)| {
                f.is_some_and(|f| {
                    let widest = self.fleet.allocatable().histogram(self.fleet, self.fleet.cluster(c).root, f).len();
                    widest > usize::try_from(ps.shape.gpus).unwrap_or(usize::MAX)
                })
            };
            return (self.shortfall_at(ps, best, self.flavors_among(candidates, r, pod_fits)), best_room);
        }
        let holds = |p: (ClusterId, Option<FlavorId>)| room(p) >= ps.pods;
        match self.largest_of(cap, self.pairs(candidates, r).filter(|&p| holds(p)), ps) {
            Some(held) => {
                (self.shortfall_at(ps, held, self.flavors_among(candidates, r, holds)), room((held.1, held.2)))
            }
            // Nothing could ever hold it all: it is told so elsewhere (`NeverFits`), by the
            // flavor with the most room.
            None => (self.shortfall_at(ps, best, 1), best_room),
        }
    }

    /// What an empty fleet offers the pod set ([`MemoEntry::empty`]), where it asks more pods
    /// than `named_room`, what its shortfall names could take when empty; up to that many it
    /// is known to fit an empty fleet, and `None` says so.
    fn empty_beyond(&self, named_room: u32, candidates: &[ClusterId], ps: &PodSet, r: &Resolved) -> Option<Shortfall> {
        let empty = || self.shortfall_of(self.fleet.allocatable(), candidates, ps, r);
        // What the shortfall names is among what the empty fleet's largest is taken over.
        debug_assert!(ps.pods > named_room || empty().largest >= named_room, "named room beyond the empty fleet's");
        (ps.pods > named_room).then(empty)
    }

    /// The largest number of the pod set's pods one allowed span could take on `cap`.
    fn shortfall_of(&self, cap: &Capacity, candidates: &[ClusterId], ps: &PodSet, r: &Resolved) -> Shortfall {
        self.shortfall_at(ps, self.largest(cap, candidates, ps, r), 1)
    }

    /// How many of the pod set's GPU flavors some candidate cluster has for which `keep` holds
    /// (of that cluster and flavor): what a shortfall's words say it would take any of. Counted
    /// by name, as users name them: a product on nodes of two classes, or named twice by the
    /// pod set, is one flavor. (Pairwise, not collected: a pod set names a handful.)
    fn flavors_among(
        &self,
        candidates: &[ClusterId],
        r: &Resolved,
        keep: impl Fn((ClusterId, Option<FlavorId>)) -> bool,
    ) -> u32 {
        let usable =
            |f: FlavorId| candidates.iter().any(|&c| self.fleet.cluster(c).has_flavor(f) && keep((c, Some(f))));
        let name = |f: FlavorId| self.fleet.flavor_name(f);
        let n = r
            .flavors
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.map(|f| (i, f)))
            .filter(|&(i, f)| usable(f) && !r.flavors[..i].iter().flatten().any(|&g| name(g) == name(f) && usable(g)))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// `flavors`: as [`Shortfall::flavors`].
    fn shortfall_at(
        &self,
        ps: &PodSet,
        (largest, cluster, flavor): (u32, ClusterId, Option<FlavorId>),
        flavors: u32,
    ) -> Shortfall {
        let level = match ps.topology {
            TopologyConstraint::Required(l) => Some(l),
            _ => None,
        };
        let c = self.fleet.cluster(cluster);
        let most = self.fleet.domain(c.root).roomiest_host;
        let oversize = if ps.shape.cpu_milli > most.cpu_milli {
            Some(Box::new(Oversize::CpuMilli { asked: ps.shape.cpu_milli, most: most.cpu_milli }))
        } else if ps.shape.memory_mib > most.memory_mib {
            Some(Box::new(Oversize::MemoryMib { asked: ps.shape.memory_mib, most: most.memory_mib }))
        } else {
            None
        };
        // A level the cluster does not label is read strictly, as the next narrower one it does.
        let read_as = level.and_then(|l| c.level_at(c.depth_for(l)).filter(|&at| at != l));
        Shortfall {
            pod_set: ps.name.clone(),
            level,
            read_as,
            pods: ps.pods,
            gpus_per_pod: ps.shape.gpus,
            flavor: flavor.map(|f| self.fleet.shared_flavor_name(f)),
            flavors,
            largest,
            cluster: Arc::clone(&c.shared_name),
            oversize,
        }
    }
}

/// Whether `b` is prepared as `a` is ([`Run::prepare`]): the same gang, up to the levels its
/// pod sets are held to (a held or widened form), which neither its flavors nor its clusters
/// depend on. Compared, not assumed from the id: ids are the caller's.
fn resolves_alike(a: &Gang, b: &Gang) -> bool {
    std::ptr::eq(a, b)
        || (a.id == b.id
            && a.queue == b.queue
            && a.clusters == b.clusters
            && a.pod_sets.len() == b.pod_sets.len()
            && a.pod_sets
                .iter()
                .zip(&b.pod_sets)
                .all(|(p, q)| (p.pods, p.shape, &p.flavors, &p.nodes) == (q.pods, q.shape, &q.flavors, &q.nodes)))
}

pub(crate) fn ask(fleet: &Fleet, cluster: ClusterId, ps: &PodSet, flavor: Option<FlavorId>) -> Ask {
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

/// `clusters` in the order MultiKueue's race would try them for `gang` ([`ClusterChoice::Race`]):
/// by a stable hash of the seed, the id and each cluster, so the draw is the same on every
/// machine, build and cycle. The keys are distinct (an odd multiplier and a bijective mix of
/// distinct clusters), so an unstable sort is as deterministic, and keys recomputed per
/// comparison cost less than a cache allocated on every pending gang's path.
fn race(seed: u64, gang: &str, clusters: &mut [ClusterId]) {
    let draw = seed ^ draw::fnv1a(gang);
    clusters.sort_unstable_by_key(|c| draw::mix(draw ^ u64::from(c.0).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
}
