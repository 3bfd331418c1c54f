//! What a kubelet upgrade does to each container, and what kubehash can prove about it.

pub mod cache; // answers for specs seen before, in bounded memory
pub mod coverage; // whether kubelet F's hash covers everything kubelet T's hash covers
pub mod created_with; // what the runtime recorded a container was created with, against its spec
pub mod statics; // a node's static pods: manifest, running sandbox, pin action
pub mod plan; // per-container verdicts for one node: rewrite, will-restart, unprovable, …
pub mod spill; // per-container details in bounded memory
pub mod runs; // sorting more than memory holds: sorted runs on disk, merged
pub mod totals; // a total per group (workload), any number of groups, in bounded memory
pub mod listings; // a pod counted once however often an input lists it
pub mod scan; // upgrade impact per container: assessment, cache, sources
pub mod report; // a scan's totals and groupings
pub mod preflight; // every other reason a new kubelet kills pods, checked before the swap
pub mod audit; // which containers an upgrade restarted, against a snapshot taken before
pub mod matrix; // restarts for every pair of versions
pub mod hashing; // `hash` over a whole input on every core, in input order
