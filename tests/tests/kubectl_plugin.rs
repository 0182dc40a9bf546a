//! The kubectl plugin (`kubectl-bloodraven`, crate `kubectl/`) against the
//! real control plane, real operators and real sites: every command run as
//! a person would run it (the real binary, a kubeconfig, its stdout, stderr
//! and exit code read), and what it says checked against what the group,
//! the deploy API and the sites show.
//!
//! - `status` (the list, one screen, `-o json|yaml`, `--watch` seeing a
//!   replica's applier stop), `explain` (automatic failover off, a
//!   MysqlDatabase of a namespace the group does not admit), `switchover`
//!   refused by admission, to an unknown site, to the active site, and
//!   completed; a ServiceAccount that may only read groups; `--context`;
//! - with the deploy API: `leases` with a migration and its hold, a
//!   switchover deferred by the hold (`--timeout` runs out, `explain` names
//!   the holder) and one followed through the hold's release to
//!   `Completed`; `revoke` of a lease inside its DDL; `verify-schema`.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::panic)] // test helpers: a failed step fails the test

use std::time::Duration;

use bloodraven_api::v1alpha1::MysqlFailoverGroupStatus;
use bloodraven_e2e::deploy::{self, token_of};
use bloodraven_e2e::fixtures::{
    self, SITE_SECRET, Scenario, condition, has_condition, is_ready_at, wait_events, wait_status,
};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::plugin::{Output, Plugin, kubeconfig_with_rules, row, rule, table};
use bloodraven_e2e::wait_for;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

fn at_phase(s: &MysqlFailoverGroupStatus, id: &str, phase: &str) -> Result<(), String> {
    match &s.planned_failover {
        Some(p) if p.request_id == id && p.phase == phase => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// The request id `switchover` says it wrote.
#[track_caller]
fn requested_id(out: &Output) -> String {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("switchover ").and_then(|l| l.split_once(" requested:")).map(|(id, _)| id))
        .unwrap_or_else(|| panic!("no `switchover ID requested` line:\n{out}"))
        .to_owned()
}

/// The value after `Key:` on a screen (`status GROUP` header lines).
fn field<'a>(screen: &'a str, key: &str) -> Option<&'a str> {
    screen.lines().find_map(|l| l.strip_prefix(&format!("{key}:"))).map(str::trim)
}

/// The section of a screen from the line `title` to the next section title
/// (a line that ends with `:` and does not start with a space) or the end.
fn section<'a>(screen: &'a str, title: &str) -> &'a str {
    let Some(start) = screen.find(&format!("\n{title}\n")) else { return "" };
    let body = &screen[start + title.len() + 2..];
    let end = body
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| body[i..].lines().next().is_some_and(|l| !l.starts_with(' ') && l.ends_with(':')))
        .unwrap_or(body.len());
    &body[..end]
}

/// The screens a `status GROUP --watch` printed so far (each begins `Group:`).
fn frames(out: &str) -> Vec<String> {
    out.split("Group:").skip(1).map(|f| format!("Group:{f}")).collect()
}

/// The REPLICATING cell of `site` on a status screen.
fn replicating(screen: &str, site: &str) -> Option<String> {
    let sites = table(section(screen, "Sites:"), &["SITE", "ENDPOINT"]);
    row(&sites, "SITE", site).map(|r| r["REPLICATING"].clone())
}

const MFG: &str = "mysqlfailovergroups";
const BLOODRAVEN: &str = "bloodraven.shipstream.io";

/// A ServiceAccount `viewer` that may get, list and watch
/// MysqlFailoverGroups and nothing else; returns a kubeconfig for it.
async fn viewer_kubeconfig(sc: &Scenario) -> std::path::PathBuf {
    let rules = vec![rule(BLOODRAVEN, &[MFG], &["get", "list", "watch"])];
    kubeconfig_with_rules(&sc.cluster, &sc.ns.name, "viewer", rules, &sc.ns.name, Vec::new()).await
}

/// A ServiceAccount `oncall` with exactly what docs/kubectl-plugin.md
/// ("What it needs from RBAC") says `revoke` and `verify-schema` need:
/// `get` and `patch` on the groups, `list` on the Leases of the operators'
/// namespace; returns a kubeconfig for it.
async fn oncall_kubeconfig(cluster: &bloodraven_e2e::Cluster, ns: &str) -> std::path::PathBuf {
    let cluster_rules = vec![rule(BLOODRAVEN, &[MFG], &["get", "patch"])];
    let leases = vec![rule("coordination.k8s.io", &["leases"], &["list"])];
    kubeconfig_with_rules(cluster, ns, "oncall", cluster_rules, ns, leases).await
}

/// Runs `status GROUP` as `plugin` until it answers (a new binding takes a
/// moment to be seen by the authorizer).
async fn wait_readable(plugin: &Plugin, g: &str) -> Output {
    wait_for("the new RBAC to take effect", T, || async {
        let out = plugin.run(&["status", g]).await;
        if out.code == 0 { Ok(out) } else { Err(out.to_string()) }
    })
    .await
}

/// A copy of the admin kubeconfig with two contexts: `dead` (current; a
/// server nobody listens on) and `live` (the run's API server).
fn two_contexts(sc: &Scenario) -> std::path::PathBuf {
    let admin: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(bloodraven_e2e::plugin::admin_kubeconfig()).unwrap()).unwrap();
    let live_cluster = admin["clusters"][0].clone();
    let mut dead_cluster = live_cluster.clone();
    dead_cluster["name"] = json!("dead");
    dead_cluster["cluster"]["server"] = json!("https://127.0.0.1:9");
    let user = admin["users"][0]["name"].clone();
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [live_cluster, dead_cluster],
        "users": admin["users"],
        "contexts": [
            {"name": "dead", "context": {"cluster": "dead", "user": user}},
            {"name": "live", "context": {"cluster": admin["clusters"][0]["name"], "user": user}},
        ],
        "current-context": "dead",
    });
    let path = bloodraven_e2e::e2e_dir().join(format!("kubeconfig-two-contexts-{}", sc.ns.name));
    std::fs::write(&path, serde_saphyr::to_string(&kubeconfig).unwrap()).unwrap();
    path
}

