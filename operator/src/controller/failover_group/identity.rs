//! Which server a site is (found by an attack: one mistyped port in
//! `spec.sites` made the operator fence another group's primary, promote
//! another group's replica, and point a `-primary` Service at it). A site's
//! name in spec maps to a `host:port`; the server answering there is
//! trusted as that site only if it is the server the operator knows the
//! site by: its `server_id`, kept in `status.health[].identity`.
//!
//! Rules (pure; [`check`] runs on every round of probes, so every path that
//! acts on a site — reassertion, emergency promotion, returning-primary
//! fencing, planned failover, the `-primary` Service — sees the same answer):
//!
//! - A site with no known identity is taken as it answers (a new group, or
//!   a status from before this field), and learns it.
//! - A site answering with its known `server_id` is itself.
//! - A non-active site answering with another `server_id` that replicates
//!   from the active site's known server is a replaced replica: taken, and
//!   its identity learned anew.
//! - Anything else is another server: the probe counts as failed with
//!   reason `UnexpectedServer` (it answered: never a missed probe of the
//!   active site), so nothing is fenced, promoted, repointed or routed to
//!   it, and `answeredEndpoint` stays where the site last answered as
//!   itself.
//! - The group annotation `bloodraven.shipstream.io/site-identity:
//!   "pdx=7,iad=1"` sets identities by hand: for a server replaced on
//!   purpose (a primary restored from backup with a new `server_id`).
//!
//! `server_id` is unique only within one replication topology; two groups
//! whose servers share ids look alike to this check (give every server in
//! an organisation its own id).

use std::collections::BTreeMap;

use bloodraven_api::names::SITE_IDENTITY_ANNOTATION;
use bloodraven_api::v1alpha1::{MysqlFailoverGroup, SiteHealth, reason};

use super::assess::{ProbeFailure, SiteProbe};

/// The identities `group` knows: `status.health[].identity`, overridden by
/// the `site-identity` annotation (a malformed entry is ignored).
pub(crate) fn known(group: &MysqlFailoverGroup) -> BTreeMap<String, u32> {
    let mut ids = of_health(group.status.as_ref().map_or(&[][..], |s| &s.health));
    if let Some(text) = group.metadata.annotations.as_ref().and_then(|a| a.get(SITE_IDENTITY_ANNOTATION)) {
        ids.extend(parse_annotation(text));
    }
    ids
}

/// `site=serverId` pairs, comma-separated; malformed entries are skipped.
pub(crate) fn parse_annotation(text: &str) -> BTreeMap<String, u32> {
    text.split(',')
        .filter_map(|pair| {
            let (site, id) = pair.split_once('=')?;
            Some((site.trim().to_owned(), id.trim().parse().ok()?))
        })
        .collect()
}

/// Turns the observation of every site that answers as another server than
/// the one it is known by into a failed probe (`UnexpectedServer`); see the
/// module rules. `active` is the decided active site, if any.
pub(crate) fn check(ids: &BTreeMap<String, u32>, active: Option<&str>, probes: Vec<SiteProbe>) -> Vec<SiteProbe> {
    let active_id = active.and_then(|a| ids.get(a)).copied();
    probes
        .into_iter()
        .map(|p| {
            let Ok(obs) = &p.outcome else { return p };
            let Some(&known) = ids.get(&p.site) else { return p };
            if obs.server_id == known {
                return p;
            }
            let replaced_replica = active != Some(p.site.as_str())
                && active_id.is_some()
                && obs.replication.as_ref().and_then(|r| r.source_server_id) == active_id;
            if replaced_replica {
                return p;
            }
            let message = format!(
                "site {} answers at its spec address with server_id {}, but it is known as server_id {known}: another server (a mistyped or swapped address?). It is not fenced, promoted, repointed or routed to. Fix spec.sites; if the server was replaced on purpose, make it replicate from the active site, or set the group annotation {SITE_IDENTITY_ANNOTATION}: \"{}={}\"",
                p.site, obs.server_id, p.site, obs.server_id
            );
            SiteProbe { site: p.site, outcome: Err(ProbeFailure { reason: reason::UNEXPECTED_SERVER, message, answered_as: Some(obs.server_id) }) }
        })
        .collect()
}

/// The identity to record for `site` after this round: the `server_id` it
/// answered with (after [`check`]), else what was known.
pub(crate) fn learned(ids: &BTreeMap<String, u32>, probe: &SiteProbe) -> Option<u32> {
    match &probe.outcome {
        Ok(obs) => Some(obs.server_id),
        Err(_) => ids.get(&probe.site).copied(),
    }
}

