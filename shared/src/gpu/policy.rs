//! GPU scoring policies: FGD and the paper's baselines.
