//! The original's Redis address settings parsed into a
//! typed target: `REDIS_TYPE`, `REDIS_SOCKET_TYPE`, `REDIS_URL`,
//! `REDIS_AUTH`. Pure, so every format has a unit test.

/// How the servers behind `REDIS_URL` are deployed (`REDIS_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Deployment {
    /// One server (or a proxy such as twemproxy).
    #[default]
    Single,
    /// A primary found through sentinels.
    Sentinel,
    /// Redis Cluster.
    Cluster,
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One server over TCP.
    Tcp {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
        /// Database to SELECT (from a `redis://…/db` URL).
        db: Option<u8>,
    },
    /// One server over a unix socket.
    Unix {
        /// Socket path.
        path: String,
    },
    /// A Redis Cluster, by seed nodes.
    Cluster {
        /// `(host, port)` seeds; the rest are discovered.
        seeds: Vec<(String, u16)>,
    },
    /// A primary found through sentinels.
    Sentinel {
        /// The monitored primary's name.
        master: String,
        /// `(host, port)` of each sentinel.
        sentinels: Vec<(String, u16)>,
    },
}

/// Credentials: `password`, or `user:password` split at the first `:`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// ACL user, if any.
    pub username: Option<String>,
    /// Password, if any.
    pub password: Option<String>,
}

/// A malformed address setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}={value:?} is not valid: {reason}")]
pub struct UrlError {
    /// The variable.
    pub setting: &'static str,
    /// Its value (credentials masked).
    pub value: String,
    /// Why.
    pub reason: String,
}

/// `REDIS_AUTH`: the original splits at the first `:`: a password
/// that itself contains `:` must be written `:pass:word` (empty user) or
/// `default:pass:word`, since `pass:word` means user `pass`.
pub fn credentials(auth: &str) -> Credentials {
    if auth.is_empty() {
        return Credentials::default();
    }
    match auth.split_once(':') {
        Some((user, pass)) => Credentials {
            username: (!user.is_empty()).then(|| user.to_string()),
            password: Some(pass.to_string()),
        },
        None => Credentials {
            username: None,
            password: Some(auth.to_string()),
        },
    }
}

/// Masks the credentials of a `redis://user:pass@host` URL for logs.
pub fn mask(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}*****{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

fn host_port(setting: &'static str, item: &str) -> Result<(String, u16), UrlError> {
    let err = |reason: &str| UrlError {
        setting,
        value: mask(item),
        reason: reason.to_string(),
    };
    let (host, port) = item
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| err("expected host:port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(err("empty host"));
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| err("port is not a number"))?;
    Ok((host.to_string(), port))
}

/// Parses `REDIS_URL` for `REDIS_TYPE` and `REDIS_SOCKET_TYPE`. A
/// `redis://` or `rediss://` URL also carries credentials and a database,
/// returned beside the target (`REDIS_AUTH` wins over them).
pub fn parse(
    setting: &'static str,
    deployment: Deployment,
    socket_type: &str,
    url: &str,
) -> Result<(Target, Credentials), UrlError> {
    let err = |reason: String| UrlError {
        setting,
        value: mask(url),
        reason,
    };
    match deployment {
        Deployment::Single => {
            if let Some(rest) = url
                .strip_prefix("redis://")
                .or_else(|| url.strip_prefix("rediss://"))
            {
                return parse_uri(setting, url, rest);
            }
            match socket_type.to_ascii_lowercase().as_str() {
                "unix" => {
                    if url.is_empty() {
                        return Err(err("empty socket path".into()));
                    }
                    Ok((Target::Unix { path: url.into() }, Credentials::default()))
                }
                "tcp" => {
                    let (host, port) = host_port(setting, url)?;
                    Ok((
                        Target::Tcp {
                            host,
                            port,
                            db: None,
                        },
                        Credentials::default(),
                    ))
                }
                other => Err(err(format!("unknown socket type {other:?} (tcp or unix)"))),
            }
        }
        Deployment::Cluster => {
            let seeds = url
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| host_port(setting, s))
                .collect::<Result<Vec<_>, _>>()?;
            if seeds.is_empty() {
                return Err(err("no cluster nodes".into()));
            }
            Ok((Target::Cluster { seeds }, Credentials::default()))
        }
        Deployment::Sentinel => {
            let mut items = url.split(',');
            let master = items.next().unwrap_or_default().trim().to_string();
            let sentinels = items
                .map(|s| host_port(setting, s))
                .collect::<Result<Vec<_>, _>>()?;
            if master.is_empty() || sentinels.is_empty() {
                return Err(err(
                    "expected <master name>,<sentinel host:port>[,<sentinel host:port>...]".into(),
                ));
            }
            Ok((
                Target::Sentinel { master, sentinels },
                Credentials::default(),
            ))
        }
    }
}

