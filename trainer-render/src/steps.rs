//! The render steps. Each takes the input and the draft and does one thing Trainer (or Stowage,
//! where docs/rendering.md says so) does, in the order of `super::SHAPE_STEPS` and
//! `super::MEMBER_STEPS`. Sources are kubeflow/trainer v2.3.0's: `pkg/runtime/core/trainingruntime.go`
//! (`newRuntimeInfo`), `pkg/runtime/runtime.go` (`WithPodSet`), the plugins under
//! `pkg/runtime/framework/plugins/` and the JobSet builder (`plugins/jobset/builder.go`).

use std::collections::BTreeMap;

use api::jobset::{JobSet, ReplicatedJob};
use api::podgroup::{self, PodGroup, kai, native, volcano};
use api::stowage::{EPOCH_LABEL, PodSetPlacement, TRAINJOB_UID_LABEL};
use api::trainer::{ANCESTOR_DATASET, ANCESTOR_MODEL, ANCESTOR_TRAINER, MpiPolicy};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{
    PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyOnPodConditionsPattern,
    PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvFromSource, EnvVar, EnvVarSource, KeyToPath,
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, PodSpec,
    PreferredSchedulingTerm, ResourceRequirements, Secret, SecretEnvSource, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use super::field::{BadValue, ErrorType, FieldError, Rule};
use super::pods::{ancestor_of, container_mut, gpu_count, node_resources, pod_meta_mut, pod_spec, pod_spec_mut};
use super::torchtune::{self, NProc};
use super::{Draft, GangScheduler, Input, Object, PodSetInfo, RenderError, Source, TopologyMode};
use api::quantity::Milli;

pub const TORCH_PORT: i32 = 29500;
/// The most a ConfigMap's data may hold, keys and values together (`MaxConfigMapSize`).
const MAX_CONFIGMAP_BYTES: usize = 1024 * 1024;
const COMPLETION_INDEX_PATH: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";
const MPI_HOSTFILE_DIR: &str = "/etc/mpi";
/// Exit codes of a container that could not even start its command: no retry will help.
pub const CONFIG_ERROR_EXIT_CODES: [i32; 2] = [126, 127];

/// `apply.UpsertEnvVars`: by name, in place, new ones appended. Nothing to upsert leaves the
/// list as it was (absent stays absent: Trainer's apply configurations omit empty lists).
fn upsert_env(c: &mut Container, vars: impl IntoIterator<Item = EnvVar>) {
    for v in vars {
        let env = c.env.get_or_insert_with(Vec::new);
        match env.iter_mut().find(|e| e.name == v.name) {
            Some(e) => *e = v,
            None => env.push(v),
        }
    }
}

/// `apply.EnvVar`: a TrainJob env var as Trainer copies it, the value dropped when it comes from
/// a source.
fn trainer_env(e: &EnvVar) -> EnvVar {
    match &e.value_from {
        Some(from) => EnvVar { name: e.name.clone(), value: None, value_from: Some(from.clone()) },
        None => EnvVar { name: e.name.clone(), value: Some(e.value.clone().unwrap_or_default()), value_from: None },
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

fn env_completion_index(name: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: COMPLETION_INDEX_PATH.into(), api_version: None }),
            ..Default::default()
        }),
    }
}

fn upsert_port(c: &mut Container, port: i32) {
    let ports = c.ports.get_or_insert_with(Vec::new);
    if !ports.iter().any(|p| p.container_port == port) {
        ports.push(ContainerPort { container_port: port, ..Default::default() });
    }
}

fn upsert_volume(p: &mut PodSpec, v: Volume) {
    let vols = p.volumes.get_or_insert_with(Vec::new);
    match vols.iter_mut().find(|x| x.name == v.name) {
        Some(x) => *x = v,
        None => vols.push(v),
    }
}

fn upsert_mount(c: &mut Container, m: VolumeMount) {
    let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
    match mounts.iter_mut().find(|x| x.mount_path == m.mount_path) {
        Some(x) => *x = m,
        None => mounts.push(m),
    }
}

fn policy<'a>(input: &'a Input<'_>) -> Option<&'a api::trainer::MlPolicy> {
    input.runtime.spec().ml_policy.as_ref()
}

fn mpi<'a>(input: &'a Input<'_>) -> Option<&'a MpiPolicy> {
    policy(input).and_then(|p| p.mpi.as_ref())
}

fn launcher_as_node(input: &Input<'_>) -> bool {
    mpi(input).is_some_and(|m| m.run_launcher_as_node == Some(true))
}

/// Jobs that take the TrainJob's trainer env: the trainer-ancestor job and, for MPI with
/// `runLauncherAsNode`, the job named `node` too (`builder.go` `Trainer`).
fn takes_trainer_env(input: &Input<'_>, j: &ReplicatedJob) -> bool {
    ancestor_of(j) == Some(ANCESTOR_TRAINER) || (launcher_as_node(input) && j.name == "node")
}

/// The index of the first trainer-ancestor job: the PodSet Trainer's ML plugins size and fill
/// (`FindPodSetByAncestor`).
fn first_trainer(draft: &Draft) -> Option<usize> {
    draft.spec.replicated_jobs.iter().position(|j| ancestor_of(j) == Some(ANCESTOR_TRAINER))
}

/// The trainer's pod count as Trainer's ML plugins read it (1 without a trainer job).
fn trainer_count(draft: &Draft) -> i32 {
    first_trainer(draft).and_then(|i| draft.pod_sets.get(i)).map_or(1, |ps| ps.count)
}

