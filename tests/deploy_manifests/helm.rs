//! Renders a Helm chart the way `helm template` does, for the subset of Helm
//! the Flotilla chart is allowed to use: Go templates (`gtmpl`, a port of Go's
//! `text/template`) with the root object `.Values` / `.Release` / `.Chart`,
//! plus Helm's functions `include`, `toYaml` and `nindent`, and for the
//! generated TLS Secrets `b64enc`, `int`, `list`, `dict` and stand-ins for
//! the certificate functions: `lookup` finds nothing (as `helm template`,
//! with no cluster), `genCA`, `genSignedCert` and `buildCustomCert` return
//! `{Cert, Key}` whose text is not a certificate but records what it was
//! asked for (`fake certificate cn=... dns=[...] days=... ca=...`), so a
//! test reads back the names each certificate would carry.
//!
//! Anything else (other Sprig functions, `.Capabilities`, `tpl`, `.Files`)
//! fails to parse or to render, so the chart cannot drift into constructs this
//! check does not cover. A value the templates read but the values do not set
//! renders as `<no value>` in Go; Helm would print an empty string, here it is
//! an error naming the template.
//!
//! Helm behaviour mirrored (helm.sh/helm/v3 `pkg/engine/funcs.go`,
//! `pkg/engine/engine.go`, Sprig `strings.go`):
//! - `toYaml v`: the YAML of `v` without its final newline;
//! - `nindent n s`: a newline, then `s` with every line indented by `n`
//!   spaces (empty lines included);
//! - `include name data`: the named template (`define`) rendered with `data`
//!   as dot, returned as a string so it can be piped;
//! - values: `values.yaml` deep-merged with the overrides (maps merge key by
//!   key, anything else is replaced);
//! - templates: every `templates/*` file not starting with `_`, in name
//!   order; named templates come from every `templates/_*.tpl` file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

use gtmpl::{Context, Func, FuncError, Template, Value};
use serde_json::Value as Json;

thread_local! {
    /// The chart's `_*.tpl` text, for `include` (a plain `fn`, so it cannot
    /// capture the template it is called from).
    static HELPERS: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The functions templates may call besides Go's builtins.
const HELM_FUNCS: [(&str, Func); 11] = [
    ("include", include as Func),
    ("toYaml", to_yaml as Func),
    ("nindent", nindent as Func),
    ("b64enc", b64enc as Func),
    ("int", int as Func),
    ("list", list as Func),
    ("dict", dict as Func),
    ("lookup", lookup as Func),
    ("genCA", gen_ca as Func),
    ("genSignedCert", gen_signed_cert as Func),
    ("buildCustomCert", build_custom_cert as Func),
];

/// One rendered template file.
#[derive(Debug)]
pub struct Rendered {
    /// File name under `templates/`.
    pub file: String,
    /// Rendered text.
    pub text: String,
}

/// The release the chart is rendered for.
pub struct Release<'a> {
    /// `.Release.Name`.
    pub name: &'a str,
    /// `.Release.Namespace`.
    pub namespace: &'a str,
}

