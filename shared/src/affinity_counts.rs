//! Counts kept across cycles for required inter-pod (anti-)affinity, so
//! InterPodAffinity's PreFilter does not walk every pod of every node each
//! cycle (upstream does, in `getExistingAntiAffinityCounts` and
//! `getIncomingAffinityAntiAffinityCounts`).
//!
//! Two kinds of entries, both exactly what
//! [`RequiredAffinityState::count_nodes`] over every node would add:
//! - **incoming**: for a list of terms of an incoming pod (its required
//!   affinity terms together, or one required anti-affinity term), the
//!   pods matching all of them, per (topology key, value). Made on first
//!   use by one full pass; only for terms without a `namespaceSelector`
//!   (which would depend on Namespace labels), others are counted in full.
//! - **existing**: every placed pod's required anti-affinity terms, grouped
//!   by term, per (topology key, value) of the pod's node. Made on first
//!   use; a cycle merges the groups whose term matches the incoming pod.
//!
//! Fed by [`AffinityCounts::node_replaced`]; forgotten by
//! [`AffinityCounts::invalidate`] (a node added or removed, labels
//! changed).

use std::sync::Arc;

use crate::node_info::NodeInfo;
use crate::pod_affinity::{AffinityTerm, NamespaceLabels, RequiredAffinityState, TopologyCounts};
use crate::pod_info::PodInfo;

/// Past this many entries of a kind the index starts over (each entry
/// costs selector matches per changed node).
const MAX_ENTRIES: usize = 64;

#[derive(Debug, Clone)]
struct Incoming {
    terms: Vec<AffinityTerm>,
    counts: TopologyCounts,
}

