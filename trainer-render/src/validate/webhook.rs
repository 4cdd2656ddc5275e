//! What Trainer's TrainJob validating webhook refuses (403): the runtime reference, then each
//! plugin's `Validate` (torch and torchtune, MPI, XGBoost, Flux, Volcano, JobSet).

use api::jobset::ReplicatedJob;
use api::podgroup::VOLCANO_QUEUE_ANNOTATION;
use api::trainer::{self, ANCESTOR_DATASET, ANCESTOR_MODEL, Runtime, TrainJob};
use kube_conventions::names::{DNS1123_SUBDOMAIN_MESSAGE, is_dns1123_subdomain};
use serde_json::{Value, json};

use crate::field::{BadValue, ErrorType, FieldError, Path, Rule};
use crate::pods::{gpu_count, job_containers, node_resources, pod_spec};
use crate::torchtune::{self, NProc};
use crate::{Draft, Source, gojson};

use super::s;

/// Go's `%v` of a `[]string`.
fn go_list(items: &[&str]) -> String {
    format!("[{}]", items.join(" "))
}

fn json_value(v: impl serde::Serialize, ty: gojson::Ty) -> BadValue {
    BadValue::Json(gojson::to_string(&serde_json::to_value(v).unwrap_or_default(), ty))
}

/// The TrainJob's `runtimeRef` after the CRD defaults, as Go prints it.
fn runtime_ref_value(job: &TrainJob) -> BadValue {
    let r = &job.spec.runtime_ref;
    let v = json!({"name": r.name, "apiGroup": r.api_group_or_default(), "kind": r.kind_or_default()});
    BadValue::Json(gojson::to_string(&v, gojson::RUNTIME_REF))
}

const RESERVED_TORCH: [&str; 5] =
    ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"];
const RESERVED_MPI: [&str; 4] = [
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
];
const RESERVED_XGBOOST: [&str; 4] = ["DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"];
const PROTECTED_CONTAINERS: [&str; 3] = ["node", "dataset-initializer", "model-initializer"];
const FLUX_INSTALLER: &str = "flux-installer";
fn hook(t: ErrorType, path: impl Into<String>, v: BadValue, d: impl Into<String>) -> FieldError {
    FieldError::new(Source::TrainJob, Rule::Webhook, t, path, v, d)
}

/// Why the webhook cannot find the runtime a TrainJob names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RefProblem {
    /// `runtimeRef`'s group and kind name no runtime implementation: `unsupported runtime: <key>`.
    Unsupported(String),
    /// The runtime does not exist (or the one given is another).
    NotFound(FieldError),
}

/// `ValidateCreate`/`ValidateUpdate` and `ValidateObjects`: the runtime implementation for the
/// reference's group and kind, then the runtime itself — `runtime` is the one the caller found
/// for it (`None`: not found). A runtime that is not the one referenced counts as not found.
pub(crate) fn resolve_runtime_ref(job: &TrainJob, runtime: Option<&Runtime>) -> Result<(), RefProblem> {
    let r = &job.spec.runtime_ref;
    let (group, kind) = (r.api_group_or_default(), r.kind_or_default());
    let key = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    let cluster = format!("ClusterTrainingRuntime.{}", trainer::GROUP);
    let namespaced = format!("TrainingRuntime.{}", trainer::GROUP);
    if key != cluster && key != namespaced {
        return Err(RefProblem::Unsupported(key));
    }
    let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
    let found = runtime.is_some_and(|rt| {
        rt.kind() == kind
            && rt.metadata().name.as_deref() == Some(r.name.as_str())
            && match rt {
                Runtime::Namespaced(n) => n.metadata.namespace.as_deref().is_none_or(|ns| ns == namespace),
                Runtime::Cluster(_) => true,
            }
    });
    if found {
        return Ok(());
    }
    // The cached client's NotFound names the kind as its resource; ClusterTrainingRuntime's
    // path is spelled `spec.RuntimeRef` in Trainer (pkg/runtime/core/clustertrainingruntime.go).
    let (path, what) = if key == cluster {
        ("spec.RuntimeRef", "clusterTrainingRuntime")
    } else {
        ("spec.runtimeRef", "trainingRuntime")
    };
    Err(RefProblem::NotFound(hook(
        ErrorType::Invalid,
        path,
        runtime_ref_value(job),
        format!("{key} {:?} not found: specified {what} must be created before the TrainJob is created", r.name),
    )))
}

