//! The cycle's memo of pod-set shapes that fit nowhere. Capacity only shrinks while a cycle
//! admits, so a shape that fit in no candidate cluster cannot fit later in the same cycle with
//! as many pods or more: later gangs of that shape are answered without a search. Whatever
//! gives capacity back (a reservation released for a backfill, a look into the future) must
//! clear it; the cycle's [`Txn`](crate::txn::Txn) journals that like any other change.

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
    pub(crate) min_pods: u32,
    /// What the fleet offers this shape now, and when empty (which does not depend on pods).
    pub(crate) now: Shortfall,
    /// How many pods the cluster and flavor `now` names could take on an empty fleet: `now`
    /// names what a gang of up to that many waits for.
    pub(crate) named_room: u32,
    pub(crate) empty: Shortfall,
}

impl MemoEntry {
    /// Whether this entry answers `ps` with these flavors: as many pods or more.
    pub(crate) fn answers(&self, ps: &PodSet, flavors: &[Option<FlavorId>]) -> bool {
        self.flavors == flavors && ps.pods >= self.min_pods
    }

    /// Whether [`MemoEntry::reason`] words `ps`'s wait right: it never fits, or what `now`
    /// names could hold it. Else the fit is still answered (it fits nowhere now) but the words
    /// are found again.
    pub(crate) fn words_fit(&self, ps: &PodSet) -> bool {
        ps.pods <= self.named_room || ps.pods > self.empty.largest
    }

    pub(crate) fn reason(&self, ps: &PodSet) -> Reason {
        let named = |s: &Shortfall| Shortfall { pod_set: ps.name.clone(), pods: ps.pods, ..s.clone() };
        if ps.pods > self.empty.largest {
            Reason::NeverFits(named(&self.empty))
        } else {
            Reason::NoDomain(named(&self.now))
        }
    }
}
