//! One integration-test binary: every test runs the real `kiln` executable in a temp dir.

mod common;
mod recipes;
mod image;
mod engine;
mod cuda_step;
mod python_step;
mod shipped;
mod doctor;
mod patch;
mod fetch_extract;
mod serve;
mod patch_step;
mod bench;
