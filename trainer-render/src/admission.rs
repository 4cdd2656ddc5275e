//! The hub's TrainJob admission: what Kubernetes answers when a TrainJob is created or updated
//! on a cluster with Kubeflow Trainer v2.3.0 — the API server's 422 for the CRD's rules, then
//! Trainer's validating webhook's 403 — with Kubernetes' exact text, plus Stowage's own denials
//! for TrainJobs Trainer admits but that could not run as rendered. Pure: the caller resolves
//! `spec.runtimeRef` to a runtime (or finds none) and passes the object being replaced on update.
//!
//! Which checks are whose: [`crate::CRD_RULES`] lists the CRD's (the API server answers them with
//! 422 `Invalid`, before any webhook is called: immutable fields, `managedBy`'s values, the name,
//! lengths and counts, quantity patterns); each [`FieldError`] says so in its [`Rule`]. Everything
//! else is the webhook's (403 `Forbidden`): the runtime reference, and the torch, torchtune, MPI,
//! XGBoost, Flux, Volcano and JobSet plugins' checks against the runtime with the TrainJob's
//! patches applied, then Stowage's own ([`Rule::Stowage`]).
//!
//! Not checked, because they need the cluster: Volcano's PriorityClass lookup, and the JobSet
//! plugin's refusal of a runtime-patch change while a replicated job of the TrainJob's JobSet is
//! still active (the hub knows that from the member's status).

use std::fmt;

use api::trainer::{Runtime, TrainJob};

use crate::field::{FieldError, Rule, aggregate};
use crate::validate::{RefProblem, crd_rules, queue_moves, resolve_runtime_ref, stowage_rules, webhook_rules};
use crate::{Capabilities, Draft, Input, steps};

/// The name Trainer registers its TrainJob validating webhook under; Kubernetes prefixes a
/// denial's message with `admission webhook "<name>" denied the request: `.
pub const WEBHOOK_NAME: &str = "validator.trainjob.trainer.kubeflow.org";

/// The TrainJob's group-qualified kind, as the API server names it in a 422.
pub const TRAINJOB_GROUP_KIND: &str = "TrainJob.trainer.kubeflow.org";

/// Why a TrainJob is not admitted. [`fmt::Display`] prints what follows the prefix Kubernetes
/// puts before it ([`Denial::message`] prints the whole): for the webhook, the `message` of
/// controller-runtime's denial — `ErrorList.ToAggregate().Error()`, one error as
/// `spec.runtimeRef: Invalid value: {...}: message`, several as `[a, b]` — or `unsupported
/// runtime: <kind>.<group>`; for the CRD, the aggregate the API server puts after `is invalid: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// The API server refuses the object against the CRD (HTTP 422, reason `Invalid`); Trainer's
    /// webhook is never called.
    Invalid { name: String, errors: Vec<FieldError> },
    /// The webhook finds no runtime implementation for `runtimeRef`'s group and kind (403).
    UnsupportedRuntime { key: String },
    /// The webhook denies it (403, reason `Forbidden`): Trainer's checks first, then Stowage's.
    Denied { errors: Vec<FieldError> },
}

impl Denial {
    /// The field errors (none for an unsupported runtime).
    pub fn errors(&self) -> &[FieldError] {
        match self {
            Denial::Invalid { errors, .. } | Denial::Denied { errors } => errors,
            Denial::UnsupportedRuntime { .. } => &[],
        }
    }

    /// The HTTP status Kubernetes answers with: 422 for the CRD's rules, 403 for the webhook's.
    pub fn code(&self) -> u16 {
        match self {
            Denial::Invalid { .. } => 422,
            Denial::UnsupportedRuntime { .. } | Denial::Denied { .. } => 403,
        }
    }

    /// The `metav1.Status` reason: `Invalid` or `Forbidden`.
    pub fn reason(&self) -> &'static str {
        match self {
            Denial::Invalid { .. } => "Invalid",
            Denial::UnsupportedRuntime { .. } | Denial::Denied { .. } => "Forbidden",
        }
    }

    /// The whole message a client shows: `admission webhook "validator.trainjob.trainer.kubeflow.org"
    /// denied the request: ...` or `TrainJob.trainer.kubeflow.org "<name>" is invalid: ...`.
    pub fn message(&self) -> String {
        match self {
            Denial::Invalid { name, .. } => format!("{TRAINJOB_GROUP_KIND} {name:?} is invalid: {self}"),
            _ => format!("admission webhook {WEBHOOK_NAME:?} denied the request: {self}"),
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::UnsupportedRuntime { key } => write!(f, "unsupported runtime: {key}"),
            Denial::Invalid { errors, .. } | Denial::Denied { errors } => f.write_str(&aggregate(errors)),
        }
    }
}

impl std::error::Error for Denial {}

/// Admits `trainjob` (created, or replacing `old`) against `runtime`, the TrainingRuntime (in the
/// TrainJob's namespace) or ClusterTrainingRuntime its `spec.runtimeRef` names, `None` when there
/// is none. The TrainJob is taken as the API server holds it after defaulting; the CRD defaults
/// `runtimeRef.apiGroup`, `runtimeRef.kind` and `managedBy` are applied where absent.
pub fn admit(trainjob: &TrainJob, runtime: Option<&Runtime>, old: Option<&TrainJob>) -> Result<(), Denial> {
    let invalid = crd_rules(trainjob, old);
    if !invalid.is_empty() {
        return Err(Denial::Invalid { name: trainjob.metadata.name.clone().unwrap_or_default(), errors: invalid });
    }
    match resolve_runtime_ref(trainjob, runtime) {
        Ok(()) => {}
        Err(RefProblem::Unsupported(key)) => return Err(Denial::UnsupportedRuntime { key }),
        Err(RefProblem::NotFound(e)) => return Err(Denial::Denied { errors: vec![e] }),
    }
    let moves = queue_moves(trainjob, old);
    let Some(runtime) = runtime else {
        return if moves.is_empty() { Ok(()) } else { Err(Denial::Denied { errors: moves }) };
    };
    let mut own = stowage_rules(trainjob, runtime);
    own.extend(moves);
    let caps = Capabilities::default();
    let input = Input { trainjob, runtime, placement: None, capabilities: &caps, ssh_key: None, jobset_uid: None };
    let mut errors = Vec::new();
    // Trainer validates against the runtime with the patches applied; patches Stowage refuses
    // to apply leave only Stowage's word.
    if !own.iter().any(|e| e.field.starts_with("spec.runtimePatches")) {
        let mut draft = Draft::default();
        match steps::patch_runtime(&input, &mut draft) {
            Ok(()) => errors.extend(webhook_rules(trainjob, runtime, &draft, old)),
            Err(e) => errors.push(e),
        }
    }
    errors.extend(own);
    errors.sort_by_key(|e| e.rule == Rule::Stowage);
    if errors.is_empty() { Ok(()) } else { Err(Denial::Denied { errors }) }
}
