//! The agent's loop as a state machine: [`Loop::step`] takes what woke the agent and returns
//! what to do, with no I/O and no clock of its own (the time is an argument). The shell
//! (`controller::run`) carries the actions out and feeds their outcomes back as the next wake.
//!
//! Each wake starts what was just placed and, unless a round is running, a round for whatever
//! else differs, if something changed since the last one started (a round's end is a wake, so
//! nothing seen meanwhile is missed). The hub is probed apart from the rounds, so a round that
//! is merely slow never looks like a lost hub; lost for `hub_lost`, everything is fenced. Once
//! the hub answers again, one fresh list of this member's Placements says which of the fenced
//! are still placed here, and those are made again at once: a hub that was only slow keeps its
//! watches open, so waiting for a relist could wait forever. A failed round is retried with
//! exponential back-off.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use api::stowage::Placement;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use kube_shell::backoff::{self, Backoff};

use crate::caches::{Caches, Key};
use crate::config::AgentConfig;
use crate::error::Error;
use crate::fence::Fenced;
use crate::report::Delivered;
use crate::survey::{Reach, Round, State, finished, survey};

/// While realisations are in flight, a round starts at most this often. In a burst, rounds
/// back to back (each surveying every placement, then writing statuses, pod copies and Events
/// to the hub) took the CPU the burst's JobSets were waiting for; the statuses a round writes
/// are at most this late instead (docs/performance.md, "2026-12-05 (late night)").
pub(crate) const ROUND_PACE: Duration = Duration::from_secs(1);

/// Once the last realisation in flight ends, a round held back by the pace waits this much
/// longer for the next to start (never past the pace). A burst reaches an agent in waves, one
/// per dispatcher cycle; a round started in the gap between two surveyed and wrote (Applied
/// statuses, pod copies, Events) beside the next wave's realisations, and wrote again, Running,
/// moments later (docs/performance.md, "2026-12-05 (waves)").
pub(crate) const ROUND_QUIET: Duration = Duration::from_millis(250);

/// What woke the agent.
#[derive(Debug)]
pub(crate) enum Wake {
    /// A watch saw a change (the agent's first wake is one too).
    Changed,
    /// The time the last step asked to sleep until has come.
    Timer,
    /// A realisation ended: the placement's JobSet and companions applied and its status
    /// written, or not.
    Realised { key: Key, placement: String, result: Result<(), Error> },
    /// The round ended; `None` when it was aborted or panicked.
    RoundEnded(Option<Result<Delivered, Error>>),
    /// The hub answered the probe, or not.
    Probed { answered: bool },
    /// Fencing for a lost hub ended.
    Fenced(Fenced),
    /// The fenced placements still placed here, from a fresh list taken after the hub answered
    /// again; `None` when the list failed.
    Confirmed(Option<Vec<Arc<Placement>>>),
}

/// What the shell does for a step, in order.
#[derive(Debug)]
pub(crate) enum Action {
    /// Render and apply each, and report it Applied (each ends in a `Wake::Realised`).
    Realise(Vec<Arc<Placement>>),
    /// Report and clean up (ends in a `Wake::RoundEnded`).
    StartRound(Box<Round>),
    /// Write the heartbeat alone, bounded in time (answered by a `Wake::Probed`).
    ProbeHub,
    /// The hub is lost: stop every realisation and round, and delete every live JobSet this
    /// agent made (answered by a `Wake::Fenced`).
    Fence,
    /// List this member's Placements afresh for those of these fenced keys still placed here,
    /// bounded in time (answered by a `Wake::Confirmed`).
    Confirm(BTreeSet<Key>),
    /// Wait for the next event, or until this time when there is one.
    Wait(Option<Instant>),
}

