//! What a cycle need not be shown. Under a policy whose decisions depend only on the capacity,
//! the quota usage and the order of the gangs (no clock, reservation, preemption, locality
//! patience or optimiser: the baselines), a gang that is not admitted changes nothing, and a
//! cycle admits no more GPUs than are free when it starts. So of the window, per group:
//!
//! - a strict FIFO queue is handed up to the first gang whose GPUs, with those of the gangs
//!   before it, are more than the free GPUs: were every one before it admitted, it could not
//!   be, so the queue blocks there or sooner and the rest wait behind the blocker;
//! - in a best-effort queue without quota, a class (gangs of one queue asking the same pod sets
//!   of the same clusters) is handed likewise, against the GPUs its pods could take in the
//!   clusters it may use (a node with 7 free holds no pod of 8):
//!   once one of a class is not admitted, no later one is, for the same reason (capacity only
//!   shrinks within a cycle: the core's memo rests on the same fact), and without quota that
//!   reason cannot turn into another.
//!
//! The gangs left out are told what the cycle would have told them ([`Told`]). If no handed
//! gang of a group was left waiting (some were refused for good, which takes no room), the cut
//! proves nothing and [`Cut::word`] says so: the cycle is run again on the whole window.
//! On a deep backlog this hands a cycle a few gangs per group instead of `Config::depth` per
//! queue; the reports are byte-identical with and without it (`SimOptions::uncut`).

use std::collections::{BTreeMap, HashMap};

use scheduler_core::{ClusterFilter, Config, Decision, Fleet, Gang, PodSet, QueueId, QueueingStrategy, Queues};

/// Gangs a cycle decides alike, in queue order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// A strict FIFO queue: the first gang left waiting blocks the rest.
    Queue(QueueId),
    /// A class in a best-effort queue without quota ([`Classes`]).
    Class(u32),
}

/// Whether cycles under `config` decide as the cut assumes (see the module docs). The policy
/// must not widen a gang's clusters with time either (`Policy::nominates`).
pub fn applies(config: &Config) -> bool {
    config.patience.is_none()
        && config.locality_cost.is_none()
        && !config.reservations
        && config.preemption.is_none()
        && config.batch.is_none()
        && !config.fair_sharing
}

/// The classes met so far, numbered in the order met, with the clusters each may use and the
/// fewest GPUs any of its pods asks.
#[derive(Debug, Default)]
pub struct Classes {
    ids: HashMap<(String, ClusterFilter, Vec<PodSet>), u32>,
    clusters: Vec<Vec<usize>>,
    gpus_per_pod: Vec<u32>,
}

impl Classes {
    /// The group `gang` is decided with; `None`: it is always handed (no id, an unknown queue,
    /// a best-effort queue with quota, whose reasons can change as others take the quota).
    pub fn group(&mut self, fleet: &Fleet, queues: &Queues, config: &Config, gang: &Gang) -> Option<Group> {
        // A gang's own id is the one thing of it (beyond its class) `Gang::validate` reads:
        // one without is refused on its own, never decided like another.
        if gang.id.is_empty() {
            return None;
        }
        let q = queues.id(&gang.queue)?;
        if config.strategy.unwrap_or(queues.spec(q).strategy) == QueueingStrategy::StrictFifo {
            return Some(Group::Queue(q));
        }
        if !queues.is_unlimited(q) {
            return None;
        }
        let next = u32::try_from(self.ids.len()).ok()?;
        let key = (gang.queue.clone(), gang.clusters.clone(), gang.pod_sets.clone());
        let id = *self.ids.entry(key).or_insert(next);
        if id == next {
            let allowed = fleet.clusters().iter().enumerate();
            let allowed = allowed.filter(|(_, c)| !c.cordoned && gang.clusters.allows(&c.name, &c.labels));
            self.clusters.push(allowed.map(|(i, _)| i).collect());
            let asking = gang.pod_sets.iter().map(|p| p.shape.gpus).filter(|&g| g > 0);
            self.gpus_per_pod.push(asking.min().unwrap_or(0));
        }
        Some(Group::Class(id))
    }

    /// The indices (in `Fleet::clusters`) of the clusters class `id` may use.
    pub fn clusters(&self, id: u32) -> &[usize] {
        self.clusters.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// The fewest GPUs a pod of class `id` asks (0: none asks any).
    pub fn gpus_per_pod(&self, id: u32) -> u32 {
        self.gpus_per_pod.get(id as usize).copied().unwrap_or(0)
    }
}

/// The window split: the positions handed to the cycle and those left out, ascending.
#[derive(Debug, PartialEq, Eq)]
pub struct Cut {
    handed: Vec<(usize, Option<Group>)>,
    left: Vec<(usize, Group)>,
}

/// What a gang of the window is told after a cut cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// The cycle's decision at this index (the handed gangs, in order).
    Decided(usize),
    /// It waits behind the gang at this window position, its strict queue's blocker.
    Behind(usize),
    /// Left waiting as the gang at this window position was, its class's first left waiting.
    Like(usize),
}

