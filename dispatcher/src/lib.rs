//! The hub's dispatcher. Its pure half: `translate` turns hub objects (TrainJobs with their
//! runtimes, Kueue's Workloads, MemberCluster status) into `scheduler_core` types, `decide` runs one cycle over what was observed, and `plan` turns the core's decisions
//! into Placements and conditions. Its shell: `controller` watches the hub, decides and writes
//! while `leader` says it leads; `metrics` counts what it does. Beside it, `webhook` serves
//! Trainer's TrainJob admission (`stowage webhook`) to a real hub's API server.

pub mod controller;
pub mod decide;
pub mod leader;
pub mod metrics;
pub mod plan;
pub mod translate;
pub mod webhook;
