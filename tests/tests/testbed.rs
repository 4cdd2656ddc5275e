//! Checks that only real Kubernetes can answer, on the testbed `scripts/testbed up` starts (real
//! kube-apiservers on etcd, kube-controller-manager, kube-scheduler with workload-aware gang
//! scheduling, kwok nodes, JobSet; Stowage's processes with their own ServiceAccounts' tokens).
//! Each is `#[ignore]`d in the in-memory suite and run by `scripts/test-real`, which points
//! `STOWAGE_TESTBED_DIR` at the testbed's directory:
//!
//! ```sh
//! scripts/testbed up --dir /tmp/tb && STOWAGE_TESTBED_DIR=/tmp/tb cargo test -p stowage-tests --test testbed -- --ignored
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use api::stowage::{Placement, PlacementSpec, PodSetPlacement};
use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use stowage_tests::e2e::{client, condition, eventually, placement, running, trainjob};
use trainer_render::{Capabilities, GangScheduler, Input, Object};

/// The testbed's directory and clients from its kubeconfigs.
struct Testbed {
    dir: PathBuf,
    hub: Client,
    members: BTreeMap<String, Client>,
}

impl Testbed {
    async fn open() -> Testbed {
        let dir = PathBuf::from(
            std::env::var("STOWAGE_TESTBED_DIR")
                .expect("STOWAGE_TESTBED_DIR: the directory `scripts/testbed up` wrote"),
        );
        let names = std::fs::read_to_string(dir.join("members.txt")).expect("members.txt: is the testbed up?");
        let mut members = BTreeMap::new();
        for m in names.lines().filter(|l| !l.is_empty()) {
            members.insert(m.to_string(), client(&dir.join("members").join(format!("{m}.kubeconfig"))).await);
        }
        Testbed { hub: client(&dir.join("hub.kubeconfig")).await, dir, members }
    }

    fn pid(&self, process: &str) -> i32 {
        let text = std::fs::read_to_string(self.dir.join("pids").join(format!("{process}.pid")))
            .unwrap_or_else(|e| panic!("{process}'s pid: {e}"));
        text.trim().parse().expect("a pid")
    }

    /// Sends `signal` (STOP, CONT, KILL) to one of the testbed's processes.
    fn signal(&self, process: &str, signal: &str) {
        let status =
            std::process::Command::new("kill").arg(format!("-{signal}")).arg(self.pid(process).to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} {process}");
    }

    /// Starts one of the testbed's processes again, as `up` started it.
    fn restart(&self, process: &str) {
        let script = self.dir.join("run").join(format!("{process}.sh"));
        let status = std::process::Command::new("bash").arg(&script).status();
        assert!(status.is_ok_and(|s| s.success()), "restarting {process}");
    }
}

/// A name unique to this run, so the suite runs again on the same testbed.
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{name}-{:x}", (std::process::id() ^ nanos) & 0xfffff)
}

/// The TrainJob's JobSets live on the members: (member, epoch label, uid) of each not finished.
async fn live_jobsets(t: &Testbed, name: &str) -> Vec<(String, String, String)> {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    let mut live = Vec::new();
    for (m, c) in &t.members {
        let api = Api::<DynamicObject>::namespaced_with(c.clone(), "default", &ar);
        if let Ok(Some(js)) = api.get_opt(name).await {
            let done = js.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| (c["type"] == "Completed" || c["type"] == "Failed") && c["status"] == "True")
            });
            if !done && js.metadata.deletion_timestamp.is_none() {
                let epoch = js.labels().get("stowage.dev/placement-epoch").cloned().unwrap_or_default();
                live.push((m.clone(), epoch, js.uid().unwrap_or_default()));
            }
        }
    }
    live
}

/// Runs until `done` holds, failing if the TrainJob is ever live on two members at once.
async fn never_twice(t: &Testbed, name: &str, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let live = live_jobsets(t, name).await;
        assert!(live.len() <= 1, "{name} live on two members at once: {live:?}");
        let tj = Api::<TrainJob>::default_namespaced(t.hub.clone()).get(name).await.expect("the TrainJob");
        if tj.status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Complete" && c.status == "True")) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name} did not complete in {limit:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn submit(hub: &Client, tj: &TrainJob) {
    Api::<TrainJob>::default_namespaced(hub.clone()).create(&Default::default(), tj).await.expect("submitted");
}

#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn a_rack_trainjob_completes_and_kube_scheduler_bound_every_pod_to_a_kwok_node_of_that_rack() {
    let t = Testbed::open().await;
    let name = unique("rack");
    submit(&t.hub, &trainjob(&name, 4, 5, json!({"stowage.dev/topology": "required:rack"}))).await;
    condition(&t.hub, &name, "Complete", "True").await;
    let p: Placement = placement(&t.hub, &name, |p| p.spec.cluster.is_some()).await;
    let cluster = p.spec.cluster.clone().expect("placed");
    let domain = p.spec.pod_sets[0].domain.clone().expect("pinned");
    let member = &t.members[&cluster];
    let pods = Api::<Pod>::default_namespaced(member.clone())
        .list(&ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={name}")))
        .await
        .expect("pods")
        .items;
    assert_eq!(pods.len(), 4);
    for pod in pods {
        let node = pod.spec.and_then(|s| s.node_name).expect("bound by kube-scheduler");
        let node = Api::<Node>::all(member.clone()).get(&node).await.expect("node");
        assert_eq!(node.annotations().get("kwok.x-k8s.io/node").map(String::as_str), Some("fake"));
        assert_eq!(node.labels().get(&domain.node_label), Some(&domain.value), "outside the rack");
        assert_eq!(pod.status.and_then(|s| s.phase).as_deref(), Some("Succeeded"));
    }
}