/// Splits a window, given each gang's group and GPUs in window order (queue order within a
/// queue), and the GPUs free as the cycle starts where a group may go (`room`, asked once per
/// group); `None` when nothing would be left out.
pub fn plan(members: impl Iterator<Item = (Option<Group>, u64)>, room: impl Fn(Group) -> u64) -> Option<Cut> {
    // Per group: its room, and the GPUs handed so far, or `None` once past the room.
    let mut asked: BTreeMap<Group, (u64, Option<u64>)> = BTreeMap::new();
    let mut cut = Cut { handed: Vec::new(), left: Vec::new() };
    for (i, (group, gpus)) in members.enumerate() {
        let Some(g) = group else {
            cut.handed.push((i, None));
            continue;
        };
        let (free, sum) = asked.entry(g).or_insert_with(|| (room(g), Some(0)));
        match sum {
            None => cut.left.push((i, g)),
            Some(s) => {
                cut.handed.push((i, group));
                *s = s.saturating_add(gpus);
                if *s > *free {
                    *sum = None;
                }
            }
        }
    }
    (!cut.left.is_empty()).then_some(cut)
}

impl Cut {
    /// The window positions to hand the cycle, ascending.
    pub fn handed(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.handed.iter().map(|&(i, _)| i)
    }

    /// What each gang of the window is told, given the cycle's `decisions` for the handed ones;
    /// `None` when a group that left gangs out had none of its handed ones left waiting.
    pub fn word(&self, decisions: &[Decision]) -> Option<Vec<Told>> {
        let waiting = |d: &Decision| matches!(d, Decision::Pending(r) if !r.is_permanent());
        // Each group's first handed gang left waiting, by its index among the handed.
        let mut first: BTreeMap<Group, usize> = BTreeMap::new();
        for (k, (&(_, group), d)) in self.handed.iter().zip(decisions).enumerate() {
            if let Some(g) = group
                && waiting(d)
            {
                first.entry(g).or_insert(k);
            }
        }
        let mut told = vec![Told::Decided(0); self.handed.len() + self.left.len()];
        for (k, &(i, _)) in self.handed.iter().enumerate() {
            told[i] = Told::Decided(k);
        }
        for &(i, g) in &self.left {
            let k = *first.get(&g)?;
            told[i] = match g {
                Group::Queue(_) => Told::Behind(self.handed[k].0),
                Group::Class(_) => Told::Like(self.handed[k].0),
            };
        }
        Some(told)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::{Admission, ClusterId, Reason, Shortfall};

    fn waits() -> Decision {
        let s = Shortfall {
            pod_set: "w".into(),
            level: None,
            pods: 1,
            gpus_per_pod: 1,
            flavor: None,
            largest: 0,
            cluster: "c".into(),
        };
        Decision::Pending(Reason::NoDomain(s))
    }

    fn admit() -> Decision {
        Decision::Admit(Admission { cluster: ClusterId(0), pod_sets: Vec::new(), ranking: Vec::new() })
    }

    fn refused() -> Decision {
        Decision::Pending(Reason::UnknownQueue { queue: "q".into() })
    }

    const QUEUE: Group = Group::Queue(QueueId(0));
    const CLASS: Group = Group::Class(0);
    const Q: Option<Group> = Some(QUEUE);
    const A: Option<Group> = Some(CLASS);
    const B: Option<Group> = Some(Group::Class(1));

    #[test]
    fn each_group_is_handed_up_to_the_first_gang_past_the_free_gpus() {
        // 8 GPUs free: the queue's 4 + 4 fit, the third would not; class A's 8 + 1 crosses at
        // its second; ungrouped gangs are always handed.
        let members = [(Q, 4), (A, 8), (Q, 4), (None, 64), (A, 1), (Q, 1), (A, 1), (Q, 9)];
        let cut = plan(members.into_iter(), |_| 8).expect("some are left out");
        assert_eq!(cut.handed().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        assert_eq!(cut.left, [(6, CLASS), (7, QUEUE)]);
        assert_eq!(plan([(Q, 4), (Q, 4)].into_iter(), |_| 8), None, "nothing left out, nothing cut");
        // Each group against its own room.
        let cut = plan([(A, 1), (B, 1), (A, 1), (B, 1)].into_iter(), |g| if g == CLASS { 0 } else { 1 });
        assert_eq!(cut.expect("A past its room").left, [(2, CLASS)], "B holds both in its room");
    }

    #[test]
    fn the_left_out_are_told_their_blocker_or_their_class_s_reason_or_the_cut_is_undone() {
        let cut = plan([(Q, 1), (A, 1), (Q, 1), (A, 1), (Q, 1), (A, 1)].into_iter(), |_| 1).expect("two left out");
        assert_eq!(cut.handed().collect::<Vec<_>>(), [0, 1, 2, 3]);
        // The queue admits its first and blocks at its second; class A admits one, then waits.
        let told = cut.word(&[admit(), admit(), waits(), waits()]).expect("both groups left one waiting");
        use Told::*;
        assert_eq!(told, [Decided(0), Decided(1), Decided(2), Decided(3), Behind(2), Like(3)]);
        // Refused for good takes no room: nothing is proved about those after it.
        assert_eq!(cut.word(&[admit(), admit(), refused(), waits()]), None);
        let cut = plan([(B, 1), (B, 1), (B, 1)].into_iter(), |_| 1).expect("one left out");
        assert_eq!(cut.word(&[admit(), refused()]), None);
        // A class not past the free GPUs is handed whole.
        assert_eq!(plan([(B, 0), (B, 0)].into_iter(), |_| 0), None);
    }
}
