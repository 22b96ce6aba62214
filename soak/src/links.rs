//! Link faults between one instance and one Redis primary, on loopback:
//! the instance's packets to the primary's port, singled out by the
//! instance's user id (`iptables -m owner`), are rejected (a cut: the
//! connection is reset and new ones refused), or its connections to the
//! primary are reset and its new ones redirected (`REDIRECT`) to a proxy
//! that delays every byte both ways (a slow link; this kernel has no
//! `netem`). Needs root and iptables; every rule is removed by
//! [`Links::heal_all`] (also on drop).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The link faults in place, to undo.
#[derive(Default)]
pub struct Links {
    cuts: Vec<(u32, u16)>,
    slows: Vec<Slow>,
}

/// A slowed link: its rules and its proxy.
struct Slow {
    uid: u32,
    port: u16,
    proxy: DelayProxy,
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// An iptables rule of `table` on instance `uid`'s TCP packets to `port`
/// on loopback, jumping to `target` (`-A` adds it, `-D` removes it).
fn owner_rule(table: &str, action: &str, uid: u32, port: u16, target: &[&str]) -> Vec<String> {
    let (port, uid) = (port.to_string(), uid.to_string());
    let mut rule: Vec<&str> = vec!["-t", table, action, "OUTPUT", "-o", "lo", "-p", "tcp"];
    rule.extend(["--dport", &port, "-m", "owner", "--uid-owner", &uid, "-j"]);
    rule.extend(target);
    rule.into_iter().map(str::to_string).collect()
}

/// Rejects the packets with a TCP reset: the connection is reset, new ones refused.
fn cut_rule(action: &str, uid: u32, port: u16) -> Vec<String> {
    owner_rule(
        "filter",
        action,
        uid,
        port,
        &["REJECT", "--reject-with", "tcp-reset"],
    )
}

/// Redirects new connections to the local port `to` (a proxy).
fn redirect_rule(action: &str, uid: u32, port: u16, to: u16) -> Vec<String> {
    owner_rule(
        "nat",
        action,
        uid,
        port,
        &["REDIRECT", "--to-ports", &to.to_string()],
    )
}

fn iptables(rule: &[String]) -> Result<(), String> {
    let mut args = vec!["-w"];
    args.extend(rule.iter().map(String::as_str));
    run("iptables", &args)
}

impl Links {
    /// Whether this machine can cut and slow links: root and iptables
    /// with the owner match and NAT. An error says what is missing.
    pub fn check() -> Result<(), String> {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("the link faults need root (iptables)".into());
        }
        run("iptables", &["-w", "-L", "OUTPUT", "-n"])?;
        run("iptables", &["-w", "-t", "nat", "-L", "OUTPUT", "-n"])
    }

    /// Removes the rules a soak that was killed left for the users `uids`.
    pub fn clear_stale(uids: std::ops::Range<u32>) {
        for table in ["filter", "nat"] {
            let Ok(out) = Command::new("iptables")
                .args(["-w", "-t", table, "-S", "OUTPUT"])
                .output()
            else {
                continue;
            };
            for rule in String::from_utf8_lossy(&out.stdout).lines() {
                let ours = uids
                    .clone()
                    .any(|u| rule.contains(&format!("--uid-owner {u} ")));
                if let (true, Some(spec)) = (ours, rule.strip_prefix("-A ")) {
                    let mut args = vec!["-w", "-t", table, "-D"];
                    args.extend(spec.split_whitespace());
                    let _ = run("iptables", &args);
                }
            }
        }
    }

    /// Rejects instance `uid`'s packets to `port`.
    pub fn cut(&mut self, uid: u32, port: u16) -> Result<(), String> {
        iptables(&cut_rule("-A", uid, port))?;
        self.cuts.push((uid, port));
        Ok(())
    }

    pub fn uncut(&mut self, uid: u32, port: u16) -> Result<(), String> {
        self.cuts.retain(|c| *c != (uid, port));
        iptables(&cut_rule("-D", uid, port))
    }

    /// Delays instance `uid`'s traffic with `port` by `delay_ms` each way:
    /// its connections there are reset, and the new ones go through a
    /// proxy (the reset rule matches only packets still addressed to
    /// `port`, which the redirected ones are not).
    pub fn slow(&mut self, uid: u32, port: u16, delay_ms: u64) -> Result<(), String> {
        let proxy = DelayProxy::start(port, Duration::from_millis(delay_ms))?;
        iptables(&redirect_rule("-A", uid, port, proxy.port))?;
        iptables(&cut_rule("-A", uid, port))?;
        self.slows.push(Slow { uid, port, proxy });
        Ok(())
    }

    /// Undoes [`Links::slow`]: the proxied connections close, and the
    /// instance's next ones go straight to the primary.
    pub fn unslow(&mut self, uid: u32, port: u16) -> Result<(), String> {
        let Some(at) = self
            .slows
            .iter()
            .position(|s| s.uid == uid && s.port == port)
        else {
            return Ok(());
        };
        let slow = self.slows.remove(at);
        let undone = iptables(&redirect_rule("-D", uid, port, slow.proxy.port))
            .and(iptables(&cut_rule("-D", uid, port)));
        slow.proxy.stop();
        undone
    }

    /// Removes every rule and stops every proxy.
    pub fn heal_all(&mut self) {
        for (uid, port) in std::mem::take(&mut self.cuts) {
            let _ = iptables(&cut_rule("-D", uid, port));
        }
        for slow in std::mem::take(&mut self.slows) {
            let _ = iptables(&redirect_rule("-D", slow.uid, slow.port, slow.proxy.port));
            let _ = iptables(&cut_rule("-D", slow.uid, slow.port));
            slow.proxy.stop();
        }
    }
}

/// A TCP proxy on loopback to `127.0.0.1:<target>` that holds every chunk
/// it reads for `delay` before writing it on (a delay line each way, so the
/// throughput is kept and every round trip takes `2 × delay` more).
struct DelayProxy {
    port: u16,
    stopped: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl DelayProxy {
    fn start(target: u16, delay: Duration) -> Result<DelayProxy, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stopped = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (stop, conns) = (Arc::clone(&stopped), Arc::clone(&open));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                if let Ok(mut open) = conns.lock() {
                    open.extend(client.try_clone().ok());
                    open.extend(server.try_clone().ok());
                }
                delay_line(client, s2, delay);
                delay_line(server, c2, delay);
            }
        });
        Ok(DelayProxy {
            port,
            stopped,
            open,
        })
    }

    fn stop(self) {
        self.stopped.store(true, Ordering::Relaxed);
        if let Ok(open) = self.open.lock() {
            for s in open.iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
fn delay_line(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (at, chunk) in rx {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}

impl Drop for Links {
    fn drop(&mut self) {
        self.heal_all();
    }
}
