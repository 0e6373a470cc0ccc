//! Who may run which command.
//!
//! `/status`, `/note` and `/help` are open to everyone (a note is marked a maintainer's when
//! [`is_maintainer`] says so, and a community note otherwise, a failed lookup included). Every other command needs a maintainer: a login
//! on the config's allowlist or, when `collaborators_are_maintainers` is set, a collaborator
//! whose permission, asked of the API (`GET /repos/{owner}/{repo}/collaborators/{user}/permission`),
//! is write, maintain or admin. The webhook's `author_association` is not trusted: it misreports
//! private organisation members. A failed lookup denies. An author may not `/approve` their own
//! proposal unless `allow_self_approval` is set. This module decides; it does not comment:
//! [`crate::render::refused`] words a [`Refusal`].

use crate::command::Command;
use crate::config::BotConfig;
use crate::github::GitHub;
use crate::ids::{Login, RepoName};

/// The decision on one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allowed,
    /// Do not; why.
    Refused(Refusal),
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The actor is not a maintainer; the refusal says who is.
    NotMaintainer(Maintainers),
    /// GitHub could not say whether the actor may write to the repository, so it is denied.
    PermissionUnchecked(Maintainers),
    /// The actor filed the proposal they tried to approve, and self-approval is off.
    SelfApproval,
}

/// Who may run maintainer commands on one repository, as a refusal tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Maintainers {
    /// The config's allowlist.
    pub listed: Vec<Login>,
    /// Whether collaborators with write, maintain or admin permission count as maintainers.
    pub collaborators: bool,
    /// The repository the command was given on.
    pub repo: RepoName,
}

/// Whether `actor` is a maintainer of `repo` (listed, or a collaborator with write access when
/// the config says so); `None` when GitHub could not say. `/note` asks this to mark a note,
/// never to refuse one.
pub async fn is_maintainer(
    config: &BotConfig,
    github: &GitHub,
    repo: &RepoName,
    actor: &Login,
) -> Option<bool> {
    if config.is_listed_maintainer(actor) {
        return Some(true);
    }
    if !config.collaborators_are_maintainers {
        return Some(false);
    }
    match github.collaborator_permission(repo, actor).await {
        Ok(p) => Some(p.can_write()),
        Err(e) => {
            tracing::warn!(%actor, error = %e, "permission lookup failed");
            None
        }
    }
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
    let who = || Maintainers {
        listed: config.maintainers.clone(),
        collaborators: config.collaborators_are_maintainers,
        repo: repo.clone(),
    };
    let is_maintainer = if config.is_listed_maintainer(actor) {
        true
    } else if config.collaborators_are_maintainers {
        match github.collaborator_permission(repo, actor).await {
            Ok(p) => p.can_write(),
            Err(e) => {
                tracing::warn!(%actor, error = %e, "permission lookup failed; denying");
                return Decision::Refused(Refusal::PermissionUnchecked(who()));
            }
        }
    } else {
        false
    };
    if !is_maintainer {
        return Decision::Refused(Refusal::NotMaintainer(who()));
    }
    if matches!(command, Command::Approve { .. }) && actor == author && !config.allow_self_approval
    {
        return Decision::Refused(Refusal::SelfApproval);
    }
    Decision::Allowed
}
