//! A TrainJob's priority, from what an admin defined: the WorkloadPriorityClass its
//! `kueue.x-k8s.io/priority-class` label names (as Kueue reads it), else the PriorityClass its
//! pods name (from the runtime's template), else the cluster's global default PriorityClass,
//! else 0. The
//! `stowage.dev/priority` annotation, which any user can set, counts only in a Queue that
//! allows it (`spec.allowPriorityAnnotation`); elsewhere it would let anyone jump the queue and
//! preempt others.

use std::collections::BTreeMap;

use api::kueue::{PRIORITY_CLASS_LABEL, WorkloadPriorityClass};
use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::queues::QueueSet;
use crate::translate::{PRIORITY_ANNOTATION, PrioritySource};

/// The hub's PriorityClasses and Kueue WorkloadPriorityClasses: value by name, and the global
/// default PriorityClass's value.
#[derive(Debug, Default)]
pub(super) struct Priorities {
    by_name: BTreeMap<String, i32>,
    workload_by_name: BTreeMap<String, i32>,
    default: i32,
}

impl Priorities {
    pub(super) fn read(classes: &[PriorityClass], workload_classes: &[WorkloadPriorityClass]) -> Self {
        let by_name = classes.iter().filter_map(|c| Some((c.metadata.name.clone()?, c.value))).collect();
        let workload_by_name =
            workload_classes.iter().filter_map(|c| Some((c.metadata.name.clone()?, c.value))).collect();
        // Kubernetes admits one global default; should there be several, the highest value is
        // the one a reader can predict.
        let default = classes.iter().filter(|c| c.global_default == Some(true)).map(|c| c.value).max().unwrap_or(0);
        Priorities { by_name, workload_by_name, default }
    }

    /// The priority, or why it cannot be had: (reason, message naming the field).
    pub(super) fn resolve(
        &self,
        source: &PrioritySource,
        queue: &str,
        queues: &QueueSet,
    ) -> Result<i32, (&'static str, String)> {
        match source {
            PrioritySource::WorkloadClass(name) => self.workload_by_name.get(name).copied().ok_or_else(|| {
                (
                    "PriorityClassNotFound",
                    format!(
                        "metadata.labels[{PRIORITY_CLASS_LABEL}]: no WorkloadPriorityClass with name {name} was found"
                    ),
                )
            }),
            PrioritySource::Class(name) => self.by_name.get(name).copied().ok_or_else(|| {
                ("PriorityClassNotFound", format!("priorityClassName: no PriorityClass with name {name} was found"))
            }),
            PrioritySource::Annotation(v) if queues.allows_priority_annotation(queue) => Ok(*v),
            PrioritySource::Annotation(_) => Err((
                "PriorityNotAllowed",
                format!(
                    "metadata.annotations[{PRIORITY_ANNOTATION}]: Queue {queue} does not allow a priority set by \
                     annotation (spec.allowPriorityAnnotation); use a PriorityClass"
                ),
            )),
            PrioritySource::Unset => Ok(self.default),
        }
    }
}
