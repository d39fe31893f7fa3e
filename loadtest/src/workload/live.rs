//! Reading a live cluster for `simulate` / `explain`, **read-only**: the
//! same [`ClusterObjects`] a cluster dump gives, from an API server.
//!
//! # What is read, and how
//! Only `GET` requests, built by kube's `Request::list` (and discovery),
//! never a watch, create, update, patch or delete:
//! - Nodes (`/api/v1/nodes`), Pods (`/api/v1/pods`, every namespace and
//!   phase, as `kubectl get pods -A`), Namespaces (`/api/v1/namespaces`) and
//!   PriorityClasses (`/apis/scheduling.k8s.io/v1/priorityclasses`): a list
//!   failing is an error naming the resource.
//! - PodDisruptionBudgets (`policy/v1`, served since Kubernetes 1.21),
//!   PodGroups (`scheduling.x-k8s.io/v1alpha1`, a CRD of
//!   kubernetes-sigs/scheduler-plugins) and Kubernetes' own PodGroups
//!   (`scheduling.k8s.io/v1beta1` in 1.37, else `v1alpha2` in 1.36): first
//!   found by discovery (`GET /apis/<group>/<version>`, each version in
//!   turn); when the server does not serve them, or the caller may not list
//!   them (403), they are skipped with a note (preemption then sees no
//!   budget; no pod forms a gang).
//! - The volume kinds: PersistentVolumeClaims and PersistentVolumes (core
//!   `v1`), StorageClasses, CSINodes, CSIDrivers and VolumeAttachments
//!   (`storage.k8s.io/v1`, served since 1.17): optional as above (a kind
//!   not served or forbidden is skipped with a note; pods using claims are
//!   then unschedulable, as on a worker without them).
//!
//! Lists are read in pages of [`PAGE_SIZE`] with continue tokens, so every
//! page of one resource comes from the same snapshot (the API server's
//! paginated-list semantics); different resources are separate reads, as
//! `kubectl get nodes,pods,...` does.
//!
//! Each page goes, as a `PodList`/`NodeList`/... document, through
//! [`cluster_objects_from_documents`]: the very per-object decoding and
//! checks of the file loader (field-path errors naming the object, valid
//! quantities, required `PriorityClass.value`, no duplicates), with bad
//! objects fatal ([`OnBadInput::Fail`]), as for `--cluster FILE`.

use kube::Client;
use kube::api::ListParams;
use kube::core::Request;
use serde_json::Value;

use crate::workload::k8s_list::cluster_objects_from_documents;
use crate::workload::{ClusterObjects, LoadError, OnBadInput, pod_group};
use flotilla_shared::gang;

/// Objects per list page (`limit`), kubectl's default chunk size.
pub const PAGE_SIZE: u32 = 500;

/// One kind to list.
struct Resource {
    /// Plural, for messages and the URL (`pods`).
    plural: &'static str,
    /// Kind, for notes (`PodDisruptionBudgets`).
    kinds: &'static str,
    /// `v1` (core) or `group/version`: the first served one is read (the
    /// preferred first; more than one only for an optional kind).
    api_versions: &'static [&'static str],
    /// Whether the read may be skipped (not served, or forbidden).
    optional: bool,
}

impl Resource {
    /// The collection's URL path in `api_version`, cluster-wide.
    fn path(&self, api_version: &str) -> String {
        if api_version == "v1" {
            format!("/api/v1/{}", self.plural)
        } else {
            format!("/apis/{}/{}", api_version, self.plural)
        }
    }

    /// The versions, for notes: `policy/v1`, `scheduling.k8s.io/v1beta1 or
    /// scheduling.k8s.io/v1alpha2`.
    fn versions(&self) -> String {
        self.api_versions.join(" or ")
    }
}

/// Every kind read, in this order.
const RESOURCES: [Resource; 13] = [
    Resource {
        plural: "nodes",
        kinds: "Nodes",
        api_versions: &["v1"],
        optional: false,
    },
    Resource {
        plural: "pods",
        kinds: "Pods",
        api_versions: &["v1"],
        optional: false,
    },
    Resource {
        plural: "namespaces",
        kinds: "Namespaces",
        api_versions: &["v1"],
        optional: false,
    },
    Resource {
        plural: "priorityclasses",
        kinds: "PriorityClasses",
        api_versions: &["scheduling.k8s.io/v1"],
        optional: false,
    },
    Resource {
        plural: "poddisruptionbudgets",
        kinds: "PodDisruptionBudgets",
        api_versions: &["policy/v1"],
        optional: true,
    },
    Resource {
        plural: "podgroups",
        kinds: "PodGroups",
        api_versions: &[pod_group::API_VERSION],
        optional: true,
    },
    Resource {
        plural: "podgroups",
        kinds: "PodGroups (scheduling.k8s.io)",
        api_versions: &gang::API_VERSIONS,
        optional: true,
    },
    volume_resource("persistentvolumeclaims", "PersistentVolumeClaims", &["v1"]),
    volume_resource("persistentvolumes", "PersistentVolumes", &["v1"]),
    volume_resource("storageclasses", "StorageClasses", &[STORAGE_V1]),
    volume_resource("csinodes", "CSINodes", &[STORAGE_V1]),
    volume_resource("csidrivers", "CSIDrivers", &[STORAGE_V1]),
    volume_resource("volumeattachments", "VolumeAttachments", &[STORAGE_V1]),
];

