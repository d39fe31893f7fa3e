//! Kubernetes object dumps (YAML or JSON) as a [`Workload`] (Nodes and Pods,
//! for runs) or as [`ClusterObjects`] (also Namespaces, PriorityClasses,
//! PodDisruptionBudgets and PodGroups, for `simulate` / `explain`).
//!
//! A `PodGroup` is read by its `apiVersion`: `scheduling.x-k8s.io/*` (or
//! none) is the scheduler-plugins kind ([`ClusterObjects::pod_groups`]);
//! `scheduling.k8s.io/v1beta1` and `scheduling.k8s.io/v1alpha2` are
//! Kubernetes' own ([`ClusterObjects::workload_pod_groups`]); any other
//! (another `scheduling.k8s.io` version, Volcano's) is skipped with a
//! warning. Items of a typed list (`PodGroupList`) without an `apiVersion`
//! take the list's.
//!
//! Accepted shapes, in one file:
//! - a `List` (`apiVersion: v1`, `kind: List`, `items: [...]`), as written by
//!   `kubectl get nodes,pods -A -o yaml` (or `-o json`);
//! - typed lists such as `NodeList` and `PodList`, whose items may omit `kind`;
//! - plain objects;
//! - any mix of the above as a multi-document YAML stream (`---`), a stream
//!   of JSON values, or a JSON/YAML sequence of objects.
//!
//! Objects are numbered from 1 in file order ("item 3"), across documents and
//! lists. Each object of a kept kind is decoded with its field path tracked,
//! so errors name the object and the field, e.g.
//! `cluster.yaml: item 3 (Pod default/web-1): spec.containers[0].resources.requests.cpu: invalid quantity "abc"`.
//! Resource quantities (node capacity and allocatable; container, init
//! container and pod-level requests and limits; pod overhead; PodGroup
//! `spec.minResources`) must be valid Kubernetes quantities.
//!
//! Objects of other kinds are skipped with a [`LoadWarning`] naming the kind
//! and the object. Pods keep file order and are otherwise taken as they are:
//! pods already bound (`spec.nodeName` set) stay bound. A namespaced object
//! without a namespace is put in `default`; a pod without a uid gets a
//! deterministic one derived from `namespace/name`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::pod_group::{self, PodGroup};
use super::{
    ClusterObjects, LoadError, LoadWarning, OnBadInput, Result, Workload, deterministic_uid,
    file_label,
};
use flotilla_shared::gang::{self, WorkloadPodGroup};
use flotilla_shared::volumes::{VolumeKind, VolumeObject};

pub use flotilla_shared::objects::DEFAULT_NAMESPACE;

/// Which kinds a load keeps; objects of other kinds become warnings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kinds {
    /// What a run creates in the embedded cluster (a [`Workload`]): Node,
    /// Pod, PriorityClass, PodDisruptionBudget, PodGroup.
    Workload,
    /// Every kind of [`ClusterObjects`].
    Cluster,
}

impl Kinds {
    fn keeps(self, kind: &str) -> bool {
        if VolumeKind::of_kind_name(kind).is_some() {
            return true;
        }
        match self {
            Kinds::Workload => matches!(
                kind,
                "Node" | "Pod" | "PriorityClass" | "PodDisruptionBudget" | "PodGroup"
            ),
            Kinds::Cluster => matches!(
                kind,
                "Node" | "Pod" | "Namespace" | "PriorityClass" | "PodDisruptionBudget" | "PodGroup"
            ),
        }
    }

    fn described(self) -> &'static str {
        match self {
            Kinds::Workload => {
                "only Node, Pod, PriorityClass, PodDisruptionBudget, PodGroup and the volume \
                 kinds (PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode, \
                 CSIDriver, VolumeAttachment)"
            }
            Kinds::Cluster => {
                "only Node, Pod, Namespace, PriorityClass, PodDisruptionBudget, PodGroup and the \
                 volume kinds (PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode, \
                 CSIDriver, VolumeAttachment)"
            }
        }
    }
}

/// Loads the Nodes and Pods of a Kubernetes object dump in YAML or JSON.
///
/// The file is read as JSON when its extension is `.json` or it starts with
/// `{` or `[` (falling back to YAML for flow-style YAML), and as YAML
/// otherwise. With [`OnBadInput::Skip`] a bad object (schema mismatch, missing
/// `metadata.name`, invalid quantity, duplicate name, no `kind`) is left out
/// and reported in [`Workload::warnings`]; with [`OnBadInput::Fail`] the first
/// one is the error. An unreadable file or a YAML/JSON syntax error is always
/// an error. Objects of other kinds are skipped with a warning in both modes.
///
/// The workload is named after the file stem.
pub fn load_k8s_list(path: &Path, on_bad: OnBadInput) -> Result<Workload> {
    let objects = load(path, on_bad, Kinds::Workload)?;
    Ok(Workload {
        name: objects.name,
        nodes: objects.nodes,
        pods: objects.pods,
        warnings: objects.warnings,
        barriers: Vec::new(),
        priority_classes: objects.priority_classes,
        pod_disruption_budgets: objects.pod_disruption_budgets,
        pod_groups: objects.pod_groups,
        workload_pod_groups: objects.workload_pod_groups,
        volumes: objects.volumes,
        timeline: Vec::new(),
    })
}

/// Loads every object of a Kubernetes object dump that `simulate` reads:
/// Nodes, Pods, Namespaces, PriorityClasses, PodDisruptionBudgets and
/// PodGroups (`scheduling.x-k8s.io`, and `scheduling.k8s.io` `v1beta1` /
/// `v1alpha2`). Same formats, bad-input policy and errors as
/// [`load_k8s_list`]; a PodGroup of another API (group or version) is
/// skipped with a warning.
///
/// # Errors
/// As [`load_k8s_list`].
pub fn load_cluster_objects(path: &Path, on_bad: OnBadInput) -> Result<ClusterObjects> {
    load(path, on_bad, Kinds::Cluster)
}

/// Builds [`ClusterObjects`] from documents already parsed, such as the
/// list responses of a live API server (`PodList`, `NodeList`, ... whose
/// items omit `kind`), with exactly the per-object decoding and checks of
/// [`load_cluster_objects`]: items numbered from 1 across the documents,
/// errors naming the object and the field path, duplicates refused, the
/// bad-input policy `on_bad`.
///
/// `name` names the result ([`ClusterObjects::name`]); `label` stands where
/// a file name stands in errors and warnings (e.g. `cluster
/// https://10.0.0.1:6443`).
///
/// # Errors
/// As [`load_cluster_objects`], without the I/O and syntax errors.
pub fn cluster_objects_from_documents(
    name: &str,
    label: &str,
    documents: impl IntoIterator<Item = Value>,
    on_bad: OnBadInput,
) -> Result<ClusterObjects> {
    let mut loader = Loader {
        file: label.to_owned(),
        on_bad,
        kinds: Kinds::Cluster,
        objects: ClusterObjects::default(),
        seen: HashMap::new(),
        next_item: 1,
    };
    for (index, document) in documents.into_iter().enumerate() {
        loader.document(index + 1, document)?;
    }
    let mut objects = loader.objects;
    name.clone_into(&mut objects.name);
    Ok(objects)
}

