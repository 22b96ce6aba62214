use super::*;
use std::collections::HashSet;

#[test]
fn table_has_all_118_names_once() {
    assert_eq!(VARS.len(), 118, "the original has 118 variables");
    let names: HashSet<&str> = VARS.iter().map(|v| v.name).collect();
    assert_eq!(names.len(), VARS.len(), "a name appears twice");
}

#[test]
fn names_are_upper_snake_case() {
    for v in VARS {
        assert!(
            v.name
                .bytes()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_'),
            "{}",
            v.name
        );
    }
}

#[test]
fn every_default_parses_with_its_kind() {
    for v in VARS {
        assert_eq!(
            v.kind.check(v.default),
            Ok(()),
            "{} = {:?}",
            v.name,
            v.default
        );
    }
}

#[test]
fn active_variables_are_the_ones_acted_on() {
    // Every variable is acted on but the Redis pipelining knobs: this
    // store sends at most one script per node per decision and
    // coalesces concurrent ones, which takes their place.
    let accepted: Vec<&str> = VARS
        .iter()
        .filter(|v| v.support != Support::Active)
        .map(|v| v.name)
        .collect();
    assert_eq!(
        accepted,
        [
            ENV_REDIS_PIPELINE_WINDOW,
            ENV_REDIS_PIPELINE_LIMIT,
            ENV_REDIS_CLUSTER_PIPELINE_PARALLELISM,
            ENV_REDIS_PERSECOND_PIPELINE_WINDOW,
            ENV_REDIS_PERSECOND_PIPELINE_LIMIT,
            ENV_REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM,
        ]
    );
}

const SETTINGS_PAGE: &str = include_str!("../../../docs/settings.md");
const ORIGINALS_HEADING: &str = "## The original's variables";

/// The settings page before its section of the original's variables.
fn extensions_part() -> &'static str {
    SETTINGS_PAGE
        .split(ORIGINALS_HEADING)
        .next()
        .unwrap_or(SETTINGS_PAGE)
}

/// `docs/settings.md` lists exactly [`EXTENSIONS`], each with its kind
/// and default, so the page cannot go stale.
#[test]
fn the_settings_page_lists_every_extension() {
    let mut listed: Vec<(String, String, String)> = extensions_part()
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.strip_prefix("| `")?.split(" | ").collect();
            let name = cells.first()?.strip_suffix('`')?;
            let default = cells.get(2)?.trim_matches('`');
            Some((name.into(), cells.get(1)?.to_string(), default.into()))
        })
        .collect();
    let mut expected: Vec<(String, String, String)> = EXTENSIONS
        .iter()
        .map(|v| {
            let kind = format!("{:?}", v.kind).to_lowercase();
            (v.name.into(), kind, v.default.into())
        })
        .collect();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected, "docs/settings.md against EXTENSIONS");
}

/// One row of the settings page's table of the original's variables,
/// generated from [`VARS`]: name, kind, default, status and the doc text.
fn reference_row(v: &VarSpec) -> String {
    let default = if v.default.is_empty() {
        "(empty)".to_string()
    } else {
        format!("`{}`", v.default)
    };
    let status = match v.support {
        Support::Active => "acted on",
        Support::Accepted => "accepted, ignored",
    };
    let meaning = v
        .meaning
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|");
    let kind = format!("{:?}", v.kind).to_lowercase();
    format!(
        "| `{}` | {kind} | {default} | {status} | {meaning} |",
        v.name
    )
}

/// `docs/settings.md` lists every one of the original's variables, in
/// [`VARS`]'s order, with its kind, default, status and meaning as they are
/// declared: the table is generated from the declaration (the failure
/// prints it), so it cannot drift.
#[test]
fn the_settings_page_lists_every_original_variable() {
    let section = SETTINGS_PAGE
        .split(ORIGINALS_HEADING)
        .nth(1)
        .expect("docs/settings.md has a section of the original's variables");
    let section = section.split("\n## ").next().unwrap_or(section);
    let listed: Vec<&str> = section.lines().filter(|l| l.starts_with("| `")).collect();
    let expected: Vec<String> = VARS.iter().map(reference_row).collect();
    assert_eq!(
        listed,
        expected,
        "docs/settings.md's table of the original's variables; it should read:\n\n\
         | variable | kind | default | status | meaning |\n|---|---|---|---|---|\n{}\n",
        expected.join("\n")
    );
    assert_eq!(listed.len(), 118);
}

#[test]
fn spot_check_rows_against_the_spec() {
    let row = |name| spec(name).map(|v| (v.kind, v.default));
    assert_eq!(row("PORT"), Some((Kind::Int, "8080")));
    assert_eq!(row("REDIS_TYPE"), Some((Kind::String, "SINGLE")));
    assert_eq!(row("NEAR_LIMIT_RATIO"), Some((Kind::Float, "0.8")));
    assert_eq!(row("EXTRA_TAGS"), Some((Kind::Map, "")));
    assert_eq!(row("MEMCACHE_HOST_PORT"), Some((Kind::List, "")));
    assert_eq!(row("REDIS_PIPELINE_WINDOW"), Some((Kind::Duration, "0")));
    assert_eq!(row("XDS_CLIENT_BACKOFF_JITTER"), Some((Kind::Bool, "true")));
    assert_eq!(
        row("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"),
        Some((Kind::Int, "0"))
    );
    assert_eq!(
        row("REDIS_PERSECOND_URL"),
        Some((Kind::String, "/var/run/nutcracker/ratelimitpersecond.sock"))
    );
    assert_eq!(
        row("DOG_STATSD_MOGRIFIERS"),
        None,
        "README drift, not a variable"
    );
}