/// A gang of `nodes` 8-GPU pods rendered by `stowage render --gang-scheduler native`, applied to
/// a member by its admin; its pods as the member then holds them.
async fn native_gang(t: &Testbed, member: &str, name: &str, nodes: i64) -> Vec<Pod> {
    let c = &t.members[member];
    let runtime = Api::<ClusterTrainingRuntime>::all(t.hub.clone()).get("torch-distributed").await.expect("runtime");
    let mut tj = trainjob(name, nodes, 600, json!({}));
    tj.metadata.uid = Some(format!("native-{name}"));
    let placement = Placement::new(
        name,
        PlacementSpec {
            train_job_uid: format!("native-{name}"),
            cluster: Some(member.to_string()),
            epoch: 1,
            pod_sets: vec![PodSetPlacement { name: "node".into(), count: nodes as u32, ..Default::default() }],
            ..Default::default()
        },
    );
    let caps = Capabilities { gang_scheduler: GangScheduler::Native, ..Capabilities::default() };
    let input = Input {
        trainjob: &tj,
        runtime: &Runtime::Cluster(runtime),
        placement: Some(&placement),
        capabilities: &caps,
        ssh_key: None,
        jobset_uid: None,
    };
    let objects = trainer_render::render(&input).expect("renders");
    assert!(objects.iter().any(|o| matches!(o, Object::Native(_))), "a native PodGroup");
    for o in &objects {
        let mut v = o.to_value();
        // Applied by hand, not by an agent: without the fencing labels, or the member's agent
        // would take the JobSet for a placement no longer there and delete it.
        unlabel(&mut v);
        let (group, version) = o.api_version().split_once('/').unwrap_or(("", o.api_version()));
        let plural = if o.kind() == "JobSet" { "jobsets" } else { "podgroups" };
        let ar = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(group, version, o.kind()),
            plural,
        );
        Api::<DynamicObject>::namespaced_with(c.clone(), "default", &ar)
            .patch(name, &PatchParams::apply("testbed").force(), &Patch::Apply(&v))
            .await
            .unwrap_or_else(|e| panic!("applying {} {name}: {e}", o.kind()));
    }
    let selector = format!("jobset.sigs.k8s.io/jobset-name={name}");
    let api = Api::<Pod>::default_namespaced(c.clone());
    eventually(&format!("{nodes} pods of {name}"), || {
        let api = api.clone();
        let selector = selector.clone();
        async move {
            let pods = api.list(&ListParams::default().labels(&selector)).await.ok()?.items;
            (pods.len() as i64 == nodes).then_some(pods)
        }
    })
    .await
}

/// Removes the fencing labels an agent puts on what it makes.
fn unlabel(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            if let Some(labels) = map.get_mut("labels").and_then(|l| l.as_object_mut()) {
                labels.remove(api::stowage::TRAINJOB_UID_LABEL);
                labels.remove(api::stowage::EPOCH_LABEL);
            }
            map.values_mut().for_each(unlabel);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(unlabel),
        _ => {}
    }
}

#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn a_native_gang_larger_than_its_member_binds_none_of_its_pods_and_one_that_fits_binds_all() {
    let t = Testbed::open().await;
    // The smallest member, and its nodes.
    let mut sizes = Vec::new();
    for (m, c) in &t.members {
        sizes.push((
            Api::<Node>::all(c.clone()).list(&ListParams::default()).await.expect("nodes").items.len(),
            m.clone(),
        ));
    }
    sizes.sort();
    let (nodes, member) = sizes[0].clone();
    let (too_big, fits) = (unique("too-big"), unique("fits"));
    let pods = native_gang(&t, &member, &too_big, nodes as i64 + 1).await;
    assert!(pods.iter().all(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none())));
    // kube-scheduler has had time to bind what it could: it binds nothing of a gang that cannot
    // fit whole, where a pod-by-pod scheduler would have filled every node.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let api = Api::<Pod>::default_namespaced(t.members[&member].clone());
    let selector = format!("jobset.sigs.k8s.io/jobset-name={too_big}");
    let pods = api.list(&ListParams::default().labels(&selector)).await.expect("pods").items;
    let bound: Vec<String> =
        pods.iter().filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())).map(|p| p.name_any()).collect();
    assert!(bound.is_empty(), "{} of {} pods bound: {bound:?}", bound.len(), pods.len());
    for (kind, plural, group) in
        [("JobSet", "jobsets", "jobset.x-k8s.io/v1alpha2"), ("PodGroup", "podgroups", "scheduling.k8s.io/v1beta1")]
    {
        let (g, v) = group.split_once('/').expect("group/version");
        let ar = kube::api::ApiResource::from_gvk_with_plural(&kube::api::GroupVersionKind::gvk(g, v, kind), plural);
        let _ = Api::<DynamicObject>::namespaced_with(t.members[&member].clone(), "default", &ar)
            .delete(&too_big, &DeleteParams::background())
            .await;
    }
    // A gang that fits binds whole.
    let _ = native_gang(&t, &member, &fits, 2).await;
    eventually("both pods of the gang that fits bound", || {
        let api = api.clone();
        let selector = format!("jobset.sigs.k8s.io/jobset-name={fits}");
        async move {
            let pods = api.list(&ListParams::default().labels(&selector)).await.ok()?.items;
            pods.iter().all(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())).then_some(())
        }
    })
    .await;
}

