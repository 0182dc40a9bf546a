//! The `<mysqldatabase>-primary` Service on the real control plane and the
//! real pair, with the operator under its chart RBAC (a missing
//! `services`/`endpointslices` verb fails these tests).
//!
//! What this control plane cannot show, and so is not claimed here:
//! - An EndpointSlice at a site: the pair listens on 127.0.0.1, and the API
//!   server refuses loopback addresses in an EndpointSlice (checked: "may
//!   not be in the loopback range"); the operator reports
//!   `UnroutableSiteHost` instead, which is tested. The slice's shape and
//!   its repoint to the other site are unit tests of the pure plan
//!   (`operator/src/controller/database/primary/desired_tests.rs`).
//! - A repoint by a real failover: nothing moves the decision yet (the
//!   failover engine is being built); a repoint caused by a group change is
//!   tested instead (the hosts change from a DNS name to an IP).
//! - Deletion with the MysqlDatabase: that is the garbage collector's work
//!   (kube-controller-manager), which this control plane does not run; the
//!   controller ownerReference it acts on is asserted instead.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used)] // test helpers: a failed step fails the test

use std::collections::BTreeMap;
use std::time::Duration;

use bloodraven_api::v1alpha1::{Condition, MysqlDatabase, NamespacesFrom};
use bloodraven_e2e::deploy::{database, wait_object_event};
use bloodraven_e2e::fixtures::{SITE_SECRET, Scenario, create_group, group, is_ready_at, wait_status};
use bloodraven_e2e::operator::LeaderTimings;
use bloodraven_e2e::pods::image;
use bloodraven_e2e::wait::wait_for;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};

const T: Duration = Duration::from_secs(60);
/// Well under the database controller's 60 s re-check: a change that only a
/// watch can bring this fast.
const PROMPT: Duration = Duration::from_secs(15);

/// The `PrimaryService` condition of `namespace/name` once `check` accepts it.
async fn wait_primary(
    api: &Api<MysqlDatabase>,
    name: &str,
    what: &str,
    check: impl Fn(&Condition) -> bool,
) -> Condition {
    wait_for(&format!("{name}: {what}"), T, || async {
        let db = api.get(name).await.map_err(|e| e.to_string())?;
        let c = db.status.unwrap_or_default().conditions.into_iter().find(|c| c.type_ == "PrimaryService");
        match c {
            Some(c) if check(&c) => Ok(c),
            other => Err(format!("PrimaryService: {other:?}")),
        }
    })
    .await
}

/// The Service `name` once `check` accepts it.
async fn wait_service(
    api: &Api<Service>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Service) -> Result<(), String>,
) -> Service {
    wait_for(&format!("Service {name}: {what}"), timeout, || async {
        let svc = api.get_opt(name).await.map_err(|e| e.to_string())?.ok_or("no Service")?;
        check(&svc).map(|()| svc.clone()).map_err(|why| format!("{why}: {svc:?}"))
    })
    .await
}

fn spec(svc: &Service) -> ServiceSpec {
    svc.spec.clone().unwrap_or_default()
}

fn annotation<'a>(svc: &'a Service, key: &str) -> Option<&'a str> {
    svc.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test]
