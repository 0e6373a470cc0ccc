//! Tidy checks over the repository's own text (rust-analyzer's `tidy.rs`), run by
//! `cargo test -p xtask`:
//!
//! - every `.rs` file opens with a `//!` comment saying what it is;
//! - every path and Rust name that `ARCHITECTURE.md` puts in backticks exists in the tree, so
//!   the code map cannot silently go stale.
//!
//! What counts as a name: a `CamelCase` word (a type, trait or enum variant defined somewhere),
//! or `Type::item` / `module::item` (the item defined as a function, variant or type). A path
//! is a word with a `/` or a file extension, relative to the repository root (a bare file name
//! such as `lib.rs` is any file of that name). Other backticked text (commands, entry kinds,
//! `auto|cpu|cuda`) is left alone. Not a linter of the code itself: clippy and rustfmt are.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the repository root")
        .to_path_buf()
}

/// Every file under `root`, depth first, leaving out each entry whose name `skip` says to.
fn walk(root: &Path, skip: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable directory") {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if skip(name) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Every `.rs` file of the repository, outside build output and hidden directories.
fn rust_files(root: &Path) -> Vec<PathBuf> {
    walk(root, |name| name.starts_with('.') || name == "target")
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect()
}

#[test]
fn every_rust_file_opens_with_a_module_comment() {
    let root = repo_root();
    let mut missing = Vec::new();
    for file in rust_files(&root) {
        let text = std::fs::read_to_string(&file).expect("readable source");
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        if !first.starts_with("//!") {
            missing.push(
                file.strip_prefix(&root)
                    .unwrap_or(&file)
                    .display()
                    .to_string(),
            );
        }
    }
    assert!(
        missing.is_empty(),
        "these files do not open with a `//!` comment saying what they are:\n  {}",
        missing.join("\n  ")
    );
}

/// The names defined in the Rust sources: items after `struct`, `enum`, `trait`, `type`, `fn`,
/// `mod`, `const`, `static`, `macro_rules!`, and capitalised words that open a line (enum
/// variants, and newtypes listed in a macro invocation).
fn defined_names(files: &[PathBuf]) -> HashSet<String> {
    const KEYWORDS: [&str; 9] = [
        "struct",
        "enum",
        "trait",
        "type",
        "fn",
        "mod",
        "const",
        "static",
        "macro_rules!",
    ];
    let mut names = HashSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("readable source");
        for line in text.lines() {
            let words: Vec<&str> = line
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
                .filter(|w| !w.is_empty())
                .collect();
            for pair in words.windows(2) {
                if KEYWORDS.contains(&pair[0]) {
                    names.insert(pair[1].trim_end_matches('!').to_string());
                }
            }
            let trimmed = line.trim_start();
            if trimmed.len() < line.len() && trimmed.starts_with(|c: char| c.is_ascii_uppercase()) {
                let word: String = trimmed
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let rest = trimmed[word.len()..].trim_start();
                if rest.is_empty() || rest.starts_with(['{', '(', ',', '=']) {
                    names.insert(word);
                }
            }
        }
    }
    names
}

/// The backticked spans of a Markdown text, outside fenced code blocks.
fn backticked(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            out.push(inside.to_string());
        }
        // An odd count leaves the last span unclosed; Markdown shows it as text.
    }
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// What a backticked span claims exists, if anything.
enum Claim {
    Path(String),
    Name(String),
    Item { owner: String, item: String },
}

fn claim(span: &str) -> Option<Claim> {
    let span = span.trim();
    let span = span
        .strip_prefix("trait ")
        .or_else(|| span.strip_prefix("struct "))
        .or_else(|| span.strip_prefix("enum "))
        .unwrap_or(span);
    if let Some((owner, item)) = span.split_once("::") {
        let owner = owner.rsplit("::").next().unwrap_or(owner);
        let item = item.rsplit("::").next().unwrap_or(item);
        return (is_ident(owner) && is_ident(item)).then(|| Claim::Item {
            owner: owner.to_string(),
            item: item.to_string(),
        });
    }
    let path_chars = span
        .chars()
        .all(|c| c.is_alphanumeric() || "_-./".contains(c));
    let has_extension = [".rs", ".md", ".toml", ".cu", ".jsonl", ".sh", ".py", ".yml"]
        .iter()
        .any(|e| span.ends_with(e));
    if path_chars && !span.starts_with('/') && (span.contains('/') || has_extension) {
        return Some(Claim::Path(span.to_string()));
    }
    let camel = is_ident(span)
        && span.starts_with(|c: char| c.is_ascii_uppercase())
        && span.chars().any(|c| c.is_ascii_lowercase());
    camel.then(|| Claim::Name(span.to_string()))
}

