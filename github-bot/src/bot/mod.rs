//! [`Bot`]: the bot's logic, turning one parsed webhook event or one lab event into lab actions
//! and comments. Dispatch is in [`crate::bot::handlers`], one file per command.
//!
//! The pieces every handler shares live here: reading the proposal out of an issue (form ->
//! spec -> hash -> cost -> budget), posting or editing the bot's own comments, and the
//! experiment id of an issue. The bot holds no state of its own beyond [`Store`]; the lab holds
//! the proposals. This module does not verify signatures or queue deliveries, nor word any
//! comment ([`render`] does).
//!
//! [`Bot::handle_delivery`] decides what a stored delivery is before anything strict happens:
//! an event or action the bot does not handle, or one from a repository (or App installation)
//! it does not serve, is [`Handled::Ignored`] with the reason, and never reaches the lab.
//!
//! The bot's own comments carry a hidden marker per kind ([`render::comment_marker`]). To edit
//! one, the bot uses the id in its store or, when the store has none (a lost row, a crash
//! after the POST), looks for its marked comment among the issue's comments before posting: a
//! comment is posted at most once per kind, whatever is retried.

pub mod handlers;

use std::sync::Arc;

use glassbox_schemas::record::IssueRef;
use glassbox_schemas::{CostEstimate, ExperimentId, ExperimentSpec, SpecError, SpecHash};

use crate::config::BotConfig;
use crate::error::BotError;
use crate::event::{Envelope, HANDLED_EVENTS, IssueData, WebhookEvent};
use crate::form::{FormProblem, ProposalForm, parse_issue_form};
use crate::github::{GitHub, GitHubError};
use crate::ids::{CommentId, IssueKey};
use crate::labels::EXPERIMENT_LABEL;
use crate::port::{LabEvent, LabPort, Proposal, SweepProposal};
use crate::render;
use crate::store::Store;

/// What the bot did with one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// It acted: asked the lab, commented, or both.
    Acted,
    /// Nothing to do; why (stored with the delivery).
    Ignored(String),
}

/// The bot: config, GitHub client, the lab, and its store. Cheap to clone.
#[derive(Debug)]
pub struct Bot<L> {
    pub(crate) config: Arc<BotConfig>,
    pub(crate) github: GitHub,
    pub(crate) lab: L,
    pub(crate) store: Store,
}

impl<L: Clone> Clone for Bot<L> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            github: self.github.clone(),
            lab: self.lab.clone(),
            store: self.store.clone(),
        }
    }
}

/// What reading an issue's proposal found.
#[derive(Debug, Clone)]
pub enum ProposalCheck {
    /// Valid and within budget.
    Valid {
        /// The proposal, ready for the lab.
        proposal: Box<Proposal>,
        /// Its cost.
        cost: CostEstimate,
    },
    /// The form or the spec has mistakes.
    Invalid {
        /// Problems with the form.
        problems: Vec<FormProblem>,
        /// The spec's errors, if the spec was there to parse.
        spec_error: Option<SpecError>,
    },
    /// A valid sweep (`[sweep]` in the spec), every child within budget.
    Sweep {
        /// The sweep, ready for the lab.
        sweep: Box<SweepProposal>,
        /// Each child's cost, in order.
        costs: Vec<CostEstimate>,
    },
    /// Valid, but over the lab's budget.
    OverBudget {
        /// Its hash.
        hash: SpecHash,
        /// Each limit broken, with the numbers.
        breaches: Vec<BudgetBreach>,
    },
}

pub use crate::config::BudgetBreach;

/// The experiment id of an issue: `<owner>/<repo>#<number>`.
pub fn experiment_id(issue: &IssueKey) -> ExperimentId {
    ExperimentId::issue(&issue.repo.to_string(), issue.number.0)
}

/// Whether the bot handles this issue at all (an experiment issue, not a pull request).
pub fn is_experiment_issue(issue: &IssueData) -> bool {
    !issue.is_pull_request && issue.labels.iter().any(|l| l == EXPERIMENT_LABEL)
}