#[derive(Debug)]
pub(crate) struct Loop {
    cfg: AgentConfig,
    pub(crate) state: State,
    backoff: Backoff,
    retry_at: Instant,
    /// A change since the last round started: only then (or for a heartbeat) does another run.
    /// A round's own writes reach the caches a moment after it ends, so a look taken then
    /// would find them still to do and run it again.
    changed: bool,
    round_running: bool,
    /// When the last round started: while realisations are in flight, the next waits
    /// [`ROUND_PACE`] after it.
    round_started: Option<Instant>,
    /// When the last realisation ended: the next round waits [`ROUND_QUIET`] after it.
    last_realised: Option<Instant>,
    /// When the hub was last probed: while it does not answer, it is probed again only after
    /// `probe_interval`, not on every wake.
    last_probe: Option<Instant>,
    /// When the fenced placements were last confirmed (or a confirmation tried): a failed one
    /// is tried again only after `probe_interval`.
    last_confirm: Option<Instant>,
    /// Per placement whose realisation failed: its back-off and when it may be tried again, so
    /// one that keeps failing (its hub out of reach) is not tried again on every wake.
    realise_retry: BTreeMap<Key, (Backoff, Instant)>,
}

impl Loop {
    pub(crate) fn new(cfg: AgentConfig, now: Instant) -> Self {
        Loop {
            cfg,
            state: State::new(now),
            backoff: Backoff::default(),
            retry_at: now,
            changed: true,
            round_running: false,
            round_started: None,
            last_realised: None,
            last_probe: None,
            last_confirm: None,
            realise_retry: BTreeMap::new(),
        }
    }

    pub(crate) fn step(&mut self, wake: Wake, caches: &Caches, now: Instant, wall: Timestamp) -> Vec<Action> {
        match wake {
            Wake::Changed => self.changed = true,
            Wake::Timer => {}
            Wake::Realised { key, placement, result } => {
                self.realised(key, &placement, result, now);
                // Room for queued realisations; nothing new to survey, unless a round waits
                // for the last of them (and then for the quiet after it).
                if !self.state.in_flight.is_empty() || !self.changed || self.round_running {
                    return vec![self.wait(now)];
                }
            }
            Wake::RoundEnded(ended) => {
                self.round_running = false;
                if let Some(result) = ended {
                    self.round_ended(result, now);
                }
            }
            Wake::Probed { answered } => {
                if answered {
                    self.state.last_hub_contact = now;
                }
                return self.after_probe(now);
            }
            Wake::Fenced(Fenced { deleted, error }) => {
                for (key, ns) in deleted {
                    self.state.fenced.insert(key, ns);
                    self.state.fenced_at = Some(now);
                }
                if let Some(error) = error {
                    tracing::warn!(error = %kube_shell::error_chain(&error), kind = error.kind(), "fencing failed");
                }
                return vec![self.wait(now)];
            }
            Wake::Confirmed(listed) => return self.confirmed(listed, now),
        }
        let heartbeat_due = self.state.last_report.is_none_or(|t| now.duration_since(t) >= self.cfg.timing.heartbeat);
        let may_start = !self.round_running && now >= self.retry_at && self.paced_until(now).is_none();
        let reach = match (may_start, heartbeat_due) {
            (false, _) => Reach::Starts,
            (true, false) => Reach::Round,
            (true, true) => Reach::Heartbeat,
        };
        let mut survey = survey(&self.cfg, caches, &mut self.state, reach, wall);
        // Fenced and not confirmed since: the caches may be what the hub-lost time left, with
        // placements the dispatcher has moved on meanwhile. Nothing new starts from them.
        if self.suspect() {
            survey.realise.clear();
        }
        // Back-offs long over belong to placements gone or made since.
        self.realise_retry.retain(|_, (_, at)| now < *at + backoff::MAX);
        survey.realise.retain(|p| {
            let key = Key::of(p);
            self.realise_retry.get(&key).is_none_or(|(_, at)| now >= *at)
        });
        let mut actions = Vec::new();
        if !survey.realise.is_empty() {
            for p in &survey.realise {
                self.state.in_flight.insert(Key::of(p));
            }
            actions.push(Action::Realise(survey.realise));
        }
        if may_start && (self.changed || heartbeat_due) && !survey.round.is_empty() {
            self.changed = false;
            self.round_running = true;
            self.round_started = Some(now);
            actions.push(Action::StartRound(Box::new(survey.round)));
        }
        if self.probe_due(now) {
            self.last_probe = Some(now);
            actions.push(Action::ProbeHub);
            return actions;
        }
        actions.extend(self.after_probe(now));
        actions
    }

    /// Fenced for a lost hub and not confirmed since.
    fn suspect(&self) -> bool {
        self.state.fenced_at.is_some_and(|f| self.state.confirmed_at.is_none_or(|c| c < f))
    }

