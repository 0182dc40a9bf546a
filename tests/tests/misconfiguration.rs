//! Misconfigured groups get a condition and an Event that say what to fix,
//! never crash the operator, and never stall other groups. The CRD schema
//! refuses what it can express. A server older than the operator drives
//! is reported and left alone.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

use std::time::Duration;

use bloodraven_api::v1alpha1::{DeploymentClient, FailoverGroupRef, MysqlDatabase, MysqlDatabaseSpec, SecretRef};
use bloodraven_e2e::fixtures::{create_group, group, has_condition, is_ready_at, wait_event, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::wait::wait_for;
use bloodraven_e2e::{Cluster, Operator, SitePair, cluster::OPERATOR_DB_PASSWORD};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn bad_secret_host_and_password_are_explained_and_other_groups_keep_reconciling() {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("misconf").await;
    let pair = SitePair::start("misconf");
    ns.credentials_secret("site-creds", "bloodraven", OPERATOR_DB_PASSWORD).await;
    ns.credentials_secret("wrong-creds", "bloodraven", "not-the-password-4711").await;
    // A deprecated flag is still accepted (manifests that set it keep
    // starting): it does nothing and says so once.
    let deprecated = ["--status-heartbeat-seconds".to_owned(), "2".to_owned()];
    let operator = Operator::start_with(&cluster, &ns, &ns.name, "op", LeaderTimings::default(), &deprecated).await;
    let warnings = || operator.log().matches("--status-heartbeat-seconds is deprecated").count();
    wait_for("the deprecation warning", T, || async {
        if warnings() > 0 { Ok(()) } else { Err(format!("log:\n{}", operator.log_tail())) }
    })
    .await;
    let label = &ns.name;

    let good = format!("{}-good", ns.name);
    create_group(&cluster, &group(&good, label, pair.sites(&ns.name, "site-creds"), "iad")).await;

    let no_secret = format!("{}-nosecret", ns.name);
    create_group(&cluster, &group(&no_secret, label, pair.sites(&ns.name, "missing-secret"), "iad")).await;

    let bad_password = format!("{}-badpw", ns.name);
    create_group(&cluster, &group(&bad_password, label, pair.sites(&ns.name, "wrong-creds"), "iad")).await;

    let elsewhere = format!("{}-elsewhere", ns.name);
    let mut sites = pair.sites("kube-system", "site-creds");
    sites[0].credentials_secret_ref.namespace = "kube-system".into();
    create_group(&cluster, &group(&elsewhere, label, sites, "iad")).await;

    let bad_host = format!("{}-badhost", ns.name);
    let mut sites = pair.sites(&ns.name, "site-creds");
    sites[1].host = "127.0.0.1".into();
    sites[1].port = bloodraven_e2e::free_port(); // nothing listens there
    create_group(&cluster, &group(&bad_host, label, sites, "iad")).await;

    let s = wait_status(&cluster, &no_secret, "CredentialsUnavailable", T, |s| {
        has_condition(s, "Degraded", "True", Some("CredentialsUnavailable"))
    })
    .await;
    let msg = &s.conditions.iter().find(|c| c.type_ == "Degraded").unwrap().message;
    assert!(msg.contains(&format!("{}/missing-secret", ns.name)) && msg.contains("not found"), "{msg}");
    has_condition(&s, "Ready", "False", Some("CredentialsUnavailable")).unwrap();
    assert_eq!(s.topology_generation, None);
    wait_event(&cluster, &no_secret, "CredentialsUnavailable").await;

    let s = wait_status(&cluster, &elsewhere, "a Secret outside the credentials namespace", T, |s| {
        has_condition(s, "Degraded", "True", Some("CredentialsUnavailable"))
    })
    .await;
    let msg = &s.conditions.iter().find(|c| c.type_ == "Degraded").unwrap().message;
    assert!(msg.contains("outside namespace"), "{msg}");

    let s = wait_status(&cluster, &bad_password, "AuthenticationFailed", T, |s| {
        has_condition(s, "Degraded", "True", Some("AuthenticationFailed"))
    })
    .await;
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(!text.contains("not-the-password-4711"), "a password must never reach status: {text}");
    assert_eq!(s.topology_generation, None);
    let events = bloodraven_e2e::fixtures::group_events(&cluster, &bad_password).await;
    assert!(!serde_json::to_string(&events).unwrap().contains("not-the-password-4711"));
    assert!(!std::fs::read_to_string(&operator.log).unwrap().contains("not-the-password-4711"), "nor a log line");

    let s = wait_status(&cluster, &bad_host, "SiteUnreachable", T, |s| {
        has_condition(s, "Degraded", "True", Some("SiteUnreachable"))
    })
    .await;
    let pdx = s.health.iter().find(|h| h.site == "pdx").unwrap();
    assert!(!pdx.reachable && pdx.message.as_deref().is_some_and(|m| m.contains("connect")), "{pdx:?}");

    // Meanwhile the good group bootstrapped and keeps being probed.
    wait_status(&cluster, &good, "the good group to bootstrap", T, |s| is_ready_at(s, "iad", 1)).await;
    let before = operator.last_probe(&good).await.unwrap();
    operator.wait_probed_after(&good, before + 2.0, T).await;
    assert_eq!(warnings(), 1, "the deprecation warning is logged once, at start");

    // Fixing the Secret fixes the group, with no restart.
    ns.credentials_secret("missing-secret", "bloodraven", OPERATOR_DB_PASSWORD).await;
    wait_status(&cluster, &no_secret, "bootstrap once the Secret exists", T, |s| is_ready_at(s, "iad", 1)).await;
    assert_eq!(operator.plain_status("/healthz").await, Ok(200), "the operator is still up");
    for g in [&good, &no_secret, &bad_password, &bad_host, &elsewhere] {
        cluster.delete_group(g).await;
    }
}

/// A site whose server is older than the operator drives (MariaDB before
/// 10.5, played by MariaDB 10.11 with `--version`: MySQL has no such
/// option, and its version check is the same code) makes the group
/// Degraded with `UnsupportedServerVersion`, and nothing is done to it:
/// the group does not bootstrap on it. The same server reporting its real
/// version is taken up at the next probe.
#[tokio::test]
async fn a_server_older_than_supported_is_reported_and_left_alone() {
    if bloodraven_e2e::sites::Flavor::of_run() != bloodraven_e2e::sites::Flavor::MariaDb {
        eprintln!("MariaDB only: MySQL's version cannot be played");
        return;
    }
    let sc = bloodraven_e2e::fixtures::Scenario::start("oldserver", 1, LeaderTimings::default()).await;
    sc.pair.stop("iad");
    sc.pair.restart_with("iad", false, "--version=10.4.34-MariaDB-old");
    assert_eq!(sc.pair.sql("iad", "SELECT @@version").trim(), "10.4.34-MariaDB-old");
    let name = sc.group("g", "iad").await;
    let s = wait_status(&sc.cluster, &name, "Degraded: unsupported server", T, |s| {
        has_condition(s, "Degraded", "True", Some("UnsupportedServerVersion"))
    })
    .await;
    let message = &bloodraven_e2e::fixtures::condition(&s, "Degraded").unwrap().message;
    assert!(message.contains("MariaDB 10.4.34 is not supported") && message.contains("10.5.0 or later"), "{message}");
    assert_eq!(s.topology_generation, None, "no bootstrap on an unsupported server: {s:?}");
    assert_eq!(sc.pair.sql("pdx", "SELECT @@read_only").trim(), "1", "the other site is left as it was");
    // The real version: taken up.
    sc.pair.stop("iad");
    sc.pair.restart("iad", false);
    wait_status(&sc.cluster, &name, "bootstrap at iad", T, |s| is_ready_at(s, "iad", 1)).await;
    sc.cluster.delete_group(&name).await;
}

/// An operator account without `PROCESS` sees its own sessions only, so a
/// fence would end none of the others'. On MariaDB, where `read_only` does
/// not stop `READ_ONLY ADMIN` accounts, such a fence does not hold: the
/// planned failover fails naming the privilege, and the old primary is writable
/// again. (On MySQL `super_read_only` stops every account, so the fence
/// holds without it.)
#[tokio::test]
async fn a_fence_that_cannot_see_other_sessions_fails_the_planned_failover_on_mariadb() {
    if bloodraven_e2e::sites::Flavor::of_run() != bloodraven_e2e::sites::Flavor::MariaDb {
        eprintln!("MariaDB only: MySQL's fence holds without PROCESS");
        return;
    }
    let sc = bloodraven_e2e::fixtures::Scenario::start("noprocess", 1, LeaderTimings::default()).await;
    let name = sc.bootstrapped_group("g").await;
    sc.pair
        .sql("iad", "SET sql_log_bin=0; REVOKE PROCESS ON *.* FROM 'bloodraven'@'127.0.0.1', 'bloodraven'@'localhost'");
    sc.request_failover(&name, "pdx", "np1").await;
    let s = wait_status(&sc.cluster, &name, "np1 failed: the fence cannot see sessions", T, |s| {
        match &s.planned_failover {
            Some(p) if p.request_id == "np1" && p.phase == "Failed" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let message = s.planned_failover.unwrap().message.unwrap_or_default();
    assert!(message.contains("could not fence iad") && message.contains("PROCESS"), "{message}");
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "no decision");
    sc.pair.wait_read_only("iad", false, T).await;
    sc.pair.sql("iad", "SET sql_log_bin=0; GRANT PROCESS ON *.* TO 'bloodraven'@'127.0.0.1', 'bloodraven'@'localhost'");
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_database_reports_whether_its_group_exists() {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("dbref").await;
    let _operator = Operator::start(&cluster, &ns, &ns.name, "op", LeaderTimings::default()).await;
    let api: Api<MysqlDatabase> = Api::namespaced(cluster.client.clone(), &ns.name);
    let db = MysqlDatabase::new(
        "counter-app",
        MysqlDatabaseSpec {
            failover_group_ref: FailoverGroupRef { name: format!("{}-nope", ns.name) },
            schema: "counter".into(),
            deployment_clients: vec![DeploymentClient {
                namespace: ns.name.clone(),
                service_account: "deployer".into(),
            }],
        },
    );
    api.create(&PostParams::default(), &db).await.unwrap();
    wait_for("GroupNotFound", T, || async {
        let db = api.get("counter-app").await.map_err(|e| e.to_string())?;
        let c = db.status.unwrap_or_default().conditions;
        if c.iter().any(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "GroupNotFound") {
            Ok(())
        } else {
            Err(format!("{c:?}"))
        }
    })
    .await;
}

/// What the CRD schema refuses, checked against the real API server.
#[tokio::test]
async fn the_schema_refuses_malformed_objects() {
    let cluster = Cluster::connect().await;
    let ns = cluster.namespace("schema").await;
    let pair_sites = |ns: &str| {
        let site = |name: &str, port| bloodraven_api::v1alpha1::Site {
            name: name.into(),
            host: "127.0.0.1".into(),
            port,
            credentials_secret_ref: SecretRef { namespace: ns.into(), name: "creds".into() },
        };
        vec![site("iad", 3306), site("pdx", 3307)]
    };
    let refused = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("unexpected error {other}"),
    };
    let groups = cluster.groups();
    let pp = PostParams::default();

    let g = group(&format!("{}-a", ns.name), &ns.name, pair_sites(&ns.name), "sfo");
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(msg.contains("initialActiveSite must name one of spec.sites"), "{msg}");

    let mut g = group(&format!("{}-b", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    g.spec.sites[1].port = 0;
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert!(code == 422 && msg.contains("port"), "{code} {msg}");

    let mut g = group(&format!("{}-c", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    g.spec.sites[1].name = "iad".into();
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert!(code == 422 && msg.contains("Duplicate"), "{code} {msg}");

    let mut g = group(&format!("{}-d", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    g.spec.sites.truncate(1);
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert!(code == 422 && msg.contains("sites"), "{code} {msg}");

    let mut g = group(&format!("{}-e", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    g.spec.failover.probe_interval_seconds = 0;
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert!(code == 422 && msg.contains("probeIntervalSeconds"), "{code} {msg}");

    // The semi-sync fallback and the server's timeout, out of range.
    for (suffix, fallback, server, field) in [
        ("e1", 0, 0, "semiSyncFallbackSeconds"),
        ("e2", 3601, 0, "semiSyncFallbackSeconds"),
        ("e3", 10, 86_401, "semiSyncServerTimeoutSeconds"),
    ] {
        let mut g = group(&format!("{}-{suffix}", ns.name), &ns.name, pair_sites(&ns.name), "iad");
        g.spec.failover.semi_sync_fallback_seconds = fallback;
        g.spec.failover.semi_sync_server_timeout_seconds = server;
        let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
        assert!(code == 422 && msg.contains(field), "{code} {msg}");
    }

    let mut g = group(&format!("{}-f", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    g.spec.sites[0].name = "IAD_1".into();
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert!(code == 422 && msg.contains("name"), "{code} {msg}");

    let mut g = group(&format!("{}-g", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    g.spec.sites[0].host = "127.0.0.1:3306".into();
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert!(code == 422 && msg.contains("host"), "host:port is not a host: {code} {msg}");

    let mut g = group(&format!("{}-h", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    g.spec.sites[1].port = 3306;
    let (code, msg) = refused(groups.create(&pp, &g).await.unwrap_err());
    assert!(code == 422 && msg.contains("different servers"), "{code} {msg}");

    // Site names are immutable once the group exists.
    let g = group(&format!("{}-j", ns.name), &ns.name, pair_sites(&ns.name), "iad");
    groups.create(&pp, &g).await.unwrap();
    let rename = serde_json::json!([{"op": "replace", "path": "/spec/sites/0/name", "value": "nyc"},
                                    {"op": "replace", "path": "/spec/initialActiveSite", "value": "nyc"}]);
    let err = groups
        .patch(
            g.metadata.name.as_deref().unwrap(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::<()>::Json(serde_json::from_value(rename).unwrap()),
        )
        .await
        .unwrap_err();
    let (code, msg) = refused(err);
    assert!(code == 422 && msg.contains("site names cannot change"), "{code} {msg}");
    cluster.delete_group(g.metadata.name.as_deref().unwrap()).await;

    let dbs: Api<MysqlDatabase> = Api::namespaced(cluster.client.clone(), &ns.name);
    let client =
        |namespace: &str, sa: &str| DeploymentClient { namespace: namespace.into(), service_account: sa.into() };
    let mut db = MysqlDatabase::new(
        "twice",
        MysqlDatabaseSpec {
            failover_group_ref: FailoverGroupRef { name: "g".into() },
            schema: "counter".into(),
            deployment_clients: vec![client("ci", "a"), client("ci", "b")],
        },
    );
    let (code, msg) = refused(dbs.create(&pp, &db).await.unwrap_err());
    assert!(code == 422 && msg.contains("Duplicate"), "one pair per namespace: {code} {msg}");

    db.spec.deployment_clients = vec![client("ci", "a")];
    db.spec.schema = "drop table;".into();
    let (code, msg) = refused(dbs.create(&pp, &db).await.unwrap_err());
    assert!(code == 422 && msg.contains("schema"), "{code} {msg}");

    db.spec.schema = "Information_Schema".into();
    let (code, msg) = refused(dbs.create(&pp, &db).await.unwrap_err());
    assert!(code == 422 && msg.contains("spec.schema") && msg.contains("(not)"), "a system schema: {code} {msg}");

    db.metadata = ObjectMeta { name: Some("fine".into()), ..ObjectMeta::default() };
    db.spec.schema = "counter".into();
    dbs.create(&pp, &db).await.expect("a well-formed database is accepted");
}
