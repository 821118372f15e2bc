use super::*;

fn cfg() -> Config {
    Config::parse(
        r#"
        default_model = "local"
        [models.local]
        protocol = "openai-chat"
        base_url = "http://127.0.0.1:8080/v1"
        model = "smollm2"
        thinking_level = "low"
        [models.claude]
        protocol = "anthropic-messages"
        model = "claude-x"
        headers = { "X-Team" = "penguin" }
        "#,
    )
    .unwrap()
}

fn none(_: &str) -> Option<String> {
    None
}

#[test]
fn precedence_is_flags_env_file_default() {
    let c = cfg();
    assert_eq!(
        resolve_model(&Config::default(), &ModelFlags::default(), none).unwrap(),
        ModelSpec::demo()
    );
    assert_eq!(
        resolve_model(&c, &ModelFlags::default(), none)
            .unwrap()
            .model_id,
        "smollm2"
    );
    let env = |k: &str| (k == "PENGUIN_MODEL").then(|| "claude".to_string());
    let from_env = resolve_model(&c, &ModelFlags::default(), env).unwrap();
    assert_eq!(
        (from_env.protocol, from_env.base_url.as_str()),
        (Protocol::ANTHROPIC_MESSAGES, "https://api.anthropic.com")
    );
    assert_eq!(
        from_env.headers,
        [("X-Team".to_string(), "penguin".to_string())]
    );
    let flags = ModelFlags {
        model: Some("local".into()),
        ..Default::default()
    };
    assert_eq!(resolve_model(&c, &flags, env).unwrap().model_id, "smollm2");
    let flags = ModelFlags {
        provider: Some("gemini".into()),
        model: Some("g-1".into()),
        ..Default::default()
    };
    let spec = resolve_model(&c, &flags, env).unwrap();
    assert_eq!(
        (spec.protocol, spec.model_id.as_str()),
        (Protocol::GEMINI, "g-1")
    );
}

#[test]
fn errors_name_what_is_wrong() {
    let c = cfg();
    let err = resolve_model(
        &c,
        &ModelFlags {
            model: Some("gpt".into()),
            ..Default::default()
        },
        none,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("no model named \"gpt\" (configured: claude, local"),
        "{err}"
    );
    let err = resolve_model(
        &c,
        &ModelFlags {
            provider: Some("openai-chat".into()),
            ..Default::default()
        },
        none,
    )
    .unwrap_err();
    assert!(err.to_string().contains("needs --model"), "{err}");
    let err = resolve_model(
        &c,
        &ModelFlags {
            provider: Some("bard".into()),
            ..Default::default()
        },
        none,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown provider protocol \"bard\""),
        "{err}"
    );
    assert!(Config::parse("[models.x]\nprotocol = 1")
        .unwrap_err()
        .to_string()
        .contains("protocol"));
    assert!(Config::parse("colour = 1")
        .unwrap_err()
        .to_string()
        .contains("colour"));
    let e = Config::parse("[models.x]\nprotocol = \"openai-chat\"\nmodel = 7").unwrap_err();
    assert_eq!(e.field, "models.x.model", "{e}");
}

