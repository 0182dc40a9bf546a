//! Sidecar injection into an annotated migration Job (docs/webhook.md
//! "Injection", docs/sidecar.md "In a Job Pod"), as JSON Patch operations that only add:
//! the user's fields (their own native sidecars, other webhooks' changes)
//! are never removed or rewritten wholesale; lists are appended to and the
//! migration container's command is prefixed element by element.
//!
//! What a Job annotated `bloodraven.shipstream.io/inject: "true"` (with
//! `…/group` and `…/instance`) gets:
//! - the native sidecar `bloodraven-sidecar hold --install /run/bloodraven/bin`
//!   (`restartPolicy: Always`; it copies the `exec` wrapper into the shared
//!   volume first, and its startup probe passes once its socket serves; the
//!   migration's wrapper waits there until both leases are held), appended after the
//!   user's init containers. Its settings are arguments, the deploy API's CA
//!   among them (`--ca-pem`), so the Job's namespace needs no CA object;
//!   only the Job's UID is an environment variable (downward API). Fewer
//!   fields than a container and an environment list per setting: the API
//!   server defaults, validates and tracks (managedFields) every field of
//!   every Job created, and that is what injection costs it (docs/webhook.md,
//!   "Cost");
//! - volume `bloodraven-run` (emptyDir: local socket, state, wrapper) and
//!   `bloodraven-token` (projected ServiceAccount token, audience
//!   `bloodraven-deploy`, mounted in the sidecar only);
//! - the migration container's command prefixed with
//!   `/run/bloodraven/bin/bloodraven-sidecar exec --` (the wrapper that
//!   starts the migration once both leases are held and fences it), and
//!   `BLOODRAVEN_MIGRATION_REQUIRE_LEASE=true` in its environment, so
//!   `bloodraven-migrate apply` refuses to run in a copy of the Job that
//!   lost its sidecar;
//! - `backoffLimit: 0` and an `activeDeadlineSeconds` when none is set.
//!
//! Refused, with what to fix: no group or instance; a migration container
//! that cannot be chosen (several, none named) or has no `command` (the
//! webhook cannot see an image's entrypoint to wrap it); anything that would
//! run a migration Pod again or in parallel (`restartPolicy: OnFailure`, a
//! `podFailurePolicy` rule with action `Ignore`, `completions` or
//! `parallelism` above 1, `completionMode: Indexed`); a mount of its own at
//! `/run/bloodraven`; a `BLOODRAVEN_MIGRATION_REQUIRE_LEASE` of its own that
//! is not `"true"`.
//!
//! Idempotent: each piece is added only when missing, so a reinvocation
//! (`reinvocationPolicy: IfNeeded`) or a Job copied from an injected Job
//! gets one sidecar and a command wrapped once.

use bloodraven_api::names::inject as names;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{Value, json};

use crate::guards::database::is_dns_subdomain;

/// What the webhook injects with (its flags).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The sidecar image (`bloodraven/sidecar:TAG`).
    pub image: String,
    /// Its pull policy.
    pub pull_policy: String,
    /// The deploy API base URL the sidecar calls.
    pub deploy_url: String,
    /// The deploy API's CA bundle (PEM).
    pub ca_pem: String,
    /// `activeDeadlineSeconds` for a Job that sets none.
    pub active_deadline_seconds: i64,
    /// Lifetime of the projected token, seconds (the kubelet rotates it at 80 %).
    pub token_expiration_seconds: i64,
    /// The sidecar's `--acquire-timeout`, seconds.
    pub acquire_timeout_seconds: i64,
    /// The webhook's version, recorded in the `injected` annotation.
    pub version: String,
}

/// The group, instance and ServiceAccount a Job asks for, read from it
/// before anything else so authority can be checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    /// The MysqlFailoverGroup.
    pub group: String,
    /// The instance (the MysqlDatabase's name).
    pub instance: String,
    /// The Pod's ServiceAccount (`default` when unset).
    pub service_account: String,
}

