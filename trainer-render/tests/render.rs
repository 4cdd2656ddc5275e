//! Rendering every upstream runtime, with and without a placement, for every gang scheduler and
//! pinning mode: each object validates against its upstream CRD schema (and carries no field
//! the schema does not know, which a real API server would silently prune); golden files pin
//! representative outputs; bad input is rejected naming the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use api::stowage::{DomainRef, Placement, PlacementSpec, PodSetPlacement};
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob};
use trainer_render::{Capabilities, GangScheduler, Input, Object, SshKeyPair, TopologyMode, pod_sets, render};

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream");

fn runtimes() -> Vec<(PathBuf, ClusterTrainingRuntime)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&Path::new(UPSTREAM).join("trainer/runtimes"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let rt = input_limits::yaml::from_str(&std::fs::read_to_string(&f).expect("read")).expect("runtime parses");
            (f, rt)
        })
        .collect()
}

fn schema(file: &str, version: &str) -> serde_json::Value {
    let crd: serde_json::Value =
        input_limits::yaml::from_str(&std::fs::read_to_string(Path::new(UPSTREAM).join(file)).expect("crd"))
            .expect("yaml");
    let versions = crd["spec"]["versions"].as_array().expect("versions");
    versions.iter().find(|v| v["name"] == version).expect("version")["schema"]["openAPIV3Schema"].clone()
}

struct Schemas(BTreeMap<&'static str, serde_json::Value>);

impl Schemas {
    fn load() -> Self {
        Schemas(BTreeMap::from([
            ("jobset.x-k8s.io/v1alpha2", schema("jobset/jobset.x-k8s.io_jobsets.yaml", "v1alpha2")),
            (
                "scheduling.x-k8s.io/v1alpha1",
                schema("scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml", "v1alpha1"),
            ),
            ("scheduling.volcano.sh/v1beta1", schema("volcano/scheduling.volcano.sh_podgroups.yaml", "v1beta1")),
            ("scheduling.run.ai/v2alpha2", schema("kai/scheduling.run.ai_podgroups.yaml", "v2alpha2")),
        ]))
    }

    /// Errors of one object against its CRD schema; core kinds (ConfigMap, Secret) are typed
    /// by k8s-openapi and have no CRD.
    fn check(&self, obj: &Object) -> Vec<String> {
        let value = obj.to_value();
        // The agent reads names from the typed metadata, and applies the JSON.
        let mut errors: Vec<String> = (serde_json::to_value(obj.metadata()).ok().as_ref() != Some(&value["metadata"]))
            .then(|| format!("metadata() is not the applied object's: {}", value["metadata"]))
            .into_iter()
            .collect();
        let Some(schema) = self.0.get(obj.api_version()) else { return errors };
        let validator = jsonschema::validator_for(schema).expect("CRD schema compiles");
        errors.extend(validator.iter_errors(&value).map(|e| format!("{}: {e}", e.instance_path)));
        // Fields the schema does not declare: an API server would drop them without a word.
        errors.extend(
            kube_conventions::schema::undeclared(schema, &value)
                .into_iter()
                .map(|u| format!("{u}: not in the schema (would be pruned)")),
        );
        errors
    }
}

fn trainjob_for(rt: &ClusterTrainingRuntime) -> TrainJob {
    let name = rt.metadata.name.clone().expect("named");
    let mut yaml = format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: job-1, namespace: team-a, uid: 3f2c0d6e-1111-2222-3333-444455556666}}\nspec:\n  runtimeRef: {{name: {name}}}\n  trainer:\n    numNodes: 3\n    resourcesPerNode: {{requests: {{cpu: '8', memory: 64Gi, nvidia.com/gpu: '8'}}, limits: {{nvidia.com/gpu: '8'}}}}\n    env: [{{name: LR, value: '0.001'}}]\n"
    );
    // Initializer sections only where the runtime can take them (Trainer rejects them otherwise).
    let mounts_initializer = |job: &str| {
        rt.spec.inner.template.spec.replicated_jobs.iter().any(|j| {
            j.name == job
                && j.template
                    .spec
                    .iter()
                    .flat_map(|s| s.template.spec.iter())
                    .flat_map(|p| &p.containers)
                    .any(|c| c.name == job && c.volume_mounts.iter().flatten().any(|m| m.name == "initializer"))
        })
    };
    if mounts_initializer("dataset-initializer") && mounts_initializer("model-initializer") {
        yaml.push_str("  initializer:\n    dataset: {storageUri: 'hf://tatsu-lab/alpaca'}\n    model: {storageUri: 'hf://meta-llama/Llama-3.2-1B-Instruct', secretRef: {name: hf-token}}\n");
    }
    input_limits::yaml::from_str(&yaml).expect("trainjob")
}

