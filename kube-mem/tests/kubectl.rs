//! kubectl, the real client, against the in-memory API server: apply a CRD and a TrainJob,
//! get, watch, delete.

use std::process::Stdio;
use std::time::Duration;

use kube_mem::ApiServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream");

struct Kubectl {
    config: std::path::PathBuf,
    // Holds the kubeconfig (and kubectl's $HOME) until the test ends, then removed.
    _dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(server: &ApiServer, name: &str) -> Self {
        let dir = tempfile::Builder::new().prefix(&format!("stowage-kubectl-{name}-")).tempdir().expect("dir");
        let config = dir.path().join("kubeconfig");
        std::fs::write(&config, server.kubeconfig("test")).expect("kubeconfig");
        Kubectl { config, _dir: dir }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(&self.config).args(args);
        c.env("HOME", self.config.parent().expect("dir"));
        c
    }

    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.cmd(args).output().await.expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

const TRAINJOB: &str = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: demo}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2}
";

#[tokio::test]
async fn kubectl_applies_gets_watches_and_deletes() {
    let server = ApiServer::start().await.expect("server");
    let k = Kubectl::new(&server, "main");
    let crd = format!("{UPSTREAM}/trainer/trainer.kubeflow.org_trainjobs.yaml");
    let (ok, out, err) = k.run(&["apply", "-f", &crd]).await;
    assert!(ok, "apply crd: {out} {err}");
    let tj = k.config.with_file_name("trainjob.yaml");
    std::fs::write(&tj, TRAINJOB).expect("write");
    let (ok, out, err) = k.run(&["apply", "-f", tj.to_str().expect("utf-8")]).await;
    assert!(ok && out.contains("trainjob.trainer.kubeflow.org/demo created"), "apply: {out} {err}");
    // Applying again changes nothing.
    let (ok, out, err) = k.run(&["apply", "-f", tj.to_str().expect("utf-8")]).await;
    assert!(ok && out.contains("unchanged"), "re-apply: {out} {err}");
    let (ok, out, err) = k.run(&["get", "trainjobs", "demo", "-o", "jsonpath={.spec.trainer.numNodes}"]).await;
    assert!(ok && out == "2", "get: {out:?} {err}");
    let (ok, out, err) = k.run(&["get", "trainjobs"]).await;
    assert!(ok && out.contains("demo"), "get table: {out} {err}");

    // A watch sees the change that follows.
    let mut watch = k
        .cmd(&["get", "trainjobs", "--watch", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.expect("in time").expect("line");
    assert_eq!(first.as_deref(), Some("trainjob.trainer.kubeflow.org/demo"));
    let (ok, _, err) =
        k.run(&["patch", "trainjob", "demo", "--type", "merge", "-p", r#"{"spec":{"suspend":true}}"#]).await;
    assert!(ok, "patch: {err}");
    let next = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.expect("in time").expect("line");
    assert_eq!(next.as_deref(), Some("trainjob.trainer.kubeflow.org/demo"));
    let _ = watch.kill().await;

    let (ok, out, err) = k.run(&["delete", "trainjob", "demo"]).await;
    assert!(ok && out.contains("deleted"), "delete: {out} {err}");
    let (ok, _, err) = k.run(&["get", "trainjob", "demo"]).await;
    assert!(!ok && err.contains("NotFound") || err.contains("not found"), "{err}");
}

#[tokio::test]
async fn kubectl_reports_schema_rejections_with_the_field() {
    let server = ApiServer::start().await.expect("server");
    let k = Kubectl::new(&server, "bad");
    let crd = format!("{UPSTREAM}/trainer/trainer.kubeflow.org_trainjobs.yaml");
    assert!(k.run(&["apply", "-f", &crd]).await.0);
    let tj = k.config.with_file_name("bad.yaml");
    std::fs::write(&tj, TRAINJOB.replace("numNodes: 2", "numNodes: two")).expect("write");
    let (ok, out, err) = k.run(&["apply", "-f", tj.to_str().expect("utf-8")]).await;
    assert!(!ok, "{out}");
    assert!(err.contains("spec.trainer.numNodes"), "{err}");
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: worker-0}
spec:
  nodeName: gpu-node-7
  containers: [{name: node, image: pytorch}]
";

/// kubectl asks for Tables: the CRD's printer columns (Trainer's STATE) and a pod's STATUS and
/// NODE come from the server, in lists, gets and watches.
#[tokio::test]
async fn kubectl_prints_the_servers_columns() {
    let server = ApiServer::start().await.expect("server");
    let k = Kubectl::new(&server, "table");
    let crd = format!("{UPSTREAM}/trainer/trainer.kubeflow.org_trainjobs.yaml");
    assert!(k.run(&["apply", "-f", &crd]).await.0);
    let tj = k.config.with_file_name("trainjob.yaml");
    std::fs::write(&tj, TRAINJOB).expect("write");
    assert!(k.run(&["apply", "-f", tj.to_str().expect("utf-8")]).await.0);
    let status = r#"{"status":{"conditions":[{"type":"Suspended","status":"True","reason":"Suspended",
        "message":"TrainJob is suspended","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    let (ok, _, err) =
        k.run(&["patch", "trainjob", "demo", "--subresource", "status", "--type", "merge", "-p", status]).await;
    assert!(ok, "status patch: {err}");
    let (ok, out, err) = k.run(&["get", "trainjobs"]).await;
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.first().map(|h| h.as_slice()), Some(["NAME", "STATE", "AGE"].as_slice()), "{out}");
    assert_eq!(lines.get(1).map(|r| &r[..2]), Some(["demo", "Suspended"].as_slice()), "{out}");
    let (ok, out, _) = k.run(&["get", "trainjob", "demo", "--no-headers"]).await;
    assert!(ok && out.split_whitespace().nth(1) == Some("Suspended"), "{out}");

    let pod = k.config.with_file_name("pod.yaml");
    std::fs::write(&pod, POD).expect("write");
    assert!(k.run(&["apply", "-f", pod.to_str().expect("utf-8")]).await.0);
    let running = r#"{"status":{"phase":"Running","podIP":"10.0.0.7","containerStatuses":[{"name":"node",
        "ready":true,"restartCount":2,"image":"pytorch","imageID":"","state":{"running":{}}}]}}"#;
    let (ok, _, err) =
        k.run(&["patch", "pod", "worker-0", "--subresource", "status", "--type", "merge", "-p", running]).await;
    assert!(ok, "pod status: {err}");
    let (ok, out, err) = k.run(&["get", "pods", "-o", "wide"]).await;
    assert!(ok, "{err}");
    let header: Vec<&str> =
        out.lines().next().unwrap_or("").split("  ").filter(|c| !c.is_empty()).map(str::trim).collect();
    assert_eq!(header[..7], ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"], "{out}");
    let row: Vec<&str> = out.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(row[..4], ["worker-0", "1/1", "Running", "2"], "{out}");
    assert_eq!(row[5..7], ["10.0.0.7", "gpu-node-7"], "{out}");

    // A watch prints the header once, then a row per change.
    let mut watch =
        k.cmd(&["get", "trainjobs", "--watch"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.expect("in time").expect("line")
    };
    assert!(next().await.is_some_and(|h| h.starts_with("NAME") && h.contains("STATE")));
    assert!(next().await.is_some_and(|r| r.starts_with("demo") && r.contains("Suspended")));
    let complete = r#"{"status":{"conditions":[{"type":"Complete","status":"True","reason":"JobSetCompleted",
        "message":"done","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    assert!(
        k.run(&["patch", "trainjob", "demo", "--subresource", "status", "--type", "merge", "-p", complete]).await.0
    );
    assert!(next().await.is_some_and(|r| r.starts_with("demo") && r.contains("Complete")));
    let _ = watch.kill().await;
}

