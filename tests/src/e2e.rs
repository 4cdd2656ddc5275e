//! What the end-to-end tests share: the playground with test timers, TrainJobs, and waiting for
//! what the hub reports. [`Target`] is where a suite runs: the in-process playground through
//! the kubeconfig files it writes, or real clusters through theirs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use api::stowage::{Placement, PlacementPhase};
use api::trainer::TrainJob;
use dispatcher::decide::Settings;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, PostParams};
use member_agent::Timing;
use serde_json::json;
use trainer_render::GangScheduler;

use playground::{Playground, PlaygroundOptions};

/// How long a check waits for what it expects.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// Timers short enough for a test: a member is silent after 5 s, an agent cut off from the hub
/// fences after 2.5 s.
pub fn fast() -> PlaygroundOptions {
    PlaygroundOptions {
        dispatchers: 1,
        settings: Settings {
            member_grace: Duration::from_secs(5),
            backoff: Duration::from_secs(120),
            max_backoff: Duration::from_secs(120),
            ..Settings::default()
        },
        lease_ttl: Duration::from_secs(2),
        resync: Duration::from_millis(200),
        timing: Timing {
            heartbeat: Duration::from_millis(250),
            hub_lost: Duration::from_millis(2500),
            start_timeout: Duration::from_secs(600),
        },
        gang_scheduler: GangScheduler::Coscheduling,
        // No minimum runtime: a test's victims have only just started.
        config: scheduler_core::Config {
            preemption: Some(scheduler_core::Preemption { min_runtime_ms: 0, ..scheduler_core::Preemption::DEFAULT }),
            ..scheduler_core::Config::stowage()
        },
        ..PlaygroundOptions::default()
    }
}

pub async fn playground(options: PlaygroundOptions) -> Playground {
    // RUST_LOG=member_agent=debug,dispatcher=debug shows what the controllers do.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let fleet = Playground::dev_fleet().expect("dev fleet");
    Playground::start(&fleet, options).await.expect("playground")
}

/// A torch TrainJob of `nodes` 8-GPU nodes that runs for `seconds`: simulated members read the
/// annotation; kwok's nodes on the testbed read its pods' `pod-complete.stage.kwok.x-k8s.io/delay`
/// (a runtime patch, as the SDK writes one); on real clusters its pods say so on their log and
/// sleep that long (image `STOWAGE_E2E_IMAGE`, default busybox).
pub fn trainjob(name: &str, nodes: i64, seconds: u32, annotations: serde_json::Value) -> TrainJob {
    let mut annotations = annotations;
    annotations["stowage.dev/simulated-duration-seconds"] = seconds.to_string().into();
    let image = std::env::var("STOWAGE_E2E_IMAGE").unwrap_or_else(|_| "busybox:1.36".into());
    serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": nodes, "image": image,
                             "command": ["sh", "-c", format!("echo stowage-e2e: {name} sleeps {seconds}s; sleep {seconds}")],
                             "resourcesPerNode": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}},
                 "runtimePatches": [{"manager": "stowage.dev/e2e", "trainingRuntimeSpec": {"template": {"spec": {
                     "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": {
                         "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": format!("{seconds}s")}}}}}}]}}}}]}}))
    .expect("trainjob")
}

pub async fn submit(hub: &Client, tj: &TrainJob) {
    Api::<TrainJob>::default_namespaced(hub.clone()).create(&PostParams::default(), tj).await.expect("submitted");
}

/// Polls until `probe` returns something, failing with `what` after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(t) = probe().await {
            return t;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the TrainJob has a condition of `type_` with `status`; returns it.
pub async fn condition(hub: &Client, name: &str, type_: &str, status: &str) -> Condition {
    let tjs: Api<TrainJob> = Api::default_namespaced(hub.clone());
    eventually(&format!("{name}: {type_}={status}"), || {
        let tjs = tjs.clone();
        async move {
            let t = tjs.get(name).await.ok()?;
            t.status?.conditions.into_iter().find(|c| c.type_ == type_ && c.status == status)
        }
    })
    .await
}

/// Waits until the TrainJob is `Pending` for `reason`; returns the condition. A job submitted
/// before the members' first capacity reports says `NoMemberCapacity` first, whatever else
/// would hold it, so a test of any other reason waits for that one.
pub async fn pending_because(hub: &Client, name: &str, reason: &str) -> Condition {
    let tjs: Api<TrainJob> = Api::default_namespaced(hub.clone());
    eventually(&format!("{name}: Pending=True, {reason}"), || {
        let tjs = tjs.clone();
        async move {
            let t = tjs.get(name).await.ok()?;
            t.status?.conditions.into_iter().find(|c| c.type_ == "Pending" && c.status == "True" && c.reason == reason)
        }
    })
    .await
}

