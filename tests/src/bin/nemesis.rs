//! `nemesis`: randomized combined faults on the real stack, recorded as a
//! history for the checker (docs/nemesis.md). `hack/nemesis.sh`
//! (`make nemesis`) starts the control plane, builds what is needed, runs
//! this and then the checker.
//!
//! ```text
//! nemesis schedule --seed N [--seconds S]      # print the schedule of a seed
//! nemesis run --seed N [--seconds S] --out DIR [--semi-sync on|off]
//! ```
//!
//! `run` starts two sites (each in its own network namespace), two operator
//! replicas (each in its own cgroup), the deploy API behind a proxy that
//! follows the leader, two writers through `<db>-primary`, two deploy
//! clients running `bloodraven-sidecar run`, a poller per site and a prober
//! per site and operator; injects the seed's schedule; heals everything;
//! waits for the group to settle; reads the final data; and writes
//! `DIR/history.jsonl`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed setup step must stop the run loudly

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD;
use bloodraven_e2e::deploy::{TlsFiles, database, service_account, tls_files, token, wait_claimed};
use bloodraven_e2e::fixtures::{SITE_SECRET, create_group, group, wait_status};
use bloodraven_e2e::nemesis::history::{History, now_us};
use bloodraven_e2e::nemesis::net::Net;
use bloodraven_e2e::nemesis::schedule::{Fault, Process, Schedule, Site, Step};
use bloodraven_e2e::nemesis::workload::{self, DeployClient, LeaderProxy, SiteAddr};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::sidecar::sidecar_bin;
use bloodraven_e2e::sites::Flavor;
use bloodraven_e2e::{Cluster, Operator, SitePair, TestNamespace, e2e_dir, free_port};
use clap::{Parser, Subcommand};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[derive(Parser)]
#[command(about = "Randomized combined faults on the real stack, recorded for the checker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the schedule of a seed.
    Schedule {
        /// The seed.
        #[arg(long)]
        seed: u64,
        /// Seconds of faults.
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(20..=86_400))]
        seconds: u64,
    },
    /// Run a schedule on the real stack and write its history.
    Run {
        /// The seed.
        #[arg(long)]
        seed: u64,
        /// Seconds of faults.
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(20..=86_400))]
        seconds: u64,
        /// Where the history and the logs go.
        #[arg(long)]
        out: PathBuf,
        /// Semi-sync on or off (default: the seed's draw).
        #[arg(long, value_parser = ["on", "off"])]
        semi_sync: Option<String>,
    },
    /// (Run by `run`, in an operator's cgroup.) Probe the sites as that
    /// operator sees them until the stop file appears.
    Probe {
        /// `operator-1` or `operator-2`.
        #[arg(long)]
        from: String,
        /// `NAME=HOST:PORT`, once per site.
        #[arg(long = "site")]
        sites: Vec<String>,
        /// Each probe's timeout, ms.
        #[arg(long)]
        timeout_ms: u64,
        /// The history file of this prober.
        #[arg(long)]
        out: PathBuf,
        /// Stops once this file exists.
        #[arg(long)]
        stop_file: PathBuf,
    },
}

/// Leader election quick enough that a dead leader is replaced within a few
/// seconds, in production's order (retry < renew deadline < duration).
const TIMINGS: LeaderTimings = LeaderTimings { lease_duration: 6, renew_deadline: 4, retry_period: 2 };
/// The group's detection: probes every 1 s, 1 s timeout, 3 misses.
const PROBE_INTERVAL_S: u32 = 1;
const FAILURE_THRESHOLD: u32 = 3;
const PROBE_TIMEOUT_S: u32 = 1;
/// How soon a site that is reachable again must be fenced (first-sight
/// fencing within a probe round or two, on a loaded two-core machine).
const FENCE_BOUND_MS: u64 = 5_000;
/// How long the group may take to settle once every fault has ended.
const SETTLE: Duration = Duration::from_secs(180);

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Schedule { seed, seconds } => print!("{}", Schedule::draw(seed, seconds * 1000)),
        Command::Probe { from, sites, timeout_ms, out, stop_file } => {
            probe(from, &sites, timeout_ms, &out, stop_file).await;
        }
        Command::Run { seed, seconds, out, semi_sync } => {
            let mut schedule = Schedule::draw(seed, seconds * 1000);
            if let Some(mode) = semi_sync {
                schedule.semi_sync = mode == "on";
            }
            run(schedule, &out).await;
        }
    }
}

