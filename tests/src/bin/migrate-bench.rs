//! Migration-runner benchmark on a real site of each flavor (`make
//! bench-migrate`; `BENCH_FLAVORS`, default `mariadb mysql`: both in one
//! run, printed side by side at the end). Prints figures; asserts nothing.
//!
//! Why the lock timeout is short, measured: while an `ALTER TABLE` waits behind an
//! application transaction that idles holding a metadata lock, every
//! reader of the table queues behind the ALTER. One run, one table, the
//! same blocker (it idles `BENCH_HOLD_SECONDS`, 20, then commits) and a
//! reader loop (`SELECT COUNT(*)` every 10 ms on its own connection) for
//! each runner setting:
//!
//! - `defaults`: lock timeout 5 s, 3–15 s jittered backoff, 20 attempts;
//! - `server-defaults`: the server's own lock timeouts (MariaDB:
//!   `lock_wait_timeout` 86400 s; MySQL: 31536000 s; both
//!   `innodb_lock_wait_timeout` 50 s) — what a runner that sets nothing gets;
//! - `--on-blocker fail`: the pre-flight look sees the blocker, nothing is sent;
//! - `--on-blocker wait`: waits without queueing, retries with backoff.
//!
//! Per setting: the reader's longest stall (its slowest query), the
//! number of reads slower than 1 s, the runner's exit code, attempts and
//! wall time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must end the run loudly

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bloodraven_e2e::SitePair;
use bloodraven_e2e::migrate::{AppDb, Revisions, Run, exec};
use bloodraven_e2e::sites::Flavor;
use mysql_async::prelude::Queryable as _;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Figures {
    name: &'static str,
    longest_stall_ms: u128,
    slow_reads: usize,
    reads: usize,
    exit: i32,
    attempts: usize,
    wall_ms: u128,
}

async fn scenario(db: &AppDb<'_>, version: u64, name: &'static str, flags: &[&str], hold: Duration) -> Figures {
    let revs = Revisions::new(&format!("bench-{name}"));
    revs.add(version, &format!("add_c{version}"), &format!("ALTER TABLE orders ADD COLUMN c{version} INT"));
    // The reader: one query at a time, its latency recorded.
    let stop = Arc::new(AtomicBool::new(false));
    let mut reader_conn = db.app().await;
    let flag = stop.clone();
    let reader = tokio::spawn(async move {
        let mut latencies = Vec::new();
        while !flag.load(Ordering::SeqCst) {
            let t = Instant::now();
            let _: Option<u64> = reader_conn.query_first("SELECT COUNT(*) FROM orders").await.unwrap();
            latencies.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        latencies
    });
    // The blocker: reads the table, then idles in its transaction.
    let mut blocker = db.app().await;
    exec(&mut blocker, "BEGIN").await;
    let _: Vec<(i32, i32, i32)> = blocker.query("SELECT id, v, w FROM orders").await.unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        exec(&mut blocker, "COMMIT").await;
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let mut run = Run::apply(&revs, &db.url, flags);
    let exit = run.wait(Duration::from_secs(900)).await;
    let wall_ms = started.elapsed().as_millis();
    release.await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    let latencies = reader.await.unwrap();
    let attempts = run.count(&format!("revision V{version} starting"));
    Figures {
        name,
        longest_stall_ms: latencies.iter().max().copied().unwrap_or_default().as_millis(),
        slow_reads: latencies.iter().filter(|l| **l > Duration::from_secs(1)).count(),
        reads: latencies.len(),
        exit,
        attempts,
        wall_ms,
    }
}

/// The settings each flavor runs, in order: (revision, name, flags).
const RUNS: [(u64, &str, &[&str]); 4] = [
    (1, "defaults (lock 5 s, 3-15 s backoff, 20 attempts)", &[]),
    (2, "server default lock timeouts", &["--server-lock-timeouts"]),
    (3, "--on-blocker fail", &["--on-blocker", "fail"]),
    (4, "--on-blocker wait", &["--on-blocker", "wait"]),
];

async fn run(flavor: Flavor, hold: Duration) -> (String, Vec<Figures>) {
    let pair = SitePair::start_as(&format!("mg-bench-{}", flavor.name()), flavor);
    let db = AppDb::create(&pair, true);
    // Rows 3 to 10,000 (MySQL has no sequence engine, and stops a recursive
    // CTE at 1,000 rows by default): four digits crossed.
    pair.sql(
        "iad",
        "INSERT INTO app.orders (id, v) SELECT n, n FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d AS n FROM \
         (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL \
          SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS a \
         CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL \
          SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS b \
         CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL \
          SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS c \
         CROSS JOIN (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL \
          SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS e) AS numbers \
         WHERE n BETWEEN 3 AND 10000",
    );
    let server: String =
        db.value("SELECT CONCAT(@@GLOBAL.lock_wait_timeout, ' s / ', @@GLOBAL.innodb_lock_wait_timeout, ' s')");
    let mut figures = Vec::new();
    for (version, name, flags) in RUNS {
        let f = scenario(&db, version, name, flags, hold).await;
        println!(
            "  {:<8}{:<50} reader's longest stall {:>6} ms, reads > 1 s: {:>3} of {:>5}; runner exit {} after {} attempt(s), {:>6} ms",
            flavor.name(),
            f.name,
            f.longest_stall_ms,
            f.slow_reads,
            f.reads,
            f.exit,
            f.attempts,
            f.wall_ms
        );
        figures.push(f);
    }
    (server, figures)
}

#[tokio::main]
async fn main() {
    let hold = Duration::from_secs(env_u64("BENCH_HOLD_SECONDS", 20));
    let flavors = Flavor::of_bench();
    println!(
        "bench-migrate: a blocker idles {} s in a transaction holding a metadata lock on `orders` (10,000 rows); \
         a reader selects from it every 10 ms; bloodraven-migrate applies ALTER TABLE orders ADD COLUMN …",
        hold.as_secs()
    );
    let mut all = Vec::new();
    for flavor in flavors {
        all.push((flavor, run(flavor, hold).await));
    }
    println!("reader's longest stall (ms), runner exit code; MariaDB 10.11, MySQL 9.7");
    print!("{:<52}", "");
    for (flavor, (server, _)) in &all {
        print!("{:>34}", format!("{} ({server})", flavor.name()));
    }
    println!();
    for (i, (_, name, _)) in RUNS.iter().enumerate() {
        print!("{name:<52}");
        for (_, (_, figures)) in &all {
            let f = &figures[i];
            print!("{:>34}", format!("{} ms, exit {}", f.longest_stall_ms, f.exit));
        }
        println!();
    }
    for (flavor, (server, figures)) in &all {
        let (d, s) = (&figures[0], &figures[1]);
        println!(
            "figure: {}: longest reader stall with the defaults {} ms vs the server's default lock timeouts ({server}) {} ms: {:.1}x shorter",
            flavor.name(),
            d.longest_stall_ms,
            s.longest_stall_ms,
            s.longest_stall_ms as f64 / d.longest_stall_ms.max(1) as f64
        );
    }
}
