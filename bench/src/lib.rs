//! Benchmarks of gpucache against its peers: trace generators, Belady's optimum and the
//! policy simulator shared by the benchmark binaries.

pub mod belady;
pub mod child;
pub mod disk;
pub mod gl;
pub mod heldout;
pub mod replay;
pub mod selfcheck;
pub mod throttle;
pub mod traces;
