//! The HTTP face: routing Kubernetes REST paths to the store, watches as streams of JSON lines,
//! errors as Status objects, and the fault hooks applied before each request.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::auth::{Requester, UserInfo};
use super::managed;
use super::patch;
use super::protobuf;
use super::rbac;
use super::resources::{Discovery, ResourceType};
use super::selectors::Selector;
use super::status::ApiError;
use super::storage::{Event, EventType, Signal};
use super::store::{ApplyOptions, Part, WriteOptions};
use super::table;
use super::view::{self, ReadView};
use super::{Access, Shared, Store};

/// The largest request body accepted, as the real server's default (3 MiB).
pub const MAX_BODY_BYTES: usize = input_limits::MAX_BODY_BYTES;
/// How often a watch that asked for bookmarks gets one.
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

pub type Body = BoxBody<Bytes, Infallible>;

/// A request's body as the handler reads it: a connection's (`hyper::body::Incoming`) or an
/// in-process client's ([`crate::local`]), boxed so the handler is written once for both.
pub type RequestBody = BoxBody<Bytes, BodyError>;

/// A request's body broke off (the handler answers that it is too large, whatever the cause).
#[derive(Debug, thiserror::Error)]
#[error("the request's body broke off: {0}")]
pub struct BodyError(pub String);

fn json_response(code: u16, v: &Value) -> Response<Body> {
    bytes_response(code, Bytes::from(v.to_string()))
}

/// An object's answer, `obj` as a client of `rt`'s version sees it: the JSON the store wrote
/// for it once when `obj` is the stored object (not a dry run's copy) in that version, as most
/// writes' answers are; else written here.
fn object_response(code: u16, view: ReadView<'_>, rt: &ResourceType, obj: &Arc<Value>) -> Response<Body> {
    let stored = view.stored(rt, view::meta_str(obj, "namespace"), view::meta_str(obj, "name").unwrap_or(""));
    match stored {
        Some(s) if Arc::ptr_eq(&s.object, obj) && view::in_version(rt, obj) => bytes_response(code, s.json.clone()),
        _ => json_response(code, obj),
    }
}

fn bytes_response(code: u16, json: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(json).boxed());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status());
    if e.code == 429 {
        r.headers_mut().insert("retry-after", hyper::header::HeaderValue::from_static("1"));
    }
    r
}

/// The query's parameters, decoded (selectors carry `=`, `,`, `!`, spaces and parentheses).
fn query(req: &Request<RequestBody>) -> BTreeMap<String, String> {
    form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()).into_owned().collect()
}

/// A resource request, routed.
struct Target {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    part: Part,
}

enum Route {
    Json(Value),
    Resource(Box<Target>),
    /// `pods/{name}/log`: not an object, a stream of text.
    PodLog {
        namespace: String,
        name: String,
    },
}

fn route(shared: &Shared, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
    let disc = Discovery(&store.types);
    let not_found = || ApiError::not_found("path", path);
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api"] => return Ok(Route::Json(disc.core_versions())),
        ["apis"] => return Ok(Route::Json(disc.group_list())),
        ["api", v] => return disc.resource_list("", v).map(Route::Json).ok_or_else(not_found),
        ["apis", g] => return disc.group(g).map(Route::Json).ok_or_else(not_found),
        ["apis", g, v] => return disc.resource_list(g, v).map(Route::Json).ok_or_else(not_found),
        ["version"] => {
            return Ok(Route::Json(
                json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-stowage", "platform": "linux/amd64"}),
            ));
        }
        ["openapi", "v2"] => {
            return Ok(Route::Json(
                json!({"swagger": "2.0", "info": {"title": "stowage-test-apiserver", "version": "v1.33.0"}, "paths": {}, "definitions": {}}),
            ));
        }
        ["openapi", "v3"] => return Ok(Route::Json(json!({"paths": {}}))),
        ["healthz"] | ["readyz"] | ["livez"] => return Ok(Route::Json(Value::String("ok".into()))),
        ["api", "v1", "namespaces", ns, "pods", name, "log"] => {
            return Ok(Route::PodLog { namespace: ns.to_string(), name: name.to_string() });
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(not_found()),
    };
    let lookup = |plural: &str| {
        store.lookup(group, version, plural).cloned().ok_or_else(|| ApiError::not_found("resource", plural))
    };
    let target = match rest {
        ["namespaces", ns, plural] => {
            Target { rt: lookup(plural)?, namespace: Some(ns.to_string()), name: None, part: Part::Main }
        }
        ["namespaces", ns, plural, name] => Target {
            rt: lookup(plural)?,
            namespace: Some(ns.to_string()),
            name: Some(name.to_string()),
            part: Part::Main,
        },
        ["namespaces", ns, plural, name, "status"] => Target {
            rt: lookup(plural)?,
            namespace: Some(ns.to_string()),
            name: Some(name.to_string()),
            part: Part::Status,
        },
        [plural] => Target { rt: lookup(plural)?, namespace: None, name: None, part: Part::Main },
        [plural, name] => {
            Target { rt: lookup(plural)?, namespace: None, name: Some(name.to_string()), part: Part::Main }
        }
        [plural, name, "status"] => {
            Target { rt: lookup(plural)?, namespace: None, name: Some(name.to_string()), part: Part::Status }
        }
        _ => return Err(not_found()),
    };
    if target.part == Part::Status && !target.rt.status_subresource {
        return Err(ApiError::not_found("subresource", "status"));
    }
    if target.namespace.is_some() && !target.rt.namespaced {
        return Err(ApiError::not_found(&target.rt.plural, target.name.as_deref().unwrap_or("")));
    }
    Ok(Route::Resource(Box::new(target)))
}

