//! Preemption, with Kueue's semantics where users expect them: each queue says whom its gangs
//! may evict (`withinClusterQueue`, `reclaimWithinCohort`, `borrowWithinCohort`), and the cycle
//! preempts only for a gang that fits no cluster as things stand. It then evicts on exactly one
//! cluster, inside one domain at the gang's required level, the set of victims that loses the
//! fewest GPU-hours of work, and no victim the gang could do without.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use crate::cycle::{Admission, Run};
use crate::fleet::{ClusterId, DomainId};
use crate::gang::Gang;
use crate::queue::{QueueId, quota_charges};
use crate::topology::TopologyConstraint;

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

/// Fleet-wide preemption knobs; `Config::preemption = None` turns preemption off whatever the
/// queues say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preemption {
    /// A gang that started less than this long ago is never a victim: it has not yet had the
    /// chance to do any work worth the restart.
    pub min_runtime_ms: u64,
    /// Count a victim's lost work from its last reported checkpoint (the TrainJob annotation
    /// `stowage.dev/last-checkpoint`) rather than from its start, so that recently
    /// checkpointed gangs are evicted first.
    pub prefer_checkpointed: bool,
}

impl Preemption {
    /// Stowage's default: ten minutes of protection, checkpoints honoured.
    pub const DEFAULT: Preemption = Preemption { min_runtime_ms: 10 * 60_000, prefer_checkpointed: true };
}

/// A gang running when the snapshot was taken: a possible victim.
#[derive(Debug, Clone, Copy)]
pub struct Running<'a> {
    pub gang: &'a Gang,
    pub admission: &'a Admission,
    pub started_ms: u64,
    /// When it last reported a checkpoint, on the same clock.
    pub checkpoint_ms: Option<u64>,
    /// Already being evicted (for an earlier preemptor): choosing it costs nothing and needs no
    /// permission, so a preemptor waiting for its victims to go picks the same ones again.
    pub evicting: bool,
}

impl Running<'_> {
    /// GPU-milliseconds of work an eviction at `now_ms` throws away.
    pub fn loss(&self, now_ms: u64, prefer_checkpointed: bool) -> u64 {
        if self.evicting {
            return 0;
        }
        let since = match self.checkpoint_ms {
            Some(c) if prefer_checkpointed => c.max(self.started_ms),
            _ => self.started_ms,
        };
        self.gang.total_gpus().saturating_mul(now_ms.saturating_sub(since))
    }
}

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

/// A victim set on one cluster: (GPU-ms lost, victims, cluster, scope), lower is better.
type Choice = (u64, usize, ClusterId, DomainId, Vec<usize>);

