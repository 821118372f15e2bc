//! What tokens cost: a model's price (`[models.NAME.price]` of `config.toml`, else the
//! dated table of well-known model ids below), the cost of a request's token counts, and a
//! cost budget (`--max-cost`).
//!
//! # Prices
//!
//! Dollars per million tokens, in this shape:
//!
//! ```toml
//! [models.claude.price]
//! input = 3.0           # required: prompt tokens not read from a cache
//! output = 15.0         # required: thinking and response tokens
//! cached_input = 0.30   # optional (default: input): prompt tokens read from the cache
//! cache_write = 3.75    # optional (default: input): what a provider that charges for
//!                       # writing its cache asks for the uncached prompt (Anthropic)
//! ```
//!
//! A configured price replaces the table's entry for that model id whole: a field left out
//! takes its default above, never the table's.
//!
//! # How token counts are priced
//!
//! A request's [`TokenCounts`] (protocol [§6.3](penguin_omni_protocol::spec#s6.3)) have no
//! input field: `cache_read` is the prompt read from the provider's cache, `uncached_prompt`
//! (JSON key `cache_write`) the rest of the prompt, `output` thinking plus response. So
//!
//! ```text
//! cost = cache_read × cached_input + uncached_prompt × (cache_write, else input) + output × output
//! ```
//!
//! divided by a million. The adapters report Anthropic's `cache_creation_input_tokens` inside
//! the uncached prompt (with `input_tokens`, which prompt caching leaves at the few tokens
//! after the newest breakpoint), so the uncached prompt of an Anthropic model is what it wrote
//! to its cache, at the `cache_write` price. OpenAI and Gemini charge nothing for writing their
//! cache: their table entries have no `cache_write`, and the uncached prompt costs `input`.
//! A Claude model with prompt caching turned off writes nothing: give it a price of its own
//! without `cache_write`.
//!
//! The built-in offline models (`demo`, and `scripted` scenario models) cost nothing.

use penguin_omni_protocol::TokenCounts;

/// A model's price, in dollars per million tokens ([module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt tokens not read from a cache.
    pub input: f64,
    /// Prompt tokens read from the provider's cache; `None`: `input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// The uncached prompt of a provider that charges for writing its cache; `None`: `input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// Thinking and response tokens.
    pub output: f64,
}

impl Price {
    /// A price without cache prices (both default to `input`).
    pub const fn new(input: f64, output: f64) -> Price {
        Price {
            input,
            cached_input: None,
            cache_write: None,
            output,
        }
    }

    /// This price with a cache read price.
    pub const fn cached(mut self, cached_input: f64) -> Price {
        self.cached_input = Some(cached_input);
        self
    }

    /// This price with a cache write price.
    pub const fn writes(mut self, cache_write: f64) -> Price {
        self.cache_write = Some(cache_write);
        self
    }

    /// Nothing: the offline models.
    pub const FREE: Price = Price::new(0.0, 0.0);

    /// What `tokens` cost, in dollars ([module docs](self)).
    pub fn cost(&self, tokens: &TokenCounts) -> f64 {
        let per_million = tokens.cache_read as f64 * self.cached_input.unwrap_or(self.input)
            + tokens.uncached_prompt as f64 * self.cache_write.unwrap_or(self.input)
            + tokens.output as f64 * self.output;
        per_million / 1_000_000.0
    }

