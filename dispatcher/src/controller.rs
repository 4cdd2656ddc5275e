//! The dispatcher's shell: watch the hub, call [`decide`](crate::decide::decide), write.
//!
//! Reflectors keep caches of the eight kinds it reads, and of Kueue's where the hub serves them
//! (WorkloadPriorityClass; LocalQueue, ClusterQueue and ResourceFlavor; with `--kueue
//! multikueue` Workload, AdmissionCheck and MultiKueue's two kinds). Any change (or the resync
//! tick, which drives time-based decisions such as a member's grace period) wakes a cycle. It
//! keeps nothing between cycles but the writes its caches have not caught up with yet, since
//! when each placement reported Running has gone uncounted, and its nominations' times, so a
//! restart or a new leader rebuilds everything from hub objects (and waits a grace period
//! before calling such a placement lost). Placement writes are conditional (create, or replace
//! at the observed resourceVersion), so a deposed leader racing a new one cannot leave two
//! answers. Failed cycles back off exponentially.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::kueue::{
    ADMISSION_FIELD_MANAGER, AdmissionCheck, ClusterQueue, LocalQueue, MultiKueueCluster, MultiKueueConfig,
    ResourceFlavor, Workload, WorkloadPriorityClass,
};
use api::stowage::{MemberCluster, Placement, Queue};
use api::trainer::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource};
use kube_shell::backoff::Backoff;
use kube_shell::watch::{self, Watches};
use serde_json::json;

use crate::decide::events::{self, EventWrite};
use crate::decide::{
    KueueMode, MemberConditionWrite, NominationWrite, Observed, PlacementWrite, Plan, QueueStatusWrite, Remembered,
    Settings, StatusWrite, WorkloadKey, decide,
};
use crate::leader::{self, LeaderConfig, Leadership};
use crate::metrics::Metrics;
use futures::StreamExt;

pub const FIELD_MANAGER: &str = "stowage-dispatcher";
/// How long a burst of watch events may land before a cycle decides on them: a cycle costs a
/// snapshot of the whole fleet, so it waits longer than the agent does.
const DEBOUNCE: Duration = Duration::from_millis(20);

#[derive(Debug, Clone)]
pub struct Options {
    pub config: scheduler_core::Config,
    pub settings: Settings,
    /// Elect a leader over this Lease; `None`: this replica always leads.
    pub leader: Option<LeaderConfig>,
    /// A cycle runs at least this often even when nothing changes.
    pub resync: Duration,
    pub metrics: Metrics,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config: scheduler_core::Config::stowage(),
            settings: Settings::default(),
            leader: None,
            resync: Duration::from_secs(1),
            metrics: Metrics::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing {what} {namespace}/{name}")]
    Write {
        what: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// A stable name for the kind of failure: a metric label, never a message.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Write { source, .. } => kube_shell::metrics::api_error_kind(source),
        }
    }
}

/// The hub caches a cycle reads.
struct Caches {
    trainjobs: Store<TrainJob>,
    cluster_runtimes: Store<ClusterTrainingRuntime>,
    runtimes: Store<TrainingRuntime>,
    members: Store<MemberCluster>,
    placements: Store<Placement>,
    queues: Store<Queue>,
    /// Their labels, for the Queues' namespace selectors.
    namespaces: Store<Namespace>,
    priority_classes: Store<PriorityClass>,
    /// Kueue's WorkloadPriorityClasses, watched only where the hub serves them (found at start).
    workload_priority_classes: Option<Store<WorkloadPriorityClass>>,
    /// What MultiKueue's external dispatcher reads (`--kueue multikueue`).
    multikueue: Option<MultiKueueCaches>,
    /// Kueue's queues, where the hub serves them and Kueue does not run there (`--kueue labels`).
    kueue_queues: Option<KueueQueueCaches>,
}

struct KueueQueueCaches {
    local: Store<LocalQueue>,
    cluster: Store<ClusterQueue>,
    flavors: Store<ResourceFlavor>,
}

