//! Hub and a member in one process, over real HTTP: a TrainJob submitted to the hub is placed by
//! the dispatcher, rendered and applied by the member's agent, gang-scheduled and run by the
//! simulated member, and its completion shows on the hub TrainJob.

use std::time::Duration;

use api::stowage::{MemberCluster, MemberClusterSpec, Placement, TopologyLevel};
use api::trainer::TrainJob;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use member_agent::controller::AgentConfig;
use member_agent::render::{Capabilities, GangScheduler};
use serde_json::json;
use simulator::fleet_file::FleetSpec;
use stowage_tests::apiserver::ApiServer;
use stowage_tests::member::SimulatedMember;

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream");
const OUR_CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crds");

fn client(server: &ApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().expect("url"))).expect("client")
}

async fn hub() -> (ApiServer, Client) {
    let server = ApiServer::start().await.expect("hub");
    let c = client(&server);
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let mut files: Vec<String> = ["trainjobs", "trainingruntimes", "clustertrainingruntimes"]
        .iter()
        .map(|k| format!("{UPSTREAM}/trainer/trainer.kubeflow.org_{k}.yaml"))
        .collect();
    files.extend(["memberclusters", "queues", "placements"].iter().map(|k| format!("{OUR_CRDS}/{k}.stowage.dev.yaml")));
    for f in files {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&std::fs::read_to_string(&f).expect("crd")).expect("yaml");
        crds.create(&PostParams::default(), &crd).await.expect("crd");
    }
    let runtime =
        std::fs::read_to_string(format!("{UPSTREAM}/trainer/runtimes/torch_distributed.yaml")).expect("runtime");
    let rt: api::trainer::ClusterTrainingRuntime = serde_yaml::from_str(&runtime).expect("yaml");
    Api::<api::trainer::ClusterTrainingRuntime>::all(c.clone())
        .create(&PostParams::default(), &rt)
        .await
        .expect("runtime");
    (server, c)
}

