//! Injection: an annotated Job created through the real API
//! server comes back with the sidecar and, on the local node, runs with the
//! sidecar holding both leases; a copy of an injected Job is injected once;
//! each refusal says what to fix; un-annotated Jobs are left alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::pods::{image, job_pods, logs, wait_job_end};
use bloodraven_e2e::webhook::refusal;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(180);

use bloodraven_e2e::webhook::{InjectEnv as Env, inject_env as setup};

/// The sidecar's final record (its last JSON log line naming itself).
fn final_record(sidecar_log: &str) -> Value {
    sidecar_log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["record"] == "bloodraven-sidecar")
        .unwrap_or_else(|| panic!("no final record in:\n{sidecar_log}"))
}

/// A migration Job as a team writes it: annotated, one container with a command.
fn job(env: &Env, name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {
            "bloodraven.shipstream.io/inject": "true",
            "bloodraven.shipstream.io/group": env.pods.group,
            "bloodraven.shipstream.io/instance": "counter-app",
            "bloodraven.shipstream.io/ttl": "30"}},
        "spec": {"template": {"spec": {
            "serviceAccountName": "deployer",
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 15,
            // The restricted Pod Security profile, as the playground's Job has it.
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "migrate", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", script],
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        }}},
    })
}

async fn create(env: &Env, manifest: &Value, dry_run: bool) -> Result<Job, kube::Error> {
    let pp = PostParams { dry_run, ..PostParams::default() };
    Api::<Job>::namespaced(env.pods.cluster.client.clone(), &env.pods.ns.name)
        .create(&pp, &serde_json::from_value(manifest.clone()).unwrap())
        .await
}

fn init_names(job: &Job) -> Vec<String> {
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.init_containers.iter().flatten().map(|c| c.name.clone()).collect()
}

fn command(job: &Job) -> Vec<String> {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].command.clone().unwrap_or_default()
}

#[tokio::test]
async fn an_annotated_job_is_injected_and_runs_holding_both_leases() {
    let env = setup("whinj-run").await;
    let script = "/run/bloodraven/bin/bloodraven-sidecar permit && echo MIGRATING && sleep 2";
    let created = create(&env, &job(&env, "migrate", script), false).await.unwrap();
    assert_eq!(init_names(&created), ["bloodraven-sidecar"]);
    assert_eq!(&command(&created)[..4], ["/run/bloodraven/bin/bloodraven-sidecar", "exec", "--", "/bin/sh"]);
    let spec = created.spec.as_ref().unwrap();
    assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(0), Some(3600)));

    let (_, ended, reason) = wait_job_end(&env.pods.cluster, &env.pods.ns.name, "migrate", T).await;
    let pods = job_pods(&env.pods.cluster, &env.pods.ns.name, "migrate").await;
    let pod = pods[0].clone();
    let pod_name = pod.metadata.name.clone().unwrap();
    let sidecar_log = logs(&env.pods.cluster, &env.pods.ns.name, &pod_name, "bloodraven-sidecar").await;
    assert_eq!(ended, "Complete", "{reason}; sidecar log:\n{sidecar_log}");
    assert!(logs(&env.pods.cluster, &env.pods.ns.name, &pod_name, "migrate").await.contains("MIGRATING"));
    // The sidecar's final record: both leases were held (the migration was
    // permitted), the result recorded on the Lease, the operationId the Job's UID.
    let record = final_record(&sidecar_log);
    assert_eq!(record["result"], "succeeded", "{record}");
    assert_eq!(record["recordedOnLease"], true, "{record}");
    assert_eq!(record["operationId"].as_str(), created.metadata.uid.as_deref(), "{record}");
}

