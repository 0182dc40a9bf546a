//! Webhook benchmark on real components (`make bench-webhook`). Prints
//! figures; asserts nothing.
//!
//! Admission latency through the real kube-apiserver at `BENCH_RATE` (100)
//! requests/s: server-side dry-run creates of an annotated migration Job
//! (the injection path: cache lookups, the patch) in a namespace served by
//! `bloodraven-webhook`, beside the same creates in a namespace served by the
//! same binary in `--noop` mode (answers "allowed" at once) registered the
//! same way — the same API server, the same TLS listener, the same
//! `matchConditions`. Two more sides separate what the webhook adds from
//! what injecting a sidecar costs the API server: the same binary in
//! `--noop` mode answering every review with the very patch the real
//! webhook produces (taken from a dry run of each: the same patch and the
//! same bigger Job to default, validate and track, without the webhook's
//! checks), and the Job posted already injected through the no-op (the
//! bigger Job alone, no patch).
//!
//! Two Jobs are measured: the project's example migration Job
//! (charts/examples/counter-app `migration-job.yaml` with its default
//! values: nine settings, a Secret volume, resources, security contexts),
//! and a minimal one (one container, a command, nothing else), where the
//! injected part weighs most. The sides of both rotate in 1 s blocks,
//! `BENCH_SECONDS` (30) rounds, so drift of the machine falls on all.
//! Prints p50/p99 of each, the ratios, the p99 the webhook adds, the
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
async fn dry_run(cluster: &Cluster, ns: &str, job: &Job) -> Job {
    let api = Api::<Job>::namespaced(cluster.client.clone(), ns);
    bloodraven_e2e::wait_for(&format!("a dry-run create in {ns}"), Duration::from_secs(30), || async {
        api.create(&PostParams { dry_run: true, ..PostParams::default() }, job).await.map_err(|e| e.to_string())
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

/// The Job the real webhook returned, as a user would post it already
/// injected: without what the server derives from each Job's own uid and
/// name (`kubectl create job --from` strips the same).
fn pre_injected(injected: &Job) -> Job {
    let mut j = serde_json::to_value(injected).unwrap();
    let meta = j["metadata"].as_object_mut().unwrap();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp", "managedFields", "labels"] {
        meta.remove(k);
    }
    meta.insert("generateName".into(), json!("bench-"));
    j["spec"].as_object_mut().unwrap().remove("selector");
    j["spec"]["template"]["metadata"].as_object_mut().unwrap().remove("labels");
    j.as_object_mut().unwrap().remove("status");
    serde_json::from_value(j).unwrap()
}

/// The minimal annotated Job: one container with a command.
fn minimal_job(group: &str) -> Job {
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

/// The example chart's migration Job (charts/examples/counter-app
/// `templates/migration-job.yaml`) as `helm template` renders it with the
/// chart's default values, the hook annotations included.
fn example_job(group: &str) -> Job {
    let setting = |name: &str, value: &str| json!({"name": name, "value": value});
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "counter-app-migrate-",
            "labels": {"app.kubernetes.io/name": "counter-app", "app.kubernetes.io/instance": "counter-app",
                       "app.kubernetes.io/version": "0.1.0", "app.kubernetes.io/managed-by": "Helm",
                       "helm.sh/chart": "counter-app-0.1.0", "app.kubernetes.io/component": "migrate"},
            "annotations": {
                "helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": "0",
                "helm.sh/hook-delete-policy": "before-hook-creation",
                "argocd.argoproj.io/hook": "PreSync", "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
                "bloodraven.shipstream.io/inject": "true",
                "bloodraven.shipstream.io/group": group,
                "bloodraven.shipstream.io/instance": "counter-app",
                "bloodraven.shipstream.io/container": "migrate",
                "bloodraven.shipstream.io/ttl": "30",
                "bloodraven.shipstream.io/ddl-boundary": "reported"}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 280, "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": "counter-app", "app.kubernetes.io/instance": "counter-app",
                                    "app.kubernetes.io/component": "migrate"}},
            "spec": {
                "serviceAccountName": "deployer", "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "migrate", "image": "localhost/bloodraven/counter-app:0.1.0", "imagePullPolicy": "IfNotPresent",
                    "command": ["/run/bloodraven/bin/bloodraven-migrate", "apply"],
                    "volumeMounts": [{"name": "database-url", "mountPath": "/var/run/secrets/database", "readOnly": true}],
                    "env": [
                        setting("BLOODRAVEN_DB_URL_FILE", "/var/run/secrets/database/url"),
                        setting("BLOODRAVEN_MIGRATION_DIR", "/migrations"),
                        setting("BLOODRAVEN_MIGRATION_LOCK_TIMEOUT", "5s"),
                        setting("BLOODRAVEN_MIGRATION_MAX_ATTEMPTS", "8"),
                        setting("BLOODRAVEN_MIGRATION_RETRY_MIN_SECONDS", "3"),
                        setting("BLOODRAVEN_MIGRATION_RETRY_MAX_SECONDS", "15"),
                        setting("BLOODRAVEN_MIGRATION_ON_BLOCKER", "proceed"),
                        setting("BLOODRAVEN_MIGRATION_CONNECT_TIMEOUT", "10"),
                        setting("BLOODRAVEN_LOG_FORMAT", "text")],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "128Mi"}},
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                        "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]}}}],
                "volumes": [{"name": "database-url", "secret": {"secretName": "counter-app-database",
                    "items": [{"key": "url", "path": "url"}]}}]}}},
    }))
    .unwrap()
}

