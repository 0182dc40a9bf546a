//! The 1,000-group run: 1,000 groups, all on the one
//! local MariaDB pair, at the default 5 s probe interval, under one fresh
//! operator process. Measured at steady state over [`WINDOW`]: operator RSS
//! (`/proc/<pid>/status`), CPU (`/proc/<pid>/stat`, utime + stime over wall
//! time, in cores), API-server requests per second (the API server's own
//! `apiserver_request_total`, diffed; the operator is the only client during
//! the window), and probe-to-status latency (the operator's
//! `bloodraven_probe_to_status_seconds` histogram, diffed over the window).
//! Then one change on the pair that every group sees, timed end to end
//! through a watch. Figures only: nothing is asserted.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::{MysqlFailoverGroup, MysqlFailoverGroupStatus};
use bloodraven_e2e::fixtures::{create_group, group, has_condition, is_ready_at};
use bloodraven_e2e::operator::{E2E_LABEL, LeaderTimings};
use bloodraven_e2e::{Cluster, Operator, SitePair, TestNamespace};
use futures::StreamExt as _;
use kube::ResourceExt as _;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt as _, watcher};

/// Groups in the run.
const GROUPS: usize = 1000;
/// Groups created concurrently.
const BATCH: usize = 50;
/// Steady-state measurement window.
const WINDOW: Duration = Duration::from_secs(60);
/// Longest wait for every group to bootstrap.
const BOOTSTRAP: Duration = Duration::from_secs(600);
/// Time after the last group turned Ready before measuring, for the
/// bootstrap burst (Events, the status writes of the first rounds) to end.
const SETTLE: Duration = Duration::from_secs(20);
/// API verbs that write.
const WRITE_VERBS: [&str; 6] = ["POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"];

/// One reading of everything the window diffs.
struct Reading {
    at: Instant,
    cpu_seconds: f64,
    api: BTreeMap<(String, String), f64>,
    operator: String,
}

async fn read(cluster: &Cluster, operator: &Operator) -> Reading {
    let req = kube::core::Request::new("/metrics").list(&ListParams::default()).unwrap();
    let text = cluster.client.request_text(req).await.unwrap();
    Reading {
        at: Instant::now(),
        cpu_seconds: operator.cpu_seconds().unwrap(),
        api: api_requests(&text),
        operator: operator.metrics().await.unwrap(),
    }
}

fn label<'a>(labels: &'a str, key: &str) -> &'a str {
    labels
        .split(',')
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix("=\"")))
        .map_or("", |v| v.trim_end_matches('"'))
}

/// `apiserver_request_total` summed by (verb, resource[/subresource]).
fn api_requests(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some((labels, value)) = line["apiserver_request_total{".len()..].rsplit_once("} ") else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let (resource, sub) = (label(labels, "resource"), label(labels, "subresource"));
        let resource = if sub.is_empty() { resource.to_owned() } else { format!("{resource}/{sub}") };
        *out.entry((label(labels, "verb").to_owned(), resource)).or_insert(0.0) += value;
    }
    out
}

/// The value of the series `name{labels}` (exact label text) in `metrics`.
fn series(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Cumulative buckets `(le, count)` of the probe-to-status histogram.
fn buckets(metrics: &str) -> Vec<(f64, f64)> {
    let prefix = "bloodraven_probe_to_status_seconds_bucket{";
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let (labels, value) = l[prefix.len()..].rsplit_once("} ")?;
            let le = label(labels, "le");
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, value.parse().ok()?))
        })
        .collect()
}

/// The `q` quantile of the observations between two readings of a
/// histogram, interpolated linearly within its bucket (as Prometheus'
/// `histogram_quantile`); `None` without observations.
fn quantile(before: &str, after: &str, q: f64) -> Option<f64> {
    let (b, a) = (buckets(before), buckets(after));
    // The same series in the same order in both readings (one label value, fixed buckets).
    let delta: Vec<(f64, f64)> =
        a.iter().enumerate().map(|(i, (le, n))| (*le, n - b.get(i).map_or(0.0, |(_, m)| *m))).collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for (le, n) in &delta {
        if *n >= rank {
            if le.is_infinite() {
                return Some(lower.0); // beyond the last bound: report that bound
            }
            return Some(lower.0 + (le - lower.0) * (rank - lower.1) / (n - lower.1).max(f64::MIN_POSITIVE));
        }
        lower = (*le, *n);
    }
    None
}

/// Watches the run's groups until `done` holds for every one of them or
/// `limit` passes; returns when each first satisfied it, from `t0`.
async fn watch_until(
    cluster: &Cluster,
    selector: &str,
    limit: Duration,
    t0: Instant,
    done: impl Fn(&MysqlFailoverGroupStatus) -> bool,
) -> HashMap<String, Duration> {
    let config = watcher::Config::default().labels(selector);
    let mut stream = std::pin::pin!(watcher(cluster.groups(), config).default_backoff().applied_objects());
    let mut seen: HashMap<String, Duration> = HashMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while seen.len() < GROUPS {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(g))) => {
                let g: MysqlFailoverGroup = g;
                if done(&g.status.clone().unwrap_or_default()) {
                    seen.entry(g.name_any()).or_insert_with(|| t0.elapsed());
                }
            }
            Ok(Some(Err(_))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    seen
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64()
}

