//! `glassbox data`: add corpora (`import`, `generate`), tokenizers (`tokenizer train`,
//! `tokenizer import`) and token shards (`tokenize`) to the lab, each a blob with its entry,
//! and print the hash a spec names it by.
//!
//! Glue only: flags become one validated request, one lab call does the work, the result is
//! printed. Not here: parsing corpora, tokenizing or recording (`glassbox_lab::dataset`,
//! `glassbox_lab::tokens`).

use std::path::PathBuf;
use std::process::ExitCode;

use glassbox_lab::dataset::{self, ImportRequest};
use glassbox_lab::tokens;
use glassbox_runner::data::tokenizer::TrainKind;
use glassbox_schemas::BlobHash;
use glassbox_schemas::data::CorpusFormat;
use glassbox_schemas::spec::{GeneratorKind, GeneratorSpec};

use crate::GlobalOpts;
use crate::cli::args::{self, LabArgs};
use crate::exit;

/// `glassbox data` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum DataCommand {
    /// Store a text, JSONL or Parquet file as a corpus and record a `dataset` entry (bytes,
    /// documents, format). The file is stored as it is; documents are read from it by format.
    Import {
        /// Domain name for metric names (`eval/<domain>/loss`).
        #[arg(long)]
        domain: String,
        /// The file.
        file: PathBuf,
        /// How the file splits into documents; left out, from its extension (`.jsonl`,
        /// `.parquet`, anything else is text).
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
        /// JSONL: the field holding each document's text.
        #[arg(long, default_value = "text")]
        text_field: String,
        /// Parquet: the string column holding each document's text.
        #[arg(long, default_value = "text")]
        text_column: String,
        /// Text: the separator between documents (e.g. `$'\n\n'`); left out, the file is one
        /// document.
        #[arg(long)]
        separator: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sample a built-in seeded Markov source (exact entropy known) and record it.
    Generate {
        /// Domain name.
        #[arg(long)]
        domain: String,
        /// Seed of the source's structure and sample stream.
        #[arg(long)]
        seed: u64,
        /// Bytes to generate.
        #[arg(long)]
        bytes: u64,
        /// Context length (1-4).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4))]
        order: u32,
        /// Distinct symbols (2-256).
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(2..=256))]
        alphabet: u32,
        /// Successors per context (1-256, at most the alphabet).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
        branching: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Train or import a Hugging Face tokenizer (`tokenizer.json`), recorded as a `tokenizer`
    /// entry; a spec names it with `[data] tokenizer = "blake3:..."`.
    #[command(subcommand)]
    Tokenizer(TokenizerCommand),
    /// Evaluation suites: `import` a JSONL/Parquet file of items, `generate` a built-in one
    /// from a spec's Markov source, `list` those on the record.
    #[command(subcommand)]
    EvalSuite(crate::cli::eval::EvalSuiteCommand),
    /// Tokenize a stored corpus with a stored tokenizer into a token shard (a blob and a
    /// `tokenized` entry). Runs on all cores; a pair tokenized before is reused. Workers do
    /// this themselves for what a spec needs.
    Tokenize {
        /// The corpus (a `dataset` hash).
        #[arg(long)]
        corpus: BlobHash,
        /// The tokenizer (a `tokenizer` hash).
        #[arg(long)]
        tokenizer: BlobHash,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `glassbox data tokenizer` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TokenizerCommand {
    /// Train a tokenizer on stored corpora. The same corpora and flags give the same bytes.
    Train {
        /// Vocabulary size, special tokens included (260 to 1,048,576).
        #[arg(long)]
        vocab: u32,
        /// Corpora to train on (`dataset` hashes), one or more.
        #[arg(long = "from", num_args = 1.., required = true)]
        from: Vec<BlobHash>,
        /// The model: byte-level BPE (GPT-2 style) or Unigram.
        #[arg(long, value_enum, default_value = "bpe")]
        kind: KindArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Store an existing `tokenizer.json` as it is.
    Import {
        /// The `tokenizer.json`.
        file: PathBuf,
        /// The token that ends a document; left out, the first of `<|endoftext|>`,
        /// `<|end_of_text|>`, `</s>`, `<eos>`, `<|im_end|>`, `[SEP]` it has.
        #[arg(long)]
        eod_token: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `--format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    /// UTF-8 text.
    Text,
    /// JSON Lines.
    Jsonl,
    /// Apache Parquet.
    Parquet,
}

/// `--kind`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// Byte-level BPE.
    Bpe,
    /// Unigram.
    Unigram,
}

/// The corpus format the flags ask for.
fn import_format(
    file: &std::path::Path,
    format: Option<FormatArg>,
    text_field: String,
    text_column: String,
    separator: Option<String>,
) -> CorpusFormat {
    let ext = file
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let format = format.unwrap_or(match ext.as_deref() {
        Some("jsonl") | Some("ndjson") => FormatArg::Jsonl,
        Some("parquet") => FormatArg::Parquet,
        _ => FormatArg::Text,
    });
    match format {
        FormatArg::Text => CorpusFormat::Text { separator },
        FormatArg::Jsonl => CorpusFormat::Jsonl { text_field },
        FormatArg::Parquet => CorpusFormat::Parquet { text_column },
    }
}

/// What a command produced, to print.
enum Done {
    Dataset(dataset::Dataset),
    Tokenizer(tokens::StoredTokenizer),
    Tokenized(tokens::Tokenized),
}

pub fn run(cmd: DataCommand, global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let cmd = match cmd {
        DataCommand::EvalSuite(c) => return crate::cli::eval::suite_command(c, global),
        other => other,
    };
    let args = LabArgs::defaults();
    args::runtime()?.block_on(async {
        let ctx = args::open(global, &args, true).await?;
        let rec = ctx.recorder.clone();
        let (job, json): (
            Box<dyn FnOnce() -> Result<Done, glassbox_lab::LabError> + Send>,
            bool,
        ) = match cmd {
            DataCommand::Import {
                domain,
                file,
                format,
                text_field,
                text_column,
                separator,
                json,
            } => {
                let req = ImportRequest {
                    domain,
                    format: import_format(&file, format, text_field, text_column, separator),
                    file,
                };
                (
                    Box::new(move || dataset::import(&rec, &req).map(Done::Dataset)),
                    json,
                )
            }
            DataCommand::Generate {
                domain,
                seed,
                bytes,
                order,
                alphabet,
                branching,
                json,
            } => {
                let g = GeneratorSpec {
                    kind: GeneratorKind::Markov,
                    seed,
                    order,
                    alphabet,
                    branching,
                };
                (
                    Box::new(move || {
                        dataset::generate(&rec, &domain, &g, bytes).map(Done::Dataset)
                    }),
                    json,
                )
            }
            DataCommand::Tokenizer(TokenizerCommand::Train {
                vocab,
                from,
                kind,
                json,
            }) => {
                let kind = match kind {
                    KindArg::Bpe => TrainKind::Bpe,
                    KindArg::Unigram => TrainKind::Unigram,
                };
                (
                    Box::new(move || {
                        tokens::train_tokenizer(&rec, kind, vocab, &from).map(Done::Tokenizer)
                    }),
                    json,
                )
            }
            DataCommand::Tokenizer(TokenizerCommand::Import {
                file,
                eod_token,
                json,
            }) => (
                Box::new(move || {
                    tokens::import_tokenizer(&rec, &file, eod_token.as_deref()).map(Done::Tokenizer)
                }),
                json,
            ),
            DataCommand::EvalSuite(_) => {
                anyhow::bail!("`data eval-suite` runs before the lab is opened here")
            }
            DataCommand::Tokenize {
                corpus,
                tokenizer,
                json,
            } => (
                Box::new(move || {
                    let progress = |docs: u64, bytes: u64| {
                        if !json {
                            eprintln!("  tokenized {docs} documents, {bytes} bytes");
                        }
                    };
                    tokens::tokenize(&rec, &corpus, &tokenizer, &progress).map(Done::Tokenized)
                }),
                json,
            ),
        };
        let done = tokio::task::spawn_blocking(job).await??;
        print(&done, json)?;
        Ok(exit::code(exit::OK))
    })
}

fn print(done: &Done, json: bool) -> anyhow::Result<()> {
    match done {
        Done::Dataset(d) if json => println!("{}", serde_json::to_string_pretty(d)?),
        Done::Tokenizer(t) if json => println!("{}", serde_json::to_string_pretty(t)?),
        Done::Tokenized(t) if json => println!("{}", serde_json::to_string_pretty(t)?),
        Done::Dataset(d) => {
            println!("{}", d.hash);
            let format = d.body.format.as_ref().map_or("bytes", |f| f.name());
            print!(
                "  domain {}  bytes {}  format {format}  source {}",
                d.body.domain, d.bytes, d.body.source
            );
            if let (Some(docs), Some(text)) = (d.body.documents, d.body.text_bytes) {
                print!("  documents {docs}  text bytes {text}");
            }
            println!();
            if let Some(h) = d.body.entropy_bits_per_byte {
                println!("  entropy {h:.6} bits/byte (the loss floor)");
            }
            println!("  recorded as dataset entry {}", d.entry);
            print_snippet(&format!(
                "[[data.mixture]]\ndomain = {}\ncorpus = {}",
                toml_string(&d.body.domain),
                toml_string(&d.hash.to_string())
            ));
        }
        Done::Tokenizer(t) => {
            println!("{}", t.hash);
            println!(
                "  {} ({})  vocab {}  end of document {:?} = {}  source {}",
                t.body.kind.as_str(),
                t.body.model,
                t.body.vocab_size,
                t.body.end_of_document,
                t.body.end_of_document_id,
                t.body.source
            );
            println!("  recorded as tokenizer entry {}", t.entry);
            print_snippet(&format!(
                "[data]\ntokenizer = {}\n\n[model]\nvocab = {}",
                toml_string(&t.hash.to_string()),
                t.body.vocab_size
            ));
        }
        Done::Tokenized(t) => {
            println!("{}", t.body.shard);
            println!(
                "  {} tokens  {} documents  {} text bytes ({:.3} bytes/token){}",
                t.body.tokens,
                t.body.documents,
                t.body.text_bytes,
                t.body.text_bytes as f64 / t.body.tokens.max(1) as f64,
                if t.reused { "  (reused)" } else { "" }
            );
            println!("  recorded as tokenized entry {}", t.entry);
        }
    }
    Ok(())
}

/// A string as a TOML value, quoted and escaped.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Prints a spec snippet, indented, that is valid TOML once the indentation is taken off.
fn print_snippet(toml_text: &str) {
    println!("  use it in a spec:\n");
    for line in toml_text.lines() {
        if line.is_empty() {
            println!();
        } else {
            println!("    {line}");
        }
    }
}
