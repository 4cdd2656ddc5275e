//! What a cycle need not be shown. A gang that is not admitted changes nothing (no capacity,
//! no quota), and a cycle admits no more GPUs than are free when it starts. So of the window,
//! per group:
//!
//! - a strict FIFO queue is handed up to the first gang whose GPUs, with those of the gangs
//!   before it, are more than the free GPUs: were every one before it admitted, it could not
//!   be, so the queue blocks there or sooner and the rest wait behind the blocker;
//! - in a best-effort queue without quota, a class (gangs of one queue and priority asking the
//!   same pod sets of the same clusters, with a run time or without, held alike this cycle) is
//!   handed likewise, against the GPUs its pods could take in the clusters it may use (a node
//!   with 7 free holds no pod of 8). Once one of a class is left waiting because neither its
//!   held nor its written form fits, no later one fits either (capacity only shrinks within a
//!   cycle: the core's memo rests on the same fact), and it is told the same words (the memo's).
//!
//! Stowage's additions are why "because neither form fits" matters. A gang held out for
//! locality by weighing costs (`HoldCost`) had room to start spread: its run time decided, so
//! it proves nothing for the next. A gang that ends before one of the cycle's reservations
//! starts may backfill into that reservation's room: only a class-mate that was tried without
//! that hold (decided before the reservation was made, the one that made it, or one that
//! backfilled in front of it too) proves it cannot. The first gangs due a reservation (as many
//! as the cycle may make) are always handed, and a cut where one left out might have made one
//! proves nothing. A class that might preempt is always handed, and an eviction (which gives
//! capacity back) proves nothing. Each left-out gang is still counted as waiting where the
//! cycle weighs a hold (`Snapshot::unhanded`).
//!
//! The gangs left out are told what the cycle would have told them ([`Told`]). If no handed
//! gang of a group proves the rest (some were refused for good, which takes no room), the cut
//! proves nothing and [`Cut::word`] says so: the cycle is run again on the whole window.
//! On a deep backlog this hands a cycle a few gangs per group instead of `Config::depth` per
//! queue; the reports are byte-identical with and without it (`SimOptions::uncut`). The words
//! rest on the core's memo: every gang of one shape and size that fits nowhere is told the same
//! all cycle (`scheduler_core::memo`), which holds for gangs of one pod set.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use rustc_hash::FxHashMap;
use scheduler_core::may_backfill;
use scheduler_core::preempt::may_evict_any;
use scheduler_core::{
    ClusterFilter, Config, Decision, Fleet, Gang, PodSet, QueueId, QueueingStrategy, Queues, Reason, Reserved,
    lanes_per_queue,
};

/// Gangs a cycle decides alike, in queue order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// A strict FIFO queue: the first gang left waiting blocks the rest.
    Queue(QueueId),
    /// A class in a best-effort queue without quota ([`Classes`]), at a stage of its locality
    /// patience (`Patience::stage`; 0 when nothing of it is held), split by which of the last
    /// cycle's reservations its gangs could backfill in front of (see [`lifts`]).
    Class { class: u32, stage: u8, lifts: u64 },
}

/// Whether cycles under `config` on `queues` decide as the cut assumes (see the module docs):
/// in one order of all queues (no lane per queue, `lanes_per_queue`: fair sharing's order moves
/// with each admission's share, a cohort's with what each queue borrows, and the depth then
/// counts gangs of every lane, so one left out would change where it stops) and greedily (no
/// optimiser). The policy must not widen a gang's clusters with time either
/// (`Policy::nominates`).
pub fn applies(config: &Config, queues: &Queues) -> bool {
    config.batch.is_none() && !lanes_per_queue(queues, config.fair_sharing)
}

/// A class: what a cycle's decision for a gang reads of it, beyond its id, run time and age.
/// Its queue is read only for whom it may evict: best-effort queues without quota that evict
/// alike (the first of them stands for all) decide their gangs alike.
type ClassKey = (QueueId, ClusterFilter, Vec<PodSet>, i32, bool);

