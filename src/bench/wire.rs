//! Text that came from the wire (a server's log, an HTTP body, a streamed piece) on its way to a
//! terminal or a report: control characters and bidirectional overrides escaped (`\u{1b}`), so
//! no server output can move the cursor, recolour the terminal or reorder a report's text. The
//! escaping itself lives in the base layer ([`crate::columns::escape_controls`]) so that host
//! facts (a GPU name from nvidia-smi) use the same one.

pub use crate::columns::escape_controls;
