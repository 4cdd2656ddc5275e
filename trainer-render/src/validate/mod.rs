//! What Trainer v2.3.0 rejects, with Trainer's own field paths, error types and messages, plus
//! what Stowage rejects on top; each error says who answers it ([`Rule`]), and each module holds
//! what one of them refuses:
//!
//! - [`crd`]: the TrainJob CRD's OpenAPI schema and CEL rules and the API server's
//!   object-metadata rules (`manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml`). The API
//!   server answers these with 422 before any webhook runs.
//! - [`webhook`]: Trainer's TrainJob validating webhook (`pkg/webhooks/trainjob_webhook.go` →
//!   `ValidateObjects` in `pkg/runtime/core/*.go` → each plugin's `Validate`: torch, torchtune,
//!   MPI, XGBoost, Flux, Volcano, JobSet), 403.
//! - [`stowage`]: Stowage's own, for TrainJobs Trainer admits but that could not run as rendered;
//!   it asks [`member`] (what a member's API server and JobSet's webhook would refuse in the
//!   rendered objects) and [`patch_shape`] (a runtime patch field the API server would drop).
//! - [`runtime`]: the runtime's own shape and the Placement, checked only when rendering: the
//!   runtime was admitted on its own, the Placement is Stowage's.
//!
//! Here: the two render steps that run them in Trainer's order, and the error constructors.

mod crd;
mod member;
mod patch_shape;
mod runtime;
mod stowage;
mod webhook;

pub use crd::{CRD_RULES, crd_rules};
use runtime::{gang_size, placement_rules, runtime_rules};
pub(crate) use stowage::{queue_moves, stowage_rules};
pub(crate) use webhook::{RefProblem, resolve_runtime_ref, webhook_rules};

use super::field::{BadValue, ErrorType, FieldError, Rule};
use super::{Draft, Input, RenderError, Source};

/// Pods per replicated job: the rendered Jobs are Indexed, and Kubernetes rejects an Indexed Job
/// whose `parallelism` is above this.
const MAX_PODS_PER_JOB: i32 = 100_000;

fn own(t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    FieldError::new(Source::TrainJob, Rule::Stowage, t, path, v, d)
}

fn s(v: &str) -> BadValue {
    BadValue::Str(v.to_string())
}

/// The first error, as the renderer reports one.
fn first(errors: Vec<FieldError>) -> Result<(), RenderError> {
    match errors.into_iter().next() {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Render steps.

/// Render step, before the runtime patches are applied: the CRD's rules, the runtime reference,
/// Stowage's own TrainJob checks, the runtime's shape and the Placement.
pub(crate) fn check(input: &Input<'_>, _draft: &mut Draft) -> Result<(), RenderError> {
    let job = input.trainjob;
    first(crd_rules(job, None))?;
    match resolve_runtime_ref(job, Some(input.runtime)) {
        Ok(()) => {}
        Err(RefProblem::Unsupported(key)) => {
            return Err(RenderError::new(Source::TrainJob, "spec.runtimeRef", format!("unsupported runtime: {key}")));
        }
        Err(RefProblem::NotFound(e)) => return Err(e.into()),
    }
    first(runtime_rules(input.runtime))?;
    first(stowage_rules(job, input.runtime))?;
    let mut gang = Vec::new();
    gang_size(input.runtime, job, &mut gang);
    first(gang)?;
    first(placement_rules(input))
}

/// Render step, once the runtime patches are applied: the webhook's plugin checks, which Trainer
/// runs against the patched template.
pub(crate) fn check_patched(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    first(webhook_rules(input.trainjob, input.runtime, draft, None))
}
