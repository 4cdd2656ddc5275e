//! Locality by cost: a gang that prefers a rack (or any level) and finds none free either
//! starts now, spread wider, and runs longer for its whole run, or waits for one and runs at
//! full speed. The cycle weighs the two in expected completion time: the extra run time of the
//! spread placement (its `Slowdown` factor times the gang's run time) against the expected wait
//! for a domain of the preferred level (from running gangs' expected ends, as a reservation is
//! found). Under light load a rack frees soon and the gang waits; under heavy load the wait
//! outgrows the slowdown and the gang starts rather than leave GPUs idle.

use std::cell::OnceCell;

use crate::config::Slowdown;
use crate::decision::Admission;
use crate::fleet::{DomainId, Fleet};
use crate::gang::Gang;
use crate::reason::{HoldCost, Reason};
use crate::reserve::{self, Releases, Reservation};
use crate::run::Run;
use crate::snapshot::Reserved;
use crate::topology::{Level, TopologyConstraint};

/// The widest level a gang whose narrowest common domain is `span` crosses: the level just
/// below `span` (`Host` when it sits on one host, or on the hosts of one rack with no level
/// between).
pub fn crossed(fleet: &Fleet, span: DomainId) -> Level {
    let d = fleet.domain(span);
    if d.node.is_some() {
        return Level::Host;
    }
    fleet.cluster(d.cluster).level_at(d.depth + 1).unwrap_or(Level::Host)
}

/// How much longer than any other waiting gang a hold may keep a gang waiting (see
/// [`Moment::within_tail`]). Chosen on the tuning set (docs/policy.md, "Locality by cost"):
/// 1×, 1.5×, 2×, 3× and unbounded held in 19, 18, 18, 18 and 17 of its 28 runs, 1× at 1.3 %
/// more mean queueing; 2× with [`OWN_RUNTIME_PERMILLE`] has the lowest mean JCT and queueing of
/// those at 18. With a third fleet (39 runs) 1×, 1.5×, 2× and 3× held in 25, 27, 27 and 27.
/// A gang held back by its queue's quota counts too: then the bound is loose.
const TAIL_FACTOR: u64 = 2;
/// The wait a hold may always take, as a share of the gang's run time (permille): with nobody
/// else waiting there is no tail to join, and a short wait for a rack is still worth it.
const OWN_RUNTIME_PERMILLE: u64 = 50;

/// What a cycle knows of its moment that weighing a hold needs: now, what running gangs
/// release and when, the last cycle's reservations, and how contended the fleet is.
#[derive(Debug)]
pub(crate) struct Moment<'c> {
    pub(crate) now_ms: u64,
    pub(crate) releases: &'c Releases<'c>,
    pub(crate) last: &'c [Reserved],
    /// Gangs waiting at the cycle's start: a spread gang holds its GPUs longer, and that time
    /// is taken from every gang waiting behind it (its share of its cluster's GPUs).
    pub(crate) waiting: u64,
    /// The two earliest submissions among the gangs handed to the cycle: the longest any other
    /// gang has waited so far, the queue's own tail, which a hold must not push a gang past.
    pub(crate) earliest_ms: [u64; 2],
}

impl Moment<'_> {
    /// Whether holding `gang` `wait_ms` more keeps it out of the tail: its whole wait at most
    /// [`TAIL_FACTOR`] times the longest any other gang handed to the cycle has waited, or, when
    /// few wait, [`OWN_RUNTIME_PERMILLE`] of its own run time. Holds lower mean completion time,
    /// and a held gang's wait is its own: unbounded, the few held longest were the p99.
    fn within_tail(&self, gang: &Gang, runtime_ms: u64, wait_ms: u64) -> bool {
        let [first, second] = self.earliest_ms;
        let other = if first == gang.submitted_ms { second } else { first };
        let tail_ms = self.now_ms.saturating_sub(other).saturating_mul(TAIL_FACTOR);
        let own_ms = runtime_ms.saturating_mul(OWN_RUNTIME_PERMILLE) / 1000;
        self.now_ms.saturating_sub(gang.submitted_ms).saturating_add(wait_ms) <= tail_ms.max(own_ms)
    }

    /// What running `gang` `extra_ms` longer as `admission` places it costs in completion time:
    /// its own, and, since mean completion time is over every job, that of each gang waiting
    /// behind it, which loses its share of the extra GPU-time on that cluster.
    fn cost_ms(&self, fleet: &Fleet, gang: &Gang, admission: &Admission, extra_ms: u64) -> u64 {
        let gpus = fleet.cluster_gpus(admission.cluster).max(1);
        let others = u128::from(extra_ms) * u128::from(gang.total_gpus()) * u128::from(self.waiting) / u128::from(gpus);
        extra_ms.saturating_add(u64::try_from(others).unwrap_or(u64::MAX))
    }
}

/// The extra run time, in milliseconds, of running `gang` for `runtime_ms` as `admission` places it.
fn extra_ms(run: &Run<'_>, slowdown: &Slowdown, admission: &Admission, runtime_ms: u64) -> u64 {
    let permille = admission.span(run.fleet).map_or(0, |s| slowdown.extra_permille(crossed(run.fleet, s)));
    runtime_ms.saturating_mul(u64::from(permille)) / 1000
}

