//! The replica check of every probe round, pure: errant transactions on a
//! site that is not the active one, and replication that has silently
//! stopped delivering.
//!
//! **Errant transactions.** A site holds a transaction the active site
//! lacks: a write on a replica (`SET GLOBAL read_only=0`, or an account with
//! `SUPER`/`READ_ONLY ADMIN`), or a returning former primary's last
//! commits. The replica's set is read first and the active site's after it:
//! the active site's set only grows, so anything of the replica's it lacks
//! then is not on its way, it is errant. (Read the other way round, a busy
//! primary's newest transactions would look errant on a replica that had
//! just applied them.)
//!
//! - MySQL: `replica gtid_executed − primary gtid_executed`.
//! - MariaDB: `gtid_binlog_state` keeps the last GTID of each (domain,
//!   `server_id`), and with `log_slave_updates` a replica binlogs what it
//!   applies. A pair the replica has past the active site's last GTID of
//!   that pair (or that the active site never binlogged) is errant. The
//!   range named starts after the later of the active site's last GTID of
//!   that pair and what the replica applied of the domain from its source
//!   (`gtid_slave_pos`): with `gtid_strict_mode` its own writes follow
//!   those. Transactions written with `sql_log_bin=0` are in no binlog and
//!   cannot be seen by any GTID check.
//!
//! **Stalls.** Both replica threads can report running and
//! `Seconds_Behind_Master` 0 while nothing arrives (a dropped link, a
//! silently cut connection: the IO thread waits for `slave_net_timeout`,
//! an hour by default). So the lag that counts is the GTID distance: a
//! replica that lacks some of the active site's transactions, counting what
//! it received and what it applied, and whose received and applied
//! positions have not moved for [`stall_bound`], is stalled. A replica that
//! received everything but applies slowly (a long `ALTER`) is lagging, not
//! stalled: its received set covers the active site's.

use std::time::{Duration, Instant};

use crate::gtid::{MariaDbBinlogState, MariaDbPosition, MySqlGtidSet, mariadb_range};
use crate::observation::Flavor;

/// Transactions a site holds that the active site lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Errant {
    /// The GTIDs in the flavour's notation (MariaDB ranges as `D-S-FROM..TO`).
    pub gtids: String,
    /// How many (on MariaDB at most: a range can hold numbers another
    /// server's GTIDs of the domain took).
    pub transactions: u64,
}

/// What a non-active site holds that the active site lacks. `replica_state`
/// and `primary_state` are [`crate::SiteObservation::gtid_binlog_state`],
/// the replica's read first; `replica_slave_pos` its `gtid_slave_pos`
/// (MariaDB; ignored on MySQL). `Err` when a position does not parse.
pub fn errant(
    flavor: Flavor,
    replica_state: &str,
    replica_slave_pos: &str,
    primary_state: &str,
) -> Result<Option<Errant>, String> {
    match flavor {
        Flavor::MariaDb => {
            let replica = MariaDbBinlogState::parse(replica_state).map_err(|e| e.to_string())?;
            let primary = MariaDbBinlogState::parse(primary_state).map_err(|e| e.to_string())?;
            let applied = MariaDbPosition::parse(replica_slave_pos).map_err(|e| e.to_string())?;
            let mut ranges = Vec::new();
            let mut transactions = 0u64;
            for (&(domain, server), &last) in &replica.0 {
                let theirs = primary.0.get(&(domain, server)).copied().unwrap_or(0);
                if last <= theirs {
                    continue;
                }
                let from_source = applied.0.get(&domain).map_or(0, |(_, seq)| *seq);
                let after = if from_source < last { theirs.max(from_source) } else { theirs };
                ranges.push(mariadb_range(domain, server, after + 1, last));
                transactions += last - after;
            }
            Ok((transactions > 0).then(|| Errant { gtids: ranges.join(","), transactions }))
        }
        Flavor::MySql => {
            let replica = MySqlGtidSet::parse(replica_state).map_err(|e| e.to_string())?;
            let primary = MySqlGtidSet::parse(primary_state).map_err(|e| e.to_string())?;
            let extra = replica.minus(&primary);
            Ok((!extra.is_empty()).then(|| Errant { gtids: extra.to_string(), transactions: extra.count() }))
        }
    }
}

