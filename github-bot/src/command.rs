//! Slash commands in comments: `/approve [blake3:<hex>]`, `/reject <reason>`, `/hold`,
//! `/unhold`, `/cancel`, `/rerun`, `/reproduce`, `/status`, `/help`.
//!
//! `/approve blake3:<hex>` pins the spec the maintainer reviewed: the full hash or a prefix of
//! at least [`MIN_PIN_HEX`] hex digits ([`HashPin`]); any other argument is
//! [`ParsedCommand::Malformed`], never a bare approval.
//!
//! A command is a line that starts with `/` and a word (leading spaces up to three are allowed,
//! as Markdown allows for a paragraph). Lines inside fenced code blocks, indented code (four
//! spaces or a tab) and block quotes (`>`) are not commands, so quoting someone's `/approve`
//! never approves. A word that is not a command becomes [`ParsedCommand::Unknown`] with the
//! nearest known name. This module only reads text; what a command does is in `handlers/`.

use std::fmt;

use glassbox_schemas::SpecHash;
use glassbox_schemas::hash::HASH_PREFIX;

/// Fewest hex digits a `/approve` pin may have: 48 bits, so a pin names one spec.
pub const MIN_PIN_HEX: usize = 12;

/// The spec hash (or a prefix of it) a maintainer pinned with `/approve blake3:<hex>`: lowercase
/// hex, [`MIN_PIN_HEX`] to 64 digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HashPin(String);

impl HashPin {
    /// Reads `blake3:<hex>` or `<hex>` (case-insensitive); the error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let hex_part = text.strip_prefix(HASH_PREFIX).unwrap_or(text);
        let shown: String = text.chars().take(80).collect();
        if !(MIN_PIN_HEX..=64).contains(&hex_part.len())
            || !hex_part.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(format!(
                "`{shown}` is not a spec hash; `/approve` takes nothing, or `{HASH_PREFIX}` followed by the spec's 64 hex digits or a prefix of at least {MIN_PIN_HEX}"
            ));
        }
        Ok(Self(hex_part.to_ascii_lowercase()))
    }

    /// Whether `hash` is the pinned one (starts with the pinned digits).
    pub fn matches(&self, hash: &SpecHash) -> bool {
        hash.0.to_hex().starts_with(&self.0)
    }
}

impl fmt::Display for HashPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{HASH_PREFIX}{}", self.0)
    }
}

/// A recognised command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Command {
    /// Approve the proposal's current spec hash and queue it; with a pin, only if the current
    /// hash is the pinned one.
    Approve {
        /// `/approve blake3:<hex>`: the spec the maintainer reviewed.
        pin: Option<HashPin>,
    },
    /// Reject the proposal, with a reason.
    Reject {
        /// Why (may be empty; the handler asks for one).
        reason: String,
    },
    /// Keep an approved proposal from being scheduled.
    Hold,
    /// Release a hold.
    Unhold,
    /// Cancel a queued or running job.
    Cancel,
    /// Queue the same spec again.
    Rerun,
    /// Re-run from the ledger and compare with the recorded result.
    Reproduce,
    /// Report the proposal's state and queue position.
    Status,
    /// List the commands.
    Help,
}

/// Every command name, in the order `/help` lists them.
pub const COMMAND_NAMES: [&str; 9] = [
    "approve",
    "reject",
    "hold",
    "unhold",
    "cancel",
    "rerun",
    "reproduce",
    "status",
    "help",
];

impl Command {
    /// The name without the slash.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Approve { .. } => "approve",
            Command::Reject { .. } => "reject",
            Command::Hold => "hold",
            Command::Unhold => "unhold",
            Command::Cancel => "cancel",
            Command::Rerun => "rerun",
            Command::Reproduce => "reproduce",
            Command::Status => "status",
            Command::Help => "help",
        }
    }

    /// Whether only maintainers may run it (`/status` and `/help` are open to everyone).
    pub fn needs_maintainer(&self) -> bool {
        !matches!(self, Command::Status | Command::Help)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Reject { reason } if !reason.is_empty() => write!(f, "/reject {reason}"),
            Command::Approve { pin: Some(pin) } => write!(f, "/approve {pin}"),
            c => write!(f, "/{}", c.name()),
        }
    }
}

/// One command line found in a comment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ParsedCommand {
    /// A known command.
    Known(Command),
    /// `/<word>` that is not a command.
    Unknown {
        /// The word as written, without the slash.
        word: String,
        /// The nearest command name.
        nearest: &'static str,
    },
    /// A known command with an argument it does not take.
    Malformed {
        /// The command name.
        name: &'static str,
        /// What is wrong and what is accepted.
        problem: String,
    },
}

impl ParsedCommand {
    /// The command as one canonical line (`/approve`, `/reject too big`, `/aprove`): with the
    /// comment id, what makes a command act once however often its comment is delivered.
    pub fn line(&self) -> String {
        match self {
            ParsedCommand::Known(c) => c.to_string(),
            ParsedCommand::Unknown { word, .. } => format!("/{word}"),
            ParsedCommand::Malformed { name, problem } => format!("/{name} ({problem})"),
        }
    }
}

/// The nearest command name to `word` (Levenshtein distance, ties in list order).
pub fn nearest_command(word: &str) -> &'static str {
    let lower = word.to_ascii_lowercase();
    COMMAND_NAMES
        .iter()
        .min_by_key(|name| strsim::levenshtein(&lower, name))
        .copied()
        .unwrap_or("help")
}

