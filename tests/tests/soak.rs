//! The soak: many TrainJobs through the playground while random faults strike, and an invariant
//! checker over the whole run. Faults: a member cut off from the hub (and back), an agent
//! restarted, the leading dispatcher killed, the hub stalled, 500 and 429 bursts, a JobSet
//! deleted by hand on a member. Invariants, checked every 100 ms: never two live JobSets for
//! one TrainJob; a capped queue's live JobSets never over its quota; every TrainJob neither
//! finished nor placed says why it waits (once the hub has been quiet a moment);
//! and at the end every TrainJob complete, none lost.
//!
//! `scripts/test` runs the short version (40 TrainJobs). The long one, outside CI time:
//! `STOWAGE_SOAK_JOBS=2000 STOWAGE_SOAK_SEED=7 cargo test --release -p stowage-tests --test soak`
//! (docs/testing.md has its figures). The same seed gives the same faults in the same order;
//! their timing against the controllers is the machine's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::jobset::JobSet;
use api::stowage::{Placement, QUEUE_LABEL};
use api::trainer::TrainJob;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use playground::Playground;
use serde_json::json;
use stowage_tests::e2e::*;
use tokio::time::Instant;

/// splitmix64: a seeded sequence with no dependency, so a seed names a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The capped queue's quota per flavor, in GPUs.
const CAP: u64 = 16;
const CAPPED: &str = "capped";
const MEMBERS: [(&str, &str); 3] =
    [("east-h100", "nvidia-h100-80gb"), ("west-a100", "nvidia-a100-80gb"), ("central-l40s", "nvidia-l40s")];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    MemberSilent,
    AgentRestart,
    LeaderKill,
    HubStall,
    Errors500,
    Errors429,
    JobSetDeleted,
}

const FAULTS: [Fault; 7] = [
    Fault::MemberSilent,
    Fault::AgentRestart,
    Fault::LeaderKill,
    Fault::HubStall,
    Fault::Errors500,
    Fault::Errors429,
    Fault::JobSetDeleted,
];

/// What the checker saw go wrong, with when (seconds into the run).
type Violations = Arc<Mutex<Vec<String>>>;

#[tokio::test]
async fn trainjobs_under_random_faults_are_never_lost_run_twice_over_quota_or_left_without_a_reason() {
    let jobs = env_or("STOWAGE_SOAK_JOBS", 40) as usize;
    let mut rng = Rng(env_or("STOWAGE_SOAK_SEED", 1));
    let mut options = fast();
    options.dispatchers = 2;
    let mut p = playground(options).await;
    let hub = p.hub();
    create_queue(
        &hub,
        &format!(
            "metadata: {{name: {CAPPED}}}\nspec:\n  quotas:\n  - {{flavor: nvidia-h100-80gb, resource: nvidia.com/gpu, nominalQuota: '{CAP}'}}\n  - {{flavor: nvidia-a100-80gb, resource: nvidia.com/gpu, nominalQuota: '{CAP}'}}\n"
        ),
    )
    .await;
    let monitor = p.watch_for_duplicates();
    let start = Instant::now();
    let quiet_since: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(Some(start)));
    let violations: Violations = Arc::default();
    let checker = tokio::spawn(check(hub.clone(), member_clients(&p), quiet_since.clone(), violations.clone(), start));

    let mut names = Vec::new();
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut timeline: Vec<String> = Vec::new();
    let mut next_fault = start + Duration::from_millis(rng.between(500, 1500));
    let deadline = start + Duration::from_secs(120 + jobs as u64);
    loop {
        // Submit in bursts while faults strike; then wait for the rest to complete.
        if names.len() < jobs {
            for _ in 0..rng.between(1, 4).min((jobs - names.len()) as u64) {
                let name = format!("soak-{}", names.len());
                submit_retrying(&hub, &soak_job(&name, &mut rng)).await;
                names.push(name);
            }
        } else if complete(&hub).await >= jobs {
            break;
        }
        assert!(Instant::now() < deadline, "the soak did not finish in time; faults so far: {faults:?}");
        if Instant::now() >= next_fault {
            let fault = FAULTS[rng.between(0, FAULTS.len() as u64 - 1) as usize];
            *faults.entry(fault_name(fault)).or_default() += 1;
            *quiet_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
            let began = start.elapsed().as_secs_f64();
            strike(&mut p, fault, &mut rng).await;
            timeline.push(format!("{began:.1}-{:.1} s: {}", start.elapsed().as_secs_f64(), fault_name(fault)));
            // A burst of failed answers puts the dispatcher's rounds into their back-off
            // (doubling, at most kube_shell::backoff::MAX): it writes nothing until that ends.
            let after = match fault {
                Fault::Errors500 | Fault::Errors429 => kube_shell::backoff::MAX,
                _ => Duration::ZERO,
            };
            *quiet_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + after);
            next_fault = Instant::now() + Duration::from_millis(rng.between(1000, 3000));
        }
        tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
    }
    checker.abort();
    let seen = violations.lock().unwrap_or_else(|e| e.into_inner()).clone();
    eprintln!("soak: {jobs} TrainJobs in {:.1} s; faults {faults:?}", start.elapsed().as_secs_f64());
    let mut twice = monitor.duplicates();
    twice.sort();
    twice.dedup();
    if !twice.is_empty() {
        let tjs = Api::<TrainJob>::default_namespaced(hub.clone()).list(&ListParams::default()).await.expect("list");
        for (uid, on) in &twice {
            let name = tjs.items.iter().find(|t| t.uid().as_deref() == Some(uid.as_str())).map(|t| t.name_any());
            eprintln!("soak: {name:?} ({uid}) live on {on:?} at once");
        }
    }
    assert_eq!(twice, Vec::new(), "a TrainJob ran on two members at once");
    assert!(seen.is_empty(), "invariants broken:\n{}\nfaults:\n{}", seen.join("\n"), timeline.join("\n"));
    assert!(faults.values().sum::<u32>() >= 3, "too few faults to call it a soak: {faults:?}");
}

