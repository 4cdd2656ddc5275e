//! The member agent's shell, pull mode. It watches the hub's Placements for its cluster (by
//! label) and its member's JobSets, and caches the member's Nodes and Pods. It works at two
//! paces. Every wake starts what is placed but not yet there: rendered (pure [`render`]),
//! applied with server-side apply and reported Applied, each on its own. Beside that, one
//! *round* at a time deletes what older epochs or withdrawn TrainJobs left (fencing) and
//! reports each Placement's status from its JobSet and the MemberCluster's status (heartbeat,
//! gang scheduler, topology, capacity): a round writing hundreds of statuses never holds back
//! what was just placed.
//!
//! Two timers guard the fleet's promise that a TrainJob never runs twice and never waits
//! forever: an agent that cannot reach the hub for `hub_lost` deletes the JobSets it made (the
//! dispatcher moves them after its longer grace period), and a gang not running `start_timeout`
//! after its JobSet was made is reported Unschedulable, with the gang scheduler's reason.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use api::jobset::{JobSet, JobSetCondition, is_true};
use api::stowage::{
    CLUSTER_LABEL, EPOCH_LABEL, GangScheduler as ReportedScheduler, MemberCluster, Placement, PlacementKey,
    PlacementPhase, PlacementStatus, TRAINJOB_UID_LABEL, TopologyLevel,
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

use crate::capacity;
use crate::metrics::Metrics;
use kube_shell::backoff::Backoff;
use kube_shell::watch::{self, Watches};
use trainer_render::{self as render, Capabilities, Input, Object};

pub const FIELD_MANAGER: &str = "stowage-agent";
/// How long a burst of watch events may land before one survey looks at them all: shorter than
/// the dispatcher's, since a survey is cheap and a start is waiting on it.
const DEBOUNCE: Duration = Duration::from_millis(10);
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
    Key(#[from] trainer_render::sshkey::KeyError),
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
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster, placement = %p.name_any()))]
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
    let key = if is_mpi { Some(trainer_render::sshkey::generate()?) } else { None };
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
        let v = o.to_value();
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
    let none = Default::default();
    let st = js.status.as_ref().unwrap_or(&none);
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
    let (phase, finished) = if let Some(c) = condition(JobSetCondition::Completed.as_str()) {
        (PlacementPhase::Succeeded, Some(c))
    } else if let Some(c) = condition(JobSetCondition::Failed.as_str()) {
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

/// The first reason (by pod name) a pod of this JobSet gives for not being scheduled.
fn pending_reason(pods: &[Arc<Pod>], ns: &str, jobset: &str) -> Option<String> {
    pods.iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns)
                && p.labels().get("jobset.sigs.k8s.io/jobset-name").map(String::as_str) == Some(jobset)
        })
        .filter_map(|p| {
            let c = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            let reason =
                format!("{}: {}", c.reason.as_deref().unwrap_or_default(), c.message.as_deref().unwrap_or_default());
            Some((p.metadata.name.as_deref(), reason))
        })
        .min()
        .map(|(_, reason)| reason)
}

/// The agent's caches: its Placements and the runtimes on the hub; its JobSets, and the Nodes
/// and unfinished Pods its capacity report summarises, on the member.
#[derive(Debug, Clone)]
pub struct Caches {
    placements: Store<Placement>,
    placements_listed: watch::Listed,
    runtimes: Store<TrainingRuntime>,
    cluster_runtimes: Store<ClusterTrainingRuntime>,
    jobsets: Store<JobSet>,
    nodes: Store<Node>,
    pods: Store<Pod>,
}