fn placement_for(rt: &ClusterTrainingRuntime, required: bool) -> Placement {
    let pod_sets = rt
        .spec
        .inner
        .template
        .spec
        .replicated_jobs
        .iter()
        .map(|j| PodSetPlacement {
            name: j.name.clone(),
            count: 1,
            flavor: Some("nvidia-h100-80gb".into()),
            domain: Some(DomainRef {
                level: "rack".into(),
                node_label: "cloud.google.com/gce-topology-subblock".into(),
                value: "b0-r1".into(),
            }),
            required,
            hosts: Vec::new(),
        })
        .collect();
    let spec = PlacementSpec {
        train_job_uid: "3f2c0d6e-1111-2222-3333-444455556666".into(),
        cluster: Some("east".into()),
        backoff: Vec::new(),
        ranking: Vec::new(),
        epoch: 4,
        queue: None,
        pod_sets,
    };
    Placement::new("job-1", spec)
}

fn key() -> SshKeyPair {
    SshKeyPair {
        private_pem: "-----BEGIN EC PRIVATE KEY-----\nfixture\n-----END EC PRIVATE KEY-----\n".into(),
        public_openssh: "ecdsa-sha2-nistp521 AAAAfixture".into(),
    }
}

#[test]
fn every_runtime_renders_schema_valid_objects_for_every_scheduler_and_mode() {
    let schemas = Schemas::load();
    let mut checked = 0;
    for (file, rt) in runtimes() {
        let tj = trainjob_for(&rt);
        let runtime = Runtime::Cluster(rt.clone());
        for required in [true, false] {
            let placement = placement_for(&rt, required);
            for scheduler in [
                GangScheduler::FromRuntime,
                GangScheduler::Coscheduling,
                GangScheduler::Volcano,
                GangScheduler::Kai,
                GangScheduler::Native,
                GangScheduler::None,
            ] {
                for mode in [TopologyMode::Affinity, TopologyMode::Kueue] {
                    for placed in [None, Some(&placement)] {
                        let caps =
                            Capabilities { gang_scheduler: scheduler, topology_mode: mode, ..Capabilities::default() };
                        let input = Input {
                            trainjob: &tj,
                            runtime: &runtime,
                            placement: placed,
                            capabilities: &caps,
                            ssh_key: Some(&key()),
                            jobset_uid: Some("9d9c7a54-aaaa-bbbb-cccc-ddddeeeeffff"),
                        };
                        let objects = render(&input).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                        for o in &objects {
                            let errors = schemas.check(o);
                            assert!(
                                errors.is_empty(),
                                "{} {:?} {:?} placed={} {}: {errors:#?}",
                                file.display(),
                                scheduler,
                                mode,
                                placed.is_some(),
                                o.kind()
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 300, "{checked} objects checked");
}

/// Kubernetes' own gang: one `scheduling.k8s.io/v1beta1` PodGroup whose `minCount` is the gang,
/// and every pod template naming it in `spec.schedulingGroup` (the field the JobSet CRD carries
/// since v0.12, checked against it above).
#[test]
fn the_native_backend_renders_a_podgroup_and_names_it_in_every_pod_template() {
    let (_, rt) = runtimes().into_iter().find(|(f, _)| f.ends_with("torch_distributed.yaml")).expect("torch runtime");
    let tj = trainjob_for(&rt);
    let runtime = Runtime::Cluster(rt.clone());
    let placement = placement_for(&rt, true);
    let caps = Capabilities { gang_scheduler: GangScheduler::Native, ..Capabilities::default() };
    let input = Input {
        trainjob: &tj,
        runtime: &runtime,
        placement: Some(&placement),
        capabilities: &caps,
        ssh_key: None,
        jobset_uid: None,
    };
    let objects = render(&input).expect("renders");
    let jobset = objects[0].to_value();
    let group = objects.iter().find(|o| o.api_version() == "scheduling.k8s.io/v1beta1").expect("a native PodGroup");
    let group = group.to_value();
    let name = group["metadata"]["name"].as_str().expect("named").to_string();
    assert_eq!(name, jobset["metadata"]["name"]);
    let pods: i64 = jobset["spec"]["replicatedJobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            assert_eq!(j["template"]["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"], name.as_str());
            j["template"]["spec"]["parallelism"].as_i64().unwrap_or(1) * j["replicas"].as_i64().unwrap_or(1)
        })
        .sum();
    assert_eq!(group["spec"]["schedulingPolicy"]["gang"]["minCount"].as_i64(), Some(pods), "{group}");
    // The group carries the fencing labels, so the agent deletes it with its epoch.
    assert_eq!(group["metadata"]["labels"]["stowage.dev/trainjob-uid"], placement.spec.train_job_uid.as_str());
}

/// What the hub schedules (`pod_sets`, no SSH key, no PodGroup) is what the member runs: the
/// same replicated jobs, pod counts and containers' requests as the rendered JobSet.
#[test]
fn pod_sets_agree_with_the_rendered_jobset_without_an_ssh_key() {
    for (file, rt) in runtimes() {
        let tj = trainjob_for(&rt);
        let runtime = Runtime::Cluster(rt);
        let caps = Capabilities::default();
        let sizing = Input {
            trainjob: &tj,
            runtime: &runtime,
            placement: None,
            capabilities: &caps,
            ssh_key: None,
            jobset_uid: None,
        };
        let shapes = pod_sets(&sizing).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let objects = render(&Input { ssh_key: Some(&key()), ..sizing.clone() }).expect("renders");
        let Some(Object::JobSet(jobset)) = objects.first() else { panic!("{}: no JobSet first", file.display()) };
        let rendered: Vec<_> = jobset
            .spec
            .replicated_jobs
            .iter()
            .map(|rj| {
                let job = rj.template.spec.as_ref().expect("job spec");
                let pods = rj.replicas.unwrap_or(1) as u32 * job.parallelism.unwrap_or(1) as u32;
                let requests: Vec<_> = job
                    .template
                    .spec
                    .iter()
                    .flat_map(|p| &p.containers)
                    .map(|c| c.resources.as_ref().and_then(|r| r.requests.clone()))
                    .collect();
                (rj.name.clone(), pods, requests)
            })
            .collect();
        let sized: Vec<_> = shapes
            .iter()
            .map(|s| {
                let requests: Vec<_> =
                    s.pod.containers.iter().map(|c| c.resources.as_ref().and_then(|r| r.requests.clone())).collect();
                (s.name.clone(), s.pods, requests)
            })
            .collect();
        assert_eq!(sized, rendered, "{}", file.display());
        // numNodes 3: three trainer pods (an MPI launcher that runs as a node is one of them).
        assert!(shapes.iter().map(|s| s.pods).sum::<u32>() >= 3, "{}: numNodes 3 reaches the pods", file.display());
    }
}

fn yaml_stream(objects: &[Object]) -> String {
    objects.iter().map(|o| format!("---\n{}", input_limits::yaml::to_string(&o.to_value()).expect("yaml"))).collect()
}

fn golden(name: &str, runtime_file: &str, scheduler: GangScheduler, mode: TopologyMode, placed: bool) {
    let (_, rt) = runtimes().into_iter().find(|(f, _)| f.ends_with(runtime_file)).expect("runtime");
    let tj = trainjob_for(&rt);
    let placement = placement_for(&rt, true);
    let kueue_local_queue = (mode == TopologyMode::Kueue).then(|| "gpu-queue".to_string());
    let caps =
        Capabilities { gang_scheduler: scheduler, topology_mode: mode, kueue_local_queue, ..Capabilities::default() };
    let runtime = Runtime::Cluster(rt);
    let input = Input {
        trainjob: &tj,
        runtime: &runtime,
        placement: placed.then_some(&placement),
        capabilities: &caps,
        ssh_key: Some(&key()),
        jobset_uid: Some("9d9c7a54-aaaa-bbbb-cccc-ddddeeeeffff"),
    };
    let text = yaml_stream(&render(&input).expect("renders"));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("STOWAGE_REGENERATE").is_some() {
        std::fs::write(&path, &text).expect("write golden");
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(text == want, "{name} differs; regenerate with STOWAGE_REGENERATE=1 and review the diff:\n{text}");
}

#[test]
fn golden_torch_as_trainer_renders_it() {
    golden(
        "torch-distributed.yaml",
        "torch_distributed.yaml",
        GangScheduler::FromRuntime,
        TopologyMode::Affinity,
        false,
    );
}

#[test]
fn golden_deepspeed_mpi_placed_for_volcano() {
    golden(
        "deepspeed-volcano-placed.yaml",
        "deepspeed_distributed.yaml",
        GangScheduler::Volcano,
        TopologyMode::Affinity,
        true,
    );
}

#[test]
fn golden_torchtune_initializers_placed_for_coscheduling_under_kueue() {
    golden(
        "torchtune-coscheduling-kueue.yaml",
        "llama3_2_1B.yaml",
        GangScheduler::Coscheduling,
        TopologyMode::Kueue,
        true,
    );
}

#[test]
fn golden_mpi_placed_for_kai() {
    golden("mpi-kai-placed.yaml", "mpi_distributed.yaml", GangScheduler::Kai, TopologyMode::Affinity, true);
}

/// For a member running Kueue (`--topology-mode kueue`), the JobSet is what Kueue's jobset
/// integration reads: the member's LocalQueue as its queue label, and on each placed pod
/// template the TAS annotation at the chosen level with a node selector holding the chosen
/// domain (the annotation asks for some domain of the level; the selector keeps Stowage's).
#[test]
fn under_kueue_the_jobset_names_the_members_local_queue_and_holds_the_chosen_domain() {
    let (_, rt) = runtimes().into_iter().find(|(f, _)| f.ends_with("torch_distributed.yaml")).expect("runtime");
    let tj = trainjob_for(&rt);
    let runtime = Runtime::Cluster(rt.clone());
    for required in [true, false] {
        let placement = placement_for(&rt, required);
        let caps = Capabilities {
            topology_mode: TopologyMode::Kueue,
            kueue_local_queue: Some("gpu-queue".into()),
            ..Capabilities::default()
        };
        let input = Input {
            trainjob: &tj,
            runtime: &runtime,
            placement: Some(&placement),
            capabilities: &caps,
            ssh_key: None,
            jobset_uid: None,
        };
        let objects = render(&input).expect("renders");
        let Some(Object::JobSet(js)) = objects.first() else { panic!("JobSet first: {objects:?}") };
        let labels = js.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("kueue.x-k8s.io/queue-name").map(String::as_str), Some("gpu-queue"));
        let annotation = if required {
            "kueue.x-k8s.io/podset-required-topology"
        } else {
            "kueue.x-k8s.io/podset-preferred-topology"
        };
        for j in &js.spec.replicated_jobs {
            let pod = &j.template.spec.as_ref().expect("job spec").template;
            let annotations = pod.metadata.as_ref().and_then(|m| m.annotations.clone()).unwrap_or_default();
            assert_eq!(
                annotations.get(annotation).map(String::as_str),
                Some("cloud.google.com/gce-topology-subblock"),
                "{}",
                j.name
            );
            let selector = pod.spec.as_ref().and_then(|s| s.node_selector.clone()).unwrap_or_default();
            assert_eq!(selector.get("cloud.google.com/gce-topology-subblock").map(String::as_str), Some("b0-r1"));
        }
    }
    // Pinned by affinity alone, the JobSet is no Kueue's and carries no selector on the level.
    let placement = placement_for(&rt, true);
    let caps = Capabilities::default();
    let input = Input {
        trainjob: &tj,
        runtime: &runtime,
        placement: Some(&placement),
        capabilities: &caps,
        ssh_key: None,
        jobset_uid: None,
    };
    let objects = render(&input).expect("renders");
    let Some(Object::JobSet(js)) = objects.first() else { panic!("JobSet first") };
    assert!(!js.metadata.labels.clone().unwrap_or_default().contains_key("kueue.x-k8s.io/queue-name"));
    let pod = &js.spec.replicated_jobs[0].template.spec.as_ref().expect("job spec").template;
    let selector = pod.spec.as_ref().and_then(|s| s.node_selector.clone()).unwrap_or_default();
    assert!(!selector.contains_key("cloud.google.com/gce-topology-subblock"), "{selector:?}");
}

/// The TrainJob's env comes where Trainer's controller puts it, as seen on the testbed
/// (tests/tests/trainer_oracle.rs): before the policy's variables for Torch, after them for JAX
/// and MPI (the JobSet builder appends it), and for XGBoost, where Trainer's order depends on
/// Go's map order, after them too.
#[test]
fn the_trainjobs_env_comes_before_or_after_the_policys_as_trainers_plugins_order_it() {
    let first_env = |runtime_file: &str| {
        let (_, rt) =
            runtimes().into_iter().find(|(f, _)| f.ends_with(runtime_file)).unwrap_or_else(|| panic!("{runtime_file}"));
        let tj = trainjob_for(&rt);
        let runtime = Runtime::Cluster(rt);
        let caps = Capabilities::default();
        let input = Input {
            trainjob: &tj,
            runtime: &runtime,
            placement: None,
            capabilities: &caps,
            ssh_key: Some(&key()),
            jobset_uid: None,
        };
        let objects = render(&input).expect("renders");
        let jobset = objects.iter().map(Object::to_value).find(|o| o["kind"] == "JobSet").expect("a JobSet");
        let jobs = jobset["spec"]["replicatedJobs"].as_array().cloned().unwrap_or_default();
        let node = jobs
            .iter()
            .flat_map(|j| {
                j["template"]["spec"]["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default()
            })
            .find(|c| c["name"] == "node" && c["env"].as_array().is_some_and(|e| e.iter().any(|v| v["name"] == "LR")))
            .expect("the trainer's node container with the TrainJob's env");
        let names: Vec<String> = node["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect();
        (names.first().cloned().unwrap_or_default(), names.last().cloned().unwrap_or_default())
    };
    assert_eq!(first_env("torch_distributed.yaml").0, "LR", "Torch: the TrainJob's env first");
    assert_eq!(first_env("xgboost_distributed.yaml").1, "LR", "XGBoost: the TrainJob's env last");
    assert_eq!(first_env("jax_distributed.yaml").1, "LR", "JAX: the TrainJob's env last");
    assert_eq!(first_env("mpi_distributed.yaml").1, "LR", "MPI: the TrainJob's env last");
}

/// A runtime's template is taken as it is when no patch touches it, and goes through JSON only
/// to merge one: a patch that changes nothing (an empty template) renders exactly what no patch
/// renders, for every upstream runtime, so the shortcut changes no output.
#[test]
fn an_empty_template_patch_renders_what_no_patch_renders() {
    let caps = Capabilities::default();
    let mut compared = 0;
    for (file, rt) in runtimes() {
        let runtime = Runtime::Cluster(rt.clone());
        let plain = trainjob_for(&rt);
        let mut patched = plain.clone();
        patched.spec.runtime_patches = vec![api::trainer::RuntimePatch {
            manager: "example.com/tuner".into(),
            training_runtime_spec: Some(serde_json::json!({"template": {}})),
            ..Default::default()
        }];
        let rendered = |tj: &TrainJob| -> Vec<serde_json::Value> {
            let input = Input {
                trainjob: tj,
                runtime: &runtime,
                placement: None,
                capabilities: &caps,
                ssh_key: Some(&key()),
                jobset_uid: Some("9d9c7a54-aaaa-bbbb-cccc-ddddeeeeffff"),
            };
            render(&input).unwrap_or_else(|e| panic!("{}: {e}", file.display())).iter().map(Object::to_value).collect()
        };
        assert_eq!(rendered(&plain), rendered(&patched), "{}", file.display());
        compared += 1;
    }
    assert!(compared >= 5, "{compared} runtimes compared");
}
