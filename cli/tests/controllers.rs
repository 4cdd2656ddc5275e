//! `stowage dispatcher` and `stowage agent` as processes: they start against a hub, answer
//! /healthz, and refuse bad arguments with a clear message.

use std::process::{Command, Stdio};
use std::time::Duration;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

#[tokio::test]
async fn the_dispatcher_serves_healthz_against_a_hub() {
    let hub = stowage_tests::apiserver::ApiServer::start().await.expect("hub");
    let dir = std::env::temp_dir().join(format!("stowage-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("hub.kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig("hub")).expect("write");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args([
            "dispatcher",
            "--kubeconfig",
            kubeconfig.to_str().expect("utf-8"),
            "--health-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let mut answered = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Ok(out) = tokio::process::Command::new("curl")
            .args(["-s", &format!("http://127.0.0.1:{port}/healthz")])
            .output()
            .await
            && out.stdout == b"ok"
        {
            answered = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(answered, "no /healthz answer");
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
