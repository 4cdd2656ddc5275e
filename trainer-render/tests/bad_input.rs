//! Bad input, one case per row: `render` rejects it naming the object at fault (TrainJob, runtime
//! or Placement), the exact field path a user has to change, and what is expected there. Near
//! misses that Trainer accepts still render, and no mutation of a TrainJob makes `render` panic.

use std::panic::{AssertUnwindSafe, catch_unwind};

use api::stowage::{Placement, PlacementSpec, PodSetPlacement};
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use serde_json::{Value, json};
use trainer_render::{Capabilities, GangScheduler, Input, Object, RenderError, Source, SshKeyPair, render};

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream");
const UID: &str = "3f2c0d6e-1111-2222-3333-444455556666";

const TORCH: &str = "torch_distributed.yaml";
const TORCHTUNE: &str = "torchtune/llama3_2/llama3_2_1B.yaml";
const MPI: &str = "mpi_distributed.yaml";
const DEEPSPEED: &str = "deepspeed_distributed.yaml";
const XGBOOST: &str = "xgboost_distributed.yaml";

/// Every upstream runtime file, relative to `trainer/runtimes`.
const ALL_RUNTIMES: [&str; 10] = [
    TORCH,
    TORCHTUNE,
    "torchtune/llama3_2/llama3_2_3B.yaml",
    "torchtune/qwen2_5/qwen2_5_1.5B.yaml",
    "data-cache/torch_distributed_with_cache.yaml",
    MPI,
    DEEPSPEED,
    "mlx_distributed.yaml",
    "jax_distributed.yaml",
    XGBOOST,
];

/// An upstream ClusterTrainingRuntime as JSON, to edit. Read through the typed object, so
/// quantities written as YAML integers become the strings a JSON round trip expects.
fn runtime_json(file: &str) -> Value {
    let path = format!("{UPSTREAM}/trainer/runtimes/{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let rt: ClusterTrainingRuntime = input_limits::yaml::from_str(&text).expect("runtime parses");
    serde_json::to_value(rt).expect("runtime serialises")
}

fn edited(mut v: Value, edit: impl FnOnce(&mut Value)) -> Value {
    edit(&mut v);
    v
}

/// The node at `pointer`, which must exist.
fn at<'a>(v: &'a mut Value, pointer: &str) -> &'a mut Value {
    v.pointer_mut(pointer).unwrap_or_else(|| panic!("no {pointer}"))
}

fn cluster(v: Value) -> Runtime {
    Runtime::Cluster(serde_json::from_value(v).expect("ClusterTrainingRuntime"))
}

/// The same runtime as a TrainingRuntime in `namespace`.
fn namespaced(mut v: Value, namespace: &str) -> Runtime {
    v["kind"] = json!("TrainingRuntime");
    v["metadata"]["namespace"] = json!(namespace);
    Runtime::Namespaced(serde_json::from_value::<TrainingRuntime>(v).expect("TrainingRuntime"))
}

/// JSON merge patch (RFC 7386): objects merge, null removes, anything else replaces.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// A TrainJob that renders against `rt`, with `patch` merged in.
fn trainjob_json(rt: &Value, patch: &Value) -> Value {
    let mut v = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "job-1", "namespace": "team-a", "uid": UID},
        "spec": {
            "runtimeRef": {"name": rt["metadata"]["name"]},
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {
                    "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"},
                    "limits": {"nvidia.com/gpu": "8"}
                },
                "env": [{"name": "LR", "value": "0.001"}]
            }
        }
    });
    merge(&mut v, patch);
    v
}

fn trainjob(rt: &Value, patch: Value) -> TrainJob {
    serde_json::from_value(trainjob_json(rt, &patch)).expect("trainjob deserialises")
}

fn placement(pod_sets: &[&str], epoch: i64) -> Placement {
    let pod_sets = pod_sets
        .iter()
        .map(|name| PodSetPlacement { name: (*name).into(), count: 1, ..PodSetPlacement::default() })
        .collect();
    Placement::new(
        "job-1",
        PlacementSpec {
            train_job_uid: UID.into(),
            cluster: Some("east".into()),
            epoch,
            pod_sets,
            backoff: Vec::new(),
            ranking: Vec::new(),
            queue: None,
        },
    )
}

fn key() -> SshKeyPair {
    SshKeyPair {
        private_pem: "-----BEGIN EC PRIVATE KEY-----\nfixture\n-----END EC PRIVATE KEY-----\n".into(),
        public_openssh: "ecdsa-sha2-nistp521 AAAAfixture".into(),
    }
}

/// Renders, turning a panic into an error message.
fn try_render(
    tj: &TrainJob,
    rt: &Runtime,
    placement: Option<&Placement>,
    caps: &Capabilities,
    ssh_key: Option<&SshKeyPair>,
) -> Result<Result<Vec<Object>, RenderError>, String> {
    let input = Input { trainjob: tj, runtime: rt, placement, capabilities: caps, ssh_key, jobset_uid: Some(UID) };
    catch_unwind(AssertUnwindSafe(|| render(&input))).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "panic".into())
    })
}

/// One bad input and the error it must get.
struct Case {
    what: &'static str,
    trainjob: TrainJob,
    runtime: Runtime,
    placement: Option<Placement>,
    ssh_key: bool,
    object: Source,
    path: String,
    /// A piece of the problem text that says what is expected.
    says: &'static str,
}

impl Case {
    /// A TrainJob (base job with `patch` merged) against an unmodified cluster runtime.
    fn job(what: &'static str, file: &str, patch: Value) -> Self {
        let rt = runtime_json(file);
        Case::with_runtime(what, cluster(rt.clone()), trainjob(&rt, patch))
    }

    fn with_runtime(what: &'static str, runtime: Runtime, trainjob: TrainJob) -> Self {
        Case {
            what,
            trainjob,
            runtime,
            placement: None,
            ssh_key: true,
            object: Source::TrainJob,
            path: String::new(),
            says: "",
        }
    }

    fn rejects(mut self, object: Source, path: impl Into<String>, says: &'static str) -> Self {
        self.object = object;
        self.path = path.into();
        self.says = says;
        self
    }

    fn check(&self) -> Result<(), String> {
        let caps = Capabilities { gang_scheduler: GangScheduler::Volcano, ..Capabilities::default() };
        let key = key();
        let got =
            try_render(&self.trainjob, &self.runtime, self.placement.as_ref(), &caps, self.ssh_key.then_some(&key))
                .map_err(|p| format!("panicked: {p}"))?;
        let e = match got {
            Ok(_) => return Err("rendered without error".into()),
            Err(e) => e,
        };
        let mut wrong = Vec::new();
        if e.object != self.object {
            wrong.push(format!("object {:?}, want {:?}", e.object, self.object));
        }
        if e.path != self.path {
            wrong.push(format!("path {:?}, want {:?}", e.path, self.path));
        }
        if !e.problem.contains(self.says) {
            wrong.push(format!("problem does not say {:?}", self.says));
        }
        if e.problem.trim().len() < 12 || e.problem.trim() != e.problem {
            wrong.push("problem text is too short or padded to explain anything".into());
        }
        if e.to_string() != format!("{}: {}", e.path, e.problem) {
            wrong.push(format!("displayed as {:?}", e.to_string()));
        }
        if wrong.is_empty() { Ok(()) } else { Err(format!("{} (error was {e:?})", wrong.join("; "))) }
    }
}

