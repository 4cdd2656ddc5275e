//! Where each unfinished TrainJob is in its life ([`JobState`]), read from the TrainJob, its
//! Placement and the members' reports; and what its member reports, mirrored into its status.

use std::collections::BTreeMap;

use api::kueue::QUEUE_NAME_LABEL;
use api::stowage::{
    CHECKPOINT_ANNOTATION, CLUSTER_LABEL, ClusterBackoff, Placement, PlacementKey, PlacementPhase, PlacementStatus,
};
use api::trainer::{
    ClusterTrainingRuntime, JobStatus, KUEUE_MULTIKUEUE_MANAGED_BY, Runtime, TrainJob, TrainJobCondition,
    TrainingRuntime,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use scheduler_core::{ClusterFilter, Gang};

use super::members::{Count, Members};
use super::namespaces;
use super::priorities::Priorities;
use super::queues::QueueSet;
use super::{KueueMode, Moved, Observed, Redispatch, Settings, Translation, conditions, key};
use crate::translate;

/// One unfinished TrainJob, its status as this cycle will have it, and its state.
#[derive(Debug, Clone)]
pub(super) struct Job<'a> {
    pub(super) tj: &'a TrainJob,
    pub(super) conditions: Vec<Condition>,
    pub(super) jobs: Vec<JobStatus>,
    pub(super) state: JobState<'a>,
    /// Reported Running by its member, whose report has not counted its pods since then: its
    /// JobSet may be gone without a word (see [`Observed::uncounted_since`]).
    pub(super) uncounted: Option<(PlacementKey, Timestamp)>,
    /// Its gang as translated this cycle, by its UID, for the next one to reuse.
    pub(super) translated: Option<(String, Translation)>,
}

/// A TrainJob's lifecycle as the dispatcher drives it.
#[derive(Debug, Clone)]
pub(super) enum JobState<'a> {
    /// Cannot be scheduled as it stands (its runtime is missing, or it does not translate);
    /// its `Pending` condition says why.
    Blocked,
    /// Its member reported it finished at the current epoch.
    Finished,
    /// `spec.suspend: true`: not placed and not counted; a Placement that names a member is
    /// withdrawn (its agent deletes the JobSet, its GPUs and quota return).
    Suspended(Option<&'a Placement>),
    /// Placed, and counted in its member's capacity report: it charges its queue's quota and
    /// may be a preemption victim.
    Running(Box<Active<'a>>),
    /// Placed, but its member's report does not count its pods yet: its room is assumed taken
    /// (the gang, pinned to its member) before anything new is placed, and never twice.
    Assumed(Gang),
    /// Needs a placement: new, leaving its member, or withdrawn earlier.
    Waiting(Box<Waiting<'a>>),
}

/// A TrainJob whose pods are bound on a member: what preemption may evict.
#[derive(Debug, Clone)]
pub(super) struct Active<'a> {
    pub(super) tj: &'a TrainJob,
    pub(super) placement: &'a Placement,
    pub(super) gang: Gang,
    /// GPU flavor of each pod set, as placed (for its quota).
    pub(super) flavors: Vec<Option<String>>,
    pub(super) cluster: String,
    /// The placement whose pods are bound there.
    pub(super) key: PlacementKey,
    pub(super) started_ms: u64,
    pub(super) checkpoint_ms: Option<u64>,
    /// Withdrawn already (evicted for a preemptor), its pods not yet gone.
    pub(super) evicting: bool,
}

/// A TrainJob waiting for a placement this cycle.
#[derive(Debug, Clone)]
pub(super) struct Waiting<'a> {
    pub(super) gang: Gang,
    pub(super) epoch: i64,
    pub(super) backoff: Vec<ClusterBackoff>,
    /// The Placement it replaces (its resourceVersion), if there is one.
    pub(super) replaces: Option<String>,
    /// Why it leaves the member its Placement still names: then it is written even if nothing
    /// else can take it, so that member's agent fences it.
    pub(super) leaving: Option<Moved>,
    /// Withdrawn earlier with pods still bound on a live member: they hold room until gone.
    pub(super) evicting: Option<Active<'a>>,
}

