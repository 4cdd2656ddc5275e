//! Rust types for every object Stowage reads or writes: Kubeflow Trainer's TrainJob,
//! TrainingRuntime and ClusterTrainingRuntime (v2.3.0), JobSet (v1alpha2, jobset v0.12.0), the
//! PodGroups of scheduler-plugins, Volcano and KAI, the Kueue Workload fields we use, and our own
//! CRDs (MemberCluster, Queue, Placement) with CRD generation; and the vocabulary every crate
//! shares: resource quantities ([`quantity`]). Types only: no client, no logic beyond
//! (de)serialisation, defaults and quantities (strategic merge is `kube_conventions::patch`).
//!
//! Upstream objects keep fields this crate does not model in `extra` maps (flattened), so a
//! read-modify-write through these types loses nothing outside pod templates; pod templates are
//! k8s-openapi's (Kubernetes 1.33 API), which know every field of that release.

pub mod conditions;
pub mod jobset;
pub mod kueue;
pub mod podgroup;
pub mod quantity;
pub mod stowage;
pub mod trainer;

/// Fields an upstream type does not model, kept verbatim.
pub type Extra = std::collections::BTreeMap<String, serde_json::Value>;
