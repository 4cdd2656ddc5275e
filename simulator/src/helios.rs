//! SenseTime Helios 2020 (Hu et al., SC'21): one cluster's virtual clusters (VCs) on one day, as
//! a fleet and as Kueue-style queues. The file is `Venus/cluster_gpu_number.csv` or
//! `Earth/Earth_gpu_number.csv` (shared/traces/helios-2020): a row per day, a column per VC
//! giving its GPUs that day, and `total`.
//!
//! - **Fleet**: the cluster that day, one node per 8 GPUs of `total`, each 8 × V100 with 48
//!   threads and 376 GB (HeliosArtifact's environment file), flavor `v100`, in the racks of 8
//!   hosts and blocks of 4 racks that machine lists get (no trace records topology).
//! - **Queues**: every VC with GPUs that day, its GPUs as nominal `nvidia.com/gpu` quota on
//!   `v100`, all in one cohort: a VC borrows what the others leave idle and takes its own back
//!   by preempting borrowers (`reclaimWithinCohort: Any`), the layout Kueue documents for teams
//!   sharing a cluster. (Helios itself partitioned its VCs; a partition idles GPUs a cohort
//!   lends.) Within a VC, higher priority may preempt lower, as for every simulated queue.

use std::collections::BTreeMap;
use std::path::Path;

use scheduler_core::{QueuePreemption, QueueSpec, QueueingStrategy, Quota, ReclaimWithinCohort, Resource, WithinQueue};

use crate::fleet_file::FleetSpec;
use crate::machines::{Shape, cluster};
use crate::trace::{BadRow, TraceError, read, read_csv, required, whole};

/// The GPU flavor of the Helios fleet, which the quotas are for.
pub const FLAVOR: &str = "v100";
/// The cohort every VC is in.
pub const COHORT: &str = "helios";
const GPUS_PER_NODE: u32 = 8;

/// A Helios cluster's VCs on one day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Day {
    pub date: String,
    /// Each VC with its GPUs that day, in the file's column order (VCs with none included).
    pub vcs: Vec<(String, u32)>,
    pub total_gpus: u32,
}

/// Reads the VC file and picks `date` (`None`: the first day).
pub fn load(path: &Path, date: Option<&str>) -> Result<Day, TraceError> {
    parse(&read(path)?, path, date)
}

/// As [`load`], on text in memory; `path` only names it in errors. Every row must parse and
/// add up to its `total`; the chosen day's `total` must be whole 8-GPU nodes.
pub fn parse(text: &str, path: &Path, date: Option<&str>) -> Result<Day, TraceError> {
    let (headers, rows) = read_csv(text, path, &["date", "total"], None)?;
    let vc_columns: Vec<(usize, &str)> =
        headers.iter().enumerate().filter(|(_, h)| !matches!(*h, "date" | "total")).collect();
    if vc_columns.is_empty() {
        return Err(BadRow::record("no VC columns besides date and total").at(path, 1));
    }
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap_or(0);
    let (date_at, total_at) = (column("date"), column("total"));
    let mut days = Vec::new();
    for (line, record) in rows {
        let day = record
            .and_then(|r| {
                let field = |i: usize| Some(r.get(i).unwrap_or_default().to_string());
                let vcs = vc_columns
                    .iter()
                    .map(|&(i, name)| Ok((name.to_string(), whole::<u32>(name, &field(i))?)))
                    .collect::<Result<Vec<_>, BadRow>>()?;
                let total_gpus = whole::<u32>("total", &field(total_at))?;
                let sum: u64 = vcs.iter().map(|(_, g)| u64::from(*g)).sum();
                if sum != u64::from(total_gpus) {
                    return Err(BadRow::new("total", format!("{total_gpus} GPUs, but the VCs add up to {sum}")));
                }
                Ok(Day { date: required("date", &field(date_at))?.to_string(), vcs, total_gpus })
            })
            .map_err(|bad| bad.at(path, line))?;
        days.push((line, day));
    }
    let (first, last) = match (days.first(), days.last()) {
        (Some((_, f)), Some((_, l))) => (f.date.clone(), l.date.clone()),
        _ => return Err(TraceError::Empty { path: path.into() }),
    };
    let (line, day) = match date {
        None => days.swap_remove(0),
        Some(d) => days.into_iter().find(|(_, day)| day.date == d.trim()).ok_or_else(|| {
            BadRow::new("date", format!("no row for {d:?} (the file has {first} to {last})")).at(path, 1)
        })?,
    };
    if day.total_gpus == 0 || day.total_gpus % GPUS_PER_NODE != 0 {
        let problem = format!("{} GPUs on {} is not a whole number of 8-GPU nodes", day.total_gpus, day.date);
        return Err(BadRow::new("total", problem).at(path, line));
    }
    Ok(day)
}

