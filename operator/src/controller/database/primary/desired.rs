//! What a MysqlDatabase's `<name>-primary` Service and EndpointSlice should
//! be, as a pure function of (database, decided site): no I/O, so every
//! shape is a table test.
//!
//! | active site's host | Service | EndpointSlice |
//! |---|---|---|
//! | routable IP | ClusterIP, no selector, port `mysql` 3306 → the site's port | one endpoint: the host, the site's port |
//! | DNS-1123 name | ExternalName = the host (lowercased), port `mysql` = the site's port | none (an old one is deleted) |
//! | loopback, link-local, multicast or unspecified IP; a name that is not DNS-1123 | ClusterIP as above | none: condition `UnroutableSiteHost` |
//! | no target (no authority, no group, no decision) | an existing one is parked: ClusterIP 3306 → 3306, never created | none: connections fail fast rather than reach a former primary |
//!
//! Applications always connect to `<name>-primary.<namespace>.svc:3306`
//! when the host is an IP: the Service port is fixed and the EndpointSlice
//! carries the site's port, so a planned failover between sites that listen on
//! different ports needs no change in the application. ExternalName is a
//! DNS CNAME and cannot remap ports: with DNS hosts the application uses
//! the site's port (keep both sites on one port).
//!
//! Both objects carry a controller ownerReference to the MysqlDatabase (the
//! garbage collector deletes them with it), `app.kubernetes.io/managed-by`,
//! the `primary-of` label (what the operator watches), and the group, site
//! and topology generation as annotations.

use std::collections::BTreeMap;
use std::net::IpAddr;

use bloodraven_api::names::{
    ACTIVE_SITE_ANNOTATION, ENDPOINT_SLICE_MANAGER, GROUP_ANNOTATION, MANAGED_BY, PRIMARY_OF_LABEL,
    PRIMARY_SERVICE_PORT, PRIMARY_SERVICE_SUFFIX, TOPOLOGY_GENERATION_ANNOTATION,
};
use bloodraven_api::v1alpha1::{MysqlDatabase, Site, SiteHealth, reason};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

use crate::controller::conditions::Computed;

/// Type of the condition on the MysqlDatabase that reports its Service.
pub(crate) const CONDITION: &str = "PrimaryService";

/// Name of the port on the Service and the EndpointSlice.
const PORT_NAME: &str = "mysql";

/// The MysqlDatabase the objects belong to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owner<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.namespace` (where the Service lives).
    pub namespace: &'a str,
    /// `metadata.uid` (the ownerReference, and the test of "ours").
    pub uid: &'a str,
}

/// Where the Service should point: the group's decided active site.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decided<'a> {
    /// The group's name.
    pub group: &'a str,
    /// The active site's spec entry.
    pub site: &'a Site,
    /// `status.topologyGeneration` of the decision.
    pub generation: i64,
    /// Whether the group's last written probe did *not* find the active
    /// site answering as itself at its spec endpoint: the objects are then
    /// left as they are (a spec edit is not a decision).
    pub unconfirmed: bool,
    /// Whether that probe found the active site answering read-only: a
    /// decided site is promoted right after its decision, and the objects
    /// are left as they are until it answers writable, so a reconnect never
    /// reaches a new primary that still refuses writes.
    pub read_only: bool,
    /// That probe's result for the active site, if any (for the condition).
    pub observed: Option<&'a SiteHealth>,
}

/// What to keep for one MysqlDatabase.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // one plan per reconcile, consumed at once, never stored
pub(crate) enum Plan {
    /// `<name>-primary` is not a valid Service name: nothing is written.
    NameInvalid(Computed),
    /// Keep `service`; keep `slice`, or delete the operator's EndpointSlice
    /// when `None`.
    Keep {
        /// The Service as it should be.
        service: Service,
        /// Whether to create the Service when it does not exist (false
        /// when there is no target: a parked Service is never created).
        create: bool,
        /// The EndpointSlice as it should be, `None` for none.
        slice: Option<EndpointSlice>,
        /// The `PrimaryService` condition this plan reports once written.
        condition: Computed,
    },
}

