//! Queues and quota with Kueue ClusterQueue semantics: nominal quota per flavor and resource,
//! a borrowing limit (how far past nominal a queue may go by borrowing from its cohort) and a
//! lending limit (how much of its nominal quota the cohort may use). A queue with no quotas at
//! all is unlimited; a queue with quotas may only use the flavors it names.

use std::collections::BTreeMap;
use std::fmt;

use crate::capacity::PodShape;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Gpu,
    CpuMilli,
    MemoryMib,
}

impl Resource {
    pub const ALL: [Resource; 3] = [Resource::Gpu, Resource::CpuMilli, Resource::MemoryMib];

    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Gpu => "nvidia.com/gpu",
            Resource::CpuMilli => "cpu (milli)",
            Resource::MemoryMib => "memory (MiB)",
        }
    }

    pub fn of(self, shape: &PodShape) -> u64 {
        match self {
            Resource::Gpu => u64::from(shape.gpus),
            Resource::CpuMilli => shape.cpu_milli,
            Resource::MemoryMib => shape.memory_mib,
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Kueue's `queueingStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum QueueingStrategy {
    /// The head blocks everything behind it until it is admitted.
    StrictFifo,
    /// A head that cannot be admitted steps aside for the ones behind it.
    #[default]
    BestEffortFifo,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The GPU flavor this quota is for (CPU and memory of pods on that flavor count here too).
    pub flavor: String,
    pub resource: Resource,
    pub nominal: u64,
    /// `None`: may borrow whatever the cohort has unused.
    pub borrowing_limit: Option<u64>,
    /// `None`: all of nominal may be lent.
    pub lending_limit: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    pub name: String,
    pub cohort: Option<String>,
    pub strategy: QueueingStrategy,
    /// Fair-share weight (the policy issue uses it; kept here so queues carry it from the start).
    pub weight: u32,
    pub quotas: Vec<Quota>,
    /// Whom its gangs may evict (Kueue's ClusterQueue `preemption`).
    pub preemption: QueuePreemption,
}

impl QueueSpec {
    /// An unlimited best-effort queue, the default for gangs that name none.
    pub fn unlimited(name: &str) -> Self {
        QueueSpec {
            name: name.into(),
            cohort: None,
            strategy: QueueingStrategy::BestEffortFifo,
            weight: 1,
            quotas: Vec::new(),
            preemption: QueuePreemption::default(),
        }
    }

    /// Its nominal GPU quota over all flavors (0 for an unlimited queue).
    pub fn nominal_gpus(&self) -> u64 {
        self.quotas.iter().filter(|q| q.resource == Resource::Gpu).map(|q| q.nominal).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueId(pub u32);

impl QueueId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Key of a quota: (flavor name, resource).
pub type QuotaKey = (String, Resource);

/// The queues of a snapshot, indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    specs: Vec<QueueSpec>,
    by_name: BTreeMap<String, QueueId>,
    quota: Vec<BTreeMap<QuotaKey, Quota>>,
    /// Per cohort and key: sum of what members may lend.
    cohort_capacity: BTreeMap<(String, QuotaKey), u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("queue {0:?} is defined twice")]
    Duplicate(String),
    #[error("queue {queue:?}: quota for {flavor}/{resource} is defined twice")]
    DuplicateQuota { queue: String, flavor: String, resource: Resource },
    #[error("queue {queue:?}: quota for {flavor}/{resource}: lendingLimit {lending} exceeds nominalQuota {nominal}")]
    LendingAboveNominal { queue: String, flavor: String, resource: Resource, lending: u64, nominal: u64 },
    #[error("queue {queue:?}: borrowingLimit/lendingLimit need a cohort")]
    LimitsWithoutCohort { queue: String },
}

impl Queues {
    pub fn new(specs: Vec<QueueSpec>) -> Result<Self, QueueError> {
        let mut by_name = BTreeMap::new();
        let mut quota = Vec::with_capacity(specs.len());
        let mut cohort_capacity: BTreeMap<(String, QuotaKey), u64> = BTreeMap::new();
        for (i, q) in specs.iter().enumerate() {
            if by_name.insert(q.name.clone(), QueueId(i as u32)).is_some() {
                return Err(QueueError::Duplicate(q.name.clone()));
            }
            let mut map = BTreeMap::new();
            for quo in &q.quotas {
                if let Some(l) = quo.lending_limit
                    && l > quo.nominal
                {
                    return Err(QueueError::LendingAboveNominal {
                        queue: q.name.clone(),
                        flavor: quo.flavor.clone(),
                        resource: quo.resource,
                        lending: l,
                        nominal: quo.nominal,
                    });
                }
                if q.cohort.is_none() && (quo.lending_limit.is_some() || quo.borrowing_limit.is_some()) {
                    return Err(QueueError::LimitsWithoutCohort { queue: q.name.clone() });
                }
                let key = (quo.flavor.clone(), quo.resource);
                if map.insert(key.clone(), quo.clone()).is_some() {
                    return Err(QueueError::DuplicateQuota {
                        queue: q.name.clone(),
                        flavor: quo.flavor.clone(),
                        resource: quo.resource,
                    });
                }
                if let Some(c) = &q.cohort {
                    *cohort_capacity.entry((c.clone(), key)).or_default() += lendable(quo);
                }
            }
            quota.push(map);
        }
        Ok(Queues { specs, by_name, quota, cohort_capacity })
    }

    pub fn id(&self, name: &str) -> Option<QueueId> {
        self.by_name.get(name).copied()
    }

    pub fn spec(&self, id: QueueId) -> &QueueSpec {
        &self.specs[id.idx()]
    }

    pub fn specs(&self) -> &[QueueSpec] {
        &self.specs
    }

    pub fn is_unlimited(&self, id: QueueId) -> bool {
        self.quota[id.idx()].is_empty()
    }

    pub fn has_quota(&self, id: QueueId, key: &QuotaKey) -> bool {
        self.quota[id.idx()].contains_key(key)
    }

    /// Whether this queue may use GPU flavor `flavor` at all.
    pub fn covers_flavor(&self, id: QueueId, flavor: &str) -> bool {
        self.is_unlimited(id) || self.quota[id.idx()].contains_key(&(flavor.to_string(), Resource::Gpu))
    }

    /// The GPU flavors the queue has quota for, in the order it lists them.
    pub fn quota_flavors(&self, id: QueueId) -> impl Iterator<Item = &str> + '_ {
        self.specs[id.idx()].quotas.iter().filter(|q| q.resource == Resource::Gpu).map(|q| q.flavor.as_str())
    }

    pub fn nominal(&self, id: QueueId, key: &QuotaKey) -> Option<u64> {
        self.quota[id.idx()].get(key).map(|q| q.nominal)
    }

    /// Whether the queue uses more than its nominal quota of anything (it is borrowing).
    pub fn borrowing(&self, usage: &QuotaUsage, id: QueueId) -> bool {
        self.quota[id.idx()].iter().any(|(key, q)| usage.get(id, key) > q.nominal)
    }

    /// Whether admitting `gang` would take its queue past its nominal quota: the first key of
    /// Kueue's order of a cycle's heads (`assignment.Borrows()` in `entryOrdering.Less`,
    /// pkg/scheduler/scheduler.go), asked only in a cohort, where there is something to borrow
    /// ([`NominalQuota`] says how).
    pub fn would_borrow(&self, usage: &QuotaUsage, id: QueueId, gang: &crate::gang::Gang) -> bool {
        self.nominal_quota(id).is_some_and(|n| n.exceeded_by(usage, gang))
    }

    /// The queue's nominal quota as [`Self::would_borrow`] weighs it, found once for many gangs;
    /// `None` where nothing can be borrowed (no cohort, or no quota at all).
    pub fn nominal_quota(&self, id: QueueId) -> Option<NominalQuota> {
        if self.specs[id.idx()].cohort.is_none() || self.is_unlimited(id) {
            return None;
        }
        let flavors = self
            .quota_flavors(id)
            .map(|f| {
                let limits = Resource::ALL
                    .into_iter()
                    .enumerate()
                    .filter_map(|(r, resource)| {
                        let key = (f.to_string(), resource);
                        self.quota[id.idx()].get(&key).map(|q| Limit {
                            key: (id, key),
                            resource: r,
                            nominal: q.nominal,
                        })
                    })
                    .collect();
                (f.to_string(), limits)
            })
            .collect();
        Some(NominalQuota { flavors })
    }

    /// How much more of `key` the queue may take now, borrowing included; `None` if unlimited.
    pub fn headroom(&self, usage: &QuotaUsage, id: QueueId, key: &QuotaKey) -> Option<u64> {
        let Some(q) = self.quota[id.idx()].get(key) else {
            // No entry: unlimited queue, or a resource this queue does not limit (CPU and memory
            // are limited only where a quota names them).
            return None;
        };
        let used = usage.get(id, key);
        let spec = &self.specs[id.idx()];
        let Some(cohort) = &spec.cohort else {
            return Some(q.nominal.saturating_sub(used));
        };
        let local = q.borrowing_limit.map_or(u64::MAX, |b| (q.nominal + b).saturating_sub(used));
        let guaranteed = q.nominal - lendable(q);
        let capacity = self.cohort_capacity.get(&(cohort.clone(), key.clone())).copied().unwrap_or(0);
        let cohort_used: u64 = self
            .by_name
            .values()
            .filter(|m| self.specs[m.idx()].cohort.as_ref() == Some(cohort))
            .filter_map(|m| self.quota[m.idx()].get(key).map(|mq| (m, mq)))
            .map(|(m, mq)| usage.get(*m, key).saturating_sub(mq.nominal - lendable(mq)))
            .sum();
        // Below its guaranteed share a queue draws on its own quota; above, on the cohort pool.
        let own = guaranteed.saturating_sub(used);
        let pool = capacity.saturating_sub(cohort_used);
        Some(local.min(own + pool))
    }
}

