//! Third-party migration tools behind the deploy-lease sidecar, for real:
//! Flyway's command line and golang-migrate, each in an image of its own
//! (`hack/tool-images.sh`: the tool as released, nothing of Bloodraven's
//! inside, run as 65532 with a read-only root), as the migration container
//! of a Job annotated as a team writes it, which the webhook injects, against
//! the run's sites. Revisions come from a ConfigMap mounted at `/migrations`
//! (one image per tool, any revisions). For each tool:
//! - a run applies its revisions behind both leases, the sidecar's final
//!   record says `succeeded` / `completed`, and a second Job for the same
//!   instance waits on the mutex while the first holds it, then applies
//!   nothing twice (the history table and a side-effect table);
//! - a failing revision fails the Job with the sidecar's 93 (the default
//!   `at-start` boundary: a tool that does not report is in DDL from its
//!   start), the tool's own error in the migration container's log, and the
//!   history table showing where it stopped (Flyway's failed row,
//!   golang-migrate's dirty version);
//! - a revocation while a revision sleeps in the database sends the tool
//!   SIGTERM (which ends it before the grace, no SIGKILL), and the Job
//!   fails with the fence's 93; the history table shows the revision
//!   unrecorded (Flyway) or dirty (golang-migrate);
//! - in a CI runner (a Pod running `bloodraven-sidecar run --ddl-boundary
//!   reported --db-url-file -- TOOL…`, the sidecar copied out of its image),
//!   and in an injected Job whose annotation `db-url-secret` hands the
//!   sidecar the database's URL, the sidecar's fingerprint of the schema
//!   and the history tables gives the boundary: a tool that refuses before
//!   it writes anything ends with its own exit 1, `failed`; one that fails
//!   after writing to its history table is 93.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::process::Command;
use std::time::Duration;

use bloodraven_e2e::pods::{apply, job_pods, logs, wait_job_end};
use bloodraven_e2e::sites::Flavor;
use bloodraven_e2e::webhook::{InjectEnv as Env, inject_env};
use bloodraven_e2e::{e2e_dir, repo_root, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(180);
/// The sidecar's exit code for a run that ended (or was fenced) at or after
/// its DDL boundary (docs/sidecar.md).
const SCHEMA_VERIFICATION_REQUIRED: i32 = 93;
const PASSWORD: &str = "tool-migrator-pw-3";
/// The schema every test migrates.
const SCHEMA: &str = "app";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Flyway,
    GolangMigrate,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Flyway => "flyway",
            Tool::GolangMigrate => "golang-migrate",
        }
    }

    /// Revision `n`'s file name in the tool's convention.
    fn file(self, n: u32, description: &str) -> String {
        match self {
            Tool::Flyway => format!("V{n}__{description}.sql"),
            Tool::GolangMigrate => format!("{n}_{description}.up.sql"),
        }
    }

    /// The image, built by `hack/tool-images.sh` and imported into the
    /// run's node (cached: a second call builds nothing).
    fn image(self) -> String {
        let out = Command::new(repo_root().join("hack/tool-images.sh"))
            .arg("import")
            .arg(e2e_dir().join("control-plane"))
            .arg(self.name())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success(),
            "hack/tool-images.sh import {} failed: {stdout}\n{}",
            self.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// The migration container: the tool's own command line, its database
    /// settings from Secret `db`, the revisions from ConfigMap `revisions`.
    fn container(self, image: &str) -> Value {
        let secret = |key: &str| json!({"secretKeyRef": {"name": "db", "key": key}});
        let (command, env) = match self {
            // Flyway reads its settings from FLYWAY_* variables: the
            // password never reaches a command line.
            Tool::Flyway => (
                self.command(),
                json!([
                    {"name": "FLYWAY_URL", "valueFrom": secret("jdbc-url")},
                    {"name": "FLYWAY_USER", "value": "migrator"},
                    {"name": "FLYWAY_PASSWORD", "valueFrom": secret("password")},
                    {"name": "FLYWAY_LOCATIONS", "value": "filesystem:/migrations"},
                ]),
            ),
            // golang-migrate takes the URL as a flag only: the kubelet
            // expands $(DATABASE_URL) from the Secret when it starts the
            // container (the Pod's spec holds only the reference).
            Tool::GolangMigrate => {
                (self.command(), json!([{"name": "DATABASE_URL", "valueFrom": secret("migrate-url")}]))
            }
        };
        json!({
            "name": "migrate", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": command, "env": env,
            "volumeMounts": [{"name": "revisions", "mountPath": "/migrations"}],
            // The restricted Pod Security profile, and a read-only root.
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
        })
    }

    /// The tool's command line.
    fn command(self) -> Value {
        match self {
            Tool::Flyway => json!(["/bin/flyway", "migrate"]),
            Tool::GolangMigrate => {
                json!(["/bin/migrate", "-path", "/migrations", "-database", "$(DATABASE_URL)", "up"])
            }
        }
    }

    /// What the history table says, one line: Flyway `version:success,…`
    /// (in order of installation), golang-migrate `version:dirty`.
    fn history(self, env: &Env) -> String {
        let sql = match self {
            Tool::Flyway => format!(
                "SELECT GROUP_CONCAT(version, ':', success ORDER BY installed_rank) FROM {SCHEMA}.flyway_schema_history"
            ),
            Tool::GolangMigrate => format!("SELECT CONCAT(version, ':', dirty) FROM {SCHEMA}.schema_migrations"),
        };
        env.pods.pair.sql("iad", &sql).trim().to_owned()
    }
}

