//! Memory: what the agent keeps between sessions, by itself. Two scopes under the data root
//! (`<data root>/memory/`): the user's (`user/`, every session reads it) and one per workspace
//! (`<basename>-<8 hex>/`, keyed by the workspace's real path, with a `.workspace` file naming
//! it). Each is a folder of topic notes (Markdown with `name`, `description`, `updated_at`
//! frontmatter) and a `MEMORY.md` index, one line per note.
//!
//! Only the indexes enter the context ([`prompt_section`], capped); the model reads a note
//! when it needs it, and writes them with the file tools, which reach these folders and no
//! others beneath the data root (`ToolsConfig::memory`); `memory_forget` deletes one. No
//! command can write them: the sandbox hides the data root. `docs/memory.md`.

// The door (clippy.toml) is for paths a command can change: memory folders lie under the data
// root, which commands never reach; the model changes them only through the file tools, which
// go through the door.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use penguin_tools::memory::MEMORY_INDEX;
use serde::Serialize;

/// The user scope's key (its folder's name); a workspace's key always has a `-`, so no
/// workspace can take it.
pub const USER_SCOPE: &str = "user";

/// In a workspace scope's folder: the workspace path its key stands for.
pub const WORKSPACE_MARKER: &str = ".workspace";

/// Index lines injected per scope; past them a note says to open the file.
pub const INDEX_MAX_LINES: usize = 200;

/// Characters injected per index, a backstop for long lines.
pub const INDEX_MAX_CHARS: usize = 25_000;

/// What an empty or missing index injects.
pub const INDEX_EMPTY_NOTE: &str = "(the index is empty — nothing has been saved yet)";

/// Where the memory folders live.
pub fn memory_root(data_root: &Path) -> PathBuf {
    data_root.join("memory")
}

/// The user scope's folder.
pub fn user_dir(data_root: &Path) -> PathBuf {
    memory_root(data_root).join(USER_SCOPE)
}

/// The key of the workspace at `real_path` (already canonical): its name, reduced to
/// `[a-z0-9_-]` and at most 40 characters (`workspace` when nothing is left), a `-`, and 8 hex
/// digits of a stable hash of the whole path. Two links to one directory share a key; a
/// directory moved elsewhere gets a new one (its old notes stay under the old key).
pub fn workspace_key(real_path: &Path) -> String {
    let name = real_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut base = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            base.push(c.to_ascii_lowercase());
        } else if !base.ends_with('-') {
            base.push('-');
        }
    }
    let base: String = base.trim_matches('-').chars().take(40).collect();
    let base = base.trim_end_matches('-');
    let base = if base.is_empty() { "workspace" } else { base };
    // FNV-1a (64-bit), folded to 32 bits: stable across Rust releases, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in real_path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{base}-{:08x}", (h >> 32) ^ (h & 0xffff_ffff))
}

/// A workspace's folder (`workspace` is canonicalized first; one that cannot be keeps its
/// path as given).
pub fn workspace_dir(data_root: &Path, workspace: &Path) -> PathBuf {
    let real = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    memory_root(data_root).join(workspace_key(&real))
}

/// The memory of one session: the user scope and its workspace's, each with its index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionMemory {
    /// The user scope's folder.
    pub user_dir: PathBuf,
    /// Its `MEMORY.md` (empty when blank or missing).
    pub user_index: String,
    /// The workspace scope's folder.
    pub workspace_dir: PathBuf,
    /// Its `MEMORY.md`.
    pub workspace_index: String,
}

impl SessionMemory {
    /// The memory of a session on `workspace`, as it is on disk (nothing is created).
    pub fn read(data_root: &Path, workspace: &Path) -> SessionMemory {
        let user_dir = user_dir(data_root);
        let workspace_dir = workspace_dir(data_root, workspace);
        SessionMemory {
            user_index: read_index(&user_dir),
            workspace_index: read_index(&workspace_dir),
            user_dir,
            workspace_dir,
        }
    }

