//! `cargo xtask ci`'s tidy step: no module loops inside a crate, and every reference to the
//! protocol specification resolves ([`protocol_refs`]).
//!
//! For every crate under `crates/` (its library and each binary), the module tree is followed
//! from the crate root through its `mod x;` declarations, and every file is scanned for the
//! paths it names inside its own crate: `use crate::…`, `use super::…`, and `crate::x::…` /
//! `super::x::…` anywhere in code (comments and string literals are skipped, and so are
//! `#[cfg(test)]` items: test modules may use anything). An import counts between *siblings*
//! only: `crate::a::x` naming `crate::b::y` is an edge `a → b` among the crate's top-level
//! modules, `crate::a::x` naming `crate::a::y` an edge `x → y` among `a`'s submodules. A module
//! naming its own ancestor or descendant (`use super::*` in a child, a parent using its
//! children) is no edge. A name a module file imports or re-exports counts as the module it
//! comes from (`crate::Engine`, re-exported by `lib.rs` from `run`, is `run`; globs too).
//! Every strongly connected group of two or more siblings is a loop.
//!
//! A loop passes only when [`ALLOWED`] lists all of its modules; an allowlisted loop that no
//! longer exists fails too, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Loops a crate may keep for now, by crate root: each found loop must lie within one entry of
/// its crate. None today: every crate's modules import one way, and a new loop fails `ci`.
const ALLOWED: &[(&str, &[&str])] = &[];

/// The whole tidy step: [`check_loops`] and [`protocol_refs::check`]; the error holds the
/// report of each that failed.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let reports: Vec<String> = [check_loops(root), protocol_refs::check(root)]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    if reports.is_empty() {
        Ok(())
    } else {
        Err(reports.join("\n"))
    }
}

/// Checks every crate under `root/crates` for module loops; the error lists each loop not
/// allowed (with the imports that make it) and each allowlist entry no longer needed.
fn check_loops(root: &Path) -> Result<(), String> {
    let mut loops = Vec::new();
    for crate_root in crate_roots(&root.join("crates")) {
        let label = crate_root
            .strip_prefix(root)
            .unwrap_or(&crate_root)
            .to_string_lossy()
            .replace('\\', "/");
        let files = module_files(&crate_root)?;
        let graph = Graph::of(&files, root);
        loops.extend(graph.loops().into_iter().map(|l| (label.clone(), l)));
    }
    judge(&loops, ALLOWED)
}

/// Compares the loops found with the allowlist.
fn judge(loops: &[(String, Loop)], allowed: &[(&str, &[&str])]) -> Result<(), String> {
    let mut report = String::new();
    let mut used = vec![false; allowed.len()];
    for (label, found) in loops {
        let members: BTreeSet<&str> = found.members.iter().map(String::as_str).collect();
        let entry = allowed.iter().position(|(crate_root, entry)| {
            crate_root == label && members.iter().all(|m| entry.contains(m))
        });
        match entry {
            Some(i) => used[i] = true,
            None => {
                let _ = writeln!(report, "  {label}: {}", found.members.join(" ↔ "));
                for (from, to, at) in &found.edges {
                    let _ = writeln!(report, "    {from} uses {to} ({at})");
                }
            }
        }
    }
    if !report.is_empty() {
        report.insert_str(
            0,
            "module loops (move what both sides use into a module below both):\n",
        );
    }
    for ((label, entry), used) in allowed.iter().zip(used) {
        if !used {
            let _ = writeln!(
                report,
                "allowed loop gone, remove its entry from xtask/src/tidy.rs: {label}: {}",
                entry.join(" ↔ ")
            );
        }
    }
    if report.is_empty() {
        Ok(())
    } else {
        Err(report.trim_end().to_owned())
    }
}

/// Every crate root under `crates`: `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`,
/// `src/bin/*/main.rs`.
fn crate_roots(crates: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for dir in sorted_entries(crates) {
        let src = dir.join("src");
        for name in ["lib.rs", "main.rs"] {
            if src.join(name).is_file() {
                roots.push(src.join(name));
            }
        }
        for bin in sorted_entries(&src.join("bin")) {
            if bin.is_dir() && bin.join("main.rs").is_file() {
                roots.push(bin.join("main.rs"));
            } else if bin.extension().is_some_and(|e| e == "rs") {
                roots.push(bin);
            }
        }
    }
    roots
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

/// One file of a crate's module tree.
#[derive(Debug)]
struct ModuleFile {
    /// Its module path (`[]` for the crate root).
    module: Vec<String>,
    /// Where it is, for reports.
    path: PathBuf,
    /// What it says about modules.
    scan: Scan,
}

/// The crate's files, found by following `mod x;` from its root (test-only modules left out).
fn module_files(crate_root: &Path) -> Result<Vec<ModuleFile>, String> {
    let mut files = Vec::new();
    let mut queue = vec![(Vec::new(), crate_root.to_path_buf(), true)];
    while let Some((module, path, mod_rs)) = queue.pop() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let scan = scan(&text);
        // A root or mod.rs keeps its children beside it; `a.rs` keeps them in `a/`.
        let dir = match (mod_rs, path.parent(), path.file_stem()) {
            (true, Some(parent), _) => parent.to_path_buf(),
            (false, Some(parent), Some(stem)) => parent.join(stem),
            _ => continue,
        };
        for child in &scan.children {
            let mut child_dir = dir.clone();
            child_dir.extend(&child[..child.len() - 1]);
            let name = &child[child.len() - 1];
            let flat = child_dir.join(format!("{name}.rs"));
            let nested = child_dir.join(name).join("mod.rs");
            let mut child_module = module.clone();
            child_module.extend(child.iter().cloned());
            if flat.is_file() {
                queue.push((child_module, flat, false));
            } else if nested.is_file() {
                queue.push((child_module, nested, true));
            }
        }
        files.push(ModuleFile { module, path, scan });
    }
    files.sort_by(|a, b| a.module.cmp(&b.module));
    Ok(files)
}

/// A loop: sibling modules (paths from the crate root, `/`-separated) that import each other,
/// and the imports between them (`from`, `to`, where).
#[derive(Debug, PartialEq)]
struct Loop {
    members: Vec<String>,
    edges: Vec<(String, String, String)>,
}

/// The import graph between siblings: edges by parent module, each with where it was seen first.
#[derive(Debug, Default)]
struct Graph {
    edges: BTreeMap<Vec<String>, BTreeMap<(String, String), String>>,
}

