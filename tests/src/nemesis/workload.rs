//! What runs while the nemesis injects faults, and records what it saw:
//!
//! - [`writer`]: an application writing through `<db>-primary`, one unique
//!   value per INSERT, each attempt `ok`, `fail` (certainly not applied:
//!   refused, or never sent) or `unknown` (sent, no answer).
//! - [`poller`]: each site's `read_only` (`super_read_only` on MySQL) and
//!   its primary side of semi-sync (the switch, and whether commits wait for
//!   an acknowledgement) over its unix socket, which no partition cuts.
//! - [`prober`]: each site as an operator sees it, from that operator's
//!   cgroup (run as its own process: a cgroup holds processes).
//! - [`watch_group`], [`watch_records`], [`watch_leader`]: the group's status, its
//!   decision record and the leader-election Lease, as they change.
//! - [`deploy_client`]: `bloodraven-sidecar run` around a migration that
//!   sleeps, one operation after another; its call log becomes `lease` and
//!   `fence` records ([`call_log_records`]).
//! - [`LeaderProxy`]: the deploy API's address for the clients, forwarding
//!   to whichever operator leads (as a Service whose endpoints follow
//!   readiness would).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::runtime::watcher;
use mysql_async::prelude::Queryable as _;
use serde_json::{Value, json};

use super::history::{History, now_us};
use crate::sites::Flavor;

