//! `ratelimit_config_check` against real directories: the original's stdout
//! lines byte for byte, exit codes, and our extras on stderr.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratelimit_config_check"))
        .args(args)
        .output()
        .expect("checker runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write fixture");
}

const GOOD: &str =
    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";

#[test]
fn good_directory_prints_ok_and_exits_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    write(
        dir.path(),
        "b.yaml",
        &GOOD.replace("domain: a", "domain: b"),
    );
    write(dir.path(), "a.yaml", GOOD);
    let o = run(&["-config_dir", d]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        format!(
            "checking rate limit configs...\nloading config directory: {d}\nopening config file: {d}/a.yaml\nopening config file: {d}/b.yaml\nall rate limit configs ok\n"
        )
    );
}

#[test]
fn load_error_prints_the_original_line_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    write(dir.path(), "a.yaml", GOOD);
    write(dir.path(), "b.yaml", &GOOD.replace("key: k", "key: k2"));
    let o = run(&[&format!("-config_dir={d}")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).ends_with(&format!(
        "error loading rate limit configs: {d}/b.yaml: duplicate domain 'a' in config file\n"
    )));
    // With merging the same files are fine.
    let o = run(&["-config_dir", d, "-merge_domain_configs"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn syntax_error_is_a_friendly_line_not_a_panic_with_line_and_hint_on_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    ratelimit: {}\n",
    );
    let o = run(&["--config_dir", d]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        format!(
            "checking rate limit configs...\nloading config directory: {d}\nopening config file: {d}/a.yaml\nerror loading rate limit configs: {d}/a.yaml: config error, unknown key 'ratelimit'\n"
        )
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{d}/a.yaml:4")), "{err}");
    assert!(err.contains("did you mean 'rate_limit'?"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn missing_directory_and_subdirectory_fail_like_the_original() {
    let o = run(&["-config_dir", "/nonexistent/ratelimit-config"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).ends_with("error opening directory /nonexistent/ratelimit-config: open /nonexistent/ratelimit-config: no such file or directory\n"));

    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let o = run(&["-config_dir", d]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).ends_with(&format!(
        "error reading file {d}/sub: read {d}/sub: is a directory\n"
    )));
}

#[test]
fn unknown_flag_exits_2_with_go_usage() {
    let o = run(&["-nope"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("flag provided but not defined: -nope\nUsage of ratelimit_config_check:\n"),
        "{err}"
    );
}

#[test]
fn the_examples_pass_and_algorithm_mistakes_are_named() {
    let o = run(&["-config_dir", "examples/config"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("examples/config/algorithms.yaml"));
    assert!(stdout(&o).contains("examples/config/hot_keys.yaml"));
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    for (yaml, message, line) in [
        (
            "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5000\n      algorithm: sliding_log\n",
            "invalid rate limit: a sliding log limit of 5000 is above the maximum of 1000",
            5,
        ),
        (
            "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      algorithm: leaky_bucket\n",
            "invalid rate limit algorithm 'leaky_bucket'",
            5,
        ),
    ] {
        write(dir.path(), "a.yaml", yaml);
        let o = run(&["-config_dir", d]);
        assert_eq!(o.status.code(), Some(1));
        assert!(stdout(&o).contains(message), "{}", stdout(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("{d}/a.yaml:{line}")), "{err}");
    }
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      brust: 7\n",
    );
    let o = run(&["-config_dir", d]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("did you mean 'burst'?"));
}

#[test]
fn a_bad_calendar_is_refused_with_file_line_and_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: month\n      requests_per_unit: 10000\n      calendar: true\n      time_zone: Europe/Berln\n",
    );
    let o = run(&["-config_dir", d]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).ends_with(&format!(
            "error loading rate limit configs: {d}/a.yaml: unknown time_zone 'Europe/Berln' (expected an IANA name such as Europe/Berlin or UTC)\n"
        )),
        "{}",
        stdout(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{d}/a.yaml:8")), "{err}");
    assert!(err.contains("did you mean 'Europe/Berlin'?"), "{err}");
    // A calendar on a unit it does not fit.
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, calendar: true}\n",
    );
    let o = run(&["-config_dir", d]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("calendar windows are days, weeks, months or years, not MINUTE"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{d}/a.yaml:4")), "{err}");
    assert!(err.contains("did you mean 'unit: day'?"), "{err}");
    // And a good one.
    write(
        dir.path(),
        "a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: week, requests_per_unit: 5, calendar: true, time_zone: Asia/Kolkata}\n",
    );
    let o = run(&["-config_dir", d]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn without_config_dir_the_original_lines_and_a_hint() {
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        "checking rate limit configs...\nloading config directory: \nerror opening directory : open : no such file or directory\n"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("-config_dir is required"), "{err}");
}
