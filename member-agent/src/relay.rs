//! The member's word on its TrainJob pods, on the hub: the Events a member's scheduler and
//! kubelets record about those pods that a user needs (a gang that cannot be scheduled, a
//! container crash-looping or killed for memory, an eviction, a volume that does not mount)
//! become Events on the hub TrainJob, naming the member and the pod. Pure: which to relay, and
//! how many times each happened since last relayed.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::stowage::PlacementKey;
use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use kube::ResourceExt;
use kube_shell::events::Record;

use crate::mirror::Owner;

/// The member Events a user of the hub is told of, by reason.
pub const RELAYED: [&str; 8] = [
    "FailedScheduling",
    "BackOff",
    "OOMKilling",
    "Evicted",
    "Preempted",
    "FailedMount",
    "FailedAttachVolume",
    "Failed",
];

/// Most of a member Event's message relayed.
const MESSAGE: usize = 1024;

/// A member Event to relay: the hub Event, and the member Event's UID and count once relayed.
#[derive(Debug, Clone, PartialEq)]
pub struct Relay {
    pub record: Record,
    pub seen: (String, i32),
}

/// The member's Events about pods of TrainJobs placed here (`owners`, by placement) that are
/// new or counted up since `relayed` (member Event UID → count relayed).
pub fn relays(
    cluster: &str,
    events: &[Arc<Event>],
    pods: &[Arc<Pod>],
    owners: &BTreeMap<PlacementKey, Owner>,
    relayed: &BTreeMap<String, i32>,
) -> Vec<Relay> {
    let owner_of: BTreeMap<(&str, &str), &Owner> = pods
        .iter()
        .filter_map(|p| {
            let owner = owners.get(&PlacementKey::of_labels(p.labels())?)?;
            Some(((p.metadata.namespace.as_deref()?, p.metadata.name.as_deref()?), owner))
        })
        .collect();
    let mut out = Vec::new();
    for e in events {
        let Some(reason) = e.reason.as_deref().filter(|r| RELAYED.contains(r)) else { continue };
        let o = &e.involved_object;
        if o.kind.as_deref() != Some("Pod") {
            continue;
        }
        let (Some(ns), Some(pod)) = (o.namespace.as_deref(), o.name.as_deref()) else { continue };
        let Some(owner) = owner_of.get(&(ns, pod)) else { continue };
        let Some(uid) = e.metadata.uid.as_deref() else { continue };
        let count = e.count.unwrap_or(1).max(1);
        let before = relayed.get(uid).copied().unwrap_or(0);
        if count <= before {
            continue;
        }
        let said = e.message.as_deref().unwrap_or_default().trim();
        let said: String = said.chars().take(MESSAGE).collect();
        out.push(Relay {
            record: Record {
                name: format!("{}.{cluster}.{}", owner.name, reason.to_ascii_lowercase()),
                involved: ObjectReference {
                    api_version: Some("trainer.kubeflow.org/v1alpha1".into()),
                    kind: Some("TrainJob".into()),
                    name: Some(owner.name.clone()),
                    namespace: Some(ns.to_string()),
                    uid: Some(owner.uid.clone()),
                    ..Default::default()
                },
                type_: e.type_.clone().unwrap_or_else(|| "Warning".into()),
                reason: reason.into(),
                message: format!("member {cluster}, pod {pod}: {said}"),
                times: count - before,
                component: format!("stowage-agent-{cluster}"),
            },
            seen: (uid.to_string(), count),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(uid: &str, reason: &str, pod: &str, count: i32) -> Arc<Event> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": format!("{pod}.{uid}"), "namespace": "ml", "uid": uid},
                "involvedObject": {"kind": "Pod", "namespace": "ml", "name": pod},
                "reason": reason, "type": "Warning", "message": "Back-off restarting failed container node", "count": count}))
            .expect("event"),
        )
    }

    fn pod(name: &str, uid: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ml",
                "labels": {"stowage.dev/trainjob-uid": uid, "stowage.dev/placement-epoch": "1"}}}))
            .expect("pod"),
        )
    }

    #[test]
    fn only_the_events_a_user_needs_about_pods_placed_here_are_relayed_once_per_count() {
        let owners: BTreeMap<PlacementKey, Owner> =
            [(PlacementKey { uid: "u1".into(), epoch: 1 }, Owner { name: "t1".into(), uid: "u1".into() })].into();
        let pods = [pod("t1-node-0", "u1"), pod("other-node-0", "u9")];
        let events = [
            event("e1", "BackOff", "t1-node-0", 3),
            event("e2", "Pulled", "t1-node-0", 1),
            event("e3", "BackOff", "other-node-0", 1),
        ];
        let first = relays("east", &events, &pods, &owners, &BTreeMap::new());
        assert_eq!(first.len(), 1, "{first:?}");
        let r = &first[0].record;
        assert_eq!(r.name, "t1.east.backoff");
        assert_eq!(r.message, "member east, pod t1-node-0: Back-off restarting failed container node");
        assert_eq!((r.times, r.involved.uid.as_deref(), r.reason.as_str()), (3, Some("u1"), "BackOff"));
        // Relayed at 3: nothing until the member counts it again.
        let relayed: BTreeMap<String, i32> = [("e1".to_string(), 3)].into();
        assert!(relays("east", &events, &pods, &owners, &relayed).is_empty());
        let again = relays("east", &[event("e1", "BackOff", "t1-node-0", 5)], &pods, &owners, &relayed);
        assert_eq!(again[0].record.times, 2);
    }
}
