//! Rejects what Trainer's CRD validation rules and webhooks reject, before anything is built,
//! with the field path named: the TrainJob's, the runtime's or the Placement's.

use api::jobset::ReplicatedJob;
use api::trainer::{
    self, ANCESTOR_DATASET, ANCESTOR_MODEL, ANCESTOR_TRAINER, DEFAULT_MANAGED_BY, KUEUE_MULTIKUEUE_MANAGED_BY,
};
use k8s_openapi::api::core::v1::ResourceRequirements;
use serde_json::Value;

use super::steps::{ancestor_of, job_containers};
use super::{Draft, Input, RenderError, Source};
use api::quantity::{BadQuantity, Milli};

const MAX_RUNTIME_PATCHES: usize = 16;
/// Pods per replicated job: the rendered Jobs are Indexed, and Kubernetes rejects an Indexed Job
/// whose `parallelism` is above this.
const MAX_PODS_PER_JOB: i32 = 100_000;
/// Digits a quantity may have: beyond 20, its value is far past anything schedulable (and past
/// what milli-unit arithmetic on it stays exact for).
const MAX_QUANTITY_DIGITS: usize = 20;
const RESERVED_TORCH: [&str; 5] =
    ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"];
const RESERVED_MPI: [&str; 4] = [
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
];
const PROTECTED_CONTAINERS: [&str; 3] = ["node", "dataset-initializer", "model-initializer"];

fn tj(path: impl Into<String>, problem: impl Into<String>) -> RenderError {
    RenderError::new(Source::TrainJob, path, problem)
}

fn rt(path: impl Into<String>, problem: impl Into<String>) -> RenderError {
    RenderError::new(Source::Runtime, path, problem)
}