impl Caches {
    pub fn start(hub: &Client, member: &Client, cluster: &str, watches: &mut Watches) -> Self {
        let (placements, placements_listed) = watches.watch_listed(
            Api::all(hub.clone()),
            watcher::Config::default().labels(&format!("{CLUSTER_LABEL}={cluster}")),
        );
        Caches {
            placements,
            placements_listed,
            runtimes: watches.watch(Api::all(hub.clone()), watcher::Config::default()),
            cluster_runtimes: watches.watch(Api::all(hub.clone()), watcher::Config::default()),
            jobsets: watches.watch(Api::all(member.clone()), watcher::Config::default().labels(TRAINJOB_UID_LABEL)),
            // Read by each round, not acted on: they do not wake the agent.
            nodes: watches.cache(Api::all(member.clone()), watcher::Config::default(), capacity::strip_node),
            pods: watches.cache(
                Api::all(member.clone()),
                watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
                capacity::strip_pod,
            ),
        }
    }

    pub async fn ready(&self) {
        let _ = tokio::join!(
            self.placements.wait_until_ready(),
            self.runtimes.wait_until_ready(),
            self.cluster_runtimes.wait_until_ready(),
            self.jobsets.wait_until_ready(),
            self.nodes.wait_until_ready(),
            self.pods.wait_until_ready()
        );
    }
}

/// What an agent remembers between wakes.
#[derive(Debug)]
pub struct State {
    /// (TrainJob uid, epoch) applied by this process and maybe not yet in the JobSet cache.
    applied: BTreeSet<(String, i64)>,
    /// (TrainJob uid, epoch) queued or being realised.
    in_flight: BTreeSet<(String, i64)>,
    /// (TrainJob uid, epoch) → namespace of JobSets it deleted while the hub was unreachable.
    fenced: BTreeMap<(String, i64), String>,
    /// When it last fenced for a lost hub: what it deleted then is made again only from a list of
    /// Placements taken after, never from a cache the hub-lost time left behind.
    fenced_at: Option<Instant>,
    last_report: Option<Instant>,
    last_hub_contact: Instant,
}

