//! The hub's Queues as the cycle schedules with them, and the status each Queue is given.

use std::collections::{BTreeMap, BTreeSet};

use api::stowage::{Queue, QueueStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use scheduler_core::{QueueSpec, Queues};

use super::namespaces::Selector;
use super::{Observed, QueueStatusWrite, Tally, conditions};
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
    if !specs.iter().any(|q| q.name == translate::DEFAULT_QUEUE) && !inactive.contains_key(translate::DEFAULT_QUEUE) {
        specs.push(QueueSpec::unlimited(translate::DEFAULT_QUEUE));
    }
    if !o.workloads.is_empty() {
        specs.push(QueueSpec::unlimited(crate::workload::KUEUE_QUEUE));
    }
    // Each spec is valid alone and names are unique (object names), so this cannot fail.
    let queues = Queues::new(specs).unwrap_or_else(|_| {
        Queues::new(vec![QueueSpec::unlimited(translate::DEFAULT_QUEUE)])
            .unwrap_or_else(|_| unreachable!("one queue is valid"))
    });
    QueueSet { queues, inactive, selectors, annotated_priority }
}

/// What makes a Queue's spec unusable, naming the field.
#[derive(Debug, thiserror::Error)]
enum SpecError {
    #[error("spec.quotas[{index}].{field}: {value:?} is not a non-negative quantity")]
    Quantity { index: usize, field: &'static str, value: String },
    #[error("spec.quotas[{index}].resource: {value:?} is not one of nvidia.com/gpu, cpu, memory")]
    Resource { index: usize, value: String },
    /// A problem of the quotas taken together (a quota defined twice, lending above nominal).
    #[error(transparent)]
    Quotas(#[from] scheduler_core::queue::QueueError),
}

fn queue_spec(q: &Queue) -> Result<QueueSpec, SpecError> {
    let quotas = q
        .spec
        .quotas
        .iter()
        .enumerate()
        .map(|(i, quota)| {
            let amount = |field: &'static str, s: &str| {
                api::quantity::Milli::parse(s)
                    .ok()
                    .map(|m| m.ceil_units())
                    .filter(|&v| v >= 0)
                    .map(|v| v as u64)
                    .ok_or_else(|| SpecError::Quantity { index: i, field, value: s.to_string() })
            };
            let resource = match quota.resource.as_str() {
                "nvidia.com/gpu" => scheduler_core::Resource::Gpu,
                "cpu" => scheduler_core::Resource::CpuMilli,
                "memory" => scheduler_core::Resource::MemoryMib,
                other => return Err(SpecError::Resource { index: i, value: other.to_string() }),
            };
            let optional = |field: &'static str, v: &Option<String>| v.as_deref().map(|s| amount(field, s)).transpose();
            Ok(scheduler_core::Quota {
                flavor: quota.flavor.clone(),
                resource,
                nominal: amount("nominalQuota", &quota.nominal_quota)?,
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
            let (pending, admitted) = tally.get(&name).copied().unwrap_or_default();
            let active = conditions::queue_active(set.inactive.get(&name).map(String::as_str), now);
            let mut conditions = observed.conditions.clone();
            conditions::upsert(&mut conditions, active);
            let status = QueueStatus { pending, admitted, conditions };
            (status != observed).then_some(QueueStatusWrite { name, status })
        })
        .collect()
}
