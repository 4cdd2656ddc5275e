//! A TrainJob's priority, from what an admin defined: the PriorityClass its pods name (from the
//! runtime's template), else the cluster's global default PriorityClass, else 0. The
//! `stowage.dev/priority` annotation, which any user can set, counts only in a Queue that
//! allows it (`spec.allowPriorityAnnotation`); elsewhere it would let anyone jump the queue and
//! preempt others.

use std::collections::BTreeMap;

use k8s_openapi::api::scheduling::v1::PriorityClass;

use super::queues::QueueSet;
use crate::translate::{PRIORITY_ANNOTATION, PrioritySource};

/// The hub's PriorityClasses: value by name, and the global default's value.
#[derive(Debug, Default)]
pub(super) struct Priorities {
    by_name: BTreeMap<String, i32>,
    default: i32,
}

impl Priorities {
    pub(super) fn read(classes: &[PriorityClass]) -> Self {
        let by_name = classes.iter().filter_map(|c| Some((c.metadata.name.clone()?, c.value))).collect();
        // Kubernetes admits one global default; should there be several, the highest value is
        // the one a reader can predict.
        let default = classes.iter().filter(|c| c.global_default == Some(true)).map(|c| c.value).max().unwrap_or(0);
        Priorities { by_name, default }
    }

    /// The priority, or why it cannot be had: (reason, message naming the field).
    pub(super) fn resolve(
        &self,
        source: &PrioritySource,
        queue: &str,
        queues: &QueueSet,
    ) -> Result<i32, (&'static str, String)> {
        match source {
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
