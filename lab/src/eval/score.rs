//! A snapshot scored on a suite: each multiple-choice item's choices by log-likelihood, each
//! perplexity item's negative log-likelihood, and the suite's metrics.
//!
//! The definitions are lm-eval-harness's (`api/task.py`, `multiple_choice`): a request is the
//! context with one choice after it, the context's trailing whitespace moved onto the choice
//! ([`encode_pair`]); the continuation's tokens are those of `context + continuation` past the
//! context's own tokens; `acc` is whether the choice with the highest summed log-likelihood is
//! the answer, `acc_norm` the same with each sum divided by the choice's length in characters;
//! ties go to the first choice (numpy's `argmax`); each standard error is the sample standard
//! deviation over `sqrt(n)`. A perplexity suite's `bpb` and `nll` pool every item's tokens and
//! bytes. The results are the same for any CPU thread count. Not here: loading the model
//! ([`crate::trained`]) or the suite ([`super::suite`]), or contamination.

use std::collections::BTreeMap;

use glassbox_runner::inference::Continuation;
use glassbox_schemas::eval::{EvalKind, SuiteItem, encode_pair, metric};
use serde::Serialize;

use crate::error::LabError;
use crate::trained::TrainedModel;

/// One item's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemScore {
    /// The item's index in the suite.
    pub item: u64,
    /// Multiple choice: each choice's summed log-likelihood (nats).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logliks: Vec<f64>,
    /// Multiple choice: the choice `acc` picks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pick: Option<u32>,
    /// Multiple choice: the choice `acc_norm` picks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pick_norm: Option<u32>,
    /// Multiple choice: the right choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<u32>,
    /// Perplexity: the text's negative log-likelihood (nats), its tokens predicted and their
    /// bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nll: Option<f64>,
    /// Perplexity: tokens predicted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<u64>,
    /// Perplexity: bytes those tokens stand for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// A suite's scores.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteScore {
    /// The metrics ([`EvalKind::metrics`]).
    pub metrics: BTreeMap<String, f64>,
    /// Each item's outcome, in suite order.
    pub items: Vec<ItemScore>,
}

/// The index of the first largest value (numpy's `argmax`; a NaN never wins).
pub fn first_argmax(values: impl IntoIterator<Item = f64>) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, v) in values.into_iter().enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// Mean and standard error (sample standard deviation over `sqrt(n)`; none below 2 values).
pub fn mean_stderr(xs: &[f64]) -> (f64, Option<f64>) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, None);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, Some(var.sqrt() / n.sqrt()))
}

