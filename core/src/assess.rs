//! Assessment: from the spec, the decided roles and one round of probes, the
//! group's conditions, its stability, and whether bootstrap may complete.
//! Pure, so every rule here is unit- and property-tested.
//!
//! Rules (docs/failover-groups.md, "Bootstrap", "Conditions"):
//! - The *designated primary* is `status.activeSite` once decided, else
//!   `spec.initialActiveSite`. Every other site is a designated replica.
//! - Bootstrap completes only when every site is reachable, exactly the
//!   designated site is writable, and every other site runs replication
//!   from it (by `server_id`). A group that looks otherwise gets the
//!   matching condition and is never "fixed" by guessing.
//! - `stable` is false while any of SplitBrain, NoPrimary, Degraded or
//!   ReplicationNotRunning is not False, and before bootstrap. Replication
//!   lag alone never makes it false.

use bloodraven_api::v1alpha1::{ConditionType, reason};

use crate::conditions::Computed;
use crate::observation::{ReplicationObservation, SiteObservation, replicate_hint};

/// Why a site could not be observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeFailure {
    /// Stable reason (`SiteUnreachable`, `AuthenticationFailed`, `CredentialsUnavailable`, ...).
    pub reason: &'static str,
    /// What happened and what to fix. Never holds a password.
    pub message: String,
    /// The `server_id` that answered at the site's address when that is
    /// not the server the site is known by (`UnexpectedServer`); `None`
    /// for every other failure.
    pub answered_as: Option<u32>,
}

/// One site's probe result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteProbe {
    /// Site name.
    pub site: String,
    /// What the probe saw, or why it saw nothing.
    pub outcome: Result<SiteObservation, ProbeFailure>,
}

/// The assessment of one round of probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assessment {
    /// Ready, Degraded, SplitBrain, NoPrimary, ReplicationNotRunning, in that order.
    pub conditions: Vec<Computed>,
    /// Bootstrap may complete now (only ever true before the first decision).
    pub bootstrap: bool,
    /// Whether the group is stable.
    pub stable: bool,
    /// Why not, when not stable: a condition type or `BootstrapPending`.
    pub unstable_reason: Option<String>,
}

/// What the operator knows of the group's decided roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decided<'a> {
    /// Never bootstrapped (no decision recorded anywhere).
    Undecided,
    /// `activeSite` and `topologyGeneration`, as decided.
    At(&'a str, i64),
    /// Status and the decision record disagree in a way only a person can
    /// resolve; the text says how. Never re-bootstrapped.
    Invalid(&'a str),
}

/// The group's sites as the assessment reads them: every site's name, and
/// the site bootstrap makes the primary (`spec.initialActiveSite`).
#[derive(Clone, Copy, Debug)]
pub struct Layout<'a> {
    /// `spec.sites[].name`, in spec order.
    pub sites: &'a [&'a str],
    /// `spec.initialActiveSite`.
    pub initial_active_site: &'a str,
    /// The site a restore-in-place's Job may be restoring: never fenced
    /// meanwhile, so its being writable is not a split brain (clients are
    /// on the primary until the restore's decision).
    pub restoring: Option<&'a str>,
}

