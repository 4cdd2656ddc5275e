//! MultiKueue's external dispatcher, one cycle at a time: which Workloads are nominated, where,
//! how the nomination is written (Kueue's admission status kept whole), and when it is replaced
//! or withdrawn, with the Event that says why.

use std::time::Duration;

use api::kueue::{AdmissionCheck, MultiKueueCluster, MultiKueueConfig, Workload};
use api::stowage::{
    DomainCapacity, MemberCluster, MemberClusterSpec, MemberClusterStatus, NodeClassReport, TopologyLevel,
};
use dispatcher::decide::events::{EventReason, EventType, Kind};
use dispatcher::decide::{KueueMode, NominationWrite, Observed, Plan, Settings, decide};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use scheduler_core::Config;
use serde_json::json;

fn now() -> Timestamp {
    "2026-11-25T10:00:00Z".parse().expect("time")
}

fn at(offset_s: i64) -> Time {
    Time(now() + SignedDuration::from_secs(offset_s))
}

/// A member with two racks of four free 8-GPU nodes, its nodes labelled `labels`.
fn member(name: &str, labels: &[(&str, &str)]) -> MemberCluster {
    let mut m = MemberCluster::new(name, MemberClusterSpec::default());
    let class = NodeClassReport {
        node_labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..NodeClassReport::default()
    };
    let rack = |r: usize| DomainCapacity {
        path: vec![format!("{name}-r{r}")],
        flavor: "h100".into(),
        class: class.clone(),
        nodes: 4,
        gpus_per_node: 8,
        allocatable_gpus: 32,
        free_gpus: 32,
        free_histogram: vec![0, 0, 0, 0, 0, 0, 0, 0, 4],
        cpu_milli_per_node: None,
        memory_mib_per_node: None,
    };
    m.status = Some(MemberClusterStatus {
        heartbeat_time: Some(at(-5).0.to_string()),
        topology_levels: vec![TopologyLevel { level: "rack".into(), node_label: "example.com/rack".into() }],
        domains: vec![rack(0), rack(1)],
        ..MemberClusterStatus::default()
    });
    m
}

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    input_limits::yaml::from_str(text).expect("yaml")
}

/// Kueue's MultiKueue set-up: an AdmissionCheck naming a MultiKueueConfig of `clusters`.
fn kueue_objects(o: &mut Observed, clusters: &[&str]) {
    o.admission_checks = vec![yaml::<AdmissionCheck>(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\nmetadata: {name: multikueue}\nspec:\n  \
         controllerName: kueue.x-k8s.io/multikueue\n  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: fleet}\n",
    )];
    o.multikueue_configs = vec![yaml::<MultiKueueConfig>(&format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: MultiKueueConfig\nmetadata: {{name: fleet}}\nspec: {{clusters: [{}]}}\n",
        clusters.join(", ")
    ))];
    o.multikueue_clusters = clusters
        .iter()
        .map(|c| {
            yaml::<MultiKueueCluster>(&format!(
                "apiVersion: kueue.x-k8s.io/v1beta2\nkind: MultiKueueCluster\nmetadata: {{name: {c}}}\nspec: \
                 {{clusterSource: {{kubeConfig: {{locationType: Secret, location: {c}-kubeconfig}}}}}}\n\
                 status: {{conditions: [{{type: Active, status: 'True', reason: Active, message: Connected, \
                 lastTransitionTime: '2026-11-25T09:00:00Z'}}]}}\n"
            ))
        })
        .collect();
}

