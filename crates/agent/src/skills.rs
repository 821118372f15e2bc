//! Skills: reusable instructions, each a directory with a `SKILL.md` (frontmatter, then the
//! body), found in the user's skills folder under the data root (`<data root>/skills/NAME/`)
//! and in the workspace (`.agents/skills/NAME/`).
//!
//! Index first, body on demand: a session's system prompt lists each skill's name and
//! description with the path of its `SKILL.md` ([`prompt_section`]); the model reads the body
//! with `read_file` when a task matches or a message starts with a `[use_skills]` block naming
//! it. The files are the source of truth: every listing reads the disk. `docs/skills.md`.

use std::path::{Path, PathBuf};
use std::process::Command;

use penguin_tools::confined::{Dir, Kind};
use serde::Serialize;

/// A skill's instructions file.
pub const SKILL_FILE: &str = "SKILL.md";

/// The most of a `SKILL.md` read: its frontmatter is what the prompt takes.
const MAX_SKILL_MD_BYTES: u64 = 1 << 20;

/// Where a workspace keeps its own skills.
pub const WORKSPACE_SKILLS_DIR: &str = ".agents/skills";

/// The user's skills folder under the data root.
pub fn user_skills_dir(data_root: &Path) -> PathBuf {
    data_root.join("skills")
}

/// A workspace's skills folder.
pub fn workspace_skills_dir(workspace: &Path) -> PathBuf {
    workspace.join(WORKSPACE_SKILLS_DIR)
}

/// Where a skill was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkillScope {
    /// The user's skills folder (`penguin skills install`).
    User,
    /// The workspace's `.agents/skills/`.
    Workspace,
}

/// One skill, as listed (`penguin skills list`, the API) and indexed in the system prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    /// Its directory's name: the skill's identity (a frontmatter `name` that differs is
    /// overridden, as the reference does).
    pub name: String,
    /// The one-line description the prompt shows (empty when the frontmatter has none).
    pub description: String,
    /// `short_description`, a label for compact places; never in the prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_description: Option<String>,
    /// A natural number, 1 when absent or not one.
    pub version: u64,
    /// `updated`, as written (empty when absent).
    pub updated: String,
    /// The user's folder or the workspace's.
    pub scope: SkillScope,
    /// Its `SKILL.md`.
    pub path: PathBuf,
    /// What is wrong with its frontmatter (`no frontmatter block`, `no name`), when something
    /// is: the skill is still listed and indexed, by its directory's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// A workspace skill of the same name wins: this user skill is not in the prompt.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadowed: bool,
}

/// A `SKILL.md`'s frontmatter, read tolerantly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontmatter {
    /// `name`.
    pub name: Option<String>,
    /// `description` (empty when absent).
    pub description: String,
    /// `short_description`.
    pub short_description: Option<String>,
    /// `version`: a natural number, 1 otherwise.
    pub version: u64,
    /// `updated` (empty when absent).
    pub updated: String,
}

/// Reads the frontmatter at the start of `text`: only `key: value` lines inside the first
/// `---` block count (split at the first colon, values trimmed, quotes around a value
/// dropped), so no YAML is needed and nothing in it can fail to parse. `Err` says why there is
/// no usable block (none at all, or no `name`); the caller falls back to the directory's name.
pub fn parse_frontmatter(text: &str) -> Result<Frontmatter, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("no frontmatter block (SKILL.md should start with a --- line)".into());
    }
    let mut fm = Frontmatter {
        version: 1,
        ..Frontmatter::default()
    };
    let mut closed = false;
    for line in lines {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = unquote(value.trim()).to_owned();
        match key {
            "name" if !value.is_empty() => fm.name = Some(value),
            "description" => fm.description = value,
            "short_description" => fm.short_description = Some(value),
            "version" => fm.version = value.parse().ok().filter(|v| *v >= 1).unwrap_or(1),
            "updated" => fm.updated = value,
            _ => {}
        }
    }
    if !closed {
        return Err("the frontmatter block is not closed (no second --- line)".into());
    }
    if fm.name.is_none() {
        return Err("the frontmatter has no name".into());
    }
    Ok(fm)
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

