//! Figures quoted in docs/ come from the commands beside them: each block between
//! `<!-- figures: NAME -->` and `<!-- /figures -->` is what its generator here prints now, and
//! this test fails when a doc quotes figures the code no longer gives. `scripts/doc-figures`
//! (this test with `STOWAGE_BLESS=1`) writes them anew after a change that moves them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;

const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// A block of figures in a doc, and what prints it.
struct Block {
    doc: &'static str,
    name: &'static str,
    print: fn(&Path) -> String,
}

const BLOCKS: &[Block] = &[
    Block { doc: "kueue.md", name: "kueue-dispatchers", print: kueue_dispatchers },
    Block { doc: "policy.md", name: "locality-patience", print: locality_patience },
    Block { doc: "policy.md", name: "policy-targets", print: policy_targets },
    Block { doc: "performance.md", name: "philly-quality", print: philly_quality },
    Block { doc: "performance.md", name: "philly-loads", print: philly_loads },
    Block { doc: "performance.md", name: "pai-synthetic", print: pai_synthetic },
    Block { doc: "performance.md", name: "synthetic-loads", print: synthetic_loads },
    Block { doc: "performance.md", name: "pai-loads", print: pai_loads },
];

/// The four policies of the default run, in its order.
const DEFAULT_POLICIES: [&str; 4] = ["stowage", "fifo-firstfit", "kueue-multikueue", "volcano-binpack"];

fn f64_at(p: &Value, path: &[&str]) -> f64 {
    path.iter().fold(p, |v, k| &v[*k]).as_f64().unwrap_or(f64::NAN)
}

fn policy<'r>(report: &'r Value, name: &str) -> &'r Value {
    report["policies"].as_array().into_iter().flatten().find(|p| p["name"] == name).expect("the policy ran")
}

/// `stowage simulate ARGS --json FILE`: the report.
fn simulate(scratch: &Path, tag: &str, args: &[&str]) -> Value {
    simulate_all(scratch, &[(tag.to_string(), args.iter().map(|a| a.to_string()).collect())]).remove(0)
}

