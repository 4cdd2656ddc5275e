//! The deployment manifests (`manifests/`): every kustomization builds with `kubectl kustomize`,
//! and the builds keep what docs/operations.md promises — every Deployment probes /healthz and
//! /readyz, runs locked down and non-root, and runs `stowage dispatcher` or `stowage agent` with
//! flags the binary has; the hub installs our CRDs exactly as generated; no role grants a
//! wildcard; the agent never writes Nodes or Pods on its member; the example overlays leave no
//! placeholder behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use input_limits::yaml;
use serde_json::Value;

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests");

fn try_kustomize(dir: &str) -> Result<Vec<Value>, String> {
    let path = Path::new(MANIFESTS).join(dir);
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&path)
        .output()
        .map_err(|e| format!("running kubectl: {e} (scripts/test installs it)"))?;
    if !out.status.success() {
        return Err(format!("kubectl kustomize manifests/{dir}:\n{}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8(out.stdout).map_err(|e| format!("kubectl kustomize manifests/{dir}: {e}"))?;
    let docs: Vec<Value> =
        yaml::documents(&text).map_err(|e| e.in_file(&format!("kubectl kustomize manifests/{dir}")))?;
    Ok(docs.into_iter().filter(|doc| !doc.is_null()).collect())
}

/// `kubectl kustomize manifests/DIR` (or an absolute DIR), as YAML documents; panics with
/// kubectl's stderr if the build fails.
pub fn kustomize(dir: &str) -> Vec<Value> {
    try_kustomize(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// A directory under `manifests/` holding a kustomization.
#[derive(Debug)]
struct Kustomization {
    /// Relative to `manifests/`, e.g. `overlays/example/hub`.
    dir: String,
    path: PathBuf,
    /// `kind: Component`: applied only as part of another kustomization, not buildable alone.
    component: bool,
    /// The components it uses, as canonical paths.
    components: Vec<PathBuf>,
}

fn kustomizations() -> Vec<Kustomization> {
    let root = PathBuf::from(MANIFESTS);
    let mut found = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            }
        }
        let Some(file) = ["kustomization.yaml", "kustomization.yml", "Kustomization"]
            .iter()
            .map(|f| dir.join(f))
            .find(|f| f.is_file())
        else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let k: Value = yaml::from_str(&text).unwrap_or_else(|e| panic!("{}", e.in_file(&file.display().to_string())));
        let components = k
            .get("components")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|c| dir.join(c).canonicalize().unwrap_or_else(|e| panic!("{}: component {c}: {e}", file.display())))
            .collect();
        found.push(Kustomization {
            dir: dir.strip_prefix(&root).expect("under manifests/").to_string_lossy().into_owned(),
            path: dir.canonicalize().expect("canonical path"),
            component: k.get("kind").and_then(Value::as_str) == Some("Component"),
            components,
        });
    }
    found.sort_by(|a, b| a.dir.cmp(&b.dir));
    found
}

/// A kustomization's directory (relative to `manifests/`) and its build, or kubectl's error.
type Build = (String, Result<Vec<Value>, String>);

/// Every buildable kustomization's build, once per test binary.
fn builds() -> &'static [Build] {
    static BUILDS: OnceLock<Vec<Build>> = OnceLock::new();
    BUILDS.get_or_init(|| {
        kustomizations()
            .into_iter()
            .filter(|k| !k.component)
            .map(|k| {
                let docs = try_kustomize(&k.dir);
                (k.dir, docs)
            })
            .collect()
    })
}

/// Every document of every build, with the directory it came from.
fn documents() -> Vec<(&'static str, &'static Value)> {
    builds()
        .iter()
        .flat_map(|(dir, docs)| {
            let docs = docs.as_ref().unwrap_or_else(|e| panic!("{e}"));
            docs.iter().map(move |d| (dir.as_str(), d))
        })
        .collect()
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| v.get(*key))
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

fn seq_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn strings(v: &Value, path: &[&str]) -> Vec<String> {
    seq_at(v, path).iter().filter_map(Value::as_str).map(str::to_string).collect()
}

