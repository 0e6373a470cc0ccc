//! The built-in suites: items drawn from a spec's Markov source with a known answer, so a lab
//! has evaluations to show with nothing downloaded and no licence to check.
//!
//! A perplexity item is a stretch of the source. A multiple-choice item is a stretch of the
//! source as the context and four continuations of [`CHOICE_SYMBOLS`] symbols: the answer is
//! the continuation the source makes most likely (its most probable successor at every step,
//! which, every context sharing one probability vector, is the most probable path of that
//! length), and the three others are drawn from the source itself, each with a lower
//! probability. A model that has learnt the source picks the answer; one that has not, a
//! quarter of the time. Every draw comes from the seed: the same arguments give the same bytes.
//! Not here: storing a suite (`super::suite`).

use glassbox_runner::data::markov::MarkovSource;
use glassbox_runner::rng::{SplitMix64, derive};
use glassbox_schemas::eval::{EvalKind, SuiteItem};
use glassbox_schemas::spec::GeneratorSpec;

use crate::error::LabError;

/// Symbols in a multiple-choice context.
pub const CONTEXT_SYMBOLS: usize = 24;
/// Symbols in each continuation.
pub const CHOICE_SYMBOLS: usize = 6;
/// Choices per item.
pub const CHOICES: usize = 4;
/// Symbols in a perplexity item.
pub const TEXT_SYMBOLS: usize = 96;
/// Stream key of suite draws, apart from every training and held-out stream.
const SUITE: u64 = 0x5355_4954; // "SUIT"

/// `items` items of `kind` from the Markov source `g`, drawn from `seed`.
pub fn markov_items(
    g: &GeneratorSpec,
    kind: EvalKind,
    items: usize,
    seed: u64,
) -> Result<Vec<SuiteItem>, LabError> {
    if g.alphabet > 128 {
        return Err(LabError::Refused(format!(
            "the source's alphabet is {} symbols; a suite's text must be UTF-8, so at most 128 (ASCII) symbols",
            g.alphabet
        )));
    }
    let min_branching = if kind == EvalKind::MultipleChoice {
        2
    } else {
        1
    };
    if g.branching.min(g.alphabet) < min_branching {
        return Err(LabError::Refused(
            "the source has one successor per context: every continuation is the answer; use branching >= 2".into(),
        ));
    }
    let m = MarkovSource::new(g);
    let text = |bytes: &[u8]| bytes.iter().map(|&b| char::from(b)).collect::<String>();
    (0..items as u64)
        .map(|i| {
            let mut rng = SplitMix64::new(derive(&[seed, SUITE, i]));
            Ok(match kind {
                EvalKind::Perplexity => SuiteItem::Text {
                    text: text(&m.sample(rng.next_u64(), TEXT_SYMBOLS)),
                },
                EvalKind::MultipleChoice => {
                    let context = m.sample(rng.next_u64(), CONTEXT_SYMBOLS);
                    let best = continuation(&m, &context, |_| 0);
                    let mut choices = vec![best.clone()];
                    while choices.len() < CHOICES {
                        let c = continuation(&m, &context, |_| draw(&m, &mut rng));
                        if !choices.contains(&c) {
                            choices.push(c);
                        }
                    }
                    let answer = rng.below(CHOICES as u64) as usize;
                    choices.swap(0, answer);
                    SuiteItem::Choice {
                        context: text(&context),
                        choices: choices.iter().map(|c| text(c)).collect(),
                        answer: answer as u32,
                    }
                }
            })
        })
        .collect()
}

/// A successor index drawn with the source's probabilities.
fn draw(m: &MarkovSource, rng: &mut SplitMix64) -> usize {
    let u = rng.next_f64();
    let mut acc = 0.0;
    for (j, p) in m.probabilities().iter().enumerate() {
        acc += p;
        if u < acc {
            return j;
        }
    }
    m.probabilities().len() - 1
}

/// [`CHOICE_SYMBOLS`] symbols after `context`, the successor at each step the `pick`-th.
fn continuation(m: &MarkovSource, context: &[u8], mut pick: impl FnMut(usize) -> usize) -> Vec<u8> {
    let o = m.order();
    let mut seq = context.to_vec();
    for step in 0..CHOICE_SYMBOLS {
        let j = pick(step);
        let s = m.successor(&seq[seq.len() - o..], j);
        seq.push(s);
    }
    seq[context.len()..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use glassbox_schemas::spec::GeneratorKind;

    fn source() -> GeneratorSpec {
        GeneratorSpec {
            kind: GeneratorKind::Markov,
            seed: 7,
            order: 1,
            alphabet: 32,
            branching: 4,
        }
    }

    #[test]
    fn the_answer_is_the_most_likely_continuation_and_the_draws_repeat() {
        let items = markov_items(&source(), EvalKind::MultipleChoice, 50, 3).unwrap();
        assert_eq!(
            items,
            markov_items(&source(), EvalKind::MultipleChoice, 50, 3).unwrap()
        );
        let m = MarkovSource::new(&source());
        let logp = |ctx: &str, cont: &str| -> f64 {
            let mut seq: Vec<u8> = ctx.bytes().collect();
            let mut lp = 0.0;
            for b in cont.bytes() {
                let dist = m.next_distribution(&seq[seq.len() - 1..]);
                lp += dist
                    .iter()
                    .find(|(s, _)| *s == b)
                    .map(|(_, p)| p.ln())
                    .unwrap_or(f64::NEG_INFINITY);
                seq.push(b);
            }
            lp
        };
        let mut answers = [0usize; CHOICES];
        for item in &items {
            let SuiteItem::Choice {
                context,
                choices,
                answer,
            } = item
            else {
                panic!("not a choice item");
            };
            let a = *answer as usize;
            answers[a] += 1;
            for (j, c) in choices.iter().enumerate() {
                if j != a {
                    assert!(logp(context, c) < logp(context, &choices[a]), "{item:?}");
                    assert!(
                        logp(context, c).is_finite(),
                        "a distractor the source can make"
                    );
                }
            }
        }
        assert!(
            answers.iter().all(|&n| n > 0),
            "answers spread: {answers:?}"
        );
    }
}