async fn read_body(body: RequestBody) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
    limited.collect().await.map(|c| c.to_bytes()).map_err(|_| ApiError::too_large(MAX_BODY_BYTES))
}

/// Built-in kinds in Kubernetes' protobuf encoding, as client-go sends them.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn parse_body(bytes: &[u8], content_type: &str) -> Result<Value, ApiError> {
    let v: Value = if content_type.starts_with(PROTOBUF) {
        protobuf::decode(bytes).map_err(|e| match e {
            protobuf::ProtobufError::UnknownKind { .. } => ApiError::unsupported_media_type(content_type),
            e => ApiError::bad_request(format!("the body is not a valid protobuf object: {}", error_text(&e))),
        })?
    } else if content_type.contains("yaml") {
        // JSON is YAML, and what clients send as YAML mostly is JSON: kube-rs and client-go send
        // server-side apply's JSON body as `application/apply-patch+yaml`. Read by the JSON
        // parser it costs a tenth of the YAML one (which was 3% of a burst's CPU); anything it
        // refuses (a flow mapping such as `{a: 1}` is YAML, not JSON) is read as YAML.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
            && let Ok(v) = serde_json::from_slice(bytes)
        {
            return Ok(v);
        }
        // Within the YAML budget: an alias bomb or deep nesting is a 400, not the process's memory.
        input_limits::yaml::from_slice(bytes).map_err(|e| {
            let at = e.line.map(|l| format!("line {l}: ")).unwrap_or_default();
            ApiError::bad_request(format!("the body is not valid YAML: {at}{e}"))
        })?
    } else {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?
    };
    Ok(v)
}

/// An error and its causes, one line.
fn error_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// The bearer token a client sent: who it is, for fault hooks and the access log.
fn token(req: &Request<RequestBody>) -> String {
    req.headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string()
}

/// Records a request in the access log (when a test records it) and asks the authorizer: a
/// refusal is the client's answer, 403 in kube-apiserver's words.
fn authorize(shared: &Shared, user: &UserInfo, request: rbac::Request<'_>) -> Result<(), ApiError> {
    if !rbac_on(shared)? {
        record(shared, request);
        return Ok(());
    }
    let store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
    authorize_in(shared, &store, user, request)
}

/// [`authorize`], for a request that holds the store's lock already.
fn authorize_in(shared: &Shared, store: &Store, user: &UserInfo, request: rbac::Request<'_>) -> Result<(), ApiError> {
    record(shared, request);
    if !rbac_on(shared)? || rbac::allows(store, user, request) { Ok(()) } else { Err(rbac::forbidden(user, request)) }
}

fn rbac_on(shared: &Shared) -> Result<bool, ApiError> {
    let mode = *shared.authorization.lock().map_err(|_| ApiError::internal("authorizer poisoned"))?;
    Ok(mode == rbac::Authorization::Rbac)
}

fn record(shared: &Shared, request: rbac::Request<'_>) {
    if let rbac::Request::Resource(a) = request {
        shared.faults.record(|| a.clone());
    }
}

