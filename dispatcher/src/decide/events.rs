//! The Events a TrainJob gets on the hub, as a Trainer and Kueue user reads them in `kubectl
//! describe` and the SDK's `get_job_events`: derived from what a write changes (a condition that
//! turns up or goes, a Placement made or moved), recorded once that write is made; and the
//! Events of MultiKueue's nominations, on the Workload and its TrainJob. Pure: the shell only
//! creates them, or counts one again.
//!
//! Each Event's name is its TrainJob's and what happened (`t1.pending-quotaexceeded`,
//! `t1.placed-2`): the same thing happening again counts the same Event up (kubectl shows
//! `x3 over 5m`), as the API server's own event recorder aggregates, instead of a new object
//! each time; a Pending reason that returns is one Event, counted.

use api::kueue::Workload;
use api::trainer::{TrainJob, TrainJobCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;

use super::conditions::{STARTING, find, find_true, is_true};
use super::{PlacementWrite, Redispatch};

/// `type` of a core/v1 Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What happened: the Event's `reason`. A TrainJob's are a closed set; a nomination's name the
/// pending reason the gang waits for, as TrainJobs' conditions name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventReason {
    Pending,
    Placed,
    Started,
    Redispatched,
    Preempted,
    Suspended,
    Resumed,
    Completed,
    Failed,
    /// A Workload nominated to a member.
    Nominated,
    /// A Workload's nomination withdrawn for a preemption on its member.
    Preempting,
    /// A Workload Stowage cannot make a gang of.
    Invalid,
    /// No member answers the Workload's MultiKueue config.
    NoMemberCluster,
    /// The members it may go to have no room for it now.
    NoMemberCapacity,
    /// A member's stale status on the Workload cleared (kubernetes-sigs/kueue#15380).
    StaleStatusCleared,
    /// Not nominated: the gang's pending reason (`NoDomain`, `QuotaExceeded`).
    Waiting(String),
}

impl EventReason {
    pub fn as_str(&self) -> &str {
        match self {
            EventReason::Pending => "Pending",
            EventReason::Placed => "Placed",
            EventReason::Started => "Started",
            EventReason::Redispatched => "Redispatched",
            EventReason::Preempted => "Preempted",
            EventReason::Suspended => "Suspended",
            EventReason::Resumed => "Resumed",
            EventReason::Completed => "Completed",
            EventReason::Failed => "Failed",
            EventReason::Nominated => "Nominated",
            EventReason::Preempting => "Preempting",
            EventReason::Invalid => "Invalid",
            EventReason::NoMemberCluster => "NoMemberCluster",
            EventReason::NoMemberCapacity => "NoMemberCapacity",
            EventReason::StaleStatusCleared => "StaleStatusCleared",
            EventReason::Waiting(reason) => reason,
        }
    }
}

/// The kind of object an Event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    TrainJob,
    Workload,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TrainJob => "TrainJob",
            Kind::Workload => "Workload",
        }
    }

    pub fn api_version(self) -> String {
        match self {
            Kind::TrainJob => TrainJob::api_version(&()).into_owned(),
            Kind::Workload => Workload::api_version(&()).into_owned(),
        }
    }
}

/// One Event about a TrainJob or a Workload.
#[derive(Debug, Clone, PartialEq)]
pub struct EventWrite {
    pub namespace: String,
    /// The Event object's name: its object's, then what happened.
    pub name: String,
    pub kind: Kind,
    /// The name of the object it is about.
    pub object: String,
    pub uid: String,
    pub type_: EventType,
    pub reason: EventReason,
    pub message: String,
}

/// The object an Event is about.
#[derive(Debug, Clone, Copy)]
pub struct About<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

impl About<'_> {
    fn event(&self, key: &str, type_: EventType, reason: EventReason, message: String) -> EventWrite {
        // A TrainJob's name is a DNS label (63 at most); the key is short and lower case.
        let name = format!("{}.{}", self.name, key.to_ascii_lowercase());
        EventWrite {
            namespace: self.namespace.to_string(),
            name,
            kind: self.kind,
            object: self.name.to_string(),
            uid: self.uid.to_string(),
            type_,
            reason,
            message,
        }
    }
}

/// Whether a TrainJob is placed, and whether by the plan that writes its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    Nowhere,
    Earlier,
    /// By this plan: its Placed Event says where, and that its pods start there.
    Now,
}