    /// [`SessionMemory::read`], creating both folders first (each with an empty `MEMORY.md`
    /// when it has none, and the workspace's `.workspace` marker), so the model has them to
    /// write into. Existing notes and indexes are never touched.
    pub fn prepare(data_root: &Path, workspace: &Path) -> std::io::Result<SessionMemory> {
        let real = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
        let user = user_dir(data_root);
        let ws = memory_root(data_root).join(workspace_key(&real));
        for dir in [&user, &ws] {
            std::fs::create_dir_all(dir)?;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(dir.join(MEMORY_INDEX))
            {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let marker = ws.join(WORKSPACE_MARKER);
        let line = format!("{}\n", real.display());
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(line.as_str()) {
            std::fs::write(&marker, line)?;
        }
        Ok(SessionMemory::read(data_root, workspace))
    }

    /// The two folders, the user's first: what the file tools may write.
    pub fn dirs(&self) -> Vec<PathBuf> {
        vec![self.user_dir.clone(), self.workspace_dir.clone()]
    }
}

/// A folder's `MEMORY.md`, which enters the prompt: read through the door all the same (no
/// link followed, nothing but a regular file, bounded).
fn read_index(dir: &Path) -> String {
    penguin_tools::confined::Dir::open(dir)
        .and_then(|d| d.read(MEMORY_INDEX, MAX_INDEX_BYTES))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The most of a `MEMORY.md` read (what enters the prompt is cut far shorter).
const MAX_INDEX_BYTES: u64 = 4 << 20;

/// An index as injected: trimmed, at most [`INDEX_MAX_LINES`] lines and [`INDEX_MAX_CHARS`]
/// characters (cut at a line), with a note saying what was left out; [`INDEX_EMPTY_NOTE`]
/// when blank.
pub fn index_for_prompt(index: &str) -> String {
    let trimmed = index.trim();
    if trimmed.is_empty() {
        return INDEX_EMPTY_NOTE.to_owned();
    }
    let total = trimmed.lines().count();
    let mut kept = trimmed
        .lines()
        .take(INDEX_MAX_LINES)
        .collect::<Vec<_>>()
        .join("\n");
    if kept.chars().count() > INDEX_MAX_CHARS {
        let cut: String = kept.chars().take(INDEX_MAX_CHARS).collect();
        kept = match cut.rfind('\n') {
            Some(at) if at > 0 => cut[..at].to_owned(),
            _ => cut,
        };
    }
    if kept.len() == trimmed.len() {
        return trimmed.to_owned();
    }
    let lines = kept.lines().count();
    let reason = if lines < total {
        format!("showing {lines} of {total} lines")
    } else {
        format!("showing the first {INDEX_MAX_CHARS} characters")
    };
    format!("{kept}\n(index truncated: {reason} — open {MEMORY_INDEX} for the rest)")
}

/// The system prompt's `# Memory` section: what memory is for, how notes are kept, what is
/// never saved, then each scope's folder and index. With nothing saved yet the indexes and
/// the rules for keeping them say nothing, and each request would pay for them: the section is
/// then only where notes go and the one rule that matters before the first.
pub fn prompt_section(memory: &SessionMemory) -> String {
    if memory.user_index.trim().is_empty() && memory.workspace_index.trim().is_empty() {
        return format!(
            "# Memory
Nothing is saved yet. When the user asks you to remember something, or states a preference or correction that outlives the task, save it as a Markdown note with the file tools (frontmatter `name`, `description`, `updated_at`; one file per fact) and list it in that folder's `{MEMORY_INDEX}` (`- [Title](file.md) — hook`): `{}` for what holds wherever you work, `{}` for this workspace. Never save credentials or secrets.
",
            memory.user_dir.display(),
            memory.workspace_dir.display(),
        );
    }
    format!(
        "# Memory
Your long-term record across sessions: Markdown notes you keep with the file tools, in the two folders below (they exist; only the file tools reach them, no command does). One file per fact, with frontmatter:

```markdown
---
name: <kebab-case-slug, matching the file name>
description: <one line — used to decide relevance during recall>
updated_at: <YYYY-MM-DD>
---

<the fact; for corrections and decisions add **Why:** and **How to apply:** lines. Link with [[their-name]]. Dates absolute.>
```

**Save** who the user is and how they want you to work, with the why; goals and constraints not derivable from the code; pointers to external resources.

**When:** a request repeated, a correction that outlives the task (with what they wanted instead), a habit or convention stated more than once, a reusable working detail you would otherwise ask for again. One clear statement is enough. Unsure? Ask.

**Never** credentials or secrets (keys, tokens, passwords), task progress (keep that in your plan), unconfirmed guesses, what the code, config or git history already states, transcript excerpts.

**Index:** each `{MEMORY_INDEX}` lists its notes one line each (`- [Title](file.md) — hook`, ~150 chars, no content), updated with the note — deletions included. Only the first {INDEX_MAX_LINES} lines are injected: merge overlaps, drop stale entries. Before saving, check the index and extend the note that covers the subject; delete notes that prove wrong with memory_forget (it drops their index lines too).

## User memory
What holds wherever you work; every session reads it.

User Memory Dir: `{}`

Index:
{}

## Workspace memory
Facts about the workspace you are working in now. What would still hold in a different project goes in user memory; when unsure, write here.

Workspace Memory Dir: `{}`

Index:
{}
",
        memory.user_dir.display(),
        index_for_prompt(&memory.user_index),
        memory.workspace_dir.display(),
        index_for_prompt(&memory.workspace_index),
    )
}

/// A note's frontmatter (`name`, `description`, `updated_at`), read like a skill's: `key:
/// value` lines of the first `---` block; missing fields left empty, unknown ones ignored.
/// `None` when the file has no block.
pub fn parse_note(text: &str) -> Option<(Option<String>, String, Option<String>)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return None;
    }
    let (mut name, mut description, mut updated) = (None, String::new(), None);
    for line in lines {
        if line.trim_end() == "---" {
            return Some((name, description, updated));
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim().to_owned();
        match k.trim() {
            "name" if !v.is_empty() => name = Some(v),
            "description" => description = v,
            "updated_at" if !v.is_empty() => updated = Some(v),
            _ => {}
        }
    }
    None
}

/// Which scope a folder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    /// The user's.
    User,
    /// One workspace's.
    Workspace,
}

/// One note, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryNote {
    /// Its file name without `.md`: what `show` and `forget` take.
    pub name: String,
    /// Its frontmatter's `name` when it has one, else the file's.
    pub title: String,
    /// Its one-line description (empty when none).
    pub description: String,
    /// `updated_at` as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// The file.
    pub path: PathBuf,
}