/// kubectl's typed `create` commands send protobuf; the objects arrive whole.
#[tokio::test]
async fn kubectl_creates_built_in_objects_as_users_type_them() {
    let server = ApiServer::start().await.expect("server");
    let k = Kubectl::new(&server, "create");
    for (args, made) in [
        (vec!["create", "namespace", "team-a"], "namespace/team-a created"),
        (
            vec!["create", "configmap", "settings", "-n", "team-a", "--from-literal=lr=0.1"],
            "configmap/settings created",
        ),
        (
            vec!["create", "secret", "generic", "hf-token", "-n", "team-a", "--from-literal=token=s3cr3t"],
            "secret/hf-token created",
        ),
        (vec!["create", "serviceaccount", "trainer", "-n", "team-a"], "serviceaccount/trainer created"),
        (vec!["run", "debug", "-n", "team-a", "--image=busybox", "--", "sleep", "60"], "pod/debug created"),
        (vec!["create", "job", "smoke", "-n", "team-a", "--image=busybox"], "job.batch/smoke created"),
    ] {
        let (ok, out, err) = k.run(&args).await;
        assert!(ok && out.contains(made), "{args:?}: {out} {err}");
    }
    let get = |what: &'static str, path: &'static str| {
        let k = &k;
        async move {
            let (ok, out, err) = k.run(&["get", what, "-n", "team-a", "-o", &format!("jsonpath={path}")]).await;
            assert!(ok, "{what}: {err}");
            out
        }
    };
    assert_eq!(get("configmap/settings", "{.data.lr}").await, "0.1");
    assert_eq!(get("secret/hf-token", "{.data.token}").await, "czNjcjN0", "base64 of s3cr3t");
    assert_eq!(get("secret/hf-token", "{.type}").await, "Opaque");
    assert_eq!(get("serviceaccount/trainer", "{.metadata.namespace}").await, "team-a");
    assert_eq!(get("pod/debug", "{.spec.containers[0].args}").await, r#"["sleep","60"]"#);
    assert_eq!(get("job/smoke", "{.spec.template.spec.containers[0].image}").await, "busybox");
    let (ok, out, _) = k.run(&["get", "namespaces", "--no-headers"]).await;
    assert!(ok && out.lines().any(|l| l.starts_with("team-a") && l.contains("Active")), "{out}");
    // A second create of the same name is refused as the real server refuses it.
    let (ok, _, err) = k.run(&["create", "namespace", "team-a"]).await;
    assert!(!ok && err.contains("AlreadyExists") || err.contains("already exists"), "{err}");
}

const SETTINGS: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: settings, labels: {team: a}}
data: {lr: '0.1', batch: '32'}
";