fn is_kind(doc: &Value, kind: &str) -> bool {
    str_at(doc, &["kind"]) == Some(kind)
}

fn name(doc: &Value) -> &str {
    str_at(doc, &["metadata", "name"]).unwrap_or("?")
}

fn deployments() -> Vec<(&'static str, &'static Value)> {
    documents().into_iter().filter(|(_, d)| is_kind(d, "Deployment")).collect()
}

#[test]
fn every_kustomization_builds() {
    let all = kustomizations();
    let dirs: BTreeSet<&str> = all.iter().map(|k| k.dir.as_str()).collect();
    for expected in
        ["crds", "hub", "hub-webhook", "member", "hub-member-access", "overlays/example/hub", "overlays/example/member"]
    {
        assert!(dirs.contains(expected), "no kustomization in manifests/{expected}; found {dirs:?}");
    }
    let failures: Vec<&str> = builds().iter().filter_map(|(_, r)| r.as_ref().err().map(String::as_str)).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // A component cannot be built alone: it is built through the kustomizations that use it.
    for c in all.iter().filter(|k| k.component) {
        assert!(
            all.iter().any(|k| !k.component && k.components.contains(&c.path)),
            "component manifests/{} is used by no kustomization, so no build checks it",
            c.dir
        );
    }
}

#[test]
fn every_deployment_probes_runs_non_root_and_runs_a_stowage_subcommand() {
    let deployments = deployments();
    let subcommands: BTreeSet<&str> = deployments
        .iter()
        .flat_map(|(_, d)| seq_at(d, &["spec", "template", "spec", "containers"]))
        .filter_map(|c| seq_at(c, &["args"]).first().and_then(Value::as_str))
        .collect();
    assert!(
        ["dispatcher", "agent", "webhook", "relay"].iter().all(|s| subcommands.contains(s)),
        "deployments run {subcommands:?}"
    );
    let mut problems = Vec::new();
    for (dir, d) in deployments {
        let pod = at(d, &["spec", "template", "spec"]).expect("a pod template");
        let pod_non_root = at(pod, &["securityContext", "runAsNonRoot"]) == Some(&Value::Bool(true));
        let containers = seq_at(pod, &["containers"]);
        if containers.is_empty() {
            problems.push(format!("{dir}: Deployment {}: no containers", name(d)));
        }
        for c in containers {
            let mut problem = |what: &str| problems.push(format!("{dir}: Deployment {}: {what}", name(d)));
            let http_port = seq_at(c, &["ports"])
                .iter()
                .any(|p| str_at(p, &["name"]) == Some("http") && at(p, &["containerPort"]) == Some(&Value::from(8080)));
            if !http_port {
                problem("no containerPort 8080 named http");
            }
            for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
                let port = at(c, &[probe, "httpGet", "port"]);
                let on_http = port == Some(&Value::from("http")) || port == Some(&Value::from(8080));
                if str_at(c, &[probe, "httpGet", "path"]) != Some(path) || !on_http {
                    problem(&format!("{probe} is not an httpGet of {path} on port http"));
                }
            }
            let non_root =
                at(c, &["securityContext", "runAsNonRoot"]).map_or(pod_non_root, |v| v == &Value::Bool(true));
            let root_uid = [at(c, &["securityContext", "runAsUser"]), at(pod, &["securityContext", "runAsUser"])]
                .into_iter()
                .flatten()
                .next()
                .is_some_and(|uid| uid == &Value::from(0));
            if !non_root || root_uid {
                problem("may run as root");
            }
            if at(c, &["securityContext", "readOnlyRootFilesystem"]) != Some(&Value::Bool(true)) {
                problem("root filesystem is writable");
            }
            if at(c, &["securityContext", "allowPrivilegeEscalation"]) != Some(&Value::Bool(false)) {
                problem("allows privilege escalation");
            }
            if !strings(c, &["securityContext", "capabilities", "drop"]).iter().any(|cap| cap == "ALL") {
                problem("does not drop ALL capabilities");
            }
            match seq_at(c, &["args"]).first().and_then(Value::as_str) {
                Some("dispatcher" | "agent" | "webhook" | "relay") => {}
                other => problem(&format!(
                    "args start with {other:?}, not the subcommand dispatcher, agent, webhook or relay"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn one_agent_per_member_and_two_dispatchers_electing_a_leader() {
    let args = |d: &Value| -> Vec<String> {
        seq_at(d, &["spec", "template", "spec", "containers"]).first().map_or_else(Vec::new, |c| strings(c, &["args"]))
    };
    for (dir, d) in deployments() {
        match args(d).first().map(String::as_str) {
            Some("agent") => {
                assert_eq!(at(d, &["spec", "replicas"]), Some(&Value::from(1)), "{dir}: agent replicas");
                assert_eq!(str_at(d, &["spec", "strategy", "type"]), Some("Recreate"), "{dir}: agent strategy");
            }
            Some("dispatcher") => {
                assert_eq!(at(d, &["spec", "replicas"]), Some(&Value::from(2)), "{dir}: dispatcher replicas");
                let a = args(d);
                for flag in ["--lease-namespace", "--identity"] {
                    assert!(a.iter().any(|x| x == flag), "{dir}: the dispatcher's args {a:?} lack {flag}");
                }
            }
            _ => {}
        }
    }
}

/// The value with every number as a float: kustomize writes the generated `minimum: 0.0` as
/// `0`, the same JSON number.
fn numbers_as_floats(v: &Value) -> Value {
    match v {
        Value::Number(n) => n.as_f64().map_or_else(|| v.clone(), Value::from),
        Value::Array(s) => Value::Array(s.iter().map(numbers_as_floats).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), numbers_as_floats(v))).collect()),
        _ => v.clone(),
    }
}

#[test]
fn the_hub_installs_our_crds_as_generated() {
    let hub = kustomize("hub");
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(MANIFESTS).join("crds"))
        .expect("manifests/crds")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".stowage.dev.yaml")))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "manifests/crds holds {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let generated: Value =
            yaml::from_str(&text).unwrap_or_else(|e| panic!("{}", e.in_file(&file.display().to_string())));
        let in_hub = hub
            .iter()
            .find(|d| is_kind(d, "CustomResourceDefinition") && name(d) == name(&generated))
            .unwrap_or_else(|| panic!("manifests/hub does not install {}", name(&generated)));
        assert!(
            numbers_as_floats(in_hub) == numbers_as_floats(&generated),
            "manifests/hub installs {} differently from {}",
            name(in_hub),
            file.display()
        );
    }
}

