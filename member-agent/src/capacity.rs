//! What the agent reports of its cluster's capacity: per narrowest topology domain above hosts
//! and GPU flavor, the node count, GPUs per node, allocatable and free GPUs and a histogram of
//! free GPUs per node — enough for the hub's fit tests to be exact without listing every node,
//! so the MemberCluster status stays well under the API's object size limit. A member of more
//! racks than that leaves room for is summarised by fewer levels ([`MAX_SUMMARY_BYTES`]).

use std::borrow::Borrow;
use std::collections::BTreeMap;

use api::stowage::{
    BoundNode, BoundPlacement, DomainCapacity, NodeClassReport, NodeTaint, PlacementKey, PodSetCount, TopologyLevel,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;

use api::quantity::Milli;
use input_limits::MAX_GPUS_PER_NODE;

pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// JobSet's label naming a pod's replicated job: the pod set it belongs to.
pub use api::jobset::REPLICATED_JOB_LABEL;
pub use api::stowage::GPU_PRODUCT_LABEL;

fn gpus(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> u32 {
    q.and_then(|q| Milli::parse(&q.0).ok()).map_or(0, |m| m.ceil_units().clamp(0, i128::from(u32::MAX)) as u32)
}

/// GPUs a pod holds on its node while it is bound and not finished.
fn pod_gpus(p: &Pod) -> u32 {
    let spec = p.spec.as_ref();
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    if spec.and_then(|s| s.node_name.as_ref()).is_none() || matches!(phase, Some("Succeeded" | "Failed")) {
        return 0;
    }
    spec.map(|s| {
        s.containers
            .iter()
            .map(|c| {
                gpus(
                    c.resources
                        .as_ref()
                        .and_then(|r| r.requests.as_ref().or(r.limits.as_ref()))
                        .and_then(|m| m.get(GPU_RESOURCE)),
                )
            })
            .sum()
    })
    .unwrap_or(0)
}

/// Node labels every agent reports when a node has them: what pods commonly select on.
pub const WELL_KNOWN_LABELS: [&str; 5] = [
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// Taints reported per node at most: more is a misconfigured node, and the report stays bounded.
const MAX_TAINTS: usize = 16;

/// A node's labels (of `keys`) and its `NoSchedule`/`NoExecute` taints.
fn class_of(n: &Node, keys: &[String]) -> NodeClassReport {
    let labels = n.metadata.labels.as_ref();
    let node_labels =
        keys.iter().filter_map(|k| labels.and_then(|l| l.get(k)).map(|v| (k.clone(), v.clone()))).collect();
    let mut taints: Vec<NodeTaint> = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .map(|t| NodeTaint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect: t.effect.clone() })
        .collect();
    taints.sort();
    taints.dedup();
    taints.truncate(MAX_TAINTS);
    NodeClassReport { node_labels, taints }
}

/// The GPUs a node offers pods.
fn allocatable_gpus(n: &Node) -> u32 {
    gpus(n.status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| a.get(GPU_RESOURCE)))
}

/// Whether `level` names hosts, spelled as the hub reads it (`Host` too).
fn is_host(level: &TopologyLevel) -> bool {
    level.level.trim().eq_ignore_ascii_case("host")
}

/// A GPU node as the summary sees it.
struct GpuNode<'a> {
    name: &'a str,
    /// Label values of `levels` above hosts, widest first.
    path: Vec<String>,
    flavor: String,
    class: NodeClassReport,
    allocatable: u32,
    free: u32,
    cpu_milli: u64,
    memory_mib: u64,
}

/// The GPU nodes labelled with every level above hosts, with what bound pods leave free.
fn gpu_nodes<'a, N: Borrow<Node>>(
    levels: &[TopologyLevel],
    label_keys: &[String],
    nodes: &'a [N],
    pods: &[impl Borrow<Pod>],
) -> Vec<GpuNode<'a>> {
    let mut used: BTreeMap<&str, u32> = BTreeMap::new();
    for p in pods.iter().map(Borrow::borrow) {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            *used.entry(n).or_default() += pod_gpus(p);
        }
    }
    let above_hosts: Vec<&TopologyLevel> = levels.iter().filter(|l| !is_host(l)).collect();
    nodes
        .iter()
        .map(Borrow::borrow)
        .filter_map(|n: &Node| {
            let labels = n.metadata.labels.as_ref()?;
            let flavor = labels.get(GPU_PRODUCT_LABEL)?.clone();
            let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let allocatable = allocatable_gpus(n);
            // More GPUs than any node has is a broken device plugin: the hub would refuse the
            // whole report for it ([`oversized`] names such nodes for the agent's warning).
            if allocatable == 0 || allocatable > MAX_GPUS_PER_NODE {
                return None;
            }
            let path = above_hosts.iter().map(|l| labels.get(&l.node_label).cloned()).collect::<Option<Vec<_>>>()?;
            let name = n.metadata.name.as_deref().unwrap_or("");
            let amount = |k: &str| {
                alloc.and_then(|a| a.get(k)).and_then(|q| Milli::parse(&q.0).ok()).map_or(0, |m| m.0.max(0) as u64)
            };
            Some(GpuNode {
                name,
                path,
                flavor,
                class: class_of(n, label_keys),
                allocatable,
                free: allocatable.saturating_sub(used.get(name).copied().unwrap_or(0)),
                cpu_milli: amount("cpu"),
                memory_mib: amount("memory") / 1000 / (1024 * 1024),
            })
        })
        .collect()
}

