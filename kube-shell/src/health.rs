//! `/healthz`, `/readyz` and `/metrics` (OpenMetrics text) for a controller process.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;

fn answer(req: &Request<hyper::body::Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let (code, content_type, body) = match req.uri().path() {
        "/healthz" | "/readyz" | "/livez" => (StatusCode::OK, "text/plain", "ok".to_string()),
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

pub async fn serve(addr: SocketAddr, registry: Arc<Registry>) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot serve health and metrics endpoints");
            return;
        }
    };
    while let Ok((stream, _)) = listener.accept().await {
        let registry = registry.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let r = answer(&req, &registry);
                async move { Ok::<_, std::convert::Infallible>(r) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}
