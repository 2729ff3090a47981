//! Watching nftables for changes made by other programs. The socket lives in
//! `nft-netlink` (this crate reaches the kernel only through other crates) and the
//! notification parsing in `nft-wire`; re-exported here for the engine's loop.

pub use nft_netlink::watch::*;
