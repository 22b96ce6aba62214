//! The command lines: the load commands' flags into a `LoadConfig`.

use std::time::Duration;

use ratelimit::go::cli::{Flag, FlagError, FlagKind, FlagSet, Parsed};

use super::keys::KeyDist;
use super::{Failure, MAX_DURATION};

pub(crate) fn string_flag(name: &'static str, default: &'static str) -> Flag {
    Flag {
        name,
        kind: FlagKind::String,
        usage: "",
        default,
    }
}

pub(crate) fn parse_flags(set: &FlagSet, args: &[String]) -> Result<Parsed, Failure> {
    let parsed = set.parse(args.iter().cloned()).map_err(|e| match e {
        FlagError::Help => Failure::Help,
        e => Failure::Usage(e.to_string()),
    })?;
    if let Some(extra) = parsed.rest.first() {
        return Err(Failure::Usage(format!("unexpected argument {extra:?}")));
    }
    Ok(parsed)
}

/// A duration flag: Go's `time.ParseDuration`, as the service's settings
/// read it, or a plain number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(secs) => Duration::try_from_secs_f64(secs).map_err(|e| e.to_string()),
        Err(_) => ratelimit::settings::parse::parse_duration(text).map_err(|e| e.to_string()),
    }
    .map_err(|e| format!("invalid duration {text:?}: {e}"))
}

pub(crate) fn parse_number<T: std::str::FromStr>(name: &str, text: &str) -> Result<T, Failure> {
    text.parse()
        .map_err(|_| Failure::Usage(format!("invalid value {text:?} for --{name}")))
}

pub(crate) fn bounded(name: &str, value: usize, low: usize, high: usize) -> Result<usize, Failure> {
    if (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(Failure::Usage(format!(
            "--{name} must be between {low} and {high}, got {value}"
        )))
    }
}

/// One load definition (shared by `run` and both halves of `compare`).
#[derive(Debug, Clone)]
pub(crate) struct LoadConfig {
    pub(crate) target: String,
    pub(crate) connections: usize,
    pub(crate) threads: usize,
    pub(crate) concurrency: usize,
    pub(crate) duration: Duration,
    pub(crate) warmup: Duration,
    pub(crate) timeout: Duration,
    pub(crate) rps: Option<f64>,
    pub(crate) domain: String,
    pub(crate) entries: Vec<String>,
    pub(crate) keys: KeyDist,
    pub(crate) hits_addend: u32,
    pub(crate) seed: u64,
    pub(crate) rounds: u32,
    /// `--svg FILE` (run only): the run over time as a chart.
    pub(crate) svg: Option<std::path::PathBuf>,
    /// `--http PATH` (run only): `GET PATH` over HTTP/1.1 instead of gRPC.
    pub(crate) http: Option<String>,
}

pub(crate) fn load_flags(command: &'static str) -> FlagSet {
    FlagSet::new(
        command,
        vec![
            string_flag("target", "127.0.0.1:8081"),
            string_flag("connections", "1"),
            string_flag("threads", ""),
            string_flag("concurrency", "16"),
            string_flag("duration", "10s"),
            string_flag("warmup", "2s"),
            string_flag("timeout", "5s"),
            string_flag("rps", ""),
            string_flag("domain", "bench"),
            string_flag("descriptors", "1"),
            string_flag("entries", "key"),
            string_flag("keys", "hot"),
            string_flag("hits-addend", "0"),
            string_flag("seed", "1"),
            string_flag("rounds", "1"),
            string_flag("svg", ""),
            string_flag("http", ""),
        ],
    )
}