/// Schema [`SCHEMA`] and account `migrator` on the iad site, Secret `db`
/// with the tool's URLs, and ConfigMap `revisions` holding `revisions`
/// (file name, SQL), in the test's namespace.
async fn database(env: &Env, revisions: &[(String, &str)]) {
    let (cluster, ns, pair) = (&env.pods.cluster, &env.pods.ns.name, &env.pods.pair);
    pair.sql(
        "iad",
        &format!(
            "CREATE DATABASE {SCHEMA}; CREATE USER 'migrator'@'%' IDENTIFIED BY '{PASSWORD}'; \
             GRANT ALL ON {SCHEMA}.* TO 'migrator'@'%';"
        ),
    );
    let (host, port) = (&pair.iad_host, pair.iad_port);
    // MySQL 9.7's caching_sha2_password needs TLS or the server's RSA key
    // for a first login: Connector/J uses the site's TLS by default, and may
    // ask for the key; go-sql-driver asks for the key without TLS.
    let jdbc = match Flavor::of_run() {
        Flavor::MariaDb => format!("jdbc:mariadb://{host}:{port}/{SCHEMA}"),
        Flavor::MySql => format!("jdbc:mysql://{host}:{port}/{SCHEMA}?allowPublicKeyRetrieval=true"),
    };
    let migrate = format!("mysql://migrator:{PASSWORD}@tcp({host}:{port})/{SCHEMA}?multiStatements=true");
    // The sidecar's own URL, for `--db-url-file` (mysql_async's form).
    let sidecar = format!("mysql://migrator:{PASSWORD}@{host}:{port}/{SCHEMA}");
    apply(
        &Api::<Secret>::namespaced(cluster.client.clone(), ns),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
               "stringData": {"jdbc-url": jdbc, "password": PASSWORD, "migrate-url": migrate, "sidecar-url": sidecar}}),
    )
    .await;
    revisions_config_map(env, "revisions", revisions).await;
}

/// ConfigMap `name` holding `revisions` (file name, SQL).
async fn revisions_config_map(env: &Env, name: &str, revisions: &[(String, &str)]) {
    let data: serde_json::Map<String, Value> =
        revisions.iter().map(|(file, sql)| (file.clone(), Value::from(*sql))).collect();
    apply(
        &Api::<ConfigMap>::namespaced(env.pods.cluster.client.clone(), &env.pods.ns.name),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}),
    )
    .await;
}

