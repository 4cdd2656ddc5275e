//! `stowage explain TRAINJOB`: why a TrainJob is where it is, from the same observation and
//! the same core as the dispatcher's cycle. For one that waits: the cycle's own reason, its
//! place in its queue, when it is expected to start (the cycle's reservation, else the cycle
//! run forward from now: `scheduler_core::project`), and for each member what that member
//! alone would answer (quota, flavor, node selector, the largest free domain), so a user sees
//! which cluster is closest and why. Pure: the CLI lists the hub's objects and prints this.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use scheduler_core::{Config, Decision, Reason, ShortFirst};

use super::intake::{Job, JobState};
use super::schedule::{self, Schedule};
use super::{Observed, Settings, key};
use crate::plan::camel;
use api::stowage::ClusterRank;
use api::trainer::{TrainJob, TrainJobCondition};

/// Where and in how many seconds a waiting TrainJob is expected to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eta {
    pub cluster: String,
    pub in_s: u64,
    pub basis: Basis,
}

/// What an [`Eta`] rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Basis {
    /// The cycle reserved capacity for it, from running TrainJobs' stated ends.
    Reserved,
    /// The cycle run forward from now (`scheduler_core::project`): `ahead` TrainJobs start
    /// before it; running ones end at their stated run time or after as long again as they have
    /// run; those started on the way run `unknown_s` when they state no run time.
    Projected { ahead: usize, unknown_s: u64 },
}

/// Why a TrainJob is where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    pub namespace: String,
    pub name: String,
    pub queue: Option<String>,
    /// Where it stands, in one line.
    pub state: String,
    /// Waiting: its place among its queue's waiting TrainJobs (1-based) and how many wait
    /// there, in the order the cycle considers them: priority, then creation, moved later by
    /// the expected run time up to the shorter-first cap in force (`order_ms`).
    pub position: Option<(usize, usize)>,
    /// Waiting: the shorter-first cap the cycle ordered by, in seconds (grown with the queue);
    /// `None`: creation order alone.
    pub short_first_cap_s: Option<u64>,
    /// Waiting: where and when it is expected to start, and on what that rests.
    pub eta: Option<Eta>,
    /// Waiting: each member and what it alone would answer now.
    pub members: Vec<(String, String)>,
    /// Placed: the member it is placed on, and how the dispatcher ranked the members when it
    /// chose (the Placement's `spec.ranking`, best first).
    pub chosen: Option<(String, Vec<ClusterRank>)>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "TrainJob {}/{}", self.namespace, self.name)?;
        if let Some(q) = &self.queue {
            writeln!(f, "  queue:    {q}")?;
        }
        writeln!(f, "  state:    {}", self.state)?;
        if let Some((at, of)) = self.position {
            let order = match self.short_first_cap_s {
                Some(cap_s) => format!(
                    "by priority, then creation plus the expected run time counted up to {}: shorter first",
                    span(cap_s)
                ),
                None => "by priority, then creation".into(),
            };
            writeln!(f, "  position: {at} of {of} waiting in its queue ({order})")?;
        }
        match &self.eta {
            Some(Eta { cluster, in_s, basis: Basis::Reserved }) => writeln!(
                f,
                "  expected: to start on {cluster} in about {in_s} s: capacity is reserved for it as running TrainJobs end"
            )?,
            Some(Eta { cluster, in_s, basis: Basis::Projected { ahead, unknown_s } }) => writeln!(
                f,
                "  expected: to start on {cluster} in about {in_s} s, after {ahead} TrainJob(s) that start first \
                 (projected: running TrainJobs end at their stated run time or run as long again as they have; \
                 those started meanwhile run their stated time, else {unknown_s} s)"
            )?,
            None if self.position.is_some() => writeln!(
                f,
                "  expected: no estimate within 30 days (it waits on what has no expected end, or fits nowhere)"
            )?,
            None => {}
        }
        if let Some((cluster, ranking)) = &self.chosen {
            match ranking.len() {
                0 => writeln!(f, "  chosen:   {cluster}")?,
                n => writeln!(
                    f,
                    "  chosen:   {cluster}, of {n} member(s) ranked (each column decides only on a tie before it):"
                )?,
            }
            let width = ranking.iter().map(|r| r.cluster.len()).max().unwrap_or(0);
            for r in ranking {
                let within = r.locality.as_deref().map_or("only the cluster".to_string(), |l| format!("one {l}"));
                let mark = if r.cluster == *cluster { "  <- chosen" } else { "" };
                writeln!(
                    f,
                    "    {:<width$}  missed preferences {}, whole gang within {within}, {} GPUs left over, cost weight {}, {} GPUs free{mark}",
                    r.cluster, r.missed_preferences, r.leftover_gpus, r.cost_weight, r.free_gpus
                )?;
            }
        }
        if !self.members.is_empty() {
            writeln!(f, "  per member, now:")?;
            let width = self.members.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
            for (m, why) in &self.members {
                writeln!(f, "    {m:<width$}  {why}")?;
            }
        }
        Ok(())
    }
}

