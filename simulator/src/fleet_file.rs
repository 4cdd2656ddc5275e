//! The fleet file (YAML): clusters, their topology levels and node pools. Parsed strictly
//! (unknown keys are errors) within the YAML budget and validated into a
//! `scheduler_core::Fleet`, with errors that name the file and the field
//! (`FILE[:LINE]: FIELD: PROBLEM`). Sizes are checked against `input_limits` before anything
//! is laid out, so a fleet costs at most what the limits allow, whatever the file says.

use std::collections::BTreeMap;

use input_limits::yaml::YamlError;
use input_limits::{FANOUT_PRODUCT, FLEET_CLUSTERS, FLEET_DOMAINS, FLEET_NODES, OverLimit};
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

#[derive(Debug, thiserror::Error)]
pub enum FleetFileError {
    #[error("{path}")]
    Io { path: String, source: std::io::Error },
    /// Not YAML, over the YAML budget, or not of the schema: the line and field where known.
    #[error("{}", yaml.in_file(path))]
    Yaml { path: String, yaml: YamlError },
    #[error("{path}: {field}: {problem}")]
    Field { path: String, field: String, problem: String },
    /// A size over one of `input_limits`' fleet limits.
    #[error("{path}: {field}: {over}")]
    Limit { path: String, field: String, over: OverLimit },
    #[error("{path}")]
    Fleet { path: String, source: scheduler_core::FleetError },
}

impl FleetFileError {
    pub fn kind(&self) -> &'static str {
        match self {
            FleetFileError::Io { .. } => "io",
            FleetFileError::Yaml { .. } => "yaml",
            FleetFileError::Field { .. } => "field",
            FleetFileError::Limit { .. } => "limit",
            FleetFileError::Fleet { .. } => "fleet",
        }
    }
}

/// The fleet built into the binary: several clusters with different GPU flavors and topology
/// depths, sized so the built-in Philly trace queues (see docs/simulator.md).
pub const DEFAULT_FLEET_YAML: &str = include_str!("../data/default-fleet.yaml");

impl FleetSpec {
    pub fn parse(text: &str, path: &str) -> Result<Self, FleetFileError> {
        input_limits::yaml::from_str(text).map_err(|yaml| FleetFileError::Yaml { path: path.into(), yaml })
    }

    pub fn load(path: &std::path::Path) -> Result<Self, FleetFileError> {
        let shown = path.display().to_string();
        let text = input_limits::read_to_string(path, input_limits::YAML_FILE_BYTES)
            .map_err(|source| FleetFileError::Io { path: shown.clone(), source })?;
        Self::parse(&text, &shown)
    }

    pub fn builtin() -> Self {
        // The built-in file is tested to parse; failing here is a build defect, not user input.
        #[allow(clippy::expect_used)]
        Self::parse(DEFAULT_FLEET_YAML, "built-in fleet").expect("the built-in fleet parses")
    }