/// The webhook plugins' `Validate`, against the runtime with the TrainJob's patches applied
/// (`draft`, as `newRuntimeInfo` builds it), in a fixed order: the ML policy's plugin, Volcano,
/// JobSet (Trainer runs them in Go map order). Volcano's PriorityClass lookup needs the cluster
/// and is not made; the JobSet plugin's "no replicated job still active" check on a patch change
/// is the caller's, who knows the JobSet.
pub(crate) fn webhook_rules(
    job: &TrainJob,
    runtime: &Runtime,
    draft: &Draft,
    old: Option<&TrainJob>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rspec = runtime.spec();
    let jobs = &draft.spec.replicated_jobs;
    if let Some(policy) = &rspec.ml_policy {
        if let Some(torch) = &policy.torch {
            torch_rules(job, draft, torch, &mut errs);
        }
        if let Some(mpi) = &policy.mpi {
            mpi_rules(job, jobs, mpi, &mut errs);
        }
        if policy.xgboost.is_some()
            && let Some(t) = &job.spec.trainer
        {
            for (i, e) in t.env.iter().enumerate() {
                if RESERVED_XGBOOST.contains(&e.name.as_str()) {
                    errs.push(hook(
                        ErrorType::Forbidden,
                        format!("spec.trainer.env[{i}]"),
                        BadValue::Omit,
                        format!("{} is reserved for the XGBoost runtime", e.name),
                    ));
                }
            }
        }
        if let Some(flux) = &policy.flux {
            let runtime_nproc = flux.get("numProcPerNode").and_then(Value::as_i64).unwrap_or(1);
            let nproc = job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node).map_or(runtime_nproc, i64::from);
            if nproc < 1 {
                errs.push(hook(
                    ErrorType::Invalid,
                    "spec.trainer.numProcPerNode",
                    BadValue::Int(nproc),
                    "must be greater than or equal to 1 for Flux TrainJob",
                ));
            }
            for j in jobs.iter().filter(|j| j.name == "node") {
                for c in pod_spec(j).into_iter().flat_map(|p| p.init_containers.iter().flatten()) {
                    if c.name == FLUX_INSTALLER {
                        errs.push(hook(
                            ErrorType::Invalid,
                            "spec.trainer.initContainers",
                            s(&c.name),
                            "InitContainer 'flux-installer' is reserved",
                        ));
                    }
                }
            }
        }
    }
    if rspec.pod_group_policy.as_ref().is_some_and(|p| p.volcano.is_some())
        && draft.annotations.get(VOLCANO_QUEUE_ANNOTATION).is_some_and(String::is_empty)
    {
        errs.push(hook(
            ErrorType::Invalid,
            Path::new("spec").child("annotations").key(VOLCANO_QUEUE_ANNOTATION),
            s(""),
            "Volcano queue name must not be empty",
        ));
    }
    jobset_rules(job, runtime, jobs, old, &mut errs);
    errs
}

fn reserved_env_error(job: &TrainJob, reserved: &[&str], errs: &mut Vec<FieldError>) {
    let Some(t) = &job.spec.trainer else { return };
    let mut found: Vec<&str> = t.env.iter().map(|e| e.name.as_str()).filter(|n| reserved.contains(n)).collect();
    found.sort_unstable();
    found.dedup();
    if !found.is_empty() {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.env",
            json_value(&t.env, gojson::ENV_VARS),
            format!("must not have reserved envs, invalid envs configured: {}", go_list(&found)),
        ));
    }
}