impl Default for State {
    fn default() -> Self {
        State {
            applied: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            fenced: BTreeMap::new(),
            fenced_at: None,
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
        [JobSetCondition::Completed, JobSetCondition::Failed].iter().any(|c| is_true(&s.conditions, c.as_str()))
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

/// What one look at the caches asks of the agent. No I/O, so every wake can take one.
#[derive(Debug, Default)]
struct Survey {
    /// Placed here, with no JobSet yet and not being realised: started at once.
    realise: Vec<Arc<Placement>>,
    round: Round,
}

/// One round of reporting to the hub and cleaning up the member. It runs apart from the wake
/// loop, so a slow round (hundreds of statuses in a burst) never holds back what was just
/// placed.
#[derive(Debug, Default)]
struct Round {
    /// A heartbeat is due: the whole MemberCluster status, not only capacity.
    heartbeat: bool,
    /// Placement statuses that differ from what the hub has.
    statuses: Vec<(String, String, PlacementStatus)>,
    /// JobSets this agent made for an epoch or TrainJob no longer placed here (fencing).
    stale: Vec<((String, i64), Arc<JobSet>)>,
    /// Fenced while the hub was out of reach and no longer placed here: their companions go.
    gone: Vec<((String, i64), String)>,
}

impl Round {
    fn is_empty(&self) -> bool {
        !self.heartbeat && self.statuses.is_empty() && self.stale.is_empty() && self.gone.is_empty()
    }
}

/// Compares the placements for this cluster with the member's JobSets: what to realise and,
/// with `round` (`Some(heartbeat)`), what a round should do. Forgets applied keys the JobSet
/// cache has caught up with.
fn survey(cfg: &AgentConfig, caches: &Caches, state: &mut State, round: Option<bool>) -> Survey {
    let placements: Vec<Arc<Placement>> = watch::sorted(&caches.placements)
        .into_iter()
        .filter(|p| p.spec.cluster.as_deref() == Some(cfg.cluster.as_str()))
        .collect();
    let jobsets: BTreeMap<(String, i64), Arc<JobSet>> =
        caches.jobsets.state().into_iter().filter_map(|js| Some((owner_key(&js)?, js))).collect();
    state.applied.retain(|k| !jobsets.contains_key(k));
    let heartbeat = round == Some(true);
    // Asking the pods why a gang waits is for heartbeats; the last answer is kept between.
    let pods = if heartbeat { caches.pods.state() } else { Vec::new() };
    let mut survey = Survey { round: Round { heartbeat, ..Round::default() }, ..Survey::default() };
    let mut current = BTreeSet::new();
    for p in placements {
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
            // Statuses are a round's business, and one is running.
            Some(_) if round.is_none() => continue,
            Some(js) => {
                let age =
                    js.metadata.creation_timestamp.as_ref().map_or(Duration::ZERO, |t| {
                        k8s_openapi::jiff::Timestamp::now().duration_since(t.0).unsigned_abs()
                    });
                let unstarted = status_of(js, p.spec.epoch, None, false).phase == PlacementPhase::Applied;
                // Gangs younger than two heartbeats are most likely just starting: no need to ask.
                let reason = match reported {
                    _ if !unstarted => None,
                    Some(r) if !heartbeat || age < cfg.timing.heartbeat * 2 => r.message.clone(),
                    _ => pending_reason(&pods, &ns, &js.name_any()),
                };
                status_of(js, p.spec.epoch, reason, unstarted && age >= cfg.timing.start_timeout)
            }
            None if state.applied.contains(&key) || state.in_flight.contains(&key) => continue,
            None if matches!(phase, Some(PlacementPhase::Applied | PlacementPhase::Running))
                && !state.fenced.contains_key(&key) =>
            {
                if round.is_none() {
                    continue;
                }
                PlacementStatus {
                    phase: PlacementPhase::Lost,
                    observed_epoch: p.spec.epoch,
                    message: Some(format!("JobSet {ns}/{name} disappeared from the member before it finished")),
                    ..PlacementStatus::default()
                }
            }
            // Fenced for a lost hub, and the Placements not listed since: the placement may have
            // moved on, unseen.
            None if state.fenced.contains_key(&key)
                && state.fenced_at.is_some_and(|t| !caches.placements_listed.since(t)) =>
            {
                continue;
            }
            None => {
                survey.realise.push(p);
                continue;
            }
        };
        if reported != Some(&status) {
            survey.round.statuses.push((ns, name, status));
        }
    }
    if round.is_none() {
        return survey;
    }
    survey.round.stale = jobsets.into_iter().filter(|(k, _)| !current.contains(k)).collect();
    survey.round.gone =
        state.fenced.iter().filter(|(k, _)| !current.contains(*k)).map(|(k, ns)| (k.clone(), ns.clone())).collect();
    survey
}

/// What a round did, for the wake loop to remember.
#[derive(Debug)]
struct Delivered {
    /// The MemberCluster status was written.
    reported: bool,
    /// Keys whose companions it deleted: no longer fenced.
    cleaned: Vec<(String, i64)>,
}

/// Runs one round: the heartbeat report first (the hub-lost clock must not depend on how long
/// the rest takes), fencing, then capacity before statuses, so the hub never sees a gang
/// running without its GPUs counted as taken.
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster, statuses = round.statuses.len()))]
async fn deliver(
    hub: Client,
    member: Client,
    cfg: AgentConfig,
    caches: Caches,
    round: Round,
) -> Result<Delivered, Error> {
    let mut reported = false;
    if round.heartbeat {
        report(&hub, &member, &cfg, &caches, Scope::Heartbeat).await?;
        reported = true;
    }
    for (key, js) in &round.stale {
        let ns = js.namespace().unwrap_or_default();
        tracing::info!(jobset = %format!("{ns}/{}", js.name_any()), epoch = key.1, "fencing");
        delete_jobset(&member, js).await?;
        delete_companions(&member, &ns, key).await?;
        cfg.metrics.fenced.inc();
    }
    let mut cleaned = Vec::new();
    for (key, ns) in round.gone {
        delete_companions(&member, &ns, &key).await?;
        cleaned.push(key);
    }
    if !round.statuses.is_empty() && !reported {
        report(&hub, &member, &cfg, &caches, Scope::Capacity).await?;
        reported = true;
    }
    let written: Vec<Result<(), Error>> = futures::stream::iter(round.statuses)
        .map(|(ns, name, status)| {
            let hub = hub.clone();
            async move { write_status(&hub, &ns, &name, &status).await }
        })
        .buffer_unordered(CONCURRENT_APPLIES)
        .collect()
        .await;
    written.into_iter().find_map(Result::err).map_or(Ok(Delivered { reported, cleaned }), Err)
}

