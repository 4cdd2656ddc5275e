//! The product end to end, in one process over real HTTP: a hub with the dispatcher, three
//! simulated members with their agents (the `stowage dev` playground), and the faults real
//! fleets have — a member cut off from the hub, a dispatcher killed mid-cycle, an agent
//! restarted, a hub answering 500 and 429. docs/testing.md says how to run the same checks
//! against real clusters.

use std::collections::BTreeMap;
use std::time::Duration;

use api::stowage::{Placement, PlacementPhase};
use api::trainer::TrainJob;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use playground::{Playground, PlaygroundOptions, SYSTEM_NAMESPACE};
use serde_json::json;
use stowage_tests::e2e::*;

#[tokio::test]
async fn trainjobs_spread_over_members_and_a_rack_gang_runs_inside_one_rack() {
    let p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("llm", 8, 2, json!({"stowage.dev/topology": "required:rack"}))).await;
    let names: Vec<String> = (0..5).map(|i| format!("wide-{i}")).collect();
    for n in &names {
        submit(&hub, &trainjob(n, 16, 2, json!({}))).await;
    }
    all_complete(&hub, &names).await;
    let done = condition(&hub, "llm", "Complete", "True").await;
    assert_eq!((done.reason.as_str(), done.message.as_str()), ("AllJobsCompleted", "jobset completed successfully"));
    let tj = Api::<TrainJob>::default_namespaced(hub.clone()).get("llm").await.expect("trainjob");
    assert_eq!(tj.status.expect("status").jobs_status.iter().map(|j| j.succeeded).sum::<i32>(), 1);

    let placements =
        Api::<Placement>::default_namespaced(hub.clone()).list(&ListParams::default()).await.expect("list");
    let clusters: std::collections::BTreeSet<String> =
        placements.items.iter().filter_map(|p| p.spec.cluster.clone()).collect();
    assert!(clusters.len() >= 2, "96 nodes of work on a 64-node largest member used one member: {clusters:?}");

    let llm = placements.items.iter().find(|p| p.metadata.name.as_deref() == Some("llm")).expect("placement");
    let domain = llm.spec.pod_sets[0].domain.clone().expect("pinned");
    assert_eq!(domain.level, "rack");
    let member = p.member(llm.spec.cluster.as_deref().expect("placed")).expect("member");
    let store = member.sim.server.store().lock().expect("store");
    let pods_rt = store.lookup("", "v1", "pods").expect("pods").clone();
    let nodes_rt = store.lookup("", "v1", "nodes").expect("nodes").clone();
    let pods = store
        .list(
            &pods_rt,
            Some("default"),
            &|o| o["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "llm",
            None,
            None,
        )
        .0;
    assert_eq!(pods.len(), 8);
    for pod in pods {
        let node = store.get(&nodes_rt, None, pod["spec"]["nodeName"].as_str().expect("bound")).expect("node");
        assert_eq!(node["metadata"]["labels"][&domain.node_label], domain.value.as_str());
    }
}

#[tokio::test]
async fn a_deepspeed_trainjob_under_coscheduling_starts_its_launcher_after_its_workers_and_completes() {
    // The launcher waits for the workers (`dependsOn: node Ready`): a PodGroup counting it, as
    // Trainer's does, would hold the workers forever.
    let p = playground(fast()).await;
    let hub = p.hub();
    let mut tj = trainjob("deepspeed", 3, 2, json!({}));
    tj.spec.runtime_ref.name = "deepspeed-distributed".into();
    submit(&hub, &tj).await;
    let done = condition(&hub, "deepspeed", "Complete", "True").await;
    assert_eq!(done.reason, "AllJobsCompleted");
    let placed = placement(&hub, "deepspeed", |p| p.spec.cluster.is_some()).await;
    let member = p.member(placed.spec.cluster.as_deref().expect("placed")).expect("member");
    let store = member.sim.server.store().lock().expect("store");
    let rt = store.lookup("scheduling.x-k8s.io", "v1alpha1", "podgroups").expect("coscheduling CRD").clone();
    let pg = store.get(&rt, Some("default"), "deepspeed").expect("the PodGroup");
    // The node job's 2 pods (the launcher is the third node, `runLauncherAsNode`), not 3.
    assert_eq!(pg["spec"]["minMember"], 2, "the workers, not the launcher that waits for them");
}