    /// Why this price cannot be used, naming the field under `at` (`models.claude.price`):
    /// a negative, infinite or NaN number.
    pub fn check(&self, at: &str) -> Result<(), String> {
        let fields = [
            ("input", Some(self.input)),
            ("cached_input", self.cached_input),
            ("cache_write", self.cache_write),
            ("output", self.output.into()),
        ];
        for (name, value) in fields {
            if let Some(v) = value {
                if !v.is_finite() || v < 0.0 {
                    return Err(format!(
                        "{at}.{name}: {v} is not a price: dollars per million tokens, a number 0 or more"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The date the providers' published prices of [`DEFAULT_PRICES`] were taken.
pub const DEFAULT_PRICES_DATE: &str = "2025-11-25";

/// Prices of well-known model ids, as their providers published them on
/// [`DEFAULT_PRICES_DATE`] (standard tier, the shortest context tier where a price depends
/// on the prompt's length; no batch or regional prices). A model id matches an entry when it
/// is the entry, or the entry followed by a snapshot date (`-20250929`, `-2024-08-06`, `@…`)
/// or `-latest`, after any `provider/` or `models/` prefix; the longest entry wins.
/// `[models.NAME.price]` overrides an entry for that model.
pub const DEFAULT_PRICES: &[(&str, Price)] = &[
    // Anthropic: cache writes (5-minute entries) 1.25 × input, reads 0.1 ×.
    (
        "claude-opus-4-5",
        Price::new(5.0, 25.0).cached(0.50).writes(6.25),
    ),
    (
        "claude-opus-4-1",
        Price::new(15.0, 75.0).cached(1.50).writes(18.75),
    ),
    (
        "claude-opus-4",
        Price::new(15.0, 75.0).cached(1.50).writes(18.75),
    ),
    (
        "claude-sonnet-4-5",
        Price::new(3.0, 15.0).cached(0.30).writes(3.75),
    ),
    (
        "claude-sonnet-4",
        Price::new(3.0, 15.0).cached(0.30).writes(3.75),
    ),
    (
        "claude-3-7-sonnet",
        Price::new(3.0, 15.0).cached(0.30).writes(3.75),
    ),
    (
        "claude-3-5-sonnet",
        Price::new(3.0, 15.0).cached(0.30).writes(3.75),
    ),
    (
        "claude-haiku-4-5",
        Price::new(1.0, 5.0).cached(0.10).writes(1.25),
    ),
    (
        "claude-3-5-haiku",
        Price::new(0.80, 4.0).cached(0.08).writes(1.0),
    ),
    (
        "claude-3-haiku",
        Price::new(0.25, 1.25).cached(0.03).writes(0.30),
    ),
    (
        "claude-3-opus",
        Price::new(15.0, 75.0).cached(1.50).writes(18.75),
    ),
    // OpenAI: cache writes are free.
    ("gpt-4o", Price::new(2.50, 10.0).cached(1.25)),
    ("gpt-4o-mini", Price::new(0.15, 0.60).cached(0.075)),
    ("gpt-4.1", Price::new(2.0, 8.0).cached(0.50)),
    ("gpt-4.1-mini", Price::new(0.40, 1.60).cached(0.10)),
    ("gpt-4.1-nano", Price::new(0.10, 0.40).cached(0.025)),
    ("gpt-5", Price::new(1.25, 10.0).cached(0.125)),
    ("gpt-5-mini", Price::new(0.25, 2.0).cached(0.025)),
    ("gpt-5-nano", Price::new(0.05, 0.40).cached(0.005)),
    ("gpt-5-codex", Price::new(1.25, 10.0).cached(0.125)),
    ("gpt-5.1", Price::new(1.25, 10.0).cached(0.125)),
    ("gpt-5.1-codex", Price::new(1.25, 10.0).cached(0.125)),
    ("o3", Price::new(2.0, 8.0).cached(0.50)),
    ("o4-mini", Price::new(1.10, 4.40).cached(0.275)),
    // Gemini: prompts up to 200k tokens; implicit cache hits at the cached price, no writes.
    ("gemini-2.5-pro", Price::new(1.25, 10.0).cached(0.125)),
    ("gemini-2.5-flash", Price::new(0.30, 2.50).cached(0.03)),
    ("gemini-2.5-flash-lite", Price::new(0.10, 0.40).cached(0.01)),
    ("gemini-2.0-flash", Price::new(0.10, 0.40).cached(0.025)),
    ("gemini-2.0-flash-lite", Price::new(0.075, 0.30)),
];

/// The table entry `model_id` matches ([`DEFAULT_PRICES`]), by the entry's id.
pub fn default_price(model_id: &str) -> Option<(&'static str, Price)> {
    let id = model_id.trim().to_ascii_lowercase();
    let id = id.rsplit('/').next().unwrap_or("");
    DEFAULT_PRICES
        .iter()
        .filter(|(known, _)| {
            id.strip_prefix(known)
                .is_some_and(|rest| rest.is_empty() || is_snapshot_suffix(rest))
        })
        .max_by_key(|(known, _)| known.len())
        .map(|(known, price)| (*known, *price))
}

/// `-20250929`, `-2024-08-06`, `@20250929`, `-latest`: a dated snapshot of the same model.
fn is_snapshot_suffix(rest: &str) -> bool {
    if rest == "-latest" {
        return true;
    }
    let Some(date) = rest.strip_prefix('-').or_else(|| rest.strip_prefix('@')) else {
        return false;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    match date.split('-').collect::<Vec<_>>()[..] {
        [d] => digits(d, 8),
        [y, m, d] => digits(y, 4) && digits(m, 2) && digits(d, 2),
        _ => false,
    }
}

/// Where a model's price came from.
#[derive(Clone, Debug, PartialEq)]
pub enum PriceSource {
    /// `[models.NAME.price]` of `config.toml`.
    Configured,
    /// The entry of [`DEFAULT_PRICES`] of this id.
    Table(&'static str),
    /// An offline model (`demo`, `scripted`): free.
    Offline,
}

/// Every price known: the configured ones by model id, then [`DEFAULT_PRICES`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prices {
    configured: Vec<(String, Price)>,
}

impl Prices {
    /// The configured prices, by model id (the first of two prices for one id wins), over
    /// the table. `Config::prices` gives `config.toml`'s.
    pub fn new<'a>(configured: impl IntoIterator<Item = (&'a str, Price)>) -> Prices {
        let mut list: Vec<(String, Price)> = Vec::new();
        for (id, price) in configured {
            if list.iter().all(|(known, _)| known != id) {
                list.push((id.to_owned(), price));
            }
        }
        Prices { configured: list }
    }

    /// The price of `model_id` as `provider` (an adapter's name, as `session_meta.provider`
    /// spells it) serves it, and where it came from; `None` when nothing prices it.
    pub fn lookup(&self, provider: &str, model_id: &str) -> Option<(Price, PriceSource)> {
        if let Some((_, price)) = self.configured.iter().find(|(id, _)| id == model_id) {
            return Some((*price, PriceSource::Configured));
        }
        if matches!(provider, "demo" | "scripted") {
            return Some((Price::FREE, PriceSource::Offline));
        }
        default_price(model_id).map(|(id, price)| (price, PriceSource::Table(id)))
    }

    /// What `tokens` of `model_id` cost, when it has a price.
    pub fn cost(&self, provider: &str, model_id: &str, tokens: &TokenCounts) -> Option<f64> {
        self.lookup(provider, model_id).map(|(p, _)| p.cost(tokens))
    }
}

/// A cost in dollars as people read it: cents for a dollar or more, four decimals below
/// (`$12.34`, `$0.0123`), `$0` for nothing.
pub fn dollars(cost: f64) -> String {
    if cost == 0.0 {
        "$0".into()
    } else if cost >= 1.0 {
        format!("${cost:.2}")
    } else {
        format!("${cost:.4}")
    }
}

/// Parses a `--max-cost` value: dollars, a positive number with an optional leading `$`
/// (`0.50`, `$2`).
///
/// ```
/// use penguin_agent::pricing::parse_dollars;
/// assert_eq!(parse_dollars("$2"), Ok(2.0));
/// assert_eq!(parse_dollars("0.5"), Ok(0.5));
/// assert!(parse_dollars("0").is_err());
/// assert!(parse_dollars("lots").is_err());
/// ```
pub fn parse_dollars(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let t = t.strip_prefix('$').unwrap_or(t);
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "{text:?} is not a cost: give dollars, a number above 0 (0.50, $2)"
        )),
    }
}

/// A cost budget (`--max-cost`): the requests' cost added up as their `token_usage` arrive,
/// each priced at the model of the session that made it (a subagent's own, once its
/// `session_meta` is seen; the main session's before).
#[derive(Clone, Debug)]
pub struct CostBudget {
    limit: f64,
    spent: f64,
    prices: Prices,
    main: (String, String),
    /// The model of each subagent seen, by its origin.
    children: Vec<(Vec<String>, (String, String))>,
    unpriced: Vec<String>,
}

/// A budget that cannot be kept: the model has no price.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--max-cost needs a price for model {model}, and it has none: set [models.NAME.price] in config.toml (docs/cost.md)")]
pub struct NoPrice {
    /// The model, as `provider/model_id`.
    pub model: String,
}

impl CostBudget {
    /// A budget of `limit` dollars for a session of `model_id` as `provider` serves it;
    /// refused up front when that model has no price.
    pub fn new(
        limit: f64,
        prices: Prices,
        provider: &str,
        model_id: &str,
    ) -> Result<CostBudget, NoPrice> {
        if prices.lookup(provider, model_id).is_none() {
            return Err(NoPrice {
                model: format!("{provider}/{model_id}"),
            });
        }
        Ok(CostBudget {
            limit,
            spent: 0.0,
            prices,
            main: (provider.to_owned(), model_id.to_owned()),
            children: Vec::new(),
            unpriced: Vec::new(),
        })
    }

    /// Takes one message of the run into account; `true` once the budget is reached.
    pub fn observe(&mut self, msg: &penguin_omni_protocol::OmniMessage) -> bool {
        use penguin_omni_protocol::{Body, EventPayload};
        match &msg.body {
            Body::SessionMeta(meta) if msg.has_origin() => {
                let origin = msg.origin.clone().unwrap_or_default();
                let model = (meta.provider.clone(), meta.model_id.clone());
                match self.children.iter_mut().find(|(o, _)| *o == origin) {
                    Some(slot) => slot.1 = model,
                    None => self.children.push((origin, model)),
                }
            }
            Body::Event(EventPayload::TokenUsage { request, .. }) => {
                let origin = msg.origin.as_deref().unwrap_or_default();
                let (provider, model) = self
                    .children
                    .iter()
                    .filter(|(o, _)| !origin.is_empty() && origin.starts_with(o))
                    .max_by_key(|(o, _)| o.len())
                    .map(|(_, m)| m)
                    .unwrap_or(&self.main);
                match self.prices.cost(provider, model, request) {
                    Some(cost) => self.spent += cost,
                    None => {
                        let name = format!("{provider}/{model}");
                        if !self.unpriced.contains(&name) {
                            self.unpriced.push(name);
                        }
                    }
                }
            }
            _ => {}
        }
        self.reached()
    }

    /// Whether what was spent reached the limit.
    pub fn reached(&self) -> bool {
        self.spent >= self.limit
    }

    /// Dollars spent so far.
    pub fn spent(&self) -> f64 {
        self.spent
    }

    /// The limit, in dollars.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// Models whose requests were not counted, for want of a price (a subagent's).
    pub fn unpriced(&self) -> &[String] {
        &self.unpriced
    }

    /// The line that says the budget stopped the run.
    pub fn stopped_line(&self) -> String {
        format!(
            "stopped: cost budget of {} reached ({} spent)",
            dollars(self.limit),
            dollars(self.spent)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::ModelSpec;
    use penguin_omni_protocol::build;

    #[test]
    fn cost_prices_each_count_at_its_own_rate() {
        let claude = Price::new(3.0, 15.0).cached(0.30).writes(3.75);
        // 1M read from the cache, 2M written to it, 100k out.
        let t = TokenCounts::new(1_000_000, 2_000_000, 100_000);
        assert!((claude.cost(&t) - (0.30 + 7.50 + 1.50)).abs() < 1e-9);
        // Without cache prices both fall back to input.
        let plain = Price::new(2.0, 8.0);
        assert!((plain.cost(&t) - (2.0 + 4.0 + 0.8)).abs() < 1e-9);
    }

    #[test]
    fn the_table_matches_ids_snapshots_and_prefixes_but_not_other_models() {
        let id = |m: &str| default_price(m).map(|(k, _)| k);
        assert_eq!(id("claude-sonnet-4-5-20250929"), Some("claude-sonnet-4-5"));
        assert_eq!(id("claude-sonnet-4-20250514"), Some("claude-sonnet-4"));
        assert_eq!(id("claude-sonnet-4-5@20250929"), Some("claude-sonnet-4-5"));
        assert_eq!(
            id("anthropic/claude-3-5-haiku-latest"),
            Some("claude-3-5-haiku")
        );
        assert_eq!(id("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(id("gpt-4o-mini"), Some("gpt-4o-mini"));
        assert_eq!(id("GPT-5-mini"), Some("gpt-5-mini"));
        assert_eq!(id("models/gemini-2.5-flash"), Some("gemini-2.5-flash"));
        // Another model that merely starts like a known one has no price.
        assert_eq!(id("gpt-4o-audio-preview"), None);
        assert_eq!(id("claude-sonnet-4-6"), None);
        assert_eq!(id("gpt-5.2"), None);
        assert_eq!(id("qwen2.5-coder"), None);
    }

    #[test]
    fn a_configured_price_wins_over_the_table_and_offline_models_are_free() {
        let spec = ModelSpec {
            model_id: "claude-sonnet-4-5".into(),
            price: Some(Price::new(1.0, 2.0)),
            ..ModelSpec::demo()
        };
        let prices = Prices::new(spec.price.map(|p| (spec.model_id.as_str(), p)));
        assert_eq!(
            prices.lookup("anthropic-messages", "claude-sonnet-4-5"),
            Some((Price::new(1.0, 2.0), PriceSource::Configured))
        );
        assert_eq!(
            prices
                .lookup("anthropic-messages", "claude-opus-4-1")
                .map(|(_, s)| s),
            Some(PriceSource::Table("claude-opus-4-1"))
        );
        assert_eq!(
            prices.lookup("demo", "demo"),
            Some((Price::FREE, PriceSource::Offline))
        );
        assert_eq!(prices.lookup("openai-chat", "llama3"), None);
    }

    #[test]
    fn config_toml_prices_a_model_in_the_issues_shape_and_names_a_bad_field() {
        let config = crate::config::Config::parse(
            "[models.claude]\nprotocol = \"anthropic\"\nmodel = \"my-claude\"\n\n[models.claude.price]\ninput = 3.0\ncached_input = 0.30\ncache_write = 3.75\noutput = 15\n",
        )
        .unwrap();
        let prices = config.prices();
        assert_eq!(
            prices.lookup("anthropic-messages", "my-claude"),
            Some((
                Price::new(3.0, 15.0).cached(0.30).writes(3.75),
                PriceSource::Configured
            ))
        );
        let bad = crate::config::Config::parse(
            "[models.claude]\nprotocol = \"anthropic\"\nmodel = \"c\"\nprice = { input = 3.0, ouput = 15.0 }\n",
        )
        .unwrap_err();
        assert_eq!(bad.field, "models.claude.price.ouput");
        assert!(bad.message.contains("unknown field `ouput`"), "{bad}");
        let negative = crate::config::Config::parse(
            "[models.claude]\nprotocol = \"anthropic\"\nmodel = \"c\"\nprice = { input = -3.0, output = 15.0 }\n",
        )
        .unwrap();
        let e = negative.named_models().remove(0).1.unwrap_err().to_string();
        assert!(
            e.starts_with("models.claude.price.input: -3 is not a price"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_price_names_its_field() {
        let p = Price {
            cached_input: Some(-1.0),
            ..Price::new(3.0, 15.0)
        };
        let e = p.check("models.claude.price").unwrap_err();
        assert!(
            e.starts_with("models.claude.price.cached_input: -1 is not a price"),
            "{e}"
        );
        assert!(Price::new(f64::NAN, 1.0).check("p").is_err());
        assert!(Price::new(0.0, 0.0).check("p").is_ok());
    }

    #[test]
    fn a_budget_is_refused_without_a_price_and_reached_by_the_requests_cost() {
        let prices = Prices::default();
        let e = CostBudget::new(1.0, prices.clone(), "openai-chat", "llama3").unwrap_err();
        assert_eq!(e.model, "openai-chat/llama3");
        assert!(e.to_string().contains("[models.NAME.price]"), "{e}");

        // gpt-4.1: 2.0 in, 8.0 out per million.
        let mut budget = CostBudget::new(0.02, prices, "openai-chat", "gpt-4.1").unwrap();
        let usage = |input, output| {
            let r = TokenCounts::new(0, input, output);
            build::token_usage(r, r)
        };
        assert!(!budget.observe(&usage(5_000, 0)), "$0.01 of $0.02");
        assert!(budget.observe(&usage(5_000, 0)), "$0.02 of $0.02");
        assert!((budget.spent() - 0.02).abs() < 1e-12);
        assert_eq!(
            budget.stopped_line(),
            "stopped: cost budget of $0.0200 reached ($0.0200 spent)"
        );
    }

    #[test]
    fn a_subagents_requests_are_priced_at_its_own_model() {
        let mut budget =
            CostBudget::new(100.0, Prices::default(), "openai-chat", "gpt-4.1").unwrap();
        let child = vec!["session-child".to_string()];
        let mut meta = build::session_meta(penguin_omni_protocol::SessionMeta {
            session_id: "session-child".into(),
            provider: "anthropic-messages".into(),
            model_id: "claude-opus-4-1".into(),
            model_context_window: penguin_omni_protocol::ContextWindow::Other("unknown".into()),
            system_prompt: String::new(),
            agent_state: String::new(),
            workspace: String::new(),
            source: Some("subagent".into()),
            forked_from: None,
        });
        meta.origin = Some(child.clone());
        budget.observe(&meta);
        let r = TokenCounts::new(0, 1_000_000, 0);
        let mut usage = build::token_usage(r, r);
        usage.origin = Some(child);
        budget.observe(&usage);
        // Opus's cache write price (18.75), not gpt-4.1's input (2.0).
        assert!((budget.spent() - 18.75).abs() < 1e-9, "{}", budget.spent());
    }
}
