//! Writes tied to writers, over HTTP with kube clients that authenticate by token: the shipped
//! ValidatingAdmissionPolicy (manifests/hub/status-writers-policy.yaml) lets only the agent of a
//! Placement's cluster write its status; the CRDs' x-kubernetes-validations rules are evaluated
//! in CEL (422 naming the field); and a malformed or expensive expression is an answer, not a
//! crash or a hang.

use std::time::{Duration, Instant};

use api::stowage::{MemberCluster, Placement};
use api::trainer::TrainJob;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_mem::{ApiServer, UnknownTokens, UserInfo};
use serde_json::json;

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests");
const TRAINJOB_CRD: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/trainer.kubeflow.org_trainjobs.yaml");

const POLICY: &str = "stowage-status-writers";
const AGENT: &str = "system:serviceaccount:stowage-system:stowage-agent-";

fn docs(path: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let docs: Vec<serde_json::Value> =
        input_limits::yaml::documents(&text).unwrap_or_else(|e| panic!("{}", e.in_file(path)));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

async fn create<K>(client: &Client, obj: serde_json::Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let typed: K = serde_json::from_value(obj).expect("typed");
    Api::<K>::all(client.clone()).create(&PostParams::default(), &typed).await.expect("create")
}

/// A hub with the Stowage CRDs and the shipped policy, and a client per writer: the agents of
/// `east` and `west`, the dispatcher, an administrator.
struct Hub {
    server: ApiServer,
    admin: Client,
}

impl Hub {
    async fn start() -> Hub {
        let server = ApiServer::start().await.expect("server");
        server.add_user("admin-token", UserInfo::admin());
        server.add_user("dispatcher-token", UserInfo::service_account("stowage-system", "stowage-dispatcher"));
        for m in ["east", "west"] {
            server.add_user(
                &format!("{m}-token"),
                UserInfo::service_account("stowage-system", &format!("stowage-agent-{m}")),
            );
        }
        let admin = server.client_as("admin-token").expect("client");
        for crd in ["placements", "memberclusters"] {
            for d in docs(&format!("{MANIFESTS}/crds/{crd}.stowage.dev.yaml")) {
                create::<CustomResourceDefinition>(&admin, d).await;
            }
        }
        Hub { server, admin }
    }

    async fn with_policy(self) -> Hub {
        for d in docs(&format!("{MANIFESTS}/hub/status-writers-policy.yaml")) {
            match d["kind"].as_str() {
                Some("ValidatingAdmissionPolicy") => {
                    create::<ValidatingAdmissionPolicy>(&self.admin, d).await;
                }
                Some("ValidatingAdmissionPolicyBinding") => {
                    create::<ValidatingAdmissionPolicyBinding>(&self.admin, d).await;
                }
                other => panic!("unexpected {other:?} in the policy file"),
            }
        }
        self
    }

    fn as_(&self, who: &str) -> Client {
        self.server.client_as(&format!("{who}-token")).expect("client")
    }
}

fn placement(name: &str, cluster: &str) -> Placement {
    serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": name, "namespace": "default", "labels": {"stowage.dev/cluster": cluster}},
        "spec": {"trainJobUid": "uid-1", "cluster": cluster, "epoch": 1}}))
    .expect("placement")
}

