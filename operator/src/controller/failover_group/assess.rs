//! The group's assessment, fed from its spec: the rules live in
//! `bloodraven_core::assess` (pure, property-tested); this module checks
//! what the CRD schema cannot guarantee of a stored spec and hands the
//! rules the sites as the spec names them.

use bloodraven_api::v1alpha1::MysqlFailoverGroupSpec;
use bloodraven_core::assess::Layout;
pub(crate) use bloodraven_core::assess::{Assessment, Decided, ProbeFailure, SiteProbe};

/// Assesses one round of probes against the decided roles
/// ([`bloodraven_core::assess::assess`] with the spec's sites).
pub(crate) fn assess(
    spec: &MysqlFailoverGroupSpec,
    decided: Decided<'_>,
    probes: &[SiteProbe],
    restoring: Option<&str>,
) -> Assessment {
    let sites: Vec<&str> = spec.sites.iter().map(|s| s.name.as_str()).collect();
    let layout = Layout { sites: &sites, initial_active_site: &spec.initial_active_site, restoring };
    bloodraven_core::assess::assess(layout, decided, probes)
}

/// Checks what the CRD schema cannot guarantee (old CRD versions, hand-made
/// objects): two sites with distinct names, and `initialActiveSite` among them.
pub(crate) fn validate_spec(spec: &MysqlFailoverGroupSpec) -> Result<(), String> {
    // What the schema says, checked again: an object stored under a looser
    // schema (a CRD downgrade) may decode yet hold values the operator must
    // not probe, log, or use as a metric label.
    let shown = |v: &str| bloodraven_serving::log::escape(v, 64);
    for site in &spec.sites {
        if !dns_label(&site.name) {
            return Err(format!("spec.sites[].name {:?} is not a DNS label", shown(&site.name)));
        }
        if site.host.is_empty()
            || site.host.len() > 253
            || !site.host.bytes().all(|b| b.is_ascii_graphic())
            || site.host.contains('/')
        {
            return Err(format!(
                "spec.sites[].host {:?} of site {} is not a host name or IP address",
                shown(&site.host),
                site.name
            ));
        }
        if site.port == 0 {
            return Err(format!("spec.sites[].port of site {} must be 1–65535", site.name));
        }
    }
    if !dns_label(&spec.initial_active_site) {
        return Err(format!("spec.initialActiveSite {:?} is not a DNS label", shown(&spec.initial_active_site)));
    }
    if spec.sites.len() != 2 {
        return Err(format!("spec.sites must list exactly two sites, found {}", spec.sites.len()));
    }
    if spec.sites[0].name == spec.sites[1].name {
        return Err(format!("spec.sites names the site {:?} twice", spec.sites[0].name));
    }
    if !spec.sites.iter().any(|s| s.name == spec.initial_active_site) {
        return Err(format!(
            "spec.initialActiveSite {:?} is not one of spec.sites ({})",
            spec.initial_active_site,
            spec.sites.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(())
}

/// A DNS label (RFC 1123, lowercase, starting with a letter): the schema's
/// pattern for site names.
pub(crate) fn dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && s.as_bytes().last().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use bloodraven_api::v1alpha1::{FailoverPolicy, SecretRef, Site};

    use super::*;

    fn spec() -> MysqlFailoverGroupSpec {
        let site = |name: &str, port| Site {
            name: name.into(),
            host: "127.0.0.1".into(),
            port,
            credentials_secret_ref: SecretRef { namespace: "ns".into(), name: "creds".into() },
        };
        MysqlFailoverGroupSpec {
            sites: vec![site("iad", 3306), site("pdx", 3307)],
            initial_active_site: "iad".into(),
            failover: FailoverPolicy::default(),
            planned_failover: None,
            ordered_update: None,
            restore_in_place: None,
            allowed_databases: bloodraven_api::v1alpha1::AllowedDatabases::default(),
        }
    }

    #[test]
    fn spec_validation() {
        assert!(validate_spec(&spec()).is_ok());
        let mut s = spec();
        s.initial_active_site = "sfo".into();
        assert!(validate_spec(&s).unwrap_err().contains("sfo"));
        let mut s = spec();
        s.sites[1].name = "iad".into();
        assert!(validate_spec(&s).unwrap_err().contains("twice"));
        let mut s = spec();
        s.sites.pop();
        assert!(validate_spec(&s).unwrap_err().contains("exactly two"));
    }
}
