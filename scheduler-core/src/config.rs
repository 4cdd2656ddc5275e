//! How a cycle decides: the policy knobs, in one value. There is no `Default`: a caller says
//! which policy it means, Stowage's own ([`Config::stowage`]) or a peer's ([`Config::baseline`]).

use crate::gang::{Gang, PodSet};
use crate::place::Fill;
use crate::queue::QueueingStrategy;
use crate::topology::{Level, TopologyConstraint};

/// How a gang picks among the clusters where it fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterChoice {
    /// Try every candidate; best locality, then least left over in the span (best fit), then
    /// the admin's cost weight, then most free GPUs (balance).
    Scored,
    /// The cluster with the most free GPUs of the flavor, first that fits.
    MostFree,
    /// Clusters in fleet order, first that fits.
    InOrder,
    /// MultiKueue's race: a copy goes to every worker and the first to admit wins. The manager
    /// takes the earliest `Admitted` transition (`bestMatchByCondition`, stamped to the second,
    /// ties in Go's map order, as are the copies' creations), so among the workers where the
    /// gang fits each is as likely to win: clusters in an order drawn per gang from `seed` and
    /// its id, the same every cycle, first that fits.
    Race { seed: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub choice: ClusterChoice,
    pub fill: Fill,
    /// Overrides every queue's own strategy (the baselines use this).
    pub strategy: Option<QueueingStrategy>,
    /// Weigh holding a multi-pod set out for its preferred level against starting it spread, in
    /// expected completion time, with these slowdowns (see `locality`); gangs with a run time
    /// only, and never longer than `patience` would hold them. `None`: patience alone decides.
    pub locality_cost: Option<Slowdown>,
    /// The longest a multi-pod set with a topology preference holds out for it, and how long
    /// when its cost cannot be weighed (no run time, or `locality_cost` off); `None`: no bound
    /// under `locality_cost`, else never (a preference is met when it can be, at once).
    pub patience: Option<Patience>,
    /// Admit across queues by weighted dominant-resource share (see `order`); otherwise in one
    /// global order of priority and submit time.
    pub fair_sharing: bool,
    /// Reserve capacity for the first gang that cannot start and has waited long enough, where
    /// it will start soonest (from the snapshot's `releases`); later gangs use that capacity only
    /// if they end before. `None`: never.
    pub reservations: Option<Reservations>,
    /// Evict running gangs for pending ones as their queues' policies allow (see `preempt`);
    /// `None`: never.
    pub preemption: Option<Preemption>,
    /// Assign the gangs at the head of the queue jointly with an ILP, and keep its answer when
    /// it beats the greedy one (see `batch`); `None`: greedy only.
    pub batch: Option<Batch>,
    /// Shorter gangs first, within a bound (see [`ShortFirst`]); `None`: submit time alone, as
    /// Kueue orders a ClusterQueue.
    pub short_first: Option<ShortFirst>,
    /// Queue depth: a cycle looks at each queue's gangs in queue order (the one global order
    /// without fair sharing) until `depth` of them are left waiting; the rest wait,
    /// `BeyondDepth`, until those ahead move. Gangs it admits do not count, so a burst that fits
    /// starts in one cycle. It bounds a cycle's cost by what it must look at and what it
    /// admits, not by the queue's length, as Slurm's `default_queue_depth` and
    /// `bf_max_job_test` do (Kueue looks at each queue's head only). Gangs already placed
    /// (`as_placed`) are never cut off.
    pub depth: u32,
}

impl Config {
    /// The default queue depth, the same for every policy. Deep enough that a cycle backfills
    /// past a long blocked head (Slurm tests 500 jobs per backfill pass by default), shallow
    /// enough that a cycle costs microseconds per gang looked at, not per gang waiting.
    pub const DEPTH: u32 = 256;

    /// Stowage's own policy, as the dispatcher runs it and the simulator measures it.
    pub fn stowage() -> Self {
        Config {
            choice: ClusterChoice::Scored,
            fill: Fill::Locality,
            strategy: None,
            locality_cost: Some(Slowdown::DEFAULT),
            patience: Some(Patience::DEFAULT),
            fair_sharing: false,
            reservations: Some(Reservations::DEFAULT),
            preemption: Some(Preemption::DEFAULT),
            batch: None,
            short_first: Some(ShortFirst::DEFAULT),
            depth: Self::DEPTH,
        }
    }