/// RFC 1035 label: what a TrainJob name must be (CRD CEL rule), at most 63 characters.
pub(crate) fn rfc1035(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

pub(crate) fn check(input: &Input<'_>, _draft: &mut Draft) -> Result<(), RenderError> {
    let job = input.trainjob;
    let spec = &job.spec;
    let name = job.metadata.name.as_deref().unwrap_or("");
    if !rfc1035(name) {
        return Err(tj(
            "metadata.name",
            "must be an RFC 1035 label (lower-case letters, digits and '-', starting with a letter) of at most 63 characters",
        ));
    }
    check_runtime_ref(input)?;
    if let Some(m) = &spec.managed_by
        && m != DEFAULT_MANAGED_BY
        && m != KUEUE_MULTIKUEUE_MANAGED_BY
    {
        return Err(tj("spec.managedBy", format!("must be {DEFAULT_MANAGED_BY} or {KUEUE_MULTIKUEUE_MANAGED_BY}")));
    }
    if spec.active_deadline_seconds.is_some_and(|d| d < 1) {
        return Err(tj("spec.activeDeadlineSeconds", "must be at least 1"));
    }
    if let Some(t) = &spec.trainer {
        check_trainer_counts(t)?;
    }
    check_runtime(input)?;
    if let Some(t) = &spec.trainer {
        check_trainer(input, t)?;
    }
    check_initializers(input)?;
    check_patches(input)?;
    check_placement(input)
}

/// `spec.trainer` against the runtime: a trainer job to apply it to, quantities that parse,
/// and no env the ML policy sets itself.
fn check_trainer(input: &Input<'_>, t: &trainer::Trainer) -> Result<(), RenderError> {
    let runtime = input.runtime.spec();
    if !runtime.template.spec.replicated_jobs.iter().any(|j| ancestor_of(j) == Some(ANCESTOR_TRAINER)) {
        return Err(tj(
            "spec.trainer",
            format!(
                "runtime {} has no replicated job labelled {}={ANCESTOR_TRAINER} to apply it to",
                runtime_name(input),
                trainer::ANCESTOR_LABEL
            ),
        ));
    }
    if let Some(r) = &t.resources_per_node {
        check_resources(r, "spec.trainer.resourcesPerNode", Source::TrainJob)?;
    }
    let policy = runtime.ml_policy.as_ref();
    for (i, e) in t.env.iter().enumerate() {
        let reserved = (policy.is_some_and(|p| p.torch.is_some()) && RESERVED_TORCH.contains(&e.name.as_str()))
            || (policy.is_some_and(|p| p.mpi.is_some()) && RESERVED_MPI.contains(&e.name.as_str()))
            || (policy.is_some_and(|p| p.xgboost.is_some()) && e.name.starts_with("DMLC_"));
        if reserved {
            return Err(tj(
                format!("spec.trainer.env[{i}].name"),
                format!("{} is set by the runtime's ML policy and cannot be overridden", e.name),
            ));
        }
    }
    Ok(())
}

/// `spec.initializer.dataset` / `.model`: a storage URI with a scheme (CRD rule), and a runtime
/// job and container of that name mounting the `initializer` volume (JobSet plugin).
fn check_initializers(input: &Input<'_>) -> Result<(), RenderError> {
    let Some(init) = &input.trainjob.spec.initializer else { return Ok(()) };
    let jobs = &input.runtime.spec().template.spec.replicated_jobs;
    for (section, ancestor, source) in
        [("dataset", ANCESTOR_DATASET, &init.dataset), ("model", ANCESTOR_MODEL, &init.model)]
    {
        let Some(source) = source else { continue };
        let path = format!("spec.initializer.{section}");
        if let Some(uri) = &source.storage_uri
            && !uri.is_empty()
            && !storage_uri(uri)
        {
            return Err(tj(
                format!("{path}.storageUri"),
                "must be a URI with a scheme, like hf://org/name or s3://bucket/key",
            ));
        }
        let has = jobs.iter().any(|j| {
            j.name == ancestor
                && job_containers(j)
                    .any(|c| c.name == ancestor && c.volume_mounts.iter().flatten().any(|m| m.name == "initializer"))
        });
        if !has {
            return Err(tj(
                path,
                format!(
                    "runtime {} has no replicated job {ancestor} with a container {ancestor} mounting volume \"initializer\"",
                    runtime_name(input)
                ),
            ));
        }
    }
    Ok(())
}

/// The Placement names only pod sets the runtime has, with a fencing epoch that is not negative.
fn check_placement(input: &Input<'_>) -> Result<(), RenderError> {
    let Some(p) = input.placement else { return Ok(()) };
    let jobs = &input.runtime.spec().template.spec.replicated_jobs;
    for (i, ps) in p.spec.pod_sets.iter().enumerate() {
        if !jobs.iter().any(|j| j.name == ps.name) {
            return Err(RenderError::new(
                Source::Placement,
                format!("spec.podSets[{i}].name"),
                format!("runtime has no replicated job {:?}", ps.name),
            ));
        }
    }
    if p.spec.epoch < 0 {
        return Err(RenderError::new(Source::Placement, "spec.epoch", "must not be negative"));
    }
    Ok(())
}

/// `spec.trainer.numNodes` and `numProcPerNode`: positive, and numNodes within an Indexed Job.
fn check_trainer_counts(t: &trainer::Trainer) -> Result<(), RenderError> {
    if t.num_nodes.is_some_and(|n| n < 1) {
        return Err(tj("spec.trainer.numNodes", "must be at least 1"));
    }
    if t.num_nodes.is_some_and(|n| n > MAX_PODS_PER_JOB) {
        return Err(tj(
            "spec.trainer.numNodes",
            format!("must be at most {MAX_PODS_PER_JOB}, the most pods Kubernetes allows an Indexed Job"),
        ));
    }
    if t.num_proc_per_node.is_some_and(|n| n < 1) {
        return Err(tj("spec.trainer.numProcPerNode", "must be at least 1"));
    }
    Ok(())
}

fn runtime_name(input: &Input<'_>) -> String {
    input.runtime.metadata().name.clone().unwrap_or_default()
}

fn storage_uri(uri: &str) -> bool {
    let Some((scheme, rest)) = uri.split_once("://") else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
        && !rest.is_empty()
        && !rest.contains('\n')
}

fn check_runtime_ref(input: &Input<'_>) -> Result<(), RenderError> {
    let r = &input.trainjob.spec.runtime_ref;
    if r.name.is_empty() {
        return Err(tj("spec.runtimeRef.name", "must not be empty"));
    }
    if r.api_group_or_default() != trainer::GROUP {
        return Err(tj("spec.runtimeRef.apiGroup", format!("must be {}", trainer::GROUP)));
    }
    let kind = r.kind_or_default();
    if kind != "TrainingRuntime" && kind != "ClusterTrainingRuntime" {
        return Err(tj(
            "spec.runtimeRef.kind",
            format!(
                "unsupported runtime: {kind}.{} (expected TrainingRuntime or ClusterTrainingRuntime)",
                trainer::GROUP
            ),
        ));
    }
    if kind != input.runtime.kind() {
        return Err(tj(
            "spec.runtimeRef.kind",
            format!("is {kind} but the runtime given is a {}", input.runtime.kind()),
        ));
    }
    if r.name != runtime_name(input) {
        return Err(tj(
            "spec.runtimeRef.name",
            format!("is {:?} but the runtime given is {:?}", r.name, runtime_name(input)),
        ));
    }
    let namespace = input.trainjob.metadata.namespace.as_deref().unwrap_or("default");
    if let api::trainer::Runtime::Namespaced(rt) = input.runtime
        && let Some(theirs) = rt.metadata.namespace.as_deref()
        && theirs != namespace
    {
        return Err(tj(
            "spec.runtimeRef.name",
            format!(
                "TrainingRuntime {:?} is in namespace {theirs:?}; it must be in the TrainJob's, {namespace:?}",
                r.name
            ),
        ));
    }
    Ok(())
}

fn check_resources(r: &ResourceRequirements, path: &str, source: Source) -> Result<(), RenderError> {
    for (part, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (res, q) in map.iter().flatten() {
            check_quantity(&q.0)
                .map_err(|e| RenderError::new(source, format!("{path}.{part}.{res}"), e.to_string()))?;
        }
    }
    Ok(())
}

/// Why a container's resource quantity is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum QuantityProblem {
    #[error(transparent)]
    Syntax(#[from] BadQuantity),
    #[error("{0:?} has more than {MAX_QUANTITY_DIGITS} digits; use a suffix (Gi, T, ...)")]
    TooManyDigits(String),
    #[error("{0:?} must not be negative")]
    Negative(String),
    #[error("{0:?} is more than Kubernetes can account for (at most {max} units)", max = i64::MAX)]
    TooLarge(String),
}

/// A resource quantity Kubernetes accepts for a container: the quantity grammar, not negative,
/// and within the 64-bit range Kubernetes accounts resources in.
fn check_quantity(q: &str) -> Result<(), QuantityProblem> {
    if !quantity_syntax(q) {
        return Err(BadQuantity(q.to_string()).into());
    }
    let digits = q.chars().take_while(|c| !c.is_ascii_alphabetic()).filter(char::is_ascii_digit).count();
    if digits > MAX_QUANTITY_DIGITS {
        return Err(QuantityProblem::TooManyDigits(q.to_string()));
    }
    let v = Milli::parse(q)?;
    if v.0 < 0 {
        return Err(QuantityProblem::Negative(q.to_string()));
    }
    if v.0 > i128::from(i64::MAX) * 1000 {
        return Err(QuantityProblem::TooLarge(q.to_string()));
    }
    Ok(())
}

/// The Kubernetes quantity grammar (the CRD's pattern): an optional sign, a decimal number,
/// then nothing, a binary suffix (Ki..Ei), a decimal suffix (n, u, m, k, M..E) or an integer
/// exponent (e3, E-2).
fn quantity_syntax(q: &str) -> bool {
    let unsigned = q.strip_prefix(['+', '-']).unwrap_or(q);
    let split = unsigned.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(split);
    let decimal = |n: &str| n.bytes().any(|c| c.is_ascii_digit()) && n.matches('.').count() <= 1;
    let exponent = |e: &str| {
        let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit())
    };
    decimal(number)
        && (matches!(
            suffix,
            "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E"
        ) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent))
}

