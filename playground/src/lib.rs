//! The playground: the whole product on one machine. A hub (`kube-mem`) with the Trainer and
//! Stowage CRDs, the example ClusterTrainingRuntimes and a default Queue; one simulated member
//! cluster per fleet cluster ([`member`]: Nodes from the fleet file, and controllers that play
//! the JobSet controller, the gang scheduler and the kubelet) with its real agent; one or more
//! real dispatchers (with leader election when more than one). Each controller talks to the hub
//! as its own client (bearer token), so a test can cut one off. `stowage dev` and the
//! end-to-end tests run on it; the upstream objects it installs are compiled in ([`upstream`]).
//!
//! Who is who on the hub ([`credentials`]): each agent has a token of its own that the hub
//! authenticates as the ServiceAccount `stowage-system/stowage-agent-<member>`, the dispatchers
//! one as `stowage-system/stowage-dispatcher`, the admin kubeconfig one as `kubernetes-admin`;
//! the relay one as `stowage-system/stowage-relay`; any other token, or none, is anonymous. The
//! hub runs RBAC with manifests/' roles and bindings ([`credentials::install_rbac`]) and the
//! shipped ValidatingAdmissionPolicy (manifests/hub/status-writers-policy.yaml), so an agent
//! does what its role grants and writes only its own member's Placement statuses, as on a real
//! hub. What it does not protect: no TLS (tokens travel in the clear on loopback, and kubectl
//! sends none, so anonymous is bound to cluster-admin), and tokens sit in plain files.
//!
//! Product code must not depend on this crate's test hooks: the simulated run time of a job
//! ([`member::DURATION_ANNOTATION`]) is read here, from the hub, and nowhere else.

pub mod admission;
pub mod credentials;
pub mod member;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::stowage::{MemberCluster, MemberClusterSpec, TopologyLevel};
use dispatcher::controller::Options;
use dispatcher::decide::Settings;
use dispatcher::leader::LeaderConfig;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use member_agent::{AgentConfig, Timing};
use simulator::fleet_file::{ClusterSpec, FleetSpec};
use tokio::task::JoinHandle;
use trainer_render::{Capabilities, GangScheduler};

use kube_mem::{ApiServer, Shared};

use crate::member::{DURATION_ANNOTATION, DurationOf, SimulatedMember};

/// The namespace the dispatchers' Lease lives in.
pub const SYSTEM_NAMESPACE: &str = "stowage-system";

#[derive(Debug, thiserror::Error)]
pub enum PlaygroundError {
    #[error("{path}")]
    Io { path: String, source: std::io::Error },
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

fn setup(what: impl Into<String>) -> impl FnOnce(String) -> PlaygroundError {
    let what = what.into();
    move |message| PlaygroundError::Setup { what, message }
}

#[derive(Debug, Clone)]
pub struct PlaygroundOptions {
    /// Dispatcher replicas; more than one elect a leader over a Lease.
    pub dispatchers: usize,
    pub settings: Settings,
    pub lease_ttl: Duration,
    pub resync: Duration,
    pub timing: Timing,
    pub gang_scheduler: GangScheduler,
    /// The dispatcher's scheduling policy.
    pub config: scheduler_core::Config,
    /// Node label keys the agents report beside the well-known ones (`--node-labels`).
    pub node_labels: Vec<String>,
    /// Install Kueue's CRDs on the hub whatever the Kueue mode (`stowage dev --with-kueue-crds`).
    pub kueue_crds: bool,
    /// What the dispatchers and the agents record into: registered by `stowage dev`, which
    /// serves them on one endpoint; recorded and never read otherwise.
    pub dispatcher_metrics: dispatcher::metrics::Metrics,
    pub agent_metrics: member_agent::metrics::Metrics,
}

impl Default for PlaygroundOptions {
    fn default() -> Self {
        PlaygroundOptions {
            dispatchers: 1,
            settings: Settings::default(),
            lease_ttl: Duration::from_secs(15),
            resync: Duration::from_secs(1),
            timing: Timing { heartbeat: Duration::from_secs(2), ..Timing::default() },
            // The runtime's own podGroupPolicy decides, as in Trainer; without one the
            // simulated scheduler still binds each JobSet's pods all or nothing.
            gang_scheduler: GangScheduler::FromRuntime,
            config: scheduler_core::Config::stowage(),
            node_labels: Vec::new(),
            kueue_crds: false,
            dispatcher_metrics: Default::default(),
            agent_metrics: Default::default(),
        }
    }
}

/// A member: its simulated cluster and its agent.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub sim: SimulatedMember,
    pub config: AgentConfig,
    agent: Option<JoinHandle<()>>,
}

