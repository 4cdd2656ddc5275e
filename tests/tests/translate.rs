//! The dispatcher's translation of hub objects into the core: the gang a TrainJob renders into,
//! and a fleet rebuilt from what agents report, which must answer fit questions as the real fleet
//! does. Here, not among the dispatcher's own tests, because it reads what the agent and the
//! playground's members write, crates of the dispatcher's layer and above.

use api::stowage::{MemberCluster, MemberClusterSpec, MemberClusterStatus, TopologyLevel};
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob};
use dispatcher::translate::{PrioritySource, fleet, gang};
use k8s_openapi::api::core::v1::{Node, Pod};
use scheduler_core::{Level, TopologyConstraint};
use serde_json::json;
use simulator::fleet_file::FleetSpec;

const RUNTIMES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/runtimes");

fn runtime(file: &str) -> Runtime {
    let text = std::fs::read_to_string(format!("{RUNTIMES}/{file}")).expect("runtime");
    Runtime::Cluster(input_limits::yaml::from_str::<ClusterTrainingRuntime>(&text).expect("yaml"))
}

fn trainjob(runtime: &str, nodes: u32, annotations: serde_json::Value) -> TrainJob {
    serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "ml", "labels": {"stowage.dev/queue": "research"}, "annotations": annotations,
                     "creationTimestamp": "2026-11-22T01:00:00Z"},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": nodes,
                 "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": "8"}}}}}))
    .expect("trainjob")
}

#[test]
fn a_torch_trainjob_is_one_pod_set_of_num_nodes_pods() {
    let (g, priority) = gang(
        &trainjob(
            "torch-distributed",
            4,
            json!({"stowage.dev/topology": "required:rack", "stowage.dev/priority": "5"}),
        ),
        &runtime("torch_distributed.yaml"),
    )
    .expect("gang");
    // The priority is resolved later, against the hub's PriorityClasses and the Queue.
    assert_eq!((g.id.as_str(), g.queue.as_str(), g.priority), ("ml/t", "research", 0));
    assert_eq!(priority, PrioritySource::Annotation(5));
    assert_eq!(g.submitted_ms, 1_795_309_200_000);
    assert_eq!(g.pod_sets.len(), 1);
    let ps = &g.pod_sets[0];
    assert_eq!((ps.pods, ps.shape.gpus, ps.shape.cpu_milli, ps.shape.memory_mib), (4, 8, 32_000, 256 * 1024));
    assert_eq!(ps.topology, TopologyConstraint::Required(Level::Rack));
}

#[test]
fn an_mpi_trainjob_counts_launcher_and_workers_as_trainer_does() {
    let (g, _) =
        gang(&trainjob("deepspeed-distributed", 3, json!({})), &runtime("deepspeed_distributed.yaml")).expect("gang");
    let shape: Vec<(&str, u32)> = g.pod_sets.iter().map(|p| (&*p.name, p.pods)).collect();
    assert_eq!(shape, [("node", 2), ("launcher", 1)]);
    assert_eq!(g.queue, "research");
}

#[test]
fn bad_annotations_and_bad_trainjobs_name_the_field() {
    let e = gang(
        &trainjob("torch-distributed", 2, json!({"stowage.dev/topology": "required:shelf"})),
        &runtime("torch_distributed.yaml"),
    )
    .expect_err("bad level");
    assert!(e.to_string().starts_with("metadata.annotations[stowage.dev/topology]"), "{e}");
    let e = gang(
        &trainjob("torch-distributed", 2, json!({"stowage.dev/expected-runtime-seconds": "soon"})),
        &runtime("torch_distributed.yaml"),
    )
    .expect_err("bad run time");
    assert_eq!(
        e.to_string(),
        "metadata.annotations[stowage.dev/expected-runtime-seconds]: \"soon\" is not a positive number of seconds"
    );
    let (ok, _) = gang(
        &trainjob("torch-distributed", 2, json!({"stowage.dev/expected-runtime-seconds": "90"})),
        &runtime("torch_distributed.yaml"),
    )
    .expect("valid");
    assert_eq!(ok.runtime_ms, Some(90_000));
    let e =
        gang(&trainjob("torch-distributed", 0, json!({})), &runtime("torch_distributed.yaml")).expect_err("zero nodes");
    assert_eq!(e.to_string(), "spec.trainer.numNodes: Invalid value: 0: must be at least 1");
}

