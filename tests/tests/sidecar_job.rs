//! The sidecar in a real Job Pod on the run's node: `bloodraven-sidecar hold`
//! as a native sidecar (startup probe `probe`), the migration container's
//! entrypoint the `exec` wrapper (installed from the sidecar image into the
//! shared emptyDir), the operator as a Pod behind `bloodraven.<its namespace>.svc`.
//! A migration Job completes and its record reaches the sidecar's
//! termination message; a revoked Job whose migration traps SIGTERM and
//! exits 0 still fails; a Job that cannot get the mutex never starts its
//! migration; `kill -9` of the sidecar in the Pod stops the migration while
//! the lease lives, the mutex stays held until the migration container has
//! exited (then lapses by TTL), and the Job fails at once rather than at its
//! deadline; SIGSTOP of the sidecar past the TTL lets no migration step run
//! after the deadline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::pods::{apply, image, job_pods, logs, wait_job_end};
use bloodraven_e2e::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(180);
const SIDECAR_EXIT_FENCED_IN_DDL: i32 = 93;

type Env = bloodraven_e2e::pods::PodScenario;

async fn setup(prefix: &str) -> Env {
    Env::start(prefix).await
}

/// A migration Job as the webhook will shape it: `install` copies the
/// sidecar binary into the shared emptyDir; `sidecar` holds the leases
/// (native sidecar, startup probe); `migration` runs `script` through the
/// wrapper, as another user than the sidecar.
fn job(env: &Env, name: &str, script: &str, sidecar_env: &[(&str, &str)], deadline: u32) -> serde_json::Value {
    let sidecar_image = image("BLOODRAVEN_SIDECAR_IMAGE");
    let restricted = json!({"runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}});
    let mut envs = vec![
        json!({"name": "BLOODRAVEN_URL", "value": format!("https://bloodraven.{}.svc:8443", env.op_ns.name)}),
        json!({"name": "BLOODRAVEN_CA", "value": "/ca/ca.crt"}),
        json!({"name": "BLOODRAVEN_TOKEN_FILE", "value": "/var/run/secrets/bloodraven/token"}),
        json!({"name": "BLOODRAVEN_GROUP", "value": env.group}),
        json!({"name": "BLOODRAVEN_INSTANCE", "value": "counter-app"}),
        json!({"name": "BLOODRAVEN_JOB_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}}),
        json!({"name": "BLOODRAVEN_TTL", "value": "15"}),
        json!({"name": "BLOODRAVEN_GRACE", "value": "3"}),
        json!({"name": "BLOODRAVEN_REQUEST_TIMEOUT", "value": "2"}),
        json!({"name": "BLOODRAVEN_LOG_FORMAT", "value": "json"}),
    ];
    envs.extend(sidecar_env.iter().map(|(k, v)| json!({"name": k, "value": v})));
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "template": {"spec": {
                "serviceAccountName": "deployer",
                "automountServiceAccountToken": false,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 15,
                "initContainers": [
                    {"name": "install", "image": sidecar_image, "imagePullPolicy": "IfNotPresent",
                     "args": ["install", "/run/bloodraven/bin"], "securityContext": restricted,
                     "volumeMounts": [{"name": "run", "mountPath": "/run/bloodraven"}]},
                    {"name": "sidecar", "image": sidecar_image, "imagePullPolicy": "IfNotPresent", "restartPolicy": "Always",
                     "args": ["hold"], "env": envs, "securityContext": restricted,
                     "startupProbe": {"exec": {"command": ["/bloodraven-sidecar", "probe"]}, "periodSeconds": 1, "failureThreshold": 600},
                     "volumeMounts": [{"name": "run", "mountPath": "/run/bloodraven"},
                                      {"name": "token", "mountPath": "/var/run/secrets/bloodraven", "readOnly": true},
                                      {"name": "ca", "mountPath": "/ca", "readOnly": true}]},
                ],
                "containers": [{
                    "name": "migration", "image": image("BLOODRAVEN_TOOLS_IMAGE"), "imagePullPolicy": "IfNotPresent",
                    "command": ["/run/bloodraven/bin/bloodraven-sidecar", "exec", "--", "/bin/sh", "-c", script],
                    "env": [{"name": "S", "value": "/run/bloodraven/bin/bloodraven-sidecar"}],
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "run", "mountPath": "/run/bloodraven"}],
                }],
                "volumes": [
                    {"name": "run", "emptyDir": {}},
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"audience": "bloodraven-deploy", "expirationSeconds": 600, "path": "token"}}]}},
                    {"name": "ca", "configMap": {"name": "bloodraven-ca"}},
                ],
            }},
        },
    })
}