fn annotation<'a>(job: &'a Value, key: &str) -> Option<&'a str> {
    job.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str)
}

/// Whether `job` asks for injection (`inject: "true"`).
pub fn asks(job: &Value) -> bool {
    annotation(job, names::INJECT) == Some("true")
}

/// Whether `job`'s Pod template carries `inject: "true"` (the annotations
/// belong on the Job: the Pod is created by the Job controller, past the
/// webhook, so a template annotation would run the migration unfenced).
pub fn template_asks(job: &Value) -> bool {
    job.pointer("/spec/template/metadata/annotations").and_then(|a| a.get(names::INJECT)).and_then(Value::as_str)
        == Some("true")
}

/// The refusal of a Job whose Pod template, not the Job, asks for injection.
pub fn misplaced() -> String {
    format!(
        "the Job's Pod template (spec.template.metadata.annotations) asks for the Bloodraven sidecar, but injection reads the Job's own annotations: move {} and the group and instance annotations to the Job's metadata.annotations (for a CronJob: spec.jobTemplate.metadata.annotations)",
        names::INJECT
    )
}

/// The refusal of an update that adds `inject: "true"` to an existing Job.
pub fn too_late() -> String {
    format!(
        "{} was added to an existing Job: a Job's Pod template cannot change after it is created, so the sidecar cannot be injected now. Delete the Job and create it again with the annotations",
        names::INJECT
    )
}

/// What `job` asks for. Errors: a missing or malformed group or instance.
pub fn ask(job: &Value) -> Result<Ask, String> {
    let get = |key: &str, what: &str| -> Result<String, String> {
        match annotation(job, key) {
            None | Some("") => Err(format!(
                "the Job asks for the Bloodraven sidecar ({}: \"true\") but has no {key} annotation: set it to {what}",
                names::INJECT
            )),
            Some(v) if !is_dns_subdomain(v) => {
                Err(format!("annotation {key}: {:?} is not a valid name; set it to {what}", truncate(v)))
            }
            Some(v) => Ok(v.to_owned()),
        }
    };
    let group = get(names::GROUP, "the MysqlFailoverGroup's name")?;
    let instance = get(names::INSTANCE, "the MysqlDatabase's name (the instance its deploymentClients authorize)")?;
    let service_account = job
        .pointer("/spec/template/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned();
    Ok(Ask { group, instance, service_account })
}

fn truncate(v: &str) -> String {
    v.chars().take(80).collect()
}

fn pointer(parts: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(parts.iter().copied())
}

fn add(parts: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path: pointer(parts), value })
}