#[tokio::test]
async fn trainjobs_trainer_refuses_are_refused_at_create_with_trainers_words_and_the_others_run() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let api: Api<TrainJob> = Api::default_namespaced(hub.clone());
    let refused = |tj: TrainJob| {
        let api = api.clone();
        async move {
            match api.create(&Default::default(), &tj).await {
                Err(kube::Error::Api(s)) => (s.code, s.reason, s.message),
                other => panic!("{:?} was admitted: {other:?}", tj.metadata.name),
            }
        }
    };
    let (code, reason, message) = refused(trainjob("broken", 0, 1, json!({}))).await;
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "admission webhook \"validator.trainjob.trainer.kubeflow.org\" denied the request: spec.trainer.numNodes: Invalid value: 0: must be at least 1"
    );
    let mut missing = trainjob("orphan", 1, 1, json!({}));
    missing.spec.runtime_ref.name = "no-such-runtime".into();
    let (code, _, message) = refused(missing).await;
    assert_eq!(code, 403);
    assert!(
        message.starts_with("admission webhook \"validator.trainjob.trainer.kubeflow.org\" denied the request: spec.RuntimeRef: Invalid value: ")
            && message.ends_with("ClusterTrainingRuntime.trainer.kubeflow.org \"no-such-runtime\" not found: specified clusterTrainingRuntime must be created before the TrainJob is created"),
        "{message}"
    );
    // A refused TrainJob is not stored: nothing waits for a runtime that may appear later.
    assert!(api.get_opt("orphan").await.expect("get").is_none());
    submit(&hub, &trainjob("fine", 1, 1, json!({}))).await;
    condition(&hub, "fine", "Complete", "True").await;
}

#[tokio::test]
async fn an_exhausted_quota_keeps_the_trainjob_pending_naming_queue_and_flavor() {
    let p = playground(fast()).await;
    let hub = p.hub();
    create_queue(&hub, "metadata: {name: team-a}\nspec:\n  quotas:\n  - {flavor: nvidia-h100-80gb, resource: nvidia.com/gpu, nominalQuota: '16'}\n").await;
    let mut greedy = trainjob("greedy", 3, 1, json!({"stowage.dev/gpu-flavor": "nvidia-h100-80gb"}));
    greedy.metadata.labels = Some([("stowage.dev/queue".to_string(), "team-a".to_string())].into());
    submit(&hub, &greedy).await;
    let pending = pending_because(&hub, "greedy", "QuotaExceeded").await;
    assert!(
        pending
            .message
            .contains("queue team-a is out of nvidia-h100-80gb nvidia.com/gpu quota: needs 24, 16 available"),
        "{}",
        pending.message
    );
    // The Queue says it is active and counts the TrainJob waiting in it.
    let status = queue_status(&hub, "team-a", |s| s.pending == 1).await;
    let active = status.conditions.iter().find(|c| c.type_ == "Active").expect("Active condition");
    assert_eq!((active.status.as_str(), status.admitted), ("True", 0));
}

/// A Kueue user's TrainJob, labelled `kueue.x-k8s.io/queue-name`, counts against the queue of
/// that name; one naming a queue that does not exist waits, saying so in Kueue's words.
#[tokio::test]
async fn kueues_queue_name_label_counts_against_that_queue_and_an_unknown_one_waits_naming_it() {
    let p = playground(fast()).await;
    let hub = p.hub();
    create_queue(&hub, "metadata: {name: team-k}\nspec:\n  quotas:\n  - {flavor: nvidia-h100-80gb, resource: nvidia.com/gpu, nominalQuota: '16'}\n").await;
    let kueue = |name: &str, queue: &str| {
        let mut tj = trainjob(name, 2, 30, json!({"stowage.dev/gpu-flavor": "nvidia-h100-80gb"}));
        tj.metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), queue.to_string())].into());
        tj
    };
    submit(&hub, &kueue("k-first", "team-k")).await;
    placement(&hub, "k-first", running).await;
    submit(&hub, &kueue("k-second", "team-k")).await;
    let over = pending_because(&hub, "k-second", "QuotaExceeded").await;
    assert!(over.message.contains("queue team-k is out of nvidia-h100-80gb nvidia.com/gpu quota"), "{}", over.message);
    queue_status(&hub, "team-k", |s| s.admitted == 1 && s.pending == 1).await;
    submit(&hub, &kueue("k-lost", "no-such-queue")).await;
    let lost = pending_because(&hub, "k-lost", "UnknownQueue").await;
    assert_eq!(lost.message, "LocalQueue no-such-queue doesn't exist");
}