/// What Trainer's runtime webhook and CRD rules check, plus quantities that must parse and
/// counts that must fit a Kubernetes Job.
fn check_runtime(input: &Input<'_>) -> Result<(), RenderError> {
    let spec = input.runtime.spec();
    let jobs = &spec.template.spec.replicated_jobs;
    if jobs.is_empty() {
        return Err(rt("spec.template.spec.replicatedJobs", "must list at least one replicated job"));
    }
    for (i, j) in jobs.iter().enumerate() {
        let at = |f: &str| format!("spec.template.spec.replicatedJobs[{i}].{f}");
        if jobs[..i].iter().any(|o| o.name == j.name) {
            return Err(rt(at("name"), format!("{:?} is used twice", j.name)));
        }
        if let Some(a) = ancestor_of(j) {
            let container = match a {
                ANCESTOR_TRAINER => "node",
                ANCESTOR_DATASET | ANCESTOR_MODEL => a,
                other => {
                    return Err(rt(
                        at("template.metadata.labels"),
                        format!("unknown {} {other:?}", trainer::ANCESTOR_LABEL),
                    ));
                }
            };
            if j.replicas.is_some_and(|r| r != 1) {
                return Err(rt(
                    at("replicas"),
                    format!("must be 1 for a job labelled {}={a}", trainer::ANCESTOR_LABEL),
                ));
            }
            if !job_containers(j).any(|c| c.name == container) {
                return Err(rt(
                    at("template.spec.template.spec.containers"),
                    format!("must have a container named {container}"),
                ));
            }
        }
        check_counts(j, &at)?;
        check_container_resources(j, &at)?;
    }
    check_ml_policy(input)?;
    check_gang_size(input)
}

