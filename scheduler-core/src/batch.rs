//! The batch optimiser: the gangs at the head of the queue assigned to domains jointly, by an
//! integer program, where the greedy cycle takes them one at a time and can strand room that
//! a different arrangement would have used.
//!
//! The model has one binary per (gang, candidate domain): the gang's pods all go inside that
//! domain, with GPUs of one flavor. Candidates are the domains at the gang's narrowest
//! topology level (preferred or required), one level wider, and the required level (the whole
//! cluster when none), where every pod set fits on its own as things stand; the best-fitting
//! few per gang are kept. Constraints: a gang takes at most one candidate; inside every
//! candidate domain and each of its ancestors, for each pod size `s` in the window, the pods
//! of `s` GPUs or more stay within the hosts' room for `s`-GPU pods, and their GPUs within the
//! free GPUs of hosts with `s` or more free (a pod needs one host: GPUs scattered in pieces
//! smaller than it are no use to it); each queue stays within its quota headroom; and when the
//! greedy cycle reserved room for blocked gangs, no gang behind one is admitted without it
//! unless it would also have been let backfill (it ends before that reservation starts), so
//! the optimiser may rearrange the queue to fit a blocked gang but never starves it. The
//! objective is admitted GPUs, weighted by the gang's place in the queue (the head counts
//! double the tail, so of two waiting gangs the later is chosen only when that admits clearly
//! more) with a bonus for meeting its locality.
//!
//! The optimiser only ever adds to what the greedy cycle admits: every window gang greedy
//! admitted stays admitted, at a span no wider than greedy gave it (it may move, so that
//! others fit beside it). What it can win is the gangs greedy could not fit; what it cannot do
//! is trade a gang away, so it neither reorders the queue nor costs anyone locality.
//!
//! That is a relaxation (a domain's GPUs may be split across hosts in ways no pod fits), so an
//! answer is only a plan (`Pin`): the cycle realises it with the same placer as always, each
//! chosen gang on greedy's hosts where the answer left it in place, else held inside its
//! domain, then serves every other gang greedily, retrying with the pins that failed first;
//! `cycle` keeps whichever of that and the plain greedy cycle scores higher (`value`). The solver is warm-started with
//! the greedy answer and limited by branch-and-bound nodes, not seconds, so the same snapshot
//! gives the same decisions on any machine. Every answer is checked (integral, one domain per
//! gang, within every row) before use.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use good_lp::{Expression, ProblemVariables, Solution, SolverModel, Variable, variable};

use crate::config::{Batch, Config, Solver};
use crate::decision::{Admission, Decision};
use crate::fleet::{ClusterId, DomainId, FlavorId, Fleet};
use crate::gang::Gang;
use crate::order::queue_order;
use crate::place::View;
use crate::queue::{QueueingStrategy, Queues, quota_charges};
use crate::reason::Reason;
use crate::run::{Run, ask};
use crate::topology::{Level, TopologyConstraint};

/// Values closer than this are equal (they are sums of GPU counts times weights).
pub const EPSILON: f64 = 1e-6;
/// The objective's bonus, as a share of a gang's weighted GPUs, for meeting its locality.
const LOCALITY_BONUS: f64 = 0.1;

/// What the optimiser did in one cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchReport {
    /// Gangs in the window, and the model's size.
    pub window: usize,
    pub binaries: usize,
    pub rows: usize,
    /// The model's objective for the greedy answer (the warm start) and for the solver's.
    pub greedy_objective: f64,
    pub objective: f64,
    /// The bound the solver proved on the model's optimum; `None` when it reports none.
    pub bound: Option<f64>,
    /// `value` of the greedy cycle's decisions and of the cycle that realised the answer.
    pub greedy_value: f64,
    pub realised_value: f64,
    /// Whether the cycle returned the optimiser's decisions (else the greedy ones).
    pub kept_ilp: bool,
    /// Why the solver's answer was not used, when it failed or did not check out.
    pub rejected: Option<Rejected>,
}

impl BatchReport {
    /// How far the answer may be from the model's optimum, as a share of the bound.
    pub fn gap(&self) -> Option<f64> {
        self.bound.map(|b| if b > EPSILON { ((b - self.objective) / b).max(0.0) } else { 0.0 })
    }
}

