//! A lab directory: where the blob store, the log, the index database and the signing key
//! live, and how to create and open one.
//!
//! Layout: `blobs/` (content-addressed), `log/` (C2SP tlog-tiles), `index.db` (SQLite, derived),
//! `vkey` (the public verifier key, published with the log), `keys/ledger.key` (the private
//! signing key, mode 0600, never published), `ledger.lock` (the writer lock). This module
//! knows paths; it delegates the formats to `blob`, `log` and `checkpoint`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::blob::LocalBlobStore;
use crate::checkpoint::{SignedCheckpoint, SigningKey, VerifierKey};
use crate::error::Error;
use crate::log::{LockMode, LogWriter};

/// A lab directory that exists and has a log.
#[derive(Debug, Clone)]
pub struct LabDir {
    root: PathBuf,
}

impl LabDir {
    /// A fresh origin line for a new lab's log: `glassbox-lab/<8 random hex digits>`.
    pub fn random_origin() -> Result<String, Error> {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).map_err(|e| Error::NoRandomness(e.to_string()))?;
        Ok(format!(
            "glassbox-lab/{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ))
    }

    /// Creates a lab: directories, a fresh Ed25519 signing key named `origin` (mode 0600), the
    /// verifier key and the empty log's first checkpoint. Refuses a directory that has a lab.
    pub fn init(root: &Path, origin: &str) -> Result<(LabDir, SignedCheckpoint), Error> {
        let lab = LabDir {
            root: root.to_path_buf(),
        };
        for existing in ["keys/ledger.key", "log/checkpoint"] {
            if root.join(existing).exists() {
                return Err(Error::LabExists {
                    path: root.to_path_buf(),
                    found: existing.into(),
                });
            }
        }
        let key = SigningKey::generate(origin)?;
        for d in ["blobs", "log", "keys"] {
            fs::create_dir_all(root.join(d)).map_err(Error::io("cannot create", root.join(d)))?;
        }
        let key_path = lab.key_path();
        write_private(&key_path, format!("{}\n", key.to_text()).as_bytes())?;
        fs::write(lab.vkey_path(), format!("{}\n", key.verifier_key()))
            .map_err(Error::io("cannot write", lab.vkey_path()))?;
        let cp = LogWriter::create(&lab.log_dir(), &key)?;
        Ok((lab, cp))
    }

    /// Opens an existing lab; a clear error names what is missing.
    pub fn open(root: &Path) -> Result<LabDir, Error> {
        if !root.is_dir() {
            return Err(Error::NoLab {
                path: root.to_path_buf(),
                reason: "the directory does not exist".into(),
            });
        }
        let lab = LabDir {
            root: root.to_path_buf(),
        };
        if !lab.log_dir().join("checkpoint").is_file() {
            return Err(Error::NoLab {
                path: root.to_path_buf(),
                reason: "it has no log/checkpoint".into(),
            });
        }
        Ok(lab)
    }

    /// A directory standing in for a lab whose log lives on another machine (a worker that
    /// reaches the lab through its database and object store only): it holds the process's own
    /// files (scratch space); the log, keys and blobs are not there, and whatever reads them
    /// from this directory finds them missing.
    pub fn elsewhere(root: &Path) -> LabDir {
        LabDir {
            root: root.to_path_buf(),
        }
    }

    /// Whether the lab's log is in this directory.
    pub fn has_log(&self) -> bool {
        self.log_dir().join("checkpoint").is_file()
    }

    /// The lab directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<lab>/log`.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("log")
    }

    /// `<lab>/blobs`.
    pub fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs")
    }

    /// `<lab>/index.db`.
    pub fn index_path(&self) -> PathBuf {
        self.root.join("index.db")
    }

    /// `<lab>/keys/ledger.key`.
    pub fn key_path(&self) -> PathBuf {
        self.root.join("keys").join("ledger.key")
    }

    /// `<lab>/vkey`.
    pub fn vkey_path(&self) -> PathBuf {
        self.root.join("vkey")
    }

    /// The local blob store.
    pub fn blobs(&self) -> LocalBlobStore {
        LocalBlobStore::new(self.blobs_dir())
    }

    /// Reads the signing key.
    pub fn signing_key(&self) -> Result<SigningKey, Error> {
        let p = self.key_path();
        let text = fs::read_to_string(&p).map_err(Error::io("cannot read signing key", &p))?;
        Ok(SigningKey::parse(&text)?)
    }

    /// Reads the lab's verifier key.
    pub fn verifier_key(&self) -> Result<VerifierKey, Error> {
        let p = self.vkey_path();
        let text = fs::read_to_string(&p).map_err(Error::io("cannot read verifier key", &p))?;
        Ok(text.parse()?)
    }

    /// Opens the log writer (takes the lab's writer lock).
    pub fn writer(&self, mode: LockMode) -> Result<LogWriter, Error> {
        LogWriter::open(
            &self.log_dir(),
            &self.root.join("ledger.lock"),
            self.signing_key()?,
            mode,
        )
    }
}

/// Creates a file readable by its owner only (mode 0600) and fsyncs it.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path).map_err(Error::io("cannot create", path))?;
    f.write_all(bytes)
        .map_err(Error::io("cannot write", path))?;
    f.sync_all().map_err(Error::io("cannot fsync", path))?;
    Ok(())
}