impl Graph {
    fn of(files: &[ModuleFile], root: &Path) -> Graph {
        let modules: BTreeMap<&[String], &Scan> = files
            .iter()
            .map(|f| (f.module.as_slice(), &f.scan))
            .collect();
        let mut graph = Graph::default();
        for file in files {
            let shown = file
                .path
                .strip_prefix(root)
                .unwrap_or(&file.path)
                .display()
                .to_string();
            for named in &file.scan.paths {
                let Some(target) = resolve(&file.module, named) else {
                    continue;
                };
                let target = land(&modules, target);
                graph.add(&file.module, &target, format!("{shown}:{}", named.line));
            }
        }
        graph
    }

    /// Adds `from` naming `to` as an edge between the siblings under their common parent,
    /// unless one contains the other.
    fn add(&mut self, from: &[String], to: &[String], at: String) {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == to.len() {
            return;
        }
        let parent = from[..common].to_vec();
        let key = (from[common].clone(), to[common].clone());
        self.edges
            .entry(parent)
            .or_default()
            .entry(key)
            .or_insert(at);
    }

    /// Every strongly connected group of two or more siblings (Tarjan's algorithm).
    fn loops(&self) -> Vec<Loop> {
        let mut loops = Vec::new();
        for (parent, edges) in &self.edges {
            let nodes: BTreeSet<&str> = edges
                .keys()
                .flat_map(|(a, b)| [a.as_str(), b.as_str()])
                .collect();
            let nodes: Vec<&str> = nodes.into_iter().collect();
            let index_of = |n: &str| nodes.iter().position(|m| *m == n).unwrap_or(0);
            let mut next = vec![Vec::new(); nodes.len()];
            for (a, b) in edges.keys() {
                next[index_of(a)].push(index_of(b));
            }
            for component in strongly_connected(&next) {
                if component.len() < 2 {
                    continue;
                }
                let path = |n: usize| {
                    parent
                        .iter()
                        .map(String::as_str)
                        .chain([nodes[n]])
                        .collect::<Vec<_>>()
                        .join("/")
                };
                let mut members: Vec<String> = component.iter().map(|&n| path(n)).collect();
                members.sort();
                let inside: BTreeSet<&str> = component.iter().map(|&n| nodes[n]).collect();
                let edges = edges
                    .iter()
                    .filter(|((a, b), _)| {
                        inside.contains(a.as_str()) && inside.contains(b.as_str())
                    })
                    .map(|((a, b), at)| (path(index_of(a)), path(index_of(b)), at.clone()))
                    .collect();
                loops.push(Loop { members, edges });
            }
        }
        loops
    }
}

/// Tarjan's strongly connected components of a graph given as successor lists.
fn strongly_connected(next: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        next: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.counter);
            self.low[v] = self.counter;
            self.counter += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.next[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort_unstable();
                self.out.push(component);
            }
        }
    }
    let n = next.len();
    let mut t = Tarjan {
        next,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
}

/// The module file an absolute path's item is defined in: the path's longest prefix that is a
/// module file, unless the next name is one that file imports (`pub use b::X;` in `a.rs`
/// makes `crate::a::X` land in `b`), directly or through a glob from a module file that has it.
fn land(modules: &BTreeMap<&[String], &Scan>, mut path: Vec<String>) -> Vec<String> {
    let prefix = |path: &[String]| {
        (0..=path.len())
            .rev()
            .find(|&n| modules.contains_key(&path[..n]))
            .unwrap_or(0)
    };
    // Bounded: imports that name each other in a ring end on the module reached last.
    for _ in 0..32 {
        let p = prefix(&path);
        let (module, rest) = path.split_at(p);
        let (Some(name), Some(scan)) = (rest.first(), modules.get(module)) else {
            break;
        };
        if scan.items.contains(name) {
            break;
        }
        let named = scan.imports.iter().find_map(|(named, binds)| match binds {
            Binds::Name(bound) if bound == name => resolve(module, named),
            _ => None,
        });
        let globbed = || {
            scan.imports.iter().find_map(|(named, binds)| {
                let from = resolve(module, named).filter(|_| *binds == Binds::Glob)?;
                let from_scan = modules.get(from.as_slice())?;
                from_scan
                    .provides(name)
                    .then(|| [from, vec![name.clone()]].concat())
            })
        };
        match named.or_else(globbed) {
            Some(target) => path = [target, rest[1..].to_vec()].concat(),
            None => break,
        }
    }
    let p = prefix(&path);
    path.truncate(p);
    path
}

/// A path a file names, as written (`crate`, `super` or `self` first), with its line.
#[derive(Clone, Debug, PartialEq)]
struct Named {
    segments: Vec<String>,
    /// Inline modules (`mod x { … }`) the path is written in, outermost first.
    scope: Vec<String>,
    line: usize,
}

/// The module a named path points into, from the crate root; `None` for a path outside the
/// crate (or one going above the root).
fn resolve(module: &[String], named: &Named) -> Option<Vec<String>> {
    let mut here: Vec<String> = module.iter().chain(&named.scope).cloned().collect();
    let mut segments = named.segments.iter().peekable();
    match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segments.next();
            here.clear();
        }
        Some("self") => {
            segments.next();
        }
        Some("super") => {
            while segments.peek().map(|s| s.as_str()) == Some("super") {
                segments.next();
                here.pop()?;
            }
        }
        _ => return None,
    }
    here.extend(segments.cloned());
    Some(here)
}

/// What one file says about modules: the children it declares (`mod x;`, as a path through
/// any inline modules it sits in), the in-crate paths it names, and the names its top level
/// defines and imports.
#[derive(Debug, Default, PartialEq)]
struct Scan {
    children: Vec<Vec<String>>,
    paths: Vec<Named>,
    /// Items defined at the top level (`fn`, `struct`, inline `mod`, …).
    items: BTreeSet<String>,
    /// Top-level `use` paths into the crate and what each binds.
    imports: Vec<(Named, Binds)>,
}

impl Scan {
    /// Whether `name` is defined or imported at the file's top level.
    fn provides(&self, name: &str) -> bool {
        self.items.contains(name)
            || self
                .imports
                .iter()
                .any(|(_, b)| matches!(b, Binds::Name(n) if n == name))
    }
}

/// What one path of a use tree binds.
#[derive(Clone, Debug, PartialEq)]
enum Binds {
    /// A name: the path's last segment, or its `as` alias.
    Name(String),
    /// Everything public in the module (`::*`).
    Glob,
    /// Nothing (`as _`).
    Nothing,
}

