//! What the agent watches: its Placements and the runtimes on the hub; its JobSets, Nodes and
//! unfinished Pods on the member.

use api::conditions::is_true;
use api::jobset::{JobSet, JobSetCondition};
use api::stowage::{CLUSTER_LABEL, Placement, PlacementKey, TRAINJOB_UID_LABEL};
use api::trainer::{ClusterTrainingRuntime, TrainingRuntime};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::capacity;
use kube_shell::watch::Watches;

/// The agent's caches: its Placements and the runtimes on the hub; its JobSets, and the Nodes
/// and unfinished Pods its capacity report summarises, on the member.
#[derive(Debug, Clone)]
pub struct Caches {
    pub(crate) placements: Store<Placement>,
    pub(crate) runtimes: Store<TrainingRuntime>,
    pub(crate) cluster_runtimes: Store<ClusterTrainingRuntime>,
    pub(crate) jobsets: Store<JobSet>,
    pub(crate) nodes: Store<Node>,
    pub(crate) pods: Store<Pod>,
    /// The member's TrainJob pods, finished ones too, for their copies on the hub (`mirror`):
    /// a change wakes the agent, so the hub sees a pod start without waiting for a heartbeat.
    pub(crate) trainjob_pods: Store<Pod>,
    /// This member's pod copies on the hub.
    pub(crate) copies: Store<Pod>,
    /// The member's Events about pods, some of which are relayed to the hub (`relay`).
    pub(crate) events: Store<Event>,
}

impl Caches {
    pub fn start(hub: &Client, member: &Client, cluster: &str, watches: &mut Watches) -> Self {
        Caches {
            placements: watches
                .watch(Api::all(hub.clone()), watcher::Config::default().labels(&format!("{CLUSTER_LABEL}={cluster}"))),
            runtimes: watches.watch(Api::all(hub.clone()), watcher::Config::default()),
            cluster_runtimes: watches.watch(Api::all(hub.clone()), watcher::Config::default()),
            jobsets: watches.watch(Api::all(member.clone()), watcher::Config::default().labels(TRAINJOB_UID_LABEL)),
            // Read by each round, not acted on: they do not wake the agent.
            nodes: watches.cache(Api::all(member.clone()), watcher::Config::default(), capacity::strip_node),
            pods: watches.cache(
                Api::all(member.clone()),
                watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
                capacity::strip_pod,
            ),
            trainjob_pods: watches
                .watch(Api::all(member.clone()), watcher::Config::default().labels(TRAINJOB_UID_LABEL)),
            copies: watches.cache(
                Api::all(hub.clone()),
                watcher::Config::default().labels(&format!("{CLUSTER_LABEL}={cluster}")),
                kube_shell::watch::whole::<Pod>,
            ),
            events: watches.cache(
                Api::all(member.clone()),
                watcher::Config::default().fields("involvedObject.kind=Pod"),
                kube_shell::watch::whole::<Event>,
            ),
        }
    }

    pub async fn ready(&self) {
        let _ = tokio::join!(
            self.placements.wait_until_ready(),
            self.runtimes.wait_until_ready(),
            self.cluster_runtimes.wait_until_ready(),
            self.jobsets.wait_until_ready(),
            self.nodes.wait_until_ready(),
            self.pods.wait_until_ready(),
            self.trainjob_pods.wait_until_ready(),
            self.copies.wait_until_ready(),
            self.events.wait_until_ready()
        );
    }
}

/// A placement key: TrainJob UID and epoch.
pub(crate) type Key = PlacementKey;

/// The placement a JobSet was made for, by the labels the agent puts on it.
pub(crate) fn owner_key(js: &JobSet) -> Option<Key> {
    PlacementKey::of_labels(js.labels())
}

pub(crate) fn is_finished(js: &JobSet) -> bool {
    js.status.as_ref().is_some_and(|s| {
        [JobSetCondition::Completed, JobSetCondition::Failed].iter().any(|c| is_true(&s.conditions, c.as_str()))
    })
}
