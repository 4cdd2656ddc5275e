//! One dispatcher cycle over hub objects: placing once, deciding again without writing, and
//! moving TrainJobs off members that went silent or could not start them, with back-off.

use api::stowage::{
    ClusterBackoff, DomainCapacity, MemberCluster, MemberClusterSpec, MemberClusterStatus, Placement, PlacementPhase,
    PlacementStatus, TopologyLevel,
};
use api::trainer::{ClusterTrainingRuntime, TrainJob, TrainJobStatus};
use dispatcher::decide::{Observed, Plan, Settings, decide};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use scheduler_core::Config;
use serde_json::json;

const RUNTIME: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer/runtimes/torch_distributed.yaml");

fn now() -> Timestamp {
    "2026-11-22T10:00:00Z".parse().expect("time")
}

fn at(offset_s: i64) -> Time {
    Time(now() + SignedDuration::from_secs(offset_s))
}

/// A member with one rack of four free 8-GPU nodes that last reported `age_s` seconds ago.
fn member(name: &str, age_s: i64) -> MemberCluster {
    let mut m = MemberCluster::new(name, MemberClusterSpec::default());
    m.status = Some(MemberClusterStatus {
        heartbeat_time: Some(at(-age_s).0.to_string()),
        topology_levels: vec![TopologyLevel { level: "rack".into(), node_label: "rack".into() }],
        domains: vec![DomainCapacity {
            path: vec![format!("{name}-r0")],
            flavor: "h100".into(),
            class: Default::default(),
            nodes: 4,
            gpus_per_node: 8,
            allocatable_gpus: 32,
            free_gpus: 32,
            free_histogram: vec![0, 0, 0, 0, 0, 0, 0, 0, 4],
            cpu_milli_per_node: None,
            memory_mib_per_node: None,
        }],
        ..MemberClusterStatus::default()
    });
    m
}

fn observed(members: Vec<MemberCluster>) -> Observed {
    let runtime: ClusterTrainingRuntime =
        input_limits::yaml::from_str(&std::fs::read_to_string(RUNTIME).expect("runtime")).expect("yaml");
    let tj: TrainJob =
        serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "t", "namespace": "ml", "uid": "u1", "creationTimestamp": "2026-11-22T09:00:00Z"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}}}))
        .expect("trainjob");
    Observed { trainjobs: vec![tj], cluster_runtimes: vec![runtime], members, ..Observed::default() }
}

fn settings() -> Settings {
    Settings {
        member_grace: std::time::Duration::from_secs(120),
        backoff: std::time::Duration::from_secs(60),
        max_backoff: std::time::Duration::from_secs(600),
        ..Settings::default()
    }
}

/// What the hub holds after `plan` is written: its Placements and TrainJob statuses.
fn written(mut o: Observed, plan: &Plan) -> Observed {
    for (i, w) in plan.placements.iter().enumerate() {
        let mut p = w.object();
        p.metadata.resource_version = Some(format!("rv-{i}-{}", w.spec.epoch));
        p.status =
            o.placements.iter().find(|old| old.metadata.name == p.metadata.name).and_then(|old| old.status.clone());
        o.placements.retain(|old| old.metadata.name != p.metadata.name);
        o.placements.push(p);
    }
    for s in &plan.statuses {
        let tj = o.trainjobs.iter_mut().find(|t| t.metadata.name.as_deref() == Some(&s.name)).expect("trainjob");
        tj.status = Some(TrainJobStatus {
            conditions: s.conditions.clone(),
            jobs_status: s.jobs.clone(),
            ..Default::default()
        });
    }
    o
}

/// Asserts the plan writes nothing to the hub (its figures are for the metrics).
#[track_caller]
fn assert_writes_nothing(plan: &Plan) {
    let nothing =
        plan.placements.is_empty() && plan.statuses.is_empty() && plan.queues.is_empty() && plan.members.is_empty();
    assert!(nothing, "writes: {plan:#?}");
}

fn report(o: &mut Observed, phase: PlacementPhase, epoch: i64) {
    o.placements[0].status = Some(PlacementStatus { phase, observed_epoch: epoch, ..PlacementStatus::default() });
}

#[test]
fn a_trainjob_is_placed_once_and_deciding_again_writes_nothing() {
    let o = observed(vec![member("a", 1), member("b", 1)]);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    assert_eq!(plan.placements.len(), 1);
    let w = &plan.placements[0];
    assert_eq!((w.spec.epoch, w.replaces.as_deref(), w.owner_uid.as_str()), (1, None, "u1"));
    assert!(w.spec.cluster.is_some());
    let mut o = written(o, &plan);
    let again = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(5));
    assert_writes_nothing(&again);
    // Applied, its pods not bound: still waiting, for them, with the member's word at once.
    o.placements[0].status = Some(PlacementStatus {
        phase: PlacementPhase::Applied,
        observed_epoch: 1,
        message: Some("Unschedulable: 0/4 nodes are available: 4 node(s) didn't match node selector".into()),
        ..PlacementStatus::default()
    });
    let starting = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(8));
    let c = &starting.statuses[0].conditions[0];
    assert_eq!((c.type_.as_str(), c.status.as_str(), c.reason.as_str()), ("Pending", "True", "Starting"));
    assert!(
        c.message.ends_with(
            "its pods wait there: Unschedulable: 0/4 nodes are available: 4 node(s) didn't match node selector"
        ),
        "{}",
        c.message
    );
    let mut o = written(o, &starting);
    report(&mut o, PlacementPhase::Running, 1);
    let running = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(10));
    assert!(running.placements.is_empty());
    // Running: Stowage's own condition is gone, as Trainer's conditions read for a running job
    // (and the Kubeflow SDK reads Running only from none).
    assert_eq!(running.statuses[0].conditions, vec![]);
    let mut o = written(o, &running);
    // Its member counts its pods: nothing to write, nothing to remember.
    count(&mut o, "u1/1");
    assert_writes_nothing(&decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(20)));
}

/// The placed member's report counts the placement's pods (`<uid>/<epoch>`).
fn count(o: &mut Observed, key: &str) {
    let cluster = o.placements[0].spec.cluster.clone().expect("placed");
    let m = o.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(&cluster)).expect("member");
    m.status.as_mut().expect("status").counted.push(key.into());
}

fn member_condition<'p>(plan: &'p Plan, name: &str) -> Option<&'p Condition> {
    plan.members.iter().find(|m| m.name == name)?.conditions.iter().find(|c| c.type_ == "ReportAccepted")
}

/// One member's report that cannot be read (a path that disagrees with its levels, absurd
/// sizes, an unreadable heartbeat) leaves that member out, with a condition saying why; the
/// rest of the fleet places as before.
#[test]
fn a_member_whose_report_cannot_be_read_is_left_out_alone_with_a_condition_naming_the_field() {
    let mut bad_path = member("a", 1);
    bad_path.status.as_mut().expect("status").domains[0].path.push("extra".into());
    let mut huge = member("c", 1);
    let d = &mut huge.status.as_mut().expect("status").domains[0];
    (d.nodes, d.free_histogram) = (4_000_000_000, Vec::new());
    let o = observed(vec![bad_path, member("b", 1), huge]);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    assert_eq!(plan.placements.len(), 1, "{plan:#?}");
    assert_eq!(plan.placements[0].spec.cluster.as_deref(), Some("b"));
    let a = member_condition(&plan, "a").expect("a's condition");
    assert_eq!((a.status.as_str(), a.reason.as_str()), ("False", "InvalidReport"));
    assert!(a.message.contains("status.domains[0]: path has 2 values, the member reports 1 levels"), "{}", a.message);
    let c = member_condition(&plan, "c").expect("c's condition");
    assert!(c.message.contains("nodes: the member reports more than 100000 nodes"), "{}", c.message);
    assert!(member_condition(&plan, "b").is_none(), "a good member gets no write");
}

