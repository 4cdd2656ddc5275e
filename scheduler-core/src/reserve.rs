//! Reservations and backfill: the first gangs that cannot start (as many as
//! `Reservations::depth`) are each given the room where they will start soonest, from what
//! running gangs release at their expected ends and what the reservations before them take and
//! give back at theirs; that room is held, and a later gang may use a reservation's room only
//! if it states a run time that ends before that reservation starts. A depth of one is EASY
//! backfilling (Slurm's); deeper is conservative backfilling (Flux's reservation depth).

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::BTreeMap;

use crate::capacity::PodShape;
use crate::decision::{Admission, Decision};
use crate::fleet::{ClusterId, DomainId, FlavorId};
use crate::gang::{Gang, GangId, PodSet};
use crate::reason::Reason;
use crate::run::{Prepared, Resolved, Run};
use crate::snapshot::{Release, Reserved};
use crate::topology::TopologyConstraint;
use crate::txn::Savepoint;

/// What running gangs release, in order of expected end (ties in the snapshot's order):
/// sorted once a cycle, the first time it is needed, since most cycles need it not at all.
#[derive(Debug)]
pub(crate) struct Releases<'c> {
    all: &'c [Release],
    by_end: OnceCell<Vec<&'c Release>>,
}

impl<'c> Releases<'c> {
    pub(crate) fn new(all: &'c [Release]) -> Self {
        Releases { all, by_end: OnceCell::new() }
    }

    /// Those of gangs not evicted this cycle (an evicted gang has given its capacity back
    /// already), by expected end.
    pub(crate) fn live(&self, run: &Run<'_>) -> Cow<'_, [&'c Release]> {
        let by_end = self.by_end.get_or_init(|| {
            let mut v: Vec<&Release> = self.all.iter().collect();
            v.sort_by_key(|r| r.end_ms);
            v
        });
        if run.txn.evicts_none() {
            Cow::Borrowed(by_end)
        } else {
            Cow::Owned(by_end.iter().copied().filter(|r| !run.txn.is_evicted(r.gang.as_str())).collect())
        }
    }
}

/// Capacity set aside this cycle for one gang expected to start at `start_ms`.
#[derive(Debug)]
pub(crate) struct Reservation {
    pub(crate) gang: GangId,
    cluster: ClusterId,
    pub(crate) start_ms: u64,
    /// When its room comes back for the reservations planned after it: its gang's expected
    /// end (`None`: it states no run time, so never).
    end_ms: Option<u64>,
    /// What it will need on each host (pods of a shape), and how much of that is free now and
    /// held (all of a host's held as one part, see `hold`).
    want: Vec<(DomainId, u32, PodShape)>,
    held: Vec<(DomainId, PodShape)>,
}

/// A gang that does not fit now: it backfills in front of the reservations it ends before if it
/// may, or stays pending, with a reservation of its own when it has waited long enough
/// (`Reservations::after_ms`) and fewer than `Reservations::depth` are held this cycle.
#[allow(clippy::too_many_arguments)] // the cycle's state, each read or changed here
pub(crate) fn no_room<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    held: &'a Gang,
    reason: Reason,
    now_ms: u64,
    releases: &Releases<'_>,
    last: &[Reserved],
    reservations: &mut Vec<Reservation>,
) -> Decision {
    if let Some(admission) = backfill(run, gang, held, now_ms, reservations) {
        return Decision::Admit(admission);
    }
    let capacity_bound =
        matches!(reason, Reason::NoDomain(_) | Reason::HoldingForLocality { .. } | Reason::ReclaimDeferred { .. });
    if !(capacity_bound && may_reserve(run, held, now_ms, reservations.len())) {
        return Decision::Pending(reason);
    }
    let hint = last.iter().find(|l| l.gang == gang.id).map(|l| l.start_ms);
    match reserve(run, held, releases, reservations, hint) {
        Some(r) => {
            let reason = Reason::Reserved {
                cluster: run.fleet.cluster(r.cluster).name.clone(),
                in_s: r.start_ms.saturating_sub(now_ms) / 1000,
                now: Box::new(reason),
            };
            reservations.push(r);
            Decision::Pending(reason)
        }
        None => Decision::Pending(reason),
    }
}

