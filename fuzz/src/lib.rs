//! The fuzz targets' bodies: each takes any bytes to one of Stowage's input boundaries through
//! the product's own public entry points, and must never panic, abort or hang (an error is a
//! fine answer). `src/bin/*.rs` hand them to AFL++ (afl.rs); they are plain functions, so a
//! saved input can be replayed under a debugger or from a test as well.
//!
//! Each `init_*` warms what the target caches (the hub's store, the CRDs, an SSH key) before
//! AFL++'s fork server starts, so every forked child starts warm and persistent mode stays
//! stable.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use api::stowage::Placement;
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use kube_mem::resources::ResourceType;
use kube_mem::Requester;
use kube_mem::store::{Part, WriteOptions};
use kube_mem::{Store, UserInfo};
use serde_json::{Value, json};
use simulator::fleet_file::FleetSpec;
use simulator::machines::{MachineListFormat, parse_machine_list};
use simulator::trace::{LoadOptions, TraceFormat};
use trainer_render::{Capabilities, GangScheduler, Input, SshKeyPair, TopologyMode};

/// Bytes as the loaders see a file: text. Invalid UTF-8 is replaced rather than refused, so
/// every input reaches the parser (a file that is not UTF-8 stops at the read, before it).
fn text(data: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(data)
}

// ---------------------------------------------------------------------------------------------
// trace: every trace format and machine list

pub fn init_trace() {}

/// The trace loaders (`simulator::trace::parse`: native CSV and JSON Lines, Philly, openb; with
/// and without skipping bad rows) and the machine lists (`simulator::machines::parse_machine_list`
/// in each format, then the fleet built from it), all on the same bytes. A trace that loads is
/// written back as native CSV and loaded again, as `stowage simulate --write-trace` output is.
pub fn trace(data: &[u8]) {
    let text = text(data);
    let path = Path::new("fuzz-trace");
    for format in TraceFormat::ALL {
        for skip_bad_rows in [false, true] {
            let Ok(trace) = simulator::trace::parse(&text, path, format, &LoadOptions { skip_bad_rows }) else {
                continue;
            };
            let csv = simulator::trace::write_csv(&trace);
            let _ = simulator::trace::parse(&csv, path, TraceFormat::Native, &LoadOptions::default());
        }
    }
    for format in MachineListFormat::ALL {
        if let Ok(spec) = parse_machine_list(&text, path, format) {
            let _ = spec.build("fuzz-machines");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// fleet: the fleet file

pub fn init_fleet() {}

/// The fleet file as `stowage simulate --fleet` and `stowage dev --fleet` read it:
/// `FleetSpec::parse`, then `build` (pools laid out into the scheduler's fleet). A spec that
/// parses is also written back as YAML and read again.
pub fn fleet(data: &[u8]) {
    let text = text(data);
    let Ok(spec) = FleetSpec::parse(&text, "fuzz-fleet.yaml") else { return };
    let _ = spec.build("fuzz-fleet.yaml");
    if let Ok(yaml) = input_limits::yaml::to_string(&spec) {
        let _ = FleetSpec::parse(&yaml, "fuzz-fleet.yaml");
    }
}

// ---------------------------------------------------------------------------------------------
// render: a TrainJob, its runtime and a placement, rendered

/// The input's YAML documents: the TrainJob, the runtime, and optionally the Placement,
/// separated by `---` lines.
fn documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut rest = text;
    loop {
        match rest.find("\n---") {
            Some(i) => {
                docs.push(&rest[..i + 1]);
                // The separator line, up to and including its newline.
                rest = rest[i + 4..].split_once('\n').map_or("", |(_, r)| r);
            }
            None => {
                docs.push(rest);
                return docs;
            }
        }
    }
}

/// A fixed SSH key pair for MPI runtimes: the CLI makes a fresh one per run, which only the
/// rendered Secret's bytes would change.
fn ssh_key() -> &'static Option<SshKeyPair> {
    static KEY: OnceLock<Option<SshKeyPair>> = OnceLock::new();
    KEY.get_or_init(|| trainer_render::sshkey::generate().ok())
}

/// The capabilities a member may report: each gang scheduler and topology mode.
fn capabilities() -> &'static [Capabilities] {
    static CAPS: OnceLock<Vec<Capabilities>> = OnceLock::new();
    CAPS.get_or_init(|| {
        vec![
            Capabilities::default(),
            Capabilities {
                gang_scheduler: GangScheduler::Kai,
                topology_mode: TopologyMode::Kueue,
                kai_topology: Some("fuzz-topology".into()),
                kueue_local_queue: Some("fuzz-queue".into()),
                ..Capabilities::default()
            },
            Capabilities {
                gang_scheduler: GangScheduler::Volcano,
                volcano_tiers: [("rack".to_string(), 1), ("block".to_string(), 2)].into_iter().collect(),
                ..Capabilities::default()
            },
            Capabilities { gang_scheduler: GangScheduler::Coscheduling, ..Capabilities::default() },
            Capabilities { gang_scheduler: GangScheduler::None, ..Capabilities::default() },
        ]
    })
}

