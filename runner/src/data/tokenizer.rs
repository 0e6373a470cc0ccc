//! Stored tokenizers: a Hugging Face `tokenizer.json`, loaded, trained and used with the
//! `tokenizers` crate (the implementation the Python package wraps, so the same file gives the
//! same ids in both).
//!
//! Encoding a corpus: each document is encoded on its own without the tokenizer's
//! post-processor templates (`add_special_tokens = false`), and the end-of-document token
//! follows it. Every token is also given the number of source bytes it stands for, from the
//! encoding's byte offsets: token `i` covers the bytes from the end of the previous token to
//! the end of its own span (`max(end_i, end_{i-1}) - end_{i-1}`), and the end-of-document
//! token covers whatever is left (text a normalizer or pre-tokenizer dropped at the end). So
//! a document's token byte counts add up to its UTF-8 length exactly, whatever the tokenizer
//! does (byte-level BPE splitting a character into two tokens, Metaspace prepending `▁`,
//! trimmed offsets), and bits per byte over any window is exact: sum of the targets' NLL over
//! the sum of their byte counts.
//!
//! Training: byte-level BPE (GPT-2's pre-tokenizer, all 256 byte symbols in the alphabet, so
//! every input is encodable) or Unigram (Metaspace, with `<unk>`); both reserve
//! `<|endoftext|>` as id 0 for the end of a document. BPE training is deterministic (the same
//! corpora give the same bytes); the library's Unigram training is not (it walks hash maps in
//! a per-process random order), so a Unigram tokenizer is known by its blob hash alone.
//!
//! Not here: reading corpora (`documents`) or the shard layout (`shard`), both in
//! `glassbox-corpus`.

use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::models::unigram::{Unigram, UnigramTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::{AddedToken, Tokenizer};

use super::error::DataError;
pub use glassbox_corpus::EncodedDocument;

/// Largest `tokenizer.json` accepted (64 MiB; a 256k-token vocabulary with its merges is about
/// 20 MiB).
pub const MAX_TOKENIZER_BYTES: usize = 64 << 20;

/// The end-of-document token of tokenizers glassbox trains.
pub const END_OF_DOCUMENT: &str = "<|endoftext|>";

/// Tokens looked for, in this order, as the end of a document in an imported tokenizer.
pub const END_OF_DOCUMENT_CANDIDATES: [&str; 6] = [
    "<|endoftext|>",
    "<|end_of_text|>",
    "</s>",
    "<eos>",
    "<|im_end|>",
    "[SEP]",
];

/// Smallest and largest vocabulary glassbox trains.
pub const VOCAB_RANGE: std::ops::RangeInclusive<u32> = 260..=1_048_576;

/// Which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainKind {
    /// Byte-level BPE.
    Bpe,
    /// Unigram.
    Unigram,
}

/// A loaded tokenizer with its end-of-document token.
pub struct TextTokenizer {
    inner: Tokenizer,
    eod: (String, u32),
    vocab: u32,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("model", &self.model_name())
            .field("vocab", &self.vocab)
            .field("eod", &self.eod)
            .finish()
    }
}

impl TextTokenizer {
    /// Loads a `tokenizer.json`. `name` names it in errors; `eod` is the end-of-document token
    /// (left out: the first of [`END_OF_DOCUMENT_CANDIDATES`] it has).
    pub fn from_json(bytes: &[u8], name: &str, eod: Option<&str>) -> Result<Self, DataError> {
        let bad = |reason: String| DataError::Tokenizer {
            what: name.into(),
            reason,
        };
        if bytes.len() > MAX_TOKENIZER_BYTES {
            return Err(bad(format!(
                "is {} bytes; the limit is {MAX_TOKENIZER_BYTES} bytes",
                bytes.len()
            )));
        }
        let inner = Tokenizer::from_bytes(bytes).map_err(|e| {
            bad(format!(
                "is not a Hugging Face tokenizer.json ({e}); export one with `tokenizer.save(\"tokenizer.json\")`"
            ))
        })?;
        Self::with_eod(inner, name, eod)
    }

    fn with_eod(inner: Tokenizer, name: &str, eod: Option<&str>) -> Result<Self, DataError> {
        let bad = |reason: String| DataError::Tokenizer {
            what: name.into(),
            reason,
        };
        let eod = match eod {
            Some(t) => {
                let id = inner.token_to_id(t).ok_or_else(|| {
                    bad(format!(
                        "has no token {t:?} for the end of a document; its special tokens: {}",
                        special_tokens(&inner).join(", ")
                    ))
                })?;
                (t.to_string(), id)
            }
            None => END_OF_DOCUMENT_CANDIDATES
                .iter()
                .find_map(|t| inner.token_to_id(t).map(|id| (t.to_string(), id)))
                .ok_or_else(|| {
                    bad(format!(
                        "has none of {} to end a document; name one of its tokens with --eod-token (its special tokens: {})",
                        END_OF_DOCUMENT_CANDIDATES.join(", "),
                        special_tokens(&inner).join(", ")
                    ))
                })?,
        };
        let vocab = inner
            .get_vocab(true)
            .values()
            .copied()
            .max()
            .map_or(0, |m| m + 1);
        Ok(Self { inner, eod, vocab })
    }

