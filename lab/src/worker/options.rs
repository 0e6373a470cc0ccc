//! How a worker is set up and what it says about itself on the record: [`WorkerOptions`], the
//! host name, the build identity (commit, dirty flag, the executable's BLAKE3) and the
//! hardware description.
//!
//! Not here: the job loop (the parent module) or training (`training`).

use crate::config::{EvalSettings, Limits, ReproduceSettings, WorkerSettings};
use crate::queue::WorkerId;
use glassbox_ledger::board::BoardDef;
use glassbox_runner::backend::BackendRequest;
use glassbox_runner::train::Peak;
use glassbox_schemas::Blake3Hash;
use glassbox_schemas::record::BuildIdentity;
use std::path::PathBuf;
use std::sync::OnceLock;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its id in the queue (unique per process).
    pub id: WorkerId,
    /// Lease, heartbeat, poll, metric chunking.
    pub settings: WorkerSettings,
    /// CPU threads for training.
    pub threads: usize,
    /// Which backend to train on.
    pub backend: BackendRequest,
    /// Scratch space for checkpoints before they become blobs.
    pub scratch: PathBuf,
    /// The code revision recorded in `run_started`: the full git commit, `-dirty` when the
    /// tree was modified (the binary's `GLASSBOX_GIT_REVISION`).
    pub code_revision: String,
    /// The MFU reference; measured once at the first job when `None`.
    pub peak: Option<Peak>,
    /// The lab's limits this worker applies: memory (checked before allocating) and wall time
    /// (every run, beside the spec's own budget).
    pub limits: Limits,
    /// This worker's host name, recorded in `run_started` and `reproduction` entries and
    /// checked by jobs that avoid a host. Default: the machine's host name.
    pub host: String,
    /// The lab's `[reproduce]` policy, applied when a run this worker made succeeds.
    pub reproduce: ReproduceSettings,
    /// The lab's leaderboards (what `reproduce.policy = "top"` ranks against).
    pub leaderboards: Vec<BoardDef>,
    /// The lab's `[evals]`: suites each snapshot is evaluated on, and their jobs' priority.
    pub evals: EvalSettings,
    /// Test only: train with a seed the spec does not state, as a nondeterministic backend
    /// would, so that a reproduction differs.
    #[cfg(feature = "test-backend")]
    pub nondeterministic: bool,
}

/// The machine's host name (`worker` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}

impl WorkerOptions {
    /// Defaults for a worker named `id` with scratch space under `scratch`.
    pub fn new(id: WorkerId, scratch: PathBuf, code_revision: String) -> Self {
        Self {
            id,
            settings: WorkerSettings::default(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            backend: BackendRequest::Auto,
            scratch,
            code_revision,
            peak: None,
            limits: Limits::default(),
            host: host_name(),
            reproduce: ReproduceSettings::default(),
            leaderboards: Vec::new(),
            evals: EvalSettings::default(),
            #[cfg(feature = "test-backend")]
            nondeterministic: false,
        }
    }
}

/// Which program is running: the commit and dirty flag from the code revision
/// (`<40 hex>[-dirty]`), and the BLAKE3 of the executable file (`std::env::current_exe`).
/// `None` when the executable cannot be read.
pub fn build_identity(code_revision: &str) -> Option<BuildIdentity> {
    let executable_blake3 = executable_hash()?;
    let (commit, dirty) = match code_revision.strip_suffix("-dirty") {
        Some(c) => (c, true),
        None => (code_revision, false),
    };
    let is_commit = commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    Some(BuildIdentity {
        commit: is_commit.then(|| commit.to_ascii_lowercase()),
        dirty,
        executable_blake3,
    })
}

/// BLAKE3 of the running executable, read once per process (a binary replaced on disk while
/// it runs is still named by the bytes it started from, as far as the first read saw them).
pub(super) fn executable_hash() -> Option<Blake3Hash> {
    static HASH: OnceLock<Option<Blake3Hash>> = OnceLock::new();
    *HASH.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let mut hasher = blake3::Hasher::new();
        hasher.update_reader(std::fs::File::open(&exe).ok()?).ok()?;
        Some(Blake3Hash::from_bytes(*hasher.finalize().as_bytes()))
    })
}

/// The CPU model and core count, for `run_started`.
pub fn hardware_description() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model}, {cores} cores")
}
