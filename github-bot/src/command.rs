//! Slash commands in comments: `/approve [blake3:<hex>]`, `/reject <reason>`, `/hold`,
//! `/unhold`, `/cancel`, `/rerun`, `/reproduce`, `/status`, `/help`, and
//! `/note [run-<n>] step <n>|steps <a>-<b>: <text>` ([`NoteCommand`]).
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

use glassbox_schemas::eval::SuiteName;
use glassbox_schemas::hash::HASH_PREFIX;
use glassbox_schemas::record::MAX_NOTE_CHARS;
use glassbox_schemas::{RunId, SpecHash};

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

/// `/note [run-<n>] step <n>|steps <a>-<b>: <text>`: a note on steps of a run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NoteCommand {
    /// The run, when named; the lab picks the issue's only run otherwise.
    pub run: Option<RunId>,
    /// First step (1-based).
    pub from_step: u64,
    /// Last step (equal to `from_step` for one step).
    pub to_step: u64,
    /// The note, trimmed, at most [`MAX_NOTE_CHARS`] characters.
    pub text: String,
}

/// Largest step a note may name (the spec's own bound on `train.steps`).
pub const MAX_NOTE_STEP: u64 = 100_000_000;

impl NoteCommand {
    /// Reads the arguments of `/note`; the error says what is accepted.
    pub fn parse(args: &str) -> Result<Self, String> {
        const USAGE: &str = "write `/note [run-000042] step 500: what you saw` or `/note [run-000042] steps 480-520: what you saw`";
        let mut rest = args.trim_start();
        let mut run = None;
        if let Some(after) = rest.strip_prefix("run-") {
            let digits = after.chars().take_while(char::is_ascii_digit).count();
            let next = after[digits..].chars().next();
            if digits == 0 || digits > 18 || !next.is_none_or(char::is_whitespace) {
                let shown: String = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(40)
                    .collect();
                return Err(format!("`{shown}` is not a run id (run-<digits>); {USAGE}"));
            }
            run = Some(RunId(format!("run-{}", &after[..digits])));
            rest = after[digits..].trim_start();
        }
        let (word, after) = rest.split_at(rest.find(char::is_whitespace).unwrap_or(rest.len()));
        let range = after.trim_start();
        let end = range
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(range.len());
        let (numbers, text) = range.split_at(end);
        let number = |t: &str| -> Result<u64, String> {
            t.parse::<u64>()
                .ok()
                .filter(|n| (1..=MAX_NOTE_STEP).contains(n))
                .ok_or_else(|| {
                    let shown: String = t.chars().take(24).collect();
                    format!("`{shown}` is not a step; steps are whole numbers from 1 to {MAX_NOTE_STEP}; {USAGE}")
                })
        };
        let (from_step, to_step) = match word.to_ascii_lowercase().as_str() {
            "step" => {
                let n = number(numbers)?;
                (n, n)
            }
            "steps" => {
                let Some((a, b)) = numbers.split_once('-') else {
                    return Err(format!("`steps` takes a range such as `480-520`; {USAGE}"));
                };
                let (a, b) = (number(a)?, number(b)?);
                if a > b {
                    return Err(format!("the range {a}-{b} ends before it starts; {USAGE}"));
                }
                (a, b)
            }
            _ => return Err(format!("a note names its step or steps first; {USAGE}")),
        };
        let text = text.trim_start();
        let text = text.strip_prefix(':').unwrap_or(text).trim();
        if text.is_empty() {
            return Err(format!("the note says nothing; {USAGE}"));
        }
        let chars = text.chars().count();
        if chars > MAX_NOTE_CHARS {
            return Err(format!(
                "the note is {chars} characters; the most is {MAX_NOTE_CHARS} (link to details instead)"
            ));
        }
        Ok(Self {
            run,
            from_step,
            to_step,
            text: text.to_string(),
        })
    }
}

impl fmt::Display for NoteCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("/note ")?;
        if let Some(r) = &self.run {
            write!(f, "{r} ")?;
        }
        if self.from_step == self.to_step {
            write!(f, "step {}: {}", self.from_step, self.text)
        } else {
            write!(
                f,
                "steps {}-{}: {}",
                self.from_step, self.to_step, self.text
            )
        }
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
    /// Evaluate the finished run's snapshots on a suite (its newest version).
    Evaluate {
        /// The suite's name.
        suite: SuiteName,
    },
    /// Report the proposal's state and queue position.
    Status,
    /// List the commands.
    Help,
    /// Annotate steps of a run (anyone; a maintainer's note is marked as such).
    Note(NoteCommand),
}

