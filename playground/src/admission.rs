//! Trainer's TrainJob admission on the in-memory hub: what a hub with Kubeflow Trainer v2.3.0
//! answers (the CRD's validation rules as 422, Trainer's validating webhook as 403, with their
//! exact words), run as the API server's admission step. On a real hub the same checks are
//! served by `stowage webhook` behind a ValidatingWebhookConfiguration (manifests/hub).

use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use kube_mem::ApiError;
use kube_mem::admission::{Review, Validator};
use kube_mem::view::ReadView;
use serde::Deserialize;
use serde_json::Value;

/// The admission step for `trainjobs.trainer.kubeflow.org`.
#[derive(Debug, Default)]
pub struct TrainJobAdmission;

impl Validator for TrainJobAdmission {
    fn applies_to(&self, rt: &kube_mem::resources::ResourceType) -> bool {
        rt.group == "trainer.kubeflow.org" && rt.kind == "TrainJob"
    }

    fn validate(&self, objects: &ReadView<'_>, review: &Review<'_>) -> Result<(), ApiError> {
        // Decoded borrowed, as the runtime is below: not copied per write only to be decoded.
        let read = |v: &Value| {
            TrainJob::deserialize(v).map_err(|e| ApiError::bad_request(format!("the TrainJob does not decode: {e}")))
        };
        let trainjob = read(review.object)?;
        let old = review.old.map(read).transpose()?;
        let runtime = runtime_of(objects, &trainjob, review.namespace);
        trainer_render::admit(&trainjob, runtime.as_ref(), old.as_ref()).map_err(|denial| {
            let causes = denial.errors().iter().map(|e| (e.field.clone(), e.body())).collect();
            ApiError::denied(denial.code(), denial.reason(), denial.message(), causes)
        })
    }
}

/// The runtime `spec.runtimeRef` names, as the hub holds it; `None` when there is none (or it
/// does not decode, which the schema already rules out).
fn runtime_of(objects: &ReadView<'_>, tj: &TrainJob, namespace: Option<&str>) -> Option<Runtime> {
    let r = &tj.spec.runtime_ref;
    // Decoded from the stored object borrowed: a copy of a runtime per TrainJob write was
    // most of what this admission allocated.
    let get = |plural: &str, ns: Option<&str>| {
        let rt = objects.lookup("trainer.kubeflow.org", "v1alpha1", plural)?;
        objects.peek(rt, ns, &r.name)
    };
    match r.kind_or_default() {
        "TrainingRuntime" => get("trainingruntimes", namespace)
            .and_then(|v| TrainingRuntime::deserialize(v).ok())
            .map(Runtime::Namespaced),
        "ClusterTrainingRuntime" => get("clustertrainingruntimes", None)
            .and_then(|v| ClusterTrainingRuntime::deserialize(v).ok())
            .map(Runtime::Cluster),
        _ => None,
    }
}
