//! Invariants on random fleets and gangs: no node over-committed, gangs whole, Required(level)
//! never broken, quota within borrowing limits, every pending gang with a reason, and the same
//! snapshot giving the same decisions. Several cycles run with releases in between.

use proptest::prelude::*;
use scheduler_core::fixture::{GangExt, gang, uniform_cluster};
use scheduler_core::invariants;
use scheduler_core::{
    Admission, Batch, BorrowWithinCohort, Capacity, ClusterChoice, Config, Decision, Fill, Fleet, FleetBuilder, Gang,
    Level, Patience, Preemption, QueuePreemption, QueueSpec, QueueingStrategy, Queues, Quota, QuotaUsage,
    ReclaimWithinCohort, Release, Reservations, Reserved, Resource, Running, ShortFirst, Slowdown, Snapshot, Solver,
    WithinQueue, cycle, release,
};

fn arb_fleet() -> impl Strategy<Value = Fleet> {
    let cluster = (
        prop::sample::select(vec!["h100", "a100"]),
        prop::sample::select(vec![1u32, 2, 4, 8]),
        prop::sample::select(vec![
            vec![(Level::Host, 6)],
            vec![(Level::Rack, 3), (Level::Host, 2)],
            vec![(Level::Block, 2), (Level::Rack, 2), (Level::Host, 3)],
            vec![(Level::Zone, 2), (Level::Rack, 2), (Level::Nvlink, 2), (Level::Host, 2)],
        ]),
    );
    prop::collection::vec(cluster, 1..4).prop_map(|clusters| {
        let mut b = FleetBuilder::new();
        for (i, (flavor, gpus, fanout)) in clusters.iter().enumerate() {
            uniform_cluster(&mut b, &format!("c{i}"), flavor, *gpus, fanout).expect("valid");
        }
        b.build().expect("valid")
    })
}

fn arb_gang(i: usize) -> impl Strategy<Value = Gang> {
    (
        1u32..10,
        prop::sample::select(vec![0u32, 1, 2, 4, 8]),
        prop::sample::select(vec![None, Some(Level::Host), Some(Level::Rack), Some(Level::Block), Some(Level::Zone)]),
        any::<bool>(),
        prop::sample::select(vec!["", "h100", "a100"]),
        prop::sample::select(vec!["a", "b", "c"]),
        0i32..3,
        0u64..20,
    )
        .prop_map(move |(pods, gpus, level, required, flavor, queue, priority, submitted)| {
            let mut g =
                gang(&format!("g{i}")).pods(pods).gpus(gpus).queue(queue).priority(priority).submitted(submitted);
            if !flavor.is_empty() {
                g = g.flavor(flavor);
            }
            match (level, required) {
                (Some(l), true) => g.required(l),
                (Some(l), false) => g.preferred(l),
                (None, _) => g,
            }
        })
}

fn arb_gangs() -> impl Strategy<Value = Vec<Gang>> {
    (0usize..40).prop_flat_map(|n| (0..n).map(arb_gang).collect::<Vec<_>>())
}

fn queues() -> Queues {
    let quota = |flavor: &str, nominal, borrow, lend| Quota {
        flavor: flavor.into(),
        resource: Resource::Gpu,
        nominal,
        borrowing_limit: borrow,
        lending_limit: lend,
    };
    Queues::new(vec![
        QueueSpec {
            name: "a".into(),
            cohort: Some("research".into()),
            strategy: QueueingStrategy::BestEffortFifo,
            weight: 1,
            quotas: vec![quota("h100", 16, Some(8), None), quota("a100", 8, None, Some(4))],
            preemption: QueuePreemption {
                within_queue: WithinQueue::LowerPriority,
                reclaim_within_cohort: ReclaimWithinCohort::Any,
                borrow_within_cohort: BorrowWithinCohort::LowerPriority { max_priority_threshold: Some(1) },
            },
        },
        QueueSpec {
            name: "b".into(),
            cohort: Some("research".into()),
            strategy: QueueingStrategy::StrictFifo,
            weight: 1,
            quotas: vec![quota("h100", 8, None, Some(0)), quota("a100", 16, Some(4), None)],
            preemption: QueuePreemption {
                within_queue: WithinQueue::LowerOrNewerEqualPriority,
                reclaim_within_cohort: ReclaimWithinCohort::LowerPriority,
                borrow_within_cohort: BorrowWithinCohort::Never,
            },
        },
        QueueSpec {
            preemption: QueuePreemption { within_queue: WithinQueue::LowerPriority, ..QueuePreemption::default() },
            ..QueueSpec::unlimited("c")
        },
    ])
    .expect("valid")
}

