//! Every recorded test vector of the original as a named test: load
//! vectors, matching vectors, `replaces` and cache keys. The vectors are extracted to `integration/compat/`
//! by `integration/compat/extract.py`; their expectations are the original
//! service's outputs.
//!
//! Run one: `cargo test --test config_vectors -- 'match/TestWildcardConfig/'`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use libtest_mimic::{Arguments, Failed, Trial};
use ratelimit::config::{
    self, ConfigFile, Entry, LimitOverride, Lookup, MatchedLimit, Metadata, MetadataValue,
};
use ratelimit::engine::aggregate::{apply_replaces, Disposition};
use ratelimit::limiter::Unit;
use ratelimit::store::key::fixed_window_key;
use serde_json::Value;

/// Vectors where this service deliberately differs from the original, with
/// the reason; the test asserts our behaviour instead.
const DELIBERATE: &[(&str, &str)] = &[
    (
        "extra/detailed-metric-edge/detailed-empty-value-keeps-underscore",
        "the original drops rule metadata when detailed_metric rewrites the stats key; we keep it",
    ),
    (
        "extra/detailed-metric-edge/detailed-leaf-loses-metadata",
        "the original drops rule metadata when detailed_metric rewrites the stats key; we keep it",
    ),
    (
        "extra/detailed-metric-edge/v2m-changed-key-loses-metadata",
        "the original drops rule metadata when value_to_metric rewrites the stats key; we keep it",
    ),
];

fn compat_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("integration/compat")
}

fn vectors(name: &str) -> Vec<Value> {
    let path = compat_dir().join("vectors").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).expect("vector file is committed");
    serde_json::from_str(&text).expect("vector file is JSON")
}

fn files(config: &Value) -> Vec<ConfigFile> {
    if let Some(fixtures) = config.get("fixtures").and_then(Value::as_array) {
        return fixtures
            .iter()
            .map(|f| {
                let name = f.as_str().expect("fixture name");
                let bytes = std::fs::read(compat_dir().join("fixtures").join(name))
                    .expect("fixture is committed");
                ConfigFile::new(name, bytes)
            })
            .collect();
    }
    config["inline"]
        .as_array()
        .expect("inline files")
        .iter()
        .map(|f| {
            ConfigFile::new(
                f["name"].as_str().expect("name"),
                f["yaml"].as_str().expect("yaml").as_bytes().to_vec(),
            )
        })
        .collect()
}

fn merge(v: &Value) -> bool {
    v.get("merge_domain_config")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), Failed> {
    if cond {
        Ok(())
    } else {
        Err(msg().into())
    }
}

fn load_trial(v: Value) -> Trial {
    let id = format!("load/{}", v["id"].as_str().expect("id"));
    Trial::test(id, move || {
        let result = config::load(&files(&v["config"]), merge(&v));
        if let Some(expected) = v.get("expect_error").and_then(Value::as_str) {
            let err = result.err().ok_or("loaded, but an error was expected")?;
            return check(err.to_string() == expected, || {
                format!("error\n  got:  {err}\n  want: {expected}")
            });
        }
        if let Some(prefix) = v.get("expect_error_prefix").and_then(Value::as_str) {
            let err = result.err().ok_or("loaded, but an error was expected")?;
            return check(err.to_string().starts_with(prefix), || {
                format!("error\n  got:  {err}\n  want prefix: {prefix}")
            });
        }
        let cfg = result.map_err(|e| format!("load failed: {}", e.detailed()))?;
        let mut got: Vec<String> = cfg.dump().lines().map(str::to_string).collect();
        got.sort();
        let want: Vec<String> = v["expect_dump_sorted"]
            .as_array()
            .expect("expect_dump_sorted")
            .iter()
            .map(|l| l.as_str().expect("line").to_string())
            .collect();
        check(got == want, || {
            format!("dump\n  got:  {got:#?}\n  want: {want:#?}")
        })
    })
}

fn entries(v: &Value) -> Vec<Entry> {
    v.as_array()
        .expect("entries")
        .iter()
        .map(|e| Entry::new(e[0].as_str().expect("key"), e[1].as_str().expect("value")))
        .collect()
}

