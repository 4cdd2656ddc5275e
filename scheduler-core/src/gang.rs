//! Gangs: the unit of admission. A gang is one or more pod sets, admitted whole or not at all.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::capacity::PodShape;
use crate::nodes::NodeRequirement;
use crate::topology::{Level, TopologyConstraint};

/// Groups of `size` pods that must share one domain at `level` (e.g. tensor-parallel groups
/// that must share an NVLink domain), inside the pod set's own constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slice {
    pub size: u32,
    pub level: Level,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodSet {
    /// Shared: pending reasons name it every cycle.
    pub name: Arc<str>,
    pub pods: u32,
    pub shape: PodShape,
    /// Allowed GPU flavors, in order of preference; empty means any. Ignored for pods without GPUs.
    pub flavors: Vec<String>,
    /// What its pods ask of a node (selector, required affinity, tolerations): only flavors on
    /// nodes it admits are used.
    pub nodes: NodeRequirement,
    pub topology: TopologyConstraint,
    pub slice: Option<Slice>,
}

impl PodSet {
    /// The level it prefers, when it may be held to it: a lone pod sits on one host anyway, so
    /// only a pod set of two or more is ever held for its locality (by patience or by cost).
    pub fn holdable(&self) -> Option<Level> {
        match self.topology {
            TopologyConstraint::Preferred(level) if self.pods >= 2 => Some(level),
            _ => None,
        }
    }
}

/// Which clusters a gang may go to, beyond capacity and flavor.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClusterFilter {
    /// Every label here must be on the cluster.
    pub selector: BTreeMap<String, String>,
    /// When set, only these clusters (e.g. a gang bound to a cluster at submit).
    pub only: Option<Vec<String>>,
    /// Clusters backed off for this gang (it failed to start there).
    pub avoid: Vec<String>,
}

impl ClusterFilter {
    pub fn allows(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.only.as_ref().is_none_or(|only| only.iter().any(|o| o == name))
            && !self.avoid.iter().any(|a| a == name)
    }
}

/// A gang's id: unique and stable (namespace/name in production, the trace id in simulation).
/// Named apart from the other strings a gang carries (its queue, its clusters) so a release, a
/// reservation or a victim cannot be given one of those by mistake.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GangId(String);

impl GangId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for GangId {
    fn from(id: String) -> Self {
        GangId(id)
    }
}

impl From<&str> for GangId {
    fn from(id: &str) -> Self {
        GangId(id.to_string())
    }
}

impl From<GangId> for String {
    fn from(id: GangId) -> Self {
        id.0
    }
}

impl std::borrow::Borrow<str> for GangId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for GangId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for GangId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for GangId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    pub id: GangId,
    pub queue: String,
    pub priority: i32,
    pub submitted_ms: u64,
    pub pod_sets: Vec<PodSet>,
    pub clusters: ClusterFilter,
    /// How long it is expected to run once started (the trace's duration in simulation; a
    /// TrainJob annotation or `activeDeadlineSeconds` in production). Only a gang that states
    /// one may backfill in front of a reservation.
    pub runtime_ms: Option<u64>,
}

impl Gang {
    pub fn total_pods(&self) -> u64 {
        self.pod_sets.iter().map(|p| u64::from(p.pods)).sum()
    }

    pub fn total_gpus(&self) -> u64 {
        self.pod_sets.iter().map(|p| u64::from(p.pods) * u64::from(p.shape.gpus)).sum()
    }

    /// Checks what no fleet could fix: the error names the field.
    pub fn validate(&self) -> Result<(), GangError> {
        let field = |path: String, problem: &'static str| Err(GangError { path, problem });
        if self.id.as_str().is_empty() {
            return field("id".into(), "must not be empty");
        }
        if self.pod_sets.is_empty() {
            return field("podSets".into(), "must hold at least one pod set");
        }
        for (i, ps) in self.pod_sets.iter().enumerate() {
            let at = |f: &str| format!("podSets[{i}].{f}");
            if self.pod_sets[..i].iter().any(|p| p.name == ps.name) {
                return field(at("name"), "must be unique within the gang");
            }
            if ps.pods == 0 {
                return field(at("pods"), "must be at least 1");
            }
            if let Some(slice) = ps.slice {
                if slice.size == 0 || ps.pods % slice.size != 0 {
                    return field(at("slice.size"), "must be at least 1 and divide the pod count");
                }
                if let TopologyConstraint::Required(l) = ps.topology
                    && slice.level < l
                {
                    return field(at("slice.level"), "must not be wider than the required level");
                }
            }
        }
        Ok(())
    }
}

/// A gang that can never be admitted as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct GangError {
    pub path: String,
    pub problem: &'static str,
}
