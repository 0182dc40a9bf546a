//! Webhook benchmark on real components (`make bench-webhook`). Prints
//! figures; asserts nothing.
//!
//! Admission latency through the real kube-apiserver at `BENCH_RATE` (100)
//! requests/s: server-side dry-run creates of an annotated migration Job
//! (the injection path: cache lookups, the patch) in a namespace served by
//! `bloodraven-webhook`, beside the same creates in a namespace served by the
//! same binary in `--noop` mode (answers "allowed" at once) registered the
//! same way — the same API server, the same TLS listener, the same
//! `matchConditions`. A third side, in a third namespace, is the same binary
//! in `--noop` mode answering every review with the very patch the real
//! webhook produces (taken from a dry run of each): it costs the API server
//! the same patch and the same bigger Job to default and validate, without
//! the webhook's checks, so it separates what the webhook adds from what
//! injecting a sidecar costs the API server. The sides alternate in 5 s
//! blocks for `BENCH_SECONDS` (30) each, so drift of the machine falls on
//! all. Prints p50/p99 of each, the ratios, the p99 the webhook adds, the
//! webhook's own review time (its histogram), and the resident sets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must end the run loudly

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_e2e::Cluster;
use bloodraven_e2e::operator::process_memory_kib;
use bloodraven_e2e::webhook::{Options, Webhook};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// The no-op webhook's name in the API server's metrics.
const NOOP_NAME: &str = "noop-inject.bloodraven.shipstream.io";
/// The same-patch webhook's name in the API server's metrics.
const SAME_NAME: &str = "same-patch-inject.bloodraven.shipstream.io";

/// What injection changes in a Job, as the API server returns it: its spec
/// and annotations, without what the server derives from each Job's own
/// uid and name after admission (name, namespace, uid, timestamps, the
/// selector and the Pod template's labels).
fn injected_part(job: &Job) -> serde_json::Value {
    let mut spec = serde_json::to_value(&job.spec).unwrap();
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("selector");
    }
    if let Some(meta) = spec.pointer_mut("/template/metadata").and_then(serde_json::Value::as_object_mut) {
        meta.remove("labels");
    }
    json!({"metadata": {"annotations": job.metadata.annotations}, "spec": spec})
}

/// Renames webhook 0 of mutating configuration `config`, so the API server's
/// histograms tell the sides apart.
async fn rename(cluster: &Cluster, config: &str, name: &str) {
    Api::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>::all(cluster.client.clone())
        .patch(
            config,
            &PatchParams::default(),
            &Patch::<()>::Json(
                serde_json::from_value(json!([{"op": "replace", "path": "/webhooks/0/name", "value": name}])).unwrap(),
            ),
        )
        .await
        .unwrap();
}

/// A dry-run create of the bench Job in `ns`, retried until the webhook
/// serving `ns` answers (its registration may still be settling).
async fn dry_run(cluster: &Cluster, ns: &str, group: &str) -> Job {
    let api = Api::<Job>::namespaced(cluster.client.clone(), ns);
    bloodraven_e2e::wait_for(&format!("a dry-run create in {ns}"), Duration::from_secs(30), || async {
        api.create(&PostParams { dry_run: true, ..PostParams::default() }, &job(group)).await.map_err(|e| e.to_string())
    })
    .await
}

async fn apiserver_metrics(cluster: &Cluster) -> String {
    cluster.client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap_or_default()
}

/// The API server's view of one webhook: `apiserver_admission_webhook_admission_duration_seconds`
/// buckets of webhook `name` (the call, from the API server's side).
fn webhook_call_buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    bloodraven_e2e::promtext::buckets(text, "apiserver_admission_webhook_admission_duration_seconds", |l| {
        l.get("name") == Some(name)
    })
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn job(group: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "bench-", "annotations": {
            "bloodraven.shipstream.io/inject": "true",
            "bloodraven.shipstream.io/group": group,
            "bloodraven.shipstream.io/instance": "counter-app"}},
        "spec": {"template": {"spec": {"serviceAccountName": "deployer", "restartPolicy": "Never",
            "containers": [{"name": "migrate", "image": "app:1", "command": ["/app/migrate"]}]}}},
    }))
    .unwrap()
}

/// Sends dry-run creates to `ns` at `rate`/s for `block`; appends each latency (ms).
async fn block(
    cluster: &Cluster,
    ns: &str,
    group: &str,
    rate: u64,
    block: Duration,
    out: &Arc<Mutex<Vec<f64>>>,
    errors: &Arc<Mutex<u64>>,
) {
    let api = Api::<Job>::namespaced(cluster.client.clone(), ns);
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut tasks = Vec::new();
    while started.elapsed() < block {
        tick.tick().await;
        let (api, out, errors, j) = (api.clone(), out.clone(), errors.clone(), job(group));
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = api.create(&PostParams { dry_run: true, ..PostParams::default() }, &j).await;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            match r {
                Ok(_) => out.lock().unwrap().push(ms),
                Err(e) => {
                    *errors.lock().unwrap() += 1;
                    eprintln!("error: {e}");
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

fn summary(name: &str, v: &Arc<Mutex<Vec<f64>>>) -> (f64, f64) {
    let mut v = v.lock().unwrap().clone();
    v.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&v, 0.5), percentile(&v, 0.99));
    println!(
        "{name:<26} n={:<5} p50 {p50:>7.2} ms   p99 {p99:>7.2} ms   max {:>7.2} ms",
        v.len(),
        v.last().copied().unwrap_or(0.0)
    );
    (p50, p99)
}

/// Reviews of the inject webhook slower than each histogram bound: `(le, count)`.
fn review_buckets(metrics: &str) -> Vec<(String, f64)> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("bloodraven_webhook_review_duration_seconds_bucket{"))
        .filter(|l| l.contains("webhook=\"inject\""))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?.to_owned();
            let v = l.rsplit(' ').next()?.trim().parse().ok()?;
            Some((le, v))
        })
        .collect()
}