/// The Events a TrainJob's status change stands for: a Pending reason it enters, its pods
/// starting (`Pending` gone while placed), preemption, suspension and resumption, the end.
pub fn of_status(about: About<'_>, old: &[Condition], new: &[Condition], placed: Placed) -> Vec<EventWrite> {
    use TrainJobCondition as C;
    let mut events = Vec::new();
    let pending = find_true(new, C::Pending);
    let was_pending = find_true(old, C::Pending);
    if let Some(p) = pending
        && was_pending.map(|c| &c.reason) != Some(&p.reason)
        // Placed just now: the Placed Event already says so, and a second Event at the same
        // moment would be one more write per TrainJob in a burst, saying nothing new.
        && !(p.reason == STARTING && placed == Placed::Now)
    {
        // Waiting for its pods on a member is news, not a warning.
        let type_ = if p.reason == STARTING { EventType::Normal } else { EventType::Warning };
        let message = format!("{}: {}", p.reason, p.message);
        events.push(about.event(&format!("pending-{}", p.reason), type_, EventReason::Pending, message));
    }
    if pending.is_none()
        && was_pending.is_some()
        && placed != Placed::Nowhere
        && !is_true(new, C::Suspended)
        && !ended(new)
    {
        events.push(about.event("started", EventType::Normal, EventReason::Started, "its pods run".into()));
    }
    if let Some(p) = find_true(new, C::Preempted)
        && !is_true(old, C::Preempted)
    {
        events.push(about.event("preempted", EventType::Warning, EventReason::Preempted, p.message.clone()));
    }
    match (find(old, C::Suspended).map(|c| c.status.as_str()), find(new, C::Suspended)) {
        (old, Some(s)) if s.status == "True" && old != Some("True") => {
            events.push(about.event("suspended", EventType::Normal, EventReason::Suspended, s.message.clone()));
        }
        (Some("True"), Some(s)) if s.status == "False" => {
            events.push(about.event("resumed", EventType::Normal, EventReason::Resumed, s.message.clone()));
        }
        _ => {}
    }
    if let Some(c) = find_true(new, C::Complete)
        && !is_true(old, C::Complete)
    {
        events.push(about.event("completed", EventType::Normal, EventReason::Completed, c.message.clone()));
    }
    if let Some(c) = find_true(new, C::Failed)
        && !is_true(old, C::Failed)
    {
        events.push(about.event("failed", EventType::Warning, EventReason::Failed, c.message.clone()));
    }
    events
}

fn ended(conditions: &[Condition]) -> bool {
    is_true(conditions, TrainJobCondition::Complete) || is_true(conditions, TrainJobCondition::Failed)
}

/// A nomination's Event on the Workload, and the same on its owning TrainJob when it has one
/// (where a Trainer user reads it). Only a nomination is news; anything else is a warning.
pub fn of_nomination(w: &Workload, reason: EventReason, message: &str) -> Vec<EventWrite> {
    let namespace = w.metadata.namespace.as_deref().unwrap_or_default();
    let type_ = if reason == EventReason::Nominated { EventType::Normal } else { EventType::Warning };
    let key = format!("nomination-{}", reason.as_str());
    let workload = About {
        kind: Kind::Workload,
        namespace,
        name: w.metadata.name.as_deref().unwrap_or_default(),
        uid: w.metadata.uid.as_deref().unwrap_or_default(),
    };
    let mut out = vec![workload.event(&key, type_, reason.clone(), message.to_string())];
    let owner =
        w.metadata.owner_references.iter().flatten().find(|r| r.kind == "TrainJob" && r.controller == Some(true));
    if let Some(r) = owner {
        let trainjob = About { kind: Kind::TrainJob, namespace, name: &r.name, uid: &r.uid };
        out.push(trainjob.event(&key, type_, reason, message.to_string()));
    }
    out
}

