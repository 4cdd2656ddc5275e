//! When a waiting gang is expected to start: the cycle run forward on a snapshot, each gang
//! holding capacity giving it back at its expected end, and each gang started on the way
//! ending after its own run time. What `stowage explain` tells a user who waits, by the same
//! rules (quota, order, reservations and backfill, locality patience) the cycle applies; nothing
//! is preempted on the way, and the batch optimiser is left out. Pure and bounded: at most
//! [`MAX_STEPS`] cycles, and nothing past the horizon.

use crate::config::Config;
use crate::cycle::cycle;
use crate::decision::{Admission, Decision, release};
use crate::fleet::ClusterId;
use crate::gang::{Gang, GangId};
use crate::snapshot::{Release, Snapshot};

/// The most cycles one projection runs: each follows the end of at least one gang.
pub const MAX_STEPS: usize = 512;

/// A gang holding capacity, and when it is expected to give it back.
#[derive(Debug, Clone)]
pub struct Ending<'a> {
    pub gang: &'a Gang,
    pub admission: Admission,
    pub end_ms: u64,
}

/// Where and when the gang is expected to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    pub start_ms: u64,
    pub cluster: ClusterId,
    /// Gangs expected to start before it, on the way.
    pub ahead: usize,
}

/// When and where a pending gang is expected to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forecast {
    pub id: GangId,
    pub start_ms: u64,
    pub end_ms: u64,
    pub cluster: ClusterId,
    /// Gangs expected to start before it.
    pub ahead: usize,
}

/// When gang `target` of `pending` is expected to start, from `snapshot` (its capacity and
/// usage with `holding`'s gangs in them) and when each gang holding capacity ends. A gang
/// started on the way runs its `runtime_ms`, else `unknown_runtime_ms`. `None`: not within
/// `horizon_ms`, or never (it fits nowhere even on an empty fleet, or waits on a gang with no
/// end).
pub fn project<'a>(
    snapshot: Snapshot<'a>,
    pending: &'a [Gang],
    config: &Config,
    target: &GangId,
    holding: Vec<Ending<'a>>,
    unknown_runtime_ms: u64,
    horizon_ms: u64,
) -> Option<Projection> {
    if !pending.iter().any(|g| g.id == *target) {
        return None;
    }
    let run = forward(snapshot, pending, config, holding, unknown_runtime_ms, horizon_ms, Some(target));
    let f = run.into_iter().find(|f| f.id == *target)?;
    Some(Projection { start_ms: f.start_ms, cluster: f.cluster, ahead: f.ahead })
}

/// When each of `pending` is expected to start and end, and where, by the same rules as
/// [`project`]: those that start within `horizon_ms`, in the order they start. The gangs not
/// in it do not start within the horizon (or within [`MAX_STEPS`] cycles).
pub fn forecast<'a>(
    snapshot: Snapshot<'a>,
    pending: &'a [Gang],
    config: &Config,
    holding: Vec<Ending<'a>>,
    unknown_runtime_ms: u64,
    horizon_ms: u64,
) -> Vec<Forecast> {
    forward(snapshot, pending, config, holding, unknown_runtime_ms, horizon_ms, None)
}