#[test]
fn an_unreadable_heartbeat_keeps_what_runs_there_for_the_grace_then_moves_it() {
    let (mut o, first) = placed_and_running(vec![member("a", 1), member("b", 1)]);
    count(&mut o, "u1/1");
    let m = o.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(first.as_str())).expect("member");
    m.status.as_mut().expect("status").heartbeat_time = Some("yesterday".into());
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    assert!(plan.placements.is_empty(), "not re-placed at once: {plan:#?}");
    let c = member_condition(&plan, &first).expect("condition");
    assert!(c.message.starts_with("status.heartbeatTime: \"yesterday\" is not an RFC 3339 time"), "{}", c.message);
    assert_eq!(c.last_transition_time, at(30));
    // The condition stays; the grace runs from its transition.
    let m = o.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(first.as_str())).expect("member");
    m.status.as_mut().expect("status").conditions = vec![c.clone()];
    assert!(decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(140)).placements.is_empty());
    let moved = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(160));
    let w = &moved.placements[0];
    assert_eq!((w.spec.epoch, w.spec.backoff[0].reason.as_str()), (2, "MemberUnusable"));
    assert_ne!(w.spec.cluster.as_deref(), Some(first.as_str()));
    // Readable again: the condition turns True.
    let m = o.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(first.as_str())).expect("member");
    m.status.as_mut().expect("status").heartbeat_time = Some(at(155).0.to_string());
    let back = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(160));
    assert_eq!(member_condition(&back, &first).map(|c| c.status.as_str()), Some("True"));
}

/// `spec.cluster` edited by hand, its label left: no agent owns it as it stands, so it is
/// placed again at a new epoch, without a back-off from either member.
#[test]
fn a_placement_whose_cluster_was_edited_by_hand_is_placed_again_not_lost() {
    let (mut o, first) = placed_and_running(vec![member("a", 1), member("b", 1)]);
    let other = if first == "a" { "b" } else { "a" };
    o.placements[0].spec.cluster = Some(other.into());
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    let w = &plan.placements[0];
    assert_eq!(w.spec.epoch, 2);
    assert!(w.spec.backoff.is_empty(), "{:?}", w.spec.backoff);
    let labelled = w.object().metadata.labels.and_then(|l| l.get(api::stowage::CLUSTER_LABEL).cloned());
    assert_eq!(labelled, w.spec.cluster, "written consistent again");
}

/// A `Succeeded` or `Lost` the member's own capacity report contradicts (its pods still counted
/// running) neither finishes nor moves the TrainJob; once the pods are gone, `Succeeded` does.
#[test]
fn a_finished_or_lost_claim_its_members_report_contradicts_neither_finishes_nor_moves_the_trainjob() {
    let (mut o, _) = placed_and_running(vec![member("a", 1), member("b", 1)]);
    count(&mut o, "u1/1");
    report(&mut o, PlacementPhase::Succeeded, 1);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    let complete = |plan: &Plan| {
        plan.statuses.iter().flat_map(|s| &s.conditions).any(|c| c.type_ == "Complete" && c.status == "True")
    };
    assert!(!complete(&plan), "{plan:#?}");
    // Nor does a Lost evict it.
    report(&mut o, PlacementPhase::Lost, 1);
    assert!(decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30)).placements.is_empty());
    report(&mut o, PlacementPhase::Succeeded, 1);
    for m in &mut o.members {
        m.status.as_mut().expect("status").counted.clear();
    }
    assert!(complete(&decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(31))));
}

/// Reported Running, then no longer counted by its member (the JobSet gone without a report):
/// after the grace period it is placed again on the same member at a new epoch, never moved
/// elsewhere (nothing says the member stopped running it); a new count in time stops the clock.
#[test]
fn a_running_placement_its_member_stops_counting_is_placed_again_there_after_the_grace() {
    let (mut o, first) = placed_and_running(vec![member("a", 1), member("b", 1)]);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(10));
    assert!(plan.placements.is_empty());
    let since = plan.uncounted_since.values().next().copied().expect("remembered");
    assert_eq!(since, at(10).0);
    o.uncounted_since = plan.uncounted_since.clone();
    // The members keep reporting, without it.
    for m in &mut o.members {
        m.status.as_mut().expect("status").heartbeat_time = Some(at(130).0.to_string());
    }
    assert!(decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(130)).placements.is_empty());
    let again = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(140));
    let w = &again.placements[0];
    assert_eq!((w.spec.epoch, w.spec.cluster.as_deref()), (2, Some(first.as_str())));
    assert!(w.spec.backoff.is_empty(), "{:?}", w.spec.backoff);
    // Counted again within the grace: nothing moves, nothing is remembered.
    count(&mut o, "u1/1");
    let kept = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(140));
    assert!(kept.placements.is_empty() && kept.uncounted_since.is_empty(), "{kept:#?}");
}

/// Places the TrainJob, reports it running there, and returns the hub state and its member.
fn placed_and_running(members: Vec<MemberCluster>) -> (Observed, String) {
    let o = observed(members);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    let cluster = plan.placements[0].spec.cluster.clone().expect("placed");
    let mut o = written(o, &plan);
    report(&mut o, PlacementPhase::Running, 1);
    (o, cluster)
}

fn go_silent(o: &mut Observed, cluster: &str) {
    let m = o.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(cluster)).expect("member");
    m.status.as_mut().expect("status").heartbeat_time = Some(at(-300).0.to_string());
}

#[test]
fn a_silent_members_trainjob_moves_to_another_with_a_new_epoch_and_a_back_off() {
    let (mut o, first) = placed_and_running(vec![member("a", 1), member("b", 1)]);
    go_silent(&mut o, &first);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    let w = &plan.placements[0];
    let other = if first == "a" { "b" } else { "a" };
    assert_eq!((w.spec.cluster.as_deref(), w.spec.epoch, w.replaces.as_deref()), (Some(other), 2, Some("rv-0-1")));
    assert_eq!(
        w.spec.backoff,
        [ClusterBackoff { cluster: first, reason: "MemberSilent".into(), until: at(90).0.to_string(), attempts: 1 }]
    );
}

#[test]
fn a_gang_that_would_not_start_backs_off_longer_each_time() {
    let (mut o, first) = placed_and_running(vec![member("a", 1), member("b", 1)]);
    o.placements[0].spec.backoff = vec![ClusterBackoff {
        cluster: first.clone(),
        reason: "Unschedulable".into(),
        until: at(-1).0.to_string(),
        attempts: 1,
    }];
    report(&mut o, PlacementPhase::Unschedulable, 1);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    let b = &plan.placements[0].spec.backoff[0];
    assert_eq!((b.reason.as_str(), b.attempts, b.until.as_str()), ("Unschedulable", 2, at(150).0.to_string().as_str()));
    assert_ne!(plan.placements[0].spec.cluster.as_deref(), Some(first.as_str()));
}

#[test]
fn with_nowhere_else_to_go_the_trainjob_is_withdrawn_and_waits_out_its_back_off() {
    let (mut o, only) = placed_and_running(vec![member("a", 1)]);
    go_silent(&mut o, &only);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    let w = &plan.placements[0];
    assert_eq!((w.spec.cluster.as_deref(), w.spec.epoch), (None, 2), "withdrawn, so the silent member fences it");
    let pending = &plan.statuses[0].conditions[0];
    assert_eq!((pending.type_.as_str(), pending.status.as_str()), ("Pending", "True"));
    assert_eq!(plan.pending, 1);

    // The member is back but the TrainJob keeps away until its back-off ends.
    let mut o = written(o, &plan);
    o.members = vec![member("a", -100)];
    let waiting = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(60));
    assert!(waiting.placements.is_empty(), "{waiting:?}");
    let later = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(120));
    let w = &later.placements[0];
    assert_eq!((w.spec.cluster.as_deref(), w.spec.epoch), (Some("a"), 3));
}

