//! `stowage nodes`: the Node objects a fleet file describes, as the testbed's kwok takes them,
//! and what any printing subcommand does when its reader stops early (`| head`).

use std::process::{Command, Stdio};

fn stowage(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stowage")).args(args).output().expect("runs")
}

#[test]
fn the_built_in_fleets_nodes_carry_topology_gpus_and_the_kwok_annotation() {
    let out = stowage(&["nodes", "--member", "west-a100", "--kwok"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: serde_json::Value = input_limits::yaml::from_str(&String::from_utf8_lossy(&out.stdout)).expect("YAML");
    let items = list["items"].as_array().expect("a List");
    assert_eq!(items.len(), 16);
    for n in items {
        assert_eq!(n["metadata"]["annotations"]["kwok.x-k8s.io/node"], "fake");
        assert_eq!(n["metadata"]["labels"]["nvidia.com/gpu.product"], "nvidia-a100-80gb");
        assert!(n["metadata"]["labels"]["topology.kubernetes.io/rack"].is_string(), "{n}");
        assert_eq!(n["status"]["capacity"]["nvidia.com/gpu"], "8");
        assert!(n["status"]["conditions"].is_null(), "kwok makes it Ready, with its addresses: {n}");
    }
    let members = stowage(&["nodes", "--list-members"]);
    assert_eq!(String::from_utf8_lossy(&members.stdout), "east-h100\nwest-a100\ncentral-l40s\n");
    let levels = stowage(&["nodes", "--member", "east-h100", "--levels"]);
    assert_eq!(
        String::from_utf8_lossy(&levels.stdout),
        "block=cloud.google.com/gce-topology-block,rack=cloud.google.com/gce-topology-subblock\n"
    );
}

#[test]
fn an_unknown_member_is_refused_naming_the_ones_there_are() {
    let out = stowage(&["nodes", "--member", "mars"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--member mars") && err.contains("east-h100, west-a100, central-l40s"), "{err}");
}

#[test]
fn a_reader_that_stops_early_is_no_error_and_no_panic() {
    for args in [&["nodes"][..], &["nodes", "--list-members"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs");
        // The reader goes before anything is written: every write meets a closed pipe.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
    }
}
