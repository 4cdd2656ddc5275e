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

#[tokio::test]
async fn a_trainjob_on_the_hub_runs_on_a_member_inside_one_rack_and_completes() {
    let (_hub_server, hub) = hub().await;
    let fleet = FleetSpec::builtin();
    let cluster = fleet.clusters.iter().find(|c| c.name == "east-h100").expect("cluster").clone();
    let member = SimulatedMember::start(&cluster, std::path::Path::new(UPSTREAM)).await.expect("member");
    let member_client = client(&member.server);
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
    let agent = tokio::spawn(member_agent::controller::run(hub.clone(), member_client.clone(), cfg));
    let dispatcher = tokio::spawn(dispatcher::controller::run(hub.clone(), scheduler_core::Config::default()));

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
    agent.abort();
    dispatcher.abort();
}
