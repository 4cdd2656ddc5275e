//! Why a gang is pending: typed data naming the blocking constraint, made into one sentence
//! only at the edge (`Display`). `kind()` is a stable label for metrics and reports.

use std::fmt;
use std::sync::Arc;

use crate::gang::GangError;
use crate::queue::Resource;
use crate::topology::Level;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The gang as written can never be admitted.
    Invalid(GangError),
    UnknownQueue {
        queue: String,
    },
    /// Its queue is StrictFIFO and an earlier gang of the queue is pending.
    WaitingBehind {
        queue: String,
        gang: String,
    },
    /// Not looked at this cycle: `depth` gangs ahead of it in its queue (`None`: in the one
    /// global order) were left waiting, as many as a cycle looks at (`Config::depth`).
    BeyondDepth {
        queue: Option<String>,
        depth: u32,
    },
    /// The queue has quota for none of the flavors the pod set accepts.
    NoQuotaForFlavor {
        queue: String,
        pod_set: Arc<str>,
        flavors: Vec<String>,
    },
    QuotaExceeded {
        queue: String,
        flavor: String,
        resource: Resource,
        requested: u64,
        available: u64,
    },
    /// No cluster in the fleet has any flavor the pod set accepts.
    NoFlavor {
        pod_set: Arc<str>,
        flavors: Vec<String>,
    },
    /// The fleet has the flavor, but on no nodes the pod set's node selector, required node
    /// affinity and tolerations admit (`requirement`: which nodes it takes, as written).
    NoMatchingNodes {
        pod_set: Arc<str>,
        requirement: String,
    },
    /// Clusters with the flavor exist, but the gang's cluster filter (selector, pinning,
    /// back-off) or cordoning excludes them all. `allowed`: the clusters it may use, which
    /// lack `flavors` (at most [`NAMED_CLUSTERS`] named; empty when it may use none).
    NoClusterMatches {
        pod_set: Arc<str>,
        allowed: Vec<String>,
        flavors: Vec<String>,
    },
    /// Not enough free capacity now: no domain at `level` (whole cluster when `None`) has
    /// `pods` free slots; the largest has `largest` in `cluster`.
    NoDomain(Shortfall),
    /// Even on an empty fleet no cluster could hold it.
    NeverFits(Shortfall),
    /// The pod set prefers `preferred` and holds out for one domain at `held`, which has no
    /// room now: waiting is expected to cost less than starting spread (`cost`, see
    /// `locality`), or, for a gang with no run time to weigh, it is within its locality
    /// patience (`cost: None`, see `config::Patience`).
    HoldingForLocality {
        preferred: Level,
        held: Level,
        shortfall: Shortfall,
        /// Boxed: it keeps every `Reason` (returned by value all through a cycle) small.
        cost: Option<Box<HoldCost>>,
    },
    /// It could start now only by evicting running gangs that do not rank below it (reclaiming
    /// its queue's quota from borrowers), which would throw away more GPU-seconds of their work
    /// than the `owed_gpu_s` it goes without by waiting the `wait_s` until enough GPUs free as
    /// running gangs end (see `preempt`). That wait is a lower bound, and the message says so:
    /// it counts GPUs, not placements, and not the gangs ahead that may take them first.
    /// `now`: why it cannot start now.
    ReclaimDeferred {
        owed_gpu_s: u64,
        wait_s: u64,
        now: Box<Reason>,
    },
    /// Capacity is reserved for it on `cluster`, expected free in `in_s` seconds as running
    /// gangs end; smaller gangs use that capacity meanwhile only if they end before. `now` is
    /// why it cannot start now.
    Reserved {
        cluster: String,
        in_s: u64,
        now: Box<Reason>,
    },
}

/// Why waiting for locality was judged cheaper than starting now: a domain of the held level
/// is expected free in `wait_s`, while starting now would cross `spread_level`, run the gang
/// `spread_extra_s` longer and, with its GPUs held that much longer, delay the gangs waiting
/// behind it by `others_delay_s` in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldCost {
    pub wait_s: u64,
    pub spread_level: Level,
    pub spread_extra_s: u64,
    pub others_delay_s: u64,
}