/// The explanation of TrainJob `namespace/name`; `None` when the hub has no such TrainJob.
pub fn explain(
    o: &Observed,
    config: &Config,
    settings: &Settings,
    now: Time,
    namespace: &str,
    name: &str,
) -> Option<Explanation> {
    let tj = o.trainjobs.iter().find(|t| key(&t.metadata) == (namespace.to_string(), name.to_string()))?;
    let mut out = Explanation {
        namespace: namespace.into(),
        name: name.into(),
        queue: Some(crate::translate::queue_name(tj)),
        state: String::new(),
        position: None,
        short_first_cap_s: None,
        eta: None,
        members: Vec::new(),
        chosen: o
            .placements
            .iter()
            .find(|p| key(&p.metadata) == (namespace.to_string(), name.to_string()))
            .and_then(|p| Some((p.spec.cluster.clone()?, p.spec.ranking.clone()))),
    };
    // A Workload Kueue made for it says the TrainJob is Kueue's, whatever mode this explain was
    // told: Kueue queues it, and its status is where the TrainJob stands.
    if let Some(w) = owned_workload(o, tj) {
        out.queue = w.spec.queue_name.clone();
        out.state = kueue_words(w);
        return Some(out);
    }
    let state = super::observe(o, settings, &now);
    let Some(i) = state.jobs.iter().position(|j| std::ptr::eq(j.tj, tj)) else {
        // Finished, or managed by another controller: not the cycle's.
        let finished = tj.status.as_ref().and_then(|s| {
            s.conditions.iter().find(|c| {
                c.status == "True"
                    && [TrainJobCondition::Complete, TrainJobCondition::Failed].iter().any(|t| t.as_str() == c.type_)
            })
        });
        out.state = match finished {
            Some(c) => format!("finished: {} ({})", c.type_, c.message),
            None if super::intake::managed_elsewhere(tj, settings.kueue)
                && tj.spec.managed_by.as_deref() != Some(api::trainer::KUEUE_MULTIKUEUE_MANAGED_BY) =>
            {
                "Kueue's (kueue.x-k8s.io/queue-name, --kueue multikueue), but Kueue has made no Workload for it \
                 yet: is Kueue running on the hub, and does its LocalQueue exist?"
                    .into()
            }
            None => "left to another controller (spec.managedBy)".into(),
        };
        return Some(out);
    };
    let job = &state.jobs[i];
    let now_ms = now.0.as_millisecond().max(0) as u64;
    out.state = match &job.state {
        JobState::Finished => "finished".into(),
        JobState::Suspended(_) => "suspended (spec.suspend: true)".into(),
        JobState::Blocked => pending_words(job),
        JobState::Running(a) => format!("running on {} (its member counts its pods)", a.cluster),
        JobState::Assumed(g) => {
            let on = g.clusters.only.as_ref().and_then(|c| c.first()).cloned().unwrap_or_default();
            format!("placed on {on}; its pods are starting")
        }
        JobState::Waiting(w) => {
            out.queue = Some(w.gang.queue.clone());
            let decided = decision_of(&state, &state.jobs, config, now_ms, i);
            // The order the cycle applied; without a cycle (no member's capacity readable), the
            // one it would, over the TrainJobs waiting.
            let short_first = decided.as_ref().map_or_else(
                || schedule::short_first_for(&state.jobs, config, now_ms),
                |(_, short_first)| *short_first,
            );
            let decision = decided.map(|(d, _)| d);
            // Its queue's order, as the cycle's lane for it (`scheduler_core::queue_order`).
            let in_force = Config { short_first, ..*config };
            let queues = &state.queues.queues;
            let mut order: Vec<(std::cmp::Reverse<i32>, u64, &scheduler_core::GangId)> = schedule::waiting(&state.jobs)
                .map(|(_, w)| &w.gang)
                .filter(|g| g.queue == w.gang.queue)
                .map(|g| (std::cmp::Reverse(g.priority), scheduler_core::order_ms(g, queues, &in_force), &g.id))
                .collect();
            order.sort();
            let at = order.iter().position(|k| *k.2 == w.gang.id).map_or(0, |p| p + 1);
            out.position = Some((at, order.len()));
            out.short_first_cap_s = short_first.map(|s| s.cap_ms / 1000);
            out.eta = match &decision {
                Some(Decision::Pending(Reason::Reserved { cluster, in_s, .. })) => {
                    Some(Eta { cluster: cluster.clone(), in_s: *in_s, basis: Basis::Reserved })
                }
                Some(Decision::Pending(_)) => {
                    schedule::projection(&state, config, now_ms, i).map(|(p, cluster, unknown_ms)| Eta {
                        cluster,
                        in_s: p.start_ms.saturating_sub(now_ms) / 1000,
                        basis: Basis::Projected { ahead: p.ahead, unknown_s: unknown_ms / 1000 },
                    })
                }
                _ => None,
            };
            out.members = per_member(&state, config, now_ms, i);
            match decision {
                Some(Decision::Admit(_)) => "waiting; the next cycle places it".into(),
                Some(Decision::Preempt { victims, .. }) => format!("waiting; preempting {}", victims.join(", ")),
                Some(Decision::Pending(r)) => format!("pending: {}: {r}", camel(r.kind())),
                None => pending_words(job),
            }
        }
    };
    Some(out)
}