/// Admission (the hub's webhook), the pod sets the hub schedules, and the render a member's
/// agent does under each capability set, printed as `stowage render` prints it.
fn render_typed(trainjob: &TrainJob, runtime: &Runtime, placement: Option<&Placement>) {
    let _ = trainer_render::admit(trainjob, Some(runtime), None);
    let _ = trainer_render::admit(trainjob, None, Some(trainjob));
    for caps in capabilities() {
        let input = Input {
            trainjob,
            runtime,
            placement,
            capabilities: caps,
            ssh_key: ssh_key().as_ref(),
            jobset_uid: Some("00000000-0000-0000-0000-000000000000"),
        };
        let _ = trainer_render::pod_sets(&input);
        if let Ok(objects) = trainer_render::render(&input) {
            for o in objects {
                let _ = input_limits::yaml::to_string(&o.to_value());
            }
        }
    }
}

fn typed_runtime(doc: &str) -> Option<Runtime> {
    let value: Value = input_limits::yaml::from_str(doc).ok()?;
    if value.get("kind").and_then(Value::as_str) == Some("TrainingRuntime") {
        serde_json::from_value::<TrainingRuntime>(value).ok().map(Runtime::Namespaced)
    } else {
        serde_json::from_value::<ClusterTrainingRuntime>(value).ok().map(Runtime::Cluster)
    }
}

pub fn init_render() {
    let _ = ssh_key();
    let _ = capabilities();
}

/// Render on typed objects: the documents read with the budgeted YAML reader into the API
/// types (as the hub and the agents hold them), then [`render_typed`]. Fast; see
/// [`render_manifest`] for the CLI's file reading with its unknown-field check.
pub fn render(data: &[u8]) {
    let text = text(data);
    let docs = documents(&text);
    let Some(Ok(trainjob)) = docs.first().map(|d| input_limits::yaml::from_str::<TrainJob>(d)) else { return };
    let Some(runtime) = docs.get(1).and_then(|d| typed_runtime(d)) else {
        let _ = trainer_render::admit(&trainjob, None, None);
        return;
    };
    let placement = docs.get(2).and_then(|d| input_limits::yaml::from_str::<Placement>(d).ok());
    render_typed(&trainjob, &runtime, placement.as_ref());
}

/// This process's scratch directory for `render_manifest`'s files (on tmpfs where there is one).
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("stowage-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir
    })
}

pub fn init_render_manifest() {
    init_render();
    // Before AFL++'s fork server: one directory for the whole run, not one per forked child.
    let _ = scratch();
}

