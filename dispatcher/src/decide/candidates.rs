//! MultiKueue's external dispatcher (`--kueue multikueue`): Kueue on the hub queues a Workload
//! and reserves its quota; MultiKueue copies it only to the worker clusters its
//! `status.nominatedClusterNames` lists. Stowage nominates exactly one, the member the cycle
//! places its gang on, decided in the same cycle and snapshot as the TrainJobs.
//!
//! A Workload is to be nominated when its MultiKueue check is `Pending`, Kueue has reserved
//! quota (`QuotaReserved=True`), it is neither Evicted nor Finished, its other checks are
//! `Ready` and `status.clusterName` is unset (`ShouldSkipClusterNomination` and the incremental
//! dispatcher's rule, kueue v0.19). A nomination stands while its member is live, the gang
//! still fits there (an assumed pass pinned to it holds its room, as for a placed TrainJob) and
//! Kueue admits it within the timeout; otherwise the list is replaced, or emptied when nothing
//! fits, and an Event says why. Admitted (`clusterName` set), it holds its room there for a
//! grace period, by when its member's report counts its pods. Evicted while its TrainJob ran, it
//! may be held by that TrainJob's stale counts, which Stowage clears ([`stale_owner`]).
//!
//! Written as Kueue writes it: its whole admission status applied as `kueue-admission` at the
//! observed resourceVersion, with the list changed, by [`super::nominations`].

use std::collections::{BTreeMap, BTreeSet};

use api::conditions::{find, find_true, is_true};
use api::kueue::{
    ACTIVE, ADMITTED, EVICTED, FINISHED, MEMBER_CLUSTER_ANNOTATION, MULTIKUEUE_CONTROLLER, QUOTA_RESERVED, Workload,
};
use api::trainer::{JobStatus, KUEUE_MULTIKUEUE_MANAGED_BY};
use k8s_openapi::jiff::Timestamp;
use scheduler_core::{ClusterFilter, Gang};

use super::members::Members;
use super::{KueueMode, Observed, Settings, StatusWrite, WorkloadKey, key};
use crate::translate::workload::{self, Levels};

/// A Workload the cycle acts on.
#[derive(Debug)]
pub(super) struct Candidate<'a> {
    pub(super) w: &'a Workload,
    pub(super) key: WorkloadKey,
    pub(super) state: State,
}

#[derive(Debug)]
pub(super) enum State {
    /// Needs a nomination; with why the one it has is withdrawn, if it has one.
    Nominate { gang: Gang, withdrawn: Option<String> },
    /// Nominated and waiting for Kueue to admit it there: its room there is held.
    Nominated { gang: Gang, cluster: String, since: Timestamp },
    /// Admitted there a moment ago: its room there is held until its member counts its pods.
    Admitted { gang: Gang, cluster: String },
    /// Its pod sets make no gang: why, naming the field.
    Invalid(String),
    /// Its MultiKueueConfig names no member that reports: why, naming them.
    NoMember(String),
    /// Evicted, and Kueue holds its quota until its TrainJob shows no active jobs, which the
    /// TrainJob's stale status never will: the status to write, and what to tell.
    Stale { write: StatusWrite, message: String },
}

impl State {
    /// The gang holding room on a cluster this cycle, pinned there.
    pub(super) fn held(&self) -> Option<Gang> {
        match self {
            State::Nominated { gang, cluster, .. } | State::Admitted { gang, cluster } => {
                let mut g = gang.clone();
                g.clusters = ClusterFilter { only: Some(vec![cluster.clone()]), ..ClusterFilter::default() };
                Some(g)
            }
            _ => None,
        }
    }

    /// Whether the cycle has anything to decide for it.
    pub(super) fn schedules(&self) -> bool {
        matches!(self, State::Nominate { .. } | State::Nominated { .. })
    }
}

/// The Workloads to nominate, nominated, or just admitted, in key order.
pub(super) fn read<'a>(
    o: &'a Observed,
    members: &Members<'_>,
    settings: &Settings,
    now: Timestamp,
) -> Vec<Candidate<'a>> {
    if settings.kueue != KueueMode::MultiKueue {
        return Vec::new();
    }
    let checks = multikueue_checks(o);
    let workers = Workers {
        live: members.live.iter().filter_map(|m| m.metadata.name.as_deref()).collect(),
        last_admission: last_admission(o),
    };
    let levels = Levels::of(&members.live);
    let mut workloads: Vec<&Workload> = o.workloads.iter().collect();
    workloads.sort_by_key(|w| key(&w.metadata));
    workloads
        .into_iter()
        .filter_map(|w| {
            let state = state(o, w, &checks, &workers, &levels, settings, now)?;
            Some(Candidate { w, key: key(&w.metadata), state })
        })
        .collect()
}

/// The members as a nomination sees them: which report, and when Kueue last admitted there.
struct Workers<'a> {
    live: BTreeSet<&'a str>,
    last_admission: BTreeMap<&'a str, Timestamp>,
}

