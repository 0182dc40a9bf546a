//! The failover engine's pure parts, property- and unit-tested:
//! [`planned`], the decision table of a planned failover, and
//! [`emergency`], when an emergency failover may promote and whether a
//! returning former primary diverged, and [`abandoned`], what a promotion
//! abandons of what the primary was last seen with, and [`replica`], the
//! replica check of every round (errant transactions, stalls), and the
//! decision tables of the two planned disruptions that run a user's Job:
//! [`ordered_update`] and [`restore`], built on the planned failover's
//! admission and switchover with what they share in [`disruption`]. The
//! operator's failover-group controller runs them against the sites.

pub mod abandoned;
pub mod disruption;
pub mod emergency;
pub mod ordered_update;
pub mod planned;
pub mod replica;
pub mod restore;