/// `stowage render` itself: the documents written to files and read by
/// `trainer_render::manifest::{trainjob, runtime, placement}` (file size limit, YAML budget,
/// apiVersion and kind, fields the CRDs do not declare), then rendered as the CLI renders.
/// Slow: each read parses the CRD it checks against.
pub fn render_manifest(data: &[u8]) {
    use trainer_render::manifest;
    let text = text(data);
    let docs = documents(&text);
    // One directory per fuzzing run (made before the fork server); each input rewrites its files.
    let dir = scratch();
    let write = |name: &str, doc: &str| {
        let path = dir.join(name);
        std::fs::write(&path, doc).ok().map(|()| path)
    };
    let Some(tj_path) = write("trainjob.yaml", docs.first().copied().unwrap_or("")) else { return };
    let Ok((trainjob, _)) = manifest::trainjob(&tj_path) else { return };
    let Some(rt_path) = docs.get(1).and_then(|d| write("runtime.yaml", d)) else { return };
    let Ok((runtime, _)) = manifest::runtime(&rt_path) else { return };
    let placement = match docs.get(2).and_then(|d| write("placement.yaml", d)) {
        Some(p) => match manifest::placement(&p) {
            Ok((p, _)) => Some(p),
            Err(_) => return,
        },
        None => None,
    };
    render_typed(&trainjob, &runtime, placement.as_ref());
}

// ---------------------------------------------------------------------------------------------
// hub: request bodies decoded and written to the in-memory hub

/// Who a request comes from: the administrator, the dispatcher, the agent of member `m1` (whose
/// Placement `fuzz` is), another member's agent, and an anonymous client.
fn users() -> &'static [UserInfo] {
    static USERS: OnceLock<Vec<UserInfo>> = OnceLock::new();
    USERS.get_or_init(|| {
        let ns = playground::SYSTEM_NAMESPACE;
        vec![
            UserInfo::admin(),
            UserInfo::service_account(ns, playground::credentials::DISPATCHER_SERVICE_ACCOUNT),
            UserInfo::service_account(ns, &playground::credentials::agent_service_account("m1")),
            UserInfo::service_account(ns, &playground::credentials::agent_service_account("m2")),
            UserInfo::anonymous(),
        ]
    })
}

/// The resource types a request may address, in a fixed order (a byte of the input picks one).
const TYPES: [(&str, &str, &str); 16] = [
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    ("stowage.dev", "v1alpha1", "placements"),
    ("stowage.dev", "v1alpha1", "memberclusters"),
    ("stowage.dev", "v1alpha1", "queues"),
    ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"),
    ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
    ("", "v1", "namespaces"),
    ("", "v1", "pods"),
    ("", "v1", "configmaps"),
    ("", "v1", "secrets"),
    ("", "v1", "nodes"),
    ("coordination.k8s.io", "v1", "leases"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings"),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
];

/// An object named `fuzz` of each type that has one, which updates and patches address.
fn existing(plural: &str) -> Option<(Option<&'static str>, Value)> {
    let meta = |ns: Option<&'static str>| {
        let mut m = json!({"name": "fuzz", "labels": {"app": "fuzz"}});
        if let Some(ns) = ns {
            m["namespace"] = ns.into();
        }
        m
    };
    let d = Some("default");
    Some(match plural {
        "trainjobs" => (
            d,
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta(d),
                   "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}}),
        ),
        "placements" => (
            d,
            json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Placement",
                   "metadata": {"name": "fuzz", "namespace": "default", "labels": {"stowage.dev/cluster": "m1"}},
                   "spec": {"trainJobUid": "0b6f9a3e-0000-4000-8000-000000000001", "cluster": "m1", "epoch": 1, "podSets": []}}),
        ),
        "memberclusters" => (
            None,
            json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "MemberCluster", "metadata": meta(None), "spec": {}}),
        ),
        "queues" => {
            (None, json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue", "metadata": meta(None), "spec": {}}))
        }
        "namespaces" => (None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(None)})),
        "pods" => (
            d,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta(d),
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        ),
        "configmaps" => (d, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(d), "data": {"k": "v"}})),
        "secrets" => (d, json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(d), "data": {"k": "dg=="}})),
        "nodes" => (None, json!({"apiVersion": "v1", "kind": "Node", "metadata": meta(None)})),
        "leases" => {
            (d, json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta(d), "spec": {}}))
        }
        _ => return None,
    })
}

fn lookup(store: &Store, (group, version, plural): (&str, &str, &str)) -> Option<ResourceType> {
    store.lookup(group, version, plural).cloned()
}

