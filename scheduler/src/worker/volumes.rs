//! The worker's volume objects: a [`VolumeState`] fed by the
//! coordinator's `volume_upsert` / `volume_deleted` events.
//!
//! During the replay that opens a session they are kept here and nothing
//! is published (the scheduling thread starts at `synced`);
//! [`WorkerVolumes::go_live`] hands the state to the cache
//! ([`NodeCache::set_volume_state`]), and every change after that is made
//! in the cache's copy ([`NodeCache::update_volume_state`]): in place
//! while no snapshot shares it, else on one copy, which the next changes
//! before the next snapshot reuse. So a burst of changes (VolumeBinding
//! binds a claim and a PV for each pod) costs at most one copy of the
//! state per scheduling cycle, not one per change.

use std::sync::Arc;

use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::volumes::{VolumeKey, VolumeObject, VolumeState};
use tracing::debug;

use crate::cache::NodeCache;

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct WorkerVolumes {
    /// The objects of the replay, until [`WorkerVolumes::go_live`].
    state: VolumeState,
    /// The replay ended: changes go to the cache.
    live: bool,
}

impl WorkerVolumes {
    /// Adds or replaces `obj`; returns the queueing event it raises
    /// ([`flotilla_shared::volumes::VolumeKind::cluster_event`]; replacing
    /// an unreadable object counts as adding it). An object
    /// that does not compile is kept as its error (the pods using it are
    /// told), logged at debug (the coordinator logs it at warn).
    pub(super) fn upsert(&mut self, obj: &VolumeObject, cache: &NodeCache) -> Option<ClusterEvent> {
        let key = obj.key();
        let added = self.change(cache, |state| {
            // An object that could not be read and now can counts as
            // added (a StorageClass's fixed binding mode must retry its
            // pods).
            let added = !key.is_valid_in(state);
            if let Err(e) = obj.apply_to(state) {
                debug!(object = %key, error = %e, "volume object cannot be read");
            }
            added
        });
        key.kind.cluster_event(added, false)
    }

    /// Removes the object `key`; returns the queueing event it raises.
    pub(super) fn delete(&mut self, key: &VolumeKey, cache: &NodeCache) -> Option<ClusterEvent> {
        let held = self.change(cache, |state| {
            let held = key.is_in(state);
            if held {
                key.remove_from(state);
            }
            held
        });
        held.then(|| key.kind.cluster_event(false, true)).flatten()
    }

    /// The replay ended: the state goes to the cache, and every change
    /// from now on.
    pub(super) fn go_live(&mut self, cache: &NodeCache) {
        self.live = true;
        cache.set_volume_state(Arc::new(std::mem::take(&mut self.state)));
    }

    /// `f` on the state: the replay's, or the cache's once live.
    fn change<R>(&mut self, cache: &NodeCache, f: impl FnOnce(&mut VolumeState) -> R) -> R {
        if self.live {
            cache.update_volume_state(f)
        } else {
            f(&mut self.state)
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_shared::framework::SharedLister as _;
    use flotilla_shared::testing::volumes::{PvcBuilder, storage_class, volume_attachment};
    use flotilla_shared::volumes::Lookup;

    use super::*;
    use crate::cache::Snapshot;

    fn published(cache: &NodeCache) -> Arc<VolumeState> {
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        snap.volumes()
    }

    #[test]
    fn changes_publish_after_the_replay_and_raise_upstreams_events() {
        let cache = NodeCache::default();
        let mut v = WorkerVolumes::default();
        let claim = VolumeObject::Claim(Arc::new(PvcBuilder::new("data").build()));
        assert_eq!(v.upsert(&claim, &cache), Some(ClusterEvent::PvcChanged));
        assert_eq!(
            published(&cache).claim("default", "data"),
            Lookup::Missing,
            "nothing published during the replay"
        );
        v.go_live(&cache);
        assert!(published(&cache).claim("default", "data").found().is_some());

        // A StorageClass: added raises its event, an update does not; a
        // class fixed after being unreadable counts as added.
        let class = |mode| VolumeObject::StorageClass(Arc::new(storage_class("c", "p", mode)));
        assert_eq!(
            v.upsert(&class(Some("Immediate")), &cache),
            Some(ClusterEvent::StorageClassAdded)
        );
        assert_eq!(v.upsert(&class(Some("Immediate")), &cache), None);
        assert_eq!(v.upsert(&class(Some("Sometimes")), &cache), None);
        assert_eq!(
            v.upsert(&class(Some("WaitForFirstConsumer")), &cache),
            Some(ClusterEvent::StorageClassAdded)
        );

        let va = VolumeObject::VolumeAttachment(Arc::new(volume_attachment("va", "d", "n1", "pv")));
        assert_eq!(v.upsert(&va, &cache), None);
        assert_eq!(published(&cache).attachments_on("n1").len(), 1);
        assert_eq!(
            v.delete(&va.key(), &cache),
            Some(ClusterEvent::VolumeAttachmentDeleted)
        );
        assert_eq!(v.delete(&va.key(), &cache), None, "already gone");
        assert!(published(&cache).attachments_on("n1").is_empty());
        assert_eq!(v.delete(&claim.key(), &cache), None);
        assert_eq!(published(&cache).claim("default", "data"), Lookup::Missing);
    }

    #[test]
    fn a_snapshot_keeps_the_objects_it_took_while_changes_go_on() {
        let cache = NodeCache::default();
        let mut v = WorkerVolumes::default();
        v.go_live(&cache);
        let claim = |n: &str| VolumeObject::Claim(Arc::new(PvcBuilder::new(n).build()));
        v.upsert(&claim("a"), &cache);
        let taken = published(&cache);
        v.upsert(&claim("b"), &cache);
        v.upsert(&claim("c"), &cache);
        assert!(
            taken.claim("default", "b").found().is_none(),
            "the snapshot's copy"
        );
        let now = published(&cache);
        for n in ["a", "b", "c"] {
            assert!(now.claim("default", n).found().is_some(), "{n}");
        }
    }
}