pub(crate) fn parse_load(args: &[String], command: &'static str) -> Result<LoadConfig, Failure> {
    let set = load_flags(command);
    let p = parse_flags(&set, args)?;
    let get = |name: &str| p.string(&set, name);
    let duration_of = |name: &str| {
        let d = parse_duration(&get(name)).map_err(Failure::Usage)?;
        if d > MAX_DURATION {
            return Err(Failure::Usage(format!("--{name} is at most 1h")));
        }
        Ok(d)
    };
    let connections = bounded(
        "connections",
        parse_number("connections", &get("connections"))?,
        1,
        1024,
    )?;
    let threads = match get("threads").as_str() {
        "" => connections.min(std::thread::available_parallelism().map_or(1, |n| n.get())),
        text => bounded("threads", parse_number("threads", text)?, 1, 1024)?,
    };
    let concurrency = bounded(
        "concurrency",
        parse_number("concurrency", &get("concurrency"))?,
        1,
        10_000,
    )?;
    if connections * concurrency > 100_000 {
        return Err(Failure::Usage(
            "--connections x --concurrency is at most 100000".into(),
        ));
    }
    let duration = duration_of("duration")?;
    if duration.is_zero() {
        return Err(Failure::Usage("--duration must be positive".into()));
    }
    let rps = match get("rps").as_str() {
        "" => None,
        text => match parse_number::<f64>("rps", text)? {
            r if r.is_finite() && r > 0.0 => Some(r),
            _ => return Err(Failure::Usage("--rps must be positive".into())),
        },
    };
    let descriptors = bounded(
        "descriptors",
        parse_number("descriptors", &get("descriptors"))?,
        1,
        // The service's default REQUEST_MAX_DESCRIPTORS: the largest
        // request it takes, which heavy callers send.
        1000,
    )?;
    let names: Vec<String> = get("entries").split(',').map(str::to_string).collect();
    let entries = if names.len() == descriptors {
        names
    } else if names.len() == 1 {
        (0..descriptors)
            .map(|i| format!("{}_{i}", names[0]))
            .collect()
    } else {
        return Err(Failure::Usage(format!(
            "--entries has {} keys for {descriptors} descriptors",
            names.len()
        )));
    };
    let target = get("target");
    if target.is_empty() {
        return Err(Failure::Usage("--target must not be empty".into()));
    }
    let config = LoadConfig {
        target,
        connections,
        threads,
        concurrency,
        duration,
        warmup: duration_of("warmup")?,
        timeout: duration_of("timeout")?.max(Duration::from_millis(1)),
        rps,
        domain: get("domain"),
        entries,
        keys: KeyDist::parse(&get("keys")).map_err(Failure::Usage)?,
        hits_addend: parse_number("hits-addend", &get("hits-addend"))?,
        seed: parse_number("seed", &get("seed"))?,
        rounds: u32::try_from(bounded(
            "rounds",
            parse_number("rounds", &get("rounds"))?,
            1,
            100,
        )?)
        .unwrap_or(1),
        svg: Some(get("svg"))
            .filter(|f| !f.is_empty())
            .map(std::path::PathBuf::from),
        http: Some(get("http")).filter(|p| !p.is_empty()),
    };
    if config.http.is_some() && command == "compare" {
        return Err(Failure::Usage(
            "--http loads a proxy: use it with run (compare loads a no-op rate limit service)"
                .into(),
        ));
    }
    if (config.warmup + config.duration) * config.rounds > MAX_DURATION {
        return Err(Failure::Usage(
            "--rounds x (--warmup + --duration) is at most 1h".into(),
        ));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::build_request;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1").is_err());
    }

    #[test]
    fn http_mode_is_for_run_only() {
        let args: Vec<String> = ["--http", "/limited", "--target", "127.0.0.1:10000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let c = parse_load(&args, "run").expect("valid");
        assert_eq!(c.http.as_deref(), Some("/limited"));
        assert!(parse_load(&[], "run").expect("valid").http.is_none());
        assert!(matches!(
            parse_load(&args, "compare"),
            Err(Failure::Usage(_))
        ));
    }

    #[test]
    fn load_options() {
        let args: Vec<String> = [
            "--descriptors",
            "3",
            "--entries=k",
            "--keys",
            "uniform:5",
            "--duration",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c = parse_load(&args, "run").expect("valid");
        assert_eq!(c.entries, ["k_0", "k_1", "k_2"]);
        assert_eq!(c.duration, Duration::from_secs(1));
        assert_eq!(c.target, "127.0.0.1:8081");
        let mut rng = SmallRng::seed_from_u64(1);
        let r = build_request(&c, &mut rng);
        assert_eq!(r.descriptors.len(), 3);
        assert_eq!(r.descriptors[2].entries[0].key, "k_2");
        let too_long = ["--duration".to_string(), "2h".to_string()];
        assert!(matches!(
            parse_load(&too_long, "run"),
            Err(Failure::Usage(_))
        ));
        let mismatch = ["--descriptors=3".to_string(), "--entries=a,b".to_string()];
        assert!(parse_load(&mismatch, "run").is_err());
        assert!(c.threads >= 1 && c.threads <= c.connections);
        let threads = ["--connections=4".to_string(), "--threads=3".to_string()];
        assert_eq!(parse_load(&threads, "run").expect("valid").threads, 3);
        let zero = ["--threads=0".to_string()];
        assert!(matches!(parse_load(&zero, "run"), Err(Failure::Usage(_))));
    }
}