/// Kueue's CRDs installed on a running hub, then its queues: the dispatcher starts watching them
/// (it asks the hub again while they are not served), so a TrainJob labelled for a LocalQueue
/// made after start is admitted from its ClusterQueue's quota.
#[tokio::test]
async fn kueue_objects_made_after_the_dispatcher_started_are_seen_and_admit_from_their_quota() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let mut tj = trainjob("late", 2, 1, json!({"stowage.dev/gpu-flavor": "nvidia-h100-80gb"}));
    tj.metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), "lq-h100".to_string())].into());
    submit(&hub, &tj).await;
    let lost = pending_because(&hub, "late", "UnknownQueue").await;
    assert_eq!(lost.message, "LocalQueue lq-h100 doesn't exist");

    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(hub.clone());
    for f in upstream::KUEUE_CRDS {
        let crd = input_limits::yaml::from_str(f.text).expect("CRD");
        crds.create(&Default::default(), &crd).await.expect("a Kueue CRD");
    }
    let apply = |yaml: &'static str| {
        let hub = hub.clone();
        async move {
            let obj: kube::api::DynamicObject = input_limits::yaml::from_str(yaml).expect("object");
            let gvk = kube::api::GroupVersionKind::try_from(obj.types.as_ref().expect("types")).expect("gvk");
            let (ar, _) = kube::discovery::pinned_kind(&hub, &gvk).await.expect("served");
            let api: Api<kube::api::DynamicObject> = match &obj.metadata.namespace {
                Some(ns) => Api::namespaced_with(hub.clone(), ns, &ar),
                None => Api::all_with(hub.clone(), &ar),
            };
            api.create(&Default::default(), &obj).await.expect(yaml);
        }
    };
    apply("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: nvidia-h100-80gb}\nspec: {nodeLabels: {nvidia.com/gpu.product: nvidia-h100-80gb}}\n").await;
    apply("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq-h100}\nspec:\n  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: nvidia-h100-80gb\n      resources:\n      - {name: nvidia.com/gpu, nominalQuota: 16}\n").await;
    apply("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq-h100, namespace: default}\nspec: {clusterQueue: cq-h100}\n").await;
    condition(&hub, "late", "Complete", "True").await;
}

#[tokio::test]
async fn a_queue_with_a_quota_it_cannot_read_admits_nothing_and_says_which_field_while_others_run() {
    let p = playground(fast()).await;
    let hub = p.hub();
    // A misspelt resource must not be dropped: the queue would lose that limit.
    create_queue(&hub, "metadata: {name: team-b}\nspec:\n  quotas:\n  - {flavor: nvidia-h100-80gb, resource: nvidia.com/gpus, nominalQuota: '64'}\n").await;
    let mut held = trainjob("held", 1, 1, json!({}));
    held.metadata.labels = Some([("stowage.dev/queue".to_string(), "team-b".to_string())].into());
    submit(&hub, &held).await;
    submit(&hub, &trainjob("other", 1, 1, json!({}))).await;
    let status = queue_status(&hub, "team-b", |s| s.conditions.iter().any(|c| c.type_ == "Active")).await;
    let active = status.conditions.iter().find(|c| c.type_ == "Active").expect("Active condition");
    assert_eq!((active.status.as_str(), active.reason.as_str()), ("False", "InvalidSpec"));
    assert_eq!(
        active.message,
        "spec.quotas[0].resource: \"nvidia.com/gpus\" is not one of nvidia.com/gpu, cpu, memory"
    );
    let pending = pending_because(&hub, "held", "QueueInactive").await;
    assert!(pending.message.starts_with("queue team-b is inactive: spec.quotas[0].resource"), "{}", pending.message);
    condition(&hub, "other", "Complete", "True").await;
}

