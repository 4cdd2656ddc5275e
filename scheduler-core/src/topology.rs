//! Canonical topology levels, so that clusters with different label schemes compare.

use std::fmt;
use std::str::FromStr;

/// A canonical topology level, widest first. Each cluster maps its own node labels onto these;
/// a cluster need not have every level, but every cluster has `Host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Zone,
    Block,
    Rack,
    /// An NVLink domain (`nvidia.com/gpu.clique`): GPUs joined by NVLink across hosts.
    Nvlink,
    Host,
}

impl Level {
    pub const ALL: [Level; 5] = [Level::Zone, Level::Block, Level::Rack, Level::Nvlink, Level::Host];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Zone => "zone",
            Level::Block => "block",
            Level::Rack => "rack",
            Level::Nvlink => "nvlink",
            Level::Host => "host",
        }
    }

    /// The node label a cluster uses for this level when its fleet description names none.
    pub fn default_label(self) -> &'static str {
        match self {
            Level::Zone => "topology.kubernetes.io/zone",
            Level::Block => "cloud.google.com/gce-topology-block",
            Level::Rack => "cloud.google.com/gce-topology-subblock",
            Level::Nvlink => "nvidia.com/gpu.clique",
            Level::Host => "kubernetes.io/hostname",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown topology level {0:?} (expected zone, block, rack, nvlink or host)")]
pub struct UnknownLevel(pub String);

impl FromStr for Level {
    type Err = UnknownLevel;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Level::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownLevel(s.to_string()))
    }
}

/// Where a pod set must, or would like to, sit in the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TopologyConstraint {
    /// All pods inside one domain at this level (or a narrower one), or not admitted.
    Required(Level),
    /// As narrow as possible, but spreading wider is allowed.
    Preferred(Level),
    #[default]
    Unconstrained,
}

impl fmt::Display for TopologyConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyConstraint::Required(l) => write!(f, "required:{l}"),
            TopologyConstraint::Preferred(l) => write!(f, "preferred:{l}"),
            TopologyConstraint::Unconstrained => f.write_str("none"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintParseError {
    #[error("expected required:LEVEL, preferred:LEVEL or none, got {0:?}")]
    Shape(String),
    #[error(transparent)]
    Level(#[from] UnknownLevel),
}

impl FromStr for TopologyConstraint {
    type Err = ConstraintParseError;
    /// `required:rack`, `preferred:block`, `none` (or empty).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("none") {
            return Ok(TopologyConstraint::Unconstrained);
        }
        match s.split_once(':') {
            Some((kind, level)) if kind.eq_ignore_ascii_case("required") => {
                Ok(TopologyConstraint::Required(level.parse()?))
            }
            Some((kind, level)) if kind.eq_ignore_ascii_case("preferred") => {
                Ok(TopologyConstraint::Preferred(level.parse()?))
            }
            _ => Err(ConstraintParseError::Shape(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_round_trip_through_text() {
        for c in [
            TopologyConstraint::Required(Level::Rack),
            TopologyConstraint::Preferred(Level::Block),
            TopologyConstraint::Unconstrained,
        ] {
            assert_eq!(c.to_string().parse::<TopologyConstraint>(), Ok(c));
        }
        assert!("required:shelf".parse::<TopologyConstraint>().is_err());
        assert!("rack".parse::<TopologyConstraint>().is_err());
    }

    #[test]
    fn levels_order_widest_first() {
        assert!(Level::Zone < Level::Block && Level::Rack < Level::Host);
    }
}
