//! Authorization as kube-apiserver's RBAC authorizer decides it
//! (kubernetes `plugin/pkg/auth/authorizer/rbac` and `pkg/apis/rbac/v1/evaluation_helpers.go`):
//! a request is allowed when a rule of a role bound to its user allows it; nothing denies.
//!
//! - ClusterRoleBindings grant their ClusterRole everywhere; RoleBindings grant their Role, or
//!   a ClusterRole's rules, in their own namespace only.
//! - Subjects: a User by name, a Group by name, a ServiceAccount as the user
//!   `system:serviceaccount:NAMESPACE:NAME`.
//! - Rules: `*` in verbs, apiGroups and resources; `status`-style subresources named as
//!   `pods/status` or `*/status`; `resourceNames` (a request without a name, a list or a create,
//!   matches no rule that names some); `nonResourceURLs`, exact or with a trailing `*`.
//! - `system:masters` is allowed everything without a rule, as kube-apiserver's privileged-group
//!   authorizer allows it.
//!
//! Not modelled: aggregated ClusterRoles (`aggregationRule`: a controller fills their rules on a
//! real server), the escalation check on writing roles and bindings (`escalate`, `bind`), and
//! authorizing a watch or list by the name its field selector pins.

use serde_json::{Value, json};

use crate::Access;
use crate::auth::{SERVICE_ACCOUNT_PREFIX, UserInfo};
use crate::status::ApiError;
use crate::view::View;

pub const GROUP: &str = "rbac.authorization.k8s.io";

/// Who may do what on a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Authorization {
    /// Every authenticated (or anonymous) request is allowed: the server's default, for tests
    /// that are not about authorization.
    #[default]
    AlwaysAllow,
    /// Roles and bindings stored on the server decide, as `--authorization-mode=RBAC`.
    Rbac,
}

/// What a request asks, as the authorizer sees it.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// An object or a collection of a resource.
    Resource(&'a Access),
    /// Anything else: discovery, `/version`, `/healthz`, OpenAPI.
    NonResource { verb: &'a str, path: &'a str },
}

/// Whether `user` may make `request`, under the roles and bindings in `store`.
pub fn allows(store: &impl View, user: &UserInfo, request: Request<'_>) -> bool {
    if user.groups.iter().any(|g| g == "system:masters") {
        return true;
    }
    let namespace = match request {
        Request::Resource(a) => a.namespace.as_deref(),
        Request::NonResource { .. } => None,
    };
    let lookup = |plural: &str| store.lookup(GROUP, "v1", plural);
    let (Some(crbs), Some(rbs), Some(crs), Some(roles)) =
        (lookup("clusterrolebindings"), lookup("rolebindings"), lookup("clusterroles"), lookup("roles"))
    else {
        return false;
    };
    let granted = |binding: &Value, binding_ns: Option<&str>| {
        if !binds(binding, user) {
            return false;
        }
        let role_ref = &binding["roleRef"];
        let name = role_ref["name"].as_str().unwrap_or("");
        let role = match role_ref["kind"].as_str() {
            Some("ClusterRole") => store.peek(crs, None, name),
            // A RoleBinding's Role is in the binding's own namespace.
            Some("Role") => binding_ns.and_then(|ns| store.peek(roles, Some(ns), name)),
            _ => None,
        };
        let rules = role.and_then(|r| r["rules"].as_array()).map(Vec::as_slice).unwrap_or_default();
        rules.iter().any(|rule| rule_allows(rule, request))
    };
    store.objects(crbs).any(|b| granted(b, None))
        || namespace.is_some_and(|ns| {
            store.objects(rbs).filter(|b| b["metadata"]["namespace"].as_str() == Some(ns)).any(|b| granted(b, Some(ns)))
        })
}

/// Whether one of the binding's subjects is `user`.
fn binds(binding: &Value, user: &UserInfo) -> bool {
    let subjects = binding["subjects"].as_array().map(Vec::as_slice).unwrap_or_default();
    subjects.iter().any(|s| {
        let name = s["name"].as_str().unwrap_or("");
        match s["kind"].as_str() {
            Some("User") => user.username == name,
            Some("Group") => user.groups.iter().any(|g| g == name),
            Some("ServiceAccount") => user
                .username
                .strip_prefix(SERVICE_ACCOUNT_PREFIX)
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(ns, sa)| Some(ns) == s["namespace"].as_str() && sa == name),
            _ => false,
        }
    })
}