#[cfg(feature = "tools")]
#[test]
fn the_sandbox_section_and_flag_make_the_request() {
    let none = Config::parse("")
        .unwrap()
        .sandbox
        .request(None, None)
        .unwrap();
    assert_eq!(none, SandboxRequest::default());
    let c = Config::parse(
        "[sandbox]\nmode = \"read-only\"\nnetwork = false\nallow_ports = [5432]\nwritable = [\"~/.cache\", \"/opt/x\"]",
    )
    .unwrap();
    let home = Path::new("/home/u");
    let r = c.sandbox.request(None, Some(home)).unwrap();
    assert_eq!(
        (r.mode, r.network, r.allow_ports.as_slice(), r.strict),
        (Some(SandboxMode::ReadOnly), false, &[5432][..], false)
    );
    assert_eq!(
        r.writable,
        [PathBuf::from("/home/u/.cache"), PathBuf::from("/opt/x")]
    );
    // The flag wins over the file; strict keeps a confining mode and asks for all of it.
    let r = c.sandbox.request(Some("off"), Some(home)).unwrap();
    assert_eq!(r.mode, Some(SandboxMode::Off));
    let r = c.sandbox.request(Some("strict"), Some(home)).unwrap();
    assert_eq!((r.mode, r.strict), (Some(SandboxMode::ReadOnly), true));
    let r = Config::default()
        .sandbox
        .request(Some("strict"), None)
        .unwrap();
    assert_eq!(
        (r.mode, r.strict),
        (Some(SandboxMode::WorkspaceWrite), true)
    );
    let e = c.sandbox.request(Some("loose"), Some(home)).unwrap_err();
    assert!(
        e.to_string().contains("--sandbox: unknown sandbox mode"),
        "{e}"
    );
    let e = Config::parse("[sandbox]\nmode = \"jail\"")
        .unwrap()
        .sandbox
        .request(None, None)
        .unwrap_err();
    assert!(e.to_string().contains("sandbox.mode"), "{e}");
    let e = Config::parse("[sandbox]\nwritable = [\"rel\"]")
        .unwrap()
        .sandbox
        .request(None, None)
        .unwrap_err();
    assert!(e.to_string().contains("not an absolute path"), "{e}");
    assert_eq!(
        Config::parse("[sandbox]\nnetwork = \"no\"")
            .unwrap_err()
            .field,
        "sandbox.network"
    );
    let o = sandbox_override(&r, Some("off"), Some(false)).unwrap();
    assert_eq!((o.mode, o.network), (Some(SandboxMode::Off), false));
    let e = sandbox_override(&r, Some("x"), None).unwrap_err();
    assert_eq!(e.field, "sandbox.mode");
    assert!(
        e.to_string()
            .starts_with("sandbox.mode: unknown sandbox mode \"x\""),
        "{e}"
    );
}

#[test]
fn prompt_cache_is_on_unless_a_model_turns_it_off() {
    let with = |n: &str| {
        let c = Config::parse(&format!(
            "default_model = \"m\"\n[models.m]\nprotocol = \"anthropic\"\nmodel = \"x\"\n{n}"
        ))
        .unwrap();
        resolve_model(&c, &ModelFlags::default(), none).unwrap()
    };
    assert!(with("").prompt_cache, "the default");
    assert!(!with("prompt_cache = false").prompt_cache);
    assert!(with("prompt_cache = true").prompt_cache);
    assert!(crate::models::ModelSpec::demo().prompt_cache);
}

#[test]
fn max_message_bytes_reaches_the_spec_within_its_range() {
    let with = |n: &str| {
        let c = Config::parse(&format!(
            "default_model = \"m\"\n[models.m]\nprotocol = \"openai-chat\"\nmodel = \"x\"\n{n}"
        ))
        .unwrap();
        resolve_model(&c, &ModelFlags::default(), none)
    };
    assert_eq!(with("").unwrap().max_message_bytes, None, "the default");
    assert_eq!(
        with("max_message_bytes = 65536").unwrap().max_message_bytes,
        Some(65536)
    );
    for bad in ["0", "33554433"] {
        let err = with(&format!("max_message_bytes = {bad}")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("models.m.max_message_bytes: {bad} is out of range: 1 to 33554432 (32 MiB, half of what one Trace record may hold)")
        );
    }
}

