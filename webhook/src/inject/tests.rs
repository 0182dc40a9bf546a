use serde_json::json;

use super::*;

fn settings() -> Settings {
    Settings {
        image: "bloodraven/sidecar:test".into(),
        pull_policy: "IfNotPresent".into(),
        deploy_url: "https://bloodraven.bloodraven.svc:8443".into(),
        ca_pem: "-----BEGIN CERTIFICATE-----\n...".into(),
        active_deadline_seconds: 3600,
        token_expiration_seconds: 3600,
        acquire_timeout_seconds: 600,
        version: "0.1.0".into(),
    }
}

/// A Job as a user writes it, after the API server's defaults (backoffLimit 6).
fn job() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "migrate", "namespace": "team", "annotations": {
            "bloodraven.shipstream.io/inject": "true",
            "bloodraven.shipstream.io/group": "prod",
            "bloodraven.shipstream.io/instance": "counter-app"}},
        "spec": {"backoffLimit": 6, "template": {"spec": {
            "serviceAccountName": "deployer", "restartPolicy": "Never",
            "initContainers": [{"name": "proxy", "image": "proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "migrate", "image": "app:1", "command": ["/app/migrate"], "args": ["up"]}],
            "volumes": [{"name": "config", "configMap": {"name": "c"}}],
        }}},
    })
}

fn apply(job: &Value) -> Value {
    let a = ask(job).unwrap();
    let p = patch(job, &a, &settings()).unwrap();
    for op in &p.0 {
        assert!(matches!(op, PatchOperation::Add(_)), "patches only add: {op:?}");
    }
    let mut out = job.clone();
    json_patch::patch(&mut out, &p).unwrap();
    out
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
}

