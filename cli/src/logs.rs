//! `stowage logs` (a TrainJob's log from the hub, as `kubectl logs` on its pod copy) and
//! `stowage relay` (the hub side of the log relay, `member_agent::logs`), and the agent's
//! client of the relay.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use api::trainer::TrainJob;
use clap::Args;
use futures::AsyncBufReadExt;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use member_agent::logs::relay::{AGENT_PREFIX, Relay};

use super::{CliError, kube_client};

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The TrainJob's name.
    name: String,
    /// Its namespace.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    /// Follow the log until the pod ends.
    #[arg(short, long)]
    follow: bool,
    /// The node (by rank) whose log to print.
    #[arg(long, default_value_t = 0, conflicts_with = "step")]
    node: u32,
    /// A step as the Kubeflow SDK names them: node-N, launcher, dataset-initializer or
    /// model-initializer.
    #[arg(long)]
    step: Option<String>,
    /// Only the last N lines.
    #[arg(long)]
    tail: Option<i64>,
    /// Kubeconfig of the hub; default: the usual resolution.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

/// A TrainJob's step: which replicated job, which pod of it (by completion index), which
/// container, as the Kubeflow SDK's `get_job_logs(step=…)` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub replicated_job: String,
    pub index: u32,
    pub container: String,
}

impl Step {
    pub fn parse(s: &str) -> Result<Step, String> {
        let node = |index: u32| Step { replicated_job: "node".into(), index, container: "node".into() };
        match s {
            "launcher" => Ok(Step { replicated_job: "launcher".into(), index: 0, container: "node".into() }),
            "dataset-initializer" | "model-initializer" => {
                Ok(Step { replicated_job: s.into(), index: 0, container: s.into() })
            }
            _ => s.strip_prefix("node-").and_then(|i| i.parse::<u32>().ok()).map(node).ok_or_else(|| {
                format!("{s:?} is not a step (node-N, launcher, dataset-initializer or model-initializer)")
            }),
        }
    }

    pub fn name(&self) -> String {
        if self.replicated_job == "node" { format!("node-{}", self.index) } else { self.replicated_job.clone() }
    }

    /// The step's pod among a TrainJob's: the newest one of its replicated job and index (a
    /// TrainJob placed again, or restarted, has had others). Where there is a launcher (MPI and
    /// DeepSpeed), the SDK numbers it `node-0` and the workers from `node-1`.
    pub fn pick<'a>(&self, pods: &'a [Pod]) -> Option<&'a Pod> {
        let (rjob, index) = match (self.replicated_job.as_str(), has_launcher(pods)) {
            ("node", true) if self.index == 0 => ("launcher", 0),
            ("node", true) => ("node", self.index - 1),
            (rjob, _) => (rjob, self.index),
        };
        let index = index.to_string();
        pods.iter()
            .filter(|p| {
                let l = p.labels();
                l.get("jobset.sigs.k8s.io/replicatedjob-name").map(String::as_str) == Some(rjob)
                    && l.get("batch.kubernetes.io/job-completion-index").is_none_or(|i| *i == index)
                    && p.metadata.deletion_timestamp.is_none()
            })
            .max_by_key(|p| (p.creation_timestamp().map(|t| t.0), p.name_any()))
    }
}

fn has_launcher(pods: &[Pod]) -> bool {
    pods.iter().any(|p| p.labels().get("jobset.sigs.k8s.io/replicatedjob-name").map(String::as_str) == Some("launcher"))
}

/// How many `node-N` steps a TrainJob's pods make, as the SDK counts them: one per completion
/// index of its nodes, and its launcher.
pub fn node_steps(pods: &[Pod]) -> u32 {
    let indexes: std::collections::BTreeSet<&str> = pods
        .iter()
        .filter(|p| p.labels().get("jobset.sigs.k8s.io/replicatedjob-name").map(String::as_str) == Some("node"))
        .filter_map(|p| p.labels().get("batch.kubernetes.io/job-completion-index").map(String::as_str))
        .collect();
    indexes.len() as u32 + u32::from(has_launcher(pods))
}