impl Day {
    /// The cluster that day (module docs).
    pub fn fleet(&self) -> FleetSpec {
        let shape = Shape { flavor: Some(FLAVOR.into()), gpus: GPUS_PER_NODE, cpu_cores: 48, memory_gib: 376 };
        FleetSpec { clusters: vec![cluster("helios", BTreeMap::from([(shape, self.total_gpus / GPUS_PER_NODE)]))] }
    }

    /// A queue per VC with GPUs that day (module docs).
    pub fn queues(&self) -> Vec<QueueSpec> {
        let preemption = QueuePreemption {
            within_queue: WithinQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Any,
            ..QueuePreemption::default()
        };
        self.vcs
            .iter()
            .filter(|(_, gpus)| *gpus > 0)
            .map(|(name, gpus)| QueueSpec {
                name: name.clone(),
                cohort: Some(COHORT.into()),
                strategy: QueueingStrategy::BestEffortFifo,
                weight: 1,
                quotas: vec![Quota {
                    flavor: FLAVOR.into(),
                    resource: Resource::Gpu,
                    nominal: u64::from(*gpus),
                    borrowing_limit: None,
                    lending_limit: None,
                }],
                preemption,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VENUS: &str =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/helios-2020/Venus/cluster_gpu_number.csv");
    const EARTH: &str =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/helios-2020/Earth/Earth_gpu_number.csv");

    fn err(text: &str, date: Option<&str>) -> String {
        parse(text, Path::new("vc.csv"), date).expect_err("refused").to_string()
    }

    #[test]
    fn venus_on_its_first_and_last_day_as_fleet_and_queues() {
        let first = load(Path::new(VENUS), None).expect("loads");
        assert_eq!((first.date.as_str(), first.total_gpus, first.vcs.len()), ("2020-04-01", 968, 25));
        let queues = first.queues();
        assert_eq!(queues.len(), 18, "VCs with GPUs that day");
        assert_eq!(queues.iter().map(|q| q.quotas[0].nominal).sum::<u64>(), 968);
        assert!(queues.iter().all(|q| q.cohort.as_deref() == Some(COHORT) && q.quotas[0].flavor == FLAVOR));
        assert_eq!(queues.iter().find(|q| q.name == "vcEwI").map(|q| q.quotas[0].nominal), Some(72));
        let fleet = first.fleet().build("venus").expect("builds");
        assert_eq!((fleet.total_gpus(), fleet.hosts().count()), (968, 121));
        scheduler_core::Queues::new(queues).expect("valid queues");

        let last = load(Path::new(VENUS), Some("2020-09-28")).expect("loads");
        assert_eq!(last.date, "2020-09-28");
        assert_eq!(last.fleet().build("venus").expect("builds").total_gpus(), u64::from(last.total_gpus));
        let earth = load(Path::new(EARTH), None).expect("loads");
        assert_eq!(earth.total_gpus, 784);
    }

    #[test]
    fn bad_files_are_refused_naming_line_and_column() {
        let ok = "date,vcA,vcB,total\n2020-04-01,8,8,16\n2020-04-02,16,8,24\n";
        assert_eq!(parse(ok, Path::new("vc.csv"), Some("2020-04-02")).expect("parses").total_gpus, 24);
        let e = err(ok, Some("2021-01-01"));
        assert!(e.contains("vc.csv:1: column date") && e.contains("2020-04-01 to 2020-04-02"), "{e}");
        let e = err("date,vcA,vcB,total\n2020-04-01,8,8,24\n", None);
        assert!(e.contains("vc.csv:2: column total: 24 GPUs, but the VCs add up to 16"), "{e}");
        let e = err("date,vcA,total\n2020-04-01,8,8\n2020-04-02,x,8\n", None);
        assert!(e.contains("vc.csv:3: column vcA") && e.contains("\"x\""), "{e}");
        let e = err("date,vcA,total\n2020-04-01,-8,-8\n", None);
        assert!(e.contains("column vcA"), "{e}");
        let e = err("date,vcA,total\n2020-04-01,12,12\n", None);
        assert!(e.contains("column total: 12 GPUs on 2020-04-01 is not a whole number of 8-GPU nodes"), "{e}");
        let e = err("date,vcA,total\n2020-04-01,0,0\n", None);
        assert!(e.contains("column total"), "{e}");
        let e = err("date,total\n2020-04-01,8\n", None);
        assert!(e.contains("no VC columns"), "{e}");
        let e = err("date,vcA\n2020-04-01,8\n", None);
        assert!(e.contains("total"), "{e}");
        let e = err("date,vcA,total\n", None);
        assert!(e.contains("no usable rows"), "{e}");
        let e = err("date,vcA,total\n2020-04-01,4294967295,4294967295\n2020-04-02,4294967296,0\n", None);
        assert!(e.contains("vc.csv:3: column vcA"), "{e}");
    }
}