/// Scans a file's text, leaving out comments, literals and `#[cfg(test)]` items.
fn scan(text: &str) -> Scan {
    let tokens = lex(text);
    let mut out = Scan::default();
    // Inline modules open around the current token: (name, brace depth inside it).
    let mut scopes: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut test_item = false;
    let mut top_uses: Vec<(Named, Binds)> = Vec::new();
    let mut i = 0;
    let at = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    while i < tokens.len() {
        let t = at(i);
        // Attributes: `#[…]`, `#![…]`.
        if t == "#" {
            let open = if at(i + 1) == "!" { i + 2 } else { i + 1 };
            if at(open) == "[" {
                let close = matching(&tokens, open);
                let attr: Vec<&str> = tokens[open + 1..close]
                    .iter()
                    .map(|t| t.text.as_str())
                    .collect();
                let cfg_test = attr.first() == Some(&"cfg")
                    && attr.contains(&"test")
                    && !attr.contains(&"not");
                if cfg_test && open == i + 2 && depth == 0 && scopes.is_empty() {
                    // `#![cfg(test)]`: the whole file is a test module.
                    return Scan::default();
                }
                test_item |= cfg_test && open == i + 1;
                i = close + 1;
                continue;
            }
        }
        if test_item {
            i = item_end(&tokens, i) + 1;
            test_item = false;
            continue;
        }
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if scopes.last().is_some_and(|(_, d)| *d > depth) {
                    scopes.pop();
                }
            }
            "mod" if is_ident(at(i + 1)) => match at(i + 2) {
                ";" => {
                    if depth == 0 {
                        out.items.insert(at(i + 1).to_owned());
                    }
                    let mut child: Vec<String> = scopes.iter().map(|(n, _)| n.clone()).collect();
                    child.push(at(i + 1).to_owned());
                    out.children.push(child);
                    i += 3;
                    continue;
                }
                "{" => {
                    if depth == 0 {
                        out.items.insert(at(i + 1).to_owned());
                    }
                    depth += 1;
                    scopes.push((at(i + 1).to_owned(), depth));
                    i += 3;
                    continue;
                }
                _ => {}
            },
            "use" => {
                let end = item_end(&tokens, i);
                let mut paths = Vec::new();
                use_tree(&tokens[i + 1..end], Vec::new(), &mut paths);
                let scope: Vec<String> = scopes.iter().map(|(n, _)| n.clone()).collect();
                for (segments, binds) in paths {
                    let named = Named {
                        segments,
                        scope: scope.clone(),
                        line: tokens[i].line,
                    };
                    let in_crate = matches!(
                        named.segments.first().map(String::as_str),
                        Some("crate" | "super" | "self")
                    );
                    if in_crate {
                        out.paths.push(named.clone());
                    }
                    if depth == 0 {
                        // Relative ones may start with a child module: kept until the end.
                        top_uses.push((named, binds));
                    }
                }
                i = end + 1;
                continue;
            }
            "fn" | "struct" | "enum" | "union" | "trait" | "type" | "const" | "static" | "mod"
                if depth == 0 && is_ident(at(i + 1)) =>
            {
                out.items.insert(at(i + 1).to_owned());
            }
            "macro_rules" if depth == 0 && at(i + 1) == "!" => {
                out.items.insert(at(i + 2).to_owned());
            }
            "crate" | "super"
                if at(i + 1) == "::" && !matches!(at(i.wrapping_sub(1)), "$" | "::") =>
            {
                let mut segments = vec![t.to_owned()];
                let mut j = i + 1;
                while at(j) == "::" && (is_ident(at(j + 1)) || at(j + 1) == "super") {
                    segments.push(at(j + 1).to_owned());
                    j += 2;
                }
                out.paths.push(Named {
                    segments,
                    scope: scopes.iter().map(|(n, _)| n.clone()).collect(),
                    line: tokens[i].line,
                });
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    // A relative path starting with one of the file's own modules is a `self::` path; any
    // other is another crate's.
    for (mut named, binds) in top_uses {
        let first = named.segments.first().map_or("", String::as_str);
        let own = out.children.iter().any(|c| c.len() == 1 && c[0] == first)
            || (is_ident(first) && out.items.contains(first));
        if own {
            named.segments.insert(0, "self".into());
        } else if !matches!(first, "crate" | "super" | "self") {
            continue;
        }
        out.imports.push((named, binds));
    }
    out
}

/// Flattens a use tree (`a::{self, b, c::*, d as e}`) into its paths and what each binds.
fn use_tree(tokens: &[Token], prefix: Vec<String>, out: &mut Vec<(Vec<String>, Binds)>) {
    let mut path = prefix;
    let mut binds = None;
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i].text.as_str() {
            "::" => i += 1,
            "*" => {
                binds = Some(Binds::Glob);
                i += 1;
            }
            "{" => {
                let close = matching(tokens, i);
                let inner = &tokens[i + 1..close.min(tokens.len())];
                let mut start = 0;
                let mut depth = 0usize;
                for (k, t) in inner.iter().enumerate() {
                    match t.text.as_str() {
                        "{" => depth += 1,
                        "}" => depth = depth.saturating_sub(1),
                        "," if depth == 0 => {
                            use_tree(&inner[start..k], path.clone(), out);
                            start = k + 1;
                        }
                        _ => {}
                    }
                }
                use_tree(&inner[start..], path.clone(), out);
                return;
            }
            "as" => {
                binds = Some(match tokens.get(i + 1).map(|t| t.text.as_str()) {
                    Some(alias) if is_ident(alias) => Binds::Name(alias.to_owned()),
                    _ => Binds::Nothing,
                });
                break;
            }
            // `a::{self}` is `a`.
            "self" if !path.is_empty() => i += 1,
            s if is_ident(s) || matches!(s, "self" | "super" | "crate") => {
                path.push(s.to_owned());
                i += 1;
            }
            _ => i += 1,
        }
    }
    if let Some(last) = path.last() {
        let binds = binds.unwrap_or_else(|| Binds::Name(last.clone()));
        out.push((path, binds));
    }
}

