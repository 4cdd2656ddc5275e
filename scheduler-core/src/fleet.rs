//! The static fleet: clusters, each a topology tree in one flat arena of domains. Leaves are
//! hosts (nodes) with their allocatable resources. What changes (free capacity) lives in
//! [`crate::capacity::Capacity`], indexed by the same ids.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::nodes::NodeClass;
use crate::topology::Level;

/// Index of a GPU flavor in the fleet: a GPU product on one class of nodes (see
/// [`crate::nodes::NodeClass`]); a product on plain nodes and on tainted ones are two flavors
/// with one name, which is what quotas and users name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlavorId(pub u16);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId(pub u16);

/// Index of a domain (cluster root, inner domain or host) in the fleet's arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DomainId(pub u32);

impl DomainId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

impl ClusterId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// What one node offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSpec {
    pub gpu_flavor: Option<FlavorId>,
    pub gpus: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

#[derive(Debug, Clone)]
pub struct Domain {
    pub cluster: ClusterId,
    /// 0 for the cluster root; `d` for the cluster's `levels[d - 1]`.
    pub depth: u8,
    /// The label value naming this domain (the cluster name for a root).
    pub name: String,
    pub parent: Option<DomainId>,
    pub children: Vec<DomainId>,
    /// Set on hosts only.
    pub node: Option<NodeSpec>,
    /// Start of this domain's free-GPU histogram in `Capacity::hist`.
    pub(crate) hist_offset: u32,
    /// The most CPU and the most memory any one host under this domain has (not necessarily
    /// the same host): a pod asking more fits nowhere here, however much the domain holds in
    /// all, which the domain-wide sums of `Capacity::slots` cannot see.
    pub(crate) roomiest_host: HostRoom,
}

/// The CPU and memory of a host, or the most of each among hosts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HostRoom {
    pub(crate) cpu_milli: u64,
    pub(crate) memory_mib: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelInfo {
    pub level: Level,
    pub label: String,
}

#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: String,
    /// `name` again, shared: every pending reason names a cluster, and a count beats a copy.
    pub(crate) shared_name: Arc<str>,
    pub labels: BTreeMap<String, String>,
    pub cost_weight: u32,
    pub cordoned: bool,
    /// Widest first; the last is always `Host`.
    pub levels: Vec<LevelInfo>,
    pub root: DomainId,
    /// GPU flavors present, ascending; a domain's histogram has one row per entry.
    pub flavors: Vec<FlavorId>,
    /// Histogram row width: max GPUs on any node of this cluster, plus one.
    pub(crate) hist_width: u32,
    pub(crate) hosts: Vec<DomainId>,
    /// Per depth, the most hosts any one domain of that depth holds: a cheap bound that lets
    /// a search skip levels whose domains are all too small for a pod set.
    pub(crate) max_hosts: Vec<u32>,
    /// Per depth, the domains at that depth in tree order (every node's path names each level,
    /// so all hosts sit at the last): one level of the whole cluster, listed once rather than
    /// walked per ask.
    by_depth: Vec<Vec<DomainId>>,
}

impl Cluster {
    /// The domains at `depth` (hosts, below the host depth), in tree order.
    pub(crate) fn at_depth(&self, depth: u8) -> &[DomainId] {
        self.by_depth.get(usize::from(depth)).or(self.by_depth.last()).map_or(&[], Vec::as_slice)
    }

    /// Whether some domain at `depth` could hold `gpus` GPUs when empty (an upper bound).
    pub(crate) fn depth_could_hold(&self, depth: u8, gpus: u64) -> bool {
        let per_node = u64::from(self.hist_width.saturating_sub(1));
        u64::from(self.max_hosts[depth as usize]) * per_node >= gpus
    }
}

impl Cluster {
    pub fn host_depth(&self) -> u8 {
        self.levels.len() as u8
    }

    /// The level a domain at `depth` belongs to (`None` for the cluster root).
    pub fn level_at(&self, depth: u8) -> Option<Level> {
        depth.checked_sub(1).map(|d| self.levels[d as usize].level)
    }

    /// The shallowest depth whose level is `level` or narrower: where a `Required(level)` span
    /// may sit at its widest. A level the cluster does not label is treated strictly (the next
    /// narrower level it does label), so a constraint is never read more loosely than written.
    pub fn depth_for(&self, level: Level) -> u8 {
        self.levels.iter().position(|l| l.level >= level).map_or(self.host_depth(), |p| p as u8 + 1)
    }

    pub(crate) fn flavor_row(&self, flavor: FlavorId) -> Option<usize> {
        self.flavors.binary_search(&flavor).ok()
    }