/// `replicas` and `parallelism` of one replicated job: what a JobSet of Indexed Jobs takes.
fn check_counts(j: &ReplicatedJob, at: &impl Fn(&str) -> String) -> Result<(), RenderError> {
    if j.replicas.is_some_and(|r| r < 0) {
        return Err(rt(at("replicas"), "must not be negative"));
    }
    if let Some(p) = j.template.spec.as_ref().and_then(|s| s.parallelism)
        && !(0..=MAX_PODS_PER_JOB).contains(&p)
    {
        return Err(rt(
            at("template.spec.parallelism"),
            format!("must be between 0 and {MAX_PODS_PER_JOB}, the most pods Kubernetes allows an Indexed Job"),
        ));
    }
    Ok(())
}

/// Quantities of the containers and init containers of one replicated job, each at its own path.
fn check_container_resources(j: &ReplicatedJob, at: &impl Fn(&str) -> String) -> Result<(), RenderError> {
    let Some(pod) = j.template.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else { return Ok(()) };
    let lists =
        [("containers", pod.containers.as_slice()), ("initContainers", pod.init_containers.as_deref().unwrap_or(&[]))];
    for (field, containers) in lists {
        for (k, c) in containers.iter().enumerate() {
            if let Some(r) = &c.resources {
                check_resources(
                    r,
                    &at(&format!("template.spec.template.spec.{field}[{k}].resources")),
                    Source::Runtime,
                )?;
            }
        }
    }
    Ok(())
}

/// The gang's pod count must fit a PodGroup's `minMember` (an int32). Each job's count is at most
/// the largest of numNodes and its parallelism (both bounded above), so only `replicas` can
/// overflow it.
fn check_gang_size(input: &Input<'_>) -> Result<(), RenderError> {
    let spec = input.runtime.spec();
    let nodes = [
        input.trainjob.spec.trainer.as_ref().and_then(|t| t.num_nodes),
        spec.ml_policy.as_ref().and_then(|p| p.num_nodes),
    ];
    let mut total = 0i64;
    for (i, j) in spec.template.spec.replicated_jobs.iter().enumerate() {
        let parallelism = j.template.spec.as_ref().and_then(|s| s.parallelism);
        let count = nodes.into_iter().chain([parallelism]).flatten().max().unwrap_or(1).max(1);
        let replicas = if ancestor_of(j).is_some() { 1 } else { j.replicas.unwrap_or(1) };
        total += i64::from(replicas) * i64::from(count);
        if total > i64::from(i32::MAX) {
            return Err(rt(
                format!("spec.template.spec.replicatedJobs[{i}].replicas"),
                format!("makes the gang more than {} pods, the most a PodGroup's minMember holds", i32::MAX),
            ));
        }
    }
    Ok(())
}

