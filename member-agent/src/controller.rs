//! The member agent's shell, pull mode: it reads from the hub the Placements for its cluster and
//! their TrainJobs and runtimes, renders them (pure), applies the objects to its member with
//! server-side apply, deletes what older epochs made (fencing), and reports Placement status
//! from the JobSet and its MemberCluster's status (heartbeat, topology, capacity).

use std::collections::BTreeSet;
use std::time::Duration;

use api::jobset::JobSet;
use api::stowage::{EPOCH_LABEL, MemberCluster, Placement, PlacementPhase, TRAINJOB_UID_LABEL, TopologyLevel};
use api::trainer::{ClusterTrainingRuntime, JobStatus, Runtime, TrainJob, TrainingRuntime};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::render::{self, Capabilities, Input, Object};

pub const FIELD_MANAGER: &str = "stowage-agent";
pub const SYNC_INTERVAL: Duration = Duration::from_millis(500);
use api::stowage::SIMULATED_DURATION_ANNOTATION as SIMULATED_DURATION;

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub cluster: String,
    pub levels: Vec<TopologyLevel>,
    pub capabilities: Capabilities,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action}: {source}")]
    Kube { action: String, source: kube::Error },
    #[error("rendering {namespace}/{name}: {source}")]
    Render { namespace: String, name: String, source: render::RenderError },
    #[error(transparent)]
    Key(#[from] crate::sshkey::KeyError),
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

fn resource_of(o: &Object) -> ApiResource {
    let (group, version, kind, plural) = match o {
        Object::JobSet(_) => ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
        Object::Coscheduling(_) => ("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"),
        Object::Volcano(_) => ("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups"),
        Object::Kai(_) => ("scheduling.run.ai", "v2alpha2", "PodGroup", "podgroups"),
        Object::ConfigMap(_) => ("", "v1", "ConfigMap", "configmaps"),
        Object::Secret(_) => ("", "v1", "Secret", "secrets"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn runtime(hub: &Client, tj: &TrainJob) -> Result<Runtime, Error> {
    let r = &tj.spec.runtime_ref;
    Ok(match r.kind_or_default() {
        "TrainingRuntime" => Runtime::Namespaced(
            Api::<TrainingRuntime>::namespaced(hub.clone(), &tj.namespace().unwrap_or_default())
                .get(&r.name)
                .await
                .map_err(kube_err(format!("reading TrainingRuntime {}", r.name)))?,
        ),
        _ => Runtime::Cluster(
            Api::<ClusterTrainingRuntime>::all(hub.clone())
                .get(&r.name)
                .await
                .map_err(kube_err(format!("reading ClusterTrainingRuntime {}", r.name)))?,
        ),
    })
}

/// Applies one placement's objects to the member.
async fn realise(hub: &Client, member: &Client, cfg: &AgentConfig, p: &Placement) -> Result<(), Error> {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let tj = Api::<TrainJob>::namespaced(hub.clone(), &ns)
        .get(&name)
        .await
        .map_err(kube_err(format!("reading TrainJob {ns}/{name}")))?;
    let rt = runtime(hub, &tj).await?;
    let namespaces: Api<Namespace> = Api::all(member.clone());
    if namespaces.get_opt(&ns).await.map_err(kube_err("reading namespace"))?.is_none() {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap_or_default();
        namespaces.create(&PostParams::default(), &n).await.map_err(kube_err(format!("creating namespace {ns}")))?;
    }
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

/// The Placement status the member's JobSet implies.
fn status_of(js: Option<&JobSet>, epoch: i64) -> serde_json::Value {
    let Some(js) = js else { return json!({"phase": "Pending", "observedEpoch": epoch}) };
    let st = js.status.clone().unwrap_or_default();
    let is = |t: &str| st.conditions.iter().any(|c| c.type_ == t && c.status == "True");
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
    let phase = if is("Completed") {
        PlacementPhase::Succeeded
    } else if is("Failed") {
        PlacementPhase::Failed
    } else if jobs.iter().any(|j| j.ready > 0 || j.succeeded > 0) {
        PlacementPhase::Running
    } else {
        PlacementPhase::Applied
    };
    let message = st.conditions.iter().find(|c| c.status == "True").map(|c| c.message.clone());
    json!({"phase": phase, "observedEpoch": epoch, "jobsStatus": jobs, "message": message})
}

/// One sync: realise this cluster's placements, fence stale objects, report status.
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster))]
pub async fn sync_once(hub: &Client, member: &Client, cfg: &AgentConfig) -> Result<(), Error> {
    let placements: Vec<Placement> = Api::<Placement>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .map_err(kube_err("listing placements"))?
        .items
        .into_iter()
        .filter(|p| p.spec.cluster == cfg.cluster)
        .collect();
    let mut current: BTreeSet<(String, String)> = BTreeSet::new();
    for p in &placements {
        current.insert((p.spec.train_job_uid.clone(), p.spec.epoch.to_string()));
        let ns = p.namespace().unwrap_or_default();
        let done =
            p.status.as_ref().is_some_and(|s| matches!(s.phase, PlacementPhase::Succeeded | PlacementPhase::Failed));
        if !done {
            realise(hub, member, cfg, p).await?;
        }
        let js = Api::<JobSet>::namespaced(member.clone(), &ns)
            .get_opt(&p.name_any())
            .await
            .map_err(kube_err("reading jobset"))?;
        let status = status_of(js.as_ref(), p.spec.epoch);
        Api::<Placement>::namespaced(hub.clone(), &ns)
            .patch_status(&p.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
            .await
            .map_err(kube_err("writing placement status"))?;
    }
    // Fencing: JobSets this agent made for an epoch or TrainJob that is no longer placed here.
    let jobsets = Api::<JobSet>::all(member.clone())
        .list(&ListParams::default().labels(TRAINJOB_UID_LABEL))
        .await
        .map_err(kube_err("listing jobsets"))?;
    for js in jobsets.items {
        let labels = js.labels();
        let key = (
            labels.get(TRAINJOB_UID_LABEL).cloned().unwrap_or_default(),
            labels.get(EPOCH_LABEL).cloned().unwrap_or_default(),
        );
        if !current.contains(&key) {
            let ns = js.namespace().unwrap_or_default();
            Api::<JobSet>::namespaced(member.clone(), &ns)
                .delete(&js.name_any(), &DeleteParams::background())
                .await
                .map_err(kube_err("deleting a stale jobset"))?;
        }
    }
    report(hub, member, cfg).await
}

async fn report(hub: &Client, member: &Client, cfg: &AgentConfig) -> Result<(), Error> {
    let nodes =
        Api::<Node>::all(member.clone()).list(&ListParams::default()).await.map_err(kube_err("listing nodes"))?.items;
    let pods =
        Api::<Pod>::all(member.clone()).list(&ListParams::default()).await.map_err(kube_err("listing pods"))?.items;
    let gang_scheduler = match cfg.capabilities.gang_scheduler {
        render::GangScheduler::Coscheduling => "coscheduling",
        render::GangScheduler::Volcano => "volcano",
        render::GangScheduler::Kai => "kai",
        _ => "none",
    };
    let status = json!({"status": {
        "heartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "agentVersion": env!("CARGO_PKG_VERSION"),
        "gangScheduler": gang_scheduler,
        "kueue": matches!(cfg.capabilities.topology_mode, render::TopologyMode::Kueue),
        "topologyLevels": cfg.levels,
        "domains": crate::capacity::summarize(&cfg.levels, &nodes, &pods),
    }});
    Api::<MemberCluster>::all(hub.clone())
        .patch_status(&cfg.cluster, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(kube_err(format!("writing MemberCluster {} status", cfg.cluster)))?;
    Ok(())
}

/// Syncs until the task is dropped; errors are logged and retried.
pub async fn run(hub: Client, member: Client, cfg: AgentConfig) {
    loop {
        if let Err(e) = sync_once(&hub, &member, &cfg).await {
            tracing::warn!(error = %e, cluster = %cfg.cluster, "agent sync failed; retrying");
        }
        tokio::time::sleep(SYNC_INTERVAL).await;
    }
}