/// Renders every template of the chart in `chart_dir` with its
/// `values.yaml` deep-merged with `overrides` (a JSON object, or null).
///
/// # Errors
/// A message naming the file for unreadable files, YAML that does not parse,
/// template parse or execution errors, and `<no value>` in the output.
pub fn render_chart(
    chart_dir: &Path,
    overrides: &Json,
    release: &Release<'_>,
) -> Result<Vec<Rendered>, String> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let parse_yaml = |p: &Path| -> Result<Json, String> {
        serde_saphyr::from_str::<Json>(&read(p)?)
            .map_err(|e| format!("{} is not valid YAML: {e}", p.display()))
    };
    let chart = parse_yaml(&chart_dir.join("Chart.yaml"))?;
    let mut values = parse_yaml(&chart_dir.join("values.yaml"))?;
    merge_values(&mut values, overrides);

    let chart_field = |key: &str| chart.get(key).cloned().unwrap_or(Json::Null);
    let root = serde_json::json!({
        "Values": values,
        "Release": {
            "Name": release.name,
            "Namespace": release.namespace,
            "Service": "Helm",
            "IsInstall": true,
            "IsUpgrade": false,
            "Revision": 1,
        },
        "Chart": {
            "Name": chart_field("name"),
            "Version": chart_field("version"),
            "AppVersion": chart_field("appVersion"),
            "Description": chart_field("description"),
        },
    });

    let templates_dir = chart_dir.join("templates");
    let mut files: Vec<_> = std::fs::read_dir(&templates_dir)
        .map_err(|e| format!("cannot list {}: {e}", templates_dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let name_of = |p: &Path| {
        p.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };

    let mut helpers = String::new();
    for p in files.iter().filter(|p| name_of(p).starts_with('_')) {
        helpers.push_str(&read(p)?);
        helpers.push('\n');
    }
    HELPERS.with(|h| h.borrow_mut().clone_from(&helpers));

    let context = Context::from(json_to_value(&root));
    let mut out = Vec::new();
    for p in files.iter().filter(|p| !name_of(p).starts_with('_')) {
        let file = name_of(p);
        let mut t = new_template(&file);
        t.add_template("_helpers", helpers.clone())
            .map_err(|e| format!("templates/_*.tpl: {e}"))?;
        t.parse(read(p)?)
            .map_err(|e| format!("templates/{file}: {e}"))?;
        let text = t
            .render(&context)
            .map_err(|e| format!("templates/{file}: {e}"))?;
        if text.contains("<no value>") {
            return Err(format!(
                "templates/{file} reads a value that is not set (rendered `<no value>`):\n{text}"
            ));
        }
        out.push(Rendered { file, text });
    }
    Ok(out)
}

/// Helm's values merge: maps merge key by key; anything else in `over`
/// replaces what is in `base`.
pub fn merge_values(base: &mut Json, over: &Json) {
    match (base, over) {
        (Json::Object(b), Json::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge_values(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (_, Json::Null) => {}
        (b, o) => *b = o.clone(),
    }
}

fn new_template(name: &str) -> Template {
    let mut t = Template::with_name(name);
    t.add_funcs(&HELM_FUNCS);
    t
}

/// JSON (from YAML) → template value. Objects become maps, so field access
/// (`.Values.image.tag`) and `range` work as on Helm's `map[string]any`.
pub fn json_to_value(j: &Json) -> Value {
    match j {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(json_to_value).collect()),
        Json::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| (k.clone(), json_to_value(v)))
                .collect::<HashMap<_, _>>(),
        ),
    }
}

/// Template value → JSON, for `toYaml`.
fn value_to_json(v: &Value) -> Result<Json, FuncError> {
    Ok(match v {
        Value::NoValue | Value::Nil => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::String(s) => Json::String(s.clone()),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Json::from(u)
            } else if let Some(i) = n.as_i64() {
                Json::from(i)
            } else {
                n.as_f64().map(Json::from).unwrap_or(Json::Null)
            }
        }
        Value::Array(a) => Json::Array(a.iter().map(value_to_json).collect::<Result<_, _>>()?),
        Value::Map(m) | Value::Object(m) => Json::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), value_to_json(v)?)))
                .collect::<Result<_, FuncError>>()?,
        ),
        Value::Function(_) => {
            return Err(FuncError::Generic(
                "toYaml: cannot encode a function".into(),
            ));
        }
    })
}

/// `toYaml v`: Helm's `toYAML`, the YAML of `v` without its final newline.
fn to_yaml(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = args else {
        return Err(FuncError::ExactlyXArgs("toYaml".into(), 1));
    };
    let yaml = serde_saphyr::to_string(&value_to_json(v)?)
        .map_err(|e| FuncError::Generic(format!("toYaml: {e}")))?;
    Ok(Value::String(yaml.trim_end_matches('\n').to_owned()))
}

