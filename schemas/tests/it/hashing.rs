//! Spec hashing: two spellings of one experiment hash the same; any change of meaning changes
//! the hash; JCS number formatting matches RFC 8785's published cases.

use glassbox_schemas::canonical::canonical_json;
use glassbox_schemas::{parse_toml, spec_hash};
use serde_json::Value;

const MINIMAL: &str = r#"
[experiment]
name = "Hash test"
slug = "hash-test"
hypothesis = "Spelling a spec two ways does not change what experiment it is."

[model]
d_model = 32
n_layers = 1
n_heads = 2
seq_len = 16

[model.moe]
n_experts = 4
top_k = 2
d_expert = 32

[[data.mixture]]
domain = "markov"
generator = { kind = "markov", seed = 3 }

[train]
steps = 10
batch_size = 2
lr = 0.001
"#;

/// The same experiment: keys reordered, comments added, and every default spelled out.
const SPELLED_OUT: &str = r#"
# Same experiment, written differently.
[train]
lr = 1e-3            # same number, other spelling
batch_size = 2
steps = 10
schedule = "cosine"
warmup_steps = 0
min_lr_ratio = 0.1
decay_fraction = 0.2
beta1 = 0.9
beta2 = 0.95
adam_eps = 1e-8
weight_decay = 0.1
grad_clip = 1.0
z_loss = 0.0
seed = 0
eval_interval = 100
eval_batches = 4
checkpoint_interval = 0
precision = "f32"

[data]
tokenizer = "bytes"
heldout_fraction = 0.05
[[data.mixture]]
weight = 1.0
generator = { seed = 3, kind = "markov", order = 2, alphabet = 64, branching = 4 }
domain = "markov"

[model]
seq_len = 16
n_heads = 2
n_layers = 1
d_model = 32
vocab = 256
rope_theta = 10000.0
norm_eps = 0.00001
[model.moe]
d_expert = 32
top_k = 2
n_experts = 4
n_shared = 0
score = "softmax"
combine_scale = 1
balancing = { rate = 0.001, method = "aux_loss_free" }
router_z_loss = 0.0

[budget]

[experiment]
tags = []
hypothesis = "Spelling a spec two ways does not change what experiment it is."
slug = "hash-test"
name = "Hash test"
"#;

fn hash_of(text: &str) -> String {
    spec_hash(&parse_toml(text).unwrap_or_else(|e| panic!("{e}")))
        .unwrap()
        .to_string()
}

#[test]
fn two_spellings_hash_identically() {
    assert_eq!(hash_of(MINIMAL), hash_of(SPELLED_OUT));
}

#[test]
fn hash_has_the_documented_text_form() {
    let h = hash_of(MINIMAL);
    assert!(h.starts_with("blake3:"), "{h}");
    assert_eq!(h.len(), 71);
}

/// Every leaf field of the canonical JSON, changed to another valid value, changes the hash.
#[test]
fn every_field_change_changes_the_hash() {
    let spec = parse_toml(MINIMAL).unwrap();
    let base_hash = spec_hash(&spec).unwrap();
    let value = serde_json::to_value(&spec).unwrap();
    let mut leaves = Vec::new();
    collect_leaves(&value, String::new(), &mut leaves);
    assert!(leaves.len() > 40, "only {} leaves", leaves.len());
    // Fields with a single allowed value cannot change without making the spec invalid.
    const FIXED: [&str; 3] = [
        "/data/tokenizer",
        "/model/vocab",
        "/data/mixture/0/generator/kind",
    ];
    let mut checked = 0;
    for (pointer, leaf) in &leaves {
        if FIXED.contains(&pointer.as_str()) {
            continue;
        }
        let mut changed = value.clone();
        if pointer == "/model/moe/balancing/method" {
            // Another method is another table: replace it whole.
            *changed.pointer_mut("/model/moe/balancing").unwrap() =
                serde_json::json!({"method": "quantile"});
        } else {
            *changed.pointer_mut(pointer).unwrap() = mutate(pointer, leaf);
        }
        // The mutated spec must still be a valid spec, so the hash compares two experiments.
        let text = serde_json::to_string(&changed).unwrap();
        let other = glassbox_schemas::validate::parse_json(&text)
            .unwrap_or_else(|e| panic!("mutating {pointer} gave an invalid spec: {e}"));
        let h = spec_hash(&other).unwrap();
        assert_ne!(h, base_hash, "changing {pointer} did not change the hash");
        checked += 1;
    }
    assert_eq!(checked, leaves.len() - FIXED.len());
}

/// TOML can write numbers JSON cannot carry (`nan`, `inf`, `-inf`); converted, they would become
/// `null`, which reads as "not given", so a spec with one would hash the same as a spec without
/// the key. At every numeric or optional field, each is refused and the field named: no value
/// is ever dropped on the way to the hash.
#[test]
fn non_finite_numbers_are_refused_at_every_field_never_hashed() {
    let spec = parse_toml(MINIMAL).unwrap();
    let value = serde_json::to_value(&spec).unwrap();
    let mut leaves = Vec::new();
    collect_leaves(&value, String::new(), &mut leaves);
    let base: toml::Table = toml::from_str(MINIMAL).unwrap();
    let mut checked = 0;
    for (pointer, leaf) in &leaves {
        if !(leaf.is_number() || leaf.is_null()) {
            continue;
        }
        let path = dotted(pointer);
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut t = base.clone();
            set_toml(&mut t, pointer, toml::Value::Float(bad));
            let text = toml::to_string(&t).unwrap();
            match parse_toml(&text) {
                Ok(s) => panic!(
                    "{path} = {bad} was accepted (hash {})",
                    spec_hash(&s).unwrap()
                ),
                Err(e) => assert!(
                    e.field_errors()
                        .iter()
                        .any(|f| f.path == path && f.rule.contains("finite")),
                    "{path} = {bad}: {e}"
                ),
            }
        }
        checked += 1;
    }
    assert!(checked > 20, "only {checked} numeric or optional fields");
}

