//! MultiKueue's writes: each Workload candidate's nomination by the cycle's decision (its
//! admission status applied as Kueue writes it, [`admission_status`]), the Events telling why it
//! waits, once per reason, and what to remember of it for the next cycle. The candidates are
//! read by [`super::workloads`], decided with the TrainJobs in [`super::schedule`].

use std::collections::BTreeMap;

use api::kueue::Workload;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use scheduler_core::Decision;

use super::schedule::Schedule;
use super::workloads::{Candidate, NominationWrite, Remembered, State, WorkloadEvent, admission_status};
use super::{Observed, Plan, key};
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
            (State::Invalid(why), ..) => (Some(Vec::new()), Some(("Invalid".to_string(), why.clone()))),
            (State::NoMember(why), ..) => (Some(Vec::new()), Some(("NoMemberCluster".to_string(), why.clone()))),
            (State::Stale { write, message }, ..) => {
                plan.statuses.push(write.clone());
                memory.nominated = None;
                (None, Some(("StaleStatusCleared".to_string(), message.clone())))
            }
            (_, Some((decision, withdrawn)), Schedule::Decided { fleet, .. }) => {
                let withdrawn = withdrawn.map(|w| format!(" (the nomination was withdrawn: {w})")).unwrap_or_default();
                match decision {
                    Decision::Admit(a) => {
                        let cluster = fleet.cluster(a.cluster).name.clone();
                        memory.nominated = Some((cluster.clone(), now));
                        let message = format!("nominated to member {cluster}{withdrawn}");
                        (Some(vec![cluster]), Some(("Nominated".to_string(), message)))
                    }
                    Decision::Preempt { .. } => {
                        let message = format!("fits only if running jobs are preempted{withdrawn}");
                        (Some(Vec::new()), Some(("Preempting".to_string(), message)))
                    }
                    Decision::Pending(reason) => {
                        (Some(Vec::new()), Some((camel(reason.kind()), format!("{reason}{withdrawn}"))))
                    }
                }
            }
            (_, _, Schedule::NoCapacity(why)) => {
                (Some(Vec::new()), Some(("NoMemberCapacity".to_string(), format!("no member capacity: {why}"))))
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
            let said = format!("{reason}: {message}");
            if memory.told.as_ref() != Some(&said) {
                plan.workload_events.extend(events(c.w, &reason, &message));
                memory.told = Some(said);
            }
        }
        plan.kueue_memory.insert(c.key.clone(), memory);
    }
}

/// The Event on the Workload, and on its owning TrainJob when it has one.
fn events(w: &Workload, reason: &str, message: &str) -> Vec<WorkloadEvent> {
    let (namespace, name) = key(&w.metadata);
    let warning = reason != "Nominated";
    let event = |kind: &str, api_version: String, object: &str, uid: &str| WorkloadEvent {
        namespace: namespace.clone(),
        name: format!("{object}.nomination-{}", reason.to_ascii_lowercase()),
        api_version,
        kind: kind.into(),
        object: object.into(),
        uid: uid.into(),
        warning,
        reason: reason.into(),
        message: message.into(),
    };
    let uid = w.metadata.uid.clone().unwrap_or_default();
    let mut out = vec![event("Workload", Workload::api_version(&()).into_owned(), &name, &uid)];
    let owner =
        w.metadata.owner_references.iter().flatten().find(|r| r.kind == "TrainJob" && r.controller == Some(true));
    if let Some(r) = owner {
        out.push(event("TrainJob", r.api_version.clone(), &r.name, &r.uid));
    }
    out
}
