//! The batch optimiser on windows of 80 and 200 gangs, against the greedy cycle and against
//! the model's proven optimum, measured in the same run: what each answer is worth, how far
//! from the optimum, how long it took. Solvers: HiGHS at the cycle's node limit, HiGHS run to
//! a proven optimum, microlp, and CBC when built with `--features cbc`.
//! `cargo bench -p scheduler-core --bench batch` (docs/performance.md has the figures).
//!
//! The contended family, on its own: `cargo bench -p scheduler-core --bench batch -- contended
//! [CANDIDATES]`: windows of 200 to 1,000 gangs on a fleet three quarters full, where greedy
//! strands room (`fixture::contended`), with HiGHS's own proven bound as the yardstick (a run
//! to the optimum of a 1,000-gang model would take far longer than the figure it checks), at
//! the default candidates per gang or the number given.
//!
//! Not criterion: the figures that matter are answer quality and one solve's time, per
//! instance, and a run to optimality takes seconds.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use scheduler_core::fixture::{GangExt, XorShift, contended, gang};
use scheduler_core::{
    Batch, BatchReport, Capacity, Config, Fleet, Gang, Level, PodShape, QueueSpec, Queues, Snapshot, Solver, cycle,
};

const CLUSTERS: usize = 4;
/// microlp has no node limit: a run past this is reported as not finished.
const MICROLP_DEADLINE: Duration = Duration::from_secs(20);

fn fleet() -> Fleet {
    contended::fleet(CLUSTERS)
}

/// Hosts a third fully used, a third partly, a third free: the fragmented middle of a busy day.
fn busy(fleet: &Fleet, rng: &mut XorShift) -> Capacity {
    let mut cap = Capacity::empty(fleet);
    let one = PodShape { gpus: 1, cpu_milli: 0, memory_mib: 0 };
    for (host, _) in fleet.hosts() {
        let used = match rng.draw() % 3 {
            0 => 8,
            1 => 1 + (rng.draw() % 7) as u32,
            _ => 0,
        };
        if used > 0 {
            cap.take(fleet, host, used, one);
        }
    }
    cap.commit();
    cap
}

/// Philly-like shapes: mostly single pods, a third multi-node gangs that want a rack or block.
fn gangs(n: usize, rng: &mut XorShift) -> Vec<Gang> {
    (0..n)
        .map(|i| {
            let r = rng.draw();
            let g = gang(&format!("g{i:03}")).submitted(i as u64);
            match r % 10 {
                0..=5 => g.gpus([1, 2, 4, 8][(r >> 8) as usize % 4]),
                6..=8 => g.pods(2 + (r >> 8) as u32 % 3).gpus(8).preferred(Level::Rack),
                _ => g.pods(4 + (r >> 8) as u32 % 5).gpus(8).required(Level::Block),
            }
        })
        .collect()
}

struct Outcome {
    report: Option<BatchReport>,
    took: Duration,
}

fn solve(fleet: &Fleet, queues: &Queues, cap: &Capacity, pending: &[Gang], batch: Option<Batch>) -> Outcome {
    let config = Config { batch, ..Config::stowage() };
    let snapshot = Snapshot { capacity: cap.clone(), ..Snapshot::idle(fleet, queues) };
    let start = Instant::now();
    let out = cycle(snapshot, pending, &config);
    Outcome { report: out.batch, took: start.elapsed() }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "contended") {
        let candidates = args.get(at + 1).and_then(|n| n.parse().ok()).unwrap_or(Batch::DEFAULT.candidates);
        return contended(candidates);
    }
    let fleet = fleet();
    let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("valid");
    // The reference: every candidate domain kept, searched to a proven optimum.
    let exact = Batch { max_nodes: u32::MAX, candidates: usize::MAX, ..Batch::DEFAULT };
    let limits = [0, 20, Batch::DEFAULT.max_nodes, 1000];
    let mut instances = Vec::new();
    println!("objective as a share of the proven optimum, and time; realised: the cycle's value against greedy's");
    print!("window seed binaries | greedy (time)       ");
    for n in limits {
        print!("| highs@{n:<5} realised   time ");
    }
    println!("| optimum time");
    for window in [80usize, 200] {
        for seed in 1..=5u64 {
            let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ seed);
            let cap = busy(&fleet, &mut rng);
            let pending = gangs(window, &mut rng);
            let greedy = solve(&fleet, &queues, &cap, &pending, None);
            let optimum = solve(&fleet, &queues, &cap, &pending, Some(Batch { window, ..exact }));
            let Some(o) = &optimum.report else {
                println!("{window:>6} {seed:>4} — nothing waits for room: the optimiser has nothing to do");
                continue;
            };
            let opt = o.objective;
            print!(
                "{window:>6} {seed:>4} {:>8} | {:.4} ({:>8.1?}) ",
                o.binaries,
                o.greedy_objective / opt,
                greedy.took
            );
            for max_nodes in limits {
                let out = solve(&fleet, &queues, &cap, &pending, Some(Batch { window, max_nodes, ..Batch::DEFAULT }));
                match &out.report {
                    Some(r) if r.rejected.is_none() => print!(
                        "| {:>11.4} {:>8.4} {:>6.0?} ",
                        r.objective / opt,
                        r.realised_value / r.greedy_value,
                        out.took
                    ),
                    other => print!("| rejected: {:?} ", other.as_ref().and_then(|r| r.rejected.clone())),
                }
            }
            println!("| {:.1?}", optimum.took);
            #[cfg(feature = "cbc")]
            for max_nodes in [Batch::DEFAULT.max_nodes, u32::MAX] {
                let cbc = Batch { window, max_nodes, solver: Solver::Cbc, ..Batch::DEFAULT };
                let out = solve(&fleet, &queues, &cap, &pending, Some(cbc));
                let shown = match &out.report {
                    Some(r) if r.rejected.is_none() => format!("{:.4} of optimum", r.objective / opt),
                    other => format!("rejected: {:?}", other.as_ref().and_then(|r| r.rejected.clone())),
                };
                println!("{:>20} cbc@{max_nodes}: {shown} in {:.1?}", "", out.took);
            }
            instances.push((window, seed, cap, pending, opt));
        }
    }
    // Last, so that a search it abandons cannot slow the timings above.
    println!("microlp (no node limit; abandoned after {MICROLP_DEADLINE:?}):");
    for (window, seed, cap, pending, opt) in instances.iter().filter(|i| i.0 <= 80) {
        println!("{window:>6} {seed:>4}: {}", microlp(&fleet, &queues, cap, pending, *window, *opt));
    }
}