fn lendable(q: &Quota) -> u64 {
    q.lending_limit.unwrap_or(q.nominal).min(q.nominal)
}

/// Kueue's `withinClusterQueue`: whom a gang may evict in its own queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WithinQueue {
    #[default]
    Never,
    LowerPriority,
    /// Lower priority, or equal priority and submitted later.
    LowerOrNewerEqualPriority,
}

/// Kueue's `reclaimWithinCohort`: whom a gang may evict in the other queues of its cohort, when
/// those queues are borrowing (using more than their nominal quota).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReclaimWithinCohort {
    #[default]
    Never,
    LowerPriority,
    Any,
}

/// Kueue's `borrowWithinCohort`: whether a gang that will itself borrow may still reclaim in the
/// cohort, and only victims of lower priority (at most `max_priority_threshold` when set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BorrowWithinCohort {
    #[default]
    Never,
    LowerPriority {
        max_priority_threshold: Option<i32>,
    },
}

/// A queue's preemption policy. The default preempts nothing, as Kueue's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueuePreemption {
    pub within_queue: WithinQueue,
    pub reclaim_within_cohort: ReclaimWithinCohort,
    pub borrow_within_cohort: BorrowWithinCohort,
}

/// A queue in a cohort's nominal quota, as the order asks whether a gang would borrow. Kueue
/// asks it of the flavors it has assigned; the order comes before any placement, so a gang
/// counts as borrowing only when every flavor it could take (one the queue has quota for and
/// each GPU pod set accepts) would go past nominal there, with the gang's charge added, on some
/// resource the gang asks for and the queue limits: GPUs, or its GPU pods' CPU or memory. Its
/// CPU-only pods take no flavor and charge no quota ([`quota_charges`]): they weigh nothing.
#[derive(Debug, Clone)]
pub struct NominalQuota {
    /// Per flavor, in the queue's order, the resources the queue limits there.
    flavors: Vec<(String, Vec<Limit>)>,
}