/// Each member's virtual Node on the real hub has a Lease in `kube-node-lease`, renewed by its
/// agent apart from its rounds (the node lifecycle controller's heartbeat, as a kubelet's), with
/// the real RBAC and status-writers policy; the Node is Ready; another member's agent may not
/// write the Lease.
#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn each_virtual_nodes_lease_is_renewed_by_its_own_agent_and_no_other() {
    use k8s_openapi::api::coordination::v1::Lease;
    let t = Testbed::open().await;
    let leases = Api::<Lease>::namespaced(t.hub.clone(), "kube-node-lease");
    let renewed = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    for m in t.members.keys() {
        let name = format!("stowage-{m}");
        let first = eventually(&format!("Lease {name}"), || async { leases.get_opt(&name).await.ok().flatten() }).await;
        let spec = first.spec.clone().expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some(name.as_str()));
        let before = renewed(&first).expect("a renew time");
        eventually(&format!("Lease {name} renewed"), || async {
            let now = leases.get(&name).await.ok()?;
            renewed(&now).filter(|t| *t > before).map(|_| ())
        })
        .await;
        let node = Api::<Node>::all(t.hub.clone()).get(&name).await.expect("the virtual Node");
        let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{name}: {conditions:?}");
    }
    let mut names = t.members.keys();
    let (own, other) = (names.next().expect("a member"), names.next().expect("a second member"));
    let intruder = client(&t.dir.join("agents").join(format!("{other}-on-hub.kubeconfig"))).await;
    let forged = Api::<Lease>::namespaced(intruder, "kube-node-lease")
        .patch(
            &format!("stowage-{own}"),
            &PatchParams::apply("stowage-agent").force(),
            &Patch::Apply(member_agent::lease::node_lease(
                own,
                k8s_openapi::jiff::Timestamp::now(),
                k8s_openapi::jiff::Timestamp::now(),
                Duration::from_secs(10),
            )),
        )
        .await
        .expect_err("another member's agent may not renew this member's Lease");
    match forged {
        kube::Error::Api(s) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("not a refusal: {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn an_agents_own_credential_is_refused_by_the_real_apiserver_on_another_members_placement() {
    let t = Testbed::open().await;
    let name = unique("guarded");
    submit(&t.hub, &trainjob(&name, 1, 30, json!({}))).await;
    let p = placement(&t.hub, &name, |p| p.spec.cluster.is_some()).await;
    let owner = p.spec.cluster.clone().expect("placed");
    let other = t.members.keys().find(|m| **m != owner).expect("a second member").clone();
    let agent = client(&t.dir.join("agents").join(format!("{other}-on-hub.kubeconfig"))).await;
    let forged = json!({"status": {"phase": "Failed", "observedEpoch": p.spec.epoch, "message": "forged"}});
    let refused = Api::<Placement>::namespaced(agent, "default")
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .expect_err("another member's agent may not write this Placement's status");
    match refused {
        kube::Error::Api(s) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("not a refusal: {other:?}"),
    }
    condition(&t.hub, &name, "Complete", "True").await;
}

#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn a_tenant_naming_another_teams_queue_waits_saying_its_namespace_is_not_selected() {
    let t = Testbed::open().await;
    let queue = unique("team-b-only");
    let q: api::stowage::Queue = serde_json::from_value(json!({
        "apiVersion": "stowage.dev/v1alpha1", "kind": "Queue", "metadata": {"name": queue},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}}}}))
    .expect("queue");
    Api::<api::stowage::Queue>::all(t.hub.clone()).create(&Default::default(), &q).await.expect("queue");
    let tenant = client(&t.dir.join("users").join("team-a.kubeconfig")).await;
    let name = unique("borrowed");
    let mut tj = trainjob(&name, 1, 1, json!({}));
    tj.metadata.namespace = Some("team-a".into());
    tj.metadata.labels = Some([("stowage.dev/queue".to_string(), queue.clone())].into());
    Api::<TrainJob>::namespaced(tenant.clone(), "team-a").create(&Default::default(), &tj).await.expect("submitted");
    let tjs: Api<TrainJob> = Api::namespaced(tenant.clone(), "team-a");
    let c = eventually("NamespaceNotAllowed", || {
        let tjs = tjs.clone();
        let name = name.clone();
        async move {
            let t = tjs.get(&name).await.ok()?;
            t.status?.conditions.into_iter().find(|c| c.reason == "NamespaceNotAllowed")
        }
    })
    .await;
    assert!(c.message.contains(&queue), "{}", c.message);
    // And the tenant cannot change the queue's rules itself.
    let refused = Api::<api::stowage::Queue>::all(tenant).delete(&queue, &DeleteParams::default()).await;
    assert!(matches!(refused, Err(kube::Error::Api(s)) if s.code == 403), "a tenant deleted a Queue");
    let _ = Api::<TrainJob>::namespaced(t.hub.clone(), "team-a").delete(&name, &DeleteParams::default()).await;
}

