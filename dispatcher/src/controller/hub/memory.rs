//! The dispatcher's own memory, not a hub object: the writes its caches have not caught up with
//! yet, laid over what they show, and what the last cycle asked to remember (since when each
//! placement has gone uncounted, each TrainJob's highest epoch, the nominations). Forgotten with
//! the leadership.

use std::collections::BTreeMap;

use api::kueue::Workload;
use api::stowage::Placement;
use api::trainer::JobStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use crate::decide::{NominationWrite, Observed, PlacementWrite, Plan, Remembered, Translation, WorkloadKey};

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
    /// The last cycle's translations (see [`Observed::translations`]), moved in and out
    /// rather than copied: one per unfinished TrainJob.
    translations: BTreeMap<String, Translation>,
}

/// Each object's position by namespace and name (the first of two alike), so a cycle looks each
/// remembered write up once: a search of the caches per write made the overlay quadratic in a
/// burst (2,000 Placements written before the caches showed them: four million comparisons,
/// each copying both names).
fn positions<'o>(metas: impl Iterator<Item = &'o ObjectMeta>) -> BTreeMap<(String, String), usize> {
    let mut at = BTreeMap::new();
    for (i, m) in metas.enumerate() {
        at.entry((m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default())).or_insert(i);
    }
    at
}

impl Written {
    /// What the cycle's plan asks to be remembered for the next one.
    pub(in crate::controller) fn remember(&mut self, plan: &mut Plan) {
        self.translations = std::mem::take(&mut plan.translations);
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
        // A cycle that does not follow loses them: it translates again.
        o.translations = std::mem::take(&mut self.translations);
        let placement_at = positions(o.placements.iter().map(|p| &p.metadata));
        self.placements.retain(|k, ours| match placement_at.get(k) {
            Some(&i) if o.placements[i].spec.epoch >= ours.spec.epoch => false,
            Some(&i) => {
                o.placements[i] = ours.clone();
                true
            }
            None => {
                o.placements.push(ours.clone());
                true
            }
        });
        let trainjob_at = positions(o.trainjobs.iter().map(|t| &t.metadata));
        self.statuses.retain(|k, (conditions, jobs)| {
            let Some(&i) = trainjob_at.get(k) else { return false };
            let status = o.trainjobs[i].status.get_or_insert_with(Default::default);
            if status.conditions == *conditions && status.jobs_status == *jobs {
                return false;
            }
            status.conditions = conditions.clone();
            status.jobs_status = jobs.clone();
            true
        });
        // A cached Workload still at the version a nomination replaced is shown as written.
        let workload_at = positions(o.workloads.iter().map(|w| &w.metadata));
        self.workloads.retain(|k, (replaced, ours)| {
            let Some(&i) = workload_at.get(k) else { return false };
            let seen = &mut o.workloads[i];
            let stale = seen.metadata.resource_version == *replaced;
            if stale {
                *seen = ours.clone();
            }
            stale
        });
    }
}

#[cfg(test)]
mod tests {
    use api::trainer::TrainJob;
    use serde_json::{Value, json};

    use super::*;

    fn placement(name: &str, epoch: i64) -> Placement {
        serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"trainJobUid": name, "epoch": epoch}}))
        .expect("placement")
    }

    fn trainjob(name: &str, reason: Option<&str>) -> TrainJob {
        let conditions: Vec<Value> = reason
            .map(|r| {
                json!({"type": "Suspended", "status": "False", "reason": r, "message": "",
                            "lastTransitionTime": "2026-12-03T00:00:00Z"})
            })
            .into_iter()
            .collect();
        serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"runtimeRef": {"name": "torch"}},
            "status": {"conditions": conditions}}))
        .expect("trainjob")
    }

    fn conditions(tj: &TrainJob) -> Vec<Condition> {
        tj.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default()
    }

    /// Each remembered write is laid over its object by name among many (the lookup is by an
    /// index now, not a search): an unseen Placement is added, one the cache shows at an older
    /// epoch replaced, one it shows at the same epoch forgotten; a status the cache shows is
    /// forgotten, another laid over its TrainJob, one of a TrainJob gone forgotten.
    #[test]
    fn writes_are_laid_over_their_objects_and_forgotten_once_seen() {
        let mut w = Written::default();
        let key = |n: &str| ("ns".to_string(), n.to_string());
        w.placements.insert(key("p-new"), placement("p-new", 1));
        w.placements.insert(key("p-older"), placement("p-older", 2));
        w.placements.insert(key("p-seen"), placement("p-seen", 1));
        let written = conditions(&trainjob("x", Some("Placed")));
        w.statuses.insert(key("tj-seen"), (written.clone(), Vec::new()));
        w.statuses.insert(key("tj-behind"), (written.clone(), Vec::new()));
        w.statuses.insert(key("tj-gone"), (written.clone(), Vec::new()));
        let mut o = Observed {
            placements: (0..500)
                .map(|i| placement(&format!("other-{i}"), 1))
                .chain([placement("p-older", 1), placement("p-seen", 1)])
                .collect(),
            trainjobs: (0..500)
                .map(|i| trainjob(&format!("other-{i}"), None))
                .chain([trainjob("tj-seen", Some("Placed")), trainjob("tj-behind", None)])
                .collect(),
            ..Observed::default()
        };
        w.overlay(&mut o);
        let epoch = |o: &Observed, n: &str| {
            o.placements
                .iter()
                .filter(|p| p.metadata.name.as_deref() == Some(n))
                .map(|p| p.spec.epoch)
                .collect::<Vec<_>>()
        };
        assert_eq!(o.placements.len(), 503, "the unseen Placement added, none twice");
        assert_eq!(epoch(&o, "p-new"), [1]);
        assert_eq!(epoch(&o, "p-older"), [2], "the cache's older epoch is shown as written");
        assert_eq!(epoch(&o, "p-seen"), [1]);
        let behind = o.trainjobs.iter().find(|t| t.metadata.name.as_deref() == Some("tj-behind")).expect("tj");
        assert_eq!(conditions(behind), written, "the status laid over the TrainJob the cache shows behind");
        assert_eq!(
            w.placements.keys().cloned().collect::<Vec<_>>(),
            [key("p-new"), key("p-older")],
            "the Placement seen at its epoch forgotten"
        );
        assert_eq!(w.statuses.keys().cloned().collect::<Vec<_>>(), [key("tj-behind")], "seen and gone forgotten");
    }
}
