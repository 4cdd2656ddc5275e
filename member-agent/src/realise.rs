//! Realising one placement: the TrainJob and its runtime read from the hub, rendered, and
//! applied to the member with server-side apply.

use api::stowage::Placement;
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use serde_json::json;

use trainer_render::{self as render, Input, Object};

use crate::caches::Caches;
use crate::config::{AgentConfig, FIELD_MANAGER};
use crate::error::{Error, kube_err};
use crate::objects::resource_of;

/// The TrainJob's runtime, from the cache, or from the hub when the cache has not seen it yet.
pub(crate) async fn runtime(hub: &Client, caches: &Caches, tj: &TrainJob) -> Result<Runtime, Error> {
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
pub(crate) async fn realise(
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
pub(crate) async fn ensure_namespace(member: &Client, ns: &str) -> Result<(), Error> {
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