/// Several `stowage simulate` runs at once (each is one thread): their reports, in order. A
/// tag names its arguments: a report this scratch already holds for it is read again, not made
/// again (two tables quote the same PAI runs).
fn simulate_all(scratch: &Path, runs: &[(String, Vec<String>)]) -> Vec<Value> {
    let read =
        |json: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(json).expect("report")).expect("JSON") };
    let children: Vec<_> = runs
        .iter()
        .map(|(tag, args)| {
            let json = scratch.join(format!("{tag}.json"));
            if json.exists() {
                return (json, args, None);
            }
            let child = Command::new(env!("CARGO_BIN_EXE_stowage"))
                .arg("simulate")
                .args(args)
                .arg("--json")
                .arg(&json)
                .current_dir(REPO)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("stowage simulate runs");
            (json, args, Some(child))
        })
        .collect();
    children
        .into_iter()
        .map(|(json, args, child)| {
            if let Some(child) = child {
                let out = child.wait_with_output().expect("stowage simulate ends");
                assert!(out.status.success(), "simulate {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            }
            read(&json)
        })
        .collect()
}

/// Seconds as hours to `places` decimals: `8.40 h`.
fn hours_to(s: f64, places: usize) -> String {
    format!("{:.places$} h", s / 3600.0)
}

/// A share in percent, one decimal: `81.8%`.
fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A report's seconds as hours, two decimals.
fn hours(s: &Value) -> String {
    hours_to(s.as_f64().unwrap_or(f64::NAN), 2)
}

/// A report's share in percent, spaced as docs/kueue.md writes it: `81.8 %`.
fn percent(x: &Value) -> String {
    pct(x.as_f64().unwrap_or(f64::NAN)).replace('%', " %")
}

/// docs/kueue.md: MultiKueue's two dispatchers against Stowage as the external one and Stowage
/// alone, on the built-in trace, two fleets, two loads and urgent jobs.
fn kueue_dispatchers(scratch: &Path) -> String {
    const POLICIES: &str = "kueue-multikueue,kueue-incremental,stowage-as-dispatcher,stowage";
    const SIX: &str = "examples/fleets/six-members.yaml";
    type Figure = (&'static str, fn(&Value) -> String);
    let delay: Figure = ("mean queueing delay", |p| hours(&p["queueing_delay_s"]["mean"]));
    let p99: Figure = ("p99 queueing delay", |p| hours(&p["queueing_delay_s"]["p99"]));
    let jct: Figure = ("mean JCT", |p| hours(&p["jct_s"]["mean"]));
    let rack: Figure = ("gangs inside one rack", |p| percent(&p["locality"]["within_rack"]));
    let busy: Figure = ("GPU utilisation", |p| percent(&p["gpu_utilisation"]));
    let urgent: Figure = ("urgent jobs' mean delay", |p| {
        let delay = hours(&p["preemption"]["high_priority_mean_delay_s"]);
        match p["preemption"]["preemptions"].as_u64().unwrap_or(0) {
            0 => delay,
            n => format!("{delay} ({n} preemptions)"),
        }
    });
    let runs: [(&str, Vec<&str>, Vec<Figure>); 5] = [
        ("built-in, 1×", vec![], vec![delay, jct, rack]),
        ("built-in, 2×", vec!["--load-scale", "2"], vec![delay, p99, busy]),
        ("six members, 1×", vec!["--fleet", SIX], vec![delay, jct, rack]),
        ("six members, 2×", vec!["--fleet", SIX, "--load-scale", "2"], vec![delay, p99]),
        ("six members, 1×, 10 % urgent", vec!["--fleet", SIX, "--urgent", "10"], vec![delay, urgent]),
    ];
    let names: Vec<&str> = POLICIES.split(',').collect();
    let mut out = format!("| fleet, load | figure | {} |\n", names.join(" | "));
    out.push_str(&format!("|{}\n", " --- |".repeat(names.len() + 2)));
    for (i, (label, args, figures)) in runs.iter().enumerate() {
        let mut all = vec!["--policy", POLICIES];
        all.extend(args);
        let report = simulate(scratch, &format!("kueue-{i}"), &all);
        let policies = report["policies"].as_array().expect("policies");
        for (j, (figure, of)) in figures.iter().enumerate() {
            let first = if j == 0 { *label } else { "" };
            let cells: Vec<String> = names
                .iter()
                .map(|n| policies.iter().find(|p| p["name"] == *n).map_or_else(|| "?".to_string(), of))
                .collect();
            let row = format!("| {first} | {figure} | {} |\n", cells.join(" | "));
            out.push_str(&row.replacen("|  |", "| |", 1));
        }
    }
    out
}

/// docs/policy.md: locality patience alone (no cost model), swept, on the built-in fleet and
/// trace.
fn locality_patience(scratch: &Path) -> String {
    let settings = [
        ("off", "none"),
        ("30 min, 2 h", "30m,2h"),
        ("2 h, 8 h", "2h,8h"),
        ("1 d, 7 d", "1d,7d"),
        ("5 d, 10 d", "5d,10d"),
        ("**7 d, 14 d**", "7d,14d"),
        ("1000 d, 1000 d", "1000d,1000d"),
    ];
    let mut out = String::from(
        "| EXACT, WIDER | mean queueing delay | p99 | inside one rack | inside one block |\n|---|---|---|---|---|\n",
    );
    for (i, (label, patience)) in settings.iter().enumerate() {
        let args = ["--policy", "stowage", "--locality-cost", "none", "--locality-patience", patience];
        let report = simulate(scratch, &format!("patience-{i}"), &args);
        let p = &report["policies"][0];
        let cells = [
            hours(&p["queueing_delay_s"]["mean"]),
            hours_to(f64_at(p, &["queueing_delay_s", "p99"]), 1),
            pct(f64_at(p, &["locality", "within_rack"])),
            pct(f64_at(p, &["locality", "within_block"])),
        ];
        // The default's row in bold, as its label.
        let cells: Vec<String> =
            cells.into_iter().map(|c| if label.starts_with("**") { format!("**{c}**") } else { c }).collect();
        out.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    }
    out
}

/// docs/policy.md: the default run (four policies, built-in fleet and trace) against the
/// targets the policy was set to meet.
fn policy_targets(scratch: &Path) -> String {
    let report = simulate(scratch, "targets", &[]);
    let names = DEFAULT_POLICIES;
    let of = |name: &str| policy(&report, name);
    let ours = of("stowage");
    let mean = |p: &Value| f64_at(p, &["queueing_delay_s", "mean"]);
    let wait = |p: &Value, size: &str| {
        let w = p["max_wait_by_size"].as_array().into_iter().flatten().find(|w| w["gpus"] == size);
        hours_to(w.and_then(|w| w["max_wait_s"].as_f64()).unwrap_or(f64::NAN), 1)
    };
    type Row<'a> = (&'a str, Box<dyn Fn(&str, &Value) -> String + 'a>, &'a str);
    let rows: Vec<Row<'_>> = vec![
        (
            "mean queueing delay",
            Box::new(|name, p| match name {
                "fifo-firstfit" | "kueue-multikueue" => {
                    let ratio = (mean(ours) / mean(p) - 1.0) * 100.0;
                    format!(
                        "{} (ours {}{:.0}%)",
                        hours(&p["queueing_delay_s"]["mean"]),
                        if ratio < 0.0 { "−" } else { "+" },
                        ratio.abs()
                    )
                }
                _ => hours(&p["queueing_delay_s"]["mean"]),
            }),
            "≥40% below fifo, ≥20% below kueue",
        ),
        ("p99 queueing delay", Box::new(|_, p| hours_to(f64_at(p, &["queueing_delay_s", "p99"]), 1)), "—"),
        ("inside one block", Box::new(|_, p| pct(f64_at(p, &["locality", "within_block"]))), "≥95%"),
        ("inside one rack", Box::new(|_, p| pct(f64_at(p, &["locality", "within_rack"]))), "≥80%"),
        ("max wait, 2–8 GPU jobs", Box::new(|_, p| wait(p, "2-8")), "bounded"),
        ("max wait, 9–32 GPU jobs", Box::new(|_, p| wait(p, "9-32")), "bounded"),
    ];
    let mut out = format!("| figure | {} | target |\n|---|---|---|---|---|---|\n", names.join(" | "));
    for (figure, cell, target) in &rows {
        let cells: Vec<String> = names.iter().map(|n| cell(n, of(n))).collect();
        out.push_str(&format!("| {figure} | {} | {target} |\n", cells.join(" | ")));
    }
    out
}

