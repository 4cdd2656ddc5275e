//! Where the `hub` target's time goes, per operation: runs every input of a directory (a corpus
//! or an AFL++ queue) through `stowage_fuzz::hub` five times in process, in the instrumented
//! build AFL++ runs, and prints each operation's inputs, mean time and share of the whole. Not a
//! fuzz target: a profile, `fuzz/target/release/hub_ops fuzz/corpus/hub` (docs/testing.md).

use std::collections::BTreeMap;
use std::time::Instant;

const REPEAT: u32 = 5;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: hub_ops DIR (a corpus or an AFL++ queue of the hub target)");
        std::process::exit(2);
    };
    stowage_fuzz::init_hub();
    let mut files: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect(),
        Err(e) => {
            eprintln!("hub_ops: {dir}: {e}");
            std::process::exit(1);
        }
    };
    files.sort();
    // Operation (the first byte's low four bits, as `hub` reads it) → (inputs, seconds per run).
    let mut per: BTreeMap<u8, (u32, f64)> = BTreeMap::new();
    let mut total = 0.0;
    for path in &files {
        let Ok(data) = std::fs::read(path) else { continue };
        let op = data.first().map_or(0, |b| b & 0x0f);
        let start = Instant::now();
        for _ in 0..REPEAT {
            stowage_fuzz::hub(&data);
        }
        let seconds = start.elapsed().as_secs_f64() / f64::from(REPEAT);
        let e = per.entry(op).or_default();
        e.0 += 1;
        e.1 += seconds;
        total += seconds;
    }
    println!("{} inputs, {:.0} inputs/s over the set", files.len(), files.len() as f64 / total.max(f64::EPSILON));
    for (op, (n, seconds)) in per {
        let mean_us = seconds / f64::from(n) * 1e6;
        println!("op {op:2}: {n:5} inputs, mean {mean_us:9.1} µs, {:5.1} % of the time", seconds / total * 100.0);
    }
}