/// microlp on the same instance, abandoned (its thread left to finish alone) after the deadline.
fn microlp(fleet: &Fleet, queues: &Queues, cap: &Capacity, pending: &[Gang], window: usize, opt: f64) -> String {
    let (tx, rx) = mpsc::channel();
    let (fleet, queues, cap, pending) = (fleet.clone(), queues.clone(), cap.clone(), pending.to_vec());
    std::thread::spawn(move || {
        let batch = Batch { window, solver: Solver::Microlp, ..Batch::DEFAULT };
        let out = solve(&fleet, &queues, &cap, &pending, Some(batch));
        // The receiver may have given up; nothing to do then.
        let _ = tx.send(out);
    });
    match rx.recv_timeout(MICROLP_DEADLINE) {
        Ok(Outcome { report: Some(r), took }) if r.rejected.is_none() => {
            format!("{:.4} of optimum in {took:.1?}", r.objective / opt)
        }
        Ok(Outcome { report, took }) => format!("failed ({:?}) in {took:.1?}", report.and_then(|r| r.rejected)),
        Err(_) => format!("unfinished after {MICROLP_DEADLINE:?}"),
    }
}

/// The contended family: for each window, five seeded instances, HiGHS at the cycle's node
/// limit against the bound it proved.
fn contended(candidates: usize) {
    let fleet = fleet();
    let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("valid");
    let max_nodes = Batch::DEFAULT.max_nodes;
    println!(
        "contended: {CLUSTERS} clusters of 64 hosts x 8 GPUs, three quarters used; {candidates} candidates per gang"
    );
    println!("gap: (bound - objective) / bound; realised: the cycle's value against greedy's; HiGHS@{max_nodes}");
    println!("window seed binaries rows | greedy/bound (time) | objective/bound    gap realised  time");
    for (singles, window) in [true, false].into_iter().flat_map(|s| [200usize, 500, 1000].map(|w| (s, w))) {
        if window == 200 {
            println!("{}", if singles { "with single pods:" } else { "multi-node gangs only:" });
        }
        for seed in 1..=5u64 {
            let (cap, pending) = contended::window(&fleet, seed, window, singles);
            let greedy = solve(&fleet, &queues, &cap, &pending, None);
            let batch = Batch { window, max_nodes, candidates, ..Batch::DEFAULT };
            let out = solve(&fleet, &queues, &cap, &pending, Some(batch));
            print!("{window:>6} {seed:>4}");
            let Some(r) = &out.report else {
                println!(" — nothing waits for room: the optimiser has nothing to do");
                continue;
            };
            let Some(bound) = r.bound else {
                println!(" — HiGHS proved no bound ({:?})", r.rejected);
                continue;
            };
            print!(" {:>8} {:>4} | {:.4} ({:>7.1?}) |", r.binaries, r.rows, r.greedy_objective / bound, greedy.took);
            let (objective, gap) = (r.objective / bound, 100.0 * r.gap().unwrap_or(f64::NAN));
            match &r.rejected {
                None => println!(
                    " {objective:>15.4} {gap:>5.2}% {:>8.4} {:>5.0?}",
                    r.realised_value / r.greedy_value,
                    out.took
                ),
                Some(why) => println!(" {objective:>15.4} {gap:>5.2}% rejected ({why}) {:.0?}", out.took),
            }
        }
    }
}
