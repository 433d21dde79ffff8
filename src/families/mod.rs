//! Model families, each written once: its config, its weights found by its own HF key names, and
//! its forward pass over the engines' operations ([`crate::engine::ops::Ops`]), which the CPU
//! engine computes and the GPU engine records. A new family is a new module here.

pub mod bert;
