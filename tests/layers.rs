//! The architecture as a test: the crate's layers import only downwards
//! (schedule < reconcile < apiserver < actor < shard < admin < cli; telemetry, memory,
//! clock, bucket and k8s_proto beside them all), and no two modules of src/ or loadtest/src
//! (nor deploy/local/harness/src) import each other, directly or through
//! others; module roots and the README stay short. Reads the sources; no
//! cluster needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: [&str; 7] = [
    "schedule",
    "reconcile",
    "apiserver",
    "actor",
    "shard",
    "admin",
    "cli",
];
const BESIDE: [&str; 6] = [
    "telemetry",
    "memory",
    "clock",
    "bucket",
    "k8s_proto",
    "release",
];

/// Module path (`shard::ownership`) -> the modules it refers to.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).expect("under the root");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(end) => &text[..end],
        None => text,
    };
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers of a path starting at `at` in `code` (`a::b::C`).
fn path_at(code: &str, at: usize) -> Vec<&str> {
    let rest = &code[at..];
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(rest.len());
    rest[..end].split("::").filter(|s| !s.is_empty()).collect()
}

/// The paths a reference at `at` names: one (`a::b::C`), or each of a
/// group's (`{a, b::C}` names `a` and `b::C`; an inner group, its prefix).
fn paths_at(code: &str, at: usize) -> Vec<Vec<&str>> {
    let rest = &code[at..];
    if !rest.starts_with('{') {
        return vec![path_at(code, at)];
    }
    let mut depth = 0;
    let mut item_start = at + 1;
    let mut paths = Vec::new();
    for (offset, c) in rest.char_indices() {
        match c {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                let item = &code[item_start..at + offset];
                let trimmed = item.trim_start();
                let start = item_start + (item.len() - trimmed.len());
                paths.push(path_at(code, start));
                item_start = at + offset + 1;
                if c == '}' {
                    break;
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    paths.retain(|p| !p.is_empty());
    paths
}

/// The longest prefix of `path` that is a module of `modules`.
fn resolve(modules: &BTreeSet<String>, path: &[&str]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
}

fn graph(root: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.retain(|f| {
        // Unit-test files are tests, not architecture.
        !f.components().any(|c| c.as_os_str() == "tests")
            && f.file_name().is_some_and(|n| n != "tests.rs")
    });
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(root, f).join("::"))
        .collect();
    let mut graph = Graph::new();
    for file in &files {
        let module = module_of(root, file);
        let name = module.join("::");
        let text = code(&std::fs::read_to_string(file).expect("read a source file"));
        let mut refers = BTreeSet::new();
        for (at, _) in text.match_indices("crate::") {
            for path in paths_at(&text, at + "crate::".len()) {
                if let Some(target) = resolve(&modules, &path) {
                    refers.insert(target);
                }
            }
        }
        for (at, _) in text.match_indices("super::") {
            let preceded_by_path = text[..at].ends_with("::");
            if preceded_by_path {
                continue;
            }
            let parent: Vec<&str> = module[..module.len().saturating_sub(1)]
                .iter()
                .map(String::as_str)
                .collect();
            for named in paths_at(&text, at + "super::".len()) {
                let mut path = parent.clone();
                path.extend(named);
                if let Some(target) = resolve(&modules, &path) {
                    refers.insert(target);
                }
            }
        }
        // A parent naming its own child by a relative path (`use child::X`,
        // `child::f()`): the edge a child importing its parent closes.
        for child in modules.iter().filter_map(|m| {
            m.strip_prefix(&format!("{name}::"))
                .filter(|rest| !rest.contains("::"))
        }) {
            for (at, _) in text.match_indices(&format!("{child}::")) {
                let starts_a_path = text[..at]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'));
                if !starts_a_path {
                    continue;
                }
                for named in paths_at(&text, at + child.len() + 2) {
                    let mut path: Vec<&str> = module.iter().map(String::as_str).collect();
                    path.push(child);
                    path.extend(named);
                    if let Some(target) = resolve(&modules, &path) {
                        refers.insert(target);
                    }
                }
            }
        }
        refers.remove(&name);
        refers.retain(|target| !target.is_empty());
        graph.insert(name, refers);
    }
    graph
}

/// A cycle through `from`, if any, as the list of modules on it.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        node: &str,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut found = stack[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(graph, next, stack, done) {
                return Some(found);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

/// The cycles allowed, each named with why; the list only shrinks. Empty
/// since the gateway's handle and state left its module root, which its
/// event workers imported.
const ALLOWED_CYCLES: [&str; 0] = [];

/// Every pair of modules that import each other; if none, one longer
/// cycle, if any.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut found = BTreeSet::new();
    for (from, targets) in graph {
        for to in targets {
            if from < to && graph.get(to).is_some_and(|back| back.contains(from)) {
                found.insert(format!("{from} <-> {to}"));
            }
        }
    }
    if found.is_empty()
        && let Some(longer) = cycle(graph)
    {
        found.insert(longer.join(" -> "));
    }
    found.into_iter().collect()
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

#[test]
fn layers_import_only_downwards() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&root);
    assert!(graph.contains_key("shard::ownership"), "{graph:?}");
    let mut wrong = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            let (a, b) = (top(from), top(to));
            if a == b || BESIDE.contains(&b) {
                continue;
            }
            let layer = |m| LAYERS.iter().position(|l| *l == m);
            let allowed = match (layer(a), layer(b)) {
                (Some(from), Some(to)) => from > to,
                // Beside the layers: may use each other, nothing else.
                _ => false,
            };
            if !allowed {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layers: {wrong:#?}");
}

#[test]
fn no_two_modules_import_each_other() {
    // Each folder with the fewest modules the parser must find in it.
    for (folder, at_least) in [
        ("src", 40),
        ("loadtest/src", 6),
        ("deploy/local/harness/src", 4),
    ] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
        let graph = graph(&root);
        assert!(graph.len() >= at_least, "{folder}: {graph:?}");
        let mut all = cycles(&graph);
        all.retain(|found| !ALLOWED_CYCLES.contains(&found.as_str()));
        assert!(
            all.is_empty(),
            "{folder}: {} import cycles: {all:#?}",
            all.len()
        );
    }
}

#[test]
fn grouped_imports_name_each_of_their_paths() {
    let code = "use crate::{apimetrics, create::{self, Plan}, report};\nuse crate::mix::Mix;";
    let at = code.find("crate::").expect("a path") + "crate::".len();
    assert_eq!(
        paths_at(code, at),
        [vec!["apimetrics"], vec!["create"], vec!["report"]]
    );
    let at = code.rfind("crate::").expect("a path") + "crate::".len();
    assert_eq!(paths_at(code, at), [vec!["mix", "Mix"]]);
}

/// Lines a module root (`mod.rs`, `lib.rs`, `main.rs`) may have: past it,
/// a root usually holds two ideas, one of which wants a file of its own.
const MODULE_ROOT_LINES: usize = 500;
/// Lines the README may have: a front door, not the docs.
const README_LINES: usize = 250;

#[test]
fn module_roots_and_the_readme_stay_short() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for folder in ["src", "loadtest/src", "deploy/local/harness/src", "tests"] {
        rust_files(&repo.join(folder), &mut files);
    }
    let lines = |path: &Path| {
        std::fs::read_to_string(path)
            .expect("read a source file")
            .lines()
            .count()
    };
    let roots: Vec<&PathBuf> = files
        .iter()
        .filter(|path| {
            path.file_name().is_some_and(|name| {
                ["mod.rs", "lib.rs", "main.rs"].contains(&&*name.to_string_lossy())
            })
        })
        .collect();
    assert!(roots.len() >= 20, "{roots:?}");
    let long: Vec<(String, usize)> = roots
        .into_iter()
        .map(|path| (path.display().to_string(), lines(path)))
        .filter(|(_, lines)| *lines > MODULE_ROOT_LINES)
        .collect();
    assert!(
        long.is_empty(),
        "module roots past {MODULE_ROOT_LINES} lines: {long:?}"
    );
    let readme = lines(&repo.join("README.md"));
    assert!(
        readme < README_LINES,
        "README.md has {readme} lines (under {README_LINES})"
    );
}

