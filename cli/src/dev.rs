//! `stowage dev`: the whole product on one machine, no cluster needed — a hub API server, one
//! simulated member cluster per fleet entry, the dispatcher and one agent per member, in one
//! process (the `playground` crate's [`Playground`], with the upstream CRDs compiled in: it runs from
//! any directory). Users drive it with kubectl and the Kubeflow SDK
//! through the kubeconfigs it writes.

use std::path::Path;

use playground::{DEV_FLEET_YAML, Playground, PlaygroundError, PlaygroundOptions};
use simulator::fleet_file::{FleetFileError, FleetSpec};

#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error(transparent)]
    Fleet(#[from] FleetFileError),
    #[error(transparent)]
    Playground(#[from] PlaygroundError),
    #[error("{path}")]
    Io { path: String, source: std::io::Error },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DevError + '_ {
    move |source| DevError::Io { path: path.display().to_string(), source }
}

pub async fn run(fleet_file: Option<&Path>, dir: &Path) -> Result<(), DevError> {
    let spec = match fleet_file {
        Some(p) => FleetSpec::load(p)?,
        None => FleetSpec::parse(DEV_FLEET_YAML, "built-in dev fleet")?,
    };
    spec.build(&fleet_file.map(|p| p.display().to_string()).unwrap_or_else(|| "built-in dev fleet".into()))?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let playground = Playground::start(&spec, PlaygroundOptions::default()).await?;
    let hub_config = dir.join("hub.kubeconfig");
    std::fs::write(&hub_config, playground.hub_server.kubeconfig("stowage-hub")).map_err(io(&hub_config))?;
    let mut paths = Vec::new();
    for m in &playground.members {
        let path = dir.join(format!("{}.kubeconfig", m.name));
        std::fs::write(&path, m.sim.server.kubeconfig(&m.name)).map_err(io(&path))?;
        paths.push(path);
    }

    println!("Stowage playground: a hub and {} member clusters, all simulated.\n", playground.members.len());
    println!("  hub            {}   kubeconfig {}", playground.hub_server.url(), hub_config.display());
    for (m, path) in playground.members.iter().zip(&paths) {
        println!("  {:<14} {}   kubeconfig {}", m.name, m.sim.server.url(), path.display());
    }
    println!("\nSubmit a TrainJob to the hub and watch it run:");
    println!("  kubectl --kubeconfig {} apply -f examples/torch-rack.yaml", hub_config.display());
    println!("  kubectl --kubeconfig {} get trainjobs -w", hub_config.display());
    println!("  kubectl --kubeconfig {} get placements", hub_config.display());
    if let Some(first) = paths.first() {
        println!("A member's JobSets and pods:  kubectl --kubeconfig {} get jobsets,pods -o wide", first.display());
    }
    println!("\nCtrl-C stops everything.");
    tokio::signal::ctrl_c().await.map_err(io(dir))?;
    drop(playground);
    println!("stopped");
    Ok(())
}
