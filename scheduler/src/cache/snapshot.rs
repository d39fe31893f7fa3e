//! The scheduling cycle's private, consistent view of the cache.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use flotilla_shared::affinity_counts::AffinityCounts;
use flotilla_shared::framework::{SharedLister, has_scoring_affinity};
use flotilla_shared::pod_affinity::RequiredAffinityState;
use flotilla_shared::spread_counts::SpreadCounts;
use flotilla_shared::topology_spread::{DomainCounts, TopologySpreadConstraint};
use flotilla_shared::volumes::{ClaimUsers, VolumeState};
use flotilla_shared::{NodeHot, NodeInfo, PodInfo};
use parking_lot::Mutex;

/// Node name → pods nominated to it (upstream nominator's
/// `nominatedPods`), each list in nomination order.
pub type NominatedPods = HashMap<Arc<str>, Vec<Arc<PodInfo>>>;

/// All nodes as of the last [`super::NodeCache::update_snapshot`], the worker's
/// partition first: `nodes()[..partition_len()]` are the nodes this worker
/// searches first, the rest follow (both parts ordered by name).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    nodes: Vec<Arc<NodeInfo>>,
    /// `NodeHot::of(nodes[i])` for every `i`: the fields the default
    /// Filters and Scores read, contiguous (struct-of-arrays style), so the
    /// cycle's scan streams memory instead of chasing two pointers per node.
    hot: Vec<NodeHot>,
    index: HashMap<Arc<str>, usize>,
    partition_len: usize,
    /// Cache generation this snapshot reflects.
    pub generation: u64,
    /// Cache layout (node set, partition) this snapshot reflects; 0 = none.
    pub layout_generation: u64,
    /// Namespace name → labels.
    pub(super) namespaces: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// Image name → number of nodes reporting it (shared with the cache).
    pub(super) images: Arc<HashMap<Arc<str>, usize>>,
    /// Positions in `nodes` of the nodes with pods that have pod
    /// (anti-)affinity terms, ascending (upstream
    /// `havePodsWithAffinityNodeInfoList`).
    with_affinity: Vec<usize>,
    /// Positions of the nodes with pods that have required anti-affinity
    /// terms, ascending.
    with_required_anti_affinity: Vec<usize>,
    /// Positions of the nodes with pods whose terms can score other pods
    /// ([`has_scoring_affinity`]), ascending.
    with_scoring_affinity: Vec<usize>,
    /// How many nodes have GPU devices.
    gpu_nodes: usize,
    /// Pods nominated to nodes (shared with the cache, copied on write).
    pub(super) nominated: Arc<NominatedPods>,
    /// Hard spread counts per selector, kept current by
    /// [`Snapshot::replace`] and dropped by [`Snapshot::rebuild`].
    spread: Kept<SpreadCounts>,
    /// Required inter-pod (anti-)affinity counts, kept the same way.
    affinity: Kept<AffinityCounts>,
    /// The volume objects (shared with the cache). Empty unless the cache
    /// was given a state ([`super::NodeCache::set_volume_state`]); nothing
    /// feeds one to workers yet, so the volume plugins stay out of the
    /// default profile.
    pub(super) volumes: Arc<VolumeState>,
    /// Which pods use each claim, kept current by [`Snapshot::replace`]
    /// (so preemption's scratch copy, with victims removed, sees them
    /// gone) and recounted by [`Snapshot::rebuild`].
    claim_users: ClaimUsers,
}

/// Counts kept across cycles, behind a lock because the cycle reads the
/// snapshot shared (`&dyn SharedLister`). Only the cycle's thread takes
/// it. A cloned snapshot (preemption's scratch copy) gets its own copy.
#[derive(Debug, Default)]
struct Kept<T>(Mutex<T>);

impl<T: Clone> Clone for Kept<T> {
    fn clone(&self) -> Self {
        Self(Mutex::new(self.0.lock().clone()))
    }
}

/// Keeps position `i` in the ascending list iff `member`.
fn set_membership(list: &mut Vec<usize>, i: usize, member: bool) {
    match list.binary_search(&i) {
        Ok(at) if !member => {
            list.remove(at);
        }
        Err(at) if member => list.insert(at, i),
        _ => {}
    }
}

