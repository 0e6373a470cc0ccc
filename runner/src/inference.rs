//! What a trained model does with text: how likely it finds a text ([`score`]) and what it
//! writes after a prompt ([`generate`]).
//!
//! Scoring runs the batched forward ([`Model::logits`]) over non-overlapping windows of the
//! model's context: window `w` feeds tokens `wT .. wT+T` and predicts `wT+1 .. wT+T+1`, so each
//! token after the first is predicted once, with at most `T` tokens before it (the context
//! restarts at each window, as in training). Log-probabilities are taken in f64 from the f32
//! logits. Generation feeds the prompt through a [`Decoder`] in one batched forward and then one
//! token at a time.
//! Both are the same for any CPU thread count. Not here: finding a run's snapshot (the lab).

use std::time::Instant;

use serde::Serialize;

use crate::backend::Backend;
use crate::decode::{DecodeWeights, Decoder};
use crate::error::RunnerError;
use crate::model::{BatchIds, Model};
use crate::sampling::{SampleSettings, Sampler};
use crate::shared_context::shared_context_logliks;
use crate::text::TextCodec;

/// Windows scored per forward pass (bounds the logits held at once to `B T V` floats).
const SCORE_BATCH: usize = 8;

/// A text's negative log-likelihood under the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    /// Tokens in the text.
    pub tokens: usize,
    /// Tokens predicted (all but the first).
    pub predicted: usize,
    /// UTF-8 bytes the predicted tokens stand for.
    pub bytes: u64,
    /// Sum of the predicted tokens' negative log-likelihoods, in nats.
    pub total_nll: f64,
    /// `total_nll / predicted`.
    pub nll_per_token: f64,
    /// `total_nll / ln 2 / bytes`.
    pub bits_per_byte: f64,
    /// Each predicted token's id and log-likelihood (nats, `<= 0`), in text order.
    pub per_token: Vec<(u32, f64)>,
}

/// Scores token `ids` whose UTF-8 byte counts are `bytes`.
pub fn score<B: Backend>(
    model: &Model,
    be: &B,
    params: &[B::Buf],
    bias: &[Vec<f64>],
    ids: &[u32],
    bytes: &[u32],
) -> Result<Score, RunnerError> {
    if ids.len() < 2 {
        return Err(RunnerError::Invalid {
            field: "text",
            value: format!("{} token(s)", ids.len()),
            accepted: "at least 2 tokens: the first is context, the rest are scored".into(),
        });
    }
    let (t, v) = (model.dims.seq_len, model.dims.vocab);
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= v) {
        return Err(RunnerError::Invalid {
            field: "token",
            value: bad.to_string(),
            accepted: format!("ids below the model's vocabulary size {v}"),
        });
    }
    let predicted = ids.len() - 1;
    let windows = predicted.div_ceil(t);
    let mut per_token = Vec::with_capacity(predicted);
    for first in (0..windows).step_by(SCORE_BATCH) {
        let rows = (windows - first).min(SCORE_BATCH);
        let mut inputs = vec![0u32; rows * t];
        let mut targets = vec![0u32; rows * t];
        let mut real = vec![false; rows * t];
        for r in 0..rows {
            let start = (first + r) * t;
            for p in 0..t {
                let i = start + p;
                if i + 1 < ids.len() {
                    inputs[r * t + p] = ids[i];
                    targets[r * t + p] = ids[i + 1];
                    real[r * t + p] = true;
                }
            }
        }
        let (tok, tgt) = (be.upload_ids(&inputs), be.upload_ids(&targets));
        let batch = BatchIds {
            tokens: &tok,
            targets: &tgt,
            batch_size: rows,
        };
        let logits = model.logits(be, params, bias, &batch);
        for (n, row) in logits.chunks_exact(v).enumerate() {
            if !real[n] {
                continue;
            }
            let target = targets[n];
            per_token.push((target, log_softmax_at(row, target as usize)));
        }
    }
    let total_nll = -per_token.iter().map(|(_, lp)| lp).sum::<f64>();
    let scored_bytes: u64 = bytes.iter().skip(1).map(|&b| u64::from(b)).sum();
    Ok(Score {
        tokens: ids.len(),
        predicted,
        bytes: scored_bytes,
        total_nll,
        nll_per_token: total_nll / predicted as f64,
        bits_per_byte: if scored_bytes == 0 {
            f64::NAN
        } else {
            total_nll / std::f64::consts::LN_2 / scored_bytes as f64
        },
        per_token,
    })
}

/// One log-likelihood request: `tokens` is the context followed by the continuation, and the
/// last `continuation` of them are scored, each given every token before it (at most the
/// model's context of them: a longer request keeps its last `seq_len + 1` tokens, as
/// lm-eval-harness truncates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// Context then continuation.
    pub tokens: Vec<u32>,
    /// How many of the last tokens are the continuation (at least 1, fewer than `tokens`).
    pub continuation: usize,
}

