//! One scheduling cycle at fleet scale, as the dispatcher runs it: 10,000 pending gangs of
//! 1-128 pods, on an idle fleet, on a fleet three-quarters full whose running gangs will end
//! (reservations and backfill at work), and on a full fleet of lower-priority gangs (preemption
//! at work). Each scenario runs Stowage's configuration beside the topology-blind first-fit one
//! in the same run, so docs/performance.md reports ratios (`scripts/bench-cycle` runs this and
//! writes the table). `cargo bench -p scheduler-core --bench cycle [-- FILTER]`.
//!
//! Besides criterion's timings, each scenario prints one `bench-cycle:` line per configuration:
//! gangs admitted, gangs looked at (admitted, preempting, or pending for a reason of their own,
//! not `BeyondDepth`) and pods placed, which the script divides the time by.

use std::borrow::Cow;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use scheduler_core::fixture::{GangExt, XorShift, gang, uniform_cluster};
use scheduler_core::{
    Admission, Capacity, ClusterChoice, Config, Decision, Fill, Fleet, FleetBuilder, Gang, Level, QueuePreemption,
    QueueSpec, QueueingStrategy, Queues, QuotaUsage, Reason, Release, Running, Snapshot, WithinQueue, cycle,
};

const GANGS: usize = 10_000;
const HOUR_MS: u64 = 3_600_000;

/// `clusters` clusters of 4 blocks × 16 racks × 8 hosts of 8 GPUs (512 nodes each); every
/// fourth cluster's GPUs are a100, the rest h100.
fn fleet(clusters: usize) -> Fleet {
    let mut b = FleetBuilder::new();
    for c in 0..clusters {
        let flavor = if c % 4 == 3 { "a100" } else { "h100" };
        let fanout = [(Level::Block, 4), (Level::Rack, 16), (Level::Host, 8)];
        uniform_cluster(&mut b, &format!("c{c:03}"), flavor, 8, &fanout).expect("valid");
    }
    b.build().expect("valid")
}

/// `n` gangs of mixed sizes, mostly small with a long tail up to 128 pods, round-robin over
/// `queues` queues (`q00`, `q01`, ...), priorities 0-2, each with a run time of 1-48 hours.
fn gangs(prefix: &str, n: usize, queues: usize, seed: u64) -> Vec<Gang> {
    let mut s = XorShift(seed);
    (0..n)
        .map(|i| {
            let r = s.draw();
            let pods = match r % 10 {
                0..=4 => 1,
                5..=6 => 1 + (r >> 8) as u32 % 4,
                7..=8 => 4 + (r >> 8) as u32 % 28,
                _ => 32 + (r >> 8) as u32 % 97,
            };
            let gpus = if pods == 1 { [1, 2, 4, 8][(r >> 20) as usize % 4] } else { 8 };
            let g = gang(&format!("{prefix}{i:05}"))
                .pods(pods)
                .gpus(gpus)
                .queue(&format!("q{:02}", i % queues))
                .priority((r >> 30) as i32 % 3)
                .submitted(i as u64)
                .runtime(HOUR_MS * (1 + (r >> 44) % 48));
            match (pods, (r >> 40) % 3) {
                (1, _) => g,
                (2..=8, 0) => g.required(Level::Rack),
                (_, 0 | 1) => g.preferred(Level::Rack),
                _ => g.required(Level::Block),
            }
        })
        .collect()
}

/// `n` unlimited queues whose gangs may evict lower priorities within their own queue.
fn queues(n: usize) -> Queues {
    let preemption = QueuePreemption { within_queue: WithinQueue::LowerPriority, ..QueuePreemption::default() };
    Queues::new((0..n).map(|q| QueueSpec { preemption, ..QueueSpec::unlimited(&format!("q{q:02}")) }).collect())
        .expect("valid")
}

/// What runs before the cycle: gangs admitted by first fit until `share` of the fleet's GPUs
/// are used, started between 1 and 25 hours before the cycle's time.
struct Load {
    gangs: Vec<Gang>,
    admissions: Vec<Admission>,
    started_ms: Vec<u64>,
    capacity: Capacity,
    usage: QuotaUsage,
}

const NOW_MS: u64 = 100 * HOUR_MS;

fn load(fleet: &Fleet, queues: &Queues, share: f64, priority: i32) -> Load {
    let total: u64 = fleet.total_gpus();
    let mut filler = gangs("run", 4 * GANGS, queues.specs().len(), 0x9E37_79B9_7F4A_7C15);
    for g in &mut filler {
        g.priority = priority;
        g.submitted_ms = 0;
    }
    let first_fit = Config::baseline(ClusterChoice::MostFree, Fill::FirstFit, Some(QueueingStrategy::BestEffortFifo));
    let config = Config { depth: u32::MAX, ..first_fit };
    // Admit in order until the share is reached: one cycle over a prefix of the filler, the
    // prefix found by the GPUs it asks for (an idle fleet admits nearly all it is handed).
    let mut asked = 0;
    let take = filler
        .iter()
        .take_while(|g| {
            asked += g.total_gpus();
            (asked as f64) < share * total as f64
        })
        .count();
    filler.truncate(take);
    let out = cycle(Snapshot::idle(fleet, queues), &filler, &config);
    let mut s = XorShift(0xD1B5_4A32_D192_ED03);
    let (mut gangs, mut admissions, mut started_ms) = (Vec::new(), Vec::new(), Vec::new());
    for (g, d) in filler.into_iter().zip(out.decisions) {
        if let Decision::Admit(a) = d {
            started_ms.push(NOW_MS - HOUR_MS * (1 + s.draw() % 24));
            gangs.push(g);
            admissions.push(a);
        }
    }
    Load { gangs, admissions, started_ms, capacity: out.capacity, usage: out.usage }
}

