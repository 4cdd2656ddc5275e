//! What every controller shell of Stowage needs and none of them should write twice: watches
//! that keep caches and wake the controller ([`watch`]), the back-off after a failed round
//! ([`backoff`]), Events counted as kubectl shows them ([`events`]), the `/healthz`, `/readyz`, `/metrics` endpoint ([`health`]), the metrics
//! every controller shares ([`metrics`]), the HTTP(S) endpoints the cluster calls ([`serve`]) and
//! the accept loop under limits that every server of Stowage uses ([`listen`]).
//!
//! No Stowage types and no decisions live here: the dispatcher and the agent are peers that both
//! sit on this crate; neither depends on the other.

pub mod backoff;
pub mod events;
pub mod health;
pub mod lean;
pub mod listen;
pub mod metrics;
pub mod serve;
pub mod watch;

/// An error and every cause under it, `outer: inner: …`: how a controller logs a failure, so
/// each error's own message says only what it adds.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("reading TrainJob a/b")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_chain_prints_each_cause_once() {
        let e = Outer(std::io::Error::other("connection refused"));
        assert_eq!(super::error_chain(&e), "reading TrainJob a/b: connection refused");
    }
}
