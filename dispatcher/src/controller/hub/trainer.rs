//! Trainer's kinds: TrainJobs and the runtimes they name.

use api::trainer::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};
use kube::Client;
use kube::runtime::reflector::Store;
use kube_shell::watch::{self, Watches};

use super::{list, watch};
use crate::decide::Observed;

pub(super) struct Trainer {
    trainjobs: Store<TrainJob>,
    cluster_runtimes: Store<ClusterTrainingRuntime>,
    runtimes: Store<TrainingRuntime>,
}

impl Trainer {
    pub(super) fn watch(hub: &Client, watches: &mut Watches) -> Self {
        Trainer { trainjobs: watch(hub, watches), cluster_runtimes: watch(hub, watches), runtimes: watch(hub, watches) }
    }

    pub(super) async fn ready(&self) {
        let _ = tokio::join!(
            self.trainjobs.wait_until_ready(),
            self.cluster_runtimes.wait_until_ready(),
            self.runtimes.wait_until_ready(),
        );
    }

    pub(super) fn snapshot(&self, o: &mut Observed) {
        o.trainjobs = watch::snapshot(&self.trainjobs);
        o.cluster_runtimes = watch::snapshot(&self.cluster_runtimes);
        o.runtimes = watch::snapshot(&self.runtimes);
    }

    pub(super) async fn list(hub: &Client, o: &mut Observed) -> Result<(), kube::Error> {
        o.trainjobs = list(hub).await?;
        o.cluster_runtimes = list(hub).await?;
        o.runtimes = list(hub).await?;
        Ok(())
    }
}
