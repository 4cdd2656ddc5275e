//! Microsoft Philly 2017 jobs (`philly-2017/jobs_*.json`): one JSON array of
//! `{id, num_gpus, runtime, attempts: [{start_time, end_time}], submitted_time}`.
//!
//! - Times are naive `YYYY-MM-DD HH:MM:SS` strings, read as if UTC and subtracted naively (as
//!   the trace's own `runtime` was): the few jobs running across the end of US daylight saving
//!   time may be off by an hour.
//! - Duration is the sum of the attempts' run times: between attempts the job held no GPUs.
//!   `runtime` (last end − first start, in minutes) is not used.
//! - The trace dropped placement, so the gang shape is synthesised: up to 8 GPUs is one pod;
//!   larger gangs are cut into the fewest equal pods of at most 8 GPUs (a full Philly node),
//!   12 → 2 × 6, 20 → 4 × 5, 24 → 3 × 8, and would like to share a rack (`preferred:rack`).
//! - Philly records no CPU or memory: each pod asks 4 cores and 32 GiB per GPU (an assumption).
//! - No queue, priority or GPU model is recorded.
//!
//! The file must be valid JSON as a whole (else a `Json` error with line and column). A bad
//! record is reported at the line where its object starts, with the field as the column
//! (`attempts[1].end_time`).

use std::path::Path;

use scheduler_core::{Level, TopologyConstraint};
use serde_json::Value;

use super::native::POD_SET;
use super::{BadRow, Collector, LoadOptions, Trace, TraceError, TraceJob, TracePodSet};

const CPU_MILLI_PER_GPU: u64 = 4000;
const MEMORY_MIB_PER_GPU: u64 = 32 * 1024;
const GPUS_PER_NODE: u32 = 8;

pub(super) fn parse(text: &str, path: &Path, opts: &LoadOptions) -> Result<Trace, TraceError> {
    let records: Vec<Value> = serde_json::from_str(text).map_err(|source| TraceError::Json {
        path: path.into(),
        line: source.line() as u64,
        column: source.column() as u64,
        source,
    })?;
    let lines = element_lines(text);
    let mut jobs = Collector::new(path, opts, "id");
    for (k, record) in records.iter().enumerate() {
        jobs.row(lines.get(k).copied().unwrap_or(0), job(record))?;
    }
    jobs.finish()
}

/// The 1-based line on which each element of the top-level JSON array starts. Only run on text
/// that parsed, so tracking strings and nesting depth is enough.
fn element_lines(text: &str) -> Vec<u64> {
    let mut lines = Vec::new();
    let (mut line, mut depth) = (1, 0u32);
    let (mut in_string, mut escaped, mut expecting) = (false, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'\n' => line += 1,
            b' ' | b'\t' | b'\r' => {}
            _ => {
                if depth == 1 && expecting && b != b']' {
                    lines.push(line);
                    expecting = false;
                }
                match b {
                    b'"' => in_string = true,
                    b'[' | b'{' => {
                        depth += 1;
                        expecting = depth == 1;
                    }
                    b']' | b'}' => depth = depth.saturating_sub(1),
                    b',' if depth == 1 => expecting = true,
                    _ => {}
                }
            }
        }
    }
    lines
}

fn job(record: &Value) -> Result<TraceJob, BadRow> {
    let id = record
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| BadRow::new("id", "expected a non-empty string"))?;
    let gpus = record
        .get("num_gpus")
        .and_then(Value::as_u64)
        .and_then(|g| u32::try_from(g).ok())
        .filter(|&g| g > 0)
        .ok_or_else(|| BadRow::new("num_gpus", "expected a whole number ≥ 1"))?;
    let submit = time(record.get("submitted_time"), "submitted_time")?;
    let submit_s = u64::try_from(submit).map_err(|_| BadRow::new("submitted_time", "before 1970"))?;
    let submit_s =
        input_limits::TRACE_TIME.check(submit_s).map_err(|over| BadRow::new("submitted_time", over.to_string()))?;
    let (pods, gpus_per_pod) = gang_shape(gpus);
    let pod_set = TracePodSet {
        name: POD_SET.to_string(),
        pods,
        gpus_per_pod,
        cpu_milli: CPU_MILLI_PER_GPU * u64::from(gpus_per_pod),
        memory_mib: MEMORY_MIB_PER_GPU * u64::from(gpus_per_pod),
        flavors: Vec::new(),
        topology: if pods > 1 { TopologyConstraint::Preferred(Level::Rack) } else { TopologyConstraint::Unconstrained },
    };
    Ok(TraceJob {
        id: id.trim().to_string(),
        submit_s,
        duration_s: run_time(record.get("attempts"))?,
        pod_sets: vec![pod_set],
        queue: None,
        priority: 0,
    })
}

