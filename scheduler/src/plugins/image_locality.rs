//! `ImageLocality`: favour nodes that already hold the pod's container
//! images, weighted by image size and damped for images on many nodes
//! (upstream `pkg/scheduler/framework/plugins/imagelocality/image_locality.go`).
//!
//! # Score
//! Upstream facts this follows:
//! - the pod's images are those of its init containers and app containers,
//!   one per container, normalized by
//!   [`flotilla_shared::images::normalized_image_name`] (`:latest` appended
//!   when there is no tag or digest); node names are used as the node
//!   reports them in `status.images`;
//! - per container whose image the node has: `size × spread`, where
//!   `spread = nodes having the image / all nodes in the snapshot` (the
//!   "node heating" damper: an image on every node adds its full size
//!   everywhere, so it does not pull pods together), truncated to whole
//!   bytes; a node's score sums these;
//! - the sum is clamped to `[23 MiB, 1000 MiB × containers]` and scaled:
//!   `100 × (sum - 23 MiB) / (1000 MiB × containers - 23 MiB)`, integer
//!   math. No NormalizeScore.
//!
//! One deviation: upstream takes an image's size from the first node that
//! reported it (a cluster-wide table); here each node's own reported size
//! is used, which differs only if nodes report different sizes for one name.
//!
//! # Per-cycle state
//! Upstream's ImageLocality has no PreScore point (a configuration enabling
//! it at `preScore` is refused, as upstream refuses it); what its Score
//! needs per cycle is computed once before Score, by the framework, through
//! the plugin's [`PreScorePlugin`] implementation
//! ([`crate::framework::PluginHandle::score_state`]): how many nodes hold
//! each of the pod's images (O(1) per image in the scheduler's snapshot,
//! see [`SharedLister::image_node_count`]), stored as spreads. When no node
//! holds any of them, every node would score 0: it returns `Skip` and
//! Score is skipped, so on clusters reporting no images the plugin costs a
//! few map lookups per pod and no per-node work.

use std::sync::Arc;

use flotilla_shared::framework::{
    ClusterEvent, CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, SharedLister,
    Status,
};
use flotilla_shared::node_hot::{HotFlags, NodeHot};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::IMAGE_LOCALITY;

/// A mebibyte, in bytes (upstream's `mb`).
pub const MB: i64 = 1024 * 1024;
/// Image-size sum below which a node scores 0 (upstream `minThreshold`,
/// 23 MiB): smaller images pull fast anyway.
pub const MIN_THRESHOLD: i64 = 23 * MB;
/// Per-container image-size sum at which a node scores 100 (upstream
/// `maxContainerThreshold`, 1000 MiB).
pub const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// CycleState key of the PreScore result.
const STATE_KEY: &str = "PreScoreImageLocality";

/// Score-only plugins reject nothing, so nothing needs requeueing.
const EVENTS: &[ClusterEvent] = &[];

/// What PreScore computes for Score.
#[derive(Debug, Clone, PartialEq)]
struct PreScoreState {
    /// One entry per container whose image some node holds: the normalized
    /// image name and its spread (nodes holding it / all nodes).
    images: Vec<(Arc<str>, f64)>,
    /// Init plus app containers (the pod's image count).
    containers: i64,
}

/// Score plugin preferring nodes that already hold the pod's images
/// (default score weight 1).
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageLocality;

impl ImageLocality {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        ImageLocality
    }
}

