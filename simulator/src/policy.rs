//! The policies the simulator compares, all running through the same engine and the same
//! `scheduler_core::cycle`; a baseline is a core configuration plus, for Volcano, binding a job
//! to a cluster when it is submitted. docs/simulator.md says how faithful each emulation is.

use std::fmt;
use std::str::FromStr;

use scheduler_core::{
    Batch, Capacity, ClusterChoice, Config, Decision, Fill, Fleet, Gang, Patience, Preemption, QueueingStrategy,
    Queues, QuotaUsage, Reservations, ShortFirst, Slowdown, Snapshot, cycle, release,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    /// Ours: every cluster scored by locality, best fit and balance; narrowest domain first;
    /// locality by cost, within its patience.
    Stowage,
    /// Ours with fair sharing: queues admit by weighted dominant-resource share.
    StowageFair,
    /// Ours with the batch optimiser: the head of the queue assigned jointly by an ILP.
    StowageBatch,
    /// Strict FIFO, the cluster with the most free GPUs, hosts in order, no topology.
    FifoFirstFit,
    /// MultiKueue's all-at-once dispatch (the first worker that can admit wins) with Kueue
    /// TAS best-fit inside the cluster, best-effort FIFO, Kueue's preemption where the queues
    /// allow it (`Victims::Kueue`).
    KueueMultiKueue,
    /// MultiKueue's incremental dispatcher: the workers in name order, three more nominated
    /// each 5-minute round a job waits (`incrementaldispatcher.go`), first to admit wins.
    KueueIncremental,
    /// Kueue on the manager queues (best-effort FIFO, Kueue's preemption), and Stowage
    /// nominates the cluster and domain (`--kueue multikueue`): Stowage's placement, locality
    /// by cost and reservations, without Stowage's queueing (Kueue's order, not shorter gangs
    /// first) or preemption.
    StowageAsDispatcher,
    /// A job bound at submit to the least-loaded cluster that could hold it (no cross-cluster
    /// lookahead after that), then gang + bin-packing inside it.
    VolcanoBinpack,
}

impl Policy {
    /// What a run compares unless told otherwise.
    pub const DEFAULT: [Policy; 4] =
        [Policy::Stowage, Policy::FifoFirstFit, Policy::KueueMultiKueue, Policy::VolcanoBinpack];
    pub const ALL: [Policy; 8] = [
        Policy::Stowage,
        Policy::StowageFair,
        Policy::StowageBatch,
        Policy::StowageAsDispatcher,
        Policy::FifoFirstFit,
        Policy::KueueMultiKueue,
        Policy::KueueIncremental,
        Policy::VolcanoBinpack,
    ];
    /// The multi-cluster dispatch a Kueue user chooses between (docs/kueue.md).
    pub const KUEUE: [Policy; 3] = [Policy::KueueMultiKueue, Policy::KueueIncremental, Policy::StowageAsDispatcher];
    /// How long the incremental dispatcher waits before nominating the next workers, and how
    /// many each round (`incrementalDispatcherRoundTimeout`, `batchSize`).
    const ROUND_S: u64 = 300;
    const ROUND_STEP: usize = 3;

