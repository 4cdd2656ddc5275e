//! A fleet from a public trace's machine list, so a trace can be replayed on (a model of) the
//! cluster that ran it. The lists give only GPUs, CPU and memory per machine, so the result is
//! one cluster whose identical machines are grouped into pools, laid out in synthesised racks
//! of 8 hosts and blocks of 4 racks (no trace records topology).
//!
//! - Philly `revised_machine_list.csv` (`,machineId,number of GPUs`): no GPU model, flavor
//!   `philly-gpu`.
//! - Philly `cluster_machine_list` (`machineId, number of GPUs, single GPU mem`): the model is
//!   not given, only memory per GPU; 12GB is taken to be a P100 (`p100-12gb`) and 24GB a P40
//!   (`p40-24gb`), an assumption.
//! - Philly gives no CPU or memory: 8-GPU machines get 32 cores and 256 GiB, smaller ones 16
//!   cores and 128 GiB (an assumption). Machines listed with 0 GPUs are left out: every Philly
//!   job needs GPUs.
//! - openb `openb_node_list_*.csv` (`sn,cpu_milli,memory_mib,gpu,model`): flavor = model
//!   lowercased; nodes without GPUs become pools without a flavor. CPU and memory are rounded
//!   down to whole cores and GiB.
//!
//! - Alibaba PAI 2020 `pai_machine_spec.csv` (`machine,gpu_type,cap_cpu,cap_mem,cap_gpu`, with
//!   or without that header: the published file has none), or the `pai_machine_spec.tar.gz` it
//!   ships in, read in place: flavor = `gpu_type` lowercased (`p100`, `t4`, `v100`, `v100m32`,
//!   `misc`); `CPU` machines become pools without a flavor. `cap_mem` is in GB.
//!
//! Pools are named `FLAVOR-xGPUS` (`p100-12gb-x2`; `cpu` for CPU-only nodes), with
//! `-CORESc-MEMg` appended when machines of one name differ in CPU or memory, and sorted by name.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use scheduler_core::Level;
use serde::Deserialize;

use crate::fleet_file::{ClusterSpec, FleetSpec, LevelSpec, PoolSpec};
use crate::trace::{BadRow, TraceError, deserialize, read_csv, required, value, whole};

const HOSTS_PER_RACK: u32 = 8;
const RACKS_PER_BLOCK: u32 = 4;

/// The machine lists `fleet_from_machine_list` understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MachineListFormat {
    /// Philly `revised_machine_list.csv`.
    PhillyRevised,
    /// Philly `cluster_machine_list`.
    PhillyListed,
    /// openb `openb_node_list_gpu_node.csv` / `openb_node_list_all_node.csv`.
    Openb,
    /// Alibaba PAI 2020 `pai_machine_spec.csv`, or its `.tar.gz`.
    Pai,
}

impl MachineListFormat {
    pub const ALL: [MachineListFormat; 4] = [
        MachineListFormat::PhillyRevised,
        MachineListFormat::PhillyListed,
        MachineListFormat::Openb,
        MachineListFormat::Pai,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MachineListFormat::PhillyRevised => "philly-revised",
            MachineListFormat::PhillyListed => "philly-listed",
            MachineListFormat::Openb => "openb",
            MachineListFormat::Pai => "pai",
        }
    }

    /// The cluster's name: the trace the list comes from.
    fn cluster(self) -> &'static str {
        match self {
            MachineListFormat::PhillyRevised | MachineListFormat::PhillyListed => "philly",
            MachineListFormat::Openb => "openb",
            MachineListFormat::Pai => "pai",
        }
    }

    fn id_column(self) -> &'static str {
        match self {
            MachineListFormat::Openb => "sn",
            MachineListFormat::Pai => "machine",
            _ => MACHINE_ID,
        }
    }

    fn columns(self) -> &'static [&'static str] {
        match self {
            MachineListFormat::PhillyRevised => &[MACHINE_ID, PHILLY_GPUS],
            MachineListFormat::PhillyListed => &[MACHINE_ID, PHILLY_GPUS, PHILLY_MEMORY],
            MachineListFormat::Openb => &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
            MachineListFormat::Pai => &PAI_COLUMNS,
        }
    }
}

impl fmt::Display for MachineListFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown machine list format {0:?} (expected philly-revised, philly-listed, openb or pai)")]
pub struct UnknownMachineListFormat(pub String);

