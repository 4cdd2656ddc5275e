//! `stowage dev` needs nothing beside the binary: started from `/`, with no `../shared`, it
//! serves a hub with Trainer's CRDs and runtimes installed (compiled in) and writes kubeconfigs
//! that kubectl can use.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Scratch, http_get};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `stowage dev` from `/` with `args`, writing into `dir`; returns it (killed when
/// dropped), its banner once every kubeconfig is written, and its stderr.
fn start_dev(dir: &std::path::Path, args: &[&str]) -> (Killed, String, std::process::ChildStderr) {
    let _ = std::fs::remove_dir_all(dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        // Any free port for the metrics: tests run side by side.
        .args(["dev", "--metrics-addr", "127.0.0.1:0"])
        .args(args)
        .arg("--dir")
        .arg(dir)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stowage dev starts");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let guard = Killed(child);
    // The banner ends with how to stop it: by then every kubeconfig is written.
    let mut banner = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        banner.push_str(&line);
        banner.push('\n');
        if line.contains("Ctrl-C") {
            break;
        }
    }
    (guard, banner, stderr)
}

#[test]
fn dev_runs_from_the_root_directory_with_the_upstream_objects_compiled_in() {
    let dir = Scratch::new("dev-from-root");
    let (_guard, banner, stderr) = start_dev(&dir, &[]);
    let hub = dir.join("hub.kubeconfig");
    assert!(
        hub.is_file(),
        "no {} after the banner:\n{banner}\nstderr:\n{}",
        hub.display(),
        std::io::read_to_string(stderr).unwrap_or_default()
    );
    assert!(!banner.contains("trainjobs,placements"), "kubectl refuses `get A,B -w`; the banner must not offer it");
    // The example the banner offers is a file that exists, wherever the playground was started.
    let apply = banner.lines().find(|l| l.contains(" apply -f ")).expect("an apply line");
    let example = apply.rsplit(' ').next().expect("a path");
    assert!(std::path::Path::new(example).is_file(), "{apply}");
    // A second playground on the same --dir is refused, naming the running one; its kubeconfigs
    // are left as they are.
    let before = std::fs::read_to_string(&hub).expect("hub kubeconfig");
    let second = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["dev", "--metrics-addr", "127.0.0.1:0", "--dir"])
        .arg(&*dir)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success() && err.contains("a playground runs there already (pid "), "{err}");
    assert_eq!(std::fs::read_to_string(&hub).expect("hub kubeconfig"), before);
    // A start that fails once it has made its directory (here: a label key the agents refuse)
    // leaves no directory behind.
    let failed = dir.join("never");
    let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["dev", "--metrics-addr", "127.0.0.1:0", "--node-labels", "bad key!", "--dir"])
        .arg(&failed)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(!failed.exists(), "{}", String::from_utf8_lossy(&out.stderr));

    // The runtimes are installed from the bundled copies; wait for the hub to list them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&hub)
            .args(["get", "clustertrainingruntimes", "-o", "name"])
            .output()
            .expect("kubectl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && text.contains("torch-distributed") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for runtime in ["torch-distributed", "deepspeed-distributed", "mpi-distributed"] {
        assert!(listed.contains(&format!("clustertrainingruntime.trainer.kubeflow.org/{runtime}")), "{listed}");
    }

    // Everything in examples/ applies as it is (the dev fleet file lives elsewhere).
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
    let applied = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&hub)
        .args(["apply", "-f", examples])
        .output()
        .expect("kubectl");
    let out = String::from_utf8_lossy(&applied.stdout).into_owned();
    assert!(
        applied.status.success(),
        "kubectl apply -f examples/: {}{}",
        out,
        String::from_utf8_lossy(&applied.stderr)
    );
    for created in ["queue.stowage.dev/team-a created", "trainjob.trainer.kubeflow.org/"] {
        assert!(out.contains(created), "{out}");
    }

    // A TrainJob Trainer's webhook refuses is refused by kubectl apply, with Trainer's words.
    let bad = dir.join("orphan.yaml");
    std::fs::write(&bad, "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: orphan}\nspec:\n  runtimeRef: {name: no-such-runtime}\n").expect("write");
    let (ok, out) = kubectl(&hub, &["apply", "-f", bad.to_str().expect("utf-8")]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("admission webhook \"validator.trainjob.trainer.kubeflow.org\" denied the request: spec.RuntimeRef: Invalid value:"),
        "{out}"
    );

    // What users type daily: kubectl's typed creates send protobuf.
    for (args, made) in [
        (&["create", "namespace", "team-b"][..], "namespace/team-b created"),
        (&["create", "configmap", "hparams", "-n", "team-b", "--from-literal=lr=3e-4"], "configmap/hparams created"),
        (&["create", "secret", "generic", "hf", "-n", "team-b", "--from-literal=token=x"], "secret/hf created"),
    ] {
        let (ok, out) = kubectl(&hub, args);
        assert!(ok && out.contains(made), "kubectl {args:?}: {out}");
    }
    // Trainer's STATE column, from the server's Table.
    let (ok, table) = kubectl(&hub, &["get", "trainjobs"]);
    assert!(ok && table.lines().next().is_some_and(|h| h.split_whitespace().eq(["NAME", "STATE", "AGE"])), "{table}");
    // A member's pods with their STATUS and NODE, once one runs somewhere.
    let members = ["east-h100", "west-a100", "central-l40s"].map(|m| dir.join(format!("{m}.kubeconfig")));
    let deadline = Instant::now() + Duration::from_secs(60);
    let pods = loop {
        let found = members
            .iter()
            .map(|m| kubectl(m, &["get", "pods", "-A", "-o", "wide"]).1)
            .find(|out| out.contains("Running"));
        if let Some(out) = found {
            break out;
        }
        assert!(Instant::now() < deadline, "no pod of examples/ runs on any member");
        std::thread::sleep(Duration::from_millis(250));
    };
    let header: Vec<&str> = pods.lines().next().unwrap_or("").split_whitespace().collect();
    assert!(header.starts_with(&["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]), "{pods}");
    let running: Vec<&str> = pods.lines().find(|l| l.contains("Running")).unwrap_or("").split_whitespace().collect();
    assert_eq!(running[3], "Running", "{pods}");
    assert!(!running[7].starts_with('<'), "the NODE column names the pod's node: {pods}");

    // Events as kubectl describe shows them: one that runs was placed and started, the one too
    // big for any member says why it waits.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, single) = kubectl(&hub, &["describe", "trainjob", "single-node"]);
        let (_, big) = kubectl(&hub, &["describe", "trainjob", "too-big"]);
        let ran = [("Normal", "Placed"), ("Normal", "Started"), ("Normal", "Completed")]
            .iter()
            .all(|(type_, reason)| event(&single, type_, reason).is_some());
        let waits = event(&big, "Warning", "Pending").is_some_and(|m| m.starts_with("NeverFits: "));
        if ran && waits {
            break;
        }
        assert!(Instant::now() < deadline, "kubectl describe lacks the Events:\n{single}\n{big}");
        std::thread::sleep(Duration::from_millis(250));
    }

    // Logs from the hub, as on one cluster: kubectl on the pod copy, and `stowage logs`.
    let (ok, copies) =
        kubectl(&hub, &["get", "pods", "-l", "jobset.sigs.k8s.io/jobset-name=single-node", "-o", "name"]);
    let copy = copies.lines().next().unwrap_or("").to_string();
    assert!(ok && copy.starts_with("pod/single-node-node-0-0"), "{copies}");
    // kubectl's STATUS for a finished pod is its container's reason, as on one cluster.
    let row = kubectl_until(&hub, &["get", &copy, "--no-headers"], |o| o.contains("Completed"));
    assert!(row.split_whitespace().nth(2) == Some("Completed"), "{row}");
    // Deleting the copy would stop nothing: refused, saying where the pod lives.
    let (ok, out) = kubectl(&hub, &["delete", &copy, "--wait=false"]);
    assert!(!ok && out.contains("read-only copy of a pod that runs on member "), "{out}");
    let (ok, log) = kubectl(&hub, &["logs", &copy]);
    assert!(ok, "kubectl logs {copy}: {log}");
    assert!(log.contains("stowage-sim: node rank 0 of job single-node-node-0 on node "), "{log}");
    assert!(log.trim_end().ends_with("stowage-sim: exited with code 0"), "{log}");
    let stowage_logs = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_stowage"))
            .arg("logs")
            .args(args)
            .arg("--kubeconfig")
            .arg(&hub)
            .output()
            .expect("stowage logs runs")
    };
    let out = stowage_logs(&["single-node", "-f"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), log, "stowage logs reads what kubectl logs reads");
    let out = stowage_logs(&["too-big"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no pod for step node-0 yet"), "{out:?}");
    let out = stowage_logs(&["nobody"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no TrainJob default/nobody on the hub"), "{out:?}");

    // `stowage explain`: why the too-big one waits, and what each member answers.
    let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["explain", "too-big", "--kubeconfig"])
        .arg(&hub)
        .output()
        .expect("stowage explain runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("state:    pending: NeverFits: pod set node:"), "{text}");
    assert!(text.contains("position: 1 of 1 waiting in its queue"), "{text}");
    for member in ["east-h100", "west-a100", "central-l40s"] {
        assert!(text.lines().any(|l| l.trim_start().starts_with(member)), "{member} missing:\n{text}");
    }
    let missing = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["explain", "nobody", "--kubeconfig"])
        .arg(&hub)
        .output()
        .expect("stowage explain runs");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no TrainJob default/nobody on the hub"));

    // One endpoint for the dispatcher and every agent, named in the banner.
    let url = banner
        .lines()
        .find_map(|l| l.trim().strip_prefix("metrics")?.split_whitespace().next().map(str::to_string))
        .expect("the banner names the metrics endpoint");
    let deadline = Instant::now() + Duration::from_secs(30);
    let wanted = [
        "# TYPE stowage_trainjobs gauge",
        "stowage_trainjobs{queue=\"default\",state=\"running\"}",
        "stowage_cluster_gpus{cluster=\"east-h100\",flavor=\"nvidia-h100-80gb\",state=\"allocatable\"}",
        "stowage_member_heartbeat_age_seconds{cluster=\"west-a100\"}",
        "stowage_placements_total{cluster=",
        "stowage_admission_wait_seconds_count{queue=\"default\"}",
        "stowage_agent_jobsets{cluster=\"central-l40s\",phase=\"running\"}",
        "stowage_agent_report_left_out{cluster=\"west-a100\",list=\"counted\"} 0",
        "stowage_agent_summary_cut{cluster=\"east-h100\",cut=\"levels\"} 0",
        "stowage_start_latency_seconds_count{cluster=",
    ];
    let metrics = loop {
        let text = http_get(&url);
        if wanted.iter().all(|w| text.contains(w)) {
            break text;
        }
        assert!(Instant::now() < deadline, "{url} lacks {:?}:\n{text}", wanted.iter().find(|w| !text.contains(*w)));
        std::thread::sleep(Duration::from_millis(250));
    };
    // Each family once, whatever number of agents record into it.
    assert_eq!(metrics.matches("# TYPE stowage_agent_jobsets gauge").count(), 1, "{metrics}");
}

/// The message of the Event of `type_` and `reason` in `kubectl describe` output.
fn event<'a>(describe: &'a str, type_: &str, reason: &str) -> Option<&'a str> {
    let events = describe.split_once("\nEvents:")?.1;
    events.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        let ours = words.next() == Some(type_) && words.next() == Some(reason);
        // Age and From, then the message.
        ours.then(|| l.split_once(" stowage-dispatcher ").map_or("", |(_, m)| m.trim()))
    })
}