/// Left to another controller: `spec.managedBy` names MultiKueue (as Trainer leaves it), or
/// Kueue runs on the hub and the TrainJob carries its queue label (Kueue defaults `managedBy`
/// only where the queue has a MultiKueue check; either way the job is Kueue's, and Stowage acts
/// on it only through its Workload's nomination).
pub(super) fn managed_elsewhere(tj: &TrainJob, kueue: KueueMode) -> bool {
    let kueue_label = || tj.metadata.labels.as_ref().is_some_and(|l| l.contains_key(QUEUE_NAME_LABEL));
    tj.spec.managed_by.as_deref() == Some(KUEUE_MULTIKUEUE_MANAGED_BY)
        || (kueue == KueueMode::MultiKueue && kueue_label())
}

pub(super) fn finished(tj: &TrainJob) -> bool {
    tj.status.as_ref().is_some_and(|s| {
        [TrainJobCondition::Complete, TrainJobCondition::Failed]
            .into_iter()
            .any(|c| conditions::is_true(&s.conditions, c))
    })
}

/// What a TrainJob is judged against besides its own objects.
#[derive(Debug)]
pub(super) struct Scope<'s, 'a> {
    pub(super) members: &'s Members<'a>,
    pub(super) queues: &'s QueueSet,
    /// Each namespace's labels.
    pub(super) namespaces: &'s BTreeMap<String, BTreeMap<String, String>>,
    pub(super) priorities: &'s Priorities,
}

