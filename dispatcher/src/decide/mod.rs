//! One dispatcher cycle's decision, pure: hub objects and the time in, what to write out. A
//! recipe of named steps, each in its own module:
//!
//! 1. [`members`]: which members are live, what their capacity reports count and where they
//!    report pods bound; [`queues`]: the Queues the cycle schedules with.
//! 2. [`intake`]: each unfinished TrainJob's [`JobState`](intake::JobState) (blocked,
//!    finished, running, assumed, waiting), its status mirrored from what its member reports.
//!    A TrainJob leaves its member when the member has been silent past the grace period, or
//!    its agent reports the gang did not start in time (Unschedulable) or its JobSet vanished
//!    (Lost): it keeps away from that member for a back-off that doubles with each repeat, and
//!    its Placement's epoch rises, so the old member's agent deletes what it made there.
//!    [`candidates`] (`--kueue multikueue`): Kueue's Workloads as MultiKueue hands them over,
//!    each [`State`](candidates::State) (to nominate, nominated, admitted, stale, invalid).
//! 3. [`schedule`]: the assumed pass (placed TrainJobs and nominated Workloads whose pods their
//!    member does not count yet take their room first, so it is counted once), then the cycle
//!    for the waiting ones, TrainJobs and Workloads together.
//! 4. [`writes`]: Placements and statuses, only what differs from what was observed; a waiting
//!    TrainJob nothing can take is withdrawn (no cluster) until something can; victims evicted.
//!    [`nominations`]: each Workload's nomination, the Events telling why one waits
//!    ([`events::of_nomination`]) and what to remember of it.
//! 5. [`queues`]: each Queue's status.
//! 6. [`figures`]: what the metrics show of the cycle (the shell sets its gauges from them).
//!
//! A TrainJob becomes a gang in [`crate::translate::trainjob`], a Workload in
//! [`crate::translate::workload`]. Every Event is an [`events::EventWrite`].
//!
//! Every condition is made in [`conditions`].

mod candidates;
mod conditions;
pub mod events;
pub mod explain;
pub mod figures;
mod intake;
mod members;
mod namespaces;
mod nominations;
mod priorities;
mod queues;
mod schedule;
pub mod whatif;
mod writes;

use std::collections::BTreeMap;
use std::time::Duration;

use api::stowage::{
    CLUSTER_LABEL, MemberCluster, Placement, PlacementKey, PlacementPhase, PlacementSpec, PlacementStatus, Queue,
    QueueStatus,
};
use api::trainer::{ClusterTrainingRuntime, JobStatus, TrainJob, TrainingRuntime};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use scheduler_core::Config;
use serde_json::Value;

pub use api::stowage::CHECKPOINT_ANNOTATION;

/// Everything a cycle reads, as observed on the hub.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub trainjobs: Vec<TrainJob>,
    pub cluster_runtimes: Vec<ClusterTrainingRuntime>,
    pub runtimes: Vec<TrainingRuntime>,
    pub members: Vec<MemberCluster>,
    pub placements: Vec<Placement>,
    pub queues: Vec<Queue>,
    /// For the Queues' namespace selectors.
    pub namespaces: Vec<Namespace>,
    /// What TrainJobs' priorities come from.
    pub priority_classes: Vec<PriorityClass>,
    /// Kueue's, where the hub serves them.
    pub workload_priority_classes: Vec<api::kueue::WorkloadPriorityClass>,
    /// Kueue's queues, where the hub serves them and Kueue does not run there (`--kueue
    /// labels`): a TrainJob's queue label may name a LocalQueue, whose ClusterQueue it uses.
    pub local_queues: Vec<api::kueue::LocalQueue>,
    pub cluster_queues: Vec<api::kueue::ClusterQueue>,
    pub resource_flavors: Vec<api::kueue::ResourceFlavor>,
    /// Kueue's Workloads, AdmissionChecks and MultiKueue objects, read with `--kueue multikueue`.
    pub workloads: Vec<api::kueue::Workload>,
    pub admission_checks: Vec<api::kueue::AdmissionCheck>,
    pub multikueue_configs: Vec<api::kueue::MultiKueueConfig>,
    pub multikueue_clusters: Vec<api::kueue::MultiKueueCluster>,
    /// The dispatcher's own memory of the Workloads it nominates (the last cycle's
    /// [`Plan::kueue_memory`]).
    pub kueue_memory: BTreeMap<WorkloadKey, Remembered>,
    /// The dispatcher's own memory, not a hub object: since when each placement reported
    /// Running has not been counted by its member (the last cycle's [`Plan::uncounted_since`]).
    /// A new leader starts with none, and so waits a whole grace period before acting.
    pub uncounted_since: BTreeMap<PlacementKey, Timestamp>,
    /// The dispatcher's own memory: the highest epoch each unfinished TrainJob (by UID) has been
    /// placed at (the last cycle's [`Plan::epochs`]). A Placement deleted by hand is made again
    /// above it, never at an epoch an agent has already seen. A new leader starts from the
    /// Placements and the members' reports alone.
    pub epochs: BTreeMap<String, i64>,
    /// The dispatcher's own memory: each unfinished TrainJob's gang as the last cycle
    /// translated it, by TrainJob UID (the last cycle's [`Plan::translations`]).
    pub translations: BTreeMap<String, Translation>,
}