/// Why an answer of the optimiser was not used. Every answer is checked before use; these
/// name what failed, for the cycle's report and the dispatcher's log.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejected {
    /// The solver failed, in its own words.
    #[error("{solver}: {message}")]
    Solver { solver: &'static str, message: String },
    #[error("answer is not integral: x[{var}] = {value}")]
    NotIntegral { var: usize, value: f64 },
    #[error("answer puts window gang {gang} in two domains")]
    TwoDomains { gang: usize },
    #[error("answer drops window gang {gang}, which greedy admitted")]
    Dropped { gang: usize },
    #[error("answer admits window gang {follower} ahead of the reserved gang {leader}")]
    Overtakes { follower: usize, leader: usize },
    #[error("answer breaks row {row}: {used} > {limit}")]
    Row { row: usize, used: u64, limit: u64 },
    #[error("realised, the plan dropped a gang greedy admitted or overtook the reserved one")]
    Realised,
}

fn solver_error(solver: &'static str) -> impl Fn(String) -> Rejected {
    move |message| Rejected::Solver { solver, message }
}

/// Where the optimiser put gangs: `pins` are (pending index, cluster, domain), in the order
/// the cycle realises them; `window` holds every gang the model weighed, so the cycle knows
/// when it has reached them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    pub window: BTreeSet<usize>,
    /// The gangs the answer admits, in the order the cycle first tries them.
    pub pins: Vec<Pin>,
    /// Each gang holding a reservation, and the gangs behind it that may not start without it.
    pub leaders: Vec<(usize, Vec<usize>)>,
    /// The gangs greedy admitted, which the plan must admit too.
    pub keeps: Vec<usize>,
}

impl Plan {
    /// Whether a cycle that realised the plan kept its promises (a pin can fail where the
    /// model saw room): every gang greedy admitted is admitted, and no follower of a reserved
    /// gang is admitted while it waits.
    pub fn honoured(&self, decisions: &[Decision]) -> bool {
        let admitted = |i: usize| decisions[i].admission().is_some();
        let reservations_kept =
            self.leaders.iter().all(|(leader, followers)| admitted(*leader) || !followers.iter().any(|&f| admitted(f)));
        reservations_kept && self.keeps.iter().all(|&i| admitted(i))
    }
}

/// A gang the plan admits.
#[derive(Debug, Clone)]
pub(crate) enum Pin {
    /// Where the greedy pass put it, on the same hosts: the answer left it in the domain that
    /// holds greedy's placement, and those placements fitted together.
    Again { gang: usize, admission: Admission },
    /// Anywhere inside `domain` of `cluster`, placed as written rather than held when `written`;
    /// for a gang greedy admitted, where greedy put it when the domain has no room after all.
    Within { gang: usize, cluster: ClusterId, domain: DomainId, written: bool, greedy: Option<Admission> },
}

impl Pin {
    /// The pending index of the gang pinned.
    pub(crate) fn gang(&self) -> usize {
        match *self {
            Pin::Again { gang, .. } | Pin::Within { gang, .. } => gang,
        }
    }
}

/// One way to admit a window gang.
#[derive(Debug, Clone)]
struct Candidate {
    /// Index into the window.
    gang: usize,
    cluster: ClusterId,
    domain: DomainId,
    value: f64,
    /// Placed as written, not in its held form (which could never fit).
    written: bool,
}

/// `sum(coefficient * x[candidate]) <= limit`.
#[derive(Debug, Clone, Default)]
struct Row {
    limit: u64,
    terms: Vec<(usize, u64)>,
}

#[derive(Debug)]
struct Model {
    /// Pending indices of the window's gangs.
    window: Vec<usize>,
    candidates: Vec<Candidate>,
    rows: Vec<Row>,
    /// (follower, leader), as window indices: the follower is admitted only with the leader.
    follows: Vec<(usize, usize)>,
    /// Window indices of the gangs greedy admitted: each must take one of its candidates.
    keeps: Vec<usize>,
}

/// The solver's answer: the candidates it chose, and its objective and bound.
#[derive(Debug)]
struct Answer {
    chosen: Vec<usize>,
    objective: f64,
    bound: Option<f64>,
}