/// The hub's log relay (`stowage relay`): its kubelet face, which the members' virtual Nodes
/// name, and its tunnel, which the agents dial; plain HTTP on loopback.
#[derive(Debug)]
pub struct LogRelay {
    pub kubelet: std::net::SocketAddr,
    pub tunnel: std::net::SocketAddr,
    tasks: [JoinHandle<()>; 2],
}

impl LogRelay {
    async fn start(hub: Client) -> Result<LogRelay, PlaygroundError> {
        use kube_shell::serve::{bind, serve};
        let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        let listen = |e: kube_shell::serve::ServeError| setup("log relay")(kube_shell::error_chain(&e));
        let (kubelet, tunnel) = (bind(loopback).await.map_err(listen)?, bind(loopback).await.map_err(listen)?);
        let addr = |l: &tokio::net::TcpListener| l.local_addr().map_err(|e| setup("log relay")(e.to_string()));
        let (kubelet_addr, tunnel_addr) = (addr(&kubelet)?, addr(&tunnel)?);
        let relay = member_agent::logs::relay::Relay::new(hub, member_agent::logs::relay::AGENT_PREFIX);
        let tasks = [
            tokio::spawn(serve(kubelet, None, relay.kubelet_handler())),
            tokio::spawn(serve(tunnel, None, relay.tunnel_handler())),
        ];
        Ok(LogRelay { kubelet: kubelet_addr, tunnel: tunnel_addr, tasks })
    }
}

/// A running playground; dropping it stops everything.
#[derive(Debug)]
pub struct Playground {
    pub hub_server: ApiServer,
    pub log_relay: LogRelay,
    pub members: Vec<Member>,
    dispatchers: Vec<Option<JoinHandle<()>>>,
    options: PlaygroundOptions,
}

impl Drop for Playground {
    fn drop(&mut self) {
        let agents = self.members.iter().filter_map(|m| m.agent.as_ref());
        for t in self.dispatchers.iter().flatten().chain(agents).chain(&self.log_relay.tasks) {
            t.abort();
        }
    }
}

async fn install<K>(api: &Api<K>, text: &str, what: &str) -> Result<(), PlaygroundError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = input_limits::yaml::from_str(text).map_err(|e| setup(what)(e.to_string()))?;
    api.create(&PostParams::default(), &obj).await.map_err(|e| setup(what)(e.to_string()))?;
    Ok(())
}

/// How long a TrainJob's pods run in the simulated members: its [`DURATION_ANNOTATION`] on the
/// hub, looked up by UID. The agent copies nothing for this; production never sees it. Asked
/// for every JobSet on every kubelet pass, so the answers are kept: a TrainJob's UID and its
/// annotation do not change while its JobSet lives. The hub's store is scanned only for a UID
/// not seen before, and each scan keeps every TrainJob's answer: a burst's JobSets, each
/// scanning for its own TrainJob, made the scans quadratic in the burst (0.8 % of its
/// samples, with the hub's store locked).
fn durations_on(hub: &ApiServer) -> DurationOf {
    let shared = hub.shared();
    let known: Mutex<BTreeMap<String, Option<u64>>> = Mutex::default();
    Arc::new(move |uid: &str| {
        let mut known = known.lock().ok()?;
        if let Some(&d) = known.get(uid) {
            return d;
        }
        let store = shared.store.lock().ok()?;
        let rt = store.lookup(api::trainer::GROUP, api::trainer::VERSION, "trainjobs")?.clone();
        for tj in store.objects(&rt) {
            let Some(seen) = tj["metadata"]["uid"].as_str() else { continue };
            let d = tj["metadata"]["annotations"][DURATION_ANNOTATION].as_str().and_then(|d| d.trim().parse().ok());
            known.entry(seen.to_string()).or_insert(d);
        }
        known.get(uid).copied().flatten()
    })
}

