//! `ratelimit_client overrides …`: the per-tenant overrides' API on the
//! debug port, from the command line. Prints the answer's JSON; exits 0 on
//! a 2xx answer, 1 on any other answer or a failed connection, 2 on bad
//! arguments.
//!
//! ```text
//! ratelimit_client overrides put    -domain api -descriptor tenant=acme -limit 50/minute [-expires-in 10m] [-if-version 3] [-algorithm token_bucket] [-burst 100]
//! ratelimit_client overrides get    [-domain api]
//! ratelimit_client overrides delete -domain api -descriptor tenant=acme [-if-version 4]
//! ratelimit_client overrides log    [-domain api]
//! ```
//!
//! `-admin host:port` names the debug port (default `localhost:6070`); a
//! write's bearer token is read from `-token-file` (default: the
//! `ADMIN_TOKEN_FILE` variable), its first token line.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

pub const USAGE: &str = "usage:
  ratelimit_client overrides put    -domain D -descriptor k=v[,k2=v2] -limit N/unit [-expires-in 10m] [-if-version V] [-algorithm A] [-burst B] [-unit-multiplier M]
  ratelimit_client overrides get    [-domain D]
  ratelimit_client overrides delete -domain D -descriptor k=v[,k2=v2] [-if-version V]
  ratelimit_client overrides log    [-domain D]
common: -admin host:port (default localhost:6070), -token-file F (default $ADMIN_TOKEN_FILE)
";

/// Runs `args` (after `overrides`).
pub fn run(args: &[String]) -> ExitCode {
    match request(args) {
        Ok((method, path, body, needs_token, flags)) => {
            send(&method, &path, body, needs_token, &flags)
        }
        Err(why) => {
            eprintln!("{why}");
            eprint!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

struct Flags {
    admin: String,
    token_file: Option<String>,
}

type Request = (String, String, Option<Value>, bool, Flags);

fn request(args: &[String]) -> Result<Request, String> {
    let (op, rest) = args.split_first().ok_or("which operation?")?;
    if op == "-h" || op == "--help" || op == "help" {
        return Err(String::new());
    }
    let mut given = std::collections::BTreeMap::new();
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let name = flag.trim_start_matches('-');
        if name == flag.as_str() {
            return Err(format!("unexpected argument {flag:?}"));
        }
        let (name, value) = match name.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => (
                name.to_string(),
                it.next()
                    .ok_or(format!("flag -{name} needs a value"))?
                    .clone(),
            ),
        };
        given.insert(name, value);
    }
    let take = |given: &mut std::collections::BTreeMap<String, String>, n: &str| given.remove(n);
    let flags = Flags {
        admin: take(&mut given, "admin").unwrap_or_else(|| "localhost:6070".into()),
        token_file: take(&mut given, "token-file")
            .or_else(|| std::env::var("ADMIN_TOKEN_FILE").ok())
            .filter(|f| !f.is_empty()),
    };
    let domain = take(&mut given, "domain");
    let number = |text: Option<String>, name: &str| -> Result<Option<u64>, String> {
        text.map(|t| {
            t.parse()
                .map_err(|_| format!("-{name} {t:?} is not a number"))
        })
        .transpose()
    };
    let query = |d: &Option<String>| d.as_ref().map_or(String::new(), |d| format!("?domain={d}"));
    let out = match op.as_str() {
        "get" => ("GET", format!("/overrides{}", query(&domain)), None, false),
        "log" => (
            "GET",
            format!("/overrides/log{}", query(&domain)),
            None,
            false,
        ),
        "put" | "delete" => {
            let domain = domain.ok_or("-domain is needed")?;
            let descriptor =
                descriptor(&take(&mut given, "descriptor").ok_or("-descriptor is needed")?)?;
            let mut body = json!({ "domain": domain, "descriptor": descriptor });
            if let Some(v) = number(take(&mut given, "if-version"), "if-version")? {
                body["if_version"] = json!(v);
            }
            if op == "put" {
                let limit = take(&mut given, "limit").ok_or("-limit N/unit is needed")?;
                let (n, unit) = limit
                    .split_once('/')
                    .ok_or(format!("-limit {limit:?}: expected N/unit, e.g. 50/minute"))?;
                let n: u64 = n
                    .parse()
                    .map_err(|_| format!("-limit {limit:?}: {n:?} is not a number"))?;
                let mut l = json!({ "requests_per_unit": n, "unit": unit });
                if let Some(a) = take(&mut given, "algorithm") {
                    l["algorithm"] = json!(a);
                }
                for (flag, key) in [("burst", "burst"), ("unit-multiplier", "unit_multiplier")] {
                    if let Some(v) = number(take(&mut given, flag), flag)? {
                        l[key] = json!(v);
                    }
                }
                body["limit"] = l;
                if let Some(e) = take(&mut given, "expires-in") {
                    body["expires_in"] = json!(e);
                }
            }
            let method = if op == "put" { "PUT" } else { "DELETE" };
            (method, "/overrides".to_string(), Some(body), true)
        }
        other => return Err(format!("unknown operation {other:?}")),
    };
    if let Some(name) = given.keys().next() {
        return Err(format!("flag -{name} is not one of {op}'s"));
    }
    Ok((out.0.to_string(), out.1, out.2, out.3, flags))
}

/// `k=v,k2=v2` as descriptor entries.
fn descriptor(text: &str) -> Result<Value, String> {
    let entries: Result<Vec<Value>, String> = text
        .split(',')
        .map(|e| match e.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok(json!({ "key": k, "value": v })),
            _ => Err(format!("-descriptor entry {e:?}: expected key=value")),
        })
        .collect();
    entries.map(Value::Array)
}

