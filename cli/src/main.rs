//! `stowage`: one binary, one subcommand per role. This file parses arguments, wires the
//! libraries together and maps errors to exit codes; it decides nothing itself.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};

mod dev;
mod logs;
mod whatif;
use simulator::engine::SimOptions;
use simulator::fleet_file::{FleetFileError, FleetSpec};
use simulator::machines::{MachineListFormat, fleet_from_machine_list};
use simulator::policy::Policy;
use simulator::report::table;
use simulator::run::{Inputs, builtin_trace, repeat_trace, run_policies};
use simulator::trace::synthetic::Mix;
use simulator::trace::{LoadOptions, TraceError, TraceFormat};

// Many small, short-lived allocations (a cycle's reasons and placements, a replay's events):
// glibc's malloc took a fifth of a replay's time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "stowage", version, about = "Multi-cluster, topology-aware gang scheduling for Kubeflow TrainJobs")]
struct Cli {
    /// Log lines on stderr: text (coloured only on a terminal) or JSON, one object per line.
    /// The level comes from RUST_LOG (default: warn; `info` says which TrainJob went where and
    /// why).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a job trace on a fleet under each policy and compare them side by side.
    Simulate(SimulateArgs),
    /// The playground: a hub, simulated member clusters, the dispatcher and one agent per
    /// member in one process; kubeconfigs for kubectl and the Kubeflow SDK in --dir.
    Dev(DevArgs),
    /// Run the dispatcher against a hub cluster (the same controller `dev` runs).
    Dispatcher(DispatcherArgs),
    /// Run a member agent: pull this cluster's placements from the hub, apply them here.
    Agent(AgentArgs),
    /// Serve Kubeflow Trainer's TrainJob admission (its validating webhook's checks, answered as
    /// Trainer answers) to the hub's API server, over TLS (manifests/hub-webhook).
    Webhook(WebhookArgs),
    /// Print the objects a TrainJob renders into (JobSet, PodGroup, MPI ConfigMap and Secret),
    /// as Kubeflow Trainer would, optionally pinned to a Placement: a dry run.
    Render(RenderArgs),
    /// Why a TrainJob on the hub is where it is: for one that waits, the cycle's reason, its
    /// place in its queue, when capacity is reserved for it, and what each member alone answers.
    Explain(ExplainArgs),
    /// Print a TrainJob's log from the hub (its node 0 by default), wherever it runs.
    Logs(logs::LogsArgs),
    /// Serve the members' pod logs to the hub's API server (as their virtual Nodes' kubelet),
    /// over connections the members' agents make (manifests/hub-relay).
    Relay(logs::RelayArgs),
    /// Print the Node objects a fleet file describes (topology labels, GPU product, capacity),
    /// as a List for `kubectl apply -f -`: fake nodes for kwok, a kind cluster or a dry run.
    Nodes(NodesArgs),
}

#[derive(Debug, Args)]
struct NodesArgs {
    /// Fleet file (the simulator's format); default: `stowage dev`'s built-in fleet.
    #[arg(long)]
    fleet: Option<PathBuf>,
    /// Only this member's nodes; default: every member's.
    #[arg(long)]
    member: Option<String>,
    /// Annotate them `kwok.x-k8s.io/node: fake`, the annotation kwok manages nodes by.
    #[arg(long)]
    kwok: bool,
    /// Print the members' names instead, one a line.
    #[arg(long, conflicts_with = "levels")]
    list_members: bool,
    /// Print each member's topology levels instead, as `stowage agent --levels` takes them
    /// (LEVEL=NODE_LABEL,...), one member a line.
    #[arg(long)]
    levels: bool,
}

#[derive(Debug, Args)]
struct ExplainArgs {
    /// The TrainJob's name.
    name: String,
    /// Its namespace.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    /// Kubeconfig of the hub; default: the usual resolution.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The dispatcher's --member-grace-seconds, to judge members as it does.
    #[arg(long, default_value_t = 120)]
    member_grace_seconds: u64,
    /// The dispatcher's --kueue, to judge TrainJobs as it does (one Kueue has made a Workload
    /// for is Kueue's in either mode).
    #[command(flatten)]
    kueue: KueueArgs,
}

#[derive(Debug, Args)]
struct WebhookArgs {
    /// Kubeconfig of the hub, where runtimes are looked up; default: the usual resolution.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Address the API server calls (HTTPS).
    #[arg(long, default_value = "0.0.0.0:9443")]
    addr: std::net::SocketAddr,
    /// PEM certificate chain (a kubernetes.io/tls Secret's tls.crt, mounted).
    #[arg(long, default_value = "/certs/tls.crt")]
    tls_cert_file: PathBuf,
    /// PEM private key (the Secret's tls.key).
    #[arg(long, default_value = "/certs/tls.key")]
    tls_key_file: PathBuf,
    /// Address for /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    health_addr: std::net::SocketAddr,
}

#[derive(Debug, Args)]
struct DispatcherArgs {
    /// Kubeconfig of the hub; default: the usual kubeconfig resolution (KUBECONFIG, in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Address for /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    health_addr: std::net::SocketAddr,
    /// Namespace of the leader-election Lease; default: $POD_NAMESPACE, else stowage-system.
    #[arg(long)]
    lease_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "stowage-dispatcher")]
    lease_name: String,
    /// How long the Lease lasts without renewal (seconds).
    #[arg(long, default_value_t = 15)]
    lease_seconds: u64,
    /// This replica's identity in the Lease; default: $POD_NAME, else the host name.
    #[arg(long)]
    identity: Option<String>,
    /// Run without leader election (only ever run one replica then).
    #[arg(long)]
    no_leader_election: bool,
    /// A member whose agent has not reported for this long (seconds) has its TrainJobs placed elsewhere.
    #[arg(long, default_value_t = 120)]
    member_grace_seconds: u64,
    /// First back-off (seconds) from a member a TrainJob could not run on; doubles per repeat.
    #[arg(long, default_value_t = 60)]
    backoff_seconds: u64,
    /// Locality patience: how long a multi-node TrainJob holds out for its preferred topology
    /// level, then until when for the next wider one (EXACT,WIDER: 7d,14d), or none.
    #[arg(long, value_parser = parse_patience, default_value = "7d,14d")]
    locality_patience: Patience,
    /// What crossing each topology level costs a TrainJob's run time, in percent (NVLINK,RACK,
    /// BLOCK,ZONE): a multi-node TrainJob with an expected run time holds out for its preferred
    /// level only while the expected wait is shorter than what running spread would add; none:
    /// locality patience alone decides (docs/policy.md).
    #[arg(long, value_parser = parse_locality_cost, default_value = "20,5,15,100")]
    locality_cost: LocalityCost,
    /// When the first TrainJob that cannot start is given a reservation (capacity held where it
    /// will start soonest; TrainJobs that state they end before may still use it): once it has
    /// waited this long (seconds, or 90m, 4h, 2d), or none (docs/policy.md).
    #[arg(long, value_name = "WAIT", value_parser = parse_reserve_after, default_value = "24h")]
    reserve_after: ReserveAfter,
    /// How many TrainJobs that cannot start may hold a reservation at once: 1 is EASY
    /// backfilling (Slurm's), more is conservative (each planned on the room the ones before
    /// it leave, as Flux's reservation depth), at most 64 (docs/policy.md).
    #[arg(long, value_name = "N", default_value_t = scheduler_core::Reservations::DEFAULT.depth,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(scheduler_core::Reservations::MAX_DEPTH)))]
    reserve_depth: u32,
    /// Shorter TrainJobs first, within a bound: each is ordered (after priority) as if submitted
    /// its expected run time later (the annotation `stowage.dev/expected-runtime-seconds`, else
    /// `activeDeadlineSeconds`), counted at most this long (seconds, or 90m, 6h, 1d); one stating
    /// neither, and every TrainJob of a StrictFIFO queue, counts all of it. The cap doubles
    /// while the TrainJobs waiting have waited twice it on average (CAP,fixed: it does not).
    /// none: submit time alone, as Kueue orders (docs/policy.md).
    #[arg(long, value_name = "CAP", value_parser = parse_short_first, default_value = "6h")]
    short_first: ShortFirst,
    /// A running TrainJob younger than this is never evicted for a higher-priority one (whom a
    /// TrainJob may evict is its Queue's `spec.preemption`): seconds or 90s, 10m, 2h.
    #[arg(long, value_parser = parse_duration_s, default_value = "10m")]
    preemption_min_runtime: u64,
    /// The batch optimiser: assign up to this many TrainJobs at the head of the queue jointly
    /// with an ILP (HiGHS) when one waits for room, keeping its answer only when it admits more
    /// than greedy (docs/policy.md); 0: off. Costs 0.1-0.7 s per cycle on 2 cores at 200, and
    /// several seconds when the window is many multi-node gangs on a crowded fleet
    /// (docs/performance.md, "Contended windows"): the cycle waits for it.
    #[arg(long, value_name = "JOBS", default_value_t = 0)]
    batch_window: usize,
    #[command(flatten)]
    kueue: KueueArgs,
}

