//! The end-to-end checks that need nothing but kubeconfigs, so the same suite runs on real
//! clusters. By default it runs on the in-process playground, reached only through the
//! kubeconfig files it writes (as `stowage dev` does); docs/testing.md says how to point it at
//! real clusters:
//!
//! ```sh
//! STOWAGE_E2E_HUB_KUBECONFIG=hub.kubeconfig STOWAGE_E2E_MEMBERS=east=east.kubeconfig,west=west.kubeconfig \
//!   cargo test -p stowage-tests --test e2e_kubeconfig
//! ```
//!
//! Names carry a per-run suffix, so a shared hub can run the suite again; every TrainJob it made
//! is deleted when its test passes.

use api::stowage::{MemberCluster, Placement};
use api::trainer::TrainJob;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use stowage_tests::e2e::{Target, condition, eventually, pending_because, placement, submit, trainjob};

/// A name unique to this run.
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{name}-{:x}", (std::process::id() ^ nanos) & 0xfffff)
}

async fn delete(hub: &Client, names: &[&str]) {
    let api: Api<TrainJob> = Api::default_namespaced(hub.clone());
    for n in names {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
}

/// A JobSet's pods on a member.
async fn pods_of(member: &Client, jobset: &str) -> Vec<Pod> {
    let selector = format!("jobset.sigs.k8s.io/jobset-name={jobset}");
    let pods = Api::<Pod>::default_namespaced(member.clone()).list(&ListParams::default().labels(&selector)).await;
    pods.expect("member pods").items
}

#[tokio::test]
async fn a_trainjob_that_requires_a_rack_runs_on_one_rack_of_one_member_and_completes() {
    let t = Target::from_env().await;
    let name = unique("rack");
    submit(&t.hub, &trainjob(&name, 4, 2, json!({"stowage.dev/topology": "required:rack"}))).await;
    let done = condition(&t.hub, &name, "Complete", "True").await;
    assert_eq!(done.reason, "AllJobsCompleted");

    // The Placement pinned it to a rack of one member ...
    let p: Placement = placement(&t.hub, &name, |p| p.spec.cluster.is_some()).await;
    let cluster = p.spec.cluster.clone().expect("placed");
    let domain = p.spec.pod_sets[0].domain.clone().expect("pinned to a domain");
    assert_eq!(domain.level, "rack");
    // ... and the member's own API shows every pod on a node of that rack.
    let member = t.members.get(&cluster).unwrap_or_else(|| panic!("no kubeconfig for member {cluster}"));
    let pods = pods_of(member, &name).await;
    assert_eq!(pods.len(), 4, "one pod per node");
    let nodes: Api<Node> = Api::all(member.clone());
    for pod in pods {
        let node_name = pod.spec.and_then(|s| s.node_name).expect("bound");
        let node = nodes.get(&node_name).await.expect("node");
        let label = node.metadata.labels.unwrap_or_default().get(&domain.node_label).cloned();
        assert_eq!(label.as_deref(), Some(domain.value.as_str()), "pod on {node_name}, outside the rack");
    }
    // Its log reads the same from the hub (its pod copy, through the log relay) as on the member.
    // Node 0's pod, found by its labels: the Job controller names pods with a random suffix
    // (`<job>-<index>-<random>`), which the simulated members leave out.
    let node0 = pods_of(member, &name)
        .await
        .into_iter()
        .find(|p| p.labels().get("batch.kubernetes.io/job-completion-index").map(String::as_str) == Some("0"))
        .expect("node 0's pod");
    let pod = node0.name_any();
    let params = LogParams { container: Some("node".into()), ..Default::default() };
    let on_member = Api::<Pod>::default_namespaced(member.clone()).logs(&pod, &params).await.expect("member log");
    let on_hub = Api::<Pod>::default_namespaced(t.hub.clone()).logs(&pod, &params).await.expect("hub log");
    assert_eq!(on_hub, on_member);
    assert!(!on_hub.is_empty(), "the container writes a line");
    delete(&t.hub, &[&name]).await;
}

/// A TrainJob training on CPUs alone holds no GPU room. Its member reports it counted and in
/// `bound`, with no nodes, so the hub knows where it runs (what `simulate --from` projects its
/// end from, what preemption reads); it completes.
/// The hub stores no object larger than etcd takes: a MemberCluster status just under
/// `input_limits::MAX_OBJECT_BYTES` (what the in-memory hub stores at most, and what an agent's
/// report is kept under) is stored, and one of 1.7 MB is refused, on either hub. On a real one
/// this checks that the in-memory hub's limit is no larger than the real limit.
#[tokio::test]
async fn the_hub_stores_a_status_just_under_the_object_limit_and_refuses_one_over_what_etcd_takes() {
    let t = Target::from_env().await;
    let name = unique("sized");
    let api: Api<MemberCluster> = Api::all(t.hub.clone());
    api.create(&PostParams::default(), &MemberCluster::new(&name, Default::default())).await.expect("created");
    // Placement keys of 38 characters, 41 bytes each in a JSON list.
    let counted = |bytes: usize| -> Vec<String> {
        (0..bytes / 41).map(|i| format!("{i:08x}-0000-4000-8000-{i:012x}/1")).collect()
    };
    let write = |bytes| {
        let patch = json!({"status": {"counted": counted(bytes)}});
        let api = api.clone();
        let name = name.clone();
        async move { api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await }
    };
    let under = write(input_limits::MAX_OBJECT_BYTES - 8 * 1024).await;
    let over = write(1_700_000).await;
    let stored = api.get(&name).await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    let under = under.expect("a status just under MAX_OBJECT_BYTES is stored");
    let size = serde_json::to_vec(&under).expect("json").len();
    assert!(size > input_limits::MAX_OBJECT_BYTES - 16 * 1024, "the object came to {size} bytes");
    match over {
        Err(kube::Error::Api(e)) => assert!(e.message.contains("request is too large"), "{e:?}"),
        other => panic!("a 1.7 MB status must be refused: {:?}", other.map(|m| m.name_any())),
    }
    let kept = stored.expect("read back").status.expect("status").counted.len();
    assert_eq!(kept, (input_limits::MAX_OBJECT_BYTES - 8 * 1024) / 41, "the refused write changed nothing");
}

#[tokio::test]
async fn a_trainjob_training_on_cpus_is_reported_bound_by_its_member_and_completes() {
    let t = Target::from_env().await;
    let name = unique("cpu");
    let mut tj = serde_json::to_value(trainjob(&name, 2, 10, json!({}))).expect("json");
    tj["spec"]["trainer"]["resourcesPerNode"] = json!({"requests": {"cpu": "1"}});
    submit(&t.hub, &serde_json::from_value(tj).expect("trainjob")).await;
    let p: Placement = placement(&t.hub, &name, |p| p.spec.cluster.is_some()).await;
    let cluster = p.spec.cluster.clone().expect("placed");
    let key = api::stowage::PlacementKey::of(&p).to_string();
    let members: Api<MemberCluster> = Api::all(t.hub.clone());
    let nodes = eventually(&format!("{cluster} reporting {key} bound"), || {
        let (members, cluster, key) = (members.clone(), cluster.clone(), key.clone());
        async move {
            let status = members.get(&cluster).await.ok()?.status?;
            let counted = status.counted.contains(&key);
            status.bound.into_iter().find(|b| b.placement == key).filter(|_| counted).map(|b| b.nodes)
        }
    })
    .await;
    assert!(nodes.is_empty(), "it holds no GPU node: {nodes:?}");
    let done = condition(&t.hub, &name, "Complete", "True").await;
    assert_eq!(done.reason, "AllJobsCompleted");
    delete(&t.hub, &[&name]).await;
}

#[tokio::test]
async fn a_malformed_trainjob_is_refused_naming_the_field_and_does_not_hold_up_the_next() {
    let t = Target::from_env().await;
    let (broken, fine) = (unique("broken"), unique("fine"));
    let api: kube::Api<api::trainer::TrainJob> = kube::Api::default_namespaced(t.hub.clone());
    match api.create(&Default::default(), &trainjob(&broken, 0, 1, json!({}))).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.ends_with("denied the request: spec.trainer.numNodes: Invalid value: 0: must be at least 1"),
                "{}",
                s.message
            );
        }
        other => panic!("a TrainJob of 0 nodes was admitted: {other:?}"),
    }
    submit(&t.hub, &trainjob(&fine, 1, 1, json!({}))).await;
    condition(&t.hub, &fine, "Complete", "True").await;
    delete(&t.hub, &[&fine]).await;
}

#[tokio::test]
async fn a_trainjob_too_big_for_any_member_stays_pending_and_says_so() {
    let t = Target::from_env().await;
    let name = unique("huge");
    submit(&t.hub, &trainjob(&name, 10_000, 1, json!({}))).await;
    let pending = pending_because(&t.hub, &name, "NeverFits").await;
    assert!(pending.message.contains("10000"), "the message names the gang's size: {}", pending.message);
    delete(&t.hub, &[&name]).await;
}
