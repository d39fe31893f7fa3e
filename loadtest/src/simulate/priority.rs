//! Pod priority from PriorityClasses, as upstream's `Priority` admission
//! plugin computes it; moved to [`flotilla_shared::priority`] (the
//! coordinator resolves pods with it too) and re-exported here.

pub use flotilla_shared::priority::*;
