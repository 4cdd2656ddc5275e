//! The discrete-event engine: arrivals, completions, node failures and repairs on injected
//! time; after each instant's events, one `scheduler_core::cycle` and a full invariant check.
//! Nothing here reads a clock: the same trace, fleet, policy and seed replay identically.
//!
//! Here the event loop (`simulate`, `handle`); the cycle of each instant in `scheduling`; what is
//! counted in `accounting`.

mod accounting;
mod scheduling;
pub mod story;

pub use accounting::fragmented_free;
use accounting::{free_gpus, whole};
use scheduling::not_looked_at;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

use scheduler_core::invariants::Violation;
use scheduler_core::{
    Capacity, ClusterFilter, DomainId, Fleet, Gang, Level, NodeRequirement, PodSet, PodShape, QueuePreemption,
    QueueSpec, Queues, QuotaUsage, Reason, Reserved, WithinQueue,
};

use crate::cost::TopologyCost;
use crate::cut::{self, Classes, Group};
use crate::pending::Pending;
use crate::policy::Policy;
use crate::rng::{SplitMix64, fnv1a};
use crate::running::RunningSet;
use crate::trace::{Trace, TraceJob};

#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    pub seed: u64,
    /// Stop at this simulated second; `None` runs until every job has finished or is rejected.
    pub horizon_s: Option<u64>,
    /// Arrivals compressed in time by this factor (1.5: demand grows 1.5x).
    pub load_scale: f64,
    /// Mean node failures per node per day (0: none).
    pub node_failure_rate: f64,
    pub repair_s: u64,
    /// A job whose runs node failures cut short more than this many times fails, as a JobSet
    /// does past its `failurePolicy.maxRestarts`; evictions for a preemptor do not count (Kueue
    /// suspends and requeues the workload, the JobSet is not restarted). Bounded, so that a
    /// replay at a failure rate under which a long gang can never finish still ends.
    pub max_restarts: u32,
    pub cost: TopologyCost,
    /// Jobs whose trace names no queue are spread over this many synthetic tenants by id
    /// (unless `queues` are defined).
    pub tenants: u32,
    /// Queues defined for the run (the Helios VCs' quotas); empty: unlimited queues as the
    /// trace names them, and `tenants` (`Tenancy::new`).
    pub queues: Vec<QueueSpec>,
    /// Locality patience of the policies that have one (`None`: off).
    pub patience: Option<scheduler_core::Patience>,
    /// The slowdowns those policies weigh holding for locality with (`None`: patience alone).
    pub locality_cost: Option<scheduler_core::Slowdown>,
    /// When those of them that reserve give a waiting gang a reservation (`None`: never).
    pub reservations: Option<scheduler_core::Reservations>,
    /// How far those of them that order by it move a gang back by its run time (`None`: they
    /// order by submit time alone, as the peers do).
    pub short_first: Option<scheduler_core::ShortFirst>,
    /// How long a gang runs before stowage's preemption may evict it, for a higher priority or
    /// to reclaim quota (`Preemption::min_runtime_ms`; the dispatcher's
    /// `--preemption-min-runtime`). The Kueue dispatchers keep Kueue's: none.
    pub preemption_min_runtime_ms: u64,
    /// Percent of jobs (chosen by id and seed) submitted at priority `URGENT`, on top of the
    /// trace's own: the load that makes preemption matter on traces without priorities.
    pub urgent_percent: u32,
    /// Jobs checkpoint this often (seconds of their run); an evicted or failed job resumes from
    /// its last checkpoint, and preemption prefers victims that checkpointed recently. `None`:
    /// no checkpoints, every restart starts over.
    pub checkpoint_interval_s: Option<u64>,
    /// Under a policy with the batch optimiser (stowage-batch), it runs on one cycle in this
    /// many (1: every cycle); the others are greedy. What the optimiser buys against what it
    /// costs, when it cannot run every cycle.
    pub batch_every: u32,
    /// Check the invariants whole after one instant in this many (and at the end); see
    /// [`CHECK_EVERY`], the default. 1: after every instant.
    pub check_every: u32,
    /// Hand every cycle its whole window, even where the cut (`cut`) proves what the gangs
    /// left out would be told: the same report, slower. For tests and measurements.
    pub uncut: bool,
    /// Run every cut cycle on the whole window too, and stop at the first gang told otherwise
    /// (`SimError::CutDiffers`). For tests: a report shows a waiting gang's words only at its end.
    pub check_cut: bool,
    /// Jobs (by trace id) whose story the run keeps (`story`): what each was told, instant by
    /// instant. At most [`story::MAX_JOBS`].
    pub explain: Vec<String>,
}

impl SimOptions {
    /// The core configuration `policy` decides with in this run.
    fn config(&self, policy: Policy) -> scheduler_core::Config {
        let mut config =
            policy.config_with(self.patience, self.locality_cost, self.reservations, self.short_first, self.seed);
        if let Some(p) = config.preemption.as_mut().filter(|p| p.victims == scheduler_core::Victims::LeastWork) {
            p.min_runtime_ms = self.preemption_min_runtime_ms;
        }
        config
    }
}

/// By default a replay checks its invariants whole (`Sim::check`) after one instant in this
/// many (`SimOptions::check_every`), and at its end: after every instant where debug assertions
/// are on (the tests), one in 16 otherwise. The check recounts every host in use, as much as a
/// cycle costs on a full fleet. What it finds (capacity or quota usage counted wrong) stays
/// wrong until it is found, so a sample still finds it, later; only a queue over its quota for
/// less than the instants between two checks can pass a release replay unseen, and the tests
/// check every instant. A host over-committed is found as the gang starts, in every build
/// (`RunningSet::insert`).
pub const CHECK_EVERY: u32 = if cfg!(debug_assertions) { 1 } else { 16 };

/// [`SimOptions::max_restarts`]'s default: far above what the usual failure rates reach (at
/// `--node-failure-rate 0.01` a 32-node gang of a week is cut short about twice), and still a
/// bound: where failures outpace a gang's every run, it is tried eleven times, not for good.
pub const MAX_RESTARTS: u32 = 10;

/// The largest restart budget a replay takes: beyond it, a failure rate under which a long gang
/// never finishes a run keeps the replay going for as good as ever.
pub const MAX_RESTARTS_LIMIT: u32 = 1000;

/// The load scales a replay takes. Below, a trace's arrivals would be spread past any time a
/// second counts (`--load-scale 1e-300` put every job but the first at the end of time, and
/// the report counted one job); above, every job of any trace arrives in the same second.
pub const LOAD_SCALES: std::ops::RangeInclusive<f64> = 0.001..=1000.0;

/// Node failures per node per day a replay takes: at most one per repair time (an hour), past
/// which a node is down more than up and the replay is a stream of failures with no end in
/// sight (`--node-failure-rate 1e9` replayed for minutes, a failure every second).
pub const NODE_FAILURE_RATES: std::ops::RangeInclusive<f64> = 0.0..=24.0;

