//! Leader election over a coordination.k8s.io Lease (the `kube-leader-election` crate). Only the
//! leader writes. A leader counts itself leading for half the lease's lifetime after each
//! renewal, so it stops writing well before another replica may take the lease over.

use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use tokio::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    pub namespace: String,
    pub lease: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a lease lasts without renewal; whole seconds.
    pub ttl: Duration,
}

/// Whether this replica leads, as of its last renewal.
#[derive(Debug, Default)]
pub struct Leadership {
    term: Mutex<Term>,
}

#[derive(Debug, Clone, Copy, Default)]
enum Term {
    /// No election: this replica leads for good.
    Always,
    /// Leads until then, if it won the last renewal.
    Until(Instant),
    #[default]
    Follower,
}

impl Leadership {
    /// A replica that always leads: no election (one dispatcher, as in `stowage dev`).
    pub fn always() -> Self {
        Leadership { term: Mutex::new(Term::Always) }
    }

    pub fn is_leading(&self) -> bool {
        match *self.term.lock().unwrap_or_else(|e| e.into_inner()) {
            Term::Always => true,
            Term::Until(t) => Instant::now() < t,
            Term::Follower => false,
        }
    }

    fn set(&self, until: Option<Instant>) {
        *self.term.lock().unwrap_or_else(|e| e.into_inner()) = until.map_or(Term::Follower, Term::Until);
    }
}

/// Campaigns for and renews the lease until dropped, updating `leadership`.
pub async fn campaign(client: Client, cfg: LeaderConfig, leadership: std::sync::Arc<Leadership>) {
    let lock = LeaseLock::new(
        client,
        &cfg.namespace,
        LeaseLockParams { lease_name: cfg.lease.clone(), holder_id: cfg.identity.clone(), lease_ttl: cfg.ttl },
    );
    let every = cfg.ttl / 4;
    loop {
        let asked = Instant::now();
        match lock.try_acquire_or_renew().await {
            Ok(LeaseLockResult::Acquired(_)) => {
                if !leadership.is_leading() {
                    tracing::info!(identity = %cfg.identity, lease = %cfg.lease, "leading");
                }
                leadership.set(Some(asked + cfg.ttl / 2));
            }
            Ok(LeaseLockResult::NotAcquired(_)) => leadership.set(None),
            Err(error) => {
                // Unsure whether we still hold it: stop writing until a renewal succeeds.
                tracing::warn!(%error, "lease renewal failed");
                leadership.set(None);
            }
        }
        tokio::time::sleep(every).await;
    }
}
