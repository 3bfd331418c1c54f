//! The exact kubelet emulation. A container's JSON is decoded against one kubelet minor's Go type
//! graph, rendered as that kubelet renders it (go-spew `%#v` or Go `encoding/json`) and hashed with
//! FNV-1a 32, byte for byte.

pub mod version; // kubelet minors, hash epochs, version sets
pub mod schema; // per-minor Go type graph of v1.Container (data in schema/)
pub mod bytescan; // the next byte of interest (quote, escape, …), sixteen bytes at a time
pub mod quantity; // resource.Quantity parsing and canonical form
pub mod json; // the view decoding reads a parsed JSON value through
pub mod once_keys; // JSON values that refuse a repeated key (Go would merge them)
pub mod decode; // JSON → typed value tree, as encoding/json into the Go structs
pub mod spew; // go-spew %#v writer (kubelet ≤ 1.15)
pub mod spew_direct; // the same text straight from JSON, for one type graph
pub mod gojson; // Go encoding/json writer (kubelet 1.16 +)
pub mod gofloat; // a float64 as encoding/json writes it
pub mod spelling; // where a pod holds quantities; what a parsed value lost of its text that Go reads
pub mod sink; // FNV-1a 32 and byte sinks
pub mod lanes; // FNV-1a over many texts: lanes, shared prefixes once
pub mod alike; // when a second type graph decodes and hashes a container as the first
pub mod hash; // one function per epoch: the hashes a kubelet stores
pub mod diff; // why two kubelets' hashes of a container differ
pub mod facts; // version facts other than the hash: checkpoints, flags, cgroups
pub mod defaults; // the v1 defaults a kubelet applies to a static pod's containers
pub mod static_refs; // the API objects a static pod may not reference (1.34 +)
