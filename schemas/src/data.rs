//! The data records: how a stored corpus's raw file splits into documents ([`CorpusFormat`]),
//! what a stored tokenizer is ([`TokenizerBody`], the `tokenizer` entry) and which token shard
//! a (corpus, tokenizer) pair tokenizes to ([`TokenizedBody`], the `tokenized` entry).
//!
//! A corpus blob is the raw file as imported (text, JSONL or Parquet); its `dataset` entry says
//! how to read documents out of it, so anyone holding the blob re-derives the same documents.
//! A token shard is a blob too; its byte layout is the runner's (`runner/src/data/shard.rs`).
//! Not here: reading files, tokenizing, or training (the runner and the lab do that).

use serde::{Deserialize, Serialize};

use crate::hash::BlobHash;

/// How a corpus's raw bytes split into documents. Written in the `dataset` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CorpusFormat {
    /// UTF-8 text: the whole file is one document, or documents are separated by `separator`.
    Text {
        /// The separator between documents; left out, the file is one document.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        separator: Option<String>,
    },
    /// JSON Lines: one JSON object per line, its string field `text_field` is the document.
    Jsonl {
        /// The field holding the document's text.
        text_field: String,
    },
    /// Apache Parquet: each row's string column `text_column` is a document.
    Parquet {
        /// The column holding the documents' text.
        text_column: String,
    },
}

impl CorpusFormat {
    /// The format's name (`text`, `jsonl`, `parquet`).
    pub fn name(&self) -> &'static str {
        match self {
            CorpusFormat::Text { .. } => "text",
            CorpusFormat::Jsonl { .. } => "jsonl",
            CorpusFormat::Parquet { .. } => "parquet",
        }
    }
}

/// How a stored tokenizer was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerKind {
    /// Byte-level BPE trained by glassbox.
    Bpe,
    /// Unigram (SentencePiece-style) trained by glassbox.
    Unigram,
    /// An existing `tokenizer.json` imported as it is.
    Imported,
}

impl TokenizerKind {
    /// The kind's name as written (`bpe`).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenizerKind::Bpe => "bpe",
            TokenizerKind::Unigram => "unigram",
            TokenizerKind::Imported => "imported",
        }
    }
}

/// Body of a `tokenizer` entry; `refs.tokenizer` is the `tokenizer.json` blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerBody {
    /// How it was made.
    pub kind: TokenizerKind,
    /// The tokenizer's model type inside `tokenizer.json` (`BPE`, `Unigram`, `WordPiece`, ...).
    pub model: String,
    /// Vocabulary size, added tokens included: what a spec's `model.vocab` must be.
    pub vocab_size: u32,
    /// The corpora it was trained on, by hash (empty for an imported tokenizer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trained_on: Vec<BlobHash>,
    /// Its special tokens.
    pub special_tokens: Vec<String>,
    /// The token written between documents.
    pub end_of_document: String,
    /// That token's id.
    pub end_of_document_id: u32,
    /// Where it came from: `trained`, or `import <file name>`.
    pub source: String,
}

/// Body of a `tokenized` entry; `refs.shard` is the token shard blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizedBody {
    /// The corpus that was tokenized.
    pub corpus: BlobHash,
    /// The tokenizer it was tokenized with.
    pub tokenizer: BlobHash,
    /// The token shard (also `refs.shard`).
    pub shard: BlobHash,
    /// Tokens in the shard (end-of-document tokens included).
    pub tokens: u64,
    /// Documents in the shard.
    pub documents: u64,
    /// UTF-8 bytes of text the tokens cover.
    pub text_bytes: u64,
}

/// The data a run trained on, in its `run_started` entry: the tokenizer and, per domain, the
/// exact token shard (absent for byte-tokenized runs, which train on the corpus blobs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunData {
    /// The stored tokenizer.
    pub tokenizer: BlobHash,
    /// Domain name -> the token shard its batches are cut from.
    pub shards: std::collections::BTreeMap<String, BlobHash>,
}
