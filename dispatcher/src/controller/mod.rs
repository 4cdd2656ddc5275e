//! The dispatcher's shell: watch the hub (`hub`: its kinds grouped by who defines them), call
//! [`decide`](crate::decide::decide), write (`writes`): `run`, `cycle` and `apply` here.
//!
//! Reflectors keep caches of the kinds it reads (Trainer's, Stowage's, and Kueue's where the hub
//! serves them). Any change (or the resync tick, which drives time-based decisions such as a
//! member's grace period) wakes a cycle. It keeps nothing between cycles but its memory
//! (`hub`'s `memory`): the writes its caches have not caught up with yet, since when each
//! placement reported Running has gone uncounted, and its nominations' times, so a
//! restart or a new leader rebuilds everything from hub objects (and waits a grace period
//! before calling such a placement lost). Placement writes are conditional (create, or replace
//! at the observed resourceVersion), so a deposed leader racing a new one cannot leave two
//! answers. Failed cycles back off exponentially.

mod hub;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use api::stowage::Placement;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube_shell::backoff::Backoff;
use kube_shell::events::Recorder;
use kube_shell::watch::Watches;

use hub::Written;
pub use hub::observe_once;
use writes::{record_of, write_member_conditions, write_nomination, write_placement, write_queue_status, write_status};

use crate::decide::events;
use crate::decide::{Observed, PlacementWrite, Plan, Settings, StatusWrite, decide};
use crate::leader::{self, LeaderConfig, Leadership};
use crate::metrics::Metrics;

pub const FIELD_MANAGER: &str = "stowage-dispatcher";
/// How long a burst of watch events may land before a cycle decides on them: a cycle costs a
/// snapshot of the whole fleet, so it waits longer than the agent does.
const DEBOUNCE: Duration = Duration::from_millis(20);

#[derive(Debug, Clone)]
pub struct Options {
    pub config: scheduler_core::Config,
    pub settings: Settings,
    /// Elect a leader over this Lease; `None`: this replica always leads.
    pub leader: Option<LeaderConfig>,
    /// A cycle runs at least this often even when nothing changes.
    pub resync: Duration,
    pub metrics: Metrics,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config: scheduler_core::Config::stowage(),
            settings: Settings::default(),
            leader: None,
            resync: Duration::from_secs(1),
            metrics: Metrics::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing {what} {namespace}/{name}")]
    Write {
        what: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// A stable name for the kind of failure: a metric label, never a message.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Write { source, .. } => kube_shell::metrics::api_error_kind(source),
        }
    }
}

/// Writes in flight at once: a burst of TrainJobs is placed in one cycle, and its writes should
/// not queue behind each other's round trips.
const CONCURRENT_WRITES: usize = 16;

/// Events waiting to be written before a cycle waits for room: a few large bursts' worth (a
/// cycle records about one per TrainJob it places).
const EVENTS_QUEUED: usize = 4096;

