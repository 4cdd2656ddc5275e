//! The crate graph keeps the shape docs/architecture.md draws: every crate depends only on
//! crates of a lower layer, for its tests too (so the dispatcher and the agent, peers, never on
//! each other), the pure crates on no Kubernetes client or runtime, nothing on the test crate,
//! and inside each crate modules import downward. Read from `cargo metadata`, `cargo tree` and
//! the sources, so a dependency or an import that breaks the picture fails here, not in review.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Each workspace crate's layer, lowest first. A normal dependency must point to a lower layer.
const LAYERS: [(&str, u8); 14] = [
    ("input-limits", 0),
    ("kube-conventions", 0),
    ("upstream", 0),
    ("scheduler-core", 1),
    ("api", 1),
    ("kube-shell", 1),
    // Serves through kube-shell's listener, as every server of Stowage does.
    ("kube-mem", 2),
    ("trainer-render", 2),
    ("simulator", 2),
    ("dispatcher", 3),
    ("member-agent", 3),
    ("playground", 4),
    ("stowage", 5),
    ("stowage-tests", 6),
];

/// Outside crates a crate must not depend on, even indirectly through a normal dependency of
/// its own: the pure core and the renderer know nothing of Kubernetes clients or async.
/// (`api` and so `trainer-render` use kube's `CustomResource` derive, not its client.)
const FORBIDDEN: [(&str, &[&str]); 6] = [
    // Upstream's files as text: no dependency at all, so anything may link it.
    ("upstream", &["serde", "serde_json", "kube", "k8s-openapi", "tokio"]),
    // Conventions on plain JSON: serde_json and nothing of Kubernetes' clients or types.
    ("kube-conventions", &["kube", "kube-core", "k8s-openapi", "tokio", "hyper", "futures"]),
    // Every loader and the hub link it: it stays a YAML reader and some numbers.
    ("input-limits", &["kube", "kube-core", "k8s-openapi", "tokio", "hyper", "futures", "serde_json"]),
    ("scheduler-core", &["kube", "kube-core", "kube-client", "k8s-openapi", "tokio", "hyper", "futures"]),
    ("trainer-render", &["kube-client", "kube-runtime", "tokio", "hyper", "futures"]),
    ("api", &["kube-client", "kube-runtime", "tokio", "hyper", "futures"]),
];

#[derive(Debug)]
struct Dep {
    name: String,
    /// `None` for a normal dependency, `Some("dev")` or `Some("build")` otherwise.
    kind: Option<String>,
}

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    cmd.arg("--no-deps");
    let out = cmd.output().expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

fn workspace_deps() -> BTreeMap<String, Vec<Dep>> {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|d| Dep {
                    name: d["name"].as_str().unwrap_or_default().to_string(),
                    kind: d["kind"].as_str().map(str::to_string),
                })
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), deps)
        })
        .collect()
}

fn layer(name: &str) -> Option<u8> {
    LAYERS.iter().find(|(n, _)| *n == name).map(|&(_, l)| l)
}

#[test]
fn every_workspace_crate_has_a_layer() {
    let deps = workspace_deps();
    let unlayered: Vec<_> = deps.keys().filter(|n| layer(n).is_none()).collect();
    assert!(unlayered.is_empty(), "crates missing from LAYERS (and from docs/architecture.md?): {unlayered:?}");
}

/// Normal, dev and build dependencies alike: a crate's tests that need a peer or a crate above
/// live in `tests/` (a dev edge up would also link a second copy of the crate into its tests).
#[test]
fn dependencies_point_down_only() {
    let mut wrong = Vec::new();
    for (name, deps) in workspace_deps() {
        let Some(from) = layer(&name) else { continue };
        for d in &deps {
            if let Some(to) = layer(&d.name)
                && to >= from
            {
                let kind = d.kind.as_deref().map(|k| format!(" ({k})")).unwrap_or_default();
                wrong.push(format!("{name} (layer {from}) -> {}{kind} (layer {to})", d.name));
            }
        }
    }
    assert!(wrong.is_empty(), "dependencies that do not point down:\n{}", wrong.join("\n"));
}

#[test]
fn nothing_depends_on_the_test_crate() {
    let users: Vec<_> = workspace_deps()
        .into_iter()
        .filter(|(_, deps)| deps.iter().any(|d| d.name == "stowage-tests"))
        .map(|(n, _)| n)
        .collect();
    assert!(users.is_empty(), "stowage-tests is linked by {users:?}");
}

#[test]
fn the_pure_crates_reach_no_client_and_no_runtime() {
    for (krate, banned) in FORBIDDEN {
        let reached: Vec<_> = normal_closure(krate).into_iter().filter(|n| banned.contains(&n.as_str())).collect();
        assert!(reached.is_empty(), "{krate} depends (through normal dependencies) on {reached:?}");
    }
}

