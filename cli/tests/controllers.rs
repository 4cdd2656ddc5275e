//! `stowage dispatcher` and `stowage agent` as processes: the dispatcher takes the Lease on a
//! hub, runs cycles and says so on /metrics; both refuse bad arguments with a clear message.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::Scratch;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

async fn get(url: &str) -> Option<String> {
    let out = tokio::process::Command::new("curl").args(["-sf", url]).output().await.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of an un-labelled sample in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test]
async fn the_dispatcher_leads_and_serves_health_and_metrics_against_a_hub() {
    use playground::{Playground, PlaygroundOptions, SYSTEM_NAMESPACE};
    let fleet = Playground::dev_fleet().expect("fleet");
    let p = Playground::start(&fleet, PlaygroundOptions { dispatchers: 0, ..Default::default() })
        .await
        .expect("playground");
    let dir = Scratch::new("ctl");
    let kubeconfig = dir.join("hub.kubeconfig");
    std::fs::write(&kubeconfig, p.hub_server.kubeconfig("dispatcher")).expect("write");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["dispatcher", "--kubeconfig", kubeconfig.to_str().expect("utf-8")])
        .args(["--health-addr", &format!("127.0.0.1:{port}"), "--lease-namespace", SYSTEM_NAMESPACE])
        .args(["--identity", "replica-a", "--lease-seconds", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let base = format!("http://127.0.0.1:{port}");
    let mut seen = (None, None, None);
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let metrics = get(&format!("{base}/metrics")).await.unwrap_or_default();
        seen = (
            get(&format!("{base}/healthz")).await,
            sample(&metrics, "stowage_dispatcher_leader"),
            sample(&metrics, "stowage_dispatcher_cycles_total"),
        );
        if seen.1 == Some(1.0) && seen.2.is_some_and(|c| c > 0.0) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let (health, leader, cycles) = seen;
    assert_eq!(health.as_deref(), Some("ok"));
    assert_eq!(leader, Some(1.0), "the only replica leads");
    assert!(cycles.is_some_and(|c| c > 0.0), "cycles run: {cycles:?}");
}

#[test]
fn the_agent_refuses_bad_levels_and_missing_kubeconfigs() {
    let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["agent", "--cluster", "east", "--hub-kubeconfig", "/nonexistent/hub.kubeconfig", "--levels", "shelf=x"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--levels: unknown topology level \"shelf\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["agent", "--cluster", "east", "--hub-kubeconfig", "/nonexistent/hub.kubeconfig", "--levels", "rack=r"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/hub.kubeconfig"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The example member overlay mounts the relay's CA from an optional Secret: without it the
/// agent still runs and places work, and its MemberCluster says why the hub has no logs there.
#[tokio::test]
async fn an_agent_whose_relay_ca_is_missing_runs_without_the_relay_and_says_why() {
    use api::stowage::MemberCluster;
    use playground::{Playground, PlaygroundOptions};
    let fleet = Playground::dev_fleet().expect("fleet");
    let mut p = Playground::start(&fleet, PlaygroundOptions { dispatchers: 0, ..Default::default() })
        .await
        .expect("playground");
    let name = p.members[0].name.clone();
    p.stop_agent(&name);
    let dir = Scratch::new("relay-ca");
    let (hub, member) = (dir.join("hub.kubeconfig"), dir.join("member.kubeconfig"));
    std::fs::write(&hub, p.agent_kubeconfig(&name)).expect("write");
    std::fs::write(&member, p.members[0].sim.server.kubeconfig(&name)).expect("write");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["agent", "--cluster", &name, "--heartbeat-seconds", "1"])
        .args([
            "--hub-kubeconfig",
            hub.to_str().expect("utf-8"),
            "--member-kubeconfig",
            member.to_str().expect("utf-8"),
        ])
        .args(["--health-addr", &format!("127.0.0.1:{port}")])
        .args(["--log-relay", "https://127.0.0.1:1", "--log-relay-kubelet", "127.0.0.1:2"])
        .args(["--log-relay-ca", "/nonexistent/relay/ca.crt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let members: kube::Api<MemberCluster> = kube::Api::all(p.hub());
    let mut said = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        said = members.get(&name).await.ok().and_then(|m| m.status?.logs);
        if said.as_deref().is_some_and(|s| s.starts_with("not served")) {
            break;
        }
    }
    let running = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(running, "the agent exited");
    let said = said.unwrap_or_default();
    assert!(said.starts_with("not served: --log-relay: /nonexistent/relay/ca.crt"), "{said}");
}