/// The part of a MySQL replica's extra GTIDs that the active site itself
/// wrote (`primary_uuid`, its `server_uuid`) and may still be committing.
/// MySQL sends a transaction to its replicas once its binlog is synced and
/// adds it to `gtid_executed` only in the commit stage after that, so a
/// replica can show a busy primary's newest GTIDs before the primary does.
/// Those are waited for on the active site (`WAIT_FOR_EXECUTED_GTID_SET`,
/// bounded) before they are judged; GTIDs of any other server are not on
/// their way and are not waited for. `None` on MariaDB, whose
/// `gtid_binlog_state` holds a transaction before any replica can, and when
/// nothing of the active site's own is extra.
pub fn in_flight(flavor: Flavor, replica_state: &str, primary_state: &str, primary_uuid: &str) -> Option<String> {
    if flavor != Flavor::MySql || primary_uuid.is_empty() {
        return None;
    }
    let replica = MySqlGtidSet::parse(replica_state).ok()?;
    let primary = MySqlGtidSet::parse(primary_state).ok()?;
    let mut extra = replica.minus(&primary);
    extra.0.retain(|uuid, _| uuid.eq_ignore_ascii_case(primary_uuid));
    (!extra.is_empty()).then(|| extra.to_string())
}

/// Whether a replica has everything of `primary` (the active site's
/// position), counting what it applied (`applied`: `gtid_current_pos` /
/// `gtid_executed`) and what it received but has not applied yet
/// (`received`: `Gtid_IO_Pos` / `Retrieved_Gtid_Set`).
pub fn has_everything(flavor: Flavor, applied: &str, received: Option<&str>, primary: &str) -> Result<bool, String> {
    let received = received.unwrap_or_default();
    match flavor {
        Flavor::MariaDb => {
            let parse = |t: &str| MariaDbPosition::parse(t).map_err(|e| e.to_string());
            let (applied, received, primary) = (parse(applied)?, parse(received)?, parse(primary)?);
            Ok(primary.0.iter().all(|(d, (_, seq))| {
                let have = |p: &MariaDbPosition| p.0.get(d).map_or(0, |(_, s)| *s);
                have(&applied).max(have(&received)) >= *seq
            }))
        }
        Flavor::MySql => {
            let parse = |t: &str| MySqlGtidSet::parse(t).map_err(|e| e.to_string());
            let (applied, received, primary) = (parse(applied)?, parse(received)?, parse(primary)?);
            Ok(primary.minus(&applied).minus(&received).is_empty())
        }
    }
}

/// How long a replica may lack some of the active site's transactions with
/// nothing received or applied before it is stalled: three probe intervals,
/// at least 10 s (a quiet link between two commits is not a stall).
pub fn stall_bound(probe_interval: Duration) -> Duration {
    (probe_interval * 3).max(Duration::from_secs(10))
}

/// A replica's progress as the rounds saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Applied and received positions at the last change.
    seen: (String, String),
    /// Since when it has been behind with those positions unchanged
    /// (`None`: it had everything at the last round).
    behind_since: Option<Instant>,
}

impl Progress {
    /// This round: `applied`/`received` as the replica showed them,
    /// `complete` whether it has everything the active site had
    /// ([`has_everything`]), at `now`.
    #[must_use]
    pub fn next(previous: Option<&Progress>, applied: &str, received: &str, complete: bool, now: Instant) -> Progress {
        let seen = (applied.to_owned(), received.to_owned());
        let behind_since = match previous {
            _ if complete => None,
            Some(p) if p.seen == seen => Some(p.behind_since.unwrap_or(now)),
            // Moved (or first seen): behind from now, not stalled.
            _ => Some(now),
        };
        Progress { seen, behind_since }
    }

