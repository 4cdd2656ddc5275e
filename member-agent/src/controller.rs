//! The member agent's shell, pull mode. It watches the hub's Placements for its cluster (by
//! label) and its member's JobSets; on any change it renders what is placed but not yet there
//! (pure [`render`]) and applies it with server-side apply, deletes what older epochs or
//! withdrawn TrainJobs left (fencing), and reports each Placement's status from its JobSet and
//! the MemberCluster's status (heartbeat, gang scheduler, topology, capacity).
//!
//! Two timers guard the fleet's promise that a TrainJob never runs twice and never waits
//! forever: an agent that cannot reach the hub for `hub_lost` deletes the JobSets it made (the
//! dispatcher moves them after its longer grace period), and a gang not running `start_timeout`
//! after its JobSet was made is reported Unschedulable, with the gang scheduler's reason.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::jobset::JobSet;
use api::stowage::SIMULATED_DURATION_ANNOTATION as SIMULATED_DURATION;
use api::stowage::{
    CLUSTER_LABEL, EPOCH_LABEL, GangScheduler as ReportedScheduler, MemberCluster, Placement, PlacementPhase,
    PlacementStatus, TRAINJOB_UID_LABEL, TopologyLevel,
};
use api::trainer::{ClusterTrainingRuntime, JobStatus, Runtime, TrainJob, TrainingRuntime};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::render::{self, Capabilities, Input, Object};
use crate::watch::{self, Watches};

pub const FIELD_MANAGER: &str = "stowage-agent";
/// Placements rendered and applied, or statuses written, at once.
const CONCURRENT_APPLIES: usize = 16;

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub cluster: String,
    pub levels: Vec<TopologyLevel>,
    pub capabilities: Capabilities,
    pub timing: Timing,
    pub metrics: Metrics,
}