/// Fields a struct of src/ may hold: about as many names as a reader keeps
/// in mind at once. Past it a type usually holds two ideas, each wanting a
/// type of its own with its own invariants (`Ownership` had 24, changed in
/// 13 files).
const STRUCT_FIELDS: usize = 12;

/// The structs past it, each at its count (it may only come down, and the
/// entry goes once within) and why: a catalogue (independent fields, no
/// invariant between any two), a wire format, or a type still to be split.
const STRUCTS_PAST: [(&str, usize, &str); 3] = [
    ("Metrics", 41, "a catalogue: one handle per metric family"),
    (
        "RunArgs",
        37,
        "a catalogue: `shardcron run`'s flags, as clap derives them",
    ),
    (
        "ShardReport",
        19,
        "a wire format: /debug/shards' JSON, field for field",
    ),
];

/// Each named-field struct of `text` with its field count (fields under
/// `#[cfg(test)]` left out), by the layout rustfmt gives.
fn struct_fields(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let Some(rest) = [
            "pub struct ",
            "pub(crate) struct ",
            "pub(super) struct ",
            "struct ",
        ]
        .iter()
        .find_map(|prefix| trimmed.strip_prefix(prefix)) else {
            continue;
        };
        if !rest.ends_with('{') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let field_indent = " ".repeat(indent + 4);
        let end = format!("{}}}", " ".repeat(indent));
        let mut count = 0;
        let mut test_only = false;
        for body in lines[at + 1..].iter().take_while(|l| !l.starts_with(&end)) {
            let Some(inner) = body.strip_prefix(&field_indent) else {
                continue;
            };
            if inner.starts_with("#[cfg(test)]") {
                test_only = true;
            } else if inner.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && inner.contains(':')
                && !inner.starts_with("//")
            {
                count += usize::from(!test_only);
                test_only = false;
            }
        }
        found.push((name, count));
    }
    found
}

