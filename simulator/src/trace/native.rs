//! # Native trace format
//!
//! Stowage's own job trace: one row per job, each job one gang of identical pods (a single pod
//! set, named `node`). Two encodings carry the same keys:
//!
//! - **CSV** with a header row. Columns may come in any order; optional columns may be left out
//!   of the header, or left empty in a row. Fields are trimmed; quote a field with `"` when it
//!   holds a comma.
//! - **JSON Lines**: one JSON object per line, values as JSON numbers or strings; a missing key
//!   or `null` means absent. `load` reads files named `*.jsonl` or `*.json` as JSON Lines and
//!   anything else as CSV; `parse` (text in memory) takes JSON Lines when the first non-blank
//!   character is `{`.
//!
//! Blank lines are skipped. Line numbers in errors are 1-based lines of the file (the CSV header
//! is line 1).
//!
//! | column | required (default) | meaning |
//! |---|---|---|
//! | `id` | yes | job id, unique within the file |
//! | `submit_s` | yes | submit time in seconds, a number ≥ 0; a fraction is rounded down |
//! | `duration_s` | yes | run time in seconds once started, > 0; a fraction is rounded up |
//! | `pods` | no (1) | pods in the gang, ≥ 1 |
//! | `gpus_per_pod` | yes | whole GPUs per pod, ≥ 0 |
//! | `cpu_milli` | no (0) | CPU per pod, milli-cores |
//! | `memory_mib` | no (0) | memory per pod, MiB |
//! | `gpu_flavor` | no (any) | allowed GPU flavors, separated by `\|` (`h100\|a100`) |
//! | `queue` | no (none) | tenant queue; when absent the simulator assigns one |
//! | `priority` | no (0) | integer (32-bit); higher is more important |
//! | `topology` | no (`none`) | `required:LEVEL`, `preferred:LEVEL` or `none`, LEVEL one of `zone`, `block`, `rack`, `nvlink`, `host` |
//!
//! Times are relative: on loading, the earliest submit becomes 0, and jobs are ordered by
//! (submit, id).
//!
//! ```csv
//! id,submit_s,duration_s,pods,gpus_per_pod,cpu_milli,memory_mib,gpu_flavor,queue,priority,topology
//! train-1,0,3600,4,8,32000,262144,h100|a100,research,10,required:rack
//! eval-7,120.5,600,1,1,,,,,,
//! ```
//!
//! ```json
//! {"id": "train-1", "submit_s": 0, "duration_s": 3600, "pods": 4, "gpus_per_pod": 8, "topology": "required:rack"}
//! {"id": "eval-7", "submit_s": 120.5, "duration_s": 600, "gpus_per_pod": 1}
//! ```
//!
//! A row is bad when a required value is missing, a value does not parse or is out of range, an
//! object has an unknown key, or its id repeats an earlier row's. The first bad row fails the
//! load with `FILE:LINE: column NAME: PROBLEM`; with `skip_bad_rows` bad rows are dropped and
//! counted instead. An unknown or repeated column in the CSV header always fails the load.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::path::Path;

use scheduler_core::TopologyConstraint;
use serde::Deserialize;
use serde_json::Value;

use super::{
    BadRow, Collector, LoadOptions, Trace, TraceError, TraceJob, TracePodSet, deserialize, flavor_list, number,
    read_csv, required, run_seconds, seconds, value, whole, whole_or,
};

/// All columns, in the order `write_csv` writes them.
const COLUMNS: [&str; 11] = [
    "id",
    "submit_s",
    "duration_s",
    "pods",
    "gpus_per_pod",
    "cpu_milli",
    "memory_mib",
    "gpu_flavor",
    "queue",
    "priority",
    "topology",
];
const REQUIRED: [&str; 4] = ["id", "submit_s", "duration_s", "gpus_per_pod"];

/// The name of the one pod set of a native (or other single-shape) job.
pub(crate) const POD_SET: &str = "node";

/// One row as text, whichever the encoding: both are checked by [`job`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: Option<String>,
    submit_s: Option<String>,
    duration_s: Option<String>,
    pods: Option<String>,
    gpus_per_pod: Option<String>,
    cpu_milli: Option<String>,
    memory_mib: Option<String>,
    gpu_flavor: Option<String>,
    queue: Option<String>,
    priority: Option<String>,
    topology: Option<String>,
}