/// The agent's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How often it reports (heartbeat and capacity) when nothing changes.
    pub heartbeat: Duration,
    /// Unable to reach the hub for this long, it deletes the JobSets it made. Keep it well
    /// under the dispatcher's member grace period.
    pub hub_lost: Duration,
    /// A gang not running this long after its JobSet was made is reported Unschedulable.
    pub start_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat: Duration::from_secs(10),
            hub_lost: Duration::from_secs(60),
            start_timeout: Duration::from_secs(600),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action}: {source}")]
    Kube { action: String, source: kube::Error },
    #[error("rendering {namespace}/{name}: {source}")]
    Render { namespace: String, name: String, source: render::RenderError },
    #[error(transparent)]
    Key(#[from] crate::sshkey::KeyError),
    #[error("sync took longer than {0:?}")]
    Timeout(Duration),
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

/// (group, version, kind, plural) of each kind render makes besides the JobSet: PodGroups of the
/// three gang schedulers, the MPI ConfigMap and Secret.
const COMPANIONS: [(&str, &str, &str, &str); 5] = [
    ("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"),
    ("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"),
    ("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
];

fn api_resource((group, version, kind, plural): (&str, &str, &str, &str)) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn resource_of(o: &Object) -> ApiResource {
    api_resource(match o {
        Object::JobSet(_) => ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
        Object::Coscheduling(_) => COMPANIONS[0],
        Object::Volcano(_) => COMPANIONS[1],
        Object::Kai(_) => COMPANIONS[2],
        Object::ConfigMap(_) => COMPANIONS[3],
        Object::Secret(_) => COMPANIONS[4],
    })
}

/// The TrainJob's runtime, from the cache, or from the hub when the cache has not seen it yet.
async fn runtime(hub: &Client, caches: &Caches, tj: &TrainJob) -> Result<Runtime, Error> {
    let r = &tj.spec.runtime_ref;
    let ns = tj.namespace().unwrap_or_default();
    Ok(match r.kind_or_default() {
        "TrainingRuntime" => Runtime::Namespaced(match caches.runtimes.get(&ObjectRef::new(&r.name).within(&ns)) {
            Some(rt) => TrainingRuntime::clone(&rt),
            None => Api::<TrainingRuntime>::namespaced(hub.clone(), &ns)
                .get(&r.name)
                .await
                .map_err(kube_err(format!("reading TrainingRuntime {}", r.name)))?,
        }),
        _ => Runtime::Cluster(match caches.cluster_runtimes.get(&ObjectRef::new(&r.name)) {
            Some(rt) => ClusterTrainingRuntime::clone(&rt),
            None => Api::<ClusterTrainingRuntime>::all(hub.clone())
                .get(&r.name)
                .await
                .map_err(kube_err(format!("reading ClusterTrainingRuntime {}", r.name)))?,
        }),
    })
}

/// Applies one placement's objects to the member.
async fn realise(
    hub: &Client,
    member: &Client,
    cfg: &AgentConfig,
    caches: &Caches,
    p: &Placement,
) -> Result<(), Error> {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let tj = Api::<TrainJob>::namespaced(hub.clone(), &ns)
        .get(&name)
        .await
        .map_err(kube_err(format!("reading TrainJob {ns}/{name}")))?;
    let rt = runtime(hub, caches, &tj).await?;
    let is_mpi = rt.spec().ml_policy.as_ref().is_some_and(|m| m.mpi.is_some());
    let secret_name = format!("{name}-mpi-ssh-auth");
    let secret_exists = is_mpi
        && Api::<Secret>::namespaced(member.clone(), &ns)
            .get_opt(&secret_name)
            .await
            .map_err(kube_err("reading secret"))?
            .is_some();
    let key = if is_mpi { Some(crate::sshkey::generate()?) } else { None };
    let input = Input {
        trainjob: &tj,
        runtime: &rt,
        placement: Some(p),
        capabilities: &cfg.capabilities,
        ssh_key: key.as_ref(),
        jobset_uid: None,
    };
    let objects =
        render::render(&input).map_err(|source| Error::Render { namespace: ns.clone(), name: name.clone(), source })?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for o in &objects {
        // The SSH Secret is immutable and made once: keep the first key.
        if matches!(o, Object::Secret(_)) && secret_exists {
            continue;
        }
        let mut v = o.to_value();
        if matches!(o, Object::JobSet(_))
            && let Some(d) = tj.annotations().get(SIMULATED_DURATION)
        {
            v["metadata"]["annotations"][SIMULATED_DURATION] = d.clone().into();
        }
        let obj_name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
        Api::<DynamicObject>::namespaced_with(member.clone(), &ns, &resource_of(o))
            .patch(&obj_name, &pp, &Patch::Apply(&v))
            .await
            .map_err(kube_err(format!("applying {} {ns}/{obj_name}", o.kind())))?;
    }
    Ok(())
}

/// Makes the namespace on the member unless it is there.
async fn ensure_namespace(member: &Client, ns: &str) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(member.clone());
    if namespaces.get_opt(ns).await.map_err(kube_err("reading namespace"))?.is_none() {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap_or_default();
        match namespaces.create(&PostParams::default(), &n).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => return Err(Error::Kube { action: format!("creating namespace {ns}"), source }),
        }
    }
    Ok(())
}

/// Placement status from the member's JobSet for `epoch`; `pending_reason` is the gang
/// scheduler's word on pods not yet running.
fn status_of(js: &JobSet, epoch: i64, pending_reason: Option<String>, timed_out: bool) -> PlacementStatus {
    let st = js.status.clone().unwrap_or_default();
    let condition = |t: &str| st.conditions.iter().find(|c| c.type_ == t && c.status == "True");
    let jobs: Vec<JobStatus> = st
        .replicated_jobs_status
        .iter()
        .map(|r| JobStatus {
            name: r.name.clone(),
            ready: r.ready,
            succeeded: r.succeeded,
            failed: r.failed,
            active: r.active,
            suspended: r.suspended,
        })
        .collect();
    let started = jobs.iter().any(|j| j.ready > 0 || j.succeeded > 0);
    let (phase, finished) = if let Some(c) = condition("Completed") {
        (PlacementPhase::Succeeded, Some(c))
    } else if let Some(c) = condition("Failed") {
        (PlacementPhase::Failed, Some(c))
    } else if started {
        (PlacementPhase::Running, None)
    } else if timed_out {
        (PlacementPhase::Unschedulable, None)
    } else {
        (PlacementPhase::Applied, None)
    };
    let message = match phase {
        PlacementPhase::Applied | PlacementPhase::Unschedulable => pending_reason,
        _ => st.conditions.iter().find(|c| c.status == "True").map(|c| c.message.clone()),
    };
    PlacementStatus {
        phase,
        observed_epoch: epoch,
        conditions: Vec::new(),
        jobs_status: jobs,
        start_time: js.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        completion_time: finished.map(|c| c.last_transition_time.0.to_string()),
        message,
    }
}

