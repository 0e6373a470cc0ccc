//! [`LabHandle`]: an open lab — the one place that knows what a lab directory holds beyond the
//! ledger's own files, and how a process finds its queue, blobs and configuration from it.
//!
//! Layout, on top of the ledger's (`blobs/`, `log/`, `vkey`, `keys/`, `index.db`, see
//! [`glassbox_ledger::LabDir`]):
//!
//! - `lab.toml` — the lab configuration ([`LabConfig`]), used when no other file is named;
//! - `queue.db` — the job queue, when no database URL is given (SQLite);
//! - `bot.db` — the bot's delivery store (`serve` writes it, `glassbox bot` reads it);
//! - `scratch/<worker id>/` — a worker's training snapshots before they become blobs.
//!
//! A directory without a log opened with a database URL is a lab *elsewhere*: a worker on
//! another machine that reaches the lab through its database (the sequencer) and object store
//! only, with no key and no lab files; its directory holds its scratch space. One that holds
//! the lab's signing key but no log is an integrator taking over on a new host: the log is
//! restored from the bucket it was published to ([`glassbox_ledger::bucket::restore`]).
//!
//! What each piece is resolved from, first match wins: the queue from the given database URL,
//! else `queue.db`; the configuration from the given value, else the given file, else
//! `lab.toml`, else the defaults; blobs from the given location, else the configuration's
//! `[storage] blobs`, else `blobs/`. It is not the command line: the binary maps its flags and
//! environment onto [`LabOptions`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use glassbox_ledger::{BlobStore, LabDir};

use crate::config::LabConfig;
use crate::error::LabError;
use crate::flow::Flow;
use crate::queue::{Clock, Queue, QueueError, WorkerId};
use crate::recorder::Recorder;
use crate::sequencer::Sequencer;
use crate::worker::WorkerOptions;

/// The lab configuration file's name in a lab directory.
pub const CONFIG_FILE: &str = "lab.toml";

/// How to open a lab. `Default` is a lab directory on its own: `queue.db`, `lab.toml` if any,
/// `blobs/`, and no lab created when there is none.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// The queue database: `sqlite://PATH` or `postgres://...`. Default `sqlite://<lab>/queue.db`.
    pub database_url: Option<String>,
    /// A configuration file to read instead of `<lab>/lab.toml`.
    pub config_path: Option<PathBuf>,
    /// A configuration already read (takes precedence over `config_path`).
    pub config: Option<LabConfig>,
    /// Where blobs live: a directory, `file:///path` or `s3://bucket/prefix`.
    pub blobs: Option<String>,
    /// Create the lab (a fresh key and origin) when the directory has none.
    pub create: bool,
}

/// An open lab: its directory, queue, recorder, flow and configuration.
#[derive(Debug)]
pub struct LabHandle {
    /// The ledger directory.
    pub lab: LabDir,
    /// The job queue.
    pub queue: Queue,
    /// The ledger writer (blobs and entries).
    pub recorder: Arc<Recorder>,
    /// Proposals and decisions.
    pub flow: Flow,
    /// The configuration in effect.
    pub config: LabConfig,
    /// Whether this call created the lab (with the origin of its log).
    pub created: Option<String>,
}

