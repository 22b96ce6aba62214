//! A real `memcached` on a free loopback port (from the OS packages), with
//! a raw text-protocol client for what the tests check. Killed on drop.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One memcached process.
pub struct Memcached {
    pub port: u16,
    child: Option<Child>,
}

impl Memcached {
    /// Starts memcached on a free port and waits until it answers.
    pub fn start() -> Memcached {
        Memcached::start_with(&[])
    }

    /// [`Memcached::start`] with TLS only (`-Z`): `cert` and `key` are PEM
    /// files. Readiness is then checked by a TCP connect.
    pub fn start_tls(cert: &str, key: &str) -> Memcached {
        let opts = format!("ssl_chain_cert={cert},ssl_key={key}");
        Memcached::start_with(&["-Z", "-o", &opts])
    }

    fn start_with(extra: &[&str]) -> Memcached {
        let tls = extra.contains(&"-Z");
        for _ in 0..5 {
            let port = super::redis::free_port();
            let mut cmd = Command::new("memcached");
            cmd.args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-m",
                "16",
            ]);
            cmd.args(extra);
            if running_as_root() {
                cmd.args(["-u", "root"]);
            }
            let child = cmd
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("memcached runs (scripts/test.sh installs it)");
            let mut m = Memcached {
                port,
                child: Some(child),
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                let up = if tls {
                    TcpStream::connect(("127.0.0.1", port)).is_ok()
                } else {
                    m.version()
                };
                if up {
                    return m;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            m.kill();
        }
        panic!("memcached did not start");
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends `text`; the reply's lines up to the first for which `last`
    /// holds.
    pub fn exchange(&self, text: &str, last: impl Fn(&str) -> bool) -> Vec<String> {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return Vec::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(text.as_bytes()).is_err() {
            return Vec::new();
        }
        let mut reader = BufReader::new(s);
        let mut out = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return out,
                Ok(_) => {}
            }
            let line = line.trim_end().to_string();
            let done = last(&line);
            out.push(line);
            if done {
                return out;
            }
        }
    }

    fn version(&self) -> bool {
        self.exchange("version\r\n", |_| true)
            .first()
            .is_some_and(|l| l.starts_with("VERSION"))
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<String> {
        let lines = self.exchange(&format!("get {key}\r\n"), |l| l == "END");
        (lines.len() == 3 && lines[0].starts_with("VALUE")).then(|| lines[1].clone())
    }

    /// The seconds `key` has left to live (`mg <key> t`; -1: never expires).
    pub fn ttl(&self, key: &str) -> Option<i64> {
        let lines = self.exchange(&format!("mg {key} t\r\n"), |_| true);
        lines
            .first()?
            .split_whitespace()
            .find_map(|w| w.strip_prefix('t'))
            .and_then(|t| t.parse().ok())
    }

    /// Kills the server: an outage.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
