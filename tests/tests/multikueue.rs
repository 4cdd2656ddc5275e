//! Stowage as MultiKueue's external dispatcher on the playground hub (`stowage dev --kueue
//! multikueue`), with a test double playing Kueue ([`stowage_tests::kueue`]): each Workload
//! Kueue reserved gets one member that fits its gang, written as Kueue's own admission manager
//! with its reservation intact; Kueue's admission then clears the nomination; eviction and a
//! lost member bring a new one; a Workload that fits nowhere gets none and an Event saying why.

use std::sync::Arc;
use std::time::{Duration, Instant};

use api::kueue::Workload;
use api::stowage::Placement;
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob};
use dispatcher::decide::KueueMode;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use stowage_tests::e2e::*;
use stowage_tests::kueue;

/// A TrainJob as a Kueue user submits it and Kueue's webhook leaves it: labelled with its
/// LocalQueue, suspended, managed by MultiKueue.
async fn kueue_trainjob(hub: &Client, name: &str, nodes: i64) -> (TrainJob, Workload) {
    let mut tj = trainjob(name, nodes, 60, json!({}));
    tj.metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), "team-a".to_string())].into());
    tj.spec.suspend = Some(true);
    tj.spec.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    let tj =
        Api::<TrainJob>::default_namespaced(hub.clone()).create(&PostParams::default(), &tj).await.expect("trainjob");
    let runtime = Api::<ClusterTrainingRuntime>::all(hub.clone()).get("torch-distributed").await.expect("runtime");
    let w = kueue::workload_for(&tj, &Runtime::Cluster(runtime)).expect("workload");
    let w = Api::<Workload>::default_namespaced(hub.clone()).create(&PostParams::default(), &w).await.expect("created");
    let w = kueue::reserve(hub, &w).await.expect("quota reserved");
    (tj, w)
}

/// Waits until the Workload's nomination is `test`ed true; returns the Workload.
async fn nominated(hub: &Client, name: &str, test: impl Fn(&[String]) -> bool) -> Workload {
    let api = Api::<Workload>::default_namespaced(hub.clone());
    eventually(&format!("{name} nominated"), || {
        let api = api.clone();
        let test = &test;
        async move {
            let w = api.get(name).await.ok()?;
            let n = w.status.as_ref()?.nominated_cluster_names.clone()?;
            test(&n).then_some(w)
        }
    })
    .await
}

fn nomination(w: &Workload) -> Vec<String> {
    w.status.as_ref().and_then(|s| s.nominated_cluster_names.clone()).unwrap_or_default()
}

#[tokio::test]
async fn stowage_nominates_one_member_per_workload_and_a_new_one_after_eviction_or_member_loss() {
    let mut options = fast();
    options.settings.kueue = KueueMode::MultiKueue;
    let mut p = playground(options).await;
    p.hub_server.store().lock().expect("store").add_validator(Arc::new(kueue::NominatedOnly));
    let hub = p.hub();
    let members: Vec<String> = p.members.iter().map(|m| m.name.clone()).collect();
    kueue::install(&hub, &members.iter().map(String::as_str).collect::<Vec<_>>()).await.expect("multikueue set-up");
    // The members' first reports: what the dispatcher nominates from.
    eventually("members reporting", || async {
        let ms = Api::<api::stowage::MemberCluster>::all(hub.clone()).list(&ListParams::default()).await.ok()?;
        ms.items.iter().all(|m| m.status.as_ref().is_some_and(|s| !s.domains.is_empty())).then_some(())
    })
    .await;

    let started = Instant::now();
    let (_, w) = kueue_trainjob(&hub, "mk", 4).await;
    let w = nominated(&hub, &w.name_any(), |n| !n.is_empty()).await;
    assert!(started.elapsed() < Duration::from_secs(2), "nominated after {:?}", started.elapsed());
    let first = nomination(&w);
    assert_eq!(first.len(), 1, "one cluster: {first:?}");
    // 4 nodes of 8 GPUs: not the 4-GPU member.
    assert!(["east-h100", "west-a100"].contains(&first[0].as_str()), "{first:?}");
    // Written as Kueue writes: its reservation intact, one manager for the admission status.
    let status = w.status.clone().expect("status");
    assert!(status.conditions.iter().any(|c| c.type_ == "QuotaReserved" && c.status == "True"), "{status:?}");
    assert!(status.extra.contains_key("admission"), "{status:?}");
    let managers: Vec<String> = w
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, vec!["kueue-admission".to_string()]);
    // Its TrainJob is Kueue's: Stowage places nothing for it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let placements =
        Api::<Placement>::default_namespaced(hub.clone()).list(&ListParams::default()).await.expect("list");
    assert!(placements.items.is_empty(), "{:?}", placements.items);

    // Kueue admits it there: its apply leaves the nomination out, and the API server drops it
    // (kueue-admission was its only manager); clusterName and nominations never coexist (CEL).
    let (cluster, w) = kueue::admit(&hub, &w).await.expect("admitted").expect("was nominated");
    assert_eq!(cluster, first[0]);
    let status = w.status.clone().expect("status");
    assert_eq!((status.cluster_name.as_deref(), status.nominated_cluster_names), (Some(cluster.as_str()), None));

    // Evicted and queued again: nominated afresh.
    let w = kueue::evict(&hub, &w, "Preempted").await.expect("evicted");
    assert_eq!(w.status.as_ref().and_then(|s| s.cluster_name.clone()), None);
    kueue::requeue(&hub, &w).await.expect("requeued");
    let w = nominated(&hub, &w.name_any(), |n| n.len() == 1).await;

    // Its member goes silent: the nomination moves to the other member that fits.
    let was = nomination(&w)[0].clone();
    p.stop_agent(&was);
    let other = if was == "east-h100" { "west-a100" } else { "east-h100" };
    nominated(&hub, &w.name_any(), |n| n == [other.to_string()]).await;
    p.start_agent(&was).expect("agent back");
}