/// One scope, as listed: `penguin memory list` and the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryScope {
    /// `user` or the workspace's key.
    pub key: String,
    /// The user's or a workspace's.
    pub kind: ScopeKind,
    /// The workspace it stands for (its `.workspace` marker), for a workspace scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// Its folder.
    pub dir: PathBuf,
    /// Its `MEMORY.md`, whole.
    pub index: String,
    /// Its notes, by name.
    pub notes: Vec<MemoryNote>,
}

/// Why a memory request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// No scope has this key.
    #[error("no memory scope {0:?} (see `penguin memory list`)")]
    NoScope(String),
    /// The name is no note's.
    #[error("{0}")]
    BadName(String),
    /// No such note in the scope.
    #[error("no note {name:?} in {scope} memory (see `penguin memory list`)")]
    NoNote {
        /// The scope's key.
        scope: String,
        /// What was asked.
        name: String,
    },
    /// Reading or deleting failed.
    #[error("{0}")]
    Io(String),
}

/// Every scope under `data_root`, the user's first, then the workspaces' by key; empty when
/// nothing was ever saved.
pub fn scopes(data_root: &Path) -> Vec<MemoryScope> {
    let root = memory_root(data_root);
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|k| !k.starts_with('.'))
        .collect();
    keys.sort_by_key(|k| (k != USER_SCOPE, k.clone()));
    keys.into_iter()
        .filter_map(|k| scope(data_root, &k).ok())
        .collect()
}

/// The scope `key` (`user` or a workspace's key).
pub fn scope(data_root: &Path, key: &str) -> Result<MemoryScope, MemoryError> {
    if key.is_empty() || key.contains('/') || key.starts_with('.') {
        return Err(MemoryError::NoScope(key.to_owned()));
    }
    let dir = memory_root(data_root).join(key);
    if !dir.is_dir() {
        return Err(MemoryError::NoScope(key.to_owned()));
    }
    let user = key == USER_SCOPE;
    let mut notes: Vec<MemoryNote> = std::fs::read_dir(&dir)
        .map_err(|e| MemoryError::Io(format!("{}: {e}", dir.display())))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let file = e.file_name().to_str()?.to_owned();
            let name = file.strip_suffix(".md")?.to_owned();
            if file == MEMORY_INDEX || name.starts_with('.') {
                return None;
            }
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let (title, description, updated_at) = parse_note(&text).unwrap_or_default();
            Some(MemoryNote {
                title: title.unwrap_or_else(|| name.clone()),
                name,
                description,
                updated_at,
                path: e.path(),
            })
        })
        .collect();
    notes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(MemoryScope {
        key: key.to_owned(),
        kind: if user {
            ScopeKind::User
        } else {
            ScopeKind::Workspace
        },
        workspace: (!user)
            .then(|| std::fs::read_to_string(dir.join(WORKSPACE_MARKER)).ok())
            .flatten()
            .map(|s| PathBuf::from(s.trim()))
            .filter(|p| !p.as_os_str().is_empty()),
        index: read_index(&dir),
        dir,
        notes,
    })
}

