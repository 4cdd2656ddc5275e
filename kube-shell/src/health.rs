//! `/healthz`, `/readyz` and `/metrics` (OpenMetrics text) for a controller process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;

use crate::listen::{Accepted, Limits, Listener};

/// Whether the controller is ready: its caches have synced. Cloned into the controller, which
/// sets it; `/readyz` answers 503 until then.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn answer(path: &str, registry: &Registry, ready: &Readiness) -> Response<Full<Bytes>> {
    let (code, content_type, body) = match path {
        "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok".to_string()),
        "/readyz" if ready.is_ready() => (StatusCode::OK, "text/plain", "ok".to_string()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", "caches not synced yet".to_string()),
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => (StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", text),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, "text/plain", e.to_string()),
            }
        }
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found".to_string()),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert("content-type", v);
    }
    r
}

pub async fn serve(addr: SocketAddr, registry: Arc<Registry>, ready: Readiness) {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => serve_on(listener, registry, ready).await,
        Err(e) => tracing::error!(%addr, error = %e, "cannot serve health and metrics endpoints"),
    }
}

/// [`serve`] on a listener already bound (the caller reports a bind error as its own); within
/// [`Limits::HEALTH`] (see [`crate::listen`]).
pub async fn serve_on(listener: tokio::net::TcpListener, registry: Arc<Registry>, ready: Readiness) {
    let listener = Listener::new(listener, Limits::HEALTH);
    loop {
        let Accepted { stream, permit } = listener.accept().await;
        let (registry, ready) = (registry.clone(), ready.clone());
        let http = listener.http1();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let r = answer(req.uri().path(), &registry, &ready);
                async move { Ok::<_, std::convert::Infallible>(r) }
            });
            let _ = http.serve_connection(TokioIo::new(stream), svc).await;
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_waits_for_the_caches_and_healthz_does_not() {
        let (registry, ready) = (Registry::default(), Readiness::default());
        assert_eq!(answer("/readyz", &registry, &ready).status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer("/healthz", &registry, &ready).status(), StatusCode::OK);
        ready.set();
        assert_eq!(answer("/readyz", &registry, &ready).status(), StatusCode::OK);
        assert_eq!(answer("/metrics", &registry, &ready).status(), StatusCode::OK);
        assert_eq!(answer("/nope", &registry, &ready).status(), StatusCode::NOT_FOUND);
    }
}
