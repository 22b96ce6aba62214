//! Real Redis servers for tests: a single server, a 6-node cluster and a
//! sentinel group, each started by the test itself from the `redis-server`
//! binary on free loopback ports (127.0.0.1 only), in a temporary directory
//! of its own, with persistence off. With `RATELIMIT_TEST_SERVER=valkey`
//! every server is a Valkey one (`valkey-server`, `valkey-cli`) instead:
//! the test command runs the store tests once with each ([`Flavor`]).
//!
//! Every process is killed and reaped when its owner is dropped, including
//! while a failing test unwinds or while a half-built setup panics. Where
//! `setpriv` exists (util-linux), servers are also started with
//! `--pdeathsig KILL` from one long-lived spawner thread, so they die with
//! the test process even when no destructor runs (a `static` server, a
//! `process::exit`, a killed test binary).
//!
//! Ports come from binding `127.0.0.1:0`; a process-wide set keeps one test
//! binary from handing out a port twice, and a start that loses a race for
//! its port (to another test binary) is retried on new ports. Once a server
//! answers, its `INFO server` process id is checked against the child's, so
//! a server of someone else that happens to own the port is never taken for
//! ours. Every wait is bounded in time.
#![allow(dead_code)]

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Longest wait for one server to answer `PING` after it was spawned.
const START_WAIT: Duration = Duration::from_secs(15);
/// Longest wait for a cluster or a sentinel group to settle.
const SETTLE_WAIT: Duration = Duration::from_secs(30);
/// Longest run of one `redis-cli` command.
const CLI_WAIT: Duration = Duration::from_secs(10);
/// Longest run of `redis-cli --cluster create`.
const CLUSTER_CREATE_WAIT: Duration = Duration::from_secs(60);
/// How many times a start is tried on new ports before giving up.
const START_ATTEMPTS: usize = 6;
/// The cluster bus listens on the client port plus this.
const CLUSTER_BUS_OFFSET: u16 = 10000;
/// Poll interval of the waits.
const POLL: Duration = Duration::from_millis(25);

// ---------------------------------------------------------------------------
// Ports
// ---------------------------------------------------------------------------

/// Ports already handed out by this test binary; never handed out again.
fn handed_ports() -> &'static Mutex<HashSet<u16>> {
    static HANDED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    HANDED.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Whether `127.0.0.1:port` can be bound right now.
fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A free loopback port, never handed out before by this process. Like any
/// such port it can still be taken by someone else before it is bound:
/// the starts below retry on new ports when that happens.
pub fn free_port() -> u16 {
    free_port_where(|_| true)
}

/// A free loopback port `P` whose cluster bus port `P + 10000` is free too;
/// both are marked as handed out.
pub fn free_cluster_port() -> u16 {
    free_port_where(|p| p.checked_add(CLUSTER_BUS_OFFSET).is_some_and(bindable))
}

fn free_port_where(extra: impl Fn(u16) -> bool) -> u16 {
    for _ in 0..10_000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0 to find a free port")
            .port();
        if port == 6379 || !extra(port) {
            continue;
        }
        let mut handed = handed_ports().lock().expect("port set lock");
        let bus = port.checked_add(CLUSTER_BUS_OFFSET);
        if handed.contains(&port) || bus.is_some_and(|b| handed.contains(&b)) {
            continue;
        }
        handed.insert(port);
        if let Some(b) = bus {
            // Reserve the would-be bus port too, so no later plain server
            // of this binary takes a cluster node's bus port.
            handed.insert(b);
        }
        return port;
    }
    panic!("no free loopback port found after 10000 tries");
}

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

/// What the spawner thread starts.
struct SpawnSpec {
    args: Vec<String>,
    cwd: PathBuf,
    log: PathBuf,
}

type SpawnRequest = (SpawnSpec, mpsc::Sender<std::io::Result<Child>>);

