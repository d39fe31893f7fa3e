//! The scheduler configuration file: upstream's
//! `kubescheduler.config.k8s.io/v1` `KubeSchedulerConfiguration` (YAML or
//! JSON), loaded the way kube-scheduler loads `--config`:
//!
//! 1. **strict decoding**: every upstream v1 field is accepted
//!    (`staging/src/k8s.io/kube-scheduler/config/v1/types.go`); an unknown or
//!    misspelled field is an error. `apiVersion` must be
//!    `kubescheduler.config.k8s.io/v1` (the beta versions were removed
//!    upstream, v1beta3 in Kubernetes 1.29) and `kind`
//!    `KubeSchedulerConfiguration`.
//! 2. **defaulting** as upstream's `SetDefaults_KubeSchedulerConfiguration`
//!    (`pkg/scheduler/apis/config/v1/defaults.go`): `parallelism` 16,
//!    `percentageOfNodesToScore` 0 (adaptive), backoff 1 s / 10 s, one
//!    `default-scheduler` profile when there is none (the name is defaulted
//!    only when there is exactly one profile), leader election on with
//!    15 s / 10 s / 2 s and a `leases` lock `kube-system/kube-scheduler`,
//!    client QPS 50 / burst 100 / protobuf; each profile's `plugins` merged
//!    into the defaults as upstream's `mergePlugins` does (see `merge`).
//!    A profile without its own `percentageOfNodesToScore` gets the global
//!    one.
//! 3. **validation** as upstream's `ValidateKubeSchedulerConfiguration`
//!    (`pkg/scheduler/apis/config/validation/validation.go`) and the
//!    framework's `NewFramework`: `parallelism` > 0, percentages in 0..=100,
//!    backoffs > 0 with max ≥ initial, leader-election durations > 0 with
//!    `leaseDuration` > `renewDeadline` and a `leases` lock, profile names
//!    non-empty and unique, the same queue sort (plugin and args) in every
//!    profile, plugin names known to the [`Registry`], each plugin enabled
//!    only at points it implements and once per point, score weights
//!    non-negative int32 (0 counts as 1), and every profile instantiable by
//!    [`crate::framework::Framework::new`] with its `pluginConfig` args.
//!
//! The first problem is reported as one [`ConfigError`] naming the file and
//! the field path, e.g.
//! `sched.yaml: profiles[0].pluginConfig[1].args.scoringStrategy.type:
//! unknown variant ...`; syntax errors give the line and column.
//!
//! # Differences from upstream
//! - **`workloadClass`** (Flotilla's extension; upstream kube-scheduler
//!   would reject the field): an optional profile field, `online` or
//!   `batch`. Every pod selecting the profile (by `spec.schedulerName`) is
//!   dispatched to that worker pool, overriding the label / owner / QoS
//!   classification of [`flotilla_shared::workload`].
//! - **Not-implemented plugins**: upstream default plugins Flotilla lacks
//!   ([`crate::plugins::names::NOT_IMPLEMENTED`]: `DynamicResources`,
//!   `NodeDeclaredFeatures`) may be
//!   named. Disabling them is a no-op; enabling them is accepted but they are
//!   left out, with a warning saying what that means (e.g. ResourceClaims
//!   not allocated). Their `pluginConfig` is
//!   ignored with a warning.
//! - **`extenders`**: upstream's fields and rules (see [`crate::extender`]);
//!   Flotilla also refuses, at load time, a `urlPrefix` that is not an
//!   `http(s)://` URL and TLS settings that cannot be used (unreadable
//!   files, bad PEM), naming the field.
//! - **`placementWebhook`** (Flotilla's extension): an optional profile
//!   field delegating the choice of node to an HTTP service
//!   ([`crate::webhook`]).
//! - **`tieBreak`** (Flotilla's extension): an optional profile field,
//!   `Random` (the default, upstream's `selectHost`) or `NodeName`: among
//!   equally scored nodes the one with the smallest name wins, for
//!   reproducible runs (the FGD paper's simulator patches kube-scheduler
//!   the same way; `flotilla bench --scenario fgd` uses it).
//! - Unknown plugin names in `disabled` are errors (upstream ignores them),
//!   so a typo cannot leave a plugin enabled; upstream's own plugin names
//!   are always accepted there.
//! - Negative score weights are refused (upstream accepts any int32).
//! - Pod-group scheduling (`placementGenerate`, `placementScore`,
//!   `placementFeasible`, `podGroupPostFilter`,
//!   `percentageOfPlacementsToScore`) is accepted and validated, but no
//!   plugin can be enabled there: Flotilla has no pod-group scheduling.
//! - `leaderElection` and `clientConnection` are kept for the Kubernetes
//!   backend; `enableProfiling`, `enableContentionProfiling` and
//!   `delayCacheUntilActive` are accepted and kept, with no effect yet.
//!
//! ```
//! use flotilla_scheduler::config;
//! use flotilla_shared::WorkloadClass;
//!
//! let yaml = r#"
//! apiVersion: kubescheduler.config.k8s.io/v1
//! kind: KubeSchedulerConfiguration
//! profiles:
//!   - schedulerName: batch-scheduler
//!     workloadClass: batch
//!     plugins:
//!       score:
//!         disabled:
//!           - name: NodeResourcesBalancedAllocation
//! "#;
//! let cfg = config::parse(yaml, "sched.yaml").unwrap();
//! assert_eq!(cfg.profiles[0].workload_class, Some(WorkloadClass::Batch));
//! assert_eq!(cfg.profiles[0].scheduler_name, "batch-scheduler");
//! ```

