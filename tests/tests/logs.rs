//! Pod logs from the hub, end to end: a TrainJob's pod copy on the hub reads its member's log
//! through the hub's API server, the relay (the virtual Node's kubelet) and the agent's tunnel,
//! followed to its end; a failed container's last log lines reach the TrainJob's Failed
//! condition; and the relay answers a stopped agent, a stranger's token and a pod that is not a
//! member's as it should.

use std::time::Duration;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use serde_json::json;
use stowage_tests::e2e::*;

/// The hub copy of `job`'s node 0, once it runs.
async fn node0(pods: &Api<Pod>, job: &str) -> String {
    let selector = ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={job}"));
    eventually(&format!("{job}'s node 0 running on the hub"), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            pods.list(&selector).await.ok()?.items.into_iter().find_map(|p| {
                let labels = p.metadata.labels.as_ref()?;
                let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
                (running && labels.get("batch.kubernetes.io/job-completion-index").map(String::as_str) == Some("0"))
                    .then(|| p.metadata.name.clone())
                    .flatten()
            })
        }
    })
    .await
}

fn container(name: &str) -> LogParams {
    LogParams { container: Some(name.into()), ..Default::default() }
}

#[tokio::test]
async fn a_trainjobs_log_reads_on_the_hub_as_on_its_member_and_follows_to_the_end() {
    let p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("chatty", 2, 4, json!({}))).await;
    let pods: Api<Pod> = Api::default_namespaced(hub.clone());
    let pod = node0(&pods, "chatty").await;
    let placed = placement(&hub, "chatty", running).await;
    let node = format!("stowage-{}", placed.spec.cluster.as_deref().expect("placed"));

    let log = pods.logs(&pod, &container("node")).await.expect("the log, through the relay");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], "+ sh -c echo stowage-e2e: chatty sleeps 4s; sleep 4", "{log}");
    assert!(lines[1].starts_with("stowage-sim: node rank 0 of job chatty-node-0 on node "), "{log}");
    assert!(!log.contains(&node), "the member's own node, not the hub's virtual one: {log}");

    let follow = LogParams { follow: true, ..container("node") };
    let stream = pods.log_stream(&pod, &follow).await.expect("follow").lines();
    let all: Vec<String> = tokio::time::timeout(Duration::from_secs(60), stream.try_collect())
        .await
        .expect("the follow ends")
        .expect("read");
    assert_eq!(all.last().map(String::as_str), Some("stowage-sim: exited with code 0"), "{all:?}");
    assert_eq!(all[0], lines[0]);

    let tail = LogParams { tail_lines: Some(1), timestamps: true, ..container("node") };
    let last = pods.logs(&pod, &tail).await.expect("tail");
    assert!(last.starts_with("20") && last.ends_with("Z stowage-sim: exited with code 0\n"), "{last:?}");
    match pods.logs(&pod, &container("sidecar")).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.message.as_str()), (400, &*format!("container sidecar is not valid for pod {pod}")))
        }
        other => panic!("expected 400, got {other:?}"),
    }
}

/// A container that leaves no termination message: the Failed condition carries its last log
/// lines instead, read on the member by the agent.
#[tokio::test]
async fn a_crashed_container_without_a_termination_message_reports_its_last_log_lines() {
    let p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("crashed", 1, 60, json!({}))).await;
    let placed = placement(&hub, "crashed", running).await;
    let member = p.member(placed.spec.cluster.as_deref().expect("placed")).expect("member");
    let pod = member_pods(member, "crashed")[0]["metadata"]["name"].as_str().expect("name").to_string();
    let traceback =
        format!("Traceback (most recent call last):\n{}\nRuntimeError: NCCL timeout", "  frame\n".repeat(400));
    assert!(member.sim.crash_pod("default", &pod, &traceback));
    let failed = condition(&hub, "crashed", "Failed", "True").await;
    assert!(
        failed.message.contains(&format!("pod {pod} container node: Error (exit code 1): last log lines:\n")),
        "{}",
        failed.message
    );
    assert!(
        failed.message.ends_with("RuntimeError: NCCL timeout\nstowage-sim: exited with code 1"),
        "{}",
        failed.message
    );
    assert!(failed.message.len() < 2048, "the end of the log, not all of it: {} bytes", failed.message.len());
}

/// The relay's refusals: a stopped agent's log is a 502 that names the member (after the
/// relay's wait), a token no agent holds gets 401 on the tunnel, and a pod that is not a
/// member's copy is not the relay's to read.
#[tokio::test]
async fn the_relay_names_a_silent_member_and_refuses_strangers() {
    let mut p = playground(fast()).await;
    let hub = p.hub();
    submit(&hub, &trainjob("quiet", 1, 120, json!({}))).await;
    let pods: Api<Pod> = Api::default_namespaced(hub.clone());
    let pod = node0(&pods, "quiet").await;
    let cluster = placement(&hub, "quiet", running).await.spec.cluster.expect("placed");
    p.stop_agent(&cluster);
    match pods.logs(&pod, &container("node")).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 502, "{s:?}");
            assert!(s.message.contains(&format!("the agent of member {cluster} did not answer")), "{}", s.message);
        }
        other => panic!("expected 502, got {other:?}"),
    }

    let tunnel = format!("http://{}", p.log_relay.tunnel);
    let curl = |args: Vec<String>| async move {
        let out = tokio::process::Command::new("curl").args(&args).output().await.expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let code = |url: String, token: &str| {
        vec![
            "-s".into(),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
            "-H".into(),
            format!("Authorization: Bearer {token}"),
            url,
        ]
    };
    assert_eq!(curl(code(format!("{tunnel}/tunnel/requests"), "forged")).await, "401");
    assert_eq!(curl(code(format!("{tunnel}/tunnel/requests"), "")).await, "401");
    let agent = playground::Playground::agent_token(&cluster);
    assert_eq!(curl(code(format!("{tunnel}/tunnel/responses/999999?status=200&end=true"), &agent)).await, "404");
    let kubelet = format!("http://{}", p.log_relay.kubelet);
    assert_eq!(curl(code(format!("{kubelet}/containerLogs/default/not-a-copy/node"), "")).await, "404");
    assert_eq!(curl(code(format!("{kubelet}/containerLogs/default/..%2F..%2Fetc/node"), "")).await, "400");
}
