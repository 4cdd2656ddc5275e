//! The cycle proper: the fleet as live members report it, the quota running TrainJobs hold,
//! then two passes of the core. First the assumed pass: placed TrainJobs whose pods their
//! member does not count yet take their room, as they are. Then the waiting TrainJobs, with
//! the running ones as possible victims and their expected ends as releases.

use scheduler_core::{
    Admission, BatchReport, Config, Decision, Fleet, Gang, Queues, QuotaUsage, Release, Running, Snapshot, cycle,
};

use super::intake::{Active, Job, JobState, Waiting};
use super::members::Members;
use crate::translate;

#[derive(Debug)]
pub(super) enum Schedule {
    /// No TrainJob waits: nothing was scheduled.
    Idle,
    /// No live member reported a capacity the hub can read.
    NoCapacity(String),
    /// One decision per waiting TrainJob, in TrainJob order.
    Decided { fleet: Box<Fleet>, decisions: Vec<Decision>, batch: Option<BatchReport> },
}

/// The waiting TrainJobs, in order.
pub(super) fn waiting<'j, 'a>(jobs: &'j [Job<'a>]) -> impl Iterator<Item = (&'j Job<'a>, &'j Waiting<'a>)> {
    jobs.iter().filter_map(|j| match &j.state {
        JobState::Waiting(w) => Some((j, &**w)),
        _ => None,
    })
}

/// TrainJobs with pods bound on a member, in TrainJob order: running, and being evicted.
pub(super) fn bound<'j, 'a>(jobs: &'j [Job<'a>]) -> impl Iterator<Item = &'j Active<'a>> {
    jobs.iter().filter_map(|j| match &j.state {
        JobState::Running(a) => Some(&**a),
        JobState::Waiting(w) => w.evicting.as_ref(),
        _ => None,
    })
}

pub(super) fn run(members: &Members<'_>, queues: &Queues, jobs: &[Job<'_>], config: &Config, now_ms: u64) -> Schedule {
    if waiting(jobs).next().is_none() {
        return Schedule::Idle;
    }
    let live = members.live_clusters();
    let (fleet, capacity, hosts) = match translate::fleet(&live) {
        Ok(f) => f,
        Err(e) => return Schedule::NoCapacity(kube_shell::error_chain(&e)),
    };
    let running: Vec<&Active<'_>> = bound(jobs).collect();
    let mut usage = QuotaUsage::default();
    for a in running.iter().filter(|a| !a.evicting) {
        usage.charge(queues, &a.gang, a.flavors.iter().map(Option::as_deref));
    }
    let assumed: Vec<Gang> = jobs
        .iter()
        .filter_map(|j| match &j.state {
            JobState::Assumed(g) => Some(g.clone()),
            _ => None,
        })
        .collect();
    let snapshot =
        Snapshot { fleet: &fleet, queues, capacity, usage, now_ms, releases: Vec::new(), running: Vec::new() };
    let taken = cycle(snapshot, &assumed, &config.as_placed());
    // Where running gangs' pods are, as their members report them exactly: possible victims
    // for preemption, and releases for reservations.
    let admissions: Vec<(&Active<'_>, Admission)> = if config.preemption.is_some() || config.reservations {
        let bound = translate::bound(&hosts, &live);
        running
            .iter()
            .filter_map(|a| {
                let placed = bound.get(&(a.cluster.clone(), a.key.to_string()))?;
                Some((*a, translate::admission(&fleet, &a.cluster, &a.gang, placed)?))
            })
            .collect()
    } else {
        Vec::new()
    };
    // Each running gang gives its room back at its expected end (one being evicted, now);
    // gangs with no estimate are not counted on.
    let releases = if config.reservations {
        admissions
            .iter()
            .filter_map(|(a, admission)| {
                let end = if a.evicting { now_ms } else { a.started_ms.saturating_add(a.gang.runtime_ms?).max(now_ms) };
                Some(Release::of(&a.gang, admission, end))
            })
            .collect()
    } else {
        Vec::new()
    };
    let victims = if config.preemption.is_none() {
        Vec::new()
    } else {
        admissions
            .iter()
            .map(|(a, admission)| Running {
                gang: &a.gang,
                admission,
                started_ms: a.started_ms,
                checkpoint_ms: a.checkpoint_ms,
                evicting: a.evicting,
            })
            .collect()
    };
    let gangs: Vec<Gang> = waiting(jobs).map(|(_, w)| w.gang.clone()).collect();
    let snapshot = Snapshot {
        fleet: &fleet,
        queues,
        capacity: taken.capacity,
        usage: taken.usage,
        now_ms,
        releases,
        running: victims,
    };
    let out = cycle(snapshot, &gangs, config);
    if let Some(b) = &out.batch {
        tracing::debug!(
            window = b.window,
            binaries = b.binaries,
            kept = b.kept_ilp,
            gap = ?b.gap(),
            greedy = b.greedy_value,
            realised = b.realised_value,
            rejected = ?b.rejected,
            "batch optimiser"
        );
    }
    Schedule::Decided { decisions: out.decisions, batch: out.batch, fleet: Box::new(fleet) }
}
