//! Deploy-API renewal benchmark on real components, side by side with a
//! baseline in the same run. Prints figures; asserts nothing.
//!
//! - deploy API: `PUT /deploy/v1/groups/{g}/leases/{kind}/{op}` through TLS,
//!   the TokenReview cache and real Lease compare-and-swap writes, by the
//!   leader operator (release build).
//! - baseline: a plain client doing the same Lease compare-and-swap (GET,
//!   then replace with the resourceVersion read, new renewTime) directly
//!   against the same API server.
//!
//! Two measurements: saturation (`BENCH_WORKERS` closed-loop workers for
//! `BENCH_SECONDS`, one target after the other) and a fixed offered rate
//! (`BENCH_RATE`/s to each target, default 200, open loop), where the two
//! targets run side by side, interleaved tick by tick, so that both see the
//! same machine: on a shared 2-core machine a tail measured in one 10 s
//! window and compared with another window's mostly compares the noise of
//! the two windows. The paced run is repeated `BENCH_REPEATS` times (default
//! 3); each prints where the time went, from the histograms of the API
//! server (PUT of leases, and its own etcd calls for leases; the test etcd
//! runs without fsync) and of the operator (renew handler) over that
//! window. Run with `make bench`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must end the run loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use bloodraven_e2e::deploy::{self};
use bloodraven_e2e::fixtures::Scenario;
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::Mutex;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Clone)]
enum Target {
    Deploy { http: reqwest::Client, bearer: String, urls: Arc<Vec<(String, String)>> },
    Baseline { api: Box<Api<Lease>>, names: Arc<Vec<String>> },
}

impl Target {
    fn len(&self) -> usize {
        match self {
            Target::Deploy { urls, .. } => urls.len(),
            Target::Baseline { names, .. } => names.len(),
        }
    }

    /// One renewal of lease `i`; Ok(latency) or Err(what failed).
    async fn renew(&self, i: usize) -> Result<Duration, String> {
        let started = Instant::now();
        match self {
            Target::Deploy { http, bearer, urls } => {
                let (url, token) = &urls[i];
                let r = http
                    .put(url)
                    .bearer_auth(bearer)
                    .json(&json!({"token": token}))
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = r.status().as_u16();
                let _ = r.bytes().await;
                if status != 200 {
                    return Err(format!("status {status}"));
                }
            }
            Target::Baseline { api, names } => {
                let mut lease = api.get(&names[i]).await.map_err(|e| e.to_string())?;
                if let Some(spec) = lease.spec.as_mut() {
                    spec.renew_time = Some(MicroTime(Timestamp::now()));
                }
                api.replace(&names[i], &PostParams::default(), &lease).await.map_err(|e| e.to_string())?;
            }
        }
        Ok(started.elapsed())
    }
}

struct Figures {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: usize,
}

fn figures(mut lat: Vec<Duration>, errors: usize, elapsed: Duration) -> Figures {
    lat.sort();
    let pct =
        |p: f64| lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
    Figures { rate: lat.len() as f64 / elapsed.as_secs_f64(), p50_ms: pct(0.5), p99_ms: pct(0.99), errors }
}

/// Closed loop: `workers` tasks renew round-robin as fast as answers come.
async fn saturate(target: &Target, workers: usize, run: Duration) -> Figures {
    let lat = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(0usize));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (target, lat, errors) = (target.clone(), lat.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while started.elapsed() < run {
                match target.renew(i % target.len()).await {
                    Ok(d) => lat.lock().await.push(d),
                    Err(_) => *errors.lock().await += 1,
                }
                i += workers;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    figures(lat.lock().await.clone(), *errors.lock().await, elapsed)
}

/// Open loop, both targets at once: each tick sends one renewal to each.
async fn paced_side_by_side(first: &Target, second: &Target, rate: u64, run: Duration) -> (Figures, Figures) {
    let lat = [Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new()))];
    let errors = [Arc::new(Mutex::new(0usize)), Arc::new(Mutex::new(0usize))];
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let started = Instant::now();
    let mut tasks = Vec::new();
    let mut i = 0;
    while started.elapsed() < run {
        tick.tick().await;
        for (k, target) in [first, second].into_iter().enumerate() {
            let (target, lat, errors) = (target.clone(), lat[k].clone(), errors[k].clone());
            let n = i % target.len();
            tasks.push(tokio::spawn(async move {
                match target.renew(n).await {
                    Ok(d) => lat.lock().await.push(d),
                    Err(_) => *errors.lock().await += 1,
                }
            }));
        }
        i += 1;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut out = Vec::new();
    for k in 0..2 {
        out.push(figures(lat[k].lock().await.clone(), *errors[k].lock().await, elapsed));
    }
    let second = out.pop().unwrap();
    (out.pop().unwrap(), second)
}