    pub fn name(self) -> &'static str {
        match self {
            Policy::Stowage => "stowage",
            Policy::StowageFair => "stowage-fair",
            Policy::StowageBatch => "stowage-batch",
            Policy::FifoFirstFit => "fifo-firstfit",
            Policy::KueueMultiKueue => "kueue-multikueue",
            Policy::KueueIncremental => "kueue-incremental",
            Policy::StowageAsDispatcher => "stowage-as-dispatcher",
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
            // Kueue's dispatchers race the workers (drawn from the run's seed, `config_with`)
            // and preempt as Kueue does, where the queues allow it.
            Policy::KueueMultiKueue | Policy::KueueIncremental => Config {
                preemption: Some(Preemption::KUEUE),
                ..Config::baseline(
                    ClusterChoice::Race { seed: 0 },
                    Fill::Locality,
                    Some(QueueingStrategy::BestEffortFifo),
                )
            },
            Policy::StowageAsDispatcher => Config {
                strategy: Some(QueueingStrategy::BestEffortFifo),
                preemption: Some(Preemption::KUEUE),
                short_first: None,
                ..Config::stowage()
            },
            Policy::VolcanoBinpack => {
                Config::baseline(ClusterChoice::InOrder, Fill::BinPack, Some(QueueingStrategy::BestEffortFifo))
            }
        }
    }

    /// The core configuration with the run's locality, reservation and order settings (only
    /// policies that have them, ours, take them: no peer holds a gang for locality, reserves
    /// for it or orders it by its run time), and MultiKueue's race drawn from the run's seed.
    pub fn config_with(
        self,
        patience: Option<Patience>,
        locality_cost: Option<Slowdown>,
        reservations: Option<Reservations>,
        short_first: Option<ShortFirst>,
        seed: u64,
    ) -> Config {
        let mut c = self.config();
        if let ClusterChoice::Race { .. } = c.choice {
            // Apart from the draws the seed makes elsewhere (a synthetic trace, failures).
            c.choice = ClusterChoice::Race { seed: seed ^ 0x6D75_6C74_696B_7565 };
        }
        if c.patience.is_some() {
            c.patience = patience;
        }
        if c.locality_cost.is_some() {
            c.locality_cost = locality_cost;
        }
        if c.reservations.is_some() {
            c.reservations = reservations;
        }
        if c.short_first.is_some() {
            c.short_first = short_first;
        }
        c
    }

    /// Whether it widens a waiting gang's clusters as time passes (`nominated`).
    pub fn nominates(self) -> bool {
        self == Policy::KueueIncremental
    }

    /// The clusters a waiting gang may go to at `now_ms`, for a policy that widens them as it
    /// waits (MultiKueue's incremental dispatcher: three more, in name order, each round since
    /// it was submitted); `None`: any.
    pub fn nominated(self, fleet: &Fleet, gang: &Gang, now_ms: u64) -> Option<Vec<String>> {
        if !self.nominates() {
            return None;
        }
        let rounds = now_ms.saturating_sub(gang.submitted_ms) / (Self::ROUND_S * 1000);
        let count = usize::try_from(rounds).unwrap_or(usize::MAX).saturating_add(1).saturating_mul(Self::ROUND_STEP);
        let mut names: Vec<String> = fleet.clusters().iter().map(|c| c.name.clone()).collect();
        names.sort();
        names.truncate(count);
        Some(names)
    }

    /// The cluster a job is bound to when it arrives, for a policy that binds then (Volcano
    /// behind a multi-cluster spreader, as Karmada's): among the clusters where the gang could
    /// run on an empty fleet, the one with the most free GPUs less those already bound there
    /// and still waiting (a spreader that remembers what it sent). `None`: not bound, or fits
    /// nowhere (it then fails on its own, with its reason).
    /// `empty` is the empty fleet's capacity, lent to each probe and returned as it was: a copy
    /// per probe would cost the fleet's size per arrival.
    #[allow(clippy::too_many_arguments)] // the spreader's view: fleet, queues, now and empty
    pub fn bind_at_submit(
        self,
        fleet: &Fleet,
        queues: &Queues,
        capacity: &Capacity,
        empty: &mut Capacity,
        bound_gpus: &dyn Fn(&str) -> u64,
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
            let snapshot = Snapshot::at(fleet, queues, std::mem::take(empty), QuotaUsage::default(), gang.submitted_ms);
            let mut out = cycle(snapshot, std::slice::from_ref(&probe), config);
            let fits = match out.decisions.first() {
                Some(Decision::Admit(a)) => {
                    release(fleet, queues, &mut out.capacity, &mut out.usage, &probe, a);
                    out.capacity.commit();
                    true
                }
                _ => false,
            };
            *empty = out.capacity;
            debug_assert!(empty == fleet.allocatable(), "a probe returns the empty fleet as it was");
            if fits {
                let free: u64 = c.flavors.iter().map(|&f| capacity.free_gpus(fleet, c.root, f)).sum();
                let load = free as i64 - bound_gpus(&c.name) as i64;
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
    "unknown policy {0:?} (expected stowage, stowage-fair, stowage-batch, stowage-as-dispatcher, fifo-firstfit, kueue-multikueue, kueue-incremental or volcano-binpack)"
)]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL.into_iter().find(|p| p.name() == s.trim()).ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::fixture::{gang, uniform_cluster};
    use scheduler_core::{FleetBuilder, Level};

    #[test]
    fn the_incremental_dispatcher_offers_three_more_workers_in_name_order_each_five_minutes() {
        let mut b = FleetBuilder::new();
        for name in ["e", "d", "c", "b", "a"] {
            uniform_cluster(&mut b, name, "h100", 8, &[(Level::Host, 1)]).expect("cluster");
        }
        let fleet = b.build().expect("fleet");
        let mut g = gang("g");
        g.submitted_ms = 60_000;
        let at = |s: u64| Policy::KueueIncremental.nominated(&fleet, &g, s * 1000);
        let names = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(at(60), names(&["a", "b", "c"]));
        assert_eq!(at(359), names(&["a", "b", "c"]));
        assert_eq!(at(360), names(&["a", "b", "c", "d", "e"]));
        for p in [Policy::KueueMultiKueue, Policy::StowageAsDispatcher, Policy::Stowage] {
            assert_eq!(p.nominated(&fleet, &g, 0), None, "{p}");
        }
    }
}