/// Hub, the east-h100 member, its agent and the dispatcher, running.
struct Playground {
    _hub_server: ApiServer,
    hub: Client,
    member: SimulatedMember,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Playground {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

async fn playground() -> Playground {
    let (hub_server, hub) = hub().await;
    let fleet = FleetSpec::builtin();
    let cluster = fleet.clusters.iter().find(|c| c.name == "east-h100").expect("cluster").clone();
    let member = SimulatedMember::start(&cluster, std::path::Path::new(UPSTREAM)).await.expect("member");
    Api::<MemberCluster>::all(hub.clone())
        .create(&PostParams::default(), &MemberCluster::new("east-h100", MemberClusterSpec::default()))
        .await
        .expect("member cluster");
    let levels = vec![
        TopologyLevel { level: "block".into(), node_label: "cloud.google.com/gce-topology-block".into() },
        TopologyLevel { level: "rack".into(), node_label: "cloud.google.com/gce-topology-subblock".into() },
    ];
    let cfg = AgentConfig {
        cluster: "east-h100".into(),
        levels,
        capabilities: Capabilities { gang_scheduler: GangScheduler::Coscheduling, ..Capabilities::default() },
    };
    let tasks = vec![
        tokio::spawn(member_agent::controller::run(hub.clone(), client(&member.server), cfg)),
        tokio::spawn(dispatcher::controller::run(hub.clone(), scheduler_core::Config::default())),
    ];
    Playground { _hub_server: hub_server, hub, member, tasks }
}

fn trainjob(name: &str, nodes: i64, annotations: serde_json::Value, labels: serde_json::Value) -> TrainJob {
    serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations, "labels": labels},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": nodes, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}}}}}))
    .expect("trainjob")
}

/// Waits until the TrainJob has a condition of `type_` with `status`; returns it.
async fn condition(
    hub: &Client,
    name: &str,
    type_: &str,
    status: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let tjs: Api<TrainJob> = Api::default_namespaced(hub.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let t = tjs.get(name).await.expect("trainjob");
        if let Some(c) =
            t.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == type_ && c.status == status))
        {
            return c.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{name}: no {type_}={status}: {:?}", t.status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_malformed_trainjob_gets_a_condition_naming_the_field_and_the_others_run() {
    let p = playground().await;
    let tjs: Api<TrainJob> = Api::default_namespaced(p.hub.clone());
    let quick = json!({"stowage.dev/simulated-duration-seconds": "1"});
    tjs.create(&PostParams::default(), &trainjob("broken", 0, quick.clone(), json!({})))
        .await
        .expect("accepted by the CRD");
    tjs.create(&PostParams::default(), &trainjob("fine", 1, quick, json!({}))).await.expect("create");
    let bad = condition(&p.hub, "broken", "Pending", "True").await;
    assert_eq!(bad.reason, "Invalid");
    assert_eq!(bad.message, "spec.trainer.numNodes: must be at least 1");
    condition(&p.hub, "fine", "Complete", "True").await;
}

#[tokio::test]
async fn an_exhausted_quota_keeps_the_trainjob_pending_naming_queue_and_flavor() {
    let p = playground().await;
    let queue: api::stowage::Queue = serde_yaml::from_str(
        "apiVersion: stowage.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\nspec:\n  quotas:\n  - {flavor: nvidia-h100-80gb, resource: nvidia.com/gpu, nominalQuota: '16'}\n",
    )
    .expect("queue");
    Api::<api::stowage::Queue>::all(p.hub.clone()).create(&PostParams::default(), &queue).await.expect("queue");
    let tjs: Api<TrainJob> = Api::default_namespaced(p.hub.clone());
    let c = trainjob("greedy", 3, json!({}), json!({"stowage.dev/queue": "team-a"}));
    tjs.create(&PostParams::default(), &c).await.expect("create");
    let pending = condition(&p.hub, "greedy", "Pending", "True").await;
    assert_eq!(pending.reason, "QuotaExceeded");
    assert!(
        pending
            .message
            .contains("queue team-a is out of nvidia-h100-80gb nvidia.com/gpu quota: needs 24, 16 available"),
        "{}",
        pending.message
    );
    let _ = &p.member;
}

#[tokio::test]
async fn a_trainjob_on_the_hub_runs_on_a_member_inside_one_rack_and_completes() {
    let p = playground().await;
    let (hub, member_client) = (p.hub.clone(), client(&p.member.server));
    let tj: TrainJob = serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "default",
                     "annotations": {"stowage.dev/topology": "required:rack", "stowage.dev/simulated-duration-seconds": "1"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 3, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}}}}}))
    .expect("trainjob");
    let tjs: Api<TrainJob> = Api::default_namespaced(hub.clone());
    tjs.create(&PostParams::default(), &tj).await.expect("submitted");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let done = loop {
        let t = tjs.get("llm").await.expect("trainjob");
        let complete =
            t.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Complete" && c.status == "True"));
        if complete {
            break t;
        }
        assert!(tokio::time::Instant::now() < deadline, "not complete: {:?}", t.status);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status = done.status.expect("status");
    let complete = status.conditions.iter().find(|c| c.type_ == "Complete").expect("complete");
    assert_eq!(
        (complete.reason.as_str(), complete.message.as_str()),
        ("AllJobsCompleted", "jobset completed successfully")
    );
    assert_eq!(status.jobs_status.iter().map(|j| j.succeeded).sum::<i32>(), 1);
    let placement = Api::<Placement>::default_namespaced(hub.clone()).get("llm").await.expect("placement");
    let domain = placement.spec.pod_sets[0].domain.clone().expect("pinned");
    assert_eq!(domain.level, "rack");
    // Every pod ran inside that rack on the member.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(member_client.clone());
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(member_client);
    let pods = pods.list(&kube::api::ListParams::default()).await.expect("pods").items;
    assert_eq!(pods.len(), 3);
    for p in pods {
        let node = nodes.get(&p.spec.and_then(|s| s.node_name).expect("bound")).await.expect("node");
        assert_eq!(node.metadata.labels.expect("labels")[&domain.node_label], domain.value);
    }
}