/// A migration Job as a team writes it: annotated for injection (the
/// default `at-start` DDL boundary), the tool as its one container.
async fn create_job(env: &Env, tool: Tool, image: &str, name: &str) -> Job {
    create_job_with(env, tool, image, name, "revisions", &json!({})).await
}

/// [`create_job`] with the revisions of ConfigMap `revisions` and more
/// annotations.
async fn create_job_with(env: &Env, tool: Tool, image: &str, name: &str, revisions: &str, more: &Value) -> Job {
    let mut annotations = json!({
        "bloodraven.shipstream.io/inject": "true",
        "bloodraven.shipstream.io/group": env.pods.group,
        "bloodraven.shipstream.io/instance": "counter-app",
        "bloodraven.shipstream.io/ttl": "30"});
    for (k, v) in more.as_object().into_iter().flatten() {
        annotations[k] = v.clone();
    }
    let manifest = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"template": {"spec": {
            "serviceAccountName": "deployer",
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 15,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [tool.container(image)],
            "volumes": [{"name": "revisions", "configMap": {"name": revisions}}],
        }}},
    });
    Api::<Job>::namespaced(env.pods.cluster.client.clone(), &env.pods.ns.name)
        .create(&PostParams::default(), &serde_json::from_value(manifest).unwrap())
        .await
        .unwrap()
}

/// What a Job left: its Pod, the migration container's log and exit code,
/// and the sidecar's final record (its last JSON line naming itself).
struct Run {
    ended: String,
    pod: Pod,
    tool_log: String,
    sidecar_log: String,
    record: Value,
}

impl Run {
    fn migration_exit_code(&self) -> Option<i32> {
        let statuses = self.pod.status.as_ref()?.container_statuses.as_ref()?;
        Some(statuses.iter().find(|c| c.name == "migrate")?.state.as_ref()?.terminated.as_ref()?.exit_code)
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job {}; migration:\n{}\nsidecar:\n{}", self.ended, self.tool_log, self.sidecar_log)
    }
}

async fn ended(env: &Env, name: &str) -> Run {
    let (cluster, ns) = (&env.pods.cluster, &env.pods.ns.name);
    let (_, ended, reason) = wait_job_end(cluster, ns, name, T).await;
    // The Pod's final status (the container's exit code) may trail the Job's condition.
    let pod = wait_for(&format!("the Pod of {name} to stop"), T, || async {
        let pod = job_pods(cluster, ns, name).await.into_iter().next().ok_or("no Pod")?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" { Ok(pod) } else { Err(phase) }
    })
    .await;
    let pod_name = pod.metadata.name.clone().unwrap();
    let tool_log = logs(cluster, ns, &pod_name, "migrate").await;
    let sidecar_log = logs(cluster, ns, &pod_name, "bloodraven-sidecar").await;
    let record = sidecar_log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["record"] == "bloodraven-sidecar")
        .unwrap_or_else(|| panic!("no final record: {reason}\nsidecar:\n{sidecar_log}\nmigration:\n{tool_log}"));
    Run { ended: format!("{ended} ({reason})"), pod, tool_log, sidecar_log, record }
}

/// Seconds from the wrapper's `migration started` to its `migration ended`
/// (their log lines' timestamps, `…THH:MM:SS.ffffffZ`): how long the tool
/// itself ran, JVM start included. Printed for the record, never asserted.
fn tool_seconds(log: &str) -> Option<f64> {
    let at = |marker: &str| -> Option<f64> {
        let clock = stamp(log, marker)?.split_once('T')?.1.trim_end_matches('Z');
        let mut parts = clock.split(':');
        let (h, m, s) = (
            parts.next()?.parse::<f64>().ok()?,
            parts.next()?.parse::<f64>().ok()?,
            parts.next()?.parse::<f64>().ok()?,
        );
        Some(h * 3600.0 + m * 60.0 + s)
    };
    Some(at("migration ended")? - at("migration started")?)
}

/// The timestamp of the wrapper's first log line holding `marker`.
fn stamp<'a>(log: &'a str, marker: &str) -> Option<&'a str> {
    log.lines().find(|l| l.contains(marker))?.split_whitespace().next()
}