fn load(path: &Path, on_bad: OnBadInput, kinds: Kinds) -> Result<ClusterObjects> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    let file = file_label(path);
    let documents = parse_documents(path, &file, &text)?;

    let mut loader = Loader {
        file,
        on_bad,
        kinds,
        objects: ClusterObjects::default(),
        seen: HashMap::new(),
        next_item: 1,
    };
    for (index, document) in documents.into_iter().enumerate() {
        loader.document(index + 1, document)?;
    }

    let mut objects = loader.objects;
    objects.name = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    tracing::debug!(
        source = %objects.name,
        nodes = objects.nodes.len(),
        pods = objects.pods.len(),
        namespaces = objects.namespaces.len(),
        priority_classes = objects.priority_classes.len(),
        pod_disruption_budgets = objects.pod_disruption_budgets.len(),
        pod_groups = objects.pod_groups.len(),
        workload_pod_groups = objects.workload_pod_groups.len(),
        warnings = objects.warnings.len(),
        "loaded Kubernetes objects"
    );
    Ok(objects)
}

/// Parses the file into its documents (JSON values or YAML documents).
fn parse_documents(path: &Path, file: &str, text: &str) -> Result<Vec<Value>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let json_extension = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    if json_extension || text.trim_start().starts_with(['{', '[']) {
        match serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect()
        {
            Ok(documents) => return Ok(documents),
            Err(source) if json_extension => {
                return Err(LoadError::Json {
                    file: file.to_owned(),
                    source,
                });
            }
            // Flow-style YAML also starts with `{` or `[`; if it is not YAML
            // either, the JSON error is the relevant one.
            Err(source) => {
                return parse_yaml(text).map_err(|_| LoadError::Json {
                    file: file.to_owned(),
                    source,
                });
            }
        }
    }
    parse_yaml(text).map_err(|source| LoadError::Yaml {
        file: file.to_owned(),
        source: Box::new(source),
    })
}

/// Parses a (multi-document) YAML stream with YAML 1.2 core-schema typing, so
/// untyped values keep their text: `y`, `n`, `yes`, `on` stay strings (only
/// `true`/`false` are booleans), and `0755` or `1_000` stay strings. Budgets
/// that bound the total work scale with the input size, as dumps of large
/// clusters exceed the defaults; alias expansion keeps its default limits.
fn parse_yaml(text: &str) -> std::result::Result<Vec<Value>, serde_saphyr::Error> {
    let mut budget = serde_saphyr::Budget::default();
    let len = text.len();
    budget.max_events = budget.max_events.max(len.saturating_mul(2));
    budget.max_nodes = budget.max_nodes.max(len);
    budget.max_documents = budget.max_documents.max(len / 2);
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(len);
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    serde_saphyr::from_multiple_with_options(text, options)
}

/// Loading state.
struct Loader {
    file: String,
    on_bad: OnBadInput,
    kinds: Kinds,
    objects: ClusterObjects,
    /// (API group, kind, `namespace/name` or `name`) → item number of the
    /// object's first occurrence (the two PodGroup kinds are different
    /// objects).
    seen: HashMap<(&'static str, &'static str, String), usize>,
    /// Number of the next item.
    next_item: usize,
}

impl Loader {
    /// Loads one document: a list (its items), a sequence of objects, or one object.
    fn document(&mut self, number: usize, document: Value) -> Result<()> {
        match document {
            Value::Null => Ok(()),
            Value::Array(items) => items
                .into_iter()
                .try_for_each(|item| self.item(item, None, None)),
            Value::Object(mut object) => {
                let list_kind = object
                    .get("kind")
                    .and_then(Value::as_str)
                    .and_then(|kind| kind.strip_suffix("List"))
                    .map(str::to_owned);
                let Some(item_kind) = list_kind else {
                    return self.item(Value::Object(object), None, None);
                };
                match object.remove("items") {
                    None | Some(Value::Null) => Ok(()),
                    Some(Value::Array(items)) => {
                        // `List` items carry their own kind; `NodeList` items may not.
                        let default_kind = Some(item_kind.as_str()).filter(|k| !k.is_empty());
                        // Items of a typed list may omit their apiVersion too.
                        let default_api_version = default_kind
                            .and(object.get("apiVersion"))
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                        items.into_iter().try_for_each(|item| {
                            self.item(item, default_kind, default_api_version.as_deref())
                        })
                    }
                    Some(other) => {
                        let err = LoadError::InvalidObject {
                            file: self.file.clone(),
                            item: format!("document {number} ({item_kind}List)"),
                            message: format!(
                                "items: expected a sequence, found {}",
                                type_name(&other)
                            ),
                        };
                        self.on_bad.handle(err, &mut self.objects.warnings)
                    }
                }
            }
            other => {
                let err = LoadError::InvalidObject {
                    file: self.file.clone(),
                    item: format!("document {number}"),
                    message: format!("expected a Kubernetes object, found {}", type_name(&other)),
                };
                self.on_bad.handle(err, &mut self.objects.warnings)
            }
        }
    }

    /// Loads one object, applying the bad-input policy to its error.
    fn item(
        &mut self,
        value: Value,
        default_kind: Option<&str>,
        default_api_version: Option<&str>,
    ) -> Result<()> {
        let number = self.next_item;
        self.next_item += 1;
        match self.load_object(number, value, default_kind, default_api_version) {
            Ok(()) => Ok(()),
            Err(err) => self.on_bad.handle(err, &mut self.objects.warnings),
        }
    }

