//! The import graph between a crate's top-level modules, and the circles in it.
//!
//! `cargo xtask layers [CRATE_DIR...]` prints, for each crate, every top-level module with the
//! modules it names through `crate::` paths, then each circle (a strongly connected set of
//! two or more modules). The tidy test holds every crate to having none: a module that needs
//! another's types and is needed back by it means the shared types belong in a third module
//! below both.
//!
//! What counts as an import: any `crate::name` path in code (a `use`, a qualified path, a
//! `crate::{a, b}` group), outside comments and outside the file's `#[cfg(test)]` tail. Test
//! code may reach anywhere. Not a Rust parser: a `crate::` inside a string literal counts too,
//! which errs toward reporting a circle, never hiding one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name → the other modules it names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level module a source file under `src` belongs to (`worker/recording.rs` →
/// `worker`); `None` for the crate root.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// The code of a file without comments and without its `#[cfg(test)]` tail.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        // A trailing comment: ` // ` after code.
        let code = line.find(" // ").map_or(line, |at| &line[..at]);
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every top-level module a piece of code names through `crate::`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        // `$crate::` in a macro and `glassbox_lab::crate::` do not occur; a preceding
        // identifier character means another word (`my_crate::`).
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the first word of each item at depth one.
            let mut depth = 1;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if item_start && depth == 1 && !c.is_whitespace() => {
                        item_start = false;
                        let word = ident_at(&group[i..]);
                        if !word.is_empty() {
                            out.insert(word.to_string());
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let word = ident_at(rest);
            if !word.is_empty() {
                out.insert(word.to_string());
            }
        }
    }
    out
}

fn rust_files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The import graph of the crate whose sources are in `src`.
pub fn graph(src: &Path) -> std::io::Result<Graph> {
    let mut files = Vec::new();
    rust_files_under(src, &mut files);
    files.sort();
    let mut graph = Graph::new();
    for file in files {
        let Some(module) = module_of(src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file)?;
        let names = named_modules(&code_of(&text));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(names.into_iter().filter(|n| *n != module));
    }
    // Only edges to modules of this crate (`crate::Type` re-exported at the root is not one).
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|n| modules.contains(n));
    }
    Ok(graph)
}

/// The strongly connected sets of two or more modules (Tarjan), each sorted.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.out.push(set);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// The crates of the workspace whose module graphs are checked: every directory of the root
/// with a `Cargo.toml` and a `src/`, and the binary's own `src/`.
pub fn crate_sources(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = vec![("glassbox".to_string(), root.join("src"))];
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            let dir = entry.path();
            if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                out.push((name, dir.join("src")));
            }
        }
    }
    out.sort();
    out
}

/// `cargo xtask layers [CRATE_DIR...]`: print the graph and its circles; true when none.
pub fn print(root: &Path, only: &[String]) -> std::io::Result<bool> {
    let mut clean = true;
    for (name, src) in crate_sources(root) {
        if !only.is_empty() && !only.contains(&name) {
            continue;
        }
        let graph = graph(&src)?;
        println!("{name}:");
        for (module, edges) in &graph {
            let edges: Vec<&str> = edges.iter().map(String::as_str).collect();
            println!("  {module} -> {}", edges.join(", "));
        }
        for circle in circles(&graph) {
            clean = false;
            println!("  CIRCLE: {}", circle.join(" <-> "));
        }
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_crate_has_an_import_circle() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repository root");
        let crates = crate_sources(root);
        assert!(crates.len() >= 9, "only {} crates found", crates.len());
        let mut found = Vec::new();
        for (name, src) in crates {
            let g = graph(&src).expect("readable sources");
            for circle in circles(&g) {
                found.push(format!("{name}: {}", circle.join(" <-> ")));
            }
        }
        assert!(
            found.is_empty(),
            "modules that import each other (move what both need into a module below them; \
             `cargo xtask layers` prints the graph):\n  {}",
            found.join("\n  ")
        );
    }

    #[test]
    fn imports_are_read_from_code_not_comments() {
        let code = code_of(
            "//! see crate::flow\nuse crate::{queue::Job, db::{self, x}};\n\
             let a = crate::sweep::gate(); // crate::worker\nfn b(_: my_crate::x) {}\n\
             #[cfg(test)]\nmod tests { use crate::ladder; }\n",
        );
        let names: Vec<String> = named_modules(&code).into_iter().collect();
        assert_eq!(names, ["db", "queue", "sweep"]);
    }

    #[test]
    fn a_circle_is_found_and_a_chain_is_not() {
        let mut g = Graph::new();
        for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")] {
            g.entry(a.into()).or_default().insert(b.into());
            g.entry(b.into()).or_default();
        }
        assert_eq!(circles(&g), vec![vec!["a", "b", "c"]]);
        g.get_mut("c").unwrap().remove("a");
        assert!(circles(&g).is_empty());
    }
}