    /// A greedy policy with none of Stowage's additions (no locality patience, fair sharing,
    /// reservations, preemption or batch optimiser): how the peers decide, given how each
    /// picks a cluster and fills it, and the queueing strategy it imposes (`None`: each
    /// queue's own).
    pub fn baseline(choice: ClusterChoice, fill: Fill, strategy: Option<QueueingStrategy>) -> Self {
        Config {
            choice,
            fill,
            strategy,
            locality_cost: None,
            patience: None,
            fair_sharing: false,
            reservations: None,
            preemption: None,
            batch: None,
            short_first: None,
            depth: Self::DEPTH,
        }
    }

    /// This policy with the shorter-first cap in force while `waiting` (every gang waiting,
    /// not only those handed to a cycle) wait at `now_ms` ([`ShortFirst::in_force`]).
    pub fn for_waiting<'g>(&self, waiting: impl IntoIterator<Item = &'g Gang>, now_ms: u64) -> Self {
        let Some(short_first) = self.short_first.filter(|s| s.grows) else {
            return *self;
        };
        let (count, sum) =
            waiting.into_iter().fold((0, 0u128), |(n, sum), g| (n + 1, sum + u128::from(g.submitted_ms)));
        Config { short_first: Some(short_first.in_force(mean_wait_ms(now_ms, count, sum))), ..*self }
    }

    /// This policy as it places gangs already placed elsewhere, whose room is to be counted
    /// (assumed) before anything new: as they are, never held, never preempting, no batch.
    pub fn as_placed(&self) -> Self {
        Config {
            locality_cost: None,
            patience: None,
            reservations: None,
            preemption: None,
            batch: None,
            depth: u32::MAX,
            ..*self
        }
    }
}

/// Shorter gangs first, within a bound: a gang is ordered (after priority, and after the gangs
/// their queues' nominal quota covers, see `order`) as if submitted later by its expected run
/// time, counted at most the cap in force. So among gangs submitted within the cap of each other
/// the one that would end first, were it started at once, goes first (shortest job first, which
/// minimises the mean wait on one machine, Smith 1956), and a gang that has waited the cap goes
/// before every gang submitted since: no gang is passed over by the order for longer than the
/// cap, and reservations bound the wait for room as before. A gang that states no run time
/// counts the whole cap (stating none never moves a gang ahead), as does every gang of a
/// StrictFIFO queue, whose order stays its submit order. The run time is the gang's own
/// statement (`Gang::runtime_ms`: the trace's in simulation; in the dispatcher a TrainJob's
/// `stowage.dev/expected-runtime-seconds`, else its `activeDeadlineSeconds`).
///
/// The cap in force is `cap_ms` while the queue is short; where it `grows`, it grows with the
/// queue ([`ShortFirst::in_force`]). Callers resolve it from every gang waiting before a cycle
/// (the simulator hands a cycle only some of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortFirst {
    pub cap_ms: u64,
    pub grows: bool,
}

impl ShortFirst {
    /// Stowage's default: six hours, growing with the queue, chosen on the tuning set
    /// (docs/policy.md, "Shorter gangs first" and "A cap that grows with the queue").
    pub const DEFAULT: ShortFirst = ShortFirst { cap_ms: 6 * 3_600_000, grows: true };

    /// The order in force while the gangs waiting have waited `mean_wait_ms` on average. Where
    /// every gang waits days, a cap of hours reorders only gangs submitted within hours of each
    /// other, and the queue is nearly in submit order again: the cap is doubled for as long as
    /// it stays within the mean wait, so a gang is passed over for no longer than gangs wait
    /// anyway. In doublings, so the order changes only where the mean crosses one; there it
    /// can change back and forth from cycle to cycle as gangs arrive and start (no memory of
    /// the cap before: the same snapshot, the same order). The simulator re-sorts its queues
    /// at each change.
    pub fn in_force(self, mean_wait_ms: u64) -> ShortFirst {
        if !self.grows || self.cap_ms == 0 {
            return self;
        }
        let mut cap_ms = self.cap_ms;
        while let Some(doubled) = cap_ms.checked_mul(2).filter(|&d| d <= mean_wait_ms) {
            cap_ms = doubled;
        }
        ShortFirst { cap_ms, ..self }
    }

    /// The time `gang` is ordered by; `strict`: its queue is StrictFIFO.
    pub fn order_ms(&self, gang: &Gang, strict: bool) -> u64 {
        let counted = match gang.runtime_ms {
            Some(runtime_ms) if !strict => runtime_ms.min(self.cap_ms),
            _ => self.cap_ms,
        };
        gang.submitted_ms.saturating_add(counted)
    }
}