    /// Lays out every pool and builds the scheduler's fleet. `path` names the file in errors.
    pub fn build(&self, path: &str) -> Result<scheduler_core::Fleet, FleetFileError> {
        let field =
            |field: String, problem: &str| FleetFileError::Field { path: path.into(), field, problem: problem.into() };
        let limit = |field: String, over: OverLimit| FleetFileError::Limit { path: path.into(), field, over };
        let mut b = scheduler_core::FleetBuilder::new();
        if self.clusters.is_empty() {
            return Err(field("clusters".into(), "must list at least one cluster"));
        }
        FLEET_CLUSTERS.check_len(self.clusters.len()).map_err(|over| limit("clusters".into(), over))?;
        // Running totals over the whole fleet, checked before each pool is laid out.
        let (mut fleet_nodes, mut fleet_domains) = (0u64, 0u64);
        for (ci, c) in self.clusters.iter().enumerate() {
            let at = |f: &str| format!("clusters[{ci}].{f}");
            if c.name.is_empty() {
                return Err(field(at("name"), "must not be empty"));
            }
            if c.pools.is_empty() {
                return Err(field(at("pools"), "must list at least one pool"));
            }
            let mut levels: Vec<scheduler_core::LevelInfo> = c
                .topology
                .iter()
                .map(|l| scheduler_core::LevelInfo {
                    level: l.level,
                    label: l.label.clone().unwrap_or_else(|| l.level.default_label().into()),
                })
                .collect();
            if levels.windows(2).any(|w| w[0].level >= w[1].level) {
                return Err(field(
                    at("topology"),
                    "levels must be widest first (zone, block, rack, nvlink, host), each once",
                ));
            }
            if levels.last().map(|l| l.level) != Some(Level::Host) {
                levels
                    .push(scheduler_core::LevelInfo { level: Level::Host, label: Level::Host.default_label().into() });
            }
            let id = b
                .cluster(&c.name, &levels, c.labels.clone(), c.cost_weight)
                .map_err(|source| FleetFileError::Fleet { path: path.into(), source })?;
            for (pi, pool) in c.pools.iter().enumerate() {
                let at = |f: &str| format!("clusters[{ci}].pools[{pi}].{f}");
                if pool.nodes == 0 {
                    return Err(field(at("nodes"), "must be at least 1"));
                }
                if pool.gpus_per_node > 0 && pool.gpu_flavor.is_none() {
                    return Err(field(at("gpu_flavor"), "is required when gpus_per_node is above 0"));
                }
                if pool.gpus_per_node > scheduler_core::fleet::MAX_GPUS_PER_NODE {
                    return Err(field(at("gpus_per_node"), "must be at most 64"));
                }
                FLEET_NODES.check(u64::from(pool.nodes)).map_err(|over| limit(at("nodes"), over))?;
                for (level, &n) in &pool.fanout {
                    if n == 0 {
                        return Err(field(at(&format!("fanout.{level}")), "must be at least 1"));
                    }
                    if !levels.iter().any(|l| l.level == *level) || *level == Level::Host {
                        return Err(field(
                            at(&format!("fanout.{level}")),
                            "names a level the cluster's topology does not list (fanout gives children per domain of zone, block, rack or nvlink)",
                        ));
                    }
                }
                let per_domain = nodes_per_domain(&levels, &pool.fanout).map_err(|over| limit(at("fanout"), over))?;
                fleet_nodes = FLEET_NODES
                    .sum([fleet_nodes, u64::from(pool.nodes)])
                    .map_err(|over| limit(format!("clusters[{ci}].pools[..{pi}].nodes (the fleet's)"), over))?;
                let domains = per_domain.iter().map(|size| match size {
                    Some(size) => u64::from(pool.nodes).div_ceil(*size),
                    None => 1,
                });
                fleet_domains = FLEET_DOMAINS
                    .sum(std::iter::once(fleet_domains).chain(domains))
                    .map_err(|over| limit(format!("clusters[{ci}].pools[..{pi}] (the fleet's domains)"), over))?;
                for n in 0..pool.nodes {
                    b.node(
                        id,
                        scheduler_core::NodeInput {
                            path: node_path(&pool.name, n, &levels, &per_domain),
                            gpu_flavor: pool.gpu_flavor.as_deref(),
                            class: scheduler_core::NodeClass::default(),
                            gpus: pool.gpus_per_node,
                            cpu_milli: u64::from(pool.cpu_cores) * 1000,
                            memory_mib: u64::from(pool.memory_gib) * 1024,
                        },
                    )
                    .map_err(|source| FleetFileError::Fleet { path: path.into(), source })?;
                }
            }
        }
        b.build().map_err(|source| FleetFileError::Fleet { path: path.into(), source })
    }
}

/// How many nodes one domain of each level holds (widest level first): a host 1, each wider
/// level its fanout times the next narrower one's, in checked arithmetic within
/// `MAX_FANOUT_PRODUCT`. `None`: the level has no fanout (and so no wider one counts), one
/// domain holds all of the pool.
fn nodes_per_domain(
    levels: &[scheduler_core::LevelInfo],
    fanout: &BTreeMap<Level, u32>,
) -> Result<Vec<Option<u64>>, OverLimit> {
    let mut per_domain = Vec::with_capacity(levels.len());
    let mut size = Some(1);
    for l in levels.iter().rev() {
        if l.level != Level::Host {
            size = match (size, fanout.get(&l.level)) {
                (Some(size), Some(&f)) => Some(FANOUT_PRODUCT.product([size, u64::from(f)])?),
                _ => None,
            };
        }
        per_domain.push(size);
    }
    per_domain.reverse();
    Ok(per_domain)
}

