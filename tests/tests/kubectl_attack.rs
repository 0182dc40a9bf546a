//! The kubectl plugin (`kubectl-bloodraven`) and the `-by` annotations
//! (`revoke-deployment-leases-by`, `schema-verified-by`: the webhook's
//! `group-history` guard and the operator's Events), attacked as a hostile
//! but ordinary user would: every write path to spoof someone else's name,
//! switchovers racing each other and a request edited by hand, the operator
//! down while the plugin waits, RBAC that grants half of what a command
//! needs, odd group and site names, and text with escape sequences.
//!
//! One scenario runs every probe and records, for each, whether the correct
//! behaviour held (with what was observed, printed to standard error).
//! `what_an_attacker_cannot_do` asserts the probes that hold;
//! `defects_found_by_attacking` (ignored until fixed) asserts the others,
//! each probe written as the correct behaviour.
//!
//! Runs on one flavor (the sites only serve the operator's probes).

#![allow(clippy::unwrap_used, clippy::panic, clippy::too_many_lines, clippy::many_single_char_names)] // test helpers: a failed step fails the test

use std::time::{Duration, Instant};

use bloodraven_api::names::{
    REVOKE_DEPLOYMENT_LEASES_ANNOTATION as REVOKE, REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION as REVOKE_BY,
    SCHEMA_VERIFIED_ANNOTATION as VERIFIED, SCHEMA_VERIFIED_BY_ANNOTATION as VERIFIED_BY,
};
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use bloodraven_e2e::deploy;
use bloodraven_e2e::fixtures::group_events;
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::plugin::{Output, Plugin, kubeconfig_with_rules, rule};
use bloodraven_e2e::wait_for;
use bloodraven_e2e::webhook::{Options, Webhook};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const MFG: &str = "mysqlfailovergroups";
const BLOODRAVEN: &str = "bloodraven.shipstream.io";

/// What the probes found: (probe, held, what was observed).
#[derive(Default)]
struct Findings(Vec<(String, bool, String)>);

impl Findings {
    fn check(&mut self, probe: &str, held: bool, observed: impl std::fmt::Display) {
        eprintln!("=== PROBE {probe}: {}\n{observed}\n", if held { "held" } else { "BROKEN" });
        self.0.push((probe.to_owned(), held, observed.to_string()));
    }

    /// Panics listing the probes that did not hold.
    fn assert(&self) {
        let broken: Vec<String> =
            self.0.iter().filter(|(_, held, _)| !held).map(|(p, _, o)| format!("{p}:\n{o}")).collect();
        assert!(broken.is_empty(), "{} probe(s) broken:\n\n{}", broken.len(), broken.join("\n\n"));
    }
}

fn annotations(g: &MysqlFailoverGroup) -> std::collections::BTreeMap<String, String> {
    g.metadata.annotations.clone().unwrap_or_default()
}

/// The outcome of an API write, in words.
fn outcome<T>(r: &Result<T, kube::Error>) -> String {
    match r {
        Ok(_) => "admitted".to_owned(),
        Err(kube::Error::Api(s)) => format!("refused {}: {}", s.code, s.message),
        Err(e) => format!("failed: {e}"),
    }
}

fn no_raw_escape(out: &Output) -> bool {
    !out.stdout.contains('\u{1b}') && !out.stderr.contains('\u{1b}') && !out.stdout.contains('\u{9b}')
}

fn planned(g: &MysqlFailoverGroup) -> Option<(String, String)> {
    g.spec.planned_failover.as_ref().map(|p| (p.request_id.clone(), p.target_site.clone()))
}

/// A ServiceAccount with the on-call roles of docs/kubectl-plugin.md, plus
/// `update` and `create` on groups (every write path); its kubeconfig,
/// a client of it and its username.
async fn oncall(
    cluster: &bloodraven_e2e::Cluster,
    ns: &str,
    name: &str,
    verbs: &[&str],
) -> (Plugin, kube::Client, String) {
    let cluster_rules =
        vec![rule(BLOODRAVEN, &[MFG], verbs), rule(BLOODRAVEN, &["mysqldatabases"], &["get", "list", "watch"])];
    let leases = vec![rule("coordination.k8s.io", &["leases"], &["get", "list", "watch"])];
    let kubeconfig = kubeconfig_with_rules(cluster, ns, name, cluster_rules, ns, leases).await;
    let token = deploy::token(cluster, ns, name, &[]).await;
    let client = cluster.client_with_token(&token).await;
    (Plugin::admin(ns).with_kubeconfig(kubeconfig), client, format!("system:serviceaccount:{ns}:{name}"))
}

