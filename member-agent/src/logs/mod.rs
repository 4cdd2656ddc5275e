//! Pod logs from the hub, the virtual-kubelet way, in pull mode: the hub's API server reads a
//! mirrored pod's log from the kubelet endpoint its member's virtual Node names, which is the
//! [`relay`] (on the hub); the relay hands the request to that member's agent over a connection
//! the agent made (the [`tunnel`]), and streams back what the agent reads from its member's
//! `pods/{name}/log`. The hub never holds member credentials, and a member is never dialled.
//!
//! The tunnel is plain HTTP requests from the agent, so it goes through anything kube-rs'
//! client goes through (TLS with the relay's CA, proxies): a long poll for the next request
//! (`GET /tunnel/requests`), then the log in chunks (`POST /tunnel/responses/{id}`), each
//! answered only once the relay has passed it on, which is the back-pressure of a slow reader.
//! The relay knows an agent by its hub token (a TokenReview): the agent of member X may answer
//! only for X's pods.

pub mod relay;
pub mod tunnel;

use serde::{Deserialize, Serialize};

/// The relay's long poll for a member's next log request.
pub const REQUESTS_PATH: &str = "/tunnel/requests";
/// Where an agent posts a request's log, `{REQUESTS_PATH}/{id}?status=…&end=…`.
pub const RESPONSES_PATH: &str = "/tunnel/responses";
/// The most one posted chunk of a log holds.
pub const MAX_CHUNK_BYTES: usize = 64 << 10;

/// One log to read, as the hub's API server asked the relay (kubelet's `containerLogs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRequest {
    pub id: u64,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The options, already checked by the hub's API server: follow, tailLines, limitBytes,
    /// sinceSeconds, sinceTime, timestamps, previous.
    pub options: Vec<(String, String)>,
}

/// The log options passed on: the ones `PodLogOptions` has, nothing else.
pub const LOG_OPTIONS: [&str; 7] =
    ["follow", "tailLines", "limitBytes", "sinceSeconds", "sinceTime", "timestamps", "previous"];

/// A DNS label or subdomain (namespace, pod or container name): what may go into a path.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
}

/// `k=v&…`, each part form-encoded.
pub fn encode_query(pairs: &[(String, String)]) -> String {
    form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish()
}

/// A query string's pairs, decoded.
pub fn decode_query(q: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_bytes()).into_owned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_survives_encoding_and_names_keep_paths_whole() {
        let pairs =
            vec![("sinceTime".to_string(), "2026-11-26T07:00:00Z".to_string()), ("follow".into(), "true".into())];
        assert_eq!(decode_query(&encode_query(&pairs)), pairs);
        assert_eq!(decode_query("&tailLines=3&x=%2"), [("tailLines".into(), "3".into()), ("x".into(), "%2".into())]);
        assert_eq!(decode_query("labelSelector=a%3Db+c"), [("labelSelector".into(), "a=b c".into())]);
        assert!(is_name("t1-node-0-0.x"));
        for bad in ["", "../etc", "a/b", "A", "-a", "a?b"] {
            assert!(!is_name(bad), "{bad}");
        }
    }
}
