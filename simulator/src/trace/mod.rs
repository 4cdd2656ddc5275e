//! Job traces: the native CSV/JSONL format and loaders for the public traces in `shared/traces/`.
//! Loaders only parse and normalise; they never schedule. A bad row is an error naming
//! file:line and column, unless the caller asks to skip bad rows (then they are counted).
//! Times and run times are bounded (`input_limits::MAX_TRACE_TIME_S`, `MAX_TRACE_DURATION_S`):
//! a value past them is a bad row naming the column and the limit, never a wrapped number.

mod native;
mod openb;
mod philly;
pub mod synthetic;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use csv::StringRecord;
use scheduler_core::TopologyConstraint;
use serde::de::DeserializeOwned;

pub use native::write_csv;

/// One job of a trace, already normalised: times in whole seconds from the trace origin
/// (the earliest submit becomes 0), one gang of one or more pod sets.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    pub id: String,
    pub submit_s: u64,
    /// Run time once started, on a perfectly local placement (the topology cost model adds to it).
    pub duration_s: u64,
    pub pod_sets: Vec<TracePodSet>,
    /// `None`: the trace names no tenant; the simulator assigns one.
    pub queue: Option<String>,
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TracePodSet {
    pub name: String,
    pub pods: u32,
    /// Whole GPUs per pod. A fractional request (openb) is rounded up to one GPU here.
    pub gpus_per_pod: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// Allowed GPU flavors (GPU product names); empty means any.
    pub flavors: Vec<String>,
    pub topology: TopologyConstraint,
}

/// A trace as loaded: the jobs in submit order (ties by id), and what was skipped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trace {
    pub jobs: Vec<TraceJob>,
    /// Rows skipped because the caller allowed skipping bad rows (always 0 otherwise).
    pub skipped_rows: usize,
    /// Rows the trace itself says never ran (openb `Pending` pods, deleted before being
    /// scheduled). Not errors, so dropped and counted whatever the options.
    pub withdrawn: usize,
}

/// Why a trace (or machine list) could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A value (or a header column) that is missing, malformed or out of range.
    #[error("{}:{line}: column {column}: {problem}", path.display())]
    Row { path: PathBuf, line: u64, column: String, problem: String },
    /// A malformed row that no single column is to blame for: wrong field count, bad JSON line.
    #[error("{}:{line}: {problem}", path.display())]
    Record { path: PathBuf, line: u64, problem: String },
    /// Nothing usable in the file (no jobs, or no machines).
    #[error("{}: no usable rows", path.display())]
    Empty { path: PathBuf },
    /// The file as a whole is not valid JSON (Philly's single JSON array).
    #[error("{}:{line}:{column}: invalid JSON: {}", path.display(), without_position(source))]
    Json { path: PathBuf, line: u64, column: u64, source: serde_json::Error },
}

impl TraceError {
    /// A stable name for the kind of error, for logs and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            TraceError::Io { .. } => "io",
            TraceError::Row { .. } => "row",
            TraceError::Record { .. } => "record",
            TraceError::Empty { .. } => "empty",
            TraceError::Json { .. } => "json",
        }
    }
}

/// serde_json appends " at line L column C"; our message already starts with them.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" at line ") {
        Some((message, _)) => message.to_string(),
        None => text,
    }
}