/// Assesses one round of probes against the decided roles.
pub fn assess(layout: Layout<'_>, decided: Decided<'_>, probes: &[SiteProbe]) -> Assessment {
    let primary = match decided {
        Decided::At(site, _) => site,
        Decided::Undecided | Decided::Invalid(_) => layout.initial_active_site,
    };
    let reachable: Vec<(&str, &SiteObservation)> =
        probes.iter().filter_map(|p| p.outcome.as_ref().ok().map(|o| (p.site.as_str(), o))).collect();
    let failures: Vec<(&str, &ProbeFailure)> =
        probes.iter().filter_map(|p| p.outcome.as_ref().err().map(|f| (p.site.as_str(), f))).collect();
    let writable: Vec<&str> = reachable.iter().filter(|(_, o)| o.writable).map(|(s, _)| *s).collect();
    let primary_obs = reachable.iter().find(|(s, _)| *s == primary).map(|(_, o)| *o);
    // Two sites answering with one server_id are one server (or two servers
    // misconfigured alike): no role can be judged from them.
    let duplicate = reachable.iter().enumerate().find_map(|(i, (a, oa))| {
        reachable[i + 1..].iter().find(|(_, ob)| ob.server_id == oa.server_id).map(|(b, _)| (*a, *b, oa.server_id))
    });

    let unobserved: Vec<&str> = failures.iter().map(|(s, _)| *s).collect();
    let besides: Vec<&str> = writable.iter().copied().filter(|s| Some(*s) != layout.restoring).collect();
    let mut split_brain = split_brain_condition(&besides, &unobserved, primary, duplicate);
    if let Some(site) = layout.restoring.filter(|r| writable.contains(r) && !split_brain.is_true()) {
        split_brain.message = format!(
            "{}; {site} is writable too, and a restore-in-place's Job restores it (it is not fenced while the Job may run)",
            split_brain.message
        );
    }
    let no_primary = no_primary_condition(&writable, primary, primary_obs);

    let degraded = if let Decided::Invalid(why) = decided {
        Computed::flag(ConditionType::Degraded.as_str(), true, reason::INVALID_STATUS, why)
    } else if let Some((_, f)) = failures.first() {
        let message = failures.iter().map(|(s, f)| format!("site {s}: {}", f.message)).collect::<Vec<_>>().join("; ");
        Computed::flag(ConditionType::Degraded.as_str(), true, f.reason, message)
    } else if let Some((a, b, id)) = duplicate {
        Computed::flag(
            ConditionType::Degraded.as_str(),
            true,
            reason::DUPLICATE_SERVER_ID,
            format!(
                "sites {a} and {b} both report server_id {id}: they are the same server, or two servers share a server_id; point each site at its own server with a unique server_id"
            ),
        )
    } else if writable.len() == 1 && writable[0] != primary {
        Computed::flag(
            ConditionType::Degraded.as_str(),
            true,
            reason::UNEXPECTED_PRIMARY,
            format!(
                "site {} is writable but the group's active site is {primary}; bloodraven does not guess: make {primary} the writable primary, or fix spec.initialActiveSite before bootstrap",
                writable[0]
            ),
        )
    } else {
        Computed::flag(ConditionType::Degraded.as_str(), false, reason::AS_EXPECTED, "every site answers its probe")
    };

    let replication = if let Some((a, b, _)) = duplicate {
        Computed::unknown(
            ConditionType::ReplicationNotRunning.as_str(),
            reason::DUPLICATE_SERVER_ID,
            format!("cannot tell while sites {a} and {b} report the same server_id"),
        )
    } else {
        replication_condition(layout, primary, primary_obs, probes)
    };

    let bad = [&split_brain, &no_primary, &degraded, &replication];
    // A condition known True explains more than one that is Unknown
    // (e.g. NoPrimary is Unknown *because* Degraded is True).
    let first_bad = bad.iter().find(|c| c.is_true()).or_else(|| bad.iter().find(|c| c.status != "False"));
    let bootstrap = decided == Decided::Undecided && first_bad.is_none() && writable == [primary];

    let ready = match (first_bad, decided) {
        (Some(c), _) => Computed::flag(ConditionType::Ready.as_str(), false, c.reason, c.message.clone()),
        (None, Decided::Undecided) if !bootstrap => {
            Computed::flag(ConditionType::Ready.as_str(), false, reason::BOOTSTRAP_PENDING, "waiting for bootstrap")
        }
        (None, _) => Computed::flag(
            ConditionType::Ready.as_str(),
            true,
            reason::AS_EXPECTED,
            format!("{primary} is the writable primary and every other site replicates from it"),
        ),
    };
    let unstable_reason = match first_bad {
        Some(c) => Some(c.type_.to_owned()),
        None if decided == Decided::Undecided && !bootstrap => Some(reason::BOOTSTRAP_PENDING.to_owned()),
        None => None,
    };
    Assessment {
        conditions: vec![ready, degraded, split_brain, no_primary, replication],
        bootstrap,
        stable: unstable_reason.is_none(),
        unstable_reason,
    }
}

