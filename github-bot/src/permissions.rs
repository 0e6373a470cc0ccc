//! Who may run which command.
//!
//! `/status` and `/help` are open to everyone. Every other command needs a maintainer: a login
//! on the config's allowlist or, when `collaborators_are_maintainers` is set, a collaborator
//! whose permission, asked of the API (`GET /repos/{owner}/{repo}/collaborators/{user}/permission`),
//! is write, maintain or admin. The webhook's `author_association` is not trusted: it misreports
//! private organisation members. A failed lookup denies. An author may not `/approve` their own
//! proposal unless `allow_self_approval` is set. This module decides; it does not comment.

use crate::command::Command;
use crate::config::BotConfig;
use crate::github::GitHub;
use crate::ids::{Login, RepoName};
use crate::render;

/// The decision on one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allowed,
    /// Do not; the text says why and who can.
    Refused(String),
}

/// Decides whether `actor` may run `command` on a proposal filed by `author`.
pub async fn authorize(
    config: &BotConfig,
    github: &GitHub,
    repo: &RepoName,
    actor: &Login,
    command: &Command,
    author: &Login,
) -> Decision {
    if !command.needs_maintainer() {
        return Decision::Allowed;
    }
    let who = render::who_can(
        &config.maintainers,
        config.collaborators_are_maintainers,
        &repo.to_string(),
    );
    let is_maintainer = if config.is_listed_maintainer(actor) {
        true
    } else if config.collaborators_are_maintainers {
        match github.collaborator_permission(repo, actor).await {
            Ok(p) => p.can_write(),
            Err(e) => {
                tracing::warn!(%actor, error = %e, "permission lookup failed; denying");
                return Decision::Refused(format!(
                    "your permission could not be checked with GitHub, so it is denied; {who}."
                ));
            }
        }
    } else {
        false
    };
    if !is_maintainer {
        return Decision::Refused(format!("only maintainers may run it; {who}."));
    }
    if matches!(command, Command::Approve { .. }) && actor == author && !config.allow_self_approval
    {
        return Decision::Refused(
            "authors cannot approve their own proposal; another maintainer must approve it.".into(),
        );
    }
    Decision::Allowed
}