/// The topology levels an agent of `cluster` is told about, as `--levels` would.
pub fn levels(cluster: &ClusterSpec) -> Vec<TopologyLevel> {
    cluster
        .topology
        .iter()
        .map(|l| TopologyLevel {
            level: l.level.as_str().into(),
            node_label: l.label.clone().unwrap_or_else(|| l.level.default_label().into()),
        })
        .collect()
}

impl Playground {
    /// Starts a hub, the members of `fleet` with their agents, and the dispatchers.
    pub async fn start(fleet: &FleetSpec, options: PlaygroundOptions) -> Result<Playground, PlaygroundError> {
        let hub_server =
            ApiServer::start().await.map_err(|source| PlaygroundError::Io { path: "hub".into(), source })?;
        credentials::register(&hub_server, fleet);
        let hub = hub_server.client_as(&credentials::admin_token()).map_err(|e| setup("hub client")(e.to_string()))?;
        if let Ok(mut store) = hub_server.store().lock() {
            store.add_validator(std::sync::Arc::new(admission::TrainJobAdmission::default()));
        }
        credentials::install_policy(&hub).await?;
        let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
        for f in upstream::TRAINER_CRDS {
            install(&crds, f.text, f.path).await?;
        }
        for (name, yaml) in api::stowage::crds() {
            install(&crds, &yaml, &name).await?;
        }
        if options.kueue_crds || options.settings.kueue == dispatcher::decide::KueueMode::MultiKueue {
            for f in upstream::KUEUE_CRDS {
                install(&crds, f.text, f.path).await?;
            }
        }
        let runtimes: Api<api::trainer::ClusterTrainingRuntime> = Api::all(hub.clone());
        for f in upstream::RUNTIMES {
            install(&runtimes, f.text, f.path).await?;
        }
        let queues: Api<api::stowage::Queue> = Api::all(hub.clone());
        install(
            &queues,
            // The playground trusts its users (see its banner): its default Queue lets them set
            // a priority by annotation. manifests/hub's does not.
            "apiVersion: stowage.dev/v1alpha1\nkind: Queue\nmetadata: {name: default}\nspec: {allowPriorityAnnotation: true}\n",
            "Queue",
        )
        .await?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
        for ns in [SYSTEM_NAMESPACE, "kubeflow-system"] {
            install(&namespaces, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"), ns).await?;
        }
        // What Trainer ships for the Kubeflow SDK to find its version by.
        let public: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(hub.clone(), "kubeflow-system");
        install(
            &public,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kubeflow-trainer-public, namespace: kubeflow-system}\ndata: {kubeflow_trainer_version: v2.3.0}\n",
            "kubeflow-trainer-public ConfigMap",
        )
        .await?;

        credentials::install_rbac(&hub_server, &hub, fleet).await?;

        let relay_hub =
            hub_server.client_as(&credentials::relay_token()).map_err(|e| setup("relay client")(e.to_string()))?;
        let log_relay = LogRelay::start(relay_hub).await?;
        let mut members = Vec::new();
        for c in &fleet.clusters {
            let sim = SimulatedMember::start(c, durations_on(&hub_server))
                .await
                .map_err(|e| setup(format!("member {}", c.name))(kube_shell::error_chain(&e)))?;
            Api::<MemberCluster>::all(hub.clone())
                .create(
                    &PostParams::default(),
                    &MemberCluster::new(
                        &c.name,
                        MemberClusterSpec { labels: c.labels.clone(), cordoned: false, cost_weight: c.cost_weight },
                    ),
                )
                .await
                .map_err(|e| setup(format!("MemberCluster {}", c.name))(e.to_string()))?;
            let config = AgentConfig {
                cluster: c.name.clone(),
                levels: levels(c),
                node_labels: member_agent::config::node_label_keys(&options.node_labels)
                    .map_err(|e| setup("--node-labels")(e.to_string()))?,
                capabilities: Capabilities { gang_scheduler: options.gang_scheduler, ..Capabilities::default() },
                timing: options.timing,
                metrics: options.agent_metrics.clone(),
                logs: member_agent::config::Logs::Relay(member_agent::mirror::KubeletEndpoint {
                    address: log_relay.kubelet.ip().to_string(),
                    port: log_relay.kubelet.port(),
                }),
            };
            members.push(Member { name: c.name.clone(), sim, config, agent: None });
        }
        let mut p = Playground { hub_server, log_relay, members, dispatchers: Vec::new(), options };
        for name in p.members.iter().map(|m| m.name.clone()).collect::<Vec<_>>() {
            p.start_agent(&name)?;
        }
        for i in 0..p.options.dispatchers {
            p.dispatchers.push(None);
            p.start_dispatcher(i)?;
        }
        Ok(p)
    }