/// docs/performance.md: the default run's quality figures, all four policies.
fn philly_quality(scratch: &Path) -> String {
    let report = simulate(scratch, "quality", &[]);
    let ours = f64_at(policy(&report, "stowage"), &["queueing_delay_s", "mean"]);
    let h1 = |s: f64| hours_to(s, 1);
    type Row = (&'static str, Box<dyn Fn(&Value) -> String>);
    let rows: Vec<Row> = vec![
        ("queueing delay mean", Box::new(|p| hours(&p["queueing_delay_s"]["mean"]))),
        ("ratio to `stowage`", Box::new(move |p| format!("{:.2}×", f64_at(p, &["queueing_delay_s", "mean"]) / ours))),
        ("queueing delay p95", Box::new(move |p| h1(f64_at(p, &["queueing_delay_s", "p95"])))),
        ("queueing delay p99", Box::new(move |p| h1(f64_at(p, &["queueing_delay_s", "p99"])))),
        ("JCT mean", Box::new(move |p| h1(f64_at(p, &["jct_s", "mean"])))),
        ("GPU utilisation", Box::new(move |p| pct(f64_at(p, &["gpu_utilisation"])))),
        ("multi-node gangs inside one rack", Box::new(move |p| pct(f64_at(p, &["locality", "within_rack"])))),
        ("multi-node gangs inside one block", Box::new(move |p| pct(f64_at(p, &["locality", "within_block"])))),
        (
            "mean topology slowdown (multi-node)",
            Box::new(|p| format!("{:.3}×", f64_at(p, &["locality", "mean_slowdown"]))),
        ),
        ("fragmentation", Box::new(move |p| pct(f64_at(p, &["fragmentation"])))),
    ];
    let names: Vec<String> = DEFAULT_POLICIES.iter().map(|n| format!("`{n}`")).collect();
    let mut out = format!("| figure | {} |\n|---|---|---|---|---|\n", names.join(" | "));
    for (figure, cell) in &rows {
        let cells: Vec<String> = DEFAULT_POLICIES.iter().map(|n| cell(policy(&report, n))).collect();
        out.push_str(&format!("| {figure} | {} |\n", cells.join(" | ")));
    }
    out
}

/// docs/performance.md: every policy at 1–4× load on the built-in fleet and trace, the best of
/// each of the first three columns per load in bold.
fn philly_loads(scratch: &Path) -> String {
    loads_table(scratch, "load", &[])
}

const PAI_MACHINES: [&str; 4] =
    ["--machines", "../shared/traces/alibaba-gpu-v2020-pai/pai_machine_spec.tar.gz", "--machines-format", "pai"];

/// docs/performance.md: the synthetic scale mix, 20,000 jobs on the built-in fleet.
fn synthetic_loads(scratch: &Path) -> String {
    loads_table(scratch, "synthetic", &["--synthetic", "20000"])
}

/// docs/performance.md: the synthetic scale mix on the PAI 2020 fleet (the same runs as
/// `pai-synthetic`'s).
fn pai_loads(scratch: &Path) -> String {
    loads_table(scratch, "pai", &[&PAI_MACHINES[..], &["--synthetic", "20000"]].concat())
}

/// `stowage simulate ARGS --load-scale L` for L = 1..4, run at once (the 20,000-job ones take a
/// minute or two each in the test build): each of the four reports.
fn loads(scratch: &Path, tag: &str, args: &[&str]) -> Vec<Value> {
    let runs: Vec<(String, Vec<String>)> = (1..=4)
        .map(|load: u32| {
            let mut a: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            a.extend(["--load-scale".to_string(), load.to_string()]);
            (format!("{tag}-{load}"), a)
        })
        .collect();
    simulate_all(scratch, &runs)
}

/// Every policy of the default run at 1-4x load: mean JCT, delay and utilisation (the best of
/// each in bold), and the multi-node gangs inside one block and one rack.
fn loads_table(scratch: &Path, tag: &str, args: &[&str]) -> String {
    let mut out = String::from(
        "| load | policy | mean JCT | mean queueing delay | GPU utilisation | inside one block | inside one rack |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (load, report) in (1..=4).zip(loads(scratch, tag, args)) {
        let of = |n: &str, path: &[&str]| f64_at(policy(&report, n), path);
        let bold = |text: String, yes: bool| if yes { format!("**{text}**") } else { text };
        // Bold every policy whose shown figure equals the best shown: ties are ties.
        let best = |path: &[&str], lowest: bool, show: &dyn Fn(f64) -> String| {
            let values = DEFAULT_POLICIES.map(|n| of(n, path));
            let pick = values.iter().copied().fold(if lowest { f64::INFINITY } else { f64::NEG_INFINITY }, |a, b| {
                if lowest { a.min(b) } else { a.max(b) }
            });
            values.map(|v| show(v) == show(pick))
        };
        let (h, p) = (|v: f64| hours_to(v, 2), |v: f64| pct(v));
        let jct = best(&["jct_s", "mean"], true, &h);
        let delay = best(&["queueing_delay_s", "mean"], true, &h);
        let busy = best(&["gpu_utilisation"], false, &p);
        for (i, n) in DEFAULT_POLICIES.iter().enumerate() {
            out.push_str(&format!(
                "| {load}x | {n} | {} | {} | {} | {:.1}% | {:.1}% |\n",
                bold(h(of(n, &["jct_s", "mean"])), jct[i]),
                bold(h(of(n, &["queueing_delay_s", "mean"])), delay[i]),
                bold(p(of(n, &["gpu_utilisation"])), busy[i]),
                of(n, &["locality", "within_block"]) * 100.0,
                of(n, &["locality", "within_rack"]) * 100.0,
            ));
        }
    }
    out
}

/// docs/performance.md: the synthetic mix on Alibaba PAI 2020's machines, 20,000 jobs at 1-4x
/// load, the four policies of the default run side by side.
fn pai_synthetic(scratch: &Path) -> String {
    let mut out = String::from(
        "| load | mean JCT (stowage / fifo / kueue / volcano) | mean queueing delay | GPU utilisation | multi-node gangs inside one rack |\n\
         |---|---|---|---|---|\n",
    );
    let args = [&PAI_MACHINES[..], &["--synthetic", "20000"]].concat();
    for (load, report) in (1..=4).zip(loads(scratch, "pai", &args)) {
        let of = |n: &str, path: &[&str]| f64_at(policy(&report, n), path);
        // Each policy's figure, one decimal, the lowest in bold.
        let column = |path: &[&str], scale: f64| {
            let values: Vec<f64> = DEFAULT_POLICIES.iter().map(|n| of(n, path) * scale).collect();
            let lowest = values.iter().copied().fold(f64::INFINITY, f64::min);
            let mut shown: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
            if let Some(i) = values.iter().position(|&v| v == lowest) {
                shown[i] = format!("**{}**", shown[i]);
            }
            shown.join(" / ")
        };
        let plain = |path: &[&str]| {
            DEFAULT_POLICIES.iter().map(|n| format!("{:.0}", of(n, path) * 100.0)).collect::<Vec<_>>().join(" / ")
        };
        out.push_str(&format!(
            "| {load}× | {} h | {} h | {} % | {} % |\n",
            column(&["jct_s", "mean"], 1.0 / 3600.0),
            column(&["queueing_delay_s", "mean"], 1.0 / 3600.0),
            DEFAULT_POLICIES
                .iter()
                .map(|n| format!("{:.1}", of(n, &["gpu_utilisation"]) * 100.0))
                .collect::<Vec<_>>()
                .join(" / "),
            plain(&["locality", "within_rack"]),
        ));
    }
    out
}

/// The text between a block's markers, and where it sits in the doc.
fn block<'d>(doc: &'d str, name: &str) -> Option<(usize, usize, &'d str)> {
    let open = format!("<!-- figures: {name} (scripts/doc-figures writes this) -->\n");
    let start = doc.find(&open)? + open.len();
    let end = start + doc[start..].find("<!-- /figures -->")?;
    Some((start, end, &doc[start..end]))
}

#[test]
fn the_figures_docs_quote_are_what_their_commands_print_now() {
    let bless = std::env::var_os("STOWAGE_BLESS").is_some();
    let scratch = common::Scratch::new("doc-figures");
    let mut stale = Vec::new();
    for b in BLOCKS {
        let path: PathBuf = Path::new(DOCS).join(b.doc);
        let doc = std::fs::read_to_string(&path).expect("doc");
        let Some((start, end, quoted)) = block(&doc, b.name) else {
            panic!("docs/{} has no block `{}`", b.doc, b.name);
        };
        let now = (b.print)(&scratch);
        if quoted == now {
            continue;
        }
        if bless {
            std::fs::write(&path, format!("{}{now}{}", &doc[..start], &doc[end..])).expect("write doc");
        } else {
            stale.push(format!("docs/{} `{}`: quoted\n{quoted}\nprinted now\n{now}", b.doc, b.name));
        }
    }
    assert!(stale.is_empty(), "stale figures (run scripts/doc-figures):\n{}", stale.join("\n"));
}