/// The Service name of MysqlDatabase `name`: `<name>-primary`, which must
/// be a DNS-1035 label (1–63 characters of `a-z`, `0-9`, `-`, starting
/// with a letter and ending with a letter or digit; Kubernetes API
/// conventions, "Service names"). A MysqlDatabase name is a DNS subdomain
/// (up to 253 characters, may start with a digit or hold dots), so not
/// every one has a Service; the error says what the limit is.
pub(crate) fn service_name(name: &str) -> Result<String, String> {
    let service = format!("{name}{PRIMARY_SERVICE_SUFFIX}");
    let bytes = service.as_bytes();
    let valid = service.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if valid {
        return Ok(service);
    }
    let max = 63 - PRIMARY_SERVICE_SUFFIX.len();
    Err(format!(
        "no Service {PRIMARY_SERVICE_SUFFIX:?} for this MysqlDatabase: Service names are DNS-1035 labels (at most 63 characters of a-z, 0-9 and '-', starting with a letter), so a MysqlDatabase with a primary Service needs a name of at most {max} characters that starts with a letter and holds no '.' (this one has {} characters); applications must read the group's status.activeSite instead, or the MysqlDatabase be re-created under a shorter name",
        name.len()
    ))
}

/// How an active site's host can be a Service target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Host {
    /// An IP address an EndpointSlice may hold (canonical form).
    Ip(IpAddr),
    /// A DNS-1123 subdomain, lowercased, for an ExternalName Service.
    Dns(String),
    /// Neither; the reason, for the condition message.
    Unroutable(String),
}

/// Classifies `host` (a `spec.sites[].host`: a DNS name, an IPv4 address,
/// or an IPv6 address without brackets). An IPv4-mapped IPv6 address is
/// its IPv4 address. Refused as targets, as the API server refuses them in
/// an EndpointSlice (and a Pod could not reach them): loopback,
/// unspecified, link-local, multicast and broadcast addresses.
pub(crate) fn classify(host: &str) -> Host {
    if let Ok(ip) = host.parse::<IpAddr>() {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        let special = match ip {
            IpAddr::V4(v4) => (v4.is_loopback() || v4.is_link_local() || v4.is_broadcast())
                .then_some("loopback, link-local or broadcast"),
            IpAddr::V6(v6) => {
                (v6.is_loopback() || v6.segments()[0] & 0xffc0 == 0xfe80).then_some("loopback or link-local")
            }
        }
        .or_else(|| ip.is_unspecified().then_some("unspecified"))
        .or_else(|| ip.is_multicast().then_some("multicast"));
        return match special {
            Some(kind) => Host::Unroutable(format!(
                "the active site's host {ip} is a {kind} address, which an EndpointSlice cannot hold and a Pod cannot reach; give the site an address or name Pods can reach"
            )),
            None => Host::Ip(ip),
        };
    }
    let lower = host.to_ascii_lowercase();
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if lower.len() <= 253 && lower.split('.').all(label_ok) {
        Host::Dns(lower)
    } else {
        Host::Unroutable(format!(
            "the active site's host {:?} is neither an IP address nor a DNS-1123 name (labels of at most 63 characters), which an ExternalName Service needs",
            bloodraven_serving::log::escape(host, 64)
        ))
    }
}

/// The plan for `owner`: pointing at `target`, or, when there is none,
/// parked with `why` (what the condition says).
pub(crate) fn plan(owner: Owner<'_>, target: Result<Decided<'_>, String>) -> Plan {
    let name = match service_name(owner.name) {
        Ok(name) => name,
        Err(message) => {
            return Plan::NameInvalid(Computed::flag(CONDITION, false, reason::PRIMARY_SERVICE_NAME_INVALID, message));
        }
    };
    let decided = match target {
        Ok(decided) => decided,
        Err(why) => {
            let condition = Computed::flag(
                CONDITION,
                false,
                reason::NO_ACTIVE_SITE,
                format!("Service {name} points nowhere (no EndpointSlice): {why}"),
            );
            let service = service(owner, &name, None, cluster_ip_spec(PRIMARY_SERVICE_PORT));
            return Plan::Keep { service, create: false, slice: None, condition };
        }
    };
    let site = decided.site;
    let meta = Some(decided);
    let (spec, slice, condition) = match classify(&site.host) {
        Host::Ip(ip) => {
            let slice = endpoint_slice(owner, &name, decided, ip);
            let condition = Computed::flag(
                CONDITION,
                true,
                reason::POINTS_AT_ACTIVE_SITE,
                format!(
                    "Service {name} (port {PRIMARY_SERVICE_PORT}) points at active site {} ({ip} port {}) of failover group {}, topology generation {}",
                    site.name, site.port, decided.group, decided.generation
                ),
            );
            (cluster_ip_spec(site.port), Some(slice), condition)
        }
        Host::Dns(host) => {
            let condition = Computed::flag(
                CONDITION,
                true,
                reason::POINTS_AT_ACTIVE_SITE,
                format!(
                    "Service {name} is an ExternalName for {host}: connect on the site's port {}; it points at active site {} of failover group {}, topology generation {}",
                    site.port, site.name, decided.group, decided.generation
                ),
            );
            let spec = ServiceSpec {
                type_: Some("ExternalName".into()),
                external_name: Some(host),
                ports: Some(vec![port(site.port, site.port)]),
                ..ServiceSpec::default()
            };
            (spec, None, condition)
        }
        Host::Unroutable(why) => {
            let condition = Computed::flag(
                CONDITION,
                false,
                reason::UNROUTABLE_SITE_HOST,
                format!("Service {name} points nowhere (no EndpointSlice): {why}"),
            );
            (cluster_ip_spec(site.port), None, condition)
        }
    };
    Plan::Keep { service: service(owner, &name, meta, spec), create: true, slice, condition }
}

