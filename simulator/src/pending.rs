//! The simulator's waiting gangs, kept per queue in the order a cycle considers them
//! (`scheduler_core::queue_order`: priority, then the time it is ordered by, then id), so each
//! cycle is handed
//! only what it would look at anyway: the first `Config::depth` of every queue where the cycle
//! orders by queue (fair sharing, or queues in a cohort: `scheduler_core::lanes_per_queue`),
//! else the first `depth` of all queues together (one lane). A cycle then
//! costs what its depth costs, however long the queues grow. Those first gangs stay lent out
//! between cycles (the window): a cycle usually decides a few of them, and the rest are moved
//! within one contiguous vector, not fetched from their slots again.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use scheduler_core::{Gang, GangId};

/// A gang's place in its queue: `queue_order`'s key.
type Place = (Reverse<i32>, u64, GangId);

#[derive(Debug, Default)]
pub struct Pending {
    /// Queue name → place → job index: every waiting job, in order.
    queues: BTreeMap<String, BTreeMap<Place, usize>>,
    /// The same jobs, all queues in one order (ties, which only jobs of one id in two queues
    /// could make, by job): the one lane without fair sharing, read off rather than merged.
    all: BTreeSet<(Place, usize)>,
    /// Job index → its gang while it waits outside the window: a slot per job, so a gang is
    /// moved in and out, never shifted about as a map's nodes split and merge.
    slots: Vec<Option<Gang>>,
    /// The window: the gangs handed to cycles, in queue order per queue, with their jobs.
    window: Vec<Gang>,
    window_jobs: Vec<usize>,
    /// Per job: the time it is ordered by (`scheduler_core::order_ms`), as last filed (`push`,
    /// `reorder`).
    order_ms: Vec<u64>,
    /// Per job: in the window; and where in it, as `lend` last found it.
    lent: Vec<bool>,
    at: Vec<usize>,
    /// The jobs the last `lend` took out of the window while they still wait.
    overtaken: Vec<usize>,
    /// Where in the window each lane that has more gangs waiting behind it ends.
    edges: Vec<usize>,
    len: usize,
    /// Per job bound to one cluster at push: the cluster and its GPUs, summed per cluster in
    /// `bound` (what a spreader that binds at submit remembers having sent there).
    bound_job: BTreeMap<usize, (String, u64)>,
    bound: BTreeMap<String, u64>,
    /// The waiting jobs' submit times, summed: their mean wait, found without a pass over them.
    submitted_sum_ms: u128,
}

impl Pending {
    /// How many jobs wait, in the window or not.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A job starts waiting, ordered by `order_ms` (`scheduler_core::order_ms`) after its
    /// priority. It enters the window at the next `lend` if it belongs there.
    pub fn push(&mut self, job: usize, gang: Gang, order_ms: u64) {
        if let Some(c) = bound_to(&gang) {
            let gpus = gang.total_gpus();
            *self.bound.entry(c.to_string()).or_default() += gpus;
            self.bound_job.insert(job, (c.to_string(), gpus));
        }
        if self.file(job, gang.queue.clone(), (Reverse(gang.priority), order_ms, gang.id.clone())) {
            self.len += 1;
            self.submitted_sum_ms += u128::from(gang.submitted_ms);
        }
        if self.slots.len() <= job {
            self.slots.resize_with(job + 1, || None);
            self.lent.resize(job + 1, false);
            self.at.resize(job + 1, 0);
        }
        self.slots[job] = Some(gang);
    }

    /// Files `job` at `place` in `queue`'s order and the order of all; whether its queue had
    /// no job at that place (a gang id twice in one queue is one place).
    fn file(&mut self, job: usize, queue: String, place: Place) -> bool {
        if self.order_ms.len() <= job {
            self.order_ms.resize(job + 1, 0);
        }
        self.order_ms[job] = place.1;
        let new = self.queues.entry(queue).or_default().insert(place.clone(), job).is_none();
        self.all.insert((place, job));
        new
    }

