//! `run --svg FILE`: the run over time, as a picture. Requests are counted
//! into 60 equal slices of the measured time by when they finished, each
//! slice with its own latency histogram (2 significant digits: ±1 %); the
//! chart shows throughput per slice above p50, p99 and p99.9 per slice (log
//! scale), and the errors.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use hdrhistogram::Histogram;
use plotters::prelude::*;

/// Slices of a run.
const SLICES: usize = 60;

/// Throughput and latency per slice of a run.
pub struct Timeline {
    start: Instant,
    slice: Duration,
    latency: Vec<Histogram<u64>>,
    errors: Vec<u64>,
}

impl Timeline {
    /// A timeline of `duration` measured from `start`.
    pub fn new(start: Instant, duration: Duration) -> Result<Timeline, String> {
        let latency = (0..SLICES)
            .map(|_| Histogram::new_with_bounds(1, 60_000_000, 2).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        Ok(Timeline {
            start,
            slice: (duration / SLICES as u32).max(Duration::from_millis(1)),
            latency,
            errors: vec![0; SLICES],
        })
    }

    fn slice_of(&self, done: Instant) -> Option<usize> {
        let i = done.checked_duration_since(self.start)?.as_nanos() / self.slice.as_nanos();
        usize::try_from(i).ok().filter(|&i| i < SLICES)
    }

    /// A request answered at `done` after `micros`.
    pub fn answered(&mut self, done: Instant, micros: u64) {
        if let Some(i) = self.slice_of(done) {
            self.latency[i].saturating_record(micros.max(1));
        }
    }

    /// A request that failed at `done`.
    pub fn failed(&mut self, done: Instant) {
        if let Some(i) = self.slice_of(done) {
            self.errors[i] += 1;
        }
    }

    /// The p99.9 of the median slice and of the worst one, with the worst
    /// one's index, in µs, over the slices that answered anything; `None`
    /// if none did.
    pub fn p999_spread(&self) -> Option<(u64, u64, usize)> {
        let mut p999: Vec<(u64, usize)> = self
            .latency
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.is_empty())
            .map(|(i, h)| (h.value_at_quantile(0.999), i))
            .collect();
        p999.sort_unstable();
        let median = p999.get(p999.len() / 2)?.0;
        let (worst, at) = *p999.last()?;
        Some((median, worst, at))
    }

    /// Writes the chart to `path`, titled `title`.
    pub fn write_svg(&self, path: &Path, title: &str) -> Result<(), String> {
        draw(self, path, title).map_err(|e| format!("{}: {e}", path.display()))
    }
}

fn draw(t: &Timeline, path: &Path, title: &str) -> Result<(), Box<dyn std::error::Error>> {
    let slice_s = t.slice.as_secs_f64();
    let at = |i: usize| (i as f64 + 0.5) * slice_s;
    let end = slice_s * SLICES as f64;
    let rps: Vec<(f64, f64)> = (0..SLICES)
        .map(|i| (at(i), (t.latency[i].len() + t.errors[i]) as f64 / slice_s))
        .collect();
    let errors: Vec<(f64, f64)> = (0..SLICES)
        .map(|i| (at(i), t.errors[i] as f64 / slice_s))
        .collect();
    let quantile = |q: f64| -> Vec<(f64, f64)> {
        (0..SLICES)
            .filter(|&i| !t.latency[i].is_empty())
            .map(|i| (at(i), t.latency[i].value_at_quantile(q) as f64 / 1000.0))
            .collect()
    };
    let (p50, p99, p999) = (quantile(0.5), quantile(0.99), quantile(0.999));
    let top = rps.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let highest = p999.iter().map(|p| p.1).fold(0.01, f64::max) * 2.0;
    let lowest = p50.iter().map(|p| p.1).fold(highest, f64::min).max(0.001) / 2.0;

    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let (upper, lower) = root.split_vertically(300);

    let mut chart = ChartBuilder::on(&upper)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds into the measured run")
        .y_desc("requests/s")
        .draw()?;
    chart
        .draw_series(LineSeries::new(rps, BLUE.stroke_width(2)))?
        .label("answered + failed, per second")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(errors, RED.stroke_width(2)))?
        .label("errors per second")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;

    let mut chart = ChartBuilder::on(&lower)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, (lowest..highest).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds into the measured run")
        .y_desc("latency, ms (log)")
        .draw()?;
    for (points, color, label) in [
        (p50, GREEN, "p50"),
        (p99, MAGENTA, "p99"),
        (p999, BLACK, "p99.9"),
    ] {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_counts_per_slice_and_draws() {
        let start = Instant::now();
        let mut t = Timeline::new(start, Duration::from_secs(6)).expect("histograms");
        for i in 0..600u64 {
            t.answered(start + Duration::from_millis(i * 10), 100 + i);
        }
        t.failed(start + Duration::from_millis(50));
        t.answered(start + Duration::from_secs(7), 1);
        // 10 per 100 ms slice; the late one is outside the run.
        assert_eq!(t.latency[0].len(), 10);
        assert_eq!(t.errors[0], 1);
        assert_eq!(t.latency.iter().map(|h| h.len()).sum::<u64>(), 600);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("run.svg");
        t.write_svg(&path, "test run").expect("written");
        let svg = std::fs::read_to_string(&path).expect("read");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.contains("p99.9") && svg.contains("test run"));
    }

    #[test]
    fn the_p999_spread_names_the_worst_slice() {
        let start = Instant::now();
        let mut t = Timeline::new(start, Duration::from_secs(6)).expect("histograms");
        assert_eq!(t.p999_spread(), None);
        // 100 µs everywhere, 5 ms in slice 7 (index 6).
        for slice in 0..60u64 {
            let micros = if slice == 6 { 5_000 } else { 100 };
            for k in 0..10u64 {
                t.answered(start + Duration::from_millis(slice * 100 + k), micros);
            }
        }
        let (median, worst, at) = t.p999_spread().expect("slices answered");
        assert_eq!(at, 6);
        assert!((99..=101).contains(&median), "{median}");
        assert!((4_950..=5_050).contains(&worst), "{worst}");
    }
}