fn port(port: u16, target: u16) -> ServicePort {
    ServicePort {
        name: Some(PORT_NAME.into()),
        port: i32::from(port),
        target_port: Some(IntOrString::Int(i32::from(target))),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

fn cluster_ip_spec(target: u16) -> ServiceSpec {
    ServiceSpec {
        type_: Some("ClusterIP".into()),
        ports: Some(vec![port(PRIMARY_SERVICE_PORT, target)]),
        ..ServiceSpec::default()
    }
}

fn owner_reference(owner: Owner<'_>) -> OwnerReference {
    OwnerReference {
        api_version: MysqlDatabase::api_version(&()).into_owned(),
        kind: MysqlDatabase::kind(&()).into_owned(),
        name: owner.name.to_owned(),
        uid: owner.uid.to_owned(),
        controller: Some(true),
        // Not set: blocking the owner's foreground deletion needs update on
        // mysqldatabases/finalizers (OwnerReferencesPermissionEnforcement),
        // a permission the operator has no other use for.
        block_owner_deletion: None,
    }
}

fn metadata(owner: Owner<'_>, name: &str, decided: Option<Decided<'_>>, extra: &[(&str, &str)]) -> ObjectMeta {
    let mut labels = BTreeMap::from([
        ("app.kubernetes.io/managed-by".to_owned(), MANAGED_BY.to_owned()),
        (PRIMARY_OF_LABEL.to_owned(), owner.name.to_owned()),
    ]);
    labels.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let annotations = decided.map(|d| {
        BTreeMap::from([
            (GROUP_ANNOTATION.to_owned(), d.group.to_owned()),
            (ACTIVE_SITE_ANNOTATION.to_owned(), d.site.name.clone()),
            (TOPOLOGY_GENERATION_ANNOTATION.to_owned(), d.generation.to_string()),
        ])
    });
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(owner.namespace.to_owned()),
        labels: Some(labels),
        annotations,
        owner_references: Some(vec![owner_reference(owner)]),
        ..ObjectMeta::default()
    }
}

fn service(owner: Owner<'_>, name: &str, decided: Option<Decided<'_>>, spec: ServiceSpec) -> Service {
    Service { metadata: metadata(owner, name, decided, &[]), spec: Some(spec), status: None }
}

fn endpoint_slice(owner: Owner<'_>, name: &str, decided: Decided<'_>, ip: IpAddr) -> EndpointSlice {
    let extra =
        [("kubernetes.io/service-name", name), ("endpointslice.kubernetes.io/managed-by", ENDPOINT_SLICE_MANAGER)];
    EndpointSlice {
        metadata: metadata(owner, name, Some(decided), &extra),
        address_type: if ip.is_ipv4() { "IPv4" } else { "IPv6" }.into(),
        endpoints: vec![Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions { ready: Some(true), ..EndpointConditions::default() }),
            ..Endpoint::default()
        }],
        ports: Some(vec![EndpointPort {
            name: Some(PORT_NAME.into()),
            port: Some(i32::from(decided.site.port)),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
    }
}

/// Whether `meta` carries a controller ownerReference to the MysqlDatabase
/// with UID `uid`: the only objects the operator ever changes or deletes.
pub(crate) fn owned_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true))
}