#[tokio::test]
async fn a_high_priority_trainjob_evicts_one_gang_on_one_cluster_and_the_victim_runs_again_later() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let monitor = p.watch_for_duplicates();
    create_queue(
        &hub,
        "metadata: {name: team}\nspec:\n  allowPriorityAnnotation: true\n  preemption: {withinClusterQueue: LowerPriority}\n",
    )
    .await;
    let in_team = |mut tj: TrainJob| {
        tj.metadata.labels = Some([("stowage.dev/queue".to_string(), "team".to_string())].into());
        tj
    };
    // Four 4-node gangs fill west-a100's four racks of four 8-GPU nodes.
    let a100 = json!({"stowage.dev/gpu-flavor": "nvidia-a100-80gb"});
    let lows: Vec<String> = (0..4).map(|i| format!("low-{i}")).collect();
    for name in &lows {
        submit(&hub, &in_team(trainjob(name, 4, 120, a100.clone()))).await;
    }
    for name in &lows {
        placement(&hub, name, running).await;
    }
    let mut urgent = json!({"stowage.dev/priority": "10"});
    urgent["stowage.dev/gpu-flavor"] = "nvidia-a100-80gb".into();
    submit(&hub, &in_team(trainjob("urgent", 4, 1, urgent))).await;
    // One victim says why it stopped; the urgent gang runs and completes.
    let preempted = eventually("a Preempted condition", || {
        let hub = hub.clone();
        let lows = lows.clone();
        async move {
            let api: Api<TrainJob> = Api::default_namespaced(hub);
            for name in &lows {
                let tj = api.get(name).await.ok()?;
                let c = tj.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Preempted"));
                if let Some(c) = c {
                    return Some((name.clone(), c));
                }
            }
            None
        }
    })
    .await;
    assert!(
        preempted.1.message.starts_with("evicted from cluster west-a100 for default/urgent (priority 10)"),
        "{:?}",
        preempted.1
    );
    let ran = placement(&hub, "urgent", |p| p.spec.cluster.as_deref() == Some("west-a100")).await;
    assert_eq!(ran.spec.epoch, 1, "placed once, where its victim was");
    condition(&hub, "urgent", "Complete", "True").await;
    // Exactly one victim: the others kept running at their first epoch.
    let api: Api<Placement> = Api::default_namespaced(hub.clone());
    for name in lows.iter().filter(|n| **n != preempted.0) {
        let p = api.get(name).await.expect("placement");
        assert_eq!(p.spec.epoch, 1, "{name} was not evicted");
    }
    // The victim is placed again once there is room, and never ran twice at once.
    placement(&hub, &preempted.0, |p| p.spec.epoch >= 2 && p.spec.cluster.is_some()).await;
    assert_eq!(monitor.duplicates(), Vec::new(), "no TrainJob live on two members at once");
}

#[tokio::test]
async fn a_member_cut_off_from_the_hub_loses_its_trainjobs_to_another_without_running_them_twice() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let monitor = p.watch_for_duplicates();
    submit(&hub, &trainjob("mover", 2, 6, json!({}))).await;
    let first = placement(&hub, "mover", running).await;
    let gone_from = first.spec.cluster.clone().expect("placed");
    assert_eq!(first.spec.epoch, 1);

    p.hub_server.faults().partition_client(&Playground::agent_token(&gone_from), true);
    let moved = placement(&hub, "mover", |pl| pl.spec.cluster.as_deref().is_some_and(|c| c != gone_from)).await;
    assert_eq!(moved.spec.epoch, 2, "a new epoch fences the old member");
    let backoff = &moved.spec.backoff[0];
    assert_eq!(
        (backoff.cluster.as_str(), backoff.reason.as_str(), backoff.attempts),
        (gone_from.as_str(), "MemberSilent", 1)
    );
    condition(&hub, "mover", "Complete", "True").await;

    // The member comes back: nothing of the old epoch is left there.
    p.hub_server.faults().partition_client(&Playground::agent_token(&gone_from), false);
    let old = p.member(&gone_from).expect("member");
    eventually("the old member's stale objects to go", || async {
        let store = old.sim.server.store().lock().ok()?;
        let left: usize =
            [("jobset.x-k8s.io", "v1alpha2", "jobsets"), ("scheduling.x-k8s.io", "v1alpha1", "podgroups")]
                .iter()
                .filter_map(|(g, v, r)| store.lookup(g, v, r).cloned())
                .map(|rt| {
                    store
                        .list(
                            &rt,
                            None,
                            &|o| !o["metadata"]["labels"]["stowage.dev/trainjob-uid"].is_null(),
                            None,
                            None,
                        )
                        .0
                        .len()
                })
                .sum();
        (left == 0).then_some(())
    })
    .await;
    assert_eq!(monitor.duplicates(), Vec::new(), "a TrainJob ran on two members at once");
}