/// When Kueue last admitted a Workload on each cluster (its `Admitted` condition's transition):
/// a worker that keeps admitting is working through a backlog, not ignoring what was nominated.
fn last_admission(o: &Observed) -> BTreeMap<&str, Timestamp> {
    let mut last: BTreeMap<&str, Timestamp> = BTreeMap::new();
    for status in o.workloads.iter().filter_map(|w| w.status.as_ref()) {
        let (Some(cluster), Some(admitted)) = (status.cluster_name.as_deref(), find_true(&status.conditions, ADMITTED))
        else {
            continue;
        };
        let at = admitted.last_transition_time.0;
        last.entry(cluster).and_modify(|t| *t = (*t).max(at)).or_insert(at);
    }
    last
}

fn state(
    o: &Observed,
    w: &Workload,
    checks: &BTreeMap<&str, Check>,
    workers: &Workers<'_>,
    levels: &Levels,
    settings: &Settings,
    now: Timestamp,
) -> Option<State> {
    let status = w.status.as_ref()?;
    let (check, config) = status.admission_checks.iter().find_map(|c| Some((c, checks.get(c.name.as_str())?)))?;
    let clusters = config.members.clone();
    if is_true(&status.conditions, FINISHED) {
        return None;
    }
    if is_true(&status.conditions, EVICTED) {
        return stale_owner(o, w, config, workers, settings, now);
    }
    let gang = |clusters| workload::gang(w, levels, clusters).map_err(|e| e.to_string());
    if let Some(cluster) = &status.cluster_name {
        let admitted = find_true(&status.conditions, ADMITTED)?;
        let age = now.duration_since(admitted.last_transition_time.0).unsigned_abs();
        return (age <= settings.member_grace)
            .then(|| gang(vec![cluster.clone()]).ok())
            .flatten()
            .map(|gang| State::Admitted { gang, cluster: cluster.clone() });
    }
    let others_ready = status.admission_checks.iter().all(|c| c.name == check.name || c.state == "Ready");
    if !is_true(&status.conditions, QUOTA_RESERVED) || check.state != "Pending" || !others_ready {
        return None;
    }
    let gang = match gang(clusters) {
        Ok(g) => g,
        Err(why) => return Some(State::Invalid(why)),
    };
    if !config.members.iter().any(|m| workers.live.contains(m.as_str())) {
        return Some(State::NoMember(config.why_none(o)));
    }
    let nominated = status.nominated_cluster_names.as_deref().unwrap_or_default();
    let remembered = o.kueue_memory.get(&key(&w.metadata)).and_then(|r| r.nominated.as_ref());
    Some(match nominated {
        [] => State::Nominate { gang, withdrawn: None },
        [cluster] => {
            let since = remembered.filter(|(c, _)| c == cluster).map_or(now, |(_, t)| *t);
            let waited = now.duration_since(since).unsigned_abs();
            // Under a burst MultiKueue takes minutes to copy and admit what was nominated
            // (docs/performance.md, the testbed burst): a worker that admitted another Workload
            // within the timeout, and since this one was nominated, is working through a
            // backlog; withdrawing then only makes Kueue's admission on it fail.
            let progressing = workers
                .last_admission
                .get(cluster.as_str())
                .is_some_and(|t| *t >= since && now.duration_since(*t).unsigned_abs() <= settings.nomination_timeout);
            let withdrawn = if !workers.live.contains(cluster.as_str()) {
                Some(format!("member {cluster} is not live"))
            } else if waited > settings.nomination_timeout && !progressing {
                Some(format!(
                    "Kueue did not admit it on {cluster} within {} s, nor anything else there since it was nominated",
                    settings.nomination_timeout.as_secs()
                ))
            } else {
                None
            };
            match withdrawn {
                None => State::Nominated { gang, cluster: cluster.clone(), since },
                Some(why) => {
                    // Not straight back to where it was not admitted: elsewhere, or nowhere
                    // this cycle (the next one may nominate it there again).
                    let mut gang = gang;
                    gang.clusters.avoid.push(cluster.clone());
                    State::Nominate { gang, withdrawn: Some(why) }
                }
            }
        }
        many => State::Nominate {
            gang,
            withdrawn: Some(format!("{} clusters were nominated; Stowage nominates one", many.len())),
        },
    })
}