/// `/data/mixture/0/weight` -> `data.mixture[0].weight`.
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        if seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

/// Sets the value at a JSON pointer in a TOML table, making the tables on the way.
fn set_toml(table: &mut toml::Table, pointer: &str, value: toml::Value) {
    let segs: Vec<&str> = pointer.split('/').skip(1).collect();
    let mut here = table;
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if last {
            here.insert(seg.to_string(), value);
            return;
        }
        let next = segs[i + 1];
        if let Ok(n) = next.parse::<usize>() {
            let array = here
                .get_mut(*seg)
                .and_then(toml::Value::as_array_mut)
                .unwrap_or_else(|| panic!("{pointer}: no array at {seg}"));
            if i + 2 == segs.len() {
                array[n] = value;
                return;
            }
            let item = array[n].as_table_mut().expect("an array of tables");
            let rest = segs[i + 2..].join("/");
            set_toml(item, &format!("/{rest}"), value);
            return;
        }
        here = here
            .entry(seg.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap_or_else(|| panic!("{pointer}: {seg} is not a table"));
    }
}

fn collect_leaves(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                collect_leaves(child, format!("{path}/{k}"), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, child) in items.iter().enumerate() {
                collect_leaves(child, format!("{path}/{i}"), out);
            }
        }
        _ => out.push((path, v.clone())),
    }
}

/// Another valid value for a leaf.
fn mutate(pointer: &str, leaf: &Value) -> Value {
    use serde_json::json;
    match pointer {
        "/model/moe/score" => json!("sigmoid"),
        "/train/schedule" => json!("linear"),
        "/train/precision" => json!("bf16"),
        "/model/moe/capacity_factor" => json!(1.25),
        "/budget/max_flops" => json!(1e15),
        "/budget/max_wall_seconds" => json!(60.0),
        "/experiment/tags" => json!(["extra"]),
        "/model/n_heads" => json!(4),
        "/model/d_model" => json!(64),
        "/model/moe/top_k" => json!(1),
        _ => match leaf {
            Value::String(s) => Value::String(format!("{s}-x")),
            Value::Number(n) if n.is_u64() => json!(n.as_u64().unwrap() + 1),
            Value::Number(n) => json!(n.as_f64().unwrap() * 0.5 + 0.001),
            other => panic!("no mutation for {pointer} = {other}"),
        },
    }
}

fn jcs(text: &str) -> String {
    let v: Value = serde_json::from_str(text).unwrap();
    String::from_utf8(canonical_json(&v).unwrap()).unwrap()
}

/// RFC 8785 section 3.2.2.3 and appendix B: ECMAScript number serialization.
#[test]
fn jcs_number_formatting() {
    for (input, expected) in [
        ("1e21", "1e+21"),
        ("1e-7", "1e-7"),
        ("0.1", "0.1"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("1E+30", "1e+30"),
        ("333333333.3333333", "333333333.3333333"),
        ("333333333.33333329", "333333333.3333333"),
        ("4.50", "4.5"),
        ("2e-3", "0.002"),
        ("0.000000000000000000000000001", "1e-27"),
        ("1e20", "100000000000000000000"),
        ("9007199254740992", "9007199254740992"),
        ("295147905179352830000", "295147905179352830000"),
        ("5e-324", "5e-324"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
    ] {
        assert_eq!(
            jcs(&format!("[{input}]")),
            format!("[{expected}]"),
            "{input}"
        );
    }
}

/// RFC 8785 section 3.2.4: the published example, byte for byte.
#[test]
fn jcs_rfc8785_example() {
    let input = r#"{
      "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
      "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
      "literals": [null, true, false]
    }"#;
    let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
    assert_eq!(jcs(input), expected);
}

#[test]
fn jcs_sorts_keys_by_utf16_code_units() {
    // RFC 8785 3.2.3: keys sort by UTF-16 code units, so the emoji (surrogates 0xd83d 0xde00)
    // sorts before U+FB33 although its code point is larger.
    let input = r#"{"\ufb33":0,"\u20ac":1,"\ud83d\ude00":2,"\u00f6":3,"\u0080":4,"1":5}"#;
    let out = jcs(input);
    let order: Vec<char> = out
        .split(':')
        .filter_map(|p| p.rsplit('"').nth(1).and_then(|s| s.chars().next()))
        .collect();
    assert_eq!(
        order,
        vec!['1', '\u{80}', '\u{f6}', '\u{20ac}', '\u{1f600}', '\u{fb33}']
    );
}

/// `[metrics]` left out (or empty) is left out of the canonical form, so every spec written
/// before the section existed keeps its hash; setting `vector_interval` is a new experiment.
#[test]
fn a_spec_without_metrics_hashes_as_before() {
    let canonical =
        glassbox_schemas::canonical::spec_canonical_json(&parse_toml(MINIMAL).unwrap()).unwrap();
    assert!(
        !String::from_utf8(canonical).unwrap().contains("metrics"),
        "the default section is not serialized"
    );
    assert_eq!(
        hash_of(MINIMAL),
        hash_of(&format!("{MINIMAL}\n[metrics]\n"))
    );
    assert_ne!(
        hash_of(MINIMAL),
        hash_of(&format!("{MINIMAL}\n[metrics]\nvector_interval = 5\n"))
    );
}