    fn load_object(
        &mut self,
        number: usize,
        value: Value,
        default_kind: Option<&str>,
        default_api_version: Option<&str>,
    ) -> Result<()> {
        let Value::Object(object) = &value else {
            return Err(self.invalid(
                format!("item {number}"),
                format!("expected a Kubernetes object, found {}", type_name(&value)),
            ));
        };
        let kind = match object.get("kind") {
            Some(Value::String(kind)) => kind.clone(),
            None | Some(Value::Null) => match default_kind {
                Some(kind) => kind.to_owned(),
                None => {
                    return Err(
                        self.invalid(format!("item {number}"), "kind is missing".to_owned())
                    );
                }
            },
            Some(other) => {
                return Err(self.invalid(
                    format!("item {number}"),
                    format!("kind: expected a string, found {}", type_name(other)),
                ));
            }
        };
        let metadata = object.get("metadata");
        let meta_str = |key: &str| metadata.and_then(|m| m.get(key)).and_then(Value::as_str);
        let name = meta_str("name")
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let namespace = meta_str("namespace")
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let api_version = match object.get("apiVersion") {
            Some(Value::String(v)) if !v.is_empty() => Some(v.clone()),
            _ => default_api_version.map(str::to_owned),
        };
        let (name, namespace) = (name.as_deref(), namespace.as_deref());

        let kept = self.kinds.keeps(&kind);
        match kind.as_str() {
            "Node" if kept => {
                let node: Node = self.decode_object(number, value, None, name, |n| {
                    invalid_node_quantity(n).map(Invalid::quantity)
                })?;
                self.objects.nodes.push(node);
            }
            "Pod" if kept => {
                let mut pod: Pod =
                    self.decode_object(number, value, Some(namespace), name, |p| {
                        invalid_pod_quantity(p).map(Invalid::quantity)
                    })?;
                if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
                    let key = format!(
                        "{}/{}",
                        pod.metadata
                            .namespace
                            .as_deref()
                            .unwrap_or(DEFAULT_NAMESPACE),
                        pod.metadata.name.as_deref().unwrap_or_default()
                    );
                    pod.metadata.uid = Some(deterministic_uid(&key));
                }
                self.objects.pods.push(pod);
            }
            "Namespace" if kept => {
                let ns: Namespace = self.decode_object(number, value, None, name, |_| None)?;
                self.objects.namespaces.push(ns);
            }
            "PriorityClass" if kept => {
                let pc: PriorityClass =
                    self.decode_object(number, value, None, name, invalid_priority_class)?;
                self.objects.priority_classes.push(pc);
            }
            k if kept && let Some(volume_kind) = VolumeKind::of_kind_name(k) => {
                let obj = self.decode_volume(number, value, volume_kind, namespace, name)?;
                self.objects.volumes.push(obj);
            }
            "PodDisruptionBudget" if kept => {
                let pdb: PodDisruptionBudget =
                    self.decode_object(number, value, Some(namespace), name, |_| None)?;
                self.objects.pod_disruption_budgets.push(pdb);
            }
            "PodGroup" if kept => {
                let api_version = api_version.as_deref().unwrap_or(pod_group::API_VERSION);
                let group = api_version.split_once('/').map_or("", |(group, _)| group);
                if gang::API_VERSIONS.contains(&api_version) {
                    let WorkloadPodGroupObject(mut pg) =
                        self.decode_object(number, value, Some(namespace), name, |_| None)?;
                    if pg.api_version.is_empty() {
                        api_version.clone_into(&mut pg.api_version);
                    }
                    if pg.kind.is_empty() {
                        "PodGroup".clone_into(&mut pg.kind);
                    }
                    self.objects.workload_pod_groups.push(pg);
                    return Ok(());
                }
                if group != pod_group::GROUP {
                    let item = describe(
                        number,
                        &kind,
                        Some(namespace.unwrap_or(DEFAULT_NAMESPACE)),
                        name,
                    );
                    self.skip(
                        &item,
                        format!(
                            "skipped: PodGroup of apiVersion {api_version} is not loaded (only {}, {} and {})",
                            pod_group::API_VERSION,
                            gang::V1BETA1,
                            gang::V1ALPHA2,
                        ),
                    );
                    return Ok(());
                }
                let pg: PodGroup =
                    self.decode_object(number, value, Some(namespace), name, |g| {
                        invalid_pod_group_quantity(g).map(Invalid::quantity)
                    })?;
                self.objects.pod_groups.push(pg);
            }
            _ => {
                let item = describe(number, &kind, namespace, name);
                self.skip(
                    &item,
                    format!(
                        "skipped: kind {kind} is not loaded ({})",
                        self.kinds.described()
                    ),
                );
            }
        }
        Ok(())
    }

    /// Records a skipped object as a warning.
    fn skip(&mut self, item: &str, message: String) {
        let warning = LoadWarning {
            location: format!("{}: {item}", self.file),
            message,
        };
        tracing::debug!(location = %warning.location, "{}", warning.message);
        self.objects.warnings.push(warning);
    }

    /// Decodes one object of kind `T::KIND` and checks it: `metadata.name`
    /// set, `check` finds nothing wrong (it returns the first problem), not a
    /// duplicate. `namespace` is `Some` for
    /// namespaced kinds (holding the raw `metadata.namespace`, if any); their
    /// namespace defaults to [`DEFAULT_NAMESPACE`].
    fn decode_object<T>(
        &mut self,
        number: usize,
        value: Value,
        namespace: Option<Option<&str>>,
        name: Option<&str>,
        check: impl Fn(&T) -> Option<Invalid>,
    ) -> Result<T>
    where
        T: DeserializeOwned + k8s_openapi::Metadata<Ty = ObjectMeta>,
    {
        let kind = T::KIND;
        let shown_namespace = namespace.map(|ns| ns.unwrap_or(DEFAULT_NAMESPACE));
        let item = describe(number, kind, shown_namespace, name);
        let mut object: T = self.decode(value, &item)?;
        let name = self
            .require_name(object.metadata().name.as_deref(), &item)?
            .to_owned();
        match check(&object) {
            None => {}
            Some(Invalid::Quantity { path, value }) => {
                return Err(self.invalid_quantity(item, path, value));
            }
            Some(Invalid::Field { path, message }) => {
                return Err(self.invalid(item, format!("{path}: {message}")));
            }
        }
        let key = if namespace.is_some() {
            let meta = object.metadata_mut();
            let ns = match meta.namespace.as_deref() {
                Some(ns) if !ns.is_empty() => ns.to_owned(),
                _ => DEFAULT_NAMESPACE.to_owned(),
            };
            meta.namespace = Some(ns.clone());
            format!("{ns}/{name}")
        } else {
            name
        };
        let seen_key = (T::GROUP, kind, key);
        if let Some(&first_item) = self.seen.get(&seen_key) {
            return Err(self.duplicate(item, first_item));
        }
        self.seen.insert(seen_key, number);
        Ok(object)
    }

    /// Decodes a volume object of `kind` (claims are namespaced, the other
    /// kinds not), its fields checked as for every kind; what the volume
    /// model cannot read (an unknown binding mode...) is not refused here:
    /// a pod using the object is told, as on a live cluster.
    fn decode_volume(
        &mut self,
        number: usize,
        value: Value,
        kind: VolumeKind,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<VolumeObject> {
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
        Ok(match kind {
            VolumeKind::Claim => {
                VolumeObject::from(Arc::new(self.decode_object::<PersistentVolumeClaim>(
                    number,
                    value,
                    Some(namespace),
                    name,
                    |_| None,
                )?))
            }
            VolumeKind::Pv => VolumeObject::from(Arc::new(
                self.decode_object::<PersistentVolume>(number, value, None, name, |_| None)?,
            )),
            VolumeKind::StorageClass => VolumeObject::from(Arc::new(
                self.decode_object::<StorageClass>(number, value, None, name, |_| None)?,
            )),
            VolumeKind::CsiNode => VolumeObject::from(Arc::new(self.decode_object::<CSINode>(
                number,
                value,
                None,
                name,
                |_| None,
            )?)),
            VolumeKind::CsiDriver => VolumeObject::from(Arc::new(
                self.decode_object::<CSIDriver>(number, value, None, name, |_| None)?,
            )),
            VolumeKind::VolumeAttachment => VolumeObject::from(Arc::new(
                self.decode_object::<VolumeAttachment>(number, value, None, name, |_| None)?,
            )),
        })
    }

    /// Decodes `value` as `T`, tracking the field path for errors.
    fn decode<T: DeserializeOwned>(&self, value: Value, item: &str) -> Result<T> {
        serde_path_to_error::deserialize(value).map_err(|err| LoadError::Decode {
            file: self.file.clone(),
            item: item.to_owned(),
            path: err.path().to_string(),
            message: err.inner().to_string(),
        })
    }

    fn require_name<'n>(&self, name: Option<&'n str>, item: &str) -> Result<&'n str> {
        name.filter(|n| !n.is_empty())
            .ok_or_else(|| LoadError::MissingName {
                file: self.file.clone(),
                item: item.to_owned(),
            })
    }

    fn invalid(&self, item: String, message: String) -> LoadError {
        LoadError::InvalidObject {
            file: self.file.clone(),
            item,
            message,
        }
    }

    fn invalid_quantity(&self, item: String, path: String, value: String) -> LoadError {
        LoadError::InvalidQuantity {
            file: self.file.clone(),
            item,
            path,
            value,
        }
    }

    fn duplicate(&self, item: String, first_item: usize) -> LoadError {
        LoadError::DuplicateObject {
            file: self.file.clone(),
            item,
            first_item,
        }
    }
}