/// A TrainJob's gang as a cycle translated it, and the versions it was translated from: the
/// next cycle translates again only a TrainJob or runtime written since. A translation depends
/// on the TrainJob and its runtime alone; rendering every unfinished TrainJob's pod sets each
/// cycle, its runtime copied first, was 4 % of the controllers' CPU in a burst of 500, growing
/// with the jobs and the cycles (issue #39).
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    /// The TrainJob's resourceVersion, its runtime's UID and resourceVersion; `None` when one of
    /// them has none (an object never stored), which is never reused.
    from: Option<(String, String, String)>,
    gang: std::sync::Arc<Result<(scheduler_core::Gang, crate::translate::PrioritySource), crate::translate::GangError>>,
}

/// A Workload's namespace and name.
pub type WorkloadKey = (String, String);

/// What the dispatcher remembers of a Workload between cycles: not a hub object, so a new
/// leader starts with none (a nomination it finds gets a whole timeout from then, and the
/// reason it waits is told once more).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Remembered {
    /// The cluster it nominated, and since when.
    pub nominated: Option<(String, Timestamp)>,
    /// What its last Event said (reason), so that each is told once.
    pub told: Option<String>,
}

/// The dispatcher's timing knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// A member whose agent has not reported for this long is silent: nothing new goes there
    /// and its unfinished TrainJobs are placed elsewhere.
    pub member_grace: Duration,
    /// How long a TrainJob keeps away from a member it could not run on, the first time; it
    /// doubles with each repeat on the same member, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// What Kueue does on the hub, and so what Stowage leaves to it.
    pub kueue: KueueMode,
    /// A Workload nominated to a member that Kueue has not admitted there for this long is
    /// nominated again.
    pub nomination_timeout: Duration,
    /// A Workload Kueue evicted that still holds its quota this long after, waiting on a
    /// TrainJob status MultiKueue left stale, has that status cleared
    /// ([`workloads`]'s `stale_owner`).
    pub eviction_settle: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            member_grace: Duration::from_secs(120),
            backoff: Duration::from_secs(60),
            max_backoff: Duration::from_secs(30 * 60),
            kueue: KueueMode::Labels,
            nomination_timeout: Duration::from_secs(300),
            eviction_settle: Duration::from_secs(60),
        }
    }
}

/// Kueue's part on the hub (`--kueue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KueueMode {
    /// No Kueue on the hub: Stowage queues every TrainJob, reading Kueue's labels.
    #[default]
    Labels,
    /// Kueue queues the TrainJobs that carry its queue label, and Stowage is MultiKueue's
    /// external dispatcher for their Workloads: it nominates, Kueue admits.
    MultiKueue,
}

/// One Placement to write.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementWrite {
    pub namespace: String,
    pub name: String,
    pub owner_uid: String,
    pub spec: PlacementSpec,
    /// The resourceVersion of the Placement this one replaces; `None` creates it. Writes are
    /// conditional so that two dispatchers (an old and a new leader) can never both win.
    pub replaces: Option<String>,
    /// What the write means to the metrics: counted once it is made (a write that loses its
    /// race is decided again, and counted then).
    pub effect: WriteEffect,
}

/// What a Placement write does, as the metrics count it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WriteEffect {
    /// Placed on a member.
    pub placed: Option<Placed>,
    /// Taken off the member it was on, and why.
    pub redispatch: Option<Moved>,
}

/// Why a TrainJob leaves its member: the closed reason, and the sentence its Event says.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    pub reason: Redispatch,
    pub message: String,
}

/// A TrainJob placed on a member.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub queue: String,
    pub cluster: String,
    /// The narrowest topology level holding the whole gang; `None`: only the cluster does.
    pub locality: Option<scheduler_core::Level>,
    /// From the TrainJob's creation to this placement: its first placement only (a TrainJob
    /// placed again waited for other reasons than admission).
    pub waited: Option<Duration>,
}

