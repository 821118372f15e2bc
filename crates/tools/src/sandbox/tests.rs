use super::*;

fn request(mode: Option<SandboxMode>, network: bool, strict: bool) -> SandboxRequest {
    SandboxRequest {
        mode,
        network,
        strict,
        ..SandboxRequest::default()
    }
}

#[test]
fn modes_parse_and_print() {
    for mode in SandboxMode::ALL {
        assert_eq!(mode.as_str().parse::<SandboxMode>(), Ok(mode));
    }
    let err = "write".parse::<SandboxMode>().unwrap_err();
    assert!(err.contains("workspace-write, read-only or off"), "{err}");
}

#[test]
fn the_default_is_workspace_write_where_landlock_exists_and_off_elsewhere() {
    let on = Sandbox::resolve_for(&SandboxRequest::default(), Landlock::Abi(7)).unwrap();
    assert_eq!(on.mode(), SandboxMode::WorkspaceWrite);
    assert!(on.gaps().is_empty() && on.warning().is_none());
    assert_eq!(
        on.summary(),
        "sandbox: workspace-write, network off (Landlock ABI 7)"
    );
    assert!(!on.network(), "the network is off unless asked for");
    let none = Sandbox::resolve_for(&SandboxRequest::default(), Landlock::NotImplemented).unwrap();
    assert_eq!(none.mode(), SandboxMode::Off);
    assert!(!none.is_active() && none.gaps().is_empty());
    assert_eq!(none.summary(), "sandbox: off (this kernel has no Landlock)");
    assert_eq!(Sandbox::off().summary(), "sandbox: off");
}

#[test]
fn a_kernel_without_landlock_runs_unconfined_and_says_so_or_refuses_when_strict() {
    let asked = request(Some(SandboxMode::WorkspaceWrite), false, false);
    let sb = Sandbox::resolve_for(&asked, Landlock::NotEnabled).unwrap();
    assert_eq!(sb.mode(), SandboxMode::Off);
    assert!(
        sb.network(),
        "TCP cannot be blocked, so it is not claimed blocked"
    );
    assert!(!sb.is_active());
    assert_eq!(sb.gaps(), [Gap::Landlock]);
    assert_eq!(
        sb.summary(),
        "sandbox: off (workspace-write, network off asked, but Landlock is not enabled in this kernel)"
    );
    let warning = sb.warning().unwrap();
    assert!(warning.contains("commands run unconfined"), "{warning}");
    let strict = request(Some(SandboxMode::WorkspaceWrite), true, true);
    let err = Sandbox::resolve_for(&strict, Landlock::NotImplemented).unwrap_err();
    assert!(
        err.to_string().contains("this kernel has no Landlock"),
        "{err}"
    );
}

#[test]
fn missing_abi_features_are_named_and_strict_refuses_them() {
    let asked = request(Some(SandboxMode::ReadOnly), false, false);
    let sb = Sandbox::resolve_for(&asked, Landlock::Abi(3)).unwrap();
    assert_eq!(sb.mode(), SandboxMode::ReadOnly);
    assert!(sb.network(), "ABI 3 cannot block TCP");
    assert_eq!(sb.gaps(), [Gap::Network, Gap::DeviceIoctl]);
    assert_eq!(
        sb.summary(),
        "sandbox: read-only (Landlock ABI 3; not enforced: network, device-ioctl)"
    );
    let warning = sb.warning().unwrap();
    assert!(
        warning.contains("TCP connections are not blocked (needs ABI 4)"),
        "{warning}"
    );
    assert_eq!(sb.warning_once(), Some(warning.clone()));
    assert_eq!(sb.warning_once(), None, "said once per process");
    let strict = request(Some(SandboxMode::ReadOnly), false, true);
    let err = Sandbox::resolve_for(&strict, Landlock::Abi(4)).unwrap_err();
    assert!(err.to_string().contains("needs ABI 5"), "{err}");
    assert!(Sandbox::resolve_for(&strict, Landlock::Abi(5)).is_ok());
    // network on and mode off ask for nothing, so an old kernel is no gap.
    let off = request(Some(SandboxMode::Off), true, true);
    assert!(Sandbox::resolve_for(&off, Landlock::NotImplemented).is_ok());
}

#[test]
fn a_missing_writable_directory_is_an_error() {
    let asked = SandboxRequest {
        writable: vec!["/nonexistent/penguin-cache".into()],
        ..SandboxRequest::default()
    };
    let err = Sandbox::resolve_for(&asked, Landlock::Abi(7)).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/penguin-cache"),
        "{err}"
    );
}

fn scan(lines: &str) -> DenialScan {
    let mut scan = DenialScan::default();
    // Split mid-line to show chunks need not be whole lines.
    let (a, b) = lines.split_at(lines.len() / 2);
    scan.push(a);
    scan.push(b);
    scan.finish();
    scan
}

fn sandbox(mode: SandboxMode, network: bool) -> Sandbox {
    let temp = std::env::temp_dir().canonicalize().unwrap();
    Sandbox::resolve_for(
        &SandboxRequest {
            mode: Some(mode),
            network,
            allow_ports: vec![5432],
            temp_dir: Some(temp),
            ..SandboxRequest::default()
        },
        Landlock::Abi(7),
    )
    .unwrap()
}