async fn start(env: &Env, manifest: serde_json::Value) {
    apply(&Api::<Job>::namespaced(env.cluster.client.clone(), &env.ns.name), manifest).await;
}

fn terminated(pod: &Pod, container: &str, init: bool) -> Option<(i32, String)> {
    let s = pod.status.as_ref()?;
    let list = if init { s.init_container_statuses.as_ref()? } else { s.container_statuses.as_ref()? };
    let t = list.iter().find(|c| c.name == container)?.state.as_ref()?.terminated.clone()?;
    Some((t.exit_code, t.message.unwrap_or_default()))
}

/// The sidecar's final record (its termination message), once it stopped.
async fn sidecar_record(env: &Env, job: &str) -> (Pod, serde_json::Value) {
    wait_for(&format!("the sidecar of {job} to stop with its record"), T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, job).await;
        let pod = pods.first().ok_or("no Pod")?.clone();
        match terminated(&pod, "sidecar", true) {
            Some((_, msg)) if !msg.is_empty() => {
                let record: serde_json::Value = serde_json::from_str(&msg).map_err(|e| format!("{e}: {msg}"))?;
                Ok((pod, record))
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn a_migration_job_holds_both_leases_completes_and_records_its_result() {
    let env = setup("scjob-ok").await;
    let script = "$S permit && $S mark ddl-started --revision 7 && sleep 2 && $S mark ddl-finished --revision 7 && $S mark outcome succeeded --revision 7";
    start(&env, job(&env, "migrate", script, &[("BLOODRAVEN_DDL_BOUNDARY", "reported")], 150)).await;
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "migrate", T).await;
    let pods = job_pods(&env.cluster, &env.ns.name, "migrate").await;
    let pod_name = pods[0].metadata.name.clone().unwrap();
    assert_eq!(
        ended,
        "Complete",
        "{reason}; sidecar log:\n{}",
        logs(&env.cluster, &env.ns.name, &pod_name, "sidecar").await
    );
    let (pod, record) = sidecar_record(&env, "migrate").await;
    assert_eq!(terminated(&pod, "migration", false).map(|t| t.0), Some(0));
    assert_eq!(record["result"], "succeeded", "{record}");
    assert_eq!(record["recordedOnLease"], true, "{record}");
    assert_eq!((record["ddlState"].as_str(), record["revision"].as_str()), (Some("completed"), Some("7")), "{record}");
    // The operationId is the Job's UID.
    let uid = pod.metadata.labels.as_ref().and_then(|l| l.get("batch.kubernetes.io/controller-uid")).cloned().unwrap();
    assert_eq!(record["operationId"].as_str(), Some(uid.as_str()), "{record}");
}

#[tokio::test]
async fn a_revoked_job_fails_even_when_its_migration_traps_sigterm_and_exits_0() {
    let env = setup("scjob-revoke").await;
    let script = "trap 'echo got SIGTERM; exit 0' TERM; echo started; while :; do sleep 0.1; done";
    start(&env, job(&env, "trapped", script, &[], 150)).await;
    // Running: the migration container started (only after the probe passed).
    let pod_name = wait_for("the migration to run", T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, "trapped").await;
        let pod = pods.first().ok_or("no Pod")?;
        let name = pod.metadata.name.clone().unwrap();
        if logs(&env.cluster, &env.ns.name, &name, "migration").await.contains("started") {
            Ok(name)
        } else {
            Err("not yet".into())
        }
    })
    .await;
    let patch = json!({"metadata": {"annotations": {"bloodraven.shipstream.io/revoke-deployment-leases": "now"}}});
    env.cluster.groups().patch(&env.group, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let (_, ended, _) = wait_job_end(&env.cluster, &env.ns.name, "trapped", T).await;
    assert_eq!(ended, "Failed");
    let out = logs(&env.cluster, &env.ns.name, &pod_name, "migration").await;
    assert!(out.contains("got SIGTERM"), "the migration received SIGTERM: {out}");
    let (pod, record) = sidecar_record(&env, "trapped").await;
    let (code, _) = terminated(&pod, "migration", false).unwrap();
    assert_eq!(code, SIDECAR_EXIT_FENCED_IN_DDL, "the wrapper exits with the verdict, not the trapped 0");
    assert_eq!(
        (record["result"].as_str(), record["fence"].as_str()),
        (Some("schema-verification-required"), Some("revoked")),
        "{record}"
    );
}

#[tokio::test]
async fn a_job_that_cannot_get_the_mutex_fails_without_starting_its_migration() {
    let env = setup("scjob-held").await;
    // A holder that runs until its deadline.
    start(&env, job(&env, "holder", "echo holding; sleep 3600", &[], 60)).await;
    wait_for("the holder to run", T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, "holder").await;
        let pod = pods.first().ok_or("no Pod")?;
        let name = pod.metadata.name.clone().unwrap();
        if logs(&env.cluster, &env.ns.name, &name, "migration").await.contains("holding") {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
    start(&env, job(&env, "blocked", "echo MIGRATION STARTED", &[("BLOODRAVEN_ACQUIRE_TIMEOUT", "3")], 60)).await;
    // The sidecar gives up and says so (its final JSON line) while the Pod
    // still runs: the Job controller deletes the Pod at the deadline.
    let (pod_name, record) = wait_for("the blocked sidecar's final record", T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, "blocked").await;
        let name = pods.first().ok_or("no Pod")?.metadata.name.clone().unwrap();
        let out = logs(&env.cluster, &env.ns.name, &name, "sidecar").await;
        let record = out
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["record"] == "bloodraven-sidecar")
            .ok_or_else(|| format!("no record yet: {out}"))?;
        Ok((name, record))
    })
    .await;
    assert_eq!(record["result"], "not-started", "{record}");
    assert_eq!(record["exitCode"], 90, "{record}");
    assert!(record["holder"].as_str().unwrap_or_default().contains("counter-app"), "{record}");
    // The run is over: the migration container starts only to be refused
    // by it, never running its command, and the Job fails at once (not at
    // its deadline), its Pod and logs kept.
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "blocked", T).await;
    assert_eq!(ended.as_str(), "Failed", "{reason}");
    assert_ne!(reason, "DeadlineExceeded", "failed at once, not at the Job's deadline");
    let out = logs(&env.cluster, &env.ns.name, &pod_name, "migration").await;
    assert!(!out.contains("MIGRATION STARTED"), "the migration command ran: {out}");
    let pod: Pod = Api::namespaced(env.cluster.client.clone(), &env.ns.name).get(&pod_name).await.unwrap();
    assert_eq!(
        terminated(&pod, "migration", false).map(|t| t.0),
        Some(90),
        "the wrapper exits with the not-started code"
    );
}