pub(super) fn is_jsonl_path(path: &Path) -> bool {
    path.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("json"))
}

pub(super) fn is_jsonl_text(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

pub(super) fn parse(text: &str, path: &Path, jsonl: bool, opts: &LoadOptions) -> Result<Trace, TraceError> {
    let mut jobs = Collector::new(path, opts, "id");
    // One JSON array is not JSON Lines: Philly's job log is one, and `--trace-format` is easy
    // to forget. Said once for the file, whatever --skip-bad-rows says.
    if jsonl && text.trim_start().starts_with('[') {
        return Err(TraceError::Record {
            path: path.into(),
            line: 1,
            problem: "one JSON array, not JSON Lines (a native trace has one JSON object per line): \
                      a Philly job log? Pass --trace-format philly"
                .into(),
        });
    }
    if jsonl {
        for (i, line) in text.lines().enumerate() {
            if !line.trim().is_empty() {
                jobs.row(i as u64 + 1, json_row(line).and_then(job))?;
            }
        }
    } else {
        let (headers, rows) = read_csv(text, path, &REQUIRED, Some(&COLUMNS))?;
        for (line, record) in rows {
            jobs.row(line, record.and_then(|r| deserialize(&r, &headers)).and_then(job))?;
        }
    }
    jobs.finish()
}

/// A JSON object as a [`Row`]: numbers keep their JSON text, so both encodings share [`job`].
fn json_row(line: &str) -> Result<Row, BadRow> {
    let object: serde_json::Map<String, Value> = serde_json::from_str(line).map_err(|e| {
        BadRow::record(format!("not a JSON object (column {}): {}", e.column(), super::without_position(&e)))
    })?;
    let mut texts = serde_json::Map::new();
    for (key, v) in object {
        if !COLUMNS.contains(&key.as_str()) {
            return Err(BadRow::new(key, format!("unknown column (expected {})", COLUMNS.join(", "))));
        }
        let text = match v {
            Value::Null => continue,
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Array(_) | Value::Object(_) => {
                return Err(BadRow::new(key, "expected a string or a number"));
            }
        };
        texts.insert(key, Value::String(text));
    }
    Row::deserialize(Value::Object(texts)).map_err(|e| BadRow::record(e.to_string()))
}

/// Checks one row and builds its job.
fn job(row: Row) -> Result<TraceJob, BadRow> {
    let id = required("id", &row.id)?.to_string();
    let submit_s = seconds("submit_s", &row.submit_s)?.floor() as u64;
    let duration_s = run_seconds("duration_s", &row.duration_s)?.ceil() as u64;
    let pods = whole_or("pods", &row.pods, 1)?;
    if pods == 0 {
        return Err(BadRow::new("pods", "must be at least 1"));
    }
    let pod_set = TracePodSet {
        name: POD_SET.to_string(),
        pods,
        gpus_per_pod: whole("gpus_per_pod", &row.gpus_per_pod)?,
        cpu_milli: whole_or("cpu_milli", &row.cpu_milli, 0)?,
        memory_mib: whole_or("memory_mib", &row.memory_mib, 0)?,
        flavors: flavor_list(value(&row.gpu_flavor)),
        topology: value(&row.topology)
            .map_or(Ok(TopologyConstraint::Unconstrained), str::parse)
            .map_err(|e| BadRow::new("topology", e.to_string()))?,
    };
    Ok(TraceJob {
        id,
        submit_s,
        duration_s,
        pod_sets: vec![pod_set],
        queue: value(&row.queue).map(str::to_string),
        priority: value(&row.priority).map_or(Ok(0), |p| number("priority", p, "an integer"))?,
    })
}

/// Writes a trace as native CSV (header, then one row per job in trace order), which `parse`
/// reads back to the same jobs. The format holds one pod set per job, which is what every
/// loader produces: a job is written from its first pod set, and one without any is left out.
pub fn write_csv(trace: &Trace) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for job in &trace.jobs {
        let Some(set) = job.pod_sets.first() else {
            continue;
        };
        let fields = [
            job.id.clone(),
            job.submit_s.to_string(),
            job.duration_s.to_string(),
            set.pods.to_string(),
            set.gpus_per_pod.to_string(),
            set.cpu_milli.to_string(),
            set.memory_mib.to_string(),
            set.flavors.join("|"),
            job.queue.clone().unwrap_or_default(),
            job.priority.to_string(),
            set.topology.to_string(),
        ];
        let fields: Vec<_> = fields.iter().map(|f| quote(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

fn quote(field: &str) -> Cow<'_, str> {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\"")).into()
    } else {
        field.into()
    }
}

#[cfg(test)]
mod tests {
    use scheduler_core::Level;

    use super::*;

    const PATH: &str = "jobs.csv";

    fn load(text: &str) -> Result<Trace, TraceError> {
        super::super::parse(text, Path::new(PATH), super::super::TraceFormat::Native, &LoadOptions::default())
    }

    fn skipping(text: &str) -> Trace {
        let opts = LoadOptions { skip_bad_rows: true };
        super::super::parse(text, Path::new(PATH), super::super::TraceFormat::Native, &opts)
            .expect("loads when skipping")
    }

    const HEADER: &str =
        "id,submit_s,duration_s,pods,gpus_per_pod,cpu_milli,memory_mib,gpu_flavor,queue,priority,topology\n";

    #[test]
    fn csv_jobs_load_with_defaults_and_normalised_times() {
        let text = format!(
            "{HEADER}b,100.7,3600,4,8,32000,262144,h100|a100|h100,research,-3,required:rack\n\n\
             a,250,0.5,,1,,,,,,\n\"c,1\",100,10,1,0,0,,,,,none\n"
        );
        let trace = load(&text).expect("loads");
        let ids: Vec<_> = trace.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["b", "c,1", "a"]);
        let b = &trace.jobs[0];
        assert_eq!((b.submit_s, b.duration_s, b.priority), (0, 3600, -3));
        assert_eq!(b.queue.as_deref(), Some("research"));
        assert_eq!(
            b.pod_sets,
            [TracePodSet {
                name: "node".into(),
                pods: 4,
                gpus_per_pod: 8,
                cpu_milli: 32000,
                memory_mib: 262_144,
                flavors: vec!["a100".into(), "h100".into()],
                topology: TopologyConstraint::Required(Level::Rack),
            }]
        );
        let a = &trace.jobs[2];
        assert_eq!((a.submit_s, a.duration_s, a.priority, a.queue.as_deref()), (150, 1, 0, None));
        let set = &a.pod_sets[0];
        assert_eq!((set.pods, set.cpu_milli, set.memory_mib), (1, 0, 0));
        assert!(set.flavors.is_empty());
        assert_eq!(set.topology, TopologyConstraint::Unconstrained);
        assert_eq!((trace.skipped_rows, trace.withdrawn), (0, 0));
    }

    #[test]
    fn columns_may_be_reordered_and_optional_ones_left_out() {
        let trace = load("gpus_per_pod,duration_s,id,submit_s\n2,60,x,5\n").expect("loads");
        assert_eq!(trace.jobs[0].pod_sets[0].gpus_per_pod, 2);
    }

    #[test]
    fn jsonl_jobs_match_csv_jobs() {
        let jsonl = "\n{\"id\": \"b\", \"submit_s\": 100.7, \"duration_s\": 3600, \"pods\": 4, \"gpus_per_pod\": \"8\", \
                     \"gpu_flavor\": \"h100\", \"queue\": \"research\", \"priority\": -3, \"topology\": \"preferred:block\"}\n\
                     {\"id\": \"a\", \"submit_s\": 250, \"duration_s\": 1, \"gpus_per_pod\": 1, \"queue\": null}\n";
        let csv = format!("{HEADER}b,100.7,3600,4,8,,,h100,research,-3,preferred:block\na,250,1,,1,,,,,,\n");
        assert_eq!(load(jsonl).expect("jsonl"), load(&csv).expect("csv"));
    }

    /// The error's text names the file, the line and the column.
    fn assert_bad(text: &str, line: u64, column: &str) {
        let err = load(text).expect_err("bad row");
        let shown = err.to_string();
        assert!(shown.starts_with(&format!("{PATH}:{line}: column {column}: ")), "{shown}");
        assert_eq!(err.kind(), "row");
    }

    #[test]
    fn bad_csv_rows_name_file_line_and_column() {
        let ok = "ok,0,10,1,1,,,,,,\n";
        assert_bad(&format!("{HEADER}{ok}x,0,10,two,1,,,,,,\n"), 3, "pods");
        assert_bad(&format!("{HEADER}{ok}x,-1,10,1,1,,,,,,\n"), 3, "submit_s");
        assert_bad(&format!("{HEADER}{ok}\nx,0,0,1,1,,,,,,\n"), 4, "duration_s");
        assert_bad(&format!("{HEADER}{ok}x,0,10,1,,,,,,,\n"), 3, "gpus_per_pod");
        assert_bad(&format!("{HEADER}{ok}x,0,10,1,1,,,,,,required:shelf\n"), 3, "topology");
        assert_bad(&format!("{HEADER}{ok}ok,5,10,1,1,,,,,,\n"), 3, "id");
        assert_bad(&format!("{HEADER}{ok}x,0,10,1,1,,,,,2.5,\n"), 3, "priority");
        assert_bad("id,submit_s,gpus_per_pod\nx,0,1\n", 1, "duration_s");
        assert_bad("id,submit_s,duration_s,gpus_per_pod,colour\nx,0,1,1,red\n", 1, "colour");
        assert_bad("id,submit_s,duration_s,gpus_per_pod,id\n", 1, "id");
    }

    /// Times and run times past the limits are bad rows naming the column and the limit: at
    /// 1.8e19 s and beyond they used to wrap silently (a job "done" in 0 s).
    #[test]
    fn times_and_durations_over_the_limits_name_the_column_and_the_limit() {
        let ok = "ok,0,10,1,1,,,,,,\n";
        let cases = [
            ("x,0,1.8e19,1,1,,,,,,\n", "duration_s: 1.8e19 is above the limit of 31536000 s (MAX_TRACE_DURATION_S)"),
            ("x,0,31536001,1,1,,,,,,\n", "duration_s: 31536001 is above the limit"),
            (
                "x,18446744073709551616,10,1,1,,,,,,\n",
                "submit_s: 18446744073709551616 is above the limit of 4102444800 s (MAX_TRACE_TIME_S)",
            ),
            ("x,1e300,10,1,1,,,,,,\n", "submit_s: 1e300 is above the limit"),
            // A run time is > 0, said the same for a negative one as for zero.
            ("x,0,-5,1,1,,,,,,\n", "duration_s: expected a number of seconds > 0, got \"-5\""),
            ("x,0,0,1,1,,,,,,\n", "duration_s: expected a number of seconds > 0, got \"0\""),
            ("x,-1,10,1,1,,,,,,\n", "submit_s: expected a number of seconds ≥ 0, got \"-1\""),
        ];
        for (row, want) in cases {
            let err = load(&format!("{HEADER}{ok}{row}")).expect_err(want);
            assert!(err.to_string().starts_with(&format!("{PATH}:3: column {want}")), "{err}");
        }
        let at_limits = format!("{HEADER}a,4102444800,31536000,1,1,,,,,,\n");
        let job = &load(&at_limits).expect("the limits themselves are allowed").jobs[0];
        assert_eq!(job.duration_s, 31_536_000);
    }

    #[test]
    fn a_json_array_says_it_is_not_json_lines_and_names_the_flag_for_philly() {
        let err =
            parse("[\n  {\"id\": \"a\"}\n]\n", Path::new(PATH), true, &LoadOptions::default()).expect_err("an array");
        assert!(err.to_string().ends_with("Pass --trace-format philly"), "{err}");
        assert_eq!(err.kind(), "record");
    }

    #[test]
    fn bad_jsonl_rows_name_file_line_and_column() {
        let ok = "{\"id\": \"ok\", \"submit_s\": 0, \"duration_s\": 1, \"gpus_per_pod\": 1}\n";
        assert_bad(&format!("{ok}{{\"id\": \"x\", \"submit_s\": 0, \"duration_s\": 1}}\n"), 2, "gpus_per_pod");
        assert_bad(&format!("{ok}\n{{\"id\": \"x\", \"colour\": 1}}\n"), 3, "colour");
        assert_bad(
            &format!("{ok}{{\"id\": \"x\", \"submit_s\": 0, \"duration_s\": 0, \"gpus_per_pod\": 1}}\n"),
            2,
            "duration_s",
        );
        assert_bad(&format!("{ok}{{\"id\": [1]}}\n"), 2, "id");
        assert_bad(&format!("{ok}{ok}"), 2, "id");
        let err = load(&format!("{ok}{{\"id\": \n")).expect_err("bad JSON");
        assert_eq!(err.kind(), "record");
        assert_eq!(err.to_string(), "jobs.csv:2: not a JSON object (column 7): EOF while parsing a value");
    }

    #[test]
    fn line_numbers_count_blank_lines_and_crlf() {
        let ok = "ok,0,10,1,1,,,,,,";
        let bad = "x,0,10,1,1,,,,,,required:shelf";
        let text = format!("\n\n{HEADER}{ok}\n\n\n  \n{bad}\n");
        assert_bad(&text, 8, "topology");
        assert_bad(&format!("{HEADER}{ok}\n\n{bad}\n").replace('\n', "\r\n"), 4, "topology");
        let quoted = format!("{HEADER}\"o\nk\",0,10,1,1,,,,,,\n{bad}\n");
        assert_bad(&quoted, 4, "topology");
        assert_bad("\r\n\r\nid,submit_s\r\n", 3, "duration_s");
    }

    #[test]
    fn a_row_of_the_wrong_width_is_a_bad_record() {
        let err = load(&format!("{HEADER}x,0,10\n")).expect_err("short row");
        assert_eq!(err.to_string(), "jobs.csv:2: 3 fields, but the header has 11");
    }

    #[test]
    fn skipping_counts_bad_rows() {
        let text = format!("{HEADER}a,0,10,1,1,,,,,,\nb,x,10,1,1,,,,,,\na,0,10,1,1,,,,,,\nc,1\nd,5,10,1,1,,,,,,\n");
        let trace = skipping(&text);
        assert_eq!(trace.jobs.len(), 2);
        assert_eq!(trace.skipped_rows, 3);
        let err = super::super::parse(
            &format!("{HEADER}a,x,1,1,1,,,,,,\n"),
            Path::new(PATH),
            super::super::TraceFormat::Native,
            &LoadOptions { skip_bad_rows: true },
        )
        .expect_err("nothing left");
        assert_eq!(err.kind(), "empty");
    }

    #[test]
    fn written_csv_reads_back_to_the_same_jobs() {
        let text = format!(
            "{HEADER}b,100,3600,4,8,32000,262144,h100|a100,\"team \"\"x\"\", ml\",-3,required:rack\n\
             a,250,7,1,0,500,1024,,,0,preferred:host\n"
        );
        let trace = load(&text).expect("loads");
        let written = write_csv(&trace);
        assert!(written.starts_with(HEADER), "{written}");
        assert_eq!(load(&written).expect("reads back"), trace);
        assert_eq!(write_csv(&load(&written).expect("again")), written);
    }

    #[test]
    fn the_documented_examples_load() {
        let csv = "id,submit_s,duration_s,pods,gpus_per_pod,cpu_milli,memory_mib,gpu_flavor,queue,priority,topology\n\
                   train-1,0,3600,4,8,32000,262144,h100|a100,research,10,required:rack\n\
                   eval-7,120.5,600,1,1,,,,,,\n";
        let jsonl = "{\"id\": \"train-1\", \"submit_s\": 0, \"duration_s\": 3600, \"pods\": 4, \"gpus_per_pod\": 8, \"topology\": \"required:rack\"}\n\
                     {\"id\": \"eval-7\", \"submit_s\": 120.5, \"duration_s\": 600, \"gpus_per_pod\": 1}\n";
        for text in [csv, jsonl] {
            let trace = load(text).expect("example loads");
            assert_eq!(trace.jobs.len(), 2);
            assert_eq!(trace.jobs[1].submit_s, 120);
        }
    }

    #[test]
    fn encoding_follows_extension_or_first_character() {
        assert!(is_jsonl_path(Path::new("t.JSONL")) && is_jsonl_path(Path::new("t.json")));
        assert!(!is_jsonl_path(Path::new("t.csv")) && !is_jsonl_path(Path::new("jsonl")));
        assert!(is_jsonl_text("\n  {\"id\": 1}") && !is_jsonl_text("id,submit_s"));
    }
}
