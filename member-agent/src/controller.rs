//! The member agent's shell, pull mode. It watches the hub's Placements for its cluster (by
//! label) and its member's JobSets, and caches the member's Nodes and Pods. It works at two
//! paces. Every wake starts what is placed but not yet there: claimed, rendered (pure
//! [`render`]) and applied with server-side apply, each on its own. Beside that, one *round* at
//! a time deletes what older epochs or withdrawn TrainJobs left (fencing) and reports each
//! Placement's status from its JobSet (the first, Applied or Running, replacing the claim) and
//! the MemberCluster's status (heartbeat, gang scheduler, topology, capacity): a round writing
//! hundreds of statuses never holds back what was just placed, and while realisations are in
//! flight the next round waits for them and a quiet after them (`step::ROUND_QUIET`), at most
//! `step::ROUND_PACE` after the last one started, so rounds do not take the CPU a burst's
//! JobSets need.
//!
//! Two timers guard the fleet's promise that a TrainJob never runs twice and never waits
//! forever: an agent that cannot reach the hub for `hub_lost` deletes the JobSets it made (the
//! dispatcher moves them after its longer grace period), and a gang not running `start_timeout`
//! after its JobSet was made is reported Unschedulable, with the gang scheduler's reason.

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::time::Instant;

use kube_shell::watch::Watches;

use crate::caches::Caches;
use crate::config::{AgentConfig, DEBOUNCE};
use crate::error::Error;
use crate::fence::{fence_all, placed_here};
use crate::report::{Delivered, deliver, heartbeat};
use crate::step::{Action, Loop, Wake};
use crate::work::Work;

/// Runs the agent until dropped: each wake is one [`Loop::step`], whose actions are carried out
/// here; a probe's or fencing's outcome is the next wake at once, everything else is awaited.
pub async fn run(hub: Client, member: Client, cfg: AgentConfig) {
    let mut watches = Watches::new();
    let caches = Caches::start(&hub, &member, &cfg.cluster, &mut watches);
    caches.ready().await;
    cfg.metrics.ready.set();
    let mut agent = Loop::new(cfg.clone(), Instant::now());
    // The virtual Node's Lease, renewed apart from the rounds for as long as this runs.
    let since = Timestamp::now();
    let mut lease = tokio::task::JoinSet::new();
    lease.spawn(crate::lease::keep(hub.clone(), cfg.cluster.clone(), since, cfg.timing.heartbeat));
    let mut work = Work::default();
    let mut rounds: tokio::task::JoinSet<(Result<Delivered, Error>, Instant)> = tokio::task::JoinSet::new();
    let mut wake = Wake::Changed;
    loop {
        let mut until = None;
        let mut next = None;
        tracing::debug!(cluster = %cfg.cluster, ?wake, "wake");
        for action in agent.step(wake, &caches, Instant::now(), Timestamp::now()) {
            match action {
                Action::Realise(placements) => work.add(placements, (&hub, &member, &cfg, &caches)),
                Action::StartRound(round) => {
                    let (hub, member, cfg, caches) = (hub.clone(), member.clone(), cfg.clone(), caches.clone());
                    let limit = agent.round_limit();
                    rounds.spawn(async move {
                        let started = Instant::now();
                        let result = tokio::time::timeout(limit, deliver(hub, member, cfg, caches, *round, since))
                            .await
                            .unwrap_or(Err(Error::Timeout(limit)));
                        (result, started)
                    });
                }
                Action::ProbeHub => {
                    let answered =
                        matches!(tokio::time::timeout(agent.probe_limit(), heartbeat(&hub, &cfg)).await, Ok(Ok(())));
                    next = Some(Wake::Probed { answered });
                }
                Action::Fence => {
                    work.abandon();
                    rounds.abort_all();
                    next = Some(Wake::Fenced(fence_all(&member, &cfg, &caches).await));
                }
                Action::Confirm(fenced) => {
                    let listed = tokio::time::timeout(agent.probe_limit(), placed_here(&hub, &cfg, &fenced)).await;
                    next = Some(Wake::Confirmed(listed.ok().flatten()));
                }
                Action::Wait(t) => until = t,
            }
        }
        if let Some(w) = next {
            wake = w;
            continue;
        }
        wake = tokio::select! {
            Some(w) = work.next(), if !work.running.is_empty() => w,
            Some(done) = rounds.join_next(), if !rounds.is_empty() => {
                // Aborted (hub lost) or panicked: the loop looks again.
                match done {
                    Ok((result, started)) => {
                        cfg.metrics.round_done(&cfg.cluster, started.elapsed().as_secs_f64());
                        Wake::RoundEnded(Some(result))
                    }
                    Err(_) => Wake::RoundEnded(None),
                }
            }
            _ = watches.changed() => {
                tokio::time::sleep(DEBOUNCE).await;
                Wake::Changed
            }
            _ = tokio::time::sleep_until(until.unwrap_or_else(Instant::now)), if until.is_some() => Wake::Timer,
        };
    }
}