/// The request's client is cut off: the connection is dropped unanswered.
#[derive(Debug)]
pub struct Partitioned;

impl std::fmt::Display for Partitioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client partitioned from this server")
    }
}

impl std::error::Error for Partitioned {}

/// Answers a request, or `None` when its client is cut off (see `Faults::partition_client`).
pub async fn handle(shared: Arc<Shared>, req: Request<RequestBody>) -> Option<Response<Body>> {
    let token = token(&req);
    // A request that reaches a kept-alive connection after a partition began is dropped too:
    // the connection's cut and its next request race.
    if shared.faults.is_partitioned() || (!token.is_empty() && shared.faults.is_client_cut(&token)) {
        return None;
    }
    if let Some(d) = shared.faults.latency() {
        tokio::time::sleep(d).await;
    }
    if let Some(code) = shared.faults.take_failure() {
        let e = if code == 429 { ApiError::too_many_requests() } else { ApiError::internal("injected failure") };
        return Some(error_response(&e));
    }
    let user = match shared
        .auth
        .lock()
        .map_err(|_| ApiError::internal("authenticator poisoned"))
        .and_then(|a| a.authenticate(&token))
    {
        Ok(user) => user,
        Err(e) => return Some(error_response(&e)),
    };
    Some(match serve(shared, req, token, user).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    })
}

