//! Free capacity of a fleet, the part of a snapshot that a cycle changes. Every domain keeps,
//! per GPU flavor, a histogram of its nodes' free GPU counts, plus aggregated free CPU and
//! memory. "Does a pod of s GPUs fit n times in this domain" is then a sum over one histogram
//! row, never a scan of nodes. Every change is journaled until `commit`, so a gang can be tried
//! and rolled back (the cycle's `Txn` builds on this).

use std::collections::BTreeMap;

use crate::fleet::{ClusterId, DomainId, FlavorId, Fleet};

/// Free resources of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeFree {
    pub gpus: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

/// What one pod takes from a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PodShape {
    pub gpus: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

/// Amounts of every resource at once, as reservations reckon them: the room of several pods on
/// one host (`times`), what part of it is free (`capped`), what is still owed (`less`). Saturating:
/// a held part is never more than what was wanted.
impl PodShape {
    /// `n` pods of this shape, as one amount.
    pub fn times(self, n: u32) -> PodShape {
        PodShape {
            gpus: self.gpus.saturating_mul(n),
            cpu_milli: self.cpu_milli.saturating_mul(u64::from(n)),
            memory_mib: self.memory_mib.saturating_mul(u64::from(n)),
        }
    }

    /// Of each resource, this or `cap`, whichever is smaller (not `Ord::min`, which compares
    /// whole shapes).
    pub fn capped(self, cap: PodShape) -> PodShape {
        PodShape {
            gpus: self.gpus.min(cap.gpus),
            cpu_milli: self.cpu_milli.min(cap.cpu_milli),
            memory_mib: self.memory_mib.min(cap.memory_mib),
        }
    }

    /// Of each resource, this less `other`, or none.
    pub fn less(self, other: PodShape) -> PodShape {
        PodShape {
            gpus: self.gpus.saturating_sub(other.gpus),
            cpu_milli: self.cpu_milli.saturating_sub(other.cpu_milli),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
        }
    }

    /// Of each resource, both together.
    pub fn plus(self, other: PodShape) -> PodShape {
        PodShape {
            gpus: self.gpus.saturating_add(other.gpus),
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
        }
    }
}

impl NodeFree {
    /// What is left of this when `used` is taken, if it holds that much.
    pub fn less(&self, used: &NodeFree) -> Option<NodeFree> {
        Some(NodeFree {
            gpus: self.gpus.checked_sub(used.gpus)?,
            cpu_milli: self.cpu_milli.checked_sub(used.cpu_milli)?,
            memory_mib: self.memory_mib.checked_sub(used.memory_mib)?,
        })
    }

    /// How many pods of `shape` fit here.
    pub fn pods(&self, shape: &PodShape) -> u32 {
        let by = |free: u64, need: u64| free.checked_div(need).unwrap_or(u64::from(u32::MAX));
        let by_gpu = by(u64::from(self.gpus), u64::from(shape.gpus)).min(u64::from(u32::MAX));
        // Searches ask this of host after host: when CPU and memory hold as many pods as the
        // GPUs do (the usual case), two multiplications say so, not two more divisions.
        let holds = |free: u64, need: u64| by_gpu.checked_mul(need).is_some_and(|all| all <= free);
        if holds(self.cpu_milli, shape.cpu_milli) && holds(self.memory_mib, shape.memory_mib) {
            return by_gpu as u32;
        }
        by_gpu.min(by(self.cpu_milli, shape.cpu_milli)).min(by(self.memory_mib, shape.memory_mib)) as u32
    }
}

/// Above this many domains, `is_empty_less` compares only what is in use and the roots.
pub const DENSE_CHECK_DOMAINS: usize = 16_384;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Change {
    host: DomainId,
    pods: u32,
    shape: PodShape,
    /// Taken (else given back): a rollback does the opposite.
    taken: bool,
}