/// A pod set that does not fit, with the best the fleet offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    // Names shared, not copied: a reason is made for every gang left pending in every cycle.
    pub pod_set: Arc<str>,
    pub level: Option<Level>,
    pub pods: u32,
    pub gpus_per_pod: u32,
    pub flavor: Option<Arc<str>>,
    /// How many GPU flavors the pod set waits for on the clusters it may use (those that could
    /// hold it all on an empty fleet, or at least a pod of it): with more than one, the words
    /// say it would take any of them, and `flavor` is only where `largest` was found. 1 where
    /// it never fits (the flavor with the most room is named).
    pub flavors: u32,
    pub largest: u32,
    pub cluster: Arc<str>,
    /// Set when `cluster` does not label `level` (a member without rack labels, or one whose
    /// agent summarised it by wider domains for size): the narrower level it was read as,
    /// strictly, so `largest` counts that, not the level asked for.
    pub read_as: Option<Level>,
    /// Set when one pod asks more CPU or memory than any host of `cluster` has: why `largest`
    /// is 0 however many GPUs are free. (Boxed: it is rare, and every `Reason` carries its size.)
    pub oversize: Option<Box<Oversize>>,
}

/// A pod's ask that no host of a cluster can meet, and the most a host there has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oversize {
    CpuMilli { asked: u64, most: u64 },
    MemoryMib { asked: u64, most: u64 },
}

impl fmt::Display for Oversize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Oversize::CpuMilli { asked, most } => {
                write!(f, "each pod asks {} CPUs and no host there has more than {}", cpus(asked), cpus(most))
            }
            Oversize::MemoryMib { asked, most } => {
                write!(f, "each pod asks {asked} MiB of memory and no host there has more than {most} MiB")
            }
        }
    }
}

/// Millicores as CPUs, the way a pod's request is usually written ("64", "0.5").
fn cpus(milli: u64) -> String {
    match milli % 1000 {
        0 => (milli / 1000).to_string(),
        rest => format!("{}.{}", milli / 1000, format!("{rest:03}").trim_end_matches('0')),
    }
}

impl Reason {
    /// `BeyondDepth`'s kind, for a caller counting gangs it never handed a cycle.
    pub const BEYOND_DEPTH: &'static str = "beyond-depth";
    /// `WaitingBehind`'s kind, likewise.
    pub const WAITING_BEHIND: &'static str = "waiting-behind";

    pub fn kind(&self) -> &'static str {
        match self {
            Reason::Invalid(_) => "invalid",
            Reason::UnknownQueue { .. } => "unknown-queue",
            Reason::WaitingBehind { .. } => Self::WAITING_BEHIND,
            Reason::BeyondDepth { .. } => Self::BEYOND_DEPTH,
            Reason::NoQuotaForFlavor { .. } => "no-quota-for-flavor",
            Reason::QuotaExceeded { .. } => "quota-exceeded",
            Reason::NoFlavor { .. } => "no-flavor",
            Reason::NoMatchingNodes { .. } => "no-matching-nodes",
            Reason::NoClusterMatches { .. } => "no-cluster-matches",
            Reason::NoDomain(_) => "no-domain",
            Reason::NeverFits(_) => "never-fits",
            Reason::HoldingForLocality { .. } => "holding-for-locality",
            Reason::Reserved { .. } => "reserved",
            Reason::ReclaimDeferred { .. } => "reclaim-deferred",
        }
    }

    /// True when evicting running gangs could let it start now: it is short of room or quota.
    /// (A gang holding out for locality may preempt only if it fits nowhere as written.)
    pub fn may_preempt(&self) -> bool {
        matches!(self, Reason::NoDomain(_) | Reason::QuotaExceeded { .. })
    }

    /// True when only a change of fleet or queue configuration (not of load) could unblock it.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Reason::Invalid(_)
                | Reason::UnknownQueue { .. }
                | Reason::NoQuotaForFlavor { .. }
                | Reason::NoFlavor { .. }
                | Reason::NoMatchingNodes { .. }
                | Reason::NoClusterMatches { .. }
                | Reason::NeverFits(_)
        )
    }
}

