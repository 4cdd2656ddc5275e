//! Trainer's TrainJob admission on the in-memory hub: what a hub with Kubeflow Trainer v2.3.0
//! answers (the CRD's validation rules as 422, Trainer's validating webhook as 403, with their
//! exact words), run as the API server's admission step. On a real hub the same checks are
//! served by `stowage webhook` behind a ValidatingWebhookConfiguration (manifests/hub).

use std::sync::{Arc, Mutex};

use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use kube_mem::ApiError;
use kube_mem::admission::{Review, Validator};
use kube_mem::view::ReadView;
use serde::Deserialize;
use serde_json::Value;

/// The admission step for `trainjobs.trainer.kubeflow.org`. It keeps the last runtime it read,
/// by name and resourceVersion: a burst's TrainJobs mostly name one runtime, and decoding it
/// from the store for each of them was a quarter of this step.
#[derive(Debug, Default)]
pub struct TrainJobAdmission {
    last_runtime: Mutex<Option<Decoded>>,
}

/// A runtime as decoded from the store, and which version of which one it is.
#[derive(Debug)]
struct Decoded {
    plural: &'static str,
    namespace: Option<String>,
    name: String,
    resource_version: String,
    runtime: Arc<Runtime>,
}

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
        let runtime = self.runtime_of(objects, &trainjob, review.namespace);
        trainer_render::admit(&trainjob, runtime.as_deref(), old.as_ref()).map_err(|denial| {
            let causes = denial.errors().iter().map(|e| (e.field.clone(), e.body())).collect();
            ApiError::denied(denial.code(), denial.reason(), denial.message(), causes)
        })
    }
}

impl TrainJobAdmission {
    /// The runtime `spec.runtimeRef` names, as the hub holds it; `None` when there is none (or
    /// it does not decode, which the schema already rules out).
    fn runtime_of(&self, objects: &ReadView<'_>, tj: &TrainJob, namespace: Option<&str>) -> Option<Arc<Runtime>> {
        let r = &tj.spec.runtime_ref;
        let (plural, namespace) = match r.kind_or_default() {
            "TrainingRuntime" => ("trainingruntimes", namespace),
            "ClusterTrainingRuntime" => ("clustertrainingruntimes", None),
            _ => return None,
        };
        let rt = objects.lookup("trainer.kubeflow.org", "v1alpha1", plural)?;
        let stored = objects.peek(rt, namespace, &r.name)?;
        let version = stored["metadata"]["resourceVersion"].as_str().unwrap_or_default();
        // Poisoned only by a panic elsewhere with it held: the cache is then only forgotten.
        let mut last = self.last_runtime.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = last.as_ref().filter(|d| {
            d.plural == plural
                && d.namespace.as_deref() == namespace
                && d.name == r.name
                && d.resource_version == version
        }) {
            return Some(d.runtime.clone());
        }
        // Decoded from the stored object borrowed: a copy of a runtime per TrainJob write was
        // most of what this admission allocated.
        let runtime = Arc::new(match plural {
            "trainingruntimes" => Runtime::Namespaced(TrainingRuntime::deserialize(stored).ok()?),
            _ => Runtime::Cluster(ClusterTrainingRuntime::deserialize(stored).ok()?),
        });
        *last = (!version.is_empty()).then(|| Decoded {
            plural,
            namespace: namespace.map(str::to_string),
            name: r.name.clone(),
            resource_version: version.to_string(),
            runtime: runtime.clone(),
        });
        Some(runtime)
    }
}

#[cfg(test)]
mod tests {
    use kube_mem::store::{Part, WriteOptions};
    use kube_mem::{Requester, Store};
    use serde_json::json;

    use super::*;

    fn runtime(policy: Value) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "rt"},
               "spec": {"mlPolicy": policy, "template": {"spec": {"replicatedJobs": [{"name": "node",
                   "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                       "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "train"}]}}}}}]}}}})
    }

    fn trainjob(name: &str) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"runtimeRef": {"name": "rt"},
                        "trainer": {"env": [{"name": "DMLC_NUM_WORKER", "value": "2"}]}}})
    }

    /// The runtime kept from the last TrainJob is the runtime as it is now: changed in between
    /// (a new resourceVersion), the next TrainJob is admitted against the change. An XGBoost
    /// runtime reserves `DMLC_NUM_WORKER`, a torch one does not.
    #[test]
    fn a_runtime_changed_since_the_last_trainjob_is_read_again() {
        let mut s = Store::new();
        s.add_validator(Arc::new(TrainJobAdmission::default()));
        let opts = WriteOptions::default();
        let crd_rt = s.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions").cloned().expect("CRDs");
        for f in upstream::TRAINER_CRDS {
            for crd in input_limits::yaml::documents(f.text).expect("bundled YAML") {
                s.create(Requester::InProcess, &crd_rt, None, crd, &opts).expect("CRD");
            }
        }
        let rts = s.lookup("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes").cloned().expect("runtimes");
        let tjs = s.lookup("trainer.kubeflow.org", "v1alpha1", "trainjobs").cloned().expect("trainjobs");
        s.create(Requester::InProcess, &rts, None, runtime(json!({"numNodes": 1, "torch": {}})), &opts).expect("rt");
        s.create(Requester::InProcess, &tjs, Some("default"), trainjob("first"), &opts).expect("admitted under torch");
        s.update(
            Requester::InProcess,
            &rts,
            None,
            "rt",
            runtime(json!({"numNodes": 1, "xgboost": {}})),
            Part::Main,
            &opts,
        )
        .expect("runtime changed");
        let denied = s.create(Requester::InProcess, &tjs, Some("default"), trainjob("second"), &opts);
        let message = denied.map(|_| String::new()).unwrap_or_else(|e| e.message);
        assert!(message.contains("DMLC_NUM_WORKER is reserved for the XGBoost runtime"), "{message:?}");
    }
}
