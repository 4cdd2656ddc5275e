//! The scheduling core of Stowage: fleet and topology model, gangs, queues and quota, placement
//! and the typed reasons for every decision. Pure and deterministic: no I/O, no async, no
//! Kubernetes types, no clock, no hash-order dependence. The dispatcher and the simulator both
//! translate into these types and call [`cycle`]; what is decided here is what runs.

pub mod batch;
pub mod capacity;
pub mod cycle;
pub mod fair;
pub mod fixture;
pub mod fleet;
pub mod gang;
pub mod invariants;
pub mod place;
pub mod preempt;
pub mod queue;
pub mod reason;
pub mod share;
pub mod topology;

pub use batch::{Batch, BatchReport, Solver};
pub use capacity::{Capacity, PodShape};
pub use cycle::{Admission, ClusterChoice, Config, Cycle, Decision, Patience, Release, Snapshot, cycle, release};
pub use fleet::{ClusterId, DomainId, FlavorId, Fleet, FleetBuilder, FleetError, LevelInfo, NodeInput};
pub use gang::{ClusterFilter, Gang, GangError, PodSet, Slice};
pub use place::{Fill, PodSetPlacement};
pub use preempt::{BorrowWithinCohort, Preemption, QueuePreemption, ReclaimWithinCohort, Running, WithinQueue};
pub use queue::{QueueSpec, QueueingStrategy, Queues, Quota, QuotaUsage, Resource};
pub use reason::{Reason, Shortfall};
pub use topology::{Level, TopologyConstraint};