/// How many clusters a reason names before it stops: a reason stays a sentence on any fleet.
pub const NAMED_CLUSTERS: usize = 8;

fn any_of(flavors: &[String]) -> String {
    if flavors.is_empty() { "any GPU flavor".into() } else { format!("flavor {}", flavors.join(" or ")) }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gpus = |g: u32| if g == 1 { "GPU" } else { "GPUs" };
        let (slot, of) = match (self.gpus_per_pod, &self.flavor) {
            (0, _) => ("pod slots (CPU only)".to_string(), String::new()),
            (g, Some(fl)) if self.flavors > 1 => (
                format!("slots of {g} {} of any of the {} flavors it could run on", gpus(g), self.flavors),
                format!(" of {fl}"),
            ),
            (g, Some(fl)) => (format!("slots of {g} {fl} {}", gpus(g)), String::new()),
            (g, None) => (format!("slots of {g} {}", gpus(g)), String::new()),
        };
        let scope = match self.level {
            Some(l) => format!("no {l} in any cluster"),
            None => "no cluster".to_string(),
        };
        write!(
            f,
            "pod set {}: {scope} has {} free {slot} (largest: {}{of} in cluster {}",
            self.pod_set, self.pods, self.largest, self.cluster
        )?;
        if let (Some(level), Some(read_as)) = (self.level, self.read_as) {
            write!(f, ", which reports no {level} level: read as {read_as}")?;
        }
        match &self.oversize {
            Some(o) => write!(f, ": {o})"),
            None => write!(f, ")"),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Invalid(e) => write!(f, "invalid gang: {e}"),
            Reason::UnknownQueue { queue } => write!(f, "queue {queue} does not exist"),
            Reason::WaitingBehind { queue, gang } => {
                write!(f, "waiting behind gang {gang} at the head of StrictFIFO queue {queue}")
            }
            Reason::BeyondDepth { queue, depth } => {
                let of = queue.as_ref().map_or_else(|| "in queue order".to_string(), |q| format!("of queue {q}"));
                write!(
                    f,
                    "not looked at this cycle: {depth} gangs ahead of it {of} are waiting, as many as a cycle looks at"
                )
            }
            Reason::NoQuotaForFlavor { queue, pod_set, flavors } => {
                write!(f, "pod set {pod_set}: queue {queue} has no quota for {}", any_of(flavors))
            }
            Reason::QuotaExceeded { queue, flavor, resource, requested, available } => write!(
                f,
                "queue {queue} is out of {flavor} {resource} quota: needs {requested}, {available} available (borrowing included)"
            ),
            Reason::NoFlavor { pod_set, flavors } => {
                write!(f, "pod set {pod_set}: no cluster has {}", any_of(flavors))
            }
            Reason::NoMatchingNodes { pod_set, requirement } => {
                write!(f, "pod set {pod_set}: no member has GPU nodes {requirement}")
            }
            Reason::NoClusterMatches { pod_set, allowed, .. } if allowed.is_empty() => write!(
                f,
                "pod set {pod_set}: every cluster with a suitable flavor is excluded by the gang's cluster selector, pinning or back-off, or is cordoned"
            ),
            Reason::NoClusterMatches { pod_set, allowed, flavors } => write!(
                f,
                "pod set {pod_set}: the clusters it may use ({}) have no {}; those that have it are excluded by the gang's cluster selector, pinning or back-off, or are cordoned",
                allowed.join(", "),
                any_of(flavors)
            ),
            Reason::NoDomain(s) => write!(f, "{s}"),
            Reason::NeverFits(s) => write!(f, "{s}, even with the fleet empty: it can never be admitted"),
            Reason::ReclaimDeferred { owed_gpu_s, wait_s: 0, now } => write!(
                f,
                "not evicting running gangs of equal or higher priority to reclaim quota: it would throw away more of their work than the {:.1} GPU-hours this gang goes without, as enough GPUs are free already, though not where it fits; now: {now}",
                *owed_gpu_s as f64 / 3600.0,
            ),
            Reason::ReclaimDeferred { owed_gpu_s, wait_s, now } => write!(
                f,
                "not evicting running gangs of equal or higher priority to reclaim quota: it would throw away more of their work than the {:.1} GPU-hours this gang goes without in the at least {wait_s} s before enough GPUs free as running gangs end (gangs ahead of it may take them first); now: {now}",
                *owed_gpu_s as f64 / 3600.0,
            ),
            Reason::Reserved { cluster, in_s, now } => write!(
                f,
                "capacity reserved on cluster {cluster}, expected free in about {in_s} s as running gangs end (gangs that end sooner may use it meanwhile); now: {now}"
            ),
            Reason::HoldingForLocality { preferred, held, shortfall, cost: None } => write!(
                f,
                "holding out for one {held} (the pod set prefers one {preferred}; locality patience): {shortfall}"
            ),
            Reason::HoldingForLocality { preferred, held, shortfall, cost: Some(c) } => write!(
                f,
                "holding out for one {held} (the pod set prefers one {preferred}): one is expected free in about {} s; started now across {} it would run {} s longer and delay the gangs waiting behind it by about {} s in all; {shortfall}",
                c.wait_s,
                match c.spread_level {
                    Level::Zone => "zones",
                    Level::Block => "blocks",
                    Level::Rack => "racks",
                    Level::Nvlink => "NVLink domains",
                    Level::Host => "hosts",
                },
                c.spread_extra_s,
                c.others_delay_s,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_larger_than_any_host_says_which_resource() {
        let mut s = Shortfall {
            pod_set: "node".into(),
            level: None,
            pods: 1,
            gpus_per_pod: 8,
            flavor: Some("v100".into()),
            flavors: 1,
            largest: 0,
            cluster: "venus".into(),
            read_as: None,
            oversize: Some(Box::new(Oversize::CpuMilli { asked: 64_500, most: 48_000 })),
        };
        assert_eq!(
            s.to_string(),
            "pod set node: no cluster has 1 free slots of 8 v100 GPUs (largest: 0 in cluster venus: \
             each pod asks 64.5 CPUs and no host there has more than 48)"
        );
        s.oversize = Some(Box::new(Oversize::MemoryMib { asked: 400_000, most: 393_216 }));
        assert!(
            s.to_string().ends_with("each pod asks 400000 MiB of memory and no host there has more than 393216 MiB)")
        );
    }

    #[test]
    fn a_shortfall_reads_as_one_sentence() {
        let r = Reason::NoDomain(Shortfall {
            pod_set: "node".into(),
            level: Some(Level::Rack),
            pods: 8,
            gpus_per_pod: 8,
            flavor: Some("h100".into()),
            flavors: 1,
            largest: 5,
            cluster: "cluster-b".into(),
            read_as: None,
            oversize: None,
        });
        assert_eq!(
            r.to_string(),
            "pod set node: no rack in any cluster has 8 free slots of 8 h100 GPUs (largest: 5 in cluster cluster-b)"
        );
        // A pod set that would take any of several flavors is not told it waits for one.
        let Reason::NoDomain(mut s) = r.clone() else { unreachable!() };
        (s.flavors, s.gpus_per_pod, s.pods, s.largest) = (3, 1, 1, 0);
        assert_eq!(
            Reason::NoDomain(s).to_string(),
            "pod set node: no rack in any cluster has 1 free slots of 1 GPU of any of the 3 flavors it could run on \
             (largest: 0 of h100 in cluster cluster-b)"
        );
        assert_eq!(r.kind(), "no-domain");
        assert!(!r.is_permanent());
    }
}