pub fn logs_command(args: LogsArgs) -> Result<(), CliError> {
    let setup = |message: String| CliError::Setup { what: "stowage logs".into(), message };
    let step = match &args.step {
        Some(s) => Step::parse(s).map_err(setup)?,
        None => Step { replicated_job: "node".into(), index: args.node, container: "node".into() },
    };
    let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    rt.block_on(async {
        let hub = kube_client(args.kubeconfig.as_deref(), "hub kubeconfig").await?;
        let (ns, name) = (&args.namespace, &args.name);
        let reading = |e: kube::Error| setup(format!("reading the hub: {e}"));
        if Api::<TrainJob>::namespaced(hub.clone(), ns).get_opt(name).await.map_err(reading)?.is_none() {
            return Err(setup(format!("no TrainJob {ns}/{name} on the hub")));
        }
        let pods = Api::<Pod>::namespaced(hub, ns);
        let listed = pods
            .list(&ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={name}")))
            .await
            .map_err(reading)?;
        let steps = node_steps(&listed.items);
        if step.replicated_job == "node" && steps > 0 && step.index >= steps {
            return Err(setup(format!(
                "TrainJob {ns}/{name} has steps node-0 to node-{}: {} is not one of them",
                steps - 1,
                step.name()
            )));
        }
        let pod = step.pick(&listed.items).ok_or_else(|| {
            setup(format!(
                "TrainJob {ns}/{name} has no pod for step {} yet: it has not started, or its member's agent \
                 has not mirrored it (`stowage explain {name} -n {ns}` says why)",
                step.name()
            ))
        })?;
        let pod_name = pod.name_any();
        let params = LogParams {
            container: Some(step.container.clone()),
            follow: args.follow,
            tail_lines: args.tail,
            ..Default::default()
        };
        let failed = |source| CliError::Log { pod: format!("{ns}/{pod_name}"), source: Box::new(source) };
        let mut lines = pods.log_stream(&pod_name, &params).await.map_err(failed)?.lines();
        while let Some(line) = lines.try_next().await.map_err(|e| failed(kube::Error::ReadEvents(e)))? {
            // A reader that stopped (`| head`) wants no more, even of a followed log.
            if !crate::print_stdout(&format!("{line}\n"))? {
                break;
            }
        }
        Ok(())
    })
}

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Kubeconfig of the hub (to find a pod's member and review agents' tokens); default: the
    /// usual resolution.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where the hub's API server reads logs (the members' virtual Nodes name it as their
    /// kubelet).
    #[arg(long, default_value = "0.0.0.0:10250")]
    kubelet_addr: SocketAddr,
    /// Where the members' agents connect.
    #[arg(long, default_value = "0.0.0.0:8443")]
    tunnel_addr: SocketAddr,
    /// PEM certificate chain for both faces (a kubernetes.io/tls Secret's tls.crt); without
    /// it, plain HTTP (a playground only: the API server dials kubelets over HTTPS).
    #[arg(long, requires = "tls_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key (the Secret's tls.key).
    #[arg(long, requires = "tls_cert_file")]
    tls_key_file: Option<PathBuf>,
    /// PEM CA of the API server's kubelet client certificate (its
    /// --kubelet-client-certificate): the kubelet face then serves only callers it signed, as
    /// a kubelet does.
    #[arg(long, requires = "tls_cert_file")]
    client_ca_file: Option<PathBuf>,
    /// The hub username prefix of agents: the agent of member X is PREFIX + X.
    #[arg(long, default_value = AGENT_PREFIX)]
    agent_prefix: String,
    /// Address for /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    health_addr: SocketAddr,
}

