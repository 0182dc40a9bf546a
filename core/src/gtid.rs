//! GTID positions of both flavours, and the two questions failover asks of
//! them (pure, unit-tested):
//!
//! - **Covered**: has a replica applied everything it received, or
//!   everything a primary had? MariaDB positions (`gtid_slave_pos`,
//!   `gtid_io_pos`, `gtid_current_pos`, `gtid_binlog_pos`) hold one
//!   `domain-server-seq` per replication domain; with `gtid_strict_mode`
//!   sequence numbers only grow within a domain, so `a` covers `b` when for
//!   every domain of `b`, `a` has that domain at a sequence number at least
//!   as high. MySQL GTID sets (`gtid_executed`) are `uuid:intervals` sets;
//!   `a` covers `b` when `b − a` is empty.
//! - **Errant**: which transactions does a returning former primary have
//!   that the group's history lacks? On MariaDB, those past the position the
//!   new primary was promoted at, per domain (the promotion position is
//!   recorded with the decision, because the new primary's own later
//!   transactions reuse the sequence numbers of the domain). On MySQL,
//!   `old − new`.
//!
//! Source: MariaDB KB "Global Transaction ID" (gtid_strict_mode, domains);
//! MySQL 8.0 reference "GTID Format and Storage" (GTID sets).

use std::collections::BTreeMap;
use std::fmt;

/// A GTID position or set that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to read GTID position {text:?}: {why}")]
pub struct GtidError {
    /// The text as the server gave it (a GTID position holds no secret).
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

fn bad(text: &str, why: &'static str) -> GtidError {
    GtidError { text: text.chars().take(200).collect(), why }
}

/// A MariaDB GTID position: for each replication domain, the last GTID
/// (`server_id`, sequence number).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MariaDbPosition(pub BTreeMap<u32, (u32, u64)>);

impl MariaDbPosition {
    /// Parses `domain-server-seq[,domain-server-seq...]` (empty: no transaction).
    pub fn parse(text: &str) -> Result<Self, GtidError> {
        let mut out = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let mut fields = part.split('-');
            let (Some(d), Some(s), Some(n), None) = (fields.next(), fields.next(), fields.next(), fields.next()) else {
                return Err(bad(text, "expected domain-server-seq"));
            };
            let domain = d.parse().map_err(|_| bad(text, "domain is not a number"))?;
            let server = s.parse().map_err(|_| bad(text, "server_id is not a number"))?;
            let seq = n.parse().map_err(|_| bad(text, "sequence is not a number"))?;
            if out.insert(domain, (server, seq)).is_some() {
                return Err(bad(text, "a domain appears twice"));
            }
        }
        Ok(MariaDbPosition(out))
    }

    /// Whether this position has every domain of `other` at a sequence
    /// number at least as high.
    pub fn covers(&self, other: &MariaDbPosition) -> bool {
        other.0.iter().all(|(d, (_, seq))| self.0.get(d).is_some_and(|(_, mine)| mine >= seq))
    }

    /// The domains where this position is past `base`: GTIDs a returning
    /// primary has beyond the position its successor was promoted at.
    #[must_use]
    pub fn beyond(&self, base: &MariaDbPosition) -> MariaDbPosition {
        MariaDbPosition(
            self.0
                .iter()
                .filter(|(d, (_, seq))| base.0.get(d).is_none_or(|(_, b)| seq > b))
                .map(|(d, v)| (*d, *v))
                .collect(),
        )
    }

    /// Whether no domain has a transaction.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for MariaDbPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(d, (s, n))| format!("{d}-{s}-{n}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// The MariaDB GTIDs `from..=to` of one domain and server, as `D-S-N` (one)
/// or `D-S-FROM..TO`.
pub fn mariadb_range(domain: u32, server: u32, from: u64, to: u64) -> String {
    if from == to { format!("{domain}-{server}-{to}") } else { format!("{domain}-{server}-{from}..{to}") }
}

/// A MariaDB `gtid_binlog_state`: the last GTID binlogged by each
/// (domain, `server_id`) pair. Unlike a position it keeps every server's
/// last GTID of a domain, so a replica's own writes stay visible after its
/// source's later transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MariaDbBinlogState(pub BTreeMap<(u32, u32), u64>);

impl MariaDbBinlogState {
    /// Parses `domain-server-seq[,…]` (a domain may appear once per server).
    pub fn parse(text: &str) -> Result<Self, GtidError> {
        let mut out = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let one = MariaDbPosition::parse(part)?;
            for (domain, (server, seq)) in one.0 {
                if out.insert((domain, server), seq).is_some() {
                    return Err(bad(text, "a domain and server_id appear twice"));
                }
            }
        }
        Ok(MariaDbBinlogState(out))
    }
}

/// A MySQL GTID set: for each source UUID, closed intervals of transaction
/// numbers, sorted and merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MySqlGtidSet(pub BTreeMap<String, Vec<(u64, u64)>>);

