//! The lease core (`machine`: pure decisions; `ending`: the DDL boundary
//! and the verdict) and its driver (`driver`: the I/O around them).

pub mod driver;
pub mod ending;
pub mod machine;
