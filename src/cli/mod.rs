//! One module per subcommand group. Each exposes a clap type and a `run` function that returns
//! the process exit code; operational errors bubble up as `anyhow::Error` and exit 3.

pub mod args;
pub mod board;
pub mod bot;
pub mod data;
pub mod eval;
pub mod jobs;
pub mod ladder;
pub mod ledger;
pub mod model;
pub mod publish;
pub mod quickstart;
pub mod reproduce;
pub mod run;
pub mod serve;
pub mod spec;
pub mod verify;
pub mod witness;
pub mod worker;