/// Seconds the job ran: the sum of its attempts' lengths.
fn run_time(attempts: Option<&Value>) -> Result<u64, BadRow> {
    let attempts = attempts
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| BadRow::new("attempts", "expected a non-empty list of attempts"))?;
    let mut lengths = Vec::with_capacity(attempts.len());
    for (i, attempt) in attempts.iter().enumerate() {
        let start = time(attempt.get("start_time"), &format!("attempts[{i}].start_time"))?;
        let end_column = format!("attempts[{i}].end_time");
        let end = time(attempt.get("end_time"), &end_column)?;
        // Both are 4-digit-year times, so the difference cannot overflow.
        let length =
            u64::try_from(end - start).map_err(|_| BadRow::new(end_column, "the attempt ends before it starts"))?;
        lengths.push(length);
    }
    let total = input_limits::TRACE_DURATION
        .sum(lengths)
        .map_err(|over| BadRow::new("attempts", format!("the attempts' run time: {over}")))?;
    Some(total).filter(|&t| t > 0).ok_or_else(|| BadRow::new("attempts", "the attempts add up to no run time"))
}

fn time(v: Option<&Value>, column: &str) -> Result<i64, BadRow> {
    let text = v.and_then(Value::as_str).ok_or_else(|| BadRow::new(column, "expected a time string"))?;
    naive_seconds(text)
        .ok_or_else(|| BadRow::new(column, format!("expected a time as YYYY-MM-DD HH:MM:SS, got {text:?}")))
}