/// Whether one PolicyRule allows the request (`RuleAllows` upstream).
fn rule_allows(rule: &Value, request: Request<'_>) -> bool {
    let strings = |key: &str| rule[key].as_array().into_iter().flatten().filter_map(Value::as_str);
    let has = |key: &str, want: &str| strings(key).any(|v| v == "*" || v == want);
    match request {
        Request::Resource(a) => {
            let names: Vec<&str> = strings("resourceNames").collect();
            has("verbs", &a.verb)
                && has("apiGroups", &a.group)
                && resource_matches(strings("resources"), &a.resource, a.subresource.as_deref())
                && (names.is_empty() || a.name.as_deref().is_some_and(|n| names.contains(&n)))
        }
        Request::NonResource { verb, path } => {
            has("verbs", verb)
                && strings("nonResourceURLs")
                    .any(|u| u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p)))
        }
    }
}

/// `ResourceMatches` upstream: `*`, the resource with its subresource (`pods/status`), or any
/// resource's subresource (`*/status`).
fn resource_matches<'r>(rule: impl Iterator<Item = &'r str>, resource: &str, subresource: Option<&str>) -> bool {
    let combined = match subresource {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    };
    rule.into_iter()
        .any(|r| r == "*" || r == combined || subresource.is_some_and(|sub| r.strip_prefix("*/") == Some(sub)))
}

/// The refusal kube-apiserver answers (`responsewriters.forbiddenMessage`), word for word:
/// `pods "p" is forbidden: User "u" cannot delete resource "pods" in API group "" in the
/// namespace "default"`.
pub fn forbidden(user: &UserInfo, request: Request<'_>) -> ApiError {
    let who = &user.username;
    match request {
        Request::NonResource { verb, path } => {
            ApiError::with_reason("Forbidden", format!("forbidden: User {who:?} cannot {verb} path {path:?}"))
        }
        Request::Resource(a) => {
            let resource = match &a.subresource {
                Some(sub) => format!("{}/{sub}", a.resource),
                None => a.resource.clone(),
            };
            let scope = match &a.namespace {
                Some(ns) => format!("in the namespace {ns:?}"),
                None => "at the cluster scope".to_string(),
            };
            let why =
                format!("User {who:?} cannot {} resource {resource:?} in API group {:?} {scope}", a.verb, a.group);
            let qualified = if a.group.is_empty() { a.resource.clone() } else { format!("{}.{}", a.resource, a.group) };
            match &a.name {
                Some(name) => {
                    let mut e = ApiError::with_reason("Forbidden", format!("{qualified} {name:?} is forbidden: {why}"));
                    e.details = Some((a.resource.clone(), name.clone()));
                    e
                }
                None => ApiError::with_reason("Forbidden", format!("{qualified} is forbidden: {why}")),
            }
        }
    }
}

