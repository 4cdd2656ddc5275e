//! The end-to-end suite's shared helpers ([`e2e`]) and the double that plays Kueue ([`kueue`]): Stowage's hub and members driven through
//! kube-rs, kubectl and the Kubeflow SDK, on the in-process playground or on real clusters.
//! Nothing links this crate but its own tests: the in-memory API server is `kube-mem`, the
//! simulated members and `stowage dev` are `playground`.

pub mod e2e;
pub mod kueue;
