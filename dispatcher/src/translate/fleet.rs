//! MemberCluster statuses into a scheduler-core `Fleet` with its current `Capacity`, and where
//! members report pods bound.

use std::collections::{BTreeMap, BTreeSet};

use api::stowage::{MemberCluster, NodeClassReport};
use input_limits::{MAX_GPUS_PER_NODE, MAX_MEMBER_NODES, MAX_TOPOLOGY_LEVELS as MAX_LEVELS};
use scheduler_core::{
    Admission, Capacity, DomainId, Fleet, FleetBuilder, FleetError, Gang, Level, LevelInfo, NodeClass, NodeInput,
    PodSetPlacement, PodShape, Taint, TaintEffect,
};

/// CPU or memory a member did not report: large enough never to block, small enough to sum.
const UNREPORTED: u64 = 1 << 40;

/// A reported group of nodes' class, in the core's terms.
fn class_of(report: &NodeClassReport) -> NodeClass {
    NodeClass {
        labels: report.node_labels.clone(),
        taints: report
            .taints
            .iter()
            .filter_map(|t| {
                Some(Taint { key: t.key.clone(), value: t.value.clone(), effect: TaintEffect::parse(&t.effect)? })
            })
            .collect(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetTranslateError {
    #[error("MemberCluster {member}: status.topologyLevels[{index}].level: {problem}")]
    Level { member: String, index: usize, problem: String },
    #[error("MemberCluster {member}: status.domains[{index}]: {problem}")]
    Domain { member: String, index: usize, problem: String },
    #[error("MemberCluster {member}")]
    Fleet { member: String, source: FleetError },
}

/// The hub's hosts standing for each reported group of nodes — (member, domain path, flavor,
/// GPUs per node, class) — with the free GPUs each stands for, in order.
pub type Hosts = BTreeMap<NodeGroup, Vec<(DomainId, u32)>>;

/// A reported group of identical nodes: (member, domain path, flavor, GPUs per node, class).
pub type NodeGroup = (String, Vec<String>, String, u32, NodeClassReport);

/// Where a placement's bound pods are: (pod set, host, pods), keyed by (member, `<uid>/<epoch>`).
pub type Bound = BTreeMap<(String, String), Vec<(String, DomainId, u32)>>;

/// Whether a member's report can be read at all: sizes within bounds, checked before anything
/// is allocated for them, and a fleet of it alone builds. A member that fails is left out of the
/// snapshot by itself; the rest of the fleet is untouched.
pub fn check_member(m: &MemberCluster) -> Result<(), FleetTranslateError> {
    let name = m.metadata.name.clone().unwrap_or_default();
    let Some(status) = m.status.as_ref() else { return Ok(()) };
    if status.topology_levels.len() > MAX_LEVELS {
        return Err(FleetTranslateError::Level {
            member: name,
            index: MAX_LEVELS,
            problem: format!("{} levels reported, at most {MAX_LEVELS} are read", status.topology_levels.len()),
        });
    }
    let mut nodes: u64 = 0;
    for (i, d) in status.domains.iter().enumerate() {
        let domain = |problem: String| FleetTranslateError::Domain { member: name.clone(), index: i, problem };
        if d.gpus_per_node > MAX_GPUS_PER_NODE {
            return Err(domain(format!("gpusPerNode: {} is more than {MAX_GPUS_PER_NODE}", d.gpus_per_node)));
        }
        if d.free_histogram.len() > d.gpus_per_node as usize + 1 {
            return Err(domain(format!(
                "freeHistogram: {} entries for nodes of {} GPUs (at most one per free count, 0 to {})",
                d.free_histogram.len(),
                d.gpus_per_node,
                d.gpus_per_node
            )));
        }
        nodes += u64::from(d.nodes);
        if nodes > MAX_MEMBER_NODES {
            return Err(domain(format!("nodes: the member reports more than {MAX_MEMBER_NODES} nodes in all")));
        }
        if d.free_gpus > u64::from(d.nodes) * u64::from(d.gpus_per_node) {
            return Err(domain(format!(
                "freeGpus: {} is more than {} nodes of {} GPUs hold",
                d.free_gpus, d.nodes, d.gpus_per_node
            )));
        }
    }
    let (mut b, mut frees) = (FleetBuilder::new(), Vec::new());
    if !add_member(&mut b, &mut frees, m)? {
        return Ok(());
    }
    b.build().map(|_| ()).map_err(|source| FleetTranslateError::Fleet { member: name, source })
}

/// The fleet as the members report it, its free capacity, and which hosts stand for which
/// reported nodes. Each reported domain holds `nodes` identical nodes whose free GPUs follow its
/// histogram; they become hosts `<domain>/node-<i>` below it. Members that report nothing yet
/// are left out. The members are those [`check_member`] accepted.
pub fn fleet(members: &[MemberCluster]) -> Result<(Fleet, Capacity, Hosts), FleetTranslateError> {
    let mut b = FleetBuilder::new();
    // Each host made: its group, its name, and the free GPUs it stands for.
    let mut frees: Vec<(NodeGroup, String, u32)> = Vec::new();
    let mut reported = 0;
    for m in members {
        if add_member(&mut b, &mut frees, m)? {
            reported += 1;
        }
    }
    if reported == 0 {
        return Err(FleetTranslateError::Fleet { member: "(none)".into(), source: FleetError::Empty });
    }
    let mut fleet = b.build().map_err(|source| FleetTranslateError::Fleet { member: "(fleet)".into(), source })?;
    for m in members.iter().filter(|m| m.spec.cordoned) {
        if let Some(id) = m.metadata.name.as_deref().and_then(|n| fleet.cluster_by_name(n)) {
            fleet.set_cordoned(id, true);
        }
    }
    let mut capacity = Capacity::empty(&fleet);
    let by_path: BTreeMap<(String, String), scheduler_core::DomainId> = fleet
        .hosts()
        .map(|(h, _)| ((fleet.cluster(fleet.domain(h).cluster).name.clone(), fleet.domain(h).name.clone()), h))
        .collect();
    let mut hosts = Hosts::new();
    for (group, host, free) in frees {
        if let Some(&h) = by_path.get(&(group.0.clone(), host)) {
            let used = group.3.saturating_sub(free);
            if used > 0 {
                capacity.take(&fleet, h, used, PodShape { gpus: 1, cpu_milli: 0, memory_mib: 0 });
            }
            hosts.entry(group).or_default().push((h, free));
        }
    }
    capacity.commit();
    Ok((fleet, capacity, hosts))
}

/// Adds one member's report to the builder, its hosts' free GPUs to `frees`; `false` when it
/// reports no capacity yet.
fn add_member(
    b: &mut FleetBuilder,
    frees: &mut Vec<(NodeGroup, String, u32)>,
    m: &MemberCluster,
) -> Result<bool, FleetTranslateError> {
    let name = m.metadata.name.clone().unwrap_or_default();
    let Some(status) = m.status.as_ref().filter(|s| !s.domains.is_empty()) else { return Ok(false) };
    let mut levels = Vec::new();
    for (i, l) in status.topology_levels.iter().enumerate() {
        let level: Level = l.level.parse().map_err(|e: scheduler_core::topology::UnknownLevel| {
            FleetTranslateError::Level { member: name.clone(), index: i, problem: e.to_string() }
        })?;
        if level != Level::Host {
            levels.push(LevelInfo { level, label: l.node_label.clone() });
        }
    }
    let id = b
        .cluster(&name, &levels, m.spec.labels.clone(), m.spec.cost_weight)
        .map_err(|source| FleetTranslateError::Fleet { member: name.clone(), source })?;
    for (i, d) in status.domains.iter().enumerate() {
        if d.path.len() != levels.len() {
            return Err(FleetTranslateError::Domain {
                member: name.clone(),
                index: i,
                problem: format!(
                    "path has {} values, the member reports {} levels above hosts",
                    d.path.len(),
                    levels.len()
                ),
            });
        }
        let free_total: u64 = d.free_histogram.iter().enumerate().map(|(k, n)| k as u64 * u64::from(*n)).sum();
        let listed: u64 = d.free_histogram.iter().map(|&n| u64::from(n)).sum();
        if !d.free_histogram.is_empty() && (listed != u64::from(d.nodes) || free_total != d.free_gpus) {
            return Err(FleetTranslateError::Domain {
                member: name.clone(),
                index: i,
                problem: "freeHistogram disagrees with nodes or freeGpus".into(),
            });
        }
        // Free per node: from the histogram, largest first, else spread evenly.
        let mut node_free: Vec<u32> = d
            .free_histogram
            .iter()
            .enumerate()
            .rev()
            .flat_map(|(k, &n)| std::iter::repeat_n(k as u32, n as usize))
            .collect();
        if node_free.is_empty() {
            let per = d.free_gpus / u64::from(d.nodes.max(1));
            node_free = vec![per as u32; d.nodes as usize];
        }
        let group: NodeGroup = (name.clone(), d.path.clone(), d.flavor.clone(), d.gpus_per_node, d.class.clone());
        let class = class_of(&d.class);
        for (n, free) in node_free.into_iter().enumerate() {
            // Unique within the domain: groups of one domain differ in flavor, size or class.
            let host = format!("{}/{i}/node-{n}", d.path.join("/"));
            let mut path = d.path.clone();
            path.push(host.clone());
            b.node(
                id,
                NodeInput {
                    path: path.clone(),
                    gpu_flavor: Some(&d.flavor),
                    class: class.clone(),
                    gpus: d.gpus_per_node,
                    // Unreported: do not let CPU or memory block a fit the member may allow.
                    cpu_milli: d.cpu_milli_per_node.unwrap_or(UNREPORTED),
                    memory_mib: d.memory_mib_per_node.unwrap_or(UNREPORTED),
                },
            )
            .map_err(|source| FleetTranslateError::Fleet { member: name.clone(), source })?;
            frees.push((group.clone(), host, free));
        }
    }
    Ok(true)
}

/// Where the bound pods of each placement (`<uid>/<epoch>`) are on the hub's hosts, per member:
/// (pod set, host, pods). Each reported node is matched to a host of its group with the same
/// free GPUs (hosts of a group with equal free GPUs are interchangeable); a node that matches
/// none (a report caught mid-change) leaves its placements out, so nothing is evicted on a guess.
pub fn bound(hosts: &Hosts, members: &[MemberCluster]) -> Bound {
    let mut out = BTreeMap::new();
    for m in members {
        let (Some(member), Some(status)) = (m.metadata.name.as_deref(), m.status.as_ref()) else { continue };
        let mut nodes: BTreeMap<&str, &api::stowage::BoundNode> = BTreeMap::new();
        for n in status.bound.iter().flat_map(|b| &b.nodes) {
            nodes.entry(n.node.as_str()).or_insert(n);
        }
        let mut taken: BTreeSet<DomainId> = BTreeSet::new();
        let mut host_of: BTreeMap<&str, DomainId> = BTreeMap::new();
        for (name, n) in nodes {
            let group = (member.to_string(), n.path.clone(), n.flavor.clone(), n.gpus_per_node, n.class.clone());
            let free_match = hosts
                .get(&group)
                .and_then(|hs| hs.iter().find(|(h, free)| *free == n.free_gpus && !taken.contains(h)))
                .map(|&(h, _)| h);
            if let Some(h) = free_match {
                taken.insert(h);
                host_of.insert(name, h);
            }
        }
        for b in &status.bound {
            let placed: Option<Vec<(String, DomainId, u32)>> = b
                .nodes
                .iter()
                .flat_map(|n| n.pods.iter().map(move |c| (n, c)))
                .map(|(n, c)| host_of.get(n.node.as_str()).map(|&h| (c.pod_set.clone(), h, c.pods)))
                .collect();
            if let Some(placed) = placed {
                out.insert((member.to_string(), b.placement.clone()), placed);
            }
        }
    }
    out
}

/// A running gang's admission from where its pods are bound: its pod sets in order, each on
/// its hosts (a pod set with no GPU pods bound has none, and gives nothing back if evicted).
pub fn admission(fleet: &Fleet, cluster: &str, gang: &Gang, placed: &[(String, DomainId, u32)]) -> Option<Admission> {
    let cluster = fleet.cluster_by_name(cluster)?;
    let root = fleet.cluster(cluster).root;
    let pod_sets = gang
        .pod_sets
        .iter()
        .map(|ps| {
            let hosts: Vec<(DomainId, u32)> =
                placed.iter().filter(|(name, _, _)| **name == *ps.name).map(|&(_, h, pods)| (h, pods)).collect();
            let flavor = hosts.first().and_then(|(h, _)| fleet.domain(*h).node).and_then(|n| n.gpu_flavor);
            let span = fleet.common_ancestor(hosts.iter().map(|h| h.0)).unwrap_or(root);
            PodSetPlacement { flavor, span, hosts }
        })
        .collect();
    Some(Admission { cluster, pod_sets, ranking: Vec::new() })
}
