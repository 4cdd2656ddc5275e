//! A Placement's status from the member's JobSet and, while it waits, its pods' word.

use std::sync::Arc;

use api::jobset::{JobSet, JobSetCondition};
use api::stowage::{PlacementPhase, PlacementStatus};
use api::trainer::JobStatus;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// Placement status from the member's JobSet for `epoch`; `pending_reason` is the gang
/// scheduler's word on pods not yet running.
pub(crate) fn status_of(js: &JobSet, epoch: i64, pending_reason: Option<String>, timed_out: bool) -> PlacementStatus {
    let none = Default::default();
    let st = js.status.as_ref().unwrap_or(&none);
    let condition = |t: &str| api::conditions::find_true(&st.conditions, t);
    let jobs: Vec<JobStatus> = st
        .replicated_jobs_status
        .iter()
        .map(|r| JobStatus {
            name: r.name.clone(),
            ready: r.ready,
            succeeded: r.succeeded,
            failed: r.failed,
            active: r.active,
            suspended: r.suspended,
        })
        .collect();
    let started = jobs.iter().any(|j| j.ready > 0 || j.succeeded > 0);
    let (phase, finished) = if let Some(c) = condition(JobSetCondition::Completed.as_str()) {
        (PlacementPhase::Succeeded, Some(c))
    } else if let Some(c) = condition(JobSetCondition::Failed.as_str()) {
        (PlacementPhase::Failed, Some(c))
    } else if started {
        (PlacementPhase::Running, None)
    } else if timed_out {
        (PlacementPhase::Unschedulable, None)
    } else {
        (PlacementPhase::Applied, None)
    };
    let message = match phase {
        PlacementPhase::Applied | PlacementPhase::Unschedulable => pending_reason,
        _ => st.conditions.iter().find(|c| c.status == "True").map(|c| c.message.clone()),
    };
    PlacementStatus {
        phase,
        observed_epoch: epoch,
        conditions: Vec::new(),
        jobs_status: jobs,
        start_time: js.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        completion_time: finished.map(|c| c.last_transition_time.0.to_string()),
        message,
    }
}

/// The pods of JobSet `ns/jobset`.
fn of_jobset<'p>(pods: &'p [Arc<Pod>], ns: &'p str, jobset: &'p str) -> impl Iterator<Item = &'p Arc<Pod>> {
    pods.iter().filter(move |p| {
        p.metadata.namespace.as_deref() == Some(ns)
            && p.labels().get("jobset.sigs.k8s.io/jobset-name").map(String::as_str) == Some(jobset)
    })
}

/// Most of a termination message a failure's sentence carries: the end of it, where a
/// traceback says what went wrong.
const TERMINATION_TAIL: usize = 1024;

/// Why a failed JobSet failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The sentence: pod, container, reason, exit code and the end of its termination message.
    pub(crate) words: String,
    /// The pod and container whose last log lines should follow, when it left no termination
    /// message (the shell reads them: I/O).
    pub(crate) log: Option<(String, String)>,
}

/// The end of `text`, at most [`TERMINATION_TAIL`] characters: where a traceback says what went
/// wrong.
pub(crate) fn tail(text: &str) -> &str {
    let text = text.trim();
    let start = text.char_indices().rev().nth(TERMINATION_TAIL - 1).map_or(0, |(i, _)| i);
    &text[start..]
}

/// Why a failed JobSet failed, from its pods: the first (by name) container that ended with a
/// non-zero exit, its reason and code, and the end of its termination message (what a
/// container writes to /dev/termination-log, or its last log lines with
/// `terminationMessagePolicy: FallbackToLogsOnError`); without one, its log is to be read.
pub(crate) fn failure(pods: &[Arc<Pod>], ns: &str, jobset: &str) -> Option<Failure> {
    of_jobset(pods, ns, jobset)
        .filter_map(|p| {
            let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
            let (container, ended) = statuses.iter().find_map(|c| {
                let state = c.state.as_ref().and_then(|s| s.terminated.as_ref());
                let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                Some((c.name.as_str(), state.or(last).filter(|t| t.exit_code != 0)?))
            })?;
            let pod = p.metadata.name.clone().unwrap_or_default();
            let mut words = format!(
                "pod {pod} container {container}: {} (exit code {})",
                ended.reason.as_deref().unwrap_or("Error"),
                ended.exit_code
            );
            let message = ended.message.as_deref().map(tail).filter(|m| !m.is_empty());
            if let Some(m) = message {
                words.push_str(": ");
                words.push_str(m);
            }
            let log = message.is_none().then(|| (pod.clone(), container.to_string()));
            Some((pod, Failure { words, log }))
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, failure)| failure)
}

/// The first reason (by pod name) a pod of this JobSet gives for not being scheduled.
pub(crate) fn pending_reason(pods: &[Arc<Pod>], ns: &str, jobset: &str) -> Option<String> {
    of_jobset(pods, ns, jobset)
        .filter_map(|p| {
            let c = p
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            let reason =
                format!("{}: {}", c.reason.as_deref().unwrap_or_default(), c.message.as_deref().unwrap_or_default());
            Some((p.metadata.name.as_deref(), reason))
        })
        .min()
        .map(|(_, reason)| reason)
}