#[tokio::test]
async fn a_dispatcher_killed_mid_cycle_hands_over_without_duplicate_or_lost_placements() {
    let p = &mut playground(PlaygroundOptions { dispatchers: 2, ..fast() }).await;
    let hub = p.hub();
    let monitor = p.watch_for_duplicates();
    let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let leader = |l: Lease| l.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty());
    let first =
        eventually("a leader", || async { leases.get_opt("stowage-dispatcher").await.ok().flatten().and_then(leader) })
            .await;
    // Slow requests, so a cycle writing many Placements (16 at a time) is caught half done: six
    // rounds of writes, 0.6 s, so a test slowed by a loaded machine still sees the first ones
    // before the last (with three rounds it once saw none before all 48 were written).
    p.hub_server.faults().set_latency(Duration::from_millis(100));
    let names: Vec<String> = (0..96).map(|i| format!("burst-{i}")).collect();
    for n in &names {
        submit(&hub, &trainjob(n, 1, 1, json!({}))).await;
    }
    let placements: Api<Placement> = Api::default_namespaced(hub.clone());
    eventually("the first placements", || async {
        let n = placements.list(&ListParams::default()).await.ok()?.items.len();
        (n > 0).then_some(())
    })
    .await;
    let killed = (0..2).find(|i| Playground::dispatcher_token(*i) == first).expect("leader is a replica");
    p.stop_dispatcher(killed);
    let written = placements.list(&ListParams::default()).await.expect("list").items.len();
    p.hub_server.faults().set_latency(Duration::ZERO);
    let second = eventually("a new leader", || async {
        leases.get_opt("stowage-dispatcher").await.ok().flatten().and_then(leader).filter(|h| *h != first)
    })
    .await;
    all_complete(&hub, &names).await;
    let all = placements.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(all.len(), names.len());
    assert!(all.iter().all(|pl| pl.spec.epoch == 1), "no TrainJob was placed twice");
    assert_eq!(monitor.duplicates(), Vec::new());
    assert!(written < names.len(), "the kill came mid-way: {written} of {} placed ({first} → {second})", names.len());
    // The killed replica comes back as a follower and changes nothing.
    p.start_dispatcher(killed).expect("restart");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = placements.list(&ListParams::default()).await.expect("list").items;
    let epochs =
        |v: &[Placement]| v.iter().map(|p| (p.metadata.name.clone(), p.spec.clone())).collect::<BTreeMap<_, _>>();
    assert_eq!(epochs(&again), epochs(&all));
}

#[tokio::test]
async fn a_restarted_agent_picks_up_where_it_left_without_duplicates() {
    let p = &mut playground(fast()).await;
    let hub = p.hub();
    let monitor = p.watch_for_duplicates();
    let names: Vec<String> = (0..6).map(|i| format!("steady-{i}")).collect();
    for n in &names {
        submit(&hub, &trainjob(n, 2, 3, json!({}))).await;
    }
    let first = placement(&hub, &names[0], running).await;
    let cluster = first.spec.cluster.clone().expect("placed");
    p.stop_agent(&cluster);
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.start_agent(&cluster).expect("restart");
    all_complete(&hub, &names).await;
    let placements =
        Api::<Placement>::default_namespaced(hub.clone()).list(&ListParams::default()).await.expect("list");
    assert!(placements.items.iter().all(|pl| pl.spec.epoch == 1), "nothing was re-placed");
    assert_eq!(monitor.duplicates(), Vec::new());
}

#[tokio::test]
async fn a_hub_answering_500_and_429_slows_things_down_but_loses_nothing() {
    // The client honours 429's Retry-After, so heartbeats pause for seconds: a grace period
    // that short would (rightly) move TrainJobs, which is another test's subject.
    let mut options = fast();
    options.settings.member_grace = Duration::from_secs(60);
    options.timing.hub_lost = Duration::from_secs(30);
    let p = playground(options).await;
    let hub = p.hub();
    let monitor = p.watch_for_duplicates();
    let names: Vec<String> = (0..8).map(|i| format!("hardy-{i}")).collect();
    for n in &names {
        submit(&hub, &trainjob(n, 1, 1, json!({}))).await;
    }
    p.hub_server.faults().fail_next(40, 500);
    tokio::time::sleep(Duration::from_millis(800)).await;
    p.hub_server.faults().fail_next(40, 429);
    all_complete(&hub, &names).await;
    let placements =
        Api::<Placement>::default_namespaced(hub.clone()).list(&ListParams::default()).await.expect("list");
    assert_eq!(placements.items.len(), names.len());
    assert!(placements.items.iter().all(|pl| pl.spec.epoch == 1));
    assert_eq!(monitor.duplicates(), Vec::new());
}

