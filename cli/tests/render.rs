//! `stowage render` as a user runs it: a YAML stream on success, a field-naming error on bad input.

use std::process::{Command, Output};

mod common;
use common::Scratch;

const RUNTIMES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/runtimes");

fn stowage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stowage")).args(args).output().expect("runs")
}

fn scratch(name: &str, files: &[(&str, &str)]) -> Scratch {
    let dir = Scratch::new(&format!("render-{name}"));
    for (f, text) in files {
        std::fs::write(dir.join(f), text).expect("write");
    }
    dir
}

const TRAINJOB: &str = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: demo, namespace: ml}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 2
    resourcesPerNode: {requests: {nvidia.com/gpu: '8'}, limits: {nvidia.com/gpu: \"8\"}}
";

const PLACEMENT: &str = "apiVersion: stowage.dev/v1alpha1
kind: Placement
metadata: {name: demo, namespace: ml}
spec:
  trainJobUid: 0b6f9a3e-0000-4000-8000-000000000001
  cluster: east-h100
  epoch: 2
  podSets:
  - {name: node, count: 2, flavor: nvidia-h100-80gb, required: true,
     domain: {level: rack, nodeLabel: cloud.google.com/gce-topology-subblock, value: h100-b0-r1}}
";

fn run(dir: &std::path::Path, extra: &[&str]) -> Output {
    let tj = dir.join("trainjob.yaml");
    let rt = format!("{RUNTIMES}/torch_distributed.yaml");
    let mut args = vec!["render", "--trainjob", tj.to_str().expect("utf-8"), "--runtime", &rt];
    args.extend_from_slice(extra);
    stowage(&args)
}

#[test]
fn renders_a_yaml_stream_and_pins_to_the_placement() {
    let dir = scratch("ok", &[("trainjob.yaml", TRAINJOB), ("placement.yaml", PLACEMENT)]);
    let pl = dir.join("placement.yaml");
    let o = run(&dir, &["--placement", pl.to_str().expect("utf-8"), "--gang-scheduler", "volcano"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let docs: Vec<serde_json::Value> = input_limits::yaml::documents(&out).expect("a YAML stream");
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["JobSet", "PodGroup"]);
    assert!(out.contains("h100-b0-r1") && out.contains("stowage.dev/placement-epoch"), "{out}");
    assert_eq!(docs[1]["spec"]["minMember"].as_i64(), Some(2));
}

/// The member's names for its topology reach the gang scheduler's own constraint: Volcano's
/// HyperNode tier, KAI's Topology object. A bad one is refused naming its flag.
#[test]
fn the_gang_schedulers_topology_names_reach_the_podgroup() {
    let dir = scratch("tuning", &[("trainjob.yaml", TRAINJOB), ("placement.yaml", PLACEMENT)]);
    let pl = dir.join("placement.yaml");
    let pl = pl.to_str().expect("utf-8");
    let podgroup = |extra: &[&str]| {
        let o = run(&dir, &[&["--placement", pl], extra].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let docs: Vec<serde_json::Value> =
            input_limits::yaml::documents(&String::from_utf8_lossy(&o.stdout)).expect("a YAML stream");
        docs.into_iter().find(|d| d["kind"] == "PodGroup").expect("a PodGroup")
    };
    let tier = |pg: serde_json::Value| pg["spec"]["networkTopology"]["highestTierAllowed"].as_i64();
    assert_eq!(tier(podgroup(&["--gang-scheduler", "volcano"])), Some(1), "a rack is tier 1 by default");
    assert_eq!(tier(podgroup(&["--gang-scheduler", "volcano", "--volcano-tiers", "Rack=2,block=3"])), Some(2));
    let kai = podgroup(&["--gang-scheduler", "kai", "--kai-topology", "gpu-topology"]);
    let constraint = &kai["spec"]["topologyConstraint"];
    assert_eq!(constraint["topology"], "gpu-topology");
    assert_eq!(constraint["requiredTopologyLevel"], "cloud.google.com/gce-topology-subblock");
    for (flag, value, words) in [
        ("--volcano-tiers", "rack=0", "a tier is a whole number from 1"),
        ("--volcano-tiers", "shelf=1", "shelf"),
        ("--volcano-tiers", "rack", "is not LEVEL=TIER"),
        ("--kai-topology", "Bad_Name", "not a Kubernetes object name"),
    ] {
        let o = run(&dir, &["--placement", pl, flag, value]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(flag) && err.contains(words), "{flag} {value}: {err}");
    }
}

#[test]
fn bad_input_names_the_file_and_field_and_exits_non_zero() {
    let cases = [
        (
            TRAINJOB.replace("numNodes: 2", "numNodes: 0"),
            "trainjob.yaml: spec.trainer.numNodes: Invalid value: 0: must be at least 1",
        ),
        (
            TRAINJOB.replace("numNodes: 2", "numNodes: two"),
            "trainjob.yaml:7: spec.trainer.numNodes: invalid type: expected i32, got \"two\"",
        ),
        // `numNode: 4` used to render 2 nodes silently; a member's API server refuses it.
        (
            TRAINJOB.replace("numNodes: 2", "numNode: 4"),
            "trainjob.yaml: spec.trainer.numNode: unknown field (did you mean numNodes?)",
        ),
        (
            TRAINJOB.replace(
                "metadata: {name: demo, namespace: ml}",
                "metadata: {name: demo, namespace: ml, labels: {a b: c}}",
            ),
            "trainjob.yaml: metadata.labels: Invalid value: \"a b\": name part must consist of",
        ),
        (
            TRAINJOB.replace("'8'", "'0.5'"),
            "trainjob.yaml: spec.trainer.resourcesPerNode.requests.nvidia.com/gpu: Invalid value: \"0.5\": must be an integer",
        ),
        (
            TRAINJOB.replace("name: demo,", &format!("name: {},", "d".repeat(50))),
            "trainjob.yaml: metadata.name: Invalid value: ",
        ),
        (
            TRAINJOB.replace("    numNodes: 2\n", "    numNodes: 2\n    env: [{name: A=B}]\n"),
            "trainjob.yaml: spec.trainer.env[0].name: Invalid value: \"A=B\"",
        ),
        (
            TRAINJOB.replace("trainer.kubeflow.org/v1alpha1", "trainer.kubeflow.org/v1"),
            "trainjob.yaml: apiVersion: expected trainer.kubeflow.org/v1alpha1",
        ),
        (
            TRAINJOB.replace(
                "runtimeRef: {name: torch-distributed}",
                "runtimeRef: {name: torch-distributed, kind: TrainingRuntime}",
            ),
            "trainjob.yaml: spec.runtimeRef: Invalid value: ",
        ),
        (TRAINJOB.replace("'8'", "'eight'"), "trainjob.yaml: spec.trainer.resourcesPerNode.requests.nvidia.com/gpu"),
        (
            TRAINJOB.replace("name: demo", "name: Demo"),
            "trainjob.yaml: metadata.name: Invalid value: \"Demo\": a lowercase RFC 1123 subdomain",
        ),
        ("spec: [unclosed".to_string(), "invalid YAML"),
    ];
    for (text, want) in cases {
        let dir = scratch("bad", &[("trainjob.yaml", &text)]);
        let o = run(&dir, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{want}: {err}");
        assert!(err.contains(want), "{err:?} should contain {want:?}");
        assert!(!err.contains("panicked"));
        assert!(o.stdout.is_empty(), "nothing printed on error");
    }
}

/// A billion laughs, a 1 MiB string used by many aliases, 100,000 levels of nesting: each is
/// refused by the YAML budget in well under a second, with the file and line, exit code 1 and
/// no panic (they used to expand to gigabytes or take quadratic time).
#[test]
fn hostile_yaml_is_refused_quickly_and_cleanly() {
    let mut laughs = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        laughs.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 10].join(", ")));
    }
    let big = format!("x: &big \"{}\"\ny: [{}]\n", "x".repeat(1 << 20), vec!["*big"; 100].join(", "));
    let deep = format!("spec: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let deep_block: String = (0..5_000).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
    for (what, text) in [("laughs", &laughs), ("big", &big), ("deep", &deep), ("deep block", &deep_block)] {
        let dir = scratch(what, &[("trainjob.yaml", text)]);
        let started = std::time::Instant::now();
        let o = run(&dir, &[]);
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("trainjob.yaml:") && err.contains("over the YAML budget"), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(took < std::time::Duration::from_secs(5), "{what}: {took:?}");
    }
}

#[test]
fn a_placement_for_a_missing_job_names_the_placement_file() {
    let dir = scratch(
        "pl",
        &[("trainjob.yaml", TRAINJOB), ("placement.yaml", &PLACEMENT.replace("name: node,", "name: worker,"))],
    );
    let pl = dir.join("placement.yaml");
    let o = run(&dir, &["--placement", pl.to_str().expect("utf-8")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("placement.yaml: spec.podSets[0].name"), "{err}");
}

#[test]
fn mpi_runtimes_get_a_real_ssh_key() {
    let dir = scratch("mpi", &[("trainjob.yaml", &TRAINJOB.replace("torch-distributed", "deepspeed-distributed"))]);
    let tj = dir.join("trainjob.yaml");
    let rt = format!("{RUNTIMES}/deepspeed_distributed.yaml");
    let o = stowage(&["render", "--trainjob", tj.to_str().expect("utf-8"), "--runtime", &rt]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("kind: Secret") && out.contains("ssh-privatekey"), "{out}");
    assert!(out.contains("demo-mpi-hostfile") && out.contains("slots=8"), "{out}");
}
