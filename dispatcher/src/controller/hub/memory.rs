//! The dispatcher's own memory, not a hub object: the writes its caches have not caught up with
//! yet, laid over what they show, and what the last cycle asked to remember (since when each
//! placement has gone uncounted, each TrainJob's highest epoch, the nominations). Forgotten with
//! the leadership.

use std::collections::BTreeMap;

use api::kueue::Workload;
use api::stowage::Placement;
use api::trainer::JobStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::decide::{NominationWrite, Observed, PlacementWrite, Plan, Remembered, WorkloadKey};

/// Writes made but not yet seen in the caches: without them the next cycle would place a
/// TrainJob twice or count its capacity free (the scheduler's "assumed" cache).
#[derive(Debug, Default)]
pub(in crate::controller) struct Written {
    placements: BTreeMap<(String, String), Placement>,
    statuses: BTreeMap<(String, String), (Vec<Condition>, Vec<JobStatus>)>,
    /// The last cycle's memory of placements reported Running and not counted (see
    /// [`Observed::uncounted_since`]); forgotten with the leadership.
    uncounted_since: BTreeMap<api::stowage::PlacementKey, k8s_openapi::jiff::Timestamp>,
    /// The last cycle's memory of each TrainJob's highest epoch (see [`Observed::epochs`]).
    epochs: BTreeMap<String, i64>,
    /// Workloads as the nominations applied left them, by the resourceVersion they replaced.
    workloads: BTreeMap<(String, String), (Option<String>, Workload)>,
    /// The last cycle's memory of the Workloads it nominates.
    kueue_memory: BTreeMap<WorkloadKey, Remembered>,
}

impl Written {
    /// What the cycle's plan asks to be remembered for the next one.
    pub(in crate::controller) fn remember(&mut self, plan: &Plan) {
        self.uncounted_since = plan.uncounted_since.clone();
        self.epochs = plan.epochs.clone();
        self.kueue_memory = plan.kueue_memory.clone();
    }

    /// A Placement as its write left it.
    pub(in crate::controller) fn placed(&mut self, w: &PlacementWrite, p: Placement) {
        self.placements.insert((w.namespace.clone(), w.name.clone()), p);
    }

    /// A TrainJob's status (by namespace and name) as its write left it.
    pub(in crate::controller) fn status_written(
        &mut self,
        trainjob: (String, String),
        conditions: Vec<Condition>,
        jobs: Vec<JobStatus>,
    ) {
        self.statuses.insert(trainjob, (conditions, jobs));
    }

    /// A Workload as its nomination left it, with the resourceVersion the write replaced.
    pub(in crate::controller) fn nominated(&mut self, n: &NominationWrite, w: Workload) {
        let replaced = n.apply.pointer("/metadata/resourceVersion").and_then(|v| v.as_str()).map(str::to_string);
        self.workloads.insert((n.namespace.clone(), n.name.clone()), (replaced, w));
    }

    /// Lays unseen writes over the observed objects, forgetting those the caches now show.
    pub(in crate::controller) fn overlay(&mut self, o: &mut Observed) {
        o.uncounted_since = self.uncounted_since.clone();
        o.epochs = self.epochs.clone();
        o.kueue_memory = self.kueue_memory.clone();
        let key =
            |m: &kube::api::ObjectMeta| (m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default());
        self.placements.retain(|k, ours| match o.placements.iter_mut().find(|p| key(&p.metadata) == *k) {
            Some(seen) if seen.spec.epoch >= ours.spec.epoch => false,
            Some(seen) => {
                *seen = ours.clone();
                true
            }
            None => {
                o.placements.push(ours.clone());
                true
            }
        });
        self.statuses.retain(|k, (conditions, jobs)| {
            let Some(tj) = o.trainjobs.iter_mut().find(|t| key(&t.metadata) == *k) else { return false };
            let status = tj.status.get_or_insert_with(Default::default);
            if status.conditions == *conditions && status.jobs_status == *jobs {
                return false;
            }
            status.conditions = conditions.clone();
            status.jobs_status = jobs.clone();
            true
        });
        // A cached Workload still at the version a nomination replaced is shown as written.
        self.workloads.retain(|k, (replaced, ours)| {
            let Some(seen) = o.workloads.iter_mut().find(|w| key(&w.metadata) == *k) else { return false };
            let stale = seen.metadata.resource_version == *replaced;
            if stale {
                *seen = ours.clone();
            }
            stale
        });
    }
}
