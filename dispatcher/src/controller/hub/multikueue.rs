//! What MultiKueue's external dispatcher reads (`--kueue multikueue`): Workloads, their
//! AdmissionChecks, and MultiKueue's configs and clusters.

use api::kueue::{AdmissionCheck, MultiKueueCluster, MultiKueueConfig, Workload};
use kube::Client;
use kube::runtime::reflector::Store;
use kube_shell::watch::{self, Watches};

use super::kueue::Served;
use super::{list, watch};
use crate::decide::Observed;

pub(super) struct MultiKueue {
    workloads: Store<Workload>,
    admission_checks: Store<AdmissionCheck>,
    configs: Store<MultiKueueConfig>,
    clusters: Store<MultiKueueCluster>,
}

impl MultiKueue {
    pub(super) fn watch(hub: &Client, watches: &mut Watches) -> Self {
        MultiKueue {
            workloads: watch(hub, watches),
            admission_checks: watch(hub, watches),
            configs: watch(hub, watches),
            clusters: watch(hub, watches),
        }
    }

    pub(super) async fn ready(&self) {
        let _ = tokio::join!(
            self.workloads.wait_until_ready(),
            self.admission_checks.wait_until_ready(),
            self.configs.wait_until_ready(),
            self.clusters.wait_until_ready(),
        );
    }

    pub(super) fn snapshot(&self, o: &mut Observed) {
        o.workloads = watch::snapshot(&self.workloads);
        o.admission_checks = watch::snapshot(&self.admission_checks);
        o.multikueue_configs = watch::snapshot(&self.configs);
        o.multikueue_clusters = watch::snapshot(&self.clusters);
    }

    /// The Workloads alone, where the hub serves them, whatever the mode: `stowage explain`
    /// reads where a TrainJob Kueue queues stands, and nominates nothing.
    pub(super) async fn list(hub: &Client, served: Served, o: &mut Observed) -> Result<(), kube::Error> {
        if served.workloads {
            o.workloads = list(hub).await?;
        }
        Ok(())
    }
}
