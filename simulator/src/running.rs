//! The simulator's running gangs by job and, beside them in the same order, what each gives
//! back at its expected end: a cycle that plans a reservation borrows those releases instead
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
    /// The jobs of `releases`, ascending: the order `by_job` iterates in.
    jobs: Vec<usize>,
    releases: Vec<Release>,
    ledger: Ledger,
}

impl RunningSet {
    /// A gang starts; a host it would over-commit is a violation (and it runs nonetheless: the
    /// replay stops on it).
    pub fn insert(&mut self, fleet: &Fleet, queues: &Queues, job: usize, r: Running) -> Result<(), Violation> {
        let counted = self.ledger.add(fleet, queues, &r.gang, &r.admission);
        let release = Release::of(&r.gang, &r.admission, r.end_s.saturating_mul(1000));
        let at = self.jobs.partition_point(|&j| j < job);
        if self.by_job.insert(job, r).is_some() {
            self.releases[at] = release;
        } else {
            self.jobs.insert(at, job);
            self.releases.insert(at, release);
        }
        counted
    }

    pub fn remove(&mut self, fleet: &Fleet, queues: &Queues, job: usize) -> Option<Running> {
        let r = self.by_job.remove(&job)?;
        self.ledger.remove(fleet, queues, &r.gang, &r.admission);
        let at = self.jobs.partition_point(|&j| j < job);
        self.jobs.remove(at);
        self.releases.remove(at);
        Some(r)
    }

    /// What the running gangs give back at their expected ends, in job order.
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

    /// The releases and the ledger follow the running gangs through starts and ends in any
    /// order: the ledger ends as one counted afresh from the gangs left.
    #[test]
    fn releases_and_ledger_follow_the_gangs() {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Host, 4)]).expect("cluster");
        let fleet = b.build().expect("fleet");
        let queues = Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues");
        let jobs = [5, 1, 3, 9, 2];
        let gangs: Vec<Gang> = jobs.iter().map(|j| gang(&format!("j{j}")).pods(1).gpus(4)).collect();
        let out = cycle(Snapshot::idle(&fleet, &queues), &gangs, &greedy());
        let mut started: Vec<(usize, Running)> = jobs
            .iter()
            .zip(gangs)
            .zip(out.decisions)
            .map(|((&j, gang), d)| {
                let Decision::Admit(admission) = d else { panic!("j{j} admitted: {d:?}") };
                (j, Running { gang, admission, start_s: 0, slowdown: 1.0, end_s: 10 * j as u64 })
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
        let seen: Vec<(&str, u64)> = set.releases().iter().map(|r| (r.gang.as_str(), r.end_ms)).collect();
        assert_eq!(seen, [("j1", 10_000), ("j2", 20_000), ("j5", 50_000), ("j9", 90_000)]);
        let left: Vec<usize> = set.iter().map(|(j, _)| j).collect();
        assert_eq!(left, [1, 2, 5, 9]);
        let mut afresh = Ledger::default();
        for (_, r) in set.iter() {
            afresh.add(&fleet, &queues, &r.gang, &r.admission).expect("room");
        }
        assert_eq!(set.ledger(), &afresh);
    }
}