/// What a ServiceAccount that may only read groups sees: the screen
/// without the leases; no leases, no revocation, no switchover.
async fn a_reader_of_groups_only(sc: &Scenario, kb: &Plugin, g: &str) {
    let groups = sc.cluster.groups();
    let viewer = kb.with_kubeconfig(viewer_kubeconfig(sc).await);
    let out = wait_readable(&viewer, g).await;
    assert_eq!(field(&out.stdout, "Active site"), Some("iad (topology generation 1)"), "{out}");
    let note = section(&out.stdout, "Deploy leases:");
    for want in ["forbidden", "\"list\"", "leases.coordination.k8s.io", &format!("in namespace {}", sc.ns.name)] {
        assert!(note.contains(want), "{want:?} not in the leases note {note:?}:\n{out}");
    }
    let json = viewer.run(&["status", g, "-o", "json"]).await.expect_code(0).json();
    assert!(json["leasesError"].as_str().is_some_and(|e| e.contains("forbidden")), "{json}");
    assert!(json.get("leases").is_none(), "{json}");
    viewer.run(&["leases", g]).await.expect_code(1).stderr_has(&[
        "forbidden",
        "verb \"list\"",
        "leases.coordination.k8s.io",
        &format!("in namespace {}", sc.ns.name),
    ]);
    viewer.run(&["revoke", g, "--reason", "a reader tries"]).await.expect_code(1).stderr_has(&["verb \"list\""]);
    viewer.run(&["explain", g]).await.expect_code(0).stdout_has(&["Why is the switchover deferred?", "forbidden"]);
    let out = viewer.run(&["switchover", g, "--to", "pdx"]).await;
    out.expect_code(1).stderr_has(&["forbidden", "verb \"patch\"", "mysqlfailovergroups"]);
    let s = groups.get(g).await.unwrap();
    assert!(s.spec.planned_failover.is_none(), "the refused switchover wrote a request: {:?}", s.spec.planned_failover);
}

/// A group no operator manages: nothing decided, nothing observed.
async fn a_group_no_operator_manages(sc: &Scenario, kb: &Plugin) {
    let orphan = format!("{}-orphan", sc.ns.name);
    let lonely = fixtures::group(&orphan, "no-operator-selects-this", sc.pair.sites(&sc.ns.name, SITE_SECRET), "iad");
    fixtures::create_group(&sc.cluster, &lonely).await;
    let out = kb.run(&["status", &orphan]).await;
    out.expect_code(0);
    assert_eq!(field(&out.stdout, "Active site"), Some("none decided yet (bootstrap pending)"), "{out}");
    assert_eq!(field(&out.stdout, "Stable"), Some("unknown (not observed yet)"), "{out}");
    assert_eq!(section(&out.stdout, "Conditions:").trim(), "none reported yet", "{out}");
    let list = kb.run(&["status"]).await;
    let listed = table(&list.stdout, &["NAME", "ACTIVE"]);
    let r = row(&listed, "NAME", &orphan).unwrap_or_else(|| panic!("{list}"));
    assert_eq!((r["ACTIVE"].as_str(), r["GENERATION"].as_str(), r["READY"].as_str()), ("-", "-", "-"), "{list}");
    let out = kb.run(&["switchover", &orphan, "--to", "pdx"]).await;
    out.expect_code(1).stderr_has(&["no decided active site"]);
    kb.run(&["explain", &orphan]).await.expect_code(0).stdout_has(&["Not reported yet"]);
    sc.cluster.delete_group(&orphan).await;
}

/// A bad `-o`, a group or kubeconfig that does not exist, and `--context`.
async fn bad_usage_bad_names_and_contexts(sc: &Scenario, kb: &Plugin, g: &str) {
    // A format that does not exist is bad usage.
    let bad = kb.run(&["status", g, "-o", "xml"]).await;
    bad.expect_code(2).stderr_has(&["xml"]);
    assert!(bad.stdout.is_empty(), "{bad}");
    // A group that does not exist.
    for args in [
        &["status", "no-such-group"][..],
        &["leases", "no-such-group"],
        &["explain", "no-such-group"],
        &["switchover", "no-such-group", "--to", "pdx"],
        &["revoke", "no-such-group", "--reason", "typo"],
        &["verify-schema", "no-such-group"],
        &["wait", "no-such-group"],
    ] {
        kb.run(args).await.expect_code(1).stderr_has(&["\"no-such-group\" not found"]);
    }
    let list = kb.run(&["status", "-o", "yaml"]).await.expect_code(0).yaml();
    assert!(list.as_array().unwrap().iter().any(|r| r["name"] == g), "{list}");
    let nowhere = kb.with_kubeconfig(sc.pair.dir().join("no-such-kubeconfig"));
    nowhere.run(&["status"]).await.expect_code(1).stderr_has(&["cannot read kubeconfig"]);

    // --context picks the context; the current one is dead.
    let two = kb.with_kubeconfig(two_contexts(sc));
    let live = two.with_context("live").run(&["status", g, "-o", "json"]).await;
    assert_eq!(live.expect_code(0).json()["activeSite"], "iad");
    two.run(&["status", g]).await.expect_code(1);
    two.with_context("no-such-context").run(&["status", g]).await.expect_code(1);
}

