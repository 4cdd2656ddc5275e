//! Fencing: deleting what the agent made for an epoch no longer placed here, or everything it
//! made when the hub is out of reach, so a TrainJob never runs twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use api::jobset::JobSet;
use api::stowage::{CLUSTER_LABEL, EPOCH_LABEL, Placement, TRAINJOB_UID_LABEL};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};

use kube_shell::watch::{self};

use crate::caches::{Caches, Key, is_finished, owner_key};
use crate::config::AgentConfig;
use crate::error::Error;
use crate::objects::{COMPANIONS, api_resource};
use crate::survey::finished;

pub(crate) async fn delete_jobset(member: &Client, js: &JobSet) -> Result<(), Error> {
    let ns = js.namespace().unwrap_or_default();
    match Api::<JobSet>::namespaced(member.clone(), &ns).delete(&js.name_any(), &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Kube { action: format!("deleting JobSet {ns}/{}", js.name_any()), source }),
    }
}

/// Deletes the PodGroups, ConfigMaps and Secrets made for `key` (kinds the member does not
/// serve are skipped).
pub(crate) async fn delete_companions(member: &Client, ns: &str, key: &Key) -> Result<(), Error> {
    let selector = format!("{TRAINJOB_UID_LABEL}={},{EPOCH_LABEL}={}", key.uid, key.epoch);
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

/// What fencing for a lost hub deleted: the JobSets (key, namespace), and the error that
/// stopped it, if one did.
#[derive(Debug)]
pub(crate) struct Fenced {
    pub(crate) deleted: Vec<(Key, String)>,
    pub(crate) error: Option<Error>,
}

/// The hub has been out of reach too long: delete every live JobSet this agent made, so the
/// dispatcher can place them elsewhere without two copies running.
pub(crate) async fn fence_all(member: &Client, cfg: &AgentConfig, caches: &Caches) -> Fenced {
    let mut deleted = Vec::new();
    for js in watch::snapshot(&caches.jobsets).iter().filter(|js| !is_finished(js)) {
        if let Some(key) = owner_key(js) {
            tracing::warn!(jobset = %js.name_any(), "hub unreachable: deleting");
            if let Err(error) = delete_jobset(member, js).await {
                return Fenced { deleted, error: Some(error) };
            }
            cfg.metrics.count_fenced(&cfg.cluster);
            deleted.push((key, js.namespace().unwrap_or_default()));
        }
    }
    Fenced { deleted, error: None }
}

/// The fenced placements still placed here, as the hub has them now: one list, not the watch's
/// cache, which a slow hub can leave stale for as long as it is slow. Each is made again
/// through a claim (`report::claim`), as everything is, so one the dispatcher has moved since
/// the list is not. `None` when the hub does not answer.
pub(crate) async fn placed_here(
    hub: &Client,
    cfg: &AgentConfig,
    fenced: &BTreeSet<Key>,
) -> Option<Vec<Arc<Placement>>> {
    let params = ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", cfg.cluster));
    match Api::<Placement>::all(hub.clone()).list(&params).await {
        Ok(list) => Some(
            list.items
                .into_iter()
                .filter(|p| p.spec.cluster.as_deref() == Some(cfg.cluster.as_str()) && !finished(p))
                .filter(|p| fenced.contains(&Key::of(p)))
                .map(Arc::new)
                .collect(),
        ),
        Err(error) => {
            tracing::warn!(error = %kube_shell::error_chain(&error), cluster = %cfg.cluster, "listing placements to confirm the fenced failed");
            None
        }
    }
}
