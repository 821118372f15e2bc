//! How a node proves itself, against real nats-servers: to NATS (an open NATS is refused
//! unless allowed in so many words; user and password, token, nkey seed file, .creds file, TLS
//! with a CA file), and to the other nodes (signatures that survive NATS, and a copy that does
//! not).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use penguin_cluster::{
    Cluster, ClusterConfig, ClusterError, ClusterSecret, NatsAuth, Refusal, Signer,
};
use support::{nats_available, NatsCluster};

/// One nats-server run from a config file the test writes; killed when dropped.
struct Server {
    port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Server {
    /// Starts nats-server with JetStream and `extra` in its config, and waits until a client
    /// with `ready` gets in.
    async fn start(extra: &str, ready: async_nats::ConnectOptions, url: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let config = format!(
            "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {:?} }}\n{extra}\n",
            dir.path().join("js").display().to_string()
        );
        let file = dir.path().join("nats.conf");
        std::fs::write(&file, config).unwrap();
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("nats.log")).unwrap())
            .spawn()
            .unwrap();
        let mut server = Server { port, child, dir };
        let url = url.replace("PORT", &port.to_string());
        let deadline = Instant::now() + Duration::from_secs(10);
        // Ready when it answers the protocol to these credentials, not merely when its port
        // is open.
        while ready.clone().connect(url.as_str()).await.is_err() {
            assert!(
                Instant::now() < deadline && server.child.try_wait().unwrap().is_none(),
                "nats-server did not let the test in: {}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default()
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn config(&self, url: String, auth: NatsAuth) -> ClusterConfig {
        let mut c = ClusterConfig::new(vec![url], "a", support::secret());
        c.replicas = 1;
        c.request_timeout = Duration::from_secs(10);
        c.auth = auth;
        c
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn joins(server: &Server, config: ClusterConfig, what: &str) -> Cluster {
    match Cluster::connect(config).await {
        Ok(c) => c,
        Err(e) => panic!("{what}: {e}; nats-server's log:\n{}", server.log()),
    }
}

#[tokio::test]
async fn an_open_nats_is_refused_unless_allowed_in_so_many_words() {
    if !nats_available("an_open_nats_is_refused_unless_allowed_in_so_many_words") {
        return;
    }
    let nats = NatsCluster::start_with(1, false).await;
    let mut config = nats.config("a");
    config.allow_unauthenticated = false;
    let err = Cluster::connect(config.clone())
        .await
        .expect_err("a NATS that lets anyone in is refused");
    assert!(
        matches!(&err, ClusterError::Unauthenticated { url } if *url == nats.nodes[0].plain_url()),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("without authentication"), "{text}");
    assert!(text.contains("allow_unauthenticated"), "{text}");
    config.allow_unauthenticated = true;
    let joined = Cluster::connect(config).await.expect("allowed in words");
    assert!(!joined.nats_authenticated());
}

#[tokio::test]
async fn a_nats_asking_for_credentials_takes_a_password_or_an_nkey_seed_file() {
    if !nats_available("a_nats_asking_for_credentials_takes_a_password_or_an_nkey_seed_file") {
        return;
    }
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().unwrap();
    let extra = format!(
        "authorization {{ users = [ {{ user: \"node-a\", password: \"pw-of-a-0123\" }}, \
         {{ nkey: \"{}\" }} ] }}",
        user.public_key()
    );
    let ready =
        async_nats::ConnectOptions::with_user_and_password("node-a".into(), "pw-of-a-0123".into());
    let server = Server::start(&extra, ready, "nats://127.0.0.1:PORT").await;
    let password = NatsAuth::UserPassword {
        user: "node-a".into(),
        password: "pw-of-a-0123".into(),
    };
    let joined = joins(&server, server.config(server.url(), password), "password").await;
    assert!(joined.nats_authenticated());
    // The password in the URL, as `[cluster] nats` may carry it.
    let in_url = format!("nats://node-a:pw-of-a-0123@127.0.0.1:{}", server.port);
    joins(
        &server,
        server.config(in_url.clone(), NatsAuth::None),
        "URL",
    )
    .await;

    let seed_file = server.dir.path().join("node-a.nk");
    std::fs::write(&seed_file, format!("{seed}\n")).unwrap();
    let nkey = server.config(server.url(), NatsAuth::NkeyFile(seed_file.clone()));
    assert!(
        !format!("{nkey:?}").contains(&seed),
        "the config's Debug names the file, not the seed"
    );
    joins(&server, nkey, "nkey seed file").await;

    // Refused: no credentials, a wrong password, a seed of another key.
    let none = Cluster::connect(server.config(server.url(), NatsAuth::None)).await;
    assert!(
        matches!(none, Err(ClusterError::Unreachable { .. })),
        "{none:?}"
    );
    let wrong = NatsAuth::UserPassword {
        user: "node-a".into(),
        password: "wrong".into(),
    };
    let wrong = Cluster::connect(server.config(server.url(), wrong)).await;
    assert!(
        matches!(wrong, Err(ClusterError::Unreachable { .. })),
        "{wrong:?}"
    );
    let other = server.dir.path().join("other.nk");
    std::fs::write(&other, nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    let other = Cluster::connect(server.config(server.url(), NatsAuth::NkeyFile(other))).await;
    assert!(
        matches!(other, Err(ClusterError::Unreachable { .. })),
        "{other:?}"
    );
    // Files that hold no seed, and credentials given twice, are named as such.
    let not_a_seed = server.dir.path().join("not-a-seed");
    std::fs::write(&not_a_seed, user.public_key()).unwrap();
    let err = Cluster::connect(server.config(server.url(), NatsAuth::NkeyFile(not_a_seed)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClusterError::Credentials { .. }) && err.to_string().contains("not-a-seed"),
        "{err}"
    );
    let missing = server.dir.path().join("missing.creds");
    let err = Cluster::connect(server.config(server.url(), NatsAuth::CredsFile(missing)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("missing.creds"), "{err}");
    let twice = server.config(in_url, NatsAuth::NkeyFile(seed_file));
    let err = Cluster::connect(twice).await.unwrap_err();
    assert!(matches!(err, ClusterError::Credentials { .. }), "{err}");
    assert!(!err.to_string().contains("pw-of-a-0123"), "{err}");
}

#[tokio::test]
async fn a_nats_asking_for_a_token_takes_it() {
    if !nats_available("a_nats_asking_for_a_token_takes_it") {
        return;
    }
    let token = "nats-token-0123456789";
    let extra = format!("authorization {{ token: \"{token}\" }}");
    let ready = async_nats::ConnectOptions::with_token(token.into());
    let server = Server::start(&extra, ready, "nats://127.0.0.1:PORT").await;
    let config = server.config(server.url(), NatsAuth::Token(token.into()));
    assert!(!format!("{config:?}").contains(token));
    assert!(joins(&server, config, "token").await.nats_authenticated());
    let in_url = format!("nats://{token}@127.0.0.1:{}", server.port);
    joins(
        &server,
        server.config(in_url, NatsAuth::None),
        "token in URL",
    )
    .await;
    let wrong = Cluster::connect(server.config(server.url(), NatsAuth::Token("nope".into()))).await;
    assert!(
        matches!(wrong, Err(ClusterError::Unreachable { .. })),
        "{wrong:?}"
    );
}

/// A CA, and a certificate it signed for 127.0.0.1, made with `openssl`; `None` without it.
fn certificates(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    let made = run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]) && run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]) && run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.pem",
    ]);
    made.then(|| {
        (
            dir.join("ca.pem"),
            dir.join("server.pem"),
            dir.join("server.key"),
        )
    })
}

