//! Fixtures for the agent's unit tests: caches built from objects, placements and JobSets in
//! one line each.

use std::sync::Arc;

use api::jobset::JobSet;
use api::stowage::{EPOCH_LABEL, Placement, TRAINJOB_UID_LABEL};
use kube::ResourceExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};
use trainer_render::Capabilities;

use crate::caches::Caches;
use crate::config::{AgentConfig, Timing};
use crate::metrics::Metrics;

pub(crate) fn store<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store();
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(o));
    }
    reader
}

pub(crate) fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

/// A Placement of TrainJob `uid` on `cluster` at epoch 1, with the status the hub has.
pub(crate) fn placement(uid: &str, cluster: &str, phase: Option<&str>) -> Placement {
    let mut p = json!({"metadata": {"name": uid, "namespace": "team"},
        "spec": {"trainJobUid": uid, "cluster": cluster, "epoch": 1}});
    if let Some(phase) = phase {
        p["status"] = json!({"phase": phase, "observedEpoch": 1});
    }
    from(p)
}

/// A JobSet made now, for `uid`'s placement at `epoch`, with `ready` Jobs.
pub(crate) fn jobset(uid: &str, epoch: i64, ready: i32) -> JobSet {
    let made = k8s_openapi::jiff::Timestamp::now().to_string();
    from(json!({"metadata": {"name": uid, "namespace": "team", "creationTimestamp": made,
            "labels": {TRAINJOB_UID_LABEL: uid, EPOCH_LABEL: epoch.to_string()}},
        "spec": {"replicatedJobs": []},
        "status": {"replicatedJobsStatus": [{"name": "node", "ready": ready, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]}}))
}

pub(crate) fn caches(placements: Vec<Placement>, jobsets: Vec<JobSet>) -> Caches {
    Caches {
        placements: store(placements),
        runtimes: store(Vec::new()),
        cluster_runtimes: store(Vec::new()),
        jobsets: store(jobsets),
        nodes: store(Vec::new()),
        pods: store(Vec::new()),
        trainjob_pods: store(Vec::new()),
        copies: store(Vec::new()),
        events: store(Vec::new()),
    }
}

pub(crate) fn config() -> AgentConfig {
    AgentConfig {
        cluster: "east".into(),
        levels: Vec::new(),
        node_labels: Vec::new(),
        capabilities: Capabilities::default(),
        timing: Timing::default(),
        metrics: Metrics::default(),
        logs: crate::config::Logs::Off("no log relay in tests".into()),
    }
}

pub(crate) fn names(ps: &[Arc<Placement>]) -> Vec<String> {
    ps.iter().map(|p| p.name_any()).collect()
}