#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn faults_a_stopped_member_apiserver_a_killed_leader_a_restarted_agent_and_a_deleted_jobset_lose_nothing() {
    let t = Testbed::open().await;
    // A member's API server frozen for a few seconds, then resumed.
    let names: Vec<String> = (0..3).map(|i| unique(&format!("fault-{i}"))).collect();
    for n in &names {
        submit(&t.hub, &trainjob(n, 1, 20, json!({}))).await;
    }
    let first = placement(&t.hub, &names[0], running).await;
    let member = first.spec.cluster.clone().expect("placed");
    t.signal(&format!("{member}-apiserver"), "STOP");
    tokio::time::sleep(Duration::from_secs(5)).await;
    t.signal(&format!("{member}-apiserver"), "CONT");

    // The leading dispatcher killed: the other takes the Lease; started again, it follows.
    let lease: k8s_openapi::api::coordination::v1::Lease =
        Api::namespaced(t.hub.clone(), "stowage-system").get("stowage-dispatcher").await.expect("the Lease");
    let leader = lease.spec.and_then(|s| s.holder_identity).expect("a leader");
    let process = format!("stowage-{leader}");
    t.signal(&process, "KILL");
    // An agent restarted.
    t.signal(&format!("stowage-agent-{member}"), "KILL");
    t.restart(&format!("stowage-agent-{member}"));
    t.restart(&process);
    for n in &names {
        never_twice(&t, n, Duration::from_secs(180)).await;
    }

    // A JobSet deleted by hand on its member: reported Lost, placed again, completes.
    let name = unique("deleted");
    submit(&t.hub, &trainjob(&name, 1, 30, json!({}))).await;
    let p = placement(&t.hub, &name, running).await;
    let c = &t.members[p.spec.cluster.as_deref().expect("placed")];
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    Api::<DynamicObject>::namespaced_with(c.clone(), "default", &ar)
        .delete(&name, &DeleteParams::background())
        .await
        .expect("deleted by hand");
    placement(&t.hub, &name, |q| q.spec.epoch > p.spec.epoch).await;
    never_twice(&t, &name, Duration::from_secs(180)).await;
}

/// The agents' hub-lost time and the dispatcher's member grace the testbed was started with.
fn timings(t: &Testbed) -> (u64, u64) {
    let text = std::fs::read_to_string(t.dir.join("timings")).expect("timings: is the testbed up?");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("{key} in timings"))
    };
    (value("hub_lost_seconds"), value("member_grace_seconds"))
}

/// The hub's etcd stopped (SIGSTOP: every hub request hangs, as in a hub upgrade gone slow).
/// Shorter than the agents' hub-lost time, the members ride it out: the same JobSets run on and
/// complete. Longer, each agent deletes what it made (nothing may run twice once the dispatcher
/// could move it); when the hub answers, each makes again what is still placed on it, and
/// everything completes, never live twice.
#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn a_hub_etcd_stopped_shorter_than_hub_lost_is_ridden_out_and_longer_fences_then_everything_completes() {
    let t = Testbed::open().await;
    let (hub_lost, _) = timings(&t);
    let hub_lost = Duration::from_secs(hub_lost);
    // Each TrainJob runs for far longer than the outage: one that finished is not live either,
    // and must not pass for one fenced.
    let outage = |names: Vec<String>, stopped: Duration| {
        let t = &t;
        let seconds = u32::try_from(stopped.as_secs()).unwrap_or(60) * 3;
        async move {
            for n in &names {
                submit(&t.hub, &trainjob(n, 1, seconds, json!({}))).await;
            }
            for n in &names {
                placement(&t.hub, n, running).await;
            }
            let mut before = Vec::new();
            for n in &names {
                before.push(eventually(&format!("{n}'s JobSet"), || async { live_jobsets(t, n).await.pop() }).await);
            }
            t.signal("hub-etcd", "STOP");
            tokio::time::sleep(stopped).await;
            let mut during = Vec::new();
            for n in &names {
                during.push(live_jobsets(t, n).await);
            }
            t.signal("hub-etcd", "CONT");
            (before, during)
        }
    };

    // Half the hub-lost time: the very same JobSets (same uid) still run when the hub is back.
    let short: Vec<String> = (0..2).map(|i| unique(&format!("hub-short-{i}"))).collect();
    let (before, during) = outage(short.clone(), hub_lost / 2).await;
    for (b, d) in before.iter().zip(&during) {
        assert_eq!(d.as_slice(), std::slice::from_ref(b), "a hub outage shorter than hub-lost changed a JobSet");
    }
    for n in &short {
        never_twice(&t, n, Duration::from_secs(180)).await;
    }

    // Hub-lost and then some: the agents fenced (no JobSet of these left live on any member while
    // the hub was still down); made again once it answers; all complete.
    let long: Vec<String> = (0..2).map(|i| unique(&format!("hub-long-{i}"))).collect();
    let (_, during) = outage(long.clone(), hub_lost + Duration::from_secs(10)).await;
    for (n, d) in long.iter().zip(&during) {
        assert!(d.is_empty(), "{n}: still live after the hub was lost for longer than hub-lost: {d:?}");
    }
    for n in &long {
        never_twice(&t, n, Duration::from_secs(240)).await;
    }
}

