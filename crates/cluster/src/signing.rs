//! How the cluster's nodes know a message on NATS came from one of them: each one they send
//! each other directly (a forwarded request, its answer) carries an HMAC-SHA256 under the
//! cluster secret, which only the nodes hold. NATS credentials let a process onto the bus; the
//! secret is what lets it act as a node. The server's API token never travels on the bus.
//!
//! A signature covers the subject the message is published to (so it cannot be sent to
//! another node), every header (the sending node, a timestamp and a random nonce among them)
//! and the payload. A receiver refuses a message without one, with one that does not verify,
//! one signed outside [`SIGNATURE_WINDOW`] of its own clock, and one whose nonce it already
//! took within that window (a replay).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::HeaderMap;
use hmac::{KeyInit, Mac};

use crate::{now_ms, ClusterError, NODE_HEADER};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The header carrying a message's signature (64 hex digits of HMAC-SHA256).
pub const SIGNATURE_HEADER: &str = "Penguin-Signature";
/// The header carrying when a message was signed (milliseconds since the Unix epoch).
pub const TIME_HEADER: &str = "Penguin-Time";
/// The header carrying a message's random nonce (32 hex digits).
pub const NONCE_HEADER: &str = "Penguin-Nonce";

/// How far a signature's time may be from the receiver's clock, either way. Short, because a
/// captured message may be replayed only within it (and its nonce is remembered that long);
/// wide enough for nodes whose clocks disagree by a few seconds and a loaded NATS.
pub const SIGNATURE_WINDOW: Duration = Duration::from_secs(30);

/// How long before a node started a message may have been signed: what clocks may disagree
/// by in the first moments of a node. Anything older is refused, since the node cannot know
/// whether its previous run took it already.
const START_ALLOWANCE_MS: u64 = 2_000;

// Separates these signatures from any other use a deployment makes of the same secret.
const DOMAIN: &[u8] = b"penguin-cluster-signature-v1";

/// The secret the cluster's nodes share to authenticate each other: at least
/// [`ClusterSecret::MIN_LEN`] bytes, the same on every node. It is never printed (its `Debug`
/// says only that it is there).
#[derive(Clone)]
pub struct ClusterSecret(Arc<[u8]>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

impl ClusterSecret {
    /// The shortest secret accepted: 32 bytes (`openssl rand -hex 32` writes 64).
    pub const MIN_LEN: usize = 32;

    /// A secret of these bytes; shorter than [`MIN_LEN`](Self::MIN_LEN) is
    /// [`ClusterError::Secret`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<ClusterSecret, ClusterError> {
        let bytes: Vec<u8> = bytes.into();
        if bytes.len() < Self::MIN_LEN {
            return Err(ClusterError::Secret {
                what: "the cluster secret".into(),
                reason: format!(
                    "it has {} bytes; it needs {} at least (e.g. `openssl rand -hex 32`)",
                    bytes.len(),
                    Self::MIN_LEN
                ),
            });
        }
        Ok(ClusterSecret(bytes.into()))
    }

    /// The secret in file `path`, without the whitespace around it (a trailing newline).
    pub fn from_file(path: &Path) -> Result<ClusterSecret, ClusterError> {
        let named = |reason: String| ClusterError::Secret {
            what: format!("the cluster secret file {}", path.display()),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| named(e.to_string()))?;
        let start = bytes
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(bytes.len());
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(start, |i| i + 1);
        ClusterSecret::new(bytes[start..end].to_vec()).map_err(|e| match e {
            ClusterError::Secret { reason, .. } => named(reason),
            e => e,
        })
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length.
        HmacSha256::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }
}

/// Why a message was refused as not coming from a node of the cluster. Says nothing of the
/// secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No signature at all: whoever sent it does not speak as a node.
    #[error("it carries no signature")]
    Unsigned,
    /// A signature that does not verify: the sender lacks the cluster secret (or has another
    /// one), or the message was changed on its way.
    #[error(
        "its signature does not verify (the sender does not hold this cluster's secret, or the message was changed)"
    )]
    BadSignature,
    /// Signed too far from this node's clock (a replay of an old message, or clocks apart).
    #[error("it was signed {skew_ms} ms from this node's clock, outside the {window_s} s window")]
    Stale {
        /// Signed time minus this node's time.
        skew_ms: i64,
        /// [`SIGNATURE_WINDOW`] in seconds.
        window_s: u64,
    },
    /// Signed before this node started (beyond a small allowance for clocks): it may be a
    /// replay of a message the node's previous run took, whose nonces this run never saw.
    #[error("it was signed {before_ms} ms before this node started")]
    BeforeStart {
        /// How long before.
        before_ms: u64,
    },
    /// Its nonce was taken already within the window: a replay.
    #[error("it is a replay (its nonce was seen {ago_ms} ms ago)")]
    Replayed {
        /// How long ago the first copy was taken.
        ago_ms: u64,
    },
    /// A signed message missing what every node puts in (its sender, time or nonce).
    #[error("it is malformed: {0}")]
    Malformed(String),
}

