//! The agent's Prometheus metrics (served on `/metrics` by the binary).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone)]
pub struct Metrics {
    /// Rounds run: statuses, fencing and the MemberCluster report (see `controller`).
    pub syncs: Counter,
    pub sync_errors: Counter,
    pub sync_seconds: Histogram,
    /// Placements rendered and applied to the member.
    pub realised: Counter,
    /// JobSets deleted because their placement moved on or the hub was out of reach.
    pub fenced: Counter,
    /// Set once the caches have synced: `/readyz` answers ok from then on.
    pub ready: kube_shell::health::Readiness,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            syncs: Counter::default(),
            sync_errors: Counter::default(),
            sync_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            realised: Counter::default(),
            fenced: Counter::default(),
            ready: kube_shell::health::Readiness::default(),
        }
    }
}

impl Metrics {
    /// New metrics, registered under `stowage_agent_`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics::default();
        let r = registry.sub_registry_with_prefix("stowage_agent");
        r.register("syncs", "Rounds run: statuses, fencing and the capacity report", m.syncs.clone());
        r.register("sync_errors", "Rounds that failed", m.sync_errors.clone());
        r.register("sync_seconds", "Time of one round", m.sync_seconds.clone());
        r.register("placements_realised", "Placements rendered and applied to the member", m.realised.clone());
        r.register("jobsets_fenced", "JobSets deleted: placement moved on, or hub out of reach", m.fenced.clone());
        m
    }
}
