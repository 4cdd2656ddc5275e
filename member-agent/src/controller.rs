//! The member agent's shell, pull mode. It watches the hub's Placements for its cluster (by
//! label) and its member's JobSets, and caches the member's Nodes and Pods. It works at two
//! paces. Every wake starts what is placed but not yet there: rendered (pure [`render`]),
//! applied with server-side apply and reported Applied, each on its own. Beside that, one
//! *round* at a time deletes what older epochs or withdrawn TrainJobs left (fencing) and
//! reports each Placement's status from its JobSet and the MemberCluster's status (heartbeat,
//! gang scheduler, topology, capacity): a round writing hundreds of statuses never holds back
//! what was just placed.
//!
//! Two timers guard the fleet's promise that a TrainJob never runs twice and never waits
//! forever: an agent that cannot reach the hub for `hub_lost` deletes the JobSets it made (the
//! dispatcher moves them after its longer grace period), and a gang not running `start_timeout`
//! after its JobSet was made is reported Unschedulable, with the gang scheduler's reason.

use std::time::Duration;

use kube::Client;
use tokio::time::Instant;

use kube_shell::backoff::Backoff;
use kube_shell::watch::Watches;

use crate::caches::Caches;
use crate::config::{AgentConfig, DEBOUNCE};
use crate::error::Error;
use crate::fence::fence_all;
use crate::report::{Delivered, deliver, heartbeat};
use crate::survey::{State, survey};
use crate::work::Work;

/// Wakes on every change, finished round, heartbeat and retry, until dropped. Every wake starts
/// what was just placed and, unless a round is running, a round for whatever else differs if
/// something changed since the last one started (a round's end is a wake, so nothing seen
/// meanwhile is missed). A failed round is retried with exponential back-off.
pub async fn run(hub: Client, member: Client, cfg: AgentConfig) {
    let mut watches = Watches::new();
    let caches = Caches::start(&hub, &member, &cfg.cluster, &mut watches);
    caches.ready().await;
    let mut state = State::default();
    let mut work = Work::default();
    let mut rounds: tokio::task::JoinSet<(Result<Delivered, Error>, Instant)> = tokio::task::JoinSet::new();
    let (mut backoff, mut retry_at) = (Backoff::default(), Instant::now());
    // A change since the last round started: only then (or for a heartbeat) does another run.
    // A round's own writes reach the caches a moment after it ends, so a look taken then would
    // find them still to do and run it again.
    let mut changed = true;
    loop {
        let heartbeat_due = state.last_report.is_none_or(|t| t.elapsed() >= cfg.timing.heartbeat);
        let may_start = rounds.is_empty() && Instant::now() >= retry_at;
        let survey =
            survey(&cfg, &caches, &mut state, may_start.then_some(heartbeat_due), k8s_openapi::jiff::Timestamp::now());
        work.add(&mut state, survey.realise, (&hub, &member, &cfg, &caches));
        if may_start && (changed || heartbeat_due) && !survey.round.is_empty() {
            changed = false;
            let (hub, member, cfg, caches) = (hub.clone(), member.clone(), cfg.clone(), caches.clone());
            rounds.spawn(async move {
                let started = Instant::now();
                // A request stuck in the client's own retries must not starve the hub-lost check.
                let limit = cfg.timing.hub_lost;
                let result = tokio::time::timeout(limit, deliver(hub, member, cfg, caches, survey.round))
                    .await
                    .unwrap_or(Err(Error::Timeout(limit)));
                (result, started)
            });
        }
        // Probe the hub apart from the rounds: one that is merely slow (hundreds of statuses)
        // must not look like a lost hub.
        if state.last_hub_contact.elapsed() >= cfg.timing.heartbeat
            && let Ok(Ok(())) =
                tokio::time::timeout(cfg.timing.heartbeat.max(Duration::from_secs(2)), heartbeat(&hub, &cfg)).await
        {
            state.last_hub_contact = Instant::now();
        }
        if state.last_hub_contact.elapsed() >= cfg.timing.hub_lost {
            work.abandon(&mut state);
            rounds.abort_all();
            if let Err(error) = fence_all(&member, &cfg, &caches, &mut state).await {
                tracing::warn!(error = %kube_shell::error_chain(&error), kind = error.kind(), "fencing failed");
            }
        }
        // A running round wakes the loop when it ends; otherwise the next heartbeat or retry.
        let next = match (rounds.is_empty(), !backoff.is_waiting()) {
            (false, _) => None,
            (true, true) => Some(state.last_report.map_or(Instant::now(), |t| t + cfg.timing.heartbeat)),
            (true, false) => Some(retry_at),
        };
        loop {
            tokio::select! {
                // Realisations that finish make room for queued ones; nothing to survey.
                Some(done) = work.running.join_next(), if !work.running.is_empty() => {
                    match done {
                        Ok(done) => Work::finished(&mut state, &cfg, done),
                        // Cancelled is how `abandon` stops them; only a panic is news.
                        Err(error) if error.is_panic() => tracing::error!(%error, "a realisation task panicked"),
                        Err(_) => {}
                    }
                    continue;
                }
                Some(done) = rounds.join_next(), if !rounds.is_empty() => {
                    // Aborted (hub lost) or panicked: the loop looks again.
                    let Ok((result, started)) = done else { break };
                    cfg.metrics.syncs.inc();
                    cfg.metrics.sync_seconds.observe(started.elapsed().as_secs_f64());
                    match result {
                        Ok(d) => {
                            backoff.succeed();
                            if d.reported {
                                state.last_report = Some(Instant::now());
                                state.last_hub_contact = Instant::now();
                            }
                            for key in d.cleaned {
                                state.fenced.remove(&key);
                            }
                        }
                        Err(error) => {
                            cfg.metrics.sync_errors.inc();
                            let retry_in = backoff.fail();
                            retry_at = Instant::now() + retry_in;
                            changed = true;
                            tracing::warn!(error = %kube_shell::error_chain(&error), kind = error.kind(), cluster = %cfg.cluster, ?retry_in, "agent round failed");
                        }
                    }
                }
                _ = watches.changed() => {
                    changed = true;
                    tokio::time::sleep(DEBOUNCE).await;
                }
                _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {}
            }
            break;
        }
    }
}
