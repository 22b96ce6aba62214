//! The accuracy harness (`support/accuracy.rs`) on every store: memory (one
//! instance), Redis and Redis Cluster (four instances each). Prints the
//! table it asserts on; `cargo bench --bench accuracy` prints the same.

use crate::support;

use support::accuracy::{check, header, instances, redis_env, run_all, run_outage};
use support::redis::{RedisCluster, RedisServer};
use support::Service;

async fn run(store: &str, instances: &[Service]) {
    let outcomes = run_all(store, instances).await;
    println!("{}", header());
    for o in &outcomes {
        println!("{}", o.row());
    }
    check(&outcomes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    run("memory", &instances(1, &[])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_single() {
    let server = RedisServer::start();
    run("redis", &instances(4, &redis_env("single", server.addr()))).await;
    // Redis paused: every instance decides by its floor (the production
    // deadline, so the first calls wait 50 ms, not the tests' 10 s).
    let mut env = redis_env("single", server.addr());
    env.push(("STORE_TIMEOUT", "50ms".into()));
    let fleet = instances(4, &env);
    let outcomes = run_outage("redis", &fleet, |paused| {
        if paused {
            server.pause()
        } else {
            server.resume()
        }
    })
    .await;
    for o in &outcomes {
        println!("{}", o.row());
    }
    check(&outcomes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster() {
    let cluster = RedisCluster::start();
    run(
        "cluster",
        &instances(4, &redis_env("cluster", cluster.seeds().join(","))),
    )
    .await;
}