fn phase(p: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"status": {"phase": p, "observedEpoch": 1}}))
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn only_the_agent_of_a_placements_cluster_writes_its_status() {
    let hub = Hub::start().await.with_policy().await;
    let dispatcher: Api<Placement> = Api::default_namespaced(hub.as_("dispatcher"));
    dispatcher.create(&PostParams::default(), &placement("tj", "east")).await.expect("the dispatcher places");

    // West forges a Succeeded on east's Placement: 403 with the policy's words, nothing changed.
    let west: Api<Placement> = Api::default_namespaced(hub.as_("west"));
    let err =
        api_error(west.patch_status("tj", &PatchParams::default(), &phase("Succeeded")).await.expect_err("forged"));
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"), "{err:?}");
    assert_eq!(
        err.message,
        format!(
            "placements.stowage.dev \"tj\" is forbidden: ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' \
             denied request: only the agent of the Placement's cluster (east) may write its status, not {AGENT}west"
        )
    );
    assert!(dispatcher.get("tj").await.expect("get").status.is_none(), "the forged status was not stored");

    // East writes its own.
    let east: Api<Placement> = Api::default_namespaced(hub.as_("east"));
    let written = east.patch_status("tj", &PatchParams::default(), &phase("Running")).await.expect("own status");
    assert_eq!(written.status.map(|s| format!("{:?}", s.phase)), Some("Running".into()));

    // Nor may anyone else: the dispatcher, an administrator, a client with no registered token.
    for who in [hub.as_("dispatcher"), hub.admin.clone(), hub.server.client_as("a-guess").expect("client")] {
        let err = Api::<Placement>::default_namespaced(who)
            .patch_status("tj", &PatchParams::default(), &phase("Lost"))
            .await
            .expect_err("not the agent");
        assert_eq!(api_error(err).code, 403);
    }

    // The dispatcher still places and moves: create and replace the spec.
    let mut moved = dispatcher.get("tj").await.expect("get");
    moved.spec.cluster = Some("west".into());
    moved.spec.epoch = 2;
    dispatcher.replace("tj", &PostParams::default(), &moved).await.expect("the dispatcher moves it");
    dispatcher.create(&PostParams::default(), &placement("tj2", "west")).await.expect("and places another");
    // Now west's, no longer east's.
    west.patch_status("tj", &PatchParams::default(), &phase("Pending")).await.expect("west's now");
    let err = east.patch_status("tj", &PatchParams::default(), &phase("Running")).await.expect_err("east's no more");
    assert_eq!(api_error(err).code, 403);

    // An agent never writes a Placement's spec, its own member's neither.
    let mut taken = west.get("tj2").await.expect("read");
    taken.spec.epoch = 9;
    let err = west.replace("tj2", &PostParams::default(), &taken).await.expect_err("agent writes spec");
    let err = api_error(err);
    assert_eq!(err.code, 403);
    assert!(
        err.message.ends_with(&format!("an agent may not create, change or delete Placements: {AGENT}west")),
        "{}",
        err.message
    );
    let err = west.delete("tj2", &DeleteParams::default()).await.expect_err("agent deletes");
    assert_eq!(api_error(err).code, 403);

    // The policy is what refuses: without its binding, west's forgery goes through.
    Api::<ValidatingAdmissionPolicyBinding>::all(hub.admin.clone())
        .delete(POLICY, &DeleteParams::default())
        .await
        .expect("unbind");
    east.patch_status("tj", &PatchParams::default(), &phase("Succeeded")).await.expect("unprotected");
}

#[tokio::test]
async fn an_agent_writes_its_own_membercluster_status_only() {
    let hub = Hub::start().await.with_policy().await;
    let admin: Api<MemberCluster> = Api::all(hub.admin.clone());
    for m in ["east", "west"] {
        let mc: MemberCluster =
            serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": m}, "spec": {}}))
            .expect("mc");
        admin.create(&PostParams::default(), &mc).await.expect("member");
    }
    let beat = Patch::Merge(json!({"status": {"heartbeatTime": "2026-01-01T00:00:00Z"}}));
    let west: Api<MemberCluster> = Api::all(hub.as_("west"));
    west.patch_status("west", &PatchParams::default(), &beat).await.expect("own heartbeat");
    let err = api_error(west.patch_status("east", &PatchParams::default(), &beat).await.expect_err("east's heartbeat"));
    assert_eq!(err.code, 403);
    assert!(err.message.ends_with(&format!("not east's: {AGENT}west")), "{}", err.message);
    assert!(admin.get("east").await.expect("get").status.and_then(|s| s.heartbeat_time).is_none());
}

