use bloodraven_api::v1alpha1::SecretRef;

use super::*;

const OWNER: Owner<'static> = Owner { name: "counter-app", namespace: "team", uid: "uid-1" };

fn site(name: &str, host: &str, port: u16) -> Site {
    Site {
        name: name.into(),
        host: host.into(),
        port,
        credentials_secret_ref: SecretRef { namespace: "bloodraven".into(), name: "creds".into() },
    }
}

fn keep(plan: Plan) -> (Service, bool, Option<EndpointSlice>, Computed) {
    match plan {
        Plan::Keep { service, create, slice, condition } => (service, create, slice, condition),
        Plan::NameInvalid(c) => panic!("unexpected NameInvalid: {c:?}"),
    }
}

#[test]
fn the_service_name_is_a_dns_1035_label_or_an_error_naming_the_limit() {
    let long55 = "a".repeat(55);
    let long56 = "a".repeat(56);
    let valid = [
        ("counter-app", "counter-app-primary".to_owned()),
        ("a", "a-primary".to_owned()),
        ("app-2", "app-2-primary".to_owned()),
        (long55.as_str(), format!("{long55}-primary")), // exactly 63 characters
    ];
    for (name, want) in valid {
        assert_eq!(service_name(name), Ok(want), "{name}");
    }
    // A MysqlDatabase name is a DNS subdomain: up to 253 characters, may
    // start with a digit, may hold dots; a Service name may do none of that.
    for name in [long56.as_str(), "1app", "app.v2", &"b".repeat(253)] {
        let err = service_name(name).expect_err(name);
        assert!(err.contains("at most 55 characters") && err.contains("DNS-1035"), "{err}");
    }
}

#[test]
fn hosts_are_classified_as_an_endpoint_a_dns_name_or_unroutable() {
    let cases = [
        ("10.1.2.3", Host::Ip("10.1.2.3".parse().unwrap())),
        ("2001:db8::7", Host::Ip("2001:db8::7".parse().unwrap())),
        // IPv4-mapped IPv6 is its IPv4 address (the API server prefers one form).
        ("::ffff:10.0.0.9", Host::Ip("10.0.0.9".parse().unwrap())),
        ("MySQL-IAD.Example.internal", Host::Dns("mysql-iad.example.internal".into())),
        ("localhost", Host::Dns("localhost".into())),
    ];
    for (host, want) in cases {
        assert_eq!(classify(host), want, "{host}");
    }
    for host in ["127.0.0.1", "127.9.9.9", "::1", "0.0.0.0", "::", "169.254.1.1", "fe80::1", "224.0.0.1", "ff02::1"] {
        assert!(matches!(classify(host), Host::Unroutable(_)), "{host}: {:?}", classify(host));
    }
    let long_label = format!("{}.example", "a".repeat(64));
    assert!(matches!(classify(&long_label), Host::Unroutable(m) if m.contains("DNS-1123")));
}