/// Every command name, in the order `/help` lists them.
pub const COMMAND_NAMES: [&str; 11] = [
    "approve",
    "reject",
    "hold",
    "unhold",
    "cancel",
    "rerun",
    "reproduce",
    "evaluate",
    "status",
    "note",
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
            Command::Evaluate { .. } => "evaluate",
            Command::Status => "status",
            Command::Help => "help",
            Command::Note(_) => "note",
        }
    }

    /// Whether only maintainers may run it (`/status`, `/note` and `/help` are open to
    /// everyone).
    pub fn needs_maintainer(&self) -> bool {
        !matches!(self, Command::Status | Command::Help | Command::Note(_))
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Reject { reason } if !reason.is_empty() => write!(f, "/reject {reason}"),
            Command::Approve { pin: Some(pin) } => write!(f, "/approve {pin}"),
            Command::Evaluate { suite } => write!(f, "/evaluate {suite}"),
            Command::Note(n) => n.fmt(f),
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
            "evaluate" => match args.parse::<SuiteName>() {
                Ok(suite) => Command::Evaluate { suite },
                Err(problem) => {
                    out.push(ParsedCommand::Malformed {
                        name: "evaluate",
                        problem: format!(
                            "{problem}; write /evaluate SUITE with a suite stored by `glassbox data eval-suite import`"
                        ),
                    });
                    continue;
                }
            },
            "status" => Command::Status,
            "help" => Command::Help,
            "note" => match NoteCommand::parse(args) {
                Ok(n) => Command::Note(n),
                Err(problem) => {
                    out.push(ParsedCommand::Malformed {
                        name: "note",
                        problem,
                    });
                    continue;
                }
            },
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
    fn evaluate_takes_one_suite_name() {
        assert_eq!(
            known("/evaluate markov-choice"),
            vec![Command::Evaluate {
                suite: "markov-choice".parse().unwrap()
            }]
        );
        for bad in ["/evaluate", "/evaluate Two Words", "/evaluate <b>x</b>"] {
            match parse_commands(bad).as_slice() {
                [
                    ParsedCommand::Malformed {
                        name: "evaluate",
                        problem,
                    },
                ] => {
                    assert!(problem.contains("/evaluate SUITE"), "{problem}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
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
    fn notes_name_a_step_or_a_range_and_maybe_a_run() {
        let note = |t: &str| match parse_commands(t).as_slice() {
            [ParsedCommand::Known(Command::Note(n))] => Ok(n.clone()),
            [
                ParsedCommand::Malformed {
                    name: "note",
                    problem,
                },
            ] => Err(problem.clone()),
            other => panic!("{t}: {other:?}"),
        };
        let n = note("/note run-000042 steps 480-520: norm spike from router_bias").unwrap();
        assert_eq!(n.run, Some(RunId("run-000042".into())));
        assert_eq!((n.from_step, n.to_step), (480, 520));
        assert_eq!(n.text, "norm spike from router_bias");
        assert_eq!(
            n.to_string(),
            "/note run-000042 steps 480-520: norm spike from router_bias"
        );
        let n = note("/note step 7 loss <b>up</b>").unwrap();
        assert_eq!((n.run, n.from_step, n.to_step), (None, 7, 7));
        assert_eq!(
            n.text, "loss <b>up</b>",
            "text is kept as written (escaped on output)"
        );
        for (bad, says) in [
            ("/note", "names its step"),
            ("/note steps 9-3: x", "ends before it starts"),
            ("/note step 0: x", "not a step"),
            ("/note step 5:", "says nothing"),
            ("/note run-abc step 5: x", "not a run id"),
            ("/note steps 5: x", "takes a range"),
            ("/note step 99999999999999999999: x", "not a step"),
        ] {
            let problem = note(bad).unwrap_err();
            assert!(problem.contains(says), "{bad}: {problem}");
        }
        let long = format!("/note step 1: {}", "x".repeat(MAX_NOTE_CHARS + 1));
        assert!(note(&long).unwrap_err().contains("the most is"));
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
