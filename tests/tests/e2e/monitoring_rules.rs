//! The rules and the dashboard operators deploy (`deploy/monitoring/`): promtool accepts the
//! rules, their unit tests fire and resolve every alert and give every recorded series its
//! value, every alert carries what an operator needs (severity, summary, description, runbook
//! and a link to its runbook section), no expression of a rule or a dashboard panel reads a
//! metric apiagg does not export (or the rules do not record), and the dashboard is what its
//! generator makes, well formed. `e2e::dashboards` runs the queries on a real Prometheus.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml_ng::Value;

const RULES: &str = "deploy/monitoring/apiagg-alerts.yaml";
const RULE_TESTS: &str = "deploy/monitoring/apiagg-alerts.test.yaml";
const RECORDING: &str = "deploy/monitoring/apiagg-rules.yaml";
const RECORDING_TESTS: &str = "deploy/monitoring/apiagg-rules.test.yaml";
pub(crate) const DASHBOARD: &str = "deploy/monitoring/dashboards/apiagg.json";
pub(crate) const GENERATOR: &str = "deploy/monitoring/dashboards/generate.py";
const RUNBOOKS: &str = "deploy/monitoring/README.md";

/// Series the rules may read that apiagg's sources do not name.
const NOT_IN_SOURCES: [&str; 3] = [
    // Prometheus' own, one per scrape target.
    "up",
    // The prometheus crate's ProcessCollector, registered in observe/src/metrics/mod.rs.
    "process_open_fds",
    "process_max_fds",
];