/// Whether `gang`, left waiting at `now_ms` for room, may be given a reservation when `held`
/// are held this cycle already.
fn may_reserve(run: &Run<'_>, gang: &Gang, now_ms: u64, held: usize) -> bool {
    run.config.reservations.is_some_and(|r| r.due(now_ms.saturating_sub(gang.submitted_ms)) && held < r.most())
}

/// Where and when `gang` would start, from what running gangs release in order of their
/// expected ends and what the cycle's `reservations` take and give back (`earliest`). Holds
/// what of that placement is free now, so later gangs cannot take it unless they end before
/// (`backfill`).
fn reserve<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    releases: &Releases<'_>,
    reservations: &[Reservation],
    hint: Option<u64>,
) -> Option<Reservation> {
    let (start_ms, admission) = earliest(run, gang, releases, reservations, hint)?;
    let want: Vec<(DomainId, u32, PodShape)> = Release::of(gang, &admission, start_ms).hosts;
    let end_ms = gang.runtime_ms.map(|run| start_ms.saturating_add(run));
    let mut r =
        Reservation { gang: gang.id.clone(), cluster: admission.cluster, start_ms, end_ms, want, held: Vec::new() };
    hold(run, &mut r);
    Some(r)
}

/// What the cycle's reservations change in the releases a search for one more plans on:
/// running gangs' releases pay each reservation what it will take on its hosts beyond what it
/// holds now (in the order reservations were made), and each reservation's room comes back at
/// its gang's expected end. A reservation's room is counted taken from now until then, also
/// before it starts: the room it will take is freed by gangs that end before it starts, and a
/// gang that would fit in that gap is a backfill's to find, not a reservation's. So capacity
/// only grows along the line, as the search needs.
#[derive(Debug, Default)]
struct Planned {
    /// The releases that pay a reservation, by their place in the running gangs' order: what
    /// they still give back to anyone (`None`: nothing). The others are used as they are.
    paying: Vec<(usize, Option<Release>)>,
    /// Each reservation's room back, by its expected end.
    ends: Vec<Release>,
}

impl Planned {
    fn new(live: &[&Release], reservations: &[Reservation]) -> Self {
        // What each reservation is owed on each host: what it wants there beyond what it holds;
        // and what it gives back at its end: what it holds, and what it was paid.
        let mut owed: Vec<BTreeMap<DomainId, PodShape>> = Vec::with_capacity(reservations.len());
        let mut back: Vec<BTreeMap<DomainId, PodShape>> = Vec::with_capacity(reservations.len());
        for r in reservations {
            let (mut want, mut held): (BTreeMap<DomainId, PodShape>, BTreeMap<DomainId, PodShape>) = Default::default();
            for &(h, n, shape) in &r.want {
                let w = want.entry(h).or_default();
                *w = w.plus(shape.times(n));
            }
            for &(h, part) in &r.held {
                let w = want.entry(h).or_default();
                *w = w.less(part);
                let k = held.entry(h).or_default();
                *k = k.plus(part);
            }
            want.retain(|_, w| *w != PodShape::default());
            owed.push(want);
            back.push(held);
        }
        let mut planned = Planned::default();
        for (i, release) in live.iter().enumerate() {
            // Copied only once one of its hosts pays: most releases pay nothing.
            let mut hosts: Option<Vec<(DomainId, u32, PodShape)>> = None;
            for (k, &(h, n, shape)) in release.hosts.iter().enumerate() {
                let mut left = shape.times(n);
                for (j, r) in reservations.iter().enumerate() {
                    // A reservation over by then takes nothing of it.
                    if r.end_ms.is_some_and(|end| end <= release.end_ms) {
                        continue;
                    }
                    let Some(due) = owed[j].get_mut(&h) else { continue };
                    let paid = left.capped(*due);
                    *due = due.less(paid);
                    left = left.less(paid);
                    let got = back[j].entry(h).or_default();
                    *got = got.plus(paid);
                }
                if hosts.is_none() && left != shape.times(n) {
                    hosts = Some(release.hosts[..k].to_vec());
                }
                if let Some(hosts) = hosts.as_mut().filter(|_| left != PodShape::default()) {
                    hosts.push((h, 1, left));
                }
            }
            if let Some(hosts) = hosts {
                let rest =
                    (!hosts.is_empty()).then(|| Release { gang: release.gang.clone(), end_ms: release.end_ms, hosts });
                planned.paying.push((i, rest));
            }
        }
        for (r, back) in reservations.iter().zip(back) {
            let Some(end_ms) = r.end_ms.filter(|_| !back.is_empty()) else { continue };
            let hosts = back.into_iter().map(|(h, part)| (h, 1, part)).collect();
            planned.ends.push(Release { gang: r.gang.clone(), end_ms, hosts });
        }
        planned.ends.sort_by_key(|r| r.end_ms);
        planned
    }

