//! The cycle proper: the fleet as live members report it, the quota running TrainJobs hold,
//! then two passes of the core. First the assumed pass: placed TrainJobs whose pods their
//! member does not count yet take their room, as they are. Then the waiting TrainJobs, with
//! the running ones as possible victims and their expected ends as releases. Kueue's
//! Workloads (`--kueue multikueue`) take part: nominated ones hold their room in the assumed
//! pass, pinned to their member; those to nominate (and those that no longer fit where they
//! were nominated) wait beside the TrainJobs.

use scheduler_core::project::{Ending, Projection, forecast, project};
use scheduler_core::{
    Admission, BatchReport, Config, Decision, Fleet, Gang, GangId, Queues, QuotaUsage, Release, Running, ShortFirst,
    Snapshot, cycle,
};

use super::Observation;
use super::candidates::{Candidate, State};
use super::intake::{Active, Job, JobState, Waiting};
use super::members::Members;
use crate::translate;

#[derive(Debug)]
pub(super) enum Schedule {
    /// No TrainJob waits: nothing was scheduled.
    Idle,
    /// No live member reported a capacity the hub can read.
    NoCapacity(String),
    /// One decision per waiting TrainJob, in TrainJob order, and one per Workload to nominate;
    /// the shorter-first order the cycle applied (its cap grown with the queue).
    Decided {
        fleet: Box<Fleet>,
        decisions: Vec<Decision>,
        nominations: Vec<Nominating>,
        batch: Option<BatchReport>,
        short_first: Option<ShortFirst>,
    },
}

/// The cycle's decision for a Workload to nominate.
#[derive(Debug)]
pub(super) struct Nominating {
    /// Its index among the cycle's candidates.
    pub(super) candidate: usize,
    pub(super) decision: Decision,
    /// Why its nomination is withdrawn, if it had one.
    pub(super) withdrawn: Option<String>,
}

/// The waiting TrainJobs, in order.
pub(super) fn waiting<'j, 'a>(jobs: &'j [Job<'a>]) -> impl Iterator<Item = (&'j Job<'a>, &'j Waiting<'a>)> {
    jobs.iter().filter_map(|j| match &j.state {
        JobState::Waiting(w) => Some((j, &**w)),
        _ => None,
    })
}

/// The shorter-first order a cycle over the waiting TrainJobs applies (`Config::for_waiting`):
/// what `explain` and the gauge show when no cycle ran (no member's capacity readable).
pub(super) fn short_first_for(jobs: &[Job<'_>], config: &Config, now_ms: u64) -> Option<ShortFirst> {
    config.for_waiting(waiting(jobs).map(|(_, w)| &w.gang), now_ms).short_first
}

/// TrainJobs with pods bound on a member, in TrainJob order: running, and being evicted.
pub(super) fn bound<'j, 'a>(jobs: &'j [Job<'a>]) -> impl Iterator<Item = &'j Active<'a>> {
    jobs.iter().filter_map(|j| match &j.state {
        JobState::Running(a) => Some(&**a),
        JobState::Waiting(w) => w.evicting.as_ref(),
        _ => None,
    })
}

/// The fleet before the waiting TrainJobs are decided: live members' capacity and the quota
/// running TrainJobs hold, after the assumed pass (placed TrainJobs their member does not count
/// yet take their room as they are).
struct Ground<'j, 'a> {
    fleet: Fleet,
    capacity: scheduler_core::Capacity,
    usage: QuotaUsage,
    /// Running TrainJobs and where their pods are, as their members report them exactly.
    admissions: Vec<(&'j Active<'a>, Admission)>,
    /// The assumed TrainJobs and where the assumed pass put them.
    assumed: Vec<(Gang, Decision)>,
    /// The Workloads holding room (by candidate index) and whether it is still theirs.
    held: Vec<(usize, Decision)>,
}

