//! The member agent: pulls what the hub placed on its cluster, renders it (with
//! `trainer-render`, the pure half), applies it, and reports back. It must not depend on the
//! dispatcher: hub and agent are peers that meet only in hub objects (`api`).

pub mod caches;
pub mod capacity;
pub mod config;
pub mod controller;
mod error;
mod fence;
pub mod lease;
pub mod logs;
pub mod metrics;
pub mod mirror;
mod objects;
mod realise;
pub mod relay;
mod report;
mod status;
mod step;
mod survey;
#[cfg(test)]
mod testkit;
mod work;

pub use config::{AgentConfig, Timing};
pub use error::Error;