/// The first token of the token file, read as the service reads it.
fn token(file: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("token file {file}: {e}"))?;
    let first = ratelimit::service::http::admin_tokens::tokens(&text)
        .next()
        .map(|(_, token)| token.to_string());
    first.ok_or(format!("token file {file} holds no token"))
}

fn send(
    method: &str,
    path: &str,
    body: Option<Value>,
    needs_token: bool,
    flags: &Flags,
) -> ExitCode {
    let auth = match (needs_token, &flags.token_file) {
        (true, Some(f)) => match token(f) {
            Ok(t) => format!("Authorization: Bearer {t}\r\n"),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        _ => String::new(),
    };
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let answer = exchange(&flags.admin, method, path, &auth, &body);
    match answer {
        Ok((status, text)) => {
            println!("{text}");
            if (200..300).contains(&status) {
                ExitCode::SUCCESS
            } else {
                eprintln!("{method} {path}: HTTP {status}");
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("{method} {path} on {}: {e}", flags.admin);
            ExitCode::from(1)
        }
    }
}

/// One HTTP/1.1 exchange (the connection closed after it): the status and
/// the body.
fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    auth: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))?;
    Ok((status, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_put_becomes_the_apis_body() {
        let (method, path, body, token, _) = request(&args(
            "put -domain api -descriptor tenant=acme,route=x -limit 50/minute -expires-in 10m -if-version 3",
        ))
        .expect("a put");
        assert_eq!(
            (method.as_str(), path.as_str(), token),
            ("PUT", "/overrides", true)
        );
        assert_eq!(
            body,
            Some(json!({"domain": "api",
                "descriptor": [{"key": "tenant", "value": "acme"}, {"key": "route", "value": "x"}],
                "limit": {"requests_per_unit": 50, "unit": "minute"},
                "expires_in": "10m", "if_version": 3}))
        );
    }

    #[test]
    fn reads_need_no_token_and_bad_arguments_say_why() {
        let (method, path, _, token, _) = request(&args("log -domain api")).expect("a log");
        assert_eq!(
            (method.as_str(), path.as_str(), token),
            ("GET", "/overrides/log?domain=api", false)
        );
        assert!(request(&args("put -domain api -descriptor tenant=acme"))
            .is_err_and(|e| e.contains("-limit")));
        assert!(request(&args("get -bogus 1")).is_err_and(|e| e.contains("bogus")));
        assert!(request(&args("put -domain api -descriptor tenant -limit 1/second")).is_err());
    }
}
