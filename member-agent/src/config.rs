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

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub cluster: String,
    pub levels: Vec<TopologyLevel>,
    pub capabilities: Capabilities,
    pub timing: Timing,
    pub metrics: Metrics,
}

/// The agent's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How often it reports (heartbeat and capacity) when nothing changes.
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