/// `redis://[user:pass@]host:port[/db][?username=&password=&db=]`.
fn parse_uri(
    setting: &'static str,
    url: &str,
    rest: &str,
) -> Result<(Target, Credentials), UrlError> {
    let err = |reason: &str| UrlError {
        setting,
        value: mask(url),
        reason: reason.to_string(),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (auth, hostpart) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    let (hostport, db) = match hostpart.split_once('/') {
        Some((hp, db)) if !db.is_empty() => (hp, Some(db)),
        Some((hp, _)) => (hp, None),
        None => (hostpart, None),
    };
    let mut creds = auth.map(credentials).unwrap_or_default();
    let mut db = db
        .map(|d| d.parse::<u8>().map_err(|_| err("database is not a number")))
        .transpose()?;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "username" => creds.username = Some(v.to_string()),
            "password" => creds.password = Some(v.to_string()),
            "db" => db = Some(v.parse().map_err(|_| err("database is not a number"))?),
            _ => {}
        }
    }
    let (host, port) = host_port(setting, hostport)?;
    Ok((Target::Tcp { host, port, db }, creds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_tcp_unix_and_uri() {
        assert_eq!(
            parse("REDIS_URL", Deployment::Single, "tcp", "localhost:6379")
                .expect("ok")
                .0,
            Target::Tcp {
                host: "localhost".into(),
                port: 6379,
                db: None
            }
        );
        assert_eq!(
            parse("REDIS_URL", Deployment::Single, "unix", "/var/run/r.sock")
                .expect("ok")
                .0,
            Target::Unix {
                path: "/var/run/r.sock".into()
            }
        );
        let (t, c) = parse(
            "REDIS_URL",
            Deployment::Single,
            "unix",
            "redis://u:p:w@h:1/3",
        )
        .expect("ok");
        assert_eq!(
            t,
            Target::Tcp {
                host: "h".into(),
                port: 1,
                db: Some(3)
            }
        );
        assert_eq!(
            c,
            Credentials {
                username: Some("u".into()),
                password: Some("p:w".into())
            }
        );
        let (t, c) = parse(
            "REDIS_URL",
            Deployment::Single,
            "tcp",
            "redis://h:2?password=x&db=4",
        )
        .expect("ok");
        assert_eq!(
            t,
            Target::Tcp {
                host: "h".into(),
                port: 2,
                db: Some(4)
            }
        );
        assert_eq!(c.password.as_deref(), Some("x"));
    }

    #[test]
    fn cluster_and_sentinel_lists() {
        assert_eq!(
            parse("REDIS_URL", Deployment::Cluster, "tcp", "a:1,b:2")
                .expect("ok")
                .0,
            Target::Cluster {
                seeds: vec![("a".into(), 1), ("b".into(), 2)]
            }
        );
        assert_eq!(
            parse(
                "REDIS_URL",
                Deployment::Sentinel,
                "tcp",
                "mymaster,s1:26379,s2:26380"
            )
            .expect("ok")
            .0,
            Target::Sentinel {
                master: "mymaster".into(),
                sentinels: vec![("s1".into(), 26379), ("s2".into(), 26380)]
            }
        );
    }

    #[test]
    fn malformed_urls_are_clear_errors() {
        for (t, s, u) in [
            (Deployment::Single, "tcp", "localhost"),
            (Deployment::Single, "tcp", "host:notaport"),
            (Deployment::Single, "tcp", ":6379"),
            (Deployment::Single, "udp", "h:1"),
            (Deployment::Cluster, "tcp", ""),
            (Deployment::Cluster, "tcp", "a:1,b"),
            (Deployment::Sentinel, "tcp", "mymaster"),
            (Deployment::Sentinel, "tcp", ",a:1"),
            (Deployment::Single, "tcp", "redis://h:1/notadb"),
        ] {
            let e = parse("REDIS_URL", t, s, u).unwrap_err();
            assert!(e.to_string().starts_with("REDIS_URL="), "{e}");
        }
    }

    #[test]
    fn auth_splits_at_the_first_colon() {
        assert_eq!(credentials(""), Credentials::default());
        assert_eq!(
            credentials("secret"),
            Credentials {
                username: None,
                password: Some("secret".into())
            }
        );
        assert_eq!(
            credentials("user:pa:ss"),
            Credentials {
                username: Some("user".into()),
                password: Some("pa:ss".into())
            }
        );
        assert_eq!(
            credentials(":pa:ss"),
            Credentials {
                username: None,
                password: Some("pa:ss".into())
            }
        );
    }

    #[test]
    fn masks_credentials() {
        assert_eq!(mask("redis://u:p@h:1"), "redis://*****@h:1");
        assert_eq!(mask("h:1"), "h:1");
    }
}
