//! Reporting to the hub: Placement statuses, the heartbeat and the MemberCluster status
//! (gang scheduler, topology, capacity), delivered by a round.

use std::sync::Arc;

use api::stowage::{GangScheduler as ReportedScheduler, MemberCluster, Placement, PlacementPhase, PlacementStatus};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kube_shell::lean::{self, Lean};
use serde_json::{Value, json};

use trainer_render::{self as render};

use crate::caches::{Caches, Key};
use crate::config::{AgentConfig, CONCURRENT_APPLIES};
use crate::error::{Error, kube_err};
use crate::fence::{delete_companions, delete_jobset};
use crate::mirror::{self, MirrorPlan};
use crate::survey::Round;

/// What a round did, for the wake loop to remember.
#[derive(Debug)]
pub(crate) struct Delivered {
    /// The capacity the MemberCluster status was written with; `None` when it was not written.
    pub(crate) capacity: Option<Arc<Value>>,
    /// The whole status was written (the heartbeat's scope), not only the capacity.
    pub(crate) heartbeat: bool,
    /// Keys whose companions it deleted: no longer fenced.
    pub(crate) cleaned: Vec<Key>,
    /// Member Events relayed (best effort, as Events are): UID and count.
    pub(crate) relayed: Vec<(String, i32)>,
}

