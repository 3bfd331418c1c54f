//! What a kubelet upgrade does to each container, and what kubehash can prove about it.

pub mod coverage; // whether kubelet F's hash covers everything kubelet T's hash covers
pub mod matrix;
pub mod plan; // per-container verdicts for one node: rewrite, will-restart, unprovable, …
pub mod scan; // upgrade impact across a cluster or a file of pods // restarts for every pair of versions