/// The TrainJob's state and status this cycle, given its Placement if it has one.
pub(super) fn job<'a>(
    o: &'a Observed,
    scope: &Scope<'_, '_>,
    tj: &'a TrainJob,
    placement: Option<&'a Placement>,
    settings: &Settings,
    now: &Time,
) -> Job<'a> {
    let members = scope.members;
    let (ns, name) = key(&tj.metadata);
    // A member's claim that the job finished while its own report still counts the job's pods
    // running is not believed (a forged or confused status): the job stays running.
    let claim_contradicted = placement.is_some_and(|p| contradicted(p, members));
    if claim_contradicted {
        tracing::warn!(trainjob = %format!("{ns}/{name}"), "placement status says finished, its member counts its pods running: not believed");
    }
    let (conditions, jobs) = mirror(tj, placement.filter(|_| !claim_contradicted), now);
    let mut job = Job { tj, conditions, jobs, state: JobState::Blocked, uncounted: None, translated: None };
    if tj.spec.suspend == Some(true) {
        // As a suspended JobSet's jobs read: none active or ready, each suspended.
        for j in &mut job.jobs {
            j.suspended = j.suspended.saturating_add(j.active);
            (j.active, j.ready) = (0, 0);
        }
        conditions::started(&mut job.conditions);
        conditions::upsert(&mut job.conditions, conditions::suspended(now));
        job.state = JobState::Suspended(placement.filter(|p| p.spec.cluster.is_some()));
        return job;
    }
    if conditions::is_true(&job.conditions, TrainJobCondition::Suspended) {
        conditions::upsert(&mut job.conditions, conditions::resumed(now));
    }
    let Some(runtime) = runtime_for(o, tj) else {
        let r = &tj.spec.runtime_ref;
        let message = format!("spec.runtimeRef: {} {} not found", r.kind_or_default(), r.name);
        conditions::upsert(&mut job.conditions, conditions::waiting("RuntimeNotFound", message, now));
        return job;
    };
    let translation = translation(o, tj, runtime);
    let translated = translation.gang.clone();
    job.translated = tj.metadata.uid.clone().map(|uid| (uid, translation));
    let (mut gang, priority) = match translated.as_ref() {
        Ok(g) => g.clone(),
        Err(e) => {
            conditions::upsert(&mut job.conditions, conditions::waiting("Invalid", e.to_string(), now));
            return job;
        }
    };
    // What is placed stays charged to the queue it was admitted under (its Placement records
    // it): a relabel the admission webhook did not see moves no charge, nor drops it. Kueue's
    // label may name a LocalQueue: its ClusterQueue is the queue.
    if let Some(admitted) = placement.filter(|p| p.spec.cluster.is_some()).and_then(|p| p.spec.queue.clone()) {
        gang.queue = admitted;
    } else if translate::queue_from_kueue(tj) {
        match scope.queues.kueue_queue(&ns, &gang.queue) {
            Some(queue) => gang.queue = queue,
            None => {
                let message = format!("LocalQueue {} doesn't exist", gang.queue);
                conditions::upsert(&mut job.conditions, conditions::waiting("UnknownQueue", message, now));
                return job;
            }
        }
    }
    // A queue whose namespace selector leaves this namespace out is not this TrainJob's to use,
    // nor a priority it may not have; checked before it is placed (what already runs keeps
    // running, as in Kueue, at the priority it may have).
    let unplaced = placement.is_none_or(|p| p.spec.cluster.is_none());
    if unplaced && !scope.queues.admits(&gang.queue, &namespaces::of(scope.namespaces, &ns)) {
        let message = format!("namespace {ns} is not selected by Queue {}'s spec.namespaceSelector", gang.queue);
        conditions::upsert(&mut job.conditions, conditions::waiting("NamespaceNotAllowed", message, now));
        return job;
    }
    match scope.priorities.resolve(&priority, &gang.queue, scope.queues) {
        Ok(p) => gang.priority = p,
        Err((reason, message)) if unplaced => {
            conditions::upsert(&mut job.conditions, conditions::waiting(reason, message, now));
            return job;
        }
        Err(_) => {}
    }
    let t = now.0;
    let Some(p) = placement else {
        // Never placed, or its Placement was deleted by hand: placed above any epoch it had, so
        // epochs never go backwards (an agent fences by them) and its first admission is
        // counted once.
        let uid = tj.metadata.uid.as_deref().unwrap_or_default();
        let known = o.epochs.get(uid).copied().into_iter().chain(members.bound(uid).map(|(_, k)| k.epoch));
        let epoch = known.max().map_or(1, |e| e + 1);
        let waiting = Waiting { gang, epoch, backoff: Vec::new(), replaces: None, leaving: None, evicting: None };
        job.state = JobState::Waiting(Box::new(waiting));
        return job;
    };
    let replaces = p.metadata.resource_version.clone();
    let status = current_status(p);
    let key = PlacementKey::of(p);
    let count = p.spec.cluster.as_deref().map_or(Count::Uncounted, |cluster| members.count(cluster, &key));
    // Whether its member's capacity summary holds its pods. Unlisted and Running: its pods are
    // bound, and the summary, written before the status, counts them. Before it runs it may not
    // be bound yet, and takes its room as assumed (twice, if it is: the safe way round).
    let in_summary = match count {
        Count::Counted => true,
        Count::Uncounted => false,
        Count::Unlisted => status.is_some_and(|s| s.phase == PlacementPhase::Running),
    };
    // Reported Running, not counted by its member for the grace period: lost without a report.
    // (One a report left out for its size may be counted: it cannot tell.)
    let uncounted = match (&p.spec.cluster, status.map(|s| s.phase)) {
        (Some(cluster), Some(PlacementPhase::Running)) if members.keeps(cluster) && count == Count::Uncounted => {
            Some(o.uncounted_since.get(&key).copied().unwrap_or(t))
        }
        _ => None,
    };
    job.uncounted = uncounted.map(|since| (key.clone(), since));
    let vanished =
        uncounted.filter(|since| t.duration_since(*since).unsigned_abs() > settings.member_grace).map(|_| {
            let cluster = p.spec.cluster.as_deref().unwrap_or_default();
            let grace = settings.member_grace.as_secs();
            (
                Redispatch::Uncounted,
                format!("member {cluster} reported it Running but has not counted its pods for {grace} s"),
            )
        });
    job.state = match (withdrawal(p, members).or(vanished), &p.spec.cluster) {
        (Some((reason, message)), Some(cluster)) => {
            tracing::info!(trainjob = %format!("{ns}/{name}"), %cluster, reason = reason.as_str(), %message, "withdrawing");
            let backoff = match reason {
                // Neither says the member cannot run it.
                Redispatch::PlacementEdited | Redispatch::Uncounted => p.spec.backoff.clone(),
                _ => back_off(&p.spec.backoff, cluster, reason.as_str(), settings, t),
            };
            gang.clusters.avoid.extend(backed_off(&backoff, t));
            if reason == Redispatch::Uncounted {
                // Placed again on the same member, at a new epoch: its agent makes it afresh (and
                // deletes whatever of the old epoch is left). Moving it elsewhere could run it
                // twice: nothing says the member stopped running it, only that it stopped
                // counting it.
                gang.clusters.only = Some(vec![cluster.clone()]);
            }
            let epoch = p.spec.epoch + 1;
            let leaving = Some(Moved { reason, message });
            JobState::Waiting(Box::new(Waiting { gang, epoch, backoff, replaces, leaving, evicting: None }))
        }
        (_, None) => {
            // Withdrawn earlier and not yet placed again; its old pods may still be going.
            let evicting = members.bound(&p.spec.train_job_uid).map(|(member, old)| Active {
                tj,
                placement: p,
                gang: gang.clone(),
                flavors: Vec::new(),
                cluster: member.to_string(),
                key: old.clone(),
                started_ms: 0,
                checkpoint_ms: None,
                evicting: true,
            });
            gang.clusters.avoid.extend(backed_off(&p.spec.backoff, t));
            let (epoch, backoff) = (p.spec.epoch + 1, p.spec.backoff.clone());
            JobState::Waiting(Box::new(Waiting { gang, epoch, backoff, replaces, leaving: None, evicting }))
        }
        (None, Some(cluster)) => {
            if !claim_contradicted
                && matches!(status.map(|s| s.phase), Some(PlacementPhase::Succeeded | PlacementPhase::Failed))
            {
                JobState::Finished
            } else if in_summary {
                // Its GPUs are in the member's report; its quota is only here.
                let flavors = gang
                    .pod_sets
                    .iter()
                    .map(|ps| p.spec.pod_sets.iter().find(|pp| *pp.name == *ps.name).and_then(|pp| pp.flavor.clone()))
                    .collect();
                let annotations = tj.metadata.annotations.as_ref();
                JobState::Running(Box::new(Active {
                    tj,
                    placement: p,
                    gang,
                    flavors,
                    cluster: cluster.clone(),
                    key,
                    started_ms: millis(status.and_then(|s| s.start_time.as_deref())).unwrap_or(0),
                    checkpoint_ms: millis(annotations.and_then(|a| a.get(CHECKPOINT_ANNOTATION)).map(String::as_str)),
                    evicting: false,
                }))
            } else {
                gang.clusters = ClusterFilter { only: Some(vec![cluster.clone()]), ..ClusterFilter::default() };
                gang.priority = i32::MAX;
                JobState::Assumed(gang)
            }
        }
    };
    job
}