/// `kubectl apply --server-side`: the manager `kubectl` owns what the file sets, a field dropped
/// from the file goes, and another manager's change is a conflict kubectl reports until it is
/// forced.
#[tokio::test]
async fn kubectl_applies_server_side_with_ownership() {
    let server = ApiServer::start().await.expect("server");
    let k = Kubectl::new(&server, "ssa");
    let file = k.config.with_file_name("settings.yaml");
    let path = file.to_str().expect("utf-8");
    std::fs::write(&file, SETTINGS).expect("write");
    let (ok, out, err) = k.run(&["apply", "--server-side", "-f", path]).await;
    assert!(ok && out.contains("configmap/settings serverside-applied"), "apply: {out} {err}");
    let (ok, out, err) = k.run(&["get", "configmap", "settings", "-o", "yaml", "--show-managed-fields"]).await;
    assert!(ok && out.contains("manager: kubectl") && out.contains("operation: Apply"), "{out} {err}");
    assert!(out.contains("f:lr: {}") && out.contains("f:team: {}"), "{out}");

    // The label and batch dropped from the file: kubectl owned them alone, so they go.
    std::fs::write(&file, SETTINGS.replace(", labels: {team: a}", "").replace(", batch: '32'", "")).expect("write");
    let (ok, out, err) = k.run(&["apply", "--server-side", "-f", path]).await;
    assert!(ok, "re-apply: {out} {err}");
    let (_, out, _) = k.run(&["get", "configmap", "settings", "-o", "jsonpath={.data}|{.metadata.labels}"]).await;
    assert_eq!(out, r#"{"lr":"0.1"}|"#);

    // Another manager changing kubectl's field conflicts, named; forced, it takes the field.
    std::fs::write(&file, SETTINGS.replace("'0.1'", "'0.2'")).expect("write");
    let other = ["apply", "--server-side", "--field-manager=tuner", "-f", path];
    let (ok, out, err) = k.run(&other).await;
    assert!(!ok && err.contains("conflict with \"kubectl\"") && err.contains(".data.lr"), "{out} {err}");
    let (ok, out, err) = k.run(&[&other[..], &["--force-conflicts"]].concat()).await;
    assert!(ok, "forced: {out} {err}");
    let (_, out, _) = k.run(&["get", "configmap", "settings", "-o", "jsonpath={.data.lr}"]).await;
    assert_eq!(out, "0.2");
}
