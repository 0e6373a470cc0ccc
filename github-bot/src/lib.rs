//! glassbox-github-bot: the open lab's GitHub front door. It turns GitHub events into lab
//! actions and lab events into comments; it knows nothing of training, queues or the ledger.
//!
//! - [`server::webhook_router`] — `POST /github/webhook` (axum): body cap (413), HMAC-SHA256
//!   signature against one or more secrets ([`signature`], 401), `X-GitHub-Delivery`
//!   de-duplication, and a durable queue ([`store`], SQLite) written before the 2xx;
//! - [`worker::Worker`] — drains the queue through [`Bot`], retrying transient failures;
//! - [`event::WebhookEvent`] — the closed set of events the bot acts on;
//! - [`form`] — the rendered experiment issue form to hypothesis, forecast and spec TOML;
//! - [`command`] — slash commands in comments; [`permissions`] — who may run them;
//! - [`bot::handlers`] — one file per command, plus the proposal (validation comment) and
//!   run-event (result comment) handlers; [`render`] — the text of every comment;
//! - [`port::LabPort`] — the trait the lab implements (record proposal, approve bound to a spec
//!   hash, reject, hold, cancel, rerun, reproduce, status, quota); [`port::InMemoryLab`] for tests;
//! - [`github::GitHub`] — octocrab with the bot's retry and rate-limit policy;
//! - [`config::BotConfig`] — the TOML section the lab config embeds, with the repositories the
//!   bot serves ([`config::BotConfig::scope`]); [`secret::Secret`] — values that never print;
//! - [`local`] — a local stand-in for GitHub's REST routes and webhook payloads, for
//!   `glassbox quickstart` without a network.
//!
//! The key design choice: acknowledge fast, process later. The webhook handler only verifies,
//! stores and answers; everything that talks to GitHub or the lab happens in the worker, so a
//! slow GitHub never makes a delivery time out and a crash never loses one.

pub mod bot;
pub mod command;
pub mod config;
pub mod config_file;
pub mod error;
pub mod event;
pub mod form;
pub mod github;
pub mod ids;
pub mod json_escapes;
pub mod labels;
pub mod local;
pub mod permissions;
pub mod port;
pub mod render;
pub mod secret;
pub mod server;
pub mod signature;
pub mod store;
pub mod worker;

pub use bot::{Bot, Handled};
pub use config::BotConfig;
pub use error::BotError;
pub use event::WebhookEvent;
pub use github::GitHub;
pub use ids::{CommentId, DeliveryId, InstallationId, IssueKey, IssueNumber, Login, RepoName};
pub use port::{InMemoryLab, LabEvent, LabPort};
pub use secret::Secret;
pub use server::{Intake, WEBHOOK_PATH, WebhookSettings, start_intake, webhook_router};
pub use store::Store;
pub use worker::Worker;
