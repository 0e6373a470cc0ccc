//! Hardware telemetry of a run, as `hw/...` metrics on each training step's record: what the
//! process itself uses (every backend) and, from the CUDA backend, what the GPU reports through
//! NVML (`cuda/nvml.rs`). They describe the machine, not the experiment: a reproduction does not
//! compare them (the lab's `reproduce`), and they are never an error — a value that cannot be
//! read is left out.
//!
//! [`Sampler`] decides which step records carry a sample: the first, then one at least
//! [`SAMPLE_EVERY`] of wall time later, never more than one a step nor more than
//! [`MAX_HARDWARE_SAMPLES`] a run, each with at most [`HARDWARE_SERIES`] values: the bound the
//! cost model's metric volume counts.
//!
//! Not here: NVML itself, or writing the record (the trainer).

use std::time::{Duration, Instant};

use glassbox_schemas::cost::{HARDWARE_SERIES, MAX_HARDWARE_SAMPLES};

pub use glassbox_schemas::metrics::hw::{
    ALL, CPU_UTILIZATION, GPU_MEMORY_PEAK_BYTES, GPU_MEMORY_USED_BYTES, GPU_POWER_WATTS,
    GPU_SM_CLOCK_MHZ, GPU_TEMPERATURE_C, GPU_UTILIZATION, MACHINE_MEMORY_AVAILABLE_BYTES,
    PROCESS_CPU_SECONDS, PROCESS_PEAK_RSS_BYTES, PROCESS_RSS_BYTES,
};

/// Wall time between two hardware samples, at least.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// Decides which step records carry hardware telemetry (module doc) and derives the rates
/// between two samples.
#[derive(Debug)]
pub struct Sampler {
    threads: f64,
    every: Duration,
    /// The previous sample: when, at which step, and the process's CPU seconds then.
    last: Option<(Instant, u64, Option<f64>)>,
    taken: u64,
}

impl Sampler {
    /// A sampler for a run whose backend keeps `threads` host threads busy.
    pub fn new(threads: usize) -> Self {
        Self::with_interval(threads, SAMPLE_EVERY)
    }

    /// As [`Sampler::new`], with another wall-time interval (tests).
    pub fn with_interval(threads: usize, every: Duration) -> Self {
        Self {
            threads: threads.max(1) as f64,
            every,
            last: None,
            taken: 0,
        }
    }

