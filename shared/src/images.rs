//! Container images: the names pods ask for and the images nodes report
//! (`status.images`), as ImageLocality reads them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ContainerImage;

/// The image names a node reports, each with the size of its image in bytes
/// (upstream `NodeInfo.ImageStates`, without the cluster-wide node count).
/// Every name of every `status.images` entry is a key; a name listed twice
/// keeps the first entry's size.
pub type NodeImages = HashMap<Arc<str>, i64>;

/// The name a container runtime reports for `image` (upstream ImageLocality
/// `normalizedImageName`): `:latest` is appended when the reference has
/// neither a tag nor a digest, i.e. when its last `:` does not come after its
/// last `/` (`gcr.io:5000/root` → `gcr.io:5000/root:latest`,
/// `root@sha256:…` and `root:tag` stay as they are).
#[must_use]
pub fn normalized_image_name(image: &str) -> Cow<'_, str> {
    // `None < Some(_)`, so a missing `:` never counts as after a `/`.
    if image.rfind(':') <= image.rfind('/') {
        Cow::Owned(format!("{image}:latest"))
    } else {
        Cow::Borrowed(image)
    }
}

/// Reads a node's `status.images`.
///
/// # Errors
/// A message naming `status.images[i].sizeBytes` when a size is negative.
pub fn node_images(images: &[ContainerImage]) -> Result<NodeImages, String> {
    let mut out = NodeImages::new();
    for (i, image) in images.iter().enumerate() {
        let size = image.size_bytes.unwrap_or(0);
        if size < 0 {
            return Err(format!(
                "status.images[{i}].sizeBytes: {size} must not be negative"
            ));
        }
        for name in image.names.iter().flatten() {
            if !out.contains_key(name.as_str()) {
                out.insert(Arc::from(name.as_str()), size);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_matches_upstream_cases() {
        // Upstream TestNormalizedImageName.
        let digested =
            "root@sha256:4813494d137e1631bba301d5acab6e7bb7aa74ce1185d456565ef51d737677b2";
        for (input, want) in [
            ("root", "root:latest"),
            ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
            ("root:tag", "root:tag"),
            (digested, digested),
            ("gcr.io/40", "gcr.io/40:latest"),
            ("", ":latest"),
        ] {
            assert_eq!(normalized_image_name(input), want, "{input}");
        }
    }

    #[test]
    fn every_name_is_indexed_and_negative_sizes_are_named() {
        let images = vec![
            ContainerImage {
                names: Some(vec![
                    "gcr.io/40:latest".into(),
                    "gcr.io/40:v1".into(),
                    "gcr.io/40:v1".into(),
                ]),
                size_bytes: Some(40 << 20),
            },
            ContainerImage {
                names: Some(vec!["gcr.io/40:v1".into(), "gcr.io/300:latest".into()]),
                size_bytes: Some(300 << 20),
            },
            ContainerImage {
                names: None,
                size_bytes: Some(1),
            },
        ];
        let m = node_images(&images).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m["gcr.io/40:v1"], 40 << 20, "first entry wins");
        assert_eq!(m["gcr.io/300:latest"], 300 << 20);
        let bad = [ContainerImage {
            names: Some(vec!["x".into()]),
            size_bytes: Some(-1),
        }];
        assert_eq!(
            node_images(&bad).unwrap_err(),
            "status.images[0].sizeBytes: -1 must not be negative"
        );
    }
}