struct MultiKueueCaches {
    workloads: Store<Workload>,
    admission_checks: Store<AdmissionCheck>,
    configs: Store<MultiKueueConfig>,
    clusters: Store<MultiKueueCluster>,
}

impl Caches {
    fn start(hub: &Client, watches: &mut Watches, served: Served, kueue: KueueMode) -> Self {
        let all = watcher::Config::default;
        let kueue_queues = (served.kueue_queues && kueue == KueueMode::Labels).then(|| KueueQueueCaches {
            local: watches.watch(Api::all(hub.clone()), all()),
            cluster: watches.watch(Api::all(hub.clone()), all()),
            flavors: watches.watch(Api::all(hub.clone()), all()),
        });
        let multikueue = (kueue == KueueMode::MultiKueue).then(|| MultiKueueCaches {
            workloads: watches.watch(Api::all(hub.clone()), all()),
            admission_checks: watches.watch(Api::all(hub.clone()), all()),
            configs: watches.watch(Api::all(hub.clone()), all()),
            clusters: watches.watch(Api::all(hub.clone()), all()),
        });
        Caches {
            multikueue,
            kueue_queues,
            trainjobs: watches.watch(Api::all(hub.clone()), all()),
            cluster_runtimes: watches.watch(Api::all(hub.clone()), all()),
            runtimes: watches.watch(Api::all(hub.clone()), all()),
            members: watches.watch(Api::all(hub.clone()), all()),
            placements: watches.watch(Api::all(hub.clone()), all()),
            queues: watches.watch(Api::all(hub.clone()), all()),
            namespaces: watches.watch(Api::all(hub.clone()), all()),
            priority_classes: watches.watch(Api::all(hub.clone()), all()),
            workload_priority_classes: served
                .workload_priority_classes
                .then(|| watches.watch(Api::all(hub.clone()), all())),
        }
    }

    /// Whether a Kueue kind this mode reads is not watched yet: the hub did not serve it at start
    /// (Kueue's CRDs not installed yet).
    fn missing(&self, kueue: KueueMode) -> bool {
        self.workload_priority_classes.is_none() || (kueue == KueueMode::Labels && self.kueue_queues.is_none())
    }

    /// Starts the caches of the Kueue kinds the hub serves now but did not before (an admin
    /// installed Kueue's CRDs on a running hub), each waited for a while to fill. Whether any
    /// started.
    async fn grow(&mut self, hub: &Client, watches: &mut Watches, kueue: KueueMode) -> bool {
        let served = Served::find(hub).await;
        let all = watcher::Config::default;
        let mut grown = false;
        if self.workload_priority_classes.is_none() && served.workload_priority_classes {
            let store: Store<WorkloadPriorityClass> = watches.watch(Api::all(hub.clone()), all());
            let _ = tokio::time::timeout(GROW_WAIT, store.wait_until_ready()).await;
            self.workload_priority_classes = Some(store);
            grown = true;
        }
        if self.kueue_queues.is_none() && served.kueue_queues && kueue == KueueMode::Labels {
            let k = KueueQueueCaches {
                local: watches.watch(Api::all(hub.clone()), all()),
                cluster: watches.watch(Api::all(hub.clone()), all()),
                flavors: watches.watch(Api::all(hub.clone()), all()),
            };
            let filled = async {
                tokio::join!(k.local.wait_until_ready(), k.cluster.wait_until_ready(), k.flavors.wait_until_ready())
            };
            let _ = tokio::time::timeout(GROW_WAIT, filled).await;
            self.kueue_queues = Some(k);
            grown = true;
        }
        if grown {
            tracing::info!(?served, "the hub serves Kueue's kinds now: watching them");
        }
        grown
    }

