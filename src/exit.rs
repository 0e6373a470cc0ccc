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

use std::process::ExitCode;

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