/// A Workload as Kueue writes it for a TrainJob of `nodes` 8-GPU nodes that must share a rack,
/// after reserving its quota: the MultiKueue check Pending, nothing nominated.
fn workload(name: &str, nodes: u32) -> Workload {
    serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"), "resourceVersion": "7",
                     "creationTimestamp": at(-60).0.to_string(),
                     "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                          "name": name, "uid": format!("tj-{name}"), "controller": true}]},
        "spec": {"queueName": "team-a", "priority": 0, "podSets": [{
            "name": "node", "count": nodes,
            "topologyRequest": {"required": "example.com/rack", "subGroupCount": nodes},
            "template": {"spec": {"containers": [{"name": "node", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                            "message": "Quota reserved in ClusterQueue team-a", "lastTransitionTime": at(-30).0.to_string()},
                           {"type": "PodsReady", "status": "False", "reason": "PodsReady",
                            "message": "Not all pods are ready or succeeded", "lastTransitionTime": at(-30).0.to_string()}],
            "admission": {"clusterQueue": "team-a", "podSetAssignments": [{"name": "node", "count": nodes,
                          "flavors": {"nvidia.com/gpu": "h100"}, "resourceUsage": {"nvidia.com/gpu": (8 * nodes).to_string()}}]},
            "admissionChecks": [{"name": "multikueue", "state": "Pending", "message": "",
                                 "lastTransitionTime": at(-30).0.to_string()}]
        }
    }))
    .expect("workload")
}

fn settings() -> Settings {
    Settings { kueue: KueueMode::MultiKueue, nomination_timeout: Duration::from_secs(300), ..Settings::default() }
}

fn observed(members: Vec<MemberCluster>, workloads: Vec<Workload>) -> Observed {
    let mut o = Observed { members, workloads, ..Observed::default() };
    kueue_objects(&mut o, &["east", "west"]);
    o
}

fn cycle(o: &Observed, offset_s: i64) -> Plan {
    decide(o, &Config::stowage(), &settings(), at(offset_s))
}

fn nomination<'p>(plan: &'p Plan, name: &str) -> Option<&'p NominationWrite> {
    plan.nominations.iter().find(|n| n.name == name)
}

/// The hub after `plan`'s nominations are applied, and the dispatcher's memory carried over.
fn written(mut o: Observed, plan: &Plan) -> Observed {
    for n in &plan.nominations {
        let w = o.workloads.iter_mut().find(|w| w.metadata.name.as_deref() == Some(&n.name)).expect("workload");
        let status = w.status.get_or_insert_with(Default::default);
        status.nominated_cluster_names = (!n.clusters.is_empty()).then(|| n.clusters.clone());
    }
    o.kueue_memory = plan.kueue_memory.clone();
    o
}

#[test]
fn a_workload_with_quota_reserved_gets_one_member_that_fits_and_kueues_admission_status_stays_whole() {
    let o = observed(vec![member("east", &[]), member("west", &[])], vec![workload("w1", 4)]);
    let plan = cycle(&o, 0);
    let n = nomination(&plan, "w1").expect("nominated");
    assert_eq!(n.clusters.len(), 1, "exactly one cluster: {n:?}");
    assert!(["east", "west"].contains(&n.clusters[0].as_str()));
    // Applied as kueue-admission: everything Kueue owns goes back as it was, at the version read.
    let status = &n.apply["status"];
    assert_eq!(n.apply["metadata"]["resourceVersion"], "7");
    assert_eq!(status["nominatedClusterNames"], json!(n.clusters));
    assert_eq!(status["admission"]["clusterQueue"], "team-a");
    assert_eq!(status["admissionChecks"][0]["state"], "Pending");
    let types: Vec<&str> =
        status["conditions"].as_array().expect("conditions").iter().filter_map(|c| c["type"].as_str()).collect();
    // PodsReady is not Kueue's admission manager's (another manager writes it): not claimed.
    assert_eq!(types, vec!["QuotaReserved"]);
    // The TrainJob's Event and the Workload's say where it went.
    let events: Vec<(&str, &str)> = plan.workload_events.iter().map(|e| (e.kind.as_str(), e.reason.as_str())).collect();
    assert_eq!(events, vec![("Workload", "Nominated"), ("TrainJob", "Nominated")]);
    // Deciding again over what was written changes nothing and tells nothing new.
    let again = cycle(&written(o, &plan), 1);
    assert!(again.nominations.is_empty() && again.workload_events.is_empty(), "{again:#?}");
}