    async fn ready(&self) {
        let _ = tokio::join!(
            self.trainjobs.wait_until_ready(),
            self.cluster_runtimes.wait_until_ready(),
            self.runtimes.wait_until_ready(),
            self.members.wait_until_ready(),
            self.placements.wait_until_ready(),
            self.queues.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.priority_classes.wait_until_ready(),
        );
        if let Some(s) = &self.workload_priority_classes {
            let _ = s.wait_until_ready().await;
        }
        if let Some(k) = &self.kueue_queues {
            let _ =
                tokio::join!(k.local.wait_until_ready(), k.cluster.wait_until_ready(), k.flavors.wait_until_ready());
        }
        if let Some(k) = &self.multikueue {
            let _ = tokio::join!(
                k.workloads.wait_until_ready(),
                k.admission_checks.wait_until_ready(),
                k.configs.wait_until_ready(),
                k.clusters.wait_until_ready(),
            );
        }
    }

    fn observe(&self) -> Observed {
        Observed {
            trainjobs: watch::snapshot(&self.trainjobs),
            cluster_runtimes: watch::snapshot(&self.cluster_runtimes),
            runtimes: watch::snapshot(&self.runtimes),
            members: watch::snapshot(&self.members),
            placements: watch::snapshot(&self.placements),
            queues: watch::snapshot(&self.queues),
            namespaces: watch::snapshot(&self.namespaces),
            priority_classes: watch::snapshot(&self.priority_classes),
            workload_priority_classes: self.workload_priority_classes.as_ref().map(watch::snapshot).unwrap_or_default(),
            local_queues: self.kueue_queues.as_ref().map(|k| watch::snapshot(&k.local)).unwrap_or_default(),
            cluster_queues: self.kueue_queues.as_ref().map(|k| watch::snapshot(&k.cluster)).unwrap_or_default(),
            resource_flavors: self.kueue_queues.as_ref().map(|k| watch::snapshot(&k.flavors)).unwrap_or_default(),
            workloads: self.multikueue.as_ref().map(|k| watch::snapshot(&k.workloads)).unwrap_or_default(),
            admission_checks: self
                .multikueue
                .as_ref()
                .map(|k| watch::snapshot(&k.admission_checks))
                .unwrap_or_default(),
            multikueue_configs: self.multikueue.as_ref().map(|k| watch::snapshot(&k.configs)).unwrap_or_default(),
            multikueue_clusters: self.multikueue.as_ref().map(|k| watch::snapshot(&k.clusters)).unwrap_or_default(),
            uncounted_since: BTreeMap::new(),
            epochs: BTreeMap::new(),
            kueue_memory: BTreeMap::new(),
        }
    }
}

/// Writes made but not yet seen in the caches: without them the next cycle would place a
/// TrainJob twice or count its capacity free (the scheduler's "assumed" cache).
#[derive(Debug, Default)]
struct Written {
    placements: BTreeMap<(String, String), Placement>,
    statuses: BTreeMap<
        (String, String),
        (Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>, Vec<api::trainer::JobStatus>),
    >,
    /// The last cycle's memory of placements reported Running and not counted (see
    /// [`Observed::uncounted_since`]); forgotten with the leadership.
    uncounted_since: BTreeMap<api::stowage::PlacementKey, k8s_openapi::jiff::Timestamp>,
    /// The last cycle's memory of each TrainJob's highest epoch (see [`Observed::epochs`]).
    epochs: BTreeMap<String, i64>,
    /// Workloads as the nominations applied left them, by the resourceVersion they replaced.
    workloads: BTreeMap<(String, String), (Option<String>, Workload)>,
    /// The last cycle's memory of the Workloads it nominates.
    kueue_memory: BTreeMap<WorkloadKey, Remembered>,
}

