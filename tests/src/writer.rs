//! A client that keeps writing to the primary it finds through the
//! MysqlDatabase's `<db>-primary` Service, as an application would (the
//! local sites listen on loopback, which no EndpointSlice may name, so the
//! writer follows the Service's `targetPort`, which is the active site's
//! port): one INSERT of a new id at a time, over an ordinary account (no `SUPER`, no
//! `READ_ONLY ADMIN`), reconnecting when a write fails. It records every
//! acknowledged id and the longest time without an acknowledged write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::cluster::Cluster;
use crate::sites::SitePair;

/// The application account the writer uses.
pub const APP_USER: &str = "app";
/// Its password.
pub const APP_PASSWORD: &str = "app-pw-4711";

/// Creates database `bench`, table `bench.t` and the account `app` on the
/// primary `site` (replicated to the other site).
pub fn prepare(pair: &SitePair, site: &str) {
    pair.sql(
        site,
        &format!(
            "CREATE DATABASE IF NOT EXISTS bench; CREATE TABLE IF NOT EXISTS bench.t (id BIGINT PRIMARY KEY, at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6)); \
             CREATE USER IF NOT EXISTS '{APP_USER}'@'127.0.0.1' IDENTIFIED BY '{APP_PASSWORD}'; GRANT ALL ON bench.* TO '{APP_USER}'@'127.0.0.1';"
        ),
    );
}

/// [`prepare`] on iad, then one row there, and waits (bounded by
/// `timeout`) until pdx replicated it: a pair known to replicate.
pub async fn prepare_replicated(pair: &SitePair, timeout: std::time::Duration) {
    prepare(pair, "iad");
    pair.sql("iad", "INSERT INTO bench.t (id) VALUES (1)");
    crate::wait_for("pdx to have the row", timeout, || async {
        let n = pair.sql("pdx", "SELECT COUNT(*) FROM bench.t");
        if n.trim() == "1" { Ok(()) } else { Err(n) }
    })
    .await;
}

/// Connection options of the application account to the site on `port`
/// (TCP on loopback).
pub fn app_account(port: u16) -> mysql_async::OptsBuilder {
    mysql_async::OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some(APP_USER))
        .pass(Some(APP_PASSWORD))
        .prefer_socket(false)
}

/// What a writer saw.
#[derive(Debug, Default, Clone)]
pub struct Written {
    /// Every id whose INSERT was acknowledged.
    pub acknowledged: Vec<u64>,
    /// Gaps between acknowledged writes longer than 50 ms, in order.
    pub gaps: Vec<Duration>,
    /// Writes that failed (and were retried).
    pub failures: u64,
    /// When each acknowledged write was acknowledged, in order.
    pub times: Vec<Instant>,
}

impl Written {
    /// The longest time without an acknowledged write between `from` and
    /// `to` (the write unavailability a client saw in that window).
    pub fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut worst = Duration::ZERO;
        for &t in self.times.iter().filter(|t| **t > from && **t <= to) {
            worst = worst.max(t - last);
            last = t;
        }
        worst.max(to.saturating_duration_since(last))
    }
}

/// A running writer.
#[derive(Debug)]
pub struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Written>,
}

impl Writer {
    /// Starts writing to the port Service `<database>-primary` in
    /// `namespace` targets (read on every reconnect).
    pub fn start(cluster: &Cluster, namespace: &str, database: &str) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let services: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::namespaced(cluster.client.clone(), namespace);
        let (name, flag) = (format!("{database}-primary"), stop.clone());
        let task = tokio::spawn(async move {
            let mut out = Written::default();
            let mut conn: Option<mysql_async::Conn> = None;
            let mut id: u64 = 1;
            let mut last_ok = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                if conn.is_none() {
                    let port = services.get(&name).await.ok().and_then(|svc| {
                        let port = svc.spec?.ports?.into_iter().next()?;
                        match port.target_port? {
                            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => u16::try_from(p).ok(),
                            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_) => None,
                        }
                    });
                    let Some(port) = port else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let opts = app_account(port);
                    if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(2), mysql_async::Conn::new(opts)).await
                    {
                        conn = Some(c);
                    } else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                }
                let c = conn.as_mut().unwrap();
                let sql = format!("INSERT INTO bench.t (id) VALUES ({id})");
                match tokio::time::timeout(Duration::from_secs(2), c.query_drop(sql)).await {
                    Ok(Ok(())) => {}
                    // Committed before the connection broke: a retry finds it.
                    Ok(Err(mysql_async::Error::Server(e))) if e.code == 1062 => {}
                    _ => {
                        out.failures += 1;
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                }
                let gap = last_ok.elapsed();
                if gap > Duration::from_millis(50) && id > 1 {
                    out.gaps.push(gap);
                }
                last_ok = Instant::now();
                out.times.push(last_ok);
                out.acknowledged.push(id);
                id += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            out
        });
        Writer { stop, task }
    }

    /// Whether the writer is still running.
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Stops the writer and returns what it saw.
    pub async fn stop(self) -> Written {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// `(count, checksum)` of `bench.t` on `site`.
pub fn checksum(pair: &SitePair, site: &str) -> String {
    pair.sql(site, "SELECT COUNT(*), COALESCE(BIT_XOR(CRC32(id)), 0) FROM bench.t").trim().to_owned()
}

/// Whether every id in `ids` is in `bench.t` on `site`.
pub fn missing(pair: &SitePair, site: &str, ids: &[u64]) -> Vec<u64> {
    let have: std::collections::HashSet<u64> =
        pair.sql(site, "SELECT id FROM bench.t").lines().filter_map(|l| l.trim().parse().ok()).collect();
    ids.iter().copied().filter(|i| !have.contains(i)).collect()
}
