//! The workspace's structure, read from its sources (issue 72): no file
//! over [`MAX_LINES`] lines, and within each crate the files' references to
//! one another (`use crate::…`, `super::…` and paths such as
//! `crate::order::fewest_victims(…)` in code) form no circle. Test code (`#[cfg(test)]` modules and files) is left out:
//! a test may drive any part. A parent's `pub use child::…` re-exports
//! are left out too: they forward a name, they do not use it.
//!
//! The graph is per file: a path resolves to the file of its longest
//! prefix that names a module (`crate::castor::colocate::Colocator` →
//! `castor/colocate.rs`, `crate::castor::BackToBack` → `castor/mod.rs`).

use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("readable").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src`: `lib.rs`/`main.rs` → [],
/// `a.rs` and `a/mod.rs` → [a], `a/b.rs` → [a, b].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    match last.as_str() {
        "lib.rs" | "main.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// `text` without comments, string literals and `#[cfg(test)]` items
/// (a module or function after the attribute, to its matching brace, or
/// a `mod x;` line). Character literals are left: they hold no paths.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if text[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if text[i..].starts_with("/*") {
            i = text[i..].find("*/").map_or(b.len(), |k| i + k + 2);
        } else if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if text[i..].starts_with("#[cfg(test)]") {
            i += "#[cfg(test)]".len();
            // Skip the item: to `;` when that comes before any `{`, else to the matching brace.
            let rest = &text[i..];
            match (rest.find(';'), rest.find('{')) {
                (Some(semi), Some(open)) if semi < open => i += semi + 1,
                (Some(semi), None) => i += semi + 1,
                (_, Some(open)) => {
                    let mut depth = 0usize;
                    let mut k = i + open;
                    while k < b.len() {
                        match b[k] {
                            b'{' => depth += 1,
                            b'}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                    i = k + 1;
                }
                (None, None) => i = b.len(),
            }
        } else {
            let c = text[i..].chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The module paths `code` refers to from module `here`: each `crate::…`,
/// `super::…` and `self::…` path, brace groups of `use` expanded.
/// Re-export lines (`pub use`, `pub(crate) use`) are skipped.
fn references(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for statement in code.split(';') {
        let trimmed = statement.trim_start_matches(|c: char| c.is_whitespace() || c == '{' || c == '}');
        if trimmed.starts_with("pub use") || trimmed.starts_with("pub(crate) use") {
            continue;
        }
        let s = statement.as_bytes();
        let mut i = 0;
        while i < s.len() {
            let word_start = i == 0 || !(s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_' || s[i - 1] == b':');
            let rest = &s[i..];
            let root = ["crate::", "super::", "self::"].into_iter().find(|r| rest.starts_with(r.as_bytes()));
            if let (true, Some(root)) = (word_start, root) {
                let mut base: Vec<String> = match root {
                    "crate::" => Vec::new(),
                    "super::" => here[..here.len().saturating_sub(1)].to_vec(),
                    _ => here.to_vec(),
                };
                let mut k = i + root.len();
                // Further `super::` steps.
                while statement[k..].starts_with("super::") {
                    base.pop();
                    k += "super::".len();
                }
                let (paths, end) = expand(statement, k);
                for p in paths {
                    let mut full = base.clone();
                    full.extend(p);
                    out.push(full);
                }
                i = end.max(i + 1);
            } else {
                i += 1;
            }
        }
    }
    out
}

/// The paths of a `use` tree starting at byte `k` of `s` (`a::b::C`,
/// `a::{b, c::D}`), and where it ends.
fn expand(s: &str, mut k: usize) -> (Vec<Vec<String>>, usize) {
    let b = s.as_bytes();
    let mut prefix = Vec::new();
    loop {
        let start = k;
        while k < b.len() && (b[k].is_ascii_alphanumeric() || b[k] == b'_') {
            k += 1;
        }
        if k > start {
            prefix.push(s[start..k].to_string());
        }
        if s[k..].starts_with("::") {
            k += 2;
            if k < b.len() && b[k] == b'{' {
                let mut out = Vec::new();
                k += 1;
                loop {
                    while k < b.len() && (b[k] as char).is_whitespace() {
                        k += 1;
                    }
                    if k >= b.len() || b[k] == b'}' {
                        return (out, k + 1);
                    }
                    let (inner, end) = expand(s, k);
                    for p in inner {
                        let mut full = prefix.clone();
                        full.extend(p);
                        out.push(full);
                    }
                    k = end;
                    while k < b.len() && (b[k] as char).is_whitespace() {
                        k += 1;
                    }
                    if k < b.len() && b[k] == b',' {
                        k += 1;
                    }
                }
            }
            continue;
        }
        return (vec![prefix], k);
    }
}

/// Each crate's file graph; the circles (strongly connected sets of two or
/// more files, or a file naming itself through a path is not a circle).
fn circles() -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .expect("crates/")
        .map(|e| e.expect("entry").path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    for src in crates {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        // Files that are test modules (`#[cfg(test)] mod x;` in their parent) are left out.
        let modules: BTreeMap<Vec<String>, PathBuf> = files.iter().map(|f| (module_of(&src, f), f.clone())).collect();
        let mut test_modules = BTreeSet::new();
        for (m, f) in &modules {
            let text = std::fs::read_to_string(f).expect("readable");
            for line in text.lines().collect::<Vec<_>>().windows(2) {
                if line[0].trim() == "#[cfg(test)]"
                    && let Some(name) = line[1].trim().strip_prefix("mod ").and_then(|r| r.strip_suffix(';'))
                {
                    let mut child = m.clone();
                    child.push(name.to_string());
                    test_modules.insert(child);
                }
            }
        }
        let mut graph = DiGraph::<String, ()>::new();
        let nodes: BTreeMap<&Vec<String>, _> = modules
            .iter()
            .filter(|(m, _)| !test_modules.iter().any(|t| m.starts_with(t)))
            .map(|(m, f)| (m, graph.add_node(f.strip_prefix(workspace()).unwrap_or(f).display().to_string())))
            .collect();
        for (m, &from) in &nodes {
            let code = code_only(&std::fs::read_to_string(&modules[*m]).expect("readable"));
            let mut targets = BTreeSet::new();
            for path in references(&code, m) {
                // The longest prefix that names a module.
                let target = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| nodes.contains_key(p));
                if let Some(t) = target
                    && &t != *m
                {
                    targets.insert(nodes[&t]);
                }
            }
            for to in targets {
                graph.add_edge(from, to, ());
            }
        }
        for scc in tarjan_scc(&graph) {
            if scc.len() > 1 {
                let mut names: Vec<String> = scc.iter().map(|&n| graph[n].clone()).collect();
                names.sort();
                found.push(names);
            }
        }
    }
    found
}

/// Most lines a Rust file of the workspace may hold (issue 72): past it a
/// file holds more than one idea, or its tests belong in a file of their
/// own.
const MAX_LINES: usize = 1200;

#[test]
fn no_rust_file_is_over_the_line_limit() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates"), &mut files);
    let long: Vec<(String, usize)> = files
        .iter()
        .map(|f| (f.strip_prefix(workspace()).unwrap_or(f).display().to_string(), std::fs::read_to_string(f)))
        .map(|(name, text)| (name, text.expect("readable").lines().count()))
        .filter(|&(_, n)| n > MAX_LINES)
        .collect();
    assert!(files.len() > 100, "found only {} files", files.len());
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}

#[test]
fn no_crate_has_files_that_import_each_other_in_a_circle() {
    let circles = circles();
    assert!(circles.is_empty(), "import circles (each a set of files that reach one another): {circles:#?}");
}

#[test]
fn the_reader_finds_paths_in_use_trees_and_in_code() {
    // What the check above rests on, by hand: a nested use tree, a path in
    // code, super:: steps, and what it leaves out (comments, strings,
    // re-exports, test modules).
    let here = vec!["castor".to_string(), "colocate".to_string()];
    let code = code_only(
        "use crate::order::{deserving_and_losers, inner::{A, B}};\n\
         // use crate::commented::Out;\n\
         fn f() { let s = \"crate::in_string\"; crate::compose::by_name(\"x\"); super::theorem::pair(); }\n\
         pub use crate::reexported::X;\n\
         #[cfg(test)]\nmod tests { use crate::tested::Y; }\n",
    );
    let refs = references(&code, &here);
    let v = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        refs,
        vec![
            v(&["order", "deserving_and_losers"]),
            v(&["order", "inner", "A"]),
            v(&["order", "inner", "B"]),
            v(&["compose", "by_name"]),
            v(&["castor", "theorem", "pair"]),
        ]
    );
}