/// On the real API server, with the real status-writers policy and RBAC: deleting the hub's
/// copy of a running pod is refused, saying where the pod runs; suspending the TrainJob withdraws
/// its Placement, whose status the dispatcher clears (its agent may write it no more), and the
/// TrainJob counts its job suspended.
#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn a_hub_copy_cannot_be_deleted_and_a_suspended_trainjobs_placement_is_cleared() {
    use api::stowage::PlacementPhase;
    let t = Testbed::open().await;
    let tenant = client(&t.dir.join("users").join("team-a.kubeconfig")).await;
    let name = unique("suspended");
    let mut tj = trainjob(&name, 1, 600, json!({}));
    tj.metadata.namespace = Some("team-a".into());
    let tjs: Api<TrainJob> = Api::namespaced(tenant.clone(), "team-a");
    tjs.create(&Default::default(), &tj).await.expect("submitted");
    let placements: Api<Placement> = Api::namespaced(t.hub.clone(), "team-a");
    let get = |pred: fn(&Placement) -> bool| {
        let (placements, name) = (placements.clone(), name.clone());
        async move {
            eventually("the Placement", || async { placements.get_opt(&name).await.ok().flatten().filter(pred) }).await
        }
    };
    let first = get(running).await;
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), "team-a");
    let selector = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={name}"));
    let copy = eventually("a running copy on the hub", || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods.list(&selector).await.ok()?.items;
            list.into_iter().find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        }
    })
    .await;
    let statuses = copy.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
    assert!(statuses.iter().all(|c| c.ready) && !statuses.is_empty(), "READY: {statuses:?}");
    match pods.delete(&copy.name_any(), &DeleteParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains("read-only copy of a pod that runs on member "), "{}", s.message);
        }
        other => panic!("the copy's deletion was not refused: {other:?}"),
    }
    tjs.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}})))
        .await
        .expect("suspend");
    let withdrawn = get(|p| {
        p.spec.cluster.is_none()
            && p.status.as_ref().is_some_and(|s| s.phase == PlacementPhase::Pending && s.observed_epoch == p.spec.epoch)
    })
    .await;
    assert!(withdrawn.spec.epoch > first.spec.epoch);
    let message = withdrawn.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.starts_with("withdrawn, on no member"), "{message}");
    eventually("the TrainJob's job counted suspended", || {
        let (tjs, name) = (tjs.clone(), name.clone());
        async move {
            let jobs = tjs.get(&name).await.ok()?.status?.jobs_status;
            (!jobs.is_empty() && jobs.iter().all(|j| j.active == 0 && j.suspended > 0)).then_some(())
        }
    })
    .await;
    let _ = tjs.delete(&name, &DeleteParams::default()).await;
}

/// Issue 38's data loss on real members: a TrainJob named like a JobSet someone else made on
/// the member (the real JobSet controller running it) neither applies over it nor deletes it,
/// and the user is told whose the name is.
#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn a_trainjob_named_like_someone_elses_jobset_on_a_real_member_leaves_it_untouched() {
    use k8s_openapi::api::core::v1::Event;
    let t = Testbed::open().await;
    let name = unique("taken");
    let jobsets = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    let foreign: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "someone-else"}},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}}]}
    }))
    .expect("a JobSet");
    for member in t.members.values() {
        Api::<DynamicObject>::namespaced_with(member.clone(), "default", &jobsets)
            .create(&Default::default(), &foreign)
            .await
            .expect("someone else's JobSet");
    }
    submit(&t.hub, &trainjob(&name, 1, 600, json!({}))).await;
    let events: Api<Event> = Api::default_namespaced(t.hub.clone());
    let said = eventually("an Event naming the conflict", || {
        let (events, name) = (events.clone(), name.clone());
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(name.as_str()))
                .find_map(|e| e.message.filter(|m| m.contains("NameTaken")))
        }
    })
    .await;
    assert!(said.contains(&format!("JobSet default/{name} already exists on the member")), "{said}");
    let untouched = || async {
        for (m, member) in &t.members {
            let js = Api::<DynamicObject>::namespaced_with(member.clone(), "default", &jobsets).get(&name).await;
            let js = js.unwrap_or_else(|e| panic!("{m}: someone else's JobSet is gone: {e}"));
            let labels = js.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels.len(), 1, "{m}: labels changed: {labels:?}");
            let managers: Vec<String> =
                js.metadata.managed_fields.iter().flatten().filter_map(|f| f.manager.clone()).collect();
            assert!(!managers.iter().any(|x| x.contains("stowage")), "{m}: applied over by {managers:?}");
        }
    };
    untouched().await;
    Api::<TrainJob>::default_namespaced(t.hub.clone()).delete(&name, &DeleteParams::default()).await.expect("delete");
    tokio::time::sleep(Duration::from_secs(3)).await;
    untouched().await;
    for member in t.members.values() {
        let _ = Api::<DynamicObject>::namespaced_with(member.clone(), "default", &jobsets)
            .delete(&name, &DeleteParams::background())
            .await;
    }
}

/// The hub's Workloads (Kueue's, not `scheduling.k8s.io`'s of the same name).
fn kueue_workloads(hub: &Client) -> Api<DynamicObject> {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "Workload"),
        "workloads",
    );
    Api::namespaced_with(hub.clone(), "default", &ar)
}

/// The Workload Kueue made for the object `kind`/`name` on the hub, once `pred` holds.
async fn workload_of(hub: &Client, kind: &str, name: &str, pred: impl Fn(&DynamicObject) -> bool) -> DynamicObject {
    let api = kueue_workloads(hub);
    eventually(&format!("the Workload of {kind} {name}"), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|w| w.metadata.owner_references.iter().flatten().any(|o| o.kind == kind && o.name == name) && pred(w))
    })
    .await
}

fn finished(w: &DynamicObject) -> bool {
    w.data["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Finished" && c["status"] == "True"))
}

/// What the dispatcher told about a Workload: the messages of its Events with `reason`.
async fn workload_events(hub: &Client, workload: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(hub.clone());
    let selector = format!("involvedObject.name={workload},reason={reason}");
    let list = events.list(&ListParams::default().fields(&selector)).await.expect("events");
    list.items.into_iter().filter_map(|e| e.message).collect()
}