/// Why a placed TrainJob is taken off its member: the closed set the redispatch counter and
/// the back-off list name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Redispatch {
    /// Its agent reports the gang did not start there in time.
    Unschedulable,
    /// Its agent reports its JobSet vanished there before it finished.
    Lost,
    /// Its member stopped reporting for the grace period.
    MemberSilent,
    /// Its member's report has not been readable for the grace period.
    MemberUnusable,
    /// Its Placement's `spec.cluster` was edited by hand: placed again at a new epoch.
    PlacementEdited,
    /// Reported Running, and not counted by its member for the grace period: placed again on
    /// that member at a new epoch.
    Uncounted,
    /// Evicted for a TrainJob of higher priority.
    Preempted,
}

impl Redispatch {
    pub const ALL: [Redispatch; 7] = [
        Redispatch::Unschedulable,
        Redispatch::Lost,
        Redispatch::MemberSilent,
        Redispatch::MemberUnusable,
        Redispatch::PlacementEdited,
        Redispatch::Uncounted,
        Redispatch::Preempted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Redispatch::Unschedulable => "Unschedulable",
            Redispatch::Lost => "Lost",
            Redispatch::MemberSilent => "MemberSilent",
            Redispatch::MemberUnusable => "MemberUnusable",
            Redispatch::PlacementEdited => "PlacementEdited",
            Redispatch::Uncounted => "Uncounted",
            Redispatch::Preempted => "Preempted",
        }
    }
}

impl PlacementWrite {
    /// The status a withdrawn Placement (no cluster) is given, its last member's report
    /// cleared: `Pending` at its epoch, saying why it left; `None` for a placed one, whose
    /// agent writes its status.
    pub fn withdrawn_status(&self) -> Option<PlacementStatus> {
        if self.spec.cluster.is_some() {
            return None;
        }
        let why = self.effect.redispatch.as_ref().map_or_else(
            || "the TrainJob's conditions say why".to_string(),
            |m| format!("{}: {}", m.reason.as_str(), m.message),
        );
        Some(PlacementStatus {
            phase: PlacementPhase::Pending,
            observed_epoch: self.spec.epoch,
            message: Some(format!("withdrawn, on no member: {why}")),
            ..PlacementStatus::default()
        })
    }

    /// The Placement as written: labelled with its cluster (what the agents watch by), owned
    /// by its TrainJob.
    pub fn object(&self) -> Placement {
        let mut p = Placement::new(&self.name, self.spec.clone());
        p.metadata.namespace = Some(self.namespace.clone());
        p.metadata.resource_version = self.replaces.clone();
        p.metadata.labels = self.spec.cluster.clone().map(|c| [(CLUSTER_LABEL.to_string(), c)].into());
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: TrainJob::api_version(&()).into_owned(),
            kind: "TrainJob".into(),
            name: self.name.clone(),
            uid: self.owner_uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        p
    }
}

/// One TrainJob status to write.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    pub namespace: String,
    pub name: String,
    pub conditions: Vec<Condition>,
    pub jobs: Vec<JobStatus>,
    /// What the change stands for, recorded once it is written.
    pub events: Vec<events::EventWrite>,
}

/// One Queue status to write.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStatusWrite {
    pub name: String,
    pub status: QueueStatus,
}

/// What a cycle writes: only what differs from what it observed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub placements: Vec<PlacementWrite>,
    pub statuses: Vec<StatusWrite>,
    pub queues: Vec<QueueStatusWrite>,
    /// TrainJobs still waiting for a placement after this cycle.
    pub pending: usize,
    /// What the batch optimiser did, when it ran (`--batch-window`).
    pub batch: Option<scheduler_core::BatchReport>,
    /// MemberClusters whose `ReportAccepted` condition changes.
    pub members: Vec<MemberConditionWrite>,
    /// For the next cycle's [`Observed::uncounted_since`].
    pub uncounted_since: BTreeMap<PlacementKey, Timestamp>,
    /// For the next cycle's [`Observed::epochs`].
    pub epochs: BTreeMap<String, i64>,
    /// For the next cycle's [`Observed::translations`]: the unfinished TrainJobs' alone.
    pub translations: BTreeMap<String, Translation>,
    /// What the metrics show of this cycle.
    pub figures: figures::Figures,
    /// Workloads' nominations to write (`--kueue multikueue`).
    pub nominations: Vec<NominationWrite>,
    /// Events about Workloads and their TrainJobs: why one waits, where it was nominated.
    pub workload_events: Vec<events::EventWrite>,
    /// For the next cycle's [`Observed::kueue_memory`].
    pub kueue_memory: BTreeMap<WorkloadKey, Remembered>,
}

