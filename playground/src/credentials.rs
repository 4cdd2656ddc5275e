//! Who is who on the playground's hub: a token per agent (the hub authenticates it as the
//! agent's ServiceAccount, `stowage-system/stowage-agent-<member>`, as on a real hub), one for
//! the dispatchers (`stowage-system/stowage-dispatcher`) and one for the administrator
//! (`kubernetes-admin`); the shipped ValidatingAdmissionPolicy that ties Placement status writes
//! to the agent of their member; and the kubeconfig files `stowage dev` writes.
//!
//! Each identity's token carries its own secret, drawn once per process, so another process
//! cannot guess them and one token (an agent's kubeconfig) says nothing of another's; they are
//! still plain text in the files written and on the (unencrypted) loopback connection.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use kube_mem::{ApiServer, UserInfo};
use simulator::fleet_file::FleetSpec;

use crate::{PlaygroundError, SYSTEM_NAMESPACE, setup};

/// The policy every hub runs: a Placement's status only by its member's agent
/// (manifests/hub/status-writers-policy.yaml, compiled in).
pub const STATUS_WRITERS_POLICY: &str = include_str!("../../manifests/hub/status-writers-policy.yaml");

/// The ServiceAccount the dispatcher runs as (manifests/hub/dispatcher-serviceaccount.yaml).
pub const DISPATCHER_SERVICE_ACCOUNT: &str = "stowage-dispatcher";

/// The ServiceAccount member `name`'s agent authenticates to the hub as
/// (manifests/hub-member-access).
pub fn agent_service_account(member: &str) -> String {
    format!("stowage-agent-{member}")
}

/// 128 random bits, hex, drawn once per process for `identity` (the standard library's randomly
/// keyed hasher is the source: each `RandomState` has fresh keys; no extra dependency for a test
/// server's tokens).
fn secret(identity: &str) -> String {
    static SECRETS: OnceLock<Mutex<BTreeMap<String, String>>> = OnceLock::new();
    let mut secrets = SECRETS.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner());
    secrets
        .entry(identity.to_string())
        .or_insert_with(|| {
            let word = |salt: u64| {
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u64(salt);
                h.finish()
            };
            format!("{:016x}{:016x}", word(1), word(2))
        })
        .clone()
}

pub fn agent_token(member: &str) -> String {
    format!("agent-{member}-{}", secret(&format!("agent-{member}")))
}

pub fn dispatcher_token(replica: usize) -> String {
    format!("dispatcher-{replica}-{}", secret(&format!("dispatcher-{replica}")))
}

/// The ServiceAccount the log relay runs as (manifests/hub-relay).
pub const RELAY_SERVICE_ACCOUNT: &str = "stowage-relay";

pub fn relay_token() -> String {
    format!("relay-{}", secret("relay"))
}

pub fn admin_token() -> String {
    format!("admin-{}", secret("admin"))
}

/// Registers the administrator, the dispatchers (up to 8 replicas), the log relay and every
/// member's agent.
pub fn register(hub: &ApiServer, fleet: &FleetSpec) {
    hub.add_user(&admin_token(), UserInfo::admin());
    hub.add_user(&relay_token(), UserInfo::service_account(SYSTEM_NAMESPACE, RELAY_SERVICE_ACCOUNT));
    for i in 0..8 {
        hub.add_user(&dispatcher_token(i), UserInfo::service_account(SYSTEM_NAMESPACE, DISPATCHER_SERVICE_ACCOUNT));
    }
    for c in &fleet.clusters {
        hub.add_user(
            &agent_token(&c.name),
            UserInfo::service_account(SYSTEM_NAMESPACE, &agent_service_account(&c.name)),
        );
    }
}

/// Creates the policy and its binding on the hub.
pub async fn install_policy(hub: &Client) -> Result<(), PlaygroundError> {
    let what = "manifests/hub/status-writers-policy.yaml";
    let docs: Vec<serde_json::Value> =
        input_limits::yaml::documents(STATUS_WRITERS_POLICY).map_err(|e| setup(what)(e.to_string()))?;
    let pp = PostParams::default();
    for doc in docs {
        let created = match doc["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => {
                create(Api::<ValidatingAdmissionPolicy>::all(hub.clone()), doc, &pp).await
            }
            Some("ValidatingAdmissionPolicyBinding") => {
                create(Api::<ValidatingAdmissionPolicyBinding>::all(hub.clone()), doc, &pp).await
            }
            _ => Ok(()),
        };
        created.map_err(setup(what))?;
    }
    Ok(())
}

/// The hub's RBAC as manifests/ grants it (compiled in): the dispatcher's ClusterRole and its
/// leader-election Role, the role every agent shares, the log relay's, and per member the
/// bindings and own-MemberCluster role of manifests/hub-member-access (its `MEMBER` placeholder
/// replaced, as the overlay's component does).
const HUB_RBAC: [(&str, &str); 4] = [
    ("manifests/hub/dispatcher-clusterrole.yaml", include_str!("../../manifests/hub/dispatcher-clusterrole.yaml")),
    (
        "manifests/hub/dispatcher-leader-election-role.yaml",
        include_str!("../../manifests/hub/dispatcher-leader-election-role.yaml"),
    ),
    ("manifests/hub/agent-hub-clusterrole.yaml", include_str!("../../manifests/hub/agent-hub-clusterrole.yaml")),
    ("manifests/hub-relay/clusterrole.yaml", include_str!("../../manifests/hub-relay/clusterrole.yaml")),
];
const MEMBER_RBAC: &str = include_str!("../../manifests/hub-member-access/rbac.yaml");