fn merge(mut intervals: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    intervals.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for (lo, hi) in intervals {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

impl MySqlGtidSet {
    /// Parses `uuid:1-5:7,uuid2:3` (whitespace and newlines allowed, as
    /// `@@gtid_executed` prints them). Tagged GTIDs (`uuid:tag:1-5`, MySQL
    /// 8.3+) are refused rather than misread.
    pub fn parse(text: &str) -> Result<Self, GtidError> {
        let mut out: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
        let cleaned: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        for part in cleaned.split(',').filter(|p| !p.is_empty()) {
            let mut fields = part.split(':');
            let uuid = fields.next().unwrap_or_default().to_ascii_lowercase();
            if uuid.len() != 36 || !uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                return Err(bad(text, "expected a server UUID"));
            }
            let entry = out.entry(uuid).or_default();
            for interval in fields {
                let (lo, hi) = match interval.split_once('-') {
                    Some((lo, hi)) => (lo, hi),
                    None => (interval, interval),
                };
                let lo: u64 = lo
                    .parse()
                    .map_err(|_| bad(text, "expected transaction numbers (tagged GTIDs are not supported)"))?;
                let hi: u64 = hi.parse().map_err(|_| bad(text, "expected transaction numbers"))?;
                if lo == 0 || hi < lo {
                    return Err(bad(text, "an interval must be 1 ≤ start ≤ end"));
                }
                entry.push((lo, hi));
            }
        }
        Ok(MySqlGtidSet(out.into_iter().map(|(u, i)| (u, merge(i))).filter(|(_, i)| !i.is_empty()).collect()))
    }

    /// The transactions of this set that `other` lacks.
    #[must_use]
    pub fn minus(&self, other: &MySqlGtidSet) -> MySqlGtidSet {
        let mut out = BTreeMap::new();
        for (uuid, mine) in &self.0 {
            let theirs = other.0.get(uuid).map(Vec::as_slice).unwrap_or_default();
            let mut left = Vec::new();
            for &(lo, hi) in mine {
                let mut start = lo;
                for &(tlo, thi) in theirs {
                    if thi < start || tlo > hi {
                        continue;
                    }
                    if tlo > start {
                        left.push((start, tlo - 1));
                    }
                    start = thi.saturating_add(1);
                    if start > hi {
                        break;
                    }
                }
                if start <= hi {
                    left.push((start, hi));
                }
            }
            if !left.is_empty() {
                out.insert(uuid.clone(), left);
            }
        }
        MySqlGtidSet(out)
    }

    /// Whether this set has every transaction of `other`.
    pub fn covers(&self, other: &MySqlGtidSet) -> bool {
        other.minus(self).is_empty()
    }

    /// Whether the set has no transaction.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many transactions the set holds.
    pub fn count(&self) -> u64 {
        self.0.values().flatten().map(|(lo, hi)| hi - lo + 1).sum()
    }
}

impl fmt::Display for MySqlGtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(u, iv)| {
                let ivs: Vec<String> =
                    iv.iter().map(|(lo, hi)| if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") }).collect();
                format!("{u}:{}", ivs.join(":"))
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "4f22ab58-82db-22f2-af44-d91bb0530673";

    #[test]
    fn mariadb_positions_parse_and_compare() {
        let p = MariaDbPosition::parse("0-1-100,1-2-5").unwrap();
        assert_eq!(p.to_string(), "0-1-100,1-2-5");
        assert!(MariaDbPosition::parse("").unwrap().is_empty());
        for bad in ["0-1", "0-1-x", "a-1-2", "0-1-2,0-2-3", "0-1-2-3"] {
            assert!(MariaDbPosition::parse(bad).is_err(), "{bad}");
        }
        let applied = MariaDbPosition::parse("0-1-100").unwrap();
        let received = MariaDbPosition::parse("0-1-102").unwrap();
        assert!(!applied.covers(&received), "the relay log is not yet applied");
        assert!(received.covers(&applied));
        assert!(p.covers(&MariaDbPosition::parse("0-9-99").unwrap()), "by sequence within the domain");
        assert!(!p.covers(&MariaDbPosition::parse("2-1-1").unwrap()), "a domain it has never seen");
    }

    #[test]
    fn errant_mariadb_transactions_are_those_past_the_promotion_position() {
        let promoted_at = MariaDbPosition::parse("0-1-100").unwrap();
        // Clean: the old primary stopped exactly where its successor took over.
        assert!(MariaDbPosition::parse("0-1-100").unwrap().beyond(&promoted_at).is_empty());
        // Diverged: it wrote 0-1-101 after the promotion (split brain).
        let old = MariaDbPosition::parse("0-1-101").unwrap();
        assert_eq!(old.beyond(&promoted_at).to_string(), "0-1-101");
        // A domain the successor never saw is errant too.
        assert_eq!(MariaDbPosition::parse("0-1-90,5-1-1").unwrap().beyond(&promoted_at).to_string(), "5-1-1");
    }

    #[test]
    fn mariadb_binlog_states_keep_each_servers_last_gtid() {
        let s = MariaDbBinlogState::parse("0-1-56,0-2-59, 1-1-3").unwrap();
        assert_eq!(s.0.get(&(0, 2)), Some(&59));
        assert_eq!(s.0.get(&(0, 1)), Some(&56));
        assert_eq!(s.0.len(), 3);
        for bad in ["0-1-2,0-1-3", "0-1", "x"] {
            assert!(MariaDbBinlogState::parse(bad).is_err(), "{bad}");
        }
        assert!(MariaDbBinlogState::parse("").unwrap().0.is_empty());
    }

    #[test]
    fn mysql_sets_parse_subtract_and_compare() {
        let s = MySqlGtidSet::parse(&format!("{A}:1-5:7,\n{B}:3")).unwrap();
        assert_eq!(s.to_string(), format!("{A}:1-5:7,{B}:3"));
        assert_eq!(MySqlGtidSet::parse(&format!("{A}:1-3:4-6")).unwrap().to_string(), format!("{A}:1-6"));
        for bad in ["x:1", &format!("{A}:0"), &format!("{A}:5-3"), &format!("{A}:tag:1-5")] {
            assert!(MySqlGtidSet::parse(bad).is_err(), "{bad}");
        }
        let old = MySqlGtidSet::parse(&format!("{A}:1-10,{B}:1-2")).unwrap();
        let new = MySqlGtidSet::parse(&format!("{A}:1-8")).unwrap();
        assert_eq!(old.minus(&new).to_string(), format!("{A}:9-10,{B}:1-2"));
        assert!(!new.covers(&old));
        assert!(old.covers(&new));
        assert!(
            MySqlGtidSet::parse(&format!("{A}:1-10"))
                .unwrap()
                .minus(&MySqlGtidSet::parse(&format!("{A}:3-4:6")).unwrap())
                == MySqlGtidSet::parse(&format!("{A}:1-2:5:7-10")).unwrap()
        );
    }

    fn set() -> impl Strategy<Value = Vec<(u8, u64, u64)>> {
        proptest::collection::vec((0u8..2, 1u64..40, 0u64..5), 0..8)
    }

    fn build(v: &[(u8, u64, u64)]) -> (MySqlGtidSet, std::collections::BTreeSet<(u8, u64)>) {
        let mut text = Vec::new();
        let mut members = std::collections::BTreeSet::new();
        for &(u, lo, len) in v {
            text.push(format!("{}:{lo}-{}", if u == 0 { A } else { B }, lo + len));
            for n in lo..=lo + len {
                members.insert((u, n));
            }
        }
        (MySqlGtidSet::parse(&text.join(",")).unwrap(), members)
    }

    proptest! {
        /// Set subtraction agrees with the sets of single transactions.
        #[test]
        fn minus_is_set_difference(a in set(), b in set()) {
            let (sa, ma) = build(&a);
            let (sb, mb) = build(&b);
            let (_, want) = build(&[]);
            let diff = sa.minus(&sb);
            let mut got = want;
            for (uuid, iv) in &diff.0 {
                let u = u8::from(uuid.as_str() != A);
                for &(lo, hi) in iv { for n in lo..=hi { got.insert((u, n)); } }
            }
            let expected: std::collections::BTreeSet<(u8, u64)> = ma.difference(&mb).copied().collect();
            prop_assert_eq!(got, expected);
            prop_assert_eq!(sa.covers(&sb), mb.is_subset(&ma));
        }

        /// MariaDB positions over several domains (and servers): `covers`
        /// and `beyond` agree with a model of each domain's last sequence
        /// number, and a position survives its own text.
        #[test]
        fn mariadb_positions_agree_with_a_per_domain_model(
            a in proptest::collection::btree_map(0u32..4, (1u32..4, 0u64..50), 0..4),
            b in proptest::collection::btree_map(0u32..4, (1u32..4, 0u64..50), 0..4),
        ) {
            let (pa, pb) = (MariaDbPosition(a.clone()), MariaDbPosition(b.clone()));
            prop_assert_eq!(MariaDbPosition::parse(&pa.to_string()).unwrap(), pa.clone());
            let covers = b.iter().all(|(d, (_, n))| a.get(d).is_some_and(|(_, m)| m >= n));
            prop_assert_eq!(pa.covers(&pb), covers);
            let beyond: BTreeMap<u32, (u32, u64)> =
                a.iter().filter(|(d, (_, n))| b.get(d).is_none_or(|(_, m)| n > m)).map(|(d, v)| (*d, *v)).collect();
            prop_assert_eq!(pa.beyond(&pb).0, beyond);
            // Whatever is beyond is exactly what keeps `b` from covering `a`.
            prop_assert_eq!(pa.beyond(&pb).is_empty(), pb.covers(&pa));
        }

        /// A binlog state keeps each (domain, server_id) pair's last GTID,
        /// however the pairs are written.
        #[test]
        fn mariadb_binlog_states_read_back_every_pair(
            pairs in proptest::collection::btree_map((0u32..3, 1u32..4), 1u64..1000, 0..6),
        ) {
            let text: Vec<String> = pairs.iter().rev().map(|((d, s), n)| format!("{d}-{s}-{n}")).collect();
            prop_assert_eq!(MariaDbBinlogState::parse(&text.join(", ")).unwrap().0, pairs);
        }
    }
}