/// Every crate `krate` builds with, by name, through normal dependencies, with the features
/// `krate` alone enables (`cargo tree -p`: the workspace's other crates do not widen them).
fn normal_closure(krate: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", krate, "-e", "normal", "--offline", "--locked", "--prefix", "none", "--format", "{p}"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_layers_are_the_architecture_docs_layers() {
    // docs/architecture.md names every crate; a crate added here without a word there fails.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/architecture.md"))
        .expect("docs/architecture.md");
    let missing: Vec<_> = LAYERS.iter().map(|(n, _)| *n).filter(|n| !doc.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "docs/architecture.md does not name {missing:?}");
}

/// Modules that may name each other, per crate: a fleet keeps its empty `Capacity` (what "could
/// this ever fit" is asked against), and capacity walks the fleet's domains.
const MUTUAL: [(&str, &str, &str); 1] = [("scheduler-core", "capacity", "fleet")];

/// A crate's modules by path (`decide::workloads`; the root is ""), from its `src/` files.
fn modules(src: &std::path::Path) -> BTreeMap<String, std::path::PathBuf> {
    fn walk(dir: &std::path::Path, prefix: &[String], out: &mut BTreeMap<String, std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source dir") {
            let path = entry.expect("entry").path();
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { continue };
            // `src/bin/` holds crates of their own, not modules.
            if path.is_dir() && !(prefix.is_empty() && stem == "bin") {
                let mut inner = prefix.to_vec();
                inner.push(stem);
                walk(&path, &inner, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                // A folder's `mod.rs` and the crate's root (`lib.rs`, `main.rs`) are the module
                // of their folder; any other file is a module of its own.
                let root = prefix.is_empty() && matches!(stem.as_str(), "lib" | "main");
                let mut m = prefix.to_vec();
                if stem != "mod" && !root {
                    m.push(stem);
                }
                out.insert(m.join("::"), path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    out
}

/// The modules `code` (of module `me`) names through `crate::`, `super::` and `self::` paths,
/// each the deepest module the path reaches (an item of a module names that module).
fn named_modules(code: &str, me: &str, known: &BTreeMap<String, std::path::PathBuf>) -> BTreeSet<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let parent = |m: &str| m.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_string());
    let join = |base: &str, seg: &str| if base.is_empty() { seg.to_string() } else { format!("{base}::{seg}") };
    let mut out = BTreeSet::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (start, base) in [("crate::", String::new()), ("super::", parent(me)), ("self::", me.to_string())] {
            for (i, _) in line.match_indices(start) {
                if line[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                // The path's segments, through a group's first entry for `a::{b, c}` (and each
                // entry of a group at the base, `super::{a, b::C}`).
                let rest = &line[i + start.len()..];
                let heads: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group.split(',').map(str::trim).collect(),
                    None => vec![rest],
                };
                for head in heads {
                    let mut at = base.clone();
                    for seg in head.split("::").map(ident) {
                        let next = join(&at, &seg);
                        if seg.is_empty() || !known.contains_key(&next) {
                            break;
                        }
                        at = next;
                    }
                    out.insert(at);
                }
            }
        }
    }
    out
}

/// Inside every crate, modules import downward only: the module graph (`crate::`, `super::`
/// and `self::` paths outside comments and test modules; a module naming an ancestor, the
/// face its children stand behind, is not counted) has no cycle but those `MUTUAL` names.
#[test]
fn modules_import_downward_only_in_every_crate() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut read = 0;
    for (krate, _) in LAYERS {
        let dir = match krate {
            "stowage" => root.join("cli/src"),
            "stowage-tests" => root.join("tests/src"),
            other => root.join(other).join("src"),
        };
        let known = modules(&dir);
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, path) in &known {
            let text = std::fs::read_to_string(path).expect("source");
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let ancestor = |t: &str| t.is_empty() || t == module || module.starts_with(&format!("{t}::"));
            let targets = named_modules(code, module, &known).into_iter().filter(|t| !ancestor(t)).filter(|t| {
                !MUTUAL.iter().any(|&(k, a, b)| k == krate && (a == module && b == t || b == module && a == t))
            });
            edges.entry(module.clone()).or_default().extend(targets);
            read += 1;
        }
        let mut done = BTreeSet::new();
        for m in edges.keys() {
            if let Some(cycle) = visit(m, &edges, &mut Vec::new(), &mut done) {
                panic!("{krate}'s modules import in a circle: {}", cycle.join(" -> "));
            }
        }
    }
    assert!(read > 100, "read the modules of every crate: {read}");
}

/// Depth-first search for a cycle from `m`, reporting its path.
fn visit(
    m: &str,
    edges: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(start) = path.iter().position(|p| p == m) {
        let mut cycle = path[start..].to_vec();
        cycle.push(m.to_string());
        return Some(cycle);
    }
    if done.contains(m) {
        return None;
    }
    path.push(m.to_string());
    for next in edges.get(m).into_iter().flatten() {
        if let Some(c) = visit(next, edges, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(m.to_string());
    None
}
