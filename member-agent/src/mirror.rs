//! The member's TrainJob pods as the hub shows them, the design Admiralty, Liqo and
//! virtual-kubelet use: the member appears on the hub as one virtual Node (tainted, so nothing
//! else lands on it), and each pod of a TrainJob placed here as a read-only copy bound to it,
//! labels and status copied. So `kubectl get pods -l jobset.sigs.k8s.io/jobset-name=X` and the
//! Kubeflow SDK's steps (and its `Running`, which counts the TrainJob's running pods) work on
//! the hub as on one Trainer cluster. Pure: what to create, update and delete; `report` writes.
//!
//! A copy is owned by its hub TrainJob (deleting the TrainJob deletes the copies) and labelled
//! with this member, which is how the agent finds its own and the hub's admission policy ties
//! each agent to its own copies and Node.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::stowage::{CLUSTER_LABEL, PlacementKey};
use k8s_openapi::api::core::v1::{
    Container, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, Pod,
    PodSpec, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::Value;

/// The taint keeping everything but the copies off a member's virtual Node (virtual-kubelet's).
pub const VIRTUAL_TAINT: &str = "virtual-kubelet.io/provider";
pub const PROVIDER: &str = "stowage";

/// The hub Node that stands for member `cluster`.
pub fn node_name(cluster: &str) -> String {
    format!("stowage-{cluster}")
}

/// Where the hub's API server reads the logs of a member's pods: the log relay's kubelet face
/// (see [`crate::logs`]), written on the virtual Node as a kubelet's address and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletEndpoint {
    /// An IP address or a host name the hub's API server resolves.
    pub address: String,
    pub port: u16,
}

impl KubeletEndpoint {
    /// `HOST:PORT` (an IPv6 address in brackets).
    pub fn parse(s: &str) -> Option<KubeletEndpoint> {
        let (host, port) = s.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
        (!host.is_empty()).then(|| KubeletEndpoint { address: host.to_string(), port })
    }
}

/// Member `cluster` as a hub Node: tainted, labelled with its member, Ready while its agent
/// reports (since `since`, reported `now`), with the member's GPUs as capacity and, when a relay
/// serves its logs, the relay as its kubelet.
pub fn virtual_node(
    cluster: &str,
    gpus: u64,
    since: Timestamp,
    now: Timestamp,
    kubelet: Option<&KubeletEndpoint>,
) -> Node {
    let gpus: BTreeMap<String, Quantity> = [("nvidia.com/gpu".to_string(), Quantity(gpus.to_string()))].into();
    Node {
        metadata: ObjectMeta {
            name: Some(node_name(cluster)),
            labels: Some(
                [
                    (CLUSTER_LABEL.to_string(), cluster.to_string()),
                    ("type".to_string(), "virtual-kubelet".to_string()),
                    ("kubernetes.io/role".to_string(), "agent".to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: VIRTUAL_TAINT.into(),
                value: Some(PROVIDER.into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(gpus.clone()),
            allocatable: Some(gpus),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("AgentReporting".into()),
                message: Some(format!("the Stowage agent of member {cluster} reports")),
                last_heartbeat_time: Some(Time(now)),
                last_transition_time: Some(Time(since)),
            }]),
            addresses: kubelet.map(|k| {
                let kind = if k.address.parse::<std::net::IpAddr>().is_ok() { "InternalIP" } else { "Hostname" };
                vec![NodeAddress { type_: kind.into(), address: k.address.clone() }]
            }),
            daemon_endpoints: kubelet
                .map(|k| NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port: i32::from(k.port) }) }),
            ..Default::default()
        }),
    }
}

/// The hub TrainJob a member pod belongs to: its name and UID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub uid: String,
}

