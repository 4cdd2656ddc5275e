//! Test support for Stowage: an in-memory Kubernetes API server served over HTTP on loopback
//! ([`apiserver`]), simulated member clusters ([`member`]) and the whole product wired together
//! on them ([`playground`]), which the end-to-end tests and `stowage dev` run the real
//! controllers in, driven through kube-rs, kubectl and the Kubeflow SDK. Production runs against
//! real clusters; docs/testing.md says what this server implements and what it does not.

pub mod apiserver;
pub mod e2e;
pub mod member;
pub mod playground;
