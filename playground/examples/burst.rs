//! The playground's latency benchmark: N TrainJobs submitted to the hub at once; for each, the
//! time from its creation returning to its JobSet existing on a member. Prints p50/p99,
//! placements per second, and the dispatcher's own decision time for the same N on the same
//! fleet before the burst (the pure `decide` with the dispatcher's policy, timed apart from the
//! API round trips).
//!
//! The fleet is the dev fleet, each pool's nodes multiplied by the least factor that holds all N
//! one-GPU TrainJobs (1 up to 672).
//!
//! `cargo build --locked --release -p playground --example burst && target/release/examples/burst [N]`
//! (default 500; the release profile, as the issue measured), or `scripts/bench-burst`, which runs it five
//! times and writes the table in docs/performance.md; from the repository root with ../shared
//! beside it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::trainer::TrainJob;
use dispatcher::decide::{Observed, Settings, decide};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource as _;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube_shell::lean::{self, Lean};
use playground::{Playground, PlaygroundOptions};
use serde_json::json;

// The `stowage` binary's allocator (cli/src/main.rs): the burst measures what `stowage dev` runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// CPU time so far of each of this process's threads, by name (Linux's /proc; empty elsewhere):
/// where a burst's CPU goes, which the machine's cores bound before anything else.
fn thread_cpu() -> BTreeMap<String, Duration> {
    let mut by_name: BTreeMap<String, Duration> = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return by_name };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // `pid (comm) state ...`: the name may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat(5), in clock ticks (100 a second on Linux).
        let ticks: u64 = fields.get(11..13).into_iter().flatten().filter_map(|f| f.parse::<u64>().ok()).sum();
        *by_name.entry(stat[open + 1..close].to_string()).or_default() += Duration::from_millis(ticks * 10);
    }
    by_name
}