/// LANDING WITH ISSUE 20: flow control and audit metrics being added in other branches, with
/// these upstream names. The integrator removes each name once its metric is registered in
/// `gateway/src/`; this test fails while a name here is already there, so the list cannot
/// outlive them.
const LANDING_WITH_ISSUE_20: [&str; 0] = [];

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn read(path: &str) -> String {
    let full = workspace().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn yaml(path: &str) -> Value {
    serde_yaml_ng::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Runs promtool in the workspace root; panics with its output when it is missing or fails.
fn promtool(args: &[&str]) -> String {
    let output = match Command::new("promtool")
        .args(args)
        .current_dir(workspace())
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "promtool is not installed: `scripts/need.sh prometheus` installs it (Debian's \
             prometheus package ships promtool)"
        ),
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
    assert!(text.contains("SUCCESS"), "promtool said:\n{text}");
    text
}

/// Every rule of a rule file.
fn rules(path: &str) -> Vec<Value> {
    let rules = yaml(path);
    let groups = rules["groups"].as_sequence().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").iter().cloned())
        .collect()
}

/// Every alerting rule of the rule file.
fn alerts() -> Vec<Value> {
    let alerts: Vec<Value> = rules(RULES)
        .into_iter()
        .filter(|r| r.get("alert").is_some())
        .collect();
    assert!(alerts.len() >= 10, "only {} alerts read", alerts.len());
    alerts
}

/// Every recording rule: `(record, expr)`.
fn recordings() -> Vec<(String, String)> {
    let recorded: Vec<(String, String)> = rules(RECORDING)
        .iter()
        .map(|r| (text(r, "record").to_string(), text(r, "expr").to_string()))
        .collect();
    assert!(
        recorded.len() >= 5,
        "only {} recording rules read",
        recorded.len()
    );
    recorded
}

/// The dashboard's queries: `(panel title, expr)`.
pub(crate) fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                panel["title"].as_str().expect("title").to_string(),
                target["refId"].as_str().expect("refId").to_string(),
                target["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    out
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {value:?}"))
}

#[test]
fn promtool_checks_the_rules() {
    let out = promtool(&["check", "rules", RULES]);
    assert!(
        out.contains(&format!("{} rules found", alerts().len())),
        "{out}"
    );
    let out = promtool(&["check", "rules", RECORDING]);
    assert!(
        out.contains(&format!("{} rules found", recordings().len())),
        "{out}"
    );
}

#[test]
fn promtool_unit_tests_fire_and_resolve_every_alert() {
    promtool(&["test", "rules", RULE_TESTS]);
}

#[test]
fn promtool_unit_tests_give_every_recorded_series_its_value() {
    promtool(&["test", "rules", RECORDING_TESTS]);
    let tests = yaml(RECORDING_TESTS);
    let tested: BTreeSet<String> = tests["tests"]
        .as_sequence()
        .expect("tests")
        .iter()
        .flat_map(|t| t["promql_expr_test"].as_sequence().into_iter().flatten())
        .flat_map(|check| metric_names(text(check, "expr")))
        .collect();
    let untested: Vec<String> = recordings()
        .into_iter()
        .map(|(record, _)| record)
        .filter(|record| !tested.contains(record))
        .collect();
    assert!(
        untested.is_empty(),
        "{RECORDING_TESTS} does not test {untested:?}"
    );
}

#[test]
fn the_dashboard_is_what_its_generator_makes() {
    let output = Command::new("python3")
        .arg(GENERATOR)
        .arg("--check")
        .current_dir(workspace())
        .output()
        .expect("python3");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Grafana's own variables the queries may use.
const GRAFANA_VARIABLES: [&str; 3] = ["__rate_interval", "__range", "__interval"];

#[test]
fn the_dashboard_is_well_formed() {
    let dashboard = dashboard();
    let variables: BTreeSet<String> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .map(|v| v["name"].as_str().expect("variable name").to_string())
        .collect();
    for wanted in ["datasource", "instance", "apiservice"] {
        assert!(
            variables.contains(wanted),
            "no ${wanted} variable: {variables:?}"
        );
    }
    let uses = |text: &str| -> Vec<String> {
        text.split('$')
            .skip(1)
            .map(|rest| {
                let rest = rest.trim_start_matches('{');
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .filter(|name: &String| !name.is_empty() && !name.starts_with(char::is_numeric))
            .collect()
    };
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    let mut problems = Vec::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() > 20, "only {} panels", panels.len());
    let mut rows = 0;
    for panel in panels {
        let id = panel["id"].as_u64().expect("every panel has a numeric id");
        let title = panel["title"].as_str().expect("every panel has a title");
        if !ids.insert(id) {
            problems.push(format!("id {id} used twice"));
        }
        if !titles.insert(title.to_string()) {
            problems.push(format!("title {title:?} used twice"));
        }
        let grid = &panel["gridPos"];
        let fits = ["h", "w", "x", "y"].iter().all(|k| grid[k].is_u64())
            && grid["x"].as_u64().unwrap_or(99) + grid["w"].as_u64().unwrap_or(99) <= 24;
        if !fits {
            problems.push(format!("{title}: gridPos {grid}"));
        }
        if panel["type"] == "row" {
            rows += 1;
            continue;
        }
        let datasource = |v: &serde_json::Value| v["uid"] == "${datasource}";
        if !datasource(&panel["datasource"]) {
            problems.push(format!("{title}: panel datasource {}", panel["datasource"]));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{title}: no query"));
        }
        for target in &targets {
            if !datasource(&target["datasource"]) {
                problems.push(format!(
                    "{title}: query datasource {}",
                    target["datasource"]
                ));
            }
            let expr = target["expr"].as_str().unwrap_or_default();
            for name in uses(expr) {
                if !variables.contains(&name) && !GRAFANA_VARIABLES.contains(&name.as_str()) {
                    problems.push(format!("{title}: ${name} is no variable"));
                }
            }
            for wanted in ["$job", "$instance"] {
                if !expr.contains(wanted) {
                    problems.push(format!("{title}: the query does not select {wanted}"));
                }
            }
        }
        if panel["description"].as_str().is_none_or(str::is_empty) {
            problems.push(format!("{title}: no description"));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let query = variable["definition"].as_str().unwrap_or_default();
        for name in uses(query) {
            if !variables.contains(&name) {
                problems.push(format!(
                    "variable {}: ${name} is no variable",
                    variable["name"]
                ));
            }
        }
    }
    assert!(rows >= 8, "{rows} rows");
    assert!(problems.is_empty(), "{DASHBOARD}:\n{}", problems.join("\n"));
}

#[test]
fn every_alert_is_tested_firing_and_not_firing() {
    // alert name → (cases where it fires, cases where it does not)
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let tests = yaml(RULE_TESTS);
    for test in tests["tests"].as_sequence().expect("tests") {
        let Some(checks) = test["alert_rule_test"].as_sequence() else {
            continue;
        };
        for check in checks {
            let entry = cases
                .entry(text(check, "alertname").to_string())
                .or_default();
            match check["exp_alerts"].as_sequence().map(Vec::len) {
                Some(0) | None => entry.1 += 1,
                Some(_) => entry.0 += 1,
            }
        }
    }
    let mut missing = Vec::new();
    for alert in alerts() {
        let name = text(&alert, "alert");
        match cases.remove(name) {
            Some((fires, quiet)) if fires > 0 && quiet > 0 => {}
            Some((fires, quiet)) => {
                missing.push(format!("{name}: {fires} firing and {quiet} quiet cases"))
            }
            None => missing.push(format!("{name}: not tested")),
        }
    }
    assert!(missing.is_empty(), "{RULE_TESTS}:\n{}", missing.join("\n"));
    assert!(cases.is_empty(), "tests of unknown alerts: {cases:?}");
}

#[test]
fn every_alert_says_how_bad_what_and_where_its_runbook_is() {
    let runbooks = read(RUNBOOKS);
    let headings: BTreeSet<&str> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .collect();
    for alert in alerts() {
        let name = text(&alert, "alert");
        let severity = text(&alert["labels"], "severity");
        assert!(
            ["warning", "critical"].contains(&severity),
            "{name}: severity {severity}"
        );
        let annotations = &alert["annotations"];
        for key in ["summary", "description", "runbook"] {
            assert!(!text(annotations, key).trim().is_empty(), "{name}: {key}");
        }
        assert_eq!(
            text(annotations, "runbook_url"),
            format!("{RUNBOOKS}#{}", name.to_lowercase()),
            "{name}"
        );
        assert!(
            headings.contains(name),
            "{RUNBOOKS} has no \"### {name}\" runbook section"
        );
    }
}

/// PromQL words that look like metric names: aggregation operators (they may be followed by
/// `by`/`without` instead of `(`), set operators and modifiers.
const KEYWORDS: [&str; 24] = [
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Clauses whose parenthesised list holds label names, not expressions.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names an expression reads: the identifiers left once strings, label matchers
/// (`{…}`), ranges (`[…]`), numbers and label lists (`by (…)` and the like) are taken out, less
/// function calls (an identifier followed by `(`) and PromQL's keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Blank out strings, matchers and ranges.
    let mut plain = String::new();
    let (mut quote, mut escaped, mut depth) = (None, false, 0usize);
    for c in expr.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            plain.push(' ');
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => {
                plain.push(c);
                continue;
            }
            _ => {}
        }
        plain.push(' ');
    }
    // Tokens: identifiers, numbers (eaten whole, so `1e3` or `5m` is no identifier), and single
    // characters.
    let chars: Vec<char> = plain.chars().collect();
    let mut tokens: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '.';
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' || c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && word(chars[i]) {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].as_str();
        let next = tokens.get(i + 1).map(String::as_str);
        if LABEL_LISTS.contains(&token) && next == Some("(") {
            // Skip to the closing parenthesis.
            while i < tokens.len() && tokens[i] != ")" {
                i += 1;
            }
        } else if token.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && next != Some("(")
            && !KEYWORDS.contains(&token)
        {
            names.insert(token.to_string());
        }
        i += 1;
    }
    names
}

#[test]
fn metric_names_are_read_from_expressions() {
    let expr = r#"
        sum by (job, group) (rate(a_total{job=~"x.*", code=~"5.."}[5m])) / on (job) group_left(version)
        sum without(le) (b_bucket{le="1"} offset 5m) > 0.05 and histogram_quantile(0.99, c) < 1e3
        or absent(up{job="x"} == 1) unless d - time() < 14 * 86400 and min(e) > bool 2
    "#;
    let found: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(found, ["a_total", "b_bucket", "c", "d", "e", "up"]);
}

fn rust_sources(dir: &Path, out: &mut String) {
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&std::fs::read_to_string(&path).expect("read source"));
        }
    }
}