/// A `scheduling.k8s.io` PodGroup as [`Loader::decode_object`] reads it
/// (kind `PodGroup`, group `scheduling.k8s.io`: not a duplicate of the
/// scheduler-plugins PodGroup of the same name).
#[derive(serde::Deserialize)]
#[serde(transparent)]
struct WorkloadPodGroupObject(WorkloadPodGroup);

impl k8s_openapi::Resource for WorkloadPodGroupObject {
    const API_VERSION: &'static str = gang::V1BETA1;
    const GROUP: &'static str = gang::WORKLOAD_GROUP;
    const KIND: &'static str = "PodGroup";
    const VERSION: &'static str = "v1beta1";
    const URL_PATH_SEGMENT: &'static str = "podgroups";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for WorkloadPodGroupObject {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// `item 3 (Pod default/web-1)`, `item 1 (Node node-a)`, `item 2 (Pod)`.
fn describe(number: usize, kind: &str, namespace: Option<&str>, name: Option<&str>) -> String {
    match (namespace, name) {
        (Some(namespace), Some(name)) => format!("item {number} ({kind} {namespace}/{name})"),
        (None, Some(name)) => format!("item {number} ({kind} {name})"),
        (_, None) => format!("item {number} ({kind})"),
    }
}

/// JSON type name of a value, for messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// What a kind-specific check found wrong with a decoded object.
enum Invalid {
    /// A resource quantity that is not a Kubernetes quantity.
    Quantity {
        /// Field path, e.g. `status.allocatable.cpu`.
        path: String,
        /// The quantity.
        value: String,
    },
    /// Another field problem.
    Field {
        /// Field path.
        path: &'static str,
        /// What is wrong.
        message: &'static str,
    },
}

impl Invalid {
    fn quantity((path, value): (String, String)) -> Self {
        Invalid::Quantity { path, value }
    }
}

/// `value` of a PriorityClass whatever the k8s-openapi version feature the
/// binary picks: an `Option<i32>` in the v1.36+ types, a plain `i32` before.
pub(crate) fn priority_class_value(pc: &PriorityClass) -> Option<i32> {
    flotilla_shared::priority::priority_class_value(pc)
}

/// `value` is required (an `Option` in the v1.36+ types, so decoding alone
/// does not catch its absence).
fn invalid_priority_class(pc: &PriorityClass) -> Option<Invalid> {
    priority_class_value(pc)
        .is_none()
        .then_some(Invalid::Field {
            path: "value",
            message: "required",
        })
}

/// The first invalid quantity of a resource map, as `(path, value)`.
fn invalid_in(prefix: &str, map: Option<&BTreeMap<String, Quantity>>) -> Option<(String, String)> {
    map?.iter()
        .find(|(_, quantity)| !is_valid_quantity(&quantity.0))
        .map(|(resource, quantity)| (format!("{prefix}.{resource}"), quantity.0.clone()))
}

/// The first invalid quantity in a node's capacity or allocatable.
fn invalid_node_quantity(node: &Node) -> Option<(String, String)> {
    let status = node.status.as_ref()?;
    invalid_in("status.capacity", status.capacity.as_ref())
        .or_else(|| invalid_in("status.allocatable", status.allocatable.as_ref()))
}

/// The first invalid quantity in a pod's container, init container or
/// pod-level requests and limits, or its overhead.
fn invalid_pod_quantity(pod: &Pod) -> Option<(String, String)> {
    let spec = pod.spec.as_ref()?;
    let lists = [
        ("containers", Some(&spec.containers)),
        ("initContainers", spec.init_containers.as_ref()),
    ];
    for (field, containers) in lists {
        for (index, container) in containers.into_iter().flatten().enumerate() {
            let Some(resources) = &container.resources else {
                continue;
            };
            let prefix = format!("spec.{field}[{index}].resources");
            let found = invalid_in(&format!("{prefix}.requests"), resources.requests.as_ref())
                .or_else(|| invalid_in(&format!("{prefix}.limits"), resources.limits.as_ref()));
            if found.is_some() {
                return found;
            }
        }
    }
    invalid_in("spec.overhead", spec.overhead.as_ref()).or_else(|| {
        let resources = spec.resources.as_ref()?;
        invalid_in("spec.resources.requests", resources.requests.as_ref())
            .or_else(|| invalid_in("spec.resources.limits", resources.limits.as_ref()))
    })
}

/// The first invalid quantity in a PodGroup's `spec.minResources`.
fn invalid_pod_group_quantity(group: &PodGroup) -> Option<(String, String)> {
    invalid_in("spec.minResources", group.spec.min_resources.as_ref())
}

/// Whether `s` is a valid Kubernetes quantity:
/// `[+-]` digits with an optional fraction (`1`, `1.5`, `.5`, `5.`), then an
/// optional suffix: binary SI (`Ki Mi Gi Ti Pi Ei`), decimal SI
/// (`n u m k M G T P E`) or a decimal exponent (`e3`, `E-2`).
fn is_valid_quantity(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_len = unsigned
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let valid_number = match number.split_once('.') {
        None => !number.is_empty(),
        Some((whole, fraction)) => {
            let has_digits = !whole.is_empty() || !fraction.is_empty();
            has_digits && !fraction.contains('.')
        }
    };
    if !valid_number {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        _ => suffix.strip_prefix(['e', 'E']).is_some_and(|exponent| {
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testutil::TempFile;

    const CLUSTER_YAML: &str = r#"
apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: node-a
    labels:
      kubernetes.io/hostname: node-a
  status:
    capacity: {cpu: "8", memory: 32Gi, pods: "110"}
    allocatable: {cpu: 7800m, memory: 31Gi, pods: 110}
    conditions:
    - {type: Ready, status: "True"}
- apiVersion: v1
  kind: Node
  metadata:
    name: node-b
  status:
    allocatable: {cpu: "4", memory: 16Gi, nvidia.com/gpu: "1"}
- apiVersion: v1
  kind: Pod
  metadata:
    name: web-0
    namespace: default
    uid: 11111111-2222-3333-4444-555555555555
  spec:
    nodeName: node-a
    containers:
    - name: web
      image: nginx
      resources:
        requests: {cpu: 500m, memory: 1Gi}
  status:
    phase: Running
- apiVersion: v1
  kind: Pod
  metadata:
    name: web-1
    namespace: default
  spec:
    containers:
    - name: web
      image: nginx
      resources:
        requests: {cpu: "1.5", memory: 2e9}
        limits: {cpu: 2, memory: 4Gi}
- apiVersion: v1
  kind: Pod
  metadata:
    name: batch-0
  spec:
    schedulerName: flotilla
    initContainers:
    - name: init
      image: busybox
      resources: {requests: {cpu: 100m}}
    containers:
    - name: main
      image: busybox
"#;

    fn names_of_pods(w: &Workload) -> Vec<String> {
        w.pods
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or("?"),
                    p.metadata.name.as_deref().unwrap_or("?")
                )
            })
            .collect()
    }

    #[test]
    fn yaml_list_loads() {
        let f = TempFile::new("cluster.yaml", CLUSTER_YAML);
        let w = load_k8s_list(f.path(), OnBadInput::Fail).expect("load");
        assert_eq!(w.name, "cluster");
        assert!(w.warnings.is_empty(), "{:?}", w.warnings);
        let nodes: Vec<_> = w
            .nodes
            .iter()
            .map(|n| n.metadata.name.as_deref().unwrap_or("?"))
            .collect();
        assert_eq!(nodes, ["node-a", "node-b"]);
        assert_eq!(
            names_of_pods(&w),
            ["default/web-0", "default/web-1", "default/batch-0"]
        );

        let alloc = w.nodes[0]
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .expect("alloc");
        assert_eq!(
            alloc.get("pods").map(|q| q.0.as_str()),
            Some("110"),
            "unquoted number accepted"
        );
        assert_eq!(alloc.get("cpu").map(|q| q.0.as_str()), Some("7800m"));

        let bound = &w.pods[0];
        assert_eq!(
            bound.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("node-a")
        );
        assert_eq!(
            bound.metadata.uid.as_deref(),
            Some("11111111-2222-3333-4444-555555555555")
        );
        assert_eq!(
            bound.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );

        let unbound = &w.pods[1];
        assert!(
            unbound
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none()
        );
        assert_eq!(
            unbound.metadata.uid.as_deref(),
            Some(deterministic_uid("default/web-1").as_str())
        );
        let limits = unbound.spec.as_ref().expect("spec").containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .expect("limits");
        assert_eq!(limits.get("cpu").map(|q| q.0.as_str()), Some("2"));

        let defaulted = &w.pods[2];
        assert_eq!(
            defaulted.metadata.uid.as_deref(),
            Some(deterministic_uid("default/batch-0").as_str())
        );
        assert_eq!(
            defaulted
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.as_deref()),
            Some("flotilla")
        );
    }

