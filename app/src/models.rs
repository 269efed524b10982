//! The models a run asks, as the front doors name them: a backend (a
//! configured command or OpenAI-compatible server, or the client's model
//! through MCP sampling), the model profiles a task may ask for, the
//! largest answer taken from a model, and the keeper process that runs
//! `command:` models so they outlive no planb process.

pub use planb_engine::backend::sampling::Sampler;
pub use planb_engine::backend::{ANSWER_BYTES_MAX, Backend, PROFILES, keeper};