impl<L: LabPort> Bot<L> {
    /// Assembles a bot.
    pub fn new(config: BotConfig, github: GitHub, lab: L, store: Store) -> Self {
        Self {
            config: Arc::new(config),
            github,
            lab,
            store,
        }
    }

    /// The lab port (for tests and the embedding lab).
    pub fn lab(&self) -> &L {
        &self.lab
    }

    /// The bot's store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Handles one stored delivery: ignores what the bot does not handle or serve (see the
    /// module doc) before parsing the payload strictly, then dispatches the event.
    pub async fn handle_delivery(&self, event: &str, payload: &[u8]) -> Result<Handled, BotError> {
        if !HANDLED_EVENTS.contains(&event) {
            return Ok(Handled::Ignored(format!("event `{event}` is not handled")));
        }
        if event == "ping" {
            return Ok(Handled::Ignored("`ping` needs no action".into()));
        }
        let envelope = Envelope::parse(event, payload)?;
        if let Some(reason) = envelope.unhandled() {
            return Ok(Handled::Ignored(reason));
        }
        if let Err(e) = self
            .config
            .scope(envelope.repository.as_ref(), envelope.installation)
        {
            return Ok(Handled::Ignored(e.to_string()));
        }
        self.handle_event(WebhookEvent::parse(event, payload)?)
            .await
    }

    /// Handles one parsed webhook event (scope-checked again: see [`BotConfig::scope`]).
    pub async fn handle_event(&self, event: WebhookEvent) -> Result<Handled, BotError> {
        crate::bot::handlers::dispatch(self, event).await
    }

    /// Handles one lab event (run started, progress, finished).
    pub async fn handle_lab_event(&self, event: LabEvent) -> Result<(), BotError> {
        crate::bot::handlers::run_events::handle(self, event).await
    }