/// The hub copy of a member pod: its name, namespace and labels (plus the member's), the
/// containers' names, images, commands and resources, bound to the member's Node; its status
/// as the member has it.
pub fn copy(cluster: &str, pod: &Pod, owner: &Owner) -> Pod {
    let mut labels = pod.labels().clone();
    labels.insert(CLUSTER_LABEL.into(), cluster.into());
    let spec = pod.spec.as_ref();
    let containers = spec
        .map(|s| {
            s.containers
                .iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    image: c.image.clone(),
                    command: c.command.clone(),
                    args: c.args.clone(),
                    resources: c.resources.clone(),
                    ..Default::default()
                })
                .collect()
        })
        .unwrap_or_default();
    // Never evicted from a Node the node controller may find unreachable: the pod runs on the
    // member, whatever the hub thinks of the Node.
    let tolerations = vec![
        Toleration { key: Some(VIRTUAL_TAINT.into()), operator: Some("Exists".into()), ..Default::default() },
        Toleration {
            key: Some("node.kubernetes.io/unreachable".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        },
        Toleration {
            key: Some("node.kubernetes.io/not-ready".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        },
    ];
    Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: "trainer.kubeflow.org/v1alpha1".into(),
                kind: "TrainJob".into(),
                name: owner.name.clone(),
                uid: owner.uid.clone(),
                controller: Some(false),
                block_owner_deletion: Some(false),
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            node_name: Some(node_name(cluster)),
            tolerations: Some(tolerations),
            restart_policy: spec.and_then(|s| s.restart_policy.clone()),
            ..Default::default()
        }),
        status: pod.status.clone(),
    }
}

/// Whether a hub pod is `cluster`'s copy: labelled with that member, as [`copy`] labels it.
pub fn is_copy_of(pod: &Pod, cluster: &str) -> bool {
    pod.labels().get(CLUSTER_LABEL).is_some_and(|c| c == cluster)
}

/// What to write to the hub's copies.
#[derive(Debug, Default)]
pub struct MirrorPlan {
    /// Copies to create (then given their status).
    pub create: Vec<Pod>,
    /// Copies whose labels or status changed on the member.
    pub update: Vec<Update>,
    /// Copies of pods gone from the member, or of placements no longer here: (namespace, name).
    pub delete: Vec<(String, String)>,
}

impl MirrorPlan {
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }
}

/// A copy to write again: a JSON merge patch of whichever of its labels and status differ from
/// the member pod's, and nothing for the part that does not. Each patch also removes what the
/// member pod no longer has (a label taken off, a status field cleared), which a patch of the
/// wanted values alone would leave on the copy, found different again by every round.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub namespace: String,
    pub name: String,
    /// The merge patch of `metadata.labels`.
    pub labels: Option<Value>,
    /// The merge patch of `status`.
    pub status: Option<Value>,
}

/// Compares the member's TrainJob pods of the placements current here (`owners`, by placement)
/// with the hub's copies. A copy is built only to be written: a round in a burst looks at
/// thousands of pods whose copies are as they should be.
pub fn plan(
    cluster: &str,
    member_pods: &[Arc<Pod>],
    copies: &[Arc<Pod>],
    owners: &BTreeMap<PlacementKey, Owner>,
) -> MirrorPlan {
    let mut on_hub: BTreeMap<(&str, &str), (&Pod, bool)> =
        copies.iter().map(|p| (key(p), (p.as_ref(), false))).collect();
    let mut plan = MirrorPlan::default();
    for pod in member_pods {
        let Some(owner) = PlacementKey::of_labels(pod.labels()).and_then(|k| owners.get(&k)) else { continue };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match on_hub.get_mut(&key(pod)) {
            None => plan.create.push(copy(cluster, pod, owner)),
            Some((seen, wanted)) => {
                *wanted = true;
                if let Some(update) = update(cluster, seen, pod) {
                    plan.update.push(update);
                }
            }
        }
    }
    plan.delete = on_hub
        .into_iter()
        .filter(|(_, (_, wanted))| !wanted)
        .map(|((ns, name), _)| (ns.to_string(), name.to_string()))
        .collect();
    plan
}

/// What to write to copy `seen` of member pod `pod`: `None` when it is up to date. Compared
/// as typed values first, so an unchanged copy costs no JSON.
fn update(cluster: &str, seen: &Pod, pod: &Pod) -> Option<Update> {
    let labels = (!copied_labels(seen, pod, cluster)).then(|| {
        let mut wanted = pod.labels().clone();
        wanted.insert(CLUSTER_LABEL.into(), cluster.into());
        merge_patch(&json(seen.labels()), &json(&wanted))
    });
    let status = (seen.status != pod.status).then(|| merge_patch(&json(&seen.status), &json(&pod.status)));
    let (labels, status) = (labels.flatten(), status.flatten());
    (labels.is_some() || status.is_some()).then(|| Update {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.name_any(),
        labels,
        status,
    })
}

