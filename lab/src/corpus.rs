//! The runner's [`CorpusStore`] over the ledger's blob store: a run trains on exactly the bytes
//! its spec names by hash, wherever the lab keeps its blobs (a directory or an object store).
//! Every load is re-hashed, so a corrupted or substituted corpus stops the run before training.

use std::io::Read;
use std::sync::Arc;

use glassbox_ledger::BlobStore;
use glassbox_runner::data::CorpusStore;
use glassbox_runner::error::RunnerError;
use glassbox_schemas::{Blake3Hash, BlobHash};

/// Corpora read from a blob store.
pub struct BlobCorpusStore {
    blobs: Arc<dyn BlobStore>,
}

impl std::fmt::Debug for BlobCorpusStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlobCorpusStore({})", self.blobs.describe())
    }
}

impl BlobCorpusStore {
    /// Reads corpora from `blobs`.
    pub fn new(blobs: Arc<dyn BlobStore>) -> Self {
        Self { blobs }
    }
}

impl CorpusStore for BlobCorpusStore {
    fn load(&self, hash: &BlobHash) -> Result<Arc<Vec<u8>>, RunnerError> {
        let missing = || RunnerError::CorpusMissing {
            hash: hash.to_string(),
            dir: self.blobs.describe().into(),
        };
        let mut reader = match self.blobs.get(hash) {
            Ok(r) => r,
            Err(glassbox_ledger::Error::BlobNotFound { .. }) => return Err(missing()),
            Err(e) => return Err(RunnerError::Backend(format!("corpus {hash}: {e}"))),
        };
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .map_err(|e| RunnerError::io(format!("read corpus {hash}"), e))?;
        let actual = Blake3Hash::of(&bytes);
        if actual != hash.0 {
            return Err(RunnerError::CorpusCorrupt {
                hash: hash.to_string(),
                path: self.blobs.describe().into(),
                actual: actual.to_string(),
            });
        }
        Ok(Arc::new(bytes))
    }
}