    /// Samples taken so far.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// The sample for the record of `step` at `now`, when one is due; `read` is the backend's
    /// telemetry ([`process`] and, on a GPU, NVML). Empty when none is due. Values that are not
    /// finite and series not in [`ALL`] are left out.
    pub fn sample(
        &mut self,
        step: u64,
        now: Instant,
        read: impl FnOnce() -> Vec<(&'static str, f64)>,
    ) -> Vec<(&'static str, f64)> {
        if self.taken >= MAX_HARDWARE_SAMPLES {
            return Vec::new();
        }
        if let Some((at, last_step, _)) = self.last
            && (step <= last_step || now.duration_since(at) < self.every)
        {
            return Vec::new();
        }
        let mut out: Vec<(&'static str, f64)> = read()
            .into_iter()
            .filter(|(name, v)| v.is_finite() && ALL.contains(name))
            .collect();
        let cpu = out
            .iter()
            .find(|(n, _)| *n == PROCESS_CPU_SECONDS)
            .map(|(_, v)| *v);
        if let (Some((at, _, Some(before))), Some(cpu)) = (self.last, cpu) {
            let wall = now.duration_since(at).as_secs_f64();
            if wall > 0.0 {
                out.push((
                    CPU_UTILIZATION,
                    ((cpu - before) / wall / self.threads * 100.0).max(0.0),
                ));
            }
        }
        if let Some(v) = memory_available() {
            out.push((MACHINE_MEMORY_AVAILABLE_BYTES, v));
        }
        out.sort_by_key(|(n, _)| ALL.iter().position(|a| a == n));
        out.dedup_by_key(|(n, _)| *n);
        out.truncate(HARDWARE_SERIES as usize);
        self.last = Some((now, step, cpu));
        self.taken += 1;
        out
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn memory_available() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_available(&s)
}

fn parse_meminfo_available(meminfo: &str) -> Option<f64> {
    kib_field(meminfo, "MemAvailable:")
}

/// The value of the `/proc` line starting `key`, given in kB, in bytes.
fn kib_field(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map(|k| k * 1024.0)
}

/// Linux reports `/proc` CPU times in USER_HZ ticks, fixed at 100 per second by the ABI.
const USER_HZ: f64 = 100.0;

/// This process's resident memory, peak resident memory and CPU time, from `/proc/self`
/// (empty on systems without it).
pub fn process() -> Vec<(&'static str, f64)> {
    let mut out = Vec::with_capacity(3);
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        let (rss, peak) = parse_status(&status);
        if let Some(v) = rss {
            out.push((PROCESS_RSS_BYTES, v));
        }
        if let Some(v) = peak {
            out.push((PROCESS_PEAK_RSS_BYTES, v));
        }
    }
    if let Some(v) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_cpu_seconds(&s))
    {
        out.push((PROCESS_CPU_SECONDS, v));
    }
    out
}

/// `VmRSS` and `VmHWM` of `/proc/self/status`, in bytes.
fn parse_status(status: &str) -> (Option<f64>, Option<f64>) {
    (kib_field(status, "VmRSS:"), kib_field(status, "VmHWM:"))
}

/// `utime + stime` of `/proc/self/stat` in seconds. The command name (field 2) is in
/// parentheses and may hold spaces, so fields are counted after its closing parenthesis:
/// utime and stime are fields 14 and 15 of the line, the 12th and 13th after it.
fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_stat_lines_parse_into_bytes_and_seconds() {
        let status = "Name:\tglassbox\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(
            parse_status(status),
            (Some(1024.0 * 1024.0), Some(2048.0 * 1024.0))
        );
        // A command name with spaces and parentheses; utime 250, stime 50 ticks.
        let stat = "42 (my (odd) prog) R 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
        assert_eq!(parse_cpu_seconds("garbage"), None);
    }

    #[test]
    fn meminfo_parses_into_bytes() {
        let m = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_meminfo_available(m), Some(2048.0 * 1024.0));
        assert_eq!(parse_meminfo_available("MemTotal: 1 kB"), None);
    }

    /// The first step is sampled; then no two samples are closer than the interval nor on one
    /// step; the rate of CPU time is a share of the run's cores; unknown series and values that
    /// are not finite are dropped.
    #[test]
    fn samples_keep_their_wall_time_interval_and_their_series() {
        let t0 = Instant::now();
        let mut s = Sampler::with_interval(2, Duration::from_secs(2));
        let read = |cpu: f64| {
            move || {
                vec![
                    (PROCESS_CPU_SECONDS, cpu),
                    (PROCESS_RSS_BYTES, f64::NAN),
                    ("hw/made/up", 1.0),
                ]
            }
        };
        let first = s.sample(1, t0, read(10.0));
        assert!(first.iter().any(|(n, _)| *n == PROCESS_CPU_SECONDS));
        assert!(
            !first
                .iter()
                .any(|(n, _)| *n == CPU_UTILIZATION || *n == "hw/made/up")
        );
        assert!(!first.iter().any(|(n, _)| *n == PROCESS_RSS_BYTES));
        assert!(
            s.sample(2, t0 + Duration::from_secs(1), read(11.0))
                .is_empty()
        );
        assert!(
            s.sample(1, t0 + Duration::from_secs(9), read(11.0))
                .is_empty()
        );
        let later = s.sample(3, t0 + Duration::from_secs(4), read(14.0));
        let util = later.iter().find(|(n, _)| *n == CPU_UTILIZATION).unwrap().1;
        // 4 CPU seconds over 4 s of wall time on 2 threads: both cores half busy.
        assert!((util - 50.0).abs() < 1e-9, "{util}");
        assert_eq!(s.taken(), 2);
        assert!(later.len() as u64 <= HARDWARE_SERIES);
    }

    /// However many steps and however fast, a run never records more than the cost model
    /// counts: `MAX_HARDWARE_SAMPLES` samples of at most `HARDWARE_SERIES` values.
    #[test]
    fn a_run_never_samples_more_than_the_metric_volume_counts() {
        let t0 = Instant::now();
        let mut s = Sampler::with_interval(1, Duration::ZERO);
        let mut points = 0u64;
        for step in 1..=(MAX_HARDWARE_SAMPLES * 3) {
            let v = s.sample(step, t0 + Duration::from_millis(step), || {
                ALL.iter().map(|n| (*n, 1.0)).collect()
            });
            points += v.len() as u64;
        }
        assert_eq!(s.taken(), MAX_HARDWARE_SAMPLES);
        assert!(points <= MAX_HARDWARE_SAMPLES * HARDWARE_SERIES, "{points}");
    }

    #[test]
    fn this_process_reports_its_memory_and_cpu_time_on_linux() {
        let m = process();
        if std::path::Path::new("/proc/self/status").exists() {
            let get = |k| m.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
            let rss = get(PROCESS_RSS_BYTES).expect("rss");
            assert!(
                rss > 1e5,
                "a running test binary uses more than 100 kB: {rss}"
            );
            assert!(get(PROCESS_PEAK_RSS_BYTES).expect("peak") >= rss);
            assert!(get(PROCESS_CPU_SECONDS).expect("cpu") >= 0.0);
        }
        assert!(m.iter().all(|(n, v)| n.starts_with("hw/") && v.is_finite()));
    }
}
