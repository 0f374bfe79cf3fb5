//! The `http:` section of a Floodgate configuration, read whole: the
//! request identity, the contract (`responses`) and the layer's settings
//! (`layer`), compared on reload so that an unchanged section keeps its
//! running layer.

use crate::contract::RESPONSES;
use crate::identity::SECTION as HTTP;
use crate::layer::{LAYER, LayerSettings};
use crate::{Contract, HttpIdentity};
use floodgate_policy::error::{ConfigErrors, Errors};
use floodgate_policy::yaml::Document;
use std::sync::Arc;

/// What the `http:` section says, read and compiled once; equal when they
/// say the same.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpSection {
    /// How requests become descriptors (its configuration:
    /// [`HttpIdentity::config`]).
    pub identity: HttpIdentity,
    /// What responses say.
    pub contract: Contract,
    /// Delays, queues, shedding, failure handling.
    pub layer: LayerSettings,
}

impl HttpSection {
    /// Reads the `http:` section of the Floodgate file `text` (named `file`
    /// in messages).
    pub fn from_yaml_str(file: &str, text: &str) -> Result<HttpSection, ConfigErrors> {
        let doc = Document::parse(&Arc::from(file), text)?;
        let node = doc.root().map()?.required(HTTP)?;
        let section = Self::from_documents(std::slice::from_ref(&doc))?;
        section.ok_or_else(|| node.error("missing required key 'http'").into())
    }

    /// Reads the `http:` section of the loaded documents (as
    /// [`floodgate_policy::read::load`] gives them; in one file only);
    /// `Ok(None)` when there is none.
    pub fn from_documents(documents: &[Document]) -> Result<Option<HttpSection>, ConfigErrors> {
        let mut errors = Errors::default();
        let mut found: Option<(HttpSection, String)> = None;
        for doc in documents {
            let Some(root) = errors.take(doc.root().map()) else {
                continue;
            };
            let Some(node) = root.get(HTTP) else {
                continue;
            };
            if let Some((_, first)) = &found {
                errors.push(node.error(format!("'{HTTP}' is already given in {first}")));
                continue;
            }
            let Some(map) = errors.take(node.map()) else {
                continue;
            };
            // Every part's problems, in order.
            let identity = HttpIdentity::from_yaml(node).map_err(|e| errors.extend(e));
            let contract = map
                .get(RESPONSES)
                .map_or(Ok(Contract::default()), Contract::from_yaml)
                .map_err(|e| errors.extend(e));
            let layer = map
                .get(LAYER)
                .map_or(Ok(LayerSettings::default()), LayerSettings::from_yaml)
                .map_err(|e| errors.extend(e));
            if let (Ok(identity), Ok(contract), Ok(layer)) = (identity, contract, layer) {
                let section = HttpSection {
                    identity,
                    contract,
                    layer,
                };
                found = Some((section, node.at().to_string()));
            }
        }
        errors.finish(found.map(|(s, _)| s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Option<HttpSection>, ConfigErrors> {
        let doc = Document::parse(&Arc::from("h.yaml"), text).unwrap();
        HttpSection::from_documents(&[doc])
    }

    #[test]
    fn reads_all_three_parts() {
        let s = read(
            "http:\n  domain: gw\n  descriptors: [[client_ip]]\n  responses: {status: 503}\n  layer: {max_delayed: 7}\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.identity.domain(), "gw");
        assert_eq!(s.contract.status.as_u16(), 503);
        assert_eq!(s.layer.max_delayed, 7);
        assert!(read("domains: []\n").unwrap().is_none());
    }

    #[test]
    fn equal_when_they_say_the_same() {
        let text = |routes: &str| {
            format!("http:\n  domain: gw\n  routes: [\"{routes}\"]\n  descriptors: [[route]]\n")
        };
        let a = read(&text("/a/{id}")).unwrap().unwrap();
        assert_eq!(a, read(&text("/a/{id}")).unwrap().unwrap());
        assert_ne!(a, read(&text("/a/{name}")).unwrap().unwrap());
        let mut b = a.clone();
        b.layer.max_delayed += 1;
        assert_ne!(a, b);
    }

    #[test]
    fn reports_every_problem() {
        let e = read(
            "http:\n  domain: gw\n  colour: red\n  responses: {status: 99}\n  layer: {on_error: maybe}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("colour"), "{e}");
        assert!(e.contains("on_error"), "{e}");
    }
}
