//! Max instances per node: at most `k` pods of the same app on one node
//! (the DLRM trace's `max_instance_per_node`). Kubernetes has no native
//! field for `k > 1` (`k = 1` is a required pod anti-affinity on the
//! hostname), so a pod declares its limit in the annotation
//! [`ANNOTATION_MAX_INSTANCES_PER_NODE`], and "the same app" means the same
//! namespace and the same value of one label key (by default
//! [`DEFAULT_APP_LABEL`]).
//!
//! The check is per node and counts the app's pods already on the node
//! ([`NodeInfo::pods`]: bound, assumed or granted). The cap is symmetric,
//! like required anti-affinity: the smallest `k` among the incoming pod and
//! the app's pods already there decides, so a later pod with a larger `k`,
//! or with none, cannot break an earlier pod's cap (apps of the trace mix
//! caps, e.g. 2, 4 and 8, or 2 and none, in one app). Every pod's cap then
//! holds in every state. A pod without the app label is not concerned. The
//! scheduler's `MaxInstancesPerNode` plugin decides with it in its Filter
//! and in its bind check (run by the coordinator's bind arbiter), so two
//! workers can never put `k + 1` instances on one node together.
//!
//! Cost: one pass over the node's pods, stopping once the cap is reached;
//! the incoming pod's annotation and label are read once per cycle
//! ([`limit_of`]), and only the app's own pods on the node have theirs read.

use crate::{NodeInfo, PodInfo};

/// Pod annotation: the most pods of this pod's app allowed on one node, a
/// positive integer (`1`, `2`, ...). Absent: no limit.
pub const ANNOTATION_MAX_INSTANCES_PER_NODE: &str =
    "scheduling.flotilla.dev/max-instances-per-node";

/// Default label key whose value names a pod's app.
pub const DEFAULT_APP_LABEL: &str = "app";

/// Filter reason (upstream FitError style) when the node already runs `k`
/// instances of the pod's app.
pub const REASON_MAX_INSTANCES: &str =
    "node(s) already run the maximum number of instances of this app";

/// Short reason of a pod whose annotation cannot be read
/// ([`Violation::reason`]); [`LimitError`] has the details.
pub const REASON_INVALID_LIMIT: &str =
    "pod has an invalid scheduling.flotilla.dev/max-instances-per-node annotation";

/// A pod's limit, read once per scheduling cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLimit {
    /// The pod's namespace.
    pub namespace: std::sync::Arc<str>,
    /// The value of the app label.
    pub app: String,
    /// The pod's own cap: at most this many pods of the app per node (≥ 1);
    /// `usize::MAX` when it declares none (the app's pods already on a node
    /// may).
    pub max: usize,
}

/// A pod whose limit annotation cannot be applied; the message names the pod
/// and the annotation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The value is not a positive integer.
    #[error(
        "pod {pod}: annotation {ANNOTATION_MAX_INSTANCES_PER_NODE}: {value:?} is not a positive \
         integer"
    )]
    Invalid {
        /// `namespace/name`.
        pod: String,
        /// The annotation's value.
        value: String,
    },
    /// The pod has the annotation but not the label naming its app.
    #[error(
        "pod {pod}: annotation {ANNOTATION_MAX_INSTANCES_PER_NODE} needs the label {label:?} \
         naming the pod's app"
    )]
    NoApp {
        /// `namespace/name`.
        pod: String,
        /// The app label key.
        label: String,
    },
}

