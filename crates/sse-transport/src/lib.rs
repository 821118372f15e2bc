//! Serving the OmniMessage stream over Server-Sent Events.