/// Summarises GPU nodes by the values of `levels` (widest first, host excluded), flavor, GPUs
/// per node and class (the labels of `label_keys` and taints). Nodes without GPUs or without
/// every level label are left out.
pub fn summarize(
    levels: &[TopologyLevel],
    label_keys: &[String],
    nodes: &[impl Borrow<Node>],
    pods: &[impl Borrow<Pod>],
) -> Vec<DomainCapacity> {
    summary(&gpu_nodes(levels, label_keys, nodes, pods), usize::MAX)
}

/// The summary by the first `depth` levels above hosts (all of them: `usize::MAX`).
fn summary(gpu_nodes: &[GpuNode<'_>], depth: usize) -> Vec<DomainCapacity> {
    /// Free GPUs of each node, and the smallest node's CPU and memory.
    type Group = (Vec<u32>, u64, u64);
    let mut groups: BTreeMap<(&[String], &str, u32, &NodeClassReport), Group> = BTreeMap::new();
    for n in gpu_nodes {
        let path = &n.path[..depth.min(n.path.len())];
        let e = groups.entry((path, &n.flavor, n.allocatable, &n.class)).or_insert((Vec::new(), u64::MAX, u64::MAX));
        e.0.push(n.free);
        e.1 = e.1.min(n.cpu_milli);
        e.2 = e.2.min(n.memory_mib);
    }
    groups
        .into_iter()
        .map(|((path, flavor, per_node, class), (frees, cpu_milli, memory_mib))| {
            let mut histogram = vec![0u32; per_node as usize + 1];
            for f in &frees {
                histogram[(*f).min(per_node) as usize] += 1;
            }
            DomainCapacity {
                path: path.to_vec(),
                flavor: flavor.to_string(),
                class: class.clone(),
                nodes: frees.len() as u32,
                gpus_per_node: per_node,
                allocatable_gpus: u64::from(per_node) * frees.len() as u64,
                free_gpus: frees.iter().map(|&f| u64::from(f)).sum(),
                free_histogram: histogram,
                cpu_milli_per_node: Some(cpu_milli),
                memory_mib_per_node: Some(memory_mib),
            }
        })
        .collect()
}

/// For each placement with pods bound (labelled with its TrainJob UID and epoch), the GPU nodes
/// its GPU pods are on, each with its free GPUs and the pods of each pod set there (none for a
/// placement holding no GPUs).
pub fn bound(
    levels: &[TopologyLevel],
    label_keys: &[String],
    nodes: &[impl Borrow<Node>],
    pods: &[impl Borrow<Pod>],
) -> Vec<BoundPlacement> {
    placements(&gpu_nodes(levels, label_keys, nodes, pods), pods, usize::MAX)
}

/// Every placement with a pod bound to a node, in key order: what `counted` lists. One holding
/// no GPUs (CPU-only training) is there too, with no nodes: the hub then knows it runs,
/// holding no GPU room, and projects its end. Nodes' paths are by the first `depth` levels, as
/// the summary's.
fn placements(gpu_nodes: &[GpuNode<'_>], pods: &[impl Borrow<Pod>], depth: usize) -> Vec<BoundPlacement> {
    let by_name: BTreeMap<&str, &GpuNode<'_>> = gpu_nodes.iter().map(|n| (n.name, n)).collect();
    // placement → node → pod set → pods. In `PlacementKey` order, which the hub reads a list
    // cut for its size by (`countedLeftOut`).
    let mut placed: BTreeMap<PlacementKey, BTreeMap<&str, BTreeMap<String, u32>>> = BTreeMap::new();
    for p in pods.iter().map(Borrow::borrow) {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else { continue };
        let Some(key) = p.metadata.labels.as_ref().and_then(PlacementKey::of_labels) else { continue };
        let on = placed.entry(key).or_default();
        let pod_set = p.metadata.labels.as_ref().and_then(|l| l.get(REPLICATED_JOB_LABEL));
        if let Some(pod_set) = pod_set.filter(|_| pod_gpus(p) > 0) {
            *on.entry(node).or_default().entry(pod_set.clone()).or_default() += 1;
        }
    }
    placed
        .into_iter()
        .map(|(placement, on)| BoundPlacement {
            placement: placement.to_string(),
            nodes: on
                .into_iter()
                .filter_map(|(node, sets)| {
                    let n = by_name.get(node)?;
                    Some(BoundNode {
                        node: node.to_string(),
                        path: n.path[..depth.min(n.path.len())].to_vec(),
                        flavor: n.flavor.clone(),
                        gpus_per_node: n.allocatable,
                        class: n.class.clone(),
                        free_gpus: n.free,
                        pods: sets.into_iter().map(|(pod_set, pods)| PodSetCount { pod_set, pods }).collect(),
                    })
                })
                .collect(),
        })
        .collect()
}

/// The most a report's summary (`domains`) may take, as JSON: a member of more groups of like
/// nodes than this holds (a group per rack, flavor, GPUs per node and class; about 3,000 with
/// the labels agents report, 417 bytes a group of GKE A3 nodes, and 6,000 with none) is
/// summarised by fewer levels ([`Report::levels_dropped`]), so the status stays under what the
/// hub's API server stores. The lists get the rest (about 4,000 placements at least): a list
/// cut for size is read safely by the hub, and locality lost is not, so the summary comes first.
pub const MAX_SUMMARY_BYTES: usize = 1280 * 1024;

/// The most a report's `counted` list may take, as JSON. The MemberCluster status must stay
/// under what the hub's API server stores (`input_limits::MAX_OBJECT_BYTES`, about 1.5 MiB of
/// JSON) with the summary and `bound` beside it. About 12,000 placements fit (UIDs as
/// Kubernetes makes them).
pub const MAX_COUNTED_BYTES: usize = 512 * 1024;

/// The most a report's `bound` list may take, as JSON: `bound` is the part that grows with what
/// runs and where. About 3,000 single-node placements fit (2,952 in the test below, with short
/// node names; longer names and more levels fit fewer).
pub const MAX_BOUND_BYTES: usize = 512 * 1024;

/// What the MemberCluster takes besides the capacity report: metadata and managed fields,
/// heartbeat, versions, topology levels, conditions.
const REST_OF_STATUS_BYTES: usize = 64 * 1024;

/// A value's size as JSON.
fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

/// How many of `items`, whole and in order, fit in `budget` bytes of a JSON array of them,
/// and the bytes those take.
fn fitting<T: Serialize>(items: &[T], budget: usize) -> (usize, usize) {
    let mut bytes = 2;
    for (i, item) in items.iter().enumerate() {
        // Its JSON and the comma before it.
        let size = json_len(item).saturating_add(1);
        if bytes + size > budget {
            return (i, bytes);
        }
        bytes += size;
    }
    (items.len(), bytes)
}

/// How many oversized nodes a report names.
const MAX_NAMED: usize = 10;

/// The names of nodes claiming more GPUs than `MAX_GPUS_PER_NODE`, the first [`MAX_NAMED`].
fn oversized(nodes: &[impl Borrow<Node>]) -> Vec<String> {
    nodes
        .iter()
        .map(Borrow::borrow)
        .filter(|n: &&Node| allocatable_gpus(n) > MAX_GPUS_PER_NODE)
        .take(MAX_NAMED)
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// The capacity part of the MemberCluster status, from one look at the Node and Pod caches,
/// written in one patch. `bound` goes with `domains` every time: the hub matches each bound
/// node to a host of the summary by its free GPUs, and a `bound` list older than the summary
/// (a node's count moved since) would leave that node's placements out: no end projected for
/// them, and none evictable, until the next report.
///
/// Both lists are cut for size the same way: the first placements in key order, whole, so a
/// member this busy reports the same ones every time, and `bound` never lists one `counted`
/// does not. Each has its budget, and together they take no more than the object limit leaves
/// after the summary. The summary counts every placement all the same.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Report {
    /// The levels `domains` and `bound` are by: the agent's, without the narrowest
    /// `levels_dropped` above hosts. Written with the summary every time, so the hub never
    /// reads paths by other levels than theirs.
    #[serde(rename = "topologyLevels")]
    pub levels: Vec<TopologyLevel>,
    /// Levels above hosts the summary leaves out, narrowest first, to fit
    /// [`MAX_SUMMARY_BYTES`]: the hub then places this member's gangs by wider domains (a
    /// block for a gang that prefers a rack), and the agent pins them to those.
    #[serde(skip)]
    pub levels_dropped: usize,
    /// Groups of nodes left out of a summary no level dropped would fit in
    /// [`MAX_SUMMARY_BYTES`] (thousands of node classes: a label every node has a value of its
    /// own for, in the agent's `--node-labels`); every level is kept then. The hub does not
    /// see their nodes: it places nothing there, and counts nothing running there.
    #[serde(skip)]
    pub domains_left_out: usize,
    /// Nodes left out for more GPUs than any node has (`MAX_GPUS_PER_NODE`), by name, the
    /// first [`MAX_NAMED`].
    #[serde(skip)]
    pub oversized: Vec<String>,
    pub domains: Vec<DomainCapacity>,
    /// `<uid>/<epoch>` of the placements with a pod bound to a node, in key order: the summary
    /// counts them, so the hub need not assume their GPUs taken any more.
    pub counted: Vec<String>,
    /// Placements the summary counts past the last in `counted`, left out for its size
    /// ([`MAX_COUNTED_BYTES`]). Written as 0 too: a merge patch keeps what it does not write.
    #[serde(rename = "countedLeftOut")]
    pub counted_left_out: usize,
    pub bound: Vec<BoundPlacement>,
    /// Counted placements left out of `bound` for its size ([`MAX_BOUND_BYTES`]) or because
    /// `counted` left them out. The hub reads them as placements whose nodes it cannot match:
    /// not evictable, and no end projected for them.
    #[serde(skip)]
    pub bound_left_out: usize,
}

pub fn report(
    levels: &[TopologyLevel],
    label_keys: &[String],
    nodes: &[impl Borrow<Node>],
    pods: &[impl Borrow<Pod>],
) -> Report {
    let gpu_nodes = gpu_nodes(levels, label_keys, nodes, pods);
    let above_hosts = levels.iter().filter(|l| !is_host(l)).count();
    // The most levels whose summary fits; a member within the budget (every real one we know
    // of) summarises once, by all of them. When none fits, the length is in its classes, not
    // its domains: all the levels are kept, and the summary is cut.
    let (mut depth, mut domains) = (above_hosts, summary(&gpu_nodes, above_hosts));
    if json_len(&domains) > MAX_SUMMARY_BYTES
        && let Some(fits) = (0..above_hosts)
            .rev()
            .map(|d| (d, summary(&gpu_nodes, d)))
            .find(|(_, domains)| json_len(domains) <= MAX_SUMMARY_BYTES)
    {
        (depth, domains) = fits;
    }
    let (kept, _) = fitting(&domains, MAX_SUMMARY_BYTES);
    let domains_left_out = domains.len() - kept;
    domains.truncate(kept);
    // Levels are widest first, hosts last: the first `depth` above hosts are kept.
    let mut above = 0;
    let levels: Vec<TopologyLevel> = levels
        .iter()
        .filter(|l| {
            let host = is_host(l);
            above += usize::from(!host);
            host || above <= depth
        })
        .cloned()
        .collect();
    let mut bound = placements(&gpu_nodes, pods, depth);
    let all = bound.len();
    let mut counted: Vec<String> = bound.iter().map(|p| p.placement.clone()).collect();
    let mut report = Report {
        levels,
        levels_dropped: above_hosts - depth,
        domains_left_out,
        oversized: oversized(nodes),
        domains,
        counted_left_out: all,
        bound_left_out: all,
        counted: Vec::new(),
        bound: Vec::new(),
    };
    // What the two lists may take together: what the object limit leaves after the rest of the
    // report (the summary above all: a member of many domains has a long one), so the status
    // stays under what etcd takes whatever it is.
    let room = input_limits::MAX_OBJECT_BYTES.saturating_sub(REST_OF_STATUS_BYTES).saturating_sub(json_len(&report));
    let (listed, taken) = fitting(&counted, MAX_COUNTED_BYTES.min(room));
    counted.truncate(listed);
    bound.truncate(listed);
    let (listed, _) = fitting(&bound, MAX_BOUND_BYTES.min(room.saturating_sub(taken)));
    bound.truncate(listed);
    (report.counted_left_out, report.bound_left_out) = (all - counted.len(), all - bound.len());
    (report.counted, report.bound) = (counted, bound);
    report
}

/// What the agent's Node cache keeps: the labels (topology, GPU product, class), taints and
/// allocatable, all the summary reads. Nodes carry images, conditions and managed fields that
/// dwarf these.
pub fn strip_node(n: &mut Node) {
    let meta = &mut n.metadata;
    (meta.annotations, meta.managed_fields, meta.owner_references) = (None, None, None);
    n.spec = n.spec.take().map(|s| k8s_openapi::api::core::v1::NodeSpec { taints: s.taints, ..Default::default() });
    if let Some(s) = n.status.as_mut() {
        *s = k8s_openapi::api::core::v1::NodeStatus { allocatable: s.allocatable.take(), ..Default::default() };
    }
}

/// What the agent's Pod cache keeps: labels, node, phase, each container's resources (what it
/// holds) and the PodScheduled condition (why a gang waits). A member's pods are many; the rest
/// of each (env, volumes, container statuses, managed fields) is never read.
pub fn strip_pod(p: &mut Pod) {
    let meta = &mut p.metadata;
    (meta.annotations, meta.managed_fields, meta.owner_references) = (None, None, None);
    if let Some(spec) = p.spec.as_mut() {
        let containers = std::mem::take(&mut spec.containers)
            .into_iter()
            .map(|c| k8s_openapi::api::core::v1::Container {
                name: c.name,
                resources: c.resources,
                ..Default::default()
            })
            .collect();
        *spec =
            k8s_openapi::api::core::v1::PodSpec { containers, node_name: spec.node_name.take(), ..Default::default() };
    }
    if let Some(s) = p.status.as_mut() {
        let scheduled =
            s.conditions.take().map(|cs| cs.into_iter().filter(|c| c.type_ == "PodScheduled").collect::<Vec<_>>());
        // Container statuses are kept for the hub's copies: kubectl's READY and STATUS
        // (`Completed`, `Error`, `CrashLoopBackOff`) read them, as does the pod's reason.
        *s = k8s_openapi::api::core::v1::PodStatus {
            phase: s.phase.take(),
            reason: s.reason.take(),
            start_time: s.start_time.take(),
            conditions: scheduled.filter(|cs| !cs.is_empty()),
            container_statuses: s.container_statuses.take(),
            ..Default::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::stowage::{EPOCH_LABEL, TRAINJOB_UID_LABEL};

    fn node(name: &str, rack: &str, gpus: u32) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"rack": rack, GPU_PRODUCT_LABEL: "h100"}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string(), "cpu": "96", "memory": "512Gi"}},
        }))
        .expect("node")
    }

    fn pod(node: &str, uid: &str, pod_set: &str, gpus: u32) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{uid}-{pod_set}-{node}"), "labels": {
                TRAINJOB_UID_LABEL: uid, EPOCH_LABEL: "2", REPLICATED_JOB_LABEL: pod_set}},
            "spec": {"nodeName": node, "containers": [{"name": "node", "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": "Running"},
        }))
        .expect("pod")
    }

    #[test]
    fn each_placement_reports_the_nodes_its_pods_hold_with_what_is_free_there() {
        let levels = [
            TopologyLevel { level: "rack".into(), node_label: "rack".into() },
            TopologyLevel { level: "host".into(), node_label: "kubernetes.io/hostname".into() },
        ];
        let nodes = [node("n0", "r0", 8), node("n1", "r0", 8), node("n2", "r1", 8)];
        let pods = [
            pod("n0", "a", "node", 4),
            pod("n0", "a", "node", 4),
            pod("n1", "b", "node", 4),
            pod("n2", "b", "launcher", 1),
        ];
        let bound = bound(&levels, &[], &nodes, &pods);
        let a = &bound[0];
        assert_eq!((a.placement.as_str(), a.nodes.len()), ("a/2", 1));
        assert_eq!(
            (a.nodes[0].free_gpus, a.nodes[0].pods[0].pods, a.nodes[0].path.clone()),
            (0, 2, vec!["r0".to_string()])
        );
        let b = &bound[1];
        let on: Vec<(&str, u32, &str, u32)> = b
            .nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(move |c| (n.node.as_str(), n.free_gpus, c.pod_set.as_str(), c.pods)))
            .collect();
        assert_eq!(on, [("n1", 4, "node", 1), ("n2", 7, "launcher", 1)]);
        // The summary agrees on what is free.
        let free: u64 = summarize(&levels, &[], &nodes, &pods).iter().map(|d| d.free_gpus).sum();
        assert_eq!(free, 4 + 7);
    }

    /// A UID as Kubernetes makes them (36 characters).
    fn uid(i: usize) -> String {
        format!("{i:08x}-0000-4000-8000-{i:012x}")
    }

    /// `n` 8-GPU nodes in racks of 32, each running one single-node placement of its own.
    fn busy_member(n: usize) -> (Vec<Node>, Vec<Pod>) {
        let nodes = (0..n).map(|i| node(&format!("n{i}"), &format!("r{}", i / 32), 8)).collect();
        let pods = (0..n).map(|i| pod(&format!("n{i}"), &uid(i), "node", 8)).collect();
        (nodes, pods)
    }

    #[test]
    fn a_busy_members_bound_list_keeps_whole_placements_in_key_order_within_its_budget() {
        let levels = [TopologyLevel { level: "rack".into(), node_label: "rack".into() }];
        // 5,000 nodes, with the pods of a two-pod-set gang on two of them.
        let (nodes, mut pods) = busy_member(5000);
        pods[1] = pod("n1", &uid(0), "launcher", 8);
        let r = report(&levels, &[], &nodes, &pods);
        assert_eq!(r.counted.len(), 4999);
        assert_eq!(r.bound.len() + r.bound_left_out, 4999);
        let json = serde_json::to_vec(&r.bound).expect("json");
        assert!(json.len() <= MAX_BOUND_BYTES, "{} bytes", json.len());
        assert!(r.bound.len() > 2500, "the budget holds some thousands of placements: {}", r.bound.len());
        let kept: Vec<&str> = r.bound.iter().map(|b| b.placement.as_str()).collect();
        assert_eq!(kept, r.counted[..kept.len()], "the first in key order, so the same ones every time");
        let first: Vec<(&str, &str)> =
            r.bound[0].nodes.iter().map(|n| (n.node.as_str(), n.pods[0].pod_set.as_str())).collect();
        assert_eq!(first, [("n0", "node"), ("n1", "launcher")], "a placement is kept whole");
        // A member within the budget reports every placement.
        let r = report(&levels, &[], &nodes[..100], &pods[..100]);
        assert_eq!((r.bound.len(), r.bound_left_out), (99, 0));
    }

    #[test]
    fn a_member_running_more_placements_than_counted_holds_lists_the_first_and_says_how_many_it_left_out() {
        let levels = [TopologyLevel { level: "rack".into(), node_label: "rack".into() }];
        // 14,000 nodes, the first two running epochs 10 and 9 of one TrainJob (a new epoch
        // starting while the old one's pods go): ordered by epoch as a number, not as text.
        let (nodes, mut pods) = busy_member(14_000);
        let mut at_epoch = |i: usize, epoch: &str| {
            pods[i].metadata.labels.as_mut().expect("labels").insert(EPOCH_LABEL.into(), epoch.into());
            pods[i].metadata.labels.as_mut().expect("labels").insert(TRAINJOB_UID_LABEL.into(), uid(0));
        };
        at_epoch(0, "10");
        at_epoch(1, "9");
        let r = report(&levels, &[], &nodes, &pods);
        assert_eq!(r.counted.len() + r.counted_left_out, 14_000);
        assert!(r.counted_left_out > 0 && r.counted.len() > 11_000, "{} listed", r.counted.len());
        let keys: Vec<PlacementKey> = r.counted.iter().map(|k| k.parse().expect("key")).collect();
        assert!(keys.is_sorted(), "in key order");
        assert_eq!(r.counted[..2], [format!("{}/9", uid(0)), format!("{}/10", uid(0))]);
        assert_eq!(r.counted.last(), Some(&format!("{}/2", uid(r.counted.len() - 1))), "the first, none skipped");
        assert!(r.bound.iter().map(|b| &b.placement).eq(r.counted[..r.bound.len()].iter()), "bound within counted");
        assert_eq!(r.bound_left_out, 14_000 - r.bound.len());
        // Everything the report writes stays under what the hub's API server stores.
        let status = serde_json::to_vec(&r).expect("json");
        assert!(status.len() < input_limits::MAX_OBJECT_BYTES - 256 * 1024, "{} bytes", status.len());
        assert_eq!(serde_json::to_value(&r).expect("json")["countedLeftOut"], r.counted_left_out);
    }

    /// A member of more racks than a summary by racks has room for is summarised by blocks:
    /// the levels it reports say so, every node and free GPU is still counted, and `bound`'s
    /// paths are by the same levels, so the hub matches them.
    #[test]
    fn a_member_of_more_racks_than_the_summary_holds_is_summarised_by_the_next_level_up() {
        let levels = [
            TopologyLevel { level: "block".into(), node_label: "block".into() },
            TopologyLevel { level: "rack".into(), node_label: "rack".into() },
            TopologyLevel { level: "host".into(), node_label: "kubernetes.io/hostname".into() },
        ];
        // 12,000 racks of one node each, 32 racks to a block; every other node busy.
        let (mut nodes, mut pods) = busy_member(12_000);
        for (i, n) in nodes.iter_mut().enumerate() {
            let labels = n.metadata.labels.as_mut().expect("labels");
            labels.insert("rack".into(), format!("rack-{i}"));
            labels.insert("block".into(), format!("block-{}", i / 32));
        }
        pods.retain(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| n.ends_with(['0', '2', '4', '6', '8']))
        });
        let by_racks = summarize(&levels, &[], &nodes, &pods);
        assert!(json_len(&by_racks) > MAX_SUMMARY_BYTES, "by racks it does not fit");
        let r = report(&levels, &[], &nodes, &pods);
        assert_eq!(r.levels_dropped, 1);
        let kept: Vec<&str> = r.levels.iter().map(|l| l.level.as_str()).collect();
        assert_eq!(kept, ["block", "host"], "the narrowest level above hosts goes first");
        assert_eq!(r.domains_left_out, 0);
        assert_eq!(r.domains.len(), 12_000 / 32);
        assert!(r.domains.iter().all(|d| d.path.len() == 1));
        let total = |ds: &[DomainCapacity]| -> (u64, u64) {
            ds.iter().fold((0, 0), |(n, f), d| (n + u64::from(d.nodes), f + d.free_gpus))
        };
        assert_eq!(total(&r.domains), total(&by_racks), "every node and free GPU counted, by blocks");
        assert_eq!(total(&r.domains), (12_000, 6_000 * 8));
        assert!(r.bound.iter().flat_map(|b| &b.nodes).all(|n| n.path.len() == 1 && n.path[0].starts_with("block-")));
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["topologyLevels"][0]["level"], "block");
        assert!(serde_json::to_vec(&r).expect("json").len() <= input_limits::MAX_OBJECT_BYTES - REST_OF_STATUS_BYTES);
        // Within the budget, nothing is dropped.
        let r = report(&levels, &[], &nodes[..3000], &pods[..1500]);
        assert_eq!((r.levels_dropped, r.levels.len(), r.domains_left_out), (0, 3, 0));
    }

    /// A member whose nodes are each a class of their own (a label every node has its own
    /// value of, reported) has a summary no level dropped makes fit: it is cut, whole groups
    /// in order, and says how many it left out. The status still fits.
    #[test]
    fn a_summary_too_long_without_any_level_is_cut_and_says_so() {
        let levels = [TopologyLevel { level: "rack".into(), node_label: "rack".into() }];
        let keys = ["serial".to_string()];
        let (mut nodes, pods) = busy_member(12_000);
        for (i, n) in nodes.iter_mut().enumerate() {
            n.metadata.labels.as_mut().expect("labels").insert("serial".into(), format!("sn-{i:06}"));
        }
        let r = report(&levels, &keys, &nodes, &pods);
        assert_eq!((r.levels_dropped, r.levels.len()), (0, 1), "no level would make it fit: none is dropped");
        assert!(r.domains_left_out > 0 && !r.domains.is_empty());
        assert_eq!(r.domains.len() + r.domains_left_out, 12_000);
        assert!(json_len(&r.domains) <= MAX_SUMMARY_BYTES);
        assert!(serde_json::to_vec(&r).expect("json").len() <= input_limits::MAX_OBJECT_BYTES - REST_OF_STATUS_BYTES);
    }

    /// A node claiming more GPUs than any node has (a device plugin gone wrong) is left out
    /// and named, rather than allocating a histogram of billions of rows or having the hub
    /// refuse the whole report; `Host` is read as hosts, as the hub reads it.
    #[test]
    fn a_node_claiming_billions_of_gpus_is_left_out_and_named() {
        let levels = [
            TopologyLevel { level: "rack".into(), node_label: "rack".into() },
            TopologyLevel { level: "Host".into(), node_label: "kubernetes.io/hostname".into() },
        ];
        let nodes = [node("n0", "r0", 8), node("bad", "r0", u32::MAX), node("n1", "r1", 8)];
        let r = report(&levels, &[], &nodes, &Vec::<Pod>::new());
        assert_eq!(r.oversized, ["bad"]);
        assert_eq!(r.domains.iter().map(|d| d.nodes).sum::<u32>(), 2);
        assert!(r.domains.iter().all(|d| d.path.len() == 1), "Host is not a level above hosts");
        assert_eq!(r.levels_dropped, 0);
    }

    /// A member of many small domains has a long summary; the lists get what is left, so the
    /// status stays under the object limit all the same.
    #[test]
    fn a_member_of_many_domains_lists_fewer_placements_and_its_status_still_fits() {
        let levels = [TopologyLevel { level: "rack".into(), node_label: "rack".into() }];
        let (mut nodes, pods) = busy_member(40_000);
        for (i, n) in nodes.iter_mut().enumerate() {
            n.metadata.labels.as_mut().expect("labels").insert("rack".into(), format!("rack-{}", i / 8));
        }
        let r = report(&levels, &[], &nodes, &pods);
        let summary = serde_json::to_vec(&r.domains).expect("json").len();
        assert!(summary > 700_000, "5,000 racks: {summary} bytes of summary");
        assert!(r.counted_left_out > 0 && r.bound_left_out > 0);
        assert!(!r.counted.is_empty(), "what room is left holds some");
        let status = serde_json::to_vec(&r).expect("json").len();
        assert!(status <= input_limits::MAX_OBJECT_BYTES - REST_OF_STATUS_BYTES, "{status} bytes");
    }

    #[test]
    fn nodes_that_differ_in_reported_labels_or_taints_are_reported_apart() {
        let levels = [TopologyLevel { level: "rack".into(), node_label: "rack".into() }];
        let mut nodes = vec![node("n0", "r0", 8), node("n1", "r0", 8), node("n2", "r0", 8)];
        let labels = nodes[1].metadata.labels.get_or_insert_default();
        labels.insert("node-type".into(), "training".into());
        labels.insert("unreported".into(), "x".into());
        nodes[2].spec = Some(
            serde_json::from_value(serde_json::json!({"taints": [
            {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"}]}))
            .expect("spec"),
        );
        for n in &mut nodes {
            strip_node(n);
        }
        let keys = ["node-type".to_string()];
        let summary = summarize(&levels, &keys, &nodes, &Vec::<Pod>::new());
        // Each entry as `nodes labels taints`.
        let classes: Vec<String> = summary
            .iter()
            .map(|d| {
                let labels: Vec<String> = d.class.node_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let taints: Vec<String> =
                    d.class.taints.iter().map(|t| format!("{}={}:{}", t.key, t.value, t.effect)).collect();
                format!("{} [{}] [{}]", d.nodes, labels.join(","), taints.join(","))
            })
            .collect();
        assert_eq!(classes, ["1 [] []", "1 [] [dedicated=ml:NoSchedule]", "1 [node-type=training] []"]);
    }

    #[test]
    fn the_caches_keep_all_the_summary_and_the_pending_reason_read() {
        let levels = [TopologyLevel { level: "rack".into(), node_label: "rack".into() }];
        let mut nodes = vec![node("n0", "r0", 8), node("n1", "r1", 8)];
        let mut pods = vec![pod("n0", "a", "node", 4), pod("n1", "b", "node", 2)];
        for n in &mut nodes {
            n.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
            n.status.get_or_insert_default().conditions = Some(vec![Default::default()]);
        }
        for p in &mut pods {
            let spec = p.spec.get_or_insert_default();
            spec.containers[0].env = Some(vec![Default::default()]);
            spec.containers
                .push(k8s_openapi::api::core::v1::Container { name: "sidecar".into(), ..Default::default() });
            let status = p.status.get_or_insert_default();
            status.conditions = Some(vec![
                serde_json::from_value(serde_json::json!({"type": "Ready", "status": "True"})).expect("condition"),
                serde_json::from_value(
                    serde_json::json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}),
                )
                .expect("condition"),
            ]);
            status.container_statuses = Some(vec![Default::default()]);
        }
        let (full_summary, full_bound) = (summarize(&levels, &[], &nodes, &pods), bound(&levels, &[], &nodes, &pods));
        nodes.iter_mut().for_each(strip_node);
        pods.iter_mut().for_each(strip_pod);
        assert_eq!(summarize(&levels, &[], &nodes, &pods), full_summary);
        assert_eq!(bound(&levels, &[], &nodes, &pods), full_bound);
        let status = pods[0].status.as_ref().expect("status kept");
        let kept: Vec<&str> = status.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            (kept, status.phase.as_deref(), status.container_statuses.as_ref().map(Vec::len)),
            (vec!["PodScheduled"], Some("Running"), Some(1)),
            "container statuses are kept: the hub's copies show READY and STATUS from them"
        );
        assert!(
            nodes[0].metadata.annotations.is_none() && nodes[0].status.as_ref().is_some_and(|s| s.conditions.is_none())
        );
    }
}
