//! Failover benchmark on real components (`make bench-failover`): per
//! flavor (`BENCH_FLAVORS`, default `mariadb mysql`: both in one run,
//! printed side by side at the end), one group on a local pair, the
//! release-build operator, a writer that finds the primary through
//! `<db>-primary` as an application would.
//!
//! - Planned failovers (`BENCH_PLANNED_FAILOVERS`, default 20, alternating sites): for
//!   each, the client's write unavailability = the longest time without an
//!   acknowledged write from the request to completion; p50/p99/max.
//! - Kills (`BENCH_KILLS`, default 10): `kill -9` of the active site's
//!   server (`mariadbd`, `mysqld`), time until the standby is writable, beside the detection
//!   budget (`probeIntervalSeconds × failureThreshold` = 1 s × 3); the
//!   killed site is restarted and rejoins before the next kill.
//!
//! Prints figures; asserts nothing beyond each step finishing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must end the run loudly

use std::time::{Duration, Instant};

use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::sites::Flavor;
use bloodraven_e2e::writer::{self, Writer};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(120);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// One flavor's figures.
struct Figures {
    flavor: Flavor,
    /// Client write unavailability per planned failover, sorted.
    gaps: Vec<Duration>,
    acknowledged: usize,
    failures: u64,
    /// `kill -9` → standby writable, sorted.
    to_writable: Vec<Duration>,
}

/// Which figures a row of the table shows.
type Column = fn(&Figures) -> &[Duration];

async fn run(flavor: Flavor, planned: usize, kills: usize) -> Figures {
    let sc = Scenario::start_as(&format!("fobench-{}", flavor.name()), 1, LeaderTimings::default(), flavor).await;
    // A short detection budget: 1 s × 3.
    let name = sc.quick_group("g").await;
    writer::prepare(&sc.pair, "iad");
    bloodraven_e2e::deploy::database(&sc.cluster, &sc.ns.name, "app", &name, &[(&sc.ns.name, "deployer")]).await;
    let w = Writer::start(&sc.cluster, &sc.ns.name, "app");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut windows = Vec::new();
    let mut generation = 1;
    for i in 0..planned {
        let target = if i % 2 == 0 { "pdx" } else { "iad" };
        let id = format!("b{i}");
        let start = Instant::now();
        let patch = json!({"spec": {"plannedFailover": {"targetSite": target, "requestId": id}}});
        sc.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        generation += 1;
        wait_status(&sc.cluster, &name, &format!("{id} completed"), T, |s| match &s.planned_failover {
            Some(p) if p.request_id == id && p.phase == "Completed" => is_ready_at(s, target, generation),
            other => Err(format!("{other:?}")),
        })
        .await;
        // Let the writer reach the new primary before the window closes.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        windows.push((start, Instant::now()));
    }
    assert!(w.is_running());
    let written = w.stop().await;
    let mut gaps: Vec<Duration> = windows.iter().map(|(a, b)| written.longest_gap(*a, *b)).collect();
    gaps.sort();

    let mut active = if planned.is_multiple_of(2) { "iad" } else { "pdx" };
    let mut to_writable = Vec::new();
    for _ in 0..kills {
        let standby = if active == "iad" { "pdx" } else { "iad" };
        let killed = Instant::now();
        sc.pair.kill9(active);
        sc.pair.wait_read_only(standby, false, T).await;
        to_writable.push(killed.elapsed());
        generation += 1;
        sc.pair.restart(active, false);
        wait_status(&sc.cluster, &name, "the killed site to rejoin", T, |s| is_ready_at(s, standby, generation)).await;
        active = standby;
    }
    to_writable.sort();
    sc.cluster.delete_group(&name).await;
    Figures { flavor, gaps, acknowledged: written.acknowledged.len(), failures: written.failures, to_writable }
}

#[tokio::main]
async fn main() {
    let (planned, kills) = (env("BENCH_PLANNED_FAILOVERS", 20), env("BENCH_KILLS", 10));
    let flavors = Flavor::of_bench();
    let mut all = Vec::new();
    for flavor in flavors {
        let f = run(flavor, planned, kills).await;
        println!(
            "{}: {} planned failovers, {} writes acknowledged, {} failed attempts; {} kills",
            f.flavor.name(),
            f.gaps.len(),
            f.acknowledged,
            f.failures,
            f.to_writable.len()
        );
        all.push(f);
    }
    let cell = |v: &[Duration], p: Option<f64>| match (v.is_empty(), p) {
        (true, _) => "-".to_owned(),
        (false, Some(p)) => ms(pct(v, p)),
        (false, None) => ms(*v.last().unwrap()),
    };
    println!("failover benchmark (release operator, pairs on loopback; MariaDB 10.11, MySQL 9.7)");
    print!("{:<58}", "");
    for f in &all {
        print!("{:>12}", f.flavor.name());
    }
    println!();
    let rows: [(&str, Column, Option<f64>); 5] = [
        ("client write unavailability per planned failover, p50", |f| &f.gaps, Some(0.5)),
        ("client write unavailability per planned failover, p99", |f| &f.gaps, Some(0.99)),
        ("client write unavailability per planned failover, max", |f| &f.gaps, None),
        ("kill -9 → standby writable, p50 (budget 1 s × 3)", |f| &f.to_writable, Some(0.5)),
        ("kill -9 → standby writable, max", |f| &f.to_writable, None),
    ];
    for (label, of, p) in rows {
        print!("{label:<58}");
        for f in &all {
            print!("{:>12}", cell(of(f), p));
        }
        println!();
    }
    println!("(goal: planned failover unavailability p99 < 1000 ms)");
}