/// The most synthetic tenants a replay spreads jobs over: Kueue clusters run tens to hundreds
/// of ClusterQueues, and each is a queue every cycle orders.
pub const MAX_TENANTS: u32 = 1000;

/// The priority `urgent_percent` gives its jobs.
pub const URGENT: i32 = 100;

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            seed: 1,
            horizon_s: None,
            load_scale: 1.0,
            node_failure_rate: 0.0,
            repair_s: 3600,
            max_restarts: MAX_RESTARTS,
            cost: TopologyCost::default(),
            tenants: 4,
            queues: Vec::new(),
            patience: Some(scheduler_core::Patience::DEFAULT),
            locality_cost: Some(scheduler_core::Slowdown::DEFAULT),
            reservations: Some(scheduler_core::Reservations::DEFAULT),
            short_first: Some(scheduler_core::ShortFirst::DEFAULT),
            preemption_min_runtime_ms: scheduler_core::Preemption::DEFAULT.min_runtime_ms,
            urgent_percent: 0,
            checkpoint_interval_s: None,
            batch_every: 1,
            check_every: CHECK_EVERY,
            uncut: false,
            check_cut: false,
            explain: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A broken invariant is a scheduler bug: the run stops at the first one.
    #[error("policy {policy}: invariant broken at t={time_s}s: {violation}")]
    Invariant { policy: Policy, time_s: u64, violation: Violation },
    #[error("invalid option {option}: {problem}")]
    Option { option: &'static str, problem: String },
    #[error("job {job} names queue {queue:?}, which is not among the queues defined for the run")]
    UnknownQueue { job: String, queue: String },
    /// `SimOptions::check_cut` found a cut cycle that decided a gang (or left the capacity,
    /// usage or reservation) otherwise than the whole window's.
    #[error("policy {policy}: at t={time_s}s the cut cycle left {what} as {cut}, the whole window as {whole}")]
    CutDiffers { policy: Policy, time_s: u64, what: String, cut: String, whole: String },
}

/// How a job ended up by the end of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed,
    Running,
    /// Shared: a cycle tells a whole class of gangs the same words (`Sim::tell`), so each is
    /// told by a count, not by a copy or a comparison of them.
    Pending(Arc<Reason>),
    /// Boxed: rare, and it keeps every record small.
    Rejected(Box<Reason>),
    /// Cut short by node failures more than [`SimOptions::max_restarts`] times.
    Failed,
}

/// One job's history in one policy's run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: String,
    pub queue: String,
    pub gpus: u64,
    pub submit_s: u64,
    /// The trace's run time, before any topology slowdown.
    pub duration_s: u64,
    pub priority: i32,
    pub first_start_s: Option<u64>,
    pub end_s: Option<u64>,
    pub restarts: u32,
    /// Times it was evicted for a higher-priority gang (counted in `restarts` too).
    pub preemptions: u32,
    /// GPU-seconds of work those evictions threw away.
    pub lost_gpu_s: u64,
    /// Set once admitted: where the latest attempt ran.
    pub placement: Option<PlacementFacts>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlacementFacts {
    pub cluster: String,
    pub hosts: usize,
    /// Level of the narrowest domain holding every pod (`None`: the whole cluster).
    pub span_level: Option<Level>,
    pub slowdown: f64,
}

impl PlacementFacts {
    pub fn within(&self, level: Level) -> bool {
        self.span_level.is_some_and(|l| l >= level)
    }
}

/// Everything one policy's run produced; `report` turns it into figures.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    pub policy: Policy,
    pub jobs: Vec<JobRecord>,
    /// (time, GPUs busy) at every change.
    pub busy: Vec<(u64, u64)>,
    /// Time-integral of (free GPUs on partly used nodes / free GPUs), and the time it covers.
    pub fragmentation_integral: f64,
    /// Time-integral of the busy GPUs, each weighted by its cluster's cost weight: GPU-seconds
    /// as the admin prices them (the fleet file's `cost_weight`).
    pub weighted_gpu_s: u128,
    pub end_s: u64,
    pub cycles: u64,
    pub pending_reason_cycles: BTreeMap<&'static str, u64>,
    pub node_failures: u64,
    /// Cycles the batch optimiser solved a model in, and those whose answer the cycle kept.
    pub batch_cycles: u64,
    pub batch_kept: u64,
    /// Cycles shown only part of their window (`cut`), and those of them run again whole
    /// because the part proved nothing.
    pub cut_cycles: u64,
    pub cut_undone: u64,
    /// The stories of the jobs `SimOptions::explain` names, in its order.
    pub stories: Vec<story::Story>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival(usize),
    Finish { job: usize, attempt: u32 },
    NodeFail,
    NodeRepair(DomainId),
}

/// Where a trace's jobs queue: the queues, and how the jobs that name none are spread over them.
#[derive(Debug, Clone)]
pub struct Tenancy {
    pub queues: Queues,
    /// The spread queues, each with the upper end of its share of the hash space.
    spread: Vec<(u64, String)>,
}

impl Tenancy {
    /// With no queues defined (`opts.queues` empty): one unlimited, best-effort queue per queue
    /// the trace names, and `opts.tenants` more (`tenant-N`) that the other jobs are spread
    /// over evenly by id. With queues defined: those, and the jobs naming none spread over them
    /// by id in proportion to their GPU quota (their tenants bring work in proportion to what
    /// they were given); a job naming another queue is an error, as it would run unlimited.
    /// Either way a gang may preempt gangs of lower priority in its queue (for the policies
    /// that preempt at all).
    pub fn new(trace: &Trace, opts: &SimOptions) -> Result<Self, SimError> {
        if opts.tenants > MAX_TENANTS {
            return Err(SimError::Option {
                option: "--tenants",
                problem: format!("{} tenants: at most {MAX_TENANTS}", opts.tenants),
            });
        }
        let preemption = QueuePreemption { within_queue: WithinQueue::LowerPriority, ..QueuePreemption::default() };
        let mut specs: BTreeMap<String, QueueSpec> = opts.queues.iter().map(|q| (q.name.clone(), q.clone())).collect();
        let mut spread = Vec::new();
        let mut end = 0u64;
        if specs.is_empty() {
            for job in &trace.jobs {
                if let Some(q) = &job.queue {
                    specs.entry(q.clone()).or_insert_with(|| QueueSpec { preemption, ..QueueSpec::unlimited(q) });
                }
            }
            for t in 0..opts.tenants.max(1) {
                end += 1;
                spread.push((end, format!("tenant-{t}")));
            }
        } else {
            if let Some((job, queue)) =
                trace.jobs.iter().find_map(|j| j.queue.as_ref().filter(|q| !specs.contains_key(*q)).map(|q| (j, q)))
            {
                return Err(SimError::UnknownQueue { job: job.id.clone(), queue: queue.clone() });
            }
            for q in &opts.queues {
                end += q.nominal_gpus().max(1);
                spread.push((end, q.name.clone()));
            }
        }
        if trace.jobs.iter().any(|j| j.queue.is_none()) {
            for (_, name) in &spread {
                specs.entry(name.clone()).or_insert_with(|| QueueSpec { preemption, ..QueueSpec::unlimited(name) });
            }
        }
        let queues = Queues::new(specs.into_values().collect())
            .map_err(|e| SimError::Option { option: "queues", problem: e.to_string() })?;
        Ok(Tenancy { queues, spread })
    }