/// The bootstrap roles a server starts RBAC with (kubernetes
/// `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`), the ones clients depend on:
/// `cluster-admin` (bound to `system:masters`), discovery for authenticated users and the
/// public health and version paths for everyone. Each as (plural, object).
pub fn bootstrap() -> Vec<(&'static str, Value)> {
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}, "rules": rules})
    };
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": subjects})
    };
    let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery = vec!["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"];
    discovery.extend(public);
    vec![
        (
            "clusterroles",
            role(
                "cluster-admin",
                json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                       {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
            ),
        ),
        ("clusterrolebindings", binding("cluster-admin", &["system:masters"])),
        ("clusterroles", role("system:discovery", json!([{"nonResourceURLs": discovery, "verbs": ["get"]}]))),
        ("clusterrolebindings", binding("system:discovery", &["system:authenticated"])),
        ("clusterroles", role("system:public-info-viewer", json!([{"nonResourceURLs": public, "verbs": ["get"]}]))),
        (
            "clusterrolebindings",
            binding("system:public-info-viewer", &["system:authenticated", "system:unauthenticated"]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Requester;
    use crate::store::{Store, WriteOptions};

    fn store_with(objects: &[(&str, Option<&str>, Value)]) -> Store {
        let mut store = Store::new();
        for (plural, obj) in bootstrap() {
            put(&mut store, plural, None, obj);
        }
        let ns = store.lookup("", "v1", "namespaces").cloned().expect("namespaces");
        for name in ["team-a", "team-b"] {
            store
                .create(
                    Requester::InProcess,
                    &ns,
                    None,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
                    &WriteOptions::default(),
                )
                .expect("namespace");
        }
        for (plural, ns, obj) in objects {
            put(&mut store, plural, *ns, obj.clone());
        }
        store
    }

    fn put(store: &mut Store, plural: &str, ns: Option<&str>, obj: Value) {
        let rt = store.lookup(GROUP, "v1", plural).cloned().expect("rbac type");
        store.create(Requester::InProcess, &rt, ns, obj, &WriteOptions::default()).expect("create");
    }

    fn role(kind: &str, name: &str, ns: Option<&str>, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
               "metadata": {"name": name, "namespace": ns}, "rules": rules})
    }

    fn binding(kind: &str, name: &str, ns: Option<&str>, role_kind: &str, role: &str, subjects: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
               "metadata": {"name": name, "namespace": ns},
               "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role}, "subjects": subjects})
    }

    fn access(verb: &str, group: &str, resource: &str, ns: Option<&str>, name: Option<&str>) -> Access {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        Access {
            user: String::new(),
            username: String::new(),
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource,
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
        }
    }

    fn may(store: &Store, user: &UserInfo, a: &Access) -> bool {
        allows(store, user, Request::Resource(a))
    }

    /// The agent-of-one-member shape manifests/hub-member-access grants: status of its own
    /// MemberCluster by name, through a ClusterRoleBinding to its ServiceAccount.
    #[test]
    fn resource_names_subresources_and_service_accounts_bind_as_upstream() {
        let store = store_with(&[
            (
                "clusterroles",
                None,
                role(
                    "ClusterRole",
                    "own",
                    None,
                    json!([{"apiGroups": ["stowage.dev"], "resources": ["memberclusters/status"],
                            "resourceNames": ["east"], "verbs": ["patch"]}]),
                ),
            ),
            (
                "clusterrolebindings",
                None,
                binding(
                    "ClusterRoleBinding",
                    "own",
                    None,
                    "ClusterRole",
                    "own",
                    json!([{"kind": "ServiceAccount", "name": "agent-east", "namespace": "stowage-system"}]),
                ),
            ),
        ]);
        let agent = UserInfo::service_account("stowage-system", "agent-east");
        let other_ns = UserInfo::service_account("other", "agent-east");
        let patch = |name: &str| access("patch", "stowage.dev", "memberclusters/status", None, Some(name));
        assert!(may(&store, &agent, &patch("east")));
        assert!(!may(&store, &agent, &patch("west")), "another member's status");
        assert!(!may(&store, &other_ns, &patch("east")), "the same name in another namespace is another account");
        assert!(!may(&store, &agent, &access("patch", "stowage.dev", "memberclusters", None, Some("east"))), "spec");
        assert!(!may(&store, &agent, &access("list", "stowage.dev", "memberclusters/status", None, None)), "no name");
        assert!(!may(&store, &agent, &access("patch", "", "memberclusters/status", None, Some("east"))), "group");
        assert!(may(&store, &UserInfo::admin(), &access("delete", "x", "y", Some("z"), Some("w"))), "system:masters");
    }

    #[test]
    fn a_role_binding_grants_in_its_own_namespace_only() {
        let store = store_with(&[
            (
                "roles",
                Some("team-a"),
                role(
                    "Role",
                    "reader",
                    Some("team-a"),
                    json!([{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}]),
                ),
            ),
            (
                "clusterroles",
                None,
                role(
                    "ClusterRole",
                    "jobs",
                    None,
                    json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["delete"]}]),
                ),
            ),
            (
                "clusterroles",
                None,
                role(
                    "ClusterRole",
                    "statuses",
                    None,
                    json!([{"apiGroups": ["batch"], "resources": ["*/status"], "verbs": ["*"]}]),
                ),
            ),
            (
                "rolebindings",
                Some("team-a"),
                binding(
                    "RoleBinding",
                    "r",
                    Some("team-a"),
                    "Role",
                    "reader",
                    json!([{"kind": "User", "name": "alice"}]),
                ),
            ),
            (
                "rolebindings",
                Some("team-a"),
                binding(
                    "RoleBinding",
                    "j",
                    Some("team-a"),
                    "ClusterRole",
                    "jobs",
                    json!([{"kind": "Group", "name": "devs"}]),
                ),
            ),
            // A RoleBinding naming a Role of another namespace grants nothing.
            (
                "rolebindings",
                Some("team-b"),
                binding(
                    "RoleBinding",
                    "r",
                    Some("team-b"),
                    "Role",
                    "reader",
                    json!([{"kind": "User", "name": "alice"}]),
                ),
            ),
            (
                "clusterrolebindings",
                None,
                binding(
                    "ClusterRoleBinding",
                    "s",
                    None,
                    "ClusterRole",
                    "statuses",
                    json!([{"kind": "User", "name": "alice"}]),
                ),
            ),
        ]);
        let alice = UserInfo::new("alice", &["devs", "system:authenticated"]);
        let bob = UserInfo::new("bob", &["devs", "system:authenticated"]);
        assert!(may(&store, &alice, &access("get", "", "pods/log", Some("team-a"), Some("p"))));
        assert!(may(&store, &alice, &access("list", "", "pods", Some("team-a"), None)));
        assert!(!may(&store, &alice, &access("list", "", "pods", Some("team-b"), None)), "no Role in team-b");
        assert!(!may(&store, &alice, &access("list", "", "pods", None, None)), "all namespaces");
        assert!(!may(&store, &alice, &access("get", "", "pods/status", Some("team-a"), Some("p"))), "subresource");
        // A ClusterRole bound by a RoleBinding: its rules, in that namespace, `*` covering
        // subresources too.
        assert!(may(&store, &bob, &access("delete", "stowage.dev", "placements", Some("team-a"), Some("x"))));
        assert!(may(&store, &bob, &access("delete", "", "pods/eviction", Some("team-a"), Some("x"))));
        assert!(!may(&store, &bob, &access("delete", "stowage.dev", "placements", Some("team-b"), Some("x"))));
        // `*/status`: any resource's status, nothing else.
        assert!(may(&store, &alice, &access("update", "batch", "jobs/status", Some("team-b"), Some("j"))));
        assert!(!may(&store, &alice, &access("update", "batch", "jobs", Some("team-b"), Some("j"))));
    }

    #[test]
    fn the_bootstrap_roles_open_discovery_to_users_and_health_to_everyone() {
        let store = store_with(&[]);
        let path = |verb: &'static str, path: &'static str| Request::NonResource { verb, path };
        let anonymous = UserInfo::anonymous();
        let user = UserInfo::new("alice", &["system:authenticated"]);
        assert!(allows(&store, &anonymous, path("get", "/healthz")));
        assert!(allows(&store, &anonymous, path("get", "/version")));
        assert!(!allows(&store, &anonymous, path("get", "/apis")));
        assert!(allows(&store, &user, path("get", "/apis/stowage.dev/v1alpha1")), "a trailing * is a prefix");
        assert!(allows(&store, &user, path("get", "/openapi/v3")));
        assert!(!allows(&store, &user, path("post", "/apis")));
        assert!(!allows(&store, &user, path("get", "/metrics")));
        assert!(!may(&store, &user, &access("get", "", "pods", Some("default"), Some("p"))));
    }

    /// Word for word as kube-apiserver (`responsewriters.forbiddenMessage`, `NewForbidden`).
    #[test]
    fn refusals_read_as_kube_apiserver_writes_them() {
        let sa = UserInfo::service_account("stowage-system", "stowage-agent-east");
        let e = forbidden(
            &sa,
            Request::Resource(&access("delete", "trainer.kubeflow.org", "trainjobs", Some("team-a"), Some("llm"))),
        );
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "trainjobs.trainer.kubeflow.org \"llm\" is forbidden: User \"system:serviceaccount:stowage-system:stowage-agent-east\" \
             cannot delete resource \"trainjobs\" in API group \"trainer.kubeflow.org\" in the namespace \"team-a\""
        );
        let e = forbidden(&sa, Request::Resource(&access("list", "", "nodes/status", None, None)));
        assert_eq!(
            e.message,
            "nodes is forbidden: User \"system:serviceaccount:stowage-system:stowage-agent-east\" cannot list resource \
             \"nodes/status\" in API group \"\" at the cluster scope"
        );
        let e = forbidden(&UserInfo::anonymous(), Request::NonResource { verb: "get", path: "/apis" });
        assert_eq!(e.message, "forbidden: User \"system:anonymous\" cannot get path \"/apis\"");
    }
}