async fn serve(
    shared: Arc<Shared>,
    req: Request<RequestBody>,
    token: String,
    user: UserInfo,
) -> Result<Response<Body>, ApiError> {
    let path = req.uri().path().to_string();
    let q = query(&req);
    let method = req.method().clone();
    let content_type =
        req.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/json").to_string();
    let as_table = req.headers().get("accept").and_then(|v| v.to_str().ok()).and_then(table::requested);
    let user_agent = req.headers().get("user-agent").and_then(|v| v.to_str().ok()).map(str::to_string);
    let include = table::Include::parse(q.get("includeObject").map(String::as_str));
    if path == "/openapi/v2" {
        authorize(&shared, &user, rbac::Request::NonResource { verb: "get", path: &path })?;
        // kubectl builds its client-side validator from this before asking (via OpenAPI v3)
        // whether the server validates fields itself, which this one does. An empty document is
        // a valid protobuf encoding; it is never consulted once server-side validation is found.
        let mut r = Response::new(Full::new(Bytes::new()).boxed());
        r.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"),
        );
        return Ok(r);
    }
    let target = match route(&shared, &path)? {
        Route::Resource(t) => *t,
        Route::Json(_) | Route::PodLog { .. } if method != Method::GET => {
            return Err(ApiError::method_not_allowed(format!("{method} is not allowed on {path}")));
        }
        Route::Json(v) => {
            authorize(&shared, &user, rbac::Request::NonResource { verb: "get", path: &path })?;
            return Ok(json_response(200, &v));
        }
        Route::PodLog { namespace, name } => {
            let access = Access {
                user: token.clone(),
                username: user.username.clone(),
                verb: "get".into(),
                group: String::new(),
                resource: "pods".into(),
                subresource: Some("log".into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
            };
            authorize(&shared, &user, rbac::Request::Resource(&access))?;
            return pod_log(shared, namespace, name, &q, req.uri().query().unwrap_or("")).await;
        }
    };
    let opts = WriteOptions {
        strict: q.get("fieldValidation").is_some_and(|v| v == "Strict"),
        dry_run: q.get("dryRun").is_some_and(|v| v == "All"),
    };
    let ns = target.namespace.as_deref();
    let rt = &target.rt;
    let is_watch = q.get("watch").and_then(|w| super::logs::query_bool(w)).unwrap_or(false);
    let access = Access {
        user: token.clone(),
        username: user.username.clone(),
        verb: match (&method, target.name.is_some()) {
            (&Method::GET, true) => "get",
            (&Method::GET, false) if is_watch => "watch",
            (&Method::GET, false) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => "unknown",
        }
        .into(),
        group: rt.group.clone(),
        resource: rt.plural.clone(),
        subresource: (target.part == Part::Status).then(|| "status".to_string()),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    };
    authorize(&shared, &user, rbac::Request::Resource(&access))?;
    if rt.group == "authentication.k8s.io" && rt.plural == "tokenreviews" {
        if method != Method::POST {
            return Err(ApiError::method_not_allowed(format!("{method} is not allowed on {path}")));
        }
        let body = parse_body(&read_body(req.into_body()).await?, &content_type)?;
        return Ok(json_response(201, &token_review(&shared, body)?));
    }
    if let Some(m) = q.get("fieldManager") {
        managed::check_manager(m)?;
    }
    // Who a write that is not an apply is recorded as, in managedFields.
    let manager = managed::manager_of(q.get("fieldManager").map(String::as_str), user_agent.as_deref());
    match (method.clone(), target.name.clone()) {
        (Method::GET, None) if is_watch => watch(shared, target, &q, token, as_table.map(|v| (v, include))),
        (Method::GET, None) => list(&shared, &target, &q, as_table.map(|v| (v, include))),
        (Method::GET, Some(name)) => {
            let store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
            let stored = store.view().stored(rt, ns, &name);
            if let (None, Some(s)) = (as_table, stored)
                && view::in_version(rt, s)
            {
                return Ok(bytes_response(200, s.json.clone()));
            }
            let obj = store.get(rt, ns, &name)?;
            Ok(json_response(
                200,
                &match as_table {
                    Some(v) => table::table(
                        rt,
                        &[obj],
                        v,
                        include,
                        json!({"resourceVersion": store.resource_version().to_string()}),
                    ),
                    None => obj,
                },
            ))
        }
        (Method::POST, None) => {
            check_content_type(&content_type, &["json", "yaml", PROTOBUF])?;
            let body = parse_body(&read_body(req.into_body()).await?, &content_type)?;
            check_kind(rt, &body)?;
            let mut store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
            let created = store.create(Requester::Manager(&user, &manager), rt, ns, body, &opts)?;
            Ok(object_response(201, store.view(), rt, &created))
        }
        (Method::PUT, Some(name)) => {
            check_content_type(&content_type, &["json", "yaml", PROTOBUF])?;
            let body = parse_body(&read_body(req.into_body()).await?, &content_type)?;
            check_kind(rt, &body)?;
            let mut store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
            let updated = store.update(Requester::Manager(&user, &manager), rt, ns, &name, body, target.part, &opts)?;
            Ok(object_response(200, store.view(), rt, &updated))
        }
        (Method::PATCH, Some(name)) => {
            let bytes = read_body(req.into_body()).await?;
            let mut store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
            if content_type.starts_with("application/apply-patch") {
                let applied = parse_body(&bytes, "yaml")?;
                check_kind(rt, &applied)?;
                let manager = q
                    .get("fieldManager")
                    .cloned()
                    .ok_or_else(|| ApiError::bad_request("fieldManager is required for apply patch"))?;
                let force = q.get("force").and_then(|f| super::logs::query_bool(f)).unwrap_or(false);
                // Apply that creates is also authorized as a create, as the real server does:
                // of this name, so a role's resourceNames can grant it (patch.go's
                // createAuthorizerAttributes).
                if target.part == Part::Main && store.view().peek(rt, ns, &name).is_none() {
                    let create = Access { verb: "create".into(), subresource: None, ..access };
                    authorize_in(&shared, &store, &user, rbac::Request::Resource(&create))?;
                }
                let apply = ApplyOptions { manager: &manager, force };
                let (obj, created) =
                    store.apply(Requester::User(&user), rt, ns, &name, applied, target.part, &opts, &apply)?;
                return Ok(json_response(if created { 201 } else { 200 }, &obj));
            }
            let patch_type = content_type.split(';').next().unwrap_or("");
            let Some(stored) = store.view().peek(rt, ns, &name) else {
                return Err(ApiError::not_found(&rt.display_name(), &name));
            };
            let patch_body = parse_body(&bytes, "json")?;
            // A JSON patch may test or move any path: it is applied to all of the object. A
            // merge patch, to the object without its managedFields (a merge patch replaces a
            // list whole, so the entries it is read with are those it names, or none: the
            // stored ones), and of the status, to the metadata and status alone (the write keeps
            // nothing else). See `view::patch_target`.
            let mut obj = if patch_type == "application/json-patch+json" {
                view::present(rt, stored)
            } else {
                view::patch_target(rt, stored, target.part == Part::Status)
            };
            match patch_type {
                "application/merge-patch+json" => patch::merge_patch(&mut obj, &patch_body),
                "application/json-patch+json" => patch::json_patch(&mut obj, &patch_body)?,
                "application/strategic-merge-patch+json" => patch::strategic_merge(&mut obj, &patch_body),
                other => return Err(ApiError::unsupported_media_type(other)),
            }
            let updated = store.update(Requester::Manager(&user, &manager), rt, ns, &name, obj, target.part, &opts)?;
            Ok(object_response(200, store.view(), rt, &updated))
        }
        (Method::DELETE, Some(name)) => {
            let mut store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
            Ok(json_response(200, &store.delete(Requester::User(&user), rt, ns, &name, opts.dry_run)?))
        }
        (Method::DELETE, None) => {
            let selector = Selector::parse(
                q.get("labelSelector").map(String::as_str),
                q.get("fieldSelector").map(String::as_str),
            )?;
            selector.check_fields(rt)?;
            let mut store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
            let (items, _) = store.list(rt, ns, &|o| selector.matches(o), None, None);
            for o in &items {
                let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                let ons = o["metadata"]["namespace"].as_str().map(str::to_string);
                store.delete(Requester::User(&user), rt, ons.as_deref(), &name, opts.dry_run)?;
            }
            Ok(json_response(
                200,
                &json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": {}, "items": items}),
            ))
        }
        (m, _) => Err(ApiError::method_not_allowed(format!("{m} is not allowed on {path}"))),
    }
}