#[test]
fn only_a_workload_kueue_has_reserved_and_whose_multikueue_check_is_pending_is_nominated() {
    type Edit = fn(&mut Workload);
    fn status(w: &mut Workload) -> &mut api::kueue::WorkloadStatus {
        w.status.as_mut().expect("status")
    }
    fn add_true(w: &mut Workload, type_: &str) {
        let mut c = status(w).conditions[0].clone();
        c.type_ = type_.into();
        status(w).conditions.push(c);
    }
    let cases: [(&str, Edit); 6] = [
        ("quota not reserved", |w| status(w).conditions[0].status = "False".into()),
        ("check Ready", |w| status(w).admission_checks[0].state = "Ready".into()),
        ("another check not Ready", |w| {
            let mut other = status(w).admission_checks[0].clone();
            other.name = "provisioning".into();
            status(w).admission_checks.push(other);
        }),
        ("admitted", |w| status(w).cluster_name = Some("east".into())),
        ("evicted", |w| add_true(w, "Evicted")),
        ("finished", |w| add_true(w, "Finished")),
    ];
    for (what, edit) in cases {
        let mut w = workload("w1", 2);
        edit(&mut w);
        let plan = cycle(&observed(vec![member("east", &[])], vec![w]), 0);
        assert!(plan.nominations.is_empty(), "{what}: {:?}", plan.nominations);
    }
    // Without --kueue multikueue, no Workload is Stowage's.
    let o = observed(vec![member("east", &[])], vec![workload("w1", 2)]);
    let plan = decide(&o, &Config::stowage(), &Settings::default(), at(0));
    assert!(plan.nominations.is_empty());
}

#[test]
fn a_workload_that_fits_nowhere_gets_no_nomination_and_one_event_saying_why() {
    // Five nodes in one rack: the racks have four.
    let o = observed(vec![member("east", &[]), member("west", &[])], vec![workload("big", 5)]);
    let plan = cycle(&o, 0);
    assert!(plan.nominations.is_empty(), "{:?}", plan.nominations);
    let e = plan.workload_events.iter().find(|e| e.kind == Kind::Workload).expect("event on the workload");
    assert_eq!(e.type_, EventType::Warning);
    assert!(e.message.contains("rack"), "{e:?}");
    let on_trainjob = plan.workload_events.iter().find(|e| e.kind == Kind::TrainJob).expect("event on the trainjob");
    assert_eq!((on_trainjob.object.as_str(), on_trainjob.reason.as_str()), ("big", e.reason.as_str()));
    // Told once: the next cycle, still waiting for the same reason, says nothing new.
    let again = cycle(&written(o, &plan), 1);
    assert!(again.workload_events.is_empty(), "{:?}", again.workload_events);
}

#[test]
fn the_nomination_follows_the_workloads_node_selector_and_the_multikueue_cluster_list() {
    let mut w = workload("w1", 2);
    w.spec.pod_sets[0].template["spec"]["nodeSelector"] = json!({"pool": "train"});
    let members =
        vec![member("east", &[]), member("west", &[("pool", "train")]), member("south", &[("pool", "train")])];
    let mut o = observed(members, vec![w]);
    // south is not in the MultiKueueConfig; a MultiKueueCluster may name its MemberCluster.
    kueue_objects(&mut o, &["east", "mk-west"]);
    o.multikueue_clusters[1].metadata.annotations =
        Some([("stowage.dev/member-cluster".to_string(), "west".to_string())].into());
    let plan = cycle(&o, 0);
    assert_eq!(nomination(&plan, "w1").expect("nominated").clusters, vec!["west".to_string()]);
}