#[test]
fn ollama_is_a_protocol_with_a_local_default_and_no_key() {
    let c = Config::parse(
        "default_model = \"local\"\n[models.local]\nprotocol = \"ollama\"\nmodel = \"qwen3\"\nthinking_level = \"high\"\ncontext_window = 32768",
    )
    .unwrap();
    let spec = resolve_model(&c, &ModelFlags::default(), none).unwrap();
    assert_eq!(
        (
            spec.protocol.clone(),
            spec.base_url.as_str(),
            spec.model_id.as_str(),
            spec.context_window
        ),
        (
            Protocol::OLLAMA,
            "http://127.0.0.1:11434",
            "qwen3",
            Some(32768)
        )
    );
    assert_eq!(spec.key_env(), None, "a local Ollama takes no key");
    assert_eq!(spec.missing_key(none), None);
    assert_eq!(Protocol::OLLAMA.to_string(), "ollama");
    // Ad hoc, and at another host.
    let flags = ModelFlags {
        provider: Some("ollama".into()),
        model: Some("llama3.2".into()),
        base_url: Some("http://gpu-box:11434".into()),
        ..Default::default()
    };
    let spec = resolve_model(&c, &flags, none).unwrap();
    assert_eq!(
        (spec.protocol.clone(), spec.base_url.as_str()),
        (Protocol::OLLAMA, "http://gpu-box:11434")
    );
    // The spec builds an HTTP model without a server (nothing is sent until a request).
    assert!(crate::models::build_llm(&spec, Default::default()).is_ok());
    let err = resolve_model(
        &c,
        &ModelFlags {
            provider: Some("olama".into()),
            model: Some("x".into()),
            ..Default::default()
        },
        none,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains(
            "unknown provider protocol \"olama\" (registered: openai-chat, openai-responses, anthropic-messages, gemini, ollama, demo"
        ),
        "{err}"
    );
}

#[test]
fn trace_durability_and_server_capacity_are_read_and_a_wrong_durability_is_named() {
    use penguin_trace_store::Durability;
    let c = Config::parse(
        "[trace]\ndurability = \"never\"\n[server]\nmax_connections = 20000\nmax_streams = 15000\nidle_sessions = 500\n",
    )
    .unwrap();
    assert_eq!(c.trace.durability().unwrap(), Durability::Never);
    assert_eq!(c.server.max_connections, Some(20_000));
    assert_eq!(c.server.max_streams, Some(15_000));
    assert_eq!(c.server.idle_sessions, Some(500));
    assert_eq!(
        Config::default().trace.durability().unwrap(),
        Durability::AtCommit
    );
    let bad = Config::parse("[trace]\ndurability = \"sometimes\"\n").unwrap();
    assert_eq!(
        bad.trace.durability().unwrap_err().to_string(),
        ConfigError::Invalid(
            "trace.durability: \"sometimes\" is not a durability (never, commit or record)".into()
        )
        .to_string()
    );
    assert!(Config::parse("[server]\nmax_conections = 1\n").is_err());
}

#[cfg(feature = "tools")]
#[test]
fn edit_tools_follow_the_provider_unless_tools_edit_names_them() {
    let spec = |protocol: Protocol| ModelSpec {
        protocol,
        ..ModelSpec::demo()
    };
    let c = Config::default();
    let edit = |c: &Config, m: Option<&ModelSpec>| c.tools_config(m).unwrap().edit_tools;
    assert_eq!(
        edit(&c, Some(&spec(Protocol::OPENAI_RESPONSES))),
        EditTools::ApplyPatch
    );
    for p in [
        Protocol::OPENAI_CHAT,
        Protocol::ANTHROPIC_MESSAGES,
        Protocol::GEMINI,
        Protocol::OLLAMA,
    ] {
        assert_eq!(edit(&c, Some(&spec(p.clone()))), EditTools::Classic, "{p}");
    }
    assert_eq!(edit(&c, Some(&ModelSpec::demo())), EditTools::Both);
    assert_eq!(edit(&c, None), EditTools::Both);

    for (name, want) in [
        ("classic", EditTools::Classic),
        ("apply_patch", EditTools::ApplyPatch),
        ("both", EditTools::Both),
    ] {
        let c = Config::parse(&format!("[tools]\nedit = \"{name}\"\n")).unwrap();
        assert_eq!(edit(&c, Some(&spec(Protocol::OPENAI_RESPONSES))), want);
        assert_eq!(edit(&c, Some(&spec(Protocol::ANTHROPIC_MESSAGES))), want);
        assert_eq!(edit(&c, None), want);
    }

    let bad = Config::parse("[tools]\nedit = \"patch\"\n").unwrap();
    assert_eq!(
        bad.tools_config(None).unwrap_err().to_string(),
        "tools.edit: \"patch\" is not a choice of edit tools (classic, apply_patch or both)"
    );
    let err = Config::parse("[tools]\nedits = \"classic\"\n").unwrap_err();
    assert_eq!(err.field, "tools.edits");
    assert!(err.message.contains("unknown field `edits`"), "{err}");
    let err = Config::parse("[tools]\nedit = 1\n").unwrap_err();
    assert_eq!(err.field, "tools.edit");
}

