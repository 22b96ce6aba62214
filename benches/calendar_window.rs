//! ns per window lookup: the original's epoch-aligned window against a
//! calendar's period (`Calendar::window_at`), which a calendar rule pays
//! once per request. Units day and month, in UTC and in Europe/Berlin (a
//! zone with DST transitions to search). Each iteration asks a second
//! later, as requests come, so the period the calendar keeps answers; a
//! period's first request searches the zone (about 0.1 µs in UTC, 0.5 µs
//! in Berlin, measured before the period was kept).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ratelimit::limiter::fixed_window::Window;
use ratelimit::limiter::{Calendar, Unit};
use std::hint::black_box;

/// 2026-12-02T12:00:00Z.
const NOW: u64 = 1_796_212_800;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("window_lookup");
    group.throughput(Throughput::Elements(1));
    group.bench_function("epoch_day", |b| {
        let mut now = NOW;
        b.iter(|| {
            now += 1;
            black_box(Window::containing(black_box(now), 86_400))
        })
    });
    for (unit, zone) in [
        (Unit::Day, "UTC"),
        (Unit::Day, "Europe/Berlin"),
        (Unit::Month, "Europe/Berlin"),
    ] {
        let calendar = Calendar::new(unit, zone).expect("a zone");
        group.bench_with_input(
            BenchmarkId::new("calendar", calendar.to_string()),
            &calendar,
            |b, calendar| {
                let mut now = NOW;
                b.iter(|| {
                    now += 1;
                    black_box(calendar.window_at(black_box(now)))
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
