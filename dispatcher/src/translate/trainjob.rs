//! A TrainJob and its runtime into a scheduler-core gang, pure: its pod sets are what the
//! renderer would make, so the hub schedules exactly the pods the member will run.

use api::kueue::PRIORITY_CLASS_LABEL;
use api::stowage::{
    FLAVOR_ANNOTATION, GPU_PRODUCT_LABEL, PRIORITY_ANNOTATION, RUNTIME_ANNOTATION, TOPOLOGY_ANNOTATION,
};
use api::trainer::{Runtime, TrainJob};
use scheduler_core::{ClusterFilter, Gang, PodSet, TopologyConstraint};
use trainer_render::{self as render, Capabilities, GangScheduler, Input, RenderError};

use super::{queue_name, requirement_of, shape_of};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GangError {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error("metadata.annotations[{annotation}]: {problem}")]
    Annotation { annotation: &'static str, problem: String },
}

/// The gang a TrainJob asks for: one pod set per replicated job of the JobSet it renders into,
/// each `replicas × parallelism` pods with the rendered pod's requests.
/// Where a TrainJob's priority comes from, before it is resolved against the hub's classes and
/// its Queue, first found first: Kueue's `kueue.x-k8s.io/priority-class` label (a
/// WorkloadPriorityClass, as Kueue reads it), the pods' `priorityClassName` (from the runtime's
/// template), the annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrioritySource {
    WorkloadClass(String),
    Class(String),
    Annotation(i32),
    Unset,
}

/// The gang with priority 0, and where its priority is to come from.
pub fn gang(trainjob: &TrainJob, runtime: &Runtime) -> Result<(Gang, PrioritySource), GangError> {
    let caps = Capabilities { gang_scheduler: GangScheduler::None, ..Capabilities::default() };
    let input = Input { trainjob, runtime, placement: None, capabilities: &caps, ssh_key: None, jobset_uid: None };
    let shapes = render::pod_sets(&input)?;
    let meta = &trainjob.metadata;
    let annotations = meta.annotations.clone().unwrap_or_default();
    let topology: TopologyConstraint = match annotations.get(TOPOLOGY_ANNOTATION) {
        Some(t) => t.parse().map_err(|e: scheduler_core::topology::ConstraintParseError| GangError::Annotation {
            annotation: TOPOLOGY_ANNOTATION,
            problem: e.to_string(),
        })?,
        None => TopologyConstraint::Unconstrained,
    };
    let class = shapes.iter().find_map(|rj| rj.pod.priority_class_name.clone()).filter(|c| !c.is_empty());
    let workload_class = meta.labels.as_ref().and_then(|l| l.get(PRIORITY_CLASS_LABEL)).filter(|c| !c.is_empty());
    let priority = match (class, annotations.get(PRIORITY_ANNOTATION)) {
        _ if workload_class.is_some() => PrioritySource::WorkloadClass(workload_class.cloned().unwrap_or_default()),
        (Some(class), _) => PrioritySource::Class(class),
        (None, Some(p)) => PrioritySource::Annotation(p.trim().parse::<i32>().map_err(|_| GangError::Annotation {
            annotation: PRIORITY_ANNOTATION,
            problem: format!("{p:?} is not an integer"),
        })?),
        (None, None) => PrioritySource::Unset,
    };
    // How long it runs once started: the user's estimate, else its deadline (it ends by then
    // at the latest). Only a gang that states one may backfill in front of a reservation.
    let runtime_ms = match annotations.get(RUNTIME_ANNOTATION) {
        Some(r) => Some(
            r.trim()
                .parse::<u64>()
                .ok()
                .filter(|&s| s > 0)
                .ok_or_else(|| GangError::Annotation {
                    annotation: RUNTIME_ANNOTATION,
                    problem: format!("{r:?} is not a positive number of seconds"),
                })?
                .saturating_mul(1000),
        ),
        None => trainjob.spec.active_deadline_seconds.filter(|&d| d > 0).map(|d| (d as u64).saturating_mul(1000)),
    };
    let flavors: Vec<String> = annotations
        .get(FLAVOR_ANNOTATION)
        .map(|f| f.split('|').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    let pod_sets = shapes
        .into_iter()
        .map(|rj| {
            let shape = shape_of(&rj.pod);
            let selector_flavor = rj.pod.node_selector.as_ref().and_then(|s| s.get(GPU_PRODUCT_LABEL)).cloned();
            let is_trainer = rj.ancestor.as_deref() == Some(api::trainer::ANCESTOR_TRAINER);
            PodSet {
                pods: rj.pods,
                shape,
                flavors: if flavors.is_empty() { selector_flavor.into_iter().collect() } else { flavors.clone() },
                nodes: requirement_of(&rj.pod),
                topology: if is_trainer || rj.name == "node" { topology } else { TopologyConstraint::Unconstrained },
                slice: None,
                name: rj.name.into(),
            }
        })
        .filter(|ps| ps.pods > 0)
        .collect();
    let ns = meta.namespace.clone().unwrap_or_default();
    let gang = Gang {
        id: format!("{ns}/{}", meta.name.clone().unwrap_or_default()).into(),
        queue: queue_name(trainjob),
        priority: 0,
        runtime_ms,
        submitted_ms: meta.creation_timestamp.as_ref().map(|t| t.0.as_millisecond().max(0) as u64).unwrap_or(0),
        pod_sets,
        clusters: ClusterFilter::default(),
    };
    Ok((gang, priority))
}