impl Load {
    /// The snapshot with this load running: its capacity and usage taken, its releases (each
    /// gang's start plus its run time) known, and, when `victims`, every gang a possible victim.
    fn snapshot<'a>(&'a self, fleet: &'a Fleet, queues: &'a Queues, victims: bool) -> Snapshot<'a> {
        let mut s = Snapshot::idle(fleet, queues);
        s.now_ms = NOW_MS;
        (s.capacity, s.usage) = (self.capacity.clone(), self.usage.clone());
        let mut releases = Vec::new();
        for ((g, a), &started) in self.gangs.iter().zip(&self.admissions).zip(&self.started_ms) {
            let end = (started + g.runtime_ms.unwrap_or(HOUR_MS)).max(NOW_MS + 60_000);
            releases.push(Release::of(g, a, end));
            if victims {
                s.running.push(Running {
                    gang: g,
                    admission: a,
                    started_ms: started,
                    checkpoint_ms: None,
                    evicting: false,
                });
            }
        }
        releases.sort_by_key(|r| r.end_ms);
        s.releases = Cow::Owned(releases);
        s
    }
}

struct Scenario<'a> {
    name: &'static str,
    snapshot: Snapshot<'a>,
    pending: &'a [Gang],
}

/// Stowage's policy as the dispatcher runs it; with fair sharing where there are several
/// queues (the queue depth then holds per queue, so a cycle looks at up to 16 × 256 waiting
/// gangs); and the baseline.
fn configs(queues: usize) -> Vec<(&'static str, Config)> {
    let mut configs = vec![("stowage", Config::stowage())];
    if queues > 1 {
        configs.push(("stowage-fair", Config { fair_sharing: true, ..Config::stowage() }));
    }
    let first_fit = Config::baseline(ClusterChoice::MostFree, Fill::FirstFit, Some(QueueingStrategy::BestEffortFifo));
    configs.push(("fifo-firstfit", first_fit));
    configs
}

/// Prints what one cycle of the scenario decides under `config`: the figures the time is
/// divided by.
fn count(scenario: &Scenario<'_>, name: &str, config: &Config) {
    let out = cycle(scenario.snapshot.clone(), scenario.pending, config);
    let (mut looked_at, mut pods, mut preempting) = (0u64, 0u64, 0u64);
    for (g, d) in scenario.pending.iter().zip(&out.decisions) {
        match d {
            Decision::Admit(_) => pods += g.total_pods(),
            Decision::Preempt { .. } => {
                pods += g.total_pods();
                preempting += 1;
            }
            Decision::Pending(Reason::BeyondDepth { .. }) => continue,
            Decision::Pending(_) => {}
        }
        looked_at += 1;
    }
    eprintln!(
        "bench-cycle: {} {name} admitted={} looked_at={looked_at} pods={pods} preempting={preempting} attempts={}",
        scenario.name, out.stats.admitted, out.stats.attempts
    );
}

fn run(c: &mut Criterion, scenario: Scenario<'_>) {
    let mut group = c.benchmark_group(scenario.name);
    group.sample_size(10);
    for (name, config) in configs(scenario.snapshot.queues.specs().len()) {
        let mut counted = false;
        group.bench_function(name, |b| {
            // Counted once, and only for the benchmarks a filter selects.
            if !counted {
                counted = true;
                count(&scenario, name, &config);
            }
            b.iter_batched(
                || scenario.snapshot.clone(),
                |snapshot| cycle(snapshot, scenario.pending, &config),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

fn bench(c: &mut Criterion) {
    let (f32k, f100k) = (fleet(64), fleet(196));
    let (one, sixteen) = (queues(1), queues(16));
    let pending_one = gangs("g", GANGS, 1, 0x2545_F491_4F6C_DD1D);
    let pending = gangs("g", GANGS, 16, 0x2545_F491_4F6C_DD1D);

    run(c, Scenario { name: "idle-32k-nodes-1-queue", snapshot: Snapshot::idle(&f32k, &one), pending: &pending_one });
    run(c, Scenario { name: "idle-32k-nodes-16-queues", snapshot: Snapshot::idle(&f32k, &sixteen), pending: &pending });
    run(
        c,
        Scenario { name: "idle-100k-nodes-16-queues", snapshot: Snapshot::idle(&f100k, &sixteen), pending: &pending },
    );
    let busy = load(&f32k, &sixteen, 0.75, 3);
    run(
        c,
        Scenario {
            name: "busy-32k-nodes-16-queues",
            snapshot: busy.snapshot(&f32k, &sixteen, false),
            pending: &pending,
        },
    );
    let full = load(&f32k, &sixteen, 1.0, -1);
    run(
        c,
        Scenario {
            name: "preempt-32k-nodes-16-queues",
            snapshot: full.snapshot(&f32k, &sixteen, true),
            pending: &pending,
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