/// A TokenReview answered, as the API server's authenticator answers it for webhooks and
/// proxies that authenticate their callers by the cluster's tokens.
fn token_review(shared: &Shared, mut review: Value) -> Result<Value, ApiError> {
    let token = review["spec"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::invalid("TokenReview", "", vec![("spec.token".into(), "Required value".into())]))?;
    let user = shared.auth.lock().map_err(|_| ApiError::internal("authenticator poisoned"))?.review(token);
    review["status"] = match user {
        Some(u) => json!({"authenticated": true, "user": {"username": u.username, "groups": u.groups},
                          "audiences": review["spec"]["audiences"].clone()}),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    review["apiVersion"] = "authentication.k8s.io/v1".into();
    review["kind"] = "TokenReview".into();
    Ok(review)
}

fn check_content_type(ct: &str, accepted: &[&str]) -> Result<(), ApiError> {
    if accepted.iter().any(|a| ct.contains(a)) { Ok(()) } else { Err(ApiError::unsupported_media_type(ct)) }
}

fn check_kind(rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or(&rt.kind);
    if kind != rt.kind {
        return Err(ApiError::bad_request(format!("the body is a {kind}, the URL is for {}", rt.kind)));
    }
    Ok(())
}

/// How a read is answered as a Table, when the client asked for one.
type AsTable = Option<(table::TableVersion, table::Include)>;

fn list(
    shared: &Shared,
    t: &Target,
    q: &BTreeMap<String, String>,
    as_table: AsTable,
) -> Result<Response<Body>, ApiError> {
    let selector =
        Selector::parse(q.get("labelSelector").map(String::as_str), q.get("fieldSelector").map(String::as_str))?;
    selector.check_fields(&t.rt)?;
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
    let cont = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            let (ns, name) = c.split_once('/').ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
            Some((ns.to_string(), name.to_string()))
        }
        None => None,
    };
    let store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
    let (items, next) = store.list_stored(&t.rt, t.namespace.as_deref(), &|o| selector.matches(o), limit, cont);
    let mut meta = json!({"resourceVersion": store.resource_version().to_string()});
    if let Some((ns, name)) = next {
        meta["continue"] = format!("{ns}/{name}").into();
    }
    if let Some((version, include)) = as_table {
        let items: Vec<Value> = items.into_iter().map(|o| view::present(&t.rt, o)).collect();
        return Ok(json_response(200, &table::table(&t.rt, &items, version, include, meta)));
    }
    // The list written around its items' JSON as the store wrote it, where they are stored in
    // the client's version (most lists); the others presented and written here.
    let head = json!({"kind": format!("{}List", t.rt.kind), "apiVersion": t.rt.api_version(), "metadata": meta});
    let mut body = serde_json::to_vec(&head).unwrap_or_default();
    body.pop(); // the closing brace: the items follow
    body.extend_from_slice(b",\"items\":[");
    for (i, o) in items.into_iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        if view::in_version(&t.rt, o) {
            body.extend_from_slice(&o.json);
        } else {
            // Writing a Value into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut body, &view::present(&t.rt, o));
        }
    }
    body.extend_from_slice(b"]}");
    Ok(bytes_response(200, Bytes::from(body)))
}

