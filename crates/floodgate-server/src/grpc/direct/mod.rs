pub(crate) mod hpack;