/// One resource a queue limits on one flavor.
#[derive(Debug, Clone)]
struct Limit {
    /// Its usage key, built once, not per gang asked about.
    key: (QueueId, QuotaKey),
    /// Its index in `Resource::ALL`.
    resource: usize,
    nominal: u64,
}

impl NominalQuota {
    /// Whether admitting `gang` on `usage` would take the queue past it.
    pub fn exceeded_by(&self, usage: &QuotaUsage, gang: &crate::gang::Gang) -> bool {
        let gpu_pod_sets = || gang.pod_sets.iter().filter(|ps| ps.shape.gpus > 0);
        let mut ask = [0u64; 3];
        for ps in gpu_pod_sets() {
            for (a, r) in ask.iter_mut().zip(Resource::ALL) {
                *a = a.saturating_add(u64::from(ps.pods).saturating_mul(r.of(&ps.shape)));
            }
        }
        let accepted = |f: &str| gpu_pod_sets().all(|ps| ps.flavors.is_empty() || ps.flavors.iter().any(|n| n == f));
        let mut flavors = self.flavors.iter().filter(|(f, _)| accepted(f)).peekable();
        flavors.peek().is_some()
            && flavors.all(|(_, limits)| {
                limits.iter().any(|l| {
                    let ask = ask[l.resource];
                    ask > 0 && usage.get(l.key.0, &l.key.1).saturating_add(ask) > l.nominal
                })
            })
    }
}