    /// Suspect, the hub heard from since the fence, and no confirmation tried in the last probe
    /// interval.
    fn confirm_due(&self, now: Instant) -> bool {
        self.suspect()
            && self.state.fenced_at.is_some_and(|f| self.state.last_hub_contact > f)
            && self.last_confirm.is_none_or(|t| now.duration_since(t) >= self.probe_interval())
    }

    /// What a fresh list says of the fenced placements: each still placed here at the epoch
    /// fenced is made again now, from the listed object. The others go when the caches see them
    /// gone (a round cleans their companions).
    fn confirmed(&mut self, listed: Option<Vec<Arc<Placement>>>, now: Instant) -> Vec<Action> {
        self.last_confirm = Some(now);
        let Some(listed) = listed else {
            return vec![self.wait(now)];
        };
        self.state.last_hub_contact = now;
        self.state.confirmed_at = Some(now);
        let again: Vec<Arc<Placement>> = listed
            .into_iter()
            .filter(|p| p.spec.cluster.as_deref() == Some(self.cfg.cluster.as_str()))
            .filter(|p| {
                let key = Key::of(p);
                self.state.fenced.contains_key(&key) && !self.state.in_flight.contains(&key) && !finished(p)
            })
            .collect();
        tracing::info!(cluster = %self.cfg.cluster, again = again.len(), fenced = self.state.fenced.len(), "hub back: making again what is still placed here");
        let mut actions = Vec::new();
        if !again.is_empty() {
            for p in &again {
                self.state.in_flight.insert(Key::of(p));
            }
            actions.push(Action::Realise(again));
        }
        actions.push(self.wait(now));
        actions
    }

    /// The hub has not been heard from for a heartbeat, and was not probed in the last probe
    /// interval.
    fn probe_due(&self, now: Instant) -> bool {
        now.duration_since(self.state.last_hub_contact) >= self.cfg.timing.heartbeat
            && self.last_probe.is_none_or(|t| now.duration_since(t) >= self.probe_interval())
    }

    /// How often an unanswering hub is probed: a quarter of a heartbeat.
    fn probe_interval(&self) -> Duration {
        self.cfg.timing.heartbeat / 4
    }

    /// How long the probe may take: a heartbeat, and never under two seconds.
    pub(crate) fn probe_limit(&self) -> Duration {
        self.cfg.timing.heartbeat.max(Duration::from_secs(2))
    }

    /// The longest a round may take: a request stuck in the client's own retries must not
    /// starve the hub-lost check.
    pub(crate) fn round_limit(&self) -> Duration {
        self.cfg.timing.hub_lost
    }

    /// Fences when the hub has been out of reach too long; confirms what was fenced once it
    /// answers again; then waits.
    fn after_probe(&mut self, now: Instant) -> Vec<Action> {
        if now.duration_since(self.state.last_hub_contact) >= self.cfg.timing.hub_lost {
            // Nothing queued or running may finish behind the fence.
            self.state.in_flight.clear();
            self.round_running = false;
            return vec![Action::Fence];
        }
        if self.confirm_due(now) {
            self.last_confirm = Some(now);
            return vec![Action::Confirm(self.state.fenced.keys().cloned().collect())];
        }
        vec![self.wait(now)]
    }

    /// When a round held back by realisations in flight ([`ROUND_PACE`]), or just ended
    /// ([`ROUND_QUIET`]), may start; `None` when none is held back. Making what was placed
    /// comes before reporting on it, so a burst's JobSets are not queued behind its reports.
    fn paced_until(&self, now: Instant) -> Option<Instant> {
        let pace = self.round_started? + ROUND_PACE;
        let until = match self.state.in_flight.is_empty() {
            true => pace.min(self.last_realised? + ROUND_QUIET),
            false => pace,
        };
        (now < until).then_some(until)
    }