/// Whether `setpriv --pdeathsig` works here, so servers die with the test
/// process even when no destructor runs.
pub fn has_setpriv() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The server the tests run, from `RATELIMIT_TEST_SERVER` (`redis`, the
/// default, or `valkey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `redis-server` and `redis-cli`.
    Redis,
    /// `valkey-server` and `valkey-cli`.
    Valkey,
}

impl Flavor {
    /// The flavor this test process runs; an unknown name is an error, not
    /// a silent Redis run.
    pub fn current() -> Flavor {
        static FLAVOR: OnceLock<Flavor> = OnceLock::new();
        *FLAVOR.get_or_init(|| match std::env::var("RATELIMIT_TEST_SERVER").as_deref() {
            Err(_) | Ok("") | Ok("redis") => Flavor::Redis,
            Ok("valkey") => Flavor::Valkey,
            Ok(other) => panic!("RATELIMIT_TEST_SERVER={other}: expected redis or valkey"),
        })
    }

    /// The server binary.
    pub fn server(self) -> &'static str {
        match self {
            Flavor::Redis => "redis-server",
            Flavor::Valkey => "valkey-server",
        }
    }

    /// The command-line client.
    pub fn cli(self) -> &'static str {
        match self {
            Flavor::Redis => "redis-cli",
            Flavor::Valkey => "valkey-cli",
        }
    }

    /// The OS packages that hold both.
    fn packages(self) -> &'static str {
        match self {
            Flavor::Redis => "redis-server and redis-tools",
            Flavor::Valkey => "valkey-server and valkey-tools (bookworm-backports on Debian 12)",
        }
    }
}

