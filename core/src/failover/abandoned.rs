//! What an emergency promotion abandons, pure: the transactions the
//! operator last saw on the primary that the standby lacks when it is
//! promoted.
//!
//! The operator reads the primary's position on every probe round it
//! answers, and the standby's at the decision. Whatever the primary had at
//! its last answer and the standby has not got by then is lost to the new
//! topology: the promotion abandons it. (What the primary committed after
//! its last answer is unknown to the operator, and not counted.)
//!
//! - MySQL: the GTID sets' difference, `primary − standby`.
//! - MariaDB (`gtid_strict_mode`: one sequence of numbers per domain): per
//!   domain, the primary's last sequence number past the standby's; the
//!   missing transactions are that domain's numbers from the standby's + 1
//!   to the primary's, written `D-S-FROM..TO` with `S` the server that wrote
//!   the primary's last one.
//!
//! The group's policy (`spec.failover.maxAbandonedTransactions`) bounds how
//! many an automatic promotion may abandon; beyond it the group waits and
//! says why, unless a person accepted the loss (see
//! `failover::emergency::judge`).

use crate::gtid::{MariaDbPosition, MySqlGtidSet, mariadb_range};
use crate::observation::Flavor;

/// Transactions a promotion abandons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Abandoned {
    /// The GTIDs, in the flavour's notation (MariaDB ranges as `D-S-FROM..TO`).
    pub gtids: String,
    /// How many transactions.
    pub transactions: u64,
}