#[test]
fn every_path_and_name_in_architecture_md_exists() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let files = rust_files(&root);
    let names = defined_names(&files);
    let module_files: HashSet<String> = files
        .iter()
        .filter_map(|f| f.file_stem()?.to_str().map(String::from))
        .collect();
    let mut stale = Vec::new();
    let mut checked = 0;
    for span in backticked(&text) {
        let ok = match claim(&span) {
            None => continue,
            // A bare file name (`lib.rs`) means such a file somewhere, not at the root.
            Some(Claim::Path(p)) if !p.contains('/') => files.iter().any(|f| f.ends_with(&p)),
            Some(Claim::Path(p)) => root.join(p.trim_end_matches('/')).exists(),
            Some(Claim::Name(n)) => names.contains(&n),
            Some(Claim::Item { owner, item }) => {
                (names.contains(&owner) || module_files.contains(&owner)) && names.contains(&item)
            }
        };
        checked += 1;
        if !ok {
            stale.push(span);
        }
    }
    assert!(
        checked >= 40,
        "only {checked} paths and names found in ARCHITECTURE.md: is the parser broken?"
    );
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names what the tree does not have (rename or remove):\n  {}",
        stale.join("\n  ")
    );
}

#[test]
fn the_checks_catch_what_they_claim_to() {
    assert!(matches!(claim("lab/src/handle.rs"), Some(Claim::Path(_))));
    assert!(matches!(claim("runner/kernels/"), Some(Claim::Path(p)) if p == "runner/kernels/"));
    assert!(matches!(
        claim("Queue::begin_ending"),
        Some(Claim::Item { .. })
    ));
    assert!(matches!(claim("trait Backend"), Some(Claim::Name(n)) if n == "Backend"));
    assert!(claim("auto|cpu|cuda").is_none());
    assert!(claim("/approve").is_none());
    assert!(claim("result").is_none());
    assert!(claim("RFC").is_none());
    assert_eq!(backticked("a `b` c `d`\n```\n`e`\n```\n"), ["b", "d"]);
    let dir = std::env::temp_dir().join(format!("xtask-tidy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("x.rs");
    std::fs::write(
        &file,
        "pub enum Kind {\n    Alpha,\n    Beta(u8),\n}\nfn gamma() {}\n",
    )
    .unwrap();
    let names = defined_names(std::slice::from_ref(&file));
    std::fs::remove_dir_all(&dir).unwrap();
    for n in ["Kind", "Alpha", "Beta", "gamma"] {
        assert!(names.contains(n), "{n} not found in {names:?}");
    }
    assert!(!names.contains("Missing"));
}

/// Every file of the repository's tree that a clone has: outside build output, the quickstart's
/// lab and `.git`, hidden directories such as `.ci` and `.github` included.
fn tree_files(root: &Path) -> Vec<PathBuf> {
    const OUTSIDE: [&str; 4] = [".git", "glassbox-lab", "runs", "node_modules"];
    walk(root, |name| {
        OUTSIDE.contains(&name) || name.starts_with("target")
    })
}

/// A user's clone has nothing beside it: no test, benchmark, script or document may read or
/// point at the development material that sits beside this checkout. What a test needs lives
/// in the repository (`tests/data/`, `github-bot/tests/fixtures/`).
#[test]
fn nothing_names_what_sits_beside_the_checkout() {
    let root = repo_root();
    // Spelt in pieces so that this file does not find itself.
    let beside = ["..", "/shared"].concat();
    let mut found = Vec::new();
    let mut read = 0;
    for file in tree_files(&root) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        read += 1;
        for (i, line) in text.lines().enumerate() {
            if line.contains(&beside) {
                let rel = file
                    .strip_prefix(&root)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        read > 100,
        "only {read} text files read: is the walk broken?"
    );
    assert!(
        found.is_empty(),
        "these lines name `{beside}`, which a user's clone does not have (copy what is needed \
         into the repository and point there):\n  {}",
        found.join("\n  ")
    );
}

/// Whether `text` cites an issue by number: `issue 12`, `issues 5 and 24`, `Issue #3`, or an
/// issue's item (`Item 8:`) at the start of a comment.
fn cites_an_issue(comment: &str) -> bool {
    let lower = comment.to_ascii_lowercase();
    let cites = lower.match_indices("issue").any(|(at, _)| {
        let before_ok = lower[..at]
            .chars()
            .last()
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        let rest = lower[at + "issue".len()..]
            .strip_prefix('s')
            .unwrap_or(&lower[at + 5..]);
        let rest = rest.strip_prefix(' ').unwrap_or("");
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        before_ok && rest.starts_with(|c: char| c.is_ascii_digit())
    });
    let item = comment
        .trim_start()
        .strip_prefix("Item ")
        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    cites || item
}

/// The comment part of a line of code in a file with this extension, if it has one.
fn comment_of<'a>(line: &'a str, extension: &str) -> Option<&'a str> {
    let trimmed = line.trim_start();
    match extension {
        "rs" | "js" | "css" => trimmed
            .strip_prefix("//")
            .or_else(|| trimmed.strip_prefix("/*"))
            .or_else(|| trimmed.strip_prefix('*'))
            .or_else(|| line.find(" // ").map(|at| &line[at + 4..])),
        "sh" | "toml" | "py" => trimmed
            .strip_prefix('#')
            .or_else(|| line.find(" # ").map(|at| &line[at + 3..])),
        _ => None,
    }
}

/// A comment says what the code does and why; which issue asked for it is in git's history,
/// not in the code.
#[test]
fn no_comment_cites_an_issue() {
    let root = repo_root();
    let mut found = Vec::new();
    let mut read = 0;
    for file in tree_files(&root) {
        let Some(ext) = file.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        if !matches!(ext, "rs" | "js" | "css" | "sh" | "toml" | "py") {
            continue;
        }
        // Vendored assets are others' code; this file spells the patterns it looks for.
        if file.components().any(|c| c.as_os_str() == "vendor")
            || file.ends_with("xtask/src/tidy.rs")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        read += 1;
        for (i, line) in text.lines().enumerate() {
            if comment_of(line, ext).is_some_and(cites_an_issue) {
                let rel = file
                    .strip_prefix(&root)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(read > 100, "only {read} files read: is the walk broken?");
    assert!(
        found.is_empty(),
        "comments that cite an issue (say what the code does and why instead):\n  {}",
        found.join("\n  ")
    );
}

/// What the binary may not spell itself: it builds no ledger entry and knows no file of the
/// lab's layout; the library crates own both.
const NOT_IN_THE_BINARY: [&str; 10] = [
    "LedgerEntry::new",
    "EntryBody",
    "\"blobs\"",
    "\"log\")",
    "\"queue.db\"",
    "\"index.db\"",
    "\"lab.toml\"",
    "\"bot.db\"",
    "\"scratch\"",
    "\"vkey\"",
];

/// An entry body type (`ArtifactBody`, `ResultBody`, ...) named in a line of code.
fn names_an_entry_body(code: &str) -> bool {
    code.match_indices("Body").any(|(at, _)| {
        let after = code[at + 4..].chars().next();
        let word_start = code[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let word = &code[word_start..at];
        after.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
            && word.starts_with(|c: char| c.is_ascii_uppercase())
    })
}

/// The binary is glue: flags, one library call per command, printing.
#[test]
fn the_binary_builds_no_entry_and_knows_no_lab_path() {
    let root = repo_root();
    let mut found = Vec::new();
    let files = rust_files(&root.join("src"));
    assert!(files.len() > 10, "only {} files under src/", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable source");
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if NOT_IN_THE_BINARY.iter().any(|p| line.contains(p)) || names_an_entry_body(line) {
                let rel = file
                    .strip_prefix(&root)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the binary builds entries or spells the lab's layout (call the crate that owns it):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_glue_and_comment_checks_catch_what_they_claim_to() {
    assert!(cites_an_issue(" The CUDA backend (issue 5): kernels"));
    assert!(cites_an_issue(" Issues 5 and 24"));
    assert!(cites_an_issue(" see issue #12"));
    assert!(cites_an_issue(" Item 8: a spec"));
    assert!(!cites_an_issue(" the issue 's body"));
    assert!(!cites_an_issue(" an issue number is a u64"));
    assert!(!cites_an_issue(" tissue 5"));
    assert_eq!(comment_of("let a = 1; // issue 5", "rs"), Some("issue 5"));
    assert_eq!(comment_of("# issue 5", "sh"), Some(" issue 5"));
    assert!(names_an_entry_body("let b = ArtifactBody {"));
    assert!(names_an_entry_body("use x::{ResultBody, refs};"));
    assert!(!names_an_entry_body("let body = response.body();"));
    assert!(!names_an_entry_body("Bodyguard"));
}
