//! Alibaba GPU v2023 "openb" pod lists (`openb_pod_list_*.csv`): one row per pod, each its own
//! one-pod job (the trace has no gangs).
//!
//! - submit = `creation_time`; duration = `deletion_time` − `scheduled_time`, at least 1 s.
//! - `Pending` pods (empty `scheduled_time`) were deleted before ever running: they are dropped
//!   and counted in `Trace::withdrawn`, not treated as errors.
//! - GPUs per pod = `num_gpu`. A fractional share (`gpu_milli` < 1000, only with 1 GPU) is
//!   rounded up to one whole GPU: the scheduler places whole GPUs only.
//! - Flavors: `gpu_spec` split on `|`, lowercased (as the openb fleet's pool flavors are),
//!   deduplicated and sorted; empty means any.
//! - `qos` is the only class: it becomes the queue (lowercased), and the priority is 1 for
//!   `LS`, `Guaranteed` and `Burstable`, 0 for `BE`.
//! - Times are plain integer seconds; fractions are rounded down.

use std::path::Path;

use scheduler_core::TopologyConstraint;
use serde::Deserialize;

use super::native::POD_SET;
use super::{
    BadRow, Collector, LoadOptions, Trace, TraceError, TraceJob, TracePodSet, deserialize, flavor_list, read_csv,
    required, seconds, value, whole,
};

const COLUMNS: [&str; 10] = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];
const MAX_GPUS: u32 = 8;

#[derive(Debug, Deserialize)]
struct Row {
    name: Option<String>,
    cpu_milli: Option<String>,
    memory_mib: Option<String>,
    num_gpu: Option<String>,
    gpu_milli: Option<String>,
    gpu_spec: Option<String>,
    qos: Option<String>,
    creation_time: Option<String>,
    deletion_time: Option<String>,
    scheduled_time: Option<String>,
}

pub(super) fn parse(text: &str, path: &Path, opts: &LoadOptions) -> Result<Trace, TraceError> {
    let (headers, rows) = read_csv(text, path, &COLUMNS, None)?;
    let mut jobs = Collector::new(path, opts, "name");
    for (line, record) in rows {
        match record.and_then(|r| deserialize(&r, &headers)).and_then(pod) {
            Ok(None) => jobs.withdraw(),
            Ok(Some(job)) => jobs.row(line, Ok(job))?,
            Err(bad) => jobs.row(line, Err(bad))?,
        }
    }
    jobs.finish()
}