#[test]
fn a_nominated_workload_holds_its_room_so_the_next_goes_elsewhere() {
    // Each member holds two 4-node Workloads (one per rack): four are nominated, the fifth
    // waits, and the four keep their room while Kueue admits them.
    let ws = (1..=5).map(|i| workload(&format!("w{i}"), 4)).collect();
    let o = observed(vec![member("east", &[]), member("west", &[])], ws);
    let plan = cycle(&o, 0);
    let placed: Vec<&str> = plan.nominations.iter().map(|n| n.clusters[0].as_str()).collect();
    assert_eq!(placed.len(), 4, "{:?}", plan.nominations);
    assert_eq!(placed.iter().filter(|c| **c == "east").count(), 2);
    let o = written(o, &plan);
    let again = cycle(&o, 1);
    assert!(again.nominations.is_empty(), "the four keep their room: {:?}", again.nominations);
    let w5 = again.workload_events.iter().all(|e| !e.object.ends_with("w5"));
    assert!(w5, "w5 was told why once, in the first cycle: {:?}", again.workload_events);
}

#[test]
fn a_nomination_is_replaced_when_its_member_goes_silent_or_kueue_does_not_admit_in_time() {
    let o = observed(vec![member("east", &[]), member("west", &[])], vec![workload("w1", 4)]);
    let plan = cycle(&o, 0);
    let first = nomination(&plan, "w1").expect("nominated").clusters[0].clone();
    let other = if first == "east" { "west" } else { "east" };
    let o = written(o, &plan);

    // Its member stops reporting: nominated to the other.
    let mut silent = o.clone();
    let m = silent.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(&first)).expect("member");
    m.status.as_mut().expect("status").heartbeat_time = Some(at(-600).0.to_string());
    let plan = cycle(&silent, 1);
    assert_eq!(nomination(&plan, "w1").expect("renominated").clusters, vec![other.to_string()]);
    let e = plan.workload_events.iter().find(|e| e.kind == Kind::Workload).expect("event");
    assert!(e.message.contains(&format!("member {first} is not live")), "{e:?}");

    // Kueue does not admit it within the timeout: nominated elsewhere.
    let mut o = o;
    for m in &mut o.members {
        m.status.as_mut().expect("status").heartbeat_time = Some(at(295).0.to_string());
    }
    let plan = cycle(&o, 299);
    assert!(plan.nominations.is_empty(), "within the timeout: {:?}", plan.nominations);
    let plan = cycle(&o, 301);
    assert_eq!(nomination(&plan, "w1").expect("renominated").clusters, vec![other.to_string()]);
}

/// Under a burst, MultiKueue works through its backlog slowly (the testbed burst took minutes):
/// a nomination past the timeout stays while its worker keeps admitting other Workloads since it
/// was nominated; once the worker has admitted nothing for the timeout, it moves.
#[test]
fn a_nomination_past_the_timeout_stays_while_its_worker_keeps_admitting_others() {
    let o = observed(vec![member("east", &[]), member("west", &[])], vec![workload("w1", 4), workload("done", 1)]);
    let plan = cycle(&o, 0);
    let first = nomination(&plan, "w1").expect("nominated").clusters[0].clone();
    let o = written(o, &plan);
    // The members report throughout: a cycle at `t` sees their heartbeat of a second before.
    let cycle = |o: &Observed, t: i64| {
        let mut o = o.clone();
        for m in &mut o.members {
            m.status.as_mut().expect("status").heartbeat_time = Some(at(t - 1).0.to_string());
        }
        cycle(&o, t)
    };
    // Kueue admitted another Workload on the same worker 200 s after w1 was nominated.
    let admit_other = |o: &mut Observed, when: i64| {
        let w = o.workloads.iter_mut().find(|w| w.metadata.name.as_deref() == Some("done")).expect("done");
        let status = w.status.as_mut().expect("status");
        status.cluster_name = Some(first.clone());
        status.nominated_cluster_names = None;
        status.conditions.push(
            serde_json::from_value(json!({"type": "Admitted", "status": "True", "reason": "Admitted",
            "message": "admitted", "lastTransitionTime": at(when).0.to_string()}))
            .expect("condition"),
        );
    };
    let mut busy = o.clone();
    admit_other(&mut busy, 200);
    let plan = cycle(&busy, 301);
    assert!(nomination(&plan, "w1").is_none(), "withdrawn while its worker admits: {:?}", plan.nominations);
    // 501 s: the last admission there (at 200 s) is older than the timeout: it moves.
    let plan = cycle(&busy, 501);
    let moved = nomination(&plan, "w1").expect("renominated");
    assert_ne!(moved.clusters.first(), Some(&first));
    let e = plan.workload_events.iter().find(|e| e.message.contains("nor anything else there")).expect("why");
    assert!(e.message.contains(&format!("on {first} within 300 s")), "{e:?}");
    // An admission there from before w1 was nominated is no sign of progress on it.
    let mut stale = o;
    admit_other(&mut stale, -10);
    let plan = cycle(&stale, 301);
    assert!(nomination(&plan, "w1").is_some(), "kept on the strength of an older admission");
}

