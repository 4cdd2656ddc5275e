//! Every condition the dispatcher writes, made here and nowhere else: on TrainJobs, Trainer's
//! `Suspended`, `Complete` and `Failed` (with Trainer's reasons and messages) and Stowage's own
//! `Pending` (why it waits) and `Preempted`, which are gone once its pods run, so a running
//! TrainJob's conditions read as Trainer's would; on Queues, `Active`; on MemberClusters whose
//! report was refused, `ReportAccepted`.

use api::trainer::TrainJobCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use scheduler_core::Reason;

use crate::plan;

fn condition(type_: &str, status: bool, reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// Replaces the condition of `c.type_`, keeping its transition time when its status is unchanged.
pub(super) fn upsert(conditions: &mut Vec<Condition>, mut c: Condition) {
    if let Some(old) = conditions.iter_mut().find(|o| o.type_ == c.type_) {
        if old.status == c.status {
            c.last_transition_time = old.last_transition_time.clone();
        }
        *old = c;
    } else {
        conditions.push(c);
    }
}

pub(super) fn find(conditions: &[Condition], type_: TrainJobCondition) -> Option<&Condition> {
    api::conditions::find(conditions, type_.as_str())
}

pub(super) fn find_true(conditions: &[Condition], type_: TrainJobCondition) -> Option<&Condition> {
    api::conditions::find_true(conditions, type_.as_str())
}

pub(super) fn is_true(conditions: &[Condition], type_: TrainJobCondition) -> bool {
    find_true(conditions, type_).is_some()
}

/// The member reported the JobSet complete.
pub(super) fn complete(now: &Time) -> Condition {
    let complete = TrainJobCondition::Complete.as_str();
    condition(complete, true, "AllJobsCompleted", "jobset completed successfully".into(), now)
}

/// The member reported the JobSet failed, with its message.
pub(super) fn failed(message: String, now: &Time) -> Condition {
    condition(TrainJobCondition::Failed.as_str(), true, "FailedJobs", message, now)
}

/// Drops the condition of `type_`.
pub(super) fn remove(conditions: &mut Vec<Condition>, type_: TrainJobCondition) {
    conditions.retain(|c| c.type_ != type_.as_str());
}

/// Its pods run (or ran): Stowage's own conditions go, the rest is Trainer's.
pub(super) fn started(conditions: &mut Vec<Condition>) {
    remove(conditions, TrainJobCondition::Pending);
    remove(conditions, TrainJobCondition::Preempted);
}

/// The Pending reason of a placed TrainJob whose pods do not run yet.
pub(super) const STARTING: &str = "Starting";

/// Placed on `cluster`, its pods not running yet: still waiting, now for them, with the
/// member's word on why when it has one (the gang scheduler's reason, at once).
pub(super) fn starting(cluster: &str, member_says: Option<&str>, now: &Time) -> Condition {
    let message = match member_says.filter(|m| !m.is_empty()) {
        Some(m) => format!("placed on cluster {cluster}; its pods wait there: {m}"),
        None => format!("placed on cluster {cluster}; its pods are starting"),
    };
    condition(TrainJobCondition::Pending.as_str(), true, STARTING, message, now)
}

/// `spec.suspend: true`, as Trainer says it (pkg/constants: TrainJobSuspendedReason/Message).
pub(super) fn suspended(now: &Time) -> Condition {
    condition(TrainJobCondition::Suspended.as_str(), true, "Suspended", "TrainJob is suspended".into(), now)
}

/// Resumed after a suspension, as Trainer says it.
pub(super) fn resumed(now: &Time) -> Condition {
    condition(TrainJobCondition::Suspended.as_str(), false, "Resumed", "TrainJob is resumed".into(), now)
}

/// Evicted from `cluster` for `by`. A condition of its own: the `Pending` reason moves on with
/// every cycle while it waits.
pub(super) fn preempted(cluster: &str, by: &str, priority: i32, now: &Time) -> Condition {
    let message = format!("evicted from cluster {cluster} for {by} (priority {priority})");
    condition(TrainJobCondition::Preempted.as_str(), true, "Preempted", message, now)
}

/// Why a TrainJob waits, as the cycle said it (`plan::pending_condition` words the reason).
pub(super) fn pending(reason: &Reason, conditions: &[Condition], now: &Time) -> Condition {
    let previous = conditions.iter().find(|c| c.type_ == TrainJobCondition::Pending.as_str());
    plan::pending_condition(reason, previous, now.clone())
}

/// Why a TrainJob waits, for what the cycle never saw: a reason kind of the dispatcher's own.
pub(super) fn waiting(reason: &str, message: String, now: &Time) -> Condition {
    condition(TrainJobCondition::Pending.as_str(), true, reason, message, now)
}

/// A Queue's `Active` condition: it can admit, or what in its spec stops it.
pub(super) fn queue_active(problem: Option<&str>, now: &Time) -> Condition {
    match problem {
        Some(problem) => condition("Active", false, "InvalidSpec", problem.to_string(), now),
        None => condition("Active", true, "Ready", "can admit TrainJobs".into(), now),
    }
}

/// On a MemberCluster whose report the dispatcher cannot read: left out of the snapshot.
pub(super) fn report_refused(problem: &str, now: &Time) -> Condition {
    let message = format!("{problem}; nothing new is placed here until the report reads");
    condition(super::members::REPORT_ACCEPTED, false, "InvalidReport", message, now)
}

/// On a MemberCluster whose report reads again.
pub(super) fn report_accepted(now: &Time) -> Condition {
    condition(super::members::REPORT_ACCEPTED, true, "ReportReads", "the member's report reads".into(), now)
}
