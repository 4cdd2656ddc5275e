//! Builders for tests, benches and examples: uniform clusters and gangs in a line each.
//! Not used by the scheduler itself.

use std::collections::BTreeMap;

use crate::capacity::PodShape;
use crate::fleet::{FleetBuilder, FleetError, LevelInfo, NodeInput};
use crate::gang::{ClusterFilter, Gang, PodSet};
use crate::nodes::{NodeClass, NodeRequirement};
use crate::topology::{Level, TopologyConstraint};

/// Adds a cluster of identical nodes laid out by `fanout` (widest first, e.g.
/// `[(Block, 2), (Rack, 4), (Host, 4)]`: 2 blocks of 4 racks of 4 hosts). Domain names are
/// `b0`, `b0-r1`, `b0-r1-h3`: unique within the cluster, readable in paths.
pub fn uniform_cluster(
    b: &mut FleetBuilder,
    name: &str,
    flavor: &str,
    gpus: u32,
    fanout: &[(Level, u32)],
) -> Result<(), FleetError> {
    let levels: Vec<LevelInfo> =
        fanout.iter().map(|&(l, _)| LevelInfo { level: l, label: l.default_label().to_string() }).collect();
    let id = b.cluster(name, &levels, BTreeMap::new(), 0)?;
    let total: u32 = fanout.iter().map(|f| f.1).product();
    for n in 0..total {
        let mut path = Vec::with_capacity(fanout.len());
        let mut rest = n;
        let mut divisor = total;
        let mut prefix = String::new();
        for &(level, count) in fanout {
            divisor /= count;
            let idx = rest / divisor;
            rest %= divisor;
            let tag = &level.as_str()[..1];
            prefix = if prefix.is_empty() { format!("{tag}{idx}") } else { format!("{prefix}-{tag}{idx}") };
            path.push(prefix.clone());
        }
        b.node(
            id,
            NodeInput {
                path,
                gpu_flavor: (gpus > 0).then_some(flavor),
                class: NodeClass::default(),
                gpus,
                cpu_milli: u64::from(gpus.max(1)) * 12_000,
                memory_mib: u64::from(gpus.max(1)) * 96 * 1024,
            },
        )?;
    }
    Ok(())
}

/// A one-pod-set gang named `id` in queue `default`; chain the setters.
pub fn gang(id: &str) -> Gang {
    Gang {
        id: id.into(),
        queue: "default".into(),
        priority: 0,
        submitted_ms: 0,
        runtime_ms: None,
        pod_sets: vec![PodSet {
            name: "node".into(),
            pods: 1,
            shape: PodShape { gpus: 1, cpu_milli: 1000, memory_mib: 1024 },
            flavors: Vec::new(),
            nodes: NodeRequirement::default(),
            topology: TopologyConstraint::Unconstrained,
            slice: None,
        }],
        clusters: ClusterFilter::default(),
    }
}

/// Setters for the first pod set and the gang, for readable scenarios.
pub trait GangExt: Sized {
    fn pods(self, n: u32) -> Self;
    fn gpus(self, n: u32) -> Self;
    fn required(self, l: Level) -> Self;
    fn preferred(self, l: Level) -> Self;
    fn flavor(self, f: &str) -> Self;
    fn queue(self, q: &str) -> Self;
    fn priority(self, p: i32) -> Self;
    fn submitted(self, ms: u64) -> Self;
    fn runtime(self, ms: u64) -> Self;
}

impl GangExt for Gang {
    fn pods(mut self, n: u32) -> Self {
        self.pod_sets[0].pods = n;
        self
    }
    fn gpus(mut self, n: u32) -> Self {
        self.pod_sets[0].shape.gpus = n;
        self
    }
    fn required(mut self, l: Level) -> Self {
        self.pod_sets[0].topology = TopologyConstraint::Required(l);
        self
    }
    fn preferred(mut self, l: Level) -> Self {
        self.pod_sets[0].topology = TopologyConstraint::Preferred(l);
        self
    }
    fn flavor(mut self, f: &str) -> Self {
        self.pod_sets[0].flavors = vec![f.into()];
        self
    }
    fn queue(mut self, q: &str) -> Self {
        self.queue = q.into();
        self
    }
    fn priority(mut self, p: i32) -> Self {
        self.priority = p;
        self
    }
    fn submitted(mut self, ms: u64) -> Self {
        self.submitted_ms = ms;
        self
    }
    fn runtime(mut self, ms: u64) -> Self {
        self.runtime_ms = Some(ms);
        self
    }
}