/// Whether the metadata the operator sets (labels, its three annotations,
/// its ownerReference) is as `want` says in `have`; others' keys are ignored.
fn meta_matches(have: &ObjectMeta, want: &ObjectMeta) -> bool {
    let labels_ok = want.labels.iter().flatten().all(|(k, v)| have.labels.as_ref().and_then(|l| l.get(k)) == Some(v));
    let annotations_ok = [GROUP_ANNOTATION, ACTIVE_SITE_ANNOTATION, TOPOLOGY_GENERATION_ANNOTATION].iter().all(|k| {
        have.annotations.as_ref().and_then(|a| a.get(*k)) == want.annotations.as_ref().and_then(|a| a.get(*k))
    });
    let owner_ok =
        want.owner_references.iter().flatten().all(|w| have.owner_references.iter().flatten().any(|h| h == w));
    labels_ok && annotations_ok && owner_ok
}

/// The keys of a Service's spec that may stay as stored: the operator's
/// own (`type`, `ports`, `externalName`) and those the API server fills in
/// (the cluster IPs and their families, the session affinity and the
/// internal traffic policy at their defaults). Any other key a user adds
/// can route traffic elsewhere (a `selector` makes the EndpointSlice
/// controller add that selector's Pods beside the operator's endpoint;
/// `externalIPs`, a `loadBalancer*` or `nodePort`-related field exposes or
/// reroutes it), and server-side apply never removes a field another
/// manager set.
const KEPT_SPEC_KEYS: &[&str] = &[
    "type",
    "ports",
    "externalName",
    "clusterIP",
    "clusterIPs",
    "ipFamilies",
    "ipFamilyPolicy",
    "sessionAffinity",
    "internalTrafficPolicy",
];

/// What someone else wrote into the stored Service `have` that could send
/// traffic elsewhere than `want` says, as a JSON merge patch of its spec
/// that removes it (or restores the default), with the names of the
/// fields; `None` when there is nothing of the kind. Server-side apply
/// takes back the fields the operator sets but leaves other managers'
/// fields, and another manager's extra entries of `ports`, in place.
pub(crate) fn stray_routing(have: &Service, want: &Service) -> Option<(serde_json::Value, Vec<String>)> {
    // A change of type is the operator's own apply to make first (the API
    // server validates each type's fields together); strays are looked for
    // once the type is the wanted one.
    let type_of = |s: &Service| s.spec.as_ref().and_then(|s| s.type_.clone()).unwrap_or_else(|| "ClusterIP".into());
    if type_of(have) != type_of(want) {
        return None;
    }
    let stored = serde_json::to_value(have.spec.as_ref()?).ok()?;
    let stored = stored.as_object()?;
    let want_spec = want.spec.clone().unwrap_or_default();
    let mut patch = serde_json::Map::new();
    for (key, value) in stored {
        let fix = match key.as_str() {
            k if !KEPT_SPEC_KEYS.contains(&k) => Some(serde_json::Value::Null),
            "externalName" if want_spec.external_name.is_none() => Some(serde_json::Value::Null),
            "sessionAffinity" if value != "None" => Some("None".into()),
            "internalTrafficPolicy" if value != "Cluster" => Some("Cluster".into()),
            _ => None,
        };
        if let Some(fix) = fix {
            patch.insert(key.clone(), fix);
        }
    }
    // Ports: exactly the operator's (a merge patch replaces the list).
    let key = |p: &ServicePort| (p.port, p.protocol.clone().unwrap_or_else(|| "TCP".into()));
    let wanted: Vec<_> = want_spec.ports.iter().flatten().map(key).collect();
    let extra = have.spec.as_ref()?.ports.iter().flatten().any(|p| !wanted.contains(&key(p)));
    if extra {
        patch.insert("ports".into(), serde_json::to_value(&want_spec.ports).ok()?);
    }
    // Labels that tell kube-proxy to leave the Service to another proxy
    // (`service.kubernetes.io/service-proxy-name`) or not to route it
    // (`service.kubernetes.io/headless`), and any other of Kubernetes'
    // `service.kubernetes.io/` labels: none is the operator's.
    let labels: serde_json::Map<String, serde_json::Value> = have
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(SERVICE_LABEL_PREFIX))
        .map(|(k, _)| (k.clone(), serde_json::Value::Null))
        .collect();
    if patch.is_empty() && labels.is_empty() {
        return None;
    }
    let mut fields: Vec<String> = patch.keys().map(|k| format!("spec.{k}")).collect();
    fields.extend(labels.keys().map(|k| format!("metadata.labels[{k}]")));
    let mut out = serde_json::json!({});
    if !patch.is_empty() {
        out["spec"] = patch.into();
    }
    if !labels.is_empty() {
        out["metadata"] = serde_json::json!({ "labels": labels });
    }
    Some((out, fields))
}

