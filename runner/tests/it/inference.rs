//! Scoring and decoding against the batched forward: the key/value-cache decoder gives, at
//! every position, the logits of a full forward over the same prefix (and so the same greedy
//! token), bitwise the same for any thread count, however the tokens are batched and in either
//! weight layout; `score` is the log-softmax of those logits,
//! and so is each continuation's log-likelihood when continuations share their context;
//! the `bytes` tokenizer's `tokenizer.json` maps every byte to its own id and back; and the
//! Hugging Face conversion lays every tensor out as its twin loads it.

use glassbox_runner::backend::cpu::CpuBackend;
use glassbox_runner::backend::{Backend, WeightLayout};
use glassbox_runner::data::tokenizer::TextTokenizer;
use glassbox_runner::decode::{DecodeWeights, Decoder};
use glassbox_runner::hf::{self, SpecialIds, Twin};
use glassbox_runner::inference;
use glassbox_runner::model::{BatchIds, Model, ModelDims};
use glassbox_runner::sampling::argmax;
use glassbox_schemas::ExperimentSpec;

fn spec(moe: &str) -> ExperimentSpec {
    let text = format!(
        r#"
[experiment]
name = "inference"
slug = "inference-check"
hypothesis = "Cached decoding equals the full forward."
[model]
d_model = 32
n_layers = 2
n_heads = 4
seq_len = 24
[model.moe]
n_experts = 4
top_k = 2
d_expert = 16
{moe}
[[data.mixture]]
domain = "markov"
generator = {{ kind = "markov", seed = 3, order = 1, alphabet = 16, branching = 3 }}
[train]
steps = 1
batch_size = 1
lr = 0.003
seed = 11
"#
    );
    glassbox_schemas::parse_toml(&text).expect("test spec is valid")
}

const SIGMOID: &str =
    "n_shared = 1\nscore = \"sigmoid\"\ncombine_scale = 2.0\ncapacity_factor = 1.0";
const SOFTMAX: &str = "score = \"softmax\"";

/// A per-layer selection bias that changes some choices.
fn bias(model: &Model) -> Vec<Vec<f64>> {
    (0..model.dims.n_layers)
        .map(|l| {
            (0..model.dims.n_experts)
                .map(|e| 0.05 * ((l + 2 * e) % 3) as f64 - 0.05)
                .collect()
        })
        .collect()
}

fn tokens(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + 11) % 256).collect()
}

/// Logits `[T, V]` of the full forward over `ids` (one row, padded to the context).
fn full_forward(
    be: &CpuBackend<f32>,
    model: &Model,
    params: &[Vec<f32>],
    b: &[Vec<f64>],
    ids: &[u32],
) -> Vec<f32> {
    let t = model.dims.seq_len;
    let mut inputs = ids.to_vec();
    inputs.resize(t, 0);
    let (tok, tgt) = (be.upload_ids(&inputs), be.upload_ids(&vec![0; t]));
    let batch = BatchIds {
        tokens: &tok,
        targets: &tgt,
        batch_size: 1,
    };
    be.run(|| model.logits(be, params, b, &batch))
}

fn decoded(threads: usize, model: &Model, seed: u64, b: &[Vec<f64>], ids: &[u32]) -> Vec<Vec<f32>> {
    let be = CpuBackend::<f32>::new(threads).unwrap();
    let params = model.init_params(&be, seed);
    be.run(|| {
        let w = DecodeWeights::new(model, &be, &params);
        let mut d = Decoder::new(model, &be, &w, b);
        ids.iter().map(|&i| d.feed(i).unwrap()).collect()
    })
}

/// Logits after each of `chunks`, fed chunk by chunk through one decoder over `weights`.
fn fed_in_chunks(
    be: &CpuBackend<f32>,
    model: &Model,
    weights: &DecodeWeights<'_, CpuBackend<f32>>,
    b: &[Vec<f64>],
    chunks: &[&[u32]],
) -> Vec<Vec<u32>> {
    be.run(|| {
        let mut d = Decoder::new(model, be, weights, b);
        chunks
            .iter()
            .map(|c| d.feed_all(c).unwrap().iter().map(|x| x.to_bits()).collect())
            .collect()
    })
}

