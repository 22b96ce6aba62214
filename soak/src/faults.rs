//! The nemesis: a schedule of faults drawn from a seed, run on real
//! processes, overlapping, each written down from its start until it was
//! seen healed.
//!
//! Faults that stop a primary (pause, kill, failover) run one at a time, so
//! that two of the three primaries are always there to elect a replica; the
//! others (link faults, instance kills, reloads) overlap them and each
//! other freely.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};

use super::instances::Instance;
use super::links::Links;
use super::log::{now_us, Fault, FaultKind};
use super::rules;
use crate::support::redis::{redis_cli_within, RedisCluster};

/// A cluster node's client port and, for a primary, its slot ranges.
#[derive(Debug, Clone)]
pub struct Shard {
    pub primary: u16,
    pub replica: Option<u16>,
    pub slots: Vec<(u16, u16)>,
}

/// One planned fault: when, what, and the draw that picks its target and
/// its length when it starts (the targets depend on the topology then).
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    pub at: Duration,
    pub kind: FaultKind,
    pub draw: u64,
}

/// The schedule of a run of `length` from `seed`: about one fault per
/// `spacing`, at least one of each kind, the kinds drawn in shuffled
/// rounds of all of them, most of them right on top of the one before,
/// the last starting well before the run ends.
pub fn schedule(seed: u64, length: Duration, spacing: Duration) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let warm_up = Duration::from_secs(5);
    let tail = Duration::from_secs(12);
    let span = length.saturating_sub(warm_up + tail);
    let count = ((span.as_secs_f64() / spacing.as_secs_f64()) as usize).max(FaultKind::ALL.len());
    let gap = span.as_secs_f64() / count as f64;
    let mut kinds = Vec::new();
    while kinds.len() < count {
        let mut round = FaultKind::ALL.to_vec();
        round.shuffle(&mut rng);
        kinds.extend(round);
    }
    let mut plan: Vec<Planned> = Vec::with_capacity(count);
    for (k, kind) in kinds.into_iter().take(count).enumerate() {
        // Three faults in four start within 1.5 s of the one before, on
        // top of it.
        let at = match plan.last() {
            Some(before) if rng.random_bool(0.75) => {
                before.at + Duration::from_secs_f64(rng.random_range(0.2..1.5))
            }
            _ => warm_up + Duration::from_secs_f64(gap * (k as f64 + rng.random_range(0.0..1.0))),
        };
        let at = plan.last().map_or(at, |before| at.max(before.at));
        plan.push(Planned {
            at,
            kind,
            draw: rng.random(),
        });
    }
    plan
}

/// The node timeout the cluster runs with (see `RedisCluster`).
const NODE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a fault waits for the cluster to heal before saying it did not.
const HEAL_WAIT: Duration = Duration::from_secs(40);

/// What the nemesis works on.
pub struct Nemesis {
    pub cluster: Mutex<RedisCluster>,
    pub instances: Vec<Mutex<Instance>>,
    links: Mutex<Links>,
    /// `<runtime>/current/ratelimit/config`, and a scratch file beside it.
    config_dir: PathBuf,
    version: Mutex<usize>,
    log: Mutex<std::fs::File>,
    /// Held by the fault that stops a primary, for its whole length.
    primary_turn: Mutex<()>,
    /// Held by a slow link (the delay is one qdisc's).
    slow_turn: Mutex<()>,
    /// Nodes paused or killed now: never asked anything.
    down: Mutex<HashSet<u16>>,
    ids: AtomicUsize,
}

impl Nemesis {
    pub fn new(
        cluster: RedisCluster,
        instances: Vec<Instance>,
        config_dir: PathBuf,
        log: std::fs::File,
    ) -> Nemesis {
        Nemesis {
            cluster: Mutex::new(cluster),
            instances: instances.into_iter().map(Mutex::new).collect(),
            links: Mutex::new(Links::default()),
            config_dir,
            version: Mutex::new(0),
            log: Mutex::new(log),
            primary_turn: Mutex::new(()),
            slow_turn: Mutex::new(()),
            down: Mutex::new(HashSet::new()),
            ids: AtomicUsize::new(0),
        }
    }

    /// Runs `plan` from `started`, each fault on a thread of its own; returns
    /// once every fault has ended.
    pub fn run(self: &Arc<Self>, plan: &[Planned], started: Instant) {
        let mut threads = Vec::new();
        for p in plan {
            let wait = (started + p.at).saturating_duration_since(Instant::now());
            std::thread::sleep(wait);
            let (me, p) = (Arc::clone(self), *p);
            threads.push(std::thread::spawn(move || me.cause(p)));
        }
        for t in threads {
            let _ = t.join();
        }
    }

