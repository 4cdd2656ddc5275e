//! What more than one of the CLI's test binaries needs.

use std::io::{Read, Write};

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