/// What promoting a standby that has `standby` abandons of what the primary
/// was last seen with, `primary` (`None`: nothing). `Err` when a position
/// does not parse.
pub fn abandoned(flavor: Flavor, primary: &str, standby: &str) -> Result<Option<Abandoned>, String> {
    match flavor {
        Flavor::MariaDb => {
            let primary = MariaDbPosition::parse(primary).map_err(|e| e.to_string())?;
            let standby = MariaDbPosition::parse(standby).map_err(|e| e.to_string())?;
            let mut ranges = Vec::new();
            let mut transactions = 0u64;
            for (domain, (server, last)) in &primary.0 {
                let have = standby.0.get(domain).map_or(0, |(_, seq)| *seq);
                if *last > have {
                    ranges.push(mariadb_range(*domain, *server, have + 1, *last));
                    transactions += last - have;
                }
            }
            Ok((transactions > 0).then(|| Abandoned { gtids: ranges.join(","), transactions }))
        }
        Flavor::MySql => {
            let primary = MySqlGtidSet::parse(primary).map_err(|e| e.to_string())?;
            let standby = MySqlGtidSet::parse(standby).map_err(|e| e.to_string())?;
            let missing = primary.minus(&standby);
            Ok((!missing.is_empty()).then(|| Abandoned { gtids: missing.to_string(), transactions: missing.count() }))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn mariadb_ranges_per_domain() {
        // The playground's input: the standby stopped receiving at 1357.
        let a = abandoned(Flavor::MariaDb, "0-1-1557", "0-2-1357").unwrap().unwrap();
        assert_eq!((a.gtids.as_str(), a.transactions), ("0-1-1358..1557", 200));
        assert_eq!(abandoned(Flavor::MariaDb, "0-1-1557", "0-1-1557").unwrap(), None);
        assert_eq!(abandoned(Flavor::MariaDb, "0-1-10", "0-1-12").unwrap(), None, "ahead is not abandoned");
        let a = abandoned(Flavor::MariaDb, "0-1-11,3-1-4", "0-1-10").unwrap().unwrap();
        assert_eq!((a.gtids.as_str(), a.transactions), ("0-1-11,3-1-1..4", 5), "a domain the standby never had");
        assert_eq!(abandoned(Flavor::MariaDb, "", "0-1-3").unwrap(), None, "nothing seen on the primary");
        assert!(abandoned(Flavor::MariaDb, "x", "0-1-3").is_err());
    }

    #[test]
    fn mysql_sets() {
        let (u, v) = ("3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562");
        let a = abandoned(Flavor::MySql, &format!("{u}:1-10:20-25,{v}:1-3"), &format!("{u}:1-8:21,{v}:1-3"))
            .unwrap()
            .unwrap();
        assert_eq!(a.gtids, format!("{u}:9-10:20:22-25"));
        assert_eq!(a.transactions, 7);
        assert_eq!(abandoned(Flavor::MySql, &format!("{u}:1-5"), &format!("{u}:1-9")).unwrap(), None);
    }

    /// A GTID set over two UUIDs as the transaction numbers it holds.
    fn numbers() -> impl Strategy<Value = BTreeMap<u8, BTreeSet<u64>>> {
        proptest::collection::btree_map(0u8..2, proptest::collection::btree_set(1u64..60, 0..30), 0..3)
    }

    fn text(set: &BTreeMap<u8, BTreeSet<u64>>) -> String {
        set.iter()
            .filter(|(_, n)| !n.is_empty())
            .map(|(u, n)| {
                let ns: Vec<String> = n.iter().map(u64::to_string).collect();
                format!("{u}e11fa47-71ca-11e1-9e33-c80aa9429562:{}", ns.join(":"))
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    proptest! {
        /// MySQL: exactly the primary's last seen set minus the standby's,
        /// counted one by one.
        #[test]
        fn mysql_abandons_exactly_the_difference(primary in numbers(), standby in numbers()) {
            let expected: u64 = primary
                .iter()
                .map(|(u, n)| n.iter().filter(|x| !standby.get(u).is_some_and(|s| s.contains(x))).count() as u64)
                .sum();
            let got = abandoned(Flavor::MySql, &text(&primary), &text(&standby)).unwrap();
            prop_assert_eq!(got.as_ref().map_or(0, |a| a.transactions), expected);
            // The named GTIDs, read back one by one, are the difference of
            // the two sets of numbers (a model that shares no code with it).
            let mut named: BTreeMap<u8, BTreeSet<u64>> = BTreeMap::new();
            if let Some(a) = &got {
                for (uuid, intervals) in MySqlGtidSet::parse(&a.gtids).unwrap().0 {
                    let u: u8 = uuid[..1].parse().unwrap();
                    named.entry(u).or_default().extend(intervals.iter().flat_map(|&(lo, hi)| lo..=hi));
                }
            }
            let want: BTreeMap<u8, BTreeSet<u64>> = primary
                .iter()
                .map(|(u, n)| (*u, n.difference(standby.get(u).unwrap_or(&BTreeSet::new())).copied().collect::<BTreeSet<u64>>()))
                .filter(|(_, n)| !n.is_empty())
                .collect();
            prop_assert_eq!(named, want);
        }

        /// MariaDB: per domain, the primary's sequence numbers past the standby's.
        #[test]
        fn mariadb_abandons_each_domains_missing_numbers(
            primary in proptest::collection::btree_map(0u32..3, 1u64..1000, 0..3),
            standby in proptest::collection::btree_map(0u32..3, 1u64..1000, 0..3),
        ) {
            let pos = |m: &BTreeMap<u32, u64>, server: u32| m.iter().map(|(d, s)| format!("{d}-{server}-{s}")).collect::<Vec<_>>().join(",");
            let expected: u64 = primary.iter().map(|(d, s)| s.saturating_sub(standby.get(d).copied().unwrap_or(0))).sum();
            let got = abandoned(Flavor::MariaDb, &pos(&primary, 1), &pos(&standby, 2)).unwrap();
            prop_assert_eq!(got.as_ref().map_or(0, |a| a.transactions), expected);
            // The named ranges: per domain, the primary's numbers past the
            // standby's, as the primary's server wrote them.
            let mut named = BTreeSet::new();
            for part in got.as_ref().map_or("", |a| a.gtids.as_str()).split(',').filter(|p| !p.is_empty()) {
                let mut f = part.splitn(3, '-');
                let (d, s, n) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
                let (from, to) = n.split_once("..").unwrap_or((n, n));
                named.insert((d.parse::<u32>().unwrap(), s.parse::<u32>().unwrap(), from.parse::<u64>().unwrap(), to.parse::<u64>().unwrap()));
            }
            let want: BTreeSet<(u32, u32, u64, u64)> = primary
                .iter()
                .filter_map(|(d, p)| {
                    let s = standby.get(d).copied().unwrap_or(0);
                    (*p > s).then_some((*d, 1, s + 1, *p))
                })
                .collect();
            prop_assert_eq!(named, want);
        }
    }
}
