//! [`Replay`]: pods placed one at a time, in the order given, each once
//! (no retry, no preemption's second attempt, no departures): the FGD
//! paper's experiment protocol. Each attempt is the workers' own
//! [`Cycle::schedule_one`] (the profile's plugins, GpuShare's device
//! choice at Reserve), and a placed pod is bound at once, holding the
//! devices the cycle chose, as the coordinator records them on the pod.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use flotilla_shared::{NodeInfo, NodeSpec, PodInfo};

use super::{SimulateError, bind};
use crate::cache::{NodeCache, Snapshot};
use crate::cycle::{Cycle, Decision};
use crate::framework::ProfileMap;
use crate::gang::GangBook;
use crate::{Profile, Registry};

/// A cluster the pods are replayed into, one by one.
pub struct Replay {
    profiles: ProfileMap,
    cache: NodeCache,
    snapshot: Snapshot,
    gangs: GangBook,
    webhooks: HashMap<String, Arc<crate::webhook::Webhook>>,
    seed: Option<u64>,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Replay {
    /// An empty cluster of `nodes`, scheduled by `profiles` (by
    /// `schedulerName`); `seed` fixes the attempts' random draws (ties
    /// under `tieBreak: Random`, preemption's start).
    ///
    /// # Errors
    /// [`SimulateError::Profile`] for a profile that does not build.
    pub fn new(
        nodes: impl IntoIterator<Item = NodeSpec>,
        profiles: &[Profile],
        registry: &Registry,
        seed: Option<u64>,
    ) -> Result<Self, SimulateError> {
        let cache = NodeCache::default();
        for n in nodes {
            cache.upsert_node(n);
        }
        Ok(Replay {
            profiles: ProfileMap::new(profiles, registry)?,
            cache,
            snapshot: Snapshot::default(),
            gangs: GangBook::new(),
            webhooks: HashMap::new(),
            seed,
        })
    }

    /// One attempt for `pod`: the bound pod (on its node, holding its
    /// devices) when it was placed, `None` when it fits nowhere or its
    /// attempt failed (it is not retried). Gang members waiting at Permit
    /// are not bound (`None`).
    ///
    /// # Errors
    /// [`SimulateError::Pod`] if the bound copy cannot be compiled.
    pub fn place(&mut self, pod: &Arc<PodInfo>) -> Result<Option<Arc<PodInfo>>, SimulateError> {
        let cycle = Cycle {
            profiles: &self.profiles,
            webhooks: &self.webhooks,
            worker: "replay",
            pool: None,
            cache: &self.cache,
            gangs: &self.gangs,
            pdbs: &[],
            seed: self.seed,
            detail: false,
        };
        let attempt = cycle.schedule_one(&mut self.snapshot, pod, 0, Instant::now());
        match attempt.decision {
            Decision::Bind(r) => {
                self.cache.forget(&pod.uid);
                let bound = Arc::new(bind(pod, &r.node, r.gpu_devices)?);
                self.cache.add_bound_pod(bound.clone());
                Ok(Some(bound))
            }
            _ => {
                // Not retried: nothing it held or was nominated to stays.
                self.cache.forget(&pod.uid);
                self.cache.clear_nominated(&pod.uid);
                Ok(None)
            }
        }
    }

    /// A node as it stands, with the pods placed on it.
    #[must_use]
    pub fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.cache.node(name)
    }
}