/// The cycle run forward, stopping once `until` has started (all of them when `None`).
fn forward<'a>(
    snapshot: Snapshot<'a>,
    pending: &'a [Gang],
    config: &Config,
    holding: Vec<Ending<'a>>,
    unknown_runtime_ms: u64,
    horizon_ms: u64,
    until: Option<&GangId>,
) -> Vec<Forecast> {
    let config = Config { preemption: None, batch: None, ..*config };
    let Snapshot { fleet, queues, mut capacity, mut usage, now_ms, mut reserved, .. } = snapshot;
    let horizon = now_ms.saturating_add(horizon_ms);
    let mut now = now_ms;
    let mut endings = holding;
    let mut waiting: Vec<&'a Gang> = pending.iter().collect();
    let mut started = Vec::new();
    for _ in 0..MAX_STEPS {
        let releases: Vec<Release> =
            endings.iter().map(|e| Release::of(e.gang, &e.admission, e.end_ms.max(now))).collect();
        let gangs: Vec<Gang> = waiting.iter().map(|g| (*g).clone()).collect();
        let snap =
            Snapshot { releases: releases.into(), reserved, ..Snapshot::at(fleet, queues, capacity, usage, now) };
        // The shorter-first cap in force for those still waiting then, as the dispatcher finds
        // it before each cycle: a projection over days sees the queue's wait grow (or ease).
        let c = cycle(snap, &gangs, &config.for_waiting(&gangs, now));
        (capacity, usage, reserved) = (c.capacity, c.usage, c.reserved);
        let mut still = Vec::with_capacity(waiting.len());
        for (g, d) in waiting.into_iter().zip(c.decisions) {
            match d {
                Decision::Admit(admission) => {
                    let end_ms = now.saturating_add(g.runtime_ms.unwrap_or(unknown_runtime_ms).max(1));
                    let ahead = started.len();
                    started.push(Forecast {
                        id: g.id.clone(),
                        start_ms: now,
                        end_ms,
                        cluster: admission.cluster,
                        ahead,
                    });
                    if until == Some(&g.id) {
                        return started;
                    }
                    endings.push(Ending { gang: g, admission, end_ms });
                }
                _ => still.push(g),
            }
        }
        waiting = still;
        if waiting.is_empty() {
            break;
        }
        // On to the next end: everything ending by then gives its room back.
        let Some(next) = endings.iter().map(|e| e.end_ms).min() else { break };
        let next = next.max(now.saturating_add(1));
        if next > horizon {
            break;
        }
        now = next;
        let (done, rest): (Vec<Ending<'a>>, Vec<Ending<'a>>) = endings.into_iter().partition(|e| e.end_ms <= now);
        for e in &done {
            release(fleet, queues, &mut capacity, &mut usage, e.gang, &e.admission);
        }
        endings = rest;
    }
    started
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ShortFirst;
    use crate::fixture::{self, GangExt};
    use crate::fleet::FleetBuilder;
    use crate::queue::{QueueSpec, Queues};
    use crate::topology::Level;

    /// One rack of 4 hosts × 8 GPUs; `a` holds all 32 GPUs until t = 100 s; `b` (16 GPUs, 50 s)
    /// and `c` (32 GPUs) wait, in that order, with reservations and backfill on.
    #[test]
    fn a_waiting_gang_starts_when_what_holds_its_room_ends_and_later_ones_wait_their_turn() {
        let mut builder = FleetBuilder::new();
        fixture::uniform_cluster(&mut builder, "east", "h100", 8, &[(Level::Rack, 1), (Level::Host, 4)]).expect("east");
        let fleet = builder.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let config = Config { reservations: Some(crate::config::Reservations::AT_ONCE), ..fixture::greedy() };
        let a = fixture::gang("a").pods(4).gpus(8);
        let idle = Snapshot::idle(&fleet, &queues);
        let first = cycle(idle.clone(), std::slice::from_ref(&a), &config);
        let Decision::Admit(held) = first.decisions[0].clone() else { panic!("a fits an empty rack") };
        let pending = [
            fixture::gang("b").pods(2).gpus(8).runtime(50_000).submitted(1),
            fixture::gang("c").pods(4).gpus(8).submitted(2),
        ];
        let snapshot = Snapshot { capacity: first.capacity, usage: first.usage, ..idle };
        let holding = || vec![Ending { gang: &a, admission: held.clone(), end_ms: 100_000 }];
        let when = |target: &str, horizon_ms| {
            project(snapshot.clone(), &pending, &config, &GangId::from(target), holding(), 3_600_000, horizon_ms)
        };
        let b_at = when("b", 86_400_000).expect("b starts");
        assert_eq!((b_at.start_ms, b_at.ahead), (100_000, 0));
        let c_at = when("c", 86_400_000).expect("c starts");
        assert_eq!((c_at.start_ms, c_at.ahead), (150_000, 1), "c needs the whole rack: after b's 50 s");
        assert_eq!(when("c", 120_000), None, "past the horizon");
        assert_eq!(when("nobody", 86_400_000), None);
        let never = [fixture::gang("huge").pods(5).gpus(8).submitted(3)];
        assert_eq!(project(snapshot.clone(), &never, &config, &"huge".into(), holding(), 1, u64::MAX), None);
        // The whole forecast: b, then c after it, each ending after its run time.
        let all = forecast(snapshot.clone(), &pending, &config, holding(), 3_600_000, 86_400_000);
        let when: Vec<(&str, u64, u64, usize)> =
            all.iter().map(|f| (f.id.as_str(), f.start_ms, f.end_ms, f.ahead)).collect();
        assert_eq!(when, vec![("b", 100_000, 150_000, 0), ("c", 150_000, 3_750_000, 1)]);
        assert!(forecast(snapshot, &never, &config, holding(), 1, u64::MAX).is_empty());
    }

    /// A projection orders by the shorter-first cap in force, as the cycle does: where the two
    /// waiting gangs have waited a day on average when the rack frees (31 h and 21 h), the cap
    /// has grown to a day and the one stating an hour goes first, though submitted ten hours
    /// after the one stating twenty; with the cap fixed at six hours, the older goes first.
    #[test]
    fn a_projection_orders_by_the_cap_in_force_as_the_cycle_does() {
        const H: u64 = 3_600_000;
        let mut builder = FleetBuilder::new();
        fixture::uniform_cluster(&mut builder, "east", "h100", 8, &[(Level::Rack, 1), (Level::Host, 4)]).expect("east");
        let fleet = builder.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let a = fixture::gang("a").pods(4).gpus(8);
        let idle = Snapshot::idle(&fleet, &queues);
        let first = cycle(idle.clone(), std::slice::from_ref(&a), &fixture::greedy());
        let Decision::Admit(held) = first.decisions[0].clone() else { panic!("a fits an empty rack") };
        let pending = [
            fixture::gang("long").pods(4).gpus(8).runtime(20 * H).submitted(0),
            fixture::gang("quick").pods(4).gpus(8).runtime(H).submitted(10 * H),
        ];
        let snapshot = Snapshot { capacity: first.capacity, usage: first.usage, now_ms: 30 * H, ..idle };
        let starts = |short_first: ShortFirst| {
            let config = Config { short_first: Some(short_first), ..fixture::greedy() };
            let holding = vec![Ending { gang: &a, admission: held.clone(), end_ms: 31 * H }];
            let all = forecast(snapshot.clone(), &pending, &config, holding, H, 30 * 24 * H);
            all.iter().map(|f| (f.id.to_string(), f.start_ms / H)).collect::<Vec<_>>()
        };
        let named = |v: &[(&str, u64)]| v.iter().map(|&(id, h)| (id.to_string(), h)).collect::<Vec<_>>();
        assert_eq!(starts(ShortFirst::DEFAULT), named(&[("quick", 31), ("long", 32)]));
        let fixed = ShortFirst { grows: false, ..ShortFirst::DEFAULT };
        assert_eq!(starts(fixed), named(&[("long", 31), ("quick", 51)]));
    }
}
