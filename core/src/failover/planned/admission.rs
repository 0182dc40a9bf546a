//! Admission of a planned failover's target, by the round's probes alone:
//! reachable, replicating from the active site with both threads, lag
//! within bound, and no transaction the active site lacks.

use crate::assess::SiteProbe;
use crate::gtid::{MariaDbPosition, MySqlGtidSet};
use crate::observation::{Flavor, SiteObservation, start_hint};

/// Whether `target` is ready to be promoted from `source`, by this probe alone:
/// reachable, replicating from the source (by `server_id`) with both
/// threads, lag ≤ `max_lag_seconds` (`maxLagSeconds`), and no transaction the source lacks
/// (errant GTIDs). `Err` says what to fix.
pub fn target_readiness(
    max_lag_seconds: u32,
    source: &str,
    source_obs: Option<&SiteObservation>,
    target: &str,
    probes: &[SiteProbe],
) -> Result<(), String> {
    let probe = probes.iter().find(|p| p.site == target).ok_or_else(|| format!("{target} was not probed"))?;
    let obs = probe.outcome.as_ref().map_err(|f| format!("{target} is unreachable: {}", f.message))?;
    let src = source_obs.ok_or_else(|| format!("the active site {source} is unreachable"))?;
    let Some(r) = &obs.replication else {
        return Err(format!("{target} has no replication configured; make it a replica of {source}"));
    };
    if !r.running() {
        return Err(format!(
            "{target} replication is not running (IO thread: {}, SQL thread: {}); start it ({}) and fix its errors",
            r.io_running,
            r.sql_running,
            start_hint(obs.flavor)
        ));
    }
    if r.source_server_id != Some(src.server_id) {
        return Err(format!("{target} does not replicate from {source} (server_id {})", src.server_id));
    }
    match r.lag_seconds {
        Some(lag) if lag > u64::from(max_lag_seconds) => {
            return Err(format!(
                "{target} is {lag}s behind, more than maxLagSeconds ({max_lag_seconds}s); wait for it to catch up"
            ));
        }
        None => return Err(format!("{target} reports no replication lag (NULL); wait until it is replicating")),
        Some(_) => {}
    }
    if let Some(errant) = errant(obs.flavor, &obs.gtid_position, &src.gtid_position, src.server_id, &src.server_uuid)? {
        return Err(format!(
            "{target} has transactions {source} lacks (errant GTIDs: {errant}); remove them or rebuild {target} from {source}"
        ));
    }
    Ok(())
}

/// Transactions `have` (a replica) has that `base` (its source, server
/// `base_server_id`, `base_uuid` on MySQL) lacks (`None`: none), less those
/// the source wrote itself: the two positions are read at slightly
/// different moments, so a replica can be ahead of a busy source's snapshot
/// with the source's own transactions, which are not errant. MariaDB: per
/// domain, a last GTID past `base`'s whose server is not the source.
/// MySQL: `have − base`, without the source's UUID (found by the failover
/// benchmark: a planned failover back under write load was refused for the
/// source's own newest transaction).
pub fn errant(
    flavor: Flavor,
    have: &str,
    base: &str,
    base_server_id: u32,
    base_uuid: &str,
) -> Result<Option<String>, String> {
    match flavor {
        Flavor::MariaDb => {
            let have = MariaDbPosition::parse(have).map_err(|e| e.to_string())?;
            let base = MariaDbPosition::parse(base).map_err(|e| e.to_string())?;
            let mut beyond = have.beyond(&base);
            beyond.0.retain(|_, (server, _)| *server != base_server_id);
            Ok((!beyond.is_empty()).then(|| beyond.to_string()))
        }
        Flavor::MySql => {
            let have = MySqlGtidSet::parse(have).map_err(|e| e.to_string())?;
            let base = MySqlGtidSet::parse(base).map_err(|e| e.to_string())?;
            let mut extra = have.minus(&base);
            extra.0.retain(|uuid, _| !uuid.eq_ignore_ascii_case(base_uuid));
            Ok((!extra.is_empty()).then(|| extra.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errant_transactions_by_flavour() {
        assert_eq!(errant(Flavor::MariaDb, "0-1-10", "0-1-10", 1, ""), Ok(None));
        assert_eq!(errant(Flavor::MariaDb, "0-1-9", "0-1-10", 1, ""), Ok(None), "behind is not errant");
        assert_eq!(errant(Flavor::MariaDb, "0-2-11", "0-1-10", 1, ""), Ok(Some("0-2-11".into())));
        // Read a moment after a busy source: ahead with the source's own transactions.
        assert_eq!(errant(Flavor::MariaDb, "0-2-240", "0-2-238", 2, ""), Ok(None));
        assert_eq!(
            errant(Flavor::MariaDb, "0-1-10,1-2-3", "0-1-10", 1, ""),
            Ok(Some("1-2-3".into())),
            "a domain the base lacks"
        );
        assert_eq!(errant(Flavor::MariaDb, "", "0-1-10", 1, ""), Ok(None));
        assert!(errant(Flavor::MariaDb, "zzz", "0-1-1", 1, "").is_err());
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let source = "87f16bcf-efcf-11f1-85e2-02fc00000001";
        assert_eq!(errant(Flavor::MySql, &format!("{u}:1-5"), &format!("{u}:1-5"), 1, source), Ok(None));
        assert!(errant(Flavor::MySql, &format!("{u}:1-6"), &format!("{u}:1-5"), 1, source).unwrap().is_some());
        // Read a moment after a busy source: ahead with the source's own
        // transactions (the benchmark's input), in either case of its UUID.
        let have = format!("{u}:1-176,{source}:1-251");
        let base = format!("{u}:1-176,{source}:1-250");
        assert_eq!(errant(Flavor::MySql, &have, &base, 2, source), Ok(None));
        assert_eq!(errant(Flavor::MySql, &have, &base, 2, &source.to_uppercase()), Ok(None));
        // Its own writes on the replica are errant all the same.
        let mine = "d901bb47-efcd-11f1-90bb-02fc00000001";
        assert_eq!(errant(Flavor::MySql, &format!("{have},{mine}:1"), &base, 2, source), Ok(Some(format!("{mine}:1"))));
    }
}
