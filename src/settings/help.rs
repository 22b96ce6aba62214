//! `ratelimit --help`: how to run the service, the settings most runs set,
//! and where the rest are documented. The settings' names, defaults and
//! meanings come from their declarations ([`super::vars`]), so the help
//! cannot drift from what the service reads.

use super::vars::{self, spec};

/// The settings most runs set, in the order an operator meets them: the
/// config, the store, the ports, what is reported, and the one setting of
/// ours every Redis user should know.
pub const FIRST: &[&str] = &[
    vars::ENV_RUNTIME_ROOT,
    vars::ENV_RUNTIME_SUBDIRECTORY,
    vars::ENV_RUNTIME_WATCH_ROOT,
    vars::ENV_CONFIG_TYPE,
    vars::ENV_BACKEND_TYPE,
    vars::ENV_REDIS_SOCKET_TYPE,
    vars::ENV_REDIS_URL,
    vars::ENV_REDIS_TYPE,
    vars::ENV_GRPC_PORT,
    vars::ENV_PORT,
    vars::ENV_DEBUG_PORT,
    vars::ENV_USE_STATSD,
    vars::ENV_USE_PROMETHEUS,
    vars::ENV_LOG_LEVEL,
    vars::ENV_STORE_TIMEOUT,
];

/// Whether `arg` asks for the help (Go's flag spellings and GNU's).
pub fn asks_for_help(arg: &str) -> bool {
    matches!(arg, "-h" | "-help" | "--help")
}

/// The help text.
pub fn text() -> String {
    let mut out = String::from(
        "ratelimit: a drop-in replacement for the Envoy (Lyft) rate limit service.\n\
         \n\
         Usage: ratelimit [--help | --version]\n\
         \n\
         It takes no other arguments: like the original, it is configured by\n\
         environment variables alone, and serves gRPC (ShouldRateLimit, health),\n\
         HTTP (/json, /healthcheck) and a debug port (/rlconfig, /stats).\n\
         \n\
         Try it with the example config on the in-memory store, no Redis needed:\n\
         \n\
         \x20 BACKEND_TYPE=memory USE_STATSD=false RUNTIME_ROOT=examples \\\n\
         \x20 RUNTIME_WATCH_ROOT=false ratelimit\n\
         \n\
         Without BACKEND_TYPE=memory it counts in Redis, by default over the\n\
         original's unix socket; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port\n\
         for a TCP Redis.\n\
         \n\
         Settings most runs set (default in brackets):\n",
    );
    for name in FIRST {
        let Some(v) = spec(name) else { continue };
        let meaning = v.meaning.lines().next().unwrap_or("").trim();
        out.push_str(&format!(
            "  {:<22} [{}]\n      {meaning}\n",
            v.name, v.default
        ));
    }
    out.push_str(&format!(
        "\nAll {} settings of the original and {} of ours, with their meanings:\n\
         docs/settings.md in the source tree. `ratelimit_config_check\n\
         -config_dir DIR` checks a config without starting the service.\n",
        vars::VARS.len(),
        vars::EXTENSIONS.len(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_first_setting_is_declared_and_shown_with_its_default() {
        let text = text();
        for name in FIRST {
            let v = spec(name).expect("declared");
            assert!(
                text.contains(&format!("{:<22} [{}]", v.name, v.default)),
                "{name} missing from:\n{text}"
            );
        }
    }

    #[test]
    fn the_help_spellings_are_go_and_gnu() {
        for a in ["-h", "-help", "--help"] {
            assert!(asks_for_help(a), "{a}");
        }
        for a in ["--version", "help", "-x", ""] {
            assert!(!asks_for_help(a), "{a}");
        }
    }
}
