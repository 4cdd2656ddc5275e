//! Reading the objects `stowage render` takes from files: one YAML document each (within
//! `input_limits`' file size and YAML budget), of the expected apiVersion and kind, with no
//! field its CRD does not declare, and errors that name the file, the line where known, and
//! the field (`trainjob.yaml:7: spec.trainer.numNodes: ...`).

use std::path::Path;
use std::sync::OnceLock;

use api::stowage::Placement;
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use input_limits::yaml::{self, YamlError};
use kube_conventions::schema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{RenderError, Source};

/// The CRDs a member's API server checks these objects against (Trainer v2.3.0's, as the
/// playground's hub serves them): a field they do not declare is refused there, so here too.
static TRAINJOB_CRD: Crd = Crd::new(upstream::TRAINJOB_CRD.text);
static CLUSTER_RUNTIME_CRD: Crd = Crd::new(upstream::CLUSTER_TRAINING_RUNTIME_CRD.text);
static RUNTIME_CRD: Crd = Crd::new(upstream::TRAINING_RUNTIME_CRD.text);

/// A CRD's text and its schema, read once per process: each is hundreds of KB of YAML, and a
/// caller reading many manifests (or a fuzzer) would otherwise parse it for every one.
struct Crd {
    text: &'static str,
    schema: OnceLock<Result<Value, String>>,
}

impl Crd {
    const fn new(text: &'static str) -> Self {
        Self { text, schema: OnceLock::new() }
    }

    fn schema(&self) -> Result<&Value, &str> {
        self.schema.get_or_init(|| crd_schema(self.text).map_err(|e| e.to_string())).as_ref().map_err(String::as_str)
    }
}

/// `metadata`'s fields (ObjectMeta), which the API server checks whatever the CRD says.
const OBJECT_META: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{file}")]
    Io { file: String, source: std::io::Error },
    /// Not YAML, over the YAML budget, or not of the type's shape: the line and field where known.
    #[error("{}", yaml.in_file(file))]
    Yaml { file: String, yaml: YamlError },
    #[error("{file}: {path}: {problem}")]
    Field { file: String, path: String, problem: String },
}

impl ManifestError {
    /// A render error, attributed to the file its object came from.
    pub fn from_render(e: RenderError, trainjob: &str, runtime: &str, placement: &str) -> Self {
        let file = match e.object {
            Source::TrainJob => trainjob,
            Source::Runtime => runtime,
            Source::Placement => placement,
        };
        ManifestError::Field { file: file.into(), path: e.path, problem: e.problem }
    }
}

fn read(path: &Path) -> Result<(String, String), ManifestError> {
    let file = path.display().to_string();
    let text = input_limits::read_to_string(path, input_limits::YAML_FILE_BYTES)
        .map_err(|source| ManifestError::Io { file: file.clone(), source })?;
    Ok((text, file))
}

/// Checks apiVersion and kind, then (given its CRD) that every field is declared, then reads
/// the typed object; returns the kind found.
fn typed<T: DeserializeOwned>(
    text: &str,
    file: &str,
    api_version: &str,
    kinds: &[(&str, Option<&Crd>)],
) -> Result<(T, String), ManifestError> {
    let field = |path: &str, problem: String| ManifestError::Field { file: file.into(), path: path.into(), problem };
    let value: Value = yaml::from_str(text).map_err(|mut yaml| {
        if !yaml.is_over_budget() {
            yaml.problem = format!("invalid YAML: {}", yaml.problem);
        }
        ManifestError::Yaml { file: file.into(), yaml }
    })?;
    if !value.is_object() {
        let yaml =
            YamlError { line: None, field: String::new(), problem: "expected one object (a YAML mapping)".into() };
        return Err(ManifestError::Yaml { file: file.into(), yaml });
    }
    let got = value.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if got != api_version {
        return Err(field("apiVersion", format!("expected {api_version}, got {got:?}")));
    }
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    let Some((_, crd)) = kinds.iter().find(|(k, _)| *k == kind) else {
        let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
        return Err(field("kind", format!("expected {}, got {kind:?}", names.join(" or "))));
    };
    if let Some(crd) = crd {
        let schema = crd.schema().map_err(|e| field("kind", format!("the {kind} CRD does not read: {e}")))?;
        if let Some((path, suggestion)) = unknown_fields(schema, &value).into_iter().next() {
            let problem = match suggestion {
                Some(s) => format!("unknown field (did you mean {s}?)"),
                None => "unknown field".to_string(),
            };
            return Err(field(&path, problem));
        }
    }
    let obj = yaml::from_str(text).map_err(|yaml| ManifestError::Yaml { file: file.into(), yaml })?;
    Ok((obj, kind))
}