/// Runs kubectl against `config`: whether it succeeded, and what it printed.
fn kubectl(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl").arg("--kubeconfig").arg(config).args(args).output().expect("kubectl runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Polls kubectl until its output satisfies `done` (60 s at most); returns the last output.
fn kubectl_until(config: &std::path::Path, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (ok, out) = kubectl(config, args);
        if ok && done(&out) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kueue reserving quota for a Workload, as docs/kueue.md's walk-through plays it.
fn reserve(config: &std::path::Path, workload: &str, count: u32) -> (bool, String) {
    let t = "2026-11-26T10:00:00Z";
    let status = format!(
        r#"{{"status": {{"conditions": [{{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
            "message": "Quota reserved in ClusterQueue team-a", "lastTransitionTime": "{t}"}}],
          "admission": {{"clusterQueue": "team-a", "podSetAssignments": [{{"name": "node", "count": {count}, "flavors": {{"nvidia.com/gpu": "h100"}}}}]}},
          "admissionChecks": [{{"name": "multikueue", "state": "Pending", "message": "", "lastTransitionTime": "{t}"}}]}}}}"#
    );
    let args = [
        "patch",
        "workload",
        workload,
        "--subresource=status",
        "--type=merge",
        "--field-manager=kueue-admission",
        "-p",
    ];
    kubectl(config, &[&args[..], &[status.as_str()]].concat())
}