impl Snapshot {
    pub(super) fn rebuild(
        &mut self,
        nodes: &foldhash::HashMap<Arc<str>, Arc<NodeInfo>>,
        partition: &HashSet<Arc<str>>,
        generation: u64,
    ) {
        let mut owned: Vec<&Arc<NodeInfo>> = Vec::new();
        let mut rest: Vec<&Arc<NodeInfo>> = Vec::new();
        for (name, info) in nodes {
            if partition.contains(name) {
                owned.push(info);
            } else {
                rest.push(info);
            }
        }
        owned.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        rest.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        self.partition_len = owned.len();
        self.nodes = owned.into_iter().chain(rest).cloned().collect();
        self.hot = self.nodes.iter().map(|n| NodeHot::of(n)).collect();
        self.index = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.spec.name.clone(), i))
            .collect();
        self.with_affinity = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].pods_with_affinity.is_empty())
            .collect();
        self.with_required_anti_affinity = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].pods_with_required_anti_affinity.is_empty())
            .collect();
        self.with_scoring_affinity = (0..self.nodes.len())
            .filter(|&i| has_scoring_affinity(&self.nodes[i]))
            .collect();
        self.gpu_nodes = self.nodes.iter().filter(|n| n.gpu.is_some()).count();
        self.spread.0.get_mut().invalidate();
        self.affinity.0.get_mut().invalidate();
        self.claim_users = ClaimUsers::count_nodes(self.nodes.iter().map(|n| &**n));
        self.generation = generation;
    }

    /// Puts `info` in place of the node of the same name (nothing when the
    /// snapshot has no such node). The cache uses it for copy-on-write
    /// updates; preemption's dry run swaps changed nodes into a copy.
    pub(crate) fn replace(&mut self, info: &Arc<NodeInfo>) {
        if let Some(&i) = self.index.get(info.name()) {
            self.spread.0.get_mut().node_replaced(&self.nodes[i], info);
            self.affinity
                .0
                .get_mut()
                .node_replaced(&self.nodes[i], info);
            self.claim_users.node_replaced(&self.nodes[i], info);
            self.gpu_nodes = self.gpu_nodes + usize::from(info.gpu.is_some())
                - usize::from(self.nodes[i].gpu.is_some());
            self.nodes[i] = info.clone();
            self.hot[i] = NodeHot::of(info);
            set_membership(
                &mut self.with_affinity,
                i,
                !info.pods_with_affinity.is_empty(),
            );
            set_membership(
                &mut self.with_required_anti_affinity,
                i,
                !info.pods_with_required_anti_affinity.is_empty(),
            );
            set_membership(
                &mut self.with_scoring_affinity,
                i,
                has_scoring_affinity(info),
            );
        }
    }

    /// Every node, partition first.
    #[must_use]
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// The hot fields of every node, same order as [`Snapshot::nodes`].
    #[must_use]
    pub fn hot(&self) -> &[NodeHot] {
        &self.hot
    }

    /// How many leading entries of [`Snapshot::nodes`] are this worker's partition.
    #[must_use]
    pub fn partition_len(&self) -> usize {
        self.partition_len
    }

    /// Number of nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Position of a node in [`Snapshot::nodes`].
    #[must_use]
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// A node by name.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// Whether any pod is nominated to any node (the cycle's fast path
    /// skips the nominated-pods check when not).
    #[must_use]
    pub fn has_nominated_pods(&self) -> bool {
        !self.nominated.is_empty()
    }

    /// Pods nominated to `node` (upstream `NominatedPodsForNode`), in
    /// nomination order; empty when none.
    #[must_use]
    pub fn nominated_pods_for_node(&self, node: &str) -> &[Arc<PodInfo>] {
        self.nominated.get(node).map_or(&[], Vec::as_slice)
    }
}

