//! The upstream HTTP scheduler extenders (`KubeSchedulerConfiguration`
//! `extenders`) in the scheduling cycle, with upstream's semantics
//! (`pkg/scheduler/schedule_one.go`, `framework/preemption`):
//!
//! - **Filter** ([`Extenders::filter`], upstream
//!   `findNodesThatPassExtenders`): after the in-process Filter plugins,
//!   each extender with a `filterVerb`, in configuration order (ignorable
//!   ones last), gets the nodes still feasible, until none is left. Its
//!   `FailedNodes` become `Unschedulable` statuses of those nodes,
//!   `FailedAndUnresolvableNodes` `UnschedulableAndUnresolvable` ones (the
//!   latter win), so a FitError names the extender's reasons and preemption
//!   skips what it cannot help. When an extender removed nodes, the pod's
//!   rejecting plugins include `Extender`: it is retried on any cluster
//!   event (extenders register for none). The node a pod is nominated to is
//!   checked by the extenders too.
//! - **Prioritize** ([`Extenders::prioritize`], upstream
//!   `prioritizeNodes`): the extenders with a `prioritizeVerb` are called
//!   **in parallel** on the feasible nodes; each node's score (0..=10) adds
//!   `score × weight × 10` to its plugin total. A prioritize failure is
//!   ignored (logged), as upstream ignores it, ignorable or not. Not called
//!   when only one node is feasible (nothing to rank, as upstream).
//! - **Preempt** ([`Extenders::process_preemption`], upstream
//!   `callExtenders`): DefaultPreemption's candidates go through each
//!   extender with a `preemptVerb`, which may drop nodes or change victims;
//!   the next extender sees what the previous one kept.
//! - **Bind**: the extender with a `bindVerb` writes the Binding instead of
//!   the API call; that happens at the coordinator, after its arbiter
//!   granted the placement (`flotilla_coordinator`).
//!
//! Every verb applies only to pods the extender [is interested
//! in](HttpExtender::is_interested) (`managedResources`). A failing or
//! timed-out call of an `ignorable` extender is skipped (logged at warn,
//! counted in [`flotilla_shared::extender::ExtenderStats::ignored`]); of
//! another, it fails the pod's attempt with the extender's message (the
//! pod backs off and is reported with it). Replies that do not parse are
//! failures, never panics.
//!
//! Calls block the scheduling thread until they answer or time out
//! (`httpTimeout`, default 5 s), as upstream's serial cycle does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_shared::extender::{
    EXTENDER_NAME, ExtenderConfig, ExtenderError, FailureKind, HttpExtender, VictimsByNode,
};
use flotilla_shared::framework::{Code, Status};
use flotilla_shared::http::{HttpError, run_blocking};
use flotilla_shared::{NodeInfo, PodInfo};
use k8s_openapi::api::core::v1::Pod;
use tracing::warn;

use crate::cache::Snapshot;
use crate::framework::ScheduleError;
use crate::preemption::Candidate;

pub use flotilla_shared::extender::wire;

/// The configured extenders, in upstream's call order: the configuration's
/// order, with the `ignorable` ones moved to the end (upstream
/// `buildExtenders`).
#[derive(Debug, Default)]
pub struct Extenders {
    list: Vec<Arc<HttpExtender>>,
}

/// Each extender's scores of one cycle: (extender name, node → scaled
/// score added to the node's total).
pub type ExtenderScores = Vec<(Arc<str>, HashMap<Arc<str>, i64>)>;

fn internal(e: &ExtenderError) -> ScheduleError {
    ScheduleError::Internal {
        plugin: EXTENDER_NAME,
        message: e.to_string(),
    }
}

fn block<T: Send + 'static>(
    call: flotilla_shared::extender::Call<T>,
    ext: &HttpExtender,
    verb: &'static str,
) -> Result<T, ExtenderError> {
    run_blocking(call).unwrap_or_else(|| {
        Err(ExtenderError {
            extender: ext.name().to_owned(),
            verb,
            message: "the call's task failed".into(),
            kind: FailureKind::Transport,
        })
    })
}

/// The `Node` objects of the feasible nodes, for an extender's request
/// (workers keep nodes as JSON: each is decoded on first use and kept).
fn node_objects(
    nodes: &[Arc<NodeInfo>],
    feasible: &[usize],
) -> Vec<Arc<k8s_openapi::api::core::v1::Node>> {
    feasible.iter().map(|&i| nodes[i].spec.node()).collect()
}

impl Extenders {
    /// The extenders of `configs` (in configuration order; ignorable ones
    /// are moved last).
    ///
    /// # Errors
    /// An extender whose TLS settings cannot be used.
    pub fn new(configs: &[ExtenderConfig]) -> Result<Self, HttpError> {
        let mut list = Vec::with_capacity(configs.len());
        for c in configs.iter().filter(|c| !c.ignorable) {
            list.push(Arc::new(HttpExtender::new(c.clone())?));
        }
        for c in configs.iter().filter(|c| c.ignorable) {
            list.push(Arc::new(HttpExtender::new(c.clone())?));
        }
        Ok(Extenders { list })
    }

