//! Reading the files tether trusts (its config, stored credentials, assertion,
//! ID-token and key files) so that nobody can hang it, balloon it or feed it a
//! planted secret through them.
//!
//! [`read_regular`] opens without waiting (a FIFO in a file's place would block
//! the reading thread until a writer comes, and with it the gateway), reads only
//! a regular file (a symlink to one is fine: Kubernetes projects tokens that way;
//! a symlink to `/dev/zero` is a device and refused), and only up to a size named
//! by the caller, checked before reading. [`read_private`] also refuses a file
//! another user owns or may write to (see [`crate::platform::untrusted`]).

use std::fmt;
use std::io::{self, Read};
use std::path::Path;

/// The largest config file read: 4 MiB.
pub const CONFIG_LIMIT: u64 = 4 * 1024 * 1024;
/// The largest secret file read (a stored credential, a token, a key): 1 MiB.
pub const SECRET_LIMIT: u64 = 1024 * 1024;

/// Why a file was refused, for people.
#[derive(Debug)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

fn refused(kind: io::ErrorKind, message: String) -> io::Error {
    io::Error::new(kind, Refused(message))
}

/// The bytes of the regular file at `path`, at most `limit` of them.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_checked(path, limit, false)
}

/// [`read_regular`] for a file that holds secrets: it must also belong to the
/// user running tether, and nobody else may write to it.
pub fn read_private(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_checked(path, limit, true)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_text(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_regular(path, limit)?)
        .map_err(|_| refused(io::ErrorKind::InvalidData, String::from("it is not UTF-8 text")))
}

fn read_checked(path: &Path, limit: u64, private: bool) -> io::Result<Vec<u8>> {
    let file = crate::platform::open_for_reading(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let what = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, a socket or a device)" };
        return Err(refused(io::ErrorKind::InvalidInput, format!("refusing to read it: it is {what}")));
    }
    if private {
        if let Some(why) = crate::platform::untrusted(&meta) {
            return Err(refused(io::ErrorKind::PermissionDenied, format!("refusing to trust it: {why}")));
        }
    }
    if meta.len() > limit {
        return Err(refused(io::ErrorKind::InvalidData, format!("it is larger than {}", human(limit))));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        // It grew while being read.
        return Err(refused(io::ErrorKind::InvalidData, format!("it is larger than {}", human(limit))));
    }
    Ok(bytes)
}

/// Refuses the directory at `path` when it holds secrets and another user owns it
/// or may write to it; a directory that is not there yet is fine.
pub fn check_private_dir(path: &Path) -> io::Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return Err(refused(io::ErrorKind::InvalidInput, format!("{} is not a directory", path.display())));
    }
    match crate::platform::untrusted(&meta) {
        Some(why) => Err(refused(
            io::ErrorKind::PermissionDenied,
            format!("refusing to keep credentials in {}: {why}", path.display()),
        )),
        None => Ok(()),
    }
}

fn human(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

#[cfg(test)]
mod tests;
