//! A simulated member cluster on top of the in-memory API server: Nodes built from a fleet
//! file's cluster, and one controller that plays the JobSet controller, the gang scheduler and
//! the kubelet. JobSet → Jobs → Pods; a gang's pods are bound all or nothing, honouring node
//! selectors, required node affinity and the PodGroup (coscheduling, Volcano or KAI); pods run,
//! then succeed after the JobSet's simulated duration (annotation
//! `stowage.dev/simulated-duration-seconds`, 10 s when absent) or fail when a test says so;
//! JobSet status and conditions are written as the JobSet controller writes them. A gang that
//! cannot be bound within its PodGroup timeout stays Pending with the scheduler's reason. Each
//! container writes a few log lines, served by the member's `pods/{name}/log`: its command, its
//! rank and node when it starts, its exit code when it ends.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};
use simulator::fleet_file::{ClusterSpec, FleetSpec};

use api::stowage::TRAINJOB_UID_LABEL;
use kube_mem::resources::ResourceType;
use kube_mem::store::{Part, WriteOptions};
use kube_mem::{ApiServer, Requester, Store};

/// Annotation on a JobSet or a TrainJob (read through [`DurationOf`]): how many seconds its pods
/// run before they succeed. The playground's only hook: production code never reads it.
pub const DURATION_ANNOTATION: &str = "stowage.dev/simulated-duration-seconds";

/// How long the pods of a TrainJob run, by its UID (the JobSet's `TRAINJOB_UID_LABEL`); the
/// playground answers it from the hub's TrainJobs.
pub type DurationOf = std::sync::Arc<dyn Fn(&str) -> Option<u64> + Send + Sync>;

/// A [`DurationOf`] that knows no TrainJob: pods run [`DEFAULT_DURATION`] unless their JobSet
/// says otherwise.
pub fn default_durations() -> DurationOf {
    std::sync::Arc::new(|_| None)
}
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
pub use api::stowage::GPU_PRODUCT_LABEL;
const TICK: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("fleet")]
    Fleet(#[from] simulator::fleet_file::FleetFileError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("CRD {file}: {message}")]
    Crd { file: String, message: String },
}

/// A running simulated member: its API server and its controller.
pub struct SimulatedMember {
    pub name: String,
    pub server: ApiServer,
    controller: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for SimulatedMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedMember").field("name", &self.name).field("server", &self.server).finish()
    }
}

impl Drop for SimulatedMember {
    fn drop(&mut self) {
        self.controller.abort();
    }
}

impl SimulatedMember {
    /// Starts a member with the Nodes of `cluster` and the upstream JobSet and PodGroup CRDs;
    /// its pods run as long as `duration_of` says.
    pub async fn start(cluster: &ClusterSpec, duration_of: DurationOf) -> Result<Self, MemberError> {
        let server = ApiServer::start().await?;
        {
            let mut store = server.store().lock().map_err(|_| std::io::Error::other("store poisoned"))?;
            install_crds(&mut store)?;
            for node in nodes(cluster)? {
                let rt = builtin(&store, "", "v1", "nodes");
                store
                    .create(Requester::InProcess, &rt, None, node, &write_options())
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
            }
        }
        let shared = server.shared();
        let controller = server.spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            // A slow pass is followed by a full tick, not by passes back to back.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut controllers = Controllers::default();
            loop {
                tick.tick().await;
                // One controller at a time, the lock released between them: requests waiting on
                // this thread are served in between, as a real member serves them while its
                // controllers work.
                for controller in Controller::ALL {
                    if let Ok(mut store) = shared.store.lock() {
                        controllers.pass(controller, &mut store, &duration_of);
                    }
                    tokio::task::yield_now().await;
                }
            }
        });
        Ok(SimulatedMember { name: cluster.name.clone(), server, controller })
    }

    /// Makes a running pod fail (exit code 1, `message` as its termination message and the end
    /// of its log), as a crashed process would.
    pub fn fail_pod(&self, namespace: &str, name: &str, message: &str) -> bool {
        self.end_pod(namespace, name, message, Some(message))
    }

    /// Makes a running pod fail having written `last_words` to its log only, as a process that
    /// leaves no termination message: the log is all there is to read.
    pub fn crash_pod(&self, namespace: &str, name: &str, last_words: &str) -> bool {
        self.end_pod(namespace, name, last_words, None)
    }

    fn end_pod(&self, namespace: &str, name: &str, log: &str, termination: Option<&str>) -> bool {
        let Ok(mut store) = self.server.store().lock() else { return false };
        let rt = builtin(&store, "", "v1", "pods");
        let Ok(mut pod) = store.get(&rt, Some(namespace), name) else { return false };
        write_log(&mut store, &pod, &format!("{log}\n{}", exit_line(1)));
        let mut terminated = json!({"exitCode": 1, "reason": "Error"});
        if let Some(m) = termination {
            terminated["message"] = m.into();
        }
        pod["status"]["phase"] = "Failed".into();
        pod["status"]["containerStatuses"] = json!([{"name": "node", "ready": false, "restartCount": 0, "image": "", "imageID": "",
            "state": {"terminated": terminated}}]);
        store.update(Requester::InProcess, &rt, Some(namespace), name, pod, Part::Status, &write_options()).is_ok()
    }
}

fn write_options() -> WriteOptions {
    WriteOptions { strict: false, dry_run: false }
}

fn builtin(store: &Store, group: &str, version: &str, plural: &str) -> ResourceType {
    store.lookup(group, version, plural).cloned().unwrap_or_else(|| unreachable_type(plural))
}

fn unreachable_type(plural: &str) -> ResourceType {
    // Built-in kinds are registered at start; a missing one is a bug in this file.
    ResourceType {
        group: String::new(),
        version: "v1".into(),
        kind: plural.into(),
        plural: plural.into(),
        singular: plural.into(),
        namespaced: true,
        status_subresource: true,
        short_names: Vec::new(),
        schema: None,
        printer_columns: Vec::new(),
        selectable_fields: Vec::new(),
    }
}

fn install_crds(store: &mut Store) -> Result<(), MemberError> {
    let rt = builtin(store, "apiextensions.k8s.io", "v1", "customresourcedefinitions");
    for file in upstream::MEMBER_CRDS {
        let crd = |message: String| MemberError::Crd { file: file.path.into(), message };
        let crd_value: Value = input_limits::yaml::from_str(file.text).map_err(|e| crd(e.to_string()))?;
        store.create(Requester::InProcess, &rt, None, crd_value, &write_options()).map_err(|e| crd(e.to_string()))?;
    }
    Ok(())
}