    /// A running round wakes the loop when it ends; otherwise the next heartbeat or retry, and
    /// a change held back by the pace when the pace is up (the last realisation ending wakes
    /// it sooner).
    fn wait(&self, now: Instant) -> Action {
        let until = match (self.round_running, self.backoff.is_waiting()) {
            (true, _) => None,
            (false, false) => {
                let heartbeat = self.state.last_report.map_or(now, |t| t + self.cfg.timing.heartbeat);
                Some(match self.paced_until(now) {
                    Some(paced) if self.changed => paced,
                    Some(paced) => heartbeat.max(paced),
                    None => heartbeat,
                })
            }
            (false, true) => Some(self.paced_until(now).map_or(self.retry_at, |p| p.max(self.retry_at))),
        };
        // An unanswering hub is probed again when the interval is up, whatever else waits.
        let stale = now.duration_since(self.state.last_hub_contact) >= self.cfg.timing.heartbeat;
        let probe = self.last_probe.filter(|_| stale).map(|t| (t + self.probe_interval()).max(now));
        // A realisation backing off is tried again when its time comes.
        let retry = self.realise_retry.values().map(|(_, at)| (*at).max(now)).min();
        Action::Wait([until.map(|u| u.max(now)), probe, retry].into_iter().flatten().min())
    }

    fn realised(&mut self, key: Key, placement: &str, result: Result<(), Error>, now: Instant) {
        self.state.in_flight.remove(&key);
        self.last_realised = Some(now);
        match result {
            Ok(()) => {
                self.realise_retry.remove(&key);
                self.cfg.metrics.count_realised(&self.cfg.cluster);
                self.state.fenced.remove(&key);
                self.state.applied.insert(key);
            }
            // Neither applied nor in flight: started again once its back-off is over; one
            // fenced for a lost hub is confirmed again first.
            Err(error) => {
                let (backoff, at) = self.realise_retry.entry(key.clone()).or_insert((Backoff::default(), now));
                *at = now + backoff.fail();
                if self.state.fenced.contains_key(&key) {
                    self.state.confirmed_at = None;
                }
                tracing::warn!(error = %kube_shell::error_chain(&error), kind = error.kind(), %placement, "realising failed")
            }
        }
    }

