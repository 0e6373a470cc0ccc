//! The end-to-end suites: each drives the real `glassbox` binary (and, where a suite says so,
//! PostgreSQL, moto's S3 server, Chromium or a second process) as a user or an attacker would.
//! One test binary for all of them, so CI links one executable instead of one per suite.

mod support;

mod bot_cli;
mod cli_spec;
mod data_cli;
mod data_tokens;
mod disk_full;
mod eval_cli;
mod hostile;
mod ladder_reproduce;
mod ledger_cli;
mod model_text;
mod multi_machine;
mod observatory_cli;
mod quickstart;
mod research;
mod run_record;
mod run_resume;
mod webhook_load;
mod witness;
mod worker_e2e;