async fn readable(plugin: &Plugin, g: &str) {
    wait_for("the new RBAC to take effect", Duration::from_secs(60), || async {
        let out = plugin.run(&["leases", g]).await;
        if out.code == 0 { Ok(()) } else { Err(out.to_string()) }
    })
    .await;
}

async fn clear_planned(cluster: &bloodraven_e2e::Cluster, g: &str) {
    let r = cluster
        .groups()
        .patch(g, &PatchParams::default(), &Patch::Merge(json!({"spec": {"plannedFailover": null}})))
        .await;
    eprintln!("clearing spec.plannedFailover: {}", outcome(&r));
}

async fn set_planned(cluster: &bloodraven_e2e::Cluster, g: &str, id: &str, to: &str) {
    let patch = json!({"spec": {"plannedFailover": {"targetSite": to, "requestId": id}}});
    cluster.groups().patch(g, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
}

/// Every way bob (an ordinary user allowed to create, update and patch
/// groups) and the admin may try to put alice's name in a `-by`
/// annotation; none may be stored.
async fn spoof_the_requester(
    f: &mut Findings,
    cluster: &bloodraven_e2e::Cluster,
    bob: &kube::Client,
    bob_name: &str,
    alice_name: &str,
    g: &str,
) {
    let bobs: Api<MysqlFailoverGroup> = Api::all(bob.clone());
    let admin = cluster.groups();
    let pp = PatchParams::default();
    let stored = |key: &'static str| {
        let admin = admin.clone();
        async move { annotations(&admin.get(g).await.unwrap()).get(key).cloned() }
    };
    for key in [REVOKE_BY, VERIFIED_BY] {
        let main = if key == REVOKE_BY { REVOKE } else { VERIFIED };
        // Merge patch, with and without the annotation it vouches for.
        for (label, patch) in [
            ("merge", json!({"metadata": {"annotations": {key: alice_name}}})),
            ("merge-with-request", json!({"metadata": {"annotations": {key: alice_name, main: "all"}}})),
            ("merge-leading-space", json!({"metadata": {"annotations": {key: format!(" {alice_name}")}}})),
            ("merge-trailing-newline", json!({"metadata": {"annotations": {key: format!("{alice_name}\n")}}})),
            ("merge-case", json!({"metadata": {"annotations": {key: alice_name.to_uppercase()}}})),
            (
                "merge-with-unrelated-change",
                json!({"metadata": {"labels": {"attack": "x"}, "annotations": {key: alice_name}}, "spec": {"failover": {"automatic": true}}}),
            ),
        ] {
            let r = bobs.patch(g, &pp, &Patch::Merge(patch)).await;
            let now = stored(key).await;
            f.check(
                &format!("by/{label}/{key}"),
                r.is_err() && now.is_none(),
                format!("bob: {}; stored: {now:?}", outcome(&r)),
            );
        }
        // JSON patch: add, and copy or move from an annotation bob may write.
        let pointer = format!("/metadata/annotations/{}", key.replace('~', "~0").replace('/', "~1"));
        let r = bobs
            .patch(g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {"attack.example/note": alice_name}}})))
            .await;
        eprintln!("bob sets a harmless annotation holding alice's name: {}", outcome(&r));
        for (label, ops) in [
            ("json-add", json!([{"op": "add", "path": pointer, "value": alice_name}])),
            (
                "json-copy",
                json!([{"op": "copy", "from": "/metadata/annotations/attack.example~1note", "path": pointer}]),
            ),
            (
                "json-move",
                json!([{"op": "move", "from": "/metadata/annotations/attack.example~1note", "path": pointer}]),
            ),
            (
                "json-replace-after-own",
                json!([
                    {"op": "add", "path": pointer, "value": bob_name},
                    {"op": "replace", "path": pointer, "value": alice_name}
                ]),
            ),
        ] {
            let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
            let r = bobs.patch(g, &pp, &Patch::<()>::Json(patch)).await;
            let now = stored(key).await;
            f.check(
                &format!("by/{label}/{key}"),
                r.is_err() && now.is_none(),
                format!("bob: {}; stored: {now:?}", outcome(&r)),
            );
        }
        // Server-side apply, as bob's own field manager and forced.
        let applied = json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
            "metadata": {"name": g, "annotations": {key: alice_name}}});
        let r = bobs.patch(g, &PatchParams::apply("bob").force(), &Patch::Apply(&applied)).await;
        let now = stored(key).await;
        f.check(
            &format!("by/server-side-apply/{key}"),
            r.is_err() && now.is_none(),
            format!("bob: {}; stored: {now:?}", outcome(&r)),
        );
        // Update (PUT) of the whole object.
        let mut whole = bobs.get(g).await.unwrap();
        whole.metadata.annotations.get_or_insert_default().insert(key.to_owned(), alice_name.to_owned());
        let r = bobs.replace(g, &PostParams::default(), &whole).await;
        let now = stored(key).await;
        f.check(
            &format!("by/update/{key}"),
            r.is_err() && now.is_none(),
            format!("bob: {}; stored: {now:?}", outcome(&r)),
        );
        // The status subresource (metadata there is ignored or refused).
        let r = bobs
            .patch_status(g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {key: alice_name}}, "status": {}})))
            .await;
        let now = stored(key).await;
        f.check(
            &format!("by/status-subresource/{key}"),
            now.is_none(),
            format!("bob: {}; stored: {now:?}", outcome(&r)),
        );
        let r =
            admin.patch_status(g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {key: alice_name}}}))).await;
        let now = stored(key).await;
        f.check(
            &format!("by/admin-status-subresource/{key}"),
            now.is_none(),
            format!("admin: {}; stored: {now:?}", outcome(&r)),
        );
        // The admin is an ordinary user here too.
        let r = admin.patch(g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {key: alice_name}}}))).await;
        let now = stored(key).await;
        f.check(
            &format!("by/admin-merge/{key}"),
            r.is_err() && now.is_none(),
            format!("admin: {}; stored: {now:?}", outcome(&r)),
        );
        // A new group naming alice.
        let mut created = admin.get(g).await.unwrap();
        created.metadata = kube::api::ObjectMeta {
            name: Some(format!("{g}-spoof")),
            labels: created.metadata.labels.clone(),
            annotations: Some([(key.to_owned(), alice_name.to_owned())].into()),
            ..kube::api::ObjectMeta::default()
        };
        created.status = None;
        let r = bobs.create(&PostParams::default(), &created).await;
        if r.is_ok() {
            cluster.delete_group(&format!("{g}-spoof")).await;
        }
        f.check(&format!("by/create/{key}"), r.is_err(), format!("bob: {}", outcome(&r)));
        // Bob's own name is his to write, and removing it is anyone's.
        let r = bobs.patch(g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {key: bob_name}}}))).await;
        f.check(&format!("by/own-name/{key}"), r.is_ok(), format!("bob: {}", outcome(&r)));
        let r = bobs
            .patch(
                g,
                &pp,
                &Patch::Merge(json!({"metadata": {"annotations": {key: null, "attack.example/note": null}}})),
            )
            .await;
        f.check(&format!("by/removal/{key}"), r.is_ok() && stored(key).await.is_none(), outcome(&r));
    }
    let _ = admin.patch(g, &pp, &Patch::Merge(json!({"metadata": {"labels": {"attack": null}}}))).await;
}

