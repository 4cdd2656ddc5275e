//! What more than one of the CLI's test binaries needs.
// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::Path;

/// A test's scratch directory (`$TMPDIR/stowage-NAME-XXXXXX`), removed when dropped, whether
/// the test passed or not; read as the `Path` it is.
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    pub fn new(name: &str) -> Self {
        Scratch(tempfile::Builder::new().prefix(&format!("stowage-{name}-")).tempdir().expect("scratch dir"))
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

/// `url`'s body (`http://HOST:PORT/PATH`), with the standard library alone (HTTP/1.0: no
/// chunked answers); empty when it cannot be had.
pub fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let Ok(mut stream) = std::net::TcpStream::connect(host) else { return String::new() };
    let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let mut response = String::new();
    if stream.write_all(request.as_bytes()).is_err() || stream.read_to_string(&mut response).is_err() {
        return String::new();
    }
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}
