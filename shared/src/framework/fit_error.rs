//! `FitError`: why a pod fits on no node, in upstream's exact message format
//! (`pkg/scheduler/framework/types.go`, `FitError.Error()`):
//!
//! `0/N nodes are available: <histogram>.[ <post-filter message>]`
//!
//! The histogram counts every reason of every node's status once per node,
//! formats entries as `"<count> <reason>"`, sorts them as plain strings
//! (so `"10 ..."` sorts before `"2 ..."`) and joins them with `", "`. A
//! PreFilter rejection replaces the histogram with its own message.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use super::Status;
use crate::pod_info::PodKey;

/// Reason given to nodes a PreFilterResult excluded.
pub const REASON_FILTERED_BY_PREFILTER: &str = "node is filtered out by the prefilter result";

/// What the cycle learned about every node it rejected.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// Each rejected node's status (nodes with an explicit status).
    pub node_to_status: Vec<(Arc<str>, Status)>,
    /// Status of nodes without an explicit status (cut by a PreFilterResult);
    /// counted `N - node_to_status.len()` times.
    pub absent_nodes_status: Option<Status>,
    /// Plugins that rejected the pod somewhere (drives requeueing).
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Message of a PreFilter plugin that rejected the pod outright.
    pub pre_filter_msg: Option<String>,
    /// Message of a PostFilter plugin (e.g. preemption), appended verbatim.
    pub post_filter_msg: Option<String>,
}

/// The pod fits on none of `num_all_nodes` nodes.
#[derive(Debug, Clone)]
pub struct FitError {
    /// The pod.
    pub pod: PodKey,
    /// Nodes in the snapshot the cycle used (all nodes, not only filtered ones).
    pub num_all_nodes: usize,
    /// Per-node reasons.
    pub diagnosis: Diagnosis,
}

impl FitError {
    /// Reason → number of nodes, before formatting.
    #[must_use]
    pub fn reason_counts(&self) -> HashMap<String, usize> {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for (_, st) in &self.diagnosis.node_to_status {
            for r in &st.reasons {
                *counts.entry(r.to_string()).or_default() += 1;
            }
        }
        if let Some(st) = &self.diagnosis.absent_nodes_status {
            let absent = self
                .num_all_nodes
                .saturating_sub(self.diagnosis.node_to_status.len());
            if absent > 0 {
                for r in &st.reasons {
                    *counts.entry(r.to_string()).or_default() += absent;
                }
            }
        }
        counts
    }

    /// The sorted histogram entries, e.g. `["1 Insufficient cpu", ...]`.
    #[must_use]
    pub fn histogram(&self) -> Vec<String> {
        let mut entries: Vec<String> = self
            .reason_counts()
            .into_iter()
            .map(|(r, c)| format!("{c} {r}"))
            .collect();
        entries.sort_unstable();
        entries
    }
}

/// Upstream `ErrNoNodesAvailable`: the message when the cluster has no node.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num_all_nodes == 0 {
            // Upstream stops before filtering with ErrNoNodesAvailable.
            return f.write_str(NO_NODES_AVAILABLE);
        }
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        if let Some(msg) = &self.diagnosis.pre_filter_msg {
            write!(f, " {msg}.")?;
        } else {
            let h = self.histogram();
            if !h.is_empty() {
                write!(f, " {}.", h.join(", "))?;
            }
        }
        if let Some(msg) = &self.diagnosis.post_filter_msg {
            write!(f, " {msg}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FitError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cluster_says_no_nodes_are_available_like_upstream() {
        let e = FitError {
            pod: crate::PodKey::new("default", "p"),
            num_all_nodes: 0,
            diagnosis: Diagnosis::default(),
        };
        assert_eq!(e.to_string(), "no nodes available to schedule pods");
    }
    use crate::framework::Code;

    fn st(reasons: &[&'static str]) -> Status {
        Status {
            code: Code::Unschedulable,
            reasons: reasons.iter().map(|r| (*r).into()).collect(),
            plugin: "",
        }
    }

    fn fit_error(n: usize, statuses: Vec<Status>) -> FitError {
        FitError {
            pod: PodKey::new("default", "p"),
            num_all_nodes: n,
            diagnosis: Diagnosis {
                node_to_status: statuses
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| (Arc::from(format!("n{i}").as_str()), s))
                    .collect(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn five_nodes_three_short_of_cpu_two_tainted() {
        // Upstream sorts whole entries as strings: "2 node(s)..." < "3 Insufficient cpu".
        let mut s = vec![st(&["Insufficient cpu"]); 3];
        s.extend(vec![st(&["node(s) had untolerated taint(s)"]); 2]);
        assert_eq!(
            fit_error(5, s).to_string(),
            "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient cpu."
        );
    }

    #[test]
    fn node_with_two_reasons_counts_in_both_entries() {
        let s = vec![
            st(&["Insufficient cpu", "Insufficient memory"]),
            st(&["node(s) had untolerated taint(s)"]),
        ];
        assert_eq!(
            fit_error(2, s).to_string(),
            "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated taint(s)."
        );
    }

    #[test]
    fn entries_sort_as_strings_so_10_precedes_2() {
        let mut s = vec![st(&["node(s) had untolerated taint(s)"]); 10];
        s.extend(vec![st(&["Insufficient cpu"]); 2]);
        assert_eq!(
            fit_error(12, s).to_string(),
            "0/12 nodes are available: 10 node(s) had untolerated taint(s), 2 Insufficient cpu."
        );
    }

    #[test]
    fn absent_nodes_are_counted_with_the_prefilter_reason() {
        let mut e = fit_error(
            3,
            vec![st(&[
                "node(s) didn't have free ports for the requested pod ports",
            ])],
        );
        e.diagnosis.absent_nodes_status = Some(st(&[REASON_FILTERED_BY_PREFILTER]));
        e.diagnosis.post_filter_msg =
            Some("preemption: not eligible due to preemptionPolicy=Never.".into());
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 2 node is filtered out by the prefilter result. preemption: not eligible due to preemptionPolicy=Never."
        );
    }

    #[test]
    fn prefilter_message_replaces_histogram() {
        let mut e = fit_error(4, vec![]);
        e.diagnosis.pre_filter_msg =
            Some("pod has unbound immediate PersistentVolumeClaims".into());
        assert_eq!(
            e.to_string(),
            "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        );
        assert_eq!(
            fit_error(0, vec![]).to_string(),
            "no nodes available to schedule pods"
        );
    }
}