    /// The queue `job` goes to.
    pub fn queue_of<'a>(&'a self, job: &'a TraceJob) -> &'a str {
        if let Some(q) = &job.queue {
            return q;
        }
        let end = self.spread.last().map_or(1, |(e, _)| *e);
        let at = fnv1a(&job.id) % end;
        let i = self.spread.partition_point(|(e, _)| *e <= at);
        self.spread.get(i).map_or("default", |(_, name)| name.as_str())
    }
}

/// The job's priority: the trace's, or `URGENT` for the `urgent_percent` chosen by id and seed.
fn priority_of(job: &TraceJob, opts: &SimOptions) -> i32 {
    let draw = fnv1a(&job.id) ^ opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    if SplitMix64::new(draw).below(100) < opts.urgent_percent as usize {
        URGENT.max(job.priority)
    } else {
        job.priority
    }
}

/// The gang a trace job asks for, submitted at `submit_s` with `priority`.
pub fn gang_of(job: &TraceJob, queue: String, submit_s: u64, priority: i32) -> Gang {
    Gang {
        id: job.id.as_str().into(),
        queue,
        priority,
        submitted_ms: submit_s.saturating_mul(1000),
        runtime_ms: Some(job.duration_s.saturating_mul(1000)),
        pod_sets: job
            .pod_sets
            .iter()
            .map(|p| PodSet {
                name: p.name.as_str().into(),
                pods: p.pods,
                shape: PodShape { gpus: p.gpus_per_pod, cpu_milli: p.cpu_milli, memory_mib: p.memory_mib },
                flavors: p.flavors.clone(),
                nodes: NodeRequirement::default(),
                topology: p.topology,
                slice: None,
            })
            .collect(),
        clusters: ClusterFilter::default(),
    }
}

struct Sim<'a> {
    fleet: &'a Fleet,
    queues: &'a Queues,
    policy: Policy,
    opts: &'a SimOptions,
    /// The core configuration the policy decides with in this run (`SimOptions::config`),
    /// found once: arrivals, waits and cycles read it. Its shorter-first cap is the one in
    /// force (`ShortFirst::in_force`), moved before a cycle as the queue's wait grows and
    /// shrinks, from the run's own (`short_first`), where that one grows.
    config: scheduler_core::Config,
    short_first: Option<scheduler_core::ShortFirst>,
    rng: SplitMix64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    capacity: Capacity,
    /// The empty fleet's capacity, lent to a spreader's probes (`Policy::bind_at_submit`).
    empty: Capacity,
    usage: QuotaUsage,
    pending: Pending,
    /// Whether cycles are shown only what they must see (`cut`), and each waiting job's group.
    cutting: bool,
    classes: Classes,
    groups: Vec<Option<Group>>,
    /// The last cycle's reservations, handed to the next (where their searches start).
    reserved: Vec<Reserved>,
    running: RunningSet,
    attempts: Vec<u32>,
    /// Per job: seconds of its trace run time already done and checkpointed.
    progress_s: Vec<f64>,
    down: BTreeSet<DomainId>,
    hosts: Vec<DomainId>,
    records: Vec<JobRecord>,
    busy_gpus: u64,
    /// The busy GPUs, each times its cluster's cost weight.
    weighted_busy: u64,
    run: PolicyRun,
}