/// A checkpoint in the journal; [`Capacity::rollback`] returns to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    at: usize,
    version: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Capacity {
    /// Indexed by domain id; zero for inner domains.
    node_free: Vec<NodeFree>,
    hist: Vec<u32>,
    free_cpu_milli: Vec<u64>,
    free_memory_mib: Vec<u64>,
    journal: Vec<Change>,
    /// Changes committed (forgotten from the journal) so far: a checkpoint counts from the
    /// first change ever, so one taken before a commit is told apart from one after it.
    committed: usize,
    /// Per cluster, when its capacity last changed, on `clock` (which counts every change):
    /// what was worked out from a cluster's capacity holds while its stamp is the same.
    stamps: Vec<u64>,
    clock: u64,
    /// Which state the capacity is in, on `clock`: every change makes a new one and a rollback
    /// returns to the one it was at, so equal versions of one `Capacity` (and its clones, until
    /// either changes) mean equal capacity, however many tries came and went between.
    version: u64,
}

/// Capacities are equal when they hold the same: not when they changed at the same moments.
impl PartialEq for Capacity {
    fn eq(&self, other: &Self) -> bool {
        self.node_free == other.node_free
            && self.hist == other.hist
            && self.free_cpu_milli == other.free_cpu_milli
            && self.free_memory_mib == other.free_memory_mib
            && self.journal == other.journal
    }
}

impl Eq for Capacity {}

impl Capacity {
    /// Everything free.
    pub fn empty(fleet: &Fleet) -> Self {
        let n = fleet.domains_len();
        let mut cap = Capacity {
            node_free: vec![NodeFree::default(); n],
            hist: vec![0; fleet.hist_len],
            free_cpu_milli: vec![0; n],
            free_memory_mib: vec![0; n],
            journal: Vec::new(),
            committed: 0,
            stamps: vec![0; fleet.clusters().len()],
            clock: 0,
            version: 0,
        };
        for (host, spec) in fleet.hosts() {
            let free = NodeFree { gpus: spec.gpus, cpu_milli: spec.cpu_milli, memory_mib: spec.memory_mib };
            cap.node_free[host.idx()] = free;
            cap.walk_up(fleet, host, |cap, d| {
                cap.free_cpu_milli[d.idx()] += free.cpu_milli;
                cap.free_memory_mib[d.idx()] += free.memory_mib;
            });
            if let Some(row) = cap.row(fleet, host, spec.gpu_flavor) {
                let k = spec.gpus as usize;
                cap.walk_up(fleet, host, |cap, d| cap.hist[fleet.domain(d).hist_offset as usize + row + k] += 1);
            }
        }
        cap
    }

    fn walk_up(&mut self, fleet: &Fleet, from: DomainId, mut f: impl FnMut(&mut Self, DomainId)) {
        let mut cur = Some(from);
        while let Some(d) = cur {
            f(self, d);
            cur = fleet.domain(d).parent;
        }
    }

    /// Offset of a flavor's row inside any domain's histogram of this host's cluster.
    fn row(&self, fleet: &Fleet, host: DomainId, flavor: Option<FlavorId>) -> Option<usize> {
        let c = fleet.cluster(fleet.domain(host).cluster);
        flavor.and_then(|f| c.flavor_row(f)).map(|r| r * c.hist_width as usize)
    }

    pub fn node_free(&self, host: DomainId) -> NodeFree {
        self.node_free[host.idx()]
    }

    pub fn free_cpu_milli(&self, d: DomainId) -> u64 {
        self.free_cpu_milli[d.idx()]
    }

    pub fn free_memory_mib(&self, d: DomainId) -> u64 {
        self.free_memory_mib[d.idx()]
    }

    /// The free-GPU histogram row of `flavor` in domain `d`: entry k counts nodes with k free.
    pub fn histogram(&self, fleet: &Fleet, d: DomainId, flavor: FlavorId) -> &[u32] {
        let c = fleet.cluster(fleet.domain(d).cluster);
        match c.flavor_row(flavor) {
            Some(r) => {
                let start = fleet.domain(d).hist_offset as usize + r * c.hist_width as usize;
                &self.hist[start..start + c.hist_width as usize]
            }
            None => &[],
        }
    }

    /// Free GPUs of `flavor` under `d`.
    pub fn free_gpus(&self, fleet: &Fleet, d: DomainId, flavor: FlavorId) -> u64 {
        self.histogram(fleet, d, flavor).iter().enumerate().map(|(k, &n)| k as u64 * u64::from(n)).sum()
    }

