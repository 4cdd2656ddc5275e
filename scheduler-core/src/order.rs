//! The order a cycle considers gangs in. As Kueue orders the heads of its ClusterQueues
//! (`entryOrdering.Less`, pkg/scheduler/scheduler.go): a gang its queue's nominal quota covers
//! goes before one that would borrow from the cohort, so a lender's gangs take the room that
//! frees before any borrower's, however much older the borrower's. Then, without fair sharing,
//! one global order: priority, then submit time, then id ([`queue_order`]); the submit time
//! moved later by the gang's expected run time, up to a cap, under `Config::short_first`
//! ([`order_ms`]: shorter gangs first, within a bound). With fair sharing, which
//! queue admits next: dominant resource fairness (Ghodsi et al., NSDI'11)
//! over the fleet's GPUs, CPU and memory, weighted per queue as Kueue weights ClusterQueues in
//! a cohort: each queue's share is the largest fraction of the fleet it holds of any resource,
//! divided by its weight, and the queue with the smallest share admits its next gang. Priority
//! still comes first (a higher-priority head goes before any share), then share, then submit
//! time, then the queue. Shares are integers (parts per billion), so the order is exact and the
//! same on every machine.

use std::cmp::Reverse;

use crate::config::Config;
use crate::fleet::Fleet;
use crate::gang::Gang;
use crate::queue::{Held, NominalQuota, QueueId, QueueingStrategy, Queues, QuotaUsage};

/// Parts per billion: a share of the whole fleet as an integer.
const SCALE: u128 = 1_000_000_000;

/// The time a gang is ordered by after its priority: when it was submitted, moved later by its
/// expected run time under `Config::short_first` (`ShortFirst::order_ms`; a StrictFIFO queue's
/// gangs all by the cap, so their own order stays their submit order).
pub fn order_ms(gang: &Gang, queues: &Queues, config: &Config) -> u64 {
    let Some(short_first) = config.short_first else {
        return gang.submitted_ms;
    };
    let strict = queues
        .id(&gang.queue)
        .is_some_and(|q| config.strategy.unwrap_or(queues.spec(q).strategy) == QueueingStrategy::StrictFifo);
    short_first.order_ms(gang, strict)
}

/// The order gangs are considered in: priority, then [`order_ms`], then id.
pub fn queue_order(pending: &[Gang], queues: &Queues, config: &Config) -> Vec<usize> {
    ordered_by(pending, &order_times(pending, queues, config))
}

/// Each gang's [`order_ms`], by its index.
fn order_times(pending: &[Gang], queues: &Queues, config: &Config) -> Vec<u64> {
    pending.iter().map(|g| order_ms(g, queues, config)).collect()
}

/// [`queue_order`] with each gang's time to order by given (`times[i]` for `pending[i]`).
fn ordered_by(pending: &[Gang], times: &[u64]) -> Vec<usize> {
    // The keys side by side, not behind each gang: a sort compares them many times.
    let mut keyed: Vec<(Reverse<i32>, u64, &str, usize)> =
        pending.iter().zip(times).enumerate().map(|(i, (g, &t))| (Reverse(g.priority), t, g.id.as_str(), i)).collect();
    // Callers hand their gangs in runs already in order (the simulator's window: one run per
    // queue): the stable sort finds and merges the runs, where the unstable one partitioned
    // them again. The keys are unique (the index), so both give the same order.
    keyed.sort();
    keyed.into_iter().map(|k| k.3).collect()
}

/// Whether a cycle orders its gangs by queue: by each one's share (`fair`), or by whether its
/// head would borrow, as some queue is in a cohort. Else one order of all queues, whose first
/// `depth` are all a cycle can look at (the simulator hands it no more: `pending.rs`).
pub fn lanes_per_queue(queues: &Queues, fair: bool) -> bool {
    fair || queues.specs().iter().any(|s| s.cohort.is_some())
}

/// One queue's pending gangs in queue order (or, where no queue can borrow and shares are not
/// weighed, every queue's in one), and how far the cycle has taken them.
#[derive(Debug)]
struct Lane {
    /// `None`: gangs naming a queue that does not exist (they fail on their own, in order), or
    /// the one lane of every queue.
    queue: Option<QueueId>,
    /// Its queue's nominal quota, where it may borrow beyond it (it is in a cohort).
    nominal: Option<NominalQuota>,
    gangs: Vec<usize>,
    next: usize,
    /// How many of the gangs taken were left waiting: at the depth, the lane is done.
    waiting: usize,
}