#[test]
fn a_report_about_an_older_epoch_moves_nothing() {
    let (mut o, _) = placed_and_running(vec![member("a", 1), member("b", 1)]);
    o.placements[0].spec.epoch = 2;
    report(&mut o, PlacementPhase::Unschedulable, 1);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    assert!(plan.placements.is_empty(), "{plan:?}");
}

/// `n` copies of `tj` as stored TrainJobs: `t<i>`, UID `u<i>`, resourceVersion `10 + i`.
fn numbered(tj: &TrainJob, n: usize) -> Vec<TrainJob> {
    (0..n)
        .map(|i| {
            let mut t = tj.clone();
            t.metadata.name = Some(format!("t{i}"));
            t.metadata.uid = Some(format!("u{i}"));
            t.metadata.resource_version = Some(format!("{}", 10 + i));
            t
        })
        .collect()
}

/// Each cycle hands its translations to the next (`Plan::translations` →
/// `Observed::translations`): deciding with them is deciding without them, cycle after cycle,
/// and only unfinished TrainJobs are remembered.
#[test]
fn cycles_fed_their_own_translations_decide_as_cycles_without_them() {
    let mut o = observed(vec![member("a", 1), member("b", 1)]);
    o.cluster_runtimes[0].metadata.uid = Some("r1".into());
    o.cluster_runtimes[0].metadata.resource_version = Some("1".into());
    o.trainjobs = numbered(&o.trainjobs[0], 6);
    let greedy = scheduler_core::fixture::greedy();
    let mut remembered = Default::default();
    for step in 0..4 {
        let fresh = decide(&o, &greedy, &settings(), at(step * 5));
        let with = Observed { translations: std::mem::take(&mut remembered), ..o.clone() };
        let mut plan = decide(&with, &greedy, &settings(), at(step * 5));
        assert_eq!(plan, fresh, "step {step}");
        assert_eq!(plan.translations.len(), o.trainjobs.len() - step as usize, "step {step}");
        remembered = std::mem::take(&mut plan.translations);
        o = written(o, &plan);
        // One more finishes each step; another is edited (a new resourceVersion).
        o.trainjobs[step as usize].status = Some(TrainJobStatus {
            conditions: vec![Condition {
                type_: "Complete".into(),
                status: "True".into(),
                reason: "JobSetCompleted".into(),
                message: String::new(),
                last_transition_time: at(step * 5),
                observed_generation: None,
            }],
            ..Default::default()
        });
        o.trainjobs[5].metadata.resource_version = Some(format!("{}", 20 + step));
    }
}

#[test]
fn one_cycle_places_every_trainjob_that_fits() {
    let mut o = observed(vec![member("a", 1), member("b", 1)]);
    o.trainjobs = numbered(&o.trainjobs[0], 6);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    // Two members of 4 nodes hold four 2-node gangs; the other two wait.
    assert_eq!((plan.placements.len(), plan.pending), (4, 2), "{plan:#?}");
}

#[test]
fn a_running_trainjob_counts_against_its_queues_quota_after_its_member_counts_it() {
    let mut o = observed(vec![member("a", 1), member("b", 1)]);
    let q: api::stowage::Queue = serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": "default"},
        "spec": {"quotas": [{"flavor": "h100", "resource": "nvidia.com/gpu", "nominalQuota": "16"}]}}))
    .expect("queue");
    o.queues = vec![q];
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    let cluster = plan.placements[0].spec.cluster.clone().expect("placed");
    let mut o = written(o, &plan);
    report(&mut o, PlacementPhase::Running, 1);
    // The member now counts the gang's bound pods in its capacity: the placement is no longer
    // assumed, but its 16 GPUs still use the queue's whole quota.
    let m = o.members.iter_mut().find(|m| m.metadata.name.as_deref() == Some(cluster.as_str())).expect("member");
    let status = m.status.as_mut().expect("status");
    status.counted = vec!["u1/1".into()];
    status.domains[0].free_gpus = 16;
    status.domains[0].free_histogram = vec![2, 0, 0, 0, 0, 0, 0, 0, 2];
    let mut second = o.trainjobs[0].clone();
    second.metadata.name = Some("t2".into());
    second.metadata.uid = Some("u2".into());
    second.status = None;
    o.trainjobs.push(second);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(10));
    assert!(plan.placements.is_empty(), "over quota: {plan:#?}");
    let st = plan.statuses.iter().find(|s| s.name == "t2").expect("t2 status");
    let pending = st.conditions.iter().find(|c| c.type_ == "Pending").expect("pending condition");
    assert!(pending.message.contains("quota"), "{}", pending.message);
}

fn trainjob(
    name: &str,
    uid: &str,
    nodes: u32,
    created_s: i64,
    annotations: serde_json::Value,
    extra: serde_json::Value,
) -> TrainJob {
    let mut spec = json!({"runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": nodes, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "annotations": annotations,
                     "creationTimestamp": at(created_s).0.to_string()},
        "spec": spec}))
    .expect("trainjob")
}

/// A member's report that placement `key`'s pods are bound, one to each of `nodes` whole 8-GPU
/// nodes named `<prefix><n>` in rack `rack`, and counted.
fn bind(status: &mut MemberClusterStatus, key: &str, prefix: &str, rack: &str, nodes: u32) {
    status.counted = vec![key.into()];
    status.bound = vec![api::stowage::BoundPlacement {
        placement: key.into(),
        nodes: (0..nodes)
            .map(|n| api::stowage::BoundNode {
                node: format!("{prefix}{n}"),
                path: vec![rack.into()],
                flavor: "h100".into(),
                class: Default::default(),
                gpus_per_node: 8,
                free_gpus: 0,
                pods: vec![api::stowage::PodSetCount { pod_set: "node".into(), pods: 1 }],
            })
            .collect(),
    }];
}

/// One rack of four nodes on member `m`, three of them held by TrainJob `running` (started
/// 100 s ago, `activeDeadlineSeconds: 600`), whose member reports where its pods are.
fn three_of_four_nodes_busy() -> Observed {
    let mut m = member("m", 1);
    let status = m.status.as_mut().expect("status");
    status.domains[0].free_gpus = 8;
    status.domains[0].free_histogram = vec![3, 0, 0, 0, 0, 0, 0, 0, 1];
    bind(status, "ur/1", "n", "m-r0", 3);
    let mut o = observed(vec![m]);
    o.trainjobs = vec![trainjob("running", "ur", 3, -200, json!({}), json!({"activeDeadlineSeconds": 600}))];
    let spec = api::stowage::PlacementSpec {
        train_job_uid: "ur".into(),
        cluster: Some("m".into()),
        epoch: 1,
        ..api::stowage::PlacementSpec::default()
    };
    let mut p = Placement::new("running", spec);
    p.metadata.namespace = Some("ml".into());
    p.metadata.labels = Some([(api::stowage::CLUSTER_LABEL.to_string(), "m".to_string())].into());
    p.metadata.resource_version = Some("rv-1".into());
    o.placements = vec![p];
    o.placements[0].status = Some(PlacementStatus {
        phase: PlacementPhase::Running,
        observed_epoch: 1,
        start_time: Some(at(-100).0.to_string()),
        ..PlacementStatus::default()
    });
    o
}

