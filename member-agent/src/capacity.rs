//! What the agent reports of its cluster's capacity: per narrowest topology domain above hosts
//! and GPU flavor, the node count, GPUs per node, allocatable and free GPUs and a histogram of
//! free GPUs per node — enough for the hub's fit tests to be exact without listing every node,
//! so the MemberCluster status stays well under the API's object size limit.

use std::collections::BTreeMap;

use api::stowage::{DomainCapacity, TopologyLevel};
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::render::quantity::Milli;

pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
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

/// Summarises GPU nodes by the values of `levels` (widest first, host excluded), flavor and
/// GPUs per node. Nodes without GPUs or without every level label are left out.
pub fn summarize(levels: &[TopologyLevel], nodes: &[Node], pods: &[Pod]) -> Vec<DomainCapacity> {
    let mut used: BTreeMap<&str, u32> = BTreeMap::new();
    for p in pods {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            *used.entry(n).or_default() += pod_gpus(p);
        }
    }
    let above_hosts: Vec<&TopologyLevel> = levels.iter().filter(|l| l.level != "host").collect();
    /// Free GPUs of each node, and the smallest node's CPU and memory.
    type Group = (Vec<u32>, u64, u64);
    let mut groups: BTreeMap<(Vec<String>, String, u32), Group> = BTreeMap::new();
    for n in nodes {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let Some(flavor) = labels.get(GPU_PRODUCT_LABEL).cloned() else { continue };
        let allocatable =
            gpus(n.status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| a.get(GPU_RESOURCE)));
        if allocatable == 0 {
            continue;
        }
        let Some(path) =
            above_hosts.iter().map(|l| labels.get(&l.node_label).cloned()).collect::<Option<Vec<String>>>()
        else {
            continue;
        };
        let name = n.metadata.name.as_deref().unwrap_or("");
        let free = allocatable.saturating_sub(used.get(name).copied().unwrap_or(0));
        let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let amount = |k: &str| {
            alloc.and_then(|a| a.get(k)).and_then(|q| Milli::parse(&q.0).ok()).map_or(0, |m| m.0.max(0) as u64)
        };
        let (cpu_milli, memory_mib) = (amount("cpu"), amount("memory") / 1000 / (1024 * 1024));
        let e = groups.entry((path, flavor, allocatable)).or_insert((Vec::new(), u64::MAX, u64::MAX));
        e.0.push(free);
        e.1 = e.1.min(cpu_milli);
        e.2 = e.2.min(memory_mib);
    }
    groups
        .into_iter()
        .map(|((path, flavor, per_node), (frees, cpu_milli, memory_mib))| {
            let mut histogram = vec![0u32; per_node as usize + 1];
            for f in &frees {
                histogram[(*f).min(per_node) as usize] += 1;
            }
            DomainCapacity {
                path,
                flavor,
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