/// One nomination to write.
#[derive(Debug, Clone, PartialEq)]
pub struct NominationWrite {
    pub namespace: String,
    pub name: String,
    /// Empty: the nomination is withdrawn.
    pub clusters: Vec<String>,
    /// What is applied to its status subresource as `kueue-admission` (Kueue's whole admission status, the list changed).
    pub apply: Value,
}

/// One MemberCluster's conditions to write (the dispatcher owns `status.conditions` there; the
/// agent writes the rest of the status).
#[derive(Debug, Clone, PartialEq)]
pub struct MemberConditionWrite {
    pub name: String,
    pub conditions: Vec<Condition>,
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// A queue's TrainJobs as its status counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Count {
    /// Waiting: pending, or blocked in the queue they name.
    pending: u32,
    /// Placed and unfinished.
    admitted: u32,
}

/// Each queue's [`Count`], by name.
type Tally = BTreeMap<String, Count>;

/// The members, queues and unfinished TrainJobs a cycle decides over (steps 1 and 2).
#[derive(Debug)]
struct Observation<'a> {
    members: members::Members<'a>,
    queues: queues::QueueSet,
    jobs: Vec<intake::Job<'a>>,
    /// Kueue's Workloads the cycle acts on (`--kueue multikueue`).
    candidates: Vec<candidates::Candidate<'a>>,
}

fn observe<'a>(o: &'a Observed, settings: &Settings, now: &Time) -> Observation<'a> {
    let members = members::Members::observe(&o.members, settings, now.0);
    let queues = queues::read(o);
    let namespaces = namespaces::labels(&o.namespaces);
    let priorities = priorities::Priorities::read(&o.priority_classes, &o.workload_priority_classes);
    let placements: BTreeMap<(String, String), &Placement> =
        o.placements.iter().map(|p| (key(&p.metadata), p)).collect();
    let jobs: Vec<intake::Job<'_>> = o
        .trainjobs
        .iter()
        .filter(|tj| !intake::finished(tj) && !intake::managed_elsewhere(tj, settings.kueue))
        .map(|tj| {
            let scope =
                intake::Scope { members: &members, queues: &queues, namespaces: &namespaces, priorities: &priorities };
            intake::job(o, &scope, tj, placements.get(&key(&tj.metadata)).copied(), settings, now)
        })
        .collect();
    let candidates = candidates::read(o, &members, settings, now.0);
    Observation { members, queues, jobs, candidates }
}

pub fn decide(o: &Observed, config: &Config, settings: &Settings, now: Time) -> Plan {
    let Observation { members, queues, jobs, candidates } = observe(o, settings, &now);
    let mut plan =
        Plan { uncounted_since: jobs.iter().filter_map(|j| j.uncounted.clone()).collect(), ..Plan::default() };
    writes::members(&mut plan, &members, &now);
    let mut tally = Tally::new();
    writes::settled(&mut plan, &jobs, &mut tally);
    let now_ms = now.0.as_millisecond().max(0) as u64;
    let schedule = schedule::run(&members, &queues.queues, &jobs, &candidates, config, now_ms);
    let evictions = writes::placements(&mut plan, &jobs, &schedule, &queues, &now, &mut tally);
    nominations::writes(&mut plan, o, &candidates, &schedule, now.0);
    writes::evictions(&mut plan, &jobs, &evictions, &now);
    plan.queues = queues::statuses(o, &queues, &tally, &now);
    plan.figures = figures::Figures::of(o, &members, &queues, &jobs, &plan, now.0);
    status_events(o, &mut plan);
    let short_first = match schedule {
        schedule::Schedule::Decided { batch, short_first, .. } => {
            plan.batch = batch;
            short_first
        }
        // No cycle ran: the order one would apply to what waits.
        _ => schedule::short_first_for(&jobs, config, now_ms),
    };
    plan.figures.short_first_cap_s = short_first.map_or(0, |s| s.cap_ms / 1000);
    plan.epochs = epochs(o, &jobs);
    plan.translations = jobs.iter().filter_map(|j| j.translated.clone()).collect();
    plan
}