/// A request as the tallies below name it: its resource (and subresource), and its verb.
fn label(a: &kube_mem::Access) -> (String, String) {
    let what = match &a.subresource {
        Some(sub) => format!("{}/{sub}", a.resource),
        None => a.resource.clone(),
    };
    (what, a.verb.clone())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(500);
    // RUST_LOG=dispatcher=debug,member_agent=debug shows what the controllers do meanwhile.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .init();
    // The dev fleet, each pool's nodes times the least factor that holds all N at once: a
    // burst measures placing what fits, not the dispatcher deciding again, every cycle, over
    // the jobs that cannot start (at N = 2,000 the plain dev fleet holds only 672).
    let mut fleet = Playground::dev_fleet()?;
    let gpus: u64 =
        fleet.clusters.iter().flat_map(|c| &c.pools).map(|p| u64::from(p.gpus_per_node) * u64::from(p.nodes)).sum();
    let times = u32::try_from((n as u64).div_ceil(gpus).max(1))?;
    for pool in fleet.clusters.iter_mut().flat_map(|c| &mut c.pools) {
        pool.nodes *= times;
    }
    let p = Playground::start(&fleet, PlaygroundOptions::default()).await?;
    let hub = p.hub();
    // Let the agents report capacity first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The client decodes what it reads without managedFields (`kube_shell::lean`), as the
    // controllers do: it measures them, not its own decoding.
    let tjs = lean::api(Api::<TrainJob>::default_namespaced(hub.clone()));
    let trainjob = |i: usize| -> TrainJob {
        serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": format!("burst-{i:04}"), "annotations": {"stowage.dev/simulated-duration-seconds": "3600"}},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}}}))
        .unwrap_or_else(|e| unreachable!("a valid TrainJob: {e}"))
    };
    // Watch the members' JobSets, as any client would, and note when each TrainJob's appears.
    // With a back-off, as every watch should have: once the servers stop at the end, a watcher
    // without one retries at once, each request failing at once, and never yields, so the
    // runtime's shutdown waited on it for ever (the rare hang at exit, caught by its stacks).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    // Their metadata alone (`lean::meta`): the benchmark measures the dispatcher and the
    // agents, and decoding whole JobSets and Placements to read a label or an owner was a
    // part of the CPU it reports as theirs.
    for m in &p.members {
        let api = lean::meta(Api::<api::jobset::JobSet>::all(m.sim.server.client_as("observer")?));
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(kube::runtime::watcher(api, Default::default()).default_backoff());
            while let Some(e) = events.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(js) | kube::runtime::watcher::Event::InitApply(js)) = e
                    && let Some(uid) = js.meta().labels.as_ref().and_then(|l| l.get(api::stowage::TRAINJOB_UID_LABEL))
                {
                    let _ = tx.send((uid.clone(), Instant::now()));
                }
            }
        });
    }
    // And the hub's Placements, to split the latency between the dispatcher and the agents.
    let (ptx, mut prx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    {
        let api = lean::meta(Api::<api::stowage::Placement>::all(hub.clone()));
        tokio::spawn(async move {
            let mut events = std::pin::pin!(kube::runtime::watcher(api, Default::default()).default_backoff());
            while let Some(e) = events.next().await {
                // A Placement's controller is its TrainJob (the dispatcher makes it so).
                if let Ok(kube::runtime::watcher::Event::Apply(p) | kube::runtime::watcher::Event::InitApply(p)) = e
                    && let Some(owner) = p.meta().owner_references.iter().flatten().find(|r| r.controller == Some(true))
                {
                    let _ = ptx.send((owner.uid.clone(), Instant::now()));
                }
            }
        });
    }
    // The fleet before the burst, for timing the decision alone below: read after it, the
    // members would report the burst's own GPUs taken.
    let members: Vec<api::stowage::MemberCluster> = Api::all(hub.clone()).list(&ListParams::default()).await?.items;
    // Every request the hub serves from here on, to count its writes per TrainJob.
    p.hub_server.faults().record_accesses();
    for m in &p.members {
        m.sim.server.faults().record_accesses();
    }
    let cpu_before = thread_cpu();
    let started = Instant::now();
    let created: Vec<(String, Instant)> = futures::stream::iter(0..n)
        .map(|i| {
            let tjs = tjs.clone();
            let tj = trainjob(i);
            async move {
                let made = tjs.create(&PostParams::default(), &Lean(tj)).await;
                (made.map(|Lean(t)| t.metadata.uid.unwrap_or_default()), Instant::now())
            }
        })
        .buffer_unordered(32)
        .filter_map(|(uid, at)| async move { uid.ok().map(|u| (u, at)) })
        .collect()
        .await;
    let submitted = started.elapsed();
    let mut seen: BTreeMap<String, Instant> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < created.len() {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((uid, at))) => {
                seen.entry(uid).or_insert(at);
            }
            _ => break,
        }
    }
    let cpu_after = thread_cpu();
    let mut placed_at: BTreeMap<String, Instant> = BTreeMap::new();
    while let Ok((uid, at)) = prx.try_recv() {
        placed_at.entry(uid).or_insert(at);
    }
    let mut to_placement: Vec<Duration> =
        created.iter().filter_map(|(uid, at)| placed_at.get(uid).map(|p| p.saturating_duration_since(*at))).collect();
    to_placement.sort();
    let mut latencies: Vec<Duration> =
        created.iter().filter_map(|(uid, at)| seen.get(uid).map(|s| s.saturating_duration_since(*at))).collect();
    latencies.sort();
    // The agents' share alone: each TrainJob's Placement appearing to its JobSet appearing.
    let mut placement_to_jobset: Vec<Duration> =
        placed_at.iter().filter_map(|(uid, p)| seen.get(uid).map(|s| s.saturating_duration_since(*p))).collect();
    placement_to_jobset.sort();
    // BURST_TIMELINE=FILE: each TrainJob's creation, Placement and JobSet, in ms since the
    // first create, one line each: where a slow burst's time went, job by job.
    if let Some(path) = std::env::var_os("BURST_TIMELINE") {
        let ms = |t: Option<&Instant>| {
            t.map_or(String::from("-"), |t| format!("{:.1}", t.duration_since(started).as_secs_f64() * 1e3))
        };
        let lines: Vec<String> = created
            .iter()
            .map(|(uid, at)| format!("{} {} {}", ms(Some(at)), ms(placed_at.get(uid)), ms(seen.get(uid))))
            .collect();
        std::fs::write(path, lines.join("\n") + "\n")?;
    }
    let last = seen.values().max().map_or(Duration::ZERO, |t| t.duration_since(started));
    // The hub's writes until the last JobSet appeared (the agents' heartbeats included).
    let mut writes: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut reads: BTreeMap<(String, String), usize> = BTreeMap::new();
    for a in p.hub_server.faults().requests() {
        let tally =
            if matches!(a.verb.as_str(), "create" | "update" | "patch" | "delete") { &mut writes } else { &mut reads };
        *tally.entry(label(&a)).or_default() += 1;
    }

    // The decision alone: every TrainJob pending, the fleet as the agents reported it before.
    let observed = Observed {
        trainjobs: tjs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|Lean(mut t)| {
                t.status = None;
                t
            })
            .collect(),
        cluster_runtimes: Api::all(hub.clone()).list(&ListParams::default()).await?.items,
        members,
        queues: Api::all(hub.clone()).list(&ListParams::default()).await?.items,
        ..Observed::default()
    };
    let mut decide_times = Vec::new();
    let mut placed = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let plan = decide(
            &observed,
            &scheduler_core::Config::stowage(),
            &Settings::default(),
            Time(k8s_openapi::jiff::Timestamp::now()),
        );
        decide_times.push(t.elapsed());
        placed = plan.placements.len();
    }
    decide_times.sort();

    let fleet_name = if times == 1 { "the dev fleet".to_string() } else { format!("the dev fleet × {times}") };
    println!(
        "burst of {n} TrainJobs (1 × 1 GPU each) on {fleet_name} ({} members, {} GPUs)",
        p.members.len(),
        gpus * u64::from(times)
    );
    println!("  submitted in            {:>8.1} ms", submitted.as_secs_f64() * 1e3);
    println!("  JobSets seen            {:>8} of {}", latencies.len(), created.len());
    if !latencies.is_empty() {
        println!("  creation → JobSet p50   {:>8.1} ms", percentile(&latencies, 0.5).as_secs_f64() * 1e3);
        println!("  creation → JobSet p99   {:>8.1} ms", percentile(&latencies, 0.99).as_secs_f64() * 1e3);
        println!("  creation → JobSet max   {:>8.1} ms", latencies[latencies.len() - 1].as_secs_f64() * 1e3);
        if !to_placement.is_empty() {
            println!("  creation → Placement p50 {:>7.1} ms", percentile(&to_placement, 0.5).as_secs_f64() * 1e3);
            println!("  creation → Placement p99 {:>7.1} ms", percentile(&to_placement, 0.99).as_secs_f64() * 1e3);
        }
        if !placement_to_jobset.is_empty() {
            println!("  Placement → JobSet p50  {:>8.1} ms", percentile(&placement_to_jobset, 0.5).as_secs_f64() * 1e3);
            println!(
                "  Placement → JobSet p99  {:>8.1} ms",
                percentile(&placement_to_jobset, 0.99).as_secs_f64() * 1e3
            );
        }
        println!("  placements per second   {:>8.0}", latencies.len() as f64 / last.as_secs_f64());
    }
    // The Events by reason, counted (`count`) as the hub aggregates them.
    let mut reasons: BTreeMap<String, (usize, i64)> = BTreeMap::new();
    for e in Api::<k8s_openapi::api::core::v1::Event>::default_namespaced(hub.clone())
        .list(&ListParams::default())
        .await?
        .items
    {
        let r = reasons.entry(e.reason.unwrap_or_default()).or_default();
        r.0 += 1;
        r.1 += i64::from(e.count.unwrap_or(1));
    }
    // The burst's CPU by thread: the hub's API server, the members' (their simulated JobSet
    // controller, scheduler and kubelet run on their threads), and the rest (the dispatcher, the
    // agents and this client, on the shared runtime's workers).
    let hub_thread = format!("apiserver-{}", p.hub_server.addr().port());
    let mut cpu: BTreeMap<&str, Duration> = BTreeMap::new();
    for (name, after) in &cpu_after {
        let spent = after.saturating_sub(cpu_before.get(name).copied().unwrap_or_default());
        let group = if *name == hub_thread {
            "hub API server"
        } else if name.starts_with("apiserver-") {
            "member API servers"
        } else {
            "controllers and client"
        };
        *cpu.entry(group).or_default() += spent;
    }
    // What the hub served beside the creates until the last of them: what submission shared
    // the hub with (the submission goal is the hub's write path, and everything else on it).
    let requests = p.hub_server.faults().requests();
    let last_create =
        requests.iter().rposition(|a| a.resource == "trainjobs" && a.verb == "create" && a.subresource.is_none());
    let mut beside: BTreeMap<(String, String), usize> = BTreeMap::new();
    for a in requests.iter().take(last_create.map_or(0, |i| i + 1)) {
        if !(a.resource == "trainjobs" && a.verb == "create") {
            *beside.entry(label(a)).or_default() += 1;
        }
    }
    let total: usize = writes.values().sum();
    println!("  hub writes per TrainJob  {:>7.2}", total as f64 / n.max(1) as f64);
    for ((what, verb), count) in &writes {
        println!("    {verb:>6} {what:<28} {:>6.2}", *count as f64 / n.max(1) as f64);
    }
    println!("  hub requests during submission, besides the creates {}", beside.values().sum::<usize>());
    for ((what, verb), count) in &beside {
        println!("    {verb:>6} {what:<28} {count:>6}");
    }
    let cpu_total: Duration = cpu.values().sum();
    println!("  CPU per TrainJob         {:>7.2} ms", cpu_total.as_secs_f64() * 1e3 / n.max(1) as f64);
    for (group, spent) in &cpu {
        println!("    {group:<34} {:>6.2} ms", spent.as_secs_f64() * 1e3 / n.max(1) as f64);
    }
    // The members' API accesses (the agents' and this client's; their simulated controllers
    // write in process, uncounted), all members together. As the servers audit them: an apply
    // that creates is authorised as a create too, so it counts as a create and a patch.
    let mut member_requests: BTreeMap<(String, String), usize> = BTreeMap::new();
    for a in p.members.iter().flat_map(|m| m.sim.server.faults().requests()) {
        *member_requests.entry(label(&a)).or_default() += 1;
    }
    let member_total: usize = member_requests.values().sum();
    println!("  member accesses per TrainJob {:>3.2}", member_total as f64 / n.max(1) as f64);
    for ((what, verb), count) in &member_requests {
        println!("    {verb:>6} {what:<28} {:>6.2}", *count as f64 / n.max(1) as f64);
    }
    let total_reads: usize = reads.values().sum();
    println!("  hub reads per TrainJob   {:>7.2}", total_reads as f64 / n.max(1) as f64);
    for ((what, verb), count) in &reads {
        println!("    {verb:>6} {what:<28} {:>6.2}", *count as f64 / n.max(1) as f64);
    }
    for (reason, (objects, count)) in &reasons {
        println!(
            "    Events {reason:<21} {:>6.2} per TrainJob, counted {:.2}",
            *objects as f64 / n.max(1) as f64,
            *count as f64 / n.max(1) as f64
        );
    }
    println!(
        "  decide() for all {n}     {:>8.2} ms (median of 5; {placed} placed)",
        decide_times[2].as_secs_f64() * 1e3
    );
    Ok(())
}
