//! `/healthz` and `/readyz` for the dispatcher and the agent: the process is up and serving.
//! (Metrics on `/metrics` come with the observability work.)

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

async fn answer(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let (code, body) = match req.uri().path() {
        "/healthz" | "/readyz" | "/livez" => (StatusCode::OK, "ok"),
        _ => (StatusCode::NOT_FOUND, "not found"),
    };
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = code;
    Ok(r)
}

pub async fn serve(addr: SocketAddr) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot serve health endpoints");
            return;
        }
    };
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}