/// The optimiser's plan for this cycle, given the greedy cycle's `decisions`; `None` when it
/// has nothing to improve (every gang that waits, waits for something other than room), and
/// `Err` with the report when the solver failed, its answer did not check out (`rejected`
/// says why) or was worth no more than greedy's.
pub(crate) fn plan(
    run: &Run<'_>,
    window: Vec<usize>,
    pending: &[Gang],
    held: &[Cow<'_, Gang>],
    decisions: &[Decision],
    settings: &Batch,
    now_ms: u64,
) -> Option<Result<(Plan, BatchReport), BatchReport>> {
    let follows = follows(pending, decisions, &window, now_ms);
    let model = Model::build(run, pending, held, decisions, window, settings.candidates, follows);
    let has_candidates = |w: &usize| model.candidates.iter().any(|c| c.gang == *w);
    if model.candidates.is_empty() || !model.keeps.iter().all(has_candidates) {
        // A gang greedy admitted that the model cannot hold (its placement was pruned): the
        // greedy answer stands.
        return None;
    }
    let warm = model.warm_start(run.fleet, decisions);
    let mut report = BatchReport {
        window: model.window.len(),
        binaries: model.candidates.len(),
        rows: model.rows.len(),
        greedy_objective: warm.iter().map(|&k| model.candidates[k].value).sum(),
        objective: 0.0,
        bound: None,
        greedy_value: 0.0,
        realised_value: 0.0,
        kept_ilp: false,
        rejected: None,
    };
    let answer = model.solve(settings, &warm).and_then(|a| model.check(&a).map(|()| a));
    match answer {
        Ok(answer) => {
            (report.objective, report.bound) = (answer.objective, answer.bound);
            if answer.objective <= report.greedy_objective + EPSILON {
                // Nothing better than greedy's answer was found: there is nothing to realise.
                return Some(Err(report));
            }
            Some(Ok((model.plan(run.fleet, pending, decisions, &answer, &warm), report)))
        }
        Err(why) => {
            report.rejected = Some(why);
            Some(Err(report))
        }
    }
}

/// The gangs the model weighs: from the priority class of the first gang the greedy cycle
/// left waiting for room, the first `size` in queue order (those it admitted too, so they can
/// be rearranged). Gangs of strict-FIFO queues keep their order and stay out, as do gangs the
/// greedy cycle admitted by preemption and gangs that ask for no GPUs.
pub(crate) fn window(
    queues: &Queues,
    config: &Config,
    pending: &[Gang],
    decisions: &[Decision],
    size: usize,
) -> Option<Vec<usize>> {
    let order = queue_order(pending, queues, config);
    let waits_for_room =
        |r: &Reason| matches!(r, Reason::NoDomain(_) | Reason::HoldingForLocality { .. } | Reason::Reserved { .. });
    let first = order.iter().find(|&&i| matches!(&decisions[i], Decision::Pending(r) if waits_for_room(r)))?;
    let priority = pending[*first].priority;
    let strict = |g: &Gang| {
        queues
            .id(&g.queue)
            .is_some_and(|q| config.strategy.unwrap_or(queues.spec(q).strategy) == QueueingStrategy::StrictFifo)
    };
    let window: Vec<usize> = order
        .into_iter()
        .filter(|&i| {
            let g = &pending[i];
            g.priority == priority
                && g.total_gpus() > 0
                && !strict(g)
                && !matches!(decisions[i], Decision::Preempt { .. })
        })
        .take(size)
        .collect();
    (window.len() >= 2).then_some(window)
}

/// The window gangs that may start only with one holding a reservation: those behind it that
/// would not end before its reservation starts. (window index, leader's window index), by
/// leader.
fn follows(pending: &[Gang], decisions: &[Decision], window: &[usize], now_ms: u64) -> Vec<(usize, usize)> {
    let reserved = window.iter().enumerate().filter_map(|(w, &i)| match &decisions[i] {
        Decision::Pending(Reason::Reserved { in_s, .. }) => Some((w, now_ms.saturating_add(in_s.saturating_mul(1000)))),
        _ => None,
    });
    reserved
        .flat_map(|(leader, start_ms)| {
            let backfills = move |g: &Gang| g.runtime_ms.is_some_and(|r| now_ms.saturating_add(r) <= start_ms);
            (leader + 1..window.len()).filter(move |&w| !backfills(&pending[window[w]])).map(move |w| (w, leader))
        })
        .collect()
}

/// How much a cycle's decisions are worth: every admitted gang's GPUs, weighted by its place in
/// the queue and with the locality bonus for the span it got. The same measure the model
/// maximises, on real placements.
pub(crate) fn value(run: &Run<'_>, pending: &[Gang], held: &[Cow<'_, Gang>], decisions: &[Decision]) -> f64 {
    let fleet = run.fleet;
    let order = queue_order(pending, run.queues, run.config);
    order
        .iter()
        .enumerate()
        .filter_map(|(pos, &i)| {
            let admission = decisions[i].admission()?;
            let level = admission.span(fleet).and_then(|d| fleet.level_of(d));
            Some(worth(&held[i], pos, pending.len(), level))
        })
        .sum()
}

/// A gang's weighted GPUs: `pos` is its place in queue order of `n`; `level` is that of the
/// domain holding all its pods (`None`: the whole cluster).
fn worth(gang: &Gang, pos: usize, n: usize, level: Option<Level>) -> f64 {
    let weight = 1.0 + (n - pos) as f64 / n as f64;
    gang.total_gpus() as f64 * weight * (1.0 + locality_bonus(gang, level))
}

