//! What the replay counts: busy GPUs and fragmentation over time, each job's starts, stops,
//! evictions and checkpointed progress, and the invariant check after every instant.

use scheduler_core::invariants::{self};
use scheduler_core::{Admission, Capacity, DomainId, Fleet, Gang, Level, PodShape, release};

use crate::running::Running;

use super::*;

impl Sim<'_> {
    /// Integrates busy GPUs and fragmentation over [from, to).
    pub(super) fn account(&mut self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        self.run.weighted_gpu_s += u128::from(self.weighted_busy) * u128::from(to - from);
        let (fragmented, free) = fragmented_free(self.fleet, &self.capacity);
        if free > 0 {
            self.run.fragmentation_integral += fragmented as f64 / free as f64 * (to - from) as f64;
        }
    }

    /// A gang evicted for a preemptor: back to the queue, its work lost. The cycle's capacity
    /// and usage already count it gone.
    pub(super) fn evicted(&mut self, t: u64, j: usize) {
        if let Some(r) = self.running.remove(self.fleet, self.queues, j) {
            let gpus = r.gang.total_gpus();
            self.busy_gpus -= gpus;
            self.weighted_busy -= self.weighted(&r.gang, &r.admission);
            let (gang, lost_s) = self.interrupt(t, j, r);
            let rec = &mut self.records[j];
            rec.restarts += 1;
            rec.preemptions += 1;
            rec.lost_gpu_s += gpus * lost_s;
            rec.outcome = Outcome::Pending(Arc::new(not_looked_at(self.policy, &rec.queue)));
            self.wait(j, gang);
        }
    }

    /// A run cut short at `t`: what it had checkpointed counts as done, the rest since is lost
    /// (returned, in seconds), and the gang goes back asking only for what remains.
    pub(super) fn interrupt(&mut self, t: u64, j: usize, r: Running) -> (Gang, u64) {
        self.attempts[j] += 1;
        let ran = t.saturating_sub(r.start_s);
        let saved = self.opts.checkpoint_interval_s.filter(|&i| i > 0).map_or(0, |i| ran / i * i);
        self.progress_s[j] += saved as f64 / r.slowdown;
        let mut gang = r.gang;
        gang.runtime_ms = Some((self.remaining_s(j) * 1000.0).ceil() as u64);
        (gang, ran - saved)
    }

    /// Seconds of trace run time job `j` still has to do.
    pub(super) fn remaining_s(&self, j: usize) -> f64 {
        (self.records[j].duration_s as f64 - self.progress_s[j]).max(1.0)
    }

    /// When a running gang last checkpointed, if it has.
    pub(super) fn last_checkpoint_ms(&self, r: &Running, now_s: u64) -> Option<u64> {
        let interval = self.opts.checkpoint_interval_s.filter(|&i| i > 0)?;
        let saved = now_s.saturating_sub(r.start_s) / interval * interval;
        (saved > 0).then(|| (r.start_s + saved).saturating_mul(1000))
    }

    /// Starts job `j` as admitted; its placement's own invariants are checked here, once (it
    /// does not change while it runs).
    pub(super) fn start(&mut self, t: u64, j: usize, gang: Gang, admission: Admission) -> Result<(), SimError> {
        let policy = self.policy;
        let violated = move |violation| SimError::Invariant { policy, time_s: t, violation };
        invariants::check_gang(self.fleet, &gang, &admission).map_err(violated)?;
        let span = admission.span(self.fleet);
        let slowdown = span.map_or(1.0, |s| self.opts.cost.factor(self.fleet, s));
        let run_s = (self.remaining_s(j) * slowdown).ceil() as u64;
        let rec = &mut self.records[j];
        rec.first_start_s.get_or_insert(t);
        rec.placement = Some(PlacementFacts {
            cluster: self.fleet.cluster(admission.cluster).name.clone(),
            hosts: admission.host_count(),
            span_level: span.and_then(|s| self.fleet.level_of(s)).or_else(|| {
                // A single host is its own span.
                span.filter(|s| self.fleet.domain(*s).node.is_some()).map(|_| Level::Host)
            }),
            slowdown,
        });
        rec.outcome = Outcome::Running;
        self.busy_gpus += gang.total_gpus();
        self.weighted_busy += self.weighted(&gang, &admission);
        let attempt = self.attempts[j];
        let end_s = t + run_s.max(1);
        self.push(end_s, Event::Finish { job: j, attempt });
        let running = Running { gang, admission, start_s: t, slowdown, end_s };
        self.running.insert(self.fleet, self.queues, j, running).map_err(violated)
    }

    pub(super) fn stop(&mut self, r: &Running) {
        release(self.fleet, self.queues, &mut self.capacity, &mut self.usage, &r.gang, &r.admission);
        self.capacity.commit();
        self.busy_gpus -= r.gang.total_gpus();
        self.weighted_busy -= self.weighted(&r.gang, &r.admission);
    }

    /// A gang's GPUs times the cost weight of the cluster it runs on.
    fn weighted(&self, gang: &Gang, admission: &Admission) -> u64 {
        gang.total_gpus().saturating_mul(u64::from(self.fleet.cluster(admission.cluster).cost_weight))
    }

    /// The invariants of the whole after an instant: the tracked capacity and usage against
    /// what the running gangs and the hosts down add up to, and every queue within its quota.
    pub(super) fn check(&self, t: u64) -> Result<(), SimError> {
        // The priced busy count is kept beside the ledger, not in it: held to the running
        // gangs here, in tests (where every instant is checked).
        debug_assert_eq!(
            self.weighted_busy,
            self.running.iter().map(|(_, r)| self.weighted(&r.gang, &r.admission)).sum::<u64>(),
            "the priced busy GPUs at {t}"
        );
        let down: Vec<DomainId> = self.down.iter().copied().collect();
        self.running
            .ledger()
            .check(self.fleet, self.queues, &down, &self.capacity, &self.usage)
            .map_err(|violation| SimError::Invariant { policy: self.policy, time_s: t, violation })
    }
}

pub(super) fn whole(spec: &scheduler_core::fleet::NodeSpec) -> PodShape {
    PodShape { gpus: spec.gpus, cpu_milli: spec.cpu_milli, memory_mib: spec.memory_mib }
}

/// The GPUs free in `cluster` for pods of `per_pod` GPUs each (at least 1): what such pods
/// could take of each node's free GPUs, from the cluster's histograms.
pub(super) fn free_gpus(fleet: &Fleet, cap: &Capacity, cluster: &scheduler_core::fleet::Cluster, per_pod: u32) -> u64 {
    let per_pod = u64::from(per_pod.max(1));
    let hists = cluster.flavors.iter().map(|&f| cap.histogram(fleet, cluster.root, f));
    hists.flat_map(|h| h.iter().enumerate()).map(|(k, &n)| k as u64 / per_pod * per_pod * u64::from(n)).sum()
}

/// (free GPUs on nodes that are partly used, all free GPUs), from the cluster roots'
/// histograms: a node counts as whole when it has its cluster's full node size free.
pub fn fragmented_free(fleet: &Fleet, cap: &Capacity) -> (u64, u64) {
    let mut fragmented = 0;
    let mut free = 0;
    for c in fleet.clusters() {
        for &f in &c.flavors {
            let hist = cap.histogram(fleet, c.root, f);
            let full = hist.len().saturating_sub(1);
            for (k, &n) in hist.iter().enumerate() {
                let gpus = k as u64 * u64::from(n);
                free += gpus;
                if k < full {
                    fragmented += gpus;
                }
            }
        }
    }
    (fragmented, free)
}
