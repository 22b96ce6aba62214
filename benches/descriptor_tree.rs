//! ns per `DescriptorTree::find` for trees of 10, 1,000 and 100,000 rules.
//!
//! Each tree has `n` exact sibling rules `tenant=t<i>` with a nested
//! key-only `path` rule, plus a trailing wildcard and a key-only fallback.
//! Scenarios: an exact two-level hit (must not grow with `n`: hash lookup),
//! a key-only fallback, and a wildcard hit (scans the wildcard list, which
//! here has one entry regardless of `n`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ratelimit::config::{load, ConfigFile, Entry, Lookup};
use std::hint::black_box;

fn config(n: usize) -> String {
    let mut y = String::with_capacity(n * 160);
    y.push_str("domain: bench\ndescriptors:\n");
    for i in 0..n {
        y.push_str(&format!(
            "  - key: tenant\n    value: t{i}\n    descriptors:\n      - key: path\n        rate_limit: {{unit: minute, requests_per_unit: {}}}\n",
            i + 1
        ));
    }
    y.push_str("  - key: tenant\n    value: 'vip*'\n    descriptors:\n      - key: path\n        rate_limit: {unit: minute, requests_per_unit: 5}\n");
    y.push_str("  - key: tenant\n    descriptors:\n      - key: path\n        rate_limit: {unit: minute, requests_per_unit: 1}\n");
    y
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("descriptor_tree_find");
    group.throughput(Throughput::Elements(1));
    for n in [10usize, 1_000, 100_000] {
        let cfg =
            load(&[ConfigFile::new("bench.yaml", config(n))], false).expect("bench config loads");
        let tree = cfg.tree();
        let scenarios = [
            ("exact", format!("t{}", n / 2)),
            ("wildcard", "vip-customer".to_string()),
            ("key_only", "unknown-tenant".to_string()),
        ];
        for (name, tenant) in scenarios {
            let entries = [
                Entry::new("tenant", tenant),
                Entry::new("path", "/api/v1/items"),
            ];
            assert!(matches!(
                tree.find("bench", &entries, None),
                Ok(Lookup::Limit(_))
            ));
            group.bench_with_input(BenchmarkId::new(name, n), &entries, |b, entries| {
                b.iter(|| tree.find(black_box("bench"), black_box(entries), None))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