/// The pod's job, or `None` when it never ran.
fn pod(row: Row) -> Result<Option<TraceJob>, BadRow> {
    let id = required("name", &row.name)?.to_string();
    let gpus: u32 = whole("num_gpu", &row.num_gpu)?;
    if gpus > MAX_GPUS {
        return Err(BadRow::new("num_gpu", format!("expected 0 to {MAX_GPUS} GPUs, got {gpus}")));
    }
    let gpu_milli: u32 = whole("gpu_milli", &row.gpu_milli)?;
    if gpu_milli > 1000 {
        return Err(BadRow::new("gpu_milli", format!("expected at most 1000, got {gpu_milli}")));
    }
    let qos = required("qos", &row.qos)?.to_ascii_lowercase();
    let priority = match qos.as_str() {
        "ls" | "guaranteed" | "burstable" => 1,
        "be" => 0,
        _ => {
            return Err(BadRow::new("qos", "expected LS, BE, Burstable or Guaranteed"));
        }
    };
    let time = |column: &str, v: &Option<String>| Ok::<_, BadRow>(seconds(column, v)?.floor() as u64);
    let submit_s = time("creation_time", &row.creation_time)?;
    let deleted = time("deletion_time", &row.deletion_time)?;
    let pod_set = TracePodSet {
        name: POD_SET.to_string(),
        pods: 1,
        gpus_per_pod: gpus,
        cpu_milli: whole("cpu_milli", &row.cpu_milli)?,
        memory_mib: whole("memory_mib", &row.memory_mib)?,
        flavors: flavor_list(value(&row.gpu_spec).map(str::to_ascii_lowercase).as_deref()),
        topology: TopologyConstraint::Unconstrained,
    };
    if value(&row.scheduled_time).is_none() {
        return Ok(None);
    }
    let scheduled = time("scheduled_time", &row.scheduled_time)?;
    let ran = deleted.checked_sub(scheduled).ok_or_else(|| {
        BadRow::new("deletion_time", format!("deleted at {deleted} s, before being scheduled at {scheduled} s"))
    })?;
    let ran = input_limits::TRACE_DURATION.check(ran).map_err(|over| {
        BadRow::new("deletion_time", format!("the run time (deletion_time − scheduled_time): {over}"))
    })?;
    Ok(Some(TraceJob { id, submit_s, duration_s: ran.max(1), pod_sets: vec![pod_set], queue: Some(qos), priority }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{LoadOptions, TraceFormat, load, parse as parse_trace};
    use super::*;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/alibaba-gpu-v2023-openb/");

    fn real(file: &str) -> Trace {
        load(&Path::new(DIR).join(file), TraceFormat::Openb, &LoadOptions::default()).expect("openb trace loads")
    }

    #[test]
    fn the_default_pod_list_loads_without_pending_pods() {
        let trace = real("openb_pod_list_default.csv");
        assert_eq!(trace.jobs.len(), 8152 - 897);
        assert_eq!((trace.withdrawn, trace.skipped_rows), (897, 0));
        let mut gpus = BTreeMap::new();
        for job in &trace.jobs {
            *gpus.entry(job.pod_sets[0].gpus_per_pod).or_insert(0) += 1;
        }
        assert_eq!(gpus.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 4, 8]);
        assert!(trace.jobs.iter().all(|j| j.pod_sets[0].flavors.is_empty()));
        let first = &trace.jobs[0];
        assert_eq!((first.id.as_str(), first.submit_s, first.duration_s), ("openb-pod-0000", 0, 12_537_496));
        assert_eq!((first.queue.as_deref(), first.priority), (Some("ls"), 1));
    }

    #[test]
    fn the_gpuspec33_list_carries_deduplicated_flavors() {
        let trace = real("openb_pod_list_gpuspec33.csv");
        assert_eq!(trace.jobs.len(), 8152 - 897);
        let constrained = trace.jobs.iter().filter(|j| !j.pod_sets[0].flavors.is_empty()).count();
        assert!(constrained > 2000, "{constrained}");
        let widest = trace.jobs.iter().map(|j| &j.pod_sets[0].flavors).max_by_key(|f| f.len());
        let expected = ["a10", "g2", "p100", "t4", "v100m16", "v100m32"];
        assert_eq!(widest.map(Vec::as_slice), Some(expected.map(String::from).as_slice()));
    }

    const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    fn parse_text(rows: &str, skip_bad_rows: bool) -> Result<Trace, TraceError> {
        let text = format!("{HEADER}{rows}");
        parse_trace(&text, Path::new("pods.csv"), TraceFormat::Openb, &LoadOptions { skip_bad_rows })
    }

    #[test]
    fn rows_map_to_one_pod_jobs() {
        let rows = "p1,6000,12288,1,460,V100M32|V100M16|V100M32,BE,Running,50,90,60\n\
                    p2,0,0,0,0,,Burstable,Failed,40,40,40\n\
                    p3,1000,1024,8,1000,,LS,Pending,45,100,\n";
        let trace = parse_text(rows, false).expect("loads");
        assert_eq!(trace.withdrawn, 1);
        let [p2, p1] = trace.jobs.as_slice() else { panic!("two jobs: {trace:?}") };
        assert_eq!((p2.submit_s, p2.duration_s, p2.priority), (0, 1, 1));
        assert_eq!(p2.queue.as_deref(), Some("burstable"));
        assert_eq!((p1.submit_s, p1.duration_s, p1.priority), (10, 30, 0));
        let set = &p1.pod_sets[0];
        assert_eq!((set.pods, set.gpus_per_pod, set.cpu_milli, set.memory_mib), (1, 1, 6000, 12288));
        assert_eq!(set.flavors, ["v100m16", "v100m32"]);
    }

    #[test]
    fn bad_rows_name_line_and_column() {
        let ok = "ok,1000,1024,1,1000,,LS,Running,0,10,5\n";
        let cases = [
            ("x,1000,1024,9,1000,,LS,Running,0,10,5\n", "num_gpu"),
            ("x,1000,1024,1,1200,,LS,Running,0,10,5\n", "gpu_milli"),
            ("x,1000,1024,1,1000,,LS,Running,0,4,5\n", "deletion_time"),
            ("x,1000,1024,1,1000,,XX,Running,0,10,5\n", "qos"),
            ("x,1k,1024,1,1000,,LS,Running,0,10,5\n", "cpu_milli"),
            ("x,1000,1024,1,1000,,LS,Pending,,10,\n", "creation_time"),
            ("ok,1000,1024,1,1000,,LS,Running,0,10,5\n", "name"),
            ("x,1000,1024,1,1000,,LS,Running,2e19,3e19,2e19\n", "creation_time"),
            ("x,1000,1024,1,1000,,LS,Running,0,40000000,5\n", "deletion_time"),
        ];
        for (row, column) in cases {
            let err = parse_text(&format!("{ok}{row}"), false).expect_err(column);
            assert!(err.to_string().starts_with(&format!("pods.csv:3: column {column}: ")), "{err}");
            let trace = parse_text(&format!("{ok}{row}"), true).expect("skips");
            assert_eq!((trace.jobs.len(), trace.skipped_rows), (1, 1));
        }
        let err = parse_trace("name,qos\nx,LS\n", Path::new("pods.csv"), TraceFormat::Openb, &LoadOptions::default())
            .expect_err("header");
        assert!(err.to_string().starts_with("pods.csv:1: column cpu_milli: missing required column"), "{err}");
    }
}