/// The torch plugin: env injection targets that exist, no torchrun env in the TrainJob, and
/// torchtune's checks for a bare `tune run`.
fn torch_rules(job: &TrainJob, draft: &Draft, torch: &trainer::TorchPolicy, errs: &mut Vec<FieldError>) {
    for target in torch.env_injection.iter().flat_map(|e| &e.targets) {
        for name in &target.container_names {
            let exists = draft
                .spec
                .replicated_jobs
                .iter()
                .find(|j| j.name == target.job_name)
                .is_some_and(|j| job_containers(j).any(|c| &c.name == name));
            if !exists {
                errs.push(hook(
                    ErrorType::Invalid,
                    "spec.runtimeRef",
                    json_value(target, gojson::ENV_INJECTION_TARGET),
                    format!(
                        "envInjection target podSet {} container {} not found in runtime template",
                        crate::field::go_quote(&target.job_name),
                        crate::field::go_quote(name)
                    ),
                ));
            }
        }
    }
    reserved_env_error(job, &RESERVED_TORCH, errs);
    if let Some(t) = &job.spec.trainer
        && torchtune::is_entrypoint(t.command.as_deref())
    {
        torchtune_rules(job, t, draft, errs);
    }
}

/// `validateTorchTune`.
fn torchtune_rules(job: &TrainJob, t: &trainer::Trainer, draft: &Draft, errs: &mut Vec<FieldError>) {
    let ref_name = &job.spec.runtime_ref.name;
    let model = torchtune::model_from_runtime_ref(ref_name);
    if !torchtune::SUPPORTED_MODELS.contains(&model.as_str()) {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.runtimeRef.name",
            s(ref_name),
            format!("must have a supported pretrained model, invalid model configured: {model}"),
        ));
    }
    let num_nodes = i64::from(t.num_nodes.unwrap_or(1));
    if num_nodes > 1 && model != torchtune::MODEL_LLAMA3_3_70B {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.numNodes",
            BadValue::Int(num_nodes),
            format!("must be 1 for {model} model"),
        ));
    }
    let nproc = t.num_proc_per_node.map_or(NProc::Auto, |n| NProc::Int(i64::from(n)));
    let gpus = gpu_count(node_resources(job, &draft.spec.replicated_jobs).as_ref());
    let args = t.args.as_deref().unwrap_or(&[]);
    let (_, config) = torchtune::recipe_and_config(num_nodes, nproc, gpus, args, ref_name);
    if config.contains(torchtune::SUFFIX_QLORA_DISTRIBUTED) {
        if model == torchtune::MODEL_QWEN2_5_1_5B {
            errs.push(hook(
                ErrorType::Invalid,
                "spec.runtimeRef.name",
                s(ref_name),
                format!("QLoRA is not supported for {model} model"),
            ));
        }
        if !config.contains(torchtune::SUFFIX_QLORA_SINGLE_DEVICE)
            && (model == torchtune::MODEL_LLAMA3_2_1B || model == torchtune::MODEL_LLAMA3_2_3B)
        {
            let nproc_value = match nproc {
                NProc::Int(n) => BadValue::Int(n),
                NProc::Auto => s("auto"),
            };
            errs.push(hook(
                ErrorType::Invalid,
                "spec.trainer.numProcPerNode",
                nproc_value,
                format!("must be auto or 1 for {model} model when using QLoRA"),
            ));
            let resources = match &t.resources_per_node {
                Some(r) => json_value(r, gojson::RESOURCES),
                None => BadValue::Json("null".into()),
            };
            errs.push(hook(
                ErrorType::Invalid,
                "spec.trainer.resourcesPerNode",
                resources,
                format!("must have gpu resource with value 1 for {model} model when using QLoRA"),
            ));
        }
    }
    if num_nodes > 1 && torchtune::is_lora_or_qlora(args) {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.numNodes",
            BadValue::Int(num_nodes),
            "LoRA fine-tuning is not supported for multi-node training in TorchTune",
        ));
    }
    for (i, arg) in args.iter().enumerate() {
        let key = arg.split('=').next().unwrap_or_default();
        if torchtune::IMMUTABLE_CONFIGS.contains(&key) {
            errs.push(hook(
                ErrorType::Invalid,
                format!("spec.trainer.args[{i}]"),
                s(arg),
                format!(
                    "must not set immutable config {} in trainer args; it is managed by the runtime",
                    crate::field::go_quote(key)
                ),
            ));
        }
    }
}