    /// Orders every waiting job again, by `order_ms` (the order's cap moved,
    /// `ShortFirst::in_force`). The window stays as lent: the next `lend` takes what the new
    /// order wants, and those it no longer wants are overtaken.
    pub fn reorder(&mut self, order_ms: impl Fn(&Gang) -> u64) {
        for (at, &j) in self.window_jobs.iter().enumerate() {
            self.at[j] = at;
        }
        let jobs: Vec<usize> = std::mem::take(&mut self.all).into_iter().map(|(_, j)| j).collect();
        self.queues.clear();
        let places: Vec<(usize, String, Place)> = jobs
            .into_iter()
            .map(|j| {
                let gang = if self.lent[j] { Some(&self.window[self.at[j]]) } else { self.slots[j].as_ref() };
                let gang = gang.expect("a waiting job's gang is in its slot or the window");
                (j, gang.queue.clone(), (Reverse(gang.priority), order_ms(gang), gang.id.clone()))
            })
            .collect();
        for (j, queue, place) in places {
            self.file(j, queue, place);
        }
    }

    /// How long the waiting jobs have waited at `now_ms`, on average (0 when none wait).
    pub fn mean_wait_ms(&self, now_ms: u64) -> u64 {
        scheduler_core::mean_wait_ms(now_ms, self.len, self.submitted_sum_ms)
    }

    /// GPUs of the waiting gangs bound to `cluster` alone when they arrived.
    pub fn bound_gpus(&self, cluster: &str) -> u64 {
        self.bound.get(cluster).copied().unwrap_or(0)
    }

    /// Makes the window the first `depth` gangs of each lane (`per_queue`: a lane per queue,
    /// else one), in queue order within each queue (a cycle sorts what it is handed: sorted
    /// runs, that is one pass), and hands it out; `jobs()` names each one's job.
    pub fn lend(&mut self, depth: u32, per_queue: bool) -> &mut [Gang] {
        let depth = usize::try_from(depth).unwrap_or(usize::MAX);
        self.edges.clear();
        let wanted: Vec<usize> = if per_queue {
            let mut wanted = Vec::new();
            for places in self.queues.values() {
                wanted.extend(places.values().take(depth).copied());
                if depth > 0 && places.len() > depth {
                    self.edges.push(wanted.len() - 1);
                }
            }
            wanted
        } else {
            if depth > 0 && self.len > depth {
                self.edges.push(depth - 1);
            }
            self.first_of_all(depth)
        };
        // The part the window already holds in place stays (most of it, most cycles: the gangs
        // a cycle left waiting, ahead of the arrivals); only the rest is moved.
        let kept = wanted.iter().zip(&self.window_jobs).take_while(|(w, o)| w == o).count();
        let mut old: Vec<Option<Gang>> = self.window.drain(kept..).map(Some).collect();
        let old_jobs = self.window_jobs.split_off(kept);
        for (at, &j) in old_jobs.iter().enumerate() {
            self.at[j] = at;
        }
        for &j in &wanted[kept..] {
            let gang = if self.lent[j] { old[self.at[j]].take() } else { self.slots[j].take() };
            self.lent[j] = true;
            self.window.push(gang.expect("a waiting job's gang is in its slot or the window"));
            self.window_jobs.push(j);
        }
        // Those overtaken (by a gang of higher priority, or by a queue's new head) go back.
        self.overtaken.clear();
        for (j, gang) in old_jobs.into_iter().zip(old) {
            if let Some(gang) = gang {
                self.lent[j] = false;
                self.slots[j] = Some(gang);
                self.overtaken.push(j);
            }
        }
        &mut self.window
    }

    /// The first `depth` waiting jobs of all queues in queue order.
    fn first_of_all(&self, depth: usize) -> Vec<usize> {
        self.all.iter().take(depth).map(|&(_, job)| job).collect()
    }

    /// The jobs the last `lend` took out of the window that still wait: no cycle looks at
    /// them until they are back.
    pub fn overtaken(&self) -> &[usize] {
        &self.overtaken
    }

    /// Moves the gangs of the window at positions `at` (ascending) to its front, in order, and
    /// hands them out: a cycle shown only those (`cut`). `unfront` puts them back.
    pub fn front(&mut self, at: &[usize]) -> &[Gang] {
        for (k, &i) in at.iter().enumerate() {
            self.window.swap(k, i);
            self.window_jobs.swap(k, i);
        }
        &self.window[..at.len()]
    }