/// The first reason a pod of this JobSet gives for not being scheduled.
async fn pending_reason(member: &Client, ns: &str, jobset: &str) -> Result<Option<String>, Error> {
    let pods = Api::<Pod>::namespaced(member.clone(), ns)
        .list(&ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}")))
        .await
        .map_err(kube_err("listing a gang's pods"))?;
    Ok(pods.items.iter().find_map(|p| {
        p.status.as_ref()?.conditions.as_ref()?.iter().find_map(|c| {
            (c.type_ == "PodScheduled" && c.status == "False")
                .then(|| format!("{}: {}", c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
        })
    }))
}

/// The agent's caches: its Placements and the runtimes on the hub, its JobSets on the member.
#[derive(Debug, Clone)]
pub struct Caches {
    placements: Store<Placement>,
    runtimes: Store<TrainingRuntime>,
    cluster_runtimes: Store<ClusterTrainingRuntime>,
    jobsets: Store<JobSet>,
}

impl Caches {
    pub fn start(hub: &Client, member: &Client, cluster: &str, watches: &mut Watches) -> Self {
        Caches {
            placements: watches
                .watch(Api::all(hub.clone()), watcher::Config::default().labels(&format!("{CLUSTER_LABEL}={cluster}"))),
            runtimes: watches.watch(Api::all(hub.clone()), watcher::Config::default()),
            cluster_runtimes: watches.watch(Api::all(hub.clone()), watcher::Config::default()),
            jobsets: watches.watch(Api::all(member.clone()), watcher::Config::default().labels(TRAINJOB_UID_LABEL)),
        }
    }

    pub async fn ready(&self) {
        let _ = tokio::join!(
            self.placements.wait_until_ready(),
            self.runtimes.wait_until_ready(),
            self.cluster_runtimes.wait_until_ready(),
            self.jobsets.wait_until_ready()
        );
    }
}

/// What an agent remembers between syncs.
#[derive(Debug)]
pub struct State {
    /// (TrainJob uid, epoch) applied by this process and maybe not yet in the JobSet cache.
    applied: BTreeSet<(String, i64)>,
    /// (TrainJob uid, epoch) queued or being realised.
    in_flight: BTreeSet<(String, i64)>,
    /// (TrainJob uid, epoch) → namespace of JobSets it deleted while the hub was unreachable.
    fenced: BTreeMap<(String, i64), String>,
    /// Member namespaces known to exist: a burst into one namespace checks it once, not once
    /// per placement. Forgotten when an apply fails.
    namespaces: BTreeSet<String>,
    last_report: Option<Instant>,
    last_hub_contact: Instant,
}

impl Default for State {
    fn default() -> Self {
        State {
            applied: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            fenced: BTreeMap::new(),
            namespaces: BTreeSet::new(),
            last_report: None,
            last_hub_contact: Instant::now(),
        }
    }
}

fn owner_key(js: &JobSet) -> Option<(String, i64)> {
    let labels = js.labels();
    Some((labels.get(TRAINJOB_UID_LABEL)?.clone(), labels.get(EPOCH_LABEL)?.parse().ok()?))
}

fn is_finished(js: &JobSet) -> bool {
    js.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| (c.type_ == "Completed" || c.type_ == "Failed") && c.status == "True")
    })
}