fn member(name: &str, nodes: &[Node], pods: &[Pod], levels: &[(&str, &str)]) -> MemberCluster {
    let levels: Vec<TopologyLevel> =
        levels.iter().map(|(l, label)| TopologyLevel { level: l.to_string(), node_label: label.to_string() }).collect();
    let mut m = MemberCluster::new(name, MemberClusterSpec::default());
    m.status = Some(MemberClusterStatus {
        domains: member_agent::capacity::summarize(&levels, &[], nodes, pods),
        topology_levels: levels,
        ..MemberClusterStatus::default()
    });
    m
}

/// The built-in fleet's east-h100 as the playground makes its Nodes: 32 nodes of 8 H100s in
/// racks of four, two blocks.
fn east_h100_nodes() -> Vec<Node> {
    let spec = FleetSpec::builtin();
    let cluster = spec.clusters.iter().find(|c| c.name == "east-h100").expect("cluster");
    playground::member::nodes(cluster)
        .expect("nodes")
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("node"))
        .collect()
}

#[test]
fn a_fleet_rebuilt_from_agent_reports_fits_like_the_real_one() {
    let nodes = east_h100_nodes();
    // Six GPUs busy on one node of rack h100-b0-r0.
    let busy: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"nodeName": "h100-b0-r0-n0",
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "6"}}}]}, "status": {"phase": "Running"}}))
    .expect("pod");
    let levels = [("block", "cloud.google.com/gce-topology-block"), ("rack", "cloud.google.com/gce-topology-subblock")];
    let m = member("east-h100", &nodes, &[busy], &levels);
    let status = m.status.as_ref().expect("status");
    assert_eq!(status.domains.len(), 8, "one entry per rack, not per node");
    let (f, cap, _) = fleet(&[m]).expect("fleet");
    let c = &f.clusters()[0];
    let h100 = f.flavor("nvidia-h100-80gb").expect("flavor");
    assert_eq!(f.total_gpus(), 256);
    assert_eq!(cap.free_gpus(&f, c.root, h100), 250);
    // The rack with the busy node can hold 3 eight-GPU pods, the others 4.
    let racks: Vec<u32> = f
        .domain(f.domain(c.root).children[0])
        .children
        .iter()
        .map(|&r| cap.slots(&f, r, Some(h100), &scheduler_core::PodShape { gpus: 8, cpu_milli: 0, memory_mib: 0 }))
        .collect();
    assert_eq!(racks, [3, 4, 4, 4]);
}

#[test]
fn members_that_report_nothing_are_left_out_and_broken_reports_are_named() {
    let empty = MemberCluster::new("silent", MemberClusterSpec::default());
    assert!(fleet(&[empty]).is_err(), "no member reported");
    let mut m = MemberCluster::new("broken", MemberClusterSpec::default());
    m.status = Some(MemberClusterStatus {
        topology_levels: vec![TopologyLevel { level: "shelf".into(), node_label: "x".into() }],
        domains: vec![api::stowage::DomainCapacity {
            path: vec!["a".into()],
            flavor: "h100".into(),
            class: Default::default(),
            nodes: 1,
            gpus_per_node: 8,
            allocatable_gpus: 8,
            free_gpus: 8,
            free_histogram: vec![],
            cpu_milli_per_node: None,
            memory_mib_per_node: None,
        }],
        ..MemberClusterStatus::default()
    });
    let e = fleet(&[m]).expect_err("bad level");
    assert!(e.to_string().contains("MemberCluster broken: status.topologyLevels[0].level"), "{e}");
}

