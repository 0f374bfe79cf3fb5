//! The `http:` example of docs/policies.md reads and compiles, and behaves
//! as the text says.

use std::net::SocketAddr;

use floodgate_http::identity::{HttpIdentity, NoExtensions};

#[test]
fn the_documented_identity_section_is_valid_and_ignores_spoofed_addresses() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/policies.md"
    ))
    .unwrap();
    let block = doc
        .split("```yaml\n")
        .find(|b| b.starts_with("http:"))
        .and_then(|b| b.split("```").next())
        .expect("docs/policies.md has an http: example");
    let identity =
        HttpIdentity::from_yaml_str("policies.md", block).unwrap_or_else(|e| panic!("{e}"));
    let mut out = identity.new_output();
    let request = http::Request::get("/users/7")
        .header("x-forwarded-for", "1.1.1.1, 203.0.113.9")
        .header("x-api-key", "secret")
        .body(())
        .unwrap();
    let (parts, ()) = request.into_parts();
    // The peer is a trusted proxy: the client is the rightmost entry.
    let peer: SocketAddr = "10.0.0.5:4000".parse().unwrap();
    identity.build(&parts, peer.ip(), &NoExtensions, &mut out);
    let text = format!("{out:?}");
    assert!(text.contains("203.0.113.9"), "{text}");
    assert!(!text.contains("1.1.1.1"), "{text}");
    assert!(!text.contains("secret"), "the API key is hashed: {text}");
    // An untrusted peer: the header is ignored.
    let outside: SocketAddr = "198.51.100.1:4000".parse().unwrap();
    identity.build(&parts, outside.ip(), &NoExtensions, &mut out);
    let text = format!("{out:?}");
    assert!(
        text.contains("198.51.100.1") && !text.contains("203.0.113.9"),
        "{text}"
    );
}
