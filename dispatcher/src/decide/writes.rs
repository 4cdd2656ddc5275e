//! What the cycle writes: the status of every TrainJob whose status changed, a Placement for
//! each one placed, withdrawn or evicted, and the tally of each queue.

use std::collections::BTreeMap;

use api::stowage::{Placement, PlacementSpec};
use api::trainer::{JobStatus, TrainJob};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use scheduler_core::{Decision, GangId, Reason};

use super::intake::{Job, JobState};
use super::members::Members;
use super::queues::QueueSet;
use super::schedule::{Schedule, waiting};
use super::{
    MemberConditionWrite, Moved, Placed, PlacementWrite, Plan, Redispatch, StatusWrite, Tally, WriteEffect, conditions,
    key,
};
use crate::{plan, translate};

/// A victim chosen this cycle: where it runs, and for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Eviction {
    pub(super) cluster: String,
    /// The preemptor's gang id, and its priority.
    pub(super) by: GangId,
    pub(super) priority: i32,
}

/// This cycle's victims, by gang id.
pub(super) type Evictions = BTreeMap<GangId, Eviction>;

/// The status write, if the status changed.
fn status_write(tj: &TrainJob, conditions: Vec<Condition>, jobs: Vec<JobStatus>) -> Option<StatusWrite> {
    let (ns, name) = key(&tj.metadata);
    let old = tj.status.as_ref();
    let same = old.map(|s| &s.conditions) == Some(&conditions) && old.map(|s| &s.jobs_status) == Some(&jobs);
    let empty = old.is_none() && conditions.is_empty() && jobs.is_empty();
    (!same && !empty).then_some(StatusWrite { namespace: ns, name, conditions, jobs, events: Vec::new() })
}

