//! glassbox-corpus: the corpus formats, shared by the runner (which trains on them) and the
//! dashboard (which shows them).
//!
//! - [`documents`] — documents out of a corpus's raw file: plain text, JSON Lines, Parquet;
//!   streaming, bounded, every bad input named by file and line, row or column;
//! - [`shard`] — [`TokenShard`], the byte layout of a tokenized corpus (ids, each token's
//!   source byte count, document starts);
//! - [`rows`] — records out of JSON Lines or Parquet rows (evaluation suites), bounded;
//! - [`error`] — [`DataError`];
//! - `counting` — the documents of JSON Lines counted on every core, for import.
//!
//! It reads and writes bytes; it does not tokenize (the runner holds the tokenizer), store
//! (the lab and the ledger do) or know any entry.

mod counting;
pub mod documents;
pub mod error;
pub mod rows;
pub mod shard;

pub use error::{DataError, Location};
pub use shard::{EncodedDocument, TokenShard};
