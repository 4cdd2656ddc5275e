//! Decisions into what the dispatcher writes, pure: an admission becomes a Placement spec (the
//! member and, per pod set, the narrowest domain holding it, named by the member's own node
//! label), and a pending reason becomes the TrainJob condition users see.

use api::stowage::{ClusterRank, DomainRef, MAX_RANKED, PlacementSpec, PodSetPlacement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use scheduler_core::{Admission, Domain, DomainId, Fleet, Gang, Level, Reason, TopologyConstraint};

/// Condition type on a hub TrainJob while it waits for a placement (True = still pending).
pub const PENDING_CONDITION: &str = api::trainer::TrainJobCondition::Pending.as_str();

/// The domain a span stands for on its member: the hub's hosts stand for nodes a member
/// summarised by domain, so a span at a host is its domain's.
fn member_domain(fleet: &Fleet, span: DomainId) -> &Domain {
    let span = fleet.domain(span);
    match span.parent {
        Some(parent) if span.node.is_some() => fleet.domain(parent),
        _ => span,
    }
}

/// The narrowest topology level holding the whole admitted gang: `Host` for a gang on one
/// node (as the Placement's ranking says), else the level its member labels; `None` when only
/// the cluster does.
pub fn locality(fleet: &Fleet, admission: &Admission) -> Option<Level> {
    let span = admission.span(fleet)?;
    if fleet.domain(span).node.is_some() {
        return Some(Level::Host);
    }
    fleet.cluster(admission.cluster).level_at(fleet.domain(span).depth)
}

/// The Placement for an admitted gang at `epoch`.
pub fn placement(fleet: &Fleet, gang: &Gang, admission: &Admission, train_job_uid: &str, epoch: i64) -> PlacementSpec {
    let cluster = fleet.cluster(admission.cluster);
    let pod_sets = gang
        .pod_sets
        .iter()
        .zip(&admission.pod_sets)
        .map(|(ps, p)| {
            // A span at the cluster root pins nothing.
            let span = member_domain(fleet, p.span);
            let domain = cluster.level_at(span.depth).map(|level| DomainRef {
                level: level.as_str().to_string(),
                node_label: cluster.levels[span.depth as usize - 1].label.clone(),
                value: span.name.clone(),
            });
            PodSetPlacement {
                name: ps.name.to_string(),
                count: ps.pods,
                flavor: p.flavor.map(|f| fleet.flavor_name(f).to_string()),
                domain,
                required: matches!(ps.topology, TopologyConstraint::Required(_)),
                hosts: Vec::new(),
            }
        })
        .collect();
    let ranking = admission
        .ranking
        .iter()
        .take(MAX_RANKED)
        .map(|r| ClusterRank {
            cluster: fleet.cluster(r.cluster).name.clone(),
            missed_preferences: r.missed_preferences,
            locality: r.level().map(|l| l.as_str().to_string()),
            leftover_gpus: r.leftover,
            cost_weight: r.cost_weight,
            free_gpus: r.free_gpus.0,
        })
        .collect();
    PlacementSpec {
        train_job_uid: train_job_uid.to_string(),
        cluster: Some(cluster.name.clone()),
        epoch,
        queue: Some(gang.queue.clone()),
        pod_sets,
        backoff: Vec::new(),
        ranking,
    }
}

/// The condition a pending TrainJob carries: its reason, kind as `reason`, sentence as
/// `message`. The transition time moves only when the reason's kind changes, so refreshing it
/// every cycle does not churn.
pub fn pending_condition(reason: &Reason, previous: Option<&Condition>, now: Time) -> Condition {
    let kind = camel(reason.kind());
    let last =
        previous.filter(|c| c.status == "True" && c.reason == kind).map_or(now, |c| c.last_transition_time.clone());
    Condition {
        type_: PENDING_CONDITION.into(),
        status: "True".into(),
        reason: kind,
        message: reason.to_string(),
        last_transition_time: last,
        observed_generation: None,
    }
}

/// `no-domain` → `NoDomain`: condition reasons are CamelCase.
pub(crate) fn camel(kind: &str) -> String {
    kind.split('-').map(|w| w[..1].to_ascii_uppercase() + &w[1..]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::fixture::{GangExt, gang, uniform_cluster};
    use scheduler_core::{Decision, FleetBuilder, Level, QueueSpec, Queues, Shortfall, Snapshot, cycle};

    #[test]
    fn an_admission_becomes_a_placement_naming_the_members_label() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Block, 2), (Level::Rack, 2), (Level::Host, 4)])
            .expect("cluster");
        let fleet = b.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let g = gang("ml/t").pods(4).gpus(8).required(Level::Rack);
        let snap = Snapshot::idle(&fleet, &queues);
        let out = cycle(snap, std::slice::from_ref(&g), &scheduler_core::fixture::greedy());
        let Decision::Admit(a) = &out.decisions[0] else { panic!("admitted") };
        let p = placement(&fleet, &g, a, "uid-1", 3);
        assert_eq!((p.cluster.as_deref(), p.epoch, p.train_job_uid.as_str()), (Some("east"), 3, "uid-1"));
        let ps = &p.pod_sets[0];
        assert_eq!((ps.name.as_str(), ps.count, ps.required, ps.flavor.as_deref()), ("node", 4, true, Some("h100")));
        let d = ps.domain.as_ref().expect("pinned");
        assert_eq!(
            (d.level.as_str(), d.node_label.as_str(), d.value.as_str()),
            ("rack", "cloud.google.com/gce-topology-subblock", "b0-r0")
        );
    }

    #[test]
    fn the_pending_condition_keeps_its_time_while_the_reason_kind_holds() {
        let r = Reason::NoDomain(Shortfall {
            pod_set: "node".into(),
            level: Some(Level::Rack),
            pods: 8,
            gpus_per_pod: 8,
            flavor: Some("h100".into()),
            flavors: 1,
            largest: 5,
            cluster: "east".into(),
            read_as: None,
            oversize: None,
        });
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).expect("time"));
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).expect("time"));
        let first = pending_condition(&r, None, t0.clone());
        assert_eq!((first.reason.as_str(), first.status.as_str()), ("NoDomain", "True"));
        assert!(first.message.contains("no rack in any cluster has 8 free slots"));
        let again = pending_condition(&r, Some(&first), t1.clone());
        assert_eq!(again.last_transition_time, t0, "same kind: no transition");
        let other = pending_condition(&Reason::UnknownQueue { queue: "x".into() }, Some(&first), t1.clone());
        assert_eq!((other.reason.as_str(), other.last_transition_time), ("UnknownQueue", t1));
    }
}