/// What a cut needs to know of a class.
#[derive(Debug)]
struct Class {
    /// Its queue (the first that evicts alike) and priority are read for whom it may evict.
    key: ClassKey,
    /// Indices (in `Fleet::clusters`) of the clusters it may use.
    clusters: Vec<usize>,
    /// The fewest GPUs any of its pods asks (0: none asks any).
    gpus_per_pod: u32,
    /// Whether locality patience can hold any of its pod sets.
    held: bool,
}

/// The classes met so far, numbered in the order met.
#[derive(Debug, Default)]
pub struct Classes {
    /// Hash of a class's key → the classes of that hash.
    ids: HashMap<u64, Vec<u32>>,
    classes: Vec<Class>,
}

impl Classes {
    /// The group `gang` is decided with as it waits; `None`: it is always handed (no id, an
    /// unknown queue, a best-effort queue with quota, more than one pod set). A class's stage
    /// is the cycle's to say ([`Self::at`]).
    pub fn group(&mut self, fleet: &Fleet, queues: &Queues, config: &Config, gang: &Gang) -> Option<Group> {
        // A gang's own id is the one thing of it (beyond its class) `Gang::validate` reads:
        // one without is refused on its own, never decided like another.
        if gang.id.as_str().is_empty() {
            return None;
        }
        let q = queues.id(&gang.queue)?;
        if config.strategy.unwrap_or(queues.spec(q).strategy) == QueueingStrategy::StrictFifo {
            return Some(Group::Queue(q));
        }
        // With quota, reasons can change as others take it; with more than one pod set, the
        // words of a gang whose later set fails are not kept (the memo keeps the first set's).
        if !queues.is_unlimited(q) || gang.pod_sets.len() != 1 {
            return None;
        }
        let next = u32::try_from(self.classes.len()).ok()?;
        // The first best-effort queue without quota that evicts as this one does.
        let best_effort =
            |id: QueueId| config.strategy.unwrap_or(queues.spec(id).strategy) != QueueingStrategy::StrictFifo;
        let evicts = queues.spec(q).preemption;
        let alike = (0..queues.specs().len())
            .filter_map(|i| u32::try_from(i).ok().map(QueueId))
            .find(|&id| queues.spec(id).preemption == evicts && queues.is_unlimited(id) && best_effort(id))?;
        // Looked up by a hash of the gang's own fields: a key is copied once per class, not
        // once per push.
        let runs = gang.runtime_ms.is_some();
        let mut h = DefaultHasher::new();
        (alike, &gang.clusters, &gang.pod_sets, gang.priority, runs).hash(&mut h);
        let bucket = self.ids.entry(h.finish()).or_default();
        let found = bucket.iter().copied().find(|&id| {
            let (q, clusters, pod_sets, priority, r) = &self.classes[id as usize].key;
            (*q, clusters, pod_sets.as_slice(), *priority, *r)
                == (alike, &gang.clusters, gang.pod_sets.as_slice(), gang.priority, runs)
        });
        let class = found.unwrap_or(next);
        if class == next {
            bucket.push(next);
            let allowed = fleet.clusters().iter().enumerate();
            let allowed = allowed.filter(|(_, c)| !c.cordoned && gang.clusters.allows(&c.name, &c.labels));
            let asking = gang.pod_sets.iter().map(|p| p.shape.gpus).filter(|&g| g > 0);
            let held = gang.pod_sets.iter().any(|p| p.holdable().is_some());
            self.classes.push(Class {
                key: (alike, gang.clusters.clone(), gang.pod_sets.clone(), gang.priority, runs),
                clusters: allowed.map(|(i, _)| i).collect(),
                gpus_per_pod: asking.min().unwrap_or(0),
                held,
            });
        }
        Some(Group::Class { class, stage: 0, lifts: 0 })
    }

