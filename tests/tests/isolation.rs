//! Tenant isolation and data safety, end to end on the playground: what an attacker or a careless
//! user tried (issue 38) — a TrainJob named like someone else's JobSet, a queue relabelled on a
//! running TrainJob, a Placement deleted by hand — and what must hold: nothing of anyone else's
//! is changed or deleted, no quota is escaped, epochs never go backwards.

use std::time::Duration;

use api::stowage::Placement;
use api::trainer::TrainJob;
use k8s_openapi::api::core::v1::Event;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;
use stowage_tests::e2e::*;

fn jobsets() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"), "jobsets")
}

/// Someone else's JobSet, made on a member directly: no Stowage labels.
fn foreign_jobset(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "someone-else"}},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}}}}]}
    }))
    .expect("a JobSet")
}

#[tokio::test]
async fn a_trainjob_named_like_someone_elses_jobset_neither_changes_nor_deletes_it_and_says_whose_name_it_is() {
    let p = playground(fast()).await;
    let hub = p.hub();
    // Every member has a JobSet of that name that Stowage did not make.
    for m in &p.members {
        let member = m.sim.server.client_as("admin").expect("member client");
        Api::<DynamicObject>::namespaced_with(member, "default", &jobsets())
            .create(&PostParams::default(), &foreign_jobset("taken"))
            .await
            .expect("someone else's JobSet");
    }
    submit(&hub, &trainjob("taken", 1, 1, json!({}))).await;
    // The user is told which object holds the name, and on which member.
    let events: Api<Event> = Api::default_namespaced(hub.clone());
    let said = eventually("an Event naming the conflict", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some("taken"))
                .find_map(|e| e.message.filter(|m| m.contains("NameTaken")))
        }
    })
    .await;
    assert!(said.contains("JobSet default/taken already exists on the member"), "{said}");
    // Nothing of the other owner's was touched: no Stowage label, no new manager.
    let check_untouched = || async {
        for m in &p.members {
            let member = m.sim.server.client_as("admin").expect("member client");
            let js = Api::<DynamicObject>::namespaced_with(member, "default", &jobsets()).get("taken").await;
            let js = js.unwrap_or_else(|e| panic!("{}: someone else's JobSet is gone: {e}", m.name));
            let labels = js.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels.len(), 1, "{}: labels changed: {labels:?}", m.name);
            let managers: Vec<String> =
                js.metadata.managed_fields.iter().flatten().filter_map(|f| f.manager.clone()).collect();
            assert!(!managers.iter().any(|m| m.contains("stowage")), "{}: applied over by {managers:?}", m.name);
        }
    };
    check_untouched().await;
    // Deleting the TrainJob deletes nothing of theirs.
    Api::<TrainJob>::default_namespaced(hub.clone()).delete("taken", &DeleteParams::default()).await.expect("delete");
    tokio::time::sleep(Duration::from_secs(2)).await;
    check_untouched().await;
}

#[tokio::test]
async fn a_running_trainjobs_queue_cannot_be_relabelled_and_a_suspended_one_can() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let quota = "spec:\n  quotas:\n  - {flavor: nvidia-h100-80gb, resource: nvidia.com/gpu, nominalQuota: '64'}\n";
    create_queue(&hub, &format!("metadata: {{name: team-a}}\n{quota}")).await;
    create_queue(&hub, &format!("metadata: {{name: team-b}}\n{quota}")).await;
    let api: Api<TrainJob> = Api::default_namespaced(hub.clone());
    let mut greedy = trainjob("greedy", 2, 600, json!({"stowage.dev/gpu-flavor": "nvidia-h100-80gb"}));
    greedy.metadata.labels = Some([("stowage.dev/queue".to_string(), "team-a".to_string())].into());
    submit(&hub, &greedy).await;
    let first = placement(&hub, "greedy", running).await;
    assert_eq!(first.spec.queue.as_deref(), Some("team-a"));
    let relabel = |queue: &str| json!({"metadata": {"labels": {"stowage.dev/queue": queue}}});
    let refused =
        api.patch("greedy", &PatchParams::default(), &Patch::Merge(relabel("team-b"))).await.expect_err("refused");
    let text = refused.to_string();
    assert!(
        text.contains("metadata.labels[stowage.dev/queue]") && text.contains("not suspended"),
        "the refusal names the field: {text}"
    );
    // Suspended, it may move: withdrawn from its member, its charge gone with it.
    api.patch("greedy", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}})))
        .await
        .expect("suspend");
    placement(&hub, "greedy", |p| p.spec.cluster.is_none()).await;
    api.patch("greedy", &PatchParams::default(), &Patch::Merge(relabel("team-b"))).await.expect("relabel suspended");
    let tj = api.get("greedy").await.expect("greedy");
    assert_eq!(tj.metadata.labels.unwrap_or_default().get("stowage.dev/queue").map(String::as_str), Some("team-b"));
}

#[tokio::test]
async fn a_placement_deleted_by_hand_is_made_again_at_a_higher_epoch_never_a_lower_one() {
    let p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("kept", 2, 600, json!({}))).await;
    let first = placement(&hub, "kept", running).await;
    let placements: Api<Placement> = Api::default_namespaced(hub.clone());
    placements.delete("kept", &DeleteParams::default()).await.expect("delete the Placement");
    let again = placement(&hub, "kept", |p| p.metadata.uid != first.metadata.uid && p.spec.cluster.is_some()).await;
    assert!(
        again.spec.epoch > first.spec.epoch,
        "epoch {} after {}: it went backwards",
        again.spec.epoch,
        first.spec.epoch
    );
    placement(&hub, "kept", running).await;
}

#[tokio::test]
async fn a_trainjob_deleted_and_made_again_at_once_runs_afresh_over_what_the_first_left() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let monitor = p.watch_for_duplicates();
    submit(&hub, &trainjob("again", 2, 600, json!({}))).await;
    let first = placement(&hub, "again", running).await;
    let api: Api<TrainJob> = Api::default_namespaced(hub.clone());
    api.delete("again", &DeleteParams::default()).await.expect("delete");
    // At once: the first one's JobSet may still be on its member.
    eventually("the first TrainJob gone", || async { api.get_opt("again").await.ok()?.is_none().then_some(()) }).await;
    submit(&hub, &trainjob("again", 2, 1, json!({}))).await;
    condition(&hub, "again", "Complete", "True").await;
    let second = placement(&hub, "again", |p| p.spec.cluster.is_some()).await;
    assert_ne!(second.spec.train_job_uid, first.spec.train_job_uid);
    assert_eq!(monitor.duplicates(), Vec::new());
}