/// The patch that injects the sidecar into `job` (JSON), given that its
/// ServiceAccount is authorized for `ask`. Empty when everything is there.
///
/// Errors: the refusal, saying what to fix.
#[allow(clippy::too_many_lines)] // one JSON patch, built container by container in the order of the pod spec
pub fn patch(job: &Value, ask: &Ask, s: &Settings) -> Result<Patch, String> {
    let spec = job.get("spec").ok_or("the Job has no spec")?;
    refuse_reruns(spec)?;
    let pod = spec.pointer("/template/spec").ok_or("the Job has no spec.template.spec")?;
    let containers = pod.get("containers").and_then(Value::as_array).ok_or("the Job's Pod has no containers")?;
    let index = migration_container(job, containers)?;
    let migration = &containers[index];
    let command: Vec<&str> = migration
        .get("command")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let name = migration.get("name").and_then(Value::as_str).unwrap_or_default();
    if command.is_empty() {
        return Err(format!(
            "container {name:?} has no command: the sidecar's wrapper must start the migration, and the webhook cannot see the image's ENTRYPOINT. Set command (and args) explicitly"
        ));
    }
    let mounts = migration.get("volumeMounts").and_then(Value::as_array).cloned().unwrap_or_default();
    let run_mounted = mounts.iter().any(|m| m.get("name").and_then(Value::as_str) == Some(names::RUN_VOLUME));
    if let Some(other) = mounts.iter().find(|m| {
        m.get("mountPath").and_then(Value::as_str).map(|p| p.trim_end_matches('/')) == Some(names::RUN_DIR)
            && m.get("name").and_then(Value::as_str) != Some(names::RUN_VOLUME)
    }) {
        return Err(format!(
            "container {name:?} mounts volume {} at {}, where the sidecar's socket and wrapper live: mount it elsewhere",
            other.get("name").unwrap_or(&Value::Null),
            names::RUN_DIR
        ));
    }

    // A container of the Pod named like one of ours would be taken for the
    // sidecar by a reader (and collide with it): refused. The install
    // container's name stays taken: earlier webhooks injected one.
    if let Some(c) = containers
        .iter()
        .map(|c| c.get("name").and_then(Value::as_str).unwrap_or_default())
        .find(|n| [names::SIDECAR_CONTAINER, names::INSTALL_CONTAINER].contains(n))
    {
        return Err(format!(
            "container {c:?} has the name of a container the webhook injects as an init container: rename it"
        ));
    }

    let mut ops = Vec::new();
    let idx = index.to_string();
    // Job defaults: never run a migration Pod twice; always end.
    if spec.get("backoffLimit").and_then(Value::as_i64) != Some(0) {
        ops.push(add(&["spec", "backoffLimit"], json!(0)));
    }
    if spec.get("activeDeadlineSeconds").is_none_or(Value::is_null) {
        ops.push(add(&["spec", "activeDeadlineSeconds"], json!(s.active_deadline_seconds)));
    }
    // The wrapper, once.
    if command.iter().take(names::WRAPPER.len()).copied().ne(names::WRAPPER.iter().copied()) {
        for (i, part) in names::WRAPPER.iter().enumerate() {
            ops.push(add(&["spec", "template", "spec", "containers", &idx, "command", &i.to_string()], json!(part)));
        }
    }
    let run_mount = json!({"name": names::RUN_VOLUME, "mountPath": names::RUN_DIR});
    if !run_mounted {
        if migration.get("volumeMounts").is_some_and(Value::is_array) {
            ops.push(add(&["spec", "template", "spec", "containers", &idx, "volumeMounts", "-"], run_mount));
        } else {
            ops.push(add(&["spec", "template", "spec", "containers", &idx, "volumeMounts"], json!([run_mount])));
        }
    }
    // The runner refuses to run alone: a copy of this Job that loses its
    // sidecar fails instead of migrating unfenced.
    require_lease(&mut ops, migration, &idx, name)?;
    // The native sidecar, after the user's own init containers.
    let inits = pod.get("initContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    let has = |list: &[Value], n: &str| list.iter().any(|c| c.get("name").and_then(Value::as_str) == Some(n));
    // A container of ours already there must be ours: same image and role
    // (a Job copied from an injected one), not a look-alike that would
    // leave the migration unfenced.
    let sidecar = sidecar_container(job, ask, s)?;
    let present = inits.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(names::SIDECAR_CONTAINER));
    if let Some(c) = present
        && let Some(field) = differs(c, &sidecar)
    {
        return Err(format!(
            "init container {:?} is not the one this webhook injects ({field} differs): remove it (and the other bloodraven-* containers and volumes) and create the Job again to have it injected",
            names::SIDECAR_CONTAINER
        ));
    }
    // Earlier webhooks injected an install container; this one's sidecar
    // installs the wrapper itself. A Job copied from such a Job is refused
    // like any other stale copy.
    if has(&inits, names::INSTALL_CONTAINER) {
        return Err(format!(
            "init container {:?} was injected by an earlier webhook (the sidecar now installs the wrapper itself): remove it (and the other bloodraven-* containers and volumes) and create the Job again to have it injected",
            names::INSTALL_CONTAINER
        ));
    }
    let new_inits = if present.is_none() { vec![sidecar] } else { Vec::new() };
    append(&mut ops, &["spec", "template", "spec", "initContainers"], pod.get("initContainers"), new_inits);
    // Volumes.
    let volumes = pod.get("volumes").and_then(Value::as_array).cloned().unwrap_or_default();
    let new_volumes: Vec<Value> = our_volumes(&volumes, s, db_url_secret(job)?)?
        .into_iter()
        .filter(|v| !has(&volumes, v.get("name").and_then(Value::as_str).unwrap_or_default()))
        .collect();
    append(&mut ops, &["spec", "template", "spec", "volumes"], pod.get("volumes"), new_volumes);
    if !ops.is_empty() && annotation(job, names::INJECTED).is_none() {
        ops.push(add(&["metadata", "annotations", names::INJECTED], json!(s.version)));
    }
    Ok(Patch(ops))
}