    fn cause(&self, p: Planned) {
        let mut rng = StdRng::seed_from_u64(p.draw);
        let fault = match p.kind {
            FaultKind::PausePrimary => self.pause_primary(&mut rng),
            FaultKind::KillPrimary => self.kill_primary(&mut rng),
            FaultKind::Failover => self.failover(&mut rng, false),
            FaultKind::ForcedFailover => self.failover(&mut rng, true),
            FaultKind::CutLink => self.cut_link(&mut rng),
            FaultKind::SlowLink => self.slow_link(&mut rng),
            FaultKind::KillInstance => self.kill_instance(&mut rng),
            FaultKind::Reload => self.reload(),
            // Seen in the machine's counters, never caused.
            FaultKind::HostStall => None,
        };
        if let Some(f) = fault {
            let mut log = self.log.lock().expect("fault log");
            let _ = writeln!(log, "{}", f.line());
            let _ = log.flush();
            eprintln!(
                "chaos: {} {} ({:.1} s) {}",
                f.id,
                f.kind,
                (f.end_us - f.start_us) as f64 / 1e6,
                f.note
            );
        }
    }

    fn fault(&self, kind: FaultKind) -> Fault {
        Fault {
            id: self.ids.fetch_add(1, Ordering::Relaxed),
            kind,
            instance: None,
            primary: None,
            slots: Vec::new(),
            start_us: now_us(),
            end_us: 0,
            promoted_us: None,
            note: String::new(),
        }
    }

    /// A node that answers now (neither paused nor killed).
    fn live_node(&self) -> Option<u16> {
        let down = self.down.lock().expect("down set").clone();
        let ports = self.cluster.lock().expect("cluster").ports();
        ports.into_iter().find(|p| !down.contains(p))
    }

    /// The shards as a live node sees them: each primary that serves slots,
    /// with a replica if one follows it.
    pub fn shards(&self) -> Vec<Shard> {
        let Some(port) = self.live_node() else {
            return Vec::new();
        };
        let out = redis_cli_within(port, None, &["CLUSTER", "NODES"], Duration::from_secs(2));
        parse_nodes(&out.stdout)
    }

    /// A shard, drawn, whose primary has a replica in sync.
    fn pick_shard(&self, rng: &mut StdRng) -> Option<Shard> {
        let shards: Vec<Shard> = self
            .shards()
            .into_iter()
            .filter(|s| s.replica.is_some() && !s.slots.is_empty())
            .collect();
        shards.choose(rng).cloned()
    }