    /// Trains a tokenizer of `vocab` tokens on `documents`.
    pub fn train<I>(kind: TrainKind, vocab: u32, documents: I) -> Result<Self, DataError>
    where
        I: Iterator<Item = String> + Send,
    {
        let bad = |reason: String| DataError::Tokenizer {
            what: "training".into(),
            reason,
        };
        if !VOCAB_RANGE.contains(&vocab) {
            return Err(bad(format!(
                "--vocab {vocab}: must be between {} and {}",
                VOCAB_RANGE.start(),
                VOCAB_RANGE.end()
            )));
        }
        let eod = AddedToken::from(END_OF_DOCUMENT, true);
        let (mut inner, mut trainer): (Tokenizer, TrainerWrapper) = match kind {
            TrainKind::Bpe => {
                let mut t = Tokenizer::new(BPE::default());
                // GPT-2's byte-level pre-tokenizer without a prefix space: the text is split by
                // its regex and mapped to 256 printable symbols, so no input is unknown.
                t.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
                t.with_decoder(Some(ByteLevel::new(false, true, true)));
                let trainer = BpeTrainerBuilder::new()
                    .vocab_size(vocab as usize)
                    .show_progress(false)
                    .special_tokens(vec![eod])
                    .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
                    .build();
                (t, trainer.into())
            }
            TrainKind::Unigram => {
                let mut t = Tokenizer::new(Unigram::default());
                t.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Always, true)));
                t.with_decoder(Some(Metaspace::new('▁', PrependScheme::Always, true)));
                let trainer = UnigramTrainerBuilder::default()
                    .vocab_size(vocab)
                    .show_progress(false)
                    .special_tokens(vec![eod, AddedToken::from("<unk>", true)])
                    .unk_token(Some("<unk>".into()))
                    .build()
                    .map_err(|e| bad(e.to_string()))?;
                (t, trainer.into())
            }
        };
        inner
            .train(&mut trainer, documents)
            .map_err(|e| bad(e.to_string()))?;
        Self::with_eod(inner, "trained", Some(END_OF_DOCUMENT))
    }

    /// The `tokenizer.json` bytes (compact JSON, as the library writes it).
    pub fn to_json(&self) -> Result<Vec<u8>, DataError> {
        self.inner
            .to_string(false)
            .map(String::into_bytes)
            .map_err(|e| DataError::Tokenizer {
                what: "serializing".into(),
                reason: e.to_string(),
            })
    }
    /// The text of `ids`, special tokens included, as the tokenizer's decoder writes it.
    pub fn decode(&self, ids: &[u32]) -> Result<String, DataError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| DataError::Tokenizer {
                what: "decoding".into(),
                reason: e.to_string(),
            })
    }

    /// The `bytes` tokenizer as a Hugging Face `tokenizer.json`: token `b` is byte `b` (a
    /// byte-level BPE with the 256 byte symbols and no merges, no pre-tokenizer split, and the
    /// byte-level decoder), so tools that load `tokenizer.json` see the same ids as glassbox.
    pub fn bytes_json() -> Result<Vec<u8>, DataError> {
        let bad = |reason: String| DataError::Tokenizer {
            what: "the bytes tokenizer".into(),
            reason,
        };
        let symbols = ByteLevel::alphabet();
        let mut vocab = tokenizers::models::bpe::Vocab::default();
        for b in 0..=255u8 {
            let symbol = byte_symbol(b);
            debug_assert!(symbols.contains(&symbol));
            vocab.insert(symbol.to_string(), u32::from(b));
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, Vec::new())
            .build()
            .map_err(|e| bad(e.to_string()))?;
        let mut t = Tokenizer::new(bpe);
        t.with_pre_tokenizer(Some(ByteLevel::new(false, false, false)));
        t.with_decoder(Some(ByteLevel::new(false, false, false)));
        t.to_string(true)
            .map(String::into_bytes)
            .map_err(|e| bad(e.to_string()))
    }

    /// Vocabulary size, added tokens included (one past the largest id).
    pub fn vocab_size(&self) -> u32 {
        self.vocab
    }

    /// The end-of-document token and its id.
    pub fn end_of_document(&self) -> (&str, u32) {
        (&self.eod.0, self.eod.1)
    }

    /// The model type inside (`BPE`, `Unigram`, `WordPiece`, `WordLevel`).
    pub fn model_name(&self) -> &'static str {
        use tokenizers::models::ModelWrapper;
        match self.inner.get_model() {
            ModelWrapper::BPE(_) => "BPE",
            ModelWrapper::WordPiece(_) => "WordPiece",
            ModelWrapper::WordLevel(_) => "WordLevel",
            ModelWrapper::Unigram(_) => "Unigram",
        }
    }

    /// Its special tokens, by id.
    pub fn special_tokens(&self) -> Vec<String> {
        special_tokens(&self.inner)
    }

    /// The text of token `id`, when there is one.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Encodes documents on all cores, each followed by the end-of-document token.
    pub fn encode_documents(&self, documents: &[&str]) -> Result<Vec<EncodedDocument>, DataError> {
        let encodings = self
            .inner
            .encode_batch(documents.to_vec(), false)
            .map_err(|e| DataError::Tokenizer {
                what: "encoding".into(),
                reason: e.to_string(),
            })?;
        Ok(documents
            .iter()
            .zip(&encodings)
            .map(|(doc, enc)| self.with_byte_counts(doc, enc.get_ids(), enc.get_offsets()))
            .collect())
    }

    /// Appends the end-of-document token and the byte counts (see the module docs).
    fn with_byte_counts(
        &self,
        doc: &str,
        ids: &[u32],
        offsets: &[(usize, usize)],
    ) -> EncodedDocument {
        let mut out_ids = Vec::with_capacity(ids.len() + 1);
        let mut bytes = Vec::with_capacity(ids.len() + 1);
        let mut covered = 0usize;
        for (&id, &(_, end)) in ids.iter().zip(offsets) {
            let end = end.min(doc.len()).max(covered);
            out_ids.push(id);
            bytes.push((end - covered) as u32);
            covered = end;
        }
        out_ids.push(self.eod.1);
        bytes.push((doc.len() - covered) as u32);
        EncodedDocument {
            ids: out_ids,
            bytes,
        }
    }
}
/// GPT-2's printable stand-in for byte `b` in byte-level vocabularies: printable Latin-1
/// bytes stand for themselves, the rest map in order to U+0100 onwards.
fn byte_symbol(b: u8) -> char {
    let printable = |x: u8| (b'!'..=b'~').contains(&x) || (0xa1..=0xac).contains(&x) || x >= 0xae;
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or('\u{FFFD}')
}

