//! Kubernetes objects read from YAML: splitting documents, the typed
//! k8s-openapi round trip, and a field-by-field diff of two JSON values.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use serde_json::Value as Json;

/// One YAML document and where it came from.
#[derive(Debug, Clone)]
pub struct Doc {
    /// `file#index` (index of the non-empty document in the file, from 0).
    pub origin: String,
    /// The document as read (YAML → JSON, no schema applied).
    pub value: Json,
}

/// Identity of an object: `apiVersion`, `kind`, namespace ("" when
/// cluster-scoped or unset) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, " {}/", self.namespace)?;
        } else {
            f.write_str(" ")?;
        }
        f.write_str(&self.name)
    }
}

/// The string at `pointer` (JSON pointer) or "".
pub fn str_at<'a>(v: &'a Json, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Json::as_str).unwrap_or("")
}

impl Doc {
    /// The object's identity.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            api_version: str_at(&self.value, "/apiVersion").to_owned(),
            kind: str_at(&self.value, "/kind").to_owned(),
            namespace: str_at(&self.value, "/metadata/namespace").to_owned(),
            name: str_at(&self.value, "/metadata/name").to_owned(),
        }
    }
}

/// The non-empty documents of a multi-document YAML text.
///
/// # Errors
/// The YAML parser's message, prefixed with `origin`.
pub fn split_docs(origin: &str, text: &str) -> Result<Vec<Doc>, String> {
    let values: Vec<Json> = serde_saphyr::from_multiple(text)
        .map_err(|e| format!("{origin} is not valid YAML: {e}"))?;
    Ok(values
        .into_iter()
        .filter(|v| !v.is_null())
        .enumerate()
        .map(|(i, value)| Doc {
            origin: format!("{origin}#{i}"),
            value,
        })
        .collect())
}

/// Every document of every `*.yaml` file in `dir`, files in name order (the
/// order `kubectl apply -f dir` uses).
///
/// # Errors
/// Unreadable directory or file, invalid YAML.
pub fn load_dir(dir: &Path) -> Result<Vec<Doc>, String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for p in files {
        let text =
            std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        docs.extend(split_docs(&name, &text)?);
    }
    Ok(docs)
}

fn typed<T: DeserializeOwned + Serialize>(doc: &Doc) -> Result<Json, String> {
    let obj: T = serde_json::from_value(doc.value.clone()).map_err(|e| {
        format!(
            "{} ({}): does not decode as {}: {e}",
            doc.origin,
            doc.key(),
            std::any::type_name::<T>()
        )
    })?;
    serde_json::to_value(&obj).map_err(|e| format!("{}: cannot re-encode: {e}", doc.origin))
}

/// The document decoded into its k8s-openapi type (by `apiVersion` and
/// `kind`) and encoded again. k8s-openapi ignores unknown fields when
/// decoding, so a misspelled or misplaced field is missing from the result.
///
/// # Errors
/// A kind with no entry in the table below (add one with the new manifest),
/// or a document that does not decode as its type (wrong value type, missing
/// required field).
pub fn round_trip(doc: &Doc) -> Result<Json, String> {
    let key = doc.key();
    match (key.api_version.as_str(), key.kind.as_str()) {
        ("v1", "Namespace") => typed::<Namespace>(doc),
        ("v1", "ServiceAccount") => typed::<ServiceAccount>(doc),
        ("v1", "ConfigMap") => typed::<ConfigMap>(doc),
        ("v1", "Service") => typed::<Service>(doc),
        ("v1", "Secret") => typed::<Secret>(doc),
        ("networking.k8s.io/v1", "NetworkPolicy") => typed::<NetworkPolicy>(doc),
        ("apps/v1", "Deployment") => typed::<Deployment>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => typed::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => typed::<ClusterRoleBinding>(doc),
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => typed::<RoleBinding>(doc),
        (api_version, kind) => Err(format!(
            "{}: no typed k8s-openapi struct for apiVersion {api_version:?} kind {kind:?} \
             in tests/deploy_manifests/objects.rs (add one)",
            doc.origin
        )),
    }
}

/// Paths where `left` and `right` differ, as `path: left X, right Y` lines
/// (`-` for a missing value).
pub fn diff(left: &Json, right: &Json) -> Vec<String> {
    let mut out = Vec::new();
    diff_at("", left, right, &mut out);
    out
}

fn diff_at(path: &str, l: &Json, r: &Json, out: &mut Vec<String>) {
    match (l, r) {
        (Json::Object(a), Json::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff_at(&p, x, y, out),
                    (Some(x), None) => out.push(format!("{p}: left {x}, right -")),
                    (None, Some(y)) => out.push(format!("{p}: left -, right {y}")),
                    (None, None) => {}
                }
            }
        }
        (Json::Array(a), Json::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let p = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff_at(&p, x, y, out),
                    (Some(x), None) => out.push(format!("{p}: left {x}, right -")),
                    (None, Some(y)) => out.push(format!("{p}: left -, right {y}")),
                    (None, None) => {}
                }
            }
        }
        _ if l == r => {}
        _ => out.push(format!("{path}: left {l}, right {r}")),
    }
}

/// Documents by identity.
///
/// # Errors
/// Two documents with the same identity.
pub fn by_key(docs: &[Doc]) -> Result<BTreeMap<ObjectKey, Doc>, String> {
    let mut map = BTreeMap::new();
    for d in docs {
        if let Some(prev) = map.insert(d.key(), d.clone()) {
            return Err(format!(
                "{} is defined twice: {} and {}",
                d.key(),
                prev.origin,
                d.origin
            ));
        }
    }
    Ok(map)
}