/// The MPI plugin: a runtime running the launcher as a node needs both jobs for 2+ nodes; no
/// OpenMPI env in the TrainJob.
fn mpi_rules(job: &TrainJob, jobs: &[ReplicatedJob], mpi: &trainer::MpiPolicy, errs: &mut Vec<FieldError>) {
    if let Some(t) = &job.spec.trainer
        && t.num_nodes.unwrap_or(1) >= 2
        && mpi.run_launcher_as_node == Some(true)
        && !(jobs.iter().any(|j| j.name == "launcher") && jobs.iter().any(|j| j.name == "node"))
    {
        errs.push(hook(
            ErrorType::Invalid,
            "spec.trainer.numNodes",
            BadValue::Int(i64::from(t.num_nodes.unwrap_or(1))),
            "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
        ));
    }
    reserved_env_error(job, &RESERVED_MPI, errs);
}

/// The JobSet plugin: initializer jobs, containers and volume mounts for the sections the TrainJob
/// has; runtime patches changed only while suspended; managers that are domain-prefixed paths;
/// patched jobs and containers that exist in the runtime; no env for the containers the TrainJob
/// sections own.
fn jobset_rules(
    job: &TrainJob,
    runtime: &Runtime,
    jobs: &[ReplicatedJob],
    old: Option<&TrainJob>,
    errs: &mut Vec<FieldError>,
) {
    if let Some(init) = &job.spec.initializer {
        for (name, config, present) in [
            (ANCESTOR_DATASET, "datasetConfig", init.dataset.is_some()),
            (ANCESTOR_MODEL, "modelConfig", init.model.is_some()),
        ] {
            if !present {
                continue;
            }
            let named: Vec<&ReplicatedJob> = jobs.iter().filter(|j| j.name == name).collect();
            let detail = if named.is_empty() {
                Some(format!("must have {name} job when trainJob is configured with input {config}"))
            } else if !named.last().is_some_and(|j| job_containers(j).any(|c| c.name == name)) {
                Some(format!("must have container with name - {name} in the {name} job"))
            } else if !named
                .iter()
                .flat_map(|j| pod_spec(j).into_iter().flat_map(|p| &p.containers))
                .any(|c| c.name == name && c.volume_mounts.iter().flatten().any(|m| m.name == "initializer"))
            {
                Some(format!("must have volumeMount with name - initializer in container {name} of the {name} job"))
            } else {
                None
            };
            if let Some(detail) = detail {
                errs.push(hook(ErrorType::Invalid, "spec.runtimeRef", runtime_ref_value(job), detail));
            }
        }
    }
    let patches = &job.spec.runtime_patches;
    if let Some(old) = old {
        let changed = serde_json::to_value(&old.spec.runtime_patches).ok() != serde_json::to_value(patches).ok();
        let suspended = |j: &TrainJob| j.spec.suspend == Some(true);
        if changed && !suspended(old) && !suspended(job) {
            errs.push(hook(
                ErrorType::Forbidden,
                "spec.runtimePatches",
                BadValue::Omit,
                "RuntimePatches can only be modified when the TrainJob is suspended before or after the update",
            ));
        }
    }
    let patches_value = || json_value(patches, gojson::RUNTIME_PATCHES);
    // Trainer looks patched jobs and containers up in the patched template, where a patch's own
    // job or container is found; its unit tests (and Stowage) hold them to the runtime's.
    let runtime_jobs = &runtime.spec().template.spec.replicated_jobs;
    for p in patches {
        errs.extend(domain_prefixed_path("spec.runtimePatches.manager", &p.manager));
        let rjobs = p.training_runtime_spec.as_ref().and_then(|b| b.pointer("/template/spec/replicatedJobs"));
        for rj in rjobs.and_then(Value::as_array).into_iter().flatten() {
            let name = rj.get("name").and_then(Value::as_str).unwrap_or_default();
            let Some(rt_job) = runtime_jobs.iter().find(|j| j.name == name) else {
                errs.push(hook(
                    ErrorType::Invalid,
                    "spec.runtimePatches",
                    patches_value(),
                    "must not have replicated job that doesn't exist in the runtime job template",
                ));
                continue;
            };
            let pod = rj.pointer("/template/spec/template/spec");
            for (field, what) in [("initContainers", "initContainer"), ("containers", "container")] {
                for c in pod.and_then(|p| p.get(field)).and_then(Value::as_array).into_iter().flatten() {
                    let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
                    if !job_containers(rt_job).any(|x| x.name == cname) {
                        errs.push(hook(
                            ErrorType::Invalid,
                            "spec.runtimePatches",
                            patches_value(),
                            format!("must not have {what} that doesn't exist in the runtime job {name}"),
                        ));
                    } else if field == "containers"
                        && c.get("env").and_then(Value::as_array).is_some_and(|e| !e.is_empty())
                        && PROTECTED_CONTAINERS.contains(&cname)
                    {
                        errs.push(hook(
                            ErrorType::Invalid,
                            "spec.runtimePatches",
                            patches_value(),
                            "must not have envs for the dataset-initializer, model-initializer, node containers",
                        ));
                    }
                }
            }
        }
    }
}