/// The trace formats `load` understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Stowage's own CSV or JSON Lines (see `native.rs`).
    Native,
    /// Microsoft Philly 2017 jobs (`philly-2017/jobs_*.json`).
    Philly,
    /// Alibaba GPU v2023 "openb" pod lists (`openb_pod_list_*.csv`).
    Openb,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 3] = [TraceFormat::Native, TraceFormat::Philly, TraceFormat::Openb];

    pub fn as_str(self) -> &'static str {
        match self {
            TraceFormat::Native => "native",
            TraceFormat::Philly => "philly",
            TraceFormat::Openb => "openb",
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format {0:?} (expected native, philly or openb)")]
pub struct UnknownTraceFormat(pub String);

impl FromStr for TraceFormat {
    type Err = UnknownTraceFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownTraceFormat(s.to_string()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// Drop bad rows and count them in `Trace::skipped_rows` instead of failing on the first.
    pub skip_bad_rows: bool,
}

/// Reads and parses a trace file. Native traces are JSON Lines when the file name ends in
/// `.jsonl` or `.json`, CSV otherwise.
pub fn load(path: &Path, format: TraceFormat, opts: &LoadOptions) -> Result<Trace, TraceError> {
    let text = read(path)?;
    parse_as(&text, path, format, native::is_jsonl_path(path), opts)
}

/// Parses a trace held in memory; `path` only names it in errors. Native text is JSON Lines
/// when its first non-blank character is `{`, CSV otherwise.
pub fn parse(text: &str, path: &Path, format: TraceFormat, opts: &LoadOptions) -> Result<Trace, TraceError> {
    parse_as(text, path, format, native::is_jsonl_text(text), opts)
}

fn parse_as(
    text: &str,
    path: &Path,
    format: TraceFormat,
    jsonl: bool,
    opts: &LoadOptions,
) -> Result<Trace, TraceError> {
    if text.trim().is_empty() {
        return Err(TraceError::Empty { path: path.into() });
    }
    match format {
        TraceFormat::Native => native::parse(text, path, jsonl, opts),
        TraceFormat::Philly => philly::parse(text, path, opts),
        TraceFormat::Openb => openb::parse(text, path, opts),
    }
}

/// The file's text, at most `input_limits::MAX_TRACE_FILE_BYTES` of it.
pub(crate) fn read(path: &Path) -> Result<String, TraceError> {
    input_limits::read_to_string(path, input_limits::TRACE_FILE_BYTES)
        .map_err(|source| TraceError::Io { path: path.into(), source })
}

/// What is wrong with one row, before the caller adds the file and line.
#[derive(Debug)]
pub(crate) struct BadRow {
    column: Option<String>,
    problem: String,
}

impl BadRow {
    pub(crate) fn new(column: impl Into<String>, problem: impl Into<String>) -> Self {
        BadRow { column: Some(column.into()), problem: problem.into() }
    }

    pub(crate) fn record(problem: impl Into<String>) -> Self {
        BadRow { column: None, problem: problem.into() }
    }

    pub(crate) fn at(self, path: &Path, line: u64) -> TraceError {
        let path = path.into();
        match self.column {
            Some(column) => TraceError::Row { path, line, column, problem: self.problem },
            None => TraceError::Record { path, line, problem: self.problem },
        }
    }
}

/// Gathers one loader's jobs: reports or counts bad rows, rejects duplicate ids, normalises.
#[derive(Debug)]
pub(crate) struct Collector<'a> {
    path: &'a Path,
    skip_bad_rows: bool,
    /// The column holding the job id, to blame for duplicates.
    id_column: &'static str,
    ids: BTreeSet<String>,
    trace: Trace,
}

impl<'a> Collector<'a> {
    pub(crate) fn new(path: &'a Path, opts: &LoadOptions, id_column: &'static str) -> Self {
        Collector { path, skip_bad_rows: opts.skip_bad_rows, id_column, ids: BTreeSet::new(), trace: Trace::default() }
    }

    /// Takes one row's outcome; a bad row (or a repeated id) fails the load unless skipping.
    pub(crate) fn row(&mut self, line: u64, row: Result<TraceJob, BadRow>) -> Result<(), TraceError> {
        let bad = match row {
            Ok(job) if self.ids.insert(job.id.clone()) => {
                self.trace.jobs.push(job);
                return Ok(());
            }
            Ok(job) => BadRow::new(self.id_column, format!("duplicate id {:?}", job.id)),
            Err(bad) => bad,
        };
        if self.skip_bad_rows {
            self.trace.skipped_rows += 1;
            Ok(())
        } else {
            Err(bad.at(self.path, line))
        }
    }

    pub(crate) fn withdraw(&mut self) {
        self.trace.withdrawn += 1;
    }

    /// Shifts times so the first job submits at 0 and sorts by (submit, id).
    pub(crate) fn finish(self) -> Result<Trace, TraceError> {
        let mut trace = self.trace;
        let Some(origin) = trace.jobs.iter().map(|j| j.submit_s).min() else {
            return Err(TraceError::Empty { path: self.path.into() });
        };
        for job in &mut trace.jobs {
            job.submit_s -= origin;
        }
        trace.jobs.sort_by(|a, b| (a.submit_s, &a.id).cmp(&(b.submit_s, &b.id)));
        Ok(trace)
    }
}

/// A row's value: trimmed, and absent when blank.
pub(crate) fn value(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// A row's value that must be present (and not blank).
pub(crate) fn required<'v>(column: &str, v: &'v Option<String>) -> Result<&'v str, BadRow> {
    value(v).ok_or_else(|| BadRow::new(column, "missing value"))
}

