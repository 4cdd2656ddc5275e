//! `stowage dev`: the whole product on one machine, no cluster needed — a hub API server, one
//! simulated member cluster per fleet entry, the dispatcher and one agent per member, in one
//! process (the `playground` crate's [`Playground`], with the upstream CRDs compiled in: it runs from
//! any directory). Users drive it with kubectl and the Kubeflow SDK
//! through the kubeconfigs it writes; each agent's own hub credentials are written too
//! (`agents/<member>-on-hub.kubeconfig`), so an admin can try exactly what an agent may do. The
//! banner says what the playground does not protect.

use std::net::SocketAddr;
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
    #[error("--dir {dir}: a playground runs there already (pid {pid}); stop it, or pick another --dir")]
    Running { dir: String, pid: u32 },
}

/// The file naming the process whose playground's kubeconfigs are in a `--dir`.
const PID_FILE: &str = "stowage-dev.pid";

/// The example the banner offers, written into `--dir` so that its path works from anywhere.
const EXAMPLE: &str = include_str!("../../examples/torch-rack.yaml");

/// The pid of a live `stowage dev` that owns `dir`, if one does: its pid file names a process
/// that still runs a binary of this one's name (a pid file left by a killed one, or a pid
/// reused by another program, is not one; a rebuilt binary's old process still is).
fn running_in(dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join(PID_FILE)).ok()?.trim().parse().ok()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let ours = std::env::current_exe().ok()?;
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    (pid != std::process::id() && name(&exe).starts_with(&name(&ours))).then_some(pid)
}

/// Removes what a start wrote into `dir` when it fails or stops: its pid file, and the directory
/// itself when this start made it and nothing else is in it.
struct Claim<'a> {
    dir: &'a Path,
    made: bool,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(PID_FILE));
        if self.made {
            // Only empty directories go: a kubeconfig written is kept for whoever looks.
            let _ = std::fs::remove_dir(self.dir);
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DevError + '_ {
    move |source| DevError::Io { path: path.display().to_string(), source }
}

