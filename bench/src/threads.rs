//! The threads a load runs on.
//!
//! Each load thread is a single-threaded tokio runtime that owns some of the
//! connections (round robin) and their in-flight slots. A single-threaded
//! runtime runs woken tasks in order, with no "run next" slot: every slot of
//! a connection queues its request before the connection's task writes
//! them, so one write carries many requests, as a busy Envoy's would, and
//! the tool pays no cross-thread wake-ups or work stealing for its own
//! bookkeeping.

use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Running load threads; dropping them stops and joins them.
pub struct LoadThreads {
    threads: Vec<LoadThread>,
}

struct LoadThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<()>>,
}

impl LoadThreads {
    /// Starts `n` (at least 1) load threads.
    pub fn start(n: usize) -> std::io::Result<LoadThreads> {
        let mut threads = Vec::with_capacity(n.max(1));
        for i in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = runtime.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            let join = std::thread::Builder::new()
                .name(format!("load-{i}"))
                .spawn(move || {
                    // Tasks spawned through `handle` run while this blocks.
                    let _ = runtime.block_on(stopped);
                })?;
            threads.push(LoadThread {
                handle,
                stop: Some(stop),
                join: Some(join),
            });
        }
        Ok(LoadThreads { threads })
    }

    /// The runtime of the thread that owns connection `i`.
    pub fn for_connection(&self, i: usize) -> &Handle {
        &self.threads[i % self.threads.len()].handle
    }
}

impl Drop for LoadThreads {
    fn drop(&mut self) {
        for t in &mut self.threads {
            if let Some(stop) = t.stop.take() {
                let _ = stop.send(());
            }
        }
        for t in &mut self.threads {
            if let Some(join) = t.join.take() {
                let _ = join.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_spread_round_robin_and_tasks_run() {
        let threads = LoadThreads::start(2).unwrap();
        let main = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let names: Vec<String> = main.block_on(async {
            let mut names = Vec::new();
            for i in 0..4 {
                let name = threads
                    .for_connection(i)
                    .spawn(async { std::thread::current().name().unwrap_or("").to_string() })
                    .await
                    .unwrap();
                names.push(name);
            }
            names
        });
        assert_eq!(names, ["load-0", "load-1", "load-0", "load-1"]);
        drop(threads); // joins
    }
}