    /// `group` (of `gang`, from [`Self::group`]) as a cycle at `now_ms` decides it: a class at
    /// the stage of patience the gang has reached, and which of `reserved` it could backfill in
    /// front of (the last cycle's reservations, likely this one's too); or `None` (handed)
    /// when the class might preempt some running gang, the lowest of whose priorities is
    /// `lowest_running`.
    pub fn at(
        &self,
        group: Option<Group>,
        gang: &Gang,
        (config, queues): (&Config, &Queues),
        (now_ms, reserved): (u64, &[Reserved]),
        lowest_running: Option<i32>,
    ) -> Option<Group> {
        let Some(Group::Class { class, .. }) = group else { return group };
        let c = self.classes.get(class as usize)?;
        let (queue, _, _, priority, _) = c.key;
        if lowest_running.is_some_and(|low| may_evict_any(config, queues, queue, priority, low)) {
            return None;
        }
        let stage = match config.patience {
            Some(p) if c.held => p.stage(now_ms.saturating_sub(gang.submitted_ms)),
            _ => 0,
        };
        Some(Group::Class { class, stage, lifts: lifts(gang, now_ms, reserved) })
    }

    /// The indices (in `Fleet::clusters`) of the clusters class `id` may use.
    pub fn clusters(&self, id: u32) -> &[usize] {
        self.classes.get(id as usize).map_or(&[], |c| c.clusters.as_slice())
    }

    /// The fewest GPUs a pod of class `id` asks (0: none asks any).
    pub fn gpus_per_pod(&self, id: u32) -> u32 {
        self.classes.get(id as usize).map_or(0, |c| c.gpus_per_pod)
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
    /// Left waiting as the gang at this window position was, a class-mate whose forms fit
    /// nowhere (without the words of a reservation it made: `Told::words`).
    Like(usize),
}

impl Told {
    /// The words a gang told `Like` one whose reason is `reason` is given: that reason, less
    /// the reservation the other made.
    pub fn words(reason: &Reason) -> &Reason {
        match reason {
            Reason::Reserved { now, .. } => now,
            other => other,
        }
    }
}

/// Which of `reserved` `gang`, decided at `now_ms`, may backfill in front of, as the core asks:
/// a bit each, by their order. (The core lifts only those that hold something; lifting one
/// that holds nothing leaves the same room, so a proof over these holds there too.)
pub fn lifts(gang: &Gang, now_ms: u64, reserved: &[Reserved]) -> u64 {
    reserved
        .iter()
        .take(64)
        .enumerate()
        .filter(|(_, r)| may_backfill(gang, now_ms, r.start_ms, &r.gang))
        .fold(0, |mask, (i, _)| mask | (1 << i))
}

/// Whether a gang left waiting with `reason` proves that none of its class after it fits, or
/// is told otherwise: no domain for its written form, or none for its held form while patience
/// alone holds it (its class-mates, at the same stage, are held alike). A hold weighed by cost
/// had room to start spread; a reservation's own words wrap the reason it had.
fn fits_nowhere(reason: &Reason) -> bool {
    match reason {
        Reason::NoDomain(_) | Reason::HoldingForLocality { cost: None, .. } => true,
        Reason::Reserved { now, .. } => fits_nowhere(now),
        _ => false,
    }
}

/// Splits a window, given each gang's group and GPUs in window order (queue order within a
/// queue), and the GPUs free as the cycle starts where a group may go (`room`, asked once per
/// group); `None` when nothing would be left out.
pub fn plan(members: impl Iterator<Item = (Option<Group>, u64)>, room: impl Fn(Group) -> u64) -> Option<Cut> {
    // Per group: its room, and the GPUs handed so far, or `None` once past the room. Only
    // looked up, never walked: its order decides nothing.
    let mut asked: FxHashMap<Group, (u64, Option<u64>)> = FxHashMap::default();
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

    /// How many gangs of the window are left out.
    pub fn left(&self) -> usize {
        self.left.len()
    }

    /// The window positions left out, ascending.
    pub fn left_out(&self) -> impl Iterator<Item = usize> + '_ {
        self.left.iter().map(|&(i, _)| i)
    }

