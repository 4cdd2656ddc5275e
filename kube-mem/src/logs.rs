//! Container logs, as a kubelet keeps them for the API server's `pods/{name}/log`: lines per
//! container of a pod, written by whoever plays the kubelet in-process (the playground's
//! simulated members), bounded per container as the kubelet rotates them, forgotten with their
//! pod. A pod bound to a Node that names a kubelet endpoint is not read here: the request is
//! proxied there (see `http::pod_log`), as the real API server does.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use super::status::ApiError;

/// The most a container's log holds; past it the oldest lines go (the kubelet rotates at
/// `containerLogMaxSize`, 10 MiB by default; in memory here, so smaller).
pub const MAX_BYTES_PER_CONTAINER: usize = 1 << 20;
/// The longest line kept whole; a longer one is cut, as the container runtime splits lines
/// past 16 KiB.
pub const MAX_LINE_BYTES: usize = 16 << 10;

/// Whose log: a container of a pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogKey {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// One line, with when it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub unix_nanos: i128,
    pub text: String,
}

impl Line {
    /// RFC 3339 with nanoseconds, as `timestamps=true` prefixes each line.
    pub fn timestamp(&self) -> String {
        let secs = self.unix_nanos.div_euclid(1_000_000_000) as i64;
        let nanos = self.unix_nanos.rem_euclid(1_000_000_000);
        let base = super::time::rfc3339(secs);
        format!("{}.{nanos:09}Z", base.trim_end_matches('Z'))
    }
}

#[derive(Debug, Default)]
struct Log {
    lines: VecDeque<Line>,
    bytes: usize,
    /// Lines ever written: the sequence number of the next one.
    written: u64,
}

/// Every container's log on this server.
#[derive(Debug, Default)]
pub struct ContainerLogs {
    logs: BTreeMap<LogKey, Log>,
}

impl ContainerLogs {
    /// Appends `text`, one line per line in it, each stamped `unix_nanos`.
    pub fn write(&mut self, key: LogKey, unix_nanos: i128, text: &str) {
        let log = self.logs.entry(key).or_default();
        for line in text.lines() {
            let mut end = line.len().min(MAX_LINE_BYTES);
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            let line = Line { unix_nanos, text: line[..end].to_string() };
            log.bytes += line.text.len() + 1;
            log.lines.push_back(line);
            log.written += 1;
            while log.bytes > MAX_BYTES_PER_CONTAINER {
                match log.lines.pop_front() {
                    Some(old) => log.bytes -= old.text.len() + 1,
                    None => break,
                }
            }
        }
    }

    /// The lines held from sequence number `from` on, and the number after the last.
    pub fn read(&self, key: &LogKey, from: u64) -> (Vec<Line>, u64) {
        let Some(log) = self.logs.get(key) else { return (Vec::new(), from) };
        let first = log.written - log.lines.len() as u64;
        let skip = from.saturating_sub(first) as usize;
        (log.lines.iter().skip(skip).cloned().collect(), log.written)
    }

    /// How many lines the container has written, kept or rotated away.
    pub fn written(&self, key: &LogKey) -> u64 {
        self.logs.get(key).map_or(0, |l| l.written)
    }

    /// The pod is gone: so are its logs.
    pub fn forget_pod(&mut self, namespace: &str, pod: &str) {
        self.logs.retain(|k, _| k.namespace != namespace || k.pod != pod);
    }
}

/// What a `pods/{name}/log` request asks, parsed and checked as the API server does
/// (`PodLogOptions` validation); the kubelet's `containerLogs` takes the same parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    pub since_seconds: Option<i64>,
    pub since_unix: Option<i64>,
}

impl LogOptions {
    pub fn parse(q: &BTreeMap<String, String>) -> Result<Self, ApiError> {
        let flag = |k: &str| -> Result<bool, ApiError> {
            match q.get(k).filter(|v| !v.is_empty()) {
                None => Ok(false),
                Some(v) => query_bool(v)
                    .ok_or_else(|| ApiError::bad_request(format!("{k}: Invalid value: \"{v}\": not a boolean"))),
            }
        };
        let number = |k: &str, min: i64| -> Result<Option<i64>, ApiError> {
            let Some(v) = q.get(k).filter(|v| !v.is_empty()) else { return Ok(None) };
            let n: i64 =
                v.parse().map_err(|_| ApiError::bad_request(format!("{k}: Invalid value: \"{v}\": not a number")))?;
            if n < min {
                return Err(ApiError::invalid(
                    "PodLogOptions",
                    "",
                    vec![(k.to_string(), format!("Invalid value: {n}: must be greater than or equal to {min}"))],
                ));
            }
            Ok(Some(n))
        };
        let since_unix = match q.get("sinceTime").filter(|v| !v.is_empty()) {
            Some(t) => Some(super::time::parse_rfc3339(t).ok_or_else(|| {
                ApiError::bad_request(format!("sinceTime: Invalid value: \"{t}\": not an RFC 3339 time"))
            })?),
            None => None,
        };
        let opts = LogOptions {
            container: q.get("container").filter(|c| !c.is_empty()).cloned(),
            follow: flag("follow")?,
            previous: flag("previous")?,
            timestamps: flag("timestamps")?,
            tail_lines: number("tailLines", 0)?.map(|n| n as u64),
            limit_bytes: number("limitBytes", 1)?.map(|n| n as u64),
            since_seconds: number("sinceSeconds", 1)?,
            since_unix,
        };
        if opts.since_seconds.is_some() && opts.since_unix.is_some() {
            return Err(ApiError::invalid(
                "PodLogOptions",
                "",
                vec![(
                    "sinceSeconds".into(),
                    "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
                )],
            ));
        }
        Ok(opts)
    }