impl SharedLister for Snapshot {
    fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        Snapshot::get(self, name)
    }

    fn namespace_labels(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.namespaces.get(namespace)
    }

    /// O(1): the node cache keeps the counts.
    fn image_node_count(&self, image: &str) -> usize {
        self.images.get(image).copied().unwrap_or(0)
    }

    /// From the kept counts (see [`SpreadCounts`]).
    fn spread_domain_counts(
        &self,
        pod: &PodInfo,
        constraints: &[TopologySpreadConstraint],
        count: &dyn Fn() -> Vec<DomainCounts>,
    ) -> Vec<Arc<DomainCounts>> {
        self.spread.0.lock().domain_counts(pod, constraints, count)
    }

    /// From the kept counts (see [`AffinityCounts`]).
    fn required_affinity_state(
        &self,
        pod: &PodInfo,
        count: &dyn Fn() -> RequiredAffinityState,
    ) -> RequiredAffinityState {
        self.affinity
            .0
            .lock()
            .required_state(pod, self, || self.nodes.iter().map(|n| &**n), count)
    }

    fn have_pods_with_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.with_affinity.iter().map(|&i| &self.nodes[i]).collect()
    }

    /// O(1): kept by [`Snapshot::rebuild`] and [`Snapshot::replace`].
    fn has_gpu_nodes(&self) -> bool {
        self.gpu_nodes > 0
    }

    fn volumes(&self) -> Arc<VolumeState> {
        Arc::clone(&self.volumes)
    }

    /// From the kept users (see [`ClaimUsers`]).
    fn claim_used_by_other_pod(&self, namespace: &str, claim: &str, uid: &str) -> bool {
        self.claim_users.used_by_other_pod(namespace, claim, uid)
    }

    fn have_pods_with_scoring_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.with_scoring_affinity
            .iter()
            .map(|&i| &self.nodes[i])
            .collect()
    }

    fn have_pods_with_required_anti_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.with_required_anti_affinity
            .iter()
            .map(|&i| &self.nodes[i])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use flotilla_shared::framework::SharedLister;
    use flotilla_shared::testing::{NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term};

    use super::Snapshot;
    use crate::cache::NodeCache;

    fn names(v: Vec<&Arc<flotilla_shared::NodeInfo>>) -> Vec<String> {
        v.iter().map(|n| n.name().to_owned()).collect()
    }

    #[test]
    fn claim_users_and_volume_objects_follow_the_cache_and_preemptions_scratch_copy() {
        use flotilla_shared::testing::volumes::PvcBuilder;
        use flotilla_shared::volumes::{Lookup, VolumeState};

        let cache = NodeCache::new(Duration::from_secs(30));
        for n in ["n1", "n2"] {
            cache.upsert_node(NodeBuilder::new(n).build_spec());
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        assert!(!snap.claim_used_by_other_pod("default", "data", "uid-x"));
        assert_eq!(snap.volumes().claim("default", "data"), Lookup::Missing);

        cache.add_bound_pod(Arc::new(
            PodBuilder::new("a")
                .node_name("n1")
                .pvc_volume("v", "data")
                .build_info(),
        ));
        cache.update_snapshot(&mut snap);
        assert!(snap.claim_used_by_other_pod("default", "data", "uid-x"));
        assert!(!snap.claim_used_by_other_pod("default", "data", "uid-a"));

        // Preemption's dry run: a copy with the victim removed from n1.
        let mut scratch = snap.clone();
        let mut n1 = flotilla_shared::NodeInfo::clone(scratch.get("n1").unwrap());
        assert!(n1.remove_pod("uid-a").is_some());
        scratch.replace(&Arc::new(n1));
        assert!(!scratch.claim_used_by_other_pod("default", "data", "uid-x"));
        assert!(
            snap.claim_used_by_other_pod("default", "data", "uid-x"),
            "the cycle's snapshot keeps its view"
        );

        assert!(cache.remove_pod("uid-a"));
        let mut objects = VolumeState::default();
        objects
            .apply_claim(&PvcBuilder::new("data").build())
            .unwrap();
        cache.set_volume_state(Arc::new(objects));
        cache.update_snapshot(&mut snap);
        assert!(!snap.claim_used_by_other_pod("default", "data", "uid-x"));
        assert!(snap.volumes().claim("default", "data").found().is_some());
    }

    #[test]
    fn gpu_node_count_follows_node_updates() {
        let gpu = |name: &str, count: &str| {
            NodeBuilder::new(name)
                .cpu("8")
                .resource("nvidia.com/gpu", count)
                .build_spec()
        };
        let cache = NodeCache::new(Duration::from_secs(30));
        for n in ["n1", "n2"] {
            cache.upsert_node(NodeBuilder::new(n).cpu("8").build_spec());
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        assert!(!snap.has_gpu_nodes());
        // A node gains GPUs (an in-place update: replace, not rebuild).
        cache.upsert_node(gpu("n2", "4"));
        cache.update_snapshot(&mut snap);
        assert!(snap.has_gpu_nodes());
        cache.upsert_node(gpu("n1", "2"));
        cache.upsert_node(NodeBuilder::new("n2").cpu("8").build_spec());
        cache.update_snapshot(&mut snap);
        assert!(snap.has_gpu_nodes(), "n1 still has GPUs");
        cache.upsert_node(NodeBuilder::new("n1").cpu("8").build_spec());
        cache.update_snapshot(&mut snap);
        assert!(!snap.has_gpu_nodes());
        // A new node (a rebuild) with GPUs.
        cache.upsert_node(gpu("n0", "1"));
        cache.update_snapshot(&mut snap);
        assert!(snap.has_gpu_nodes());
        assert_eq!(snap.gpu_nodes, 1);
    }

    #[test]
    fn nodes_with_affinity_pods_follow_incremental_updates() {
        let cache = NodeCache::new(Duration::from_secs(30));
        for n in ["n1", "n2", "n3"] {
            cache.upsert_node(NodeBuilder::new(n).build_spec());
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        assert!(snap.have_pods_with_affinity().is_empty());
        let anti = |name: &str, node: &str| {
            Arc::new(
                PodBuilder::new(name)
                    .node_name(node)
                    .pod_affinity(
                        PodAffinityKind::RequiredAnti,
                        pod_affinity_term("app", "In", &["web"], "zone"),
                    )
                    .build_info(),
            )
        };
        let preferred = Arc::new(
            PodBuilder::new("pref")
                .node_name("n1")
                .pod_affinity(
                    PodAffinityKind::Preferred(1),
                    pod_affinity_term("app", "In", &["web"], "zone"),
                )
                .build_info(),
        );
        cache.add_bound_pod(anti("a3", "n3"));
        cache.add_bound_pod(preferred);
        cache.add_bound_pod(Arc::new(
            PodBuilder::new("plain").node_name("n2").build_info(),
        ));
        cache.update_snapshot(&mut snap);
        assert_eq!(names(snap.have_pods_with_affinity()), ["n1", "n3"]);
        assert_eq!(names(snap.have_pods_with_required_anti_affinity()), ["n3"]);
        // Only the preferred term can score another pod.
        assert_eq!(names(snap.have_pods_with_scoring_affinity()), ["n1"]);
        // The listed NodeInfo is the current one, not a stale copy.
        assert_eq!(snap.have_pods_with_affinity()[1].pods.len(), 1);
        cache.add_bound_pod(anti("a3b", "n3"));
        cache.update_snapshot(&mut snap);
        assert_eq!(
            snap.have_pods_with_required_anti_affinity()[0].pods.len(),
            2
        );

        assert!(cache.remove_pod("uid-a3"));
        assert!(cache.remove_pod("uid-a3b"));
        assert!(cache.remove_pod("uid-pref"));
        cache.add_bound_pod(anti("a2", "n2"));
        cache.update_snapshot(&mut snap);
        assert_eq!(names(snap.have_pods_with_affinity()), ["n2"]);
        assert_eq!(names(snap.have_pods_with_required_anti_affinity()), ["n2"]);
        assert!(snap.have_pods_with_scoring_affinity().is_empty());

        // A re-layout (new node) rebuilds the lists with the new positions.
        cache.upsert_node(NodeBuilder::new("n0").build_spec());
        cache.update_snapshot(&mut snap);
        assert_eq!(names(snap.have_pods_with_affinity()), ["n2"]);
        // Same answer as the trait's default (filtering every node).
        let all: Vec<String> = snap
            .nodes()
            .iter()
            .filter(|n| !n.pods_with_affinity.is_empty())
            .map(|n| n.name().to_owned())
            .collect();
        assert_eq!(all, ["n2"]);
    }

    /// The kept spread and affinity counts answer as a full recount over the snapshot,
    /// whatever the cache did in between (assume, forget, bind, remove,
    /// relabel, new node), including in a preemption-style scratch copy.
    mod spread {
        use std::sync::Arc;
        use std::time::Duration;

        use flotilla_shared::framework::SharedLister;
        use flotilla_shared::pod_affinity::RequiredAffinityState;
        use flotilla_shared::testing::{
            NodeBuilder, PodAffinityKind, PodBuilder, hard_spread, pod_affinity_term,
        };
        use flotilla_shared::topology_spread::{count_domains, hard_constraints};
        use proptest::prelude::*;

        use super::Snapshot;
        use crate::cache::NodeCache;

        fn spread_pod(name: &str, app: &str, node: Option<&str>) -> flotilla_shared::PodInfo {
            let mut b = PodBuilder::new(name).label("app", app);
            if app == "db" {
                // Some placed pods with required anti-affinity, for the
                // kept affinity counts.
                b = b.pod_affinity(
                    PodAffinityKind::RequiredAnti,
                    pod_affinity_term("app", "In", &["web"], "zone"),
                );
            }
            b = b.spread_constraint(hard_spread("zone", 1, "web"));
            if let Some(n) = node {
                b = b.node_name(n);
            }
            b.build_info()
        }

        fn node(i: usize, zone: usize) -> flotilla_shared::NodeSpec {
            NodeBuilder::new(&format!("n{i}"))
                .label("zone", &format!("z{zone}"))
                .pods(100)
                .build_spec()
        }

        fn assert_counts_fresh(snap: &Snapshot) -> Result<(), TestCaseError> {
            let probe = spread_pod("probe", "web", None);
            let constraints = hard_constraints(&probe);
            let want = count_domains(&probe, &constraints, snap.nodes().iter().map(|n| &**n));
            let got = snap.spread_domain_counts(&probe, &constraints, &|| {
                count_domains(&probe, &constraints, snap.nodes().iter().map(|n| &**n))
            });
            let got: Vec<_> = got.iter().map(|c| (**c).clone()).collect();
            prop_assert_eq!(got, want);
            // An incoming pod avoiding db pods, matched by the db pods'
            // own anti-affinity.
            let probe = PodBuilder::new("probe")
                .label("app", "web")
                .pod_affinity(
                    PodAffinityKind::RequiredAnti,
                    pod_affinity_term("app", "In", &["db"], "zone"),
                )
                .build_info();
            let fresh =
                || RequiredAffinityState::of_nodes(&probe, snap.nodes().iter().map(|n| &**n), snap);
            let got = snap.required_affinity_state(&probe, &fresh);
            prop_assert_eq!(got, fresh());
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            #[test]
            fn kept_counts_match_a_recount(
                ops in proptest::collection::vec((0u8..7, 0usize..5, any::<bool>()), 1..50),
            ) {
                let cache = NodeCache::new(Duration::from_secs(30));
                for i in 0..4 {
                    cache.upsert_node(node(i, i % 2));
                }
                let mut snap = Snapshot::default();
                cache.update_snapshot(&mut snap);
                let mut live: Vec<String> = Vec::new();
                let mut assumed: Vec<String> = Vec::new();
                for (serial, (op, i, web)) in ops.into_iter().enumerate() {
                    let app = if web { "web" } else { "db" };
                    let name = format!("p{serial}");
                    let n = format!("n{}", i % 4);
                    match op {
                        0 => {
                            cache.add_bound_pod(Arc::new(spread_pod(&name, app, Some(&n))));
                            live.push(format!("uid-{name}"));
                        }
                        1 => {
                            if cache.assume(Arc::new(spread_pod(&name, app, None)), &n).is_ok() {
                                assumed.push(format!("uid-{name}"));
                            }
                        }
                        2 => {
                            if let Some(uid) = assumed.pop() {
                                cache.forget(&uid);
                            }
                        }
                        3 => {
                            if !live.is_empty() {
                                let uid = live.remove(i % live.len());
                                cache.remove_pod(&uid);
                            }
                        }
                        4 => {
                            cache.upsert_node(node(i % 4, usize::from(web)));
                        }
                        5 => {
                            cache.upsert_node(node(4 + i, i % 2));
                        }
                        _ => {
                            // Preemption's dry run: a scratch copy changes,
                            // the snapshot must not.
                            let mut scratch = snap.clone();
                            if let Some(info) = snap.get(&n) {
                                let mut changed = (**info).clone();
                                if let Some(p) = changed.pods.first().map(|p| p.uid.clone()) {
                                    changed.remove_pod(&p);
                                }
                                scratch.replace(&Arc::new(changed));
                            }
                            assert_counts_fresh(&scratch)?;
                        }
                    }
                    cache.update_snapshot(&mut snap);
                    assert_counts_fresh(&snap)?;
                }
            }
        }
    }
}