/// Reads `pod`'s limit: `Ok(None)` for a pod without the app label nor the
/// annotation (not concerned); a pod with the label but no annotation has
/// no cap of its own (`max = usize::MAX`) but is held to its app's.
///
/// # Errors
/// [`LimitError`]: the value is not a positive integer, or the pod has the
/// annotation but lacks the `app_label` label.
pub fn limit_of(pod: &PodInfo, app_label: &str) -> Result<Option<InstanceLimit>, LimitError> {
    let value = pod.max_instances_annotation.as_deref();
    let max = match value {
        None => usize::MAX,
        Some(value) => value
            .parse::<usize>()
            .ok()
            .filter(|&k| k >= 1)
            .ok_or_else(|| LimitError::Invalid {
                pod: pod.key.to_string(),
                value: value.to_owned(),
            })?,
    };
    let Some(app) = pod.labels.get(app_label) else {
        return match value {
            None => Ok(None),
            Some(_) => Err(LimitError::NoApp {
                pod: pod.key.to_string(),
                label: app_label.to_owned(),
            }),
        };
    };
    Ok(Some(InstanceLimit {
        namespace: pod.key.namespace.clone(),
        app: app.clone(),
        max,
    }))
}

/// A placed pod's own cap: its annotation when that is a positive integer
/// (an unreadable one was refused when the pod was scheduled; here it
/// counts as no cap).
fn declared(pod: &PodInfo) -> Option<usize> {
    pod.max_instances_annotation
        .as_deref()?
        .parse::<usize>()
        .ok()
        .filter(|&k| k >= 1)
}

/// `(pods of limit's app on node, the smallest cap among limit and them)`,
/// not counting the pod `uid` itself; stops once the count reaches the cap.
fn count_and_cap(
    limit: &InstanceLimit,
    uid: &str,
    node: &NodeInfo,
    app_label: &str,
) -> (usize, usize) {
    let (mut count, mut cap) = (0, limit.max);
    for p in &node.pods {
        if &*p.uid != uid
            && p.key.namespace == limit.namespace
            && p.labels.get(app_label).is_some_and(|v| *v == limit.app)
        {
            count += 1;
            if let Some(k) = declared(p) {
                cap = cap.min(k);
            }
            if count >= cap {
                break;
            }
        }
    }
    (count, cap)
}

/// Pods of `limit`'s app on `node` (same namespace, same `app_label`
/// value), not counting the pod `uid` itself, counted up to the cap.
#[must_use]
pub fn instances_on(limit: &InstanceLimit, uid: &str, node: &NodeInfo, app_label: &str) -> usize {
    count_and_cap(limit, uid, node, app_label).0
}

/// Whether one more pod of `limit`'s app fits on `node`: fewer pods of the
/// app than the smallest cap among `limit` and theirs.
#[must_use]
pub fn fits(limit: &InstanceLimit, uid: &str, node: &NodeInfo, app_label: &str) -> bool {
    let (count, cap) = count_and_cap(limit, uid, node, app_label);
    count < cap
}

/// Why a placement breaks the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The node already runs the pod's limit of its app.
    Full,
    /// The pod's annotation cannot be read.
    Invalid(LimitError),
}

impl Violation {
    /// The Filter reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Violation::Full => REASON_MAX_INSTANCES,
            Violation::Invalid(_) => REASON_INVALID_LIMIT,
        }
    }
}

/// Checks placing `pod` on `node`: [`limit_of`] then [`fits`] (the
/// plugin's bind check; its Filter reads the limit once in PreFilter and
/// calls [`fits`] per node).
///
/// # Errors
/// [`Violation`].
pub fn check_placement(pod: &PodInfo, node: &NodeInfo, app_label: &str) -> Result<(), Violation> {
    match limit_of(pod, app_label) {
        Ok(None) => Ok(()),
        Ok(Some(l)) if fits(&l, &pod.uid, node, app_label) => Ok(()),
        Ok(Some(_)) => Err(Violation::Full),
        Err(e) => Err(Violation::Invalid(e)),
    }
}

