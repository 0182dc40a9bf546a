//! Attack round on `bloodraven-sidecar run` with the real
//! operator and apiserver: what an ordinary but hostile cluster user or
//! pipeline author can do to a run that holds its leases.
//!
//! - the MysqlFailoverGroup deleted and re-created under the same name (its
//!   generation restarts at 1), the MysqlDatabase deleted, the run's
//!   ServiceAccount removed from `spec.deploymentClients`, the deploy Lease
//!   deleted by hand: each fences the migration (SIGTERM), ends as "schema
//!   verification required" (the default boundary takes the migration to
//!   be in DDL), and the sidecar never asks for a lease again;
//! - a forged `{"op":"exited","code":0}` on the run's socket (found by this
//!   round: it ended the run as "succeeded", released both leases and
//!   recorded `ddlState: completed` while the migration still ran): now
//!   the run goes on and ends with the migration's own result.
//!
//! Every run is also checked for the ServiceAccount token in its output.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlDatabase;
use bloodraven_e2e::deploy::{DeployScenario, scenario};
use bloodraven_e2e::fixtures::{SITE_SECRET, group, is_ready_at, wait_status};
use bloodraven_e2e::sidecar::{SidecarRun, exit, leases, stamp};
use bloodraven_e2e::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

/// Short leases: renewed every 5 s; SIGTERM at expiry − 3 s.
const QUICK: &[&str] = &["--ttl", "15", "--grace", "3", "--request-timeout", "2"];

/// A migration that stamps `started`, runs until SIGTERM, stamps `term`
/// and exits 0 (the trap a hostile migration would set).
fn until_term() -> String {
    format!(
        "trap '{term}; exit 0' TERM; {started}; while :; do sleep 0.1; done",
        term = stamp("term"),
        started = stamp("started")
    )
}

/// The run's output never carries the ServiceAccount token.
fn no_token(run: &SidecarRun, d: &DeployScenario) {
    let out = std::fs::read_to_string(run.dir.join("stdout")).unwrap_or_default();
    let all = format!("{}{out}", run.full_log());
    assert!(!all.contains(&d.pipeline.token), "the ServiceAccount token is in the run's output");
    assert!(!all.contains("\"token\""), "a token field is in the run's output:\n{all}");
}

/// Fenced in DDL, the migration told to stop, and not one second POST.
/// Any loss of the lease will do (what the operator answers is its
/// business); the one seen is printed as a figure.
async fn fenced_for_good(run: &mut SidecarRun, d: &DeployScenario, what: &str) {
    run.wait_for_marker("term", T).await;
    assert_eq!(run.wait(T).await, exit::SCHEMA_VERIFICATION_REQUIRED, "{}", run.log());
    let r = run.record();
    assert_eq!(r["result"], "schema-verification-required", "{r}");
    let code = r["fence"].as_str().unwrap_or_default();
    let lost = ["expired", "forbidden", "revoked", "token_mismatch", "generation_changed", "deadline_passed"];
    assert!(lost.contains(&code), "fence {code}: {r}");
    println!("figure: {what} → fence {code}: {}", r["lastError"]);
    let log = run.full_log();
    for kind in ["migration", "failover-hold"] {
        let grants = log.lines().filter(|l| l.contains("lease granted") && l.contains(&format!("\"{kind}\""))).count();
        assert_eq!(grants, 1, "{kind} granted {grants} times: never acquired again in the run\n{log}");
    }
    no_token(run, d);
}

fn databases(d: &DeployScenario) -> Api<MysqlDatabase> {
    Api::namespaced(d.sc.cluster.client.clone(), &d.sc.ns.name)
}