/// Kubernetes' labels that change how kube-proxy routes a Service.
const SERVICE_LABEL_PREFIX: &str = "service.kubernetes.io/";

/// Whether `have` is headless (`clusterIP: None`) where `want` has a
/// cluster IP: the field is immutable, so only deleting the Service undoes
/// it, and a headless Service's name resolves to its endpoints' addresses
/// without the port the operator maps.
pub(crate) fn headless_instead(have: &Service, want: &Service) -> bool {
    let cluster_ip = |s: &Service| s.spec.as_ref().and_then(|s| s.cluster_ip.clone());
    let type_of = |s: &Service| s.spec.as_ref().and_then(|s| s.type_.clone()).unwrap_or_else(|| "ClusterIP".into());
    cluster_ip(have).as_deref() == Some("None") && type_of(want) == "ClusterIP"
}

/// The field managers other than the operator's that own any of `fields`
/// (`spec.selector`, …) in `have`'s managedFields, for the Event that says
/// who set them.
pub(crate) fn managers_of(have: &Service, fields: &[String]) -> Vec<String> {
    let keys: Vec<String> = fields.iter().filter_map(|f| f.strip_prefix("spec.")).map(|k| format!("f:{k}")).collect();
    let labels: Vec<String> = fields
        .iter()
        .filter_map(|f| f.strip_prefix("metadata.labels[")?.strip_suffix(']'))
        .map(|k| format!("f:{k}"))
        .collect();
    let mut managers: Vec<String> = have
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() != Some(bloodraven_api::names::PRIMARY_SERVICE_FIELD_MANAGER))
        .filter(|m| {
            let fields = m.fields_v1.as_ref().map(|f| &f.0);
            let spec = fields.and_then(|f| f.get("f:spec")).and_then(serde_json::Value::as_object);
            let set_labels = fields
                .and_then(|f| f.get("f:metadata"))
                .and_then(|m| m.get("f:labels"))
                .and_then(serde_json::Value::as_object);
            spec.is_some_and(|spec| keys.iter().any(|k| spec.contains_key(k)))
                || set_labels.is_some_and(|l| labels.iter().any(|k| l.contains_key(k)))
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    managers.sort();
    managers.dedup();
    managers
}

/// Whether the stored Service `have` already is `want` in every field the
/// operator sets (server defaults such as `clusterIP` are ignored), so no
/// write is needed.
pub(crate) fn service_matches(have: &Service, want: &Service) -> bool {
    let ports = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.name, p.port, p.target_port, p.protocol))
            .collect::<Vec<_>>()
    };
    let spec = |s: &Service| {
        let spec = s.spec.clone().unwrap_or_default();
        (spec.type_, spec.external_name, spec.selector.filter(|s| !s.is_empty()))
    };
    meta_matches(&have.metadata, &want.metadata)
        && spec(have) == spec(want)
        && ports(have) == ports(want)
        && stray_routing(have, want).is_none()
}

/// Whether the stored EndpointSlice `have` already is `want` in every field
/// the operator sets.
pub(crate) fn slice_matches(have: &EndpointSlice, want: &EndpointSlice) -> bool {
    let endpoints = |s: &EndpointSlice| {
        s.endpoints
            .iter()
            .map(|e| (e.addresses.clone(), e.conditions.as_ref().and_then(|c| c.ready)))
            .collect::<Vec<_>>()
    };
    let ports = |s: &EndpointSlice| {
        s.ports.clone().unwrap_or_default().into_iter().map(|p| (p.name, p.port, p.protocol)).collect::<Vec<_>>()
    };
    meta_matches(&have.metadata, &want.metadata)
        && have.address_type == want.address_type
        && endpoints(have) == endpoints(want)
        && ports(have) == ports(want)
}

#[cfg(test)]
#[path = "desired_tests.rs"]
mod tests;