/// The identities `health` holds.
fn of_health(health: &[SiteHealth]) -> BTreeMap<String, u32> {
    health.iter().filter_map(|h| Some((h.site.clone(), h.identity?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mysql::{Flavor, ReplicationObservation, SiteObservation};

    fn obs(server_id: u32, source: Option<u32>) -> SiteObservation {
        SiteObservation {
            flavor: Flavor::MariaDb,
            version: "10.11".into(),
            server_id,
            server_uuid: String::new(),
            writable: source.is_none(),
            gtid_position: String::new(),
            gtid_binlog_state: String::new(),
            gtid_slave_pos: String::new(),
            replication: source.map(|s| ReplicationObservation {
                io_running: true,
                sql_running: true,
                source_server_id: Some(s),
                ..ReplicationObservation::default()
            }),
            semi_sync: None,
        }
    }

    fn probe(site: &str, o: SiteObservation) -> SiteProbe {
        SiteProbe { site: site.into(), outcome: Ok(o) }
    }

    fn reason_of(p: &SiteProbe) -> Option<&'static str> {
        p.outcome.as_ref().err().map(|f| f.reason)
    }

    #[test]
    fn a_site_is_the_server_it_is_known_by_or_a_replica_of_the_active_one() {
        let ids = BTreeMap::from([("iad".to_owned(), 1), ("pdx".to_owned(), 2)]);
        // Itself.
        let out = check(&ids, Some("iad"), vec![probe("iad", obs(1, None)), probe("pdx", obs(2, Some(1)))]);
        assert_eq!(out.iter().map(reason_of).collect::<Vec<_>>(), [None, None]);
        // The standby's port typed as another group's primary (server 3), or its replica (replicating from 3).
        for foreign in [obs(3, None), obs(4, Some(3))] {
            let out = check(&ids, Some("iad"), vec![probe("iad", obs(1, None)), probe("pdx", foreign)]);
            assert_eq!(reason_of(&out[1]), Some(reason::UNEXPECTED_SERVER));
            assert!(out[1].outcome.as_ref().unwrap_err().message.contains("known as server_id 2"));
        }
        // Swapped ports: each answers as the other; neither is trusted.
        let out = check(&ids, Some("iad"), vec![probe("iad", obs(2, Some(1))), probe("pdx", obs(1, None))]);
        assert_eq!(out.iter().map(reason_of).collect::<Vec<_>>(), [Some(reason::UNEXPECTED_SERVER); 2]);
        // A replica rebuilt on a new server that replicates from the active one: taken, and learned.
        let out = check(&ids, Some("iad"), vec![probe("iad", obs(1, None)), probe("pdx", obs(9, Some(1)))]);
        assert_eq!(reason_of(&out[1]), None);
        assert_eq!(learned(&ids, &out[1]), Some(9));
        // The active site is never "replaced" by replication.
        let out = check(&ids, Some("iad"), vec![probe("iad", obs(7, Some(2)))]);
        assert_eq!(reason_of(&out[0]), Some(reason::UNEXPECTED_SERVER));
        assert_eq!(learned(&ids, &out[0]), Some(1), "a failed check keeps what was known");
        // Nothing known yet (a new group, an old status): taken and learned.
        let out = check(&BTreeMap::new(), None, vec![probe("iad", obs(5, None))]);
        assert_eq!((reason_of(&out[0]), learned(&BTreeMap::new(), &out[0])), (None, Some(5)));
    }

    #[test]
    fn the_annotation_sets_identities_and_skips_what_it_cannot_read() {
        assert_eq!(
            parse_annotation("pdx=7, iad = 1,bad,x=-1,y=99999999999,=3"),
            BTreeMap::from([("pdx".to_owned(), 7), ("iad".to_owned(), 1), (String::new(), 3)])
        );
        let spec = bloodraven_api::v1alpha1::MysqlFailoverGroupSpec {
            sites: Vec::new(),
            initial_active_site: "iad".into(),
            failover: bloodraven_api::v1alpha1::FailoverPolicy::default(),
            planned_failover: None,
            ordered_update: None,
            restore_in_place: None,
            allowed_databases: bloodraven_api::v1alpha1::AllowedDatabases::default(),
        };
        let mut group = MysqlFailoverGroup::new("g", spec);
        group.status = Some(bloodraven_api::v1alpha1::MysqlFailoverGroupStatus {
            health: vec![SiteHealth { site: "pdx".into(), identity: Some(2), ..SiteHealth::default() }],
            ..Default::default()
        });
        assert_eq!(known(&group), BTreeMap::from([("pdx".to_owned(), 2)]));
        group.metadata.annotations = Some([(SITE_IDENTITY_ANNOTATION.to_owned(), "pdx=7".to_owned())].into());
        assert_eq!(known(&group), BTreeMap::from([("pdx".to_owned(), 7)]));
    }
}