/// With `--kueue`, the real Kueue v0.17 on the hub (MultiKueue manager, Stowage its external
/// dispatcher) and on each member (worker, Trainer beside it): a TrainJob and a plain JobSet
/// queued with `kueue.x-k8s.io/queue-name` get their Workloads admitted by Kueue, run on the
/// member Stowage nominated (MultiKueue copies them there; Trainer renders the TrainJob) and
/// finish; Stowage makes no Placement of its own for them. A Workload too large for every member
/// is nominated nowhere and told why.
#[tokio::test]
#[ignore = "needs the real testbed with --kueue: scripts/test-real"]
async fn kueue_queued_work_runs_on_the_member_stowage_nominated_through_the_real_kueue() {
    let t = Testbed::open().await;
    assert!(t.dir.join("kueue.dispatcher").exists(), "the testbed was brought up without --kueue");
    let queued = json!({"kueue.x-k8s.io/queue-name": "user-queue"});
    let name = unique("kueue-tj");
    let tj: TrainJob = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "labels": queued},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}}}))
    .expect("a TrainJob");
    submit(&t.hub, &tj).await;
    let jobset_name = unique("kueue-js");
    let jobsets = Api::<DynamicObject>::default_namespaced_with(
        t.hub.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
            "jobsets",
        ),
    );
    let js: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": jobset_name, "labels": queued},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": 2, "completions": 2, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "busybox:1.36",
                "resources": {"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}}}]}}}}}]}}))
    .expect("a JobSet");
    jobsets.create(&Default::default(), &js).await.expect("the JobSet submitted");

    for (kind, object) in [("TrainJob", &name), ("JobSet", &jobset_name)] {
        let w = workload_of(&t.hub, kind, object, finished).await;
        let ran_on = w.data["status"]["clusterName"].as_str().unwrap_or_default().to_string();
        assert!(t.members.contains_key(&ran_on), "{kind} {object}: admitted on {ran_on:?}, not a member");
        let nominated = workload_events(&t.hub, &w.name_any(), "Nominated").await;
        assert!(
            nominated.iter().any(|m| m == &format!("nominated to member {ran_on}")),
            "{kind} {object} ran on {ran_on}, which Stowage did not nominate: {nominated:?}"
        );
    }
    let done = Api::<TrainJob>::default_namespaced(t.hub.clone()).get(&name).await.expect("the TrainJob");
    let complete =
        done.status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Complete" && c.status == "True"));
    assert!(complete, "{name}: its Workload finished, the hub's TrainJob is not Complete");
    let placements = Api::<Placement>::default_namespaced(t.hub.clone());
    assert!(placements.get_opt(&name).await.expect("placements").is_none(), "{name}: Kueue's, yet Stowage placed it");

    // 100 nodes of 8 GPUs: no member has them. Kueue reserves quota (the ClusterQueue is
    // large); Stowage nominates nowhere and says why.
    let big = unique("kueue-big");
    let mut tj = tj.clone();
    tj.metadata.name = Some(big.clone());
    if let Some(trainer) = tj.spec.trainer.as_mut() {
        trainer.num_nodes = Some(100);
    }
    submit(&t.hub, &tj).await;
    let w = workload_of(&t.hub, "TrainJob", &big, |w| {
        w.data["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "QuotaReserved" && c["status"] == "True"))
    })
    .await;
    let told = eventually("why the big Workload is nominated nowhere", || async {
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(t.hub.clone());
        let selector = format!("involvedObject.name={},type=Warning", w.name_any());
        let list = events.list(&ListParams::default().fields(&selector)).await.ok()?;
        list.items.into_iter().find_map(|e| e.message)
    })
    .await;
    let now = kueue_workloads(&t.hub).get(&w.name_any()).await.expect("the big Workload");
    assert!(now.data["status"]["clusterName"].is_null(), "{big}: admitted somewhere: {}", now.data["status"]);
    let nominated = now.data["status"]["nominatedClusterNames"].as_array().map_or(0, Vec::len);
    assert_eq!(nominated, 0, "{big}: nominated though it fits nowhere ({told})");
    Api::<TrainJob>::default_namespaced(t.hub.clone())
        .delete(&big, &DeleteParams::background())
        .await
        .expect("deleted");
}

/// Testbed processes stopped (SIGSTOP) while it lives, resumed however the test ends.
struct Frozen<'t> {
    t: &'t Testbed,
    processes: Vec<String>,
}

impl Frozen<'_> {
    fn new<'t>(t: &'t Testbed, processes: Vec<String>) -> Frozen<'t> {
        for p in &processes {
            t.signal(p, "STOP");
        }
        Frozen { t, processes }
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        for p in &self.processes {
            // Resuming a running process is harmless; a failure here must not hide the test's.
            let _ = std::process::Command::new("kill").arg("-CONT").arg(self.t.pid(p).to_string()).status();
        }
    }
}

/// A TrainJob queued with Kueue's label, running `seconds` on kwok.
fn kueue_trainjob(name: &str, seconds: u32) -> TrainJob {
    let mut tj = trainjob(name, 1, seconds, json!({}));
    tj.metadata.labels = Some([("kueue.x-k8s.io/queue-name".to_string(), "user-queue".to_string())].into());
    tj
}

/// The TrainJob's Workload on the hub finishes; what its Nominated Events said, and the cluster
/// it finished on. Each nomination leads to one run at most: never live twice.
async fn finishes_through_kueue(t: &Testbed, name: &str, limit: Duration) -> (String, Vec<String>) {
    never_twice(t, name, limit).await;
    let w = workload_of(&t.hub, "TrainJob", name, finished).await;
    let cluster = w.data["status"]["clusterName"].as_str().unwrap_or_default().to_string();
    (cluster, workload_events(&t.hub, &w.name_any(), "Nominated").await)
}