async fn probe(from: String, sites: &[String], timeout_ms: u64, out: &Path, stop_file: PathBuf) {
    let sites: Vec<SiteAddr> = sites
        .iter()
        .map(|s| {
            let (name, addr) = s.split_once('=').unwrap_or_else(|| panic!("--site {s}: want NAME=HOST:PORT"));
            let (host, port) = addr.rsplit_once(':').unwrap_or_else(|| panic!("--site {s}: want NAME=HOST:PORT"));
            SiteAddr { name: name.into(), host: host.into(), port: port.parse().expect("a port") }
        })
        .collect();
    let history = History::create(out);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        while !stop_file.exists() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        flag.store(true, Ordering::SeqCst);
    });
    workload::prober(
        from,
        sites,
        OPERATOR_DB_PASSWORD.into(),
        Duration::from_millis(timeout_ms),
        history.clone(),
        stop,
    )
    .await;
    history.flush();
}

/// The deploy API's flags for an operator listening on `port`.
fn deploy_flags(port: u16, tls: &TlsFiles) -> Vec<String> {
    vec![
        "--deploy-api-enabled".into(),
        "--deploy-api-addr".into(),
        format!("127.0.0.1:{port}"),
        "--tls-cert-file".into(),
        tls.cert.to_str().unwrap().into(),
        "--tls-key-file".into(),
        tls.key.to_str().unwrap().into(),
    ]
}

/// Everything a fault acts on.
struct Stack {
    cluster: Cluster,
    ns: TestNamespace,
    pair: SitePair,
    net: Net,
    tls: TlsFiles,
    deploy_ports: [u16; 2],
    operators: [Option<Operator>; 2],
    /// The operators' kubeconfig, written once: an operator restarted while
    /// the API server is down starts as a host's agent would, with the
    /// token it has.
    kubeconfig: PathBuf,
    group: String,
    control_plane: PathBuf,
}

impl Stack {
    fn start_operator(&mut self, n: u8) {
        let member = format!("operator-{n}");
        let op = Operator::start_wrapped(
            &self.kubeconfig,
            &self.ns,
            &self.ns.name,
            &member,
            TIMINGS,
            &deploy_flags(self.deploy_ports[usize::from(n - 1)], &self.tls),
            &self.net.cgroups.wrapper(&member),
        );
        self.operators[usize::from(n - 1)] = Some(op);
    }

    fn signal_server(&self, site: Site, signal: &str) {
        self.pair.signal(site.name(), signal);
    }

    async fn status(&self) -> Option<MysqlFailoverGroupStatus> {
        self.cluster.groups().get_opt(&self.group).await.ok().flatten().and_then(|g| g.status)
    }