impl Incoming {
    /// Adds `by` for each of `node`'s pods matching every term.
    fn count(&mut self, node: &NodeInfo, by: i64) {
        let n = node
            .pods
            .iter()
            .filter(|p| self.terms.iter().all(|t| t.matches_pod(p, &NoNamespaces)))
            .count();
        let n = i64::try_from(n).unwrap_or(i64::MAX) * by;
        for t in &self.terms {
            if let Some(value) = node.spec.labels.get(&t.topology_key) {
                self.counts.adjust(&t.topology_key, value, n);
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Existing {
    term: AffinityTerm,
    counts: TopologyCounts,
}

/// Terms without a `namespaceSelector` never read Namespace labels.
struct NoNamespaces;

impl NamespaceLabels for NoNamespaces {
    fn labels_of(&self, _namespace: &str) -> Option<&std::collections::BTreeMap<String, String>> {
        None
    }
}

/// The index (see the module docs). Feed it every change of the node view
/// it is used with.
#[derive(Debug, Clone, Default)]
pub struct AffinityCounts {
    incoming: Vec<Incoming>,
    /// `None` until first use.
    existing: Option<Vec<Existing>>,
}

impl AffinityCounts {
    /// Forgets everything: call when a node is added or removed or its
    /// labels change.
    pub fn invalidate(&mut self) {
        self.incoming.clear();
        self.existing = None;
    }

    /// Counts `pod`, just placed on `node` (the coordinator's view is fed
    /// pod by pod).
    pub fn pod_placed(&mut self, pod: &PodInfo, node: &NodeInfo) {
        self.pod_moved(pod, node, 1);
    }

    /// Uncounts `pod`, just removed from `node`.
    pub fn pod_removed(&mut self, pod: &PodInfo, node: &NodeInfo) {
        self.pod_moved(pod, node, -1);
    }

    fn pod_moved(&mut self, pod: &PodInfo, node: &NodeInfo, by: i64) {
        for e in &mut self.incoming {
            if e.terms.iter().all(|t| t.matches_pod(pod, &NoNamespaces)) {
                for t in &e.terms {
                    if let Some(value) = node.spec.labels.get(&t.topology_key) {
                        e.counts.adjust(&t.topology_key, value, by);
                    }
                }
            }
        }
        if let Some(groups) = &mut self.existing {
            add_existing_pod(groups, pod, node, by);
            if groups.len() > MAX_ENTRIES {
                self.existing = None;
            }
        }
    }

    /// `old` was replaced by `new` (same node, pods added or removed):
    /// keeps every entry current, or forgets them all when the labels
    /// changed. O(entries × pods on the node).
    pub fn node_replaced(&mut self, old: &NodeInfo, new: &NodeInfo) {
        if !Arc::ptr_eq(&old.spec, &new.spec) && old.spec.labels != new.spec.labels {
            self.invalidate();
            return;
        }
        for e in &mut self.incoming {
            e.count(old, -1);
            e.count(new, 1);
        }
        if let Some(groups) = &mut self.existing {
            add_existing(groups, old, -1);
            add_existing(groups, new, 1);
            if groups.len() > MAX_ENTRIES {
                self.existing = None;
            }
        }
    }

    /// [`RequiredAffinityState`] for `pod` over the view, as a fresh
    /// [`RequiredAffinityState::count_nodes`] over every node would give
    /// it. `nodes` lists the view (walked when an entry is made); `fresh`
    /// is that full count, used when a term of `pod` has a
    /// `namespaceSelector`.
    pub fn required_state<'a, N, I>(
        &mut self,
        pod: &PodInfo,
        ns: &N,
        nodes: impl Fn() -> I,
        fresh: impl FnOnce() -> RequiredAffinityState,
    ) -> RequiredAffinityState
    where
        N: NamespaceLabels + ?Sized,
        I: Iterator<Item = &'a NodeInfo>,
    {
        let own = pod
            .pod_affinity
            .as_deref()
            .filter(|a| a.has_required_terms());
        if own.is_some_and(|a| {
            a.required_affinity
                .iter()
                .chain(&a.required_anti_affinity)
                .any(|t| t.namespace_selector.is_some())
        }) {
            return fresh();
        }
        let mut state = RequiredAffinityState::new(pod, ns);
        let groups = self.existing.get_or_insert_with(|| {
            let mut groups = Vec::new();
            for node in nodes() {
                add_existing(&mut groups, node, 1);
            }
            groups
        });
        for g in groups.iter() {
            if !g.counts.is_empty() && g.term.matches_pod(pod, ns) {
                state.existing_anti_affinity.merge(g.counts.clone());
            }
        }
        let Some(own) = own else {
            return state;
        };
        if self.incoming.len() + 1 + own.required_anti_affinity.len() > MAX_ENTRIES {
            self.incoming.clear();
        }
        if !own.required_affinity.is_empty() {
            state.affinity = self.incoming_counts(&own.required_affinity, &nodes).clone();
        }
        for t in &own.required_anti_affinity {
            let counts = self.incoming_counts(std::slice::from_ref(t), &nodes);
            state.anti_affinity.merge(counts.clone());
        }
        state
    }

    /// The entry for `terms`, made by a full pass if missing.
    fn incoming_counts<'a, I>(
        &mut self,
        terms: &[AffinityTerm],
        nodes: &impl Fn() -> I,
    ) -> &TopologyCounts
    where
        I: Iterator<Item = &'a NodeInfo>,
    {
        let at = match self.incoming.iter().position(|e| e.terms == terms) {
            Some(at) => at,
            None => {
                let mut e = Incoming {
                    terms: terms.to_vec(),
                    counts: TopologyCounts::default(),
                };
                for node in nodes() {
                    e.count(node, 1);
                }
                self.incoming.push(e);
                self.incoming.len() - 1
            }
        };
        &self.incoming[at].counts
    }
}

/// Adds `by` per required anti-affinity term of `node`'s pods to the
/// term's group (made if missing).
fn add_existing(groups: &mut Vec<Existing>, node: &NodeInfo, by: i64) {
    for p in &node.pods_with_required_anti_affinity {
        add_existing_pod(groups, p, node, by);
    }
}

/// [`add_existing`] for one pod of `node`.
fn add_existing_pod(groups: &mut Vec<Existing>, p: &PodInfo, node: &NodeInfo, by: i64) {
    let Some(a) = p.pod_affinity.as_deref() else {
        return;
    };
    for t in &a.required_anti_affinity {
        let Some(value) = node.spec.labels.get(&t.topology_key) else {
            continue;
        };
        let at = match groups.iter().position(|g| g.term == *t) {
            Some(at) => at,
            None => {
                groups.push(Existing {
                    term: t.clone(),
                    counts: TopologyCounts::default(),
                });
                groups.len() - 1
            }
        };
        groups[at].counts.adjust(&t.topology_key, value, by);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;

    use super::*;
    use crate::testing::{NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term};

    const APPS: [&str; 2] = ["web", "db"];
    const KEYS: [&str; 2] = ["zone", "kubernetes.io/hostname"];

    /// A pod of `app` with a required anti-affinity (`anti`) to `avoid`
    /// over `KEYS[key]`, and, if `affine`, a required affinity to app web
    /// over zones.
    fn pod(name: &str, app: usize, anti: Option<(usize, usize)>, affine: bool) -> PodInfo {
        let mut b = PodBuilder::new(name).label("app", APPS[app]);
        if let Some((avoid, key)) = anti {
            b = b.pod_affinity(
                PodAffinityKind::RequiredAnti,
                pod_affinity_term("app", "In", &[APPS[avoid]], KEYS[key]),
            );
        }
        if affine {
            b = b.pod_affinity(
                PodAffinityKind::Required,
                pod_affinity_term("app", "In", &["web"], "zone"),
            );
        }
        b.build_info()
    }

    fn node(i: usize, zone: Option<usize>) -> NodeInfo {
        let name = format!("n{i}");
        let mut b = NodeBuilder::new(&name).pods(100).label(KEYS[1], &name);
        if let Some(z) = zone {
            b = b.label("zone", &format!("z{z}"));
        }
        NodeInfo::new(Arc::new(b.build_spec()))
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Place (app, anti-affinity (avoid, key), affine) on node.
        Place(usize, Option<(usize, usize)>, bool, usize),
        Remove(usize),
        Relabel(usize, Option<usize>),
        Check(usize, Option<(usize, usize)>, bool),
    }

    fn anti() -> impl Strategy<Value = Option<(usize, usize)>> {
        proptest::option::of((0usize..2, 0usize..2))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..2, anti(), any::<bool>(), 0usize..5)
                .prop_map(|(a, t, f, i)| Op::Place(a, t, f, i)),
            1 => (0usize..16).prop_map(Op::Remove),
            1 => (0usize..5, proptest::option::of(0usize..3)).prop_map(|(i, z)| Op::Relabel(i, z)),
            4 => (0usize..2, anti(), any::<bool>()).prop_map(|(a, t, f)| Op::Check(a, t, f)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever happens to the view, the kept counts give the state a
        /// fresh count over every node gives.
        #[test]
        fn kept_counts_give_the_fresh_state(ops in proptest::collection::vec(op(), 1..60)) {
            let no_ns: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            let mut nodes: HashMap<String, NodeInfo> = (0..5)
                .map(|i| (format!("n{i}"), node(i, (i < 4).then_some(i % 2))))
                .collect();
            let mut index = AffinityCounts::default();
            // The same view fed pod by pod, as the coordinator feeds it
            // (invalidating on relabels).
            let mut by_pod = AffinityCounts::default();
            let mut placed: Vec<(String, String)> = Vec::new();
            for (serial, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Place(app, t, f, i) => {
                        let p = Arc::new(pod(&format!("p{serial}"), app, t, f));
                        let name = format!("n{i}");
                        let info = nodes.get_mut(&name).unwrap();
                        let before = info.clone();
                        prop_assert!(info.add_pod(p.clone()));
                        index.node_replaced(&before, info);
                        by_pod.pod_placed(&p, info);
                        placed.push((p.uid.to_string(), name));
                    }
                    Op::Remove(k) if !placed.is_empty() => {
                        let (uid, name) = placed.remove(k % placed.len());
                        let info = nodes.get_mut(&name).unwrap();
                        let before = info.clone();
                        let gone = info.remove_pod(&uid).unwrap();
                        index.node_replaced(&before, info);
                        by_pod.pod_removed(&gone, info);
                    }
                    Op::Remove(_) => {}
                    Op::Relabel(i, zone) => {
                        let name = format!("n{i}");
                        let info = nodes.get_mut(&name).unwrap();
                        let before = info.clone();
                        info.set_spec(node(i, zone).spec.clone());
                        index.node_replaced(&before, info);
                        if before.spec.labels != info.spec.labels {
                            by_pod.invalidate();
                        }
                    }
                    Op::Check(app, t, f) => {
                        let p = pod("incoming", app, t, f);
                        let want = RequiredAffinityState::of_nodes(&p, nodes.values(), &no_ns);
                        let got = index.required_state(&p, &no_ns, || nodes.values(), || {
                            unreachable!("no namespaceSelector here")
                        });
                        prop_assert_eq!(&got, &want);
                        let got = by_pod.required_state(&p, &no_ns, || nodes.values(), || {
                            unreachable!("no namespaceSelector here")
                        });
                        prop_assert_eq!(got, want);
                    }
                }
            }
        }
    }
}