    /// Whether there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The extenders, in call order.
    #[must_use]
    pub fn list(&self) -> &[Arc<HttpExtender>] {
        &self.list
    }

    /// Whether any extender would filter `pod`.
    #[must_use]
    pub fn filters(&self, pod: &PodInfo) -> bool {
        let object = pod.pod();
        self.list
            .iter()
            .any(|e| e.is_filter() && e.is_interested(&object))
    }

    /// Upstream `findNodesThatPassExtenders`: the extenders' filter verbs,
    /// one after the other, on `feasible` (indices into `nodes`), until no
    /// node is left. Failed nodes get their statuses in `statuses` (plugin
    /// [`EXTENDER_NAME`]). Returns the nodes that passed every extender, in
    /// the order the last one gave them, and the nodes removed (in or out
    /// of `statuses`).
    ///
    /// # Errors
    /// A non-ignorable extender failed: [`ScheduleError::Internal`] with
    /// its message (plugin `Extender`).
    pub fn filter(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        mut feasible: Vec<usize>,
        statuses: &mut BTreeMap<Arc<str>, Status>,
    ) -> Result<(Vec<usize>, Vec<usize>), ScheduleError> {
        let before = feasible.clone();
        let object = pod.pod();
        for ext in &self.list {
            if feasible.is_empty() {
                break;
            }
            if !ext.is_filter() || !ext.is_interested(&object) {
                continue;
            }
            let owned = node_objects(nodes, &feasible);
            let objects: Vec<&k8s_openapi::api::core::v1::Node> =
                owned.iter().map(|n| &**n).collect();
            let _span = tracing::info_span!(
                "extender",
                extender = ext.name(),
                verb = "filter",
                nodes = objects.len()
            )
            .entered();
            let outcome = match block(ext.filter(&object, &objects), ext, "filter") {
                Ok(o) => o,
                Err(e) if ext.is_ignorable() => {
                    ext.stats().record_ignored();
                    warn!(pod = %pod.key, error = %e, "skipping ignorable extender");
                    continue;
                }
                Err(e) => return Err(internal(&e)),
            };
            for (node, msg) in outcome.failed_and_unresolvable {
                let name: Arc<str> = Arc::from(node.as_str());
                let mut reasons = statuses
                    .remove(&name)
                    .map(|s| s.reasons)
                    .unwrap_or_default();
                reasons.push(msg.into());
                let mut st = Status::new(Code::UnschedulableAndUnresolvable, "");
                st.reasons = reasons;
                statuses.insert(name, st.with_plugin(EXTENDER_NAME));
            }
            for (node, msg) in outcome.failed {
                let name: Arc<str> = Arc::from(node.as_str());
                match statuses.get_mut(&name) {
                    // An unresolvable status from this reply wins; an
                    // earlier extender's status collects the reason.
                    Some(st) => {
                        if !st.reasons.iter().any(|r| *r == msg) {
                            st.reasons.push(msg.into());
                        }
                    }
                    None => {
                        statuses
                            .insert(name, Status::unschedulable(msg).with_plugin(EXTENDER_NAME));
                    }
                }
            }
            let index: HashMap<&str, usize> =
                feasible.iter().map(|&i| (nodes[i].name(), i)).collect();
            feasible = outcome
                .passed
                .iter()
                .filter_map(|n| index.get(n.as_str()).copied())
                .collect();
        }
        let kept: std::collections::HashSet<usize> = feasible.iter().copied().collect();
        let removed = before.into_iter().filter(|i| !kept.contains(i)).collect();
        Ok((feasible, removed))
    }

    /// The prioritize part of upstream `prioritizeNodes`: every interested
    /// extender with a prioritize verb, in parallel, on `feasible`
    /// (indices into `nodes`). Failures are logged and ignored (upstream:
    /// "let k8s/other extenders determine the priorities").
    #[must_use]
    pub fn prioritize(
        &self,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        feasible: &[usize],
    ) -> ExtenderScores {
        let owned = node_objects(nodes, feasible);
        let objects: Vec<&k8s_openapi::api::core::v1::Node> = owned.iter().map(|n| &**n).collect();
        // Every call starts at once; then each is waited for.
        let object = pod.pod();
        let calls: Vec<_> = self
            .list
            .iter()
            .filter(|e| e.is_prioritizer() && e.is_interested(&object))
            .map(|e| (e, e.prioritize(&object, &objects)))
            .collect();
        let names: HashMap<&str, Arc<str>> = feasible
            .iter()
            .map(|&i| (nodes[i].name(), nodes[i].spec.name.clone()))
            .collect();
        let _span =
            tracing::info_span!("extenders", verb = "prioritize", calls = calls.len()).entered();
        let mut out = Vec::with_capacity(calls.len());
        for (ext, call) in calls {
            match block(call, ext, "prioritize") {
                Ok(list) => {
                    let weight = ext.config().weight;
                    let mut scores = HashMap::with_capacity(list.len());
                    for h in list {
                        // Scores for nodes that were not sent are dropped.
                        if let Some(name) = names.get(h.host.as_str()) {
                            let s = scores.entry(name.clone()).or_insert(0i64);
                            *s = s.saturating_add(wire::scaled_priority(h.score, weight));
                        }
                    }
                    out.push((Arc::from(ext.name()), scores));
                }
                Err(e) => {
                    if ext.is_ignorable() {
                        ext.stats().record_ignored();
                    }
                    warn!(pod = %pod.key, error = %e, "extender prioritize failed; its scores are left out");
                }
            }
        }
        out
    }

