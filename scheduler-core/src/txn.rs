//! All the scratch state of one cycle as one transaction: free capacity, quota usage, the memo
//! of shapes that fit nowhere, the gangs evicted so far and the cycle's counters. Every change
//! goes through here and is journaled, so [`Txn::rollback`] returns to a [`Savepoint`] whole:
//! a gang tried and failed, a victim set tried, a look at the capacity of the future, leave
//! nothing behind, and a new piece of scratch state cannot be forgotten by one of them.

use std::collections::{BTreeMap, BTreeSet};

use crate::capacity::{self, Capacity};
use crate::decision::{Admission, CycleStats};
use crate::fleet::Fleet;
use crate::gang::Gang;
use crate::memo::{Memo, MemoEntry, MemoKey};
use crate::queue::{Charge, Queues, QuotaUsage};
use crate::snapshot::Running;

#[derive(Debug)]
pub(crate) struct Txn<'a> {
    fleet: &'a Fleet,
    queues: &'a Queues,
    /// Read freely; changed only through `Placer` (which takes) and the methods here, all of
    /// which the capacity's own journal records.
    pub(crate) cap: Capacity,
    usage: QuotaUsage,
    /// Moves on every change to `usage`, a rollback's too: what was found of the usage at one
    /// count still holds while the count is the same (`Run::prepare`).
    usage_changes: u64,
    memo: Memo<'a>,
    /// The memos of the capacity with some of the cycle's reservations given back, by the bit
    /// set of those given back (`reserve::backfill` looks there): that capacity too only
    /// shrinks as the cycle admits, so what fit nowhere in it stays true between backfills.
    lifted: BTreeMap<u64, Memo<'a>>,
    evicted: BTreeSet<&'a str>,
    pub(crate) stats: CycleStats,
    undo: Vec<Undo<'a>>,
}

/// How to undo one change that is not capacity's (capacity journals its own).
#[derive(Debug)]
enum Undo<'a> {
    Charged(Charge),
    Discharged(Charge),
    Evicted(&'a str),
    /// An entry pushed under a memo key (entries are only ever appended).
    Memo(MemoKey<'a>),
    MemoCleared(Memo<'a>, BTreeMap<u64, Memo<'a>>),
    MemosSwapped(u64),
}

/// A point [`Txn::rollback`] returns to. The counters go back with the rest: work done on a
/// hypothetical (a future capacity) is not the cycle's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Savepoint {
    cap: capacity::Checkpoint,
    undo: usize,
    stats: CycleStats,
}

impl<'a> Txn<'a> {
    pub(crate) fn new(fleet: &'a Fleet, queues: &'a Queues, mut cap: Capacity, usage: QuotaUsage) -> Self {
        cap.commit();
        Txn {
            fleet,
            queues,
            cap,
            usage,
            usage_changes: 0,
            memo: Memo::new(),
            lifted: BTreeMap::new(),
            evicted: BTreeSet::new(),
            stats: CycleStats::default(),
            undo: Vec::new(),
        }
    }

    pub(crate) fn usage(&self) -> &QuotaUsage {
        &self.usage
    }

    /// How many times the usage has changed this cycle (see `usage_changes`).
    pub(crate) fn usage_changes(&self) -> u64 {
        self.usage_changes
    }

    pub(crate) fn checkpoint(&self) -> Savepoint {
        Savepoint { cap: self.cap.checkpoint(), undo: self.undo.len(), stats: self.stats }
    }