async fn delete_jobset(member: &Client, js: &JobSet) -> Result<(), Error> {
    let ns = js.namespace().unwrap_or_default();
    match Api::<JobSet>::namespaced(member.clone(), &ns).delete(&js.name_any(), &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Kube { action: format!("deleting JobSet {ns}/{}", js.name_any()), source }),
    }
}

/// Deletes the PodGroups, ConfigMaps and Secrets made for `key` (kinds the member does not
/// serve are skipped).
async fn delete_companions(member: &Client, ns: &str, key: &(String, i64)) -> Result<(), Error> {
    let selector = format!("{TRAINJOB_UID_LABEL}={},{EPOCH_LABEL}={}", key.0, key.1);
    for ar in COMPANIONS.map(api_resource) {
        let api = Api::<DynamicObject>::namespaced_with(member.clone(), ns, &ar);
        let listed = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(l) => l.items,
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(source) => return Err(Error::Kube { action: format!("listing {} in {ns}", ar.plural), source }),
        };
        for o in listed {
            match api.delete(&o.name_any(), &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    return Err(Error::Kube { action: format!("deleting {} {ns}/{}", ar.kind, o.name_any()), source });
                }
            }
        }
    }
    Ok(())
}

/// One sync: fence stale objects, report status, and return the placements to realise. Each is
/// then realised on its own (see `Work`), so a burst's first placements need not wait for its
/// last.
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster))]
pub async fn sync_once(
    hub: &Client,
    member: &Client,
    cfg: &AgentConfig,
    caches: &Caches,
    state: &mut State,
) -> Result<Vec<Placement>, Error> {
    // Heartbeat first: the hub-lost clock must not depend on how long the rest takes.
    let heartbeat = state.last_report.is_none_or(|t| t.elapsed() >= cfg.timing.heartbeat);
    if heartbeat {
        report(hub, member, cfg, Bound::Include).await?;
        state.last_report = Some(Instant::now());
        state.last_hub_contact = Instant::now();
    }
    let placements: Vec<Placement> = watch::snapshot(&caches.placements)
        .into_iter()
        .filter(|p| p.spec.cluster.as_deref() == Some(cfg.cluster.as_str()))
        .collect();
    let jobsets: BTreeMap<(String, i64), JobSet> =
        watch::snapshot(&caches.jobsets).into_iter().filter_map(|js| Some((owner_key(&js)?, js))).collect();
    state.applied.retain(|k| !jobsets.contains_key(k));
    let mut statuses: Vec<(String, String, PlacementStatus)> = Vec::new();
    let mut current = BTreeSet::new();
    let mut to_realise: Vec<&Placement> = Vec::new();
    for p in &placements {
        let key = (p.spec.train_job_uid.clone(), p.spec.epoch);
        current.insert(key.clone());
        let (ns, name) = (p.namespace().unwrap_or_default(), p.name_any());
        let reported = p.status.as_ref().filter(|s| s.observed_epoch == p.spec.epoch);
        let phase = reported.map(|s| s.phase);
        if matches!(
            phase,
            Some(
                PlacementPhase::Succeeded
                    | PlacementPhase::Failed
                    | PlacementPhase::Lost
                    | PlacementPhase::Unschedulable
            )
        ) {
            continue;
        }
        let status = match jobsets.get(&key) {
            Some(js) => {
                let age =
                    js.metadata.creation_timestamp.as_ref().map_or(Duration::ZERO, |t| {
                        k8s_openapi::jiff::Timestamp::now().duration_since(t.0).unsigned_abs()
                    });
                let unstarted = status_of(js, p.spec.epoch, None, false).phase == PlacementPhase::Applied;
                // Asking the pods why is a list per gang: do it at heartbeats, keep the last answer between.
                // Gangs younger than two heartbeats are most likely just starting: no need to ask.
                let reason = match reported {
                    _ if !unstarted => None,
                    Some(r) if !heartbeat || age < cfg.timing.heartbeat * 2 => r.message.clone(),
                    _ => pending_reason(member, &ns, &js.name_any()).await?,
                };
                status_of(js, p.spec.epoch, reason, unstarted && age >= cfg.timing.start_timeout)
            }
            None if state.applied.contains(&key) || state.in_flight.contains(&key) => continue,
            None if matches!(phase, Some(PlacementPhase::Applied | PlacementPhase::Running))
                && !state.fenced.contains_key(&key) =>
            {
                PlacementStatus {
                    phase: PlacementPhase::Lost,
                    observed_epoch: p.spec.epoch,
                    message: Some(format!("JobSet {ns}/{name} disappeared from the member before it finished")),
                    ..PlacementStatus::default()
                }
            }
            None => {
                to_realise.push(p);
                continue;
            }
        };
        if reported != Some(&status) {
            statuses.push((ns, name, status));
        }
    }
    let needed: BTreeSet<String> = to_realise.iter().map(|p| p.namespace().unwrap_or_default()).collect();
    for ns in needed.difference(&state.namespaces.clone()) {
        ensure_namespace(member, ns).await?;
        state.namespaces.insert(ns.clone());
    }
    let to_realise: Vec<Placement> = to_realise.into_iter().cloned().collect();
    // Fencing: what this agent made for an epoch or TrainJob no longer placed here.
    for (key, js) in &jobsets {
        if !current.contains(key) {
            let ns = js.namespace().unwrap_or_default();
            tracing::info!(jobset = %format!("{ns}/{}", js.name_any()), epoch = key.1, "fencing");
            delete_jobset(member, js).await?;
            delete_companions(member, &ns, key).await?;
            cfg.metrics.fenced.inc();
        }
    }
    let gone: Vec<((String, i64), String)> =
        state.fenced.iter().filter(|(k, _)| !current.contains(*k)).map(|(k, ns)| (k.clone(), ns.clone())).collect();
    for (key, ns) in gone {
        delete_companions(member, &ns, &key).await?;
        state.fenced.remove(&key);
    }
    // Capacity first, so the hub never sees a gang running without its GPUs counted as taken.
    if !statuses.is_empty() {
        report(hub, member, cfg, Bound::Keep).await?;
        state.last_report = Some(Instant::now());
        state.last_hub_contact = Instant::now();
    }
    let written: Vec<Result<(), Error>> = futures::stream::iter(statuses)
        .map(|(ns, name, status)| {
            let hub = hub.clone();
            async move { write_status(&hub, &ns, &name, &status).await }
        })
        .buffer_unordered(CONCURRENT_APPLIES)
        .collect()
        .await;
    written.into_iter().find_map(Result::err).map_or(Ok(to_realise), Err)
}