fn arb_config() -> impl Strategy<Value = Config> {
    (
        prop::sample::select(vec![
            ClusterChoice::Scored,
            ClusterChoice::MostFree,
            ClusterChoice::InOrder,
            ClusterChoice::Race { seed: 7 },
        ]),
        prop::sample::select(vec![Fill::Locality, Fill::FirstFit, Fill::BinPack]),
        any::<bool>(),
        prop::option::of((0u64..5_000, 0u64..5_000)),
        // Reservations at once, and only after a wait some gangs have made and some not; for
        // the first gang that cannot start (EASY) or for several (conservative).
        prop::option::of((prop::sample::select(vec![0u64, 1_000]), prop::sample::select(vec![1u32, 3]))),
        prop::option::of((0u64..2_000, any::<bool>())),
        // The batch optimiser with small windows and node limits, so answers cut short are
        // exercised too.
        prop::option::of((2usize..12, 1usize..6, 0u32..50)),
        // A queue depth that cuts the queue short, and the default.
        prop::sample::select(vec![1u32, 3, Config::DEPTH]),
        // Locality by cost, with the defaults and with crossing a rack dearer than a day's run.
        prop::sample::select(vec![
            None,
            Some(Slowdown::DEFAULT),
            Some(Slowdown { cross_rack: 2_000, ..Slowdown::DEFAULT }),
        ]),
        // Shorter gangs first, with no cap (submit order again), a cap some run times pass and
        // one none does.
        prop::option::of(prop::sample::select(vec![0u64, 500, 1_000_000])),
    )
        .prop_map(
            |(
                choice,
                fill,
                fair_sharing,
                patience,
                reservations,
                preemption,
                batch,
                depth,
                locality_cost,
                short_first,
            )| Config {
                choice,
                fill,
                strategy: None,
                locality_cost,
                patience: patience.map(|(a, b)| Patience { exact_ms: a, wider_ms: a + b }),
                fair_sharing,
                reservations: reservations.map(|(after_ms, depth)| Reservations { after_ms, depth }),
                preemption: preemption.map(|(min_runtime_ms, prefer_checkpointed)| Preemption {
                    min_runtime_ms,
                    prefer_checkpointed,
                    ..Preemption::DEFAULT
                }),
                short_first: short_first.map(|cap_ms| ShortFirst { cap_ms, ..ShortFirst::DEFAULT }),
                batch: batch.map(|(window, candidates, max_nodes)| Batch {
                    window,
                    candidates,
                    max_nodes,
                    solver: Solver::Highs,
                }),
                depth,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn cycles_keep_every_invariant(fleet in arb_fleet(), gangs in arb_gangs(), config in arb_config(), finish_every in 1usize..4) {
        let queues = queues();
        let mut capacity = Capacity::empty(&fleet);
        let mut usage = QuotaUsage::default();
        // (gang, admission, started at)
        let mut running: Vec<(Gang, Admission, u64)> = Vec::new();
        let mut pending = gangs;
        let mut last = Vec::new();
        for round in 0..4 {
            // Running gangs end in the order they started, one second apart; gangs run 1–3 s.
            let releases: Vec<Release> = running.iter().enumerate().map(|(i, (g, a, _))| Release::of(g, a, 1_000 * (i as u64 + 1))).collect();
            let now_ms = 1_000 * round;
            for (i, g) in pending.iter_mut().enumerate() {
                g.runtime_ms = Some(1_000 * (i as u64 % 3 + 1));
            }
            let victims: Vec<Running<'_>> = running
                .iter()
                .enumerate()
                .map(|(i, (gang, admission, started_ms))| Running { gang, admission, started_ms: *started_ms, checkpoint_ms: (i % 2 == 0).then_some(now_ms), evicting: false })
                .collect();
            let snapshot = Snapshot { fleet: &fleet, queues: &queues, capacity: capacity.clone(), usage: usage.clone(), now_ms, releases: releases.into(), running: victims, reserved: Vec::new(), unhanded: 0 };
            let again = cycle(snapshot.clone(), &pending, &config);
            // The last reservations are a hint only: the last round's, or ones off the mark for
            // the first two gangs, and the cycle finds the same.
            let from_last = cycle(Snapshot { reserved: last.clone(), ..snapshot.clone() }, &pending, &config);
            let off: Vec<Reserved> = pending.iter().take(2).map(|g| Reserved { gang: g.id.clone(), start_ms: 1_000 * (round % 3) + 500 }).collect();
            let from_off = cycle(Snapshot { reserved: off, ..snapshot.clone() }, &pending, &config);
            let out = cycle(snapshot, &pending, &config);
            prop_assert_eq!(&out.decisions, &again.decisions, "same snapshot, same decisions");
            prop_assert_eq!((&out.decisions, &out.reserved), (&from_last.decisions, &from_last.reserved));
            prop_assert_eq!((&out.decisions, &out.reserved), (&from_off.decisions, &from_off.reserved));
            last = out.reserved.clone();
            prop_assert_eq!(out.decisions.len(), pending.len());
            capacity = out.capacity;
            usage = out.usage;
            let mut still = Vec::new();
            let mut evicted = Vec::new();
            for (g, d) in pending.into_iter().zip(out.decisions) {
                match d {
                    Decision::Admit(a) => running.push((g, a, now_ms)),
                    Decision::Preempt { admission, victims } => {
                        prop_assert!(config.preemption.is_some());
                        prop_assert!(!victims.is_empty());
                        for v in &victims {
                            let Some(at) = running.iter().position(|(r, _, _)| &r.id == v) else {
                                return Err(TestCaseError::fail(format!("victim {v} is not running")));
                            };
                            let (victim, va, _) = running.remove(at);
                            prop_assert_eq!(va.cluster, admission.cluster, "victims on the preemptor's cluster only");
                            prop_assert!(victim.priority < g.priority || (victim.queue != g.queue) || (victim.priority == g.priority && victim.submitted_ms > g.submitted_ms),
                                "{} (priority {}) evicted by {} (priority {})", victim.id, victim.priority, g.id, g.priority);
                            evicted.push(victim);
                        }
                        running.push((g, admission, now_ms));
                    }
                    Decision::Pending(reason) => {
                        prop_assert!(!reason.to_string().is_empty());
                        still.push(g);
                    }
                }
            }
            still.extend(evicted);
            pending = still;
            let refs: Vec<_> = running.iter().map(|(g, a, _)| (g, a)).collect();
            if let Err(v) = invariants::check(&fleet, &queues, &refs, &[], &capacity, &usage) {
                prop_assert!(false, "round {round}: {v}");
            }
            // Finish some running gangs before the next round.
            let mut i = 0;
            running.retain(|(g, a, _)| {
                i += 1;
                if i % finish_every == 0 {
                    release(&fleet, &queues, &mut capacity, &mut usage, g, a);
                    false
                } else {
                    true
                }
            });
            capacity.commit();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// What a cycle remembers between gangs (the spans each pod-set shape would take in each
    /// cluster, kept while the cluster's capacity stamp holds) is a cache, never a decision:
    /// one cycle over the gangs places each exactly where one cycle per gang, each on the
    /// capacity and usage the earlier ones left, places it, taken in the cycle's order.
    #[test]
    fn one_cycle_places_each_gang_as_a_cycle_of_its_own_would(
        fleet in arb_fleet(),
        gangs in arb_gangs(),
        fill in prop::sample::select(vec![Fill::Locality, Fill::FirstFit]),
    ) {
        // Greedy, in the order given: nothing that looks across gangs but the capacity and usage.
        let config = Config {
            depth: u32::MAX,
            ..Config::baseline(ClusterChoice::Scored, fill, Some(QueueingStrategy::BestEffortFifo))
        };
        let gangs: Vec<Gang> = gangs.into_iter().enumerate().map(|(i, g)| g.priority(0).submitted(i as u64)).collect();
        let queues = queues();
        let whole = cycle(Snapshot::idle(&fleet, &queues), &gangs, &config);
        let mut snapshot = Snapshot::idle(&fleet, &queues);
        // The cycle's order, restated (`scheduler_core::order`): of each queue's first gang
        // left, one its queue's nominal quota covers before one that would borrow, then as given.
        let borrows = |g: &Gang, usage: &QuotaUsage| queues.id(&g.queue).is_some_and(|q| queues.would_borrow(usage, q, g));
        let mut left: Vec<usize> = (0..gangs.len()).collect();
        while !left.is_empty() {
            let heads = left.iter().enumerate().filter(|&(k, &i)| left[..k].iter().all(|&j| gangs[j].queue != gangs[i].queue));
            let (k, &i) = heads.min_by_key(|&(_, &i)| (borrows(&gangs[i], &snapshot.usage), i)).expect("one is left");
            left.remove(k);
            let g = &gangs[i];
            let one = cycle(snapshot.clone(), std::slice::from_ref(g), &config);
            prop_assert_eq!(one.decisions[0].admission(), whole.decisions[i].admission(), "gang {}", g.id);
            (snapshot.capacity, snapshot.usage) = (one.capacity, one.usage);
        }
    }
}