/// How long, on average, gangs submitted at times summing to `submitted_sum_ms` have waited at
/// `now_ms` (`count` of them; 0 when none): what [`ShortFirst::in_force`] is given.
pub fn mean_wait_ms(now_ms: u64, count: usize, submitted_sum_ms: u128) -> u64 {
    let Some(mean_submitted) = submitted_sum_ms.checked_div(count as u128) else {
        return 0;
    };
    u64::try_from(u128::from(now_ms).saturating_sub(mean_submitted)).unwrap_or(u64::MAX)
}

/// Locality patience, as Slurm's `--switches=N@max-time`: a pod set of several pods that
/// prefers a level is held to it (as if it were required) for `exact_ms` after its gang was
/// submitted, then to the next wider level until `wider_ms`, then placed wherever it fits. A
/// pod set that could not fit the held level even on an empty fleet is never held. Spreading a
/// gang costs it for its whole run (docs/simulator.md, topology cost); waiting costs once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    pub exact_ms: u64,
    pub wider_ms: u64,
}

impl Patience {
    /// Stowage's default: a week at the preferred level, then a second week at the next wider.
    /// Chosen on the shared Philly subset (docs/policy.md has the sweep): shorter holds barely
    /// move locality there, because under that load a rack frees up only after days.
    pub const DEFAULT: Patience = Patience { exact_ms: 7 * 86_400_000, wider_ms: 14 * 86_400_000 };

    /// The constraint a pod set is held to after waiting `waited_ms`, when it differs from its own.
    pub fn hold(&self, ps: &PodSet, waited_ms: u64) -> Option<TopologyConstraint> {
        let level = ps.holdable()?;
        match self.stage(waited_ms) {
            0 => Some(TopologyConstraint::Required(level)),
            1 => Level::ALL.iter().rev().copied().find(|l| *l < level).map(TopologyConstraint::Required),
            _ => None,
        }
    }

    /// How far a gang that has waited `waited_ms` has come: 0 held to its preferred level, 1
    /// to the next wider, 2 no longer held. Gangs asking alike at the same stage are held alike.
    pub fn stage(&self, waited_ms: u64) -> u8 {
        if waited_ms < self.exact_ms {
            0
        } else if waited_ms < self.wider_ms {
            1
        } else {
            2
        }
    }
}

/// When a gang that cannot start is given a reservation (see `reserve`): once it has waited
/// `after_ms` since it was submitted, and while fewer than `depth` gangs hold one this cycle. A
/// reservation holds capacity from every gang behind that cannot state it ends in time; held
/// for a gang that would have started soon anyway, it costs the many small gangs behind more
/// than it saves the one. The bound keeps light load greedy and still caps how long any gang
/// can be passed over. With a depth of one this is EASY backfilling (Slurm's default); deeper,
/// each reservation is planned on the room the ones before it leave, and gets theirs back at
/// their gangs' expected ends (conservative backfilling, as Flux's reservation depth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservations {
    pub after_ms: u64,
    pub depth: u32,
}

impl Reservations {
    /// The most reservations a cycle may hold: a backfill lifts them by a bit set of this size.
    pub const MAX_DEPTH: u32 = 64;

    /// Stowage's default: after a day, chosen on the tuning set (docs/policy.md, "Tuning and
    /// evaluation") among 0, 30 minutes, 2, 6, 12, 24 and 48 hours, 4 days and none; the depth
    /// likewise among 1, 2 and 4 (one: as many runs held as two, lower means).
    pub const DEFAULT: Reservations = Reservations { after_ms: 86_400_000, depth: 1 };

    /// For the first gang that cannot start, however briefly it has waited (plain EASY).
    pub const AT_ONCE: Reservations = Reservations { after_ms: 0, depth: 1 };

    /// Whether a gang that has waited `waited_ms` may be given a reservation.
    pub fn due(&self, waited_ms: u64) -> bool {
        waited_ms >= self.after_ms
    }

    /// How many a cycle may hold: `depth`, at most [`Self::MAX_DEPTH`] whatever a caller set.
    pub fn most(&self) -> usize {
        self.depth.min(Self::MAX_DEPTH) as usize
    }
}

/// How much longer a gang runs when its pods cross a level, in thousandths of its run time
/// (50 = 5 % longer), for the widest level crossed: the level just below the pods' narrowest
/// common domain. Pods on one host, or on the hosts of one rack, are the reference (no extra).
/// The defaults and their sources are in docs/simulator.md ("Topology cost model"): inferences
/// from interconnect bandwidths and published reports, not measurements. An admin who has
/// measured their fleet's sets them (`--locality-cost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slowdown {
    pub cross_nvlink: u32,
    pub cross_rack: u32,
    pub cross_block: u32,
    pub cross_zone: u32,
}