#[test]
fn an_annotated_job_gets_the_sidecar_the_wrapper_and_fail_closed_defaults() {
    let j = job();
    assert_eq!(
        ask(&j).unwrap(),
        Ask { group: "prod".into(), instance: "counter-app".into(), service_account: "deployer".into() }
    );
    let out = apply(&j);
    let pod = &out["spec"]["template"]["spec"];
    assert_eq!(out["spec"]["backoffLimit"], 0);
    assert_eq!(out["spec"]["activeDeadlineSeconds"], 3600);
    assert_eq!(names(&pod["initContainers"]), ["proxy", "bloodraven-sidecar"], "the user's sidecar kept, first");
    let sidecar = &pod["initContainers"][1];
    assert_eq!(sidecar["restartPolicy"], "Always");
    let args: Vec<&str> = sidecar["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args[..2], ["hold", "--install=/run/bloodraven/bin"], "the sidecar installs the wrapper first");
    for want in
        ["--url=https://", "--ca-pem=-----BEGIN", "--group=prod", "--instance=counter-app", "--acquire-timeout="]
    {
        assert!(args.iter().any(|a| a.starts_with(want)), "{want}: {args:?}");
    }
    let env: Vec<&str> = sidecar["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(env, ["BLOODRAVEN_JOB_UID"], "the one setting only the downward API knows");
    let migrate = &pod["containers"][0];
    assert_eq!(migrate["command"], json!(["/run/bloodraven/bin/bloodraven-sidecar", "exec", "--", "/app/migrate"]));
    assert_eq!(migrate["args"], json!(["up"]));
    assert_eq!(
        migrate["env"],
        json!([{"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "value": "true"}]),
        "the runner refuses to run alone in a copy that loses its sidecar"
    );
    assert_eq!(names(&migrate["volumeMounts"]), ["bloodraven-run"]);
    assert_eq!(names(&pod["volumes"]), ["config", "bloodraven-run", "bloodraven-token"]);
    let token = &pod["volumes"][2]["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(token["audience"], "bloodraven-deploy");
    // The token is mounted in the sidecar only.
    assert!(!migrate["volumeMounts"].to_string().contains("bloodraven-token"));
    assert_eq!(out["metadata"]["annotations"]["bloodraven.shipstream.io/injected"], "0.1.0");
    // A user's explicit deadline is kept.
    let mut j = job();
    j["spec"]["activeDeadlineSeconds"] = json!(120);
    assert_eq!(apply(&j)["spec"]["activeDeadlineSeconds"], 120);
}

#[test]
fn injection_is_idempotent_for_a_reinvocation_and_a_copied_job() {
    let once = apply(&job());
    let a = ask(&once).unwrap();
    assert!(patch(&once, &a, &settings()).unwrap().0.is_empty(), "a second pass adds nothing");
    // A Job copied from an injected one, without the injected annotation.
    let mut copy = once.clone();
    copy["metadata"]["annotations"].as_object_mut().unwrap().remove("bloodraven.shipstream.io/injected");
    let p = patch(&copy, &a, &settings()).unwrap();
    assert!(p.0.is_empty(), "{p:?}");
    // Another webhook that ran after us added a container and a volume: kept, nothing re-added.
    let mut other = once.clone();
    other["spec"]["template"]["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "istio", "emptyDir": {}}));
    let p = patch(&other, &a, &settings()).unwrap();
    assert!(p.0.is_empty(), "{p:?}");
    // The API server's defaults on a copied sidecar are not differences.
    let mut defaulted = once.clone();
    let side = &mut defaulted["spec"]["template"]["spec"]["initContainers"][1];
    side["terminationMessagePath"] = json!("/dev/termination-log");
    side["terminationMessagePolicy"] = json!("File");
    side["startupProbe"]["timeoutSeconds"] = json!(1);
    side["startupProbe"]["successThreshold"] = json!(1);
    let p = patch(&defaulted, &a, &settings()).unwrap();
    assert!(p.0.is_empty(), "{p:?}");
    // A look-alike sidecar (another image, or not `hold`) is refused, not taken for ours.
    for (field, value) in [
        ("image", json!("evil/sidecar:1")),
        ("args", json!(["sleep"])),
        ("command", json!(["/bin/sh", "-c", "sleep 1d"])),
        ("env", json!([{"name": "BLOODRAVEN_URL", "value": "https://evil:8443"}])),
        ("startupProbe", json!({"exec": {"command": ["true"]}})),
        // Fields the webhook does not set count too (found on review).
        ("envFrom", json!([{"configMapRef": {"name": "sidecar-settings"}}])),
        (
            "lifecycle",
            json!({"postStart": {"exec": {"command": ["/bin/sh", "-c", "cat /var/run/secrets/bloodraven/token"]}}}),
        ),
        ("workingDir", json!("/tmp")),
    ] {
        let mut fake = once.clone();
        fake["spec"]["template"]["spec"]["initContainers"][1][field] = value;
        let e = patch(&fake, &a, &settings()).unwrap_err();
        assert!(e.contains("is not the one this webhook injects"), "{e}");
    }
    // A copy of a Job an earlier webhook injected (an install container
    // before the sidecar) is refused, saying what to remove.
    let mut stale = once.clone();
    stale["spec"]["template"]["spec"]["initContainers"]
        .as_array_mut()
        .unwrap()
        .insert(1, json!({"name": "bloodraven-install", "image": "bloodraven/sidecar:0.1.0", "args": ["install", "/run/bloodraven/bin"]}));
    let e = patch(&stale, &a, &settings()).unwrap_err();
    assert!(e.contains("\"bloodraven-install\" was injected by an earlier webhook"), "{e}");
    // A Pod without lists at all gets them created.
    let mut bare = job();
    let pod = bare["spec"]["template"]["spec"].as_object_mut().unwrap();
    pod.remove("initContainers");
    pod.remove("volumes");
    let out = apply(&bare);
    assert_eq!(names(&out["spec"]["template"]["spec"]["initContainers"]), ["bloodraven-sidecar"]);
}

#[test]
fn the_migration_container_gets_require_lease_once_beside_its_own_environment() {
    let mut j = job();
    let env = json!([{"name": "DATABASE_URL_FILE", "value": "/s/url"}, {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
    j["spec"]["template"]["spec"]["containers"][0]["env"] = env.clone();
    let out = apply(&j);
    let got = &out["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(got.as_array().unwrap()[..2], env.as_array().unwrap()[..], "the user's entries kept, first");
    assert_eq!(got[2], json!({"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "value": "true"}));
    assert_eq!(got.as_array().unwrap().len(), 3);
    // Reinvoked, or set by the user exactly as the webhook does: nothing added.
    assert!(patch(&out, &ask(&out).unwrap(), &settings()).unwrap().0.is_empty());
    let mut own = job();
    own["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "value": "true"}]);
    let p = patch(&own, &ask(&own).unwrap(), &settings()).unwrap();
    assert!(!p.0.iter().any(|op| op.path().to_string().contains("/env")), "{p:?}");
    // Only the migration container gets it.
    let mut two = job();
    two["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": "log", "image": "l"}));
    two["metadata"]["annotations"]["bloodraven.shipstream.io/container"] = json!("migrate");
    let out = apply(&two);
    assert!(out["spec"]["template"]["spec"]["containers"][0].get("env").is_none());
    assert_eq!(out["spec"]["template"]["spec"]["containers"][1]["env"][0]["value"], "true");
}

#[test]
fn attack_a_require_lease_of_the_users_that_would_turn_it_off_is_refused() {
    for entry in [
        json!({"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "value": "false"}),
        json!({"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "value": ""}),
        json!({"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}),
    ] {
        let mut j = job();
        // The last entry of a name wins: a "true" before it does not help.
        j["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "value": "true"}, entry]);
        let e = patch(&j, &ask(&j).unwrap(), &settings()).unwrap_err();
        assert!(e.contains("BLOODRAVEN_MIGRATION_REQUIRE_LEASE") && e.contains("remove it"), "{e}");
    }
}

#[test]
fn each_refusal_says_what_to_fix() {
    let refused = |edit: &dyn Fn(&mut Value), says: &str| {
        let mut j = job();
        edit(&mut j);
        let e = ask(&j).and_then(|a| patch(&j, &a, &settings())).unwrap_err();
        assert!(e.contains(says), "{says}: {e}");
    };
    let ann = |k: &'static str, v: Option<&'static str>| {
        move |j: &mut Value| {
            let a = j["metadata"]["annotations"].as_object_mut().unwrap();
            match v {
                Some(v) => a.insert(k.into(), json!(v)),
                None => a.remove(k),
            };
        }
    };
    refused(&ann("bloodraven.shipstream.io/group", None), "has no bloodraven.shipstream.io/group annotation");
    refused(&ann("bloodraven.shipstream.io/instance", None), "has no bloodraven.shipstream.io/instance annotation");
    refused(&ann("bloodraven.shipstream.io/instance", Some("Bad_Name")), "not a valid name");
    refused(&ann("bloodraven.shipstream.io/ttl", Some("500")), "[24, 120]");
    refused(&ann("bloodraven.shipstream.io/ttl", Some("15")), "[24, 120]");
    refused(&ann("bloodraven.shipstream.io/ddl-boundary", Some("never")), "at-start or reported");
    let long = "a".repeat(254);
    for bad in ["", "/url", "Bad_Name", "db/", "db/a b", "db/..", "-db", long.as_str()] {
        refused(
            &|j: &mut Value| j["metadata"]["annotations"]["bloodraven.shipstream.io/db-url-secret"] = json!(bad),
            "not a Secret of the Job's namespace",
        );
    }
    refused(
        &|j: &mut Value| {
            ann("bloodraven.shipstream.io/db-url-secret", Some("db"))(j);
            ann("bloodraven.shipstream.io/ddl-boundary", Some("at-start"))(j);
        },
        "could never say it was not",
    );
    refused(&ann("bloodraven.shipstream.io/container", Some("web")), "no container \"web\"");
    refused(
        &|j| {
            j["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "b", "image": "b"}));
        },
        "name the one that runs the migration",
    );
    refused(
        &|j| {
            j["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("command");
        },
        "has no command",
    );
    refused(&|j| j["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure"), "use Never");
    refused(
        &|j| j["spec"]["podFailurePolicy"] = json!({"rules": [{"action": "FailJob"}, {"action": "Ignore"}]}),
        "rules[1] has action Ignore",
    );
    refused(&|j| j["spec"]["completions"] = json!(2), "spec.completions is 2");
    refused(&|j| j["spec"]["parallelism"] = json!(3), "spec.parallelism is 3");
    refused(&|j| j["spec"]["completionMode"] = json!("Indexed"), "Indexed");
    refused(
        &|j| {
            j["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "x", "mountPath": "/run/bloodraven/"}]);
        },
        "mount it elsewhere",
    );
    // With several containers, the annotation picks one.
    let mut j = job();
    j["spec"]["template"]["spec"]["containers"].as_array_mut().unwrap().insert(0, json!({"name": "log", "image": "l"}));
    j["metadata"]["annotations"]["bloodraven.shipstream.io/container"] = json!("migrate");
    let out = apply(&j);
    assert_eq!(out["spec"]["template"]["spec"]["containers"][1]["command"][1], "exec");
    assert!(out["spec"]["template"]["spec"]["containers"][0].get("command").is_none());
    // The ServiceAccount defaults to `default`.
    let mut j = job();
    j["spec"]["template"]["spec"].as_object_mut().unwrap().remove("serviceAccountName");
    assert_eq!(ask(&j).unwrap().service_account, "default");
}

#[test]
fn a_look_alike_volume_or_a_container_named_like_ours_is_refused() {
    let ask_and_patch = |j: &Value| patch(j, &ask(j).unwrap(), &settings());
    // Found by an attack: a Secret volume named bloodraven-token would hand the sidecar another token.
    let mut secret_token = job();
    secret_token["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "bloodraven-token", "secret": {"secretName": "someone-elses-token"}}]);
    let e = ask_and_patch(&secret_token).unwrap_err();
    assert!(e.contains("volume \"bloodraven-token\" is not the one"), "{e}");
    let mut other_audience = job();
    other_audience["spec"]["template"]["spec"]["volumes"] = json!([{"name": "bloodraven-token", "projected": {
        "sources": [{"serviceAccountToken": {"audience": "kubernetes", "expirationSeconds": 3600, "path": "token"}}]}}]);
    assert!(ask_and_patch(&other_audience).is_err());
    let mut host_run = job();
    host_run["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "bloodraven-run", "hostPath": {"path": "/run/shared"}}]);
    let e = ask_and_patch(&host_run).unwrap_err();
    assert!(e.contains("volume \"bloodraven-run\""), "{e}");
    // Ours, as the API server stores them (projected defaultMode defaulted): taken as ours.
    let injected = apply(&job());
    let mut stored = injected.clone();
    for v in stored["spec"]["template"]["spec"]["volumes"].as_array_mut().unwrap() {
        if let Some(p) = v.get_mut("projected") {
            p["defaultMode"] = json!(420);
        }
    }
    assert!(ask_and_patch(&stored).unwrap().0.is_empty(), "a stored injected Job needs nothing more");
    // A regular container named like the sidecar.
    let mut named = job();
    named["spec"]["template"]["spec"]["containers"][0]["name"] = json!("bloodraven-sidecar");
    let e = ask_and_patch(&named).unwrap_err();
    assert!(e.contains("rename it"), "{e}");
}

#[test]
fn annotations_on_the_pod_template_or_added_later_are_named_in_the_refusal() {
    let mut j = job();
    let annotations = j["metadata"]["annotations"].take();
    j["spec"]["template"]["metadata"] = json!({"annotations": annotations});
    assert!(!asks(&j) && template_asks(&j));
    assert!(misplaced().contains("jobTemplate.metadata.annotations"));
    assert!(too_late().contains("create it again"));
}

/// The wait for the mutex fits inside the Job's deadline with time to
/// report (the example chart's 280 s deadline met a 600 s wait: the Job
/// died by DeadlineExceeded, its Pod and logs deleted with the holder's
/// name); a deadline with no room to wait is refused.
#[test]
fn the_acquire_timeout_fits_inside_the_jobs_deadline() {
    let args = |job: &Value| -> Vec<String> {
        let out = apply(job);
        let sidecar = &out["spec"]["template"]["spec"]["initContainers"][1];
        sidecar["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect()
    };
    let probe = |job: &Value| {
        apply(job)["spec"]["template"]["spec"]["initContainers"][1]["startupProbe"]["failureThreshold"].clone()
    };
    let with_deadline = |d: i64| {
        let mut j = job();
        j["spec"]["activeDeadlineSeconds"] = json!(d);
        j
    };
    assert!(
        args(&job()).contains(&"--acquire-timeout=600".to_owned()),
        "the webhook's 3600 s deadline: the configured 600"
    );
    assert!(args(&with_deadline(280)).contains(&"--acquire-timeout=250".to_owned()));
    assert_eq!(probe(&with_deadline(280)), 60, "the probe waits for the socket, not for the leases");
    assert!(args(&with_deadline(40)).contains(&"--acquire-timeout=10".to_owned()));
    let j = with_deadline(39);
    let e = patch(&j, &ask(&j).unwrap(), &settings()).unwrap_err();
    assert!(e.contains("activeDeadlineSeconds 39") && e.contains("at least 40"), "{e}");
}

#[test]
fn a_database_url_secret_is_mounted_in_the_sidecar_only_and_the_boundary_is_the_databases() {
    for (text, secret, key) in
        [("migrator-db", "migrator-db", "url"), ("migrator.db/DATABASE_URL", "migrator.db", "DATABASE_URL")]
    {
        let mut j = job();
        j["metadata"]["annotations"]["bloodraven.shipstream.io/db-url-secret"] = json!(text);
        let out = apply(&j);
        let pod = &out["spec"]["template"]["spec"];
        let sidecar = &pod["initContainers"][1];
        let args: Vec<&str> = sidecar["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert!(args.contains(&"--db-url-file=/var/run/secrets/bloodraven-db/url"), "{args:?}");
        assert!(args.contains(&"--ddl-boundary=reported"), "{args:?}");
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "bloodraven-db-url").unwrap();
        assert_eq!(
            volume["secret"],
            json!({"secretName": secret, "items": [{"key": key, "path": "url"}], "defaultMode": 0o444})
        );
        assert!(sidecar["volumeMounts"].as_array().unwrap().iter().any(|m| m["name"] == "bloodraven-db-url"
            && m["mountPath"] == "/var/run/secrets/bloodraven-db"
            && m["readOnly"] == true));
        let migrate = &pod["containers"][0];
        assert!(!migrate.to_string().contains("bloodraven-db-url"), "the migration container does not mount it");
        // Idempotent: the API server's reinvocation adds nothing.
        let again = patch(&out, &ask(&out).unwrap(), &settings()).unwrap();
        assert!(again.0.is_empty(), "{again:?}");
        // A volume of that name that is not ours is refused.
        let mut forged = j.clone();
        forged["spec"]["template"]["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "bloodraven-db-url", "secret": {"secretName": "someone-elses"}}));
        let e = patch(&forged, &ask(&forged).unwrap(), &settings()).unwrap_err();
        assert!(e.contains("\"bloodraven-db-url\" is not the one this webhook injects"), "{e}");
    }
    // `reported` said as well is the same.
    let mut j = job();
    j["metadata"]["annotations"]["bloodraven.shipstream.io/db-url-secret"] = json!("db");
    j["metadata"]["annotations"]["bloodraven.shipstream.io/ddl-boundary"] = json!("reported");
    let out = apply(&j);
    let args = out["spec"]["template"]["spec"]["initContainers"][1]["args"].to_string();
    assert_eq!(args.matches("--ddl-boundary=reported").count(), 1, "{args}");
}