    /// Starts `fault`; `index` names its request.
    async fn start(&mut self, fault: Fault, index: usize) {
        match fault {
            Fault::Partition(a, b) => self.net.cut(a, b),
            Fault::Kill(Process::Server(site)) => self.pair.kill9(site.name()),
            Fault::Kill(Process::Operator(n)) => {
                if let Some(mut op) = self.operators[usize::from(n - 1)].take() {
                    op.kill().await;
                }
            }
            Fault::Pause(Process::Server(site)) => self.signal_server(site, "STOP"),
            Fault::Pause(Process::Operator(n)) => {
                if let Some(op) = &self.operators[usize::from(n - 1)] {
                    op.signal("STOP");
                }
            }
            Fault::ApiServerDown => {
                let pid =
                    std::fs::read_to_string(self.control_plane.join("pids/kube-apiserver.pid")).unwrap_or_default();
                let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
            }
            Fault::SlowLink { site, delay_ms, loss_percent } => self.net.slow(site, delay_ms, loss_percent),
            Fault::PlannedFailover => {
                // Onto whichever site is the standby now.
                let active = self.status().await.and_then(|s| s.active_site).unwrap_or_default();
                let target = if active == "iad" { "pdx" } else { "iad" };
                let patch = json!({"spec": {"plannedFailover": {"targetSite": target, "requestId": format!("nemesis-{index}")}}});
                let _ = self.cluster.groups().patch(&self.group, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
            Fault::Revoke => {
                let patch = json!({"metadata": {"annotations": {bloodraven_api::names::REVOKE_DEPLOYMENT_LEASES_ANNOTATION: format!("nemesis-{index}")}}});
                let _ = self.cluster.groups().patch(&self.group, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
        }
    }

    /// Ends `fault`.
    fn stop(&mut self, fault: Fault) {
        match fault {
            Fault::Partition(a, b) => self.net.heal(a, b),
            Fault::Kill(Process::Server(site)) => self.pair.restart(site.name(), true),
            Fault::Kill(Process::Operator(n)) => self.start_operator(n),
            Fault::Pause(Process::Server(site)) => self.signal_server(site, "CONT"),
            Fault::Pause(Process::Operator(n)) => {
                if let Some(op) = &self.operators[usize::from(n - 1)] {
                    op.signal("CONT");
                }
            }
            Fault::ApiServerDown => {
                let status = std::process::Command::new(bloodraven_e2e::repo_root().join("hack/control-plane.sh"))
                    .arg("up")
                    .arg(&self.control_plane)
                    .stdout(std::process::Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success(), "the control plane did not come back");
            }
            Fault::SlowLink { site, .. } => self.net.fast(site),
            Fault::PlannedFailover | Fault::Revoke => {}
        }
    }
}

#[allow(clippy::too_many_lines)] // the run's steps, in order
async fn run(schedule: Schedule, out: &Path) {
    print!("{schedule}");
    std::fs::create_dir_all(out).unwrap();
    let flavor = Flavor::of_run();
    let history = History::create(&out.join("history.jsonl"));
    let cluster = Cluster::connect().await;
    let apiserver_port: u16 =
        cluster.url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the API server's port");
    let tag = bloodraven_e2e::suffix();
    let net = Net::create(&tag, apiserver_port);
    // From here on every socket of this process and of the children it
    // starts (writers, deploy clients) is the clients'.
    net.cgroups.join("clients");
    let pair = SitePair::start_in_two_netns("nemesis", flavor, &net.sites["iad"], &net.sites["pdx"]);
    pair.sql("iad", &workload::prepare_sql());
    let ns = cluster.namespace("nemesis").await;
    ns.credentials_secret(SITE_SECRET, "bloodraven", OPERATOR_DB_PASSWORD).await;
    let tls = tls_files(&out.join("tls"));
    let name = format!("{}-g", ns.name);
    let kubeconfig = bloodraven_e2e::operator::operator_kubeconfig(&cluster, &ns).await;
    let mut stack = Stack {
        cluster,
        ns,
        pair,
        net,
        tls,
        deploy_ports: [free_port(), free_port()],
        operators: [None, None],
        kubeconfig,
        group: name.clone(),
        control_plane: e2e_dir().join("control-plane"),
    };
    stack.start_operator(1);
    stack.start_operator(2);
    let mut g = group(&name, &stack.ns.name, stack.pair.sites(&stack.ns.name, SITE_SECRET), "iad");
    g.spec.failover.probe_interval_seconds = PROBE_INTERVAL_S;
    g.spec.failover.failure_threshold = FAILURE_THRESHOLD;
    g.spec.failover.probe_timeout_seconds = PROBE_TIMEOUT_S;
    g.spec.failover.semi_sync = schedule.semi_sync;
    create_group(&stack.cluster, &g).await;
    wait_status(&stack.cluster, &name, "bootstrap", Duration::from_secs(120), |s| {
        bloodraven_e2e::fixtures::is_ready_at(s, "iad", 1)
    })
    .await;
    let (ns_name, client) = (stack.ns.name.clone(), stack.cluster.client.clone());
    service_account(&stack.cluster, &ns_name, "deployer").await;
    database(&stack.cluster, &ns_name, "app", &name, &[(&ns_name, "deployer")]).await;
    wait_claimed(&stack.cluster, &name, &ns_name, "app", Duration::from_secs(60)).await;
    let token_file = out.join("deployer.token");
    std::fs::write(&token_file, token(&stack.cluster, &ns_name, "deployer", &["bloodraven-deploy"]).await).unwrap();

    let start = now_us();
    history.record(&json!({
        // The MySQL sites load both semi-sync plugins (hack/mysql.sh), so
        // the operator keeps the switches on either flavor.
        "type": "run", "seed": schedule.seed, "flavor": flavor.name(),
        "semiSync": schedule.semi_sync,
        "group": name, "sites": ["iad", "pdx"],
        "probeIntervalMs": PROBE_INTERVAL_S * 1000, "failureThreshold": FAILURE_THRESHOLD,
        "probeTimeoutMs": PROBE_TIMEOUT_S * 1000, "fenceBoundMs": FENCE_BOUND_MS, "startUs": start,
    }));

    // Recorders.
    let stop = Arc::new(AtomicBool::new(false));
    let leader = Arc::new(AtomicU8::new(0));
    let emergencies: workload::Emergencies = Arc::default();
    let decisions: Arc<Mutex<Vec<workload::Decision>>> = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(workload::watch_group(stack.cluster.groups(), name.clone(), history.clone(), emergencies.clone()));
    tasks.spawn(workload::watch_records(Api::namespaced(client.clone(), &ns_name), name.clone(), decisions.clone()));
    tasks.spawn(workload::watch_leader(Api::namespaced(client.clone(), &ns_name), history.clone(), leader.clone()));
    let proxy = LeaderProxy::start(stack.deploy_ports, leader.clone()).await;
    let sites: Vec<SiteAddr> =
        [("iad", &stack.pair.iad_host, stack.pair.iad_port), ("pdx", &stack.pair.pdx_host, stack.pair.pdx_port)]
            .into_iter()
            .map(|(n, h, p)| SiteAddr { name: n.into(), host: h.clone(), port: p })
            .collect();
    let stop_file = out.join("stop");
    let _ = std::fs::remove_file(&stop_file);
    let mut probers = Vec::new();
    for n in 1..=2u8 {
        let member = format!("operator-{n}");
        let wrapper = stack.net.cgroups.wrapper(&member);
        let mut c = tokio::process::Command::new(&wrapper[0]);
        c.args(&wrapper[1..]).arg(std::env::current_exe().unwrap()).args(["probe", "--from", &member]);
        for s in &sites {
            c.args(["--site", &format!("{}={}:{}", s.name, s.host, s.port)]);
        }
        c.args(["--timeout-ms", &(PROBE_TIMEOUT_S * 1000).to_string()])
            .arg("--out")
            .arg(out.join(format!("probes-{member}.jsonl")))
            .arg("--stop-file")
            .arg(&stop_file)
            .kill_on_drop(true);
        probers.push(c.spawn().unwrap());
    }
    for s in &sites {
        let socket = stack.pair.dir().join("sites").join(&s.name).join("mysqld.sock");
        tasks.spawn(workload::poller(
            s.name.clone(),
            socket,
            OPERATOR_DB_PASSWORD.into(),
            flavor,
            history.clone(),
            stop.clone(),
        ));
    }
    let mut workers = tokio::task::JoinSet::new();
    for w in 1..=2u64 {
        let services = Api::namespaced(client.clone(), &ns_name);
        workers.spawn(workload::writer(
            format!("writer-{w}"),
            w * 1_000_000_000,
            services,
            "app".into(),
            sites.clone(),
            history.clone(),
            stop.clone(),
        ));
    }
    let clients_dir = out.join("clients");
    for c in 1..=2u64 {
        let client = DeployClient {
            name: format!("deploy-{c}"),
            bin: sidecar_bin(),
            url: format!("https://127.0.0.1:{}/deploy/v1", proxy.port),
            group: name.clone(),
            instance: "app".into(),
            ca: stack.tls.ca.clone(),
            token_file: token_file.clone(),
            dir: clients_dir.join(format!("deploy-{c}")),
        };
        workers.spawn(workload::deploy_client(client, schedule.seed + c, stop.clone()));
    }

    // The schedule.
    let t0 = Instant::now();
    let mut events: Vec<(u64, bool, usize)> = Vec::new();
    for (i, s) in schedule.steps.iter().enumerate() {
        events.push((s.at_ms, true, i));
        if !s.fault.instant() {
            events.push((s.end_ms(), false, i));
        }
    }
    // Ends before starts at the same moment.
    events.sort_by_key(|&(at, starts, i)| (at, starts, i));
    for (at, starts, i) in events {
        tokio::time::sleep_until(tokio::time::Instant::from_std(t0 + Duration::from_millis(at))).await;
        let planned: Step = schedule.steps[i];
        let action = if starts { "start" } else { "stop" };
        println!("t+{:>6.1}s {action} {}", t0.elapsed().as_secs_f64(), planned.fault);
        if starts {
            stack.start(planned.fault, i).await;
        } else {
            stack.stop(planned.fault);
        }
        history.record(&nemesis_record(i, &planned, action));
    }
    tokio::time::sleep_until(tokio::time::Instant::from_std(t0 + Duration::from_millis(schedule.length_ms))).await;

    // Settle: every fault is over; the group must come back Ready, or rest
    // where only a person may go on (a site with errant transactions is
    // left fenced by design: SiteDiverged, nothing pending).
    stack.net.heal_all();
    let settled = tokio::time::timeout(SETTLE, async {
        let mut unfenced = false;
        loop {
            let on =
                |s: &MysqlFailoverGroupStatus, t: &str| s.conditions.iter().any(|c| c.type_ == t && c.status == "True");
            if let Some(s) = stack.status().await {
                if on(&s, "Ready") || (on(&s, "SiteDiverged") && !on(&s, "RecoveryPending")) {
                    return s;
                }
                // NoPrimary (NoWritableSite) is left to a person: the
                // decided site answered read-only (a restarted server) and
                // no other site is writable. The runner does what the
                // runbook asks of them, once, and says so in the history.
                let no_writable = s
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "NoPrimary" && c.status == "True" && c.reason == "NoWritableSite");
                if no_writable
                    && !unfenced
                    && let Some(active) = s.active_site.clone()
                    && stack.pair.try_sql(&active, "SET GLOBAL read_only = 0").is_ok()
                {
                    unfenced = true;
                    println!(
                        "t+{:>6.1}s the runbook's person: read_only=0 on {active} (NoPrimary)",
                        t0.elapsed().as_secs_f64()
                    );
                    history
                        .record(&json!({"type": "person", "at": now_us(), "site": active, "action": "made-writable"}));
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    std::fs::write(&stop_file, "").unwrap();
    while workers.join_next().await.is_some() {}
    for mut p in probers {
        let _ = tokio::time::timeout(Duration::from_secs(10), p.wait()).await;
    }
    let active = if let Ok(s) = &settled {
        s.active_site.clone().unwrap_or_else(|| "iad".into())
    } else {
        println!(
            "the group did not settle (Ready, or SiteDiverged with nothing pending) within {SETTLE:?} of the last fault"
        );
        stack.status().await.and_then(|s| s.active_site).unwrap_or_else(|| "iad".into())
    };
    // The final data, on the active site (as root, over its socket).
    let values: Vec<u64> = stack
        .pair
        .try_sql(&active, "SELECT id FROM nem.t ORDER BY id")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    history.record(&json!({"type": "final", "site": active, "values": values}));
    tasks.abort_all();

    // What the other processes recorded.
    for n in 1..=2 {
        let file = out.join(format!("probes-operator-{n}.jsonl"));
        append_lines(&history, &file);
    }
    for c in 1..=2 {
        let dir = clients_dir.join(format!("deploy-{c}"));
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .collect()
            })
            .unwrap_or_default();
        logs.sort();
        for log in logs {
            for r in workload::call_log_records(&format!("deploy-{c}"), &log) {
                history.record(&r);
            }
        }
    }
    for r in workload::decision_records(&decisions.lock().unwrap(), &emergencies) {
        history.record(&r);
    }
    for r in revocations(&stack.cluster, &ns_name, &name).await {
        history.record(&r);
    }
    history.record(&json!({"type": "run", "seed": schedule.seed, "endUs": now_us()}));
    history.flush();
    println!("history: {}", out.join("history.jsonl").display());
    for op in stack.operators.iter_mut().flatten() {
        op.kill().await;
    }
}

fn nemesis_record(index: usize, step: &Step, action: &str) -> serde_json::Value {
    let mut detail = serde_json::Map::new();
    if let Fault::SlowLink { delay_ms, loss_percent, .. } = step.fault {
        detail.insert("delayMs".into(), json!(delay_ms));
        detail.insert("lossPercent".into(), json!(loss_percent));
    }
    json!({
        "type": "nemesis", "id": format!("f{index}"), "at": now_us(), "fault": step.fault.kind(),
        "action": action, "targets": step.fault.targets(), "detail": detail,
    })
}

/// Appends every line of a prober's file to the history.
fn append_lines(history: &History, file: &Path) {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    for line in text.lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            history.record(&v);
        }
    }
}

/// The group's revocations, from its tombstones (a Lease each, kept until
/// the group is deleted).
async fn revocations(cluster: &Cluster, namespace: &str, group: &str) -> Vec<serde_json::Value> {
    use bloodraven_api::names::deploy_lease as dl;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(cluster.client.clone(), namespace);
    let lp = kube::api::ListParams::default().labels(&format!("{}={}", dl::ROLE_LABEL, dl::ROLE_TOMBSTONE));
    let Ok(list) = leases.list(&lp).await else { return Vec::new() };
    list.items
        .into_iter()
        .filter_map(|l| {
            let a: BTreeMap<String, String> = l.metadata.annotations.clone().unwrap_or_default();
            if a.get(dl::GROUP).map(String::as_str) != Some(group) {
                return None;
            }
            let at = l.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_microsecond() as u64);
            Some(json!({
                "type": "revocation",
                "operationId": a.get(dl::OPERATION_ID)?,
                "kind": "migration",
                "reason": a.get(dl::REVOKE_REASON)?,
                "generation": a.get(dl::TOPOLOGY_GENERATION).and_then(|g| g.parse::<i64>().ok()),
                "at": at,
                // creationTimestamp has whole seconds: it happened in that second.
                "windowUs": 1_000_000,
            }))
        })
        .collect()
}