#[cfg(feature = "tools")]
#[test]
fn a_model_without_vision_gets_no_read_image() {
    use penguin_tools::BuiltinTool;
    let c = Config::parse(
        "[models.blind]\nprotocol = \"openai-chat\"\nmodel = \"m\"\nvision = false\n[models.seeing]\nprotocol = \"openai-chat\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let named = |name: &str| {
        resolve_model(
            &c,
            &ModelFlags {
                model: Some(name.into()),
                ..Default::default()
            },
            none,
        )
        .unwrap()
    };
    let blind = named("blind");
    assert!(!blind.vision);
    let tools = c.tools_config(Some(&blind)).unwrap();
    assert!(!tools.enabled.contains(&BuiltinTool::ReadImage));
    assert_eq!(tools.enabled.len(), BuiltinTool::ALL.len() - 1);

    let seeing = named("seeing");
    assert!(seeing.vision, "vision is the default");
    assert!(c
        .tools_config(Some(&seeing))
        .unwrap()
        .enabled
        .contains(&BuiltinTool::ReadImage));
    assert!(ModelSpec::demo().vision);
    assert!(c
        .tools_config(None)
        .unwrap()
        .enabled
        .contains(&BuiltinTool::ReadImage));
}

#[test]
fn session_sets_max_turns_and_the_approval_mode_by_the_references_names() {
    let c = Config::parse("[session]\nmax_turns = 12\napproval = \"read-only\"\n").unwrap();
    assert_eq!(c.session.max_turns().unwrap(), 12);
    assert_eq!(c.session.approval().unwrap(), Some(ApprovalMode::ReadOnly));
    let none = Config::parse("").unwrap();
    assert_eq!(none.session.max_turns().unwrap(), -1);
    assert_eq!(none.session.approval().unwrap(), None);
    assert_eq!(parse_approval("ask"), Ok(ApprovalMode::AlwaysAsk));
    assert_eq!(parse_approval("Allow-All"), Ok(ApprovalMode::AllowAll));
    let zero = Config::parse("[session]\nmax_turns = 0\n").unwrap();
    assert!(zero
        .session
        .max_turns()
        .unwrap_err()
        .to_string()
        .starts_with("session.max_turns: 0"));
    let wrong = Config::parse("[session]\napproval = \"maybe\"\n").unwrap();
    assert_eq!(
        wrong.session.approval().unwrap_err().to_string(),
        "session.approval: \"maybe\" is not an approval mode (always-ask or ask, read-only, deny-all, allow-all)"
    );
    assert_eq!(
        Config::parse("[session]\nturns = 3\n").unwrap_err().field,
        "session.turns"
    );
}

#[cfg(feature = "tools")]
#[test]
fn git_writable_and_the_clusters_credentials_are_read_from_the_file() {
    let c = Config::parse("[sandbox]\ngit_writable = true").unwrap();
    assert!(c.sandbox.request(None, None).unwrap().git_writable);
    assert!(
        !Config::default()
            .sandbox
            .request(None, None)
            .unwrap()
            .git_writable
    );
    let c = Config::parse(
        "[cluster]\nnats = [\"tls://h:4222\"]\nnode = \"a\"\nsecret_file = \"/etc/p/secret\"\nnats_creds = \"/etc/p/a.creds\"\nnats_ca = \"/etc/p/ca.pem\"\nnats_tls = true\ninsecure_nats = false",
    )
    .unwrap();
    assert_eq!(c.cluster.secret_file, Some(PathBuf::from("/etc/p/secret")));
    assert_eq!(c.cluster.nats_creds, Some(PathBuf::from("/etc/p/a.creds")));
    assert_eq!(c.cluster.nats_ca, Some(PathBuf::from("/etc/p/ca.pem")));
    assert!(c.cluster.nats_tls && !c.cluster.insecure_nats);
    // A password has no key: it stays out of files.
    let e = Config::parse("[cluster]\nnats_password = \"x\"").unwrap_err();
    assert!(e.to_string().contains("nats_password"), "{e}");
}