#[tokio::test]
async fn a_group_deleted_and_recreated_under_the_run_fences_it_for_good() {
    let d = scenario("sca-group").await;
    let p = &d.pipeline;
    let mut run = SidecarRun::start(p, &d.tls, "regroup-1", QUICK, &until_term());
    run.wait_for_marker("started", T).await;
    let groups = d.sc.cluster.groups();
    let old_uid = groups.get(&p.group).await.unwrap().metadata.uid.unwrap();
    groups.delete(&p.group, &DeleteParams::default()).await.unwrap();
    wait_for("the old group to be finalized", T, || async {
        match groups.get_opt(&p.group).await.map_err(|e| e.to_string())? {
            Some(g) if g.metadata.uid.as_deref() == Some(old_uid.as_str()) => Err("still there".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    // Same name, generation 1 again: the grant's generation, on purpose.
    let g = group(&p.group, &d.sc.ns.name, d.sc.pair.sites(&d.sc.ns.name, SITE_SECRET), "iad");
    groups.create(&PostParams::default(), &g).await.unwrap();
    wait_status(&d.sc.cluster, &p.group, "the new group's bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
    fenced_for_good(&mut run, &d, "group deleted and re-created").await;
    // The new group holds nothing of the old run's.
    wait_for("GET on the new group", T, || async {
        let ls = leases(p).await;
        if ls.iter().all(|l| l.1 != "regroup-1") { Ok(()) } else { Err(format!("{ls:?}")) }
    })
    .await;
}

#[tokio::test]
async fn the_database_deleted_under_the_run_fences_it_for_good() {
    let d = scenario("sca-db").await;
    let p = &d.pipeline;
    let mut run = SidecarRun::start(p, &d.tls, "redb-1", QUICK, &until_term());
    run.wait_for_marker("started", T).await;
    databases(&d).delete("counter-app", &DeleteParams::default()).await.unwrap();
    fenced_for_good(&mut run, &d, "MysqlDatabase deleted").await;
}

#[tokio::test]
async fn the_run_s_service_account_removed_from_deployment_clients_fences_it() {
    let d = scenario("sca-client").await;
    let p = &d.pipeline;
    let mut run = SidecarRun::start(p, &d.tls, "declient-1", QUICK, &until_term());
    run.wait_for_marker("started", T).await;
    let patch = json!({"spec": {"deploymentClients": [{"namespace": d.sc.ns.name, "serviceAccount": "someone-else"}]}});
    databases(&d).patch("counter-app", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    fenced_for_good(&mut run, &d, "ServiceAccount removed from deploymentClients").await;
}

#[tokio::test]
async fn the_deploy_lease_deleted_by_hand_fences_the_run() {
    let d = scenario("sca-lease").await;
    let p = &d.pipeline;
    let mut run = SidecarRun::start(p, &d.tls, "delease-1", QUICK, &until_term());
    run.wait_for_marker("started", T).await;
    let api: Api<Lease> = Api::namespaced(d.sc.cluster.client.clone(), &d.sc.ns.name);
    for name in slots(&api, &p.group).await {
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
    fenced_for_good(&mut run, &d, "deploy Lease deleted by hand").await;
}

#[tokio::test]
async fn the_deploy_lease_edited_by_hand_fences_the_run() {
    let d = scenario("sca-edit").await;
    let p = &d.pipeline;
    let api: Api<Lease> = Api::namespaced(d.sc.cluster.client.clone(), &d.sc.ns.name);
    // Another holder written into the slots.
    let mut run = SidecarRun::start(p, &d.tls, "edlease-1", QUICK, &until_term());
    run.wait_for_marker("started", T).await;
    let patch = json!({"spec": {"holderIdentity": "someone-else"}});
    for name in slots(&api, &p.group).await {
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }
    fenced_for_good(&mut run, &d, "deploy Lease holder edited by hand").await;
}

/// The names of `group`'s lease slots (at least one).
async fn slots(api: &Api<Lease>, group: &str) -> Vec<String> {
    let slots = api.list(&ListParams::default().labels("bloodraven.shipstream.io/deploy-lease=slot")).await.unwrap();
    let mine: Vec<String> = slots
        .items
        .iter()
        .filter(|l| {
            l.metadata.annotations.as_ref().and_then(|a| a.get("bloodraven.shipstream.io/group")).map(String::as_str)
                == Some(group)
        })
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    assert!(!mine.is_empty(), "the group's slots: {slots:?}");
    mine
}

#[tokio::test]
async fn a_forged_exited_on_the_socket_neither_ends_the_run_nor_fakes_its_success() {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    let d = scenario("sca-forge").await;
    let p = &d.pipeline;
    let dir = bloodraven_e2e::e2e_dir().join("sidecar").join(format!("forge-{}", bloodraven_e2e::suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("s.sock");
    let script =
        format!("{}; while [ ! -e \"$D/go\" ]; do sleep 0.1; done; {}; exit 5", stamp("started"), stamp("ended"));
    // Reported boundary: its own failure (5) is outside any DDL, so its code
    // is the run's (inside, any failure is 93).
    let flags = [QUICK, &["--socket", sock.to_str().unwrap(), "--ddl-boundary", "reported"]].concat();
    let mut run = SidecarRun::start(p, &d.tls, "forge-1", &flags, &script);
    run.wait_for_marker("started", T).await;

    // Another process of the same user, not the wrapper: it says CMD exited 0.
    let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
    let (read, mut write) = stream.into_split();
    write.write_all(b"{\"op\":\"exited\",\"code\":0}\n").await.unwrap();
    let mut lines = tokio::io::BufReader::new(read).lines();
    let answer = tokio::time::timeout(Duration::from_secs(3), lines.next_line()).await;
    assert!(answer.is_err(), "no verdict for a run that goes on: {answer:?}");
    drop(lines);
    drop(write);

    // The run goes on: both leases held, the migration not stopped, still renewing.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let ls = leases(p).await;
    assert!(
        ["migration", "failover-hold"].iter().all(|k| ls.iter().any(|l| l.0 == *k && l.1 == "forge-1")),
        "{ls:?}\n{}",
        run.log()
    );
    assert!(!run.created("ended"), "the migration must still run");
    // And it ends with the migration's own result, not the forged 0.
    std::fs::write(run.dir.join("go"), "").unwrap();
    assert_eq!(run.wait(T).await, 5, "{}", run.log());
    let r = run.record();
    assert_eq!((r["result"].as_str(), r["exitCode"].as_i64()), (Some("failed"), Some(5)), "{r}");
    no_token(&run, &d);
}

/// A hostile deploy API: TLS with a certificate from the test CA, HTTP/1.1
/// read by hand, and answers chosen by `answer` (method, path) → raw
/// response bytes, or `None` to stream `huge` instead. Counts requests per path.
mod hostile {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    pub type Answer = Arc<dyn Fn(&str, &str, &str) -> Reply + Send + Sync>;

    pub enum Reply {
        /// Whole response bytes.
        Raw(Vec<u8>),
        /// A 201 announcing 2 GB, then spaces for as long as the client reads.
        Endless,
        /// The response, one byte per second.
        Dribble(Vec<u8>),
    }

    pub fn json(status: &str, body: &serde_json::Value) -> Reply {
        let b = body.to_string();
        Reply::Raw(
            format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}", b.len())
                .into_bytes(),
        )
    }

    pub fn grant(body: &str, generation: i64) -> Reply {
        let req: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        json(
            "201 Created",
            &serde_json::json!({"kind": req["kind"], "operationId": req["operationId"], "instance": req["instance"],
                "token": format!("LEASE-TOKEN-{}", req["kind"].as_str().unwrap_or_default()),
                "expiresAt": "2030-01-01T00:00:00Z", "ttlSeconds": req["ttlSeconds"], "topologyGeneration": generation,
                "somethingNew": {"nested": [1, 2]}}),
        )
    }

    pub fn renewed(generation: i64) -> Reply {
        json(
            "200 OK",
            &serde_json::json!({"expiresAt": "2030-01-01T00:00:00Z", "topologyGeneration": generation, "extra": true}),
        )
    }

    pub struct Server {
        pub base: String,
        pub hits: Arc<Mutex<HashMap<String, usize>>>,
    }

    impl Server {
        pub fn hits(&self, path_part: &str) -> usize {
            self.hits.lock().unwrap().iter().filter(|(p, _)| p.contains(path_part)).map(|(_, n)| n).sum()
        }
    }

    pub async fn start(cert: &std::path::Path, key: &std::path::Path, answer: Answer) -> Server {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(cert).unwrap().collect::<Result<_, _>>().unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let config = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(certs, key).unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, answer, hits) = (acceptor.clone(), answer.clone(), h.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let mut buf = Vec::new();
                    loop {
                        // One request: headers, then Content-Length bytes.
                        let head_end = loop {
                            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break i + 4;
                            }
                            let mut chunk = [0u8; 4096];
                            match tls.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                        let mut first = head.split_whitespace();
                        let (method, path) =
                            (first.next().unwrap_or("").to_owned(), first.next().unwrap_or("").to_owned());
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        while buf.len() < head_end + len {
                            let mut chunk = [0u8; 4096];
                            match tls.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned();
                        buf.drain(..head_end + len);
                        *hits.lock().unwrap().entry(format!("{method} {path}")).or_default() += 1;
                        match answer(&method, &path, &body) {
                            Reply::Raw(bytes) => {
                                if tls.write_all(&bytes).await.is_err() {
                                    return;
                                }
                            }
                            Reply::Endless => {
                                let _ = tls
                                    .write_all(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2000000000\r\n\r\n")
                                    .await;
                                let spaces = vec![b' '; 1 << 20];
                                for _ in 0..2000 {
                                    if tls.write_all(&spaces).await.is_err() {
                                        return;
                                    }
                                }
                                return;
                            }
                            Reply::Dribble(bytes) => {
                                for b in bytes {
                                    if tls.write_all(&[b]).await.is_err() || tls.flush().await.is_err() {
                                        return;
                                    }
                                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                                }
                            }
                        }
                    }
                });
            }
        });
        Server { base, hits }
    }
}

/// A run against `server`, with the test CA.
fn hostile_run(
    server: &hostile::Server,
    tls: &bloodraven_e2e::deploy::TlsFiles,
    op: &str,
    flags: &[&str],
    script: &str,
) -> SidecarRun {
    let p = bloodraven_e2e::deploy::Pipeline {
        http: bloodraven_e2e::deploy::client(&tls.ca),
        base: server.base.clone(),
        group: "g".into(),
        token: format!("sa-token-{}", bloodraven_e2e::suffix()),
    };
    SidecarRun::start(&p, tls, op, flags, script)
}

fn hostile_tls(name: &str, sans: &str) -> bloodraven_e2e::deploy::TlsFiles {
    let dir = bloodraven_e2e::e2e_dir().join("sidecar-hostile").join(format!("{name}-{}", bloodraven_e2e::suffix()));
    bloodraven_e2e::deploy::tls_files_for(&dir, sans)
}

/// Found by this round: a 2 GB answer was buffered whole (1.1 GB resident
/// within the 5 s request timeout); a 307 was followed, the POST resent
/// to wherever it pointed.
#[tokio::test]
async fn a_huge_answer_is_not_buffered_and_a_redirect_is_not_followed() {
    let tls = hostile_tls("huge", "IP:127.0.0.1");
    let server =
        hostile::start(&tls.cert, &tls.key, std::sync::Arc::new(|_: &str, _: &str, _: &str| hostile::Reply::Endless))
            .await;
    let mut run = hostile_run(&server, &tls, "huge-1", &["--acquire-timeout", "4"], &stamp("started"));
    let mut peak = 0;
    for _ in 0..20 {
        if let Some((hwm, _)) = run.memory_kib() {
            peak = peak.max(hwm);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(run.wait(T).await, exit::NOT_STARTED_TIMEOUT, "{}", run.log());
    assert!(!run.created("started"));
    assert!(run.full_log().contains("more than 65536 bytes"), "{}", run.log());
    assert!(peak < 64 * 1024, "peak resident set {peak} KiB while answered with 2 GB");

    let tls = hostile_tls("redirect", "IP:127.0.0.1");
    let server = hostile::start(
        &tls.cert,
        &tls.key,
        std::sync::Arc::new(|_: &str, path: &str, body: &str| {
            if path.starts_with("/elsewhere") {
                hostile::grant(body, 1)
            } else {
                hostile::Reply::Raw(
                    b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /elsewhere/leases\r\nContent-Length: 0\r\n\r\n"
                        .to_vec(),
                )
            }
        }),
    )
    .await;
    let mut run = hostile_run(&server, &tls, "redirect-1", &["--acquire-timeout", "3"], &stamp("started"));
    assert_eq!(run.wait(T).await, exit::NOT_STARTED_TIMEOUT, "{}", run.log());
    assert!(!run.created("started"));
    assert_eq!(server.hits("/elsewhere"), 0, "the redirect was followed");
    assert!(server.hits("/deploy/v1/groups/g/leases") > 0);
}

#[tokio::test]
async fn a_server_with_another_name_is_never_trusted() {
    let tls = hostile_tls("name", "DNS:other.example");
    let server = hostile::start(
        &tls.cert,
        &tls.key,
        std::sync::Arc::new(|_: &str, _: &str, body: &str| hostile::grant(body, 1)),
    )
    .await;
    let mut run = hostile_run(&server, &tls, "name-1", &["--acquire-timeout", "2"], &stamp("started"));
    assert_eq!(run.wait(T).await, exit::NOT_STARTED_TIMEOUT, "{}", run.log());
    assert!(!run.created("started"));
    assert!(run.full_log().contains("not valid for name"), "{}", run.log());
    assert_eq!(server.hits(""), 0, "no request over an untrusted connection");
}

/// Unknown fields are ignored; a renewal at another generation fences; a
/// renewal answer dribbled a byte a second never counts (the request
/// timeout), so the run fences at its own deadline; a watch answered at
/// once is not asked again at once.
#[tokio::test]
async fn odd_answers_never_extend_authority() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let script = format!("trap '{}; exit 0' TERM; {}; while :; do sleep 0.1; done", stamp("term"), stamp("started"));
    for (name, fence) in [("generation", "generation_changed"), ("dribble", "deadline_passed")] {
        let tls = hostile_tls(name, "IP:127.0.0.1");
        let puts = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = puts.clone();
        let dribble = name == "dribble";
        let server = hostile::start(
            &tls.cert,
            &tls.key,
            std::sync::Arc::new(move |method: &str, path: &str, body: &str| match method {
                "POST" if path.ends_with("/watch") => hostile::renewed(3),
                "POST" => hostile::grant(body, 3),
                // The first renewals are plain (one confirms the start).
                "PUT" if counter.fetch_add(1, Ordering::SeqCst) < 2 => hostile::renewed(3),
                "PUT" => {
                    if dribble {
                        match hostile::renewed(3) {
                            hostile::Reply::Raw(b) => hostile::Reply::Dribble(b),
                            other => other,
                        }
                    } else {
                        hostile::renewed(4)
                    }
                }
                _ => hostile::Reply::Raw(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
            }),
        )
        .await;
        let began = std::time::Instant::now();
        let mut run = hostile_run(&server, &tls, &format!("{name}-1"), QUICK, &script);
        run.wait_for_marker("started", T).await;
        run.wait_for_marker("term", T).await;
        assert_eq!(run.wait(T).await, exit::SCHEMA_VERIFICATION_REQUIRED, "{name}: {}", run.log());
        let r = run.record();
        assert_eq!(r["fence"], fence, "{name}: {r}");
        assert!(puts.load(Ordering::SeqCst) >= 3, "{name}: renewed");
        let all = format!("{}{}", run.full_log(), std::fs::read_to_string(run.dir.join("stdout")).unwrap_or_default());
        assert!(!all.contains("LEASE-TOKEN"), "{name}: a lease token in the output");
        assert!(server.hits("/leases") >= 2, "{name}");
        // The watch is answered at once, every time (a server or proxy that
        // does not hold it): found by this round, the sidecar asked again at
        // once, as fast as the round trip allowed.
        // At most one a second per lease (the pause), with slack.
        let watches = server.hits("/watch") as u64;
        let secs = began.elapsed().as_secs();
        assert!(watches <= 3 * secs + 4, "{name}: {watches} watch requests in {secs} s");
    }
}

/// A server that grants and renews at generation 1, and holds no watch.
async fn plain_server(tls: &bloodraven_e2e::deploy::TlsFiles) -> hostile::Server {
    hostile::start(
        &tls.cert,
        &tls.key,
        std::sync::Arc::new(|method: &str, path: &str, body: &str| match method {
            "POST" if path.ends_with("/watch") => hostile::Reply::Dribble(Vec::new()),
            "POST" => hostile::grant(body, 1),
            "PUT" => hostile::renewed(1),
            _ => hostile::Reply::Raw(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
        }),
    )
    .await
}

/// Found by this round: a process the migration detached from its process
/// group (`setsid`, or a double fork) outlived the run and wrote after it
/// had ended "succeeded" and released its leases; the fence's SIGKILL to
/// the group missed it the same way. The wrapper now reaps them all.
#[tokio::test]
async fn processes_the_migration_detaches_never_outlive_the_run() {
    let tls = hostile_tls("setsid", "IP:127.0.0.1");
    let server = plain_server(&tls).await;
    let late = |name: &str| format!("sleep 3; {}", stamp(name));
    // Reported boundary: a failure outside DDL keeps its own code.
    let flags = [QUICK, &["--ddl-boundary", "reported"]].concat();
    for (op, tail) in [("detach-ok", "exit 0"), ("detach-fail", "exit 4")] {
        let script = format!(
            "setsid sh -c '{a}' & (setsid sh -c \"sh -c '{b}' &\"); sh -c '{c}' & sleep 0.5; {started}; {tail}",
            a = late("setsid"),
            b = late("double-fork"),
            c = late("in-group"),
            started = stamp("started"),
        );
        let mut run = hostile_run(&server, &tls, op, &flags, &script);
        let code = run.wait(T).await;
        assert_eq!(code, if tail == "exit 0" { 0 } else { 4 }, "{}", run.log());
        assert!(run.has("started"), "{}", run.log());
        tokio::time::sleep(Duration::from_secs(5)).await;
        for marker in ["setsid", "double-fork", "in-group"] {
            assert!(!run.created(marker), "{op}: a {marker} process ran on after the run ended");
        }
    }
}

/// Found by this round: an error page that echoes the request (a proxy's,
/// a debug server's) was logged and recorded as the answer's text, the
/// ServiceAccount token and the lease token with it.
#[tokio::test]
async fn an_answer_that_echoes_the_request_never_puts_a_token_in_the_output() {
    let tls = hostile_tls("echo", "IP:127.0.0.1");
    let echo = |status: &str, method: &str, path: &str, body: &str, bearer: &str| {
        let text = format!("{method} {path} Authorization: Bearer {bearer} {body}");
        hostile::Reply::Raw(
            format!("HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}", text.len())
                .into_bytes(),
        )
    };
    let token = format!("sa-token-{}", bloodraven_e2e::suffix());
    let bearer = token.clone();
    let puts = std::sync::atomic::AtomicUsize::new(0);
    let server = hostile::start(
        &tls.cert,
        &tls.key,
        std::sync::Arc::new(move |method: &str, path: &str, body: &str| match method {
            "POST" if path.ends_with("/watch") => echo("400 Bad Request", method, path, body, &bearer),
            "POST" => hostile::grant(body, 1),
            // The first renewals are plain (one confirms the start).
            "PUT" if puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 => hostile::renewed(1),
            _ => echo("502 Bad Gateway", method, path, body, &bearer),
        }),
    )
    .await;
    let p = bloodraven_e2e::deploy::Pipeline {
        http: bloodraven_e2e::deploy::client(&tls.ca),
        base: server.base.clone(),
        group: "g".into(),
        token: token.clone(),
    };
    let script = format!("trap '{}; exit 0' TERM; {}; while :; do sleep 0.1; done", stamp("term"), stamp("started"));
    let mut run = SidecarRun::start(&p, &tls, "echo-1", QUICK, &script);
    run.wait_for_marker("term", T).await;
    assert_eq!(run.wait(T).await, exit::SCHEMA_VERIFICATION_REQUIRED, "{}", run.log());
    assert_eq!(run.record()["fence"], "deadline_passed");
    let all = format!("{}{}", run.full_log(), std::fs::read_to_string(run.dir.join("stdout")).unwrap_or_default());
    assert!(all.contains("[redacted]"), "the echoes were logged, scrubbed:\n{all}");
    assert!(!all.contains(&token), "the ServiceAccount token is in the output:\n{all}");
    assert!(!all.contains("LEASE-TOKEN"), "a lease token is in the output:\n{all}");
}

/// The forged `exited` of the test above against a stand-in deploy API (no
/// cluster): no lease is released on it, and the run ends with CMD's code.
#[tokio::test]
async fn a_forged_exited_releases_nothing_against_a_stand_in_api() {
    use tokio::io::AsyncWriteExt as _;
    let tls = hostile_tls("forge", "IP:127.0.0.1");
    let server = plain_server(&tls).await;
    let sock = tls.ca.parent().unwrap().join("s.sock");
    let script = format!("{}; while [ ! -e \"$D/go\" ]; do sleep 0.1; done; exit 5", stamp("started"));
    let flags = [QUICK, &["--socket", sock.to_str().unwrap(), "--ddl-boundary", "reported"]].concat();
    let mut run = hostile_run(&server, &tls, "forge-2", &flags, &script);
    run.wait_for_marker("started", T).await;
    let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
    s.write_all(b"{\"op\":\"exited\",\"code\":0}\n").await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(s);
    assert_eq!(server.hits("DELETE"), 0, "a lease was released on a forged exit\n{}", run.log());
    assert!(!run.full_log().contains("run ended"), "{}", run.log());
    std::fs::write(run.dir.join("go"), "").unwrap();
    assert_eq!(run.wait(T).await, 5, "{}", run.log());
    assert_eq!(run.record()["result"], "failed");
    assert_eq!(server.hits("DELETE"), 2, "both released after the real end is recorded");
}

/// Found by this round: `kill -9` of `run`'s wrapper (`exec`) left the
/// migration running, orphaned, while `run` took the wrapper's death for
/// the migration's "failed" end and released both leases, the mutex
/// included. Now `run` is the subreaper of that tree: it kills what the
/// wrapper left, and ends the run as unknown (schema verification
/// required, the mutex left to lapse), never as a plain failure.
#[tokio::test]
async fn the_wrapper_killed_leaves_no_migration_running_and_no_mutex_released() {
    let tls = hostile_tls("wrapper9", "IP:127.0.0.1");
    let server = plain_server(&tls).await;
    let script = format!(
        "setsid sh -c 'sleep 3; {a}' & sh -c 'sleep 3; {b}' & {started}; sleep 3; {c}",
        a = stamp("setsid"),
        b = stamp("in-group"),
        c = stamp("cmd"),
        started = stamp("started"),
    );
    let mut run = hostile_run(&server, &tls, "wrapper9-1", QUICK, &script);
    run.wait_for_marker("started", T).await;
    let children = std::process::Command::new("pgrep").args(["-P", &run.pid().to_string()]).output().unwrap();
    let wrapper = String::from_utf8_lossy(&children.stdout).trim().to_owned();
    assert!(!wrapper.is_empty() && !wrapper.contains('\n'), "one child, the wrapper: {wrapper:?}");
    assert!(std::process::Command::new("kill").args(["-9", &wrapper]).status().unwrap().success());
    assert_eq!(run.wait(T).await, exit::SCHEMA_VERIFICATION_REQUIRED, "{}", run.log());
    let r = run.record();
    assert_eq!(r["fence"], "wrapper_lost", "{r}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    for marker in ["setsid", "in-group", "cmd"] {
        assert!(!run.created(marker), "a {marker} process ran on after the wrapper was killed");
    }
    assert_eq!(server.hits("DELETE"), 1, "the hold only: the mutex lapses, the operator records the loss");
}

/// Found by this round: a migration that exits 92 by itself made the run
/// exit 92, "fenced before the DDL boundary: may be retried". Outside its
/// DDL (`--ddl-boundary reported`, nothing reported) its failure is its
/// own; inside it (the default `at-start`: a command that never reports is
/// in DDL from its start) any failure needs a person, as a fence there does.
#[tokio::test]
async fn a_migration_s_own_exit_code_never_reads_as_the_sidecar_s() {
    let tls = hostile_tls("code", "IP:127.0.0.1");
    let server = plain_server(&tls).await;
    let reported = [QUICK, &["--ddl-boundary", "reported"]].concat();
    for (op, own, want) in [("code-92", 92, 1), ("code-93", 93, 1), ("code-7", 7, 7)] {
        let mut run = hostile_run(&server, &tls, op, &reported, &format!("exit {own}"));
        assert_eq!(run.wait(T).await, want, "{}", run.log());
        let r = run.record();
        assert_eq!(r["result"], "failed", "{r}");
        assert!(r["message"].as_str().unwrap().contains(&format!("exit code {own}")), "{r}");
    }
    for (op, own) in [("code-in-ddl-92", 92), ("code-in-ddl-7", 7)] {
        let mut run = hostile_run(&server, &tls, op, QUICK, &format!("exit {own}"));
        assert_eq!(run.wait(T).await, exit::SCHEMA_VERIFICATION_REQUIRED, "{}", run.log());
        let r = run.record();
        assert_eq!(
            (r["result"].as_str(), r["ddlState"].as_str()),
            (Some("schema-verification-required"), Some("started")),
            "{r}"
        );
        assert!(r["message"].as_str().unwrap().contains(&format!("exit code {own}")), "{r}");
    }
}

/// Found by this round: a migration that stops its own wrapper (`kill -STOP
/// $PPID`, same user under `run`) was never signalled after a revocation:
/// the fence went to the stopped wrapper, and `run` ended with the
/// migration still running. Now `run` kills the whole tree itself once the
/// grace after a fence has passed.
#[tokio::test]
async fn a_migration_that_stops_its_wrapper_is_still_fenced() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tls = hostile_tls("stopwrap", "IP:127.0.0.1");
    let puts = AtomicUsize::new(0);
    let revoked = serde_json::json!({"error": "revoked", "message": "revoked by hand", "reason": "OperatorRevoked", "topologyGeneration": 1});
    let server = hostile::start(
        &tls.cert,
        &tls.key,
        std::sync::Arc::new(move |method: &str, path: &str, body: &str| match method {
            "POST" if path.ends_with("/watch") => hostile::Reply::Dribble(Vec::new()),
            "POST" => hostile::grant(body, 1),
            "PUT" if puts.fetch_add(1, Ordering::SeqCst) < 2 => hostile::renewed(1),
            "PUT" => hostile::json("409 Conflict", &revoked),
            _ => hostile::Reply::Raw(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
        }),
    )
    .await;
    let script = format!(
        "trap '' TERM; kill -STOP $PPID; {started}; i=0; while [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done; {after}",
        started = stamp("started"),
        after = stamp("after"),
    );
    let mut run = hostile_run(&server, &tls, "stopwrap-1", QUICK, &script);
    run.wait_for_marker("started", T).await;
    let code = run.wait(T).await;
    let r = run.record();
    assert_eq!(r["fence"], "revoked", "{r}");
    assert_eq!(code, exit::SCHEMA_VERIFICATION_REQUIRED, "{}", run.log());
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(!run.created("after"), "the migration ran on after the fence:\n{}", run.log());
}

/// Found by this round: a grant for another operation (a confused server, a
/// caching proxy) was taken as ours and the migration started on it.
#[tokio::test]
async fn a_grant_for_another_lease_is_not_ours() {
    let tls = hostile_tls("othergrant", "IP:127.0.0.1");
    let server = hostile::start(
        &tls.cert,
        &tls.key,
        std::sync::Arc::new(|method: &str, path: &str, body: &str| match method {
            "POST" if path.ends_with("/watch") => hostile::Reply::Dribble(Vec::new()),
            "POST" => hostile::grant(&body.replace("othergrant-1", "someone-else"), 1),
            "PUT" => hostile::renewed(1),
            _ => hostile::Reply::Raw(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
        }),
    )
    .await;
    let flags = [QUICK, &["--acquire-timeout", "3", "--ddl-boundary", "reported"]].concat();
    let mut run = hostile_run(&server, &tls, "othergrant-1", &flags, &stamp("started"));
    assert_eq!(run.wait(T).await, exit::NOT_STARTED_TIMEOUT, "{}", run.log());
    assert!(!run.created("started"), "the migration started on another operation's grant");
    assert!(run.full_log().contains("a grant for another lease"), "{}", run.log());
}
