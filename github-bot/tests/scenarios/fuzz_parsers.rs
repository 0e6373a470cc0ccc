//! Property tests (proptest) for the two parsers that read untrusted text: the issue-form body
//! parser and the command parser. Arbitrary input must never panic, and structure-aware inputs
//! (headings, fences, quotes, CRLF, multi-byte characters) must keep their invariants.

use glassbox_github_bot::command::{ParsedCommand, new_commands, parse_commands};
use glassbox_github_bot::event::WebhookEvent;
use glassbox_github_bot::form::{parse_forecast, parse_issue_form, render_issue_form};
use glassbox_schemas::issue_form::{FORECAST, HYPOTHESIS, PUBLICATION, SPEC};
use proptest::prelude::*;

/// Lines that stress the parsers: form headings, fences, quotes, commands, odd whitespace.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(format!("### {HYPOTHESIS}")),
        Just(format!("### {FORECAST}")),
        Just(format!("### {SPEC}")),
        Just(format!("### {PUBLICATION}")),
        Just("```toml".to_string()),
        Just("```".to_string()),
        Just("~~~".to_string()),
        Just("_No response_".to_string()),
        Just("- [X] ".to_string()),
        Just("> /approve".to_string()),
        Just("/approve".to_string()),
        Just("/reject é😀 reason".to_string()),
        Just("    /cancel".to_string()),
        Just("/".to_string()),
        Just("\r".to_string()),
        "[ -~]{0,40}",
        "\\PC{0,20}",
    ]
}

fn document() -> impl Strategy<Value = String> {
    (prop::collection::vec(line(), 0..40), prop::bool::ANY)
        .prop_map(|(lines, crlf)| lines.join(if crlf { "\r\n" } else { "\n" }))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn form_parser_never_panics_on_any_string(s in "\\PC*") {
        let form = parse_issue_form(&s);
        let _ = form.problems();
        let _ = parse_forecast(&s);
    }

    #[test]
    fn form_parser_never_panics_on_structured_bodies(s in document()) {
        let form = parse_issue_form(&s);
        // Whatever it finds is trimmed text, never the `_No response_` placeholder.
        for v in [&form.hypothesis, &form.forecast].into_iter().flatten() {
            prop_assert_ne!(v.as_str(), "_No response_");
            prop_assert_eq!(v.trim(), v.as_str());
        }
    }

    #[test]
    fn rendered_forms_round_trip(h in "[a-zA-Z][a-zA-Z .,]{0,60}[a-z.]", spec in "[a-z_]{1,10} = [0-9]{1,5}", crlf in prop::bool::ANY) {
        let mut body = render_issue_form(&h, None, &spec, true);
        if crlf { body = body.replace('\n', "\r\n"); }
        let form = parse_issue_form(&body);
        prop_assert_eq!(form.hypothesis.as_deref(), Some(h.trim()));
        let expected = format!("{spec}\n");
        prop_assert_eq!(form.spec_toml.as_deref(), Some(expected.as_str()));
        prop_assert!(form.publication_consent);
    }

    #[test]
    fn command_parser_never_panics_on_any_string(s in "\\PC*", t in "\\PC*") {
        let _ = parse_commands(&s);
        let _ = new_commands(&s, &t);
    }

    #[test]
    fn command_parser_never_panics_on_structured_comments(s in document()) {
        for c in parse_commands(&s) {
            if let ParsedCommand::Unknown { word, .. } = c {
                prop_assert!(!word.is_empty());
            }
        }
        // An edit that changes nothing runs nothing.
        prop_assert!(new_commands(&s, &s).is_empty());
    }

    #[test]
    fn event_parser_never_panics(event in prop_oneof![Just("issues"), Just("issue_comment"), Just("ping"), Just("x")], body in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = WebhookEvent::parse(event, &body);
    }
}