    pub(crate) fn rollback(&mut self, sp: Savepoint) {
        self.cap.rollback(self.fleet, sp.cap);
        while self.undo.len() > sp.undo {
            let Some(u) = self.undo.pop() else { break };
            match u {
                Undo::Charged(c) => {
                    self.usage.remove_charge(&c);
                    self.usage_changes += 1;
                }
                Undo::Discharged(c) => {
                    self.usage.add_charge(&c);
                    self.usage_changes += 1;
                }
                Undo::Evicted(id) => {
                    self.evicted.remove(id);
                }
                Undo::Memo(key) => {
                    if let Some(entries) = self.memo.get_mut(&key) {
                        entries.pop();
                        if entries.is_empty() {
                            self.memo.remove(&key);
                        }
                    }
                }
                Undo::MemoCleared(memo, lifted) => (self.memo, self.lifted) = (memo, lifted),
                Undo::MemosSwapped(lifted) => self.swap(lifted),
            }
        }
        self.stats = sp.stats;
    }

    /// Forgets the journal: nothing before this point can be rolled back any more. The cycle
    /// calls it between gangs, where no savepoint is open, to keep the journal short.
    pub(crate) fn commit(&mut self) {
        self.cap.commit();
        self.undo.clear();
    }

    /// The cycle's end: what it leaves taken and charged.
    pub(crate) fn finish(mut self) -> (Capacity, QuotaUsage, CycleStats) {
        self.cap.commit();
        (self.cap, self.usage, self.stats)
    }

    /// Charges an admitted gang to its queue (its capacity is already taken by the placer).
    pub(crate) fn charge(&mut self, gang: &Gang, admission: &Admission) {
        if let Some(c) = Charge::of(self.queues, gang, admission.flavors(self.fleet)) {
            self.usage.add_charge(&c);
            self.usage_changes += 1;
            self.undo.push(Undo::Charged(c));
        }
    }

    /// A running gang's pods and quota given back, and the gang marked evicted.
    pub(crate) fn evict(&mut self, r: &Running<'a>) {
        for (ps, p) in r.gang.pod_sets.iter().zip(&r.admission.pod_sets) {
            for &(host, pods) in &p.hosts {
                self.cap.give_back(self.fleet, host, pods, ps.shape);
            }
        }
        // What its preemptor leaves of the room may take a shape that fit nowhere before.
        self.forget();
        if let Some(c) = Charge::of(self.queues, r.gang, r.admission.flavors(self.fleet)) {
            self.usage.remove_charge(&c);
            self.usage_changes += 1;
            self.undo.push(Undo::Discharged(c));
        }
        if self.evicted.insert(r.gang.id.as_str()) {
            self.undo.push(Undo::Evicted(r.gang.id.as_str()));
        }
    }

    pub(crate) fn is_evicted(&self, gang: &str) -> bool {
        self.evicted.contains(gang)
    }

    pub(crate) fn evicts_none(&self) -> bool {
        self.evicted.is_empty()
    }

    pub(crate) fn memo(&self, key: &MemoKey<'a>) -> &[MemoEntry] {
        self.memo.get(key).map_or(&[], Vec::as_slice)
    }

    /// Records that the shape fits nowhere with as many pods as `entry.min_pods` or more, or
    /// more than `entry.largest`, after the entries already there (which keep answering whom
    /// they answered), unless one of those answers and words the gang that made it already.
    pub(crate) fn remember(&mut self, key: MemoKey<'a>, entry: MemoEntry) {
        let entries = self.memo.entry(key).or_default();
        let pods = entry.min_pods;
        if entries.iter().any(|e| e.answers(pods, &entry.flavors) && e.words_fit(pods)) {
            return;
        }
        entries.push(entry);
        self.undo.push(Undo::Memo(key));
    }

    /// Forgets the memos: capacity was given back, so what fit nowhere may fit now.
    pub(crate) fn forget(&mut self) {
        let memo = std::mem::take(&mut self.memo);
        let lifted = std::mem::take(&mut self.lifted);
        self.undo.push(Undo::MemoCleared(memo, lifted));
    }

    /// Trades the memo in use for that of the capacity with the reservations in `lifted` (a
    /// bit per reservation) given back, as their holds are given back, and back again as they
    /// are taken again.
    pub(crate) fn swap_memos(&mut self, lifted: u64) {
        self.swap(lifted);
        self.undo.push(Undo::MemosSwapped(lifted));
    }