mod duration;
mod error;
mod extenders;
mod merge;
mod types;
mod validate;

use std::path::Path;
use std::time::Duration;

use flotilla_shared::extender::ExtenderConfig;
use flotilla_shared::framework::ServedProfile;

pub use error::ConfigError;

use crate::framework::{Framework, Profile, Registry, RegistryError};
use crate::queue::{BackoffConfig, QueueConfig};

/// The only accepted `apiVersion`.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
/// The only accepted `kind`.
pub const KIND: &str = "KubeSchedulerConfiguration";
/// Upstream's default `parallelism`.
pub const DEFAULT_PARALLELISM: i32 = 16;
/// Upstream's default `podInitialBackoffSeconds` (1 s).
pub const DEFAULT_POD_INITIAL_BACKOFF: Duration =
    crate::queue::backoff::DEFAULT_POD_INITIAL_BACKOFF;
/// Upstream's default `podMaxBackoffSeconds` (10 s).
pub const DEFAULT_POD_MAX_BACKOFF: Duration = crate::queue::backoff::DEFAULT_POD_MAX_BACKOFF;
/// component-base's recommended `leaseDuration` (15 s).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// component-base's recommended `renewDeadline` (10 s).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// component-base's recommended `retryPeriod` (2 s).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// The scheduler's `resourceLock` (the only one it accepts).
pub const DEFAULT_RESOURCE_LOCK: &str = "leases";
/// The scheduler's lock object name.
pub const DEFAULT_RESOURCE_NAME: &str = "kube-scheduler";
/// The scheduler's lock object namespace.
pub const DEFAULT_RESOURCE_NAMESPACE: &str = "kube-system";
/// The scheduler's default `clientConnection.contentType`.
pub const DEFAULT_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The scheduler's default `clientConnection.qps`.
pub const DEFAULT_QPS: f32 = 50.0;
/// The scheduler's default `clientConnection.burst`.
pub const DEFAULT_BURST: u32 = 100;

/// `leaderElection` after defaulting (component-base
/// `LeaderElectionConfiguration`). A duration set to `0s` (or unset) takes
/// its default, as upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// `leaderElect`. Defaults to true.
    pub leader_elect: bool,
    /// `leaseDuration`: how long a non-leader waits before taking over.
    /// Defaults to 15 s; must be > `renew_deadline` when electing.
    pub lease_duration: Duration,
    /// `renewDeadline`: how long the leader retries renewing before giving
    /// up. Defaults to 10 s.
    pub renew_deadline: Duration,
    /// `retryPeriod`: wait between attempts. Defaults to 2 s.
    pub retry_period: Duration,
    /// `resourceLock`; only `leases` is accepted when electing.
    pub resource_lock: String,
    /// `resourceName`. Defaults to `kube-scheduler`.
    pub resource_name: String,
    /// `resourceNamespace`. Defaults to `kube-system`.
    pub resource_namespace: String,
}

impl Default for LeaderElection {
    fn default() -> Self {
        LeaderElection {
            leader_elect: true,
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            resource_lock: DEFAULT_RESOURCE_LOCK.to_owned(),
            resource_name: DEFAULT_RESOURCE_NAME.to_owned(),
            resource_namespace: DEFAULT_RESOURCE_NAMESPACE.to_owned(),
        }
    }
}

/// `clientConnection` after defaulting (component-base
/// `ClientConnectionConfiguration`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    /// `kubeconfig` path; empty: in-cluster / default loading rules.
    pub kubeconfig: String,
    /// `acceptContentTypes` (`Accept` header); empty: client default.
    pub accept_content_types: String,
    /// `contentType`. Defaults to `application/vnd.kubernetes.protobuf`.
    pub content_type: String,
    /// `qps` (requests per second). 0 → 50.
    pub qps: f32,
    /// `burst` (requests). 0 → 100; negative is an error.
    pub burst: u32,
}