async fn revocation_notes(cluster: &bloodraven_e2e::Cluster, g: &str) -> Vec<String> {
    group_events(cluster, g)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DeploymentLeaseRevoked"))
        .filter_map(|e| e.note)
        .collect()
}

/// The `DeploymentLeaseRevoked` note of operation `op`.
async fn revocation_note(cluster: &bloodraven_e2e::Cluster, g: &str, op: &str) -> String {
    wait_for(&format!("the revocation Event of {op}"), Duration::from_secs(120), || async {
        revocation_notes(cluster, g).await.into_iter().find(|n| n.contains(op)).ok_or_else(|| "not yet".to_owned())
    })
    .await
}

/// Where a `-by` is left standing (the operator down, or one written alone),
/// another user changes the request it vouches for and keeps the name.
async fn reuse_the_requester(
    f: &mut Findings,
    ds: &mut deploy::DeployScenario,
    alice: &Plugin,
    alice_client: &kube::Client,
    alice_name: &str,
    bob: &kube::Client,
) {
    let cluster = ds.sc.cluster.clone();
    let g = ds.pipeline.group.clone();
    let admin = cluster.groups();
    let bobs: Api<MysqlFailoverGroup> = Api::all(bob.clone());
    let pp = PatchParams::default();

    // Alice revokes a migration with the plugin, the operator running: its
    // Event names her and her reason, escaped.
    let m = ds.pipeline.post_until(201, "migration", "op-clean", "counter-app", 20).await;
    eprintln!("migration op-clean granted: {m:?}");
    let alice_reason = "alice: migration stuck \u{202e}gpj.exe";
    let out = alice.run(&["revoke", &g, "--reason", alice_reason]).await;
    eprintln!("alice's revoke with the operator running:\n{out}");
    let note = revocation_note(&cluster, &g, "op-clean").await;
    f.check(
        "event/names-the-requester",
        note.contains(&format!("requested by {alice_name}")) && note.contains("alice: migration stuck"),
        format!(
            "Event: {note}\nall revocation notes: {:?}\n\
             correct: `requested by {alice_name} (\"alice: migration stuck …\")` (docs/kubectl-plugin.md, revoke)",
            revocation_notes(&cluster, &g).await
        ),
    );
    f.check("event/escapes-bidi", !note.contains('\u{202e}'), format!("Event: {note:?}"));

    // A migration the operator will revoke; then the operator stops.
    let m = ds.pipeline.post_until(201, "migration", "op-atk", "counter-app", 120).await;
    eprintln!("migration op-atk granted: {m:?}");
    assert!(ds.op.stop().await, "the operator did not stop cleanly");
    let started = Instant::now();
    // Alice asks; with the operator down, the plugin times out (exit 3)
    // and the annotations stay.
    let out = alice.run(&["revoke", &g, "--reason", alice_reason, "--timeout", "5s"]).await;
    f.check(
        "revoke/operator-down-times-out",
        out.code == 3 && started.elapsed() < Duration::from_secs(60) && out.stderr.contains("has not acted"),
        &out,
    );
    let a = annotations(&admin.get(&g).await.unwrap());
    eprintln!("after alice's revoke: {a:?}");
    // Bob, who may patch groups, rewrites the reason and leaves alice's name.
    let bobs_reason = "bob: drop every lease, alice said so";
    let r = bobs.patch(&g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {REVOKE: bobs_reason}}}))).await;
    let a = annotations(&admin.get(&g).await.unwrap());
    f.check(
        "by/stale-requester-reused-for-a-new-reason",
        r.is_err() || a.get(REVOKE_BY).map(String::as_str) != Some(alice_name),
        format!(
            "bob changed {REVOKE} and left {REVOKE_BY}={alice_name}: {}; stored: {a:?}\n\
             correct: a change of the request must name its new requester (or drop the -by), else the Event names alice for bob's words",
            outcome(&r)
        ),
    );
    // The operator comes back and acts.
    let (op2, base) = deploy::start_operator(&cluster, &ds.sc.ns, "op2", &ds.tls, LeaderTimings::default()).await;
    ds.op = op2;
    ds.pipeline.base = base;
    eprintln!("annotations when the operator comes back: {:?}", annotations(&admin.get(&g).await.unwrap()));
    let note = revocation_note(&cluster, &g, "op-atk").await;
    f.check(
        "by/event-attributes-another-users-reason",
        !(note.contains(alice_name) && note.contains("drop every lease")),
        format!("Event: {note}\ncorrect: alice's name is never stated beside a reason she did not write"),
    );
    wait_for("the annotations removed", Duration::from_secs(60), || async {
        let a = annotations(&admin.get(&g).await.unwrap());
        if a.contains_key(REVOKE) || a.contains_key(REVOKE_BY) { Err(format!("{a:?}")) } else { Ok(()) }
    })
    .await;

    // A -by written alone (by its own user: admitted) is never removed by
    // the operator, and a later request by someone else inherits it.
    let alices: Api<MysqlFailoverGroup> = Api::all(alice_client.clone());
    let r = alices.patch(&g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {VERIFIED_BY: alice_name}}}))).await;
    eprintln!("alice writes {VERIFIED_BY} alone: {}", outcome(&r));
    let r = bobs.patch(&g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {VERIFIED: "all"}}}))).await;
    let a = annotations(&admin.get(&g).await.unwrap());
    // Held: refused, or admitted only once the operator had removed the
    // -by left alone (bob's request then names nobody).
    f.check(
        "by/dangling-requester-reused",
        r.is_err() || a.get(VERIFIED_BY).map(String::as_str) != Some(alice_name),
        format!(
            "bob added {VERIFIED}=all under alice's standing {VERIFIED_BY}: {}; stored: {a:?}\n\
             correct: refused (or the -by required to be bob's own in the same write)",
            outcome(&r)
        ),
    );
    let _ = admin
        .patch(&g, &pp, &Patch::Merge(json!({"metadata": {"annotations": {VERIFIED: null, VERIFIED_BY: null}}})))
        .await;
}

