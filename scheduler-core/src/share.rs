//! GPU sharing: pods that ask for a share of one GPU (in milli-GPU) or for whole GPUs on one
//! node, placed on nodes whose GPUs are tracked one by one, and the fragmentation measure of
//! Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
//! Gradient Descent" (FGD, USENIX ATC'23).
//!
//! A node's fragmentation, for a target workload (the pod shapes expected, with their
//! frequencies), is the GPU capacity those pods could not use there: all of its idle GPU for a
//! shape that cannot run on it at all (wrong model, too little CPU, too few fitting GPUs, or
//! no GPU wanted), else the pieces of GPUs too small for the shape. FGD puts each pod where
//! fragmentation grows least. Pure: the one random choice (the `Random` baseline's) is made by
//! the caller's seeded `pick`; every other tie goes to the first node in the fleet's order.

use std::cmp::Reverse;
use std::collections::BTreeMap;

/// Milli-GPU in one whole GPU.
pub const WHOLE: u32 = 1000;

/// What a pod asks for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ask {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// GPUs, all on one node: 0 (CPU only), 1 (whole or shared) or more (whole).
    pub gpus: u32,
    /// Per GPU: below `WHOLE` only when `gpus` is 1 (a share of one GPU).
    pub milli: u32,
    /// GPU models it accepts (sorted, deduplicated); empty: any.
    pub models: Vec<u16>,
}

impl Ask {
    pub fn total_milli(&self) -> u64 {
        u64::from(self.gpus) * u64::from(self.milli)
    }

    fn accepts(&self, model: Option<u16>) -> bool {
        self.gpus == 0 || model.is_some_and(|m| self.models.is_empty() || self.models.binary_search(&m).is_ok())
    }
}

/// What a node has free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub model: Option<u16>,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// Free milli-GPU of each GPU, in device order.
    pub gpus: Vec<u32>,
}

impl Node {
    pub fn idle_milli(&self) -> u64 {
        self.gpus.iter().map(|&g| u64::from(g)).sum()
    }

    /// GPUs with at least `milli` free.
    fn fitting(&self, milli: u32) -> usize {
        self.gpus.iter().filter(|&&g| g >= milli).count()
    }

    pub fn fits(&self, ask: &Ask) -> bool {
        self.cpu_milli >= ask.cpu_milli
            && self.memory_mib >= ask.memory_mib
            && ask.accepts(self.model)
            && (ask.gpus == 0 || self.fitting(ask.milli) >= ask.gpus as usize)
    }

    /// Takes `ask` with the GPUs `devices` (one per GPU asked).
    pub fn take(&mut self, ask: &Ask, devices: &[usize]) {
        self.cpu_milli -= ask.cpu_milli;
        self.memory_mib -= ask.memory_mib;
        for &d in devices {
            self.gpus[d] -= ask.milli;
        }
    }

    /// FGD's fragmentation of this node for `workload`, in milli-GPU.
    pub fn frag(&self, workload: &Workload) -> f64 {
        let idle = self.idle_milli() as f64;
        workload
            .shapes
            .iter()
            .map(|(t, p)| {
                let usable = t.gpus > 0
                    && t.accepts(self.model)
                    && self.cpu_milli >= t.cpu_milli
                    && self.fitting(t.milli) >= t.gpus as usize;
                if usable {
                    p * self.gpus.iter().filter(|&&g| g < t.milli).map(|&g| f64::from(g)).sum::<f64>()
                } else {
                    p * idle
                }
            })
            .sum()
    }
}

/// The target workload: pod shapes and how often each occurs (summing to 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub shapes: Vec<(Ask, f64)>,
}