    pub fn hosts(&self) -> &[DomainId] {
        &self.hosts
    }

    pub fn has_flavor(&self, flavor: FlavorId) -> bool {
        self.flavor_row(flavor).is_some()
    }
}

#[derive(Debug, Clone)]
pub struct Fleet {
    /// Per flavor id, its GPU product's name (shared: pending reasons name them).
    flavors: Vec<Arc<str>>,
    /// Per flavor id, the class of the nodes it is on.
    flavor_classes: Vec<NodeClass>,
    /// Product name → its flavor ids, ascending.
    flavor_index: BTreeMap<String, Vec<FlavorId>>,
    clusters: Vec<Cluster>,
    domains: Vec<Domain>,
    pub(crate) hist_len: usize,
    /// Capacity with nothing running: what "could this ever fit" is asked against.
    allocatable: crate::capacity::Capacity,
    /// Every node's GPUs, CPU (milli) and memory (MiB) summed, in `Resource::ALL` order; and
    /// each cluster's GPUs. Counted once here: every cycle asks (fair shares, the cost of a
    /// spread gang), and on a fleet of a million nodes counting them each cycle was most of
    /// a replay's time.
    totals: [u64; 3],
    cluster_gpus: Vec<u64>,
}

impl Fleet {
    /// Capacity with nothing running.
    pub fn allocatable(&self) -> &crate::capacity::Capacity {
        &self.allocatable
    }

    pub fn clusters(&self) -> &[Cluster] {
        &self.clusters
    }

    pub fn cluster(&self, id: ClusterId) -> &Cluster {
        &self.clusters[id.idx()]
    }

    pub fn cluster_by_name(&self, name: &str) -> Option<ClusterId> {
        self.clusters.iter().position(|c| c.name == name).map(|i| ClusterId(i as u16))
    }