/// The two `/metrics` texts a window is attributed with.
struct Scrapes {
    apiserver: String,
    operator: String,
}

async fn scrape(cluster: &bloodraven_e2e::Cluster, op: &bloodraven_e2e::Operator) -> Scrapes {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    Scrapes {
        apiserver: cluster.client.request_text(request).await.unwrap_or_default(),
        operator: op.metrics().await.unwrap_or_default(),
    }
}

/// "p50 X ms, p99 Y ms (n)" of one histogram over a window, from bucket bounds.
fn window(before: &str, after: &str, name: &str, keep: impl Fn(&prometheus_parse::Labels) -> bool + Copy) -> String {
    use bloodraven_e2e::promtext::{buckets, count, quantile};
    let (b, a) = (buckets(before, name, keep), buckets(after, name, keep));
    let ms = |q: f64| quantile(&b, &a, q).map_or("-".to_owned(), |s| format!("<= {:.1} ms", s * 1e3));
    format!("p50 {}, p99 {} ({} observed)", ms(0.5), ms(0.99), count(&b, &a))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The paced runs, side by side, `BENCH_REPEATS` times, each attributed.
async fn side_by_side(
    cluster: &bloodraven_e2e::Cluster,
    op: &bloodraven_e2e::Operator,
    deploy: &Target,
    baseline: &Target,
    rate: u64,
    seconds: Duration,
) {
    let repeats = env_u64("BENCH_REPEATS", 3).max(1);
    let (mut dp99, mut bp99) = (Vec::new(), Vec::new());
    for run in 1..=repeats {
        let before = scrape(cluster, op).await;
        let (d, b) = paced_side_by_side(deploy, baseline, rate, seconds).await;
        let after = scrape(cluster, op).await;
        println!(
            "figure: run {run}, {rate}/s offered to each side by side, deploy API: {:.0}/s done, p50 {:.1} ms, p99 {:.1} ms, errors {}",
            d.rate, d.p50_ms, d.p99_ms, d.errors
        );
        println!(
            "figure: run {run}, {rate}/s offered to each side by side, baseline  : {:.0}/s done, p50 {:.1} ms, p99 {:.1} ms, errors {}",
            b.rate, b.p50_ms, b.p99_ms, b.errors
        );
        println!(
            "figure: run {run}, where the time went: API server PUT leases {}, of which its etcd updates of leases {}; operator renew handler {}",
            window(&before.apiserver, &after.apiserver, "apiserver_request_duration_seconds", |l| {
                l.get("verb") == Some("PUT") && l.get("resource") == Some("leases")
            }),
            window(&before.apiserver, &after.apiserver, "etcd_request_duration_seconds", |l| {
                l.get("operation") == Some("update") && l.get("type").is_some_and(|t| t.contains("leases"))
            }),
            window(&before.operator, &after.operator, "bloodraven_deploy_request_duration_seconds", |l| {
                l.get("handler") == Some("renew_lease")
            }),
        );
        dp99.push(d.p99_ms);
        bp99.push(b.p99_ms);
    }
    let (d, b) = (median(dp99), median(bp99));
    println!(
        "figure: at {rate}/s, median p99 over {repeats} runs: deploy API {d:.1} ms, baseline {b:.1} ms, ratio {:.2} (goal: within 2x)",
        d / b
    );
}

#[tokio::main]
async fn main() {
    let groups = env_u64("BENCH_GROUPS", 20) as usize;
    let workers = env_u64("BENCH_WORKERS", 16) as usize;
    let seconds = Duration::from_secs(env_u64("BENCH_SECONDS", 10));
    let rate = env_u64("BENCH_RATE", 200);

    let sc = Scenario::start("bench", 0, LeaderTimings::default()).await;
    let tls = deploy::tls_files(&sc.pair.dir().join("tls"));
    let (op, base) = deploy::start_operator(&sc.cluster, &sc.ns, "op", &tls, LeaderTimings::default()).await;
    deploy::service_account(&sc.cluster, &sc.ns.name, "deployer").await;
    let bearer = deploy::token(&sc.cluster, &sc.ns.name, "deployer", &["bloodraven-deploy"]).await;
    let http = deploy::client(&tls.ca);
    let mut urls = Vec::new();
    for g in 0..groups {
        let mut group = bloodraven_e2e::fixtures::group(
            &format!("{}-{g:02}", sc.ns.name),
            &sc.ns.name,
            sc.pair.sites(&sc.ns.name, bloodraven_e2e::fixtures::SITE_SECRET),
            "iad",
        );
        group.spec.failover.probe_interval_seconds = 300; // probes stay out of the measurement
        bloodraven_e2e::fixtures::create_group(&sc.cluster, &group).await;
        let name = group.metadata.name.clone().unwrap();
        let instance = format!("db-{g:02}");
        deploy::database(&sc.cluster, &sc.ns.name, &instance, &name, &[(&sc.ns.name, "deployer")]).await;
        for kind in ["migration", "failover-hold"] {
            let op_id = format!("bench-{g}");
            let body = json!({"kind": kind, "operationId": op_id, "instance": instance, "ttlSeconds": 120});
            let reply = wait_for("a grant", Duration::from_secs(60), || async {
                let r = deploy::call(
                    &http,
                    reqwest::Method::POST,
                    &format!("{base}/groups/{name}/leases"),
                    &bearer,
                    Some(body.clone()),
                )
                .await;
                if r.status == 201 { Ok(r) } else { Err(format!("{r:?}")) }
            })
            .await;
            urls.push((
                format!("{base}/groups/{name}/leases/{kind}/{op_id}"),
                reply.body["token"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let leases: Api<Lease> = Api::namespaced(sc.cluster.client.clone(), &sc.ns.name);
    let mut names = Vec::new();
    for i in 0..urls.len() {
        let name = format!("bench-baseline-{i:03}");
        let lease = Lease {
            metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(format!("bench-{i}")),
                lease_duration_seconds: Some(120),
                renew_time: Some(MicroTime(Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        leases.create(&PostParams::default(), &lease).await.unwrap();
        names.push(name);
    }
    let deploy = Target::Deploy { http, bearer, urls: Arc::new(urls) };
    let baseline = Target::Baseline { api: Box::new(leases), names: Arc::new(names) };

    // Warm both paths (connections, TokenReview cache).
    saturate(&deploy, workers, Duration::from_secs(2)).await;
    saturate(&baseline, workers, Duration::from_secs(2)).await;

    let n = deploy.len();
    println!(
        "bench: {n} leases ({groups} groups x migration + failover-hold), {workers} workers, {}s per run",
        seconds.as_secs()
    );
    let d = saturate(&deploy, workers, seconds).await;
    let b = saturate(&baseline, workers, seconds).await;
    println!(
        "figure: saturation deploy API: {:.0} renewals/s, p50 {:.1} ms, p99 {:.1} ms, errors {}",
        d.rate, d.p50_ms, d.p99_ms, d.errors
    );
    println!(
        "figure: saturation baseline  : {:.0} renewals/s, p50 {:.1} ms, p99 {:.1} ms, errors {}",
        b.rate, b.p50_ms, b.p99_ms, b.errors
    );
    println!("figure: ratio deploy API / baseline (saturation rate): {:.2}", d.rate / b.rate);
    side_by_side(&sc.cluster, &op, &deploy, &baseline, rate, seconds).await;
    if let Some((peak, rss)) = op.memory_kib() {
        println!("figure: operator RSS after the bench: {rss} KiB (peak {peak} KiB)");
    }
}