/// Kueue evicts and a member goes silent, on the real Kueue:
///
/// - the worker evicts the running copy (its Workload deactivated there, as a preemption on the
///   worker does): Kueue v0.17 keeps the hub Workload's quota for good, its TrainJob's counts
///   being MultiKueue's stale copy (kubernetes-sigs/kueue#15380); Stowage clears them, says so,
///   Kueue queues it again, Stowage nominates it afresh and it completes;
/// - nominated to a member whose Kueue does not answer, and whose agent then stops reporting:
///   Stowage withdraws the nomination after its member grace, naming the member, and nominates
///   the other, where it completes.
#[tokio::test]
#[ignore = "needs the real testbed with --kueue: scripts/test-real"]
async fn kueue_evicted_work_and_work_nominated_to_a_silent_member_are_nominated_again_and_complete() {
    let t = Testbed::open().await;
    assert!(t.dir.join("kueue.dispatcher").exists(), "the testbed was brought up without --kueue");
    let evicted = unique("kueue-evicted");
    submit(&t.hub, &kueue_trainjob(&evicted, 30)).await;
    let w = workload_of(&t.hub, "TrainJob", &evicted, |w| w.data["status"]["clusterName"].is_string()).await;
    let first = w.data["status"]["clusterName"].as_str().unwrap_or_default().to_string();
    // Running there, as the hub sees it: MultiKueue has copied the active counts.
    eventually("the hub's TrainJob counting its job active", || async {
        let tj = Api::<TrainJob>::default_namespaced(t.hub.clone()).get(&evicted).await.ok()?;
        tj.status?.jobs_status.iter().any(|j| j.active > 0).then_some(())
    })
    .await;
    let copy = eventually("the worker's copy of the Workload", || async {
        kueue_workloads(&t.members[&first]).get_opt(&w.name_any()).await.ok().flatten()
    })
    .await;
    kueue_workloads(&t.members[&first])
        .patch(&copy.name_any(), &PatchParams::default(), &Patch::Merge(json!({"spec": {"active": false}})))
        .await
        .expect("the copy deactivated on its worker");
    let (_, nominated) = finishes_through_kueue(&t, &evicted, Duration::from_secs(240)).await;
    let cleared = workload_events(&t.hub, &w.name_any(), "StaleStatusCleared").await;
    assert!(
        cleared.iter().any(|m| m.contains("kubernetes-sigs/kueue#15380")),
        "{evicted}: completed, yet Stowage never cleared its stale counts: {cleared:?}"
    );
    // The Event is told once per reason, so a second nomination shows as the Event's count.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(t.hub.clone());
    let selector = format!("involvedObject.name={},reason=Nominated", w.name_any());
    let times: i32 = events
        .list(&ListParams::default().fields(&selector))
        .await
        .expect("events")
        .items
        .iter()
        .map(|e| e.count.unwrap_or(1))
        .sum();
    assert!(
        times >= 2 || nominated.len() >= 2,
        "{evicted}: nominated once only ({nominated:?}), yet evicted and run again"
    );

    // Every worker's Kueue frozen: a nomination stays unadmitted. Then its member goes silent
    // (its agent killed), and the other workers' Kueue answers again.
    let frozen = Frozen::new(&t, t.members.keys().map(|m| format!("{m}-kueue")).collect());
    let silent = unique("kueue-silent");
    submit(&t.hub, &kueue_trainjob(&silent, 20)).await;
    let w = workload_of(&t.hub, "TrainJob", &silent, |w| {
        w.data["status"]["nominatedClusterNames"].as_array().is_some_and(|n| n.len() == 1)
    })
    .await;
    let gone = w.data["status"]["nominatedClusterNames"][0].as_str().unwrap_or_default().to_string();
    t.signal(&format!("stowage-agent-{gone}"), "KILL");
    for m in t.members.keys().filter(|m| **m != gone) {
        t.signal(&format!("{m}-kueue"), "CONT");
    }
    // Moved: then the silent member's Kueue answers again, as a member whose agent alone is
    // down would, and its agent comes back.
    let (ran_on, nominated) = finishes_through_kueue(&t, &silent, Duration::from_secs(240)).await;
    drop(frozen);
    t.restart(&format!("stowage-agent-{gone}"));
    assert_ne!(ran_on, gone, "{silent}: ran on the silent member {gone}");
    assert!(
        nominated.iter().any(|m| m.contains(&format!("member {gone} is not live"))),
        "{silent}: moved without saying why: {nominated:?}"
    );
}