impl<'a> Run<'a> {
    /// Evicts the victims that let `gang` start, if some cluster has them, and admits it in
    /// their place; `lowest_running` is the lowest priority among `running`. Gangs already
    /// chosen as victims this cycle (`self.evicted`) are not chosen again.
    pub(crate) fn preempt(
        &mut self,
        gang: &'a Gang,
        running: &[Running<'a>],
        lowest_running: i32,
        now_ms: u64,
    ) -> Option<(Admission, Vec<usize>)> {
        let knobs = self.config.preemption?;
        let queue = self.queues.id(&gang.queue)?;
        // The common case, settled without looking at each running gang: a policy that only
        // evicts lower priorities, and nothing running is of lower priority.
        let policy = self.queues.spec(queue).preemption;
        let lower_only = !matches!(policy.within_queue, WithinQueue::LowerOrNewerEqualPriority)
            && policy.reclaim_within_cohort != ReclaimWithinCohort::Any;
        if lower_only && lowest_running >= gang.priority {
            return None;
        }
        let mut victims: Vec<(u64, i32, Reverse<u64>, usize, Via)> = running
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                !self.evicted.contains(r.gang.id.as_str())
                    && (r.evicting || now_ms.saturating_sub(r.started_ms) >= knobs.min_runtime_ms)
            })
            .filter_map(|(i, r)| {
                let via = if r.evicting { Via::SameQueue } else { self.may_evict(queue, gang, r)? };
                Some((r.loss(now_ms, knobs.prefer_checkpointed), r.gang.priority, Reverse(r.started_ms), i, via))
            })
            .collect();
        if victims.is_empty() {
            return None;
        }
        // Cheapest first: least work lost, then lowest priority, then the most recently started.
        victims.sort_unstable_by_key(|v| (v.0, v.1, v.2, v.3));
        let via: BTreeMap<usize, Via> = victims.iter().map(|v| (v.3, v.4)).collect();
        let order: Vec<usize> = victims.iter().map(|v| v.3).collect();
        let mut best: Option<Choice> = None;
        for c in self.fleet.cluster_ids() {
            let cl = self.fleet.cluster(c);
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
            let mut scopes: BTreeMap<DomainId, Vec<usize>> = BTreeMap::new();
            for &i in order.iter().filter(|&&i| running[i].admission.cluster == c) {
                let mut touched: Vec<DomainId> = running[i]
                    .admission
                    .pod_sets
                    .iter()
                    .flat_map(|p| p.hosts.iter().map(|&(h, _)| self.fleet.ancestor_at(h, depth)))
                    .collect();
                touched.sort_unstable();
                touched.dedup();
                for d in touched {
                    scopes.entry(d).or_default().push(i);
                }
            }
            for (scope, candidates) in scopes {
                let Some(set) = self.victim_set(gang, c, scope, &candidates, running, &via) else { continue };
                let lost: u64 = set.iter().map(|&i| running[i].loss(now_ms, knobs.prefer_checkpointed)).sum();
                let choice = (lost, set.len(), c, scope, set);
                if best.as_ref().is_none_or(|b| (choice.0, choice.1, choice.2, choice.3) < (b.0, b.1, b.2, b.3)) {
                    best = Some(choice);
                }
            }
        }
        let (_, _, cluster, _, set) = best?;
        for &i in &set {
            self.evict(&running[i]);
            self.evicted.insert(running[i].gang.id.as_str());
        }
        let admission = self.fit(cluster, gang);
        debug_assert!(admission.is_some(), "the victim set was found to free room");
        match admission {
            Some(a) => {
                self.commit(gang, &a);
                Some((a, set))
            }
            None => {
                // Cannot happen (the same trial passed); undo rather than evict for nothing.
                for &i in &set {
                    self.restore(&running[i]);
                    self.evicted.remove(running[i].gang.id.as_str());
                }
                None
            }
        }
    }

    /// Whether a gang of `queue` may evict `victim`, and on what grounds.
    fn may_evict(&self, queue: QueueId, gang: &Gang, victim: &Running<'_>) -> Option<Via> {
        let policy = self.queues.spec(queue).preemption;
        let theirs = self.queues.id(&victim.gang.queue)?;
        let (p, v) = (gang.priority, victim.gang.priority);
        if theirs == queue {
            let allowed = match policy.within_queue {
                WithinQueue::Never => false,
                WithinQueue::LowerPriority => v < p,
                WithinQueue::LowerOrNewerEqualPriority => {
                    v < p || (v == p && victim.gang.submitted_ms > gang.submitted_ms)
                }
            };
            return allowed.then_some(Via::SameQueue);
        }
        let cohort = self.queues.spec(queue).cohort.as_ref()?;
        if self.queues.spec(theirs).cohort.as_ref() != Some(cohort) || !self.queues.borrowing(&self.usage, theirs) {
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

    /// The cheapest victims among `candidates` (cheapest first) whose eviction lets the gang
    /// start on `cluster`: taken in order until it fits, then each dropped again, dearest
    /// first, if the gang still fits without evicting it.
    fn victim_set(
        &mut self,
        gang: &'a Gang,
        cluster: ClusterId,
        scope: DomainId,
        candidates: &[usize],
        running: &[Running<'a>],
        via: &BTreeMap<usize, Via>,
    ) -> Option<Vec<usize>> {
        let need = gang.total_gpus();
        let cl = self.fleet.cluster(cluster);
        // GPUs only grow as victims are added: skip trials that cannot pass on count alone.
        let mut gpus: u64 = cl.flavors.iter().map(|&f| self.cap.free_gpus(self.fleet, scope, f)).sum();
        let mut chosen = Vec::new();
        let mut found = false;
        for &i in candidates {
            chosen.push(i);
            gpus += running[i].gang.total_gpus();
            if gpus >= need && self.trial(gang, cluster, &chosen, running, via) {
                found = true;
                break;
            }
        }
        if !found {
            return None;
        }
        for k in (0..chosen.len()).rev() {
            let mut without = chosen.clone();
            without.remove(k);
            if !without.is_empty() && self.trial(gang, cluster, &without, running, via) {
                chosen = without;
            }
        }
        Some(chosen)
    }

    /// Whether the gang would start on `cluster` with `victims` gone, and the grounds allow it.
    fn trial(
        &mut self,
        gang: &'a Gang,
        cluster: ClusterId,
        victims: &[usize],
        running: &[Running<'a>],
        via: &BTreeMap<usize, Via>,
    ) -> bool {
        for &i in victims {
            self.evict(&running[i]);
        }
        let cp = self.cap.checkpoint();
        let ok = self.fit(cluster, gang).is_some_and(|a| {
            // Reclaiming from the cohort needs the preemptor within its nominal quota, unless
            // borrowWithinCohort covers every such victim.
            let reclaims = victims.iter().map(|i| via[i]).filter(|v| matches!(v, Via::Reclaim { .. }));
            let mut reclaims = reclaims.peekable();
            reclaims.peek().is_none()
                || !self.borrows_with(gang, &a)
                || reclaims.all(|v| matches!(v, Via::Reclaim { borrowing_up_to: Some(_) }))
        });
        self.cap.rollback(self.fleet, cp);
        for &i in victims {
            self.restore(&running[i]);
        }
        ok
    }

    /// Whether admitting the gang as `admission` would take its queue past nominal quota.
    fn borrows_with(&self, gang: &Gang, admission: &Admission) -> bool {
        let Some(q) = self.queues.id(&gang.queue) else { return false };
        quota_charges(self.queues, gang, admission.flavors(self.fleet))
            .iter()
            .any(|(key, &amount)| self.usage.get(q, key) + amount > self.queues.nominal(q, key).unwrap_or(u64::MAX))
    }

    fn evict(&mut self, r: &Running<'_>) {
        for (ps, p) in r.gang.pod_sets.iter().zip(&r.admission.pod_sets) {
            for &(host, pods) in &p.hosts {
                self.cap.give_back(self.fleet, host, pods, ps.shape);
            }
        }
        self.usage.discharge(self.queues, r.gang, r.admission.flavors(self.fleet));
    }

    fn restore(&mut self, r: &Running<'_>) {
        for (ps, p) in r.gang.pod_sets.iter().zip(&r.admission.pod_sets) {
            for &(host, pods) in &p.hosts {
                self.cap.take(self.fleet, host, pods, ps.shape);
            }
        }
        self.cap.commit();
        self.usage.charge(self.queues, r.gang, r.admission.flavors(self.fleet));
    }
}