/// The host PID of the `bloodraven-sidecar hold` process serving `group`
/// (the node runs on this machine: a container's processes are the host's,
/// found by their command line and environment).
fn sidecar_pid(group: &str) -> Option<i32> {
    let want_env = format!("BLOODRAVEN_GROUP={group}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_hold =
            args.first().is_some_and(|a| a.ends_with(b"bloodraven-sidecar")) && args.get(1) == Some(&&b"hold"[..]);
        let environ = std::fs::read(entry.path().join("environ")).ok()?;
        let ours = environ.split(|b| *b == 0).any(|v| v == want_env.as_bytes());
        (is_hold && ours).then_some(pid)
    })
}

fn signal(pid: i32, name: &str) {
    let ok =
        std::process::Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill -{name} {pid}");
}

/// The kernel's uptime in milliseconds (10 ms resolution).
fn uptime_ms() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap();
    (text.split_whitespace().next().unwrap().parse::<f64>().unwrap() * 1000.0) as u64
}

/// Whether the migration lease of `operation_id` is held now: its slot
/// Lease names it as holder and `renewTime + leaseDurationSeconds` is ahead.
async fn mutex_held(env: &Env, operation_id: &str) -> bool {
    let leases: Api<Lease> = Api::namespaced(env.cluster.client.clone(), &env.op_ns.name);
    let now = k8s_openapi::jiff::Timestamp::now();
    leases.list(&kube::api::ListParams::default()).await.unwrap().items.iter().any(|l| {
        let a = l.metadata.annotations.clone().unwrap_or_default();
        let Some(spec) = l.spec.as_ref() else { return false };
        let live = spec
            .renew_time
            .as_ref()
            .zip(spec.lease_duration_seconds)
            .is_some_and(|(t, d)| t.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(d)) > now);
        a.get("bloodraven.shipstream.io/group").map(String::as_str) == Some(env.group.as_str())
            && a.get("bloodraven.shipstream.io/kind").map(String::as_str) == Some("migration")
            && spec.holder_identity.as_deref() == Some(operation_id)
            && live
    })
}

/// The running migration container's Pod name, once it logged `marker`.
async fn running(env: &Env, job: &str, marker: &str) -> String {
    wait_for(&format!("{job}'s migration to log {marker:?}"), T, || async {
        let pods = job_pods(&env.cluster, &env.ns.name, job).await;
        let pod = pods.first().ok_or("no Pod")?;
        let name = pod.metadata.name.clone().unwrap();
        if logs(&env.cluster, &env.ns.name, &name, "migration").await.contains(marker) {
            Ok(name)
        } else {
            Err("not yet".into())
        }
    })
    .await
}