/// Node objects for a fleet-file cluster: one label per topology level, the GPU product label,
/// allocatable and capacity.
pub fn nodes(cluster: &ClusterSpec) -> Result<Vec<Value>, MemberError> {
    let fleet = FleetSpec { clusters: vec![cluster.clone()] }.build(&cluster.name)?;
    let c = &fleet.clusters()[0];
    let mut out = Vec::new();
    for (host, spec) in fleet.hosts() {
        let mut labels = BTreeMap::new();
        let mut cur = Some(host);
        while let Some(d) = cur {
            let dom = fleet.domain(d);
            if dom.depth > 0 {
                labels.insert(c.levels[dom.depth as usize - 1].label.clone(), dom.name.clone());
            }
            cur = dom.parent;
        }
        if let Some(f) = spec.gpu_flavor {
            labels.insert(GPU_PRODUCT_LABEL.to_string(), fleet.flavor_name(f).to_string());
        }
        let name = fleet.domain(host).name.clone();
        labels.insert("kubernetes.io/hostname".into(), name.clone());
        let resources = json!({"cpu": format!("{}m", spec.cpu_milli), "memory": format!("{}Mi", spec.memory_mib),
                               "nvidia.com/gpu": spec.gpus.to_string(), "pods": "110"});
        out.push(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                        "status": {"allocatable": resources, "capacity": resources,
                                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}));
    }
    Ok(out)
}

fn name_of(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn ns_of(o: &Value) -> String {
    namespace_of(o).to_string()
}

fn namespace_of(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or("default")
}

/// A JSON object of these fields, their values moved in: `json!` writes a `Value` it is given
/// over again through serde (deeper than a clone), and these are whole specs and statuses
/// written on every pass.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// An object a controller makes, from its parts.
fn made(api_version: &str, kind: &str, metadata: Value, spec: Value) -> Value {
    object([("apiVersion", api_version.into()), ("kind", kind.into()), ("metadata", metadata), ("spec", spec)])
}

fn owner(o: &Value) -> Value {
    json!([{"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"], "uid": o["metadata"]["uid"],
            "controller": true, "blockOwnerDeletion": true}])
}

fn age_secs(o: &Value) -> u64 {
    let ts = o["metadata"]["creationTimestamp"].as_str().unwrap_or("");
    parse_rfc3339(ts).map(|t| now_secs().saturating_sub(t)).unwrap_or(0)
}

fn now_secs() -> u64 {
    kube_mem::time::unix_seconds().max(0) as u64
}

/// Unix seconds of a timestamp; before the epoch counts as the epoch.
fn parse_rfc3339(s: &str) -> Option<u64> {
    kube_mem::time::parse_rfc3339(s).map(|t| t.max(0) as u64)
}

/// A change one pass decided, made after the pass has finished reading.
enum Write {
    Create(ResourceType, String, Value),
    /// The new status alone: the store copies the object once to put it in.
    Status(ResourceType, String, String, Value),
    Delete(ResourceType, String, String),
}

fn apply(store: &mut Store, writes: Vec<Write>) {
    for w in writes {
        let _ = match w {
            Write::Create(rt, ns, obj) => {
                store.create(Requester::InProcess, &rt, Some(&ns), obj, &write_options()).map(|_| ())
            }
            Write::Status(rt, ns, name, status) => store
                .update(
                    Requester::InProcess,
                    &rt,
                    Some(&ns),
                    &name,
                    object([("status", status)]),
                    Part::Status,
                    &write_options(),
                )
                .map(|_| ()),
            Write::Delete(rt, ns, name) => store.delete(Requester::InProcess, &rt, Some(&ns), &name, false).map(|_| ()),
        };
    }
}

/// The member's controllers, each a pass over the store: the JobSet and Job controllers
/// (children, then status), the gang scheduler and the kubelet. They read the store borrowed
/// and copy only what they change: a pass that copied every object kept the member's lock busy
/// all the time once a few hundred JobSets existed.
#[derive(Debug, Clone, Copy)]
enum Controller {
    Children,
    Scheduler,
    Kubelet,
    Statuses,
}

impl Controller {
    const ALL: [Controller; 4] =
        [Controller::Children, Controller::Scheduler, Controller::Kubelet, Controller::Statuses];
}

/// Where each JobSet pass last started in the store's history: a pass looks only at the
/// JobSets written since (their own writes, or their Jobs' or pods'), as a controller's work
/// queue holds only the keys its watches saw change. The four passes, each over every JobSet 20
/// times a second, were a tenth of a burst's samples. `None`: everything (the first pass, or the
/// history no longer reaches back so far).
#[derive(Debug, Default)]
struct Controllers {
    children: Option<u64>,
    statuses: Option<u64>,
    /// The kubelet's last look at every pod: the second it was in, and the store's version at
    /// its last look at any. Durations are whole seconds, so within a second only pods written
    /// since can have come due; the first pass of each second looks at them all (at 2,000
    /// TrainJobs a look at every pod 20 times a second was a twentieth of a burst's samples).
    kubelet: Option<(u64, u64)>,
    /// The gang scheduler's account of the live pods, kept between passes.
    scheduler: Seen,
}

impl Controllers {
    /// The kubelet's pass at `now` (seconds): every pod in the second's first pass, else the
    /// pods written since the last.
    fn kubelet(&mut self, store: &mut Store, jobsets_rt: &ResourceType, duration_of: &DurationOf, now: u64) {
        let only = match self.kubelet {
            Some((second, rv)) if second == now => pods_written_since(store, rv),
            _ => None,
        };
        self.kubelet = Some((now, store.resource_version()));
        kubelet(store, jobsets_rt, duration_of, now, only.as_ref());
    }

    fn pass(&mut self, controller: Controller, store: &mut Store, duration_of: &DurationOf) {
        // The scheduler binds any pod; the others need JobSets to be served.
        if let Controller::Scheduler = controller {
            return schedule(store, &mut self.scheduler);
        }
        let Some(rt) = jobsets_type(store) else { return };
        match controller {
            Controller::Children => {
                let only = touched(store, &rt, self.children);
                self.children = Some(store.resource_version());
                let children = jobset_children(store, &rt, only.as_ref());
                apply(store, children);
            }
            Controller::Scheduler => {}
            Controller::Kubelet => self.kubelet(store, &rt, duration_of, now_secs()),
            Controller::Statuses => {
                let only = touched(store, &rt, self.statuses);
                self.statuses = Some(store.resource_version());
                let statuses = jobset_statuses(store, &rt, only.as_ref());
                apply(store, statuses);
            }
        }
    }
}

