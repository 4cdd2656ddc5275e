//! Stowage's kinds (MemberClusters, Placements, Queues) and the core kinds its Queues and
//! priorities read (Namespaces' labels for a Queue's namespace selector, PriorityClasses).

use api::stowage::{MemberCluster, Placement, Queue};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::runtime::reflector::Store;
use kube_shell::watch::{self, Watches};

use super::{list, watch};
use crate::decide::Observed;

pub(super) struct Stowage {
    members: Store<MemberCluster>,
    placements: Store<Placement>,
    queues: Store<Queue>,
    namespaces: Store<Namespace>,
    priority_classes: Store<PriorityClass>,
}

impl Stowage {
    pub(super) fn watch(hub: &Client, watches: &mut Watches) -> Self {
        Stowage {
            members: watch(hub, watches),
            placements: watch(hub, watches),
            queues: watch(hub, watches),
            namespaces: watch(hub, watches),
            priority_classes: watch(hub, watches),
        }
    }

    pub(super) async fn ready(&self) {
        let _ = tokio::join!(
            self.members.wait_until_ready(),
            self.placements.wait_until_ready(),
            self.queues.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.priority_classes.wait_until_ready(),
        );
    }

    pub(super) fn snapshot(&self, o: &mut Observed) {
        o.members = watch::snapshot(&self.members);
        o.placements = watch::snapshot(&self.placements);
        o.queues = watch::snapshot(&self.queues);
        o.namespaces = watch::snapshot(&self.namespaces);
        o.priority_classes = watch::snapshot(&self.priority_classes);
    }

    pub(super) async fn list(hub: &Client, o: &mut Observed) -> Result<(), kube::Error> {
        o.members = list(hub).await?;
        o.placements = list(hub).await?;
        o.queues = list(hub).await?;
        o.namespaces = list(hub).await?;
        o.priority_classes = list(hub).await?;
        Ok(())
    }
}
