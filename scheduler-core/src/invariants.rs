//! The invariants every decision keeps, checked from first principles: recompute capacity and
//! quota usage from what is running and compare. The property tests call this after every
//! cycle and the simulator after every event.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::capacity::{Capacity, NodeFree};
use crate::decision::Admission;
use crate::fleet::{DomainId, Fleet};
use crate::gang::{Gang, GangId};
use crate::queue::{QueueId, Queues, QuotaUsage, Resource};
use crate::topology::TopologyConstraint;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("host {host} is over-committed by gang {gang}")]
    OverCommitted { host: String, gang: GangId },
    #[error("tracked capacity differs from capacity recomputed from running gangs")]
    CapacityDrift,
    #[error("gang {gang} pod set {pod_set}: {placed} of {pods} pods placed")]
    NotWhole { gang: GangId, pod_set: Arc<str>, pods: u32, placed: u32 },
    #[error("gang {gang} pod set {pod_set}: pod on {host} of the wrong GPU flavor")]
    WrongFlavor { gang: GangId, pod_set: Arc<str>, host: String },
    #[error("gang {gang} pod set {pod_set}: requires one {constraint} but spans {span}")]
    RequiredBroken { gang: GangId, pod_set: Arc<str>, constraint: TopologyConstraint, span: String },
    #[error("tracked quota usage differs from usage recomputed from running gangs")]
    UsageDrift,
    #[error("queue {queue} uses {used} of {flavor} {resource}, over its limit {limit}")]
    OverQuota { queue: String, flavor: String, resource: Resource, used: u64, limit: u64 },
}

/// Checks all invariants for the gangs `running` (each with its admission) plus hosts that are
/// `down` (wholly unavailable), against the tracked `capacity` and `usage`.
pub fn check(
    fleet: &Fleet,
    queues: &Queues,
    running: &[(&Gang, &Admission)],
    down: &[DomainId],
    capacity: &Capacity,
    usage: &QuotaUsage,
) -> Result<(), Violation> {
    for &(gang, admission) in running {
        check_gang(fleet, gang, admission)?;
    }
    check_totals(fleet, queues, running, down, capacity, usage)
}

/// The invariants of the whole: no host over-committed, the tracked capacity and usage what
/// the running gangs and the hosts down add up to, every queue within its quota. With
/// [`check_gang`] once per admission (a running gang's placement does not change), this is
/// [`check`].
pub fn check_totals(
    fleet: &Fleet,
    queues: &Queues,
    running: &[(&Gang, &Admission)],
    down: &[DomainId],
    capacity: &Capacity,
    usage: &QuotaUsage,
) -> Result<(), Violation> {
    // Counted afresh, gang by gang, the way a replay keeps it.
    let mut ledger = Ledger::default();
    for &(gang, admission) in running {
        ledger.add(fleet, queues, gang, admission)?;
    }
    ledger.check(fleet, queues, down, capacity, usage)
}

/// What the running gangs add up to, kept as each starts and ends: per host what is in use,
/// and the quota usage. A replay keeps one as gangs start and end and checks the tracked
/// capacity and usage against it after every event, at the cost of the hosts in use;
/// [`check_totals`] counts one afresh from the running gangs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// By host, each once, none at zero.
    in_use: Vec<(DomainId, NodeFree)>,
    usage: QuotaUsage,
}

impl Ledger {
    /// A gang starts: what it takes on each host, and its charge. A host it over-commits is a
    /// violation.
    pub fn add(&mut self, fleet: &Fleet, queues: &Queues, gang: &Gang, admission: &Admission) -> Result<(), Violation> {
        for (host, takes) in takes(gang, admission) {
            let at = match self.in_use.binary_search_by_key(&host, |e| e.0) {
                Ok(at) => at,
                Err(at) => {
                    self.in_use.insert(at, (host, NodeFree::default()));
                    at
                }
            };
            let u = &mut self.in_use[at].1;
            u.gpus = u.gpus.saturating_add(takes.gpus);
            u.cpu_milli = u.cpu_milli.saturating_add(takes.cpu_milli);
            u.memory_mib = u.memory_mib.saturating_add(takes.memory_mib);
            if fleet.allocatable().node_free(host).less(u).is_none() {
                return Err(Violation::OverCommitted { host: fleet.path(host), gang: gang.id.clone() });
            }
        }
        self.usage.charge(queues, gang, admission.flavors(fleet));
        Ok(())
    }

