//! The bounds on everything Stowage reads from outside (files, traces, the hub's request bodies
//! and watch parameters) as named limits, the helpers that check them, and the budgeted YAML
//! reader every loader uses ([`yaml`]). A value over a limit is an error that names the limit;
//! nothing here panics, allocates in proportion to an unchecked number, or wraps around.
//!
//! Every loader and the hub depend on this crate and nothing else for it, so a limit is changed
//! in one place; docs/operations.md ("Input limits") lists them with their values.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

pub mod yaml;

/// A named bound: its constant's name (for messages and docs), its value and its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub name: &'static str,
    pub max: u64,
    pub unit: &'static str,
}

// Files.

/// A YAML file (fleet, TrainJob, runtime, Placement): far above any real one (a CRD is 1 MiB).
pub const MAX_YAML_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// A trace file: the public traces are a few MiB, Philly's whole job log about 200 MiB.
pub const MAX_TRACE_FILE_BYTES: u64 = 1024 * 1024 * 1024;

// The hub (kube-mem), as kube-apiserver's own defaults.

/// A request body: kube-apiserver's `MaxRequestBodyBytes` (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// A stored object, as JSON. etcd refuses a request over 1.5 MiB (`--max-request-bytes`), and a
/// write is the object and a few hundred bytes of key and framing: on the real testbed a
/// MemberCluster of 1,572,480 bytes of JSON was stored, and one 287 bytes larger refused with
/// `etcdserver: request is too large` (2026-12-06). 4 KiB below etcd's limit, so what the
/// in-memory hub stores, a real one does.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024 - 4 * 1024;
/// A watch without `timeoutSeconds` (or with 0): kube-apiserver's `--min-request-timeout` default.
pub const DEFAULT_WATCH_TIMEOUT_S: u64 = 1800;
/// The longest watch: twice `--min-request-timeout`, the most kube-apiserver itself picks for a
/// watch that names no timeout. A client asking more is given this; it re-watches, as it must.
pub const MAX_WATCH_TIMEOUT_S: u64 = 2 * DEFAULT_WATCH_TIMEOUT_S;
/// Events a watch can resume from; older resourceVersions get 410 Gone.
pub const WATCH_HISTORY_EVENTS: usize = 10_000;
/// Bytes (as JSON) of the events kept for watches to resume from; past it the oldest go, and a
/// watch resuming from before them gets 410 Gone, as past [`WATCH_HISTORY_EVENTS`].
pub const WATCH_HISTORY_BYTES: usize = 256 * 1024 * 1024;

/// An AdmissionReview to `stowage webhook`: the API server sends a whole object and its old copy,
/// [`MAX_BODY_BYTES`] each at most, and a little more.
pub const MAX_ADMISSION_REVIEW_BYTES: usize = 2 * MAX_BODY_BYTES + 1024 * 1024;

// Members' reports (MemberCluster status), read by the dispatcher every cycle.

/// Nodes one member may report: each becomes a host in every cycle's snapshot.
pub const MAX_MEMBER_NODES: u64 = 100_000;
/// GPUs one reported node may have.
pub const MAX_GPUS_PER_NODE: u32 = 1024;
/// Topology levels a member may report.
pub const MAX_TOPOLOGY_LEVELS: usize = 16;

// Fleets (fleet files, and members' reports of their nodes).

pub const MAX_FLEET_CLUSTERS: u64 = 1_000;
/// Nodes in a whole fleet: ten of the largest Kubernetes clusters run.
pub const MAX_FLEET_NODES: u64 = 1_000_000;
/// Topology domains (zones, blocks, racks, NVLink domains, hosts) in a whole fleet.
pub const MAX_FLEET_DOMAINS: u64 = 5 * MAX_FLEET_NODES;
/// Nodes one domain holds by its fanouts (`{rack: 8, block: 4}` is 32 per block): more than a
/// fleet may have says nothing more.
pub const MAX_FANOUT_PRODUCT: u64 = MAX_FLEET_NODES;

// Traces.