    /// How long the replica has been behind without moving, if it is
    /// stalled by `bound` at `now`.
    pub fn stalled(&self, now: Instant, bound: Duration) -> Option<Duration> {
        let since = self.behind_since?;
        let stuck = now.saturating_duration_since(since);
        (stuck >= bound).then_some(stuck)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    const U: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const V: &str = "4e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn only_the_active_sites_own_extra_gtids_are_waited_for() {
        // The replica applied U:41-44 before the primary's commit stage
        // added them to its gtid_executed; V:1-3 are the replica's own.
        let replica = format!("{U}:1-44,\n{V}:1-3");
        assert_eq!(
            in_flight(Flavor::MySql, &replica, &format!("{U}:1-40"), U).as_deref(),
            Some(format!("{U}:41-44").as_str())
        );
        // Nothing of the primary's own is extra: nothing to wait for.
        assert_eq!(in_flight(Flavor::MySql, &replica, &format!("{U}:1-44"), U), None);
        // A uuid in another case is the same server.
        assert!(in_flight(Flavor::MySql, &replica, &format!("{U}:1-40"), &U.to_uppercase()).is_some());
        // MariaDB never waits; neither does an unknown uuid or a garbled set.
        assert_eq!(in_flight(Flavor::MariaDb, "0-1-5", "0-1-4", U), None);
        assert_eq!(in_flight(Flavor::MySql, &replica, &format!("{U}:1-40"), ""), None);
        assert_eq!(in_flight(Flavor::MySql, "garbage", &format!("{U}:1-40"), U), None);
    }

    #[test]
    fn a_write_on_a_mariadb_replica_is_named_as_a_range() {
        // The playground's input: the replica applied up to 0-1-56, then
        // took three writes of its own.
        let e = errant(Flavor::MariaDb, "0-1-56,0-2-59", "0-1-56", "0-1-56").unwrap().unwrap();
        assert_eq!((e.gtids.as_str(), e.transactions), ("0-2-57..59", 3));
        // The primary moved on meanwhile (read after): still errant, the
        // primary never binlogged anything of server 2.
        let e = errant(Flavor::MariaDb, "0-1-56,0-2-59", "0-1-56", "0-1-70").unwrap().unwrap();
        assert_eq!(e.gtids, "0-2-57..59");
        // A former primary's writes the active site replicated are not errant.
        assert_eq!(errant(Flavor::MariaDb, "0-1-70,0-2-40", "0-1-70", "0-1-75,0-2-40").unwrap(), None);
        // ...but a later one of its own is.
        let e = errant(Flavor::MariaDb, "0-1-70,0-2-71", "0-1-70", "0-1-75,0-2-40").unwrap().unwrap();
        assert_eq!((e.gtids.as_str(), e.transactions), ("0-2-71", 1));
        // A returning primary (server 1) that committed past what its
        // successor had: named from the successor's last GTID of server 1.
        let e = errant(Flavor::MariaDb, "0-1-1557", "0-2-100", "0-1-1357,0-2-1370").unwrap().unwrap();
        assert_eq!((e.gtids.as_str(), e.transactions), ("0-1-1358..1557", 200));
        // Another domain the active site never saw.
        let e = errant(Flavor::MariaDb, "0-1-5,7-2-2", "0-1-5", "0-1-5").unwrap().unwrap();
        assert_eq!((e.gtids.as_str(), e.transactions), ("7-2-1..2", 2));
        assert!(errant(Flavor::MariaDb, "0-1", "", "").is_err());
    }

    #[test]
    fn a_write_on_a_mysql_replica_is_the_set_difference() {
        let e = errant(Flavor::MySql, &format!("{U}:1-60,{V}:1-3"), "", &format!("{U}:1-80")).unwrap().unwrap();
        assert_eq!((e.gtids, e.transactions), (format!("{V}:1-3"), 3));
        assert_eq!(errant(Flavor::MySql, &format!("{U}:1-60"), "", &format!("{U}:1-80")).unwrap(), None);
    }