fn print_time(tool: Tool, what: &str, log: &str) {
    match tool_seconds(log) {
        Some(s) => println!("{} {what}: the tool ran {s:.1} s", tool.name()),
        None => println!("{} {what}: no start and end lines in its log", tool.name()),
    }
}

/// Waits until a statement starting with `prefix` runs on iad (the tool is
/// inside that revision).
async fn wait_statement(env: &Env, prefix: &str) {
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '{prefix}%'");
    wait_for(&format!("`{prefix}…` to run on iad"), T, || async {
        let n = env.pods.pair.sql("iad", &sql);
        if n.trim() == "0" { Err("not yet".to_owned()) } else { Ok(()) }
    })
    .await;
}

// ---- a run, and a second Job behind the mutex ----

async fn a_second_job_waits_on_the_mutex_and_applies_nothing_twice(tool: Tool, prefix: &str) {
    let env = inject_env(prefix).await;
    let (cluster, ns, pair) = (&env.pods.cluster, &env.pods.ns.name, &env.pods.pair);
    // The test holds a named lock that revision 3 waits for: the first Job
    // holds the mutex, inside its run, until the test lets it go (however
    // slowly the second Job's Pod starts).
    let mut holder = pair
        .sql_command("iad", "DO GET_LOCK('tools-hold', 10); DO SLEEP(600)")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let holder_id = wait_for("the test to hold its lock", T, || async {
        let id = pair.sql("iad", "SELECT IS_USED_LOCK('tools-hold')").trim().to_owned();
        if id.is_empty() || id == "NULL" { Err(id) } else { Ok(id) }
    })
    .await;
    let revisions = [
        (tool.file(1, "once"), "CREATE TABLE applied_once (n INT NOT NULL);"),
        (tool.file(2, "side_effect"), "INSERT INTO applied_once (n) VALUES (1);"),
        (tool.file(3, "hold"), "DO GET_LOCK('tools-hold', 300);"),
    ];
    database(&env, &revisions).await;
    let image = tool.image();
    let first = create_job(&env, tool, &image, "first").await;
    let first_uid = first.metadata.uid.clone().unwrap();
    wait_statement(&env, "DO GET_LOCK").await;
    create_job(&env, tool, &image, "second").await;
    // The second Job's wrapper waits for the leases, naming the holder.
    wait_for("the second Job to wait on the mutex", T, || async {
        let pod = job_pods(cluster, ns, "second").await.into_iter().next().ok_or("no Pod")?;
        let log = logs(cluster, ns, pod.metadata.name.as_deref().unwrap(), "migrate").await;
        if log.contains("waiting for the leases") && log.contains(&first_uid) { Ok(log) } else { Err(log) }
    })
    .await;
    // Revision 3 goes on once the holder's session is gone.
    pair.sql("iad", &format!("KILL {holder_id}"));
    let _ = holder.kill();
    let _ = holder.wait();
    let run = ended(&env, "first").await;
    print_time(tool, "first Job (3 revisions, one waiting on the test's lock)", &run.tool_log);
    assert!(run.ended.starts_with("Complete"), "{run}");
    assert_eq!(run.migration_exit_code(), Some(0), "{run}");
    // A tool that does not report is in DDL from its start (`at-start`):
    // its success is `completed`, carried to the Lease.
    let r = &run.record;
    assert_eq!((r["result"].as_str(), r["ddlState"].as_str()), (Some("succeeded"), Some("completed")), "{r}");
    assert_eq!(r["recordedOnLease"], true, "{r}");
    assert_eq!(r["operationId"].as_str(), Some(first_uid.as_str()), "{r}");

    let second = ended(&env, "second").await;
    print_time(tool, "second Job (nothing to apply)", &second.tool_log);
    assert!(second.ended.starts_with("Complete"), "{second}");
    assert_eq!(second.record["result"], "succeeded", "{second}");
    // One after the other: the second tool started after the first ended
    // (the wrapper's RFC 3339 timestamps, in UTC, compare as text).
    let (first_end, second_start) =
        (stamp(&run.tool_log, "migration ended"), stamp(&second.tool_log, "migration started"));
    assert!(first_end.is_some() && first_end <= second_start, "{first_end:?} {second_start:?}\n{run}\n{second}");
    // The second run found every revision applied: the tool says so, the
    // history table holds each revision once, the side effect happened once.
    let nothing_to_do = match tool {
        Tool::Flyway => "is up to date. No migration necessary.",
        Tool::GolangMigrate => "no change",
    };
    assert!(second.tool_log.contains(nothing_to_do), "{second}");
    let history = match tool {
        Tool::Flyway => "1:1,2:1,3:1",
        Tool::GolangMigrate => "3:0",
    };
    assert_eq!(tool.history(&env), history);
    assert_eq!(env.pods.pair.sql("iad", &format!("SELECT COUNT(*) FROM {SCHEMA}.applied_once")).trim(), "1");
    assert!(!run.tool_log.contains(PASSWORD) && !run.sidecar_log.contains(PASSWORD), "a password in a log: {run}");
}

