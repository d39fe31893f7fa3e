//! Volume objects: kept compiled for the bind arbiter (the volume checks
//! read [`VolumeState`] through `BindView::volumes`), and forwarded to the
//! workers in compact form ([`VolumeObject::compact`]: no managed fields,
//! only the annotations the volume model reads), each encoded once.

use std::collections::HashSet;

use flotilla_shared::volumes::{VolumeKey, VolumeKind, VolumeObject};
use tracing::warn;

use super::Inner;
use super::stream::WorkerEvent;
use crate::cluster::WatchEvent;

impl Inner {
    /// A volume object was created or changed: compiled into the
    /// arbiter's state (an object that does not compile is kept as its
    /// error, logged, so the pods using it are told why) and sent to the
    /// workers.
    pub(super) fn volume_applied(&mut self, obj: &VolumeObject) {
        let key = obj.key();
        if let Err(e) = obj.apply_to(&mut self.volume_state) {
            warn!(object = %key, error = %e, "volume object cannot be read; pods using it are unschedulable until it changes");
        }
        let json: std::sync::Arc<[u8]> = obj.compact().to_json().into();
        let msg = WorkerEvent::VolumeUpsert {
            kind: key.kind,
            json: json.clone(),
        };
        self.volumes.insert(key, json);
        self.broadcast(&msg);
    }

    /// A volume object was deleted: removed, and the workers are told.
    pub(super) fn volume_deleted(&mut self, key: &VolumeKey) {
        if self.volumes.remove(key).is_some() {
            key.remove_from(&mut self.volume_state);
            self.broadcast(&WorkerEvent::VolumeDeleted(key.clone()));
        }
    }

    /// The objects of `kind` known but not in `listed` (a complete list
    /// of the kind): deleted while nobody watched.
    pub(super) fn volumes_not_listed(
        &self,
        kind: VolumeKind,
        listed: &[WatchEvent],
    ) -> Vec<VolumeKey> {
        let keys: HashSet<VolumeKey> = listed
            .iter()
            .filter_map(|e| match e {
                WatchEvent::VolumeApplied(o) => Some(o.key()),
                _ => None,
            })
            .collect();
        self.volumes
            .keys()
            .filter(|k| k.kind == kind && !keys.contains(*k))
            .cloned()
            .collect()
    }

    /// What a worker's stream replays of the volume objects.
    pub(super) fn volume_events(&self) -> impl Iterator<Item = WorkerEvent> + '_ {
        self.volumes
            .iter()
            .map(|(k, json)| WorkerEvent::VolumeUpsert {
                kind: k.kind,
                json: json.clone(),
            })
    }
}
