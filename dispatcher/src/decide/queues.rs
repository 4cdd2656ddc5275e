//! The hub's Queues as the cycle schedules with them, and the status each Queue is given.

use std::collections::{BTreeMap, BTreeSet};

use api::kueue::ClusterQueue;
use api::stowage::{Queue, QueueStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use scheduler_core::{QueueSpec, Queues};

use super::namespaces::Selector;
use super::{Count, Observed, QueueStatusWrite, Tally, conditions};
use crate::translate;

/// The queues a cycle schedules with, and the Queue objects it cannot use, each with what is
/// wrong naming the field. An invalid Queue admits nothing (as Kueue's inactive ClusterQueue):
/// dropping the entry it cannot read would silently widen the queue's quota.
#[derive(Debug)]
pub(super) struct QueueSet {
    pub(super) queues: Queues,
    pub(super) inactive: BTreeMap<String, String>,
    /// The namespace selector of each Queue that has one.
    selectors: BTreeMap<String, Selector>,
    /// Queues whose TrainJobs may set their priority by annotation.
    annotated_priority: BTreeSet<String>,
    /// Kueue's LocalQueues by namespace and name: the ClusterQueue each points at.
    local: BTreeMap<(String, String), String>,
}

impl QueueSet {
    /// Whether TrainJobs in a namespace with these labels may use `queue`. A queue that does
    /// not exist selects every namespace here; the scheduler says it does not exist.
    pub(super) fn admits(&self, queue: &str, namespace_labels: &BTreeMap<String, String>) -> bool {
        self.selectors.get(queue).is_none_or(|s| s.matches(namespace_labels))
    }

    pub(super) fn allows_priority_annotation(&self, queue: &str) -> bool {
        self.annotated_priority.contains(queue)
    }

    /// The queue a TrainJob in `namespace` whose Kueue label names `local` schedules in: the
    /// Queue of that name, else the ClusterQueue of the LocalQueue of that name there (Kueue's
    /// words when that is missing); `None` when neither exists.
    pub(super) fn kueue_queue(&self, namespace: &str, local: &str) -> Option<String> {
        if self.queues.id(local).is_some() || self.inactive.contains_key(local) {
            return Some(local.to_string());
        }
        self.local.get(&(namespace.to_string(), local.to_string())).cloned()
    }
}

pub(super) fn read(o: &Observed) -> QueueSet {
    let mut specs: Vec<QueueSpec> = Vec::new();
    let mut inactive = BTreeMap::new();
    let mut selectors = BTreeMap::new();
    let annotated_priority =
        o.queues.iter().filter(|q| q.spec.allow_priority_annotation).filter_map(|q| q.metadata.name.clone()).collect();
    for q in &o.queues {
        let name = q.metadata.name.clone().unwrap_or_default();
        match Selector::of(q) {
            Ok(Some(s)) => {
                selectors.insert(name.clone(), s);
            }
            Ok(None) => {}
            Err(problem) => {
                inactive.insert(name, problem);
                continue;
            }
        }
        // Problems only a queue's own spec has (a quota defined twice, lending above nominal)
        // are checked on it alone, so one bad Queue does not take the others down.
        match queue_spec(q).and_then(|spec| Queues::new(vec![spec.clone()]).map(|_| spec).map_err(SpecError::from)) {
            Ok(spec) => specs.push(spec),
            Err(problem) => {
                inactive.insert(name, problem.to_string());
            }
        }
    }
    // Kueue's ClusterQueues, where the hub serves them: a Queue of the same name wins.
    let gpu_flavor: BTreeMap<&str, String> = o
        .resource_flavors
        .iter()
        .filter_map(|f| {
            let product = f.spec.node_labels.as_ref()?.get(api::stowage::GPU_PRODUCT_LABEL)?;
            Some((f.metadata.name.as_deref()?, product.clone()))
        })
        .collect();
    for cq in &o.cluster_queues {
        let name = cq.metadata.name.clone().unwrap_or_default();
        if o.queues.iter().any(|q| q.metadata.name.as_deref() == Some(name.as_str())) {
            continue;
        }
        let spec = Selector::of_cluster_queue(cq).and_then(|s| {
            selectors.insert(name.clone(), s);
            cluster_queue_spec(cq, &gpu_flavor)
                .and_then(|spec| Queues::new(vec![spec.clone()]).map(|_| spec).map_err(SpecError::from))
                .map_err(|e| e.to_string())
        });
        match spec {
            Ok(spec) => specs.push(spec),
            Err(problem) => {
                inactive.insert(name, format!("ClusterQueue: {problem}"));
            }
        }
    }
    let local = o
        .local_queues
        .iter()
        .filter_map(|lq| {
            Some(((lq.metadata.namespace.clone()?, lq.metadata.name.clone()?), lq.spec.cluster_queue.clone()))
        })
        .collect();
    if !specs.iter().any(|q| q.name == translate::DEFAULT_QUEUE) && !inactive.contains_key(translate::DEFAULT_QUEUE) {
        specs.push(QueueSpec::unlimited(translate::DEFAULT_QUEUE));
    }
    if !o.workloads.is_empty() {
        specs.push(QueueSpec::unlimited(crate::translate::workload::KUEUE_QUEUE));
    }
    // Each spec is valid alone and names are unique (object names), so this cannot fail.
    let queues = Queues::new(specs).unwrap_or_else(|_| {
        Queues::new(vec![QueueSpec::unlimited(translate::DEFAULT_QUEUE)])
            .unwrap_or_else(|_| unreachable!("one queue is valid"))
    });
    QueueSet { queues, inactive, selectors, annotated_priority, local }
}

/// What makes a Queue's spec unusable, naming the field.
#[derive(Debug, thiserror::Error)]
enum SpecError {
    #[error("{field}: {value:?} is not a non-negative quantity")]
    Quantity { field: String, value: String },
    #[error("{field}: {value:?} is not one of nvidia.com/gpu, cpu, memory")]
    Resource { field: String, value: String },
    /// A problem of the quotas taken together (a quota defined twice, lending above nominal).
    #[error(transparent)]
    Quotas(#[from] scheduler_core::queue::QueueError),
}

/// A quota's resource in the core's units, by its Kubernetes name: any name with "gpu" in it
/// counts GPUs (as pods' requests do), CPU in milli-CPUs, memory in MiB.
fn resource_of(name: &str) -> Option<scheduler_core::Resource> {
    match name {
        "cpu" => Some(scheduler_core::Resource::CpuMilli),
        "memory" => Some(scheduler_core::Resource::MemoryMib),
        n if n.to_ascii_lowercase().contains("gpu") => Some(scheduler_core::Resource::Gpu),
        _ => None,
    }
}

/// A quantity of `resource` in the core's units, rounded up; the error names `field`.
fn amount(resource: scheduler_core::Resource, field: String, s: &str) -> Result<u64, SpecError> {
    let m = api::quantity::Milli::parse(s).ok().filter(|m| m.0 >= 0);
    let units = m.map(|m| match resource {
        scheduler_core::Resource::Gpu => m.ceil_units(),
        scheduler_core::Resource::CpuMilli => m.0,
        scheduler_core::Resource::MemoryMib => (m.ceil_units() + (1 << 20) - 1).div_euclid(1 << 20),
    });
    units.and_then(|u| u64::try_from(u).ok()).ok_or(SpecError::Quantity { field, value: s.to_string() })
}

fn queue_spec(q: &Queue) -> Result<QueueSpec, SpecError> {
    let quotas = q
        .spec
        .quotas
        .iter()
        .enumerate()
        .map(|(i, quota)| {
            let at = |f: &str| format!("spec.quotas[{i}].{f}");
            let resource = resource_of(&quota.resource)
                .filter(|_| ["nvidia.com/gpu", "cpu", "memory"].contains(&quota.resource.as_str()))
                .ok_or_else(|| SpecError::Resource { field: at("resource"), value: quota.resource.clone() })?;
            let optional = |f: &str, v: &Option<String>| v.as_deref().map(|s| amount(resource, at(f), s)).transpose();
            Ok(scheduler_core::Quota {
                flavor: quota.flavor.clone(),
                resource,
                nominal: amount(resource, at("nominalQuota"), &quota.nominal_quota)?,
                borrowing_limit: optional("borrowingLimit", &quota.borrowing_limit)?,
                lending_limit: optional("lendingLimit", &quota.lending_limit)?,
            })
        })
        .collect::<Result<Vec<_>, SpecError>>()?;
    Ok(QueueSpec {
        name: q.metadata.name.clone().unwrap_or_default(),
        cohort: q.spec.cohort.clone(),
        strategy: match q.spec.queueing_strategy {
            api::stowage::QueueingStrategy::StrictFIFO => scheduler_core::QueueingStrategy::StrictFifo,
            api::stowage::QueueingStrategy::BestEffortFIFO => scheduler_core::QueueingStrategy::BestEffortFifo,
        },
        weight: q.spec.weight,
        preemption: q.spec.preemption.as_ref().map(queue_preemption).unwrap_or_default(),
        quotas,
    })
}

/// A Kueue ClusterQueue as a queue: each flavor's quota under the GPU flavor its ResourceFlavor
/// names (`nvidia.com/gpu.product`, else the flavor's own name); resources other than GPUs,
/// CPU and memory are Kueue's to count and left out; a fractional fair-sharing weight is
/// rounded (at least 1).
fn cluster_queue_spec(cq: &ClusterQueue, gpu_flavor: &BTreeMap<&str, String>) -> Result<QueueSpec, SpecError> {
    let mut quotas = Vec::new();
    for (g, group) in cq.spec.resource_groups.iter().enumerate() {
        for (f, flavor) in group.flavors.iter().enumerate() {
            for (r, quota) in flavor.resources.iter().enumerate() {
                let Some(resource) = resource_of(&quota.name) else { continue };
                let at = |field: &str| format!("spec.resourceGroups[{g}].flavors[{f}].resources[{r}].{field}");
                let value = |field: &str, v: &serde_json::Value| match v {
                    serde_json::Value::String(s) => amount(resource, at(field), s),
                    serde_json::Value::Number(n) => amount(resource, at(field), &n.to_string()),
                    other => Err(SpecError::Quantity { field: at(field), value: other.to_string() }),
                };
                let optional =
                    |field: &str, v: &Option<serde_json::Value>| v.as_ref().map(|v| value(field, v)).transpose();
                quotas.push(scheduler_core::Quota {
                    flavor: gpu_flavor.get(flavor.name.as_str()).cloned().unwrap_or_else(|| flavor.name.clone()),
                    resource,
                    nominal: value("nominalQuota", &quota.nominal_quota)?,
                    borrowing_limit: optional("borrowingLimit", &quota.borrowing_limit)?,
                    lending_limit: optional("lendingLimit", &quota.lending_limit)?,
                });
            }
        }
    }
    let weight = cq.spec.fair_sharing.as_ref().and_then(|f| f.weight.as_ref()).map_or(Ok(1), |w| {
        let text = w.as_str().map_or_else(|| w.to_string(), str::to_string);
        api::quantity::Milli::parse(&text)
            .ok()
            .filter(|m| m.0 >= 0)
            .map(|m| u32::try_from(((m.0 + 500) / 1000).max(1)).unwrap_or(u32::MAX))
            .ok_or(SpecError::Quantity { field: "spec.fairSharing.weight".into(), value: text })
    })?;
    Ok(QueueSpec {
        name: cq.metadata.name.clone().unwrap_or_default(),
        cohort: cq.spec.cohort_name.clone().filter(|c| !c.is_empty()),
        strategy: match cq.spec.queueing_strategy.as_deref() {
            Some("StrictFIFO") => scheduler_core::QueueingStrategy::StrictFifo,
            _ => scheduler_core::QueueingStrategy::BestEffortFifo,
        },
        weight,
        preemption: cq.spec.preemption.as_ref().map(queue_preemption).unwrap_or_default(),
        quotas,
    })
}

fn queue_preemption(p: &api::stowage::QueuePreemption) -> scheduler_core::QueuePreemption {
    use api::stowage::{BorrowPolicy, ReclaimWithinCohort as R, WithinClusterQueue as W};
    use scheduler_core::{BorrowWithinCohort, ReclaimWithinCohort, WithinQueue};
    scheduler_core::QueuePreemption {
        within_queue: match p.within_cluster_queue {
            W::Never => WithinQueue::Never,
            W::LowerPriority => WithinQueue::LowerPriority,
            W::LowerOrNewerEqualPriority => WithinQueue::LowerOrNewerEqualPriority,
        },
        reclaim_within_cohort: match p.reclaim_within_cohort {
            R::Never => ReclaimWithinCohort::Never,
            R::LowerPriority => ReclaimWithinCohort::LowerPriority,
            R::Any => ReclaimWithinCohort::Any,
        },
        borrow_within_cohort: match &p.borrow_within_cohort {
            Some(b) if b.policy == BorrowPolicy::LowerPriority => {
                BorrowWithinCohort::LowerPriority { max_priority_threshold: b.max_priority_threshold }
            }
            _ => BorrowWithinCohort::Never,
        },
    }
}

/// A Queue's status as this cycle sees it: whether it can admit, and its TrainJobs waiting and
/// placed. Written only when it differs from what was observed.
pub(super) fn statuses(o: &Observed, set: &QueueSet, tally: &Tally, now: &Time) -> Vec<QueueStatusWrite> {
    o.queues
        .iter()
        .filter_map(|q| {
            let name = q.metadata.name.clone()?;
            let observed = q.status.clone().unwrap_or_default();
            let Count { pending, admitted } = tally.get(&name).copied().unwrap_or_default();
            let active = conditions::queue_active(set.inactive.get(&name).map(String::as_str), now);
            let mut conditions = observed.conditions.clone();
            conditions::upsert(&mut conditions, active);
            let status = QueueStatus { pending, admitted, conditions };
            (status != observed).then_some(QueueStatusWrite { name, status })
        })
        .collect()
}