/// Adds `BLOODRAVEN_MIGRATION_REQUIRE_LEASE=true` to the migration
/// container `migration` (index `idx`, named `name`) when missing:
/// `bloodraven-migrate apply` then refuses to start without the sidecar's
/// socket (docs/migrate.md, "With the sidecar"). An entry already `"true"`
/// is left (a reinvocation, a copy); any other value or a `valueFrom` is
/// refused, since the last entry of a name wins and would turn it off.
/// Other programs ignore the variable.
fn require_lease(ops: &mut Vec<PatchOperation>, migration: &Value, idx: &str, name: &str) -> Result<(), String> {
    let want = json!({"name": names::REQUIRE_LEASE_ENV, "value": "true"});
    let env = migration.get("env").and_then(Value::as_array);
    let ours: Vec<&Value> = env
        .into_iter()
        .flatten()
        .filter(|e| e.get("name").and_then(Value::as_str) == Some(names::REQUIRE_LEASE_ENV))
        .collect();
    if let Some(other) = ours.iter().find(|e| **e != &want) {
        return Err(format!(
            "container {name:?} sets {} to {}: the webhook sets it to \"true\" so that the migration refuses to run without its sidecar; remove it",
            names::REQUIRE_LEASE_ENV,
            truncate(&other.get("value").map_or_else(|| "a valueFrom".to_owned(), Value::to_string))
        ));
    }
    if !ours.is_empty() {
        return Ok(());
    }
    if env.is_some() {
        ops.push(add(&["spec", "template", "spec", "containers", idx, "env", "-"], want));
    } else {
        ops.push(add(&["spec", "template", "spec", "containers", idx, "env"], json!([want])));
    }
    Ok(())
}

/// The first field in which container `have` is not `want`, the container
/// the webhook injects: every field counts, not only those the webhook sets
/// (found on review: `envFrom`, `lifecycle` hooks or `workingDir` added to
/// a copied sidecar were taken for ours, so a copy could set the
/// sidecar's other settings through `envFrom` or run a command beside it
/// with its token). Fields the API server defaults are compared only when
/// they differ from the default (`terminationMessagePath`,
/// `terminationMessagePolicy`, the probe's timeout, success threshold and
/// initial delay); `None` when `have` is ours.
fn differs(have: &Value, want: &Value) -> Option<String> {
    // `want` sets none of the defaulted fields: only `have` is cleared of them.
    let mut have = have.clone();
    if let Some(o) = have.as_object_mut() {
        for (k, v) in
            [("terminationMessagePath", json!("/dev/termination-log")), ("terminationMessagePolicy", json!("File"))]
        {
            if o.get(k) == Some(&v) {
                o.remove(k);
            }
        }
    }
    if let Some(p) = have.get_mut("startupProbe").and_then(Value::as_object_mut) {
        for (k, v) in [("timeoutSeconds", 1), ("successThreshold", 1), ("initialDelaySeconds", 0)] {
            if p.get(k) == Some(&json!(v)) {
                p.remove(k);
            }
        }
    }
    let (Some(h), Some(w)) = (have.as_object(), want.as_object()) else {
        return Some("the container".to_owned());
    };
    let fields: std::collections::BTreeSet<&String> = h.keys().chain(w.keys()).collect();
    fields.into_iter().find(|f| h.get(*f) != w.get(*f)).map(|f| truncate(f))
}

