//! The agent's configuration and timers, and the constants its loop runs by.

use std::time::Duration;

use api::stowage::TopologyLevel;

use crate::metrics::Metrics;
use trainer_render::Capabilities;

pub const FIELD_MANAGER: &str = "stowage-agent";
/// How long a burst of watch events may land before one survey looks at them all: shorter than
/// the dispatcher's, since a survey is cheap and a start is waiting on it.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(10);
/// Placements rendered and applied, or statuses written, at once.
pub(crate) const CONCURRENT_APPLIES: usize = 16;

/// Node label keys an admin may add to the well-known ones: the report stays bounded.
pub const MAX_NODE_LABELS: usize = 32;

/// A `--node-labels` list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeLabelsError {
    #[error("--node-labels: at most {MAX_NODE_LABELS} label keys, got {0}")]
    TooMany(usize),
    #[error("--node-labels: {0:?} is not a label key (prefix/name, name at most 63 characters)")]
    BadKey(String),
}

/// The node label keys to report: the well-known ones and the admin's, once each, in order.
pub fn node_label_keys(extra: &[String]) -> Result<Vec<String>, NodeLabelsError> {
    if extra.len() > MAX_NODE_LABELS {
        return Err(NodeLabelsError::TooMany(extra.len()));
    }
    let valid = |k: &str| {
        let name = k.rsplit_once('/').map_or(k, |(_, n)| n);
        !name.is_empty()
            && name.len() <= 63
            && k.len() <= 316
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
    };
    let mut keys: Vec<String> = crate::capacity::WELL_KNOWN_LABELS.iter().map(|k| k.to_string()).collect();
    for k in extra.iter().map(|k| k.trim()).filter(|k| !k.is_empty()) {
        if !valid(k) {
            return Err(NodeLabelsError::BadKey(k.to_string()));
        }
        if !keys.iter().any(|have| have == k) {
            keys.push(k.to_string());
        }
    }
    Ok(keys)
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub cluster: String,
    pub levels: Vec<TopologyLevel>,
    /// Node label keys reported with capacity (the well-known ones and the admin's
    /// `--node-labels`), so the hub can honour node selectors and affinity.
    pub node_labels: Vec<String>,
    pub capabilities: Capabilities,
    pub timing: Timing,
    pub metrics: Metrics,
    /// How the hub reads this member's pod logs: the log relay's kubelet face, written on its
    /// virtual Node, or why no relay serves them (reported as `status.logs`).
    pub logs: Logs,
}

/// Whether the hub can read this member's pod logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logs {
    /// Through the log relay, whose kubelet face the hub's API server calls at this endpoint.
    Relay(crate::mirror::KubeletEndpoint),
    /// Not at all, for this reason (no `--log-relay`, or its CA unreadable): the agent runs and
    /// places work without it.
    Off(String),
}

impl Logs {
    /// The relay's kubelet face, when a relay serves the logs.
    pub fn kubelet(&self) -> Option<&crate::mirror::KubeletEndpoint> {
        match self {
            Logs::Relay(k) => Some(k),
            Logs::Off(_) => None,
        }
    }

    /// What `status.logs` says.
    pub fn describe(&self) -> String {
        match self {
            Logs::Relay(k) => format!("served through the log relay (kubelet face {}:{})", k.address, k.port),
            Logs::Off(why) => format!("not served: {why}"),
        }
    }
}

/// The agent's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How often it reports its whole status (heartbeat, gang scheduler, capacity, `bound`, and
    /// why waiting gangs wait), whatever capacity reports it writes between.
    pub heartbeat: Duration,
    /// Unable to reach the hub for this long, it deletes the JobSets it made. Keep it well
    /// under the dispatcher's member grace period.
    pub hub_lost: Duration,
    /// A gang not running this long after its JobSet was made is reported Unschedulable.
    pub start_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat: Duration::from_secs(10),
            hub_lost: Duration::from_secs(60),
            start_timeout: Duration::from_secs(600),
        }
    }
}
