//! `penguin models`: the configured models listed, added, tested, made the default and
//! removed. Every edit goes through `penguin::config::edit` (the one editor the server's
//! `/api/models` uses too): config.toml keeps its comments and layout, is replaced atomically,
//! and holds a key's variable name, never a key.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;

use penguin::agent::Agent;
use penguin::config::edit::{self, ConfigFile, ModelFields};
use penguin::config::{resolve_model, ModelFlags};
use penguin::models::probe::{probe, CheckStatus, ProbeReport};
use penguin::models::{ModelChoices, ModelSpec, Protocol};

use crate::args::ModelsCommand;
use crate::untrusted::{err, errln, outln, Untrusted};

/// How long each request of `penguin models test` may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long an endpoint has to list its models.
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn models(command: ModelsCommand) -> Result<ExitCode, String> {
    match command {
        ModelsCommand::List { json } => list(json),
        ModelsCommand::Add {
            name,
            protocol,
            base_url,
            model_id,
            api_key_env,
            default,
            no_input,
        } => {
            let interactive =
                !no_input && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
            let given = ModelFields {
                protocol,
                base_url,
                model: model_id,
                api_key_env,
            };
            add(name, given, default, interactive)
        }
        ModelsCommand::Test { name, json } => crate::with_runtime(test(name, json)),
        ModelsCommand::Default { name } => set_default(&name),
        ModelsCommand::Remove { name } => remove(&name),
    }
}

fn agent() -> Result<Agent, String> {
    Agent::from_env().map_err(|e| e.to_string())
}

/// The default model as a session started here gets it (flags aside), the configured ones
/// that resolve, and those that do not with why.
struct Configured {
    default: ModelSpec,
    named: Vec<(String, ModelSpec)>,
    broken: Vec<(String, String)>,
}

fn choices(agent: &Agent) -> Configured {
    let default = resolve_model(&agent.config, &ModelFlags::default(), |k| {
        std::env::var(k).ok()
    })
    .unwrap_or_else(|_| ModelSpec::demo());
    let (mut named, mut broken) = (Vec::new(), Vec::new());
    for (name, spec) in agent.config.named_models() {
        match spec {
            Ok(spec) => named.push((name, spec)),
            Err(e) => broken.push((name, e.to_string())),
        }
    }
    Configured {
        default,
        named,
        broken,
    }
}

fn key_state(spec: &ModelSpec) -> String {
    if spec.protocol == Protocol::DEMO {
        return String::new();
    }
    match spec.key_env() {
        Some(var) if std::env::var(&var).is_ok_and(|v| !v.trim().is_empty()) => {
            format!("{var} (set)")
        }
        Some(var) => format!("{var} (not set)"),
        None => "no key".into(),
    }
}