impl LabHandle {
    /// Opens the lab at `root` as `options` say.
    pub async fn open(root: &Path, options: LabOptions) -> Result<LabHandle, LabError> {
        let (lab, created) = match LabDir::open(root) {
            Ok(lab) => (lab, None),
            Err(glassbox_ledger::Error::NoLab { .. }) if options.create => {
                let origin = LabDir::random_origin()?;
                let (lab, _) = LabDir::init(root, &origin)?;
                (lab, Some(origin))
            }
            // A worker on another machine: the lab is its database (and object store); the
            // directory is only its own scratch space.
            Err(glassbox_ledger::Error::NoLab { .. })
                if options.database_url.is_some() && root.is_dir() =>
            {
                (LabDir::elsewhere(root), None)
            }
            Err(e) => return Err(e.into()),
        };
        let config = match (options.config, options.config_path) {
            (Some(c), _) => c,
            (None, Some(p)) => LabConfig::load(&p)?,
            (None, None) => own_config(lab.root())?.unwrap_or_default(),
        };
        let url = options
            .database_url
            .unwrap_or_else(|| queue_url(lab.root()));
        let queue = Queue::connect_with(&url, Clock::System, config.queue.durability)
            .await
            .map_err(|e| match e {
                QueueError::Database(source) => LabError::QueueDatabase {
                    url: glassbox_ledger::index::redact(&url),
                    source,
                },
                other => other.into(),
            })?;
        let location = options.blobs.as_deref().or(config.storage.blobs.as_deref());
        if !lab.has_log() && location.is_none() {
            return Err(LabError::Refused(format!(
                "{} holds no lab: a worker on another machine needs the lab's shared blob store (--blobs s3://BUCKET/PREFIX, or [storage] blobs in its config)",
                lab.root().display()
            )));
        }
        let blobs = blob_store(&lab, location)?;
        if !lab.has_log() && lab.key_path().is_file() {
            let (l, b) = (lab.clone(), blobs.clone());
            tokio::task::spawn_blocking(move || restore_log(&l, b.as_ref()))
                .await
                .map_err(|e| LabError::Task(e.to_string()))??;
        }
        let durability = config.queue.durability;
        let (rec_lab, rec_url) = (lab.clone(), url.clone());
        let recorder = tokio::task::spawn_blocking(move || {
            let seq = Sequencer::connect(&rec_url, durability)?;
            Recorder::open(rec_lab, blobs, seq)
        })
        .await
        .map_err(|e| LabError::Task(e.to_string()))??;
        let recorder = Arc::new(recorder.with_witnesses(config.ledger.witnessing()));
        if recorder.integrates() {
            // Entries a process sequenced and then died before integrating (a killed worker
            // whose job's end had committed) are published by the next process that opens
            // the lab with its key, not only by the next append.
            let rec = recorder.clone();
            match tokio::task::spawn_blocking(move || rec.integrate_pending()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot integrate the entries sequenced before this process started")
                }
                Err(e) => tracing::warn!(error = %e, "the integration at start-up failed"),
            }
        }
        let flow = Flow::new(queue.clone(), recorder.clone(), config.clone());
        Ok(LabHandle {
            lab,
            queue,
            recorder,
            flow,
            config,
            created,
        })
    }

    /// Options for a worker of this lab named `id`: scratch space under `scratch/<id>`, the
    /// configuration's worker timing and limits, the given code revision. The caller sets
    /// backend, threads and peak.
    pub fn worker_options(&self, id: &str, code_revision: &str) -> WorkerOptions {
        let mut opts = WorkerOptions::new(
            WorkerId(id.to_string()),
            scratch_dir(self.lab.root(), id),
            code_revision.to_string(),
        );
        opts.settings = self.config.worker.clone();
        opts.limits = self.config.limits.clone();
        opts.reproduce = self.config.reproduce.clone();
        opts.leaderboards = self.config.leaderboards.clone();
        opts.evals = self.config.evals.clone();
        opts
    }

    /// The bot's delivery store of this lab.
    pub fn bot_store_url(&self) -> String {
        bot_store_url(self.lab.root())
    }
}

/// The default queue database of the lab at `root`: `sqlite://<root>/queue.db`.
pub fn queue_url(root: &Path) -> String {
    format!("sqlite://{}", root.join("queue.db").display())
}

/// The bot's delivery store of the lab at `root`: `sqlite://<root>/bot.db`.
pub fn bot_store_url(root: &Path) -> String {
    format!("sqlite://{}", root.join("bot.db").display())
}

/// A worker's scratch directory in the lab at `root`.
pub fn scratch_dir(root: &Path, worker: &str) -> PathBuf {
    root.join("scratch").join(worker)
}

