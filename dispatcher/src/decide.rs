//! One dispatcher cycle's decision, pure: hub objects in, what to write out. TrainJobs already
//! placed but not yet running on their member are re-placed first on their own cluster, so the
//! capacity they will take is counted (assumed) before anything new is placed.

use std::collections::BTreeMap;

use api::stowage::{MemberCluster, Placement, PlacementPhase, PlacementSpec, Queue};
use api::trainer::{ClusterTrainingRuntime, JobStatus, Runtime, TrainJob, TrainingRuntime};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use scheduler_core::{ClusterFilter, Config, Decision, Gang, QueueSpec, Queues, QuotaUsage, Snapshot, cycle};

use crate::{plan, translate};

/// Everything a cycle reads, as listed from the hub.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub trainjobs: Vec<TrainJob>,
    pub cluster_runtimes: Vec<ClusterTrainingRuntime>,
    pub runtimes: Vec<TrainingRuntime>,
    pub members: Vec<MemberCluster>,
    pub placements: Vec<Placement>,
    pub queues: Vec<Queue>,
}

/// What a cycle writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// (namespace, name, owner uid, spec) of each Placement to apply.
    pub placements: Vec<(String, String, String, PlacementSpec)>,
    /// (namespace, name, conditions, jobsStatus) of each TrainJob status to write.
    pub statuses: Vec<(String, String, Vec<Condition>, Vec<JobStatus>)>,
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

fn finished(tj: &TrainJob) -> bool {
    tj.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
    })
}