/// The index of the bracket closing the one at `open` (or the last token).
fn matching(tokens: &[Token], open: usize) -> usize {
    let (o, c) = match tokens[open].text.as_str() {
        "[" => ("[", "]"),
        "(" => ("(", ")"),
        _ => ("{", "}"),
    };
    let mut depth = 0usize;
    for (k, t) in tokens.iter().enumerate().skip(open) {
        if t.text == o {
            depth += 1;
        } else if t.text == c {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    tokens.len().saturating_sub(1)
}

/// The last token of the item starting at `start`: its `;`, or the brace closing its body
/// (a use tree's braces, after `::`, are not a body).
fn item_end(tokens: &[Token], start: usize) -> usize {
    let mut k = start;
    while k < tokens.len() {
        match tokens[k].text.as_str() {
            ";" => return k,
            "{" if k > start && tokens[k - 1].text == "::" => k = matching(tokens, k),
            "{" => return matching(tokens, k),
            "(" | "[" => k = matching(tokens, k),
            _ => {}
        }
        k += 1;
    }
    tokens.len().saturating_sub(1)
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c == '_' || c.is_alphabetic())
        && !matches!(s, "crate" | "self" | "super")
}

/// A token: an identifier or keyword, `::`, or one punctuation character.
#[derive(Debug)]
struct Token {
    text: String,
    line: usize,
}

/// Splits Rust source into tokens, dropping comments, string, char and number literals and
/// lifetimes.
fn lex(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1, &mut line);
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                // Past the quote, the backslash and the escaped character.
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i] == '_' || chars[i].is_alphanumeric()) {
                    i += 1;
                }
            }
        } else if c == '_' || c.is_alphabetic() {
            let start = i;
            while i < chars.len() && (chars[i] == '_' || chars[i].is_alphanumeric()) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // Prefixed literals: b"…", r"…", r#"…"#, br#"…"#, c"…", b'x'.
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if raw && (at(i) == '"' || at(i) == '#') {
                let mut hashes = 0;
                while at(i + hashes) == '#' {
                    hashes += 1;
                }
                if at(i + hashes) == '"' {
                    i = skip_raw_string(&chars, i + hashes + 1, hashes, &mut line);
                    continue;
                }
            }
            if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&chars, i + 1, &mut line);
                continue;
            }
            if word == "b" && at(i) == '\'' {
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                continue;
            }
            if word == "r" && at(i) == '#' {
                // A raw identifier: r#type.
                i += 1;
                continue;
            }
            tokens.push(Token { text: word, line });
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i] == '_' || chars[i].is_alphanumeric()) {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    tokens
}

/// Skips a string literal's body from `i` (after its opening quote); returns the index after
/// its closing quote.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '"' => return i + 1,
            c => {
                *line += usize::from(c == '\n');
                i += 1;
            }
        }
    }
    i
}

/// Skips a raw string's body from `i`; it ends at a quote followed by `hashes` hashes.
fn skip_raw_string(chars: &[char], mut i: usize, hashes: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        *line += usize::from(chars[i] == '\n');
        i += 1;
    }
    i
}

/// References to the protocol specification (`docs/protocol.md`).
///
/// A `§` followed by a section number (`§2.16`, `§4`) anywhere in the scanned text names a
/// section of the protocol, and so does a link or path ending in `protocol.md#s2.16` (and, in
/// the protocol itself, a link `(#s2.16)`). Every one must name a section that exists. A section
/// is a heading of `docs/protocol.md` (or of a page in `docs/protocol/`) that starts with its
/// explicit anchor and its number, `### <a name="s2.16"></a>2.16 Tool close-out`; the anchor
/// must be `s` and the number, and each number may be used once.
///
/// The scanned text must also not mention the documents the protocol replaced, which do not
/// ship with penguin (`FORBIDDEN`); `ALLOWED_MENTIONS` lists the few mentions that are code
/// rather than a reference, and, like the loop allowlist, only shrinks.
///
/// Scanned: every file under `crates/` and `docs/` (and the repository's top-level Markdown)
/// whose extension is in `TEXT_EXTENSIONS`, skipping `target/`, `node_modules/` and hidden
/// folders. Every problem is reported, as `path:line: what`.
pub(crate) mod protocol_refs {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    /// The protocol specification, relative to the repository root.
    pub(crate) const PROTOCOL: &str = "docs/protocol.md";

    /// A folder of further protocol pages, when the specification is split.
    const PROTOCOL_PAGES: &str = "docs/protocol";

    /// What is scanned, relative to the repository root: folders, walked, and single files.
    const SCANNED: &[&str] = &["crates", "docs", "README.md", "CONTRIBUTING.md"];

    /// The extensions of the files scanned.
    const TEXT_EXTENSIONS: &[&str] = &["rs", "md", "js", "html", "css", "toml"];

    /// Mentions of documents that are not part of penguin: a reader of the published crates or
    /// of the repository cannot follow them. The protocol says it all in penguin's words.
    const FORBIDDEN: &[&str] = &[
        "../shared",
        "shared/seed/",
        "shared/spec/",
        "message-flow.md",
        "reference-behaviour.md",
    ];

    /// Crates whose doc comments cite the protocol as plain text rather than as a link to
    /// `penguin_omni_protocol::spec`, with why. Everywhere else under `crates/*/src`, a `§` in a
    /// doc comment is a link a reader of rustdoc can click:
    /// `[§2.16](penguin_omni_protocol::spec#s2.16)` (`crate::spec#s2.16` in the protocol crate
    /// itself).
    const PLAIN_REF_CRATES: &[(&str, &str)] = &[
        (
            "merge-queue",
            "depends on no other penguin crate, so it cannot link to the spec",
        ),
        ("cluster", "does not depend on the protocol crate"),
        ("cli", "a binary: its docs are not published"),
    ];

    /// Forbidden mentions a file may keep for now, with why: (path, mention, reason).
    const ALLOWED_MENTIONS: &[(&str, &str, &str)] = &[(
        "crates/agent/benches/scenario_floor.rs",
        "../shared",
        "the bench runs an optional generator from beside the repository, and says so when it is missing",
    )];