impl Workload {
    /// The most frequent shapes among `asks` (memory aside, as FGD's authors do) until they
    /// cover `coverage` (0–1) of the pods, their frequencies renormalised. Ties in frequency go
    /// to the larger shape first, so the set does not depend on input order.
    pub fn typical(asks: &[Ask], coverage: f64) -> Self {
        let mut counts: BTreeMap<Ask, u64> = BTreeMap::new();
        for a in asks {
            *counts.entry(Ask { memory_mib: 0, ..a.clone() }).or_default() += 1;
        }
        let mut by_count: Vec<(Ask, u64)> = counts.into_iter().collect();
        by_count.sort_by(|a, b| {
            (Reverse(a.1), Reverse((a.0.cpu_milli, a.0.milli, a.0.gpus, &a.0.models)))
                .cmp(&(Reverse(b.1), Reverse((b.0.cpu_milli, b.0.milli, b.0.gpus, &b.0.models))))
        });
        let total = asks.len().max(1) as f64;
        let mut covered = 0u64;
        let mut shapes = Vec::new();
        for (ask, n) in by_count {
            if covered as f64 >= coverage * total {
                break;
            }
            covered += n;
            shapes.push((ask, n as f64));
        }
        let sum: f64 = shapes.iter().map(|s| s.1).sum();
        Workload { shapes: shapes.into_iter().map(|(a, n)| (a, n / sum)).collect() }
    }
}

/// How a pod's node and GPUs are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SharePolicy {
    /// Any node where it fits; a shared pod on any GPU with room.
    Random,
    /// Least CPU and GPU left over (the FGD paper's BestFit, scored as its authors' simulator
    /// does: an integer score normalised to 0–100); a shared pod on the fullest GPU it fits.
    BestFit,
    /// FGD as its authors' simulator scores it: the fragmentation change through a sigmoid,
    /// truncated to an integer 0–100; the GPU of a shared pod chosen the same way.
    Fgd,
    /// Stowage: FGD's score, then the node with the fewest GPUs, so that large nodes stay whole
    /// for multi-GPU pods while small ones are as good.
    Stowage,
}

impl SharePolicy {
    pub const ALL: [SharePolicy; 4] =
        [SharePolicy::Random, SharePolicy::BestFit, SharePolicy::Fgd, SharePolicy::Stowage];

    pub fn name(self) -> &'static str {
        match self {
            SharePolicy::Random => "random",
            SharePolicy::BestFit => "bestfit",
            SharePolicy::Fgd => "fgd",
            SharePolicy::Stowage => "stowage",
        }
    }
}

/// Where a pod goes: the node and its GPU devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub node: usize,
    pub devices: Vec<usize>,
}

/// Places `ask` on `nodes` under `policy`. `frag` holds each node's current fragmentation for
/// `workload` (the caller updates it for the node it changes); `pick(n)` returns a random index
/// below `n`, for `Random`. Ties otherwise go to the first node: the authors' published figures
/// are reproduced that way, not with random tie-breaks (docs/policy.md). `None`: it fits nowhere.
pub fn place(
    nodes: &[Node],
    ask: &Ask,
    policy: SharePolicy,
    workload: &Workload,
    frag: &[f64],
    pick: &mut dyn FnMut(usize) -> usize,
) -> Option<Choice> {
    let feasible: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].fits(ask)).collect();
    if feasible.is_empty() {
        return None;
    }
    match policy {
        SharePolicy::Random => {
            let node = feasible[pick(feasible.len())];
            let devices = if ask.gpus == 1 && ask.milli < WHOLE {
                let room: Vec<usize> =
                    (0..nodes[node].gpus.len()).filter(|&d| nodes[node].gpus[d] >= ask.milli).collect();
                vec![room[pick(room.len())]]
            } else {
                lowest_free(&nodes[node], ask)
            };
            Some(Choice { node, devices })
        }
        SharePolicy::BestFit => {
            let raw: Vec<i64> = feasible.iter().map(|&i| best_fit_raw(&nodes[i], ask)).collect();
            let (lo, hi) = (raw.iter().copied().min()?, raw.iter().copied().max()?);
            let score = |s: i64| if hi == lo { 0 } else { (s - lo) * 100 / (hi - lo) };
            let (_, k) = raw.iter().enumerate().map(|(k, &s)| (Reverse(score(s)), k)).min()?;
            let node = feasible[k];
            Some(Choice { node, devices: fullest_fitting(&nodes[node], ask) })
        }
        SharePolicy::Fgd | SharePolicy::Stowage => feasible
            .iter()
            .map(|&i| {
                let (score, devices) = fgd_truncated(&nodes[i], ask, workload, frag[i]);
                let size = if policy == SharePolicy::Stowage { nodes[i].gpus.len() } else { 0 };
                ((Reverse(score), size, i), devices)
            })
            .min_by(|a, b| a.0.cmp(&b.0))
            .map(|((_, _, node), devices)| Choice { node, devices }),
    }
}

