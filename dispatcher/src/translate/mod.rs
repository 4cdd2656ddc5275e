//! Hub objects into scheduler-core types, pure: a gang from each kind of job the hub
//! schedules, side by side — a TrainJob and its runtime ([`trainjob`]), a Kueue Workload
//! ([`workload`]), both through the pod-spec readers here — and MemberCluster statuses into a
//! `Fleet` with its current `Capacity` ([`fleet`](mod@fleet)).

mod fleet;
mod trainjob;
pub mod workload;

pub use fleet::{Bound, FleetTranslateError, Hosts, NodeGroup, admission, bound, check_member, fleet};
pub use trainjob::{GangError, PrioritySource, gang};

use api::kueue::QUEUE_NAME_LABEL;
use api::quantity::Milli;
use api::stowage::{GPU_PRODUCT_LABEL, QUEUE_LABEL};
use api::trainer::TrainJob;
use k8s_openapi::api::core::v1::PodSpec;
use scheduler_core::{
    LabelMatch, MatchOperator, NodeRequirement, PodShape, TaintEffect, Toleration, TolerationOperator,
};

pub use api::stowage::{FLAVOR_ANNOTATION, PRIORITY_ANNOTATION, RUNTIME_ANNOTATION, TOPOLOGY_ANNOTATION};

/// The queue of TrainJobs that name none.
pub const DEFAULT_QUEUE: &str = "default";

/// The queue a TrainJob names: Stowage's `stowage.dev/queue` label, else Kueue's
/// `kueue.x-k8s.io/queue-name` (a Kueue user's TrainJob as it is), else [`DEFAULT_QUEUE`].
pub fn queue_name(tj: &TrainJob) -> String {
    let labels = tj.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(QUEUE_LABEL).or_else(|| l.get(QUEUE_NAME_LABEL)))
        .cloned()
        .unwrap_or_else(|| DEFAULT_QUEUE.into())
}

/// Whether the queue comes from Kueue's label (Stowage's absent): an unknown one is then told
/// in Kueue's words, as a missing LocalQueue.
pub fn queue_from_kueue(tj: &TrainJob) -> bool {
    tj.metadata.labels.as_ref().is_some_and(|l| !l.contains_key(QUEUE_LABEL) && l.contains_key(QUEUE_NAME_LABEL))
}

/// What a pod asks of its node: its node selector (the GPU product is its flavor, not a label
/// the hub matches), required node affinity and tolerations.
pub(crate) fn requirement_of(p: &PodSpec) -> NodeRequirement {
    let selector = p
        .node_selector
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != GPU_PRODUCT_LABEL)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let terms = p
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let affinity = terms
        .iter()
        .map(|t| {
            t.match_expressions
                .iter()
                .flatten()
                .filter(|e| e.key != GPU_PRODUCT_LABEL)
                .map(|e| {
                    let values = e.values.clone().unwrap_or_default();
                    let number = || values.first().and_then(|v| v.parse::<i64>().ok()).unwrap_or(i64::MAX);
                    let operator = match e.operator.as_str() {
                        "In" => MatchOperator::In(values.clone()),
                        "NotIn" => MatchOperator::NotIn(values.clone()),
                        "Exists" => MatchOperator::Exists,
                        "DoesNotExist" => MatchOperator::DoesNotExist,
                        "Gt" => MatchOperator::Gt(number()),
                        // Lt and anything the API server would have refused.
                        _ => MatchOperator::Lt(number()),
                    };
                    LabelMatch { key: e.key.clone(), operator }
                })
                .collect::<Vec<_>>()
        })
        .filter(|t| !t.is_empty())
        .collect();
    let tolerations = p
        .tolerations
        .iter()
        .flatten()
        .filter_map(|t| {
            // No effect: every effect. Only PreferNoSchedule: nothing reported needs it.
            let effect = match t.effect.as_deref().filter(|e| !e.is_empty()) {
                None => None,
                Some(e) => Some(TaintEffect::parse(e)?),
            };
            let operator = match t.operator.as_deref() {
                Some("Exists") => TolerationOperator::Exists,
                _ => TolerationOperator::Equal(t.value.clone().unwrap_or_default()),
            };
            Some(Toleration { key: t.key.clone().filter(|k| !k.is_empty()), operator, effect })
        })
        .collect();
    NodeRequirement::new(selector, affinity, tolerations)
}

/// Per-pod requests by the Kubernetes rule (containers summed, the largest init container,
/// overhead), in the core's units. A GPU is any resource whose name contains "gpu".
pub(crate) fn shape_of(p: &PodSpec) -> PodShape {
    let get = |c: &k8s_openapi::api::core::v1::Container, pred: &dyn Fn(&str) -> bool| -> Milli {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref().or(r.limits.as_ref()))
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| pred(k))
                    .filter_map(|(_, q)| Milli::parse(&q.0).ok())
                    .fold(Milli(0), |a, b| a + b)
            })
            .unwrap_or_default()
    };
    let resource = |pred: &dyn Fn(&str) -> bool| -> Milli {
        let sum = p.containers.iter().map(|c| get(c, pred)).fold(Milli(0), |a, b| a + b);
        p.init_containers.iter().flatten().map(|c| get(c, pred)).fold(sum, |a, b| a.max(b))
    };
    let gpu = |k: &str| k.to_ascii_lowercase().contains("gpu");
    PodShape {
        gpus: resource(&gpu).ceil_units().clamp(0, i128::from(u32::MAX)) as u32,
        cpu_milli: resource(&|k| k == "cpu").0.clamp(0, i128::from(u64::MAX)) as u64,
        memory_mib: (resource(&|k| k == "memory").ceil_units() / (1024 * 1024)).clamp(0, i128::from(u64::MAX)) as u64,
    }
}
