//! A namespace-resolving walk over one XML part (quick-xml), with the
//! ElementTree semantics the extractors need: elements named by namespace URI
//! and local name, entities and character references decoded, and a document
//! that ends inside an element (or has none) reported as malformed, as expat
//! would.

use std::io::BufRead;

use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::{NsReader, XmlVersion};

/// One step of the walk.
pub(super) enum Node<'a> {
    /// An element opens (an empty element opens and closes).
    Open(&'a Element),
    Close,
    /// Character data (text, CDATA, a resolved reference) inside the current element.
    Text(&'a str),
}

/// Whether the walk goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    /// Enough has been seen; the rest of the part is not read.
    Stop,
}

pub(super) enum WalkError {
    /// Reading the bytes failed (inflating, the size cap).
    Io(String),
    Malformed(String),
}

/// An element's resolved name and attributes.
#[derive(Debug, Default)]
pub(super) struct Element {
    namespace: Option<String>,
    local: String,
    /// (namespace, local name, value)
    attributes: Vec<(Option<String>, String, String)>,
}

impl Element {
    pub(super) fn is(&self, namespace: &str, local: &str) -> bool {
        self.local == local && self.namespace.as_deref() == Some(namespace)
    }

    /// An attribute without a prefix.
    pub(super) fn attribute(&self, local: &str) -> Option<&str> {
        self.attribute_in(None, local)
    }

    pub(super) fn attribute_in(&self, namespace: Option<&str>, local: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(ns, name, _)| name == local && ns.as_deref() == namespace)
            .map(|(_, _, value)| value.as_str())
    }
}

fn owned_namespace(resolved: &ResolveResult<'_>) -> Option<String> {
    match resolved {
        ResolveResult::Bound(Namespace(uri)) => Some((*uri).to_owned()),
        _ => None,
    }
}

fn malformed(error: quick_xml::Error) -> WalkError {
    match error {
        quick_xml::Error::Io(io) => WalkError::Io(io.to_string()),
        other => WalkError::Malformed(other.to_string()),
    }
}

/// Feeds every node of the document in `input` to `visit`.
pub(super) fn walk<R: BufRead>(
    input: R,
    mut visit: impl FnMut(Node<'_>) -> Flow,
) -> Result<(), WalkError> {
    let mut reader = NsReader::from_reader(input);
    reader.config_mut().expand_empty_elements = true;
    let mut buf = Vec::new();
    let mut element = Element::default();
    let mut depth = 0usize;
    let mut seen_root = false;
    loop {
        buf.clear();
        let (resolved, event) = reader
            .read_resolved_event_into(&mut buf)
            .map_err(malformed)?;
        let flow = match event {
            Event::Start(start) => {
                element.namespace = owned_namespace(&resolved);
                element.local.clear();
                element.local.push_str(start.local_name().as_ref());
                element.attributes.clear();
                for attribute in start.attributes() {
                    let attribute =
                        attribute.map_err(|err| WalkError::Malformed(err.to_string()))?;
                    let (namespace, local) = reader.resolver().resolve_attribute(attribute.key);
                    if attribute.key.as_ref().starts_with("xmlns") {
                        continue;
                    }
                    let value = attribute
                        .normalized_value(XmlVersion::Implicit1_0)
                        .map_err(malformed)?;
                    element.attributes.push((
                        owned_namespace(&namespace),
                        local.as_ref().to_owned(),
                        value.into_owned(),
                    ));
                }
                depth += 1;
                seen_root = true;
                visit(Node::Open(&element))
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                visit(Node::Close)
            }
            Event::Text(text) => visit(Node::Text(&text.xml10_content())),
            Event::CData(data) => visit(Node::Text(&data.xml10_content())),
            Event::GeneralRef(reference) => {
                let resolved_char = reference
                    .resolve_char_ref()
                    .map_err(|err| WalkError::Malformed(err.to_string()))?;
                match resolved_char {
                    Some(c) => visit(Node::Text(c.encode_utf8(&mut [0u8; 4]))),
                    None => match resolve_predefined_entity(&reference) {
                        Some(text) => visit(Node::Text(text)),
                        None => {
                            return Err(WalkError::Malformed(format!(
                                "undefined entity &{};",
                                &*reference
                            )));
                        }
                    },
                }
            }
            Event::Eof => {
                if depth > 0 || !seen_root {
                    return Err(WalkError::Malformed("no element found".to_owned()));
                }
                return Ok(());
            }
            _ => Flow::Continue,
        };
        if flow == Flow::Stop {
            return Ok(());
        }
    }
}