/// What RBAC grants each of Stowage's identities on the real API servers, as docs/operations.md's
/// RBAC table says, asked with `kubectl auth can-i` (the real client, impersonating each
/// ServiceAccount): a sample of what each role needs, and of what it must not have.
#[tokio::test]
#[ignore = "needs the real testbed: scripts/test-real"]
async fn each_identity_may_do_what_the_rbac_table_says_and_no_more() {
    let t = Testbed::open().await;
    let member = t.members.keys().next().expect("a member").clone();
    let other = t.members.keys().nth(1).cloned().unwrap_or_else(|| "another-member".into());
    let hub = t.dir.join("hub.kubeconfig");
    let on_member = t.dir.join("members").join(format!("{member}.kubeconfig"));
    let sa = |name: &str| format!("system:serviceaccount:stowage-system:{name}");
    let agent_on_hub = sa(&format!("stowage-agent-{member}"));
    let own_status = format!("memberclusters.stowage.dev/{member}");
    let other_status = format!("memberclusters.stowage.dev/{other}");
    let own_node = format!("nodes/stowage-{member}");
    let own_lease = format!("leases.coordination.k8s.io/stowage-{member}");
    let other_lease = format!("leases.coordination.k8s.io/stowage-{other}");
    // (kubeconfig, who, verb, resource, subresource, namespace, allowed)
    let cases: Vec<(&std::path::Path, String, &str, &str, &str, &str, bool)> = vec![
        (&hub, sa("stowage-dispatcher"), "list", "trainjobs.trainer.kubeflow.org", "", "", true),
        (&hub, sa("stowage-dispatcher"), "patch", "trainjobs.trainer.kubeflow.org", "status", "default", true),
        (&hub, sa("stowage-dispatcher"), "create", "placements.stowage.dev", "", "default", true),
        (&hub, sa("stowage-dispatcher"), "update", "placements.stowage.dev", "", "default", true),
        (&hub, sa("stowage-dispatcher"), "patch", "workloads.kueue.x-k8s.io", "status", "default", true),
        (&hub, sa("stowage-dispatcher"), "create", "leases.coordination.k8s.io", "", "stowage-system", true),
        (&hub, sa("stowage-dispatcher"), "delete", "placements.stowage.dev", "", "default", false),
        (&hub, sa("stowage-dispatcher"), "create", "trainjobs.trainer.kubeflow.org", "", "default", false),
        (&hub, sa("stowage-dispatcher"), "delete", "pods", "", "default", false),
        (&hub, sa("stowage-dispatcher"), "get", "secrets", "", "stowage-system", false),
        (&hub, agent_on_hub.clone(), "watch", "placements.stowage.dev", "", "default", true),
        (&hub, agent_on_hub.clone(), "patch", "placements.stowage.dev", "status", "default", true),
        (&hub, agent_on_hub.clone(), "get", "trainjobs.trainer.kubeflow.org", "", "default", true),
        (&hub, agent_on_hub.clone(), "create", "pods", "", "default", true),
        (&hub, agent_on_hub.clone(), "patch", &own_status, "status", "", true),
        (&hub, agent_on_hub.clone(), "patch", &own_node, "status", "", true),
        (&hub, agent_on_hub.clone(), "patch", &other_status, "status", "", false),
        (&hub, agent_on_hub.clone(), "patch", &own_lease, "", "kube-node-lease", true),
        (&hub, agent_on_hub.clone(), "create", &own_lease, "", "kube-node-lease", true),
        (&hub, agent_on_hub.clone(), "patch", &other_lease, "", "kube-node-lease", false),
        (&hub, agent_on_hub.clone(), "list", "trainjobs.trainer.kubeflow.org", "", "default", false),
        (&hub, agent_on_hub.clone(), "create", "placements.stowage.dev", "", "default", false),
        (&hub, agent_on_hub.clone(), "get", "secrets", "", "default", false),
        (&hub, sa("stowage-webhook"), "get", "clustertrainingruntimes.trainer.kubeflow.org", "", "", true),
        (&hub, sa("stowage-webhook"), "watch", "trainingruntimes.trainer.kubeflow.org", "", "default", true),
        (&hub, sa("stowage-webhook"), "list", "trainjobs.trainer.kubeflow.org", "", "default", false),
        (&hub, sa("stowage-webhook"), "create", "events", "", "default", false),
        (&hub, sa("stowage-relay"), "get", "pods", "", "default", true),
        (&hub, sa("stowage-relay"), "create", "tokenreviews.authentication.k8s.io", "", "", true),
        (&hub, sa("stowage-relay"), "list", "pods", "", "default", false),
        (&hub, sa("stowage-relay"), "create", "pods", "", "default", false),
        (&on_member, sa("stowage-agent"), "create", "jobsets.jobset.x-k8s.io", "", "default", true),
        (&on_member, sa("stowage-agent"), "delete", "jobsets.jobset.x-k8s.io", "", "default", true),
        (&on_member, sa("stowage-agent"), "get", "pods", "log", "default", true),
        (&on_member, sa("stowage-agent"), "list", "nodes", "", "", true),
        (&on_member, sa("stowage-agent"), "get", "customresourcedefinitions.apiextensions.k8s.io", "", "", true),
        (&on_member, sa("stowage-agent"), "create", "pods", "", "default", false),
        (&on_member, sa("stowage-agent"), "delete", "nodes", "", "", false),
        (&on_member, sa("stowage-agent"), "create", "clusterrolebindings.rbac.authorization.k8s.io", "", "", false),
    ];
    let mut wrong = Vec::new();
    for (kubeconfig, who, verb, resource, subresource, namespace, allowed) in &cases {
        let mut cmd = std::process::Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(kubeconfig).args(["auth", "can-i", verb, resource, "--as", who]);
        if !subresource.is_empty() {
            cmd.arg(format!("--subresource={subresource}"));
        }
        if namespace.is_empty() {
            cmd.arg("--all-namespaces=false");
        } else {
            cmd.args(["-n", namespace]);
        }
        let out = cmd.output().expect("kubectl auth can-i");
        // Exit 0: yes; 1: no; anything else is kubectl failing to ask.
        let answer = match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            _ => panic!("kubectl auth can-i {verb} {resource}: {}", String::from_utf8_lossy(&out.stderr)),
        };
        if answer != *allowed {
            let sub = if subresource.is_empty() { String::new() } else { format!("/{subresource}") };
            wrong.push(format!("{who} {verb} {resource}{sub} in {namespace:?}: {answer}, the table says {allowed}"));
        }
    }
    assert!(wrong.is_empty(), "RBAC differs from docs/operations.md's table:\n{}", wrong.join("\n"));
}
