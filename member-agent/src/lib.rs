//! The member agent: pulls what the hub placed on its cluster, renders it (with
//! `trainer-render`, the pure half), applies it, and reports back. It must not depend on the
//! dispatcher: hub and agent are peers that meet only in hub objects (`api`).

pub mod capacity;
pub mod controller;
pub mod metrics;