/// Scores `items` (all of `kind`) with `model` on `threads` CPU threads; `None` when
/// `cancelled` turned true on the way.
pub fn score_items(
    model: &TrainedModel,
    kind: EvalKind,
    items: &[SuiteItem],
    threads: usize,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<Option<SuiteScore>, LabError> {
    match kind {
        EvalKind::MultipleChoice => multiple_choice(model, items, threads, cancelled),
        EvalKind::Perplexity => perplexity(model, items, threads, cancelled),
    }
}

fn multiple_choice(
    model: &TrainedModel,
    items: &[SuiteItem],
    threads: usize,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<Option<SuiteScore>, LabError> {
    let mut requests = Vec::new();
    let mut shape = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let SuiteItem::Choice {
            context,
            choices,
            answer,
        } = item
        else {
            return Err(LabError::Refused(format!(
                "item {i} is not a multiple-choice item"
            )));
        };
        for choice in choices {
            requests.push(request(model, i, context, choice)?);
        }
        shape.push((choices, *answer));
    }
    let Some(logliks) = model.continuation_logliks(threads, &requests, cancelled)? else {
        return Ok(None);
    };
    let mut at = 0;
    let (mut acc, mut acc_norm) = (Vec::new(), Vec::new());
    let mut scores = Vec::with_capacity(items.len());
    for (i, (choices, answer)) in shape.into_iter().enumerate() {
        let ll = &logliks[at..at + choices.len()];
        at += choices.len();
        let pick = first_argmax(ll.iter().copied()) as u32;
        let pick_norm = first_argmax(
            ll.iter()
                .zip(choices)
                .map(|(l, c)| l / c.chars().count() as f64),
        ) as u32;
        acc.push(f64::from(u8::from(pick == answer)));
        acc_norm.push(f64::from(u8::from(pick_norm == answer)));
        scores.push(ItemScore {
            item: i as u64,
            logliks: ll.to_vec(),
            pick: Some(pick),
            pick_norm: Some(pick_norm),
            answer: Some(answer),
            nll: None,
            predicted: None,
            bytes: None,
        });
    }
    let mut metrics = BTreeMap::new();
    for (name, err, xs) in [
        (metric::ACC, metric::ACC_STDERR, &acc),
        (metric::ACC_NORM, metric::ACC_NORM_STDERR, &acc_norm),
    ] {
        let (mean, stderr) = mean_stderr(xs);
        metrics.insert(name.to_string(), mean);
        if let Some(e) = stderr {
            metrics.insert(err.to_string(), e);
        }
    }
    Ok(Some(SuiteScore {
        metrics,
        items: scores,
    }))
}

/// Item `i`'s request for one choice, tokenized as lm-eval-harness does it.
fn request(
    model: &TrainedModel,
    i: usize,
    context: &str,
    choice: &str,
) -> Result<Continuation, LabError> {
    let (context, continuation) = encode_pair(context, choice);
    let (whole, _) = model.codec.encode(&format!("{context}{continuation}"))?;
    let (ctx, _) = model.codec.encode(&context)?;
    let tokens = if ctx.is_empty() {
        // lm-eval's empty context is the end-of-text token.
        let eot = model.codec.end_of_text().ok_or_else(|| {
            LabError::Refused(format!(
                "item {i}: its context is empty once trailing whitespace moves to the choice, and this model has no end-of-text token to stand for it"
            ))
        })?;
        std::iter::once(eot).chain(whole.iter().copied()).collect()
    } else {
        whole.clone()
    };
    let n_ctx = if ctx.is_empty() { 1 } else { ctx.len() };
    let cont = tokens.len().saturating_sub(n_ctx);
    if cont == 0 {
        return Err(LabError::Refused(format!(
            "item {i}: the choice {choice:?} adds no token after the context"
        )));
    }
    let t = model.model.dims.seq_len;
    if cont > t {
        return Err(LabError::Refused(format!(
            "item {i}: the choice {choice:?} is {cont} tokens, longer than the model's context of {t}"
        )));
    }
    Ok(Continuation {
        tokens,
        continuation: cont,
    })
}

fn perplexity(
    model: &TrainedModel,
    items: &[SuiteItem],
    threads: usize,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<Option<SuiteScore>, LabError> {
    let mut texts = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let SuiteItem::Text { text } = item else {
            return Err(LabError::Refused(format!(
                "item {i} is not a perplexity item"
            )));
        };
        texts.push(text.as_str());
    }
    let Some(scores) = model.score_many(threads, &texts, cancelled)? else {
        return Ok(None);
    };
    let (mut nll, mut predicted, mut bytes) = (0.0f64, 0u64, 0u64);
    let mut out = Vec::with_capacity(items.len());
    for (i, s) in scores.iter().enumerate() {
        nll += s.total_nll;
        predicted += s.predicted as u64;
        bytes += s.bytes;
        out.push(ItemScore {
            item: i as u64,
            logliks: Vec::new(),
            pick: None,
            pick_norm: None,
            answer: None,
            nll: Some(s.total_nll),
            predicted: Some(s.predicted as u64),
            bytes: Some(s.bytes),
        });
    }
    let per_token = nll / predicted.max(1) as f64;
    let mut metrics = BTreeMap::new();
    metrics.insert(metric::NLL.to_string(), per_token);
    metrics.insert(metric::PPL.to_string(), per_token.exp());
    if bytes > 0 {
        metrics.insert(
            metric::BPB.to_string(),
            nll / std::f64::consts::LN_2 / bytes as f64,
        );
    }
    Ok(Some(SuiteScore {
        metrics,
        items: out,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_of_equals_and_stderr_is_the_sample_one() {
        assert_eq!(first_argmax([1.0, 3.0, 3.0]), 1);
        assert_eq!(first_argmax([f64::NAN, -1.0]), 1);
        let (m, e) = mean_stderr(&[1.0, 0.0, 1.0, 1.0]);
        assert_eq!(m, 0.75);
        // sample variance 0.25, over sqrt(4)
        assert!((e.unwrap() - 0.25).abs() < 1e-15);
        assert_eq!(mean_stderr(&[1.0]).1, None);
    }
}
