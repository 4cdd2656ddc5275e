//! The member clusters as this cycle sees them: which are live, which placements each counts in
//! its capacity report, and where each reports pods bound.

use std::collections::{BTreeMap, BTreeSet};

use api::stowage::{MemberCluster, PlacementKey};
use k8s_openapi::jiff::Timestamp;

use super::Settings;

#[derive(Debug)]
pub(super) struct Members<'a> {
    /// Members that reported within the grace period.
    pub(super) live: Vec<&'a MemberCluster>,
    /// Names of the live members.
    live_names: BTreeSet<&'a str>,
    /// Per member, the placements whose pods its capacity report counts. Looked up once per
    /// TrainJob per cycle: an index, not a scan.
    counted: BTreeMap<&'a str, BTreeSet<PlacementKey>>,
    /// Per TrainJob UID: the live member reporting pods of it bound, and their placement.
    bound: BTreeMap<String, (&'a str, PlacementKey)>,
}

impl<'a> Members<'a> {
    pub(super) fn observe(members: &'a [MemberCluster], settings: &Settings, now: Timestamp) -> Self {
        let live: Vec<&MemberCluster> = members.iter().filter(|m| is_live(m, settings, now)).collect();
        // Reports are read at this boundary: an entry that is not `<uid>/<epoch>` says nothing.
        let counted = members
            .iter()
            .filter_map(|m| Some((m.metadata.name.as_deref()?, m.status.as_ref()?)))
            .map(|(name, s)| (name, s.counted.iter().filter_map(|k| k.parse().ok()).collect()))
            .collect();
        let live_names = live.iter().filter_map(|m| m.metadata.name.as_deref()).collect();
        let bound = live
            .iter()
            .filter_map(|m| Some((m.metadata.name.as_deref()?, m.status.as_ref()?)))
            .flat_map(|(member, s)| s.bound.iter().filter_map(move |b| Some((member, b.placement.parse().ok()?))))
            .map(|(member, key): (&str, PlacementKey)| (key.uid.clone(), (member, key)))
            .collect();
        Members { live, live_names, counted, bound }
    }

    pub(super) fn is_live(&self, name: &str) -> bool {
        self.live_names.contains(name)
    }

    /// Whether `member`'s capacity report counts the pods of `placement`.
    pub(super) fn counts(&self, member: &str, placement: &PlacementKey) -> bool {
        self.counted.get(member).is_some_and(|keys| keys.contains(placement))
    }

    /// The live member with pods of TrainJob `uid` bound, and their placement.
    pub(super) fn bound(&self, uid: &str) -> Option<(&'a str, &PlacementKey)> {
        self.bound.get(uid).map(|(m, k)| (*m, k))
    }

    pub(super) fn live_clusters(&self) -> Vec<MemberCluster> {
        self.live.iter().map(|m| (*m).clone()).collect()
    }
}

/// When a member last reported, if it ever did.
fn heartbeat(m: &MemberCluster) -> Option<Timestamp> {
    m.status.as_ref()?.heartbeat_time.as_deref()?.parse().ok()
}

/// Whether `member` has reported within the grace period.
fn is_live(m: &MemberCluster, settings: &Settings, now: Timestamp) -> bool {
    heartbeat(m).is_some_and(|t| now.duration_since(t).unsigned_abs() <= settings.member_grace)
}