/// Schema `app` and account `migrator` (with `password`) on the iad site,
/// Secret `db` holding its URL, and ConfigMap `revisions` holding
/// `revisions` (file name → SQL), in the test's namespace.
async fn migration_database(env: &Env, password: &str, revisions: serde_json::Value) {
    let (cluster, ns, pair) = (&env.pods.cluster, &env.pods.ns.name, &env.pods.pair);
    pair.sql(
        "iad",
        &format!(
            "CREATE DATABASE app; CREATE USER 'migrator'@'%' IDENTIFIED BY '{password}'; \
             GRANT ALL ON app.* TO 'migrator'@'%'; GRANT PROCESS ON *.* TO 'migrator'@'%';"
        ),
    );
    let url = format!("mysql://migrator:{password}@{}:{}/app", pair.iad_host, pair.iad_port);
    bloodraven_e2e::pods::apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(cluster.client.clone(), ns),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "stringData": {"url": url}}),
    )
    .await;
    bloodraven_e2e::pods::apply(
        &Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(cluster.client.clone(), ns),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "revisions"}, "data": revisions}),
    )
    .await;
}

/// The runner beside the sidecar: an injected Job whose migration image has
/// only a shell and the revisions runs `bloodraven-migrate` from the shared
/// volume, behind the sidecar's leases, against the real MariaDB site.
#[tokio::test]
async fn an_injected_job_runs_bloodraven_migrate_from_the_shared_volume_behind_the_leases() {
    let env = setup("whinj-mig").await;
    let (cluster, ns) = (&env.pods.cluster, &env.pods.ns.name);
    let pair = &env.pods.pair;
    migration_database(
        &env,
        "mig-pw-1",
        json!({"V1__orders.sql": "CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL);",
               "V2__rows.sql": "INSERT INTO orders (id, v) VALUES (1, 10), (2, 20);"}),
    )
    .await;
    let mut manifest =
        job(&env, "runner", "/run/bloodraven/bin/bloodraven-migrate apply --dir /migrations --log-format json");
    manifest["metadata"]["annotations"]["bloodraven.shipstream.io/ddl-boundary"] = json!("reported");
    let pod = &mut manifest["spec"]["template"]["spec"];
    pod["volumes"] = json!([{"name": "revisions", "configMap": {"name": "revisions"}}]);
    pod["containers"][0]["volumeMounts"] = json!([{"name": "revisions", "mountPath": "/migrations"}]);
    pod["containers"][0]["env"] =
        json!([{"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}}]);
    create(&env, &manifest, false).await.unwrap();
    let (_, ended, reason) = wait_job_end(cluster, ns, "runner", T).await;
    let pod_name = job_pods(cluster, ns, "runner").await[0].metadata.name.clone().unwrap();
    let runner_log = logs(cluster, ns, &pod_name, "migrate").await;
    let sidecar_log = logs(cluster, ns, &pod_name, "bloodraven-sidecar").await;
    assert_eq!(ended, "Complete", "{reason}\nrunner:\n{runner_log}\nsidecar:\n{sidecar_log}");
    assert!(!runner_log.contains("starting alone"), "behind the sidecar, not alone:\n{runner_log}");
    assert!(!runner_log.contains("mig-pw-1") && !sidecar_log.contains("mig-pw-1"), "no password in a log");
    let applied =
        pair.sql("iad", "SELECT GROUP_CONCAT(version, ':', state ORDER BY version) FROM app.bloodraven_schema_history");
    assert_eq!(applied.trim(), "1:applied,2:applied", "{runner_log}");
    assert_eq!(pair.sql("iad", "SELECT SUM(v) FROM app.orders").trim(), "30");
    // The sidecar's final record: the runner reported its outcome and the
    // DDL boundary (V1's DDL finished), and it reached the Lease.
    let record = final_record(&sidecar_log);
    assert_eq!(record["result"], "succeeded", "{record}");
    assert_eq!(record["outcome"], "succeeded", "the runner reported its outcome: {record}");
    assert_eq!(record["ddlState"], "completed", "{record}");
    assert_eq!(record["recordedOnLease"], true, "{record}");
}

#[tokio::test]
async fn injection_is_idempotent_refusals_say_what_to_fix_and_plain_jobs_are_left_alone() {
    let env = setup("whinj-api").await;
    let injected = create(&env, &job(&env, "once", "true"), false).await.unwrap();
    // A copy of an injected Job (as `kubectl get -o yaml`, renamed): one sidecar, wrapped once.
    let mut copy = serde_json::to_value(&injected).unwrap();
    copy["metadata"] = json!({"name": "copy", "annotations": injected.metadata.annotations});
    copy["spec"].as_object_mut().unwrap().remove("selector");
    copy["spec"]["template"]["metadata"] = json!({});
    copy.as_object_mut().unwrap().remove("status");
    let again = create(&env, &copy, true).await.unwrap();
    assert_eq!(init_names(&again), ["bloodraven-sidecar"]);
    assert_eq!(command(&again).iter().filter(|c| c.as_str() == "exec").count(), 1, "{:?}", command(&again));

    // Refusals, each through the API server.
    let mut no_instance = job(&env, "x1", "true");
    no_instance["metadata"]["annotations"].as_object_mut().unwrap().remove("bloodraven.shipstream.io/instance");
    let m = refusal(create(&env, &no_instance, true).await);
    assert!(m.contains("bloodraven.shipstream.io/instance annotation"), "{m}");
    let mut other_sa = job(&env, "x2", "true");
    other_sa["spec"]["template"]["spec"]["serviceAccountName"] = json!("intruder");
    let m = refusal(create(&env, &other_sa, true).await);
    assert!(m.contains("does not list this Job's ServiceAccount") && m.contains("intruder"), "{m}");
    let mut ignore = job(&env, "x3", "true");
    ignore["spec"]["podFailurePolicy"] =
        json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});
    let m = refusal(create(&env, &ignore, true).await);
    assert!(m.contains("action Ignore"), "{m}");
    let mut unknown_group = job(&env, "x4", "true");
    unknown_group["metadata"]["annotations"]["bloodraven.shipstream.io/group"] = json!("no-such-group");
    let m = refusal(create(&env, &unknown_group, true).await);
    assert!(m.contains("no MysqlDatabase named") && m.contains("no-such-group"), "{m}");
    // Another namespace asks for this namespace's instance: the same answer
    // as for a group or an instance that does not exist, naming neither the
    // claim nor its namespace.
    let other = env.pods.cluster.namespace("whinj-other").await;
    let (cluster, op_ns) = (&env.pods.cluster, &env.pods.op_ns.name);
    env.webhook
        .register(cluster, &env.webhook.params(op_ns, &[&env.pods.ns.name, &other.name], &env.pods.ns.name))
        .await;
    let mut stranger = job(&env, "x5", "true");
    stranger["metadata"]["namespace"] = json!(other.name);
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> =
        kube::Api::namespaced(env.pods.cluster.client.clone(), &other.name);
    let dry = kube::api::PostParams { dry_run: true, ..kube::api::PostParams::default() };
    let m = refusal(jobs.create(&dry, &serde_json::from_value(stranger).unwrap()).await);
    // (The test's group is named after its namespace: that name is the
    // requester's own annotation, so it is taken out before looking.)
    let group = format!("{}-g", env.pods.ns.name);
    assert!(m.contains("no MysqlDatabase named") && !m.replace(&group, "").contains(&env.pods.ns.name), "{m}");

    // Without the annotation (or with another value) nothing is added.
    let mut plain = job(&env, "plain", "true");
    plain["metadata"]["annotations"]["bloodraven.shipstream.io/inject"] = json!("false");
    let left = create(&env, &plain, true).await.unwrap();
    assert!(init_names(&left).is_empty());
    assert_eq!(command(&left), ["/bin/sh", "-c", "true"]);
    // The injected Job's Pod runs to completion too (its migration is `true`).
    let (_, ended, reason) = wait_job_end(&env.pods.cluster, &env.pods.ns.name, "once", T).await;
    assert_eq!(ended, "Complete", "{reason}");
}

/// A Job that waits because the group is not stable (here the replica's
/// replication was stopped) says why on its Job, where `kubectl describe
/// job` shows it (a trial saw a Helm hook wait on `423 unstable` with
/// nothing there), and runs once the group is stable again.
#[tokio::test]
async fn a_job_waiting_on_an_unstable_group_says_why_on_its_job() {
    use bloodraven_e2e::fixtures::wait_status;
    let env = setup("whinj-unst").await;
    let (cluster, ns) = (&env.pods.cluster, &env.pods.ns.name);
    env.pods.pair.stop_replica("pdx");
    wait_status(cluster, &env.pods.group, "the group unstable", T, |s| match s.unstable_reason.as_deref() {
        Some("ReplicationNotRunning") => Ok(()),
        other => Err(format!("{other:?}")),
    })
    .await;
    create(&env, &job(&env, "unsteady", "echo MIGRATING"), false).await.unwrap();
    let on_job = bloodraven_e2e::deploy::wait_object_event(cluster, ns, "unsteady", "WaitingForLease").await;
    assert!(
        on_job.contains("is waiting") && on_job.contains("the group is not stable (ReplicationNotRunning)"),
        "{on_job}"
    );
    env.pods.pair.start_replica("pdx");
    let (_, ended, reason) = wait_job_end(cluster, ns, "unsteady", T).await;
    assert_eq!(ended, "Complete", "{reason}");
}

/// A Job that waits for the mutex says who holds it where `kubectl
/// describe` shows it, on its Pod and on the Job (the first Job's
/// operation, its UID), and the wait is not a failure: no failing startup
/// probe, no Warning Events on the waiting Pod. Then it runs.
#[tokio::test]
async fn a_job_waiting_for_the_mutex_names_the_holder_in_its_pod_and_job_events() {
    let env = setup("whinj-wait").await;
    let (cluster, ns) = (&env.pods.cluster, &env.pods.ns.name);
    let first = create(&env, &job(&env, "first", "echo MIGRATING && sleep 25"), false).await.unwrap();
    let first_uid = first.metadata.uid.clone().unwrap();
    bloodraven_e2e::wait_for("the first Job to migrate", T, || async {
        let pods = job_pods(cluster, ns, "first").await;
        let Some(name) = pods.first().and_then(|p| p.metadata.name.clone()) else { return Err("no Pod".to_owned()) };
        let log = logs(cluster, ns, &name, "migrate").await;
        if log.contains("MIGRATING") { Ok(()) } else { Err(log) }
    })
    .await;
    create(&env, &job(&env, "second", "echo MIGRATING"), false).await.unwrap();
    let second_pod = bloodraven_e2e::wait_for("the second Job's Pod", T, || async {
        let pods = job_pods(cluster, ns, "second").await;
        pods.first().and_then(|p| p.metadata.name.clone()).ok_or_else(|| "no Pod".to_owned())
    })
    .await;
    let on_pod = bloodraven_e2e::deploy::wait_object_event(cluster, ns, &second_pod, "WaitingForLease").await;
    assert!(on_pod.contains("is waiting") && on_pod.contains(&first_uid), "{on_pod}");
    // And on the Job itself, where `kubectl describe job` (and so a person
    // whose Helm hook or Argo CD sync seems stuck) reads it: the operator
    // finds the Job from the Pod the sidecar's token is bound to.
    let on_job = bloodraven_e2e::deploy::wait_object_event(cluster, ns, "second", "WaitingForLease").await;
    assert!(
        on_job.contains("is waiting") && on_job.contains("the migration mutex") && on_job.contains(&first_uid),
        "{on_job}"
    );
    // The waiting migration container started (its wrapper waits on the
    // socket) and says whom it waits for.
    let waited = bloodraven_e2e::wait_for("the waiting wrapper to say whom it waits for", T, || async {
        let log = logs(cluster, ns, &second_pod, "migrate").await;
        if log.contains("waiting for the leases") && log.contains(&first_uid) { Ok(log) } else { Err(log) }
    })
    .await;
    assert!(!waited.contains("MIGRATING"), "ran while the first Job held the mutex: {waited}");
    for name in ["first", "second"] {
        let (_, ended, reason) = wait_job_end(cluster, ns, name, T).await;
        assert_eq!(ended, "Complete", "{name}: {reason}");
    }
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cluster.client.clone(), ns);
    let lp = kube::api::ListParams::default().fields(&format!("involvedObject.name={second_pod}"));
    let warnings: Vec<String> = events
        .list(&lp)
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| format!("{}: {}", e.reason.clone().unwrap_or_default(), e.message.clone().unwrap_or_default()))
        .collect();
    assert!(warnings.is_empty(), "the wait showed as failures: {warnings:?}");
}