/// `None` with why when no live member reported a capacity the hub can read. `where_bound`:
/// whether the running TrainJobs' pods are needed (preemption, reservations, projections).
fn ground<'j, 'a>(
    members: &Members<'_>,
    queues: &Queues,
    jobs: &'j [Job<'a>],
    candidates: &[Candidate<'_>],
    config: &Config,
    now_ms: u64,
    where_bound: bool,
) -> Result<Ground<'j, 'a>, String> {
    let live = members.live_clusters();
    let (fleet, capacity, hosts) = translate::fleet(&live).map_err(|e| kube_shell::error_chain(&e))?;
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
    let held: Vec<(usize, Gang)> =
        candidates.iter().enumerate().filter_map(|(i, c)| Some((i, c.state.held()?))).collect();
    let pass: Vec<Gang> = assumed.iter().cloned().chain(held.iter().map(|(_, g)| g.clone())).collect();
    let snapshot = Snapshot::at(&fleet, queues, capacity, usage, now_ms);
    let mut taken = cycle(snapshot, &pass, &config.as_placed());
    let held = held.into_iter().map(|(i, _)| i).zip(taken.decisions.split_off(assumed.len())).collect();
    let admissions: Vec<(&Active<'_>, Admission)> = if where_bound {
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
    let assumed = assumed.into_iter().zip(taken.decisions).collect();
    Ok(Ground { capacity: taken.capacity, usage: taken.usage, admissions, assumed, held, fleet })
}

pub(super) fn run(
    members: &Members<'_>,
    queues: &Queues,
    jobs: &[Job<'_>],
    candidates: &[Candidate<'_>],
    config: &Config,
    now_ms: u64,
) -> Schedule {
    if waiting(jobs).next().is_none() && !candidates.iter().any(|c| c.state.schedules()) {
        return Schedule::Idle;
    }
    let where_bound = config.preemption.is_some() || config.reservations.is_some();
    let Ground { fleet, capacity, usage, admissions, held, .. } =
        match ground(members, queues, jobs, candidates, config, now_ms, where_bound) {
            Ok(g) => g,
            Err(why) => return Schedule::NoCapacity(why),
        };
    // Each running gang gives its room back at its expected end (one being evicted, now);
    // gangs with no estimate are not counted on.
    let releases = if config.reservations.is_some() {
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
    let mut gangs: Vec<Gang> = waiting(jobs).map(|(_, w)| w.gang.clone()).collect();
    let trainjobs = gangs.len();
    let to_nominate = to_nominate(candidates, &held);
    gangs.extend(to_nominate.iter().map(|(_, g, _)| g.clone()));
    let snapshot = Snapshot {
        releases: releases.into(),
        running: victims,
        ..Snapshot::at(&fleet, queues, capacity, usage, now_ms)
    };
    // The shorter-first cap grows with how long these wait (`ShortFirst::in_force`).
    let config = config.for_waiting(&gangs, now_ms);
    let mut out = cycle(snapshot, &gangs, &config);
    let nominations = to_nominate
        .into_iter()
        .zip(out.decisions.split_off(trainjobs))
        .map(|((candidate, _, withdrawn), decision)| Nominating { candidate, decision, withdrawn })
        .collect();
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
    Schedule::Decided {
        decisions: out.decisions,
        nominations,
        batch: out.batch,
        fleet: Box::new(fleet),
        short_first: config.short_first,
    }
}

/// The Workloads to nominate: those that need one, and those nominated to a member where the
/// assumed pass found their gang no longer fits. With their candidate index and why the
/// nomination they have goes.
fn to_nominate(candidates: &[Candidate<'_>], held: &[(usize, Decision)]) -> Vec<(usize, Gang, Option<String>)> {
    let unfit: std::collections::BTreeMap<usize, String> = held
        .iter()
        .filter_map(|(i, d)| match (d, &candidates[*i].state) {
            (Decision::Pending(reason), State::Nominated { cluster, .. }) => {
                Some((*i, format!("its gang no longer fits on {cluster}: {reason}")))
            }
            _ => None,
        })
        .collect();
    candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match &c.state {
            State::Nominate { gang, withdrawn } => Some((i, gang.clone(), withdrawn.clone())),
            State::Nominated { gang, cluster, .. } => unfit.get(&i).map(|why| {
                let mut gang = gang.clone();
                gang.clusters.avoid.push(cluster.clone());
                (i, gang, Some(why.clone()))
            }),
            _ => None,
        })
        .collect()
}

/// How far ahead a projection looks.
pub(super) const HORIZON_MS: u64 = 30 * 86_400_000;
/// Least remaining time assumed of a running TrainJob that states no run time.
pub(super) const LEAST_REMAINING_MS: u64 = 10 * 60_000;

/// When a running TrainJob is expected to end: at its stated run time, else (heavy-tailed run
/// times: the longer a job has run, the longer it is likely to run on) after as long again as
/// it has run, at least [`LEAST_REMAINING_MS`] from now; one being evicted, now.
pub(super) fn expected_end(a: &Active<'_>, now_ms: u64) -> u64 {
    if a.evicting {
        return now_ms;
    }
    match a.gang.runtime_ms {
        Some(r) => a.started_ms.saturating_add(r).max(now_ms),
        None => now_ms.saturating_add(now_ms.saturating_sub(a.started_ms).max(LEAST_REMAINING_MS)),
    }
}

/// The cycle run forward from now: `run` gets the snapshot after the assumed pass, the waiting
/// gangs (in TrainJob order), what holds capacity and when it ends (running TrainJobs as
/// [`expected_end`] says, assumed ones after their stated time), the run time assumed of gangs
/// that state none (`assumed_ms` when given, else the median expected length of the running
/// ones, an hour when none runs). `None` when no live member reported a capacity the hub can
/// read.
fn forward<R>(
    state: &Observation<'_>,
    config: &Config,
    now_ms: u64,
    assumed_ms: Option<u64>,
    run: impl FnOnce(Snapshot<'_>, &[Gang], Vec<Ending<'_>>, u64) -> R,
) -> Option<R> {
    let (queues, jobs) = (&state.queues.queues, state.jobs.as_slice());
    let g = ground(&state.members, queues, jobs, &state.candidates, config, now_ms, true).ok()?;
    let mut lengths: Vec<u64> =
        g.admissions.iter().map(|(a, _)| expected_end(a, now_ms).saturating_sub(a.started_ms)).collect();
    lengths.sort_unstable();
    let unknown_ms = assumed_ms.unwrap_or_else(|| lengths.get(lengths.len() / 2).copied().unwrap_or(3_600_000));
    let mut holding: Vec<Ending<'_>> = g
        .admissions
        .iter()
        .map(|(a, admission)| Ending { gang: &a.gang, admission: admission.clone(), end_ms: expected_end(a, now_ms) })
        .collect();
    holding.extend(g.assumed.iter().filter_map(|(gang, d)| match d {
        Decision::Admit(admission) => Some(Ending {
            gang,
            admission: admission.clone(),
            end_ms: now_ms.saturating_add(gang.runtime_ms.unwrap_or(unknown_ms)),
        }),
        _ => None,
    }));
    let gangs: Vec<Gang> = waiting(jobs).map(|(_, w)| w.gang.clone()).collect();
    let snapshot = Snapshot::at(&g.fleet, queues, g.capacity.clone(), g.usage.clone(), now_ms);
    Some(run(snapshot, &gangs, holding, unknown_ms))
}

/// When waiting TrainJob `i` (in TrainJob order) is expected to start
/// ([`scheduler_core::project`], run [`forward`]), on which cluster, and the run time assumed
/// of gangs that state none.
pub(super) fn projection(
    state: &Observation<'_>,
    config: &Config,
    now_ms: u64,
    i: usize,
) -> Option<(Projection, String, u64)> {
    let JobState::Waiting(target) = &state.jobs[i].state else { return None };
    forward(state, config, now_ms, None, |snapshot, gangs, holding, unknown_ms| {
        let fleet = snapshot.fleet;
        let p = project(snapshot, gangs, config, &target.gang.id, holding, unknown_ms, HORIZON_MS)?;
        let cluster = fleet.cluster(p.cluster).name.clone();
        Some((p, cluster, unknown_ms))
    })
    .flatten()
}

/// Where each waiting TrainJob (by gang id) is expected to run, from when to when, among those
/// starting within `horizon_ms` ([`scheduler_core::forecast`], run [`forward`]); and when each
/// running one is expected to end. `assumed_ms`: the run time to assume of gangs that state
/// none, when the caller compares two outlooks and wants the same assumption in both.
pub(super) fn outlook(
    state: &Observation<'_>,
    config: &Config,
    now_ms: u64,
    horizon_ms: u64,
    assumed_ms: Option<u64>,
) -> Option<Outlook> {
    forward(state, config, now_ms, assumed_ms, |snapshot, gangs, holding, unknown_ms| {
        let fleet = snapshot.fleet;
        let ending = holding.iter().map(|e| (e.gang.id.clone(), e.end_ms)).collect();
        let starting = forecast(snapshot, gangs, config, holding, unknown_ms, horizon_ms)
            .into_iter()
            .map(|f| {
                let cluster = fleet.cluster(f.cluster).name.clone();
                (f.id, (cluster, f.start_ms, f.end_ms))
            })
            .collect();
        Outlook { starting, ending, unknown_ms }
    })
}

/// What [`outlook`] expects.
#[derive(Debug, Clone, Default)]
pub(super) struct Outlook {
    /// Waiting gang id → (cluster, start, end).
    pub(super) starting: std::collections::BTreeMap<GangId, (String, u64, u64)>,
    /// Running (or assumed) gang id → its expected end.
    pub(super) ending: std::collections::BTreeMap<GangId, u64>,
    /// The run time assumed of gangs that state none.
    pub(super) unknown_ms: u64,
}