#[tokio::test]
async fn status_explain_and_a_reader_of_groups_only() {
    let sc = Scenario::start("plugin", 1, LeaderTimings::default()).await;
    let g = sc.bootstrapped_group("g").await;
    let kb = Plugin::admin(&sc.ns.name);
    let groups = sc.cluster.groups();

    // The list: one line per group, ours at iad, generation 1, Ready.
    let out = kb.run(&["status"]).await;
    out.expect_code(0);
    let list = table(&out.stdout, &["NAME", "ACTIVE", "GENERATION"]);
    let ours = row(&list, "NAME", &g).unwrap_or_else(|| panic!("{g} not listed:\n{out}"));
    assert_eq!((ours["ACTIVE"].as_str(), ours["GENERATION"].as_str()), ("iad", "1"), "{out}");
    assert_eq!((ours["READY"].as_str(), ours["OPERATION"].as_str()), ("True", "-"), "{out}");
    let all = kb.run(&["status", "-o", "json"]).await;
    let all = all.expect_code(0).json();
    assert!(all.as_array().unwrap().iter().any(|r| r["name"] == g.as_str()), "{all}");

    // One screen.
    let out = kb.run(&["status", &g]).await;
    out.expect_code(0);
    let screen = &out.stdout;
    assert_eq!(field(screen, "Group"), Some(g.as_str()), "{out}");
    assert_eq!(field(screen, "Active site"), Some("iad (topology generation 1)"), "{out}");
    assert_eq!(field(screen, "Stable"), Some("yes"), "{out}");
    assert_eq!(field(screen, "Automatic failover"), Some("on"), "{out}");
    let sites = table(section(screen, "Sites:"), &["SITE", "ENDPOINT"]);
    assert_eq!(sites.len(), 2, "{out}");
    let (iad, pdx) = (row(&sites, "SITE", "iad").unwrap(), row(&sites, "SITE", "pdx").unwrap());
    assert_eq!((iad["ROLE"].as_str(), iad["REACHABLE"].as_str(), iad["WRITABLE"].as_str()), ("primary", "yes", "yes"));
    assert_eq!((pdx["ROLE"].as_str(), pdx["WRITABLE"].as_str(), pdx["REPLICATING"].as_str()), ("replica", "no", "yes"));
    assert_eq!(iad["ENDPOINT"], format!("127.0.0.1:{}", sc.pair.port("iad")), "{out}");
    let conditions = table(section(screen, "Conditions:"), &["TYPE", "STATUS"]);
    assert_eq!(row(&conditions, "TYPE", "Ready").map(|r| r["STATUS"].as_str()), Some("True"), "{out}");
    screen_agrees_with_status(&out, &groups.get(&g).await.unwrap().status.unwrap());
    assert_eq!(section(screen, "Deploy leases:").trim(), "none held", "{out}");
    assert_eq!(section(screen, "Operation:").trim(), "none in flight", "{out}");

    // For machines: the same facts.
    for (format, parsed) in [
        ("json", kb.run(&["status", &g, "-o", "json"]).await.expect_code(0).json()),
        ("yaml", kb.run(&["status", &g, "--output", "yaml"]).await.expect_code(0).yaml()),
    ] {
        assert_eq!((parsed["activeSite"].as_str(), parsed["topologyGeneration"].as_i64()), (Some("iad"), Some(1)));
        let roles: Vec<(&str, &str)> = parsed["sites"]
            .as_array()
            .unwrap_or_else(|| panic!("{format}: no sites: {parsed}"))
            .iter()
            .map(|s| (s["name"].as_str().unwrap(), s["role"].as_str().unwrap()))
            .collect();
        assert_eq!(roles, [("iad", "primary"), ("pdx", "replica")], "{format}");
        let ready = parsed["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready");
        assert_eq!(ready.map(|c| c["status"].clone()), Some(json!("True")), "{format}: {parsed}");
        assert_eq!(parsed["leases"]["grants"], json!([]), "{format}: {parsed}");
    }
    bad_usage_bad_names_and_contexts(&sc, &kb, &g).await;
    a_group_no_operator_manages(&sc, &kb).await;

    // explain: the four questions, nothing deferred or held.
    let out = kb.run(&["explain", &g]).await;
    out.expect_code(0).stdout_has(&[
        "Why is the switchover deferred?",
        "No switchover, ordered update or restore-in-place is in flight.",
        "Why is automatic failover held?",
        "It is not held",
        "Why is a MysqlDatabase not authoritative?",
        "Which accounts bypass read-only?",
    ]);
    // Automatic failover off; a database of the group's namespace and one
    // of a namespace the group does not admit.
    let off = json!({"spec": {"failover": {"automatic": false}}});
    groups.patch(&g, &PatchParams::default(), &Patch::Merge(&off)).await.unwrap();
    deploy::database(&sc.cluster, &sc.ns.name, "counter-app", &g, &[(&sc.ns.name, "deployer")]).await;
    let stray_ns = sc.cluster.namespace("plugin-stray").await;
    deploy::database(&sc.cluster, &stray_ns.name, "stray", &g, &[(&stray_ns.name, "deployer")]).await;
    let refused = deploy::wait_database_reason(&sc.cluster, &stray_ns.name, "stray", "NamespaceNotAllowed").await;
    deploy::wait_database_reason(&sc.cluster, &sc.ns.name, "counter-app", "GroupFound").await;
    let out = kb.run(&["explain", &g]).await;
    out.expect_code(0).stdout_has(&[
        "It is off: spec.failover.automatic is false",
        &format!("{}/stray: not authoritative — NamespaceNotAllowed: {refused}", stray_ns.name),
        &format!("{}/counter-app: authoritative (GroupFound)", sc.ns.name),
        &format!("Instance name counter-app is claimed by namespace {}.", sc.ns.name),
    ]);
    // The read-only bypass answer is the condition's, whatever it says.
    let s = groups.get(&g).await.unwrap().status.unwrap();
    match condition(&s, "ReadOnlyBypassAccounts") {
        Some(c) => out.stdout_has(&[&c.message]),
        None => out.stdout_has(&["Not reported yet"]),
    };
    assert!(!out.stdout.contains("It is not held"), "{out}");
    let out = kb.run(&["status", &g]).await;
    assert_eq!(field(&out.stdout, "Automatic failover"), Some("off (spec.failover.automatic: false)"), "{out}");

    a_reader_of_groups_only(&sc, &kb, &g).await;
    sc.cluster.delete_group(&g).await;

    // --watch of a group that does not exist ends as a plain status does
    // (a mistyped name must not leave a watch that never shows anything).
    let out = kb.spawn(&["status", "no-such-group", "--watch"]).finish(Duration::from_secs(20)).await;
    out.expect_code(1).stderr_has(&["\"no-such-group\" not found"]);
}