    #[test]
    fn json_list_loads() {
        let json = r#"{
  "apiVersion": "v1",
  "kind": "List",
  "items": [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
     "status": {"allocatable": {"cpu": "2", "memory": "4Gi"}}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "ns"},
     "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": 0.25}}}]}}
  ]
}"#;
        for name in ["cluster.json", "cluster.txt"] {
            let f = TempFile::new(name, json);
            let w = load_k8s_list(f.path(), OnBadInput::Fail).expect("load json");
            assert_eq!(w.nodes.len(), 1);
            assert_eq!(names_of_pods(&w), ["ns/p1"]);
            let requests = w.pods[0].spec.as_ref().expect("spec").containers[0]
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .expect("requests");
            assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("0.25"));
        }

        let broken = TempFile::new("broken.json", r#"{"kind": "List", "items": [}"#);
        let err = load_k8s_list(broken.path(), OnBadInput::Skip).expect_err("syntax error");
        assert!(matches!(err, LoadError::Json { .. }), "{err}");
        assert!(
            err.to_string().starts_with("broken.json: invalid JSON: "),
            "{err}"
        );
    }

    #[test]
    fn bad_quantity_names_object_and_field() {
        let yaml = CLUSTER_YAML.replace(
            "requests: {cpu: \"1.5\", memory: 2e9}",
            "requests: {cpu: abc}",
        );
        let f = TempFile::new("cluster.yaml", &yaml);
        let err = load_k8s_list(f.path(), OnBadInput::Fail).expect_err("bad quantity");
        assert_eq!(
            err.to_string(),
            "cluster.yaml: item 4 (Pod default/web-1): spec.containers[0].resources.requests.cpu: invalid quantity \"abc\""
        );

        let w = load_k8s_list(f.path(), OnBadInput::Skip).expect("skip");
        assert_eq!(names_of_pods(&w), ["default/web-0", "default/batch-0"]);
        assert_eq!(w.warnings.len(), 1);
        assert_eq!(
            w.warnings[0].location,
            "cluster.yaml: item 4 (Pod default/web-1)"
        );

        let yaml = CLUSTER_YAML.replace("memory: 16Gi,", "memory: 16GB,");
        let f = TempFile::new("cluster.yaml", &yaml);
        let err = load_k8s_list(f.path(), OnBadInput::Fail).expect_err("bad node quantity");
        assert_eq!(
            err.to_string(),
            "cluster.yaml: item 2 (Node node-b): status.allocatable.memory: invalid quantity \"16GB\""
        );
    }

    #[test]
    fn wrong_type_names_object_and_field_path() {
        let yaml = CLUSTER_YAML.replace(
            "requests: {cpu: \"1.5\", memory: 2e9}",
            "requests: {cpu: [1]}",
        );
        let f = TempFile::new("cluster.yaml", &yaml);
        let err = load_k8s_list(f.path(), OnBadInput::Fail).expect_err("wrong type");
        let LoadError::Decode {
            item,
            path,
            message,
            ..
        } = &err
        else {
            panic!("unexpected error {err}")
        };
        assert_eq!(item, "item 4 (Pod default/web-1)");
        assert_eq!(path, "spec.containers[0].resources.requests.cpu");
        assert!(message.starts_with("invalid type"), "{message}");
        assert!(
            err.to_string()
                .starts_with("cluster.yaml: item 4 (Pod default/web-1): spec.containers[0].resources.requests.cpu: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn unknown_kind_is_a_warning() {
        let yaml = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: kube-system}, data: {a: b}}
- {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}
"#;
        let f = TempFile::new("mixed.yaml", yaml);
        let w = load_k8s_list(f.path(), OnBadInput::Fail).expect("unknown kinds do not fail");
        assert_eq!(names_of_pods(&w), ["default/p"]);
        assert_eq!(w.warnings.len(), 1);
        assert_eq!(
            w.warnings[0].location,
            "mixed.yaml: item 1 (ConfigMap kube-system/cfg)"
        );
        assert!(
            w.warnings[0].message.contains("ConfigMap"),
            "{}",
            w.warnings[0]
        );
    }

    #[test]
    fn multi_document_yaml_and_typed_lists() {
        let yaml = r#"
# a node, a pod and a PodList whose items have no kind
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "1"}}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x}
spec: {containers: [{name: c}]}
---
---
apiVersion: v1
kind: PodList
items:
- metadata: {name: b, namespace: x}
  spec: {containers: [{name: c}]}