impl FromStr for MachineListFormat {
    type Err = UnknownMachineListFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MachineListFormat::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownMachineListFormat(s.to_string()))
    }
}

const MACHINE_ID: &str = "machineId";
const PHILLY_GPUS: &str = "number of GPUs";
const PHILLY_MEMORY: &str = "single GPU mem";
/// The published file has no header row; `pai_machine_spec.header` names its columns.
const PAI_COLUMNS: [&str; 5] = ["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"];

#[derive(Debug, Deserialize)]
struct PaiRow {
    machine: Option<String>,
    gpu_type: Option<String>,
    cap_cpu: Option<String>,
    cap_mem: Option<String>,
    cap_gpu: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PhillyRow {
    #[serde(rename = "machineId")]
    id: Option<String>,
    #[serde(rename = "number of GPUs")]
    gpus: Option<String>,
    #[serde(rename = "single GPU mem")]
    memory: Option<String>,
}

#[derive(Debug, Deserialize)]
struct OpenbRow {
    sn: Option<String>,
    cpu_milli: Option<String>,
    memory_mib: Option<String>,
    gpu: Option<String>,
    model: Option<String>,
}

/// One machine's shape: machines of equal shape share a pool.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Shape {
    pub(crate) flavor: Option<String>,
    pub(crate) gpus: u32,
    pub(crate) cpu_cores: u32,
    pub(crate) memory_gib: u32,
}

/// Reads a machine list into a one-cluster fleet. The first bad row is an error.
pub fn fleet_from_machine_list(path: &Path, format: MachineListFormat) -> Result<FleetSpec, TraceError> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let text = if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        csv_in_tar_gz(path).map_err(|source| TraceError::Io { path: path.into(), source })?
    } else {
        crate::trace::read(path)?
    };
    parse_machine_list(&text, path, format)
}

/// The first `.csv` file in a gzip'd tar, at most `MAX_TRACE_FILE_BYTES` of it decompressed:
/// a small archive that inflates without end is refused, not read.
fn csv_in_tar_gz(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    let limit = input_limits::TRACE_FILE_BYTES;
    let file = std::fs::File::open(path)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file.take(limit.max)));
    for entry in archive.entries()? {
        let entry = entry?;
        if !entry.path()?.to_string_lossy().ends_with(".csv") {
            continue;
        }
        let mut text = String::new();
        entry.take(limit.max.saturating_add(1)).read_to_string(&mut text)?;
        if text.len() as u64 > limit.max {
            let problem = format!("its CSV is larger than {} {} ({})", limit.max, limit.unit, limit.name);
            return Err(Error::new(ErrorKind::FileTooLarge, problem));
        }
        return Ok(text);
    }
    Err(Error::new(ErrorKind::InvalidData, "the archive holds no .csv file"))
}

/// As [`fleet_from_machine_list`], on text in memory; `path` only names it in errors.
pub fn parse_machine_list(text: &str, path: &Path, format: MachineListFormat) -> Result<FleetSpec, TraceError> {
    // PAI's list as published has no header row: give it one, and its rows their own lines.
    let headerless = format == MachineListFormat::Pai
        && text.trim_start().split(',').next().is_none_or(|first| first.trim() != PAI_COLUMNS[0]);
    let with_header;
    let (text, shift) = if headerless {
        with_header = format!("{}\n{text}", PAI_COLUMNS.join(","));
        (with_header.as_str(), 1)
    } else {
        (text, 0)
    };
    let (headers, rows) = read_csv(text, path, format.columns(), None)?;
    let mut ids = BTreeSet::new();
    let mut shapes: BTreeMap<Shape, u32> = BTreeMap::new();
    for (line, record) in rows {
        let machine = record
            .and_then(|r| match format {
                MachineListFormat::Openb => openb(deserialize(&r, &headers)?),
                MachineListFormat::Pai => pai(deserialize(&r, &headers)?),
                _ => philly(deserialize(&r, &headers)?, format == MachineListFormat::PhillyListed),
            })
            .and_then(|m| match m {
                Some((id, _)) if !ids.insert(id.clone()) => {
                    Err(BadRow::new(format.id_column(), format!("duplicate machine {id:?}")))
                }
                m => Ok(m),
            })
            .map_err(|bad| bad.at(path, line - shift))?;
        if let Some((_, shape)) = machine {
            *shapes.entry(shape).or_default() += 1;
        }
    }
    if shapes.is_empty() {
        return Err(TraceError::Empty { path: path.into() });
    }
    Ok(FleetSpec { clusters: vec![cluster(format.cluster(), shapes)] })
}