    /// A gang ends (or is evicted): what [`Self::add`] counted for it is given back.
    pub fn remove(&mut self, fleet: &Fleet, queues: &Queues, gang: &Gang, admission: &Admission) {
        for (host, takes) in takes(gang, admission) {
            if let Ok(at) = self.in_use.binary_search_by_key(&host, |e| e.0) {
                let u = &mut self.in_use[at].1;
                u.gpus = u.gpus.saturating_sub(takes.gpus);
                u.cpu_milli = u.cpu_milli.saturating_sub(takes.cpu_milli);
                u.memory_mib = u.memory_mib.saturating_sub(takes.memory_mib);
                if *u == NodeFree::default() {
                    self.in_use.remove(at);
                }
            }
        }
        self.usage.discharge(queues, gang, admission.flavors(fleet));
    }

    /// [`check_totals`] for the gangs added and not removed, plus hosts that are `down`.
    pub fn check(
        &self,
        fleet: &Fleet,
        queues: &Queues,
        down: &[DomainId],
        capacity: &Capacity,
        usage: &QuotaUsage,
    ) -> Result<(), Violation> {
        let mut used = std::borrow::Cow::Borrowed(&self.in_use[..]);
        for &host in down {
            let Some(spec) = fleet.domain(host).node else { continue };
            let whole = NodeFree { gpus: spec.gpus, cpu_milli: spec.cpu_milli, memory_mib: spec.memory_mib };
            match used.binary_search_by_key(&host, |e| e.0) {
                // A host down that a gang still runs on.
                Ok(_) => return Err(Violation::OverCommitted { host: fleet.path(host), gang: "(host down)".into() }),
                Err(at) => used.to_mut().insert(at, (host, whole)),
            }
        }
        if !capacity.is_empty_less(fleet, &used) {
            return Err(Violation::CapacityDrift);
        }
        if &self.usage != usage {
            return Err(Violation::UsageDrift);
        }
        check_quota(queues, usage)
    }
}

/// What `gang` takes on each host `admission` places it on (a host once per pod set).
fn takes<'g>(gang: &'g Gang, admission: &'g Admission) -> impl Iterator<Item = (DomainId, NodeFree)> + 'g {
    gang.pod_sets.iter().zip(&admission.pod_sets).flat_map(|(ps, p)| {
        p.hosts.iter().map(move |&(host, pods)| {
            let n = u64::from(pods);
            let s = &ps.shape;
            let takes = NodeFree {
                gpus: s.gpus.saturating_mul(pods),
                cpu_milli: s.cpu_milli.saturating_mul(n),
                memory_mib: s.memory_mib.saturating_mul(n),
            };
            (host, takes)
        })
    })
}

/// A gang's own invariants: whole, on its flavor, inside its required domains.
pub fn check_gang(fleet: &Fleet, gang: &Gang, admission: &Admission) -> Result<(), Violation> {
    let cluster = fleet.cluster(admission.cluster);
    for (ps, p) in gang.pod_sets.iter().zip(&admission.pod_sets) {
        let placed: u32 = p.hosts.iter().map(|h| h.1).sum();
        if placed != ps.pods || admission.pod_sets.len() != gang.pod_sets.len() {
            return Err(Violation::NotWhole { gang: gang.id.clone(), pod_set: ps.name.clone(), pods: ps.pods, placed });
        }
        for &(host, _) in &p.hosts {
            let flavor = fleet.domain(host).node.and_then(|n| n.gpu_flavor);
            if fleet.domain(host).cluster != admission.cluster || (ps.shape.gpus > 0 && flavor != p.flavor) {
                return Err(Violation::WrongFlavor {
                    gang: gang.id.clone(),
                    pod_set: ps.name.clone(),
                    host: fleet.path(host),
                });
            }
        }
        if let TopologyConstraint::Required(level) = ps.topology {
            let span = fleet.common_ancestor(p.hosts.iter().map(|h| h.0));
            if span.is_none_or(|s| fleet.domain(s).depth < cluster.depth_for(level)) {
                return Err(Violation::RequiredBroken {
                    gang: gang.id.clone(),
                    pod_set: ps.name.clone(),
                    constraint: ps.topology,
                    span: span.map(|s| fleet.path(s)).unwrap_or_default(),
                });
            }
        }
    }
    Ok(())
}

