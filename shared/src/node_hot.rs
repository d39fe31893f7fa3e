//! The hot fields of a node: what the default Filters and Scores read,
//! copied out of its [`NodeInfo`] into one small `Copy` record, so a
//! scheduling cycle that scans hundreds of nodes streams through one
//! contiguous array (the snapshot keeps one [`NodeHot`] per node, in node
//! order) instead of chasing `Arc<NodeInfo>` → `Arc<NodeSpec>` per node.
//!
//! A plugin opts in through [`crate::framework::FilterPlugin::hot_filter`]
//! (a condition under which its Filter surely passes) and
//! [`crate::framework::ScorePlugin::score_hot`] (its score from these
//! fields). Anything the record cannot answer falls back to the plugin's
//! ordinary `filter` / `score` on the full `NodeInfo`, so the fast path
//! never changes a decision, only how fast the common case is reached.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use crate::node_info::NodeInfo;
use crate::taints::{NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE};
use crate::topology_spread::LABEL_TOPOLOGY_ZONE;

/// A node's hot fields (units as in [`crate::Resources`]: millicores,
/// bytes, pod slots). 88 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeHot {
    /// `status.allocatable` cpu, millicores.
    pub allocatable_milli_cpu: i64,
    /// Allocatable memory, bytes.
    pub allocatable_memory: i64,
    /// Allocatable ephemeral storage, bytes.
    pub allocatable_ephemeral_storage: i64,
    /// Pod slots.
    pub allowed_pod_number: i64,
    /// Sum of the pods' cpu requests, millicores.
    pub requested_milli_cpu: i64,
    /// Sum of the pods' memory requests, bytes.
    pub requested_memory: i64,
    /// Sum of the pods' ephemeral-storage requests, bytes.
    pub requested_ephemeral_storage: i64,
    /// Pods on the node.
    pub pod_count: i64,
    /// Sum of the non-zero cpu requests (scoring), millicores.
    pub non_zero_milli_cpu: i64,
    /// Sum of the non-zero memory requests (scoring), bytes.
    pub non_zero_memory: i64,
    /// [`HotFlags`] bits.
    pub flags: HotFlags,
    /// The node's `topology.kubernetes.io/zone` label as a [`zone_id`];
    /// 0 when it has none.
    pub zone: u16,
}

/// Zone ids a [`HotFilter`] can name (`1..=HOT_ZONES`); nodes of zones
/// beyond take the full Filter chain.
pub const HOT_ZONES: u16 = 64;

fn zone_ids() -> &'static RwLock<HashMap<String, u16>> {
    static IDS: OnceLock<RwLock<HashMap<String, u16>>> = OnceLock::new();
    IDS.get_or_init(RwLock::default)
}

/// The process-wide id of zone label value `value`: 1 for the first value
/// seen, 2 for the next, ... (saturating at `u16::MAX`). Ids never change,
/// so records and conditions made at different times agree. Zones are few
/// (tens per cluster); every value ever seen is kept.
#[must_use]
pub fn zone_id(value: &str) -> u16 {
    if let Some(id) = known_zone_id(value) {
        return id;
    }
    let mut ids = zone_ids()
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let next = u16::try_from(ids.len() + 1).unwrap_or(u16::MAX);
    *ids.entry(value.to_owned()).or_insert(next)
}

/// The id of `value` if [`zone_id`] has handed one out.
fn known_zone_id(value: &str) -> Option<u16> {
    zone_ids()
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(value)
        .copied()
}

/// Yes/no facts about a node that decide whether the fast path applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HotFlags(u8);

impl HotFlags {
    /// None set.
    pub const NONE: HotFlags = HotFlags(0);
    /// `spec.unschedulable` (cordoned).
    pub const UNSCHEDULABLE: HotFlags = HotFlags(1);
    /// Some taint has effect `NoSchedule` or `NoExecute`.
    pub const NO_SCHEDULE_TAINT: HotFlags = HotFlags(1 << 1);
    /// Some taint has effect `PreferNoSchedule`.
    pub const PREFER_NO_SCHEDULE_TAINT: HotFlags = HotFlags(1 << 2);
    /// The node reports images in `status.images`.
    pub const IMAGES: HotFlags = HotFlags(1 << 3);

    /// Both sets of bits.
    #[must_use]
    pub const fn union(self, other: HotFlags) -> HotFlags {
        HotFlags(self.0 | other.0)
    }

    /// Whether any bit of `other` is set here.
    #[must_use]
    pub const fn intersects(self, other: HotFlags) -> bool {
        self.0 & other.0 != 0
    }
}