    /// Undoes `front(at)`: the swaps in reverse.
    pub fn unfront(&mut self, at: &[usize]) {
        for (k, &i) in at.iter().enumerate().rev() {
            self.window.swap(k, i);
            self.window_jobs.swap(k, i);
        }
    }

    /// The window's last gang of each lane with more waiting behind it, as last lent: a cycle
    /// that admits one of them might have admitted more, had it been handed them.
    pub fn edges(&self) -> &[usize] {
        &self.edges
    }

    /// The window as last lent.
    pub fn lent(&self) -> &[Gang] {
        &self.window
    }

    /// The job of each gang of the window, in its order.
    pub fn jobs(&self) -> &[usize] {
        &self.window_jobs
    }

    /// Takes the gangs of the window at the positions `decided` names (started, or refused for
    /// good) out of their queues, in window order, with their jobs.
    pub fn take_decided(&mut self, decided: &[bool]) -> Vec<(usize, Gang)> {
        let gangs = extract_marked(&mut self.window, decided);
        let jobs = extract_marked(&mut self.window_jobs, decided);
        for (&j, gang) in jobs.iter().zip(&gangs) {
            self.lent[j] = false;
            self.leave(j, gang);
        }
        jobs.into_iter().zip(gangs).collect()
    }

    fn leave(&mut self, job: usize, gang: &Gang) {
        let key = ((Reverse(gang.priority), self.order_ms[job], gang.id.clone()), job);
        self.all.remove(&key);
        let (place, _) = key;
        if let Some(places) = self.queues.get_mut(&gang.queue)
            && places.remove(&place).is_some()
        {
            self.len -= 1;
            self.submitted_sum_ms -= u128::from(gang.submitted_ms);
            if places.is_empty() {
                self.queues.remove(&gang.queue);
            }
        }
        if let Some((c, gpus)) = self.bound_job.remove(&job)
            && let Some(sum) = self.bound.get_mut(&c)
        {
            *sum -= gpus;
        }
    }
}