/// Rows per forward of [`continuation_logliks`].
pub const LOGLIK_BATCH: usize = 32;

/// The log-likelihood (nats, summed in f64 over its tokens) of each request's continuation,
/// in order; `None` when `cancelled` turned true between batches.
///
/// Requests that fit the model's context are grouped by context and each context is run once,
/// its continuations packed after it and attending to it (`shared_context`: a
/// multiple-choice item costs its context and its choices, not its context once per choice).
/// Longer requests (cut to their last `seq_len + 1` tokens, so differently per continuation)
/// are sorted longest first and run [`LOGLIK_BATCH`] at a time through the batched forward,
/// each batch padded at the end to its longest row (the forward is causal, so padding changes
/// nothing before it). Either way a request's result does not depend on what it is batched or
/// packed with: every output is one fixed chain of operations over its own tokens, so the
/// answer is the same for any batching and any CPU thread count.
pub fn continuation_logliks<B: Backend>(
    model: &Model,
    be: &B,
    params: &[B::Buf],
    bias: &[Vec<f64>],
    requests: &[Continuation],
    cancelled: &dyn Fn() -> bool,
) -> Result<Option<Vec<f64>>, RunnerError> {
    let (t_max, v) = (model.dims.seq_len, model.dims.vocab);
    for (i, r) in requests.iter().enumerate() {
        if r.continuation == 0 || r.continuation >= r.tokens.len() {
            return Err(RunnerError::Invalid {
                field: "continuation",
                value: format!(
                    "request {i}: {} of {} tokens",
                    r.continuation,
                    r.tokens.len()
                ),
                accepted: "at least one continuation token after at least one context token".into(),
            });
        }
        if r.continuation > t_max {
            return Err(RunnerError::Invalid {
                field: "continuation",
                value: format!("request {i}: {} tokens", r.continuation),
                accepted: format!("at most the model's context, seq_len = {t_max} tokens"),
            });
        }
        if let Some(&bad) = r.tokens.iter().find(|&&x| x as usize >= v) {
            return Err(RunnerError::Invalid {
                field: "token",
                value: bad.to_string(),
                accepted: format!("ids below the model's vocabulary size {v}"),
            });
        }
    }
    // What each request feeds (its last `seq_len + 1` tokens but the very last) and predicts.
    let window = |r: &Continuation| -> (usize, usize) {
        let keep = r.tokens.len().min(t_max + 1);
        (r.tokens.len() - keep, keep - 1)
    };
    let mut out = vec![0.0f64; requests.len()];
    // Requests within the context share theirs with every other request of the same context
    // (a multiple-choice item's choices): run once, each continuation attending to it.
    let (fits, long): (Vec<usize>, Vec<usize>) =
        (0..requests.len()).partition(|&i| requests[i].tokens.len() <= t_max + 1);
    let shared: Vec<(usize, &[u32], usize)> = fits
        .iter()
        .map(|&i| (i, requests[i].tokens.as_slice(), requests[i].continuation))
        .collect();
    if !shared_context_logliks(
        model,
        be,
        params,
        bias,
        &shared,
        &mut out,
        log_softmax_at,
        cancelled,
    ) {
        return Ok(None);
    }
    let mut order = long;
    order.sort_by_key(|&i| (std::cmp::Reverse(window(&requests[i]).1), i));
    let mut models: Vec<(usize, Model)> = Vec::new();
    for chunk in order.chunks(LOGLIK_BATCH) {
        if cancelled() {
            return Ok(None);
        }
        let t = window(&requests[chunk[0]]).1;
        // The same model over a shorter context: positions 0..t are unchanged.
        let m = match models.iter().position(|(len, _)| *len == t) {
            Some(i) => &models[i].1,
            None => {
                let mut dims = model.dims.clone();
                dims.seq_len = t;
                models.push((t, Model::new(dims)));
                &models[models.len() - 1].1
            }
        };
        let rows = chunk.len();
        let mut inputs = vec![0u32; rows * t];
        for (r, &i) in chunk.iter().enumerate() {
            let (from, len) = window(&requests[i]);
            inputs[r * t..r * t + len].copy_from_slice(&requests[i].tokens[from..from + len]);
        }
        let tok = be.upload_ids(&inputs);
        let batch = BatchIds {
            tokens: &tok,
            targets: &tok,
            batch_size: rows,
        };
        let logits = m.logits(be, params, bias, &batch);
        for (r, &i) in chunk.iter().enumerate() {
            let req = &requests[i];
            let (from, len) = window(req);
            let mut sum = 0.0f64;
            // Position p (0-based in the window) predicts token from + p + 1.
            for p in len - req.continuation..len {
                let row = &logits[(r * t + p) * v..(r * t + p + 1) * v];
                let target = req.tokens[from + p + 1] as usize;
                sum += log_softmax_at(row, target);
            }
            out[i] = sum;
        }
    }
    Ok(Some(out))
}