#[test]
fn rules_and_panels_read_only_metrics_apiagg_exports_or_the_rules_record() {
    let mut sources = String::new();
    for crate_dir in ["gateway", "observe", "audit", "flowcontrol", "store"] {
        rust_sources(&workspace().join(crate_dir).join("src"), &mut sources);
    }
    // A metric is exported when its name is a string literal in the process's sources (a
    // histogram's series by the histogram's name).
    let exported = |name: &str| {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        [name, base]
            .iter()
            .any(|n| sources.contains(&format!("\"{n}\"")))
    };
    assert!(
        sources.contains("ProcessCollector::for_self()"),
        "the process_* metrics are allowed because apiagg registers the ProcessCollector"
    );
    let recorded: BTreeSet<String> = recordings().into_iter().map(|(r, _)| r).collect();
    let mut expressions: Vec<(String, String)> = alerts()
        .iter()
        .map(|a| (text(a, "alert").to_string(), text(a, "expr").to_string()))
        .collect();
    expressions.extend(recordings());
    expressions.extend(
        dashboard_queries(&dashboard())
            .into_iter()
            .map(|(title, _, expr)| (title, expr)),
    );
    let mut used = BTreeSet::new();
    let mut unknown = Vec::new();
    for (name, expr) in expressions {
        for metric in metric_names(&expr) {
            let allowed = NOT_IN_SOURCES.contains(&metric.as_str())
                || recorded.contains(&metric)
                || LANDING_WITH_ISSUE_20.contains(&metric.as_str());
            if !exported(&metric) && !allowed {
                unknown.push(format!("{name}: {metric}"));
            }
            used.insert(metric);
        }
    }
    assert!(
        unknown.is_empty(),
        "rules or panels read metrics apiagg does not export:\n{}",
        unknown.join("\n")
    );
    // The scan found what it must (else it is broken and proves nothing).
    for metric in [
        "aggregator_unavailable_apiservice",
        "apiagg_proxy_requests_total",
        "apiagg_proxy_request_duration_seconds_bucket",
        "apiagg_certificate_expiration_timestamp_seconds",
        "up",
    ] {
        assert!(
            used.contains(metric),
            "{metric} not found in the rules: {used:?}"
        );
        assert!(
            metric == "up" || exported(metric),
            "{metric} not found in the sources"
        );
    }
    let landed: Vec<&str> = LANDING_WITH_ISSUE_20
        .iter()
        .copied()
        .filter(|m| exported(m))
        .collect();
    assert!(
        landed.is_empty(),
        "now exported by apiagg: remove {landed:?} from LANDING_WITH_ISSUE_20"
    );
}