/// Kueue's part on the hub (docs/kueue.md).
#[derive(Debug, Args)]
struct KueueArgs {
    /// labels: no Kueue on the hub; Stowage queues every TrainJob and reads Kueue's queue and
    /// priority labels. multikueue: Kueue runs on the hub and queues the TrainJobs that carry its
    /// queue label; Stowage is MultiKueue's external dispatcher and nominates the one member
    /// each Workload runs on (Kueue's Configuration: multiKueue.dispatcherName).
    #[arg(long, value_enum, default_value = "labels")]
    kueue: KueueModeArg,
    /// A Workload nominated to a member that Kueue has not admitted there within this long is
    /// nominated again: seconds or 90s, 10m, 2h.
    #[arg(long, value_parser = parse_duration_s, default_value = "5m")]
    nomination_timeout: u64,
    /// A Workload Kueue evicted (preempted or deactivated, on the hub or a worker) that still
    /// holds its quota this long after, because its TrainJob's status still counts the jobs
    /// MultiKueue copied before deleting them (Kueue v0.17, kubernetes-sigs/kueue#15380), has
    /// those counts cleared so that Kueue queues it again: seconds or 90s, 2m. At least a pod's
    /// termination grace period on the members.
    #[arg(long, value_parser = parse_duration_s, default_value = "60s")]
    eviction_settle: u64,
}

