//! `DefaultPreemptionArgs` (`kubescheduler.config.k8s.io/v1`): how many
//! candidate nodes the dry run looks for before picking one.

use serde::Deserialize;

use crate::framework::decode_args;

/// The args kind named in `pluginConfig`.
pub const ARGS_KIND: &str = "DefaultPreemptionArgs";

/// Upstream default of `minCandidateNodesPercentage` (v1 defaulting).
pub const DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE: u32 = 10;
/// Upstream default of `minCandidateNodesAbsolute` (v1 defaulting).
pub const DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE: u32 = 100;

/// DefaultPreemption's args. The dry run stops once it has found
/// `max(potential_nodes * percentage / 100, absolute)` candidates (capped at
/// the number of potential nodes) and at least one of them violates no
/// PodDisruptionBudget ([`DefaultPreemptionArgs::num_candidates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultPreemptionArgs {
    /// `minCandidateNodesPercentage`: share (0..=100, percent) of the
    /// potential nodes to find as candidates. Default 10.
    pub min_candidate_nodes_percentage: u32,
    /// `minCandidateNodesAbsolute`: lower bound on the number of candidates
    /// (0 = none). Default 100. Not both may be 0.
    pub min_candidate_nodes_absolute: u32,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        DefaultPreemptionArgs {
            min_candidate_nodes_percentage: DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE,
            min_candidate_nodes_absolute: DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE,
        }
    }
}

/// The args as written (int32 upstream), before range checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct RawArgs {
    min_candidate_nodes_percentage: i64,
    min_candidate_nodes_absolute: i64,
}

impl Default for RawArgs {
    fn default() -> Self {
        RawArgs {
            min_candidate_nodes_percentage: i64::from(DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE),
            min_candidate_nodes_absolute: i64::from(DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE),
        }
    }
}

impl DefaultPreemptionArgs {
    /// Decodes `pluginConfig` args (absent fields take the defaults) and
    /// validates them as upstream's `ValidateDefaultPreemptionArgs` does.
    ///
    /// # Errors
    /// A message starting with the field path inside the args:
    /// - `minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]`;
    /// - `minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)`;
    /// - both 0: `minCandidateNodesPercentage: Invalid value: 0: cannot be zero
    ///   at the same time as minCandidateNodesAbsolute`;
    /// - unknown fields, wrong types or a wrong `kind`.
    pub fn decode(args: Option<&serde_json::Value>) -> Result<Self, String> {
        let raw: RawArgs = decode_args(args, ARGS_KIND)?;
        let pct = raw.min_candidate_nodes_percentage;
        let abs = raw.min_candidate_nodes_absolute;
        if !(0..=100).contains(&pct) {
            return Err(format!(
                "minCandidateNodesPercentage: Invalid value: {pct}: not in valid range [0, 100]"
            ));
        }
        let Ok(absolute) = u32::try_from(abs) else {
            return Err(format!(
                "minCandidateNodesAbsolute: Invalid value: {abs}: not in valid range [0, inf)"
            ));
        };
        if i32::try_from(absolute).is_err() {
            return Err(format!(
                "minCandidateNodesAbsolute: Invalid value: {abs}: must fit in int32"
            ));
        }
        if pct == 0 && absolute == 0 {
            return Err(
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the \
                        same time as minCandidateNodesAbsolute"
                    .to_owned(),
            );
        }
        Ok(DefaultPreemptionArgs {
            min_candidate_nodes_percentage: u32::try_from(pct).unwrap_or(0),
            min_candidate_nodes_absolute: absolute,
        })
    }

    /// How many candidates the dry run looks for among `potential_nodes`
    /// nodes (upstream `calculateNumCandidates`):
    /// `max(potential_nodes * percentage / 100, absolute)`, at most
    /// `potential_nodes`.
    #[must_use]
    pub fn num_candidates(&self, potential_nodes: usize) -> usize {
        let by_share = potential_nodes * self.min_candidate_nodes_percentage as usize / 100;
        by_share
            .max(self.min_candidate_nodes_absolute as usize)
            .min(potential_nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_args_take_upstream_defaults() {
        assert_eq!(
            DefaultPreemptionArgs::decode(None).unwrap(),
            DefaultPreemptionArgs {
                min_candidate_nodes_percentage: 10,
                min_candidate_nodes_absolute: 100
            }
        );
        let one = json!({"kind": "DefaultPreemptionArgs", "minCandidateNodesPercentage": 0});
        assert_eq!(
            DefaultPreemptionArgs::decode(Some(&one)).unwrap(),
            DefaultPreemptionArgs {
                min_candidate_nodes_percentage: 0,
                min_candidate_nodes_absolute: 100
            },
            "an explicit 0 is kept; the other field defaults"
        );
    }

    #[test]
    fn invalid_args_are_refused_with_the_field_path() {
        for (args, want) in [
            (
                json!({"minCandidateNodesPercentage": 101}),
                "minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
            ),
            (
                json!({"minCandidateNodesPercentage": -1}),
                "minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]",
            ),
            (
                json!({"minCandidateNodesAbsolute": -1}),
                "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
            ),
            (
                json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}),
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute",
            ),
        ] {
            assert_eq!(
                DefaultPreemptionArgs::decode(Some(&args)).unwrap_err(),
                want
            );
        }
        let e = DefaultPreemptionArgs::decode(Some(&json!({"minCandidateNodes": 3}))).unwrap_err();
        assert!(e.contains("unknown field `minCandidateNodes`"), "{e}");
        let e = DefaultPreemptionArgs::decode(Some(&json!({"minCandidateNodesAbsolute": "x"})))
            .unwrap_err();
        assert!(e.starts_with("minCandidateNodesAbsolute: "), "{e}");
    }

    #[test]
    fn num_candidates_follows_calculate_num_candidates() {
        let a = |pct, abs| DefaultPreemptionArgs {
            min_candidate_nodes_percentage: pct,
            min_candidate_nodes_absolute: abs,
        };
        // (args, potential nodes, want) from upstream's defaults and caps.
        for (args, n, want) in [
            (a(10, 100), 5000, 500),
            (a(10, 100), 500, 100),
            (a(10, 100), 30, 30),
            (a(40, 1), 10, 4),
            (a(0, 3), 10, 3),
            (a(50, 0), 3, 1),
            (a(100, 0), 7, 7),
        ] {
            assert_eq!(args.num_candidates(n), want, "{args:?} over {n}");
        }
    }
}