fn list(json: bool) -> Result<ExitCode, String> {
    let agent = agent()?;
    let Configured {
        default,
        named,
        broken,
    } = choices(&agent);
    let offered = ModelChoices {
        default: &default,
        named: &named,
    }
    .offered();
    let spec_of = |name: &str, is_default: bool| {
        named
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| match is_default {
                true => default.clone(),
                false => ModelSpec::demo(),
            })
    };
    if json {
        let rows: Vec<serde_json::Value> = offered
            .iter()
            .map(|m| {
                let spec = spec_of(&m.name, m.default);
                let demo = spec.protocol == Protocol::DEMO;
                serde_json::json!({
                    "name": m.name,
                    "provider": m.provider,
                    "modelId": m.model_id,
                    "default": m.default,
                    "baseUrl": (!demo).then_some(spec.base_url.clone()),
                    "apiKeyEnv": spec.key_env().filter(|_| !demo),
                    "configured": named.iter().any(|(n, _)| *n == m.name),
                })
            })
            .collect();
        outln!("{}", serde_json::json!({ "models": rows }));
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 5]> = offered
        .iter()
        .map(|m| {
            let spec = spec_of(&m.name, m.default);
            [
                format!("{} {}", if m.default { "*" } else { " " }, m.name),
                m.provider.clone(),
                m.model_id.clone(),
                if spec.protocol == Protocol::DEMO {
                    "built in, offline".into()
                } else {
                    spec.base_url.clone()
                },
                key_state(&spec),
            ]
        })
        .collect();
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2), width(3)];
    for r in &rows {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        );
        outln!("{}", Untrusted(line.trim_end()));
    }
    for (name, why) in &broken {
        outln!("  {}: not usable: {}", Untrusted(name), Untrusted(why));
    }
    if named.is_empty() {
        outln!("(no models in config.toml: `penguin models add` adds one)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks on the terminal, or says which flag was missing when nobody can answer.
struct Asker {
    interactive: bool,
}

impl Asker {
    /// The answer to `question` (`default` when it is left empty); `flag` names what to give
    /// instead when there is no terminal.
    fn ask(&self, question: &str, default: Option<&str>, flag: &str) -> Result<String, String> {
        if !self.interactive {
            return default
                .map(str::to_owned)
                .ok_or_else(|| format!("{flag} is required (no terminal to ask on)"));
        }
        match default {
            Some(d) if !d.is_empty() => err!("{question} [{}]: ", Untrusted(d)),
            _ => err!("{question}: "),
        }
        let mut line = String::new();
        let n = std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the answer: {e}"))?;
        if n == 0 {
            return Err(format!("no answer to {question:?} (end of input)"));
        }
        let answer = line.trim();
        Ok(if answer.is_empty() {
            default.unwrap_or("").to_owned()
        } else {
            answer.to_owned()
        })
    }

    /// Asks until `check` takes the answer (once, without a terminal).
    fn ask_until<T>(
        &self,
        question: &str,
        default: Option<&str>,
        flag: &str,
        check: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, String> {
        loop {
            let answer = self.ask(question, default, flag)?;
            match check(&answer) {
                Ok(v) => return Ok(v),
                Err(e) if self.interactive => errln!("  {e}"),
                Err(e) => return Err(e),
            }
        }
    }
}

/// The given value checked, or asked for until it checks out.
fn field<T>(
    asker: &Asker,
    given: Option<String>,
    question: &str,
    default: Option<&str>,
    flag: &str,
    check: impl Fn(&str) -> Result<T, String>,
) -> Result<T, String> {
    match given {
        Some(v) => check(&v).map_err(|e| format!("{flag}: {e}")),
        None => asker.ask_until(question, default, flag, check),
    }
}

fn add(
    name: Option<String>,
    given: ModelFields,
    make_default: bool,
    interactive: bool,
) -> Result<ExitCode, String> {
    let agent = agent()?;
    let root = agent.location.root.clone();
    let asker = Asker { interactive };
    let taken = ConfigFile::open(&root)
        .map_err(|e| e.to_string())?
        .model_names();
    let name = field(&asker, name, "Name", None, "NAME", |n| {
        edit::check_name(n).map_err(|e| e.to_string())?;
        match taken.iter().any(|t| t == n) {
            true => Err(format!("{n:?} is already configured")),
            false => Ok(n.to_owned()),
        }
    })?;
    let protocols: Vec<String> = penguin::models::adapter_names()
        .into_iter()
        .filter(|p| p != "demo")
        .collect();
    if interactive && given.protocol.is_none() {
        errln!("Protocols: {}", protocols.join(", "));
    }
    let protocol = field(
        &asker,
        given.protocol,
        "Protocol",
        Some("openai-chat"),
        "--protocol",
        |p| edit::check_protocol(p).map_err(|e| e.to_string()),
    )?;
    let protocol_spec: Protocol = protocol.parse().map_err(|e| format!("{e}"))?;
    let default_url = penguin::models::default_base_url(&protocol_spec);
    let base_url = field(
        &asker,
        given.base_url,
        "Base URL",
        Some(&default_url),
        "--base-url",
        |u| match u.trim() {
            "" => Ok(String::new()),
            u => edit::check_base_url(u)
                .map(|()| u.to_owned())
                .map_err(|e| e.to_string()),
        },
    )?;
    // The protocol's own base URL is its default: written, it would say nothing more.
    let base_url = match base_url == default_url {
        true => String::new(),
        false => base_url,
    };
    let default_var = ModelSpec::default_key_env(&protocol_spec);
    if interactive && given.api_key_env.is_none() {
        errln!(
            "The key is read from an environment variable; config.toml holds only its name ('-' for none{})",
            match &default_var {
                Some(v) => format!(", empty for {v}"),
                None => String::new(),
            }
        );
    }
    let api_key_env = field(
        &asker,
        given.api_key_env,
        "Key variable",
        Some(default_var.as_deref().unwrap_or("")),
        "--api-key-env",
        |v| match v.trim() {
            "" | "-" => Ok(None),
            v => edit::check_key_env(v)
                .map(|()| Some(v.to_owned()))
                .map_err(|e| e.to_string()),
        },
    )?
    // The protocol's own variable is its default: written, it would say nothing more.
    .filter(|v| Some(v) != default_var.as_ref());
    let spec = ModelSpec {
        protocol: protocol_spec,
        base_url: if base_url.is_empty() {
            default_url.clone()
        } else {
            base_url.clone()
        },
        api_key_env: api_key_env.clone(),
        ..ModelSpec::demo()
    };
    if let Some(var) = spec.key_env() {
        if std::env::var(&var).map_or(true, |v| v.trim().is_empty()) && interactive {
            errln!("  note: {var} is not set in this shell; sessions need it set where they run");
        }
    }
    let model_id = match given.model {
        Some(id) => {
            edit::check_model_id(&id).map_err(|e| format!("--model: {e}"))?;
            id
        }
        None => {
            let ids = discover(&spec, interactive);
            if !interactive {
                return Err(if ids.is_empty() {
                    "--model is required".to_owned()
                } else {
                    format!(
                        "--model is required; the endpoint offers: {}",
                        ids.join(", ")
                    )
                });
            }
            asker.ask_until("Model id (or its number)", None, "--model", |a| {
                let id = a
                    .parse::<usize>()
                    .ok()
                    .and_then(|n| n.checked_sub(1))
                    .and_then(|i| ids.get(i).cloned())
                    .unwrap_or_else(|| a.to_owned());
                edit::check_model_id(&id)
                    .map(|()| id)
                    .map_err(|e| e.to_string())
            })?
        }
    };
    let make_default = make_default
        || (interactive
            && asker
                .ask("Make it the default model? (y/N)", Some("n"), "--default")?
                .to_ascii_lowercase()
                .starts_with('y'));
    let mut file = ConfigFile::open(&root).map_err(|e| e.to_string())?;
    file.add_model(
        &name,
        &ModelFields {
            protocol: Some(protocol),
            base_url: Some(base_url),
            model: Some(model_id),
            api_key_env,
        },
    )
    .map_err(|e| e.to_string())?;
    if make_default {
        file.set_default(&name).map_err(|e| e.to_string())?;
    }
    file.save().map_err(|e| e.to_string())?;
    outln!(
        "added {}{} to {}; try it: penguin models test {}",
        Untrusted(&name),
        if make_default { " (the default)" } else { "" },
        file.path().display(),
        Untrusted(&name)
    );
    Ok(ExitCode::SUCCESS)
}

/// The endpoint's own model ids (empty when it cannot be asked), shown numbered in a
/// terminal so the answer can be a number.
fn discover(spec: &ModelSpec, interactive: bool) -> Vec<String> {
    let asked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
        .and_then(|rt| {
            rt.block_on(penguin::models::discover::endpoint_models(
                spec,
                DISCOVER_TIMEOUT,
            ))
        });
    match asked {
        Ok(ids) => {
            if interactive && !ids.is_empty() {
                errln!("The endpoint offers:");
                for (i, id) in ids.iter().enumerate().take(60) {
                    errln!("  {:>2}. {}", i + 1, Untrusted(id));
                }
                if ids.len() > 60 {
                    errln!("  … and {} more (type the id)", ids.len() - 60);
                }
            }
            ids
        }
        Err(e) => {
            if interactive {
                errln!("  (no list of models from the endpoint: {})", Untrusted(&e));
            }
            Vec::new()
        }
    }
}

async fn test(name: Option<String>, json: bool) -> Result<ExitCode, String> {
    let agent = agent()?;
    let Configured {
        default,
        named,
        broken,
    } = choices(&agent);
    if let Some((n, why)) = broken.iter().find(|(n, _)| Some(n) == name.as_ref()) {
        return Err(format!("{n} is not usable: {why}"));
    }
    let picked = ModelChoices {
        default: &default,
        named: &named,
    }
    .pick(name.as_deref())
    .map_err(|e| e.to_string())?;
    let label = name.unwrap_or_else(|| {
        named
            .iter()
            .find(|(_, s)| *s == default)
            .map(|(n, _)| n.clone())
            .unwrap_or_else(|| default.model_id.clone())
    });
    // The window is asked as a session asks it, so the test's requests are sized like its own.
    let (spec, _) = penguin::window::sized(picked);
    if !json {
        let at = match spec.protocol == Protocol::DEMO {
            true => String::new(),
            false => format!(" at {}", spec.base_url),
        };
        errln!(
            "testing {} ({} {}{}) …",
            Untrusted(&label),
            spec.protocol,
            Untrusted(&spec.model_id),
            Untrusted(&at)
        );
    }
    let report = probe(&label, &spec, PROBE_TIMEOUT).await;
    if json {
        outln!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    } else {
        print_report(&report);
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(r: &ProbeReport) {
    if let Some(f) = &r.failure {
        outln!("{}: fails: {}", Untrusted(&r.model), Untrusted(&f.cause));
        if let Some(hint) = &f.hint {
            outln!("  {}", Untrusted(hint));
        }
        return;
    }
    outln!(
        "{}: answers: {}",
        Untrusted(&r.model),
        Untrusted(r.reply.as_deref().unwrap_or(""))
    );
    outln!(
        "  latency    {} ms to the first token, {} ms in all",
        r.latency_ms.unwrap_or(0),
        r.total_ms.unwrap_or(0)
    );
    for (what, check) in [
        ("streaming", &r.streaming),
        ("tools", &r.tools),
        ("vision", &r.vision),
    ] {
        let status = match check.status {
            CheckStatus::Works => "works",
            CheckStatus::Fails => "fails",
            CheckStatus::Skipped => "skipped",
        };
        outln!("  {what:<10} {status}: {}", Untrusted(&check.detail));
    }
}

fn set_default(name: &str) -> Result<ExitCode, String> {
    let agent = agent()?;
    let mut file = ConfigFile::open(&agent.location.root).map_err(|e| e.to_string())?;
    file.set_default(name).map_err(|e| e.to_string())?;
    file.save().map_err(|e| e.to_string())?;
    outln!("the default model is now {}", Untrusted(name));
    if let Ok(env) = std::env::var("PENGUIN_MODEL") {
        errln!(
            "note: PENGUIN_MODEL={} is set in this shell and comes first",
            Untrusted(&env)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn remove(name: &str) -> Result<ExitCode, String> {
    let agent = agent()?;
    let mut file = ConfigFile::open(&agent.location.root).map_err(|e| e.to_string())?;
    let was_default = file.remove_model(name).map_err(|e| e.to_string())?;
    file.save().map_err(|e| e.to_string())?;
    outln!(
        "removed {}{}",
        Untrusted(name),
        if was_default {
            " (it was the default: the default is now the demo, until `penguin models default NAME`)"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}
