//! `stowage webhook` as a real hub's API server calls it: an AdmissionReview over TLS, the
//! runtime looked up on the hub, Trainer's answer back.

use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer");

fn review(operation: &str, object: Value, old: Option<Value>) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "7f0b2c1e-review", "operation": operation, "name": object["metadata"]["name"], "namespace": "default",
        "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
        "userInfo": {"username": "alice"}, "object": object, "oldObject": old, "dryRun": false}})
}

fn trainjob(name: &str, runtime: &str, nodes: i64) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"runtimeRef": {"name": runtime, "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
                    "trainer": {"numNodes": nodes}}})
}

#[tokio::test]
async fn the_webhook_answers_reviews_over_tls_as_trainers_would() {
    // The hub: Trainer's CRDs and one runtime.
    let hub_server = kube_mem::ApiServer::start().await.expect("hub");
    let hub = hub_server.client_as("webhook").expect("client");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(hub.clone());
    for f in ["trainer.kubeflow.org_clustertrainingruntimes.yaml", "trainer.kubeflow.org_trainjobs.yaml"] {
        let crd = input_limits::yaml::from_str(&std::fs::read_to_string(format!("{UPSTREAM}/{f}")).expect("crd"))
            .expect("yaml");
        crds.create(&PostParams::default(), &crd).await.expect("crd created");
    }
    let runtime: api::trainer::ClusterTrainingRuntime = input_limits::yaml::from_str(
        &std::fs::read_to_string(format!("{UPSTREAM}/runtimes/torch_distributed.yaml")).expect("runtime"),
    )
    .expect("yaml");
    Api::<api::trainer::ClusterTrainingRuntime>::all(hub.clone())
        .create(&PostParams::default(), &runtime)
        .await
        .expect("runtime created");

    // A certificate for localhost, as a cert-manager Secret would hold it.
    let dir = std::env::temp_dir().join(format!("stowage-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, key.cert.pem()).expect("write");
    std::fs::write(&key_file, key.signing_key.serialize_pem()).expect("write");
    let tls = dispatcher::webhook::tls(&cert_file, &key_file).expect("tls");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    tokio::spawn(dispatcher::webhook::serve(addr, tls, hub));
    // Refuses a key that is not one.
    assert!(dispatcher::webhook::tls(&cert_file, &cert_file).is_err());

    let ask = |body: Value| {
        let (dir, cert) = (dir.clone(), cert_file.clone());
        async move {
            let file = dir.join("review.json");
            std::fs::write(&file, body.to_string()).expect("write");
            let url = format!("https://localhost:{}{}", addr.port(), dispatcher::webhook::PATH);
            let mut tries = 0;
            loop {
                let out = tokio::process::Command::new("curl")
                    .args(["-sS", "--fail", "--cacert"])
                    .arg(&cert)
                    .args(["-H", "Content-Type: application/json", "--data-binary"])
                    .arg(format!("@{}", file.display()))
                    .arg(&url)
                    .output()
                    .await
                    .expect("curl runs");
                if out.status.success() {
                    return serde_json::from_slice::<Value>(&out.stdout).expect("json")["response"].clone();
                }
                tries += 1;
                assert!(tries < 50, "the webhook never answered: {}", String::from_utf8_lossy(&out.stderr));
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };

    let ok = ask(review("CREATE", trainjob("fine", "torch-distributed", 2), None)).await;
    assert_eq!((ok["uid"].as_str(), ok["allowed"].as_bool()), (Some("7f0b2c1e-review"), Some(true)), "{ok}");

    let missing = ask(review("CREATE", trainjob("orphan", "nowhere", 2), None)).await;
    assert_eq!(missing["allowed"], false);
    assert_eq!(missing["status"]["code"], 403);
    assert_eq!(missing["status"]["reason"], "Forbidden");
    let message = missing["status"]["message"].as_str().expect("message");
    assert!(message.starts_with("spec.RuntimeRef: Invalid value: "), "{message}");
    assert!(
        message.ends_with(
            "\"nowhere\" not found: specified clusterTrainingRuntime must be created before the TrainJob is created"
        ),
        "{message}"
    );

    let zero = ask(review("CREATE", trainjob("zero", "torch-distributed", 0), None)).await;
    assert_eq!(zero["status"]["message"], "spec.trainer.numNodes: Invalid value: 0: must be at least 1");
    assert_eq!(zero["status"]["details"]["causes"][0]["field"], "spec.trainer.numNodes");

    // On update the old object is read too: runtimeRef is immutable (the CRD's rule, 422).
    let moved = ask(review(
        "UPDATE",
        trainjob("fine", "torch-distributed-other", 2),
        Some(trainjob("fine", "torch-distributed", 2)),
    ))
    .await;
    assert_eq!(moved["allowed"], false, "{moved}");
    assert_eq!(moved["status"]["code"], 422, "{moved}");
    // Hostile or lost callers: not a review, a wrong path, a body over the limit.
    let status = |path: &str, body: String| {
        let (cert, url) = (cert_file.clone(), format!("https://localhost:{}{path}", addr.port()));
        let file = dir.join("hostile.json");
        async move {
            std::fs::write(&file, body).expect("write");
            let out = tokio::process::Command::new("curl")
                .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
                .arg(&cert)
                .arg("--data-binary")
                .arg(format!("@{}", file.display()))
                .arg(&url)
                .output()
                .await
                .expect("curl runs");
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    assert_eq!(status(dispatcher::webhook::PATH, "{\"kind\": \"nonsense\"}".into()).await, "400");
    assert_eq!(status("/mutate", review("CREATE", trainjob("x", "y", 1), None).to_string()).await, "404");
    assert_eq!(status(dispatcher::webhook::PATH, "x".repeat(8 << 20)).await, "413");
    let _ = std::fs::remove_dir_all(&dir);
}