/// Signs what this node sends and verifies what it receives, under the cluster secret. Cheap
/// to clone; clones share the nonces seen.
#[derive(Clone)]
pub struct Signer {
    secret: ClusterSecret,
    node: String,
    seen: Arc<Mutex<Seen>>,
    started_ms: u64,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// Nonces taken, each until its message's time leaves the window (after which the time alone
/// refuses a copy).
#[derive(Default)]
struct Seen {
    until: HashMap<String, (u64, u64)>,
    next_sweep: u64,
}

impl Signer {
    /// Signs as node `node`.
    pub fn new(secret: ClusterSecret, node: impl Into<String>) -> Signer {
        Signer {
            secret,
            node: node.into(),
            seen: Arc::default(),
            started_ms: now_ms(),
        }
    }

    /// The node it signs as.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Adds this node's name, the time, a fresh nonce and the signature over them, `subject`,
    /// every header in `headers` and `payload`. Header values are signed as NATS delivers them
    /// (without surrounding whitespace).
    pub fn sign(&self, subject: &str, headers: &mut HeaderMap, payload: &[u8]) {
        let nonce: [u8; 16] = rand::random();
        headers.insert(NODE_HEADER, self.node.as_str());
        headers.insert(TIME_HEADER, now_ms().to_string().as_str());
        headers.insert(NONCE_HEADER, hex(&nonce).as_str());
        let tag = self.tag(subject, headers, payload).finalize().into_bytes();
        headers.insert(SIGNATURE_HEADER, hex(&tag).as_str());
    }