#[test]
fn no_role_grants_a_wildcard() {
    let mut roles = 0;
    for (dir, doc) in documents() {
        if !is_kind(doc, "ClusterRole") && !is_kind(doc, "Role") {
            continue;
        }
        roles += 1;
        for rule in seq_at(doc, &["rules"]) {
            for field in ["verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"] {
                let values = strings(rule, &[field]);
                assert!(
                    !values.iter().any(|v| v.contains('*')),
                    "{dir}: {} {}: {field} {values:?} holds a wildcard",
                    str_at(doc, &["kind"]).unwrap_or("?"),
                    name(doc)
                );
            }
        }
    }
    assert!(roles >= 5, "only {roles} roles found");
}

#[test]
fn the_agent_never_writes_nodes_or_pods_on_its_member() {
    let member = kustomize("member");
    let role = member
        .iter()
        .find(|d| is_kind(d, "ClusterRole") && name(d) == "stowage-agent-member")
        .expect("ClusterRole stowage-agent-member in manifests/member");
    let read = ["get", "list", "watch"];
    for rule in seq_at(role, &["rules"]) {
        if !strings(rule, &["apiGroups"]).iter().any(|g| g.is_empty()) {
            continue;
        }
        let resources = strings(rule, &["resources"]);
        let touches = resources
            .iter()
            .any(|r| ["nodes", "pods"].iter().any(|k| r == k || r.strip_prefix(k).is_some_and(|s| s.starts_with('/'))));
        let verbs = strings(rule, &["verbs"]);
        assert!(
            !touches || verbs.iter().all(|v| read.contains(&v.as_str())),
            "stowage-agent-member may {verbs:?} {resources:?}"
        );
    }
}