#[tokio::test]
async fn tls_to_nats_is_verified_against_the_ca_file() {
    if !nats_available("tls_to_nats_is_verified_against_the_ca_file") {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let Some((ca, cert, key)) = certificates(certs.path()) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "openssl is needed to make the TLS test's certificates"
        );
        eprintln!("SKIPPED tls_to_nats_is_verified_against_the_ca_file: no openssl");
        return;
    };
    let extra = format!(
        "tls {{ cert_file: {:?}, key_file: {:?} }}\nauthorization {{ user: \"node-a\", password: \"pw-0123\" }}",
        cert.display().to_string(),
        key.display().to_string()
    );
    let ready =
        async_nats::ConnectOptions::with_user_and_password("node-a".into(), "pw-0123".into())
            .add_root_certificates(ca.clone());
    let server = Server::start(&extra, ready, "tls://127.0.0.1:PORT").await;
    let url = format!("tls://node-a:pw-0123@127.0.0.1:{}", server.port);
    let mut config = server.config(url.clone(), NatsAuth::None);
    config.tls.ca_file = Some(ca);
    config.tls.required = true;
    joins(&server, config, "TLS with the CA file").await;
    // Without the CA the server's certificate chains to nothing the node trusts.
    let err = Cluster::connect(server.config(url, NatsAuth::None))
        .await
        .expect_err("an unknown CA is refused");
    assert!(matches!(err, ClusterError::Unreachable { .. }), "{err:?}");
    let mut config = server.config(server.url(), NatsAuth::None);
    config.tls.ca_file = Some(certs.path().join("missing.pem"));
    let err = Cluster::connect(config).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::Credentials { .. }) && err.to_string().contains("missing.pem"),
        "{err}"
    );
}