/// What admitted gangs use, per queue and quota key, and what each queue holds in all
/// (quota or not), which fair sharing reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuotaUsage {
    /// Per queue, then per key: looked up by a borrowed key (a victim search asks this of every
    /// running gang's queue), where one map keyed by both needed the key's name cloned.
    used: BTreeMap<QueueId, BTreeMap<QuotaKey, u64>>,
    held: BTreeMap<QueueId, Held>,
}

/// GPUs, CPU (milli) and memory (MiB) held, in `Resource::ALL` order.
pub type Held = [u64; 3];

/// What a gang holds once admitted.
pub fn held_by(gang: &crate::gang::Gang) -> Held {
    let mut total = [0u64; 3];
    for ps in &gang.pod_sets {
        for (t, r) in total.iter_mut().zip(Resource::ALL) {
            *t += u64::from(ps.pods) * r.of(&ps.shape);
        }
    }
    total
}

impl QuotaUsage {
    pub fn get(&self, q: QueueId, key: &QuotaKey) -> u64 {
        self.used.get(&q).and_then(|keys| keys.get(key)).copied().unwrap_or(0)
    }

    pub fn add(&mut self, q: QueueId, key: QuotaKey, amount: u64) {
        *self.used.entry(q).or_default().entry(key).or_default() += amount;
    }

    pub fn remove(&mut self, q: QueueId, key: &QuotaKey, amount: u64) {
        let Some(keys) = self.used.get_mut(&q) else { return };
        if let Some(v) = keys.get_mut(key) {
            *v = v.saturating_sub(amount);
            if *v == 0 {
                keys.remove(key);
            }
        }
        // Nothing left at zero, so that usages equal in amounts compare equal.
        if keys.is_empty() {
            self.used.remove(&q);
        }
    }

    pub fn held(&self, q: QueueId) -> Held {
        self.held.get(&q).copied().unwrap_or_default()
    }

    pub fn hold(&mut self, q: QueueId, amount: Held) {
        let h = self.held.entry(q).or_default();
        for (h, a) in h.iter_mut().zip(amount) {
            *h += a;
        }
    }

    pub fn unhold(&mut self, q: QueueId, amount: Held) {
        if let Some(h) = self.held.get_mut(&q) {
            for (h, a) in h.iter_mut().zip(amount) {
                *h = h.saturating_sub(a);
            }
            if *h == [0; 3] {
                self.held.remove(&q);
            }
        }
    }

    /// Charges an admitted gang to its queue, both its quota and what it holds: `flavors` are
    /// the GPU flavors its pod sets were given, in the gang's order. Every admission (in a
    /// cycle, or running before the snapshot) goes through here or [`Self::add_charge`], and
    /// every end through `discharge`, so the two never drift apart.
    pub fn charge<'f>(
        &mut self,
        queues: &Queues,
        gang: &crate::gang::Gang,
        flavors: impl IntoIterator<Item = Option<&'f str>>,
    ) {
        if let Some(c) = Charge::of(queues, gang, flavors) {
            self.add_charge(&c);
        }
    }

    pub fn discharge<'f>(
        &mut self,
        queues: &Queues,
        gang: &crate::gang::Gang,
        flavors: impl IntoIterator<Item = Option<&'f str>>,
    ) {
        if let Some(c) = Charge::of(queues, gang, flavors) {
            self.remove_charge(&c);
        }
    }

    pub fn add_charge(&mut self, c: &Charge) {
        for (key, &amount) in &c.amounts {
            self.add(c.queue, key.clone(), amount);
        }
        self.hold(c.queue, c.held);
    }

    pub fn remove_charge(&mut self, c: &Charge) {
        for (key, &amount) in &c.amounts {
            self.remove(c.queue, key, amount);
        }
        self.unhold(c.queue, c.held);
    }
}