    /// Upstream `callExtenders`: DefaultPreemption's `candidates` through
    /// every interested extender with a preempt verb, in order. Each may
    /// drop candidates or change their victims (by uid, mapped back to the
    /// pods on that node in `snap`); a candidate left without victims is an
    /// error (or dropped, for an ignorable extender). Returns the
    /// candidates kept, by node name.
    ///
    /// # Errors
    /// A non-ignorable extender failed, named a node or pod the snapshot
    /// does not hold there, or left a node without victims.
    pub fn process_preemption(
        &self,
        pod: &PodInfo,
        snap: &Snapshot,
        candidates: Vec<Candidate>,
    ) -> Result<Vec<Candidate>, ScheduleError> {
        let mut current = candidates;
        let object = pod.pod();
        for ext in &self.list {
            if current.is_empty() {
                break;
            }
            if !ext.supports_preemption() || !ext.is_interested(&object) {
                continue;
            }
            // Victims as the cluster holds them, bound to their node (a pod
            // this worker placed itself keeps the copy it was assigned,
            // without `spec.nodeName`).
            let bound: Vec<Vec<Arc<Pod>>> = current
                .iter()
                .map(|c| {
                    c.victims
                        .iter()
                        .map(|v| bound_copy(v.pod(), &c.node))
                        .collect()
                })
                .collect();
            let victims: VictimsByNode<'_> = current
                .iter()
                .zip(&bound)
                .map(|(c, pods)| {
                    (
                        c.node.to_string(),
                        (
                            pods.iter().map(|p| &**p).collect(),
                            i64::try_from(c.pdb_violations).unwrap_or(i64::MAX),
                        ),
                    )
                })
                .collect();
            let kept = match block(ext.process_preemption(&object, &victims), ext, "preempt") {
                Ok(k) => k,
                Err(e) if ext.is_ignorable() => {
                    ext.stats().record_ignored();
                    warn!(pod = %pod.key, error = %e, "skipping ignorable extender in preemption");
                    continue;
                }
                Err(e) => return Err(internal(&e)),
            };
            let mut next = Vec::with_capacity(kept.len());
            for (node, meta) in kept {
                let refuse = |message: String| ScheduleError::Internal {
                    plugin: EXTENDER_NAME,
                    message: format!("extender {} preempt: {message}", ext.name()),
                };
                if meta.pods.is_empty() {
                    if ext.is_ignorable() {
                        warn!(node = %node, extender = ext.name(), "ignored a node for which the extender reported no victims");
                        continue;
                    }
                    return Err(refuse(format!(
                        "expected at least one victim pod on node {node:?}"
                    )));
                }
                let Some(info) = snap.get(&node) else {
                    return Err(refuse(format!("node {node:?} not found")));
                };
                let mut pods = Vec::with_capacity(meta.pods.len());
                for m in &meta.pods {
                    let Some(p) = info.pods.iter().find(|p| *p.uid == *m.uid) else {
                        return Err(refuse(format!(
                            "claims to preempt pod (UID: {}) on node: {node}, but the pod is \
                             not found on that node",
                            m.uid
                        )));
                    };
                    pods.push(p.clone());
                }
                // Most important first, as the dry run orders them (the
                // pick reads the first victim as the highest priority).
                pods.sort_by(crate::preemption::victims::more_important_first);
                next.push(Candidate {
                    node: info.spec.name.clone(),
                    victims: pods,
                    pdb_violations: usize::try_from(meta.num_pdb_violations).unwrap_or(0),
                });
            }
            current = next;
        }
        Ok(current)
    }
}

/// `pod` with `spec.nodeName` set to `node` (the same object when it
/// already is).
fn bound_copy(pod: Arc<Pod>, node: &str) -> Arc<Pod> {
    if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) {
        return pod;
    }
    let mut copy = (*pod).clone();
    if let Some(spec) = copy.spec.as_mut() {
        spec.node_name = Some(node.to_owned());
    }
    Arc::new(copy)
}