/// Greedy placement with Stowage's cluster scoring and locality fill, and none of its
/// additions (patience, reservations, preemption, batch): what scenario tests assume unless
/// they say otherwise.
pub fn greedy() -> crate::Config {
    crate::Config::baseline(crate::ClusterChoice::Scored, crate::Fill::Locality, None)
}

/// Contended windows for the batch optimiser (`benches/batch.rs`, and a scenario test): a
/// fleet three quarters used, with its free GPUs mostly in pieces smaller than a host, and
/// gangs of mixed sizes and locality levels waiting for it.
pub mod contended {
    use super::{GangExt, XorShift, gang, uniform_cluster};
    use crate::capacity::{Capacity, PodShape};
    use crate::fleet::{Fleet, FleetBuilder};
    use crate::gang::Gang;
    use crate::topology::Level;

    /// `clusters` clusters of 2 blocks × 4 racks × 8 hosts × 8 H100s.
    pub fn fleet(clusters: usize) -> Fleet {
        let mut b = FleetBuilder::new();
        for c in 0..clusters {
            let fanout = [(Level::Block, 2), (Level::Rack, 4), (Level::Host, 8)];
            uniform_cluster(&mut b, &format!("c{c}"), "h100", 8, &fanout).expect("a valid layout");
        }
        b.build().expect("a valid fleet")
    }

    /// The capacity and `n` waiting gangs of instance `seed`. Hosts: 60 % full, 25 % partly
    /// (1–7 GPUs of 8 taken), 15 % free. Gangs: a third single pods of 1–4 GPUs (with
    /// `singles`), a quarter pairs of 2- or 4-GPU pods that prefer a host or a rack, a quarter
    /// 2–4 pods of 8 GPUs that prefer a rack, the rest 2–8 pods of 8 GPUs that require a
    /// block. Without `singles` every gang is multi-node: nothing small fills the gaps
    /// greedy leaves.
    pub fn window(fleet: &Fleet, seed: u64, n: usize, singles: bool) -> (Capacity, Vec<Gang>) {
        let mut rng = XorShift(0xD1B5_4A32_D192_ED03 ^ seed);
        let mut cap = Capacity::empty(fleet);
        let one = PodShape { gpus: 1, cpu_milli: 0, memory_mib: 0 };
        for (host, _) in fleet.hosts() {
            let used = match rng.draw() % 20 {
                0..=11 => 8,
                12..=16 => 1 + (rng.draw() % 7) as u32,
                _ => 0,
            };
            if used > 0 {
                cap.take(fleet, host, used, one);
            }
        }
        cap.commit();
        let first = if singles { 0 } else { 4 };
        let gangs = (0..n)
            .map(|i| {
                let r = rng.draw();
                let g = gang(&format!("g{i:04}")).submitted(i as u64);
                let pick = (r >> 8) as u32;
                match first + r % (12 - first) {
                    0..=3 => g.gpus(1 + pick % 4),
                    4..=6 => {
                        let level = [Level::Host, Level::Rack][(pick >> 4) as usize % 2];
                        g.pods(2).gpus([2, 4][pick as usize % 2]).preferred(level)
                    }
                    7..=9 => g.pods(2 + pick % 3).gpus(8).preferred(Level::Rack),
                    _ => g.pods(2 + pick % 7).gpus(8).required(Level::Block),
                }
            })
            .collect();
        (cap, gangs)
    }
}

/// A seeded xorshift stream: benches and tests draw the same instances on every machine.
#[derive(Debug, Clone)]
pub struct XorShift(pub u64);

impl XorShift {
    pub fn draw(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