    /// The releases in order of time: `live` (the running gangs', by expected end) with what
    /// pays a reservation less what it pays, and the reservations' ends among them (at one
    /// instant, running gangs' first).
    fn order<'p>(&'p self, live: &[&'p Release]) -> Vec<&'p Release> {
        let mut paying = self.paying.iter().peekable();
        let mut ends = self.ends.iter().peekable();
        let mut order = Vec::with_capacity(live.len() + self.ends.len());
        for (i, &release) in live.iter().enumerate() {
            let release = match paying.next_if(|(at, _)| *at == i) {
                Some((_, Some(rest))) => rest,
                Some((_, None)) => continue,
                None => release,
            };
            while let Some(end) = ends.next_if(|e| e.end_ms < release.end_ms) {
                order.push(end);
            }
            order.push(release);
        }
        order.extend(ends);
        order
    }
}

/// How many of `order`'s releases (by expected end) must happen before the fleet has as many
/// GPUs free as `gang` asks for; `None`: not even all of them.
fn enough_after(run: &Run<'_>, gang: &Gang, order: &[&Release]) -> Option<usize> {
    let need = gang.total_gpus();
    let mut free = free_gpus(run);
    let mut first = 0;
    while free < need {
        let r = order.get(first)?;
        free += r.hosts.iter().map(|&(_, n, shape)| u64::from(n) * u64::from(shape.gpus)).sum::<u64>();
        first += 1;
    }
    Some(first)
}

/// The GPUs free in the whole fleet, of every flavor.
fn free_gpus(run: &Run<'_>) -> u64 {
    let (fleet, cap) = (run.fleet, &run.txn.cap);
    fleet.clusters().iter().flat_map(|c| c.flavors.iter().map(|&f| cap.free_gpus(fleet, c.root, f))).sum()
}

/// How many of `order`'s releases (by expected end) must happen before `gang` could fit: the
/// fleet has as many GPUs free as it asks for ([`enough_after`]), and each pod set a domain of
/// the level it requires (its cluster, when it requires none), in a cluster it may use, with as
/// many GPUs free, of the flavors it may take, as it asks for. Necessary, not sufficient: a
/// lower bound on the release a placement is first found after, counted rather than tried.
/// `None`: not even after all of them.
fn room_after(run: &Run<'_>, gang: &Gang, prepared: &Prepared, order: &[&Release]) -> Option<usize> {
    let mut first = enough_after(run, gang, order)?;
    for (ps, r) in gang.pod_sets.iter().zip(prepared.resolved()) {
        first = first.max(domain_room_after(run, ps, r, prepared.candidates(), order)?);
    }
    Some(first)
}

/// [`room_after`] for one pod set's domain.
fn domain_room_after(
    run: &Run<'_>,
    ps: &PodSet,
    r: &Resolved,
    candidates: &[ClusterId],
    order: &[&Release],
) -> Option<usize> {
    let need = u64::from(ps.shape.gpus) * u64::from(ps.pods);
    if need == 0 {
        return Some(0);
    }
    let (fleet, cap) = (run.fleet, &run.txn.cap);
    let flavors: Vec<FlavorId> = r.flavors.iter().flatten().copied().collect();
    let depth = |c: ClusterId| match ps.topology {
        TopologyConstraint::Required(level) => fleet.cluster(c).depth_for(level),
        _ => 0,
    };
    let free = |d: DomainId| flavors.iter().map(|&f| cap.free_gpus(fleet, d, f)).sum::<u64>();
    if candidates.iter().any(|&c| fleet.cluster(c).at_depth(depth(c)).iter().any(|&d| free(d) >= need)) {
        return Some(0);
    }
    // Free GPUs of the domains releases reach, from what is free now.
    let mut freed: BTreeMap<DomainId, u64> = BTreeMap::new();
    for (k, release) in order.iter().enumerate() {
        for &(h, n, shape) in &release.hosts {
            let host = fleet.domain(h);
            let usable = host.node.and_then(|s| s.gpu_flavor).is_some_and(|f| flavors.contains(&f));
            if !usable || !candidates.contains(&host.cluster) {
                continue;
            }
            let at = depth(host.cluster);
            let mut d = h;
            while let Some(parent) = fleet.domain(d).parent.filter(|_| fleet.domain(d).depth > at) {
                d = parent;
            }
            let total = freed.entry(d).or_insert_with(|| free(d));
            *total += u64::from(n) * u64::from(shape.gpus);
            if *total >= need {
                return Some(k + 1);
            }
        }
    }
    None
}

/// The soonest `gang` could start as running gangs end, counting GPUs alone: when the fleet
/// first has as many free as it asks for. A lower bound on [`earliest`]'s start, found
/// without trying a placement. `None`: not even once every running gang has ended.
pub(crate) fn earliest_by_count(run: &Run<'_>, gang: &Gang, releases: &Releases<'_>, now_ms: u64) -> Option<u64> {
    let order = releases.live(run);
    let k = enough_after(run, gang, &order)?;
    Some(k.checked_sub(1).map_or(now_ms, |i| order[i].end_ms.max(now_ms)))
}

/// When and where `gang` would start if nothing else were admitted meanwhile: the first
/// release, in order of expected ends, after which it fits, and its placement then; with the
/// cycle's `reservations` taking their room until their gangs' expected ends (`Planned`).
/// `None`: it does not fit even once every running gang and reserved gang has ended. Leaves
/// the cycle's state as it was. `hint`: when the last cycle's reservation for this gang
/// started, where the search starts.
pub(crate) fn earliest<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    releases: &Releases<'_>,
    reservations: &[Reservation],
    hint: Option<u64>,
) -> Option<(u64, Admission)> {
    let live = releases.live(run);
    let planned: Planned;
    let line: Vec<&Release>;
    let order: &[&Release] = if reservations.is_empty() {
        &live
    } else {
        planned = Planned::new(&live, reservations);
        line = planned.order(&live);
        &line
    };
    if order.is_empty() {
        return None;
    }
    // Releases give capacity back, not quota: what the gang may use is the same at every k.
    let prepared = run.prepare(gang).ok()?;
    // No release can make room before the fleet, and a domain each pod set may sit in, has as
    // many GPUs free as it asks for: the first `k` worth a placement is counted, not tried.
    let first = room_after(run, gang, &prepared, order)?;
    // Where the gang goes once the first `k` releases happened: tried on the future capacity
    // and rolled back whole (capacity, memo, usage, counters). Fitting only gets easier as k
    // grows, so the first k that fits can be searched for.
    let mut future = Future::new(run, order);
    let mut fits_after = |run: &mut Run<'a>, k: usize| -> Option<Admission> {
        future.to(run, k);
        let sp = run.txn.checkpoint();
        // A search, not `gang`: the memo holds what fits nowhere *now*, and the words of a
        // miss are not wanted here.
        let placed = run.search(gang, &prepared).ok();
        run.txn.rollback(sp);
        placed
    };
    // Then from the last cycle's answer when there is one (little changes between cycles: two
    // placements confirm it), else galloping up from the count; bisection inside the last
    // step. A few placements per cycle, not one per running gang.
    let n = order.len();
    let mut fails = first.max(1) - 1;
    let guess = hint.map(|t| order.partition_point(|r| r.end_ms <= t)).filter(|&g| g > fails && g <= n);
    let guessed = match guess {
        Some(g) => match fits_after(run, g) {
            Some(a) => Some((g, a)),
            None => {
                fails = g;
                None
            }
        },
        None => None,
    };
    let found = match guessed {
        Some((g, a)) => {
            // Down from a fit, doubling the step, until a miss.
            let (mut k, mut admission, mut step) = (g, a, 1);
            while k > fails + 1 {
                let probe = k.saturating_sub(step).max(fails + 1);
                match fits_after(run, probe) {
                    Some(a) => (k, admission, step) = (probe, a, step * 2),
                    None => {
                        fails = probe;
                        break;
                    }
                }
            }
            Some((k, admission))
        }
        None => {
            let mut step = 1;
            loop {
                let k = (fails + step).min(n);
                if k <= fails {
                    break None;
                }
                if let Some(a) = fits_after(run, k) {
                    break Some((k, a));
                }
                (fails, step) = (k, step * 2);
            }
        }
    };
    let found = found.map(|(mut k, mut admission)| {
        while fails + 1 < k {
            let mid = fails + (k - fails) / 2;
            match fits_after(run, mid) {
                Some(a) => (k, admission) = (mid, a),
                None => fails = mid,
            }
        }
        (order[k - 1].end_ms, admission)
    });
    future.undo(run);
    found
}