impl Written {
    /// Lays unseen writes over the observed objects, forgetting those the caches now show.
    fn overlay(&mut self, o: &mut Observed) {
        o.uncounted_since = self.uncounted_since.clone();
        o.epochs = self.epochs.clone();
        o.kueue_memory = self.kueue_memory.clone();
        let key =
            |m: &kube::api::ObjectMeta| (m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default());
        self.placements.retain(|k, ours| match o.placements.iter_mut().find(|p| key(&p.metadata) == *k) {
            Some(seen) if seen.spec.epoch >= ours.spec.epoch => false,
            Some(seen) => {
                *seen = ours.clone();
                true
            }
            None => {
                o.placements.push(ours.clone());
                true
            }
        });
        self.statuses.retain(|k, (conditions, jobs)| {
            let Some(tj) = o.trainjobs.iter_mut().find(|t| key(&t.metadata) == *k) else { return false };
            let status = tj.status.get_or_insert_with(Default::default);
            if status.conditions == *conditions && status.jobs_status == *jobs {
                return false;
            }
            status.conditions = conditions.clone();
            status.jobs_status = jobs.clone();
            true
        });
        // A cached Workload still at the version a nomination replaced is shown as written.
        self.workloads.retain(|k, (replaced, ours)| {
            let Some(seen) = o.workloads.iter_mut().find(|w| key(&w.metadata) == *k) else { return false };
            let stale = seen.metadata.resource_version == *replaced;
            if stale {
                *seen = ours.clone();
            }
            stale
        });
    }
}

/// Writes in flight at once: a burst of TrainJobs is placed in one cycle, and its writes should
/// not queue behind each other's round trips.
const CONCURRENT_WRITES: usize = 16;

async fn write_placement(hub: &Client, w: &PlacementWrite) -> Result<Option<Placement>, Error> {
    let api = Api::<Placement>::namespaced(hub.clone(), &w.namespace);
    let p = w.object();
    let result = match &w.replaces {
        None => api.create(&PostParams::default(), &p).await,
        Some(_) => api.replace(&w.name, &PostParams::default(), &p).await,
    };
    match result {
        Ok(p) => match w.withdrawn_status().filter(|s| p.status.as_ref() != Some(s)) {
            // Withdrawn: no agent writes its status any more, so the dispatcher clears what the
            // last one wrote (a Running phase, a "being made on" message, its counts).
            Some(status) => {
                let patch = Patch::Merge(status.merge_patch());
                match api.patch_status(&w.name, &PatchParams::default(), &patch).await {
                    Ok(p) => Ok(Some(p)),
                    Err(e) => {
                        let placement = format!("{}/{}", w.namespace, w.name);
                        tracing::warn!(%placement, error = %e, "clearing a withdrawn Placement's status");
                        Ok(Some(p))
                    }
                }
            }
            None => Ok(Some(p)),
        },
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::debug!(placement = %format!("{}/{}", w.namespace, w.name), "changed since observed; next cycle");
            Ok(None)
        }
        Err(source) => {
            Err(Error::Write { what: "Placement", namespace: w.namespace.clone(), name: w.name.clone(), source })
        }
    }
}

/// Applies a nomination as Kueue writes its admission status: as `kueue-admission`, forced (its
/// fields are Kueue's), at the observed resourceVersion. A conflict means the Workload changed
/// since: the next cycle decides on what it is now.
async fn write_nomination(hub: &Client, n: &NominationWrite) -> Result<Option<Workload>, Error> {
    let pp = PatchParams::apply(ADMISSION_FIELD_MANAGER).force();
    match Api::<Workload>::namespaced(hub.clone(), &n.namespace)
        .patch_status(&n.name, &pp, &Patch::Apply(&n.apply))
        .await
    {
        Ok(w) => Ok(Some(w)),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
            tracing::debug!(workload = %format!("{}/{}", n.namespace, n.name), "changed since observed; next cycle");
            Ok(None)
        }
        Err(source) => Err(Error::Write {
            what: "Workload nomination",
            namespace: n.namespace.clone(),
            name: n.name.clone(),
            source,
        }),
    }
}

