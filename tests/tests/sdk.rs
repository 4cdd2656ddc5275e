//! The real Kubeflow Python SDK (`kubeflow==0.5.0`, tests/sdk/requirements.txt) against the
//! playground's hub: list and get runtimes, `train()` a two-node TrainJob, wait for Complete,
//! `get_job`, `list_jobs`, `delete_job` — tests/sdk/sdk_flow.py. `scripts/test` makes the
//! virtualenv and points `STOWAGE_SDK_PYTHON` at it.

use std::time::Duration;

use playground::{Playground, PlaygroundOptions};

const FLOW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/sdk_flow.py");

#[tokio::test]
async fn the_kubeflow_sdk_trains_on_the_hub_and_sees_the_trainjob_complete() {
    let Some(python) = std::env::var_os("STOWAGE_SDK_PYTHON") else {
        assert!(std::env::var_os("CI").is_none(), "in CI scripts/test must set STOWAGE_SDK_PYTHON");
        eprintln!("skipped: STOWAGE_SDK_PYTHON is not set (scripts/test makes the SDK's virtualenv)");
        return;
    };
    let fleet = Playground::dev_fleet().expect("fleet");
    let p = Playground::start(&fleet, PlaygroundOptions::default()).await.expect("playground");
    let dir = std::env::temp_dir().join(format!("stowage-sdk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("hub.kubeconfig");
    std::fs::write(&kubeconfig, p.hub_server.kubeconfig("sdk-user")).expect("kubeconfig");

    let run = tokio::process::Command::new(python)
        .arg(FLOW)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--namespace", "default", "--timeout", "90"])
        .output();
    let out =
        tokio::time::timeout(Duration::from_secs(180), run).await.expect("the SDK flow finishes").expect("python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sdk_flow.py failed:\n{stderr}");
    let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").to_string();
    let result: serde_json::Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last:?}\n{stderr}"));
    assert_eq!(result["status"], "Complete");
    assert_eq!(result["runtime"], "torch-distributed");
    assert_eq!(result["num_nodes"], 2);
    // Running while its pods ran (wait_for_job_status({"Running"}) returned), with a step per node.
    let steps: Vec<&str> =
        result["running_steps"].as_array().into_iter().flatten().filter_map(|s| s.as_str()).collect();
    assert_eq!(steps.iter().filter(|s| s.starts_with("node")).count(), 2, "{steps:?}");
    // get_job_logs: node 0's log, read on the hub as the member's pod wrote it, followed to its end.
    let log: Vec<&str> = result["log"].as_array().into_iter().flatten().filter_map(|l| l.as_str()).collect();
    assert!(log.iter().any(|l| l.starts_with("stowage-sim: node rank 0 ")), "{log:?}");
    assert_eq!(log.last(), Some(&"stowage-sim: exited with code 0"), "{log:?}");
    // get_job_events: the hub's Events on the TrainJob, in order.
    let events: Vec<&str> = result["events"].as_array().into_iter().flatten().filter_map(|e| e.as_str()).collect();
    let at = |r: &str| events.iter().position(|e| *e == r).unwrap_or_else(|| panic!("no {r} in {events:?}"));
    assert!(at("Placed") <= at("Started") && at("Started") <= at("Completed"), "{events:?}");
    // The SDK saw no failure talking to the hub, not even the version probe.
    assert!(!stderr.contains("kubeflow-trainer-public"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