const PATCHED_JOB: &str = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]";

/// A runtime patch by `manager` of replicated job `job`'s pod spec.
fn pod_patch(manager: &str, job: &str, pod_spec: Value) -> Value {
    json!({
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": job, "template": {"spec": {"template": {"spec": pod_spec}}}}
        ]}}}
    })
}

fn node_selector_patch(manager: &str) -> Value {
    pod_patch(manager, "node", json!({"nodeSelector": {"pool": "a100"}}))
}

fn trainjob_cases() -> Vec<Case> {
    use Source::TrainJob as T;
    vec![
        // Counts.
        Case::job("numNodes 0", TORCH, json!({"spec": {"trainer": {"numNodes": 0}}})).rejects(
            T,
            "spec.trainer.numNodes",
            "at least 1",
        ),
        Case::job("numNodes negative", TORCH, json!({"spec": {"trainer": {"numNodes": -3}}})).rejects(
            T,
            "spec.trainer.numNodes",
            "at least 1",
        ),
        Case::job("numNodes past an Indexed Job", MPI, json!({"spec": {"trainer": {"numNodes": 2_147_483_647}}}))
            .rejects(T, "spec.trainer.numNodes", "at most 100000"),
        Case::job("numProcPerNode 0", TORCH, json!({"spec": {"trainer": {"numProcPerNode": 0}}})).rejects(
            T,
            "spec.trainer.numProcPerNode",
            "at least 1",
        ),
        Case::job("numProcPerNode negative on MPI", MPI, json!({"spec": {"trainer": {"numProcPerNode": -8}}})).rejects(
            T,
            "spec.trainer.numProcPerNode",
            "at least 1",
        ),
        // runtimeRef.
        Case::job(
            "kind TrainingRuntime for a ClusterTrainingRuntime",
            TORCH,
            json!({"spec": {"runtimeRef": {"kind": "TrainingRuntime"}}}),
        )
        .rejects(T, "spec.runtimeRef", "TrainingRuntime.trainer.kubeflow.org \"torch-distributed\" not found: specified trainingRuntime must be created"),
        {
            let rt = runtime_json(TORCH);
            let tj = trainjob(&rt, json!({"spec": {"runtimeRef": {"kind": "ClusterTrainingRuntime"}}}));
            Case::with_runtime("kind ClusterTrainingRuntime for a TrainingRuntime", namespaced(rt, "team-a"), tj)
                .rejects(T, "spec.RuntimeRef", "ClusterTrainingRuntime.trainer.kubeflow.org \"torch-distributed\" not found")
        },
        {
            let rt = runtime_json(TORCH);
            let tj = trainjob(&rt, json!({}));
            Case::with_runtime("kind left to its default for a TrainingRuntime", namespaced(rt, "team-a"), tj).rejects(
                T,
                "spec.RuntimeRef",
                "Invalid value: {\"name\":\"torch-distributed\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: ClusterTrainingRuntime.trainer.kubeflow.org",
            )
        },
        Case::job("unknown kind", TORCH, json!({"spec": {"runtimeRef": {"kind": "PyTorchJob"}}})).rejects(
            T,
            "spec.runtimeRef",
            "unsupported runtime: PyTorchJob.trainer.kubeflow.org",
        ),
        Case::job("kind in the wrong case", TORCH, json!({"spec": {"runtimeRef": {"kind": "trainingruntime"}}}))
            .rejects(T, "spec.runtimeRef", "unsupported runtime: trainingruntime.trainer.kubeflow.org"),
        Case::job("wrong apiGroup", TORCH, json!({"spec": {"runtimeRef": {"apiGroup": "kubeflow.org"}}})).rejects(
            T,
            "spec.runtimeRef",
            "unsupported runtime: ClusterTrainingRuntime.kubeflow.org",
        ),
        Case::job("empty apiGroup", TORCH, json!({"spec": {"runtimeRef": {"apiGroup": ""}}})).rejects(
            T,
            "spec.runtimeRef",
            "unsupported runtime: ClusterTrainingRuntime",
        ),
        Case::job("runtime name differs", TORCH, json!({"spec": {"runtimeRef": {"name": "torch-distributed-v2"}}}))
            .rejects(T, "spec.RuntimeRef", "ClusterTrainingRuntime.trainer.kubeflow.org \"torch-distributed-v2\" not found"),
        Case::job("empty runtime name", TORCH, json!({"spec": {"runtimeRef": {"name": ""}}})).rejects(
            T,
            "spec.runtimeRef.name",
            "Invalid value: \"\": spec.runtimeRef.name in body should be at least 1 chars long",
        ),
        {
            let rt = runtime_json(TORCH);
            let tj = trainjob(&rt, json!({"spec": {"runtimeRef": {"kind": "TrainingRuntime"}}}));
            Case::with_runtime("TrainingRuntime in another namespace", namespaced(rt, "team-b"), tj).rejects(
                T,
                "spec.runtimeRef",
                "TrainingRuntime.trainer.kubeflow.org \"torch-distributed\" not found",
            )
        },
        // Sections the runtime has no job for.
        {
            let rt = edited(runtime_json(TORCH), |v| {
                *at(v, "/spec/template/spec/replicatedJobs/0/template/metadata") = json!({});
            });
            let tj = trainjob(&rt, json!({}));
            Case::with_runtime("spec.trainer without a trainer job", cluster(rt), tj).rejects(
                T,
                "spec.trainer",
                "trainer.kubeflow.org/trainjob-ancestor-step=trainer",
            )
        },
        Case::job(
            "dataset initializer without the job",
            TORCH,
            json!({"spec": {"initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}}}}),
        )
        .rejects(T, "spec.runtimeRef", "must have dataset-initializer job when trainJob is configured with input datasetConfig"),
        Case::job(
            "model initializer without the job",
            TORCH,
            json!({"spec": {"initializer": {"model": {"storageUri": "hf://meta-llama/Llama-3.2-1B"}}}}),
        )
        .rejects(T, "spec.runtimeRef", "must have model-initializer job when trainJob is configured with input modelConfig"),
        {
            let rt = edited(runtime_json(TORCHTUNE), |v| {
                let c = at(v, "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0");
                c.as_object_mut().expect("container").remove("volumeMounts");
            });
            let tj = trainjob(&rt, json!({"spec": {"initializer": {"dataset": {"storageUri": "hf://a/b"}}}}));
            Case::with_runtime("dataset initializer not mounting the volume", cluster(rt), tj).rejects(
                T,
                "spec.runtimeRef",
                "must have volumeMount with name - initializer in container dataset-initializer of the dataset-initializer job",
            )
        },
        // storageUri (CRD rule: '' or scheme://...).
        Case::job(
            "storageUri without a scheme",
            TORCHTUNE,
            json!({"spec": {"initializer": {"dataset": {"storageUri": "tatsu-lab/alpaca"}}}}),
        )
        .rejects(T, "spec.initializer.dataset.storageUri", "storageUri may be empty, or it must be a valid URI (scheme://...)"),
        Case::job(
            "storageUri with one slash",
            TORCHTUNE,
            json!({"spec": {"initializer": {"dataset": {"storageUri": "hf:/tatsu-lab/alpaca"}}}}),
        )
        .rejects(T, "spec.initializer.dataset.storageUri", "storageUri may be empty, or it must be a valid URI (scheme://...)"),
        Case::job(
            "storageUri with nothing after the scheme",
            TORCHTUNE,
            json!({"spec": {"initializer": {"dataset": {"storageUri": "s3://"}}}}),
        )
        .rejects(T, "spec.initializer.dataset.storageUri", "storageUri may be empty, or it must be a valid URI (scheme://...)"),
        Case::job(
            "storageUri scheme starting with a digit",
            TORCHTUNE,
            json!({"spec": {"initializer": {"dataset": {"storageUri": "3s://bucket/key"}}}}),
        )
        .rejects(T, "spec.initializer.dataset.storageUri", "storageUri may be empty, or it must be a valid URI (scheme://...)"),
        Case::job(
            "storageUri with a line break",
            TORCHTUNE,
            json!({"spec": {"initializer": {"dataset": {"storageUri": "s3://bucket/a\nb"}}}}),
        )
        .rejects(T, "spec.initializer.dataset.storageUri", "storageUri may be empty, or it must be a valid URI (scheme://...)"),
        Case::job(
            "model storageUri without a scheme",
            TORCHTUNE,
            json!({"spec": {"initializer": {"model": {"storageUri": "meta-llama/Llama-3.2-1B-Instruct"}}}}),
        )
        .rejects(T, "spec.initializer.model.storageUri", "storageUri may be empty, or it must be a valid URI (scheme://...)"),
        // Quantities.
        Case::job(
            "GPU limit that is not a quantity",
            TORCH,
            json!({"spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "eight"}}}}}),
        )
        .rejects(T, "spec.trainer.resourcesPerNode.limits.nvidia.com/gpu", "in body should match '^(\\+|-)?"),
        Case::job(
            "memory in GB",
            TORCH,
            json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"memory": "64GB"}}}}}),
        )
        .rejects(T, "spec.trainer.resourcesPerNode.requests.memory", "in body should match '^(\\+|-)?"),
        Case::job(
            "two decimal points",
            TORCH,
            json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"cpu": "1.2.3"}}}}}),
        )
        .rejects(T, "spec.trainer.resourcesPerNode.requests.cpu", "in body should match '^(\\+|-)?"),
        Case::job(
            "quantity with a space",
            TORCH,
            json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"cpu": " 8"}}}}}),
        )
        .rejects(T, "spec.trainer.resourcesPerNode.requests.cpu", "in body should match '^(\\+|-)?"),
        Case::job(
            "negative quantity",
            TORCH,
            json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"cpu": "-2"}}}}}),
        )
        .rejects(T, "spec.trainer.resourcesPerNode.requests.cpu", "negative"),
        Case::job(
            "quantity with too many digits",
            TORCH,
            json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"memory": "99999999999999999999999"}}}}}),
        )
        .rejects(T, "spec.trainer.resourcesPerNode.requests.memory", "digits"),
        Case::job(
            "quantity past 64 bits",
            TORCH,
            json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"memory": "9000000000Pi"}}}}}),
        )
        .rejects(T, "spec.trainer.resourcesPerNode.requests.memory", "more than Kubernetes can account for"),
        // Env the ML policy owns.
        Case::job(
            "PET_NNODES on a torch runtime",
            TORCH,
            json!({"spec": {"trainer": {"env": [{"name": "LR", "value": "1"}, {"name": "PET_NNODES", "value": "4"}]}}}),
        )
        .rejects(
            T,
            "spec.trainer.env",
            r#"Invalid value: [{"name":"LR","value":"1"},{"name":"PET_NNODES","value":"4"}]: must not have reserved envs, invalid envs configured: [PET_NNODES]"#,
        ),
        Case::job(
            "PET_MASTER_ADDR on torchtune",
            TORCHTUNE,
            json!({"spec": {"trainer": {"env": [{"name": "PET_MASTER_ADDR", "value": "x"}]}}}),
        )
        .rejects(T, "spec.trainer.env", "invalid envs configured: [PET_MASTER_ADDR]"),
        Case::job(
            "OMPI_MCA_orte_default_hostfile on an MPI runtime",
            MPI,
            json!({"spec": {"trainer": {"env": [
                {"name": "LR", "value": "1"},
                {"name": "OMPI_MCA_orte_default_hostfile", "value": "/tmp/h"}
            ]}}}),
        )
        .rejects(T, "spec.trainer.env", "invalid envs configured: [OMPI_MCA_orte_default_hostfile]"),
        Case::job(
            "OMPI_MCA_orte_set_default_slots on deepspeed",
            DEEPSPEED,
            json!({"spec": {"trainer": {"env": [{"name": "OMPI_MCA_orte_set_default_slots", "value": "2"}]}}}),
        )
        .rejects(T, "spec.trainer.env", "invalid envs configured: [OMPI_MCA_orte_set_default_slots]"),
        Case::job(
            "DMLC_ env on xgboost",
            XGBOOST,
            json!({"spec": {"trainer": {"env": [{"name": "DMLC_NUM_WORKER", "value": "2"}]}}}),
        )
        .rejects(T, "spec.trainer.env[0]", "Forbidden: DMLC_NUM_WORKER is reserved for the XGBoost runtime"),
        // Names, managedBy, deadline.
        Case::job("upper-case name", TORCH, json!({"metadata": {"name": "Job-1"}})).rejects(
            T,
            "metadata.name",
            "Invalid value: \"Job-1\": a lowercase RFC 1123 subdomain",
        ),
        Case::job("name starting with a digit", TORCH, json!({"metadata": {"name": "1job"}})).rejects(
            T,
            "<nil>",
            "Invalid value: metadata.name must match RFC 1035 DNS label format",
        ),
        Case::job("64-character name", TORCH, json!({"metadata": {"name": "a".repeat(64)}})).rejects(
            T,
            "<nil>",
            "Invalid value: metadata.name must be no more than 63 characters",
        ),
        Case::job("name ending in a dash", TORCH, json!({"metadata": {"name": "job-"}})).rejects(
            T,
            "metadata.name",
            "Invalid value: \"job-\": a lowercase RFC 1123 subdomain",
        ),
        Case::job("name with an underscore", TORCH, json!({"metadata": {"name": "job_1"}})).rejects(
            T,
            "metadata.name",
            "Invalid value: \"job_1\": a lowercase RFC 1123 subdomain",
        ),
        Case::job("no name", TORCH, json!({"metadata": {"name": null}})).rejects(T, "metadata.name", "Required value: name or generateName is required"),
        Case::job("managedBy Kueue's manager", TORCH, json!({"spec": {"managedBy": "kueue.x-k8s.io/manager"}}))
            .rejects(
                T,
                "spec.managedBy",
                "Invalid value: \"kueue.x-k8s.io/manager\": ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
            ),
        Case::job("empty managedBy", TORCH, json!({"spec": {"managedBy": ""}})).rejects(
            T,
            "spec.managedBy",
            "trainer.kubeflow.org/trainjob-controller",
        ),
        Case::job("activeDeadlineSeconds 0", TORCH, json!({"spec": {"activeDeadlineSeconds": 0}})).rejects(
            T,
            "spec.activeDeadlineSeconds",
            "Invalid value: 0: spec.activeDeadlineSeconds in body should be greater than or equal to 1",
        ),
        Case::job("negative activeDeadlineSeconds", TORCH, json!({"spec": {"activeDeadlineSeconds": -30}})).rejects(
            T,
            "spec.activeDeadlineSeconds",
            "Invalid value: -30: spec.activeDeadlineSeconds in body should be greater than or equal to 1",
        ),
        // What a member's API server (v1.33, with JobSet's webhook) refuses in the JobSet.
        Case::job("a name whose pods JobSet cannot name", TORCH, json!({"metadata": {"name": "a".repeat(49)}})).rejects(
            T,
            "metadata.name",
            "(64 characters), and a member's API server allows at most 63: shorten the name by 1",
        ),
        Case::job("half a GPU", TORCH, json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"nvidia.com/gpu": "0.5"}}}}}))
            .rejects(T, "spec.trainer.resourcesPerNode.requests.nvidia.com/gpu", "Invalid value: \"0.5\": must be an integer"),
        Case::job("1500m GPUs", TORCH, json!({"spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "1500m"}}}}}))
            .rejects(T, "spec.trainer.resourcesPerNode.limits.nvidia.com/gpu", "must be an integer"),
        Case::job("env name with =", TORCH, json!({"spec": {"trainer": {"env": [{"name": "A=B", "value": "1"}]}}})).rejects(
            T,
            "spec.trainer.env[0].name",
            "Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        ),
        Case::job("env name with a tab", TORCH, json!({"spec": {"trainer": {"env": [{"name": "A\tB"}]}}})).rejects(
            T,
            "spec.trainer.env[0].name",
            "printable ASCII",
        ),
        Case::job("empty env name", TORCH, json!({"spec": {"trainer": {"env": [{"name": ""}]}}})).rejects(
            T,
            "spec.trainer.env[0].name",
            "Required value",
        ),
        Case::job("label key with a space", TORCH, json!({"metadata": {"labels": {"team name": "a"}}})).rejects(
            T,
            "metadata.labels",
            "Invalid value: \"team name\": name part must consist of alphanumeric characters",
        ),
        Case::job("label key with an empty prefix", TORCH, json!({"metadata": {"labels": {"/team": "a"}}})).rejects(
            T,
            "metadata.labels",
            "prefix part must be non-empty",
        ),
        Case::job("label value of 64 characters", TORCH, json!({"metadata": {"labels": {"team": "a".repeat(64)}}}))
            .rejects(T, "metadata.labels", "must be no more than 63 characters"),
        Case::job("label value with a slash", TORCH, json!({"metadata": {"labels": {"team": "a/b"}}})).rejects(
            T,
            "metadata.labels",
            "a valid label must be an empty string",
        ),
        Case::job("annotation key with two slashes", TORCH, json!({"metadata": {"annotations": {"a/b/c": "x"}}})).rejects(
            T,
            "metadata.annotations",
            "name part must consist of alphanumeric characters",
        ),
        Case::job("MPI hostfile over 1 MiB", MPI, json!({"spec": {"trainer": {"numNodes": 50_000}}})).rejects(
            T,
            "spec.trainer.numNodes",
            "the MPI hostfile ConfigMap would hold",
        ),
    ]
}

fn patch_cases() -> Vec<Case> {
    use Source::TrainJob as T;
    let patches = |list: Vec<Value>| json!({"spec": {"runtimePatches": list}});
    let job_patch = |job: Value| {
        json!({"spec": {"runtimePatches": [{
            "manager": "example.com/tuner",
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}
        }]}})
    };
    vec![
        Case::job(
            "patch of a replicated job the runtime lacks",
            TORCH,
            patches(vec![pod_patch("example.com/a", "launcher", json!({"nodeSelector": {"pool": "a100"}}))]),
        )
        .rejects(T, "spec.runtimePatches", "must not have replicated job that doesn't exist in the runtime job template"),
        Case::job(
            "patch of a container the job lacks",
            TORCH,
            patches(vec![pod_patch("example.com/a", "node", json!({"containers": [{"name": "sidecar"}]}))]),
        )
        .rejects(T, "spec.runtimePatches", "must not have container that doesn't exist in the runtime job node"),
        Case::job(
            "patch of an init container the job lacks",
            TORCH,
            patches(vec![pod_patch(
                "example.com/a",
                "node",
                json!({"initContainers": [{"name": "fetch", "env": [{"name": "A", "value": "1"}]}]}),
            )]),
        )
        .rejects(T, "spec.runtimePatches", "must not have initContainer that doesn't exist in the runtime job node"),
        Case::job(
            "env patched into node",
            TORCH,
            patches(vec![pod_patch(
                "example.com/a",
                "node",
                json!({"containers": [{"name": "node", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}]}),
            )]),
        )
        .rejects(
            T,
            "spec.runtimePatches",
            r#"Invalid value: [{"manager":"example.com/a","trainingRuntimeSpec":{"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","env":[{"name":"NCCL_DEBUG","value":"INFO"}]}]}}}}}]}}}}]: must not have envs for the dataset-initializer, model-initializer, node containers"#,
        ),
        Case::job(
            "env patched into dataset-initializer",
            TORCHTUNE,
            patches(vec![pod_patch(
                "example.com/a",
                "dataset-initializer",
                json!({"containers": [{"name": "dataset-initializer", "env": [{"name": "A", "value": "1"}]}]}),
            )]),
        )
        .rejects(
            T,
            "spec.runtimePatches",
            "must not have envs for the dataset-initializer, model-initializer, node containers",
        ),
        Case::job("manager without a domain", TORCH, patches(vec![node_selector_patch("my-controller")])).rejects(
            T,
            "spec.runtimePatches.manager",
            "Invalid value: \"my-controller\": must be a domain-prefixed path (such as \"acme.io/foo\")",
        ),
        Case::job("manager with an upper-case domain", TORCH, patches(vec![node_selector_patch("Example.com/x")]))
            .rejects(T, "spec.runtimePatches.manager", "Invalid value: \"Example.com\": a lowercase RFC 1123 subdomain"),
        Case::job("manager with an empty path", TORCH, patches(vec![node_selector_patch("example.com/")])).rejects(
            T,
            "spec.runtimePatches.manager",
            "Invalid value: \"example.com/\": must be a domain-prefixed path",
        ),
        Case::job("manager domain starting with a dash", TORCH, patches(vec![node_selector_patch("-ex.com/x")]))
            .rejects(T, "spec.runtimePatches.manager", "Invalid value: \"-ex.com\": a lowercase RFC 1123 subdomain"),
        Case::job("manager path with a space", TORCH, patches(vec![node_selector_patch("example.com/a b")])).rejects(
            T,
            "spec.runtimePatches.manager",
            "Invalid value: \"a b\": Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ),
        Case::job(
            "duplicate managers",
            TORCH,
            patches(vec![
                node_selector_patch("example.com/a"),
                node_selector_patch("example.com/b"),
                node_selector_patch("example.com/a"),
            ]),
        )
        .rejects(T, "spec.runtimePatches[2]", r#"Duplicate value: {"manager":"example.com/a"}"#),
        Case::job(
            "17 patches",
            TORCH,
            patches((0..17).map(|i| node_selector_patch(&format!("example.com/m{i}"))).collect()),
        )
        .rejects(T, "spec.runtimePatches", "Too many: 17: must have at most 16 items"),
        Case::job("patch of replicas", TORCH, job_patch(json!({"name": "node", "replicas": 4}))).rejects(
            T,
            format!("{PATCHED_JOB}.replicas"),
            "not a field a runtime patch may set",
        ),
        Case::job(
            "patch of parallelism",
            TORCH,
            job_patch(json!({"name": "node", "template": {"spec": {"parallelism": 4}}})),
        )
        .rejects(T, format!("{PATCHED_JOB}.template.spec.parallelism"), "not a field a runtime patch may set"),
        Case::job(
            "patch of a container image",
            TORCH,
            patches(vec![pod_patch("example.com/a", "node", json!({"containers": [{"name": "node", "image": "x"}]}))]),
        )
        .rejects(
            T,
            format!("{PATCHED_JOB}.template.spec.template.spec.containers[0].image"),
            "not a field a runtime patch may set",
        ),
        Case::job(
            "patch of the ML policy",
            TORCH,
            patches(vec![json!({"manager": "example.com/a", "trainingRuntimeSpec": {"mlPolicy": {"numNodes": 9}}})]),
        )
        .rejects(
            T,
            "spec.runtimePatches[0].trainingRuntimeSpec.mlPolicy",
            "not a field a runtime patch may set",
        ),
        Case::job(
            "patch entry with an unknown field",
            TORCH,
            patches(vec![json!({"manager": "example.com/a", "patch": {}})]),
        )
        .rejects(T, "spec.runtimePatches[0].patch", "not a field of a runtime patch"),
        Case::job(
            "null in a patch",
            TORCH,
            patches(vec![pod_patch("example.com/a", "node", json!({"nodeSelector": null}))]),
        )
        .rejects(T, format!("{PATCHED_JOB}.template.spec.template.spec.nodeSelector"), "null"),
        Case::job(
            "replicatedJobs that is not a list",
            TORCH,
            patches(vec![json!({
                "manager": "example.com/a",
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": {"name": "node"}}}}
            })]),
        )
        .rejects(
            T,
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs",
            "must be a list",
        ),
        Case::job("patched job without a name", TORCH, job_patch(json!({"template": {}}))).rejects(
            T,
            format!("{PATCHED_JOB}.name"),
            "Required value",
        ),
        Case::job("patched job name that is a number", TORCH, job_patch(json!({"name": 7}))).rejects(
            T,
            format!("{PATCHED_JOB}.name"),
            "must be a string",
        ),
    ]
}

/// Bad runtimes (and inputs the runtime decides about), Source::Runtime.
fn runtime_cases() -> Vec<Case> {
    use Source::Runtime as R;
    let job = "spec.template.spec.replicatedJobs";
    let bad = |what: &'static str, file: &str, edit: &dyn Fn(&mut Value)| {
        let rt = edited(runtime_json(file), edit);
        let tj = trainjob(&rt, json!({}));
        Case::with_runtime(what, cluster(rt), tj)
    };
    vec![
        bad("container quantity that is not one", TORCH, &|v| {
            *at(v, "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0") = json!({
                "name": "node", "image": "pytorch", "resources": {"limits": {"cpu": "lots"}}
            });
        })
        .rejects(
            R,
            format!("{job}[0].template.spec.template.spec.containers[0].resources.limits.cpu"),
            "in body should match '^(\\+|-)?",
        ),
        bad("init container quantity that is not one", TORCHTUNE, &|v| {
            let pod = &mut v["spec"]["template"]["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"];
            pod["initContainers"] = json!([
                {"name": "fetch", "image": "busybox", "resources": {"requests": {"memory": "1 Gi"}}}
            ]);
        })
        .rejects(
            R,
            format!("{job}[2].template.spec.template.spec.initContainers[0].resources.requests.memory"),
            "in body should match '^(\\+|-)?",
        ),
        Case {
            ssh_key: false,
            ..Case::job("MPI runtime without an SSH key", MPI, json!({})).rejects(R, "spec.mlPolicy.mpi", "SSH key")
        },
        Case {
            ssh_key: false,
            ..Case::job("DeepSpeed runtime without an SSH key", DEEPSPEED, json!({})).rejects(
                R,
                "spec.mlPolicy.mpi",
                "SSH key",
            )
        },
        bad("two ML policies", TORCH, &|v| v["spec"]["mlPolicy"]["mpi"] = json!({})).rejects(
            R,
            "spec.mlPolicy",
            "Invalid value: Only one of the policy can be configured",
        ),
        bad("mlPolicy.numNodes 0", TORCH, &|v| v["spec"]["mlPolicy"]["numNodes"] = json!(0)).rejects(
            R,
            "spec.mlPolicy.numNodes",
            "between 1 and 100000",
        ),
        bad("env injection into a missing job", TORCH, &|v| {
            v["spec"]["mlPolicy"]["torch"] =
                json!({"envInjection": {"targets": [{"jobName": "launcher", "containerNames": ["x"]}]}});
        })
        .rejects(
            Source::TrainJob,
            "spec.runtimeRef",
            r#"Invalid value: {"jobName":"launcher","containerNames":["x"]}: envInjection target podSet "launcher" container "x" not found in runtime template"#,
        ),
        bad("env injection into node", TORCH, &|v| {
            v["spec"]["mlPolicy"]["torch"] =
                json!({"envInjection": {"targets": [{"jobName": "node", "containerNames": ["node"]}]}});
        })
        .rejects(
            R,
            "spec.mlPolicy.torch.envInjection.targets[0].containerNames",
            "Invalid value: containerNames must not include the main node container",
        ),
        bad("env injection into a missing container", TORCH, &|v| {
            v["spec"]["mlPolicy"]["torch"] =
                json!({"envInjection": {"targets": [{"jobName": "node", "containerNames": ["sidecar"]}]}});
        })
        .rejects(Source::TrainJob, "spec.runtimeRef", "envInjection target podSet \"node\" container \"sidecar\" not found"),
        bad("Intel MPI", MPI, &|v| v["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = json!("Intel")).rejects(
            R,
            "spec.mlPolicy.mpi.mpiImplementation",
            "OpenMPI",
        ),
        bad("launcher as node without a node job", MPI, &|v| {
            at(v, "/spec/template/spec/replicatedJobs").as_array_mut().expect("jobs").truncate(1);
        })
        .rejects(
            Source::TrainJob,
            "spec.trainer.numNodes",
            "Invalid value: 2: must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
        ),
        bad("no replicated jobs", TORCH, &|v| *at(v, "/spec/template/spec/replicatedJobs") = json!([])).rejects(
            R,
            job,
            "at least one",
        ),
        bad("a job name used twice", DEEPSPEED, &|v| {
            *at(v, "/spec/template/spec/replicatedJobs/1/name") = json!("node");
        })
        .rejects(R, format!("{job}[1]"), r#"Duplicate value: {"name":"node"}"#),
        bad("trainer job with 2 replicas", TORCH, &|v| {
            v["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = json!(2);
        })
        .rejects(R, format!("{job}[0].replicas"), "Invalid value: 2: always must be 1"),
        bad("trainer job without a node container", TORCH, &|v| {
            *at(v, "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/containers/0/name") =
                json!("trainer");
        })
        .rejects(
            R,
            format!("{job}[0].template.spec.template.spec.containers"),
            "must contain the required container for the ancestor: trainer",
        ),
        bad("parallelism past an Indexed Job", DEEPSPEED, &|v| {
            v["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = json!(200_000);
        })
        .rejects(R, format!("{job}[1].template.spec.parallelism"), "between 0 and 100000"),
        bad("negative replicas", MPI, &|v| {
            v["spec"]["template"]["spec"]["replicatedJobs"][1]["replicas"] = json!(-1);
        })
        .rejects(R, format!("{job}[1].replicas"), "negative"),
        bad("replicas past a PodGroup", MPI, &|v| {
            v["spec"]["template"]["spec"]["replicatedJobs"][1]["replicas"] = json!(2_000_000_000);
        })
        .rejects(R, format!("{job}[1].replicas"), "minMember"),
    ]
}

fn placement_cases() -> Vec<Case> {
    use Source::Placement as P;
    vec![
        Case { placement: Some(placement(&["workers"], 1)), ..Case::job("unknown pod set", TORCH, json!({})) }.rejects(
            P,
            "spec.podSets[0].name",
            "\"workers\"",
        ),
        Case {
            placement: Some(placement(&["launcher", "node", "worker"], 1)),
            ..Case::job("third pod set unknown", MPI, json!({}))
        }
        .rejects(P, "spec.podSets[2].name", "\"worker\""),
        Case { placement: Some(placement(&["node"], -1)), ..Case::job("negative epoch", TORCH, json!({})) }.rejects(
            P,
            "spec.epoch",
            "must not be negative",
        ),
    ]
}

#[test]
fn every_bad_input_is_rejected_at_its_field() {
    let cases: Vec<Case> =
        [trainjob_cases(), patch_cases(), runtime_cases(), placement_cases()].into_iter().flatten().collect();
    let failures: Vec<String> =
        cases.iter().filter_map(|c| c.check().err().map(|e| format!("{}: {e}", c.what))).collect();
    assert!(failures.is_empty(), "{} of {} cases wrong:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert!(cases.len() >= 89, "{} cases", cases.len());
}

/// Inputs next to the bad ones that Trainer accepts: they must still render.
#[test]
fn near_misses_still_render() {
    let torch = runtime_json(TORCH);
    let tune = runtime_json(TORCHTUNE);
    let mpi = runtime_json(MPI);
    let ok = |what: &str, rt: Runtime, tj: TrainJob, placement: Option<Placement>| {
        let caps = Capabilities::default();
        let key = key();
        match try_render(&tj, &rt, placement.as_ref(), &caps, Some(&key)) {
            Ok(Ok(objects)) if matches!(objects.first(), Some(Object::JobSet(_))) => None,
            Ok(Ok(_)) => Some(format!("{what}: no JobSet first")),
            Ok(Err(e)) => Some(format!("{what}: rejected: {e}")),
            Err(p) => Some(format!("{what}: panicked: {p}")),
        }
    };
    let c = |v: &Value| cluster(v.clone());
    let failures: Vec<String> = [
        ok("base, placed", c(&torch), trainjob(&torch, json!({})), Some(placement(&["node"], 3))),
        ok(
            "explicit defaults",
            c(&torch),
            trainjob(
                &torch,
                json!({"spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"}}}),
            ),
            None,
        ),
        ok(
            "TrainingRuntime in the TrainJob's namespace",
            namespaced(torch.clone(), "team-a"),
            trainjob(&torch, json!({"spec": {"runtimeRef": {"kind": "TrainingRuntime"}}})),
            None,
        ),
        ok(
            "the longest name JobSet can name the pods of (48 + \"-node-0-1-abcde\")",
            c(&torch),
            trainjob(&torch, json!({"metadata": {"name": "a".repeat(48)}})),
            None,
        ),
        ok(
            "env names v1.33 allows (printable ASCII but =), labels and annotations at their limits",
            c(&torch),
            trainjob(
                &torch,
                json!({
                    "metadata": {
                        "labels": {"example.com/team": "a".repeat(63), "b": "", "x.y_z-1": "A.b_c-9"},
                        "annotations": {"example.com/note": "anything at all / ="}
                    },
                    "spec": {"trainer": {"env": [{"name": "my.var-1"}, {"name": "1_STARTS_WITH_A_DIGIT"}, {"name": "has space"}]}}
                }),
            ),
            None,
        ),
        ok(
            "whole GPUs in any form",
            c(&torch),
            trainjob(&torch, json!({"spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "8000m"}}}}})),
            None,
        ),
        ok(
            "numNodes at the Indexed Job limit",
            c(&torch),
            trainjob(&torch, json!({"spec": {"trainer": {"numNodes": 100_000}}})),
            None,
        ),
        ok("no trainer section", c(&torch), trainjob(&torch, json!({"spec": {"trainer": null}})), None),
        ok(
            "an ancestor label Trainer does not know is a plain job",
            c(&edited(torch.clone(), |v| {
                *at(v, "/spec/template/spec/replicatedJobs/0/template/metadata/labels") =
                    json!({"trainer.kubeflow.org/trainjob-ancestor-step": "evaluator"});
            })),
            trainjob(&torch, json!({"spec": {"trainer": null}})),
            None,
        ),
        ok(
            "managedBy MultiKueue, deadline 1",
            c(&torch),
            trainjob(&torch, json!({"spec": {"managedBy": "kueue.x-k8s.io/multikueue", "activeDeadlineSeconds": 1}})),
            None,
        ),
        ok(
            "empty and s3 storage URIs",
            c(&tune),
            trainjob(
                &tune,
                json!({"spec": {"initializer": {
                    "dataset": {"storageUri": ""},
                    "model": {"storageUri": "s3+https://bucket/key"}
                }}}),
            ),
            None,
        ),
        ok(
            "quantity forms Kubernetes accepts",
            c(&torch),
            trainjob(
                &torch,
                json!({"spec": {"trainer": {"resourcesPerNode": {
                    "requests": {"cpu": "500m", "memory": "1.5Gi", "ephemeral-storage": "1e3", "example.com/a": "+2"},
                    "limits": {"cpu": ".5", "example.com/a": "2", "example.com/c": "1.", "example.com/d": "2k"}
                }}}}),
            ),
            None,
        ),
        ok(
            "torch's names on an MPI runtime",
            c(&mpi),
            trainjob(&mpi, json!({"spec": {"trainer": {"env": [{"name": "PET_NNODES", "value": "1"}]}}})),
            None,
        ),
        ok(
            "MPI's names on a torch runtime",
            c(&torch),
            trainjob(&torch, json!({"spec": {"trainer": {"env": [{"name": "OMPI_MCA_plm_rsh_args", "value": "x"}]}}})),
            None,
        ),
        ok(
            "16 patches, dotless and Kueue managers",
            c(&torch),
            trainjob(
                &torch,
                json!({"spec": {"runtimePatches": (0..14)
                    .map(|i| node_selector_patch(&format!("example.com/m{i}")))
                    .chain([node_selector_patch("localhost/tuner"), node_selector_patch("kueue.x-k8s.io/manager")])
                    .collect::<Vec<_>>()}}),
            ),
            None,
        ),
        ok(
            "patch of every field the CRD allows",
            c(&torch),
            trainjob(
                &torch,
                json!({"spec": {"runtimePatches": [{
                    "manager": "trainer.kubeflow.org/kubeflow-sdk",
                    "time": "2025-01-01T00:00:00Z",
                    "trainingRuntimeSpec": {"template": {
                        "metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}},
                        "spec": {"replicatedJobs": [{"name": "node", "template": {
                            "metadata": {"labels": {"e": "f"}},
                            "spec": {"template": {
                                "metadata": {"annotations": {"g": "h"}},
                                "spec": {
                                    "serviceAccountName": "trainer",
                                    "nodeSelector": {"pool": "a100"},
                                    "tolerations": [{"key": "gpu", "operator": "Exists"}],
                                    "schedulingGates": [{"name": "example.com/gate"}],
                                    "imagePullSecrets": [{"name": "regcred"}],
                                    "terminationGracePeriodSeconds": 30,
                                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                                    "containers": [{
                                        "name": "node",
                                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                                    }]
                                }
                            }}
                        }}]}
                    }}
                }]}}),
            ),
            None,
        ),
    ]
    .into_iter()
    // The base every bad case starts from, for each runtime the table uses.
    .chain([TORCH, TORCHTUNE, MPI, DEEPSPEED, XGBOOST].map(|file| {
        let rt = runtime_json(file);
        ok(file, c(&rt), trainjob(&rt, json!({})), None)
    }))
    .flatten()
    .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Values of the wrong type or out of range, for any field.
fn wrong_values() -> Vec<Value> {
    let mut v = vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(1),
        json!(2_147_483_647),
        json!(-2_147_483_648),
        json!(2_147_483_648_i64),
        json!(i64::MAX),
        json!(u64::MAX),
        json!(1.5),
        json!(1e300),
        json!([]),
        json!([1, "a", null]),
        json!({}),
        json!({"name": 1, "": null}),
        json!("a".repeat(300)),
    ];
    // Strings that are nearly quantities, URIs, names or managers.
    v.extend(
        [
            "",
            " ",
            "x",
            "-1",
            "0",
            "1E",
            "1e",
            "1e40",
            "1e-40",
            ".",
            "+",
            "1.2.3",
            "8Gi ",
            "99999999999999999999999999999999999999999",
            "170141183460469231731687303715884105e-18",
            "170141183460469231731687303715884105.727m",
            "9223372036854775807Ei",
            "-9223372036854775808",
            "a/b",
            "a://",
            "Job-1",
            "node",
            "launcher",
            "dataset-initializer",
            "\u{0}\n\u{7f}é",
        ]
        .map(Value::from),
    );
    v
}

/// Fields of the base TrainJob (see `fuzz_base`), as JSON pointers.
const FIELDS: [&str; 52] = [
    "/metadata",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/uid",
    "/metadata/labels",
    "/metadata/labels/kai.scheduler~1queue",
    "/spec",
    "/spec/runtimeRef",
    "/spec/runtimeRef/name",
    "/spec/runtimeRef/apiGroup",
    "/spec/runtimeRef/kind",
    "/spec/trainer",
    "/spec/trainer/image",
    "/spec/trainer/command",
    "/spec/trainer/command/0",
    "/spec/trainer/args",
    "/spec/trainer/numNodes",
    "/spec/trainer/numProcPerNode",
    "/spec/trainer/env",
    "/spec/trainer/env/0",
    "/spec/trainer/env/0/name",
    "/spec/trainer/env/0/value",
    "/spec/trainer/env/0/valueFrom",
    "/spec/trainer/resourcesPerNode",
    "/spec/trainer/resourcesPerNode/requests",
    "/spec/trainer/resourcesPerNode/requests/cpu",
    "/spec/trainer/resourcesPerNode/requests/memory",
    "/spec/trainer/resourcesPerNode/requests/nvidia.com~1gpu",
    "/spec/trainer/resourcesPerNode/limits",
    "/spec/trainer/resourcesPerNode/limits/nvidia.com~1gpu",
    "/spec/trainer/resourcesPerNode/claims",
    "/spec/initializer",
    "/spec/initializer/dataset",
    "/spec/initializer/dataset/storageUri",
    "/spec/initializer/dataset/env",
    "/spec/initializer/model/storageUri",
    "/spec/initializer/model/secretRef",
    "/spec/initializer/model/secretRef/name",
    "/spec/runtimePatches",
    "/spec/runtimePatches/0",
    "/spec/runtimePatches/0/manager",
    "/spec/runtimePatches/0/time",
    "/spec/runtimePatches/0/trainingRuntimeSpec",
    "/spec/runtimePatches/0/trainingRuntimeSpec/template",
    "/spec/runtimePatches/0/trainingRuntimeSpec/template/metadata/labels",
    "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs",
    "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/name",
    "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template/spec",
    concat!(
        "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0",
        "/template/spec/template/spec/containers/0"
    ),
    "/spec/suspend",
    "/spec/activeDeadlineSeconds",
    "/spec/managedBy",
];

/// A TrainJob using every field above that the runtime can take.
fn fuzz_base(rt: &Value) -> Value {
    let jobs = rt["spec"]["template"]["spec"]["replicatedJobs"].as_array().cloned().unwrap_or_default();
    let first = &jobs[0];
    let container = &first["template"]["spec"]["template"]["spec"]["containers"][0]["name"];
    // Initializer sections only where Trainer takes them: a job and container of that name
    // mounting the `initializer` volume.
    let mounts_initializer = |name: &str| {
        jobs.iter().any(|j| {
            j["name"] == name
                && j["template"]["spec"]["template"]["spec"]["containers"].as_array().into_iter().flatten().any(|c| {
                    c["name"] == name
                        && c["volumeMounts"].as_array().into_iter().flatten().any(|m| m["name"] == "initializer")
                })
        })
    };
    let has_initializers = mounts_initializer("dataset-initializer") && mounts_initializer("model-initializer");
    let mut patch = json!({
        "metadata": {"labels": {"kai.scheduler/queue": "research"}},
        "spec": {
            "trainer": {
                "image": "example.com/trainer:1",
                "command": ["python", "train.py"],
                "args": ["--epochs", "1"],
                "numProcPerNode": 2,
                "resourcesPerNode": {"claims": [{"name": "gpus"}]}
            },
            "runtimePatches": [{
                "manager": "example.com/fuzz",
                "time": "2025-01-01T00:00:00Z",
                "trainingRuntimeSpec": {"template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"replicatedJobs": [{"name": first["name"], "template": {"spec": {"template": {"spec": {
                        "nodeSelector": {"pool": "a100"},
                        "containers": [{"name": container, "securityContext": {"runAsUser": 1000}}]
                    }}}}}]}
                }}
            }],
            "suspend": false,
            "activeDeadlineSeconds": 3600,
            "managedBy": "trainer.kubeflow.org/trainjob-controller"
        }
    });
    if has_initializers {
        patch["spec"]["initializer"] = json!({
            "dataset": {"storageUri": "hf://tatsu-lab/alpaca", "env": [{"name": "A", "value": "1"}]},
            "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct", "secretRef": {"name": "hf-token"}}
        });
    }
    trainjob_json(rt, &patch)
}