/// A prompt fed as one batch (more rows than the thin products take), and tokens fed one by
/// one after it, give the bits that feeding every token alone gives; and the decoder's
/// weight panels give the bits of the trained layout.
#[test]
fn a_batched_prompt_and_the_weight_panels_change_no_bit() {
    for moe in [SIGMOID, SOFTMAX] {
        let model = Model::new(ModelDims::from_spec(&spec(moe)).unwrap());
        let b = bias(&model);
        let ids = tokens(20);
        for threads in [1, 2] {
            let be = CpuBackend::<f32>::new(threads).unwrap();
            let params = model.init_params(&be, 5);
            let relaid = DecodeWeights::new(&model, &be, &params);
            let lm_head = model
                .params
                .iter()
                .position(|p| p.name == "lm_head")
                .unwrap();
            assert_eq!(relaid.weights(1).layout(lm_head), WeightLayout::Panels);
            assert_eq!(relaid.weights(5).layout(lm_head), WeightLayout::OutIn);
            let singles: Vec<&[u32]> = ids.chunks(1).collect();
            let one_by_one = fed_in_chunks(&be, &model, &relaid, &b, &singles);
            let batched = fed_in_chunks(
                &be,
                &model,
                &relaid,
                &b,
                &[&ids[..13], &ids[13..14], &ids[14..17], &ids[17..]],
            );
            let ends = [12, 13, 16, 19];
            for (got, &at) in batched.iter().zip(&ends) {
                assert_eq!(
                    got, &one_by_one[at],
                    "{moe}, {threads} threads: after token {at}"
                );
            }
            let as_trained = DecodeWeights::with_layout(&model, &be, &params, WeightLayout::OutIn);
            let trained = fed_in_chunks(&be, &model, &as_trained, &b, &singles);
            assert_eq!(
                trained, one_by_one,
                "{moe}, {threads} threads: layouts differ"
            );
            // Not trivially: the logits move from position to position.
            assert_ne!(one_by_one[12], one_by_one[19]);
        }
    }
}

#[test]
fn the_cached_decoder_equals_the_full_forward_at_every_position() {
    for moe in [SIGMOID, SOFTMAX] {
        let s = spec(moe);
        let model = Model::new(ModelDims::from_spec(&s).unwrap());
        let b = bias(&model);
        let ids = tokens(model.dims.seq_len);
        let be = CpuBackend::<f32>::new(2).unwrap();
        let params = model.init_params(&be, 4);
        let full = full_forward(&be, &model, &params, &b, &ids);
        let steps = decoded(2, &model, 4, &b, &ids);
        let v = model.dims.vocab;
        let mut worst = 0f32;
        for (pos, row) in steps.iter().enumerate() {
            let want = &full[pos * v..(pos + 1) * v];
            for (a, w) in row.iter().zip(want) {
                worst = worst.max((a - w).abs());
            }
            assert_eq!(
                argmax(row),
                argmax(want),
                "{moe}: greedy differs at position {pos}"
            );
        }
        assert!(
            worst < 1e-4,
            "{moe}: decoder and full forward differ by {worst}"
        );
        // A broken decoder (wrong position, no cache) would not be this close: the last
        // position's logits must depend on the earlier tokens.
        let alone = decoded(1, &model, 4, &b, &ids[ids.len() - 1..]);
        let last = steps.last().unwrap();
        let moved = alone[0]
            .iter()
            .zip(last)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(moved > 1e-3, "{moe}: the context changed nothing ({moved})");
    }
}

#[test]
fn decoding_is_bitwise_the_same_for_any_thread_count() {
    let model = Model::new(ModelDims::from_spec(&spec(SIGMOID)).unwrap());
    let b = bias(&model);
    let ids = tokens(12);
    let one = decoded(1, &model, 9, &b, &ids);
    let two = decoded(2, &model, 9, &b, &ids);
    let bits =
        |rows: &[Vec<f32>]| -> Vec<u32> { rows.iter().flatten().map(|x| x.to_bits()).collect() };
    assert_eq!(bits(&one), bits(&two));
}