#[test]
fn the_kueue_walk_through_runs_on_dev_as_docs_kueue_md_says() {
    let dir = Scratch::new("dev-kueue");
    let (_guard, banner, _) = start_dev(&dir, &["--kueue", "multikueue"]);
    assert!(banner.contains("MultiKueue's external dispatcher"), "{banner}");
    let hub = dir.join("hub.kubeconfig");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kueue/");
    for f in ["multikueue.yaml", "workload.yaml"] {
        let (ok, out) = kubectl(&hub, &["apply", "-f", &format!("{examples}{f}")]);
        assert!(ok, "{f}: {out}");
    }
    // The members' first reports take a moment; until then there is nothing to nominate from.
    let (ok, out) = reserve(&hub, "trainjob-llm-4b1c2", 4);
    assert!(ok, "{out}");
    let jsonpath = ["get", "workload", "trainjob-llm-4b1c2", "-o", "jsonpath={.status.nominatedClusterNames}"];
    // Only east-h100's nodes carry the rack label the Workload requires.
    let nominated = kubectl_until(&hub, &jsonpath, |o| o.contains("east-h100"));
    assert_eq!(nominated, r#"["east-h100"]"#);
    let managed = kubectl(&hub, &["get", "workload", "trainjob-llm-4b1c2", "--show-managed-fields", "-o", "yaml"]).1;
    assert!(managed.contains("f:nominatedClusterNames") && managed.contains("manager: kueue-admission"), "{managed}");
    let events = kubectl(&hub, &["get", "events", "--field-selector", "involvedObject.kind=Workload"]).1;
    assert!(events.contains("nominated to member east-h100"), "{events}");

    // Kueue admits it there: clusterName set, the list dropped in the same write.
    let admit = r#"{"status": {"clusterName": "east-h100", "nominatedClusterNames": null}}"#;
    let args = ["patch", "workload", "trainjob-llm-4b1c2", "--subresource=status", "--type=merge"];
    let (ok, out) = kubectl(&hub, &[&args[..], &["--field-manager=kueue-admission", "-p", admit]].concat());
    assert!(ok, "{out}");
    // Both at once is refused by the CRD's rule.
    let both = r#"{"status": {"nominatedClusterNames": ["west-a100"]}}"#;
    let (ok, out) = kubectl(&hub, &[&args[..], &["-p", both]].concat());
    assert!(!ok && out.contains("mutually exclusive"), "{out}");

    // Nine nodes in one rack: nowhere. No nomination, and an Event that says why.
    let text = std::fs::read_to_string(format!("{examples}workload.yaml")).expect("example");
    let huge = dir.join("huge.yaml");
    std::fs::write(&huge, text.replace("trainjob-llm-4b1c2", "trainjob-huge-1").replace("count: 4", "count: 9"))
        .expect("write");
    let (ok, out) = kubectl(&hub, &["apply", "-f", huge.to_str().expect("utf-8")]);
    assert!(ok, "{out}");
    assert!(reserve(&hub, "trainjob-huge-1", 9).0);
    let why = kubectl_until(&hub, &["get", "events", "--field-selector", "involvedObject.name=trainjob-huge-1"], |o| {
        o.contains("NeverFits")
    });
    assert!(why.contains("no rack in any cluster has 9 free slots"), "{why}");
    let nominated =
        kubectl(&hub, &["get", "workload", "trainjob-huge-1", "-o", "jsonpath={.status.nominatedClusterNames}"]);
    assert_eq!(nominated, (true, String::new()));
}

/// A TrainJob of `nodes` 8-GPU nodes that says it runs for `seconds` (and runs that long on
/// the simulated members).
fn long_trainjob(name: &str, nodes: u32, seconds: u32) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: {name}\n  annotations:\n    \
         stowage.dev/expected-runtime-seconds: \"{seconds}\"\n    stowage.dev/simulated-duration-seconds: \"{seconds}\"\n\
         spec:\n  runtimeRef: {{name: torch-distributed}}\n  trainer:\n    numNodes: {nodes}\n    \
         resourcesPerNode: {{requests: {{nvidia.com/gpu: \"8\"}}, limits: {{nvidia.com/gpu: \"8\"}}}}\n"
    )
}