#[tokio::test]
async fn a_signed_message_verifies_across_nats_once_and_only_for_its_subject() {
    if !nats_available("a_signed_message_verifies_across_nats_once_and_only_for_its_subject") {
        return;
    }
    let nats = NatsCluster::start(1).await;
    let a = nats.join("a").await;
    let b = nats.join("b").await;
    let mut seen = b.client().subscribe("penguin.test.>").await.unwrap();
    // b's subscription and a's publishes travel on two connections: a probes until b hears.
    loop {
        a.client()
            .publish("penguin.test.probe", bytes::Bytes::new())
            .await
            .unwrap();
        let heard = tokio::time::timeout(Duration::from_millis(200), seen.next()).await;
        if heard.is_ok_and(|m| m.is_some_and(|m| m.subject.as_str() == "penguin.test.probe")) {
            break;
        }
    }

    let mut h = async_nats::HeaderMap::new();
    h.insert("Penguin-Method", "POST");
    h.append("Http-accept", "text/plain");
    h.append("Http-accept", " application/json ");
    h.insert("Http-content-type", "application/json");
    let body = bytes::Bytes::from_static(b"{\"input\":\"hi\"}");
    a.signer().sign("penguin.test.b", &mut h, &body);
    a.client()
        .publish_with_headers("penguin.test.b", h.clone(), body.clone())
        .await
        .unwrap();
    // The same message again (a replay), and sent to another subject.
    a.client()
        .publish_with_headers("penguin.test.b", h.clone(), body.clone())
        .await
        .unwrap();
    a.client()
        .publish_with_headers("penguin.test.c", h, body)
        .await
        .unwrap();
    // Signed under another secret, as by a process that has NATS credentials but not the
    // cluster's secret.
    let stranger = Signer::new(ClusterSecret::new(vec![b'x'; 40]).unwrap(), "a");
    let mut forged = async_nats::HeaderMap::new();
    stranger.sign("penguin.test.b", &mut forged, b"");
    a.client()
        .publish_with_headers("penguin.test.b", forged, bytes::Bytes::new())
        .await
        .unwrap();
    a.client().flush().await.unwrap();

    let mut verdicts = Vec::new();
    while verdicts.len() < 4 {
        let m = tokio::time::timeout(Duration::from_secs(10), seen.next())
            .await
            .unwrap_or_else(|_| panic!("a message within 10 s after {verdicts:?}"))
            .unwrap();
        if m.subject.as_str() == "penguin.test.probe" {
            continue;
        }
        verdicts.push(
            b.signer()
                .verify(m.subject.as_str(), m.headers.as_ref(), &m.payload),
        );
    }
    assert_eq!(verdicts[0], Ok("a".to_owned()));
    assert!(
        matches!(verdicts[1], Err(Refusal::Replayed { .. })),
        "{verdicts:?}"
    );
    assert_eq!(verdicts[2], Err(Refusal::BadSignature));
    assert_eq!(verdicts[3], Err(Refusal::BadSignature));
}

/// A JWT of `claims` signed by `issuer`, as `nsc` writes them.
fn jwt(issuer: &nkeys::KeyPair, mut claims: serde_json::Value) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    claims["iat"] = now.into();
    claims["iss"] = issuer.public_key().into();
    claims["jti"] = format!("jti{}{now}", claims["sub"].as_str().unwrap_or("")).into();
    let header = b64.encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let signed = format!("{header}.{}", b64.encode(claims.to_string()));
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", b64.encode(signature))
}

#[tokio::test]
async fn a_nats_in_operator_mode_takes_a_creds_file() {
    if !nats_available("a_nats_in_operator_mode_takes_a_creds_file") {
        return;
    }
    let operator = nkeys::KeyPair::new_operator();
    let account = nkeys::KeyPair::new_account();
    // JetStream needs a system account.
    let system = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let operator_jwt = jwt(
        &operator,
        serde_json::json!({"name": "op", "sub": operator.public_key(),
            "nats": {"type": "operator", "version": 2}}),
    );
    let unlimited = serde_json::json!({"subs": -1, "data": -1, "payload": -1, "imports": -1,
        "exports": -1, "wildcards": true, "conn": -1, "leaf": -1, "mem_storage": -1,
        "disk_storage": -1, "streams": -1, "consumer": -1});
    let account_jwt = jwt(
        &operator,
        serde_json::json!({"name": "penguin", "sub": account.public_key(),
            "nats": {"limits": unlimited, "type": "account", "version": 2}}),
    );
    let system_jwt = jwt(
        &operator,
        serde_json::json!({"name": "SYS", "sub": system.public_key(),
            "nats": {"type": "account", "version": 2}}),
    );
    let user_jwt = jwt(
        &account,
        serde_json::json!({"name": "node-a", "sub": user.public_key(),
            "nats": {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                "type": "user", "version": 2}}),
    );
    let creds = format!(
        "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        user.seed().unwrap()
    );
    let extra = format!(
        "operator: {operator_jwt:?}\nsystem_account: {}\nresolver: MEMORY\n\
         resolver_preload: {{ {}: {account_jwt:?}, {}: {system_jwt:?} }}",
        system.public_key(),
        account.public_key(),
        system.public_key()
    );
    let ready = async_nats::ConnectOptions::with_credentials(&creds).unwrap();
    let server = Server::start(&extra, ready, "nats://127.0.0.1:PORT").await;
    let file = server.dir.path().join("node-a.creds");
    std::fs::write(&file, &creds).unwrap();
    let joined = joins(
        &server,
        server.config(server.url(), NatsAuth::CredsFile(file)),
        ".creds file",
    )
    .await;
    assert!(joined.nats_authenticated());
    let none = Cluster::connect(server.config(server.url(), NatsAuth::None)).await;
    assert!(
        matches!(none, Err(ClusterError::Unreachable { .. })),
        "{none:?}"
    );
}