#[test]
fn an_ip_site_gets_a_cluster_ip_service_on_3306_and_one_endpoint_at_the_site() {
    let iad = site("iad", "10.0.0.5", 3307);
    let (svc, create, slice, condition) = keep(plan(
        OWNER,
        Ok(Decided {
            group: "playground",
            site: &iad,
            generation: 4,
            unconfirmed: false,
            read_only: false,
            observed: None,
        }),
    ));
    assert!(create && condition.is_true() && condition.reason == reason::POINTS_AT_ACTIVE_SITE, "{condition:?}");
    assert_eq!(svc.metadata.name.as_deref(), Some("counter-app-primary"));
    assert_eq!(svc.metadata.namespace.as_deref(), Some("team"));
    let spec = svc.spec.clone().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.selector, None, "selector-less: the operator keeps the endpoints");
    let ports = spec.ports.unwrap();
    assert_eq!(
        (ports.len(), ports[0].name.as_deref(), ports[0].port, ports[0].target_port.clone()),
        (1, Some("mysql"), 3306, Some(IntOrString::Int(3307)))
    );
    let owner = &svc.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str(), owner.controller),
        ("MysqlDatabase", "counter-app", "uid-1", Some(true))
    );
    let annotations = svc.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[TOPOLOGY_GENERATION_ANNOTATION], "4");
    assert_eq!(annotations[ACTIVE_SITE_ANNOTATION], "iad");
    assert_eq!(annotations[GROUP_ANNOTATION], "playground");

    let slice = slice.unwrap();
    let labels = slice.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/service-name"], "counter-app-primary");
    assert_eq!(labels["endpointslice.kubernetes.io/managed-by"], "bloodraven.shipstream.io");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "bloodraven-operator");
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.endpoints.len(), 1);
    assert_eq!(slice.endpoints[0].addresses, vec!["10.0.0.5".to_owned()]);
    let port = &slice.ports.as_ref().unwrap()[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("mysql"), Some(3307)));
    assert!(owned_by(&slice.metadata, "uid-1") && !owned_by(&slice.metadata, "uid-2"));

    let v6 = site("iad", "2001:db8::5", 3306);
    let (_, _, slice, _) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &v6, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    assert_eq!(slice.unwrap().address_type, "IPv6");
}

#[test]
fn a_new_decision_repoints_the_same_service_at_the_other_site() {
    // The repoint as the failover engine causes it: same database, the
    // group's activeSite and generation moved.
    let (iad, pdx) = (site("iad", "10.0.0.5", 3306), site("pdx", "10.1.0.5", 3307));
    let (svc1, _, slice1, _) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    let (svc2, _, slice2, c2) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &pdx, generation: 2, unconfirmed: false, read_only: false, observed: None }),
    ));
    let (slice1, slice2) = (slice1.unwrap(), slice2.unwrap());
    assert_eq!(svc1.metadata.name, svc2.metadata.name);
    assert_eq!(slice1.metadata.name, slice2.metadata.name, "one EndpointSlice, rewritten in place");
    assert_eq!(slice2.endpoints[0].addresses, vec!["10.1.0.5".to_owned()]);
    assert_eq!(slice2.ports.as_ref().unwrap()[0].port, Some(3307));
    assert_eq!(svc2.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 3306, "applications keep port 3306");
    assert!(c2.message.contains("pdx") && c2.message.contains("generation 2"), "{c2:?}");
    // Each is a change the no-write check sees.
    assert!(!slice_matches(&slice1, &slice2) && !service_matches(&svc1, &svc2));
    assert!(slice_matches(&slice2, &slice2) && service_matches(&svc2, &svc2));
}

#[test]
fn a_dns_site_gets_an_external_name_and_no_endpoint_slice() {
    let iad = site("iad", "MySQL-IAD.example.internal", 3307);
    let (svc, create, slice, condition) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ExternalName"));
    assert_eq!(spec.external_name.as_deref(), Some("mysql-iad.example.internal"));
    assert_eq!(spec.ports.unwrap()[0].port, 3307, "ExternalName cannot remap ports");
    assert!(create && slice.is_none() && condition.is_true(), "{condition:?}");
    assert!(condition.message.contains("port 3307"), "{condition:?}");
}

#[test]
fn an_unroutable_host_keeps_the_service_without_endpoints_and_says_why() {
    let iad = site("iad", "127.0.0.1", 3307);
    let (svc, create, slice, condition) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    assert!(create && slice.is_none());
    assert_eq!((condition.status, condition.reason), ("False", reason::UNROUTABLE_SITE_HOST));
    assert!(condition.message.contains("127.0.0.1") && condition.message.contains("loopback"), "{condition:?}");
}