#[tokio::test]
async fn crd_validation_rules_are_evaluated_in_cel_and_refused_with_422() {
    let server = ApiServer::start().await.expect("server");
    let client = server.client_as("anyone").expect("client");
    for d in docs(TRAINJOB_CRD) {
        create::<CustomResourceDefinition>(&client, d).await;
    }
    let tjs: Api<TrainJob> = Api::default_namespaced(client);
    let tj = |name: &str, extra: serde_json::Value| -> TrainJob {
        let mut v = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 1}}});
        if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(v).expect("trainjob")
    };
    // `self in [...]` on spec.managedBy.
    let err = tjs.create(&PostParams::default(), &tj("a", json!({"managedBy": "example.com/other"}))).await;
    let err = api_error(err.expect_err("managedBy"));
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{err:?}");
    assert!(
        err.message.ends_with(
            "spec.managedBy: Invalid value: \"example.com/other\": ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"
        ),
        "{}",
        err.message
    );
    // `self.matches(...)` on an initializer's storageUri.
    let bad_uri = json!({"initializer": {"dataset": {"storageUri": "no-scheme"}}});
    let err = api_error(tjs.create(&PostParams::default(), &tj("b", bad_uri)).await.expect_err("uri"));
    assert_eq!(err.code, 422);
    assert!(err.message.contains("spec.initializer.dataset.storageUri: Invalid value: \"no-scheme\": storageUri may be empty, or it must be a valid URI"), "{}", err.message);
    // What the rules allow is stored.
    let good = json!({"managedBy": "kueue.x-k8s.io/multikueue", "initializer": {"dataset": {"storageUri": "hf://x"}}});
    tjs.create(&PostParams::default(), &tj("c", good)).await.expect("valid");
    // And `self == oldSelf` still makes fields immutable.
    let err = tjs
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"managedBy": "trainer.kubeflow.org/trainjob-controller"}})),
        )
        .await
        .expect_err("immutable");
    assert!(
        api_error(err).message.contains(
            "spec.managedBy: Invalid value: \"trainer.kubeflow.org/trainjob-controller\": field is immutable"
        )
    );
}

/// A ValidatingAdmissionPolicy on ConfigMaps whose one validation is `expression`.
fn configmap_policy(name: &str, expression: &str, failure_policy: &str) -> (serde_json::Value, serde_json::Value) {
    (
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"failurePolicy": failure_policy,
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
                "matchConditions": [{"name": "mine", "expression": format!("object.metadata.name.startsWith('{name}')")}],
                "validations": [{"expression": expression}]}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}),
    )
}

#[tokio::test]
async fn malformed_and_expensive_expressions_neither_crash_nor_hang_the_server() {
    let server = ApiServer::start().await.expect("server");
    let client = server.client_as("anyone").expect("client");
    // A CRD whose rule does not compile is refused, naming the rule.
    let mut crd = docs(&format!("{MANIFESTS}/crds/queues.stowage.dev.yaml")).remove(0);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
        json!([{"rule": "self.spec.quotas.all(q,", "message": "broken"}]);
    let typed: CustomResourceDefinition = serde_json::from_value(crd).expect("crd");
    // A dry run is refused as the write would be: kube-apiserver validates before it stops.
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    for params in [dry_run, PostParams::default()] {
        let err = Api::<CustomResourceDefinition>::all(client.clone()).create(&params, &typed).await;
        let err = api_error(err.expect_err("a rule that does not compile"));
        assert_eq!(err.code, 422, "dry run {}", params.dry_run);
        assert!(
            err.message.contains("x-kubernetes-validations[0].rule") && err.message.contains("compilation failed"),
            "{}",
            err.message
        );
    }

    let deep = format!("{}true{}", "(".repeat(2000), ")".repeat(2000));
    let cubic = "object.data.all(a, object.data.all(b, object.data.all(c, a != b || b != c || a == c)))";
    for (name, expression, policy) in [
        ("broken", "object.data.size() >", "Fail"),
        ("deep", deep.as_str(), "Fail"),
        ("cubic", cubic, "Fail"),
        ("lenient", cubic, "Ignore"),
    ] {
        let (p, b) = configmap_policy(name, expression, policy);
        create::<ValidatingAdmissionPolicy>(&client, p).await;
        create::<ValidatingAdmissionPolicyBinding>(&client, b).await;
    }
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let big: serde_json::Map<String, serde_json::Value> = (0..2000).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": big})).expect("cm")
    };
    for (name, why) in
        [("broken", "compilation failed"), ("deep", "compilation failed"), ("cubic", "exceeded the cost budget")]
    {
        let started = Instant::now();
        let err = api_error(cms.create(&PostParams::default(), &cm(name)).await.expect_err(name));
        assert!(started.elapsed() < Duration::from_secs(5), "{name} took {:?}", started.elapsed());
        assert_eq!(err.code, 422, "{name}: {err:?}");
        assert!(
            err.message.contains(&format!("ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request")),
            "{}",
            err.message
        );
        assert!(err.message.contains(why), "{name}: {}", err.message);
    }
    // failurePolicy Ignore: the same runaway expression admits.
    cms.create(&PostParams::default(), &cm("lenient")).await.expect("ignored failure");
    // And the server answers as before.
    let started = Instant::now();
    cms.create(&PostParams::default(), &cm("plain")).await.expect("unaffected");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// A policy is compiled once per version of it: a change, or the policy deleted and made
