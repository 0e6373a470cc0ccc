//! Counting the documents of JSON Lines text on every core, for `data import`, which must read
//! every line (a line that is not JSON is refused there, by line) but keeps no text.
//!
//! A stretch of whole lines is cut at line ends into pieces of about [`PIECE_BYTES`], read in
//! parallel. Each piece is checked as UTF-8 once and goes through one serde_json stream
//! deserializer; of a line it keeps only the text field's value as written (borrowed: nothing
//! is copied or allocated per line), and works out its decoded length from its escapes. This
//! quick path takes only what is plainly right: one object per line, no key with escapes, the
//! text field a string without surrogate escapes. A piece holding anything else is read again
//! by the exact line-by-line reader of [`crate::documents`], which decides and, for a bad line,
//! names it. So the two paths never disagree: the quick one accepts only lines the exact one
//! accepts, with the same counts (the tests run both over the same inputs), and only the exact
//! one writes errors.
//!
//! Not here: handing documents' text to a visitor (tokenizing reads line by line, in order).

use std::cell::RefCell;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Bytes of whole lines per parallel piece: small enough to keep both cores busy beside the
/// hashing of the same bytes, large enough that the per-piece set-up is noise.
pub(crate) const PIECE_BYTES: usize = 1 << 20;

/// Longest blank run (spaces, tabs, line ends) between two values the quick path takes: with
/// it, a line the quick path accepts is never over the exact reader's line limit.
const MAX_BLANK: usize = 64 << 10;

/// What a piece of lines held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PieceCounts {
    /// Non-empty documents.
    pub documents: u64,
    /// UTF-8 bytes of their text.
    pub text_bytes: u64,
    /// Line ends in the piece.
    pub newlines: u64,
}

/// Cuts `lines` (whole lines: it ends with `\n`) into pieces of about `piece` bytes, each
/// ending at a line end.
pub(crate) fn pieces(lines: &[u8], piece: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(lines.len() / piece.max(1) + 1);
    let mut rest = lines;
    while rest.len() > piece {
        let cut = match memchr::memchr(b'\n', &rest[piece..]) {
            Some(i) => piece + i + 1,
            None => rest.len(),
        };
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// Counts a piece of whole JSONL lines whose text is in `field`; `None` when the piece holds
/// anything the quick path does not take, and the exact reader must decide.
pub(crate) fn quick_count(piece: &[u8], field: &str, max_document: usize) -> Option<PieceCounts> {
    let mut counts = PieceCounts::default();
    // UTF-8 checked once for the piece, so the parser need not check each string it reads.
    let text = std::str::from_utf8(piece).ok()?;
    FIELD.with_borrow_mut(|f| {
        f.clear();
        f.push_str(field);
    });
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<LineShape<'_>>();
    let mut at = 0usize;
    loop {
        // The blank run before the next value: it must hold a line end (one value per line),
        // except before the piece's first value, which starts a line.
        let mut blank = 0;
        let mut line_ends = 0;
        for &b in &piece[at..] {
            match b {
                b'\n' => line_ends += 1,
                b' ' | b'\t' | b'\r' => {}
                _ => break,
            }
            blank += 1;
        }
        counts.newlines += line_ends;
        let start = at + blank;
        if blank > MAX_BLANK {
            return None;
        }
        if start == piece.len() {
            break;
        }
        if at != 0 && line_ends == 0 {
            return None;
        }
        let shape = stream.next()?.ok()?;
        let end = stream.byte_offset();
        if end - start > max_document || shape.odd {
            return None;
        }
        let Some(Value::Str(literal)) = shape.text else {
            return None;
        };
        match decoded_len(literal)? {
            0 => {}
            n if n <= max_document => {
                counts.documents += 1;
                counts.text_bytes += n as u64;
            }
            _ => return None,
        }
        at = end;
    }
    // Every line end was in a blank run, so no value spans two lines.
    (memchr::memchr_iter(b'\n', piece).count() as u64 == counts.newlines).then_some(counts)
}

/// A value as the quick path keeps it.
#[derive(Debug, Clone, Copy)]
enum Value<'de> {
    /// A string, as it is written in the line (quotes and escapes included).
    Str(&'de str),
    /// Anything else.
    Other,
}

thread_local! {
    /// The text field the quick path looks for on this thread. [`quick_count`] sets it for its
    /// piece and [`LineShape`]'s visitor reads it: serde_json's stream deserializer (the one
    /// way to read many values with one scratch buffer and know where each ended) takes a
    /// type, not a seed, so this is how the field's name reaches the visitor.
    static FIELD: RefCell<String> = const { RefCell::new(String::new()) };
}

/// One line's object as the quick path sees it: the text field's value as written, if the
/// line has it; `odd` when the line is something the quick path leaves to the exact reader.
struct LineShape<'de> {
    text: Option<Value<'de>>,
    odd: bool,
}

impl<'de> serde::Deserialize<'de> for LineShape<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

const ODD: LineShape<'static> = LineShape {
    text: None,
    odd: true,
};

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = LineShape<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        FIELD.with_borrow(|field| {
            let mut shape = LineShape {
                text: None,
                odd: false,
            };
            while let Some(key) = map.next_key::<Key<'de>>()? {
                match key.0 {
                    Some(k) if k == field.as_str() && shape.text.is_none() => {
                        let raw = map.next_value::<&'de RawValue>()?.get();
                        shape.text = Some(if raw.starts_with('"') {
                            Value::Str(raw)
                        } else {
                            Value::Other
                        });
                    }
                    Some(_) => {
                        map.next_value::<IgnoredAny>()?;
                    }
                    None => {
                        // An escaped key might decode to the field's name.
                        shape.odd = true;
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(shape)
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(ODD)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ODD)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ODD)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ODD)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ODD)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ODD)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(ODD)
    }
}

