//! Synthetic traces of any length, each a documented mix, not a real workload. Seeded: the same
//! mix, `n`, `seed` and fleet size give the same trace on every machine.
//!
//! - **`scale`** (#20's million-job target): 60 % of jobs are one GPU, 25 % one 8-GPU pod, 15 %
//!   gangs of 2–4 pods of 8 GPUs that prefer one rack; run times are uniform between 1 minute and
//!   4 hours (mean 2 h 0.5 m); arrivals are Poisson with a 90 s mean gap on the built-in fleet.
//!   That is 6.2 GPUs per job on average for 7,230 s every 90 s: about 498 GPUs busy, 86 % of
//!   the built-in fleet's 576. On another fleet the gap scales with its GPUs (90 s × 576 / GPUs),
//!   for the same 86 %.
//! - **`pai`**: shaped on Alibaba PAI 2020 (Weng et al., "MLaaS in the Wild", NSDI'22), whose job
//!   table could not be obtained (shared/traces README §9), fitted to its published summary
//!   (shared/traces/acme-2023, row PAI: mean GPU request 0.683, median 0.5, largest 8; run time
//!   median 481 s, mean 4,787 s, longest 626,371 s). GPU requests of 0.25 (38 %), 0.5 (24 %),
//!   1 (33 %), 2 (3.5 %), 4 (1.1 %) and 8 (0.4 %): mean 0.691, median 0.5. Each job is one pod
//!   (PAI's largest job fits one machine) asking for its request rounded up to whole GPUs, as
//!   `nvidia.com/gpu` counts them without a GPU-sharing device plugin (fractional sharing is
//!   `--gpu-sharing`'s experiment): 1.10 GPUs per job. 8 cores and 48 GiB per GPU.
//! - **`helios`**: shaped on SenseTime Helios 2020 (Hu et al., SC'21), whose job logs could not be
//!   obtained, fitted to its published summary over 1.58 million GPU jobs
//!   (shared/traces/helios-2020/helios_cluster_summary.csv, row `total`: mean 3.716 GPUs per job,
//!   median 1; run time median 206 s, mean 6,652 s; longest 4,320,009 s in Acme's table). Jobs of
//!   1 (62.9 %), 2 (9 %), 4 (10 %) and 8 GPUs (12.5 %) are one pod; 16, 32, 64 and 128 GPUs
//!   (3.5, 1.5, 0.45 and 0.15 %) are gangs of 8-GPU pods preferring one rack, or one block when
//!   more than a rack's 8 hosts: mean 3.73 GPUs. 6 cores and 46 GiB per GPU (a Helios node: 8 ×
//!   V100, 48 threads, 376 GB).
//!
//! Run times of `pai` and `helios` are log-normal with the published median and mean, cut at the
//! published longest, and their arrivals are Poisson with the mean gap that keeps the fleet 86 %
//! busy while they arrive, as `scale`'s does ([`window_gap`]: the long tail runs on after).

use std::fmt;
use std::str::FromStr;

use scheduler_core::{Level, TopologyConstraint};

use super::{Trace, TraceJob, TracePodSet};
use crate::rng::SplitMix64;

/// The most jobs a synthetic trace holds: 10 million (about 2 GB of jobs in memory).
pub const MAX_JOBS: usize = 10_000_000;

/// The scale mix's mean gap between arrivals on the built-in fleet, seconds.
pub const MEAN_GAP_S: f64 = 90.0;

/// The built-in fleet's GPUs, which [`MEAN_GAP_S`] is for.
pub const BUILTIN_GPUS: u64 = 576;

/// The share of the fleet's GPU-seconds every mix's arrivals are paced for.
pub const LOAD: f64 = 0.86;

/// The job mixes [`generate`] knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mix {
    #[default]
    Scale,
    Pai,
    Helios,
}

impl Mix {
    pub const ALL: [Mix; 3] = [Mix::Scale, Mix::Pai, Mix::Helios];

