//! `stowage webhook`: Trainer v2.3.0's TrainJob admission for a real hub, served behind a
//! ValidatingWebhookConfiguration (manifests/hub/webhook.yaml) at Trainer's own path, over TLS
//! from a Secret. The hub runs no Trainer controller, so without this it would accept TrainJobs
//! Trainer refuses. The decision is [`trainer_render::admit`]; this module reads the
//! AdmissionReview, looks up the runtime `spec.runtimeRef` names, and answers.

use std::net::SocketAddr;
use std::sync::Arc;

use api::trainer::{ClusterTrainingRuntime, Runtime, TrainJob, TrainingRuntime};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tracing::Instrument;

/// Where Trainer's webhook is served (its kubebuilder marker), so a configuration written for
/// Trainer points here unchanged.
pub const PATH: &str = "/validate-trainer-kubeflow-org-v1alpha1-trainjob";
use input_limits::MAX_ADMISSION_REVIEW_BYTES as MAX_REVIEW_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("the webhook's endpoint")]
    Serve(#[from] kube_shell::serve::ServeError),
}

/// The runtime a TrainJob names, as the hub holds it; `None` when there is none.
pub type Lookup = Result<Option<Runtime>, kube::Error>;

/// The answer to one review of a TrainJob, given the runtime it names (looked up by the caller).
pub fn answer(req: &AdmissionRequest<DynamicObject>, runtime: Lookup) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    let read = |o: &DynamicObject| serde_json::to_value(o).and_then(serde_json::from_value::<TrainJob>);
    // Deletes and connects are not reviewed, nor is an old object on a create.
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return response;
    }
    let old = req.old_object.as_ref().filter(|_| req.operation == Operation::Update).map(read).transpose();
    let (trainjob, old) = match (req.object.as_ref().map(read).transpose(), old) {
        (Ok(Some(tj)), Ok(old)) => (tj, old),
        (Ok(None), _) => return response,
        // Refused by its schema already on a real hub.
        (Err(e), _) | (_, Err(e)) => {
            return deny(response, 400, "BadRequest", format!("the TrainJob does not decode: {e}"), Vec::new());
        }
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            let message = format!("reading the runtime spec.runtimeRef names: {}", kube_shell::error_chain(&e));
            return deny(response, 500, "InternalError", message, Vec::new());
        }
    };
    match trainer_render::admit(&trainjob, runtime.as_ref(), old.as_ref()) {
        Ok(()) => response,
        Err(denial) => {
            let causes = denial.errors().iter().map(|e| (e.field.clone(), e.body())).collect();
            deny(response, denial.code(), denial.reason(), denial.to_string(), causes)
        }
    }
}

fn deny(
    mut response: AdmissionResponse,
    code: u16,
    reason: &str,
    message: String,
    causes: Vec<(String, String)>,
) -> AdmissionResponse {
    response.allowed = false;
    let mut status = Status::failure(&message, reason).with_code(code);
    if !causes.is_empty() {
        status.details = Some(kube::core::response::StatusDetails {
            causes: causes
                .into_iter()
                .map(|(field, message)| kube::core::response::StatusCause {
                    reason: "FieldValueInvalid".into(),
                    message,
                    field,
                })
                .collect(),
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
    }
    response.result = status;
    response
}

/// The hub's runtimes, watched: a review reads the runtime it names here, as Trainer's webhook
/// reads its informer's cache, instead of asking the hub once per TrainJob created. One the
/// cache has not seen yet (made a moment before the TrainJob) is read from the hub.
#[derive(Clone)]
struct Runtimes {
    namespaced: Store<TrainingRuntime>,
    cluster: Store<ClusterTrainingRuntime>,
}

impl Runtimes {
    fn watch(hub: &Client, watches: &mut kube_shell::watch::Watches) -> Self {
        use kube_shell::watch::whole as keep;
        Runtimes {
            namespaced: watches.cache(Api::all(hub.clone()), watcher::Config::default(), keep::<TrainingRuntime>),
            cluster: watches.cache(Api::all(hub.clone()), watcher::Config::default(), keep::<ClusterTrainingRuntime>),
        }
    }

    /// The runtime a TrainJob names: from the cache, else from the hub.
    async fn lookup(&self, hub: &Client, req: &AdmissionRequest<DynamicObject>) -> Lookup {
        let Some(tj) = req.object.as_ref().and_then(|o| serde_json::to_value(o).ok()) else { return Ok(None) };
        let Ok(tj) = serde_json::from_value::<TrainJob>(tj) else { return Ok(None) };
        let r = &tj.spec.runtime_ref;
        let ns = req.namespace.clone().unwrap_or_else(|| "default".into());
        Ok(match r.kind_or_default() {
            "TrainingRuntime" => match self.namespaced.get(&ObjectRef::new(&r.name).within(&ns)) {
                Some(rt) => Some(TrainingRuntime::clone(&rt)),
                None => Api::<TrainingRuntime>::namespaced(hub.clone(), &ns).get_opt(&r.name).await?,
            }
            .map(Runtime::Namespaced),
            "ClusterTrainingRuntime" => match self.cluster.get(&ObjectRef::new(&r.name)) {
                Some(rt) => Some(ClusterTrainingRuntime::clone(&rt)),
                None => Api::<ClusterTrainingRuntime>::all(hub.clone()).get_opt(&r.name).await?,
            }
            .map(Runtime::Cluster),
            _ => None,
        })
    }
}

/// Reads a review, answers it.
async fn review(hub: &Client, runtimes: &Runtimes, body: &[u8]) -> Response<Full<Bytes>> {
    let reply = |code: StatusCode, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = code;
        r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
        r
    };
    let parsed: Result<AdmissionRequest<DynamicObject>, String> =
        serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
            .map_err(|e| e.to_string())
            .and_then(|r| r.try_into().map_err(|e: kube::core::admission::ConvertAdmissionReviewError| e.to_string()));
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return reply(StatusCode::BAD_REQUEST, format!("not an AdmissionReview: {e}").into_bytes()),
    };
    let span = tracing::info_span!("admission", trainjob = %format!("{}/{}", req.namespace.as_deref().unwrap_or(""), req.name));
    let runtime = runtimes.lookup(hub, &req).instrument(span.clone()).await;
    let _in = span.enter();
    let response = answer(&req, runtime);
    if !response.allowed {
        tracing::info!(message = %response.result.message, "denied");
    }
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => reply(StatusCode::OK, body),
        Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, e.to_string().into_bytes()),
    }
}

