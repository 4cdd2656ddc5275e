//! The member clusters as this cycle sees them: which are live, which report what cannot be
//! read, which placements each counts in its capacity report, and where each reports pods bound.
//!
//! Members are judged one by one: a report that does not translate, claims absurd sizes or
//! carries an unreadable heartbeat leaves that member out of the snapshot (nothing new goes
//! there) with a `ReportAccepted=False` condition saying why; what already runs there stays
//! for the grace period from the condition's transition, as for a silent member. The rest of
//! the fleet is untouched.

use std::collections::{BTreeMap, BTreeSet};

use api::stowage::{MemberCluster, PlacementKey};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use super::Settings;
use crate::translate;

/// The condition the dispatcher keeps on each MemberCluster whose report it refused.
pub const REPORT_ACCEPTED: &str = "ReportAccepted";

/// A member whose report cannot be read.
#[derive(Debug)]
pub(super) struct Unusable<'a> {
    pub(super) member: &'a MemberCluster,
    /// What is wrong, naming the field.
    pub(super) problem: String,
}

#[derive(Debug)]
pub(super) struct Members<'a> {
    /// Members that reported within the grace period, with a report that reads: the snapshot.
    pub(super) live: Vec<&'a MemberCluster>,
    /// Members whose placed TrainJobs stay: the live, and the unusable for less than the grace.
    staying: BTreeSet<&'a str>,
    /// Members whose report cannot be read.
    pub(super) unusable: Vec<Unusable<'a>>,
    /// Members refused before whose report reads again: their condition turns True.
    pub(super) accepted_again: Vec<&'a MemberCluster>,
    /// Per member, the placements its capacity report lists as counted. Looked up once per
    /// TrainJob per cycle: an index, not a scan.
    counted: BTreeMap<&'a str, Listed>,
    /// Per TrainJob UID: the live member reporting pods of it bound, and their placement.
    bound: BTreeMap<String, (&'a str, PlacementKey)>,
    /// Every MemberCluster's name.
    all: Vec<String>,
}

impl<'a> Members<'a> {
    pub(super) fn observe(members: &'a [MemberCluster], settings: &Settings, now: Timestamp) -> Self {
        let (mut live, mut unusable, mut accepted_again, mut staying) =
            (Vec::new(), Vec::new(), Vec::new(), BTreeSet::new());
        for m in members {
            let name = m.metadata.name.as_deref().unwrap_or_default();
            match judge(m, settings, now) {
                Judgement::Silent => {}
                Judgement::Live => {
                    live.push(m);
                    staying.insert(name);
                    if refused(m).is_some() {
                        accepted_again.push(m);
                    }
                }
                Judgement::Unusable(problem) => {
                    // Since the condition's transition, or this cycle when first seen.
                    let since = refused(m).map_or(now, |c| c.last_transition_time.0);
                    if now.duration_since(since).unsigned_abs() <= settings.member_grace {
                        staying.insert(name);
                    }
                    tracing::warn!(member = name, %problem, "member's report refused");
                    unusable.push(Unusable { member: m, problem });
                }
            }
        }
        // Reports are read at this boundary: an entry that is not `<uid>/<epoch>` says nothing.
        let counted = members
            .iter()
            .filter_map(|m| Some((m.metadata.name.as_deref()?, m.status.as_ref()?)))
            .map(|(name, s)| {
                let keys = s.counted.iter().filter_map(|k| k.parse().ok()).collect();
                (name, Listed { keys, cut: s.counted_left_out > 0 })
            })
            .collect();
        let bound = live
            .iter()
            .filter_map(|m| Some((m.metadata.name.as_deref()?, m.status.as_ref()?)))
            .flat_map(|(member, s)| s.bound.iter().filter_map(move |b| Some((member, b.placement.parse().ok()?))))
            .map(|(member, key): (&str, PlacementKey)| (key.uid.clone(), (member, key)))
            .collect();
        let all = members.iter().filter_map(|m| m.metadata.name.clone()).collect();
        Members { live, staying, unusable, accepted_again, counted, bound, all }
    }

