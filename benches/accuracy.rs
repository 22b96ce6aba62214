//! The accuracy harness as a benchmark: prints, for every store, algorithm
//! and traffic pattern, the admitted count against the algorithm's ideal
//! and against an exact sliding log (`testkit/src/accuracy.rs`).
//!
//! `cargo bench --bench accuracy` runs memory, Redis and a 6-node Redis
//! Cluster (real servers on free loopback ports, four service instances on
//! each Redis); under `cargo test` (no `--bench` argument) only the memory
//! store, so the suite stays fast. `integration/accuracy.rs` asserts the
//! targets on the same numbers.

// The test support crate (testkit/).
use ratelimit_testkit as support;

use support::accuracy::{check, header, instances, redis_env, run_all, run_outage, write_svg};
use support::redis::{RedisCluster, RedisServer};

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!("{}", header());
        let mut all = Vec::new();
        let memory = run_all("memory", &instances(1, &[])).await;
        all.extend(memory);
        if bench {
            let server = RedisServer::start();
            let outcomes =
                run_all("redis", &instances(4, &redis_env("single", server.addr()))).await;
            all.extend(outcomes);
            let mut env = redis_env("single", server.addr());
            env.push(("STORE_TIMEOUT", "50ms".into()));
            let fleet = instances(4, &env);
            let pause = |paused: bool| {
                if paused {
                    server.pause()
                } else {
                    server.resume()
                }
            };
            all.extend(run_outage("redis", &fleet, pause).await);
            let cluster = RedisCluster::start();
            let env = redis_env("cluster", cluster.seeds().join(","));
            all.extend(run_all("cluster", &instances(4, &env)).await);
        }
        for o in &all {
            println!("{}", o.row());
        }
        // The pictures: ACCURACY_SVG_DIR (default target/), one per store.
        let dir = std::env::var("ACCURACY_SVG_DIR").unwrap_or_else(|_| "target".into());
        for store in ["memory", "redis", "cluster"] {
            if all.iter().any(|o| o.store == store) {
                let path = std::path::Path::new(&dir).join(format!("accuracy-{store}.svg"));
                match write_svg(&all, store, &path) {
                    Ok(()) => println!("wrote {}", path.display()),
                    Err(e) => println!("no chart: {e}"),
                }
            }
        }
        check(&all);
    });
}