    fn round_ended(&mut self, result: Result<Delivered, Error>, now: Instant) {
        match result {
            Ok(d) => {
                self.backoff.succeed();
                // Only the heartbeat's report puts the next one off: a burst's capacity reports,
                // round after round, would put it off for as long as the burst lasts, and with it
                // the pods' answers why a gang waits, the gang scheduler and `bound`.
                if d.heartbeat {
                    self.state.last_report = Some(now);
                }
                if d.capacity.is_some() {
                    self.state.last_hub_contact = now;
                    self.state.last_capacity = d.capacity;
                }
                for key in d.cleaned {
                    self.state.fenced.remove(&key);
                }
                self.state.relayed.extend(d.relayed);
            }
            Err(error) => {
                self.cfg.metrics.round_failed(error.kind());
                let retry_in = self.backoff.fail();
                self.retry_at = now + retry_in;
                self.changed = true;
                tracing::warn!(error = %kube_shell::error_chain(&error), kind = error.kind(), cluster = %self.cfg.cluster, ?retry_in, "agent round failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uid: &str, epoch: i64) -> Key {
        Key { uid: uid.into(), epoch }
    }
    use crate::testkit::{caches, config, jobset, names, placement};

    fn kinds(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::Realise(_) => "realise",
                Action::StartRound(_) => "round",
                Action::ProbeHub => "probe",
                Action::Fence => "fence",
                Action::Confirm(_) => "confirm",
                Action::Wait(_) => "wait",
            })
            .collect()
    }

    #[test]
    fn a_change_starts_new_placements_and_one_round_and_a_wake_during_it_only_the_new() {
        let t0 = Instant::now();
        let mut agent = Loop::new(config(), t0);
        let c = caches(vec![placement("a", "east", None)], Vec::new());
        let first = agent.step(Wake::Changed, &c, t0, Timestamp::now());
        assert_eq!(kinds(&first), ["realise", "round", "wait"], "heartbeat due: a round too");
        let Action::Realise(ps) = &first[0] else { unreachable!() };
        assert_eq!(names(ps), ["a"]);
        assert!(matches!(first[2], Action::Wait(None)), "a running round wakes the loop when it ends");

        // While the round runs, a new placement starts at once; nothing else does.
        let c = caches(vec![placement("a", "east", None), placement("b", "east", None)], Vec::new());
        let during = agent.step(Wake::Changed, &c, t0, Timestamp::now());
        assert_eq!(kinds(&during), ["realise", "wait"]);
        let Action::Realise(ps) = &during[0] else { unreachable!() };
        assert_eq!(names(ps), ["b"], "a is in flight: not started twice");
    }

    #[test]
    fn a_failed_round_backs_off_and_retries_later() {
        let t0 = Instant::now();
        let mut agent = Loop::new(config(), t0);
        let c = caches(Vec::new(), Vec::new());
        let first = agent.step(Wake::Changed, &c, t0, Timestamp::now());
        assert_eq!(kinds(&first), ["round", "wait"]);
        let error = Error::Timeout(Duration::from_secs(1));
        let after = agent.step(Wake::RoundEnded(Some(Err(error))), &c, t0, Timestamp::now());
        let retry_at = t0 + kube_shell::backoff::MIN;
        assert!(matches!(after[..], [Action::Wait(Some(t))] if t == retry_at), "{after:?}");
        // Before the retry time nothing starts; at it, the round runs again.
        assert_eq!(kinds(&agent.step(Wake::Changed, &c, t0, Timestamp::now())), ["wait"]);
        assert_eq!(kinds(&agent.step(Wake::Timer, &c, retry_at, Timestamp::now())), ["round", "wait"]);
    }

    /// Making what was placed comes before reporting on it: while realisations are in flight, the
    /// next round waits until [`ROUND_QUIET`] after the last of them ends, or [`ROUND_PACE`]
    /// after the last round started, whichever is first.
    #[test]
    fn a_round_waits_for_realisations_in_flight_at_most_a_pace() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut agent = Loop::new(config(), t0);
        let (a, b) = (placement("a", "east", None), placement("b", "east", None));
        let c = caches(vec![a.clone(), b.clone()], Vec::new());
        assert_eq!(kinds(&agent.step(Wake::Changed, &c, t0, Timestamp::now())), ["realise", "round", "wait"]);
        // A change while the round runs; the round ends with both still being made (and the
        // heartbeat not written: a round is due).
        assert_eq!(kinds(&agent.step(Wake::Changed, &c, t0 + ms(10), Timestamp::now())), ["wait"]);
        let after = agent.step(ended(None, false), &c, t0 + ms(20), Timestamp::now());
        assert!(matches!(after[..], [Action::Wait(Some(t))] if t == t0 + ROUND_PACE), "{after:?}");
        let realised = |p: &Placement| Wake::Realised {
            key: Key::of(p),
            placement: kube::ResourceExt::name_any(p),
            result: Ok(()),
        };
        assert_eq!(kinds(&agent.step(realised(&a), &c, t0 + ms(30), Timestamp::now())), ["wait"]);
        // The last one made: the round that waited starts once no other has started for the
        // quiet after it.
        let after = agent.step(realised(&b), &c, t0 + ms(40), Timestamp::now());
        assert!(matches!(after[..], [Action::Wait(Some(t))] if t == t0 + ms(40) + ROUND_QUIET), "{after:?}");
        assert_eq!(kinds(&agent.step(Wake::Timer, &c, t0 + ms(39) + ROUND_QUIET, Timestamp::now())), ["wait"]);
        assert_eq!(kinds(&agent.step(Wake::Timer, &c, t0 + ms(40) + ROUND_QUIET, Timestamp::now())), ["round", "wait"]);

        // A wave placed in the quiet is made at once, and the round waits for it in turn, at
        // most until the pace is up.
        let t2 = t0 + ms(100);
        let mut agent = Loop::new(config(), t2);
        let c = caches(vec![a.clone()], Vec::new());
        assert_eq!(kinds(&agent.step(Wake::Changed, &c, t2, Timestamp::now())), ["realise", "round", "wait"]);
        agent.step(ended(None, false), &c, t2 + ms(10), Timestamp::now());
        agent.step(Wake::Changed, &c, t2 + ms(20), Timestamp::now());
        assert_eq!(kinds(&agent.step(realised(&a), &c, t2 + ms(30), Timestamp::now())), ["wait"]);
        let c = caches(vec![a.clone(), b.clone()], Vec::new());
        let wave = agent.step(Wake::Changed, &c, t2 + ms(40), Timestamp::now());
        assert_eq!(kinds(&wave), ["realise", "wait"], "the next wave made, no round beside it");
        assert!(matches!(wave[1], Action::Wait(Some(t)) if t == t2 + ROUND_PACE), "{wave:?}");
        assert_eq!(kinds(&agent.step(Wake::Timer, &c, t2 + ROUND_PACE, Timestamp::now())), ["round", "wait"]);

        // With one in flight for longer, the round starts when the pace is up.
        let t1 = t0 + ms(50);
        let mut agent = Loop::new(config(), t1);
        let c = caches(vec![a.clone()], Vec::new());
        assert_eq!(kinds(&agent.step(Wake::Changed, &c, t1, Timestamp::now())), ["realise", "round", "wait"]);
        agent.step(Wake::Changed, &c, t1, Timestamp::now());
        assert_eq!(kinds(&agent.step(ended(None, false), &c, t1 + ms(10), Timestamp::now())), ["wait"]);
        assert_eq!(kinds(&agent.step(Wake::Timer, &c, t1 + ROUND_PACE - ms(1), Timestamp::now())), ["wait"]);
        assert_eq!(kinds(&agent.step(Wake::Timer, &c, t1 + ROUND_PACE, Timestamp::now())), ["round", "wait"]);
    }