async fn write_status(hub: &Client, s: &StatusWrite) -> Result<(), Error> {
    let body = json!({"status": {"conditions": s.conditions, "jobsStatus": s.jobs}});
    Api::<TrainJob>::namespaced(hub.clone(), &s.namespace)
        .patch_status(&s.name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| Error::Write {
            what: "TrainJob status",
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            source,
        })
}

async fn write_member_conditions(hub: &Client, m: &MemberConditionWrite) -> Result<(), Error> {
    let body = json!({"status": {"conditions": m.conditions}});
    Api::<MemberCluster>::all(hub.clone())
        .patch_status(&m.name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| Error::Write {
            what: "MemberCluster conditions",
            namespace: String::new(),
            name: m.name.clone(),
            source,
        })
}

async fn write_queue_status(hub: &Client, q: &QueueStatusWrite) -> Result<(), Error> {
    let body = json!({"status": q.status});
    Api::<api::stowage::Queue>::all(hub.clone())
        .patch_status(&q.name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| Error::Write { what: "Queue status", namespace: String::new(), name: q.name.clone(), source })
}

/// An Event of a cycle's, as the shell records it.
fn record_of(e: EventWrite) -> kube_shell::events::Record {
    kube_shell::events::Record {
        name: e.name,
        involved: ObjectReference {
            api_version: Some(e.kind.api_version()),
            kind: Some(e.kind.as_str().into()),
            name: Some(e.object),
            namespace: Some(e.namespace),
            uid: Some(e.uid),
            ..Default::default()
        },
        type_: e.type_.as_str().into(),
        reason: e.reason.as_str().into(),
        message: e.message,
        times: 1,
        component: FIELD_MANAGER.into(),
    }
}

