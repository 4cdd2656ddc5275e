//! The member agent: pulls what the hub placed on its cluster, renders it, applies it, and
//! reports back. `render` is its pure half — TrainJob + runtime + Placement + member
//! capabilities in, Kubernetes objects out — with no client and no clock.

pub mod capacity;
pub mod controller;
pub mod manifest;
pub mod metrics;
pub mod render;
pub mod sshkey;
pub mod watch;