    /// Whether TrainJobs placed on `name` stay there: it is live, or its report was refused
    /// less than the grace period ago.
    pub(super) fn keeps(&self, name: &str) -> bool {
        self.staying.contains(name)
    }

    /// Why `name`'s report is refused, if it is.
    pub(super) fn refusal(&self, name: &str) -> Option<&str> {
        self.unusable.iter().find(|u| u.member.metadata.name.as_deref() == Some(name)).map(|u| u.problem.as_str())
    }

    /// What `member`'s capacity report says of the pods of `placement`.
    pub(super) fn count(&self, member: &str, placement: &PlacementKey) -> Count {
        self.counted.get(member).map_or(Count::Uncounted, |listed| listed.count(placement))
    }

    /// The live member with pods of TrainJob `uid` bound, and their placement.
    pub(super) fn bound(&self, uid: &str) -> Option<(&'a str, &PlacementKey)> {
        self.bound.get(uid).map(|(m, k)| (*m, k))
    }

    /// The members neither live nor refused: silent past the grace period, or never reported.
    pub(super) fn silent(&self) -> Vec<String> {
        let known: BTreeSet<&str> = self
            .live
            .iter()
            .map(|m| m.metadata.name.as_deref().unwrap_or_default())
            .chain(self.unusable.iter().map(|u| u.member.metadata.name.as_deref().unwrap_or_default()))
            .collect();
        self.all.iter().filter(|n| !known.contains(n.as_str())).cloned().collect()
    }

    pub(super) fn live_clusters(&self) -> Vec<MemberCluster> {
        self.live.iter().map(|m| (*m).clone()).collect()
    }
}

/// What a member's capacity report says of one placement's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Count {
    /// Listed in `counted`: bound, and in the summary.
    Counted,
    /// Not counted: not bound yet, or gone.
    Uncounted,
    /// After the last key of a `counted` list cut for its size: counted, if its pods are bound.
    /// The report cannot say which.
    Unlisted,
}

/// A member's `counted` list, read.
#[derive(Debug)]
struct Listed {
    keys: BTreeSet<PlacementKey>,
    /// Some were left out for size (`countedLeftOut`): the agent lists the first in key order,
    /// so those are the keys after its last.
    cut: bool,
}

impl Listed {
    fn count(&self, key: &PlacementKey) -> Count {
        if self.keys.contains(key) {
            Count::Counted
        } else if self.cut && self.keys.last().is_none_or(|last| key > last) {
            Count::Unlisted
        } else {
            Count::Uncounted
        }
    }
}

enum Judgement {
    /// Never reported, or not within the grace period.
    Silent,
    Live,
    /// Reported, but what it says cannot be read.
    Unusable(String),
}

fn judge(m: &MemberCluster, settings: &Settings, now: Timestamp) -> Judgement {
    let Some(heartbeat) = m.status.as_ref().and_then(|s| s.heartbeat_time.as_deref()) else {
        return Judgement::Silent;
    };
    let Ok(t) = heartbeat.parse::<Timestamp>() else {
        return Judgement::Unusable(format!("status.heartbeatTime: {heartbeat:?} is not an RFC 3339 time"));
    };
    if now.duration_since(t).unsigned_abs() > settings.member_grace {
        return Judgement::Silent;
    }
    match translate::check_member(m) {
        Ok(()) => Judgement::Live,
        Err(e) => Judgement::Unusable(kube_shell::error_chain(&e)),
    }
}

/// The member's `ReportAccepted=False` condition, when its report was refused before.
fn refused(m: &MemberCluster) -> Option<&Condition> {
    m.status.as_ref()?.conditions.iter().find(|c| c.type_ == REPORT_ACCEPTED && c.status == "False")
}