async fn write_status(hub: &Client, ns: &str, name: &str, status: &PlacementStatus) -> Result<(), Error> {
    Api::<Placement>::namespaced(hub.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
        .await
        .map(|_| ())
        .map_err(kube_err(format!("writing Placement {ns}/{name} status")))
}

/// Placements being realised, at most `CONCURRENT_APPLIES` at once: each is rendered, applied
/// and reported Applied on its own, as soon as the agent sees it, so a burst's first placements
/// need not wait for its last, nor for a round.
#[derive(Debug)]
struct Work {
    running: tokio::task::JoinSet<(Arc<Placement>, Result<(), Error>)>,
    permits: Arc<tokio::sync::Semaphore>,
    /// Member namespaces known to exist: a burst into one namespace checks it once, not once
    /// per placement. Forgotten when an apply fails.
    namespaces: Arc<tokio::sync::Mutex<BTreeSet<String>>>,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            running: tokio::task::JoinSet::new(),
            permits: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_APPLIES)),
            namespaces: Arc::default(),
        }
    }
}

impl Work {
    fn add(
        &mut self,
        state: &mut State,
        placements: Vec<Arc<Placement>>,
        ctx: (&Client, &Client, &AgentConfig, &Caches),
    ) {
        for p in placements {
            state.in_flight.insert((p.spec.train_job_uid.clone(), p.spec.epoch));
            let (hub, member, cfg, caches) = (ctx.0.clone(), ctx.1.clone(), ctx.2.clone(), ctx.3.clone());
            let (permits, namespaces) = (self.permits.clone(), self.namespaces.clone());
            self.running.spawn(async move {
                // The semaphore is never closed, so this always waits for a permit.
                let permit = permits.acquire_owned().await.ok();
                let ns = p.namespace().unwrap_or_default();
                let result = async {
                    {
                        // Held while the namespace is made, so a burst into a new one makes it once.
                        let mut known = namespaces.lock().await;
                        if !known.contains(&ns) {
                            ensure_namespace(&member, &ns).await?;
                            known.insert(ns.clone());
                        }
                    }
                    realise(&hub, &member, &cfg, &caches, &p).await?;
                    // The member's part is done: the next placement may start while the hub hears.
                    drop(permit);
                    let status = PlacementStatus {
                        phase: PlacementPhase::Applied,
                        observed_epoch: p.spec.epoch,
                        ..Default::default()
                    };
                    write_status(&hub, &ns, &p.name_any(), &status).await
                }
                .await;
                if result.is_err() {
                    namespaces.lock().await.clear();
                }
                (p, result)
            });
        }
    }