/// The playground's hub as `stowage dev` sets it up (CRDs, Trainer's runtimes, the
/// status-writers policy, TrainJob admission), plus one object of each type to update.
fn build_hub() -> Result<Store, String> {
    let mut store = Store::new();
    store.add_validator(std::sync::Arc::new(playground::admission::TrainJobAdmission::default()));
    let opts = WriteOptions { strict: false, dry_run: false };
    let user = UserInfo::admin();
    let crd_type = lookup(&store, TYPES[15]).ok_or("no CRD type")?;
    let yaml = |text: &str| input_limits::yaml::documents::<Value>(text).map_err(|e| e.in_file("setup"));
    let mut crds: Vec<String> = upstream::TRAINER_CRDS.iter().map(|f| f.text.to_string()).collect();
    crds.extend(api::stowage::crds().into_iter().map(|(_, text)| text));
    for text in crds {
        for crd in yaml(&text)? {
            store.create(Requester::User(&user), &crd_type, None, crd, &opts).map_err(|e| e.to_string())?;
        }
    }
    for f in upstream::RUNTIMES {
        let rt = lookup(&store, TYPES[4]).ok_or("no runtime type")?;
        for runtime in yaml(f.text)? {
            store.create(Requester::User(&user), &rt, None, runtime, &opts).map_err(|e| e.to_string())?;
        }
    }
    for doc in yaml(playground::credentials::STATUS_WRITERS_POLICY)? {
        let index = if doc["kind"] == "ValidatingAdmissionPolicy" { 13 } else { 14 };
        let rt = lookup(&store, TYPES[index]).ok_or("no policy type")?;
        store.create(Requester::User(&user), &rt, None, doc, &opts).map_err(|e| e.to_string())?;
    }
    let ns = lookup(&store, TYPES[6]).ok_or("no namespace type")?;
    for name in [playground::SYSTEM_NAMESPACE, "kubeflow-system", "team-a"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        store.create(Requester::User(&user), &ns, None, obj, &opts).map_err(|e| e.to_string())?;
    }
    for t in TYPES {
        let Some((ns, obj)) = existing(t.2) else { continue };
        let rt = lookup(&store, t).ok_or_else(|| format!("no type {}", t.2))?;
        store.create(Requester::User(&user), &rt, ns, obj, &opts).map_err(|e| format!("{}: {e}", t.2))?;
    }
    // RBAC as the playground's hub runs it: the bootstrap roles, manifests/' roles and bindings
    // for members m1 and m2. Each request below is authorized first, as the HTTP layer does.
    let rbac = playground::credentials::rbac_objects(["m1", "m2"]).map_err(|e| e.to_string())?;
    let bootstrap = kube_mem::rbac::bootstrap().into_iter().map(|(_, o)| o);
    for obj in bootstrap.chain(rbac.into_iter().map(|(_, o)| o)) {
        let rt = type_named(&store, &obj).ok_or("no RBAC type")?;
        let ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
        store.create(Requester::User(&user), &rt, ns.as_deref(), obj, &opts).map_err(|e| e.to_string())?;
    }
    let mc = lookup(&store, TYPES[2]).ok_or("no MemberCluster type")?;
    for name in ["m1", "m2"] {
        let obj = json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "MemberCluster", "metadata": {"name": name}, "spec": {}});
        store.create(Requester::User(&user), &mc, None, obj, &opts).map_err(|e| e.to_string())?;
    }
    Ok(store)
}

fn hub_store() -> &'static Mutex<Store> {
    static HUB: OnceLock<Mutex<Store>> = OnceLock::new();
    HUB.get_or_init(|| match build_hub() {
        Ok(store) => Mutex::new(store),
        // A setup failure is the harness's, not an input's: say so loudly once.
        Err(e) => {
            eprintln!("stowage-fuzz: the hub does not set up: {e}");
            std::process::exit(2)
        }
    })
}

pub fn init_hub() {
    let _ = hub_store();
    let _ = users();
}

/// How a body is sent, as the hub's HTTP layer takes it.
#[derive(Debug, Clone, Copy)]
enum Encoding {
    Json,
    Yaml,
    Protobuf,
}

/// A body decoded as the hub's `parse_body` decodes it (kube-mem/src/http.rs): the Kubernetes
/// protobuf envelope, the budgeted YAML reader, or JSON.
fn decode(bytes: &[u8], encoding: Encoding) -> Option<Value> {
    match encoding {
        Encoding::Protobuf => kube_mem::protobuf::decode(bytes).ok(),
        Encoding::Yaml => input_limits::yaml::from_slice(bytes).ok(),
        Encoding::Json => serde_json::from_slice(bytes).ok(),
    }
}

