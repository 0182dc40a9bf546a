//! The monitoring that ships with Bloodraven names only metrics the
//! components really export (docs/metrics.md): every PromQL expression in
//! `monitoring/prometheus-rules.yaml` (alerts) and
//! `monitoring/grafana-dashboard.json` (panels and template variables)
//! selects metric families that the operator's or the webhook's registry
//! holds, with label matchers on labels those families have; every alert
//! carries a `runbook_url` whose file and section exist under `docs/`; and
//! `docs/metrics.md` lists every family and no other.
//!
//! The families come from the components themselves
//! (`bloodraven_operator::metric_families`, `bloodraven_webhook::Metrics`),
//! with or without series: `gather()` leaves out a labelled family that has
//! no series yet, the description of each registered collector does not.
//! The sidecar and `bloodraven-migrate` export no metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Where a runbook URL points: this prefix, then a path in the repository.
const RUNBOOK_BASE: &str = "https://example.invalid/bloodraven/blob/main/";

/// Labels Prometheus adds to every scraped series (target labels), which a
/// query may match on although no component declares them.
const TARGET_LABELS: &[&str] = &["job", "instance", "namespace", "pod", "container", "service", "endpoint"];

/// A metric family: its label names.
type Families = BTreeMap<String, BTreeSet<String>>;

/// The repository: from `CARGO_MANIFEST_DIR` as `cargo test` sets it when it
/// runs the test (the compile-time value would name whichever checkout last
/// built this binary in a shared target folder).
fn root() -> PathBuf {
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from);
    manifest.join("..")
}

#[allow(clippy::unwrap_used)] // a helper of the tests: a failure fails the test
fn exported() -> Families {
    let mut families = Families::new();
    let operator = bloodraven_operator::metric_families().unwrap();
    let webhook = bloodraven_webhook::Metrics::new().unwrap().families();
    for desc in operator.into_iter().chain(webhook) {
        let labels = desc.variable_labels.iter().cloned().collect();
        assert!(families.insert(desc.fq_name.clone(), labels).is_none(), "{} is registered twice", desc.fq_name);
    }
    families
}

/// One vector selector of a query: the metric name and the label names it matches on.
#[derive(Debug, PartialEq, Eq)]
struct Selector {
    name: String,
    labels: Vec<String>,
}

/// Words of PromQL that are not metric names when not followed by `(`.
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "Inf",
    "NaN",
];

/// Keywords whose parenthesised list holds label names, not expressions.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The vector selectors of a PromQL expression: identifiers that are not
/// functions (followed by `(`), keywords, label names in `{…}` or in a
/// `by (…)`-like list, durations, numbers, strings or Grafana variables
/// (`$group`, `$__rate_interval`). Grafana's `label_values(SELECTOR, LABEL)`
/// contributes SELECTOR only.
fn selectors(expr: &str) -> Result<Vec<Selector>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut label_values_depth: Option<usize> = None;
    let mut depth = 0usize;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i)?;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '[' {
            i = skip_past(&chars, i, ']')?;
        } else if c == '{' {
            // A selector with no name: `{__name__="x"}`.
            let (labels, names, next) = matchers(&chars, i)?;
            for name in names {
                out.push(Selector { name, labels: labels.clone() });
            }
            i = next;
        } else if c == '(' {
            depth += 1;
            i += 1;
        } else if c == ')' {
            depth = depth.checked_sub(1).ok_or("unbalanced )")?;
            if label_values_depth == Some(depth + 1) {
                label_values_depth = None;
            }
            i += 1;
        } else if c == ',' && label_values_depth == Some(depth) {
            // label_values(SELECTOR, LABEL): skip LABEL.
            i = skip_past(&chars, i, ')')? - 1;
        } else if c == '$' {
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.' || chars[i] == '_') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let next = chars.get(j).copied();
            let rest: String = chars[j..].iter().take(8).collect();
            let aggregation = ["by", "without"]
                .iter()
                .any(|k| rest.strip_prefix(k).is_some_and(|r| r.starts_with(|c: char| c.is_whitespace() || c == '(')));
            if aggregation {
                // `sum by (…) (…)`: an aggregation operator, not a metric.
            } else if LABEL_LISTS.contains(&word.as_str()) {
                if next == Some('(') {
                    i = skip_past(&chars, j, ')')?;
                }
            } else if KEYWORDS.contains(&word.as_str()) {
            } else if next == Some('(') {
                if word == "label_values" {
                    label_values_depth = Some(depth + 1);
                }
            } else if next == Some('{') {
                let (labels, names, after) = matchers(&chars, j)?;
                if !names.is_empty() {
                    return Err(format!("{word} also has a __name__ matcher"));
                }
                out.push(Selector { name: word, labels });
                i = after;
            } else {
                out.push(Selector { name: word, labels: Vec::new() });
            }
        } else {
            i += 1;
        }
    }
    if depth != 0 {
        return Err("unbalanced (".into());
    }
    Ok(out)
}