/// `getNumCPUPerNode`: the CPU request rounded up, else the limit.
fn cpu_count(r: Option<&ResourceRequirements>) -> i64 {
    let cpu = |m: Option<&BTreeMap<String, Quantity>>| {
        m.and_then(|m| m.get("cpu")).and_then(|q| Milli::parse(&q.0).ok()).unwrap_or_default()
    };
    let request = cpu(r.and_then(|r| r.requests.as_ref()));
    let v = if request.0 == 0 { cpu(r.and_then(|r| r.limits.as_ref())) } else { request };
    i64::try_from(v.ceil_units()).unwrap_or(i64::MAX)
}

/// The runtime template with every runtime patch applied (strategic merge, in list order),
/// and the JobSet's metadata.
pub(crate) fn runtime_patches(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    patch_runtime(input, draft).map_err(RenderError::from)
}

/// [`runtime_patches`], for admission too: what Trainer's `newRuntimeInfo` builds before its
/// plugins validate.
pub(crate) fn patch_runtime(input: &Input<'_>, draft: &mut Draft) -> Result<(), FieldError> {
    let meta = &input.trainjob.metadata;
    draft.name = meta.name.clone().unwrap_or_default();
    draft.namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    draft.uid = meta.uid.clone().unwrap_or_default();
    let template = &input.runtime.spec().template;
    let spec = &input.trainjob.spec;
    let patches: Vec<&Value> =
        spec.runtime_patches.iter().filter_map(|p| p.training_runtime_spec.as_ref()?.get("template")).collect();
    let patched = if patches.is_empty() {
        // Nothing to merge: the template as the runtime has it. Written out as JSON and read
        // back, it was a third of the hub's admission of a TrainJob, and a part of every
        // render, to come back the same.
        template.clone()
    } else {
        let mut tmpl = serde_json::to_value(template).unwrap_or_default();
        let known =
            |j: &Value| template.spec.replicated_jobs.iter().any(|r| Some(r.name.as_str()) == j["name"].as_str());
        for t in patches {
            // A patch of a job the runtime lacks would add a job with no template; validation
            // refuses it in Trainer's words (`webhook_rules`), so it is not merged here.
            let mut t = t.clone();
            if let Some(jobs) = t.pointer_mut("/spec/replicatedJobs").and_then(Value::as_array_mut) {
                jobs.retain(known);
            }
            kube_conventions::patch::strategic_merge(&mut tmpl, &t);
        }
        serde_json::from_value::<api::trainer::JobSetTemplateSpec>(tmpl).map_err(|e| {
            FieldError::new(
                Source::TrainJob,
                Rule::Stowage,
                ErrorType::Invalid,
                "spec.runtimePatches",
                BadValue::Omit,
                format!("the patched runtime is not a valid JobSet template: {e}"),
            )
        })?
    };
    let m = patched.metadata.unwrap_or_default();
    draft.labels = m.labels.unwrap_or_default();
    draft.annotations = m.annotations.unwrap_or_default();
    draft.spec = patched.spec;
    runtime_defaults(&mut draft.spec);
    Ok(())
}

/// The runtime CRD's defaults for its JobSet template (`replicas: 1`, `groupName: default`,
/// `failurePolicy.restartStrategy: Recreate`): Trainer reads runtimes from the API server, which
/// stored them defaulted, so its JobSets carry them. Pod-template defaults (a port's protocol, a
/// key selector's name) are left to the API server, which defaults the JobSet the same way.
fn runtime_defaults(spec: &mut api::jobset::JobSetSpec) {
    for j in &mut spec.replicated_jobs {
        j.replicas.get_or_insert(1);
        j.extra.entry("groupName".to_string()).or_insert_with(|| Value::from("default"));
    }
    if let Some(f) = &mut spec.failure_policy {
        f.restart_strategy.get_or_insert_with(|| "Recreate".to_string());
    }
}

/// `spec.trainer.resourcesPerNode` merged over the `node` container's resources, TrainJob
/// winning per resource name — before counting, so PodGroup `minResources` sees it. As Trainer:
/// only when the runtime has an `mlPolicy`, into the trainer-ancestor job (and MPI's `node` job
/// with `runLauncherAsNode`), and only limits and requests are written back (claims, the
/// runtime's and the TrainJob's, are dropped: `newRuntimeInfo` builds the apply configuration
/// from the two maps alone).
pub(crate) fn resources_per_node(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(res) = input.trainjob.spec.trainer.as_ref().and_then(|t| t.resources_per_node.as_ref()) else {
        return Ok(());
    };
    if policy(input).is_none() {
        return Ok(());
    }
    for j in &mut draft.spec.replicated_jobs {
        if !takes_trainer_env(input, j) {
            continue;
        }
        if let Some(c) = container_mut(j, "node") {
            let base = c.resources.take().unwrap_or_default();
            let merge = |mine: Option<BTreeMap<String, Quantity>>, theirs: &Option<BTreeMap<String, Quantity>>| match (
                mine, theirs,
            ) {
                (None, None) => None,
                (mine, theirs) => {
                    let mut m = mine.unwrap_or_default();
                    m.extend(theirs.iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
                    Some(m)
                }
            };
            c.resources = Some(ResourceRequirements {
                limits: merge(base.limits, &res.limits),
                requests: merge(base.requests, &res.requests),
                claims: None,
            });
        }
    }
    Ok(())
}

/// Pod counts per replicated job, written to `parallelism` and `completions`; `replicas` 1 on
/// the jobs a TrainJob section overrides. Each job starts at its template's `parallelism` — the
/// trainer-ancestor job at `mlPolicy.numNodes` when the runtime has a policy — and at least 1
/// (`WithPodSet`); then the ML plugin applies `spec.trainer.numNodes` if set: MPI to the first job
/// named `node` (one less, at least 1, with `runLauncherAsNode`), every other policy and none
/// (PlainML) to the first trainer-ancestor job.
pub(crate) fn counts(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let policy = policy(input);
    draft.pod_sets.clear();
    for j in &draft.spec.replicated_jobs {
        let ancestor = ancestor_of(j).map(str::to_string);
        let count = match (ancestor.as_deref(), policy) {
            (Some(ANCESTOR_TRAINER), Some(p)) => p.num_nodes.unwrap_or(1),
            _ => j.template.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1),
        };
        draft.pod_sets.push(PodSetInfo { name: j.name.clone(), count: count.max(1), ancestor });
    }
    if let Some(n) = input.trainjob.spec.trainer.as_ref().and_then(|t| t.num_nodes) {
        let target = match mpi(input) {
            Some(_) => draft.pod_sets.iter().position(|ps| ps.name == "node"),
            None => first_trainer(draft),
        };
        if let Some(ps) = target.and_then(|i| draft.pod_sets.get_mut(i)) {
            ps.count = if launcher_as_node(input) { (n - 1).max(1) } else { n };
        }
    }
    for (j, ps) in draft.spec.replicated_jobs.iter_mut().zip(&draft.pod_sets) {
        if matches!(ps.ancestor.as_deref(), Some(ANCESTOR_TRAINER | ANCESTOR_DATASET | ANCESTOR_MODEL)) {
            j.replicas = Some(1);
        }
        let spec = j.template.spec.get_or_insert_with(Default::default);
        spec.parallelism = Some(ps.count);
        spec.completions = Some(ps.count);
    }
    Ok(())
}