/// Exactly what docs/kubectl-plugin.md says `switchover` and `wait` need
/// (get and patch on the groups): --wait follows to the end; `wait` follows
/// a request a pipeline wrote, before the operator took it up.
async fn switchover_and_wait_with_get_and_patch_only(sc: &Scenario, kb: &Plugin, g: &str) {
    let rules = vec![rule(BLOODRAVEN, &[MFG], &["get", "patch"])];
    let switcher = kubeconfig_with_rules(&sc.cluster, &sc.ns.name, "switcher", rules, &sc.ns.name, Vec::new()).await;
    let switcher = kb.with_kubeconfig(switcher);
    wait_readable(&switcher, g).await;
    let watch = switcher.spawn(&["status", g, "--watch"]);
    watch
        .wait_stdout("a frame for a user who may only get", T, |out| {
            if frames(out).is_empty() { Err("no frame".into()) } else { Ok(()) }
        })
        .await;
    watch.interrupt(Duration::from_secs(10)).await.expect_code(0);
    let out = switcher.run(&["switchover", g, "--to", "iad", "--wait", "--timeout", "60s"]).await;
    let id = requested_id(&out);
    wait_status(&sc.cluster, g, "the switcher's switchover completed at iad", T, |s| {
        at_phase(s, &id, "Completed")?;
        is_ready_at(s, "iad", 3)
    })
    .await;
    out.expect_code(0).stdout_has(&[&format!(
        "switchover {id} Completed: iad is the active site of group {g} at topology generation 3"
    )]);
    switcher.run(&["wait", g]).await.expect_code(0).stdout_has(&["Nothing is in flight or requested"]);
    sc.request_failover(g, "pdx", "pipeline-1").await;
    let waited = switcher.run(&["wait", g, "--timeout", "120s"]).await;
    waited.expect_code(0).stderr_has(&["following switchover pipeline-1", "Draining"]).stdout_has(&[&format!(
        "switchover pipeline-1 Completed: pdx is the active site of group {g} at topology generation 4"
    )]);
    let again = switcher.run(&["wait", g, "--request-id", "pipeline-1"]).await;
    again.expect_code(0).stdout_has(&["switchover pipeline-1 Completed"]);
    switcher.run(&["wait", g, "--request-id", "no-such-request"]).await.expect_code(1).stderr_has(&["no request"]);
    // One line per phase, not a loop of retries.
    let lines = out.stderr.lines().count();
    assert!(lines < 30, "{lines} lines of progress:\n{out}");
}

#[tokio::test]
async fn status_watch_and_switchover() {
    let mut sc = Scenario::start("pluginsw", 1, LeaderTimings::default()).await;
    let g = sc.bootstrapped_group("g").await;
    let kb = Plugin::admin(&sc.ns.name);
    let groups = sc.cluster.groups();

    // --watch: a frame, then the replica's applier stops: another frame says so.
    let watch = kb.spawn(&["status", &g, "--watch"]);
    let first = watch
        .wait_stdout("the first frame", T, |out| {
            frames(out).first().filter(|f| f.contains("none in flight")).cloned().ok_or_else(|| "no frame".into())
        })
        .await;
    assert_eq!(replicating(&first, "pdx").as_deref(), Some("yes"), "{first}");
    sc.pair.stop_applier("pdx");
    let later = watch
        .wait_stdout("a frame showing pdx not replicating", T, |out| {
            frames(out)
                .into_iter()
                .skip(1)
                .find(|f| replicating(f, "pdx").as_deref() == Some("no"))
                .ok_or_else(|| "not yet".into())
        })
        .await;
    assert!(later.contains("Deploy leases:") && later.contains("Conditions:"), "a whole screen: {later}");
    // Ctrl-C ends it, as a finished command.
    let out = watch.interrupt(Duration::from_secs(10)).await;
    out.expect_code(0);
    assert!(out.stderr.is_empty(), "{out}");

    // A switchover to a replica whose applier is stopped: refused by admission.
    wait_status(&sc.cluster, &g, "pdx seen not replicating", T, |s| {
        match s.health.iter().find(|h| h.site == "pdx").and_then(|h| h.replication_running) {
            Some(false) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let out = kb.run(&["switchover", &g, "--to", "pdx", "--wait", "--timeout", "90s"]).await;
    out.expect_code(1);
    let id = requested_id(&out);
    let s = groups.get(&g).await.unwrap().status.unwrap();
    let said = match (&s.planned_failover, &s.ignored_planned_failover) {
        (Some(p), _) if p.request_id == id => {
            assert_eq!(p.phase, "Failed", "{p:?}\n{out}");
            p.message.clone().unwrap_or_default()
        }
        (_, Some(i)) if i.request_id == id => i.message.clone(),
        other => panic!("request {id} is not in status: {other:?}\n{out}"),
    };
    assert!(!said.is_empty(), "{s:?}");
    out.stdout_has(&[&said]);
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)), "{out}");
    if s.planned_failover.as_ref().is_some_and(|p| p.request_id == id) {
        let screen = kb.run(&["status", &g]).await;
        screen.expect_code(0).stdout_has(&[&format!("last: switchover {id} → pdx: Failed"), &said]);
    }
    // A request id the CRD would refuse is refused before anything is written.
    let out = kb.run(&["switchover", &g, "--to", "pdx", "--request-id", "a b"]).await;
    out.expect_code(1).stderr_has(&["--request-id"]);

    // Unknown site; the active site.
    sc.pair.start_applier("pdx");
    wait_status(&sc.cluster, &g, "Ready at iad again", T, |s| is_ready_at(s, "iad", 1)).await;
    let out = kb.run(&["switchover", &g, "--to", "sfo"]).await;
    out.expect_code(1).stderr_has(&["has no site \"sfo\"", "its sites are iad, pdx"]);
    let out = kb.run(&["switchover", &g, "--to", "iad", "--wait"]).await;
    out.expect_code(0).stdout_has(&["iad is already the active site", "generation 1", "nothing to do"]);
    assert_eq!(groups.get(&g).await.unwrap().spec.planned_failover.as_ref().map(|p| p.request_id.clone()), Some(id));

    // A switchover followed to its end.
    let out = kb.run(&["switchover", &g, "--to", "pdx", "--wait", "--timeout", "120s"]).await;
    out.expect_code(0);
    // What a person sees (docs/kubectl-plugin.md shows a run of it).
    eprintln!("example:\n{out}");
    let id = requested_id(&out);
    out.stdout_has(&[&format!(
        "switchover {id} Completed: pdx is the active site of group {g} at topology generation 2"
    )]);
    out.stderr_has(&["Admitting", "Draining", "Promoting", "Completed"]);
    let s = wait_status(&sc.cluster, &g, "Ready at pdx, generation 2", T, |s| {
        at_phase(s, &id, "Completed")?;
        is_ready_at(s, "pdx", 2)
    })
    .await;
    assert_eq!(s.active_site.as_deref(), Some("pdx"));
    let json = kb.run(&["status", &g, "-o", "json"]).await.expect_code(0).json();
    assert_eq!((json["activeSite"].as_str(), json["topologyGeneration"].as_i64()), (Some("pdx"), Some(2)), "{json}");
    let out = kb.run(&["status", &g]).await;
    let sites = table(section(&out.stdout, "Sites:"), &["SITE", "ENDPOINT"]);
    assert_eq!(row(&sites, "SITE", "pdx").map(|r| r["ROLE"].as_str()), Some("primary"), "{out}");
    assert_eq!(row(&sites, "SITE", "iad").map(|r| r["ROLE"].as_str()), Some("replica"), "{out}");
    out.stdout_has(&[&format!("last: switchover {id} → pdx: Completed")]);

    switchover_and_wait_with_get_and_patch_only(&sc, &kb, &g).await;

    // A request a pipeline wrote that the operator has not taken up yet (it
    // is down): `wait` follows it until its timeout, and a switchover does
    // not replace it (docs/kubectl-plugin.md: it never overwrites another
    // person's request written a moment before).
    assert!(sc.operators[0].stop().await, "the operator did not stop cleanly");
    sc.request_failover(&g, "iad", "pipeline-2").await;
    let out = kb.run(&["wait", &g, "--timeout", "3s"]).await;
    out.expect_code(3).stderr_has(&["following switchover pipeline-2"]);
    let out = kb.run(&["switchover", &g, "--to", "iad"]).await;
    let spec = groups.get(&g).await.unwrap().spec.planned_failover;
    assert_eq!(spec.as_ref().map(|p| p.request_id.as_str()), Some("pipeline-2"), "the request was replaced:\n{out}");
    out.expect_code(1).stderr_has(&["pipeline-2"]);
}