fn review_seconds(metrics: &str) -> Option<(f64, f64)> {
    let get = |suffix: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix(&format!("bloodraven_webhook_review_duration_seconds_{suffix}{{webhook=\"inject\"}} "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
    };
    Some((get("sum")?, get("count")?))
}

#[tokio::main]
#[allow(clippy::too_many_lines)] // one measured run, step after step
async fn main() {
    bloodraven_e2e::install_crypto();
    let rate = env_u64("BENCH_RATE", 100);
    let seconds = env_u64("BENCH_SECONDS", 30);
    let cluster = Cluster::connect().await;
    let real_ns = cluster.namespace("whbench").await;
    let noop_ns = cluster.namespace("whbench-noop").await;
    let op_ns = cluster.namespace("whbench-op").await;
    bloodraven_e2e::operator::grant_operator_rbac(&cluster, &op_ns.name).await;

    // A group whose instance `counter-app` is claimed by real_ns's MysqlDatabase listing `deployer`
    // (the claim written as the operator would, before the webhooks are registered).
    let group = format!("{}-g", real_ns.name);
    let g = bloodraven_e2e::fixtures::group(&group, &real_ns.name, Vec::new(), "iad");
    let mut g = serde_json::to_value(&g).unwrap();
    g["spec"]["sites"] = json!([
        {"name": "iad", "host": "192.0.2.1", "port": 3306, "credentialsSecretRef": {"namespace": "x", "name": "x"}},
        {"name": "pdx", "host": "192.0.2.2", "port": 3306, "credentialsSecretRef": {"namespace": "x", "name": "x"}}]);
    bloodraven_e2e::fixtures::create_group(&cluster, &serde_json::from_value(g).unwrap()).await;
    cluster
        .groups()
        .patch_status(
            &group,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"instanceClaims": [{"instance": "counter-app", "namespace": real_ns.name}]}}),
            ),
        )
        .await
        .unwrap();
    bloodraven_e2e::deploy::database(&cluster, &real_ns.name, "counter-app", &group, &[(&real_ns.name, "deployer")])
        .await;

    // A real CA for the injected sidecars (never called here): the webhook
    // refuses a bundle that does not parse as certificates since 731cb5a,
    // and the placeholder this bench passed before stopped it at start.
    let tls = bloodraven_e2e::deploy::tls_files_for(
        &bloodraven_e2e::e2e_dir().join("whbench").join(&real_ns.name),
        "DNS:bloodraven.invalid",
    );
    let options = Options { deploy_ca: Some(tls.ca.clone()), ..Options::default() };
    let real = Webhook::start(&cluster, &op_ns, options.clone()).await;
    real.register(&cluster, &real.params(&op_ns.name, &[&real_ns.name], &real_ns.name)).await;
    let noop_op_ns = cluster.namespace("whbench-noop-op").await;
    let noop = Webhook::start(&cluster, &noop_op_ns, Options { extra: vec!["--noop".into()], ..options.clone() }).await;
    noop.register(&cluster, &noop.params(&noop_op_ns.name, &[&noop_ns.name], &noop_ns.name)).await;
    rename(&cluster, &noop.name, NOOP_NAME).await;

    // Warm up, check the real one injects, and take its patch: the
    // difference between the same Job created through each.
    let injected = dry_run(&cluster, &real_ns.name, &group).await;
    assert!(
        injected
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .as_ref()
            .is_some_and(|c| c.len() == 2)
    );
    let plain = dry_run(&cluster, &noop_ns.name, &group).await;
    let patch = json_patch::diff(&injected_part(&plain), &injected_part(&injected));
    let patch_file = std::env::temp_dir().join(format!("whbench-patch-{}.json", real_ns.name));
    std::fs::write(&patch_file, serde_json::to_vec(&patch).unwrap()).unwrap();
    let same_ns = cluster.namespace("whbench-same").await;
    let same_op_ns = cluster.namespace("whbench-same-op").await;
    let same_flags = vec!["--noop".into(), format!("--noop-patch-file={}", patch_file.display())];
    let same = Webhook::start(&cluster, &same_op_ns, Options { extra: same_flags, ..options }).await;
    same.register(&cluster, &same.params(&same_op_ns.name, &[&same_ns.name], &same_ns.name)).await;
    rename(&cluster, &same.name, SAME_NAME).await;
    let replayed = dry_run(&cluster, &same_ns.name, &group).await;
    assert_eq!(
        injected_part(&replayed),
        injected_part(&injected),
        "the same-patch baseline must produce the Job the real webhook produces"
    );
    let new = || Arc::new(Mutex::new(Vec::new()));
    let (real_latencies, noop_latencies, same_latencies) = (new(), new(), new());
    let errors = Arc::new(Mutex::new(0u64));
    let warm = new();
    for ns in [&real_ns.name, &noop_ns.name, &same_ns.name] {
        block(&cluster, ns, &group, rate, Duration::from_secs(3), &warm, &errors).await;
    }
    *errors.lock().unwrap() = 0;

    println!(
        "webhook benchmark: {rate} dry-run Job creates/s through kube-apiserver, {seconds} s per side in 5 s blocks"
    );
    let before = review_seconds(&real.metrics().await).unwrap_or((0.0, 0.0));
    let api_before = apiserver_metrics(&cluster).await;
    let blocks = seconds.div_ceil(5);
    for _ in 0..blocks {
        block(&cluster, &real_ns.name, &group, rate, Duration::from_secs(5), &real_latencies, &errors).await;
        block(&cluster, &noop_ns.name, &group, rate, Duration::from_secs(5), &noop_latencies, &errors).await;
        block(&cluster, &same_ns.name, &group, rate, Duration::from_secs(5), &same_latencies, &errors).await;
    }
    let (r50, r99) = summary("bloodraven-webhook", &real_latencies);
    let (n50, n99) = summary("no-op webhook (baseline)", &noop_latencies);
    let (s50, s99) = summary("same-patch no-op webhook", &same_latencies);
    println!(
        "vs no-op:      ratio p50 {:.2}x   p99 {:.2}x   p99 added {:.2} ms   (goal: <= 1.2x, added < 10 ms)",
        r50 / n50,
        r99 / n99,
        r99 - n99
    );
    println!(
        "vs same patch: ratio p50 {:.2}x   p99 {:.2}x   p99 added {:.2} ms   (the webhook's checks alone)",
        r50 / s50,
        r99 / s99,
        r99 - s99
    );
    println!(
        "same patch vs no-op: ratio p50 {:.2}x   p99 {:.2}x   (what the API server spends applying the injection)",
        s50 / n50,
        s99 / n99
    );
    let after = real.metrics().await;
    let buckets: Vec<String> = review_buckets(&after).iter().map(|(le, n)| format!("≤{le}s: {n}")).collect();
    println!("webhook's own review time (inject), cumulative since start: {}", buckets.join(", "));
    if let Some((sum, count)) = review_seconds(&after) {
        let (s, c) = (sum - before.0, count - before.1);
        if c > 0.0 {
            println!("webhook's own review time (inject): mean {:.3} ms over {c} reviews", s / c * 1000.0);
        }
    }
    let api_after = apiserver_metrics(&cluster).await;
    for (label, name) in [
        ("bloodraven-webhook", "inject.bloodraven.shipstream.io"),
        ("no-op webhook", NOOP_NAME),
        ("same-patch webhook", SAME_NAME),
    ] {
        let (b, a) = (webhook_call_buckets(&api_before, name), webhook_call_buckets(&api_after, name));
        let q = |p| {
            bloodraven_e2e::promtext::quantile(&b, &a, p)
                .map_or_else(|| "-".to_owned(), |s| format!("≤{:.0} ms", s * 1000.0))
        };
        println!(
            "API server's call of {label}: n={} p50 {} p99 {} (bucket bounds)",
            bloodraven_e2e::promtext::count(&b, &a),
            q(0.5),
            q(0.99)
        );
    }
    let request_buckets = |text: &str| {
        bloodraven_e2e::promtext::buckets(text, "apiserver_request_duration_seconds", |l| {
            l.get("verb") == Some("POST") && l.get("resource") == Some("jobs") && l.get("dry_run") == Some("All")
        })
    };
    let (b, a) = (request_buckets(&api_before), request_buckets(&api_after));
    println!(
        "API server's POST jobs (dry run), both sides: p50 ≤{:.0} ms, p99 ≤{:.0} ms (bucket bounds)",
        bloodraven_e2e::promtext::quantile(&b, &a, 0.5).unwrap_or(0.0) * 1000.0,
        bloodraven_e2e::promtext::quantile(&b, &a, 0.99).unwrap_or(0.0) * 1000.0
    );
    println!("errors: {}", errors.lock().unwrap());
    for (name, w) in [("bloodraven-webhook", &real), ("no-op webhook", &noop), ("same-patch webhook", &same)] {
        if let Some((hwm, rss)) = w.pid().and_then(process_memory_kib) {
            println!("{name:<20} RSS {:.1} MiB (peak {:.1} MiB)", rss as f64 / 1024.0, hwm as f64 / 1024.0);
        }
    }
    real.unregister(&cluster).await;
    noop.unregister(&cluster).await;
    same.unregister(&cluster).await;
}