    pub fn as_str(self) -> &'static str {
        match self {
            Mix::Scale => "scale",
            Mix::Pai => "pai",
            Mix::Helios => "helios",
        }
    }

    /// The kinds of job in the mix and how run times are drawn (`None`: the scale mix).
    fn shape(self) -> Option<Shape> {
        match self {
            Mix::Scale => None,
            Mix::Pai => Some(Shape {
                kinds: &PAI_KINDS,
                median_run_s: 481.0,
                mean_run_s: 4_787.0,
                max_run_s: 626_371,
                cpu_milli_per_gpu: 8_000,
                memory_mib_per_gpu: 48 * 1024,
            }),
            Mix::Helios => Some(Shape {
                kinds: &HELIOS_KINDS,
                median_run_s: 206.0,
                mean_run_s: 6_652.0,
                max_run_s: 4_320_009,
                cpu_milli_per_gpu: 6_000,
                memory_mib_per_gpu: 46 * 1024,
            }),
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job mix {0:?} (expected scale, pai or helios)")]
pub struct UnknownMix(pub String);

impl FromStr for Mix {
    type Err = UnknownMix;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mix::ALL.into_iter().find(|m| m.as_str().eq_ignore_ascii_case(s.trim())).ok_or_else(|| UnknownMix(s.into()))
    }
}

/// One kind of job: its share of the mix (per 10,000), its pods, and each pod's whole GPUs.
#[derive(Debug, Clone, Copy)]
struct Kind {
    share: u32,
    pods: u32,
    gpus_per_pod: u32,
}

const fn kind(share: u32, pods: u32, gpus_per_pod: u32) -> Kind {
    Kind { share, pods, gpus_per_pod }
}

/// PAI's requests 0.25, 0.5, 1, 2, 4 and 8, rounded up to whole GPUs.
const PAI_KINDS: [Kind; 6] =
    [kind(3_800, 1, 1), kind(2_400, 1, 1), kind(3_300, 1, 1), kind(350, 1, 2), kind(110, 1, 4), kind(40, 1, 8)];

const HELIOS_KINDS: [Kind; 8] = [
    kind(6_290, 1, 1),
    kind(900, 1, 2),
    kind(1_000, 1, 4),
    kind(1_250, 1, 8),
    kind(350, 2, 8),
    kind(150, 4, 8),
    kind(45, 8, 8),
    kind(15, 16, 8),
];

#[derive(Debug, Clone, Copy)]
struct Shape {
    kinds: &'static [Kind],
    median_run_s: f64,
    mean_run_s: f64,
    max_run_s: u64,
    cpu_milli_per_gpu: u64,
    memory_mib_per_gpu: u64,
}

/// `n` jobs (at most [`MAX_JOBS`]) of `mix` for a fleet of `fleet_gpus` GPUs, in submit order.
pub fn generate(mix: Mix, n: usize, seed: u64, fleet_gpus: u64) -> Trace {
    match mix.shape() {
        None => scale(n, seed, fleet_gpus),
        Some(shape) => shaped(&shape, n, seed, fleet_gpus),
    }
}

fn scale(n: usize, seed: u64, fleet_gpus: u64) -> Trace {
    let gap_s = MEAN_GAP_S * BUILTIN_GPUS as f64 / fleet_gpus.max(1) as f64;
    let mut rng = SplitMix64::new(seed);
    let (min_s, max_s) = (60.0_f64, 4.0 * 3600.0_f64);
    let mut t = 0.0_f64;
    let jobs = (0..n.min(MAX_JOBS))
        .map(|i| {
            t += rng.exponential(gap_s);
            let duration_s = (min_s + (max_s - min_s) * rng.next_f64()).round() as u64;
            let kind = rng.next_f64();
            let (pods, gpus_per_pod, topology) = if kind < 0.60 {
                (1, 1, TopologyConstraint::Unconstrained)
            } else if kind < 0.85 {
                (1, 8, TopologyConstraint::Unconstrained)
            } else {
                (2 + rng.below(3) as u32, 8, TopologyConstraint::Preferred(Level::Rack))
            };
            let gpus = u64::from(gpus_per_pod);
            let pod_set = pod_set(pods, gpus_per_pod, topology, gpus * 8_000, gpus * 64 * 1024);
            job(i, t as u64, duration_s, pod_set)
        })
        .collect();
    Trace { jobs, skipped_rows: 0, withdrawn: 0 }
}

fn shaped(shape: &Shape, n: usize, seed: u64, fleet_gpus: u64) -> Trace {
    let n = n.min(MAX_JOBS);
    let mut rng = SplitMix64::new(seed);
    let total: u32 = shape.kinds.iter().map(|k| k.share).sum();
    let drawn: Vec<(Kind, u64)> = (0..n)
        .map(|_| {
            let kind = pick(shape.kinds, rng.below(total as usize) as u32);
            let run = rng.log_normal(shape.median_run_s, shape.mean_run_s).round();
            (kind, (run as u64).clamp(1, shape.max_run_s))
        })
        .collect();
    let gap_s = window_gap(&drawn, fleet_gpus);
    // Arrivals from their own stream, so the sizes do not depend on the fleet.
    let mut arrivals = SplitMix64::new(seed ^ 0xA55A_5AA5_0F0F_F0F0);
    let mut t = 0.0_f64;
    let jobs = drawn
        .into_iter()
        .enumerate()
        .map(|(i, (kind, run))| {
            t += arrivals.exponential(gap_s);
            let topology = match kind.pods {
                1 => TopologyConstraint::Unconstrained,
                2..=8 => TopologyConstraint::Preferred(Level::Rack),
                _ => TopologyConstraint::Preferred(Level::Block),
            };
            let cpu = u64::from(kind.gpus_per_pod) * shape.cpu_milli_per_gpu;
            let memory = u64::from(kind.gpus_per_pod) * shape.memory_mib_per_gpu;
            job(i, t as u64, run, pod_set(kind.pods, kind.gpus_per_pod, topology, cpu, memory))
        })
        .collect();
    Trace { jobs, skipped_rows: 0, withdrawn: 0 }
}

/// The mean arrival gap that keeps the fleet [`LOAD`] busy while the jobs arrive. Run times
/// are heavy-tailed: a few jobs hold most GPU-seconds and run on long after the last arrival,
/// so pacing by all GPU-seconds would leave the arrival window nearly idle. Instead, the
/// window's span S solves Σ gpus × min(run, S − t) = LOAD × fleet × S, each job arriving at
/// its share t of S; the left side over S falls as S grows, so bisection finds it. Too few
/// jobs to keep the fleet that busy at any pace: the plain GPU-seconds pacing.
fn window_gap(drawn: &[(Kind, u64)], fleet_gpus: u64) -> f64 {
    let n = drawn.len().max(1) as f64;
    let capacity = LOAD * fleet_gpus.max(1) as f64;
    let busy = |span: f64| -> f64 {
        drawn
            .iter()
            .enumerate()
            .map(|(i, (k, run))| f64::from(k.pods * k.gpus_per_pod) * (*run as f64).min(span * (1.0 - i as f64 / n)))
            .sum::<f64>()
            / span
    };
    let plain = drawn.iter().map(|(k, run)| f64::from(k.pods * k.gpus_per_pod) * *run as f64).sum::<f64>() / capacity;
    let (mut lo, mut hi) = (plain * 1e-9, plain.max(1.0));
    if busy(lo) < capacity {
        return plain / n;
    }
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if busy(mid) > capacity { lo = mid } else { hi = mid }
    }
    hi / n
}