    #[test]
    fn what_was_received_counts_toward_having_everything() {
        assert!(has_everything(Flavor::MariaDb, "0-1-10", Some("0-1-12"), "0-1-12").unwrap());
        assert!(!has_everything(Flavor::MariaDb, "0-1-10", Some("0-1-11"), "0-1-12").unwrap());
        assert!(!has_everything(Flavor::MariaDb, "0-1-10", None, "0-1-10,1-1-1").unwrap(), "a domain it lacks");
        assert!(has_everything(Flavor::MariaDb, "0-2-476", None, "").unwrap(), "nothing on the primary");
        assert!(
            has_everything(Flavor::MySql, &format!("{U}:1-5"), Some(&format!("{U}:6-9")), &format!("{U}:1-9")).unwrap()
        );
        assert!(!has_everything(Flavor::MySql, &format!("{U}:1-5"), None, &format!("{U}:1-9")).unwrap());
    }

    #[test]
    fn a_replica_behind_that_does_not_move_is_stalled_after_the_bound() {
        let t0 = Instant::now();
        let bound = stall_bound(Duration::from_secs(2));
        assert_eq!(bound, Duration::from_secs(10));
        let at = |s| t0 + Duration::from_secs(s);
        let p = Progress::next(None, "0-1-476", "0-1-476", false, at(0));
        assert_eq!(p.stalled(at(0), bound), None, "first sight is never a stall");
        let p = Progress::next(Some(&p), "0-1-476", "0-1-476", false, at(9));
        assert_eq!(p.stalled(at(9), bound), None);
        let p = Progress::next(Some(&p), "0-1-476", "0-1-476", false, at(12));
        assert_eq!(p.stalled(at(12), bound), Some(Duration::from_secs(12)));
        // It moves: no longer stalled, and the clock restarts.
        let p = Progress::next(Some(&p), "0-1-477", "0-1-480", false, at(13));
        assert_eq!(p.stalled(at(22), bound), None);
        assert!(p.stalled(at(23), bound).is_some());
        // Caught up: never stalled, however long nothing moves.
        let p = Progress::next(Some(&p), "0-1-480", "0-1-480", true, at(30));
        assert_eq!(p.stalled(at(300), bound), None);
        assert_eq!(stall_bound(Duration::from_secs(5)), Duration::from_secs(15));
    }

    /// A history of one MariaDB domain: GTIDs `(server, seq)`, seqs 1, 2, …
    fn state_of(history: &[u32]) -> String {
        state_in(0, history)
    }

    /// The binlog state of one domain whose GTIDs were written in the order
    /// of `history` (each entry the writing server's id).
    fn state_in(domain: u32, history: &[u32]) -> String {
        let mut last: BTreeMap<u32, usize> = BTreeMap::new();
        for (i, s) in history.iter().enumerate() {
            last.insert(*s, i + 1);
        }
        last.iter().map(|(s, n)| format!("{domain}-{s}-{n}")).collect::<Vec<_>>().join(",")
    }

