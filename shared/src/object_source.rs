//! A Kubernetes object kept whole or as its JSON encoding (the API
//! server's wire form), decoded again only when someone asks for it.
//!
//! A decoded k8s-openapi object is large on the heap (a `Pod` or a `Node`
//! takes several KB: every optional field inline, a B-tree node per map);
//! its JSON a few hundred bytes. What holds many objects for long (a
//! worker's cache, the coordinator's records) keeps the JSON and compiles
//! what the scheduling cycle reads into its own fields ([`crate::PodInfo`],
//! [`crate::NodeSpec`]); the object itself is for what speaks Kubernetes
//! objects (extenders, placement webhooks, Events, status writes).

use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where an object lives: the object itself, or its JSON and the object
/// once decoded again (shared by the clones).
#[derive(Debug, Clone)]
pub enum ObjectSource<T> {
    /// The object, shared with whoever handed it over (a cluster watch).
    Object(Arc<T>),
    /// Its JSON, and the object once decoded again.
    Json {
        /// The JSON encoding.
        json: Arc<[u8]>,
        /// The object, after the first [`ObjectSource::object`].
        decoded: Arc<OnceLock<Arc<T>>>,
    },
}

/// Decodes JSON into a `T`; the error names the JSON path and the problem
/// (`metadata.name: invalid type: ...`).
///
/// # Errors
/// The path and serde's message, when `json` is not a `T`.
pub fn decode<T: DeserializeOwned>(json: &[u8]) -> Result<T, String> {
    // The plain decoder first: tracking the path costs ~70 % more (1.9 vs
    // 3.2 µs for a small pod), and only a failure needs it, so the path is
    // found by decoding again.
    serde_json::from_slice(json).or_else(|_| {
        let mut de = serde_json::Deserializer::from_slice(json);
        serde_path_to_error::deserialize(&mut de)
            .map_err(|e| format!("{}: {}", e.path(), e.inner()))
    })
}

impl<T: Serialize + DeserializeOwned> ObjectSource<T> {
    /// Keeps `json` (which decoded to a `T` already: the caller compiled it).
    #[must_use]
    pub fn json_of(json: &[u8]) -> Self {
        ObjectSource::Json {
            json: Arc::from(json),
            decoded: Arc::default(),
        }
    }

    /// The object: decoded on the first call when kept as JSON (a few
    /// microseconds), then kept. `fallback` stands in should the JSON not
    /// decode any more (it decoded when compiled; the caller knows the
    /// object's identity).
    pub fn object(&self, fallback: impl FnOnce() -> T) -> Arc<T> {
        match self {
            ObjectSource::Object(o) => o.clone(),
            ObjectSource::Json { json, decoded } => decoded
                .get_or_init(|| {
                    Arc::new(serde_json::from_slice(json).unwrap_or_else(|_| fallback()))
                })
                .clone(),
        }
    }

    /// The object decoded afresh when kept as JSON, without keeping it: for
    /// a one-off read of an object held for long, which
    /// [`ObjectSource::object`] would keep decoded from then on.
    pub fn object_once(&self, fallback: impl FnOnce() -> T) -> Arc<T> {
        match self {
            ObjectSource::Object(o) => o.clone(),
            ObjectSource::Json { json, decoded } => decoded.get().cloned().unwrap_or_else(|| {
                Arc::new(serde_json::from_slice(json).unwrap_or_else(|_| fallback()))
            }),
        }
    }

    /// The JSON encoding: the kept JSON, or the object encoded now.
    #[must_use]
    pub fn json(&self) -> Arc<[u8]> {
        match self {
            ObjectSource::Json { json, .. } => json.clone(),
            // Encoding a k8s-openapi object to JSON cannot fail.
            ObjectSource::Object(o) => Arc::from(serde_json::to_vec(&**o).unwrap_or_default()),
        }
    }

    /// From now on keeps the JSON (encoding the object when it is kept
    /// whole) and drops this hold on the decoded object.
    pub fn keep_json(&mut self) {
        if let ObjectSource::Object(o) = self
            && let Ok(json) = serde_json::to_vec(&**o)
        {
            *self = ObjectSource::Json {
                json: Arc::from(json),
                decoded: Arc::default(),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([("zone".to_owned(), "a".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn kept_as_json_the_object_round_trips_and_is_decoded_once() {
        let mut src = ObjectSource::Object(Arc::new(node("n1")));
        let whole = src.json();
        src.keep_json();
        assert!(matches!(src, ObjectSource::Json { .. }));
        assert_eq!(src.json(), whole, "the same encoding");
        let first = src.object(|| node("fallback"));
        assert_eq!(*first, node("n1"));
        let again = src.clone().object(|| node("fallback"));
        assert_eq!(*src.object_once(|| node("fallback")), node("n1"));
        assert!(
            Arc::ptr_eq(&first, &again),
            "decoded once, shared by clones"
        );
    }

    #[test]
    fn json_that_no_longer_decodes_gives_the_fallback() {
        let src: ObjectSource<Node> = ObjectSource::json_of(b"{\"metadata\": 7}");
        assert_eq!(*src.object(|| node("known")), node("known"));
    }
}
