//! What-if on a live hub (`stowage simulate --from`): the hub as observed, optionally edited (a
//! pool added, a member removed, a quota changed), run forward with the production cycle. Each
//! unfinished TrainJob gets when it is expected to start and end, by the rules `stowage explain`
//! projects with ([`super::schedule::outlook`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use api::stowage::{DomainCapacity, MemberCluster, MemberClusterSpec, MemberClusterStatus, QueueQuota};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use scheduler_core::Config;

use super::intake::JobState;
use super::{Observed, Settings, key, observe, schedule};

/// One edit to the observed hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// `add-pool cluster=X flavor=F nodes=N [gpus-per-node=G]`: N free nodes of G GPUs (8 by
    /// default) of flavor F in member X, in a domain of their own (a new member when X is none).
    AddPool { cluster: String, flavor: String, nodes: u32, gpus_per_node: u32 },
    /// `remove-cluster X`: member X gone; what ran there waits again.
    RemoveCluster(String),
    /// `quota queue=Q flavor=F gpus=N`: Queue Q's nominal GPU quota of flavor F is N.
    Quota { queue: String, flavor: String, gpus: u64 },
}

/// What is wrong with an edit, naming the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--what-if {edit:?}: {problem}")]
pub struct EditError {
    pub edit: String,
    pub problem: String,
}

impl FromStr for Edit {
    type Err = EditError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |problem: String| EditError { edit: s.to_string(), problem };
        let mut words = s.split_whitespace();
        let verb = words.next().unwrap_or_default();
        let mut args = std::collections::BTreeMap::new();
        let mut bare = Vec::new();
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => {
                    args.insert(k, v);
                }
                None => bare.push(w),
            }
        }
        let get = |k: &str| args.get(k).map(|v| v.to_string()).ok_or_else(|| fail(format!("{k}= is missing")));
        let number = |k: &str, v: String| {
            v.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| fail(format!("{k}={v} is not a positive number")))
        };
        let known = |allowed: &[&str]| match args.keys().find(|k| !allowed.contains(k)) {
            Some(k) => Err(fail(format!("{k}= is not one of {}", allowed.join(", ")))),
            None => Ok(()),
        };
        match verb {
            "add-pool" => {
                known(&["cluster", "flavor", "nodes", "gpus-per-node"])?;
                let gpus_per_node = match args.get("gpus-per-node") {
                    Some(g) => number("gpus-per-node", g.to_string())?,
                    None => 8,
                };
                if gpus_per_node > 64 {
                    return Err(fail(format!("gpus-per-node={gpus_per_node} is more than 64")));
                }
                let nodes = number("nodes", get("nodes")?)?;
                if nodes > 100_000 {
                    return Err(fail(format!("nodes={nodes} is more than 100000")));
                }
                Ok(Edit::AddPool { cluster: get("cluster")?, flavor: get("flavor")?, nodes, gpus_per_node })
            }
            "remove-cluster" => match (bare.as_slice(), args.get("cluster")) {
                ([name], None) => Ok(Edit::RemoveCluster(name.to_string())),
                ([], Some(name)) => Ok(Edit::RemoveCluster(name.to_string())),
                _ => Err(fail("names one member: remove-cluster X".into())),
            },
            "quota" => {
                known(&["queue", "flavor", "gpus"])?;
                let gpus = get("gpus")?;
                let gpus = gpus.parse::<u64>().map_err(|_| fail(format!("gpus={gpus} is not a number")))?;
                Ok(Edit::Quota { queue: get("queue")?, flavor: get("flavor")?, gpus })
            }
            other => Err(fail(format!("{other:?} is not add-pool, remove-cluster or quota"))),
        }
    }
}

impl fmt::Display for Edit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Edit::AddPool { cluster, flavor, nodes, gpus_per_node } => {
                write!(f, "add-pool cluster={cluster} flavor={flavor} nodes={nodes} gpus-per-node={gpus_per_node}")
            }
            Edit::RemoveCluster(c) => write!(f, "remove-cluster {c}"),
            Edit::Quota { queue, flavor, gpus } => write!(f, "quota queue={queue} flavor={flavor} gpus={gpus}"),
        }
    }
}