    /// A round that ended well, having written `capacity` (and the whole status, `heartbeat`).
    fn ended(capacity: Option<Arc<serde_json::Value>>, heartbeat: bool) -> Wake {
        Wake::RoundEnded(Some(Ok(Delivered { capacity, heartbeat, cleaned: Vec::new(), relayed: Vec::new() })))
    }

    /// The capacity a round wrote goes with the next rounds, which write none while it holds;
    /// a round that wrote none keeps it, and does not put the heartbeat off.
    #[test]
    fn the_capacity_last_written_goes_with_the_next_round_and_a_round_writing_none_keeps_it() {
        let t0 = Instant::now();
        let cfg = config();
        let heartbeat = cfg.timing.heartbeat;
        let mut agent = Loop::new(cfg, t0);
        let c = caches(Vec::new(), Vec::new());
        let round = |actions: Vec<Action>| {
            actions.into_iter().find_map(|a| match a {
                Action::StartRound(r) => Some(r),
                _ => None,
            })
        };
        let first = round(agent.step(Wake::Changed, &c, t0, Timestamp::now())).expect("a round");
        assert!(first.heartbeat && first.reported_capacity.is_none());
        let written = Arc::new(serde_json::json!({"domains": [], "counted": ["u1/1"]}));
        agent.step(ended(Some(written.clone()), true), &c, t0, Timestamp::now());
        // Between heartbeats a JobSet starts running: a round for its status.
        let t1 = t0 + heartbeat / 2;
        let c = caches(vec![placement("a", "east", Some("Applied"))], vec![jobset("a", 1, 1)]);
        let next = round(agent.step(Wake::Changed, &c, t1, Timestamp::now())).expect("a round for the change");
        assert!(!next.statuses.is_empty());
        assert!(!next.heartbeat);
        assert_eq!(next.reported_capacity.as_deref(), Some(&*written));
        // That round found the capacity unchanged and wrote none: the memory stays, and the
        // heartbeat is due a heartbeat after the last one, not after this round.
        agent.step(ended(None, false), &c, t1, Timestamp::now());
        assert_eq!(agent.state.last_capacity.as_deref(), Some(&*written));
        let due = round(agent.step(Wake::Timer, &c, t0 + heartbeat, Timestamp::now())).expect("the heartbeat");
        assert!(due.heartbeat);
        assert_eq!(due.reported_capacity.as_deref(), Some(&*written));
        agent.step(ended(Some(written.clone()), true), &c, t0 + heartbeat, Timestamp::now());
        // A round that wrote a new capacity between heartbeats (a burst's) is remembered, and
        // does not put the next heartbeat off either.
        let t2 = t0 + heartbeat + heartbeat / 2;
        round(agent.step(Wake::Changed, &c, t2, Timestamp::now())).expect("a round for the change");
        let newer = Arc::new(serde_json::json!({"domains": [], "counted": ["u1/1", "u2/1"]}));
        agent.step(ended(Some(newer.clone()), false), &c, t2, Timestamp::now());
        assert_eq!(agent.state.last_capacity.as_deref(), Some(&*newer));
        let due = round(agent.step(Wake::Timer, &c, t0 + 2 * heartbeat, Timestamp::now()));
        assert!(due.is_some_and(|r| r.heartbeat), "the heartbeat is due a heartbeat after the last one");
    }