/// The highest epoch each unfinished TrainJob has been placed at, remembered or seen. Not what
/// this cycle writes: a write that fails must not raise it (the next cycle would place above
/// an epoch no Placement ever had, and again after each failure).
fn epochs(o: &Observed, jobs: &[intake::Job<'_>]) -> BTreeMap<String, i64> {
    let live: std::collections::BTreeSet<&str> = jobs.iter().filter_map(|j| j.tj.metadata.uid.as_deref()).collect();
    let seen = o.placements.iter().map(|p| (&p.spec.train_job_uid, p.spec.epoch));
    let mut epochs: BTreeMap<String, i64> = BTreeMap::new();
    for (uid, epoch) in seen.chain(o.epochs.iter().map(|(uid, e)| (uid, *e))) {
        if live.contains(uid.as_str()) {
            let e = epochs.entry(uid.clone()).or_insert(epoch);
            *e = (*e).max(epoch);
        }
    }
    epochs
}

/// Each status write's Events: what its change stands for.
fn status_events(o: &Observed, plan: &mut Plan) {
    let placed: std::collections::BTreeSet<(String, String)> = o
        .placements
        .iter()
        .filter(|p| p.spec.cluster.is_some())
        .map(|p| key(&p.metadata))
        .chain(
            plan.placements.iter().filter(|w| w.spec.cluster.is_some()).map(|w| (w.namespace.clone(), w.name.clone())),
        )
        .collect();
    // Placed by this plan: their Placement writes carry the Placed Event.
    let placed_now: std::collections::BTreeSet<(&str, &str)> =
        plan.placements.iter().filter(|w| w.effect.placed.is_some()).map(|w| (&*w.namespace, &*w.name)).collect();
    let trainjobs: BTreeMap<(String, String), &TrainJob> = o.trainjobs.iter().map(|t| (key(&t.metadata), t)).collect();
    for s in &mut plan.statuses {
        let k = (s.namespace.clone(), s.name.clone());
        let Some(tj) = trainjobs.get(&k) else { continue };
        let old = tj.status.as_ref().map(|st| st.conditions.as_slice()).unwrap_or_default();
        let uid = tj.metadata.uid.as_deref().unwrap_or_default();
        let about = events::About { kind: events::Kind::TrainJob, namespace: &s.namespace, name: &s.name, uid };
        let placed = match (placed_now.contains(&(&*s.namespace, &*s.name)), placed.contains(&k)) {
            (true, _) => events::Placed::Now,
            (false, true) => events::Placed::Earlier,
            (false, false) => events::Placed::Nowhere,
        };
        s.events = events::of_status(about, old, &s.conditions, placed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn queue(yaml: &str) -> Queue {
        input_limits::yaml::from_str(&format!("apiVersion: stowage.dev/v1alpha1\nkind: Queue\n{yaml}")).expect("queue")
    }

    #[test]
    fn a_queue_that_cannot_be_read_is_inactive_with_the_field_named_and_the_others_stay() {
        let o = Observed {
            queues: vec![
                queue(
                    "metadata: {name: ok}\nspec:\n  quotas:\n  - {flavor: h100, resource: nvidia.com/gpu, nominalQuota: '16'}\n",
                ),
                queue(
                    "metadata: {name: typo}\nspec:\n  quotas:\n  - {flavor: h100, resource: nvidia.com/gpu, nominalQuota: 'lots'}\n",
                ),
                queue(
                    "metadata: {name: lends-too-much}\nspec:\n  cohort: c\n  quotas:\n  - {flavor: h100, resource: nvidia.com/gpu, nominalQuota: '8', lendingLimit: '9'}\n",
                ),
            ],
            ..Observed::default()
        };
        let set = queues::read(&o);
        assert!(set.queues.id("ok").is_some() && set.queues.id("default").is_some());
        assert_eq!(set.inactive["typo"], "spec.quotas[0].nominalQuota: \"lots\" is not a non-negative quantity");
        assert!(set.inactive["lends-too-much"].contains("lendingLimit 9 exceeds nominalQuota 8"), "{:?}", set.inactive);
        let now = Time(Timestamp::UNIX_EPOCH);
        let writes =
            queues::statuses(&o, &set, &BTreeMap::from([("ok".to_string(), Count { pending: 2, admitted: 3 })]), &now);
        let ok = writes.iter().find(|w| w.name == "ok").expect("written");
        assert_eq!((ok.status.pending, ok.status.admitted, ok.status.conditions[0].status.as_str()), (2, 3, "True"));
        // What was observed already is not written again.
        let mut seen = o.clone();
        seen.queues[0].status = Some(ok.status.clone());
        let again = queues::statuses(
            &seen,
            &set,
            &BTreeMap::from([("ok".to_string(), Count { pending: 2, admitted: 3 })]),
            &now,
        );
        assert!(again.iter().all(|w| w.name != "ok"));
    }
}