impl KueueArgs {
    fn apply(&self, settings: &mut dispatcher::decide::Settings) {
        settings.kueue = match self.kueue {
            KueueModeArg::Labels => dispatcher::decide::KueueMode::Labels,
            KueueModeArg::Multikueue => dispatcher::decide::KueueMode::MultiKueue,
        };
        settings.nomination_timeout = Duration::from_secs(self.nomination_timeout.max(1));
        settings.eviction_settle = Duration::from_secs(self.eviction_settle);
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum KueueModeArg {
    Labels,
    Multikueue,
}

#[derive(Debug, Args)]
struct AgentArgs {
    /// This member's name: the MemberCluster it reports as and the Placements it takes.
    #[arg(long)]
    cluster: String,
    /// Kubeconfig of the hub (the agent's own, least-privilege credentials).
    #[arg(long)]
    hub_kubeconfig: PathBuf,
    /// Kubeconfig of this member; default: the usual resolution (in-cluster when deployed).
    #[arg(long)]
    member_kubeconfig: Option<PathBuf>,
    /// Topology levels, widest first, as LEVEL=NODE_LABEL (e.g. block=cloud.google.com/gce-topology-block).
    #[arg(long, value_delimiter = ',')]
    levels: Vec<String>,
    /// The member's gang scheduler; default: what each runtime's podGroupPolicy asks for.
    #[arg(long)]
    gang_scheduler: Option<GangSchedulerArg>,
    /// Pin with node affinity, or with Kueue TAS annotations when the member runs Kueue.
    #[arg(long, default_value = "affinity")]
    topology_mode: TopologyModeArg,
    /// With --topology-mode kueue: the member's LocalQueue (in each TrainJob's namespace) that
    /// its JobSets are labelled for, so the member's Kueue admits them (docs/kueue.md).
    #[arg(long, value_name = "LOCALQUEUE")]
    kueue_local_queue: Option<String>,
    #[command(flatten)]
    gang: GangSchedulerTuning,
    /// Address for /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_addr: std::net::SocketAddr,
    /// Node label keys to report with capacity, beside the well-known ones (arch, os,
    /// instance type, region, zone), so node selectors and affinity on them are honoured.
    #[arg(long, value_delimiter = ',')]
    node_labels: Vec<String>,
    /// Report heartbeat and capacity at least this often (seconds).
    #[arg(long, default_value_t = 10)]
    heartbeat_seconds: u64,
    /// Unable to reach the hub this long (seconds), delete the JobSets this agent made; keep it
    /// well under the dispatcher's --member-grace-seconds.
    #[arg(long, default_value_t = 60)]
    hub_lost_seconds: u64,
    /// A gang not running this long (seconds) after its JobSet was made is reported Unschedulable.
    #[arg(long, default_value_t = 600)]
    start_timeout_seconds: u64,
    /// The log relay's tunnel URL (`stowage relay --tunnel-addr`), which this agent dials to
    /// serve its member's pod logs to the hub; with --log-relay-kubelet. Without, the hub has
    /// no logs of this member's pods.
    #[arg(long, requires = "log_relay_kubelet")]
    log_relay: Option<String>,
    /// HOST:PORT the hub's API server reaches the relay's kubelet face at (`stowage relay
    /// --kubelet-addr`), written on this member's virtual Node.
    #[arg(long, requires = "log_relay")]
    log_relay_kubelet: Option<String>,
    /// PEM CA that signed the relay's certificate; default: the hub kubeconfig's CA.
    #[arg(long, requires = "log_relay")]
    log_relay_ca: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct DevArgs {
    /// Fleet file (the simulator's format) for the members; default: three members, the largest
    /// with two blocks of four racks of eight 8-GPU nodes.
    #[arg(long)]
    fleet: Option<PathBuf>,
    /// Where to write hub.kubeconfig and <member>.kubeconfig.
    #[arg(long, default_value = "stowage-dev")]
    dir: PathBuf,
    /// Address for the whole playground's /metrics (dispatcher and every agent), /healthz and
    /// /readyz.
    #[arg(long, default_value = "127.0.0.1:9400")]
    metrics_addr: std::net::SocketAddr,
    #[command(flatten)]
    kueue: KueueArgs,
    /// Install Kueue's CRDs on the hub (LocalQueue, ClusterQueue, ResourceFlavor,
    /// WorkloadPriorityClass and the rest) in labels mode too, so its queues can be tried there
    /// (`--kueue multikueue` always installs them).
    #[arg(long)]
    with_kueue_crds: bool,
    /// Node label keys the agents report beside the well-known ones, as `stowage agent
    /// --node-labels` does: a TrainJob's node selector on such a key can then be met.
    #[arg(long, value_delimiter = ',')]
    node_labels: Vec<String>,
}

#[derive(Debug, Args)]
struct RenderArgs {
    /// File holding one TrainJob.
    #[arg(long)]
    trainjob: PathBuf,
    /// File holding one TrainingRuntime or ClusterTrainingRuntime.
    #[arg(long)]
    runtime: PathBuf,
    /// File holding one Placement (stowage.dev/v1alpha1): pins pod sets to their domains.
    #[arg(long)]
    placement: Option<PathBuf>,
    /// The member's gang scheduler; default: whatever the runtime's podGroupPolicy asks for.
    #[arg(long)]
    gang_scheduler: Option<GangSchedulerArg>,
    /// How placed pod sets are pinned: node affinity, or Kueue TAS annotations (plus affinity).
    #[arg(long, default_value = "affinity")]
    topology_mode: TopologyModeArg,
    /// With --topology-mode kueue: the member's LocalQueue the JobSet is labelled for.
    #[arg(long, value_name = "LOCALQUEUE")]
    kueue_local_queue: Option<String>,
    #[command(flatten)]
    gang: GangSchedulerTuning,
}

/// What a member's gang scheduler names its topology by, for the PodGroup's own constraint
/// (the node affinity pins the gang either way).
#[derive(Debug, Args)]
struct GangSchedulerTuning {
    /// Volcano: the HyperNode tier of each level, as LEVEL=TIER,… (default rack=1,block=2,
    /// zone=3): the PodGroup's networkTopology.highestTierAllowed for the placed level.
    #[arg(long, value_delimiter = ',', value_name = "LEVEL=TIER")]
    volcano_tiers: Vec<String>,
    /// KAI: the member's Topology object, named in the PodGroup's topologyConstraint.
    #[arg(long, value_name = "TOPOLOGY")]
    kai_topology: Option<String>,
}

/// One `LEVEL=VALUE` item of `flag`: the level as the core reads it, and the value; an error
/// naming the flag and the item otherwise.
fn level_pair<'a>(flag: &str, item: &'a str, value: &str) -> Result<(scheduler_core::Level, &'a str), CliError> {
    let bad = |message: String| CliError::Setup { what: flag.into(), message };
    let (level, rest) = item.split_once('=').ok_or_else(|| bad(format!("{item:?} is not LEVEL={value}")))?;
    let level = level.trim().parse().map_err(|e: scheduler_core::topology::UnknownLevel| bad(e.to_string()))?;
    Ok((level, rest))
}

impl GangSchedulerTuning {
    /// The tiers by level as the renderer reads them, and the KAI Topology's name, or an error
    /// naming the flag and the value at fault.
    fn parse(&self) -> Result<(BTreeMap<String, i32>, Option<String>), CliError> {
        let bad = |what: &str, message: String| CliError::Setup { what: what.into(), message };
        let mut tiers = BTreeMap::new();
        for item in &self.volcano_tiers {
            let (level, tier) = level_pair("--volcano-tiers", item, "TIER")?;
            let tier: i32 = tier
                .trim()
                .parse()
                .ok()
                .filter(|t| *t >= 1)
                .ok_or_else(|| bad("--volcano-tiers", format!("{item:?}: a tier is a whole number from 1")))?;
            tiers.insert(level.as_str().to_string(), tier);
        }
        if let Some(name) = &self.kai_topology
            && !kube_conventions::names::is_dns1123_subdomain(name)
        {
            return Err(bad("--kai-topology", format!("{name:?} is not a Kubernetes object name")));
        }
        Ok((tiers, self.kai_topology.clone()))
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum GangSchedulerArg {
    Coscheduling,
    Volcano,
    Kai,
    /// Kubernetes' own PodGroup (scheduling.k8s.io/v1beta1; 1.37+ with the GenericWorkload gate).
    Native,
    None,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum TopologyModeArg {
    Affinity,
    Kueue,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Fleet file (YAML; docs/simulator.md). Default: the built-in three-cluster fleet.
    #[arg(long, conflicts_with = "machines")]
    fleet: Option<PathBuf>,
    /// Build the fleet from a trace's machine list instead (racks and blocks synthesised).
    #[arg(long)]
    machines: Option<PathBuf>,
    /// Format of --machines: philly-revised, philly-listed, openb or pai (the CSV, or the
    /// .tar.gz it ships in).
    #[arg(long, default_value = "philly-revised")]
    machines_format: MachineListFormat,
    /// Job trace. Default: the built-in Philly Sep-Oct 2017 trace.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Instead of a trace, this many jobs of a synthetic mix (--mix), paced for about 86 % of
    /// the fleet's GPUs and seeded by --seed.
    #[arg(long, value_name = "JOBS", conflicts_with = "trace")]
    synthetic: Option<usize>,
    /// The job mix of --synthetic (docs/simulator.md): scale (60 % 1-GPU, 25 % 8-GPU, 15 %
    /// rack-preferring gangs of 2-4 x 8 GPUs, 1 min-4 h), pai (Alibaba PAI 2020's published
    /// shape: mostly fractional and 1-GPU requests) or helios (SenseTime Helios 2020's: 1 to
    /// 128 GPUs, median 1).
    #[arg(long, default_value = "scale", requires = "synthetic")]
    mix: Mix,
    /// A Helios virtual-cluster file (helios-2020/Venus/cluster_gpu_number.csv or
    /// Earth/Earth_gpu_number.csv): the fleet is that cluster on --helios-day (8-GPU V100
    /// nodes), and each VC a queue with its GPUs as quota, in one cohort that lends idle quota
    /// and reclaims it; jobs naming no queue are spread over the VCs in proportion to quota.
    #[arg(long, value_name = "VC_FILE", conflicts_with_all = ["fleet", "machines"])]
    helios: Option<PathBuf>,
    /// The day of --helios whose fleet and quotas to use (YYYY-MM-DD). Default: its first.
    #[arg(long, value_name = "DATE", requires = "helios")]
    helios_day: Option<String>,
    /// Format of --trace: native, philly or openb.
    #[arg(long, default_value = "native")]
    trace_format: TraceFormat,
    /// Drop rows that do not parse (and report how many) instead of failing.
    #[arg(long)]
    skip_bad_rows: bool,
    /// Policies to compare, comma-separated: ours (stowage; stowage-fair with fair sharing,
    /// stowage-batch with the batch optimiser) and the peers'. Default: ours and the three
    /// baselines.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = policies(),
        default_value = "stowage,fifo-firstfit,kueue-multikueue,volcano-binpack"
    )]
    policy: Vec<Policy>,
    /// Seed for everything random: node failures, a synthetic trace, the urgent jobs, and the
    /// worker that wins MultiKueue's race for each job (kueue-multikueue, kueue-incremental).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop at this simulated time: seconds, or with a unit (90m, 36h, 14d). Default: run to the end
    /// (with --from: 24h).
    #[arg(long, value_parser = parse_duration_s)]
    horizon: Option<u64>,
    /// What-if on a live hub: snapshot the hub of this kubeconfig (members' capacity, Queues,
    /// running and waiting TrainJobs) and run it forward with the dispatcher's own cycle: when
    /// each TrainJob is expected to start and end, per queue (docs/simulator.md).
    // The what-if runs the dispatcher's own policy on the hub as it is, so the options that
    // shape a replay (its inputs, policies, load, failures, outputs) are refused beside it
    // rather than silently ignored.
    #[arg(long, value_name = "KUBECONFIG", conflicts_with_all = [
        "fleet", "machines", "trace", "synthetic", "bench", "gpu_sharing", "helios", "helios_day",
        "trace_format", "skip_bad_rows", "policy", "seed", "load_scale", "node_failure_rate", "max_restarts", "tenants",
        "json", "svg", "locality_patience", "locality_cost", "reserve_after", "reserve_depth", "short_first", "preemption_min_runtime", "urgent", "checkpoint_interval", "mix",
        "machines_format", "batch_every", "check_every", "explain",
    ])]
    from: Option<PathBuf>,
    /// With --from: an edit to try, shown beside the hub as it is: `add-pool cluster=X flavor=F
    /// nodes=N [gpus-per-node=G]`, `remove-cluster X`, `quota queue=Q flavor=F gpus=N`. Repeat
    /// for several at once.
    #[arg(long = "what-if", value_name = "EDIT", requires = "from")]
    what_if: Vec<dispatcher::decide::whatif::Edit>,
    /// Compress arrivals in time by this factor ("what if demand grows 1.5x").
    #[arg(long, default_value_t = 1.0)]
    load_scale: f64,
    /// Mean node failures per node per day; a failure evicts the gangs on the node.
    #[arg(long, default_value_t = 0.0)]
    node_failure_rate: f64,
    /// A job whose runs node failures cut short more than this many times fails, as a JobSet
    /// past its failurePolicy.maxRestarts (preemptions do not count).
    #[arg(long, value_name = "N", default_value_t = simulator::engine::MAX_RESTARTS,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(simulator::engine::MAX_RESTARTS_LIMIT)))]
    max_restarts: u32,
    /// Synthetic tenants (queues) for jobs whose trace names none.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=i64::from(simulator::engine::MAX_TENANTS)))]
    tenants: u32,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write utilisation and queueing-delay SVG plots into this directory.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Locality patience of the stowage policy: how long a multi-pod gang holds out for its
    /// preferred level, then until when for the next wider one (EXACT,WIDER: 7d,14d), or none.
    #[arg(long, value_parser = parse_patience, default_value = "7d,14d")]
    locality_patience: Patience,
    /// What crossing each topology level costs a gang's run time, in percent (NVLINK,RACK,
    /// BLOCK,ZONE), as the stowage policy weighs holding a gang for locality against starting
    /// it spread; none: patience alone decides. The simulated world's slowdowns stay the
    /// defaults (docs/simulator.md).
    #[arg(long, value_parser = parse_locality_cost, default_value = "20,5,15,100")]
    locality_cost: LocalityCost,
    /// When the stowage policy gives the first gang that cannot start a reservation (capacity
    /// held where it will start soonest, EASY backfilling): once it has waited this long
    /// (seconds, or 90m, 4h, 2d), or none. The default was chosen on the tuning set
    /// (docs/policy.md).
    #[arg(long, value_name = "WAIT", value_parser = parse_reserve_after, default_value = "24h")]
    reserve_after: ReserveAfter,
    /// How many gangs that cannot start the stowage policy lets hold a reservation at once: 1
    /// is EASY backfilling, more is conservative backfilling (each planned on the room the ones
    /// before it leave, as Flux's reservation depth), at most 64 (docs/policy.md).
    #[arg(long, value_name = "N", default_value_t = scheduler_core::Reservations::DEFAULT.depth,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(scheduler_core::Reservations::MAX_DEPTH)))]
    reserve_depth: u32,
    /// Shorter gangs first, within a bound: the stowage policy orders each gang (after
    /// priority) as if submitted its run time later, counted at most this long (seconds, or
    /// 90m, 6h, 1d), doubled while the gangs waiting have waited twice it on average
    /// (CAP,fixed: never), or none: submit time alone, as the peers order. The default was
    /// chosen on the tuning set (docs/policy.md).
    #[arg(long, value_name = "CAP", value_parser = parse_short_first, default_value = "6h")]
    short_first: ShortFirst,
    /// How long a gang runs before the stowage policy may evict it, for a higher priority or to
    /// reclaim its queue's quota (seconds or 90s, 10m, 2h), as the dispatcher's flag; the Kueue
    /// dispatchers keep Kueue's: none (docs/policy.md).
    #[arg(long, value_parser = parse_duration_s, default_value = "10m")]
    preemption_min_runtime: u64,
    /// Submit this percent of jobs (chosen by id and seed) at high priority: stowage preempts
    /// lower-priority gangs for them, the Kueue dispatchers too (as Kueue does), fifo-firstfit
    /// and volcano-binpack do not.
    #[arg(long, value_name = "PERCENT", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    urgent: u32,
    /// Jobs checkpoint this often (seconds or 30m, 2h): an evicted or failed job resumes from
    /// its last checkpoint, and preemption prefers recently checkpointed victims. Default: never.
    #[arg(long, value_parser = parse_duration_s)]
    checkpoint_interval: Option<u64>,
    /// With stowage-batch: run the batch optimiser on one scheduling cycle in this many, the
    /// others greedy (1: every cycle).
    #[arg(long, value_name = "CYCLES", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    batch_every: u32,
    /// Check the replay's invariants after one instant in this many, and at its end (1: every
    /// instant, as the tests do). Default: 16 in a release build (docs/simulator.md).
    #[arg(long, value_name = "INSTANTS", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    check_every: Option<u32>,
    /// Tell this job's story under each policy after the table: what each cycle told it, one
    /// line per change (why it waited, where it ran, when it ended). Repeat for up to 16 jobs;
    /// the ids are the trace's (the report's `rejected` lines and --json show them).
    #[arg(long, value_name = "JOB", conflicts_with = "bench")]
    explain: Vec<String>,
    /// Benchmark mode: replay the trace repeated N times and report jobs replayed per second.
    #[arg(long, value_name = "N")]
    bench: Option<u32>,
    /// Instead of replaying a trace: the FGD paper's GPU-sharing experiment on an openb folder
    /// (openb_node_list_gpu_node.csv, openb_pod_list_default.csv, fgd-results/), comparing
    /// random, bestfit, fgd and stowage with the authors' published results.
    #[arg(long, value_name = "OPENB_DIR")]
    gpu_sharing: Option<PathBuf>,
    /// Seeds per policy for --gpu-sharing (the authors used 10).
    #[arg(long, default_value_t = 10, requires = "gpu_sharing")]
    seeds: u32,
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Fleet(#[from] FleetFileError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Sim(#[from] simulator::SimError),
    #[error(transparent)]
    Sharing(#[from] simulator::sharing::SharingError),
    #[error("{path}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Svg(#[from] simulator::svg::SvgError),
    #[error(transparent)]
    Manifest(#[from] trainer_render::manifest::ManifestError),
    #[error(transparent)]
    Key(#[from] trainer_render::sshkey::KeyError),
    #[error(transparent)]
    Dev(#[from] dev::DevError),
    #[error(transparent)]
    Webhook(#[from] dispatcher::webhook::WebhookError),
    #[error("the log relay")]
    Serve(#[from] kube_shell::serve::ServeError),
    #[error("reading the log of pod {pod}")]
    Log {
        pod: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("{what}: {message}")]
    Setup { what: String, message: String },
}

/// `EXACT,WIDER` durations (`7d,14d`), or `none`.
#[derive(Debug, Clone, Copy)]
struct Patience(Option<scheduler_core::Patience>);

fn parse_patience(s: &str) -> Result<Patience, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(Patience(None));
    }
    let (exact, wider) =
        s.split_once(',').ok_or_else(|| format!("{s:?}: expected EXACT,WIDER (e.g. 7d,14d) or none"))?;
    let (exact_s, wider_s) = (parse_duration_s(exact)?, parse_duration_s(wider)?);
    if wider_s < exact_s {
        return Err(format!("{s:?}: the wider hold ({wider}) ends before the exact one ({exact})"));
    }
    Ok(Patience(Some(scheduler_core::Patience { exact_ms: exact_s * 1000, wider_ms: wider_s * 1000 })))
}

/// A wait before a reservation (`4h`), or `none`: no reservations.
#[derive(Debug, Clone, Copy)]
struct ReserveAfter(Option<scheduler_core::Reservations>);

impl ReserveAfter {
    /// The reservations, with at most `depth` held at once (`--reserve-depth`).
    fn with_depth(self, depth: u32) -> Option<scheduler_core::Reservations> {
        self.0.map(|r| scheduler_core::Reservations { depth, ..r })
    }
}

fn parse_reserve_after(s: &str) -> Result<ReserveAfter, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(ReserveAfter(None));
    }
    let after_s = parse_duration_s(s)?;
    let after_ms = after_s.saturating_mul(1000);
    Ok(ReserveAfter(Some(scheduler_core::Reservations { after_ms, ..scheduler_core::Reservations::DEFAULT })))
}

/// The most run time a gang is ordered behind by while the queue is short (`6h`; `6h,fixed`:
/// whatever the queue), or `none`: submit time alone.
#[derive(Debug, Clone, Copy)]
struct ShortFirst(Option<scheduler_core::ShortFirst>);

fn parse_short_first(s: &str) -> Result<ShortFirst, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(ShortFirst(None));
    }
    let (cap, grows) = match s.split_once(',') {
        None => (s, true),
        Some((cap, fixed)) if fixed.trim().eq_ignore_ascii_case("fixed") => (cap, false),
        Some((_, other)) => return Err(format!("{other:?}: want CAP (it grows with the queue) or CAP,fixed")),
    };
    let cap_ms = parse_duration_s(cap)?.saturating_mul(1000);
    Ok(ShortFirst(Some(scheduler_core::ShortFirst { cap_ms, grows })))
}

/// Extra run time per level crossed, in percent (`NVLINK,RACK,BLOCK,ZONE`), or `none`.
#[derive(Debug, Clone, Copy)]
struct LocalityCost(Option<scheduler_core::Slowdown>);

fn parse_locality_cost(s: &str) -> Result<LocalityCost, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(LocalityCost(None));
    }
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [nvlink, rack, block, zone] = parts[..] else {
        return Err(format!("{s:?}: expected four percentages NVLINK,RACK,BLOCK,ZONE (e.g. 20,5,15,100) or none"));
    };
    // Thousandths of the run time; a level crossed can at most multiply it by 11.
    let permille = |level: &str, v: &str| -> Result<u32, String> {
        match v.parse::<f64>() {
            Ok(pct) if (0.0..=1000.0).contains(&pct) => Ok((pct * 10.0).round() as u32),
            _ => Err(format!("{s:?}: {level}: {v:?} is not a percentage from 0 to 1000")),
        }
    };
    Ok(LocalityCost(Some(scheduler_core::Slowdown {
        cross_nvlink: permille("NVLINK", nvlink)?,
        cross_rack: permille("RACK", rack)?,
        cross_block: permille("BLOCK", block)?,
        cross_zone: permille("ZONE", zone)?,
    })))
}