/// A hub that stalls (etcd trouble, one slow request: here every request takes `latency`) but
/// never drops a connection, so the agents' watches stay open and no relist comes. Held past
/// `hub_lost`, the agents fence; when it answers again, they must make again what is still
/// placed on them (or the dispatcher moves it, past its grace): every TrainJob completes, none
/// twice. Around the threshold (the members never look silent to the dispatcher) and far above.
#[tokio::test]
async fn a_hub_that_stalls_past_hub_lost_loses_no_trainjob_around_the_threshold_and_far_above() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let monitor = p.watch_for_duplicates();
    let fenced = || p.members.iter().map(|m| m.config.metrics.fenced(&m.name)).sum::<u64>();
    // (latency of every request, how long the stall lasts): just past hub_lost (2.5 s) and well
    // inside the dispatcher's grace (5 s); then far past both.
    for (round, (latency, stall)) in [(3_000, 3_500), (8_000, 12_000)].into_iter().enumerate() {
        let names: Vec<String> = (0..3).map(|i| format!("stall-{round}-{i}")).collect();
        for n in &names {
            submit(&hub, &trainjob(n, 1, 12, json!({}))).await;
        }
        for n in &names {
            placement(&hub, n, running).await;
        }
        let before = fenced();
        p.hub_server.faults().set_latency(Duration::from_millis(latency));
        tokio::time::sleep(Duration::from_millis(stall)).await;
        p.hub_server.faults().set_latency(Duration::ZERO);
        eventually("the agents to fence for the stalled hub", || async { (fenced() > before).then_some(()) }).await;
        all_complete(&hub, &names).await;
    }
    assert_eq!(monitor.duplicates(), Vec::new(), "a TrainJob ran on two members at once");
}

#[tokio::test]
async fn suspend_stops_a_running_trainjob_and_frees_its_gpus_resume_places_it_and_a_suspended_one_waits() {
    let p = playground(fast()).await;
    let hub = p.hub();
    let api: Api<TrainJob> = Api::default_namespaced(hub.clone());
    submit(&hub, &trainjob("sleeper", 2, 600, json!({}))).await;
    let first = placement(&hub, "sleeper", running).await;
    let member = first.spec.cluster.clone().expect("placed");
    let jobset_on = |member: &str| {
        let m = p.member(member).expect("member");
        let store = m.sim.server.store().lock().expect("store");
        let rt = store.lookup("jobset.x-k8s.io", "v1alpha2", "jobsets").expect("JobSet CRD").clone();
        store.get(&rt, Some("default"), "sleeper").is_ok()
    };
    assert!(jobset_on(&member));
    // Running: the conditions read as Trainer's (none of Stowage's own). The dispatcher mirrors
    // the Placement's phase onto the TrainJob on its own cycle, so wait for it.
    eventually("the TrainJob's own conditions cleared", || async {
        let tj = api.get("sleeper").await.expect("trainjob");
        tj.status.is_some_and(|s| s.conditions.is_empty()).then_some(())
    })
    .await;

    let suspend = |yes: bool| json!({"spec": {"suspend": yes}});
    api.patch("sleeper", &PatchParams::default(), &Patch::Merge(suspend(true))).await.expect("suspend");
    let c = condition(&hub, "sleeper", "Suspended", "True").await;
    assert_eq!((c.reason.as_str(), c.message.as_str()), ("Suspended", "TrainJob is suspended"));
    placement(&hub, "sleeper", |p| p.spec.cluster.is_none() && p.spec.epoch == first.spec.epoch + 1).await;
    eventually("the member's JobSet gone", || async { (!jobset_on(&member)).then_some(()) }).await;
    // Withdrawn, its Placement no longer reads Running on its old member: the dispatcher clears
    // what the agent last wrote. The TrainJob counts its job suspended, none active.
    let withdrawn = placement(&hub, "sleeper", |p| {
        p.status.as_ref().is_some_and(|s| s.phase == PlacementPhase::Pending && s.observed_epoch == p.spec.epoch)
    })
    .await;
    let message = withdrawn.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.starts_with("withdrawn, on no member"), "{message}");
    eventually("the TrainJob's jobs counted suspended", || async {
        let jobs = api.get("sleeper").await.ok()?.status?.jobs_status;
        (!jobs.is_empty() && jobs.iter().all(|j| j.active == 0 && j.ready == 0 && j.suspended > 0)).then_some(())
    })
    .await;
    // Its GPUs are back: the default queue counts nothing admitted.
    queue_status(&hub, "default", |s| s.admitted == 0 && s.pending == 0).await;

    api.patch("sleeper", &PatchParams::default(), &Patch::Merge(suspend(false))).await.expect("resume");
    let c = condition(&hub, "sleeper", "Suspended", "False").await;
    assert_eq!((c.reason.as_str(), c.message.as_str()), ("Resumed", "TrainJob is resumed"));
    let again = placement(&hub, "sleeper", |p| running(p) && p.spec.epoch == first.spec.epoch + 2).await;
    // Running again: its claim's "being made on" is not left beside the Running phase.
    let message = again.status.and_then(|s| s.message).unwrap_or_default();
    assert!(!message.starts_with("being made on"), "{message}");

    // Created suspended: never placed, never counted, until resumed.
    let mut parked = trainjob("parked", 1, 1, json!({}));
    parked.spec.suspend = Some(true);
    submit(&hub, &parked).await;
    condition(&hub, "parked", "Suspended", "True").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let placements: Api<Placement> = Api::default_namespaced(hub.clone());
    assert!(placements.get_opt("parked").await.expect("get").is_none(), "a suspended TrainJob is not placed");
    api.patch("parked", &PatchParams::default(), &Patch::Merge(suspend(false))).await.expect("resume");
    condition(&hub, "parked", "Complete", "True").await;
}