impl Edit {
    /// The hub as it would be after the edit.
    pub fn apply(&self, o: &mut Observed, now: &Time) -> Result<(), EditError> {
        let fail = |problem: String| EditError { edit: self.to_string(), problem };
        match self {
            Edit::AddPool { cluster, flavor, nodes, gpus_per_node } => {
                let at = o.members.iter().position(|m| m.metadata.name.as_deref() == Some(cluster));
                let at = at.unwrap_or_else(|| {
                    let mut m = MemberCluster::new(cluster, MemberClusterSpec::default());
                    m.status = Some(MemberClusterStatus {
                        heartbeat_time: Some(now.0.to_string()),
                        ..MemberClusterStatus::default()
                    });
                    o.members.push(m);
                    o.members.len() - 1
                });
                let m = &mut o.members[at];
                let status = m.status.get_or_insert_with(Default::default);
                // A domain of its own at every level the member reports.
                let path = (0..status.topology_levels.len()).map(|l| format!("what-if-{l}")).collect();
                let mut free_histogram = vec![0; *gpus_per_node as usize + 1];
                free_histogram[*gpus_per_node as usize] = *nodes;
                let gpus = u64::from(*nodes) * u64::from(*gpus_per_node);
                status.domains.push(DomainCapacity {
                    path,
                    flavor: flavor.clone(),
                    class: Default::default(),
                    nodes: *nodes,
                    gpus_per_node: *gpus_per_node,
                    allocatable_gpus: gpus,
                    free_gpus: gpus,
                    free_histogram,
                    cpu_milli_per_node: None,
                    memory_mib_per_node: None,
                });
                crate::translate::check_member(m).map_err(|e| fail(kube_shell::error_chain(&e)))
            }
            Edit::RemoveCluster(c) => {
                let before = o.members.len();
                o.members.retain(|m| m.metadata.name.as_deref() != Some(c));
                if o.members.len() == before {
                    return Err(fail(format!("no member {c} on the hub")));
                }
                Ok(())
            }
            Edit::Quota { queue, flavor, gpus } => {
                let q = o
                    .queues
                    .iter_mut()
                    .find(|q| q.metadata.name.as_deref() == Some(queue))
                    .ok_or_else(|| fail(format!("no Queue {queue} on the hub")))?;
                let quotas = &mut q.spec.quotas;
                match quotas.iter_mut().find(|x| &x.flavor == flavor && x.resource == "nvidia.com/gpu") {
                    Some(x) => x.nominal_quota = gpus.to_string(),
                    None => quotas.push(QueueQuota {
                        flavor: flavor.clone(),
                        resource: "nvidia.com/gpu".into(),
                        nominal_quota: gpus.to_string(),
                        borrowing_limit: None,
                        lending_limit: None,
                    }),
                }
                Ok(())
            }
        }
    }
}

/// Where an unfinished TrainJob is expected to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Running on the cluster; ends in this many seconds (`None`: not known until its member
    /// reports where its pods are bound, so its room is not counted as coming back).
    Running { cluster: String, ends_in_s: Option<u64> },
    /// Waiting; starts on the cluster in this many seconds and runs until the end, or does not
    /// start within the horizon (`None`).
    Waiting(Option<(String, u64, u64)>),
    /// Neither placed nor waiting for a placement: suspended, or blocked, and why (its
    /// `Pending` condition's reason and message).
    Held(String),
}

/// One unfinished TrainJob's outlook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutlook {
    pub namespace: String,
    pub name: String,
    pub queue: String,
    pub expected: Expected,
}

