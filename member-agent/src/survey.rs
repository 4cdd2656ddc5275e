//! One look at the caches, pure: what to start now and what a round should report and clean.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use api::jobset::JobSet;
use api::stowage::{Placement, PlacementKey, PlacementPhase, PlacementStatus};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;

use kube_shell::watch::{self};

use crate::caches::{Caches, Key, owner_key};
use crate::config::AgentConfig;
use crate::metrics::phase_label;
use crate::mirror::{self, MirrorPlan, Owner};
use crate::relay::{self, Relay};
use crate::status::{failure, pending_reason, status_of};

/// What an agent remembers between wakes.
#[derive(Debug)]
pub struct State {
    /// (TrainJob uid, epoch) applied by this process and maybe not yet in the JobSet cache.
    pub(crate) applied: BTreeSet<Key>,
    /// (TrainJob uid, epoch) queued or being realised.
    pub(crate) in_flight: BTreeSet<Key>,
    /// (TrainJob uid, epoch) → namespace of JobSets it deleted while the hub was unreachable.
    pub(crate) fenced: BTreeMap<Key, String>,
    /// When it last fenced for a lost hub: what it deleted then is made again only after a fresh
    /// list taken after and a claim (`fence::reclaim`), never from a cache the hub-lost time left
    /// behind, nor from a relist alone (a dispatcher may be moving it that very moment).
    pub(crate) fenced_at: Option<Instant>,
    /// When a fresh list last confirmed which fenced placements are still placed here.
    pub(crate) confirmed_at: Option<Instant>,
    pub(crate) last_report: Option<Instant>,
    /// The capacity (domains and counted placements) the last report wrote, as written: a round
    /// whose capacity is the same writes none (a heartbeat writes it whatever it is).
    pub(crate) last_capacity: Option<Arc<serde_json::Value>>,
    pub(crate) last_hub_contact: Instant,
    /// Member Events relayed to the hub: UID → the count relayed (`relay`).
    pub(crate) relayed: BTreeMap<String, i32>,
}

impl State {
    /// A fresh agent at `now`: it counts the hub as just reached.
    pub(crate) fn new(now: Instant) -> Self {
        State {
            applied: BTreeSet::new(),
            in_flight: BTreeSet::new(),
            fenced: BTreeMap::new(),
            fenced_at: None,
            confirmed_at: None,
            last_report: None,
            last_capacity: None,
            last_hub_contact: now,
            relayed: BTreeMap::new(),
        }
    }
}

/// What one look at the caches asks of the agent. No I/O, so every wake can take one.
#[derive(Debug, Default)]
pub(crate) struct Survey {
    /// Placed here, with no JobSet yet and not being realised: started at once.
    pub(crate) realise: Vec<Arc<Placement>>,
    pub(crate) round: Round,
}

/// One round of reporting to the hub and cleaning up the member. It runs apart from the wake
/// loop, so a slow round (hundreds of statuses in a burst) never holds back what was just
/// placed.
#[derive(Debug, Default)]
pub(crate) struct Round {
    /// A heartbeat is due: the whole MemberCluster status, not only capacity.
    pub(crate) heartbeat: bool,
    /// The capacity the hub has from the last report (`State::last_capacity`).
    pub(crate) reported_capacity: Option<Arc<serde_json::Value>>,
    /// Placement statuses that differ from what the hub has.
    pub(crate) statuses: Vec<(String, String, PlacementStatus)>,
    /// JobSets this agent made for an epoch or TrainJob no longer placed here (fencing).
    pub(crate) stale: Vec<(Key, Arc<JobSet>)>,
    /// The member's JobSets made by this agent, by phase label (for the metrics).
    pub(crate) jobsets: BTreeMap<&'static str, u64>,
    /// Placements whose statuses say Running for the first time at their epoch: how long
    /// their JobSet took from creation (the start latency, counted once the status is written).
    pub(crate) started: BTreeMap<(String, String), Duration>,
    /// The hub's copies of the member's TrainJob pods to write.
    pub(crate) mirrors: MirrorPlan,
    /// Member Events to relay to the hub's TrainJobs.
    pub(crate) relays: Vec<Relay>,
    /// Fenced while the hub was out of reach and no longer placed here: their companions go.
    pub(crate) gone: Vec<(Key, String)>,
    /// Failed Placements whose failing container left no termination message: its pod and
    /// container, whose last log lines the shell adds to the status message.
    pub(crate) log_tails: BTreeMap<(String, String), (String, String)>,
}

