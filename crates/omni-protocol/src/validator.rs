//! `StreamValidator`: checks a message stream against the seed's guarantees.
