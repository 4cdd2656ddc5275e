//! One dispatcher cycle's decision, pure: hub objects and the time in, what to write out.
//!
//! - TrainJobs placed but whose pods their member's capacity report does not count yet
//!   (`status.counted`) are re-placed first on their own cluster, so the capacity they will take
//!   is counted (assumed) once, before anything new is placed.
//! - A TrainJob leaves its member when the member has been silent past the grace period, or its
//!   agent reports the gang did not start in time (Unschedulable) or its JobSet vanished (Lost).
//!   It keeps away from that member for a back-off that doubles with each repeat, and its
//!   Placement's epoch rises, so the old member's agent deletes what it made there. If nothing
//!   else can take it yet, the Placement is withdrawn (no cluster) until something can.
//! - Only what differs from what was observed is written.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::stowage::{
    ClusterBackoff, MemberCluster, Placement, PlacementPhase, PlacementSpec, PlacementStatus, Queue, QueueStatus,
};
use api::trainer::{ClusterTrainingRuntime, JobStatus, Runtime, TrainJob, TrainingRuntime};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use scheduler_core::{
    ClusterFilter, Config, Decision, Gang, QueueSpec, Queues, QuotaUsage, Reason, Running, Snapshot, cycle,
};

use crate::{plan, translate};

/// Everything a cycle reads, as observed on the hub.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub trainjobs: Vec<TrainJob>,
    pub cluster_runtimes: Vec<ClusterTrainingRuntime>,
    pub runtimes: Vec<TrainingRuntime>,
    pub members: Vec<MemberCluster>,
    pub placements: Vec<Placement>,
    pub queues: Vec<Queue>,
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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            member_grace: Duration::from_secs(120),
            backoff: Duration::from_secs(60),
            max_backoff: Duration::from_secs(30 * 60),
        }
    }
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
}

/// One TrainJob status to write.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    pub namespace: String,
    pub name: String,
    pub conditions: Vec<Condition>,
    pub jobs: Vec<JobStatus>,
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

/// The queues a cycle schedules with, and the Queue objects it cannot use, each with what is
/// wrong naming the field. An invalid Queue admits nothing (as Kueue's inactive ClusterQueue):
/// dropping the entry it cannot read would silently widen the queue's quota.
struct QueueSet {
    queues: Queues,
    inactive: BTreeMap<String, String>,
}

fn queues(o: &Observed) -> QueueSet {
    let mut specs: Vec<QueueSpec> = Vec::new();
    let mut inactive = BTreeMap::new();
    for q in &o.queues {
        let name = q.metadata.name.clone().unwrap_or_default();
        // Problems only a queue's own spec has (a quota defined twice, lending above nominal)
        // are checked on it alone, so one bad Queue does not take the others down.
        match queue_spec(q).and_then(|spec| Queues::new(vec![spec.clone()]).map(|_| spec).map_err(|e| e.to_string())) {
            Ok(spec) => specs.push(spec),
            Err(problem) => {
                inactive.insert(name, problem);
            }
        }
    }
    if !specs.iter().any(|q| q.name == translate::DEFAULT_QUEUE) && !inactive.contains_key(translate::DEFAULT_QUEUE) {
        specs.push(QueueSpec::unlimited(translate::DEFAULT_QUEUE));
    }
    // Each spec is valid alone and names are unique (object names), so this cannot fail.
    let queues = Queues::new(specs).unwrap_or_else(|_| {
        Queues::new(vec![QueueSpec::unlimited(translate::DEFAULT_QUEUE)])
            .unwrap_or_else(|_| unreachable!("one queue is valid"))
    });
    QueueSet { queues, inactive }
}