impl Round {
    pub(crate) fn is_empty(&self) -> bool {
        !self.heartbeat
            && self.statuses.is_empty()
            && self.stale.is_empty()
            && self.gone.is_empty()
            && self.mirrors.is_empty()
            && self.relays.is_empty()
    }
}

/// How far one look goes: starting what was placed is every wake's; reporting and cleaning is
/// a round's, and only when none is running; the heartbeat (and asking the pods why a gang
/// waits) only when one is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Only what to start: a round is running, or backing off.
    Starts,
    /// What to start and a round's work.
    Round,
    /// A round's work with the heartbeat.
    Heartbeat,
}

impl Reach {
    fn round(self) -> bool {
        self != Reach::Starts
    }
}

/// Whether the agent has reported the placement's current epoch over: done, or given up here.
pub(crate) fn finished(p: &Placement) -> bool {
    p.status.as_ref().filter(|s| s.observed_epoch == p.spec.epoch).is_some_and(|s| {
        matches!(
            s.phase,
            PlacementPhase::Succeeded | PlacementPhase::Failed | PlacementPhase::Lost | PlacementPhase::Unschedulable
        )
    })
}

/// Compares the placements for this cluster with the member's JobSets: what to realise and,
/// as far as `reach` goes, what a round should do. Forgets applied keys the JobSet
/// cache has caught up with.
pub(crate) fn survey(
    cfg: &AgentConfig,
    caches: &Caches,
    state: &mut State,
    reach: Reach,
    now: k8s_openapi::jiff::Timestamp,
) -> Survey {
    if !reach.round() {
        return Survey { realise: starts(cfg, caches, state), round: Round::default() };
    }
    let placements: Vec<Arc<Placement>> = watch::sorted(&caches.placements)
        .into_iter()
        .filter(|p| p.spec.cluster.as_deref() == Some(cfg.cluster.as_str()))
        .collect();
    // Whose pods the hub gets copies of: every placement here at its current epoch.
    let owners: BTreeMap<PlacementKey, Owner> = placements
        .iter()
        .map(|p| {
            let uid = p.spec.train_job_uid.clone();
            (PlacementKey { uid: uid.clone(), epoch: p.spec.epoch }, Owner { name: p.name_any(), uid })
        })
        .collect();
    let jobsets: BTreeMap<Key, Arc<JobSet>> =
        caches.jobsets.state().into_iter().filter_map(|js| Some((owner_key(&js)?, js))).collect();
    state.applied.retain(|k| !jobsets.contains_key(k));
    let heartbeat = reach == Reach::Heartbeat;
    // Asking the pods why a gang waits is for heartbeats; the last answer is kept between.
    let pods = if heartbeat { caches.pods.state() } else { Vec::new() };
    let reported_capacity = state.last_capacity.clone();
    let mut survey = Survey { round: Round { heartbeat, reported_capacity, ..Round::default() }, ..Survey::default() };
    let mut current = BTreeSet::new();
    for p in placements {
        let key = Key::of(&p);
        current.insert(key.clone());
        let (ns, name) = (p.namespace().unwrap_or_default(), p.name_any());
        let reported = p.status.as_ref().filter(|s| s.observed_epoch == p.spec.epoch);
        let phase = reported.map(|s| s.phase);
        if finished(&p) {
            continue;
        }
        let status = match jobsets.get(&key) {
            Some(js) => {
                let age = js
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(Duration::ZERO, |t| now.duration_since(t.0).unsigned_abs());
                let unstarted = status_of(js, p.spec.epoch, None, false).phase == PlacementPhase::Applied;
                // Gangs younger than two heartbeats are most likely just starting: no need to ask.
                // The claim's "being made on" is not a reason to wait: the JobSet is made.
                let reason = match reported.filter(|r| r.phase != PlacementPhase::Pending) {
                    _ if !unstarted => None,
                    Some(r) if !heartbeat || age < cfg.timing.heartbeat * 2 => r.message.clone(),
                    _ => pending_reason(&pods, &ns, &js.name_any()),
                };
                let mut status = status_of(js, p.spec.epoch, reason, unstarted && age >= cfg.timing.start_timeout);
                if status.phase == PlacementPhase::Failed
                    && let Some(why) = failure(&caches.trainjob_pods.state(), &ns, &js.name_any())
                {
                    let jobset = status.message.take().unwrap_or_else(|| "jobset failed".into());
                    status.message = Some(format!("{jobset}; {}", why.words));
                    if let Some(log) = why.log {
                        survey.round.log_tails.insert((ns.clone(), name.clone()), log);
                    }
                }
                if status.phase == PlacementPhase::Running && phase != Some(PlacementPhase::Running) {
                    survey.round.started.insert((ns.clone(), name.clone()), age);
                }
                status
            }
            None if to_start(&p, &key, state) => {
                survey.realise.push(p);
                continue;
            }
            None if state.applied.contains(&key) || state.in_flight.contains(&key) => continue,
            None if reported_made(&p) && !state.fenced.contains_key(&key) => PlacementStatus {
                phase: PlacementPhase::Lost,
                observed_epoch: p.spec.epoch,
                message: Some(format!("JobSet {ns}/{name} disappeared from the member before it finished")),
                ..PlacementStatus::default()
            },
            // Fenced for a lost hub: made again only once confirmed and claimed (`Loop::confirmed`).
            None => continue,
        };
        if reported != Some(&status) {
            survey.round.statuses.push((ns, name, status));
        }
    }
    for (key, js) in &jobsets {
        *survey.round.jobsets.entry(phase_label(status_of(js, key.epoch, None, false).phase)).or_default() += 1;
    }
    let trainjob_pods = caches.trainjob_pods.state();
    survey.round.mirrors = mirror::plan(&cfg.cluster, &trainjob_pods, &caches.copies.state(), &owners);
    let events = caches.events.state();
    // Forget what the member no longer has (its Events expire), so the memory stays bounded.
    let live: BTreeSet<&str> = events.iter().filter_map(|e| e.metadata.uid.as_deref()).collect();
    state.relayed.retain(|uid, _| live.contains(uid.as_str()));
    survey.round.relays = relay::relays(&cfg.cluster, &events, &trainjob_pods, &owners, &state.relayed);
    survey.round.stale = jobsets.into_iter().filter(|(k, _)| !current.contains(k)).collect();
    survey.round.gone =
        state.fenced.iter().filter(|(k, _)| !current.contains(*k)).map(|(k, ns)| (k.clone(), ns.clone())).collect();
    survey
}