/// Checks that the server binaries exist, with a clear message if not.
fn require_binaries() {
    static CHECKED: OnceLock<Result<(), String>> = OnceLock::new();
    let result = CHECKED.get_or_init(|| {
        let flavor = Flavor::current();
        for bin in [flavor.server(), flavor.cli()] {
            let ok = Command::new(bin)
                .arg("--version")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err(format!(
                    "`{bin}` is not installed: install the {} packages (scripts/test.sh does so)",
                    flavor.packages()
                ));
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Spawns `redis-server` with `spec`. The parent-death signal of a child is
/// tied to the thread that spawned it, so all children are spawned by one
/// thread that lives as long as the process.
fn spawn_server(spec: SpawnSpec) -> Child {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("redis-spawner".into())
            .spawn(move || {
                for (spec, reply) in rx {
                    let _ = reply.send(spawn_now(&spec));
                }
            })
            .expect("start the redis spawner thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    let what = spec.args.join(" ");
    sender
        .lock()
        .expect("spawner lock")
        .send((spec, reply_tx))
        .expect("redis spawner thread is alive");
    reply_rx
        .recv_timeout(CLI_WAIT)
        .expect("redis spawner thread answers")
        .unwrap_or_else(|e| panic!("cannot run `{} {what}`: {e}", Flavor::current().server()))
}

fn spawn_now(spec: &SpawnSpec) -> std::io::Result<Child> {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)?;
    let server = Flavor::current().server();
    let mut cmd = if has_setpriv() {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", server]);
        c
    } else {
        Command::new(server)
    };
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
}

/// The result of one `redis-cli` run.
#[derive(Debug, Clone)]
pub struct CliOutput {
    /// Exit status; `None` when it was killed for taking too long.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    /// Whether it exited with 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Trimmed stdout, with stderr after it when the run failed.
    pub fn text(&self) -> String {
        if self.success() {
            self.stdout.trim().to_string()
        } else {
            format!("{}\n{}", self.stdout.trim(), self.stderr.trim())
                .trim()
                .to_string()
        }
    }
}

/// Runs `redis-cli -h 127.0.0.1 -p port args…` (with `REDISCLI_AUTH` when
/// `auth` is set), killed after `within`.
pub fn redis_cli_within(
    port: u16,
    auth: Option<&str>,
    args: &[&str],
    within: Duration,
) -> CliOutput {
    let mut cmd = Command::new(Flavor::current().cli());
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .env_remove("REDISCLI_AUTH")
        .env_remove("VALKEYCLI_AUTH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(pass) = auth {
        cmd.env("REDISCLI_AUTH", pass).env("VALKEYCLI_AUTH", pass);
    }
    run_bounded(cmd, within)
}

/// Runs `redis-cli` against `127.0.0.1:port`, bounded by 10 s.
pub fn redis_cli(port: u16, args: &[&str]) -> CliOutput {
    redis_cli_within(port, None, args, CLI_WAIT)
}

/// Runs `cmd` with piped stdout and stderr; kills it after `within`.
fn run_bounded(mut cmd: Command, within: Duration) -> CliOutput {
    let mut child = cmd
        .spawn()
        .expect("redis-cli runs (is redis-tools installed?)");
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + within;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    CliOutput {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The value of `field` in `INFO`-style `field:value` lines.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// The last `lines` lines of a log file (for panic messages).
fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether a process with this pid is still alive (not gone, not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Polls `cond` every 25 ms until it holds or `within` passed.
fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

// ---------------------------------------------------------------------------
// One redis-server process
// ---------------------------------------------------------------------------

/// Builds the full argument list of a node for a port.
type ArgsFor = Box<dyn Fn(u16, &Path) -> Vec<String> + Send + Sync>;

/// One `redis-server` process (a plain server, a cluster node or a
/// sentinel) with its own directory and log file. Killed and reaped on drop.
struct Node {
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    args: Vec<String>,
    auth: Option<String>,
    child: Option<Child>,
}

impl Node {
    /// Starts a node in a new directory `dir`, on a port from `port_for`,
    /// with the arguments `args_for(port, dir)`; on a lost port race tries
    /// again on a new port.
    fn start(dir: PathBuf, auth: Option<String>, port_for: fn() -> u16, args_for: ArgsFor) -> Node {
        require_binaries();
        fs::create_dir_all(&dir).expect("create the redis node directory");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = port_for();
            let log = dir.join(format!("redis-{port}.log"));
            let mut node = Node {
                port,
                args: args_for(port, &dir),
                dir: dir.clone(),
                log,
                auth: auth.clone(),
                child: None,
            };
            match node.spawn_and_wait() {
                Ok(()) => return node,
                Err(why) => failures.push(format!("port {port}: {why}")),
            }
        }
        panic!(
            "redis-server did not start after {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n---\n")
        );
    }

    /// Spawns the process on `self.port` and waits until it answers `PING`
    /// with its own process id in `INFO server`. On failure the process is
    /// killed and the reason (with its log) returned.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let child = spawn_server(SpawnSpec {
            args: self.args.clone(),
            cwd: self.dir.clone(),
            log: self.log.clone(),
        });
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + START_WAIT;
        let result = loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                break Err(format!("redis-server exited early ({status})"));
            }
            let ping = self.cli_output(&["PING"]);
            if ping.success() && ping.stdout.trim() == "PONG" {
                let info = self.cli_output(&["INFO", "server"]);
                let owner = info_field(&info.stdout, "process_id");
                if owner.as_deref() == Some(pid.to_string().as_str()) {
                    break Ok(());
                }
                break Err(format!(
                    "port {} is answered by another redis-server (pid {owner:?}, ours {pid})",
                    self.port
                ));
            }
            if Instant::now() >= deadline {
                break Err(format!(
                    "no PONG within {START_WAIT:?}; last answer: {}",
                    ping.text()
                ));
            }
            std::thread::sleep(POLL);
        };
        if let Err(why) = result {
            self.kill();
            return Err(format!(
                "{why}\nargs: redis-server {}\nlog {}:\n{}",
                self.args
                    .iter()
                    .map(|a| if a.is_empty() { "\"\"" } else { a.as_str() })
                    .collect::<Vec<_>>()
                    .join(" "),
                self.log.display(),
                log_tail(&self.log, 30)
            ));
        }
        Ok(())
    }

    fn cli_output(&self, args: &[&str]) -> CliOutput {
        redis_cli_within(self.port, self.auth.as_deref(), args, CLI_WAIT)
    }

    fn cli(&self, args: &[&str]) -> String {
        self.cli_output(args).text()
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Sends `SIGSTOP` (`pause`) or `SIGCONT`: a stopped server keeps its
    /// sockets open and answers nothing, as a hung or overloaded one does.
    fn signal_stop(&self, pause: bool) {
        if let Some(pid) = self.pid() {
            let sig = if pause { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
        }
    }

    fn kill(&mut self) {
        // A stopped process is killed as well (SIGKILL needs no CONT).
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the process again on the same port, with the same arguments
    /// and directory. Retries for a few seconds while the port is busy.
    fn restart(&mut self) {
        self.kill();
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(why) => failures.push(why),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!(
            "redis-server did not restart on port {}:\n{}",
            self.port,
            failures.join("\n---\n")
        );
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log_tail(&self) -> String {
        format!("log {}:\n{}", self.log.display(), log_tail(&self.log, 20))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The arguments every data node gets: loopback only, no persistence, its
/// own directory, in the foreground, replicas synced without delay.
fn base_args(port: u16, dir: &Path) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.to_string_lossy(),
        "--daemonize",
        "no",
        // A replica's first sync waits 5 s by default for more replicas.
        "--repl-diskless-sync-delay",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The value following `--requirepass` in `args`, if any.
fn requirepass(args: &[String]) -> Option<String> {
    args.iter()
        .position(|a| a == "--requirepass")
        .and_then(|i| args.get(i + 1))
        .cloned()
}

// ---------------------------------------------------------------------------
// Single server
// ---------------------------------------------------------------------------

/// A single standalone `redis-server` on `127.0.0.1:port`, with persistence
/// off and a temporary directory of its own. Killed and reaped on drop.
///
/// ```ignore
/// let redis = RedisServer::start();
/// env("REDIS_URL", &redis.addr());
/// redis.kill();    // an outage
/// redis.restart(); // back on the same port, empty
/// ```
pub struct RedisServer {
    /// The client port.
    pub port: u16,
    node: Node,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server with the default arguments.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with `args` after the default arguments, e.g.
    /// `["--requirepass", "secret"]` (then [`cli`](Self::cli) authenticates
    /// with that password).
    pub fn start_with(args: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("redis-test-")
            .tempdir()
            .expect("create a temporary directory for redis-server");
        let extra: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let auth = requirepass(&extra);
        let node = Node::start(
            dir.path().join("node"),
            auth,
            free_port,
            Box::new(move |port, dir| {
                let mut all = base_args(port, dir);
                all.extend(extra.iter().cloned());
                all
            }),
        );
        RedisServer {
            port: node.port,
            node,
            dir,
        }
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        self.node.addr()
    }

    /// Runs `redis-cli` with `args` against this server; its trimmed stdout
    /// (with stderr after it when redis-cli failed, e.g. while killed).
    pub fn cli(&self, args: &[&str]) -> String {
        self.node.cli(args)
    }

    /// Like [`cli`](Self::cli), with the exit status and both streams.
    pub fn cli_output(&self, args: &[&str]) -> CliOutput {
        self.node.cli_output(args)
    }

    /// Kills the server (SIGKILL) and reaps it: an outage. The port stays
    /// reserved for [`restart`](Self::restart).
    pub fn kill(&mut self) {
        self.node.kill();
    }

    /// Starts the server again on the same port with the same arguments
    /// (killing it first if it still runs). Its data is gone.
    pub fn restart(&mut self) {
        self.node.restart();
    }

    /// Pauses the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.node.signal_stop(true);
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) {
        self.node.signal_stop(false);
    }

    /// Whether the process runs.
    pub fn is_running(&mut self) -> bool {
        self.node
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    /// The server's directory (its log file is in it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The end of the server's log.
    pub fn log_tail(&self) -> String {
        self.node.log_tail()
    }
}

// ---------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------

/// A Redis Cluster of 6 nodes on loopback, 3 primaries and 3 replicas,
/// created with `redis-cli --cluster create … --cluster-replicas 1`, with a
/// node timeout of 2 s. Ready when every node reports `cluster_state:ok`,
/// all 16384 slots assigned, 3 masters and 3 slaves, and every replica is
/// in sync with its primary. All nodes are killed and reaped on drop.
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts and creates the cluster; panics with the nodes' logs if it
    /// does not settle within 30 s.
    pub fn start() -> RedisCluster {
        let dir = tempfile::Builder::new()
            .prefix("redis-cluster-test-")
            .tempdir()
            .expect("create a temporary directory for the redis cluster");
        let nodes: Vec<Node> = (0..6)
            .map(|i| {
                Node::start(
                    dir.path().join(format!("node-{i}")),
                    None,
                    free_cluster_port,
                    Box::new(|port, dir| {
                        let mut all = base_args(port, dir);
                        all.extend([
                            "--cluster-enabled".to_string(),
                            "yes".to_string(),
                            "--cluster-config-file".to_string(),
                            format!("nodes-{port}.conf"),
                            "--cluster-node-timeout".to_string(),
                            "2000".to_string(),
                        ]);
                        all
                    }),
                )
            })
            .collect();
        let cluster = RedisCluster { nodes, dir };
        cluster.create();
        cluster.wait_ready();
        cluster
    }

    fn create(&self) {
        let addrs = self.seeds();
        let mut args: Vec<&str> = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = redis_cli_within(self.nodes[0].port, None, &args, CLUSTER_CREATE_WAIT);
        if !out.success() {
            panic!(
                "`redis-cli --cluster create` failed: {}\n{}",
                out.text(),
                self.logs()
            );
        }
    }

    /// Waits until every node sees a healthy, complete cluster and every
    /// replica's link to its primary is up.
    fn wait_ready(&self) {
        let mut last = String::new();
        let ok = wait_until(SETTLE_WAIT, || {
            for node in &self.nodes {
                let info = node.cli(&["CLUSTER", "INFO"]);
                let healthy = info_field(&info, "cluster_state").as_deref() == Some("ok")
                    && info_field(&info, "cluster_slots_assigned").as_deref() == Some("16384")
                    && info_field(&info, "cluster_slots_ok").as_deref() == Some("16384")
                    && info_field(&info, "cluster_known_nodes").as_deref() == Some("6");
                if !healthy {
                    last = format!("{}: {info}", node.addr());
                    return false;
                }
                let nodes = node.cli(&["CLUSTER", "NODES"]);
                let (masters, replicas) = count_roles(&nodes);
                if masters != 3 || replicas != 3 {
                    last = format!("{}: {nodes}", node.addr());
                    return false;
                }
                let repl = node.cli(&["INFO", "replication"]);
                if info_field(&repl, "role").as_deref() == Some("slave")
                    && info_field(&repl, "master_link_status").as_deref() != Some("up")
                {
                    last = format!("{}: {repl}", node.addr());
                    return false;
                }
            }
            true
        });
        if !ok {
            panic!(
                "redis cluster not ready within {SETTLE_WAIT:?}; last state of {last}\n{}",
                self.logs()
            );
        }
    }

    /// The addresses of all 6 nodes (`127.0.0.1:P`), to seed a client.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(Node::addr).collect()
    }

    /// The addresses of the nodes that are primaries now.
    pub fn primaries(&self) -> Vec<String> {
        self.with_role("master")
    }

    /// The addresses of the nodes that are replicas now.
    pub fn replicas(&self) -> Vec<String> {
        self.with_role("slave")
    }

    fn with_role(&self, role: &str) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter(|n| {
                let repl = n.cli(&["INFO", "replication"]);
                info_field(&repl, "role").as_deref() == Some(role)
            })
            .map(Node::addr)
            .collect()
    }

    /// The client ports of all nodes.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Runs `redis-cli -c` (following redirections) with `args` against the
    /// first running node.
    pub fn cli(&self, args: &[&str]) -> String {
        let node = self
            .nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a running cluster node");
        let mut all = vec!["-c"];
        all.extend_from_slice(args);
        node.cli(&all)
    }

    /// Runs `redis-cli` with `args` against the node on `port`.
    pub fn node_cli(&self, port: u16, args: &[&str]) -> String {
        self.node(port).cli(args)
    }

    /// Kills the node on `port` (e.g. a primary, to see a failover).
    pub fn kill_node(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// Pauses the node on `port` (SIGSTOP).
    pub fn pause_node(&self, port: u16) {
        self.node(port).signal_stop(true);
    }

    /// Resumes the node on `port` (SIGCONT).
    pub fn resume_node(&self, port: u16) {
        self.node(port).signal_stop(false);
    }

    /// Starts the node on `port` again; it rejoins with its saved identity.
    pub fn restart_node(&mut self, port: u16) {
        self.node_mut(port).restart();
    }

    /// The process ids of the running nodes.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(Node::pid).collect()
    }

    fn node(&self, port: u16) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(Node::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Counts the non-failed masters and replicas in `CLUSTER NODES` output.
fn count_roles(cluster_nodes: &str) -> (usize, usize) {
    let mut masters = 0;
    let mut replicas = 0;
    for line in cluster_nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(flags), Some(link)) = (fields.get(2), fields.get(7)) else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if flags.iter().any(|f| f.starts_with("fail")) || *link != "connected" {
            continue;
        }
        if flags.contains(&"master") {
            masters += 1;
        } else if flags.contains(&"slave") {
            replicas += 1;
        }
    }
    (masters, replicas)
}

// ---------------------------------------------------------------------------
// Sentinel
// ---------------------------------------------------------------------------

/// The name the sentinels monitor the primary under.
const MASTER_NAME: &str = "mymaster";

/// A sentinel group on loopback: one primary, one replica of it, and 3
/// sentinels monitoring the primary as `mymaster` (quorum 2, down after
/// 1 s, failover timeout 5 s). Ready when every sentinel reports the
/// primary's address, knows the replica and the 2 other sentinels. All
/// processes are killed and reaped on drop.
pub struct RedisSentinel {
    primary: Node,
    replica: Node,
    sentinels: Vec<Node>,
    dir: tempfile::TempDir,
}

impl RedisSentinel {
    /// Starts the primary, its replica (waiting for it to sync) and the
    /// sentinels; panics with their logs if they do not settle within 30 s.
    pub fn start() -> RedisSentinel {
        let dir = tempfile::Builder::new()
            .prefix("redis-sentinel-test-")
            .tempdir()
            .expect("create a temporary directory for the redis sentinels");
        let primary = Node::start(
            dir.path().join("primary"),
            None,
            free_port,
            Box::new(base_args),
        );
        let primary_port = primary.port;
        let replica = Node::start(
            dir.path().join("replica"),
            None,
            free_port,
            Box::new(move |port, dir| {
                let mut all = base_args(port, dir);
                all.extend([
                    "--replicaof".to_string(),
                    "127.0.0.1".to_string(),
                    primary_port.to_string(),
                ]);
                all
            }),
        );
        // Let the replica sync first: a sentinel learns of replicas from the
        // primary's INFO, which it asks for at once but then only every 10 s.
        let synced = wait_until(SETTLE_WAIT, || {
            let repl = replica.cli(&["INFO", "replication"]);
            info_field(&repl, "master_link_status").as_deref() == Some("up")
                && info_field(&primary.cli(&["INFO", "replication"]), "connected_slaves").as_deref()
                    == Some("1")
        });
        if !synced {
            panic!(
                "redis replica did not sync with its primary within {SETTLE_WAIT:?}\n{}\n{}",
                primary.log_tail(),
                replica.log_tail()
            );
        }
        let sentinels = (0..3)
            .map(|i| {
                Node::start(
                    dir.path().join(format!("sentinel-{i}")),
                    None,
                    free_port,
                    Box::new(move |port, dir| {
                        let conf = dir.join(format!("sentinel-{port}.conf"));
                        let text = format!(
                            "port {port}\n\
                             bind 127.0.0.1\n\
                             daemonize no\n\
                             dir {}\n\
                             sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                             sentinel failover-timeout {MASTER_NAME} 5000\n",
                            dir.display()
                        );
                        let mut f = fs::File::create(&conf).expect("write sentinel.conf");
                        f.write_all(text.as_bytes()).expect("write sentinel.conf");
                        vec![
                            conf.to_string_lossy().into_owned(),
                            "--sentinel".to_string(),
                        ]
                    }),
                )
            })
            .collect();
        let group = RedisSentinel {
            primary,
            replica,
            sentinels,
            dir,
        };
        group.wait_ready();
        group
    }

    fn wait_ready(&self) {
        let want = format!("127.0.0.1\n{}", self.primary.port);
        let mut last = String::new();
        let ok = wait_until(SETTLE_WAIT, || {
            for s in &self.sentinels {
                let addr = s.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
                if addr != want {
                    last = format!("{}: master address {addr:?}", s.addr());
                    return false;
                }
                let master = s.cli(&["SENTINEL", "MASTER", MASTER_NAME]);
                let fields = pairs(&master);
                let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
                if get("num-slaves") != Some("1") || get("num-other-sentinels") != Some("2") {
                    last = format!("{}: {master}", s.addr());
                    return false;
                }
            }
            true
        });
        if !ok {
            panic!(
                "redis sentinels not ready within {SETTLE_WAIT:?}; last state of {last}\n{}",
                self.logs()
            );
        }
    }

    /// The monitored name, `mymaster`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The sentinels' addresses, `127.0.0.1:S`.
    pub fn sentinels(&self) -> Vec<String> {
        self.sentinels.iter().map(Node::addr).collect()
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|n| n.port).collect()
    }

    /// The `REDIS_URL` of the original service in sentinel form:
    /// `mymaster,127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3`.
    pub fn url(&self) -> String {
        let mut parts = vec![MASTER_NAME.to_string()];
        parts.extend(self.sentinels());
        parts.join(",")
    }

    /// The port of the node started as primary.
    pub fn primary_port(&self) -> u16 {
        self.primary.port
    }

    /// The port of the node started as replica.
    pub fn replica_port(&self) -> u16 {
        self.replica.port
    }

    /// What the first running sentinel names as the master's address now
    /// (`127.0.0.1:P`), or `None`.
    pub fn current_master(&self) -> Option<String> {
        let s = self.sentinels.iter().find(|n| n.child.is_some())?;
        let out = s.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
        let mut lines = out.lines();
        let (host, port) = (lines.next()?, lines.next()?);
        port.parse::<u16>().ok().map(|p| format!("{host}:{p}"))
    }

    /// Runs `redis-cli` with `args` against the data node on `port`
    /// (primary or replica) or a sentinel.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        self.all()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node of the sentinel group on port {port}"))
            .cli(args)
    }

    /// Kills the node started as primary (the sentinels then fail over to
    /// the replica after about 1 s plus an election).
    pub fn kill_primary(&mut self) {
        self.primary.kill();
    }

    /// Starts the node started as primary again on its port.
    pub fn restart_primary(&mut self) {
        self.primary.restart();
    }

    /// The process ids of the running processes.
    pub fn pids(&self) -> Vec<u32> {
        self.all().filter_map(Node::pid).collect()
    }

    fn all(&self) -> impl Iterator<Item = &Node> {
        [&self.primary, &self.replica]
            .into_iter()
            .chain(self.sentinels.iter())
    }

    fn logs(&self) -> String {
        self.all()
            .map(Node::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `field\nvalue\n…` (redis-cli's rendering of a flat reply) as pairs.
fn pairs(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .filter_map(|c| match c {
            [k, v] => Some((k.to_string(), v.to_string())),
            _ => None,
        })
        .collect()
}