async fn write_status(hub: &Client, ns: &str, name: &str, status: &PlacementStatus) -> Result<(), Error> {
    Api::<Placement>::namespaced(hub.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
        .await
        .map(|_| ())
        .map_err(kube_err(format!("writing Placement {ns}/{name} status")))
}

/// Placements being realised, at most `CONCURRENT_APPLIES` at once: each is rendered, applied
/// and reported Applied on its own, so a burst's first placements need not wait for its last,
/// nor for the next sync.
#[derive(Debug)]
struct Work {
    running: tokio::task::JoinSet<(Placement, Result<(), Error>)>,
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            running: tokio::task::JoinSet::new(),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(CONCURRENT_APPLIES)),
        }
    }
}

impl Work {
    fn add(&mut self, state: &mut State, placements: Vec<Placement>, ctx: (&Client, &Client, &AgentConfig, &Caches)) {
        for p in placements {
            state.in_flight.insert((p.spec.train_job_uid.clone(), p.spec.epoch));
            let (hub, member, cfg, caches) = (ctx.0.clone(), ctx.1.clone(), ctx.2.clone(), ctx.3.clone());
            let permits = self.permits.clone();
            self.running.spawn(async move {
                // The semaphore is never closed, so this always waits for a permit.
                let _permit = permits.acquire_owned().await.ok();
                let mut result = realise(&hub, &member, &cfg, &caches, &p).await;
                if result.is_ok() {
                    let status = PlacementStatus {
                        phase: PlacementPhase::Applied,
                        observed_epoch: p.spec.epoch,
                        ..Default::default()
                    };
                    result = write_status(&hub, &p.namespace().unwrap_or_default(), &p.name_any(), &status).await;
                }
                (p, result)
            });
        }
    }