/// Whether the hub has the placement reported made (Applied or Running) at its epoch.
fn reported_made(p: &Placement) -> bool {
    let reported = p.status.as_ref().filter(|s| s.observed_epoch == p.spec.epoch);
    reported.is_some_and(|s| matches!(s.phase, PlacementPhase::Applied | PlacementPhase::Running))
}

/// Whether a placement here with no JobSet of its epoch on the member is to be made now: not
/// reported made at this epoch (gone, it is Lost: a round's business), nor just applied by this
/// process, being made, or fenced for a lost hub (made again only once confirmed and claimed,
/// `Loop::confirmed`).
fn to_start(p: &Placement, key: &Key, state: &State) -> bool {
    !reported_made(p)
        && !state.applied.contains(key)
        && !state.in_flight.contains(key)
        && !state.fenced.contains_key(key)
}

/// What a wake during a round starts: the survey's `realise`, found without a round's tables.
/// A burst wakes the agent hundreds of times while rounds run, and each wake used to build
/// every table of a round over every placement and JobSet (quadratic in the burst); this reads
/// each placement once and looks its JobSet up by name (the agent names it after the TrainJob,
/// as the Placement is). Forgets the applied keys whose JobSets the cache now has, as a round does.
fn starts(cfg: &AgentConfig, caches: &Caches, state: &mut State) -> Vec<Arc<Placement>> {
    let made = |p: &Placement, key: &Key| {
        let name = ObjectRef::new(&p.name_any()).within(&p.namespace().unwrap_or_default());
        caches.jobsets.get(&name).is_some_and(|js| owner_key(&js).as_ref() == Some(key))
    };
    let mut realise: Vec<Arc<Placement>> = Vec::new();
    for p in caches.placements.state() {
        if p.spec.cluster.as_deref() != Some(cfg.cluster.as_str()) || finished(&p) {
            continue;
        }
        // Most of them, settled without a key or a lookup.
        if reported_made(&p) {
            continue;
        }
        let key = Key::of(&p);
        if state.applied.contains(&key) {
            if made(&p, &key) {
                state.applied.remove(&key);
            }
            continue;
        }
        if to_start(&p, &key, state) && !made(&p, &key) {
            realise.push(p);
        }
    }
    // In the order the round's survey finds them (`watch::sorted`).
    realise.sort_by(|a, b| watch::by_name(a.as_ref(), b.as_ref()));
    realise
}

