//! Fragmentation of a node against a target workload (FGD, §1 of the reference).