/// The full bonus when the gang's pods share a domain at its narrowest preferred or required
/// level (or it states none), half one level wider, none beyond.
fn locality_bonus(gang: &Gang, level: Option<Level>) -> f64 {
    let Some(target) = narrowest(gang) else { return LOCALITY_BONUS };
    let wider = Level::ALL.iter().rev().copied().find(|l| *l < target);
    match level {
        Some(l) if l >= target => LOCALITY_BONUS,
        Some(l) if Some(l) == wider => LOCALITY_BONUS / 2.0,
        _ => 0.0,
    }
}

/// The narrowest level any multi-pod set of the gang prefers or requires.
fn narrowest(gang: &Gang) -> Option<Level> {
    gang.pod_sets
        .iter()
        .filter(|ps| ps.pods > 1)
        .filter_map(|ps| match ps.topology {
            TopologyConstraint::Required(l) | TopologyConstraint::Preferred(l) => Some(l),
            _ => None,
        })
        .max()
}

/// The narrowest level any pod set requires.
fn required(gang: &Gang) -> Option<Level> {
    gang.pod_sets
        .iter()
        .filter_map(|ps| match ps.topology {
            TopologyConstraint::Required(l) => Some(l),
            _ => None,
        })
        .max()
}

impl Model {
    fn build(
        run: &Run<'_>,
        pending: &[Gang],
        held: &[Cow<'_, Gang>],
        decisions: &[Decision],
        window: Vec<usize>,
        keep: usize,
        follows: Vec<(usize, usize)>,
    ) -> Model {
        let fleet = run.fleet;
        let n = pending.len();
        let positions: BTreeMap<usize, usize> =
            queue_order(pending, run.queues, run.config).into_iter().enumerate().map(|(pos, i)| (i, pos)).collect();
        let mut candidates = Vec::new();
        // Every GPU pod size in the window: the thresholds of the capacity rows.
        let sizes: BTreeSet<u32> =
            window.iter().flat_map(|&i| held[i].pod_sets.iter().map(|ps| ps.shape.gpus)).filter(|&g| g > 0).collect();
        // (domain, flavor, size, counts pods) -> capacity row; (queue, quota key) -> quota row.
        let mut capacity: BTreeMap<(DomainId, FlavorId, u32, bool), Row> = BTreeMap::new();
        let mut quota: BTreeMap<(crate::queue::QueueId, crate::queue::QuotaKey), Row> = BTreeMap::new();
        let mut keeps = Vec::new();
        for (w, &i) in window.iter().enumerate() {
            // Where greedy put it, when it did: (cluster, span).
            let greedy = decisions[i].admission().and_then(|a| Some((a.cluster, a.span(fleet)?)));
            if greedy.is_some() {
                keeps.push(w);
            }
            let Some(queue) = run.queues.id(&held[i].queue) else { continue };
            // As the greedy cycle does: a gang whose held form could never fit goes as written.
            let mut gang: &Gang = &held[i];
            let mut mine = options(run, gang, run.cap(), w, positions[&i], n, greedy);
            let mut written = false;
            if mine.is_empty()
                && !std::ptr::eq(gang, &pending[i])
                && options(run, gang, fleet.allocatable(), w, positions[&i], n, None).is_empty()
            {
                (gang, written) = (&pending[i], true);
                mine = options(run, gang, run.cap(), w, positions[&i], n, greedy);
            }
            for m in &mut mine {
                m.3.written = written;
            }
            // Those holding greedy's placement (so it stays feasible), then the most valuable,
            // best-fitting few, ties in fleet order.
            mine.sort_by(|a, b| {
                (b.0.cmp(&a.0)).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2)).then(a.3.domain.cmp(&b.3.domain))
            });
            mine.truncate(keep.max(1));
            for (_, _, _, cand, f) in mine {
                let k = candidates.len();
                let needs: Vec<(u32, (u64, u64))> =
                    sizes.iter().map(|&size| (size, need(run, gang, &cand, f, size))).collect();
                let mut d = Some(cand.domain);
                while let Some(e) = d {
                    let hist = run.cap().histogram(fleet, e, f);
                    for &(size, (pods, gpus)) in &needs {
                        for (counts_pods, need) in [(true, pods), (false, gpus)] {
                            if need == 0 {
                                continue;
                            }
                            let row = capacity
                                .entry((e, f, size, counts_pods))
                                .or_insert_with(|| Row { limit: room(hist, size, counts_pods), terms: Vec::new() });
                            row.terms.push((k, need));
                        }
                    }
                    d = fleet.domain(e).parent;
                }
                let flavor = fleet.flavor_name(f);
                let per_set = gang.pod_sets.iter().map(|ps| (ps.shape.gpus > 0).then_some(flavor));
                for (key, amount) in quota_charges(run.queues, gang, per_set) {
                    if let Some(limit) = run.queues.headroom(run.usage(), queue, &key) {
                        quota
                            .entry((queue, key))
                            .or_insert_with(|| Row { limit, terms: Vec::new() })
                            .terms
                            .push((k, amount));
                    }
                }
                candidates.push(cand);
            }
        }
        // A row that holds even if every term in it is chosen constrains nothing.
        let rows = capacity
            .into_values()
            .chain(quota.into_values())
            .filter(|r| r.terms.iter().map(|t| t.1).sum::<u64>() > r.limit)
            .collect();
        Model { window, candidates, rows, follows, keeps }
    }

    /// The greedy cycle's answer in the model's terms: for each window gang it admitted, the
    /// narrowest of its candidates that holds the greedy placement's span.
    fn warm_start(&self, fleet: &Fleet, decisions: &[Decision]) -> Vec<usize> {
        let mut chosen: BTreeMap<usize, usize> = BTreeMap::new();
        for (k, c) in self.candidates.iter().enumerate() {
            let Some(a) = decisions[self.window[c.gang]].admission() else { continue };
            let Some(span) = a.span(fleet) else { continue };
            let depth = fleet.domain(c.domain).depth;
            if a.cluster != c.cluster || fleet.domain(span).depth < depth || fleet.ancestor_at(span, depth) != c.domain
            {
                continue;
            }
            let better = chosen.get(&c.gang).is_none_or(|&j| fleet.domain(self.candidates[j].domain).depth < depth);
            if better {
                chosen.insert(c.gang, k);
            }
        }
        chosen.into_values().collect()
    }

    fn solve(&self, settings: &Batch, warm: &[usize]) -> Result<Answer, Rejected> {
        let mut vars = ProblemVariables::new();
        let x: Vec<Variable> = self.candidates.iter().map(|_| vars.add(variable().binary())).collect();
        let objective: Expression = self.candidates.iter().zip(&x).map(|(c, &v)| c.value * v).sum();
        let problem = vars.maximise(objective);
        match settings.solver {
            Solver::Highs => self.solve_highs(problem.using(good_lp::solvers::highs::highs), &x, settings, warm),
            Solver::Microlp => self.solve_generic(problem.using(good_lp::solvers::microlp::microlp), &x),
            #[cfg(feature = "cbc")]
            Solver::Cbc => {
                let mut m = self.constrain(problem.using(good_lp::solvers::coin_cbc::coin_cbc), &x);
                let node_limit = settings.max_nodes.min(i32::MAX as u32);
                m.set_parameter("maxNodes", &node_limit.to_string());
                m.set_parameter("threads", "1");
                m.set_parameter("log", "0");
                let m = good_lp::WithInitialSolution::with_initial_solution(
                    m,
                    warm.iter().map(|&k| (x[k], 1.0)).collect::<Vec<_>>(),
                );
                let solution = m.solve().map_err(|e| solver_error("CBC")(e.to_string()))?;
                let bound = Some(solution.model().best_possible_value()).filter(|b| b.is_finite());
                self.answer(x.iter().map(|&v| solution.value(v)).collect(), bound)
            }
        }
    }

    /// The model's constraints added to a solver's problem.
    fn constrain<M: SolverModel>(&self, mut m: M, x: &[Variable]) -> M {
        let mut per_gang: BTreeMap<usize, Expression> = BTreeMap::new();
        for (c, &v) in self.candidates.iter().zip(x) {
            *per_gang.entry(c.gang).or_default() += v;
        }
        for &(follower, leader) in &self.follows {
            let (f, l) = (per_gang.get(&follower), per_gang.get(&leader));
            match (f, l) {
                (Some(f), Some(l)) => m.add_constraint(f.clone().leq(l.clone())),
                // A leader with no candidate: the follower may not start at all.
                (Some(f), None) => m.add_constraint(f.clone().leq(0)),
                (None, _) => continue,
            };
        }
        for &w in &self.keeps {
            if let Some(e) = per_gang.get(&w) {
                m.add_constraint(e.clone().geq(1));
            }
        }
        for e in per_gang.into_values() {
            m.add_constraint(e.leq(1));
        }
        for r in &self.rows {
            let e: Expression = r.terms.iter().map(|&(k, coef)| coef as f64 * x[k]).sum();
            m.add_constraint(e.leq(r.limit as f64));
        }
        m
    }

    fn solve_generic<M: SolverModel>(&self, m: M, x: &[Variable]) -> Result<Answer, Rejected> {
        let solution = self.constrain(m, x).solve().map_err(|e| solver_error("solver")(e.to_string()))?;
        self.answer(x.iter().map(|&v| solution.value(v)).collect(), None)
    }

    /// A solver's column values as an answer, its objective recomputed from the model.
    fn answer(&self, values: Vec<f64>, bound: Option<f64>) -> Result<Answer, Rejected> {
        let chosen = integral(&values)?;
        let objective = chosen.iter().map(|&k| self.candidates[k].value).sum();
        Ok(Answer { chosen, objective, bound })
    }

    fn solve_highs(
        &self,
        problem: good_lp::solvers::highs::HighsProblem,
        x: &[Variable],
        settings: &Batch,
        warm: &[usize],
    ) -> Result<Answer, Rejected> {
        use highs::HighsModelStatus as S;
        let mut model =
            self.constrain(problem, x).try_into_inner().map_err(|e| solver_error("HiGHS")(e.to_string()))?;
        model.make_quiet();
        let node_limit = i32::try_from(settings.max_nodes).unwrap_or(i32::MAX);
        for (option, value) in [("mip_max_nodes", node_limit), ("threads", 1)] {
            model
                .try_set_option(option, value)
                .map_err(|e| solver_error("HiGHS")(format!("option {option}: {e:?}")))?;
        }
        // Stop at a proven 0.01%: closing the last sliver costs most of the search.
        model
            .try_set_option("mip_rel_gap", 1e-4)
            .map_err(|e| solver_error("HiGHS")(format!("option mip_rel_gap: {e:?}")))?;
        // good_lp numbers columns in variable order.
        let mut start = vec![0.0; x.len()];
        for &k in warm {
            start[k] = 1.0;
        }
        model
            .try_set_solution(Some(&start), None, None, None)
            .map_err(|e| solver_error("HiGHS")(format!("warm start: {e:?}")))?;
        let solved = model.try_solve().map_err(|e| solver_error("HiGHS")(format!("{e:?}")))?;
        match solved.status() {
            S::Optimal
            | S::ReachedIterationLimit
            | S::ObjectiveBound
            | S::ObjectiveTarget
            | S::ReachedSolutionLimit => {}
            other => return Err(solver_error("HiGHS")(format!("ended with status {other:?}"))),
        }
        let bound = solved.double_info_value(c"mip_dual_bound").ok().filter(|b| b.is_finite());
        self.answer(solved.get_solution().columns().to_vec(), bound)
    }

    /// Whether an answer keeps every constraint, recomputed here rather than trusted.
    fn check(&self, answer: &Answer) -> Result<(), Rejected> {
        let mut gangs = BTreeSet::new();
        for &k in &answer.chosen {
            if !gangs.insert(self.candidates[k].gang) {
                return Err(Rejected::TwoDomains { gang: self.candidates[k].gang });
            }
        }
        if let Some(w) = self.keeps.iter().find(|w| !gangs.contains(w)) {
            return Err(Rejected::Dropped { gang: *w });
        }
        for &(follower, leader) in &self.follows {
            if gangs.contains(&follower) && !gangs.contains(&leader) {
                return Err(Rejected::Overtakes { follower, leader });
            }
        }
        let chosen: BTreeSet<usize> = answer.chosen.iter().copied().collect();
        for (r, row) in self.rows.iter().enumerate() {
            let used: u64 = row.terms.iter().filter(|t| chosen.contains(&t.0)).map(|t| t.1).sum();
            if used > row.limit {
                return Err(Rejected::Row { row: r, used, limit: row.limit });
            }
        }
        Ok(())
    }

    /// The pins: first the gangs the answer left where greedy put them, on greedy's hosts (a
    /// subset of what fitted together fits together); then the rest, narrowest domains first
    /// (the model lets a gang in a wide domain use any of its room, so it goes after those
    /// held to a part of it), among equals largest gangs first (they are the hardest to fit
    /// into what is left), then queue order.
    fn plan(&self, fleet: &Fleet, pending: &[Gang], decisions: &[Decision], answer: &Answer, warm: &[usize]) -> Plan {
        let rank: BTreeMap<usize, usize> = self.window.iter().enumerate().map(|(w, &i)| (i, w)).collect();
        let warm: BTreeSet<usize> = warm.iter().copied().collect();
        let (again, mut within): (Vec<usize>, Vec<usize>) = answer.chosen.iter().partition(|k| warm.contains(k));
        let again = again.into_iter().filter_map(|k| {
            let gang = self.window[self.candidates[k].gang];
            let admission = decisions[gang].admission()?.clone();
            Some(Pin::Again { gang, admission })
        });
        let pin = |k: usize| {
            let c = &self.candidates[k];
            let gang = self.window[c.gang];
            let greedy = decisions[gang].admission().cloned();
            Pin::Within { gang, cluster: c.cluster, domain: c.domain, written: c.written, greedy }
        };
        within.sort_by_key(|&k| {
            let (i, d) = (self.window[self.candidates[k].gang], self.candidates[k].domain);
            (std::cmp::Reverse(fleet.domain(d).depth), std::cmp::Reverse(pending[i].total_gpus()), rank[&i])
        });
        let pins: Vec<Pin> = again.chain(within.into_iter().map(pin)).collect();
        let mut leaders: Vec<(usize, Vec<usize>)> = Vec::new();
        for &(f, l) in &self.follows {
            match leaders.last_mut() {
                Some((leader, followers)) if *leader == self.window[l] => followers.push(self.window[f]),
                _ => leaders.push((self.window[l], vec![self.window[f]])),
            }
        }
        let keeps = self.keeps.iter().map(|&w| self.window[w]).collect();
        Plan { window: self.window.iter().copied().collect(), pins, leaders, keeps }
    }
}