/// A TrainJob whose pods select `node-type: training` and tolerate `dedicated=ml`, with runtime
/// patches as Trainer's SDK writes them.
fn selective(name: &str, node_type: &str) -> TrainJob {
    let mut tj = trainjob(name, 2, 1, json!({}));
    let pod = json!({"nodeSelector": {"node-type": node_type},
                     "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]});
    tj.spec.runtime_patches = vec![
        serde_json::from_value(json!({"manager": "trainer.kubeflow.org/kubeflow-sdk",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]}}}}))
        .expect("patch"),
    ];
    tj
}

#[tokio::test]
async fn a_gang_goes_only_where_its_node_selector_and_tolerations_let_its_pods_bind() {
    let p = playground(PlaygroundOptions { node_labels: vec!["node-type".into()], ..fast() }).await;
    let hub = p.hub();
    // Four nodes of west-a100 are for training, and tainted so that nothing else lands there.
    let marked: Vec<String> = {
        let m = p.member("west-a100").expect("member");
        let mut store = m.sim.server.store().lock().expect("store");
        let nodes_rt = store.lookup("", "v1", "nodes").expect("nodes").clone();
        let (nodes, _) = store.list(&nodes_rt, None, &|_| true, Some(4), None);
        let options = kube_mem::store::WriteOptions { strict: false, dry_run: false };
        nodes
            .into_iter()
            .map(|mut n| {
                let name = n["metadata"]["name"].as_str().expect("name").to_string();
                n["metadata"]["labels"]["node-type"] = "training".into();
                n["spec"]["taints"] = json!([{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]);
                store
                    .update(
                        kube_mem::Requester::InProcess,
                        &nodes_rt,
                        None,
                        &name,
                        n,
                        kube_mem::store::Part::Main,
                        &options,
                    )
                    .expect("label node");
                name
            })
            .collect()
    };
    submit(&hub, &selective("picky", "training")).await;
    submit(&hub, &selective("nowhere", "inference")).await;
    let done = condition(&hub, "picky", "Complete", "True").await;
    assert_eq!(done.reason, "AllJobsCompleted");
    let placed = placement(&hub, "picky", |p| p.spec.cluster.is_some()).await;
    assert_eq!(placed.spec.cluster.as_deref(), Some("west-a100"));
    let pods = member_pods(p.member("west-a100").expect("member"), "picky");
    assert_eq!(pods.len(), 2);
    for pod in &pods {
        let node = pod["spec"]["nodeName"].as_str().expect("bound").to_string();
        assert!(marked.contains(&node), "{node} is not a training node");
    }
    // Nothing anywhere matches: it waits, and says so on the TrainJob.
    let pending = pending_because(&hub, "nowhere", "NoMatchingNodes").await;
    assert_eq!(pending.message, "pod set node: no member has GPU nodes matching node-type=inference");
    let placements: Api<Placement> = Api::default_namespaced(hub.clone());
    assert!(placements.get_opt("nowhere").await.expect("get").and_then(|p| p.spec.cluster).is_none());
}

/// The member's TrainJob pods show on the hub as read-only copies bound to the member's virtual
/// Node, labels and status copied, as kubectl and the SDK list a TrainJob's pods on one Trainer
/// cluster; deleting the TrainJob takes them away.
#[tokio::test]
async fn a_trainjobs_pods_show_on_the_hub_bound_to_their_members_virtual_node_and_go_with_it() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    let p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("seen", 2, 30, json!({}))).await;
    let placed = placement(&hub, "seen", running).await;
    let cluster = placed.spec.cluster.clone().expect("placed");
    let pods: Api<Pod> = Api::default_namespaced(hub.clone());
    let selector = ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=seen");
    let copies = eventually("2 running copies on the hub", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods.list(&selector).await.ok()?.items;
            let running = list.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            (running.count() == 2).then_some(list)
        }
    })
    .await;
    let node_name = format!("stowage-{cluster}");
    for c in &copies {
        let spec = c.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some(node_name.as_str()));
        assert_eq!(spec.containers[0].name, "node");
        let labels = c.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels["jobset.sigs.k8s.io/replicatedjob-name"], "node");
        assert!(labels.contains_key("batch.kubernetes.io/job-completion-index"), "{labels:?}");
        assert_eq!(c.metadata.owner_references.as_ref().expect("owned")[0].name, "seen");
        // Its container statuses too: kubectl's READY reads 1/1 while it runs.
        let statuses = c.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
        assert!(statuses.len() == 1 && statuses[0].ready, "{statuses:?}");
    }
    let node = Api::<Node>::all(hub.clone()).get(&node_name).await.expect("the member's virtual Node");
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == "virtual-kubelet.io/provider" && t.effect == "NoSchedule"), "{taints:?}");
    let ready = node.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(ready.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{ready:?}");
    Api::<TrainJob>::default_namespaced(hub.clone()).delete("seen", &Default::default()).await.expect("deleted");
    eventually("the copies gone", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move { pods.list(&selector).await.ok().filter(|l| l.items.is_empty()) }
    })
    .await;
}