/// again under the same name, judges the next write by what it says now.
#[tokio::test]
async fn a_changed_or_remade_policy_judges_the_next_write() {
    let server = ApiServer::start().await.expect("server");
    let client = server.client_as("anyone").expect("client");
    let (p, b) = configmap_policy("gate", "object.data.k == 'open'", "Fail");
    create::<ValidatingAdmissionPolicy>(&client, p.clone()).await;
    create::<ValidatingAdmissionPolicyBinding>(&client, b).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = |name: &str, k: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": k}})).expect("cm")
    };
    let refused = |name: &str| {
        format!("configmaps {name:?} is forbidden: ValidatingAdmissionPolicy 'gate' with binding 'gate' denied request")
    };
    cms.create(&PostParams::default(), &cm("gate-1", "open")).await.expect("admitted");
    let err = api_error(cms.create(&PostParams::default(), &cm("gate-2", "shut")).await.expect_err("refused"));
    assert!(err.message.contains(&refused("gate-2")), "{}", err.message);

    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let change = |expression: &str| json!({"spec": {"validations": [{"expression": expression}]}});
    policies
        .patch("gate", &PatchParams::default(), &Patch::Merge(change("object.data.k == 'shut'")))
        .await
        .expect("changed");
    cms.create(&PostParams::default(), &cm("gate-2", "shut")).await.expect("admitted by the changed policy");
    let err = api_error(cms.create(&PostParams::default(), &cm("gate-3", "open")).await.expect_err("refused"));
    assert!(err.message.contains(&refused("gate-3")), "{}", err.message);

    // Deleted and made again as it first was: a new object, judged as such.
    policies.delete("gate", &DeleteParams::default()).await.expect("deleted");
    create::<ValidatingAdmissionPolicy>(&client, p).await;
    cms.create(&PostParams::default(), &cm("gate-3", "open")).await.expect("admitted by the policy made again");
    let err = api_error(cms.create(&PostParams::default(), &cm("gate-4", "shut")).await.expect_err("refused"));
    assert!(err.message.contains(&refused("gate-4")), "{}", err.message);
}

/// Two servers in one process (the playground's hub and members) may hold policies of the same
/// name at the same resourceVersion: each is judged by its own.
#[tokio::test]
async fn policies_of_one_name_and_version_on_two_servers_are_each_their_own() {
    let mut answers = Vec::new();
    for allowed in ["open", "shut"] {
        let server = ApiServer::start().await.expect("server");
        let client = server.client_as("anyone").expect("client");
        let (p, b) = configmap_policy("gate", &format!("object.data.k == '{allowed}'"), "Fail");
        let p = create::<ValidatingAdmissionPolicy>(&client, p).await;
        create::<ValidatingAdmissionPolicyBinding>(&client, b).await;
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "gate-1"}, "data": {"k": "open"}})).expect("cm");
        let made = Api::<ConfigMap>::default_namespaced(client).create(&PostParams::default(), &cm).await;
        answers.push((p.metadata.resource_version, made.is_ok()));
    }
    assert_eq!(answers[0].0, answers[1].0, "the case needs both policies at one resourceVersion");
    assert_eq!([answers[0].1, answers[1].1], [true, false], "each server's own policy decides");
}

