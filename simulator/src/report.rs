//! Figures from a run: the side-by-side table for people and the JSON for machines. Keys are
//! documented in docs/simulator.md; every figure is derived from the job records and the
//! time series, so the two outputs cannot disagree.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use scheduler_core::{Fleet, Level};
use serde::Serialize;

use crate::engine::{Outcome, PolicyRun};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub fleet: FleetSummary,
    pub trace: TraceSummary,
    pub options: OptionsSummary,
    pub policies: Vec<PolicyReport>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FleetSummary {
    pub name: String,
    pub clusters: usize,
    pub nodes: usize,
    pub gpus: u64,
    /// Each cluster's cost weight (the fleet file's `cost_weight`), by name: what
    /// `cost_weighted_gpu_hours` prices GPU-hours by.
    pub cost_weights: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TraceSummary {
    pub name: String,
    pub jobs: usize,
    pub skipped_rows: usize,
    pub withdrawn: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OptionsSummary {
    pub seed: u64,
    pub horizon_s: Option<u64>,
    pub load_scale: f64,
    pub node_failure_rate: f64,
    pub max_restarts: u32,
    pub tenants: u32,
    /// GPU quota of each queue defined for the run (`--helios`), by name; empty: none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub quotas_gpus: BTreeMap<String, u64>,
    pub topology_cost: crate::cost::TopologyCost,
    /// Locality patience (seconds at the preferred level, then until this at the next wider);
    /// `None`: off.
    pub locality_patience_s: Option<(u64, u64)>,
    /// The slowdowns the policy weighs holding for locality with (`None`: patience alone).
    pub locality_cost: Option<crate::cost::TopologyCost>,
    /// How long a gang waits before the policy may reserve for it (`--reserve-after`); `None`:
    /// no reservations.
    pub reserve_after_s: Option<u64>,
    /// How many gangs may hold a reservation at once (`--reserve-depth`); `None`: no
    /// reservations.
    pub reserve_depth: Option<u32>,
    /// The most run time a gang is ordered behind by while the queue is short (`--short-first`);
    /// `None`: submit time alone.
    pub short_first_cap_s: Option<u64>,
    /// Whether that cap doubles while the gangs waiting have waited twice it on average
    /// (`--short-first CAP`; `CAP,fixed`: never).
    pub short_first_grows: bool,
    /// How long a gang runs before stowage may evict it (`--preemption-min-runtime`).
    pub preemption_min_runtime_s: u64,
    /// Percent of jobs submitted at high priority (`--urgent`).
    pub urgent_percent: u32,
    /// How often jobs checkpoint (`--checkpoint-interval`); `None`: never.
    pub checkpoint_interval_s: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PolicyReport {
    pub name: String,
    pub jobs: JobCounts,
    pub queueing_delay_s: Delay,
    pub jct_s: Jct,
    pub makespan_s: u64,
    pub gpu_utilisation: f64,
    /// GPU-hours busy, each times its cluster's cost weight: what the run cost as the admin
    /// prices the clusters (the fleet file's `cost_weight`; with one price, GPU-hours times it,
    /// and 0 on a fleet that prices nothing).
    pub cost_weighted_gpu_hours: f64,
    pub locality: Locality,
    pub fragmentation: f64,
    pub fairness_jain: f64,
    pub queues: Vec<QueueFigures>,
    pub max_wait_by_size: Vec<SizeClassWait>,
    pub preemption: PreemptionFigures,
    /// Pending gangs at the end of the run, by reason kind.
    pub pending_reasons: BTreeMap<String, u64>,
    /// Gang-cycles spent pending, by reason kind: what blocked work over the whole run.
    pub pending_reason_cycles: BTreeMap<String, u64>,
    pub rejected: Vec<Rejection>,
    /// The jobs that failed past `--max-restarts`, in the trace's order.
    pub failed: Vec<Failure>,
    pub restarts: u64,
    pub node_failures: u64,
    pub cycles: u64,
    /// Cycles the batch optimiser solved a model in, and those whose answer was kept (both 0
    /// for policies without it).
    pub batch_cycles: u64,
    pub batch_kept: u64,
    /// The stories of the jobs `--explain` names (none unless asked: the key is then left out).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub explained: Vec<crate::engine::story::Story>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JobCounts {
    pub submitted: usize,
    pub completed: usize,
    pub running: usize,
    pub pending: usize,
    pub rejected: usize,
    /// Cut short by node failures more often than `--max-restarts` allows.
    pub failed: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Delay {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Jct {
    pub mean: f64,
    pub p95: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Locality {
    /// Admitted gangs whose pods sit on more than one host.
    pub multi_node_gangs: usize,
    /// Share of those inside one rack (or a narrower domain).
    pub within_rack: f64,
    pub within_block: f64,
    /// Mean run-time factor from the topology cost model over multi-node gangs.
    pub mean_slowdown: f64,
}

/// The longest wait of the jobs of one size, started or not: the starvation check.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SizeClassWait {
    /// GPUs per job: `1`, `2-8`, `9-32`, `33+`.
    pub gpus: &'static str,
    pub jobs: usize,
    /// First start − submit; for a job never started, end of run − submit.
    pub max_wait_s: u64,
    /// The same wait, averaged over the class: which sizes a policy makes wait, where the
    /// overall mean cannot tell (most jobs are one GPU, so their wait weighs most in it).
    pub mean_wait_s: f64,
    /// Jobs of this size never started by the end of the run.
    pub never_started: usize,
}

const SIZE_CLASSES: [(&str, u64, u64); 4] = [("1", 1, 1), ("2-8", 2, 8), ("9-32", 9, 32), ("33+", 33, u64::MAX)];

fn size_class_waits(jobs: &[&crate::engine::JobRecord], end_s: u64) -> Vec<SizeClassWait> {
    SIZE_CLASSES
        .iter()
        .map(|&(gpus, lo, hi)| {
            let of_size: Vec<_> = jobs.iter().filter(|j| (lo..=hi).contains(&j.gpus)).collect();
            let wait = |j: &&&crate::engine::JobRecord| j.first_start_s.unwrap_or(end_s).saturating_sub(j.submit_s);
            SizeClassWait {
                gpus,
                jobs: of_size.len(),
                max_wait_s: of_size.iter().map(wait).max().unwrap_or(0),
                mean_wait_s: r4(mean(&of_size.iter().map(|j| wait(j) as f64).collect::<Vec<_>>())),
                never_started: of_size.iter().filter(|j| j.first_start_s.is_none()).count(),
            }
        })
        .collect()
}

/// What priorities and preemption did: the high-priority jobs' wait against everyone else's,
/// and what evictions cost.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PreemptionFigures {
    /// Jobs above the trace's lowest priority.
    pub high_priority_jobs: usize,
    pub high_priority_mean_delay_s: f64,
    pub other_mean_delay_s: f64,
    /// Evictions of running gangs for higher-priority ones.
    pub preemptions: u64,
    /// GPU-hours of work those evictions threw away.
    pub gpu_hours_lost: f64,
}

fn preemption_figures(jobs: &[&crate::engine::JobRecord]) -> PreemptionFigures {
    let lowest = jobs.iter().map(|j| j.priority).min().unwrap_or(0);
    let delay = |j: &&&crate::engine::JobRecord| j.first_start_s.map(|s| s.saturating_sub(j.submit_s) as f64);
    let (high, other): (Vec<_>, Vec<_>) = jobs.iter().partition(|j| j.priority > lowest);
    PreemptionFigures {
        high_priority_jobs: high.len(),
        high_priority_mean_delay_s: r4(mean(&high.iter().filter_map(delay).collect::<Vec<_>>())),
        other_mean_delay_s: r4(mean(&other.iter().filter_map(delay).collect::<Vec<_>>())),
        preemptions: jobs.iter().map(|j| u64::from(j.preemptions)).sum(),
        gpu_hours_lost: r4(jobs.iter().map(|j| j.lost_gpu_s as f64).sum::<f64>() / 3600.0),
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueueFigures {
    pub name: String,
    pub jobs: usize,
    pub gpu_hours: f64,
    pub mean_queueing_delay_s: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rejection {
    pub id: String,
    pub reason: String,
}

/// A job node failures cut short more often than `--max-restarts` allows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Failure {
    pub id: String,
    /// When it failed (seconds from the trace's start).
    pub failed_at_s: u64,
    /// Its runs cut short by node failures (evictions for a preemptor not counted).
    pub node_failure_restarts: u32,
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// Rounds for stable, readable output (the JSON is compared byte for byte across runs).
fn r4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Jain's index of `x`: 1 when all equal, 1/n when one takes everything.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || sq == 0.0 { 1.0 } else { sum * sum / (x.len() as f64 * sq) }
}

pub fn policy_report(fleet: &Fleet, run: &PolicyRun) -> PolicyReport {
    // A run cut short by `--horizon` reports on the jobs that arrived before its end: one that
    // has not been submitted yet is neither pending nor "never started".
    let jobs: Vec<&crate::engine::JobRecord> = run.jobs.iter().filter(|j| j.submit_s <= run.end_s).collect();
    let jobs = jobs.as_slice();
    let count = |f: &dyn Fn(&Outcome) -> bool| jobs.iter().filter(|j| f(&j.outcome)).count();
    let mut delays: Vec<f64> =
        jobs.iter().filter_map(|j| j.first_start_s.map(|s| s.saturating_sub(j.submit_s) as f64)).collect();
    delays.sort_by(f64::total_cmp);
    let mut jcts: Vec<f64> = jobs
        .iter()
        .filter(|j| j.outcome == Outcome::Completed)
        .filter_map(|j| j.end_s.map(|e| e.saturating_sub(j.submit_s) as f64))
        .collect();
    jcts.sort_by(f64::total_cmp);
    let multi: Vec<_> = jobs.iter().filter_map(|j| j.placement.as_ref()).filter(|p| p.hosts > 1).collect();
    let share = |level: Level| {
        if multi.is_empty() {
            0.0
        } else {
            multi.iter().filter(|p| p.within(level)).count() as f64 / multi.len() as f64
        }
    };
    let total_gpus = fleet.total_gpus() as f64;
    let busy_integral: f64 = run.busy.windows(2).map(|w| w[0].1 as f64 * (w[1].0 - w[0].0) as f64).sum::<f64>()
        + run.busy.last().map_or(0.0, |&(t, b)| b as f64 * run.end_s.saturating_sub(t) as f64);
    let span = run.end_s as f64;
    #[derive(Default)]
    struct QueueAcc {
        jobs: usize,
        gpu_hours: f64,
        delays: Vec<f64>,
        slowdowns: Vec<f64>,
    }
    let mut per_queue: BTreeMap<&str, QueueAcc> = BTreeMap::new();
    for j in jobs {
        let e = per_queue.entry(&j.queue).or_default();
        e.jobs += 1;
        if let (Some(start), Some(p)) = (j.first_start_s, &j.placement) {
            let end = j.end_s.unwrap_or(run.end_s);
            e.gpu_hours += j.gpus as f64 * end.saturating_sub(start) as f64 / 3600.0;
            e.delays.push(start.saturating_sub(j.submit_s) as f64);
            if let Some(end) = j.end_s.filter(|_| j.outcome == Outcome::Completed) {
                // Slowdown: time in system over what the job needed on its placement.
                let need = (j.duration_s as f64 * p.slowdown).max(1.0);
                e.slowdowns.push(end.saturating_sub(j.submit_s) as f64 / need);
            }
        }
    }
    let fairness: Vec<f64> =
        per_queue.values().filter(|q| !q.slowdowns.is_empty()).map(|q| 1.0 / mean(&q.slowdowns).max(1e-9)).collect();
    let mut pending_reasons: BTreeMap<String, u64> = BTreeMap::new();
    let (mut rejected, mut failed) = (Vec::new(), Vec::new());
    for j in jobs {
        match &j.outcome {
            Outcome::Pending(r) => *pending_reasons.entry(r.kind().to_string()).or_default() += 1,
            Outcome::Rejected(r) => rejected.push(Rejection { id: j.id.clone(), reason: r.to_string() }),
            Outcome::Failed => failed.push(Failure {
                id: j.id.clone(),
                failed_at_s: j.end_s.unwrap_or(run.end_s),
                node_failure_restarts: j.restarts.saturating_sub(j.preemptions),
            }),
            _ => {}
        }
    }
    PolicyReport {
        name: run.policy.name().to_string(),
        jobs: JobCounts {
            submitted: jobs.len(),
            completed: count(&|o| *o == Outcome::Completed),
            running: count(&|o| *o == Outcome::Running),
            pending: count(&|o| matches!(o, Outcome::Pending(_))),
            rejected: count(&|o| matches!(o, Outcome::Rejected(_))),
            failed: count(&|o| *o == Outcome::Failed),
        },
        queueing_delay_s: Delay {
            mean: r4(mean(&delays)),
            p50: percentile(&delays, 50.0),
            p95: percentile(&delays, 95.0),
            p99: percentile(&delays, 99.0),
            max: delays.last().copied().unwrap_or(0.0),
        },
        jct_s: Jct { mean: r4(mean(&jcts)), p95: percentile(&jcts, 95.0) },
        makespan_s: run.end_s,
        gpu_utilisation: if span > 0.0 { r4(busy_integral / (total_gpus * span)) } else { 0.0 },
        cost_weighted_gpu_hours: r4(run.weighted_gpu_s as f64 / 3600.0),
        locality: Locality {
            multi_node_gangs: multi.len(),
            within_rack: r4(share(Level::Rack)),
            within_block: r4(share(Level::Block)),
            mean_slowdown: r4(if multi.is_empty() {
                1.0
            } else {
                mean(&multi.iter().map(|p| p.slowdown).collect::<Vec<_>>())
            }),
        },
        fragmentation: if span > 0.0 { r4(run.fragmentation_integral / span) } else { 0.0 },
        fairness_jain: r4(jain(&fairness)),
        max_wait_by_size: size_class_waits(jobs, run.end_s),
        preemption: preemption_figures(jobs),
        queues: per_queue
            .into_iter()
            .map(|(name, q)| QueueFigures {
                name: name.to_string(),
                jobs: q.jobs,
                gpu_hours: r4(q.gpu_hours),
                mean_queueing_delay_s: r4(mean(&q.delays)),
            })
            .collect(),
        pending_reasons,
        pending_reason_cycles: run.pending_reason_cycles.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        rejected,
        failed,
        restarts: jobs.iter().map(|j| u64::from(j.restarts)).sum(),
        node_failures: run.node_failures,
        cycles: run.cycles,
        batch_cycles: run.batch_cycles,
        batch_kept: run.batch_kept,
        explained: run.stories.clone(),
    }
}

/// The side-by-side table: one row per figure, one column per policy.
pub fn table(report: &Report) -> String {
    let p = &report.policies;
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row =
        |name: &str, f: &dyn Fn(&PolicyReport) -> String| rows.push((name.to_string(), p.iter().map(f).collect()));
    let hours = |s: f64| format!("{:.2} h", s / 3600.0);
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    row("GPU utilisation", &|r| pct(r.gpu_utilisation));
    // Where every cluster has the same price the cost is GPU-hours by another name: shown
    // only where the fleet prices its clusters apart.
    let mut prices = report.fleet.cost_weights.values();
    if prices.next().is_some_and(|first| prices.any(|w| w != first)) {
        row("GPU-hours × cost weight", &|r| format!("{:.0}", r.cost_weighted_gpu_hours));
    }
    row("queueing delay mean", &|r| hours(r.queueing_delay_s.mean));
    row("queueing delay p50", &|r| hours(r.queueing_delay_s.p50));
    row("queueing delay p95", &|r| hours(r.queueing_delay_s.p95));
    row("queueing delay p99", &|r| hours(r.queueing_delay_s.p99));
    // With nothing completed there is no completion time to show, not a zero one.
    let jct = |r: &PolicyReport, s: f64| if r.jobs.completed == 0 { "-".to_string() } else { hours(s) };
    row("JCT mean", &|r| jct(r, r.jct_s.mean));
    row("JCT p95", &|r| jct(r, r.jct_s.p95));
    row("makespan", &|r| hours(r.makespan_s as f64));
    row("multi-node gangs", &|r| r.locality.multi_node_gangs.to_string());
    row("  inside one rack", &|r| pct(r.locality.within_rack));
    row("  inside one block", &|r| pct(r.locality.within_block));
    row("  mean topology slowdown", &|r| format!("{:.3}x", r.locality.mean_slowdown));
    row("fragmentation", &|r| pct(r.fragmentation));
    row("Jain fairness (queues)", &|r| format!("{:.3}", r.fairness_jain));
    for (i, (gpus, _, _)) in SIZE_CLASSES.iter().enumerate() {
        row(&format!("mean wait, {gpus} GPU jobs"), &|r| {
            let w = &r.max_wait_by_size[i];
            if w.jobs == 0 { "-".into() } else { hours(w.mean_wait_s) }
        });
    }
    for (i, (gpus, _, _)) in SIZE_CLASSES.iter().enumerate() {
        row(&format!("max wait, {gpus} GPU jobs"), &|r| {
            let w = &r.max_wait_by_size[i];
            match (w.jobs, w.never_started) {
                (0, _) => "-".into(),
                (_, 0) => hours(w.max_wait_s as f64),
                (_, n) => format!("{} ({n} never)", hours(w.max_wait_s as f64)),
            }
        });
    }
    if p.iter().any(|r| r.preemption.high_priority_jobs > 0) {
        row("high-priority jobs", &|r| r.preemption.high_priority_jobs.to_string());
        row("  their queueing delay mean", &|r| hours(r.preemption.high_priority_mean_delay_s));
        row("  others' queueing delay mean", &|r| hours(r.preemption.other_mean_delay_s));
        row("preemptions", &|r| r.preemption.preemptions.to_string());
        row("  GPU-hours of work lost", &|r| format!("{:.1}", r.preemption.gpu_hours_lost));
    }
    row("submitted", &|r| r.jobs.submitted.to_string());
    row("completed", &|r| r.jobs.completed.to_string());
    row("running at end", &|r| r.jobs.running.to_string());
    row("pending at end", &|r| r.jobs.pending.to_string());
    row("rejected", &|r| r.jobs.rejected.to_string());
    if p.iter().any(|r| r.jobs.failed > 0) {
        row("failed (past --max-restarts)", &|r| r.jobs.failed.to_string());
    }
    row("restarts (node failures)", &|r| format!("{} ({})", r.restarts, r.node_failures));
    if p.iter().any(|r| r.batch_cycles > 0) {
        row("batch optimiser: cycles (kept)", &|r| format!("{} ({})", r.batch_cycles, r.batch_kept));
    }
    let kinds: std::collections::BTreeSet<&String> = p.iter().flat_map(|r| r.pending_reason_cycles.keys()).collect();
    let kind_rows: Vec<(String, Vec<String>)> = kinds
        .into_iter()
        .map(|k| {
            (
                format!("  pending gang-cycles: {k}"),
                p.iter().map(|r| r.pending_reason_cycles.get(k).copied().unwrap_or(0).to_string()).collect(),
            )
        })
        .collect();
    rows.extend(kind_rows);
    let first = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let widths: Vec<usize> =
        (0..p.len()).map(|i| rows.iter().map(|r| r.1[i].len()).chain([p[i].name.len()]).max().unwrap_or(0)).collect();
    let mut out = String::new();
    // What was left out of the trace, and how it was replayed: a figure read without them
    // misleads (8,152 openb pods replay as 7,255 jobs; 3× load is not the trace's own).
    let mut notes = Vec::new();
    if report.trace.withdrawn > 0 {
        notes.push(format!("{} withdrawn before they ran, left out", report.trace.withdrawn));
    }
    if report.trace.skipped_rows > 0 {
        notes.push(format!("{} bad rows skipped", report.trace.skipped_rows));
    }
    let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
    let load = if report.options.load_scale == 1.0 {
        String::new()
    } else {
        format!(" | load ×{} (--load-scale)", report.options.load_scale)
    };
    let quotas = &report.options.quotas_gpus;
    let quotas = if quotas.is_empty() {
        String::new()
    } else {
        format!(" | {} queues with {} GPUs of quota", quotas.len(), quotas.values().sum::<u64>())
    };
    let _ = writeln!(
        out,
        "fleet {}: {} clusters, {} nodes, {} GPUs | trace {}: {} jobs{notes}{load}{quotas}",
        report.fleet.name,
        report.fleet.clusters,
        report.fleet.nodes,
        report.fleet.gpus,
        report.trace.name,
        report.trace.jobs,
    );
    let _ = write!(out, "{:first$}", "policy");
    for (r, w) in p.iter().zip(&widths) {
        let _ = write!(out, "  {:>w$}", r.name);
    }
    out.push('\n');
    for (name, values) in &rows {
        let _ = write!(out, "{name:first$}");
        for (v, w) in values.iter().zip(&widths) {
            let _ = write!(out, "  {v:>w$}");
        }
        out.push('\n');
    }
    for r in p {
        for rej in r.rejected.iter().take(5) {
            let _ = writeln!(out, "{}: rejected {}: {}", r.name, rej.id, rej.reason);
        }
        if r.rejected.len() > 5 {
            let _ = writeln!(out, "{}: … and {} more rejected (see --json)", r.name, r.rejected.len() - 5);
        }
        for f in r.failed.iter().take(5) {
            let _ = writeln!(
                out,
                "{}: failed {} at {:.1} h: node failures cut {} of its runs short",
                r.name,
                f.id,
                f.failed_at_s as f64 / 3600.0,
                f.node_failure_restarts
            );
        }
        if r.failed.len() > 5 {
            let _ = writeln!(out, "{}: … and {} more failed (see --json)", r.name, r.failed.len() - 5);
        }
    }
    for r in p {
        for story in &r.explained {
            out.push_str(&crate::engine::story::text(&r.name, story));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn size_classes_count_a_job_never_started_as_waiting_to_the_end() {
        let job = |gpus: u64, submit_s: u64, first_start_s: Option<u64>| crate::engine::JobRecord {
            id: format!("j{gpus}-{submit_s}"),
            queue: "q".into(),
            gpus,
            submit_s,
            duration_s: 60,
            priority: 0,
            first_start_s,
            end_s: None,
            restarts: 0,
            preemptions: 0,
            lost_gpu_s: 0,
            placement: None,
            outcome: crate::engine::Outcome::Completed,
        };
        let jobs = [job(1, 0, Some(10)), job(1, 100, Some(130)), job(8, 0, None), job(4, 50, Some(50))];
        let refs: Vec<_> = jobs.iter().collect();
        let w = size_class_waits(&refs, 1_000);
        assert_eq!((w[0].gpus, w[0].jobs, w[0].max_wait_s, w[0].mean_wait_s), ("1", 2, 30, 20.0));
        // The 8-GPU job never started: it waited to the end of the run.
        assert_eq!((w[1].jobs, w[1].max_wait_s, w[1].mean_wait_s, w[1].never_started), (2, 1_000, 500.0, 1));
        assert_eq!((w[3].jobs, w[3].max_wait_s, w[3].mean_wait_s), (0, 0, 0.0));
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), 1.0);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
    }
}