    /// The most GPUs of `flavor` free on any single node under `d`.
    pub fn largest_free(&self, fleet: &Fleet, d: DomainId, flavor: FlavorId) -> u32 {
        self.histogram(fleet, d, flavor).iter().rposition(|&n| n > 0).unwrap_or(0) as u32
    }

    /// An upper bound on how many pods of `shape` fit under `d` on nodes of `flavor`: exact for
    /// GPUs, bounded by the domain's aggregate CPU and memory (exact on a host), and 0 for a pod
    /// larger than every host under `d` (so an empty fleet's bound says such a pod never fits).
    pub fn slots(&self, fleet: &Fleet, d: DomainId, flavor: Option<FlavorId>, shape: &PodShape) -> u32 {
        let dom = fleet.domain(d);
        if let Some(node) = dom.node {
            if shape.gpus > 0 && node.gpu_flavor != flavor {
                return 0;
            }
            return self.node_free[d.idx()].pods(shape);
        }
        if shape.cpu_milli > dom.roomiest_host.cpu_milli || shape.memory_mib > dom.roomiest_host.memory_mib {
            return 0;
        }
        let (cpu_milli, memory_mib) = (self.free_cpu_milli[d.idx()], self.free_memory_mib[d.idx()]);
        if shape.gpus == 0 {
            return NodeFree { gpus: u32::MAX, cpu_milli, memory_mib }.pods(shape);
        }
        let Some(flavor) = flavor else { return 0 };
        // Every search asks this of domain after domain: a node with k free holds k / s pods,
        // counted up as k grows rather than divided entry by entry.
        let s = shape.gpus as usize;
        let (mut pods, mut per_node, mut past) = (0u64, 1u64, 0usize);
        for &n in self.histogram(fleet, d, flavor).iter().skip(s) {
            pods += u64::from(n) * per_node;
            past += 1;
            if past == s {
                (per_node, past) = (per_node + 1, 0);
            }
        }
        // Bounded by the aggregate CPU and memory as one node would be, with the GPUs of the
        // whole pods the histogram holds.
        let gpus = pods.saturating_mul(u64::from(shape.gpus)).min(u64::from(u32::MAX)) as u32;
        NodeFree { gpus, cpu_milli, memory_mib }.pods(shape)
    }

    /// Takes `pods` pods of `shape` from a host. The caller has checked they fit.
    pub fn take(&mut self, fleet: &Fleet, host: DomainId, pods: u32, shape: PodShape) {
        self.journal.push(Change { host, pods, shape, taken: true });
        self.adjust(fleet, host, pods, shape, true);
    }

    /// When `cluster`'s capacity last changed: equal stamps of one `Capacity` (and its clones,
    /// until either changes) mean the cluster's capacity is the same.
    /// (A capacity made without a fleet has no stamps: any change anywhere changes them all.)
    pub fn stamp(&self, cluster: ClusterId) -> u64 {
        self.stamps.get(cluster.idx()).copied().unwrap_or(self.clock)
    }

    /// The state the capacity is in (see `version`).
    pub fn version(&self) -> u64 {
        self.version
    }

    fn adjust(&mut self, fleet: &Fleet, host: DomainId, pods: u32, shape: PodShape, take: bool) {
        self.clock += 1;
        self.version = self.clock;
        if let Some(stamp) = self.stamps.get_mut(fleet.domain(host).cluster.idx()) {
            *stamp = self.clock;
        }
        let before = self.node_free[host.idx()];
        let gpus = shape.gpus * pods;
        let cpu = shape.cpu_milli * u64::from(pods);
        let mem = shape.memory_mib * u64::from(pods);
        let after = if take {
            NodeFree {
                gpus: before.gpus - gpus,
                cpu_milli: before.cpu_milli - cpu,
                memory_mib: before.memory_mib - mem,
            }
        } else {
            NodeFree {
                gpus: before.gpus + gpus,
                cpu_milli: before.cpu_milli + cpu,
                memory_mib: before.memory_mib + mem,
            }
        };
        self.node_free[host.idx()] = after;
        let row = self.row(fleet, host, fleet.domain(host).node.and_then(|n| n.gpu_flavor));
        self.walk_up(fleet, host, |cap, d| {
            let i = d.idx();
            if take {
                cap.free_cpu_milli[i] -= cpu;
                cap.free_memory_mib[i] -= mem;
            } else {
                cap.free_cpu_milli[i] += cpu;
                cap.free_memory_mib[i] += mem;
            }
            if let Some(row) = row {
                let base = fleet.domain(d).hist_offset as usize + row;
                cap.hist[base + before.gpus as usize] -= 1;
                cap.hist[base + after.gpus as usize] += 1;
            }
        });
    }

