//! The dispatcher's Prometheus metrics (served on `/metrics` by the binary).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone)]
pub struct Metrics {
    pub cycles: Counter,
    pub cycle_errors: Counter,
    pub cycle_seconds: Histogram,
    pub placements_written: Counter,
    pub withdrawals: Counter,
    pub pending: Gauge,
    pub leader: Gauge,
    pub batch_solves: Counter,
    pub batch_kept: Counter,
    /// Set once the caches have synced: `/readyz` answers ok from then on.
    pub ready: kube_shell::health::Readiness,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            cycles: Counter::default(),
            cycle_errors: Counter::default(),
            cycle_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            placements_written: Counter::default(),
            withdrawals: Counter::default(),
            pending: Gauge::default(),
            leader: Gauge::default(),
            batch_solves: Counter::default(),
            batch_kept: Counter::default(),
            ready: kube_shell::health::Readiness::default(),
        }
    }
}

impl Metrics {
    /// New metrics, registered under `stowage_dispatcher_`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics::default();
        let r = registry.sub_registry_with_prefix("stowage_dispatcher");
        r.register("cycles", "Scheduling cycles run", m.cycles.clone());
        r.register("cycle_errors", "Scheduling cycles that failed to observe or write", m.cycle_errors.clone());
        r.register("cycle_seconds", "Time of one cycle: decide and write", m.cycle_seconds.clone());
        r.register("placements_written", "Placements created or replaced", m.placements_written.clone());
        r.register(
            "withdrawals",
            "TrainJobs taken away from a member (silent, unschedulable, lost)",
            m.withdrawals.clone(),
        );
        r.register("pending_trainjobs", "TrainJobs waiting for a placement after the last cycle", m.pending.clone());
        r.register("leader", "1 while this replica leads", m.leader.clone());
        r.register("batch_solves", "Cycles in which the batch optimiser solved a model", m.batch_solves.clone());
        r.register(
            "batch_kept",
            "Cycles whose decisions came from the batch optimiser (it admitted more than greedy)",
            m.batch_kept.clone(),
        );
        m
    }
}
