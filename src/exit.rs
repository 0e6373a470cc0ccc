//! Exit codes of the `glassbox` binary, in one place so scripts can rely on them.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (a spec is valid, a run succeeded, a ledger verified) |
//! | 1 | the thing checked is bad: invalid spec, failed verification, differing reproduction |
//! | 2 | usage error: unknown flag, missing argument (clap's own code) |
//! | 3 | operational error: I/O, database, network, a missing lab |
//! | 10 | run ended `diverged` |
//! | 11 | run ended `budget_exceeded` |
//! | 12 | run ended `cancelled` |
//! | 13 | run ended `failed` |
//!
//! Also here: [`message`], the one line an error is printed as, and [`of_error`], the code an
//! error ends the program with.

use std::process::ExitCode;

use glassbox_lab::LabError;
use glassbox_runner::RunnerError;

/// Success.
pub const OK: u8 = 0;
/// The input or the audited object is bad.
pub const CHECK_FAILED: u8 = 1;
/// An operation could not be carried out.
pub const OPERATIONAL: u8 = 3;
/// Run outcome: diverged.
pub const DIVERGED: u8 = 10;
/// Run outcome: budget exceeded.
pub const BUDGET_EXCEEDED: u8 = 11;
/// Run outcome: cancelled.
pub const CANCELLED: u8 = 12;
/// Run outcome: failed.
pub const FAILED: u8 = 13;

/// What a subcommand returns: an exit code after it has printed its own output.
pub fn code(c: u8) -> ExitCode {
    ExitCode::from(c)
}

/// The exit code of a command that failed with `err`: 1 when the lab refused what was asked
/// (a limit, a quota, a state that does not allow it) or the data given is bad — the input is
/// what needs changing; 3 for everything else (I/O, a database, the network).
pub fn of_error(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<LabError>())
        .map_or(OPERATIONAL, |e| match e {
            LabError::Refused(_) | LabError::Data(_) => CHECK_FAILED,
            LabError::Runner(
                RunnerError::Invalid { .. }
                | RunnerError::Unsupported { .. }
                | RunnerError::Data(_),
            ) => CHECK_FAILED,
            _ => OPERATIONAL,
        })
}

/// An error and its causes on one line, `outer: cause: root cause`, never a backtrace. A cause
/// whose text the line already holds is not repeated: many errors spell their source into
/// their own message (`cannot write x: No space left on device (os error 28)`) and also
/// report it as their source, which would print it twice.
pub fn message(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that spells its source into its message and also reports it as its source.
    #[derive(Debug)]
    struct Spelled(std::io::Error);

    impl std::fmt::Display for Spelled {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot write the tile: {}", self.0)
        }
    }

    impl std::error::Error for Spelled {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let io = std::io::Error::from_raw_os_error(28);
        let err = anyhow::Error::new(Spelled(io)).context("ledger: run-000009");
        let line = message(&err);
        assert_eq!(line.matches("os error 28").count(), 1, "{line}");
        assert!(
            line.starts_with("ledger: run-000009: cannot write the tile: "),
            "{line}"
        );
        let plain = anyhow::anyhow!("root").context("middle").context("top");
        assert_eq!(message(&plain), "top: middle: root");
    }

    #[test]
    fn a_refusal_is_the_input_and_anything_else_operational() {
        let refused = anyhow::Error::from(LabError::Refused("over the daily limit".into()));
        assert_eq!(of_error(&refused), CHECK_FAILED);
        assert_eq!(of_error(&refused.context("queueing")), CHECK_FAILED);
        let task = anyhow::Error::from(LabError::Task("joined".into()));
        assert_eq!(of_error(&task), OPERATIONAL);
        assert_eq!(of_error(&anyhow::anyhow!("disk full")), OPERATIONAL);
    }
}
