//! The lab's `[limits]` applied to one spec: memory, metric volume and wall time, each refusal
//! with the figures a proposer needs to act on it.
//!
//! The flow checks them when a spec is approved ([`spec_problems`]); a worker checks memory
//! and metric volume again under its own limits before it allocates ([`worker_problem`], with
//! the device's memory on a GPU worker), and hands the wall-clock limit to the runner
//! ([`wall_limit`]).
//! The figures come from the one cost model (`glassbox_schemas::cost`). Not here: the FLOP
//! and quota rules (the flow's `check_limits`), or reading the config (`config`).

use glassbox_runner::train::WallLimit;
use glassbox_schemas::ExperimentSpec;
use glassbox_schemas::cost;

use crate::config::Limits;

/// A memory limit in force and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryLimit {
    /// Bytes.
    pub bytes: u64,
    /// Whose limit it is, for messages (names the config key).
    pub source: String,
}

/// This machine's RAM (`MemTotal` of `/proc/meminfo`), where it can be read.
pub fn machine_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The memory limit for a run: `limits.max_memory_bytes` when set; otherwise the device's
/// memory (`device_memory`, a GPU worker) or half of this machine's RAM. `None` when none is
/// set and the machine's RAM cannot be read.
pub fn memory_limit(limits: &Limits, device_memory: Option<u64>) -> Option<MemoryLimit> {
    if let Some(b) = limits.max_memory_bytes {
        return Some(MemoryLimit {
            bytes: b as u64,
            source: "limits.max_memory_bytes".into(),
        });
    }
    if let Some(d) = device_memory {
        return Some(MemoryLimit {
            bytes: d,
            source: "the device's memory; set limits.max_memory_bytes to change it".into(),
        });
    }
    machine_memory_bytes().map(|ram| MemoryLimit {
        bytes: ram / 2,
        source: "half of this machine's RAM; set limits.max_memory_bytes to change it".into(),
    })
}

/// Why a run outside the lab (`glassbox run --no-ledger`) cannot train `spec` on this machine:
/// the default limits, against the device's memory on a GPU, else half of this machine's RAM.
/// `None` when it fits (or the machine's RAM cannot be read).
pub fn bare_memory_problem(spec: &ExperimentSpec, device_memory: Option<u64>) -> Option<String> {
    let limit = memory_limit(&Limits::default(), device_memory)?;
    memory_problem(spec, &limit)
}

/// Why `spec` does not fit in `limit`, with both figures; `None` when it fits.
pub fn memory_problem(spec: &ExperimentSpec, limit: &MemoryLimit) -> Option<String> {
    let need = cost::estimate(spec).memory_bytes;
    (need > limit.bytes).then(|| {
        format!(
            "it needs about {} of memory (cost model estimate: parameters, gradients, optimizer state and activations); the limit is {} ({})",
            bytes_text(need),
            bytes_text(limit.bytes),
            limit.source
        )
    })
}

/// Why the metric volume of `spec` is over `limits.max_metric_points`; `None` when it is not.
pub fn metric_volume_problem(limits: &Limits, spec: &ExperimentSpec) -> Option<String> {
    let v = cost::metric_volume(spec);
    (v.total() > limits.max_metric_points).then(|| {
        format!(
            "it would record {} metric values ({} scalar points over {} steps, {} expert-load components, one vector per layer every {} steps, and up to {} hardware telemetry points); the lab's limit is {} (limits.max_metric_points): record fewer steps or set a larger metrics.vector_interval",
            v.total(),
            v.scalar_points,
            spec.train.steps,
            v.vector_components,
            v.vector_interval,
            v.hardware_points,
            limits.max_metric_points
        )
    })
}

/// The problems of `spec` under the lab's memory and metric-volume limits, as checked when it
/// is approved (memory against this machine's default when no limit is set).
pub fn spec_problems(limits: &Limits, spec: &ExperimentSpec) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(limit) = memory_limit(limits, None)
        && let Some(p) = memory_problem(spec, &limit)
    {
        out.push(p);
    }
    out.extend(metric_volume_problem(limits, spec));
    out
}

/// Why this worker will not train `spec`, checked before it allocates anything: memory against
/// its own limit (`device_memory` on a GPU worker) and the metric volume against its own
/// `limits.max_metric_points`. A spec approved under a more permissive lab config can reach a
/// stricter worker; the worker's limits are the ones that hold where it runs. `None` when it
/// fits.
pub fn worker_problem(
    limits: &Limits,
    spec: &ExperimentSpec,
    device_memory: Option<u64>,
) -> Option<String> {
    let memory = memory_limit(limits, device_memory).and_then(|l| memory_problem(spec, &l));
    let problems: Vec<String> = memory
        .into_iter()
        .chain(metric_volume_problem(limits, spec))
        .collect();
    (!problems.is_empty()).then(|| problems.join("; and "))
}

/// The lab's wall-clock limit, which applies to every run beside the spec's own budget.
pub fn wall_limit(limits: &Limits) -> WallLimit {
    WallLimit {
        seconds: limits.max_wall_seconds as f64,
        source: "the lab's limits.max_wall_seconds".into(),
    }
}

/// Bytes for people: `12.3 GB (12345678901 bytes)`.
fn bytes_text(b: u64) -> String {
    let (v, unit) = if b >= 1_000_000_000 {
        (b as f64 / 1e9, "GB")
    } else if b >= 1_000_000 {
        (b as f64 / 1e6, "MB")
    } else {
        (b as f64 / 1e3, "kB")
    };
    format!("{v:.1} {unit} ({b} bytes)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configured_limit_wins_then_the_device_then_half_the_ram() {
        let mut limits = Limits::default();
        let l = memory_limit(&limits, Some(80 << 30)).unwrap();
        assert_eq!(l.bytes, 80 << 30);
        assert!(l.source.starts_with("the device's memory"), "{}", l.source);
        if let (Some(ram), Some(l)) = (machine_memory_bytes(), memory_limit(&limits, None)) {
            assert_eq!(l.bytes, ram / 2);
        }
        limits.max_memory_bytes = Some(1e6);
        let l = memory_limit(&limits, Some(80 << 30)).unwrap();
        assert_eq!(
            (l.bytes, l.source.as_str()),
            (1_000_000, "limits.max_memory_bytes")
        );
    }

    #[test]
    fn byte_figures_read_well() {
        assert_eq!(bytes_text(1_234), "1.2 kB (1234 bytes)");
        assert_eq!(bytes_text(12_345_678_901), "12.3 GB (12345678901 bytes)");
    }
}
