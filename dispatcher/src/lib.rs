//! The hub's dispatcher. This crate so far holds its pure half: translating hub objects
//! (TrainJobs and their runtimes, MemberCluster status) into `scheduler_core` types. The
//! controllers that watch, decide and write Placements build on it.

pub mod translate;