    /// What each gang of the window is told, given the cycle's `decisions` for the handed ones,
    /// and by window position the cycle's reservations made before a gang was decided
    /// (`made_before`) and those it could backfill in front of (`lifts`), a bit each; `None`
    /// when the handed prove nothing of some left out. A left-out gang saw the holds of those
    /// made before it that it could not backfill in front of: a class-mate that fit nowhere
    /// proves it fits nowhere either when every hold that mate saw, it saw too.
    pub fn word(
        &self,
        decisions: &[Decision],
        made_before: impl Fn(usize) -> u64,
        lifts: impl Fn(usize) -> u64,
    ) -> Option<Vec<Told>> {
        if decisions.iter().any(|d| matches!(d, Decision::Preempt { .. })) {
            // Evictions give capacity back: what fit nowhere may fit after them.
            return None;
        }
        // Per group, window positions: a strict queue's blocker; a class's gangs whose forms fit
        // nowhere, with the holds each saw.
        let mut blocker: FxHashMap<Group, usize> = FxHashMap::default();
        let mut nowhere: FxHashMap<Group, Vec<(usize, u64)>> = FxHashMap::default();
        for (&(i, group), d) in self.handed.iter().zip(decisions) {
            let (Some(g), Decision::Pending(reason)) = (group, d) else { continue };
            match g {
                Group::Queue(_) if !reason.is_permanent() => {
                    blocker.entry(g).or_insert(i);
                }
                Group::Class { .. } if fits_nowhere(reason) => {
                    nowhere.entry(g).or_default().push((i, made_before(i) & !lifts(i)));
                }
                _ => {}
            }
        }
        let mut told = vec![Told::Decided(0); self.handed.len() + self.left.len()];
        for (k, &(i, _)) in self.handed.iter().enumerate() {
            told[i] = Told::Decided(k);
        }
        for &(i, g) in &self.left {
            told[i] = match g {
                Group::Queue(_) => Told::Behind(*blocker.get(&g)?),
                Group::Class { .. } => {
                    let saw = made_before(i) & !lifts(i);
                    let &(like, _) = nowhere.get(&g)?.iter().find(|&&(_, held)| held & !saw == 0)?;
                    Told::Like(like)
                }
            };
        }
        Some(told)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::{Admission, ClusterId, HoldCost, Level, Reason, Shortfall};

    fn shortfall() -> Shortfall {
        Shortfall {
            pod_set: "w".into(),
            level: None,
            pods: 1,
            gpus_per_pod: 1,
            flavor: None,
            flavors: 0,
            largest: 0,
            cluster: "c".into(),
            read_as: None,
            oversize: None,
        }
    }

    fn waits() -> Decision {
        Decision::Pending(Reason::NoDomain(shortfall()))
    }

    fn holds(cost: Option<HoldCost>) -> Decision {
        let shortfall = shortfall();
        Decision::Pending(Reason::HoldingForLocality {
            preferred: Level::Rack,
            held: Level::Rack,
            shortfall,
            cost: cost.map(Box::new),
        })
    }

    fn reserves(now: Decision) -> Decision {
        let Decision::Pending(now) = now else { unreachable!("a reservation wraps a pending reason") };
        Decision::Pending(Reason::Reserved { cluster: "c".into(), in_s: 60, now: Box::new(now) })
    }

    fn admit() -> Decision {
        Decision::Admit(Admission { cluster: ClusterId(0), pod_sets: Vec::new(), ranking: Vec::new() })
    }

    fn refused() -> Decision {
        Decision::Pending(Reason::UnknownQueue { queue: "q".into() })
    }

    const QUEUE: Group = Group::Queue(QueueId(0));
    const CLASS: Group = Group::Class { class: 0, stage: 0, lifts: 0 };
    const Q: Option<Group> = Some(QUEUE);
    const A: Option<Group> = Some(CLASS);
    const B: Option<Group> = Some(Group::Class { class: 1, stage: 0, lifts: 0 });

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
        let told = word(&cut, &[admit(), admit(), waits(), waits()]).expect("both groups left one waiting");
        use Told::*;
        assert_eq!(told, [Decided(0), Decided(1), Decided(2), Decided(3), Behind(2), Like(3)]);
        // Refused for good takes no room: nothing is proved about those after it.
        assert_eq!(word(&cut, &[admit(), admit(), refused(), waits()]), None);
        let cut = plan([(B, 1), (B, 1), (B, 1)].into_iter(), |_| 1).expect("one left out");
        assert_eq!(word(&cut, &[admit(), refused()]), None);
        // A class not past the free GPUs is handed whole.
        assert_eq!(plan([(B, 0), (B, 0)].into_iter(), |_| 0), None);
    }

