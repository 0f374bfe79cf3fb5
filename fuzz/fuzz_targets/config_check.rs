//! A whole Floodgate file, any bytes, read as `floodgate config check`
//! reads it: the policies with the other sections allowed, then the
//! runtime's `server:` and `store:`, the gateway's `gateway:` and the
//! `http:` section (identities, the response contract, the layer). Nothing
//! panics, and a file that reads is either accepted or refused with
//! errors.
#![no_main]

use std::sync::Arc;

use floodgate_policy::PolicySet;
use floodgate_policy::read::{LoadOptions, load_str};
use floodgate_policy::yaml::Document;
use floodgate_runtime::host::{Both, Frontend};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // TLS settings name files: keep the fuzzer away from the disk.
    if text.contains("tls") {
        return;
    }
    let options = LoadOptions {
        other_sections: floodgate_runtime::host::sections(&Both::<
            floodgate_server::Rls,
            floodgate_gateway::Proxying,
        >::sections()),
        ..LoadOptions::default()
    };
    if let Ok(spec) = load_str("fuzz.yaml", text, &options) {
        let _ = PolicySet::compile(&spec);
    }
    let Ok(doc) = Document::parse(&Arc::from("fuzz.yaml"), text) else {
        return;
    };
    let docs = [doc];
    let _ = floodgate_runtime::settings::Settings::from_documents(&docs);
    let _ = floodgate_gateway::GatewayConfig::from_documents(&docs);
    let _ = floodgate_gateway::HttpSection::from_documents(&docs);
});
