//! The member's virtual Node kept alive on the hub by a Lease, renewed apart from the rounds, as
//! the kubelet keeps its Node's: the hub's node lifecycle controller takes a Lease renewal as the
//! node's heartbeat. The Node's status alone, written by a round, is not enough: a round in a
//! burst writes hundreds of statuses and copies and can outlast the controller's grace period
//! (50 s), and the node then turned NotReady and the controller marked every copy on it NotReady,
//! which the next round wrote back: two writes per pod copy, and a hub showing running pods as
//! not ready (found on the real testbed, docs/performance.md).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use api::stowage::CLUSTER_LABEL;

use crate::config::FIELD_MANAGER;
use crate::mirror::node_name;

/// Where Kubernetes keeps its nodes' Leases (kube-apiserver makes it at start).
pub const NAMESPACE: &str = "kube-node-lease";

/// How many renewals a Lease lasts: the kubelet renews every quarter of its 40 s.
const RENEWALS_PER_LEASE: u32 = 4;

/// The Lease of member `cluster`'s virtual Node, held since `since` (when this agent started
/// reporting) and renewed `now`, lasting four renewal intervals. Named as the Node and labelled
/// with its member, as the hub's status-writers policy asks of an agent's Lease.
pub fn node_lease(cluster: &str, since: Timestamp, now: Timestamp, every: Duration) -> Lease {
    let name = node_name(cluster);
    let seconds = every.saturating_mul(RENEWALS_PER_LEASE).as_secs().max(1);
    Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(NAMESPACE.into()),
            labels: Some([(CLUSTER_LABEL.to_string(), cluster.to_string())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name),
            lease_duration_seconds: Some(i32::try_from(seconds).unwrap_or(i32::MAX)),
            acquire_time: Some(MicroTime(since)),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Renews the Lease every `every` until dropped, each renewal bounded by `every`. A failure is
/// said once, when renewals start failing, and once more when they work again: the agent's
/// probe and hub-lost clock, not this, decide what a lost hub means.
pub(crate) async fn keep(hub: Client, cluster: String, since: Timestamp, every: Duration) {
    let api = Api::<Lease>::namespaced(hub, NAMESPACE);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut failing = false;
    loop {
        let lease = node_lease(&cluster, since, Timestamp::now(), every);
        let name = node_name(&cluster);
        let renewed = tokio::time::timeout(every, api.patch(&name, &params, &Patch::Apply(&lease))).await;
        match renewed {
            Ok(Ok(_)) if failing => {
                failing = false;
                tracing::info!(%cluster, lease = %format!("{NAMESPACE}/{name}"), "the virtual Node's Lease is renewed again");
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) if !failing => {
                failing = true;
                tracing::warn!(%cluster, lease = %format!("{NAMESPACE}/{name}"), error = %kube_shell::error_chain(&e), "renewing the virtual Node's Lease failed");
            }
            Err(_) if !failing => {
                failing = true;
                tracing::warn!(%cluster, lease = %format!("{NAMESPACE}/{name}"), "renewing the virtual Node's Lease timed out");
            }
            Ok(Err(_)) | Err(_) => {}
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_the_nodes_lasts_four_renewals_and_says_since_when_it_is_held() {
        let since: Timestamp = "2026-12-03T11:00:00Z".parse().expect("time");
        let now: Timestamp = "2026-12-03T11:05:00.250Z".parse().expect("time");
        let lease = node_lease("east-h100", since, now, Duration::from_secs(10));
        assert_eq!(lease.metadata.name.as_deref(), Some("stowage-east-h100"));
        assert_eq!(lease.metadata.namespace.as_deref(), Some(NAMESPACE));
        assert_eq!(
            lease.metadata.labels.as_ref().and_then(|l| l.get(CLUSTER_LABEL)).map(String::as_str),
            Some("east-h100")
        );
        let spec = lease.spec.expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("stowage-east-h100"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(spec.acquire_time, Some(MicroTime(since)));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        // A sub-second renewal (tests, the playground) still lasts a whole second.
        let short = node_lease("east-h100", since, now, Duration::from_millis(100)).spec.expect("spec");
        assert_eq!(short.lease_duration_seconds, Some(1));
    }
}