/// Writes the plan. A conflict means someone else (another leader, an agent's status write)
/// changed the Placement since it was observed: skip it, the next cycle sees the change.
async fn apply(
    hub: &Client,
    plan: &Plan,
    written: &mut Written,
    metrics: &Metrics,
    recorder: &Recorder,
) -> Result<(), Error> {
    // Owned items: a stream of borrowed ones trips the compiler's higher-ranked lifetime check
    // inside the spawned controller future.
    let placed: Vec<(PlacementWrite, Result<Option<Placement>, Error>)> =
        futures::stream::iter(plan.placements.clone())
            .map(|w| {
                let hub = hub.clone();
                async move {
                    let r = write_placement(&hub, &w).await;
                    (w, r)
                }
            })
            .buffer_unordered(CONCURRENT_WRITES)
            .collect()
            .await;
    let mut first_error = None;
    let mut events = Vec::new();
    for (w, result) in placed {
        match result {
            Ok(Some(p)) => {
                events.extend(events::of_placement(&w));
                metrics.written(w.effect.placed.as_ref(), w.effect.redispatch.as_ref().map(|m| m.reason));
                if let Some(placed) = &w.effect.placed {
                    // Once per decision, and only for one that was made.
                    tracing::info!(
                        trainjob = %format!("{}/{}", w.namespace, w.name),
                        cluster = %placed.cluster,
                        locality = placed.locality.map_or("cluster", |l| l.as_str()),
                        epoch = w.spec.epoch,
                        // Why it left the member it was on, if it was on one.
                        moved = w.effect.redispatch.as_ref().map_or("-", |m| m.reason.as_str()),
                        "placed"
                    );
                }
                written.placed(&w, p);
            }
            Ok(None) => {}
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    let statuses: Vec<(StatusWrite, Result<(), Error>)> = futures::stream::iter(plan.statuses.clone())
        .map(|s| {
            let hub = hub.clone();
            async move {
                let r = write_status(&hub, &s).await;
                (s, r)
            }
        })
        .buffer_unordered(CONCURRENT_WRITES)
        .collect()
        .await;
    for (s, result) in statuses {
        match result {
            Ok(()) => {
                // Once per reason a TrainJob comes to wait for, as its Pending Event.
                for e in s.events.iter().filter(|e| e.reason == events::EventReason::Pending) {
                    tracing::info!(trainjob = %format!("{}/{}", e.namespace, e.object), why = %e.message, "waiting");
                }
                events.extend(s.events);
                written.status_written((s.namespace, s.name), s.conditions, s.jobs);
            }
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    // A few Queues and refused members at most: written one after another.
    for q in &plan.queues {
        if let Err(e) = write_queue_status(hub, q).await {
            first_error = first_error.or(Some(e));
        }
    }
    for m in &plan.members {
        if let Err(e) = write_member_conditions(hub, m).await {
            first_error = first_error.or(Some(e));
        }
    }
    for n in &plan.nominations {
        match write_nomination(hub, n).await {
            Ok(Some(w)) => {
                let workload = format!("{}/{}", n.namespace, n.name);
                match n.clusters.first() {
                    Some(cluster) => tracing::info!(%workload, %cluster, "nominated"),
                    None => tracing::info!(%workload, "nomination withdrawn"),
                }
                written.nominated(n, w);
            }
            Ok(None) => {}
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    let records = events.into_iter().chain(plan.workload_events.iter().cloned()).map(record_of);
    recorder.record(records).await;
    first_error.map_or(Ok(()), Err)
}

/// One cycle over an observed hub: decide and write.
#[tracing::instrument(skip_all, fields(trainjobs = observed.trainjobs.len()))]
async fn cycle(
    hub: &Client,
    observed: &Observed,
    opts: &Options,
    written: &mut Written,
    recorder: &Recorder,
) -> Result<Plan, Error> {
    let started = std::time::Instant::now();
    let mut plan = decide(observed, &opts.config, &opts.settings, Time(k8s_openapi::jiff::Timestamp::now()));
    written.remember(&mut plan);
    let result = apply(hub, &plan, written, &opts.metrics, recorder).await;
    opts.metrics.cycles.inc();
    opts.metrics.cycle_duration.observe(started.elapsed().as_secs_f64());
    opts.metrics.show(&plan.figures);
    if let Some(b) = &plan.batch {
        opts.metrics.batch_solves.inc();
        opts.metrics.solver_gap.set(b.gap().unwrap_or(0.0));
        if b.kept_ilp {
            opts.metrics.batch_kept.inc();
        }
    }
    tracing::debug!(
        placements = plan.placements.len(),
        statuses = plan.statuses.len(),
        pending = plan.pending,
        "cycle"
    );
    result.map(|()| plan)
}

/// Runs until dropped: campaigns for leadership if configured, and while leading runs a cycle on
/// every change or resync tick. Errors are logged and retried with exponential back-off.
pub async fn run(hub: Client, opts: Options) {
    let leadership = Arc::new(match &opts.leader {
        Some(_) => Leadership::default(),
        None => Leadership::always(),
    });
    let mut watches = Watches::new();
    let mut view = hub::View::watch(&hub, &mut watches, opts.settings.kueue).await;
    let mut campaign = tokio::task::JoinSet::new();
    if let Some(cfg) = opts.leader.clone() {
        campaign.spawn(leader::campaign(hub.clone(), cfg, leadership.clone()));
    }
    view.ready().await;
    opts.metrics.ready.set();
    let mut written = Written::default();
    // A cycle's Events are written beside the next cycle (`Recorder`), not before it starts.
    let recorder = Recorder::spawn(hub.clone(), CONCURRENT_WRITES, EVENTS_QUEUED);
    let mut backoff = Backoff::default();
    loop {
        tokio::select! {
            _ = watches.changed() => {}
            _ = tokio::time::sleep(opts.resync) => {}
        }
        tokio::time::sleep(DEBOUNCE).await;
        opts.metrics.leader.set(i64::from(leadership.is_leading()));
        if !leadership.is_leading() {
            written = Written::default();
            // The leader's figures are the fleet's; a follower shows none.
            opts.metrics.show(&crate::decide::figures::Figures::default());
            continue;
        }
        view.grow(&hub, &mut watches, opts.settings.kueue).await;
        let mut observed = view.snapshot();
        written.overlay(&mut observed);
        match cycle(&hub, &observed, &opts, &mut written, &recorder).await {
            Ok(_) => backoff.succeed(),
            Err(error) => {
                opts.metrics.reconcile_error(error.kind());
                let retry_in = backoff.fail();
                tracing::warn!(error = %kube_shell::error_chain(&error), kind = error.kind(), ?retry_in, "dispatcher cycle failed");
                tokio::time::sleep(retry_in).await;
                watches.poke();
            }
        }
    }
}