/// The TLS configuration from a PEM certificate chain and private key (a `kubernetes.io/tls`
/// Secret's `tls.crt` and `tls.key`, mounted).
pub fn tls(cert: &std::path::Path, key: &std::path::Path) -> Result<tokio_rustls::rustls::ServerConfig, WebhookError> {
    Ok(kube_shell::serve::tls(cert, key, None)?)
}

fn plain(code: StatusCode, text: &'static str) -> Response<kube_shell::serve::Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = code;
    r
}

/// Serves reviews at [`PATH`] over TLS until the process ends.
pub async fn serve(addr: SocketAddr, tls: tokio_rustls::rustls::ServerConfig, hub: Client) -> Result<(), WebhookError> {
    let listener = kube_shell::serve::bind(addr).await?;
    tracing::info!(%addr, path = PATH, "serving TrainJob admission");
    // Dropped (the watches stopped) only when serving ends.
    let mut watches = kube_shell::watch::Watches::new();
    let runtimes = Runtimes::watch(&hub, &mut watches);
    let handler: kube_shell::serve::Handler = Arc::new(move |req: Request<hyper::body::Incoming>| {
        let (hub, runtimes) = (hub.clone(), runtimes.clone());
        Box::pin(async move {
            if req.uri().path() != PATH {
                return plain(StatusCode::NOT_FOUND, "not found");
            }
            // A declared length over the limit is refused before any of the body is read: a
            // client waiting for `100 Continue` then sends nothing and reads the answer, where
            // reading part of the body and closing could reset the connection under it.
            let declared = req.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
            if declared.is_some_and(|n: u64| n > MAX_REVIEW_BYTES as u64) {
                return plain(StatusCode::PAYLOAD_TOO_LARGE, "review too large");
            }
            let body = match Limited::new(req.into_body(), MAX_REVIEW_BYTES).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "review too large"),
            };
            review(&hub, &runtimes, &body).await.map(|b| b.boxed())
        })
    });
    kube_shell::serve::serve(listener, Some(Arc::new(tls)), handler).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use kube::api::PostParams;
    use kube::runtime::reflector;
    use serde_json::json;

    use super::*;

    const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream/trainer");

    fn request(runtime: &str) -> AdmissionRequest<DynamicObject> {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "r1", "operation": "CREATE", "name": "t", "namespace": "default",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "userInfo": {"username": "alice"}, "dryRun": false,
            "object": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "t", "namespace": "default"},
                "spec": {"runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime"}}}}}))
        .expect("review");
        review.try_into().expect("request")
    }

    fn runtime(name: &str) -> ClusterTrainingRuntime {
        serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name}, "spec": {"template": {"spec": {"replicatedJobs": []}}}}))
        .expect("runtime")
    }

    fn named(lookup: Lookup) -> Option<String> {
        match lookup.expect("looked up") {
            Some(Runtime::Cluster(rt)) => rt.metadata.name,
            other => panic!("not a ClusterTrainingRuntime: {other:?}"),
        }
    }

    /// A review reads the runtime from the cache when the cache has it, and from the hub when
    /// it does not (made a moment ago): the hub alone has `fresh`, the cache alone `cached`.
    #[tokio::test]
    async fn a_review_reads_its_runtime_from_the_cache_and_asks_the_hub_on_a_miss() {
        let server = kube_mem::ApiServer::start().await.expect("hub");
        let hub = server.client_as("webhook").expect("client");
        let crd = input_limits::yaml::from_str(
            &std::fs::read_to_string(format!("{UPSTREAM}/trainer.kubeflow.org_clustertrainingruntimes.yaml"))
                .expect("crd"),
        )
        .expect("yaml");
        Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(
            hub.clone(),
        )
        .create(&PostParams::default(), &crd)
        .await
        .expect("crd created");
        Api::<ClusterTrainingRuntime>::all(hub.clone())
            .create(&PostParams::default(), &runtime("fresh"))
            .await
            .expect("runtime created");
        let (cluster, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(runtime("cached")));
        let runtimes = Runtimes { namespaced: reflector::store().0, cluster };

        server.faults().record_accesses();
        assert_eq!(named(runtimes.lookup(&hub, &request("cached")).await).as_deref(), Some("cached"));
        let asked = |verb: &str| server.faults().accesses().iter().filter(|a| a.verb == verb).count();
        assert_eq!(asked("get"), 0, "a cached runtime is not read from the hub");
        assert_eq!(named(runtimes.lookup(&hub, &request("fresh")).await).as_deref(), Some("fresh"));
        assert_eq!(asked("get"), 1, "a runtime the cache lacks is read from the hub");
        assert!(runtimes.lookup(&hub, &request("nowhere")).await.expect("looked up").is_none());
    }
}