/// The TrainJob's conditions and job statuses with what its member reports for the current
/// epoch: Trainer's `Complete` or `Failed`; `Pending` while its pods start, with the member's
/// reason; once they run, none of Stowage's own conditions.
fn mirror(tj: &TrainJob, placement: Option<&Placement>, now: &Time) -> (Vec<Condition>, Vec<JobStatus>) {
    let mut conds = tj.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let mut jobs = tj.status.as_ref().map(|s| s.jobs_status.clone()).unwrap_or_default();
    let Some((p, s)) = placement.and_then(|p| Some((p, current_status(p)?))) else { return (conds, jobs) };
    if p.spec.cluster.is_some() {
        jobs = s.jobs_status.clone();
    } else if tj.spec.suspend != Some(true) {
        // Withdrawn: its member deletes the JobSet, so nothing of it is active or ready any
        // more (suspended, [`job`] counts them suspended). The counts are the TrainJob's own,
        // not the Placement's: a withdrawn Placement's status is cleared.
        for j in &mut jobs {
            (j.active, j.ready) = (0, 0);
        }
    }
    match (s.phase, &p.spec.cluster) {
        (PlacementPhase::Succeeded, _) => {
            conditions::started(&mut conds);
            conditions::upsert(&mut conds, conditions::complete(now));
        }
        (PlacementPhase::Failed, _) => {
            conditions::started(&mut conds);
            let message = s.message.clone().unwrap_or_else(|| "jobset failed".into());
            conditions::upsert(&mut conds, conditions::failed(message, now));
        }
        (PlacementPhase::Running, Some(_)) => conditions::started(&mut conds),
        (PlacementPhase::Applied, Some(cluster)) => {
            conditions::upsert(&mut conds, conditions::starting(cluster, s.message.as_deref(), now));
        }
        _ => {}
    }
    (conds, jobs)
}

/// The runtime a TrainJob names, as observed (borrowed: a translation remembered needs no copy).
#[derive(Debug, Clone, Copy)]
enum RuntimeOf<'a> {
    Namespaced(&'a TrainingRuntime),
    Cluster(&'a ClusterTrainingRuntime),
}

impl RuntimeOf<'_> {
    fn metadata(&self) -> &ObjectMeta {
        match self {
            RuntimeOf::Namespaced(r) => &r.metadata,
            RuntimeOf::Cluster(r) => &r.metadata,
        }
    }

    fn owned(self) -> Runtime {
        match self {
            RuntimeOf::Namespaced(r) => Runtime::Namespaced(r.clone()),
            RuntimeOf::Cluster(r) => Runtime::Cluster(r.clone()),
        }
    }
}