/// A gang held for its preferred level (`reason` says no domain of it is free): told why the
/// written form does not fit either, when it does not; else start it now as written if that
/// costs less than waiting (for the preferred level or any wider one the
/// spread placement would still cross), else keep it waiting and say what each costs. The
/// spread admission stays taken (uncommitted) when it is returned. `wider`: this cycle's
/// store for the gang's widened forms, built the first time they are needed.
pub(crate) fn weigh<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    held: &'a Gang,
    reason: Reason,
    wider: &'a OnceCell<Vec<Gang>>,
    at: &Moment<'_>,
    reservations: &[Reservation],
) -> Result<Admission, Reason> {
    let Reason::HoldingForLocality { preferred, held: level, shortfall, .. } = reason else { return Err(reason) };
    let cp = run.txn.checkpoint();
    // Nothing fits as written either: that is why it waits, whatever it prefers (told it holds
    // out for locality, its owner would drop the preference for nothing). A reservation, if it
    // gets one, is still for its preferred level.
    let spread = run.spread(gang)?;
    // With no run time, or no slowdowns to weigh, its patience alone holds it.
    let (Some(slowdown), Some(runtime_ms)) = (run.config.locality_cost, gang.runtime_ms) else {
        run.txn.rollback(cp);
        return Err(Reason::HoldingForLocality { preferred, held: level, shortfall, cost: None });
    };
    let spread_ms = extra_ms(run, &slowdown, &spread, runtime_ms);
    if spread_ms == 0 {
        return Ok(spread);
    }
    let spread_cost_ms = at.cost_ms(run.fleet, gang, &spread, spread_ms);
    let spread_level = spread.span(run.fleet).map_or(Level::Zone, |s| crossed(run.fleet, s));
    // Nothing is released before the first running gang ends: when even that is further off
    // than spreading costs, no wait can win, and no search is needed.
    let next_release = at.releases.live(run).first().map(|r| r.end_ms);
    if next_release.is_none_or(|t| t.saturating_sub(at.now_ms) >= spread_cost_ms) {
        return Ok(spread);
    }
    // The waits are found on today's capacity plus future releases, less what the cycle's
    // reservations take until their gangs end, without the spread placement.
    run.txn.rollback(cp);
    let hint = at.last.iter().find(|l| l.gang == gang.id).map(|l| l.start_ms);
    // Each level worth holding for, from the preferred one out to the one the spread placement
    // crosses (a domain of that level would cross only the next narrower): its expected wait
    // plus what the extra run time of the placement it would get then costs. Ties keep the
    // narrower. (`wider` is filled once: a cycle weighs a gang once.)
    let candidates: Vec<Level> = Level::ALL.into_iter().rev().filter(|&l| l < level && l >= spread_level).collect();
    let wider: &'a [Gang] = wider.get_or_init(|| candidates.iter().map(|&l| widened(gang, held, l)).collect());
    let mut best: Option<(u64, Level, u64)> = None;
    for (candidate, form) in std::iter::once((level, held)).chain(candidates.iter().copied().zip(wider)) {
        let hint = hint.filter(|_| candidate == level);
        if let Some((start_ms, fits)) = reserve::earliest(run, form, at.releases, reservations, hint) {
            let wait_ms = start_ms.saturating_sub(at.now_ms);
            let total =
                wait_ms.saturating_add(at.cost_ms(run.fleet, gang, &fits, extra_ms(run, &slowdown, &fits, runtime_ms)));
            if best.is_none_or(|(t, _, _)| total < t) {
                best = Some((total, candidate, wait_ms));
            }
        }
    }
    match best {
        // Waiting wins only by costing less: the wait plus what the held placement's own extra
        // run time costs must be below what the spread's costs.
        Some((total, held_level, wait_ms)) if total < spread_cost_ms && at.within_tail(gang, runtime_ms, wait_ms) => {
            let cost = HoldCost {
                wait_s: wait_ms / 1000,
                spread_level,
                spread_extra_s: spread_ms / 1000,
                others_delay_s: (spread_cost_ms - spread_ms) / 1000,
            };
            Err(Reason::HoldingForLocality { preferred, held: held_level, shortfall, cost: Some(Box::new(cost)) })
        }
        // Placing it again on the same state finds the same room (taken again, not searched).
        _ => run.spread(gang).map_err(|_| Reason::HoldingForLocality { preferred, held: level, shortfall, cost: None }),
    }
}

/// `held` with each pod set it holds to a level narrower than `level` held to `level` instead.
fn widened(gang: &Gang, held: &Gang, level: Level) -> Gang {
    let mut g = held.clone();
    for (ps, written) in g.pod_sets.iter_mut().zip(&gang.pod_sets) {
        if let (TopologyConstraint::Required(l), TopologyConstraint::Preferred(_)) = (ps.topology, written.topology) {
            ps.topology = TopologyConstraint::Required(l.min(level));
        }
    }
    g
}