#[test]
fn a_blocked_trainjob_gets_a_reservation_from_running_deadlines_and_only_a_short_one_backfills() {
    let with_whole_rack_waiting = |waited_s: i64| {
        let mut o = three_of_four_nodes_busy();
        o.queues = vec![annotated_default_queue()];
        o.trainjobs.push(trainjob(
            "whole-rack",
            "ub",
            4,
            -waited_s,
            json!({"stowage.dev/priority": "10", "stowage.dev/topology": "required:rack"}),
            json!({}),
        ));
        o.trainjobs.push(trainjob(
            "short",
            "us",
            1,
            -40,
            json!({"stowage.dev/expected-runtime-seconds": "60"}),
            json!({}),
        ));
        o.trainjobs.push(trainjob("unknown", "uu", 1, -30, json!({}), json!({})));
        o
    };
    // Waiting less than the policy's bound (a day): no capacity is held for it yet, and the
    // first TrainJob behind it that fits starts.
    let plan = decide(&with_whole_rack_waiting(50), &Config::stowage(), &settings(), Time(now()));
    let waits = pending_of(&plan, "whole-rack").expect("pending");
    assert_ne!(waits.reason, "Reserved", "{}", waits.message);
    let placed: Vec<&str> = plan.placements.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(placed, ["short"]);
    assert!(pending_of(&plan, "unknown").is_some());
    // Waiting a day and more: reserved for.
    let plan = decide(&with_whole_rack_waiting(90_000), &Config::stowage(), &settings(), Time(now()));
    let pending = |name: &str| pending_of(&plan, name);
    let reserved = pending("whole-rack").expect("pending");
    assert_eq!(reserved.reason, "Reserved");
    assert!(
        reserved.message.starts_with("capacity reserved on cluster m, expected free in about 500 s"),
        "{}",
        reserved.message
    );
    let placed: Vec<&str> = plan.placements.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(placed, ["short"], "ends in 60 s, before the reservation starts in 500 s");
    assert!(pending("unknown").is_some(), "states no run time: it may not use the held node");
}

/// Shorter TrainJobs first, within a bound (`--short-first`, on by default): of two waiting
/// for the one free node, the one stating it ends sooner goes first though submitted later;
/// one stating nothing counts the whole cap. Off, submit order, as Kueue.
#[test]
fn the_trainjob_that_states_it_ends_sooner_goes_first_to_the_free_node() {
    let with = |annotations: serde_json::Value, extra: serde_json::Value| {
        let mut o = three_of_four_nodes_busy();
        o.trainjobs.push(trainjob("long", "ul", 1, -100, json!({}), json!({"activeDeadlineSeconds": 36_000})));
        o.trainjobs.push(trainjob("quick", "uq", 1, -50, annotations, extra));
        o
    };
    let placed = |o: &Observed, config: &Config| {
        let plan = decide(o, config, &settings(), Time(now()));
        plan.placements.iter().map(|w| w.name.clone()).collect::<Vec<_>>()
    };
    let annotated = with(json!({"stowage.dev/expected-runtime-seconds": "600"}), json!({}));
    assert_eq!(placed(&annotated, &Config::stowage()), ["quick"]);
    let deadline = with(json!({}), json!({"activeDeadlineSeconds": 600}));
    assert_eq!(placed(&deadline, &Config::stowage()), ["quick"]);
    let silent = with(json!({}), json!({}));
    assert_eq!(placed(&silent, &Config::stowage()), ["long"], "ten hours count six; stating nothing counts six too");
    let off = Config { short_first: None, ..Config::stowage() };
    assert_eq!(placed(&annotated, &off), ["long"]);
}

/// The cap grows with the queue (`ShortFirst::in_force`): where the TrainJobs waiting have
/// waited a day on average (30 h and 20 h), one stating an hour goes first to the free node
/// though one stating twenty was submitted ten hours before it; with the cap fixed at six hours
/// the older goes first (ordered 24 h ago against 19 h).
#[test]
fn under_a_long_queue_the_cap_grows_and_the_shorter_trainjob_still_goes_first() {
    let mut o = three_of_four_nodes_busy();
    let hours = |h: i64| json!({"activeDeadlineSeconds": h * 3600});
    o.trainjobs.push(trainjob("long", "ul", 1, -30 * 3600, json!({}), hours(20)));
    o.trainjobs.push(trainjob("quick", "uq", 1, -20 * 3600, json!({}), hours(1)));
    let placed = |config: &Config| {
        let plan = decide(&o, config, &settings(), Time(now()));
        plan.placements.iter().map(|w| w.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(placed(&Config::stowage()), ["quick"]);
    let fixed = scheduler_core::ShortFirst { grows: false, ..scheduler_core::ShortFirst::DEFAULT };
    assert_eq!(placed(&Config { short_first: Some(fixed), ..Config::stowage() }), ["long"]);
    // The gauge says which cap the cycle ordered by: a day (25 h waited on average), six hours
    // fixed, 0 with the order off.
    let cap = |config: &Config| decide(&o, config, &settings(), Time(now())).figures.short_first_cap_s;
    assert_eq!(cap(&Config::stowage()), 86_400);
    assert_eq!(cap(&Config { short_first: Some(fixed), ..Config::stowage() }), 21_600);
    assert_eq!(cap(&Config { short_first: None, ..Config::stowage() }), 0);
    // No member reports a capacity, so no cycle runs: the gauge still says the cap those
    // waiting would be ordered by, not the one set. The running TrainJob, its member gone,
    // waits too (created 200 s ago): 16.7 h on average, twelve hours.
    let mut silent = o.clone();
    silent.members.clear();
    let plan = decide(&silent, &Config::stowage(), &settings(), Time(now()));
    assert_eq!(plan.figures.short_first_cap_s, 43_200);
}

#[test]
fn with_the_batch_optimiser_a_trainjob_moves_over_so_one_that_needs_its_gpus_fits_too() {
    // Two 4-node members, `a` of H100s and `b` of A100s. The first TrainJob takes either; the
    // second only H100s. Greedy gives the first `a` (all else equal), and the second waits.
    let mut b = member("b", 1);
    b.status.as_mut().expect("status").domains[0].flavor = "a100".into();
    let mut o = observed(vec![member("a", 1), b]);
    o.trainjobs = vec![
        trainjob("any", "u1", 4, -20, json!({}), json!({})),
        trainjob("h100-only", "u2", 4, -10, json!({"stowage.dev/gpu-flavor": "h100"}), json!({})),
    ];
    let cluster_of =
        |plan: &Plan, name: &str| plan.placements.iter().find(|p| p.name == name).and_then(|p| p.spec.cluster.clone());
    let greedy = decide(&o, &Config::stowage(), &settings(), Time(now()));
    assert_eq!((cluster_of(&greedy, "any").as_deref(), greedy.pending), (Some("a"), 1), "{greedy:#?}");
    assert!(greedy.batch.is_none());

    let config = Config { batch: Some(scheduler_core::Batch::DEFAULT), ..Config::stowage() };
    let plan = decide(&o, &config, &settings(), Time(now()));
    assert_eq!(cluster_of(&plan, "any").as_deref(), Some("b"), "{plan:#?}");
    assert_eq!(cluster_of(&plan, "h100-only").as_deref(), Some("a"));
    assert_eq!(plan.pending, 0);
    let report = plan.batch.expect("the optimiser ran");
    assert!(report.kept_ilp && report.gap() == Some(0.0), "{report:?}");
}

fn suspend(o: &mut Observed, yes: bool) {
    o.trainjobs[0].spec.suspend = Some(yes);
}

/// The `Pending` condition the plan writes on TrainJob `name`.
fn pending_of(plan: &Plan, name: &str) -> Option<Condition> {
    let status = plan.statuses.iter().find(|s| s.name == name)?;
    status.conditions.iter().find(|c| c.type_ == "Pending").cloned()
}

fn condition<'a>(plan: &'a Plan, type_: &str) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    plan.statuses.first()?.conditions.iter().find(|c| c.type_ == type_)
}