/// `spec.trainer`: image, command and args of the trainer jobs' `node` container (whenever the
/// TrainJob sets them, even empty); env upserted by name (into MPI's `node` job too with
/// `runLauncherAsNode`) where the ML plugin puts it before its own: Torch's and PlainML's
/// `EnforceMLPolicy` upsert the TrainJob's env first; JAX, XGBoost and MPI leave it to
/// [`env_after_policy`], after theirs. Env order is what a pod sees (`$(VAR)` expands only earlier
/// variables), and what Trainer's controller was seen to make on the testbed.
pub(crate) fn trainer(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(t) = &input.trainjob.spec.trainer else { return Ok(()) };
    for j in &mut draft.spec.replicated_jobs {
        let is_trainer = ancestor_of(j) == Some(ANCESTOR_TRAINER);
        if !takes_trainer_env(input, j) {
            continue;
        }
        let Some(c) = container_mut(j, "node") else { continue };
        if is_trainer {
            if let Some(image) = &t.image {
                c.image = Some(image.clone());
            }
            if let Some(cmd) = &t.command {
                c.command = Some(cmd.clone());
            }
            if let Some(args) = &t.args {
                c.args = Some(args.clone());
            }
        }
        if env_before_policy(input) {
            upsert_env(c, t.env.iter().map(trainer_env));
        }
    }
    Ok(())
}

/// Whether an ML plugin takes the TrainJob's env before the policy's own variables: Torch does,
/// and PlainML where no other policy's plugin runs. For XGBoost, Trainer v2.3.0 runs PlainML and
/// XGBoost's plugin in Go map order (`framework.go` ranges over the plugin registry), so its
/// `DMLC_*` come before or after the TrainJob's env depending on the controller's start; Stowage
/// puts them first, as for JAX and MPI, so a TrainJob's env may name them (`$(DMLC_TASK_ID)`).
fn env_before_policy(input: &Input<'_>) -> bool {
    policy(input).is_none_or(|p| p.jax.is_none() && p.mpi.is_none() && p.xgboost.is_none())
}

/// The TrainJob's env upserted again after the ML plugin's (`builder.go` `Trainer`): in place
/// where it came first, after JAX's, XGBoost's and MPI's variables otherwise.
pub(crate) fn env_after_policy(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(t) = &input.trainjob.spec.trainer else { return Ok(()) };
    for j in draft.spec.replicated_jobs.iter_mut().filter(|j| takes_trainer_env(input, j)) {
        if let Some(c) = container_mut(j, "node") {
            upsert_env(c, t.env.iter().map(trainer_env));
        }
    }
    Ok(())
}

/// `spec.initializer`: `STORAGE_URI` (when set, even empty), env and a secret's env into the
/// initializer containers.
pub(crate) fn initializers(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(init) = &input.trainjob.spec.initializer else { return Ok(()) };
    for (ancestor, source) in [(ANCESTOR_DATASET, &init.dataset), (ANCESTOR_MODEL, &init.model)] {
        let Some(source) = source else { continue };
        for j in draft.spec.replicated_jobs.iter_mut().filter(|j| ancestor_of(j) == Some(ancestor)) {
            let Some(c) = container_mut(j, ancestor) else { continue };
            if let Some(uri) = &source.storage_uri {
                upsert_env(c, [env("STORAGE_URI", uri.clone())]);
            }
            upsert_env(c, source.env.iter().map(trainer_env));
            if let Some(secret) = &source.secret_ref {
                c.env_from.get_or_insert_with(Vec::new).push(EnvFromSource {
                    secret_ref: Some(SecretEnvSource { name: secret.name.clone(), optional: None }),
                    ..Default::default()
                });
            }
        }
    }
    Ok(())
}

