//! The hub's dispatcher. This crate so far holds its pure half: `translate` turns hub objects
//! (TrainJobs with their runtimes, MemberCluster status) into `scheduler_core` types, and
//! `plan` turns the core's decisions into what the dispatcher writes (Placement specs, the
//! pending condition). The controllers that watch, decide and write build on these.

pub mod controller;
pub mod decide;
pub mod plan;
pub mod translate;
