//! Test support for Stowage: an in-memory Kubernetes API server served over HTTP on loopback
//! ([`apiserver`]), which the end-to-end tests and the `stowage dev` playground run the real
//! controllers against, through kube-rs, kubectl and the Kubeflow SDK. Production runs against
//! real clusters; docs/testing.md says what this server implements and what it does not.

pub mod apiserver;
pub mod member;