pub fn relay_command(args: RelayArgs) -> Result<(), CliError> {
    use kube_shell::serve::{bind, serve, tls};
    let (kubelet_tls, tunnel_tls) = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => {
            (Some(Arc::new(tls(cert, key, args.client_ca_file.as_deref())?)), Some(Arc::new(tls(cert, key, None)?)))
        }
        _ => {
            tracing::warn!("no --tls-cert-file: serving plain HTTP, which a real API server does not dial");
            (None, None)
        }
    };
    let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    rt.block_on(async {
        let hub = kube_client(args.kubeconfig.as_deref(), "hub kubeconfig").await?;
        let relay = Relay::new(hub, args.agent_prefix);
        let (kubelet, tunnel) = (bind(args.kubelet_addr).await?, bind(args.tunnel_addr).await?);
        tracing::info!(kubelet = %args.kubelet_addr, tunnel = %args.tunnel_addr, "relaying pod logs");
        // Ready once it listens: it keeps no cache.
        let ready = kube_shell::health::Readiness::default();
        ready.set();
        let registry = Arc::new(prometheus_client::registry::Registry::default());
        tokio::spawn(kube_shell::health::serve(args.health_addr, registry, ready));
        tokio::select! {
            _ = serve(kubelet, kubelet_tls, relay.kubelet_handler()) => {}
            _ = serve(tunnel, tunnel_tls, relay.tunnel_handler()) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}

/// The agent's client of the relay's tunnel: the hub kubeconfig's credentials (the relay
/// reviews the token on the hub), sent to `url`, trusting `ca` when given.
pub fn relay_client(mut config: kube::Config, url: &str, ca: Option<&Path>) -> Result<kube::Client, CliError> {
    let setup = |message: String| CliError::Setup { what: "--log-relay".into(), message };
    config.cluster_url = url.parse().map_err(|e| setup(format!("{url:?}: {e}")))?;
    if let Some(ca) = ca {
        use tokio_rustls::rustls::pki_types::CertificateDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let pem = std::fs::read(ca).map_err(|e| setup(format!("{}: {e}", ca.display())))?;
        let certs: Vec<Vec<u8>> =
            CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok).map(|c| c.to_vec()).collect();
        if certs.is_empty() {
            return Err(setup(format!("{} holds no certificate", ca.display())));
        }
        config.root_cert = Some(certs);
    }
    kube::Client::try_from(config).map_err(|e| setup(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, rjob: &str, index: &str, created: i64) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name,
            "creationTimestamp": k8s_openapi::jiff::Timestamp::from_second(created).expect("time").to_string(),
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": rjob, "batch.kubernetes.io/job-completion-index": index}}}))
        .expect("pod")
    }

    #[test]
    fn a_step_names_its_pod_and_container_as_the_sdk_does() {
        assert_eq!(Step::parse("node-3").expect("node").index, 3);
        assert_eq!(Step::parse("launcher").expect("launcher").container, "node");
        assert_eq!(Step::parse("model-initializer").expect("init").container, "model-initializer");
        assert!(Step::parse("node-x").is_err());
        assert!(Step::parse("trainer").is_err());
        let pods = [
            pod("a-node-0-0-old", "node", "0", 10),
            pod("a-node-0-1", "node", "1", 20),
            pod("a-node-0-0", "node", "0", 30),
        ];
        let node0 = Step::parse("node-0").expect("node");
        assert_eq!(node0.pick(&pods).map(|p| p.name_any()).as_deref(), Some("a-node-0-0"), "the newest");
        assert_eq!(
            Step::parse("node-1").expect("node").pick(&pods).map(|p| p.name_any()).as_deref(),
            Some("a-node-0-1")
        );
        assert!(Step::parse("launcher").expect("launcher").pick(&pods).is_none());
        assert_eq!(node_steps(&pods), 2);
    }

    #[test]
    fn with_a_launcher_node_0_is_the_launcher_and_the_workers_follow_as_in_the_sdk() {
        let pods = [
            pod("m-launcher-0-0", "launcher", "0", 10),
            pod("m-node-0-0", "node", "0", 10),
            pod("m-node-0-1", "node", "1", 10),
            pod("m-node-0-2", "node", "2", 10),
        ];
        let name = |s: &str| Step::parse(s).expect("step").pick(&pods).map(|p| p.name_any());
        assert_eq!(name("node-0").as_deref(), Some("m-launcher-0-0"));
        assert_eq!(name("node-1").as_deref(), Some("m-node-0-0"));
        assert_eq!(name("node-3").as_deref(), Some("m-node-0-2"));
        assert_eq!(name("node-4"), None);
        assert_eq!(node_steps(&pods), 4, "node-0 to node-3");
        assert_eq!(name("launcher").as_deref(), Some("m-launcher-0-0"));
    }
}