- metadata: {name: c, namespace: y}
  spec: {containers: [{name: c}]}
---
apiVersion: v1
kind: NodeList
items: []
"#;
        let f = TempFile::new("multi.yaml", yaml);
        let w = load_k8s_list(f.path(), OnBadInput::Fail).expect("load multi-doc");
        assert_eq!(w.nodes.len(), 1);
        // `y` is a string in YAML 1.2 (a boolean in YAML 1.1).
        assert_eq!(names_of_pods(&w), ["x/a", "x/b", "y/c"]);
        assert!(w.warnings.is_empty(), "{:?}", w.warnings);
    }

    #[test]
    fn missing_name_duplicates_and_missing_kind() {
        let yaml = r#"
apiVersion: v1
kind: List
items:
- {kind: Pod, metadata: {namespace: x}, spec: {containers: [{name: c}]}}
- {kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}
- {kind: Pod, metadata: {name: p, namespace: default}, spec: {containers: [{name: c}]}}
- {metadata: {name: q}}
- just a string
- {kind: Node, metadata: {name: n}}
"#;
        let f = TempFile::new("bad.yaml", yaml);
        let err = load_k8s_list(f.path(), OnBadInput::Fail).expect_err("missing name");
        assert_eq!(
            err.to_string(),
            "bad.yaml: item 1 (Pod): metadata.name is missing"
        );

        let w = load_k8s_list(f.path(), OnBadInput::Skip).expect("skip");
        assert_eq!(names_of_pods(&w), ["default/p"]);
        assert_eq!(w.nodes.len(), 1);
        let got: Vec<String> = w.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "bad.yaml: item 1 (Pod): metadata.name is missing",
                "bad.yaml: item 3 (Pod default/p): duplicate object (first as item 2)",
                "bad.yaml: item 4: kind is missing",
                "bad.yaml: item 5: expected a Kubernetes object, found a string",
            ]
        );
    }

    #[test]
    fn yaml_scalars_keep_their_text() {
        let yaml = r#"
kind: Pod
metadata:
  name: n
  namespace: off
  labels: {a: yes, b: on, c: N, d: 0755, e: 1_000, f: "true"}
spec: {containers: [{name: c, resources: {requests: {cpu: 0100}}}]}
"#;
        let f = TempFile::new("scalars.yaml", yaml);
        let w = load_k8s_list(f.path(), OnBadInput::Fail).expect("load");
        assert_eq!(names_of_pods(&w), ["off/n"]);
        let labels = w.pods[0].metadata.labels.as_ref().expect("labels");
        let values: Vec<&str> = labels.values().map(String::as_str).collect();
        assert_eq!(values, ["yes", "on", "N", "0755", "1_000", "true"]);

        let f = TempFile::new(
            "bool.yaml",
            "kind: Pod\nmetadata: {name: p, labels: {a: true}}\n",
        );
        let err = load_k8s_list(f.path(), OnBadInput::Fail).expect_err("boolean label value");
        assert!(
            err.to_string().starts_with(
                "bool.yaml: item 1 (Pod default/p): metadata.labels.a: invalid type: boolean"
            ),
            "{err}"
        );
    }

    const CLUSTER_KINDS_YAML: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
globalDefault: false
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web-pdb, namespace: team-a}
spec: {minAvailable: 2, selector: {matchLabels: {app: web}}}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroupList
items:
- metadata: {name: gang}
  spec: {minMember: 3, minResources: {cpu: "6"}, scheduleTimeoutSeconds: 60}
  status: {phase: Pending}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: vc-gang, namespace: team-a}
