//! The policies the simulator compares, all running through the same engine and the same
//! `scheduler_core::cycle`; a baseline is a core configuration plus, for Volcano, binding a job
//! to a cluster when it is submitted. docs/simulator.md says how faithful each emulation is.

use std::fmt;
use std::str::FromStr;

use scheduler_core::{
    Batch, Capacity, ClusterChoice, Config, Decision, Fill, Fleet, Gang, Patience, QueueingStrategy, Queues,
    QuotaUsage, Snapshot, cycle,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// Ours: every cluster scored by locality, best fit and balance; narrowest domain first;
    /// locality patience.
    Stowage,
    /// Ours with fair sharing: queues admit by weighted dominant-resource share.
    StowageFair,
    /// Ours with the batch optimiser: the head of the queue assigned jointly by an ILP.
    StowageBatch,
    /// Strict FIFO, the cluster with the most free GPUs, hosts in order, no topology.
    FifoFirstFit,
    /// MultiKueue's all-at-once dispatch (the first worker that can admit wins) with Kueue
    /// TAS best-fit inside the cluster, best-effort FIFO.
    KueueMultiKueue,
    /// A job bound at submit to the least-loaded cluster that could hold it (no cross-cluster
    /// lookahead after that), then gang + bin-packing inside it.
    VolcanoBinpack,
}

impl Policy {
    /// What a run compares unless told otherwise.
    pub const DEFAULT: [Policy; 4] =
        [Policy::Stowage, Policy::FifoFirstFit, Policy::KueueMultiKueue, Policy::VolcanoBinpack];
    pub const ALL: [Policy; 6] = [
        Policy::Stowage,
        Policy::StowageFair,
        Policy::StowageBatch,
        Policy::FifoFirstFit,
        Policy::KueueMultiKueue,
        Policy::VolcanoBinpack,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Stowage => "stowage",
            Policy::StowageFair => "stowage-fair",
            Policy::StowageBatch => "stowage-batch",
            Policy::FifoFirstFit => "fifo-firstfit",
            Policy::KueueMultiKueue => "kueue-multikueue",
            Policy::VolcanoBinpack => "volcano-binpack",
        }
    }

    pub fn config(self) -> Config {
        match self {
            Policy::Stowage => Config::stowage(),
            Policy::StowageFair => Config { fair_sharing: true, ..Config::stowage() },
            Policy::StowageBatch => Config { batch: Some(Batch::DEFAULT), ..Config::stowage() },
            Policy::FifoFirstFit => {
                Config::baseline(ClusterChoice::MostFree, Fill::FirstFit, Some(QueueingStrategy::StrictFifo))
            }
            Policy::KueueMultiKueue => {
                Config::baseline(ClusterChoice::InOrder, Fill::Locality, Some(QueueingStrategy::BestEffortFifo))
            }
            Policy::VolcanoBinpack => {
                Config::baseline(ClusterChoice::InOrder, Fill::BinPack, Some(QueueingStrategy::BestEffortFifo))
            }
        }
    }

    /// The core configuration with the run's locality patience (only policies that have one,
    /// ours, take it: no peer holds a gang for locality).
    pub fn config_with(self, patience: Option<Patience>) -> Config {
        let mut c = self.config();
        if c.patience.is_some() {
            c.patience = patience;
        }
        c
    }

    /// The cluster a job is bound to when it arrives, for a policy that binds then (Volcano
    /// behind a multi-cluster spreader, as Karmada's): among the clusters where the gang could
    /// run on an empty fleet, the one with the most free GPUs less those already bound there
    /// and still waiting (a spreader that remembers what it sent). `None`: not bound, or fits
    /// nowhere (it then fails on its own, with its reason).
    pub fn bind_at_submit(
        self,
        fleet: &Fleet,
        queues: &Queues,
        capacity: &Capacity,
        pending: &[Gang],
        gang: &Gang,
        config: &Config,
    ) -> Option<String> {
        if self != Policy::VolcanoBinpack {
            return None;
        }
        let mut best: Option<(i64, String)> = None;
        for c in fleet.clusters() {
            let mut probe = gang.clone();
            probe.clusters.only = Some(vec![c.name.clone()]);
            let empty = Snapshot {
                fleet,
                queues,
                capacity: fleet.allocatable().clone(),
                usage: QuotaUsage::default(),
                now_ms: gang.submitted_ms,
                releases: Vec::new(),
                running: Vec::new(),
            };
            let fits = matches!(
                cycle(empty, std::slice::from_ref(&probe), config).decisions.first(),
                Some(Decision::Admit(_))
            );
            if fits {
                let free: u64 = c.flavors.iter().map(|&f| capacity.free_gpus(fleet, c.root, f)).sum();
                let bound: u64 = pending
                    .iter()
                    .filter(|g| g.clusters.only.as_deref() == Some(std::slice::from_ref(&c.name)))
                    .map(Gang::total_gpus)
                    .sum();
                let load = free as i64 - bound as i64;
                if best.as_ref().is_none_or(|(b, _)| load > *b) {
                    best = Some((load, c.name.clone()));
                }
            }
        }
        best.map(|b| b.1)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown policy {0:?} (expected stowage, stowage-fair, stowage-batch, fifo-firstfit, kueue-multikueue or volcano-binpack)"
)]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL.into_iter().find(|p| p.name() == s.trim()).ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}
