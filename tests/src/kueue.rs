//! A test double that plays Kueue's part on the hub (kueue v0.19, MultiKueue with an external
//! dispatcher), since real Kueue cannot run here (Go, no images). It writes what Kueue writes,
//! as Kueue writes it:
//!
//! - the MultiKueue set-up: AdmissionCheck `multikueue` (controller `kueue.x-k8s.io/multikueue`)
//!   naming MultiKueueConfig `fleet`, one MultiKueueCluster per worker;
//! - a TrainJob's Workload (`pkg/controller/jobs/trainjob/`): one pod set per replicated job of
//!   the JobSet Trainer renders, `replicas × parallelism` pods with the rendered pod template,
//!   owned by the TrainJob;
//! - its admission status, always applied whole with server-side apply as `kueue-admission`
//!   (`workload.ApplyAdmissionStatus`): quota reserved with the MultiKueue check Pending; admitted
//!   on the nominated worker (`clusterName` set, the nominations left out so the apply clears
//!   them, the check Ready); evicted (`clusterName` and nominations reset, checks back to Pending,
//!   quota released);
//! - Kueue's webhook rule that `clusterName` may only name a cluster nominated before
//!   ([`NominatedOnly`], `validateClusterNameUpdate`).

use api::kueue::{ADMISSION_FIELD_MANAGER, AdmissionCheck, MultiKueueCluster, MultiKueueConfig, Workload};
use api::trainer::{Runtime, TrainJob};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kube_mem::admission::{Review, Validator};
use kube_mem::resources::ResourceType;
use kube_mem::status::ApiError;
use kube_mem::view::ReadView;
use serde_json::{Value, json};
use trainer_render::{Capabilities, GangScheduler, Input};

/// The MultiKueue AdmissionCheck's name.
pub const CHECK: &str = "multikueue";

/// The ClusterQueue behind every LocalQueue: Kueue's admission names it, not the LocalQueue
/// (as the real Kueue on the testbed does, whose ClusterQueue is also `fleet`).
pub const CLUSTER_QUEUE: &str = "fleet";

/// Kueue's MultiKueue set-up on the hub, its workers the members of those names.
pub async fn install(hub: &Client, workers: &[&str]) -> Result<(), kube::Error> {
    let pp = PostParams::default();
    let check: AdmissionCheck = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": CHECK},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                 "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "fleet"}}}))
    .map_err(kube::Error::SerdeError)?;
    Api::<AdmissionCheck>::all(hub.clone()).create(&pp, &check).await?;
    let config: MultiKueueConfig = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": "fleet"},
        "spec": {"clusters": workers}}))
    .map_err(kube::Error::SerdeError)?;
    Api::<MultiKueueConfig>::all(hub.clone()).create(&pp, &config).await?;
    for w in workers {
        let cluster: MultiKueueCluster = serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": w},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": format!("{w}-kubeconfig")}}}}))
        .map_err(kube::Error::SerdeError)?;
        Api::<MultiKueueCluster>::all(hub.clone()).create(&pp, &cluster).await?;
    }
    Ok(())
}

/// The Workload Kueue makes for `tj`: named after the TrainJob and its UID, owned by it.
pub fn workload_for(tj: &TrainJob, runtime: &Runtime) -> Result<Workload, String> {
    let caps = Capabilities { gang_scheduler: GangScheduler::None, ..Capabilities::default() };
    let input = Input { trainjob: tj, runtime, placement: None, capabilities: &caps, ssh_key: None, jobset_uid: None };
    let shapes = trainer_render::pod_sets(&input).map_err(|e| e.to_string())?;
    let uid = tj.metadata.uid.clone().unwrap_or_default();
    // As Kueue's JobSet pod sets (`pkg/controller/jobs/jobset`): each replicated job's pod indexes
    // and job index labels for topology-aware scheduling. Kueue's template is the runtime's with
    // the TrainJob's overrides and without the ML policy's env and ports (Trainer's builder,
    // without its plugins); Stowage's render has them, and reads neither.
    let pod_sets: Vec<Value> = shapes
        .iter()
        .map(|s| {
            json!({"name": s.name, "count": s.pods, "template": {"spec": s.pod},
                   "topologyRequest": {"podIndexLabel": "batch.kubernetes.io/job-completion-index",
                                       "subGroupCount": 1, "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index"}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {
            "name": format!("trainjob-{}-{}", tj.name_any(), &uid[..uid.len().min(5)]),
            "namespace": tj.namespace(),
            "labels": {"kueue.x-k8s.io/job-uid": uid},
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
            "ownerReferences": [{"apiVersion": TrainJob::api_version(&()), "kind": "TrainJob",
                                 "name": tj.name_any(), "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"queueName": tj.labels().get(api::kueue::QUEUE_NAME_LABEL), "priority": 0, "active": true,
                 "podSets": pod_sets},
    }))
    .map_err(|e| e.to_string())
}

fn now() -> String {
    Timestamp::now().to_string()
}

fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": if status { "True" } else { "False" }, "reason": reason, "message": message,
           "lastTransitionTime": now()})
}