/// A time in a trace, in seconds: 2100-01-01T00:00:00Z as Unix time, so both absolute times
/// and times from the trace's start fit.
pub const MAX_TRACE_TIME_S: u64 = 4_102_444_800;
/// A job's run time in a trace: a year (the public traces' longest is under five months).
pub const MAX_TRACE_DURATION_S: u64 = 365 * 86_400;

pub const YAML_FILE_BYTES: Limit = Limit { name: "MAX_YAML_FILE_BYTES", max: MAX_YAML_FILE_BYTES, unit: "bytes" };
pub const TRACE_FILE_BYTES: Limit = Limit { name: "MAX_TRACE_FILE_BYTES", max: MAX_TRACE_FILE_BYTES, unit: "bytes" };
pub const FLEET_CLUSTERS: Limit = Limit { name: "MAX_FLEET_CLUSTERS", max: MAX_FLEET_CLUSTERS, unit: "clusters" };
pub const FLEET_NODES: Limit = Limit { name: "MAX_FLEET_NODES", max: MAX_FLEET_NODES, unit: "nodes" };
pub const FLEET_DOMAINS: Limit = Limit { name: "MAX_FLEET_DOMAINS", max: MAX_FLEET_DOMAINS, unit: "domains" };
pub const FANOUT_PRODUCT: Limit = Limit { name: "MAX_FANOUT_PRODUCT", max: MAX_FANOUT_PRODUCT, unit: "nodes" };
pub const TRACE_TIME: Limit = Limit { name: "MAX_TRACE_TIME_S", max: MAX_TRACE_TIME_S, unit: "s" };
pub const TRACE_DURATION: Limit = Limit { name: "MAX_TRACE_DURATION_S", max: MAX_TRACE_DURATION_S, unit: "s" };

/// A value over its limit. Reads `5000000000 is above the limit of 1000000 nodes
/// (MAX_FLEET_NODES)`; the caller puts the file and field before it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value} is above the limit of {} {} ({})", limit.max, limit.unit, limit.name)]
pub struct OverLimit {
    /// The value as given (a product that overflowed reads `more than 18446744073709551615`).
    pub value: String,
    pub limit: Limit,
}

impl Limit {
    fn over(self, value: impl ToString) -> OverLimit {
        OverLimit { value: value.to_string(), limit: self }
    }

    /// `value` when it is within the limit.
    pub fn check(self, value: u64) -> Result<u64, OverLimit> {
        if value <= self.max { Ok(value) } else { Err(self.over(value)) }
    }

    /// A count held in a `usize` (a list's length).
    pub fn check_len(self, len: usize) -> Result<u64, OverLimit> {
        self.check(u64::try_from(len).unwrap_or(u64::MAX))
    }

    /// A number of seconds as a trace writes it (fractions allowed): within the limit, finite
    /// and not negative. `text` is the value as written, for the message.
    pub fn check_seconds(self, value: f64, text: &str) -> Result<f64, OverLimit> {
        if value.is_finite() && value <= self.max as f64 { Ok(value) } else { Err(self.over(text)) }
    }

    /// The product of `factors`, in checked arithmetic: an error naming the limit when it is
    /// above it, however far (an overflow of `u64` included).
    pub fn product(self, factors: impl IntoIterator<Item = u64>) -> Result<u64, OverLimit> {
        let mut product: u64 = 1;
        for f in factors {
            product = match product.checked_mul(f) {
                Some(p) => p,
                None => return Err(self.over(format!("more than {}", u64::MAX))),
            };
        }
        self.check(product)
    }

    /// The sum of `terms`, in checked arithmetic, within the limit.
    pub fn sum(self, terms: impl IntoIterator<Item = u64>) -> Result<u64, OverLimit> {
        let mut sum: u64 = 0;
        for t in terms {
            sum = match sum.checked_add(t) {
                Some(s) => s,
                None => return Err(self.over(format!("more than {}", u64::MAX))),
            };
        }
        self.check(sum)
    }
}