    /// The first lines to send: those after `since`, the last `tailLines` of them.
    pub fn first<'a>(&self, lines: &'a [Line], now_unix: i64) -> &'a [Line] {
        let since = self.since_unix.or(self.since_seconds.map(|s| now_unix.saturating_sub(s)));
        let start = since.map_or(0, |s| lines.partition_point(|l| l.unix_nanos < i128::from(s) * 1_000_000_000));
        let lines = &lines[start..];
        match self.tail_lines {
            Some(n) => &lines[lines.len().saturating_sub(n.min(usize::MAX as u64) as usize)..],
            None => lines,
        }
    }

    /// Lines as the body carries them.
    pub fn render(&self, lines: &[Line]) -> String {
        let mut out = String::new();
        for l in lines {
            if self.timestamps {
                out.push_str(&l.timestamp());
                out.push(' ');
            }
            out.push_str(&l.text);
            out.push('\n');
        }
        out
    }
}

/// A boolean query parameter as the API server reads one (Go's `strconv.ParseBool`): clients
/// send `true`, and the Python client `True`.
pub fn query_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The container a log request reads, as the API server chooses it: the one named (it must be
/// the pod's), else the pod's only container.
pub fn container_of(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let names = |field: &str| -> Vec<String> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .map(str::to_string)
            .collect()
    };
    let (containers, init) = (names("containers"), names("initContainers"));
    match asked {
        Some(c) if containers.iter().chain(&init).chain(&names("ephemeralContainers")).any(|n| n == c) => {
            Ok(c.to_string())
        }
        Some(c) => Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut message =
                format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "));
            if !init.is_empty() {
                message.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
            }
            Err(ApiError::bad_request(message))
        }
    }
}

/// Whether the pod's container has stopped for good: a follow ends there.
pub fn finished(pod: &Value) -> bool {
    matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> LogKey {
        LogKey { namespace: "ml".into(), pod: "p".into(), container: "node".into() }
    }

    #[test]
    fn a_log_keeps_its_newest_megabyte_and_reads_on_from_a_sequence_number() {
        let mut logs = ContainerLogs::default();
        logs.write(key(), 0, "one\ntwo\n");
        let (lines, next) = logs.read(&key(), 0);
        assert_eq!(lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["one", "two"]);
        logs.write(key(), 1, "three");
        let (lines, next) = logs.read(&key(), next);
        assert_eq!((lines.len(), lines[0].text.as_str(), next), (1, "three", 3));
        let long = "x".repeat(MAX_LINE_BYTES * 2);
        for _ in 0..100 {
            logs.write(key(), 2, &long);
        }
        let (lines, next) = logs.read(&key(), 0);
        assert_eq!((next, logs.written(&key())), (103, 103));
        assert!(lines.iter().all(|l| l.text.len() == MAX_LINE_BYTES), "a line is cut at 16 KiB");
        assert!(lines.len() * (MAX_LINE_BYTES + 1) <= MAX_BYTES_PER_CONTAINER, "bounded: {}", lines.len());
        logs.forget_pod("ml", "p");
        assert!(logs.read(&key(), 0).0.is_empty());
    }

    #[test]
    fn options_are_checked_as_the_api_server_checks_them_and_select_the_tail_since_a_time() {
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let err = LogOptions::parse(&q(&[("tailLines", "-1")])).expect_err("negative");
        assert_eq!(err.code, 422);
        assert!(err.to_status().to_string().contains("tailLines"), "{}", err.to_status());
        assert_eq!(LogOptions::parse(&q(&[("limitBytes", "0")])).expect_err("zero").code, 422);
        assert_eq!(LogOptions::parse(&q(&[("sinceSeconds", "x")])).expect_err("nan").code, 400);
        assert!(LogOptions::parse(&q(&[("follow", "True")])).expect("the Python client's").follow);
        assert!(!LogOptions::parse(&q(&[("follow", "false")])).expect("false").follow);
        assert_eq!(LogOptions::parse(&q(&[("follow", "yes")])).expect_err("not a bool").code, 400);
        assert!(LogOptions::parse(&q(&[("sinceSeconds", "5"), ("sinceTime", "2026-01-01T00:00:00Z")])).is_err());
        let o =
            LogOptions::parse(&q(&[("tailLines", "2"), ("sinceSeconds", "10"), ("timestamps", "true")])).expect("ok");
        let s = 1_000_000_000i128;
        let lines: Vec<Line> = [(80, "old"), (95, "a"), (96, "b"), (97, "c")]
            .map(|(t, x)| Line { unix_nanos: t * s, text: x.into() })
            .into();
        let first = o.first(&lines, 100);
        assert_eq!(first.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(o.render(&first[..1]), "1970-01-01T00:01:36.000000000Z b\n");
    }

    #[test]
    fn the_container_is_the_one_named_or_the_only_one() {
        let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "node"}]}});
        assert_eq!(container_of(&pod, None).expect("only"), "node");
        let e = container_of(&pod, Some("x")).expect_err("not its");
        assert_eq!(e.to_status()["message"], "container x is not valid for pod p");
        let two = serde_json::json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        let e = container_of(&two, None).expect_err("which");
        assert_eq!(
            e.to_status()["message"],
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(container_of(&two, Some("i")).expect("init"), "i");
    }
}