#[test]
fn a_position_past_the_context_is_refused() {
    let model = Model::new(ModelDims::from_spec(&spec(SOFTMAX)).unwrap());
    let b = bias(&model);
    let be = CpuBackend::<f32>::new(1).unwrap();
    let params = model.init_params(&be, 1);
    let w = DecodeWeights::new(&model, &be, &params);
    let mut d = Decoder::new(&model, &be, &w, &b);
    let all: Vec<u32> = (0..model.dims.seq_len as u32).collect();
    let err = d
        .feed_all(&[all.clone(), vec![1]].concat())
        .unwrap_err()
        .to_string();
    assert!(err.contains("seq_len = 24"), "{err}");
    assert_eq!(d.position(), 0, "a refused batch feeds nothing");
    d.feed_all(&all).unwrap();
    let err = d.feed(1).unwrap_err().to_string();
    assert!(err.contains("seq_len = 24"), "{err}");
    let err = d.feed_all(&[]).unwrap_err().to_string();
    assert!(err.contains("at least one token"), "{err}");
}

#[test]
fn score_is_the_log_softmax_of_the_full_forward() {
    let model = Model::new(ModelDims::from_spec(&spec(SOFTMAX)).unwrap());
    let b = bias(&model);
    let be = CpuBackend::<f32>::new(2).unwrap();
    let params = model.init_params(&be, 2);
    // Two windows and a part: every token after the first is predicted once.
    let ids = tokens(2 * model.dims.seq_len + 7);
    let bytes = vec![1u32; ids.len()];
    let s = be
        .run(|| inference::score(&model, &be, &params, &b, &ids, &bytes))
        .unwrap();
    assert_eq!(s.predicted, ids.len() - 1);
    assert_eq!(s.per_token.len(), ids.len() - 1);
    // The first window's log-likelihoods, by hand from the full forward.
    let t = model.dims.seq_len;
    let v = model.dims.vocab;
    let full = full_forward(&be, &model, &params, &b, &ids[..t]);
    for p in 0..t {
        let want = log_softmax(&full[p * v..(p + 1) * v], ids[p + 1]);
        assert_eq!(s.per_token[p], (ids[p + 1], want), "position {p}");
    }
    let total: f64 = -s.per_token.iter().map(|p| p.1).sum::<f64>();
    assert_eq!(s.total_nll, total);
    assert!(
        (s.bits_per_byte - total / std::f64::consts::LN_2 / (ids.len() - 1) as f64).abs() < 1e-12
    );
}

/// `log softmax(row)[target]` in f64, as scoring takes it.
fn log_softmax(row: &[f32], target: u32) -> f64 {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let lse = max
        + row
            .iter()
            .map(|&x| (x as f64 - max).exp())
            .sum::<f64>()
            .ln();
    row[target as usize] as f64 - lse
}

/// Multiple-choice-like requests: contexts of 1 to 13 tokens, each with 1 to 5 choices of 1 to
/// 7 tokens (one choice repeated), and one request longer than the context.
fn choice_requests(seq_len: usize) -> Vec<inference::Continuation> {
    let mut out = Vec::new();
    for item in 0..40u32 {
        let lc = 1 + (item as usize * 5) % 13;
        let context: Vec<u32> = (0..lc as u32).map(|i| (item * 31 + i * 7) % 256).collect();
        for choice in 0..1 + item % 5 {
            let len = 1 + ((item + choice * 3) % 7) as usize;
            let mut tokens = context.clone();
            tokens.extend((0..len as u32).map(|i| (item * 13 + choice * 101 + i * 17) % 256));
            out.push(inference::Continuation {
                tokens,
                continuation: len,
            });
        }
    }
    out.push(out[3].clone());
    out.push(inference::Continuation {
        tokens: tokens(seq_len + 6),
        continuation: 4,
    });
    out
}

