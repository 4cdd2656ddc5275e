//! Realising one placement: the TrainJob and its runtime read from the hub, rendered, and
//! applied to the member with server-side apply.

use api::stowage::{Placement, TRAINJOB_UID_LABEL};
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use kube_shell::lean::{self, Lean};
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

/// What a placement is made from: its TrainJob, read from the hub, and its runtime.
pub(crate) async fn read(hub: &Client, caches: &Caches, p: &Placement) -> Result<(TrainJob, Runtime), Error> {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let Lean(tj) = lean::api(Api::<TrainJob>::namespaced(hub.clone(), &ns))
        .get(&name)
        .await
        .map_err(kube_err(format!("reading TrainJob {ns}/{name}")))?;
    let rt = runtime(hub, caches, &tj).await?;
    Ok((tj, rt))
}

/// Applies one placement's objects, rendered from its TrainJob and runtime ([`read`]), to the
/// member.
#[tracing::instrument(skip_all, fields(cluster = %cfg.cluster, placement = %p.name_any()))]
pub(crate) async fn realise(
    member: &Client,
    cfg: &AgentConfig,
    p: &Placement,
    (tj, rt): &(TrainJob, Runtime),
) -> Result<(), Error> {
    let ns = p.namespace().unwrap_or_default();
    let name = p.name_any();
    let is_mpi = rt.spec().ml_policy.as_ref().is_some_and(|m| m.mpi.is_some());
    let key = if is_mpi { Some(trainer_render::sshkey::generate()?) } else { None };
    let input = Input {
        trainjob: tj,
        runtime: rt,
        placement: Some(p),
        capabilities: &cfg.capabilities,
        ssh_key: key.as_ref(),
        jobset_uid: None,
    };
    let objects =
        render::render(&input).map_err(|source| Error::Render { namespace: ns.clone(), name: name.clone(), source })?;
    // Every name is checked before anything is applied: an object of that name the agent did
    // not make for this TrainJob is someone else's, and is neither changed nor adopted.
    // The names are read at once (each its own round trip to the member), then judged in order.
    // From the typed objects: each written as JSON only once, to be applied.
    let names: Vec<String> = objects.iter().map(|o| o.metadata().name.clone().unwrap_or_default()).collect();
    let found = futures::future::try_join_all(objects.iter().zip(&names).map(|(o, obj_name)| {
        let resource = resource_of(o);
        let api = lean::api_with(Api::<DynamicObject>::namespaced_with(member.clone(), &ns, &resource), &resource);
        let what = format!("reading {} {ns}/{obj_name}", o.kind());
        async move { api.get_opt(obj_name).await.map(|found| found.map(|Lean(o)| o)).map_err(kube_err(what)) }
    }))
    .await?;
    let mut made = Vec::with_capacity(objects.len());
    for ((o, obj_name), existing) in objects.iter().zip(names).zip(found) {
        let api = Api::<DynamicObject>::namespaced_with(member.clone(), &ns, &resource_of(o));
        match existing.as_ref().map(|e| (owner_of(&e.metadata, &p.spec.train_job_uid), e)) {
            None => made.push(false),
            Some((Owner::This, _)) => made.push(true),
            // An earlier TrainJob of that name (two never live at once) left it: it goes, that
            // very object (its UID a precondition), and this is tried again once it is gone.
            Some((Owner::Earlier, e)) => {
                let that = Preconditions { uid: e.metadata.uid.clone(), resource_version: None };
                let dp = DeleteParams { preconditions: Some(that), ..DeleteParams::background() };
                match api.delete(&obj_name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(source) => {
                        let what = format!("deleting the leftover {} {ns}/{obj_name}", o.kind());
                        return Err(Error::Kube { action: what, source });
                    }
                }
                return Err(Error::Leftover { kind: o.kind(), namespace: ns, name: obj_name });
            }
            Some((Owner::Someone, _)) => {
                return Err(Error::NameTaken { kind: o.kind(), namespace: ns, name: obj_name });
            }
        }
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for (o, exists) in objects.iter().zip(made) {
        // The SSH Secret is immutable and made once: keep the first key.
        if matches!(o, Object::Secret(_)) && exists {
            continue;
        }
        let obj_name = o.metadata().name.as_deref().unwrap_or_default();
        let resource = resource_of(o);
        lean::unread_with(Api::<DynamicObject>::namespaced_with(member.clone(), &ns, &resource), &resource)
            .patch(obj_name, &pp, &Patch::Apply(&o.to_value()))
            .await
            .map_err(kube_err(format!("applying {} {ns}/{obj_name}", o.kind())))?;
    }
    Ok(())
}

/// Who made an object already on the member, by the TrainJob UID label an agent puts on
/// everything it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// An agent, for this TrainJob (any epoch): applied over.
    This,
    /// An agent, for another TrainJob of the same name (deleted and made again): deleted, then
    /// made afresh.
    Earlier,
    /// Someone else: never changed, adopted or deleted.
    Someone,
}

pub(crate) fn owner_of(existing: &ObjectMeta, trainjob_uid: &str) -> Owner {
    match existing.labels.as_ref().and_then(|l| l.get(TRAINJOB_UID_LABEL)) {
        Some(u) if u == trainjob_uid => Owner::This,
        Some(_) => Owner::Earlier,
        None => Owner::Someone,
    }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ObjectMeta { labels: (!labels.is_empty()).then_some(labels), ..ObjectMeta::default() }
    }

    #[test]
    fn only_what_carries_the_trainjobs_uid_is_its_own() {
        let owner = |labels| owner_of(&meta(labels), "u1");
        assert_eq!(owner(&[(TRAINJOB_UID_LABEL, "u1"), ("stowage.dev/placement-epoch", "3")]), Owner::This);
        // Made for an earlier TrainJob of that name: waits for the round to delete it.
        assert_eq!(owner(&[(TRAINJOB_UID_LABEL, "u0")]), Owner::Earlier);
        // Another workload's object of the same name, or one whose Stowage labels were removed.
        assert_eq!(owner(&[("app", "someone-else")]), Owner::Someone);
        assert_eq!(owner(&[]), Owner::Someone);
    }
}