/// Runs one round: the heartbeat report first (the hub-lost clock must not depend on how long
/// the rest takes), fencing, then capacity before statuses, so the hub never sees a gang
/// running without its GPUs counted as taken.
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster, statuses = round.statuses.len()))]
pub(crate) async fn deliver(
    hub: Client,
    member: Client,
    cfg: AgentConfig,
    caches: Caches,
    round: Round,
    since: Timestamp,
) -> Result<Delivered, Error> {
    let mut capacity = None;
    let heartbeat = round.heartbeat;
    if heartbeat {
        capacity = report(&hub, &member, &cfg, &caches, Scope::Heartbeat, since).await?;
    }
    for (key, js) in &round.stale {
        let ns = js.namespace().unwrap_or_default();
        tracing::info!(jobset = %format!("{ns}/{}", js.name_any()), epoch = key.epoch, "fencing");
        delete_jobset(&member, js).await?;
        delete_companions(&member, &ns, key).await?;
        cfg.metrics.count_fenced(&cfg.cluster);
    }
    let mut cleaned = Vec::new();
    for (key, ns) in round.gone {
        delete_companions(&member, &ns, &key).await?;
        cleaned.push(key);
    }
    if !round.statuses.is_empty() && capacity.is_none() {
        let scope = Scope::Capacity { reported: round.reported_capacity.clone() };
        capacity = report(&hub, &member, &cfg, &caches, scope, since).await?;
    }
    cfg.metrics.jobsets(&cfg.cluster, &round.jobsets);
    let log_tails = &round.log_tails;
    let written: Vec<(String, String, Result<(), Error>)> = futures::stream::iter(round.statuses)
        .map(|(ns, name, mut status)| {
            let (hub, member) = (hub.clone(), member.clone());
            let log = log_tails.get(&(ns.clone(), name.clone())).cloned();
            async move {
                if let (Some((pod, container)), Some(message)) = (log, status.message.as_mut())
                    && let Some(lines) = last_log_lines(&member, &ns, &pod, &container).await
                {
                    message.push_str(": last log lines:\n");
                    message.push_str(&lines);
                }
                let result = write_status(&hub, &ns, &name, &status).await;
                (ns, name, result)
            }
        })
        .buffer_unordered(CONCURRENT_APPLIES)
        .collect()
        .await;
    let mut first_error = write_copies(&hub, &cfg.cluster, round.mirrors).await.err();
    let (records, relayed): (Vec<_>, Vec<_>) = round.relays.into_iter().map(|r| (r.record, r.seen)).unzip();
    kube_shell::events::record_all(&hub, records, CONCURRENT_APPLIES).await;
    for (ns, name, result) in written {
        match result {
            Ok(()) => {
                if let Some(took) = round.started.get(&(ns, name)) {
                    cfg.metrics.observe_start(&cfg.cluster, took.as_secs_f64());
                }
            }
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    first_error.map_or(Ok(Delivered { capacity, heartbeat, cleaned, relayed }), Err)
}

/// How long the agent waits for a failed container's log before it reports without it.
const LOG_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The end of a failed container's log on the member (its last lines, at most 1 KiB), when it
/// can be read in time; a status without them is still worth writing.
async fn last_log_lines(member: &Client, ns: &str, pod: &str, container: &str) -> Option<String> {
    let params = kube::api::LogParams {
        container: Some(container.to_string()),
        tail_lines: Some(20),
        limit_bytes: Some(64 << 10),
        ..Default::default()
    };
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(member.clone(), ns);
    match tokio::time::timeout(LOG_READ_TIMEOUT, pods.logs(pod, &params)).await {
        Ok(Ok(text)) => Some(crate::status::tail(&text).to_string()).filter(|t| !t.is_empty()),
        Ok(Err(e)) => {
            tracing::debug!(pod = %format!("{ns}/{pod}"), error = %e, "the failed container's log");
            None
        }
        Err(_) => None,
    }
}

/// Writes the hub's copies of the member's TrainJob pods (`mirror`): created, then given their
/// status (a create ignores it, as on any API server); changed, whichever of their labels and
/// status changed, each by its own patch; gone, deleted. Each write stands alone: the first
/// error is returned once all were tried. A name already taken on the hub by a pod that is not
/// this member's copy (someone made it first) is that pod's problem, not the round's: it is
/// skipped, said once per round, and never written.
async fn write_copies(hub: &Client, cluster: &str, plan: MirrorPlan) -> Result<(), Error> {
    let MirrorPlan { create, update, delete } = plan;
    enum Write {
        Create(Box<Pod>),
        Update(mirror::Update),
    }
    let writes = create.into_iter().map(|p| Write::Create(Box::new(p))).chain(update.into_iter().map(Write::Update));
    let written: Vec<Result<(), Error>> = futures::stream::iter(writes)
        .map(|w| async move {
            match w {
                Write::Create(copy) => create_copy(hub, cluster, *copy).await,
                Write::Update(update) => update_copy(hub, update).await,
            }
        })
        .buffer_unordered(CONCURRENT_APPLIES)
        .collect()
        .await;
    let deleted: Vec<Result<(), Error>> = futures::stream::iter(delete)
        .map(|(ns, name)| {
            let hub = hub.clone();
            async move {
                match Api::<Pod>::namespaced(hub, &ns).delete(&name, &Default::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    Err(e) => Err(kube_err(format!("deleting the hub's copy of pod {ns}/{name}"))(e)),
                }
            }
        })
        .buffer_unordered(CONCURRENT_APPLIES)
        .collect()
        .await;
    written.into_iter().chain(deleted).find_map(Result::err).map_or(Ok(()), Err)
}

async fn create_copy(hub: &Client, cluster: &str, copy: Pod) -> Result<(), Error> {
    let (ns, name) = (copy.namespace().unwrap_or_default(), copy.name_any());
    let api = Api::<Pod>::namespaced(hub.clone(), &ns);
    let what = || format!("writing the hub's copy of pod {ns}/{name}");
    // The answers are not read: decoded without managedFields, or not at all (`lean`).
    let copy = Lean(copy);
    match lean::api(api.clone()).create(&PostParams::default(), &copy).await {
        Ok(_) => {}
        // Made by an earlier round whose cache had not seen it yet, or squatted.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api.get_opt(&name).await.map_err(kube_err(what()))?;
            if !existing.as_ref().is_some_and(|e| mirror::is_copy_of(e, cluster)) {
                tracing::warn!(pod = %format!("{ns}/{name}"), %cluster, "the hub has a pod of this copy's name that is not this member's copy: no copy made");
                return Ok(());
            }
        }
        Err(e) => return Err(kube_err(what())(e)),
    }
    let status = json!({"status": copy.0.status});
    lean::unread(api)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(|_| ())
        .map_err(kube_err(what()))
}

async fn update_copy(hub: &Client, update: mirror::Update) -> Result<(), Error> {
    let api = lean::unread(Api::<Pod>::namespaced(hub.clone(), &update.namespace));
    let what = || format!("writing the hub's copy of pod {}/{}", update.namespace, update.name);
    if let Some(labels) = &update.labels {
        let patch = json!({"metadata": {"labels": labels}});
        api.patch(&update.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(kube_err(what()))?;
    }
    if let Some(status) = &update.status {
        let patch = json!({"status": status});
        api.patch_status(&update.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(what()))?;
    }
    Ok(())
}

/// The member's virtual Node on the hub, made or refreshed with each heartbeat: its GPUs, and
/// Ready since the agent started reporting (`since`), with the time of this report. Its Lease
/// (`lease`) is what keeps it Ready between these writes.
async fn write_virtual_node(hub: &Client, cfg: &AgentConfig, gpus: u64, since: Timestamp) -> Result<(), Error> {
    let node = mirror::virtual_node(&cfg.cluster, gpus, since, Timestamp::now(), cfg.logs.kubelet());
    let name = mirror::node_name(&cfg.cluster);
    let api = Api::<Node>::all(hub.clone());
    let what = || format!("writing the hub's virtual Node {name}");
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(kube_err(what())(e)),
    }
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": node.status})))
        .await
        .map(|_| ())
        .map_err(kube_err(what()))
}

pub(crate) async fn write_status(hub: &Client, ns: &str, name: &str, status: &PlacementStatus) -> Result<(), Error> {
    lean::unread(Api::<Placement>::namespaced(hub.clone(), ns))
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status.merge_patch()))
        .await
        .map(|_| ())
        .map_err(kube_err(format!("writing Placement {ns}/{name} status")))
}

