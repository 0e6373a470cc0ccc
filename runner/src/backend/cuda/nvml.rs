//! GPU telemetry through NVML (`libnvidia-ml.so.1`, installed with the NVIDIA driver), loaded
//! at run time like the other CUDA libraries so a machine without it runs on, without the
//! `hw/gpu/...` metrics. The device is found by the UUID CUDA reports for the backend's device
//! (NVML's indices need not match CUDA's ordinals).
//!
//! Read per sample: utilisation, memory in use (and the peak of this run's samples), power,
//! temperature and the SM clock — a few microseconds of host calls, no device synchronisation.
//! Not here: process metrics ([`crate::backend::telemetry::process`]) or metric names
//! ([`crate::backend::telemetry`]).

use std::ffi::{CString, c_char, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::telemetry as names;

type Ret = c_uint;
type Device = *mut c_void;

const SUCCESS: Ret = 0;
/// `NVML_TEMPERATURE_GPU`.
const TEMPERATURE_GPU: c_uint = 0;
/// `NVML_CLOCK_SM`.
const CLOCK_SM: c_uint = 1;

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

type FnInit = unsafe extern "C" fn() -> Ret;
type FnByUuid = unsafe extern "C" fn(*const c_char, *mut Device) -> Ret;
type FnUtil = unsafe extern "C" fn(Device, *mut Utilization) -> Ret;
type FnMem = unsafe extern "C" fn(Device, *mut Memory) -> Ret;
type FnU32 = unsafe extern "C" fn(Device, *mut c_uint) -> Ret;
type FnU32Of = unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> Ret;

/// An open NVML session on one device.
pub struct Nvml {
    // The function pointers below stay valid while the library is loaded.
    _lib: libloading::Library,
    shutdown: FnInit,
    device: Device,
    util: FnUtil,
    mem: FnMem,
    power: FnU32,
    temp: FnU32Of,
    clock: FnU32Of,
    peak_used: AtomicU64,
}

// SAFETY: NVML is thread-safe (its documentation: all functions may be called from any thread);
// the device handle is a process-wide opaque pointer valid until shutdown.
unsafe impl Send for Nvml {}
// SAFETY: as above; the only mutable state here is an atomic.
unsafe impl Sync for Nvml {}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvml")
    }
}

/// NVML's text form of a CUDA device UUID: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let h: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

impl Nvml {
    /// Opens NVML on the device with this UUID; `Err` says why not (no library, no device).
    pub fn open(uuid: &str) -> Result<Self, String> {
        // SAFETY: loading the driver's NVML runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .or_else(|_| unsafe { libloading::Library::new("libnvidia-ml.so") })
            .map_err(|e| format!("NVML not loadable: {e}"))?;
        // SAFETY: each symbol is looked up with NVML's documented C signature.
        let sym = |name: &str| -> Result<*const c_void, String> {
            unsafe { lib.get::<*const c_void>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("NVML has no {name}: {e}"))
        };
        // SAFETY: the pointers are NVML's functions of these signatures (nvml.h).
        let (init, shutdown, by_uuid, util, mem, power, temp, clock) = unsafe {
            (
                std::mem::transmute::<*const c_void, FnInit>(sym("nvmlInit_v2")?),
                std::mem::transmute::<*const c_void, FnInit>(sym("nvmlShutdown")?),
                std::mem::transmute::<*const c_void, FnByUuid>(sym("nvmlDeviceGetHandleByUUID")?),
                std::mem::transmute::<*const c_void, FnUtil>(sym("nvmlDeviceGetUtilizationRates")?),
                std::mem::transmute::<*const c_void, FnMem>(sym("nvmlDeviceGetMemoryInfo")?),
                std::mem::transmute::<*const c_void, FnU32>(sym("nvmlDeviceGetPowerUsage")?),
                std::mem::transmute::<*const c_void, FnU32Of>(sym("nvmlDeviceGetTemperature")?),
                std::mem::transmute::<*const c_void, FnU32Of>(sym("nvmlDeviceGetClockInfo")?),
            )
        };
        // SAFETY: no arguments.
        let r = unsafe { init() };
        if r != SUCCESS {
            return Err(format!("nvmlInit_v2 returned {r}"));
        }
        let id = CString::new(uuid).map_err(|_| "device UUID has a NUL byte".to_string())?;
        let mut device: Device = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and an out-parameter.
        let r = unsafe { by_uuid(id.as_ptr(), &mut device) };
        if r != SUCCESS {
            // SAFETY: balances the successful init above.
            unsafe { shutdown() };
            return Err(format!("NVML does not know device {uuid} (error {r})"));
        }
        Ok(Self {
            _lib: lib,
            shutdown,
            device,
            util,
            mem,
            power,
            temp,
            clock,
            peak_used: AtomicU64::new(0),
        })
    }

    /// One sample of the device's counters, as `hw/gpu/...` metrics (a counter NVML cannot
    /// read on this board is left out).
    pub fn sample(&self) -> Vec<(&'static str, f64)> {
        let mut out = Vec::with_capacity(6);
        let mut u = Utilization::default();
        // SAFETY (every call): the device handle is live and each out-parameter has the type
        // the function writes.
        if unsafe { (self.util)(self.device, &mut u) } == SUCCESS {
            out.push((names::GPU_UTILIZATION, u.gpu as f64));
        }
        let mut m = Memory::default();
        if unsafe { (self.mem)(self.device, &mut m) } == SUCCESS {
            let peak = self
                .peak_used
                .fetch_max(m.used, Ordering::Relaxed)
                .max(m.used);
            out.push((names::GPU_MEMORY_USED_BYTES, m.used as f64));
            out.push((names::GPU_MEMORY_PEAK_BYTES, peak as f64));
        }
        let mut v: c_uint = 0;
        if unsafe { (self.power)(self.device, &mut v) } == SUCCESS {
            out.push((names::GPU_POWER_WATTS, v as f64 / 1000.0));
        }
        if unsafe { (self.temp)(self.device, TEMPERATURE_GPU, &mut v) } == SUCCESS {
            out.push((names::GPU_TEMPERATURE_C, v as f64));
        }
        if unsafe { (self.clock)(self.device, CLOCK_SM, &mut v) } == SUCCESS {
            out.push((names::GPU_SM_CLOCK_MHZ, v as f64));
        }
        out
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances the init of `open`; the library is still loaded.
        unsafe { (self.shutdown)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_print_as_nvml_expects_them() {
        let b: [u8; 16] = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ];
        assert_eq!(uuid_text(&b), "GPU-12345678-9abc-def0-0123-456789abcdef");
    }

    #[test]
    fn a_missing_device_or_library_is_an_explanation_not_a_panic() {
        // On the CPU-only machines the library is absent; with a driver, the UUID is unknown.
        let err = Nvml::open("GPU-00000000-0000-0000-0000-000000000000").unwrap_err();
        assert!(err.contains("NVML"), "{err}");
    }
}