    /// Returns what a finished or evicted pod held.
    pub fn give_back(&mut self, fleet: &Fleet, host: DomainId, pods: u32, shape: PodShape) {
        self.journal.push(Change { host, pods, shape, taken: false });
        self.adjust(fleet, host, pods, shape, false);
    }

    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint { at: self.committed + self.journal.len(), version: self.version }
    }

    /// Undoes every `take` and `give_back` since the checkpoint, or since the last commit
    /// when the checkpoint is older than that (what was committed stays).
    pub fn rollback(&mut self, fleet: &Fleet, cp: Checkpoint) {
        // Past a commit the journal no longer reaches back to the checkpoint's state, nor may
        // its version be taken for this one's.
        let reaches = cp.at >= self.committed;
        while self.committed + self.journal.len() > cp.at {
            let Some(c) = self.journal.pop() else { break };
            self.adjust(fleet, c.host, c.pods, c.shape, !c.taken);
        }
        if reaches {
            self.version = cp.version;
        }
    }

    /// Forgets the journal: what was taken or given back stays so.
    pub fn commit(&mut self) {
        self.committed += self.journal.len();
        self.journal.clear();
    }

    /// Whether this is the empty fleet with `used` taken (per host, each once: what is in use
    /// there). On a
    /// fleet of up to `DENSE_CHECK_DOMAINS` domains, compared whole; on a larger one, exactly on
    /// every host in use and every domain above one, and at every cluster's root, where any
    /// other difference would show in the totals: that costs the hosts in use times the depth,
    /// not the fleet's size, so it can run after every event on a fleet of 100,000 nodes. A
    /// host using more than it has is never the empty fleet less `used`.
    pub fn is_empty_less(&self, fleet: &Fleet, used: &[(DomainId, NodeFree)]) -> bool {
        // A small fleet is cheapest copied and compared whole.
        if fleet.domains_len() <= DENSE_CHECK_DOMAINS {
            return self.is_empty_less_whole(fleet, used);
        }
        self.is_empty_less_in_use(fleet, used)
    }

    fn is_empty_less_whole(&self, fleet: &Fleet, used: &[(DomainId, NodeFree)]) -> bool {
        let mut expected = fleet.allocatable().clone();
        for (host, u) in used {
            if expected.node_free[host.idx()].less(u).is_none() {
                return false;
            }
            let all = PodShape { gpus: u.gpus, cpu_milli: u.cpu_milli, memory_mib: u.memory_mib };
            expected.adjust(fleet, *host, 1, all, true);
        }
        (&expected.node_free, &expected.hist, &expected.free_cpu_milli, &expected.free_memory_mib)
            == (&self.node_free, &self.hist, &self.free_cpu_milli, &self.free_memory_mib)
    }

    fn is_empty_less_in_use(&self, fleet: &Fleet, used: &[(DomainId, NodeFree)]) -> bool {
        let empty = fleet.allocatable();
        // Per domain: CPU and memory in use under it; per histogram entry: the change in count.
        let mut taken: BTreeMap<DomainId, (u64, u64)> = BTreeMap::new();
        let mut moved: BTreeMap<usize, i64> = BTreeMap::new();
        for &(host, ref u) in used {
            let all = empty.node_free[host.idx()];
            let Some(after) = all.less(u) else { return false };
            if self.node_free[host.idx()] != after {
                return false;
            }
            let row = self.row(fleet, host, fleet.domain(host).node.and_then(|n| n.gpu_flavor));
            let mut cur = Some(host);
            while let Some(d) = cur {
                let t = taken.entry(d).or_default();
                (t.0, t.1) = (t.0 + u.cpu_milli, t.1 + u.memory_mib);
                if let Some(row) = row.filter(|_| u.gpus > 0) {
                    let base = fleet.domain(d).hist_offset as usize + row;
                    *moved.entry(base + all.gpus as usize).or_default() -= 1;
                    *moved.entry(base + after.gpus as usize).or_default() += 1;
                }
                cur = fleet.domain(d).parent;
            }
        }
        for c in fleet.clusters() {
            taken.entry(c.root).or_default();
        }
        taken.iter().all(|(&d, &(cpu, mem))| {
            let i = d.idx();
            let c = fleet.cluster(fleet.domain(d).cluster);
            let start = fleet.domain(d).hist_offset as usize;
            let hist = start..start + c.flavors.len() * c.hist_width as usize;
            empty.free_cpu_milli[i].checked_sub(cpu) == Some(self.free_cpu_milli[i])
                && empty.free_memory_mib[i].checked_sub(mem) == Some(self.free_memory_mib[i])
                && hist
                    .into_iter()
                    .all(|h| i64::from(empty.hist[h]) + moved.get(&h).copied().unwrap_or(0) == i64::from(self.hist[h]))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::uniform_cluster;
    use crate::fleet::FleetBuilder;
    use crate::topology::Level;

    /// A rollback to a checkpoint taken before a commit undoes only what came after the commit,
    /// and does not take the checkpoint's version for a state it is not in; one after the commit
    /// returns to that state and its version.
    #[test]
    fn a_rollback_past_a_commit_keeps_what_was_committed_and_its_version() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 1), (Level::Host, 4)]).expect("cluster");
        let fleet = b.build().expect("fleet");
        let hosts = fleet.clusters()[0].hosts().to_vec();
        let pod = PodShape { gpus: 2, cpu_milli: 1_000, memory_mib: 1_024 };
        let mut cap = Capacity::empty(&fleet);
        let before = cap.checkpoint();
        cap.take(&fleet, hosts[0], 1, pod);
        cap.take(&fleet, hosts[0], 1, pod);
        cap.commit();
        let committed = (cap.clone(), cap.version());
        let after = cap.checkpoint();
        cap.take(&fleet, hosts[1], 1, pod);
        cap.take(&fleet, hosts[2], 1, pod);
        cap.take(&fleet, hosts[3], 1, pod);
        cap.rollback(&fleet, after);
        assert_eq!((cap.clone(), cap.version()), committed, "back to the committed state");
        cap.take(&fleet, hosts[1], 1, pod);
        cap.take(&fleet, hosts[2], 1, pod);
        let moved = cap.version();
        cap.rollback(&fleet, before);
        assert_eq!(cap, committed.0, "what was committed stays taken");
        assert_eq!(cap.node_free(hosts[0]).gpus, 4);
        assert_ne!(cap.version(), before.version, "not the empty fleet's version");
        assert_ne!(cap.version(), moved);
    }

    /// `pods` multiplies where it can; the answer is the definition's, the smallest quotient of
    /// free by asked (an unasked resource bounds nothing), at every edge: nothing free, nothing
    /// asked, a product past `u64`.
    #[test]
    fn pods_are_the_least_quotient_of_free_by_asked() {
        let definition = |free: &NodeFree, shape: &PodShape| {
            let by = |free: u64, need: u64| free.checked_div(need).unwrap_or(u64::from(u32::MAX));
            by(u64::from(free.gpus), u64::from(shape.gpus))
                .min(by(free.cpu_milli, shape.cpu_milli))
                .min(by(free.memory_mib, shape.memory_mib))
                .min(u64::from(u32::MAX)) as u32
        };
        let amounts = [0, 1, 7, 8, 1_000, 2_999, 3_000, u64::from(u32::MAX), u64::MAX];
        for gpus in [0, 1, 3, 8, u32::MAX] {
            for &cpu_milli in &amounts {
                for &memory_mib in &amounts {
                    let free = NodeFree { gpus, cpu_milli, memory_mib };
                    for shape_gpus in [0, 1, 2, 3, 8] {
                        for &(cpu, mem) in &[(0, 0), (1_000, 0), (0, 1), (1_000, 3_000), (u64::MAX, 1)] {
                            let shape = PodShape { gpus: shape_gpus, cpu_milli: cpu, memory_mib: mem };
                            assert_eq!(free.pods(&shape), definition(&free, &shape), "{free:?} {shape:?}");
                        }
                    }
                }
            }
        }
    }

    /// A domain holds, of a pod of s GPUs, k / s on each node with k free, summed over its
    /// nodes, unless its free CPU or memory together hold fewer.
    #[test]
    fn a_domain_holds_whole_pods_per_node_up_to_its_cpu_and_memory() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 1), (Level::Host, 4)]).expect("cluster");
        let fleet = b.build().expect("fleet");
        let flavor = fleet.flavor("h100");
        let hosts = fleet.clusters()[0].hosts().to_vec();
        let rack = fleet.domain(hosts[0]).parent.expect("a rack");
        let one = PodShape { gpus: 1, cpu_milli: 1_000, memory_mib: 1_024 };
        let mut cap = Capacity::empty(&fleet);
        // Free: 8, 5, 3 and 0 GPUs; each host has 96,000 millicores, so 303,000 are left.
        cap.take(&fleet, hosts[1], 3, one);
        cap.take(&fleet, hosts[2], 5, one);
        cap.take(&fleet, hosts[3], 8, one);
        let slots =
            |gpus: u32, cpu_milli: u64| cap.slots(&fleet, rack, flavor, &PodShape { gpus, cpu_milli, memory_mib: 1 });
        assert_eq!(slots(1, 1_000), 16);
        assert_eq!(slots(2, 1_000), 4 + 2 + 1);
        assert_eq!(slots(3, 1_000), 2 + 1 + 1);
        assert_eq!(slots(8, 1_000), 1);
        assert_eq!(slots(9, 1_000), 0, "no node has 9");
        // 303,000 millicores hold 3 pods of 96,000 though the GPUs hold 16 of one.
        assert_eq!(slots(1, 96_000), 3);
        assert_eq!(slots(1, 96_001), 0, "larger than any host");
    }

    /// Both ways of checking agree: on the capacity as it should be, and on each kind of drift.
    #[test]
    fn the_whole_and_the_in_use_checks_agree() {
        let mut b = FleetBuilder::new();
        for name in ["east", "west"] {
            uniform_cluster(&mut b, name, "h100", 8, &[(Level::Rack, 2), (Level::Host, 4)]).expect("cluster");
        }
        let fleet = b.build().expect("fleet");
        let (east, west) = (fleet.clusters()[0].hosts().to_vec(), fleet.clusters()[1].hosts().to_vec());
        let whole = PodShape { gpus: 8, cpu_milli: 4_000, memory_mib: 1_024 };
        let mut tracked = Capacity::empty(&fleet);
        tracked.take(&fleet, east[0], 1, whole);
        tracked.take(&fleet, east[5], 1, PodShape { gpus: 3, ..whole });
        let used = [
            (east[0], NodeFree { gpus: 8, cpu_milli: 4_000, memory_mib: 1_024 }),
            (east[5], NodeFree { gpus: 3, cpu_milli: 4_000, memory_mib: 1_024 }),
        ];
        let both = |cap: &Capacity, used: &[(DomainId, NodeFree)]| {
            (cap.is_empty_less_whole(&fleet, used), cap.is_empty_less_in_use(&fleet, used))
        };
        assert_eq!(both(&tracked, &used), (true, true));
        let mut idle_drift = tracked.clone();
        idle_drift.take(&fleet, west[2], 1, PodShape { gpus: 1, cpu_milli: 0, memory_mib: 0 });
        assert_eq!(both(&idle_drift, &used), (false, false), "a GPU gone on an idle cluster");
        let mut cpu_drift = tracked.clone();
        cpu_drift.take(&fleet, east[7], 1, PodShape { gpus: 0, cpu_milli: 1, memory_mib: 0 });
        assert_eq!(both(&cpu_drift, &used), (false, false), "a milli-CPU gone on a host not in use");
        let mut in_use_drift = tracked.clone();
        in_use_drift.give_back(&fleet, east[5], 1, PodShape { gpus: 1, cpu_milli: 0, memory_mib: 0 });
        assert_eq!(both(&in_use_drift, &used), (false, false), "a GPU too many on a host in use");
        let over = [(east[0], NodeFree { gpus: 9, cpu_milli: 0, memory_mib: 0 })];
        assert_eq!(both(&tracked, &over), (false, false), "more than the host has");
    }
}