/// Runs the 1,000-group figures and prints their table.
pub async fn run(cluster: &Cluster, ns: &TestNamespace, pair: &SitePair) {
    let label = format!("{}-k", ns.name);
    let selector = format!("{E2E_LABEL}={label}");
    let operator = Operator::start(cluster, ns, &label, "op1000", LeaderTimings::default()).await;
    let started = Instant::now();
    let names: Vec<String> = (0..GROUPS).map(|i| format!("{label}-{i:04}")).collect();
    for chunk in names.chunks(BATCH) {
        let mut batch = tokio::task::JoinSet::new();
        for name in chunk {
            let mut g = group(name, &label, pair.sites(&ns.name, "site-creds"), "iad");
            g.spec.failover.probe_interval_seconds = 5; // the default interval
            let cluster = cluster.clone();
            batch.spawn(async move { create_group(&cluster, &g).await });
        }
        batch.join_all().await;
    }
    println!("figure: created {GROUPS} groups in {:.0} s", started.elapsed().as_secs_f64());
    let bootstrapped = watch_until(cluster, &selector, BOOTSTRAP, started, |s| is_ready_at(s, "iad", 1).is_ok()).await;
    let last = bootstrapped.values().max().copied().unwrap_or_default();
    println!(
        "figure: {} of {GROUPS} groups bootstrapped and Ready; the last {:.0} s after the first create",
        bootstrapped.len(),
        last.as_secs_f64()
    );
    tokio::time::sleep(SETTLE).await;

    let a = read(cluster, &operator).await;
    tokio::time::sleep(WINDOW).await;
    let b = read(cluster, &operator).await;
    let (peak, rss) = operator.memory_kib().unwrap();
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let cores = (b.cpu_seconds - a.cpu_seconds) / secs;
    let rate = |pred: &dyn Fn(&str) -> bool| -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for ((verb, resource), n) in &b.api {
            if pred(verb) {
                let d = n - a.api.get(&(verb.clone(), resource.clone())).copied().unwrap_or(0.0);
                if d > 0.0 {
                    *out.entry(format!("{verb} {resource}")).or_insert(0.0) += d / secs;
                }
            }
        }
        out
    };
    let writes = rate(&|v| WRITE_VERBS.contains(&v));
    let reads = rate(&|v| matches!(v, "GET" | "LIST"));
    let op_delta = |s: &str| series(&b.operator, s) - series(&a.operator, s);
    let written = op_delta("bloodraven_status_writes_total{outcome=\"written\"}");
    let unchanged = op_delta("bloodraven_status_writes_total{outcome=\"unchanged\"}");
    let reconciles = op_delta("bloodraven_reconcile_total{controller=\"failovergroup\"}");
    let p99 = quantile(&a.operator, &b.operator, 0.99);
    let p50 = quantile(&a.operator, &b.operator, 0.5);

    // One change on the pair that every group sees.
    let before = operator.metrics().await.unwrap();
    pair.sql("pdx", "STOP SLAVE SQL_THREAD");
    let t0 = Instant::now();
    let seen = watch_until(cluster, &selector, Duration::from_secs(120), t0, |s| {
        has_condition(s, "ReplicationNotRunning", "True", None).is_ok()
    })
    .await;
    let after = operator.metrics().await.unwrap();
    let change_p99 = quantile(&before, &after, 0.99);
    pair.sql("pdx", "START SLAVE SQL_THREAD");
    let mut samples: Vec<Duration> = seen.values().copied().collect();

    let total = |m: &BTreeMap<String, f64>| m.values().sum::<f64>();
    let top = |m: &BTreeMap<String, f64>, n: usize| {
        let mut v: Vec<(&String, &f64)> = m.iter().collect();
        v.sort_by(|x, y| y.1.total_cmp(x.1));
        v.iter().take(n).map(|(k, n)| format!("{k} {n:.2}")).collect::<Vec<_>>().join(", ")
    };
    let ms = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |s| format!("{:.0} ms", s * 1000.0));
    #[allow(clippy::cast_precision_loss)]
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!();
    println!("figures: {GROUPS} groups on one MariaDB pair, 5 s probe interval, steady state over {secs:.0} s");
    println!("| measure | value | goal |");
    println!("|---|---|---|");
    println!("| operator RSS | {:.1} MiB (peak {:.1} MiB) | < 100 MiB |", mib(rss), mib(peak));
    println!("| operator CPU | {cores:.2} cores | < 0.5 |");
    println!("| API-server writes/s (every client; the operator is the only one) | {:.2} | near 0 |", total(&writes));
    // Every kind of write: they are what the steady state should not have.
    println!("| … by verb and resource | {} | |", top(&writes, usize::MAX));
    println!("| API-server reads/s (GET, LIST) | {:.1} | |", total(&reads));
    println!("| … by verb and resource | {} | |", top(&reads, 6));
    println!("| observations written / found unchanged (operator) | {written:.0} / {unchanged:.0} | |");
    println!("| group reconciles/s | {:.1} (1,000 / 5 s = 200) | |", reconciles / secs);
    println!("| probe-to-status in the operator, p50 / p99 | {} / {} | p99 < 1 s |", ms(p50), ms(p99));
    println!("| … while every group reports one change, p99 | {} | < 1 s |", ms(change_p99));
    if samples.is_empty() {
        println!("| site change to status, every group (watch) | no group reported it within 120 s | |");
    } else {
        let n = samples.len();
        println!(
            "| site change to status, every group (watch), p50 / p99 / max | {:.2} / {:.2} / {:.2} s (n={n}) | |",
            percentile(&mut samples, 0.5),
            percentile(&mut samples, 0.99),
            samples[n - 1].as_secs_f64()
        );
    }
}
