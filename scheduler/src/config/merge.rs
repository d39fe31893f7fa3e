//! Merging a profile's `plugins` into the defaults, as upstream's
//! `mergePlugins` / `mergePluginSet`
//! (`pkg/scheduler/apis/config/v1/default_plugins.go`):
//!
//! - the defaults are [`default_multi_point`] as `multiPoint.enabled`; every
//!   other point's default set is empty;
//! - per point, the custom `disabled` names (`"*"`: all) remove defaults;
//! - a default the user enables again is replaced *in place*: it keeps the
//!   default's position and takes the user's entry (its weight, or none);
//! - the other custom plugins are appended in the user's order, duplicates
//!   included (the framework then refuses the duplicate, as upstream's does);
//! - `disabled` is kept, so the multiPoint expansion
//!   ([`crate::framework::Framework::new`]) knows which points opted out.

use std::collections::HashMap;

use crate::framework::{PluginSet, Plugins, default_multi_point};

/// Merges `custom` into `default` for one extension point.
#[must_use]
pub(crate) fn merge_plugin_set(default: &PluginSet, custom: &PluginSet) -> PluginSet {
    let disabled: Vec<String> = custom
        .disabled
        .iter()
        .chain(default.disabled.iter())
        .cloned()
        .collect();
    let all_disabled = disabled.iter().any(|n| n == "*");
    // The last custom entry of a name is the one that replaces a default.
    let custom_index: HashMap<&str, usize> = custom
        .enabled
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    let mut replaced = vec![false; custom.enabled.len()];
    let mut enabled = Vec::new();
    if !all_disabled {
        for d in &default.enabled {
            if disabled.contains(&d.name) {
                continue;
            }
            match custom_index.get(d.name.as_str()) {
                Some(&i) => {
                    tracing::debug!(plugin = %d.name, "default plugin is explicitly re-configured; overriding");
                    replaced[i] = true;
                    enabled.push(custom.enabled[i].clone());
                }
                None => enabled.push(d.clone()),
            }
        }
    }
    enabled.extend(
        custom
            .enabled
            .iter()
            .zip(&replaced)
            .filter(|(_, r)| !**r)
            .map(|(p, _)| p.clone()),
    );
    PluginSet { enabled, disabled }
}

/// The defaults ([`default_multi_point`] as `multiPoint`) merged with the
/// profile's `custom` plugins (`None`: no `plugins` field, the defaults).
#[must_use]
pub(crate) fn merge_plugins(custom: Option<&Plugins>) -> Plugins {
    let default_multi = PluginSet {
        enabled: default_multi_point(),
        disabled: Vec::new(),
    };
    let Some(custom) = custom else {
        return Plugins {
            multi_point: default_multi,
            points: Default::default(),
        };
    };
    let empty = PluginSet::default();
    Plugins {
        multi_point: merge_plugin_set(&default_multi, &custom.multi_point),
        points: custom
            .points
            .iter()
            .map(|(point, set)| (*point, merge_plugin_set(&empty, set)))
            .filter(|(_, set)| !set.enabled.is_empty() || !set.disabled.is_empty())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::PluginRef;

    fn set(enabled: &[(&str, i64)], disabled: &[&str]) -> PluginSet {
        PluginSet {
            enabled: enabled.iter().map(|(n, w)| PluginRef::new(n, *w)).collect(),
            disabled: disabled.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn names(s: &PluginSet) -> Vec<(&str, i64)> {
        s.enabled
            .iter()
            .map(|p| (p.name.as_str(), p.weight))
            .collect()
    }

    // Upstream's TestMergePlugins cases (default_plugins_test.go) that
    // concern one point's set.
    #[test]
    fn merge_plugin_set_follows_upstream() {
        let d12 = set(&[("DefaultPlugin1", 0), ("DefaultPlugin2", 0)], &[]);
        let p123 = set(&[("Plugin1", 0), ("Plugin2", 0), ("Plugin3", 0)], &[]);
        type Case<'a> = (&'a str, &'a PluginSet, PluginSet, Vec<(&'a str, i64)>);
        let cases: Vec<Case<'_>> = vec![
            (
                "AppendCustomPlugin",
                &d12,
                set(&[("CustomPlugin", 0)], &[]),
                vec![
                    ("DefaultPlugin1", 0),
                    ("DefaultPlugin2", 0),
                    ("CustomPlugin", 0),
                ],
            ),
            (
                "InsertAfterDefaultPlugins2",
                &d12,
                set(
                    &[("CustomPlugin", 0), ("DefaultPlugin2", 0)],
                    &["DefaultPlugin2"],
                ),
                vec![
                    ("DefaultPlugin1", 0),
                    ("CustomPlugin", 0),
                    ("DefaultPlugin2", 0),
                ],
            ),
            (
                "InsertBeforeAllPlugins",
                &d12,
                set(
                    &[
                        ("CustomPlugin", 0),
                        ("DefaultPlugin1", 0),
                        ("DefaultPlugin2", 0),
                    ],
                    &["*"],
                ),
                vec![
                    ("CustomPlugin", 0),
                    ("DefaultPlugin1", 0),
                    ("DefaultPlugin2", 0),
                ],
            ),
            (
                "ReorderDefaultPlugins",
                &d12,
                set(&[("DefaultPlugin2", 0), ("DefaultPlugin1", 0)], &["*"]),
                vec![("DefaultPlugin2", 0), ("DefaultPlugin1", 0)],
            ),
            (
                "CustomPluginOverrideDefaultPlugin",
                &p123,
                set(&[("Plugin1", 2), ("Plugin3", 3)], &[]),
                vec![("Plugin1", 2), ("Plugin2", 0), ("Plugin3", 3)],
            ),
            (
                "OrderPreserveAfterOverride",
                &p123,
                set(&[("Plugin2", 2), ("Plugin1", 1)], &[]),
                vec![("Plugin1", 1), ("Plugin2", 2), ("Plugin3", 0)],
            ),
            (
                "RepeatedCustomPlugin",
                &p123,
                set(
                    &[
                        ("Plugin1", 0),
                        ("Plugin2", 2),
                        ("Plugin3", 0),
                        ("Plugin2", 4),
                    ],
                    &[],
                ),
                vec![
                    ("Plugin1", 0),
                    ("Plugin2", 4),
                    ("Plugin3", 0),
                    ("Plugin2", 2),
                ],
            ),
        ];
        for (what, default, custom, want) in cases {
            let got = merge_plugin_set(default, &custom);
            assert_eq!(names(&got), want, "{what}");
            assert_eq!(got.disabled, custom.disabled, "{what}: disabled kept");
        }
    }

    #[test]
    fn disabled_entries_of_the_default_set_are_kept_after_the_custom_ones() {
        // "disabled MultiPoint plugin in default set"
        let default = set(&[("DefaultPlugin", 0)], &["DefaultPlugin2"]);
        let got = merge_plugin_set(&default, &set(&[("CustomPlugin", 0)], &[]));
        assert_eq!(names(&got), [("DefaultPlugin", 0), ("CustomPlugin", 0)]);
        assert_eq!(got.disabled, ["DefaultPlugin2"]);
    }

    #[test]
    fn no_plugins_field_gives_the_defaults() {
        let merged = merge_plugins(None);
        assert_eq!(merged.multi_point.enabled, default_multi_point());
        assert!(merged.points.is_empty());
    }
}