/// Whether `name` may name a skill (its directory): `[A-Za-z0-9_-]+`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The skills of one folder, sorted by name: each directory holding a `SKILL.md` (a directory
/// without one is no skill; a name outside `[A-Za-z0-9_-]` is skipped, as it could not be
/// addressed). A broken frontmatter is the skill's `problem`, never an error.
pub fn skills_in(dir: &Path, scope: SkillScope) -> Vec<Skill> {
    // Through the door: the workspace's folder is a command's to change, and a `SKILL.md`
    // made a link to a secret must not reach the prompt.
    let Ok(folder) = Dir::open(dir) else {
        return Vec::new();
    };
    let mut out: Vec<Skill> = folder
        .entries()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.kind == Kind::Dir)
        .filter_map(|e| {
            let name = e.name.to_str()?.to_owned();
            if !valid_name(&name) {
                return None;
            }
            let rel = Path::new(&name).join(SKILL_FILE);
            let text = folder.read(&rel, MAX_SKILL_MD_BYTES).ok()?;
            let text = String::from_utf8_lossy(&text);
            Some(skill_from(name, &text, scope, dir.join(rel)))
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn skill_from(name: String, text: &str, scope: SkillScope, path: PathBuf) -> Skill {
    let (fm, problem) = match parse_frontmatter(text) {
        Ok(fm) => (fm, None),
        Err(problem) => (
            Frontmatter {
                version: 1,
                ..Frontmatter::default()
            },
            Some(problem),
        ),
    };
    Skill {
        name,
        description: fm.description,
        short_description: fm.short_description,
        version: fm.version,
        updated: fm.updated,
        scope,
        path,
        problem,
        shadowed: false,
    }
}

/// Every skill a session on `workspace` gets: the user's (under `data_root`), then the
/// workspace's; a user skill whose name the workspace also has is marked `shadowed` (the
/// workspace's, more specific, wins).
pub fn discover(data_root: &Path, workspace: &Path) -> Vec<Skill> {
    let ours = skills_in(&workspace_skills_dir(workspace), SkillScope::Workspace);
    let mut all = skills_in(&user_skills_dir(data_root), SkillScope::User);
    for s in &mut all {
        s.shadowed = ours.iter().any(|o| o.name == s.name);
    }
    all.extend(ours);
    all
}

/// The system prompt's `# Skills` section for `skills` (the shadowed ones left out), naming
/// both folders so a skill installed later, or named in a `[use_skills]` block, can be found
/// too. `workspace` shortens the workspace's paths.
pub fn prompt_section(skills: &[Skill], user_dir: &Path, workspace: &Path) -> String {
    let mut out = format!(
        "# Skills\nSkills are reusable instruction packages: a directory with a SKILL.md, in `{}` (the user's) or `{}` (this workspace's). When a task matches one below, or the user asks for one (the message may start with a [use_skills] block naming them), read that SKILL.md in full with read_file, then follow it; files it mentions are relative to its directory. If a request names a skill without a concrete task, ask the user what they need first.\n",
        user_dir.display(),
        WORKSPACE_SKILLS_DIR
    );
    let listed: Vec<&Skill> = skills.iter().filter(|s| !s.shadowed).collect();
    if listed.is_empty() {
        out.push_str("(no skills installed)\n");
    }
    for s in listed {
        let path = s
            .path
            .strip_prefix(workspace)
            .unwrap_or(&s.path)
            .display()
            .to_string();
        if s.description.is_empty() {
            out.push_str(&format!("- `{}` ({path})\n", s.name));
        } else {
            out.push_str(&format!("- `{}` — {} ({path})\n", s.name, s.description));
        }
    }
    out
}

/// A message that pins `names` (see [`penguin_omni_protocol::markers::use_skills_message`]).
pub use penguin_omni_protocol::markers::use_skills_message;

/// The skills a `[use_skills]` block at the very start of `text` names (the legacy
/// `<use_skills>` form too) and the text after it; `None` when the message has no such block
/// (one further in is plain text) or it names nothing.
pub fn parse_use_skills(text: &str) -> Option<(Vec<String>, &str)> {
    for (open, close) in [
        ("[use_skills]", "[/use_skills]"),
        ("<use_skills>", "</use_skills>"),
    ] {
        let Some(rest) = text.strip_prefix(open) else {
            continue;
        };
        let end = rest.find(close)?;
        let names: Vec<String> = rest[..end]
            .lines()
            .filter_map(|l| l.strip_prefix("skills:"))
            .flat_map(|l| l.split(','))
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return None;
        }
        let after = rest[end + close.len()..].trim_start_matches('\n');
        return Some((names, after));
    }
    None
}

/// Why a skill could not be installed or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillsError {
    /// The source has no `SKILL.md` anywhere a skill would be.
    #[error("{0}: no SKILL.md found (a skill is a directory with a SKILL.md; a repository may keep them in skills/NAME/)")]
    NoSkill(String),
    /// A name that cannot be a skill's directory.
    #[error("{0:?} is not a skill name (letters, digits, _ and - only)")]
    BadName(String),
    /// `remove` of a skill that is not installed.
    #[error("no skill named {0:?} is installed (see `penguin skills list`)")]
    NotInstalled(String),
    /// `git clone` failed.
    #[error("git clone {url}: {message}")]
    Git {
        /// What was cloned.
        url: String,
        /// What git said, or why it could not run.
        message: String,
    },
    /// Reading the source or writing the skills folder failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> SkillsError + '_ {
    move |source| SkillsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `source` is something `git clone` takes rather than a local path.
pub fn is_git_url(source: &str) -> bool {
    ["https://", "http://", "git://", "ssh://", "git@", "file://"]
        .iter()
        .any(|p| source.starts_with(p))
        || (source.ends_with(".git") && !Path::new(source).exists())
}

/// Installs the skills of `source` into the user's skills folder under `data_root`: a local
/// directory, or a git URL cloned (shallow, with the system `git`) into a scratch directory
/// there first. The source is one skill (a `SKILL.md` at its top: named after the directory,
/// or the repository, or else its frontmatter's name) or holds several (each directory up to
/// three levels down with a `SKILL.md`, e.g. `skills/NAME/`). Each is copied whole,
/// replacing an installed one of the same name; links and `.git` are not copied. Returns the
/// installed skills.
// The user's skills folder is under the data root, out of every command's reach (hidden, or
// bound read-only: docs/security.md); std's `remove_dir_all` never follows a link.
#[allow(clippy::disallowed_methods)]
pub fn install(data_root: &Path, source: &str) -> Result<Vec<Skill>, SkillsError> {
    let dest = user_skills_dir(data_root);
    std::fs::create_dir_all(&dest).map_err(io_at(&dest))?;
    if is_git_url(source) {
        let scratch = Scratch::new(&dest, "clone")?;
        let into = scratch.0.join("repo");
        let out = Command::new("git")
            .args(["clone", "--depth", "1", "--quiet", "--", source])
            .arg(&into)
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .map_err(|e| SkillsError::Git {
                url: source.to_owned(),
                message: format!("cannot run git: {e}"),
            })?;
        if !out.status.success() {
            return Err(SkillsError::Git {
                url: source.to_owned(),
                message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        let repo = source
            .trim_end_matches('/')
            .rsplit(['/', ':'])
            .next()
            .unwrap_or_default()
            .trim_end_matches(".git")
            .to_owned();
        install_from(&into, &repo, &dest, source)
    } else {
        let dir = std::fs::canonicalize(source).map_err(io_at(Path::new(source)))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        install_from(&dir, &name, &dest, source)
    }
}

// The user's skills folder is under the data root, out of every command's reach (hidden, or
// bound read-only: docs/security.md); std's `remove_dir_all` never follows a link.
#[allow(clippy::disallowed_methods)]
fn install_from(
    dir: &Path,
    top_name: &str,
    dest: &Path,
    source: &str,
) -> Result<Vec<Skill>, SkillsError> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    let top = Dir::open(dir).map_err(io_at(dir))?;
    if top.metadata(SKILL_FILE).is_ok_and(|m| m.is_file()) {
        let name = if valid_name(top_name) {
            top_name.to_owned()
        } else {
            let text = top
                .read(SKILL_FILE, MAX_SKILL_MD_BYTES)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            parse_frontmatter(&text)
                .ok()
                .and_then(|f| f.name)
                .filter(|n| valid_name(n))
                .ok_or_else(|| SkillsError::BadName(top_name.to_owned()))?
        };
        found.push((name, dir.to_path_buf()));
    } else {
        collect_skill_dirs(&top, 3, &mut found);
    }
    if found.is_empty() {
        return Err(SkillsError::NoSkill(source.to_owned()));
    }
    let mut installed = Vec::new();
    for (name, from) in found {
        let target = dest.join(&name);
        // Copied beside the target first, then swapped in: a failed copy leaves the installed
        // version alone.
        let staging = Scratch::new(dest, "install")?;
        let staged = staging.0.join(&name);
        Dir::open(&staging.0)
            .and_then(|d| d.create_dirs(&name))
            .map_err(io_at(&staged))?;
        copy_tree(&Dir::open(&from).map_err(io_at(&from))?, &staged)?;
        if target.exists() {
            std::fs::remove_dir_all(&target).map_err(io_at(&target))?;
        }
        std::fs::rename(&staged, &target).map_err(io_at(&target))?;
        let text = std::fs::read_to_string(target.join(SKILL_FILE)).unwrap_or_default();
        installed.push(skill_from(
            name,
            &text,
            SkillScope::User,
            target.join(SKILL_FILE),
        ));
    }
    Ok(installed)
}

/// A directory of the skills folder's own (a dot name, so no listing takes it for a skill),
/// removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    // The user's skills folder is under the data root, out of every command's reach (hidden, or
    // bound read-only: docs/security.md); std's `remove_dir_all` never follows a link.
    #[allow(clippy::disallowed_methods)]
    fn new(dir: &Path, what: &str) -> Result<Scratch, SkillsError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(".{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&path).map_err(io_at(&path))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    // The user's skills folder is under the data root, out of every command's reach (hidden, or
    // bound read-only: docs/security.md); std's `remove_dir_all` never follows a link.
    #[allow(clippy::disallowed_methods)]
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Directories below `dir` (up to `depth` levels) that hold a `SKILL.md`, named by their
/// directory; one found is not searched further. Walked by handle, no link followed.
fn collect_skill_dirs(dir: &Dir, depth: usize, found: &mut Vec<(String, PathBuf)>) {
    if depth == 0 {
        return;
    }
    let mut dirs: Vec<_> = dir
        .entries()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.kind == Kind::Dir && e.name != ".git")
        .map(|e| e.name)
        .collect();
    dirs.sort();
    for name in dirs {
        let Ok(sub) = dir.open_dir(&name) else {
            continue;
        };
        let name = name.to_string_lossy().into_owned();
        if sub.metadata(SKILL_FILE).is_ok_and(|m| m.is_file()) {
            if valid_name(&name) && found.iter().all(|(n, _)| *n != name) {
                found.push((name, sub.path().to_path_buf()));
            }
        } else {
            collect_skill_dirs(&sub, depth - 1, found);
        }
    }
}

/// Copies the regular files (with their permissions: a skill's scripts stay executable) and
/// directories of `from` to `to` (created), leaving `.git` out. Both through the door: the
/// source may be a folder a command can change, and a file swapped for a link while it is
/// copied is refused, not followed (a link into `~/.ssh` would otherwise be copied where
/// every sandboxed command may read it).
fn copy_tree(from: &Dir, to: &Path) -> Result<(), SkillsError> {
    let target = Dir::open(to).map_err(io_at(to))?;
    for entry in from.entries().map_err(io_at(from.path()))? {
        let at = from.path().join(&entry.name);
        match entry.kind {
            Kind::Dir if entry.name != ".git" => {
                target.create_dirs(&entry.name).map_err(io_at(&at))?;
                let sub = from.open_dir(&entry.name).map_err(io_at(&at))?;
                copy_tree(&sub, &to.join(&entry.name))?;
            }
            Kind::File => {
                let mut src = from.open_file(&entry.name).map_err(io_at(&at))?;
                let perms = src.metadata().map_err(io_at(&at))?.permissions();
                let mut dst = target.create_new(&entry.name).map_err(io_at(&at))?;
                std::io::copy(&mut src, &mut dst).map_err(io_at(&at))?;
                dst.set_permissions(perms).map_err(io_at(&at))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes the user's skill `name` (its whole directory).
// The user's skills folder is under the data root, out of every command's reach (hidden, or
// bound read-only: docs/security.md); std's `remove_dir_all` never follows a link.
#[allow(clippy::disallowed_methods)]
pub fn remove(data_root: &Path, name: &str) -> Result<PathBuf, SkillsError> {
    if !valid_name(name) {
        return Err(SkillsError::BadName(name.to_owned()));
    }
    let dir = user_skills_dir(data_root).join(name);
    if !dir.join(SKILL_FILE).is_file() {
        return Err(SkillsError::NotInstalled(name.to_owned()));
    }
    std::fs::remove_dir_all(&dir).map_err(io_at(&dir))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_is_read_tolerantly() {
        let fm = parse_frontmatter(
            "\u{feff}---\r\nname: web-design\ndescription: Pages: tokens and themes\nversion: x\nshort_description: \"Web\"\nnested:\n  - a\n---\n# Body\n",
        )
        .unwrap();
        assert_eq!(fm.name.as_deref(), Some("web-design"));
        assert_eq!(fm.description, "Pages: tokens and themes");
        assert_eq!(fm.short_description.as_deref(), Some("Web"));
        assert_eq!(fm.version, 1);
        assert_eq!(
            parse_frontmatter("---\nname: a\nversion: 7\n---")
                .unwrap()
                .version,
            7
        );
        assert!(parse_frontmatter("# no block")
            .unwrap_err()
            .contains("no frontmatter"));
        assert!(parse_frontmatter("---\nname: a\n")
            .unwrap_err()
            .contains("not closed"));
        assert!(parse_frontmatter("---\ndescription: d\n---\n")
            .unwrap_err()
            .contains("no name"));
    }

    fn skill(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join(SKILL_FILE), text).unwrap();
    }

    #[test]
    fn a_workspace_skill_linked_to_a_secret_never_reaches_the_prompt() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, ws) = (tmp.path().join("data"), tmp.path().join("ws"));
        let secret = tmp.path().join("id_rsa");
        std::fs::write(&secret, "---\nname: evil\ndescription: PRIVATE KEY\n---\n").unwrap();
        let evil = workspace_skills_dir(&ws).join("evil");
        std::fs::create_dir_all(&evil).unwrap();
        std::os::unix::fs::symlink(&secret, evil.join(SKILL_FILE)).unwrap();
        // A whole skill folder linked elsewhere, too.
        std::fs::create_dir_all(tmp.path().join("elsewhere/x")).unwrap();
        std::fs::copy(&secret, tmp.path().join("elsewhere/x").join(SKILL_FILE)).unwrap();
        std::os::unix::fs::symlink(
            tmp.path().join("elsewhere/x"),
            workspace_skills_dir(&ws).join("linked"),
        )
        .unwrap();
        let all = discover(&root, &ws);
        assert!(all.is_empty(), "{all:?}");
        let section = prompt_section(&all, &user_skills_dir(&root), &ws);
        assert!(!section.contains("PRIVATE KEY"));
    }

    #[test]
    fn discovery_names_skills_by_directory_reports_broken_ones_and_lets_the_workspace_win() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, ws) = (tmp.path().join("data"), tmp.path().join("ws"));
        let user = user_skills_dir(&root);
        skill(
            &user,
            "deploy",
            "---\nname: other\ndescription: Ship it\n---\nbody",
        );
        skill(&user, "broken", "no frontmatter here");
        skill(
            &user,
            "shared",
            "---\nname: shared\ndescription: user's\n---\n",
        );
        std::fs::create_dir_all(user.join("empty-dir")).unwrap();
        skill(&user, "bad name", "---\nname: x\n---\n");
        skill(
            &workspace_skills_dir(&ws),
            "shared",
            "---\nname: shared\ndescription: the project's\n---\n",
        );
        let all = discover(&root, &ws);
        let names: Vec<(&str, SkillScope, bool)> = all
            .iter()
            .map(|s| (s.name.as_str(), s.scope, s.shadowed))
            .collect();
        assert_eq!(
            names,
            [
                ("broken", SkillScope::User, false),
                ("deploy", SkillScope::User, false),
                ("shared", SkillScope::User, true),
                ("shared", SkillScope::Workspace, false),
            ]
        );
        assert!(all[0]
            .problem
            .as_deref()
            .unwrap()
            .contains("no frontmatter"));
        assert_eq!(all[1].description, "Ship it");
        let section = prompt_section(&all, &user, &ws);
        assert!(section.starts_with("# Skills\n"), "{section}");
        assert!(section.contains(&format!(
            "- `deploy` — Ship it ({})\n",
            user.join("deploy/SKILL.md").display()
        )));
        assert!(section.contains("- `broken` ("), "{section}");
        assert!(section.contains("- `shared` — the project's (.agents/skills/shared/SKILL.md)"));
        assert!(!section.contains("— user's"), "{section}");
        let json = serde_json::to_value(&all[2]).unwrap();
        assert_eq!(json["scope"], "user");
        assert_eq!(json["shadowed"], true);
        assert!(prompt_section(&[], &user, &ws).contains("(no skills installed)"));
    }

    #[test]
    fn use_skills_blocks_are_built_and_read_at_the_start_only() {
        let names = vec!["web-design".to_owned(), "deploy".to_owned()];
        let text = use_skills_message(&names, "fix the layout");
        assert_eq!(
            text,
            "[use_skills]\nskills: web-design, deploy\n[/use_skills]\n\nfix the layout"
        );
        assert_eq!(
            parse_use_skills(&text),
            Some((names.clone(), "fix the layout"))
        );
        assert_eq!(
            parse_use_skills("<use_skills>\nskills: a\n</use_skills>"),
            Some((vec!["a".to_owned()], ""))
        );
        assert_eq!(
            parse_use_skills("say [use_skills]\nskills: a\n[/use_skills]"),
            None
        );
        assert_eq!(
            parse_use_skills("[use_skills]\nskills: \n[/use_skills]"),
            None
        );
        assert_eq!(use_skills_message(&[], "x"), "x");
    }

    #[test]
    fn install_copies_a_directory_or_the_skills_of_a_repository_and_remove_deletes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("data");
        let src = tmp.path().join("my-skill");
        skill(
            tmp.path(),
            "my-skill",
            "---\nname: my-skill\ndescription: d\n---\n",
        );
        std::fs::create_dir_all(src.join("reference")).unwrap();
        std::fs::write(src.join("reference/a.md"), "ref").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("leak")).unwrap();
        let done = install(&root, src.to_str().unwrap()).unwrap();
        assert_eq!(done.len(), 1);
        let at = user_skills_dir(&root).join("my-skill");
        assert_eq!(
            std::fs::read_to_string(at.join("reference/a.md")).unwrap(),
            "ref"
        );
        assert!(at.join("leak").symlink_metadata().is_err());
        // A repository layout: several skills below; reinstalling replaces the directory.
        let repo = tmp.path().join("repo");
        skill(&repo.join("skills"), "one", "---\nname: one\n---\n");
        skill(
            &repo.join("skills"),
            "my-skill",
            "---\nname: my-skill\nversion: 2\n---\n",
        );
        let done = install(&root, repo.to_str().unwrap()).unwrap();
        let names: Vec<&str> = done.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["my-skill", "one"]);
        assert!(!at.join("reference").exists());
        assert_eq!(done[0].version, 2);
        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(matches!(
            install(&root, empty.to_str().unwrap()),
            Err(SkillsError::NoSkill(_))
        ));
        // No scratch directory is left behind.
        let left: Vec<_> = std::fs::read_dir(user_skills_dir(&root))
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.iter().all(|n| !n.starts_with('.')), "{left:?}");
        remove(&root, "one").unwrap();
        assert!(matches!(
            remove(&root, "one"),
            Err(SkillsError::NotInstalled(_))
        ));
        assert!(matches!(
            remove(&root, "../x"),
            Err(SkillsError::BadName(_))
        ));
    }

    #[test]
    fn git_urls_are_told_from_paths() {
        assert!(is_git_url("https://github.com/a/b"));
        assert!(is_git_url("git@github.com:a/b.git"));
        assert!(!is_git_url("./skills/x"));
        assert!(!is_git_url("/abs/path"));
    }
}
