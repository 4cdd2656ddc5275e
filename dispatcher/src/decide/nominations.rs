//! MultiKueue's writes: each Workload candidate's nomination by the cycle's decision (its
//! admission status applied as Kueue writes it, [`admission_status`]), the Events telling why it
//! waits, once per reason, and what to remember of it for the next cycle. The candidates are
//! read by [`super::candidates`], decided with the TrainJobs in [`super::schedule`].

use std::collections::BTreeMap;

use api::kueue::{ADMISSION_MANAGED_CONDITIONS, ADMISSION_MANAGED_FIELDS, Workload};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use scheduler_core::Decision;
use serde_json::{Value, json};

use super::candidates::{Candidate, State};
use super::events::{self, EventReason};
use super::schedule::Schedule;
use super::{NominationWrite, Observed, Plan, Remembered};
use crate::plan::camel;

/// Each candidate's nomination by the cycle's decision, the Events telling why it waits (once
/// per reason), and what to remember of it.
pub(super) fn writes(plan: &mut Plan, o: &Observed, candidates: &[Candidate<'_>], schedule: &Schedule, now: Timestamp) {
    let decided: BTreeMap<usize, (&Decision, Option<&String>)> = match schedule {
        Schedule::Decided { nominations, .. } => {
            nominations.iter().map(|n| (n.candidate, (&n.decision, n.withdrawn.as_ref()))).collect()
        }
        _ => BTreeMap::new(),
    };
    for (i, c) in candidates.iter().enumerate() {
        let mut memory = o.kueue_memory.get(&c.key).cloned().unwrap_or_default();
        let nominated = c.w.status.as_ref().and_then(|s| s.nominated_cluster_names.clone()).unwrap_or_default();
        let (clusters, told) = match (&c.state, decided.get(&i), schedule) {
            (State::Nominated { cluster, since, .. }, None, _) => {
                memory.nominated = Some((cluster.clone(), *since));
                (None, None)
            }
            (State::Admitted { .. }, ..) => {
                memory = Remembered::default();
                (None, None)
            }
            (State::Invalid(why), ..) => (Some(Vec::new()), Some((EventReason::Invalid, why.clone()))),
            (State::NoMember(why), ..) => (Some(Vec::new()), Some((EventReason::NoMemberCluster, why.clone()))),
            (State::Stale { write, message }, ..) => {
                plan.statuses.push(write.clone());
                memory.nominated = None;
                (None, Some((EventReason::StaleStatusCleared, message.clone())))
            }
            (_, Some((decision, withdrawn)), Schedule::Decided { fleet, .. }) => {
                let withdrawn = withdrawn.map(|w| format!(" (the nomination was withdrawn: {w})")).unwrap_or_default();
                match decision {
                    Decision::Admit(a) => {
                        let cluster = fleet.cluster(a.cluster).name.clone();
                        memory.nominated = Some((cluster.clone(), now));
                        let message = format!("nominated to member {cluster}{withdrawn}");
                        (Some(vec![cluster]), Some((EventReason::Nominated, message)))
                    }
                    Decision::Preempt { .. } => {
                        let message = format!("fits only if running jobs are preempted{withdrawn}");
                        (Some(Vec::new()), Some((EventReason::Preempting, message)))
                    }
                    Decision::Pending(reason) => (
                        Some(Vec::new()),
                        Some((EventReason::Waiting(camel(reason.kind())), format!("{reason}{withdrawn}"))),
                    ),
                }
            }
            (_, _, Schedule::NoCapacity(why)) => {
                (Some(Vec::new()), Some((EventReason::NoMemberCapacity, format!("no member capacity: {why}"))))
            }
            _ => (None, None),
        };
        if let Some(clusters) = clusters.filter(|c| *c != nominated) {
            if clusters.is_empty() {
                memory.nominated = None;
            }
            plan.nominations.push(NominationWrite {
                namespace: c.key.0.clone(),
                name: c.key.1.clone(),
                apply: admission_status(c.w, &clusters),
                clusters,
            });
        }
        if let Some((reason, message)) = told {
            let said = format!("{}: {message}", reason.as_str());
            if memory.told.as_ref() != Some(&said) {
                plan.workload_events.extend(events::of_nomination(c.w, reason, &message));
                memory.told = Some(said);
            }
        }
        plan.kueue_memory.insert(c.key.clone(), memory);
    }
}

/// The Workload's admission status as Kueue applies it (`PrepareWorkloadPatch`, strict): the
/// fields Kueue manages as `kueue-admission`, at the observed resourceVersion, with
/// `nominatedClusterNames` set to `clusters` (left out when empty, so the apply removes it).
/// Applying less as that manager would delete what is left out: Kueue's reservation.
fn admission_status(w: &Workload, clusters: &[String]) -> Value {
    let status = serde_json::to_value(w.status.clone().unwrap_or_default()).unwrap_or_default();
    let mut out = serde_json::Map::new();
    for field in ADMISSION_MANAGED_FIELDS {
        if let Some(v) = status.get(field) {
            out.insert(field.into(), v.clone());
        }
    }
    // Of the scheduling stats, Kueue applies its evictions only.
    if let Some(evictions) = status.pointer("/schedulingStats/evictions") {
        out.insert("schedulingStats".into(), json!({ "evictions": evictions }));
    }
    let conditions: Vec<&Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"].as_str().is_some_and(|t| ADMISSION_MANAGED_CONDITIONS.contains(&t)))
        .collect();
    if !conditions.is_empty() {
        out.insert("conditions".into(), json!(conditions));
    }
    for field in ["admissionChecks", "clusterName"] {
        if let Some(v) = status.get(field) {
            out.insert(field.into(), v.clone());
        }
    }
    if !clusters.is_empty() {
        out.insert("nominatedClusterNames".into(), json!(clusters));
    }
    json!({
        "apiVersion": Workload::api_version(&()),
        "kind": Workload::kind(&()),
        "metadata": {
            "name": w.metadata.name,
            "namespace": w.metadata.namespace,
            "resourceVersion": w.metadata.resource_version,
        },
        "status": out,
    })
}