pub async fn run(
    fleet_file: Option<&Path>,
    dir: &Path,
    metrics_addr: SocketAddr,
    settings: dispatcher::decide::Settings,
    kueue_crds: bool,
    node_labels: Vec<String>,
) -> Result<(), DevError> {
    let spec = match fleet_file {
        Some(p) => FleetSpec::load(p)?,
        None => FleetSpec::parse(DEV_FLEET_YAML, "built-in dev fleet")?,
    };
    spec.build(&fleet_file.map(|p| p.display().to_string()).unwrap_or_else(|| "built-in dev fleet".into()))?;
    if let Some(pid) = running_in(dir) {
        return Err(DevError::Running { dir: dir.display().to_string(), pid });
    }
    let made = !dir.exists();
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let _claim = Claim { dir, made };
    let pid_file = dir.join(PID_FILE);
    std::fs::write(&pid_file, format!("{}\n", std::process::id())).map_err(io(&pid_file))?;
    // One registry for the dispatcher and every agent: one endpoint to scrape.
    let mut registry = prometheus_client::registry::Registry::default();
    let shared = kube_shell::metrics::Shared::register(&mut registry);
    let options = PlaygroundOptions {
        dispatcher_metrics: dispatcher::metrics::Metrics::register(&mut registry, &shared),
        agent_metrics: member_agent::metrics::Metrics::register(&mut registry, &shared),
        settings,
        kueue_crds,
        node_labels,
        ..PlaygroundOptions::default()
    };
    let ready = options.dispatcher_metrics.ready.clone();
    let listener = tokio::net::TcpListener::bind(metrics_addr)
        .await
        .map_err(|source| DevError::Io { path: format!("--metrics-addr {metrics_addr}"), source })?;
    let metrics_addr = listener.local_addr().unwrap_or(metrics_addr);
    tokio::spawn(kube_shell::health::serve_on(listener, std::sync::Arc::new(registry), ready));
    let playground = Playground::start(&spec, options).await?;
    let files = playground::credentials::write_kubeconfigs(&playground, dir)?;
    let example = dir.join("torch-rack.yaml");
    std::fs::write(&example, EXAMPLE).map_err(io(&example))?;
    let hub_config = files.hub.clone();
    let paths: Vec<_> = files.members.iter().map(|(_, p)| p.clone()).collect();

    println!("Stowage playground: a hub and {} member clusters, all simulated.\n", playground.members.len());
    println!("  hub            {}   kubeconfig {}", playground.hub_server.url(), hub_config.display());
    for (m, path) in playground.members.iter().zip(&paths) {
        println!("  {:<14} {}   kubeconfig {}", m.name, m.sim.server.url(), path.display());
    }
    println!("  metrics        http://{metrics_addr}/metrics   (dispatcher and agents; /healthz, /readyz)");
    if settings.kueue == dispatcher::decide::KueueMode::MultiKueue {
        println!("  kueue          MultiKueue's external dispatcher: Kueue's CRDs are installed on the hub and");
        println!("                 Stowage nominates a member for each Workload; Kueue itself does not run here");
        println!("                 (docs/kueue.md plays its part with kubectl)");
    } else if kueue_crds {
        println!("  kueue          labels: Kueue's CRDs are installed; LocalQueues, ClusterQueues, ResourceFlavors");
        println!("                 and WorkloadPriorityClasses you create are read as Kueue would (docs/kueue.md)");
    }
    println!("\nEach agent's own hub credentials (the hub runs RBAC as manifests/ grants it: an agent reads");
    println!("Placements, TrainJobs and runtimes, writes Placement statuses, its pod copies and Events, and");
    println!("its own MemberCluster's status; the admission policy ties each Placement's status to its");
    println!("member's agent; the rest is refused, 403):");
    for (name, path) in &files.agents {
        println!("  {:<14} {}", name, path.display());
    }
    if let Some((other, path)) = files.agents.first() {
        println!(
            "  try: kubectl --kubeconfig {} patch placement NAME --subresource=status --type=merge -p '{{\"status\":{{\"phase\":\"Succeeded\"}}}}'",
            path.display()
        );
        println!("       (refused unless NAME is placed on {other})");
    }
    println!("\nNot protected — a playground, not a hub to share:");
    println!("  - no TLS: every API server here is plain HTTP on 127.0.0.1; tokens cross loopback in the clear.");
    println!(
        "  - tokens sit in plain files under {} (mode 0600); anyone who can read them is that client.",
        dir.display()
    );
    println!("  - anonymous is admin: kubectl sends no token over plain HTTP, so the hub takes a request");
    println!("    without a known token as system:anonymous, and the playground binds that user to");
    println!("    cluster-admin. The admin, dispatcher, relay and agent tokens are each held to their role");
    println!("    (the Kubeflow SDK and kube-rs clients send theirs); a client that drops its token is admin.");
    println!("  - the member API servers authenticate no one at all.");
    println!("\nSubmit a TrainJob to the hub and watch it run:");
    println!("  kubectl --kubeconfig {} apply -f {}", hub_config.display(), example.display());
    println!("  kubectl --kubeconfig {} get trainjobs -w", hub_config.display());
    println!("  kubectl --kubeconfig {} get placements", hub_config.display());
    if let Some(first) = paths.first() {
        println!("A member's JobSets and pods:  kubectl --kubeconfig {} get jobsets,pods -o wide", first.display());
    }
    println!("\nEvery object lives in this process's memory: a restart on the same --dir starts an empty");
    println!("hub and members, with new tokens in new kubeconfigs.");
    // Last: scripts and tests read the banner up to this line.
    println!("Ctrl-C stops everything.");
    tokio::signal::ctrl_c().await.map_err(io(dir))?;
    drop(playground);
    println!("stopped");
    Ok(())
}