#[test]
fn structs_hold_what_a_reader_can() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&repo.join("src"), &mut files);
    let mut past = BTreeMap::new();
    for file in files.iter().filter(|path| {
        // Test code: its tables and worlds are read as tables.
        !path.ends_with("tests.rs") && !path.components().any(|c| c.as_os_str() == "tests")
    }) {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (name, fields) in struct_fields(&text) {
            if fields > STRUCT_FIELDS {
                past.insert(name, fields);
            }
        }
    }
    for (name, fields) in &past {
        let listed = STRUCTS_PAST.iter().find(|(listed, ..)| listed == name);
        match listed {
            Some((_, most, _)) => assert!(
                fields <= most,
                "{name} has {fields} fields, more than the {most} it is listed at"
            ),
            None => panic!(
                "{name} has {fields} fields (past {STRUCT_FIELDS}): split it into types that each hold one idea"
            ),
        }
    }
    for (name, most, _) in STRUCTS_PAST {
        assert_eq!(
            past.get(name),
            Some(&most),
            "{name} is listed at {most} fields: write its count now (a limit once reached stays reached)"
        );
    }
}

#[test]
fn struct_fields_are_counted_as_rustfmt_lays_them_out() {
    let text = "pub struct A {\n    pub a: u8,\n    /// b: doc\n    b: u8,\n    #[cfg(test)]\n    flaw: u8,\n}\nstruct B(u8);\n    pub(super) struct C {\n        c: Vec<(u8, u8)>,\n    }\n";
    assert_eq!(
        struct_fields(text),
        [("A".to_owned(), 2), ("C".to_owned(), 1)]
    );
}

/// Reads of the wall clock. Only src/clock/ makes them: the rest take the
/// `Clock` they were handed (the supervisor, the wheel, the actors) or read
/// `Clock::System` at the shell's edge, so a test can run them on paused time.
const WALL_CLOCK_READS: [&str; 3] = ["Timestamp::now", "SystemTime::now", "Zoned::now"];

#[test]
fn only_the_clock_reads_the_wall_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let readers: Vec<String> = files
        .iter()
        .filter(|path| !path.starts_with(src.join("clock")))
        .filter(|path| {
            path.file_name().is_some_and(|name| name != "tests.rs")
                && !path.components().any(|part| part.as_os_str() == "tests")
        })
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).expect("read a source file");
            // A file's own unit tests (`#[cfg(test)] mod tests` at its end)
            // may read it.
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
            WALL_CLOCK_READS
                .iter()
                .find(|read| code.contains(*read))
                .map(|read| format!("{} ({read})", path.display()))
        })
        .collect();
    assert!(readers.len() < files.len(), "src/ was read");
    assert!(
        readers.is_empty(),
        "the wall clock read outside src/clock/ (take a Clock): {readers:?}"
    );
}

/// What git keeps of the load test's reports: their tables, plots and
/// compressed data, not megabytes of raw JSON beside the code.
const REPORT_BYTES: u64 = 3 * 1024 * 1024;

#[test]
fn the_load_test_reports_stay_small() {
    fn walk(folder: &Path, bytes: &mut u64, raw: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(folder).expect("read a report folder") {
            let path = entry.expect("a report entry").path();
            if path.is_dir() {
                walk(&path, bytes, raw);
            } else {
                *bytes += std::fs::metadata(&path).expect("a report file").len();
                if path
                    .extension()
                    .is_some_and(|extension| extension == "json")
                {
                    raw.push(path);
                }
            }
        }
    }
    let (mut bytes, mut raw) = (0, Vec::new());
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("loadtest/report"),
        &mut bytes,
        &mut raw,
    );
    assert!(
        raw.is_empty(),
        "raw JSON in loadtest/report (compress it: zstd -19 --rm): {raw:?}"
    );
    assert!(
        bytes < REPORT_BYTES,
        "loadtest/report holds {bytes} bytes (under {REPORT_BYTES})"
    );
}

#[test]
fn a_parent_and_its_child_importing_each_other_is_a_cycle() {
    let root = std::env::temp_dir().join(format!("layers-{}", std::process::id()));
    let parent = root.join("parent");
    std::fs::create_dir_all(&parent).expect("a temporary folder");
    std::fs::write(root.join("lib.rs"), "mod parent;\n").expect("write");
    std::fs::write(
        parent.join("mod.rs"),
        "mod child;\npub use child::Thing;\npub struct Other;\n",
    )
    .expect("write");
    std::fs::write(
        parent.join("child.rs"),
        "use super::Other;\npub struct Thing(Other);\n",
    )
    .expect("write");
    let found = cycles(&graph(&root));
    std::fs::remove_dir_all(&root).expect("remove the temporary folder");
    assert_eq!(found, ["parent <-> parent::child"]);
}
