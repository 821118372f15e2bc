//! The results: a table for people, JSON for files.

use std::time::Duration;

use serde_json::{json, Map, Value};

/// Rows in the order measured, and every figure by key.
#[derive(Debug, Default)]
pub struct Report {
    rows: Vec<(String, String, String)>,
    notes: Vec<String>,
    figures: Map<String, Value>,
}

impl Report {
    /// A row of the table: the workload's section, what was measured, the figure shown.
    pub fn row(&mut self, section: &str, measure: &str, shown: impl Into<String>) {
        let shown = shown.into();
        println!("  {section:<12} {measure:<58} {shown}");
        self.rows
            .push((section.to_owned(), measure.to_owned(), shown));
    }

    /// A figure for the JSON file.
    pub fn figure(&mut self, key: &str, value: impl Into<Value>) {
        self.figures.insert(key.to_owned(), value.into());
    }

    /// A remark printed under the table.
    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        println!("  note: {note}");
        self.notes.push(note);
    }

    /// The whole table.
    pub fn print(&self) {
        println!("\n==> serve workload (release `penguin serve`, zero-delay scripted model, client on the same machine)");
        let mut last = "";
        for (section, measure, shown) in &self.rows {
            let s = if section == last {
                ""
            } else {
                section.as_str()
            };
            last = section;
            println!("{s:<12} {measure:<58} {shown}");
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }

    /// Everything as JSON.
    pub fn json(&self) -> String {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|(s, m, v)| json!({"section": s, "measure": m, "value": v}))
            .collect();
        let v = json!({
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "rows": rows,
            "notes": self.notes,
            "figures": self.figures,
        });
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The `p`-th percentile (0..=100) of sorted values.
pub fn pct<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let i = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// KiB as a readable size.
pub fn kib(k: f64) -> String {
    if k.abs() >= 10.0 * 1024.0 {
        format!("{:.1} MiB", k / 1024.0)
    } else {
        format!("{k:.1} KiB")
    }
}