fn metadata_json(m: &Metadata) -> Value {
    fn value(v: &MetadataValue) -> Value {
        match v {
            MetadataValue::Null => Value::Null,
            MetadataValue::Bool(b) => Value::Bool(*b),
            MetadataValue::Number(n) => serde_json::json!(n),
            MetadataValue::String(s) => Value::String(s.clone()),
            MetadataValue::List(l) => Value::Array(l.iter().map(value).collect()),
            MetadataValue::Struct(m) => metadata_json(m),
        }
    }
    Value::Object(m.0.iter().map(|(k, v)| (k.clone(), value(v))).collect())
}

/// A matched limit in the vectors' notation: always rpu, unit, stats_key;
/// other fields only when not at their default.
fn describe(m: &MatchedLimit) -> BTreeMap<String, Value> {
    let r = &m.rule;
    let mut out = BTreeMap::new();
    out.insert(
        "requests_per_unit".into(),
        serde_json::json!(r.requests_per_unit),
    );
    out.insert("unit".into(), Value::String(r.unit.name().into()));
    out.insert("stats_key".into(), Value::String(m.stats_key.clone()));
    if !r.name.is_empty() {
        out.insert("name".into(), Value::String(r.name.clone()));
    }
    for (flag, on) in [
        ("unlimited", r.unlimited),
        ("shadow_mode", r.shadow_mode),
        ("quota_mode", r.quota_mode),
        ("detailed_metric", r.detailed_metric),
    ] {
        if on {
            out.insert(flag.into(), Value::Bool(true));
        }
    }
    if !r.replaces.is_empty() {
        out.insert("replaces".into(), serde_json::json!(r.replaces));
    }
    if let Some(p) = &m.share_threshold_key_pattern {
        out.insert("share_threshold_key_pattern".into(), serde_json::json!(p));
    }
    if let Some(md) = &r.metadata {
        out.insert("metadata".into(), metadata_json(md));
    }
    out
}