impl Default for ClientConnection {
    fn default() -> Self {
        ClientConnection {
            kubeconfig: String::new(),
            accept_content_types: String::new(),
            content_type: DEFAULT_CONTENT_TYPE.to_owned(),
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

/// A loaded, defaulted and validated scheduler configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// The profiles, merged with the default plugins; pods select one by
    /// `spec.schedulerName` (= [`Profile::scheduler_name`]).
    pub profiles: Vec<Profile>,
    /// `parallelism`: threads for parallel Filter/Score (the rayon global
    /// pool). Defaults to 16.
    pub parallelism: usize,
    /// Global `percentageOfNodesToScore` (0 = adaptive); already applied to
    /// every profile that has none of its own.
    pub percentage_of_nodes_to_score: u32,
    /// `podInitialBackoffSeconds`. Defaults to 1 s.
    pub pod_initial_backoff: Duration,
    /// `podMaxBackoffSeconds`. Defaults to 10 s; ≥ the initial backoff.
    pub pod_max_backoff: Duration,
    /// `leaderElection` (for the Kubernetes backend).
    pub leader_election: LeaderElection,
    /// `clientConnection` (for the Kubernetes backend).
    pub client_connection: ClientConnection,
    /// `enableProfiling` (accepted, no effect yet). Defaults to true.
    pub enable_profiling: bool,
    /// `enableContentionProfiling` (accepted, no effect yet). Defaults to
    /// `enable_profiling`.
    pub enable_contention_profiling: bool,
    /// `delayCacheUntilActive` (accepted, no effect yet). Defaults to false.
    pub delay_cache_until_active: bool,
    /// `extenders`, in file order (see [`crate::extender`]).
    pub extenders: Vec<ExtenderConfig>,
}

impl Default for SchedulerConfig {
    /// What a file with only `apiVersion` and `kind` gives: one
    /// `default-scheduler` profile with the default plugins, and upstream's
    /// defaults everywhere.
    fn default() -> Self {
        SchedulerConfig {
            profiles: vec![Profile::default()],
            parallelism: DEFAULT_PARALLELISM.unsigned_abs() as usize,
            percentage_of_nodes_to_score: 0,
            pod_initial_backoff: DEFAULT_POD_INITIAL_BACKOFF,
            pod_max_backoff: DEFAULT_POD_MAX_BACKOFF,
            leader_election: LeaderElection::default(),
            client_connection: ClientConnection::default(),
            enable_profiling: true,
            enable_contention_profiling: true,
            delay_cache_until_active: false,
            extenders: Vec::new(),
        }
    }
}

impl SchedulerConfig {
    /// Validates this configuration against `registry` (e.g. one with
    /// out-of-tree plugins): the checks [`parse`] runs on a file, on the
    /// merged form. Useful for configurations built or changed in code.
    /// Errors name `pluginConfig` entries by their position in name order.
    ///
    /// # Errors
    /// The first problem, with its field path (file name `configuration`).
    pub fn validate_with(&self, registry: &Registry) -> Result<(), ConfigError> {
        validate::validate_built(self, registry).map_err(|e| e.in_file("configuration"))
    }

    /// The profile pods with `spec.schedulerName == name` use.
    #[must_use]
    pub fn profile(&self, scheduler_name: &str) -> Option<&Profile> {
        self.profiles
            .iter()
            .find(|p| p.scheduler_name == scheduler_name)
    }

    /// Each profile as the coordinator serves it: its scheduler name, its
    /// `workloadClass`, and the bind checks of its enabled Filter plugins
    /// (in Filter order) with the names of those that provide none, built
    /// from `registry` exactly as the workers build the profile's
    /// framework, so the bind arbiter re-checks what the workers filter on.
    ///
    /// # Errors
    /// A profile that does not make a framework with `registry` (an
    /// unknown plugin, bad args: [`Framework::new`]'s errors).
    pub fn served_profiles(
        &self,
        registry: &Registry,
    ) -> Result<Vec<ServedProfile>, RegistryError> {
        self.profiles
            .iter()
            .map(|p| {
                let fw = Framework::new(p, registry)?;
                Ok(ServedProfile {
                    fingerprint: p.fingerprint(),
                    scheduler_name: p.scheduler_name.clone(),
                    workload_class: p.workload_class,
                    bind_checks: fw.bind_checks().to_vec(),
                    unchecked_filters: fw
                        .unchecked_filters()
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                })
            })
            .collect()
    }

    /// Queue settings with this configuration's backoffs (the jitter and the
    /// unschedulable timeout keep their defaults).
    #[must_use]
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            backoff: BackoffConfig {
                initial: self.pod_initial_backoff,
                max: self.pod_max_backoff,
                ..BackoffConfig::default()
            },
            ..QueueConfig::default()
        }
    }