/// `YYYY-MM-DD HH:MM:SS` as seconds since 1970-01-01 00:00:00, the time taken as UTC.
fn naive_seconds(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let shape = b.len() == 19
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b' ',
            13 | 16 => c == b':',
            _ => c.is_ascii_digit(),
        });
    if !shape {
        return None;
    }
    let field = |from: usize, to: usize| text.get(from..to).and_then(|s| s.parse::<i64>().ok());
    let (year, month, day) = (field(0, 4)?, field(5, 7)?, field(8, 10)?);
    let (hour, minute, second) = (field(11, 13)?, field(14, 16)?, field(17, 19)?);
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour < 24
        && minute < 60
        && second < 60;
    valid.then(|| days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// (pods, GPUs per pod) for a gang of `gpus`: one pod up to a node's 8 GPUs, else the fewest
/// equal pods that fit on nodes.
fn gang_shape(gpus: u32) -> (u32, u32) {
    if gpus <= GPUS_PER_NODE {
        return (1, gpus);
    }
    let pods = (gpus.div_ceil(GPUS_PER_NODE)..=gpus).find(|p| gpus / p * p == gpus).unwrap_or(gpus);
    (pods, gpus / pods)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{LoadOptions, TraceFormat, load, parse as parse_trace};
    use super::*;

    const JOBS: &str =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/philly-2017/jobs_2017-09_2017-10.json");

    #[test]
    fn the_real_trace_loads_with_the_readme_gang_sizes() {
        let trace = load(Path::new(JOBS), TraceFormat::Philly, &LoadOptions::default()).expect("Philly trace loads");
        assert_eq!(trace.jobs.len(), 1455);
        assert_eq!((trace.skipped_rows, trace.withdrawn), (0, 0));
        let mut sizes = BTreeMap::new();
        for job in &trace.jobs {
            let set = &job.pod_sets[0];
            *sizes.entry(set.pods * set.gpus_per_pod).or_insert(0) += 1;
        }
        let expected = [(4, 738), (7, 1), (8, 639), (12, 4), (16, 50), (20, 1), (24, 2), (32, 20)];
        assert_eq!(sizes, BTreeMap::from(expected));
        // Submits run 2017-09-04 10:30:41 → 2017-10-31 23:23:30.
        assert_eq!(trace.jobs[0].submit_s, 0);
        let last = trace.jobs.last().expect("jobs");
        assert_eq!(last.submit_s, 1_509_492_210 - 1_504_521_041);
        assert!(trace.jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
    }

    #[test]
    fn duration_sums_the_attempts() {
        let text = std::fs::read_to_string(JOBS).expect("read");
        let trace = parse_trace(&text, Path::new(JOBS), TraceFormat::Philly, &LoadOptions::default()).expect("loads");
        let job = trace.jobs.iter().find(|j| j.id == "application_1506638472019_14199").expect("first record");
        // 01:12:09 → 01:13:23, then 2017-10-07 01:13:30 → 2017-10-09 06:53:12.
        assert_eq!(job.duration_s, 74 + 2 * 86_400 + 5 * 3600 + 39 * 60 + 42);
        assert_eq!(job.pod_sets[0].cpu_milli, 32_000);
        assert_eq!(job.pod_sets[0].memory_mib, 8 * 32 * 1024);
    }

    #[test]
    fn gangs_are_cut_into_equal_node_sized_pods() {
        let shapes = [(4, (1, 4)), (7, (1, 7)), (8, (1, 8)), (12, (2, 6)), (16, (2, 8))];
        let more = [(20, (4, 5)), (24, (3, 8)), (32, (4, 8)), (11, (11, 1)), (128, (16, 8))];
        for (gpus, shape) in shapes.into_iter().chain(more) {
            assert_eq!(gang_shape(gpus), shape, "{gpus} GPUs");
        }
    }

    #[test]
    fn naive_times_count_from_the_epoch() {
        assert_eq!(naive_seconds("1970-01-01 00:00:00"), Some(0));
        assert_eq!(naive_seconds("2017-09-04 10:30:41"), Some(1_504_521_041));
        assert_eq!(naive_seconds("2000-02-29 23:59:59"), Some(951_868_799));
        assert_eq!(naive_seconds("1969-12-31 23:59:59"), Some(-1));
        for bad in [
            "2017-02-29 00:00:00",
            "2017-13-01 00:00:00",
            "2017-01-01 24:00:00",
            "2017-1-01 00:00:00",
            "2017-01-01T00:00:00",
        ] {
            assert_eq!(naive_seconds(bad), None, "{bad}");
        }
    }

    const TWO: &str = r#"[
    {
        "id": "a",
        "num_gpus": 12,
        "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 02:00:00"}],
        "submitted_time": "2017-10-07 00:59:00"
    },
    {
        "id": "b",
        "num_gpus": 4,
        "attempts": [
            {"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 01:00:10"},
            {"start_time": "2017-10-07 01:00:20", "end_time": "2017-10-07 01:00:30"}
        ],
        "submitted_time": "2017-10-07 00:58:00"
    }
]"#;

    fn parse_text(text: &str, skip_bad_rows: bool) -> Result<Trace, TraceError> {
        parse_trace(text, Path::new("p.json"), TraceFormat::Philly, &LoadOptions { skip_bad_rows })
    }

    #[test]
    fn small_trace_normalises_and_shapes() {
        let trace = parse_text(TWO, false).expect("loads");
        let b = &trace.jobs[0];
        assert_eq!((b.id.as_str(), b.submit_s, b.duration_s), ("b", 0, 20));
        assert_eq!(b.pod_sets[0].topology, TopologyConstraint::Unconstrained);
        let a = &trace.jobs[1];
        assert_eq!((a.submit_s, a.duration_s), (60, 3600));
        assert_eq!((a.pod_sets[0].pods, a.pod_sets[0].gpus_per_pod), (2, 6));
        assert_eq!(a.pod_sets[0].topology, TopologyConstraint::Preferred(Level::Rack));
        assert_eq!(element_lines(TWO), [2, 8]);
    }

    #[test]
    fn a_corrupt_record_names_its_line_and_field() {
        let cases = [
            ("\"2017-10-07 01:00:30\"", "\"2017-10-07 01:00:61\"", "attempts[1].end_time"),
            ("\"2017-10-07 01:00:30\"", "\"2017-10-07 01:00:15\"", "attempts[1].end_time"),
            ("\"num_gpus\": 4", "\"num_gpus\": 0", "num_gpus"),
            ("\"num_gpus\": 4", "\"num_gpus\": \"4\"", "num_gpus"),
            ("\"submitted_time\": \"2017-10-07 00:58:00\"", "\"submitted\": 1", "submitted_time"),
        ];
        for (from, to, column) in cases {
            let text = TWO.replace(from, to);
            let err = parse_text(&text, false).expect_err(column);
            assert_eq!(err.kind(), "row");
            assert!(err.to_string().starts_with(&format!("p.json:8: column {column}: ")), "{err}");
            let trace = parse_text(&text, true).expect("skips");
            assert_eq!((trace.jobs.len(), trace.skipped_rows), (1, 1));
        }
        let zero = TWO.replace("01:00:10", "01:00:00").replace("01:00:30", "01:00:20");
        let err = parse_text(&zero, false).expect_err("no run time");
        assert!(err.to_string().starts_with("p.json:8: column attempts: "), "{err}");
    }

    /// A run time past a year, summed over attempts, or a submit past 2100 is a bad row
    /// naming the field and the limit.
    #[test]
    fn run_times_and_times_over_the_limits_are_bad_rows() {
        let long = TWO.replace(r#""end_time": "2017-10-07 02:00:00""#, r#""end_time": "2019-10-07 02:00:00""#);
        let err = parse_text(&long, false).expect_err("two years");
        assert!(err.to_string().contains("column attempts: the attempts' run time: "), "{err}");
        assert!(err.to_string().ends_with("is above the limit of 31536000 s (MAX_TRACE_DURATION_S)"), "{err}");
        let late =
            TWO.replace(r#""submitted_time": "2017-10-07 00:59:00""#, r#""submitted_time": "9999-10-07 00:59:00""#);
        let err = parse_text(&late, false).expect_err("year 9999");
        assert!(err.to_string().contains("column submitted_time: 253394873940 is above the limit"), "{err}");
    }

    #[test]
    fn broken_json_reports_line_and_column() {
        let err = parse_text(&TWO.replace("\"num_gpus\": 4,", "\"num_gpus\": 4"), false).expect_err("syntax");
        assert_eq!(err.kind(), "json");
        assert!(err.to_string().starts_with("p.json:11:9: invalid JSON: expected `,` or `}`"), "{err}");
    }

    #[test]
    fn element_lines_skip_strings_and_nesting() {
        assert_eq!(element_lines("[]"), Vec::<u64>::new());
        assert_eq!(element_lines("[\n{\"a\": \"],{\\\"\"},\n [1, 2],\n 3]"), [2, 3, 4]);
    }
}
