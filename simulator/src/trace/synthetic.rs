//! A synthetic trace of any length for scale runs (#20's million-job target): a documented mix,
//! not a real workload. 60 % of jobs are one GPU, 25 % one 8-GPU pod, 15 % gangs of 2–4 pods of
//! 8 GPUs that prefer one rack; run times are uniform between 1 minute and 4 hours (mean 2 h
//! 0.5 m); arrivals are Poisson with a 90 s mean gap on the built-in fleet. That is 6.2 GPUs
//! per job on average for 7,230 s every 90 s: about 498 GPUs busy, 86 % of the built-in fleet's
//! 576. On another fleet the gap scales with its GPUs (90 s × 576 / GPUs), for the same 86 %.
//! Seeded: the same `n`, `seed` and fleet size give the same trace on every machine.

use scheduler_core::{Level, TopologyConstraint};

use super::{Trace, TraceJob, TracePodSet};
use crate::rng::SplitMix64;

/// The most jobs a synthetic trace holds: 10 million (about 2 GB of jobs in memory).
pub const MAX_JOBS: usize = 10_000_000;

/// The mix's mean gap between arrivals on the built-in fleet, seconds.
pub const MEAN_GAP_S: f64 = 90.0;

/// The built-in fleet's GPUs, which [`MEAN_GAP_S`] is for.
pub const BUILTIN_GPUS: u64 = 576;

/// `n` jobs (at most [`MAX_JOBS`]) of the mix for a fleet of `fleet_gpus` GPUs, in submit order.
pub fn mix(n: usize, seed: u64, fleet_gpus: u64) -> Trace {
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
            TraceJob {
                id: format!("syn-{i:07}"),
                submit_s: t as u64,
                duration_s,
                pod_sets: vec![TracePodSet {
                    name: "node".into(),
                    pods,
                    gpus_per_pod,
                    cpu_milli: u64::from(gpus_per_pod) * 8_000,
                    memory_mib: u64::from(gpus_per_pod) * 64 * 1024,
                    flavors: Vec::new(),
                    topology,
                }],
                queue: None,
                priority: 0,
            }
        })
        .collect();
    Trace { jobs, skipped_rows: 0, withdrawn: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_as_documented_and_the_same_for_the_same_seed() {
        let trace = mix(20_000, 7, BUILTIN_GPUS);
        assert_eq!(trace, mix(20_000, 7, BUILTIN_GPUS));
        assert_ne!(trace, mix(20_000, 8, BUILTIN_GPUS));
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
        let big = mix(20_000, 7, 10 * BUILTIN_GPUS);
        let gap = big.jobs.last().expect("jobs").submit_s as f64 / n;
        assert!((gap - MEAN_GAP_S / 10.0).abs() < 0.5, "mean gap {gap}");
    }
}