#[cfg(test)]
mod tests {
    use api::stowage::PlacementPhase;
    use serde_json::json;

    use super::*;

    fn key(uid: &str, epoch: i64) -> Key {
        Key { uid: uid.into(), epoch }
    }
    use crate::testkit::{caches, config, from, jobset, names, placement};

    #[test]
    fn a_wake_during_a_round_starts_new_placements_and_nothing_else() {
        let c = caches(
            vec![
                placement("new-b", "east", None),
                placement("new-a", "east", None),
                placement("elsewhere", "west", None),
                placement("running", "east", Some("Applied")),
                // Applied, its JobSet gone: Lost, never made again behind the hub's back.
                placement("vanished", "east", Some("Running")),
            ],
            vec![jobset("running", 1, 1), jobset("old-epoch", 0, 1)],
        );
        let mut state = State::new(Instant::now());
        let during = survey(&config(), &c, &mut state, Reach::Starts, k8s_openapi::jiff::Timestamp::now());
        assert_eq!(names(&during.realise), ["new-a", "new-b"], "queue order, this cluster only");
        assert!(during.round.is_empty(), "statuses and fencing wait for the round: {:?}", during.round);

        // No round running: the same look also finds what to tell the hub and what to fence.
        let between = survey(&config(), &c, &mut state, Reach::Round, k8s_openapi::jiff::Timestamp::now());
        assert_eq!(names(&between.realise), ["new-a", "new-b"]);
        let phases: Vec<(&str, PlacementPhase)> =
            between.round.statuses.iter().map(|(_, name, s)| (name.as_str(), s.phase)).collect();
        assert_eq!(phases, [("running", PlacementPhase::Running), ("vanished", PlacementPhase::Lost)]);
        let stale: Vec<&str> = between.round.stale.iter().map(|(k, _)| k.uid.as_str()).collect();
        assert_eq!(stale, ["old-epoch"]);
        assert!(!between.round.heartbeat);
    }

    /// A wake during a round finds what to start without a round's tables: the same as a round's
    /// look would, in every case that decides it.
    #[test]
    fn a_wake_during_a_round_starts_what_a_rounds_look_would() {
        let mut claimed = placement("claimed", "east", Some("Pending"));
        if let Some(s) = claimed.status.as_mut() {
            s.message = Some("being made on east".into());
        }
        let placements = vec![
            placement("new", "east", None),
            // Its JobSet is the last epoch's: this epoch is still to make.
            placement("moved-back", "east", Some("Pending")),
            claimed,
            placement("applied", "east", None),
            placement("in-flight", "east", None),
            placement("fenced", "east", Some("Pending")),
            placement("vanished", "east", Some("Running")),
            placement("elsewhere", "west", None),
            placement("done", "east", Some("Succeeded")),
        ];
        let jobsets = vec![jobset("moved-back", 0, 1), jobset("claimed", 1, 0), jobset("applied", 1, 0)];
        let c = caches(placements, jobsets);
        let fresh = || {
            let mut state = State::new(Instant::now());
            state.applied.insert(key("applied", 1));
            state.in_flight.insert(key("in-flight", 1));
            state.fenced.insert(key("fenced", 1), "team".into());
            state
        };
        let (mut during, mut between) = (fresh(), fresh());
        let now = k8s_openapi::jiff::Timestamp::now();
        let starts = survey(&config(), &c, &mut during, Reach::Starts, now);
        let round = survey(&config(), &c, &mut between, Reach::Round, now);
        assert_eq!(names(&starts.realise), ["moved-back", "new"]);
        assert_eq!(names(&starts.realise), names(&round.realise));
        assert_eq!(during.applied, between.applied, "both forget what the JobSet cache has caught up with");
        assert!(during.applied.is_empty());
    }