    /// Records a finished realisation.
    fn finished(state: &mut State, cfg: &AgentConfig, (p, result): (Placement, Result<(), Error>)) {
        let key = (p.spec.train_job_uid.clone(), p.spec.epoch);
        state.in_flight.remove(&key);
        match result {
            Ok(()) => {
                cfg.metrics.realised.inc();
                state.fenced.remove(&key);
                state.applied.insert(key);
            }
            Err(error) => {
                // The next sync finds it neither applied nor in flight and queues it again.
                state.namespaces.clear();
                tracing::warn!(%error, placement = %p.name_any(), "realising failed");
            }
        }
    }

    /// Drops everything queued and running: the hub is lost and nothing new may start.
    fn abandon(&mut self, state: &mut State) {
        self.running.abort_all();
        state.in_flight.clear();
    }
}

/// The hub has been out of reach too long: delete every live JobSet this agent made, so the
/// dispatcher can place them elsewhere without two copies running.
async fn fence_all(member: &Client, cfg: &AgentConfig, caches: &Caches, state: &mut State) -> Result<(), Error> {
    for js in watch::snapshot(&caches.jobsets).iter().filter(|js| !is_finished(js)) {
        if let Some(key) = owner_key(js) {
            tracing::warn!(jobset = %js.name_any(), "hub unreachable: deleting");
            delete_jobset(member, js).await?;
            cfg.metrics.fenced.inc();
            state.fenced.insert(key, js.namespace().unwrap_or_default());
        }
    }
    Ok(())
}

/// Which gang scheduler the member runs, from its CRDs (coscheduling first when several are).
async fn detect_gang_scheduler(member: &Client) -> Result<ReportedScheduler, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(member.clone());
    for (name, scheduler) in [
        ("podgroups.scheduling.x-k8s.io", ReportedScheduler::Coscheduling),
        ("podgroups.scheduling.volcano.sh", ReportedScheduler::Volcano),
        ("podgroups.scheduling.run.ai", ReportedScheduler::Kai),
    ] {
        if crds.get_opt(name).await.map_err(kube_err("reading CRDs"))?.is_some() {
            return Ok(scheduler);
        }
    }
    Ok(ReportedScheduler::None)
}