/// A TrainJob that fails says why on the hub: its Failed condition and Event carry the failing
/// container, its exit and the end of its termination message, read from the member's pod.
#[tokio::test]
async fn a_failed_trainjob_says_on_the_hub_which_container_failed_and_its_last_words() {
    let p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("doomed", 2, 60, json!({}))).await;
    let placed = placement(&hub, "doomed", running).await;
    let member = p.member(placed.spec.cluster.as_deref().expect("placed")).expect("member");
    let pods = member_pods(member, "doomed");
    let pod = pods.iter().filter_map(|p| p["metadata"]["name"].as_str()).min().expect("a pod").to_string();
    let traceback = format!("{}torch.OutOfMemoryError: CUDA out of memory", "x".repeat(5000));
    assert!(member.sim.fail_pod("default", &pod, &traceback));
    let failed = condition(&hub, "doomed", "Failed", "True").await;
    assert!(failed.message.contains(&format!("pod {pod} container node: Error (exit code 1): ")), "{}", failed.message);
    assert!(failed.message.ends_with("torch.OutOfMemoryError: CUDA out of memory"), "{}", failed.message);
    assert!(failed.message.len() < 2048, "the end of the message, not all of it: {} bytes", failed.message.len());
}

/// What a member's scheduler or kubelet says of a TrainJob's pod (here a crash loop's BackOff)
/// reaches the hub TrainJob as an Event naming the member and the pod, counted as the member
/// counts it; the rest of the member's chatter does not.
#[tokio::test]
async fn a_members_word_on_a_trainjobs_pod_reaches_the_hub_as_an_event_naming_member_and_pod() {
    use k8s_openapi::api::core::v1::Event;
    let p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("crashy", 1, 60, json!({}))).await;
    let placed = placement(&hub, "crashy", running).await;
    let cluster = placed.spec.cluster.clone().expect("placed");
    let member = p.member(&cluster).expect("member");
    let pod = member_pods(member, "crashy")[0]["metadata"]["name"].as_str().expect("name").to_string();
    let member_events: Api<Event> = Api::default_namespaced(member.sim.server.client_as("kubelet").expect("client"));
    for (name, reason, count) in [("backoff", "BackOff", 4), ("pulled", "Pulled", 1)] {
        let e: Event = serde_json::from_value(json!({"metadata": {"name": format!("{pod}.{name}")},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": pod},
            "reason": reason, "type": if reason == "Pulled" { "Normal" } else { "Warning" },
            "message": "Back-off restarting failed container node in pod", "count": count}))
        .expect("event");
        member_events.create(&Default::default(), &e).await.expect("member event");
    }
    let hub_events: Api<Event> = Api::default_namespaced(hub.clone());
    let relayed = eventually("the BackOff on the hub", || {
        let hub_events = hub_events.clone();
        let name = format!("crashy.{cluster}.backoff");
        async move { hub_events.get_opt(&name).await.ok().flatten() }
    })
    .await;
    assert_eq!(relayed.involved_object.kind.as_deref(), Some("TrainJob"));
    assert_eq!(relayed.involved_object.name.as_deref(), Some("crashy"));
    assert_eq!((relayed.reason.as_deref(), relayed.count), (Some("BackOff"), Some(4)));
    assert_eq!(
        relayed.message.as_deref(),
        Some(format!("member {cluster}, pod {pod}: Back-off restarting failed container node in pod").as_str())
    );
    let all = hub_events.list(&Default::default()).await.expect("list").items;
    assert!(all.iter().all(|e| e.reason.as_deref() != Some("Pulled")), "only what a user needs is relayed");
}