/// The pods of JobSet `jobset` (in `default`) on a simulated member, read from its store.
pub fn member_pods(member: &playground::Member, jobset: &str) -> Vec<serde_json::Value> {
    let store = member.sim.server.store().lock().expect("store");
    let pods_rt = store.lookup("", "v1", "pods").expect("pods").clone();
    let of_jobset = |o: &serde_json::Value| o["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == jobset;
    store.list(&pods_rt, Some("default"), &of_jobset, None, None).0
}

pub async fn placement(hub: &Client, name: &str, pred: impl Fn(&Placement) -> bool) -> Placement {
    let api: Api<Placement> = Api::default_namespaced(hub.clone());
    eventually(&format!("placement {name}"), || {
        let api = api.clone();
        let pred = &pred;
        async move { api.get_opt(name).await.ok().flatten().filter(|p| pred(p)) }
    })
    .await
}

pub fn running(p: &Placement) -> bool {
    p.status.as_ref().is_some_and(|s| s.phase == PlacementPhase::Running && s.observed_epoch == p.spec.epoch)
}

pub async fn all_complete(hub: &Client, names: &[String]) {
    for n in names {
        condition(hub, n, "Complete", "True").await;
    }
}

/// Creates a Queue from the YAML of its `metadata` and `spec`.
pub async fn create_queue(hub: &Client, yaml: &str) {
    let queue: api::stowage::Queue =
        input_limits::yaml::from_str(&format!("apiVersion: stowage.dev/v1alpha1\nkind: Queue\n{yaml}")).expect("queue");
    Api::<api::stowage::Queue>::all(hub.clone()).create(&PostParams::default(), &queue).await.expect("queue");
}

/// Waits until the Queue's status satisfies `pred`; returns it.
pub async fn queue_status(
    hub: &Client,
    name: &str,
    pred: impl Fn(&api::stowage::QueueStatus) -> bool,
) -> api::stowage::QueueStatus {
    let api: Api<api::stowage::Queue> = Api::all(hub.clone());
    eventually(&format!("queue {name} status"), || {
        let api = api.clone();
        let pred = &pred;
        async move { api.get(name).await.ok()?.status.filter(|s| pred(s)) }
    })
    .await
}

/// Where a kubeconfig-only suite runs.
pub struct Target {
    pub hub: Client,
    /// Member clients by MemberCluster name.
    pub members: BTreeMap<String, Client>,
    /// Set when the suite runs on the in-process playground, which lives as long as this.
    pub playground: Option<Playground>,
    /// The directory of kubeconfigs written for the playground, removed with the target.
    dir: Option<PathBuf>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            // Best effort: a leftover temporary directory harms nothing.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("members", &self.members.keys().collect::<Vec<_>>())
            .field("playground", &self.playground.is_some())
            .finish()
    }
}

impl Target {
    /// Real clusters when `STOWAGE_E2E_HUB_KUBECONFIG` names the hub's kubeconfig and
    /// `STOWAGE_E2E_MEMBERS` the members' (`east=east.kubeconfig,west=west.kubeconfig`), with
    /// the dispatcher and agents already running there; otherwise the in-process playground,
    /// reached only through the kubeconfig files it writes into a temporary directory.
    pub async fn from_env() -> Target {
        if let Ok(hub) = std::env::var("STOWAGE_E2E_HUB_KUBECONFIG") {
            let members = std::env::var("STOWAGE_E2E_MEMBERS").unwrap_or_default();
            let members = members
                .split(',')
                .filter(|m| !m.is_empty())
                .map(|m| m.split_once('=').expect("STOWAGE_E2E_MEMBERS: NAME=KUBECONFIG,..."))
                .map(|(name, path)| (name.to_string(), PathBuf::from(path)))
                .collect();
            return Target::connect(Path::new(&hub), members, None, None).await;
        }
        let p = playground(fast()).await;
        // One directory per playground: a test binary runs several at once.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("stowage-e2e-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("kubeconfig directory");
        let hub = dir.join("hub.kubeconfig");
        std::fs::write(&hub, p.hub_server.kubeconfig("admin")).expect("hub kubeconfig");
        let mut members = BTreeMap::new();
        for m in &p.members {
            let path = dir.join(format!("{}.kubeconfig", m.name));
            std::fs::write(&path, m.sim.server.kubeconfig(&m.name)).expect("member kubeconfig");
            members.insert(m.name.clone(), path);
        }
        Target::connect(&hub, members, Some(p), Some(dir)).await
    }

    async fn connect(
        hub: &Path,
        members: BTreeMap<String, PathBuf>,
        playground: Option<Playground>,
        dir: Option<PathBuf>,
    ) -> Target {
        let mut clients = BTreeMap::new();
        for (name, path) in members {
            clients.insert(name, client(&path).await);
        }
        Target { hub: client(hub).await, members: clients, playground, dir }
    }
}

/// A client from a kubeconfig file, as `stowage dispatcher --kubeconfig` makes one.
pub async fn client(path: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Client::try_from(config).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
