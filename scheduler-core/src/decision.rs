//! What a cycle decides for each gang: admit it somewhere ([`Admission`]), admit it in place of
//! victims, or leave it pending with a [`Reason`]; and what an admission charges and gives back.

use std::collections::BTreeMap;

use crate::capacity::Capacity;
use crate::fleet::{ClusterId, DomainId, Fleet};
use crate::gang::{Gang, GangId};
use crate::place::PodSetPlacement;
use crate::queue::{Queues, QuotaKey, QuotaUsage, quota_charges};
use crate::reason::Reason;

/// Where an admitted gang goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub cluster: ClusterId,
    /// One per pod set, in the gang's order.
    pub pod_sets: Vec<PodSetPlacement>,
    /// How the cycle ranked the clusters it could try, best first (`ClusterChoice::Scored`;
    /// empty otherwise, and for admissions not made by a cycle). The gang went to the first
    /// that took it: `cluster`.
    pub ranking: Vec<Rank>,
}

/// How good a cluster was for a gang, compared field by field in this order (lower is better):
/// preferences it would miss, then locality (the narrowest level holding the whole gang), then
/// what the spans would have left over (best fit), then the admin's cost weight, then balance
/// (more free GPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank {
    pub missed_preferences: u32,
    /// The level holding the whole gang there, as `Level as u8 + 1` (0: only the cluster).
    pub locality: std::cmp::Reverse<u8>,
    /// GPUs (CPU millicores for CPU-only pods) the chosen spans keep free.
    pub leftover: u64,
    pub cost_weight: u32,
    pub free_gpus: std::cmp::Reverse<u64>,
    pub cluster: ClusterId,
}

impl Rank {
    /// The level holding the whole gang there; `None`: only the cluster.
    pub fn level(&self) -> Option<crate::topology::Level> {
        self.locality.0.checked_sub(1).and_then(|i| crate::topology::Level::ALL.get(usize::from(i)).copied())
    }
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

    /// The GPU flavor name each pod set was given, in the gang's order.
    pub fn flavors<'f>(&'f self, fleet: &'f Fleet) -> impl Iterator<Item = Option<&'f str>> {
        self.pod_sets.iter().map(|p| p.flavor.map(|f| fleet.flavor_name(f)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Admit(Admission),
    /// Admitted in place of `victims` (gang ids, from the snapshot's `running`), which must be
    /// evicted first; the cycle's capacity and usage already count them gone.
    Preempt {
        admission: Admission,
        victims: Vec<GangId>,
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

/// What a cycle did, beside its decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CycleStats {
    pub admitted: u32,
    pub pending: u32,
    /// Gang-on-cluster placement attempts.
    pub attempts: u64,
    /// Gangs answered from the cycle's memo of shapes that fit nowhere.
    pub memo_hits: u64,
}

/// What an admitted gang charges its queue's quota, per quota key (`queue::quota_charges`).
pub fn gang_charges(fleet: &Fleet, queues: &Queues, gang: &Gang, admission: &Admission) -> BTreeMap<QuotaKey, u64> {
    quota_charges(queues, gang, admission.flavors(fleet))
}

/// Returns what a finished or evicted gang held: capacity and quota, for good.
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
    cap.commit();
    usage.discharge(queues, gang, admission.flavors(fleet));
}