/// The type a body's own `apiVersion` and `kind` name (as kubectl builds the URL from them).
fn type_named(store: &Store, body: &Value) -> Option<ResourceType> {
    let api_version = body.get("apiVersion").and_then(Value::as_str)?;
    let kind = body.get("kind").and_then(Value::as_str)?;
    store.types.values().find(|t| t.kind == kind && t.api_version() == api_version).cloned()
}

/// The type a body names, else the one the selector byte picks.
fn type_for(store: &Store, body: &Value, pick: u8) -> Option<ResourceType> {
    type_named(store, body).or_else(|| lookup(store, TYPES[usize::from(pick) % TYPES.len()]))
}

/// The namespace a request for `rt` names: the body's, else `default` (none if cluster-scoped).
fn namespace_of(rt: &ResourceType, body: &Value) -> Option<String> {
    rt.namespaced.then(|| body["metadata"]["namespace"].as_str().unwrap_or("default").to_string())
}

/// Whether the hub's authorizer lets `user` make the request, as its HTTP layer asks before
/// anything else (`kube_mem::rbac`, with the playground's roles).
fn authorized(
    store: &Store,
    user: &UserInfo,
    verb: &str,
    rt: &ResourceType,
    ns: Option<&str>,
    name: Option<&str>,
    part: Part,
) -> bool {
    let access = kube_mem::Access {
        user: String::new(),
        username: user.username.clone(),
        verb: verb.into(),
        group: rt.group.clone(),
        resource: rt.plural.clone(),
        subresource: (part == Part::Status).then(|| "status".to_string()),
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
    };
    kube_mem::rbac::allows(store, user, kube_mem::rbac::Request::Resource(&access))
}

