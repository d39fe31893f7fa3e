//! This process's CPU time and peak resident memory, from `/proc` (Linux;
//! elsewhere every reading is `None`), for the benchmarks' "CPU seconds per
//! 1,000 pods" and "peak RSS".

/// CPU seconds (user + system, every thread) this process has used.
#[must_use]
pub fn cpu_seconds() -> Option<f64> {
    let me = procfs::process::Process::myself().ok()?;
    let stat = me.stat().ok()?;
    #[allow(clippy::cast_precision_loss)]
    let secs = (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64;
    Some(secs)
}

/// The process's peak resident set size so far (`VmHWM`), bytes.
#[must_use]
pub fn peak_rss_bytes() -> Option<u64> {
    let me = procfs::process::Process::myself().ok()?;
    me.status().ok()?.vmhwm.map(|kib| kib * 1024)
}

/// Resets the peak RSS to the current RSS (writes `5` to
/// `/proc/self/clear_refs`), so [`peak_rss_bytes`] measures from now.
/// Returns whether the kernel accepted it.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work_and_peak_rss_covers_an_allocation() {
        let Some(before) = cpu_seconds() else {
            return; // not Linux
        };
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(150) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = cpu_seconds().expect("readable twice");
        assert!(after - before >= 0.05, "{before} -> {after}");

        let base = peak_rss_bytes().expect("VmHWM");
        // Touch 64 MiB: the peak must cover it.
        let block = vec![1u8; 64 << 20];
        std::hint::black_box(&block);
        let peak = peak_rss_bytes().expect("VmHWM");
        assert!(peak >= base.max(64 << 20), "{base} -> {peak}");
    }
}