    fn swap(&mut self, lifted: u64) {
        std::mem::swap(&mut self.memo, self.lifted.entry(lifted).or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::PodShape;
    use crate::fixture::{GangExt, gang, greedy, uniform_cluster};
    use crate::fleet::{Fleet, FleetBuilder};
    use crate::memo;
    use crate::queue::{QueueSpec, Quota, Resource};
    use crate::reason::{Reason, Shortfall};
    use crate::run::Run;
    use crate::topology::Level;

    fn queues() -> Queues {
        let mut q = QueueSpec::unlimited("default");
        q.quotas = vec![Quota {
            flavor: "h100".into(),
            resource: Resource::Gpu,
            nominal: 64,
            borrowing_limit: None,
            lending_limit: None,
        }];
        Queues::new(vec![q]).expect("valid")
    }

    /// One cluster of two racks of four 8-GPU hosts.
    fn east() -> Fleet {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 2), (Level::Host, 4)]).expect("cluster");
        b.build().expect("fleet")
    }

    /// A gang weighed as written on the capacity another gang of its shape was weighed on, the
    /// other's placement rolled back between (a hold), is placed on the same hosts without a
    /// search; once anything was admitted, it is searched for again.
    #[test]
    fn a_spread_placement_is_taken_again_only_on_the_capacity_it_was_found_on() {
        let fleet = east();
        let queues = queues();
        let config = greedy();
        let (first, second, other) =
            (gang("first").pods(3).gpus(8), gang("second").pods(3).gpus(8), gang("other").pods(1).gpus(8));
        let mut run = Run::new(&fleet, &queues, &config, Capacity::empty(&fleet), QuotaUsage::default());
        let before = run.txn.cap.version();
        let sp = run.txn.checkpoint();
        let found = run.spread(&first).expect("fits");
        assert!(run.txn.stats.attempts > 0, "the first is searched for");
        run.txn.rollback(sp);
        assert_eq!(run.txn.cap.version(), before, "a rollback returns to the version it was at");
        let again = run.spread(&second).expect("fits");
        assert_eq!((&again.pod_sets, run.txn.stats.attempts), (&found.pod_sets, 0), "the second is not");
        run.txn.rollback(sp);
        let taken = run.spread(&other).expect("fits");
        let moved = run.txn.stats.attempts;
        let after = run.spread(&second).expect("fits");
        assert!(run.txn.stats.attempts > moved, "searched again once the capacity changed");
        let hosts = |a: &Admission| a.pod_sets[0].hosts.iter().map(|h| h.0).collect::<Vec<_>>();
        assert!(hosts(&after).iter().all(|h| !hosts(&taken).contains(h)), "{after:?} beside {taken:?}");
    }

    /// A gang is prepared once while the usage stays as it is; a charge, and its rollback,
    /// have it prepared again; a gang of the same id asking for something else is not taken
    /// for it.
    #[test]
    fn a_gang_is_prepared_again_once_the_usage_changed() {
        let (fleet, queues, config) = (east(), queues(), greedy());
        let (big, other) = (gang("big").pods(6).gpus(8), gang("other").pods(3).gpus(8));
        let mut run = Run::new(&fleet, &queues, &config, Capacity::empty(&fleet), QuotaUsage::default());
        let first = run.prepare(&big).expect("48 GPUs of a quota of 64");
        assert!(std::rc::Rc::ptr_eq(&first, &run.prepare(&big).expect("again")), "nothing changed: not again");
        let sp = run.txn.checkpoint();
        let cluster = fleet.cluster_ids().next().expect("east");
        let admission = run.fit(cluster, &other).expect("other fits");
        run.commit(&other, &admission);
        match run.prepare(&big) {
            Err(Reason::QuotaExceeded { requested: 48, available: 40, .. }) => {}
            other => panic!("24 of the 64 are charged: {other:?}"),
        }
        run.txn.rollback(sp);
        assert!(run.prepare(&big).is_ok(), "the charge rolled back");
        let renamed = gang("big").pods(6).gpus(8).flavor("a100");
        assert!(run.prepare(&renamed).is_err(), "the same id, a flavor the queue has no quota for");
    }

    /// Every kind of change a cycle makes, inside a savepoint, then rolled back: the state is
    /// what it was, piece by piece. A new piece of scratch state that `rollback` forgets fails
    /// here (add it to `State`).
    #[test]
    fn rollback_undoes_capacity_usage_memo_evictions_and_counters() {
        let fleet = east();
        let queues = queues();
        let config = greedy();
        let running_gang = gang("running").pods(2).gpus(8);
        let newcomer = gang("new").pods(3).gpus(8).required(Level::Rack);
        let too_big = gang("big").pods(9).gpus(8).required(Level::Rack);

        // One gang runs already: placed and charged, then committed as the snapshot's state.
        let mut run = Run::new(&fleet, &queues, &config, Capacity::empty(&fleet), QuotaUsage::default());
        let placed = run.gang(&running_gang).expect("fits");
        let (cap, usage, _) = run.txn.finish();
        let running =
            Running { gang: &running_gang, admission: &placed, started_ms: 0, checkpoint_ms: None, evicting: false };

        let mut txn = Txn::new(&fleet, &queues, cap.clone(), usage.clone());
        #[derive(Debug, PartialEq)]
        struct State(Capacity, QuotaUsage, bool, usize, CycleStats);
        let key = memo::key(&too_big, &too_big.pod_sets[0]);
        let state = |t: &Txn<'_>| {
            let mut c = t.cap.clone();
            c.commit();
            State(c, t.usage.clone(), t.is_evicted("running"), t.memo(&key).len(), t.stats)
        };
        let shortfall = Shortfall {
            pod_set: "node".into(),
            level: Some(Level::Rack),
            pods: 9,
            gpus_per_pod: 8,
            flavor: Some("h100".into()),
            flavors: 1,
            largest: 4,
            cluster: "east".into(),
            read_as: None,
            oversize: None,
        };
        txn.remember(
            key,
            MemoEntry {
                flavors: vec![None],
                min_pods: 9,
                largest: 4,
                now: shortfall.clone(),
                named_room: 9,
                empty: Some(shortfall),
            },
        );
        txn.stats.attempts = 7;
        let before = state(&txn);

        let sp = txn.checkpoint();
        txn.evict(&running);
        let hosts: Vec<_> = placed.pod_sets[0].hosts.clone();
        for &(h, n) in &hosts {
            txn.cap.take(&fleet, h, n, PodShape { gpus: 8, ..PodShape::default() });
        }
        let other = Admission { cluster: placed.cluster, pod_sets: placed.pod_sets.clone(), ranking: Vec::new() };
        txn.charge(&newcomer, &other);
        txn.forget();
        txn.stats.attempts += 5;
        assert_ne!(state(&txn), before, "the changes are visible inside the savepoint");
        txn.rollback(sp);
        assert_eq!(state(&txn), before);

        // The other memo (the reservation's hold given back) is a swap away, and back.
        let sp = txn.checkpoint();
        txn.swap_memos(1);
        assert_eq!(txn.memo(&key).len(), 0, "the other memo knows nothing yet");
        txn.rollback(sp);
        assert_eq!(state(&txn), before);

        // Nested: an inner rollback keeps the outer changes, the outer undoes both.
        let outer = txn.checkpoint();
        txn.evict(&running);
        let after_evict = state(&txn);
        let inner = txn.checkpoint();
        txn.forget();
        txn.charge(&newcomer, &other);
        txn.rollback(inner);
        assert_eq!(state(&txn), after_evict);
        txn.rollback(outer);
        assert_eq!(state(&txn), before);
    }
}