#[test]
fn a_trainjob_created_suspended_is_not_placed_nor_counted_and_resuming_places_it() {
    let mut o = observed(vec![member("a", 1)]);
    suspend(&mut o, true);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    assert!(plan.placements.is_empty(), "{plan:#?}");
    assert_eq!(plan.pending, 0);
    let c = condition(&plan, "Suspended").expect("suspended");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        ("True", "Suspended", "TrainJob is suspended")
    );
    assert!(condition(&plan, "Pending").is_none());
    let mut o = written(o, &plan);
    assert_writes_nothing(&decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(5)));
    suspend(&mut o, false);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(10));
    assert_eq!(plan.placements.len(), 1, "placed within the cycle it is resumed in");
    assert_eq!(plan.placements[0].spec.cluster.as_deref(), Some("a"));
    let c = condition(&plan, "Suspended").expect("resumed");
    assert_eq!((c.status.as_str(), c.reason.as_str(), c.message.as_str()), ("False", "Resumed", "TrainJob is resumed"));
}

#[test]
fn suspending_a_running_trainjob_withdraws_it_frees_its_quota_and_resuming_places_it_again() {
    let (mut o, cluster) = placed_and_running(vec![member("a", 1)]);
    let running = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(5));
    let mut o2 = written(o.clone(), &running);
    assert!(decide(&o2, &scheduler_core::fixture::greedy(), &settings(), at(6)).placements.is_empty());
    suspend(&mut o2, true);
    let plan = decide(&o2, &scheduler_core::fixture::greedy(), &settings(), at(10));
    let w = &plan.placements[0];
    // A new epoch with no member: the agent deletes the JobSet.
    assert_eq!((w.spec.cluster.as_deref(), w.spec.epoch, w.replaces.as_deref()), (None, 2, Some("rv-0-1")));
    assert_eq!(condition(&plan, "Suspended").map(|c| c.status.as_str()), Some("True"));
    o = written(o2, &plan);
    // Withdrawn: deciding again writes nothing more.
    assert_writes_nothing(&decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(12)));
    suspend(&mut o, false);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(20));
    let w = &plan.placements[0];
    assert_eq!((w.spec.cluster.as_deref(), w.spec.epoch), (Some(cluster.as_str()), 3));
}

#[test]
fn a_trainjob_managed_by_multikueue_is_left_alone() {
    let mut o = observed(vec![member("a", 1)]);
    o.trainjobs[0].spec.managed_by = Some("kueue.x-k8s.io/multikueue".into());
    assert_writes_nothing(&decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now())));
}

/// A Queue's `spec.namespaceSelector` decides which namespaces may use it: a TrainJob naming
/// another team's queue waits, saying so, and takes none of its quota.
#[test]
fn a_trainjob_may_use_only_a_queue_whose_namespace_selector_selects_its_namespace() {
    let mut o = observed(vec![member("a", 1)]);
    o.queues = vec![
        serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "team-b"},
            "spec": {"namespaceSelector": {"matchLabels": {"team": "b"}},
                     "quotas": [{"flavor": "h100", "resource": "nvidia.com/gpu", "nominalQuota": "16"}]}}))
        .expect("queue"),
    ];
    o.trainjobs[0].metadata.labels = Some([(api::stowage::QUEUE_LABEL.to_string(), "team-b".to_string())].into());
    o.namespaces =
        vec![serde_json::from_value(json!({"metadata": {"name": "ml", "labels": {"team": "a"}}})).expect("ns")];
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    assert!(plan.placements.is_empty(), "{plan:#?}");
    let c = &plan.statuses[0].conditions[0];
    assert_eq!((c.type_.as_str(), c.reason.as_str()), ("Pending", "NamespaceNotAllowed"));
    assert_eq!(c.message, "namespace ml is not selected by Queue team-b's spec.namespaceSelector");
    o.namespaces[0].metadata.labels = Some([("team".to_string(), "b".to_string())].into());
    assert_eq!(decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now())).placements.len(), 1);
}

/// The default Queue, letting its TrainJobs set their priority by annotation.
fn annotated_default_queue() -> api::stowage::Queue {
    serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": "default"}, "spec": {"allowPriorityAnnotation": true}}))
    .expect("queue")
}

/// Priority is what an admin defined: the PriorityClass the pods name, else the global default;
/// the annotation only where the Queue allows it, and otherwise the TrainJob waits saying so.
#[test]
fn priority_comes_from_priority_classes_and_the_annotation_only_where_the_queue_allows_it() {
    let mut o = observed(vec![member("a", 1)]);
    o.trainjobs[0].metadata.annotations = Some([("stowage.dev/priority".to_string(), "1000".to_string())].into());
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    let c = &plan.statuses[0].conditions[0];
    assert_eq!((c.type_.as_str(), c.reason.as_str()), ("Pending", "PriorityNotAllowed"));
    assert!(
        c.message.starts_with("metadata.annotations[stowage.dev/priority]: Queue default does not allow"),
        "{}",
        c.message
    );
    o.queues = vec![annotated_default_queue()];
    assert_eq!(decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now())).placements.len(), 1);

    // The runtime's pods name a PriorityClass: it must exist; its value is the priority.
    o.trainjobs[0].metadata.annotations = None;
    let mut runtime = serde_json::to_value(&o.cluster_runtimes[0]).expect("runtime");
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["priorityClassName"] =
        "research-high".into();
    o.cluster_runtimes[0] = serde_json::from_value(runtime).expect("runtime");
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    let c = &plan.statuses[0].conditions[0];
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        ("PriorityClassNotFound", "priorityClassName: no PriorityClass with name research-high was found")
    );
    o.priority_classes =
        vec![serde_json::from_value(json!({"metadata": {"name": "research-high"}, "value": 500})).expect("class")];
    assert_eq!(decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now())).placements.len(), 1);

    // Kueue's label names a WorkloadPriorityClass, which comes first, as in Kueue.
    o.trainjobs[0].metadata.labels = Some([("kueue.x-k8s.io/priority-class".to_string(), "urgent".to_string())].into());
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    let c = &plan.statuses[0].conditions[0];
    assert_eq!(
        c.message,
        "metadata.labels[kueue.x-k8s.io/priority-class]: no WorkloadPriorityClass with name urgent was found"
    );
    o.workload_priority_classes =
        vec![serde_json::from_value(json!({"metadata": {"name": "urgent"}, "value": 10000})).expect("class")];
    assert_eq!(decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now())).placements.len(), 1);
}