/// One gang's candidates on `cap`: (holds greedy's placement, value, GPUs left over, the
/// candidate, its flavor). `greedy` is where the greedy cycle put it: (cluster, span).
fn options(
    run: &Run<'_>,
    gang: &Gang,
    cap: &crate::capacity::Capacity,
    w: usize,
    pos: usize,
    n: usize,
    greedy: Option<(ClusterId, DomainId)>,
) -> Vec<(bool, f64, u64, Candidate, FlavorId)> {
    let fleet = run.fleet;
    let mut mine = Vec::new();
    let Some(queue) = run.queues.id(&gang.queue) else { return mine };
    let Ok(resolved) = gang.pod_sets.iter().map(|ps| run.resolve(queue, ps)).collect::<Result<Vec<_>, _>>() else {
        return mine;
    };
    // Flavors every GPU pod set may take.
    let flavors: Vec<FlavorId> = (0..fleet.flavor_names().len() as u16)
        .map(FlavorId)
        .filter(|f| {
            gang.pod_sets.iter().zip(&resolved).all(|(ps, r)| ps.shape.gpus == 0 || r.flavors.contains(&Some(*f)))
        })
        .collect();
    for c in fleet.cluster_ids() {
        let cl = fleet.cluster(c);
        if cl.cordoned || !gang.clusters.allows(&cl.name, &cl.labels) {
            continue;
        }
        let req = required(gang).map_or(0, |l| cl.depth_for(l));
        let narrow = narrowest(gang).map_or(req, |l| cl.depth_for(l)).max(req);
        let mut depths = vec![narrow, narrow.saturating_sub(1).max(req), req];
        depths.dedup();
        for &f in flavors.iter().filter(|&&f| cl.has_flavor(f)) {
            let asks: Vec<_> =
                gang.pod_sets.iter().map(|ps| ask(fleet, c, ps, (ps.shape.gpus > 0).then_some(f))).collect();
            let view = View { fleet, cap, fill: run.config.fill };
            for &depth in &depths {
                // No wider than the span greedy gave it.
                if greedy.is_some_and(|(_, span)| depth < fleet.domain(span).depth.min(narrow)) {
                    continue;
                }
                for d in view.domains_at(cl.root, depth, &|v, d| asks.iter().all(|a| v.fits(d, a))) {
                    let value = worth(gang, pos, n, fleet.level_of(d));
                    let leftover = cap.free_gpus(fleet, d, f).saturating_sub(gang.total_gpus());
                    let holds_greedy = greedy.is_some_and(|(gc, span)| {
                        gc == c && fleet.domain(span).depth >= depth && fleet.ancestor_at(span, depth) == d
                    });
                    let cand = Candidate { gang: w, cluster: c, domain: d, value, written: false };
                    mine.push((holds_greedy, value, leftover, cand, f));
                }
            }
        }
    }
    mine
}