/// The TrainJobs that do not wait for a placement: their mirrored status, and the tally of
/// those placed and those blocked (pending in the queue they name, as the metrics count them).
pub(super) fn settled(plan: &mut Plan, jobs: &[Job<'_>], tally: &mut Tally) {
    for job in jobs {
        let queue = match &job.state {
            JobState::Waiting(_) => continue,
            JobState::Blocked => {
                plan.pending += 1;
                tally.entry(crate::translate::queue_name(job.tj)).or_default().pending += 1;
                None
            }
            JobState::Finished => None,
            JobState::Suspended(withdraw) => {
                plan.placements.extend(withdraw.map(|p| withdrawal(p, None)));
                None
            }
            JobState::Running(a) => Some(&a.gang.queue),
            JobState::Assumed(g) => Some(&g.queue),
        };
        if let Some(q) = queue {
            tally.entry(q.clone()).or_default().admitted += 1;
        }
        plan.statuses.extend(status_write(job.tj, job.conditions.clone(), job.jobs.clone()));
    }
}

/// The waiting TrainJobs, by the cycle's decision for each: a Placement where one was admitted
/// (or withdrawn from a member it is leaving), a `Pending` condition saying why otherwise.
pub(super) fn placements(
    plan: &mut Plan,
    jobs: &[Job<'_>],
    schedule: &Schedule,
    queues: &QueueSet,
    now: &Time,
    tally: &mut Tally,
) -> Evictions {
    let mut evictions = Evictions::new();
    let decisions = match schedule {
        Schedule::Decided { fleet, decisions, .. } => Ok((fleet, decisions)),
        Schedule::NoCapacity(e) => Err(e.as_str()),
        Schedule::Idle => return evictions,
    };
    for (i, (job, w)) in waiting(jobs).enumerate() {
        let (ns, name) = key(&job.tj.metadata);
        let uid = job.tj.metadata.uid.clone().unwrap_or_default();
        let mut conds = job.conditions.clone();
        let gang = &w.gang;
        let mut effect = WriteEffect { placed: None, redispatch: w.leaving.clone() };
        let spec = match decisions.map(|(fleet, d)| (fleet, &d[i])) {
            Ok((fleet, Decision::Admit(a))) => {
                let mut spec = plan::placement(fleet, gang, a, &uid, w.epoch);
                spec.backoff = w.backoff.clone();
                if let Some(cluster) = &spec.cluster {
                    conditions::upsert(&mut conds, conditions::starting(cluster, None, now));
                    let created = job.tj.metadata.creation_timestamp.as_ref();
                    effect.placed = Some(Placed {
                        queue: gang.queue.clone(),
                        cluster: cluster.clone(),
                        locality: plan::locality(fleet, a),
                        waited: created
                            .filter(|_| w.epoch == 1)
                            .and_then(|c| now.0.duration_since(c.0).try_into().ok()),
                    });
                }
                Some(spec)
            }
            Ok((_, Decision::Pending(Reason::UnknownQueue { queue }))) if queues.inactive.contains_key(queue) => {
                let message = format!("queue {queue} is inactive: {}", queues.inactive[queue]);
                conditions::upsert(&mut conds, conditions::waiting("QueueInactive", message, now));
                None
            }
            Ok((_, Decision::Pending(Reason::UnknownQueue { queue }))) if translate::queue_from_kueue(job.tj) => {
                // The label named a LocalQueue (else intake had said so) whose ClusterQueue is
                // missing: Kueue's words for that (its Workload's message).
                let message = format!("ClusterQueue {queue} doesn't exist");
                conditions::upsert(&mut conds, conditions::waiting("UnknownQueue", message, now));
                None
            }
            Ok((_, Decision::Pending(reason))) => {
                let pending = conditions::pending(reason, &conds, now);
                conditions::upsert(&mut conds, pending);
                None
            }
            Ok((fleet, Decision::Preempt { admission, victims })) => {
                // Placed once its victims are gone (as Kueue admits a preemptor): until then
                // their pods still hold the room, and each cycle picks the same victims again.
                let cluster = fleet.cluster(admission.cluster).name.clone();
                let message =
                    format!("preempting {} on cluster {cluster}; placed once they are gone", victims.join(", "));
                conditions::upsert(&mut conds, conditions::waiting("Preempting", message, now));
                for v in victims {
                    evictions.insert(
                        v.clone(),
                        Eviction { cluster: cluster.clone(), by: gang.id.clone(), priority: gang.priority },
                    );
                }
                None
            }
            Err(e) => {
                let message = format!("no member cluster has reported capacity: {e}");
                conditions::upsert(&mut conds, conditions::waiting("NoMemberCapacity", message, now));
                None
            }
        };
        let pending = spec.is_none();
        let count = tally.entry(gang.queue.clone()).or_default();
        if pending {
            count.pending += 1
        } else {
            count.admitted += 1
        }
        let spec = spec.or_else(|| {
            w.leaving.as_ref().map(|_| PlacementSpec {
                train_job_uid: uid.clone(),
                cluster: None,
                epoch: w.epoch,
                queue: None,
                pod_sets: Vec::new(),
                backoff: w.backoff.clone(),
                ranking: Vec::new(),
            })
        });
        if let Some(spec) = spec {
            let replaces = w.replaces.clone();
            plan.placements.push(PlacementWrite { namespace: ns, name, owner_uid: uid, spec, replaces, effect });
        }
        if pending {
            plan.pending += 1;
        }
        // Placed or not, what changed is written (a resumed TrainJob's `Suspended=False`, say);
        // the job statuses of an earlier placement no longer hold.
        plan.statuses.extend(status_write(job.tj, conds, Vec::new()));
    }
    evictions
}

/// A placed TrainJob's Placement with no member: its epoch rises, so its agent deletes the
/// JobSet and its GPUs come back.
fn withdrawal(p: &Placement, redispatch: Option<Moved>) -> PlacementWrite {
    let (namespace, name) = key(&p.metadata);
    PlacementWrite {
        namespace,
        name,
        owner_uid: p.spec.train_job_uid.clone(),
        spec: PlacementSpec {
            train_job_uid: p.spec.train_job_uid.clone(),
            cluster: None,
            epoch: p.spec.epoch + 1,
            queue: None,
            pod_sets: Vec::new(),
            backoff: p.spec.backoff.clone(),
            ranking: Vec::new(),
        },
        replaces: p.metadata.resource_version.clone(),
        effect: WriteEffect { placed: None, redispatch },
    }
}

/// Withdraws each victim's Placement (its epoch rises, so its agent deletes the JobSet) and says
/// on its TrainJob why. Victims already being evicted need nothing more.
pub(super) fn evictions(plan: &mut Plan, jobs: &[Job<'_>], evictions: &Evictions, now: &Time) {
    for job in jobs {
        let JobState::Running(a) = &job.state else { continue };
        let Some(Eviction { cluster, by, priority }) = evictions.get(&a.gang.id) else { continue };
        tracing::info!(trainjob = %a.gang.id, %cluster, preemptor = %by, "evicting");
        let (namespace, name) = key(&a.tj.metadata);
        let message = format!("evicted from cluster {cluster} for {by}");
        plan.placements.push(withdrawal(a.placement, Some(Moved { reason: Redispatch::Preempted, message })));
        let preempted = conditions::preempted(cluster, by.as_str(), *priority, now);
        // The cycle may already write this TrainJob's status (mirrored from its member).
        match plan.statuses.iter_mut().find(|s| s.namespace == namespace && s.name == name) {
            Some(w) => conditions::upsert(&mut w.conditions, preempted),
            None => {
                let mut conds = job.conditions.clone();
                conditions::upsert(&mut conds, preempted);
                plan.statuses.extend(status_write(job.tj, conds, job.jobs.clone()));
            }
        }
    }
}

/// The `ReportAccepted` condition of each member whose report was refused, or reads again.
pub(super) fn members(plan: &mut Plan, members: &Members<'_>, now: &Time) {
    let refused = members.unusable.iter().map(|u| (u.member, conditions::report_refused(&u.problem, now)));
    let accepted = members.accepted_again.iter().map(|m| (*m, conditions::report_accepted(now)));
    for (m, condition) in refused.chain(accepted) {
        let old = m.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
        let mut new = old.clone();
        conditions::upsert(&mut new, condition);
        if new != old {
            let name = m.metadata.name.clone().unwrap_or_default();
            plan.members.push(MemberConditionWrite { name, conditions: new });
        }
    }
}
