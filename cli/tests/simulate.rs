//! `stowage simulate` as a user runs it: exit codes, outputs, and bad input named precisely.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::Scratch;

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces");

fn stowage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stowage")).args(args).output().expect("runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("cli-{name}"))
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json written")).expect("valid json")
}

#[test]
fn the_default_run_replays_the_builtin_trace_under_all_four_policies() {
    let dir = scratch("default");
    let out_json = dir.join("out.json");
    let o = stowage(&["simulate", "--json", out_json.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    for p in ["stowage", "fifo-firstfit", "kueue-multikueue", "volcano-binpack"] {
        assert!(table.contains(p), "{p} missing from\n{table}");
    }
    let v = json(&out_json);
    let policies = v["policies"].as_array().expect("policies");
    assert_eq!(policies.len(), 4);
    for p in policies {
        let jobs = &p["jobs"];
        let sum: u64 =
            ["completed", "running", "pending", "rejected", "failed"].iter().map(|k| jobs[k].as_u64().expect(k)).sum();
        assert_eq!(jobs["submitted"].as_u64(), Some(sum), "every job accounted for in {}", p["name"]);
        assert_eq!(jobs["submitted"].as_u64(), Some(1455));
        for k in ["mean", "p50", "p95", "p99"] {
            assert!(p["queueing_delay_s"][k].is_number(), "queueing_delay_s.{k}");
        }
        for k in ["mean", "p95"] {
            assert!(p["jct_s"][k].is_number(), "jct_s.{k}");
        }
        let util = p["gpu_utilisation"].as_f64().expect("gpu_utilisation");
        assert!(util > 0.0 && util <= 1.0);
        for k in ["multi_node_gangs", "within_rack", "within_block"] {
            assert!(p["locality"][k].is_number(), "locality.{k}");
        }
    }
    // Locality is weighed by cost with the documented slowdowns, and the report says so.
    assert_eq!(v["options"]["locality_cost"]["cross_rack"].as_f64(), Some(0.05), "{}", v["options"]);
    let off = dir.join("off.json");
    let o = stowage(&[
        "simulate",
        "--policy",
        "stowage",
        "--locality-cost",
        "none",
        "--json",
        off.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(json(&off)["options"]["locality_cost"].is_null());
    let o = stowage(&["simulate", "--locality-cost", "20,5,15"]);
    assert!(!o.status.success() && stderr(&o).contains("NVLINK,RACK,BLOCK,ZONE"), "{}", stderr(&o));
}

#[test]
fn same_inputs_and_seed_write_byte_identical_json() {
    let dir = scratch("determinism");
    let run = |name: &str, seed: &str| {
        let path = dir.join(name);
        let o = stowage(&[
            "simulate",
            "--node-failure-rate",
            "0.05",
            "--seed",
            seed,
            "--json",
            path.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read(path).expect("written")
    };
    let a = run("a.json", "7");
    assert_eq!(a, run("b.json", "7"));
    assert_ne!(a, run("c.json", "8"), "the seed drives node failures");
}

#[test]
fn a_broken_fleet_file_names_the_file_and_field() {
    let dir = scratch("fleet");
    let fleet = dir.join("fleet.yaml");
    std::fs::write(
        &fleet,
        "clusters:\n- name: c\n  topology: [{level: rack}]\n  pools:\n  - {name: p, gpus_per_node: 8, cpu_cores: 8, memory_gib: 64, nodes: 4}\n",
    )
    .expect("write");
    let o = stowage(&["simulate", "--fleet", fleet.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("fleet.yaml: clusters[0].pools[0].gpu_flavor"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Sizes and times past the input limits, and YAML past its budget, are errors naming the file,
/// the field and the limit, with exit code 1: `nodes: 4000000000` used to run the machine out
/// of memory, fanouts whose product overflowed divided by zero, a 1.8e19 s run time wrapped.
#[test]
fn inputs_over_the_limits_fail_cleanly_naming_the_limit() {
    let dir = scratch("limits");
    let pool = |fields: &str| {
        format!(
            "clusters:\n- name: c\n  topology: [{{level: block}}, {{level: rack}}]\n  pools:\n  - {{name: p, gpu_flavor: h100, gpus_per_node: 8, cpu_cores: 8, memory_gib: 64, {fields}}}\n"
        )
    };
    let labels: Vec<String> = (0..100).map(|i| format!("l{i}: *big")).collect();
    let bomb = format!(
        "clusters:\n- name: &big {}\n  labels: {{{}}}\n  topology: []\n  pools: []\n",
        "x".repeat(1 << 20),
        labels.join(", ")
    );
    let cases = [
        (
            pool("nodes: 4000000000"),
            "fleet.yaml: clusters[0].pools[0].nodes: 4000000000 is above the limit of 1000000 nodes (MAX_FLEET_NODES)",
        ),
        (
            pool("nodes: 4, fanout: {rack: 4294967295, block: 4294967295}"),
            "fleet.yaml: clusters[0].pools[0].fanout: 4294967295 is above the limit of 1000000 nodes (MAX_FANOUT_PRODUCT)",
        ),
        (bomb, "fleet.yaml:3: clusters[0].labels: over the YAML budget"),
    ];
    for (text, want) in cases {
        let fleet = dir.join("fleet.yaml");
        std::fs::write(&fleet, text).expect("write");
        let started = std::time::Instant::now();
        let o = stowage(&["simulate", "--fleet", fleet.to_str().expect("utf-8"), "--policy", "stowage"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "{err:?} should contain {want:?}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{want}: {:?}", started.elapsed());
    }
    let trace = write_trace(&dir, "a,0,3600,1,8,none\nb,10,1.8e19,1,8,none\n");
    let o = stowage(&["simulate", "--trace", trace.to_str().expect("utf-8"), "--policy", "stowage"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let want = "trace.csv:3: column duration_s: 1.8e19 is above the limit of 31536000 s (MAX_TRACE_DURATION_S)";
    assert!(err.contains(want), "{err:?} should contain {want:?}");
}

#[test]
fn an_unknown_trace_format_lists_the_valid_ones() {
    let o = stowage(&["simulate", "--trace", "x.csv", "--trace-format", "alibaba"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("expected native, philly or openb"), "{}", stderr(&o));
}

/// `--help` and a wrong `--policy` name every policy there is, `stowage-batch` too (it was
/// left out of the help's words once).
#[test]
fn every_policy_is_listed_in_the_help_and_when_one_is_misspelt() {
    let help = stdout(&stowage(&["simulate", "--help"]));
    let wrong = stowage(&["simulate", "--policy", "stowage,nope"]);
    assert!(!wrong.status.success());
    for p in simulator::policy::Policy::ALL {
        assert!(help.contains(p.name()), "--help lacks {}:\n{help}", p.name());
        assert!(stderr(&wrong).contains(p.name()), "{}", stderr(&wrong));
    }
    assert!(stderr(&wrong).contains("invalid value 'nope' for '--policy <POLICY>'"), "{}", stderr(&wrong));
}

/// `stowage simulate ARGS --json DIR/out.json`, which must succeed: the report.
fn simulated(dir: &Path, args: &[&str]) -> serde_json::Value {
    let out_json = dir.join("out.json");
    let mut all = vec!["simulate"];
    all.extend_from_slice(args);
    all.extend(["--json", out_json.to_str().expect("utf-8")]);
    let o = stowage(&all);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    json(&out_json)
}

fn write_trace(dir: &Path, rows: &str) -> PathBuf {
    let path = dir.join("trace.csv");
    std::fs::write(&path, format!("id,submit_s,duration_s,pods,gpus_per_pod,topology\n{rows}")).expect("write");
    path
}

#[test]
fn a_garbage_row_fails_the_run_with_file_line_and_column_unless_skipped() {
    let dir = scratch("garbage");
    let trace = write_trace(&dir, "a,0,3600,1,8,none\nb,10,soon,1,8,none\nc,20,60,2,8,required:rack\n");
    let path = trace.to_str().expect("utf-8");
    let o = stowage(&["simulate", "--trace", path]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("trace.csv:3") && err.contains("duration_s"), "{err}");
    let o = stowage(&["simulate", "--trace", path, "--skip-bad-rows", "--policy", "stowage"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("2 jobs (1 bad rows skipped)"), "{}", stdout(&o));
}

#[test]
fn an_impossible_gang_is_rejected_with_its_reason_and_the_rest_run() {
    let dir = scratch("impossible");
    let trace = write_trace(&dir, "ok,0,600,2,8,required:rack\nhuge,5,600,200,8,none\nalso-ok,10,600,1,4,none\n");
    let out_json = dir.join("out.json");
    let o = stowage(&[
        "simulate",
        "--trace",
        trace.to_str().expect("utf-8"),
        "--policy",
        "stowage,kueue-multikueue",
        "--json",
        out_json.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&out_json);
    for p in v["policies"].as_array().expect("policies") {
        assert_eq!(p["jobs"]["completed"].as_u64(), Some(2), "{}", p["name"]);
        assert_eq!(p["jobs"]["rejected"].as_u64(), Some(1));
        let reason = p["rejected"][0]["reason"].as_str().expect("reason");
        assert!(reason.contains("200 free slots of 8") && reason.contains("never be admitted"), "{reason}");
    }
    assert!(stdout(&o).contains("rejected huge"), "{}", stdout(&o));
}

#[test]
fn a_horizon_leaves_work_running_or_pending_and_counts_it() {
    let dir = scratch("horizon");
    let out_json = dir.join("out.json");
    let o =
        stowage(&["simulate", "--horizon", "20d", "--policy", "stowage", "--json", out_json.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p = &json(&out_json)["policies"][0];
    assert_eq!(p["makespan_s"].as_u64(), Some(20 * 86_400));
    let jobs = &p["jobs"];
    assert!(jobs["running"].as_u64().expect("running") + jobs["pending"].as_u64().expect("pending") > 0);
    assert!(jobs["completed"].as_u64().expect("completed") < 1455);
}

#[test]
fn a_horizon_counts_only_the_jobs_that_arrived_before_it() {
    let dir = scratch("horizon-arrivals");
    let trace = write_trace(&dir, "long,0,7200,1,8,none\nshort,1800,600,1,8,none\nlate,36000,600,1,8,none\n");
    let out_json = dir.join("out.json");
    let run = |horizon: &str| {
        let o = stowage(&[
            "simulate",
            "--trace",
            trace.to_str().expect("utf-8"),
            "--horizon",
            horizon,
            "--policy",
            "stowage",
            "--json",
            out_json.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        (stdout(&o), json(&out_json)["policies"][0]["jobs"].clone())
    };
    // One hour: two have arrived, one finished, one runs; the third is not due for ten hours
    // and is neither pending nor "never started".
    let (table, jobs) = run("1h");
    assert_eq!(jobs["submitted"].as_u64(), Some(2), "{jobs}");
    assert_eq!(
        (jobs["completed"].as_u64(), jobs["running"].as_u64(), jobs["pending"].as_u64()),
        (Some(1), Some(1), Some(0))
    );
    assert!(!table.contains("never"), "{table}");
    // Ten minutes: nothing has completed, so there is no JCT to show, not a zero one.
    let (table, jobs) = run("10m");
    assert_eq!(jobs["submitted"].as_u64(), Some(1), "{jobs}");
    let jct = table.lines().find(|l| l.starts_with("JCT mean")).expect("a JCT row");
    assert!(jct.trim_end().ends_with('-') && !jct.contains("0.00 h"), "{jct}");
}

#[test]
fn load_scale_compresses_arrivals_and_queues_more() {
    let dir = scratch("load");
    let run = |scale: &str| {
        let path = dir.join(format!("{scale}.json"));
        let o = stowage(&[
            "simulate",
            "--policy",
            "stowage",
            "--load-scale",
            scale,
            "--json",
            path.to_str().expect("utf-8"),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        json(&path)["policies"][0]["queueing_delay_s"]["mean"].as_f64().expect("mean")
    };
    assert!(run("2") > run("1"));
    let o = stowage(&["simulate", "--load-scale", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--load-scale"), "{}", stderr(&o));
}

#[test]
fn svg_plots_are_written() {
    let dir = scratch("svg");
    let o = stowage(&["simulate", "--policy", "stowage,fifo-firstfit", "--svg", dir.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["utilisation.svg", "queueing-delay-cdf.svg"] {
        let text = std::fs::read_to_string(dir.join(f)).expect("svg written");
        assert!(text.contains("<svg") && text.contains("stowage") && text.contains("fifo-firstfit"), "{f}");
    }
    // The utilisation axis stops at 100 %: the space above is the legend's, not a share.
    let text = std::fs::read_to_string(dir.join("utilisation.svg")).expect("svg written");
    let labels: Vec<&str> =
        text.split("</text>").filter_map(|t| t.rsplit_once('>').map(|(_, label)| label.trim())).collect();
    assert!(labels.contains(&"100%"), "{labels:?}");
    assert!(!labels.iter().any(|l| ["110%", "120%", "1.2", "1.1"].contains(l)), "{labels:?}");
}

#[test]
fn public_traces_replay_on_fleets_built_from_their_machine_lists() {
    let philly = stowage(&[
        "simulate",
        "--machines",
        &format!("{SHARED}/philly-2017/revised_machine_list.csv"),
        "--machines-format",
        "philly-revised",
        "--trace",
        &format!("{SHARED}/philly-2017/jobs_2017-09_2017-10.json"),
        "--trace-format",
        "philly",
        "--policy",
        "stowage",
    ]);
    assert!(philly.status.success(), "{}", stderr(&philly));
    assert!(stdout(&philly).contains("3205 GPUs"), "{}", stdout(&philly));
    let openb = stowage(&[
        "simulate",
        "--machines",
        &format!("{SHARED}/alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv"),
        "--machines-format",
        "openb",
        "--trace",
        &format!("{SHARED}/alibaba-gpu-v2023-openb/openb_pod_list_gpuspec33.csv"),
        "--trace-format",
        "openb",
        "--policy",
        "stowage,volcano-binpack",
    ]);
    assert!(openb.status.success(), "{}", stderr(&openb));
    assert!(stdout(&openb).contains("6212 GPUs"), "{}", stdout(&openb));
    // The header says what the trace left out and how it was replayed.
    let header = stdout(&openb).lines().next().unwrap_or("").to_string();
    assert!(header.contains(" withdrawn before they ran, left out)"), "{header}");
    assert!(!header.contains("--load-scale"), "at the trace's own load: {header}");
    let scaled = stowage(&["simulate", "--policy", "fifo-firstfit", "--load-scale", "1.5"]);
    let header = stdout(&scaled).lines().next().unwrap_or("").to_string();
    assert!(header.ends_with("| load ×1.5 (--load-scale)"), "{header}");
}

#[test]
fn the_pai_fleet_replays_the_synthetic_mix_paced_for_its_gpus() {
    let pai = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/alibaba-gpu-v2020-pai/pai_machine_spec.tar.gz");
    let o = stowage(&[
        "simulate",
        "--machines",
        pai,
        "--machines-format",
        "pai",
        "--synthetic",
        "400",
        "--policy",
        "stowage,kueue-multikueue",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("1897 nodes, 6742 GPUs"), "{out}");
    assert!(out.contains("synthetic scale mix of 400 jobs (seed 1, paced for 6742 GPUs)"), "{out}");
    let wrong = stowage(&["simulate", "--machines", pai, "--machines-format", "alibaba"]);
    assert!(!wrong.status.success());
    assert!(stderr(&wrong).contains("philly-revised, philly-listed, openb or pai"), "{}", stderr(&wrong));
}

#[test]
fn a_synthetic_scale_trace_replays_and_a_size_out_of_range_is_refused() {
    let o = stowage(&["simulate", "--synthetic", "300", "--policy", "stowage,fifo-firstfit"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("synthetic scale mix of 300 jobs (seed 1, paced for 576 GPUs)") && out.contains("300 jobs"),
        "{out}"
    );
    for bad in ["0", "10000001"] {
        let o = stowage(&["simulate", "--synthetic", bad]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("--synthetic") && stderr(&o).contains("from 1 to 10000000"), "{}", stderr(&o));
    }
}

const VENUS: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/helios-2020/Venus/cluster_gpu_number.csv");

#[test]
fn helios_vcs_become_the_fleet_and_queues_with_quota_and_the_helios_mix_replays_on_them() {
    let dir = scratch("helios");
    let out_json = dir.join("out.json");
    let o = stowage(&[
        "simulate",
        "--helios",
        VENUS,
        "--helios-day",
        "2020-09-28",
        "--synthetic",
        "600",
        "--mix",
        "helios",
        "--policy",
        "stowage,fifo-firstfit",
        "--json",
        out_json.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let report = json(&out_json);
    let quotas = report["options"]["quotas_gpus"].as_object().expect("quotas in the JSON");
    let quota: u64 = quotas.values().map(|v| v.as_u64().expect("GPUs")).sum();
    // The last day's row: every VC with GPUs that day is a queue, and the fleet is its total.
    assert_eq!(quota, report["fleet"]["gpus"].as_u64().expect("gpus"), "{out}");
    assert!(out.contains(&format!("{} queues with {quota} GPUs of quota", quotas.len())), "{out}");
    assert!(out.contains("(helios, 2020-09-28)") && out.contains("synthetic helios mix of 600 jobs"), "{out}");
    for p in report["policies"].as_array().expect("policies") {
        let queues = p["queues"].as_array().expect("per-queue figures");
        assert!(queues.len() > 1 && queues.iter().all(|q| quotas.contains_key(q["name"].as_str().expect("name"))));
    }

    let bad_day = stowage(&["simulate", "--helios", VENUS, "--helios-day", "2021-01-01", "--synthetic", "10"]);
    assert_eq!(bad_day.status.code(), Some(1));
    assert!(
        stderr(&bad_day).contains("column date") && stderr(&bad_day).contains("2020-04-01 to 2020-09-28"),
        "{}",
        stderr(&bad_day)
    );
    // Jobs naming a queue the VCs do not define would run unlimited: refused, naming both.
    let trace = dir.join("queued.csv");
    std::fs::write(&trace, "id,submit_s,duration_s,pods,gpus_per_pod,queue\nt1,0,60,1,1,team-x\n").expect("write");
    let unknown = stowage(&["simulate", "--helios", VENUS, "--trace", trace.to_str().expect("utf-8")]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(stderr(&unknown).contains("job t1 names queue \"team-x\""), "{}", stderr(&unknown));
    let both = stowage(&["simulate", "--helios", VENUS, "--machines", VENUS]);
    assert!(!both.status.success() && stderr(&both).contains("cannot be used with"), "{}", stderr(&both));
}

#[test]
fn the_pai_mix_replays_on_the_pai_fleet_and_an_unknown_mix_lists_the_known() {
    let pai = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/alibaba-gpu-v2020-pai/pai_machine_spec.tar.gz");
    let o = stowage(&[
        "simulate",
        "--machines",
        pai,
        "--machines-format",
        "pai",
        "--synthetic",
        "2000",
        "--mix",
        "pai",
        "--policy",
        "stowage,volcano-binpack",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("synthetic pai mix of 2000 jobs (seed 1, paced for 6742 GPUs)"), "{}", stdout(&o));
    let wrong = stowage(&["simulate", "--synthetic", "10", "--mix", "philly"]);
    assert!(!wrong.status.success() && stderr(&wrong).contains("scale, pai or helios"), "{}", stderr(&wrong));
}

#[test]
fn options_a_what_if_cannot_honour_are_refused_beside_from_naming_them() {
    // Parsed before any hub is read: the kubeconfig need not exist.
    for extra in
        [&["--json", "out.json"][..], &["--load-scale", "2"], &["--policy", "fifo-firstfit"], &["--svg", "plots"]]
    {
        let mut args = vec!["simulate", "--from", "/nonexistent/hub.kubeconfig"];
        args.extend_from_slice(extra);
        let o = stowage(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("--from") && err.contains(extra[0]), "{extra:?}: {err}");
    }
}

/// Every key of a policy's JSON figures is in docs/simulator.md's key table.
#[test]
fn every_policy_figure_in_the_json_is_in_the_docs_key_table() {
    let dir = scratch("json-keys");
    let policy = simulated(&dir, &["--horizon", "2d", "--policy", "stowage-batch"])["policies"][0].clone();
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/simulator.md")).expect("docs");
    let rows: Vec<&str> = docs.lines().filter(|l| l.starts_with("| `policies[].")).collect();
    let named = |key: &str| {
        rows.iter().any(|row| {
            let cell = row.split('`').nth(1).unwrap_or_default().trim_start_matches("policies[].");
            let first = cell.split(['.', '[']).next().unwrap_or_default();
            first == key || cell.trim_start_matches('{').trim_end_matches('}').split(',').any(|k| k == key)
        })
    };
    let missing: Vec<&String> = policy.as_object().expect("object").keys().filter(|k| !named(k)).collect();
    assert!(missing.is_empty(), "policies[] keys missing from docs/simulator.md: {missing:?}");
}

/// `--batch-every N` runs stowage-batch's optimiser on one cycle in N: fewer cycles solve a
/// model, never more than one in N; 0 is refused, naming the flag.
#[test]
fn the_batch_optimiser_runs_on_one_cycle_in_batch_every() {
    let dir = scratch("batch-every");
    let run = |every: &str| {
        let args = ["--synthetic", "500", "--load-scale", "2", "--policy", "stowage-batch", "--batch-every", every];
        simulated(&dir, &args)["policies"][0].clone()
    };
    let (all, some) = (run("1"), run("4"));
    let figure = |p: &serde_json::Value, key: &str| p[key].as_u64().expect(key);
    assert!(figure(&all, "batch_cycles") > 0, "the optimiser never ran: {all}");
    assert!(figure(&some, "batch_cycles") < figure(&all, "batch_cycles"));
    assert!(figure(&some, "batch_cycles") <= figure(&some, "cycles") / 4 + 1);
    let o = stowage(&["simulate", "--policy", "stowage-batch", "--batch-every", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--batch-every"), "{}", stderr(&o));
}

/// `--reserve-after`: the default (a day) in the report's options, a bound of its own that
/// changes what stowage decides on a loaded run, `none` for no reservations, and a clear error
/// naming the flag for anything else.
#[test]
fn reserve_after_sets_when_stowage_reserves_and_says_so_in_the_report() {
    let dir = scratch("reserve-after");
    let run = |extra: &[&str]| {
        let mut args = vec!["--synthetic", "400", "--load-scale", "3", "--policy", "stowage"];
        args.extend_from_slice(extra);
        simulated(&dir, &args)
    };
    let (default, at_once, never) = (run(&[]), run(&["--reserve-after", "0"]), run(&["--reserve-after", "none"]));
    assert_eq!(default["options"]["reserve_after_s"], 86_400);
    assert_eq!(at_once["options"]["reserve_after_s"], 0);
    assert!(never["options"]["reserve_after_s"].is_null());
    let reserved = |r: &serde_json::Value| r["policies"][0]["pending_reason_cycles"]["reserved"].as_u64().unwrap_or(0);
    assert!(
        reserved(&at_once) > reserved(&default),
        "at once {} vs after a day {}",
        reserved(&at_once),
        reserved(&default)
    );
    assert_eq!(reserved(&never), 0);
    for bad in ["soon", "1.5.2h", "3w"] {
        let o = stowage(&["simulate", "--reserve-after", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(stderr(&o).contains("--reserve-after"), "{bad}: {}", stderr(&o));
    }
}

/// `--check-every`: how often the invariants are checked changes nothing a replay decides (the
/// same report, byte for byte), and 0 is refused naming the flag.
#[test]
fn the_invariant_check_sample_changes_no_figure() {
    let dir = scratch("check-every");
    let run = |every: &str| {
        let out = dir.join(format!("out-{every}.json"));
        let args = ["simulate", "--synthetic", "400", "--load-scale", "2", "--check-every", every, "--json"];
        let o = stowage(&[&args[..], &[out.to_str().expect("utf-8")]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read(&out).expect("report")
    };
    assert_eq!(run("1"), run("1000"));
    let o = stowage(&["simulate", "--check-every", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--check-every"), "{}", stderr(&o));
}

/// `--explain JOB`: each policy tells the job's story after the table (and under `explained`
/// in the JSON, which leaves the key out when nothing is asked); a job the trace lacks, or
/// `--explain` beside `--bench`, is refused naming the flag.
#[test]
fn explain_tells_a_jobs_story_under_each_policy() {
    let dir = scratch("explain");
    let args = ["--synthetic", "400", "--load-scale", "3", "--policy", "stowage,fifo-firstfit"];
    let out_json = dir.join("out.json");
    let mut all = vec!["simulate"];
    all.extend_from_slice(&args);
    all.extend(["--explain", "syn-0000399", "--json", out_json.to_str().expect("utf-8")]);
    let o = stowage(&all);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for policy in ["stowage", "fifo-firstfit"] {
        assert!(text.contains(&format!("{policy}: syn-0000399 (submitted at ")), "{text}");
    }
    let report = json(&out_json);
    for p in report["policies"].as_array().expect("policies") {
        let story = &p["explained"][0];
        assert_eq!(story["job"], "syn-0000399");
        let steps = story["steps"].as_array().expect("steps");
        assert_eq!(steps.last().map(|s| &s["kind"]), Some(&serde_json::json!("completed")), "{story}");
        assert!(steps.iter().any(|s| s["kind"] == "running"), "{story}");
    }
    let plain = simulated(&dir, &args);
    assert!(plain["policies"][0].get("explained").is_none(), "the key is left out when nothing is asked");

    let o = stowage(&["simulate", "--synthetic", "40", "--explain", "no-such-job"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--explain: no job \"no-such-job\" in the trace"), "{}", stderr(&o));
    let o = stowage(&["simulate", "--bench", "2", "--explain", "syn-0000001"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--explain"), "{}", stderr(&o));
}
