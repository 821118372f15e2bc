//! `penguin usage`: tokens and cost added up from the traces (`penguin::server::usage`),
//! priced by `config.toml` and the table of well-known models (`penguin::pricing`).

use std::process::ExitCode;

use penguin::agent::Agent;
use penguin::pricing::dollars;
use penguin::server::usage::{parse_bound, read_requests, summarize, GroupBy, UsageQuery};

use crate::untrusted::{outln, Untrusted};

/// Prints the table: one row per day, model or session since `since` (a date or an RFC 3339
/// time), then the total.
pub(crate) fn usage(since: Option<String>, by: String) -> Result<ExitCode, String> {
    let group_by: GroupBy = by.parse().map_err(|e| format!("--by: {e}"))?;
    let from = since
        .as_deref()
        .map(|s| parse_bound(s, false).map_err(|e| format!("--since: {e}")))
        .transpose()?;
    let agent = Agent::from_env().map_err(|e| e.to_string())?;
    let prices = agent.config.prices();
    let traces = agent.location.traces_dir();
    let requests = read_requests(&traces)
        .map_err(|e| format!("cannot read the traces in {}: {e}", traces.display()))?;
    let query = UsageQuery {
        from,
        to: None,
        group_by,
    };
    let report = summarize(&requests, &query, &|provider, model, tokens| {
        prices.cost(provider, model, tokens)
    });
    if report.rows.is_empty() {
        outln!(
            "no model requests recorded{}",
            match &since {
                Some(s) => format!(" since {}", Untrusted(s)),
                None => String::new(),
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{}", table(&report, &by));
    Ok(ExitCode::SUCCESS)
}

/// The report as aligned columns: group, requests, tokens in (cached), out, cost.
pub(crate) fn table(report: &penguin::server::usage::UsageReport, by: &str) -> String {
    let cost = |r: &penguin::server::usage::UsageRow| match (r.requests, r.unpriced.as_slice()) {
        (_, []) => dollars(r.cost),
        (_, unpriced) if r.cost == 0.0 => format!("no price for {}", unpriced.join(", ")),
        (_, unpriced) => format!("{} + no price for {}", dollars(r.cost), unpriced.join(", ")),
    };
    let cell = |s: &str| crate::untrusted::neutralise(s).replace('\n', " ");
    let mut rows = vec![[
        by.to_owned(),
        "requests".into(),
        "input".into(),
        "cached".into(),
        "output".into(),
        "cost".into(),
    ]];
    for r in report.rows.iter().chain(std::iter::once(&report.total)) {
        rows.push([
            cell(&r.group),
            r.requests.to_string(),
            (r.tokens.cache_read + r.tokens.uncached_prompt).to_string(),
            r.tokens.cache_read.to_string(),
            r.tokens.output.to_string(),
            cell(&cost(r)),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = format!("{:<w$}", r[0], w = widths[0]);
            for i in 1..5 {
                line.push_str(&format!("  {:>w$}", r[i], w = widths[i]));
            }
            line.push_str(&format!("  {}", r[5]));
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}