    /// Reads, validates, hashes, costs and budget-checks the proposal in an issue.
    pub fn check_proposal(&self, issue: &IssueData) -> ProposalCheck {
        let form: ProposalForm = parse_issue_form(&issue.body);
        let problems = form.problems();
        if let Some(text) = form.spec_toml.as_deref()
            && glassbox_schemas::sweep::is_sweep(text)
        {
            return self.check_sweep(issue, text, problems);
        }
        let parsed: Option<Result<ExperimentSpec, SpecError>> =
            form.spec_toml.as_deref().map(glassbox_schemas::parse_toml);
        let (spec, spec_error) = match parsed {
            Some(Ok(spec)) => (Some(spec), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let (Some(spec), true) = (spec, problems.is_empty()) else {
            return ProposalCheck::Invalid {
                problems,
                spec_error,
            };
        };
        let hash = match glassbox_schemas::spec_hash(&spec) {
            Ok(h) => h,
            Err(e) => {
                return ProposalCheck::Invalid {
                    problems,
                    spec_error: Some(SpecError::Invalid(vec![glassbox_schemas::FieldError {
                        path: "(spec)".into(),
                        value: None,
                        rule: e.to_string(),
                    }])),
                };
            }
        };
        let cost = glassbox_schemas::estimate(&spec);
        let breaches = self.budget_breaches(&cost);
        if !breaches.is_empty() {
            return ProposalCheck::OverBudget { hash, breaches };
        }
        let proposal = Proposal {
            experiment: experiment_id(&issue.key),
            issue: IssueRef {
                repo: issue.key.repo.to_string(),
                number: issue.key.number.0,
                url: issue.html_url.clone(),
            },
            author: issue.author.clone(),
            title: issue.title.clone(),
            spec,
            spec_hash: hash,
            hypothesis: form.hypothesis.clone().unwrap_or_default(),
            forecast: form.parsed_forecast(),
            issue_body: issue.body.clone(),
        };
        ProposalCheck::Valid {
            proposal: Box::new(proposal),
            cost,
        }
    }

    /// [`Bot::check_proposal`] for a sweep: the file expands into valid children, and every
    /// child is within the per-proposal budget (the first child over it is reported).
    fn check_sweep(
        &self,
        issue: &IssueData,
        text: &str,
        problems: Vec<FormProblem>,
    ) -> ProposalCheck {
        let sweep = match glassbox_schemas::sweep::parse_sweep_toml(text) {
            Ok(s) => s,
            Err(e) => {
                return ProposalCheck::Invalid {
                    problems,
                    spec_error: Some(e),
                };
            }
        };
        if !problems.is_empty() {
            return ProposalCheck::Invalid {
                problems,
                spec_error: None,
            };
        }
        let costs: Vec<CostEstimate> = sweep
            .children
            .iter()
            .map(|c| glassbox_schemas::estimate(&c.spec))
            .collect();
        if let Some(breaches) = costs
            .iter()
            .map(|c| self.budget_breaches(c))
            .find(|b| !b.is_empty())
        {
            return ProposalCheck::OverBudget {
                hash: sweep.parent_hash,
                breaches,
            };
        }
        ProposalCheck::Sweep {
            sweep: Box::new(SweepProposal {
                experiment: experiment_id(&issue.key),
                issue: IssueRef {
                    repo: issue.key.repo.to_string(),
                    number: issue.key.number.0,
                    url: issue.html_url.clone(),
                },
                author: issue.author.clone(),
                title: issue.title.clone(),
                sweep,
                toml: text.to_string(),
            }),
            costs,
        }
    }

    /// The lab's per-proposal limits this cost breaks, each with the numbers.
    fn budget_breaches(&self, cost: &CostEstimate) -> Vec<BudgetBreach> {
        let b = &self.config.budget;
        let mut out = Vec::new();
        if let Some(max) = b.max_flops
            && cost.total_flops > max
        {
            out.push(BudgetBreach::Flops {
                needed: cost.total_flops,
                limit: max,
            });
        }
        let secs = cost.seconds_at(self.config.flops_per_second);
        if let Some(max) = b.max_wall_seconds
            && secs > max
        {
            out.push(BudgetBreach::WallTime {
                seconds: secs,
                flops_per_second: self.config.flops_per_second,
                limit: max,
            });
        }
        out
    }

    /// Posts a new comment on the issue.
    pub(crate) async fn reply(&self, issue: &IssueKey, body: &str) -> Result<(), BotError> {
        self.github
            .create_comment(&issue.repo, issue.number, body)
            .await?;
        Ok(())
    }

    /// Edits the bot's comment of `kind` on the issue, or posts it if there is none (or it was
    /// deleted). The body gets the kind's marker; the comment is found by the id in the store,
    /// else by that marker among the bot's comments on the issue, and only then posted.
    pub(crate) async fn upsert_comment(
        &self,
        issue: &IssueKey,
        kind: &str,
        body: &str,
    ) -> Result<Option<CommentId>, BotError> {
        let body = render::with_marker(kind, body);
        if let Some(id) = self.store.bot_comment(issue, kind).await? {
            match self.github.update_comment(&issue.repo, id, &body).await {
                Ok(()) => return Ok(Some(id)),
                Err(GitHubError::Status { status, .. })
                    if status == http::StatusCode::NOT_FOUND =>
                {
                    tracing::info!(%issue, kind, "bot comment was deleted; posting a new one");
                }
                Err(e) => return Err(e.into()),
            }
        } else if let Some(found) = self.find_marked_comment(issue, kind).await? {
            if found.body != body {
                self.github
                    .update_comment(&issue.repo, found.id, &body)
                    .await?;
            }
            self.store.set_bot_comment(issue, kind, found.id).await?;
            return Ok(Some(found.id));
        }
        let id = self
            .github
            .create_comment(&issue.repo, issue.number, &body)
            .await?;
        if let Some(id) = id {
            self.store.set_bot_comment(issue, kind, id).await?;
        }
        Ok(id)
    }

    /// The bot's own comment of `kind` on the issue, found by its marker (comments by anyone
    /// else, marker or not, are never taken for the bot's).
    async fn find_marked_comment(
        &self,
        issue: &IssueKey,
        kind: &str,
    ) -> Result<Option<crate::github::IssueComment>, BotError> {
        let marker = render::comment_marker(kind);
        Ok(self
            .github
            .list_comments(&issue.repo, issue.number)
            .await?
            .into_iter()
            .find(|c| c.author == self.config.bot_login && c.body.contains(&marker)))
    }
}