/// Parses a number, naming the column and the expected kind of value on failure.
pub(crate) fn number<T: FromStr>(column: &str, text: &str, expected: &str) -> Result<T, BadRow> {
    text.parse().map_err(|_| BadRow::new(column, format!("expected {expected}, got {text:?}")))
}

const WHOLE: &str = "a whole number ≥ 0";

/// A required whole number (≥ 0, within `T`'s range).
pub(crate) fn whole<T: FromStr>(column: &str, v: &Option<String>) -> Result<T, BadRow> {
    number(column, required(column, v)?, WHOLE)
}

/// An optional whole number, `default` when absent.
pub(crate) fn whole_or<T: FromStr>(column: &str, v: &Option<String>, default: T) -> Result<T, BadRow> {
    value(v).map_or(Ok(default), |text| number(column, text, WHOLE))
}

/// Required seconds to a point in time: a finite number ≥ 0, fractions allowed (callers
/// round), within [`input_limits::TRACE_TIME`].
pub(crate) fn seconds(column: &str, v: &Option<String>) -> Result<f64, BadRow> {
    bounded_seconds(column, v, "a number of seconds ≥ 0", |s| s >= 0.0, input_limits::TRACE_TIME)
}

/// A required run time in seconds: a finite number > 0, fractions allowed (callers round up),
/// within [`input_limits::TRACE_DURATION`].
pub(crate) fn run_seconds(column: &str, v: &Option<String>) -> Result<f64, BadRow> {
    bounded_seconds(column, v, "a number of seconds > 0", |s| s > 0.0, input_limits::TRACE_DURATION)
}

fn bounded_seconds(
    column: &str,
    v: &Option<String>,
    expected: &str,
    allowed: fn(f64) -> bool,
    limit: input_limits::Limit,
) -> Result<f64, BadRow> {
    let text = required(column, v)?;
    match number::<f64>(column, text, expected)? {
        s if s.is_finite() && allowed(s) => {
            limit.check_seconds(s, text).map_err(|over| BadRow::new(column, over.to_string()))
        }
        _ => Err(BadRow::new(column, format!("expected {expected}, got {text:?}"))),
    }
}

/// A `|`-separated flavor list as a sorted set (traces repeat names: `V100M32|V100M32`).
pub(crate) fn flavor_list(text: Option<&str>) -> Vec<String> {
    let names: BTreeSet<&str> = text.unwrap_or_default().split('|').map(str::trim).filter(|s| !s.is_empty()).collect();
    names.into_iter().map(str::to_string).collect()
}

/// Opens CSV text for row-by-row checking. Checks the header: no column twice, every
/// `required` column present and, when `known` is given, no column outside it. Returns the
/// header and the rows with their 1-based line numbers. Fields are trimmed and blank lines
/// skipped; a row whose width differs from the header's is a bad row (the reader is flexible
/// so that such a row still gets a line number).
pub(crate) fn read_csv<'a>(
    text: &'a str,
    path: &Path,
    required: &[&str],
    known: Option<&[&str]>,
) -> Result<(StringRecord, CsvRows<'a>), TraceError> {
    let lines = LineIndex::new(text);
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(true).from_reader(text.as_bytes());
    let headers =
        reader.headers().map_err(|e| BadRow::record(e.to_string()).at(path, lines.line(e.position())))?.clone();
    check_header(&headers, required, known).map_err(|bad| bad.at(path, lines.line(headers.position())))?;
    let rows = CsvRows { width: headers.len(), records: reader.into_records(), lines };
    Ok((headers, rows))
}