/// `validation.IsDomainPrefixedPath`.
fn domain_prefixed_path(path: &str, v: &str) -> Vec<FieldError> {
    if v.is_empty() {
        return vec![hook(ErrorType::Required, path, BadValue::Omit, "")];
    }
    let Some((host, rest)) = v.split_once('/').filter(|(h, r)| !h.is_empty() && !r.is_empty()) else {
        return vec![hook(ErrorType::Invalid, path, s(v), "must be a domain-prefixed path (such as \"acme.io/foo\")")];
    };
    let mut errs = Vec::new();
    if host.len() > 253 {
        errs.push(hook(ErrorType::Invalid, path, s(host), "must be no more than 253 characters"));
    }
    if !is_dns1123_subdomain(host) {
        errs.push(hook(ErrorType::Invalid, path, s(host), DNS1123_SUBDOMAIN_MESSAGE));
    }
    if !rest.chars().all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c)) {
        errs.push(hook(
            ErrorType::Invalid,
            path,
            s(rest),
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use kube_conventions::names::DNS1123_SUBDOMAIN_MESSAGE;

    use super::*;

    #[test]
    fn domain_prefixed_paths_as_apimachinery_checks_them() {
        assert!(domain_prefixed_path("p", "example.com/a").is_empty());
        assert!(domain_prefixed_path("p", "localhost/tuner").is_empty());
        assert_eq!(
            domain_prefixed_path("p", "my-controller")[0].to_string(),
            "p: Invalid value: \"my-controller\": must be a domain-prefixed path (such as \"acme.io/foo\")"
        );
        assert_eq!(
            domain_prefixed_path("p", "Example.com/x")[0].to_string(),
            format!("p: Invalid value: \"Example.com\": {DNS1123_SUBDOMAIN_MESSAGE}")
        );
        assert!(domain_prefixed_path("p", "example.com/a b")[0].detail.starts_with("Invalid path"));
    }
}
