//! A burst of one-node TrainJobs on the real testbed (`scripts/testbed up`), a benchmark:
//! submitted all at once to the hub, then timed from each TrainJob's creation to its JobSet on a
//! member and to its first pod bound by kube-scheduler. `scripts/testbed-burst` runs it for
//! Stowage, for Kueue with Stowage as MultiKueue's dispatcher, and for Kueue's own all-at-once
//! dispatcher, on one testbed.
//!
//! ```sh
//! cargo run -p stowage-tests --example testbed_burst -- DIR JOBS PREFIX [QUEUE]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::trainer::TrainJob;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use stowage_tests::e2e::client;

type Seen = Arc<Mutex<BTreeMap<String, Instant>>>;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn millis(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, jobs, prefix, rest @ ..] = args.as_slice() else {
        eprintln!("usage: testbed_burst DIR JOBS PREFIX [QUEUE]");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    let jobs: usize = jobs.parse().unwrap_or_else(|_| panic!("JOBS: a count, not {jobs:?}"));
    let queue = rest.first().cloned();
    let hub = client(&dir.join("hub.kubeconfig")).await;
    let members = std::fs::read_to_string(dir.join("members.txt")).expect("members.txt: is the testbed up?");

    // Watches on every member from before the first create: the first time each JobSet is seen,
    // and the first time a pod of it is bound to a node.
    let (jobsets, bound): (Seen, Seen) = Default::default();
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"), "jobsets");
    for m in members.lines().filter(|l| !l.is_empty()) {
        let c = client(&dir.join("members").join(format!("{m}.kubeconfig"))).await;
        let (js, seen) = (Api::<DynamicObject>::namespaced_with(c.clone(), "default", &ar), jobsets.clone());
        let prefix_js = prefix.clone();
        tokio::spawn(async move {
            let stream = watcher(js, watcher::Config::default()).applied_objects();
            let _ = stream
                .try_for_each(|o| {
                    let name = o.metadata.name.unwrap_or_default();
                    if name.starts_with(&prefix_js) {
                        seen.lock().expect("lock").entry(name).or_insert_with(Instant::now);
                    }
                    futures::future::ready(Ok(()))
                })
                .await;
        });
        let (pods, seen) = (Api::<Pod>::namespaced(c, "default"), bound.clone());
        let prefix_pod = prefix.clone();
        tokio::spawn(async move {
            let stream = watcher(pods, watcher::Config::default()).applied_objects();
            let _ = stream
                .try_for_each(|p| {
                    let owner =
                        p.metadata.labels.as_ref().and_then(|l| l.get("jobset.sigs.k8s.io/jobset-name")).cloned();
                    let on_node = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
                    if let Some(owner) = owner.filter(|o| on_node && o.starts_with(&prefix_pod)) {
                        seen.lock().expect("lock").entry(owner).or_insert_with(Instant::now);
                    }
                    futures::future::ready(Ok(()))
                })
                .await;
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (requests_before, cpu_before) = (hub_requests(&dir), cpu_seconds(&dir));

    // The burst: every create in flight at once (64 at a time, as a client's connection pool
    // would carry them), each timed from when it was sent.
    let api: Api<TrainJob> = Api::default_namespaced(hub);
    let start = Instant::now();
    let created: Vec<(String, Instant)> = futures::stream::iter(0..jobs)
        .map(|i| {
            let api = api.clone();
            let name = format!("{prefix}-{i}");
            let mut labels = json!({});
            if let Some(q) = &queue {
                labels["kueue.x-k8s.io/queue-name"] = q.clone().into();
            }
            async move {
                let tj: TrainJob = serde_json::from_value(json!({
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"runtimeRef": {"name": "torch-distributed"},
                             "trainer": {"numNodes": 1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}}))
                .expect("a TrainJob");
                let sent = Instant::now();
                api.create(&PostParams::default(), &tj).await.unwrap_or_else(|e| panic!("{name}: {e}"));
                (name, sent)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let submitted = start.elapsed();

    let deadline = Instant::now() + Duration::from_secs(600);
    while bound.lock().expect("lock").len() < jobs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (requests, cpu_after) = (hub_requests(&dir) - requests_before, cpu_seconds(&dir));
    let cpu = |process: Option<&str>| -> f64 {
        cpu_after
            .iter()
            .filter(|(p, _)| process.is_none_or(|want| p.as_str() == want))
            .map(|(p, after)| after - cpu_before.get(p).copied().unwrap_or(0.0))
            .sum()
    };
    let (jobsets, bound) = (jobsets.lock().expect("lock").clone(), bound.lock().expect("lock").clone());
    let latencies = |seen: &BTreeMap<String, Instant>| {
        let mut v: Vec<Duration> =
            created.iter().filter_map(|(n, sent)| seen.get(n).map(|t| t.saturating_duration_since(*sent))).collect();
        v.sort();
        v
    };
    let (to_jobset, to_bound) = (latencies(&jobsets), latencies(&bound));
    let last = jobsets.values().max().map_or(Duration::ZERO, |t| t.saturating_duration_since(start));
    println!(
        "{prefix}: {jobs} TrainJobs submitted in {}; JobSet for {} (p50 {}, p99 {}, max {}); a pod bound for {} (p50 {}, p99 {}); {:.0} placements/s",
        millis(submitted),
        to_jobset.len(),
        millis(percentile(&to_jobset, 50.0)),
        millis(percentile(&to_jobset, 99.0)),
        millis(to_jobset.last().copied().unwrap_or_default()),
        to_bound.len(),
        millis(percentile(&to_bound, 50.0)),
        millis(percentile(&to_bound, 99.0)),
        to_jobset.len() as f64 / last.as_secs_f64().max(1e-3),
    );
    println!(
        "{prefix}: the hub was asked {requests:.0} requests ({:.1} per TrainJob); CPU: the hub's kube-apiserver {:.1} s, every testbed process {:.1} s",
        requests / jobs as f64,
        cpu(Some("hub-apiserver")),
        cpu(None),
    );
    if to_bound.len() < jobs {
        eprintln!("{prefix}: only {} of {jobs} had a pod bound within 10 minutes", to_bound.len());
        std::process::exit(1);
    }
}

/// Every request the hub's kube-apiserver has served (its `apiserver_request_total`, summed over
/// verbs, resources and codes), read with kubectl.
fn hub_requests(dir: &std::path::Path) -> f64 {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(dir.join("hub.kubeconfig"))
        .args(["get", "--raw", "/metrics"])
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "the hub's metrics: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The CPU seconds (user and system) each testbed process has used, by its pid file's name.
/// /proc counts in USER_HZ ticks, 100 a second on Linux.
fn cpu_seconds(dir: &std::path::Path) -> BTreeMap<String, f64> {
    let Ok(entries) = std::fs::read_dir(dir.join("pids")) else { return BTreeMap::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.path().file_stem()?.to_string_lossy().into_owned();
            let pid = std::fs::read_to_string(e.path()).ok()?.trim().to_string();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The fields after the command's closing parenthesis: utime and stime are the 12th
            // and 13th (fields 14 and 15 of the whole line).
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split(' ').collect();
            let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
            Some((name, ticks / 100.0))
        })
        .collect()
}
