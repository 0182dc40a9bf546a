//! The `ReadOnlyBypassAccounts` condition: accounts other than the exact
//! one the operator is connected as (`CURRENT_USER()`) that can write
//! through `read_only` on a site (MariaDB `READ_ONLY ADMIN`, and `SUPER`
//! before 10.11), themselves, through roles or through `PUBLIC`
//! (`crate::mysql::grants`). The fence ends their
//! sessions, so they cannot defeat a planned failover, but an application or
//! migration account holding such a privilege writes to a fenced site until
//! then, so such accounts are reported with a condition and an Event (the Event
//! comes with the condition's transition, and again at each fence).
//! MySQL sites are fenced with `super_read_only`, which stops every
//! account (`SUPER` and `CONNECTION_ADMIN` included), so there the
//! condition is False and says why.
//!
//! Grants rarely change, so each site is checked on first sight, then at
//! most every [`RECHECK`], and at each fence (`planned`): one extra
//! connection per site every five minutes, not per probe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bloodraven_api::v1alpha1::{ConditionType, MysqlFailoverGroup, reason};
use kube::ResourceExt as _;

use super::assess::SiteProbe;
use super::sites::read_credentials;
use crate::controller::Context;
use crate::controller::conditions::Computed;
use crate::mysql::ProbeTarget;
use crate::mysql::actions::{self, Bypass};

/// How long a site's check stands before the next probe repeats it.
pub(crate) const RECHECK: Duration = Duration::from_secs(300);

/// Reason when no account is found but the operator sees its own grants only.
pub(crate) const GRANTS_NOT_VISIBLE: &str = "GrantsNotVisible";

/// By group UID and site name: when a site was last checked, and what it showed.
type LastChecks = HashMap<(String, String), (Instant, Bypass)>;

/// The last check of each site, by group UID and site name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Checks(Arc<Mutex<LastChecks>>);

impl Checks {
    fn get(&self, uid: &str, site: &str) -> Option<(Instant, Bypass)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(&(uid.to_owned(), site.to_owned())).cloned()
    }

    /// Records what a check of `site` found just now.
    pub(crate) fn store(&self, uid: &str, site: &str, found: Bypass) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((uid.to_owned(), site.to_owned()), (Instant::now(), found));
    }

    /// Forgets a group (deletion).
    pub(crate) fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).retain(|(u, _), _| u != uid);
    }
}

/// The condition for `group` after this round's `probes`: re-checks each
/// answering site whose last check is older than [`RECHECK`]; a site that
/// did not answer keeps its last check, if any.
pub(crate) async fn condition(ctx: &Context, group: &MysqlFailoverGroup, probes: &[SiteProbe]) -> Computed {
    let uid = group.uid().unwrap_or_default();
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    let mut seen = Vec::with_capacity(group.spec.sites.len());
    for site in &group.spec.sites {
        let last = ctx.groups.bypass.get(&uid, &site.name);
        let observed = probes.iter().find(|p| p.site == site.name).and_then(|p| p.outcome.as_ref().ok());
        let found = match (last, observed) {
            (Some((at, found)), _) if at.elapsed() < RECHECK => Some(found),
            (last, Some(obs)) => {
                let target = ProbeTarget { host: site.host.clone(), port: site.port };
                let checked = match read_credentials(site, ctx).await {
                    Ok(creds) => actions::read_only_bypass(&target, &creds, obs.flavor, &obs.version, timeout)
                        .await
                        .map_err(|err| crate::mysql::classify(&err).1),
                    Err(failure) => Err(failure.message),
                };
                match checked {
                    Ok(found) => {
                        ctx.groups.bypass.store(&uid, &site.name, found.clone());
                        Some(found)
                    }
                    Err(message) => {
                        tracing::debug!(group = %group.name_any(), site = %site.name, error = %message, "could not list read_only bypass accounts");
                        last.map(|(_, found)| found)
                    }
                }
            }
            (last, None) => last.map(|(_, found)| found),
        };
        seen.push((site.name.clone(), found));
    }
    compute(&seen)
}