/// What a candidate takes of a domain's room (`room`) for `size`-GPU pods: (room counted in
/// pods, GPUs on hosts with `size` or more free). On a host it is exact: the room before less
/// the room after. Elsewhere the hosts are not known, so only what holds wherever the pods go:
/// a pod of g GPUs takes at least g / size (rounded down) of a host's room for `size`-GPU pods
/// (counting it once would let the model put two 4-GPU pods and an 8-GPU one on two free
/// hosts), and pods smaller than `size` may take none of it.
fn need(run: &Run<'_>, gang: &Gang, cand: &Candidate, flavor: FlavorId, size: u32) -> (u64, u64) {
    let size = u64::from(size);
    if run.fleet.domain(cand.domain).node.is_some() {
        let free = run.cap().free_gpus(run.fleet, cand.domain, flavor);
        let after = free.saturating_sub(gang.total_gpus());
        let gpus_over = |f: u64| if f >= size { f } else { 0 };
        return (free / size - after / size, gpus_over(free) - gpus_over(after));
    }
    let big = gang.pod_sets.iter().filter(|ps| u64::from(ps.shape.gpus) >= size);
    big.fold((0, 0), |(p, g), ps| {
        let (n, each) = (u64::from(ps.pods), u64::from(ps.shape.gpus));
        (p + n * (each / size), g + n * each)
    })
}