/// Skips a string literal starting at `at`; returns the index after it.
fn skip_string(chars: &[char], at: usize) -> Result<usize, String> {
    let quote = chars[at];
    let mut i = at + 1;
    while i < chars.len() {
        if chars[i] == '\\' && quote != '`' {
            i += 2;
        } else if chars[i] == quote {
            return Ok(i + 1);
        } else {
            i += 1;
        }
    }
    Err("unterminated string".into())
}

/// The index after the first `close` from `at` on, outside strings.
fn skip_past(chars: &[char], at: usize, close: char) -> Result<usize, String> {
    let mut i = at + 1;
    while i < chars.len() {
        if chars[i] == '"' || chars[i] == '\'' {
            i = skip_string(chars, i)?;
        } else if chars[i] == close {
            return Ok(i + 1);
        } else {
            i += 1;
        }
    }
    Err(format!("no closing {close}"))
}

/// The label names of the matchers `{a="x", b=~"y"}` starting at `at`, the
/// values of `__name__` equality matchers, and the index after `}`.
fn matchers(chars: &[char], at: usize) -> Result<(Vec<String>, Vec<String>, usize), String> {
    let mut labels = Vec::new();
    let mut names = Vec::new();
    let mut i = at + 1;
    loop {
        while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
            i += 1;
        }
        match chars.get(i) {
            None => return Err("no closing }".into()),
            Some('}') => return Ok((labels, names, i + 1)),
            Some(_) => {}
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
            i += 1;
        }
        let label: String = chars[start..i].iter().collect();
        if label.is_empty() {
            return Err(format!("a label name was expected at {:?}", chars[i..].iter().collect::<String>()));
        }
        while i < chars.len() && matches!(chars[i], ' ' | '=' | '!' | '~') {
            i += 1;
        }
        if !matches!(chars.get(i), Some('"' | '\'' | '`')) {
            return Err(format!("a quoted value was expected after {label}"));
        }
        let end = skip_string(chars, i)?;
        if label == "__name__" {
            names.push(chars[i + 1..end - 1].iter().collect());
        } else {
            labels.push(label);
        }
        i = end;
    }
}

/// What is wrong with the metrics `expr` names, one line each.
fn check(expr: &str, families: &Families) -> Vec<String> {
    let selectors = match selectors(expr) {
        Ok(s) => s,
        Err(e) => return vec![format!("cannot read {expr:?}: {e}")],
    };
    if selectors.is_empty() {
        return vec![format!("{expr:?} names no metric")];
    }
    let mut problems = Vec::new();
    for s in selectors {
        let found = families.get(&s.name).map(|labels| (s.name.as_str(), labels, false)).or_else(|| {
            ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
                // The descriptions carry no metric type: a suffix is taken
                // on any family but a counter's (`…_total`).
                let family = s.name.strip_suffix(suffix).filter(|f| !f.ends_with("_total"))?;
                families.get(family).map(|labels| (family, labels, *suffix == "_bucket"))
            })
        });
        let Some((family, labels, bucket)) = found else {
            problems.push(format!("{} is not a metric the components export (in {expr:?})", s.name));
            continue;
        };
        for label in &s.labels {
            let known = labels.contains(label) || (bucket && label == "le") || TARGET_LABELS.contains(&label.as_str());
            if !known {
                problems.push(format!("{family} has no label {label} (in {expr:?})"));
            }
        }
    }
    problems
}

/// GitHub's anchor for a Markdown heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A runbook URL's problem, if any: the file must exist and have the section.
fn check_runbook(alert: &str, url: Option<&str>) -> Option<String> {
    let Some(url) = url else { return Some(format!("alert {alert} has no runbook_url")) };
    let Some(rest) = url.strip_prefix(RUNBOOK_BASE) else {
        return Some(format!("alert {alert}: runbook_url {url} does not start with {RUNBOOK_BASE}"));
    };
    let (path, anchor) = rest.split_once('#').unwrap_or((rest, ""));
    let Ok(text) = std::fs::read_to_string(root().join(path)) else {
        return Some(format!("alert {alert}: runbook_url names {path}, which does not exist"));
    };
    let anchors: BTreeSet<String> =
        text.lines().filter_map(|l| l.strip_prefix('#')).map(|h| slug(h.trim_start_matches('#'))).collect();
    (anchor.is_empty() || !anchors.contains(anchor)).then(|| format!("alert {alert}: {path} has no section #{anchor}"))
}