/// A watch's length from its `timeoutSeconds`, as kube-apiserver reads it: absent, 0 or not a
/// number of seconds means the server's default; more than [`MAX_WATCH_TIMEOUT_S`] is cut to it
/// (kube-apiserver's arithmetic would overflow there; ours must not).
pub fn watch_timeout(timeout_seconds: Option<&str>) -> Duration {
    let asked = match timeout_seconds.map(|s| s.trim().parse::<u64>()) {
        Some(Ok(s)) => s,
        Some(Err(e)) if *e.kind() == std::num::IntErrorKind::PosOverflow => u64::MAX,
        _ => 0,
    };
    let s = if asked == 0 { DEFAULT_WATCH_TIMEOUT_S } else { asked.min(MAX_WATCH_TIMEOUT_S) };
    Duration::from_secs(s)
}

/// Reads a text file of at most `limit` bytes, without reading more than that: a larger file is
/// an `io::ErrorKind::FileTooLarge` error naming the limit.
pub fn read_to_string(path: &Path, limit: Limit) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(limit.max.saturating_add(1)).read_to_string(&mut text)?;
    if text.len() as u64 > limit.max {
        let problem = format!("larger than {} {} ({})", limit.max, limit.unit, limit.name);
        return Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, problem));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_themselves() {
        let e = FLEET_NODES.check(4_000_000_000).expect_err("over");
        assert_eq!(e.to_string(), "4000000000 is above the limit of 1000000 nodes (MAX_FLEET_NODES)");
        assert_eq!(FLEET_NODES.check(MAX_FLEET_NODES), Ok(MAX_FLEET_NODES));
    }

    #[test]
    fn products_and_sums_do_not_overflow() {
        assert_eq!(FANOUT_PRODUCT.product([8, 4, 2]), Ok(64));
        let e = FANOUT_PRODUCT.product([u64::from(u32::MAX); 4]).expect_err("overflows u64");
        assert!(e.to_string().starts_with("more than 18446744073709551615 is above"), "{e}");
        assert!(FANOUT_PRODUCT.product([1_000, 1_001]).is_err());
        assert!(FLEET_NODES.sum([u64::MAX, 1]).is_err());
        assert_eq!(FLEET_NODES.sum([1, 2]), Ok(3));
    }

    #[test]
    fn seconds_are_finite_and_bounded() {
        assert!(TRACE_DURATION.check_seconds(3600.5, "3600.5").is_ok());
        for (v, text) in [(1.8e19, "1.8e19"), (f64::INFINITY, "inf"), (f64::NAN, "NaN")] {
            let e = TRACE_DURATION.check_seconds(v, text).expect_err(text);
            assert_eq!(e.to_string(), format!("{text} is above the limit of 31536000 s (MAX_TRACE_DURATION_S)"));
        }
    }

    #[test]
    fn watch_timeouts_are_clamped() {
        assert_eq!(watch_timeout(None), Duration::from_secs(1800));
        assert_eq!(watch_timeout(Some("0")), Duration::from_secs(1800));
        assert_eq!(watch_timeout(Some("-5")), Duration::from_secs(1800));
        assert_eq!(watch_timeout(Some("10")), Duration::from_secs(10));
        assert_eq!(watch_timeout(Some("18446744073709551615")), Duration::from_secs(3600));
        assert_eq!(watch_timeout(Some("99999999999999999999999")), Duration::from_secs(3600));
        assert_eq!(watch_timeout(Some("soon")), Duration::from_secs(1800));
    }

    #[test]
    fn files_over_the_limit_are_not_read_whole() {
        let path = std::env::temp_dir().join(format!("input-limits-{}.txt", std::process::id()));
        std::fs::write(&path, "x".repeat(11)).expect("write");
        let small = Limit { name: "MAX_TEST_BYTES", max: 10, unit: "bytes" };
        let e = read_to_string(&path, small).expect_err("too large");
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert_eq!(e.to_string(), "larger than 10 bytes (MAX_TEST_BYTES)");
        assert_eq!(read_to_string(&path, Limit { max: 11, ..small }).expect("fits").len(), 11);
        let _ = std::fs::remove_file(&path);
    }
}
