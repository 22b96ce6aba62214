//! Command-line flags with the syntax of Go's `flag` package, so the tools
//! that replace the original's (`ratelimit_config_check`, `ratelimit_client`)
//! accept exactly the same command lines: `-name value`, `-name=value`,
//! `--name value`, bare `-name` for booleans, parsing stops at `--` or the
//! first non-flag argument.

use std::collections::HashMap;
use std::fmt::Write as _;

/// What a flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// A boolean: `-x`, `-x=true`, `-x=false`.
    Bool,
    /// A string; the last occurrence wins.
    String,
    /// A string that may be repeated; every occurrence is kept.
    Repeated,
}

/// One flag's definition.
#[derive(Debug, Clone)]
pub struct Flag {
    /// The name without dashes.
    pub name: &'static str,
    /// What it takes.
    pub kind: FlagKind,
    /// The help text.
    pub usage: &'static str,
    /// The default, as text ("" for none).
    pub default: &'static str,
}

/// A set of flags for one program.
#[derive(Debug, Clone)]
pub struct FlagSet {
    program: &'static str,
    flags: Vec<Flag>,
}

/// The parsed command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    values: HashMap<&'static str, Vec<String>>,
    /// Arguments after the flags.
    pub rest: Vec<String>,
    /// The flags as given, in order, with their final values (the original
    /// client prints them).
    pub order: Vec<&'static str>,
}

impl Parsed {
    /// The last value of a string flag, or its default.
    pub fn string(&self, set: &FlagSet, name: &str) -> String {
        self.values
            .get(name)
            .and_then(|v| v.last().cloned())
            .unwrap_or_else(|| set.default_of(name).to_string())
    }

    /// Every value of a repeated flag.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.values.get(name).cloned().unwrap_or_default()
    }

    /// A boolean flag's value.
    pub fn bool(&self, set: &FlagSet, name: &str) -> bool {
        self.values
            .get(name)
            .and_then(|v| v.last().cloned())
            .map(|v| v == "true")
            .unwrap_or_else(|| set.default_of(name) == "true")
    }
}

/// Why a command line was not accepted; `Display` is Go's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// `-h` or `-help`: print the usage, exit 0.
    #[error("flag: help requested")]
    Help,
    /// An undefined flag.
    #[error("flag provided but not defined: -{0}")]
    Unknown(String),
    /// A non-boolean flag at the end of the line.
    #[error("flag needs an argument: -{0}")]
    MissingValue(String),
    /// A boolean flag with a value that is not a Go boolean.
    #[error("invalid boolean value {0:?} for -{1}: parse error")]
    BadBool(String, String),
    /// `---x` and the like.
    #[error("bad flag syntax: {0}")]
    Syntax(String),
}

impl FlagSet {
    /// A flag set for `program`.
    pub fn new(program: &'static str, flags: Vec<Flag>) -> FlagSet {
        FlagSet { program, flags }
    }

    fn default_of(&self, name: &str) -> &'static str {
        self.flags
            .iter()
            .find(|f| f.name == name)
            .map_or("", |f| f.default)
    }

    /// Go's usage text.
    pub fn usage(&self) -> String {
        let mut out = format!("Usage of {}:\n", self.program);
        let mut flags = self.flags.clone();
        flags.sort_by_key(|f| f.name);
        for f in flags {
            let kind = if f.kind == FlagKind::Bool {
                ""
            } else {
                " string"
            };
            let _ = write!(out, "  -{}{}\n    \t{}", f.name, kind, f.usage);
            if !f.default.is_empty() && f.default != "false" {
                let _ = write!(out, " (default {:?})", f.default);
            }
            out.push('\n');
        }
        out
    }

    /// Parses `args` (without the program name).
    pub fn parse<I, S>(&self, args: I) -> Result<Parsed, FlagError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut args: std::collections::VecDeque<String> =
            args.into_iter().map(Into::into).collect();
        let mut parsed = Parsed::default();
        while let Some(arg) = args.pop_front() {
            if arg == "--" {
                break;
            }
            if arg.len() < 2 || !arg.starts_with('-') {
                args.push_front(arg);
                break;
            }
            let body = arg
                .strip_prefix("--")
                .unwrap_or_else(|| &arg[1..])
                .to_string();
            if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
                return Err(FlagError::Syntax(arg));
            }
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (body, None),
            };
            let Some(flag) = self.flags.iter().find(|f| f.name == name) else {
                if name == "h" || name == "help" {
                    return Err(FlagError::Help);
                }
                return Err(FlagError::Unknown(name));
            };
            let value = match (flag.kind, inline) {
                (FlagKind::Bool, None) => "true".to_string(),
                (FlagKind::Bool, Some(v)) => match v.as_str() {
                    "1" | "t" | "T" | "TRUE" | "true" | "True" => "true".into(),
                    "0" | "f" | "F" | "FALSE" | "false" | "False" => "false".into(),
                    _ => return Err(FlagError::BadBool(v, name)),
                },
                (_, Some(v)) => v,
                (_, None) => args.pop_front().ok_or(FlagError::MissingValue(name))?,
            };
            parsed.values.entry(flag.name).or_default().push(value);
            if !parsed.order.contains(&flag.name) {
                parsed.order.push(flag.name);
            }
        }
        parsed.rest = args.into_iter().collect();
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> FlagSet {
        FlagSet::new(
            "prog",
            vec![
                Flag {
                    name: "config_dir",
                    kind: FlagKind::String,
                    usage: "dir",
                    default: "",
                },
                Flag {
                    name: "merge",
                    kind: FlagKind::Bool,
                    usage: "merge",
                    default: "false",
                },
                Flag {
                    name: "d",
                    kind: FlagKind::Repeated,
                    usage: "descriptor",
                    default: "",
                },
            ],
        )
    }

    #[test]
    fn go_syntaxes() {
        let s = set();
        for line in [
            vec!["-config_dir", "x", "-merge"],
            vec!["--config_dir=x", "-merge=true"],
            vec!["-config_dir=x", "--merge=1"],
        ] {
            let p = s.parse(line).expect("parses");
            assert_eq!(p.string(&s, "config_dir"), "x");
            assert!(p.bool(&s, "merge"));
        }
        let p = s.parse(["-d", "a=1", "-d=b=2", "rest"]).expect("parses");
        assert_eq!(p.all("d"), ["a=1", "b=2"]);
        assert_eq!(p.rest, ["rest"]);
        assert!(!s
            .parse(Vec::<String>::new())
            .expect("empty")
            .bool(&s, "merge"));
    }

    #[test]
    fn go_errors() {
        let s = set();
        assert_eq!(
            s.parse(["-nope"]).unwrap_err().to_string(),
            "flag provided but not defined: -nope"
        );
        assert_eq!(
            s.parse(["-config_dir"]).unwrap_err().to_string(),
            "flag needs an argument: -config_dir"
        );
        assert_eq!(
            s.parse(["-merge=yes"]).unwrap_err().to_string(),
            "invalid boolean value \"yes\" for -merge: parse error"
        );
        assert_eq!(s.parse(["-help"]).unwrap_err(), FlagError::Help);
    }

    #[test]
    fn usage_lists_flags_sorted() {
        let u = set().usage();
        assert!(
            u.starts_with("Usage of prog:\n  -config_dir string\n"),
            "{u}"
        );
    }
}