    pub fn cluster_ids(&self) -> impl Iterator<Item = ClusterId> + '_ {
        (0..self.clusters.len()).map(|i| ClusterId(i as u16))
    }

    pub fn domain(&self, id: DomainId) -> &Domain {
        &self.domains[id.idx()]
    }

    pub fn domains_len(&self) -> usize {
        self.domains.len()
    }

    /// The first flavor of GPU product `name` (its plain nodes', when it has any).
    pub fn flavor(&self, name: &str) -> Option<FlavorId> {
        self.flavors_named(name).first().copied()
    }

    /// Every flavor of GPU product `name`, one per class of nodes it is on.
    pub fn flavors_named(&self, name: &str) -> &[FlavorId] {
        self.flavor_index.get(name).map_or(&[], Vec::as_slice)
    }

    /// The GPU product of a flavor: what quotas, placements and users name.
    pub fn flavor_name(&self, id: FlavorId) -> &str {
        &self.flavors[id.0 as usize]
    }

    pub(crate) fn shared_flavor_name(&self, id: FlavorId) -> Arc<str> {
        Arc::clone(&self.flavors[id.0 as usize])
    }

    /// The class of nodes a flavor is on.
    pub fn flavor_class(&self, id: FlavorId) -> &NodeClass {
        &self.flavor_classes[id.0 as usize]
    }

    /// Each flavor's product name, by flavor id.
    pub fn flavor_names(&self) -> &[Arc<str>] {
        &self.flavors
    }

    pub fn level_of(&self, id: DomainId) -> Option<Level> {
        let d = self.domain(id);
        self.cluster(d.cluster).level_at(d.depth)
    }

    /// `cluster/block/rack/host`-style path, for people.
    pub fn path(&self, id: DomainId) -> String {
        let mut parts = Vec::new();
        let mut cur = Some(id);
        while let Some(d) = cur {
            parts.push(self.domain(d).name.as_str());
            cur = self.domain(d).parent;
        }
        parts.reverse();
        parts.join("/")
    }

    /// The narrowest domain holding all of `hosts` (which must be non-empty and of one cluster).
    pub fn common_ancestor(&self, hosts: impl IntoIterator<Item = DomainId>) -> Option<DomainId> {
        let mut iter = hosts.into_iter();
        let mut lca = iter.next()?;
        for h in iter {
            let mut a = lca;
            let mut b = h;
            while self.domain(a).depth > self.domain(b).depth {
                a = self.domain(a).parent?;
            }
            while self.domain(b).depth > self.domain(a).depth {
                b = self.domain(b).parent?;
            }
            while a != b {
                a = self.domain(a).parent?;
                b = self.domain(b).parent?;
            }
            lca = a;
        }
        Some(lca)
    }

    /// The domain at `depth` holding `d` (`d` itself when it is not deeper).
    pub fn ancestor_at(&self, mut d: DomainId, depth: u8) -> DomainId {
        while self.domains[d.idx()].depth > depth {
            match self.domains[d.idx()].parent {
                Some(p) => d = p,
                None => break,
            }
        }
        d
    }

    pub fn total_gpus(&self) -> u64 {
        self.totals[0]
    }

    /// Every node's GPUs, CPU (milli) and memory (MiB) summed, in `Resource::ALL` order.
    pub fn totals(&self) -> [u64; 3] {
        self.totals
    }

    /// The GPUs of every node of `cluster`.
    pub fn cluster_gpus(&self, cluster: ClusterId) -> u64 {
        self.cluster_gpus.get(cluster.idx()).copied().unwrap_or(0)
    }

    pub fn hosts(&self) -> impl Iterator<Item = (DomainId, &NodeSpec)> + '_ {
        self.domains.iter().enumerate().filter_map(|(i, d)| d.node.as_ref().map(|n| (DomainId(i as u32), n)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FleetError {
    #[error("cluster {0:?} is defined twice")]
    DuplicateCluster(String),
    #[error("cluster {cluster:?}: topology levels must be widest first without repeats, got {levels}")]
    LevelOrder { cluster: String, levels: String },
    #[error("cluster {cluster:?}: node {node:?} has {got} topology values, the cluster has {want} levels")]
    PathLength { cluster: String, node: String, got: usize, want: usize },
    #[error("cluster {cluster:?}: node {node:?} is defined twice")]
    DuplicateNode { cluster: String, node: String },
    #[error("cluster {cluster:?}: node {node:?} has {gpus} GPUs but no GPU flavor")]
    GpusWithoutFlavor { cluster: String, node: String, gpus: u32 },
    #[error("cluster {0:?} has no nodes")]
    EmptyCluster(String),
    #[error("the fleet has no clusters")]
    Empty,
    #[error("cluster {cluster:?}: node {node:?} has {gpus} GPUs; at most {max} per node are supported")]
    TooManyGpus { cluster: String, node: String, gpus: u32, max: u32 },
    #[error("the fleet has more than {max} {what}")]
    TooMany { what: &'static str, max: usize },
}

/// GPUs per node beyond this are not modelled (the histogram row would be needlessly wide).
pub const MAX_GPUS_PER_NODE: u32 = 64;

/// Builds a [`Fleet`] cluster by cluster, node by node. Insertion order is kept, so the same
/// input always builds the same ids.
#[derive(Debug, Default)]
pub struct FleetBuilder {
    flavors: BTreeMap<(String, NodeClass), ()>,
    clusters: Vec<PendingCluster>,
}

#[derive(Debug)]
struct PendingCluster {
    name: String,
    labels: BTreeMap<String, String>,
    cost_weight: u32,
    levels: Vec<LevelInfo>,
    nodes: Vec<(Vec<String>, PendingNode)>,
}

#[derive(Debug)]
struct PendingNode {
    flavor: Option<(String, NodeClass)>,
    gpus: u32,
    cpu_milli: u64,
    memory_mib: u64,
}

/// A node to add: its topology values (one per cluster level, widest first, ending with the
/// host name) and what it offers.
#[derive(Debug, Clone)]
pub struct NodeInput<'a> {
    pub path: Vec<String>,
    pub gpu_flavor: Option<&'a str>,
    /// The node's labels and taints that matter; plain (the default) when none do.
    pub class: NodeClass,
    pub gpus: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

impl FleetBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a cluster. `levels` are widest first; `Host` is appended when not last.
    pub fn cluster(
        &mut self,
        name: &str,
        levels: &[LevelInfo],
        labels: BTreeMap<String, String>,
        cost_weight: u32,
    ) -> Result<ClusterId, FleetError> {
        if self.clusters.iter().any(|c| c.name == name) {
            return Err(FleetError::DuplicateCluster(name.to_string()));
        }
        let mut levels = levels.to_vec();
        if levels.last().map(|l| l.level) != Some(Level::Host) {
            levels.push(LevelInfo { level: Level::Host, label: Level::Host.default_label().into() });
        }
        if levels.windows(2).any(|w| w[0].level >= w[1].level) {
            let text: Vec<_> = levels.iter().map(|l| l.level.as_str()).collect();
            return Err(FleetError::LevelOrder { cluster: name.into(), levels: text.join(" > ") });
        }
        if self.clusters.len() >= usize::from(u16::MAX) {
            return Err(FleetError::TooMany { what: "clusters", max: usize::from(u16::MAX) });
        }
        self.clusters.push(PendingCluster { name: name.to_string(), labels, cost_weight, levels, nodes: Vec::new() });
        Ok(ClusterId(self.clusters.len() as u16 - 1))
    }

    pub fn node(&mut self, cluster: ClusterId, node: NodeInput<'_>) -> Result<(), FleetError> {
        let c = &mut self.clusters[cluster.idx()];
        let host = node.path.last().cloned().unwrap_or_default();
        if node.path.len() != c.levels.len() {
            return Err(FleetError::PathLength {
                cluster: c.name.clone(),
                node: host,
                got: node.path.len(),
                want: c.levels.len(),
            });
        }
        if node.gpus > 0 && node.gpu_flavor.is_none() {
            return Err(FleetError::GpusWithoutFlavor { cluster: c.name.clone(), node: host, gpus: node.gpus });
        }
        if node.gpus > MAX_GPUS_PER_NODE {
            return Err(FleetError::TooManyGpus {
                cluster: c.name.clone(),
                node: host,
                gpus: node.gpus,
                max: MAX_GPUS_PER_NODE,
            });
        }
        let flavor = node.gpu_flavor.map(|f| (f.to_string(), node.class));
        if let Some(f) = &flavor {
            self.flavors.insert(f.clone(), ());
        }
        c.nodes.push((
            node.path,
            PendingNode { flavor, gpus: node.gpus, cpu_milli: node.cpu_milli, memory_mib: node.memory_mib },
        ));
        Ok(())
    }

    pub fn build(self) -> Result<Fleet, FleetError> {
        if self.clusters.is_empty() {
            return Err(FleetError::Empty);
        }
        if self.flavors.len() >= usize::from(u16::MAX) {
            return Err(FleetError::TooMany { what: "GPU flavors", max: usize::from(u16::MAX) });
        }
        // Ids in (product, class) order: a product's plain nodes come first.
        let keys: Vec<(String, NodeClass)> = self.flavors.into_keys().collect();
        let ids: BTreeMap<&(String, NodeClass), FlavorId> =
            keys.iter().enumerate().map(|(i, k)| (k, FlavorId(i as u16))).collect();
        let mut flavor_index: BTreeMap<String, Vec<FlavorId>> = BTreeMap::new();
        for (k, id) in &ids {
            flavor_index.entry(k.0.clone()).or_default().push(*id);
        }
        let mut domains: Vec<Domain> = Vec::new();
        let mut clusters = Vec::new();
        let mut hist_len = 0usize;
        for (ci, pc) in self.clusters.into_iter().enumerate() {
            let cid = ClusterId(ci as u16);
            if pc.nodes.is_empty() {
                return Err(FleetError::EmptyCluster(pc.name));
            }
            let root = DomainId(domains.len() as u32);
            domains.push(Domain {
                cluster: cid,
                depth: 0,
                name: pc.name.clone(),
                parent: None,
                children: Vec::new(),
                node: None,
                hist_offset: 0,
                roomiest_host: HostRoom::default(),
            });
            // (parent, child name) -> child, so building stays O(n log n) on flat clusters.
            let mut index: BTreeMap<(DomainId, String), DomainId> = BTreeMap::new();
            let mut hosts = Vec::with_capacity(pc.nodes.len());
            let mut cluster_flavors = std::collections::BTreeSet::new();
            let mut max_gpus = 0;
            for (path, node) in pc.nodes {
                let mut parent = root;
                let last = path.len() - 1;
                for (depth, value) in path.into_iter().enumerate() {
                    let key = (parent, value);
                    if depth == last && index.contains_key(&key) {
                        return Err(FleetError::DuplicateNode { cluster: pc.name, node: key.1 });
                    }
                    let next = match index.get(&key) {
                        Some(&d) => d,
                        None => {
                            if domains.len() >= u32::MAX as usize {
                                return Err(FleetError::TooMany { what: "domains", max: u32::MAX as usize });
                            }
                            let id = DomainId(domains.len() as u32);
                            domains.push(Domain {
                                cluster: cid,
                                depth: depth as u8 + 1,
                                name: key.1.clone(),
                                parent: Some(parent),
                                children: Vec::new(),
                                node: None,
                                hist_offset: 0,
                                roomiest_host: HostRoom::default(),
                            });
                            domains[parent.idx()].children.push(id);
                            index.insert(key, id);
                            id
                        }
                    };
                    parent = next;
                }
                let gpu_flavor = node.flavor.as_ref().and_then(|f| ids.get(f).copied());
                if let Some(f) = gpu_flavor {
                    cluster_flavors.insert(f);
                }
                max_gpus = max_gpus.max(node.gpus);
                domains[parent.idx()].node = Some(NodeSpec {
                    gpu_flavor,
                    gpus: node.gpus,
                    cpu_milli: node.cpu_milli,
                    memory_mib: node.memory_mib,
                });
                hosts.push(parent);
            }
            let flavors: Vec<FlavorId> = cluster_flavors.into_iter().collect();
            let mut under = vec![0u32; domains.len() - root.idx()];
            for &h in &hosts {
                let room = domains[h.idx()]
                    .node
                    .map_or(HostRoom::default(), |n| HostRoom { cpu_milli: n.cpu_milli, memory_mib: n.memory_mib });
                let mut cur = Some(h);
                while let Some(d) = cur {
                    under[d.idx() - root.idx()] += 1;
                    let most = &mut domains[d.idx()].roomiest_host;
                    most.cpu_milli = most.cpu_milli.max(room.cpu_milli);
                    most.memory_mib = most.memory_mib.max(room.memory_mib);
                    cur = domains[d.idx()].parent;
                }
            }
            let mut max_hosts = vec![0u32; pc.levels.len() + 1];
            for (i, n) in under.into_iter().enumerate() {
                let depth = domains[root.idx() + i].depth as usize;
                max_hosts[depth] = max_hosts[depth].max(n);
            }
            let mut by_depth = vec![Vec::new(); pc.levels.len() + 1];
            let mut stack = vec![root];
            while let Some(d) = stack.pop() {
                let dom = &domains[d.idx()];
                by_depth[usize::from(dom.depth)].push(d);
                stack.extend(dom.children.iter().rev());
            }
            let hist_width = max_gpus + 1;
            let row = flavors.len() * hist_width as usize;
            for d in &mut domains[root.idx()..] {
                d.hist_offset = hist_len as u32;
                hist_len += row;
            }
            clusters.push(Cluster {
                shared_name: Arc::from(pc.name.as_str()),
                name: pc.name,
                labels: pc.labels,
                cost_weight: pc.cost_weight,
                cordoned: false,
                levels: pc.levels,
                root,
                flavors,
                hist_width,
                hosts,
                max_hosts,
                by_depth,
            });
        }
        let (flavors, flavor_classes) = keys.into_iter().map(|(f, c)| (Arc::from(f), c)).unzip();
        let mut fleet = Fleet {
            flavors,
            flavor_classes,
            flavor_index,
            clusters,
            domains,
            hist_len,
            allocatable: crate::capacity::Capacity::default(),
            totals: [0; 3],
            cluster_gpus: Vec::new(),
        };
        let (mut totals, mut cluster_gpus) = ([0u64; 3], vec![0u64; fleet.clusters.len()]);
        for (h, n) in fleet.hosts() {
            totals = [totals[0] + u64::from(n.gpus), totals[1] + n.cpu_milli, totals[2] + n.memory_mib];
            cluster_gpus[fleet.domain(h).cluster.idx()] += u64::from(n.gpus);
        }
        (fleet.totals, fleet.cluster_gpus) = (totals, cluster_gpus);
        fleet.allocatable = crate::capacity::Capacity::empty(&fleet);
        Ok(fleet)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cluster#{}", self.0)
    }
}

impl Fleet {
    /// Marks a cluster cordoned: it keeps its running gangs but admits nothing new.
    pub fn set_cordoned(&mut self, cluster: ClusterId, cordoned: bool) {
        self.clusters[cluster.idx()].cordoned = cordoned;
    }
}

#[cfg(test)]
mod tests {
    use crate::fixture::uniform_cluster;
    use crate::fleet::FleetBuilder;
    use crate::topology::Level;

    /// The totals counted once at build are what the nodes add up to, per cluster too.
    #[test]
    fn totals_and_each_clusters_gpus_are_what_its_nodes_add_up_to() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 3), (Level::Host, 2)]).expect("east");
        uniform_cluster(&mut b, "west", "l40s", 4, &[(Level::Host, 5)]).expect("west");
        let fleet = b.build().expect("fleet");
        let hosts: Vec<_> = fleet.hosts().collect();
        let sum = |f: &dyn Fn(&crate::fleet::NodeSpec) -> u64| hosts.iter().map(|(_, n)| f(n)).sum::<u64>();
        let totals = [sum(&|n| u64::from(n.gpus)), sum(&|n| n.cpu_milli), sum(&|n| n.memory_mib)];
        assert_eq!(fleet.totals(), totals);
        assert_eq!(fleet.total_gpus(), 48 + 20);
        let (east, west) = (fleet.cluster_by_name("east").expect("east"), fleet.cluster_by_name("west").expect("west"));
        assert_eq!((fleet.cluster_gpus(east), fleet.cluster_gpus(west)), (48, 20));
    }
}