/// `{"type":…,"object":…}` and a newline, written straight from the borrowed object.
fn watch_line(kind: &str, object: &Value) -> Bytes {
    // Writing a Value into a Vec cannot fail.
    watch_line_raw(kind, &serde_json::to_vec(object).unwrap_or_default())
}

/// [`watch_line`] around an object already written as JSON.
fn watch_line_raw(kind: &str, json: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(json.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(json);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn watch(
    shared: Arc<Shared>,
    t: Target,
    q: &BTreeMap<String, String>,
    user: String,
    as_table: AsTable,
) -> Result<Response<Body>, ApiError> {
    let selector =
        Selector::parse(q.get("labelSelector").map(String::as_str), q.get("fieldSelector").map(String::as_str))?;
    selector.check_fields(&t.rt)?;
    let bookmarks = q.get("allowWatchBookmarks").and_then(|b| super::logs::query_bool(b)).unwrap_or(false);
    // Clamped to MAX_WATCH_TIMEOUT_S: `18446744073709551615` used to overflow the deadline and
    // panic the handler.
    let timeout = input_limits::watch_timeout(q.get("timeoutSeconds").map(String::as_str));
    let from = q.get("resourceVersion").and_then(|r| r.parse::<u64>().ok()).filter(|r| *r > 0);
    let (backlog, mut rx, start_rv) = {
        let store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
        let backlog: Vec<Arc<Event>> = match from {
            Some(rv) => store.storage.since(&t.rt, rv)?,
            // "Most recent": the current state as ADDED events, then changes.
            None => store
                .list(&t.rt, t.namespace.as_deref(), &|_| true, None, None)
                .0
                .into_iter()
                .map(|o| Arc::new(Event::listed(o)))
                .collect(),
        };
        (backlog, store.storage.tx.subscribe(), store.resource_version())
    };
    let (tx, mut out_rx) = tokio::sync::mpsc::channel::<Bytes>(256);
    let api_version = t.rt.api_version();
    let kind = t.rt.kind.clone();
    let ns = t.namespace.clone();
    let store_key = (t.rt.group.clone(), t.rt.plural.clone());
    let keep = move |o: &Value| {
        ns.as_deref().is_none_or(|n| o["metadata"]["namespace"].as_str() == Some(n)) && selector.matches(o)
    };
    // An event's line: the object's JSON as the store wrote it once, where this watch's version
    // is the stored one (most watches); otherwise, or as a table, the object copied and presented.
    let line = {
        let (api_version, kind, rt) = (api_version.clone(), kind.clone(), t.rt.clone());
        move |k: EventType, e: &Event| -> Bytes {
            let stored_as_watched = e.object.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str())
                && e.object.get("kind").and_then(Value::as_str) == Some(kind.as_str());
            if as_table.is_none() && stored_as_watched && !e.json.is_empty() {
                return watch_line_raw(k.as_str(), &e.json);
            }
            let mut o = Value::clone(&e.object);
            o["apiVersion"] = api_version.clone().into();
            o["kind"] = kind.clone().into();
            let o = match as_table {
                // One row per event, with the columns each time: kubectl prints the header once,
                // for as long as the columns stay the same.
                Some((version, include)) => {
                    let rv = o.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
                    table::table(&rt, &[o], version, include, json!({"resourceVersion": rv}))
                }
                None => o,
            };
            watch_line(k.as_str(), &o)
        }
    };
    let faults = shared.clone();
    // A change that makes an object start or stop matching is ADDED or DELETED for this watch,
    // as the real server does.
    let translate = move |k: EventType, o: &Value, previous: Option<&Value>| -> Option<EventType> {
        match (k, previous.is_some_and(&keep), keep(o)) {
            (EventType::Modified, true, true) => Some(EventType::Modified),
            (EventType::Modified, false, true) => Some(EventType::Added),
            (EventType::Modified, true, false) => Some(EventType::Deleted),
            (_, _, false) => None,
            (k, _, true) => Some(k),
        }
    };
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        for e in backlog {
            if let Some(k) = translate(e.kind, &e.object, e.previous.as_deref())
                && tx.send(line(k, &e)).await.is_err()
            {
                return;
            }
        }
        let mut last_rv = start_rv;
        // The first bookmark one period in, not at once: a real server sends none before its
        // first period (about a minute there) either.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tick.tick() => {
                    if faults.faults.is_partitioned() || faults.faults.is_client_cut(&user) {
                        return;
                    }
                    if bookmarks {
                        let b = json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": last_rv.to_string()}});
                        if tx.send(watch_line("BOOKMARK", &b)).await.is_err() { return; }
                    }
                }
                msg = rx.recv() => match msg {
                    Ok(Signal::Event(e)) => {
                        if e.store != store_key || e.rv <= last_rv { continue; }
                        last_rv = e.rv;
                        if let Some(k) = translate(e.kind, &e.object, e.previous.as_deref())
                            && tx.send(line(k, &e)).await.is_err()
                        {
                            return;
                        }
                    }
                    Ok(Signal::Expire) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let gone = ApiError::gone("the watch's resource version is too old; relist").to_status();
                        let _ = tx.send(watch_line("ERROR", &gone)).await;
                        return;
                    }
                    Err(_) => return,
                }
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| {
        out_rx.poll_recv(cx).map(|b| b.map(|b| Ok::<_, Infallible>(Frame::data(b))))
    });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    Ok(r)
}

