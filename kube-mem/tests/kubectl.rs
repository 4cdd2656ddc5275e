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
}

impl Kubectl {
    fn new(server: &ApiServer, name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("stowage-kubectl-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let config = dir.join("kubeconfig");
        std::fs::write(&config, server.kubeconfig("test")).expect("kubeconfig");
        Kubectl { config }
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