/// Applies the Workload's whole admission status as `kueue-admission`, at the version read.
async fn apply_status(hub: &Client, w: &Workload, status: Value) -> Result<Workload, kube::Error> {
    let body = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": w.name_any(), "namespace": w.namespace(), "resourceVersion": w.resource_version()},
        "status": status,
    });
    let pp = PatchParams::apply(ADMISSION_FIELD_MANAGER).force();
    Api::<Workload>::namespaced(hub.clone(), &w.namespace().unwrap_or_default())
        .patch_status(&w.name_any(), &pp, &Patch::Apply(&body))
        .await
}

fn admission(w: &Workload) -> Value {
    let assignments: Vec<Value> = w
        .spec
        .pod_sets
        .iter()
        .map(|ps| json!({"name": ps.name, "count": ps.count, "flavors": {"nvidia.com/gpu": "default-flavor"}}))
        .collect();
    json!({"clusterQueue": CLUSTER_QUEUE, "podSetAssignments": assignments})
}

/// Kueue reserves the Workload's quota on the manager: its MultiKueue check is Pending.
pub async fn reserve(hub: &Client, w: &Workload) -> Result<Workload, kube::Error> {
    let status = json!({
        "conditions": [condition("QuotaReserved", true, "QuotaReserved", &format!("Quota reserved in ClusterQueue {CLUSTER_QUEUE}"))],
        "admission": admission(w),
        "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "", "lastTransitionTime": now()}],
    });
    apply_status(hub, w, status).await
}

/// A worker admitted the Workload where it was nominated: `clusterName` set, the nominations
/// left out of Kueue's apply (so they go), the check Ready. `None` when nothing is nominated.
pub async fn admit(hub: &Client, w: &Workload) -> Result<Option<(String, Workload)>, kube::Error> {
    let Some(cluster) = w.status.as_ref().and_then(|s| s.nominated_cluster_names.as_ref()?.first().cloned()) else {
        return Ok(None);
    };
    admit_on(hub, w, &cluster).await.map(|w| Some((cluster, w)))
}

/// Sets `clusterName` to `cluster` as Kueue's admission does; the API server refuses a cluster
/// that was not nominated ([`NominatedOnly`]).
pub async fn admit_on(hub: &Client, w: &Workload, cluster: &str) -> Result<Workload, kube::Error> {
    let status = json!({
        "conditions": [
            condition("QuotaReserved", true, "QuotaReserved", &format!("Quota reserved in ClusterQueue {CLUSTER_QUEUE}")),
            condition("Admitted", true, "Admitted", "The workload is admitted"),
        ],
        "admission": admission(w),
        "admissionChecks": [{"name": CHECK, "state": "Ready",
                             "message": format!("The workload got reservation on \"{cluster}\""), "lastTransitionTime": now()}],
        "clusterName": cluster,
    });
    apply_status(hub, w, status).await
}

/// Kueue evicts the Workload (its worker was lost, or it was preempted): quota released,
/// `clusterName` and nominations reset, its checks back to Pending.
pub async fn evict(hub: &Client, w: &Workload, reason: &str) -> Result<Workload, kube::Error> {
    let status = json!({
        "conditions": [
            condition("QuotaReserved", false, "Pending", reason),
            condition("Admitted", false, "NoReservation", "The workload has no reservation"),
            condition("Evicted", true, reason, reason),
        ],
        "admissionChecks": [{"name": CHECK, "state": "Pending",
                             "message": "Reset to Pending after eviction. Previously: Ready", "lastTransitionTime": now()}],
    });
    apply_status(hub, w, status).await
}

/// Kueue re-queues an evicted Workload and reserves quota again: Evicted turns False.
pub async fn requeue(hub: &Client, w: &Workload) -> Result<Workload, kube::Error> {
    let status = json!({
        "conditions": [
            condition("QuotaReserved", true, "QuotaReserved", &format!("Quota reserved in ClusterQueue {CLUSTER_QUEUE}")),
            condition("Evicted", false, "QuotaReserved", "Previously evicted, now has quota again"),
        ],
        "admission": admission(w),
        "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "", "lastTransitionTime": now()}],
    });
    apply_status(hub, w, status).await
}

/// Kueue's Workload webhook rule for external dispatchers: `status.clusterName` may only be set
/// to one of the clusters nominated before (`validateClusterNameUpdate`).
#[derive(Debug)]
pub struct NominatedOnly;

impl Validator for NominatedOnly {
    fn applies_to(&self, rt: &ResourceType) -> bool {
        rt.group == "kueue.x-k8s.io" && rt.kind == "Workload"
    }

    fn reviews_status(&self) -> bool {
        true
    }

    fn validate(&self, _objects: &ReadView<'_>, review: &Review<'_>) -> Result<(), ApiError> {
        let Some(old) = review.old else { return Ok(()) };
        let (new_name, old_name) = (&review.object["status"]["clusterName"], &old["status"]["clusterName"]);
        let Some(cluster) = new_name.as_str().filter(|_| old_name.is_null()) else { return Ok(()) };
        let nominated =
            old["status"]["nominatedClusterNames"].as_array().is_some_and(|n| n.iter().any(|c| c == cluster));
        if nominated {
            return Ok(());
        }
        let name = review.object["metadata"]["name"].as_str().unwrap_or_default();
        Err(ApiError::invalid(
            "Workload.kueue.x-k8s.io",
            name,
            vec![(
                "status.clusterName".into(),
                format!(
                    "Invalid value: {cluster:?}: when setting clusterName it must be one of the nominatedClusterNames"
                ),
            )],
        ))
    }
}