/// SplitBrain: more than one writable site (Unknown when two sites are one
/// server, or when a site is writable and another could not be observed: a
/// site the operator cannot log in to or reach may be writable too).
fn split_brain_condition(
    writable: &[&str],
    unobserved: &[&str],
    primary: &str,
    duplicate: Option<(&str, &str, u32)>,
) -> Computed {
    if let Some((a, b, _)) = duplicate {
        Computed::unknown(
            ConditionType::SplitBrain.as_str(),
            reason::DUPLICATE_SERVER_ID,
            format!("cannot tell while sites {a} and {b} report the same server_id"),
        )
    } else if writable.len() >= 2 {
        Computed::flag(
            ConditionType::SplitBrain.as_str(),
            true,
            reason::MULTIPLE_WRITABLE_SITES,
            format!(
                "sites {} are all writable; only the active site {primary} may be: make the others read-only (SET GLOBAL read_only=1)",
                writable.join(", ")
            ),
        )
    } else if !writable.is_empty() && !unobserved.is_empty() {
        Computed::unknown(
            ConditionType::SplitBrain.as_str(),
            reason::SITE_UNREACHABLE,
            format!(
                "cannot tell: {} is writable and {} could not be observed (it may be writable too)",
                writable.join(", "),
                unobserved.join(", ")
            ),
        )
    } else {
        Computed::flag(ConditionType::SplitBrain.as_str(), false, reason::AS_EXPECTED, "at most one site is writable")
    }
}

/// NoPrimary: no writable site, judged only when the active site was observed.
fn no_primary_condition(writable: &[&str], primary: &str, primary_obs: Option<&SiteObservation>) -> Computed {
    if !writable.is_empty() {
        let verb = if writable.len() == 1 { "is" } else { "are" };
        Computed::flag(
            ConditionType::NoPrimary.as_str(),
            false,
            reason::AS_EXPECTED,
            format!("{} {verb} writable", writable.join(", ")),
        )
    } else if primary_obs.is_none() {
        // The active site was not observed: it may well be writable.
        Computed::unknown(
            ConditionType::NoPrimary.as_str(),
            reason::SITE_UNREACHABLE,
            format!("cannot tell: the active site {primary} could not be probed and no other site is writable"),
        )
    } else {
        Computed::flag(
            ConditionType::NoPrimary.as_str(),
            true,
            reason::NO_WRITABLE_SITE,
            format!("no reachable site is writable; the active site {primary} should be (read_only=0)"),
        )
    }
}

fn replication_condition(
    layout: Layout<'_>,
    primary: &str,
    primary_obs: Option<&SiteObservation>,
    probes: &[SiteProbe],
) -> Computed {
    let t = ConditionType::ReplicationNotRunning.as_str();
    let mut problems = Vec::new();
    let mut unknown = Vec::new();
    for &site in layout.sites.iter().filter(|s| **s != primary) {
        let Some(probe) = probes.iter().find(|p| p.site == site) else {
            unknown.push(format!("site {site} was not probed"));
            continue;
        };
        let Ok(obs) = &probe.outcome else {
            unknown.push(format!("site {site} is unreachable"));
            continue;
        };
        match &obs.replication {
            None => problems.push((
                reason::REPLICATION_NOT_CONFIGURED,
                format!(
                    "site {} has no replication configured; point it at {primary} ({})",
                    site,
                    replicate_hint(obs.flavor)
                ),
            )),
            Some(ReplicationObservation { stall: Some(stall), .. }) => {
                problems.push((reason::REPLICATION_STALLED, stall.clone()));
            }
            Some(r) if !r.running() => problems.push((
                reason::REPLICATION_STOPPED,
                format!(
                    "site {} replication is stopped (IO thread running: {}, SQL thread running: {}){}",
                    site,
                    r.io_running,
                    r.sql_running,
                    r.last_error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
                ),
            )),
            Some(r) => {
                if let Some(p) = primary_obs
                    && r.source_server_id != Some(p.server_id)
                {
                    problems.push((
                        reason::REPLICATING_FROM_ELSEWHERE,
                        format!(
                            "site {} replicates from server_id {} at {}:{}, not from the active site {primary} (server_id {})",
                            site,
                            r.source_server_id.map_or_else(|| "unknown".to_owned(), |id| id.to_string()),
                            r.source_host,
                            r.source_port,
                            p.server_id
                        ),
                    ));
                }
            }
        }
    }
    if let Some((first_reason, _)) = problems.first() {
        let message = problems.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>().join("; ");
        Computed::flag(t, true, first_reason, message)
    } else if !unknown.is_empty() {
        Computed::unknown(t, reason::SITE_UNREACHABLE, unknown.join("; "))
    } else {
        Computed::flag(t, false, reason::AS_EXPECTED, "every replica replicates from the active site")
    }
}

#[cfg(test)]
mod tests;