/// The cycle's admission order: the next gang to consider, given what is admitted so far.
#[derive(Debug)]
pub struct FairOrder {
    lanes: Vec<Lane>,
    /// Each pending gang's [`order_ms`], by its index: found once, compared by every lane.
    times: Vec<u64>,
    totals: Held,
    depth: usize,
    /// Shares weighed (`Config::fair_sharing`), and the depth counted per lane; else the depth
    /// counts every lane's.
    fair: bool,
    /// How many gangs taken were left waiting, over every lane.
    waiting: usize,
    /// The lane the last gang came from.
    last: Option<usize>,
}

impl FairOrder {
    /// Without fair sharing, one order of priority, submit time and id (after the nominal
    /// quota's gangs, where a queue may borrow); with it, a lane per queue. The cycle is done
    /// once `depth` of the gangs given were left waiting ([`Self::left_waiting`]), of each lane
    /// with fair sharing: those admitted do not count, so a burst that fits is admitted in one
    /// cycle, and a deep queue that does not fit costs a cycle `depth` gangs.
    pub fn new(pending: &[Gang], queues: &Queues, fleet: &Fleet, config: &Config) -> Self {
        let (fair, depth) = (config.fair_sharing, config.depth);
        // Else one lane, so that the common case merges none.
        let per_queue = lanes_per_queue(queues, fair);
        let times = order_times(pending, queues, config);
        let mut lanes: Vec<Lane> = Vec::new();
        for i in ordered_by(pending, &times) {
            let queue = if per_queue { queues.id(&pending[i].queue) } else { None };
            match lanes.iter_mut().find(|l| l.queue == queue) {
                Some(l) => l.gangs.push(i),
                None => {
                    let nominal = queue.and_then(|q| queues.nominal_quota(q));
                    lanes.push(Lane { queue, nominal, gangs: vec![i], next: 0, waiting: 0 });
                }
            }
        }
        let depth = usize::try_from(depth).unwrap_or(usize::MAX);
        FairOrder { lanes, times, totals: fleet.totals(), depth, fair, waiting: 0, last: None }
    }

    /// How many gangs may wait after the cycle has looked at them: up to the depth (of each lane).
    pub fn considered(&self) -> usize {
        if self.fair {
            self.lanes.iter().map(|l| l.gangs.len().min(self.depth)).sum()
        } else {
            self.lanes.iter().map(|l| l.gangs.len()).sum::<usize>().min(self.depth)
        }
    }

    /// The next gang, or `None` when every lane is done.
    pub fn next(&mut self, pending: &[Gang], queues: &Queues, usage: &QuotaUsage) -> Option<usize> {
        let (totals, depth, fair, times) = (self.totals, self.depth, self.fair, &self.times);
        if !fair && self.waiting >= depth {
            return None;
        }
        let (at, lane) = self
            .lanes
            .iter_mut()
            .enumerate()
            .filter(|(_, l)| l.next < l.gangs.len() && (!fair || l.waiting < depth))
            .min_by_key(|(_, l)| {
                let at = l.gangs[l.next];
                let head = &pending[at];
                let borrows = l.nominal.as_ref().is_some_and(|n| n.exceeded_by(usage, head));
                let share = match l.queue {
                    Some(q) if fair => dominant_share(usage.held(q), totals, queues.spec(q).weight),
                    _ => 0,
                };
                // The queue breaks ties between lanes only where lanes are queues by design.
                let queue = if fair { l.queue } else { None };
                (borrows, Reverse(head.priority), share, times[at], queue, head.id.as_str())
            })?;
        lane.next += 1;
        self.last = Some(at);
        Some(lane.gangs[lane.next - 1])
    }

    /// The gang [`Self::next`] gave last was left waiting: it counts against the depth.
    pub fn left_waiting(&mut self) {
        self.waiting += 1;
        if let Some(lane) = self.last.and_then(|at| self.lanes.get_mut(at)) {
            lane.waiting += 1;
        }
    }
}

/// The largest fraction of the fleet `held` is of any resource, divided by `weight`, in parts
/// per billion. A weight of 0 counts as the smallest possible weight.
pub fn dominant_share(held: Held, totals: Held, weight: u32) -> u128 {
    let dominant = held
        .iter()
        .zip(totals)
        .filter(|(_, t)| *t > 0)
        .map(|(h, t)| u128::from(*h) * SCALE / u128::from(t))
        .max()
        .unwrap_or(0);
    dominant / u128::from(weight.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dominant_resource_decides_and_weight_divides() {
        let totals = [100, 1_000, 1_000];
        assert_eq!(dominant_share([10, 50, 0], totals, 1), 100_000_000);
        assert_eq!(dominant_share([1, 500, 0], totals, 1), 500_000_000);
        assert_eq!(dominant_share([10, 0, 0], totals, 2), 50_000_000);
        assert_eq!(dominant_share([10, 0, 0], [0, 0, 0], 1), 0, "a fleet without a resource shares none of it");
    }
}
