//! The dispatcher's shell: observe the hub, call [`decide`](crate::decide::decide), apply.
//! Each cycle lists what it needs (a cycle reads a consistent snapshot and keeps nothing between
//! cycles, so a restart or a new leader rebuilds everything from hub objects).

use std::time::Duration;

use api::stowage::{MemberCluster, Placement, Queue};
use api::trainer::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;

use crate::decide::{Observed, Plan, decide};

pub const FIELD_MANAGER: &str = "stowage-dispatcher";
pub const CYCLE_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing {what}: {source}")]
    List { what: &'static str, source: kube::Error },
    #[error("writing {what} {namespace}/{name}: {source}")]
    Write { what: &'static str, namespace: String, name: String, source: kube::Error },
}

async fn list<K>(api: Api<K>, what: &'static str) -> Result<Vec<K>, Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default()).await.map(|l| l.items).map_err(|source| Error::List { what, source })
}

pub async fn observe(hub: &Client) -> Result<Observed, Error> {
    Ok(Observed {
        trainjobs: list(Api::<TrainJob>::all(hub.clone()), "trainjobs").await?,
        cluster_runtimes: list(Api::<ClusterTrainingRuntime>::all(hub.clone()), "clustertrainingruntimes").await?,
        runtimes: list(Api::<TrainingRuntime>::all(hub.clone()), "trainingruntimes").await?,
        members: list(Api::<MemberCluster>::all(hub.clone()), "memberclusters").await?,
        placements: list(Api::<Placement>::all(hub.clone()), "placements").await?,
        queues: list(Api::<Queue>::all(hub.clone()), "queues").await?,
    })
}

pub async fn apply(hub: &Client, plan: &Plan) -> Result<(), Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for (ns, name, uid, spec) in &plan.placements {
        let mut p = Placement::new(name, spec.clone());
        p.metadata.namespace = Some(ns.clone());
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: TrainJob::api_version(&()).into_owned(),
            kind: "TrainJob".into(),
            name: name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        let mut v = serde_json::to_value(&p).unwrap_or_default();
        v["apiVersion"] = "stowage.dev/v1alpha1".into();
        v["kind"] = "Placement".into();
        Api::<Placement>::namespaced(hub.clone(), ns)
            .patch(name, &pp, &Patch::Apply(&v))
            .await
            .map_err(|source| Error::Write { what: "Placement", namespace: ns.clone(), name: name.clone(), source })?;
    }
    for (ns, name, conditions, jobs) in &plan.statuses {
        let body = json!({"status": {"conditions": conditions, "jobsStatus": jobs}});
        Api::<TrainJob>::namespaced(hub.clone(), ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|source| Error::Write {
                what: "TrainJob status",
                namespace: ns.clone(),
                name: name.clone(),
                source,
            })?;
    }
    Ok(())
}

/// One cycle: observe, decide, apply.
#[tracing::instrument(skip_all)]
pub async fn cycle_once(hub: &Client, config: &scheduler_core::Config) -> Result<Plan, Error> {
    let observed = observe(hub).await?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let plan = decide(&observed, config, now);
    apply(hub, &plan).await?;
    tracing::debug!(placements = plan.placements.len(), statuses = plan.statuses.len(), "cycle");
    Ok(plan)
}

/// Runs cycles until the task is dropped; errors are logged and retried next cycle.
pub async fn run(hub: Client, config: scheduler_core::Config) {
    loop {
        if let Err(e) = cycle_once(&hub, &config).await {
            tracing::warn!(error = %e, "dispatcher cycle failed; retrying");
        }
        tokio::time::sleep(CYCLE_INTERVAL).await;
    }
}