    /// `Cut::word` with no reservation made.
    fn word(cut: &Cut, decisions: &[Decision]) -> Option<Vec<Told>> {
        cut.word(decisions, |_| 0, |_| 0)
    }

    #[test]
    fn only_a_class_mate_that_fit_nowhere_words_the_left_out() {
        use Told::*;
        let cut = plan([(A, 1), (A, 1), (A, 1), (A, 1)].into_iter(), |_| 1).expect("two left out");
        let cost = HoldCost { wait_s: 60, spread_level: Level::Block, spread_extra_s: 6, others_delay_s: 0 };
        // Held by cost, the first had room to start spread: the second words the rest.
        let told = word(&cut, &[holds(Some(cost)), holds(None)]).expect("the second fit nowhere");
        assert_eq!(told, [Decided(0), Decided(1), Like(1), Like(1)]);
        assert_eq!(word(&cut, &[holds(Some(cost)), admit()]), None, "no gang fit nowhere");
        // The reservation's own words are not the rest's.
        let told = word(&cut, &[reserves(waits()), waits()]).expect("a reservation wraps where it fit nowhere");
        assert_eq!(told[2], Like(0));
        let Decision::Pending(reserved) = reserves(holds(None)) else { unreachable!() };
        assert_eq!(
            Told::words(&reserved),
            &Reason::HoldingForLocality {
                preferred: Level::Rack,
                held: Level::Rack,
                shortfall: shortfall(),
                cost: None
            }
        );
        // One that could backfill needs a class-mate tried without the hold: a reservation was
        // made before any of them.
        let lifts = |i: usize| if i == 3 { 1 } else { 0 };
        assert_eq!(cut.word(&[waits(), waits()], |_| 1, lifts), None);
        let lifts = |i: usize| if i == 1 || i == 3 { 1 } else { 0 };
        let told = cut.word(&[waits(), waits()], |_| 1, lifts).expect("the second was tried without the hold");
        assert_eq!(told, [Decided(0), Decided(1), Like(0), Like(1)]);
        // Two reservations: one that could backfill in front of both needs a class-mate that
        // saw neither hold, not one that lifted only the first.
        let lifts = |i: usize| match i {
            1 => 0b01,
            3 => 0b11,
            _ => 0,
        };
        assert_eq!(cut.word(&[waits(), waits()], |_| 0b11, lifts), None);
        // Decided before the second was made, lifting the first, the second gang saw neither.
        let made_before = |i: usize| if i <= 1 { 0b01 } else { 0b11 };
        let told = cut.word(&[waits(), waits()], made_before, lifts).expect("the second saw no hold");
        assert_eq!(told, [Decided(0), Decided(1), Like(0), Like(1)]);
        // An eviction gives capacity back: nothing is proved.
        let evicts = Decision::Preempt {
            admission: Admission { cluster: ClusterId(0), pod_sets: Vec::new(), ranking: Vec::new() },
            victims: vec!["v".into()],
        };
        assert_eq!(word(&cut, &[evicts, waits()]), None);
    }
}
