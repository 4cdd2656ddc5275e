//! The simulated member cluster runs what the renderer makes: a pinned, gang-scheduled JobSet
//! is bound inside its domain, runs and completes; a gang too big stays Pending with the
//! scheduler's reason; a failed pod fails the JobSet or restarts it.

use std::time::Duration;

use api::jobset::JobSet;
use api::stowage::{DomainRef, Placement, PlacementSpec, PodSetPlacement};
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Config};
use playground::member::{DURATION_ANNOTATION, SimulatedMember};
use serde_json::json;
use simulator::fleet_file::FleetSpec;
use trainer_render::{Capabilities, GangScheduler, Input, Object, render};

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream");

async fn member() -> (SimulatedMember, Client) {
    let fleet = FleetSpec::builtin();
    let cluster = fleet.clusters.iter().find(|c| c.name == "east-h100").expect("east-h100");
    let m = SimulatedMember::start(cluster, playground::member::default_durations()).await.expect("member");
    let client = Client::try_from(Config::new(m.server.url().parse().expect("url"))).expect("client");
    (m, client)
}

fn trainjob(nodes: u32) -> TrainJob {
    serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "default", "uid": "11111111-2222-3333-4444-555555555555"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": nodes,
                 "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}}}))
    .expect("trainjob")
}

fn runtime() -> Runtime {
    let text = std::fs::read_to_string(format!("{UPSTREAM}/trainer/runtimes/torch_distributed.yaml")).expect("runtime");
    let mut rt: ClusterTrainingRuntime = input_limits::yaml::from_str(&text).expect("yaml");
    rt.spec.inner.pod_group_policy = Some(api::trainer::PodGroupPolicy {
        coscheduling: Some(api::trainer::CoschedulingPolicy { schedule_timeout_seconds: Some(1) }),
        ..Default::default()
    });
    Runtime::Cluster(rt)
}

fn placement(nodes: u32, rack: &str) -> Placement {
    Placement::new(
        "t",
        PlacementSpec {
            train_job_uid: "11111111-2222-3333-4444-555555555555".into(),
            cluster: Some("east-h100".into()),
            backoff: Vec::new(),
            ranking: Vec::new(),
            queue: None,
            epoch: 1,
            pod_sets: vec![PodSetPlacement {
                name: "node".into(),
                count: nodes,
                flavor: Some("nvidia-h100-80gb".into()),
                domain: Some(DomainRef {
                    level: "rack".into(),
                    node_label: "cloud.google.com/gce-topology-subblock".into(),
                    value: rack.into(),
                }),
                required: true,
                hosts: Vec::new(),
            }],
        },
    )
}

/// Renders and applies (server-side apply, as the agent will), with a 1 s simulated run.
async fn apply(client: &Client, nodes: u32, rack: &str) {
    let tj = trainjob(nodes);
    let rt = runtime();
    let pl = placement(nodes, rack);
    let caps = Capabilities { gang_scheduler: GangScheduler::FromRuntime, ..Capabilities::default() };
    let objects = render(&Input {
        trainjob: &tj,
        runtime: &rt,
        placement: Some(&pl),
        capabilities: &caps,
        ssh_key: None,
        jobset_uid: None,
    })
    .expect("renders");
    let pp = PatchParams::apply("stowage-agent");
    for o in objects {
        let mut v = o.to_value();
        match o {
            Object::JobSet(_) => {
                v["metadata"]["annotations"][DURATION_ANNOTATION] = "1".into();
                let api: Api<JobSet> = Api::default_namespaced(client.clone());
                api.patch("t", &pp, &Patch::Apply(&v)).await.expect("jobset applied");
            }
            Object::Coscheduling(_) => {
                let ar = kube::api::ApiResource::from_gvk_with_plural(
                    &kube::api::GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
                    "podgroups",
                );
                let api: Api<kube::api::DynamicObject> = Api::default_namespaced_with(client.clone(), &ar);
                api.patch("t", &pp, &Patch::Apply(&v)).await.expect("podgroup applied");
            }
            _ => {}
        }
    }
}

async fn wait_for<F: Fn(&JobSet) -> bool>(client: &Client, what: &str, f: F) -> JobSet {
    let api: Api<JobSet> = Api::default_namespaced(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let js = api.get("t").await.expect("jobset");
        if f(&js) {
            return js;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}: {:?}", js.status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition(js: &JobSet, t: &str) -> bool {
    js.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == t && c.status == "True"))
}

#[tokio::test]
async fn a_pinned_gang_runs_inside_its_rack_and_completes() {
    let (_m, client) = member().await;
    let nodes: Api<Node> = Api::all(client.clone());
    assert_eq!(nodes.list(&ListParams::default()).await.expect("nodes").items.len(), 32);
    apply(&client, 3, "h100-b1-r5").await;
    let js = wait_for(&client, "completion", |js| condition(js, "Completed")).await;
    assert_eq!(js.status.as_ref().map(|s| s.replicated_jobs_status[0].succeeded), Some(1));
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pods = pods.list(&ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=t")).await.expect("pods").items;
    assert_eq!(pods.len(), 3);
    for p in pods {
        let node = nodes.get(p.spec.and_then(|s| s.node_name).as_deref().expect("bound")).await.expect("node");
        assert_eq!(node.metadata.labels.expect("labels")["cloud.google.com/gce-topology-subblock"], "h100-b1-r5");
    }
}

#[tokio::test]
async fn a_gang_too_big_for_its_rack_stays_pending_with_the_reason() {
    let (_m, client) = member().await;
    // A rack has 4 nodes of 8 GPUs: 5 pods of 8 GPUs cannot be bound there together.
    apply(&client, 5, "h100-b0-r0").await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let list = pods.list(&ListParams::default()).await.expect("pods").items;
        let reasons: Vec<String> = list
            .iter()
            .filter_map(|p| {
                p.status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .find(|c| c.reason.as_deref() == Some("Unschedulable"))
                    .and_then(|c| c.message.clone())
            })
            .collect();
        if list.len() == 5 && reasons.len() == 5 {
            assert!(reasons[0].contains("gang t needs 5 pods"), "{}", reasons[0]);
            assert!(
                list.iter().all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()),
                "none bound: all or nothing"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no Unschedulable reason yet");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_failed_pod_fails_the_jobset() {
    let (m, client) = member().await;
    apply(&client, 2, "h100-b0-r2").await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let running = loop {
        let list = pods.list(&ListParams::default()).await.expect("pods").items;
        if let Some(p) = list.iter().find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")) {
            break p.metadata.name.clone().expect("name");
        }
        assert!(tokio::time::Instant::now() < deadline, "nothing running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(m.fail_pod("default", &running, ""));
    let js = wait_for(&client, "failure", |js| condition(js, "Failed")).await;
    assert!(!condition(&js, "Completed"));
}