/// Sets the field at `pointer` (its parent must exist); false if it does not.
fn set(v: &mut Value, pointer: &str, x: Value) -> bool {
    let Some((parent, last)) = pointer.rsplit_once('/') else { return false };
    let key = last.replace("~1", "/").replace("~0", "~");
    match v.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(key, x);
            true
        }
        Some(Value::Array(a)) => match key.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
            Some(slot) => {
                *slot = x;
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// Every upstream runtime, every field of a TrainJob set to each wrong value: whatever
/// deserialises renders to objects or to an error, and never panics.
#[test]
fn no_trainjob_mutation_panics() {
    let values = wrong_values();
    let key = key();
    let volcano = Capabilities { gang_scheduler: GangScheduler::Volcano, ..Capabilities::default() };
    let kai = Capabilities { gang_scheduler: GangScheduler::Kai, ..Capabilities::default() };
    let (mut rendered, mut rejected, mut undeserialisable) = (0usize, 0usize, 0usize);
    let mut panics = Vec::new();
    for file in ALL_RUNTIMES {
        let rt_json = runtime_json(file);
        let rt = cluster(rt_json.clone());
        let base = fuzz_base(&rt_json);
        let tj: TrainJob = serde_json::from_value(base.clone()).expect("fuzz base deserialises");
        let pod_sets: Vec<&str> = rt.spec().template.spec.replicated_jobs.iter().map(|j| j.name.as_str()).collect();
        let placement = placement(&pod_sets, 1);
        match try_render(&tj, &rt, Some(&placement), &volcano, Some(&key)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("{file}: the fuzz base must render: {e}"),
            Err(p) => panic!("{file}: the fuzz base panicked: {p}"),
        }
        for field in FIELDS {
            for x in &values {
                let mut v = base.clone();
                if !set(&mut v, field, x.clone()) {
                    continue;
                }
                let Ok(tj) = serde_json::from_value::<TrainJob>(v) else {
                    undeserialisable += 1;
                    continue;
                };
                for (placed, caps, ssh) in [
                    (Some(&placement), &volcano, Some(&key)),
                    (None, &kai, None),
                    (None, &Capabilities::default(), Some(&key)),
                ] {
                    match try_render(&tj, &rt, placed, caps, ssh) {
                        Ok(Ok(_)) => rendered += 1,
                        Ok(Err(_)) => rejected += 1,
                        Err(p) => panics.push(format!("{file} {field} = {x}: {p}")),
                    }
                }
            }
        }
    }
    assert!(panics.is_empty(), "{} panics:\n{}", panics.len(), panics.join("\n"));
    assert!(rendered > 1000 && rejected > 1000 && undeserialisable > 1000, "{rendered} {rejected} {undeserialisable}");
}

/// Quantities at the edge of what is accepted (20 digits, the decimal point anywhere, every
/// suffix and exponent): each renders or is rejected, and none overflows the arithmetic on it.
#[test]
fn no_quantity_panics() {
    let rt_json = runtime_json(TORCH);
    let rt = cluster(rt_json.clone());
    let volcano = Capabilities { gang_scheduler: GangScheduler::Volcano, ..Capabilities::default() };
    let suffixes = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
        .map(String::from)
        .into_iter()
        .chain((-19..=19).map(|e| format!("e{e}")));
    let suffixes: Vec<String> = suffixes.collect();
    let mut panics = Vec::new();
    let mut rendered = 0;
    for mantissa in ["99999999999999999999", "17014118346046923173", "92233720368547758079", "10000000000000000000"] {
        for point in 0..=mantissa.len() {
            let number = format!("{}.{}", &mantissa[..point], &mantissa[point..]);
            for suffix in &suffixes {
                let q = format!("{number}{suffix}");
                let tj = trainjob(
                    &rt_json,
                    json!({"spec": {"trainer": {"numNodes": 100_000, "resourcesPerNode": {"requests": {"cpu": q}}}}}),
                );
                match try_render(&tj, &rt, None, &volcano, None) {
                    Ok(Ok(_)) => rendered += 1,
                    Ok(Err(_)) => {}
                    Err(p) => panics.push(format!("{q}: {p}")),
                }
            }
        }
    }
    assert!(panics.is_empty(), "{} panics:\n{}", panics.len(), panics.join("\n"));
    assert!(rendered > 100, "{rendered} rendered");
}
