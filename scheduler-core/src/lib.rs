//! The scheduling core of Stowage: fleet and topology model, gangs, queues and quota, placement
//! and the typed reasons for every decision. Pure and deterministic: no I/O, no async, no
//! Kubernetes types, no clock, no hash-order dependence. The dispatcher and the simulator both
//! translate into these types and call [`cycle`]; what is decided here is what runs.
//!
//! Modules import downward only (but `fleet` and `capacity`, which name each other's types:
//! a fleet keeps its empty capacity), in this order: `draw`, `topology`, `nodes`, `fleet` / `capacity`, `gang`,
//! `queue`, `reason`, `place`, `config`, `decision`, `snapshot`, `memo`, `txn`, `run` (one gang
//! on the cycle's transaction), `preempt`, `reserve`, `order`, `batch`, `cycle`, `project` (cycles run forward: when a gang
//! is expected to start); `invariants`,
//! `share` and `fixture` stand beside. `tests/crate_graph.rs` in the workspace checks it.

pub mod batch;
pub mod capacity;
pub mod config;
pub mod cycle;
pub mod decision;
pub mod draw;
pub mod fixture;
pub mod fleet;
pub mod gang;
pub mod invariants;
pub mod locality;
mod memo;
pub mod nodes;
pub mod order;
pub mod place;
pub mod preempt;
pub mod project;
pub mod queue;
pub mod reason;
mod reserve;
mod run;
pub mod share;
pub mod snapshot;
pub mod topology;
mod txn;

pub use batch::{BatchReport, Rejected};
pub use capacity::{Capacity, PodShape};
pub use config::{
    Batch, ClusterChoice, Config, Patience, Preemption, Reservations, ShortFirst, Slowdown, Solver, Victims,
    mean_wait_ms,
};
pub use cycle::{Cycle, cycle};
pub use decision::{Admission, CycleStats, Decision, Rank, gang_charges, release};
pub use fleet::{ClusterId, Domain, DomainId, FlavorId, Fleet, FleetBuilder, FleetError, LevelInfo, NodeInput};
pub use gang::{ClusterFilter, Gang, GangError, GangId, PodSet, Slice};
pub use nodes::{
    LabelMatch, MatchOperator, NodeClass, NodeRequirement, Taint, TaintEffect, Toleration, TolerationOperator,
};
pub use order::{lanes_per_queue, order_ms};
pub use place::{Fill, PodSetPlacement};
pub use queue::{
    BorrowWithinCohort, NominalQuota, QueueId, QueuePreemption, QueueSpec, QueueingStrategy, Queues, Quota, QuotaUsage,
    ReclaimWithinCohort, Resource, WithinQueue,
};
pub use reason::{HoldCost, Oversize, Reason, Shortfall};
pub use reserve::may_backfill;
pub use snapshot::{Release, Reserved, Running, Snapshot};
pub use topology::{Level, TopologyConstraint};