/// What the metrics are set from: each Placement write says what it placed (queue, member, the
/// narrowest level holding the gang, the wait from creation on a first placement) and why it
/// took a TrainJob off a member; each cycle's figures count TrainJobs by queue and state, the
/// pending by reason, GPUs per member and per queue, and heartbeat ages.
#[test]
fn each_write_says_what_it_placed_or_moved_and_each_cycle_counts_what_the_metrics_show() {
    use dispatcher::decide::figures::{ClusterGpus, JobPhase, QueueGpus, UNKNOWN_QUEUE};
    use dispatcher::decide::{Placed, Redispatch};
    let mut o = observed(vec![member("a", 1), member("b", 5)]);
    o.queues = vec![
        serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "default"},
            "spec": {"cohort": "all", "quotas": [{"flavor": "h100", "resource": "nvidia.com/gpu", "nominalQuota": "8"}]}}))
        .expect("queue"),
        serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue",
            "metadata": {"name": "idle"},
            "spec": {"cohort": "all", "quotas": [{"flavor": "h100", "resource": "nvidia.com/gpu", "nominalQuota": "24", "lendingLimit": "12"}]}}))
        .expect("queue"),
    ];
    // One in a queue nobody made: counted under `unknown`, whatever its label says.
    let mut stray = trainjob("stray", "us", 1, -10, json!({}), json!({}));
    stray.metadata.labels = Some([("stowage.dev/queue".to_string(), "made-up-by-a-user".to_string())].into());
    o.trainjobs.push(stray);
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    let w = plan.placements.iter().find(|w| w.name == "t").expect("t placed");
    let cluster = w.spec.cluster.clone().expect("placed");
    assert_eq!(
        w.effect.placed,
        Some(Placed {
            queue: "default".into(),
            cluster: cluster.clone(),
            locality: Some(scheduler_core::Level::Rack),
            waited: Some(std::time::Duration::from_secs(3600)),
        })
    );
    assert_eq!(w.effect.redispatch, None);
    // Its Events, once written: placed where, once (its status's Pending `Starting` is no
    // second Event at the same moment).
    let placed_events: Vec<String> =
        dispatcher::decide::events::of_placement(w).into_iter().map(|e| e.message).collect();
    assert_eq!(placed_events, [format!("placed on cluster {cluster} (node in rack {cluster}-r0), epoch 1")]);
    let st = plan.statuses.iter().find(|s| s.name == "t").expect("t's status");
    assert!(st.conditions.iter().any(|c| c.type_ == "Pending" && c.reason == "Starting"), "{:?}", st.conditions);
    let names: Vec<&str> = st.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, Vec::<&str>::new());
    let f = &plan.figures;
    assert_eq!(f.trainjobs.get(&("default".to_string(), JobPhase::Placed)), Some(&1));
    assert_eq!(f.trainjobs.get(&(UNKNOWN_QUEUE.to_string(), JobPhase::Pending)), Some(&1));
    assert!(f.trainjobs.keys().all(|(q, _)| q != "made-up-by-a-user"));
    // A Queue with nothing unfinished has its series too, at 0 (the dashboard lists it).
    assert_eq!(f.trainjobs.get(&("idle".to_string(), JobPhase::Pending)), Some(&0));
    assert_eq!(f.pending.get(&(UNKNOWN_QUEUE.to_string(), "UnknownQueue".to_string())), Some(&1), "{f:#?}");
    // 16 GPUs placed on a nominal 8: 8 borrowed, lent by `idle` (within its lending limit).
    assert_eq!(
        f.queue_gpus[&("default".to_string(), "h100".to_string())],
        QueueGpus { nominal: 8, used: 16, borrowed: 8, lent: 0 }
    );
    assert_eq!(
        f.queue_gpus[&("idle".to_string(), "h100".to_string())],
        QueueGpus { nominal: 24, used: 0, borrowed: 0, lent: 8 }
    );
    // As the members report: nothing is used there until their pods are.
    assert_eq!(f.cluster_gpus[&("a".to_string(), "h100".to_string())], ClusterGpus { allocatable: 32, used: 0 });
    assert_eq!((f.heartbeat_age["a"], f.heartbeat_age["b"]), (1.0, 5.0));
    // The stray one waits, created 10 s ago; the default queue has no one waiting: 0.
    assert_eq!(f.oldest_pending.get(UNKNOWN_QUEUE), Some(&10.0));
    assert_eq!(f.oldest_pending.get("default"), Some(&0.0));

    // Its member goes silent: moved, at a new epoch, as a redispatch and not a first wait.
    let mut o = written(o, &plan);
    let t = o.placements.iter().position(|p| p.metadata.name.as_deref() == Some("t")).expect("t");
    o.placements.swap(0, t);
    report(&mut o, PlacementPhase::Running, 1);
    go_silent(&mut o, &cluster);
    let moved = decide(&o, &scheduler_core::fixture::greedy(), &settings(), at(30));
    let w = moved.placements.iter().find(|w| w.name == "t").expect("t moved");
    let moved_why = w.effect.redispatch.as_ref().expect("moved");
    assert_eq!(moved_why.reason, Redispatch::MemberSilent);
    assert_eq!(moved_why.message, format!("member {cluster} stopped reporting"));
    let told: Vec<(String, String)> = dispatcher::decide::events::of_placement(w)
        .into_iter()
        .map(|e| (e.reason.as_str().to_string(), e.name))
        .collect();
    assert_eq!(
        told,
        [
            ("Redispatched".to_string(), "t.redispatched-membersilent".to_string()),
            ("Placed".to_string(), "t.placed-2".to_string())
        ]
    );
    let placed = w.effect.placed.as_ref().expect("placed elsewhere");
    assert_ne!(placed.cluster, cluster);
    assert_eq!(placed.waited, None, "admission wait counts first placements only");
    assert_eq!(moved.figures.heartbeat_age[&cluster], 330.0);
    assert!(!moved.figures.cluster_gpus.contains_key(&(cluster.clone(), "h100".to_string())), "silent: not shown");
}

/// `stowage explain`: a waiting TrainJob's reason, its place in its queue, and what each member
/// alone would answer; members left out say why.
#[test]
fn explain_says_why_a_trainjob_waits_where_it_stands_in_its_queue_and_what_each_member_answers() {
    use dispatcher::decide::explain::explain;
    let busy = |name: &str, free_nodes: u32| {
        let mut m = member(name, 1);
        let d = &mut m.status.as_mut().expect("status").domains[0];
        d.free_gpus = u64::from(free_nodes) * 8;
        d.free_histogram = vec![4 - free_nodes, 0, 0, 0, 0, 0, 0, 0, free_nodes];
        m
    };
    let mut refused = member("d", 1);
    refused.status.as_mut().expect("status").domains[0].path.push("extra".into());
    let mut o = observed(vec![busy("a", 1), busy("b", 2), member("c", 600), refused]);
    o.trainjobs = vec![
        trainjob("first", "u1", 3, -60, json!({"stowage.dev/topology": "required:rack"}), json!({})),
        trainjob("second", "u2", 3, -30, json!({"stowage.dev/topology": "required:rack"}), json!({})),
    ];
    let e = explain(&o, &Config::stowage(), &settings(), Time(now()), "ml", "second").expect("explained");
    assert_eq!(e.queue.as_deref(), Some("default"));
    assert_eq!(e.position, Some((2, 2)), "behind `first`, created earlier");
    assert!(
        e.state.starts_with("pending: NoDomain: pod set node: no rack in any cluster has 3 free slots"),
        "{}",
        e.state
    );
    let said: std::collections::BTreeMap<&str, &str> =
        e.members.iter().map(|(m, w)| (m.as_str(), w.as_str())).collect();
    assert!(said["a"].ends_with("(largest: 1 in cluster a)"), "{}", said["a"]);
    assert!(said["b"].ends_with("(largest: 2 in cluster b)"), "{}", said["b"]);
    assert_eq!(said["c"], "left out: its agent has not reported within the grace period");
    assert!(
        said["d"].starts_with("left out: its report is refused: MemberCluster d: status.domains[0]: path has 2 values"),
        "{}",
        said["d"]
    );
    let text = e.to_string();
    assert!(text.contains("position: 2 of 2 waiting in its queue"), "{text}");
    assert!(explain(&o, &Config::stowage(), &settings(), Time(now()), "ml", "nobody").is_none());
}

