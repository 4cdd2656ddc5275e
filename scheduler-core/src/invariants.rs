//! The invariants every decision keeps, checked from first principles: recompute capacity and
//! quota usage from what is running and compare. The property tests call this after every
//! cycle and the simulator after every event.

use std::collections::BTreeMap;

use crate::capacity::{Capacity, NodeFree};
use crate::decision::Admission;
use crate::fleet::{DomainId, Fleet};
use crate::gang::Gang;
use crate::queue::{QueueId, Queues, QuotaUsage, Resource};
use crate::topology::TopologyConstraint;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("host {host} is over-committed by gang {gang}")]
    OverCommitted { host: String, gang: String },
    #[error("tracked capacity differs from capacity recomputed from running gangs")]
    CapacityDrift,
    #[error("gang {gang} pod set {pod_set}: {placed} of {pods} pods placed")]
    NotWhole { gang: String, pod_set: String, pods: u32, placed: u32 },
    #[error("gang {gang} pod set {pod_set}: pod on {host} of the wrong GPU flavor")]
    WrongFlavor { gang: String, pod_set: String, host: String },
    #[error("gang {gang} pod set {pod_set}: requires one {constraint} but spans {span}")]
    RequiredBroken { gang: String, pod_set: String, constraint: TopologyConstraint, span: String },
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
    // What is in use per host, recomputed from the hosts down and the running gangs: every
    // placement's share of a host (with who placed it, 0 for down), summed host by host.
    let mut parts: Vec<(DomainId, usize, NodeFree)> = Vec::new();
    for &host in down {
        if let Some(spec) = fleet.domain(host).node {
            parts.push((host, 0, NodeFree { gpus: spec.gpus, cpu_milli: spec.cpu_milli, memory_mib: spec.memory_mib }));
        }
    }
    let mut recomputed_usage = QuotaUsage::default();
    for (i, &(gang, admission)) in running.iter().enumerate() {
        for (ps, p) in gang.pod_sets.iter().zip(&admission.pod_sets) {
            for &(host, pods) in &p.hosts {
                let n = u64::from(pods);
                let s = &ps.shape;
                let takes = NodeFree {
                    gpus: s.gpus.saturating_mul(pods),
                    cpu_milli: s.cpu_milli.saturating_mul(n),
                    memory_mib: s.memory_mib.saturating_mul(n),
                };
                parts.push((host, i + 1, takes));
            }
        }
        recomputed_usage.charge(queues, gang, admission.flavors(fleet));
    }
    parts.sort_unstable_by_key(|&(host, by, _)| (host, by));
    let mut used: Vec<(DomainId, NodeFree)> = Vec::with_capacity(parts.len());
    for (host, by, takes) in parts {
        let u = match used.last_mut() {
            Some((h, u)) if *h == host => u,
            _ => {
                used.push((host, NodeFree::default()));
                &mut used.last_mut().expect("just pushed").1
            }
        };
        u.gpus = u.gpus.saturating_add(takes.gpus);
        u.cpu_milli = u.cpu_milli.saturating_add(takes.cpu_milli);
        u.memory_mib = u.memory_mib.saturating_add(takes.memory_mib);
        if fleet.allocatable().node_free(host).less(u).is_none() {
            let gang = by.checked_sub(1).map_or_else(|| "(host down)".to_string(), |i| running[i].0.id.clone());
            return Err(Violation::OverCommitted { host: fleet.path(host), gang });
        }
    }
    if !capacity.is_empty_less(fleet, &used) {
        return Err(Violation::CapacityDrift);
    }
    if &recomputed_usage != usage {
        return Err(Violation::UsageDrift);
    }
    check_quota(queues, usage)
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
}