/// Whole GPUs: the lowest-numbered free devices (as the authors' simulator assigns them).
fn lowest_free(node: &Node, ask: &Ask) -> Vec<usize> {
    (0..node.gpus.len()).filter(|&d| node.gpus[d] >= ask.milli).take(ask.gpus as usize).collect()
}

/// A share goes to the fitting GPU with least free (first on ties); whole GPUs to the lowest free.
fn fullest_fitting(node: &Node, ask: &Ask) -> Vec<usize> {
    if ask.gpus == 1 && ask.milli < WHOLE {
        let best = (0..node.gpus.len()).filter(|&d| node.gpus[d] >= ask.milli).min_by_key(|&d| (node.gpus[d], d));
        return best.into_iter().collect();
    }
    lowest_free(node, ask)
}

/// BestFit's raw score: 100 × (1 − mean share of CPU and GPU left over), truncated.
fn best_fit_raw(node: &Node, ask: &Ask) -> i64 {
    let cpu_left = (node.cpu_milli - ask.cpu_milli) as f64 / 128_000.0;
    let gpu_left = (node.idle_milli() - ask.total_milli()) as f64 / 8_000.0;
    ((1.0 - (0.5 * cpu_left + 0.5 * gpu_left)) * 100.0) as i64
}

/// The node's fragmentation with `ask` placed on `devices`.
fn frag_after(node: &Node, ask: &Ask, devices: &[usize], workload: &Workload) -> f64 {
    let mut after = node.clone();
    after.take(ask, devices);
    after.frag(workload)
}

/// The candidate device sets: each distinct free amount among GPUs a share fits (the first
/// such GPU; GPUs with equal free amounts score the same), or the lowest free whole GPUs.
fn device_options(node: &Node, ask: &Ask) -> Vec<Vec<usize>> {
    if ask.gpus == 1 && ask.milli < WHOLE {
        let mut seen: Vec<u32> = Vec::new();
        let mut options = Vec::new();
        for d in 0..node.gpus.len() {
            let free = node.gpus[d];
            if free >= ask.milli && !seen.contains(&free) {
                seen.push(free);
                options.push(vec![d]);
            }
        }
        return options;
    }
    vec![lowest_free(node, ask)]
}