#[test]
fn without_a_target_the_service_is_parked_never_created_and_has_no_endpoints() {
    let (svc, create, slice, condition) = keep(plan(OWNER, Err("failover group g has no decided active site".into())));
    assert!(!create && slice.is_none());
    let spec = svc.spec.clone().unwrap();
    assert_eq!((spec.type_.as_deref(), spec.external_name), (Some("ClusterIP"), None));
    assert_eq!(svc.metadata.annotations, None, "no site, no generation");
    assert_eq!((condition.status, condition.reason), ("False", reason::NO_ACTIVE_SITE));
    assert!(condition.message.contains("no decided active site"), "{condition:?}");
    // A formerly pointing Service differs from the parked one, so it is rewritten.
    let iad = site("iad", "db.example", 3306);
    let (pointing, ..) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    assert!(!service_matches(&pointing, &svc));
}

#[test]
fn an_invalid_name_plans_nothing() {
    let long = "a".repeat(56);
    let owner = Owner { name: &long, ..OWNER };
    let iad = site("iad", "10.0.0.5", 3306);
    match plan(
        owner,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ) {
        Plan::NameInvalid(c) => assert_eq!((c.status, c.reason), ("False", reason::PRIMARY_SERVICE_NAME_INVALID)),
        other @ Plan::Keep { .. } => panic!("{other:?}"),
    }
}

#[test]
fn server_defaults_and_foreign_keys_do_not_count_as_a_change() {
    let iad = site("iad", "10.0.0.5", 3306);
    let (want, _, slice, _) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    let mut have = want.clone();
    let spec = have.spec.as_mut().unwrap();
    spec.cluster_ip = Some("10.96.0.10".into());
    spec.session_affinity = Some("None".into());
    have.metadata.resource_version = Some("42".into());
    have.metadata.labels.as_mut().unwrap().insert("team".into(), "x".into());
    assert!(service_matches(&have, &want));
    // An edit of a field the operator sets is a change.
    have.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].target_port = Some(IntOrString::Int(1));
    assert!(!service_matches(&have, &want));
    // A slice not owned by this database is never "matching".
    let mut foreign = slice.clone().unwrap();
    foreign.metadata.owner_references = None;
    assert!(!slice_matches(&foreign, &slice.unwrap()));
}

#[test]
fn fields_someone_else_adds_that_could_route_traffic_are_named_and_removed() {
    let iad = site("iad", "10.0.0.5", 3306);
    let (want, _, _, _) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    let mut clean = want.clone();
    let spec = clean.spec.as_mut().unwrap();
    spec.cluster_ip = Some("10.96.0.10".into());
    spec.cluster_ips = Some(vec!["10.96.0.10".into()]);
    spec.ip_families = Some(vec!["IPv4".into()]);
    spec.ip_family_policy = Some("SingleStack".into());
    spec.session_affinity = Some("None".into());
    spec.internal_traffic_policy = Some("Cluster".into());
    assert_eq!(stray_routing(&clean, &want), None, "server defaults are not strays");

    // Each kind of stray: the field, and what the patch sets it to.
    let mut extra_port = want.spec.clone().unwrap().ports.unwrap()[0].clone();
    extra_port.port = 3307;
    for (edit, field, fixed) in [
        (
            Box::new(|s: &mut ServiceSpec| s.selector = Some([("app".to_owned(), "fake".to_owned())].into()))
                as Box<dyn Fn(&mut ServiceSpec)>,
            "spec.selector",
            serde_json::Value::Null,
        ),
        (
            Box::new(|s: &mut ServiceSpec| s.external_name = Some("evil.example".into())),
            "spec.externalName",
            serde_json::Value::Null,
        ),
        (
            Box::new(|s: &mut ServiceSpec| s.external_ips = Some(vec!["192.0.2.9".into()])),
            "spec.externalIPs",
            serde_json::Value::Null,
        ),
        (
            Box::new(|s: &mut ServiceSpec| s.load_balancer_source_ranges = Some(vec!["0.0.0.0/0".into()])),
            "spec.loadBalancerSourceRanges",
            serde_json::Value::Null,
        ),
        (
            Box::new(|s: &mut ServiceSpec| s.session_affinity = Some("ClientIP".into())),
            "spec.sessionAffinity",
            "None".into(),
        ),
        (
            Box::new(|s: &mut ServiceSpec| s.internal_traffic_policy = Some("Local".into())),
            "spec.internalTrafficPolicy",
            "Cluster".into(),
        ),
        (
            Box::new(move |s: &mut ServiceSpec| s.ports.as_mut().unwrap().push(extra_port.clone())),
            "spec.ports",
            serde_json::to_value(want.spec.as_ref().unwrap().ports.clone()).unwrap(),
        ),
    ] {
        let mut have = clean.clone();
        edit(have.spec.as_mut().unwrap());
        assert!(!service_matches(&have, &want), "{field}: a stray is a change");
        let (patch, fields) = stray_routing(&have, &want).unwrap_or_else(|| panic!("{field} not found"));
        assert_eq!(fields, vec![field.to_owned()]);
        assert_eq!(patch["spec"][field.trim_start_matches("spec.")], fixed, "{field}: {patch}");
    }

    // An ExternalName Service keeps its externalName.
    let (external, _, _, _) = keep(plan(
        OWNER,
        Ok(Decided {
            group: "g",
            site: &site("iad", "db.iad.example", 3306),
            generation: 1,
            unconfirmed: false,
            read_only: false,
            observed: None,
        }),
    ));
    assert_eq!(stray_routing(&external, &external), None);
}

