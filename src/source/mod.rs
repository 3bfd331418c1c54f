//! Where pods, nodes and manifests come from: files and streams (JSON, JSON Lines, YAML), the
//! API server, and the node's static-pod manifests directory.

pub mod goread; // raw JSON bytes as Go's decoder reads them (invalid UTF-8, lone surrogates)
pub mod goyaml; // YAML into the JSON Go's YAML reader makes of it (YAML 1.1 scalars)
pub mod encoding; // inputs in UTF-16 or with a byte order mark, read as UTF-8 as go-yaml reads them
pub mod reader; // the one JSON/YAML stream reader every command uses
pub mod yaml; // YAML read a document, or a List's entry, at a time
pub mod frames; // where each object of a JSON input begins and ends, for parsing on several threads
pub mod doc; // one JSON value on a flat tape, read as a Value is: what `hash` parses frames into
pub mod name_image; // a container's name and image from its bytes, checked to decode (1.31 +)
pub mod pool; // reading on one thread, per-object work on every core, results in input order
pub mod parallel; // every object of an input parsed and worked on on every core, in input order
pub mod spool; // stdin kept as it is read, so that the framed path can read it a second time
pub mod input; // what `hash` hashes: containers, pods, lists, golden records
pub mod names; // label and annotation keys, label values, as the API server checks them
pub mod selector; // label selectors on pods read from files
pub mod pods; // pod splitting, container slots, states, workloads
pub mod nodes; // node name → kubelet version
pub mod claims; // the persistent volume behind a claim, as the kubelet finds it
pub mod cluster; // the API server: kubeconfig, pods, nodes, claims and persistent volumes
pub mod host; // the node's cgroups, kubelet checkpoints, config and flags (read only)
pub mod kubelet_args; // the kubelet's flags as pflag reads them, and its feature gates
pub mod kubelet_binary; // a kubelet binary's version, and whether a process is a kubelet
pub mod manifests; // static-pod manifests as the kubelet reads them