    /// The node that sent a message published to `subject` with `headers` and `payload`, once
    /// its signature verified (in constant time), its time is within [`SIGNATURE_WINDOW`] and
    /// its nonce is new; else why it is refused. A message that verifies is remembered, so a
    /// copy of it is refused from then on.
    pub fn verify(
        &self,
        subject: &str,
        headers: Option<&HeaderMap>,
        payload: &[u8],
    ) -> Result<String, Refusal> {
        let headers = headers.ok_or(Refusal::Unsigned)?;
        let signature = headers
            .get(SIGNATURE_HEADER)
            .ok_or(Refusal::Unsigned)?
            .as_str();
        let signature = unhex(signature).ok_or(Refusal::BadSignature)?;
        self.tag(subject, headers, payload)
            .verify_slice(&signature)
            .map_err(|_| Refusal::BadSignature)?;
        let field = |name: &str| {
            headers
                .get(name)
                .map(|v| v.as_str().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| Refusal::Malformed(format!("no {name} header")))
        };
        let from = field(NODE_HEADER)?;
        let nonce = field(NONCE_HEADER)?;
        let time: u64 = field(TIME_HEADER)?
            .parse()
            .map_err(|_| Refusal::Malformed(format!("{TIME_HEADER} is not a number")))?;
        let now = now_ms();
        let window = SIGNATURE_WINDOW.as_millis() as u64;
        if time.abs_diff(now) > window {
            return Err(Refusal::Stale {
                skew_ms: time as i64 - now as i64,
                window_s: SIGNATURE_WINDOW.as_secs(),
            });
        }
        if time + START_ALLOWANCE_MS < self.started_ms {
            return Err(Refusal::BeforeStart {
                before_ms: self.started_ms - time,
            });
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if now >= seen.next_sweep {
            seen.until.retain(|_, (until, _)| *until >= now);
            seen.next_sweep = now + 1000;
        }
        if let Some((_, at)) = seen.until.get(&nonce) {
            return Err(Refusal::Replayed {
                ago_ms: now.saturating_sub(*at),
            });
        }
        seen.until.insert(nonce, (time + window, now));
        Ok(from)
    }

    /// The MAC, fed everything the signature covers. Each piece is length-prefixed, headers in
    /// name order (NATS keeps no order between names), each name's values in their order.
    fn tag(&self, subject: &str, headers: &HeaderMap, payload: &[u8]) -> HmacSha256 {
        let mut mac = self.secret.mac();
        let mut put = |bytes: &[u8]| {
            mac.update(&(bytes.len() as u64).to_be_bytes());
            mac.update(bytes);
        };
        put(DOMAIN);
        put(subject.as_bytes());
        let mut names: Vec<(&str, Vec<&str>)> = headers
            .iter()
            .map(|(name, values)| {
                let name: &str = name.as_ref();
                (name, values.iter().map(|v| v.as_str().trim()).collect())
            })
            .filter(|(name, _)| *name != SIGNATURE_HEADER)
            .collect();
        names.sort_by(|a, b| a.0.cmp(b.0));
        put(&(names.len() as u64).to_be_bytes());
        for (name, values) in names {
            put(name.as_bytes());
            put(&(values.len() as u64).to_be_bytes());
            for v in values {
                put(v.as_bytes());
            }
        }
        put(payload);
        mac
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(fill: u8) -> ClusterSecret {
        ClusterSecret::new(vec![fill; 32]).unwrap()
    }

    fn signed(signer: &Signer, subject: &str, body: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("Penguin-Method", "POST");
        h.append("Http-accept", "a");
        h.append("Http-accept", "b");
        signer.sign(subject, &mut h, body);
        h
    }

    #[test]
    fn a_signed_message_verifies_once_and_names_its_sender() {
        let (a, b) = (Signer::new(secret(7), "a"), Signer::new(secret(7), "b"));
        let h = signed(&a, "penguin.http.b", b"body");
        assert_eq!(
            b.verify("penguin.http.b", Some(&h), b"body"),
            Ok("a".into())
        );
        assert!(matches!(
            b.verify("penguin.http.b", Some(&h), b"body"),
            Err(Refusal::Replayed { .. })
        ));
    }

    #[test]
    fn anything_changed_or_signed_with_another_secret_is_refused() {
        let (a, b) = (Signer::new(secret(7), "a"), Signer::new(secret(7), "b"));
        let other = Signer::new(secret(8), "x");
        let bad = |h: &HeaderMap, subject: &str, body: &[u8]| {
            assert_eq!(
                b.verify(subject, Some(h), body),
                Err(Refusal::BadSignature),
                "{subject} {h:?}"
            );
        };
        let h = signed(&a, "penguin.http.b", b"body");
        bad(&h, "penguin.http.b", b"bodY");
        bad(&h, "penguin.http.c", b"body");
        for (name, value) in [
            ("Penguin-Method", "DELETE"),
            (NODE_HEADER, "c"),
            (TIME_HEADER, "1"),
            (NONCE_HEADER, "00"),
            ("Http-authorization", "Bearer x"),
        ] {
            let mut changed = h.clone();
            changed.insert(name, value);
            bad(&changed, "penguin.http.b", b"body");
        }
        let mut reordered = h.clone();
        reordered.insert("Http-accept", "b");
        reordered.append("Http-accept", "a");
        bad(&reordered, "penguin.http.b", b"body");
        bad(
            &signed(&other, "penguin.http.b", b"body"),
            "penguin.http.b",
            b"body",
        );
        let mut unsigned = h.clone();
        unsigned.insert(SIGNATURE_HEADER, "");
        bad(&unsigned, "penguin.http.b", b"body");
        let mut none = HeaderMap::new();
        none.insert("Penguin-Method", "POST");
        assert_eq!(
            b.verify("penguin.http.b", Some(&none), b""),
            Err(Refusal::Unsigned)
        );
        assert_eq!(
            b.verify("penguin.http.b", None, b""),
            Err(Refusal::Unsigned)
        );
        // None of the refused copies used the nonce up.
        assert_eq!(
            b.verify("penguin.http.b", Some(&h), b"body"),
            Ok("a".into())
        );
    }

    /// A message as node `a` signs it, but stamped `skew_ms` from now.
    fn signed_at(a: &Signer, skew_ms: i64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(NODE_HEADER, "a");
        h.insert(NONCE_HEADER, format!("{skew_ms}").as_str());
        h.insert(
            TIME_HEADER,
            (now_ms() as i64 + skew_ms).to_string().as_str(),
        );
        let tag = a.tag("s", &h, b"").finalize().into_bytes();
        h.insert(SIGNATURE_HEADER, hex(&tag).as_str());
        h
    }

    #[test]
    fn a_message_signed_outside_the_window_is_refused() {
        let a = Signer::new(secret(7), "a");
        let mut b = Signer::new(secret(7), "b");
        // As if b had run for a while.
        b.started_ms -= 60_000;
        for skew in [-31_000i64, 31_000] {
            assert!(
                matches!(
                    b.verify("s", Some(&signed_at(&a, skew)), b""),
                    Err(Refusal::Stale { .. })
                ),
                "{skew}"
            );
        }
        for skew in [-29_000i64, 29_000] {
            assert!(b.verify("s", Some(&signed_at(&a, skew)), b"").is_ok());
        }
    }

    #[test]
    fn a_message_signed_before_the_node_started_is_refused() {
        let a = Signer::new(secret(7), "a");
        let b = Signer::new(secret(7), "b");
        assert!(matches!(
            b.verify("s", Some(&signed_at(&a, -5_000)), b""),
            Err(Refusal::BeforeStart { .. })
        ));
        assert!(b.verify("s", Some(&signed_at(&a, -1_000)), b"").is_ok());
    }

    #[test]
    fn a_short_secret_is_refused_and_none_is_ever_printed() {
        let err = ClusterSecret::new(b"short".to_vec()).unwrap_err();
        assert!(err.to_string().contains("5 bytes"), "{err}");
        let s = ClusterSecret::new(b"0123456789abcdef0123456789abcdef".to_vec()).unwrap();
        assert!(!format!("{s:?}").contains("0123"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        let from_file = ClusterSecret::from_file(&path).unwrap();
        let h = signed(&Signer::new(from_file, "a"), "s", b"");
        assert!(Signer::new(s, "b").verify("s", Some(&h), b"").is_ok());
        std::fs::write(&path, "short\n").unwrap();
        let err = ClusterSecret::from_file(&path).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains("5 bytes"),
            "{err}"
        );
        let err = ClusterSecret::from_file(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing"), "{err}");
    }
}