/// The capacity once the first `k` of `order`'s releases have happened, for one `k` after
/// another: a search probes `k`s near each other, so each move gives back (or rolls back)
/// only the releases between the last `k` and the next, not the first `k` all again.
struct Future<'o, 'r> {
    order: &'o [&'r Release],
    /// `marks[k]`: where the transaction stood with the first `k` releases given back.
    marks: Vec<Savepoint>,
}

impl<'o, 'r> Future<'o, 'r> {
    fn new(run: &Run<'_>, order: &'o [&'r Release]) -> Self {
        Future { order, marks: vec![run.txn.checkpoint()] }
    }

    /// Leaves the capacity as it is once the first `k` releases have happened.
    fn to(&mut self, run: &mut Run<'_>, k: usize) {
        if self.marks.len() > k + 1 {
            run.txn.rollback(self.marks[k]);
            self.marks.truncate(k + 1);
        }
        while self.marks.len() <= k {
            for &(h, n, shape) in &self.order[self.marks.len() - 1].hosts {
                run.txn.cap.give_back(run.fleet, h, n, shape);
            }
            self.marks.push(run.txn.checkpoint());
        }
    }

    /// The capacity as it is now, with no release given back.
    fn undo(self, run: &mut Run<'_>) {
        run.txn.rollback(self.marks[0]);
    }
}

/// Whether `gang`, decided at `now_ms`, may use the room of a reservation for `reserved_for`
/// starting at `start_ms`: it states a run time that ends by then, and is not that gang.
pub fn may_backfill(gang: &Gang, now_ms: u64, start_ms: u64, reserved_for: &GangId) -> bool {
    gang.runtime_ms.is_some_and(|run| now_ms.saturating_add(run) <= start_ms) && gang.id != *reserved_for
}

/// Takes what the reservation wants and is free now: on each host, of each resource, what is
/// free up to what its pods there will ask, whether or not that makes a whole pod. Held by
/// whole pods, the rest of a host a backfill took part of would go to anyone, delaying the
/// reservation, and the cycle's capacity would grow (what fit nowhere would fit after).
fn hold(run: &mut Run<'_>, r: &mut Reservation) {
    r.held.clear();
    for &(h, n, shape) in &r.want {
        let free = run.txn.cap.node_free(h);
        let free = PodShape { gpus: free.gpus, cpu_milli: free.cpu_milli, memory_mib: free.memory_mib };
        let part = shape.times(n).capped(free);
        if part != PodShape::default() {
            run.txn.cap.take(run.fleet, h, 1, part);
            r.held.push((h, part));
        }
    }
}

/// Gives the held room back: the cycle does so at its end, since nothing admitted uses it.
pub(crate) fn unhold(run: &mut Run<'_>, r: &Reservation) {
    for &(h, part) in &r.held {
        run.txn.cap.give_back(run.fleet, h, 1, part);
    }
}

/// A gang that did not fit beside the reservations may use the room of those it states a run
/// time that ends before; they then hold what is left. The others stay held: it would still be
/// running when they start.
fn backfill<'a>(
    run: &mut Run<'a>,
    gang: &'a Gang,
    held: &'a Gang,
    now_ms: u64,
    reservations: &mut [Reservation],
) -> Option<Admission> {
    // A reservation holding nothing (none of its hosts is free yet) leaves the capacity as the
    // gang was just tried on: lifting only such, it would miss again.
    let lifted = lifted(reservations, gang, now_ms);
    if lifted == 0 {
        return None;
    }
    let each = |mask: u64| (0..reservations.len()).filter(move |&i| mask & (1 << i) != 0);
    // Nor when the fleet, with those holds given back, has fewer GPUs free than the gang asks.
    let held_gpus: u64 = each(lifted).flat_map(|i| &reservations[i].held).map(|(_, part)| u64::from(part.gpus)).sum();
    if free_gpus(run) + held_gpus < gang.total_gpus() {
        return None;
    }
    for i in each(lifted) {
        unhold(run, &reservations[i]);
    }
    // The memo's "fits nowhere" was learnt with the holds in place; without them more fits,
    // and what fit nowhere without just these is in their memo.
    run.txn.swap_memos(lifted);
    let admitted = run.patient_gang(gang, held).ok();
    run.txn.swap_memos(lifted);
    for i in each(lifted) {
        hold(run, &mut reservations[i]);
    }
    admitted
}