/// The hub's request handling on any body. The first byte picks the operation and encoding,
/// the second the user, the subresource and (where the body does not name its kind) the
/// resource type; the rest is the body. Everything is a dry run, so the store is the same
/// before every input.
///
/// Operations, as `kube_mem`'s HTTP layer runs them with its public parts: create and update
/// (JSON, YAML or protobuf bodies), merge, JSON and strategic-merge patches and server-side
/// apply on the existing object `fuzz`, and list/watch parameters (label and field selectors,
/// watch timeouts, Table output). A CustomResourceDefinition's registration is [`crd`]'s: its
/// bodies are a hundred times the size of the rest and would set this target's pace.
pub fn hub(data: &[u8]) {
    let (Some(&op), Some(&pick)) = (data.first(), data.get(1)) else { return };
    let body = &data[2..];
    let users = users();
    let user = &users[usize::from(pick >> 4) % users.len()];
    let part = if pick & 0x08 != 0 { Part::Status } else { Part::Main };
    let opts = WriteOptions { strict: op & 0x80 != 0, dry_run: true };
    let Ok(mut store) = hub_store().lock() else { return };
    match op & 0x0f {
        // Create, as POST.
        0..=2 => {
            let encoding = [Encoding::Json, Encoding::Yaml, Encoding::Protobuf][usize::from(op & 0x0f)];
            let Some(obj) = decode(body, encoding) else { return };
            let Some(rt) = type_for(&store, &obj, pick) else { return };
            let ns = namespace_of(&rt, &obj);
            if !authorized(&store, user, "create", &rt, ns.as_deref(), None, Part::Main) {
                return;
            }
            let _ = store.create(Requester::User(user), &rt, ns.as_deref(), obj, &opts);
        }
        // Update, as PUT to the body's own name.
        3..=5 => {
            let encoding = [Encoding::Json, Encoding::Yaml, Encoding::Protobuf][usize::from(op & 0x0f) - 3];
            let Some(obj) = decode(body, encoding) else { return };
            let Some(rt) = type_for(&store, &obj, pick) else { return };
            let ns = namespace_of(&rt, &obj);
            let name = obj["metadata"]["name"].as_str().unwrap_or("fuzz").to_string();
            if !authorized(&store, user, "update", &rt, ns.as_deref(), Some(&name), part) {
                return;
            }
            let _ = store.update(Requester::User(user), &rt, ns.as_deref(), &name, obj, part, &opts);
        }
        // Patches of the existing object `fuzz`, as PATCH.
        6..=9 => {
            let Some(rt) = lookup(&store, TYPES[usize::from(pick & 0x07)]) else { return };
            let ns = rt.namespaced.then_some("default");
            if !authorized(&store, user, "patch", &rt, ns, Some("fuzz"), part) {
                return;
            }
            let Ok(mut obj) = store.get(&rt, ns, "fuzz") else { return };
            let patch = match op & 0x0f {
                9 => decode(body, Encoding::Yaml),
                _ => decode(body, Encoding::Json),
            };
            let Some(patch) = patch else { return };
            match op & 0x0f {
                6 => kube_mem::patch::merge_patch(&mut obj, &patch),
                7 => {
                    if kube_mem::patch::json_patch(&mut obj, &patch).is_err() {
                        return;
                    }
                }
                _ => kube_mem::patch::strategic_merge(&mut obj, &patch),
            }
            let _ = store.update(Requester::User(user), &rt, ns, "fuzz", obj, part, &opts);
        }
        // List and watch parameters: `labelSelector`, `fieldSelector` and `timeoutSeconds`,
        // separated by NUL bytes, over the existing objects.
        _ => {
            let text = text(body);
            let mut parts = text.split('\0');
            let (labels, fields, timeout) = (parts.next(), parts.next(), parts.next());
            let _ = input_limits::watch_timeout(timeout);
            let Ok(selector) = kube_mem::selectors::Selector::parse(labels, fields) else { return };
            let Some(rt) = lookup(&store, TYPES[usize::from(pick) % TYPES.len()]) else { return };
            if !authorized(&store, user, "list", &rt, None, None, Part::Main) {
                return;
            }
            let (items, _) = store.list(&rt, None, &|o| selector.matches(o), Some(usize::from(pick % 5) + 1), None);
            if let Some(version) = kube_mem::table::requested("application/json;as=Table;v=v1;g=meta.k8s.io") {
                let include = kube_mem::table::Include::parse(parts.next());
                let _ = kube_mem::table::table(&rt, &items, version, include, json!({}));
            }
        }
    }
}

pub fn init_crd() {
    let _ = hub_store();
}

/// A CustomResourceDefinition registered on the hub, as an administrator sends one: its
/// registration checks (the CEL rules compiled, `resources::from_crd`) through a dry-run
/// create, then each type's schema compiled as `kube_mem::schema` compiles it on its first
/// object, but without that cache, which keeps every schema it has seen: fed a new schema per
/// input, it would grow and slow the target with each one. The first byte picks the encoding
/// (bit 0: JSON or YAML) and strictness (bit 7); the rest is the body.
pub fn crd(data: &[u8]) {
    let Some((&op, body)) = data.split_first() else { return };
    let encoding = if op & 0x01 == 0 { Encoding::Json } else { Encoding::Yaml };
    let Some(crd) = decode(body, encoding) else { return };
    if let Ok(types) = kube_mem::resources::from_crd(&crd) {
        for t in types {
            if let Some(Ok(v)) = t.schema.as_deref().map(jsonschema::validator_for) {
                let _ = v.iter_errors(&json!({"metadata": {"name": "x"}})).count();
            }
        }
    }
    let Ok(mut store) = hub_store().lock() else { return };
    let crd_type = lookup(&store, TYPES[15]).unwrap_or_else(unreachable_type);
    let opts = WriteOptions { strict: op & 0x80 != 0, dry_run: true };
    let _ = store.create(Requester::User(&UserInfo::admin()), &crd_type, None, crd, &opts);
}

/// Only for the CRD type, which `Store::new` always registers.
fn unreachable_type() -> ResourceType {
    ResourceType {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
        singular: "customresourcedefinition".into(),
        namespaced: false,
        status_subresource: true,
        short_names: Vec::new(),
        schema: None,
        printer_columns: Vec::new(),
        selectable_fields: Vec::new(),
    }
}
