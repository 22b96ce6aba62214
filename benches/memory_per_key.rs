//! Memory per active key in the in-memory store: RSS before and after
//! creating N distinct fixed-window counters, and after their windows
//! expire and the sweeper runs.
//!
//! `cargo bench --bench memory_per_key` uses N = 1,000,000; under
//! `cargo test` (no `--bench` argument) it uses 100,000 so the suite stays fast.

use std::sync::Arc;
use std::time::Duration;

use ratelimit::limiter::fixed_window::Window;
use ratelimit::limiter::ManualClock;
use ratelimit::store::{testing::RunItems, Item, Limit, MemoryStore, OriginalWindow, Policy};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n: usize = if bench { 1_000_000 } else { 100_000 };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let clock = Arc::new(ManualClock::at_secs(1_800_000_000));
    // Room for all of them: the cap is not what is measured.
    let store = MemoryStore::with_max_keys(clock.clone(), 2 * n);
    let window = Window::containing(1_800_000_000, 60);
    let before = rss_bytes();
    rt.block_on(async {
        let mut batch = Vec::with_capacity(1000);
        for i in 0..n {
            let counter = OriginalWindow {
                limit: 1000,
                window,
                ttl_seconds: 60,
                jitter_seconds: 0,
            };
            batch.push(Item::new(
                format!(
                    "rl_tenant_tenant-{i:08}_path_/api/v1/items_{}",
                    window.start
                ),
                Limit::Counter(counter),
                1,
            ));
            if batch.len() == 1000 {
                store
                    .counts(&batch, Policy::Commit)
                    .await
                    .expect("memory store never fails");
                batch.clear();
            }
        }
        if !batch.is_empty() {
            store
                .counts(&batch, Policy::Commit)
                .await
                .expect("memory store never fails");
        }
    });
    let full = rss_bytes();
    assert_eq!(store.len(), n);
    clock.advance(Duration::from_secs(61));
    let removed = store.sweep();
    let swept = rss_bytes();
    let per_key = (full.saturating_sub(before)) as f64 / n as f64;
    println!(
        "memory_per_key: keys={n} rss_before={before} rss_full={full} rss_after_expiry={swept} bytes_per_key={per_key:.1} removed={removed}"
    );
    assert_eq!(removed, n);
}
