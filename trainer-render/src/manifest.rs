//! Reading the objects `stowage render` takes from files: one YAML document each, of the
//! expected apiVersion and kind, with errors that name the file and the field.

use std::path::Path;

use api::stowage::Placement;
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use serde::de::DeserializeOwned;

use crate::{RenderError, Source};

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{file}")]
    Io { file: String, source: std::io::Error },
    /// Not YAML, or not of the type's shape: serde_yaml names the field, line and column.
    #[error("{file}: {message}")]
    Yaml { file: String, message: String },
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
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Io { file: file.clone(), source })?;
    Ok((text, file))
}

/// Checks apiVersion and kind, then reads the typed object; returns the kind found.
fn typed<T: DeserializeOwned>(
    text: &str,
    file: &str,
    api_version: &str,
    kinds: &[&str],
) -> Result<(T, String), ManifestError> {
    let yaml = |message: String| ManifestError::Yaml { file: file.into(), message };
    let field = |path: &str, problem: String| ManifestError::Field { file: file.into(), path: path.into(), problem };
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| yaml(format!("invalid YAML: {e}")))?;
    if !value.is_mapping() {
        return Err(yaml("expected one object (a YAML mapping)".into()));
    }
    let got = value.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
    if got != api_version {
        return Err(field("apiVersion", format!("expected {api_version}, got {got:?}")));
    }
    let kind = value.get("kind").and_then(|v| v.as_str()).unwrap_or("").to_string();
    if !kinds.contains(&kind.as_str()) {
        return Err(field("kind", format!("expected {}, got {kind:?}", kinds.join(" or "))));
    }
    let obj = serde_yaml::from_str(text).map_err(|e| yaml(e.to_string()))?;
    Ok((obj, kind))
}

pub fn trainjob(path: &Path) -> Result<(TrainJob, String), ManifestError> {
    let (text, file) = read(path)?;
    Ok((typed(&text, &file, api::trainer::API_VERSION, &["TrainJob"])?.0, file))
}

pub fn runtime(path: &Path) -> Result<(Runtime, String), ManifestError> {
    let (text, file) = read(path)?;
    let kinds = ["TrainingRuntime", "ClusterTrainingRuntime"];
    let (_, kind): (serde_yaml::Value, String) = typed(&text, &file, api::trainer::API_VERSION, &kinds)?;
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
    Ok((typed(&text, &file, &api_version, &["Placement"])?.0, file))
}