/// A Philly machine, or `None` for one without GPUs.
fn philly(row: PhillyRow, listed: bool) -> Result<Option<(String, Shape)>, BadRow> {
    let id = required(MACHINE_ID, &row.id)?;
    let gpus: u32 = whole(PHILLY_GPUS, &row.gpus)?;
    if gpus == 0 {
        return Ok(None);
    }
    let flavor = if listed {
        let memory = required(PHILLY_MEMORY, &row.memory)?;
        philly_flavor(memory).ok_or_else(|| BadRow::new(PHILLY_MEMORY, "expected 12GB or 24GB"))?
    } else {
        "philly-gpu"
    };
    let (cpu_cores, memory_gib) = if gpus >= 8 { (32, 256) } else { (16, 128) };
    let shape = Shape { flavor: Some(flavor.to_string()), gpus, cpu_cores, memory_gib };
    Ok(Some((id.to_string(), shape)))
}

/// The listed Philly machines name GPU memory, not the model: 12 GB is taken to be a P100,
/// 24 GB a P40.
fn philly_flavor(memory: &str) -> Option<&'static str> {
    match memory.to_ascii_lowercase().as_str() {
        "12gb" => Some("p100-12gb"),
        "24gb" => Some("p40-24gb"),
        _ => None,
    }
}

fn openb(row: OpenbRow) -> Result<Option<(String, Shape)>, BadRow> {
    let id = required("sn", &row.sn)?;
    let gpus = whole::<u32>("gpu", &row.gpu)?;
    let model = value(&row.model);
    if gpus > 0 && model.is_none() {
        return Err(BadRow::new("model", format!("missing the GPU model of a node with {gpus} GPUs")));
    }
    let shape = Shape {
        flavor: model.filter(|_| gpus > 0).map(str::to_ascii_lowercase),
        gpus,
        cpu_cores: whole::<u32>("cpu_milli", &row.cpu_milli)? / 1000,
        memory_gib: whole::<u32>("memory_mib", &row.memory_mib)? / 1024,
    };
    Ok(Some((id.to_string(), shape)))
}

fn pai(row: PaiRow) -> Result<Option<(String, Shape)>, BadRow> {
    let id = required("machine", &row.machine)?;
    let gpu_type = required("gpu_type", &row.gpu_type)?;
    let gpus = whole::<u32>("cap_gpu", &row.cap_gpu)?;
    let cpu_only = gpu_type.eq_ignore_ascii_case("CPU");
    if cpu_only && gpus > 0 {
        return Err(BadRow::new("cap_gpu", format!("a CPU machine with {gpus} GPUs")));
    }
    let shape = Shape {
        flavor: (!cpu_only && gpus > 0).then(|| gpu_type.to_ascii_lowercase()),
        gpus,
        cpu_cores: whole::<u32>("cap_cpu", &row.cap_cpu)?,
        memory_gib: whole::<u32>("cap_mem", &row.cap_mem)?,
    };
    Ok(Some((id.to_string(), shape)))
}