/// Upstream `calculatePriority`: clamps the size sum (bytes) to
/// `[MIN_THRESHOLD, MAX_CONTAINER_THRESHOLD × containers]` and scales it to
/// 0..=100.
#[must_use]
fn calculate_priority(sum: i64, containers: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * containers;
    let sum = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max_threshold {
        max_threshold
    } else {
        sum
    };
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

/// Upstream `scaledImageScore`: `int64(float64(size) * spread)`.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
fn scaled_image_score(size: i64, spread: f64) -> i64 {
    (size as f64 * spread) as i64
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[Arc<NodeInfo>],
        cluster: &dyn SharedLister,
    ) -> Status {
        let total = cluster.nodes().len();
        if total == 0 {
            return Status::skip();
        }
        #[allow(clippy::cast_precision_loss)] // node counts are far below 2^53
        let images: Vec<(Arc<str>, f64)> = pod
            .images
            .iter()
            .filter_map(|image| {
                let count = cluster.image_node_count(image);
                (count > 0).then(|| (image.clone(), count as f64 / total as f64))
            })
            .collect();
        if images.is_empty() {
            return Status::skip();
        }
        state.write(
            STATE_KEY,
            PreScoreState {
                images,
                containers: i64::try_from(pod.images.len()).unwrap_or(i64::MAX),
            },
        );
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    /// # Errors
    /// `Error` when its per-cycle state was not computed (the framework
    /// computes it before Score; only a caller running Score alone misses
    /// it).
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(STATE_KEY) else {
            return Err(Status::error(format!(
                "reading {STATE_KEY:?} from cycleState: not found"
            )));
        };
        let sum = s
            .images
            .iter()
            .filter_map(|(image, spread)| {
                node.spec
                    .images
                    .get(&**image)
                    .map(|&size| scaled_image_score(size, *spread))
            })
            .sum();
        Ok(calculate_priority(sum, s.containers))
    }

    /// A node reporting no images holds none of the pod's.
    fn score_hot(&self, state: &CycleState, _pod: &PodInfo, node: &NodeHot) -> Option<i64> {
        if node.flags.intersects(HotFlags::IMAGES) {
            return None;
        }
        let s = state.read::<PreScoreState>(STATE_KEY)?;
        Some(calculate_priority(0, s.containers))
    }

    /// The PreScore state is read once.
    fn score_hot_batch(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        hot: &[NodeHot],
        nodes: &[usize],
        out: &mut [Option<i64>],
    ) {
        let Some(s) = state.read::<PreScoreState>(STATE_KEY) else {
            out.fill(None);
            return;
        };
        let none_here = calculate_priority(0, s.containers);
        for (o, &i) in out.iter_mut().zip(nodes) {
            *o = (!hot[i].flags.intersects(HotFlags::IMAGES)).then_some(none_here);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder};

    /// A node reporting `images` (each: names, size in MiB).
    fn node(name: &str, images: &[(&[&str], i64)]) -> NodeInfo {
        let b = images
            .iter()
            .fold(NodeBuilder::new(name), |b, (names, mib)| {
                b.image(names, mib * MB)
            });
        NodeInfo::new(Arc::new(b.build_spec()))
    }

    /// A pod with one app container per image.
    fn pod(images: &[&str]) -> PodInfo {
        images
            .iter()
            .skip(1)
            .fold(PodBuilder::new("p").image(images[0]), |b, i| b.container(i))
            .build_info()
    }

    /// Runs PreScore then Score on every node; `None` when PreScore skipped.
    fn scores(pod: &PodInfo, nodes: Vec<NodeInfo>) -> Option<Vec<i64>> {
        let lister = FakeLister::new(nodes);
        let mut state = CycleState::default();
        let st = ImageLocality.pre_score(&mut state, pod, &lister.nodes, &lister);
        match st.code {
            Code::Skip => None,
            Code::Success => Some(
                lister
                    .nodes
                    .iter()
                    .map(|n| ImageLocality.score(&state, pod, n).unwrap())
                    .collect(),
            ),
            other => panic!("unexpected PreScore status {other:?}"),
        }
    }

    // Upstream TestImageLocalityPriority nodes.
    fn node_40_300_2000() -> NodeInfo {
        node(
            "node1",
            &[
                (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
                (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
                (&["gcr.io/2000:latest"], 2000),
            ],
        )
    }

    fn node_250_10() -> NodeInfo {
        node(
            "node2",
            &[
                (&["gcr.io/250:latest"], 250),
                (&["gcr.io/10:latest", "gcr.io/10:v1"], 10),
            ],
        )
    }

    fn node_4000_30() -> NodeInfo {
        node(
            "node1",
            &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)],
        )
    }

    fn node_20_30_40() -> NodeInfo {
        node(
            "node1",
            &[
                (&["gcr.io/20:latest"], 20),
                (&["gcr.io/30:latest"], 30),
                (&["gcr.io/40:latest"], 40),
            ],
        )
    }

    #[test]
    fn upstream_image_locality_cases() {
        let cases: Vec<(&str, PodInfo, Vec<NodeInfo>, Vec<i64>)> = vec![
            (
                // node2: 250M × 1/2 = 125M: 100 × (125 - 23) / (2000 - 23) = 5.
                "two images spread on two nodes, prefer the larger image one",
                pod(&["gcr.io/40", "gcr.io/250"]),
                vec![node_40_300_2000(), node_250_10()],
                vec![0, 5],
            ),
            (
                // node1: (40M + 300M) / 2: 100 × (170 - 23) / 1977 = 7.
                "two images on one node, prefer this node",
                pod(&["gcr.io/40", "gcr.io/300"]),
                vec![node_40_300_2000(), node_250_10()],
                vec![7, 0],
            ),
            (
                // node1: 4000M / 2 >= 2000M: clamped to 100.
                "if exceed limit, use limit",
                pod(&["gcr.io/10", "gcr.io/4000"]),
                vec![node_4000_30(), node_250_10()],
                vec![100, 0],
            ),
            (
                // node1: 4000M / 3: 100 × (1333.3 - 23) / 1977 = 66.
                "if exceed limit, use limit (with node which has no images present)",
                pod(&["gcr.io/10", "gcr.io/4000"]),
                vec![node_4000_30(), node_250_10(), node("node3", &[])],
                vec![66, 0, 0],
            ),
            (
                // node1: 600M × 2/3 + 900M × 2/3 = 1000M: 100 × 977 / 2977 = 32;
                // node2 adds 300M × 1/3: 36.
                "pod with multiple large images, node2 is preferred",
                pod(&["gcr.io/300", "gcr.io/600", "gcr.io/900"]),
                vec![
                    node(
                        "node1",
                        &[
                            (&["gcr.io/600:latest"], 600),
                            (&["gcr.io/40:latest"], 40),
                            (&["gcr.io/900:latest"], 900),
                        ],
                    ),
                    node(
                        "node2",
                        &[
                            (&["gcr.io/300:latest"], 300),
                            (&["gcr.io/600:latest"], 600),
                            (&["gcr.io/900:latest"], 900),
                        ],
                    ),
                    node("node3", &[]),
                ],
                vec![32, 36, 0],
            ),
            (
                // node1: 30M (on both nodes) + 40M × 1/2 = 50M: 100 × 27 / 1977 = 1.
                "pod with multiple small images",
                pod(&["gcr.io/30", "gcr.io/40"]),
                vec![node_20_30_40(), node_4000_30()],
                vec![1, 0],
            ),
            (
                // Init containers count: 300M × 1/2 on node1 -> 6.
                "include InitContainers: two images spread on two nodes, prefer the larger image one",
                PodBuilder::new("p")
                    .image("gcr.io/30")
                    .init_container("gcr.io/300")
                    .build_info(),
                vec![node_40_300_2000(), node_20_30_40()],
                vec![6, 0],
            ),
        ];
        for (name, pod, nodes, want) in cases {
            assert_eq!(scores(&pod, nodes), Some(want), "{name}");
        }
    }

    #[test]
    fn tags_and_digests_match_only_the_same_reference() {
        let digest = "gcr.io/app@sha256:0123456789abcdef";
        let nodes = || {
            vec![
                node("tagged", &[(&["gcr.io/app:v2"], 500)]),
                node("digested", &[(&[digest], 500)]),
                node("latest", &[(&["gcr.io/app:latest"], 500)]),
                node("none", &[]),
            ]
        };
        // spread 1/4: 125M -> 100 × 102 / 977 = 10 on the matching node only.
        assert_eq!(
            scores(&pod(&["gcr.io/app:v2"]), nodes()),
            Some(vec![10, 0, 0, 0])
        );
        assert_eq!(scores(&pod(&[digest]), nodes()), Some(vec![0, 10, 0, 0]));
        assert_eq!(
            scores(&pod(&["gcr.io/app"]), nodes()),
            Some(vec![0, 0, 10, 0])
        );
        assert_eq!(
            scores(&pod(&["gcr.io/app:v3"]), nodes()),
            None,
            "on no node: Skip"
        );
    }

    #[test]
    fn spread_damps_images_present_everywhere() {
        // The same 900M image on all 3 nodes counts in full on each, while
        // a 900M image on one node of 3 counts 300M: spreading images do not
        // pull pods together.
        let everywhere = || {
            vec![
                node("a", &[(&["big:latest"], 900)]),
                node("b", &[(&["big:latest"], 900)]),
                node("c", &[(&["big:latest"], 900)]),
            ]
        };
        // 100 × (900 - 23) / 977 = 89 on every node.
        assert_eq!(scores(&pod(&["big"]), everywhere()), Some(vec![89, 89, 89]));
        let once = vec![
            node("a", &[(&["big:latest"], 900)]),
            node("b", &[]),
            node("c", &[]),
        ];
        // 300M: 100 × 277 / 977 = 28.
        assert_eq!(scores(&pod(&["big"]), once), Some(vec![28, 0, 0]));
    }

    #[test]
    fn thresholds_clamp_and_scale() {
        assert_eq!(calculate_priority(0, 1), 0);
        assert_eq!(calculate_priority(MIN_THRESHOLD, 1), 0);
        assert_eq!(calculate_priority(MAX_CONTAINER_THRESHOLD, 1), 100);
        assert_eq!(calculate_priority(5 * MAX_CONTAINER_THRESHOLD, 2), 100);
        // 2 containers: 1000M of 2000M -> 100 × 977 / 1977 = 49.
        assert_eq!(calculate_priority(1000 * MB, 2), 49);
        assert_eq!(scaled_image_score(250 * MB, 0.5), 125 * MB);
    }

    #[test]
    fn clusters_without_images_skip_and_score_needs_pre_score() {
        let p = pod(&["nginx"]);
        assert_eq!(scores(&p, vec![node("a", &[]), node("b", &[])]), None);
        assert_eq!(scores(&p, vec![]), None, "no nodes: Skip");
        let err = ImageLocality
            .score(&CycleState::default(), &p, &node("a", &[]))
            .unwrap_err();
        assert_eq!(err.code, Code::Error);
        assert!(ImageLocality.events_to_register().is_empty());
        assert_eq!(ImageLocality::new().name(), "ImageLocality");
    }
}