/// Each unfinished TrainJob's outlook over `horizon`, in queue then TrainJob order; and the
/// run time assumed of those that state none (seconds): `assumed_s` when given, else the
/// running jobs' median. Empty when no live member reported a readable capacity.
///
/// An edited hub is read with the hub's own assumption: removing a cluster removes its running
/// jobs from the median, which would otherwise change every other job's expected end.
pub fn outlook(
    o: &Observed,
    config: &Config,
    settings: &Settings,
    now: Time,
    horizon: Duration,
    assumed_s: Option<u64>,
) -> (Vec<JobOutlook>, u64) {
    let state = observe(o, settings, &now);
    let now_ms = now.0.as_millisecond().max(0) as u64;
    let horizon_ms = u64::try_from(horizon.as_millis()).unwrap_or(u64::MAX);
    let assumed_ms = assumed_s.map(|s| s.saturating_mul(1000));
    let run = schedule::outlook(&state, config, now_ms, horizon_ms, assumed_ms).unwrap_or_default();
    let secs = |ms: u64| ms.saturating_sub(now_ms) / 1000;
    let mut out: Vec<JobOutlook> = state
        .jobs
        .iter()
        // One that finished this cycle (its member just said so) has no outlook.
        .filter(|j| !matches!(j.state, JobState::Finished))
        .map(|j| {
            let (namespace, name) = key(&j.tj.metadata);
            let (queue, expected) = match &j.state {
                JobState::Running(a) => {
                    let ends_in_s = run.ending.get(&a.gang.id).map(|&e| secs(e));
                    (a.gang.queue.clone(), Expected::Running { cluster: a.cluster.clone(), ends_in_s })
                }
                JobState::Assumed(g) => {
                    let cluster = g.clusters.only.as_ref().and_then(|c| c.first()).cloned().unwrap_or_default();
                    let ends_in_s = run.ending.get(&g.id).map(|&e| secs(e));
                    (g.queue.clone(), Expected::Running { cluster, ends_in_s })
                }
                JobState::Waiting(w) => {
                    let start = run.starting.get(&w.gang.id).map(|(c, s, e)| (c.clone(), secs(*s), secs(*e)));
                    (w.gang.queue.clone(), Expected::Waiting(start))
                }
                JobState::Suspended(_) => (crate::translate::queue_name(j.tj), Expected::Held("suspended".into())),
                _ => (crate::translate::queue_name(j.tj), Expected::Held(super::explain::pending_words(j))),
            };
            JobOutlook { namespace, name, queue, expected }
        })
        .collect();
    out.sort_by(|a, b| (&a.queue, &a.namespace, &a.name).cmp(&(&b.queue, &b.namespace, &b.name)));
    (out, run.unknown_ms / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_parse_as_written_and_bad_ones_name_the_part() {
        let e: Edit = "add-pool cluster=east flavor=h100 nodes=4".parse().expect("add-pool");
        assert_eq!(e, Edit::AddPool { cluster: "east".into(), flavor: "h100".into(), nodes: 4, gpus_per_node: 8 });
        assert_eq!("remove-cluster west".parse::<Edit>(), Ok(Edit::RemoveCluster("west".into())));
        let q: Edit = "quota queue=team-a flavor=h100 gpus=32".parse().expect("quota");
        assert_eq!(q, Edit::Quota { queue: "team-a".into(), flavor: "h100".into(), gpus: 32 });
        for (bad, problem) in [
            ("grow cluster=x", "\"grow\" is not add-pool, remove-cluster or quota"),
            ("add-pool cluster=x flavor=h nodes=0", "nodes=0 is not a positive number"),
            ("add-pool cluster=x nodes=4", "flavor= is missing"),
            (
                "add-pool cluster=x flavor=h nodes=4 racks=2",
                "racks= is not one of cluster, flavor, nodes, gpus-per-node",
            ),
            ("remove-cluster", "names one member: remove-cluster X"),
            ("quota queue=q flavor=h gpus=-1", "gpus=-1 is not a number"),
        ] {
            let err = bad.parse::<Edit>().expect_err(bad);
            assert_eq!(err.problem, problem, "{bad}");
        }
    }

    #[test]
    fn a_quota_edit_sets_or_adds_the_flavors_gpu_quota_and_a_missing_queue_is_named() {
        let queue: api::stowage::Queue = input_limits::yaml::from_str(
            "apiVersion: stowage.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  quotas:\n  \
             - {flavor: h100, resource: nvidia.com/gpu, nominalQuota: '16'}\n",
        )
        .expect("queue");
        let mut o = Observed { queues: vec![queue], ..Observed::default() };
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        Edit::Quota { queue: "team-a".into(), flavor: "h100".into(), gpus: 64 }.apply(&mut o, &now).expect("set");
        Edit::Quota { queue: "team-a".into(), flavor: "a100".into(), gpus: 8 }.apply(&mut o, &now).expect("added");
        let quotas: Vec<(&str, &str)> =
            o.queues[0].spec.quotas.iter().map(|q| (q.flavor.as_str(), q.nominal_quota.as_str())).collect();
        assert_eq!(quotas, vec![("h100", "64"), ("a100", "8")]);
        let err = Edit::Quota { queue: "nope".into(), flavor: "h100".into(), gpus: 1 }.apply(&mut o, &now);
        assert_eq!(err.expect_err("missing").problem, "no Queue nope on the hub");
        let err = Edit::RemoveCluster("gone".into()).apply(&mut o, &now);
        assert_eq!(err.expect_err("missing").problem, "no member gone on the hub");
    }
}
