//! The rules a proposal and an approval are held to: the lab's limits on a spec, the daily
//! proposal quota per author, and corpora the lab has not declared.
//!
//! Not here: the limits themselves (`crate::limits`, `crate::config`).

use crate::db::proposals::{self};
use crate::error::LabError;
use glassbox_schemas::{BlobHash, ExperimentId, ExperimentSpec};

use super::*;

/// 24 hours in milliseconds (the per-author proposal window).
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

impl Flow {
    /// What in `spec` is over the lab's limits (FLOPs, wall clock, memory, metric volume) or
    /// names corpora no `dataset` entry declares: listed in the bot's validation comment when
    /// the proposal is recorded, and refused at approval ([`Flow::check_limits`]).
    pub async fn spec_limit_problems(
        &self,
        spec: &ExperimentSpec,
    ) -> Result<Vec<String>, LabError> {
        let limits = &self.inner.config.limits;
        let cost = glassbox_schemas::estimate(spec);
        let mut problems = Vec::new();
        if cost.total_flops > limits.max_flops_per_proposal {
            problems.push(format!(
                "it needs about {:.3e} FLOPs; the lab's limit per proposal is {:.3e} (limits.max_flops_per_proposal)",
                cost.total_flops, limits.max_flops_per_proposal
            ));
        }
        if let Some(w) = spec.budget.max_wall_seconds
            && w > limits.max_wall_seconds as f64
        {
            problems.push(format!(
                "budget.max_wall_seconds = {w} is over the lab's limit of {} (limits.max_wall_seconds)",
                limits.max_wall_seconds
            ));
        }
        problems.extend(crate::limits::spec_problems(limits, spec));
        problems.extend(self.undeclared_corpora(spec).await?);
        Ok(problems)
    }

    /// The lab's budget and quota rules for approving `spec` by `author`: the spec's own
    /// limits ([`Flow::spec_limit_problems`]) and the author's open jobs.
    pub(super) async fn check_limits(
        &self,
        spec: &ExperimentSpec,
        author: &str,
        local: bool,
    ) -> Result<(), LabError> {
        let limits = &self.inner.config.limits;
        let mut problems = self.spec_limit_problems(spec).await?;
        if !local {
            let open = self.inner.queue.open_jobs_of(author).await?;
            if open >= limits.max_open_per_author {
                problems.push(format!(
                    "{author} already has {open} approved runs waiting or running; the limit is {} (limits.max_open_per_author)",
                    limits.max_open_per_author
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(LabError::Refused(problems.join("; ")))
        }
    }

    /// The lab's rules for recording a proposal at all: a forecast must name a
    /// metric the spec's run reports, and an author may cause at most
    /// `limits.max_proposals_per_author_per_day` proposal entries from GitHub in 24 hours.
    pub(super) async fn check_proposal(&self, p: &NewProposal) -> Result<(), LabError> {
        let forecasts = p.forecast.iter().chain(p.spec.forecast.iter());
        let problems: Vec<String> = forecasts
            .filter_map(|f| glassbox_schemas::metrics::forecast_metric_problem(&p.spec, &f.metric))
            .collect();
        if !problems.is_empty() {
            return Err(LabError::Refused(problems.join("; ")));
        }
        if p.issue.is_none() {
            return Ok(());
        }
        self.check_daily_proposals(&p.author).await
    }

    /// Refuses when `author` already caused `limits.max_proposals_per_author_per_day` proposal
    /// entries in the last 24 hours.
    pub(crate) async fn check_daily_proposals(&self, author: &str) -> Result<(), LabError> {
        let max = self.inner.config.limits.max_proposals_per_author_per_day;
        let since = self.now() - DAY_MS;
        let n = proposals::entries_since(self.pool(), author, since).await?;
        if n >= u64::from(max) {
            return Err(LabError::Refused(format!(
                "{author} has made {n} proposals in the last 24 hours; the limit is {max} (limits.max_proposals_per_author_per_day); try again later"
            )));
        }
        Ok(())
    }

    /// Counts a proposal entry against its author's daily limit.
    pub(crate) async fn count_proposal_entry(
        &self,
        author: &str,
        experiment: &ExperimentId,
        entry: u64,
    ) -> Result<(), LabError> {
        proposals::count_entry(self.pool(), author, experiment, entry, self.now()).await
    }

    /// Every corpus of the mixture must be one a `dataset` entry declares (a checkpoint or any
    /// other blob is not a corpus); one problem per component that names another blob. A
    /// stored tokenizer must be declared too, with the spec's `model.vocab` as its size.
    pub(super) async fn undeclared_corpora(
        &self,
        spec: &ExperimentSpec,
    ) -> Result<Vec<String>, LabError> {
        let named: Vec<(usize, BlobHash)> = spec
            .data
            .mixture
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.corpus.map(|h| (i, h)))
            .collect();
        if named.is_empty() && spec.data.tokenizer.stored().is_none() {
            return Ok(Vec::new());
        }
        let spec = spec.clone();
        self.blocking(move |rec| {
            // A stored tokenizer must be in the lab, and `model.vocab` must be its size.
            let mut out: Vec<String> = crate::tokens::vocab_problem(rec, &spec)?
                .into_iter()
                .collect();
            for (i, hash) in named {
                if rec.dataset_entry(&hash)?.is_none() {
                    out.push(format!(
                        "data.mixture[{i}].corpus = {hash}: no `dataset` entry of this lab declares it; only corpora added with `glassbox data import` or `glassbox data generate` can be trained on"
                    ));
                }
            }
            Ok(out)
        })
        .await
    }
}
