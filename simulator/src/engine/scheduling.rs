//! One scheduling instant: the cycle. Idle quota is lent (`lend`), the waiting gangs cut to
//! what the cycle must see (`cut`), the snapshot built and `scheduler_core::cycle` run, then
//! its decisions applied: evictions (`evict`), starts, and each waiting gang told its reason
//! (`tell`).

use scheduler_core::{
    Capacity, Config, Cycle, Decision, Gang, Reason, Reserved, Running as Victim, Snapshot, cycle, lanes_per_queue,
};

use crate::cut::{self, Group, Told};
use crate::policy::Policy;

use super::*;

impl Sim<'_> {
    /// One cycle at `t`; whether another should follow at the same instant (see `again`).
    pub(super) fn schedule(&mut self, t: u64) -> Result<bool, SimError> {
        if self.pending.is_empty() {
            // Gangs end after the queue has drained too: the curve goes on to the last one.
            if self.run.busy.last().is_none_or(|&(_, b)| b != self.busy_gpus) {
                self.run.busy.push((t, self.busy_gpus));
            }
            return Ok(false);
        }
        let _span = tracing::debug_span!("cycle", policy = %self.policy, t, pending = self.pending.len()).entered();
        let now_ms = t.saturating_mul(1000);
        self.order_for(now_ms);
        let mut config = self.config;
        if !self.run.cycles.is_multiple_of(u64::from(self.opts.batch_every.max(1))) {
            config.batch = None;
        }
        self.lend(&config, now_ms);
        // Only a policy that plans reservations reads the releases: the others skip building them.
        let releases = if config.reservations.is_some() { self.running.releases() } else { &[] };
        // Only a policy that preempts reads the running gangs as possible victims, and only
        // when a gang it may be handed may evict one (`may_evict_any`): where every queue
        // evicts only lower priorities and nothing waiting is of higher priority than
        // something running (the common case), the cycle would find it evicts nothing.
        let lowest_running = config.preemption.and(self.running.iter().map(|(_, r)| r.gang.priority).min());
        let may_evict = lowest_running.is_some_and(|low| {
            !scheduler_core::preempt::lower_priorities_only(self.queues)
                || self.pending.lent().iter().any(|g| g.priority > low)
        });
        let (victims, victim_jobs): (Vec<Victim<'_>>, Vec<usize>) = if may_evict {
            self.running
                .iter()
                .map(|(j, r)| {
                    let v = Victim {
                        gang: &r.gang,
                        admission: &r.admission,
                        started_ms: r.start_s.saturating_mul(1000),
                        checkpoint_ms: self.last_checkpoint_ms(r, t),
                        evicting: false,
                    };
                    (v, j)
                })
                .unzip()
        } else {
            (Vec::new(), Vec::new())
        };
        let make = |capacity, usage, reserved, unhanded| Snapshot {
            releases: releases.into(),
            running: victims.clone(),
            reserved,
            unhanded,
            ..Snapshot::at(self.fleet, self.queues, capacity, usage, now_ms)
        };
        let (capacity, usage, reserved) =
            (std::mem::take(&mut self.capacity), std::mem::take(&mut self.usage), std::mem::take(&mut self.reserved));
        let every = |n: usize| (0..n).map(Told::Decided).collect::<Vec<_>>();
        let cut = if self.cutting { self.cut(&config, now_ms, (&capacity, &reserved), lowest_running) } else { None };
        let (out, told) = match cut {
            None => {
                let out = cycle(make(capacity, usage, reserved, 0), self.pending.lent(), &config);
                let told = every(out.decisions.len());
                (out, told)
            }
            Some(cut) => {
                self.run.cut_cycles += 1;
                // Kept to run the cycle again on the whole window if the cut proves nothing.
                let spare = (capacity.clone(), usage.clone(), reserved.clone());
                let at: Vec<usize> = cut.handed().collect();
                let out = cycle(make(capacity, usage, reserved, cut.left() as u64), self.pending.front(&at), &config);
                self.pending.unfront(&at);
                let window = self.pending.lent();
                // Who could backfill in front of which of the cycle's reservations, and from
                // where on each hold stood in the way (the cycle decides in window order).
                let lifts = |i: usize| cut::lifts(&window[i], now_ms, &out.reserved);
                // A reserver is always decided; were one not found, only the first gang decided
                // is known to have had no hold before it.
                let made_at: Vec<usize> = out
                    .reserved
                    .iter()
                    .map(|r| at.iter().copied().find(|&i| window[i].id == r.gang).unwrap_or(0))
                    .collect();
                let made_before = |i: usize| {
                    made_at.iter().take(64).enumerate().filter(|&(_, &p)| p < i).fold(0, |m, (j, _)| m | 1 << j)
                };
                // A left-out gang due a reservation would have made one, had the cycle made
                // fewer than it may, or any after the gang's place. (With one to make, the
                // first of a class left waiting for room made it, or no later one of the class
                // could: those left out are all behind a handed class-mate as old or older.)
                let may_make = many_reservations(&config);
                let due = |i: usize| {
                    config.reservations.is_some_and(|r| r.due(now_ms.saturating_sub(window[i].submitted_ms)))
                };
                let last_made = made_at.iter().copied().max();
                let would_reserve = may_make > 0
                    && cut.left_out().any(|i| due(i) && (made_at.len() < may_make || last_made.is_some_and(|p| i < p)));
                let word = if would_reserve { None } else { cut.word(&out.decisions, made_before, lifts) };
                match word {
                    Some(told) => {
                        if self.opts.check_cut {
                            let whole = cycle(make(spare.0, spare.1, spare.2, 0), window, &config);
                            self.compare_cut(t, &out, &told, &whole)?;
                        }
                        (out, told)
                    }
                    None => {
                        self.run.cut_undone += 1;
                        let out = cycle(make(spare.0, spare.1, spare.2, 0), self.pending.lent(), &config);
                        let told = every(out.decisions.len());
                        (out, told)
                    }
                }
            }
        };
        self.run.cycles += 1;
        if let Some(b) = &out.batch {
            self.run.batch_cycles += 1;
            self.run.batch_kept += u64::from(b.kept_ilp);
        }
        self.capacity = out.capacity;
        self.usage = out.usage;
        self.reserved = out.reserved;
        let waiting = |d: &Decision| matches!(d, Decision::Pending(r) if !r.is_permanent());
        let decided: Vec<bool> =
            told.iter().map(|t| matches!(*t, Told::Decided(k) if !waiting(&out.decisions[k]))).collect();
        // A lane admitted at the end of what it was handed, with more waiting behind: the
        // dispatcher's cycle, handed every gang, would have gone on into them (admitted gangs
        // do not count against the depth), so another cycle follows at this instant.
        let again = self.pending.edges().iter().any(|&e| {
            matches!(told[e], Told::Decided(k) if matches!(out.decisions[k], Decision::Admit(_) | Decision::Preempt { .. }))
        });
        let jobs = self.pending.jobs().to_vec();
        let taken = self.pending.take_decided(&decided);
        self.evict(t, &out.decisions, &victim_jobs);
        self.tell(t, out.decisions, &told, &jobs, taken)?;
        self.run.busy.push((t, self.busy_gpus));
        Ok(again)
    }

    /// Puts in force the shorter-first cap for the queue's wait at `now_ms`, as the dispatcher
    /// does before each cycle (`Config::for_waiting`), over every waiting job: where it moved,
    /// the queues are ordered again.
    fn order_for(&mut self, now_ms: u64) {
        let Some(short_first) = self.short_first else {
            return;
        };
        let in_force = Some(short_first.in_force(self.pending.mean_wait_ms(now_ms)));
        if in_force != self.config.short_first {
            tracing::debug!(
                cap_ms = in_force.map(|s| s.cap_ms),
                pending = self.pending.len(),
                "the shorter-first cap moved"
            );
            self.config.short_first = in_force;
            let (config, queues) = (self.config, self.queues);
            self.pending.reorder(|g| scheduler_core::order_ms(g, queues, &config));
        }
    }

    /// Which of the window a cut cycle hands the cycle (`cut::plan`), given what is free
    /// (`capacity`), the last cycle's reservations and the lowest priority running. With more
    /// than one reservation a cycle, the first gangs of a class due one, as many as a cycle may
    /// make, are always handed: one of them left out would have made one.
    pub(super) fn cut(
        &self,
        config: &Config,
        now_ms: u64,
        (capacity, reserved): (&Capacity, &[Reserved]),
        lowest_running: Option<i32>,
    ) -> Option<cut::Cut> {
        let (fleet, classes) = (self.fleet, &self.classes);
        let mut due_left = many_reservations(config);
        let members = self.pending.lent().iter().zip(self.pending.jobs()).map(|(g, &j)| {
            let mut group = classes.at(self.groups[j], g, (config, self.queues), (now_ms, reserved), lowest_running);
            let due = config.reservations.is_some_and(|r| r.due(now_ms.saturating_sub(g.submitted_ms)));
            if due_left > 0 && due && matches!(group, Some(Group::Class { .. })) {
                due_left -= 1;
                group = None;
            }
            (group, self.records[j].gpus)
        });
        cut::plan(members, |g| match g {
            Group::Queue(_) => fleet.clusters().iter().map(|c| free_gpus(fleet, capacity, c, 1)).sum(),
            Group::Class { class: c, .. } => {
                let per_pod = classes.gpus_per_pod(c);
                classes.clusters(c).iter().map(|&i| free_gpus(fleet, capacity, &fleet.clusters()[i], per_pod)).sum()
            }
        })
    }

    /// The cycle looks at no more than the first `depth` of each lane (each queue where it
    /// orders by queue, `lanes_per_queue`, else all together): only those are lent. The others wait another cycle, as the
    /// cycle would have told them; under the baselines it is shown even fewer (`cut`).
    pub(super) fn lend(&mut self, config: &Config, now_ms: u64) {
        let policy = self.policy;
        for g in self.pending.lend(config.depth, lanes_per_queue(self.queues, config.fair_sharing)) {
            if let Some(only) = policy.nominated(self.fleet, g, now_ms) {
                g.clusters.only = Some(only);
            }
        }
        // Overtaken, they are not looked at: the cycle would have said so.
        for &j in self.pending.overtaken() {
            let queue = config.fair_sharing.then(|| self.records[j].queue.clone());
            self.records[j].outcome = Outcome::Pending(Arc::new(Reason::BeyondDepth { queue, depth: config.depth }));
        }
        let unseen = self.pending.len() - self.pending.lent().len();
        if unseen > 0 {
            *self.run.pending_reason_cycles.entry(Reason::BEYOND_DEPTH).or_default() += unseen as u64;
        }
    }

    /// Every eviction before any start: the cycle decides in its own order, not the window's,
    /// so a gang earlier in the window may have been given what a later preemptor's victims free.
    pub(super) fn evict(&mut self, t: u64, decisions: &[Decision], victim_jobs: &[usize]) {
        for d in decisions {
            if let Decision::Preempt { victims, .. } = d {
                for v in victims {
                    if let Some(vj) = victim_jobs.iter().copied().find(|&vj| *v == *self.records[vj].id) {
                        self.evicted(t, vj);
                    }
                }
            }
        }
    }

    /// What the cycle told each gang of the window (`jobs`, in window order): the decided ones
    /// (`taken`, in the same order) start or are refused, the rest are told why they wait, and
    /// the reasons are counted by kind.
    pub(super) fn tell(
        &mut self,
        t: u64,
        decisions: Vec<Decision>,
        told: &[Told],
        jobs: &[usize],
        taken: Vec<(usize, Gang)>,
    ) -> Result<(), SimError> {
        let mut taken = taken.into_iter();
        let mut decisions: Vec<Option<Decision>> = decisions.into_iter().map(Some).collect();
        // The words each class's first gang left waiting (by window position) gives its
        // class-mates this cycle: one allocation shared by the class.
        let mut words_of: Vec<Option<Arc<Reason>>> = vec![None; jobs.len()];
        // Reasons counted by kind, a run of the same kind at a time: most of a cycle's share one.
        let mut run_of: Option<(&'static str, u64)> = None;
        for (&j, &told) in jobs.iter().zip(told) {
            let kind = match told {
                Told::Decided(k) => match decisions[k].take() {
                    Some(Decision::Pending(reason)) if !reason.is_permanent() => {
                        let kind = reason.kind();
                        // Kept when the same: its class-mates are then told by the same words as
                        // the cycle before, with nothing to change (`Told::Like`).
                        if !matches!(&self.records[j].outcome, Outcome::Pending(r) if **r == reason) {
                            self.records[j].outcome = Outcome::Pending(Arc::new(reason));
                        }
                        kind
                    }
                    Some(decision) => {
                        let Some((_, gang)) = taken.next() else { break };
                        match decision {
                            Decision::Admit(admission) => self.start(t, j, gang, admission)?,
                            Decision::Preempt { admission, .. } => self.start(t, j, gang, admission)?,
                            Decision::Pending(reason) => self.records[j].outcome = Outcome::Rejected(Box::new(reason)),
                        }
                        continue;
                    }
                    None => continue,
                },
                // The words are the cycle's; written only when they change (most cycles, a
                // gang left out is told what it was told the cycle before).
                Told::Behind(at) => {
                    let (blocker, rec) = (&self.records[jobs[at]].id, &self.records[j]);
                    let told_so = matches!(&rec.outcome, Outcome::Pending(r)
                        if matches!(&**r, Reason::WaitingBehind { queue, gang } if *queue == rec.queue && gang == blocker));
                    if !told_so {
                        let reason = Reason::WaitingBehind { queue: rec.queue.clone(), gang: blocker.clone() };
                        self.records[j].outcome = Outcome::Pending(Arc::new(reason));
                    }
                    Reason::WAITING_BEHIND
                }
                Told::Like(at) => {
                    let words = match &words_of[at] {
                        Some(words) => words.clone(),
                        None => {
                            let Outcome::Pending(reason) = &self.records[jobs[at]].outcome else {
                                unreachable!("a class's first gang left waiting is recorded pending before the rest")
                            };
                            let words = match Told::words(reason) {
                                w if std::ptr::eq(w, &**reason) => reason.clone(),
                                // Its class-mates' words from the cycle before, when the same.
                                w => match &self.records[j].outcome {
                                    Outcome::Pending(r) if **r == *w => r.clone(),
                                    _ => Arc::new(w.clone()),
                                },
                            };
                            words_of[at] = Some(words.clone());
                            words
                        }
                    };
                    let kind = words.kind();
                    // Told so last cycle: the same words, not even a count to change.
                    if !matches!(&self.records[j].outcome, Outcome::Pending(r) if Arc::ptr_eq(r, &words)) {
                        self.records[j].outcome = Outcome::Pending(words);
                    }
                    kind
                }
            };
            match &mut run_of {
                Some((k, n)) if std::ptr::eq(*k, kind) => *n += 1,
                _ => {
                    if let Some((k, n)) = run_of.replace((kind, 1)) {
                        *self.run.pending_reason_cycles.entry(k).or_default() += n;
                    }
                }
            }
        }
        if let Some((k, n)) = run_of {
            *self.run.pending_reason_cycles.entry(k).or_default() += n;
        }
        Ok(())
    }

    /// `SimOptions::check_cut`: what a cut cycle (`out`, `told`) tells each gang of the window,
    /// against what the `whole` window's cycle does, and the state each leaves.
    pub(super) fn compare_cut(&self, t: u64, out: &Cycle, told: &[Told], whole: &Cycle) -> Result<(), SimError> {
        let window = self.pending.lent();
        let pending = |d: &Decision| match d {
            Decision::Pending(r) => Some(r.clone()),
            _ => None,
        };
        let differs = |what: &str, cut: String, whole: String| SimError::CutDiffers {
            policy: self.policy,
            time_s: t,
            what: what.into(),
            cut,
            whole,
        };
        for (i, (&told, want)) in told.iter().zip(&whole.decisions).enumerate() {
            let got = match told {
                Told::Decided(k) => out.decisions[k].clone(),
                Told::Behind(at) => {
                    let queue = self.records[self.pending.jobs()[i]].queue.clone();
                    Decision::Pending(Reason::WaitingBehind { queue, gang: window[at].id.to_string() })
                }
                // Told like a gang the whole cycle did not leave waiting: shown as that decision.
                Told::Like(at) => match pending(&whole.decisions[at]) {
                    Some(r) => Decision::Pending(Told::words(&r).clone()),
                    None => whole.decisions[at].clone(),
                },
            };
            if got != *want {
                let words = |d: &Decision| pending(d).map_or_else(|| format!("{d:?}"), |r| format!("{r:?}"));
                return Err(differs(&format!("job {}", window[i].id), words(&got), words(want)));
            }
        }
        if out.reserved != whole.reserved {
            return Err(differs("the reservation", format!("{:?}", out.reserved), format!("{:?}", whole.reserved)));
        }
        if out.usage != whole.usage {
            return Err(differs("the quota usage", format!("{:?}", out.usage), format!("{:?}", whole.usage)));
        }
        if out.capacity != whole.capacity {
            let free = |c: &Cycle| format!("{} GPUs free", fragmented_free(self.fleet, &c.capacity).1);
            return Err(differs("the capacity left", free(out), free(whole)));
        }
        Ok(())
    }
}

/// A waiting gang's reason until a cycle has looked at it, as the cycle words it.
pub(super) fn not_looked_at(policy: Policy, queue: &str) -> Reason {
    let config = policy.config();
    Reason::BeyondDepth { queue: config.fair_sharing.then(|| queue.to_string()), depth: config.depth }
}

/// How many reservations a cycle under `config` may make, when more than one or when a class's
/// gangs are not ordered by age: then gangs due one are handed to a cut cycle and a cut that
/// left one out is checked (`Sim::cut`). With one, in submit order, the first of a class left
/// waiting for room makes it or none of the class could (those behind it are younger), so the
/// cut needs neither (0). Shorter gangs first (`Config::short_first`) orders a class by run
/// time too: an older class-mate behind the first may be due when the first is not.
fn many_reservations(config: &Config) -> usize {
    match config.reservations {
        Some(r) if r.most() > 1 || config.short_first.is_some() => r.most(),
        _ => 0,
    }
}