    #[test]
    fn what_is_being_realised_or_just_applied_is_neither_started_again_nor_lost() {
        let c = caches(vec![placement("a", "east", Some("Applied")), placement("b", "east", None)], Vec::new());
        let mut state = State::new(Instant::now());
        state.in_flight.insert(key("b", 1));
        // Applied by this process, not yet in the JobSet cache.
        state.applied.insert(key("a", 1));
        let s = survey(&config(), &c, &mut state, Reach::Heartbeat, k8s_openapi::jiff::Timestamp::now());
        assert!(s.realise.is_empty());
        assert!(s.round.statuses.is_empty(), "{:?}", s.round.statuses);
        assert!(s.round.heartbeat);
        // Once the JobSet cache has it, `applied` forgets it.
        let c = caches(vec![placement("a", "east", Some("Applied"))], vec![jobset("a", 1, 0)]);
        let s = survey(&config(), &c, &mut state, Reach::Round, k8s_openapi::jiff::Timestamp::now());
        assert!(!state.applied.contains(&key("a", 1)));
        let phases: Vec<PlacementPhase> = s.round.statuses.iter().map(|(_, _, s)| s.phase).collect();
        assert_eq!(phases, [PlacementPhase::Applied], "still Applied, now with the JobSet's counts");
        // Not running start_timeout after its JobSet was made: Unschedulable.
        let mut late = jobset("a", 1, 0);
        late.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(from(json!("2026-01-01T00:00:00Z"))));
        let c = caches(vec![placement("a", "east", Some("Applied"))], vec![late]);
        let s = survey(&config(), &c, &mut state, Reach::Round, k8s_openapi::jiff::Timestamp::now());
        let phases: Vec<PlacementPhase> = s.round.statuses.iter().map(|(_, _, s)| s.phase).collect();
        assert_eq!(phases, [PlacementPhase::Unschedulable]);
    }

    #[test]
    fn a_claimed_placement_is_reported_from_its_jobset_without_the_claims_words() {
        // The agent writes no Applied of its own after making the JobSet: the claim (Pending,
        // "being made on") stands until a round reports what the JobSet says.
        let mut claimed = placement("a", "east", Some("Pending"));
        if let Some(s) = claimed.status.as_mut() {
            s.message = Some("being made on east".into());
        }
        let mut state = State::new(Instant::now());
        for (ready, phase) in [(0, PlacementPhase::Applied), (1, PlacementPhase::Running)] {
            let c = caches(vec![claimed.clone()], vec![jobset("a", 1, ready)]);
            for reach in [Reach::Round, Reach::Heartbeat] {
                let s = survey(&config(), &c, &mut state, reach, k8s_openapi::jiff::Timestamp::now());
                let reported: Vec<(PlacementPhase, Option<&str>)> =
                    s.round.statuses.iter().map(|(_, _, s)| (s.phase, s.message.as_deref())).collect();
                assert_eq!(reported, [(phase, None)], "{reach:?}");
            }
        }
        // Its JobSet gone while the claim still stands (no round reported it): made again here,
        // not reported Lost.
        let gone = caches(vec![claimed], Vec::new());
        let s = survey(&config(), &gone, &mut state, Reach::Round, k8s_openapi::jiff::Timestamp::now());
        assert_eq!(names(&s.realise), ["a"]);
        assert!(s.round.statuses.is_empty(), "{:?}", s.round.statuses);
    }

    #[test]
    fn what_was_fenced_for_a_lost_hub_is_never_made_again_from_the_caches() {
        let c = caches(vec![placement("a", "east", Some("Running"))], Vec::new());
        let mut state = State::new(Instant::now());
        state.fenced.insert(key("a", 1), "team".into());
        state.fenced_at = Some(Instant::now());
        // The cache may be what the hub-lost time left, or a relist taken while the dispatcher
        // moves it: only a claim (Loop::confirmed) makes it again.
        let s = survey(&config(), &c, &mut state, Reach::Round, k8s_openapi::jiff::Timestamp::now());
        assert!(s.realise.is_empty() && s.round.statuses.is_empty(), "{:?}", s.round.statuses);
    }
}
