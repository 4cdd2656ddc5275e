//! Every condition the dispatcher writes, made here and nowhere else: on TrainJobs, Trainer's
//! `Complete` and `Failed` (with Trainer's reasons) and Stowage's own `Pending` (why it waits)
//! and `Preempted`; on Queues, `Active`.

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

pub(super) fn is_true(conditions: &[Condition], type_: TrainJobCondition) -> bool {
    api::jobset::is_true(conditions, type_.as_str())
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

/// Placed and started on `cluster`: no longer waiting.
pub(super) fn placed(cluster: &str, now: &Time) -> Condition {
    let pending = TrainJobCondition::Pending.as_str();
    condition(pending, false, "Placed", format!("placed on cluster {cluster}"), now)
}

/// A TrainJob that was evicted is placed again on `cluster`.
pub(super) fn placed_again(cluster: &str, now: &Time) -> Condition {
    let preempted = TrainJobCondition::Preempted.as_str();
    condition(preempted, false, "Placed", format!("placed again on cluster {cluster}"), now)
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