/// The kind whose share holds `at` (below the shares' sum).
fn pick(kinds: &[Kind], mut at: u32) -> Kind {
    for kind in kinds {
        if at < kind.share {
            return *kind;
        }
        at -= kind.share;
    }
    kinds[kinds.len() - 1]
}

fn pod_set(pods: u32, gpus_per_pod: u32, topology: TopologyConstraint, cpu_milli: u64, memory_mib: u64) -> TracePodSet {
    TracePodSet { name: "node".into(), pods, gpus_per_pod, cpu_milli, memory_mib, flavors: Vec::new(), topology }
}

fn job(i: usize, submit_s: u64, duration_s: u64, pod_set: TracePodSet) -> TraceJob {
    TraceJob { id: format!("syn-{i:07}"), submit_s, duration_s, pod_sets: vec![pod_set], queue: None, priority: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_as_documented_and_the_same_for_the_same_seed() {
        let trace = generate(Mix::Scale, 20_000, 7, BUILTIN_GPUS);
        assert_eq!(trace, generate(Mix::Scale, 20_000, 7, BUILTIN_GPUS));
        assert_ne!(trace, generate(Mix::Scale, 20_000, 8, BUILTIN_GPUS));
        let n = trace.jobs.len() as f64;
        let share = |f: &dyn Fn(&TraceJob) -> bool| trace.jobs.iter().filter(|j| f(j)).count() as f64 / n;
        let one = share(&|j| j.pod_sets[0].gpus_per_pod == 1);
        let single8 = share(&|j| j.pod_sets[0].gpus_per_pod == 8 && j.pod_sets[0].pods == 1);
        let gangs = share(&|j| j.pod_sets[0].pods >= 2);
        assert!((one - 0.60).abs() < 0.02 && (single8 - 0.25).abs() < 0.02 && (gangs - 0.15).abs() < 0.02);
        assert!(trace.jobs.iter().all(|j| (60..=14_400).contains(&j.duration_s) && j.pod_sets[0].pods <= 4));
        let mean_run = trace.jobs.iter().map(|j| j.duration_s as f64).sum::<f64>() / n;
        assert!((mean_run - 7_230.0).abs() < 150.0, "mean run {mean_run}");
        let last = trace.jobs.last().expect("jobs").submit_s as f64;
        assert!((last / n - MEAN_GAP_S).abs() < 5.0, "mean gap {}", last / n);
        assert!(trace.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        // Ten times the GPUs, a tenth of the gap: the same load.
        let big = generate(Mix::Scale, 20_000, 7, 10 * BUILTIN_GPUS);
        let gap = big.jobs.last().expect("jobs").submit_s as f64 / n;
        assert!((gap - MEAN_GAP_S / 10.0).abs() < 0.5, "mean gap {gap}");
    }

    /// The drawn mix against the published summary it is fitted to.
    struct Published {
        mean_gpus: f64,
        median_run_s: f64,
        max_run_s: u64,
        largest_gang: u32,
    }

    fn check(mix: Mix, published: Published, mean_whole_gpus: f64) {
        let n = 50_000;
        let trace = generate(mix, n, 11, 6_742);
        assert_eq!(trace, generate(mix, n, 11, 6_742), "seeded");
        let gpus = |j: &TraceJob| u64::from(j.pod_sets[0].pods * j.pod_sets[0].gpus_per_pod);
        let mean = trace.jobs.iter().map(|j| gpus(j) as f64).sum::<f64>() / n as f64;
        assert!((mean - mean_whole_gpus).abs() < 0.05 * mean_whole_gpus, "{mix}: mean GPUs {mean}");
        assert!(mean_whole_gpus >= published.mean_gpus);
        let mut runs: Vec<u64> = trace.jobs.iter().map(|j| j.duration_s).collect();
        runs.sort_unstable();
        let median = runs[n / 2] as f64;
        assert!((median - published.median_run_s).abs() < 0.06 * published.median_run_s, "{mix}: median {median}");
        assert!(runs[n - 1] <= published.max_run_s && runs[0] >= 1);
        assert!(trace.jobs.iter().all(|j| j.pod_sets[0].pods <= published.largest_gang));
        // Multi-pod gangs prefer the narrowest domain that holds them.
        for j in trace.jobs.iter().filter(|j| j.pod_sets[0].pods > 1) {
            let want = if j.pod_sets[0].pods <= 8 { Level::Rack } else { Level::Block };
            assert_eq!(j.pod_sets[0].topology, TopologyConstraint::Preferred(want));
        }
        // Paced so that the work falling inside the arrival window keeps 86 % of the fleet busy
        // over it, which is less than all the work: the tail runs on after the last arrival.
        let span = trace.jobs.last().expect("jobs").submit_s as f64;
        let inside: f64 =
            trace.jobs.iter().map(|j| gpus(j) as f64 * (j.duration_s as f64).min(span - j.submit_s as f64)).sum();
        let all: f64 = trace.jobs.iter().map(|j| gpus(j) as f64 * j.duration_s as f64).sum();
        let load = inside / (span * 6_742.0);
        assert!((load - LOAD).abs() < 0.03, "{mix}: load {load}");
        assert!(all > 1.5 * inside, "{mix}: the tail holds much of the work");
        assert!(trace.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
    }

    #[test]
    fn the_pai_mix_has_pais_published_shape_in_whole_gpus() {
        // Requests: mean 0.691 (published 0.683); as whole GPUs 1.096.
        let published = Published { mean_gpus: 0.683, median_run_s: 481.0, max_run_s: 626_371, largest_gang: 1 };
        check(Mix::Pai, published, 1.096);
        let trace = generate(Mix::Pai, 20_000, 3, 6_742);
        let one = trace.jobs.iter().filter(|j| j.pod_sets[0].gpus_per_pod == 1).count() as f64 / 20_000.0;
        assert!((one - 0.95).abs() < 0.01, "{one}");
    }

    #[test]
    fn the_helios_mix_has_helios_published_shape() {
        let published = Published { mean_gpus: 3.716, median_run_s: 206.0, max_run_s: 4_320_009, largest_gang: 16 };
        check(Mix::Helios, published, 3.729);
        let trace = generate(Mix::Helios, 20_000, 3, 968);
        let sizes: Vec<u64> =
            trace.jobs.iter().map(|j| u64::from(j.pod_sets[0].pods * j.pod_sets[0].gpus_per_pod)).collect();
        let median = {
            let mut s = sizes.clone();
            s.sort_unstable();
            s[s.len() / 2]
        };
        assert_eq!(median, 1);
        assert!(sizes.contains(&128) && sizes.iter().all(|g| g.is_power_of_two() && *g <= 128));
    }

    #[test]
    fn mixes_parse_by_name_and_an_unknown_one_lists_them() {
        for mix in Mix::ALL {
            assert_eq!(mix.as_str().parse::<Mix>(), Ok(mix));
        }
        let err = "philly".parse::<Mix>().expect_err("unknown");
        assert!(err.to_string().contains("scale, pai or helios"));
    }
}
