//! What the metrics show of a cycle, derived from what it observed and decided: TrainJobs by
//! queue and state, why the pending ones wait, GPUs per member and per queue, heartbeat ages.
//! Pure, like the rest of the cycle; the shell only copies these into its gauges. Every label
//! comes from a closed set or from an admin-made object (a Queue, a MemberCluster, a flavor a
//! member reports), never from a TrainJob, so the series stay few.

use std::collections::BTreeMap;

use api::stowage::{Placement, PodSetPlacement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use scheduler_core::{Gang, Resource};

use super::intake::{Job, JobState};
use super::members::Members;
use super::queues::QueueSet;
use super::{Observed, Plan, key};
use api::trainer::TrainJobCondition;

/// Pending reasons no amount of waiting ends (the TrainJob's owner must change it): left out of
/// a queue's oldest wait, so `StowageTrainJobPendingTooLong` is about capacity, not one job
/// that can never run.
pub const WAITING_CANNOT_END: [&str; 2] = ["NeverFits", "Invalid"];

/// A TrainJob's state as `stowage_trainjobs` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JobPhase {
    /// Waiting for a placement (or unable to have one: its `Pending` condition says why).
    Pending,
    /// Placed; its member does not count its pods yet.
    Placed,
    /// Its member counts its pods.
    Running,
    /// `spec.suspend: true`.
    Suspended,
}

impl JobPhase {
    pub const ALL: [JobPhase; 4] = [JobPhase::Pending, JobPhase::Placed, JobPhase::Running, JobPhase::Suspended];

    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Pending => "pending",
            JobPhase::Placed => "placed",
            JobPhase::Running => "running",
            JobPhase::Suspended => "suspended",
        }
    }
}

/// One member's GPUs of one flavor, as its last accepted report counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterGpus {
    pub allocatable: u64,
    pub used: u64,
}

/// One queue's GPUs of one flavor it has quota for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueGpus {
    pub nominal: u64,
    /// Held by its placed TrainJobs, those placed this cycle included.
    pub used: u64,
    /// Used beyond its nominal quota: taken from its cohort.
    pub borrowed: u64,
    /// Of its unused nominal quota, what its cohort's queues borrow (see [`lend`]).
    pub lent: u64,
}

/// The label a TrainJob's queue is counted under: its name when the Queue exists (active or
/// not), else `unknown`, so a label a user makes up cannot add series.
pub const UNKNOWN_QUEUE: &str = "unknown";

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Unfinished TrainJobs by queue and state.
    pub trainjobs: BTreeMap<(String, JobPhase), u64>,
    /// Pending TrainJobs by queue and the reason of their `Pending` condition.
    pub pending: BTreeMap<(String, String), u64>,
    /// Per live member and GPU flavor.
    pub cluster_gpus: BTreeMap<(String, String), ClusterGpus>,
    /// Per active Queue and GPU flavor it has quota for.
    pub queue_gpus: BTreeMap<(String, String), QueueGpus>,
    /// Per MemberCluster with a readable heartbeat: seconds since it.
    pub heartbeat_age: BTreeMap<String, f64>,
    /// Per queue: seconds since the oldest of its pending TrainJobs was created, of those whose
    /// wait waiting can end (not [`WAITING_CANNOT_END`]); 0 for a Queue with none.
    pub oldest_pending: BTreeMap<String, f64>,
    /// The shorter-first cap the cycle ordered by, in seconds, as grown with the queue
    /// (`ShortFirst::in_force`); 0: creation order alone (`--short-first none`).
    pub short_first_cap_s: u64,
}

