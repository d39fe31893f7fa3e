//! What a worker's event stream carries, built under the lock.

use std::collections::{BTreeMap, HashMap};

use tokio::sync::mpsc;

use flotilla_proto::v1 as pb;
use flotilla_shared::pod_info::PodInfo;

/// Sender half of a worker's event stream.
pub type WorkerTx = mpsc::UnboundedSender<pb::WatchEvent>;

pub(super) fn raw(obj: &impl serde::Serialize) -> pb::RawObject {
    pb::RawObject {
        // Serializing a k8s-openapi object to JSON cannot fail.
        json: serde_json::to_vec(obj).unwrap_or_default(),
    }
}

/// The pod's JSON as the workers are sent it (the coordinator keeps pods as
/// JSON, [`PodInfo::keep_json`]).
pub(super) fn raw_pod(info: &PodInfo) -> pb::RawObject {
    pb::RawObject {
        json: info.json().to_vec(),
    }
}

/// The node's JSON as the workers are sent it.
pub(super) fn raw_node(spec: &flotilla_shared::NodeSpec) -> pb::RawObject {
    pb::RawObject {
        json: spec.json().to_vec(),
    }
}

pub(super) fn ev(e: pb::watch_event::Event) -> pb::WatchEvent {
    pb::WatchEvent {
        event: Some(e),
        trace_context: HashMap::new(),
    }
}

pub(super) fn namespace_event(name: &str, labels: &BTreeMap<String, String>) -> pb::WatchEvent {
    ev(pb::watch_event::Event::NamespaceUpsert(
        pb::NamespaceLabels {
            name: name.to_owned(),
            labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        },
    ))
}

pub(super) fn pb_pod_ref(p: &PodInfo) -> pb::PodRef {
    pb::PodRef {
        namespace: p.key.namespace.to_string(),
        name: p.key.name.to_string(),
        uid: p.uid.to_string(),
    }
}

pub(super) fn pdb_deleted_event((namespace, name): (String, String)) -> pb::WatchEvent {
    ev(pb::watch_event::Event::PdbDeleted(pb::ObjectRef {
        namespace,
        name,
    }))
}

pub(super) fn nominated_event(p: &PodInfo, node: &str) -> pb::WatchEvent {
    ev(pb::watch_event::Event::NominatedPod(pb::NominatedPod {
        pod: Some(raw_pod(p)),
        node_name: node.to_owned(),
    }))
}