    /// One section of the protocol.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub(crate) struct Section {
        /// The page it is on, relative to the repository root.
        pub(crate) page: String,
        /// Its line there.
        pub(crate) line: usize,
    }

    /// Runs the check on the repository at `root`.
    pub(crate) fn check(root: &Path) -> Result<(), String> {
        check_with(root, ALLOWED_MENTIONS)
    }

    /// [`check`] with `allowed` as the forbidden mentions files may keep.
    fn check_with(root: &Path, allowed: &[(&str, &str, &str)]) -> Result<(), String> {
        let mut problems = Vec::new();
        let sections = sections(root, &mut problems);
        for path in scanned_files(root) {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let label = relative(root, &path);
            problems.extend(check_text(&label, &text, &sections, allowed));
        }
        problems.extend(unused_allowances(root, allowed));
        report(problems)
    }

    /// The report for `problems`, sorted by path and line.
    fn report(mut problems: Vec<(String, usize, String)>) -> Result<(), String> {
        if problems.is_empty() {
            return Ok(());
        }
        problems.sort();
        problems.dedup();
        let mut out = format!(
            "references to the protocol that do not resolve ({} problem(s); sections are the numbered headings of {PROTOCOL}, see CONTRIBUTING.md, \"References to the protocol\"):\n",
            problems.len()
        );
        for (path, line, what) in &problems {
            out.push_str(&format!("  {path}:{line}: {what}\n"));
        }
        Err(out.trim_end().to_owned())
    }

    /// The sections of the protocol, by number; malformed headings and anchors are problems.
    pub(crate) fn sections(
        root: &Path,
        problems: &mut Vec<(String, usize, String)>,
    ) -> BTreeMap<String, Section> {
        let mut pages = vec![root.join(PROTOCOL)];
        let mut extra: Vec<PathBuf> = std::fs::read_dir(root.join(PROTOCOL_PAGES))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        extra.retain(|p| p.extension().is_some_and(|e| e == "md"));
        extra.sort();
        pages.extend(extra);
        let mut out = BTreeMap::new();
        for page in pages {
            let label = relative(root, &page);
            let Ok(text) = std::fs::read_to_string(&page) else {
                if label == PROTOCOL {
                    problems.push((label, 0, "the protocol specification is missing".into()));
                }
                continue;
            };
            for (number, line) in page_sections(&label, &text, problems) {
                let here = Section {
                    page: label.clone(),
                    line,
                };
                if let Some(first) = out.get(&number) {
                    let Section { page, line } = first;
                    problems.push((
                        label.clone(),
                        here.line,
                        format!("section {number} is also at {page}:{line}"),
                    ));
                } else {
                    out.insert(number, here);
                }
            }
        }
        out
    }

    /// The numbered sections of one page, with their lines.
    pub(crate) fn page_sections(
        label: &str,
        text: &str,
        problems: &mut Vec<(String, usize, String)>,
    ) -> Vec<(String, usize)> {
        let mut out = Vec::new();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            let heading = line.trim_start_matches('#');
            let is_heading = heading.len() < line.len() && heading.starts_with(' ');
            let anchors = anchors_in(line);
            if !is_heading {
                for a in anchors {
                    problems.push((
                        label.to_owned(),
                        n,
                        format!("anchor {a:?} is not on a numbered heading"),
                    ));
                }
                continue;
            }
            let rest = heading.trim_start();
            let (anchor, rest) = match rest.strip_prefix("<a name=\"") {
                Some(r) => match r.split_once("\"></a>") {
                    Some((a, r)) => (Some(a), r),
                    None => (None, rest),
                },
                None => (None, rest),
            };
            let number = section_number(rest);
            match (anchor, number) {
                (None, None) => {
                    if let Some(a) = anchors.first() {
                        problems.push((
                            label.to_owned(),
                            n,
                            format!("anchor {a:?} must open the heading, before its number"),
                        ));
                    }
                }
                (Some(a), None) => problems.push((
                    label.to_owned(),
                    n,
                    format!("anchor {a:?} on a heading without a section number"),
                )),
                (None, Some(num)) => problems.push((
                    label.to_owned(),
                    n,
                    format!("section {num} has no anchor: start the heading with <a name=\"s{num}\"></a>"),
                )),
                (Some(a), Some(num)) => {
                    if a != format!("s{num}") {
                        problems.push((
                            label.to_owned(),
                            n,
                            format!("section {num}'s anchor is {a:?}, not \"s{num}\""),
                        ));
                    }
                    out.push((num, n));
                }
            }
        }
        out
    }

    /// The `name` of every `<a name="…">` on a line.
    fn anchors_in(line: &str) -> Vec<&str> {
        line.match_indices("<a name=\"")
            .filter_map(|(i, m)| line[i + m.len()..].split('"').next())
            .collect()
    }

    /// The section number a heading's text starts with (`2.16` of `2.16 Tool close-out`,
    /// `2` of `2. The engine`), when it is followed by a space.
    fn section_number(text: &str) -> Option<String> {
        let end = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        if !text[end..].starts_with(' ') {
            return None;
        }
        let number = text[..end].trim_end_matches('.');
        valid_number(number).then(|| number.to_owned())
    }

    /// `2`, `2.16`, `5.1.3`: digits separated by single dots.
    fn valid_number(s: &str) -> bool {
        !s.is_empty()
            && s.split('.')
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
    }

    /// Every problem of one scanned file.
    pub(crate) fn check_text(
        label: &str,
        text: &str,
        sections: &BTreeMap<String, Section>,
        allowed: &[(&str, &str, &str)],
    ) -> Vec<(String, usize, String)> {
        let mut out = Vec::new();
        let in_protocol = label == PROTOCOL || label.starts_with(&format!("{PROTOCOL_PAGES}/"));
        let linked = links_required(label);
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let mut problem = |what: String| out.push((label.to_owned(), n, what));
            let doc_comment = {
                let t = line.trim_start();
                t.starts_with("///") || t.starts_with("//!")
            };
            for (at, _) in line.match_indices('§') {
                let number = reference_at(&line[at + '§'.len_utf8()..]);
                match number {
                    Some(num) if sections.contains_key(&num) => {
                        if let (Some(spec), true) = (linked, doc_comment) {
                            let link = format!("[§{num}]({spec}::spec#s{num})");
                            if !line[at.saturating_sub(1)..].starts_with(&link) {
                                problem(format!("§{num} in a doc comment is a link rustdoc renders: write {link}"));
                            }
                        }
                    }
                    Some(num) => problem(format!("§{num} names no section of {PROTOCOL}")),
                    None => problem("a § must be followed by a section number, as in §2.16".into()),
                }
            }
            let mut fragments: Vec<&str> = line
                .match_indices("protocol.md#")
                .chain(line.match_indices("::spec#"))
                .chain(line.match_indices("/spec/index.html#"))
                .map(|(at, m)| anchor_at(&line[at + m.len()..]))
                .collect();
            if in_protocol {
                fragments.extend(
                    line.match_indices("(#")
                        .map(|(at, _)| anchor_at(&line[at + 2..])),
                );
            }
            for fragment in fragments {
                let known = fragment
                    .strip_prefix('s')
                    .is_some_and(|num| sections.contains_key(num));
                if !known {
                    problem(format!(
                        "#{fragment} is no section anchor of the protocol (they are #s<number>)"
                    ));
                }
            }
            for needle in FORBIDDEN {
                let kept = allowed
                    .iter()
                    .any(|(path, mention, _)| *path == label && mention == needle);
                if line.contains(needle) && !kept {
                    problem(format!(
                        "mentions `{needle}`, a document that does not ship with penguin: point at {PROTOCOL} instead"
                    ));
                }
            }
        }
        out
    }

    /// For a source file of a crate whose doc comments must link their references, the path
    /// of the spec module from there (`crate` in the protocol crate).
    fn links_required(label: &str) -> Option<&'static str> {
        let rest = label.strip_prefix("crates/")?;
        let (krate, path) = rest.split_once('/')?;
        if !path.starts_with("src/") || !label.ends_with(".rs") {
            return None;
        }
        if PLAIN_REF_CRATES.iter().any(|(c, _)| *c == krate) {
            return None;
        }
        Some(if krate == "omni-protocol" {
            "crate"
        } else {
            "penguin_omni_protocol"
        })
    }

    /// The section number a reference starts with, without a sentence's final dot; `None` when
    /// there is no number.
    fn reference_at(text: &str) -> Option<String> {
        let end = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let number = text[..end].trim_end_matches('.');
        valid_number(number).then(|| number.to_owned())
    }

    /// The anchor a fragment starts with, without a sentence's final dot.
    fn anchor_at(text: &str) -> &str {
        let end = text
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
            .unwrap_or(text.len());
        text[..end].trim_end_matches('.')
    }

    /// Allowed mentions their file no longer makes.
    fn unused_allowances(
        root: &Path,
        allowed: &[(&str, &str, &str)],
    ) -> Vec<(String, usize, String)> {
        allowed
            .iter()
            .filter(|(path, mention, _)| {
                std::fs::read_to_string(root.join(path)).map_or(true, |t| !t.contains(mention))
            })
            .map(|(path, mention, _)| {
                (
                    (*path).to_owned(),
                    0,
                    format!("no longer mentions `{mention}`: remove its entry from ALLOWED_MENTIONS in xtask/src/tidy.rs"),
                )
            })
            .collect()
    }

    /// Every file to scan, sorted.
    fn scanned_files(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack: Vec<PathBuf> = SCANNED.iter().map(|s| root.join(s)).collect();
        while let Some(path) = stack.pop() {
            if path.is_dir() {
                let skipped = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.') || n == "target" || n == "node_modules");
                if !skipped {
                    stack.extend(
                        std::fs::read_dir(&path)
                            .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
                            .unwrap_or_default(),
                    );
                }
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| TEXT_EXTENSIONS.contains(&e))
            {
                out.push(path);
            }
        }
        out.sort();
        out.dedup();
        out
    }

    fn relative(root: &Path, path: &Path) -> String {
        path.strip_prefix(root)
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/")
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        const SPEC: &str = "# The protocol\n\n\
## <a name=\"s1\"></a>1. Messages\n\n\
### <a name=\"s1.1\"></a>1.1 Envelope\n\n\
See [§1.1](#s1.1) and [the engine](#s2).\n\n\
```\n## not a heading\n```\n\n\
## <a name=\"s2\"></a>2. The engine\n\n\
### <a name=\"s2.16\"></a>2.16 Tool close-out\n";

        /// A repository in a temporary folder with `files`.
        struct Repo(PathBuf);

        impl Repo {
            fn new(name: &str, files: &[(&str, &str)]) -> Repo {
                let root = std::env::temp_dir()
                    .join(format!("xtask-protocol-refs-{name}-{}", std::process::id()));
                let _ = std::fs::remove_dir_all(&root);
                for (path, text) in files {
                    let path = root.join(path);
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(path, text).unwrap();
                }
                Repo(root)
            }
        }

        impl Drop for Repo {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }

        #[test]
        fn the_sections_are_the_numbered_headings_with_their_anchors() {
            let mut problems = Vec::new();
            let found = page_sections(PROTOCOL, SPEC, &mut problems);
            assert_eq!(problems, vec![]);
            let numbers: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(numbers, ["1", "1.1", "2", "2.16"]);
            assert_eq!(found[3].1, 15, "the line of 2.16");
        }

        #[test]
        fn a_heading_without_its_anchor_or_with_the_wrong_one_is_reported() {
            let page = "## 3. Trace\n\
### <a name=\"s3.2\"></a>3.1 Layout\n\
### <a name=\"s9\"></a>Notes\n\
text <a name=\"s4\"></a>\n";
            let mut problems = Vec::new();
            let found = page_sections(PROTOCOL, page, &mut problems);
            assert_eq!(found, vec![("3.1".to_owned(), 2)]);
            let lines: Vec<(usize, &str)> =
                problems.iter().map(|(_, l, w)| (*l, w.as_str())).collect();
            assert_eq!(
                lines,
                [
                    (
                        1,
                        "section 3 has no anchor: start the heading with <a name=\"s3\"></a>"
                    ),
                    (2, "section 3.1's anchor is \"s3.2\", not \"s3.1\""),
                    (3, "anchor \"s9\" on a heading without a section number"),
                    (4, "anchor \"s4\" is not on a numbered heading"),
                ]
            );
        }

        #[test]
        fn a_planted_bad_reference_fails_the_check_with_its_place() {
            let repo = Repo::new(
                "planted",
                &[
                    (PROTOCOL, SPEC),
                    (
                        "crates/a/src/lib.rs",
                        "//! The envelope (protocol §1.1, `docs/protocol.md#s1.1`).\n\
                         \n\
                         /// Closes every call (§2.16, and §2.17 which does not exist).\n\
                         pub fn f() {}\n\
                         // See §1.1–§2.16, and §2.\n\
                         // A bare § is no reference.\n\
                         /// [§1.1](penguin_omni_protocol::spec#s1.1), [§7](penguin_omni_protocol::spec#s7).\n",
                    ),
                    (
                        "crates/a/README.md",
                        "Section 9.9 (`docs/protocol.md#s9.9`) is gone.\n",
                    ),
                    (
                        "docs/guide.md",
                        "[§2.16](protocol.md#s2.16), [old](../shared/seed/message-flow.md)\n",
                    ),
                    (
                        "crates/a/web/app.js",
                        "// as reference-behaviour.md §5.9 says\n",
                    ),
                ],
            );
            let err = check_with(&repo.0, &[]).unwrap_err();
            let lines: Vec<&str> = err.lines().skip(1).map(str::trim).collect();
            assert_eq!(
                lines,
                [
                    "crates/a/README.md:1: #s9.9 is no section anchor of the protocol (they are #s<number>)",
                    "crates/a/src/lib.rs:1: §1.1 in a doc comment is a link rustdoc renders: write [§1.1](penguin_omni_protocol::spec#s1.1)",
                    "crates/a/src/lib.rs:3: §2.16 in a doc comment is a link rustdoc renders: write [§2.16](penguin_omni_protocol::spec#s2.16)",
                    "crates/a/src/lib.rs:3: §2.17 names no section of docs/protocol.md",
                    "crates/a/src/lib.rs:6: a § must be followed by a section number, as in §2.16",
                    "crates/a/src/lib.rs:7: #s7 is no section anchor of the protocol (they are #s<number>)",
                    "crates/a/src/lib.rs:7: §7 names no section of docs/protocol.md",
                    "crates/a/web/app.js:1: mentions `reference-behaviour.md`, a document that does not ship with penguin: point at docs/protocol.md instead",
                    "crates/a/web/app.js:1: §5.9 names no section of docs/protocol.md",
                    "docs/guide.md:1: mentions `../shared`, a document that does not ship with penguin: point at docs/protocol.md instead",
                    "docs/guide.md:1: mentions `message-flow.md`, a document that does not ship with penguin: point at docs/protocol.md instead",
                    "docs/guide.md:1: mentions `shared/seed/`, a document that does not ship with penguin: point at docs/protocol.md instead",
                ],
                "{err}"
            );
            assert!(
                err.starts_with("references to the protocol that do not resolve (12 problem(s)")
            );
        }

        #[test]
        fn the_workspace_references_resolve() {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
            check(root).unwrap();
        }

        #[test]
        fn resolving_references_pass() {
            let repo = Repo::new(
                "clean",
                &[
                    (PROTOCOL, SPEC),
                    (
                        "crates/a/src/lib.rs",
                        "//! [§1.1](penguin_omni_protocol::spec#s1.1), [§2.16](penguin_omni_protocol::spec#s2.16). See `docs/protocol.md#s2`.\n\
                         // A plain comment may cite §2.16 as text.\n",
                    ),
                    (
                        "crates/omni-protocol/src/lib.rs",
                        "/// [§2](crate::spec#s2)\n",
                    ),
                    (
                        "crates/merge-queue/src/lib.rs",
                        "//! Arrival order (§2.16).\n",
                    ),
                    (
                        "docs/guide.md",
                        "[§2](protocol.md#s2); [§1](protocol.md#s1).\n",
                    ),
                    (
                        "docs/protocol/extra.md",
                        "## <a name=\"s3\"></a>3. More\n\n§3, §1.1\n",
                    ),
                    ("README.md", "Nothing to see.\n"),
                ],
            );
            assert_eq!(check_with(&repo.0, &[]), Ok(()));
        }

        #[test]
        fn a_section_numbered_twice_is_reported() {
            let repo = Repo::new(
                "twice",
                &[
                    (PROTOCOL, SPEC),
                    ("docs/protocol/extra.md", "## <a name=\"s2\"></a>2. Again\n"),
                ],
            );
            let err = check_with(&repo.0, &[]).unwrap_err();
            assert!(
                err.contains("docs/protocol/extra.md:1: section 2 is also at docs/protocol.md:13"),
                "{err}"
            );
        }

        #[test]
        fn an_allowed_mention_passes_until_it_is_gone() {
            let allowed = [("benches/b.rs", "../shared", "an optional tool")];
            let files = [
                (PROTOCOL, SPEC),
                ("crates/a/benches/b.rs", "let p = \"../shared/tool\";\n"),
            ];
            let repo = Repo::new("allowed", &files);
            let err = check_with(&repo.0, &allowed).unwrap_err();
            assert!(
                err.contains("crates/a/benches/b.rs:1: mentions `../shared`"),
                "{err}"
            );
            assert!(
                err.contains("benches/b.rs:0: no longer mentions `../shared`"),
                "{err}"
            );
            let allowed = [("crates/a/benches/b.rs", "../shared", "an optional tool")];
            assert_eq!(check_with(&repo.0, &allowed), Ok(()));
            std::fs::write(repo.0.join("crates/a/benches/b.rs"), "// gone\n").unwrap();
            let err = check_with(&repo.0, &allowed).unwrap_err();
            assert!(
                err.contains(
                    "crates/a/benches/b.rs:0: no longer mentions `../shared`: remove its entry"
                ),
                "{err}"
            );
        }

        /// The check on this repository, alone (`cargo xtask ci` runs it in its tidy step):
        /// `cargo test -p xtask -- --ignored the_repositorys_references_resolve`.
        #[test]
        #[ignore = "the tidy step of `cargo xtask ci` runs it; this is the way to run it alone"]
        fn the_repositorys_references_resolve() {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
            check(root).unwrap();
        }

        #[test]
        fn the_protocol_itself_must_exist() {
            let repo = Repo::new("missing", &[("docs/guide.md", "§1\n")]);
            let err = check_with(&repo.0, &[]).unwrap_err();
            assert!(err.contains("docs/protocol.md:0: the protocol specification is missing"));
            assert!(err.contains("docs/guide.md:1: §1 names no section"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The loops of a crate given as (module path, source) pairs.
    fn loops_of(files: &[(&str, &str)]) -> Vec<Loop> {
        let files: Vec<ModuleFile> = files
            .iter()
            .map(|(module, text)| ModuleFile {
                module: module
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path: PathBuf::from(format!("src/{}.rs", module.replace("::", "/"))),
                scan: scan(text),
            })
            .collect();
        Graph::of(&files, Path::new("")).loops()
    }

    fn members(loops: &[Loop]) -> Vec<Vec<String>> {
        loops.iter().map(|l| l.members.clone()).collect()
    }

    #[test]
    fn a_two_module_loop_is_found_with_its_imports() {
        let loops = loops_of(&[
            ("", "mod a;\nmod b;\nmod c;"),
            ("a", "use crate::b::B;\npub struct A;"),
            (
                "b",
                "pub struct B;\n\nfn f() -> crate::a::A { crate::a::A }",
            ),
            ("c", "use crate::a::A;"),
        ]);
        assert_eq!(members(&loops), vec![strings(&["a", "b"])]);
        assert_eq!(
            loops[0].edges,
            vec![
                ("a".into(), "b".into(), "src/a.rs:1".into()),
                ("b".into(), "a".into(), "src/b.rs:3".into()),
            ]
        );
    }

    #[test]
    fn a_chain_is_no_loop() {
        let loops = loops_of(&[
            ("", "mod run;\nmod task;\nmod shared;\npub use run::Engine;"),
            ("run", "use crate::task::go;\nuse crate::shared::Shared;"),
            ("task", "use crate::shared::{Shared, emit};"),
            ("shared", "pub struct Shared;"),
        ]);
        assert!(loops.is_empty(), "{loops:?}");
    }

    #[test]
    fn every_module_of_a_longer_loop_is_reported_once() {
        let loops = loops_of(&[
            ("a", "use crate::b::X;"),
            ("b", "use super::c::{self, Y};"),
            ("c", "fn f() { crate::a::g(); }"),
            ("d", "use crate::a::X;"),
            ("e", "use crate::{d::Z, f::W};"),
            ("f", "use crate::e::V as U;"),
        ]);
        assert_eq!(
            members(&loops),
            vec![strings(&["a", "b", "c"]), strings(&["e", "f"])]
        );
    }

    #[test]
    fn a_name_the_root_reexports_is_an_import_of_its_module() {
        let loops = loops_of(&[
            (
                "",
                "mod run;\nmod task;\npub use run::{Engine as Handle, RunOptions};",
            ),
            ("run", "use crate::task::go;\npub struct RunOptions;"),
            ("task", "pub fn go(_: crate::RunOptions) {}"),
        ]);
        assert_eq!(members(&loops), vec![strings(&["run", "task"])]);
        // Through a glob, and through a parent's own import.
        let loops = loops_of(&[
            ("", "mod message;\nmod frame;\npub use message::*;"),
            (
                "message",
                "use crate::frame::Frame;\npub struct OmniMessage;",
            ),
            ("frame", "use crate::OmniMessage;"),
        ]);
        assert_eq!(members(&loops), vec![strings(&["frame", "message"])]);
        let loops = loops_of(&[
            ("a", "mod x;\nmod y;\nuse self::y::Thing;"),
            ("a::x", "use super::Thing;"),
            ("a::y", "use super::x::X;"),
        ]);
        assert_eq!(members(&loops), vec![strings(&["a/x", "a/y"])]);
        // A name the root defines itself is the root's: no edge.
        let loops = loops_of(&[
            (
                "",
                "mod a;\nmod b;\npub mod texts { pub const T: &str = \"\"; }",
            ),
            ("a", "use crate::texts;\nuse crate::b::B;"),
            ("b", "use crate::texts::T;"),
        ]);
        assert!(loops.is_empty(), "{loops:?}");
    }

    #[test]
    fn parents_children_and_tests_are_no_loops() {
        let loops = loops_of(&[
            ("", "mod a;\nmod b;\nuse a::X;"),
            ("a", "mod inner;\nuse self::inner::Y;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}"),
            ("a::inner", "use super::*;\nuse crate::a::X;"),
            (
                "b",
                "use crate::a::X;\n#[cfg(test)]\nuse crate::a::Y;\n// crate::a::Z in a comment\nconst S: &str = \"crate::a::W\";",
            ),
        ]);
        assert!(loops.is_empty(), "{loops:?}");
    }

    #[test]
    fn a_test_only_import_does_not_close_a_loop() {
        let loops = loops_of(&[
            ("a", "use crate::b::B;"),
            ("b", "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n#[cfg(all(test, unix))]\nfn t() { crate::a::f() }"),
        ]);
        assert!(loops.is_empty(), "{loops:?}");
    }

    #[test]
    fn submodules_of_one_directory_form_their_own_graph() {
        let loops = loops_of(&[
            ("", "mod session;\nmod config;"),
            ("session", "mod connect;\nmod load;"),
            (
                "session::connect",
                "use super::load::L;\nuse crate::config::C;",
            ),
            ("session::load", "use crate::session::connect::K;"),
            ("config", "pub struct C;"),
        ]);
        assert_eq!(
            members(&loops),
            vec![strings(&["session/connect", "session/load"])]
        );
        // A submodule naming another top-level module is an edge of its top-level ancestor.
        let loops = loops_of(&[
            ("", "mod session;\nmod config;"),
            ("session", "mod connect;"),
            ("session::connect", "use crate::config::C;"),
            ("config", "use crate::session::S;"),
        ]);
        assert_eq!(members(&loops), vec![strings(&["config", "session"])]);
    }

    #[test]
    fn inline_modules_and_macros_resolve_from_where_they_are() {
        let scan = scan("mod outer {\n    mod leaf;\n    use super::x::Y;\n}\nmacro_rules! m { () => { $crate::a::f() } }\nmod after;");
        assert_eq!(
            scan.children,
            vec![strings(&["outer", "leaf"]), strings(&["after"])]
        );
        assert_eq!(scan.paths.len(), 1);
        assert_eq!(
            resolve(&strings(&["m"]), &scan.paths[0]),
            Some(strings(&["m", "x", "Y"]))
        );
    }

    #[test]
    fn literals_and_lifetimes_do_not_confuse_the_scan() {
        let scan = scan(
            "fn f<'a>(s: &'a str) -> char { let _ = r#\"use crate::x;\"#; let _ = b\"}\"; '}' }\nuse crate::y::Z;",
        );
        assert_eq!(
            scan.paths,
            vec![Named {
                segments: strings(&["crate", "y", "Z"]),
                scope: Vec::new(),
                line: 2,
            }]
        );
    }

    #[test]
    fn the_allowlist_covers_parts_of_its_loops_only_and_must_not_go_stale() {
        let found = |label: &str, m: &[&str]| {
            (
                label.to_owned(),
                Loop {
                    members: strings(m),
                    edges: vec![(m[0].into(), m[1].into(), "src/x.rs:1".into())],
                },
            )
        };
        let allowed: &[(&str, &[&str])] = &[("lib", &["a", "b", "c"])];
        assert_eq!(judge(&[found("lib", &["a", "b"])], allowed), Ok(()));
        let grown = judge(&[found("lib", &["a", "b", "d"])], allowed).unwrap_err();
        assert!(grown.contains("lib: a ↔ b ↔ d"), "{grown}");
        assert!(grown.contains("a uses b (src/x.rs:1)"), "{grown}");
        let elsewhere = judge(&[found("other", &["a", "b"])], allowed).unwrap_err();
        assert!(elsewhere.contains("other: a ↔ b"), "{elsewhere}");
        let stale = judge(&[], allowed).unwrap_err();
        assert!(stale.contains("remove its entry"), "{stale}");
    }

    #[test]
    fn the_workspace_passes_and_the_engine_has_no_loop() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        assert!(
            ALLOWED.iter().all(|(label, _)| !label.contains("engine")),
            "the engine must stay free of module loops"
        );
        check_loops(root).unwrap();
    }
}
