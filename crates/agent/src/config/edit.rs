//! Changing `config.toml`'s models in place: `penguin models add | default | remove` and the
//! server's `POST/PUT/DELETE /api/models` both come here, so the file is edited one way.
//!
//! The file is edited as a document ([`toml_edit`]), not re-serialized from [`Config`]: the
//! user's comments, blank lines and key order survive, and a table penguin does not touch is
//! written back byte for byte. Each save checks that the result still reads as a [`Config`],
//! then replaces the file atomically (a temporary file in the same directory, renamed over
//! it), so a crash or a concurrent reader never sees half a file.
//!
//! Keys are never written: a model names the environment variable that holds its key
//! (`api_key_env`), and [`check_key_env`] refuses anything that is not a variable's name.
//!
//! ```
//! use penguin_agent::config::edit::{ConfigFile, ModelFields};
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("config.toml"), "# mine\n[compaction]\nmode = \"discard\"\n").unwrap();
//! let mut file = ConfigFile::open(dir.path()).unwrap();
//! file.add_model("local", &ModelFields {
//!     protocol: Some("openai-chat".into()),
//!     base_url: Some("http://127.0.0.1:8080/v1".into()),
//!     model: Some("qwen".into()),
//!     api_key_env: None,
//! }).unwrap();
//! file.set_default("local").unwrap();
//! let config = file.save().unwrap();
//! assert_eq!(config.default_model.as_deref(), Some("local"));
//! let text = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
//! assert!(text.starts_with("default_model = \"local\"\n# mine\n[compaction]"));
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table, Value};

use super::{config_path, Config, ConfigError};
use crate::models::Protocol;

/// A model's fields as `add` and `change` take them: `protocol`, `base_url`, `model` (the
/// upstream id) and `api_key_env` (the NAME of the variable holding the key).
///
/// In [`ConfigFile::change_model`], `None` leaves a field as it is and an empty string takes
/// an optional one (`base_url`, `api_key_env`) out, back to the protocol's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelFields {
    /// The adapter: `openai-chat`, `openai-responses`, `anthropic-messages`, `gemini`,
    /// `ollama`, or one registered (an alias such as `openai` is written as its adapter's name).
    pub protocol: Option<String>,
    /// Where the endpoint is; absent: the protocol's default.
    pub base_url: Option<String>,
    /// The upstream model id.
    pub model: Option<String>,
    /// The environment variable holding the key; absent: the protocol's default variable.
    pub api_key_env: Option<String>,
}

/// Why an edit was refused. [`EditError::field`] names the field at fault, as `config.toml`
/// spells it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// A field's value cannot be used.
    #[error("{field}: {reason}")]
    Invalid {
        /// `name`, `protocol`, `base_url`, `model` or `api_key_env`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// No `[models.NAME]` of that name.
    #[error(
        "no model named {name:?} in config.toml (configured: {})",
        list_or_none(configured)
    )]
    NotFound {
        /// The name asked for.
        name: String,
        /// The names configured.
        configured: Vec<String>,
    },
    /// `add` of a name already configured.
    #[error("a model named {0:?} is already configured; change it (PUT, or remove it first) or pick another name")]
    Exists(String),
    /// `config.toml` cannot be read, does not parse, or would not parse after the edit.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

impl EditError {
    /// The field at fault (`name` for a name that is taken or unknown), `None` for a file that
    /// cannot be read or written.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            EditError::Invalid { field, .. } => Some(field),
            EditError::NotFound { .. } | EditError::Exists(_) => Some("name"),
            EditError::Config(_) | EditError::Write { .. } => None,
        }
    }

    fn invalid(field: &'static str, reason: impl Into<String>) -> EditError {
        EditError::Invalid {
            field,
            reason: reason.into(),
        }
    }
}