fn text_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut().insert("content-type", hyper::header::HeaderValue::from_static("text/plain"));
    r
}

/// How often a followed log is read again.
const LOG_POLL: Duration = Duration::from_millis(100);
/// How long the server waits to reach a kubelet before it answers 500.
const KUBELET_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `GET pods/{name}/log`: from the kubelet endpoint the pod's Node names (proxied, as the real
/// API server does), else from this server's own logs (the in-process kubelet's). A pod not yet
/// bound to a Node has no log and gets an empty body, as on a real server.
async fn pod_log(
    shared: Arc<Shared>,
    namespace: String,
    name: String,
    q: &BTreeMap<String, String>,
    raw_query: &str,
) -> Result<Response<Body>, ApiError> {
    use super::logs::{self, LogKey, LogOptions};
    let opts = LogOptions::parse(q)?;
    let (pod, container, kubelet) = {
        let store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
        let pods = store.lookup("", "v1", "pods").cloned().ok_or_else(|| ApiError::not_found("resource", "pods"))?;
        let pod = store.get(&pods, Some(&namespace), &name)?;
        let container = logs::container_of(&pod, opts.container.as_deref())?;
        let node = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()).map(str::to_string);
        let Some(node) = node else { return Ok(text_response(Full::new(Bytes::new()).boxed())) };
        let kubelet = store
            .lookup("", "v1", "nodes")
            .and_then(|nodes| store.get(nodes, None, &node).ok())
            .and_then(|n| kubelet_endpoint(&n));
        (pod, container, kubelet)
    };
    if let Some(addr) = kubelet {
        let path = format!("/containerLogs/{namespace}/{name}/{container}?{raw_query}");
        return proxy_to_kubelet(&addr, &path).await;
    }
    if opts.previous {
        return Err(ApiError::bad_request(format!(
            "previous terminated container \"{container}\" in pod \"{name}\" not found"
        )));
    }
    if pod["status"]["phase"] == "Pending" {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    }
    let key = LogKey { namespace, pod: name, container };
    let (lines, mut next, done) = read_log(&shared, &key, 0)?;
    let now = super::time::unix_seconds();
    let mut budget = opts.limit_bytes.unwrap_or(u64::MAX);
    let mut take = move |text: String| -> Option<Bytes> {
        let mut b = text.into_bytes();
        b.truncate(b.len().min(budget.min(usize::MAX as u64) as usize));
        budget -= b.len() as u64;
        (!b.is_empty()).then(|| Bytes::from(b))
    };
    let first = take(opts.render(opts.first(&lines, now))).unwrap_or_default();
    if !opts.follow || done || opts.limit_bytes.is_some_and(|l| first.len() as u64 >= l) {
        return Ok(text_response(Full::new(first).boxed()));
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        if !first.is_empty() && tx.send(first).await.is_err() {
            return;
        }
        loop {
            tokio::time::sleep(LOG_POLL).await;
            if shared.faults.is_partitioned() || tx.is_closed() {
                return;
            }
            let Ok((lines, after, done)) = read_log(&shared, &key, next) else { return };
            next = after;
            if !lines.is_empty() {
                let Some(b) = take(opts.render(&lines)) else { return };
                if tx.send(b).await.is_err() {
                    return;
                }
            }
            if done {
                return;
            }
        }
    });
    let stream =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|b| b.map(|b| Ok::<_, Infallible>(Frame::data(b)))));
    Ok(text_response(StreamBody::new(stream).boxed()))
}

