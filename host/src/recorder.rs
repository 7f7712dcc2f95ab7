//! Recording a host's inputs as a trace file (`--record`), which `tether replay`
//! turns back into the exact actions.

use std::fs::File;
use std::io::{BufWriter, Write};

use tether_core::redact::Redactor;
use tether_core::trace::{header_line, id_key_hex, input_line, TraceHeader, TRACE_VERSION};
use tether_core::{Config, Input, Instant};

/// Writes a trace: a header, then one line per input, flushed as it goes so a
/// crash loses nothing. Secrets are redacted: the header holds a redacted config,
/// and any line quoting a secret has it blanked.
pub struct Recorder {
    out: BufWriter<File>,
}

/// What a trace header holds besides the configuration: the seed and keys a
/// replay needs to hand out the same ids and tokens.
pub struct TraceSecrets<'a> {
    /// The engine's seed.
    pub seed: u64,
    /// The key of its capability ids, if one was set.
    pub id_key: Option<&'a [u8; 32]>,
    /// A cluster's continuation keys (none for a process alone).
    pub continuation_keys: &'a [(u8, [u8; 32])],
}

impl Recorder {
    /// Starts a trace of a gateway created at `start` with `seed` (and ids
    /// keyed with `id_key`, when the host set one).
    pub fn start(
        file: File,
        config: &Config,
        TraceSecrets { seed, id_key, continuation_keys }: TraceSecrets<'_>,
        start: Instant,
        redactor: &Redactor,
    ) -> std::io::Result<Self> {
        let mut out = BufWriter::new(file);
        let id_key = id_key.map(id_key_hex);
        let continuation_keys = tether_core::trace::continuation_keys_text(continuation_keys);
        let config = config.redacted();
        let header = TraceHeader { tether_trace: TRACE_VERSION, seed, start, config, id_key, continuation_keys };
        // Arguments may quote a secret too (`--api-key "$KEY"`).
        writeln!(out, "{}", redactor.redact(&header_line(&header)))?;
        out.flush()?;
        Ok(Recorder { out })
    }

    /// Appends one input fed at `now`.
    pub fn record(&mut self, now: Instant, input: &Input, redactor: &Redactor) {
        let line = input_line(now, input);
        let _ = writeln!(self.out, "{}", redactor.redact(&line));
        let _ = self.out.flush();
    }
}