/// Every policy by name, so `--help` lists them all and stays in step with `Policy::ALL`.
fn policies() -> impl clap::builder::TypedValueParser<Value = Policy> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Policy::ALL.map(Policy::name)).try_map(|s| s.parse::<Policy>())
}

/// The longest duration an option takes: a century. Longer means never, which the options that
/// allow it spell `none`; and in milliseconds it still fits a `u64` many times over (a number
/// of days past that used to saturate, then overflow when made milliseconds).
const MAX_DURATION_S: u64 = 100 * 365 * 86_400;

fn parse_duration_s(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len()));
    let value: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration (e.g. 3600, 90m, 36h, 14d)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return Err(format!("unknown unit {unit:?} in {s:?} (use s, m, h or d)")),
    };
    let seconds = (value * scale).round();
    if seconds > MAX_DURATION_S as f64 {
        return Err(format!("{s:?} is above the limit of 100 years ({MAX_DURATION_S} s)"));
    }
    Ok(seconds as u64)
}

fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        // Colour codes are noise in a file or a log collector.
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    let result = match cli.command {
        Command::Simulate(args) => simulate(args),
        Command::Render(args) => render(args),
        Command::Explain(args) => explain_command(args),
        Command::Dev(args) => dev_command(args),
        Command::Dispatcher(args) => dispatcher_command(args),
        Command::Agent(args) => agent_command(args),
        Command::Webhook(args) => webhook_command(args),
        Command::Logs(args) => logs::logs_command(args),
        Command::Relay(args) => logs::relay_command(args),
        Command::Nodes(args) => nodes_command(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", kube_shell::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Writes `text` to stdout; `false` when the reader stopped reading (`| head`): the rest is not
/// wanted, and that is no error (Rust's `print!` would panic on the closed pipe).
pub(crate) fn print_stdout(text: &str) -> Result<bool, CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(CliError::Write { path: PathBuf::from("(standard output)"), source: e }),
    }
}

