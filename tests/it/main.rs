//! One integration-test binary: every test runs the real `kiln` executable in a temp dir.

mod bench;
mod common;
mod cuda_step;
mod doctor;
mod engine;
mod fetch_extract;
mod fleet;
mod image;
mod patch;
mod patch_step;
mod python_step;
mod recipes;
mod serve;
mod shell_help;
mod shipped;
mod up_e2e;
mod up_outcome;
