//! The history: one JSON object a line, as docs/nemesis.md defines it,
//! written by every recorder of the run through one shared handle.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// Microseconds since the Unix epoch (the history's clock).
pub fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// A shared, line-buffered history file.
#[derive(Clone, Debug)]
pub struct History {
    out: Arc<Mutex<std::io::BufWriter<std::fs::File>>>,
}

impl History {
    /// Creates (truncates) the file at `path`.
    pub fn create(path: &Path) -> History {
        let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        History { out: Arc::new(Mutex::new(std::io::BufWriter::new(file))) }
    }

    /// Appends one record (an object with its `type`).
    pub fn record(&self, record: &Value) {
        debug_assert!(record.get("type").is_some(), "a record without a type: {record}");
        let mut out = self.out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = serde_json::to_writer(&mut *out, record);
        let _ = out.write_all(b"\n");
    }

    /// Writes out what is buffered.
    pub fn flush(&self) {
        let _ = self.out.lock().unwrap_or_else(std::sync::PoisonError::into_inner).flush();
    }
}