/// The ML policy's env, ports and command: torch (and torchtune), JAX, XGBoost, MPI. Only the
/// first trainer-ancestor job's `node` container, and only when the TrainJob has a `trainer`
/// section (torch's env injection targets excepted), as the plugins do.
pub(crate) fn ml_policy(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(policy) = policy(input) else { return Ok(()) };
    let job = input.trainjob;
    let name = draft.name.clone();
    let nodes = trainer_count(draft);
    let master = format!("{name}-node-0-0.{name}");
    let resources = node_resources(job, &draft.spec.replicated_jobs);
    let gpus = gpu_count(resources.as_ref());
    let nproc = job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node);
    let trainer = job.spec.trainer.as_ref();
    let trainer_job = first_trainer(draft).filter(|_| trainer.is_some());
    if let Some(torch) = &policy.torch {
        let nproc = match nproc {
            Some(n) => NProc::Int(i64::from(n)),
            None if gpus > 0 => NProc::Auto,
            None => NProc::Int(cpu_count(resources.as_ref()).max(1)),
        };
        let pet = vec![
            env("PET_NNODES", nodes.to_string()),
            env("PET_NPROC_PER_NODE", nproc.to_value_string()),
            env_completion_index("PET_NODE_RANK"),
        ];
        let master_env = [env("PET_MASTER_ADDR", master.clone()), env("PET_MASTER_PORT", TORCH_PORT.to_string())];
        let tune = trainer.filter(|t| torchtune::is_entrypoint(t.command.as_deref()));
        if let Some(i) = trainer_job
            && let Some(c) = container_mut(&mut draft.spec.replicated_jobs[i], "node")
        {
            upsert_env(c, pet.clone());
            if tune.is_none() {
                upsert_env(c, master_env.clone());
            }
            upsert_port(c, TORCH_PORT);
        }
        if let Some(t) = tune
            && trainer_job.is_some()
        {
            let command = torchtune::command(
                &format!("{master}:{TORCH_PORT}"),
                (i64::from(nodes), nproc, gpus),
                t.args.as_deref().unwrap_or(&[]),
                &job.spec.runtime_ref.name,
                torchtune::overrides_from_runtime(&input.runtime.spec().template.spec.replicated_jobs),
            );
            for j in draft.spec.replicated_jobs.iter_mut().filter(|j| ancestor_of(j) == Some(ANCESTOR_TRAINER)) {
                if let Some(c) = container_mut(j, "node") {
                    c.command = Some(command.clone());
                }
            }
        }
        for target in torch.env_injection.iter().flat_map(|e| &e.targets) {
            let Some(j) = draft.spec.replicated_jobs.iter_mut().find(|j| j.name == target.job_name) else {
                continue;
            };
            let p = pod_spec_mut(j);
            for cname in &target.container_names {
                let c = p
                    .containers
                    .iter_mut()
                    .find(|c| &c.name == cname)
                    .or_else(|| p.init_containers.iter_mut().flatten().find(|c| &c.name == cname));
                if let Some(c) = c {
                    upsert_env(c, pet.iter().cloned().chain(master_env.iter().cloned()));
                }
            }
        }
    }
    if policy.jax.is_some()
        && let Some(i) = trainer_job
        && let Some(c) = container_mut(&mut draft.spec.replicated_jobs[i], "node")
    {
        upsert_env(
            c,
            [
                env("JAX_NUM_PROCESSES", nodes.to_string()),
                env_completion_index("JAX_PROCESS_ID"),
                env("JAX_COORDINATOR_ADDRESS", format!("{master}:{TORCH_PORT}")),
            ],
        );
        upsert_port(c, TORCH_PORT);
    }
    if policy.xgboost.is_some()
        && let Some(i) = trainer_job
        && let Some(c) = container_mut(&mut draft.spec.replicated_jobs[i], "node")
    {
        let workers = i64::from(nodes).saturating_mul(gpus.max(1));
        upsert_env(
            c,
            [
                env("DMLC_TRACKER_URI", master.clone()),
                env("DMLC_TRACKER_PORT", TORCH_PORT.to_string()),
                env_completion_index("DMLC_TASK_ID"),
                env("DMLC_NUM_WORKER", workers.to_string()),
            ],
        );
        upsert_port(c, TORCH_PORT);
    }
    if let Some(m) = &policy.mpi {
        mpi_pods(draft, m, mpi_slots(m, nproc, gpus));
    }
    Ok(())
}

fn object_meta(draft: &Draft, name: String) -> ObjectMeta {
    ObjectMeta { name: Some(name), namespace: Some(draft.namespace.clone()), ..Default::default() }
}

/// Slots per MPI host: the TrainJob's processes per node, else one per GPU when the runtime says
/// 1 and there are several, else the runtime's.
fn mpi_slots(m: &MpiPolicy, nproc: Option<i32>, gpus: i64) -> i64 {
    let runtime_slots = m.num_proc_per_node.unwrap_or(1);
    match nproc {
        Some(n) => i64::from(n),
        None if runtime_slots == 1 && gpus > 1 => gpus,
        None => i64::from(runtime_slots),
    }
}

fn mpi_secret_name(draft: &Draft) -> String {
    format!("{}-mpi-ssh-auth", draft.name)
}

fn mpi_hostfile_name(draft: &Draft) -> String {
    format!("{}-mpi-hostfile", draft.name)
}