#[tokio::test]
async fn a_workload_that_fits_nowhere_is_not_nominated_and_says_why_and_kueue_refuses_an_unnominated_cluster() {
    let mut options = fast();
    options.settings.kueue = KueueMode::MultiKueue;
    let p = playground(options).await;
    p.hub_server.store().lock().expect("store").add_validator(Arc::new(kueue::NominatedOnly));
    let hub = p.hub();
    let members: Vec<String> = p.members.iter().map(|m| m.name.clone()).collect();
    kueue::install(&hub, &members.iter().map(String::as_str).collect::<Vec<_>>()).await.expect("multikueue set-up");
    // 100 nodes of 8 GPUs: more than the fleet has.
    let (_, w) = kueue_trainjob(&hub, "huge", 100).await;
    let events = Api::<Event>::default_namespaced(hub.clone());
    let on = |kind: &'static str, name: String| {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.involved_object.kind.as_deref() == Some(kind) && e.involved_object.name.as_deref() == Some(&name)
            })
        }
    };
    let e = eventually("an Event on the Workload", || on("Workload", w.name_any())).await;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    let message = e.message.clone().unwrap_or_default();
    assert!(message.contains("GPU") || message.contains("node"), "{message}");
    let t = eventually("an Event on the TrainJob", || on("TrainJob", "huge".into())).await;
    assert_eq!((t.reason.as_deref(), t.message.as_deref()), (e.reason.as_deref(), Some(message.as_str())));
    let w = Api::<Workload>::default_namespaced(hub.clone()).get(&w.name_any()).await.expect("workload");
    assert!(nomination(&w).is_empty(), "{:?}", w.status);

    // Kueue's webhook: a clusterName never nominated is refused.
    let err = kueue::admit_on(&hub, &w, "east-h100").await.expect_err("not nominated");
    assert!(err.to_string().contains("must be one of the nominatedClusterNames"), "{err}");
}

/// A MultiKueueConfig naming only clusters that are no member: the Workload is told that, in those
/// words, not that a selector or a back-off excluded every cluster.
#[tokio::test]
async fn a_multikueue_config_naming_no_member_says_so_naming_the_config_and_its_clusters() {
    let mut options = fast();
    options.settings.kueue = KueueMode::MultiKueue;
    let p = playground(options).await;
    let hub = p.hub();
    kueue::install(&hub, &["nowhere-1", "nowhere-2"]).await.expect("multikueue set-up");
    let (_, w) = kueue_trainjob(&hub, "lost", 1).await;
    let events = Api::<Event>::default_namespaced(hub.clone());
    let e = eventually("an Event on the Workload", || {
        let events = events.clone();
        let name = w.name_any();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.involved_object.name.as_deref() == Some(&name) && e.reason.as_deref() == Some("NoMemberCluster")
            })
        }
    })
    .await;
    let message = e.message.unwrap_or_default();
    assert!(message.contains("MultiKueueConfig fleet names clusters (nowhere-1, nowhere-2)"), "{message}");
    assert!(!message.contains("cordoned"), "{message}");
}
