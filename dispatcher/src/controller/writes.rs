//! Each write of a plan, one object at a time: a Placement (conditional: created, or replaced
//! at the observed resourceVersion), a TrainJob's status, a Queue's, a MemberCluster's
//! conditions, a Workload's nomination, and an Event as the shell records it. A conflict is
//! not an error: the next cycle decides on what the object is now.

use api::kueue::{ADMISSION_FIELD_MANAGER, Workload};
use api::stowage::{MemberCluster, Placement};
use api::trainer::TrainJob;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_shell::lean::{self, Lean};
use serde_json::json;

use super::{Error, FIELD_MANAGER};
use crate::decide::events::EventWrite;
use crate::decide::{MemberConditionWrite, NominationWrite, PlacementWrite, QueueStatusWrite, StatusWrite};

pub(super) async fn write_placement(hub: &Client, w: &PlacementWrite) -> Result<Option<Placement>, Error> {
    // The answers are kept as written (`Written`), as the caches keep objects: without
    // managedFields.
    let api = lean::api(Api::<Placement>::namespaced(hub.clone(), &w.namespace));
    let p = Lean(w.object());
    let result = match &w.replaces {
        None => api.create(&PostParams::default(), &p).await,
        Some(_) => api.replace(&w.name, &PostParams::default(), &p).await,
    };
    match result.map(|Lean(p)| p) {
        Ok(p) => match w.withdrawn_status().filter(|s| p.status.as_ref() != Some(s)) {
            // Withdrawn: no agent writes its status any more, so the dispatcher clears what the
            // last one wrote (a Running phase, a "being made on" message, its counts).
            Some(status) => {
                let patch = Patch::Merge(status.merge_patch());
                match api.patch_status(&w.name, &PatchParams::default(), &patch).await {
                    Ok(Lean(p)) => Ok(Some(p)),
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
pub(super) async fn write_nomination(hub: &Client, n: &NominationWrite) -> Result<Option<Workload>, Error> {
    let pp = PatchParams::apply(ADMISSION_FIELD_MANAGER).force();
    match lean::api(Api::<Workload>::namespaced(hub.clone(), &n.namespace))
        .patch_status(&n.name, &pp, &Patch::Apply(&n.apply))
        .await
    {
        Ok(Lean(w)) => Ok(Some(w)),
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

pub(super) async fn write_status(hub: &Client, s: &StatusWrite) -> Result<(), Error> {
    let body = json!({"status": {"conditions": s.conditions, "jobsStatus": s.jobs}});
    lean::unread(Api::<TrainJob>::namespaced(hub.clone(), &s.namespace))
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

pub(super) async fn write_member_conditions(hub: &Client, m: &MemberConditionWrite) -> Result<(), Error> {
    let body = json!({"status": {"conditions": m.conditions}});
    lean::unread(Api::<MemberCluster>::all(hub.clone()))
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

pub(super) async fn write_queue_status(hub: &Client, q: &QueueStatusWrite) -> Result<(), Error> {
    let body = json!({"status": q.status});
    lean::unread(Api::<api::stowage::Queue>::all(hub.clone()))
        .patch_status(&q.name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|source| Error::Write { what: "Queue status", namespace: String::new(), name: q.name.clone(), source })
}

/// An Event of a cycle's, as the shell records it.
pub(super) fn record_of(e: EventWrite) -> kube_shell::events::Record {
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