/// An evicted Workload Kueue v0.17 cannot let go of (found on the testbed; upstream
/// kubernetes-sigs/kueue#15380, fix proposed in #15682). Kueue keeps an evicted Workload's quota
/// until its job is no longer active, which for a TrainJob means `status.jobsStatus` counts no
/// active jobs. On the hub no controller writes that status but MultiKueue, which copies it from
/// the worker's copy, and deletes the copy on eviction before copying the counts that went to
/// zero: the quota is held, and the TrainJob never runs again, for good.
///
/// Stowage clears the counts when nothing can still be running: the Workload was evicted
/// `eviction_settle` ago (longer than a pod takes to stop), has no cluster, its TrainJob is
/// MultiKueue's and suspended, and every worker its config names is reached by Kueue (`Active`,
/// so the copy's deletion went through) and reports to Stowage.
fn stale_owner(
    o: &Observed,
    w: &Workload,
    check: &Check,
    workers: &Workers<'_>,
    settings: &Settings,
    now: Timestamp,
) -> Option<State> {
    let status = w.status.as_ref()?;
    let evicted = find(&status.conditions, EVICTED)?;
    let age = now.duration_since(evicted.last_transition_time.0).unsigned_abs();
    if !is_true(&status.conditions, QUOTA_RESERVED) || status.cluster_name.is_some() || age < settings.eviction_settle {
        return None;
    }
    let owner =
        w.metadata.owner_references.iter().flatten().find(|r| r.kind == "TrainJob" && r.controller == Some(true))?;
    let tj = o.trainjobs.iter().find(|t| t.metadata.uid.as_deref() == Some(owner.uid.as_str()))?;
    let tj_status = tj.status.as_ref()?;
    let active: i32 = tj_status.jobs_status.iter().map(|j| j.active).sum();
    let multikueue = tj.spec.managed_by.as_deref() == Some(KUEUE_MULTIKUEUE_MANAGED_BY);
    if !multikueue || tj.spec.suspend != Some(true) || active == 0 {
        return None;
    }
    let reached = |c: &String| {
        o.multikueue_clusters.iter().any(|mc| {
            mc.metadata.name.as_ref() == Some(c) && mc.status.as_ref().is_some_and(|s| is_true(&s.conditions, ACTIVE))
        })
    };
    if !check.clusters.iter().all(reached) || !check.members.iter().all(|m| workers.live.contains(m.as_str())) {
        return None;
    }
    let jobs = tj_status.jobs_status.iter().map(|j| JobStatus { active: 0, ready: 0, ..j.clone() }).collect();
    let (namespace, name) = key(&tj.metadata);
    let message = format!(
        "evicted {} s ago ({}) and Kueue still holds its quota: TrainJob {name}'s status counts {active} active jobs, \
         copied from its worker before MultiKueue deleted the copy there (kubernetes-sigs/kueue#15380); \
         nothing runs, so Stowage set the counts to 0 and Kueue queues it again",
        age.as_secs(),
        evicted.reason,
    );
    let write = StatusWrite { namespace, name, conditions: tj_status.conditions.clone(), jobs, events: Vec::new() };
    Some(State::Stale { write, message })
}

/// What a MultiKueue AdmissionCheck's config names: its clusters, and the members they are (a
/// MultiKueueCluster is the MemberCluster of its name, or the one its annotation names).
#[derive(Debug, Clone)]
struct Check {
    config: String,
    clusters: Vec<String>,
    members: Vec<String>,
}

impl Check {
    /// Why none of its members can take a Workload: none exists, or none reports.
    fn why_none(&self, o: &Observed) -> String {
        let known: BTreeSet<&str> = o.members.iter().filter_map(|m| m.metadata.name.as_deref()).collect();
        let clusters = self.clusters.join(", ");
        if self.members.iter().any(|m| known.contains(m.as_str())) {
            format!(
                "none of MultiKueueConfig {}'s clusters ({clusters}) is a member cluster reporting now",
                self.config
            )
        } else {
            format!(
                "MultiKueueConfig {} names clusters ({clusters}) that are no member cluster: each MultiKueueCluster must be a MemberCluster of its name (or the one its {MEMBER_CLUSTER_ANNOTATION} annotation names)",
                self.config
            )
        }
    }
}

fn multikueue_checks(o: &Observed) -> BTreeMap<&str, Check> {
    let member_of: BTreeMap<&str, String> = o
        .multikueue_clusters
        .iter()
        .filter_map(|c| {
            let name = c.metadata.name.as_deref()?;
            let member = c.metadata.annotations.as_ref().and_then(|a| a.get(MEMBER_CLUSTER_ANNOTATION));
            Some((name, member.cloned().unwrap_or_else(|| name.to_string())))
        })
        .collect();
    let configs: BTreeMap<&str, &[String]> = o
        .multikueue_configs
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c.spec.clusters.as_slice())))
        .collect();
    o.admission_checks
        .iter()
        .filter(|ac| ac.spec.controller_name == MULTIKUEUE_CONTROLLER)
        .filter_map(|ac| {
            let config = ac.spec.parameters.as_ref().filter(|p| p.kind == "MultiKueueConfig")?;
            let clusters = configs.get(config.name.as_str()).copied().unwrap_or_default();
            let members = clusters.iter().filter_map(|c| member_of.get(c.as_str()).cloned()).collect();
            let check = Check { config: config.name.clone(), clusters: clusters.to_vec(), members };
            Some((ac.metadata.name.as_deref()?, check))
        })
        .collect()
}