/// `leases` and `status` list the migration and the hold of operation
/// `op-1` of `client`, both live.
async fn both_grants_listed(kb: &Plugin, g: &str, client: &str) {
    let out = kb.run(&["leases", g]).await;
    out.expect_code(0);
    let grants = table(&out.stdout, &["KIND", "HOLDER", "INSTANCE", "CLIENT"]);
    assert_eq!(grants.len(), 2, "{out}");
    for kind in ["migration", "failover-hold"] {
        let r = row(&grants, "KIND", kind).unwrap_or_else(|| panic!("no {kind} row:\n{out}"));
        assert_eq!(
            (r["HOLDER"].as_str(), r["INSTANCE"].as_str(), r["CLIENT"].as_str(), r["GENERATION"].as_str()),
            ("op-1", "counter-app", client, "1"),
            "{out}"
        );
        assert!(r["EXPIRES"].starts_with("in "), "{out}");
        assert_eq!(r["REVOKED"], "-", "{out}");
    }
    let json = kb.run(&["leases", g, "-o", "json"]).await.expect_code(0).json();
    let kinds: Vec<&str> = json["grants"].as_array().unwrap().iter().map(|g| g["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["migration", "failover-hold"], "{json}");
    assert!(json["grants"].as_array().unwrap().iter().all(|g| g["operationId"] == "op-1" && g["expired"] == false));
    let out = kb.run(&["status", g]).await;
    let held = table(section(&out.stdout, "Deploy leases:"), &["KIND", "HOLDER"]);
    assert_eq!(held.len(), 2, "{out}");
}

#[tokio::test]
async fn leases_and_a_switchover_deferred_by_a_hold() {
    let ds = deploy::scenario("plugindep").await;
    let (p, cluster) = (&ds.pipeline, &ds.sc.cluster);
    let g = p.group.clone();
    let ns = ds.sc.ns.name.clone();
    let client = format!("{ns}/deployer");
    let kb = Plugin::admin(&ns);

    // Nothing held.
    kb.run(&["leases", &g]).await.expect_code(0).stdout_has(&[&format!("No deploy lease is held on group {g}.")]);

    // A migration and its failover-hold.
    let m1 = p.post_until(201, "migration", "op-1", "counter-app", 120).await;
    let h1 = p.post("failover-hold", "op-1", "counter-app", 120).await;
    assert_eq!(h1.status, 201, "{h1:?}");
    both_grants_listed(&kb, &g, &client).await;

    // A switchover deferred by the hold: --timeout runs out, the request goes on.
    let out = kb.run(&["switchover", &g, "--to", "pdx", "--wait", "--timeout", "15s"]).await;
    out.expect_code(3).stderr_has(&["Deferred by DeploymentHold", "op-1", "counter-app", "still Deferred after 15s"]);
    let d1 = requested_id(&out);
    assert!(d1.starts_with("switchover-"), "{d1}");
    wait_status(cluster, &g, "the request deferred", T, |s| at_phase(s, &d1, "Deferred")).await;
    let out = kb.run(&["explain", &g]).await;
    out.expect_code(0).stdout_has(&[
        &format!("switchover {d1} → pdx: Deferred"),
        "waits for admission: DeploymentHold",
        &format!("The failover-hold is held by operation op-1 (instance counter-app, client {client})"),
        &format!("kubectl bloodraven revoke {g} --reason"),
        "Why is the group not stable?",
    ]);
    let out = kb.run(&["status", &g]).await;
    eprintln!("example:\n{out}");
    out.expect_code(0).stdout_has(&[&format!("switchover {d1} → pdx: Deferred"), "deferred by DeploymentHold"]);
    let stable = field(&out.stdout, "Stable").unwrap_or_default();
    assert!(stable.starts_with("no: OperationInProgress — "), "{out}");
    let json = kb.run(&["status", &g, "-o", "json"]).await.expect_code(0).json();
    let op = &json["operations"][0];
    assert_eq!(
        (op["kind"].as_str(), op["requestId"].as_str(), op["inFlight"].as_bool()),
        (Some("switchover"), Some(d1.as_str()), Some(true)),
        "{json}"
    );
    assert_eq!(op["admission"]["deferReason"], "DeploymentHold", "{json}");
    let list = kb.run(&["status"]).await;
    let list_table = table(&list.stdout, &["NAME", "ACTIVE"]);
    assert_eq!(
        row(&list_table, "NAME", &g).map(|r| r["OPERATION"].as_str()),
        Some("switchover Deferred → pdx"),
        "{list}"
    );
    // One operation at a time.
    let out = kb.run(&["switchover", &g, "--to", "pdx"]).await;
    out.expect_code(1).stderr_has(&["in flight", &d1]);
    // `wait` picks up the request in flight; released, it completes by itself.
    let waiting = kb.spawn(&["wait", &g, "--timeout", "180s"]);
    wait_stderr(&waiting, &format!("following switchover {d1}")).await;
    wait_stderr(&waiting, "Deferred by DeploymentHold").await;
    let released = p.delete("migration", "op-1", &token_of(&m1)).await;
    assert_eq!(released.status, 204, "{released:?}");
    let out = waiting.finish(Duration::from_secs(120)).await;
    out.expect_code(0).stdout_has(&[&format!(
        "switchover {d1} Completed: pdx is the active site of group {g} at topology generation 2"
    )]);
    wait_status(cluster, &g, "d1 completed at pdx", T, |s| {
        at_phase(s, &d1, "Completed")?;
        is_ready_at(s, "pdx", 2)
    })
    .await;
    // The migration's release took its hold with it.
    kb.run(&["leases", &g]).await.expect_code(0).stdout_has(&[&format!("No deploy lease is held on group {g}.")]);

    // Deferred again, followed by --wait through the release to Completed.
    let m2 = p.post_until(201, "migration", "op-2", "counter-app", 120).await;
    let h2 = p.post("failover-hold", "op-2", "counter-app", 120).await;
    assert_eq!(h2.status, 201, "{h2:?}");
    let follow = kb.spawn(&["switchover", &g, "--to", "iad", "--wait", "--timeout", "180s", "--request-id", "back-1"]);
    wait_status(cluster, &g, "back-1 deferred", T, |s| at_phase(s, "back-1", "Deferred")).await;
    follow
        .wait_stdout("the request said", T, |out| {
            if out.contains("switchover back-1 requested") { Ok(()) } else { Err("not yet".into()) }
        })
        .await;
    wait_stderr(&follow, "op-2").await;
    let released = p.delete("migration", "op-2", &token_of(&m2)).await;
    assert_eq!(released.status, 204, "{released:?}");
    let out = follow.finish(Duration::from_secs(120)).await;
    out.expect_code(0).stdout_has(&[&format!(
        "switchover back-1 Completed: iad is the active site of group {g} at topology generation 3"
    )]);
    out.stderr_has(&["Deferred by DeploymentHold", "op-2", "Draining", "Promoting", "Completed"]);
    let deferred_at = out.stderr.find("Deferred").unwrap();
    assert!(out.stderr[deferred_at..].contains("Draining"), "phases out of order:\n{out}");
    wait_status(cluster, &g, "Ready at iad, generation 3", T, |s| is_ready_at(s, "iad", 3)).await;
    // A request id is used once.
    let out = kb.run(&["switchover", &g, "--to", "pdx", "--request-id", "back-1"]).await;
    out.expect_code(1).stderr_has(&["back-1 was already used"]);
    // An id used before the last one: the operator does not take it up,
    // and --wait says so.
    let out = kb.run(&["switchover", &g, "--to", "pdx", "--request-id", &d1, "--wait", "--timeout", "60s"]).await;
    let s = cluster.groups().get(&g).await.unwrap().status.unwrap();
    let ignored = s.ignored_planned_failover.as_ref().filter(|i| i.request_id == d1);
    let ignored = ignored.unwrap_or_else(|| panic!("{d1} not ignored: {s:?}\n{out}"));
    out.expect_code(1).stdout_has(&["not taken up", &ignored.message]);
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(3)), "{out}");

    cluster.delete_group(&g).await;
}

