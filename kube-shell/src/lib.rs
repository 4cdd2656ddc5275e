//! What every controller shell of Stowage needs and none of them should write twice: watches
//! that keep caches and wake the controller ([`watch`]), the back-off after a failed round
//! ([`backoff`]), and the `/healthz`, `/readyz`, `/metrics` endpoint ([`health`]).
//!
//! No Stowage types and no decisions live here: the dispatcher and the agent are peers that both
//! sit on this crate; neither depends on the other.

pub mod backoff;
pub mod health;
pub mod watch;
