//! Hardware telemetry of a run, as `hw/...` metrics on each training step's record: what the
//! process itself uses (every backend) and, from the CUDA backend, what the GPU reports through
//! NVML (`cuda/nvml.rs`). They describe the machine, not the experiment: a reproduction does not
//! compare them (the lab's `reproduce`), and they are never an error — a value that cannot be
//! read is left out.
//!
//! Not here: NVML itself, or deciding when a record is written (the trainer).

/// Resident memory of this process now (bytes).
pub const PROCESS_RSS_BYTES: &str = "hw/process/rss_bytes";
/// Peak resident memory of this process so far (bytes).
pub const PROCESS_PEAK_RSS_BYTES: &str = "hw/process/peak_rss_bytes";
/// CPU time of this process so far, user + system, all threads (seconds).
pub const PROCESS_CPU_SECONDS: &str = "hw/process/cpu_seconds";
/// GPU busy fraction over NVML's last sample period (percent).
pub const GPU_UTILIZATION: &str = "hw/gpu/utilization_percent";
/// GPU memory in use on the device, all processes (bytes).
pub const GPU_MEMORY_USED_BYTES: &str = "hw/gpu/memory_used_bytes";
/// The most GPU memory in use seen by this run's samples (bytes).
pub const GPU_MEMORY_PEAK_BYTES: &str = "hw/gpu/memory_peak_bytes";
/// Board power draw (watts).
pub const GPU_POWER_WATTS: &str = "hw/gpu/power_watts";
/// GPU temperature (degrees Celsius).
pub const GPU_TEMPERATURE_C: &str = "hw/gpu/temperature_c";
/// SM clock (MHz).
pub const GPU_SM_CLOCK_MHZ: &str = "hw/gpu/sm_clock_mhz";

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
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map(|k| k * 1024.0)
    };
    (kib("VmRSS:"), kib("VmHWM:"))
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