/// Variables are evaluated when an expression reads them (kube-apiserver's composition,
/// `lazy.MapValue`): one nothing reads cannot fail the request, one that fails fails the
/// expression that reads it, naming that expression, and a chain resolves in order.
#[tokio::test]
async fn policy_variables_are_evaluated_when_read() {
    let server = ApiServer::start().await.expect("server");
    let client = server.client_as("anyone").expect("client");
    let failing = "object.data.missing == 'x'";
    for (name, validation) in [
        ("unread", "object.data.size() > 0"),
        ("read", "variables.broken"),
        ("absorbed", "variables.broken || true"),
        ("chain", "variables.third == 'v-v-v'"),
        ("message", "variables.second == 'nope'"),
    ] {
        let (mut p, b) = configmap_policy(name, validation, "Fail");
        p["spec"]["variables"] = json!([
            {"name": "broken", "expression": failing},
            {"name": "first", "expression": "object.data.k"},
            {"name": "second", "expression": "variables.first + '-' + variables.first"},
            {"name": "third", "expression": "variables.second + '-' + variables.first"},
        ]);
        if name == "message" {
            p["spec"]["validations"][0]["messageExpression"] = json!("'second is ' + variables.second");
        }
        create::<ValidatingAdmissionPolicy>(&client, p).await;
        create::<ValidatingAdmissionPolicyBinding>(&client, b).await;
    }
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).expect("cm")
    };
    // A variable that would fail, read by nothing: admitted (evaluating every variable first
    // refused this write).
    cms.create(&PostParams::default(), &cm("unread")).await.expect("an unread variable cannot fail the request");
    cms.create(&PostParams::default(), &cm("chain")).await.expect("variables read variables before them");
    // CEL's `||` absorbs an error when its other side is true, a failed variable's too.
    cms.create(&PostParams::default(), &cm("absorbed")).await.expect("`error || true` is true");
    let err = api_error(cms.create(&PostParams::default(), &cm("read")).await.expect_err("a read variable fails"));
    assert_eq!(err.code, 422, "{err:?}");
    assert!(
        err.message.contains("expression 'variables.broken' resulted in error") && err.message.contains("missing"),
        "{}",
        err.message
    );
    let err = api_error(cms.create(&PostParams::default(), &cm("message")).await.expect_err("denied"));
    assert!(err.message.ends_with("denied request: second is v-v"), "{}", err.message);
}

#[tokio::test]
async fn unknown_tokens_are_anonymous_unless_the_server_refuses_them() {
    let server = ApiServer::start().await.expect("server");
    server.add_user("known", UserInfo::admin());
    let cms = |token: &str| Api::<ConfigMap>::default_namespaced(server.client_as(token).expect("client"));
    cms("a-guess").list(&Default::default()).await.expect("anonymous is let in by default");
    server.set_unknown_tokens(UnknownTokens::Refuse);
    let err = api_error(cms("a-guess").list(&Default::default()).await.expect_err("refused"));
    assert_eq!((err.code, err.reason.as_str()), (401, "Unauthorized"));
    cms("known").list(&Default::default()).await.expect("a registered token");
    server.faults().record_accesses();
    cms("known").list(&Default::default()).await.expect("a registered token");
    assert_eq!(server.faults().accesses()[0].username, "kubernetes-admin");
}