/// The Workload Kueue made for `tj` (its controller owner reference names the TrainJob's UID).
fn owned_workload<'a>(o: &'a Observed, tj: &TrainJob) -> Option<&'a api::kueue::Workload> {
    let uid = tj.metadata.uid.as_deref()?;
    o.workloads.iter().find(|w| {
        w.metadata.namespace == tj.metadata.namespace
            && w.metadata.owner_references.iter().flatten().any(|r| r.uid == uid && r.kind == "TrainJob")
    })
}

/// Where a Kueue-queued TrainJob stands, from its Workload's status: Kueue's quota, Stowage's
/// nomination, MultiKueue's admission on a member.
fn kueue_words(w: &api::kueue::Workload) -> String {
    use api::kueue::{ADMITTED, EVICTED, FINISHED, QUOTA_RESERVED};
    let status = w.status.as_ref();
    let condition = |type_: &str| status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_));
    let is_true = |type_: &str| status.is_some_and(|s| api::conditions::is_true(&s.conditions, type_));
    let name = format!("Workload {}", w.metadata.name.as_deref().unwrap_or_default());
    let message = |type_: &str| condition(type_).map(|c| format!(" ({}: {})", c.reason, c.message)).unwrap_or_default();
    let nominated = status.and_then(|s| s.nominated_cluster_names.as_deref()).unwrap_or_default();
    let checks = status.map(|s| s.admission_checks.as_slice()).unwrap_or_default();
    let checks: Vec<String> = checks
        .iter()
        .map(|c| match c.extra.get("message").and_then(|m| m.as_str()).filter(|m| !m.is_empty()) {
            Some(m) => format!("{} {}: {m}", c.name, c.state),
            None => format!("{} {}", c.name, c.state),
        })
        .collect();
    let checks = if checks.is_empty() { String::new() } else { format!("; admission checks: {}", checks.join("; ")) };
    if is_true(FINISHED) {
        format!("Kueue's; finished{} ({name})", message(FINISHED))
    } else if is_true(EVICTED) {
        format!("Kueue's; evicted by Kueue{} ({name})", message(EVICTED))
    } else if is_true(ADMITTED) {
        let on = status.and_then(|s| s.cluster_name.as_deref()).unwrap_or("the hub");
        format!("Kueue's; admitted, running on {on} ({name})")
    } else if is_true(QUOTA_RESERVED) && !nominated.is_empty() {
        format!(
            "Kueue's; quota reserved, nominated by Stowage to {}, waiting for MultiKueue to admit it there ({name}{checks})",
            nominated.join(", ")
        )
    } else if is_true(QUOTA_RESERVED) {
        format!(
            "Kueue's; quota reserved, waiting for a member: Stowage nominates one when the gang fits, and says \
             why not in Events on the Workload ({name}{checks})"
        )
    } else {
        let queue = w.spec.queue_name.as_deref().unwrap_or("?");
        match condition(QUOTA_RESERVED) {
            Some(_) => format!("Kueue's; waiting for quota in LocalQueue {queue}{} ({name})", message(QUOTA_RESERVED)),
            None => format!("Kueue's; waiting for quota in LocalQueue {queue}: Kueue has not reserved it yet ({name})"),
        }
    }
}