/// One side of the benchmark: Jobs `job` created in `ns`.
struct Side {
    label: String,
    ns: String,
    job: Job,
    latencies: Arc<Mutex<Vec<f64>>>,
}

/// Sends dry-run creates to `ns` at `rate`/s for `block`; appends each latency (ms).
async fn block(
    cluster: &Cluster,
    ns: &str,
    job: &Job,
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
        let (api, out, errors, j) = (api.clone(), out.clone(), errors.clone(), job.clone());
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

    // For each Job: check the real webhook injects, take its patch (the
    // difference between the same Job created through each), and start the
    // same-patch webhook answering with it.
    let mut shapes = Vec::new();
    let mut same_webhooks = Vec::new();
    for (shape, job) in [("example Job", example_job(&group)), ("minimal Job", minimal_job(&group))] {
        let injected = dry_run(&cluster, &real_ns.name, &job).await;
        let inits = injected.spec.as_ref().unwrap().template.spec.as_ref().unwrap().init_containers.clone();
        assert!(inits.is_some_and(|c| c.iter().any(|c| c.name == "bloodraven-sidecar")), "{shape}: not injected");
        let plain = dry_run(&cluster, &noop_ns.name, &job).await;
        let patch = json_patch::diff(&injected_part(&plain), &injected_part(&injected));
        let tag = if shape.starts_with("example") { "ex" } else { "min" };
        let patch_file = std::env::temp_dir().join(format!("whbench-patch-{}-{tag}.json", real_ns.name));
        std::fs::write(&patch_file, serde_json::to_vec(&patch).unwrap()).unwrap();
        let same_ns = cluster.namespace(&format!("whbench-same-{tag}")).await;
        let same_op_ns = cluster.namespace(&format!("whbench-same-{tag}-op")).await;
        let flags = vec!["--noop".into(), format!("--noop-patch-file={}", patch_file.display())];
        let same = Webhook::start(&cluster, &same_op_ns, Options { extra: flags, ..options.clone() }).await;
        same.register(&cluster, &same.params(&same_op_ns.name, &[&same_ns.name], &same_ns.name)).await;
        rename(&cluster, &same.name, &format!("{tag}-{SAME_NAME}")).await;
        let replayed = dry_run(&cluster, &same_ns.name, &job).await;
        assert_eq!(
            injected_part(&replayed),
            injected_part(&injected),
            "{shape}: the same-patch baseline must produce the Job the real webhook produces"
        );
        let big = pre_injected(&injected);
        let posted = dry_run(&cluster, &noop_ns.name, &big).await;
        assert_eq!(
            injected_part(&posted),
            injected_part(&injected),
            "{shape}: the pre-injected Job must be the injected Job"
        );
        let side = |label: &str, ns: &str, job: &Job| Side {
            label: format!("{shape}: {label}"),
            ns: ns.to_owned(),
            job: job.clone(),
            latencies: Arc::new(Mutex::new(Vec::new())),
        };
        shapes.push([
            side("bloodraven-webhook", &real_ns.name, &job),
            side("no-op webhook", &noop_ns.name, &job),
            side("same-patch no-op", &same_ns.name, &job),
            side("posted injected, no-op", &noop_ns.name, &big),
        ]);
        same_webhooks.push((same, same_ns, same_op_ns, tag));
    }
    let errors = Arc::new(Mutex::new(0u64));
    let warm = Arc::new(Mutex::new(Vec::new()));
    for side in shapes.iter().flatten() {
        block(&cluster, &side.ns, &side.job, rate, Duration::from_secs(2), &warm, &errors).await;
    }
    *errors.lock().unwrap() = 0;

    println!(
        "webhook benchmark: {rate} dry-run Job creates/s through kube-apiserver, {seconds} s per side, the sides rotating in 1 s blocks"
    );
    let before = review_seconds(&real.metrics().await).unwrap_or((0.0, 0.0));
    let api_before = apiserver_metrics(&cluster).await;
    for _ in 0..seconds {
        for side in shapes.iter().flatten() {
            block(&cluster, &side.ns, &side.job, rate, Duration::from_secs(1), &side.latencies, &errors).await;
        }
    }
    for [real_side, noop_side, same_side, big_side] in &shapes {
        let (r50, r99) = summary(&real_side.label, &real_side.latencies);
        let (n50, n99) = summary(&noop_side.label, &noop_side.latencies);
        let (s50, s99) = summary(&same_side.label, &same_side.latencies);
        let (b50, b99) = summary(&big_side.label, &big_side.latencies);
        println!(
            "  vs no-op:      ratio p50 {:.2}x   p99 {:.2}x   p99 added {:.2} ms   (goal: <= 1.2x, added < 10 ms)",
            r50 / n50,
            r99 / n99,
            r99 - n99
        );
        println!(
            "  vs same patch: ratio p50 {:.2}x   p99 {:.2}x   p99 added {:.2} ms   (the webhook's checks alone)",
            r50 / s50,
            r99 / s99,
            r99 - s99
        );
        println!(
            "  same patch vs no-op: ratio p50 {:.2}x   p99 {:.2}x   (what the API server spends on the injection)",
            s50 / n50,
            s99 / n99
        );
        println!(
            "  posted injected vs no-op: ratio p50 {:.2}x   p99 {:.2}x   (the bigger Job alone, no patch)",
            b50 / n50,
            b99 / n99
        );
    }
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
    let mut calls = vec![
        ("bloodraven-webhook".to_owned(), "inject.bloodraven.shipstream.io".to_owned()),
        ("no-op webhook".to_owned(), NOOP_NAME.to_owned()),
    ];
    for (_, _, _, tag) in &same_webhooks {
        calls.push((format!("same-patch webhook ({tag})"), format!("{tag}-{SAME_NAME}")));
    }
    for (label, name) in &calls {
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
    let mut processes = vec![("bloodraven-webhook", &real), ("no-op webhook", &noop)];
    for (same, _, _, _) in &same_webhooks {
        processes.push(("same-patch webhook", same));
    }
    for (name, w) in processes {
        if let Some((hwm, rss)) = w.pid().and_then(process_memory_kib) {
            println!("{name:<20} RSS {:.1} MiB (peak {:.1} MiB)", rss as f64 / 1024.0, hwm as f64 / 1024.0);
        }
    }
    real.unregister(&cluster).await;
    noop.unregister(&cluster).await;
    for (same, _, _, _) in &same_webhooks {
        same.unregister(&cluster).await;
    }
}