/// Writes the plan. A conflict means someone else (another leader, an agent's status write)
/// changed the Placement since it was observed: skip it, the next cycle sees the change.
async fn apply(hub: &Client, plan: &Plan, written: &mut Written, metrics: &Metrics) -> Result<(), Error> {
    // Owned items: a stream of borrowed ones trips the compiler's higher-ranked lifetime check
    // inside the spawned controller future.
    let placed: Vec<(PlacementWrite, Result<Option<Placement>, Error>)> =
        futures::stream::iter(plan.placements.clone())
            .map(|w| {
                let hub = hub.clone();
                async move {
                    let r = write_placement(&hub, &w).await;
                    (w, r)
                }
            })
            .buffer_unordered(CONCURRENT_WRITES)
            .collect()
            .await;
    let mut first_error = None;
    let mut events = Vec::new();
    for (w, result) in placed {
        match result {
            Ok(Some(p)) => {
                events.extend(events::of_placement(&w));
                metrics.written(w.effect.placed.as_ref(), w.effect.redispatch.as_ref().map(|m| m.reason));
                if let Some(placed) = &w.effect.placed {
                    // Once per decision, and only for one that was made.
                    tracing::info!(
                        trainjob = %format!("{}/{}", w.namespace, w.name),
                        cluster = %placed.cluster,
                        locality = placed.locality.map_or("cluster", |l| l.as_str()),
                        epoch = w.spec.epoch,
                        // Why it left the member it was on, if it was on one.
                        moved = w.effect.redispatch.as_ref().map_or("-", |m| m.reason.as_str()),
                        "placed"
                    );
                }
                written.placements.insert((w.namespace, w.name), p);
            }
            Ok(None) => {}
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    let statuses: Vec<(StatusWrite, Result<(), Error>)> = futures::stream::iter(plan.statuses.clone())
        .map(|s| {
            let hub = hub.clone();
            async move {
                let r = write_status(&hub, &s).await;
                (s, r)
            }
        })
        .buffer_unordered(CONCURRENT_WRITES)
        .collect()
        .await;
    for (s, result) in statuses {
        match result {
            Ok(()) => {
                // Once per reason a TrainJob comes to wait for, as its Pending Event.
                for e in s.events.iter().filter(|e| e.reason == events::EventReason::Pending) {
                    tracing::info!(trainjob = %format!("{}/{}", e.namespace, e.object), why = %e.message, "waiting");
                }
                events.extend(s.events);
                written.statuses.insert((s.namespace, s.name), (s.conditions, s.jobs));
            }
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    // A few Queues and refused members at most: written one after another.
    for q in &plan.queues {
        if let Err(e) = write_queue_status(hub, q).await {
            first_error = first_error.or(Some(e));
        }
    }
    for m in &plan.members {
        if let Err(e) = write_member_conditions(hub, m).await {
            first_error = first_error.or(Some(e));
        }
    }
    for n in &plan.nominations {
        match write_nomination(hub, n).await {
            Ok(Some(w)) => {
                let workload = format!("{}/{}", n.namespace, n.name);
                match n.clusters.first() {
                    Some(cluster) => tracing::info!(%workload, %cluster, "nominated"),
                    None => tracing::info!(%workload, "nomination withdrawn"),
                }
                let replaced =
                    n.apply.pointer("/metadata/resourceVersion").and_then(|v| v.as_str()).map(str::to_string);
                written.workloads.insert((n.namespace.clone(), n.name.clone()), (replaced, w));
            }
            Ok(None) => {}
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    let records = events.into_iter().chain(plan.workload_events.iter().cloned()).map(record_of);
    kube_shell::events::record_all(hub, records.collect(), CONCURRENT_WRITES).await;
    first_error.map_or(Ok(()), Err)
}

/// One cycle over an observed hub: decide and write.
#[tracing::instrument(skip_all, fields(trainjobs = observed.trainjobs.len()))]
async fn cycle(hub: &Client, observed: &Observed, opts: &Options, written: &mut Written) -> Result<Plan, Error> {
    let started = std::time::Instant::now();
    let plan = decide(observed, &opts.config, &opts.settings, Time(k8s_openapi::jiff::Timestamp::now()));
    written.uncounted_since = plan.uncounted_since.clone();
    written.epochs = plan.epochs.clone();
    written.kueue_memory = plan.kueue_memory.clone();
    let result = apply(hub, &plan, written, &opts.metrics).await;
    opts.metrics.cycles.inc();
    opts.metrics.cycle_duration.observe(started.elapsed().as_secs_f64());
    opts.metrics.show(&plan.figures);
    if let Some(b) = &plan.batch {
        opts.metrics.batch_solves.inc();
        opts.metrics.solver_gap.set(b.gap().unwrap_or(0.0));
        if b.kept_ilp {
            opts.metrics.batch_kept.inc();
        }
    }
    tracing::debug!(
        placements = plan.placements.len(),
        statuses = plan.statuses.len(),
        pending = plan.pending,
        "cycle"
    );
    result.map(|()| plan)
}

/// One look at the hub, listed now rather than cached: what `stowage explain` reasons from.
pub async fn observe_once(hub: &Client) -> Result<Observed, kube::Error> {
    async fn all<K>(hub: &Client) -> Result<Vec<K>, kube::Error>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        Ok(Api::<K>::all(hub.clone()).list(&Default::default()).await?.items)
    }
    let served = Served::find(hub).await;
    let workload_priority_classes = if served.workload_priority_classes { all(hub).await? } else { Vec::new() };
    let (local_queues, cluster_queues, resource_flavors) =
        if served.kueue_queues { (all(hub).await?, all(hub).await?, all(hub).await?) } else { Default::default() };
    // Kueue's Workloads say where a TrainJob Kueue queues stands (explain reads them).
    let workloads = if served.workloads { all(hub).await? } else { Vec::new() };
    Ok(Observed {
        trainjobs: all(hub).await?,
        cluster_runtimes: all(hub).await?,
        runtimes: all(hub).await?,
        members: all(hub).await?,
        placements: all(hub).await?,
        queues: all(hub).await?,
        namespaces: all(hub).await?,
        priority_classes: all(hub).await?,
        workload_priority_classes,
        local_queues,
        cluster_queues,
        resource_flavors,
        workloads,
        ..Observed::default()
    })
}

/// How often a hub without Kueue's CRDs is asked again whether it serves them now.
const GROW_EVERY: Duration = Duration::from_secs(10);
/// How long a cache started later is waited for before a cycle reads it.
const GROW_WAIT: Duration = Duration::from_secs(10);

/// Which of Kueue's optional kinds the hub serves (looked up at start, and again while some are
/// not: [`Caches::grow`]).
#[derive(Debug, Clone, Copy)]
struct Served {
    workload_priority_classes: bool,
    /// LocalQueue, ClusterQueue and ResourceFlavor.
    kueue_queues: bool,
    workloads: bool,
}

impl Served {
    /// From the hub's discovery of Kueue's group alone: a hub without it answers with its group
    /// list, not one 404 per kind (a dispatcher asks again every [`GROW_EVERY`] while a kind is
    /// missing).
    async fn find(hub: &Client) -> Self {
        let group = LocalQueue::group(&()).into_owned();
        let found = kube::Discovery::new(hub.clone()).filter(&[group.as_str()]).run().await;
        let serves = |gvk: kube::api::GroupVersionKind| found.as_ref().is_ok_and(|d| d.resolve_gvk(&gvk).is_some());
        Served {
            workload_priority_classes: serves(gvk::<WorkloadPriorityClass>()),
            kueue_queues: serves(gvk::<LocalQueue>())
                && serves(gvk::<ClusterQueue>())
                && serves(gvk::<ResourceFlavor>()),
            workloads: serves(gvk::<api::kueue::Workload>()),
        }
    }
}

fn gvk<K: kube::Resource<DynamicType = ()>>() -> kube::api::GroupVersionKind {
    kube::api::GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&()))
}

/// Runs until dropped: campaigns for leadership if configured, and while leading runs a cycle on
/// every change or resync tick. Errors are logged and retried with exponential back-off.
pub async fn run(hub: Client, opts: Options) {
    let leadership = Arc::new(match &opts.leader {
        Some(_) => Leadership::default(),
        None => Leadership::always(),
    });
    let mut watches = Watches::new();
    let served = Served::find(&hub).await;
    let mut caches = Caches::start(&hub, &mut watches, served, opts.settings.kueue);
    let mut looked = tokio::time::Instant::now();
    let mut campaign = tokio::task::JoinSet::new();
    if let Some(cfg) = opts.leader.clone() {
        campaign.spawn(leader::campaign(hub.clone(), cfg, leadership.clone()));
    }
    caches.ready().await;
    opts.metrics.ready.set();
    let mut written = Written::default();
    let mut backoff = Backoff::default();
    loop {
        tokio::select! {
            _ = watches.changed() => {}
            _ = tokio::time::sleep(opts.resync) => {}
        }
        tokio::time::sleep(DEBOUNCE).await;
        opts.metrics.leader.set(i64::from(leadership.is_leading()));
        if !leadership.is_leading() {
            written = Written::default();
            // The leader's figures are the fleet's; a follower shows none.
            opts.metrics.show(&crate::decide::figures::Figures::default());
            continue;
        }
        if caches.missing(opts.settings.kueue) && looked.elapsed() >= GROW_EVERY {
            looked = tokio::time::Instant::now();
            caches.grow(&hub, &mut watches, opts.settings.kueue).await;
        }
        let mut observed = caches.observe();
        written.overlay(&mut observed);
        match cycle(&hub, &observed, &opts, &mut written).await {
            Ok(_) => backoff.succeed(),
            Err(error) => {
                opts.metrics.reconcile_error(error.kind());
                let retry_in = backoff.fail();
                tracing::warn!(error = %kube_shell::error_chain(&error), kind = error.kind(), ?retry_in, "dispatcher cycle failed");
                tokio::time::sleep(retry_in).await;
                watches.poke();
            }
        }
    }
}