/// Replays `trace` on `fleet` under `policy`. `progress(done, total)` is called as arrivals
/// are processed, and once with none done before anything else (a caller timing the replay
/// starts its clock there).
pub fn simulate(
    fleet: &Fleet,
    trace: &Trace,
    policy: Policy,
    opts: &SimOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<PolicyRun, SimError> {
    if !LOAD_SCALES.contains(&opts.load_scale) {
        return Err(SimError::Option {
            option: "--load-scale",
            problem: format!("{:?}: must be from {} to {}", opts.load_scale, LOAD_SCALES.start(), LOAD_SCALES.end()),
        });
    }
    if !NODE_FAILURE_RATES.contains(&opts.node_failure_rate) {
        return Err(SimError::Option {
            option: "--node-failure-rate",
            problem: format!(
                "{:?}: must be from {} to {} failures per node per day",
                opts.node_failure_rate,
                NODE_FAILURE_RATES.start(),
                NODE_FAILURE_RATES.end()
            ),
        });
    }
    if opts.max_restarts > MAX_RESTARTS_LIMIT {
        return Err(SimError::Option {
            option: "--max-restarts",
            problem: format!("{}: at most {MAX_RESTARTS_LIMIT}", opts.max_restarts),
        });
    }
    if opts.explain.len() > story::MAX_JOBS {
        return Err(SimError::Option {
            option: "--explain",
            problem: format!("{} jobs named: at most {}", opts.explain.len(), story::MAX_JOBS),
        });
    }
    let explained: Vec<usize> =
        opts.explain
            .iter()
            .map(|id| {
                trace.jobs.iter().position(|j| j.id == *id).ok_or_else(|| SimError::Option {
                    option: "--explain",
                    problem: format!("no job {id:?} in the trace"),
                })
            })
            .collect::<Result<_, _>>()?;
    let total = trace.jobs.len() as u64;
    progress(0, total);
    let tenancy = Tenancy::new(trace, opts)?;
    let queues = &tenancy.queues;
    // Every job starts told the words of its queue: one of them per queue.
    let mut first_words: BTreeMap<String, Arc<Reason>> = BTreeMap::new();
    let config = opts.config(policy);
    let mut sim = Sim {
        fleet,
        queues,
        policy,
        opts,
        config,
        short_first: config.short_first.filter(|s| s.grows),
        rng: SplitMix64::new(opts.seed),
        events: BinaryHeap::new(),
        seq: 0,
        capacity: Capacity::empty(fleet),
        empty: fleet.allocatable().clone(),
        usage: QuotaUsage::default(),
        pending: Pending::default(),
        cutting: !opts.uncut && !policy.nominates() && cut::applies(&config, queues),
        classes: Classes::default(),
        groups: vec![None; trace.jobs.len()],
        reserved: Vec::new(),
        running: RunningSet::default(),
        attempts: vec![0; trace.jobs.len()],
        progress_s: vec![0.0; trace.jobs.len()],
        down: BTreeSet::new(),
        hosts: fleet.hosts().map(|(h, _)| h).collect(),
        records: trace
            .jobs
            .iter()
            .map(|j| {
                let submit_s = (j.submit_s as f64 / opts.load_scale).floor() as u64;
                let queue = tenancy.queue_of(j).to_string();
                let unseen =
                    first_words.entry(queue.clone()).or_insert_with(|| Arc::new(not_looked_at(policy, &queue)));
                JobRecord {
                    id: j.id.clone(),
                    outcome: Outcome::Pending(unseen.clone()),
                    queue,
                    gpus: j.pod_sets.iter().map(|p| u64::from(p.pods) * u64::from(p.gpus_per_pod)).sum(),
                    submit_s,
                    duration_s: j.duration_s,
                    priority: priority_of(j, opts),
                    first_start_s: None,
                    end_s: None,
                    restarts: 0,
                    preemptions: 0,
                    lost_gpu_s: 0,
                    placement: None,
                }
            })
            .collect(),
        busy_gpus: 0,
        weighted_busy: 0,
        run: PolicyRun {
            policy,
            jobs: Vec::new(),
            busy: vec![(0, 0)],
            fragmentation_integral: 0.0,
            weighted_gpu_s: 0,
            end_s: 0,
            cycles: 0,
            pending_reason_cycles: BTreeMap::new(),
            batch_cycles: 0,
            batch_kept: 0,
            cut_cycles: 0,
            cut_undone: 0,
            node_failures: 0,
            stories: Vec::new(),
        },
    };
    let mut stories: Vec<story::Story> = explained.iter().map(|&j| story::Story::new(&sim.records[j])).collect();
    for (i, r) in sim.records.iter().enumerate() {
        let t = r.submit_s;
        sim.events.push(Reverse((t, i as u64, Event::Arrival(i))));
    }
    sim.seq = trace.jobs.len() as u64;
    if opts.node_failure_rate > 0.0 {
        sim.schedule_failure(0);
    }
    let mut arrived = 0u64;
    let mut last_t = 0u64;
    let mut instants = 0u64;
    while let Some(&Reverse((t, _, _))) = sim.events.peek() {
        if opts.horizon_s.is_some_and(|h| t > h) {
            break;
        }
        // Nothing runs, nothing will arrive and no node is down: what is still pending is stuck
        // for good (only failure events remain), so stop rather than spin.
        // Nor when nothing is left at all: hosts still down (at a high failure rate, always
        // some) keep no one waiting.
        if sim.running.is_empty() && arrived == total && (sim.down.is_empty() || sim.pending.is_empty()) {
            break;
        }
        sim.account(last_t, t);
        last_t = t;
        while let Some(Reverse((et, _, ev))) = sim.events.peek().copied() {
            if et != t {
                break;
            }
            sim.events.pop();
            if let Event::Arrival(_) = ev {
                arrived += 1;
            }
            sim.handle(t, ev, trace);
        }
        // Each follow-on cycle starts a gang; the bound is for preemption, whose victims wait
        // again.
        let mut follow_on = sim.pending.len();
        while sim.schedule(t)? && follow_on > 0 {
            follow_on -= 1;
        }
        for (story, &j) in stories.iter_mut().zip(&explained) {
            story.observe(t, &sim.records[j]);
        }
        instants += 1;
        if instants.is_multiple_of(u64::from(opts.check_every.max(1))) {
            sim.check(t)?;
        }
        progress(arrived, total);
    }
    sim.check(last_t)?;
    let end = match opts.horizon_s {
        Some(h) if !sim.pending.is_empty() || !sim.running.is_empty() => h,
        _ => last_t,
    };
    sim.account(last_t, end);
    sim.run.end_s = end;
    for (i, r) in sim.records.iter_mut().enumerate() {
        if sim.running.contains(i) {
            r.outcome = Outcome::Running;
        }
    }
    let mut run = sim.run;
    run.jobs = sim.records;
    run.stories = stories;
    Ok(run)
}

impl Sim<'_> {
    fn push(&mut self, t: u64, ev: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    fn schedule_failure(&mut self, now: u64) {
        let per_second = self.opts.node_failure_rate * self.hosts.len() as f64 / 86_400.0;
        let dt = self.rng.exponential(1.0 / per_second).ceil().max(1.0) as u64;
        self.push(now.saturating_add(dt), Event::NodeFail);
    }

    fn handle(&mut self, t: u64, ev: Event, trace: &Trace) {
        match ev {
            Event::Arrival(i) => {
                let r = &self.records[i];
                let mut gang = gang_of(&trace.jobs[i], r.queue.clone(), r.submit_s, r.priority);
                let config = self.config;
                let bound = self.policy.bind_at_submit(
                    self.fleet,
                    self.queues,
                    &self.capacity,
                    &mut self.empty,
                    &|c| self.pending.bound_gpus(c),
                    &gang,
                    &config,
                );
                if let Some(c) = bound {
                    gang.clusters.only = Some(vec![c]);
                }
                self.wait(i, gang);
            }
            Event::Finish { job, attempt } => {
                if self.attempts[job] == attempt
                    && let Some(r) = self.running.remove(self.fleet, self.queues, job)
                {
                    self.stop(&r);
                    self.records[job].end_s = Some(t);
                    self.records[job].outcome = Outcome::Completed;
                }
            }
            Event::NodeFail => {
                let up: Vec<DomainId> = self.hosts.iter().copied().filter(|h| !self.down.contains(h)).collect();
                if !up.is_empty() {
                    let host = up[self.rng.below(up.len())];
                    self.fail(t, host);
                    self.push(t + self.opts.repair_s, Event::NodeRepair(host));
                }
                self.schedule_failure(t);
            }
            Event::NodeRepair(host) => {
                if self.down.remove(&host)
                    && let Some(spec) = self.fleet.domain(host).node
                {
                    self.capacity.give_back(self.fleet, host, 1, whole(&spec));
                }
            }
        }
    }

    /// Evicts every gang with a pod on `host` back to the queue, then takes the host away.
    fn fail(&mut self, t: u64, host: DomainId) {
        self.run.node_failures += 1;
        let hit: Vec<usize> = self
            .running
            .iter()
            .filter(|(_, r)| r.admission.pod_sets.iter().any(|p| p.hosts.iter().any(|h| h.0 == host)))
            .map(|(j, _)| j)
            .collect();
        for j in hit {
            if let Some(r) = self.running.remove(self.fleet, self.queues, j) {
                self.stop(&r);
                let gang = self.interrupt(t, j, r).0;
                let rec = &mut self.records[j];
                rec.restarts += 1;
                if rec.restarts - rec.preemptions > self.opts.max_restarts {
                    rec.end_s = Some(t);
                    rec.outcome = Outcome::Failed;
                    continue;
                }
                self.wait(j, gang);
            }
        }
        if let Some(spec) = self.fleet.domain(host).node {
            self.capacity.take(self.fleet, host, 1, whole(&spec));
            self.capacity.commit();
        }
        self.down.insert(host);
    }

    /// Job `j` waits (again), in the group a cut cycle decides it with.
    fn wait(&mut self, j: usize, gang: Gang) {
        let config = self.config;
        if self.cutting {
            self.groups[j] = self.classes.group(self.fleet, self.queues, &config, &gang);
        }
        let order_ms = scheduler_core::order_ms(&gang, self.queues, &config);
        self.pending.push(j, gang, order_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet_file::FleetSpec;
    use crate::trace::TracePodSet;
    use scheduler_core::{Patience, TopologyConstraint};

    /// `--preemption-min-runtime` is stowage's knob, as on the dispatcher: the Kueue
    /// dispatchers keep Kueue's (no protection), the baselines preempt not at all.
    #[test]
    fn the_preemption_protection_is_stowages_own() {
        let opts = SimOptions { preemption_min_runtime_ms: 1_800_000, ..SimOptions::default() };
        let protection = |p: Policy| opts.config(p).preemption.map(|p| p.min_runtime_ms);
        assert_eq!(protection(Policy::Stowage), Some(1_800_000));
        assert_eq!(protection(Policy::KueueMultiKueue), Some(0));
        assert_eq!(protection(Policy::FifoFirstFit), None);
        let default = SimOptions::default().config(Policy::Stowage).preemption;
        assert_eq!(default, Some(scheduler_core::Preemption::DEFAULT));
    }

    fn job(id: &str, submit_s: u64, duration_s: u64, pods: u32, gpus: u32, topology: TopologyConstraint) -> TraceJob {
        TraceJob {
            id: id.into(),
            submit_s,
            duration_s,
            pod_sets: vec![TracePodSet {
                name: "node".into(),
                pods,
                gpus_per_pod: gpus,
                cpu_milli: 1000,
                memory_mib: 1024,
                flavors: Vec::new(),
                topology,
            }],
            queue: None,
            priority: 0,
        }
    }

    /// One cluster `a` of one pool of 8-GPU nodes: `pool` ends the pool's line (its node count and
    /// fanout) and may add the cluster's topology after it.
    fn fleet_of(pool: &str) -> Fleet {
        let text = format!(
            "clusters:\n- name: a\n  pools:\n  - {{name: p, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 64, memory_gib: 512, {pool}\n"
        );
        FleetSpec::parse(&text, "t.yaml").and_then(|s| s.build("t.yaml")).expect("fleet")
    }

    fn fleet() -> Fleet {
        fleet_of("nodes: 16, fanout: {rack: 4, block: 2}}\n  topology: [{level: block}, {level: rack}]")
    }

    fn trace() -> Trace {
        let jobs = (0..40)
            .map(|i| {
                let rack = TopologyConstraint::Required(Level::Rack);
                job(&format!("j{i:02}"), i * 600, 7200 + i * 100, 1 + (i % 4) as u32, 8, rack)
            })
            .collect();
        Trace { jobs, skipped_rows: 0, withdrawn: 0 }
    }

    /// Two teams sharing 128 GPUs as Kueue would set it up: 64 each in one cohort.
    fn team_queues() -> Vec<QueueSpec> {
        let preemption = QueuePreemption {
            reclaim_within_cohort: scheduler_core::ReclaimWithinCohort::Any,
            ..QueuePreemption::default()
        };
        ["team-a", "team-b"]
            .map(|name| QueueSpec {
                cohort: Some("org".into()),
                quotas: vec![scheduler_core::Quota {
                    flavor: "h100".into(),
                    resource: scheduler_core::Resource::Gpu,
                    nominal: if name == "team-a" { 96 } else { 32 },
                    borrowing_limit: None,
                    lending_limit: None,
                }],
                preemption,
                ..QueueSpec::unlimited(name)
            })
            .into()
    }

    /// The run's cost as the fleet file prices its clusters: each GPU-second busy times the
    /// weight of the cluster it is on. Stowage puts the first job in its order, the shorter
    /// (`ShortFirst`), on the cheaper cluster (its cost weight among equal placements) and the
    /// other on the dearer; kueue-multikueue's race, drawn per job, happens to do the same here.
    #[test]
    fn a_runs_cost_weighs_each_gpu_second_by_its_clusters_price() {
        let text = "clusters:\n\
            - {name: dear, cost_weight: 3, topology: [], pools: [{name: p, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 64, memory_gib: 512, nodes: 1}]}\n\
            - {name: cheap, cost_weight: 1, topology: [], pools: [{name: p, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 64, memory_gib: 512, nodes: 1}]}\n";
        let fleet = FleetSpec::parse(text, "t.yaml").and_then(|s| s.build("t.yaml")).expect("fleet");
        let any = TopologyConstraint::Unconstrained;
        let trace = Trace {
            jobs: vec![job("long", 0, 1000, 1, 8, any), job("short", 0, 500, 1, 8, any)],
            skipped_rows: 0,
            withdrawn: 0,
        };
        for (policy, long_on, short_on) in [(Policy::Stowage, 3, 1), (Policy::KueueMultiKueue, 3, 1)] {
            let run = simulate(&fleet, &trace, policy, &SimOptions::default(), &mut |_, _| {}).expect("runs");
            let ran = |id: &str| {
                let j = run.jobs.iter().find(|j| j.id == id).expect("recorded");
                j.end_s.zip(j.first_start_s).map(|(e, s)| u128::from(e - s)).expect("completed")
            };
            assert_eq!((ran("long"), ran("short")), (1000, 500), "{policy}");
            assert_eq!(run.weighted_gpu_s, 8 * 1000 * long_on + 8 * 500 * short_on, "{policy}");
        }
    }

    /// `--explain`: a job that waits for room behind one that fills the fleet is told why, in
    /// the cycle's words, then where it ran and when it ended, as the replay's records have it;
    /// under every policy, cut or whole. A name the trace lacks, or too many, is refused by name.
    #[test]
    fn a_story_says_why_a_job_waited_where_it_ran_and_when_it_ended() {
        let fleet = fleet();
        let any = TopologyConstraint::Unconstrained;
        let trace = Trace {
            jobs: vec![
                job("fills", 0, 1000, 16, 8, any),
                job("waits", 10, 500, 2, 8, any),
                job("other", 20, 50, 1, 8, any),
            ],
            skipped_rows: 0,
            withdrawn: 0,
        };
        for policy in [Policy::Stowage, Policy::FifoFirstFit, Policy::KueueMultiKueue] {
            for uncut in [false, true] {
                let opts = SimOptions { explain: vec!["waits".into()], uncut, ..SimOptions::default() };
                let run = simulate(&fleet, &trace, policy, &opts, &mut |_, _| {}).expect("runs");
                let [story] = run.stories.as_slice() else { panic!("one story: {:?}", run.stories) };
                let record = run.jobs.iter().find(|j| j.id == "waits").expect("recorded");
                let kinds: Vec<&str> = story.steps.iter().map(|s| s.kind.as_str()).collect();
                assert_eq!(kinds, ["no-domain", "running", "completed"], "{policy}");
                let (waiting, running, done) = (&story.steps[0], &story.steps[1], &story.steps[2]);
                assert_eq!((story.submit_s, waiting.from_s), (10, 10), "{policy}");
                assert!(waiting.words.contains("free slots of 8 h100 GPUs"), "{policy}: {}", waiting.words);
                assert_eq!(Some(running.from_s), record.first_start_s, "{policy}");
                assert_eq!(Some(done.from_s), record.end_s, "{policy}");
                assert!(running.words.starts_with("on a: 2 host(s)"), "{policy}: {}", running.words);
                // The third job arrives at 20: the wait saw two instants (the arrivals at 10 and
                // 20), then it started as the first ended (after 1000 s, slowed by its span).
                let fills = run.jobs.iter().find(|j| j.id == "fills").and_then(|j| j.end_s);
                assert_eq!((waiting.instants, waiting.to_s, Some(running.from_s)), (2, 20, fills), "{policy}");
            }
        }
        let refused = |explain: Vec<String>| {
            let opts = SimOptions { explain, ..SimOptions::default() };
            simulate(&fleet, &trace, Policy::Stowage, &opts, &mut |_, _| {}).expect_err("refused").to_string()
        };
        assert_eq!(refused(vec!["nope".into()]), "invalid option --explain: no job \"nope\" in the trace");
        assert_eq!(
            refused(vec!["waits".into(); story::MAX_JOBS + 1]),
            format!("invalid option --explain: {} jobs named: at most {}", story::MAX_JOBS + 1, story::MAX_JOBS)
        );
    }

    /// A burst deeper than the queue depth that fits starts at the instant it arrives, as the
    /// dispatcher's one cycle over every gang starts it (admitted gangs do not count against the
    /// depth); a backlog that does not fit costs no cycle more than the one it needs.
    #[test]
    fn a_burst_deeper_than_the_depth_starts_at_once() {
        // 64 nodes of 8 GPUs; the runs stop after the first instant, so `cycles` counts its own.
        let fleet = fleet_of("nodes: 64, fanout: {rack: 8}}\n  topology: [{level: rack}]");
        let burst = |n: u64, gpus: u32| Trace {
            jobs: (0..n)
                .map(|i| job(&format!("j{i:03}"), 0, 3600, 1, gpus, TopologyConstraint::Unconstrained))
                .collect(),
            skipped_rows: 0,
            withdrawn: 0,
        };
        let first_instant = SimOptions { horizon_s: Some(0), ..SimOptions::default() };
        for policy in [Policy::Stowage, Policy::FifoFirstFit] {
            // 400 one-GPU gangs on 512 GPUs: the first cycle starts the 256 it is handed, the
            // last of them at its window's edge, so a second starts the other 144.
            let run = simulate(&fleet, &burst(400, 1), policy, &first_instant, &mut |_, _| {}).expect("runs");
            assert!(run.jobs.iter().all(|j| j.first_start_s == Some(0)), "{policy}: a gang waited for a later event");
            assert_eq!(run.cycles, 2, "{policy}");
            // 300 whole-node gangs on 64 nodes: 64 start, the 256th waits, and no cycle follows.
            let run = simulate(&fleet, &burst(300, 8), policy, &first_instant, &mut |_, _| {}).expect("runs");
            assert_eq!(run.jobs.iter().filter(|j| j.first_start_s == Some(0)).count(), 64, "{policy}");
            assert_eq!(run.cycles, 1, "{policy}");
        }
    }

    /// The cut (`cut`) changes nothing but speed: every record, reason count and curve is the
    /// same as with every cycle shown its whole window, for each policy it applies to, on a deep
    /// backlog with tenants, with quotas, with failing nodes and with gangs refused for good.
    #[test]
    fn cut_cycles_decide_as_whole_ones() {
        let fleet = fleet();
        let mut trace = crate::trace::synthetic::generate(crate::trace::synthetic::Mix::Scale, 1500, 7, 128);
        for (i, j) in trace.jobs.iter_mut().enumerate() {
            j.submit_s /= 2;
            if i % 97 == 5 {
                // 32 pods of 8 GPUs in one rack of 4 nodes: never fits, refused at first look.
                j.pod_sets[0].pods = 32;
                j.pod_sets[0].gpus_per_pod = 8;
                j.pod_sets[0].topology = TopologyConstraint::Required(Level::Rack);
            } else if i % 13 == 2 {
                // A launcher and its workers: two pod sets.
                let mut workers = j.pod_sets[0].clone();
                (workers.name, workers.pods, workers.gpus_per_pod) = ("worker".into(), 3, 8);
                workers.topology = TopologyConstraint::Preferred(Level::Rack);
                (j.pod_sets[0].pods, j.pod_sets[0].gpus_per_pod) = (1, 1);
                j.pod_sets.push(workers);
            } else if i % 4 == 1 {
                // More gangs that would rather share a rack: stowage weighs holding them.
                j.pod_sets[0].pods = 2 + (i % 3) as u32;
                j.pod_sets[0].gpus_per_pod = 8;
                j.pod_sets[0].topology = TopologyConstraint::Preferred(Level::Rack);
            }
        }
        let baselines = [Policy::FifoFirstFit, Policy::KueueMultiKueue, Policy::VolcanoBinpack];
        let hour = 3_600_000;
        let solo_queues: Vec<QueueSpec> = team_queues().into_iter().map(|q| QueueSpec { cohort: None, ..q }).collect();
        let cases = [
            (SimOptions::default(), &baselines[..]),
            (SimOptions { tenants: 1, ..SimOptions::default() }, &baselines),
            (SimOptions { horizon_s: Some(trace.jobs[900].submit_s), ..SimOptions::default() }, &baselines),
            (SimOptions { queues: team_queues(), ..SimOptions::default() }, &baselines),
            // Quotas outside a cohort: the one order of all queues, cut (in a cohort, a lane per
            // queue, never cut).
            (SimOptions { queues: solo_queues, ..SimOptions::default() }, &baselines),
            (SimOptions { node_failure_rate: 1.0, seed: 5, ..SimOptions::default() }, &baselines),
            // Stowage: holds weighed by cost, reservations and backfill; patience short enough
            // that gangs pass its stages; urgent jobs that preempt; failing nodes; no cost model.
            (SimOptions::default(), &[Policy::Stowage]),
            // Stopped with a backlog: each waiting job's last words are compared too.
            (SimOptions { horizon_s: Some(trace.jobs[900].submit_s), ..SimOptions::default() }, &[Policy::Stowage]),
            (
                SimOptions { patience: Some(Patience { exact_ms: hour, wider_ms: 3 * hour }), ..SimOptions::default() },
                &[Policy::Stowage],
            ),
            (
                SimOptions {
                    urgent_percent: 10,
                    checkpoint_interval_s: Some(600),
                    tenants: 2,
                    ..SimOptions::default()
                },
                &[Policy::Stowage],
            ),
            (
                SimOptions { node_failure_rate: 1.0, seed: 5, queues: team_queues(), ..SimOptions::default() },
                &[Policy::Stowage],
            ),
            (
                SimOptions {
                    locality_cost: None,
                    patience: Some(Patience { exact_ms: hour, wider_ms: 2 * hour }),
                    ..SimOptions::default()
                },
                &[Policy::Stowage],
            ),
            // Reservations only for gangs that have waited an hour: the first gang left waiting
            // may make none, one behind it may.
            (
                SimOptions {
                    reservations: Some(scheduler_core::Reservations { after_ms: hour, depth: 1 }),
                    ..SimOptions::default()
                },
                &[Policy::Stowage],
            ),
            // Several reservations at once (conservative backfilling): a gang may backfill in
            // front of some and not others, and one left out might have made one.
            (
                SimOptions {
                    reservations: Some(scheduler_core::Reservations { after_ms: hour, depth: 4 }),
                    ..SimOptions::default()
                },
                &[Policy::Stowage],
            ),
            (
                SimOptions {
                    reservations: Some(scheduler_core::Reservations { after_ms: 0, depth: 3 }),
                    tenants: 2,
                    ..SimOptions::default()
                },
                &[Policy::Stowage],
            ),
        ];
        // Per family (the baselines, stowage): cut cycles and cuts undone.
        let (mut cut, mut undone) = ([0; 2], [0; 2]);
        for (opts, policies) in cases {
            for &policy in policies {
                let run = |uncut| {
                    let opts = SimOptions { uncut, check_cut: !uncut, ..opts.clone() };
                    simulate(&fleet, &trace, policy, &opts, &mut |_, _| {}).expect("runs")
                };
                let (a, b) = (run(false), run(true));
                assert_eq!(a.jobs, b.jobs, "{policy}");
                assert_eq!(a.pending_reason_cycles, b.pending_reason_cycles, "{policy}");
                assert_eq!((a.busy, a.cycles, a.end_s), (b.busy, b.cycles, b.end_s), "{policy}");
                assert_eq!(a.fragmentation_integral.to_bits(), b.fragmentation_integral.to_bits(), "{policy}");
                assert_eq!(a.weighted_gpu_s, b.weighted_gpu_s, "{policy}");
                assert_eq!(b.cut_cycles, 0);
                let i = usize::from(policy == Policy::Stowage);
                (cut[i], undone[i]) = (cut[i] + a.cut_cycles, undone[i] + a.cut_undone);
            }
        }
        for i in 0..2 {
            let (cut, undone) = (cut[i], undone[i]);
            assert!(cut > 1000 && undone > 0, "the cut and its undoing were both exercised ({i}): {cut}, {undone}");
        }
    }

    #[test]
    fn defined_queues_take_unqueued_jobs_in_proportion_to_quota_and_refuse_unknown_names() {
        let opts = SimOptions { queues: team_queues(), ..SimOptions::default() };
        let jobs: Vec<TraceJob> =
            (0..4000).map(|i| job(&format!("j{i}"), i, 60, 1, 1, TopologyConstraint::Unconstrained)).collect();
        let trace = Trace { jobs, skipped_rows: 0, withdrawn: 0 };
        let tenancy = Tenancy::new(&trace, &opts).expect("valid");
        let to_a = trace.jobs.iter().filter(|j| tenancy.queue_of(j) == "team-a").count() as f64 / 4000.0;
        assert!((to_a - 0.75).abs() < 0.03, "96 of 128 GPUs of quota: {to_a}");
        assert_eq!(tenancy.queues.specs().len(), 2, "no tenant queues beside the defined ones");

        let mut named = trace.clone();
        named.jobs[7].queue = Some("team-c".into());
        let err = Tenancy::new(&named, &opts).expect_err("team-c is not defined");
        assert_eq!(err.to_string(), "job j7 names queue \"team-c\", which is not among the queues defined for the run");
        named.jobs[7].queue = Some("team-b".into());
        let tenancy = Tenancy::new(&named, &opts).expect("team-b is");
        assert_eq!(tenancy.queue_of(&named.jobs[7]), "team-b");

        // Without defined queues: the trace's own names and `tenants` evenly, as before.
        let plain = Tenancy::new(&named, &SimOptions::default()).expect("valid");
        let names: Vec<&str> = plain.queues.specs().iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["team-b", "tenant-0", "tenant-1", "tenant-2", "tenant-3"]);
        assert_eq!(plain.queue_of(&named.jobs[0]), format!("tenant-{}", fnv1a("j0") % 4));
    }

    #[test]
    fn a_team_gets_its_quota_back_from_a_borrower_under_stowage_and_waits_under_fifo() {
        // team-a borrows the whole fleet for 10 h; team-b's jobs arrive 10 minutes later.
        let mut jobs: Vec<TraceJob> =
            (0..16).map(|i| job(&format!("a{i:02}"), 0, 36_000, 1, 8, TopologyConstraint::Unconstrained)).collect();
        jobs.extend((0..4).map(|i| job(&format!("b{i}"), 600, 3_600, 1, 8, TopologyConstraint::Unconstrained)));
        for j in &mut jobs {
            j.queue = Some(if j.id.starts_with('a') { "team-a" } else { "team-b" }.into());
        }
        let trace = Trace { jobs, skipped_rows: 0, withdrawn: 0 };
        let opts = SimOptions { queues: team_queues(), ..SimOptions::default() };
        let b_starts = |policy| {
            let run = simulate(&fleet(), &trace, policy, &opts, &mut |_, _| {}).expect("runs");
            assert!(run.jobs.iter().all(|j| j.outcome == Outcome::Completed), "{policy}");
            let preempted: u32 = run.jobs.iter().map(|j| j.preemptions).sum();
            let starts: Vec<u64> =
                run.jobs.iter().filter(|j| j.queue == "team-b").filter_map(|j| j.first_start_s).collect();
            (starts, preempted)
        };
        let (starts, preempted) = b_starts(Policy::Stowage);
        assert!(starts.len() == 4 && starts.iter().all(|&s| s == 600), "reclaimed at once: {starts:?}");
        assert_eq!(preempted, 4, "exactly team-b's 32 GPUs taken back");
        let (starts, preempted) = b_starts(Policy::FifoFirstFit);
        assert!(starts.iter().all(|&s| s >= 36_000) && preempted == 0, "fifo never preempts: {starts:?}");
    }

    #[test]
    fn node_failures_evict_and_restart_gangs_and_every_job_still_completes() {
        let opts = SimOptions { node_failure_rate: 2.0, seed: 3, ..SimOptions::default() };
        let run = simulate(&fleet(), &trace(), Policy::Stowage, &opts, &mut |_, _| {}).expect("runs");
        assert!(run.node_failures > 0);
        assert!(run.jobs.iter().map(|j| j.restarts).sum::<u32>() > 0, "some gang was hit");
        assert!(run.jobs.iter().all(|j| j.outcome == Outcome::Completed), "all finish despite failures");
    }

    /// Gangs of 4 nodes running 30 days, each node failing about twice a day: a run is cut
    /// short every three hours, so no run ever finishes. The replay ends all the same (it used to
    /// go on for good), each gang failed once node failures cut it short one time more than the
    /// budget allows, and the report says so.
    #[test]
    fn a_replay_where_failures_outpace_every_run_ends_with_the_gangs_failed_past_their_budget() {
        let rack = TopologyConstraint::Required(Level::Rack);
        let jobs = (0..3).map(|i| job(&format!("long{i}"), i * 60, 30 * 86_400, 4, 8, rack)).collect();
        let trace = Trace { jobs, skipped_rows: 0, withdrawn: 0 };
        for max_restarts in [0, 3] {
            let explain = vec!["long0".to_string()];
            let opts = SimOptions { node_failure_rate: 2.0, seed: 3, max_restarts, explain, ..SimOptions::default() };
            let run = simulate(&fleet(), &trace, Policy::Stowage, &opts, &mut |_, _| {}).expect("ends");
            let told = story::text("stowage", &run.stories[0]);
            let last = told.lines().last().unwrap_or_default();
            assert!(
                last.contains(") failed: node failures cut its runs short more often than --max-restarts"),
                "{told}"
            );
            for j in &run.jobs {
                assert_eq!(j.outcome, Outcome::Failed, "{}", j.id);
                assert_eq!(j.restarts - j.preemptions, max_restarts + 1, "{}: cut short once past the budget", j.id);
                assert!(j.end_s.is_some_and(|e| e < 30 * 86_400), "{}: failed, not finished", j.id);
            }
            let report = crate::report::policy_report(&fleet(), &run);
            assert_eq!((report.jobs.failed, report.jobs.completed), (3, 0));
            let failed: Vec<(&str, u64, u32)> =
                report.failed.iter().map(|f| (f.id.as_str(), f.failed_at_s, f.node_failure_restarts)).collect();
            let expected: Vec<(&str, u64, u32)> =
                run.jobs.iter().map(|j| (j.id.as_str(), j.end_s.expect("failed at"), max_restarts + 1)).collect();
            assert_eq!(failed, expected, "each failed job listed, with when and how often it was cut short");
            assert!(report.jct_s.mean == 0.0, "a failed gang has no completion time: {:?}", report.jct_s);
        }
    }

    #[test]
    fn load_scales_and_failure_rates_out_of_range_are_refused_by_name() {
        for (load_scale, node_failure_rate, option) in [
            (1e-300, 0.0, "--load-scale"),
            (0.0009, 0.0, "--load-scale"),
            (1000.5, 0.0, "--load-scale"),
            (f64::NAN, 0.0, "--load-scale"),
            (1.0, 24.01, "--node-failure-rate"),
            (1.0, -0.1, "--node-failure-rate"),
            (1.0, f64::INFINITY, "--node-failure-rate"),
        ] {
            let opts = SimOptions { load_scale, node_failure_rate, ..SimOptions::default() };
            let err = simulate(&fleet(), &trace(), Policy::Stowage, &opts, &mut |_, _| {}).expect_err("refused");
            assert!(err.to_string().contains(option), "{load_scale} {node_failure_rate}: {err}");
        }
        // The ends themselves are taken.
        for (load_scale, node_failure_rate) in [(0.001, 24.0), (1000.0, 0.0)] {
            let opts = SimOptions { load_scale, node_failure_rate, ..SimOptions::default() };
            let run = simulate(&fleet(), &trace(), Policy::Stowage, &opts, &mut |_, _| {}).expect("taken");
            assert_eq!(run.jobs.len(), trace().jobs.len());
        }
    }

    #[test]
    fn tenants_and_restart_budgets_beyond_their_bounds_are_refused_by_name() {
        let tenants = SimOptions { tenants: MAX_TENANTS + 1, ..SimOptions::default() };
        let restarts = SimOptions { max_restarts: MAX_RESTARTS_LIMIT + 1, ..SimOptions::default() };
        for (opts, option) in [(tenants, "--tenants"), (restarts, "--max-restarts")] {
            let err = simulate(&fleet(), &trace(), Policy::Stowage, &opts, &mut |_, _| {}).expect_err("refused");
            assert!(err.to_string().contains(option), "{err}");
        }
    }

    /// The busy series (the utilisation plot) goes on after the queue has drained, to the last
    /// gang's end: it used to stop at the last cycle with a gang waiting.
    #[test]
    fn the_busy_series_runs_to_the_last_end_and_ends_idle() {
        let run = simulate(&fleet(), &trace(), Policy::Stowage, &SimOptions::default(), &mut |_, _| {}).expect("runs");
        let last_end = run.jobs.iter().filter_map(|j| j.end_s).max().expect("jobs end");
        assert_eq!(run.busy.last(), Some(&(last_end, 0)), "{:?}", &run.busy[run.busy.len().saturating_sub(3)..]);
    }

    #[test]
    fn required_rack_gangs_are_placed_inside_one_rack_and_slowed_by_nothing() {
        let run = simulate(&fleet(), &trace(), Policy::Stowage, &SimOptions::default(), &mut |_, _| {}).expect("runs");
        for j in &run.jobs {
            let p = j.placement.as_ref().expect("placed");
            assert!(p.within(Level::Rack), "{} spans {:?}", j.id, p.span_level);
            assert_eq!(p.slowdown, 1.0);
        }
    }

    #[test]
    fn spanning_blocks_costs_what_the_model_says() {
        // Two 8-GPU pods that fit no rack on this fleet (one host per rack) must cross racks.
        let f = fleet_of("nodes: 4, fanout: {rack: 1, block: 2}}\n  topology: [{level: block}, {level: rack}]");
        let t = Trace { jobs: vec![job("x", 0, 1000, 2, 8, TopologyConstraint::Unconstrained)], ..Trace::default() };
        let run = simulate(&f, &t, Policy::Stowage, &SimOptions::default(), &mut |_, _| {}).expect("runs");
        let j = &run.jobs[0];
        assert_eq!(j.placement.as_ref().map(|p| p.span_level), Some(Some(Level::Block)));
        assert_eq!(j.end_s, Some(1050), "+5% for crossing racks inside a block");
    }

    #[test]
    fn volcano_binds_each_job_to_one_cluster_at_submit() {
        let f = FleetSpec::parse(
            "clusters:\n- name: a\n  topology: []\n  pools:\n  - {name: p, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 64, memory_gib: 512, nodes: 1}\n- name: b\n  topology: []\n  pools:\n  - {name: q, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 64, memory_gib: 512, nodes: 1}\n",
            "t.yaml",
        )
        .and_then(|s| s.build("t.yaml"))
        .expect("fleet");
        // Three one-node jobs at once: the spreader sends 1 to a, 2 to b, and 3 to a (a tie).
        // Job 2 ends first, but 3 stays bound to a until job 1 ends: no lookahead after submit.
        let t = Trace {
            jobs: vec![
                job("1", 0, 1000, 1, 8, TopologyConstraint::Unconstrained),
                job("2", 0, 100, 1, 8, TopologyConstraint::Unconstrained),
                job("3", 0, 10, 1, 8, TopologyConstraint::Unconstrained),
            ],
            ..Trace::default()
        };
        let volcano = simulate(&f, &t, Policy::VolcanoBinpack, &SimOptions::default(), &mut |_, _| {}).expect("runs");
        let stowage = simulate(&f, &t, Policy::Stowage, &SimOptions::default(), &mut |_, _| {}).expect("runs");
        let starts = |run: &PolicyRun| run.jobs.iter().map(|j| j.first_start_s).collect::<Vec<_>>();
        assert_eq!(starts(&volcano), [Some(0), Some(0), Some(1000)]);
        // Stowage starts the shorter two first (`ShortFirst`), and job 1 on whichever cluster
        // frees first: job 3's, after 10 s.
        assert_eq!(starts(&stowage), [Some(10), Some(0), Some(0)], "stowage takes whichever cluster frees first");
    }
}
