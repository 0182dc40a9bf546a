//! Failover benchmark on real components (`make bench-failover`): one
//! group on the local MariaDB pair, the release-build operator, a writer
//! that finds the primary through `<db>-primary` as an application would.
//!
//! - Switchovers (`BENCH_SWITCHOVERS`, default 20, alternating sites): for
//!   each, the client's write unavailability = the longest time without an
//!   acknowledged write from the request to completion; p50/p99/max.
//! - Kills (`BENCH_KILLS`, default 10): `kill -9` of the active site's
//!   `mariadbd`, time until the standby is writable, beside the detection
//!   budget (`probeIntervalSeconds × failureThreshold` = 1 s × 3); the
//!   killed site is restarted and rejoins before the next kill.
//!
//! Prints figures; asserts nothing beyond each step finishing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must end the run loudly

use std::time::{Duration, Instant};

use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
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

#[tokio::main]
async fn main() {
    let (switchovers, kills) = (env("BENCH_SWITCHOVERS", 20), env("BENCH_KILLS", 10));
    let sc = Scenario::start("fobench", 1, LeaderTimings::default()).await;
    // A short detection budget: 1 s × 3.
    let name = sc.quick_group("g").await;
    writer::prepare(&sc.pair, "iad");
    bloodraven_e2e::deploy::database(&sc.cluster, &sc.ns.name, "app", &name, &[(&sc.ns.name, "deployer")]).await;
    let w = Writer::start(&sc.cluster, &sc.ns.name, "app");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut windows = Vec::new();
    let mut generation = 1;
    for i in 0..switchovers {
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

    let mut active = if switchovers % 2 == 0 { "iad" } else { "pdx" };
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

    println!("failover benchmark (release operator, MariaDB pair on loopback)");
    println!(
        "switchovers: {}  writes acknowledged: {}  failed attempts: {}",
        gaps.len(),
        written.acknowledged.len(),
        written.failures
    );
    if !gaps.is_empty() {
        println!(
            "  client write unavailability: p50 {}  p99 {}  max {}  (goal p99 < 1000 ms)",
            ms(pct(&gaps, 0.5)),
            ms(pct(&gaps, 0.99)),
            ms(*gaps.last().unwrap())
        );
    }
    if !to_writable.is_empty() {
        println!(
            "kill -9 → standby writable over {} kills: p50 {}  max {}  (detection budget 1 s × 3 = 3000 ms)",
            to_writable.len(),
            ms(pct(&to_writable, 0.5)),
            ms(*to_writable.last().unwrap())
        );
    }
    sc.cluster.delete_group(&name).await;
}
