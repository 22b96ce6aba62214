//! `ratelimit_config_check`: a drop-in for the original's config checker.
//!
//! Same flags (`-config_dir DIR`, `-merge_domain_configs`), same lines on
//! standard output, exit 1 on a bad config. Unlike the original, a YAML
//! syntax error is reported with the same friendly line instead of a panic
//! trace, and the line of the problem plus a suggestion for a misspelled key
//! go to standard error (so standard output stays byte-identical).

use std::path::Path;
use std::process::ExitCode;

use ratelimit::config::{self, ConfigError, ConfigFile};
use ratelimit::go::cli::{Flag, FlagError, FlagKind, FlagSet};

fn flags() -> FlagSet {
    FlagSet::new(
        "ratelimit_config_check",
        vec![
            Flag {
                name: "config_dir",
                kind: FlagKind::String,
                usage: "path to directory containing rate limit configs",
                default: "",
            },
            Flag {
                name: "merge_domain_configs",
                kind: FlagKind::Bool,
                usage: "whether to merge configurations, referencing the same domain",
                default: "false",
            },
        ],
    )
}

fn main() -> ExitCode {
    let set = flags();
    let parsed = match set.parse(std::env::args().skip(1)) {
        Ok(p) => p,
        Err(FlagError::Help) => {
            eprint!("{}", set.usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            eprint!("{}", set.usage());
            return ExitCode::from(2);
        }
    };
    let dir = parsed.string(&set, "config_dir");
    let merge = parsed.bool(&set, "merge_domain_configs");
    match check(&dir, merge) {
        Ok(()) => ExitCode::SUCCESS,
        Err(()) => ExitCode::from(1),
    }
}

fn check(dir: &str, merge: bool) -> Result<(), ()> {
    println!("checking rate limit configs...");
    println!("loading config directory: {dir}");
    let entries = match read_dir_sorted(dir) {
        Ok(e) => e,
        Err(e) => {
            println!(
                "error opening directory {dir}: open {dir}: {}",
                go_io_text(&e)
            );
            // The original's line above; what to do, on standard error.
            if dir.is_empty() {
                eprintln!("hint: -config_dir is required: ratelimit_config_check -config_dir <directory of the YAML files>");
            }
            return Err(());
        }
    };
    let mut parsed = Vec::with_capacity(entries.len());
    for name in entries {
        let path = Path::new(dir).join(&name);
        let shown = path.to_string_lossy().into_owned();
        println!("opening config file: {shown}");
        let contents = match std::fs::read(&path) {
            Ok(c) => c,
            Err(e) => {
                let op = if path.is_dir() { "read" } else { "open" };
                println!(
                    "error reading file {shown}: {op} {shown}: {}",
                    go_io_text(&e)
                );
                return Err(());
            }
        };
        let file = ConfigFile {
            name: shown,
            path: Some(path),
            contents,
        };
        match config::loader::parse(&file) {
            Ok(p) => parsed.push(p),
            Err(e) => {
                report(&e);
                return Err(());
            }
        }
    }
    match config::loader::build(&parsed, merge) {
        Ok(_) => {
            println!("all rate limit configs ok");
            Ok(())
        }
        Err(e) => {
            report(&e);
            Err(())
        }
    }
}

fn report(e: &ConfigError) {
    println!("error loading rate limit configs: {e}");
    if let Some(line) = e.line {
        eprintln!("  --> {}:{line}", e.file);
    }
    if let Some(hint) = &e.hint {
        eprintln!("  hint: {hint}");
    }
}

/// The entries of `dir`, sorted by name, as Go's `ioutil.ReadDir` returns them.
fn read_dir_sorted(dir: &str) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Go's text for the common I/O errors (`no such file or directory`, ...).
fn go_io_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(21) => "is a directory".into(),
        Some(2) => "no such file or directory".into(),
        Some(13) => "permission denied".into(),
        Some(20) => "not a directory".into(),
        _ => {
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text).to_string();
            let mut chars = text.chars();
            match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect(),
                None => text,
            }
        }
    }
}