/// The configuration in `<root>/lab.toml`, if the lab has one. A server's config (with `[web]`
/// and `[github]`) counts: the lab reads only its own sections.
pub fn own_config(root: &Path) -> Result<Option<LabConfig>, LabError> {
    let path = root.join(CONFIG_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    LabConfig::load(&path).map(Some)
}

/// An integrator taking over on a host that has the lab's signing key but not its log (the
/// previous integrator's host is gone): restores the log from the bucket it was published to.
fn restore_log(lab: &LabDir, blobs: &dyn BlobStore) -> Result<(), LabError> {
    let Some(bucket) = blobs.bucket() else {
        return Err(LabError::Refused(format!(
            "{} holds the lab's signing key but no log/checkpoint, and the blob store {} is not a bucket the log could be restored from; give this host the lab directory",
            lab.root().display(),
            blobs.describe()
        )));
    };
    let vkey = lab.signing_key()?.verifier_key();
    match glassbox_ledger::bucket::restore(bucket, lab.root(), &vkey)? {
        Some(size) => {
            tracing::info!(size, bucket = %bucket.name(), "restored the log from the bucket; this process integrates from there");
            Ok(())
        }
        None => Err(LabError::Refused(format!(
            "{} holds the lab's signing key but no log/checkpoint, and {} holds no log to restore; create a lab with `glassbox init`, or give this host the lab directory",
            lab.root().display(),
            bucket.name()
        ))),
    }
}

/// The blob store at `location`, or the lab directory's `blobs/`.
pub fn blob_store(lab: &LabDir, location: Option<&str>) -> Result<Arc<dyn BlobStore>, LabError> {
    Ok(match location {
        Some(loc) => Arc::from(glassbox_ledger::open_store(loc)?),
        None => Arc::new(lab.blobs()),
    })
}

/// The blob store of a lab opened without its queue (`ledger`, `publish`, `verify --lab`):
/// `location` when given, else the lab's own `lab.toml` `[storage] blobs`, else `blobs/`.
pub fn own_blob_store(
    lab: &LabDir,
    location: Option<&str>,
) -> Result<Arc<dyn BlobStore>, LabError> {
    match location {
        Some(loc) => blob_store(lab, Some(loc)),
        None => {
            let configured = own_config(lab.root())?.and_then(|c| c.storage.blobs);
            blob_store(lab, configured.as_deref())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_lab_is_created_only_when_asked_and_its_files_land_in_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lab");
        let refused = LabHandle::open(&root, LabOptions::default()).await;
        assert!(
            matches!(
                refused,
                Err(LabError::Ledger(glassbox_ledger::Error::NoLab { .. }))
            ),
            "{refused:?}"
        );
        let opened = LabHandle::open(
            &root,
            LabOptions {
                create: true,
                ..LabOptions::default()
            },
        )
        .await
        .unwrap();
        let origin = opened.created.clone().expect("created");
        assert!(origin.starts_with("glassbox-lab/"), "{origin}");
        assert!(root.join("queue.db").is_file());
        let w = opened.worker_options("w1", "rev");
        assert_eq!(w.scratch, root.join("scratch").join("w1"));
        assert_eq!(opened.bot_store_url(), bot_store_url(&root));
        drop(opened);
        let again = LabHandle::open(&root, LabOptions::default()).await.unwrap();
        assert!(again.created.is_none());
    }

    #[tokio::test]
    async fn the_lab_toml_in_the_directory_is_read_and_a_bad_one_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        LabDir::init(root, "test/origin").unwrap();
        std::fs::write(root.join(CONFIG_FILE), "[worker]\nlease_seconds = 77\n").unwrap();
        let lab = LabHandle::open(root, LabOptions::default()).await.unwrap();
        assert_eq!(
            lab.config,
            LabConfig::load(&root.join(CONFIG_FILE)).unwrap()
        );
        std::fs::write(root.join(CONFIG_FILE), "[worker]\nlease_secondz = 77\n").unwrap();
        let err = LabHandle::open(root, LabOptions::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("lease_secondz"), "{err}");
    }
}