#[tokio::test]
async fn kill_9_of_the_sidecar_in_the_pod_stops_the_migration_and_the_mutex_outlives_it() {
    let env = setup("scjob-kill").await;
    // The migration takes 6 s to stop after SIGTERM: the mutex must be held
    // all that time, then lapse by its TTL (never released).
    let script =
        "trap 'echo got SIGTERM; sleep 6; echo exiting; exit 0' TERM; echo started; while :; do sleep 0.1; done";
    start(&env, job(&env, "killed", script, &[], 150)).await;
    let pod_name = running(&env, "killed", "started").await;
    let pod: Pod = Api::namespaced(env.cluster.client.clone(), &env.ns.name).get(&pod_name).await.unwrap();
    let uid = pod.metadata.labels.as_ref().and_then(|l| l.get("batch.kubernetes.io/controller-uid")).cloned().unwrap();
    assert!(mutex_held(&env, &uid).await, "held while the migration runs");
    let pid = sidecar_pid(&env.group).expect("the sidecar's process on this node");
    signal(pid, "KILL");
    running(&env, "killed", "got SIGTERM").await;
    // Fenced: the lease the sidecar can no longer renew is still live, not released.
    assert!(mutex_held(&env, &uid).await, "the mutex is held past the fence");
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "killed", T).await;
    assert_eq!(ended, "Failed", "{reason}");
    assert_ne!(reason, "DeadlineExceeded", "failed at once, not at the Job's deadline (the Pod and its logs kept)");
    let (pod, record) = sidecar_record(&env, "killed").await;
    let (code, _) = terminated(&pod, "migration", false).unwrap();
    assert_ne!(code, 0, "the wrapper fails the migration whose sidecar died, not the trapped 0");
    // The restarted sidecar never acquires again; it records the loss.
    assert_eq!(record["fence"].as_str(), Some("sidecar_restarted"), "{record}");
    wait_for("the mutex to lapse by its TTL", T, || async {
        if mutex_held(&env, &uid).await { Err("still held".to_owned()) } else { Ok(()) }
    })
    .await;
}

#[tokio::test]
async fn sigstop_of_the_sidecar_in_the_pod_lets_no_step_run_after_the_deadline() {
    let env = setup("scjob-stop").await;
    // A step only when the sidecar grants one (`permit`); each step logs its time.
    // Times are the kernel's uptime (busybox `date` has no sub-second
    // format; one kernel, so the test reads the same clock).
    let script = "trap 'read u _ </proc/uptime; echo term $u; exit 0' TERM; echo started; while :; do if $S permit --timeout 0.3 >/dev/null 2>&1; then read u _ </proc/uptime; echo step $u; fi; sleep 0.2; done";
    start(&env, job(&env, "stopped", script, &[("BLOODRAVEN_DDL_BOUNDARY", "reported")], 150)).await;
    let pod_name = running(&env, "stopped", "step ").await;
    let pid = sidecar_pid(&env.group).expect("the sidecar's process on this node");
    let stopped_at = uptime_ms();
    signal(pid, "STOP");
    // TTL 15, grace 3: the deadline is at most 12 s after the stop.
    tokio::time::sleep(Duration::from_secs(18)).await;
    let continued_at = uptime_ms();
    signal(pid, "CONT");
    let (_, ended, reason) = wait_job_end(&env.cluster, &env.ns.name, "stopped", T).await;
    assert_eq!(ended, "Failed", "{reason}");
    let out = logs(&env.cluster, &env.ns.name, &pod_name, "migration").await;
    let stamps = |word: &str| -> Vec<u64> {
        out.lines()
            .filter_map(|l| l.strip_prefix(word)?.trim().parse::<f64>().ok())
            .map(|s| (s * 1000.0) as u64)
            .collect()
    };
    let last_step = stamps("step ").into_iter().max().unwrap_or(0);
    let term = stamps("term ").into_iter().next().unwrap_or(u64::MAX);
    let deadline_bound = stopped_at + 12_000;
    assert!(
        last_step <= deadline_bound,
        "a step {} ms after the stop (bound 12000): {out}",
        last_step.saturating_sub(stopped_at)
    );
    assert!(
        term < continued_at,
        "SIGTERM came while the sidecar was stopped (term {term}, SIGCONT {continued_at}): {out}"
    );
    println!(
        "figure: in a Job Pod, SIGSTOP of the sidecar; last step {} ms after, SIGTERM {} ms after (deadline ≤ 12000 ms)",
        last_step.saturating_sub(stopped_at),
        term.saturating_sub(stopped_at)
    );
}