/// The served version's openAPIV3Schema of a CRD.
fn crd_schema(crd: &str) -> Result<Value, YamlError> {
    let crd: Value = yaml::from_str(crd)?;
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let served = versions.iter().find(|v| v["served"] == Value::Bool(true)).or(versions.first());
    Ok(served.and_then(|v| v.pointer("/schema/openAPIV3Schema")).cloned().unwrap_or(Value::Null))
}

/// Fields of `value` its schema does not declare, as `spec.trainer.numNode`, each with a
/// declared sibling it may be a misspelling of. As the API server's strict field validation
/// (the walk is [`kube_conventions::schema`]); the root's `metadata` is ObjectMeta.
fn unknown_fields(schema: &Value, value: &Value) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    if let Some(meta) = value.get("metadata").and_then(Value::as_object) {
        for k in meta.keys().filter(|k| !OBJECT_META.contains(&k.as_str())) {
            found.push((format!("metadata.{k}"), schema::nearest(k, OBJECT_META.iter().copied())));
        }
    }
    found.extend(schema::undeclared(schema, value).into_iter().map(|u| (u.to_string(), u.nearest)));
    found.sort();
    found
}

pub fn trainjob(path: &Path) -> Result<(TrainJob, String), ManifestError> {
    let (text, file) = read(path)?;
    Ok((typed(&text, &file, api::trainer::API_VERSION, &[("TrainJob", Some(&TRAINJOB_CRD))])?.0, file))
}

pub fn runtime(path: &Path) -> Result<(Runtime, String), ManifestError> {
    let (text, file) = read(path)?;
    let kinds = [("TrainingRuntime", Some(&RUNTIME_CRD)), ("ClusterTrainingRuntime", Some(&CLUSTER_RUNTIME_CRD))];
    // The kind first (without reading the CRDs), then the object against its own CRD.
    let shapes = kinds.map(|(k, _)| (k, None));
    let (_, kind): (Value, String) = typed(&text, &file, api::trainer::API_VERSION, &shapes)?;
    let rt = if kind == "TrainingRuntime" {
        Runtime::Namespaced(typed::<TrainingRuntime>(&text, &file, api::trainer::API_VERSION, &kinds)?.0)
    } else {
        Runtime::Cluster(typed::<ClusterTrainingRuntime>(&text, &file, api::trainer::API_VERSION, &kinds)?.0)
    };
    Ok((rt, file))
}

pub fn placement(path: &Path) -> Result<(Placement, String), ManifestError> {
    let (text, file) = read(path)?;
    let api_version = format!("{}/{}", api::stowage::GROUP, api::stowage::VERSION);
    Ok((typed(&text, &file, &api_version, &[("Placement", None)])?.0, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crds_read() {
        for crd in [&TRAINJOB_CRD, &RUNTIME_CRD, &CLUSTER_RUNTIME_CRD] {
            let schema = crd.schema().expect("reads");
            assert!(schema.pointer("/properties/spec/properties").is_some());
        }
    }

    #[test]
    fn unknown_fields_are_found_with_a_suggestion() {
        let schema = TRAINJOB_CRD.schema().expect("reads");
        let job = serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "a", "lables": {"x": "y"}},
            "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNode": 4, "env": [{"name": "A", "valu": "1"}]}},
            "extra": 1
        });
        assert_eq!(
            unknown_fields(schema, &job),
            [
                ("extra".to_string(), None),
                ("metadata.lables".to_string(), Some("labels".to_string())),
                ("spec.trainer.env[0].valu".to_string(), Some("value".to_string())),
                ("spec.trainer.numNode".to_string(), Some("numNodes".to_string())),
            ]
        );
    }
}