    /// An admin client of the hub.
    pub fn hub(&self) -> Client {
        self.hub_server
            .client_as(&credentials::admin_token())
            .unwrap_or_else(|e| unreachable!("a loopback URL makes a client: {e}"))
    }

    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// The token agent `name` uses on the hub (see `Faults::partition_client`): the one in
    /// [`Playground::agent_kubeconfig`].
    pub fn agent_token(name: &str) -> String {
        credentials::agent_token(name)
    }

    /// Dispatcher replica `i`'s identity: the holder it writes into the Lease. Its token is
    /// [`credentials::dispatcher_token`], not this (the Lease is readable).
    pub fn dispatcher_token(i: usize) -> String {
        format!("dispatcher-{i}")
    }

    /// The hub credentials of member `name`'s agent, as a kubeconfig: `stowage dev` writes it to
    /// `DIR/agents/<name>-on-hub.kubeconfig`, and the agent's hub client is made from this text.
    pub fn agent_kubeconfig(&self, name: &str) -> String {
        self.hub_server.kubeconfig_as(&format!("{name}-on-hub"), &credentials::agent_token(name))
    }

    /// An administrator's kubeconfig of the hub (`stowage dev`'s `hub.kubeconfig`).
    pub fn admin_kubeconfig(&self) -> String {
        self.hub_server.kubeconfig_as("stowage-hub", &credentials::admin_token())
    }

    /// (Re)starts member `name`'s agent, its hub client made from [`Playground::agent_kubeconfig`].
    pub fn start_agent(&mut self, name: &str) -> Result<(), PlaygroundError> {
        let kubeconfig = self.agent_kubeconfig(name);
        let m = self
            .members
            .iter_mut()
            .find(|m| m.name == name)
            .ok_or_else(|| setup("agent")(format!("no member {name}")))?;
        let member = m.sim.server.client_as("agent").map_err(|e| setup("member client")(e.to_string()))?;
        if let Some(t) = m.agent.take() {
            t.abort();
        }
        let config = m.config.clone();
        let cluster = m.name.clone();
        let relay = {
            let url =
                format!("http://{}", self.log_relay.tunnel).parse().map_err(|e| setup("relay URL")(format!("{e}")))?;
            let mut config = kube::Config::new(url);
            config.auth_info.token = Some(credentials::agent_token(name).into());
            Client::try_from(config).map_err(|e| setup("relay client")(e.to_string()))?
        };
        m.agent = Some(tokio::spawn(async move {
            match credentials::client_from_kubeconfig(&kubeconfig).await {
                Ok(hub) => {
                    // The agent and its end of the log tunnel live and die together, as in one pod.
                    let tunnel = member_agent::logs::tunnel::run(relay, member.clone(), cluster.clone());
                    tokio::join!(member_agent::controller::run(hub, member, config), tunnel);
                }
                Err(e) => {
                    tracing::error!(member = %cluster, error = %e, "the agent's hub kubeconfig does not make a client")
                }
            }
        }));
        Ok(())
    }

    /// Kills member `name`'s agent, as a crashed pod.
    pub fn stop_agent(&mut self, name: &str) {
        if let Some(t) = self.members.iter_mut().find(|m| m.name == name).and_then(|m| m.agent.take()) {
            t.abort();
        }
    }

