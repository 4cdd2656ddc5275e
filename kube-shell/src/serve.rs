//! The shells' own HTTP endpoints that the cluster calls (the admission webhook, the log
//! relay): a listener that speaks TLS when given a certificate (and asks callers for a client
//! certificate when given a CA, as a kubelet asks the API server), with a bounded handshake,
//! each connection its own task.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::rustls::{self, ServerConfig};

use crate::listen::{Accepted, Limits, Listener};

/// A response body: whole or streamed.
pub type Body = BoxBody<Bytes, Infallible>;
/// What answers each request.
pub type Handler = Arc<dyn Fn(Request<Incoming>) -> BoxFuture<'static, Response<Body>> + Send + Sync>;

/// The API server calls webhooks and kubelets with short timeouts; a TLS handshake slower than
/// this is not it, and holds no task.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no {what}")]
    Pem { path: String, what: &'static str },
    #[error("the TLS certificate, key and client CA")]
    Tls(#[source] rustls::Error),
    #[error("the client CA {path}")]
    ClientCa {
        path: String,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    #[error("listening on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The TLS configuration from a PEM certificate chain and private key (a `kubernetes.io/tls`
/// Secret's `tls.crt` and `tls.key`, mounted); with `client_ca`, only callers holding a
/// certificate it signed are served.
pub fn tls(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<ServerConfig, ServeError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |p: &Path| std::fs::read(p).map_err(|source| ServeError::Read { path: p.display().to_string(), source });
    let certs_in = |p: &Path, what: &'static str| -> Result<Vec<CertificateDer<'static>>, ServeError> {
        let certs: Vec<_> = CertificateDer::pem_slice_iter(&read(p)?).filter_map(Result::ok).collect();
        if certs.is_empty() {
            return Err(ServeError::Pem { path: p.display().to_string(), what });
        }
        Ok(certs)
    };
    let certs = certs_in(cert, "certificate")?;
    let key = PrivateKeyDer::from_pem_slice(&read(key)?)
        .map_err(|_| ServeError::Pem { path: key.display().to_string(), what: "private key" })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(ServeError::Tls)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs_in(ca, "CA certificate")? {
                roots.add(c).map_err(ServeError::Tls)?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|source| ServeError::ClientCa { path: ca.display().to_string(), source })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(certs, key).map_err(ServeError::Tls)
}

/// Binds `addr`, naming it in the error.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr).await.map_err(|source| ServeError::Listen { addr, source })
}

/// Answers every connection `listener` accepts with `handler`, over TLS when `tls` is given,
/// until the task is dropped; within [`Limits::ENDPOINT`] (see [`crate::listen`]).
pub async fn serve(listener: TcpListener, tls: Option<Arc<ServerConfig>>, handler: Handler) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let listener = Listener::new(listener, Limits::ENDPOINT);
    loop {
        let Accepted { stream, permit } = listener.accept().await;
        let (acceptor, handler) = (acceptor.clone(), handler.clone());
        let http = listener.http1();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(req).await) }
            });
            match acceptor {
                None => {
                    let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                }
                Some(acceptor) => {
                    // A client that fails or stalls the handshake is its own problem.
                    let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await else {
                        return;
                    };
                    let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                }
            }
            drop(permit);
        });
    }
}
