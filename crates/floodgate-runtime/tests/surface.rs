//! The runtime's public surface stays a handful of items: the host, the
//! listeners, the settings, TLS, the error and the settings structure;
//! everything else is reached through them.

#[test]
fn the_root_has_at_most_six_public_items() {
    let lib = include_str!("../src/lib.rs");
    let public: Vec<&str> = lib
        .lines()
        .filter(|l| l.starts_with("pub ") || l.starts_with("pub("))
        .filter(|l| !l.starts_with("pub(crate)"))
        .collect();
    assert!(public.len() <= 6, "{public:#?}");
}