/// An adapter from outside the crate: answers every request with its model id.
#[derive(Debug)]
struct Parrot(String);

#[penguin_llm_providers::async_trait]
impl penguin_llm_providers::Llm for Parrot {
    async fn stream_generate(
        &mut self,
        _request: penguin_llm_providers::LlmRequest,
        sink: &mut dyn penguin_llm_providers::MessageSink,
    ) -> penguin_llm_providers::LlmOutcome {
        let text = format!("parrot {}", self.0);
        sink.emit(penguin_omni_protocol::build::assistant_text(
            text,
            penguin_omni_protocol::StopReason::Completed,
        ))
        .await;
        penguin_llm_providers::LlmOutcome::completed()
    }
}

#[tokio::test]
async fn a_registered_adapter_is_named_in_config_and_by_provider() {
    use crate::models::{build_llm, register_adapter, Adapter};

    let unknown = "[models.p]\nprotocol = \"parrot-proto\"\nmodel = \"polly\"\n";
    let err = resolve_model(
        &Config::parse(&format!("default_model = \"p\"\n{unknown}")).unwrap(),
        &ModelFlags::default(),
        none,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("models.p.protocol: unknown provider protocol \"parrot-proto\" (registered: openai-chat,"),
        "{err}"
    );

    register_adapter(
        Adapter::new("parrot-proto", |input: crate::models::AdapterInput| {
            Ok(Box::new(Parrot(input.config.model_id)) as Box<dyn penguin_llm_providers::Llm>)
        })
        .with_default_base_url("http://parrot.invalid")
        .with_default_key_env("PARROT_KEY"),
    );
    let c = Config::parse(&format!("default_model = \"p\"\n{unknown}")).unwrap();
    let spec = resolve_model(&c, &ModelFlags::default(), none).unwrap();
    assert_eq!(
        (
            spec.protocol.as_str(),
            spec.base_url.as_str(),
            spec.key_env().as_deref()
        ),
        ("parrot-proto", "http://parrot.invalid", Some("PARROT_KEY"))
    );
    let flags = ModelFlags {
        provider: Some("parrot-proto".into()),
        model: Some("kea".into()),
        ..Default::default()
    };
    assert_eq!(
        resolve_model(&c, &flags, none).unwrap().protocol,
        spec.protocol
    );

    // The spec builds the registered adapter's model.
    let mut llm = build_llm(&spec, Default::default()).unwrap();
    let mut out: Vec<penguin_omni_protocol::OmniMessage> = Vec::new();
    let request = penguin_llm_providers::LlmRequest {
        new_messages: vec![penguin_omni_protocol::build::user_text("hi")],
        cancel: penguin_llm_providers::CancellationToken::new(),
        thinking_level: None,
    };
    llm.stream_generate(request, &mut out).await;
    assert_eq!(
        out[0].model().and_then(|p| p.content()),
        Some("parrot polly")
    );
    assert!(adapter_names_include("parrot-proto"));
}

fn adapter_names_include(name: &str) -> bool {
    crate::models::adapter_names().iter().any(|n| n == name)
}

#[test]
fn a_syntax_error_names_its_line_and_column() {
    let err = Config::parse("default_model = \"a\"\n[models.x]\nprotocol = \"ollama\nmodel = 1\n")
        .unwrap_err();
    let shown = err.to_string();
    assert!(shown.starts_with(".: line 3, column "), "{shown}");
    let err = Config::parse("[models.x]\nprotocol = 7\n").unwrap_err();
    assert_eq!(err.field, "models.x.protocol");
    assert!(
        err.message.starts_with("line 2, column 12: "),
        "{}",
        err.message
    );
}