async fn the_primary_service_follows_the_group_decision_and_hosts() {
    let sc = Scenario::start("primary", 1, LeaderTimings::default()).await;
    let ns = sc.ns.name.clone();
    // Sites named by a DNS name: `localhost`, which the operator probes as
    // it does 127.0.0.1 (bootstrap must work with it).
    let mut sites = sc.pair.sites(&ns, SITE_SECRET);
    for s in &mut sites {
        s.host = "localhost".into();
    }
    let name = format!("{ns}-g");
    // The database first, settled on a group that cannot bootstrap yet (the
    // replica does not replicate): its Service must then follow the
    // bootstrap decision, a status-only change of the group.
    sc.pair.stop_replica("pdx");
    database(&sc.cluster, &ns, "app", &name, &[]).await;
    let dbs: Api<MysqlDatabase> = Api::namespaced(sc.cluster.client.clone(), &ns);
    wait_primary(&dbs, "app", "False NoActiveSite before the group exists", |c| c.reason == "NoActiveSite").await;
    create_group(&sc.cluster, &group(&name, &ns, sites.clone(), "iad")).await;
    wait_primary(&dbs, "app", "NoActiveSite: no decision yet", |c| c.message.contains("no decided active site")).await;
    let ready = dbs.get("app").await.unwrap().status.unwrap().conditions;
    assert!(ready.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{ready:?}");
    // Let retries of the database's own first writes (5 s) pass, so that
    // nothing but the decision can wake it within PROMPT below.
    tokio::time::sleep(Duration::from_secs(6)).await;
    sc.pair.start_replica("pdx");
    wait_status(&sc.cluster, &name, "bootstrap at iad over localhost", T, |s| is_ready_at(s, "iad", 1)).await;
    let services: Api<Service> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let iad_port = i32::from(sc.pair.iad_port);

    // DNS host: an ExternalName on the site's name and port, owned by the
    // database. Promptly: the database's periodic re-check is 60 s, so only
    // the watch of the group's decision can make this bound.
    let svc = wait_service(&services, "app-primary", "ExternalName localhost", PROMPT, |svc| {
        let s = spec(svc);
        match (s.type_.as_deref(), s.external_name.as_deref()) {
            (Some("ExternalName"), Some("localhost")) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let uid = dbs.get("app").await.unwrap().metadata.uid.unwrap();
    let owner = &svc.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str(), owner.controller),
        ("MysqlDatabase", "app", uid.as_str(), Some(true)),
        "the garbage collector deletes it with its MysqlDatabase"
    );
    assert_eq!(spec(&svc).ports.unwrap()[0].port, iad_port, "ExternalName cannot remap ports");
    assert_eq!(annotation(&svc, "bloodraven.shipstream.io/active-site"), Some("iad"));
    assert_eq!(annotation(&svc, "bloodraven.shipstream.io/topology-generation"), Some("1"));
    assert_eq!(annotation(&svc, "bloodraven.shipstream.io/group"), Some(name.as_str()));
    assert_eq!(
        svc.metadata.labels.as_ref().unwrap().get("app.kubernetes.io/managed-by").map(String::as_str),
        Some("bloodraven-operator")
    );
    let c = wait_primary(&dbs, "app", "True PointsAtActiveSite", |c| c.reason == "PointsAtActiveSite").await;
    assert!(c.status == "True" && c.message.contains("iad"), "{c:?}");
    let note = wait_object_event(&sc.cluster, &ns, "app", "PointsAtActiveSite").await;
    assert!(note.contains("app-primary"), "{note}");
    assert!(slices.get_opt("app-primary").await.unwrap().is_none(), "no EndpointSlice for a DNS host");

    // The hosts become IP addresses: the same Service becomes a ClusterIP
    // Service on 3306 → the site's port. 127.0.0.1 cannot be an endpoint
    // (the API server refuses loopback), so no EndpointSlice, and the
    // database says why.
    let mut ip_sites = sites.clone();
    for s in &mut ip_sites {
        s.host = "127.0.0.1".into();
    }
    sc.cluster
        .groups()
        .patch(&name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"sites": ip_sites}})))
        .await
        .unwrap();
    let svc2 = wait_service(&services, "app-primary", "ClusterIP 3306 -> iad's port", PROMPT, |svc| {
        let s = spec(svc);
        let port = s.ports.clone().unwrap_or_default().first().cloned().unwrap_or_default();
        match (s.type_.as_deref(), s.external_name, port.port, port.target_port) {
            (Some("ClusterIP"), None, 3306, Some(IntOrString::Int(p))) if p == iad_port => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(svc2.metadata.uid, svc.metadata.uid, "the Service is changed in place, never re-created");
    assert_eq!(spec(&svc2).selector, None, "selector-less");
    let c = wait_primary(&dbs, "app", "False UnroutableSiteHost", |c| c.reason == "UnroutableSiteHost").await;
    assert!(c.status == "False" && c.message.contains("127.0.0.1") && c.message.contains("loopback"), "{c:?}");
    assert!(slices.get_opt("app-primary").await.unwrap().is_none());
    wait_object_event(&sc.cluster, &ns, "app", "UnroutableSiteHost").await;

    // The database loses its authority (its namespace is no longer
    // allowed): the Service is parked, pointing nowhere, and says so.
    sc.cluster
        .groups()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"allowedDatabases": {"namespaces": {"from": NamespacesFrom::None, "selector": null}}}})),
        )
        .await
        .unwrap();
    let c = wait_primary(&dbs, "app", "False NoActiveSite", |c| c.reason == "NoActiveSite").await;
    assert!(c.message.contains("no authority"), "{c:?}");
    let parked = services.get("app-primary").await.unwrap();
    assert_eq!(annotation(&parked, "bloodraven.shipstream.io/active-site"), None, "{parked:?}");
    assert_eq!(spec(&parked).ports.unwrap()[0].target_port, Some(IntOrString::Int(3306)));
    sc.cluster.delete_group(&name).await;
}

