//! The Redis test infrastructure itself: real servers started by the tests
//! on free loopback ports, a 6-node cluster, a sentinel group, and that no
//! process outlives its owner.

// Tests and the load tool measure the real elapsed time of real processes.
#![allow(clippy::disallowed_types)]

use crate::support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::redis::{
    free_cluster_port, free_port, has_setpriv, info_field, pid_alive, redis_cli, redis_cli_within,
    RedisCluster, RedisSentinel, RedisServer,
};

use support::eventually;

fn assert_all_gone(pids: &[u32]) {
    // Drop reaps synchronously; allow a moment anyway.
    let gone = eventually(Duration::from_secs(5), || {
        pids.iter().all(|p| !pid_alive(*p))
    });
    let alive: Vec<u32> = pids.iter().copied().filter(|p| pid_alive(*p)).collect();
    assert!(gone, "redis-server processes left after drop: {alive:?}");
}

#[test]
fn single_server_answers_and_survives_kill_and_restart() {
    let started = Instant::now();
    let mut redis = RedisServer::start();
    eprintln!("single server ready in {:?}", started.elapsed());
    assert_ne!(redis.port, 6379);
    assert_eq!(redis.addr(), format!("127.0.0.1:{}", redis.port));
    assert_eq!(redis.cli(&["PING"]), "PONG");
    assert_eq!(redis.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(redis.cli(&["GET", "k"]), "v");
    // Persistence is off and the server binds loopback only.
    assert_eq!(redis.cli(&["CONFIG", "GET", "save"]), "save");
    assert_eq!(
        redis.cli(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno"
    );
    assert_eq!(redis.cli(&["CONFIG", "GET", "bind"]), "bind\n127.0.0.1");
    let first_pid = redis.pid().expect("running");

    let port = redis.port;
    redis.kill();
    assert!(!redis.is_running());
    assert!(!pid_alive(first_pid), "killed server is reaped");
    let down = redis.cli_output(&["PING"]);
    assert!(!down.success(), "a killed server does not answer: {down:?}");

    let started = Instant::now();
    redis.restart();
    eprintln!("single server restarted in {:?}", started.elapsed());
    assert_eq!(redis.port, port);
    assert!(redis.is_running());
    assert_eq!(redis.cli(&["PING"]), "PONG");
    assert_eq!(redis.cli(&["GET", "k"]), "", "data is gone after an outage");
    let info = redis.cli(&["INFO", "server"]);
    assert_eq!(
        info_field(&info, "tcp_port").as_deref(),
        Some(port.to_string().as_str())
    );

    let pids = vec![redis.pid().expect("running")];
    drop(redis);
    assert_all_gone(&pids);
}

#[test]
fn server_with_password() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    assert_eq!(redis.cli(&["PING"]), "PONG", "cli authenticates");
    let anonymous = redis_cli(redis.port, &["PING"]);
    assert!(
        anonymous.text().contains("NOAUTH"),
        "unauthenticated access is refused: {anonymous:?}"
    );
    let authed = redis_cli_within(
        redis.port,
        Some("secret"),
        &["PING"],
        Duration::from_secs(5),
    );
    assert_eq!(authed.text(), "PONG");
}

#[test]
fn servers_in_parallel_get_distinct_ports() {
    let servers: Vec<RedisServer> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(RedisServer::start)).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("server starts"))
            .collect()
    });
    let ports: HashSet<u16> = servers.iter().map(|s| s.port).collect();
    assert_eq!(ports.len(), servers.len());
    for s in &servers {
        assert_eq!(s.cli(&["PING"]), "PONG");
    }
    let pids: Vec<u32> = servers.iter().filter_map(|s| s.pid()).collect();
    assert_eq!(pids.len(), 4);
    drop(servers);
    assert_all_gone(&pids);
}

#[test]
fn free_ports_are_never_handed_out_twice() {
    let ports: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..50).map(|_| free_port()).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("ports"))
            .collect()
    });
    let unique: HashSet<u16> = ports.iter().copied().collect();
    assert_eq!(unique.len(), ports.len());
    assert!(!unique.contains(&6379));
    let p = free_cluster_port();
    assert!(u32::from(p) + 10000 <= 65535);
    assert!(!unique.contains(&p) && !unique.contains(&(p + 10000)));
}

