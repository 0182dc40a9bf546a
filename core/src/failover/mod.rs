//! The failover engine's pure parts, property- and unit-tested:
//! [`planned`], the decision table of a planned failover, and
//! [`emergency`], when an emergency failover may promote and whether a
//! returning former primary diverged, and [`abandoned`], what a promotion
//! abandons of what the primary was last seen with, and [`replica`], the
//! replica check of every round (errant transactions, stalls). The
//! operator's failover-group controller runs them against the sites.

pub mod abandoned;
pub mod emergency;
pub mod planned;
pub mod replica;