    /// Waits until every node answers, the cluster is `ok`, there are three
    /// primaries each with a replica in sync, and every node runs with the
    /// soak's settings; `false` if that did not happen within [`HEAL_WAIT`].
    fn wait_healthy(&self) -> bool {
        let until = Instant::now() + HEAL_WAIT;
        while Instant::now() < until {
            if self.healthy() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    fn healthy(&self) -> bool {
        let ports = self.cluster.lock().expect("cluster").ports();
        let cli =
            |p: u16, args: &[&str]| redis_cli_within(p, None, args, Duration::from_secs(2)).stdout;
        for &p in &ports {
            let info = cli(p, &["CLUSTER", "INFO"]);
            if !info.contains("cluster_state:ok") {
                return false;
            }
            let repl = cli(p, &["INFO", "replication"]);
            if repl.contains("role:slave") && !repl.contains("master_link_status:up") {
                return false;
            }
        }
        let shards = self.shards();
        shards.len() == 3 && shards.iter().all(|s| s.replica.is_some())
    }

    /// The soak's settings on every node (a restarted node starts without
    /// them): a primary's failure leaves the other slots served, and a
    /// replica takes over whatever the age of its data.
    pub fn configure_nodes(&self) {
        let ports = self.cluster.lock().expect("cluster").ports();
        for p in ports {
            for (k, v) in [
                ("cluster-require-full-coverage", "no"),
                ("cluster-replica-validity-factor", "0"),
            ] {
                redis_cli_within(p, None, &["CONFIG", "SET", k, v], Duration::from_secs(2));
            }
        }
    }

    /// Polls until a node other than `old` serves `slots`; when that was seen.
    fn promoted_from(&self, old: u16, slots: &[(u16, u16)], within: Duration) -> Option<u64> {
        let until = Instant::now() + within;
        while Instant::now() < until {
            let moved = self
                .shards()
                .iter()
                .any(|s| s.primary != old && s.slots.first() == slots.first());
            if moved {
                return Some(now_us());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn on_primary(&self, f: &mut Fault, shard: &Shard) {
        f.primary = Some(shard.primary);
        f.slots = shard.slots.clone();
    }

    fn pause_primary(&self, rng: &mut StdRng) -> Option<Fault> {
        let _turn = self.primary_turn.lock().expect("primary turn");
        let shard = self.pick_shard(rng)?;
        let length = Duration::from_millis(rng.random_range(1_000..6_000));
        let mut f = self.fault(FaultKind::PausePrimary);
        self.on_primary(&mut f, &shard);
        self.down.lock().expect("down").insert(shard.primary);
        f.start_us = now_us();
        self.cluster
            .lock()
            .expect("cluster")
            .pause_node(shard.primary);
        f.promoted_us = self.promoted_from(shard.primary, &shard.slots, length);
        let left = Duration::from_micros(
            (f.start_us + length.as_micros() as u64).saturating_sub(now_us()),
        );
        std::thread::sleep(left);
        self.cluster
            .lock()
            .expect("cluster")
            .resume_node(shard.primary);
        self.down.lock().expect("down").remove(&shard.primary);
        let healed = self.wait_healthy();
        f.end_us = now_us();
        f.note = format!(
            "{} paused {:.1} s, {}{}",
            shard.primary,
            length.as_secs_f64(),
            match f.promoted_us {
                Some(t) => format!(
                    "replica promoted after {:.1} s",
                    (t - f.start_us) as f64 / 1e6
                ),
                None => "no failover".into(),
            },
            if healed { "" } else { "; NOT HEALED" }
        );
        Some(f)
    }

    fn kill_primary(&self, rng: &mut StdRng) -> Option<Fault> {
        let _turn = self.primary_turn.lock().expect("primary turn");
        let shard = self.pick_shard(rng)?;
        let mut f = self.fault(FaultKind::KillPrimary);
        self.on_primary(&mut f, &shard);
        self.down.lock().expect("down").insert(shard.primary);
        f.start_us = now_us();
        self.cluster
            .lock()
            .expect("cluster")
            .kill_node(shard.primary);
        f.promoted_us = self.promoted_from(shard.primary, &shard.slots, NODE_TIMEOUT * 10);
        std::thread::sleep(Duration::from_millis(rng.random_range(0..2_000)));
        self.cluster
            .lock()
            .expect("cluster")
            .restart_node(shard.primary);
        self.down.lock().expect("down").remove(&shard.primary);
        self.configure_nodes();
        let healed = self.wait_healthy();
        f.end_us = now_us();
        f.note = format!(
            "{} killed, {}, restarted as a replica{}",
            shard.primary,
            match f.promoted_us {
                Some(t) => format!(
                    "replica promoted after {:.1} s",
                    (t - f.start_us) as f64 / 1e6
                ),
                None => "NO FAILOVER".into(),
            },
            if healed { "" } else { "; NOT HEALED" }
        );
        Some(f)
    }

    fn failover(&self, rng: &mut StdRng, force: bool) -> Option<Fault> {
        let _turn = self.primary_turn.lock().expect("primary turn");
        let shard = self.pick_shard(rng)?;
        let replica = shard.replica?;
        let kind = if force {
            FaultKind::ForcedFailover
        } else {
            FaultKind::Failover
        };
        let mut f = self.fault(kind);
        self.on_primary(&mut f, &shard);
        f.start_us = now_us();
        let mut args = vec!["CLUSTER", "FAILOVER"];
        if force {
            args.push("FORCE");
        }
        let out = redis_cli_within(replica, None, &args, Duration::from_secs(2));
        f.promoted_us = self.promoted_from(shard.primary, &shard.slots, Duration::from_secs(15));
        let healed = self.wait_healthy();
        f.end_us = now_us();
        f.note = format!(
            "{replica} took over from {} ({}), {}{}",
            shard.primary,
            out.stdout.trim(),
            match f.promoted_us {
                Some(t) => format!("after {:.2} s", (t - f.start_us) as f64 / 1e6),
                None => "NOT PROMOTED".into(),
            },
            if healed { "" } else { "; NOT HEALED" }
        );
        Some(f)
    }

    fn cut_link(&self, rng: &mut StdRng) -> Option<Fault> {
        let i = rng.random_range(0..self.instances.len());
        let shard = self.shards().choose(rng).cloned()?;
        let uid = self.instances[i].lock().expect("instance").uid;
        let length = Duration::from_millis(rng.random_range(1_000..5_000));
        let mut f = self.fault(FaultKind::CutLink);
        self.on_primary(&mut f, &shard);
        f.instance = Some(i);
        f.start_us = now_us();
        if let Err(e) = self.links.lock().expect("links").cut(uid, shard.primary) {
            panic!("cut a link: {e}");
        }
        std::thread::sleep(length);
        let _ = self.links.lock().expect("links").uncut(uid, shard.primary);
        f.end_us = now_us();
        f.note = format!(
            "instance {i} cut off {} for {:.1} s",
            shard.primary,
            length.as_secs_f64()
        );
        Some(f)
    }

    fn slow_link(&self, rng: &mut StdRng) -> Option<Fault> {
        let _turn = self.slow_turn.lock().expect("slow turn");
        let i = rng.random_range(0..self.instances.len());
        let shard = self.shards().choose(rng).cloned()?;
        let uid = self.instances[i].lock().expect("instance").uid;
        let delay = *[2u64, 10, 20, 40].choose(rng)?;
        let length = Duration::from_millis(rng.random_range(2_000..6_000));
        let mut f = self.fault(FaultKind::SlowLink);
        self.on_primary(&mut f, &shard);
        f.instance = Some(i);
        f.start_us = now_us();
        if let Err(e) = self
            .links
            .lock()
            .expect("links")
            .slow(uid, shard.primary, delay)
        {
            panic!("slow a link: {e}");
        }
        std::thread::sleep(length);
        let _ = self.links.lock().expect("links").unslow(uid, shard.primary);
        f.end_us = now_us();
        f.note = format!(
            "instance {i} to {} delayed {delay} ms for {:.1} s",
            shard.primary,
            length.as_secs_f64()
        );
        Some(f)
    }

    fn kill_instance(&self, rng: &mut StdRng) -> Option<Fault> {
        let i = rng.random_range(0..self.instances.len());
        let down = Duration::from_millis(rng.random_range(300..3_000));
        let mut instance = self.instances[i].lock().expect("instance");
        let mut f = self.fault(FaultKind::KillInstance);
        f.instance = Some(i);
        f.start_us = now_us();
        instance.kill();
        std::thread::sleep(down);
        instance.restart();
        f.end_us = now_us();
        f.note = format!(
            "instance {i} killed, restarted after {:.1} s",
            down.as_secs_f64()
        );
        Some(f)
    }

    /// Renames the other config into the runtime directory: every instance
    /// reloads it.
    pub fn reload(&self) -> Option<Fault> {
        let mut version = self.version.lock().expect("version");
        *version ^= 1;
        let mut f = self.fault(FaultKind::Reload);
        let scratch = self.config_dir.join("../chaos.yaml.next");
        std::fs::write(&scratch, rules::config(*version)).ok()?;
        f.start_us = now_us();
        std::fs::rename(&scratch, self.config_dir.join("chaos.yaml")).ok()?;
        f.end_us = now_us();
        f.note = format!("config {} renamed in", ["A", "B"][*version]);
        Some(f)
    }

    /// Undoes every link fault.
    pub fn heal_links(&self) {
        self.links.lock().expect("links").heal_all();
    }
}

/// The shards of `CLUSTER NODES` output: each primary with slots, its
/// first replica, and its slot ranges.
pub fn parse_nodes(text: &str) -> Vec<Shard> {
    struct Row<'a> {
        id: &'a str,
        port: u16,
        primary: bool,
        failed: bool,
        follows: &'a str,
        slots: Vec<(u16, u16)>,
    }
    let rows: Vec<Row<'_>> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(Row {
                id: f[0],
                port,
                primary: f[2].contains("master"),
                failed: f[2].contains("fail"),
                follows: f[3],
                slots,
            })
        })
        .collect();
    rows.iter()
        .filter(|r| r.primary && !r.failed && !r.slots.is_empty())
        .map(|p| Shard {
            primary: p.port,
            replica: rows
                .iter()
                .find(|r| !r.primary && !r.failed && r.follows == p.id)
                .map(|r| r.port),
            slots: p.slots.clone(),
        })
        .collect()
}