/// Takes out the items at the positions `marked` names, in order.
fn extract_marked<T>(items: &mut Vec<T>, marked: &[bool]) -> Vec<T> {
    let mut i = 0;
    items
        .extract_if(.., |_| {
            i += 1;
            marked[i - 1]
        })
        .collect()
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

    /// A one-GPU gang of `queue` at `priority`, submitted at `submitted`.
    fn g(id: &str, queue: &str, priority: i32, submitted: u64) -> Gang {
        gang(id).gpus(1).queue(queue).priority(priority).submitted(submitted)
    }

    /// Ordered by submit time, as without `Config::short_first`.
    fn push(p: &mut Pending, job: usize, gang: Gang) {
        let order_ms = gang.submitted_ms;
        p.push(job, gang, order_ms);
    }

    fn ids(p: &Pending) -> Vec<&str> {
        let mut ids: Vec<&str> = p.lent().iter().map(|g| g.id.as_str()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn the_window_is_the_first_of_each_queue_and_follows_arrivals_and_decisions() {
        let mut p = Pending::default();
        push(&mut p, 0, g("a-late", "a", 0, 30));
        push(&mut p, 1, g("a-early", "a", 0, 10));
        push(&mut p, 3, g("b-only", "b", 0, 0));
        assert_eq!(p.lend(2, true).len(), 3);
        assert_eq!(ids(&p), ["a-early", "a-late", "b-only"]);
        // A more urgent arrival overtakes a-late, which goes back to wait outside.
        push(&mut p, 2, g("a-urgent", "a", 5, 50));
        p.lend(2, true);
        assert_eq!(ids(&p), ["a-early", "a-urgent", "b-only"]);
        assert_eq!(p.overtaken(), [0]);
        assert_eq!(p.len(), 4);
        let decided: Vec<bool> = p.lent().iter().map(|x| x.id != "a-early").collect();
        let taken = p.take_decided(&decided);
        let mut taken_jobs: Vec<usize> = taken.iter().map(|(j, _)| *j).collect();
        taken_jobs.sort();
        assert_eq!(taken_jobs, [2, 3]);
        assert_eq!(p.len(), 2);
        p.lend(2, true);
        assert_eq!(ids(&p), ["a-early", "a-late"]);
        assert_eq!(p.jobs().len(), 2);
    }

    /// The order's cap moved (`ShortFirst::in_force`): every waiting job is filed again by its
    /// new time, lent or not, and the next window follows, those it drops overtaken. The mean
    /// wait follows arrivals and departures.
    #[test]
    fn reordered_the_window_follows_the_new_order() {
        let mut p = Pending::default();
        for (job, (id, submitted)) in [("first", 10), ("second", 20), ("third", 30)].into_iter().enumerate() {
            push(&mut p, job, g(id, "a", 0, submitted));
        }
        assert_eq!(p.mean_wait_ms(100), 80);
        p.lend(2, false);
        assert_eq!(ids(&p), ["first", "second"]);
        // Latest submitted first now.
        p.reorder(|g| 100 - g.submitted_ms);
        p.lend(2, false);
        assert_eq!(ids(&p), ["second", "third"]);
        assert_eq!(p.overtaken(), [0], "first, lent before, is outside the window now");
        assert_eq!(p.len(), 3);
        let decided: Vec<bool> = p.lent().iter().map(|x| x.id == "third").collect();
        assert_eq!(p.take_decided(&decided)[0].0, 2);
        p.lend(2, false);
        assert_eq!(ids(&p), ["first", "second"]);
        assert_eq!(p.mean_wait_ms(100), 85, "first and second wait, 90 and 80");
        assert_eq!(Pending::default().mean_wait_ms(100), 0);
    }

    #[test]
    fn one_lane_is_the_first_of_all_queues_merged_in_queue_order() {
        let mut p = Pending::default();
        push(&mut p, 0, g("a1", "a", 0, 10));
        push(&mut p, 1, g("a2", "a", 0, 40));
        push(&mut p, 2, g("b1", "b", 0, 20));
        push(&mut p, 3, g("b2", "b", 0, 30));
        push(&mut p, 4, g("c1", "c", 9, 50));
        let order = |p: &Pending| p.lent().iter().map(|g| g.id.clone()).collect::<Vec<_>>();
        p.lend(3, false);
        assert_eq!(order(&p), ["c1", "a1", "b1"]);
        p.lend(4, false);
        assert_eq!(order(&p), ["c1", "a1", "b1", "b2"]);
        push(&mut p, 5, g("a0", "a", 0, 0));
        p.lend(4, false);
        assert_eq!(order(&p), ["c1", "a0", "a1", "b1"]);
        assert_eq!(p.overtaken(), [3]);
    }

    #[test]
    fn front_hands_the_chosen_in_order_and_unfront_restores_the_window() {
        let mut p = Pending::default();
        for (j, id) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
            push(&mut p, j, gang(id).gpus(1).submitted(j as u64));
        }
        p.lend(8, true);
        let order = |p: &Pending| p.lent().iter().map(|g| g.id.clone()).collect::<Vec<_>>();
        let before = (order(&p), p.jobs().to_vec());
        let front: Vec<&str> = p.front(&[1, 3, 4]).iter().map(|g| g.id.as_str()).collect();
        assert_eq!(front, ["b", "d", "e"]);
        assert_eq!(&p.jobs()[..3], [1, 3, 4]);
        p.unfront(&[1, 3, 4]);
        assert_eq!((order(&p), p.jobs().to_vec()), before);
    }

    #[test]
    fn bound_gpus_follow_the_gangs_in_and_out() {
        let mut p = Pending::default();
        let mut bound = gang("x").pods(2).gpus(8);
        bound.clusters.only = Some(vec!["east".into()]);
        let mut two = gang("y").gpus(4);
        two.clusters.only = Some(vec!["east".into(), "west".into()]);
        push(&mut p, 0, bound);
        push(&mut p, 1, two);
        assert_eq!((p.bound_gpus("east"), p.bound_gpus("west")), (16, 0));
        p.lend(1, true);
        assert_eq!(p.bound_gpus("east"), 16, "lent gangs still wait");
        let decided: Vec<bool> = p.lent().iter().map(|g| g.id == "x").collect();
        p.take_decided(&decided);
        assert_eq!(p.bound_gpus("east"), 0);
    }
}