#[test]
fn a_nomination_whose_member_no_longer_has_room_is_replaced() {
    let o = observed(vec![member("east", &[]), member("west", &[])], vec![workload("w1", 4)]);
    let plan = cycle(&o, 0);
    let first = nomination(&plan, "w1").expect("nominated").clusters[0].clone();
    let mut o = written(o, &plan);
    // Its member reports every GPU taken (by jobs Kueue's worker admitted on its own).
    let m = o.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(&first)).expect("member");
    for d in &mut m.status.as_mut().expect("status").domains {
        d.free_gpus = 0;
        d.free_histogram = vec![4];
    }
    let plan = cycle(&o, 1);
    let n = nomination(&plan, "w1").expect("renominated");
    assert_ne!(n.clusters[0], first);
}

#[test]
fn with_kueue_on_the_hub_a_trainjob_with_its_queue_label_is_kueues_and_not_placed() {
    let runtime: api::trainer::ClusterTrainingRuntime = yaml(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/upstream/trainer/runtimes/torch_distributed.yaml"
        ))
        .expect("runtime"),
    );
    let tj: api::trainer::TrainJob = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "team-a", "uid": "u1", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": true,
                 "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}}}))
    .expect("trainjob");
    let mut o = observed(vec![member("east", &[])], vec![]);
    o.cluster_runtimes = vec![runtime];
    // Kueue's webhook suspends it; whether or not managedBy was defaulted, it is Kueue's.
    o.trainjobs = vec![tj];
    let plan = cycle(&o, 0);
    assert!(plan.placements.is_empty() && plan.statuses.is_empty(), "{plan:#?}");
    // The same TrainJob unsuspended, with no Kueue on the hub, is Stowage's (and its queue is
    // missing, in Kueue's words).
    o.trainjobs[0].spec.suspend = None;
    let plan = decide(&o, &Config::stowage(), &Settings::default(), at(0));
    let messages: Vec<&str> = plan.statuses.iter().flat_map(|s| &s.conditions).map(|c| c.message.as_str()).collect();
    assert!(messages.contains(&"LocalQueue team-a doesn't exist"), "{messages:?}");
}

#[test]
fn a_workload_that_makes_no_gang_is_told_why_naming_the_field_and_a_list_of_several_is_replaced_by_one() {
    let mut bad = workload("bad", 2);
    bad.spec.pod_sets[0].template["spec"]["containers"] = json!("not a list");
    let mut many = workload("many", 2);
    many.status.as_mut().expect("status").nominated_cluster_names = Some(vec!["east".into(), "west".into()]);
    let o = observed(vec![member("east", &[]), member("west", &[])], vec![bad, many]);
    let plan = cycle(&o, 0);
    assert!(nomination(&plan, "bad").is_none(), "{:?}", plan.nominations);
    let e = plan.workload_events.iter().find(|e| e.object == "bad" && e.kind == Kind::Workload).expect("event");
    assert_eq!(e.reason, EventReason::Invalid);
    assert!(e.message.starts_with("spec.podSets[0].template.spec:"), "{}", e.message);
    let n = nomination(&plan, "many").expect("replaced");
    assert_eq!(n.clusters.len(), 1, "{n:?}");
    let said = plan.workload_events.iter().find(|e| e.object == "many" && e.kind == Kind::Workload).expect("event");
    assert!(said.message.contains("2 clusters were nominated; Stowage nominates one"), "{}", said.message);
}

