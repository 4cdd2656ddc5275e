//! RBAC over HTTP, as kube-apiserver runs it with `--authorization-mode=RBAC`: a ServiceAccount
//! may do what its bindings grant, the rest is a 403 in the real server's words; an apply that
//! creates needs `create` as well as `patch`; discovery is open to authenticated users only;
//! kubectl reads the refusal.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_mem::rbac::Authorization;
use kube_mem::{ApiServer, UserInfo};
use serde_json::json;

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}),
    )
    .expect("configmap")
}

#[tokio::test]
async fn a_service_account_does_what_its_bindings_grant_and_no_more() {
    let server = ApiServer::start().await.expect("server");
    server.add_user("admin", UserInfo::admin());
    server.add_user("app", UserInfo::service_account("default", "app"));
    let admin = server.client_as("admin").expect("client");
    let app = server.client_as("app").expect("client");
    let as_app: Api<ConfigMap> = Api::default_namespaced(app.clone());

    // Off by default: every request is allowed.
    as_app.create(&PostParams::default(), &cm("before")).await.expect("no authorizer yet");

    server.set_authorization(Authorization::Rbac).expect("rbac");
    let e = api_error(as_app.get("before").await.expect_err("no binding"));
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "configmaps \"before\" is forbidden: User \"system:serviceaccount:default:app\" cannot get resource \
         \"configmaps\" in API group \"\" in the namespace \"default\""
    );

    // A Role that reads and patches ConfigMaps in default, bound to the ServiceAccount.
    let role: Role = serde_json::from_value(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "cm", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "patch"]}]}))
    .expect("role");
    Api::<Role>::default_namespaced(admin.clone()).create(&PostParams::default(), &role).await.expect("role");
    let binding: RoleBinding = serde_json::from_value(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding", "metadata": {"name": "cm", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm"},
        "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": "default"}]}))
    .expect("binding");
    Api::<RoleBinding>::default_namespaced(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");

    as_app.get("before").await.expect("granted: get");
    assert_eq!(as_app.list(&Default::default()).await.expect("granted: list").items.len(), 1);
    let e = api_error(as_app.create(&PostParams::default(), &cm("new")).await.expect_err("create"));
    assert_eq!(e.code, 403);
    assert!(e.message.starts_with("configmaps is forbidden: "), "{}", e.message);
    // Server-side apply of an object that does not exist is a create too.
    let ssa = PatchParams::apply("app");
    let e = api_error(as_app.patch("new", &ssa, &Patch::Apply(cm("new"))).await.expect_err("apply creates"));
    assert!(e.message.contains("cannot create resource \"configmaps\""), "{}", e.message);
    as_app.patch("before", &ssa, &Patch::Apply(cm("before"))).await.expect("apply to an existing one is a patch");
    // Another namespace, and the whole cluster, are not granted.
    let other: Api<ConfigMap> = Api::namespaced(app.clone(), "kube-system");
    let e = api_error(other.list(&Default::default()).await.expect_err("another namespace"));
    assert!(e.message.ends_with("in the namespace \"kube-system\""), "{}", e.message);
    let e = api_error(Api::<ConfigMap>::all(app).list(&Default::default()).await.expect_err("all namespaces"));
    assert!(e.message.ends_with("at the cluster scope"), "{}", e.message);
    // The administrator (system:masters) needs no binding.
    Api::<ConfigMap>::all(admin).list(&Default::default()).await.expect("admin");
    assert!(server.store().lock().expect("store").lookup("rbac.authorization.k8s.io", "v1", "clusterroles").is_some());
}

/// kubectl as a user with no grant: discovery is open to authenticated users (the bootstrap
/// `system:discovery`), not to anonymous ones; the refusal reaches kubectl in the server's words.
#[tokio::test]
async fn kubectl_reads_the_refusal_and_anonymous_users_get_no_discovery() {
    let server = ApiServer::start().await.expect("server");
    server.set_authorization(Authorization::Rbac).expect("rbac");
    let url = server.url();
    let get = |path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("{url}{path}"))
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(get("/healthz"), "200", "public");
    assert_eq!(get("/version"), "200", "public");
    assert_eq!(get("/apis"), "403", "discovery is for authenticated users");
    assert_eq!(get("/api/v1/namespaces/default/configmaps"), "403");

    // kubectl sends no token over plain HTTP, so it is anonymous here: bound to a role that may
    // list ConfigMaps and nothing else, it lists them and is refused a Secret.
    server.add_user("admin", UserInfo::admin());
    let admin = server.client_as("admin").expect("client");
    let role: ClusterRole = serde_json::from_value(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole", "metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
                  {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi/*"], "verbs": ["get"]}]}))
    .expect("role");
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await.expect("role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding", "metadata": {"name": "cm-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cm-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]}))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(admin).create(&PostParams::default(), &binding).await.expect("binding");
    let dir = std::env::temp_dir().join(format!("kube-mem-rbac-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("kubeconfig");
    std::fs::write(&config, server.kubeconfig("nobody")).expect("kubeconfig");
    let kubectl = |args: &[&str]| {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&config)
            .args(args)
            .output()
            .expect("kubectl runs")
    };
    let out = kubectl(&["get", "configmaps"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kubectl(&["get", "secrets"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("secrets is forbidden: User \"system:anonymous\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