/// Creates the TrainJob as a user would through a flaky hub: again after a 500 or 429 (an
/// injected failure stores nothing), done once it exists.
async fn submit_retrying(hub: &Client, tj: &TrainJob) {
    let api = Api::<TrainJob>::default_namespaced(hub.clone());
    for _ in 0..200 {
        match api.create(&PostParams::default(), tj).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => return,
            Err(kube::Error::Api(e)) if e.code == 500 || e.code == 429 => {}
            Err(e) => panic!("submitting {}: {e}", tj.name_any()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("submitting {}: the hub kept failing", tj.name_any());
}

fn fault_name(f: Fault) -> &'static str {
    match f {
        Fault::MemberSilent => "member silent",
        Fault::AgentRestart => "agent restart",
        Fault::LeaderKill => "leader kill",
        Fault::HubStall => "hub stall",
        Fault::Errors500 => "500 burst",
        Fault::Errors429 => "429 burst",
        Fault::JobSetDeleted => "JobSet deleted",
    }
}

/// A 1-node TrainJob of 1–4 s; a third in the capped queue on an 8-GPU flavor.
fn soak_job(name: &str, rng: &mut Rng) -> TrainJob {
    let capped = rng.between(0, 2) == 0;
    let annotations =
        if capped { json!({"stowage.dev/gpu-flavor": MEMBERS[rng.between(0, 1) as usize].1}) } else { json!({}) };
    let mut tj = trainjob(name, 1, rng.between(1, 4) as u32, annotations);
    if capped {
        tj.metadata.labels = Some([(QUEUE_LABEL.to_string(), CAPPED.to_string())].into());
    } else if rng.between(0, 1) == 0 {
        // Half of the rest fit the 4-GPU member too.
        tj.spec.trainer.as_mut().expect("trainer").resources_per_node = Some(
            serde_json::from_value(json!({"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}))
                .expect("resources"),
        );
    }
    tj
}

async fn strike(p: &mut Playground, fault: Fault, rng: &mut Rng) {
    let member = MEMBERS[rng.between(0, MEMBERS.len() as u64 - 1) as usize].0;
    let faults = p.hub_server.faults();
    match fault {
        Fault::MemberSilent => {
            faults.partition_client(&Playground::agent_token(member), true);
            // Past the agent's hub_lost (2.5 s) always; past the dispatcher's grace (5 s) sometimes.
            tokio::time::sleep(Duration::from_millis(rng.between(3000, 7000))).await;
            p.hub_server.faults().partition_client(&Playground::agent_token(member), false);
        }
        Fault::AgentRestart => {
            p.stop_agent(member);
            tokio::time::sleep(Duration::from_millis(rng.between(100, 1500))).await;
            p.start_agent(member).expect("agent restarts");
        }
        Fault::LeaderKill => {
            let i = rng.between(0, 1) as usize;
            p.stop_dispatcher(i);
            tokio::time::sleep(Duration::from_millis(rng.between(500, 3000))).await;
            p.start_dispatcher(i).expect("dispatcher restarts");
            // Over once a dispatcher leads again: until then nothing can say why a new
            // TrainJob waits (a failover takes the Lease's TTL, then the new leader's first list).
            leads_again(p, k8s_openapi::jiff::Timestamp::now()).await;
        }
        Fault::HubStall => {
            faults.set_latency(Duration::from_millis(rng.between(1000, 3500)));
            tokio::time::sleep(Duration::from_millis(rng.between(2000, 4000))).await;
            p.hub_server.faults().set_latency(Duration::ZERO);
        }
        Fault::Errors500 => faults.fail_next(rng.between(10, 40) as u32, 500),
        Fault::Errors429 => faults.fail_next(rng.between(10, 40) as u32, 429),
        Fault::JobSetDeleted => {
            let Some(m) = p.member(member) else { return };
            let Ok(client) = m.sim.server.client_as("admin") else { return };
            let api = Api::<JobSet>::all(client);
            let Ok(list) = api.list(&ListParams::default()).await else { return };
            let live: Vec<&JobSet> = list.items.iter().filter(|js| js.status.is_some()).collect();
            if let Some(js) = live.get(rng.between(0, live.len().max(1) as u64 - 1) as usize) {
                let ns = js.namespace().unwrap_or_default();
                let _ = Api::<JobSet>::namespaced(api.into_client(), &ns)
                    .delete(&js.name_any(), &DeleteParams::background())
                    .await;
            }
        }
    }
}

/// Waits until the dispatchers' Lease is renewed after `since` (at most 30 s): a replica leads.
async fn leads_again(p: &Playground, since: k8s_openapi::jiff::Timestamp) {
    let leases: Api<Lease> = Api::namespaced(p.hub(), playground::SYSTEM_NAMESPACE);
    for _ in 0..300 {
        let renewed = leases.get_opt("stowage-dispatcher").await.ok().flatten().and_then(|l| l.spec?.renew_time);
        if renewed.is_some_and(|t| t.0 > since) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn member_clients(p: &Playground) -> Vec<(String, Client)> {
    MEMBERS
        .iter()
        .filter_map(|(name, _)| Some((name.to_string(), p.member(name)?.sim.server.client_as("checker").ok()?)))
        .collect()
}

async fn complete(hub: &Client) -> usize {
    let Ok(list) = Api::<TrainJob>::default_namespaced(hub.clone()).list(&ListParams::default()).await else {
        return 0;
    };
    list.items.iter().filter(|tj| is_condition(tj, "Complete")).count()
}

fn is_condition(tj: &TrainJob, type_: &str) -> bool {
    tj.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Samples the hub and the members every 100 ms and records every broken invariant.
async fn check(
    hub: Client,
    members: Vec<(String, Client)>,
    quiet_since: Arc<Mutex<Option<Instant>>>,
    violations: Violations,
    start: Instant,
) {
    let record = |what: String| {
        violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("{:.1} s: {what}", start.elapsed().as_secs_f64()))
    };
    let mut took = Duration::ZERO;
    loop {
        // Every 100 ms, or as often as half the time allows when a sample itself takes longer
        // (thousands of objects on a busy machine): the checker must not starve what it checks.
        tokio::time::sleep(took.max(Duration::from_millis(100))).await;
        let sampled = Instant::now();
        'sample: {
            let (Ok(tjs), Ok(placements)) = (
                Api::<TrainJob>::default_namespaced(hub.clone()).list(&ListParams::default()).await,
                Api::<Placement>::default_namespaced(hub.clone()).list(&ListParams::default()).await,
            ) else {
                break 'sample;
            };
            let capped: BTreeMap<String, u64> = tjs
                .items
                .iter()
                .filter(|tj| tj.labels().get(QUEUE_LABEL).map(String::as_str) == Some(CAPPED))
                .filter_map(|tj| Some((tj.uid()?, 8)))
                .collect();
            // The capped queue's quota, counted from what really runs: its live JobSets per member.
            for (member, client) in &members {
                let Ok(jobsets) = Api::<JobSet>::all(client.clone()).list(&ListParams::default()).await else {
                    continue;
                };
                let used: u64 = jobsets
                    .items
                    .iter()
                    .filter(|js| js.metadata.deletion_timestamp.is_none() && !finished(js))
                    .filter_map(|js| capped.get(js.labels().get(api::stowage::TRAINJOB_UID_LABEL)?))
                    .sum();
                if used > CAP {
                    record(format!("queue {CAPPED} uses {used} GPUs on {member}, over its quota of {CAP}"));
                }
            }
            // Every TrainJob neither finished nor running says why it waits, once the hub has been
            // quiet for a moment (a stalled hub delays every write, the dispatcher's too).
            let quiet = quiet_since
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|t| Instant::now().saturating_duration_since(t) > Duration::from_secs(3));
            if !quiet {
                break 'sample;
            }
            // Placed somewhere (starting, running, or being moved on): the Placement says where.
            let placed: Vec<&str> = placements
                .items
                .iter()
                .filter(|p| p.spec.cluster.is_some())
                .map(|p| p.spec.train_job_uid.as_str())
                .collect();
            for tj in &tjs.items {
                let age = tj
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| k8s_openapi::jiff::Timestamp::now().duration_since(t.0).as_secs());
                let settled = is_condition(tj, "Complete") || is_condition(tj, "Failed");
                let is_placed = tj.uid().is_some_and(|u| placed.contains(&u.as_str()));
                let says_why = tj.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == "Pending" && c.status == "True" && !c.reason.is_empty() && !c.message.is_empty()
                    })
                });
                if age >= 3 && !settled && !is_placed && !says_why {
                    record(format!("{} waits without a reason: {:?}", tj.name_any(), tj.status));
                }
            }
        }
        took = sampled.elapsed();
    }
}

fn finished(js: &JobSet) -> bool {
    js.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| (c.type_ == "Completed" || c.type_ == "Failed") && c.status == "True")
    })
}