/// With nothing held: nothing to revoke or verify, and nothing written;
/// a reason is one line of at most 256 characters.
async fn nothing_to_revoke_and_bad_reasons(cluster: &bloodraven_e2e::Cluster, kb: &Plugin, oncall: &Plugin, g: &str) {
    oncall.run(&["revoke", g, "--reason", "nothing runs"]).await.expect_code(0).stdout_has(&["nothing to revoke"]);
    for bad in ["", "   ", "two\nlines", "\u{1b}[2J", &"x".repeat(257)] {
        kb.run(&["revoke", g, "--reason", bad]).await.expect_code(1).stderr_has(&["--reason"]);
    }
    kb.run(&["revoke", g]).await.expect_code(2).stderr_has(&["--reason"]);
    kb.run(&["revoke", g, "--reason", "x", "--timeout", "5d"]).await.expect_code(2);
    oncall.run(&["verify-schema", g]).await.expect_code(0).stdout_has(&["Nothing awaits schema verification"]);
    let annotations = cluster.groups().get(g).await.unwrap().metadata.annotations.unwrap_or_default();
    assert!(!annotations.keys().any(|k| k.contains("revoke") || k.contains("schema-verified")), "{annotations:?}");
}

/// A migration and its hold, both revoked; the record awaits a person, and
/// `verify-schema --all` cannot be acted on while the operator is down:
/// exit 3, the annotation stays for when it is back.
async fn verify_all_while_the_operator_is_down(ds: &mut deploy::DeployScenario, oncall: &Plugin) {
    let (p, cluster, g) = (ds.pipeline.clone(), ds.sc.cluster.clone(), ds.pipeline.group.clone());
    let m4 = p.post_until(201, "migration", "op-4", "counter-app", 20).await;
    let h4 = p.post("failover-hold", "op-4", "counter-app", 20).await;
    assert_eq!(h4.status, 201, "{h4:?}");
    let put = p.put_body("migration", "op-4", json!({"token": token_of(&m4), "ddlState": "started"})).await;
    assert_eq!(put.status, 200, "{put:?}");
    let out = oncall.run(&["revoke", &g, "--reason", "release 142 is wrong"]).await;
    out.expect_code(0).stdout_has(&["revoked migration op-4", "revoked failover-hold op-4"]);
    wait_announced(oncall, &g, "op-4").await;
    assert!(ds.op.stop().await, "the operator did not stop cleanly");
    let out = oncall.run(&["verify-schema", &g, "--all", "--timeout", "3s"]).await;
    out.expect_code(3).stderr_has(&["has not acted within 3s"]);
    let annotations = cluster.groups().get(&g).await.unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("bloodraven.shipstream.io/schema-verified").map(String::as_str),
        Some("op-4"),
        "{annotations:?}"
    );
}