/// A Pod deleted under a migration that ignores SIGTERM: the wrapper sends
/// SIGTERM and, after the sidecar's grace (10 s), SIGKILL, instead of the
/// migration running for the Pod's whole termination grace period (60 s
/// here).
#[tokio::test]
async fn a_deleted_pod_stops_a_migration_that_ignores_sigterm_after_the_grace() {
    let env = setup("whinj-del").await;
    let (cluster, ns) = (&env.pods.cluster, &env.pods.ns.name);
    let mut manifest = job(&env, "stubborn", "trap '' TERM; echo MIGRATING; while :; do sleep 1; done");
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(60);
    create(&env, &manifest, false).await.unwrap();
    let pod = bloodraven_e2e::wait_for("the migration to run", T, || async {
        let pods = job_pods(cluster, ns, "stubborn").await;
        let Some(name) = pods.first().and_then(|p| p.metadata.name.clone()) else { return Err("no Pod".to_owned()) };
        let log = logs(cluster, ns, &name, "migrate").await;
        if log.contains("MIGRATING") { Ok(name) } else { Err(log) }
    })
    .await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.client.clone(), ns);
    let deleted = std::time::Instant::now();
    pods.delete(&pod, &kube::api::DeleteParams::default()).await.unwrap();
    bloodraven_e2e::wait_for("the migration container to end", T, || async {
        let p = pods.get_opt(&pod).await.map_err(|e| e.to_string())?;
        let Some(p) = p else { return Ok(()) };
        let ended = p
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .iter()
            .any(|c| c.name == "migrate" && c.state.as_ref().is_some_and(|s| s.terminated.is_some()));
        if ended { Ok(()) } else { Err("still running".to_owned()) }
    })
    .await;
    let took = deleted.elapsed();
    eprintln!("figure: Pod deletion → migration container ended: {took:?} (sidecar grace 10 s, Pod grace 60 s)");
    assert!(took < Duration::from_secs(40), "ran on for the Pod's grace period: {took:?}");
}

