//! What an agent may do on the playground's hub, tried with exactly the credentials `stowage dev`
//! writes for it (`DIR/agents/<member>-on-hub.kubeconfig`), through a kube client and kubectl:
//! it reads Placements, writes the status of its own member's Placements and of its own
//! MemberCluster; it may not write another member's Placement status (the forged `Succeeded` of
//! issue 17), any Placement's spec, or another member's MemberCluster status; and, the hub
//! running manifests/' RBAC, it may not delete a TrainJob, cordon a member, change a Queue, read
//! Secrets or delete the policy (issue 38). And the running
//! agents use those very credentials.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use api::stowage::{MemberCluster, Placement};
use api::trainer::TrainJob;
use kube::api::{Api, Patch, PatchParams, PostParams};
use playground::credentials::{self, client_from_kubeconfig};
use playground::{Playground, PlaygroundOptions};
use serde_json::json;

const FORBIDDEN_PREFIX: &str =
    "ValidatingAdmissionPolicy 'stowage-status-writers' with binding 'stowage-status-writers' denied request: ";

async fn client(path: &Path) -> kube::Client {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    client_from_kubeconfig(&text).await.unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn status_code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn an_agents_hub_kubeconfig_writes_its_own_members_statuses_and_nothing_else() {
    let fleet = Playground::dev_fleet().expect("fleet");
    let p = Playground::start(&fleet, PlaygroundOptions::default()).await.expect("playground");
    let dir = std::env::temp_dir().join(format!("stowage-agent-credentials-{}", std::process::id()));
    let files = credentials::write_kubeconfigs(&p, &dir).expect("kubeconfigs");
    assert_eq!(files.agents.len(), p.members.len());
    for (name, path) in &files.agents {
        assert_eq!(path, &dir.join("agents").join(format!("{name}-on-hub.kubeconfig")));
    }

    let tjs: Api<TrainJob> = Api::default_namespaced(p.hub());
    let tj: TrainJob =
        serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "long", "annotations": {"stowage.dev/simulated-duration-seconds": "600"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 1,
                 "resourcesPerNode": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}}}))
        .expect("trainjob");
    tjs.create(&PostParams::default(), &tj).await.expect("submit");
    let placements: Api<Placement> = Api::default_namespaced(p.hub());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let placed = loop {
        if let Some(pl) = placements.get_opt("long").await.expect("get")
            && pl.spec.cluster.is_some()
            && pl.status.is_some()
        {
            break pl;
        }
        assert!(tokio::time::Instant::now() < deadline, "the TrainJob was not placed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let owner = placed.spec.cluster.clone().expect("placed");
    let (other, other_file) = files.agents.iter().find(|(n, _)| *n != owner).cloned().expect("another member");
    let owner_file = files.agents.iter().find(|(n, _)| *n == owner).map(|(_, f)| f.clone()).expect("owner file");

    // The running agents use exactly these credentials: the file's token is the one the
    // owner's agent sends, and the hub knows it as the agent's ServiceAccount.
    p.hub_server.faults().record_accesses();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let file_token = std::fs::read_to_string(&owner_file).expect("read");
    let sent: Vec<_> = p.hub_server.faults().accesses().into_iter().filter(|a| file_token.contains(&a.user)).collect();
    assert!(!sent.is_empty(), "no request carried the token of {}", owner_file.display());
    assert!(
        sent.iter().all(|a| !a.user.is_empty()
            && a.username == format!("system:serviceaccount:stowage-system:stowage-agent-{owner}")),
        "{sent:?}"
    );

    let phase = placed.status.as_ref().map(|s| json!(s.phase)).expect("status");
    let same_status = Patch::Merge(json!({"status": {"phase": phase}}));
    let forged = Patch::Merge(json!({"status": {"phase": "Succeeded"}}));

    // The owner's agent writes its Placement's status.
    let mine: Api<Placement> = Api::default_namespaced(client(&owner_file).await);
    mine.patch_status("long", &PatchParams::default(), &same_status).await.expect("own status");

    // Another member's agent reads, but forges nothing.
    let theirs: Api<Placement> = Api::default_namespaced(client(&other_file).await);
    assert!(theirs.get("long").await.is_ok(), "an agent reads every Placement");
    let (code, message) =
        status_code(theirs.patch_status("long", &PatchParams::default(), &forged).await.expect_err("forged"));
    assert_eq!(code, 403);
    assert!(
        message.ends_with(&format!(
            "{FORBIDDEN_PREFIX}only the agent of the Placement's cluster ({owner}) may write its status, not system:serviceaccount:stowage-system:stowage-agent-{other}"
        )),
        "{message}"
    );
    let mut moved = theirs.get("long").await.expect("get");
    moved.spec.cluster = Some(other.clone());
    let (code, _) = status_code(theirs.replace("long", &PostParams::default(), &moved).await.expect_err("spec"));
    assert_eq!(code, 403, "an agent moved a Placement to itself");
    let after = placements.get("long").await.expect("get");
    assert_eq!(after.spec.cluster.as_deref(), Some(owner.as_str()));
    assert_ne!(after.status.map(|s| json!(s.phase)), Some(json!("Succeeded")), "the forged status was stored");

    // MemberCluster status: its own, not another's.
    let beat = Patch::Merge(json!({"status": {"heartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string()}}));
    let members: Api<MemberCluster> = Api::all(client(&other_file).await);
    members.patch_status(&other, &PatchParams::default(), &beat).await.expect("own heartbeat");
    let (code, _) =
        status_code(members.patch_status(&owner, &PatchParams::default(), &beat).await.expect_err("another's"));
    assert_eq!(code, 403);

    // RBAC, as manifests/ grants it: an agent may not delete a tenant's TrainJob, cordon a
    // member (another's or its own), change a Queue's quota, read Secrets or drop the policy
    // that binds it; each a 403 in kube-apiserver's words, and nothing changed.
    let agent = client(&other_file).await;
    let sa = format!("system:serviceaccount:stowage-system:stowage-agent-{other}");
    let refused = |e: kube::Error, verb: &str, resource: &str, group: &str| {
        let (code, message) = status_code(e);
        assert_eq!(code, 403, "{message}");
        assert!(
            message.contains(&format!(
                "is forbidden: User \"{sa}\" cannot {verb} resource \"{resource}\" in API group \"{group}\""
            )),
            "{message}"
        );
    };
    let agents_tjs: Api<TrainJob> = Api::default_namespaced(agent.clone());
    let e = agents_tjs.delete("long", &Default::default()).await.expect_err("an agent deleted a TrainJob");
    refused(e, "delete", "trainjobs", "trainer.kubeflow.org");
    assert!(tjs.get_opt("long").await.expect("get").is_some(), "the TrainJob is gone");
    let cordon = Patch::Merge(json!({"spec": {"cordoned": true}}));
    for member in [&owner, &other] {
        let e = members.patch(member, &PatchParams::default(), &cordon).await.expect_err("cordoned");
        refused(e, "patch", "memberclusters", "stowage.dev");
    }
    let queues: Api<api::stowage::Queue> = Api::all(agent.clone());
    let zero = Patch::Merge(json!({"spec": {"quotas": []}}));
    let e = queues.patch("default", &PatchParams::default(), &zero).await.expect_err("a Queue changed");
    refused(e, "patch", "queues", "stowage.dev");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(agent.clone(), "stowage-system");
    refused(secrets.list(&Default::default()).await.expect_err("Secrets listed"), "list", "secrets", "");
    let policies: Api<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy> = Api::all(agent);
    let e = policies.delete("stowage-status-writers", &Default::default()).await.expect_err("the policy deleted");
    refused(e, "delete", "validatingadmissionpolicies", "admissionregistration.k8s.io");
    let all_members: Api<MemberCluster> = Api::all(p.hub());
    assert!(all_members.list(&Default::default()).await.expect("list").items.iter().all(|m| !m.spec.cordoned));

    // The same, as an admin would try it with kubectl.
    let kubectl = |file: &Path, args: &[&str]| {
        Command::new("kubectl").arg("--kubeconfig").arg(file).args(args).output().expect("kubectl runs")
    };
    let out = kubectl(&other_file, &["get", "placements", "-o", "name"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("long"));
    let out = kubectl(
        &other_file,
        &[
            "patch",
            "placement",
            "long",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Succeeded"}}"#,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(FORBIDDEN_PREFIX), "kubectl: {stderr}");
    // kubectl (client-go) sends no token to a plain-HTTP server (kubernetes/kubectl#744): through
    // kubectl every playground client is system:anonymous, which the playground binds to
    // cluster-admin, and which the status-writers policy still refuses even on the owner's
    // Placement. docs/playground.md says so.
    let same = format!(r#"{{"status":{{"phase":{phase}}}}}"#);
    let out =
        kubectl(&owner_file, &["patch", "placement", "long", "--subresource=status", "--type=merge", "-p", &same]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("not system:anonymous"), "kubectl as the owner: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