/// The note `name` of scope `key`: its file and its text.
pub fn note(data_root: &Path, key: &str, name: &str) -> Result<(PathBuf, String), MemoryError> {
    let scope = scope(data_root, key)?;
    let file = penguin_tools::memory::note_file_name(name).map_err(MemoryError::BadName)?;
    let path = scope.dir.join(file);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => std::fs::read_to_string(&path)
            .map(|text| (path.clone(), text))
            .map_err(|e| MemoryError::Io(format!("{}: {e}", path.display()))),
        _ => Err(MemoryError::NoNote {
            scope: key.to_owned(),
            name: name.to_owned(),
        }),
    }
}

/// Deletes the note `name` of scope `key` and drops its lines from the scope's `MEMORY.md`
/// (what `memory_forget` does for the model): the file deleted and how many index lines went.
pub fn forget(data_root: &Path, key: &str, name: &str) -> Result<(PathBuf, usize), MemoryError> {
    let (path, _) = note(data_root, key, name)?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    penguin_tools::memory::forget(dir, &file)
        .map(|g| (g.file, g.index_lines))
        .map_err(MemoryError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_keys_are_named_hashed_and_never_the_user_scope() {
        let k = workspace_key(Path::new("/home/me/My App!"));
        assert!(k.starts_with("my-app-"), "{k}");
        assert_eq!(k.len(), "my-app-".len() + 8);
        assert_eq!(k, workspace_key(Path::new("/home/me/My App!")));
        assert_ne!(k, workspace_key(Path::new("/srv/My App!")));
        assert!(workspace_key(Path::new("/")).starts_with("workspace-"));
        assert!(workspace_key(Path::new("/x/user")).starts_with("user-"));
        assert!(workspace_key(Path::new(&format!("/{}", "a".repeat(90)))).len() <= 49);
    }

    #[test]
    fn prepare_makes_both_scopes_once_and_keeps_what_is_there() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, ws) = (tmp.path().join("data"), tmp.path().join("ws"));
        std::fs::create_dir_all(&ws).unwrap();
        let m = SessionMemory::prepare(&root, &ws).unwrap();
        assert!(m.user_dir.join(MEMORY_INDEX).is_file());
        assert!(m.workspace_dir.join(MEMORY_INDEX).is_file());
        let marker = std::fs::read_to_string(m.workspace_dir.join(WORKSPACE_MARKER)).unwrap();
        assert_eq!(
            marker.trim(),
            std::fs::canonicalize(&ws).unwrap().display().to_string()
        );
        std::fs::write(m.user_dir.join(MEMORY_INDEX), "- [Tabs](tabs.md) — tabs\n").unwrap();
        let again = SessionMemory::prepare(&root, &ws).unwrap();
        assert_eq!(again.user_index, "- [Tabs](tabs.md) — tabs\n");
        // A link to the workspace is the same workspace.
        std::os::unix::fs::symlink(&ws, tmp.path().join("link")).unwrap();
        assert_eq!(
            SessionMemory::read(&root, &tmp.path().join("link")).workspace_dir,
            m.workspace_dir
        );
    }

    #[test]
    fn with_nothing_saved_the_prompt_says_only_where_notes_go() {
        let empty = SessionMemory {
            user_dir: "/d/memory/user".into(),
            user_index: "\n".into(),
            workspace_dir: "/d/memory/ws-0123abcd".into(),
            workspace_index: String::new(),
        };
        let p = prompt_section(&empty);
        assert!(p.starts_with("# Memory\nNothing is saved yet."), "{p}");
        assert!(p.contains("`/d/memory/user` for what holds wherever you work"));
        assert!(p.contains("`/d/memory/ws-0123abcd` for this workspace"));
        assert!(p.contains("Never save credentials or secrets"));
        assert!(!p.contains("Index:"), "no empty indexes: {p}");
        let full = prompt_section(&SessionMemory {
            user_index: "- [Tabs](tabs.md) — tabs\n".into(),
            ..empty
        });
        assert!(p.len() * 3 < full.len(), "{} vs {}", p.len(), full.len());
    }

    #[test]
    fn the_prompt_shows_both_indexes_capped_and_says_what_is_never_saved() {
        let m = SessionMemory {
            user_dir: "/d/memory/user".into(),
            user_index: "- [Tabs](tabs.md) — the user indents with tabs\n".into(),
            workspace_dir: "/d/memory/ws-0123abcd".into(),
            workspace_index: "  \n".into(),
        };
        let p = prompt_section(&m);
        assert!(p.starts_with("# Memory\n"));
        assert!(p.contains("User Memory Dir: `/d/memory/user`\n\nIndex:\n- [Tabs](tabs.md) — the user indents with tabs\n"));
        assert!(p.contains(&format!(
            "Workspace Memory Dir: `/d/memory/ws-0123abcd`\n\nIndex:\n{INDEX_EMPTY_NOTE}\n"
        )));
        assert!(p.contains("**Never** credentials"));
        assert!(p.contains("task progress") && p.contains("unconfirmed guesses"));
        let long: String = (0..250).map(|i| format!("- [n{i}](n{i}.md)\n")).collect();
        let shown = index_for_prompt(&long);
        assert_eq!(shown.lines().count(), INDEX_MAX_LINES + 1);
        assert!(shown.ends_with(
            "(index truncated: showing 200 of 250 lines — open MEMORY.md for the rest)"
        ));
        let wide = format!("{}\n{}", "x".repeat(20_000), "y".repeat(20_000));
        let shown = index_for_prompt(&wide);
        assert!(shown.starts_with(&"x".repeat(20_000)) && !shown.contains('y'));
        assert!(
            shown.contains("showing 1 of 2 lines"),
            "{}",
            &shown[20_000..]
        );
    }

    #[test]
    fn scopes_list_notes_show_them_and_forget_them() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, ws) = (tmp.path().join("data"), tmp.path().join("proj"));
        std::fs::create_dir_all(&ws).unwrap();
        let m = SessionMemory::prepare(&root, &ws).unwrap();
        std::fs::write(
            m.user_dir.join("tabs.md"),
            "---\nname: tabs\ndescription: indents with tabs\nupdated_at: 2026-01-02\n---\nTabs.",
        )
        .unwrap();
        std::fs::write(m.workspace_dir.join("loose.md"), "no frontmatter").unwrap();
        std::fs::write(m.user_dir.join(MEMORY_INDEX), "- [Tabs](tabs.md) — tabs\n").unwrap();
        let all = scopes(&root);
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].key.as_str(), all[0].kind),
            (USER_SCOPE, ScopeKind::User)
        );
        assert_eq!(all[0].notes[0].description, "indents with tabs");
        assert_eq!(all[0].notes[0].updated_at.as_deref(), Some("2026-01-02"));
        assert_eq!(all[1].kind, ScopeKind::Workspace);
        assert_eq!(
            all[1].workspace.as_deref(),
            Some(std::fs::canonicalize(&ws).unwrap().as_path())
        );
        assert_eq!(all[1].notes[0].title, "loose");
        let json = serde_json::to_value(&all[0]).unwrap();
        assert_eq!(json["notes"][0]["updatedAt"], "2026-01-02");
        assert!(note(&root, USER_SCOPE, "tabs")
            .unwrap()
            .1
            .ends_with("Tabs."));
        assert!(matches!(
            note(&root, USER_SCOPE, "nope"),
            Err(MemoryError::NoNote { .. })
        ));
        assert!(matches!(
            note(&root, USER_SCOPE, "../x"),
            Err(MemoryError::BadName(_))
        ));
        assert!(matches!(
            scope(&root, "../data"),
            Err(MemoryError::NoScope(_))
        ));
        let (_, lines) = forget(&root, USER_SCOPE, "tabs").unwrap();
        assert_eq!(lines, 1);
        assert_eq!(
            std::fs::read_to_string(m.user_dir.join(MEMORY_INDEX)).unwrap(),
            ""
        );
        assert!(scope(&root, USER_SCOPE).unwrap().notes.is_empty());
    }
}