/// Usage within nominal + borrowing limit per queue, and within the lendable pool per cohort.
fn check_quota(queues: &Queues, usage: &QuotaUsage) -> Result<(), Violation> {
    let mut cohort_over: BTreeMap<(String, (String, Resource)), (u64, u64)> = BTreeMap::new();
    for (i, spec) in queues.specs().iter().enumerate() {
        let q = QueueId(i as u32);
        for quota in &spec.quotas {
            let key = (quota.flavor.clone(), quota.resource);
            let used = usage.get(q, &key);
            let limit = match &spec.cohort {
                None => quota.nominal,
                Some(_) => quota.borrowing_limit.map_or(u64::MAX, |b| quota.nominal + b),
            };
            if used > limit {
                return Err(Violation::OverQuota {
                    queue: spec.name.clone(),
                    flavor: quota.flavor.clone(),
                    resource: quota.resource,
                    used,
                    limit,
                });
            }
            if let Some(c) = &spec.cohort {
                let lendable = quota.lending_limit.unwrap_or(quota.nominal).min(quota.nominal);
                let guaranteed = quota.nominal - lendable;
                let entry = cohort_over.entry((c.clone(), key)).or_default();
                entry.0 += used.saturating_sub(guaranteed);
                entry.1 += lendable;
            }
        }
    }
    for ((cohort, (flavor, resource)), (used, capacity)) in cohort_over {
        if used > capacity {
            return Err(Violation::OverQuota {
                queue: format!("cohort {cohort}"),
                flavor,
                resource,
                used,
                limit: capacity,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::PodShape;
    use crate::cycle::cycle;
    use crate::decision::Decision;
    use crate::fixture::{GangExt, gang, greedy, uniform_cluster};
    use crate::fleet::FleetBuilder;
    use crate::queue::QueueSpec;
    use crate::snapshot::Snapshot;
    use crate::topology::Level;

    /// Two clusters of two racks of four 8-GPU hosts; one two-pod gang placed by a cycle.
    #[test]
    fn drift_anywhere_and_over_commitment_are_caught() {
        let mut b = FleetBuilder::new();
        for name in ["east", "west"] {
            uniform_cluster(&mut b, name, "h100", 8, &[(Level::Rack, 2), (Level::Host, 4)]).expect("cluster");
        }
        let fleet = b.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let g = gang("a").pods(2).gpus(8);
        let out = cycle(Snapshot::idle(&fleet, &queues), std::slice::from_ref(&g), &greedy());
        let Decision::Admit(a) = &out.decisions[0] else { panic!("admitted: {:?}", out.decisions[0]) };
        let running = [(&g, a)];
        assert_eq!(check(&fleet, &queues, &running, &[], &out.capacity, &out.usage), Ok(()));

        let whole = PodShape { gpus: 8, cpu_milli: 0, memory_mib: 0 };
        let in_use = a.pod_sets[0].hosts[0].0;
        let west_host = fleet.clusters()[1].hosts()[3];
        // A GPU taken on a host nothing runs on, in a cluster nothing runs in: its root shows it.
        let mut drifted = out.capacity.clone();
        drifted.take(&fleet, west_host, 1, PodShape { gpus: 1, ..whole });
        assert_eq!(check(&fleet, &queues, &running, &[], &drifted, &out.usage), Err(Violation::CapacityDrift));
        // Given back on a host in use.
        let mut drifted = out.capacity.clone();
        drifted.give_back(&fleet, in_use, 1, whole);
        assert_eq!(check(&fleet, &queues, &running, &[], &drifted, &out.usage), Err(Violation::CapacityDrift));
        // A host down that the capacity still counts free.
        assert_eq!(
            check(&fleet, &queues, &running, &[west_host], &out.capacity, &out.usage),
            Err(Violation::CapacityDrift)
        );
        // A second gang on the same hosts: more than they have.
        let twin = gang("b").pods(2).gpus(8);
        let both = [(&g, a), (&twin, a)];
        assert!(matches!(
            check(&fleet, &queues, &both, &[], &out.capacity, &out.usage),
            Err(Violation::OverCommitted { gang, .. }) if gang == "b"
        ));
    }

    /// A ledger kept as gangs start and end equals one counted afresh from the gangs left, and
    /// it catches a host down counted free, each kind of drift and an over-committed host.
    #[test]
    fn the_ledger_agrees_with_the_totals_added_up_again() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 2), (Level::Host, 4)]).expect("cluster");
        let fleet = b.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let gangs = [gang("a").pods(2).gpus(8), gang("b").pods(3).gpus(2), gang("c").pods(1).gpus(4)];
        let out = cycle(Snapshot::idle(&fleet, &queues), &gangs, &greedy());
        let admitted: Vec<(&Gang, &Admission)> = gangs
            .iter()
            .zip(&out.decisions)
            .map(|(g, d)| match d {
                Decision::Admit(a) => (g, a),
                other => panic!("{} admitted: {other:?}", g.id),
            })
            .collect();
        let mut ledger = Ledger::default();
        for &(g, a) in &admitted {
            ledger.add(&fleet, &queues, g, a).expect("no host over-committed");
        }
        let agree = |ledger: &Ledger, running: &[(&Gang, &Admission)], down: &[DomainId], cap: &Capacity, usage| {
            let (kept, added) = (
                ledger.check(&fleet, &queues, down, cap, usage),
                check_totals(&fleet, &queues, running, down, cap, usage),
            );
            assert_eq!(kept.is_ok(), added.is_ok(), "kept {kept:?}, added up {added:?}");
            kept
        };
        assert_eq!(agree(&ledger, &admitted, &[], &out.capacity, &out.usage), Ok(()));

        // "b" ends: given back in the capacity, the usage and the ledger alike.
        let (mut cap, mut usage) = (out.capacity.clone(), out.usage.clone());
        crate::decision::release(&fleet, &queues, &mut cap, &mut usage, admitted[1].0, admitted[1].1);
        ledger.remove(&fleet, &queues, admitted[1].0, admitted[1].1);
        let left = [admitted[0], admitted[2]];
        let mut afresh = Ledger::default();
        for &(g, a) in &left {
            afresh.add(&fleet, &queues, g, a).expect("no host over-committed");
        }
        assert_eq!(ledger, afresh, "what an ended gang held is given back whole");
        assert_eq!(agree(&ledger, &left, &[], &cap, &usage), Ok(()));

        // A host nothing runs on goes down.
        let idle = fleet.clusters()[0]
            .hosts()
            .iter()
            .copied()
            .find(|h| left.iter().all(|(_, a)| a.pod_sets.iter().all(|p| p.hosts.iter().all(|&(x, _)| x != *h))));
        let idle = idle.expect("an idle host");
        let whole = PodShape { gpus: 8, cpu_milli: 0, memory_mib: 0 };
        assert_eq!(
            agree(&ledger, &left, &[idle], &cap, &usage),
            Err(Violation::CapacityDrift),
            "down but counted free"
        );
        let mut down_cap = cap.clone();
        let spec = fleet.domain(idle).node.expect("a host");
        down_cap.take(
            &fleet,
            idle,
            1,
            PodShape { gpus: spec.gpus, cpu_milli: spec.cpu_milli, memory_mib: spec.memory_mib },
        );
        assert_eq!(agree(&ledger, &left, &[idle], &down_cap, &usage), Ok(()));

        // Drift: a GPU taken where nothing runs, a GPU given back where something does, usage
        // that forgot "b" had ended.
        let mut drifted = cap.clone();
        drifted.take(&fleet, idle, 1, PodShape { gpus: 1, ..whole });
        assert_eq!(agree(&ledger, &left, &[], &drifted, &usage), Err(Violation::CapacityDrift));
        let mut drifted = cap.clone();
        drifted.give_back(&fleet, left[0].1.pod_sets[0].hosts[0].0, 1, PodShape { gpus: 1, ..whole });
        assert_eq!(agree(&ledger, &left, &[], &drifted, &usage), Err(Violation::CapacityDrift));
        assert_eq!(agree(&ledger, &left, &[], &cap, &out.usage), Err(Violation::UsageDrift));

        // A gang placed on a host already full is refused as it is counted.
        let twin = gang("twin").pods(2).gpus(8);
        assert!(matches!(
            ledger.clone().add(&fleet, &queues, &twin, admitted[0].1),
            Err(Violation::OverCommitted { gang, .. }) if gang == "twin"
        ));
    }
}