    #[test]
    fn a_hub_silent_past_hub_lost_is_fenced_and_what_was_deleted_remembered() {
        let t0 = Instant::now();
        let cfg = config();
        let (heartbeat, hub_lost) = (cfg.timing.heartbeat, cfg.timing.hub_lost);
        let mut agent = Loop::new(cfg, t0);
        let c = caches(Vec::new(), Vec::new());
        agent.step(Wake::Changed, &c, t0, Timestamp::now());
        agent.step(Wake::RoundEnded(None), &c, t0, Timestamp::now());
        // A heartbeat later the hub is probed; answered, all is well.
        let later = t0 + heartbeat;
        let probe = agent.step(Wake::Timer, &c, later, Timestamp::now());
        assert!(kinds(&probe).ends_with(&["probe"]), "{probe:?}");
        assert_eq!(kinds(&agent.step(Wake::Probed { answered: true }, &c, later, Timestamp::now())), ["wait"]);
        // Unanswered until hub_lost has passed since: fence.
        let lost = later + hub_lost;
        agent.step(Wake::Timer, &c, lost, Timestamp::now());
        let fence = agent.step(Wake::Probed { answered: false }, &c, lost, Timestamp::now());
        assert_eq!(kinds(&fence), ["fence"]);
        let key = Key { uid: "uid-1".to_string(), epoch: 3 };
        let deleted = vec![(key.clone(), "team".to_string())];
        agent.step(Wake::Fenced(Fenced { deleted, error: None }), &c, lost, Timestamp::now());
        assert_eq!(agent.state.fenced.get(&key).map(String::as_str), Some("team"));
        assert_eq!(agent.state.fenced_at, Some(lost));
    }

    #[test]
    fn an_unanswering_hub_is_probed_once_per_interval_not_on_every_wake() {
        let t0 = Instant::now();
        let cfg = config();
        let heartbeat = cfg.timing.heartbeat;
        let mut agent = Loop::new(cfg, t0);
        let c = caches(Vec::new(), Vec::new());
        agent.step(Wake::Changed, &c, t0, Timestamp::now());
        agent.step(Wake::RoundEnded(None), &c, t0, Timestamp::now());
        let t1 = t0 + heartbeat;
        assert!(kinds(&agent.step(Wake::Timer, &c, t1, Timestamp::now())).contains(&"probe"));
        let after = agent.step(Wake::Probed { answered: false }, &c, t1, Timestamp::now());
        let next_probe = t1 + heartbeat / 4;
        assert!(matches!(after[..], [Action::Wait(Some(t))] if t <= next_probe), "{after:?}");
        // Woken again at once (a watch event): no second probe yet.
        assert!(!kinds(&agent.step(Wake::Changed, &c, t1, Timestamp::now())).contains(&"probe"));
        assert!(kinds(&agent.step(Wake::Timer, &c, next_probe, Timestamp::now())).contains(&"probe"));
    }