#[test]
fn what_if_on_the_dev_hub_says_when_each_trainjob_starts_and_what_a_new_pool_changes() {
    let dir = Scratch::new("dev-what-if");
    let (_guard, _, _) = start_dev(&dir, &[]);
    let hub = dir.join("hub.kubeconfig");
    // east-h100's 64 nodes are the only ones that hold a 64-node gang: `first` takes them for
    // an hour, `second` waits for them.
    for (name, nodes) in [("first", 64), ("second", 64)] {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, long_trainjob(name, nodes, 3600)).expect("write");
        let (ok, out) = kubectl(&hub, &["apply", "-f", file.to_str().expect("utf-8")]);
        assert!(ok, "{out}");
    }
    // `cpu` trains on CPUs for half an hour: it holds no GPUs, and its end is known all the same.
    let cpu =
        long_trainjob("cpu", 2, 1800).replace("nvidia.com/gpu: \"8\"}, limits: {nvidia.com/gpu: \"8\"}", "cpu: \"4\"}");
    assert!(cpu.contains("requests: {cpu: \"4\"}}"), "{cpu}");
    let file = dir.join("cpu.yaml");
    std::fs::write(&file, cpu).expect("write");
    let (ok, out) = kubectl(&hub, &["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(ok, "{out}");
    kubectl_until(&hub, &["get", "placements", "first", "-o", "jsonpath={.spec.cluster}"], |o| o == "east-h100");
    let simulate = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
            .args(["simulate", "--from"])
            .arg(&hub)
            .args(extra)
            .output()
            .expect("stowage simulate runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    // As the hub is, once the members have reported where first's and cpu's pods are: second
    // starts when first's hour is up, on east-h100.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (ok, text) = loop {
        let (ok, text) = simulate(&[]);
        let ends = |job: &str| text.lines().any(|l| l.contains(job) && l.contains("ends in"));
        let known = ends("default/first") && ends("default/cpu");
        if !ok || known || Instant::now() > deadline {
            break (ok, text);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(ok, "{text}");
    let second = text.lines().find(|l| l.contains("default/second")).unwrap_or_default();
    assert!(second.contains("starts in 59m on east-h100") || second.contains("starts in 1h00m on east-h100"), "{text}");
    let cpu = text.lines().find(|l| l.contains("default/cpu")).unwrap_or_default();
    assert!(cpu.contains("ends in 29m") || cpu.contains("ends in 30m"), "{text}");
    // With a second pool of 64 H100 nodes, it starts now, an hour sooner.
    let (ok, text) = simulate(&["--what-if", "add-pool cluster=east-h100 flavor=nvidia-h100-80gb nodes=64"]);
    assert!(ok, "{text}");
    let second = text.lines().find(|l| l.contains("default/second")).unwrap_or_default();
    assert!(second.contains("starts now on east-h100") && second.contains("sooner"), "{text}");
    // Without east-h100, neither fits anywhere within the horizon.
    let (ok, text) = simulate(&["--what-if", "remove-cluster east-h100"]);
    assert!(ok, "{text}");
    assert!(text.lines().find(|l| l.contains("default/first")).is_some_and(|l| l.contains("waits again")), "{text}");
    // A bad edit is refused, naming it.
    let (ok, text) = simulate(&["--what-if", "add-pool cluster=x nodes=lots"]);
    assert!(!ok && text.contains("nodes=lots is not a positive number"), "{text}");
}

/// `stowage dev --node-labels` gives the playground's agents the key, as `stowage agent
/// --node-labels` does: a member node labelled with it is reported, so a selector on it can be
/// met; a key Kubernetes would refuse is refused, naming the option.
#[test]
fn dev_passes_node_labels_to_its_agents() {
    let dir = common::Scratch::new("dev-node-labels");
    let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["dev", "--metrics-addr", "127.0.0.1:0", "--node-labels", "bad key!"])
        .arg("--dir")
        .arg(dir.join("bad"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--node-labels"), "{err}");
    let (_guard, _, _) = start_dev(&dir, &["--node-labels", "node-type"]);
    let member = dir.join("west-a100.kubeconfig");
    let (ok, nodes) = kubectl(&member, &["get", "nodes", "-o", "name"]);
    assert!(ok, "{nodes}");
    let node = nodes.lines().next().expect("a node").to_string();
    let (ok, out) = kubectl(&member, &["label", &node, "node-type=training"]);
    assert!(ok, "{out}");
    let hub = dir.join("hub.kubeconfig");
    let reported =
        kubectl_until(&hub, &["get", "membercluster", "west-a100", "-o", "jsonpath={.status.domains}"], |o| {
            o.contains("\"node-type\":\"training\"")
        });
    assert!(reported.contains("\"node-type\":\"training\""), "{reported}");
}