#[tokio::test]
async fn flyway_a_second_job_waits_on_the_mutex_and_applies_nothing_twice() {
    a_second_job_waits_on_the_mutex_and_applies_nothing_twice(Tool::Flyway, "tools-fw-mutex").await;
}

#[tokio::test]
async fn golang_migrate_a_second_job_waits_on_the_mutex_and_applies_nothing_twice() {
    a_second_job_waits_on_the_mutex_and_applies_nothing_twice(Tool::GolangMigrate, "tools-gm-mutex").await;
}

// ---- a failing revision ----

async fn a_failing_revision_fails_the_job_with_the_tools_error(tool: Tool, prefix: &str) {
    let env = inject_env(prefix).await;
    let revisions = [
        (tool.file(1, "orders"), "CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL);"),
        (tool.file(2, "broken"), "CREATE TABLE broken (id INT PRIMARY KEY, );"),
    ];
    database(&env, &revisions).await;
    create_job(&env, tool, &tool.image(), "failing").await;
    let run = ended(&env, "failing").await;
    print_time(tool, "failing Job", &run.tool_log);
    assert!(run.ended.starts_with("Failed"), "{run}");
    // The tool's own words, with the server's: the syntax error in revision 2.
    let said = match tool {
        Tool::Flyway => "Migration of schema `app` to version \"2 - broken\" failed",
        Tool::GolangMigrate => "error: migration failed",
    };
    assert!(run.tool_log.contains(said) && run.tool_log.contains("1064"), "{run}");
    // It failed inside its DDL boundary: 93, never a retry, and the record
    // names the tool's own exit code.
    assert_eq!(run.migration_exit_code(), Some(SCHEMA_VERIFICATION_REQUIRED), "{run}");
    let r = &run.record;
    assert_eq!(
        (r["result"].as_str(), r["ddlState"].as_str(), r["exitCode"].as_i64()),
        (Some("schema-verification-required"), Some("started"), Some(93)),
        "{r}"
    );
    assert!(r["message"].as_str().unwrap_or_default().contains("exit code 1"), "{r}");
    // Where the history table says it stopped: revision 2, failed (Flyway's
    // row with success 0: MySQL's DDL is not transactional) or dirty.
    let history = match tool {
        Tool::Flyway => "1:1,2:0",
        Tool::GolangMigrate => "2:1",
    };
    assert_eq!(tool.history(&env), history, "{run}");
}

#[tokio::test]
async fn flyway_a_failing_revision_fails_the_job_with_the_tools_error() {
    a_failing_revision_fails_the_job_with_the_tools_error(Tool::Flyway, "tools-fw-fail").await;
}

#[tokio::test]
async fn golang_migrate_a_failing_revision_fails_the_job_with_the_tools_error() {
    a_failing_revision_fails_the_job_with_the_tools_error(Tool::GolangMigrate, "tools-gm-fail").await;
}

// ---- a revocation mid-run ----

