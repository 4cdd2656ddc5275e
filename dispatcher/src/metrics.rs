//! The dispatcher's Prometheus metrics (served on `/metrics` by the binary, and by `stowage
//! dev` for the whole playground). Names follow Prometheus' conventions; docs/operations.md
//! lists them. Gauges are set from each cycle's [`Figures`], counters and histograms from the
//! writes that succeeded: labels are queues, members, flavors and closed sets, never a TrainJob.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use kube_shell::metrics::{ClusterLabel, Component, Shared};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::decide::figures::{Figures, JobPhase};
use crate::decide::{Placed, Redispatch};

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QueueState {
    pub queue: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QueueReason {
    pub queue: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterLocality {
    pub cluster: String,
    pub locality: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterFlavorState {
    pub cluster: String,
    pub flavor: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QueueFlavorKind {
    pub queue: String,
    pub flavor: String,
    pub kind: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Waits from a burst's tens of milliseconds to days: 1/64 s to about 9 days, doubling. With
/// 1 s the first bucket, every sub-second wait read as histogram_quantile's interpolation of
/// [0, 1 s]: exactly 0.5 s at the median, 0.99 s at p99, whatever the waits were.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0 / 64.0, 2.0, 26))
}

/// The series each gauge family had after the last cycle, so a series that no longer applies
/// (a member gone, a queue emptied) is removed rather than left at its last value.
#[derive(Debug, Default)]
struct Shown {
    trainjobs: BTreeSet<QueueState>,
    pending: BTreeSet<QueueReason>,
    cluster_gpus: BTreeSet<ClusterFlavorState>,
    queue_gpus: BTreeSet<QueueFlavorKind>,
    heartbeat_age: BTreeSet<ClusterLabel>,
    oldest_pending: BTreeSet<QueueLabel>,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    pub cycles: Counter,
    pub cycle_duration: Histogram,
    pub leader: Gauge,
    pub batch_solves: Counter,
    pub batch_kept: Counter,
    /// The batch optimiser's last proven gap (0 until it has solved one).
    pub solver_gap: Gauge<f64, AtomicU64>,
    pub trainjobs: Family<QueueState, Gauge>,
    pub pending: Family<QueueReason, Gauge>,
    pub admission_wait: HistogramFamily<QueueLabel>,
    pub placements: Family<ClusterLocality, Counter>,
    pub redispatches: Family<ReasonLabel, Counter>,
    pub cluster_gpus: Family<ClusterFlavorState, Gauge>,
    pub queue_gpus: Family<QueueFlavorKind, Gauge>,
    pub heartbeat_age: Family<ClusterLabel, Gauge<f64, AtomicU64>>,
    pub oldest_pending: Family<QueueLabel, Gauge<f64, AtomicU64>>,
    /// The shorter-first cap the last cycle ordered by (`Figures::short_first_cap_s`).
    pub short_first_cap: Gauge,
    pub shared: Shared,
    shown: Arc<Mutex<Shown>>,
    /// Set once the caches have synced: `/readyz` answers ok from then on.
    pub ready: kube_shell::health::Readiness,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            cycles: Counter::default(),
            cycle_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            leader: Gauge::default(),
            batch_solves: Counter::default(),
            batch_kept: Counter::default(),
            solver_gap: Gauge::default(),
            trainjobs: Family::default(),
            pending: Family::default(),
            admission_wait: Family::new_with_constructor(wait_histogram),
            placements: Family::default(),
            redispatches: Family::default(),
            cluster_gpus: Family::default(),
            queue_gpus: Family::default(),
            heartbeat_age: Family::default(),
            oldest_pending: Family::default(),
            short_first_cap: Gauge::default(),
            shared: Shared::default(),
            shown: Arc::default(),
            ready: kube_shell::health::Readiness::default(),
        }
    }
}

impl Metrics {
    /// New metrics in `registry`, beside the `shared` ones already registered there.
    pub fn register(registry: &mut Registry, shared: &Shared) -> Self {
        let m = Metrics { shared: shared.clone(), ..Metrics::default() };
        let d = registry.sub_registry_with_prefix("stowage_dispatcher");
        d.register("cycles", "Scheduling cycles run", m.cycles.clone());
        d.register("leader", "1 while this replica leads", m.leader.clone());
        d.register("batch_solves", "Cycles in which the batch optimiser solved a model", m.batch_solves.clone());
        d.register(
            "batch_kept",
            "Cycles whose decisions came from the batch optimiser (it admitted more than greedy)",
            m.batch_kept.clone(),
        );
        let r = registry.sub_registry_with_prefix("stowage");
        r.register_with_unit(
            "cycle_duration",
            "Time of one dispatcher cycle: decide and write",
            prometheus_client::registry::Unit::Seconds,
            m.cycle_duration.clone(),
        );
        r.register(
            "solver_gap_ratio",
            "The batch optimiser's last proven optimality gap, as a share of its bound (0: none solved)",
            m.solver_gap.clone(),
        );
        r.register("trainjobs", "Unfinished TrainJobs by queue and state", m.trainjobs.clone());
        r.register(
            "pending_trainjobs",
            "TrainJobs waiting for a placement, by queue and the reason of their Pending condition",
            m.pending.clone(),
        );
        r.register_with_unit(
            "admission_wait",
            "From a TrainJob's creation to its first placement",
            prometheus_client::registry::Unit::Seconds,
            m.admission_wait.clone(),
        );
        r.register(
            "placements",
            "TrainJobs placed on a member, by the narrowest topology level holding the whole gang",
            m.placements.clone(),
        );
        r.register("redispatches", "TrainJobs taken off their member, by why", m.redispatches.clone());
        r.register_with_unit(
            "short_first_cap",
            "The cap up to which the last cycle counted each TrainJob's expected run time in its order, grown with the queue (0: creation order)",
            prometheus_client::registry::Unit::Seconds,
            m.short_first_cap.clone(),
        );
        r.register(
            "cluster_gpus",
            "GPUs per member and flavor as its last accepted report counts them (allocatable, used, free)",
            m.cluster_gpus.clone(),
        );
        r.register(
            "queue_gpus",
            "GPUs per queue and flavor it has quota for (nominal, used, borrowed, lent)",
            m.queue_gpus.clone(),
        );
        r.register_with_unit(
            "oldest_pending_trainjob_age",
            "Per queue, time since the oldest TrainJob still waiting for a placement was created",
            prometheus_client::registry::Unit::Seconds,
            m.oldest_pending.clone(),
        );
        r.register_with_unit(
            "member_heartbeat_age",
            "Time since each member's agent last reported",
            prometheus_client::registry::Unit::Seconds,
            m.heartbeat_age.clone(),
        );
        // Every reason from the start, at 0: a rate over a counter that appears only with its
        // first increment misses that increment.
        for r in Redispatch::ALL {
            let _ = m.redispatches.get_or_create(&ReasonLabel { reason: r.as_str() });
        }
        shared.touch(Component::Dispatcher);
        m
    }

    /// A Placement written: what it placed, and what it took off a member.
    pub fn written(&self, placed: Option<&Placed>, redispatch: Option<Redispatch>) {
        if let Some(p) = placed {
            let locality = p.locality.map_or("cluster", |l| l.as_str());
            self.placements.get_or_create(&ClusterLocality { cluster: p.cluster.clone(), locality }).inc();
            if let Some(waited) = p.waited {
                let queue = QueueLabel { queue: p.queue.clone() };
                self.admission_wait.get_or_create(&queue).observe(waited.as_secs_f64());
            }
        }
        if let Some(r) = redispatch {
            self.redispatches.get_or_create(&ReasonLabel { reason: r.as_str() }).inc();
        }
    }

    /// A failed cycle, by its [`Error::kind`](crate::controller::Error::kind).
    pub fn reconcile_error(&self, kind: &'static str) {
        self.shared.reconcile_error(Component::Dispatcher, kind);
    }

    /// Sets every gauge from a cycle's figures, and removes the series that no longer apply.
    pub fn show(&self, f: &Figures) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.short_first_cap.set(to_i64(f.short_first_cap_s));
        let mut now = Shown::default();
        // Every queue seen gets all four states, so "none running" reads 0, not "no data".
        let queues: BTreeSet<&String> = f.trainjobs.keys().map(|(q, _)| q).collect();
        for queue in queues {
            for phase in JobPhase::ALL {
                let n = f.trainjobs.get(&(queue.clone(), phase)).copied().unwrap_or(0);
                let labels = QueueState { queue: queue.clone(), state: phase.as_str() };
                self.trainjobs.get_or_create(&labels).set(to_i64(n));
                now.trainjobs.insert(labels);
            }
        }
        for ((queue, reason), n) in &f.pending {
            let labels = QueueReason { queue: queue.clone(), reason: reason.clone() };
            self.pending.get_or_create(&labels).set(to_i64(*n));
            now.pending.insert(labels);
        }
        for ((cluster, flavor), g) in &f.cluster_gpus {
            let free = g.allocatable.saturating_sub(g.used);
            for (state, n) in [("allocatable", g.allocatable), ("used", g.used), ("free", free)] {
                let labels = ClusterFlavorState { cluster: cluster.clone(), flavor: flavor.clone(), state };
                self.cluster_gpus.get_or_create(&labels).set(to_i64(n));
                now.cluster_gpus.insert(labels);
            }
        }
        for ((queue, flavor), g) in &f.queue_gpus {
            let kinds = [("nominal", g.nominal), ("used", g.used), ("borrowed", g.borrowed), ("lent", g.lent)];
            for (kind, n) in kinds {
                let labels = QueueFlavorKind { queue: queue.clone(), flavor: flavor.clone(), kind };
                self.queue_gpus.get_or_create(&labels).set(to_i64(n));
                now.queue_gpus.insert(labels);
            }
        }
        for (cluster, age) in &f.heartbeat_age {
            let labels = ClusterLabel { cluster: cluster.clone() };
            self.heartbeat_age.get_or_create(&labels).set(*age);
            now.heartbeat_age.insert(labels);
        }
        for (queue, age) in &f.oldest_pending {
            let labels = QueueLabel { queue: queue.clone() };
            self.oldest_pending.get_or_create(&labels).set(*age);
            now.oldest_pending.insert(labels);
        }
        retire(&self.trainjobs, &shown.trainjobs, &now.trainjobs);
        retire(&self.pending, &shown.pending, &now.pending);
        retire(&self.cluster_gpus, &shown.cluster_gpus, &now.cluster_gpus);
        retire(&self.queue_gpus, &shown.queue_gpus, &now.queue_gpus);
        retire(&self.heartbeat_age, &shown.heartbeat_age, &now.heartbeat_age);
        retire(&self.oldest_pending, &shown.oldest_pending, &now.oldest_pending);
        *shown = now;
    }
}

/// Removes from `family` the series shown before and not now.
fn retire<L, M, C>(family: &Family<L, M, C>, before: &BTreeSet<L>, now: &BTreeSet<L>)
where
    L: Clone + std::hash::Hash + Eq + Ord,
    C: prometheus_client::metrics::family::MetricConstructor<M>,
{
    for gone in before.difference(now) {
        family.remove(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::figures::{ClusterGpus, QueueGpus};

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    #[test]
    fn gauges_follow_the_figures_and_series_that_no_longer_apply_go() {
        let mut registry = Registry::default();
        let shared = Shared::register(&mut registry);
        let m = Metrics::register(&mut registry, &shared);
        let mut f = Figures::default();
        f.trainjobs.insert(("team-a".into(), JobPhase::Running), 2);
        f.pending.insert(("team-a".into(), "QuotaExceeded".into()), 1);
        f.cluster_gpus.insert(("east".into(), "h100".into()), ClusterGpus { allocatable: 64, used: 16 });
        f.queue_gpus.insert(("team-a".into(), "h100".into()), QueueGpus { nominal: 8, used: 16, borrowed: 8, lent: 0 });
        f.heartbeat_age.insert("east".into(), 1.5);
        f.oldest_pending.insert("team-a".into(), 600.0);
        f.short_first_cap_s = 43_200;
        m.show(&f);
        m.written(
            Some(&Placed {
                queue: "team-a".into(),
                cluster: "east".into(),
                locality: Some(scheduler_core::Level::Rack),
                waited: Some(std::time::Duration::from_secs(30)),
            }),
            Some(Redispatch::MemberSilent),
        );
        m.reconcile_error("conflict");
        let text = encoded(&registry);
        for line in [
            "stowage_trainjobs{queue=\"team-a\",state=\"running\"} 2",
            "stowage_trainjobs{queue=\"team-a\",state=\"pending\"} 0",
            "stowage_pending_trainjobs{queue=\"team-a\",reason=\"QuotaExceeded\"} 1",
            "stowage_cluster_gpus{cluster=\"east\",flavor=\"h100\",state=\"free\"} 48",
            "stowage_queue_gpus{queue=\"team-a\",flavor=\"h100\",kind=\"borrowed\"} 8",
            "stowage_member_heartbeat_age_seconds{cluster=\"east\"} 1.5",
            "stowage_placements_total{cluster=\"east\",locality=\"rack\"} 1",
            "stowage_redispatches_total{reason=\"MemberSilent\"} 1",
            "stowage_redispatches_total{reason=\"Lost\"} 0",
            "stowage_oldest_pending_trainjob_age_seconds{queue=\"team-a\"} 600.0",
            "stowage_admission_wait_seconds_count{queue=\"team-a\"} 1",
            "stowage_reconcile_errors_total{component=\"dispatcher\",kind=\"conflict\"} 1",
            "# TYPE stowage_cycle_duration_seconds histogram",
            "# TYPE stowage_solver_gap_ratio gauge",
            "stowage_short_first_cap_seconds 43200",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        // The member is gone and the queue emptied: their series go, not stay at old values.
        m.show(&Figures::default());
        let text = encoded(&registry);
        for gone in ["stowage_trainjobs{", "stowage_pending_trainjobs{", "stowage_cluster_gpus{", "stowage_queue_gpus{"]
        {
            assert!(!text.contains(gone), "{gone} still in\n{text}");
        }
        assert!(!text.contains("stowage_member_heartbeat_age_seconds{"), "{text}");
        assert!(!text.contains("stowage_oldest_pending_trainjob_age_seconds{"), "{text}");
    }

    /// A burst's waits are tens of milliseconds: they land in buckets that tell them apart, so
    /// a quantile reads them, not the interpolation of one [0, 1 s] bucket.
    #[test]
    fn sub_second_admission_waits_fall_in_sub_second_buckets() {
        let mut registry = Registry::default();
        let shared = Shared::register(&mut registry);
        let m = Metrics::register(&mut registry, &shared);
        let placed = |ms: u64| Placed {
            queue: "q".into(),
            cluster: "east".into(),
            locality: None,
            waited: Some(std::time::Duration::from_millis(ms)),
        };
        m.written(Some(&placed(40)), None);
        m.written(Some(&placed(300)), None);
        let text = encoded(&registry);
        let bucket = |le: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("stowage_admission_wait_seconds_bucket{") && l.contains(&format!("le=\"{le}\""))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        };
        let counts = ["0.03125", "0.0625", "0.25", "0.5"].map(bucket);
        assert_eq!(counts, [Some(0), Some(1), Some(1), Some(2)], "{text}");
    }
}