/// A model's name as `[models.NAME]`, `--model NAME` and `/api/models/NAME` use it: letters,
/// digits, `-`, `_` and `.`, at most 64. `demo` is the built-in offline model's.
pub fn check_name(name: &str) -> Result<(), EditError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(EditError::invalid(
            "name",
            format!(
                "{:?} is not a model name (1 to 64 letters, digits, '-', '_' or '.')",
                clip(name)
            ),
        ));
    }
    if name == "demo" {
        return Err(EditError::invalid(
            "name",
            "\"demo\" is the built-in offline model's name; pick another",
        ));
    }
    Ok(())
}

/// The adapter's own name for `protocol` (aliases resolved), or why there is none.
pub fn check_protocol(protocol: &str) -> Result<String, EditError> {
    protocol
        .trim()
        .parse::<Protocol>()
        .map(|p| p.as_str().to_owned())
        .map_err(|e| EditError::invalid("protocol", e.to_string()))
}

/// An `http://` or `https://` URL with a host.
pub fn check_base_url(url: &str) -> Result<(), EditError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest)
            if !rest.is_empty() && !rest.starts_with('/') && !url.contains(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err(EditError::invalid(
            "base_url",
            format!(
                "{:?} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080/v1)",
                clip(url)
            ),
        )),
    }
}

/// An upstream model id: not blank, on one line.
pub fn check_model_id(id: &str) -> Result<(), EditError> {
    if id.trim().is_empty() || id.chars().any(char::is_control) || id.len() > 256 {
        return Err(EditError::invalid(
            "model",
            "expected the upstream model id (e.g. gpt-4.1-mini or qwen2.5-coder:7b), on one line",
        ));
    }
    Ok(())
}

/// The NAME of an environment variable (`[A-Za-z_][A-Za-z0-9_]*`). What is refused is not
/// echoed back: it may be the key itself, pasted where its variable's name belongs.
pub fn check_key_env(var: &str) -> Result<(), EditError> {
    let mut chars = var.chars();
    let shaped = var.len() <= 128
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if shaped && !looks_like_a_key(var) {
        Ok(())
    } else {
        Err(EditError::invalid(
            "api_key_env",
            "expected the NAME of the environment variable holding the key (letters, digits and _, e.g. OPENAI_API_KEY), not the key: config.toml never holds a key",
        ))
    }
}

/// Keys that happen to be shaped like a variable's name: the prefixes providers give theirs
/// (Google's `AIza`, Stripe-style `sk_`), or a long run that mixes lower and upper case with
/// digits, which no conventional variable name does.
fn looks_like_a_key(var: &str) -> bool {
    let mixed = var.chars().any(|c| c.is_ascii_lowercase())
        && var.chars().any(|c| c.is_ascii_uppercase())
        && var.chars().any(|c| c.is_ascii_digit());
    var.starts_with("AIza") || var.starts_with("sk_") || (var.len() >= 24 && mixed)
}

fn clip(s: &str) -> String {
    s.chars().take(80).collect()
}

/// `config.toml` open for editing: its document as written, and where it goes back.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    path: PathBuf,
    doc: DocumentMut,
}