async fn a_revocation_mid_revision_stops_the_tool_with_sigterm(tool: Tool, prefix: &str) {
    let env = inject_env(prefix).await;
    let revisions = [
        (tool.file(1, "orders"), "CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL);"),
        (tool.file(2, "slow"), "DO SLEEP(30);"),
    ];
    database(&env, &revisions).await;
    create_job(&env, tool, &tool.image(), "revoked").await;
    wait_statement(&env, "DO SLEEP").await;
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/revoke-deployment-leases": "now"}}});
    env.pods.cluster.groups().patch(&env.pods.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let run = ended(&env, "revoked").await;
    print_time(tool, "revoked Job (start to its end after SIGTERM)", &run.tool_log);
    assert!(run.ended.starts_with("Failed"), "{run}");
    assert_eq!(run.migration_exit_code(), Some(SCHEMA_VERIFICATION_REQUIRED), "{run}");
    let r = &run.record;
    assert_eq!(
        (r["result"].as_str(), r["fence"].as_str(), r["ddlState"].as_str()),
        (Some("schema-verification-required"), Some("revoked"), Some("started")),
        "{r}"
    );
    // The wrapper's SIGTERM reached the tool and ended it within the grace:
    // the JVM exits 143 on SIGTERM; golang-migrate (which traps only
    // SIGINT) dies of it. No SIGKILL was needed.
    let end = run.tool_log.lines().find(|l| l.contains("migration ended")).unwrap_or_default();
    let by_sigterm = match tool {
        Tool::Flyway => "code=Some(143)",
        Tool::GolangMigrate => "signal=Some(15)",
    };
    assert!(run.tool_log.contains("fencing the migration: SIGTERM now") && end.contains(by_sigterm), "{run}");
    assert!(!run.tool_log.contains("grace over: SIGKILL"), "{run}");
    // Revision 2 never finished: Flyway has no row for it; golang-migrate
    // left it dirty (a person checks the schema, then `migrate force 1`).
    let history = match tool {
        Tool::Flyway => "1:1",
        Tool::GolangMigrate => "2:1",
    };
    assert_eq!(tool.history(&env), history, "{run}");
}

#[tokio::test]
async fn flyway_a_revocation_mid_revision_stops_the_tool_with_sigterm() {
    a_revocation_mid_revision_stops_the_tool_with_sigterm(Tool::Flyway, "tools-fw-revoke").await;
}

#[tokio::test]
async fn golang_migrate_a_revocation_mid_revision_stops_the_tool_with_sigterm() {
    a_revocation_mid_revision_stops_the_tool_with_sigterm(Tool::GolangMigrate, "tools-gm-revoke").await;
}

// ---- in a CI runner: `bloodraven-sidecar run` with the database's fingerprint ----

/// Pod `name` as a CI runner in the cluster runs a tool: the sidecar
/// binary copied out of its image (`bloodraven-sidecar install`) into the
/// tool's container, `bloodraven-sidecar run --ddl-boundary reported
/// --db-url-file` around the tool's own command line, revisions from
/// ConfigMap `revisions`. Returns its exit code, its log and the final record.
async fn ci_run(env: &Env, tool: Tool, image: &str, name: &str, revisions: &str) -> (i32, String, Value) {
    let (cluster, ns) = (&env.pods.cluster, &env.pods.ns.name);
    let mut container = tool.container(image);
    let mut command = vec![
        json!("/opt/bloodraven/bloodraven-sidecar"),
        json!("run"),
        json!("--ddl-boundary=reported"),
        json!("--db-url-file=/db/sidecar-url"),
        json!("--"),
    ];
    command.extend(tool.command().as_array().unwrap().iter().cloned());
    container["command"] = json!(command);
    let settings = [
        ("BLOODRAVEN_URL", format!("https://bloodraven.{}.svc:8443", env.pods.op_ns.name)),
        ("BLOODRAVEN_CA", "/ca/ca.crt".to_owned()),
        ("BLOODRAVEN_GROUP", env.pods.group.clone()),
        ("BLOODRAVEN_INSTANCE", "counter-app".to_owned()),
    ];
    for (k, v) in settings {
        container["env"].as_array_mut().unwrap().push(json!({"name": k, "value": v}));
    }
    container["volumeMounts"] = json!([
        {"name": "revisions", "mountPath": "/migrations"},
        {"name": "bin", "mountPath": "/opt/bloodraven"},
        {"name": "token", "mountPath": "/var/run/secrets/bloodraven"},
        {"name": "ca", "mountPath": "/ca"},
        {"name": "db", "mountPath": "/db"},
        // `run`'s socket, in a private folder under $TMPDIR.
        {"name": "tmp", "mountPath": "/tmp"},
    ]);
    let restricted = container["securityContext"].clone();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "deployer",
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [{
                "name": "install", "image": bloodraven_e2e::pods::image("BLOODRAVEN_SIDECAR_IMAGE"),
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bloodraven-sidecar", "install", "/opt/bloodraven"],
                "volumeMounts": [{"name": "bin", "mountPath": "/opt/bloodraven"}],
                "securityContext": restricted,
            }],
            "containers": [container],
            "volumes": [
                {"name": "revisions", "configMap": {"name": revisions}},
                {"name": "bin", "emptyDir": {}},
                {"name": "tmp", "emptyDir": {}},
                {"name": "token", "projected": {"sources": [{"serviceAccountToken":
                    {"audience": "bloodraven-deploy", "expirationSeconds": 600, "path": "token"}}]}},
                {"name": "ca", "configMap": {"name": "bloodraven-ca"}},
                {"name": "db", "secret": {"secretName": "db", "items": [{"key": "sidecar-url", "path": "sidecar-url"}]}},
            ],
        },
    });
    apply(&Api::<Pod>::namespaced(cluster.client.clone(), ns), pod).await;
    let ended = bloodraven_e2e::pods::wait_pod_end(cluster, ns, name, T).await;
    let log = logs(cluster, ns, name, "migrate").await;
    let code = ended
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().find(|c| c.name == "migrate"))
        .and_then(|c| c.state?.terminated)
        .map_or_else(|| panic!("{name}: no exit code\n{log}"), |t| t.exit_code);
    let record = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["record"] == "bloodraven-sidecar")
        .unwrap_or_else(|| panic!("{name}: no final record\n{log}"));
    print_time(tool, &format!("CI runner, Pod {name}"), &log);
    (code, log, record)
}

