//! penguin's context engine.