fn runtime_for<'a>(o: &'a Observed, tj: &TrainJob) -> Option<RuntimeOf<'a>> {
    let r = &tj.spec.runtime_ref;
    match r.kind_or_default() {
        "TrainingRuntime" => o
            .runtimes
            .iter()
            .find(|rt| rt.metadata.name.as_deref() == Some(&r.name) && rt.metadata.namespace == tj.metadata.namespace)
            .map(RuntimeOf::Namespaced),
        _ => o.cluster_runtimes.iter().find(|rt| rt.metadata.name.as_deref() == Some(&r.name)).map(RuntimeOf::Cluster),
    }
}

/// The TrainJob's gang: the last cycle's when neither the TrainJob nor its runtime was written
/// since (their resourceVersions say so), else translated now. Objects without versions (never
/// stored) are always translated.
fn translation(o: &Observed, tj: &TrainJob, runtime: RuntimeOf<'_>) -> Translation {
    let version = |m: &ObjectMeta| m.resource_version.clone().filter(|v| !v.is_empty());
    let from = match (version(&tj.metadata), runtime.metadata().uid.clone(), version(runtime.metadata())) {
        (Some(t), Some(u), Some(r)) => Some((t, u, r)),
        _ => None,
    };
    let remembered = tj.metadata.uid.as_ref().and_then(|uid| o.translations.get(uid));
    if let Some(t) = remembered.filter(|t| from.is_some() && t.from == from) {
        return t.clone();
    }
    Translation { from, gang: std::sync::Arc::new(translate::gang(tj, &runtime.owned())) }
}

/// The status a member reported for the placement's current epoch (older epochs' reports say
/// nothing about where it runs now).
fn current_status(p: &Placement) -> Option<&PlacementStatus> {
    p.status.as_ref().filter(|s| s.observed_epoch == p.spec.epoch)
}

/// The placement's member reports it finished or lost at its current epoch while that member's
/// own capacity report still counts its pods running.
fn contradicted(p: &Placement, members: &Members<'_>) -> bool {
    let (Some(cluster), Some(status)) = (p.spec.cluster.as_deref(), current_status(p)) else { return false };
    matches!(status.phase, PlacementPhase::Succeeded | PlacementPhase::Failed | PlacementPhase::Lost)
        && members.count(cluster, &PlacementKey::of(p)) == Count::Counted
}