#[test]
fn cluster_is_ok_with_three_primaries_and_three_replicas() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start();
    eprintln!("cluster ready in {:?}", started.elapsed());
    assert_eq!(cluster.seeds().len(), 6);
    for port in cluster.ports() {
        let info = cluster.node_cli(port, &["CLUSTER", "INFO"]);
        assert_eq!(info_field(&info, "cluster_state").as_deref(), Some("ok"));
        assert_eq!(
            info_field(&info, "cluster_slots_assigned").as_deref(),
            Some("16384")
        );
        assert_eq!(info_field(&info, "cluster_size").as_deref(), Some("3"));
        let nodes = cluster.node_cli(port, &["CLUSTER", "NODES"]);
        assert_eq!(nodes.lines().filter(|l| l.contains("master")).count(), 3);
        assert_eq!(nodes.lines().filter(|l| l.contains("slave")).count(), 3);
        assert!(nodes.lines().all(|l| l.contains(" 127.0.0.1:")), "{nodes}");
    }
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    assert_eq!(cluster.replicas().len(), 3);

    // Keys in different slots, written and read through redirections.
    for key in ["a", "b", "c", "{user}:1", "some-other-key"] {
        assert_eq!(cluster.cli(&["SET", key, "v"]), "OK");
        assert_eq!(cluster.cli(&["GET", key]), "v");
    }

    // Kill a primary: its replica takes over and the cluster heals.
    let victim: u16 = primaries[0]
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port of a primary");
    // Replication is asynchronous: the kill must not race the victim's
    // replica for the writes above, or the failover loses one of them.
    let caught_up = eventually(Duration::from_secs(10), || {
        let info = cluster.node_cli(victim, &["INFO", "replication"]);
        let Some(offset) = info_field(&info, "master_repl_offset") else {
            return false;
        };
        let replicas: Vec<&str> = info.lines().filter(|l| l.starts_with("slave")).collect();
        !replicas.is_empty()
            && replicas
                .iter()
                .all(|l| l.contains(&format!("offset={offset},")))
    });
    assert!(caught_up, "the victim's replica took every write");
    let started = Instant::now();
    cluster.kill_node(victim);
    let healed = eventually(Duration::from_secs(30), || {
        cluster.primaries().len() == 3
            && cluster
                .ports()
                .into_iter()
                .filter(|p| *p != victim)
                .all(|p| {
                    cluster
                        .node_cli(p, &["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                })
    });
    assert!(
        healed,
        "cluster did not fail over after a primary was killed"
    );
    eprintln!("cluster failover took {:?}", started.elapsed());
    for key in ["a", "b", "c"] {
        assert_eq!(cluster.cli(&["GET", key]), "v");
    }
    cluster.restart_node(victim);
    assert_eq!(cluster.node_cli(victim, &["PING"]), "PONG");

    let pids = cluster.pids();
    assert_eq!(pids.len(), 6);
    drop(cluster);
    assert_all_gone(&pids);
}

#[test]
fn sentinels_report_the_primary_and_fail_over() {
    let started = Instant::now();
    let mut group = RedisSentinel::start();
    eprintln!("sentinel group ready in {:?}", started.elapsed());
    assert_eq!(group.master_name(), "mymaster");
    let sentinels = group.sentinels();
    assert_eq!(sentinels.len(), 3);
    assert_eq!(group.url(), format!("mymaster,{}", sentinels.join(",")));
    let primary = format!("127.0.0.1:{}", group.primary_port());
    for port in group.sentinel_ports() {
        let addr = group.cli(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"]);
        assert_eq!(addr, format!("127.0.0.1\n{}", group.primary_port()));
    }
    assert_eq!(group.current_master(), Some(primary));
    let repl = group.cli(group.replica_port(), &["INFO", "replication"]);
    assert_eq!(info_field(&repl, "role").as_deref(), Some("slave"));

    // Data written to the primary reaches the replica.
    assert_eq!(group.cli(group.primary_port(), &["SET", "k", "v"]), "OK");
    assert!(eventually(Duration::from_secs(5), || group
        .cli(group.replica_port(), &["GET", "k"])
        == "v"));

    // Kill the primary: the sentinels promote the replica.
    let started = Instant::now();
    group.kill_primary();
    let replica = format!("127.0.0.1:{}", group.replica_port());
    let promoted = eventually(Duration::from_secs(30), || {
        group.current_master().as_deref() == Some(replica.as_str())
    });
    assert!(promoted, "sentinels did not fail over to the replica");
    eprintln!("sentinel failover took {:?}", started.elapsed());
    assert!(eventually(Duration::from_secs(10), || {
        info_field(
            &group.cli(group.replica_port(), &["INFO", "replication"]),
            "role",
        )
        .as_deref()
            == Some("master")
    }));

    let pids = group.pids();
    assert_eq!(pids.len(), 4, "primary killed, replica and 3 sentinels run");
    drop(group);
    assert_all_gone(&pids);
}

/// Not a test of its own: run by `servers_die_with_the_test_process` in a
/// child test process, which prints a server's pid and exits without
/// running any destructor.
/// Run normally, it checks that dropping a server stops it; run again by
/// `servers_die_with_the_test_process` with `REDIS_INFRA_HELPER` set, it
/// starts a server and exits without dropping it.
#[test]
fn helper_exit_without_drop() {
    if std::env::var_os("REDIS_INFRA_HELPER").is_none() {
        let redis = RedisServer::start();
        let pid = redis.pid().expect("running");
        drop(redis);
        assert!(
            eventually(Duration::from_secs(5), || !pid_alive(pid)),
            "redis-server {pid} outlived its drop"
        );
        return;
    }
    let redis = RedisServer::start();
    println!("REDIS_PID={}", redis.pid().expect("running"));
    std::mem::forget(redis);
    std::process::exit(0);
}

#[test]
fn servers_die_with_the_test_process() {
    if !has_setpriv() {
        eprintln!("setpriv --pdeathsig is unavailable: orphan cleanup not checked");
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--exact",
            "redis_infra::helper_exit_without_drop",
            "--nocapture",
        ])
        .env("REDIS_INFRA_HELPER", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run the test binary again");
    let stdout = child.stdout.take().expect("piped stdout");
    let pid: u32 = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("REDIS_PID=")
                .and_then(|p| p.trim().parse().ok())
        })
        .expect("helper prints the server's pid");
    let status = child.wait().expect("helper exits");
    assert!(status.success(), "helper exits with 0: {status}");
    assert!(
        eventually(Duration::from_secs(5), || !pid_alive(pid)),
        "redis-server {pid} outlived the test process that started it"
    );
}

/// A redis-server the support module does not know, killed on drop.
struct Foreign(std::process::Child);

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn restart_refuses_a_port_taken_by_someone_else() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    redis.kill();
    let dir = tempfile::tempdir().expect("tempdir");
    let foreign = Foreign(
        Command::new(support::redis::Flavor::current().server())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a foreign redis-server"),
    );
    assert!(
        eventually(Duration::from_secs(10), || redis_cli(port, &["PING"])
            .text()
            == "PONG"),
        "foreign server answers"
    );
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| redis.restart()));
    let message = outcome
        .expect_err("restart onto someone else's server must fail")
        .downcast::<String>()
        .map(|s| *s)
        .unwrap_or_default();
    assert!(message.contains("did not restart"), "{message}");
    assert!(!redis.is_running());
    drop(foreign);
}

/// `RATELIMIT_TEST_SERVER=valkey` really runs Valkey (the test command runs
/// the store tests on both): its `INFO server` names a `valkey_version`,
/// which Redis's does not.
#[test]
fn the_servers_are_the_flavor_asked_for() {
    let redis = RedisServer::start();
    let info = redis.cli(&["INFO", "server"]);
    let valkey = info.lines().find_map(|l| l.strip_prefix("valkey_version:"));
    match support::redis::Flavor::current() {
        support::redis::Flavor::Valkey => {
            let version = valkey.expect("a Valkey server");
            println!("valkey {version}");
        }
        support::redis::Flavor::Redis => {
            assert!(valkey.is_none(), "a Redis server: {info}");
            let version = info.lines().find_map(|l| l.strip_prefix("redis_version:"));
            println!("redis {}", version.expect("a redis_version"));
        }
    }
}