impl Slowdown {
    pub const DEFAULT: Slowdown = Slowdown { cross_nvlink: 200, cross_rack: 50, cross_block: 150, cross_zone: 1000 };

    /// The extra run time, in thousandths, of a gang whose widest level crossed is `crossed`
    /// (`locality::crossed`).
    pub fn extra_permille(&self, crossed: Level) -> u32 {
        match crossed {
            Level::Zone => self.cross_zone,
            Level::Block => self.cross_block,
            Level::Rack => self.cross_rack,
            Level::Nvlink => self.cross_nvlink,
            Level::Host => 0,
        }
    }
}

/// Fleet-wide preemption knobs; `Config::preemption = None` turns preemption off whatever the
/// queues say (each queue's own policy is its `QueuePreemption`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preemption {
    /// A gang that started less than this long ago is never a victim: it has not yet had the
    /// chance to do any work worth the restart.
    pub min_runtime_ms: u64,
    /// Count a victim's lost work from its last reported checkpoint (the TrainJob annotation
    /// `stowage.dev/last-checkpoint`) rather than from its start, so that recently
    /// checkpointed gangs are evicted first.
    pub prefer_checkpointed: bool,
    /// Whose work goes first, and whether a reclaim must be worth it.
    pub victims: Victims,
}

impl Preemption {
    /// Stowage's default: ten minutes of protection, checkpoints honoured, the least work lost.
    pub const DEFAULT: Preemption =
        Preemption { min_runtime_ms: 10 * 60_000, prefer_checkpointed: true, victims: Victims::LeastWork };

    /// Kueue's own preemption, for the simulator's Kueue dispatchers: no protection for young
    /// workloads and Kueue's candidate order, with no weighing of the work thrown away.
    pub const KUEUE: Preemption = Preemption { min_runtime_ms: 0, prefer_checkpointed: false, victims: Victims::Kueue };
}

/// How the victims of a preemption are chosen among those the queues' policies allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victims {
    /// Stowage's: on whichever cluster and domain, the set that throws away the fewest
    /// GPU-hours of work; a reclaim from a gang it does not outrank only when that loses no
    /// more GPU-time than the preemptor would go without by waiting (`preempt` module docs).
    LeastWork,
    /// Kueue's (`CandidatesOrdering`, pkg/scheduler/preemption/common/ordering.go): gangs
    /// being evicted first, then other queues' before the preemptor's own, lower priority
    /// first, the most recently started first; taken in that order until the gang fits, then
    /// dropped again where it still fits without them (Kueue's minimal set). Every set the
    /// policies allow is taken, whatever it throws away. The order runs over the whole fleet,
    /// as MultiKueue's manager preempts by quota: the set reached by the shortest run of it
    /// wins, on whichever cluster (the first in fleet order on a tie).
    Kueue,
}

/// The batch optimiser's settings (see `batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// How many gangs at the head of the queue are assigned jointly.
    pub window: usize,
    /// Candidate domains kept per gang: the one holding greedy's placement, then the most
    /// valuable (narrowest), best-fitting ones.
    pub candidates: usize,
    /// Branch-and-bound nodes the solver may explore. A deterministic limit: a time limit
    /// would make decisions depend on the machine's load.
    pub max_nodes: u32,
    pub solver: Solver,
}

impl Batch {
    /// Chosen on `cargo bench -p scheduler-core --bench batch` (docs/performance.md): a
    /// 200-gang window within 1% of the proven optimum in well under a second on 2 cores.
    pub const DEFAULT: Batch = Batch { window: 200, candidates: 24, max_nodes: 100, solver: Solver::Highs };
}

/// The MILP solver behind good_lp. HiGHS is the one the cycle uses (docs/policy.md says why);
/// the others are there to be measured against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Solver {
    Highs,
    /// Pure Rust, no limit on its search: for small windows and comparisons only.
    Microlp,
    /// COIN-OR CBC (the `cbc` feature; needs the system's libCbc).
    #[cfg(feature = "cbc")]
    Cbc,
}

#[cfg(test)]
mod tests {
    use super::Reservations;

    /// A backfill lifts reservations by a 64-bit set: a depth set past that (the CLI refuses
    /// one, a library caller may not) holds no more than the set has bits.
    #[test]
    fn a_depth_past_the_bit_set_is_held_to_it() {
        let at = |depth| Reservations { depth, ..Reservations::DEFAULT }.most();
        assert_eq!((at(1), at(64), at(65), at(u32::MAX)), (1, 64, 64, 64));
    }
}