/// The reservations `gang`, decided at `now_ms`, may backfill in front of and that hold
/// something, a bit each by their place in `reservations`.
fn lifted(reservations: &[Reservation], gang: &Gang, now_ms: u64) -> u64 {
    reservations
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.held.is_empty() && may_backfill(gang, now_ms, r.start_ms, &r.gang))
        .fold(0, |mask, (i, _)| mask | (1 << i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{GangExt, gang, greedy, uniform_cluster};
    use crate::fleet::{Fleet, FleetBuilder};
    use crate::queue::{QueueSpec, Queues};
    use crate::snapshot::Snapshot;
    use crate::topology::Level;
    use crate::{ClusterChoice, Config, Decision, Fill, cycle};

    /// A small deterministic generator: the states differ by seed, and stay the same run to run.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    fn fleet() -> Fleet {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 3), (Level::Host, 2)]).expect("east");
        uniform_cluster(&mut b, "west", "a100", 4, &[(Level::Block, 2), (Level::Rack, 2), (Level::Host, 2)])
            .expect("west");
        b.build().expect("fleet")
    }

    fn any_pod_set(rng: &mut Lcg, id: &str) -> Gang {
        let g = gang(id).pods(1 + rng.below(4) as u32).gpus([0, 1, 2, 4, 8, 8][rng.below(6) as usize]);
        let g = match rng.below(5) {
            0 => g.required(Level::Rack),
            1 => g.required(Level::Host),
            2 => g.required(Level::Block),
            3 => g.preferred(Level::Rack),
            _ => g,
        };
        if rng.below(4) == 0 { g.flavor(["h100", "a100"][rng.below(2) as usize]) } else { g }
    }

    /// One pod set, or (one in three) two of their own shapes and constraints.
    fn any_gang(rng: &mut Lcg, id: String) -> Gang {
        let mut g = any_pod_set(rng, &id);
        if rng.below(3) == 0 {
            let mut second = any_pod_set(rng, &id).pod_sets.remove(0);
            second.name = "worker".into();
            g.pod_sets.push(second);
        }
        g
    }

    /// The first `k` (from 1) after whose releases `gang` is found a place, tried one by one.
    fn by_trying_each<'a>(run: &mut Run<'a>, gang: &'a Gang, order: &[&Release]) -> Option<(u64, Admission)> {
        let prepared = run.prepare(gang).ok()?;
        (1..=order.len()).find_map(|k| {
            let sp = run.txn.checkpoint();
            for r in &order[..k] {
                for &(h, n, shape) in &r.hosts {
                    run.txn.cap.give_back(run.fleet, h, n, shape);
                }
            }
            let placed = run.search(gang, &prepared).ok();
            run.txn.rollback(sp);
            placed.map(|a| (order[k - 1].end_ms, a))
        })
    }

    /// A backfill that takes part of a held host leaves the rest of it held: a gang that would
    /// not end before the reservation starts is told, truly, that nothing fits, and one that
    /// would may take it.
    /// Two gangs of two hosts wait on a fleet of three, all busy or held: the first is given
    /// the first host to free and the free one; the second, with room for two reservations, is
    /// planned on the room the first gives back at its expected end (30 s), not on the next
    /// running gang's end (100 s); with room for one, it gets none. A backfill may use the room
    /// of a reservation it ends before, never of one it does not.
    #[test]
    fn a_second_reservation_plans_on_the_room_the_first_gives_back() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 1), (Level::Host, 3)]).expect("east");
        let fleet = b.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let busy = [gang("a").gpus(8), gang("b").gpus(8)];
        let first = cycle(Snapshot::idle(&fleet, &queues), &busy, &greedy());
        let admitted = |i: usize| match &first.decisions[i] {
            Decision::Admit(a) => a.clone(),
            other => panic!("{i} starts: {other:?}"),
        };
        let releases = [Release::of(&busy[0], &admitted(0), 10_000), Release::of(&busy[1], &admitted(1), 100_000)];
        let pending = [
            gang("first").pods(2).gpus(8).runtime(20_000).submitted(0),
            gang("second").pods(2).gpus(8).runtime(50_000).submitted(1),
            // Ends after the first starts: the first's held host is not for it.
            gang("fifteen").gpus(8).runtime(15_000).submitted(2),
            // Ends before either starts.
            gang("five").gpus(8).runtime(5_000).submitted(3),
        ];
        let at_depth = |depth: u32| {
            let config = Config { reservations: Some(crate::Reservations { after_ms: 0, depth }), ..greedy() };
            let snapshot = Snapshot {
                releases: Cow::Borrowed(&releases),
                ..Snapshot::at(&fleet, &queues, first.capacity.clone(), first.usage.clone(), 0)
            };
            cycle(snapshot, &pending, &config)
        };
        let starts = |out: &crate::Cycle| -> Vec<Option<u64>> {
            out.decisions
                .iter()
                .map(|d| match d {
                    Decision::Pending(Reason::Reserved { in_s, .. }) => Some(*in_s),
                    _ => None,
                })
                .collect()
        };
        let two = at_depth(2);
        assert_eq!(starts(&two), [Some(10), Some(30), None, None]);
        let reserved: Vec<(&str, u64)> = two.reserved.iter().map(|r| (r.gang.as_str(), r.start_ms)).collect();
        assert_eq!(reserved, [("first", 10_000), ("second", 30_000)]);
        let one = at_depth(1);
        assert_eq!(starts(&one), [Some(10), None, None, None], "one reservation: the second has none");
        for out in [&one, &two] {
            assert!(matches!(out.decisions[2], Decision::Pending(Reason::NoDomain(_))), "{:?}", out.decisions[2]);
            assert!(matches!(out.decisions[3], Decision::Admit(_)), "five backfills: {:?}", out.decisions[3]);
        }
    }

    #[test]
    fn a_backfill_leaves_the_rest_of_a_held_host_held() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 1), (Level::Host, 2)]).expect("east");
        let fleet = b.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let config = Config { reservations: Some(crate::Reservations::AT_ONCE), ..greedy() };
        let busy = [gang("busy").gpus(8)];
        let first = cycle(Snapshot::idle(&fleet, &queues), &busy, &config);
        let Decision::Admit(running) = &first.decisions[0] else { panic!("busy starts: {:?}", first.decisions) };
        let releases = [Release::of(&busy[0], running, 100_000)];
        let snapshot = Snapshot {
            releases: Cow::Borrowed(&releases),
            ..Snapshot::at(&fleet, &queues, first.capacity, first.usage, 1_000)
        };
        let pending = [
            // Waits for busy's host: reserves both hosts, and holds the free one.
            gang("big").pods(2).gpus(8).submitted(0),
            gang("x").gpus(4).submitted(1),
            // Ends before big starts: backfills into the held host, half of it.
            gang("y").gpus(4).runtime(10_000).submitted(2),
            // Would not end before big starts (a shape not tried yet, so searched): the half
            // y left stays big's.
            gang("z").gpus(3).submitted(3),
            // Would: takes part of it.
            gang("w").gpus(2).runtime(20_000).submitted(4),
        ];
        let out = cycle(snapshot, &pending, &config);
        let decision = |i: usize| &out.decisions[i];
        assert!(matches!(decision(0), Decision::Pending(Reason::Reserved { .. })), "{:?}", decision(0));
        for i in [1, 3] {
            let Decision::Pending(Reason::NoDomain(s)) = decision(i) else { panic!("{i}: {:?}", decision(i)) };
            assert_eq!(s.largest, 0, "{i}: nothing but the hold is free");
        }
        let hosts = |i: usize| match decision(i) {
            Decision::Admit(a) => a.pod_sets[0].hosts.clone(),
            other => panic!("{i} backfills: {other:?}"),
        };
        assert_eq!(hosts(2), hosts(4), "y and w share the held host");
        assert_eq!(out.capacity.node_free(hosts(2)[0].0).gpus, 2, "the cycle gives the rest of the hold back");
    }

    /// The counted bound, the galloping, the bisection, the hint and the moves of the future
    /// capacity between probes find what trying every release in turn finds, from every hint,
    /// and leave the capacity as it was: gangs of one pod set or two, with and without GPUs,
    /// flavors and levels, under Stowage's placement and a first-fit baseline's.
    #[test]
    fn the_earliest_start_is_the_first_release_after_which_the_gang_fits() {
        let fleet = fleet();
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let configs = [greedy(), Config::baseline(ClusterChoice::MostFree, Fill::FirstFit, None)];
        let mut checked = 0;
        // Gangs of one and of two pod sets that do fit at some release.
        let mut found = [0; 2];
        for seed in 0..60 {
            let config = &configs[seed as usize % configs.len()];
            let mut rng = Lcg(seed);
            let fillers: Vec<Gang> = (0..24).map(|i| any_gang(&mut rng, format!("run-{i}"))).collect();
            let out = cycle(Snapshot::idle(&fleet, &queues), &fillers, config);
            // Ends drawn with ties, so the order by end is not the order of starts.
            let releases: Vec<Release> = fillers
                .iter()
                .zip(&out.decisions)
                .filter_map(|(g, d)| match d {
                    Decision::Admit(a) => Some(Release::of(g, a, 1_000 * (1 + rng.below(12)))),
                    _ => None,
                })
                .collect();
            let releases = Releases::new(&releases);
            let targets: Vec<Gang> = (0..8).map(|i| any_gang(&mut rng, format!("wait-{i}"))).collect();
            for target in &targets {
                let mut run = Run::new(&fleet, &queues, config, out.capacity.clone(), out.usage.clone());
                let order: Vec<&Release> = releases.live(&run).into_owned();
                let want = by_trying_each(&mut run, target, &order);
                if want.is_some() {
                    found[target.pod_sets.len() - 1] += 1;
                }
                let hints = std::iter::once(None).chain(order.iter().map(|r| Some(r.end_ms))).chain([Some(0)]);
                for hint in hints {
                    let got = earliest(&mut run, target, &releases, &[], hint);
                    assert_eq!(got, want, "seed {seed}, {target:?}, hint {hint:?}");
                    assert_eq!(run.cap(), &out.capacity, "seed {seed}: the capacity is left as it was");
                    checked += 1;
                }
            }
        }
        assert!(checked > 1_000 && found[0] > 100 && found[1] > 40, "{checked} searches, {found:?} found");
    }
}
