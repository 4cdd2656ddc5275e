//! What topology costs: a gang whose pods span racks, blocks or zones runs longer than one
//! inside a rack, because its collective traffic crosses slower, oversubscribed links. The
//! simulator stretches the job's run time by the factor for the widest level its pods cross.
//! Defaults and their sources: docs/simulator.md.

use scheduler_core::{DomainId, Fleet, Level, Slowdown};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TopologyCost {
    /// Extra run time (0.10 = 10% longer) when pods span NVLink domains inside one rack.
    pub cross_nvlink: f64,
    pub cross_rack: f64,
    pub cross_block: f64,
    pub cross_zone: f64,
}

impl Default for TopologyCost {
    /// The factors Stowage's policy weighs locality with by default (`Slowdown::DEFAULT`): the
    /// world the simulator models is the one the policy was told about, until an admin says
    /// otherwise on either side.
    fn default() -> Self {
        TopologyCost::from(Slowdown::DEFAULT)
    }
}

impl From<Slowdown> for TopologyCost {
    fn from(s: Slowdown) -> Self {
        let f = |permille: u32| f64::from(permille) / 1000.0;
        TopologyCost {
            cross_nvlink: f(s.cross_nvlink),
            cross_rack: f(s.cross_rack),
            cross_block: f(s.cross_block),
            cross_zone: f(s.cross_zone),
        }
    }
}

impl TopologyCost {
    /// No slowdown at all: what a topology-blind model assumes.
    pub const NONE: TopologyCost =
        TopologyCost { cross_nvlink: 0.0, cross_rack: 0.0, cross_block: 0.0, cross_zone: 0.0 };

    /// The run-time factor for a gang whose pods' narrowest common domain is `span`: the level
    /// just below the span is the widest one crossed. One host, or hosts in one rack, cost
    /// nothing extra (that is the reference the trace's durations were measured on).
    pub fn factor(&self, fleet: &Fleet, span: DomainId) -> f64 {
        1.0 + match scheduler_core::locality::crossed(fleet, span) {
            Level::Zone => self.cross_zone,
            Level::Block => self.cross_block,
            Level::Rack => self.cross_rack,
            Level::Nvlink => self.cross_nvlink,
            Level::Host => 0.0,
        }
    }
}
