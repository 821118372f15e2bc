//! The cluster's errors.

/// What went wrong in the cluster layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// NATS could not be reached when the node started.
    #[error("cannot reach NATS at {url}: {reason}")]
    Unreachable {
        /// The URLs tried, comma-separated.
        url: String,
        /// The client's error.
        reason: String,
    },
    /// NATS or JetStream does not answer (connection lost, no quorum, a timeout): nothing was
    /// stored. A server answers 503 with the reason.
    #[error("the cluster is unavailable: {reason}")]
    Unavailable {
        /// What was being done and the client's error.
        reason: String,
    },
    /// Another node holds the session's lease.
    #[error("session {session} is held by node {owner}")]
    Held {
        /// The session.
        session: String,
        /// The node holding it.
        owner: String,
    },
    /// This node's lease on the session is gone (it lapsed, or another node took it): it must
    /// stand down and write nothing more for the session.
    #[error("this node no longer holds session {session}: {reason}")]
    Fenced {
        /// The session.
        session: String,
        /// How the node found out.
        reason: String,
    },
    /// A node name or session id that subjects and keys cannot carry.
    #[error("invalid {what} name {name:?}: use 1 to 128 of [a-zA-Z0-9_-]")]
    InvalidName {
        /// `node` or `session`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The NATS server lets anyone connect without credentials, and the node was not told to
    /// accept that: whoever reaches NATS could read every session's events and traces and forge
    /// the cluster's state.
    #[error(
        "NATS at {url} accepts connections without authentication: anyone who can reach it reads \
         every session's events and traces and can forge the cluster's state. Run nats-server \
         with authorization and give this node its credentials (user:password@ or token@ in the \
         URL, an nkey seed file or a .creds file), or accept an open NATS explicitly \
         (ClusterConfig::allow_unauthenticated)"
    )]
    Unauthenticated {
        /// The URLs, without credentials.
        url: String,
    },
    /// NATS credentials that cannot be used as given (a file that cannot be read, credentials
    /// given twice).
    #[error("NATS credentials: {reason}")]
    Credentials {
        /// What was wrong, naming the file or option (never a secret's value).
        reason: String,
    },
    /// The cluster secret cannot be used (unreadable, too short).
    #[error("{what}: {reason}")]
    Secret {
        /// Where it came from (`the cluster secret file /etc/penguin/secret`).
        what: String,
        /// What was wrong with it (never its value).
        reason: String,
    },
    /// More replicas were asked of a NATS that is a single server (not in a NATS cluster), which
    /// keeps one copy of each stream and refuses more.
    #[error(
        "NATS at {url} is a single server, not a NATS cluster, so it keeps one replica of the \
         cluster's state, and this node asked for {replicas}: set one replica (penguin serve \
         --replicas 1, or replicas = 1 under [cluster] in config.toml), or run a NATS cluster \
         of {replicas}"
    )]
    Replicas {
        /// The URLs, without credentials.
        url: String,
        /// The replicas asked for.
        replicas: usize,
    },
    /// A stored value that does not parse.
    #[error("malformed {what} in the cluster: {reason}")]
    Malformed {
        /// What it was (`lease of s1`, `event 4 of s1`).
        what: String,
        /// Why it does not parse.
        reason: String,
    },
}

impl ClusterError {
    pub(crate) fn unavailable(doing: &str, e: impl std::fmt::Display) -> ClusterError {
        ClusterError::Unavailable {
            reason: format!("{doing}: {e}"),
        }
    }

    /// Whether this is the cluster being unavailable (answered 503; retrying later may work).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ClusterError::Unavailable { .. } | ClusterError::Unreachable { .. }
        )
    }

    /// The HTTP status a server answers this error with: 503 when the cluster is unavailable,
    /// 409 when another node holds the session or this one was fenced, 400 for a bad name, 500
    /// for malformed data and a node that cannot join as configured.
    ///
    /// ```
    /// use penguin_cluster::ClusterError;
    /// let e = ClusterError::Unavailable { reason: "the connection to NATS is disconnected".into() };
    /// assert_eq!(e.http_status(), 503);
    /// assert!(e.to_string().contains("disconnected"));
    /// ```
    pub fn http_status(&self) -> u16 {
        match self {
            ClusterError::Unreachable { .. } | ClusterError::Unavailable { .. } => 503,
            ClusterError::Held { .. } | ClusterError::Fenced { .. } => 409,
            ClusterError::InvalidName { .. } => 400,
            ClusterError::Malformed { .. }
            | ClusterError::Unauthenticated { .. }
            | ClusterError::Credentials { .. }
            | ClusterError::Replicas { .. }
            | ClusterError::Secret { .. } => 500,
        }
    }
}

pub(crate) fn check_session(id: &str) -> Result<(), ClusterError> {
    if crate::valid_name(id) {
        Ok(())
    } else {
        Err(ClusterError::InvalidName {
            what: "session",
            name: id.to_owned(),
        })
    }
}