fn runtime_for(o: &Observed, tj: &TrainJob) -> Option<Runtime> {
    let r = &tj.spec.runtime_ref;
    match r.kind_or_default() {
        "TrainingRuntime" => o
            .runtimes
            .iter()
            .find(|rt| rt.metadata.name.as_deref() == Some(&r.name) && rt.metadata.namespace == tj.metadata.namespace)
            .cloned()
            .map(Runtime::Namespaced),
        _ => o
            .cluster_runtimes
            .iter()
            .find(|rt| rt.metadata.name.as_deref() == Some(&r.name))
            .cloned()
            .map(Runtime::Cluster),
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// Replaces the condition of `c.type_`, keeping its transition time when its status is unchanged.
fn upsert(conditions: &mut Vec<Condition>, mut c: Condition) {
    if let Some(old) = conditions.iter_mut().find(|o| o.type_ == c.type_) {
        if old.status == c.status {
            c.last_transition_time = old.last_transition_time.clone();
        }
        *old = c;
    } else {
        conditions.push(c);
    }
}

fn queues(o: &Observed) -> Queues {
    let mut specs: Vec<QueueSpec> = o
        .queues
        .iter()
        .map(|q| QueueSpec {
            name: q.metadata.name.clone().unwrap_or_default(),
            cohort: q.spec.cohort.clone(),
            strategy: match q.spec.queueing_strategy {
                api::stowage::QueueingStrategy::StrictFIFO => scheduler_core::QueueingStrategy::StrictFifo,
                api::stowage::QueueingStrategy::BestEffortFIFO => scheduler_core::QueueingStrategy::BestEffortFifo,
            },
            weight: q.spec.weight,
            quotas: q
                .spec
                .quotas
                .iter()
                .filter_map(|quota| {
                    let amount = |s: &str| {
                        member_agent::render::quantity::Milli::parse(s).ok().map(|m| m.ceil_units().max(0) as u64)
                    };
                    let resource = match quota.resource.as_str() {
                        "nvidia.com/gpu" => scheduler_core::Resource::Gpu,
                        "cpu" => scheduler_core::Resource::CpuMilli,
                        "memory" => scheduler_core::Resource::MemoryMib,
                        _ => return None,
                    };
                    Some(scheduler_core::Quota {
                        flavor: quota.flavor.clone(),
                        resource,
                        nominal: amount(&quota.nominal_quota)?,
                        borrowing_limit: quota.borrowing_limit.as_deref().and_then(amount),
                        lending_limit: quota.lending_limit.as_deref().and_then(amount),
                    })
                })
                .collect(),
        })
        .collect();
    if !specs.iter().any(|q| q.name == translate::DEFAULT_QUEUE) {
        specs.push(QueueSpec::unlimited(translate::DEFAULT_QUEUE));
    }
    Queues::new(specs).unwrap_or_else(|_| {
        Queues::new(vec![QueueSpec::unlimited(translate::DEFAULT_QUEUE)])
            .unwrap_or_else(|_| unreachable!("one queue is valid"))
    })
}

pub fn decide(o: &Observed, config: &Config, now: Time) -> Plan {
    let mut plan = Plan::default();
    let placements: BTreeMap<(String, String), &Placement> =
        o.placements.iter().map(|p| (key(&p.metadata), p)).collect();
    let mut assumed: Vec<Gang> = Vec::new();
    let mut pending: Vec<(Gang, &TrainJob, i64)> = Vec::new();
    for tj in o.trainjobs.iter().filter(|t| !finished(t)) {
        let (ns, name) = key(&tj.metadata);
        let mut conditions = tj.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
        let existing = placements.get(&(ns.clone(), name.clone()));
        let phase = existing.and_then(|p| p.status.as_ref()).map(|s| s.phase);
        // Mirror what the member reports.
        if let Some(p) = existing {
            let jobs = p.status.as_ref().map(|s| s.jobs_status.clone()).unwrap_or_default();
            let mut changed = false;
            match phase {
                Some(PlacementPhase::Succeeded) => {
                    upsert(
                        &mut conditions,
                        condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully".into(), &now),
                    );
                    changed = true;
                }
                Some(PlacementPhase::Failed) => {
                    let message =
                        p.status.as_ref().and_then(|s| s.message.clone()).unwrap_or_else(|| "jobset failed".into());
                    upsert(&mut conditions, condition("Failed", "True", "FailedJobs", message, &now));
                    changed = true;
                }
                _ => {}
            }
            if matches!(
                phase,
                Some(
                    PlacementPhase::Running
                        | PlacementPhase::Applied
                        | PlacementPhase::Succeeded
                        | PlacementPhase::Failed
                )
            ) {
                upsert(
                    &mut conditions,
                    condition(
                        plan::PENDING_CONDITION,
                        "False",
                        "Placed",
                        format!("placed on cluster {}", p.spec.cluster),
                        &now,
                    ),
                );
                changed = true;
            }
            if changed {
                plan.statuses.push((ns.clone(), name.clone(), conditions.clone(), jobs));
            }
        }
        let replace = matches!(phase, Some(PlacementPhase::Unschedulable | PlacementPhase::Lost));
        let Some(runtime) = runtime_for(o, tj) else {
            upsert(
                &mut conditions,
                condition(
                    plan::PENDING_CONDITION,
                    "True",
                    "RuntimeNotFound",
                    format!(
                        "spec.runtimeRef: {} {} not found",
                        tj.spec.runtime_ref.kind_or_default(),
                        tj.spec.runtime_ref.name
                    ),
                    &now,
                ),
            );
            plan.statuses.push((ns, name, conditions, Vec::new()));
            continue;
        };
        let mut gang = match translate::gang(tj, &runtime) {
            Ok(g) => g,
            Err(e) => {
                upsert(&mut conditions, condition(plan::PENDING_CONDITION, "True", "Invalid", e.to_string(), &now));
                plan.statuses.push((ns, name, conditions, Vec::new()));
                continue;
            }
        };
        match existing {
            Some(p) if !replace => {
                if !matches!(phase, Some(PlacementPhase::Running | PlacementPhase::Succeeded | PlacementPhase::Failed))
                {
                    // Placed but not yet reported by the member: count its capacity as taken.
                    gang.clusters =
                        ClusterFilter { only: Some(vec![p.spec.cluster.clone()]), ..ClusterFilter::default() };
                    gang.priority = i32::MAX;
                    assumed.push(gang);
                }
            }
            Some(p) => {
                gang.clusters.avoid.push(p.spec.cluster.clone());
                pending.push((gang, tj, p.spec.epoch + 1));
            }
            None => pending.push((gang, tj, 1)),
        }
    }
    if pending.is_empty() {
        return plan;
    }
    let (fleet, capacity) = match translate::fleet(&o.members) {
        Ok(f) => f,
        Err(e) => {
            for (_, tj, _) in &pending {
                let (ns, name) = key(&tj.metadata);
                let mut conditions = tj.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
                upsert(
                    &mut conditions,
                    condition(
                        plan::PENDING_CONDITION,
                        "True",
                        "NoMemberCapacity",
                        format!("no member cluster has reported capacity: {e}"),
                        &now,
                    ),
                );
                plan.statuses.push((ns, name, conditions, Vec::new()));
            }
            return plan;
        }
    };
    let queues = queues(o);
    let gangs: Vec<Gang> = assumed.iter().cloned().chain(pending.iter().map(|p| p.0.clone())).collect();
    let snapshot = Snapshot { fleet: &fleet, queues: &queues, capacity, usage: QuotaUsage::default() };
    let out = cycle(snapshot, &gangs, config);
    for ((gang, tj, epoch), decision) in pending.iter().zip(&out.decisions[assumed.len()..]) {
        let (ns, name) = key(&tj.metadata);
        let mut conditions = tj.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
        match decision {
            Decision::Admit(a) => {
                let uid = tj.metadata.uid.clone().unwrap_or_default();
                plan.placements.push((ns, name, uid.clone(), plan::placement(&fleet, gang, a, &uid, *epoch)));
            }
            Decision::Pending(reason) => {
                let previous = conditions.iter().find(|c| c.type_ == plan::PENDING_CONDITION).cloned();
                upsert(&mut conditions, plan::pending_condition(reason, previous.as_ref(), now.clone()));
                plan.statuses.push((ns, name, conditions, Vec::new()));
            }
        }
    }
    plan
}