/// What the cycle decides for waiting job `i` (in TrainJob order).
fn decision_of(
    state: &super::Observation<'_>,
    jobs: &[Job<'_>],
    config: &Config,
    now_ms: u64,
    i: usize,
) -> Option<(Decision, Option<ShortFirst>)> {
    let at = schedule::waiting(jobs).position(|(j, _)| std::ptr::eq(j, &jobs[i]))?;
    match schedule::run(&state.members, &state.queues.queues, jobs, &state.candidates, config, now_ms) {
        Schedule::Decided { mut decisions, short_first, .. } => Some((decisions.swap_remove(at), short_first)),
        // No member reported a readable capacity: the TrainJob's condition says so.
        Schedule::NoCapacity(_) | Schedule::Idle => None,
    }
}

/// For each member, what the cycle would answer with job `i` held to that member alone; the
/// members left out of the snapshot, why.
fn per_member(state: &super::Observation<'_>, config: &Config, now_ms: u64, i: usize) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in state.members.live_clusters() {
        let name = m.metadata.name.clone().unwrap_or_default();
        let mut jobs = state.jobs.clone();
        if let JobState::Waiting(w) = &mut jobs[i].state {
            let allowed = w.gang.clusters.only.as_ref().is_none_or(|only| only.contains(&name));
            if !allowed {
                out.push((name, "not allowed: the TrainJob is held to other members".into()));
                continue;
            }
            w.gang.clusters.only = Some(vec![name.clone()]);
        }
        let why = match decision_of(state, &jobs, config, now_ms, i).map(|(d, _)| d) {
            Some(Decision::Admit(_)) => "fits now".to_string(),
            Some(Decision::Preempt { victims, .. }) => format!("fits by preempting {}", victims.join(", ")),
            Some(Decision::Pending(r)) => format!("{}: {r}", camel(r.kind())),
            None => "no decision".to_string(),
        };
        out.push((name, why));
    }
    for u in &state.members.unusable {
        let name = u.member.metadata.name.clone().unwrap_or_default();
        out.push((name, format!("left out: its report is refused: {}", u.problem)));
    }
    for m in state.members.silent() {
        out.push((m, "left out: its agent has not reported within the grace period".into()));
    }
    out
}

/// A span of seconds as a user writes one: `6h`, `90m`, `45s`.
fn span(s: u64) -> String {
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

pub(super) fn pending_words(job: &Job<'_>) -> String {
    super::conditions::find_true(&job.conditions, TrainJobCondition::Pending)
        .map_or_else(|| "pending".into(), |c| format!("pending: {}: {}", c.reason, c.message))
}