/// From a domain's histogram of hosts by free GPUs: how many pods of `size` GPUs fit on its
/// hosts (`counts_pods`), or how many GPUs its hosts with `size` or more free hold.
fn room(hist: &[u32], size: u32, counts_pods: bool) -> u64 {
    hist.iter()
        .enumerate()
        .map(|(free, &hosts)| {
            let free = free as u64;
            let per_host = if counts_pods {
                free / u64::from(size)
            } else if free >= u64::from(size) {
                free
            } else {
                0
            };
            u64::from(hosts) * per_host
        })
        .sum()
}

/// The chosen candidates of a 0/1 solution, or why it is not one.
fn integral(values: &[f64]) -> Result<Vec<usize>, Rejected> {
    let mut chosen = Vec::new();
    for (k, &v) in values.iter().enumerate() {
        if (v - v.round()).abs() > 1e-6 || !(-1e-6..=1.0 + 1e-6).contains(&v) {
            return Err(Rejected::NotIntegral { var: k, value: v });
        }
        if v > 0.5 {
            chosen.push(k);
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{Capacity, PodShape};
    use crate::fixture::{GangExt, gang, uniform_cluster};
    use crate::fleet::FleetBuilder;
    use crate::queue::{QueueSpec, QuotaUsage};

    /// One rack of two hosts of 8 GPUs: the first with 4 taken, the second free.
    fn rack() -> (Fleet, Capacity) {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "c", "h100", 8, &[(Level::Rack, 1), (Level::Host, 2)]).expect("valid");
        let fleet = b.build().expect("valid");
        let mut cap = Capacity::empty(&fleet);
        let first = fleet.hosts().next().expect("a host").0;
        cap.take(&fleet, first, 4, PodShape { gpus: 1, cpu_milli: 0, memory_mib: 0 });
        cap.commit();
        (fleet, cap)
    }

    fn needs(fleet: &Fleet, cap: &Capacity, g: &Gang, domain: DomainId) -> Vec<(u32, (u64, u64))> {
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("valid");
        let config = Config::stowage();
        let run = Run::new(fleet, &queues, &config, cap.clone(), QuotaUsage::default());
        let cand = Candidate { gang: 0, cluster: ClusterId(0), domain, value: 1.0, written: false };
        [2, 4, 8].into_iter().map(|s| (s, need(&run, g, &cand, FlavorId(0), s))).collect()
    }

    #[test]
    fn on_a_host_a_candidate_takes_exactly_the_room_it_leaves_less() {
        let (fleet, cap) = rack();
        let free = fleet.hosts().nth(1).expect("two hosts").0;
        // Two 2-GPU pods on the free host: 8 free becomes 4, so it loses two 2-GPU slots of
        // four, one 4-GPU slot of two and its one 8-GPU slot, though no pod is that large.
        let pair = gang("pair").pods(2).gpus(2);
        assert_eq!(needs(&fleet, &cap, &pair, free), vec![(2, (2, 4)), (4, (1, 4)), (8, (1, 8))]);
        // On the host with 4 free the same gang takes all of it: nothing is left for any size.
        let half = fleet.hosts().next().expect("a host").0;
        assert_eq!(needs(&fleet, &cap, &pair, half), vec![(2, (2, 4)), (4, (1, 4)), (8, (0, 0))]);
    }

    #[test]
    fn in_a_wider_domain_a_pod_takes_at_least_its_size_in_smaller_slots() {
        let (fleet, cap) = rack();
        let rack = fleet.domain(fleet.hosts().next().expect("a host").0).parent.expect("a rack");
        // One 8-GPU pod takes four 2-GPU slots and two 4-GPU ones wherever it goes; pods
        // smaller than a size may take none of its room.
        let big = gang("big").gpus(8);
        assert_eq!(needs(&fleet, &cap, &big, rack), vec![(2, (4, 8)), (4, (2, 8)), (8, (1, 8))]);
        let pair = gang("pair").pods(2).gpus(2);
        assert_eq!(needs(&fleet, &cap, &pair, rack), vec![(2, (2, 4)), (4, (0, 0)), (8, (0, 0))]);
    }
}