/// The condition from what each site showed (`None`: never checked).
pub(crate) fn compute(seen: &[(String, Option<Bypass>)]) -> Computed {
    let t = ConditionType::ReadOnlyBypassAccounts.as_str();
    let found: Vec<String> = seen
        .iter()
        .filter_map(|(site, b)| b.as_ref().filter(|b| !b.accounts.is_empty()).map(|b| (site, b)))
        .map(|(site, b)| {
            let shown: Vec<String> =
                b.accounts.iter().take(10).map(|a| bloodraven_serving::log::escape(a, 80)).collect();
            let more = b.accounts.len().saturating_sub(shown.len());
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            format!("on site {site}, {}{more}", shown.join(", "))
        })
        .collect();
    let hidden: Vec<&str> =
        seen.iter().filter(|(_, b)| b.as_ref().is_some_and(|b| !b.all_visible)).map(|(s, _)| s.as_str()).collect();
    if !found.is_empty() {
        // PUBLIC shows even to an account that sees its own grants only.
        let partial = if hidden.is_empty() {
            String::new()
        } else {
            format!("; on {} other accounts cannot be listed (grant the operator SELECT ON mysql.*)", hidden.join(", "))
        };
        return Computed::flag(
            t,
            true,
            reason::READ_ONLY_ADMIN_ACCOUNTS,
            format!(
                "{} can write through read_only (READ_ONLY ADMIN, or SUPER before MariaDB 10.11); the fence ends their sessions, but application and migration accounts should not hold these privileges, nor PUBLIC or a role they hold{partial}",
                found.join("; ")
            ),
        );
    }
    let unchecked: Vec<&str> = seen.iter().filter(|(_, b)| b.is_none()).map(|(s, _)| s.as_str()).collect();
    if !unchecked.is_empty() {
        return Computed::unknown(
            t,
            reason::SITE_UNREACHABLE,
            format!("not checked yet: {} did not answer", unchecked.join(", ")),
        );
    }
    if !hidden.is_empty() {
        return Computed::unknown(
            t,
            GRANTS_NOT_VISIBLE,
            format!(
                "on {} the operator's account sees only its own privileges, so other accounts that can write through read_only cannot be listed; grant it SELECT ON mysql.* to have them checked (that schema holds password hashes: weigh it), or audit the grants yourself",
                hidden.join(", ")
            ),
        );
    }
    let srw = |b: &Option<Bypass>| b.as_ref().is_some_and(|b| b.super_read_only);
    let mysql: Vec<&str> = seen.iter().filter(|(_, b)| srw(b)).map(|(s, _)| s.as_str()).collect();
    let mariadb: Vec<&str> = seen.iter().filter(|(_, b)| !srw(b)).map(|(s, _)| s.as_str()).collect();
    let message = match (mysql.is_empty(), mariadb.is_empty()) {
        // MariaDB only (or no site at all).
        (true, _) => "no account other than the operator's can write through read_only".to_owned(),
        (false, true) => "the sites are MySQL, fenced with super_read_only, which stops every account's writes (SUPER and CONNECTION_ADMIN included): none can write through it".to_owned(),
        (false, false) => format!(
            "no account other than the operator's can write through read_only on {}; on {} (MySQL) the fence's super_read_only stops every account's writes",
            mariadb.join(", "),
            mysql.join(", ")
        ),
    };
    Computed::flag(t, false, reason::AS_EXPECTED, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(site: &str, accounts: &[&str], all_visible: bool) -> (String, Option<Bypass>) {
        let accounts = accounts.iter().map(|a| (*a).to_owned()).collect();
        (site.to_owned(), Some(Bypass { accounts, all_visible, super_read_only: false }))
    }

    #[test]
    fn mysql_sites_say_super_read_only_stops_every_account() {
        let mysql = |site: &str| {
            (site.to_owned(), Some(Bypass { super_read_only: true, all_visible: true, accounts: Vec::new() }))
        };
        let c = compute(&[mysql("iad"), mysql("pdx")]);
        assert_eq!((c.status, c.reason), ("False", reason::AS_EXPECTED));
        assert!(c.message.contains("super_read_only, which stops every account"), "{}", c.message);
        let c = compute(&[seen("iad", &[], true), mysql("pdx")]);
        assert!(
            c.message.contains("through read_only on iad; on pdx (MySQL) the fence's super_read_only stops"),
            "{}",
            c.message
        );
    }

    #[test]
    fn accounts_anywhere_make_it_true_and_are_named() {
        let c = compute(&[seen("iad", &["'app'@'%'"], true), seen("pdx", &[], false)]);
        assert_eq!((c.status, c.reason), ("True", reason::READ_ONLY_ADMIN_ACCOUNTS));
        assert!(c.message.contains("on site iad, 'app'@'%'"), "{}", c.message);
        assert!(!c.message.contains("on site pdx"), "{}", c.message);
        assert!(c.message.contains("on pdx other accounts cannot be listed"), "{}", c.message);
    }

    #[test]
    fn public_seen_without_the_full_view_is_true_and_says_what_is_missing() {
        let c = compute(&[seen("iad", &["PUBLIC (every account)"], false), seen("pdx", &[], true)]);
        assert_eq!((c.status, c.reason), ("True", reason::READ_ONLY_ADMIN_ACCOUNTS));
        assert!(c.message.contains("on site iad, PUBLIC (every account) can write"), "{}", c.message);
        assert!(c.message.contains("on iad other accounts cannot be listed"), "{}", c.message);
        let c = compute(&[seen("iad", &["'app'@'%'"], true)]);
        assert!(!c.message.contains("cannot be listed"), "{}", c.message);
    }

    #[test]
    fn a_long_list_is_cut_and_counted() {
        let many: Vec<String> = (0..25).map(|i| format!("'u{i}'@'%'")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let c = compute(&[seen("iad", &refs, true)]);
        assert!(c.message.contains("and 15 more"), "{}", c.message);
    }

    #[test]
    fn unchecked_or_hidden_is_unknown_not_false() {
        let c = compute(&[seen("iad", &[], true), ("pdx".to_owned(), None)]);
        assert_eq!((c.status, c.reason), ("Unknown", reason::SITE_UNREACHABLE));
        let c = compute(&[seen("iad", &[], true), seen("pdx", &[], false)]);
        assert_eq!((c.status, c.reason), ("Unknown", GRANTS_NOT_VISIBLE));
        assert!(c.message.contains("pdx") && !c.message.contains("iad"), "{}", c.message);
    }

    #[test]
    fn nothing_found_with_full_view_is_false() {
        let c = compute(&[seen("iad", &[], true), seen("pdx", &[], true)]);
        assert_eq!((c.status, c.reason), ("False", reason::AS_EXPECTED));
    }
}
