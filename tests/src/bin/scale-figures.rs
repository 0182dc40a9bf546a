//! Prints the operator's scale figures, measured on real
//! components: the operator's memory with 1 and with 50 groups, and
//! probe-to-status latency (inside the operator, and from a change on a
//! MariaDB site to the status that reports it); then the run with
//! 1,000 groups (`thousand`). No thresholds: figures only.
//!
//! Run with `make figures` (starts the control plane, like `make e2e`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must end the run loudly

use std::time::{Duration, Instant};

use bloodraven_e2e::fixtures::{create_group, group, has_condition, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::{Cluster, Operator, SitePair, cluster::OPERATOR_DB_PASSWORD};

#[path = "scale-figures/thousand.rs"]
mod thousand;

const T: Duration = Duration::from_secs(120);

fn histogram_mean(metrics: &str, name: &str) -> Option<f64> {
    let value = |suffix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}_{suffix}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    Some(value("sum")? / value("count")?)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("figures").await;
    let pair = SitePair::start("figures");
    ns.credentials_secret("site-creds", "bloodraven", OPERATOR_DB_PASSWORD).await;
    if std::env::var("FIGURES").as_deref() == Ok("thousand") {
        // Only the 1,000-group run (`FIGURES=thousand make figures`).
        thousand::run(&cluster, &ns, &pair).await;
        return;
    }
    let mut operator = Operator::start(&cluster, &ns, &ns.name, "op", LeaderTimings::default()).await;
    let settle = Duration::from_secs(10);

    let mut names = Vec::new();
    for count in [1usize, 50] {
        while names.len() < count {
            let name = format!("{}-{:02}", ns.name, names.len());
            let mut g = group(&name, &ns.name, pair.sites(&ns.name, "site-creds"), "iad");
            g.spec.failover.probe_interval_seconds = 5; // the default interval
            create_group(&cluster, &g).await;
            names.push(name);
        }
        for name in &names {
            wait_status(&cluster, name, "bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
        }
        tokio::time::sleep(settle).await; // let several probe rounds pass before reading memory
        let (peak, rss) = operator.memory_kib().unwrap();
        println!("figure: operator RSS with {count} group(s) at a 5 s probe interval: {rss} KiB (peak {peak} KiB)");
    }
    let metrics = operator.metrics().await.unwrap();
    let mean = histogram_mean(&metrics, "bloodraven_probe_to_status_seconds").unwrap();
    println!(
        "figure: probe-to-status inside the operator (probe start to status written), mean over all probes: {:.1} ms",
        mean * 1000.0
    );

    // From a change on a site to the status that reports it, at a 1 s probe interval.
    for name in &names {
        cluster.delete_group(name).await;
    }
    let name = format!("{}-latency", ns.name);
    create_group(&cluster, &group(&name, &ns.name, pair.sites(&ns.name, "site-creds"), "iad")).await;
    wait_status(&cluster, &name, "bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
    let mut samples = Vec::new();
    for i in 0..10u64 {
        // Spread the changes over the probe interval, so the samples are not
        // all taken at the same phase of the probe cycle.
        tokio::time::sleep(Duration::from_millis(i * 97 % 1000)).await;
        pair.sql("pdx", "STOP SLAVE SQL_THREAD");
        let t0 = Instant::now();
        wait_status(&cluster, &name, "ReplicationNotRunning", T, |s| {
            has_condition(s, "ReplicationNotRunning", "True", None)
        })
        .await;
        samples.push(t0.elapsed().as_secs_f64());
        pair.sql("pdx", "START SLAVE SQL_THREAD");
        wait_status(&cluster, &name, "recovery", T, |s| is_ready_at(s, "iad", 1)).await;
    }
    samples.sort_by(f64::total_cmp);
    println!(
        "figure: site change to status (1 s probe interval, status polled every 200 ms), n={}: p50 {:.2} s, max {:.2} s",
        samples.len(),
        percentile(&samples, 0.5),
        samples[samples.len() - 1]
    );
    cluster.delete_group(&name).await;

    // The 1,000-group run gets a process of its own (it takes over the
    // leader Lease once this one releases it).
    assert!(operator.stop().await, "the operator must stop cleanly");
    thousand::run(&cluster, &ns, &pair).await;
}