/// The heartbeat alone: one small hub write, so the hub-lost clock measures the hub, not how
/// busy the member is.
async fn heartbeat(hub: &Client, cfg: &AgentConfig) -> Result<(), Error> {
    let status = json!({"status": {"heartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string()}});
    Api::<MemberCluster>::all(hub.clone())
        .patch_status(&cfg.cluster, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(|_| ())
        .map_err(kube_err(format!("writing MemberCluster {} heartbeat", cfg.cluster)))
}

/// `<uid>/<epoch>` of the placements with a pod bound to a node: the capacity summary counts
/// them, so the hub need not assume their GPUs taken any more.
fn counted(pods: &[Pod]) -> Vec<String> {
    let keys: BTreeSet<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .filter_map(|p| {
            let labels = p.metadata.labels.as_ref()?;
            Some(format!("{}/{}", labels.get(TRAINJOB_UID_LABEL)?, labels.get(EPOCH_LABEL)?))
        })
        .collect();
    keys.into_iter().collect()
}

/// Whether a report rewrites `bound` (where each placement's pods are), which grows with the
/// pods running: on heartbeats, or kept as last written (a merge patch leaves it) when a report
/// is made between them only to count new pods. The hub ignores a node whose free GPUs no longer
/// match, so a bound list a heartbeat old is never read wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Include,
    Keep,
}

async fn report(hub: &Client, member: &Client, cfg: &AgentConfig, bound: Bound) -> Result<(), Error> {
    let nodes =
        Api::<Node>::all(member.clone()).list(&ListParams::default()).await.map_err(kube_err("listing nodes"))?.items;
    let pods =
        Api::<Pod>::all(member.clone()).list(&ListParams::default()).await.map_err(kube_err("listing pods"))?.items;
    let mut status = json!({"status": {
        "heartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "agentVersion": env!("CARGO_PKG_VERSION"),
        "gangScheduler": detect_gang_scheduler(member).await?,
        "kueue": matches!(cfg.capabilities.topology_mode, render::TopologyMode::Kueue),
        "topologyLevels": cfg.levels,
        "domains": crate::capacity::summarize(&cfg.levels, &nodes, &pods),
        "counted": counted(&pods),
    }});
    if bound == Bound::Include {
        status["status"]["bound"] = json!(crate::capacity::bound(&cfg.levels, &nodes, &pods));
    }
    Api::<MemberCluster>::all(hub.clone())
        .patch_status(&cfg.cluster, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(kube_err(format!("writing MemberCluster {} status", cfg.cluster)))?;
    Ok(())
}

/// Syncs on every change and heartbeat until dropped; errors are logged and retried with
/// exponential back-off.
pub async fn run(hub: Client, member: Client, cfg: AgentConfig) {
    let mut watches = Watches::new();
    let caches = Caches::start(&hub, &member, &cfg.cluster, &mut watches);
    caches.ready().await;
    let mut state = State::default();
    let mut work = Work::default();
    let mut backoff = Duration::ZERO;
    loop {
        let started = std::time::Instant::now();
        // A request stuck in the client's own retries must not starve the hub-lost check.
        let result = tokio::time::timeout(cfg.timing.hub_lost, sync_once(&hub, &member, &cfg, &caches, &mut state))
            .await
            .unwrap_or(Err(Error::Timeout(cfg.timing.hub_lost)));
        cfg.metrics.syncs.inc();
        cfg.metrics.sync_seconds.observe(started.elapsed().as_secs_f64());
        match result {
            Ok(placements) => {
                backoff = Duration::ZERO;
                work.add(&mut state, placements, (&hub, &member, &cfg, &caches));
            }
            Err(error) => {
                cfg.metrics.sync_errors.inc();
                backoff = (backoff * 2).clamp(Duration::from_millis(100), Duration::from_secs(10));
                tracing::warn!(%error, cluster = %cfg.cluster, retry_in = ?backoff, "agent sync failed");
            }
        }
        // Probe the hub apart from the sync: a sync that is merely slow (hundreds of placements)
        // must not look like a lost hub.
        if state.last_hub_contact.elapsed() >= cfg.timing.heartbeat
            && let Ok(Ok(())) =
                tokio::time::timeout(cfg.timing.heartbeat.max(Duration::from_secs(2)), heartbeat(&hub, &cfg)).await
        {
            state.last_hub_contact = Instant::now();
        }
        if state.last_hub_contact.elapsed() >= cfg.timing.hub_lost {
            work.abandon(&mut state);
            if let Err(error) = fence_all(&member, &cfg, &caches, &mut state).await {
                tracing::warn!(%error, "fencing failed");
            }
        }
        let wait = if backoff.is_zero() { cfg.timing.heartbeat } else { backoff };
        let next_sync = Instant::now() + wait;
        // Until a change or the timer: realisations that finish meanwhile make room for queued ones.
        loop {
            tokio::select! {
                Some(done) = work.running.join_next(), if !work.running.is_empty() => {
                    match done {
                        Ok(done) => Work::finished(&mut state, &cfg, done),
                        Err(error) => tracing::error!(%error, "a realisation task ended abnormally"),
                    }
                    continue;
                }
                _ = watches.changed(), if backoff.is_zero() => {}
                _ = tokio::time::sleep_until(next_sync) => {}
            }
            break;
        }
    }
}