/// A JobSet, by namespace and name.
type JobSetKey = (String, String);

/// The JobSets written since `rv`, or whose Jobs or pods were (by their jobset-name label);
/// `None` when every JobSet is to be looked at.
fn touched(store: &Store, jobsets_rt: &ResourceType, rv: Option<u64>) -> Option<BTreeSet<JobSetKey>> {
    let rv = rv?;
    let mut keys = BTreeSet::new();
    for (rt, own) in [
        (jobsets_rt.clone(), true),
        (builtin(store, "batch", "v1", "jobs"), false),
        (builtin(store, "", "v1", "pods"), false),
    ] {
        // Whose events they were is all a pass needs: not the objects parsed again.
        for meta in store.storage.since_meta(&rt, rv).ok()? {
            let name = if own { meta["metadata"]["name"].as_str() } else { Some(jobset_label(&meta)) };
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                keys.insert((ns_of(&meta), name.to_string()));
            }
        }
    }
    Some(keys)
}

/// The pods written since `rv` (by namespace and name); `None` when the history no longer
/// reaches back so far.
fn pods_written_since(store: &Store, rv: u64) -> Option<BTreeSet<(String, String)>> {
    let pods_rt = builtin(store, "", "v1", "pods");
    Some(store.storage.since_meta(&pods_rt, rv).ok()?.map(|meta| (ns_of(&meta), name_of(&meta))).collect())
}

/// The JobSets a pass looks at: `only` those, or every one.
fn jobsets<'s>(
    store: &'s Store,
    rt: &'s ResourceType,
    only: Option<&'s BTreeSet<JobSetKey>>,
) -> Box<dyn Iterator<Item = &'s Value> + 's> {
    match only {
        Some(keys) => Box::new(keys.iter().filter_map(|(ns, name)| store.peek(rt, Some(ns), name))),
        None => Box::new(store.objects(rt)),
    }
}

/// JobSets are served once their CRD is installed.
fn jobsets_type(store: &Store) -> Option<ResourceType> {
    store.lookup("jobset.x-k8s.io", "v1alpha2", "jobsets").cloned()
}