    proptest! {
        /// MariaDB: a replica that holds a prefix of the primary's history
        /// (as read before the primary's) is never errant, however far the
        /// primary moved on; one that wrote its own transactions after that
        /// prefix is, with exactly those named.
        #[test]
        fn mariadb_errant_iff_the_replica_wrote_its_own(
            history in proptest::collection::vec(1u32..3, 0..40),
            applied in 0usize..40,
            own in 0u64..5,
        ) {
            let applied = applied.min(history.len());
            let primary = state_of(&history);
            let mut replica_history = history[..applied].to_vec();
            let replica_server = 9;
            replica_history.extend(std::iter::repeat_n(replica_server, own as usize));
            let slave_pos = if applied == 0 { String::new() } else { format!("0-{}-{applied}", history[applied - 1]) };
            let got = errant(Flavor::MariaDb, &state_of(&replica_history), &slave_pos, &primary).unwrap();
            prop_assert_eq!(got.as_ref().map_or(0, |e| e.transactions), own);
            if let Some(e) = got {
                let last = applied as u64 + own;
                let first = applied as u64 + 1;
                let want = if first == last { format!("0-9-{last}") } else { format!("0-9-{first}..{last}") };
                prop_assert_eq!(e.gtids, want);
            }
        }

        /// MariaDB over several domains: each domain's own writes of the
        /// replica past its applied prefix are named, in that domain, and
        /// nothing else (a domain it only replicated is clean, however far
        /// the primary moved on in it).
        #[test]
        fn mariadb_errant_ranges_are_named_per_domain(
            domains in proptest::collection::vec(
                (proptest::collection::vec(1u32..3, 1..20), 0usize..20, 0u64..4),
                1..4,
            ),
        ) {
            let (mut primary, mut replica, mut applied_pos, mut want) = (vec![], vec![], vec![], vec![]);
            for (d, (history, applied, own)) in domains.iter().enumerate() {
                let d = d as u32;
                let applied = (*applied).min(history.len());
                primary.push(state_in(d, history));
                let mut mine = history[..applied].to_vec();
                mine.extend(std::iter::repeat_n(9, *own as usize));
                replica.push(state_in(d, &mine));
                if applied > 0 {
                    applied_pos.push(format!("{d}-{}-{applied}", history[applied - 1]));
                }
                if *own > 0 {
                    let (first, last) = (applied as u64 + 1, applied as u64 + own);
                    want.push(if first == last { format!("{d}-9-{last}") } else { format!("{d}-9-{first}..{last}") });
                }
            }
            let join = |v: &[String]| v.iter().filter(|p| !p.is_empty()).cloned().collect::<Vec<_>>().join(",");
            let got = errant(Flavor::MariaDb, &join(&replica), &join(&applied_pos), &join(&primary)).unwrap();
            prop_assert_eq!(got.map(|e| e.gtids).unwrap_or_default(), want.join(","));
        }

        /// MySQL: exactly the replica's set minus the primary's, over
        /// several UUIDs with gaps.
        #[test]
        fn mysql_errant_is_exactly_the_difference(
            replica in proptest::collection::btree_map(0u8..3, proptest::collection::btree_set(1u64..50, 0..20), 0..3),
            primary in proptest::collection::btree_map(0u8..3, proptest::collection::btree_set(1u64..50, 0..20), 0..3),
        ) {
            let text = |m: &BTreeMap<u8, BTreeSet<u64>>| m.iter().filter(|(_, n)| !n.is_empty()).map(|(u, n)| {
                format!("{u}e11fa47-71ca-11e1-9e33-c80aa9429562:{}", n.iter().map(u64::to_string).collect::<Vec<_>>().join(":"))
            }).collect::<Vec<_>>().join(",");
            let expected: u64 = replica.iter().map(|(u, n)| n.iter().filter(|x| !primary.get(u).is_some_and(|p| p.contains(x))).count() as u64).sum();
            let got = errant(Flavor::MySql, &text(&replica), "", &text(&primary)).unwrap();
            prop_assert_eq!(got.map_or(0, |e| e.transactions), expected);
        }

        /// A replica that moves every round is never stalled, and one that
        /// has everything never is either.
        #[test]
        fn moving_or_complete_is_never_stalled(steps in proptest::collection::vec((any::<bool>(), 0u64..30), 1..30)) {
            let t0 = Instant::now();
            let bound = Duration::from_secs(10);
            let mut p: Option<Progress> = None;
            let mut seq = 0u64;
            let mut t = t0;
            for (complete, gap) in steps {
                seq += 1;
                t += Duration::from_secs(gap);
                let pos = format!("0-1-{seq}");
                let next = Progress::next(p.as_ref(), &pos, &pos, complete, t);
                prop_assert_eq!(next.stalled(t, bound), None);
                p = Some(next);
            }
        }
    }
}
