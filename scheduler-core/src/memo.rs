//! The cycle's memo of pod-set shapes that fit nowhere. Capacity only shrinks while a cycle
//! admits, so a shape that fit in no candidate cluster cannot fit later in the same cycle with
//! as many pods or more, nor with more than one span could then take: later gangs of that
//! shape, smaller ones too, are answered without a search. Entries are only added, never
//! replaced, and the first that answers and words a gang is used: every gang of one shape and
//! size is told the same words all cycle, whichever came between (the simulator's cut cycles
//! rest on it). A gang smaller than any entry words is worded afresh, as it finds the fleet,
//! and adds its own. Whatever gives capacity back (a reservation released for a backfill, a
//! look into the future) must clear it; the cycle's
//! [`Txn`](crate::txn::Txn) journals that like any other change.

use std::collections::BTreeMap;

use crate::capacity::PodShape;
use crate::fleet::FlavorId;
use crate::gang::{ClusterFilter, Gang, PodSet};
use crate::reason::{Reason, Shortfall};
use crate::topology::{Level, TopologyConstraint};

/// A pod set's shape, where it may go, and its slicing. The flavors it could use are compared
/// in the entry, so a lookup allocates nothing.
pub(crate) type MemoKey<'g> = (&'g ClusterFilter, PodShape, TopologyConstraint, Option<(u32, Level)>);

pub(crate) type Memo<'g> = BTreeMap<MemoKey<'g>, Vec<MemoEntry>>;

pub(crate) fn key<'g>(gang: &'g Gang, ps: &PodSet) -> MemoKey<'g> {
    (&gang.clusters, ps.shape, ps.topology, ps.slice.map(|s| (s.size, s.level)))
}

#[derive(Debug, Clone)]
pub(crate) struct MemoEntry {
    pub(crate) flavors: Vec<Option<FlavorId>>,
    /// The pods of the gang that made the entry: the fewest its words are for.
    pub(crate) min_pods: u32,
    /// The most pods of this shape one allowed span could take when the entry was made, in
    /// any cluster and flavor (not only what `now` names): a pod set of more fits nowhere for
    /// the rest of the cycle.
    pub(crate) largest: u32,
    /// What the fleet offers this shape now.
    pub(crate) now: Shortfall,
    /// How many pods the cluster and flavor `now` names could take on an empty fleet: `now`
    /// names what a gang of up to that many waits for.
    pub(crate) named_room: u32,
    /// What an empty fleet offers this shape (which does not depend on pods), found only for
    /// a gang of more pods than `named_room`: up to that many, it is known to fit an empty
    /// fleet without looking (what `now` names holds them), and looking was a twentieth of a
    /// replay. Where absent, a gang of more pods is worded afresh.
    pub(crate) empty: Option<Shortfall>,
}

impl MemoEntry {
    /// Whether this entry answers a pod set of `pods` with these flavors: as many pods as the
    /// gang that made it or more, or more than one span could take. (`largest` counts a
    /// domain's GPUs, CPU and memory apart, a bound: a gang of fewer pods than that may still
    /// have found none.)
    pub(crate) fn answers(&self, pods: u32, flavors: &[Option<FlavorId>]) -> bool {
        self.flavors == flavors && (pods >= self.min_pods || pods > self.largest)
    }

    /// Whether [`MemoEntry::reason`] words the wait of a pod set of `pods` right: it never
    /// fits, or it is no smaller than the gang the words were found for and what `now` names
    /// could hold it. Else the fit is still answered (it fits nowhere now) but the words are
    /// found again.
    pub(crate) fn words_fit(&self, pods: u32) -> bool {
        (self.min_pods..=self.named_room).contains(&pods) || self.empty.as_ref().is_some_and(|e| pods > e.largest)
    }