/// Every placement a member's report counts is found where its pods are: the hub matches each
/// bound node to a host of the summary by its free GPUs, so the agent writes the two from one
/// look at its caches. A `bound` list from before a second gang's pod landed beside the
/// first's, read with the summary after (what the agent's reports between heartbeats left),
/// loses the first: no end projected for it, and nothing to evict.
#[test]
fn every_placement_a_report_counts_is_found_where_its_pods_are() {
    let nodes = east_h100_nodes();
    let pod = |uid: &str, gpus: u32| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": uid, "labels": {
            api::stowage::TRAINJOB_UID_LABEL: uid, api::stowage::EPOCH_LABEL: "1",
            member_agent::capacity::REPLICATED_JOB_LABEL: "node"}},
            "spec": {"nodeName": "h100-b0-r0-n0",
                     "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": "Running"}}))
        .expect("pod")
    };
    let levels: Vec<TopologyLevel> =
        [("block", "cloud.google.com/gce-topology-block"), ("rack", "cloud.google.com/gce-topology-subblock")]
            .iter()
            .map(|(l, label)| TopologyLevel { level: l.to_string(), node_label: label.to_string() })
            .collect();
    let as_reported = |report: member_agent::capacity::Report| {
        let mut m = MemberCluster::new("east-h100", MemberClusterSpec::default());
        m.status = Some(MemberClusterStatus {
            topology_levels: levels.clone(),
            domains: report.domains,
            counted: report.counted,
            bound: report.bound,
            ..MemberClusterStatus::default()
        });
        m
    };
    let found = |m: &MemberCluster| -> Vec<String> {
        let (_, _, hosts) = fleet(std::slice::from_ref(m)).expect("fleet");
        dispatcher::translate::bound(&hosts, std::slice::from_ref(m)).into_keys().map(|(_, key)| key).collect()
    };
    let before = member_agent::capacity::report(&levels, &[], &nodes, &[pod("a", 4)]);
    // c trains on CPUs: it holds no GPU room, and is found all the same.
    let after = member_agent::capacity::report(&levels, &[], &nodes, &[pod("a", 4), pod("b", 2), pod("c", 0)]);
    let m = as_reported(after.clone());
    assert_eq!(m.status.as_ref().expect("status").counted, ["a/1", "b/1", "c/1"]);
    assert_eq!(found(&m), ["a/1", "b/1", "c/1"]);
    let stale = as_reported(member_agent::capacity::Report { bound: before.bound, ..after });
    assert_eq!(found(&stale), Vec::<String>::new(), "a's node has 2 GPUs free now, not the 4 its old entry says");
}

/// A member of more racks than its summary has room for reports by blocks: the hub reads the
/// levels the report is by, not the agent's configuration, so the fleet builds, every GPU is
/// there, and the bound placements are matched to their nodes.
#[test]
fn the_hub_reads_a_member_summarised_by_fewer_levels_as_it_is_reported() {
    let nodes: Vec<Node> = (0..12_000)
        .map(|i| {
            serde_json::from_value(json!({"metadata": {"name": format!("n{i}"), "labels": {
                "rack": format!("rack-{i}"), "block": format!("block-{}", i / 32),
                api::stowage::GPU_PRODUCT_LABEL: "nvidia-h100-80gb"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "512Gi"}}}))
            .expect("node")
        })
        .collect();
    let pods: Vec<Pod> = (0..3)
        .map(|i| {
            serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "labels": {
                api::stowage::TRAINJOB_UID_LABEL: format!("u{i}"), api::stowage::EPOCH_LABEL: "1",
                member_agent::capacity::REPLICATED_JOB_LABEL: "node"}},
                "spec": {"nodeName": format!("n{}", i * 100),
                         "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
                "status": {"phase": "Running"}}))
            .expect("pod")
        })
        .collect();
    let levels: Vec<TopologyLevel> = ["block", "rack", "host"]
        .iter()
        .map(|l| TopologyLevel {
            level: l.to_string(),
            node_label: if *l == "host" { "kubernetes.io/hostname" } else { l }.to_string(),
        })
        .collect();
    let report = member_agent::capacity::report(&levels, &[], &nodes, &pods);
    assert_eq!(report.levels_dropped, 1);
    // As the agent writes it: the report is the status's capacity part.
    let mut m = MemberCluster::new("big", MemberClusterSpec::default());
    m.status = Some(serde_json::from_value(serde_json::to_value(&report).expect("json")).expect("status"));
    dispatcher::translate::check_member(&m).expect("the hub accepts the report");
    let (f, cap, hosts) = fleet(std::slice::from_ref(&m)).expect("fleet");
    let c = &f.clusters()[0];
    let read: Vec<Level> = c.levels.iter().map(|l| l.level).collect();
    assert_eq!(read, [Level::Block, Level::Host], "by blocks, as reported");
    let h100 = f.flavor("nvidia-h100-80gb").expect("flavor");
    assert_eq!((f.total_gpus(), cap.free_gpus(&f, c.root, h100)), (96_000, 96_000 - 24));
    let found: Vec<String> =
        dispatcher::translate::bound(&hosts, std::slice::from_ref(&m)).into_keys().map(|(_, key)| key).collect();
    assert_eq!(found, ["u0/1", "u1/1", "u2/1"]);
}
