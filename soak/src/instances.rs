//! The service instances under test: the binary of this build on fixed
//! loopback ports (so that a restarted instance is found where it was),
//! each run as a user of its own (so that a link fault can single out one
//! instance's packets), sharing one runtime directory (so that one rename
//! reloads them all).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::support;

/// The first instance's user id; instance `i` runs as `FIRST_UID + i`.
pub const FIRST_UID: u32 = 60_001;

/// One instance.
pub struct Instance {
    pub index: usize,
    pub uid: u32,
    pub grpc: u16,
    pub debug: u16,
    http: u16,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    /// Times it was started.
    pub starts: u32,
}

impl Instance {
    /// Starts instance `index` with `env` (the store's settings and the
    /// shared runtime directory) on top of the soak's defaults; its log
    /// goes to `instance-<index>.log` in `out`.
    pub fn start(index: usize, env: &[(String, String)], out: &Path) -> Instance {
        let port = support::redis::free_port;
        let mut instance = Instance {
            index,
            uid: FIRST_UID + index as u32,
            grpc: port(),
            http: port(),
            debug: port(),
            env: env.to_vec(),
            log: out.join(format!("instance-{index}.log")),
            child: None,
            starts: 0,
        };
        instance.spawn();
        instance
    }

    /// The gRPC address.
    pub fn grpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.grpc)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the instance's log file");
        let uid = self.uid.to_string();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", &uid, "--regid", &uid, "--clear-groups"])
            .args(["--pdeathsig", "KILL"])
            .arg(support::binary())
            .env_clear()
            .env("USE_STATSD", "false")
            .env("HOST", "127.0.0.1")
            .env("PORT", self.http.to_string())
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", self.grpc.to_string())
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", self.debug.to_string())
            .env("LOG_LEVEL", "info");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file, twice"))
            .stderr(log);
        let child = spawn(cmd).expect("the ratelimit binary starts under setpriv");
        self.child = Some(child);
        self.starts += 1;
        let ready = Instant::now() + Duration::from_secs(30);
        while Instant::now() < ready {
            if TcpStream::connect(("127.0.0.1", self.grpc)).is_ok()
                && TcpStream::connect(("127.0.0.1", self.http)).is_ok()
            {
                return;
            }
            if self.exited() {
                panic!(
                    "instance {} exited at start; its log: {}",
                    self.index,
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("instance {} did not listen within 30 s", self.index);
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    /// SIGKILL, reaped.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Started again on the same ports; returns once it listens.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The store nodes whose breaker this instance holds open (its `/stats`
    /// gauges `ratelimit.store.breaker.<node>.open`); `None` when its debug
    /// port does not answer.
    pub fn open_breakers(&self) -> Option<Vec<String>> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.debug));
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        let stats = support::http(addr, "GET", "/stats", b"");
        (stats.status == 200).then(|| {
            stats
                .body
                .lines()
                .filter_map(|l| l.strip_prefix("ratelimit.store.breaker."))
                .filter_map(|l| l.strip_suffix(".open: 1"))
                .map(str::to_string)
                .collect()
        })
    }

    /// The resident set, KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }
}

/// Spawns `cmd` from one thread that lives as long as the soak: the
/// parent-death signal (`--pdeathsig`) fires when the thread that spawned a
/// child ends, and the nemesis restarts instances from threads that do.
fn spawn(cmd: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        });
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    spawner
        .lock()
        .map_err(|_| std::io::Error::other("the spawner's lock"))?
        .send((cmd, tx))
        .map_err(|_| std::io::Error::other("the spawner thread ended"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawner thread ended"))?
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}
