//! The fleet file (YAML): clusters, their topology levels and node pools. Parsed strictly
//! (unknown keys are errors) and validated into a `scheduler_core::Fleet`, with errors that
//! name the file and the field.

use std::collections::BTreeMap;

use scheduler_core::Level;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    pub clusters: Vec<ClusterSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub name: String,
    /// Labels that gang cluster selectors match against.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Admin cost weight, a tie-breaker: cheaper clusters win among equally good placements.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_weight: u32,
    /// Topology levels, widest first. `host` is implied as the last level when absent.
    pub topology: Vec<LevelSpec>,
    pub pools: Vec<PoolSpec>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelSpec {
    pub level: Level,
    /// The node label naming this level's domains; the level's well-known label when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// Identical nodes, laid out in the cluster's topology: `fanout` gives how many children each
/// domain of a level holds (`{rack: 8, block: 4}`: 8 hosts per rack, 4 racks per block). A level
/// without a fanout holds all the remaining children in one domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    pub name: String,
    /// GPU product (the `nvidia.com/gpu.product` label); absent for CPU-only nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_flavor: Option<String>,
    #[serde(default)]
    pub gpus_per_node: u32,
    pub cpu_cores: u32,
    pub memory_gib: u32,
    pub nodes: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fanout: BTreeMap<Level, u32>,
}