#[tokio::test]
async fn revoke_and_verify_schema() {
    let mut ds = deploy::scenario("pluginrv").await;
    let (p, cluster) = (ds.pipeline.clone(), ds.sc.cluster.clone());
    let g = p.group.clone();
    let ns = ds.sc.ns.name.clone();
    let client = format!("{ns}/deployer");
    let kb = Plugin::admin(&ns);
    // The on-call person, with the roles the plugin's docs give.
    let oncall = kb.with_kubeconfig(oncall_kubeconfig(&cluster, &ns).await);
    let who = format!("system:serviceaccount:{ns}:oncall");
    wait_readable(&oncall, &g).await;

    nothing_to_revoke_and_bad_reasons(&cluster, &kb, &oncall, &g).await;

    // A migration inside its DDL, revoked by a person. (A short TTL: a
    // revoked lease keeps the mutex until its deadline.)
    let m3 = p.post_until(201, "migration", "op-3", "counter-app", 20).await;
    let put = p
        .put_body("migration", "op-3", json!({"token": token_of(&m3), "ddlState": "started", "revision": "V142"}))
        .await;
    assert_eq!(put.status, 200, "{put:?}");
    let json = oncall.run(&["leases", &g, "-o", "json"]).await.expect_code(0).json();
    assert_eq!(
        (json["grants"][0]["ddlState"].as_str(), json["grants"][0]["revision"].as_str()),
        (Some("started"), Some("V142")),
        "{json}"
    );
    let reason = "migration stuck in CI";
    let out = oncall.run(&["revoke", &g, "--reason", reason]).await;
    out.expect_code(0).stdout_has(&["revoked migration op-3 (instance counter-app)", "never renewed"]);
    let revoked = p.put("migration", "op-3", &token_of(&m3)).await;
    assert_eq!(
        (revoked.status, revoked.body["error"].as_str(), revoked.body["reason"].as_str()),
        (409, Some("revoked"), Some("OperatorRevoked")),
        "{revoked:?}"
    );
    let notes = wait_events(&cluster, &g, "DeploymentLeaseRevoked", &[&["op-3", "OperatorRevoked"]]).await;
    assert!(
        notes[0].contains(&format!("requested by {who}")) && notes[0].contains(reason),
        "the Event does not say who asked and why: {}",
        notes[0]
    );
    let annotations = cluster.groups().get(&g).await.unwrap().metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key("bloodraven.shipstream.io/revoke-deployment-leases"), "{annotations:?}");
    oncall.run(&["revoke", &g, "--reason", reason]).await.expect_code(0).stdout_has(&["nothing to revoke"]);
    // The revoked grant keeps its slot until its deadline, marked revoked.
    let out = oncall.run(&["leases", &g]).await;
    let grants = table(&out.stdout, &["KIND", "HOLDER"]);
    let revoked_grant = row(&grants, "HOLDER", "op-3");
    assert!(revoked_grant.is_none_or(|r| r["REVOKED"] == "OperatorRevoked"), "{out}");

    // The schema awaits a person.
    let announced = wait_announced(&oncall, &g, "op-3").await;
    assert_eq!(
        (announced["instance"].as_str(), announced["ending"].as_str()),
        (Some("counter-app"), Some("OperatorRevoked"))
    );
    wait_status(&cluster, &g, "SchemaVerificationRequired", T, |s| {
        has_condition(s, "SchemaVerificationRequired", "True", None)
    })
    .await;
    let out = oncall.run(&["verify-schema", &g]).await;
    out.expect_code(0).stdout_has(&["Awaiting schema verification", &format!("verify-schema {g} OPERATION")]);
    let pending = table(&out.stdout, &["OPERATION", "INSTANCE", "REVISION", "ENDED"]);
    let record = row(&pending, "OPERATION", "op-3").unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        (
            record["INSTANCE"].as_str(),
            record["REVISION"].as_str(),
            record["ENDED"].as_str(),
            record["GENERATION"].as_str()
        ),
        ("counter-app", "V142", "OperatorRevoked", "1")
    );
    let out = oncall.run(&["leases", &g]).await;
    out.expect_code(0).stdout_has(&["Revoked operations", "Ended inside their DDL"]);
    let tombstones = table(&out.stdout, &["OPERATION", "INSTANCE", "CLIENT", "REASON"]);
    let tombstone = row(&tombstones, "OPERATION", "op-3").unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        (tombstone["CLIENT"].as_str(), tombstone["REASON"].as_str()),
        (client.as_str(), "OperatorRevoked"),
        "{out}"
    );
    oncall.run(&["status", &g]).await.expect_code(0).stdout_has(&["schema to verify after: op-3"]);
    // A mistyped operation clears nothing.
    let out = oncall.run(&["verify-schema", &g, "op-33"]).await;
    out.expect_code(1).stderr_has(&["\"op-33\" does not await verification", "awaiting: op-3"]);
    let status = cluster.groups().get(&g).await.unwrap().status.unwrap();
    assert_eq!(condition(&status, "SchemaVerificationRequired").map(|c| c.status.as_str()), Some("True"));
    // Verified.
    let verified = oncall.run(&["verify-schema", &g, "op-3"]).await;
    verified.expect_code(0).stdout_has(&[&format!("op-3: schema verified by {who}")]);
    wait_status(&cluster, &g, "SchemaVerificationRequired cleared", T, |s| {
        match condition(s, "SchemaVerificationRequired") {
            Some(c) if c.status == "True" => Err(c.message.clone()),
            _ => Ok(()),
        }
    })
    .await;
    oncall.run(&["verify-schema", &g]).await.expect_code(0).stdout_has(&["Nothing awaits schema verification"]);
    oncall.run(&["verify-schema", &g, "op-3"]).await.expect_code(1);
    let screen = oncall.run(&["status", &g]).await;
    assert!(!screen.stdout.contains("schema to verify after"), "{screen}");

    verify_all_while_the_operator_is_down(&mut ds, &oncall).await;
    kb.run(&["verify-schema", &g, "op-4", "--all"]).await.expect_code(2);

    // Last, so that everything above is checked whatever this says: the
    // verification's outcome as the condition has it. The operator removes
    // the annotation before it writes the condition again, and the plugin
    // read the condition from the group that no longer had the annotation:
    // "still True" about a condition that was clearing.
    verified.stderr_has(&["SchemaVerificationRequired is clear"]);
}

