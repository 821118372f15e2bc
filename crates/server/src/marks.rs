//! What a person marks a session with (archived, pinned, a title of their own) and which
//! sessions a listing keeps: one rule for `GET /api/sessions` and `penguin sessions`.
//!
//! The marks live in the session's settings beside its trace (the same file a `PATCH` of its
//! title writes), so a restart, an idle unload and a cluster node taking the session over keep
//! them. A listing reads them for every session at once ([`read_marks`]); the server keeps them
//! cached and reads again only what changed.
//!
//! ```
//! use penguin_server::marks::{Archived, SessionFilter};
//!
//! let filter = SessionFilter::new(Archived::Hidden, Some("Parser  FIX"));
//! assert!(filter.keeps(false, ["Fix the parser", ""]));
//! assert!(!filter.keeps(true, ["Fix the parser"]), "archived: hidden by default");
//! assert!(!filter.keeps(false, ["Fix the lexer"]), "every word must be found");
//! ```

use std::collections::HashMap;

use penguin_trace_store::TraceLocation;

pub use crate::settings::Marks;
use crate::settings::SettingsStore;

/// Which sessions a listing shows by their `archived` mark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Archived {
    /// Only those not archived (the default; `?archived=false`).
    #[default]
    Hidden,
    /// Only the archived ones (`?archived=true`, `penguin sessions --archived`).
    Only,
    /// Both (`?archived=all`).
    All,
}

impl Archived {
    /// `?archived=`'s value: `true`, `false` or `all`.
    pub fn parse(value: &str) -> Option<Archived> {
        match value {
            "false" => Some(Archived::Hidden),
            "true" => Some(Archived::Only),
            "all" => Some(Archived::All),
            _ => None,
        }
    }

    fn keeps(self, archived: bool) -> bool {
        match self {
            Archived::Hidden => !archived,
            Archived::Only => archived,
            Archived::All => true,
        }
    }
}

/// Which sessions a listing keeps: by their archived mark, and by a search of their text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// By the archived mark.
    pub archived: Archived,
    /// The search's words, lowercased; none: every session.
    words: Vec<String>,
}

impl SessionFilter {
    /// A filter by `archived` and, when `search` has any words, by them: a session is kept
    /// when each word is found, whatever its case, in one of its texts.
    pub fn new(archived: Archived, search: Option<&str>) -> SessionFilter {
        SessionFilter {
            archived,
            words: search
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_lowercase)
                .collect(),
        }
    }

    /// Whether it searches at all.
    pub fn searches(&self) -> bool {
        !self.words.is_empty()
    }

    /// Whether a session with this archived mark and these texts (its title, its first prompt)
    /// is listed.
    pub fn keeps<'a>(&self, archived: bool, texts: impl IntoIterator<Item = &'a str>) -> bool {
        if !self.archived.keeps(archived) {
            return false;
        }
        if self.words.is_empty() {
            return true;
        }
        let texts: Vec<String> = texts.into_iter().map(str::to_lowercase).collect();
        self.words
            .iter()
            .all(|w| texts.iter().any(|t| t.contains(w.as_str())))
    }
}

/// The marks of every session of `location`'s agent that has any, by id.
pub fn read_marks(location: &TraceLocation) -> HashMap<String, Marks> {
    SettingsStore::new(location).marks()
}

/// Marks session `id` of `location`'s agent archived or not, pinned or not (`None`: as it
/// is), keeping the rest of its settings. A server that has the session loaded shows the
/// change when it loads the session again; change a loaded session through the server
/// (`PATCH /api/sessions/{id}`).
pub fn set_marks(
    location: &TraceLocation,
    id: &str,
    archived: Option<bool>,
    pinned: Option<bool>,
) -> std::io::Result<()> {
    SettingsStore::new(location).change(id, |s| {
        if let Some(a) = archived {
            s.archived = a;
        }
        if let Some(p) = pinned {
            s.pinned = p;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archived_query_and_the_search() {
        assert_eq!(Archived::parse("true"), Some(Archived::Only));
        assert_eq!(Archived::parse("all"), Some(Archived::All));
        assert_eq!(Archived::parse("yes"), None);
        let all = SessionFilter::new(Archived::All, Some("  "));
        assert!(!all.searches());
        assert!(all.keeps(true, []) && all.keeps(false, []));
        let only = SessionFilter::new(Archived::Only, Some("PENGUINS count"));
        assert!(only.keeps(true, ["title", "count the Penguins"]));
        assert!(
            only.keeps(true, ["Count", "penguins"]),
            "words in different texts"
        );
        assert!(!only.keeps(false, ["count the penguins"]));
        assert!(!only.keeps(true, ["count the birds"]));
        // Unicode case.
        assert!(SessionFilter::new(Archived::Hidden, Some("ÉTÉ")).keeps(false, ["un été"]));
    }
}