    pub(crate) fn reason(&self, ps: &PodSet) -> Reason {
        // Field by field: `..s.clone()` would clone the entry's pod-set name only to drop it.
        let named = |s: &Shortfall| Shortfall {
            pod_set: ps.name.clone(),
            pods: ps.pods,
            level: s.level,
            gpus_per_pod: s.gpus_per_pod,
            flavor: s.flavor.clone(),
            flavors: s.flavors,
            largest: s.largest,
            cluster: s.cluster.clone(),
            read_as: s.read_as,
            oversize: s.oversize.clone(),
        };
        match &self.empty {
            Some(empty) if ps.pods > empty.largest => Reason::NeverFits(named(empty)),
            _ => Reason::NoDomain(named(&self.now)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::fixture::{GangExt, gang, greedy, uniform_cluster};
    use crate::fleet::{Fleet, FleetBuilder};
    use crate::queue::{QueueSpec, Queues};
    use crate::reason::Reason;
    use crate::snapshot::Snapshot;
    use crate::topology::Level;
    use crate::{Cycle, Decision, Gang, cycle};

    /// One cluster of two racks of four 8-GPU hosts, and one queue without quota.
    fn two_racks_of_four() -> (Fleet, Queues) {
        let mut b = FleetBuilder::new();
        uniform_cluster(&mut b, "east", "h100", 8, &[(Level::Rack, 2), (Level::Host, 4)]).expect("cluster");
        (b.build().expect("fleet"), Queues::new(vec![QueueSpec::unlimited("default")]).expect("queues"))
    }

    /// What gang `i` of `pending` is told it waits for room with: (pods, largest).
    fn waits(out: &Cycle, pending: &[Gang], i: usize) -> (u32, u32) {
        match &out.decisions[i] {
            Decision::Pending(Reason::NoDomain(s)) => (s.pods, s.largest),
            other => panic!("{} waits for room, not {other:?}", pending[i].id),
        }
    }

    /// A later, smaller gang of the same shape that fits nowhere adds an entry; it does not
    /// change what the first entry tells gangs of the first one's size.
    #[test]
    fn gangs_of_one_shape_and_size_are_told_the_same_all_cycle() {
        let (fleet, queues) = two_racks_of_four();
        let pending = [
            gang("fill-6").pods(6).gpus(8).submitted(0),
            gang("four-a").pods(4).gpus(8).submitted(1),
            gang("fill-1").pods(1).gpus(8).submitted(2),
            gang("three").pods(3).gpus(8).submitted(3),
            gang("four-b").pods(4).gpus(8).submitted(4),
        ];
        let config = greedy();
        let out = cycle(Snapshot::idle(&fleet, &queues), &pending, &config);
        assert!(matches!(out.decisions[2], Decision::Admit(_)), "one host was left for fill-1");
        assert_eq!(
            (waits(&out, &pending, 1).1, waits(&out, &pending, 3).1),
            (2, 1),
            "each worded as it found the fleet"
        );
        assert_eq!(out.decisions[4], out.decisions[1], "four-b is told what four-a was");
    }

    /// A smaller gang of a shape that missed is answered without a search when it is still
    /// larger than one span could take, and is told what it finds itself.
    #[test]
    fn a_smaller_gang_than_one_span_takes_is_answered_without_a_search() {
        let (fleet, queues) = two_racks_of_four();
        let pending = [
            gang("fill").pods(7).gpus(8).submitted(0),
            gang("five").pods(5).gpus(8).submitted(1),
            gang("three").pods(3).gpus(8).submitted(2),
            gang("one").pods(1).gpus(8).submitted(3),
        ];
        let out = cycle(Snapshot::idle(&fleet, &queues), &pending, &greedy());
        assert_eq!((waits(&out, &pending, 1), waits(&out, &pending, 2)), ((5, 1), (3, 1)));
        assert!(matches!(out.decisions[3], Decision::Admit(_)), "one pod takes the host left: {:?}", out.decisions[3]);
        assert_eq!(out.stats.memo_hits, 1, "three was answered from five's entry: {:?}", out.stats);
    }

    /// An entry made for a gang its words' domain could hold when empty does not know what the
    /// empty fleet offers; a larger gang of the shape is still told it can never be admitted.
    #[test]
    fn a_larger_gang_of_a_shape_worded_as_waiting_is_told_it_never_fits() {
        let (fleet, queues) = two_racks_of_four();
        let pending = [
            gang("fill").pods(7).gpus(8).submitted(0),
            gang("three").pods(3).gpus(8).required(Level::Rack).submitted(1),
            gang("five").pods(5).gpus(8).required(Level::Rack).submitted(2),
            gang("four").pods(4).gpus(8).required(Level::Rack).submitted(3),
        ];
        let out = cycle(Snapshot::idle(&fleet, &queues), &pending, &greedy());
        assert!(matches!(out.decisions[0], Decision::Admit(_)), "{:?}", out.decisions[0]);
        assert_eq!((waits(&out, &pending, 1), waits(&out, &pending, 3)), ((3, 1), (4, 1)));
        match &out.decisions[2] {
            Decision::Pending(Reason::NeverFits(s)) => assert_eq!((s.pods, s.largest), (5, 4), "a rack holds four"),
            other => panic!("five can never fit a rack of four hosts, not {other:?}"),
        }
        assert!(out.stats.memo_hits >= 2, "five and four were answered from the memo: {:?}", out.stats);
    }
}