/// What MPI changes in the pods: the SSH and hostfile volumes, mounts and OpenMPI's env.
fn mpi_pods(draft: &mut Draft, m: &MpiPolicy, slots: i64) {
    let ssh_path = m.ssh_auth_mount_path.clone().unwrap_or_else(|| "/root/.ssh".into());
    let secret_name = mpi_secret_name(draft);
    let hostfile_name = mpi_hostfile_name(draft);
    for j in &mut draft.spec.replicated_jobs {
        let is_launcher = j.name == "launcher";
        if j.name != "node" && !is_launcher {
            continue;
        }
        let p = pod_spec_mut(j);
        upsert_volume(
            p,
            Volume {
                name: "mpi-ssh-auth".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret_name.clone()),
                    default_mode: Some(0o400),
                    items: Some(vec![
                        KeyToPath { key: "ssh-privatekey".into(), path: "id_rsa".into(), mode: Some(0o640) },
                        KeyToPath { key: "ssh-publickey".into(), path: "id_rsa.pub".into(), mode: Some(0o644) },
                        KeyToPath { key: "ssh-publickey".into(), path: "authorized_keys".into(), mode: Some(0o644) },
                    ]),
                    optional: None,
                }),
                ..Default::default()
            },
        );
        if is_launcher {
            upsert_volume(
                p,
                Volume {
                    name: "mpi-hostfile".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: hostfile_name.clone(),
                        items: Some(vec![KeyToPath {
                            key: "hostfile".into(),
                            path: "hostfile".into(),
                            mode: Some(0o444),
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            );
        }
        if let Some(c) = p.containers.iter_mut().find(|c| c.name == "node") {
            upsert_mount(
                c,
                VolumeMount { name: "mpi-ssh-auth".into(), mount_path: ssh_path.clone(), ..Default::default() },
            );
            if is_launcher {
                upsert_mount(
                    c,
                    VolumeMount {
                        name: "mpi-hostfile".into(),
                        mount_path: MPI_HOSTFILE_DIR.into(),
                        ..Default::default()
                    },
                );
                upsert_env(
                    c,
                    [
                        env("OMPI_MCA_orte_default_hostfile", format!("{MPI_HOSTFILE_DIR}/hostfile")),
                        env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                        env("OMPI_MCA_orte_set_default_slots", slots.to_string()),
                        env("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                    ],
                );
            }
        }
    }
}

/// The MPI companions Trainer creates beside the JobSet: the hostfile ConfigMap and the SSH
/// Secret. Only the member needs them; sizing a gang ([`crate::pod_sets`]) stops before this.
pub(crate) fn mpi_companions(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(m) = mpi(input) else { return Ok(()) };
    let name = draft.name.clone();
    let nproc = input.trainjob.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node);
    let gpus = gpu_count(node_resources(input.trainjob, &draft.spec.replicated_jobs).as_ref());
    let slots = mpi_slots(m, nproc, gpus);
    let subdomain = draft.spec.network.as_ref().and_then(|n| n.subdomain.clone()).unwrap_or_else(|| name.clone());
    let mut hostfile = String::new();
    for (j, ps) in draft.spec.replicated_jobs.iter().zip(&draft.pod_sets) {
        let listed = j.name == "node" || (launcher_as_node(input) && j.name == "launcher");
        if !listed {
            continue;
        }
        for r in 0..j.replicas.unwrap_or(1) {
            for p in 0..ps.count {
                hostfile.push_str(&format!("{name}-{}-{r}-{p}.{subdomain} slots={slots}\n", j.name));
            }
        }
    }
    // A member's API server refuses a ConfigMap over 1 MiB; the hostfile grows with numNodes.
    let bytes = "hostfile".len() + hostfile.len();
    if bytes > MAX_CONFIGMAP_BYTES {
        let lines = hostfile.lines().count();
        return Err(RenderError::new(
            Source::TrainJob,
            "spec.trainer.numNodes",
            format!(
                "the MPI hostfile ConfigMap would hold {bytes} bytes ({lines} hosts), and a member's API server allows at most {} (1 MiB)",
                MAX_CONFIGMAP_BYTES
            ),
        ));
    }
    let hostfile_name = mpi_hostfile_name(draft);
    let secret_name = mpi_secret_name(draft);
    draft.extra.push(Object::ConfigMap(ConfigMap {
        metadata: object_meta(draft, hostfile_name),
        data: Some(BTreeMap::from([("hostfile".to_string(), hostfile)])),
        ..Default::default()
    }));
    let Some(key) = input.ssh_key else {
        return Err(RenderError::new(
            Source::Runtime,
            "spec.mlPolicy.mpi",
            "an MPI runtime needs an SSH key pair for its Secret; none was given",
        ));
    };
    draft.extra.push(Object::Secret(Secret {
        metadata: object_meta(draft, secret_name),
        type_: Some("kubernetes.io/ssh-auth".into()),
        immutable: Some(true),
        data: Some(BTreeMap::from([
            ("ssh-privatekey".to_string(), ByteString(key.private_pem.clone().into_bytes())),
            ("ssh-publickey".to_string(), ByteString(key.public_openssh.clone().into_bytes())),
        ])),
        ..Default::default()
    }));
    Ok(())
}

/// Per-pod requests by the Kubernetes rule: the larger of the containers' sum and any init
/// container, plus overhead.
fn pod_requests(p: &PodSpec) -> BTreeMap<String, Milli> {
    let requests = |c: &Container| -> BTreeMap<String, Milli> {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .map(|m| m.iter().filter_map(|(k, q)| Milli::parse(&q.0).ok().map(|v| (k.clone(), v))).collect())
            .unwrap_or_default()
    };
    let mut sum: BTreeMap<String, Milli> = BTreeMap::new();
    for c in &p.containers {
        for (k, v) in requests(c) {
            *sum.entry(k).or_default() = sum.get(&k).copied().unwrap_or_default() + v;
        }
    }
    for c in p.init_containers.iter().flatten() {
        for (k, v) in requests(c) {
            let e = sum.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    for (k, q) in p.overhead.iter().flatten() {
        if let Ok(v) = Milli::parse(&q.0) {
            *sum.entry(k.clone()).or_default() = sum.get(k).copied().unwrap_or_default() + v;
        }
    }
    sum
}

fn min_resources(draft: &Draft) -> Option<BTreeMap<String, Quantity>> {
    let mut total: BTreeMap<String, Milli> = BTreeMap::new();
    for (j, ps) in draft.spec.replicated_jobs.iter().zip(&draft.pod_sets) {
        let Some(p) = pod_spec(j) else { continue };
        for (k, v) in pod_requests(p) {
            let e = total.entry(k).or_default();
            *e = *e + v * i128::from(ps.count);
        }
    }
    (!total.is_empty()).then(|| total.into_iter().map(|(k, v)| (k, Quantity(v.to_string()))).collect())
}

/// The PodGroup for the gang scheduler in effect, and the pod label or annotation tying pods
/// to it. minMember counts the pods of every replicated job that waits on none (`dependsOn`):
/// Trainer counts every pod set, but a job that waits on another is created only once that one
/// is Ready or Complete, so a group counting it could never assemble (MPI's launcher waits for
/// the workers, torchtune's nodes for the initializers; kubeflow/mpi-operator#608 is the same
/// trap). Without `dependsOn` this is Trainer's sum. minResources stays Trainer's: all of it.
pub(crate) fn pod_group(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let rt_policy = input.runtime.spec().pod_group_policy.as_ref();
    draft.scheduler = match input.capabilities.gang_scheduler {
        GangScheduler::FromRuntime => match rt_policy {
            Some(p) if p.coscheduling.is_some() => GangScheduler::Coscheduling,
            Some(p) if p.volcano.is_some() => GangScheduler::Volcano,
            _ => GangScheduler::None,
        },
        other => other,
    };
    let name = draft.name.clone();
    let min_member: i32 = draft
        .spec
        .replicated_jobs
        .iter()
        .zip(&draft.pod_sets)
        .filter(|(j, _)| j.depends_on.is_empty())
        .map(|(j, ps)| j.replicas.unwrap_or(1) * ps.count)
        .sum();
    let meta = object_meta(draft, name.clone());
    match draft.scheduler {
        GangScheduler::Coscheduling => {
            for j in &mut draft.spec.replicated_jobs {
                pod_meta_mut(j)
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(podgroup::COSCHEDULING_POD_LABEL.into(), name.clone());
            }
            let timeout =
                rt_policy.and_then(|p| p.coscheduling.as_ref()).and_then(|c| c.schedule_timeout_seconds).unwrap_or(60);
            draft.extra.push(Object::Coscheduling(PodGroup {
                metadata: meta,
                spec: podgroup::CoschedulingPodGroupSpec {
                    min_member,
                    min_resources: min_resources(draft),
                    schedule_timeout_seconds: Some(timeout),
                    extra: Default::default(),
                },
            }));
        }
        GangScheduler::Volcano => {
            for j in &mut draft.spec.replicated_jobs {
                pod_meta_mut(j)
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(podgroup::VOLCANO_POD_ANNOTATION.into(), name.clone());
            }
            let priority =
                draft.spec.replicated_jobs.iter().rev().find_map(|j| pod_spec(j)?.priority_class_name.clone());
            draft.extra.push(Object::Volcano(volcano::PodGroup {
                metadata: meta,
                spec: volcano::PodGroupSpec {
                    min_member,
                    min_resources: min_resources(draft),
                    queue: draft.annotations.get(podgroup::VOLCANO_QUEUE_ANNOTATION).cloned(),
                    priority_class_name: priority,
                    // The runtime CRD defaults `mode: hard` and `highestTierAllowed: 1`.
                    network_topology: rt_policy
                        .and_then(|p| p.volcano.as_ref())
                        .and_then(|v| v.network_topology.clone())
                        .map(|mut n| {
                            n.mode.get_or_insert_with(|| "hard".into());
                            n.highest_tier_allowed.get_or_insert(1);
                            n
                        }),
                    extra: Default::default(),
                },
            }));
        }
        GangScheduler::Kai => {
            // KAI's podgrouper names the group after the JobSet's UID: known once it exists.
            let pg_name = format!("pg-{name}-{}", input.jobset_uid.unwrap_or("00000000-0000-0000-0000-000000000000"));
            for j in &mut draft.spec.replicated_jobs {
                pod_meta_mut(j)
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(podgroup::KAI_POD_ANNOTATION.into(), pg_name.clone());
            }
            let labels = input.trainjob.metadata.labels.clone().unwrap_or_default();
            let queue = labels
                .get(podgroup::KAI_QUEUE_LABEL)
                .or(labels.get("project"))
                .cloned()
                .unwrap_or_else(|| "default-queue".into());
            let mut meta = object_meta(draft, pg_name);
            meta.labels = Some(labels.clone());
            draft.extra.push(Object::Kai(kai::PodGroup {
                metadata: meta,
                spec: kai::PodGroupSpec {
                    min_member,
                    queue: Some(queue),
                    priority_class_name: Some(
                        labels.get("priorityClassName").cloned().unwrap_or_else(|| "train".into()),
                    ),
                    preemptibility: labels.get("kai.scheduler/preemptibility").cloned(),
                    topology_constraint: None,
                    extra: Default::default(),
                },
            }));
        }
        GangScheduler::Native => {
            for j in &mut draft.spec.replicated_jobs {
                pod_meta_mut(j)
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(podgroup::NATIVE_POD_LABEL.into(), name.clone());
            }
            draft.extra.push(Object::Native(native::PodGroup {
                metadata: meta,
                spec: native::PodGroupSpec {
                    scheduling_policy: native::SchedulingPolicy {
                        gang: Some(native::Gang { min_count: min_member }),
                        basic: None,
                    },
                    extra: Default::default(),
                },
            }));
        }
        GangScheduler::None | GangScheduler::FromRuntime => {}
    }
    Ok(())
}

/// Pins each placed pod set to its domain for the member's scheduler.
pub(crate) fn pinning(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(placement) = input.placement else { return Ok(()) };
    let caps = input.capabilities;
    for ps in &placement.spec.pod_sets {
        let Some(j) = draft.spec.replicated_jobs.iter_mut().find(|j| j.name == ps.name) else { continue };
        pin_affinity(j, ps);
        if let (TopologyMode::Kueue, Some(d)) = (caps.topology_mode, &ps.domain) {
            let key =
                if ps.required { api::kueue::PODSET_REQUIRED_TOPOLOGY } else { api::kueue::PODSET_PREFERRED_TOPOLOGY };
            pod_meta_mut(j).annotations.get_or_insert_with(BTreeMap::new).insert(key.into(), d.node_label.clone());
            // The annotation lets Kueue pick any domain of the level; the selector keeps ours.
            pod_spec_mut(j)
                .node_selector
                .get_or_insert_with(BTreeMap::new)
                .insert(d.node_label.clone(), d.value.clone());
        }
    }
    if let (TopologyMode::Kueue, Some(queue)) = (caps.topology_mode, &caps.kueue_local_queue) {
        draft.labels.insert(api::kueue::QUEUE_NAME_LABEL.into(), queue.clone());
    }
    // The gang's widest placed level, for schedulers that take one constraint per group.
    let widest = placement
        .spec
        .pod_sets
        .iter()
        .filter_map(|p| p.domain.as_ref().map(|d| (level_rank(&d.level), d, p.required)))
        .min_by_key(|x| x.0);
    if let Some((_, d, required)) = widest {
        for obj in &mut draft.extra {
            match obj {
                Object::Volcano(pg) => {
                    let tier = caps.volcano_tiers.get(&d.level).copied().unwrap_or_else(|| default_tier(&d.level));
                    pg.spec.network_topology = Some(api::trainer::NetworkTopology {
                        mode: Some(if required { "hard" } else { "soft" }.into()),
                        highest_tier_allowed: Some(tier),
                    });
                }
                Object::Kai(pg) => {
                    pg.spec.topology_constraint = Some(kai::TopologyConstraint {
                        topology: caps.kai_topology.clone(),
                        required_topology_level: required.then(|| d.node_label.clone()),
                        preferred_topology_level: (!required).then(|| d.node_label.clone()),
                    });
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn level_rank(level: &str) -> u8 {
    match level {
        "zone" => 0,
        "block" => 1,
        "rack" => 2,
        "nvlink" => 3,
        _ => 4,
    }
}

/// Volcano HyperNode tiers count up from the leaves: a rack switch is tier 1.
fn default_tier(level: &str) -> i32 {
    match level {
        "host" | "nvlink" | "rack" => 1,
        "block" => 2,
        _ => 3,
    }
}

/// Required node affinity to the placed domain (preferred when the TrainJob only preferred
/// the level), and the GPU flavor as a node selector.
fn pin_affinity(j: &mut ReplicatedJob, ps: &PodSetPlacement) {
    let p = pod_spec_mut(j);
    if let Some(flavor) = &ps.flavor {
        p.node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(api::stowage::GPU_PRODUCT_LABEL.into(), flavor.clone());
    }
    let Some(d) = &ps.domain else { return };
    let expr = NodeSelectorRequirement {
        key: d.node_label.clone(),
        operator: "In".into(),
        values: Some(vec![d.value.clone()]),
    };
    let na = p.affinity.get_or_insert_with(Default::default).node_affinity.get_or_insert_with(NodeAffinity::default);
    if ps.required {
        let sel = na
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector { node_selector_terms: Vec::new() });
        if sel.node_selector_terms.is_empty() {
            sel.node_selector_terms.push(NodeSelectorTerm::default());
        }
        // Terms are ORed: the domain must hold in each of them.
        for term in &mut sel.node_selector_terms {
            term.match_expressions.get_or_insert_with(Vec::new).push(expr.clone());
        }
    } else {
        na.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Vec::new).push(
            PreferredSchedulingTerm {
                weight: 100,
                preference: NodeSelectorTerm { match_expressions: Some(vec![expr]), match_fields: None },
            },
        );
    }
}

/// With a placement: each Job fails fast on configuration errors (exit 126/127: the command
/// could not run) and does not count disruptions (preemption, eviction, node drain) against its
/// backoff limit. Needs `restartPolicy: Never`, set when the runtime sets none.
pub(crate) fn fault_tolerance(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    if input.placement.is_none() {
        return Ok(());
    }
    for j in &mut draft.spec.replicated_jobs {
        let p = pod_spec_mut(j);
        match p.restart_policy.as_deref() {
            None => p.restart_policy = Some("Never".into()),
            Some("Never") => {}
            Some(_) => continue,
        }
        let spec = j.template.spec.get_or_insert_with(Default::default);
        if spec.pod_failure_policy.is_some() {
            continue;
        }
        spec.pod_failure_policy = Some(PodFailurePolicy {
            rules: vec![
                PodFailurePolicyRule {
                    action: "Ignore".into(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                    }]),
                    on_exit_codes: None,
                },
                PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: None,
                        operator: "In".into(),
                        values: CONFIG_ERROR_EXIT_CODES.to_vec(),
                    }),
                    on_pod_conditions: None,
                },
            ],
        });
    }
    Ok(())
}

/// With a placement, every object and pod carries the TrainJob UID and the placement epoch, so
/// an agent can find and delete what an older epoch made.
pub(crate) fn fencing(input: &Input<'_>, draft: &mut Draft) -> Result<(), RenderError> {
    let Some(placement) = input.placement else { return Ok(()) };
    let labels = [
        (TRAINJOB_UID_LABEL.to_string(), placement.spec.train_job_uid.clone()),
        (EPOCH_LABEL.to_string(), placement.spec.epoch.to_string()),
    ];
    draft.labels.extend(labels.clone());
    for j in &mut draft.spec.replicated_jobs {
        pod_meta_mut(j).labels.get_or_insert_with(BTreeMap::new).extend(labels.clone());
    }
    for obj in &mut draft.extra {
        let meta = match obj {
            Object::JobSet(o) => &mut o.metadata,
            Object::Coscheduling(o) => &mut o.metadata,
            Object::Volcano(o) => &mut o.metadata,
            Object::Kai(o) => &mut o.metadata,
            Object::Native(o) => &mut o.metadata,
            Object::ConfigMap(o) => &mut o.metadata,
            Object::Secret(o) => &mut o.metadata,
        };
        meta.labels.get_or_insert_with(BTreeMap::new).extend(labels.clone());
    }
    Ok(())
}

/// Assembles the objects: JobSet first. Without a placement (Trainer's own output) each is owned
/// by the TrainJob; on a member, where the TrainJob does not exist, ownership is by labels.
pub(crate) fn finish(input: &Input<'_>, mut draft: Draft) -> Vec<Object> {
    // The builder writes the TrainJob's `suspend`, whatever the runtime says (`Suspend`); the
    // TrainJob CRD defaults it to false.
    draft.spec.suspend = input.trainjob.spec.suspend;
    draft.spec = without_empty(std::mem::take(&mut draft.spec));
    let owner = input.placement.is_none().then(|| OwnerReference {
        api_version: api::trainer::API_VERSION.into(),
        kind: "TrainJob".into(),
        name: draft.name.clone(),
        uid: draft.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    });
    let meta = |m: &mut ObjectMeta| m.owner_references = owner.clone().map(|o| vec![o]);
    let mut jobset = JobSet {
        metadata: ObjectMeta {
            name: Some(draft.name.clone()),
            namespace: Some(draft.namespace.clone()),
            labels: (!draft.labels.is_empty()).then(|| draft.labels.clone()),
            annotations: (!draft.annotations.is_empty()).then(|| draft.annotations.clone()),
            ..Default::default()
        },
        spec: std::mem::take(&mut draft.spec),
        status: None,
    };
    meta(&mut jobset.metadata);
    let mut out = vec![Object::JobSet(Box::new(jobset))];
    for mut obj in draft.extra {
        match &mut obj {
            Object::JobSet(o) => meta(&mut o.metadata),
            Object::Coscheduling(o) => meta(&mut o.metadata),
            Object::Volcano(o) => meta(&mut o.metadata),
            Object::Kai(o) => meta(&mut o.metadata),
            Object::Native(o) => meta(&mut o.metadata),
            Object::ConfigMap(o) => meta(&mut o.metadata),
            Object::Secret(o) => meta(&mut o.metadata),
        }
        out.push(obj);
    }
    if input.placement.is_none() {
        // Trainer v2.3.0 snapshots the runtime so later edits to it do not reach this TrainJob.
        let mut snapshot = serde_json::to_value(input.runtime.spec()).unwrap_or_default();
        let runtime = serde_json::json!({
            "apiVersion": api::trainer::API_VERSION, "kind": input.runtime.kind(),
            "metadata": ObjectMeta {
                name: input.runtime.metadata().name.clone(),
                namespace: input.runtime.metadata().namespace.clone(),
                ..Default::default()
            },
            "spec": snapshot.take(),
        });
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{}-runtime-snapshot", draft.name)),
                namespace: Some(draft.namespace.clone()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "runtime".to_string(),
                input_limits::yaml::to_string(&runtime).unwrap_or_default(),
            )])),
            ..Default::default()
        };
        meta(&mut cm.metadata);
        out.push(Object::ConfigMap(cm));
    }
    // PodGroup right after the JobSet, then ConfigMaps and Secrets: a stable order.
    out[1..].sort_by_key(|o| match o {
        Object::Coscheduling(_) | Object::Volcano(_) | Object::Kai(_) | Object::Native(_) => 0,
        Object::ConfigMap(_) => 1,
        _ => 2,
    });
    out
}

/// Map fields of the JobSet's Go types: an empty one is left out like an empty list.
const MAP_FIELDS: [&str; 7] =
    ["labels", "annotations", "nodeSelector", "limits", "requests", "matchLabels", "overhead"];

/// The JobSet spec as Trainer's apply configuration writes it: every field is `omitempty`, so an
/// empty list (`env: []`, `ports: []`, `args: []`, ...) or map is absent, not empty; an empty
/// object (`emptyDir: {}`) stays.
fn without_empty(spec: api::jobset::JobSetSpec) -> api::jobset::JobSetSpec {
    fn prune(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, x| {
                    prune(x);
                    !(x.as_array().is_some_and(Vec::is_empty)
                        || (MAP_FIELDS.contains(&k.as_str()) && x.as_object().is_some_and(|o| o.is_empty())))
                });
            }
            Value::Array(items) => items.iter_mut().for_each(prune),
            _ => {}
        }
    }
    let Ok(mut v) = serde_json::to_value(&spec) else { return spec };
    prune(&mut v);
    serde_json::from_value(v).unwrap_or(spec)
}