#[test]
fn continuations_sharing_a_context_score_as_each_would_alone_bitwise() {
    for moe in [SIGMOID, SOFTMAX] {
        let model = Model::new(ModelDims::from_spec(&spec(moe)).unwrap());
        let b = bias(&model);
        let requests = choice_requests(model.dims.seq_len);
        let v = model.dims.vocab;
        let mut runs = Vec::new();
        for threads in [1, 2] {
            let be = CpuBackend::<f32>::new(threads).unwrap();
            let params = model.init_params(&be, 6);
            let all = be
                .run(|| {
                    inference::continuation_logliks(&model, &be, &params, &b, &requests, &|| false)
                })
                .unwrap()
                .unwrap();
            runs.push(all.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
            if threads == 1 {
                continue;
            }
            for (i, r) in requests.iter().enumerate() {
                // Alone, through the same call.
                let alone = be
                    .run(|| {
                        inference::continuation_logliks(
                            &model,
                            &be,
                            &params,
                            &b,
                            std::slice::from_ref(r),
                            &|| false,
                        )
                    })
                    .unwrap()
                    .unwrap();
                assert_eq!(alone[0].to_bits(), all[i].to_bits(), "{moe}: request {i}");
                // By hand, from the batched forward over the request's own tokens (its last
                // `seq_len + 1` of them).
                let keep = r.tokens.len().min(model.dims.seq_len + 1);
                let window = &r.tokens[r.tokens.len() - keep..];
                let full = full_forward(&be, &model, &params, &b, &window[..keep - 1]);
                let mut want = 0.0f64;
                for p in keep - 1 - r.continuation..keep - 1 {
                    want += log_softmax(&full[p * v..(p + 1) * v], window[p + 1]);
                }
                assert_eq!(
                    all[i].to_bits(),
                    want.to_bits(),
                    "{moe}: request {i} by hand"
                );
            }
        }
        assert_eq!(runs[0], runs[1], "{moe}: one thread and two differ");
    }
}

#[test]
fn the_bytes_tokenizer_json_maps_each_byte_to_its_own_id() {
    let json = TextTokenizer::bytes_json().unwrap();
    let t = tokenizers::Tokenizer::from_bytes(&json).unwrap();
    for text in [
        "plain ascii",
        "Déjà vu 🙂 日本",
        " leading  spaces\tand\nnewlines ",
    ] {
        let enc = t.encode(text, false).unwrap();
        let want: Vec<u32> = text.bytes().map(u32::from).collect();
        assert_eq!(enc.get_ids(), want.as_slice(), "{text:?}");
        assert_eq!(t.decode(enc.get_ids(), false).unwrap(), text);
    }
    assert_eq!(t.get_vocab_size(true), 256);
}

#[test]
fn the_twins_are_chosen_by_score_and_every_tensor_has_its_shape() {
    for (moe, twin) in [(SIGMOID, Twin::Glm4Moe), (SOFTMAX, Twin::Ernie45Moe)] {
        let model = Model::new(ModelDims::from_spec(&spec(moe)).unwrap());
        let be = CpuBackend::<f32>::new(1).unwrap();
        let params = model.init_params(&be, 3);
        let named: Vec<(String, Vec<usize>, Vec<f32>)> = model
            .params
            .iter()
            .zip(&params)
            .map(|(p, v)| (p.name.clone(), p.shape.clone(), be.download(v)))
            .collect();
        let out = hf::convert(&model.dims, &named, &bias(&model), SpecialIds::default()).unwrap();
        assert_eq!(out.twin, twin);
        for (name, shape, values) in &out.tensors {
            assert_eq!(shape.iter().product::<usize>(), values.len(), "{name}");
        }
        // Every parameter value is exported once (the shared experts are regrouped, q and k
        // permuted, the selection bias added): the multiset of values is the same.
        let mut ours: Vec<u32> = named
            .iter()
            .flat_map(|(_, _, v)| v.iter().map(|x| x.to_bits()))
            .collect();
        let mut theirs: Vec<u32> = out
            .tensors
            .iter()
            .filter(|(n, _, _)| !n.contains("e_score_correction_bias"))
            .flat_map(|(_, _, v)| v.iter().map(|x| x.to_bits()))
            .collect();
        if twin == Twin::Ernie45Moe {
            // combine_scale is 1 here, so nothing is folded.
            assert_eq!(model.dims.combine_scale, 1.0);
        }
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs, "{twin:?}");
        assert_eq!(out.config["architectures"][0], twin.architecture());
    }
}