/// `nindent n s`: Sprig's `nindent`, `"\n" + indent(n, s)` where `indent`
/// prefixes every line (empty ones too) with `n` spaces.
fn nindent(args: &[Value]) -> Result<Value, FuncError> {
    let [n, s] = args else {
        return Err(FuncError::ExactlyXArgs("nindent".into(), 2));
    };
    let Value::Number(n) = n else {
        return Err(FuncError::Generic(format!(
            "nindent: width {n} is not a number"
        )));
    };
    let width = n
        .as_u64()
        .and_then(|w| usize::try_from(w).ok())
        .ok_or_else(|| {
            FuncError::Generic("nindent: width must be a non-negative integer".into())
        })?;
    let pad = " ".repeat(width);
    let text = match s {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(Value::String(format!(
        "\n{pad}{}",
        text.replace('\n', &format!("\n{pad}"))
    )))
}

/// `include name data`: the named template rendered with `data` as dot.
fn include(args: &[Value]) -> Result<Value, FuncError> {
    let [Value::String(name), data] = args else {
        return Err(FuncError::Generic(
            "include takes a template name (a string) and the data".into(),
        ));
    };
    let helpers = HELPERS.with(|h| h.borrow().clone());
    let mut t = new_template("include");
    t.add_template("_helpers", helpers)
        .map_err(|e| FuncError::Generic(format!("include {name:?}: {e}")))?;
    // A Go string literal: the name is quoted the way Rust's Debug quotes it,
    // which agrees with Go for the plain names templates use.
    t.parse(format!("{{{{ template {name:?} . }}}}"))
        .map_err(|e| FuncError::Generic(format!("include {name:?}: {e}")))?;
    let out = t
        .render(&Context::from(data.clone()))
        .map_err(|e| FuncError::Generic(format!("include {name:?}: {e}")))?;
    Ok(Value::String(out))
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `b64enc s`: standard base64 of the string.
fn b64enc(args: &[Value]) -> Result<Value, FuncError> {
    use base64::Engine as _;
    let [s] = args else {
        return Err(FuncError::ExactlyXArgs("b64enc".into(), 1));
    };
    Ok(Value::String(
        base64::engine::general_purpose::STANDARD.encode(text_of(s)),
    ))
}

/// `int v`: a number (integers pass, numeric strings parse).
fn int(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = args else {
        return Err(FuncError::ExactlyXArgs("int".into(), 1));
    };
    match v {
        Value::Number(n) if n.as_i64().is_some() => Ok(v.clone()),
        Value::String(s) => s
            .parse::<i64>()
            .map(Value::from)
            .map_err(|e| FuncError::Generic(format!("int {s:?}: {e}"))),
        other => Err(FuncError::Generic(format!(
            "int: {other} is not an integer"
        ))),
    }
}

/// `list a b ...`: the arguments as a list.
fn list(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Array(args.to_vec()))
}

/// `dict k1 v1 k2 v2 ...`: a map.
fn dict(args: &[Value]) -> Result<Value, FuncError> {
    if !args.len().is_multiple_of(2) {
        return Err(FuncError::Generic("dict takes key/value pairs".into()));
    }
    Ok(Value::Map(
        args.chunks(2)
            .map(|kv| (text_of(&kv[0]), kv[1].clone()))
            .collect(),
    ))
}

/// `lookup apiVersion kind namespace name`: what `helm template` sees, an
/// empty map (nothing in a cluster).
fn lookup(args: &[Value]) -> Result<Value, FuncError> {
    if args.len() != 4 {
        return Err(FuncError::ExactlyXArgs("lookup".into(), 4));
    }
    Ok(Value::Map(HashMap::new()))
}

/// `{Cert, Key}` as Helm's certificate functions return them.
fn cert_pair(cert: String, key: String) -> Value {
    Value::Map(HashMap::from([
        ("Cert".to_owned(), Value::String(cert)),
        ("Key".to_owned(), Value::String(key)),
    ]))
}

fn names(v: &Value) -> Result<String, FuncError> {
    match v {
        Value::Array(a) => Ok(a.iter().map(text_of).collect::<Vec<_>>().join(",")),
        Value::Nil | Value::NoValue => Ok(String::new()),
        other => Err(FuncError::Generic(format!("{other} is not a list"))),
    }
}

fn days(v: &Value) -> Result<u64, FuncError> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| FuncError::Generic(format!("days {n} is not a positive integer"))),
        other => Err(FuncError::Generic(format!(
            "days {other} is not a number (use int)"
        ))),
    }
}

/// `genCA cn days`: a stand-in CA, `fake CA cn=<cn> days=<days>`.
fn gen_ca(args: &[Value]) -> Result<Value, FuncError> {
    let [cn, d] = args else {
        return Err(FuncError::ExactlyXArgs("genCA".into(), 2));
    };
    let cn = text_of(cn);
    Ok(cert_pair(
        format!("fake CA cn={cn} days={}", days(d)?),
        format!("fake CA key cn={cn}"),
    ))
}

/// `genSignedCert cn ips dnsNames days ca`: a stand-in certificate,
/// `fake certificate cn=<cn> ips=[..] dns=[..] days=<days> ca=<the CA's text>`.
fn gen_signed_cert(args: &[Value]) -> Result<Value, FuncError> {
    let [cn, ips, dns, d, ca] = args else {
        return Err(FuncError::ExactlyXArgs("genSignedCert".into(), 5));
    };
    let Value::Map(ca) = ca else {
        return Err(FuncError::Generic(
            "genSignedCert: the CA is not {Cert, Key}".into(),
        ));
    };
    let ca_cert = ca.get("Cert").map(text_of).unwrap_or_default();
    let cn = text_of(cn);
    Ok(cert_pair(
        format!(
            "fake certificate cn={cn} ips=[{}] dns=[{}] days={} ca=({ca_cert})",
            names(ips)?,
            names(dns)?,
            days(d)?
        ),
        format!("fake key cn={cn}"),
    ))
}

/// `buildCustomCert b64cert b64key`: the pair decoded.
fn build_custom_cert(args: &[Value]) -> Result<Value, FuncError> {
    use base64::Engine as _;
    let [c, k] = args else {
        return Err(FuncError::ExactlyXArgs("buildCustomCert".into(), 2));
    };
    let decode = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(text_of(v))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| FuncError::Generic(format!("buildCustomCert: {e}")))
    };
    Ok(cert_pair(decode(c)?, decode(k)?))
}