spec: {minMember: 2}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team-a}
spec: {containers: [{name: c}]}
"#;

    #[test]
    fn cluster_objects_keep_every_read_kind() {
        let f = TempFile::new("kinds.yaml", CLUSTER_KINDS_YAML);
        let o = load_cluster_objects(f.path(), OnBadInput::Fail).expect("load");
        assert_eq!(o.name, "kinds");
        assert_eq!(o.pods.len(), 1);
        assert_eq!(o.namespaces.len(), 1);
        assert_eq!(
            o.namespaces[0]
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("team"))
                .map(String::as_str),
            Some("a")
        );
        assert_eq!(o.priority_classes.len(), 1);
        assert_eq!(priority_class_value(&o.priority_classes[0]), Some(1000));
        assert_eq!(o.pod_disruption_budgets.len(), 1);
        assert_eq!(
            o.pod_disruption_budgets[0].metadata.namespace.as_deref(),
            Some("team-a")
        );
        assert_eq!(o.pod_groups.len(), 1, "the volcano PodGroup is not ours");
        let gang = &o.pod_groups[0];
        assert_eq!(gang.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(gang.spec.min_member, 3);
        assert_eq!(gang.spec.schedule_timeout_seconds, Some(60));
        assert_eq!(gang.status.phase.as_deref(), Some("Pending"));
        let got: Vec<String> = o.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "kinds.yaml: item 5 (PodGroup team-a/vc-gang): skipped: PodGroup of apiVersion \
              scheduling.volcano.sh/v1beta1 is not loaded (only scheduling.x-k8s.io/v1alpha1, \
              scheduling.k8s.io/v1beta1 and scheduling.k8s.io/v1alpha2)"
            ]
        );

        // A run creates Nodes, Pods, PriorityClasses, PDBs and PodGroups in
        // its cluster; the rest are warnings there.
        let w = load_k8s_list(f.path(), OnBadInput::Fail).expect("load as workload");
        assert_eq!(w.pods.len(), 1);
        assert_eq!(
            (
                w.priority_classes.len(),
                w.pod_disruption_budgets.len(),
                w.pod_groups.len()
            ),
            (o.priority_classes.len(), o.pod_disruption_budgets.len(), 1)
        );
        assert_eq!(
            w.warnings[0].to_string(),
            "kinds.yaml: item 1 (Namespace team-a): skipped: kind Namespace is not loaded \
             (only Node, Pod, PriorityClass, PodDisruptionBudget, PodGroup and the volume kinds \
             (PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode, CSIDriver, \
             VolumeAttachment))"
        );
    }

    #[test]
    fn volume_kinds_are_loaded_for_runs_and_simulate_and_their_content_is_not_judged() {
        let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/volumes.yaml");
        let keys =
            |v: &[VolumeObject]| -> Vec<String> { v.iter().map(|o| o.key().to_string()).collect() };
        let want = [
            "PersistentVolume pv-a",
            "PersistentVolumeClaim default/data",
            "StorageClass odd",
            "PersistentVolumeClaim default/scratch",
            "CSINode node-a",
            "CSIDriver example.com/csi",
            "VolumeAttachment va",
        ];
        let w = load_k8s_list(&f, OnBadInput::Fail).expect("a run loads them");
        assert_eq!(keys(&w.volumes), want);
        assert!(w.warnings.is_empty(), "{:?}", w.warnings);
        let o = load_cluster_objects(&f, OnBadInput::Fail).expect("simulate loads them");
        assert_eq!(keys(&o.volumes), want);

        // A field of the wrong type is refused with its path, as for pods.
        let bad = TempFile::new(
            "bad-volume.yaml",
            "kind: PersistentVolumeClaim\nmetadata: {name: c}\nspec: {accessModes: 3}\n",
        );
        let e = load_cluster_objects(bad.path(), OnBadInput::Fail).expect_err("bad field");
        assert!(
            e.to_string().contains("PersistentVolumeClaim default/c")
                && e.to_string().contains("spec.accessModes"),
            "{e}"
        );
    }

    #[test]
    fn bad_cluster_objects_name_the_object_and_field() {
        let cases = [
            (
                "kind: PriorityClass\nmetadata: {name: high}\nglobalDefault: true\n",
                "bad.yaml: item 1 (PriorityClass high): value: required",
            ),
            (
                "kind: PriorityClass\nmetadata: {name: high}\nvalue: lots\n",
                "bad.yaml: item 1 (PriorityClass high): value: invalid type: string \"lots\", expected i32",
            ),
            (
                "kind: PodGroup\napiVersion: scheduling.x-k8s.io/v1alpha1\nmetadata: {name: g}\nspec: {minResources: {cpu: two}}\n",
                "bad.yaml: item 1 (PodGroup default/g): spec.minResources.cpu: invalid quantity \"two\"",
            ),
            (
                "kind: PodGroup\nmetadata: {name: g}\nspec: {minMember: many}\n",
                "bad.yaml: item 1 (PodGroup default/g): spec.minMember: invalid type: string \"many\", expected i32",
            ),
            (
                "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {selector: {matchLabels: [x]}}\n",
                "bad.yaml: item 1 (PodDisruptionBudget default/b): spec.selector.matchLabels: invalid type: sequence, expected a map",
            ),
            (
                "kind: Namespace\nmetadata: {labels: {a: b}}\n",
                "bad.yaml: item 1 (Namespace): metadata.name is missing",
            ),
            (
                "kind: Namespace\nmetadata: {name: a}\n---\nkind: Namespace\nmetadata: {name: a}\n",
                "bad.yaml: item 2 (Namespace a): duplicate object (first as item 1)",
            ),
        ];
        for (yaml, want) in cases {
            let f = TempFile::new("bad.yaml", yaml);
            let err = load_cluster_objects(f.path(), OnBadInput::Fail).expect_err(want);
            assert_eq!(err.to_string(), want);
        }
    }

    /// `kubectl get podgroups.scheduling.k8s.io -A -o yaml` of a 1.37 and a
    /// 1.36 cluster (one file), with the scheduler-plugins kind beside them.
    const WORKLOAD_POD_GROUPS_YAML: &str = r#"
apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: scheduling.k8s.io/v1beta1
  kind: PodGroup
  metadata:
    creationTimestamp: "2026-11-01T10:00:00Z"
    generation: 1
    name: workers
    namespace: ml
    resourceVersion: "4711"
    uid: 6f1c2d4e-0000-4000-8000-000000000001
  spec:
    podGroupTemplateRef:
      workload:
        podGroupTemplateName: workers
        workloadName: training
    schedulingPolicy:
      gang:
        minCount: 4
  status:
    conditions:
    - lastTransitionTime: "2026-11-01T10:00:05Z"
      message: ""
      reason: Scheduled
      status: "True"
      type: PodGroupInitiallyScheduled
- apiVersion: scheduling.k8s.io/v1alpha2
  kind: PodGroup
  metadata:
    creationTimestamp: "2026-11-01T10:00:00Z"
    name: loners
    namespace: ml
    uid: 6f1c2d4e-0000-4000-8000-000000000002
  spec:
    schedulingPolicy:
      basic: {}
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: PodGroup
  metadata: {name: workers, namespace: ml}
  spec: {minMember: 2}