impl NodeHot {
    /// The hot fields of `node`.
    #[must_use]
    pub fn of(node: &NodeInfo) -> NodeHot {
        let spec = &*node.spec;
        let mut flags = HotFlags::NONE;
        if spec.unschedulable {
            flags = flags.union(HotFlags::UNSCHEDULABLE);
        }
        for t in &spec.taints {
            if t.effect == NO_SCHEDULE || t.effect == NO_EXECUTE {
                flags = flags.union(HotFlags::NO_SCHEDULE_TAINT);
            } else if t.effect == PREFER_NO_SCHEDULE {
                flags = flags.union(HotFlags::PREFER_NO_SCHEDULE_TAINT);
            }
        }
        if !spec.images.is_empty() {
            flags = flags.union(HotFlags::IMAGES);
        }
        let zone = spec
            .labels
            .get(LABEL_TOPOLOGY_ZONE)
            .map_or(0, |v| zone_id(v));
        NodeHot {
            allocatable_milli_cpu: spec.allocatable.milli_cpu,
            allocatable_memory: spec.allocatable.memory,
            allocatable_ephemeral_storage: spec.allocatable.ephemeral_storage,
            allowed_pod_number: spec.allocatable.allowed_pod_number,
            requested_milli_cpu: node.requested.milli_cpu,
            requested_memory: node.requested.memory,
            requested_ephemeral_storage: node.requested.ephemeral_storage,
            pod_count: i64::try_from(node.pod_count()).unwrap_or(i64::MAX),
            non_zero_milli_cpu: node.non_zero_milli_cpu,
            non_zero_memory: node.non_zero_memory,
            flags,
            zone,
        }
    }
}

/// The pod's cpu / memory / ephemeral-storage requests, for
/// [`HotFilter::fit`] (millicores, bytes, bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HotRequests {
    /// Millicores.
    pub milli_cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
}

/// A condition on a node's [`NodeHot`] under which a Filter surely passes
/// a pod (see [`crate::framework::FilterPlugin::hot_filter`]). The
/// framework ANDs the conditions of every Filter that runs; a node meeting
/// them all is feasible without any `filter` call, any other node gets the
/// full Filter chain (which also gives the reasons).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HotFilter {
    /// Flags that must all be clear on the node.
    pub clear: HotFlags,
    /// Requests that must fit with one free pod slot, by upstream
    /// NodeResourcesFit's rule: a zero request is not checked, a positive
    /// one must be at most allocatable minus requested.
    pub fit: Option<HotRequests>,
    /// Zones a node must not be in: bit `id - 1` for [`zone_id`] `id`.
    /// When set, the node must also have a zone of id `1..=HOT_ZONES`.
    pub zones_blocked: Option<u64>,
}

impl HotFilter {
    /// Always met.
    pub const ANY: HotFilter = HotFilter {
        clear: HotFlags::NONE,
        fit: None,
        zones_blocked: None,
    };

    /// Met when both `self` and `other` are.
    #[must_use]
    pub fn and(self, other: HotFilter) -> HotFilter {
        let fit = match (self.fit, other.fit) {
            (Some(a), Some(b)) => Some(HotRequests {
                milli_cpu: a.milli_cpu.max(b.milli_cpu),
                memory: a.memory.max(b.memory),
                ephemeral_storage: a.ephemeral_storage.max(b.ephemeral_storage),
            }),
            (a, b) => a.or(b),
        };
        let zones_blocked = match (self.zones_blocked, other.zones_blocked) {
            (Some(a), Some(b)) => Some(a | b),
            (a, b) => a.or(b),
        };
        HotFilter {
            clear: self.clear.union(other.clear),
            fit,
            zones_blocked,
        }
    }

