//! What a cycle sees: the fleet and queues, the capacity and quota usage left by what is
//! already running, and, for reservations and preemption, what the running gangs will give
//! back and which of them could be evicted.

use std::borrow::Cow;

use crate::capacity::{Capacity, PodShape};
use crate::decision::Admission;
use crate::fleet::{DomainId, Fleet};
use crate::gang::{Gang, GangId};
use crate::queue::{Queues, QuotaUsage};

/// The cycle consumes the capacity and usage and returns them, updated by what it admits.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    pub fleet: &'a Fleet,
    pub queues: &'a Queues,
    pub capacity: Capacity,
    pub usage: QuotaUsage,
    /// The cycle's time, on the clock of the gangs' `submitted_ms` (an input: the core reads
    /// no clock).
    pub now_ms: u64,
    /// What running gangs will give back and when they are expected to: reservations are
    /// planned on it. Empty: no reservations. Borrowed where the caller keeps them between
    /// cycles (the simulator), so a cycle does not copy every running gang's hosts.
    pub releases: Cow<'a, [Release]>,
    /// The running gangs preemption may choose victims among. Empty: no preemption.
    pub running: Vec<Running<'a>>,
    /// The last cycle's reservations (`Cycle::reserved`): this cycle's search for the same
    /// gang starts where it ended. A hint only: a reservation found is the same without it,
    /// found with fewer placements when little has changed.
    pub reserved: Vec<Reserved>,
    /// Gangs waiting within the cycle's depth that the caller did not hand it, knowing none of
    /// them can start this cycle (the simulator's cut cycles). A gang started spread delays
    /// them too, so weighing a hold counts them (`locality`). 0 when the caller hands every
    /// gang (the dispatcher).
    pub unhanded: u64,
}

/// A cycle's reservation: for which gang, and when it expects the room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub gang: GangId,
    pub start_ms: u64,
}

impl<'a> Snapshot<'a> {
    /// What every cycle needs: the fleet and queues, what is left of them, and the time. No
    /// releases (no reservations), no running gangs (no preemption), no hint, every gang
    /// handed; callers that want those extend it (`Snapshot { running, ..Snapshot::at(..) }`).
    pub fn at(fleet: &'a Fleet, queues: &'a Queues, capacity: Capacity, usage: QuotaUsage, now_ms: u64) -> Self {
        Snapshot {
            fleet,
            queues,
            capacity,
            usage,
            now_ms,
            releases: Cow::Borrowed(&[]),
            running: Vec::new(),
            reserved: Vec::new(),
            unhanded: 0,
        }
    }

    /// The fleet with nothing running, at time 0.
    pub fn idle(fleet: &'a Fleet, queues: &'a Queues) -> Self {
        Snapshot::at(fleet, queues, Capacity::empty(fleet), QuotaUsage::default(), 0)
    }
}

/// Capacity a running gang gives back when it ends, at its expected end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The running gang's id.
    pub gang: GangId,
    pub end_ms: u64,
    /// (host, pods, shape of each pod).
    pub hosts: Vec<(DomainId, u32, PodShape)>,
}

impl Release {
    pub fn of(gang: &Gang, admission: &Admission, end_ms: u64) -> Self {
        let hosts = gang
            .pod_sets
            .iter()
            .zip(&admission.pod_sets)
            .flat_map(|(ps, p)| p.hosts.iter().map(move |&(h, n)| (h, n, ps.shape)))
            .collect();
        Release { gang: gang.id.clone(), end_ms, hosts }
    }
}

/// A gang running when the snapshot was taken: a possible victim.
#[derive(Debug, Clone, Copy)]
pub struct Running<'a> {
    pub gang: &'a Gang,
    pub admission: &'a Admission,
    pub started_ms: u64,
    /// When it last reported a checkpoint, on the same clock.
    pub checkpoint_ms: Option<u64>,
    /// Already being evicted (for an earlier preemptor): choosing it costs nothing and needs no
    /// permission, so a preemptor waiting for its victims to go picks the same ones again.
    pub evicting: bool,
}

impl Running<'_> {
    /// GPU-milliseconds of work an eviction at `now_ms` throws away.
    pub fn loss(&self, now_ms: u64, prefer_checkpointed: bool) -> u64 {
        if self.evicting {
            return 0;
        }
        let since = match self.checkpoint_ms {
            Some(c) if prefer_checkpointed => c.max(self.started_ms),
            _ => self.started_ms,
        };
        self.gang.total_gpus().saturating_mul(now_ms.saturating_sub(since))
    }
}
