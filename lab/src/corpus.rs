//! The runner's [`CorpusStore`] over the ledger's blob store: a run trains on exactly the bytes
//! its spec names by hash, wherever the lab keeps its blobs (a directory or an object store).
//! Every load is re-hashed, so a corrupted or substituted corpus stops the run before training.
//! Token shards are found through a [`ShardMap`] the lab resolved beforehand (from `tokenized`
//! entries, or from a recorded run's `run_started`); a shard whose bytes do not hash to its
//! name is refused and named.

use std::io::Read;
use std::sync::Arc;

use glassbox_ledger::BlobStore;
use glassbox_runner::data::{CorpusStore, DataError, TokenShard};
use glassbox_runner::error::RunnerError;
use glassbox_schemas::{Blake3Hash, BlobHash};

use crate::tokens::ShardMap;

/// Corpora read from a blob store.
pub struct BlobCorpusStore {
    blobs: Arc<dyn BlobStore>,
    shards: ShardMap,
}

impl std::fmt::Debug for BlobCorpusStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlobCorpusStore({})", self.blobs.describe())
    }
}

impl BlobCorpusStore {
    /// Reads corpora from `blobs`.
    pub fn new(blobs: Arc<dyn BlobStore>) -> Self {
        Self {
            blobs,
            shards: ShardMap::new(),
        }
    }

    /// The same store, finding token shards in `shards`.
    pub fn with_shards(mut self, shards: ShardMap) -> Self {
        self.shards = shards;
        self
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

    fn token_shard(
        &self,
        corpus: &BlobHash,
        tokenizer: &BlobHash,
    ) -> Result<(BlobHash, Arc<TokenShard>), RunnerError> {
        let Some(hash) = self.shards.get(&(*corpus, *tokenizer)) else {
            return Err(RunnerError::ShardMissing {
                corpus: corpus.to_string(),
                tokenizer: tokenizer.to_string(),
            });
        };
        let mut bytes = Vec::new();
        self.blobs
            .get(hash)
            .map_err(|e| RunnerError::Backend(format!("token shard {hash}: {e}")))?
            .read_to_end(&mut bytes)
            .map_err(|e| RunnerError::io(format!("read token shard {hash}"), e))?;
        let actual = Blake3Hash::of(&bytes);
        if actual != hash.0 {
            return Err(DataError::Shard {
                what: hash.to_string(),
                reason: format!(
                    "its bytes hash to {actual}: the blob store holds a damaged or substituted shard; refusing it"
                ),
            }
            .into());
        }
        let shard = TokenShard::from_bytes(&bytes, &hash.to_string())?;
        if shard.corpus() != corpus || shard.tokenizer() != tokenizer {
            return Err(DataError::Shard {
                what: hash.to_string(),
                reason: format!(
                    "it tokenizes corpus {} with tokenizer {}, not corpus {corpus} with tokenizer {tokenizer}",
                    shard.corpus(),
                    shard.tokenizer()
                ),
            }
            .into());
        }
        Ok((*hash, Arc::new(shard)))
    }
}