/// What one admitted gang charges its queue: its quota per key, and what it holds in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub queue: QueueId,
    pub amounts: BTreeMap<QuotaKey, u64>,
    pub held: Held,
}

impl Charge {
    /// `None` for a gang of a queue that does not exist (it was never admitted).
    pub fn of<'f>(
        queues: &Queues,
        gang: &crate::gang::Gang,
        flavors: impl IntoIterator<Item = Option<&'f str>>,
    ) -> Option<Charge> {
        let queue = queues.id(&gang.queue)?;
        Some(Charge { queue, amounts: quota_charges(queues, gang, flavors), held: held_by(gang) })
    }
}

/// What an admitted gang charges its queue's quota, summed per quota key. Only keys the queue
/// has a quota for are tracked (as Kueue does): an unlimited queue charges nothing.
pub fn quota_charges<'f>(
    queues: &Queues,
    gang: &crate::gang::Gang,
    flavors: impl IntoIterator<Item = Option<&'f str>>,
) -> BTreeMap<QuotaKey, u64> {
    let mut total: BTreeMap<QuotaKey, u64> = BTreeMap::new();
    let Some(q) = queues.id(&gang.queue).filter(|&q| !queues.is_unlimited(q)) else { return total };
    for (ps, flavor) in gang.pod_sets.iter().zip(flavors) {
        let Some(flavor) = flavor else { continue };
        for (key, amount) in charges(flavor, ps.pods, &ps.shape) {
            if queues.has_quota(q, &key) {
                *total.entry(key).or_default() += amount;
            }
        }
    }
    total
}

