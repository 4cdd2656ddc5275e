//! The simulator's waiting gangs, kept per queue in the order a cycle considers them
//! (`scheduler_core::queue_order`: priority, then submit time, then id), so each cycle is handed
//! only the first `Config::depth` of every queue: what it would look at anyway. A cycle then
//! costs what its depth costs, however long the queues grow: the gangs it looks at are lent
//! to it and come back to their slots, and only the decided ones leave their queue.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use scheduler_core::Gang;

/// A gang's place in its queue: `queue_order`'s key.
type Place = (Reverse<i32>, u64, String);

#[derive(Debug, Default)]
pub struct Pending {
    /// Queue name → place → job index: every waiting job, in order.
    queues: BTreeMap<String, BTreeMap<Place, usize>>,
    /// Job index → its gang while it waits and is not lent to a cycle: a slot per job, so a
    /// gang is moved in and out, never shifted about as a map's nodes split and merge.
    gangs: Vec<Option<Gang>>,
    len: usize,
    /// GPUs of the waiting gangs bound to one cluster, per cluster (what a spreader that binds
    /// at submit remembers having sent there).
    bound: BTreeMap<String, u64>,
}

impl Pending {
    /// How many jobs wait, lent to a cycle or not.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A job starts waiting.
    pub fn push(&mut self, job: usize, gang: Gang) {
        let place = (Reverse(gang.priority), gang.submitted_ms, gang.id.clone());
        if self.queues.entry(gang.queue.clone()).or_default().insert(place, job).is_none() {
            self.len += 1;
        }
        self.put_back(job, gang);
    }

    /// GPUs of the waiting gangs bound to `cluster` alone.
    pub fn bound_gpus(&self, cluster: &str) -> u64 {
        self.bound.get(cluster).copied().unwrap_or(0)
    }

    /// Lends out the first `depth` gangs of every queue, queue by queue in name order, each
    /// in queue order. Each comes back with `put_back` (still waiting) or `done` (decided).
    pub fn heads(&mut self, depth: u32) -> (Vec<usize>, Vec<Gang>) {
        let depth = usize::try_from(depth).unwrap_or(usize::MAX);
        let jobs: Vec<usize> = self.queues.values().flat_map(|places| places.values().take(depth).copied()).collect();
        let gangs = jobs
            .iter()
            .map(|&j| {
                let gang = self.gangs[j].take().expect("a waiting job's gang is in its slot");
                if let Some(c) = bound_to(&gang)
                    && let Some(gpus) = self.bound.get_mut(c)
                {
                    *gpus -= gang.total_gpus();
                }
                gang
            })
            .collect();
        (jobs, gangs)
    }

    /// A lent gang still waits, in its place.
    pub fn put_back(&mut self, job: usize, gang: Gang) {
        if let Some(c) = bound_to(&gang) {
            *self.bound.entry(c.to_string()).or_default() += gang.total_gpus();
        }
        if self.gangs.len() <= job {
            self.gangs.resize_with(job + 1, || None);
        }
        self.gangs[job] = Some(gang);
    }

    /// A lent gang was decided (started or refused for good): it leaves its queue.
    pub fn done(&mut self, gang: &Gang) {
        let place = (Reverse(gang.priority), gang.submitted_ms, gang.id.clone());
        if let Some(places) = self.queues.get_mut(&gang.queue)
            && places.remove(&place).is_some()
        {
            self.len -= 1;
            if places.is_empty() {
                self.queues.remove(&gang.queue);
            }
        }
    }
}

/// The one cluster `gang` is bound to, if it is bound to exactly one.
fn bound_to(gang: &Gang) -> Option<&str> {
    match gang.clusters.only.as_deref() {
        Some([c]) => Some(c.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler_core::fixture::{GangExt, gang};

    #[test]
    fn heads_come_out_per_queue_in_queue_order_and_the_rest_stay() {
        let mut p = Pending::default();
        let g = |id: &str, queue: &str, priority: i32, submitted: u64| {
            gang(id).gpus(1).queue(queue).priority(priority).submitted(submitted)
        };
        p.push(0, g("a-late", "a", 0, 30));
        p.push(1, g("a-early", "a", 0, 10));
        p.push(2, g("a-urgent", "a", 5, 50));
        p.push(3, g("b-only", "b", 0, 0));
        let (jobs, gangs) = p.heads(2);
        assert_eq!(jobs, vec![2, 1, 3]);
        assert_eq!(gangs.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(), ["a-urgent", "a-early", "b-only"]);
        assert_eq!(p.len(), 4, "lent gangs still wait");
        let mut gangs = gangs.into_iter();
        let urgent = gangs.next().expect("lent");
        p.done(&urgent);
        p.put_back(1, gangs.next().expect("lent"));
        p.done(&gangs.next().expect("lent"));
        assert_eq!(p.len(), 2);
        let (jobs, _) = p.heads(2);
        assert_eq!(jobs, vec![1, 0]);
    }

    #[test]
    fn bound_gpus_follow_the_gangs_in_and_out() {
        let mut p = Pending::default();
        let mut bound = gang("x").pods(2).gpus(8);
        bound.clusters.only = Some(vec!["east".into()]);
        let mut two = gang("y").gpus(4);
        two.clusters.only = Some(vec!["east".into(), "west".into()]);
        p.push(0, bound);
        p.push(1, two);
        assert_eq!((p.bound_gpus("east"), p.bound_gpus("west")), (16, 0));
        let (_, lent) = p.heads(1);
        assert_eq!(p.bound_gpus("east"), 0);
        p.done(&lent[0]);
        assert_eq!(p.bound_gpus("east"), 0);
    }
}
