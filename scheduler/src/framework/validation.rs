//! Plugin-args validation messages in upstream's `field.Error` format:
//! `<path>: <kind>: <detail>`, the path relative to the args object as
//! upstream prints a `field.Path` (e.g. `scoringStrategy.resources[1].weight`),
//! so the config loader can prefix `profiles[0].pluginConfig[1].args.`.
//!
//! Also upstream's `ValidateLabelName` (`IsQualifiedName`) with its exact
//! messages, which several plugin args use for resource and key names.

use std::fmt;

/// `<path>: Invalid value: <value>: <detail>` (upstream `field.Invalid`).
/// Pass strings through [`quote`] first, numbers as they are.
#[must_use]
pub fn invalid(path: &str, value: impl fmt::Display, detail: &str) -> String {
    format!("{path}: Invalid value: {value}: {detail}")
}

/// `<path>: Unsupported value: "<value>": supported values: "a", "b"`
/// (upstream `field.NotSupported`).
#[must_use]
pub fn not_supported(path: &str, value: &str, supported: &[&str]) -> String {
    let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
    format!(
        "{path}: Unsupported value: {}: supported values: {}",
        quote(value),
        list.join(", ")
    )
}

/// `<path>: Required value: <detail>` (upstream `field.Required`).
#[must_use]
pub fn required(path: &str, detail: &str) -> String {
    format!("{path}: Required value: {detail}")
}

/// `<path>: Duplicate value: "<value>"` (upstream `field.Duplicate`).
#[must_use]
pub fn duplicate(path: &str, value: &str) -> String {
    format!("{path}: Duplicate value: {}", quote(value))
}

/// `<path>: Forbidden: <detail>` (upstream `field.Forbidden`).
#[must_use]
pub fn forbidden(path: &str, detail: &str) -> String {
    format!("{path}: Forbidden: {detail}")
}

/// A string as Go's `%q` prints it (for the ASCII names configs use).
#[must_use]
pub fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// All errors at once, joined by `"; "` so the message starts with the first
/// error's path; `Ok` when there are none.
///
/// # Errors
/// The joined messages.
pub fn collect(errors: Vec<String>) -> Result<(), String> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// Upstream `RegexError`: `<msg> (e.g. 'a',  or 'b', regex used for
/// validation is '<fmt>')` (the double space is upstream's).
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, anchored.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// One DNS-1123 label of a subdomain: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            lower_alnum(f) && lower_alnum(l) && b.iter().all(|c| lower_alnum(c) || *c == b'-')
        }
        _ => false,
    }
}

/// Upstream `IsDNS1123Subdomain` messages (empty when valid).
fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX_LENGTH} characters"
        ));
    }
    if !value.split('.').all(is_dns1123_label) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Upstream `IsQualifiedName` messages for `value` (empty when valid): an
/// optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// alphanumeric, `-`, `_` or `.` characters starting and ending
/// alphanumeric (the rule for label keys and resource names).
#[must_use]
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX_LENGTH} characters"
        ));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Upstream `ValidateLabelName`: one `Invalid value` error per
/// [`qualified_name_errors`] message.
#[must_use]
pub fn label_name_errors(path: &str, value: &str) -> Vec<String> {
    qualified_name_errors(value)
        .into_iter()
        .map(|m| invalid(path, quote(value), &m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_follow_upstream_rules_and_messages() {
        for ok in [
            "cpu",
            "example.com/foo",
            "nvidia.com/gpu",
            "hugepages-2Mi",
            "a.b_c-d",
            "x",
        ] {
            assert!(qualified_name_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            label_name_errors("ignoredResources[0]", "-bad"),
            [
                "ignoredResources[0]: Invalid value: \"-bad\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
        assert_eq!(
            qualified_name_errors("Example.com/foo"),
            [
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert_eq!(
            qualified_name_errors("/foo"),
            ["prefix part must be non-empty"]
        );
        let empty = qualified_name_errors("");
        assert_eq!(empty.len(), 2, "upstream reports both: {empty:?}");
        assert_eq!(empty[0], "name part must be non-empty");
        assert_eq!(
            qualified_name_errors(&"a".repeat(64)),
            ["name part must be no more than 63 characters"]
        );
        assert!(qualified_name_errors("a/b/c")[0].starts_with("a qualified name must consist"));
    }

    #[test]
    fn field_errors_read_like_upstream() {
        assert_eq!(
            invalid("resources[0].weight", 0, "must be 1"),
            "resources[0].weight: Invalid value: 0: must be 1"
        );
        assert_eq!(
            not_supported("scoringStrategy.type", "Bogus", &["A", "B"]),
            "scoringStrategy.type: Unsupported value: \"Bogus\": supported values: \"A\", \"B\""
        );
        assert_eq!(
            required("x.shape", "at least one point must be specified"),
            "x.shape: Required value: at least one point must be specified"
        );
        assert_eq!(
            duplicate("resources[1].name", "cpu"),
            "resources[1].name: Duplicate value: \"cpu\""
        );
        assert_eq!(collect(vec![]), Ok(()));
        assert_eq!(
            collect(vec!["a: x".into(), "b: y".into()]),
            Err("a: x; b: y".into())
        );
    }
}
