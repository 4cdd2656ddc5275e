//! One scheduling cycle at fleet scale: 10,000 pending gangs of 1-128 pods on 64 clusters of
//! 512 eight-GPU nodes (32,768 nodes). Stowage's configuration is measured beside the
//! topology-blind first-fit configuration in the same run, so docs/performance.md can report
//! a ratio. `cargo bench -p scheduler-core --bench cycle`.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use scheduler_core::fixture::{GangExt, gang, uniform_cluster};
use scheduler_core::{
    ClusterChoice, Config, Decision, Fill, Fleet, FleetBuilder, Gang, Level, QueueSpec, QueueingStrategy, Queues,
    Snapshot, cycle,
};

const CLUSTERS: usize = 64;
const GANGS: usize = 10_000;

fn fleet() -> Fleet {
    let mut b = FleetBuilder::new();
    for c in 0..CLUSTERS {
        let flavor = if c % 4 == 3 { "a100" } else { "h100" };
        let fanout = [(Level::Block, 4), (Level::Rack, 16), (Level::Host, 8)];
        uniform_cluster(&mut b, &format!("c{c:02}"), flavor, 8, &fanout).expect("valid");
    }
    b.build().expect("valid")
}

/// Deterministic mixed sizes: mostly small, a long tail up to 128 pods.
fn gangs() -> Vec<Gang> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..GANGS)
        .map(|i| {
            let r = next();
            let pods = match r % 10 {
                0..=4 => 1,
                5..=6 => 1 + (r >> 8) as u32 % 4,
                7..=8 => 4 + (r >> 8) as u32 % 28,
                _ => 32 + (r >> 8) as u32 % 97,
            };
            let gpus = if pods == 1 { [1, 2, 4, 8][(r >> 20) as usize % 4] } else { 8 };
            let g = gang(&format!("g{i:05}")).pods(pods).gpus(gpus).priority((r >> 30) as i32 % 3).submitted(i as u64);
            match (pods, (r >> 40) % 3) {
                (1, _) => g,
                (2..=8, 0) => g.required(Level::Rack),
                (_, 0 | 1) => g.preferred(Level::Rack),
                _ => g.required(Level::Block),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let fleet = fleet();
    let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("valid");
    let pending = gangs();
    let configs = [
        ("stowage", Config::stowage()),
        (
            "fifo-firstfit",
            Config::baseline(ClusterChoice::MostFree, Fill::FirstFit, Some(QueueingStrategy::BestEffortFifo)),
        ),
    ];
    let mut group = c.benchmark_group("cycle-10k-gangs-64x512x8");
    group.sample_size(10);
    for (name, config) in configs {
        // Report pods placed per second: the admitted pods of one cycle are the throughput.
        let snapshot = Snapshot::idle(&fleet, &queues);
        let out = cycle(snapshot, &pending, &config);
        let pods: u64 = pending
            .iter()
            .zip(&out.decisions)
            .filter(|(_, d)| matches!(d, Decision::Admit(_)))
            .map(|(g, _)| g.total_pods())
            .sum();
        eprintln!("{name}: {} admitted, {pods} pods placed, {:?}", out.stats.admitted, out.stats);
        group.throughput(Throughput::Elements(pods));
        group.bench_function(name, |b| {
            b.iter_batched(
                || Snapshot::idle(&fleet, &queues),
                |snapshot| cycle(snapshot, &pending, &config),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