/// The example chart's migration Job with its inject annotation removed
/// (by hand, or by a tool that strips annotations it does not know): the
/// webhook leaves it alone, so nothing fences it — and the runner, told by
/// the chart's `BLOODRAVEN_MIGRATION_REQUIRE_LEASE=true`, refuses to start
/// (exit 8) instead of migrating alone, before it opens any connection.
/// Without injection nothing installs the runner into the Pod, so this Job
/// runs the one the image ships (the sidecar image's `/bloodraven-migrate`),
/// as an app image that carries its own runner would.
#[tokio::test]
async fn the_chart_job_with_its_inject_annotation_removed_refuses_to_migrate_unfenced() {
    let env = setup("whinj-nolease").await;
    let (cluster, ns) = (&env.pods.cluster, &env.pods.ns.name);
    let pair = &env.pods.pair;
    migration_database(
        &env,
        "nolease-pw-1",
        json!({"V1__orders.sql": "CREATE TABLE orders (id INT PRIMARY KEY, v INT NOT NULL);"}),
    )
    .await;
    // charts/examples/counter-app/templates/migration-job.yaml, rendered,
    // with bloodraven.shipstream.io/inject (and its companions) removed.
    let manifest = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "counter-app-migrate", "annotations": {"helm.sh/hook": "pre-install,pre-upgrade"}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 280, "template": {"spec": {
            "serviceAccountName": "deployer",
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "containers": [{
                "name": "migrate", "image": image("BLOODRAVEN_SIDECAR_IMAGE"), "imagePullPolicy": "IfNotPresent",
                "command": ["/bloodraven-migrate", "apply"],
                "volumeMounts": [
                    {"name": "database-url", "mountPath": "/var/run/secrets/database", "readOnly": true},
                    {"name": "revisions", "mountPath": "/migrations"}],
                "env": [
                    {"name": "BLOODRAVEN_DB_URL_FILE", "value": "/var/run/secrets/database/url"},
                    {"name": "BLOODRAVEN_MIGRATION_DIR", "value": "/migrations"},
                    {"name": "BLOODRAVEN_MIGRATION_LOCK_TIMEOUT", "value": "5s"},
                    {"name": "BLOODRAVEN_MIGRATION_MAX_ATTEMPTS", "value": "8"},
                    {"name": "BLOODRAVEN_LOG_FORMAT", "value": "text"},
                    {"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "value": "true"}],
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
                                    "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
            }],
            "volumes": [
                {"name": "database-url", "secret": {"secretName": "db", "items": [{"key": "url", "path": "url"}]}},
                {"name": "revisions", "configMap": {"name": "revisions"}}],
        }}},
    });
    let created = create(&env, &manifest, false).await.unwrap();
    assert!(init_names(&created).is_empty(), "not annotated: the webhook leaves it alone");
    let (_, ended, reason) = wait_job_end(cluster, ns, "counter-app-migrate", T).await;
    let pod = job_pods(cluster, ns, "counter-app-migrate").await.remove(0);
    let pod_name = pod.metadata.name.clone().unwrap();
    let log = logs(cluster, ns, &pod_name, "migrate").await;
    assert_eq!(ended, "Failed", "{reason}\n{log}");
    let exit_code = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .find(|c| c.name == "migrate")
        .and_then(|c| c.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code));
    assert_eq!(exit_code, Some(bloodraven_e2e::migrate::exit::NO_LEASE), "{log}");
    assert!(log.contains("refusing to start") && log.contains("--require-lease"), "{log}");
    assert!(log.contains("bloodraven.shipstream.io/inject"), "says what is likely missing: {log}");
    assert!(!log.contains("starting alone") && !log.contains("session open"), "{log}");
    assert!(!log.contains("nolease-pw-1"), "{log}");
    let tables = pair.sql(
        "iad",
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' \
         AND TABLE_NAME IN ('orders', 'bloodraven_schema_history')",
    );
    assert_eq!(tables.trim(), "0", "nothing applied, no history table created:\n{log}");

    // The same Job with its annotations back is injected, and keeps one
    // require-lease entry (the chart's; the webhook adds none).
    let mut annotated = manifest.clone();
    annotated["metadata"]["name"] = json!("counter-app-migrate-2");
    annotated["metadata"]["annotations"] = job(&env, "x", "true")["metadata"]["annotations"].clone();
    let injected = create(&env, &annotated, true).await.unwrap();
    assert_eq!(init_names(&injected), ["bloodraven-sidecar"]);
    let container = &injected.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
    let entries: Vec<_> = container
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == "BLOODRAVEN_MIGRATION_REQUIRE_LEASE")
        .map(|e| e.value.clone())
        .collect();
    assert_eq!(entries, [Some("true".to_owned())]);
}
