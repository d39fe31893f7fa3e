//! Throughput windows, latency percentiles and the latency CDF of a
//! benchmark's measured pods, from the coordinator's bind samples.

use std::time::{Duration, Instant};

use serde::Serialize;

/// Pods bound per second in one window of the measured phase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// The window's start, seconds after the measured phase began.
    pub start_seconds: f64,
    /// Pods bound in it, per second of window.
    pub pods_per_second: f64,
}

/// Throughput of the measured phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Throughput {
    /// Measured pods bound per second, from the start of the measured
    /// phase to the last of them bound.
    pub average: f64,
    /// The busiest window, pods per second.
    pub peak: f64,
    /// Window length, seconds: 1 s (upstream `scheduler_perf` samples
    /// SchedulingThroughput each second) when the phase lasts at least
    /// 10 s; otherwise a tenth of it (at least 10 ms), so short phases
    /// still show a shape.
    pub window_seconds: f64,
    /// Seconds from the start of the measured phase to its last Binding.
    pub duration_seconds: f64,
    /// Every window, in order.
    pub windows: Vec<Window>,
}

/// The window length for a measured phase of `duration` (see
/// [`Throughput::window_seconds`]).
#[must_use]
pub fn window_for(duration: Duration) -> Duration {
    if duration >= Duration::from_secs(10) {
        Duration::from_secs(1)
    } else {
        (duration / 10).max(Duration::from_millis(10))
    }
}

/// Throughput of the binds at `bound` (any order), the phase starting at
/// `start`. Binds before `start` are left out.
#[must_use]
pub fn throughput(start: Instant, bound: &[Instant]) -> Throughput {
    let offsets: Vec<Duration> = bound
        .iter()
        .filter_map(|t| t.checked_duration_since(start))
        .collect();
    let Some(&last) = offsets.iter().max() else {
        return Throughput {
            average: 0.0,
            peak: 0.0,
            window_seconds: 0.0,
            duration_seconds: 0.0,
            windows: Vec::new(),
        };
    };
    let window = window_for(last);
    let w = window.as_secs_f64();
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let slot = |d: Duration| (d.as_secs_f64() / w) as usize;
    let mut counts = vec![0usize; slot(last) + 1];
    for d in &offsets {
        counts[slot(*d)] += 1;
    }
    #[allow(clippy::cast_precision_loss)]
    let windows: Vec<Window> = counts
        .iter()
        .enumerate()
        .map(|(i, &c)| Window {
            start_seconds: i as f64 * w,
            pods_per_second: c as f64 / w,
        })
        .collect();
    let duration = last.as_secs_f64();
    #[allow(clippy::cast_precision_loss)]
    let average = if duration > 0.0 {
        offsets.len() as f64 / duration
    } else {
        0.0
    };
    Throughput {
        average,
        peak: windows
            .iter()
            .map(|w| w.pods_per_second)
            .fold(0.0, f64::max),
        window_seconds: w,
        duration_seconds: duration,
        windows,
    }
}

/// The nearest-rank `p`-th percentile of ascending `sorted` (0 when empty).
#[must_use]
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// At most `points` points `(latency, fraction of pods at or below it)` of
/// ascending `sorted`, ending at `(max, 1.0)`.
#[must_use]
pub fn cdf(sorted: &[f64], points: usize) -> Vec<(f64, f64)> {
    if sorted.is_empty() || points == 0 {
        return Vec::new();
    }
    let n = sorted.len();
    let step = n.div_ceil(points).max(1);
    let mut out: Vec<(f64, f64)> = (step..=n)
        .step_by(step)
        .map(|k| {
            #[allow(clippy::cast_precision_loss)]
            let f = k as f64 / n as f64;
            (sorted[k - 1], f)
        })
        .collect();
    if out.last().is_none_or(|&(_, f)| f < 1.0) {
        out.push((sorted[n - 1], 1.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_phase_averages_its_rate_and_peaks_at_its_busiest_window() {
        let t0 = Instant::now();
        // 100 pods/s for 20 s, then 300 pods in second 20: 2,300 binds.
        let mut binds: Vec<Instant> = (0..2000)
            .map(|i| t0 + Duration::from_millis(10 * i + 5))
            .collect();
        binds.extend((0..300).map(|i| t0 + Duration::from_secs(20) + Duration::from_millis(3 * i)));
        // One bind before the phase: not counted.
        let before = t0.checked_sub(Duration::from_millis(1)).expect("past");
        binds.push(before);
        let tp = throughput(t0, &binds);
        assert!((tp.window_seconds - 1.0).abs() < 1e-9);
        assert_eq!(tp.windows.len(), 21);
        assert!((tp.windows[0].pods_per_second - 100.0).abs() < 1e-9);
        assert!((tp.peak - 300.0).abs() < 1e-9, "{}", tp.peak);
        let last = 20.0 + 0.897;
        assert!((tp.duration_seconds - last).abs() < 1e-6);
        assert!((tp.average - 2300.0 / last).abs() < 1e-6);
    }

    #[test]
    fn a_short_phase_gets_tenth_windows() {
        let t0 = Instant::now();
        let binds: Vec<Instant> = (1..=1000)
            .map(|i| t0 + Duration::from_micros(500 * i))
            .collect();
        let tp = throughput(t0, &binds);
        assert!(
            (tp.window_seconds - 0.05).abs() < 1e-9,
            "{}",
            tp.window_seconds
        );
        assert!((tp.average - 2000.0).abs() < 1e-6, "{}", tp.average);
        // 100 binds per 50 ms window: 2,000 pods/s, one extra in the last.
        assert!((tp.peak - 2000.0).abs() < 21.0, "{}", tp.peak);
        let counted: f64 = tp.windows.iter().map(|w| w.pods_per_second * 0.05).sum();
        assert!((counted - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn no_binds_is_all_zero() {
        let tp = throughput(Instant::now(), &[]);
        assert_eq!((tp.average, tp.peak, tp.windows.len()), (0.0, 0.0, 0));
    }

    #[test]
    fn percentiles_are_nearest_rank_and_the_cdf_ends_at_one() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        let c = cdf(&v, 10);
        assert_eq!(c.len(), 10);
        assert_eq!(c[0], (10.0, 0.1));
        assert_eq!(*c.last().expect("points"), (100.0, 1.0));
        let c = cdf(&v[..7], 3);
        assert_eq!(*c.last().expect("points"), (7.0, 1.0));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
    }
}
