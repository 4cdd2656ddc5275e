//! Scheduling scenarios as data: a fleet, some gangs, the decisions we expect.

use scheduler_core::fixture::{GangExt, gang, uniform_cluster};
use scheduler_core::invariants;
use scheduler_core::{
    Admission, Batch, Capacity, ClusterChoice, Config, Decision, Fill, Fleet, FleetBuilder, Gang, GangId, Level,
    Patience, PodShape, Preemption, QueuePreemption, QueueSpec, QueueingStrategy, Queues, Quota, QuotaUsage, Reason,
    ReclaimWithinCohort, Release, Reservations, Resource, Running, ShortFirst, Slowdown, Snapshot, WithinQueue, cycle,
};

use Level::{Block, Host, Rack};

/// (name, GPU flavor, GPUs per node, fanout widest first)
type ClusterShape<'a> = (&'a str, &'a str, u32, &'a [(Level, u32)]);

fn fleet(clusters: &[ClusterShape<'_>]) -> Fleet {
    let mut b = FleetBuilder::new();
    for &(name, flavor, gpus, fanout) in clusters {
        uniform_cluster(&mut b, name, flavor, gpus, fanout).expect("valid cluster");
    }
    b.build().expect("valid fleet")
}

fn one_cluster() -> Fleet {
    fleet(&[("c1", "h100", 8, &[(Block, 2), (Rack, 4), (Host, 4)])])
}

fn default_queues() -> Queues {
    Queues::new(vec![QueueSpec::unlimited("default")]).expect("valid")
}

struct Outcome {
    fleet: Fleet,
    gangs: Vec<Gang>,
    result: scheduler_core::Cycle,
}

impl Outcome {
    fn decision(&self, id: &str) -> &Decision {
        let i = self.gangs.iter().position(|g| g.id == id).expect("gang exists");
        &self.result.decisions[i]
    }

    /// (cluster, path of the span) of an admitted gang.
    fn admitted(&self, id: &str) -> Option<(String, String)> {
        let a = self.decision(id).admission()?;
        let span = a.span(&self.fleet).expect("non-empty");
        Some((self.fleet.cluster(a.cluster).name.clone(), self.fleet.path(span)))
    }

    fn reason(&self, id: &str) -> &Reason {
        match self.decision(id) {
            Decision::Pending(r) => r,
            other => panic!("{id} was admitted: {other:?}"),
        }
    }
}

fn run_with(fleet: Fleet, queues: &Queues, gangs: Vec<Gang>, config: Config) -> Outcome {
    let snapshot = Snapshot::idle(&fleet, queues);
    let result = cycle(snapshot, &gangs, &config);
    let running: Vec<_> =
        gangs.iter().zip(&result.decisions).filter_map(|(g, d)| d.admission().map(|a| (g, a))).collect();
    invariants::check(&fleet, queues, &running, &[], &result.capacity, &result.usage).expect("invariants hold");
    Outcome { fleet, gangs, result }
}

fn run(fleet: Fleet, gangs: Vec<Gang>) -> Outcome {
    run_with(fleet, &default_queues(), gangs, scheduler_core::fixture::greedy())
}

#[test]
fn a_rack_sized_gang_lands_inside_one_rack() {
    let out = run(one_cluster(), vec![gang("a").pods(4).gpus(8).required(Rack)]);
    let (cluster, span) = out.admitted("a").expect("admitted");
    assert_eq!(cluster, "c1");
    assert_eq!(span, "c1/b0/b0-r0");
}

#[test]
fn a_small_gang_takes_the_narrowest_domain_best_fit() {
    // Two 4-GPU pods fit one host; the first gang leaves host h0 half full, the second fills it
    // instead of breaking into an empty host.
    let out = run(one_cluster(), vec![gang("a").gpus(4).submitted(1), gang("b").gpus(4).submitted(2)]);
    assert_eq!(out.admitted("a").map(|a| a.1), Some("c1/b0/b0-r0/b0-r0-h0".into()));
    assert_eq!(out.admitted("b").map(|a| a.1), Some("c1/b0/b0-r0/b0-r0-h0".into()));
}

#[test]
fn best_fit_keeps_empty_racks_whole_for_large_gangs() {
    // a takes 3 hosts of rack r0; b (one host) goes into r0's last host, so c (a whole rack)
    // still finds an empty rack in block b0.
    let out = run(
        one_cluster(),
        vec![
            gang("a").pods(3).gpus(8).required(Rack).submitted(1),
            gang("b").gpus(8).submitted(2),
            gang("c").pods(4).gpus(8).required(Rack).submitted(3),
        ],
    );
    assert_eq!(out.admitted("b").map(|a| a.1), Some("c1/b0/b0-r0/b0-r0-h3".into()));
    assert_eq!(out.admitted("c").map(|a| a.1), Some("c1/b0/b0-r1".into()));
}

#[test]
fn a_gang_larger_than_any_cluster_is_pending_for_good_with_its_size_named() {
    let out = run(one_cluster(), vec![gang("huge").pods(40).gpus(8)]);
    let reason = out.reason("huge");
    assert!(reason.is_permanent());
    assert_eq!(reason.kind(), "never-fits");
    assert_eq!(
        reason.to_string(),
        "pod set node: no cluster has 40 free slots of 8 h100 GPUs (largest: 32 in cluster c1), even with the fleet empty: it can never be admitted"
    );
}

#[test]
fn required_rack_without_a_free_rack_names_the_largest_one() {
    // Fill 3 hosts of every rack; a gang needing 2 hosts of one rack cannot start.
    let mut gangs: Vec<Gang> =
        (0..8).map(|i| gang(&format!("fill{i}")).pods(3).gpus(8).required(Rack).submitted(i)).collect();
    gangs.push(gang("pair").pods(2).gpus(8).required(Rack).submitted(100));
    let out = run(one_cluster(), gangs);
    let reason = out.reason("pair");
    assert_eq!(reason.kind(), "no-domain");
    assert_eq!(
        reason.to_string(),
        "pod set node: no rack in any cluster has 2 free slots of 8 h100 GPUs (largest: 1 in cluster c1)"
    );
}

/// A member that labels no racks (none at all, or its agent summarised it by blocks for size):
/// a gang that requires a rack is read strictly there, as needing one host, and its reason says
/// so, rather than leaving the user to think every rack is full.
#[test]
fn required_rack_on_a_cluster_without_racks_says_it_was_read_as_a_host() {
    let blocks_only = fleet(&[("c1", "h100", 8, &[(Block, 2), (Host, 16)])]);
    let out =
        run(blocks_only, vec![gang("pair").pods(2).gpus(8).required(Rack), gang("one").pods(1).gpus(8).required(Rack)]);
    assert_eq!(
        out.reason("pair").to_string(),
        "pod set node: no rack in any cluster has 2 free slots of 8 h100 GPUs (largest: 1 in cluster c1, which \
         reports no rack level: read as host), even with the fleet empty: it can never be admitted"
    );
    assert!(matches!(out.decision("one"), Decision::Admit(_)), "one host is within a rack however it is read");
    // A preference is not held out for where the level is not labelled: it starts in a block.
    let blocks_only = fleet(&[("c1", "h100", 8, &[(Block, 2), (Host, 16)])]);
    let out = run(blocks_only, vec![gang("pair").pods(2).gpus(8).preferred(Rack)]);
    assert!(matches!(out.decision("pair"), Decision::Admit(_)), "{:?}", out.decision("pair"));
    // Where the cluster labels the level, the reason is as before.
    let out = run(one_cluster(), vec![gang("big").pods(5).gpus(8).required(Rack)]);
    assert!(out.reason("big").to_string().contains("(largest: 4 in cluster c1),"), "{}", out.reason("big"));
}

#[test]
fn preferred_spreads_when_no_rack_fits_but_required_waits() {
    let mut gangs: Vec<Gang> =
        (0..8).map(|i| gang(&format!("fill{i}")).pods(3).gpus(8).required(Rack).submitted(i)).collect();
    gangs.push(gang("soft").pods(2).gpus(8).preferred(Rack).submitted(100));
    let out = run(one_cluster(), gangs);
    let (_, span) = out.admitted("soft").expect("preferred may spread");
    assert_eq!(span, "c1/b0", "spread, but still inside one block");
}

#[test]
fn clusters_are_scored_by_locality_before_order() {
    // c-flat has only hosts; c-racks has racks. A 2-host gang preferring a rack goes where it
    // can have one, though c-flat comes first.
    let f = fleet(&[("c-flat", "h100", 8, &[(Host, 8)]), ("c-racks", "h100", 8, &[(Rack, 2), (Host, 4)])]);
    let out = run(f, vec![gang("a").pods(2).gpus(8).preferred(Rack)]);
    assert_eq!(out.admitted("a").map(|a| a.0), Some("c-racks".into()));
}

#[test]
fn in_order_takes_the_first_cluster_that_fits() {
    let f = fleet(&[("c-flat", "h100", 8, &[(Host, 8)]), ("c-racks", "h100", 8, &[(Rack, 2), (Host, 4)])]);
    let config = Config {
        choice: ClusterChoice::InOrder,
        fill: Fill::Locality,
        strategy: None,
        locality_cost: None,
        patience: None,
        fair_sharing: false,
        reservations: None,
        preemption: None,
        batch: None,
        short_first: None,
        depth: Config::DEPTH,
    };
    let out = run_with(f, &default_queues(), vec![gang("a").pods(2).gpus(8).preferred(Rack)], config);
    assert_eq!(out.admitted("a").map(|a| a.0), Some("c-flat".into()));
}

/// MultiKueue's race (`ClusterChoice::Race`): each gang goes to a worker drawn from the seed and
/// its id, the same draw in every cycle, and only to one where it fits.
#[test]
fn multikueue_race_draws_a_worker_per_gang_among_those_that_admit() {
    let three = || {
        fleet(&[("w1", "h100", 8, &[(Host, 64)]), ("w2", "h100", 8, &[(Host, 64)]), ("w3", "h100", 8, &[(Host, 64)])])
    };
    let race = |seed| Config::baseline(ClusterChoice::Race { seed }, Fill::Locality, None);
    let gangs = || (0..240).map(|i| gang(&format!("j{i}")).submitted(i)).collect::<Vec<_>>();
    let workers = |out: &Outcome| -> Vec<String> {
        (0..240).map(|i| out.admitted(&format!("j{i}")).expect("room for all").0).collect()
    };
    let first = workers(&run_with(three(), &default_queues(), gangs(), race(1)));
    // About a third each (240 draws, 80 ± 7.3: a count outside 50..110 is a broken draw).
    for w in ["w1", "w2", "w3"] {
        let n = first.iter().filter(|c| *c == w).count();
        assert!((50..110).contains(&n), "{w} won {n} of 240");
    }
    assert_eq!(first, workers(&run_with(three(), &default_queues(), gangs(), race(1))), "same seed, same draw");
    let other = workers(&run_with(three(), &default_queues(), gangs(), race(2)));
    assert!(first.iter().zip(&other).filter(|(a, b)| a != b).count() > 100, "another seed, another draw");

    // w2 full: its draws go to the workers that admit, and a gang that fits nowhere waits.
    let mut fill = gang("fill").pods(64).gpus(8);
    fill.clusters.only = Some(vec!["w2".into()]);
    let mut gangs = vec![fill];
    gangs.extend((0..60).map(|i| gang(&format!("j{i}")).submitted(i + 1)));
    gangs.push(gang("huge").pods(65).gpus(8).submitted(100));
    let out = run_with(three(), &default_queues(), gangs, race(1));
    assert_eq!(out.admitted("fill").map(|a| a.0), Some("w2".into()));
    for i in 0..60 {
        let (worker, _) = out.admitted(&format!("j{i}")).expect("w1 and w3 have room");
        assert_ne!(worker, "w2", "j{i} went to the full worker");
    }
    assert!(matches!(out.decision("huge"), Decision::Pending(_)));
}

#[test]
fn a_missing_flavor_is_named() {
    let out = run(one_cluster(), vec![gang("a").flavor("mi300x")]);
    assert_eq!(out.reason("a").to_string(), "pod set node: no cluster has flavor mi300x");
}

fn quota_queues(strategy: QueueingStrategy) -> Queues {
    Queues::new(vec![QueueSpec {
        name: "team-a".into(),
        cohort: None,
        strategy,
        weight: 1,
        quotas: vec![Quota {
            flavor: "h100".into(),
            resource: Resource::Gpu,
            nominal: 16,
            borrowing_limit: None,
            lending_limit: None,
        }],
        preemption: QueuePreemption::default(),
    }])
    .expect("valid")
}

/// A gang held to a cluster without its flavor is told so, not that a selector or a cordon
/// excludes the clusters that have it (explain asks each member this way).
#[test]
fn a_gang_held_to_a_cluster_without_its_flavor_is_told_the_cluster_lacks_it() {
    let f = fleet(&[("a100s", "a100", 8, &[(Host, 4)]), ("h100s", "h100", 8, &[(Host, 4)])]);
    let mut held = gang("a").flavor("h100");
    held.clusters.only = Some(vec!["a100s".into()]);
    let mut nowhere = gang("b").flavor("h100");
    nowhere.clusters.only = Some(vec!["gone".into()]);
    let out = run(f, vec![held, nowhere]);
    assert_eq!(
        out.reason("a").to_string(),
        "pod set node: the clusters it may use (a100s) have no flavor h100; those that have it are excluded by \
         the gang's cluster selector, pinning or back-off, or are cordoned"
    );
    assert!(
        out.reason("b").to_string().contains("every cluster with a suitable flavor is excluded"),
        "{}",
        out.reason("b")
    );
}

#[test]
fn quota_names_the_queue_and_flavor() {
    let q = quota_queues(QueueingStrategy::BestEffortFifo);
    let gangs =
        vec![gang("a").pods(2).gpus(8).queue("team-a").submitted(1), gang("b").gpus(8).queue("team-a").submitted(2)];
    let out = run_with(one_cluster(), &q, gangs, scheduler_core::fixture::greedy());
    assert!(out.admitted("a").is_some());
    assert_eq!(
        out.reason("b").to_string(),
        "queue team-a is out of h100 nvidia.com/gpu quota: needs 8, 0 available (borrowing included)"
    );
}

#[test]
fn strict_fifo_blocks_behind_the_head_and_best_effort_does_not() {
    let gangs = || {
        vec![
            gang("big").pods(3).gpus(8).queue("team-a").submitted(1),
            gang("small").gpus(8).queue("team-a").submitted(2),
        ]
    };
    let strict = run_with(
        one_cluster(),
        &quota_queues(QueueingStrategy::StrictFifo),
        gangs(),
        scheduler_core::fixture::greedy(),
    );
    assert_eq!(strict.reason("small").to_string(), "waiting behind gang big at the head of StrictFIFO queue team-a");
    let best = run_with(
        one_cluster(),
        &quota_queues(QueueingStrategy::BestEffortFifo),
        gangs(),
        scheduler_core::fixture::greedy(),
    );
    assert!(best.admitted("small").is_some());
}

/// Shorter gangs first, within a bound (`Config::short_first`): one host free, so the order
/// decides who gets it.
#[test]
fn a_shorter_gang_goes_first_within_the_cap_and_a_gang_past_it_before_any_later() {
    const H: u64 = 3_600_000;
    let host = || fleet(&[("c1", "h100", 8, &[(Host, 1)])]);
    let short_first =
        |cap_ms| Config { short_first: Some(ShortFirst { cap_ms, grows: false }), ..scheduler_core::fixture::greedy() };
    let first = |gangs: Vec<Gang>, queues: &Queues, config: Config| {
        let out = run_with(host(), queues, gangs, config);
        let admitted: Vec<String> =
            out.gangs.iter().filter(|g| out.admitted(g.id.as_str()).is_some()).map(|g| g.id.to_string()).collect();
        assert_eq!(admitted.len(), 1, "one host: {admitted:?}");
        admitted[0].clone()
    };
    let q = default_queues();
    // Five hours against ten minutes submitted a minute later: the short one ends first.
    let pair = || {
        vec![gang("long").gpus(8).submitted(0).runtime(5 * H), gang("short").gpus(8).submitted(60_000).runtime(600_000)]
    };
    assert_eq!(first(pair(), &q, short_first(6 * H)), "short");
    assert_eq!(first(pair(), &q, scheduler_core::fixture::greedy()), "long", "off: submit order");
    // A cap of a minute: the long one counts a minute, and was submitted a minute sooner.
    assert_eq!(first(pair(), &q, short_first(59_000)), "long");
    // Ten hours count six: past that, a gang goes before one submitted later, however short.
    let capped =
        vec![gang("long").gpus(8).submitted(0).runtime(10 * H), gang("short").gpus(8).submitted(6 * H + 1).runtime(1)];
    assert_eq!(first(capped, &q, short_first(6 * H)), "long");
    // Stating no run time counts the whole cap: never ahead of one that states less.
    let silent = vec![gang("silent").gpus(8).submitted(0), gang("stated").gpus(8).submitted(600_000).runtime(H)];
    assert_eq!(first(silent, &q, short_first(6 * H)), "stated");
    // A StrictFIFO queue keeps its submit order; a best-effort one of the same quota does not.
    let in_team_a = || pair().into_iter().map(|g| g.queue("team-a")).collect::<Vec<_>>();
    let strict = quota_queues(QueueingStrategy::StrictFifo);
    assert_eq!(first(in_team_a(), &strict, short_first(6 * H)), "long");
    let best_effort = quota_queues(QueueingStrategy::BestEffortFifo);
    assert_eq!(first(in_team_a(), &best_effort, short_first(6 * H)), "short");
    // Priority still comes first.
    let urgent = vec![
        gang("short").gpus(8).submitted(0).runtime(1),
        gang("urgent").gpus(8).priority(10).submitted(H).runtime(5 * H),
    ];
    assert_eq!(first(urgent, &q, short_first(6 * H)), "urgent");
}

#[test]
fn higher_priority_goes_first() {
    let f = fleet(&[("c1", "h100", 8, &[(Host, 1)])]);
    let out = run(f, vec![gang("low").gpus(8).submitted(1), gang("high").gpus(8).priority(10).submitted(2)]);
    assert!(out.admitted("high").is_some());
    assert!(out.admitted("low").is_none());
}

#[test]
fn an_invalid_gang_names_the_field_and_others_proceed() {
    let out = run(one_cluster(), vec![gang("zero").pods(0), gang("ok")]);
    assert_eq!(out.reason("zero").to_string(), "invalid gang: podSets[0].pods: must be at least 1");
    assert!(out.admitted("ok").is_some());
}

#[test]
fn same_snapshot_same_decisions() {
    let gangs: Vec<Gang> = (0..40)
        .map(|i| gang(&format!("g{i}")).pods(1 + i % 5).gpus(1 << (i % 4)).preferred(Rack).submitted(u64::from(i % 7)))
        .collect();
    let a = run(one_cluster(), gangs.clone());
    let b = run(one_cluster(), gangs);
    assert_eq!(a.result.decisions, b.result.decisions);
}

#[test]
fn releasing_a_gang_returns_exactly_what_it_held() {
    let f = one_cluster();
    let q = default_queues();
    let g = vec![gang("a").pods(4).gpus(8).required(Rack)];
    let out = cycle(Snapshot::idle(&f, &q), &g, &scheduler_core::fixture::greedy());
    let Decision::Admit(a) = &out.decisions[0] else { panic!("admitted") };
    let (mut cap, mut usage) = (out.capacity, out.usage);
    scheduler_core::release(&f, &q, &mut cap, &mut usage, &g[0], a);
    cap.commit();
    assert_eq!(cap, Capacity::empty(&f));
}

/// A rack's GPUs are free but one of its hosts has no CPU left: counted apart, the rack looks
/// like it holds three one-GPU pods, and it is the best fit. The span is chosen host by host,
/// so the gang goes to the other rack instead of being told no domain fits (and later gangs of
/// its shape, answered from that, with it). Found by `one_cycle_places_each_gang_as_a_cycle_of_its_own_would`.
#[test]
fn a_host_with_a_gpu_free_but_no_cpu_does_not_count_toward_a_span() {
    let f = fleet(&[("c1", "h100", 1, &[(Rack, 2), (Host, 3)])]);
    let q = default_queues();
    let mut capacity = Capacity::empty(&f);
    let first = f.clusters()[0].hosts()[0];
    let cpu = f.domain(first).node.map(|n| n.cpu_milli).expect("a host");
    capacity.take(&f, first, 1, PodShape { gpus: 0, cpu_milli: cpu, memory_mib: 0 });
    capacity.commit();
    let g = vec![gang("three").pods(3).gpus(1)];
    let out = cycle(Snapshot { capacity, ..Snapshot::idle(&f, &q) }, &g, &scheduler_core::fixture::greedy());
    let Decision::Admit(a) = &out.decisions[0] else { panic!("admitted in the other rack: {:?}", out.decisions[0]) };
    assert_eq!(f.path(a.pod_sets[0].span), "c1/r1", "the rack whose hosts all have room");
}

/// A pod asking more CPU than any one host has fits nowhere, however much CPU a rack holds in
/// all: the gang is told it can never be admitted, not that it waits for room (it would hold
/// its queue's head, and the gangs behind it, for ever).
#[test]
fn a_pod_larger_than_any_host_never_fits_though_the_rack_holds_its_cpu_in_all() {
    let f = fleet(&[("c1", "h100", 1, &[(Rack, 2), (Host, 3)])]);
    let q = default_queues();
    let host = f.domain(f.clusters()[0].hosts()[0]).node.expect("a host");
    let mut g = gang("big").pods(1).gpus(1);
    g.pod_sets[0].shape.cpu_milli = host.cpu_milli + 1_000;
    let out = cycle(Snapshot::idle(&f, &q), &[g], &scheduler_core::fixture::greedy());
    let Decision::Pending(reason) = &out.decisions[0] else { panic!("admitted: {:?}", out.decisions[0]) };
    assert!(matches!(reason, Reason::NeverFits(s) if s.largest == 0), "{reason:?}");
    let words = reason.to_string();
    let (asked, most) = (host.cpu_milli / 1000 + 1, host.cpu_milli / 1000);
    assert!(
        words.contains(&format!("each pod asks {asked} CPUs and no host there has more than {most}")),
        "the reason names the CPU no host has: {words}"
    );
}

/// One host in each of the cluster's 8 racks is taken, so no rack has 4 free hosts; blocks do.
fn fragmented_racks(g: Gang, now_ms: u64) -> (Fleet, Decision) {
    let f = one_cluster();
    let q = default_queues();
    let mut capacity = Capacity::empty(&f);
    let hosts = f.clusters()[0].hosts().to_vec();
    for rack in 0..8 {
        capacity.take(&f, hosts[rack * 4], 1, PodShape { gpus: 8, cpu_milli: 0, memory_mib: 0 });
    }
    capacity.commit();
    let config =
        Config { patience: Some(Patience { exact_ms: 1_000, wider_ms: 5_000 }), ..scheduler_core::fixture::greedy() };
    let snapshot = Snapshot::at(&f, &q, capacity, QuotaUsage::default(), now_ms);
    let decision = cycle(snapshot, std::slice::from_ref(&g), &config).decisions.remove(0);
    (f, decision)
}

/// The level of the narrowest domain holding the admitted gang (`None`: the whole cluster).
fn span_level(f: &Fleet, d: &Decision) -> Option<Option<Level>> {
    d.admission().map(|a| f.level_of(a.span(f).expect("placed")))
}

#[test]
fn a_gang_within_its_patience_holds_out_for_its_preferred_rack_and_says_so() {
    let (_, d) = fragmented_racks(gang("wide").pods(4).gpus(8).preferred(Rack), 500);
    let Decision::Pending(reason) = d else { panic!("admitted: {d:?}") };
    assert!(
        matches!(&reason, Reason::HoldingForLocality { preferred: Rack, held: Rack, shortfall, cost: None } if shortfall.pods == 4),
        "{reason:?}"
    );
    assert!(reason.to_string().starts_with("holding out for one rack"), "{reason}");
}

#[test]
fn past_the_exact_hold_a_gang_takes_one_block_and_past_the_wider_hold_anything() {
    let (f, d) = fragmented_racks(gang("wide").pods(4).gpus(8).preferred(Rack), 2_000);
    assert_eq!(span_level(&f, &d), Some(Some(Block)), "{d:?}");
    // Each block has 12 free hosts left: 13 pods fit no block, so the wider hold keeps them
    // waiting, and past it they spread over the cluster.
    let (_, d) = fragmented_racks(gang("huge").pods(13).gpus(8).preferred(Rack), 2_000);
    assert!(matches!(d, Decision::Pending(Reason::HoldingForLocality { held: Block, .. })), "{d:?}");
    let (f, d) = fragmented_racks(gang("huge").pods(13).gpus(8).preferred(Rack), 6_000);
    assert_eq!(span_level(&f, &d), Some(None), "{d:?}");
}

/// As `fragmented_racks`, weighed by cost: the host taken in each rack is released at
/// `free_at_ms`, the patience (1 day, 2 days) only bounds the hold, and `others` more gangs
/// that can never fit wait behind `g`.
fn weighed(g: Gang, now_ms: u64, free_at_ms: u64, others: usize) -> (Fleet, Decision) {
    weighed_deep(g, now_ms, free_at_ms, others, Config::DEPTH)
}

/// `weighed`, with a cycle that looks at only the first `depth` gangs.
fn weighed_deep(g: Gang, now_ms: u64, free_at_ms: u64, others: usize, depth: u32) -> (Fleet, Decision) {
    let taken: Vec<(usize, u64)> = (0..8).map(|rack| (rack * 4, free_at_ms)).collect();
    weighed_on(&taken, g, now_ms, others, depth)
}

/// `g` weighed by cost on `one_cluster` with each (host index, release time) of `taken` in use.
fn weighed_on(taken: &[(usize, u64)], g: Gang, now_ms: u64, others: usize, depth: u32) -> (Fleet, Decision) {
    let f = one_cluster();
    let q = default_queues();
    let mut capacity = Capacity::empty(&f);
    let hosts = f.clusters()[0].hosts().to_vec();
    let shape = PodShape { gpus: 8, cpu_milli: 0, memory_mib: 0 };
    let mut releases = Vec::new();
    for &(h, end_ms) in taken {
        capacity.take(&f, hosts[h], 1, shape);
        releases.push(Release { gang: format!("running-{h}").into(), end_ms, hosts: vec![(hosts[h], 1, shape)] });
    }
    capacity.commit();
    let config = Config {
        locality_cost: Some(Slowdown::DEFAULT),
        patience: Some(Patience { exact_ms: DAY_MS, wider_ms: 2 * DAY_MS }),
        depth,
        ..scheduler_core::fixture::greedy()
    };
    let mut pending = vec![g];
    // Nine GPUs per pod fit no host of eight: they only wait.
    pending.extend((0..others).map(|i| gang(&format!("other-{i}")).gpus(9).submitted(1).runtime(HOUR_MS)));
    let snapshot = Snapshot { capacity, releases: releases.into(), now_ms, ..Snapshot::idle(&f, &q) };
    let decision = cycle(snapshot, &pending, &config).decisions.remove(0);
    (f, decision)
}

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

#[test]
fn a_gang_waits_for_its_rack_when_the_wait_costs_less_than_running_spread() {
    // 20 h spread over racks runs 5% (60 min) longer; a rack frees in 30 min: wait.
    let wide = gang("wide").pods(4).gpus(8).preferred(Rack).runtime(20 * HOUR_MS);
    let (_, d) = weighed(wide.clone(), 0, HOUR_MS / 2, 0);
    let Decision::Pending(reason) = d else { panic!("admitted: {d:?}") };
    let Reason::HoldingForLocality { preferred: Rack, held: Rack, cost: Some(cost), .. } = &reason else {
        panic!("{reason:?}")
    };
    assert_eq!((cost.wait_s, cost.spread_level, cost.spread_extra_s, cost.others_delay_s), (1_800, Rack, 3_600, 0));
    assert!(
        reason.to_string().starts_with(
            "holding out for one rack (the pod set prefers one rack): one is expected free in about 1800 s; started now across racks it would run 3600 s longer and delay the gangs waiting behind it by about 0 s in all; pod set node: no rack"
        ),
        "{reason}"
    );
    // A rack two hours away costs more than the hour spreading costs: it starts in one block now.
    let (f, d) = weighed(wide.clone(), 0, 2 * HOUR_MS, 0);
    assert_eq!(span_level(&f, &d), Some(Some(Block)), "{d:?}");
    // So does a gang too short for the slowdown to matter (2 h: 6 min longer).
    let short = gang("short").pods(4).gpus(8).preferred(Rack).runtime(2 * HOUR_MS);
    let (f, d) = weighed(short, 0, HOUR_MS / 2, 0);
    assert_eq!(span_level(&f, &d), Some(Some(Block)), "{d:?}");
    // The patience bounds the hold: two days on, it starts whatever the cost says.
    let (f, d) = weighed(wide.clone(), 2 * DAY_MS, 2 * DAY_MS + HOUR_MS / 2, 0);
    assert_eq!(span_level(&f, &d), Some(Some(Block)), "{d:?}");
    // A gang with no run time cannot be weighed: its patience holds it.
    let unknown = Gang { runtime_ms: None, ..wide };
    let (_, d) = weighed(unknown, 0, 2 * HOUR_MS, 0);
    assert!(matches!(d, Decision::Pending(Reason::HoldingForLocality { cost: None, .. })), "{d:?}");
}

/// A gang that prefers a rack and finds no room even spread is told that, not that it holds
/// out for a rack: dropping the preference would start it no sooner. With a run time to weigh
/// or without. Given room spread, it starts there (a rack is a day away) or, with no run time
/// to weigh, its patience holds it, and it is told so.
#[test]
fn a_gang_with_no_room_even_spread_is_told_so_not_that_it_holds_out() {
    // 32 hosts in 8 racks of 4; all but three, one in each of three racks, in use for a day.
    let busy: Vec<(usize, u64)> = (0..32).filter(|h| ![1, 5, 9].contains(h)).map(|h| (h, DAY_MS)).collect();
    for runtime in [Some(20 * HOUR_MS), None] {
        let wide = Gang { runtime_ms: runtime, ..gang("wide").pods(4).gpus(8).preferred(Rack) };
        let (_, d) = weighed_on(&busy, wide.clone(), 0, 0, Config::DEPTH);
        let Decision::Pending(Reason::NoDomain(shortfall)) = &d else { panic!("{runtime:?}: {d:?}") };
        assert_eq!((shortfall.pods, shortfall.largest), (4, 3), "{runtime:?}: {d:?}");
        // One more host free: it fits spread.
        let (_, d) = weighed_on(&busy[1..], wide, 0, 0, Config::DEPTH);
        match runtime {
            Some(_) => assert!(matches!(d, Decision::Admit(_)), "{d:?}"),
            None => assert!(
                matches!(d, Decision::Pending(Reason::HoldingForLocality { held: Rack, cost: None, .. })),
                "{d:?}"
            ),
        }
    }
}

#[test]
fn running_spread_weighs_the_gpu_time_it_takes_from_the_gangs_waiting_behind() {
    // Alone, a rack two hours away is not worth the hour spreading costs (above). With 16
    // gangs waiting, the spread gang's extra hour on 32 of the fleet's 256 GPUs delays each by
    // 7.5 min: 3 h in all, more than the two-hour wait. They have waited 3 h, so holding it
    // (5 h in all) keeps it within twice the longest other wait: out of the tail.
    let wide = gang("wide").pods(4).gpus(8).preferred(Rack).runtime(20 * HOUR_MS);
    let (_, d) = weighed(wide.clone(), 3 * HOUR_MS, 5 * HOUR_MS, 16);
    let Decision::Pending(Reason::HoldingForLocality { cost: Some(c), .. }) = d else { panic!("{d:?}") };
    assert_eq!((c.wait_s, c.spread_extra_s, c.others_delay_s), (7_200, 3_600, 7_200));
    // Only the gangs a cycle looks at count: with a depth of 4, three wait behind it (1,350 s
    // in all), and the two-hour wait is dearer than spreading.
    let (f, d) = weighed_deep(wide.clone(), 3 * HOUR_MS, 5 * HOUR_MS, 16, 4);
    assert_eq!(span_level(&f, &d), Some(Some(Block)), "{d:?}");
    // The same gangs just submitted: held two hours, it would wait longer than twice anyone
    // else has, and longer than a twentieth of its own run time (1 h): it would be the tail,
    // so it starts spread now, whatever waiting saves the others.
    let (f, d) = weighed(wide, 0, 2 * HOUR_MS, 16);
    assert_eq!(span_level(&f, &d), Some(Some(Block)), "{d:?}");
}

#[test]
fn a_gang_weighs_a_wider_domain_too_and_holds_for_the_one_that_finishes_first() {
    // In each block: rack 0 has hosts 0 (ends in 30 min) and 1 (100 h) in use, rack 1 host 0
    // (30 min) and 1-3 (100 h), racks 2 and 3 everything (100 h). Now each block has 2 free
    // hosts: 4 pods would cross blocks (15%, 3 h of 20 h). In 30 min a block has 4 (crossing
    // racks: 1 h); a rack only in 100 h. The block is the better wait.
    let mut taken = Vec::new();
    for block in 0..2 {
        let at = |rack: usize, host: usize| block * 16 + rack * 4 + host;
        taken.extend([(at(0, 0), HOUR_MS / 2), (at(0, 1), 100 * HOUR_MS), (at(1, 0), HOUR_MS / 2)]);
        taken.extend((1..4).map(|h| (at(1, h), 100 * HOUR_MS)));
        taken.extend((2..4).flat_map(|r| (0..4).map(move |h| (at(r, h), 100 * HOUR_MS))));
    }
    let wide = gang("wide").pods(4).gpus(8).preferred(Rack).runtime(20 * HOUR_MS);
    let (_, d) = weighed_on(&taken, wide, 0, 0, Config::DEPTH);
    assert!(
        matches!(&d, Decision::Pending(Reason::HoldingForLocality { held: Block, cost: Some(c), .. }) if c.wait_s == 1_800 && c.spread_extra_s == 3 * 3_600 && c.spread_level == Block && c.others_delay_s == 0),
        "{d:?}"
    );
}

#[test]
fn a_gang_that_could_never_fit_its_preferred_level_is_not_held() {
    // Five 8-GPU pods never fit a rack of four hosts: no point waiting for one. They go to one
    // block at once.
    let (f, d) = fragmented_racks(gang("five").pods(5).gpus(8).preferred(Rack), 0);
    assert_eq!(span_level(&f, &d), Some(Some(Block)), "{d:?}");
}

/// Queue `a` submitted 16 whole-node gangs before queue `b` submitted 16, on 16 nodes.
fn two_tenants(fair_sharing: bool) -> Outcome {
    two_tenants_with(Config { fair_sharing, ..scheduler_core::fixture::greedy() })
}

fn two_tenants_with(config: Config) -> Outcome {
    let small = fleet(&[("c1", "h100", 8, &[(Rack, 2), (Host, 8)])]);
    let queues = Queues::new(vec![QueueSpec::unlimited("a"), QueueSpec::unlimited("b")]).expect("queues");
    let gangs: Vec<Gang> = (0..16)
        .map(|i| gang(&format!("a-{i:02}")).gpus(8).queue("a").submitted(i))
        .chain((0..16).map(|i| gang(&format!("b-{i:02}")).gpus(8).queue("b").submitted(100 + i)))
        .collect();
    run_with(small, &queues, gangs, config)
}

fn admitted_of(out: &Outcome, queue: &str) -> usize {
    out.gangs
        .iter()
        .zip(&out.result.decisions)
        .filter(|(g, d)| g.queue == queue && matches!(d, Decision::Admit(_)))
        .count()
}

#[test]
fn two_equal_weight_queues_get_equal_shares_under_fair_sharing() {
    // 16 nodes, 32 one-node gangs: in submit order the first queue takes every node.
    let fifo = two_tenants(false);
    assert_eq!((admitted_of(&fifo, "a"), admitted_of(&fifo, "b")), (16, 0));
    let fair = two_tenants(true);
    assert_eq!((admitted_of(&fair, "a"), admitted_of(&fair, "b")), (8, 8));
}

#[test]
fn a_cycle_looks_only_as_deep_as_its_queue_depth() {
    // 16 nodes, 32 one-node gangs, a depth of 4: the gangs admitted do not count against it, so
    // all 16 that fit start in this one cycle; then four are left waiting and the rest are not
    // looked at, and say why.
    let global = two_tenants_with(Config { depth: 4, ..scheduler_core::fixture::greedy() });
    assert_eq!((admitted_of(&global, "a"), admitted_of(&global, "b")), (16, 0));
    assert!(matches!(global.reason("b-03"), Reason::NoDomain(_)), "{}", global.reason("b-03"));
    assert_eq!(global.reason("b-04"), &Reason::BeyondDepth { queue: None, depth: 4 });
    assert_eq!(
        global.reason("b-15").to_string(),
        "not looked at this cycle: 4 gangs ahead of it in queue order are waiting, as many as a cycle looks at"
    );
    // With fair sharing the depth is per queue: each lane stops at its own fourth waiting gang.
    let fair = two_tenants_with(Config { depth: 4, fair_sharing: true, ..scheduler_core::fixture::greedy() });
    assert_eq!((admitted_of(&fair, "a"), admitted_of(&fair, "b")), (8, 8));
    assert!(matches!(fair.reason("a-11"), Reason::NoDomain(_)), "{}", fair.reason("a-11"));
    assert_eq!(fair.reason("a-12"), &Reason::BeyondDepth { queue: Some("a".into()), depth: 4 });
    assert_eq!(fair.reason("b-12"), &Reason::BeyondDepth { queue: Some("b".into()), depth: 4 });
    assert_eq!(fair.result.stats.pending, 16);
    // Only the waiting bound the looking: at depth 1 the first gang that does not fit ends it.
    let shallow = two_tenants_with(Config { depth: 1, ..scheduler_core::fixture::greedy() });
    assert_eq!(admitted_of(&shallow, "a"), 16);
    assert_eq!(shallow.reason("b-01"), &Reason::BeyondDepth { queue: None, depth: 1 });
}

#[test]
fn a_queue_with_twice_the_weight_gets_twice_the_share() {
    let small = fleet(&[("c1", "h100", 8, &[(Rack, 2), (Host, 6)])]);
    let heavy = QueueSpec { weight: 2, ..QueueSpec::unlimited("a") };
    let queues = Queues::new(vec![heavy, QueueSpec::unlimited("b")]).expect("queues");
    let gangs: Vec<Gang> = (0..12)
        .map(|i| gang(&format!("a-{i:02}")).gpus(8).queue("a").submitted(100 + i))
        .chain((0..12).map(|i| gang(&format!("b-{i:02}")).gpus(8).queue("b").submitted(i)))
        .collect();
    let out = run_with(small, &queues, gangs, Config { fair_sharing: true, ..scheduler_core::fixture::greedy() });
    assert_eq!((admitted_of(&out, "a"), admitted_of(&out, "b")), (8, 4));
}

/// One rack of four 8-GPU hosts; three run gangs, ending at 1 s (host 0) and 5 s (hosts 1, 2).
/// A whole-rack gang waits; two one-host gangs come after it, one short and one long.
fn behind_a_reservation(config: Config, head_priority: i32, now_ms: u64) -> (Vec<Gang>, Vec<Decision>) {
    let f = fleet(&[("c1", "h100", 8, &[(Rack, 1), (Host, 4)])]);
    let q = default_queues();
    let hosts = f.clusters()[0].hosts().to_vec();
    let shape = PodShape { gpus: 8, cpu_milli: 0, memory_mib: 0 };
    let mut capacity = Capacity::empty(&f);
    for &h in &hosts[..3] {
        capacity.take(&f, h, 1, shape);
    }
    capacity.commit();
    let releases = vec![
        Release { gang: "r0".into(), end_ms: 1_000, hosts: vec![(hosts[0], 1, shape)] },
        Release { gang: "r1".into(), end_ms: 5_000, hosts: vec![(hosts[1], 1, shape), (hosts[2], 1, shape)] },
    ];
    let gangs = vec![
        gang("whole-rack").pods(4).gpus(8).required(Rack).priority(head_priority),
        gang("long").gpus(8).submitted(1).runtime(10_000),
        gang("short").gpus(8).submitted(2).runtime(2_000),
    ];
    let snapshot =
        Snapshot { releases: releases.into(), ..Snapshot::at(&f, &q, capacity, QuotaUsage::default(), now_ms) };
    let out = cycle(snapshot, &gangs, &config);
    // The hold is given back at the end of the cycle: host 3 is free unless a gang took it.
    let admitted = out.decisions.iter().filter(|d| matches!(d, Decision::Admit(_))).count() as u32;
    assert_eq!(out.capacity.node_free(hosts[3]).gpus, 8 - 8 * admitted);
    (gangs, out.decisions)
}

#[test]
fn the_blocked_head_gets_a_reservation_and_only_gangs_that_end_before_it_backfill() {
    let (_, d) = behind_a_reservation(
        Config { reservations: Some(Reservations::AT_ONCE), ..scheduler_core::fixture::greedy() },
        10,
        0,
    );
    match &d[0] {
        Decision::Pending(Reason::Reserved { cluster, in_s, .. }) => assert_eq!((cluster.as_str(), *in_s), ("c1", 5)),
        other => panic!("expected a reservation, got {other:?}"),
    }
    assert!(matches!(d[1], Decision::Pending(_)), "the long gang would delay the reservation: {:?}", d[1]);
    assert!(matches!(d[2], Decision::Admit(_)), "the short gang ends before it: {:?}", d[2]);
    // Without reservations the long gang, first in line, takes the free host.
    let (_, d) = behind_a_reservation(Config { reservations: None, ..scheduler_core::fixture::greedy() }, 10, 0);
    assert!(matches!(d[1], Decision::Admit(_)) && matches!(d[2], Decision::Pending(_)), "{d:?}");
}

#[test]
fn a_blocked_gang_is_reserved_for_only_once_it_has_waited_the_bound() {
    let config =
        Config { reservations: Some(Reservations { after_ms: 1_000, depth: 1 }), ..scheduler_core::fixture::greedy() };
    // Half the bound: the head waits with no capacity held, and the long gang behind it starts.
    let (_, d) = behind_a_reservation(config, 10, 500);
    assert!(matches!(d[0], Decision::Pending(Reason::NoDomain(_))), "not yet reserved for: {:?}", d[0]);
    assert!(matches!(d[1], Decision::Admit(_)) && matches!(d[2], Decision::Pending(_)), "{d:?}");
    // At the bound: reserved for, from now on (the same room, 4 s away now), and only the
    // short gang backfills.
    let (_, d) = behind_a_reservation(config, 10, 1_000);
    match &d[0] {
        Decision::Pending(Reason::Reserved { cluster, in_s, .. }) => assert_eq!((cluster.as_str(), *in_s), ("c1", 4)),
        other => panic!("expected a reservation, got {other:?}"),
    }
    assert!(matches!(d[1], Decision::Pending(_)) && matches!(d[2], Decision::Admit(_)), "{d:?}");
}

#[test]
fn the_batch_optimiser_never_lets_a_gang_start_ahead_of_the_reserved_one() {
    // All of one priority, so the three share the optimiser's window. Left free, it would
    // start `long` (earlier, so worth more) on the free host and delay the reservation.
    let config = Config {
        reservations: Some(Reservations::AT_ONCE),
        batch: Some(Batch::DEFAULT),
        ..scheduler_core::fixture::greedy()
    };
    let (_, d) = behind_a_reservation(config, 0, 0);
    assert!(matches!(d[0], Decision::Pending(Reason::Reserved { .. })), "{:?}", d[0]);
    assert!(matches!(d[1], Decision::Pending(_)), "the long gang would delay the reservation: {:?}", d[1]);
    assert!(matches!(d[2], Decision::Admit(_)), "the short gang ends before it: {:?}", d[2]);
}

/// Running gangs as a cycle admitted them on an empty fleet, with what they left.
struct World {
    fleet: Fleet,
    queues: Queues,
    capacity: Capacity,
    usage: QuotaUsage,
    running: Vec<(Gang, Admission)>,
}

fn world(fleet: Fleet, queues: Queues, gangs: Vec<Gang>) -> World {
    let snapshot = Snapshot::idle(&fleet, &queues);
    let out = cycle(snapshot, &gangs, &scheduler_core::fixture::greedy());
    let running = gangs
        .into_iter()
        .zip(out.decisions)
        .map(|(g, d)| match d {
            Decision::Admit(a) => (g, a),
            other => panic!("{} should run: {other:?}", g.id),
        })
        .collect();
    World { fleet, queues, capacity: out.capacity, usage: out.usage, running }
}

impl World {
    /// The path of the host each running gang's first pod is on.
    fn host_of(&self, id: &str) -> String {
        let (_, a) = self.running.iter().find(|(g, _)| g.id == id).expect("running");
        self.fleet.path(a.pod_sets[0].hosts[0].0)
    }

    /// One cycle at `now_ms` for `pending`; `started(id)` and `checkpoint(id)` say when each
    /// running gang started and last checkpointed.
    fn preempting(
        &self,
        pending: &[Gang],
        now_ms: u64,
        knobs: Preemption,
        started: impl Fn(&str) -> u64,
        checkpoint: impl Fn(&str) -> Option<u64>,
    ) -> Vec<Decision> {
        self.preempting_until(pending, now_ms, knobs, started, checkpoint, |_| None)
    }

    /// As `preempting`, with the running gangs' expected ends (`None`: not known).
    fn preempting_until(
        &self,
        pending: &[Gang],
        now_ms: u64,
        knobs: Preemption,
        started: impl Fn(&str) -> u64,
        checkpoint: impl Fn(&str) -> Option<u64>,
        ends: impl Fn(&str) -> Option<u64>,
    ) -> Vec<Decision> {
        let releases: Vec<Release> =
            self.running.iter().filter_map(|(g, a)| ends(g.id.as_str()).map(|end| Release::of(g, a, end))).collect();
        let running = self
            .running
            .iter()
            .map(|(gang, admission)| Running {
                gang,
                admission,
                started_ms: started(gang.id.as_str()),
                checkpoint_ms: checkpoint(gang.id.as_str()),
                evicting: false,
            })
            .collect();
        let snapshot = Snapshot {
            releases: releases.into(),
            running,
            ..Snapshot::at(&self.fleet, &self.queues, self.capacity.clone(), self.usage.clone(), now_ms)
        };
        let config = Config { preemption: Some(knobs), ..Config::stowage() };
        let out = cycle(snapshot, pending, &config);
        // What the cycle returns must equal what runs once the victims are gone.
        let victims: Vec<&GangId> = out
            .decisions
            .iter()
            .flat_map(|d| match d {
                Decision::Preempt { victims, .. } => victims.iter().collect(),
                _ => Vec::new(),
            })
            .collect();
        let mut after: Vec<(&Gang, &Admission)> =
            self.running.iter().filter(|(g, _)| !victims.contains(&&g.id)).map(|(g, a)| (g, a)).collect();
        after.extend(pending.iter().zip(&out.decisions).filter_map(|(g, d)| d.admission().map(|a| (g, a))));
        invariants::check(&self.fleet, &self.queues, &after, &[], &out.capacity, &out.usage).expect("invariants hold");
        out.decisions
    }
}

fn within_queue(policy: WithinQueue) -> Queues {
    Queues::new(vec![QueueSpec {
        preemption: QueuePreemption { within_queue: policy, ..QueuePreemption::default() },
        ..QueueSpec::unlimited("default")
    }])
    .expect("valid")
}

const KNOBS: Preemption = Preemption { min_runtime_ms: 0, ..Preemption::DEFAULT };
const HOUR: u64 = 3_600_000;

/// Two clusters of two racks of two 8-GPU hosts, every host running a one-host gang `lo-N`.
fn full_fleet(policy: WithinQueue) -> World {
    let f = fleet(&[("c1", "h100", 8, &[(Rack, 2), (Host, 2)]), ("c2", "h100", 8, &[(Rack, 2), (Host, 2)])]);
    let lows = (0..8).map(|i| gang(&format!("lo-{i}")).gpus(8)).collect();
    world(f, within_queue(policy), lows)
}

fn victims(d: &Decision) -> (Option<&Admission>, Vec<GangId>) {
    match d {
        Decision::Preempt { admission, victims } => (Some(admission), victims.clone()),
        other => (other.admission(), Vec::new()),
    }
}

#[test]
fn a_priority_gang_preempts_one_rack_on_one_cluster_where_least_work_is_lost() {
    let w = full_fleet(WithinQueue::LowerPriority);
    // Every gang started 10 h ago except the two on c2's second rack, 1 h ago.
    let young = |id: &str| w.host_of(id).starts_with("c2/r1");
    let started = |id: &str| if young(id) { 9 * HOUR } else { 0 };
    let urgent = gang("urgent").pods(2).gpus(8).required(Rack).priority(10);
    let d = w.preempting(std::slice::from_ref(&urgent), 10 * HOUR, KNOBS, started, |_| None);
    let (admission, mut evicted) = victims(&d[0]);
    evicted.sort();
    let expected: Vec<GangId> = w.running.iter().map(|(g, _)| g.id.clone()).filter(|id| young(id.as_str())).collect();
    assert_eq!(evicted, expected, "exactly the two young gangs of one rack");
    let a = admission.expect("admitted in their place");
    assert_eq!(w.fleet.cluster(a.cluster).name, "c2");
    assert_eq!(w.fleet.level_of(a.span(&w.fleet).expect("placed")), Some(Rack));
}

#[test]
fn preemptors_of_one_cycle_each_take_their_own_cheapest_victims_in_their_own_scopes() {
    // The cycle finds the running gangs' order and domains once and each preemptor keeps what
    // it may evict: two whole-cluster gangs, then one that needs a rack, in the same cycle.
    let w = full_fleet(WithinQueue::LowerPriority);
    let on = |id: &str, prefix: &str| w.host_of(id).starts_with(prefix);
    // The gangs on c2's second rack started 1 h ago, one on c1's first rack 30 min ago and
    // one on c1's second rack 45 min ago; the rest 10 h ago.
    let youngest_in = |prefix: &str| {
        w.running.iter().map(|(g, _)| g.id.to_string()).find(|id| on(id, prefix)).expect("a gang runs there")
    };
    let (half_hour, three_quarters) = (youngest_in("c1/r0"), youngest_in("c1/r1"));
    let started = |id: &str| {
        if id == half_hour {
            10 * HOUR - HOUR / 2
        } else if id == three_quarters {
            10 * HOUR - 3 * HOUR / 4
        } else if on(id, "c2/r1") {
            9 * HOUR
        } else {
            0
        }
    };
    let pending = [
        gang("first").gpus(8).priority(10),
        gang("second").gpus(8).priority(10).submitted(1),
        gang("racked").pods(2).gpus(8).required(Rack).priority(9),
    ];
    let d = w.preempting(&pending, 10 * HOUR, KNOBS, started, |_| None);
    assert_eq!(victims(&d[0]).1, [half_hour.as_str()], "{d:?}");
    assert_eq!(victims(&d[1]).1, [three_quarters.as_str()], "not the first's victim again: {d:?}");
    let (admission, mut evicted) = victims(&d[2]);
    evicted.sort();
    let c2_r1: Vec<GangId> =
        w.running.iter().map(|(g, _)| g.id.clone()).filter(|id| on(id.as_str(), "c2/r1")).collect();
    assert_eq!(evicted, c2_r1, "one rack's two gangs, the cheapest whole rack left: {d:?}");
    let a = admission.expect("admitted in their place");
    assert_eq!(w.fleet.level_of(a.span(&w.fleet).expect("placed")), Some(Rack));
}

#[test]
fn a_gang_evicts_no_more_than_it_needs_and_never_a_gang_it_could_do_without() {
    let w = full_fleet(WithinQueue::LowerPriority);
    // One host is enough: the single youngest gang goes, however cheap the others are.
    let started = |id: &str| if id == "lo-5" { 5 * HOUR } else { HOUR };
    let d = w.preempting(&[gang("urgent").gpus(8).priority(1)], 6 * HOUR, KNOBS, started, |_| None);
    assert_eq!(victims(&d[0]).1, ["lo-5"]);
    // Half a host is enough too: still exactly one victim.
    let d = w.preempting(&[gang("urgent").gpus(4).priority(1)], 6 * HOUR, KNOBS, started, |_| None);
    assert_eq!(victims(&d[0]).1, ["lo-5"]);
}

#[test]
fn minimum_runtime_protects_young_gangs_and_checkpoints_make_a_victim_cheaper() {
    let w = full_fleet(WithinQueue::LowerPriority);
    let started = |id: &str| if id == "lo-5" { 5 * HOUR } else { HOUR };
    let urgent = [gang("urgent").gpus(8).priority(1)];
    let protect = Preemption { min_runtime_ms: 2 * HOUR, ..KNOBS };
    let d = w.preempting(&urgent, 6 * HOUR, protect, started, |_| None);
    let (_, evicted) = victims(&d[0]);
    assert_eq!(evicted.len(), 1);
    assert_ne!(evicted[0], "lo-5", "lo-5 ran for 1 h only, under the 2 h protection");
    // lo-2 checkpointed a minute ago: evicting it loses the least, although it is among the oldest.
    let d = w.preempting(&urgent, 6 * HOUR, protect, started, |id| (id == "lo-2").then_some(6 * HOUR - 60_000));
    assert_eq!(victims(&d[0]).1, ["lo-2"]);
    // Without the preference, checkpoints are not read.
    let ignore = Preemption { prefer_checkpointed: false, ..protect };
    let d = w.preempting(&urgent, 6 * HOUR, ignore, started, |id| (id == "lo-2").then_some(6 * HOUR - 60_000));
    assert_ne!(victims(&d[0]).1, ["lo-2"]);
}

#[test]
fn nothing_is_preempted_when_the_gang_fits_or_the_policy_forbids_it() {
    let w = full_fleet(WithinQueue::LowerPriority);
    // Equal priority under LowerPriority: it waits.
    let d = w.preempting(&[gang("peer").gpus(8)], HOUR, KNOBS, |_| 0, |_| None);
    assert!(matches!(&d[0], Decision::Pending(Reason::NoDomain(_))), "{d:?}");
    // A later submission of equal priority may go under LowerOrNewerEqualPriority... only
    // against gangs submitted after it, and these were submitted first.
    let w = full_fleet(WithinQueue::LowerOrNewerEqualPriority);
    let d = w.preempting(&[gang("peer").gpus(8).submitted(5)], HOUR, KNOBS, |_| 0, |_| None);
    assert!(matches!(&d[0], Decision::Pending(_)), "{d:?}");
    let d = w.preempting(&[gang("early").gpus(8)], HOUR, KNOBS, |_| 0, |_| None);
    assert!(matches!(&d[0], Decision::Pending(_)), "submitted at the same time: not newer: {d:?}");
    // Never: even a higher priority waits.
    let w = full_fleet(WithinQueue::Never);
    let d = w.preempting(&[gang("urgent").gpus(8).priority(9)], HOUR, KNOBS, |_| 0, |_| None);
    assert!(matches!(&d[0], Decision::Pending(_)), "{d:?}");
    // Room somewhere: admitted without evicting anyone.
    let f = fleet(&[("c1", "h100", 8, &[(Host, 2)])]);
    let w = world(f, within_queue(WithinQueue::LowerPriority), vec![gang("lo").gpus(8)]);
    let d = w.preempting(&[gang("urgent").gpus(8).priority(9)], HOUR, KNOBS, |_| 0, |_| None);
    assert!(matches!(&d[0], Decision::Admit(_)), "{d:?}");
}

#[test]
fn a_queue_reclaims_its_nominal_quota_from_a_borrowing_queue_of_its_cohort() {
    let f = fleet(&[("c1", "h100", 8, &[(Host, 4)])]);
    let quota = |nominal| Quota {
        flavor: "h100".into(),
        resource: Resource::Gpu,
        nominal,
        borrowing_limit: None,
        lending_limit: None,
    };
    let queue = |name: &str, reclaim| QueueSpec {
        name: name.into(),
        cohort: Some("research".into()),
        strategy: QueueingStrategy::BestEffortFifo,
        weight: 1,
        quotas: vec![quota(16)],
        preemption: QueuePreemption { reclaim_within_cohort: reclaim, ..QueuePreemption::default() },
    };
    let queues =
        Queues::new(vec![queue("a", ReclaimWithinCohort::Never), queue("b", ReclaimWithinCohort::Any)]).expect("valid");
    // Queue a runs four hosts' worth: 16 of its own and 16 borrowed from b.
    let lows = (0..4).map(|i| gang(&format!("a-{i}")).gpus(8).queue("a").priority(5)).collect();
    let w = world(f, queues, lows);
    let started = |id: &str| if id == "a-3" { 2 * HOUR } else { 0 };
    // b wants its nominal back: under Any, priority does not matter; one borrowed host goes.
    let d = w.preempting(&[gang("b-0").gpus(8).queue("b")], 3 * HOUR, KNOBS, started, |_| None);
    assert_eq!(victims(&d[0]).1, ["a-3"]);
    // a itself cannot reclaim from b (b borrows nothing) and has no within-queue policy.
    let d = w.preempting(&[gang("a-4").gpus(8).queue("a").priority(9)], 3 * HOUR, KNOBS, started, |_| None);
    assert!(matches!(&d[0], Decision::Pending(_)), "{d:?}");
}

/// Queues a and b of one cohort, 16 GPUs of nominal quota each, each reclaiming from the other.
fn reclaiming_pair() -> Queues {
    let preemption = QueuePreemption { reclaim_within_cohort: ReclaimWithinCohort::Any, ..QueuePreemption::default() };
    cohort_pair(&[(Resource::Gpu, 16)], preemption)
}

/// Queues `a` and `b` in one cohort, each with these nominal quotas on h100 and this policy.
fn cohort_pair(nominal: &[(Resource, u64)], preemption: QueuePreemption) -> Queues {
    let quotas: Vec<Quota> = nominal
        .iter()
        .map(|&(resource, nominal)| Quota {
            flavor: "h100".into(),
            resource,
            nominal,
            borrowing_limit: None,
            lending_limit: None,
        })
        .collect();
    let queue = |name: &str| QueueSpec {
        name: name.into(),
        cohort: Some("research".into()),
        strategy: QueueingStrategy::BestEffortFifo,
        weight: 1,
        quotas: quotas.clone(),
        preemption,
    };
    Queues::new(vec![queue("a"), queue("b")]).expect("valid")
}

/// Kueue's order (`entryOrdering.Less`): a gang its queue's nominal quota covers goes before
/// one that would borrow, however much older that one is, and priority only after that; among
/// gangs alike in both, the older first. No preemption here: only the room that is free.
#[test]
fn room_that_frees_goes_to_a_lenders_gang_before_an_older_borrowers() {
    let f = fleet(&[("c1", "h100", 8, &[(Host, 4)])]);
    // Queue a holds three of the four hosts: 24 GPUs on a nominal 16, borrowing 8 of b's.
    let w = world(f, reclaiming_pair(), (0..3).map(|i| gang(&format!("a-{i}")).gpus(8).queue("a")).collect());
    let snapshot = |now_ms| Snapshot::at(&w.fleet, &w.queues, w.capacity.clone(), w.usage.clone(), now_ms);
    let older_borrower = gang("a-3").gpus(8).queue("a").submitted(0).priority(5);
    let lender = gang("b-0").gpus(8).queue("b").submitted(60_000);
    let later_lender = gang("b-1").gpus(8).queue("b").submitted(120_000);
    let pending = [older_borrower, later_lender, lender];
    let out = cycle(snapshot(180_000), &pending, &scheduler_core::fixture::greedy());
    assert!(out.decisions[2].admission().is_some(), "the lender's older gang takes the host: {:?}", out.decisions);
    // Then the cohort's 32 GPUs are all in use.
    for d in &out.decisions[..2] {
        assert!(matches!(d, Decision::Pending(Reason::QuotaExceeded { .. })), "{d:?}");
    }
    // With b's gangs gone, the borrower's gang takes the host: the order is not a quota.
    let out = cycle(snapshot(180_000), &pending[..1], &scheduler_core::fixture::greedy());
    assert!(out.decisions[0].admission().is_some(), "{:?}", out.decisions);
}

/// Whether a gang would borrow is asked of every resource its queue limits, as Kueue asks it
/// of the flavor assignment: a queue within its nominal GPUs but past its nominal CPU with the
/// gang admitted is borrowing, and its gang goes after a lender's, older or not.
#[test]
fn a_gang_past_its_queues_nominal_cpu_goes_after_a_lenders() {
    let f = fleet(&[("c1", "h100", 8, &[(Host, 3)])]);
    let queues = cohort_pair(&[(Resource::Gpu, 16), (Resource::CpuMilli, 2_000)], QueuePreemption::default());
    let cpus = |mut g: Gang, milli| {
        g.pod_sets[0].shape.cpu_milli = milli;
        g
    };
    // a runs 8 GPUs with 2 CPUs (its whole nominal CPU), b 8 GPUs with 1: one host is free.
    let running = vec![cpus(gang("a-0").gpus(8).queue("a"), 2_000), gang("b-0").gpus(8).queue("b")];
    let w = world(f, queues, running);
    let snapshot = Snapshot::at(&w.fleet, &w.queues, w.capacity.clone(), w.usage.clone(), 120_000);
    // a-1 is older and within a's nominal GPUs (16), but takes a past its nominal CPU.
    let pending = [gang("a-1").gpus(8).queue("a").submitted(0), gang("b-1").gpus(8).queue("b").submitted(60_000)];
    let out = cycle(snapshot, &pending, &scheduler_core::fixture::greedy());
    assert!(out.decisions[1].admission().is_some(), "the lender's gang takes the host: {:?}", out.decisions);
    assert!(out.decisions[0].admission().is_none(), "{:?}", out.decisions);
}

/// A reclaim throws away the borrower's work since it started; it is worth it only when that
/// is less GPU-time than the reclaiming gang would go without by waiting for room.
#[test]
fn a_reclaim_that_would_destroy_more_work_than_the_wait_costs_waits_instead() {
    let f = fleet(&[("c1", "h100", 8, &[(Host, 4)])]);
    let queues = reclaiming_pair();
    // Queue a holds all four hosts, two of them borrowed from b; a-3 started last, at 2 h.
    let w = world(f, queues, (0..4).map(|i| gang(&format!("a-{i}")).gpus(8).queue("a")).collect());
    let started = |id: &str| if id == "a-3" { 2 * HOUR } else { 0 };
    let b = [gang("b-0").gpus(8).queue("b")];
    // Now 3 h: evicting a-3 throws away 8 GPU-hours. a-0 ends in 30 minutes: waiting costs b-0
    // 4 GPU-hours, so it waits, saying why.
    let soon = |id: &str| Some(if id == "a-0" { 3 * HOUR + HOUR / 2 } else { 100 * HOUR });
    let d = w.preempting_until(&b, 3 * HOUR, KNOBS, started, |_| None, soon);
    let Decision::Pending(reason) = &d[0] else { panic!("reclaimed: {d:?}") };
    let deferred = match reason {
        Reason::Reserved { now, .. } => now.as_ref(),
        other => other,
    };
    assert!(matches!(deferred, Reason::ReclaimDeferred { owed_gpu_s: 14_400, wait_s: 1_800, .. }), "{reason:?}");
    // The wait is counted by GPUs alone: the message says it is a lower bound.
    assert!(
        reason
            .to_string()
            .contains("more of their work than the 4.0 GPU-hours this gang goes without in the at least 1800 s"),
        "{reason}"
    );
    // Every running gang ends in 10 h: waiting would cost 56 GPU-hours, so a-3 goes.
    let late = |_: &str| Some(10 * HOUR);
    let d = w.preempting_until(&b, 3 * HOUR, KNOBS, started, |_| None, late);
    assert_eq!(victims(&d[0]).1, ["a-3"]);
    // With no expected ends to weigh against, the queue's policy alone decides, as before.
    let d = w.preempting(&b, 3 * HOUR, KNOBS, started, |_| None);
    assert_eq!(victims(&d[0]).1, ["a-3"]);
    // A higher-priority gang outranks its victims: it is not held to the budget.
    let urgent = [gang("b-1").gpus(8).queue("b").priority(9)];
    let d = w.preempting_until(&urgent, 3 * HOUR, KNOBS, started, |_| None, soon);
    assert_eq!(victims(&d[0]).1, ["a-3"]);

    // Eight GPUs free, but two on each host: counting GPUs says room now, so nothing is worth
    // destroying; it waits (and takes the cycle's reservation) rather than evict.
    let f = fleet(&[("c1", "h100", 8, &[(Host, 4)])]);
    let queues = reclaiming_pair();
    let w = world(f, queues, (0..4).map(|i| gang(&format!("a-{i}")).gpus(6).queue("a")).collect());
    let d = w.preempting_until(&b, 3 * HOUR, KNOBS, started, |_| None, late);
    let Decision::Pending(reason) = &d[0] else { panic!("reclaimed: {d:?}") };
    let said = reason.to_string();
    assert!(
        said.contains(
            "0.0 GPU-hours this gang goes without, as enough GPUs are free already, though not where it fits"
        ),
        "{said}"
    );
}

/// The simulator's Kueue dispatchers preempt as Kueue does: its candidate order (lower
/// priority first, then the most recently started), whatever work that throws away, with no
/// protection for young gangs and no deferring of a reclaim that costs more than the wait.
#[test]
fn kueue_victims_go_in_kueues_order_without_weighing_the_work_lost() {
    let f = fleet(&[("c1", "h100", 8, &[(Host, 4)])]);
    // Queue a holds all four hosts, two borrowed from b. a-0 is of the lowest priority and
    // has run 3 h; a-3 has run 2 h: 16 GPU-hours to lose, the least.
    let running = (0..4).map(|i| gang(&format!("a-{i}")).gpus(8).queue("a").priority(if i == 0 { -1 } else { 0 }));
    let w = world(f, reclaiming_pair(), running.collect());
    let started = |id: &str| if id == "a-3" { HOUR } else { 0 };
    let b = [gang("b-0").gpus(8).queue("b")];
    // a-1 ends in 30 minutes: b-0 would go without 4 GPU-hours by waiting.
    let soon = |id: &str| Some(if id == "a-1" { 3 * HOUR + HOUR / 2 } else { 100 * HOUR });
    // Stowage evicts the least work; Kueue the lowest priority, however much it has run.
    let d = w.preempting_until(&b, 3 * HOUR, KNOBS, started, |_| None, soon);
    assert_eq!(victims(&d[0]).1, ["a-3"]);
    let d = w.preempting_until(&b, 3 * HOUR, Preemption::KUEUE, started, |_| None, soon);
    assert_eq!(victims(&d[0]).1, ["a-0"]);
    // Of equal priority: stowage spares the work, since waiting costs b-0 less than any
    // victim's loss; Kueue does not weigh it.
    let equal = || (0..4).map(|i| gang(&format!("a-{i}")).gpus(8).queue("a")).collect();
    let w = world(fleet(&[("c1", "h100", 8, &[(Host, 4)])]), reclaiming_pair(), equal());
    let d = w.preempting_until(&b, 3 * HOUR, KNOBS, started, |_| None, soon);
    assert!(matches!(&d[0], Decision::Pending(_)), "{d:?}");
    let d = w.preempting_until(&b, 3 * HOUR, Preemption::KUEUE, started, |_| None, soon);
    assert_eq!(victims(&d[0]).1, ["a-3"]);
    // The most recently started goes first, a minute old: Kueue protects no young gang.
    let young = |id: &str| if id == "a-3" { 3 * HOUR - 60_000 } else { 0 };
    let d = w.preempting_until(&b, 3 * HOUR, Preemption::KUEUE, young, |_| None, soon);
    assert_eq!(victims(&d[0]).1, ["a-3"]);
    // Stowage's default protects it for its first ten minutes.
    let late = |_: &str| Some(10 * HOUR);
    let d = w.preempting_until(&b, 3 * HOUR, Preemption::DEFAULT, young, |_| None, late);
    let (_, evicted) = victims(&d[0]);
    assert_eq!(evicted.len(), 1, "{d:?}");
    assert_ne!(evicted[0], "a-3");
}

/// Kueue's order runs over the whole fleet (MultiKueue's manager preempts by quota): the
/// victim is the most recently started gang wherever it runs, not the first cluster's.
#[test]
fn kueue_victims_are_chosen_across_the_fleet_in_its_order() {
    let w = full_fleet(WithinQueue::LowerPriority);
    // Every gang started at 0 except one on the second cluster, at 1 h.
    let last = w.running.iter().map(|(g, _)| g.id.clone()).rfind(|id| w.host_of(id.as_str()).starts_with("c2"));
    let last = last.expect("a gang on c2");
    let started = |id: &str| if id == last.as_str() { HOUR } else { 0 };
    let d = w.preempting(&[gang("urgent").gpus(8).priority(1)], 2 * HOUR, Preemption::KUEUE, started, |_| None);
    let (admission, evicted) = victims(&d[0]);
    assert_eq!(evicted, std::slice::from_ref(&last));
    assert_eq!(w.fleet.cluster(admission.expect("admitted").cluster).name, "c2");
}

#[test]
fn preemption_decisions_are_deterministic() {
    let w = full_fleet(WithinQueue::LowerPriority);
    let urgent = [gang("u1").pods(2).gpus(8).required(Rack).priority(3), gang("u2").gpus(8).priority(2)];
    let a = w.preempting(&urgent, HOUR, KNOBS, |_| 0, |_| None);
    let b = w.preempting(&urgent, HOUR, KNOBS, |_| 0, |_| None);
    assert_eq!(a, b);
    // Two preemptors in one cycle never pick the same victim.
    let (_, v1) = victims(&a[0]);
    let (_, v2) = victims(&a[1]);
    assert_eq!((v1.len(), v2.len()), (2, 1), "{a:?}");
    assert!(v2.iter().all(|v| !v1.contains(v)));
}

#[test]
fn a_gang_already_being_evicted_is_picked_again_at_no_cost_so_nothing_more_is_evicted() {
    let w = full_fleet(WithinQueue::Never);
    let running: Vec<Running<'_>> = w
        .running
        .iter()
        .map(|(gang, admission)| Running {
            gang,
            admission,
            started_ms: 0,
            checkpoint_ms: None,
            evicting: gang.id == "lo-6",
        })
        .collect();
    let snapshot = Snapshot { running, ..Snapshot::at(&w.fleet, &w.queues, w.capacity.clone(), w.usage.clone(), HOUR) };
    // Even under `Never` and at equal priority: lo-6 is going anyway.
    let config = Config { preemption: Some(KNOBS), ..Config::stowage() };
    let out = cycle(snapshot, &[gang("waiting").gpus(8)], &config);
    assert_eq!(victims(&out.decisions[0]).1, ["lo-6"]);
}

/// Two identical clusters; the head gang may go to either, the next only to `c-a`. Greedy
/// serves the head first and, all else equal, gives it `c-a`.
fn joint_assignment_case() -> (Fleet, Vec<Gang>) {
    let f = fleet(&[("c-a", "h100", 8, &[(Rack, 2), (Host, 2)]), ("c-b", "h100", 8, &[(Rack, 2), (Host, 2)])]);
    let mut pinned = gang("pinned").pods(4).gpus(8).submitted(1);
    pinned.clusters.only = Some(vec!["c-a".into()]);
    let gangs = vec![gang("head").pods(4).gpus(8).preferred(Rack).submitted(0), pinned];
    (f, gangs)
}

#[test]
fn the_batch_optimiser_moves_the_head_gang_so_the_next_one_fits_too() {
    let (f, gangs) = joint_assignment_case();
    let greedy = run_with(f.clone(), &default_queues(), gangs.clone(), Config::stowage());
    assert_eq!(greedy.admitted("head").map(|a| a.0), Some("c-a".into()));
    assert!(
        matches!(greedy.reason("pinned"), Reason::NoDomain(_) | Reason::Reserved { .. }),
        "{:?}",
        greedy.reason("pinned")
    );
    assert!(greedy.result.batch.is_none());

    let config = Config { batch: Some(Batch::DEFAULT), ..Config::stowage() };
    let out = run_with(f, &default_queues(), gangs, config);
    assert_eq!(out.admitted("head").map(|a| a.0), Some("c-b".into()), "{:?}", out.result.batch);
    assert_eq!(out.admitted("pinned").map(|a| a.0), Some("c-a".into()));
    let report = out.result.batch.as_ref().expect("the optimiser ran");
    assert!(report.kept_ilp, "{report:?}");
    assert!(report.realised_value > report.greedy_value);
    assert_eq!(report.gap(), Some(0.0), "a model this small is solved to optimality: {report:?}");
    assert_eq!(report.window, 2);
}

#[test]
fn the_batch_optimiser_keeps_the_greedy_answer_when_it_cannot_beat_it() {
    // Room for one of the two whole-cluster gangs only: either answer admits one, so the
    // greedy one (the head) stands.
    let f = fleet(&[("c1", "h100", 8, &[(Host, 2)])]);
    let gangs = vec![gang("head").pods(2).gpus(8).submitted(0), gang("next").pods(2).gpus(8).submitted(1)];
    let config = Config { batch: Some(Batch::DEFAULT), ..Config::stowage() };
    let out = run_with(f, &default_queues(), gangs, config);
    assert!(out.admitted("head").is_some());
    assert!(matches!(out.decision("next"), Decision::Pending(_)));
    let report = out.result.batch.as_ref().expect("the optimiser ran");
    assert!(!report.kept_ilp, "{report:?}");
}

#[test]
fn the_batch_optimiser_decides_the_same_on_the_same_snapshot() {
    let (f, gangs) = joint_assignment_case();
    let mut more = gangs;
    more.extend(
        (0..30).map(|i| gang(&format!("g{i:02}")).pods(1 + i % 3).gpus(4 + 4 * (i % 2)).submitted(2 + u64::from(i))),
    );
    let config = Config { batch: Some(Batch { window: 16, ..Batch::DEFAULT }), ..Config::stowage() };
    let first = cycle(Snapshot::idle(&f, &default_queues()), &more, &config);
    for _ in 0..3 {
        let again = cycle(Snapshot::idle(&f, &default_queues()), &more, &config);
        assert_eq!(again.decisions, first.decisions);
        assert_eq!(again.batch, first.batch);
    }
}

/// A contended window (a fleet three quarters used, multi-node gangs only, 200 of them), where
/// the model counts room per pod size, not which host each pod takes: realising its answer
/// in one order used to drop a gang greedy admitted, and the optimiser gave its answer up
/// (`benches/batch.rs`, the contended family: every such window did). It is realised now,
/// keeps every gang greedy admitted and admits more, on hosts that hold it all.
#[test]
fn the_batch_optimiser_realises_its_answer_on_a_contended_window() {
    use scheduler_core::fixture::contended;
    let fleet = contended::fleet(4);
    let (cap, pending) = contended::window(&fleet, 1, 200, false);
    let queues = default_queues();
    let snapshot = || Snapshot { capacity: cap.clone(), ..Snapshot::idle(&fleet, &queues) };
    let greedy = cycle(snapshot(), &pending, &Config::stowage());
    let config = Config { batch: Some(Batch { window: 200, candidates: 4, ..Batch::DEFAULT }), ..Config::stowage() };
    let out = cycle(snapshot(), &pending, &config);
    let report = out.batch.as_ref().expect("the optimiser ran");
    assert_eq!(report.rejected, None, "{report:?}");
    assert!(report.kept_ilp && report.realised_value > report.greedy_value, "{report:?}");
    let mut room = cap.clone();
    let mut more = 0;
    for ((g, before), after) in pending.iter().zip(&greedy.decisions).zip(&out.decisions) {
        assert!(before.admission().is_none() || after.admission().is_some(), "{} was dropped", g.id);
        let Some(a) = after.admission() else { continue };
        more += usize::from(before.admission().is_none());
        invariants::check_gang(&fleet, g, a).expect("whole, inside its required level");
        for (ps, placement) in g.pod_sets.iter().zip(&a.pod_sets) {
            for &(host, pods) in &placement.hosts {
                assert!(room.node_free(host).pods(&ps.shape) >= pods, "{} over-commits a host", g.id);
                room.take(&fleet, host, pods, ps.shape);
            }
        }
    }
    assert!(more > 0);
}

/// One cluster of plain H100 nodes, one of H100 nodes labelled `node-type=training` and tainted
/// `dedicated=ml:NoSchedule`: a gang goes only where its pods can bind, or says what it lacks.
#[test]
fn gangs_go_only_to_nodes_their_selector_and_tolerations_admit() {
    use scheduler_core::{NodeClass, NodeInput, NodeRequirement, Taint, TaintEffect, Toleration, TolerationOperator};
    let mut b = FleetBuilder::new();
    uniform_cluster(&mut b, "plain", "h100", 8, &[(Rack, 2), (Host, 4)]).expect("plain");
    let rack = [scheduler_core::LevelInfo { level: Rack, label: "rack".into() }];
    let special = b.cluster("special", &rack, Default::default(), 0).expect("special");
    let class = NodeClass {
        labels: [("node-type".to_string(), "training".to_string())].into(),
        taints: vec![Taint { key: "dedicated".into(), value: "ml".into(), effect: TaintEffect::NoSchedule }],
    };
    for n in 0..4 {
        b.node(
            special,
            NodeInput {
                path: vec!["s-r0".into(), format!("s-r0-h{n}")],
                gpu_flavor: Some("h100"),
                class: class.clone(),
                gpus: 8,
                cpu_milli: 96_000,
                memory_mib: 1 << 20,
            },
        )
        .expect("node");
    }
    let fleet = b.build().expect("fleet");
    assert_eq!(fleet.flavors_named("h100").len(), 2, "one flavor per class of nodes, one product name");
    let wants = NodeRequirement::new(
        [("node-type".to_string(), "training".to_string())].into(),
        Vec::new(),
        vec![Toleration { key: Some("dedicated".into()), operator: TolerationOperator::Exists, effect: None }],
    );
    let mut selective = gang("selective").pods(2).gpus(8);
    selective.pod_sets[0].nodes = wants.clone();
    let mut untolerating = gang("untolerating").pods(2).gpus(8);
    untolerating.pod_sets[0].nodes = wants.without_tolerations();
    let plain = gang("plain").pods(8).gpus(8);
    let out = run_with(fleet, &default_queues(), vec![selective, untolerating, plain], Config::stowage());
    assert_eq!(out.admitted("selective").map(|a| a.0), Some("special".to_string()));
    // Untainted nodes only, and none of them are labelled: it waits, saying what it lacks.
    assert_eq!(
        out.reason("untolerating").to_string(),
        "pod set node: no member has GPU nodes matching node-type=training"
    );
    assert!(out.reason("untolerating").is_permanent());
    assert_eq!(out.admitted("plain").map(|a| a.0), Some("plain".to_string()));
    // A plain gang never lands on the tainted nodes, even when they are all there is.
    let mut b = FleetBuilder::new();
    let only = b.cluster("special", &rack, Default::default(), 0).expect("special");
    b.node(
        only,
        NodeInput {
            path: vec!["s-r0".into(), "s-r0-h0".into()],
            gpu_flavor: Some("h100"),
            class,
            gpus: 8,
            cpu_milli: 96_000,
            memory_mib: 1 << 20,
        },
    )
    .expect("node");
    let out = run_with(b.build().expect("fleet"), &default_queues(), vec![gang("plain")], Config::stowage());
    assert_eq!(out.reason("plain").to_string(), "pod set node: no member has GPU nodes whose taints it tolerates");
}

/// The case: an 8-node gang that takes any flavor waits behind full H100 racks (racks of
/// 8) while A100 racks (of 4) stand free. Only an H100 rack can ever hold it, so its message
/// names H100 and what the H100 racks have free, not the A100 racks' larger free count.
#[test]
fn a_waiting_gang_names_the_flavor_that_could_hold_it_not_one_too_small_ever_to() {
    let f = fleet(&[("h", "h100", 8, &[(Rack, 2), (Host, 8)]), ("a", "a100", 8, &[(Rack, 2), (Host, 4)])]);
    let mut gangs: Vec<Gang> =
        (0..2).map(|i| gang(&format!("fill{i}")).pods(7).gpus(8).flavor("h100").required(Rack).submitted(i)).collect();
    gangs.push(gang("big").pods(8).gpus(8).required(Rack).submitted(100));
    let out = run(f, gangs);
    assert_eq!(
        out.reason("big").to_string(),
        "pod set node: no rack in any cluster has 8 free slots of 8 h100 GPUs (largest: 1 in cluster h)"
    );
    // The same shape again in the cycle is answered from the memo, with the same words.
    let f = fleet(&[("h", "h100", 8, &[(Rack, 2), (Host, 8)]), ("a", "a100", 8, &[(Rack, 2), (Host, 4)])]);
    let mut gangs: Vec<Gang> =
        (0..2).map(|i| gang(&format!("fill{i}")).pods(7).gpus(8).flavor("h100").required(Rack).submitted(i)).collect();
    gangs.push(gang("big").pods(8).gpus(8).required(Rack).submitted(100));
    gangs.push(gang("big2").pods(8).gpus(8).required(Rack).submitted(101));
    let out = run(f, gangs);
    assert_eq!(out.reason("big2").to_string(), out.reason("big").to_string());
}

/// A one-GPU job that takes any flavor waits on a fleet full of two: its words say it waits for
/// any of them, not for the one where the most room happened to be counted (the helios mix's
/// one-GPU jobs were told they waited for an H100 while they ran on the first L40s to free).
/// Held to one flavor, it is told that one.
#[test]
fn a_waiting_gang_that_takes_any_flavor_is_told_it_waits_for_any() {
    let f = || fleet(&[("h", "h100", 8, &[(Rack, 1), (Host, 2)]), ("a", "a100", 8, &[(Rack, 1), (Host, 2)])]);
    let fill = |flavor: &str| -> Vec<Gang> {
        (0..2).map(|i| gang(&format!("{flavor}-{i}")).gpus(8).flavor(flavor).submitted(i)).collect()
    };
    let mut gangs = [fill("h100"), fill("a100")].concat();
    gangs.push(gang("small").gpus(1).submitted(10));
    gangs.push(gang("held").gpus(1).flavor("a100").submitted(11));
    let out = run(f(), gangs);
    assert_eq!(
        out.reason("small").to_string(),
        "pod set node: no cluster has 1 free slots of 1 GPU of any of the 2 flavors it could run on (largest: 0 of h100 in cluster h)"
    );
    assert_eq!(
        out.reason("held").to_string(),
        "pod set node: no cluster has 1 free slots of 1 a100 GPU (largest: 0 in cluster a)"
    );
    // Naming a flavor twice is still one flavor.
    let mut gangs = [fill("h100"), fill("a100")].concat();
    let mut twice = gang("twice").gpus(1).submitted(10);
    twice.pod_sets[0].flavors = vec!["a100".into(), "a100".into()];
    gangs.push(twice);
    assert_eq!(
        run(f(), gangs).reason("twice").to_string(),
        "pod set node: no cluster has 1 free slots of 1 a100 GPU (largest: 0 in cluster a)"
    );
}