/// The Events a Placement write stands for: taken off a member (why), placed on one (where).
pub fn of_placement(w: &PlacementWrite) -> Vec<EventWrite> {
    let about = About { kind: Kind::TrainJob, namespace: &w.namespace, name: &w.name, uid: &w.owner_uid };
    let mut events = Vec::new();
    if let Some(moved) = &w.effect.redispatch
        && moved.reason != Redispatch::Preempted
    {
        // A preemption is told by the Preempted condition's own Event.
        let key = format!("redispatched-{}", moved.reason.as_str());
        events.push(about.event(&key, EventType::Warning, EventReason::Redispatched, moved.message.clone()));
    }
    if let Some(placed) = &w.effect.placed {
        let domains: Vec<String> = w
            .spec
            .pod_sets
            .iter()
            .filter_map(|ps| {
                Some(format!("{} in {} {}", ps.name, ps.domain.as_ref()?.level, ps.domain.as_ref()?.value))
            })
            .collect();
        let within = if domains.is_empty() { String::new() } else { format!(" ({})", domains.join(", ")) };
        let message = format!("placed on cluster {}{within}, epoch {}", placed.cluster, w.spec.epoch);
        events.push(about.event(&format!("placed-{}", w.spec.epoch), EventType::Normal, EventReason::Placed, message));
    }
    events
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    const ABOUT: About<'static> = About { kind: Kind::TrainJob, namespace: "ml", name: "t1", uid: "u1" };

    fn c(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    fn said(events: &[EventWrite]) -> Vec<(&str, &str, &str)> {
        events.iter().map(|e| (e.name.as_str(), e.reason.as_str(), e.type_.as_str())).collect()
    }

    #[test]
    fn a_new_pending_reason_is_an_event_and_the_same_reason_again_is_not() {
        let quota = c("Pending", "True", "QuotaExceeded", "queue a is out of quota");
        let first = of_status(ABOUT, &[], std::slice::from_ref(&quota), Placed::Nowhere);
        assert_eq!(said(&first), [("t1.pending-quotaexceeded", "Pending", "Warning")]);
        assert_eq!(first[0].message, "QuotaExceeded: queue a is out of quota");
        // Refreshed with other figures: the same reason, no new Event.
        let refreshed = c("Pending", "True", "QuotaExceeded", "queue a is out of quota: 3 left");
        assert!(of_status(ABOUT, std::slice::from_ref(&quota), &[refreshed], Placed::Nowhere).is_empty());
        // Placed: waiting for its pods is news, not a warning; then its pods run.
        let starting = c("Pending", "True", "Starting", "placed on cluster east; its pods are starting");
        let placed = of_status(ABOUT, std::slice::from_ref(&quota), std::slice::from_ref(&starting), Placed::Earlier);
        assert_eq!(said(&placed), [("t1.pending-starting", "Pending", "Normal")]);
        assert_eq!(
            said(&of_status(ABOUT, std::slice::from_ref(&starting), &[], Placed::Earlier)),
            [("t1.started", "Started", "Normal")]
        );
        // Placed by the same plan: its Placed Event says it, once.
        assert!(of_status(ABOUT, &[quota], std::slice::from_ref(&starting), Placed::Now).is_empty());
    }

    #[test]
    fn suspension_resumption_preemption_and_the_end_are_events_once() {
        let suspended = c("Suspended", "True", "Suspended", "TrainJob is suspended");
        let resumed = c("Suspended", "False", "Resumed", "TrainJob is resumed");
        assert_eq!(
            said(&of_status(ABOUT, &[], std::slice::from_ref(&suspended), Placed::Nowhere)),
            [("t1.suspended", "Suspended", "Normal")]
        );
        assert_eq!(
            said(&of_status(ABOUT, std::slice::from_ref(&suspended), std::slice::from_ref(&resumed), Placed::Nowhere)),
            [("t1.resumed", "Resumed", "Normal")]
        );
        assert!(
            of_status(ABOUT, std::slice::from_ref(&resumed), std::slice::from_ref(&resumed), Placed::Nowhere)
                .is_empty()
        );
        let preempted = c("Preempted", "True", "Preempted", "evicted from east for ml/urgent");
        assert_eq!(
            said(&of_status(ABOUT, &[], std::slice::from_ref(&preempted), Placed::Earlier)),
            [("t1.preempted", "Preempted", "Warning")]
        );
        let failed = c("Failed", "True", "FailedJobs", "jobset failed: node-0 exited 1");
        let ended =
            of_status(ABOUT, &[c("Pending", "True", "Starting", "")], std::slice::from_ref(&failed), Placed::Earlier);
        assert_eq!(said(&ended), [("t1.failed", "Failed", "Warning")], "an end is not a start");
        assert_eq!(ended[0].message, "jobset failed: node-0 exited 1");
        assert!(
            of_status(ABOUT, std::slice::from_ref(&failed), std::slice::from_ref(&failed), Placed::Earlier).is_empty()
        );
    }
}