/// Waits until `leases -o json` lists `op`'s verification record as
/// announced (only announced records can be verified); returns it.
async fn wait_announced(plugin: &Plugin, g: &str, op: &str) -> serde_json::Value {
    wait_for(&format!("{op}'s verification record, announced"), T, || async {
        let out = plugin.run(&["leases", g, "-o", "json"]).await;
        if out.code != 0 {
            return Err(out.to_string());
        }
        let json = out.json();
        let pending = json["pendingVerifications"].as_array().cloned().unwrap_or_default();
        match pending.iter().find(|v| v["operationId"] == op) {
            Some(v) if v["announced"] == true => Ok(v.clone()),
            _ => Err(out.to_string()),
        }
    })
    .await
}

/// A `status GROUP` screen shows every condition of `s` with its status
/// and reason, and each site's GTID position as probed.
#[track_caller]
fn screen_agrees_with_status(out: &Output, s: &MysqlFailoverGroupStatus) {
    let conditions = table(section(&out.stdout, "Conditions:"), &["TYPE", "STATUS"]);
    assert_eq!(conditions.len(), s.conditions.len(), "{out}");
    for c in &s.conditions {
        let r = row(&conditions, "TYPE", &c.type_).unwrap_or_else(|| panic!("no {} row:\n{out}", c.type_));
        assert_eq!((r["STATUS"].as_str(), r["REASON"].as_str()), (c.status.as_str(), c.reason.as_str()), "{out}");
    }
    let sites = table(section(&out.stdout, "Sites:"), &["SITE", "ENDPOINT"]);
    for h in &s.health {
        let r = row(&sites, "SITE", &h.site).unwrap_or_else(|| panic!("no {} row:\n{out}", h.site));
        // No position yet (nothing written) shows as "-", as an absent one does.
        assert_eq!(r["GTID"], h.gtid_position.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "-".into()), "{out}");
    }
}

#[tokio::test]
async fn status_and_explain_after_an_emergency_failover() {
    let sc = Scenario::start("pluginkill", 1, LeaderTimings::default()).await;
    let g = sc.quick_group("g").await;
    let kb = Plugin::admin(&sc.ns.name);
    sc.pair.kill9("iad");
    let s = wait_status(&sc.cluster, &g, "an emergency failover to pdx, iad seen down", T, |s| {
        fixtures::is_active_at(s, "pdx", 2)?;
        s.emergency_failover.as_ref().ok_or("no emergencyFailover")?;
        // The decision comes first; pdx is seen writable at a later probe.
        match s.health.iter().find(|h| h.site == "pdx").and_then(|h| h.writable) {
            Some(true) => {}
            other => return Err(format!("pdx writable {other:?}")),
        }
        match s.health.iter().find(|h| h.site == "iad").map(|h| h.reachable) {
            Some(false) => Ok(()),
            other => Err(format!("iad reachable {other:?}")),
        }
    })
    .await;
    let e = s.emergency_failover.clone().unwrap();
    let out = kb.run(&["status", &g]).await;
    out.expect_code(0).stdout_has(&[&format!(
        "Last emergency failover: iad → pdx at {} (generation 2), {} transaction(s) abandoned",
        e.time.0, e.abandoned_transactions
    )]);
    assert_eq!(field(&out.stdout, "Active site"), Some("pdx (topology generation 2)"), "{out}");
    let sites = table(section(&out.stdout, "Sites:"), &["SITE", "ENDPOINT"]);
    let (iad, pdx) = (row(&sites, "SITE", "iad").unwrap(), row(&sites, "SITE", "pdx").unwrap());
    assert_eq!((pdx["ROLE"].as_str(), pdx["WRITABLE"].as_str()), ("primary", "yes"), "{out}");
    assert_eq!(iad["ROLE"], "replica", "{out}");
    let why = s.health.iter().find(|h| h.site == "iad").and_then(|h| h.error_reason.clone());
    assert_eq!(iad["REACHABLE"], format!("no ({})", why.as_deref().unwrap_or("?")), "{out}");
    let json = kb.run(&["status", &g, "-o", "json"]).await.expect_code(0).json();
    let ef = &json["emergencyFailover"];
    assert_eq!(
        (ef["fromSite"].as_str(), ef["toSite"].as_str(), ef["topologyGeneration"].as_i64()),
        (Some("iad"), Some("pdx"), Some(2)),
        "{json}"
    );
    // Not stable while iad is down: the screen and explain say why.
    let s = sc.cluster.groups().get(&g).await.unwrap().status.unwrap();
    if let (Some(false), Some(reason)) = (s.stable, s.unstable_reason.as_deref()) {
        let out = kb.run(&["explain", &g]).await;
        out.expect_code(0).stdout_has(&["Why is the group not stable?", reason]);
    }
    // A switchover to the dead site is refused by admission.
    let out = kb.run(&["switchover", &g, "--to", "iad", "--wait", "--timeout", "60s"]).await;
    out.expect_code(1).stdout_has(&["Failed:"]);
    let s = sc.cluster.groups().get(&g).await.unwrap().status.unwrap();
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("pdx"), Some(2)), "{out}");
    sc.cluster.delete_group(&g).await;
}

/// Waits until a running command's standard error holds `text`.
async fn wait_stderr(running: &bloodraven_e2e::plugin::Running, text: &str) {
    wait_for(&format!("{text:?} on standard error"), T, || async {
        let err = running.stderr();
        if err.contains(text) { Ok(()) } else { Err(format!("stderr so far:\n{err}")) }
    })
    .await;
}