/// FGD as its authors score it: max over device options of ⌊100·σ((before − after)/1000)⌋, the
/// first option winning ties.
fn fgd_truncated(node: &Node, ask: &Ask, workload: &Workload, before: f64) -> (i64, Vec<usize>) {
    let mut best: Option<(i64, Vec<usize>)> = None;
    for devices in device_options(node, ask) {
        let x = (before - frag_after(node, ask, &devices, workload)) / 1000.0;
        let score = (100.0 / (1.0 + (-x).exp())) as i64;
        if best.as_ref().is_none_or(|b| score > b.0) {
            best = Some((score, devices));
        }
    }
    best.unwrap_or((0, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(gpus: &[u32]) -> Node {
        Node { model: Some(0), cpu_milli: 96_000, memory_mib: 1 << 20, gpus: gpus.to_vec() }
    }

    fn share(milli: u32) -> Ask {
        Ask { cpu_milli: 4_000, memory_mib: 1024, gpus: 1, milli, models: Vec::new() }
    }

    fn whole(gpus: u32) -> Ask {
        Ask { cpu_milli: 8_000, memory_mib: 1024, gpus, milli: WHOLE, models: Vec::new() }
    }

    #[test]
    fn fragmentation_counts_pieces_too_small_for_the_shape_or_everything_when_it_cannot_run() {
        let half = Workload { shapes: vec![(share(500), 1.0)] };
        // 300 and 200 are too small for a half GPU; the whole GPU and the 600 are not.
        assert_eq!(node(&[1000, 600, 300, 200]).frag(&half), 500.0);
        let two = Workload { shapes: vec![(whole(2), 1.0)] };
        // Only one whole GPU: a 2-GPU pod cannot run, so all 2100 idle milli are stranded.
        assert_eq!(node(&[1000, 600, 300, 200]).frag(&two), 2100.0);
        let cpu_only = Workload { shapes: vec![(whole(0), 1.0)] };
        assert_eq!(node(&[1000, 0]).frag(&cpu_only), 1000.0, "a CPU-only shape strands every idle GPU");
        let mixed = Workload { shapes: vec![(share(500), 0.5), (whole(2), 0.5)] };
        assert_eq!(node(&[1000, 600, 300, 200]).frag(&mixed), 0.5 * 500.0 + 0.5 * 2100.0);
        let wrong_model = Workload { shapes: vec![(Ask { models: vec![7], ..share(100) }, 1.0)] };
        assert_eq!(node(&[1000]).frag(&wrong_model), 1000.0);
    }

    #[test]
    fn the_typical_workload_keeps_the_most_frequent_shapes_up_to_the_coverage() {
        let asks: Vec<Ask> = [vec![share(500); 6], vec![whole(1); 3], vec![whole(8); 1]].concat();
        let w = Workload::typical(&asks, 0.9);
        let shapes: Vec<(u32, u32, f64)> = w.shapes.iter().map(|(a, p)| (a.gpus, a.milli, *p)).collect();
        assert_eq!(shapes, [(1, 500, 6.0 / 9.0), (1, 1000, 3.0 / 9.0)]);
    }

    #[test]
    fn fgd_puts_a_share_where_it_strands_least_and_fills_partly_used_gpus_first() {
        let w = Workload { shapes: vec![(share(500), 0.5), (whole(1), 0.5)] };
        // Node 0 has a half-used GPU the share fills exactly; node 1 is empty.
        let nodes = [node(&[500, 1000]), node(&[1000, 1000])];
        let frag: Vec<f64> = nodes.iter().map(|n| n.frag(&w)).collect();
        for policy in [SharePolicy::Fgd, SharePolicy::Stowage] {
            let c = place(&nodes, &share(500), policy, &w, &frag, &mut |_| 0).expect("fits");
            assert_eq!(c, Choice { node: 0, devices: vec![0] }, "{policy:?}");
        }
        // BestFit agrees here; Random may go anywhere its pick says.
        let c = place(&nodes, &share(500), SharePolicy::BestFit, &w, &frag, &mut |_| 0).expect("fits");
        assert_eq!(c.node, 0);
        let c = place(&nodes, &share(500), SharePolicy::Random, &w, &frag, &mut |n| n - 1).expect("fits");
        assert_eq!(c, Choice { node: 1, devices: vec![1] });
    }

    #[test]
    fn stowage_breaks_fgd_ties_toward_the_smaller_node_and_fgd_toward_the_first() {
        let w = Workload { shapes: vec![(whole(1), 1.0)] };
        let nodes = [node(&[1000; 8]), node(&[1000, 1000])];
        let frag: Vec<f64> = nodes.iter().map(|n| n.frag(&w)).collect();
        let at = |policy| place(&nodes, &whole(1), policy, &w, &frag, &mut |_| 0).expect("fits").node;
        assert_eq!((at(SharePolicy::Fgd), at(SharePolicy::Stowage)), (0, 1));
    }

    #[test]
    fn nothing_is_placed_where_cpu_memory_model_or_gpus_do_not_fit() {
        let w = Workload { shapes: vec![(whole(1), 1.0)] };
        let mut small = node(&[1000, 1000]);
        small.cpu_milli = 1_000;
        let frag = [small.frag(&w)];
        assert_eq!(place(&[small.clone()], &whole(1), SharePolicy::Stowage, &w, &frag, &mut |_| 0), None);
        let wrong = Ask { models: vec![3], ..share(100) };
        assert!(!node(&[1000]).fits(&wrong));
        assert!(!node(&[1000, 400]).fits(&whole(2)), "two GPUs must both be whole");
        assert!(node(&[400]).fits(&share(400)));
        let mut n = node(&[1000, 1000]);
        n.take(&share(300), &[1]);
        assert_eq!(n.gpus, [1000, 700]);
        assert_eq!(n.cpu_milli, 92_000);
    }
}
