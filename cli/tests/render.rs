//! `stowage render` as a user runs it: a YAML stream on success, a field-naming error on bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

const RUNTIMES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/runtimes");

fn stowage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stowage")).args(args).output().expect("runs")
}

fn scratch(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stowage-render-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
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
    resourcesPerNode: {requests: {nvidia.com/gpu: '8'}}
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
    let docs: Vec<serde_yaml::Value> = out
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_yaml::from_str(d).expect("yaml doc"))
        .collect();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["JobSet", "PodGroup"]);
    assert!(out.contains("h100-b0-r1") && out.contains("stowage.dev/placement-epoch"), "{out}");
    assert_eq!(docs[1]["spec"]["minMember"].as_i64(), Some(2));
}

#[test]
fn bad_input_names_the_file_and_field_and_exits_non_zero() {
    let cases = [
        (
            TRAINJOB.replace("numNodes: 2", "numNodes: 0"),
            "trainjob.yaml: spec.trainer.numNodes: Invalid value: 0: must be at least 1",
        ),
        (TRAINJOB.replace("numNodes: 2", "numNodes: two"), "spec.trainer.numNodes: invalid type"),
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
