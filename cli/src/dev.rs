//! `stowage dev`: the whole product on one machine, no cluster needed — a hub API server, one
//! simulated member cluster per fleet entry, the dispatcher and one agent per member, in one
//! process. Users drive it with kubectl and the Kubeflow SDK through the kubeconfigs it writes.

use std::path::Path;

use api::stowage::{MemberCluster, MemberClusterSpec, TopologyLevel};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::{Client, Config};
use member_agent::controller::AgentConfig;
use member_agent::render::{Capabilities, GangScheduler};
use simulator::fleet_file::{FleetFileError, FleetSpec};
use stowage_tests::apiserver::ApiServer;
use stowage_tests::member::SimulatedMember;

pub const DEV_FLEET_YAML: &str = include_str!("../../examples/dev-fleet.yaml");
const TRAINER_CRDS: [&str; 3] = ["trainjobs", "trainingruntimes", "clustertrainingruntimes"];

#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error(transparent)]
    Fleet(#[from] FleetFileError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DevError + '_ {
    move |source| DevError::Io { path: path.display().to_string(), source }
}

fn setup(what: impl Into<String>) -> impl FnOnce(String) -> DevError {
    let what = what.into();
    move |message| DevError::Setup { what, message }
}

fn client(server: &ApiServer) -> Result<Client, DevError> {
    let uri =
        server.url().parse().map_err(|e| DevError::Setup { what: "API server URL".into(), message: format!("{e}") })?;
    Client::try_from(Config::new(uri)).map_err(|e| DevError::Setup { what: "client".into(), message: e.to_string() })
}

async fn install<K>(api: &Api<K>, text: &str, what: &str) -> Result<(), DevError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_yaml::from_str(text).map_err(|e| setup(what)(e.to_string()))?;
    api.create(&PostParams::default(), &obj).await.map_err(|e| setup(what)(e.to_string()))?;
    Ok(())
}

pub async fn run(fleet_file: Option<&Path>, dir: &Path, upstream: &Path) -> Result<(), DevError> {
    let spec = match fleet_file {
        Some(p) => FleetSpec::load(p)?,
        None => FleetSpec::parse(DEV_FLEET_YAML, "built-in dev fleet")?,
    };
    spec.build(&fleet_file.map(|p| p.display().to_string()).unwrap_or_else(|| "built-in dev fleet".into()))?;
    if !upstream.join("trainer").is_dir() {
        return Err(DevError::Setup {
            what: "--upstream".into(),
            message: format!("{} does not hold the upstream CRDs (trainer/, jobset/, …)", upstream.display()),
        });
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let hub_server = ApiServer::start().await.map_err(io(dir))?;
    let hub = client(&hub_server)?;
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    for k in TRAINER_CRDS {
        let path = upstream.join(format!("trainer/trainer.kubeflow.org_{k}.yaml"));
        install(&crds, &std::fs::read_to_string(&path).map_err(io(&path))?, k).await?;
    }
    for (name, yaml) in api::stowage::crds() {
        install(&crds, &yaml, &name).await?;
    }
    let runtimes: Api<api::trainer::ClusterTrainingRuntime> = Api::all(hub.clone());
    for f in [
        "torch_distributed.yaml",
        "deepspeed_distributed.yaml",
        "mlx_distributed.yaml",
        "jax_distributed.yaml",
        "xgboost_distributed.yaml",
    ] {
        let path = upstream.join("trainer/runtimes").join(f);
        install(&runtimes, &std::fs::read_to_string(&path).map_err(io(&path))?, f).await?;
    }
    let queues: Api<api::stowage::Queue> = Api::all(hub.clone());
    install(
        &queues,
        "apiVersion: stowage.dev/v1alpha1\nkind: Queue\nmetadata: {name: default}\nspec: {}\n",
        "default Queue",
    )
    .await?;
    let hub_config = dir.join("hub.kubeconfig");
    std::fs::write(&hub_config, hub_server.kubeconfig("stowage-hub")).map_err(io(&hub_config))?;

    let mut members = Vec::new();
    let mut tasks = Vec::new();
    for c in &spec.clusters {
        let member = SimulatedMember::start(c, upstream)
            .await
            .map_err(|e| setup(format!("member {}", c.name))(e.to_string()))?;
        let path = dir.join(format!("{}.kubeconfig", c.name));
        std::fs::write(&path, member.server.kubeconfig(&c.name)).map_err(io(&path))?;
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
        let levels = c
            .topology
            .iter()
            .map(|l| TopologyLevel {
                level: l.level.as_str().into(),
                node_label: l.label.clone().unwrap_or_else(|| l.level.default_label().into()),
            })
            .collect();
        let cfg = AgentConfig {
            cluster: c.name.clone(),
            levels,
            // The runtime's own podGroupPolicy decides, as in Trainer; without one the simulated
            // scheduler still binds each JobSet's pods all or nothing.
            capabilities: Capabilities { gang_scheduler: GangScheduler::FromRuntime, ..Capabilities::default() },
        };
        tasks.push(tokio::spawn(member_agent::controller::run(hub.clone(), client(&member.server)?, cfg)));
        members.push((c.name.clone(), path, member));
    }
    tasks.push(tokio::spawn(dispatcher::controller::run(hub.clone(), scheduler_core::Config::default())));

    println!("Stowage playground: a hub and {} member clusters, all simulated.\n", members.len());
    println!("  hub            {}   kubeconfig {}", hub_server.url(), hub_config.display());
    for (name, path, m) in &members {
        println!("  {name:<14} {}   kubeconfig {}", m.server.url(), path.display());
    }
    println!("\nSubmit a TrainJob to the hub and watch it run:");
    println!("  kubectl --kubeconfig {} apply -f examples/torch-rack.yaml", hub_config.display());
    println!("  kubectl --kubeconfig {} get trainjobs,placements -w", hub_config.display());
    println!(
        "A member's JobSets and pods:  kubectl --kubeconfig {} get jobsets,pods -o wide",
        dir.join("east-h100.kubeconfig").display()
    );
    println!("\nCtrl-C stops everything.");
    tokio::signal::ctrl_c().await.map_err(io(dir))?;
    for t in tasks {
        t.abort();
    }
    drop(members);
    drop(hub_server);
    println!("stopped");
    Ok(())
}