/// The group version of StorageClasses, CSINodes, CSIDrivers and
/// VolumeAttachments.
const STORAGE_V1: &str = "storage.k8s.io/v1";

/// A volume kind: optional, in one version.
const fn volume_resource(
    plural: &'static str,
    kinds: &'static str,
    api_versions: &'static [&'static str],
) -> Resource {
    Resource {
        plural,
        kinds,
        api_versions,
        optional: true,
    }
}

/// Why a live cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A list (or a discovery request) failed: unreachable server, 401/403
    /// on a required kind, a 410 on an expired continue token, a response
    /// that is not JSON.
    #[error("listing {resource} from {server}: {message}")]
    List {
        /// The collection, e.g. `pods` or `policy/v1 poddisruptionbudgets`.
        resource: String,
        /// The server URL.
        server: String,
        /// Cause: `HTTP <code> <reason>: <message>` for an API error, else
        /// the client's error with its causes.
        message: String,
    },
    /// An object the server returned is not valid input (names the object
    /// and the field path), as for a file.
    #[error(transparent)]
    Invalid(#[from] LoadError),
}

/// The objects of a live cluster, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct LiveCluster {
    /// Everything read; named `cluster <server URL>`.
    pub objects: ClusterObjects,
    /// Kinds skipped and why (not served, forbidden), for stderr.
    pub notes: Vec<String>,
}

/// Reads Nodes, Pods, Namespaces, PriorityClasses and, when served,
/// PodDisruptionBudgets, PodGroups (both APIs) and the volume kinds from the API server behind `client`
/// (see the module docs), with `GET` requests only. `server` is the
/// server's URL, for names and messages (a trailing `/` is dropped).
///
/// # Errors
/// [`LiveError::List`] when a required list (or any page of it) fails;
/// [`LiveError::Invalid`] for the first object that is not valid input.
pub async fn read_cluster(client: &Client, server: &str) -> Result<LiveCluster, LiveError> {
    let server = server.trim_end_matches('/');
    let name = format!("cluster {server}");
    let mut documents = Vec::new();
    let mut notes = Vec::new();
    'resources: for resource in &RESOURCES {
        let mut api_version = resource.api_versions[0];
        if resource.optional {
            let mut found = None;
            for &v in resource.api_versions {
                match served(client, v, resource.plural).await {
                    Ok(true) => {
                        found = Some(v);
                        break;
                    }
                    Ok(false) => {}
                    Err(e) if is_forbidden(&e) => {
                        notes.push(forbidden_note(resource, v, server, &e));
                        continue 'resources;
                    }
                    Err(source) => return Err(list_error(resource, v, server, source)),
                }
            }
            let Some(v) = found else {
                notes.push(format!(
                    "{} skipped: {} {} is not served by {server}",
                    resource.kinds,
                    resource.versions(),
                    resource.plural
                ));
                continue;
            };
            api_version = v;
        }
        match list_all(client, &resource.path(api_version)).await {
            Ok(pages) => documents.extend(pages),
            Err(e) if resource.optional && (is_forbidden(&e) || is_not_found(&e)) => {
                notes.push(forbidden_note(resource, api_version, server, &e));
            }
            Err(source) => return Err(list_error(resource, api_version, server, source)),
        }
    }
    let objects = cluster_objects_from_documents(&name, &name, documents, OnBadInput::Fail)?;
    tracing::debug!(
        server,
        nodes = objects.nodes.len(),
        pods = objects.pods.len(),
        "read the live cluster"
    );
    Ok(LiveCluster { objects, notes })
}

/// Whether discovery lists `plural` in the group version `api_version`
/// (404 on the group version: not served).
async fn served(client: &Client, api_version: &str, plural: &str) -> Result<bool, kube::Error> {
    if api_version == "v1" {
        // The core group is always served; its list answers for the kind.
        return Ok(true);
    }
    match client.list_api_group_resources(api_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Every page of the cluster-wide list at `path`, as the server sent them.
async fn list_all(client: &Client, path: &str) -> Result<Vec<Value>, kube::Error> {
    let request = Request::new(path);
    let mut params = ListParams::default().limit(PAGE_SIZE);
    let mut pages = Vec::new();
    loop {
        let get = request.list(&params).map_err(kube::Error::BuildRequest)?;
        let page: Value = client.request(get).await?;
        let next = page
            .pointer("/metadata/continue")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        pages.push(page);
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(pages),
        }
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// `HTTP 403 Forbidden: <message>` for an API error, else the error and
/// its causes joined by `: `.
fn describe(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        return format!("HTTP {} {}: {}", s.code, s.reason, s.message);
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

fn forbidden_note(resource: &Resource, api_version: &str, server: &str, e: &kube::Error) -> String {
    format!(
        "{} skipped: cannot list {} {} from {server}: {}",
        resource.kinds,
        api_version,
        resource.plural,
        describe(e)
    )
}

fn list_error(
    resource: &Resource,
    api_version: &str,
    server: &str,
    source: kube::Error,
) -> LiveError {
    let what = if api_version == "v1" {
        resource.plural.to_owned()
    } else {
        format!("{} {}", api_version, resource.plural)
    };
    LiveError::List {
        resource: what,
        server: server.to_owned(),
        message: describe(&source),
    }
}

#[cfg(test)]
mod tests;