fn normalise(expect: &Value) -> BTreeMap<String, Value> {
    expect
        .as_object()
        .expect("expect object")
        .iter()
        .map(|(k, v)| {
            // JSON ints and our doubles compare as numbers.
            let v = match v {
                Value::Object(_) => normalise_numbers(v),
                _ => v.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

fn normalise_numbers(v: &Value) -> Value {
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(normalise_numbers).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), normalise_numbers(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn match_trials(group: Value, out: &mut Vec<Trial>) {
    let name = group["group"].as_str().expect("group").to_string();
    for case in group["cases"].as_array().expect("cases").clone() {
        let group = group.clone();
        let id = format!("{name}/{}", case["id"].as_str().expect("id"));
        let deliberate = DELIBERATE.iter().find(|(d, _)| *d == id).is_some();
        out.push(Trial::test(format!("match/{id}"), move || {
            let cfg = config::load(&files(&group["config"]), merge(&group))
                .map_err(|e| format!("config failed to load: {e}"))?;
            let req = &case["request"];
            let domain = req["domain"].as_str().expect("domain");
            let over = req.get("limit_override").map(|o| LimitOverride {
                requests_per_unit: o["requests_per_unit"].as_u64().expect("rpu") as u32,
                unit: Unit::from_name(o["unit"].as_str().expect("unit")).expect("unit name") as i32,
            });
            let found = cfg
                .tree()
                .find(domain, &entries(&req["entries"]), over.as_ref())
                .map_err(|e| format!("match error: {e}"))?;
            let not_found = case
                .get("domain_not_found")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            match (&case["expect"], found) {
                (Value::Null, Lookup::DomainNotFound) => check(not_found, || {
                    "domain_not_found counted, not expected".into()
                }),
                (Value::Null, Lookup::NoLimit) => {
                    check(!not_found, || "expected domain_not_found".into())
                }
                (Value::Null, Lookup::Limit(m)) => {
                    Err(format!("expected no limit, got {:?}", describe(&m)).into())
                }
                (want, Lookup::Limit(m)) => {
                    let got = normalise_numbers(&serde_json::json!(describe(&m)));
                    let mut want = normalise(want);
                    if deliberate {
                        // We keep the rule's metadata where the original lost it.
                        let md = m.rule.metadata.as_ref().ok_or("rule has metadata")?;
                        want.insert("metadata".into(), normalise_numbers(&metadata_json(md)));
                    }
                    let want = normalise_numbers(&serde_json::json!(want));
                    check(got == want, || format!("\n  got:  {got}\n  want: {want}"))
                }
                (want, other) => Err(format!("expected {want}, got {other:?}").into()),
            }
        }));
    }
}

fn outcome(d: Disposition) -> &'static str {
    match d {
        Disposition::NoLimit => "no_limit",
        Disposition::Checked => "checked",
        Disposition::Unlimited => "unlimited",
        Disposition::DroppedByReplaces => "dropped_by_replaces",
    }
}

fn replaces_trial(v: Value) -> Trial {
    let id = format!("replaces/{}", v["id"].as_str().expect("id"));
    Trial::test(id, move || {
        let cfg = config::load(&files(&v["config"]), false)
            .map_err(|e| format!("config failed to load: {e}"))?;
        // Two notations: full (domain + descriptors with matched/outcome) and
        // derived (descriptors as entry lists, outcomes beside them).
        let (domain, descs, outcomes, matched): (String, Vec<Value>, Vec<Value>, Vec<Value>) =
            match v.get("domain") {
                Some(d) => {
                    let ds = v["descriptors"].as_array().expect("descriptors");
                    (
                        d.as_str().expect("domain").into(),
                        ds.iter().map(|d| d["entries"].clone()).collect(),
                        ds.iter().map(|d| d["outcome"].clone()).collect(),
                        ds.iter().map(|d| d["matched"].clone()).collect(),
                    )
                }
                None => {
                    let yaml = v["config"]["inline"][0]["yaml"].as_str().expect("yaml");
                    let domain = yaml
                        .lines()
                        .find_map(|l| l.strip_prefix("domain: "))
                        .expect("domain line");
                    let ds = v["descriptors"].as_array().expect("descriptors").clone();
                    let n = ds.len();
                    (
                        domain.into(),
                        ds,
                        v["outcome"].as_array().expect("outcome").clone(),
                        vec![Value::Bool(false); n],
                    )
                }
            };
        let mut limits = Vec::new();
        for (entries_v, want) in descs.iter().zip(&matched) {
            let found = cfg
                .tree()
                .find(&domain, &entries(entries_v), None)
                .map_err(|e| e.to_string())?;
            let m = match found {
                Lookup::Limit(m) => Some(m),
                _ => None,
            };
            if !want.is_boolean() {
                let got = m.as_ref().map(|m| serde_json::json!(describe(m)));
                let got = got.unwrap_or(Value::Null);
                check(&got == want, || {
                    format!("matched\n  got:  {got}\n  want: {want}")
                })?;
            }
            limits.push(m);
        }
        let got: Vec<&str> = apply_replaces(&mut limits)
            .into_iter()
            .map(outcome)
            .collect();
        let want: Vec<&str> = outcomes
            .iter()
            .map(|o| o.as_str().expect("outcome"))
            .collect();
        check(got == want, || {
            format!("outcomes\n  got:  {got:?}\n  want: {want:?}")
        })?;
        for (l, o) in limits.iter().zip(&got) {
            check(l.is_some() == (*o == "checked"), || {
                "only checked descriptors keep their limit".into()
            })?;
        }
        Ok(())
    })
}

fn cache_key_trial(v: Value) -> Trial {
    let id = format!("cache_key/{}", v["id"].as_str().expect("id"));
    Trial::test(id, move || {
        let pattern: Option<Vec<String>> = v["pattern"].as_array().map(|p| {
            p.iter()
                .map(|s| s.as_str().expect("pattern").to_string())
                .collect()
        });
        let got = fixed_window_key(
            v["prefix"].as_str().expect("prefix"),
            v["domain"].as_str().expect("domain"),
            &entries(&v["entries"]),
            pattern.as_deref(),
            ratelimit::store::key::window_start(1234, Unit::Second.seconds().expect("window")),
        );
        let want = v["expect"].as_str().expect("expect");
        check(got == want, || format!("\n  got:  {got}\n  want: {want}"))
    })
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = Vec::new();
    for v in vectors("load") {
        trials.push(load_trial(v));
    }
    for g in vectors("matching") {
        match_trials(g, &mut trials);
    }
    for v in vectors("replaces") {
        trials.push(replaces_trial(v));
    }
    for v in vectors("cache_key") {
        trials.push(cache_key_trial(v));
    }
    libtest_mimic::run(&args, trials).exit();
}