#[test]
fn a_denied_path_outside_the_writable_roots_is_named() {
    let sb = sandbox(SandboxMode::WorkspaceWrite, true);
    let ws = Path::new("/work/ws");
    let s = scan("touch: cannot touch '/etc/x': Permission denied\nln: failed to create hard link 'a' => '/srv/b': Invalid cross-device link\n");
    let note = sb.denial_note(&s, ws).unwrap();
    assert!(note.contains("'/etc/x', '/srv/b'"), "{note}");
    assert!(!note.contains("'a'"), "inside the workspace: {note}");
    assert!(
        note.contains("mode workspace-write: writes only beneath /work/ws"),
        "{note}"
    );
    assert!(note.contains("not a kernel report"), "{note}");
    // A relative path inside the workspace is not the sandbox's doing.
    let s = scan("sh: 1: cannot create out.txt: Permission denied\n");
    assert_eq!(sb.denial_note(&s, ws), None);
    // In read-only mode the workspace is not writable.
    let ro = sandbox(SandboxMode::ReadOnly, true);
    let note = ro.denial_note(&s, ws).unwrap();
    assert!(note.contains("'out.txt'"), "{note}");
}

#[test]
fn a_denied_port_is_named_and_an_unlocated_error_gets_a_hedged_note() {
    let sb = sandbox(SandboxMode::WorkspaceWrite, false);
    let ws = Path::new("/work/ws");
    let s =
        scan("curl: (7) Failed to connect to 127.0.0.1 port 8080 after 0 ms: Permission denied\n");
    let note = sb.denial_note(&s, ws).unwrap();
    assert!(note.contains("TCP port 8080"), "{note}");
    assert!(note.contains("network off"), "{note}");
    let s = scan("PermissionError: [Errno 13] Permission denied");
    let note = sb.denial_note(&s, ws).unwrap();
    assert!(note.contains("cannot tell which access failed"), "{note}");
    assert!(note.contains("or opened a TCP connection"), "{note}");
    let s = scan("connect to localhost:5432 failed: Permission denied\n");
    assert_eq!(sb.denial_note(&s, ws), None, "5432 is allowed");
    assert_eq!(sb.denial_note(&scan("all good\n"), ws), None);
    let s = scan("curl: (7) Failed to connect to example.org port 443 after 0 ms: Couldn't connect to server\n");
    let note = sb.denial_note(&s, ws).unwrap();
    assert!(note.contains("TCP port 443"), "{note}");
    let open = sandbox(SandboxMode::WorkspaceWrite, true);
    assert_eq!(open.denial_note(&s, ws), None, "the network was allowed");
    assert_eq!(
        Sandbox::off().denial_note(&scan("Permission denied\n"), ws),
        None
    );
}

#[test]
fn the_bypass_is_granted_per_call_and_used_once() {
    let bypass = SandboxBypass::new();
    bypass.grant("c1", "{\"cmd\":\"x\"}");
    assert!(!bypass.take("c1", "{\"cmd\":\"y\"}"));
    assert!(bypass.take("c1", "{\"cmd\":\"x\"}"));
    assert!(!bypass.take("c1", "{\"cmd\":\"x\"}"));
}

#[test]
fn only_a_strict_request_tries_the_namespaces_before_the_first_command() {
    let untried = Host {
        namespaces: Namespaces::Untried("/usr/bin/bwrap".into()),
        ..Host::from(Landlock::Abi(7))
    };
    let asked = request(Some(SandboxMode::WorkspaceWrite), false, false);
    let lenient = Sandbox::resolve_for(&asked, untried.clone()).unwrap();
    assert!(matches!(lenient.host().namespaces, Namespaces::Untried(_)));
    let strict = request(Some(SandboxMode::WorkspaceWrite), false, true);
    // Refusing is only possible before anything runs, so strict asks the machine now.
    match Sandbox::resolve_for(&strict, untried) {
        Ok(sb) => assert!(sb.host().namespaces.available(), "{sb:?}"),
        Err(SandboxError::NotEnforceable { gaps, .. }) => {
            assert!(gaps.contains(&Gap::Namespaces), "{gaps:?}")
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn without_namespaces_the_gaps_are_those_of_landlock_alone() {
    let host = |namespaces| Host {
        namespaces,
        ..Host::from(Landlock::Abi(5))
    };
    let asked = request(Some(SandboxMode::WorkspaceWrite), false, false);
    let with = Sandbox::resolve_for(&asked, host(Namespaces::Bubblewrap("bwrap".into()))).unwrap();
    assert!(with.gaps().is_empty(), "{:?}", with.gaps());
    let without = Sandbox::resolve_for(
        &asked,
        host(Namespaces::Unavailable("no bubblewrap".into())),
    )
    .unwrap();
    // ABI 5 scopes no signals: only the PID namespace kept penguin out of reach.
    assert_eq!(without.gaps(), [Gap::Namespaces, Gap::Signals]);
    assert!(!without.summary().contains("checked at the first command"));
    assert!(without
        .summary()
        .ends_with("not enforced: namespaces, signals)"));
}
