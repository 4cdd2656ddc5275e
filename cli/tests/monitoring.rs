//! manifests/monitoring against the real tools: Debian's `promtool` checks the alert rules and
//! runs their unit tests (one per alert), and a real `prometheus` scrapes a running `stowage
//! dev` while TrainJobs run through it, loads the rules, and answers every query of the Grafana
//! dashboard with series. scripts/test installs the `prometheus` package; where it is not
//! installed these tests say so and pass, unless `STOWAGE_MONITORING_REQUIRED` is set (as
//! scripts/test sets it once the package is in).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Scratch, http_get};

use serde_json::Value;

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/monitoring");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `tool` runs here; if not, a test that needs it is skipped with a message, or fails
/// where the tools are required.
fn have(tool: &str) -> bool {
    let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("STOWAGE_MONITORING_REQUIRED").is_none(),
            "{tool} is not installed, and STOWAGE_MONITORING_REQUIRED is set (Debian package: prometheus)"
        );
        eprintln!("skipped: {tool} is not installed (Debian package: prometheus; scripts/test installs it)");
    }
    found
}

fn scratch(name: &str) -> Scratch {
    Scratch::new(name)
}

/// The PrometheusRule's `spec`: a plain Prometheus rule file (written as JSON, which YAML
/// readers take as it is).
fn rules() -> Value {
    let text = std::fs::read_to_string(format!("{MONITORING}/prometheus-rule.yaml")).expect("prometheus-rule.yaml");
    let rule: Value = input_limits::yaml::from_str(&text).expect("prometheus-rule.yaml reads");
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

fn alert_names(rules: &Value) -> Vec<String> {
    let groups = rules["groups"].as_array().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_alert_rules_check_and_every_alert_fires_and_holds_in_its_unit_test() {
    if !have("promtool") {
        return;
    }
    let dir = scratch("rules");
    let rules = rules();
    std::fs::write(dir.join("stowage-rules.yml"), rules.to_string()).expect("write rules");
    std::fs::copy(format!("{MONITORING}/rules-test.yaml"), dir.join("rules-test.yaml")).expect("copy tests");
    let (ok, out) = run(Command::new("promtool").args(["check", "rules"]).arg(dir.join("stowage-rules.yml")));
    assert!(ok, "promtool check rules:\n{out}");
    let alerts = alert_names(&rules);
    assert!(alerts.len() >= 5, "{alerts:?}");
    let tests = std::fs::read_to_string(dir.join("rules-test.yaml")).expect("read");
    for alert in &alerts {
        // One test per alert: where it must fire, and where it must not yet.
        assert!(tests.matches(&format!("alertname: {alert}\n")).count() >= 2, "{alert} has no firing-and-not test");
    }
    let (ok, out) = run(Command::new("promtool").args(["test", "rules"]).arg(dir.join("rules-test.yaml")));
    assert!(ok, "promtool test rules:\n{out}");
}

/// Every query of the dashboard, with its variables set as Grafana would for "All".
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(format!("{MONITORING}/grafana-dashboard.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let expr = expr.replace("$queue", ".*").replace("$cluster", ".*").replace("$__rate_interval", "1m");
            queries.push((panel["title"].as_str().unwrap_or("?").to_string(), expr));
        }
    }
    for var in dashboard["templating"]["list"].as_array().expect("variables") {
        if let Some(q) = var["definition"].as_str() {
            // label_values(METRIC, LABEL): the label's values on that metric.
            let inner = q.strip_prefix("label_values(").and_then(|q| q.strip_suffix(')')).expect("label_values");
            let (metric, label) = inner.split_once(", ").expect("metric, label");
            queries.push((format!("variable {}", var["name"]), format!("count by ({label}) ({metric})")));
        }
    }
    queries
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus' answer to an instant query: the series it returned, or why none.
fn query(prometheus: &str, q: &str) -> Result<usize, String> {
    let body = http_get(&format!("{prometheus}/api/v1/query?query={}", encode(q)));
    let v: Value = serde_json::from_str(&body).map_err(|_| format!("no JSON answer: {body:?}"))?;
    if v["status"] != "success" {
        return Err(format!("{v}"));
    }
    match v["data"]["result"].as_array().map(Vec::len) {
        Some(n) if n > 0 => Ok(n),
        _ => Err("no series".into()),
    }
}

/// Starts `stowage dev` on any free ports; returns it, its metrics URL and the hub kubeconfig.
fn stowage_dev(dir: &Path) -> (Killed, String, PathBuf) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["dev", "--metrics-addr", "127.0.0.1:0", "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("stowage dev starts");
    let stdout = child.stdout.take().expect("stdout");
    let guard = Killed(child);
    let mut metrics = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        if let Some(rest) = line.trim().strip_prefix("metrics") {
            metrics = rest.split_whitespace().next().map(str::to_string);
        }
        if line.contains("Ctrl-C") {
            break;
        }
    }
    let metrics = metrics.expect("the banner names the metrics endpoint");
    (guard, metrics, dir.join("hub.kubeconfig"))
}

#[test]
fn a_real_prometheus_scrapes_stowage_dev_loads_the_rules_and_every_dashboard_query_returns_series() {
    if !have("prometheus") {
        return;
    }
    let dir = scratch("prometheus");
    let (_dev, metrics_url, hub) = stowage_dev(&dir.join("dev"));
    let target = metrics_url.trim_start_matches("http://").trim_end_matches("/metrics").to_string();
    std::fs::write(dir.join("stowage-rules.yml"), rules().to_string()).expect("rules");
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{}]\nscrape_configs:\n- job_name: stowage-dev\n  static_configs:\n  - targets: ['{target}']\n",
        dir.join("stowage-rules.yml").display()
    );
    std::fs::write(dir.join("prometheus.yml"), config).expect("config");
    let port = free_port();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let _prometheus = Killed(prometheus);
    let url = format!("http://127.0.0.1:{port}");

    // Work through the playground: the examples (one queue with a quota, TrainJobs that run and
    // one too big for any member, which stays pending).
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/");
    let (ok, out) = run(Command::new("kubectl").arg("--kubeconfig").arg(&hub).args(["apply", "-f", examples]));
    assert!(ok, "kubectl apply -f examples/: {out}");

    let queries = dashboard_queries();
    assert!(queries.len() >= 15, "{queries:?}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut missing: Vec<(String, String, String)>;
    loop {
        missing = queries
            .iter()
            .filter_map(|(panel, q)| query(&url, q).err().map(|why| (panel.clone(), q.clone(), why)))
            .collect();
        if missing.is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(missing.is_empty(), "dashboard queries without series: {missing:#?}");
    // The scrape is healthy, and every rule loaded and evaluates.
    let targets: Value = serde_json::from_str(&http_get(&format!("{url}/api/v1/targets"))).expect("targets");
    assert_eq!(targets["data"]["activeTargets"][0]["health"], "up", "{targets}");
    let rules: Value = serde_json::from_str(&http_get(&format!("{url}/api/v1/rules"))).expect("rules");
    let loaded: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(loaded.len(), alert_names(&self::rules()).len(), "{rules}");
    assert!(loaded.iter().all(|r| r["health"] == "ok"), "{rules}");
}

/// docs/operations.md stays true to the files: a runbook per alert, a line per dashboard panel.
#[test]
fn every_alert_has_a_runbook_and_every_panel_a_line_in_the_operations_docs() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md")).expect("docs");
    for alert in alert_names(&rules()) {
        assert!(docs.contains(&format!("\n### {alert}\n")), "no runbook for {alert} in docs/operations.md");
    }
    let text = std::fs::read_to_string(format!("{MONITORING}/grafana-dashboard.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("title");
        if panel["type"] != "row" {
            assert!(docs.contains(&format!("| {title} |")), "panel {title:?} is not in docs/operations.md");
        }
    }
}