/// A key borrowed from the input; `None` for one with escapes (decoded into scratch space).
struct Key<'de>(Option<&'de str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Some(s)))
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Key(None))
            }
        }
        d.deserialize_str(V)
    }
}

/// The length in bytes of what a JSON string literal decodes to, from the literal as written
/// (quotes included) after serde_json has checked it: each two-character escape is one byte,
/// each `\uXXXX` the UTF-8 length of its code point. `None` for a literal with a UTF-16
/// surrogate escape, whose pairing serde_json checks only when it decodes the string: the
/// exact reader decides those.
fn decoded_len(literal: &str) -> Option<usize> {
    let body = literal.as_bytes().get(1..literal.len().checked_sub(1)?)?;
    let mut len = body.len();
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'\\', &body[at..]) {
        let escape = at + i;
        if body.get(escape + 1) == Some(&b'u') {
            let hex = std::str::from_utf8(body.get(escape + 2..escape + 6)?).ok()?;
            let unit = u32::from_str_radix(hex, 16).ok()?;
            if (0xD800..0xE000).contains(&unit) {
                return None;
            }
            len = len - 6 + char::from_u32(unit)?.len_utf8();
            at = escape + 6;
        } else {
            len -= 1;
            at = escape + 2;
        }
    }
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoded_lengths_are_what_serde_json_decodes() {
        for s in [
            "",
            "plain",
            "h\u{e9}llo",
            "only \"short\" escapes\n\t\r\u{8}\u{c}",
            "a\nb\t\"q\"\\/",
            "\u{0}\u{7f}\u{80}\u{7ff}\u{800}\u{ffff}",
            "\u{1F600}",
        ] {
            let escaped = serde_json::to_string(s).unwrap();
            assert_eq!(decoded_len(&escaped), Some(s.len()), "{escaped}");
            let ascii: String = s
                .chars()
                .map(|c| {
                    if c.is_ascii() {
                        c.to_string()
                    } else {
                        format!("\\u{:04x}", c as u32)
                    }
                })
                .collect::<String>();
            if s.chars().all(|c| (c as u32) < 0x10000) {
                let literal = serde_json::to_string(&ascii)
                    .unwrap()
                    .replace("\\\\u", "\\u");
                let decoded: String = serde_json::from_str(&literal).unwrap();
                assert_eq!(decoded_len(&literal), Some(decoded.len()), "{literal}");
            }
        }
        assert_eq!(
            decoded_len("\"\\ud83d\\ude00\""),
            None,
            "surrogates go to the exact reader"
        );
    }

    #[test]
    fn pieces_end_at_line_ends_and_cover_the_input() {
        let lines = b"aaaa\nbb\ncccccc\nd\n";
        for size in [1, 3, 5, 100] {
            let p = pieces(lines, size);
            assert_eq!(p.concat(), lines, "size {size}");
            assert!(p.iter().all(|x| x.ends_with(b"\n")), "size {size}: {p:?}");
        }
        assert_eq!(pieces(lines, 5).len(), 3);
    }

    #[test]
    fn the_quick_path_counts_plain_lines_and_leaves_the_rest() {
        let ok = "{\"id\":1,\"text\":\"h\\u00e9llo\\n\"}\n\n  {\"text\":\"\"}\r\n{\"text\":\"ab\",\"text\":7}\n";
        assert_eq!(
            quick_count(ok.as_bytes(), "text", 1 << 20),
            Some(PieceCounts {
                documents: 2,
                text_bytes: 7 + 2,
                newlines: 4
            })
        );
        for odd in [
            "{\"text\":\"a\"}{\"text\":\"b\"}\n",
            "{\"text\":\n\"a\"}\n",
            "{\"te\\u0078t\":\"a\"}\n",
            "{\"text\":1}\n",
            "{\"body\":\"a\"}\n",
            "[1]\n",
            "not json\n",
            "{\"text\":\"a\"} x\n",
            "\u{c}\n",
        ] {
            assert_eq!(
                quick_count(odd.as_bytes(), "text", 1 << 20),
                None,
                "{odd:?}"
            );
        }
        assert_eq!(quick_count(b"{\"text\":\"abcd\"}\n", "text", 3), None);
    }
}