/// Finds every command line in `text`, in order.
pub fn parse_commands(text: &str) -> Vec<ParsedCommand> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for raw in text.split('\n') {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = line.trim_start_matches(' ');
        // Fences: three or more backticks or tildes; closed by at least as many of the same.
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        if indent < 4
            && let Some(c) = marker
        {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                match fence {
                    None => fence = Some((c, run)),
                    Some((open, n)) if open == c && run >= n => fence = None,
                    Some(_) => {}
                }
                continue;
            }
        }
        if fence.is_some() || indent >= 4 || line.starts_with('\t') {
            continue;
        }
        let Some(rest) = trimmed.strip_prefix('/') else {
            continue;
        };
        let word_len = rest
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let (word, args) = rest.split_at(word_len);
        // `/usr/bin` or `/` alone are not commands; a command word is followed by a space or
        // the end of the line.
        if word.is_empty()
            || !word.starts_with(|c: char| c.is_ascii_alphabetic())
            || !(args.is_empty() || args.starts_with(char::is_whitespace))
        {
            continue;
        }
        let args = args.trim();
        let command = match word.to_ascii_lowercase().as_str() {
            "approve" if args.is_empty() => Command::Approve { pin: None },
            "approve" => match HashPin::parse(args) {
                Ok(pin) => Command::Approve { pin: Some(pin) },
                Err(problem) => {
                    out.push(ParsedCommand::Malformed {
                        name: "approve",
                        problem,
                    });
                    continue;
                }
            },
            "reject" => Command::Reject {
                reason: args.to_string(),
            },
            "hold" => Command::Hold,
            "unhold" => Command::Unhold,
            "cancel" => Command::Cancel,
            "rerun" => Command::Rerun,
            "reproduce" => Command::Reproduce,
            "status" => Command::Status,
            "help" => Command::Help,
            _ => {
                out.push(ParsedCommand::Unknown {
                    word: word.chars().take(40).collect(),
                    nearest: nearest_command(word),
                });
                continue;
            }
        };
        out.push(ParsedCommand::Known(command));
    }
    out
}

/// The commands of an edited comment that were not in its previous text: each line counts as
/// new only as many times as it appears beyond its count in `before`.
pub fn new_commands(before: &str, after: &str) -> Vec<ParsedCommand> {
    let mut old = parse_commands(before);
    let mut out = Vec::new();
    for c in parse_commands(after) {
        if let Some(i) = old.iter().position(|o| *o == c) {
            old.remove(i);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(text: &str) -> Vec<Command> {
        parse_commands(text)
            .into_iter()
            .filter_map(|c| match c {
                ParsedCommand::Known(c) => Some(c),
                ParsedCommand::Unknown { .. } | ParsedCommand::Malformed { .. } => None,
            })
            .collect()
    }

    #[test]
    fn approve_takes_an_optional_hash_pin() {
        let hash: SpecHash = format!("blake3:{}", "ab12".repeat(16)).parse().unwrap();
        let full = format!("/approve {hash}");
        match parse_commands(&full).as_slice() {
            [ParsedCommand::Known(Command::Approve { pin: Some(pin) })] => {
                assert!(pin.matches(&hash))
            }
            other => panic!("{full}: {other:?}"),
        }
        for prefix in ["/approve blake3:AB12ab12ab12", "/approve ab12ab12ab12ab"] {
            match parse_commands(prefix).as_slice() {
                [ParsedCommand::Known(Command::Approve { pin: Some(p) })] => {
                    assert!(p.matches(&hash), "{prefix}")
                }
                other => panic!("{prefix}: {other:?}"),
            }
        }
        let other: SpecHash = format!("blake3:{}", "cd34".repeat(16)).parse().unwrap();
        assert!(!HashPin::parse("ab12ab12ab12").unwrap().matches(&other));
        for bad in [
            "/approve ab12ab12ab1",
            "/approve blake3:xyz123456789",
            "/approve please",
        ] {
            match parse_commands(bad).as_slice() {
                [
                    ParsedCommand::Malformed {
                        name: "approve",
                        problem,
                    },
                ] => {
                    assert!(problem.contains("at least 12"), "{problem}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(
            known("/approve"),
            vec![Command::Approve { pin: None }],
            "the bare form stays"
        );
    }

    #[test]
    fn one_per_line_at_line_start() {
        let text = "LGTM\r\n/approve\nplease /hold this\n/reject too big  \n  /status";
        assert_eq!(
            known(text),
            vec![
                Command::Approve { pin: None },
                Command::Reject {
                    reason: "too big".into()
                },
                Command::Status
            ]
        );
    }

    #[test]
    fn code_blocks_quotes_and_paths_are_ignored() {
        let text = "```\n/approve\n```\n> /approve\n    /approve\n~~~~\n/cancel\n~~~~\n/usr/bin/env\n/\n/approve!";
        assert!(
            parse_commands(text).is_empty(),
            "{:?}",
            parse_commands(text)
        );
    }

    #[test]
    fn unknown_commands_get_the_nearest() {
        assert_eq!(
            parse_commands("/aprove"),
            vec![ParsedCommand::Unknown {
                word: "aprove".into(),
                nearest: "approve"
            }]
        );
        assert_eq!(nearest_command("unhld"), "unhold");
        assert_eq!(nearest_command("REPRODUCEE"), "reproduce");
    }

    #[test]
    fn edits_run_only_new_commands() {
        let got = new_commands("/status", "/status\n/approve");
        assert_eq!(
            got,
            vec![ParsedCommand::Known(Command::Approve { pin: None })]
        );
        assert!(new_commands("/approve", "/approve\nthanks").is_empty());
        assert_eq!(new_commands("/status", "/status\n/status").len(), 1);
    }
}
