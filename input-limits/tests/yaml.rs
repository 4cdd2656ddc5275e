//! The YAML budget against hostile input: every attack is refused quickly, with an error that
//! says which budget, and ordinary Kubernetes YAML (the upstream CRDs and runtimes, the largest
//! objects read) is read as before.

use std::time::{Duration, Instant};

use input_limits::yaml::{self, YamlError};
use serde_json::Value;

const UPSTREAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/upstream");

fn refused(text: &str) -> (YamlError, Duration) {
    let started = Instant::now();
    let e = yaml::from_str::<Value>(text).expect_err("refused");
    (e, started.elapsed())
}

/// Nine levels of ten aliases each: 10^9 leaves if expanded.
fn billion_laughs() -> String {
    let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    text
}

#[test]
fn an_alias_bomb_is_refused_before_it_expands() {
    let (e, took) = refused(&billion_laughs());
    assert!(e.is_over_budget(), "{e:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    // Flat, as a request body would be: many large anchors, each used once.
    let mut wide = String::new();
    for i in 0..900 {
        wide.push_str(&format!("k{i}: &k{i} [{}]\n", "x, ".repeat(200)));
    }
    for i in 0..900 {
        wide.push_str(&format!("u{i}: *k{i}\n"));
    }
    let (e, took) = refused(&wide);
    assert!(e.is_over_budget(), "{e:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn deep_nesting_is_refused_at_the_depth_limit_not_after() {
    let n = 100_000;
    let block: String = (0..n).map(|_| "- ").collect::<String>() + "x\n";
    let flow = "[".repeat(n) + &"]".repeat(n);
    let mapping: String = (0..5_000).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
    for text in [block, flow, mapping] {
        let (e, took) = refused(&text);
        assert!(e.is_over_budget(), "{e:?}");
        assert!(e.problem.contains("nested"), "{e:?}");
        assert!(took < Duration::from_millis(500), "{took:?}");
    }
    let ok = "[".repeat(yaml::MAX_DEPTH) + &"]".repeat(yaml::MAX_DEPTH);
    yaml::from_str::<Value>(&ok).expect("MAX_DEPTH levels are allowed");
}

#[test]
fn too_many_nodes_or_documents_are_refused() {
    let nodes = format!("[{}]", "1, ".repeat(yaml::MAX_NODES));
    assert!(refused(&nodes).0.is_over_budget());
    let docs = "---\na: 1\n".repeat(yaml::MAX_DOCUMENTS + 1);
    let e = yaml::documents::<Value>(&docs).expect_err("too many documents");
    assert!(e.is_over_budget() && e.problem.contains("MAX_DOCUMENTS"), "{e:?}");
}

#[test]
fn errors_name_the_line_and_field() {
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Job {
        #[allow(dead_code)]
        spec: Spec,
    }
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Spec {
        #[allow(dead_code)]
        num_nodes: Vec<u32>,
    }
    let e = yaml::from_str::<Job>("spec:\n  numNodes: [1, two]\n").expect_err("bad");
    assert_eq!((e.line, e.field.as_str()), (Some(2), "spec.numNodes[1]"), "{e:?}");
    assert_eq!(e.in_file("job.yaml"), format!("job.yaml:2: spec.numNodes[1]: {}", e.problem));
    assert_eq!(e.problem, "invalid type: expected u32, got \"two\"");
    let e = yaml::from_str::<Job>("spec:\n  numNode: [1]\n").expect_err("unknown");
    assert_eq!(e.field, "spec.numNode", "{e:?}");
    assert!(e.problem.starts_with("unknown field `numNode`"), "{e:?}");
    let e = yaml::from_str::<Value>("spec: [unclosed").expect_err("syntax");
    assert_eq!((e.line, e.field.as_str()), (Some(1), "spec"), "{e:?}");
}

/// Every YAML file of the repository's manifests, examples and playground, and the upstream
/// objects: all read within the budget.
#[test]
fn the_upstream_crds_and_runtimes_read_within_budget() {
    let mut read = 0;
    let ours = ["manifests", "examples", "playground"].map(|d| format!("{}/../{d}", env!("CARGO_MANIFEST_DIR")));
    let mut dirs: Vec<std::path::PathBuf> = ours.iter().map(std::path::PathBuf::from).collect();
    dirs.push(std::path::PathBuf::from(UPSTREAM));
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("upstream folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).expect("read");
                yaml::documents::<Value>(&text)
                    .unwrap_or_else(|e| panic!("{}", e.in_file(&path.display().to_string())));
                read += 1;
            }
        }
    }
    assert!(read > 60, "{read} files");
}

#[test]
fn writes_block_yaml_that_reads_back() {
    let v = serde_json::json!({
        "metadata": {"labels": {"a": "yes", "n": "8"}},
        "data": {"hostfile": "a slots=8\nb slots=8\n", "long": "word ".repeat(40)},
        "items": [{"name": "x", "ports": [1, 2]}],
        "empty": []
    });
    let text = yaml::to_string(&v).expect("writes");
    assert!(text.contains("hostfile: |\n    a slots=8\n"), "{text}");
    assert!(!text.contains(">"), "long lines stay on one line: {text}");
    assert_eq!(yaml::from_str::<Value>(&text).expect("reads back"), v);
}

#[test]
fn a_large_scalar_used_by_many_aliases_is_refused() {
    let big = "x".repeat(1 << 20);
    let mut text = format!("big: &big \"{big}\"\nmany:\n");
    for i in 0..900 {
        text.push_str(&format!("  k{i}: *big\n"));
    }
    let started = Instant::now();
    let r = yaml::from_str::<std::collections::BTreeMap<String, Value>>(&text);
    let took = started.elapsed();
    let e = r.expect_err("refused");
    assert!(e.is_over_budget() && e.problem.contains("MAX_SCALAR_BYTES"), "{e:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}