/// `spec.mlPolicy`: one policy at most (CRD rule), numNodes within a Job's bounds, torch env
/// injection targets that exist, and the MPI webhook checks.
fn check_ml_policy(input: &Input<'_>) -> Result<(), RenderError> {
    let spec = input.runtime.spec();
    let Some(policy) = &spec.ml_policy else { return Ok(()) };
    let set: Vec<&str> = [
        ("torch", policy.torch.is_some()),
        ("mpi", policy.mpi.is_some()),
        ("jax", policy.jax.is_some()),
        ("xgboost", policy.xgboost.is_some()),
        ("flux", policy.flux.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if set.len() > 1 {
        return Err(rt("spec.mlPolicy", format!("sets {} but only one ML policy may be configured", set.join(", "))));
    }
    if let Some(n) = policy.num_nodes
        && !(1..=MAX_PODS_PER_JOB).contains(&n)
    {
        return Err(rt("spec.mlPolicy.numNodes", format!("must be between 1 and {MAX_PODS_PER_JOB}")));
    }
    if let Some(torch) = &policy.torch {
        check_env_injection(input, torch.env_injection.iter().flat_map(|e| &e.targets))?;
    }
    if let Some(mpi) = &policy.mpi {
        check_mpi(input, mpi)?;
    }
    Ok(())
}

/// `mlPolicy.torch.envInjection.targets`: existing jobs and containers, never `node` (CRD rule).
fn check_env_injection<'a>(
    input: &Input<'_>,
    targets: impl Iterator<Item = &'a trainer::EnvInjectionTarget>,
) -> Result<(), RenderError> {
    let jobs = &input.runtime.spec().template.spec.replicated_jobs;
    for (t, target) in targets.enumerate() {
        let at = format!("spec.mlPolicy.torch.envInjection.targets[{t}]");
        let Some(job) = jobs.iter().find(|j| j.name == target.job_name) else {
            return Err(rt(format!("{at}.jobName"), format!("runtime has no replicated job {:?}", target.job_name)));
        };
        for (c, name) in target.container_names.iter().enumerate() {
            let cat = format!("{at}.containerNames[{c}]");
            if name == "node" {
                return Err(rt(cat, "must not be node: the trainer's node container gets the torch env already"));
            }
            if !job_containers(job).any(|x| &x.name == name) {
                return Err(rt(cat, format!("replicated job {} has no container {name:?}", job.name)));
            }
        }
    }
    Ok(())
}

/// The MPI runtime webhook: launcher and node jobs for runLauncherAsNode with 2+ nodes; OpenMPI.
fn check_mpi(input: &Input<'_>, mpi: &trainer::MpiPolicy) -> Result<(), RenderError> {
    let spec = input.runtime.spec();
    let jobs = &spec.template.spec.replicated_jobs;
    let nodes = input
        .trainjob
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.num_nodes)
        .or(spec.ml_policy.as_ref().and_then(|p| p.num_nodes))
        .unwrap_or(1);
    if mpi.run_launcher_as_node == Some(true)
        && nodes >= 2
        && !(jobs.iter().any(|j| j.name == "launcher") && jobs.iter().any(|j| j.name == "node"))
    {
        return Err(rt(
            "spec.template.spec.replicatedJobs",
            "an MPI runtime with runLauncherAsNode and 2 or more nodes needs both a launcher and a node job",
        ));
    }
    if mpi.mpi_implementation.as_deref().is_some_and(|m| !m.is_empty() && m != "OpenMPI") {
        return Err(rt("spec.mlPolicy.mpi.mpiImplementation", "only OpenMPI is implemented"));
    }
    Ok(())
}