/// Where a site answers: its name, address and port.
#[derive(Clone, Debug)]
pub struct SiteAddr {
    /// `iad` or `pdx`.
    pub name: String,
    /// Address (in its network namespace).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// The application account of the nemesis' writers (created on the primary
/// for `10.%`, where the clients' packets come from).
pub const APP_USER: &str = "nemesis";
/// Its password.
pub const APP_PASSWORD: &str = "nemesis-pw-2718";

/// Creates database `nem`, its table and the writers' account on the
/// primary (as root, over its socket), replicated to the standby.
pub fn prepare_sql() -> String {
    format!(
        "CREATE DATABASE IF NOT EXISTS nem; CREATE TABLE IF NOT EXISTS nem.t (id BIGINT PRIMARY KEY); \
         CREATE USER IF NOT EXISTS '{APP_USER}'@'10.%' IDENTIFIED BY '{APP_PASSWORD}'; \
         GRANT INSERT, SELECT ON nem.* TO '{APP_USER}'@'10.%';"
    )
}

/// The site `<db>-primary` sends clients to: its `targetPort`, which is the
/// active site's port (`None` when the Service is absent or names another).
async fn primary_site(services: &Api<Service>, name: &str, sites: &[SiteAddr]) -> Option<SiteAddr> {
    let svc = services.get_opt(name).await.ok()??;
    let port = svc.spec?.ports?.first()?.target_port.clone()?;
    let IntOrString::Int(port) = port else { return None };
    sites.iter().find(|s| i32::from(s.port) == port).cloned()
}

/// Time between two writes of one writer (about 50 a second each).
const WRITER_PACE: Duration = Duration::from_millis(20);
/// How often a writer looks up where `<db>-primary` points.
const WRITER_LOOKUP: Duration = Duration::from_millis(250);

/// Writes through `<database>-primary` in `namespace` until `stop`; values
/// `base + 1`, `base + 2`, …
#[allow(clippy::too_many_arguments)] // one writer's whole setting, named at its one call
pub async fn writer(
    name: String,
    base: u64,
    services: Api<Service>,
    database: String,
    sites: Vec<SiteAddr>,
    history: History,
    stop: Arc<AtomicBool>,
) {
    let service = format!("{database}-primary");
    let mut conn: Option<(String, mysql_async::Conn)> = None;
    let mut value = base;
    // Where `<db>-primary` points, looked up again every WRITER_LOOKUP (as
    // a client's resolver would), not once per write: that was a Service
    // GET per write, and the writes were as fast as the loop could go.
    let mut resolved: Option<(Instant, SiteAddr)> = None;
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(WRITER_PACE).await;
        if resolved.as_ref().is_none_or(|(at, _)| at.elapsed() >= WRITER_LOOKUP) {
            resolved = primary_site(&services, &service, &sites).await.map(|t| (Instant::now(), t));
        }
        let Some(target) = resolved.as_ref().map(|(_, t)| t.clone()) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if conn.as_ref().is_some_and(|(site, _)| *site != target.name) {
            conn = None;
        }
        value += 1;
        let call = now_us();
        if conn.is_none() {
            let opts = mysql_async::OptsBuilder::default()
                .ip_or_hostname(target.host.clone())
                .tcp_port(target.port)
                .user(Some(APP_USER))
                .pass(Some(APP_PASSWORD))
                .prefer_socket(false);
            match tokio::time::timeout(Duration::from_secs(2), mysql_async::Conn::new(opts)).await {
                Ok(Ok(c)) => conn = Some((target.name.clone(), c)),
                Ok(Err(e)) => {
                    record_write(&history, &name, value, Some(&target.name), call, "fail", &format!("connect: {e}"));
                    resolved = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(_) => {
                    record_write(&history, &name, value, Some(&target.name), call, "fail", "connect: timed out");
                    continue;
                }
            }
        }
        let Some((site, c)) = conn.as_mut() else { continue };
        let answer =
            tokio::time::timeout(Duration::from_secs(2), c.exec_drop("INSERT INTO nem.t (id) VALUES (?)", (value,)))
                .await;
        let site = site.clone();
        match answer {
            Ok(Ok(())) => record_write(&history, &name, value, Some(&site), call, "ok", ""),
            // The server said no: not applied.
            Ok(Err(mysql_async::Error::Server(e))) => {
                record_write(&history, &name, value, Some(&site), call, "fail", &e.to_string());
                conn = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Sent, and no answer: it may or may not have been applied.
            Ok(Err(e)) => {
                record_write(&history, &name, value, Some(&site), call, "unknown", &e.to_string());
                conn = None;
            }
            Err(_) => {
                record_write(&history, &name, value, Some(&site), call, "unknown", "timed out after 2 s");
                conn = None;
            }
        }
    }
}

fn record_write(history: &History, client: &str, value: u64, site: Option<&str>, call: u64, result: &str, error: &str) {
    let mut r =
        json!({"type": "write", "client": client, "value": value, "callUs": call, "retUs": now_us(), "result": result});
    if let Some(site) = site {
        r["site"] = json!(site);
    }
    if !error.is_empty() {
        r["error"] = json!(error);
    }
    history.record(&r);
}

/// Polls `site`'s read-only switches and its primary side of semi-sync
/// over its unix socket `socket` every 200 ms until `stop`, as the
/// operator's account (`password`).
pub async fn poller(
    site: String,
    socket: PathBuf,
    password: String,
    flavor: Flavor,
    history: History,
    stop: Arc<AtomicBool>,
) {
    let sql = match flavor {
        Flavor::MariaDb => "SELECT @@read_only, 0",
        Flavor::MySql => "SELECT @@read_only, @@super_read_only",
    };
    let semi_sync_sql = semi_sync_sql(flavor);
    let mut conn: Option<mysql_async::Conn> = None;
    while !stop.load(Ordering::SeqCst) {
        let at = now_us();
        if conn.is_none() {
            let opts = mysql_async::OptsBuilder::default()
                .socket(Some(socket.to_string_lossy().into_owned()))
                .user(Some("bloodraven"))
                .pass(Some(password.clone()));
            conn = tokio::time::timeout(Duration::from_secs(1), mysql_async::Conn::new(opts))
                .await
                .ok()
                .and_then(Result::ok);
        }
        let answer = match conn.as_mut() {
            Some(c) => tokio::time::timeout(Duration::from_secs(1), c.query_first::<(u8, u8), _>(sql))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten(),
            None => None,
        };
        let mut r = json!({"type": "poll", "site": site, "at": at});
        if let Some((ro, sro)) = answer {
            r["ok"] = json!(true);
            r["readOnly"] = json!(ro == 1);
            if flavor == Flavor::MySql {
                r["superReadOnly"] = json!(sro == 1);
            }
            r["writable"] = json!(ro == 0 && sro == 0);
            // The poll is the read-only switches': semi-sync's are added
            // when they can be read, and their absence fails nothing.
            if let Some(c) = conn.as_mut() {
                match tokio::time::timeout(Duration::from_secs(1), read_semi_sync(c, &semi_sync_sql)).await {
                    Ok(Ok(seen)) => {
                        if let Some(enabled) = seen.enabled {
                            r["semiSyncEnabled"] = json!(enabled);
                        }
                        if let Some(active) = seen.active {
                            r["semiSyncActive"] = json!(active);
                        }
                    }
                    // A connection that failed or timed out mid-answer is
                    // not used again.
                    Ok(Err(_)) | Err(_) => conn = None,
                }
            }
        } else {
            r["ok"] = json!(false);
            r["writable"] = json!(false);
            conn = None;
        }
        history.record(&r);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a poll read of a site's primary side of semi-sync: the switch
/// (`rpl_semi_sync_master_enabled`, MySQL `rpl_semi_sync_source_enabled`)
/// and the status (`Rpl_semi_sync_master_status`, MySQL
/// `Rpl_semi_sync_source_status`: ON while commits wait for an
/// acknowledgement), each `None` when the server has no such variable.
#[derive(Clone, Copy, Debug)]
struct SemiSyncSeen {
    enabled: Option<bool>,
    active: Option<bool>,
}

/// The statements that read the primary side of semi-sync: two `SHOW`s
/// sent as one query (one round trip). A `SHOW … LIKE` answers no row for
/// a variable the server does not have (MySQL's exist only once its
/// semi-sync plugins are loaded), where a `SELECT @@…` of it would fail.
fn semi_sync_sql(flavor: Flavor) -> String {
    let (enabled, _, status, _) = flavor.semi_sync_names();
    format!("SHOW GLOBAL VARIABLES LIKE '{enabled}'; SHOW GLOBAL STATUS LIKE '{status}'")
}

/// Reads [`SemiSyncSeen`] with [`semi_sync_sql`]'s query; a row that is
/// not two texts counts as no row.
async fn read_semi_sync(conn: &mut mysql_async::Conn, sql: &str) -> Result<SemiSyncSeen, mysql_async::Error> {
    let mut result = conn.query_iter(sql).await?;
    let variable: Vec<_> = result.try_collect::<(String, String)>().await?;
    let status: Vec<_> = result.try_collect::<(String, String)>().await?;
    result.drop_result().await?;
    let value =
        |rows: Vec<Result<(String, String), _>>| rows.into_iter().flatten().next().and_then(|(_, v)| switch_value(&v));
    Ok(SemiSyncSeen { enabled: value(variable), active: value(status) })
}

/// An ON/OFF variable's value as `SHOW` prints it (`None`: neither).
fn switch_value(v: &str) -> Option<bool> {
    match v.to_ascii_uppercase().as_str() {
        "ON" | "1" => Some(true),
        "OFF" | "0" => Some(false),
        _ => None,
    }
}

/// Probes every site as operator `from` sees it (this process runs in that
/// operator's cgroup), every 250 ms, each within `timeout`, until `stop`.
pub async fn prober(
    from: String,
    sites: Vec<SiteAddr>,
    password: String,
    timeout: Duration,
    history: History,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::SeqCst) {
        let rounds = sites.iter().map(|s| {
            let (from, history, password) = (from.clone(), history.clone(), password.clone());
            async move {
                let call = now_us();
                let opts = mysql_async::OptsBuilder::default()
                    .ip_or_hostname(s.host.clone())
                    .tcp_port(s.port)
                    .user(Some("bloodraven"))
                    .pass(Some(password))
                    .prefer_socket(false);
                let ok = tokio::time::timeout(timeout, async {
                    let mut c = mysql_async::Conn::new(opts).await?;
                    c.query_drop("SELECT 1").await?;
                    c.disconnect().await
                })
                .await
                .is_ok_and(|r: Result<(), mysql_async::Error>| r.is_ok());
                history.record(&json!({"type": "probe", "from": from, "site": s.name, "callUs": call, "retUs": now_us(), "ok": ok}));
            }
        });
        futures::future::join_all(rounds).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The names of the conditions that are `True`.
fn true_conditions(g: &MysqlFailoverGroup) -> Vec<String> {
    g.status
        .as_ref()
        .map(|s| s.conditions.iter().filter(|c| c.status == "True").map(|c| c.type_.clone()).collect())
        .unwrap_or_default()
}

/// What the group's status said of emergency decisions, by generation:
/// (from, abandoned transactions).
pub type Emergencies = Arc<Mutex<BTreeMap<i64, (String, u64)>>>;

/// Records the group's status at every change until the stream ends.
pub async fn watch_group(groups: Api<MysqlFailoverGroup>, name: String, history: History, emergencies: Emergencies) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(groups, config).boxed();
    while let Some(event) = stream.next().await {
        let Ok(watcher::Event::Apply(g) | watcher::Event::InitApply(g)) = event else { continue };
        let Some(s) = g.status.as_ref() else { continue };
        if let Some(e) = &s.emergency_failover {
            emergencies.lock().unwrap().insert(e.topology_generation, (e.from_site.clone(), e.abandoned_transactions));
        }
        history.record(&json!({
            "type": "status",
            "at": now_us(),
            "generation": s.topology_generation,
            "activeSite": s.active_site,
            "conditions": true_conditions(&g),
            "resourceVersion": g.metadata.resource_version,
        }));
    }
}

/// A decision seen on the decision record: (seen at, generation, active site, the site before).
pub type Decision = (u64, i64, String, String);

/// Collects every decision the group's decision record (ConfigMap in
/// `records`' namespace) shows, in order, into `out`.
pub async fn watch_records(records: Api<ConfigMap>, group: String, out: Arc<Mutex<Vec<Decision>>>) {
    let config = watcher::Config::default().labels("bloodraven.shipstream.io/record=topology");
    let mut stream = watcher(records, config).boxed();
    let mut last: Option<(i64, String)> = None;
    while let Some(event) = stream.next().await {
        let Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) = event else { continue };
        let Some(data) = cm.data.as_ref() else { continue };
        if data.get("group") != Some(&group) {
            continue;
        }
        let (Some(generation), Some(active)) =
            (data.get("topologyGeneration").and_then(|g| g.parse::<i64>().ok()), data.get("activeSite"))
        else {
            continue;
        };
        if last.as_ref().is_some_and(|(g, _)| *g == generation) {
            continue;
        }
        let from = last.as_ref().map(|(_, a)| a.clone()).unwrap_or_default();
        out.lock().unwrap().push((now_us(), generation, active.clone(), from));
        last = Some((generation, active.clone()));
    }
}

/// The `decision` records of `decisions`, each with its kind from what
/// the status said (`emergencies`): written once the run is over, as the
/// emergency's facts reach the status after the record.
pub fn decision_records(decisions: &[Decision], emergencies: &Emergencies) -> Vec<Value> {
    let emergencies = emergencies.lock().unwrap();
    decisions
        .iter()
        .map(|(at, generation, active, from)| {
            let mut r = json!({"type": "decision", "at": at, "generation": generation, "activeSite": active});
            if !from.is_empty() {
                r["from"] = json!(from);
            }
            match emergencies.get(generation) {
                Some((from, abandoned)) => {
                    r["kind"] = json!("emergency");
                    r["from"] = json!(from);
                    r["abandoned"] = json!(abandoned);
                }
                None if *generation == 1 => r["kind"] = json!("bootstrap"),
                None => r["kind"] = json!("planned"),
            }
            r
        })
        .collect()
}

/// Records the leader-election Lease's holder at every change (as
/// `operator-N`, from the identity's `operator-N-…` prefix), and keeps
/// `leader` (N, or 0 when none) for the [`LeaderProxy`].
pub async fn watch_leader(leases: Api<Lease>, history: History, leader: Arc<AtomicU8>) {
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", bloodraven_api::names::LEADER_LEASE_NAME));
    let mut stream = watcher(leases, config).boxed();
    let mut last: Option<u8> = None;
    while let Some(event) = stream.next().await {
        let Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) = event else { continue };
        let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        let n = ["operator-1-", "operator-2-"].iter().position(|p| holder.starts_with(p)).map_or(0, |i| i as u8 + 1);
        leader.store(n, Ordering::SeqCst);
        if last != Some(n) {
            let mut r = json!({"type": "leader", "at": now_us()});
            if n > 0 {
                r["holder"] = json!(format!("operator-{n}"));
            }
            history.record(&r);
            last = Some(n);
        }
    }
}

/// A TCP proxy on 127.0.0.1 to the deploy API of whichever operator leads
/// (`leader`: 1 or 2; 0 tries operator 1): what a Service gives clients.
#[derive(Debug)]
pub struct LeaderProxy {
    /// Its port.
    pub port: u16,
}

impl LeaderProxy {
    /// Starts it; `ports` are the two operators' deploy API ports.
    pub async fn start(ports: [u16; 2], leader: Arc<AtomicU8>) -> LeaderProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let n = leader.load(Ordering::SeqCst).max(1);
                let upstream = ports[usize::from(n - 1)];
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        LeaderProxy { port }
    }
}

/// One deploy client's setting.
#[derive(Clone, Debug)]
pub struct DeployClient {
    /// Its name in the history (`deploy-1`, …).
    pub name: String,
    /// The sidecar binary.
    pub bin: PathBuf,
    /// The deploy API base URL (through the [`LeaderProxy`]).
    pub url: String,
    /// The group and instance.
    pub group: String,
    /// The MysqlDatabase.
    pub instance: String,
    /// CA bundle.
    pub ca: PathBuf,
    /// The projected token's file.
    pub token_file: PathBuf,
    /// Where the runs' logs go.
    pub dir: PathBuf,
}

/// Runs `bloodraven-sidecar run` around a migration that sleeps 2–8 s, one
/// operation after another (`<name>-op-<n>`), until `stop`; each run's JSON
/// log is kept in `client.dir` for [`call_log_records`].
pub async fn deploy_client(client: DeployClient, seed: u64, stop: Arc<AtomicBool>) {
    std::fs::create_dir_all(&client.dir).unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let op = format!("{}-op-{n}", client.name);
        let log = std::fs::File::create(client.dir.join(format!("{op}.log"))).unwrap();
        let sleep = 2 + (seed.wrapping_mul(31).wrapping_add(n * 7)) % 7;
        let work = client.dir.join(&op);
        std::fs::create_dir_all(&work).unwrap();
        let child = tokio::process::Command::new(&client.bin)
            .args(["--log-format", "json", "run"])
            .args(["--url", &client.url, "--group", &client.group, "--instance", &client.instance])
            .args(["--operation-id", &op])
            .arg("--ca")
            .arg(&client.ca)
            .arg("--token-file")
            .arg(&client.token_file)
            .args(["--ttl", "10", "--grace", "2", "--request-timeout", "2", "--acquire-timeout", "60"])
            .arg("--termination-log")
            .arg(work.join("termination-log"))
            .args(["--", "/bin/sh", "-c", &format!("sleep {sleep}")])
            .env("RUST_LOG", "info,bloodraven_sidecar::calls=debug")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn();
        match child {
            Ok(mut child) => {
                let _ = child.wait().await;
            }
            Err(e) => panic!("cannot start {}: {e}", client.bin.display()),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The `lease` and `fence` records of one run's JSON log (`client` its
/// client's name): the sidecar's call log, its fence line and the exit
/// of the fenced migration.
pub fn call_log_records(client: &str, log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = Vec::new();
    let mut fence: Option<Value> = None;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let msg = v.get("message").and_then(Value::as_str).unwrap_or_default();
        if msg == "lease call" {
            let answer = v.get("answer").and_then(Value::as_str).unwrap_or_default();
            let (status, error) = status_of(answer);
            let mut r = json!({
                "type": "lease",
                "client": client,
                "operationId": v.get("operation_id"),
                "kind": v.get("kind"),
                "call": v.get("call"),
                "callUs": v.get("call_us"),
                "retUs": v.get("ret_us"),
            });
            if let Some(status) = status {
                r["status"] = json!(status);
            }
            if let Some(error) = error {
                r["error"] = json!(error);
            }
            if let Some(g) = v.get("generation").filter(|g| !g.is_null()) {
                r["generation"] = g.clone();
            }
            if matches!(answer, "granted" | "renewed")
                && let Some(until) = v.get("confirmed_until_us").filter(|u| !u.is_null())
            {
                r["confirmedUntilUs"] = until.clone();
            }
            out.push(r);
        } else if msg.starts_with("fenced: ") {
            fence = Some(json!({
                "type": "fence",
                "client": client,
                "operationId": log.file_stem().and_then(|s| s.to_str()),
                "reason": v.get("fence"),
                "at": v.get("at_us"),
                "deadlineUs": v.get("confirmed_until_us"),
            }));
        } else if msg == "the fenced migration has exited"
            && let Some(f) = fence.as_mut()
        {
            f["stoppedUs"] = v.get("stopped_us").cloned().unwrap_or(Value::Null);
        } else if msg.starts_with("the wrapper did not end after the fence")
            && let Some(f) = fence.as_mut()
            && f.get("stoppedUs").is_none()
            && let Some(at) = timestamp_us(&v)
        {
            // The migration did not exit within the grace: the sidecar
            // killed it (SIGKILL, the whole tree) then, and no exit is
            // reported after that.
            f["stoppedUs"] = json!(at);
        } else if msg == "run ended" && fence.is_none() {
            // The migration ended by itself, before any fence: it uses the
            // lease no more from then on (a revocation that came after it
            // has nothing left to stop).
            let at = timestamp_us(&v);
            let deadline = out.iter().filter_map(|r| r.get("confirmedUntilUs").and_then(Value::as_i64)).max();
            if let Some(at) = at {
                fence = Some(json!({
                    "type": "fence",
                    "client": client,
                    "operationId": log.file_stem().and_then(|s| s.to_str()),
                    "reason": "ended",
                    "at": at,
                    "stoppedUs": at,
                    "deadlineUs": deadline.unwrap_or(at),
                }));
            }
        }
    }
    out.extend(fence);
    out
}

/// A log line's `timestamp`, in microseconds since the epoch.
fn timestamp_us(line: &Value) -> Option<i64> {
    line.get("timestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(k8s_openapi::jiff::Timestamp::as_microsecond)
}

/// The HTTP status and error code a call-log answer stands for (`None`
/// status: no usable answer).
fn status_of(answer: &str) -> (Option<u16>, Option<String>) {
    match answer {
        "granted" => (Some(201), None),
        "renewed" => (Some(200), None),
        "held" => (Some(409), Some("held".into())),
        "revoked" => (Some(409), Some("revoked".into())),
        "unstable" => (Some(423), Some("unstable".into())),
        "expired" => (Some(404), Some("expired".into())),
        "token_mismatch" => (Some(403), Some("token_mismatch".into())),
        "forbidden" => (Some(403), Some("forbidden".into())),
        other => match other.split_once(':') {
            Some(("refused" | "status", code)) => (code.parse().ok(), None),
            _ => (None, Some(other.to_owned())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_log_becomes_lease_and_fence_records() {
        let dir = std::env::temp_dir().join(format!("nemesis-calls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("deploy-1-op-3.log");
        std::fs::write(
            &log,
            [
                r#"{"timestamp":"x","level":"DEBUG","message":"lease call","call":"acquire","kind":"migration","operation_id":"deploy-1-op-3","call_us":100,"ret_us":150,"answer":"granted","generation":4,"confirmed_until_us":10000100}"#,
                r#"{"timestamp":"x","level":"DEBUG","message":"lease call","call":"renew","kind":"migration","operation_id":"deploy-1-op-3","call_us":3000000,"ret_us":3000200,"answer":"revoked","generation":5,"confirmed_until_us":10000100}"#,
                "not json at all",
                r#"{"timestamp":"x","level":"WARN","message":"fenced: the heartbeat stopped; never reconnecting, never acquiring again in this run","fence":"revoked","at_us":3000300,"confirmed_until_us":10000100}"#,
                r#"{"timestamp":"x","level":"INFO","message":"the fenced migration has exited","stopped_us":3100000}"#,
            ]
            .join("\n"),
        )
        .unwrap();
        let records = call_log_records("deploy-1", &log);
        assert_eq!(records.len(), 3, "{records:#?}");
        assert_eq!(records[0]["status"], 201);
        assert_eq!(records[0]["confirmedUntilUs"], 10_000_100);
        assert_eq!(records[1]["status"], 409);
        assert_eq!(records[1]["error"], "revoked");
        assert!(records[1].get("confirmedUntilUs").is_none(), "a revocation confirms nothing");
        assert_eq!(records[2]["type"], "fence");
        assert_eq!(records[2]["operationId"], "deploy-1-op-3");
        assert_eq!(records[2]["stoppedUs"], 3_100_000);
        assert_eq!(records[2]["deadlineUs"], 10_000_100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Seen in a run: the migration did not exit within the grace after a
    /// revocation, and the sidecar killed it; it never reported an exit.
    #[test]
    fn a_fenced_migration_the_sidecar_killed_stopped_when_it_was_killed() {
        let dir = std::env::temp_dir().join(format!("nemesis-killed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("deploy-1-op-2.log");
        std::fs::write(
            &log,
            [
                r#"{"timestamp":"2026-12-05T22:19:48.419454Z","level":"WARN","message":"fenced: the heartbeat stopped; never reconnecting, never acquiring again in this run","fence":"revoked","at_us":1796509188418820,"confirmed_until_us":1796509197861820}"#,
                r#"{"timestamp":"2026-12-05T22:19:51.460075Z","level":"WARN","message":"the wrapper did not end after the fence or the run's end: killed it and everything it left","processes":1}"#,
                r#"{"timestamp":"2026-12-05T22:19:55.422998Z","level":"WARN","message":"the migration did not report its exit within the grace"}"#,
                r#"{"timestamp":"2026-12-05T22:19:55.479790Z","level":"INFO","message":"run ended","result":"schema-verification-required"}"#,
            ]
            .join("\n"),
        )
        .unwrap();
        let records = call_log_records("deploy-1", &log);
        assert_eq!(records.len(), 1, "{records:#?}");
        assert_eq!(records[0]["reason"], "revoked");
        assert_eq!(records[0]["stoppedUs"], 1_796_509_191_460_075_i64);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_semi_sync_read_names_the_flavors_primary_side() {
        assert_eq!(
            semi_sync_sql(Flavor::MariaDb),
            "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_master_enabled'; \
             SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_status'"
        );
        assert_eq!(
            semi_sync_sql(Flavor::MySql),
            "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_source_enabled'; \
             SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_source_status'"
        );
        assert_eq!(switch_value("ON"), Some(true));
        assert_eq!(switch_value("OFF"), Some(false));
        assert_eq!(switch_value(""), None);
    }

    #[test]
    fn every_answer_of_the_call_log_has_a_status_or_an_error() {
        assert_eq!(status_of("refused:403"), (Some(403), None));
        assert_eq!(status_of("status:204"), (Some(204), None));
        assert_eq!(status_of("failed"), (None, Some("failed".into())));
        assert_eq!(status_of("held"), (Some(409), Some("held".into())));
    }
}