/// What a pod set on `flavor` charges: GPUs, CPU and memory, all under the GPU flavor.
pub fn charges<'a>(flavor: &'a str, pods: u32, shape: &PodShape) -> impl Iterator<Item = (QuotaKey, u64)> + use<'a> {
    let shape = *shape;
    Resource::ALL
        .into_iter()
        .map(move |r| ((flavor.to_string(), r), r.of(&shape) * u64::from(pods)))
        .filter(|(_, v)| *v > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_quota(flavor: &str, nominal: u64, borrow: Option<u64>, lend: Option<u64>) -> Quota {
        Quota { flavor: flavor.into(), resource: Resource::Gpu, nominal, borrowing_limit: borrow, lending_limit: lend }
    }

    fn queue(name: &str, cohort: Option<&str>, quotas: Vec<Quota>) -> QueueSpec {
        QueueSpec {
            name: name.into(),
            cohort: cohort.map(str::to_string),
            strategy: QueueingStrategy::BestEffortFifo,
            weight: 1,
            quotas,
            preemption: QueuePreemption::default(),
        }
    }

    fn key() -> QuotaKey {
        ("h100".into(), Resource::Gpu)
    }

    #[test]
    fn without_cohort_headroom_is_nominal_minus_usage() {
        let qs = Queues::new(vec![queue("a", None, vec![gpu_quota("h100", 16, None, None)])]).expect("valid");
        let a = qs.id("a").expect("a");
        let mut usage = QuotaUsage::default();
        assert_eq!(qs.headroom(&usage, a, &key()), Some(16));
        usage.add(a, key(), 10);
        assert_eq!(qs.headroom(&usage, a, &key()), Some(6));
        assert!(!qs.covers_flavor(a, "a100"));
    }

    #[test]
    fn cohort_members_borrow_unused_quota_up_to_their_limit() {
        let qs = Queues::new(vec![
            queue("a", Some("c"), vec![gpu_quota("h100", 8, Some(4), None)]),
            queue("b", Some("c"), vec![gpu_quota("h100", 8, None, None)]),
        ])
        .expect("valid");
        let (a, b) = (qs.id("a").expect("a"), qs.id("b").expect("b"));
        let usage = QuotaUsage::default();
        // a: nominal 8 + borrowing limit 4.
        assert_eq!(qs.headroom(&usage, a, &key()), Some(12));
        // b: unlimited borrowing, bounded by the cohort's 16.
        assert_eq!(qs.headroom(&usage, b, &key()), Some(16));
        let mut usage = usage;
        usage.add(b, key(), 12);
        assert_eq!(qs.headroom(&usage, a, &key()), Some(4));
    }

    #[test]
    fn lending_limit_keeps_a_guaranteed_share() {
        let qs = Queues::new(vec![
            queue("a", Some("c"), vec![gpu_quota("h100", 10, None, Some(4))]),
            queue("b", Some("c"), vec![gpu_quota("h100", 0, None, None)]),
        ])
        .expect("valid");
        let (a, b) = (qs.id("a").expect("a"), qs.id("b").expect("b"));
        let mut usage = QuotaUsage::default();
        assert_eq!(qs.headroom(&usage, b, &key()), Some(4), "b may borrow only what a lends");
        usage.add(b, key(), 4);
        assert_eq!(qs.headroom(&usage, a, &key()), Some(6), "a keeps its 6 guaranteed GPUs");
    }

    /// Kueue orders a cycle's heads by whether their flavor assignment borrows: per flavor and
    /// per resource, not GPUs summed over the queue's flavors.
    #[test]
    fn a_gang_would_borrow_only_where_no_flavor_it_may_take_keeps_it_within_nominal() {
        use crate::fixture::{GangExt, gang};
        let cpu = |flavor: &str, nominal| Quota {
            flavor: flavor.into(),
            resource: Resource::CpuMilli,
            nominal,
            borrowing_limit: None,
            lending_limit: None,
        };
        let qs = Queues::new(vec![
            queue("a", Some("c"), vec![gpu_quota("h100", 8, None, None), gpu_quota("a100", 8, None, None)]),
            queue("b", Some("c"), vec![gpu_quota("h100", 8, None, None), cpu("h100", 4_000)]),
            queue("solo", None, vec![gpu_quota("h100", 8, None, None)]),
            queue("borrower", Some("c"), vec![gpu_quota("h100", 0, None, None)]),
        ])
        .expect("valid");
        let id = |n: &str| qs.id(n).expect("queue");
        let mut usage = QuotaUsage::default();
        usage.add(id("a"), ("h100".into(), Resource::Gpu), 7);
        usage.add(id("a"), ("a100".into(), Resource::Gpu), 7);
        // 14 of 16 GPUs summed, but 2 more go past nominal on either flavor.
        assert!(qs.would_borrow(&usage, id("a"), &gang("x").gpus(2)));
        assert!(!qs.would_borrow(&usage, id("a"), &gang("x").gpus(1)));
        usage.add(id("a"), ("a100".into(), Resource::Gpu), 1);
        // One GPU still fits h100's nominal, unless the gang only takes a100.
        assert!(!qs.would_borrow(&usage, id("a"), &gang("x").gpus(1)));
        assert!(qs.would_borrow(&usage, id("a"), &gang("x").gpus(1).flavor("a100")));
        // A gang of no GPU takes no flavor and charges nothing: it never borrows.
        assert!(!qs.would_borrow(&usage, id("a"), &gang("x").gpus(0)));

        // b limits CPU on h100 too: GPUs within nominal, CPU past it, is borrowing.
        usage.add(id("b"), ("h100".into(), Resource::CpuMilli), 3_500);
        assert!(qs.would_borrow(&usage, id("b"), &gang("x").gpus(1)));
        usage.remove(id("b"), &("h100".into(), Resource::CpuMilli), 3_000);
        assert!(!qs.would_borrow(&usage, id("b"), &gang("x").gpus(1)));

        // Outside a cohort there is nothing to borrow, whatever the usage.
        usage.add(id("solo"), key(), 8);
        assert!(!qs.would_borrow(&usage, id("solo"), &gang("x").gpus(8)));
        // A queue of no nominal quota borrows whatever it runs, on an idle fleet too.
        assert!(qs.would_borrow(&QuotaUsage::default(), id("borrower"), &gang("x").gpus(1)));
        // A gang of many pods, each asking the most a shape can: the sum saturates, not wraps.
        let mut huge = gang("x").gpus(u32::MAX).pods(u32::MAX);
        huge.pod_sets[0].shape.cpu_milli = u64::MAX;
        assert!(qs.would_borrow(&usage, id("b"), &huge));
    }

    #[test]
    fn invalid_limits_are_rejected_with_the_queue_named() {
        let err = Queues::new(vec![queue("a", Some("c"), vec![gpu_quota("h100", 4, None, Some(8))])])
            .expect_err("lending above nominal");
        assert!(err.to_string().contains("\"a\""));
        assert!(Queues::new(vec![queue("a", None, vec![gpu_quota("h100", 4, Some(1), None)])]).is_err());
    }
}