/// One cluster of `shapes` (machines per shape), pooled and laid out as the module says.
pub(crate) fn cluster(name: &str, shapes: BTreeMap<Shape, u32>) -> ClusterSpec {
    let base = |s: &Shape| match &s.flavor {
        Some(flavor) => format!("{flavor}-x{}", s.gpus),
        None => "cpu".to_string(),
    };
    let mut uses: BTreeMap<String, u32> = BTreeMap::new();
    for shape in shapes.keys() {
        *uses.entry(base(shape)).or_default() += 1;
    }
    let fanout = BTreeMap::from([(Level::Rack, HOSTS_PER_RACK), (Level::Block, RACKS_PER_BLOCK)]);
    let mut pools: Vec<PoolSpec> = shapes
        .into_iter()
        .map(|(shape, nodes)| {
            let mut name = base(&shape);
            if uses.get(&name).is_some_and(|&n| n > 1) {
                name = format!("{name}-{}c-{}g", shape.cpu_cores, shape.memory_gib);
            }
            PoolSpec {
                name,
                gpu_flavor: shape.flavor,
                gpus_per_node: shape.gpus,
                cpu_cores: shape.cpu_cores,
                memory_gib: shape.memory_gib,
                nodes,
                fanout: fanout.clone(),
            }
        })
        .collect();
    pools.sort_by(|a, b| a.name.cmp(&b.name));
    ClusterSpec {
        name: name.to_string(),
        labels: BTreeMap::new(),
        cost_weight: 0,
        topology: [Level::Block, Level::Rack].map(|level| LevelSpec { level, label: None }).into(),
        pools,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/");

    fn real(file: &str, format: MachineListFormat) -> ClusterSpec {
        let mut fleet = fleet_from_machine_list(&Path::new(TRACES).join(file), format).expect("machine list loads");
        assert_eq!(fleet.clusters.len(), 1);
        fleet.clusters.remove(0)
    }

    fn gpus(cluster: &ClusterSpec) -> u32 {
        cluster.pools.iter().map(|p| p.nodes * p.gpus_per_node).sum()
    }

    fn summary(cluster: &ClusterSpec) -> Vec<(&str, u32)> {
        cluster.pools.iter().map(|p| (p.name.as_str(), p.nodes)).collect()
    }

    #[test]
    fn philly_revised_list_has_3205_gpus() {
        let philly = real("philly-2017/revised_machine_list.csv", MachineListFormat::PhillyRevised);
        assert_eq!(gpus(&philly), 3205);
        assert_eq!(
            summary(&philly),
            [("philly-gpu-x2", 3), ("philly-gpu-x3", 1), ("philly-gpu-x4", 271), ("philly-gpu-x8", 264)]
        );
        assert_eq!(philly.name, "philly");
        let levels: Vec<_> = philly.topology.iter().map(|l| (l.level, l.label.clone())).collect();
        assert_eq!(levels, [(Level::Block, None), (Level::Rack, None)]);
        let x8 = &philly.pools[3];
        assert_eq!((x8.cpu_cores, x8.memory_gib, x8.gpu_flavor.as_deref()), (32, 256, Some("philly-gpu")));
        assert_eq!(x8.fanout, BTreeMap::from([(Level::Block, 4), (Level::Rack, 8)]));
        assert_eq!((philly.pools[0].cpu_cores, philly.pools[0].memory_gib), (16, 128));
    }

    #[test]
    fn philly_listed_machines_have_2490_gpus() {
        let philly = real("philly-2017/cluster_machine_list", MachineListFormat::PhillyListed);
        assert_eq!(gpus(&philly), 2490);
        assert_eq!(summary(&philly), [("p100-12gb-x2", 321), ("p40-24gb-x8", 231)]);
    }

    #[test]
    fn openb_gpu_nodes_have_6212_gpus() {
        let openb = real("alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv", MachineListFormat::Openb);
        assert_eq!(gpus(&openb), 6212);
        assert_eq!(openb.pools.iter().map(|p| p.nodes).sum::<u32>(), 1213);
        assert!(openb.pools.iter().all(|p| p.gpu_flavor.is_some()));
        let g2 = openb.pools.iter().find(|p| p.name == "g2-x8").expect("g2 pool");
        assert_eq!((g2.nodes, g2.cpu_cores, g2.memory_gib), (549, 96, 384));
        // V100M16 8-GPU nodes come in two shapes.
        assert!(openb.pools.iter().any(|p| p.name == "v100m16-x8-64c-256g"));
        let mut names: Vec<_> = openb.pools.iter().map(|p| &p.name).collect();
        names.dedup();
        assert_eq!(names.len(), openb.pools.len());
    }

    #[test]
    fn openb_cpu_nodes_become_pools_without_flavor() {
        let openb = real("alibaba-gpu-v2023-openb/openb_node_list_all_node.csv", MachineListFormat::Openb);
        assert_eq!(gpus(&openb), 6212);
        let cpu: u32 = openb.pools.iter().filter(|p| p.gpu_flavor.is_none()).map(|p| p.nodes).sum();
        assert_eq!(cpu, 310);
        assert!(openb.pools.iter().any(|p| p.name == "cpu-32c-256g"));
    }

    #[test]
    fn bad_machine_rows_name_line_and_column() {
        let cases = [
            (
                "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,2, 16GB\n",
                MachineListFormat::PhillyListed,
                "a.csv:3: column single GPU mem: ",
            ),
            (
                "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm0,8, 24GB\n",
                MachineListFormat::PhillyListed,
                "a.csv:3: column machineId: ",
            ),
            (
                ",machineId,number of GPUs\n0,m0,eight\n",
                MachineListFormat::PhillyRevised,
                "a.csv:2: column number of GPUs: ",
            ),
            (
                "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n",
                MachineListFormat::Openb,
                "a.csv:2: column model: ",
            ),
            ("sn,cpu_milli,memory_mib,gpu\n", MachineListFormat::Openb, "a.csv:1: column model: "),
        ];
        for (text, format, start) in cases {
            let err = parse_machine_list(text, Path::new("a.csv"), format).expect_err(start);
            assert!(err.to_string().starts_with(start), "{err}");
        }
        let err = parse_machine_list(
            ",machineId,number of GPUs\n0,m0,0\n",
            Path::new("a.csv"),
            MachineListFormat::PhillyRevised,
        )
        .expect_err("no GPU machines");
        assert_eq!(err.kind(), "empty");
    }

    #[test]
    fn the_pai_fleet_loads_from_its_archive_with_its_published_counts() {
        let pai = real("alibaba-gpu-v2020-pai/pai_machine_spec.tar.gz", MachineListFormat::Pai);
        assert_eq!(pai.name, "pai");
        let machines: u32 = pai.pools.iter().map(|p| p.nodes).sum();
        let gpus: u32 = pai.pools.iter().map(|p| p.nodes * p.gpus_per_node).sum();
        assert_eq!((machines, gpus), (1_897, 6_742), "the README's counts");
        let per_flavor = |f: &str| -> u32 {
            pai.pools.iter().filter(|p| p.gpu_flavor.as_deref() == Some(f)).map(|p| p.nodes * p.gpus_per_node).sum()
        };
        assert_eq!(
            ["misc", "p100", "v100m32", "t4", "v100"].map(per_flavor),
            [2_240, 1_596, 1_080, 994, 832],
            "MISC, P100, V100M32, T4 and V100 as the README counts them"
        );
        let cpu_only: u32 = pai.pools.iter().filter(|p| p.gpu_flavor.is_none()).map(|p| p.nodes).sum();
        assert_eq!(cpu_only, 83);
    }

    #[test]
    fn a_headerless_pai_list_keeps_its_line_numbers_and_a_bad_row_is_named() {
        let ok = parse_machine_list("m0,V100,96,512,8\nm1,CPU,64,384,0\n", Path::new("p.csv"), MachineListFormat::Pai)
            .expect("loads");
        assert_eq!(ok.clusters[0].pools.len(), 2);
        let with_header = "machine,gpu_type,cap_cpu,cap_mem,cap_gpu\nm0,V100,96,512,8\n";
        assert!(parse_machine_list(with_header, Path::new("p.csv"), MachineListFormat::Pai).is_ok());
        let cases = [
            ("m0,V100,96,512,8\nm1,T4,96,512,two\n", "p.csv:2: column cap_gpu: "),
            ("m0,CPU,96,512,8\n", "p.csv:1: column cap_gpu: a CPU machine with 8 GPUs"),
            ("m0,V100,96,512,8\nm0,V100,96,512,8\n", "p.csv:2: column machine: duplicate machine"),
            ("machine,gpu_type,cap_cpu,cap_mem,cap_gpu\nm0,,96,512,8\n", "p.csv:2: column gpu_type: "),
        ];
        for (text, start) in cases {
            let err = parse_machine_list(text, Path::new("p.csv"), MachineListFormat::Pai).expect_err(start);
            assert!(err.to_string().starts_with(start), "{err}");
        }
    }

    #[test]
    fn an_archive_without_a_csv_or_not_gzip_is_an_io_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("stowage-pai-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bogus = dir.join("machines.tar.gz");
        std::fs::write(&bogus, b"not gzip at all").expect("write");
        let err = fleet_from_machine_list(&bogus, MachineListFormat::Pai).expect_err("not gzip");
        assert_eq!(err.kind(), "io");
        assert!(err.to_string().contains("machines.tar.gz"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn formats_parse_and_display() {
        for f in MachineListFormat::ALL {
            assert_eq!(f.to_string().parse::<MachineListFormat>(), Ok(f));
        }
        assert!("philly".parse::<MachineListFormat>().is_err());
    }
}