/// The fields of a `runtimePatches[]` entry, as the TrainJob CRD declares them. The API server
/// drops any other field (and any null), so Trainer never sees it: applying it would render
/// something Trainer does not.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// An object with only these fields.
    Object(&'static [(&'static str, Shape)]),
    /// A list of items of this shape.
    List(&'static Shape),
    Str,
    /// Anything non-null: its type is checked when the patched template is read back.
    Any,
}

const PATCH_META: Shape = Shape::Object(&[
    ("annotations", Shape::Any),
    ("finalizers", Shape::Any),
    ("labels", Shape::Any),
    ("name", Shape::Str),
    ("namespace", Shape::Str),
]);
const PATCH_CONTAINER: Shape = Shape::Object(&[
    ("env", Shape::Any),
    ("name", Shape::Str),
    ("securityContext", Shape::Any),
    ("volumeMounts", Shape::Any),
]);
const PATCH_POD_SPEC: Shape = Shape::Object(&[
    ("affinity", Shape::Any),
    ("containers", Shape::List(&PATCH_CONTAINER)),
    ("imagePullSecrets", Shape::Any),
    ("initContainers", Shape::List(&PATCH_CONTAINER)),
    ("nodeSelector", Shape::Any),
    ("schedulingGates", Shape::Any),
    ("securityContext", Shape::Any),
    ("serviceAccountName", Shape::Str),
    ("terminationGracePeriodSeconds", Shape::Any),
    ("tolerations", Shape::Any),
    ("volumes", Shape::Any),
]);
const PATCH_REPLICATED_JOB: Shape = Shape::Object(&[
    ("name", Shape::Str),
    (
        "template",
        Shape::Object(&[
            ("metadata", PATCH_META),
            (
                "spec",
                Shape::Object(&[("template", Shape::Object(&[("metadata", PATCH_META), ("spec", PATCH_POD_SPEC)]))]),
            ),
        ]),
    ),
]);
const PATCH_SPEC: Shape = Shape::Object(&[(
    "template",
    Shape::Object(&[
        ("metadata", PATCH_META),
        ("spec", Shape::Object(&[("replicatedJobs", Shape::List(&PATCH_REPLICATED_JOB))])),
    ]),
)]);

/// `v` has `shape`, or the error names the first field that does not.
fn check_shape(v: &Value, shape: Shape, path: &str) -> Result<(), RenderError> {
    if v.is_null() {
        return Err(tj(path, "must not be null: the API server drops null fields, so it would not remove anything"));
    }
    match shape {
        Shape::Object(fields) => {
            let Some(map) = v.as_object() else { return Err(tj(path, "must be an object")) };
            for (k, x) in map {
                let at = format!("{path}.{k}");
                let Some((_, s)) = fields.iter().find(|(f, _)| f == k) else {
                    let allowed: Vec<&str> = fields.iter().map(|(f, _)| *f).collect();
                    return Err(tj(
                        at,
                        format!("is not a field a runtime patch may set here (allowed: {})", allowed.join(", ")),
                    ));
                };
                check_shape(x, *s, &at)?;
            }
            Ok(())
        }
        Shape::List(item) => {
            let Some(items) = v.as_array() else { return Err(tj(path, "must be a list")) };
            items.iter().enumerate().try_for_each(|(i, x)| check_shape(x, *item, &format!("{path}[{i}]")))
        }
        Shape::Str if !v.is_string() => Err(tj(path, "must be a string")),
        Shape::Str => Ok(()),
        Shape::Any => check_no_null(v, path),
    }
}

fn check_no_null(v: &Value, path: &str) -> Result<(), RenderError> {
    match v {
        Value::Null => {
            Err(tj(path, "must not be null: the API server drops null fields, so it would not remove anything"))
        }
        Value::Object(m) => m.iter().try_for_each(|(k, x)| check_no_null(x, &format!("{path}.{k}"))),
        Value::Array(a) => a.iter().enumerate().try_for_each(|(i, x)| check_no_null(x, &format!("{path}[{i}]"))),
        _ => Ok(()),
    }
}