/// An injected Job whose sidecar reads the database too (annotation
/// `db-url-secret`: the Secret's `sidecar-url` mounted in the sidecar only);
/// returns what [`ci_run`] returns: the migration container's exit code,
/// the logs, the sidecar's final record.
async fn injected_run(env: &Env, tool: Tool, image: &str, name: &str, revisions: &str) -> (i32, String, Value) {
    let more = json!({"bloodraven.shipstream.io/db-url-secret": "db/sidecar-url"});
    create_job_with(env, tool, image, name, revisions, &more).await;
    let run = ended(env, name).await;
    let code = run.migration_exit_code().unwrap_or_else(|| panic!("{name}: no exit code\n{run}"));
    let reads = ["\"db_detection\":true", "db_detection=true"].iter().any(|m| run.sidecar_log.contains(m));
    assert!(reads, "the sidecar reads the database:\n{run}");
    assert!(!run.sidecar_log.contains(PASSWORD) && !run.tool_log.contains(PASSWORD), "{run}");
    print_time(tool, &format!("injected Job {name}"), &run.tool_log);
    (code, format!("{}\n{}", run.tool_log, run.sidecar_log), run.record)
}

/// Where the sidecar runs: beside the tool in a CI runner's Pod
/// (`bloodraven-sidecar run`), or injected into the tool's Job.
#[derive(Clone, Copy, Debug)]
enum Runner {
    Ci,
    Injected,
}