fn queue_spec(q: &Queue) -> Result<QueueSpec, String> {
    let quotas = q
        .spec
        .quotas
        .iter()
        .enumerate()
        .map(|(i, quota)| {
            let amount = |field: &str, s: &str| {
                api::quantity::Milli::parse(s)
                    .ok()
                    .map(|m| m.ceil_units())
                    .filter(|&v| v >= 0)
                    .map(|v| v as u64)
                    .ok_or_else(|| format!("spec.quotas[{i}].{field}: {s:?} is not a non-negative quantity"))
            };
            let resource = match quota.resource.as_str() {
                "nvidia.com/gpu" => scheduler_core::Resource::Gpu,
                "cpu" => scheduler_core::Resource::CpuMilli,
                "memory" => scheduler_core::Resource::MemoryMib,
                other => {
                    return Err(format!(
                        "spec.quotas[{i}].resource: {other:?} is not one of nvidia.com/gpu, cpu, memory"
                    ));
                }
            };
            let optional = |field: &str, v: &Option<String>| v.as_deref().map(|s| amount(field, s)).transpose();
            Ok(scheduler_core::Quota {
                flavor: quota.flavor.clone(),
                resource,
                nominal: amount("nominalQuota", &quota.nominal_quota)?,
                borrowing_limit: optional("borrowingLimit", &quota.borrowing_limit)?,
                lending_limit: optional("lendingLimit", &quota.lending_limit)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(QueueSpec {
        name: q.metadata.name.clone().unwrap_or_default(),
        cohort: q.spec.cohort.clone(),
        strategy: match q.spec.queueing_strategy {
            api::stowage::QueueingStrategy::StrictFIFO => scheduler_core::QueueingStrategy::StrictFifo,
            api::stowage::QueueingStrategy::BestEffortFIFO => scheduler_core::QueueingStrategy::BestEffortFifo,
        },
        weight: q.spec.weight,
        preemption: q.spec.preemption.as_ref().map(queue_preemption).unwrap_or_default(),
        quotas,
    })
}

fn queue_preemption(p: &api::stowage::QueuePreemption) -> scheduler_core::QueuePreemption {
    use api::stowage::{BorrowPolicy, ReclaimWithinCohort as R, WithinClusterQueue as W};
    use scheduler_core::{BorrowWithinCohort, ReclaimWithinCohort, WithinQueue};
    scheduler_core::QueuePreemption {
        within_queue: match p.within_cluster_queue {
            W::Never => WithinQueue::Never,
            W::LowerPriority => WithinQueue::LowerPriority,
            W::LowerOrNewerEqualPriority => WithinQueue::LowerOrNewerEqualPriority,
        },
        reclaim_within_cohort: match p.reclaim_within_cohort {
            R::Never => ReclaimWithinCohort::Never,
            R::LowerPriority => ReclaimWithinCohort::LowerPriority,
            R::Any => ReclaimWithinCohort::Any,
        },
        borrow_within_cohort: match &p.borrow_within_cohort {
            Some(b) if b.policy == BorrowPolicy::LowerPriority => {
                BorrowWithinCohort::LowerPriority { max_priority_threshold: b.max_priority_threshold }
            }
            _ => BorrowWithinCohort::Never,
        },
    }
}

/// A Queue's status as this cycle sees it: whether it can admit, and its TrainJobs waiting and
/// placed. Written only when it differs from what was observed.
fn queue_statuses(
    o: &Observed,
    set: &QueueSet,
    counts: &BTreeMap<String, (u32, u32)>,
    now: &Time,
) -> Vec<QueueStatusWrite> {
    o.queues
        .iter()
        .filter_map(|q| {
            let name = q.metadata.name.clone()?;
            let observed = q.status.clone().unwrap_or_default();
            let (pending, admitted) = counts.get(&name).copied().unwrap_or_default();
            let active = match set.inactive.get(&name) {
                Some(problem) => condition("Active", "False", "InvalidSpec", problem.clone(), now),
                None => condition("Active", "True", "Ready", "can admit TrainJobs".into(), now),
            };
            let mut conditions = observed.conditions.clone();
            upsert(&mut conditions, active);
            let status = QueueStatus { pending, admitted, conditions };
            (status != observed).then_some(QueueStatusWrite { name, status })
        })
        .collect()
}

/// When a member last reported, if it ever did.
fn heartbeat(m: &MemberCluster) -> Option<Timestamp> {
    m.status.as_ref()?.heartbeat_time.as_deref()?.parse().ok()
}

/// Whether `member` has reported within the grace period.
fn is_live(m: &MemberCluster, settings: &Settings, now: Timestamp) -> bool {
    heartbeat(m).is_some_and(|t| now.duration_since(t).unsigned_abs() <= settings.member_grace)
}

/// The status a member reported for the placement's current epoch (older epochs' reports say
/// nothing about where it runs now).
fn current_status(p: &Placement) -> Option<&PlacementStatus> {
    p.status.as_ref().filter(|s| s.observed_epoch == p.spec.epoch)
}

/// Why a placed TrainJob must leave its member, if it must.
fn withdrawal(p: &Placement, live: &BTreeSet<&str>) -> Option<(&'static str, String)> {
    let cluster = p.spec.cluster.as_deref()?;
    let status = current_status(p);
    match status.map(|s| s.phase) {
        Some(PlacementPhase::Succeeded | PlacementPhase::Failed) => None,
        Some(PlacementPhase::Unschedulable) => Some((
            "Unschedulable",
            status.and_then(|s| s.message.clone()).unwrap_or_else(|| "the gang did not start in time".into()),
        )),
        Some(PlacementPhase::Lost) => {
            Some(("Lost", status.and_then(|s| s.message.clone()).unwrap_or_else(|| "the JobSet disappeared".into())))
        }
        _ if !live.contains(cluster) => Some(("MemberSilent", format!("member {cluster} stopped reporting"))),
        _ => None,
    }
}

/// The back-off list after leaving `cluster`: the delay doubles with each repeat there.
fn back_off(
    previous: &[ClusterBackoff],
    cluster: &str,
    reason: &str,
    settings: &Settings,
    now: Timestamp,
) -> Vec<ClusterBackoff> {
    let attempts = previous.iter().find(|b| b.cluster == cluster).map_or(0, |b| b.attempts) + 1;
    let delay = settings.backoff.saturating_mul(1 << (attempts - 1).min(16)).min(settings.max_backoff);
    let until = now + SignedDuration::try_from(delay).unwrap_or(SignedDuration::MAX);
    let mut list: Vec<ClusterBackoff> = previous.iter().filter(|b| b.cluster != cluster).cloned().collect();
    list.push(ClusterBackoff { cluster: cluster.into(), reason: reason.into(), until: until.to_string(), attempts });
    list
}

/// Members the TrainJob keeps away from right now.
fn backed_off(list: &[ClusterBackoff], now: Timestamp) -> Vec<String> {
    list.iter()
        .filter(|b| b.until.parse::<Timestamp>().is_ok_and(|until| until > now))
        .map(|b| b.cluster.clone())
        .collect()
}

/// Condition on a TrainJob evicted for a higher-priority one: True until it is placed again.
pub const PREEMPTED_CONDITION: &str = "Preempted";

/// Annotation on a TrainJob: when it last wrote a checkpoint (RFC 3339), set by the training
/// code or its checkpoint hook. Preemption counts its lost work from there.
pub const CHECKPOINT_ANNOTATION: &str = "stowage.dev/last-checkpoint";

/// A TrainJob whose pods are bound on a member: what preemption may evict.
struct Active<'a> {
    tj: &'a TrainJob,
    placement: &'a Placement,
    gang: Gang,
    /// GPU flavor of each pod set, as placed (for its quota).
    flavors: Vec<Option<String>>,
    cluster: String,
    /// `<uid>/<epoch>` of the pods bound there.
    key: String,
    started_ms: u64,
    checkpoint_ms: Option<u64>,
    /// Withdrawn already (evicted for a preemptor), its pods not yet gone.
    evicting: bool,
}

fn millis(t: Option<&str>) -> Option<u64> {
    t?.parse::<Timestamp>().ok().map(|t| t.as_millisecond().max(0) as u64)
}

/// A TrainJob waiting for a placement this cycle.
struct Waiting<'a> {
    tj: &'a TrainJob,
    gang: Gang,
    epoch: i64,
    backoff: Vec<ClusterBackoff>,
    /// The Placement it replaces (its resourceVersion), if there is one.
    replaces: Option<String>,
    /// Whether the Placement still names a member it is leaving: then it is written even if
    /// nothing else can take it, so that member's agent fences it.
    leaving: bool,
    conditions: Vec<Condition>,
}

/// The status write, if the status changed.
fn status_write(tj: &TrainJob, conditions: Vec<Condition>, jobs: Vec<JobStatus>) -> Option<StatusWrite> {
    let (ns, name) = key(&tj.metadata);
    let old = tj.status.as_ref();
    let same = old.map(|s| &s.conditions) == Some(&conditions) && old.map(|s| &s.jobs_status) == Some(&jobs);
    let empty = old.is_none() && conditions.is_empty() && jobs.is_empty();
    (!same && !empty).then_some(StatusWrite { namespace: ns, name, conditions, jobs })
}

pub fn decide(o: &Observed, config: &Config, settings: &Settings, now: Time) -> Plan {
    let t = now.0;
    let mut plan = Plan::default();
    let placements: BTreeMap<(String, String), &Placement> =
        o.placements.iter().map(|p| (key(&p.metadata), p)).collect();
    let live_members: Vec<MemberCluster> = o.members.iter().filter(|m| is_live(m, settings, t)).cloned().collect();
    let live: BTreeSet<&str> = live_members.iter().filter_map(|m| m.metadata.name.as_deref()).collect();
    // Placements whose pods each member's capacity report already counts.
    let counted: BTreeSet<(&str, &str)> = o
        .members
        .iter()
        .filter_map(|m| Some((m.metadata.name.as_deref()?, m.status.as_ref()?)))
        .flat_map(|(name, s)| s.counted.iter().map(move |k| (name, k.as_str())))
        .collect();
    let set = queues(o);
    // Per queue: (TrainJobs waiting, TrainJobs placed and unfinished), for the Queue's status.
    let mut counts: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    let mut assumed: Vec<Gang> = Vec::new();
    // Placed, counted by its member, still running (charged to its queue's quota), and
    // withdrawn with pods still bound (being evicted).
    let mut running: Vec<Active<'_>> = Vec::new();
    // Per TrainJob UID: the live member and `<uid>/<epoch>` of pods it reports bound.
    let bound_by_uid: BTreeMap<&str, (&str, &str)> = live_members
        .iter()
        .filter_map(|m| Some((m.metadata.name.as_deref()?, m.status.as_ref()?)))
        .flat_map(|(member, s)| s.bound.iter().map(move |b| (member, b.placement.as_str())))
        .filter_map(|(member, key)| Some((key.split_once('/')?.0, (member, key))))
        .collect();
    let mut waiting: Vec<Waiting<'_>> = Vec::new();
    for tj in o.trainjobs.iter().filter(|t| !finished(t)) {
        let (ns, name) = key(&tj.metadata);
        let mut conditions = tj.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
        let mut jobs = tj.status.as_ref().map(|s| s.jobs_status.clone()).unwrap_or_default();
        let existing = placements.get(&(ns.clone(), name.clone())).copied();
        let status = existing.and_then(current_status);
        let phase = status.map(|s| s.phase);
        // Mirror what the member reports.
        if let (Some(p), Some(s)) = (existing, status) {
            jobs = s.jobs_status.clone();
            match s.phase {
                PlacementPhase::Succeeded => upsert(
                    &mut conditions,
                    condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully".into(), &now),
                ),
                PlacementPhase::Failed => {
                    let message = s.message.clone().unwrap_or_else(|| "jobset failed".into());
                    upsert(&mut conditions, condition("Failed", "True", "FailedJobs", message, &now));
                }
                _ => {}
            }
            if let (Some(cluster), PlacementPhase::Applied | PlacementPhase::Running) = (&p.spec.cluster, s.phase) {
                upsert(
                    &mut conditions,
                    condition(plan::PENDING_CONDITION, "False", "Placed", format!("placed on cluster {cluster}"), &now),
                );
                if conditions.iter().any(|c| c.type_ == PREEMPTED_CONDITION && c.status == "True") {
                    let message = format!("placed again on cluster {cluster}");
                    upsert(&mut conditions, condition(PREEMPTED_CONDITION, "False", "Placed", message, &now));
                }
            }
        }
        let Some(runtime) = runtime_for(o, tj) else {
            let r = &tj.spec.runtime_ref;
            let message = format!("spec.runtimeRef: {} {} not found", r.kind_or_default(), r.name);
            upsert(&mut conditions, condition(plan::PENDING_CONDITION, "True", "RuntimeNotFound", message, &now));
            plan.statuses.extend(status_write(tj, conditions, jobs));
            plan.pending += 1;
            continue;
        };
        let mut gang = match translate::gang(tj, &runtime) {
            Ok(g) => g,
            Err(e) => {
                upsert(&mut conditions, condition(plan::PENDING_CONDITION, "True", "Invalid", e.to_string(), &now));
                plan.statuses.extend(status_write(tj, conditions, jobs));
                plan.pending += 1;
                continue;
            }
        };
        let Some(p) = existing else {
            waiting.push(Waiting {
                tj,
                gang,
                epoch: 1,
                backoff: Vec::new(),
                replaces: None,
                leaving: false,
                conditions,
            });
            continue;
        };
        let replaces = p.metadata.resource_version.clone();
        match (withdrawal(p, &live), &p.spec.cluster) {
            (Some((reason, message)), Some(cluster)) => {
                tracing::info!(trainjob = %format!("{ns}/{name}"), %cluster, reason, %message, "withdrawing");
                let backoff = back_off(&p.spec.backoff, cluster, reason, settings, t);
                gang.clusters.avoid.extend(backed_off(&backoff, t));
                let epoch = p.spec.epoch + 1;
                waiting.push(Waiting { tj, gang, epoch, backoff, replaces, leaving: true, conditions });
            }
            (_, None) => {
                // Withdrawn earlier and not yet placed again; its old pods may still be going.
                if let Some(&(member, old)) = bound_by_uid.get(p.spec.train_job_uid.as_str()) {
                    running.push(Active {
                        tj,
                        placement: p,
                        gang: gang.clone(),
                        flavors: Vec::new(),
                        cluster: member.to_string(),
                        key: old.to_string(),
                        started_ms: 0,
                        checkpoint_ms: None,
                        evicting: true,
                    });
                }
                gang.clusters.avoid.extend(backed_off(&p.spec.backoff, t));
                let (epoch, backoff) = (p.spec.epoch + 1, p.spec.backoff.clone());
                waiting.push(Waiting { tj, gang, epoch, backoff, replaces, leaving: false, conditions });
            }
            (None, Some(cluster)) => {
                plan.statuses.extend(status_write(tj, conditions, jobs));
                let key = format!("{}/{}", p.spec.train_job_uid, p.spec.epoch);
                let finished = matches!(phase, Some(PlacementPhase::Succeeded | PlacementPhase::Failed));
                if finished {
                    continue;
                }
                if counted.contains(&(cluster.as_str(), key.as_str())) {
                    // Its GPUs are in the member's report; its quota is only here.
                    let flavors = gang
                        .pod_sets
                        .iter()
                        .map(|ps| p.spec.pod_sets.iter().find(|pp| pp.name == ps.name).and_then(|pp| pp.flavor.clone()))
                        .collect();
                    counts.entry(gang.queue.clone()).or_default().1 += 1;
                    let annotations = tj.metadata.annotations.as_ref();
                    running.push(Active {
                        tj,
                        placement: p,
                        gang,
                        flavors,
                        cluster: cluster.clone(),
                        key,
                        started_ms: millis(status.and_then(|s| s.start_time.as_deref())).unwrap_or(0),
                        checkpoint_ms: millis(
                            annotations.and_then(|a| a.get(CHECKPOINT_ANNOTATION)).map(String::as_str),
                        ),
                        evicting: false,
                    });
                } else {
                    // Placed, but the member's report does not count its pods yet: count its
                    // capacity as taken (assumed) until it does, and never twice.
                    gang.clusters = ClusterFilter { only: Some(vec![cluster.clone()]), ..ClusterFilter::default() };
                    gang.priority = i32::MAX;
                    counts.entry(gang.queue.clone()).or_default().1 += 1;
                    assumed.push(gang);
                }
            }
        }
    }
    if waiting.is_empty() {
        plan.queues = queue_statuses(o, &set, &counts, &now);
        return plan;
    }
    let fleet = translate::fleet(&live_members);
    let mut batch = None;
    let out = fleet.as_ref().ok().map(|(fleet, capacity, hosts)| {
        let queues = &set.queues;
        let now_ms = t.as_millisecond().max(0) as u64;
        let mut usage = QuotaUsage::default();
        for a in running.iter().filter(|a| !a.evicting) {
            usage.charge(queues, &a.gang, a.flavors.iter().map(Option::as_deref));
        }
        // Placed gangs whose pods the member does not count yet take their room first, as they
        // are: never held for locality, never preempting.
        let as_placed = config.as_placed();
        let snapshot = Snapshot {
            fleet,
            queues,
            capacity: capacity.clone(),
            usage,
            now_ms,
            releases: Vec::new(),
            running: Vec::new(),
        };
        let taken = cycle(snapshot, &assumed, &as_placed);
        let gangs: Vec<Gang> = waiting.iter().map(|w| w.gang.clone()).collect();
        // Where running gangs' pods are, as their members report them exactly: possible victims
        // for preemption, and releases for reservations.
        let admissions: Vec<(usize, scheduler_core::Admission)> = if config.preemption.is_some() || config.reservations
        {
            let bound = translate::bound(hosts, &live_members);
            running
                .iter()
                .enumerate()
                .filter_map(|(i, a)| {
                    let placed = bound.get(&(a.cluster.clone(), a.key.clone()))?;
                    Some((i, translate::admission(fleet, &a.cluster, &a.gang, placed)?))
                })
                .collect()
        } else {
            Vec::new()
        };
        // Each running gang gives its room back at its expected end (one being evicted, now);
        // gangs with no estimate are not counted on.
        let releases = if config.reservations {
            admissions
                .iter()
                .filter_map(|(i, admission)| {
                    let a = &running[*i];
                    let end =
                        if a.evicting { now_ms } else { a.started_ms.saturating_add(a.gang.runtime_ms?).max(now_ms) };
                    Some(scheduler_core::Release::of(&a.gang, admission, end))
                })
                .collect()
        } else {
            Vec::new()
        };
        let victims = if config.preemption.is_none() {
            Vec::new()
        } else {
            admissions
                .iter()
                .map(|(i, admission)| {
                    let a = &running[*i];
                    Running {
                        gang: &a.gang,
                        admission,
                        started_ms: a.started_ms,
                        checkpoint_ms: a.checkpoint_ms,
                        evicting: a.evicting,
                    }
                })
                .collect()
        };
        let snapshot = Snapshot {
            fleet,
            queues,
            capacity: taken.capacity,
            usage: taken.usage,
            now_ms,
            releases,
            running: victims,
        };
        let out = cycle(snapshot, &gangs, config);
        batch = out.batch.clone();
        if let Some(b) = &out.batch {
            tracing::debug!(
                window = b.window,
                binaries = b.binaries,
                kept = b.kept_ilp,
                gap = ?b.gap(),
                greedy = b.greedy_value,
                realised = b.realised_value,
                rejected = ?b.rejected,
                "batch optimiser"
            );
        }
        out.decisions
    });
    // Victims chosen this cycle: gang id → (cluster, preemptor id, its priority).
    let mut evictions: BTreeMap<String, (String, String, i32)> = BTreeMap::new();
    for (i, w) in waiting.into_iter().enumerate() {
        let Waiting { tj, gang, epoch, backoff, replaces, leaving, mut conditions } = w;
        let (ns, name) = key(&tj.metadata);
        let uid = tj.metadata.uid.clone().unwrap_or_default();
        let decision = out.as_ref().map(|d| &d[i]);
        let spec = match (decision, &fleet) {
            (Some(Decision::Admit(a)), Ok((fleet, _, _))) => {
                let mut spec = plan::placement(fleet, &gang, a, &uid, epoch);
                spec.backoff = backoff.clone();
                Some(spec)
            }
            (Some(Decision::Pending(Reason::UnknownQueue { queue })), _) if set.inactive.contains_key(queue) => {
                let message = format!("queue {queue} is inactive: {}", set.inactive[queue]);
                upsert(&mut conditions, condition(plan::PENDING_CONDITION, "True", "QueueInactive", message, &now));
                None
            }
            (Some(Decision::Pending(reason)), _) => {
                let previous = conditions.iter().find(|c| c.type_ == plan::PENDING_CONDITION).cloned();
                upsert(&mut conditions, plan::pending_condition(reason, previous.as_ref(), now.clone()));
                None
            }
            (Some(Decision::Preempt { admission, victims }), Ok((fleet, _, _))) => {
                // Placed once its victims are gone (as Kueue admits a preemptor): until then
                // their pods still hold the room, and each cycle picks the same victims again.
                let cluster = fleet.cluster(admission.cluster).name.clone();
                let message =
                    format!("preempting {} on cluster {cluster}; placed once they are gone", victims.join(", "));
                upsert(&mut conditions, condition(plan::PENDING_CONDITION, "True", "Preempting", message, &now));
                for v in victims {
                    evictions.insert(v.clone(), (cluster.clone(), gang.id.clone(), gang.priority));
                }
                None
            }
            _ => {
                let e = fleet.as_ref().err().map(ToString::to_string).unwrap_or_default();
                let message = format!("no member cluster has reported capacity: {e}");
                upsert(&mut conditions, condition(plan::PENDING_CONDITION, "True", "NoMemberCapacity", message, &now));
                None
            }
        };
        let pending = spec.is_none();
        let count = counts.entry(gang.queue.clone()).or_default();
        if pending {
            count.0 += 1
        } else {
            count.1 += 1
        }
        let spec = spec.or_else(|| {
            leaving.then(|| PlacementSpec {
                train_job_uid: uid.clone(),
                cluster: None,
                epoch,
                pod_sets: Vec::new(),
                backoff: backoff.clone(),
            })
        });
        if let Some(spec) = spec {
            plan.placements.push(PlacementWrite { namespace: ns, name, owner_uid: uid, spec, replaces });
        }
        if pending {
            plan.pending += 1;
            plan.statuses.extend(status_write(tj, conditions, Vec::new()));
        }
    }
    evict(&mut plan, &running, &evictions, &now);
    plan.queues = queue_statuses(o, &set, &counts, &now);
    plan.batch = batch;
    plan
}

/// Withdraws each victim's Placement (its epoch rises, so its agent deletes the JobSet) and says
/// on its TrainJob why. Victims already being evicted need nothing more.
fn evict(plan: &mut Plan, running: &[Active<'_>], evictions: &BTreeMap<String, (String, String, i32)>, now: &Time) {
    for a in running.iter().filter(|a| !a.evicting) {
        let Some((cluster, by, priority)) = evictions.get(&a.gang.id) else { continue };
        tracing::info!(trainjob = %a.gang.id, %cluster, preemptor = %by, "evicting");
        let (namespace, name) = key(&a.tj.metadata);
        plan.placements.push(PlacementWrite {
            namespace: namespace.clone(),
            name: name.clone(),
            owner_uid: a.placement.spec.train_job_uid.clone(),
            spec: PlacementSpec {
                train_job_uid: a.placement.spec.train_job_uid.clone(),
                cluster: None,
                epoch: a.placement.spec.epoch + 1,
                pod_sets: Vec::new(),
                backoff: a.placement.spec.backoff.clone(),
            },
            replaces: a.placement.metadata.resource_version.clone(),
        });
        // A condition of its own: the Pending reason moves on with every cycle while it waits.
        let message = format!("evicted from cluster {cluster} for {by} (priority {priority})");
        let preempted = condition(PREEMPTED_CONDITION, "True", "Preempted", message, now);
        // The cycle may already write this TrainJob's status (mirrored from its member).
        match plan.statuses.iter_mut().find(|s| s.namespace == namespace && s.name == name) {
            Some(w) => upsert(&mut w.conditions, preempted),
            None => {
                let mut conditions = a.tj.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
                upsert(&mut conditions, preempted);
                let jobs = a.tj.status.as_ref().map(|s| s.jobs_status.clone()).unwrap_or_default();
                plan.statuses.extend(status_write(a.tj, conditions, jobs));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(yaml: &str) -> Queue {
        serde_yaml::from_str(&format!("apiVersion: stowage.dev/v1alpha1\nkind: Queue\n{yaml}")).expect("queue")
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
        let set = queues(&o);
        assert!(set.queues.id("ok").is_some() && set.queues.id("default").is_some());
        assert_eq!(set.inactive["typo"], "spec.quotas[0].nominalQuota: \"lots\" is not a non-negative quantity");
        assert!(set.inactive["lends-too-much"].contains("lendingLimit 9 exceeds nominalQuota 8"), "{:?}", set.inactive);
        let now = Time(Timestamp::UNIX_EPOCH);
        let writes = queue_statuses(&o, &set, &BTreeMap::from([("ok".to_string(), (2, 3))]), &now);
        let ok = writes.iter().find(|w| w.name == "ok").expect("written");
        assert_eq!((ok.status.pending, ok.status.admitted, ok.status.conditions[0].status.as_str()), (2, 3, "True"));
        // What was observed already is not written again.
        let mut seen = o.clone();
        seen.queues[0].status = Some(ok.status.clone());
        let again = queue_statuses(&seen, &set, &BTreeMap::from([("ok".to_string(), (2, 3))]), &now);
        assert!(again.iter().all(|w| w.name != "ok"));
    }
}