/// A container's log lines from sequence number `from` on, the number after them, and whether
/// the pod has finished (or is gone), which ends a follow.
fn read_log(
    shared: &Shared,
    key: &super::logs::LogKey,
    from: u64,
) -> Result<(Vec<super::logs::Line>, u64, bool), ApiError> {
    let store = shared.store.lock().map_err(|_| ApiError::internal("store poisoned"))?;
    let (lines, next) = store.logs.read(key, from);
    let pod = store.lookup("", "v1", "pods").and_then(|rt| store.get(rt, Some(&key.namespace), &key.pod).ok());
    Ok((lines, next, pod.is_none_or(|p| super::logs::finished(&p))))
}

/// `host:port` of the kubelet a Node names (`status.daemonEndpoints.kubeletEndpoint.Port` at
/// its first address, in the API server's default preference), if it names one.
fn kubelet_endpoint(node: &Value) -> Option<String> {
    let port =
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().filter(|p| (1..=65535).contains(p))?;
    let addresses = node["status"]["addresses"].as_array()?;
    let address = ["Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP"].iter().find_map(|t| {
        addresses.iter().find(|a| a["type"] == *t).and_then(|a| a["address"].as_str()).filter(|a| !a.is_empty())
    })?;
    Some(if address.contains(':') { format!("[{address}]:{port}") } else { format!("{address}:{port}") })
}

/// Streams a kubelet's answer back as the API server's, status code and all. Plain HTTP: the
/// real server dials kubelets over HTTPS (see docs/testing.md).
async fn proxy_to_kubelet(addr: &str, path: &str) -> Result<Response<Body>, ApiError> {
    let failed = |e: &dyn std::fmt::Display| ApiError::internal(format!("Get \"http://{addr}{path}\": {e}"));
    let stream = tokio::time::timeout(KUBELET_CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| failed(&"dial tcp: i/o timeout"))?
        .map_err(|e| failed(&e))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| failed(&e))?;
    tokio::spawn(conn);
    let req =
        Request::get(path).header("host", addr).body(http_body_util::Empty::<Bytes>::new()).map_err(|e| failed(&e))?;
    let resp = sender.send_request(req).await.map_err(|e| failed(&e))?;
    let (parts, body) = resp.into_parts();
    // A kubelet that drops the connection ends the stream, as a closed log does.
    let frames = futures::stream::unfold(body, |mut body| async move {
        match body.frame().await {
            Some(Ok(frame)) => Some((Ok::<_, Infallible>(frame), body)),
            _ => None,
        }
    });
    let mut r = Response::new(StreamBody::new(frames).boxed());
    *r.status_mut() = parts.status;
    if let Some(ct) = parts.headers.get("content-type") {
        r.headers_mut().insert("content-type", ct.clone());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPLY: &str = "application/apply-patch+yaml";

    /// JSON sent as YAML (what kube-rs and client-go send for server-side apply), a YAML flow
    /// mapping that is not JSON, and block YAML all read as the same object.
    #[test]
    fn a_yaml_body_reads_the_same_whether_written_as_json_or_yaml() {
        let want = serde_json::json!({"metadata": {"name": "a", "labels": {"on": "yes"}}, "n": 1});
        for body in [
            r#" {"metadata": {"name": "a", "labels": {"on": "yes"}}, "n": 1}"#,
            "{metadata: {name: a, labels: {on: yes}}, n: 1}",
            "metadata:\n  name: a\n  labels:\n    on: yes\nn: 1\n",
        ] {
            assert_eq!(parse_body(body.as_bytes(), APPLY).expect(body), want, "{body}");
        }
    }

    /// What neither reader takes is refused by the YAML one, in its words.
    #[test]
    fn a_yaml_body_neither_reader_takes_is_refused_as_yaml() {
        let e = parse_body(b"{\"a\": [1,", APPLY).expect_err("unterminated");
        assert_eq!(e.code, 400);
        assert!(e.message.contains("not valid YAML"), "{}", e.message);
    }
}