- apiVersion: scheduling.k8s.io/v1alpha3
  kind: PodGroup
  metadata: {name: future, namespace: ml}
  spec: {schedulingPolicy: {basic: {}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: w-0, namespace: ml}
  spec:
    containers: [{name: c}]
    schedulingGroup: {podGroupName: workers}
"#;

    #[test]
    fn scheduling_k8s_io_pod_groups_load_beside_the_scheduler_plugins_kind() {
        let f = TempFile::new("groups.yaml", WORKLOAD_POD_GROUPS_YAML);
        let o = load_cluster_objects(f.path(), OnBadInput::Fail).expect("load");
        assert_eq!(o.workload_pod_groups.len(), 2);
        let beta = &o.workload_pod_groups[0];
        assert_eq!(beta.api_version, gang::V1BETA1);
        assert_eq!(beta.kind, "PodGroup");
        assert_eq!(beta.key(), "podgroups.scheduling.k8s.io/ml/workers");
        assert_eq!(beta.min_count(), Ok(Some(4)));
        assert_eq!(
            beta.scheduled_condition().map(|c| c.status.as_str()),
            Some("True")
        );
        let alpha = &o.workload_pod_groups[1];
        assert_eq!(alpha.api_version, gang::V1ALPHA2);
        assert_eq!(alpha.full_name(), "ml/loners");
        assert_eq!(alpha.min_count(), Ok(None), "basic");
        // The scheduler-plugins PodGroup of the same name is another object.
        assert_eq!(o.pod_groups.len(), 1);
        assert_eq!(o.pod_groups[0].full_name(), "ml/workers");
        assert_eq!(o.pods.len(), 1);
        let got: Vec<String> = o.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "groups.yaml: item 4 (PodGroup ml/future): skipped: PodGroup of apiVersion \
                 scheduling.k8s.io/v1alpha3 is not loaded (only scheduling.x-k8s.io/v1alpha1, \
                 scheduling.k8s.io/v1beta1 and scheduling.k8s.io/v1alpha2)"
            ]
        );

        // A run creates them too.
        let w = load_k8s_list(f.path(), OnBadInput::Fail).expect("load as workload");
        assert_eq!(w.workload_pod_groups, o.workload_pod_groups);
        assert_eq!(w.pod_groups.len(), 1);
        assert_eq!(w.warnings.len(), 1);

        // The same group twice is a duplicate, whatever its version.
        let twice = r#"
- {apiVersion: scheduling.k8s.io/v1beta1, kind: PodGroup, metadata: {name: g}, spec: {schedulingPolicy: {basic: {}}}}
- {apiVersion: scheduling.k8s.io/v1alpha2, kind: PodGroup, metadata: {name: g, namespace: default}, spec: {schedulingPolicy: {basic: {}}}}
"#;
        let f = TempFile::new("twice.yaml", twice);
        let err = load_cluster_objects(f.path(), OnBadInput::Fail).expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            "twice.yaml: item 2 (PodGroup default/g): duplicate object (first as item 1)"
        );
    }

    #[test]
    fn items_of_a_typed_pod_group_list_take_its_api_version() {
        // What a live server's list answers: items without apiVersion or kind.
        let json = r#"{"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroupList",
            "metadata": {"resourceVersion": "9"},
            "items": [{"metadata": {"name": "g", "namespace": "ml"},
                       "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}]}"#;
        let f = TempFile::new("list.json", json);
        let o = load_cluster_objects(f.path(), OnBadInput::Fail).expect("load");
        assert!(o.pod_groups.is_empty());
        assert_eq!(o.workload_pod_groups.len(), 1);
        let g = &o.workload_pod_groups[0];
        assert_eq!(
            (g.api_version.as_str(), g.kind.as_str()),
            (gang::V1ALPHA2, "PodGroup")
        );
        assert_eq!(g.min_count(), Ok(Some(3)));

        // No apiVersion anywhere: the scheduler-plugins kind, as before.
        let f = TempFile::new(
            "bare.yaml",
            "kind: PodGroupList\nitems:\n- metadata: {name: g}\n  spec: {minMember: 2}\n",
        );
        let o = load_cluster_objects(f.path(), OnBadInput::Fail).expect("load");
        assert_eq!(o.pod_groups.len(), 1);
        assert!(o.workload_pod_groups.is_empty());
    }

    #[test]
    fn bad_scheduling_k8s_io_pod_groups_name_the_object_and_field() {
        let cases = [
            (
                "kind: PodGroup\napiVersion: scheduling.k8s.io/v1beta1\nmetadata: {name: g}\n\
                 spec: {schedulingPolicy: {gang: {minCount: many}}}\n",
                "bad.yaml: item 1 (PodGroup default/g): spec.schedulingPolicy.gang.minCount: \
                 invalid type: string \"many\", expected i32",
            ),
            (
                "kind: PodGroup\napiVersion: scheduling.k8s.io/v1alpha2\nmetadata: {name: g, namespace: ml}\n\
                 spec: {schedulingPolicy: {basic: yes}}\n",
                "bad.yaml: item 1 (PodGroup ml/g): spec.schedulingPolicy.basic: \
                 invalid type: string \"yes\", expected a map",
            ),
            (
                "kind: PodGroup\napiVersion: scheduling.k8s.io/v1beta1\nmetadata: {namespace: ml}\n\
                 spec: {schedulingPolicy: {basic: {}}}\n",
                "bad.yaml: item 1 (PodGroup): metadata.name is missing",
            ),
        ];
        for (yaml, want) in cases {
            let f = TempFile::new("bad.yaml", yaml);
            let err = load_cluster_objects(f.path(), OnBadInput::Fail).expect_err(want);
            assert_eq!(err.to_string(), want);
            let o = load_cluster_objects(f.path(), OnBadInput::Skip).expect("skipped");
            assert!(o.workload_pod_groups.is_empty());
            assert_eq!(o.warnings.len(), 1);
        }
    }

    #[test]
    fn yaml_syntax_error_is_fatal() {
        let f = TempFile::new("broken.yaml", "kind: List\nitems:\n- {kind: Pod\n");
        let err = load_k8s_list(f.path(), OnBadInput::Skip).expect_err("syntax error");
        assert!(matches!(err, LoadError::Yaml { .. }), "{err}");
        assert!(
            err.to_string().starts_with("broken.yaml: invalid YAML"),
            "{err}"
        );

        let missing = f.path().with_file_name("nope.yaml");
        assert!(matches!(
            load_k8s_list(&missing, OnBadInput::Skip),
            Err(LoadError::Io { .. })
        ));
    }

    #[test]
    fn quantity_syntax() {
        for ok in [
            "1", "0", "100m", "1.5", ".5", "5.", "+1", "-1", "1Ki", "32Gi", "7Ei", "1e3", "1E3",
            "1E", "1.5e-3", "2e+6", "2n", "3u", "1k", "1M", "1G", "1T", "1P",
        ] {
            assert!(is_valid_quantity(ok), "{ok} should be valid");
        }
        for bad in [
            "", "abc", "1.2.3", "1KB", "Mi", "1e", "1e+", ".", "-", "1 Gi", "1ki", "1mi", "1e1.5",
            "+-1", "1Mi ", "1.5.Gi",
        ] {
            assert!(!is_valid_quantity(bad), "{bad:?} should be invalid");
        }
    }
}