/// Switchovers with the operator down: nothing takes a request up, so what
/// the plugin does with a request written a moment before is deterministic.
async fn race_switchovers(f: &mut Findings, ds: &mut deploy::DeployScenario, alice: &Plugin, patch_no_watch: &Plugin) {
    let cluster = ds.sc.cluster.clone();
    let g = ds.pipeline.group.clone();
    let admin = cluster.groups();
    assert!(ds.op.stop().await, "the operator did not stop cleanly");

    // --wait with the operator down: exit 3 at --timeout, not a hang.
    let started = Instant::now();
    let out =
        alice.run(&["switchover", &g, "--to", "pdx", "--request-id", "atk-wait-1", "--wait", "--timeout", "5s"]).await;
    let took = started.elapsed();
    f.check(
        "switchover/operator-down-times-out",
        out.code == 3 && took < Duration::from_secs(30) && out.stderr.contains("still Pending"),
        format!("took {took:?}\n{out}"),
    );

    // Carol's request, written a moment ago and not taken up yet.
    clear_planned(&cluster, &g).await;
    set_planned(&cluster, &g, "carol-pending-1", "pdx").await;
    let out = alice.run(&["switchover", &g, "--to", "pdx"]).await;
    let now = planned(&admin.get(&g).await.unwrap());
    f.check(
        "switchover/overwrites-a-pending-request",
        out.code == 1 && now.as_ref().map(|p| p.0.as_str()) == Some("carol-pending-1"),
        format!("spec.plannedFailover now {now:?}\n{out}\ncorrect: refused, carol's request not overwritten"),
    );
    set_planned(&cluster, &g, "carol-pending-1", "pdx").await;
    let out = alice.run(&["switchover", &g, "--to", "pdx", "--request-id", "carol-pending-1"]).await;
    f.check(
        "switchover/request-id-of-a-pending-request",
        out.code == 1,
        format!("{out}\ncorrect: refused (the id is carol's pending request), not \"requested\""),
    );

    // A request replaced by hand while --wait follows it.
    clear_planned(&cluster, &g).await;
    let follow =
        alice.spawn(&["switchover", &g, "--to", "pdx", "--request-id", "atk-edit-1", "--wait", "--timeout", "25s"]);
    wait_for("atk-edit-1 written", Duration::from_secs(30), || async {
        match planned(&admin.get(&g).await.unwrap()) {
            Some((id, _)) if id == "atk-edit-1" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    set_planned(&cluster, &g, "dave-edit-1", "pdx").await;
    let started = Instant::now();
    let out = follow.finish(Duration::from_secs(60)).await;
    let took = started.elapsed();
    f.check(
        "switchover/wait-notices-its-request-was-replaced",
        out.code == 1 && took < Duration::from_secs(15),
        format!(
            "took {took:?} after the replacement\n{out}\ncorrect: exit 1 at once, saying request atk-edit-1 was replaced by dave-edit-1"
        ),
    );

    // --to the active site, and a site name with escapes.
    clear_planned(&cluster, &g).await;
    let out = alice.run(&["switchover", &g, "--to", "iad"]).await;
    f.check("switchover/to-the-active-site", out.code == 0 && out.stdout.contains("nothing to do"), &out);
    let out = alice.run(&["switchover", &g, "--to", "pdx\u{1b}[2J\u{1b}]0;pwned\u{7}"]).await;
    f.check(
        "switchover/odd-site-escaped",
        out.code == 1 && no_raw_escape(&out) && planned(&admin.get(&g).await.unwrap()).is_none(),
        &out,
    );
    let out = alice.run(&["switchover", &g, "--to", "pdx", "--request-id", "bad id\u{1b}[2J"]).await;
    f.check("switchover/odd-request-id-escaped", out.code == 1 && no_raw_escape(&out), &out);

    // `wait` on a request replaced by hand.
    clear_planned(&cluster, &g).await;
    set_planned(&cluster, &g, "erin-wait-1", "pdx").await;
    let follow = alice.spawn(&["wait", &g, "--request-id", "erin-wait-1", "--timeout", "25s"]);
    wait_for("wait to follow erin-wait-1", Duration::from_secs(20), || async {
        let err = follow.stderr();
        if err.contains("following switchover erin-wait-1") { Ok(()) } else { Err(err) }
    })
    .await;
    set_planned(&cluster, &g, "frank-wait-1", "pdx").await;
    let started = Instant::now();
    let out = follow.finish(Duration::from_secs(60)).await;
    let took = started.elapsed();
    f.check(
        "wait/notices-its-request-was-replaced",
        out.code == 1 && took < Duration::from_secs(15),
        format!(
            "took {took:?} after the replacement\n{out}\ncorrect: exit 1 at once, saying erin-wait-1 was replaced by frank-wait-1"
        ),
    );

    // A group name with a slash reads the status subresource of another
    // name; a switchover must write only the group named, or nothing.
    clear_planned(&cluster, &g).await;
    let slashed = format!("{g}/status");
    // As alice (no RBAC on the status subresource) the refusal names the
    // wrong permission; as the admin, the status subresource is read.
    let out = alice.run(&["switchover", &slashed, "--to", "pdx", "--request-id", "atk-slash-0"]).await;
    eprintln!("alice, switchover {slashed:?}:\n{out}");
    let out = Plugin::admin(&ds.sc.ns.name)
        .run(&["switchover", &slashed, "--to", "pdx", "--request-id", "atk-slash-1"])
        .await;
    let now = planned(&admin.get(&g).await.unwrap());
    f.check(
        "names/slash-switchover-writes-only-the-group-named",
        out.code == 2 && out.stderr.contains("not a MysqlFailoverGroup name") && now.is_none(),
        format!(
            "spec.plannedFailover of {g} now {now:?}\n{out}\ncorrect: {slashed:?} is not a group name: refused as bad usage (exit 2), {g} untouched"
        ),
    );

    // May get and patch, nothing more (docs: enough for --wait): it
    // follows by reading, and times out while the operator is down.
    clear_planned(&cluster, &g).await;
    let started = Instant::now();
    let out = patch_no_watch
        .run(&["switchover", &g, "--to", "pdx", "--request-id", "atk-nowatch-1", "--wait", "--timeout", "5s"])
        .await;
    let took = started.elapsed();
    let lines = out.stderr.lines().count();
    let head: String = out.stderr.lines().take(3).collect::<Vec<_>>().join("\n");
    f.check(
        "switchover/wait-with-get-and-patch-only",
        out.code == 3 && lines < 20 && out.stderr.contains("still Pending"),
        format!(
            "exit {} after {took:?}, {lines} lines of stderr, {} bytes; first lines:\n{head}\n\
             correct: exit 3 after --timeout (the operator is down), without a flood of errors",
            out.code,
            out.stderr.len()
        ),
    );
    clear_planned(&cluster, &g).await;
}

/// A user who may only `get` groups: each refusal names the verb, the
/// resource and where; nothing is written.
async fn half_the_rbac(f: &mut Findings, ds: &deploy::DeployScenario, getter: &Plugin) {
    let cluster = &ds.sc.cluster;
    let g = &ds.pipeline.group;
    let ns = &ds.sc.ns.name;
    let before = cluster.groups().get(g).await.unwrap();
    let out = getter.run(&["switchover", g, "--to", "pdx"]).await;
    f.check(
        "rbac/switchover-names-patch",
        out.code == 1 && out.stderr.contains("verb \"patch\"") && out.stderr.contains(MFG),
        &out,
    );
    let out = getter.run(&["status"]).await;
    f.check(
        "rbac/list-names-list-cluster-wide",
        out.code == 1 && out.stderr.contains("verb \"list\"") && out.stderr.contains("cluster-wide"),
        &out,
    );
    for args in [
        vec!["leases", g.as_str()],
        vec!["revoke", g.as_str(), "--reason", "not mine to revoke"],
        vec!["verify-schema", g.as_str(), "op-x"],
    ] {
        let out = getter.run(&args).await;
        f.check(
            &format!("rbac/{}-names-leases-and-namespace", args[0]),
            out.code == 1
                && out.stderr.contains("verb \"list\"")
                && out.stderr.contains("leases.coordination.k8s.io")
                && out.stderr.contains(&format!("in namespace {ns}")),
            &out,
        );
    }
    let out = getter.run(&["status", g]).await;
    f.check(
        "rbac/status-without-leases-still-shows",
        out.code == 0 && out.stdout.contains("Group:") && out.stdout.contains("leases.coordination.k8s.io"),
        &out,
    );
    // May get but not watch: --watch must say so, not spin re-reading.
    let watching = getter.spawn(&["status", g, "--watch"]);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let out = watching.kill().await;
    let lines = out.stderr.lines().count();
    let head: String = out.stderr.lines().take(3).collect::<Vec<_>>().join("\n");
    f.check(
        "rbac/watch-without-watch-does-not-flood",
        lines < 20 && (out.code == -1 || out.stderr.contains("\"watch\"")),
        format!(
            "still running after 6s: {}; {lines} lines of stderr ({} bytes), {} frames on stdout; first lines:\n{head}\n\
             correct: exit 1 naming verb \"watch\", or frames without a flood of errors",
            out.code == -1,
            out.stderr.len(),
            out.stdout.matches("Group:").count()
        ),
    );
    let after = cluster.groups().get(g).await.unwrap();
    f.check(
        "rbac/nothing-written",
        planned(&after) == planned(&before) && annotations(&after) == annotations(&before),
        format!("{:?} → {:?}", planned(&before), planned(&after)),
    );
}

/// Group names that are not names, and connections that cannot be made.
async fn bad_input(f: &mut Findings, ds: &deploy::DeployScenario, kb: &Plugin) {
    let g = &ds.pipeline.group;
    let slash = format!("{g}/status");
    let dots = format!("nothing/../{g}");
    for (label, name) in [
        ("slash-is-not-a-subresource", slash.as_str()),
        ("dot-dot-is-not-a-path", dots.as_str()),
        ("dot-dot", ".."),
        ("dot", "."),
        ("empty", ""),
    ] {
        for cmd in ["status", "leases", "explain"] {
            let out = kb.run(&[cmd, name]).await;
            f.check(
                &format!("names/{label}{}", if cmd == "status" { String::new() } else { format!("/{cmd}") }),
                out.code != 0 && !out.stdout.contains(g.as_str()),
                &out,
            );
        }
    }
    let out = kb.run(&["status", "-o", "xml"]).await;
    f.check("flags/bad-output", out.code == 2, &out);
    for t in ["0s", "99999h", "-5s", "1.5m"] {
        let out = kb.run(&["switchover", g, "--to", "pdx", "--timeout", t]).await;
        f.check(&format!("flags/timeout-{t}"), out.code == 2, &out);
    }
    let out = kb.run(&["status", g, "-o", "json"]).await;
    f.check("flags/json", out.code == 0 && serde_json::from_str::<serde_json::Value>(&out.stdout).is_ok(), &out);
    // A kubeconfig that is missing, garbage, or a context it lacks.
    let dir = bloodraven_e2e::e2e_dir();
    let garbage = dir.join(format!("kubeconfig-garbage-{}", ds.sc.ns.name));
    std::fs::write(&garbage, "\u{1b}[2J\u{1b}]0;pwned\u{7}: [").unwrap();
    for (label, plugin) in [
        ("missing", kb.with_kubeconfig(dir.join("no-such-kubeconfig"))),
        ("garbage", kb.with_kubeconfig(garbage.clone())),
        ("no-such-context", kb.with_context("no-such-context")),
    ] {
        let out = plugin.run(&["status", g]).await;
        f.check(&format!("kubeconfig/{label}"), out.code == 1 && no_raw_escape(&out), &out);
    }
    // A server nobody answers (TEST-NET): an error within a minute, not a hang.
    let admin: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(bloodraven_e2e::plugin::admin_kubeconfig()).unwrap()).unwrap();
    let mut dead = admin.clone();
    dead["clusters"][0]["cluster"]["server"] = json!("https://192.0.2.1:6443");
    let dead_path = dir.join(format!("kubeconfig-dead-{}", ds.sc.ns.name));
    std::fs::write(&dead_path, serde_saphyr::to_string(&dead).unwrap()).unwrap();
    let started = Instant::now();
    let out = kb.with_kubeconfig(dead_path).run(&["status", g]).await;
    let took = started.elapsed();
    f.check(
        "kubeconfig/unreachable-server-fails",
        out.code == 1 && took < Duration::from_secs(60),
        format!("took {took:?}\n{out}"),
    );
}

/// revoke and verify-schema with nothing to act on.
async fn nothing_to_act_on(f: &mut Findings, ds: &deploy::DeployScenario, alice: &Plugin) {
    let g = &ds.pipeline.group;
    let cluster = &ds.sc.cluster;
    let out = alice.run(&["revoke", g, "--reason", "nothing is held"]).await;
    f.check("revoke/no-leases-writes-nothing", out.code == 0 && out.stdout.contains("nothing to revoke"), &out);
    let out = alice.run(&["verify-schema", g, "--all"]).await;
    f.check("verify/all-with-nothing-pending", out.code == 0, &out);
    let out = alice.run(&["verify-schema", g, "op-unknown"]).await;
    f.check("verify/unknown-op", out.code == 1, &out);
    let out = alice.run(&["verify-schema", g, "op\u{1b}[2J"]).await;
    f.check("verify/odd-op-escaped", out.code == 1 && no_raw_escape(&out), &out);
    let out = alice.run(&["verify-schema", g, "--all", "op-1"]).await;
    f.check("verify/all-and-named-conflict", out.code == 2, &out);
    let a = annotations(&cluster.groups().get(g).await.unwrap());
    f.check(
        "revoke-verify/nothing-written",
        !a.keys().any(|k| k.contains("revoke") || k.contains("schema-verified")),
        format!("{a:?}"),
    );
}

async fn probes() -> Findings {
    let mut f = Findings::default();
    let mut ds = deploy::scenario("atk").await;
    let cluster = ds.sc.cluster.clone();
    let ns = ds.sc.ns.name.clone();
    let g = ds.pipeline.group.clone();
    // The webhook, as the chart registers it, for this namespace's groups.
    let webhook = Webhook::start(&cluster, &ds.sc.ns, Options::default()).await;
    webhook.register(&cluster, &webhook.params(&ns, &[], &ns)).await;

    let all = ["get", "list", "watch", "patch", "update", "create"];
    let (alice, alice_client, alice_name) = oncall(&cluster, &ns, "alice", &all).await;
    let (_bob, bob_client, bob_name) = oncall(&cluster, &ns, "bob", &all).await;
    let (no_watch, _, _) = oncall(&cluster, &ns, "nowatch", &["get", "patch"]).await;
    let getter = Plugin::admin(&ns).with_kubeconfig(
        kubeconfig_with_rules(&cluster, &ns, "getter", vec![rule(BLOODRAVEN, &[MFG], &["get"])], &ns, Vec::new()).await,
    );
    readable(&alice, &g).await;
    wait_for("bob may patch", Duration::from_secs(60), || async {
        Api::<MysqlFailoverGroup>::all(bob_client.clone()).get(&g).await.map(drop).map_err(|e| e.to_string())
    })
    .await;
    wait_for("the getter may get", Duration::from_secs(60), || async {
        let out = getter.run(&["status", &g]).await;
        if out.code == 0 { Ok(()) } else { Err(out.to_string()) }
    })
    .await;
    let kb = Plugin::admin(&ns);

    Box::pin(spoof_the_requester(&mut f, &cluster, &bob_client, &bob_name, &alice_name, &g)).await;
    half_the_rbac(&mut f, &ds, &getter).await;
    bad_input(&mut f, &ds, &kb).await;
    nothing_to_act_on(&mut f, &ds, &alice).await;
    reuse_the_requester(&mut f, &mut ds, &alice, &alice_client, &alice_name, &bob_client).await;
    race_switchovers(&mut f, &mut ds, &alice, &no_watch).await;

    webhook.unregister(&cluster).await;
    cluster.delete_group(&g).await;
    eprintln!(
        "=== SUMMARY\n{}",
        f.0.iter()
            .map(|(p, held, _)| format!("{} {p}", if *held { "held  " } else { "BROKEN" }))
            .collect::<Vec<_>>()
            .join("\n")
    );
    f
}

#[tokio::test]
async fn what_an_attacker_cannot_do() {
    Box::pin(probes()).await.assert();
}
