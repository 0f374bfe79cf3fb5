//! Calling rate-limited APIs (see below).