fn finished(js: &Value) -> bool {
    js["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| (c["type"] == "Completed" || c["type"] == "Failed") && c["status"] == "True")
}

fn pods_of_job<'a>(pods: &'a [&'a Value], job: &str) -> impl Iterator<Item = &'a Value> {
    pods.iter().copied().filter(move |p| p["metadata"]["labels"]["job-name"] == job)
}

fn jobset_label(o: &Value) -> &str {
    o["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"].as_str().unwrap_or("")
}

/// The Jobs and Pods of each live JobSet, by (namespace, name), in one scan of each kind.
type Children<'s> = BTreeMap<(&'s str, &'s str), (Vec<&'s Value>, Vec<&'s Value>)>;

/// An object's (namespace, name), borrowed: the status pass meets every Job and pod of the
/// member, and copying each key was most of its time.
fn key(o: &Value) -> (&str, &str) {
    (o["metadata"]["namespace"].as_str().unwrap_or("default"), o["metadata"]["name"].as_str().unwrap_or(""))
}

/// JobSet controller: Jobs per replicated job and replica (respecting `dependsOn`), and the
/// Job controller's pods per completion index (a Job made in this pass gets its pods in the
/// next).
fn jobset_children(store: &Store, jobsets_rt: &ResourceType, only: Option<&BTreeSet<JobSetKey>>) -> Vec<Write> {
    let jobs_rt = builtin(store, "batch", "v1", "jobs");
    let pods_rt = builtin(store, "", "v1", "pods");
    let mut out = Vec::new();
    for js in jobsets(store, jobsets_rt, only).filter(|js| !finished(js) && js["spec"]["suspend"] != true) {
        let ns = ns_of(js);
        let jname = name_of(js);
        let restarts = js["status"]["restarts"].as_i64().unwrap_or(0);
        for rjob in js["spec"]["replicatedJobs"].as_array().into_iter().flatten() {
            let rname = rjob["name"].as_str().unwrap_or("");
            let ready = rjob["dependsOn"].as_array().into_iter().flatten().all(|d| {
                let dep = d["name"].as_str().unwrap_or("");
                let want = d["status"].as_str().unwrap_or("Ready");
                replicated_job_reached(js, dep, want)
            });
            if !ready {
                continue;
            }
            for i in 0..rjob["replicas"].as_i64().unwrap_or(1) {
                let job_name = format!("{jname}-{rname}-{i}");
                let Some(job) = store.peek(&jobs_rt, Some(&ns), &job_name) else {
                    let tmpl = &rjob["template"];
                    let mut labels = tmpl["metadata"]["labels"].as_object().cloned().unwrap_or_default();
                    labels.insert("jobset.sigs.k8s.io/jobset-name".into(), jname.clone().into());
                    labels.insert("jobset.sigs.k8s.io/replicatedjob-name".into(), rname.into());
                    labels.insert("jobset.sigs.k8s.io/job-index".into(), i.to_string().into());
                    labels.insert("jobset.sigs.k8s.io/restart-attempt".into(), restarts.to_string().into());
                    let metadata = object([
                        ("name", job_name.into()),
                        ("namespace", ns.clone().into()),
                        ("labels", labels.into()),
                        ("ownerReferences", owner(js)),
                    ]);
                    let job = made("batch/v1", "Job", metadata, tmpl["spec"].clone());
                    out.push(Write::Create(jobs_rt.clone(), ns.clone(), job));
                    continue;
                };
                for idx in 0..job["spec"]["parallelism"].as_i64().unwrap_or(1) {
                    let pod_name = format!("{job_name}-{idx}");
                    if store.peek(&pods_rt, Some(&ns), &pod_name).is_some() {
                        continue;
                    }
                    let ptmpl = &job["spec"]["template"];
                    let mut labels = ptmpl["metadata"]["labels"].as_object().cloned().unwrap_or_default();
                    for (k, v) in job["metadata"]["labels"].as_object().into_iter().flatten() {
                        labels.insert(k.clone(), v.clone());
                    }
                    labels.insert("job-name".into(), job_name.clone().into());
                    labels.insert("batch.kubernetes.io/job-completion-index".into(), idx.to_string().into());
                    let mut annotations = ptmpl["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
                    annotations.insert("batch.kubernetes.io/job-completion-index".into(), idx.to_string().into());
                    let metadata = object([
                        ("name", pod_name.into()),
                        ("namespace", ns.clone().into()),
                        ("labels", labels.into()),
                        ("annotations", annotations.into()),
                        ("ownerReferences", owner(job)),
                    ]);
                    let mut pod = made("v1", "Pod", metadata, ptmpl["spec"].clone());
                    pod["status"] = json!({"phase": "Pending"});
                    out.push(Write::Create(pods_rt.clone(), ns.clone(), pod));
                }
            }
        }
    }
    out
}

fn replicated_job_reached(js: &Value, rjob: &str, want: &str) -> bool {
    js["status"]["replicatedJobsStatus"].as_array().into_iter().flatten().any(|s| {
        s["name"] == rjob && {
            let n = |k: &str| s[k].as_i64().unwrap_or(0);
            let total = js["spec"]["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["name"] == rjob)
                .and_then(|r| r["replicas"].as_i64())
                .unwrap_or(1);
            if want == "Complete" { n("succeeded") >= total } else { n("ready") + n("succeeded") >= total }
        }
    })
}

/// The gang a pod belongs to: its PodGroup (coscheduling label, Volcano or KAI annotation), or
/// its JobSet when it names none.
fn gang_of(pod: &Value) -> (&str, Option<(&'static str, &'static str, &'static str)>) {
    let l = &pod["metadata"]["labels"];
    let a = &pod["metadata"]["annotations"];
    if let Some(g) = l["scheduling.x-k8s.io/pod-group"].as_str() {
        return (g, Some(("scheduling.x-k8s.io", "v1alpha1", "podgroups")));
    }
    if let Some(g) = a["scheduling.k8s.io/group-name"].as_str() {
        return (g, Some(("scheduling.volcano.sh", "v1beta1", "podgroups")));
    }
    if let Some(g) = a["pod-group-name"].as_str() {
        return (g, Some(("scheduling.run.ai", "v2alpha2", "podgroups")));
    }
    (l["jobset.sigs.k8s.io/jobset-name"].as_str().unwrap_or(""), None)
}

/// A pod's requests summed over its containers, by resource name (borrowed from the pod).
fn requests(pod: &Value) -> BTreeMap<&str, f64> {
    let mut total = BTreeMap::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for (k, v) in c["resources"]["requests"].as_object().into_iter().flatten() {
            let q = match v.as_str() {
                Some(q) => quantity(q),
                None => quantity(&v.to_string()),
            };
            *total.entry(k.as_str()).or_insert(0.0) += q;
        }
    }
    total
}

/// Resources by name, as a node has them free (borrowed from the node and the pods).
type Free<'s> = BTreeMap<&'s str, f64>;

fn fits(free: &Free<'_>, need: &Free<'_>) -> bool {
    need.iter().all(|(k, v)| free.get(k).copied().unwrap_or(0.0) >= *v)
}

/// `need` taken from `free` (`sign` -1) or given back (`sign` 1). A resource the node does not
/// list is one it has none of.
fn take<'s>(free: &mut Free<'s>, need: &Free<'s>, sign: f64) {
    for (k, v) in need {
        *free.entry(k).or_insert(0.0) += sign * v;
    }
}

/// A quantity as a float in base units: enough for fit tests in a simulation.
fn quantity(q: &str) -> f64 {
    api::quantity::Milli::parse(q).map(|m| m.0 as f64 / 1000.0).unwrap_or(f64::MAX)
}

fn node_matches(pod: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    let selector_ok = pod["spec"]["nodeSelector"].as_object().into_iter().flatten().all(|(k, v)| &labels[k] == v);
    let terms =
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            .as_array();
    let affinity_ok = terms.is_none_or(|terms| {
        terms.is_empty()
            || terms.iter().any(|t| {
                t["matchExpressions"].as_array().into_iter().flatten().all(|e| {
                    let key = e["key"].as_str().unwrap_or("");
                    let values: Vec<&str> =
                        e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                    let have = labels[key].as_str();
                    match e["operator"].as_str() {
                        Some("In") => have.is_some_and(|h| values.contains(&h)),
                        Some("NotIn") => have.is_none_or(|h| !values.contains(&h)),
                        Some("Exists") => have.is_some(),
                        Some("DoesNotExist") => have.is_none(),
                        _ => false,
                    }
                })
            })
    });
    // Taints that keep pods off unless tolerated, as kube-scheduler's TaintToleration filter.
    let tolerations = pod["spec"]["tolerations"].as_array();
    let taints_ok = node["spec"]["taints"].as_array().into_iter().flatten().all(|t| {
        let effect = t["effect"].as_str().unwrap_or("");
        if !matches!(effect, "NoSchedule" | "NoExecute") {
            return true;
        }
        tolerations.into_iter().flatten().any(|tol| {
            let key_ok = match tol["key"].as_str().filter(|k| !k.is_empty()) {
                None => tol["operator"] == "Exists",
                Some(k) => t["key"].as_str() == Some(k),
            };
            let value_ok =
                tol["operator"] == "Exists" || tol["value"].as_str().unwrap_or("") == t["value"].as_str().unwrap_or("");
            let effect_ok = tol["effect"].as_str().is_none_or(|e| e.is_empty() || e == effect);
            key_ok && value_ok && effect_ok
        })
    });
    selector_ok && affinity_ok && taints_ok
}

/// What the gang scheduler decided in a pass, written once it has finished reading.
enum Scheduled {
    Bound { namespace: String, pod: String, node: String },
    Unschedulable { namespace: String, pod: String, message: String },
}

/// The gang scheduler: binds a gang's pods all or nothing once minMember of them exist.
fn schedule(store: &mut Store, seen: &mut Seen) {
    let pods_rt = builtin(store, "", "v1", "pods");
    seen.catch_up(store);
    for decision in scheduled(store, seen) {
        match decision {
            Scheduled::Bound { namespace: ns, pod, node } => {
                let Ok(mut obj) = store.get(&pods_rt, Some(&ns), &pod) else { continue };
                obj["spec"]["nodeName"] = node.into();
                // What starting it writes, read before the pod goes to the store (not copied).
                let lines = start_lines(&obj);
                let started = kube_mem::time::now_rfc3339();
                let containers = container_statuses(&obj, true, json!({"running": {"startedAt": started}}));
                let Ok(bound) =
                    store.update(Requester::InProcess, &pods_rt, Some(&ns), &pod, obj, Part::Main, &write_options())
                else {
                    continue;
                };
                write_log(store, &bound, &lines);
                let mut status = json!({"phase": "Running", "startTime": started,
                    "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]});
                status["containerStatuses"] = containers;
                let status = object([("status", status)]);
                let _ = store.update(
                    Requester::InProcess,
                    &pods_rt,
                    Some(&ns),
                    &pod,
                    status,
                    Part::Status,
                    &write_options(),
                );
            }
            Scheduled::Unschedulable { namespace: ns, pod, message } => {
                let Ok(mut obj) = store.get(&pods_rt, Some(&ns), &pod) else { continue };
                obj["status"]["conditions"] =
                    json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]);
                let _ =
                    store.update(Requester::InProcess, &pods_rt, Some(&ns), &pod, obj, Part::Status, &write_options());
            }
        }
    }
}

/// A live pod (Pending or Running) as the gang scheduler counts it.
#[derive(Debug, Clone, PartialEq)]
struct Live {
    gang: (String, String),
    /// The node it is bound to and what it takes there; `None`: not bound.
    bound: Option<(String, BTreeMap<String, f64>)>,
}

/// The gang scheduler's account of the live pods, brought up to date each pass from the pods
/// written since the last (as a scheduler's cache follows its pod watch): a pass that read
/// every pod of the member, 20 times a second, was 6 % of a burst of 2,000's CPU (issue #39).
#[derive(Debug, Default, PartialEq)]
struct Seen {
    /// The store's version when the account was last brought up to date; `None`: never.
    rv: Option<u64>,
    pods: BTreeMap<(String, String), Live>,
    /// Each gang's live pods, bound or not: coscheduling's PreFilter counts them (a launcher
    /// made after its workers run joins a full group).
    live: BTreeMap<(String, String), usize>,
    /// The live pods not bound yet, by (namespace, name): the first fit's order.
    pending: BTreeSet<(String, String)>,
    /// What bound pods take from each node, by node name.
    used: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Seen {
    /// Brought up to date: the pods written since the last time, or every pod when the store's
    /// history no longer reaches back so far (or at the first pass).
    fn catch_up(&mut self, store: &Store) {
        let pods_rt = builtin(store, "", "v1", "pods");
        let written = self.rv.and_then(|rv| pods_written_since(store, rv));
        self.rv = Some(store.resource_version());
        let Some(written) = written else {
            *self = Seen { rv: self.rv, ..Seen::default() };
            for p in store.objects(&pods_rt) {
                self.count(key(p), p);
            }
            return;
        };
        for at in written {
            self.forget(&at);
            if let Some(p) = store.peek(&pods_rt, Some(&at.0), &at.1) {
                self.count((&at.0, &at.1), p);
            }
        }
    }

    fn count(&mut self, (ns, name): (&str, &str), p: &Value) {
        let phase = p["status"]["phase"].as_str();
        if !matches!(phase, Some("Pending" | "Running")) {
            return;
        }
        let at = (ns.to_string(), name.to_string());
        let gang = (ns.to_string(), gang_of(p).0.to_string());
        *self.live.entry(gang.clone()).or_default() += 1;
        let bound = p["spec"]["nodeName"].as_str().map(|node| {
            let need: BTreeMap<String, f64> = requests(p).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let used = self.used.entry(node.to_string()).or_default();
            for (k, v) in &need {
                *used.entry(k.clone()).or_insert(0.0) += v;
            }
            (node.to_string(), need)
        });
        if bound.is_none() && phase == Some("Pending") {
            self.pending.insert(at.clone());
        }
        self.pods.insert(at, Live { gang, bound });
    }

    fn forget(&mut self, at: &(String, String)) {
        let Some(was) = self.pods.remove(at) else { return };
        self.pending.remove(at);
        if let Some(n) = self.live.get_mut(&was.gang) {
            *n -= 1;
            if *n == 0 {
                self.live.remove(&was.gang);
            }
        }
        if let Some((node, need)) = was.bound
            && let Some(used) = self.used.get_mut(&node)
        {
            for (k, v) in need {
                *used.entry(k).or_insert(0.0) -= v;
            }
        }
    }
}

/// The scheduler's pass, the store borrowed and the live pods as `seen` counts them: which
/// gangs bind where, and which pods to tell they cannot.
fn scheduled(store: &Store, seen: &Seen) -> Vec<Scheduled> {
    if seen.pending.is_empty() {
        return Vec::new();
    }
    let pods_rt = builtin(store, "", "v1", "pods");
    let nodes_rt = builtin(store, "", "v1", "nodes");
    let pods: Vec<&Value> = seen.pending.iter().filter_map(|(ns, name)| store.peek(&pods_rt, Some(ns), name)).collect();
    let nodes: Vec<&Value> = store.objects(&nodes_rt).collect();
    // Free resources by node, in the store's order (first fit): allocatable less what the
    // pods bound there take.
    let mut free: Vec<Free<'_>> = nodes
        .iter()
        .map(|n| {
            let mut free: Free<'_> = n["status"]["allocatable"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), quantity(v.as_str().unwrap_or("0"))))
                .collect();
            if let Some(used) = seen.used.get(n["metadata"]["name"].as_str().unwrap_or("")) {
                take(&mut free, &used.iter().map(|(k, v)| (k.as_str(), *v)).collect(), -1.0);
            }
            free
        })
        .collect();
    let mut gangs: BTreeMap<(&str, &str), Vec<&Value>> = BTreeMap::new();
    for p in &pods {
        gangs.entry((namespace_of(p), gang_of(p).0)).or_default().push(p);
    }
    let mut decided = Vec::new();
    for ((ns, gang), members) in gangs {
        let pg_kind = gang_of(members[0]).1;
        let pg =
            pg_kind.and_then(|(g, v, plural)| store.lookup(g, v, plural)).and_then(|rt| store.peek(rt, Some(ns), gang));
        let min_member = pg.and_then(|pg| pg["spec"]["minMember"].as_i64()).unwrap_or(members.len() as i64);
        let timeout = pg.and_then(|pg| pg["spec"]["scheduleTimeoutSeconds"].as_u64()).unwrap_or(60);
        if (seen.live.get(&(ns.to_string(), gang.to_string())).copied().unwrap_or(0) as i64) < min_member {
            continue;
        }
        // Bound on trial, taken back unless the whole gang fits. The first node with room
        // that the pod's selectors, affinity and tolerations allow: room is asked first, as
        // it is the cheaper test (the other reads the pod's and the node's JSON) and, once a
        // burst fills the first nodes, the one most of them fail.
        let mut binding: Vec<(&Value, usize, Free<'_>)> = Vec::new();
        for p in &members {
            let need = requests(p);
            let Some(i) = (0..nodes.len()).find(|&i| fits(&free[i], &need) && node_matches(p, nodes[i])) else {
                break;
            };
            take(&mut free[i], &need, -1.0);
            binding.push((p, i, need));
        }
        if binding.len() == members.len() {
            decided.extend(binding.into_iter().map(|(pod, i, _)| Scheduled::Bound {
                namespace: ns.to_string(),
                pod: name_of(pod),
                node: name_of(nodes[i]),
            }));
            continue;
        }
        for (_, i, need) in &binding {
            take(&mut free[*i], need, 1.0);
        }
        if members.iter().any(|p| age_secs(p) >= timeout) {
            let message = format!(
                "0/{} nodes are available: gang {gang} needs {} pods bound together; only {} fit the free resources, node selectors and affinity",
                nodes.len(),
                members.len(),
                binding.len()
            );
            for p in &members {
                let already = p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["message"] == message.as_str());
                if !already {
                    decided.push(Scheduled::Unschedulable {
                        namespace: ns.to_string(),
                        pod: name_of(p),
                        message: message.clone(),
                    });
                }
            }
        }
    }
    decided
}

/// The kubelet: running pods succeed once their JobSet's simulated duration has passed: the
/// JobSet's own [`DURATION_ANNOTATION`], else what `duration_of` says for its TrainJob's UID.
/// `only`: the pods to look at (those written within the second), else every one.
fn kubelet(
    store: &mut Store,
    jobsets_rt: &ResourceType,
    duration_of: &DurationOf,
    now: u64,
    only: Option<&BTreeSet<(String, String)>>,
) {
    let pods_rt = builtin(store, "", "v1", "pods");
    let duration = |j: &Value| -> Option<u64> {
        match j["metadata"]["annotations"][DURATION_ANNOTATION].as_str() {
            Some(d) => d.parse::<u64>().ok(),
            None => duration_of(j["metadata"]["labels"][TRAINJOB_UID_LABEL].as_str()?),
        }
    };
    // Each running pod's JobSet looked up by its label (not every JobSet's duration first: most
    // have ended or not started, and this runs 20 times a second).
    let pods: Box<dyn Iterator<Item = &Value>> = match only {
        Some(keys) => Box::new(keys.iter().filter_map(|(ns, name)| store.peek(&pods_rt, Some(ns), name))),
        None => Box::new(store.objects(&pods_rt)),
    };
    let done: Vec<(String, String)> = pods
        .filter(|p| p["status"]["phase"] == "Running")
        .filter(|p| {
            let ns = p["metadata"]["namespace"].as_str().unwrap_or("default");
            let duration = store
                .peek(jobsets_rt, Some(ns), jobset_label(p))
                .and_then(duration)
                .unwrap_or(DEFAULT_DURATION.as_secs());
            let started = p["status"]["startTime"].as_str().and_then(parse_rfc3339).unwrap_or(now);
            now.saturating_sub(started) >= duration
        })
        .map(|p| (ns_of(p), name_of(p)))
        .collect();
    for (ns, name) in done {
        if let Ok(mut obj) = store.get(&pods_rt, Some(&ns), &name) {
            write_log(store, &obj, &exit_line(0));
            obj["status"]["phase"] = "Succeeded".into();
            let finished = kube_mem::time::now_rfc3339();
            obj["status"]["containerStatuses"] = container_statuses(
                &obj,
                false,
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": finished}}),
            );
            let _ = store.update(Requester::InProcess, &pods_rt, Some(&ns), &name, obj, Part::Status, &write_options());
        }
    }
}

/// Each container's status as a kubelet writes it (kubectl's READY counts the ready ones, and
/// STATUS shows a terminated container's reason: `Completed`).
fn container_statuses(pod: &serde_json::Value, ready: bool, state: serde_json::Value) -> serde_json::Value {
    let containers = pod["spec"]["containers"].as_array().map(Vec::as_slice).unwrap_or_default();
    containers
        .iter()
        .map(|c| {
            json!({"name": c["name"], "ready": ready, "started": ready, "restartCount": 0,
                   "image": c["image"].as_str().unwrap_or_default(), "imageID": "", "state": state})
        })
        .collect()
}

/// What a simulated container writes first: its command, as a shell trace shows it, and where
/// it runs (rank and node), so `kubectl logs` has something true to show.
fn start_lines(pod: &Value) -> String {
    let labels = &pod["metadata"]["labels"];
    let label = |k: &str| labels[k].as_str().unwrap_or("-").to_string();
    format!(
        "stowage-sim: {} rank {} of job {} on node {}",
        label("jobset.sigs.k8s.io/replicatedjob-name"),
        label("batch.kubernetes.io/job-completion-index"),
        label("job-name"),
        pod["spec"]["nodeName"].as_str().unwrap_or("-"),
    )
}

fn exit_line(code: i32) -> String {
    format!("stowage-sim: exited with code {code}")
}

/// Appends to the log of each of the pod's containers: its command line first when `text` is
/// its first output.
fn write_log(store: &mut Store, pod: &Value, text: &str) {
    let now = kube_mem::time::unix_nanos();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let key = kube_mem::logs::LogKey {
            namespace: ns_of(pod),
            pod: name_of(pod),
            container: c["name"].as_str().unwrap_or("").to_string(),
        };
        if store.logs.written(&key) == 0 {
            let words: Vec<&str> = ["command", "args"]
                .iter()
                .flat_map(|k| c[k].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect();
            let command = if words.is_empty() {
                format!("(the entrypoint of {})", c["image"].as_str().unwrap_or("?"))
            } else {
                words.join(" ")
            };
            store.logs.write(key.clone(), now, &format!("+ {command}"));
        }
        store.logs.write(key, now, text);
    }
}

/// Job and JobSet status as their controllers write them; a failed Job fails the JobSet, or
/// restarts it while `failurePolicy.maxRestarts` allows.
fn jobset_statuses(store: &Store, jobsets_rt: &ResourceType, only: Option<&BTreeSet<JobSetKey>>) -> Vec<Write> {
    let jobs_rt = builtin(store, "batch", "v1", "jobs");
    let pods_rt = builtin(store, "", "v1", "pods");
    let live: Vec<&Value> = jobsets(store, jobsets_rt, only).filter(|js| !finished(js)).collect();
    if live.is_empty() {
        return Vec::new();
    }
    let mut children: Children<'_> = live.iter().map(|js| (key(js), Default::default())).collect();
    for (rt, is_job) in [(&jobs_rt, true), (&pods_rt, false)] {
        for o in store.objects(rt) {
            if let Some((jobs, pods)) = children.get_mut(&(key(o).0, jobset_label(o))) {
                if is_job { jobs } else { pods }.push(o);
            }
        }
    }
    let mut out = Vec::new();
    for js in live {
        let (jobs, pods) = children.get(&key(js)).map_or((&[][..], &[][..]), |(j, p)| (j, p));
        jobset_status(&mut out, (jobsets_rt, &jobs_rt, &pods_rt), js, jobs, pods);
    }
    out
}

fn jobset_status(
    out: &mut Vec<Write>,
    (jobsets_rt, jobs_rt, pods_rt): (&ResourceType, &ResourceType, &ResourceType),
    js: &Value,
    jobs: &[&Value],
    pods: &[&Value],
) {
    let ns = ns_of(js);
    let jname = name_of(js);
    let mut per_rjob: BTreeMap<String, [i64; 5]> = BTreeMap::new(); // ready, succeeded, failed, active, suspended
    let mut any_failed = false;
    for job in jobs {
        let jn = name_of(job);
        let count = job["spec"]["parallelism"].as_i64().unwrap_or(1);
        let phase = |ph: &str| pods_of_job(pods, &jn).filter(|p| p["status"]["phase"] == ph).count() as i64;
        let (running, succeeded, failed) = (phase("Running"), phase("Succeeded"), phase("Failed"));
        let mut status =
            json!({"active": running + phase("Pending"), "ready": running, "succeeded": succeeded, "failed": failed});
        if failed > 0 {
            status["conditions"] = json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]);
            // A failed Job's controller terminates its remaining pods; the failed ones stay.
            for p in pods_of_job(pods, &jn)
                .filter(|p| p["status"]["phase"] == "Running" || p["status"]["phase"] == "Pending")
            {
                out.push(Write::Delete(pods_rt.clone(), ns.clone(), name_of(p)));
            }
        } else if succeeded >= count {
            status["conditions"] = json!([{"type": "Complete", "status": "True"}]);
        }
        if status != job["status"] {
            out.push(Write::Status(jobs_rt.clone(), ns.clone(), jn.clone(), status));
        }
        let rjob =
            job["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"].as_str().unwrap_or("").to_string();
        let e = per_rjob.entry(rjob).or_default();
        if failed > 0 {
            e[2] += 1;
            any_failed = true;
        } else if succeeded >= count {
            e[1] += 1;
        } else if running >= count {
            e[0] += 1;
            e[3] += 1;
        } else {
            e[3] += 1;
        }
    }
    let mut status = js["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    status["replicatedJobsStatus"] = per_rjob
        .iter()
        .map(|(n, c)| json!({"name": n, "ready": c[0], "succeeded": c[1], "failed": c[2], "active": c[3], "suspended": c[4]}))
        .collect();
    let rjobs: Vec<(String, i64)> = js["spec"]["replicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["name"].as_str().unwrap_or("").to_string(), r["replicas"].as_i64().unwrap_or(1)))
        .collect();
    let targets: Vec<String> = js["spec"]["successPolicy"]["targetReplicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let succeeded = rjobs
        .iter()
        .filter(|(n, _)| targets.is_empty() || targets.contains(n))
        .all(|(n, replicas)| per_rjob.get(n).is_some_and(|c| c[1] >= *replicas));
    let now = kube_mem::time::now_rfc3339();
    if any_failed {
        let restarts = status["restarts"].as_i64().unwrap_or(0);
        let max = js["spec"]["failurePolicy"]["maxRestarts"].as_i64().unwrap_or(0);
        if restarts < max {
            // Restart the whole gang: delete its Jobs (their pods go with them) and count it.
            for job in jobs {
                out.push(Write::Delete(jobs_rt.clone(), ns.clone(), name_of(job)));
            }
            status["restarts"] = (restarts + 1).into();
            status["replicatedJobsStatus"] = json!([]);
        } else {
            status["conditions"] = json!([{"type": "Failed", "status": "True", "reason": "FailedJobs",
                "message": "jobset failed due to one or more job failures", "lastTransitionTime": now}]);
            status["terminalState"] = "Failed".into();
        }
    } else if succeeded && !rjobs.is_empty() {
        status["conditions"] = json!([{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
            "message": "jobset completed successfully", "lastTransitionTime": now}]);
        status["terminalState"] = "Completed".into();
    }
    if status != js["status"] {
        out.push(Write::Status(jobsets_rt.clone(), ns, jname, status));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(store: &mut Store, rt: &ResourceType, obj: Value) {
        store.create(Requester::InProcess, rt, Some("default"), obj, &write_options()).expect("created");
    }

    /// A pass after the first looks at the JobSets written since, and those whose Jobs or pods
    /// were; not at the others.
    #[test]
    fn a_pass_looks_only_at_jobsets_whose_own_or_childrens_objects_changed() {
        let mut store = Store::default();
        install_crds(&mut store).expect("CRDs");
        let rt = jobsets_type(&store).expect("JobSets served");
        assert_eq!(touched(&store, &rt, None), None, "the first pass looks at every JobSet");
        let since = store.resource_version();
        let pods = builtin(&store, "", "v1", "pods");
        let jobs = builtin(&store, "batch", "v1", "jobs");
        let labels = |js: &str| json!({"jobset.sigs.k8s.io/jobset-name": js});
        let container = json!([{"name": "c", "image": "busybox"}]);
        create(
            &mut store,
            &pods,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a-0", "labels": labels("a")},
                   "spec": {"containers": container}}),
        );
        create(
            &mut store,
            &jobs,
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b-0", "labels": labels("b")},
                   "spec": {"template": {"spec": {"containers": container, "restartPolicy": "Never"}}}}),
        );
        let only = touched(&store, &rt, Some(since)).expect("the history reaches back");
        let want: BTreeSet<JobSetKey> =
            [("default".to_string(), "a".to_string()), ("default".to_string(), "b".to_string())].into();
        assert_eq!(only, want);
        assert_eq!(touched(&store, &rt, Some(store.resource_version())), Some(BTreeSet::new()), "nothing since");
    }

    /// The gang scheduler binds each pod to the first node, in the store's order, with room
    /// for it that its selector and the node's taints allow; a gang binds whole or not at all;
    /// pods already bound take their room first.
    #[test]
    fn the_scheduler_binds_first_fit_and_whole_gangs_only() {
        let mut store = Store::default();
        let nodes = builtin(&store, "", "v1", "nodes");
        let pods = builtin(&store, "", "v1", "pods");
        let node = |name: &str, rack: &str, gpus: u32, taint: bool| {
            let taints =
                if taint { json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]) } else { json!([]) };
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"rack": rack}},
                   "spec": {"taints": taints},
                   "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": gpus.to_string()}}})
        };
        let pod = |name: &str, gang: &str, rack: &str, gpus: u32, node: Option<&str>| {
            let mut p = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": gang}},
                "spec": {"nodeSelector": {"rack": rack},
                         "containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}}}]},
                "status": {"phase": "Pending"}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = n.into();
            }
            p
        };
        for n in
            [node("n1", "a", 1, false), node("n2", "b", 2, false), node("n3", "b", 4, true), node("n4", "b", 4, false)]
        {
            store.create(Requester::InProcess, &nodes, None, n, &write_options()).expect("node");
        }
        for p in [
            pod("held", "held", "a", 1, Some("n1")),
            pod("a-0", "a", "a", 1, None),
            pod("b-0", "b", "b", 1, None),
            pod("b-1", "b", "b", 1, None),
            pod("c-0", "c", "b", 3, None),
            pod("d-0", "d", "b", 1, None),
            pod("d-1", "d", "b", 4, None),
        ] {
            create(&mut store, &pods, p);
        }
        let mut seen = Seen::default();
        seen.catch_up(&store);
        let mut bound: Vec<(String, String)> = scheduled(&store, &seen)
            .into_iter()
            .filter_map(|d| match d {
                Scheduled::Bound { pod, node, .. } => Some((pod, node)),
                Scheduled::Unschedulable { .. } => None,
            })
            .collect();
        bound.sort();
        let want = [("b-0", "n2"), ("b-1", "n2"), ("c-0", "n4")].map(|(p, n)| (p.to_string(), n.to_string()));
        // a-0: its rack's one node is taken by `held`. b: both on n2, the first with room. c-0:
        // n3 has room but a taint it does not tolerate. d: d-1 finds no room once c-0 has n4, so
        // d-0 is not bound either.
        assert_eq!(bound, want);
    }

    /// The scheduler's account, brought up to date from the pods written since its last look,
    /// is the account a look at every pod gives: after binds, a pod ending, one deleted and
    /// new ones; and a pass with nothing pending decides nothing.
    #[test]
    fn the_schedulers_account_follows_the_pods_written_since_as_a_full_look_would() {
        let mut store = Store::default();
        let nodes = builtin(&store, "", "v1", "nodes");
        let pods = builtin(&store, "", "v1", "pods");
        store
            .create(
                Requester::InProcess,
                &nodes,
                None,
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                       "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}}}),
                &write_options(),
            )
            .expect("node");
        let pod = |name: &str, gang: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": gang}},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "1"}}}]},
                "status": {"phase": "Pending"}})
        };
        // Both at the store's version: the same account, whichever way it was made.
        let full = |store: &Store| {
            let mut s = Seen::default();
            s.catch_up(store);
            s
        };
        let mut seen = Seen::default();
        for (name, gang) in [("a-0", "a"), ("a-1", "a"), ("b-0", "b")] {
            create(&mut store, &pods, pod(name, gang));
        }
        schedule(&mut store, &mut seen);
        let status = |phase: &str| json!({"status": {"phase": phase}});
        store
            .update(
                Requester::InProcess,
                &pods,
                Some("default"),
                "a-1",
                status("Succeeded"),
                Part::Status,
                &write_options(),
            )
            .expect("ended");
        store.delete(Requester::InProcess, &pods, Some("default"), "b-0", false).expect("deleted");
        create(&mut store, &pods, pod("c-0", "c"));
        seen.catch_up(&store);
        assert_eq!(seen, full(&store));
        assert_eq!(seen.live.get(&("default".to_string(), "a".to_string())), Some(&1), "a-1 ended, a-0 lives");
        assert_eq!(seen.pending, BTreeSet::from([("default".to_string(), "c-0".to_string())]));
        assert_eq!(seen.used["n"]["nvidia.com/gpu"], 1.0, "a-0 alone is bound");
        schedule(&mut store, &mut seen);
        seen.catch_up(&store);
        assert!(seen.pending.is_empty(), "c-0 bound");
        assert!(scheduled(&store, &seen).is_empty(), "nothing pending, nothing decided");
    }

    /// The kubelet's first pass in a second looks at every running pod, the others at the pods
    /// written since: a pod written within the second that is due ends at once, one that comes
    /// due with the next second ends in that second's first pass.
    #[test]
    fn the_kubelet_looks_at_every_pod_once_a_second_and_at_new_ones_between() {
        let mut store = Store::default();
        install_crds(&mut store).expect("CRDs");
        let rt = jobsets_type(&store).expect("JobSets served");
        let pods = builtin(&store, "", "v1", "pods");
        let no_duration: DurationOf = std::sync::Arc::new(|_: &str| None);
        let d = DEFAULT_DURATION.as_secs();
        let t0: u64 = 1_800_000_000;
        let running = |store: &mut Store, name: &str, started: u64| {
            create(
                store,
                &pods,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": "none"}},
                       "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "n"}}),
            );
            let status = json!({"status": {"phase": "Running", "startTime": kube_mem::time::rfc3339(started as i64)}});
            store
                .update(Requester::InProcess, &pods, Some("default"), name, status, Part::Status, &write_options())
                .expect("running");
        };
        let phase = |store: &Store, name: &str| {
            store.peek(&pods, Some("default"), name).and_then(|p| p["status"]["phase"].as_str().map(str::to_string))
        };
        let mut c = Controllers::default();
        running(&mut store, "old", t0);
        c.kubelet(&mut store, &rt, &no_duration, t0 + d - 1);
        assert_eq!(phase(&store, "old").as_deref(), Some("Running"), "not due yet");
        running(&mut store, "new", t0 - d);
        c.kubelet(&mut store, &rt, &no_duration, t0 + d - 1);
        assert_eq!(phase(&store, "new").as_deref(), Some("Succeeded"), "written within the second and due");
        assert_eq!(phase(&store, "old").as_deref(), Some("Running"));
        c.kubelet(&mut store, &rt, &no_duration, t0 + d);
        assert_eq!(phase(&store, "old").as_deref(), Some("Succeeded"), "due with the next second, not written since");
    }
}