/// The hub's copies of member pods and the members' virtual Nodes: each agent writes its own
/// member's only (labelled with it, bound to `stowage-<member>`), never another's.
#[tokio::test]
async fn an_agent_writes_only_its_own_members_pod_copies_and_virtual_node() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    let hub = Hub::start().await.with_policy().await;
    let copy = |name: &str, member: &str, node: &str| -> Pod {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"stowage.dev/cluster": member}},
            "spec": {"nodeName": node, "containers": [{"name": "node", "image": "x"}]}}))
        .expect("pod")
    };
    let west: Api<Pod> = Api::default_namespaced(hub.as_("west"));
    west.create(&PostParams::default(), &copy("w-0", "west", "stowage-west")).await.expect("its own copy");
    let status =
        Patch::Merge(json!({"metadata": {"labels": {"stowage.dev/cluster": "west"}}, "status": {"phase": "Running"}}));
    west.patch_status("w-0", &PatchParams::default(), &status).await.expect("its own copy's status");
    for (pod, why) in [
        (copy("e-0", "east", "stowage-east"), "another member's label"),
        (copy("e-1", "west", "stowage-east"), "another member's Node"),
    ] {
        let err = api_error(west.create(&PostParams::default(), &pod).await.expect_err(why));
        assert_eq!(err.code, 403, "{why}");
        assert!(err.message.contains("an agent may write only the copies of its own member's pods"), "{}", err.message);
    }
    let east: Api<Pod> = Api::default_namespaced(hub.as_("east"));
    let err = api_error(east.delete("w-0", &Default::default()).await.expect_err("west's copy"));
    assert_eq!(err.code, 403);
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"stowage.dev/cluster": "east"}}}));
    assert_eq!(api_error(east.patch("w-0", &PatchParams::default(), &relabel).await.expect_err("relabel")).code, 403);
    west.delete("w-0", &Default::default()).await.expect("its own copy goes");

    let node = |name: &str, member: &str| -> Node {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"stowage.dev/cluster": member}}}))
        .expect("node")
    };
    let nodes: Api<Node> = Api::all(hub.as_("west"));
    nodes.create(&PostParams::default(), &node("stowage-west", "west")).await.expect("its own Node");
    for (n, why) in [(node("stowage-east", "east"), "east's Node"), (node("gpu-1", "west"), "a Node not its own name")]
    {
        let err = api_error(nodes.create(&PostParams::default(), &n).await.expect_err(why));
        assert_eq!(err.code, 403, "{why}");
        assert!(err.message.contains("its own member's virtual Node"), "{}", err.message);
    }
    assert_eq!(api_error(nodes.delete("stowage-west", &Default::default()).await.expect_err("delete")).code, 403);

    // The virtual Node's Lease, renewed by server-side apply as the agent does.
    use k8s_openapi::api::coordination::v1::Lease;
    let lease = |ns: &str, name: &str, member: &str| -> (Api<Lease>, Lease) {
        let l = serde_json::from_value(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": ns, "labels": {"stowage.dev/cluster": member}},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}}))
        .expect("lease");
        (Api::namespaced(hub.as_("west"), ns), l)
    };
    let apply = PatchParams::apply("stowage-agent").force();
    let (leases, own) = lease("kube-node-lease", "stowage-west", "west");
    leases.patch("stowage-west", &apply, &Patch::Apply(&own)).await.expect("its own Lease, made");
    leases.patch("stowage-west", &apply, &Patch::Apply(&own)).await.expect("its own Lease, renewed");
    for (ns, name, member, why) in [
        ("kube-node-lease", "stowage-east", "east", "east's Lease"),
        ("kube-node-lease", "stowage-east", "west", "a Lease named for east"),
        ("default", "stowage-west", "west", "a Lease outside kube-node-lease"),
    ] {
        let (api, l) = lease(ns, name, member);
        let err = api_error(api.patch(name, &apply, &Patch::Apply(&l)).await.expect_err(why));
        assert_eq!(err.code, 403, "{why}");
        assert!(err.message.contains("its own member's Node Lease"), "{why}: {}", err.message);
    }
    assert_eq!(api_error(leases.delete("stowage-west", &Default::default()).await.expect_err("delete")).code, 403);
}