    /// Whether `node` meets the condition.
    #[must_use]
    #[inline]
    pub fn passes(&self, node: &NodeHot) -> bool {
        if node.flags.intersects(self.clear) {
            return false;
        }
        if let Some(blocked) = self.zones_blocked
            && (!(1..=HOT_ZONES).contains(&node.zone) || blocked & (1 << (node.zone - 1)) != 0)
        {
            return false;
        }
        let Some(r) = &self.fit else {
            return true;
        };
        node.pod_count < node.allowed_pod_number
            && (r.milli_cpu == 0
                || r.milli_cpu <= node.allocatable_milli_cpu - node.requested_milli_cpu)
            && (r.memory == 0 || r.memory <= node.allocatable_memory - node.requested_memory)
            && (r.ephemeral_storage == 0
                || r.ephemeral_storage
                    <= node.allocatable_ephemeral_storage - node.requested_ephemeral_storage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use std::sync::Arc;

    #[test]
    fn hot_fields_mirror_the_node_info() {
        let spec = NodeBuilder::new("n1")
            .cpu("4")
            .memory("8Gi")
            .pods(3)
            .taint("a", "", NO_EXECUTE)
            .taint("b", "", PREFER_NO_SCHEDULE)
            .build_spec();
        let mut info = NodeInfo::new(Arc::new(spec));
        info.add_pod(Arc::new(
            PodBuilder::new("p").cpu("500m").memory("1Gi").build_info(),
        ));
        let hot = NodeHot::of(&info);
        assert_eq!(hot.allocatable_milli_cpu, 4000);
        assert_eq!(hot.allocatable_memory, 8 << 30);
        assert_eq!(hot.allowed_pod_number, 3);
        assert_eq!(hot.requested_milli_cpu, 500);
        assert_eq!(hot.requested_memory, 1 << 30);
        assert_eq!(hot.pod_count, 1);
        assert_eq!(hot.non_zero_milli_cpu, 500);
        assert!(hot.flags.intersects(HotFlags::NO_SCHEDULE_TAINT));
        assert!(hot.flags.intersects(HotFlags::PREFER_NO_SCHEDULE_TAINT));
        assert!(!hot.flags.intersects(HotFlags::UNSCHEDULABLE));
        assert!(!hot.flags.intersects(HotFlags::IMAGES));
    }

    #[test]
    fn the_fit_condition_follows_node_resources_fit() {
        let node = NodeHot {
            allocatable_milli_cpu: 1000,
            allocatable_memory: 100,
            allowed_pod_number: 2,
            requested_milli_cpu: 900,
            requested_memory: 50,
            pod_count: 1,
            ..NodeHot::default()
        };
        let fit = |milli_cpu, memory, ephemeral_storage| HotFilter {
            fit: Some(HotRequests {
                milli_cpu,
                memory,
                ephemeral_storage,
            }),
            ..HotFilter::ANY
        };
        assert!(fit(100, 50, 0).passes(&node), "exactly full fits");
        assert!(!fit(101, 0, 0).passes(&node));
        assert!(!fit(0, 51, 0).passes(&node));
        assert!(
            !fit(0, 0, 1).passes(&node),
            "no ephemeral storage allocatable"
        );
        assert!(fit(0, 0, 0).passes(&node), "zero requests check only slots");
        let full = NodeHot {
            pod_count: 2,
            ..node
        };
        assert!(!fit(0, 0, 0).passes(&full), "no pod slot left");
        assert!(HotFilter::ANY.passes(&full));
        let cordoned = NodeHot {
            flags: HotFlags::UNSCHEDULABLE,
            ..node
        };
        let clear = HotFilter {
            clear: HotFlags::UNSCHEDULABLE,
            ..HotFilter::ANY
        };
        assert!(!clear.passes(&cordoned));
        assert!(clear.and(fit(100, 0, 0)).passes(&node));
        assert!(!clear.and(fit(101, 0, 0)).passes(&node));
    }

    #[test]
    fn the_zone_condition_blocks_listed_zones_and_unlabelled_nodes() {
        let a = zone_id("hot-test-zone-a");
        let b = zone_id("hot-test-zone-b");
        assert_ne!(a, b);
        assert_eq!(zone_id("hot-test-zone-a"), a, "ids are stable");
        assert_eq!(known_zone_id("hot-test-zone-a"), Some(a));
        assert_eq!(known_zone_id("hot-test-zone-never"), None);
        let spec = NodeBuilder::new("n1")
            .label(LABEL_TOPOLOGY_ZONE, "hot-test-zone-b")
            .build_spec();
        let in_b = NodeHot::of(&NodeInfo::new(Arc::new(spec)));
        assert_eq!(in_b.zone, b);
        let in_a = NodeHot { zone: a, ..in_b };
        let unlabelled = NodeHot { zone: 0, ..in_b };
        let beyond = NodeHot {
            zone: HOT_ZONES + 1,
            ..in_b
        };
        let block_a = HotFilter {
            zones_blocked: Some(1 << (a - 1)),
            ..HotFilter::ANY
        };
        assert!(block_a.passes(&in_b));
        assert!(!block_a.passes(&in_a));
        assert!(!block_a.passes(&unlabelled), "no zone: full chain");
        assert!(!block_a.passes(&beyond), "zone beyond the mask: full chain");
        assert!(HotFilter::ANY.passes(&unlabelled));
        let block_b = HotFilter {
            zones_blocked: Some(1 << (b - 1)),
            ..HotFilter::ANY
        };
        let both = block_a.and(block_b);
        assert!(!both.passes(&in_a) && !both.passes(&in_b));
        assert!(block_a.and(HotFilter::ANY).passes(&in_b));
    }
}