/// `stowage explain`'s place in the queue is the cycle's order, not creation order: a TrainJob
/// stating a shorter run time is ahead of an older one, and under a long queue the cap it is
/// counted up to is the one grown with the queue (`ShortFirst::in_force`), as the text says.
#[test]
fn explain_places_a_trainjob_in_its_queue_by_the_order_the_cycle_applies() {
    use dispatcher::decide::explain::explain;
    let hours = |h: i64| json!({"activeDeadlineSeconds": h * 3600});
    let queue = |long_created_s: i64, quick_created_s: i64, long_h: i64| {
        // One node free: the first of the two goes there, the other waits.
        let mut o = three_of_four_nodes_busy();
        o.trainjobs.push(trainjob("long", "ul", 1, long_created_s, json!({}), hours(long_h)));
        o.trainjobs.push(trainjob("quick", "uq", 1, quick_created_s, json!({}), hours(1)));
        o
    };
    let at = |o: &Observed, config: &Config, name: &str| {
        let e = explain(o, config, &settings(), Time(now()), "ml", name).expect("explained");
        (e.position, e.to_string())
    };
    // Minutes apart: the one stating an hour first, the ten-hour one counted six.
    let o = queue(-100, -50, 10);
    let (quick, text) = at(&o, &Config::stowage(), "quick");
    assert_eq!(quick, Some((1, 2)), "{text}");
    assert!(
        text.contains("position: 1 of 2 waiting in its queue (by priority, then creation plus the expected run time counted up to 6h: shorter first)"),
        "{text}"
    );
    assert_eq!(at(&o, &Config::stowage(), "long").0, Some((2, 2)));
    let off = Config { short_first: None, ..Config::stowage() };
    let (quick, text) = at(&o, &off, "quick");
    assert_eq!(quick, Some((2, 2)));
    assert!(text.contains("position: 2 of 2 waiting in its queue (by priority, then creation)\n"), "{text}");
    // Waited 30 h and 20 h, 25 h on average: the cap is a day, and the hour-long one is ahead of
    // the twenty-hour one submitted ten hours before it; with the cap fixed, behind it.
    let o = queue(-30 * 3600, -20 * 3600, 20);
    let (quick, text) = at(&o, &Config::stowage(), "quick");
    assert_eq!(quick, Some((1, 2)), "{text}");
    assert!(text.contains("counted up to 24h: shorter first"), "{text}");
    let fixed = scheduler_core::ShortFirst { grows: false, ..scheduler_core::ShortFirst::DEFAULT };
    let (quick, text) = at(&o, &Config { short_first: Some(fixed), ..Config::stowage() }, "quick");
    assert_eq!(quick, Some((2, 2)), "{text}");
    assert!(text.contains("counted up to 6h: shorter first"), "{text}");
}

/// In MultiKueue mode the TrainJob Kueue queues carries no status of Stowage's: explain says it
/// is Kueue's and where its Workload stands, never "the next cycle places it".
#[test]
fn explain_tells_a_kueue_queued_trainjob_by_its_workload() {
    use dispatcher::decide::explain::explain;
    let mut o = observed(vec![member("a", 1)]);
    o.trainjobs[0].metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), "lq".to_string())].into());
    let multikueue = Settings { kueue: dispatcher::decide::KueueMode::MultiKueue, ..settings() };
    // No Workload yet: Kueue's, and the likely causes.
    let e = explain(&o, &Config::stowage(), &multikueue, Time(now()), "ml", "t").expect("explained");
    assert!(e.state.starts_with("Kueue's") && e.state.contains("no Workload"), "{}", e.state);
    let workload = |status: serde_json::Value| -> api::kueue::Workload {
        serde_json::from_value(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "trainjob-t-1a2b3", "namespace": "ml",
                "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                     "name": "t", "uid": "u1", "controller": true}]},
            "spec": {"queueName": "lq", "podSets": []},
            "status": status}))
        .expect("workload")
    };
    let cases = [
        (json!({}), "waiting for quota in LocalQueue lq: Kueue has not reserved it yet"),
        (
            json!({"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                "message": "couldn't assign flavors", "lastTransitionTime": "2026-11-22T09:00:00Z"}]}),
            "waiting for quota in LocalQueue lq (Pending: couldn't assign flavors)",
        ),
        (
            json!({"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
                "lastTransitionTime": "2026-11-22T09:00:00Z"}],
                "admissionChecks": [{"name": "mk", "state": "Pending", "message": "",
                    "lastTransitionTime": "2026-11-22T09:00:00Z"}]}),
            "quota reserved, waiting for a member",
        ),
        (
            json!({"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
                "lastTransitionTime": "2026-11-22T09:00:00Z"}], "nominatedClusterNames": ["a"]}),
            "nominated by Stowage to a, waiting for MultiKueue to admit it there",
        ),
        (
            json!({"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                "lastTransitionTime": "2026-11-22T09:00:00Z"}], "clusterName": "a"}),
            "admitted, running on a",
        ),
    ];
    for (status, words) in cases {
        o.workloads = vec![workload(status)];
        // Kueue's whatever mode explain was told: the Workload says so.
        for s in [&multikueue, &settings()] {
            let e = explain(&o, &Config::stowage(), s, Time(now()), "ml", "t").expect("explained");
            assert!(e.state.starts_with("Kueue's") && e.state.contains(words), "{words}: {}", e.state);
            assert!(!e.state.contains("next cycle") && e.position.is_none(), "{e}");
            assert_eq!(e.queue.as_deref(), Some("lq"));
        }
    }
}

/// `stowage explain` gives a waiting TrainJob a start time even when nothing running states a
/// run time: the cycle run forward, the running TrainJob ending after as long again as it has
/// run (at least 10 min), and one started on the way running the running ones' median length.
#[test]
fn explain_projects_when_a_waiting_trainjob_starts_without_a_reservation() {
    use dispatcher::decide::explain::{Basis, Eta, explain};
    let mut o = three_of_four_nodes_busy();
    // The running TrainJob states no run time (no deadline): no reservation is made.
    o.trainjobs[0] = trainjob("running", "ur", 3, -200, json!({}), json!({}));
    let rack = json!({"stowage.dev/topology": "required:rack"});
    o.trainjobs.push(trainjob("whole-rack", "ub", 4, -50, rack.clone(), json!({})));
    o.trainjobs.push(trainjob("after", "ua", 4, -40, rack, json!({})));
    let e = explain(&o, &Config::stowage(), &settings(), Time(now()), "ml", "whole-rack").expect("explained");
    // Running for 100 s: expected to run max(100 s, 10 min) more.
    assert_eq!(
        e.eta,
        Some(Eta { cluster: "m".into(), in_s: 600, basis: Basis::Projected { ahead: 0, unknown_s: 700 } }),
        "{e}"
    );
    let after = explain(&o, &Config::stowage(), &settings(), Time(now()), "ml", "after").expect("explained");
    assert_eq!(after.position, Some((2, 2)));
    assert_eq!(
        after.eta,
        Some(Eta { cluster: "m".into(), in_s: 1300, basis: Basis::Projected { ahead: 1, unknown_s: 700 } }),
        "after whole-rack's assumed 700 s: {after}"
    );
    let text = after.to_string();
    assert!(text.contains("expected: to start on m in about 1300 s, after 1 TrainJob(s) that start first"), "{text}");
    // With a deadline, and waiting past the policy's bound (a day), the cycle's own reservation
    // answers.
    let mut reserved = three_of_four_nodes_busy();
    reserved.trainjobs.push(trainjob(
        "whole-rack",
        "ub",
        4,
        -90_000,
        json!({"stowage.dev/topology": "required:rack"}),
        json!({}),
    ));
    let e = explain(&reserved, &Config::stowage(), &settings(), Time(now()), "ml", "whole-rack").expect("explained");
    assert_eq!(e.eta, Some(Eta { cluster: "m".into(), in_s: 500, basis: Basis::Reserved }));
}

/// A job that can never fit shows by its reason, and does not hold its queue's oldest wait
/// (`StowageTrainJobPendingTooLong`) up forever; a job waiting for room does.
#[test]
fn a_job_that_never_fits_is_counted_by_its_reason_not_as_its_queues_oldest_wait() {
    let mut o = observed(vec![member("a", 1)]);
    o.trainjobs = vec![trainjob("huge", "uh", 100, -7200, json!({}), json!({}))];
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    let f = &plan.figures;
    assert_eq!(f.pending.get(&("default".to_string(), "NeverFits".to_string())), Some(&1), "{f:#?}");
    assert!(f.oldest_pending.get("default").is_none_or(|&age| age == 0.0), "{f:#?}");
    // Beside it, one that waits for room (the rack is full) is the queue's oldest wait.
    let mut full = member("a", 1);
    let d = &mut full.status.as_mut().expect("status").domains[0];
    (d.free_gpus, d.free_histogram) = (0, vec![4, 0, 0, 0, 0, 0, 0, 0, 0]);
    o.members = vec![full];
    o.trainjobs.push(trainjob("waits", "uw", 2, -600, json!({}), json!({})));
    let plan = decide(&o, &scheduler_core::fixture::greedy(), &settings(), Time(now()));
    assert_eq!(plan.figures.oldest_pending.get("default"), Some(&600.0), "{:#?}", plan.figures);
}