async fn the_history_table_gives_the_ddl_boundary(tool: Tool, runner: Runner, prefix: &str) {
    let env = inject_env(prefix).await;
    let run = |name: &'static str, revisions: &'static str| {
        let (env, image) = (&env, tool.image());
        async move {
            match runner {
                Runner::Ci => ci_run(env, tool, &image, name, revisions).await,
                Runner::Injected => injected_run(env, tool, &image, name, revisions).await,
            }
        }
    };
    let v1 = (tool.file(1, "orders"), "CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL);");
    database(&env, std::slice::from_ref(&v1)).await;
    // Applied: the tool created its history table and wrote revision 1.
    let (code, log, r) = run("applies", "revisions").await;
    assert_eq!(code, 0, "{log}");
    assert_eq!((r["result"].as_str(), r["ddlState"].as_str()), (Some("succeeded"), Some("completed")), "{r}");
    let applied = match tool {
        Tool::Flyway => "1:1",
        Tool::GolangMigrate => "1:0",
    };
    assert_eq!(tool.history(&env), applied);

    // The tool refuses before it touches anything (Flyway: revision 1 was
    // edited after it was applied; golang-migrate: the applied revision's
    // file is missing): neither the schema nor the history table changed,
    // so the run never reached its DDL: the tool's own exit code, `failed`.
    let refused = match tool {
        Tool::Flyway => {
            vec![(tool.file(1, "orders"), "CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL, note TEXT);")]
        }
        Tool::GolangMigrate => vec![(tool.file(2, "notes"), "CREATE TABLE notes (id INT PRIMARY KEY);")],
    };
    revisions_config_map(&env, "refused", &refused).await;
    let (code, log, r) = run("refuses", "refused").await;
    let said = match tool {
        Tool::Flyway => "Migration checksum mismatch for migration version 1",
        Tool::GolangMigrate => "no migration found for version 1",
    };
    assert!(log.contains(said), "{log}");
    assert_eq!(code, 1, "{log}");
    assert_eq!(
        (r["result"].as_str(), r["ddlState"].as_str(), r["exitCode"].as_i64()),
        (Some("failed"), Some("failed"), Some(1)),
        "{r}"
    );
    assert_eq!(tool.history(&env), applied, "nothing changed");

    // A revision that fails after the tool wrote to its history table
    // (Flyway's failed row, golang-migrate's dirty version): DDL started, 93.
    let broken = [v1.clone(), (tool.file(2, "broken"), "CREATE TABLE broken (id INT PRIMARY KEY, );")];
    revisions_config_map(&env, "broken", &broken).await;
    let (code, log, r) = run("breaks", "broken").await;
    assert!(log.contains("1064"), "{log}");
    assert_eq!(code, SCHEMA_VERIFICATION_REQUIRED, "{log}");
    assert_eq!(
        (r["result"].as_str(), r["ddlState"].as_str()),
        (Some("schema-verification-required"), Some("started")),
        "{r}"
    );
    let history = match tool {
        Tool::Flyway => "1:1,2:0",
        Tool::GolangMigrate => "2:1",
    };
    assert_eq!(tool.history(&env), history, "{log}");
}

#[tokio::test]
async fn flyway_in_a_ci_runner_the_history_table_gives_the_ddl_boundary() {
    the_history_table_gives_the_ddl_boundary(Tool::Flyway, Runner::Ci, "tools-fw-ci").await;
}

#[tokio::test]
async fn golang_migrate_in_a_ci_runner_the_history_table_gives_the_ddl_boundary() {
    the_history_table_gives_the_ddl_boundary(Tool::GolangMigrate, Runner::Ci, "tools-gm-ci").await;
}

#[tokio::test]
async fn flyway_in_an_injected_job_the_history_table_gives_the_ddl_boundary() {
    the_history_table_gives_the_ddl_boundary(Tool::Flyway, Runner::Injected, "tools-fw-job").await;
}

#[tokio::test]
async fn golang_migrate_in_an_injected_job_the_history_table_gives_the_ddl_boundary() {
    the_history_table_gives_the_ddl_boundary(Tool::GolangMigrate, Runner::Injected, "tools-gm-job").await;
}
