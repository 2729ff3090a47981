//! kube-proxy's command line and configuration file, read exactly as upstream reads
//! them: the flags ([`flags`]), the KubeProxyConfiguration ([`config`]: the v1alpha1
//! schema, lenient decoding, defaulting, conversion, validation, YAML output), Go's
//! duration notation ([`duration`]), and the flag precedence that turns both into the
//! daemon's [`settings::Settings`].
//!
//! Pure: it knows nothing of the engine, the kernel or HTTP. Its one I/O is reading the
//! `--config` file (watching it is the sources' `config_watch`).

pub mod config;
pub mod conntrack;
pub mod duration;
pub mod flags;
pub mod flagz;
pub mod gates;
pub mod localhost;
pub mod settings;