/// The rows of [`read_csv`], each with its line.
pub(crate) struct CsvRows<'a> {
    width: usize,
    records: csv::StringRecordsIntoIter<&'a [u8]>,
    lines: LineIndex<'a>,
}

impl Iterator for CsvRows<'_> {
    type Item = (u64, Result<StringRecord, BadRow>);

    fn next(&mut self) -> Option<Self::Item> {
        let (width, lines) = (self.width, &self.lines);
        self.records.by_ref().find_map(|record| match record {
            Err(e) => Some((lines.line(e.position()), Err(BadRow::record(e.to_string())))),
            Ok(r) if r.iter().all(str::is_empty) => None,
            Ok(r) if r.len() != width => {
                let problem = format!("{} fields, but the header has {width}", r.len());
                Some((lines.line(r.position()), Err(BadRow::record(problem))))
            }
            Ok(r) => Some((lines.line(r.position()), Ok(r))),
        })
    }
}

fn check_header(headers: &StringRecord, required: &[&str], known: Option<&[&str]>) -> Result<(), BadRow> {
    for (i, column) in headers.iter().enumerate() {
        if let Some(known) = known.filter(|k| !k.contains(&column)) {
            let problem = format!("unknown column (expected {})", known.join(", "));
            return Err(BadRow::new(column, problem));
        }
        if headers.iter().take(i).any(|c| c == column) {
            return Err(BadRow::new(column, "column appears twice"));
        }
    }
    match required.iter().find(|c| !headers.iter().any(|h| h == **c)) {
        Some(missing) => Err(BadRow::new(*missing, "missing required column")),
        None => Ok(()),
    }
}

/// Line numbers of CSV records. The csv crate's own line count misses blank lines and CRLF
/// line ends, and its byte offset can point at the line break before a record (or before the
/// blank lines it skipped), so line breaks there are passed over before counting.
#[derive(Debug)]
struct LineIndex<'a> {
    text: &'a str,
    /// Byte offsets of every `\n`.
    newlines: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let newlines = text.match_indices('\n').map(|(i, _)| i).collect();
        LineIndex { text, newlines }
    }

    fn line(&self, position: Option<&csv::Position>) -> u64 {
        let Some(byte) = position.and_then(|p| usize::try_from(p.byte()).ok()) else {
            return 0;
        };
        let rest = self.text.as_bytes().get(byte..).unwrap_or_default();
        let start = byte + rest.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
        self.newlines.partition_point(|&n| n < start) as u64 + 1
    }
}

/// Maps a CSV row onto a row struct by header name.
pub(crate) fn deserialize<T: DeserializeOwned>(record: &StringRecord, headers: &StringRecord) -> Result<T, BadRow> {
    record.deserialize(Some(headers)).map_err(|e| BadRow::record(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_display() {
        for f in TraceFormat::ALL {
            assert_eq!(f.to_string().parse::<TraceFormat>(), Ok(f));
        }
        let err = "x".parse::<TraceFormat>().expect_err("unknown");
        assert_eq!(err.to_string(), "unknown trace format \"x\" (expected native, philly or openb)");
    }

    #[test]
    fn blank_text_is_empty() {
        let err = parse(" \n", Path::new("t.csv"), TraceFormat::Native, &LoadOptions::default()).expect_err("empty");
        assert_eq!(err.kind(), "empty");
        assert_eq!(err.to_string(), "t.csv: no usable rows");
    }

    #[test]
    fn missing_file_is_io() {
        let err = load(Path::new("/nonexistent/trace.csv"), TraceFormat::Native, &LoadOptions::default())
            .expect_err("missing");
        assert_eq!(err.kind(), "io");
        assert_eq!(err.to_string(), "/nonexistent/trace.csv", "the cause is the error's source, printed once");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn flavor_lists_are_sets() {
        assert_eq!(flavor_list(Some("b| a |b||")), ["a", "b"]);
        assert!(flavor_list(None).is_empty());
    }
}