/// Claims a placement before anything is made for it: its status says it is being made here,
/// written only if the Placement is still as the agent saw it (its resourceVersion). A cache
/// left stale by a lost or slow hub may still show a placement the dispatcher has since moved
/// elsewhere; the claim then fails (409) and nothing is made here, so it never runs twice. A
/// dispatcher deciding from an older look fails its own conditional write instead.
pub(crate) async fn claim(hub: &Client, cluster: &str, p: &Placement) -> Result<(), Error> {
    let (ns, name) = (p.namespace().unwrap_or_default(), p.name_any());
    let status = PlacementStatus {
        phase: PlacementPhase::Pending,
        observed_epoch: p.spec.epoch,
        message: Some(format!("being made on {cluster}")),
        ..PlacementStatus::default()
    };
    let mut body = status.merge_patch();
    body["metadata"] = json!({"resourceVersion": p.resource_version()});
    lean::unread(Api::<Placement>::namespaced(hub.clone(), &ns))
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(kube_err(format!("claiming Placement {ns}/{name} (changed since seen?)")))
}

/// Which gang scheduler the member runs: the one the agent was told to render for, else from its
/// CRDs (coscheduling first when several are).
pub(crate) async fn detect_gang_scheduler(
    member: &Client,
    told: render::GangScheduler,
) -> Result<ReportedScheduler, Error> {
    match told {
        render::GangScheduler::Coscheduling => return Ok(ReportedScheduler::Coscheduling),
        render::GangScheduler::Volcano => return Ok(ReportedScheduler::Volcano),
        render::GangScheduler::Kai => return Ok(ReportedScheduler::Kai),
        render::GangScheduler::Native => return Ok(ReportedScheduler::Native),
        render::GangScheduler::None | render::GangScheduler::FromRuntime => {}
    }
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
pub(crate) async fn heartbeat(hub: &Client, cfg: &AgentConfig) -> Result<(), Error> {
    let status = json!({"status": {"heartbeatTime": Timestamp::now().to_string()}});
    Api::<MemberCluster>::all(hub.clone())
        .patch_status(&cfg.cluster, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(|_| ())
        .map_err(kube_err(format!("writing MemberCluster {} heartbeat", cfg.cluster)))
}

/// How much of the MemberCluster status a report writes. A merge patch leaves the rest as last
/// written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scope {
    /// Everything, with the gang scheduler detected afresh.
    Heartbeat,
    /// Between heartbeats, to count new pods: the capacity ([`crate::capacity::Report`]: the
    /// summary, `counted` and `bound`, always together). Nothing is written when the capacity is
    /// what the last report wrote (`reported`): a burst's rounds, one after another, would
    /// otherwise each write the same.
    Capacity { reported: Option<Arc<Value>> },
}

impl Scope {
    fn name(&self) -> &'static str {
        match self {
            Scope::Heartbeat => "heartbeat",
            Scope::Capacity { .. } => "capacity",
        }
    }
}