#[test]
fn the_example_overlays_leave_no_placeholder() {
    for (dir, docs) in builds() {
        if !dir.starts_with("overlays/") {
            continue;
        }
        let docs = docs.as_ref().unwrap_or_else(|e| panic!("{e}"));
        for d in docs {
            let text = yaml::to_string(d).expect("yaml");
            assert!(!text.contains("MEMBER"), "manifests/{dir} leaves the placeholder MEMBER in:\n{text}");
        }
    }
}

/// `stowage SUBCOMMAND --help`, from the binary under test.
fn help(subcommand: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stowage")).args([subcommand, "--help"]).output().expect("stowage runs");
    assert!(
        out.status.success(),
        "stowage {subcommand} --help: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_flag_a_deployment_passes_is_one_the_binary_has() {
    let mut flags: BTreeMap<String, BTreeSet<(String, &str)>> = BTreeMap::new();
    for (dir, d) in deployments() {
        for c in seq_at(d, &["spec", "template", "spec", "containers"]) {
            let args = strings(c, &["args"]);
            let Some((subcommand, rest)) = args.split_first() else { continue };
            for a in rest.iter().filter(|a| a.starts_with("--")) {
                let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f).to_string();
                flags.entry(subcommand.clone()).or_default().insert((flag, dir));
            }
        }
    }
    assert!(flags.contains_key("dispatcher") && flags.contains_key("agent"), "flags found: {flags:?}");
    let mut missing = Vec::new();
    for (subcommand, used) in &flags {
        let help = help(subcommand);
        let known: BTreeSet<&str> = help
            .split_whitespace()
            .map(|w| w.trim_end_matches([',', ']', ')']))
            .filter(|w| w.starts_with("--"))
            .collect();
        for (flag, dir) in used {
            if !known.contains(flag.as_str()) {
                missing.push(format!("manifests/{dir}: `stowage {subcommand}` has no {flag}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The rules of the Role or ClusterRole `name` in a build, with the namespace a Role binds in.
fn rules(docs: &[Value], kind: &str, name_: &str) -> Vec<Value> {
    docs.iter().filter(|d| is_kind(d, kind) && name(d) == name_).flat_map(|d| seq_at(d, &["rules"]).to_vec()).collect()
}

/// Whether one RBAC rule allows the request, as the API server's authorizer decides.
fn allows(rule: &Value, a: &kube_mem::Access) -> bool {
    let has = |key: &str, v: &str| strings(rule, &[key]).iter().any(|x| x == v);
    let resource = match &a.subresource {
        Some(sub) => format!("{}/{sub}", a.resource),
        None => a.resource.clone(),
    };
    let names = strings(rule, &["resourceNames"]);
    has("apiGroups", &a.group)
        && has("resources", &resource)
        && has("verbs", &a.verb)
        && (names.is_empty() || a.name.as_ref().is_some_and(|n| names.contains(n)))
}

/// Every request the dispatcher and the agents make while TrainJobs run — on the hub and on the
/// members — is one the manifests' roles grant: the RBAC is enough, and the access log shows it
/// is not wider than what the code uses (see the role files' comments).
#[tokio::test]
async fn the_controllers_need_no_permission_the_manifests_do_not_grant() {
    use api::trainer::TrainJob;
    use kube::api::{Api, PostParams};
    use playground::{Playground, PlaygroundOptions, SYSTEM_NAMESPACE};

    let mut hub_docs = kustomize("hub");
    hub_docs.extend(kustomize("overlays/example/hub"));
    hub_docs.extend(kustomize("hub-relay"));
    let member_docs = kustomize("overlays/example/member");
    let fleet = Playground::dev_fleet().expect("fleet");
    let options =
        PlaygroundOptions { dispatchers: 2, lease_ttl: std::time::Duration::from_secs(2), ..Default::default() };
    let p = Playground::start(&fleet, options).await.expect("playground");
    p.hub_server.faults().record_accesses();
    for m in &p.members {
        m.sim.server.faults().record_accesses();
    }
    let tjs: Api<TrainJob> = Api::default_namespaced(p.hub());
    for (name, runtime) in [("torch", "torch-distributed"), ("mpi", "deepspeed-distributed")] {
        let tj: TrainJob = serde_json::from_value(serde_json::json!({"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob", "metadata": {"name": name, "annotations": {"stowage.dev/simulated-duration-seconds": "1"}},
            "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": 2,
                     "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}}}))
        .expect("trainjob");
        tjs.create(&PostParams::default(), &tj).await.expect("create");
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let done = tjs.list(&Default::default()).await.expect("list").items.iter().all(|t| {
            t.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
        });
        if done {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the TrainJobs did not complete");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // Let a few more heartbeats and cycles through.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    // A log read from the hub: the relay's and the agent's part of it.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(p.hub());
    let copies = pods.list(&kube::api::ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=torch")).await;
    let copy = copies.expect("list").items.into_iter().find_map(|c| c.metadata.name).expect("a pod copy of torch");
    let params = kube::api::LogParams { container: Some("node".into()), ..Default::default() };
    let log = pods.logs(&copy, &params).await.expect("the log through the relay");
    assert!(log.contains("exited with code 0"), "{log}");

    let dispatcher: Vec<Value> = rules(&hub_docs, "ClusterRole", "stowage-dispatcher");
    let election: Vec<Value> = rules(&hub_docs, "Role", "stowage-dispatcher-leader-election");
    let agent_hub: Vec<Value> = rules(&hub_docs, "ClusterRole", "stowage-agent-hub");
    let agent_member: Vec<Value> = rules(&member_docs, "ClusterRole", "stowage-agent-member");
    let relay: Vec<Value> = rules(&hub_docs, "ClusterRole", "stowage-relay");
    let example_member = "east-h100";
    let own_member: Vec<Value> = rules(&hub_docs, "ClusterRole", &format!("stowage-agent-hub-{example_member}"));
    for set in [&dispatcher, &election, &agent_hub, &agent_member, &own_member, &relay] {
        assert!(!set.is_empty(), "a role is missing from the example overlays");
    }
    let mut denied = Vec::new();
    let mut seen = BTreeSet::new();
    for a in p.hub_server.faults().accesses() {
        // Who, as the hub authenticated the client's token (playground/src/credentials.rs).
        let granted = if a.username == "system:serviceaccount:stowage-system:stowage-dispatcher" {
            dispatcher.iter().any(|r| allows(r, &a))
                || (a.namespace.as_deref() == Some(SYSTEM_NAMESPACE) && election.iter().any(|r| allows(r, &a)))
        } else if let Some(member) = a.username.strip_prefix("system:serviceaccount:stowage-system:stowage-agent-") {
            // The example grants east-h100 its own MemberCluster; other members get theirs alike.
            let own = |r: &Value| {
                let text = yaml::to_string(r).expect("yaml").replace(example_member, member);
                allows(&yaml::from_str(&text).expect("yaml"), &a)
            };
            agent_hub.iter().any(|r| allows(r, &a)) || own_member.iter().any(own)
        } else if a.username == "system:serviceaccount:stowage-system:stowage-relay" {
            relay.iter().any(|r| allows(r, &a))
        } else {
            continue; // the test's own admin client
        };
        seen.insert(a.user.split('-').next().unwrap_or("").to_string());
        if !granted {
            denied.push(format!("hub: {a:?}"));
        }
    }
    for m in &p.members {
        for a in m.sim.server.faults().accesses().into_iter().filter(|a| a.user == "agent") {
            seen.insert("member-agent".to_string());
            if !agent_member.iter().any(|r| allows(r, &a)) {
                denied.push(format!("{}: {a:?}", m.name));
            }
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["agent", "dispatcher", "member-agent", "relay"],
        "every controller was seen"
    );
    assert!(denied.is_empty(), "requests the manifests' RBAC would deny:\n{}", denied.join("\n"));
}

/// The hub ties Placement status writes to their writers: the policy and its binding are
/// installed with the agents' role, deny (not warn), fail closed, and judge the status
/// subresource of Placements by the requesting user against spec.cluster.
#[test]
fn the_hub_lets_only_a_placements_agent_write_its_status() {
    let hub = kustomize("hub");
    let policy = hub
        .iter()
        .find(|d| is_kind(d, "ValidatingAdmissionPolicy") && name(d) == "stowage-status-writers")
        .expect("manifests/hub installs the ValidatingAdmissionPolicy stowage-status-writers");
    assert_eq!(str_at(policy, &["spec", "failurePolicy"]), Some("Fail"));
    let rules = seq_at(policy, &["spec", "matchConstraints", "resourceRules"]);
    let covers = |resource: &str, operation: &str| {
        rules.iter().any(|r| {
            strings(r, &["apiGroups"]).iter().any(|g| g == "stowage.dev")
                && strings(r, &["resources"]).iter().any(|x| x == resource)
                && strings(r, &["operations"]).iter().any(|o| o == operation)
        })
    };
    assert!(covers("placements/status", "UPDATE"), "the policy does not match Placement status writes: {rules:?}");
    assert!(covers("memberclusters/status", "UPDATE"), "the policy does not match MemberCluster status writes");
    let expressions: Vec<String> = seq_at(policy, &["spec", "validations"])
        .iter()
        .filter_map(|v| str_at(v, &["expression"]).map(str::to_string))
        .collect();
    assert!(
        expressions.iter().any(|e| e.contains("request.userInfo.username")
            && e.contains("oldObject.spec.cluster")
            && e.contains("variables.subresource")),
        "no validation compares the user with the Placement's cluster: {expressions:?}"
    );
    // A request to the object itself has no subResource key: a real API server's CEL errors on
    // reading it (and failurePolicy Fail denies), so every read of it goes through has().
    let variables: Vec<String> = seq_at(policy, &["spec", "variables"])
        .iter()
        .filter_map(|v| str_at(v, &["expression"]).map(str::to_string))
        .chain(expressions.iter().cloned())
        .collect();
    for e in variables.iter().filter(|e| e.contains("request.subResource")) {
        assert!(e.contains("has(request.subResource)"), "request.subResource read without has(): {e}");
    }
    for v in seq_at(policy, &["spec", "validations"]) {
        assert_eq!(str_at(v, &["reason"]), Some("Forbidden"), "a validation answers other than 403");
    }
    let binding = hub
        .iter()
        .find(|d| {
            is_kind(d, "ValidatingAdmissionPolicyBinding") && str_at(d, &["spec", "policyName"]) == Some(name(policy))
        })
        .expect("a ValidatingAdmissionPolicyBinding of stowage-status-writers");
    assert_eq!(strings(binding, &["spec", "validationActions"]), ["Deny"]);
}

/// docs/operations.md's RBAC table names every resource each role grants, in its own row: a
/// grant added to a role and not to the table fails here.
#[test]
fn the_rbac_table_names_every_resource_each_role_grants() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md")).expect("docs");
    let mut checked = 0;
    for (dir, doc) in documents() {
        if !is_kind(doc, "ClusterRole") && !is_kind(doc, "Role") {
            continue;
        }
        // The per-member role is made for each member; the table names it with <member>.
        let role = match name(doc) {
            n if n.starts_with("stowage-agent-hub-") => "stowage-agent-hub-<member>".to_string(),
            n => n.to_string(),
        };
        let Some(row) = docs.lines().find(|l| l.starts_with(&format!("| `{role}` "))) else {
            panic!("{dir}: role {role} has no row in docs/operations.md's RBAC table");
        };
        let reach = row.split(" | ").nth(2).unwrap_or_default().to_lowercase();
        for rule in seq_at(doc, &["rules"]) {
            for resource in strings(rule, &["resources"]) {
                assert!(reach.contains(&resource), "{dir}: {role} grants {resource}; its row does not say so:\n{row}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 30, "only {checked} grants checked");
}