impl Figures {
    pub(super) fn of(
        o: &Observed,
        members: &Members<'_>,
        queues: &QueueSet,
        jobs: &[Job<'_>],
        plan: &Plan,
        now: Timestamp,
    ) -> Figures {
        let queue_label = |name: &str| {
            if queues.queues.id(name).is_some() || queues.inactive.contains_key(name) {
                name.to_string()
            } else {
                UNKNOWN_QUEUE.to_string()
            }
        };
        let placed_now: BTreeMap<(String, String), &[PodSetPlacement]> = plan
            .placements
            .iter()
            .filter(|w| w.spec.cluster.is_some())
            .map(|w| ((w.namespace.clone(), w.name.clone()), w.spec.pod_sets.as_slice()))
            .collect();
        let written: BTreeMap<(String, String), &[Condition]> =
            plan.statuses.iter().map(|s| ((s.namespace.clone(), s.name.clone()), s.conditions.as_slice())).collect();
        let placements: BTreeMap<(String, String), &Placement> =
            o.placements.iter().map(|p| (key(&p.metadata), p)).collect();

        let mut f = Figures::default();
        let mut used: BTreeMap<(String, String), u64> = BTreeMap::new();
        for job in jobs {
            let k = key(&job.tj.metadata);
            let (queue, gang, phase) = match &job.state {
                JobState::Finished => continue,
                JobState::Suspended(_) => (crate::translate::queue_name(job.tj), None, JobPhase::Suspended),
                JobState::Blocked => (crate::translate::queue_name(job.tj), None, JobPhase::Pending),
                JobState::Running(a) => (a.gang.queue.clone(), Some(&a.gang), JobPhase::Running),
                JobState::Assumed(g) => (g.queue.clone(), Some(g), JobPhase::Placed),
                JobState::Waiting(w) if placed_now.contains_key(&k) => {
                    (w.gang.queue.clone(), Some(&w.gang), JobPhase::Placed)
                }
                JobState::Waiting(w) => (w.gang.queue.clone(), None, JobPhase::Pending),
            };
            let queue = queue_label(&queue);
            *f.trainjobs.entry((queue.clone(), phase)).or_default() += 1;
            if phase == JobPhase::Pending {
                let conditions = written.get(&k).copied().or(job.tj.status.as_ref().map(|s| s.conditions.as_slice()));
                let reason = super::conditions::find_true(conditions.unwrap_or_default(), TrainJobCondition::Pending)
                    .map_or("Unknown", |c| c.reason.as_str());
                *f.pending.entry((queue.clone(), reason.to_string())).or_default() += 1;
                // Its queue's oldest wait is what waiting can end: a job that can never fit or
                // is invalid waits for its owner, not for capacity, and shows by its reason.
                let waits_for_capacity = !WAITING_CANNOT_END.contains(&reason);
                if let Some(created) = job.tj.metadata.creation_timestamp.as_ref().filter(|_| waits_for_capacity) {
                    let age = now.duration_since(created.0).as_secs_f64().max(0.0);
                    let oldest = f.oldest_pending.entry(queue.clone()).or_default();
                    *oldest = oldest.max(age);
                }
            }
            // Where it holds GPUs: what was placed this cycle, else its Placement.
            let held = placed_now.get(&k).copied().or_else(|| placements.get(&k).map(|p| p.spec.pod_sets.as_slice()));
            if let (Some(gang), Some(held)) = (gang, held) {
                for (flavor, gpus) in gpus_by_flavor(gang, held) {
                    *used.entry((queue.clone(), flavor)).or_default() += gpus;
                }
            }
        }
        for spec in queues.queues.specs() {
            // Every Queue has its series, at 0 when nothing of it is unfinished: the dashboard's
            // queue list (label_values(stowage_trainjobs, queue)) names idle queues too.
            f.trainjobs.entry((spec.name.clone(), JobPhase::Pending)).or_default();
            f.oldest_pending.entry(spec.name.clone()).or_default();
            for q in spec.quotas.iter().filter(|q| q.resource == Resource::Gpu) {
                let key = (spec.name.clone(), q.flavor.clone());
                let used = used.get(&key).copied().unwrap_or(0);
                let gpus = QueueGpus { nominal: q.nominal, used, borrowed: used.saturating_sub(q.nominal), lent: 0 };
                f.queue_gpus.insert(key, gpus);
            }
        }
        lend(&mut f.queue_gpus, queues);
        for m in &members.live {
            let name = m.metadata.name.clone().unwrap_or_default();
            for d in m.status.iter().flat_map(|s| &s.domains) {
                let c = f.cluster_gpus.entry((name.clone(), d.flavor.clone())).or_default();
                c.allocatable = c.allocatable.saturating_add(d.allocatable_gpus);
                c.used = c.used.saturating_add(d.allocatable_gpus.saturating_sub(d.free_gpus));
            }
        }
        for m in &o.members {
            let heartbeat = m.status.as_ref().and_then(|s| s.heartbeat_time.as_deref());
            if let (Some(name), Some(t)) = (&m.metadata.name, heartbeat.and_then(|t| t.parse::<Timestamp>().ok())) {
                f.heartbeat_age.insert(name.clone(), now.duration_since(t).as_secs_f64().max(0.0));
            }
        }
        f
    }
}

/// GPUs a placed gang holds, per flavor: each pod set's pods times its GPUs per pod, under the
/// flavor it was placed on.
fn gpus_by_flavor(gang: &Gang, placed: &[PodSetPlacement]) -> Vec<(String, u64)> {
    gang.pod_sets
        .iter()
        .filter(|ps| ps.shape.gpus > 0)
        .filter_map(|ps| {
            let flavor = placed.iter().find(|p| *p.name == *ps.name)?.flavor.clone()?;
            Some((flavor, u64::from(ps.pods) * u64::from(ps.shape.gpus)))
        })
        .collect()
}

/// Who lends what a cohort borrows: what its queues use beyond their nominal quota of a flavor
/// comes out of the others' unused lendable quota, taken from the queues in name order. Kueue
/// does not say which queue lent; this is a deterministic account that sums to what is
/// borrowed and never exceeds what a queue may lend.
fn lend(gpus: &mut BTreeMap<(String, String), QueueGpus>, queues: &QueueSet) {
    let cohort_of = |queue: &str| queues.queues.id(queue).and_then(|id| queues.queues.spec(id).cohort.clone());
    let lendable = |queue: &str, flavor: &str| {
        let id = queues.queues.id(queue)?;
        let q = queues.queues.spec(id).quotas.iter().find(|q| q.resource == Resource::Gpu && q.flavor == flavor)?;
        Some(q.lending_limit.unwrap_or(q.nominal).min(q.nominal))
    };
    let mut borrowed: BTreeMap<(String, String), u64> = BTreeMap::new();
    for ((queue, flavor), g) in gpus.iter() {
        if let Some(cohort) = cohort_of(queue) {
            *borrowed.entry((cohort, flavor.clone())).or_default() += g.borrowed;
        }
    }
    for ((queue, flavor), g) in gpus.iter_mut() {
        let Some(cohort) = cohort_of(queue) else { continue };
        let Some(left) = borrowed.get_mut(&(cohort, flavor.clone())) else { continue };
        let unused = lendable(queue, flavor).unwrap_or(0).min(g.nominal.saturating_sub(g.used));
        g.lent = unused.min(*left);
        *left -= g.lent;
    }
}
