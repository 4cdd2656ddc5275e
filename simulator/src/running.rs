//! The simulator's running gangs by job and, beside them in order of expected end, what each
//! gives back then: a cycle that plans a reservation borrows those releases instead
//! of having every running gang's hosts copied out again after every event. What they add up
//! to is kept too (`Ledger`), for the invariant check after every event.

use std::collections::BTreeMap;

use scheduler_core::invariants::{Ledger, Violation};
use scheduler_core::{Admission, Fleet, Gang, Queues, Release};

pub(crate) struct Running {
    pub gang: Gang,
    pub admission: Admission,
    pub start_s: u64,
    /// Run-time factor of its placement (the topology cost).
    pub slowdown: f64,
    /// When it will finish (this simulation knows; production estimates).
    pub end_s: u64,
}

#[derive(Default)]
pub(crate) struct RunningSet {
    by_job: BTreeMap<usize, Running>,
    /// The expected end and job of each of `releases`, ascending: the order a reservation
    /// searches them in, so the core's sort finds them sorted already.
    ends: Vec<(u64, usize)>,
    releases: Vec<Release>,
    ledger: Ledger,
}

impl RunningSet {
    /// A gang starts; a host it would over-commit is a violation (and it runs nonetheless: the
    /// replay stops on it).
    pub fn insert(&mut self, fleet: &Fleet, queues: &Queues, job: usize, r: Running) -> Result<(), Violation> {
        // Started again while still running: the old run gives back what it held first.
        self.remove(fleet, queues, job);
        let counted = self.ledger.add(fleet, queues, &r.gang, &r.admission);
        let release = Release::of(&r.gang, &r.admission, r.end_s.saturating_mul(1000));
        let end = (release.end_ms, job);
        self.by_job.insert(job, r);
        let at = self.ends.partition_point(|&e| e < end);
        self.ends.insert(at, end);
        self.releases.insert(at, release);
        counted
    }

    pub fn remove(&mut self, fleet: &Fleet, queues: &Queues, job: usize) -> Option<Running> {
        let r = self.by_job.remove(&job)?;
        self.ledger.remove(fleet, queues, &r.gang, &r.admission);
        self.forget((r.end_s.saturating_mul(1000), job));
        Some(r)
    }

    fn forget(&mut self, end: (u64, usize)) {
        let at = self.ends.partition_point(|&e| e < end);
        // A running job's end does not change while it runs: its key is there.
        debug_assert_eq!(self.ends.get(at), Some(&end), "the release of job {} ending at {} ms", end.1, end.0);
        self.ends.remove(at);
        self.releases.remove(at);
    }

    /// What the running gangs give back at their expected ends, in order of those ends (ties
    /// in job order).
    pub fn releases(&self) -> &[Release] {
        &self.releases
    }

    /// What the running gangs add up to.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    pub fn contains(&self, job: usize) -> bool {
        self.by_job.contains_key(&job)
    }

    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (usize, &Running)> {
        self.by_job.iter().map(|(&j, r)| (j, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::fixture::{GangExt, gang, greedy, uniform_cluster};
    use scheduler_core::{Decision, FleetBuilder, Level, QueueSpec, Snapshot, cycle};

    /// The releases and the ledger follow the running gangs through starts, restarts and ends
    /// in any order: the releases stay in order of expected end (ties in job order), the
    /// ledger ends as one counted afresh from the gangs left.
    #[test]
    fn releases_and_ledger_follow_the_gangs() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Host, 4)]).expect("cluster");
        let fleet = b.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let jobs = [5, 1, 3, 9, 2];
        let ends_s = [20, 50, 30, 20, 10];
        let gangs: Vec<Gang> = jobs.iter().map(|j| gang(&format!("j{j}")).pods(1).gpus(4)).collect();
        let out = cycle(Snapshot::idle(&fleet, &queues), &gangs, &greedy());
        let mut started: Vec<(usize, Running)> = jobs
            .iter()
            .zip(gangs)
            .zip(out.decisions)
            .zip(ends_s)
            .map(|(((&j, gang), d), end_s)| {
                let Decision::Admit(admission) = d else { panic!("j{j} admitted: {d:?}") };
                (j, Running { gang, admission, start_s: 0, slowdown: 1.0, end_s })
            })
            .collect();
        let j2 = started.pop().expect("j2");
        let mut set = RunningSet::default();
        for (j, r) in started {
            set.insert(&fleet, &queues, j, r).expect("room");
        }
        assert!(set.remove(&fleet, &queues, 3).is_some());
        assert!(set.remove(&fleet, &queues, 3).is_none());
        set.insert(&fleet, &queues, j2.0, j2.1).expect("room");
        let seen = |set: &RunningSet| -> Vec<(String, u64)> {
            set.releases().iter().map(|r| (r.gang.to_string(), r.end_ms)).collect()
        };
        let want = |v: &[(&str, u64)]| -> Vec<(String, u64)> { v.iter().map(|&(g, t)| (g.to_string(), t)).collect() };
        assert_eq!(seen(&set), want(&[("j2", 10_000), ("j5", 20_000), ("j9", 20_000), ("j1", 50_000)]));
        // Started again (restarted elsewhere, say) with another expected end: it moves.
        let mut j9 = set.remove(&fleet, &queues, 9).expect("j9 runs");
        set.insert(&fleet, &queues, 9, Running { end_s: 60, ..clone_running(&j9) }).expect("room");
        j9.end_s = 5;
        set.insert(&fleet, &queues, 9, j9).expect("room");
        assert_eq!(seen(&set), want(&[("j9", 5_000), ("j2", 10_000), ("j5", 20_000), ("j1", 50_000)]));
        let left: Vec<usize> = set.iter().map(|(j, _)| j).collect();
        assert_eq!(left, [1, 2, 5, 9]);
        let mut afresh = Ledger::default();
        for (_, r) in set.iter() {
            afresh.add(&fleet, &queues, &r.gang, &r.admission).expect("room");
        }
        assert_eq!(set.ledger(), &afresh);
    }

    fn clone_running(r: &Running) -> Running {
        Running { gang: r.gang.clone(), admission: r.admission.clone(), ..*r }
    }
}