#[test]
fn labels_that_take_the_service_from_kube_proxy_are_strays_and_a_headless_one_is_not_kept() {
    let iad = site("iad", "10.0.0.5", 3306);
    let (want, _, _, _) = keep(plan(
        OWNER,
        Ok(Decided { group: "g", site: &iad, generation: 1, unconfirmed: false, read_only: false, observed: None }),
    ));
    for label in ["service.kubernetes.io/service-proxy-name", "service.kubernetes.io/headless"] {
        let mut have = want.clone();
        have.metadata.labels.get_or_insert_default().insert(label.into(), "theirs".into());
        let (patch, fields) = stray_routing(&have, &want).unwrap_or_else(|| panic!("{label} not found"));
        assert_eq!(fields, vec![format!("metadata.labels[{label}]")]);
        assert_eq!(patch["metadata"]["labels"][label], serde_json::Value::Null, "{patch}");
        assert!(patch.get("spec").is_none(), "{patch}");
    }
    assert!(!headless_instead(&want, &want));
    let mut headless = want.clone();
    headless.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    assert!(headless_instead(&headless, &want));
}

#[test]
fn the_managers_of_stray_fields_are_named_but_never_the_operator() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    let entry = |manager: &str, fields: serde_json::Value| ManagedFieldsEntry {
        manager: Some(manager.into()),
        fields_v1: Some(FieldsV1(fields)),
        ..ManagedFieldsEntry::default()
    };
    let mut have = Service::default();
    have.metadata.managed_fields = Some(vec![
        entry("kubectl-patch", serde_json::json!({"f:spec": {"f:selector": {"f:app": {}}}})),
        entry(bloodraven_api::names::PRIMARY_SERVICE_FIELD_MANAGER, serde_json::json!({"f:spec": {"f:ports": {}}})),
        entry("helm", serde_json::json!({"f:metadata": {"f:labels": {}}})),
        entry("tenant", serde_json::json!({"f:metadata": {"f:labels": {"f:service.kubernetes.io/headless": {}}}})),
    ]);
    assert_eq!(managers_of(&have, &["spec.selector".into(), "spec.ports".into()]), vec!["kubectl-patch".to_owned()]);
    assert_eq!(
        managers_of(&have, &["metadata.labels[service.kubernetes.io/headless]".into()]),
        vec!["tenant".to_owned()]
    );
}
