//! Text to token ids and back, for the two kinds of tokenizer a spec may name: one token per
//! byte, or a stored Hugging Face tokenizer.
//!
//! Decoding never yields broken text: a token that ends inside a UTF-8 character (a byte
//! model's first byte of `é`, a byte-level BPE token holding half an emoji) is held back until
//! the character completes, and a character left incomplete at the end is dropped and counted.
//! Bytes that can never be UTF-8 (a byte model may emit `0xFF`) become U+FFFD, as every text
//! tool shows them. Not here: training or storing tokenizers ([`crate::data::tokenizer`]).

use crate::data::tokenizer::TextTokenizer;
use crate::error::RunnerError;

/// How a model's text becomes ids.
#[derive(Debug)]
pub enum TextCodec {
    /// One token per byte (vocabulary 256).
    Bytes,
    /// A stored tokenizer.
    Stored(Box<TextTokenizer>),
}

/// Text with the number of trailing bytes held back because they end inside a character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The complete characters.
    pub text: String,
    /// Bytes of an incomplete character at the end, not in `text`.
    pub incomplete_bytes: usize,
}

impl TextCodec {
    /// Token ids of `text` (no end-of-document token) and the UTF-8 bytes each stands for
    /// (they add up to `text.len()`).
    pub fn encode(&self, text: &str) -> Result<(Vec<u32>, Vec<u32>), RunnerError> {
        match self {
            TextCodec::Bytes => Ok((text.bytes().map(u32::from).collect(), vec![1; text.len()])),
            TextCodec::Stored(t) => {
                let mut doc = t
                    .encode_documents(&[text])
                    .map_err(RunnerError::Data)?
                    .pop()
                    .ok_or_else(|| {
                        RunnerError::Backend("the tokenizer encoded no document".into())
                    })?;
                // The end-of-document token closes every encoded document; a prompt or a
                // scored text is not closed: its leftover bytes go to the last real token.
                let (_, eod_bytes) = (doc.ids.pop(), doc.bytes.pop().unwrap_or(0));
                if let Some(last) = doc.bytes.last_mut() {
                    *last += eod_bytes;
                }
                Ok((doc.ids, doc.bytes))
            }
        }
    }

    /// The text of `ids`, holding back an incomplete character at the end.
    pub fn decode(&self, ids: &[u32]) -> Result<Decoded, RunnerError> {
        match self {
            TextCodec::Bytes => {
                let bytes: Vec<u8> = ids.iter().map(|&i| (i & 0xff) as u8).collect();
                Ok(complete_utf8(&bytes))
            }
            TextCodec::Stored(t) => {
                let text = t.decode(ids).map_err(RunnerError::Data)?;
                // A byte-level tokenizer decodes a cut character as U+FFFD at the end; hold
                // it back like the bytes case (a later token may complete it).
                let trimmed = text.trim_end_matches('\u{FFFD}');
                let held = text.len() - trimmed.len();
                Ok(Decoded {
                    text: trimmed.to_string(),
                    incomplete_bytes: held / '\u{FFFD}'.len_utf8(),
                })
            }
        }
    }

    /// The end-of-text token that stops generation, if the tokenizer has one.
    pub fn end_of_text(&self) -> Option<u32> {
        match self {
            TextCodec::Bytes => None,
            TextCodec::Stored(t) => Some(t.end_of_document().1),
        }
    }
}

/// The longest prefix of `bytes` that does not end inside a character, as text (bytes that
/// can never start or continue a character become U+FFFD).
fn complete_utf8(bytes: &[u8]) -> Decoded {
    let mut text = String::with_capacity(bytes.len());
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                text.push_str(s);
                return Decoded {
                    text,
                    incomplete_bytes: 0,
                };
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                text.push_str(std::str::from_utf8(good).unwrap_or_default());
                match e.error_len() {
                    Some(n) => {
                        text.push('\u{FFFD}');
                        rest = &bad[n..];
                    }
                    // The input ends inside a character: hold it back.
                    None => {
                        return Decoded {
                            text,
                            incomplete_bytes: bad.len(),
                        };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_token_inside_a_character_is_held_back_until_it_completes() {
        let codec = TextCodec::Bytes;
        let e_acute = "é".as_bytes();
        let half = codec
            .decode(&[u32::from(b'a'), u32::from(e_acute[0])])
            .unwrap();
        assert_eq!(half.text, "a");
        assert_eq!(half.incomplete_bytes, 1);
        let whole = codec
            .decode(&[
                u32::from(b'a'),
                u32::from(e_acute[0]),
                u32::from(e_acute[1]),
            ])
            .unwrap();
        assert_eq!(whole.text, "aé");
        assert_eq!(whole.incomplete_bytes, 0);
        // A byte that is never UTF-8 shows as the replacement character, mid-text.
        let bad = codec.decode(&[0xff, u32::from(b'x')]).unwrap();
        assert_eq!(bad.text, "\u{FFFD}x");
    }

    #[test]
    fn bytes_encode_one_token_per_byte() {
        let (ids, bytes) = TextCodec::Bytes.encode("hé").unwrap();
        assert_eq!(ids, vec![104, 0xc3, 0xa9]);
        assert_eq!(bytes.iter().sum::<u32>(), 3);
    }
}