#[tokio::test]
async fn a_foreign_service_is_left_alone_and_a_long_name_gets_no_service() {
    let sc = Scenario::start("primaryconflict", 1, LeaderTimings::default()).await;
    let ns = sc.ns.name.clone();
    let name = sc.bootstrapped_group("g").await;
    let services: Api<Service> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let dbs: Api<MysqlDatabase> = Api::namespaced(sc.cluster.client.clone(), &ns);

    // Someone's own Service holds the name first.
    let foreign = Service {
        metadata: ObjectMeta { name: Some("taken-primary".into()), ..ObjectMeta::default() },
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([("app".to_owned(), "theirs".to_owned())])),
            ports: Some(vec![ServicePort { name: Some("sql".into()), port: 5432, ..ServicePort::default() }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    let before = services.create(&PostParams::default(), &foreign).await.unwrap();
    database(&sc.cluster, &ns, "taken", &name, &[]).await;
    let c = wait_primary(&dbs, "taken", "False PrimaryServiceConflict", |c| c.reason == "PrimaryServiceConflict").await;
    assert!(c.message.contains("taken-primary") && c.message.contains("does not own"), "{c:?}");
    let note = wait_object_event(&sc.cluster, &ns, "taken", "PrimaryServiceConflict").await;
    assert!(note.contains("taken-primary"), "{note}");
    // Its Ready condition is unaffected: the database has authority (once
    // the group's reconciler has written its claim).
    wait_for("taken: Ready True", T, || async {
        let ready = dbs.get("taken").await.map_err(|e| e.to_string())?.status.unwrap_or_default().conditions;
        if ready.iter().any(|c| c.type_ == "Ready" && c.status == "True") { Ok(()) } else { Err(format!("{ready:?}")) }
    })
    .await;
    let after = services.get("taken-primary").await.unwrap();
    assert_eq!(after.metadata.resource_version, before.metadata.resource_version, "never written: {after:?}");
    assert_eq!(after.metadata.owner_references, None);

    // 56 characters: `<name>-primary` would exceed 63.
    let long = "a".repeat(56);
    database(&sc.cluster, &ns, &long, &name, &[]).await;
    let c =
        wait_primary(&dbs, &long, "False PrimaryServiceNameInvalid", |c| c.reason == "PrimaryServiceNameInvalid").await;
    assert!(c.message.contains("at most 55 characters"), "{c:?}");
    wait_object_event(&sc.cluster, &ns, &long, "PrimaryServiceNameInvalid").await;

    // A database of 55 characters on the same group gets its Service (and
    // the two above still have none of theirs).
    let fits = "b".repeat(55);
    database(&sc.cluster, &ns, &fits, &name, &[]).await;
    wait_service(&services, &format!("{fits}-primary"), "created", T, |_| Ok(())).await;
    let list = services.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list.items.iter().filter_map(|s| s.metadata.name.clone()).collect();
    assert_eq!(names.len(), 2, "the foreign one and the 55-character one: {names:?}");
    sc.cluster.delete_group(&name).await;
}

/// A namespace admin (the `admin` ClusterRole, with its own token) adds a
/// selector, an external IP and a port to `<db>-primary`: the operator
/// removes each of them (server-side apply alone leaves another manager's
/// fields), says so in a Warning Event naming the fields and who set them,
/// and the EndpointSlice controller's slice for the selector goes with it.
/// Then the admin removes the Service's ownerReference: the operator no
/// longer keeps it, and its own EndpointSlice, which kept routing to the
/// last site it named, is deleted at once (clients fail fast instead of
/// reaching a former primary).
#[tokio::test]
async fn what_a_namespace_admin_adds_to_the_primary_service_is_removed_and_an_orphan_loses_its_endpoint() {
    let cluster = bloodraven_e2e::Cluster::connect().await;
    let ns = cluster.namespace("primarytamper").await;
    // Sites on the node's bridge address: an EndpointSlice may name it.
    let pair = bloodraven_e2e::SitePair::start_on("primarytamper", &bloodraven_e2e::pods::node_address());
    ns.credentials_secret(SITE_SECRET, "bloodraven", bloodraven_e2e::cluster::OPERATOR_DB_PASSWORD).await;
    let op = bloodraven_e2e::Operator::start(&cluster, &ns, &ns.name, "op", LeaderTimings::default()).await;
    let sc = Scenario { cluster, ns, pair, operators: vec![op] };
    let ns = sc.ns.name.clone();
    let name = sc.bootstrapped_group("g").await;
    database(&sc.cluster, &ns, "app", &name, &[]).await;
    let dbs: Api<MysqlDatabase> = Api::namespaced(sc.cluster.client.clone(), &ns);
    wait_primary(&dbs, "app", "True PointsAtActiveSite", |c| c.reason == "PointsAtActiveSite").await;
    let slices: Api<EndpointSlice> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let routed = ListParams::default().labels("kubernetes.io/service-name=app-primary");
    let ours = slices.get("app-primary").await.unwrap();
    assert_eq!(ours.endpoints[0].addresses, vec![bloodraven_e2e::pods::node_address()]);

    let admin = namespace_admin(&sc.cluster, &ns).await;
    let admin_services: Api<Service> = Api::namespaced(admin, &ns);
    let fake_ip = fake_pod(&sc.cluster, &ns).await;
    let as_admin = PatchParams { field_manager: Some("tenant-edit".into()), ..PatchParams::default() };
    let tamper = serde_json::json!({"metadata": {"labels": {"service.kubernetes.io/service-proxy-name": "theirs"}}, "spec": {
        "selector": {"app": "fake"},
        "externalIPs": ["192.0.2.10"],
        "ports": [{"name": "mysql", "port": 3306, "protocol": "TCP", "targetPort": sc.pair.iad_port},
                  {"name": "other", "port": 3307, "protocol": "TCP", "targetPort": 3307}],
    }});
    wait_for("the admin's edit", T, || async {
        admin_services.patch("app-primary", &as_admin, &Patch::Merge(&tamper)).await.map_err(|e| e.to_string())
    })
    .await;
    let services: Api<Service> = Api::namespaced(sc.cluster.client.clone(), &ns);
    let svc = wait_service(&services, "app-primary", "the stray routing fields removed", PROMPT, |svc| {
        let s = spec(svc);
        let ports = s.ports.clone().unwrap_or_default();
        let proxy = svc.metadata.labels.as_ref().and_then(|l| l.get("service.kubernetes.io/service-proxy-name"));
        match (&s.selector, &s.external_ips, ports.len(), proxy) {
            (None, None, 1, None) if ports[0].port == 3306 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(spec(&svc).type_.as_deref(), Some("ClusterIP"));
    let note = wait_object_event(&sc.cluster, &ns, "app", "PrimaryServiceTampered").await;
    for part in [
        "spec.selector",
        "spec.externalIPs",
        "spec.ports",
        "metadata.labels[service.kubernetes.io/service-proxy-name]",
        "tenant-edit",
        "app-primary",
    ] {
        assert!(note.contains(part), "{part}: {note}");
    }
    // Only the operator's slice routes the Service once the selector is gone.
    wait_for("only the operator's EndpointSlice", T, || async {
        let list = slices.list(&routed).await.map_err(|e| e.to_string())?;
        let names: Vec<_> = list.items.iter().filter_map(|s| s.metadata.name.clone()).collect();
        if names == ["app-primary"] { Ok(()) } else { Err(format!("{names:?}")) }
    })
    .await;
    // The Endpoints controller's object for the selector, which it leaves
    // behind and the mirroring controller would route, goes too; and
    // nothing names the fake Pod afterwards.
    let endpoints: Api<Endpoints> = Api::namespaced(sc.cluster.client.clone(), &ns);
    wait_for("no Endpoints object app-primary", T, || async {
        match endpoints.get_opt("app-primary").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(e) => Err(format!("{:?}", e.subsets)),
        }
    })
    .await;
    let routed_only_by_us = || async {
        let list = slices.list(&routed).await.unwrap();
        let names: Vec<_> = list.items.iter().filter_map(|s| s.metadata.name.clone()).collect();
        let to_fake = list.items.iter().flat_map(|s| &s.endpoints).any(|e| e.addresses.contains(&fake_ip));
        assert!(names == ["app-primary"] && !to_fake, "slices {names:?}, one names the fake Pod: {to_fake}");
    };
    for _ in 0..10 {
        routed_only_by_us().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let c = wait_primary(&dbs, "app", "True PointsAtActiveSite", |c| c.reason == "PointsAtActiveSite").await;
    assert_eq!(c.status, "True");

    forged_endpoints_go(&endpoints, &slices, &routed, &fake_ip).await;
    routed_only_by_us().await;

    // The admin orphans the Service (as `kubectl replace` from a manifest
    // without an ownerReference would).
    let orphan = serde_json::json!({"metadata": {"ownerReferences": null}});
    admin_services.patch("app-primary", &as_admin, &Patch::Merge(&orphan)).await.unwrap();
    let c = wait_primary(&dbs, "app", "False PrimaryServiceConflict", |c| c.reason == "PrimaryServiceConflict").await;
    assert_eq!(c.status, "False");
    wait_for("the operator's EndpointSlice deleted", PROMPT, || async {
        let list = slices.list(&routed).await.map_err(|e| e.to_string())?;
        if list.items.is_empty() { Ok(()) } else { Err(format!("{} slices", list.items.len())) }
    })
    .await;

    headless_in_its_place(&admin_services, &dbs, &slices, &routed).await;
    sc.cluster.delete_group(&name).await;
}

/// A client acting as namespace `ns`'s admin (the `admin` ClusterRole),
/// with a token of its own.
async fn namespace_admin(cluster: &bloodraven_e2e::Cluster, ns: &str) -> kube::Client {
    use bloodraven_e2e::deploy::{service_account, token};
    use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};

    service_account(cluster, ns, "admin").await;
    let binding = RoleBinding {
        metadata: ObjectMeta { name: Some("admin".into()), ..ObjectMeta::default() },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "admin".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "admin".into(),
            namespace: Some(ns.to_owned()),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(cluster.client.clone(), ns).create(&PostParams::default(), &binding).await.unwrap();
    cluster.client_with_token(&token(cluster, ns, "admin", &[]).await).await
}

/// A Pod labelled `app=fake` in `ns`, answering nothing; its IP once Ready.
async fn fake_pod(cluster: &bloodraven_e2e::Cluster, ns: &str) -> String {
    // What matters is whether any slice names it.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    let fake = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fake", "labels": {"app": "fake"}},
        "spec": {"containers": [{"name": "fake", "image": image("BLOODRAVEN_BUSYBOX_IMAGE"),
                                 "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]},
    });
    bloodraven_e2e::pods::apply(&pods, fake).await;
    wait_for("the fake Pod Ready", T, || async {
        let pod = pods.get("fake").await.map_err(|e| e.to_string())?;
        let status = pod.status.unwrap_or_default();
        let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        match status.pod_ip {
            Some(ip) if ready => Ok(ip),
            other => Err(format!("ready {ready}, ip {other:?}")),
        }
    })
    .await
}

/// The admin puts a headless Service in place of `app-primary`, with an
/// ownerReference to the database (it can read its UID): an immutable
/// clusterIP the operator cannot undo, so it keeps no endpoint for it.
async fn headless_in_its_place(
    admin_services: &Api<Service>,
    dbs: &Api<MysqlDatabase>,
    slices: &Api<EndpointSlice>,
    routed: &ListParams,
) {
    let uid = dbs.get("app").await.unwrap().metadata.uid.unwrap();
    let headless: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "app-primary", "ownerReferences": [{
            "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase",
            "name": "app", "uid": uid, "controller": true}]},
        "spec": {"clusterIP": "None", "ports": [{"name": "mysql", "port": 3306}]},
    }))
    .unwrap();
    wait_for("the admin's headless Service in place", T, || async {
        let _ = admin_services.delete("app-primary", &kube::api::DeleteParams::default()).await;
        match admin_services.create(&PostParams::default(), &headless).await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let c =
        wait_primary(dbs, "app", "False PrimaryServiceConflict (headless)", |c| c.message.contains("headless")).await;
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "PrimaryServiceConflict"));
    wait_for("no slice routes the headless Service", PROMPT, || async {
        let list = slices.list(routed).await.map_err(|e| e.to_string())?;
        if list.items.is_empty() { Ok(()) } else { Err(format!("{} slices", list.items.len())) }
    })
    .await;
}

/// An Endpoints object of `app-primary`'s name written by hand (a tenant
/// may, on clusters whose `edit` role predates Kubernetes 1.22) is
/// mirrored into a slice; both go.
async fn forged_endpoints_go(
    endpoints: &Api<Endpoints>,
    slices: &Api<EndpointSlice>,
    routed: &ListParams,
    fake_ip: &str,
) {
    let forged = serde_json::json!({
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "app-primary"},
        "subsets": [{"addresses": [{"ip": fake_ip}], "ports": [{"name": "mysql", "port": 3306}]}],
    });
    bloodraven_e2e::pods::apply(endpoints, forged).await;
    wait_for("the forged Endpoints object and its mirrored slice deleted", T, || async {
        let list = slices.list(routed).await.map_err(|e| e.to_string())?;
        let names: Vec<_> = list.items.iter().filter_map(|s| s.metadata.name.clone()).collect();
        let left = endpoints.get_opt("app-primary").await.map_err(|e| e.to_string())?.is_some();
        if names == ["app-primary"] && !left {
            Ok(())
        } else {
            Err(format!("slices {names:?}, Endpoints left: {left}"))
        }
    })
    .await;
}
