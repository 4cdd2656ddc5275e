//! The Stowage simulator: replays a job trace on a fleet through `scheduler_core::cycle`, one
//! run per policy on injected time, and reports the figures side by side. It reads files
//! only at its edges (fleet file, trace) and never the clock.

pub mod cost;
mod cut;
pub mod engine;
pub mod fleet_file;
pub mod helios;
pub mod machines;
pub mod pending;
pub mod policy;
pub mod report;
pub mod rng;
pub mod run;
mod running;
pub mod sharing;
pub mod svg;
pub mod trace;

pub use engine::{JobRecord, Outcome, PolicyRun, SimError, SimOptions, simulate};
pub use policy::Policy;
