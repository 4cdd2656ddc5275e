//! The API types against real objects: every upstream runtime reads, and writing it back loses
//! nothing; unknown fields survive a read-modify-write; our CRDs match `manifests/crds/`.

use std::path::{Path, PathBuf};

use api::trainer::{ClusterTrainingRuntime, TrainJob};

const RUNTIMES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/runtimes");

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("runtimes dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

/// Drops nulls and empty maps, which serialising through typed structs may add or omit without
/// meaning anything different, and writes quantities (`limits: {gpu: 2}`) as the strings
/// Kubernetes' Quantity type serialises them as.
fn normalise(v: serde_json::Value) -> serde_json::Value {
    normalise_in(v, false)
}

fn normalise_in(v: serde_json::Value, quantities: bool) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| match v {
                    // A quantity map's values.
                    Value::Number(n) if quantities => (k, Value::String(n.to_string())),
                    v => {
                        let q = matches!(k.as_str(), "limits" | "requests");
                        (k, normalise_in(v, q))
                    }
                })
                .filter(|(_, v)| !(v.is_null() || v.as_object().is_some_and(|o| o.is_empty())))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(|v| normalise_in(v, false)).collect()),
        other => other,
    }
}

#[test]
fn every_upstream_runtime_round_trips_without_loss() {
    let mut files = Vec::new();
    yaml_files(Path::new(RUNTIMES), &mut files);
    files.sort();
    assert!(files.len() >= 9, "found {files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        let raw: serde_json::Value = input_limits::yaml::from_str(&text).expect("yaml");
        let typed: ClusterTrainingRuntime =
            input_limits::yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let back = serde_json::to_value(&typed).expect("serialise");
        assert_eq!(normalise(back), normalise(raw), "{}", f.display());
    }
}

#[test]
fn unknown_fields_survive_a_read_modify_write() {
    let text = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: t, namespace: ns}
spec:
  runtimeRef: {name: torch-distributed}
  futureField: {keep: me}
  trainer:
    numNodes: 2
    someNewKnob: 7
  initializer:
    dataset: {storageUri: "hf://x", newOption: true}
status:
  conditions: []
  trainerStatus: {progressPercentage: 40, lastUpdatedTime: "2026-01-01T00:00:00Z"}
"#;
    let mut tj: TrainJob = input_limits::yaml::from_str(text).expect("reads");
    tj.spec.suspend = Some(true);
    let v = serde_json::to_value(&tj).expect("writes");
    assert_eq!(v["spec"]["futureField"]["keep"], "me");
    assert_eq!(v["spec"]["trainer"]["someNewKnob"], 7);
    assert_eq!(v["spec"]["initializer"]["dataset"]["newOption"], true);
    assert_eq!(v["status"]["trainerStatus"]["progressPercentage"], 40);
    assert_eq!(v["spec"]["suspend"], true);
}

#[test]
fn generated_crds_match_manifests() {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/crds"));
    for (name, yaml) in api::stowage::crds() {
        let on_disk = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
        assert!(on_disk == yaml, "manifests/crds/{name} is stale: run `cargo run -p api --bin crdgen`");
    }
}

#[test]
fn our_crds_are_valid_json_schemas_that_accept_an_example() {
    let crds = api::stowage::crds();
    let (_, yaml) = crds.iter().find(|(n, _)| n.starts_with("placements")).expect("placement crd");
    let crd: serde_json::Value = input_limits::yaml::from_str(yaml).expect("yaml");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let validator = jsonschema::validator_for(schema).expect("valid schema");
    let good = serde_json::json!({
        "apiVersion": "stowage.dev/v1alpha1", "kind": "Placement", "metadata": {"name": "t"},
        "spec": {"trainJobUid": "u", "cluster": "east", "epoch": 1,
                 "podSets": [{"name": "node", "count": 4, "required": true,
                              "domain": {"level": "rack", "nodeLabel": "r", "value": "b0-r1"}}]}
    });
    assert!(validator.is_valid(&good));
    let bad = serde_json::json!({"spec": {"trainJobUid": "u", "cluster": "east", "epoch": "one", "podSets": []}});
    assert!(!validator.is_valid(&bad));
}