/// `runtimePatches`: at most 16, managers are unique domain-prefixed paths, only the fields the
/// CRD declares, patched jobs and containers exist in the runtime, and no env goes into the
/// protected containers.
fn check_patches(input: &Input<'_>) -> Result<(), RenderError> {
    let patches = &input.trainjob.spec.runtime_patches;
    if patches.len() > MAX_RUNTIME_PATCHES {
        return Err(tj("spec.runtimePatches", format!("must have at most {MAX_RUNTIME_PATCHES} items")));
    }
    for (i, p) in patches.iter().enumerate() {
        let at = |f: &str| format!("spec.runtimePatches[{i}].{f}");
        if !domain_prefixed(&p.manager) {
            return Err(tj(at("manager"), "must be a domain-prefixed path, like example.com/my-controller"));
        }
        if patches[..i].iter().any(|o| o.manager == p.manager) {
            return Err(tj(at("manager"), format!("{:?} appears twice", p.manager)));
        }
        if let Some(k) = p.extra.keys().next() {
            return Err(tj(at(k), "is not a field of a runtime patch (manager, time, trainingRuntimeSpec)"));
        }
        let Some(body) = &p.training_runtime_spec else { continue };
        check_shape(body, PATCH_SPEC, &at("trainingRuntimeSpec"))?;
        check_patched_jobs(input, body, &at("trainingRuntimeSpec.template.spec.replicatedJobs"))?;
    }
    Ok(())
}

/// Each patched replicated job and container exists in the runtime; no env for the containers
/// the TrainJob's trainer and initializer sections own. `body` has the patch shape.
fn check_patched_jobs(input: &Input<'_>, body: &Value, path: &str) -> Result<(), RenderError> {
    let jobs = &input.runtime.spec().template.spec.replicated_jobs;
    let rjobs = body.pointer("/template/spec/replicatedJobs").and_then(Value::as_array);
    for (k, rj) in rjobs.into_iter().flatten().enumerate() {
        let jat = format!("{path}[{k}]");
        let Some(name) = rj.get("name").and_then(Value::as_str) else {
            return Err(tj(format!("{jat}.name"), "is required: the name of the replicated job to patch"));
        };
        let Some(job) = jobs.iter().find(|j| j.name == name) else {
            return Err(tj(format!("{jat}.name"), format!("runtime has no replicated job {name:?}")));
        };
        let pod = rj.pointer("/template/spec/template/spec");
        for field in ["containers", "initContainers"] {
            for (c, container) in
                pod.and_then(|p| p.get(field)).and_then(Value::as_array).into_iter().flatten().enumerate()
            {
                let cat = format!("{jat}.template.spec.template.spec.{field}[{c}]");
                let Some(cname) = container.get("name").and_then(Value::as_str) else {
                    return Err(tj(format!("{cat}.name"), "is required: the name of the container to patch"));
                };
                if !job_containers(job).any(|x| x.name == cname) {
                    return Err(tj(format!("{cat}.name"), format!("replicated job {name} has no container {cname:?}")));
                }
                if container.get("env").is_some() && PROTECTED_CONTAINERS.contains(&cname) {
                    return Err(tj(
                        format!("{cat}.env"),
                        format!(
                            "env cannot be patched into container {cname}: use spec.trainer.env or spec.initializer"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Kubernetes' `IsDomainPrefixedPath`: a DNS-1123 subdomain, '/', then HTTP path characters.
fn domain_prefixed(manager: &str) -> bool {
    let Some((host, path)) = manager.split_once('/') else { return false };
    dns1123_subdomain(host)
        && !path.is_empty()
        && path.chars().all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c))
}

/// Lower-case alphanumeric labels, inner '-' allowed, joined by '.', at most 253 characters.
fn dns1123_subdomain(host: &str) -> bool {
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    host.len() <= 253 && host.split('.').all(label)
}