    /// Records a finished realisation.
    fn finished(state: &mut State, cfg: &AgentConfig, (p, result): (Arc<Placement>, Result<(), Error>)) {
        let key = (p.spec.train_job_uid.clone(), p.spec.epoch);
        state.in_flight.remove(&key);
        match result {
            Ok(()) => {
                cfg.metrics.realised.inc();
                state.fenced.remove(&key);
                state.applied.insert(key);
            }
            // The next wake finds it neither applied nor in flight and starts it again.
            Err(error) => tracing::warn!(%error, placement = %p.name_any(), "realising failed"),
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
            state.fenced_at = Some(Instant::now());
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
fn counted(pods: &[Arc<Pod>]) -> Vec<String> {
    let keys: BTreeSet<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .filter_map(|p| Some(PlacementKey::of_labels(p.metadata.labels.as_ref()?)?.to_string()))
        .collect();
    keys.into_iter().collect()
}

/// How much of the MemberCluster status a report writes. A merge patch leaves the rest as last
/// written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Everything, with the gang scheduler detected afresh and `bound` (where each placement's
    /// pods are, which grows with the pods running).
    Heartbeat,
    /// Between heartbeats, only to count new pods: capacity and `counted`. The hub ignores a node
    /// whose free GPUs no longer match, so a `bound` list a heartbeat old is never read wrongly.
    Capacity,
}

/// Writes the MemberCluster status, capacity summarised from the Node and Pod caches.
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster, ?scope))]
async fn report(hub: &Client, member: &Client, cfg: &AgentConfig, caches: &Caches, scope: Scope) -> Result<(), Error> {
    let (nodes, pods) = (caches.nodes.state(), caches.pods.state());
    let mut status = json!({
        "heartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "domains": crate::capacity::summarize(&cfg.levels, &nodes, &pods),
        "counted": counted(&pods),
    });
    if scope == Scope::Heartbeat {
        status["agentVersion"] = env!("CARGO_PKG_VERSION").into();
        status["gangScheduler"] = json!(detect_gang_scheduler(member).await?);
        status["kueue"] = matches!(cfg.capabilities.topology_mode, render::TopologyMode::Kueue).into();
        status["topologyLevels"] = json!(cfg.levels);
        status["bound"] = json!(crate::capacity::bound(&cfg.levels, &nodes, &pods));
    }
    Api::<MemberCluster>::all(hub.clone())
        .patch_status(&cfg.cluster, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
        .await
        .map_err(kube_err(format!("writing MemberCluster {} status", cfg.cluster)))?;
    Ok(())
}

/// Wakes on every change, finished round, heartbeat and retry, until dropped. Every wake starts
/// what was just placed and, unless a round is running, a round for whatever else differs if
/// something changed since the last one started (a round's end is a wake, so nothing seen
/// meanwhile is missed). A failed round is retried with exponential back-off.
pub async fn run(hub: Client, member: Client, cfg: AgentConfig) {
    let mut watches = Watches::new();
    let caches = Caches::start(&hub, &member, &cfg.cluster, &mut watches);
    caches.ready().await;
    let mut state = State::default();
    let mut work = Work::default();
    let mut rounds: tokio::task::JoinSet<(Result<Delivered, Error>, Instant)> = tokio::task::JoinSet::new();
    let (mut backoff, mut retry_at) = (Backoff::default(), Instant::now());
    // A change since the last round started: only then (or for a heartbeat) does another run.
    // A round's own writes reach the caches a moment after it ends, so a look taken then would
    // find them still to do and run it again.
    let mut changed = true;
    loop {
        let heartbeat_due = state.last_report.is_none_or(|t| t.elapsed() >= cfg.timing.heartbeat);
        let may_start = rounds.is_empty() && Instant::now() >= retry_at;
        let survey = survey(&cfg, &caches, &mut state, may_start.then_some(heartbeat_due));
        work.add(&mut state, survey.realise, (&hub, &member, &cfg, &caches));
        if may_start && (changed || heartbeat_due) && !survey.round.is_empty() {
            changed = false;
            let (hub, member, cfg, caches) = (hub.clone(), member.clone(), cfg.clone(), caches.clone());
            rounds.spawn(async move {
                let started = Instant::now();
                // A request stuck in the client's own retries must not starve the hub-lost check.
                let limit = cfg.timing.hub_lost;
                let result = tokio::time::timeout(limit, deliver(hub, member, cfg, caches, survey.round))
                    .await
                    .unwrap_or(Err(Error::Timeout(limit)));
                (result, started)
            });
        }
        // Probe the hub apart from the rounds: one that is merely slow (hundreds of statuses)
        // must not look like a lost hub.
        if state.last_hub_contact.elapsed() >= cfg.timing.heartbeat
            && let Ok(Ok(())) =
                tokio::time::timeout(cfg.timing.heartbeat.max(Duration::from_secs(2)), heartbeat(&hub, &cfg)).await
        {
            state.last_hub_contact = Instant::now();
        }
        if state.last_hub_contact.elapsed() >= cfg.timing.hub_lost {
            work.abandon(&mut state);
            rounds.abort_all();
            if let Err(error) = fence_all(&member, &cfg, &caches, &mut state).await {
                tracing::warn!(%error, "fencing failed");
            }
        }
        // A running round wakes the loop when it ends; otherwise the next heartbeat or retry.
        let next = match (rounds.is_empty(), !backoff.is_waiting()) {
            (false, _) => None,
            (true, true) => Some(state.last_report.map_or(Instant::now(), |t| t + cfg.timing.heartbeat)),
            (true, false) => Some(retry_at),
        };
        loop {
            tokio::select! {
                // Realisations that finish make room for queued ones; nothing to survey.
                Some(done) = work.running.join_next(), if !work.running.is_empty() => {
                    match done {
                        Ok(done) => Work::finished(&mut state, &cfg, done),
                        // Cancelled is how `abandon` stops them; only a panic is news.
                        Err(error) if error.is_panic() => tracing::error!(%error, "a realisation task panicked"),
                        Err(_) => {}
                    }
                    continue;
                }
                Some(done) = rounds.join_next(), if !rounds.is_empty() => {
                    // Aborted (hub lost) or panicked: the loop looks again.
                    let Ok((result, started)) = done else { break };
                    cfg.metrics.syncs.inc();
                    cfg.metrics.sync_seconds.observe(started.elapsed().as_secs_f64());
                    match result {
                        Ok(d) => {
                            backoff.succeed();
                            if d.reported {
                                state.last_report = Some(Instant::now());
                                state.last_hub_contact = Instant::now();
                            }
                            for key in d.cleaned {
                                state.fenced.remove(&key);
                            }
                        }
                        Err(error) => {
                            cfg.metrics.sync_errors.inc();
                            let retry_in = backoff.fail();
                            retry_at = Instant::now() + retry_in;
                            changed = true;
                            tracing::warn!(%error, cluster = %cfg.cluster, ?retry_in, "agent round failed");
                        }
                    }
                }
                _ = watches.changed() => {
                    changed = true;
                    tokio::time::sleep(DEBOUNCE).await;
                }
                _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {}
            }
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use serde_json::Value;

    use super::*;

    fn store<K>(objects: Vec<K>) -> Store<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        let (reader, mut writer) = reflector::store();
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::Apply(o));
        }
        reader
    }

    fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).expect("a valid object")
    }

    /// A Placement of TrainJob `uid` on `cluster` at epoch 1, with the status the hub has.
    fn placement(uid: &str, cluster: &str, phase: Option<&str>) -> Placement {
        let mut p = json!({"metadata": {"name": uid, "namespace": "team"},
            "spec": {"trainJobUid": uid, "cluster": cluster, "epoch": 1}});
        if let Some(phase) = phase {
            p["status"] = json!({"phase": phase, "observedEpoch": 1});
        }
        from(p)
    }

    /// A JobSet made now, for `uid`'s placement at `epoch`, with `ready` Jobs.
    fn jobset(uid: &str, epoch: i64, ready: i32) -> JobSet {
        let made = k8s_openapi::jiff::Timestamp::now().to_string();
        from(json!({"metadata": {"name": uid, "namespace": "team", "creationTimestamp": made,
                "labels": {TRAINJOB_UID_LABEL: uid, EPOCH_LABEL: epoch.to_string()}},
            "spec": {"replicatedJobs": []},
            "status": {"replicatedJobsStatus": [{"name": "node", "ready": ready, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]}}))
    }

    fn caches(placements: Vec<Placement>, jobsets: Vec<JobSet>) -> Caches {
        Caches {
            placements: store(placements),
            placements_listed: watch::Listed::default(),
            runtimes: store(Vec::new()),
            cluster_runtimes: store(Vec::new()),
            jobsets: store(jobsets),
            nodes: store(Vec::new()),
            pods: store(Vec::new()),
        }
    }

    fn config() -> AgentConfig {
        AgentConfig {
            cluster: "east".into(),
            levels: Vec::new(),
            capabilities: Capabilities::default(),
            timing: Timing::default(),
            metrics: Metrics::default(),
        }
    }

    fn names(ps: &[Arc<Placement>]) -> Vec<String> {
        ps.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn a_wake_during_a_round_starts_new_placements_and_nothing_else() {
        let c = caches(
            vec![
                placement("new-b", "east", None),
                placement("new-a", "east", None),
                placement("elsewhere", "west", None),
                placement("running", "east", Some("Applied")),
                // Applied, its JobSet gone: Lost, never made again behind the hub's back.
                placement("vanished", "east", Some("Running")),
            ],
            vec![jobset("running", 1, 1), jobset("old-epoch", 0, 1)],
        );
        let mut state = State::default();
        let during = survey(&config(), &c, &mut state, None);
        assert_eq!(names(&during.realise), ["new-a", "new-b"], "queue order, this cluster only");
        assert!(during.round.is_empty(), "statuses and fencing wait for the round: {:?}", during.round);

        // No round running: the same look also finds what to tell the hub and what to fence.
        let between = survey(&config(), &c, &mut state, Some(false));
        assert_eq!(names(&between.realise), ["new-a", "new-b"]);
        let phases: Vec<(&str, PlacementPhase)> =
            between.round.statuses.iter().map(|(_, name, s)| (name.as_str(), s.phase)).collect();
        assert_eq!(phases, [("running", PlacementPhase::Running), ("vanished", PlacementPhase::Lost)]);
        let stale: Vec<&str> = between.round.stale.iter().map(|(k, _)| k.0.as_str()).collect();
        assert_eq!(stale, ["old-epoch"]);
        assert!(!between.round.heartbeat);
    }

    #[test]
    fn what_is_being_realised_or_just_applied_is_neither_started_again_nor_lost() {
        let c = caches(vec![placement("a", "east", Some("Applied")), placement("b", "east", None)], Vec::new());
        let mut state = State::default();
        state.in_flight.insert(("b".into(), 1));
        // Applied by this process, not yet in the JobSet cache.
        state.applied.insert(("a".into(), 1));
        let s = survey(&config(), &c, &mut state, Some(true));
        assert!(s.realise.is_empty());
        assert!(s.round.statuses.is_empty(), "{:?}", s.round.statuses);
        assert!(s.round.heartbeat);
        // Once the JobSet cache has it, `applied` forgets it.
        let c = caches(vec![placement("a", "east", Some("Applied"))], vec![jobset("a", 1, 0)]);
        let s = survey(&config(), &c, &mut state, Some(false));
        assert!(!state.applied.contains(&("a".to_string(), 1)));
        let phases: Vec<PlacementPhase> = s.round.statuses.iter().map(|(_, _, s)| s.phase).collect();
        assert_eq!(phases, [PlacementPhase::Applied], "still Applied, now with the JobSet's counts");
        // Not running start_timeout after its JobSet was made: Unschedulable.
        let mut late = jobset("a", 1, 0);
        late.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(from(json!("2026-01-01T00:00:00Z"))));
        let c = caches(vec![placement("a", "east", Some("Applied"))], vec![late]);
        let s = survey(&config(), &c, &mut state, Some(false));
        let phases: Vec<PlacementPhase> = s.round.statuses.iter().map(|(_, _, s)| s.phase).collect();
        assert_eq!(phases, [PlacementPhase::Unschedulable]);
    }

    #[test]
    fn what_was_fenced_for_a_lost_hub_is_made_again_only_from_a_fresh_list() {
        let c = caches(vec![placement("a", "east", Some("Running"))], Vec::new());
        let mut state = State::default();
        state.fenced.insert(("a".into(), 1), "team".into());
        state.fenced_at = Some(Instant::now());
        // The cache is what the hub-lost time left: the placement may have moved on, unseen.
        let s = survey(&config(), &c, &mut state, Some(false));
        assert!(s.realise.is_empty() && s.round.statuses.is_empty(), "{:?}", s.round.statuses);
        // Listed again since: still placed here, so it is made again.
        c.placements_listed.set(Instant::now() + Duration::from_millis(1));
        let s = survey(&config(), &c, &mut state, Some(false));
        assert_eq!(names(&s.realise), ["a"]);
    }
}
