//! The values a spec may hold at all, checked on the TOML before anything else reads it:
//! every number finite, and every string text that displays as it reads.
//!
//! - TOML has `nan`, `inf` and `-inf`. JSON has no such numbers: converted, they become `null`,
//!   which reads as "not given", so `budget.max_wall_seconds = nan` would pass as a spec with
//!   no wall-clock budget and hash the same as one without the key. Each is refused, naming
//!   the field.
//! - Spec text is shown to people (issue comments, the dashboard, the terminal). A control
//!   character (NUL, escape sequences, C1 controls) or a bidirectional formatting character
//!   (the "Trojan Source" overrides and isolates) can make it display differently from what it
//!   says, so each is refused, naming the field and the character. Tabs and line breaks are
//!   text.
//!
//! Not here: ranges, types and cross-field rules (`crate::validate`'s schema and meaning passes).

use crate::spec_error::FieldError;

/// Every non-finite number and every string holding a character [`refused_char`] names, by
/// path in key order, as field errors with TOML-style paths (`data.mixture[0].weight`).
pub fn check(table: &toml::Table) -> Vec<FieldError> {
    let mut out = Vec::new();
    for (key, value) in table {
        walk(key, value, &mut out);
    }
    out
}

fn walk(path: &str, value: &toml::Value, out: &mut Vec<FieldError>) {
    match value {
        toml::Value::Float(f) if !f.is_finite() => out.push(FieldError {
            path: path.to_string(),
            value: Some(
                if f.is_nan() {
                    "nan"
                } else if *f > 0.0 {
                    "inf"
                } else {
                    "-inf"
                }
                .into(),
            ),
            rule: "must be a finite number (TOML's nan and inf are not accepted)".into(),
        }),
        toml::Value::String(s) => {
            if let Some((at, c, what)) = s
                .chars()
                .enumerate()
                .find_map(|(i, c)| refused_char(c).map(|what| (i, c, what)))
            {
                out.push(FieldError {
                    path: path.to_string(),
                    value: Some(escaped(s)),
                    rule: format!(
                        "character {} is U+{:04X} ({what}), which can make text display differently from what it says; remove it",
                        at + 1,
                        c as u32
                    ),
                });
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(&format!("{path}[{i}]"), item, out);
            }
        }
        toml::Value::Table(t) => {
            for (key, item) in t {
                walk(&format!("{path}.{key}"), item, out);
            }
        }
        _ => {}
    }
}

/// What kind of character `c` is, when a spec's text may not hold it.
pub fn refused_char(c: char) -> Option<&'static str> {
    match c {
        '\n' | '\r' | '\t' => None,
        '\u{061C}' | '\u{200E}' | '\u{200F}' => Some("a bidirectional mark"),
        '\u{202A}'..='\u{202E}' => Some("a bidirectional embedding or override"),
        '\u{2066}'..='\u{2069}' => Some("a bidirectional isolate"),
        c if c.is_control() => Some("a control character"),
        _ => None,
    }
}

/// The string as a quoted literal with every refused character escaped, cut to 60 characters,
/// so the error message shows where the character is without carrying it.
fn escaped(s: &str) -> String {
    let mut out = String::from("\"");
    for (n, c) in s.chars().enumerate() {
        if n >= 56 {
            out.push_str("...");
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if refused_char(c).is_some() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        check(&toml::from_str(text).unwrap())
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn non_finite_numbers_are_named_by_field() {
        let e = errors(
            "[budget]\nmax_wall_seconds = nan\nmax_flops = inf\n[[data.mixture]]\nweight = -inf\n",
        );
        assert_eq!(
            e,
            [
                "budget.max_flops = inf: must be a finite number (TOML's nan and inf are not accepted)",
                "budget.max_wall_seconds = nan: must be a finite number (TOML's nan and inf are not accepted)",
                "data.mixture[0].weight = -inf: must be a finite number (TOML's nan and inf are not accepted)",
            ]
        );
        assert!(errors("[train]\nlr = 3e-4\nsteps = 10\n").is_empty());
    }

    #[test]
    fn control_and_bidi_characters_are_refused_with_the_character_named() {
        let e = errors(
            "[experiment]\nname = \"a\\u0000b\"\ntags = [\"ok\", \"x\\u202Ey\"]\nhypothesis = \"line one\\nline\\ttwo\"\n",
        );
        assert_eq!(
            e,
            [
                "experiment.name = \"a\\u0000b\": character 2 is U+0000 (a control character), which can make text display differently from what it says; remove it",
                "experiment.tags[1] = \"x\\u202Ey\": character 2 is U+202E (a bidirectional embedding or override), which can make text display differently from what it says; remove it",
            ]
        );
        for c in ['\u{1b}', '\u{7f}', '\u{85}', '\u{2067}', '\u{200f}'] {
            assert!(refused_char(c).is_some(), "{c:?}");
        }
        for c in ['é', '日', '🙂', '\u{200d}', ' '] {
            assert!(refused_char(c).is_none(), "{c:?}");
        }
    }
}
