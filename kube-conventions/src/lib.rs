//! Kubernetes conventions on plain JSON (`serde_json::Value`), written once for every crate that
//! needs them: the hub's in-memory API server (`kube-mem`), the renderer of Trainer's
//! `runtimePatches` (`trainer-render`). No Stowage type and no Kubernetes client: serde_json
//! alone, at the bottom of the crate graph.
//!
//! - [`patch`]: strategic merge patch, with the merge keys Kubernetes' own types declare;
//! - [`gojson`]: JSON as Go's `encoding/json` writes it (compact, escaped as Go escapes);
//! - [`names`]: object name, label key and label value syntax, with Kubernetes' messages;
//! - [`schema`]: which fields a CRD's structural schema declares (what is pruned or refused).

pub mod gojson;
pub mod names;
pub mod patch;
pub mod schema;