    /// A hub that was slow, not gone: its watches never broke, so the caches are as they were
    /// when it stalled. Once it answers, one fresh list decides, and what is still placed here
    /// is made again from it (the cache alone would never say so).
    #[test]
    fn what_was_fenced_is_made_again_once_the_hub_answers_with_no_relist() {
        let t0 = Instant::now();
        let cfg = config();
        let (heartbeat, hub_lost) = (cfg.timing.heartbeat, cfg.timing.hub_lost);
        let mut agent = Loop::new(cfg, t0);
        let c = caches(
            vec![placement("kept", "east", Some("Running")), placement("moved", "east", Some("Running"))],
            Vec::new(),
        );
        agent.step(Wake::Changed, &c, t0, Timestamp::now());
        agent.step(Wake::RoundEnded(None), &c, t0, Timestamp::now());
        let lost = t0 + hub_lost;
        agent.step(Wake::Timer, &c, lost, Timestamp::now());
        assert_eq!(kinds(&agent.step(Wake::Probed { answered: false }, &c, lost, Timestamp::now())), ["fence"]);
        let deleted = vec![(key("kept", 1), "team".to_string()), (key("moved", 1), "team".to_string())];
        agent.step(Wake::Fenced(Fenced { deleted, error: None }), &c, lost, Timestamp::now());

        // Still unanswered: nothing is made again, nothing confirmed; nor does a placement the
        // (possibly stale) cache shows new start before a confirmation.
        let later = lost + heartbeat;
        let quiet = agent.step(Wake::Timer, &c, later, Timestamp::now());
        assert!(!kinds(&quiet).contains(&"realise") && !kinds(&quiet).contains(&"confirm"), "{quiet:?}");
        let stale = caches(
            vec![
                placement("kept", "east", Some("Running")),
                placement("moved", "east", Some("Running")),
                placement("new", "east", None),
            ],
            Vec::new(),
        );
        assert!(!kinds(&agent.step(Wake::Changed, &stale, later, Timestamp::now())).contains(&"realise"));
        // The hub answers: confirm before anything else is made again.
        let back = agent.step(Wake::Probed { answered: true }, &c, later, Timestamp::now());
        assert_eq!(kinds(&back), ["confirm"]);
        // A failed list is retried after the probe interval, not at once.
        let failed = agent.step(Wake::Confirmed(None), &c, later, Timestamp::now());
        assert_eq!(kinds(&failed), ["wait"]);
        assert!(!kinds(&agent.step(Wake::Changed, &c, later, Timestamp::now())).contains(&"confirm"));
        let retry = later + heartbeat / 4;
        let again = agent.step(Wake::Timer, &c, retry, Timestamp::now());
        assert!(kinds(&again).ends_with(&["confirm"]), "{again:?}");
        // The list says "moved" is elsewhere now (the cache does not know yet), "kept" is here.
        let listed = vec![
            Arc::new(placement("kept", "east", Some("Running"))),
            Arc::new(placement("moved", "west", Some("Running"))),
        ];
        let remade = agent.step(Wake::Confirmed(Some(listed)), &c, retry, Timestamp::now());
        assert_eq!(kinds(&remade), ["realise", "wait"]);
        let Action::Realise(ps) = &remade[0] else { unreachable!() };
        assert_eq!(names(ps), ["kept"]);
        // Confirmed once: no second list while the hub keeps answering.
        let after = agent.step(Wake::Timer, &c, retry + heartbeat, Timestamp::now());
        assert!(!kinds(&after).contains(&"confirm"), "{after:?}");
        // Made again: no longer fenced.
        agent.step(
            Wake::Realised { key: key("kept", 1), placement: "team/kept".into(), result: Ok(()) },
            &c,
            retry,
            Timestamp::now(),
        );
        assert!(!agent.state.fenced.contains_key(&key("kept", 1)));
        assert!(agent.state.fenced.contains_key(&key("moved", 1)), "left for the caches to see gone");
    }

    /// A realisation that failed (its hub out of reach, say) is not started again on every
    /// wake, but once its back-off is over, and the wait says when that is.
    #[test]
    fn a_failed_realisation_backs_off_instead_of_retrying_on_every_wake() {
        let t0 = Instant::now();
        let mut agent = Loop::new(config(), t0);
        let c = caches(vec![placement("a", "east", None)], Vec::new());
        assert!(kinds(&agent.step(Wake::Changed, &c, t0, Timestamp::now())).contains(&"realise"));
        let failed = Wake::Realised {
            key: key("a", 1),
            placement: "team/a".into(),
            result: Err(Error::Timeout(Duration::from_secs(1))),
        };
        let after = agent.step(failed, &c, t0, Timestamp::now());
        let retry_at = t0 + kube_shell::backoff::MIN;
        assert!(matches!(after[..], [Action::Wait(Some(t))] if t <= retry_at), "{after:?}");
        assert!(!kinds(&agent.step(Wake::Changed, &c, t0, Timestamp::now())).contains(&"realise"));
        assert!(kinds(&agent.step(Wake::Timer, &c, retry_at, Timestamp::now())).contains(&"realise"));
    }
}