/// Nodes of `nodes` on which some pod's app has more pods than that pod's
/// limit (a safety check over a final cluster state; pods with an invalid
/// annotation are ignored here).
pub fn overfull_nodes<'a>(nodes: impl IntoIterator<Item = &'a NodeInfo>, app_label: &str) -> usize {
    nodes
        .into_iter()
        .filter(|n| {
            n.pods.iter().any(|p| {
                limit_of(p, app_label).ok().flatten().is_some_and(|l| {
                    let same_app = n.pods.iter().filter(|q| {
                        q.uid != p.uid
                            && q.key.namespace == l.namespace
                            && q.labels.get(app_label).is_some_and(|v| *v == l.app)
                    });
                    same_app.count() >= l.max
                })
            })
        })
        .count()
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, app_pod};

    fn node_with(pods: Vec<PodInfo>) -> NodeInfo {
        NodeBuilder::new("n1").pods(110).build_info_with(pods)
    }

    #[test]
    fn limit_is_read_from_the_annotation_and_the_app_label() {
        let p = app_pod("p", "ns", "web", Some("2"));
        let l = limit_of(&p, "app").expect("valid").expect("limited");
        assert_eq!((&*l.namespace, l.app.as_str(), l.max), ("ns", "web", 2));
        let own = limit_of(&app_pod("q", "ns", "web", None), "app").expect("valid");
        assert_eq!(
            own.map(|l| l.max),
            Some(usize::MAX),
            "held to the app's caps"
        );
        assert_eq!(
            limit_of(&PodBuilder::new("r").build_info(), "app"),
            Ok(None)
        );
    }

    #[test]
    fn bad_values_name_the_pod_and_the_annotation() {
        for v in ["0", "-1", "two", "", "1.5"] {
            let e = limit_of(&app_pod("p", "ns", "web", Some(v)), "app").expect_err(v);
            assert_eq!(
                e.to_string(),
                format!(
                    "pod ns/p: annotation scheduling.flotilla.dev/max-instances-per-node: {v:?} \
                     is not a positive integer"
                )
            );
        }
        let e = limit_of(&app_pod("p", "ns", "web", Some("2")), "service").expect_err("no label");
        assert!(e.to_string().contains("needs the label \"service\""), "{e}");
    }

    #[test]
    fn an_earlier_pods_smaller_cap_holds_against_a_later_larger_one() {
        let n = node_with(vec![app_pod("a", "ns", "web", Some("1"))]);
        let p = app_pod("p", "ns", "web", Some("8"));
        assert_eq!(check_placement(&p, &n, "app"), Err(Violation::Full));
        let n = node_with(vec![app_pod("a", "ns", "web", None)]);
        assert_eq!(check_placement(&p, &n, "app"), Ok(()), "no cap of its own");
        let uncapped = app_pod("u", "ns", "web", None);
        let n = node_with(vec![app_pod("a", "ns", "web", Some("1"))]);
        assert_eq!(check_placement(&uncapped, &n, "app"), Err(Violation::Full));
    }

    #[test]
    fn the_kth_instance_is_refused_and_other_apps_or_namespaces_do_not_count() {
        let n = node_with(vec![
            app_pod("a", "ns", "web", Some("2")),
            app_pod("b", "other", "web", Some("2")),
            app_pod("c", "ns", "db", None),
        ]);
        let p = app_pod("p", "ns", "web", Some("2"));
        assert_eq!(check_placement(&p, &n, "app"), Ok(()));
        let n = node_with(vec![
            app_pod("a", "ns", "web", Some("2")),
            app_pod("b", "ns", "web", None),
        ]);
        assert_eq!(check_placement(&p, &n, "app"), Err(Violation::Full));
        assert_eq!(Violation::Full.reason(), REASON_MAX_INSTANCES);
        assert_eq!(overfull_nodes([&n], "app"), 0, "2 of 2 is at, not over");
        let three = node_with(vec![
            app_pod("a", "ns", "web", Some("2")),
            app_pod("b", "ns", "web", None),
            app_pod("c", "ns", "web", None),
        ]);
        assert_eq!(overfull_nodes([&three, &n], "app"), 1);
    }
}
