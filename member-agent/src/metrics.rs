//! The agent's Prometheus metrics (served on `/metrics` by the binary; `stowage dev` serves
//! every agent's with the dispatcher's on one endpoint). Every series is labelled with its
//! member, so the agents of one process share one set of families.

use std::collections::BTreeMap;

use api::stowage::PlacementPhase;
use kube_shell::metrics::{ClusterLabel, Component, Shared};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterList {
    cluster: String,
    /// `counted` or `bound`, as in the MemberCluster status.
    list: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterCut {
    cluster: String,
    /// `levels` or `groups`.
    cut: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterPhase {
    cluster: String,
    phase: &'static str,
}

type HistogramFamily = Family<ClusterLabel, Histogram, fn() -> Histogram>;

fn round_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

/// Half a second to about 2.3 hours: a gang waiting for its nodes can wait long.
fn start_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 15))
}

/// The phase label of a JobSet: what its placement's status would say.
pub fn phase_label(phase: PlacementPhase) -> &'static str {
    match phase {
        PlacementPhase::Pending => "pending",
        PlacementPhase::Applied => "starting",
        PlacementPhase::Running => "running",
        PlacementPhase::Succeeded => "succeeded",
        PlacementPhase::Failed => "failed",
        PlacementPhase::Unschedulable => "unschedulable",
        PlacementPhase::Lost => "lost",
    }
}

#[derive(Debug, Clone)]
pub struct Metrics {
    rounds: Family<ClusterLabel, Counter>,
    round_duration: HistogramFamily,
    realised: Family<ClusterLabel, Counter>,
    fenced: Family<ClusterLabel, Counter>,
    jobsets: Family<ClusterPhase, Gauge>,
    left_out: Family<ClusterList, Gauge>,
    summary_cut: Family<ClusterCut, Gauge>,
    start_latency: HistogramFamily,
    shared: Shared,
    /// Set once the caches have synced: `/readyz` answers ok from then on.
    pub ready: kube_shell::health::Readiness,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            rounds: Family::default(),
            round_duration: Family::new_with_constructor(round_histogram),
            realised: Family::default(),
            fenced: Family::default(),
            jobsets: Family::default(),
            left_out: Family::default(),
            summary_cut: Family::default(),
            start_latency: Family::new_with_constructor(start_histogram),
            shared: Shared::default(),
            ready: kube_shell::health::Readiness::default(),
        }
    }
}

impl Metrics {
    /// New metrics in `registry`, beside the `shared` ones already registered there.
    pub fn register(registry: &mut Registry, shared: &Shared) -> Self {
        let m = Metrics { shared: shared.clone(), ..Metrics::default() };
        let a = registry.sub_registry_with_prefix("stowage_agent");
        a.register("syncs", "Rounds run: statuses, fencing and the capacity report", m.rounds.clone());
        a.register_with_unit("sync", "Time of one round", Unit::Seconds, m.round_duration.clone());
        a.register("placements_realised", "Placements rendered and applied to the member", m.realised.clone());
        a.register("jobsets_fenced", "JobSets deleted: placement moved on, or hub out of reach", m.fenced.clone());
        a.register("jobsets", "JobSets this agent made on its member, by phase", m.jobsets.clone());
        a.register(
            "report_left_out",
            "Placements the last capacity report left out of status.counted or status.bound for their size",
            m.left_out.clone(),
        );
        a.register(
            "summary_cut",
            "What the last capacity report's summary left out for its size: topology levels (cut=\"levels\") and \
             groups of nodes (cut=\"groups\")",
            m.summary_cut.clone(),
        );
        registry.register_with_unit(
            "stowage_start_latency",
            "From a JobSet's creation on its member to all its pods running",
            Unit::Seconds,
            m.start_latency.clone(),
        );
        shared.touch(Component::Agent);
        m
    }

    fn cluster(cluster: &str) -> ClusterLabel {
        ClusterLabel { cluster: cluster.to_string() }
    }

    pub fn round_done(&self, cluster: &str, seconds: f64) {
        self.rounds.get_or_create(&Self::cluster(cluster)).inc();
        self.round_duration.get_or_create(&Self::cluster(cluster)).observe(seconds);
    }

    pub fn round_failed(&self, kind: &'static str) {
        self.shared.reconcile_error(Component::Agent, kind);
    }

    pub fn count_realised(&self, cluster: &str) {
        self.realised.get_or_create(&Self::cluster(cluster)).inc();
    }

    pub fn count_fenced(&self, cluster: &str) {
        self.fenced.get_or_create(&Self::cluster(cluster)).inc();
    }

    /// JobSets fenced on `cluster` so far.
    pub fn fenced(&self, cluster: &str) -> u64 {
        self.fenced.get_or_create(&Self::cluster(cluster)).get()
    }

    pub fn observe_start(&self, cluster: &str, seconds: f64) {
        self.start_latency.get_or_create(&Self::cluster(cluster)).observe(seconds);
    }

    /// What the last capacity report left out of each list for its size (0 when nothing).
    pub fn report_left_out(&self, cluster: &str, counted: usize, bound: usize) {
        for (list, n) in [("counted", counted), ("bound", bound)] {
            let labels = ClusterList { cluster: cluster.to_string(), list };
            self.left_out.get_or_create(&labels).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// What the last capacity report's summary left out for its size (0 when nothing).
    pub fn summary_cut(&self, cluster: &str, levels: usize, groups: usize) {
        for (cut, n) in [("levels", levels), ("groups", groups)] {
            let labels = ClusterCut { cluster: cluster.to_string(), cut };
            self.summary_cut.get_or_create(&labels).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The member's JobSets by phase, every phase shown (0 where none).
    pub fn jobsets(&self, cluster: &str, by_phase: &BTreeMap<&'static str, u64>) {
        for phase in PlacementPhase::ALL.map(phase_label) {
            let n = by_phase.get(phase).copied().unwrap_or(0);
            let labels = ClusterPhase { cluster: cluster.to_string(), phase };
            self.jobsets.get_or_create(&labels).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