impl ConfigFile {
    /// `config.toml` under the data root `root`; a missing file is an empty one. A file that
    /// does not read as a [`Config`] is refused as it is: an edit would not make it usable.
    pub fn open(root: &Path) -> Result<ConfigFile, EditError> {
        let path = config_path(root);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(ConfigError::Read { path, source }.into()),
        };
        ConfigFile::from_text(path, &text)
    }

    /// A config file's text, to be saved at `path`.
    pub fn from_text(path: PathBuf, text: &str) -> Result<ConfigFile, EditError> {
        if let Err(source) = Config::parse(text) {
            return Err(ConfigError::Parse { path, source }.into());
        }
        // Config::parse accepted it, so it is TOML: this parse cannot fail, and is checked
        // all the same.
        let doc = text.parse::<DocumentMut>().map_err(|e| {
            EditError::Config(ConfigError::Invalid(format!("{}: {e}", path.display())))
        })?;
        Ok(ConfigFile { path, doc })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text [`ConfigFile::save`] writes.
    pub fn text(&self) -> String {
        self.doc.to_string()
    }

    /// The configured model names, in the file's order.
    pub fn model_names(&self) -> Vec<String> {
        self.doc
            .get("models")
            .and_then(Item::as_table_like)
            .map(|t| t.iter().map(|(k, _)| k.to_owned()).collect())
            .unwrap_or_default()
    }

    /// `default_model`, when set.
    pub fn default_model(&self) -> Option<String> {
        self.doc
            .get("default_model")
            .and_then(Item::as_str)
            .map(str::to_owned)
    }

    fn models_mut(&mut self) -> Result<&mut Table, EditError> {
        let item = self.doc.entry("models").or_insert_with(|| {
            let mut t = Table::new();
            // `[models.NAME]` headers only: no empty `[models]` above them.
            t.set_implicit(true);
            Item::Table(t)
        });
        item.as_table_mut().ok_or_else(|| {
            EditError::invalid(
                "name",
                "config.toml writes `models` inline; write it as [models.NAME] tables to edit it here",
            )
        })
    }

    fn not_found(&self, name: &str) -> EditError {
        EditError::NotFound {
            name: name.to_owned(),
            configured: self.model_names(),
        }
    }

    /// Adds `[models.NAME]` after the configured models, with `protocol` and `model`
    /// (required) and `base_url` and `api_key_env` (when given).
    pub fn add_model(&mut self, name: &str, fields: &ModelFields) -> Result<(), EditError> {
        check_name(name)?;
        let protocol = check_protocol(
            fields
                .protocol
                .as_deref()
                .ok_or_else(|| EditError::invalid("protocol", "required (e.g. openai-chat)"))?,
        )?;
        let model = fields
            .model
            .as_deref()
            .map(str::trim)
            .ok_or_else(|| EditError::invalid("model", "required: the upstream model id"))?;
        check_model_id(model)?;
        let base_url = fields
            .base_url
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        if let Some(url) = base_url {
            check_base_url(url)?;
        }
        let key_env = fields
            .api_key_env
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        if let Some(var) = key_env {
            check_key_env(var)?;
        }
        if self.model_names().iter().any(|n| n == name) {
            return Err(EditError::Exists(name.to_owned()));
        }
        let mut table = Table::new();
        table.insert("protocol", toml_edit::value(protocol));
        if let Some(url) = base_url {
            table.insert("base_url", toml_edit::value(url));
        }
        table.insert("model", toml_edit::value(model));
        if let Some(var) = key_env {
            table.insert("api_key_env", toml_edit::value(var));
        }
        // A file of no tables keeps its comments after its last value, in the document's
        // trailing text, which is written after every table: moved above the first table,
        // they stay where they were.
        let first_table = !self.doc.iter().any(|(_, item)| item.is_table());
        // A blank line after them says they are the file's, not the table's
        // ([`ConfigFile::remove_model`] gives them back).
        if first_table && !self.doc.trailing().as_str().unwrap_or("").trim().is_empty() {
            let trailing = self.doc.trailing().as_str().unwrap_or("").to_owned();
            table
                .decor_mut()
                .set_prefix(format!("{}\n\n", trailing.trim_end_matches('\n')));
            self.doc.set_trailing("");
        }
        self.models_mut()?.insert(name, Item::Table(table));
        Ok(())
    }

    /// Changes the fields given of `[models.NAME]` (see [`ModelFields`]); a value keeps the
    /// comment written after it.
    pub fn change_model(&mut self, name: &str, fields: &ModelFields) -> Result<(), EditError> {
        if !self.model_names().iter().any(|n| n == name) {
            return Err(self.not_found(name));
        }
        let protocol = fields.protocol.as_deref().map(check_protocol).transpose()?;
        let model = fields.model.as_deref().map(str::trim);
        if let Some(m) = model {
            check_model_id(m)?;
        }
        let base_url = fields.base_url.as_deref().map(str::trim);
        if let Some(url) = base_url.filter(|s| !s.is_empty()) {
            check_base_url(url)?;
        }
        let key_env = fields.api_key_env.as_deref().map(str::trim);
        if let Some(var) = key_env.filter(|s| !s.is_empty()) {
            check_key_env(var)?;
        }
        let models = self.models_mut()?;
        let table = models
            .get_mut(name)
            .and_then(Item::as_table_like_mut)
            .ok_or_else(|| EditError::invalid("name", format!("models.{name} is not a table")))?;
        let mut set = |key: &str, v: Option<&str>| match v {
            None => {}
            Some("") => {
                table.remove(key);
            }
            Some(v) => match table.get_mut(key).and_then(Item::as_value_mut) {
                Some(old) => {
                    let decor = old.decor().clone();
                    *old = Value::from(v);
                    *old.decor_mut() = decor;
                }
                None => {
                    table.insert(key, toml_edit::value(v));
                }
            },
        };
        set("protocol", protocol.as_deref());
        set("base_url", base_url);
        set("model", model);
        set("api_key_env", key_env);
        Ok(())
    }

    /// Takes `[models.NAME]` out, with the comments right above it (those set apart by a blank
    /// line are the file's, and stay). When it was the default, `true` is returned and
    /// `default_model` no longer names it (so the file names no model it lacks): a line with
    /// the user's comments then names `demo`, one without goes; either way the demo is the
    /// default.
    pub fn remove_model(&mut self, name: &str) -> Result<bool, EditError> {
        if !self.model_names().iter().any(|n| n == name) {
            return Err(self.not_found(name));
        }
        let removed = self.models_mut()?.remove(name);
        if let Some(Item::Table(table)) = removed {
            self.keep_file_comments(&table);
        }
        let was_default = self.default_model().as_deref() == Some(name);
        if was_default {
            // A line the user wrote (with their comments about it) stays, naming the demo,
            // which is what no default_model gives too; one penguin added goes.
            let commented = self.doc.key("default_model").is_some_and(|k| {
                k.leaf_decor()
                    .prefix()
                    .and_then(|p| p.as_str())
                    .is_some_and(|p| p.contains('#'))
            }) || self
                .doc
                .get("default_model")
                .and_then(Item::as_value)
                .and_then(|v| v.decor().suffix())
                .and_then(|s| s.as_str())
                .is_some_and(|s| s.contains('#'));
            if commented {
                self.set_default("demo")?;
            } else {
                self.doc.remove("default_model");
            }
        }
        Ok(was_default)
    }

    /// The comments above a removed table that were about the file, not the table: those
    /// separated from its header by a blank line (the file's opening lines, above its first
    /// table). They move to the table that came next, or to the end.
    fn keep_file_comments(&mut self, removed: &Table) {
        let prefix = removed
            .decor()
            .prefix()
            .and_then(|p| p.as_str())
            .unwrap_or("");
        let Some(blank) = prefix.rfind("\n\n") else {
            return;
        };
        let keep = &prefix[..blank + 2];
        if !keep.contains('#') {
            return;
        }
        let keep = keep.to_owned();
        let Some(at) = removed.position() else {
            return;
        };
        let mut next = None;
        visit_tables(self.doc.as_table_mut(), &mut |t| {
            if let Some(p) = t.position().filter(|p| *p > at) {
                next = Some(next.map_or(p, |n: usize| n.min(p)));
            }
        });
        match next {
            Some(next) => visit_tables(self.doc.as_table_mut(), &mut |t| {
                if t.position() == Some(next) {
                    let old = t
                        .decor()
                        .prefix()
                        .and_then(|p| p.as_str())
                        .unwrap_or("")
                        .to_owned();
                    t.decor_mut()
                        .set_prefix(format!("{keep}{}", old.trim_start_matches('\n')));
                }
            }),
            None => {
                // At the end of the file the blank line that set them apart is not needed.
                let trailing = self.doc.trailing().as_str().unwrap_or("").to_owned();
                self.doc
                    .set_trailing(format!("{trailing}{}\n", keep.trim_end_matches('\n')));
            }
        }
    }

    /// Sets `default_model` to a configured model, or to `demo`.
    pub fn set_default(&mut self, name: &str) -> Result<(), EditError> {
        if name != "demo" && !self.model_names().iter().any(|n| n == name) {
            return Err(self.not_found(name));
        }
        match self
            .doc
            .get_mut("default_model")
            .and_then(Item::as_value_mut)
        {
            Some(old) => {
                let decor = old.decor().clone();
                *old = Value::from(name);
                *old.decor_mut() = decor;
            }
            None => {
                self.doc.insert("default_model", toml_edit::value(name));
            }
        }
        Ok(())
    }

    /// Writes the file (atomically, keeping its permissions) and gives the configuration it
    /// now holds. An edit that would leave a file penguin cannot read is refused, the file
    /// untouched.
    pub fn save(&self) -> Result<Config, EditError> {
        let text = self.text();
        let config = Config::parse(&text).map_err(|source| ConfigError::Parse {
            path: self.path.clone(),
            source,
        })?;
        write_atomic(&self.path, &text).map_err(|source| EditError::Write {
            path: self.path.clone(),
            source,
        })?;
        Ok(config)
    }
}