/// `simulate --from --what-if remove-cluster`: the edited hub is read with the hub's own
/// assumed run time. Removing member `big` removes its long-running job from the running
/// jobs' median; without the hub's assumption every other job's expected end would move.
#[test]
fn a_what_if_reads_the_edited_hub_with_the_hubs_own_assumed_run_time() {
    use dispatcher::decide::whatif::{Edit, Expected, outlook};
    let mut o = three_of_four_nodes_busy();
    // m's running job states no run time: 100 s in, expected 700 s in all.
    o.trainjobs[0] = trainjob("running", "ur", 3, -200, json!({}), json!({}));
    // big: five nodes, full, its job 10,000 s in, expected 20,000 s in all; the median of the
    // two. Five nodes: removed with big, that job waits, and fits nowhere else (m has four).
    let mut big = member("big", 1);
    let status = big.status.as_mut().expect("status");
    status.domains[0].nodes = 5;
    status.domains[0].allocatable_gpus = 40;
    status.domains[0].free_gpus = 0;
    status.domains[0].free_histogram = vec![5, 0, 0, 0, 0, 0, 0, 0, 0];
    bind(status, "uo/1", "b", "big-r0", 5);
    o.members.push(big);
    o.trainjobs.push(trainjob("long", "uo", 5, -10_100, json!({}), json!({})));
    let mut p = o.placements[0].clone();
    p.metadata.name = Some("long".into());
    p.metadata.labels = Some([(api::stowage::CLUSTER_LABEL.to_string(), "big".to_string())].into());
    p.spec.train_job_uid = "uo".into();
    p.spec.cluster = Some("big".into());
    p.status.as_mut().expect("status").start_time = Some(at(-10_000).0.to_string());
    o.placements.push(p);
    o.trainjobs.push(trainjob("whole-rack", "ub", 4, -50, json!({"stowage.dev/topology": "required:rack"}), json!({})));
    let horizon = std::time::Duration::from_secs(86_400);
    let (before, assumed_s) = outlook(&o, &Config::stowage(), &settings(), Time(now()), horizon, None);
    assert_eq!(assumed_s, 20_000, "{before:?}");
    let waiting = |v: &[dispatcher::decide::whatif::JobOutlook]| {
        v.iter().find(|j| j.name == "whole-rack").map(|j| j.expected.clone()).expect("whole-rack")
    };
    assert_eq!(waiting(&before), Expected::Waiting(Some(("m".into(), 600, 20_600))));
    let mut edited = o.clone();
    Edit::RemoveCluster("big".into()).apply(&mut edited, &Time(now())).expect("removed");
    // Read alone, the edited hub assumes m's 700 s: whole-rack would "end 19,900 s sooner".
    let (alone, alone_s) = outlook(&edited, &Config::stowage(), &settings(), Time(now()), horizon, None);
    assert_eq!((alone_s, waiting(&alone)), (700, Expected::Waiting(Some(("m".into(), 600, 1300)))));
    // With the hub's assumption, nothing on m changes.
    let (after, after_s) = outlook(&edited, &Config::stowage(), &settings(), Time(now()), horizon, Some(assumed_s));
    assert_eq!((after_s, waiting(&after)), (20_000, waiting(&before)));
}

/// A placed TrainJob's Placement says how the members were ranked when it was placed, and
/// `stowage explain` shows it: a one-node job fits one host on either member with nothing left
/// over there, so balance decides: the member with more GPUs free.
#[test]
fn a_placement_keeps_how_the_members_were_ranked_and_explain_shows_it() {
    use dispatcher::decide::explain::explain;
    let mut nearly_full = member("full", 1);
    let d = &mut nearly_full.status.as_mut().expect("status").domains[0];
    d.free_gpus = 8;
    d.free_histogram = vec![3, 0, 0, 0, 0, 0, 0, 0, 1];
    let mut o = observed(vec![member("empty", 1), nearly_full]);
    o.trainjobs = vec![trainjob("one", "u1", 1, -10, json!({}), json!({}))];
    let plan = decide(&o, &Config::stowage(), &settings(), Time(now()));
    let spec = &plan.placements[0].spec;
    assert_eq!(spec.cluster.as_deref(), Some("empty"));
    let ranked: Vec<(&str, u64, u64)> =
        spec.ranking.iter().map(|r| (r.cluster.as_str(), r.leftover_gpus, r.free_gpus)).collect();
    assert_eq!(ranked, [("empty", 0, 32), ("full", 0, 8)]);
    assert_eq!(spec.ranking[0].locality.as_deref(), Some("host"), "one node: the whole gang on one host");
    // And the placements counter says the same (stowage_placements_total{locality="host"}).
    let placed = plan.placements[0].effect.placed.as_ref().expect("placed");
    assert_eq!(placed.locality, Some(scheduler_core::Level::Host));
    let o = written(o, &plan);
    let e = explain(&o, &Config::stowage(), &settings(), Time(now()), "ml", "one").expect("explained");
    assert_eq!(e.chosen.as_ref().map(|(c, r)| (c.as_str(), r.len())), Some(("empty", 2)));
    let text = e.to_string();
    assert!(text.contains("chosen:   empty, of 2 member(s) ranked"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("empty ") && l.contains("32 GPUs free") && l.ends_with("<- chosen")),
        "{text}"
    );
    // Decided again with the Placement written: nothing is rewritten for the ranking.
    assert!(decide(&o, &Config::stowage(), &settings(), Time(now())).placements.is_empty());
}

/// Kueue's `kueue.x-k8s.io/queue-name` label selects the queue of that name when Stowage's own
/// label is absent, quota and all; one naming no queue waits in Kueue's words, never falling
/// back to another queue.
#[test]
fn kueues_queue_name_label_selects_the_queue_and_an_unknown_one_waits_in_kueues_words() {
    let mut o = observed(vec![member("a", 1)]);
    let q: api::stowage::Queue = serde_json::from_value(json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": "team-k"},
        "spec": {"quotas": [{"flavor": "h100", "resource": "nvidia.com/gpu", "nominalQuota": "8"}]}}))
    .expect("queue");
    o.queues = vec![q];
    let labelled = |name: &str, uid: &str, labels: serde_json::Value| {
        let mut tj = trainjob(name, uid, 1, -10, json!({}), json!({}));
        tj.metadata.labels = serde_json::from_value(labels).expect("labels");
        tj
    };
    o.trainjobs = vec![
        labelled("first", "u1", json!({"kueue.x-k8s.io/queue-name": "team-k"})),
        labelled("second", "u2", json!({"kueue.x-k8s.io/queue-name": "team-k"})),
        labelled("lost", "u3", json!({"kueue.x-k8s.io/queue-name": "nope"})),
        // Stowage's label wins over Kueue's.
        labelled("both", "u4", json!({"kueue.x-k8s.io/queue-name": "team-k", "stowage.dev/queue": "nope"})),
    ];
    let plan = decide(&o, &Config::stowage(), &settings(), Time(now()));
    let placed: Vec<&str> = plan.placements.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(placed, ["first"], "team-k's 8 GPUs hold one of its two TrainJobs");
    let pending = |name: &str| pending_of(&plan, name).unwrap_or_else(|| panic!("{name} pending"));
    let second = pending("second");
    assert_eq!(second.reason, "QuotaExceeded");
    assert!(second.message.contains("queue team-k"), "{}", second.message);
    let lost = pending("lost");
    assert_eq!((lost.reason.as_str(), lost.message.as_str()), ("UnknownQueue", "LocalQueue nope doesn't exist"));
    let both = pending("both");
    assert_eq!(both.reason, "UnknownQueue");
    assert!(!both.message.starts_with("LocalQueue"), "named by Stowage's label: {}", both.message);
}