/// A typed value as JSON; none (or one that does not serialise, which k8s-openapi's never fail
/// to) as an empty object, so a patch to it adds every field.
fn json<T: serde::Serialize>(value: &T) -> Value {
    match serde_json::to_value(value) {
        Ok(Value::Null) | Err(_) => Value::Object(Default::default()),
        Ok(v) => v,
    }
}

/// The JSON merge patch (RFC 7386) that turns `from` into `to`, `None` when they are equal:
/// changed and new keys with their values (objects patched key by key), removed keys as null.
/// `to` holds no nulls (k8s-openapi leaves unset fields out), so none is misread as a removal.
pub fn merge_patch(from: &Value, to: &Value) -> Option<Value> {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in to {
                let changed = match from.get(k) {
                    Some(old) => merge_patch(old, v),
                    None => Some(v.clone()),
                };
                if let Some(p) = changed {
                    patch.insert(k.clone(), p);
                }
            }
            for k in from.keys().filter(|k| !to.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ => (from != to).then(|| to.clone()),
    }
}

/// A pod's namespace and name.
fn key(p: &Pod) -> (&str, &str) {
    (p.metadata.namespace.as_deref().unwrap_or_default(), p.metadata.name.as_deref().unwrap_or_default())
}

/// Whether a copy has the labels [`copy`] gives it: the pod's, and the member's.
fn copied_labels(seen: &Pod, pod: &Pod, cluster: &str) -> bool {
    let (seen, labels) = (seen.labels(), pod.labels());
    let added = usize::from(!labels.contains_key(CLUSTER_LABEL));
    seen.get(CLUSTER_LABEL).is_some_and(|c| c == cluster)
        && seen.len() == labels.len() + added
        && labels.iter().all(|(k, v)| k == CLUSTER_LABEL || seen.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn member_pod(name: &str, uid: &str, epoch: i64, phase: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml", "labels": {
                    "stowage.dev/trainjob-uid": uid, "stowage.dev/placement-epoch": epoch.to_string(),
                    "jobset.sigs.k8s.io/jobset-name": "t1", "jobset.sigs.k8s.io/replicatedjob-name": "node",
                    "batch.kubernetes.io/job-completion-index": "0"}},
                "spec": {"nodeName": "gpu-7", "restartPolicy": "OnFailure", "containers": [{"name": "node", "image": "pytorch",
                    "env": [{"name": "SECRET", "value": "x"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                "status": {"phase": phase}
            }))
            .expect("pod"),
        )
    }

    fn owners() -> BTreeMap<PlacementKey, Owner> {
        [(PlacementKey { uid: "u1".into(), epoch: 2 }, Owner { name: "t1".into(), uid: "u1".into() })].into()
    }

    #[test]
    fn the_current_placements_pods_are_copied_bound_to_the_members_node_and_the_rest_deleted() {
        let pods = [member_pod("t1-node-0-0-a", "u1", 2, "Running"), member_pod("t1-node-0-0-old", "u1", 1, "Running")];
        let owner = Owner { name: "t1".into(), uid: "u1".into() };
        let stale = Arc::new(copy("east", &member_pod("gone", "u1", 2, "Running"), &owner));
        let plan = plan("east", &pods, &[stale], &owners());
        assert_eq!(plan.create.len(), 1, "the old epoch's pod is not copied");
        let c = &plan.create[0];
        assert_eq!(c.name_any(), "t1-node-0-0-a");
        let spec = c.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("stowage-east"));
        assert!(spec.containers[0].env.is_none(), "no environment (secrets) leaves the member");
        assert_eq!(c.labels()["jobset.sigs.k8s.io/jobset-name"], "t1");
        assert_eq!(c.labels()[CLUSTER_LABEL], "east");
        assert!(is_copy_of(c, "east") && !is_copy_of(c, "west"));
        // A pod someone made on the hub under the copy's name is not the copy.
        assert!(!is_copy_of(&member_pod("t1-node-0-0-a", "u1", 2, "Running"), "east"));
        assert_eq!(c.owner_references()[0].uid, "u1");
        assert_eq!(c.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Running"));
        assert_eq!(plan.delete, [("ml".to_string(), "gone".to_string())]);
        // Copied already: only a change on the member is written again.
        let copied = Arc::new(c.clone());
        assert!(super::plan("east", &pods[..1], std::slice::from_ref(&copied), &owners()).is_empty());
        // A label the copy lacks or has over the pod's, or without the member's: written again.
        let mut relabelled = c.clone();
        relabelled.labels_mut().insert("extra".into(), "x".into());
        let mut unlabelled = c.clone();
        unlabelled.labels_mut().remove(CLUSTER_LABEL);
        let mut elsewhere = c.clone();
        elsewhere.labels_mut().insert(CLUSTER_LABEL.into(), "west".into());
        for wrong in [relabelled, unlabelled, elsewhere] {
            let labels = wrong.labels().clone();
            let plan = super::plan("east", &pods[..1], &[Arc::new(wrong)], &owners());
            assert_eq!((plan.update.len(), plan.create.len(), plan.delete.len()), (1, 0, 0), "{labels:?}");
            let u = &plan.update[0];
            assert_eq!((u.namespace.as_str(), u.name.as_str()), ("ml", "t1-node-0-0-a"));
            assert_eq!(u.status, None, "the status is as the member's: not written");
            // The patch, applied as the API server applies it, gives the copy the labels it needs.
            assert_eq!(apply(json(&labels), u.labels.as_ref().expect("a label patch")), json(c.labels()), "{labels:?}");
        }
        // The member pod finished and its reason was cleared: only the status is written, and its
        // patch removes the reason.
        let mut waiting = c.clone();
        waiting.status.as_mut().expect("status").reason = Some("ContainerCreating".into());
        let done = member_pod("t1-node-0-0-a", "u1", 2, "Succeeded");
        let again = super::plan("east", std::slice::from_ref(&done), &[Arc::new(waiting.clone())], &owners());
        assert_eq!(again.update.len(), 1);
        let u = &again.update[0];
        assert_eq!(u.labels, None, "the labels are as the member's: not written");
        let status = u.status.as_ref().expect("a status patch");
        assert_eq!(status, &json!({"phase": "Succeeded", "reason": null}));
        assert_eq!(apply(json(&waiting.status), status), json(&done.status));
    }

    /// RFC 7386's merge, as the API server applies a merge patch.
    fn apply(target: Value, patch: &Value) -> Value {
        let Value::Object(patch) = patch else { return patch.clone() };
        let mut target = match target {
            Value::Object(t) => t,
            _ => Default::default(),
        };
        for (k, v) in patch {
            let old = target.remove(k).unwrap_or(Value::Null);
            if !v.is_null() {
                target.insert(k.clone(), apply(old, v));
            }
        }
        Value::Object(target)
    }

    #[test]
    fn a_merge_patch_turns_the_old_value_into_the_new_and_is_none_when_they_are_equal() {
        let cases = [
            (json!({}), json!({})),
            (json!({"a": 1}), json!({"a": 1})),
            (json!({"a": 1}), json!({"a": 2})),
            (json!({"a": 1, "b": 2}), json!({"b": 2})),
            (json!({}), json!({"a": {"b": [1, 2]}})),
            (json!({"a": {"b": 1, "c": {"d": "x"}}}), json!({"a": {"b": 1, "c": {"e": "y"}}})),
            (json!({"a": [{"x": 1}, {"y": 2}]}), json!({"a": [{"x": 1}]})),
            (json!({"a": "text"}), json!({"a": {"now": "an object"}})),
            (json!({"a": {"was": "an object"}}), json!({"a": "text"})),
            (
                json!({"conditions": [{"type": "Ready"}], "phase": "Pending", "message": "m", "reason": "r"}),
                json!({"conditions": [{"type": "Ready", "status": "True"}], "phase": "Running"}),
            ),
        ];
        for (from, to) in cases {
            match merge_patch(&from, &to) {
                None => assert_eq!(from, to, "no patch, yet they differ"),
                Some(patch) => {
                    assert_ne!(from, to, "a patch for equal values: {patch}");
                    assert_eq!(apply(from.clone(), &patch), to, "{from} + {patch}");
                    // Only what differs: no key whose value was already right.
                    if let (Value::Object(p), Value::Object(f)) = (&patch, &from) {
                        assert!(p.iter().all(|(k, v)| f.get(k) != Some(v)), "{patch} repeats {from}");
                    }
                }
            }
        }
    }
}