    /// (Re)starts dispatcher replica `i`.
    pub fn start_dispatcher(&mut self, i: usize) -> Result<(), PlaygroundError> {
        let hub = self
            .hub_server
            .client_as(&credentials::dispatcher_token(i))
            .map_err(|e| setup("dispatcher client")(e.to_string()))?;
        let leader = (self.options.dispatchers > 1).then(|| LeaderConfig {
            namespace: SYSTEM_NAMESPACE.into(),
            lease: "stowage-dispatcher".into(),
            identity: Self::dispatcher_token(i),
            ttl: self.options.lease_ttl,
        });
        let opts = Options {
            settings: self.options.settings,
            leader,
            resync: self.options.resync,
            config: self.options.config,
            metrics: self.options.dispatcher_metrics.clone(),
        };
        let slot = self.dispatchers.get_mut(i).ok_or_else(|| setup("dispatcher")(format!("no replica {i}")))?;
        if let Some(t) = slot.take() {
            t.abort();
        }
        *slot = Some(tokio::spawn(dispatcher::controller::run(hub, opts)));
        Ok(())
    }

    /// Kills dispatcher replica `i`, as a crashed pod: whatever it was doing stops mid-way.
    pub fn stop_dispatcher(&mut self, i: usize) {
        if let Some(t) = self.dispatchers.get_mut(i).and_then(Option::take) {
            t.abort();
        }
    }

    /// Live JobSets (not finished, not being deleted) per TrainJob UID: the members running
    /// one. Read from the members' stores directly, so a monitor can sample it often.
    pub fn live_jobsets(&self) -> BTreeMap<String, Vec<String>> {
        live_jobsets(&self.member_stores())
    }

    fn member_stores(&self) -> Vec<(String, Arc<Shared>)> {
        self.members.iter().map(|m| (m.name.clone(), m.sim.server.shared())).collect()
    }

    /// Samples [`Playground::live_jobsets`] every few milliseconds until dropped, recording every
    /// moment one TrainJob had JobSets live on two members.
    pub fn watch_for_duplicates(&self) -> DuplicateMonitor {
        let members = self.member_stores();
        let seen: Arc<Mutex<Vec<Duplicate>>> = Arc::default();
        let out = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let twice = live_jobsets(&members).into_iter().filter(|(_, on)| on.len() > 1);
                out.lock().unwrap_or_else(|e| e.into_inner()).extend(twice);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        DuplicateMonitor { task, seen }
    }

    /// The built-in dev fleet's file.
    pub fn dev_fleet() -> Result<FleetSpec, PlaygroundError> {
        FleetSpec::parse(DEV_FLEET_YAML, "built-in dev fleet")
            .map_err(|e| setup("dev fleet")(kube_shell::error_chain(&e)))
    }
}

/// The playground's default fleet: three members of different shapes.
pub const DEV_FLEET_YAML: &str = include_str!("../dev-fleet.yaml");

fn live_jobsets(members: &[(String, Arc<Shared>)]) -> BTreeMap<String, Vec<String>> {
    let mut live: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, shared) in members {
        let Ok(store) = shared.store.lock() else { continue };
        let Some(rt) = store.lookup("jobset.x-k8s.io", "v1alpha2", "jobsets").cloned() else { continue };
        for js in store.list(&rt, None, &|_| true, None, None).0 {
            let finished = js["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| (c["type"] == "Completed" || c["type"] == "Failed") && c["status"] == "True")
            });
            let uid = js["metadata"]["labels"][api::stowage::TRAINJOB_UID_LABEL].as_str();
            if let (Some(uid), false, true) = (uid, finished, js["metadata"]["deletionTimestamp"].is_null()) {
                live.entry(uid.to_string()).or_default().push(name.clone());
            }
        }
    }
    live
}

/// A TrainJob UID and the members it was live on at once.
pub type Duplicate = (String, Vec<String>);

/// Records TrainJobs seen live on two members at once; stops when dropped.
#[derive(Debug)]
pub struct DuplicateMonitor {
    task: JoinHandle<()>,
    seen: Arc<Mutex<Vec<Duplicate>>>,
}

impl DuplicateMonitor {
    /// Every (TrainJob UID, members) seen running twice so far.
    pub fn duplicates(&self) -> Vec<Duplicate> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for DuplicateMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}