/// Why a placed TrainJob must leave its member, if it must.
fn withdrawal(p: &Placement, members: &Members<'_>) -> Option<(Redispatch, String)> {
    let cluster = p.spec.cluster.as_deref()?;
    let status = current_status(p);
    match status.map(|s| s.phase) {
        Some(PlacementPhase::Succeeded | PlacementPhase::Failed) => None,
        Some(PlacementPhase::Unschedulable) => Some((
            Redispatch::Unschedulable,
            status.and_then(|s| s.message.clone()).unwrap_or_else(|| "the gang did not start in time".into()),
        )),
        // "Its JobSet disappeared" while its member's own report counts its pods running is not
        // believed (a forged or confused status): nothing healthy is evicted on its word.
        Some(PlacementPhase::Lost) if !contradicted(p, members) => Some((
            Redispatch::Lost,
            status.and_then(|s| s.message.clone()).unwrap_or_else(|| "the JobSet disappeared".into()),
        )),
        _ if !members.keeps(cluster) => Some(match members.refusal(cluster) {
            Some(problem) => (Redispatch::MemberUnusable, format!("member {cluster}'s report is refused: {problem}")),
            None => (Redispatch::MemberSilent, format!("member {cluster} stopped reporting")),
        }),
        _ if p.labels().get(CLUSTER_LABEL).map(String::as_str) != Some(cluster) => Some((
            Redispatch::PlacementEdited,
            format!(
                "spec.cluster was changed to {cluster} by hand while labelled {CLUSTER_LABEL}={}: placed again",
                p.labels().get(CLUSTER_LABEL).map_or("(none)", String::as_str)
            ),
        )),
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

fn millis(t: Option<&str>) -> Option<u64> {
    t?.parse::<Timestamp>().ok().map(|t| t.as_millisecond().max(0) as u64)
}

#[cfg(test)]
mod tests {
    use api::stowage::{MemberCluster, MemberClusterSpec, MemberClusterStatus};
    use api::trainer::ClusterTrainingRuntime;
    use k8s_openapi::jiff::SignedDuration;
    use serde_json::json;

    use super::*;

    fn now() -> Time {
        Time("2026-11-22T10:00:00Z".parse().expect("time"))
    }

    fn member(name: &str, age_s: i64) -> MemberCluster {
        let mut m = MemberCluster::new(name, MemberClusterSpec::default());
        let heartbeat = now().0 - SignedDuration::from_secs(age_s);
        let counted = vec!["u1/1".to_string()];
        m.status =
            Some(MemberClusterStatus { heartbeat_time: Some(heartbeat.to_string()), counted, ..Default::default() });
        m
    }

    fn observed(members: Vec<MemberCluster>, placement: Option<serde_json::Value>) -> Observed {
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/runtimes/torch_distributed.yaml");
        let torch = std::fs::read_to_string(path).expect("shared/upstream beside the repository");
        let runtime: ClusterTrainingRuntime = input_limits::yaml::from_str(&torch).expect("yaml");
        let tj: TrainJob =
            serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "namespace": "ml", "uid": "u1", "creationTimestamp": "2026-11-22T09:00:00Z"},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}}}))
            .expect("trainjob");
        let placements = placement
            .map(|spec| {
                serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Placement",
                    "metadata": {"name": "t", "namespace": "ml", "resourceVersion": "7",
                                 "labels": {CLUSTER_LABEL: spec["cluster"]}}, "spec": spec,
                    "status": {"phase": "Running", "observedEpoch": 1}}))
                .expect("placement")
            })
            .into_iter()
            .collect();
        Observed { trainjobs: vec![tj], cluster_runtimes: vec![runtime], members, placements, ..Observed::default() }
    }

    fn state_of(o: &Observed) -> String {
        let members = Members::observe(&o.members, &Settings::default(), now().0);
        let queues = super::super::queues::read(o);
        let priorities = Priorities::default();
        let scope = Scope { members: &members, queues: &queues, namespaces: &BTreeMap::new(), priorities: &priorities };
        let job = job(o, &scope, &o.trainjobs[0], o.placements.first(), &Settings::default(), &now());
        match &job.state {
            JobState::Blocked => format!("blocked: {}", job.conditions[0].reason),
            JobState::Finished => "finished".into(),
            JobState::Suspended(p) => format!("suspended, withdrawing {}", p.is_some()),
            JobState::Running(a) => format!("running on {} at {}", a.cluster, a.key),
            JobState::Assumed(g) => format!("assumed on {:?} at priority {}", g.clusters.only, g.priority),
            JobState::Waiting(w) => {
                format!(
                    "waiting for epoch {} leaving={} avoiding {:?}",
                    w.epoch,
                    w.leaving.is_some(),
                    w.gang.clusters.avoid
                )
            }
        }
    }

    #[test]
    fn each_trainjob_gets_the_state_its_placement_and_members_say() {
        let placed = json!({"trainJobUid": "u1", "cluster": "east", "epoch": 1, "podSets": []});
        let mut no_runtime = observed(vec![member("east", 1)], None);
        no_runtime.cluster_runtimes.clear();
        assert_eq!(state_of(&no_runtime), "blocked: RuntimeNotFound");
        assert_eq!(state_of(&observed(vec![member("east", 1)], None)), "waiting for epoch 1 leaving=false avoiding []");
        assert_eq!(state_of(&observed(vec![member("east", 1)], Some(placed.clone()))), "running on east at u1/1");
        let mut uncounted = member("east", 1);
        uncounted.status.as_mut().expect("status").counted.clear();
        assert_eq!(
            state_of(&observed(vec![uncounted], Some(placed.clone()))),
            format!("assumed on Some([\"east\"]) at priority {}", i32::MAX)
        );
        let mut suspended = observed(vec![member("east", 1)], Some(placed.clone()));
        suspended.trainjobs[0].spec.suspend = Some(true);
        assert_eq!(state_of(&suspended), "suspended, withdrawing true");
        // Silent past the grace period: it leaves, at the next epoch, and keeps away.
        assert_eq!(
            state_of(&observed(vec![member("east", 600)], Some(placed))),
            "waiting for epoch 2 leaving=true avoiding [\"east\"]"
        );
    }

    /// A member too busy to list every placement it counts lists the first in key order (by
    /// UID, then epoch as a number) and says how many it left out. A placement after its last
    /// key runs when reported Running (its pods are bound, so counted), is assumed before that,
    /// and is never taken off its member as uncounted; one before it that is not listed is
    /// uncounted, as in a whole list.
    #[test]
    fn a_placement_a_busy_members_report_left_out_is_neither_lost_nor_counted_before_it_runs() {
        let busy = |counted: &str| {
            let mut m = member("east", 1);
            let status = m.status.as_mut().expect("status");
            (status.counted, status.counted_left_out) = (vec![counted.to_string()], 3000);
            m
        };
        let placed = json!({"trainJobUid": "u1", "cluster": "east", "epoch": 10, "podSets": []});
        let at_epoch_10 = |members, phase: &str, uncounted_for_s: i64| {
            let mut o = observed(members, Some(placed.clone()));
            let status = o.placements[0].status.as_mut().expect("status");
            status.observed_epoch = 10;
            status.phase = serde_json::from_value(json!(phase)).expect("phase");
            let since = now().0 - SignedDuration::from_secs(uncounted_for_s);
            o.uncounted_since.insert(PlacementKey { uid: "u1".into(), epoch: 10 }, since);
            state_of(&o)
        };
        let day = 86_400;
        // "u1/10" sorts before "u1/9" as text: the agent and the hub order by the key itself.
        assert_eq!(at_epoch_10(vec![busy("u1/9")], "Running", day), "running on east at u1/10");
        assert_eq!(at_epoch_10(vec![busy("u0/3")], "Running", day), "running on east at u1/10");
        let assumed = format!("assumed on Some([\"east\"]) at priority {}", i32::MAX);
        assert_eq!(at_epoch_10(vec![busy("u0/3")], "Applied", day), assumed);
        // Before the last key listed: not counted, and gone once past the grace period.
        assert_eq!(at_epoch_10(vec![busy("u2/1")], "Running", 1), assumed);
        assert_eq!(at_epoch_10(vec![busy("u2/1")], "Running", day), "waiting for epoch 11 leaving=true avoiding []");
        // The same list, whole: the placement after it is not counted either.
        let mut whole = busy("u0/3");
        whole.status.as_mut().expect("status").counted_left_out = 0;
        assert_eq!(at_epoch_10(vec![whole], "Running", day), "waiting for epoch 11 leaving=true avoiding []");
    }

    /// The gang a cycle translated is the next cycle's while neither the TrainJob nor its
    /// runtime is written; a write to either translates again, and unstored objects always are.
    #[test]
    fn a_translation_is_reused_until_its_trainjob_or_runtime_is_written() {
        let mut o = observed(vec![member("east", 1)], None);
        o.trainjobs[0].metadata.resource_version = Some("10".into());
        o.cluster_runtimes[0].metadata.uid = Some("r1".into());
        o.cluster_runtimes[0].metadata.resource_version = Some("3".into());
        let translated = |o: &Observed| {
            let runtime = runtime_for(o, &o.trainjobs[0]).expect("runtime");
            translation(o, &o.trainjobs[0], runtime)
        };
        let first = translated(&o);
        assert_eq!(first.from, Some(("10".to_string(), "r1".to_string(), "3".to_string())));
        assert_eq!(
            *first.gang,
            translate::gang(&o.trainjobs[0], &runtime_for(&o, &o.trainjobs[0]).expect("rt").owned())
        );
        // Remembered as something a translation would never give, to see which is used.
        let marked = Translation {
            from: first.from.clone(),
            gang: std::sync::Arc::new(Err(translate::GangError::Annotation {
                annotation: "remembered",
                problem: "x".into(),
            })),
        };
        o.translations.insert("u1".into(), marked.clone());
        assert_eq!(translated(&o), marked, "nothing written since: the remembered one");
        assert_eq!(state_of(&o), "blocked: Invalid", "and the cycle acts on it");
        for write in ["trainjob", "runtime", "unstored"] {
            let mut changed = o.clone();
            match write {
                "trainjob" => changed.trainjobs[0].metadata.resource_version = Some("11".into()),
                "runtime" => changed.cluster_runtimes[0].metadata.resource_version = Some("4".into()),
                _ => changed.trainjobs[0].metadata.resource_version = None,
            }
            assert_eq!(translated(&changed).gang, first.gang, "{write}: translated again");
            assert_eq!(state_of(&changed), "waiting for epoch 1 leaving=false avoiding []", "{write}");
        }
    }
}