    /// Sizes rayon's global pool (parallel Filter/Score): `parallelism`
    /// threads, but never more than the machine's CPUs ([`pool_threads`]).
    /// Call once at startup, before any scheduling.
    ///
    /// # Errors
    /// The global pool was already built.
    pub fn build_global_thread_pool(&self) -> Result<(), rayon::ThreadPoolBuildError> {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        rayon::ThreadPoolBuilder::new()
            .num_threads(pool_threads(self.parallelism, cpus))
            .thread_name(|i| format!("filter-score-{i}"))
            .build_global()
    }
}

/// Threads of the parallel Filter/Score pool for `parallelism` on a machine
/// with `cpus` CPUs: `min(parallelism, cpus)`, at least 1. Upstream's
/// `parallelism` bounds goroutines, which are cheap; here the work is CPU-bound
/// on OS threads, so threads beyond the CPUs only add switching (and a huge
/// value would start that many threads).
#[must_use]
pub fn pool_threads(parallelism: usize, cpus: usize) -> usize {
    parallelism.min(cpus).max(1)
}

/// Parses a configuration (YAML or JSON) with the in-tree plugins.
/// `source` names it in errors (usually the file name).
///
/// # Errors
/// The first problem found (see [`ConfigError`]).
pub fn parse(text: &str, source: &str) -> Result<SchedulerConfig, ConfigError> {
    parse_with(text, source, &Registry::in_tree())
}

/// [`parse`] with a given plugin registry (e.g. with out-of-tree plugins).
///
/// # Errors
/// The first problem found (see [`ConfigError`]).
pub fn parse_with(
    text: &str,
    source: &str,
    registry: &Registry,
) -> Result<SchedulerConfig, ConfigError> {
    let doc = document(text, source)?;
    validate::check_type_meta(&doc).map_err(|e| e.in_file(source))?;
    let raw = validate::decode(doc).map_err(|e| e.in_file(source))?;
    validate::build(raw, registry).map_err(|e| e.in_file(source))
}

/// Reads and parses `path` with the in-tree plugins.
///
/// # Errors
/// The file cannot be read, or see [`parse`].
pub fn load_file(path: &Path) -> Result<SchedulerConfig, ConfigError> {
    load_file_with(path, &Registry::in_tree())
}

/// [`load_file`] with a given plugin registry.
///
/// # Errors
/// The file cannot be read, or see [`parse`].
pub fn load_file_with(path: &Path, registry: &Registry) -> Result<SchedulerConfig, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: file.clone(),
        source,
    })?;
    parse_with(&text, &file, registry)
}

/// The text as a JSON value: JSON when `source` ends in `.json`, or when
/// the text starts with `{` and parses as JSON; YAML otherwise (YAML 1.2 core schema: only `true`/`false` are
/// booleans; duplicate keys are errors).
fn document(text: &str, source: &str) -> Result<serde_json::Value, ConfigError> {
    let syntax = |line: u64, column: u64, message: String| ConfigError::Syntax {
        file: source.to_owned(),
        line,
        column,
        message,
    };
    let json_file = Path::new(source)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if json_file || text.trim_start().starts_with('{') {
        match serde_json::from_str(text) {
            Ok(v) => return Ok(v),
            // Flow-style YAML also starts with `{`; if the text is not YAML
            // either (or the file says it is JSON), the JSON error it is.
            Err(e) if json_file || yaml(text).is_err() => {
                let mut message = e.to_string();
                // serde_json appends " at line L column C"; we put it first.
                if let Some(cut) = message.rfind(" at line ") {
                    message.truncate(cut);
                }
                return Err(syntax(e.line() as u64, e.column() as u64, message));
            }
            Err(_) => {}
        }
    }
    yaml(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        let mut message = e.without_snippet().to_string();
        // The rendered message may end with its own " at line L column C",
        // and a hint meant for the library's users, not ours.
        for tail in [" at line ", ", set DuplicateKeyPolicy"] {
            if let Some(cut) = message.rfind(tail) {
                message.truncate(cut);
            }
        }
        if message.starts_with("multiple YAML documents detected") {
            message = "more than one YAML document: a configuration file holds exactly one \
                       KubeSchedulerConfiguration"
                .to_owned();
        }
        syntax(line, column, message)
    })
}

fn yaml(text: &str) -> Result<serde_json::Value, serde_saphyr::Error> {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    let v: Option<serde_json::Value> = serde_saphyr::from_str_with_options(text, options)?;
    Ok(v.unwrap_or(serde_json::Value::Null))
}

#[cfg(test)]
mod pool_tests {
    use super::pool_threads;

    #[test]
    fn the_pool_never_exceeds_the_cpus_nor_drops_below_one() {
        assert_eq!(
            pool_threads(16, 2),
            2,
            "upstream default on a 2-core machine"
        );
        assert_eq!(pool_threads(1, 8), 1);
        assert_eq!(
            pool_threads(100_000, 64),
            64,
            "a huge value starts no huge pool"
        );
        assert_eq!(pool_threads(4, 0), 1);
    }
}