#[allow(clippy::unwrap_used)] // a helper of the tests: a failure fails the test
fn yaml(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// Every `expr` (panels) and query of a template variable of type `query`
/// in the dashboard (a `datasource` variable's `query` is a plugin type).
fn dashboard_queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) if map.get("type").is_some_and(|t| t == "query") => {
                        out.push(s.clone());
                    }
                    ("query", serde_json::Value::Object(q)) => {
                        if let Some(serde_json::Value::String(s)) = q.get("query") {
                            out.push(s.clone());
                        }
                    }
                    _ => dashboard_queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| dashboard_queries(v, out)),
        _ => {}
    }
}

#[test]
fn alerts_name_only_exported_metrics_and_existing_runbook_sections() {
    let families = exported();
    let rules = yaml("monitoring/prometheus-rules.yaml");
    assert_eq!(rules["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rules["kind"], "PrometheusRule");
    let mut problems = Vec::new();
    let mut alerts = 0;
    for group in rules["spec"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().unwrap();
            let expr = rule["expr"].as_str().unwrap();
            alerts += 1;
            problems.extend(check(expr, &families));
            problems.extend(check_runbook(name, rule["annotations"]["runbook_url"].as_str()));
            if rule["labels"]["severity"].as_str().is_none() {
                problems.push(format!("alert {name} has no severity label"));
            }
        }
    }
    assert!(alerts >= 10, "only {alerts} alerts read");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn dashboard_queries_name_only_exported_metrics() {
    let families = exported();
    let text = std::fs::read_to_string(root().join("monitoring/grafana-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, &mut queries);
    assert!(queries.len() >= 10, "only {} queries read", queries.len());
    let problems: Vec<String> = queries.iter().flat_map(|q| check(q, &families)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_metrics_reference_lists_every_family_and_no_other() {
    let families = exported();
    let text = std::fs::read_to_string(root().join("docs/metrics.md")).unwrap();
    let mut problems = Vec::new();
    for family in families.keys() {
        if !text.contains(&format!("`{family}`")) {
            problems.push(format!("docs/metrics.md does not list `{family}`"));
        }
    }
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("bloodraven_") && word != "bloodraven_" {
            problems.extend(check(word, &families));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_finds_a_misspelt_metric_or_label() {
    let families = exported();
    let good = "histogram_quantile(0.99, sum by (le, handler) (rate(bloodraven_deploy_request_duration_seconds_bucket{handler=~\"$h\"}[$__rate_interval])))";
    assert_eq!(check(good, &families), Vec::<String>::new());
    let typo = "sum(rate(bloodraven_deploy_request_total[5m])) > 0";
    assert_eq!(check(typo, &families).len(), 1, "{:?}", check(typo, &families));
    let label = "bloodraven_site_up{group=\"g\", site_name=\"iad\"} == 0";
    assert_eq!(check(label, &families).len(), 1);
    let counter_bucket = "bloodraven_reconcile_total_bucket";
    assert_eq!(check(counter_bucket, &families).len(), 1);
    let by_name = "{__name__=\"bloodraven_leaders\"}";
    assert_eq!(check(by_name, &families).len(), 1);
    let in_label_values = "label_values(bloodraven_group_stables, group)";
    assert_eq!(check(in_label_values, &families).len(), 1);
    assert_eq!(check("label_values(bloodraven_group_stable, group)", &families), Vec::<String>::new());
    assert_eq!(check("count by(group) (bloodraven_site_writable == 1)", &families), Vec::<String>::new());
    let keywords =
        "sum without (site) (bloodraven_site_up) unless on (group) group_left bloodraven_group_stable offset 5m";
    assert_eq!(check(keywords, &families), Vec::<String>::new());
    assert_eq!(check("vector(1)", &families).len(), 1, "a query with no metric is reported");
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(slug(" A migration stuck on a lock"), "a-migration-stuck-on-a-lock");
    assert_eq!(slug("Stuck leases: `revoke-deployment-leases`"), "stuck-leases-revoke-deployment-leases");
}