/// A Workload Kueue evicted (on its worker, or deactivated) after MultiKueue copied its
/// TrainJob's running counts to the hub, its quota still held, no cluster.
fn evicted_on_the_hub(evicted_s_ago: i64) -> (Workload, api::trainer::TrainJob) {
    let mut w = workload("w1", 1);
    let status = w.status.as_mut().expect("status");
    status.conditions.push(yaml(&format!(
        "{{type: Evicted, status: 'True', reason: AdmissionCheck, message: At least one admission check is false, \
         lastTransitionTime: '{}'}}",
        at(-evicted_s_ago).0
    )));
    let tj = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "w1", "namespace": "team-a", "uid": "tj-w1", "resourceVersion": "12"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": true, "managedBy": "kueue.x-k8s.io/multikueue"},
        "status": {"conditions": [{"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed",
                                   "lastTransitionTime": at(-200).0.to_string()}],
                   "jobsStatus": [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0, "suspended": 0}]}}))
    .expect("trainjob");
    (w, tj)
}

/// Kueue v0.17 keeps an evicted Workload's quota until its job shows no active jobs; on the hub
/// the TrainJob's counts are MultiKueue's stale copy (the testbed showed it, upstream
/// kubernetes-sigs/kueue#15380), so Stowage clears them once nothing can be running, and only
/// then: not before the settle time, not while Kueue cannot reach a worker or a worker is
/// silent (the copy might still run there), not for a TrainJob not suspended or not its owner,
/// not once the counts are 0.
#[test]
fn an_evicted_workload_held_by_its_trainjobs_stale_counts_has_them_cleared_once_nothing_can_run() {
    let (w, tj) = evicted_on_the_hub(90);
    let mut o = observed(vec![member("east", &[]), member("west", &[])], vec![w]);
    o.trainjobs = vec![tj];
    let plan = cycle(&o, 0);
    let write = plan.statuses.iter().find(|s| s.name == "w1").expect("the stale counts cleared");
    assert_eq!((write.jobs[0].active, write.jobs[0].ready), (0, 0), "{write:?}");
    assert_eq!(write.conditions, o.trainjobs[0].status.as_ref().expect("status").conditions, "conditions kept");
    assert!(plan.nominations.is_empty(), "nothing to nominate until Kueue queues it again");
    let told: Vec<&str> = plan
        .workload_events
        .iter()
        .filter(|e| e.reason == EventReason::StaleStatusCleared)
        .map(|e| e.kind.as_str())
        .collect();
    assert_eq!(told, ["Workload", "TrainJob"], "{:?}", plan.workload_events);
    assert!(plan.workload_events[0].message.contains("kubernetes-sigs/kueue#15380"), "{:?}", plan.workload_events);

    let untouched = |o: &Observed, why: &str| {
        let plan = cycle(o, 0);
        assert!(plan.statuses.is_empty(), "{why}: {:?}", plan.statuses);
    };
    let mut early = o.clone();
    early.workloads = vec![evicted_on_the_hub(30).0];
    untouched(&early, "evicted 30 s ago, the settle time is 60 s");
    let mut unreached = o.clone();
    unreached.multikueue_clusters[1].status = None;
    untouched(&unreached, "Kueue does not reach west");
    let mut silent = o.clone();
    silent.members[0].status.as_mut().expect("status").heartbeat_time = Some(at(-600).0.to_string());
    untouched(&silent, "east is silent");
    let mut running = o.clone();
    running.trainjobs[0].spec.suspend = Some(false);
    untouched(&running, "not suspended");
    let mut other_owner = o.clone();
    other_owner.trainjobs[0].metadata.uid = Some("another".into());
    untouched(&other_owner, "its owner is not the TrainJob of that name");
    let mut cleared = o.clone();
    cleared.trainjobs[0].status.as_mut().expect("status").jobs_status[0].active = 0;
    untouched(&cleared, "no active jobs");
    let mut admitted = o;
    admitted.workloads[0].status.as_mut().expect("status").cluster_name = Some("east".into());
    untouched(&admitted, "it has a cluster");
}