fn nodes_command(args: NodesArgs) -> Result<(), CliError> {
    let spec = match &args.fleet {
        Some(p) => FleetSpec::load(p)?,
        None => FleetSpec::parse(playground::DEV_FLEET_YAML, "built-in dev fleet")?,
    };
    let members: Vec<_> = spec.clusters.iter().filter(|c| args.member.as_ref().is_none_or(|m| &c.name == m)).collect();
    if let (Some(m), true) = (&args.member, members.is_empty()) {
        let known: Vec<&str> = spec.clusters.iter().map(|c| c.name.as_str()).collect();
        return Err(CliError::Setup {
            what: format!("--member {m}"),
            message: format!("the fleet has no such member (it has {})", known.join(", ")),
        });
    }
    if args.list_members || args.levels {
        let lines: Vec<String> = members
            .iter()
            .map(|c| match args.levels {
                true => playground::levels(c)
                    .iter()
                    .map(|l| format!("{}={}", l.level, l.node_label))
                    .collect::<Vec<_>>()
                    .join(","),
                false => c.name.clone(),
            })
            .collect();
        return print_stdout(&(lines.join("\n") + "\n")).map(|_| ());
    }
    let mut items = Vec::new();
    for cluster in members {
        let nodes = playground::member::nodes(cluster).map_err(|e| CliError::Setup {
            what: format!("member {}'s nodes", cluster.name),
            message: e.to_string(),
        })?;
        for mut node in nodes {
            if args.kwok {
                node["metadata"]["annotations"] = serde_json::json!({"kwok.x-k8s.io/node": "fake"});
                node["spec"] = serde_json::json!({"taints": []});
                // kwok initialises a node not yet Ready: its conditions, addresses and kubelet
                // port (without which nothing can read a pod's log there).
                if let Some(status) = node["status"].as_object_mut() {
                    status.remove("conditions");
                }
            }
            items.push(node);
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    print_stdout(&input_limits::yaml::to_string(&list).unwrap_or_default()).map(|_| ())
}

fn simulate(args: SimulateArgs) -> Result<(), CliError> {
    if let Some(dir) = &args.gpu_sharing {
        return gpu_sharing(dir, &args);
    }
    if let Some(kubeconfig) = &args.from {
        let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
        let observed = rt.block_on(async {
            let hub = kube_client(Some(kubeconfig), "--from kubeconfig").await?;
            dispatcher::controller::observe_once(&hub)
                .await
                .map_err(|e| CliError::Setup { what: "reading the hub".into(), message: e.to_string() })
        })?;
        let horizon = Duration::from_secs(args.horizon.unwrap_or(86_400));
        let text = whatif::report(&observed, &args.what_if, horizon)
            .map_err(|e| CliError::Setup { what: "--what-if".into(), message: e.to_string() })?;
        return print_stdout(&text).map(|_| ());
    }
    let helios = match &args.helios {
        Some(path) => Some((simulator::helios::load(path, args.helios_day.as_deref())?, path)),
        None => None,
    };
    let (spec, fleet_name) = match (&args.fleet, &args.machines, &helios) {
        (Some(path), _, _) => (FleetSpec::load(path)?, path.display().to_string()),
        (None, Some(path), _) => (
            fleet_from_machine_list(path, args.machines_format)?,
            format!("{} ({})", path.display(), args.machines_format),
        ),
        (None, None, Some((day, path))) => (day.fleet(), format!("{} (helios, {})", path.display(), day.date)),
        (None, None, None) => (FleetSpec::builtin(), "built-in".to_string()),
    };
    let fleet = spec.build(&fleet_name)?;
    let load = LoadOptions { skip_bad_rows: args.skip_bad_rows };
    let (trace, trace_name) = match (&args.trace, args.synthetic) {
        (Some(path), _) => (simulator::trace::load(path, args.trace_format, &load)?, path.display().to_string()),
        (None, Some(n)) => {
            if n == 0 || n > simulator::trace::synthetic::MAX_JOBS {
                return Err(CliError::Setup {
                    what: "--synthetic".into(),
                    message: format!("{n} jobs: from 1 to {}", simulator::trace::synthetic::MAX_JOBS),
                });
            }
            let gpus: u64 = fleet.hosts().map(|(_, node)| u64::from(node.gpus)).sum();
            let trace = simulator::trace::synthetic::generate(args.mix, n, args.seed, gpus);
            (trace, format!("synthetic {} mix of {n} jobs (seed {}, paced for {gpus} GPUs)", args.mix, args.seed))
        }
        (None, None) => (builtin_trace()?, simulator::run::DEFAULT_TRACE_NAME.to_string()),
    };
    let trace = match args.bench {
        Some(n) => repeat_trace(&trace, n.max(1)),
        None => trace,
    };
    let opts = SimOptions {
        seed: args.seed,
        horizon_s: args.horizon,
        load_scale: args.load_scale,
        node_failure_rate: args.node_failure_rate,
        max_restarts: args.max_restarts,
        tenants: args.tenants,
        queues: helios.as_ref().map(|(day, _)| day.queues()).unwrap_or_default(),
        patience: args.locality_patience.0,
        locality_cost: args.locality_cost.0,
        reservations: args.reserve_after.with_depth(args.reserve_depth),
        short_first: args.short_first.0,
        preemption_min_runtime_ms: args.preemption_min_runtime.saturating_mul(1000),
        urgent_percent: args.urgent,
        checkpoint_interval_s: args.checkpoint_interval,
        batch_every: args.batch_every,
        check_every: args.check_every.unwrap_or(simulator::engine::CHECK_EVERY),
        explain: args.explain.clone(),
        ..SimOptions::default()
    };
    let inputs = Inputs { fleet: &fleet, fleet_name: &fleet_name, trace: &trace, trace_name: &trace_name };
    let mut progress = Progress::new(args.policy.len());
    let started = Instant::now();
    let mut timings = vec![Duration::ZERO; args.policy.len()];
    let mut last = (0usize, started);
    let (report, runs) = run_policies(&inputs, &args.policy, &opts, &mut |i, done, total| {
        if i != last.0 {
            timings[last.0] = last.1.elapsed();
            last = (i, Instant::now());
        }
        progress.update(i, done, total);
    })?;
    timings[last.0] = last.1.elapsed();
    progress.finish();
    print_stdout(&table(&report))?;
    if args.bench.is_some() {
        print_bench(&args.policy, &timings, trace.jobs.len());
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
        std::fs::write(path, text).map_err(|source| CliError::Write { path: path.clone(), source })?;
    }
    if let Some(dir) = &args.svg {
        for p in simulator::svg::write(dir, &runs, fleet.total_gpus())? {
            eprintln!("wrote {}", p.display());
        }
    }
    Ok(())
}

fn gpu_sharing(dir: &std::path::Path, args: &SimulateArgs) -> Result<(), CliError> {
    use simulator::sharing;
    let pods = args.trace.clone().unwrap_or_else(|| dir.join("openb_pod_list_default.csv"));
    let inputs = sharing::load(&dir.join("openb_node_list_gpu_node.csv"), &pods)?;
    let mut report = sharing::experiment(&inputs, &scheduler_core::share::SharePolicy::ALL, args.seeds, args.seed);
    let results = dir.join("fgd-results/analysis_allo_discrete.csv");
    if results.exists() {
        report.published = sharing::published(&results, &inputs.workload)?;
    }
    print_stdout(&sharing::table(&report))?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
        std::fs::write(path, text).map_err(|source| CliError::Write { path: path.clone(), source })?;
    }
    Ok(())
}

async fn kube_client(path: Option<&std::path::Path>, what: &str) -> Result<kube::Client, CliError> {
    let config = kube_config(path, what).await?;
    kube::Client::try_from(config).map_err(|e| CliError::Setup { what: what.to_string(), message: e.to_string() })
}

/// A kubeconfig's client configuration (`path`, else the usual resolution).
async fn kube_config(path: Option<&std::path::Path>, what: &str) -> Result<kube::Config, CliError> {
    let setup = |message: String| CliError::Setup { what: what.to_string(), message };
    Ok(match path {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p).map_err(|e| setup(format!("{}: {e}", p.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| setup(e.to_string()))?
        }
        None => kube::Config::infer().await.map_err(|e| setup(e.to_string()))?,
    })
}

fn gang_scheduler(arg: Option<GangSchedulerArg>) -> trainer_render::GangScheduler {
    use trainer_render::GangScheduler;
    match arg {
        None => GangScheduler::FromRuntime,
        Some(GangSchedulerArg::Coscheduling) => GangScheduler::Coscheduling,
        Some(GangSchedulerArg::Volcano) => GangScheduler::Volcano,
        Some(GangSchedulerArg::Kai) => GangScheduler::Kai,
        Some(GangSchedulerArg::Native) => GangScheduler::Native,
        Some(GangSchedulerArg::None) => GangScheduler::None,
    }
}

fn topology_mode(arg: TopologyModeArg) -> trainer_render::TopologyMode {
    match arg {
        TopologyModeArg::Affinity => trainer_render::TopologyMode::Affinity,
        TopologyModeArg::Kueue => trainer_render::TopologyMode::Kueue,
    }
}

fn webhook_command(args: WebhookArgs) -> Result<(), CliError> {
    let tls = dispatcher::webhook::tls(&args.tls_cert_file, &args.tls_key_file)?;
    let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    rt.block_on(async {
        let hub = kube_client(args.kubeconfig.as_deref(), "hub kubeconfig").await?;
        // Ready as soon as it listens: it keeps no cache.
        let ready = kube_shell::health::Readiness::default();
        ready.set();
        let registry = std::sync::Arc::new(prometheus_client::registry::Registry::default());
        tokio::spawn(kube_shell::health::serve(args.health_addr, registry, ready));
        tokio::select! {
            served = dispatcher::webhook::serve(args.addr, tls, hub) => served?,
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}

fn dispatcher_command(args: DispatcherArgs) -> Result<(), CliError> {
    let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    rt.block_on(async {
        let hub = kube_client(args.kubeconfig.as_deref(), "hub kubeconfig").await?;
        let mut registry = prometheus_client::registry::Registry::default();
        let shared = kube_shell::metrics::Shared::register(&mut registry);
        let metrics = dispatcher::metrics::Metrics::register(&mut registry, &shared);
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let leader = (!args.no_leader_election).then(|| dispatcher::leader::LeaderConfig {
            namespace: args.lease_namespace.or_else(|| env("POD_NAMESPACE")).unwrap_or_else(|| "stowage-system".into()),
            lease: args.lease_name,
            identity: args
                .identity
                .or_else(|| env("POD_NAME"))
                .or_else(|| env("HOSTNAME"))
                .unwrap_or_else(|| format!("stowage-dispatcher-{}", std::process::id())),
            ttl: Duration::from_secs(args.lease_seconds.max(2)),
        });
        let opts = dispatcher::controller::Options {
            settings: {
                let mut settings = dispatcher::decide::Settings {
                    member_grace: Duration::from_secs(args.member_grace_seconds),
                    backoff: Duration::from_secs(args.backoff_seconds),
                    ..Default::default()
                };
                args.kueue.apply(&mut settings);
                settings
            },
            leader,
            metrics,
            config: scheduler_core::Config {
                patience: args.locality_patience.0,
                locality_cost: args.locality_cost.0,
                reservations: args.reserve_after.with_depth(args.reserve_depth),
                short_first: args.short_first.0,
                preemption: Some(scheduler_core::Preemption {
                    min_runtime_ms: args.preemption_min_runtime.saturating_mul(1000),
                    ..scheduler_core::Preemption::DEFAULT
                }),
                batch: (args.batch_window > 0)
                    .then_some(scheduler_core::Batch { window: args.batch_window, ..scheduler_core::Batch::DEFAULT }),
                ..scheduler_core::Config::stowage()
            },
            ..Default::default()
        };
        let ready = opts.metrics.ready.clone();
        tokio::spawn(kube_shell::health::serve(args.health_addr, std::sync::Arc::new(registry), ready));
        tokio::select! {
            _ = dispatcher::controller::run(hub, opts) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}

fn agent_command(args: AgentArgs) -> Result<(), CliError> {
    let levels = args
        .levels
        .iter()
        .map(|l| {
            let (level, label) = level_pair("--levels", l, "NODE_LABEL")?;
            // Written as the hub reads it (`Host` and ` rack` parse too): the agent tells hosts
            // from the levels above them by this name.
            Ok(api::stowage::TopologyLevel { level: level.as_str().to_string(), node_label: label.to_string() })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let node_labels = member_agent::config::node_label_keys(&args.node_labels)
        .map_err(|e| CliError::Setup { what: "--node-labels".into(), message: e.to_string() })?;
    if args.kueue_local_queue.is_some() && !matches!(args.topology_mode, TopologyModeArg::Kueue) {
        return Err(CliError::Setup {
            what: "--kueue-local-queue".into(),
            message: "names the member's Kueue LocalQueue: it needs --topology-mode kueue".into(),
        });
    }
    let (volcano_tiers, kai_topology) = args.gang.parse()?;
    let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    let kubelet = match args.log_relay_kubelet.as_deref() {
        Some(k) => Some(member_agent::mirror::KubeletEndpoint::parse(k).ok_or_else(|| CliError::Setup {
            what: "--log-relay-kubelet".into(),
            message: format!("{k:?} is not HOST:PORT"),
        })?),
        None => None,
    };
    rt.block_on(async {
        let hub_config = kube_config(Some(&args.hub_kubeconfig), "hub kubeconfig").await?;
        // The relay serves logs only; an agent whose relay cannot be set up (its CA Secret not
        // made yet, say) still places work, and says why in status.logs.
        let (relay, logs) = match (&args.log_relay, kubelet) {
            (Some(url), Some(kubelet)) => {
                match logs::relay_client(hub_config.clone(), url, args.log_relay_ca.as_deref()) {
                    Ok(relay) => (Some(relay), member_agent::config::Logs::Relay(kubelet)),
                    Err(e) => {
                        let why = kube_shell::error_chain(&e);
                        tracing::warn!(error = %why, "running without the log relay");
                        (None, member_agent::config::Logs::Off(why))
                    }
                }
            }
            _ => (None, member_agent::config::Logs::Off("the agent runs without --log-relay".into())),
        };
        let hub = kube::Client::try_from(hub_config.clone())
            .map_err(|e| CliError::Setup { what: "hub kubeconfig".into(), message: e.to_string() })?;
        let member = kube_client(args.member_kubeconfig.as_deref(), "member kubeconfig").await?;
        let mut registry = prometheus_client::registry::Registry::default();
        let shared = kube_shell::metrics::Shared::register(&mut registry);
        let cfg = member_agent::AgentConfig {
            cluster: args.cluster,
            levels,
            node_labels,
            capabilities: trainer_render::Capabilities {
                gang_scheduler: gang_scheduler(args.gang_scheduler),
                topology_mode: topology_mode(args.topology_mode),
                kueue_local_queue: args.kueue_local_queue,
                volcano_tiers,
                kai_topology,
            },
            timing: member_agent::Timing {
                heartbeat: Duration::from_secs(args.heartbeat_seconds.max(1)),
                hub_lost: Duration::from_secs(args.hub_lost_seconds),
                start_timeout: Duration::from_secs(args.start_timeout_seconds),
            },
            metrics: member_agent::metrics::Metrics::register(&mut registry, &shared),
            logs,
        };
        let ready = cfg.metrics.ready.clone();
        tokio::spawn(kube_shell::health::serve(args.health_addr, std::sync::Arc::new(registry), ready));
        if let Some(relay) = relay {
            tokio::spawn(member_agent::logs::tunnel::run(relay, member.clone(), cfg.cluster.clone()));
        }
        tokio::select! {
            _ = member_agent::controller::run(hub, member, cfg) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}

fn explain_command(args: ExplainArgs) -> Result<(), CliError> {
    let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    let observed = rt.block_on(async {
        let hub = kube_client(args.kubeconfig.as_deref(), "hub kubeconfig").await?;
        dispatcher::controller::observe_once(&hub)
            .await
            .map_err(|e| CliError::Setup { what: "reading the hub".into(), message: e.to_string() })
    })?;
    let mut settings = dispatcher::decide::Settings {
        member_grace: Duration::from_secs(args.member_grace_seconds),
        ..Default::default()
    };
    args.kueue.apply(&mut settings);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let config = scheduler_core::Config::stowage();
    match dispatcher::decide::explain::explain(&observed, &config, &settings, now, &args.namespace, &args.name) {
        Some(e) => print_stdout(&e.to_string()).map(|_| ()),
        None => Err(CliError::Setup {
            what: "explain".into(),
            message: format!("no TrainJob {}/{} on the hub", args.namespace, args.name),
        }),
    }
}

fn dev_command(args: DevArgs) -> Result<(), CliError> {
    let rt = tokio::runtime::Runtime::new().map_err(CliError::Runtime)?;
    let mut settings = dispatcher::decide::Settings::default();
    args.kueue.apply(&mut settings);
    rt.block_on(dev::run(
        args.fleet.as_deref(),
        &args.dir,
        args.metrics_addr,
        settings,
        args.with_kueue_crds,
        args.node_labels,
    ))?;
    Ok(())
}

fn render(args: RenderArgs) -> Result<(), CliError> {
    use trainer_render::manifest::{self, ManifestError};
    use trainer_render::{self as render, Capabilities, GangScheduler};
    let (trainjob, tj_file) = manifest::trainjob(&args.trainjob)?;
    let (runtime, rt_file) = manifest::runtime(&args.runtime)?;
    let placement = args.placement.as_deref().map(manifest::placement).transpose()?;
    let gang_scheduler = gang_scheduler(args.gang_scheduler);
    let topology_mode = topology_mode(args.topology_mode);
    let (volcano_tiers, kai_topology) = args.gang.parse()?;
    let caps = Capabilities {
        gang_scheduler,
        topology_mode,
        kueue_local_queue: args.kueue_local_queue,
        volcano_tiers,
        kai_topology,
    };
    let is_mpi = runtime.spec().ml_policy.as_ref().is_some_and(|p| p.mpi.is_some());
    let key = if is_mpi { Some(trainer_render::sshkey::generate()?) } else { None };
    let input = render::Input {
        trainjob: &trainjob,
        runtime: &runtime,
        placement: placement.as_ref().map(|p| &p.0),
        capabilities: &caps,
        ssh_key: key.as_ref(),
        jobset_uid: None,
    };
    let pl_file = placement.as_ref().map(|p| p.1.as_str()).unwrap_or("placement");
    let objects = render::render(&input).map_err(|e| ManifestError::from_render(e, &tj_file, &rt_file, pl_file))?;
    let mut out = String::new();
    if matches!(gang_scheduler, GangScheduler::Kai) {
        out.push_str("# KAI names its PodGroup pg-<jobset>-<jobset-uid>; the UID exists once the JobSet does,\n");
        out.push_str("# so this dry run shows an all-zero UID in its place.\n");
    }
    for o in objects {
        out.push_str("---\n");
        out.push_str(&input_limits::yaml::to_string(&o.to_value()).unwrap_or_default());
    }
    print_stdout(&out).map(|_| ())
}

/// Replay speed per policy, and each as a ratio to the first policy measured in this run.
fn print_bench(policies: &[Policy], timings: &[Duration], jobs: usize) {
    println!("\nbench: {jobs} jobs per policy");
    let base = timings.first().map_or(1.0, |d| d.as_secs_f64().max(1e-9));
    for (p, d) in policies.iter().zip(timings) {
        let secs = d.as_secs_f64().max(1e-9);
        println!(
            "  {:18} {:>8.3} s  {:>10.0} jobs/s  {:.2}x the time of {}",
            p.name(),
            secs,
            jobs as f64 / secs,
            secs / base,
            policies[0].name()
        );
    }
}

/// A progress bar on stderr, shown only on a terminal and only once a run has taken a second.
struct Progress {
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
    policies: usize,
}

impl Progress {
    fn new(policies: usize) -> Self {
        Progress { started: Instant::now(), bar: None, policies }
    }

    fn update(&mut self, policy: usize, done: u64, total: u64) {
        if self.bar.is_none() && self.started.elapsed() > Duration::from_secs(1) && std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total * self.policies as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} simulating [{bar:40}] {pos}/{len} jobs ({eta})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_position(policy as u64 * total + done);
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration_s("3600"), Ok(3600));
        assert_eq!(parse_duration_s("90m"), Ok(5400));
        assert_eq!(parse_duration_s("1.5h"), Ok(5400));
        assert_eq!(parse_duration_s("14d"), Ok(1_209_600));
        assert!(parse_duration_s("3 weeks").is_err());
        assert_eq!(parse_duration_s("36500d"), Ok(MAX_DURATION_S));
        for huge in ["36501d", "99999999999999999d", "99999999999999999999", "1.8e19"] {
            let err = parse_duration_s(huge).expect_err(huge);
            assert!(err.contains("100 years") || err.contains("unknown unit"), "{huge}: {err}");
        }
        // A patience past the limit is refused, not made milliseconds past `u64`.
        assert!(parse_patience("99999999999999999d,99999999999999999d").is_err());
        assert!(parse_reserve_after("99999999999999999d").is_err());
    }

    /// The default flag `id` has on `simulate` and on `dispatcher`, with the command's name.
    fn defaults_on_both_commands(id: &str) -> [(String, String); 2] {
        [
            SimulateArgs::augment_args(clap::Command::new("simulate")),
            DispatcherArgs::augment_args(clap::Command::new("dispatcher")),
        ]
        .map(|command| {
            let arg = command.get_arguments().find(|a| a.get_id() == id).unwrap_or_else(|| panic!("--{id}"));
            let default: String = arg.get_default_values().iter().map(|v| v.to_string_lossy()).collect();
            (command.get_name().to_string(), default)
        })
    }

    #[test]
    fn short_first_defaults_to_the_policys_own_cap() {
        for (command, default) in defaults_on_both_commands("short_first") {
            let parsed = parse_short_first(&default).expect("valid").0;
            assert_eq!(parsed, Some(scheduler_core::ShortFirst::DEFAULT), "{command}");
        }
        assert_eq!(parse_short_first("None").expect("valid").0, None);
        let cap = |cap_ms, grows| Some(scheduler_core::ShortFirst { cap_ms, grows });
        assert_eq!(parse_short_first("90m").expect("valid").0, cap(5_400_000, true));
        assert_eq!(parse_short_first("90m,fixed").expect("valid").0, cap(5_400_000, false));
        assert_eq!(parse_short_first("1d, Fixed").expect("valid").0, cap(86_400_000, false));
        for bad in ["soon", "-1h", "6w", "999999999999d", "6h,later", "6h,", ",fixed"] {
            assert!(parse_short_first(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn preemption_min_runtime_defaults_to_the_policys_own_on_both_commands() {
        for (command, default) in defaults_on_both_commands("preemption_min_runtime") {
            let parsed = parse_duration_s(&default).expect("valid");
            assert_eq!(parsed * 1000, scheduler_core::Preemption::DEFAULT.min_runtime_ms, "{command}");
        }
    }

    #[test]
    fn reserve_after_defaults_to_the_policys_own_bound() {
        for (command, default) in defaults_on_both_commands("reserve_after") {
            let parsed = parse_reserve_after(&default).expect("valid").0;
            assert_eq!(parsed, Some(scheduler_core::Reservations::DEFAULT), "{command}");
        }
        for (command, default) in defaults_on_both_commands("reserve_depth") {
            assert_eq!(default, scheduler_core::Reservations::DEFAULT.depth.to_string(), "{command}");
        }
        assert_eq!(parse_reserve_after("none").expect("valid").0, None);
        assert_eq!(
            parse_reserve_after("90m").expect("valid").0,
            Some(scheduler_core::Reservations { after_ms: 5_400_000, ..scheduler_core::Reservations::DEFAULT })
        );
        assert!(parse_reserve_after("soon").is_err());
    }

    #[test]
    fn locality_costs_are_four_percentages_or_none() {
        let LocalityCost(Some(s)) = parse_locality_cost("20, 5,15,100").expect("valid") else { panic!("set") };
        assert_eq!(s, scheduler_core::Slowdown::DEFAULT);
        let LocalityCost(Some(s)) = parse_locality_cost("0,2.5,0,1000").expect("valid") else { panic!("set") };
        assert_eq!((s.cross_rack, s.cross_zone), (25, 10_000));
        assert!(parse_locality_cost("NONE").expect("valid").0.is_none());
        let bad = |v: &str| parse_locality_cost(v).expect_err(v);
        assert!(bad("20,5,15").contains("NVLINK,RACK,BLOCK,ZONE"), "{}", bad("20,5,15"));
        for (v, field) in
            [("20,-5,15,100", "RACK"), ("20,5,NaN,100", "BLOCK"), ("20,5,15,1e9", "ZONE"), ("x,5,15,100", "NVLINK")]
        {
            assert!(bad(v).contains(&format!("{field}:")), "{v}: {}", bad(v));
        }
    }
}