/// `log softmax(row)[target]` in f64 from f32 logits.
fn log_softmax_at(row: &[f32], target: usize) -> f64 {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let lse = max
        + row
            .iter()
            .map(|&x| (x as f64 - max).exp())
            .sum::<f64>()
            .ln();
    row[target] as f64 - lse
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `max_tokens` were written.
    Length,
    /// The model wrote its end-of-text token (not part of the text).
    EndOfText,
}

/// What a model wrote after a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    /// Prompt tokens fed.
    pub prompt_tokens: usize,
    /// Prompt tokens cut from the front so the prompt and the completion fit the context.
    pub prompt_tokens_dropped: usize,
    /// The prompt as the model saw it (after any cut).
    pub prompt_kept: String,
    /// The completion's token ids.
    pub ids: Vec<u32>,
    /// The completion's text (complete characters only).
    pub text: String,
    /// Bytes of a character the completion left incomplete at its end, not in `text`.
    pub incomplete_bytes: usize,
    /// Why it stopped.
    pub stop: StopReason,
    /// Seconds from the start to the first new token's logits (the prompt's forward).
    pub time_to_first_token: f64,
    /// Seconds for the whole completion.
    pub seconds: f64,
}

/// Token ids a model wrote after a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// The new tokens (without an end-of-text token that stopped them).
    pub ids: Vec<u32>,
    /// Why it stopped.
    pub stop: StopReason,
    /// Seconds the prompt's forward took.
    pub prompt_seconds: f64,
}

/// Feeds `prompt` (at least one token; with `max_tokens`, within the context) in one batched
/// forward and writes up to `max_tokens` tokens, stopping early at `end_of_text`.
#[allow(clippy::too_many_arguments)]
pub fn generate_ids<B: Backend>(
    model: &Model,
    be: &B,
    weights: &DecodeWeights<'_, B>,
    bias: &[Vec<f64>],
    prompt: &[u32],
    max_tokens: usize,
    sampler: &mut Sampler,
    end_of_text: Option<u32>,
) -> Result<Generated, RunnerError> {
    let started = Instant::now();
    let mut decoder = Decoder::new(model, be, weights, bias);
    let mut logits = decoder.feed_all(prompt)?;
    let prompt_seconds = started.elapsed().as_secs_f64();
    let mut ids = Vec::with_capacity(max_tokens);
    let mut stop = StopReason::Length;
    for n in 0..max_tokens {
        let next = sampler.pick(&logits);
        if Some(next) == end_of_text {
            stop = StopReason::EndOfText;
            break;
        }
        ids.push(next);
        if n + 1 < max_tokens {
            logits = decoder.feed(next)?;
        }
    }
    Ok(Generated {
        ids,
        stop,
        prompt_seconds,
    })
}

/// Writes up to `max_tokens` tokens after `prompt`. A prompt that does not fit the context
/// with `max_tokens` after it keeps its last tokens (the cut is reported).
#[allow(clippy::too_many_arguments)]
pub fn generate<B: Backend>(
    model: &Model,
    be: &B,
    weights: &DecodeWeights<'_, B>,
    bias: &[Vec<f64>],
    codec: &TextCodec,
    prompt: &str,
    max_tokens: usize,
    settings: SampleSettings,
) -> Result<Completion, RunnerError> {
    let started = Instant::now();
    let mut sampler = Sampler::new(settings)?;
    let t = model.dims.seq_len;
    if max_tokens == 0 || max_tokens >= t {
        return Err(RunnerError::Invalid {
            field: "max_tokens",
            value: max_tokens.to_string(),
            accepted: format!(
                "between 1 and {} (the context is {t} tokens and the prompt needs at least one)",
                t - 1
            ),
        });
    }
    let (mut ids, _) = codec.encode(prompt)?;
    if ids.is_empty() {
        return Err(RunnerError::Invalid {
            field: "prompt",
            value: format!("{prompt:?}"),
            accepted: "a prompt of at least one token".into(),
        });
    }
    let room = t - max_tokens;
    let dropped = ids.len().saturating_sub(room);
    ids.drain(..dropped);
    let prompt_kept = codec.decode(&ids)?.text;
    let generated = generate_ids(
        model,
        be,
        weights,
        bias,
        &ids,
        max_tokens,
        &mut sampler,
        codec.end_of_text(),
    )?;
    let time_to_first_token = generated.prompt_seconds;
    let (out, stop) = (generated.ids, generated.stop);
    let decoded = codec.decode(&out)?;
    Ok(Completion {
        prompt_tokens: ids.len(),
        prompt_tokens_dropped: dropped,
        prompt_kept,
        ids: out,
        text: decoded.text,
        incomplete_bytes: decoded.incomplete_bytes,
        stop,
        time_to_first_token,
        seconds: started.elapsed().as_secs_f64(),
    })
}