fn special_tokens(t: &Tokenizer) -> Vec<String> {
    let mut added: Vec<(u32, String)> = t
        .get_added_tokens_decoder()
        .into_iter()
        .filter(|(_, tok)| tok.special)
        .map(|(id, tok)| (id, tok.content))
        .collect();
    added.sort();
    added.into_iter().map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &[&str] = &[
        "the cat sat on the mat. the cat ate.",
        "a dog and a cat: héllo wörld, 你好世界 🙂",
        "   spaced    out\n\ttabs\n",
    ];

    fn corpus() -> impl Iterator<Item = String> + Send {
        SAMPLE
            .iter()
            .cycle()
            .take(60)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn byte_counts_add_up_to_each_document() {
        for kind in [TrainKind::Bpe, TrainKind::Unigram] {
            let t = TextTokenizer::train(kind, 300, corpus()).unwrap();
            assert_eq!(t.end_of_document(), (END_OF_DOCUMENT, 0));
            for (doc, enc) in SAMPLE.iter().zip(t.encode_documents(SAMPLE).unwrap()) {
                assert_eq!(enc.ids.len(), enc.bytes.len());
                assert_eq!(*enc.ids.last().unwrap(), 0);
                assert_eq!(
                    enc.bytes.iter().map(|&b| b as usize).sum::<usize>(),
                    doc.len(),
                    "{kind:?} {doc:?}"
                );
                assert!(enc.ids.iter().all(|&i| i < t.vocab_size()));
            }
        }
    }

    /// BPE training is deterministic for a given input (ties between merges are broken by
    /// token ids, not hash order): the same corpus gives the same `tokenizer.json` bytes.
    /// Unigram training is not (the library iterates hash maps in a per-process random order
    /// and sums floats in that order), so a Unigram tokenizer is named by its blob hash alone.
    #[test]
    fn bpe_training_twice_gives_the_same_bytes() {
        let a = TextTokenizer::train(TrainKind::Bpe, 300, corpus()).unwrap();
        let b = TextTokenizer::train(TrainKind::Bpe, 300, corpus()).unwrap();
        assert_eq!(a.vocab_size(), 300);
        assert!(
            a.to_json().unwrap() == b.to_json().unwrap(),
            "two trainings differ"
        );
    }

    #[test]
    fn an_imported_tokenizer_needs_an_end_of_document_token() {
        let t = TextTokenizer::train(TrainKind::Bpe, 300, corpus()).unwrap();
        let json = t.to_json().unwrap();
        let back = TextTokenizer::from_json(&json, "t.json", None).unwrap();
        assert_eq!(back.vocab_size(), t.vocab_size());
        let err = TextTokenizer::from_json(&json, "t.json", Some("</s>"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "tokenizer t.json: has no token \"</s>\" for the end of a document; its special tokens: <|endoftext|>"
        );
        let err = TextTokenizer::from_json(b"{\"nope\":1}", "x.json", None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("tokenizer x.json: is not a Hugging Face tokenizer.json"),
            "{err}"
        );
    }
}
