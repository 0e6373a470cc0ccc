//! Lone UTF-16 surrogate escapes in a webhook body, made readable. JSON text may spell a
//! string's characters as `\uXXXX` escapes, and a character outside the Basic Multilingual
//! Plane as a pair of them (a high surrogate `\uD800`-`\uDBFF` then a low one
//! `\uDC00`-`\uDFFF`). An escape of half a pair stands for no character at all: serde_json
//! refuses the whole document over it, so one such escape anywhere in a payload — in a field
//! the bot never reads — would fail the delivery. Each lone half becomes `\uFFFD` (the
//! replacement character), as a UTF-8 decoder does with a broken sequence; pairs and every
//! other byte stay as they are.
//!
//! Not a JSON parser: it relies only on a backslash in valid JSON starting an escape inside a
//! string, and leaves everything else to serde_json.

use std::borrow::Cow;

/// `body` with every lone surrogate escape replaced by `\uFFFD`; borrowed when it has none.
pub fn without_lone_surrogates(body: &[u8]) -> Cow<'_, [u8]> {
    if !has_surrogate_escape(body) {
        return Cow::Borrowed(body);
    }
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] != b'\\' || i + 1 >= body.len() {
            out.push(body[i]);
            i += 1;
            continue;
        }
        if body[i + 1] != b'u' {
            // Any other escape is two bytes (`\"`, `\\`, `\n`, ...): copied as is, so an
            // escaped backslash never starts a `\u` here.
            out.extend_from_slice(&body[i..i + 2]);
            i += 2;
            continue;
        }
        match unit_at(body, i) {
            Some(0xD800..=0xDBFF) => {
                if matches!(unit_at(body, i + 6), Some(0xDC00..=0xDFFF)) {
                    out.extend_from_slice(&body[i..i + 12]);
                    i += 12;
                } else {
                    out.extend_from_slice(br"\uFFFD");
                    i += 6;
                }
            }
            Some(0xDC00..=0xDFFF) => {
                out.extend_from_slice(br"\uFFFD");
                i += 6;
            }
            Some(_) => {
                out.extend_from_slice(&body[i..i + 6]);
                i += 6;
            }
            // A malformed escape: serde_json will say what is wrong with it.
            None => {
                out.extend_from_slice(&body[i..i + 2]);
                i += 2;
            }
        }
    }
    Cow::Owned(out)
}

/// Whether `body` holds `\uD8`-`\uDF` in either case (a surrogate escape, maybe a pair).
fn has_surrogate_escape(body: &[u8]) -> bool {
    body.windows(4).any(|w| {
        w[0] == b'\\'
            && w[1] == b'u'
            && (w[2] | 0x20) == b'd'
            && matches!(w[3] | 0x20, b'8' | b'9' | b'a'..=b'f')
    })
}

/// The code unit of the `\uXXXX` escape starting at `at`, if there is one.
fn unit_at(body: &[u8], at: usize) -> Option<u16> {
    let esc = body.get(at..at + 6)?;
    if esc[0] != b'\\' || esc[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&esc[2..]).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(s: &str) -> String {
        String::from_utf8(without_lone_surrogates(s.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn lone_halves_become_the_replacement_character_and_pairs_stay() {
        assert_eq!(fixed(r#"{"a":"x\ud800y"}"#), r#"{"a":"x\uFFFDy"}"#);
        assert_eq!(fixed(r#"{"a":"\uDC00"}"#), r#"{"a":"\uFFFD"}"#);
        assert_eq!(fixed(r#"{"a":"\ud83d\ude42"}"#), r#"{"a":"\ud83d\ude42"}"#);
        assert_eq!(fixed(r#"{"a":"\ud83d\u0041"}"#), r#"{"a":"\uFFFD\u0041"}"#);
        // An escaped backslash followed by text that looks like an escape is text.
        assert_eq!(fixed(r#"{"a":"\\ud800"}"#), r#"{"a":"\\ud800"}"#);
        assert_eq!(fixed(r#"{"a":"\ud800"#), r#"{"a":"\uFFFD"#);
        assert!(matches!(
            without_lone_surrogates(br#"{"a":"plain \u00e9"}"#),
            Cow::Borrowed(_)
        ));
        let v: serde_json::Value = serde_json::from_slice(&without_lone_surrogates(
            br#"{"a":"x\ud800","b":"\ud83d\ude42"}"#,
        ))
        .unwrap();
        assert_eq!(v["a"], "x\u{fffd}");
        assert_eq!(v["b"], "🙂");
    }
}
