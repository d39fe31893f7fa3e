//! The worker's volume objects: a [`VolumeState`] fed by the
//! coordinator's `volume_upsert` / `volume_deleted` events and published
//! to the cache as a whole new `Arc` ([`NodeCache::set_volume_state`]),
//! which snapshots pick up by pointer.
//!
//! During the replay that opens a session nothing is published (the
//! scheduling thread starts at `synced`); [`WorkerVolumes::go_live`]
//! publishes once then, and every change after that publishes at once:
//! one copy of the state per change, O(volume objects), which are few
//! next to pods and change seldom.

use std::sync::Arc;

use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::volumes::{VolumeKey, VolumeObject, VolumeState};
use tracing::debug;

use crate::cache::NodeCache;

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct WorkerVolumes {
    state: VolumeState,
    /// The replay ended: publish every change.
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
        // An object that could not be read and now can counts as added
        // (a StorageClass's fixed binding mode must retry its pods).
        let added = !key.is_valid_in(&self.state);
        if let Err(e) = obj.apply_to(&mut self.state) {
            debug!(object = %key, error = %e, "volume object cannot be read");
        }
        self.publish(cache);
        key.kind.cluster_event(added, false)
    }

    /// Removes the object `key`; returns the queueing event it raises.
    pub(super) fn delete(&mut self, key: &VolumeKey, cache: &NodeCache) -> Option<ClusterEvent> {
        if !key.is_in(&self.state) {
            return None;
        }
        key.remove_from(&mut self.state);
        self.publish(cache);
        key.kind.cluster_event(false, true)
    }

    /// The replay ended: publish the state, and every change from now on.
    pub(super) fn go_live(&mut self, cache: &NodeCache) {
        self.live = true;
        self.publish(cache);
    }

    fn publish(&self, cache: &NodeCache) {
        if self.live {
            cache.set_volume_state(Arc::new(self.state.clone()));
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
}