/// The one grant the playground adds: kubectl sends no token over plain HTTP, so what it sends
/// reaches the hub as `system:anonymous`, which the playground makes an administrator. Every
/// token the hub knows is held to its role.
const ANONYMOUS_ADMIN: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: stowage-playground-anonymous-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:anonymous}
";

/// The hub's roles and bindings for the members `members`, in the order they are written, each
/// with the file it comes from.
pub fn rbac_objects<'m>(
    members: impl IntoIterator<Item = &'m str>,
) -> Result<Vec<(String, serde_json::Value)>, PlaygroundError> {
    let mut files: Vec<(String, String)> = HUB_RBAC.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
    for m in members {
        files.push((format!("manifests/hub-member-access/rbac.yaml ({m})"), MEMBER_RBAC.replace("MEMBER", m)));
    }
    files.push(("the playground's anonymous binding".into(), ANONYMOUS_ADMIN.into()));
    let mut objects = Vec::new();
    for (what, text) in files {
        let docs: Vec<serde_json::Value> =
            input_limits::yaml::documents(&text).map_err(|e| setup(&what)(e.to_string()))?;
        objects.extend(docs.into_iter().map(|d| (what.clone(), d)));
    }
    Ok(objects)
}

/// Writes the hub's roles and bindings (after the namespace they live in) and turns RBAC on:
/// from then on the dispatchers, agents and relay may do what manifests/ grants them, no more.
pub async fn install_rbac(server: &ApiServer, hub: &Client, fleet: &FleetSpec) -> Result<(), PlaygroundError> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let pp = PostParams::default();
    for (what, doc) in rbac_objects(fleet.clusters.iter().map(|c| c.name.as_str()))? {
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or(SYSTEM_NAMESPACE).to_string();
        let created = match doc["kind"].as_str() {
            Some("ClusterRole") => create(Api::<ClusterRole>::all(hub.clone()), doc, &pp).await,
            Some("ClusterRoleBinding") => create(Api::<ClusterRoleBinding>::all(hub.clone()), doc, &pp).await,
            Some("Role") => create(Api::<Role>::namespaced(hub.clone(), &ns), doc, &pp).await,
            Some("RoleBinding") => create(Api::<RoleBinding>::namespaced(hub.clone(), &ns), doc, &pp).await,
            other => Err(format!("a {other:?} among the RBAC objects")),
        };
        created.map_err(setup(what))?;
    }
    server.set_authorization(kube_mem::rbac::Authorization::Rbac).map_err(|e| setup("RBAC")(e.to_string()))
}

async fn create<K>(api: Api<K>, doc: serde_json::Value, pp: &PostParams) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(doc).map_err(|e| e.to_string())?;
    api.create(pp, &obj).await.map(drop).map_err(|e| e.to_string())
}

/// A client from a kubeconfig's text, as `--kubeconfig FILE` makes one; in-process
/// (`kube_mem::local`) when it names a server of this process.
pub async fn client_from_kubeconfig(text: &str) -> Result<Client, kube::Error> {
    let kc = kube::config::Kubeconfig::from_yaml(text).map_err(kube::Error::InferKubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(kube::Error::InferKubeconfig)?;
    match kube_mem::local::client_for(&config) {
        Some(local) => local.map_err(|e| kube::Error::Service(Box::new(e))),
        None => Client::try_from(config),
    }
}

/// The files [`write_kubeconfigs`] wrote.
#[derive(Debug, Clone)]
pub struct Kubeconfigs {
    /// `DIR/hub.kubeconfig`: the administrator.
    pub hub: PathBuf,
    /// `DIR/<member>.kubeconfig`, in the fleet's order.
    pub members: Vec<(String, PathBuf)>,
    /// `DIR/agents/<member>-on-hub.kubeconfig`: exactly what each agent uses on the hub.
    pub agents: Vec<(String, PathBuf)>,
}

/// Writes the playground's kubeconfigs under `dir` (made if missing), readable by the owner only
/// where the platform allows: each holds a token in plain text.
pub fn write_kubeconfigs(p: &crate::Playground, dir: &Path) -> Result<Kubeconfigs, PlaygroundError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| PlaygroundError::Io { path, source }
    };
    let agents_dir = dir.join("agents");
    std::fs::create_dir_all(&agents_dir).map_err(io(&agents_dir))?;
    let write = |path: PathBuf, text: String| -> Result<PathBuf, PlaygroundError> {
        std::fs::write(&path, text).map_err(io(&path))?;
        owner_only(&path).map_err(io(&path))?;
        Ok(path)
    };
    let hub = write(dir.join("hub.kubeconfig"), p.admin_kubeconfig())?;
    let mut members = Vec::new();
    let mut agents = Vec::new();
    for m in &p.members {
        members.push((
            m.name.clone(),
            write(dir.join(format!("{}.kubeconfig", m.name)), m.sim.server.kubeconfig(&m.name))?,
        ));
        agents.push((
            m.name.clone(),
            write(agents_dir.join(format!("{}-on-hub.kubeconfig", m.name)), p.agent_kubeconfig(&m.name))?,
        ));
    }
    Ok(Kubeconfigs { hub, members, agents })
}

#[cfg(unix)]
fn owner_only(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(not(unix))]
fn owner_only(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_identity_has_its_own_secret_stable_within_the_process() {
        let secret_of = |token: String| token.rsplit('-').next().unwrap_or_default().to_string();
        let tokens = [agent_token("east"), agent_token("west"), dispatcher_token(0), relay_token(), admin_token()];
        let secrets: std::collections::BTreeSet<String> = tokens.iter().cloned().map(secret_of).collect();
        assert_eq!(secrets.len(), tokens.len(), "one token reveals another: {tokens:?}");
        assert_eq!(agent_token("east"), tokens[0], "the same identity keeps its token");
    }
}