/// Topology values of node `n` of a pool: each level's domain index is the node's index
/// divided by how many nodes one domain of that level holds. Names carry the pool, so pools
/// never share a domain.
fn node_path(pool: &str, n: u32, levels: &[scheduler_core::LevelInfo], per_domain: &[Option<u64>]) -> Vec<String> {
    let mut path = Vec::with_capacity(levels.len());
    let mut prefix = pool.to_string();
    for (l, size) in levels.iter().zip(per_domain) {
        if l.level == Level::Host {
            path.push(format!("{prefix}-n{n}"));
        } else {
            let idx = size.map_or(0, |size| u64::from(n) / size.max(1));
            prefix = format!("{prefix}-{}{idx}", &l.level.as_str()[..1]);
            path.push(prefix.clone());
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_fleet_builds() {
        let fleet = FleetSpec::builtin().build("built-in").expect("valid");
        assert!(fleet.clusters().len() >= 3);
        let flavors = fleet.flavor_names();
        assert!(flavors.len() >= 2, "several GPU flavors: {flavors:?}");
        let depths: std::collections::BTreeSet<usize> = fleet.clusters().iter().map(|c| c.levels.len()).collect();
        assert!(depths.len() >= 2, "different topology depths");
    }

    #[test]
    fn fanout_lays_nodes_into_racks_and_blocks() {
        let spec = FleetSpec::parse(
            "clusters:\n- name: c\n  topology: [{level: block}, {level: rack}]\n  pools:\n  - {name: p, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 96, memory_gib: 1024, nodes: 20, fanout: {rack: 4, block: 2}}\n",
            "t.yaml",
        )
        .expect("parses");
        let fleet = spec.build("t.yaml").expect("builds");
        let c = &fleet.clusters()[0];
        let root = fleet.domain(c.root);
        assert_eq!(root.children.len(), 3, "20 nodes / (4 x 2) per block -> 3 blocks");
        let rack = fleet.domain(fleet.domain(root.children[0]).children[0]);
        assert_eq!(rack.children.len(), 4);
        assert_eq!(fleet.total_gpus(), 160);
    }

    /// What a user sees: the error and its causes (the CLI prints the chain).
    fn shown(err: &FleetFileError) -> String {
        let mut msg = err.to_string();
        let mut cause = std::error::Error::source(err);
        while let Some(c) = cause {
            msg = format!("{msg}: {c}");
            cause = c.source();
        }
        msg
    }

    fn pool(fields: &str) -> String {
        format!(
            "clusters:\n- name: c\n  topology: [{{level: zone}}, {{level: block}}, {{level: rack}}]\n  pools:\n  - {{name: p, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 1, memory_gib: 1, {fields}}}\n"
        )
    }

    /// Sizes past the limits are refused before anything is laid out: 4e9 nodes used to take
    /// all the machine's memory, fanouts whose product overflowed divided by zero.
    #[test]
    fn sizes_over_the_limits_are_refused_before_building() {
        let cases = [
            (
                pool("nodes: 4000000000"),
                "fleet.yaml: clusters[0].pools[0].nodes: 4000000000 is above the limit of 1000000 nodes (MAX_FLEET_NODES)",
            ),
            (
                pool("nodes: 4, fanout: {rack: 4294967295, block: 4294967295, zone: 4294967295}"),
                "fleet.yaml: clusters[0].pools[0].fanout: 4294967295 is above the limit of 1000000 nodes (MAX_FANOUT_PRODUCT)",
            ),
            (
                pool("nodes: 4, fanout: {rack: 2000, block: 1000}"),
                "fleet.yaml: clusters[0].pools[0].fanout: 2000000 is above the limit of 1000000 nodes (MAX_FANOUT_PRODUCT)",
            ),
            (
                format!(
                    "clusters:\n- name: c\n  topology: []\n  pools:\n{}",
                    "  - {name: p, cpu_cores: 1, memory_gib: 1, nodes: 600000}\n".repeat(2)
                ),
                "fleet.yaml: clusters[0].pools[..1].nodes (the fleet's): 1200000 is above the limit of 1000000 nodes (MAX_FLEET_NODES)",
            ),
            (
                format!(
                    "clusters:\n{}",
                    "- {name: c, topology: [], pools: [{name: p, cpu_cores: 1, memory_gib: 1, nodes: 1}]}\n"
                        .repeat(1001)
                ),
                "fleet.yaml: clusters: 1001 is above the limit of 1000 clusters (MAX_FLEET_CLUSTERS)",
            ),
        ];
        for (text, want) in cases {
            let started = std::time::Instant::now();
            let err = FleetSpec::parse(&text, "fleet.yaml").and_then(|s| s.build("fleet.yaml")).expect_err(want);
            assert_eq!(shown(&err), want);
            assert_eq!(err.kind(), "limit");
            assert!(started.elapsed() < std::time::Duration::from_secs(2), "{want}: {:?}", started.elapsed());
        }
        // At the limits, a fanout whose product is the limit still lays out.
        let fleet = FleetSpec::parse(&pool("nodes: 8, fanout: {rack: 1000, block: 1000}"), "fleet.yaml")
            .and_then(|s| s.build("fleet.yaml"))
            .expect("builds");
        assert_eq!(fleet.total_gpus(), 64);
    }

    /// A 1 MiB name used as every label's value (by alias) used to expand to gigabytes: the
    /// YAML budget refuses it, quickly, naming the line and field.
    #[test]
    fn an_alias_bomb_is_refused_within_the_yaml_budget() {
        let labels: Vec<String> = (0..100).map(|i| format!("l{i}: *big")).collect();
        let text = format!(
            "clusters:\n- name: &big {}\n  labels: {{{}}}\n  topology: []\n  pools: []\n",
            "x".repeat(1 << 20),
            labels.join(", ")
        );
        let started = std::time::Instant::now();
        let err = FleetSpec::parse(&text, "fleet.yaml").expect_err("refused");
        assert_eq!(err.kind(), "yaml");
        let msg = shown(&err);
        assert!(msg.starts_with("fleet.yaml:3: clusters[0].labels") && msg.contains("over the YAML budget"), "{msg}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
    }

    #[test]
    fn bad_fleet_files_name_the_file_and_field() {
        let cases = [
            ("clusters: []\n", "clusters: must list at least one cluster"),
            (
                "clusters:\n- name: c\n  topology: []\n  pools:\n  - {name: p, gpus_per_node: 8, cpu_cores: 1, memory_gib: 1, nodes: 1}\n",
                "clusters[0].pools[0].gpu_flavor: is required",
            ),
            (
                "clusters:\n- name: c\n  topology: [{level: rack}, {level: block}]\n  pools:\n  - {name: p, cpu_cores: 1, memory_gib: 1, nodes: 1}\n",
                "clusters[0].topology: levels must be widest first",
            ),
            (
                "clusters:\n- name: c\n  topology: [{level: shelf}]\n  pools: []\n",
                "fleet.yaml:3: clusters[0].topology[0].level: unknown variant `shelf`",
            ),
            (
                "clusters:\n- name: c\n  topology: []\n  pools:\n  - {name: p, cpu_cores: 1, memory_gib: 1, nodes: 1, colour: red}\n",
                "fleet.yaml:5: clusters[0].pools[0].colour: unknown field `colour`",
            ),
            (
                "clusters:\n- name: c\n  topology: [{level: rack}]\n  pools:\n  - {name: p, cpu_cores: 1, memory_gib: 1, nodes: 4, fanout: {block: 2}}\n",
                "clusters[0].pools[0].fanout.block: names a level",
            ),
        ];
        for (text, want) in cases {
            let err = FleetSpec::parse(text, "fleet.yaml").and_then(|s| s.build("fleet.yaml")).expect_err(text);
            let msg = shown(&err);
            assert!(msg.starts_with("fleet.yaml:"), "{msg}");
            assert!(msg.contains(want), "{msg:?} should contain {want:?}");
        }
    }
}