/// The volumes the webhook injects, `[run, token]`, once those of `volumes`
/// with their names are checked to be exactly ours (found by an attack: a
/// Secret volume named bloodraven-token handed the sidecar another
/// identity's token; a hostPath named bloodraven-run shared the socket with
/// other Pods). The API server defaults `projected.defaultMode`, which is
/// not compared.
fn our_volumes(volumes: &[Value], s: &Settings, db_url: Option<(String, String)>) -> Result<Vec<Value>, String> {
    let run_volume = json!({"name": names::RUN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}});
    let token_volume = json!({"name": names::TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {
        "audience": bloodraven_api::names::DEPLOY_AUDIENCE,
        "expirationSeconds": s.token_expiration_seconds,
        "path": "token",
    }}]}});
    let mut ours = vec![run_volume, token_volume];
    // Readable by the sidecar's user (the kubelet writes the files as
    // root); mounted in the sidecar only.
    if let Some((name, key)) = db_url {
        ours.push(json!({"name": names::DB_URL_VOLUME, "secret": {"secretName": name,
            "items": [{"key": key, "path": "url"}], "defaultMode": 0o444}}));
    }
    for want in &ours {
        let n = want.get("name").and_then(Value::as_str).unwrap_or_default();
        if let Some(v) = volumes.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(n))
            && !same_volume(v, want)
        {
            return Err(format!(
                "volume {n:?} is not the one this webhook injects: remove it (and the other bloodraven-* containers and volumes) and create the Job again to have it injected"
            ));
        }
    }
    Ok(ours)
}

/// Whether volume `have` is `want` (the same source and nothing else),
/// ignoring the `defaultMode` the API server sets on a projected volume.
fn same_volume(have: &Value, want: &Value) -> bool {
    let mut have = have.clone();
    if let Some(p) = have.get_mut("projected").and_then(Value::as_object_mut) {
        p.remove("defaultMode");
    }
    have == *want
}

/// Appends `items` to the list at `path` (`current`), creating it when absent.
fn append(ops: &mut Vec<PatchOperation>, path: &[&str], current: Option<&Value>, items: Vec<Value>) {
    if items.is_empty() {
        return;
    }
    if current.is_some_and(Value::is_array) {
        for item in items {
            let mut p = path.to_vec();
            p.push("-");
            ops.push(add(&p, item));
        }
    } else {
        ops.push(add(path, Value::Array(items)));
    }
}

/// Refuses Job settings that would run a migration Pod again or twice at once.
fn refuse_reruns(spec: &Value) -> Result<(), String> {
    let int = |k: &str| spec.get(k).and_then(Value::as_i64);
    if let Some(n) = int("completions").filter(|n| *n > 1) {
        return Err(format!("spec.completions is {n}: a migration Job runs one Pod once; set it to 1"));
    }
    if let Some(n) = int("parallelism").filter(|n| *n > 1) {
        return Err(format!("spec.parallelism is {n}: a migration Job runs one Pod at a time; set it to 1"));
    }
    if spec.get("completionMode").and_then(Value::as_str) == Some("Indexed") {
        return Err("spec.completionMode is Indexed: a migration Job is NonIndexed (one Pod, once)".into());
    }
    if spec.pointer("/template/spec/restartPolicy").and_then(Value::as_str) == Some("OnFailure") {
        return Err("spec.template.spec.restartPolicy is OnFailure: the kubelet would run a failed migration again in the same Pod, past its fence; use Never".into());
    }
    let rules = spec.pointer("/podFailurePolicy/rules").and_then(Value::as_array).cloned().unwrap_or_default();
    if let Some(i) = rules.iter().position(|r| r.get("action").and_then(Value::as_str) == Some("Ignore")) {
        return Err(format!(
            "spec.podFailurePolicy.rules[{i}] has action Ignore: a failed migration Pod would be replaced by a new one that runs the migration again; use FailJob or Count (with backoffLimit 0)"
        ));
    }
    Ok(())
}