/// Writes the MemberCluster status, capacity summarised from the Node and Pod caches.
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster, scope = scope.name()))]
pub(crate) async fn report(
    hub: &Client,
    member: &Client,
    cfg: &AgentConfig,
    caches: &Caches,
    scope: Scope,
    since: Timestamp,
) -> Result<Option<Arc<Value>>, Error> {
    let (nodes, pods) = (caches.nodes.state(), caches.pods.state());
    let capacity = crate::capacity::report(&cfg.levels, &cfg.node_labels, &nodes, &pods);
    cfg.metrics.report_left_out(&cfg.cluster, capacity.counted_left_out, capacity.bound_left_out);
    cfg.metrics.summary_cut(&cfg.cluster, capacity.levels_dropped, capacity.domains_left_out);
    if capacity.levels_dropped > 0 {
        tracing::warn!(
            dropped = capacity.levels_dropped,
            levels = ?capacity.levels.iter().map(|l| l.level.as_str()).collect::<Vec<_>>(),
            "the capacity summary by every topology level is over its size budget: summarised by fewer levels, so \
             the hub places this member's gangs by wider domains"
        );
    }
    if !capacity.oversized.is_empty() {
        tracing::warn!(
            nodes = ?capacity.oversized,
            "nodes with more nvidia.com/gpu allocatable than any node has (a broken device plugin?) are left out of \
             the capacity report"
        );
    }
    if capacity.domains_left_out > 0 {
        tracing::error!(
            left_out = capacity.domains_left_out,
            kept = capacity.domains.len(),
            "the capacity summary is over its size budget even without topology levels (too many node classes: \
             is a label every node has its own value of among --node-labels?): the hub does not see the nodes left out"
        );
    }
    if capacity.counted_left_out > 0 {
        tracing::warn!(
            left_out = capacity.counted_left_out,
            kept = capacity.counted.len(),
            "status.counted is over its size budget: the hub takes the room of the placements left out that are not \
             yet reported running on top of the summary, and cannot tell if one of them vanishes"
        );
    }
    if capacity.bound_left_out > 0 {
        tracing::warn!(
            left_out = capacity.bound_left_out,
            kept = capacity.bound.len(),
            "status.bound is over its size budget: the placements left out are not evictable from the hub"
        );
    }
    let gpus: u64 = capacity.domains.iter().map(|d| d.allocatable_gpus).fold(0, u64::saturating_add);
    let capacity = json!(capacity);
    if let Scope::Capacity { reported: Some(reported) } = &scope
        && **reported == capacity
    {
        return Ok(None);
    }
    let mut status = capacity.clone();
    status["heartbeatTime"] = Timestamp::now().to_string().into();
    if scope == Scope::Heartbeat {
        write_virtual_node(hub, cfg, gpus, since).await?;
        status["agentVersion"] = env!("CARGO_PKG_VERSION").into();
        status["gangScheduler"] = json!(detect_gang_scheduler(member, cfg.capabilities.gang_scheduler).await?);
        status["kueue"] = matches!(cfg.capabilities.topology_mode, render::TopologyMode::Kueue).into();
        // Not `topologyLevels`: it goes with the summary (the levels the summary is by, fewer
        // than `cfg.levels` for a member too large), so the two never disagree.
        status["logs"] = cfg.logs.describe().into();
    }
    Api::<MemberCluster>::all(hub.clone())
        .patch_status(&cfg.cluster, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
        .await
        .map_err(kube_err(format!("writing MemberCluster {} status", cfg.cluster)))?;
    Ok(Some(Arc::new(capacity)))
}