/// Calls `f` on every table under `table` (arrays of tables' too), depth first.
fn visit_tables(table: &mut Table, f: &mut dyn FnMut(&mut Table)) {
    for (_, item) in table.iter_mut() {
        match item {
            Item::Table(t) => {
                f(t);
                visit_tables(t, f);
            }
            Item::ArrayOfTables(a) => {
                for t in a.iter_mut() {
                    f(t);
                    visit_tables(t, f);
                }
            }
            _ => {}
        }
    }
}

/// Replaces `path` with `text` so a reader sees the old file or the new one, never a part:
/// a temporary file beside it (same directory, so the rename does not cross file systems),
/// synced, renamed over it. A `config.toml` that is a link (a dotfiles checkout) has its
/// target replaced, the link kept.
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let path = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path)?,
        _ => path.to_path_buf(),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.toml".into());
    let tmp = dir.join(format!(".{file_name}.{}.{nanos}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        if let Ok(meta) = std::fs::metadata(&path) {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        // The rename is durable once the directory is; a directory that cannot be opened
        // for syncing (some file systems) still has the new file.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMENTED: &str = r#"# My penguin setup. Keep this comment.
default_model = "local"   # the one I use

[models.local]   # llama.cpp on the desk
protocol = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"  # its port
model = "smollm2"

# Hosted, for hard tasks.
[models.big]
protocol = "anthropic-messages"
model = "claude-sonnet-4-5"
api_key_env = "MY_ANTHROPIC"

[compaction]
mode    =   "discard"    # odd spacing, kept
"#;

    fn open(text: &str) -> (tempfile::TempDir, ConfigFile) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), text).unwrap();
        let file = ConfigFile::open(dir.path()).unwrap();
        (dir, file)
    }

    fn fields(protocol: &str, model: &str, url: Option<&str>, key: Option<&str>) -> ModelFields {
        ModelFields {
            protocol: Some(protocol.into()),
            model: Some(model.into()),
            base_url: url.map(Into::into),
            api_key_env: key.map(Into::into),
        }
    }

    #[test]
    fn an_add_then_a_remove_gives_back_the_file_byte_for_byte() {
        let (dir, mut file) = open(COMMENTED);
        file.add_model(
            "ollama",
            &fields(
                "ollama",
                "qwen2.5-coder:7b",
                Some("http://127.0.0.1:11434"),
                None,
            ),
        )
        .unwrap();
        let config = file.save().unwrap();
        assert_eq!(config.models["ollama"].model, "qwen2.5-coder:7b");
        let added = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
        // The new table comes after the other models, before [compaction]; the rest is as it was.
        assert!(
            added.contains("model = \"claude-sonnet-4-5\"\napi_key_env = \"MY_ANTHROPIC\"\n\n[models.ollama]\nprotocol = \"ollama\"\nbase_url = \"http://127.0.0.1:11434\"\nmodel = \"qwen2.5-coder:7b\"\n\n[compaction]"),
            "{added}"
        );
        assert!(added.contains("mode    =   \"discard\"    # odd spacing, kept"));

        let mut file = ConfigFile::open(dir.path()).unwrap();
        assert!(!file.remove_model("ollama").unwrap());
        file.save().unwrap();
        let back = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
        assert_eq!(back, COMMENTED);
    }

    #[test]
    fn the_first_model_of_an_empty_file_needs_no_models_header() {
        let (dir, mut file) = open("");
        file.add_model(
            "a",
            &fields("openai", "gpt-4.1-mini", None, Some("WORK_KEY")),
        )
        .unwrap();
        file.set_default("a").unwrap();
        file.save().unwrap();
        let text = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
        assert_eq!(
            text,
            "default_model = \"a\"\n\n[models.a]\nprotocol = \"openai-chat\"\nmodel = \"gpt-4.1-mini\"\napi_key_env = \"WORK_KEY\"\n"
        );
        let mut file = ConfigFile::open(dir.path()).unwrap();
        assert!(file.remove_model("a").unwrap(), "it was the default");
        file.save().unwrap();
        let text = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
        assert_eq!(Config::parse(&text).unwrap(), Config::default(), "{text}");
    }

    #[test]
    fn a_change_keeps_the_comments_beside_the_values() {
        let (_dir, mut file) = open(COMMENTED);
        file.change_model(
            "local",
            &ModelFields {
                base_url: Some("http://127.0.0.1:9090/v1".into()),
                model: Some("qwen3".into()),
                ..ModelFields::default()
            },
        )
        .unwrap();
        file.set_default("big").unwrap();
        let text = file.text();
        assert!(
            text.contains(
                "base_url = \"http://127.0.0.1:9090/v1\"  # its port\nmodel = \"qwen3\"\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("default_model = \"big\"   # the one I use\n"),
            "{text}"
        );
        // An empty string takes an optional field out.
        file.change_model(
            "big",
            &ModelFields {
                api_key_env: Some(String::new()),
                ..ModelFields::default()
            },
        )
        .unwrap();
        let config = file.save().unwrap();
        assert_eq!(config.models["big"].api_key_env, None);
        assert_eq!(config.models["local"].model, "qwen3");
    }

    #[test]
    fn a_key_is_refused_where_its_variable_belongs_and_never_echoed() {
        let (dir, mut file) = open(COMMENTED);
        for pasted in [
            "sk-proj-abc123DEF456",
            "sk_live_abc",
            "AIzaSyD3xampleKeyValue0123456789abcde",
            "Xk93hFq0aZ81mLp2Rt7wQ4vB",
            "sk_live abc",
            "9KEY",
            "A=B",
        ] {
            let e = file
                .add_model("x", &fields("openai-chat", "m", None, Some(pasted)))
                .unwrap_err();
            assert_eq!(e.field(), Some("api_key_env"), "{pasted}");
            assert!(!e.to_string().contains(pasted), "{e}");
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("config.toml")).unwrap(),
            COMMENTED
        );
        // Variable names as people write them pass.
        for var in ["OPENAI_API_KEY", "_WORK_KEY2", "anthropic_key"] {
            check_key_env(var).unwrap();
        }
    }

    #[test]
    fn bad_fields_and_names_are_named() {
        let (_dir, mut file) = open(COMMENTED);
        let field = |r: Result<(), EditError>| r.unwrap_err().field();
        assert_eq!(
            field(file.add_model("local", &fields("ollama", "m", None, None))),
            Some("name")
        );
        assert_eq!(
            field(file.add_model("demo", &fields("ollama", "m", None, None))),
            Some("name")
        );
        assert_eq!(
            field(file.add_model("a b", &fields("ollama", "m", None, None))),
            Some("name")
        );
        assert_eq!(
            field(file.add_model("x", &fields("carrier-pigeon", "m", None, None))),
            Some("protocol")
        );
        assert_eq!(
            field(file.add_model("x", &fields("ollama", " ", None, None))),
            Some("model")
        );
        assert_eq!(
            field(file.add_model("x", &fields("ollama", "m", Some("localhost:1"), None))),
            Some("base_url")
        );
        assert_eq!(
            field(file.change_model("nope", &ModelFields::default())),
            Some("name")
        );
        assert_eq!(field(file.set_default("nope")), Some("name"));
        let e = file.remove_model("nope").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no model named \"nope\" in config.toml (configured: local, big)"
        );
        assert_eq!(file.text(), COMMENTED, "refused edits change nothing");
    }

    #[test]
    fn the_file_s_opening_comment_outlives_the_first_table() {
        let text = "# About this file.\n\n# About local.\n[models.local]\nprotocol = \"ollama\"\nmodel = \"m\"\n\n[compaction]\nmode = \"discard\"\n";
        let (_dir, mut file) = open(text);
        file.remove_model("local").unwrap();
        assert_eq!(
            file.text(),
            "# About this file.\n\n[compaction]\nmode = \"discard\"\n"
        );
        let (_dir, mut file) =
            open("# About this file.\n\n[models.local]\nprotocol = \"ollama\"\nmodel = \"m\"\n");
        file.remove_model("local").unwrap();
        assert_eq!(file.text(), "# About this file.\n");
    }

    #[test]
    fn penguin_init_s_file_survives_a_default_added_and_removed() {
        // As `penguin init` writes it: the default's comments, and every table commented out.
        let text = "# penguin configuration.\n\n# The default.\ndefault_model = \"demo\"\n\n# A local server:\n# [models.local]\n# protocol = \"openai-chat\"\n\n# [tools]\n# edit = \"classic\"\n";
        let (dir, mut file) = open(text);
        file.add_model("loc", &fields("ollama", "qwen", None, None))
            .unwrap();
        file.set_default("loc").unwrap();
        file.save().unwrap();
        let added = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
        assert!(
            added.contains("# edit = \"classic\"\n\n[models.loc]\n"),
            "{added}"
        );
        assert!(
            added.contains("# The default.\ndefault_model = \"loc\"\n"),
            "{added}"
        );
        let mut file = ConfigFile::open(dir.path()).unwrap();
        assert!(file.remove_model("loc").unwrap());
        assert_eq!(file.text(), text);
    }

    #[test]
    fn a_file_penguin_cannot_read_is_not_edited() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), "[models.a]\nprotocol = 3\n").unwrap();
        let e = ConfigFile::open(dir.path()).unwrap_err();
        assert!(
            matches!(e, EditError::Config(ConfigError::Parse { .. })),
            "{e}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn saving_keeps_the_permissions_and_follows_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("dotfiles.toml");
        std::fs::write(&real, "# linked\n").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&real, root.join("config.toml")).unwrap();
        let mut file = ConfigFile::open(&root).unwrap();
        file.add_model("a", &fields("ollama", "m", None, None))
            .unwrap();
        file.save().unwrap();
        assert!(std::fs::symlink_metadata(root.join("config.toml"))
            .unwrap()
            .file_type()
            .is_symlink());
        let text = std::fs::read_to_string(&real).unwrap();
        assert!(
            text.starts_with("# linked\n") && text.contains("[models.a]"),
            "{text}"
        );
        let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 2, "no temporary file left: {leftovers:?}");
    }
}
