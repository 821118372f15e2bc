#![doc = include_str!("../README.md")]
// On docs.rs (`--cfg docsrs`, nightly) every feature-gated item shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use penguin_cluster as cluster;
pub use penguin_engine as engine;
pub use penguin_llm_providers as llm_providers;
pub use penguin_merge_queue as merge_queue;
pub use penguin_omni_protocol as omni_protocol;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub use penguin_server as server;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub use penguin_sse_transport as sse_transport;
pub use penguin_tools as tools;
pub use penguin_trace_store as trace_store;

pub use penguin_agent::{
    agent, config, goal, images, memory, models, pricing, prompt, replay, scenario, session,
    skills, subagent, window,
};
#[cfg(feature = "tools")]
#[cfg_attr(docsrs, doc(cfg(feature = "tools")))]
pub use penguin_agent::{hooks, launch, rewind};
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub use penguin_agent::{hosting, watch};