/// The index of the migration container: the one named by the `container`
/// annotation, or the only one.
fn migration_container(job: &Value, containers: &[Value]) -> Result<usize, String> {
    let name_of = |c: &Value| c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    match annotation(job, names::CONTAINER) {
        Some(wanted) => containers.iter().position(|c| name_of(c) == wanted).ok_or_else(|| {
            let all: Vec<String> = containers.iter().map(name_of).collect();
            format!("annotation {}: no container {:?}; the Pod has {all:?}", names::CONTAINER, truncate(wanted))
        }),
        None if containers.len() == 1 => Ok(0),
        None => {
            let all: Vec<String> = containers.iter().map(name_of).collect();
            Err(format!(
                "the Pod has {} containers {all:?}: name the one that runs the migration with the annotation {}",
                containers.len(),
                names::CONTAINER
            ))
        }
    }
}

fn restricted(user: i64) -> Value {
    json!({"runAsNonRoot": true, "runAsUser": user, "runAsGroup": user, "allowPrivilegeEscalation": false,
           "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
}

/// The shortest TTL the injected sidecar accepts with its default request
/// timeout (5 s) and grace (10 s): ttl − ttl/3 − 5 − 10 ≥ 1 s (the sidecar's
/// own check, sidecar/src/lease/machine.rs `Timing::new`).
pub const MIN_TTL: u32 = 24;

/// The user the injected containers run as: not the migration's (65534 is
/// common there), so a migration cannot read the sidecar's memory.
const SIDECAR_UID: i64 = 65532;

fn resources() -> Value {
    json!({"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}})
}

/// What the sidecar keeps of a Job's `activeDeadlineSeconds` after it gives
/// up waiting for the mutex: time to report (exit 90, its final record, the
/// Pod's status) before the Job controller deletes the Pod, and its logs
/// with it, at the deadline.
pub const REPORT_RESERVE_SECONDS: i64 = 30;

/// The shortest wait for the mutex a Job's deadline may leave.
pub const MIN_ACQUIRE_SECONDS: i64 = 10;

/// How many one-second tries the sidecar's startup probe gets to find its
/// socket served.
const STARTUP_PROBE_FAILURES: i64 = 60;

/// The sidecar's `--acquire-timeout` for `job`: the configured one, cut to
/// fit inside the Job's deadline (its own, or the one the webhook sets)
/// with [`REPORT_RESERVE_SECONDS`] left. A deadline too short for even
/// [`MIN_ACQUIRE_SECONDS`] of waiting is refused.
pub fn acquire_timeout(job: &Value, s: &Settings) -> Result<i64, String> {
    let deadline =
        job.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64).unwrap_or(s.active_deadline_seconds);
    let fits = deadline.saturating_sub(REPORT_RESERVE_SECONDS);
    if fits < MIN_ACQUIRE_SECONDS {
        return Err(format!(
            "spec.activeDeadlineSeconds {deadline} leaves the sidecar under {MIN_ACQUIRE_SECONDS} s to wait for the migration mutex after {REPORT_RESERVE_SECONDS} s kept to report: set it to at least {}",
            MIN_ACQUIRE_SECONDS + REPORT_RESERVE_SECONDS
        ));
    }
    Ok(s.acquire_timeout_seconds.min(fits))
}

/// The injected sidecar: `hold`, its settings as arguments (`--flag=value`,
/// one list: see the module docs), the Job's UID from the downward API.
fn sidecar_container(job: &Value, ask: &Ask, s: &Settings) -> Result<Value, String> {
    let acquire = acquire_timeout(job, s)?;
    let mut args = vec![
        "hold".to_owned(),
        format!("--install={}/bin", names::RUN_DIR),
        format!("--url={}", s.deploy_url),
        format!("--ca-pem={}", s.ca_pem),
        format!("--group={}", ask.group),
        format!("--instance={}", ask.instance),
        format!("--acquire-timeout={acquire}"),
    ];
    if let Some(ttl) = annotation(job, names::TTL) {
        match ttl.parse::<u32>() {
            Ok(t) if (MIN_TTL..=120).contains(&t) => args.push(format!("--ttl={t}")),
            _ => {
                return Err(format!(
                    "annotation {}: {:?} is not a TTL in seconds in [{MIN_TTL}, 120] (below {MIN_TTL}, a renewal every ttl/3 plus the sidecar's 5 s request timeout and 10 s grace leaves no time before the lease lapses)",
                    names::TTL,
                    truncate(ttl)
                ));
            }
        }
    }
    let db_url = db_url_secret(job)?;
    match (annotation(job, names::DDL_BOUNDARY), &db_url) {
        (Some(mode), _) if !["at-start", "reported"].contains(&mode) => {
            return Err(format!("annotation {}: {:?}; use at-start or reported", names::DDL_BOUNDARY, truncate(mode)));
        }
        (Some("at-start"), Some(_)) => {
            return Err(format!(
                "annotations {} and {}: at-start takes the migration to be in DDL from its start, so the database could never say it was not; remove one",
                names::DDL_BOUNDARY,
                names::DB_URL_SECRET
            ));
        }
        // With the database's word, what the migration reports and the
        // schema's and history tables' changes decide.
        (_, Some(_)) => args.push("--ddl-boundary=reported".to_owned()),
        (Some(mode), None) => args.push(format!("--ddl-boundary={mode}")),
        (None, None) => {}
    }
    let mut mounts = vec![
        json!({"name": names::RUN_VOLUME, "mountPath": names::RUN_DIR}),
        json!({"name": names::TOKEN_VOLUME, "mountPath": "/var/run/secrets/bloodraven", "readOnly": true}),
    ];
    if db_url.is_some() {
        args.push(format!("--db-url-file={}/url", names::DB_URL_DIR));
        mounts.push(json!({"name": names::DB_URL_VOLUME, "mountPath": names::DB_URL_DIR, "readOnly": true}));
    }
    Ok(json!({
        "name": names::SIDECAR_CONTAINER, "image": s.image, "imagePullPolicy": s.pull_policy,
        "restartPolicy": "Always",
        "args": args,
        "env": [{"name": "BLOODRAVEN_JOB_UID", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}}],
        // Passes once the sidecar serves its socket (seconds after it
        // starts): the wrapper waits there for the leases, so a wait never
        // fails the probe. A sidecar that does not serve within a minute is
        // restarted, and a restarted sidecar ends the run without acquiring.
        "startupProbe": {"exec": {"command": ["/bloodraven-sidecar", "probe"]}, "periodSeconds": 1,
                         "failureThreshold": STARTUP_PROBE_FAILURES},
        "securityContext": restricted(SIDECAR_UID), "resources": resources(),
        "volumeMounts": mounts,
    }))
}

/// The Secret and key of annotation [`names::DB_URL_SECRET`] (`NAME`, key
/// `url`, or `NAME/KEY`), checked to be a Secret name and a Secret key, or
/// `None` without the annotation.
fn db_url_secret(job: &Value) -> Result<Option<(String, String)>, String> {
    let Some(text) = annotation(job, names::DB_URL_SECRET) else { return Ok(None) };
    let (name, key) = text.split_once('/').unwrap_or((text, "url"));
    let dns_subdomain = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    let secret_key = !key.is_empty()
        && key.len() <= 253
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        && key != "."
        && key != "..";
    if !dns_subdomain || !secret_key {
        return Err(format!(
            "annotation {}: {:?} is not a Secret of the Job's namespace: use NAME (key url) or NAME/KEY",
            names::DB_URL_SECRET,
            truncate(text)
        ));
    }
    Ok(Some((name.to_owned(), key.to_owned())))
}

#[cfg(test)]
mod tests;
